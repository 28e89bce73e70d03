#include "sched/placement.h"

#include <algorithm>
#include <map>
#include <span>

namespace trainyard::sched {
namespace {

bool Excluded(const GangRequest& req, int n) {
  return !req.excluded.empty() && std::binary_search(req.excluded.begin(), req.excluded.end(), n);
}

// Picks `gpus` GPU positions out of `free`: the tightest NVLink domain that holds
// them all, else the lowest positions.
uint64_t PickGpus(const NodeSlot& s, uint64_t free, int gpus) {
  if (gpus == 0) return 0;
  int best = -1;
  int best_free = 65;
  for (size_t d = 0; d < s.nvlink_masks.size(); ++d) {
    int f = __builtin_popcountll(s.nvlink_masks[d] & free);
    if (f >= gpus && f < best_free) {
      best = static_cast<int>(d);
      best_free = f;
    }
  }
  uint64_t pool = best >= 0 ? (s.nvlink_masks[best] & free) : free;
  uint64_t out = 0;
  for (int i = 0; i < gpus; ++i) {
    uint64_t bit = pool & (~pool + 1);
    out |= bit;
    pool &= ~bit;
  }
  return out;
}

// Accumulates replicas node by node.
class Builder {
 public:
  Builder(const NodeIndex& index, const GangRequest& req) : index_(index), req_(req) {}

  int placed() const { return static_cast<int>(out_.replicas.size()); }
  bool full() const { return placed() >= req_.max_replicas; }
  bool enough() const { return placed() >= req_.shape.replicas; }

  // Adds as many replicas as fit on node n (up to what is still wanted).
  void AddNode(int n, uint64_t allowed_gpus = ~uint64_t{0}) {
    if (Excluded(req_, n)) return;
    int fit = index_.ReplicasFit(n, req_.shape);
    const NodeSlot& s = index_.slot(n);
    uint64_t free = s.free_mask & allowed_gpus;
    if (req_.shape.gpus > 0) fit = std::min(fit, __builtin_popcountll(free) / req_.shape.gpus);
    fit = std::min(fit, req_.max_replicas - placed());
    for (int k = 0; k < fit; ++k) {
      uint64_t mask = PickGpus(s, free, req_.shape.gpus);
      free &= ~mask;
      out_.replicas.emplace_back(n, mask);
    }
  }

  std::optional<GangPlacement> Result() {
    if (!enough()) return std::nullopt;
    return std::move(out_);
  }

 private:
  const NodeIndex& index_;
  const GangRequest& req_;
  GangPlacement out_;
};

// Nodes of `type` in `leaves` that have at least `min_free` free GPUs, in the
// order the style prefers: best fit takes the fewest free first; for a gang that
// spans nodes, the most free first, so it lands on few nodes.
template <typename Fn>
void ForNodes(const NodeIndex& index, int type, std::span<const int> leaves, int min_free,
              bool fewest_first, Fn&& fn) {
  min_free = std::max(min_free, 1);
  auto visit = [&](int f) {
    for (int leaf : leaves) {
      if (!index.LeafHasFree(type, leaf, f)) continue;
      if (!index.ForEachInBucket(type, leaf, f, fn)) return false;
    }
    return true;
  };
  if (fewest_first) {
    for (int f = min_free; f <= 64; ++f) {
      if (index.AnyWithFree(type, f) && !visit(f)) return;
    }
  } else {
    for (int f = 64; f >= min_free; --f) {
      if (index.AnyWithFree(type, f) && !visit(f)) return;
    }
  }
}

std::optional<GangPlacement> PlaceInLeaves(const NodeIndex& index, const GangRequest& req, int type,
                                           std::span<const int> leaves) {
  const int g = req.shape.gpus;
  // A gang that fits on one node goes to the tightest such node.
  if (req.max_replicas > 1) {
    const int want = req.max_replicas;
    for (int f = want * g; f <= 64; ++f) {
      if (!index.AnyWithFree(type, f)) continue;
      for (int leaf : leaves) {
        if (!index.LeafHasFree(type, leaf, f)) continue;
        int32_t found = -1;
        index.ForEachInBucket(type, leaf, f, [&](int32_t n) {
          if (Excluded(req, n) || index.ReplicasFit(n, req.shape) < want) return true;
          found = n;
          return false;
        });
        if (found >= 0) {
          Builder b(index, req);
          b.AddNode(found);
          return b.Result();
        }
      }
    }
  }
  Builder b(index, req);
  ForNodes(index, type, leaves, g, /*fewest_first=*/req.max_replicas == 1, [&](int32_t n) {
    b.AddNode(n);
    return !b.full();
  });
  return b.Result();
}

std::optional<GangPlacement> PlaceSameNode(const NodeIndex& index, const GangRequest& req,
                                           int type) {
  std::optional<GangPlacement> found;
  ForNodes(index, type, index.AllLeaves(), req.shape.replicas * req.shape.gpus, true,
           [&](int32_t n) {
             if (Excluded(req, n) || index.ReplicasFit(n, req.shape) < req.shape.replicas)
               return true;
             Builder b(index, req);
             b.AddNode(n);
             found = b.Result();
             return false;
           });
  return found;
}

std::optional<GangPlacement> PlaceSameNvlink(const NodeIndex& index, const GangRequest& req,
                                             int type) {
  const int g = std::max(req.shape.gpus, 1);
  const std::vector<int>& leaves = index.AllLeaves();
  // The domain with the least replica capacity that still holds the gang (the
  // lowest id among equals); a domain's capacity is summed over the nodes sharing it.
  int32_t best = -1;
  int64_t best_cap = 0;
  auto offer = [&](int32_t domain, int64_t cap) {
    if (cap >= req.shape.replicas &&
        (best < 0 || cap < best_cap || (cap == best_cap && domain < best))) {
      best = domain;
      best_cap = cap;
    }
  };
  std::map<int32_t, int64_t> shared;  // only when domains span nodes
  ForNodes(index, type, leaves, g, true, [&](int32_t n) {
    if (Excluded(req, n)) return true;
    const NodeSlot& s = index.slot(n);
    int node_fit = index.ReplicasFit(n, req.shape);
    for (size_t d = 0; d < s.nvlink_masks.size(); ++d) {
      int fit = std::min(node_fit, __builtin_popcountll(s.nvlink_masks[d] & s.free_mask) / g);
      if (index.DomainsSpanNodes()) {
        shared[s.nvlink_ids[d]] += fit;
      } else {
        offer(s.nvlink_ids[d], fit);
      }
    }
    return true;
  });
  for (const auto& [domain, cap] : shared) offer(domain, cap);
  if (best < 0) return std::nullopt;
  Builder b(index, req);
  ForNodes(index, type, leaves, g, false, [&](int32_t n) {
    const NodeSlot& s = index.slot(n);
    for (size_t d = 0; d < s.nvlink_ids.size(); ++d) {
      if (s.nvlink_ids[d] == best) b.AddNode(n, s.nvlink_masks[d]);
    }
    return !b.full();
  });
  return b.Result();
}

// Leaves that could hold `replicas` on their own, tightest first.
std::vector<int> LeavesThatFit(const NodeIndex& index, int type, int gpus, int replicas) {
  std::vector<std::pair<int64_t, int>> fits;
  for (int l = 0; l < index.LeafCount(); ++l) {
    int64_t bound = index.LeafReplicaBound(type, l, gpus);
    if (bound >= replicas) fits.emplace_back(bound, l);
  }
  std::sort(fits.begin(), fits.end());
  std::vector<int> out;
  for (const auto& f : fits) out.push_back(f.second);
  return out;
}

std::optional<GangPlacement> PlaceSameLeaf(const NodeIndex& index, const GangRequest& req,
                                           int type) {
  for (int leaf : LeavesThatFit(index, type, req.shape.gpus, req.shape.replicas)) {
    if (auto p = PlaceInLeaves(index, req, type, std::span<const int>(&leaf, 1))) return p;
  }
  return std::nullopt;
}

std::optional<GangPlacement> PlaceFirstFit(const NodeIndex& index, const GangRequest& req,
                                           int type) {
  Builder b(index, req);
  for (int n = 0; n < index.NodeCount() && !b.full(); ++n) {
    const NodeSlot& s = index.slot(n);
    if (req.shape.gpus > 0 && s.type != type) continue;
    b.AddNode(n);
  }
  return b.Result();
}

std::optional<GangPlacement> PlaceOfType(const NodeIndex& index, const GangRequest& req, int type,
                                         const PlacementStyle& style) {
  if (index.MaxFree(type) < req.shape.gpus) return std::nullopt;  // no node has room for one
  const TopologyConstraint c = req.topology.constraint;
  if (c != TopologyConstraint::kNone) {
    std::optional<GangPlacement> p;
    if (c == TopologyConstraint::kSameNode) p = PlaceSameNode(index, req, type);
    if (c == TopologyConstraint::kSameNvlink) p = PlaceSameNvlink(index, req, type);
    if (c == TopologyConstraint::kSameLeaf) p = PlaceSameLeaf(index, req, type);
    if (p || req.topology.hard) return p;
  }
  if (!style.best_fit) return PlaceFirstFit(index, req, type);
  const std::vector<int>& all = index.AllLeaves();
  if (!style.pack_topology || req.max_replicas == 1) return PlaceInLeaves(index, req, type, all);
  // One leaf if any can hold the gang; else the fewest leaves, fullest first.
  if (auto p = PlaceSameLeaf(index, req, type)) return p;
  std::vector<std::pair<int64_t, int>> bounds;
  for (int l = 0; l < index.LeafCount(); ++l) {
    bounds.emplace_back(-index.LeafReplicaBound(type, l, req.shape.gpus), l);
  }
  std::sort(bounds.begin(), bounds.end());
  std::vector<int> chosen;
  int64_t total = 0;
  for (const auto& [neg, l] : bounds) {
    if (neg == 0) break;
    chosen.push_back(l);
    total -= neg;
    if (total >= req.max_replicas) break;
  }
  if (total < req.shape.replicas) return std::nullopt;
  if (auto p = PlaceInLeaves(index, req, type, chosen)) return p;
  return PlaceInLeaves(index, req, type, all);
}

// A replica with no GPUs fits on any schedulable node with the CPUs and memory.
// same-nvlink means nothing without GPUs and is read as same-node.
std::optional<GangPlacement> PlaceCpuOnly(const NodeIndex& index, const GangRequest& req) {
  const TopologyConstraint c = req.topology.constraint;
  if (c == TopologyConstraint::kSameNode || c == TopologyConstraint::kSameNvlink) {
    for (int n = 0; n < index.NodeCount(); ++n) {
      if (!Excluded(req, n) && index.ReplicasFit(n, req.shape) >= req.shape.replicas) {
        Builder b(index, req);
        b.AddNode(n);
        return b.Result();
      }
    }
    if (req.topology.hard) return std::nullopt;
  }
  if (c == TopologyConstraint::kSameLeaf) {
    for (int leaf = 0; leaf < index.LeafCount(); ++leaf) {
      Builder b(index, req);
      for (int n = 0; n < index.NodeCount() && !b.full(); ++n) {
        if (index.slot(n).leaf == leaf) b.AddNode(n);
      }
      if (b.enough()) return b.Result();
    }
    if (req.topology.hard) return std::nullopt;
  }
  Builder b(index, req);
  for (int n = 0; n < index.NodeCount() && !b.full(); ++n) b.AddNode(n);
  return b.Result();
}

}  // namespace

bool MayFit(const NodeIndex& index, const GangRequest& req) {
  if (req.shape.gpus <= 0) return true;
  const bool one_leaf = req.topology.hard && req.topology.constraint != TopologyConstraint::kNone;
  for (int t = 0; t < index.TypeCount(); ++t) {
    if (req.shape.type >= 0 && t != req.shape.type) continue;
    int64_t total = 0;
    for (int l = 0; l < index.LeafCount(); ++l) {
      int64_t b = index.LeafReplicaBound(t, l, req.shape.gpus);
      if (one_leaf && b >= req.shape.replicas) return true;
      total += b;
    }
    if (!one_leaf && total >= req.shape.replicas) return true;
  }
  return false;
}

std::optional<GangPlacement> PlaceGang(const NodeIndex& index, const GangRequest& request,
                                       const PlacementStyle& style) {
  if (request.shape.replicas <= 0 || request.max_replicas < request.shape.replicas) {
    return std::nullopt;
  }
  if (request.shape.gpus <= 0) return PlaceCpuOnly(index, request);
  if (request.shape.gpus > 64) return std::nullopt;
  if (request.shape.type >= 0) return PlaceOfType(index, request, request.shape.type, style);
  // Any GPU type: one type per gang (mixing models slows every rank to the slowest);
  // try the types with the least free capacity first, keeping big pools whole.
  std::vector<std::pair<int64_t, int>> types;
  for (int t = 0; t < index.TypeCount(); ++t) types.emplace_back(index.FreeGpus(t), t);
  std::sort(types.begin(), types.end());
  for (const auto& [free, t] : types) {
    if (free < static_cast<int64_t>(request.shape.gpus) * request.shape.replicas) continue;
    if (auto p = PlaceOfType(index, request, t, style)) return p;
  }
  return std::nullopt;
}

void Commit(NodeIndex& index, const GangPlacement& placement, const Shape& shape) {
  for (const auto& [n, mask] : placement.replicas) index.Take(n, mask, shape.cpu, shape.mem);
}

void Uncommit(NodeIndex& index, const GangPlacement& placement, const Shape& shape) {
  for (const auto& [n, mask] : placement.replicas) index.Release(n, mask, shape.cpu, shape.mem);
}

std::vector<Placement> ToPlacements(const NodeIndex& index, const GangPlacement& placement) {
  std::vector<Placement> out;
  out.reserve(placement.replicas.size());
  for (const auto& [n, mask] : placement.replicas) {
    const Node& node = index.snapshot().nodes[index.slot(n).node];
    Placement p;
    p.node = node.name;
    for (int g = 0; g < 64; ++g) {
      if (mask & (uint64_t{1} << g)) p.gpus.push_back(node.gpus[g].index);
    }
    out.push_back(std::move(p));
  }
  return out;
}

int LeavesSpanned(const NodeIndex& index, const GangPlacement& placement) {
  std::vector<int> leaves;
  for (const auto& [n, mask] : placement.replicas) leaves.push_back(index.slot(n).leaf);
  std::sort(leaves.begin(), leaves.end());
  return static_cast<int>(std::unique(leaves.begin(), leaves.end()) - leaves.begin());
}

}  // namespace trainyard::sched
