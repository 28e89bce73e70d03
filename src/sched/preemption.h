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
// A pass may search for victims thousands of times over the same running jobs, so
// what does not change within a pass (each victim's GPUs in index terms, the cost
// order, which victims sit on which node and leaf) is computed once, in a
// VictimPool; a search only says which of the pool's victims it may use.
//
// Private to sched/. Thread-safety: none (a pool keeps scratch space for searches).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "sched/index.h"
#include "sched/placement.h"

namespace trainyard::sched {

// Whether a search may stop one victim of the pool.
enum class VictimUse : uint8_t {
  kNo,
  kYes,
  kLastResort,  // only when victims marked kYes do not suffice; costs `penalty` more
};

struct VictimSet {
  std::vector<int> running;  // indices into Snapshot::running
  double cost = 0;
  GangPlacement placement;  // where the gang goes once the victims have stopped
};

class VictimPool;
class VictimSearch;  // preemption.cc

// `use` has one entry per pool victim. `index` is used for what-if placements and
// left as it was found.
std::optional<VictimSet> FindVictims(NodeIndex& index, const GangRequest& request,
                                     const PlacementStyle& style, const VictimPool& pool,
                                     const std::vector<VictimUse>& use, double penalty,
                                     int max_victims);

// The running jobs that may be victims in one pass.
class VictimPool {
 public:
  // `running`: indices into the snapshot's running jobs; `costs`: each one's cost as
  // a victim (same length).
  VictimPool(const NodeIndex& index, const std::vector<int>& running,
             const std::vector<double>& costs);

  int size() const { return static_cast<int>(victims_.size()); }
  int running(int v) const { return victims_[v].running; }
  // Its GPUs as (node index, GPU positions), one entry per replica.
  struct Replica {
    int32_t node;
    uint64_t mask;
  };
  const Replica* replicas_begin(int v) const { return &replicas_[victims_[v].first]; }
  const Replica* replicas_end(int v) const {
    return &replicas_[victims_[v].first + victims_[v].count];
  }
  // The victims with a replica on node `n` (index terms).
  std::span<const int> VictimsOn(int32_t n) const;

 private:
  friend std::optional<VictimSet> FindVictims(NodeIndex&, const GangRequest&, const PlacementStyle&,
                                              const VictimPool&, const std::vector<VictimUse>&,
                                              double, int);
  friend class VictimSearch;
  struct Victim {
    int running;
    double cost;
    int64_t gpus;
    int32_t first;  // into replicas_
    int32_t count;
  };
  std::vector<Victim> victims_;
  std::vector<Replica> replicas_;
  std::vector<int> order_;  // victims, cheapest per GPU first (ties: running index)
  // Victims with a replica on each node / leaf, in `order_` order (CSR layout).
  std::vector<int32_t> node_ids_;  // nodes with victims, ascending
  std::vector<int32_t> node_start_;
  std::vector<int> node_victims_;
  std::vector<int32_t> leaf_start_;  // LeafCount() + 1 entries
  std::vector<int> leaf_victims_;
  // Scratch for searches: free GPUs per node as victims are tried, valid where
  // `stamp_` equals the current search.
  mutable std::vector<int> free_;
  mutable std::vector<uint32_t> stamp_;
  mutable uint32_t epoch_ = 0;
};

}  // namespace trainyard::sched
