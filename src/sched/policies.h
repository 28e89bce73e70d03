// The factories of every named policy piece, one per file; policy.cc maps names to
// them. Private to sched/.
#pragma once

#include <memory>

#include "sched/policy.h"

namespace trainyard::sched {

std::unique_ptr<Ordering> NewPriorityOrdering();    // ordering_priority.cc
std::unique_ptr<Ordering> NewFifoOrdering();        // ordering_fifo.cc
std::unique_ptr<Ordering> NewLasOrdering();         // ordering_las.cc
std::unique_ptr<Ordering> NewShortFirstOrdering();  // ordering_short_first.cc

PlacementStyle TopologyPlacement();       // placement_topology.cc
PlacementStyle BestFitPlacement();        // placement_best_fit.cc
PlacementStyle FirstFitPlacement();       // placement_first_fit.cc
PlacementStyle FragmentationPlacement();  // placement_fragmentation.cc

std::unique_ptr<PreemptionCost> NewLostWorkCost();  // preemption_cost_lost_work.cc

}  // namespace trainyard::sched
