// First-fit placement: nodes in the order the cluster lists them. A baseline for the
// simulator's fragmentation comparisons.
#include "sched/policies.h"

namespace trainyard::sched {

PlacementStyle FirstFitPlacement() { return PlacementStyle{false, false}; }

}  // namespace trainyard::sched
