// Topology placement (the default): a gang goes under as few leaf switches as
// possible (one when any leaf has room), on as few nodes as possible, choosing the
// tightest fits so that whole nodes and whole leaves stay free for large gangs.
// Collective operations cross the spine only when they must.
#include "sched/policies.h"

namespace trainyard::sched {

PlacementStyle TopologyPlacement() { return PlacementStyle{true, true}; }

}  // namespace trainyard::sched
