// Fragmentation-aware placement: best fit, except that a job of one replica (or a
// share of one GPU) goes where it adds the least fragmentation for the workload mix,
// the GPU capacity left on a node that the common kinds of jobs could not use (as
// in FGD, "Beware of Fragmentation", ATC'23). Gangs of several whole-GPU replicas
// are placed as best fit places them.
#include "sched/policies.h"

namespace trainyard::sched {

PlacementStyle FragmentationPlacement() { return PlacementStyle{false, true, true}; }

}  // namespace trainyard::sched
