// Gang placement: choosing nodes and GPUs for all replicas of a job at once.
//
// A gang is placed whole (at least min_replicas replicas, at most replicas) or not
// at all. Hard topology constraints (same-node, same-nvlink, same-leaf) are never
// broken; soft ones are tried first and dropped when they cannot be met. Without a
// constraint, the named placement style decides:
//   topology   fewest leaf switches, then fewest nodes, then best fit (the default)
//   best-fit   the nodes with the fewest free GPUs that fit, anywhere
//   first-fit  nodes in the order the cluster lists them
// Best fit leaves whole nodes whole for the gangs that need them; within a node,
// a replica's GPUs come from one NVLink domain when one has room.
//
//   fragmentation  best fit, except that a single replica (or a share) goes where
//                  it adds the least fragmentation for the workload mix: the GPU
//                  capacity left on the node that the common kinds of jobs could
//                  not use (FGD, ATC'23)
//
// Shares of one GPU (Shape::share): first fit takes the first GPU with room in node
// order; best fit (and topology) fills the shared GPU left with the least room, then
// takes a free GPU on the node with the fewest free GPUs, so shares do not scatter
// over whole GPUs that multi-GPU jobs need (the fragmentation GPU sharing causes).
//
// Private to sched/. Thread-safety: none.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "sched/index.h"

namespace trainyard::sched {

// The kinds of replicas jobs ask for and their part of the GPU capacity asked for
// (weights sum to 1), for fragmentation-aware placement. MixOf takes them from the
// snapshot's running and pending jobs, replicas counted, the largest kMaxKinds.
struct WorkloadMix {
  struct Kind {
    int16_t type = -1;  // -1: any GPU type
    int milli = 0;      // GPUs per replica in thousandths (a share is < kWholeGpu)
    int64_t cpu = 0;
    int64_t mem = 0;
    double weight = 0;
  };
  static constexpr size_t kMaxKinds = 24;
  std::vector<Kind> kinds;
};
WorkloadMix MixOf(const NodeIndex& index);

struct PlacementStyle {
  bool pack_topology = true;         // group a gang under few leaves
  bool best_fit = true;              // false: first fit in node order
  bool fragmentation = false;        // single replicas and shares: least added fragmentation
  const WorkloadMix* mix = nullptr;  // set by the pass when `fragmentation`
};

struct GangRequest {
  Shape shape;           // shape.replicas = the fewest replicas acceptable
  int max_replicas = 1;  // place up to this many
  TopologySpec topology;
  std::span<const int32_t> excluded;  // sorted node indices; empty: none
  std::span<const int32_t> only;      // sorted node indices it must use; empty: any
};

struct GangPlacement {
  std::vector<std::pair<int32_t, uint64_t>> replicas;  // (node, GPU positions) per replica
};

// A cheap upper bound: false means PlaceGang would certainly fail (counts GPUs per
// leaf only; true may still fail on CPUs, memory, exclusions or NVLink domains).
bool MayFit(const NodeIndex& index, const GangRequest& request);

// Places the gang on the index's free capacity, or returns nullopt. Does not change
// the index; call Commit to take the resources.
std::optional<GangPlacement> PlaceGang(const NodeIndex& index, const GangRequest& request,
                                       const PlacementStyle& style);
void Commit(NodeIndex& index, const GangPlacement& placement, const Shape& shape);
// The inverse of Commit.
void Uncommit(NodeIndex& index, const GangPlacement& placement, const Shape& shape);

// Node names and GPU indices, as agents know them.
std::vector<Placement> ToPlacements(const NodeIndex& index, const GangPlacement& placement);

// How many leaf switches a placement spans.
int LeavesSpanned(const NodeIndex& index, const GangPlacement& placement);

}  // namespace trainyard::sched
