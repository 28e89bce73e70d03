// Reservations for backfill: when a gang cannot start now, find when and where it
// could, from the time limits of running jobs, and hold those GPUs for it.
//
// Running jobs are released in the order their time limits end them (a job with no
// time limit never ends, as far as planning knows) until the gang fits; that time
// is the reservation's earliest start and that placement its GPUs. Those of its
// GPUs that are free now are marked reserved in the index: later jobs in the pass
// may use them only if they finish before the reservation starts (EASY backfill,
// per GPU rather than per node). GPUs still busy are not marked: their jobs end by
// the reservation's start by construction.
//
// Private to sched/. Thread-safety: none.
#pragma once

#include <optional>
#include <unordered_map>

#include "sched/decisions.h"
#include "sched/index.h"
#include "sched/placement.h"

namespace trainyard::sched {

struct PlannedStart {
  Timestamp start{};
  GangPlacement placement;
};

// A gang bound earlier in the same pass: it is not in the snapshot's running jobs
// but holds capacity until its time limit.
struct PassBind {
  GangPlacement placement;
  Shape shape;
  Duration time_limit{0};  // 0: none
};

// GPUs (node -> positions) that earlier jobs of the pass count on: a reservation's
// busy GPUs, a preempting gang's victims. Planning never hands them to another job.
using Claims = std::unordered_map<int32_t, uint64_t>;

// Finds the earliest start of `request` and marks its currently free GPUs reserved.
// nullopt when no set of time-limited jobs would make room.
std::optional<PlannedStart> ReserveEarliestStart(NodeIndex& index, const GangRequest& request,
                                                 const PlacementStyle& style,
                                                 const std::vector<PassBind>& bound_this_pass,
                                                 const Claims& claimed);

}  // namespace trainyard::sched
