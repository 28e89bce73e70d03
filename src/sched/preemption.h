// Victim search: which running gangs to stop so that a blocked gang fits.
//
// Among the candidate victims the caller allows (priority and quota rules are the
// caller's), find a set whose GPUs, with what is free, hold the blocked gang in the
// right topology, at the least total cost. Victims are whole gangs. The search is
// greedy per scope (one leaf switch, one node, or the whole cluster, depending on
// the gang's constraint, its size and the placement style): add victims
// cheapest-per-GPU first until the scope's replica capacity suffices, then drop any
// victim the rest can do without, most expensive first; the cheapest scope wins,
// and a real placement on the freed capacity confirms it. Per-node scopes (for a
// gang that fits on one node) let two cheap victims on one node beat one dearer
// victim elsewhere. The result is a good set, not always the cheapest possible one
// (that is a knapsack problem); see docs/scheduler.md.
//
// Private to sched/. Thread-safety: none.
#pragma once

#include <optional>
#include <vector>

#include "sched/index.h"
#include "sched/placement.h"

namespace trainyard::sched {

struct Candidate {
  int running = 0;  // index into Snapshot::running
  double cost = 0;
  // Its GPUs as (node index, GPU positions) per replica; computed from the snapshot
  // when null.
  const std::vector<std::pair<int32_t, uint64_t>>* gpus = nullptr;
};

struct VictimSet {
  std::vector<int> running;  // indices into Snapshot::running
  double cost = 0;
  GangPlacement placement;  // where the gang goes once the victims have stopped
};

// `index` is used for what-if placements and left as it was found.
std::optional<VictimSet> FindVictims(NodeIndex& index, const GangRequest& request,
                                     const PlacementStyle& style,
                                     const std::vector<Candidate>& candidates, int max_victims);

}  // namespace trainyard::sched
