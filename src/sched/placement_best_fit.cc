// Best-fit placement: the nodes with the fewest free GPUs that still fit, anywhere in
// the cluster, ignoring leaf switches. Minimises fragmentation of single-node jobs.
#include "sched/policies.h"

namespace trainyard::sched {

PlacementStyle BestFitPlacement() { return PlacementStyle{false, true}; }

}  // namespace trainyard::sched
