#include "sched/placement.h"

#include <algorithm>
#include <array>
#include <map>
#include <span>
#include <tuple>

namespace trainyard::sched {
namespace {

bool Excluded(const GangRequest& req, int n) {
  return (!req.excluded.empty() &&
          std::binary_search(req.excluded.begin(), req.excluded.end(), n)) ||
         (!req.only.empty() && !std::binary_search(req.only.begin(), req.only.end(), n));
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

// Fragmentation of one node for the workload mix (FGD, "Beware of Fragmentation",
// ATC'23): for each kind of job, the GPU capacity (thousandths) on the node that
// kind could not use, weighted by how common the kind is. Kinds of another GPU type
// are left out: they could use none of it whatever is placed, the same for every
// choice. `rooms` holds each GPU's room (ShareRoom).
double Fragmentation(const WorkloadMix& mix, int type, std::span<const int> rooms, int64_t cpu,
                     int64_t mem) {
  int total = 0;
  int whole = 0;
  for (int r : rooms) {
    total += r;
    whole += r == kWholeGpu ? 1 : 0;
  }
  if (total == 0) return 0;
  double f = 0;
  for (const WorkloadMix::Kind& k : mix.kinds) {
    if (k.type >= 0 && k.type != type) continue;
    int unusable = total;
    if (k.cpu <= cpu && k.mem <= mem) {
      if (k.milli < kWholeGpu) {
        int small = 0;
        bool fits = false;
        for (int r : rooms) {
          if (r >= k.milli) {
            fits = true;
          } else {
            small += r;
          }
        }
        if (fits) unusable = small;
      } else if (whole >= k.milli / kWholeGpu) {
        unusable = total - whole * kWholeGpu;  // shared GPUs' rooms
      }
    }
    f += k.weight * unusable;
  }
  return f;
}

// Replicas that take a share of one GPU (Shape::share), placed one after another on
// what the ones before them left.
class ShareBuilder {
 public:
  ShareBuilder(const NodeIndex& index, const GangRequest& req, const PlacementStyle& style,
               int type)
      : index_(index), req_(req), style_(style), type_of_request_(type) {}

  // Places replicas on the nodes in [first, last) that `in_scope` accepts until
  // max_replicas or no room is left; the result when at least shape.replicas found room.
  template <typename Scope>
  std::optional<GangPlacement> Place(int first, int last, Scope&& in_scope) {
    out_.replicas.clear();
    type_ = type_of_request_;
    while (static_cast<int>(out_.replicas.size()) < req_.max_replicas) {
      const auto [n, g] = Choose(first, last, in_scope);
      if (n < 0) break;
      type_ = index_.slot(n).type;  // a gang does not mix GPU types
      out_.replicas.emplace_back(n, uint64_t{1} << g);
    }
    if (static_cast<int>(out_.replicas.size()) < req_.shape.replicas) return std::nullopt;
    return std::move(out_);
  }

 private:
  // Room left on GPU `g` of node `n` after this placement's replicas.
  int Room(int n, int g) const {
    int room = index_.ShareRoom(n, g);
    for (const auto& [m, mask] : out_.replicas) {
      if (m == n && (mask >> g & 1) != 0) room -= req_.shape.share;
    }
    return room;
  }
  // This placement's replicas on node `n`.
  int64_t OnNode(int n) const {
    int64_t count = 0;
    for (const auto& r : out_.replicas) count += r.first == n ? 1 : 0;
    return count;
  }
  bool NodeFits(int n) const {
    const NodeSlot& s = index_.slot(n);
    if (!s.schedulable || s.type < 0 || (type_ >= 0 && s.type != type_)) return false;
    if (req_.shape.gpu_memory > s.gpu_memory || Excluded(req_, n)) return false;
    const int64_t on_node = OnNode(n) + 1;  // with this replica
    return s.free_cpu >= req_.shape.cpu * on_node && s.free_mem >= req_.shape.mem * on_node;
  }
  // (node, GPU position) for the next replica; node -1 when nothing has room.
  //   first fit: the first node with room, its first GPU with room;
  //   fragmentation: the GPU whose taking adds the least fragmentation for the mix,
  //     then the tightest;
  //   best fit: the shared GPU this replica fills the most, else a free GPU on the
  //     node with the fewest free GPUs, so whole GPUs and whole nodes stay whole for
  //     the jobs that need them.
  template <typename Scope>
  std::pair<int, int> Choose(int first, int last, Scope&& in_scope) const {
    const int share = req_.shape.share;
    std::pair<int, int> best{-1, -1};
    std::pair<double, int> best_key{0, 0};
    std::array<int, 64> rooms{};
    for (int n = first; n < last; ++n) {
      if (!in_scope(n) || !NodeFits(n)) continue;
      const NodeSlot& s = index_.slot(n);
      int free = 0;
      for (int g = 0; g < s.gpu_count; ++g) {
        rooms[g] = Room(n, g);
        free += rooms[g] == kWholeGpu ? 1 : 0;
      }
      const std::span<int> node_rooms(rooms.data(), static_cast<size_t>(s.gpu_count));
      double before = 0;
      int64_t cpu = 0, mem = 0;
      if (style_.mix != nullptr) {
        const int64_t on_node = OnNode(n);
        cpu = s.free_cpu - req_.shape.cpu * on_node;
        mem = s.free_mem - req_.shape.mem * on_node;
        before = Fragmentation(*style_.mix, s.type, node_rooms, cpu, mem);
      }
      for (int g = 0; g < s.gpu_count; ++g) {
        const int room = rooms[g];
        if (room < share) continue;
        if (!style_.best_fit) return {n, g};
        std::pair<double, int> key;
        if (style_.mix != nullptr) {
          rooms[g] -= share;
          key = {Fragmentation(*style_.mix, s.type, node_rooms, cpu - req_.shape.cpu,
                               mem - req_.shape.mem) -
                     before,
                 room - share};
          rooms[g] += share;
        } else {
          key = room < kWholeGpu ? std::pair<double, int>{0, room - share}
                                 : std::pair<double, int>{1, free};
        }
        if (best.first < 0 || key < best_key) {
          best_key = key;
          best = {n, g};
        }
      }
    }
    return best;
  }

  const NodeIndex& index_;
  const GangRequest& req_;
  const PlacementStyle& style_;
  const int type_of_request_;  // -1: any
  int type_ = -1;              // of this placement's GPUs, once it has one
  GangPlacement out_;
};

// A gang of shares on GPUs of `type` (-1: any one type): a same-node or same-NVLink constraint
// keeps its replicas on one node (a share has one GPU: the node's domains hold it whole), same-leaf
// on one leaf; each is tried in node or leaf order, and a soft one is dropped when it cannot be
// met.
std::optional<GangPlacement> PlaceShares(const NodeIndex& index, const GangRequest& req,
                                         const PlacementStyle& style, int type) {
  ShareBuilder b(index, req, style, type);
  const TopologyConstraint c = req.topology.constraint;
  if (c != TopologyConstraint::kNone && req.max_replicas > 1) {
    const bool node = c == TopologyConstraint::kSameNode || c == TopologyConstraint::kSameNvlink;
    const int scopes = node ? index.NodeCount() : index.LeafCount();
    for (int k = 0; k < scopes; ++k) {
      auto p = node ? b.Place(k, k + 1, [](int) { return true; })
                    : b.Place(0, index.NodeCount(), [&](int n) { return index.slot(n).leaf == k; });
      if (p) return p;
    }
    if (req.topology.hard) return std::nullopt;
  }
  return b.Place(0, index.NodeCount(), [](int) { return true; });
}

// One replica of whole GPUs where taking them adds the least fragmentation for the
// mix; ties to the node with the fewest free GPUs, then node order.
std::optional<GangPlacement> PlaceOneByFragmentation(const NodeIndex& index, const GangRequest& req,
                                                     int type, const WorkloadMix& mix) {
  const Shape& shape = req.shape;
  int best = -1;
  uint64_t best_mask = 0;
  std::pair<double, int> best_key{0, 0};
  std::array<int, 64> rooms{};
  for (int n = 0; n < index.NodeCount(); ++n) {
    const NodeSlot& s = index.slot(n);
    if (s.type != type || s.FreeGpus() < shape.gpus || Excluded(req, n) ||
        index.ReplicasFit(n, shape) < 1) {
      continue;
    }
    for (int g = 0; g < s.gpu_count; ++g) rooms[g] = index.ShareRoom(n, g);
    const std::span<int> node_rooms(rooms.data(), static_cast<size_t>(s.gpu_count));
    const double before = Fragmentation(mix, s.type, node_rooms, s.free_cpu, s.free_mem);
    const uint64_t mask = PickGpus(s, s.free_mask, shape.gpus);
    for (uint64_t m = mask; m != 0; m &= m - 1) rooms[__builtin_ctzll(m)] = 0;
    const std::pair<double, int> key{
        Fragmentation(mix, s.type, node_rooms, s.free_cpu - shape.cpu, s.free_mem - shape.mem) -
            before,
        s.FreeGpus()};
    if (best < 0 || key < best_key) {
      best = n;
      best_mask = mask;
      best_key = key;
    }
  }
  if (best < 0) return std::nullopt;
  GangPlacement p;
  p.replicas.emplace_back(best, best_mask);
  return p;
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
  if (style.mix != nullptr && req.max_replicas == 1) {
    return PlaceOneByFragmentation(index, req, type, *style.mix);
  }
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

// Replicas of no GPUs one at a time where their CPUs and memory strand the least GPU
// capacity: with the mix, where taking them adds the least fragmentation (FGD places
// CPU-only tasks by the same measure), then where they would add the least to the
// node with all its GPUs free (running jobs end: a full node whose CPUs a big kind of
// the mix needs is kept for it); then, and without the mix, on the node with the
// fewest GPUs free (nodes whose GPUs are all taken, or that have none, first). Ties
// to node order.
std::optional<GangPlacement> PlaceCpuOnlyAway(const NodeIndex& index, const GangRequest& req,
                                              const WorkloadMix* mix) {
  const Shape& shape = req.shape;
  std::vector<int> on_node(static_cast<size_t>(index.NodeCount()), 0);
  std::array<int, 64> rooms{};
  GangPlacement out;
  while (static_cast<int>(out.replicas.size()) < req.max_replicas) {
    int best = -1;
    std::tuple<double, double, int> best_key{0, 0, 0};
    for (int n = 0; n < index.NodeCount(); ++n) {
      const int k = on_node[static_cast<size_t>(n)];
      if (Excluded(req, n) || index.ReplicasFit(n, shape) <= k) continue;
      const NodeSlot& s = index.slot(n);
      int room = 0;
      for (int g = 0; g < s.gpu_count; ++g) {
        rooms[g] = index.ShareRoom(n, g);
        room += rooms[g];
      }
      std::tuple<double, double, int> key{0, 0, room};
      if (mix != nullptr && room > 0) {
        const std::span<const int> node_rooms(rooms.data(), static_cast<size_t>(s.gpu_count));
        const int64_t cpu = s.free_cpu - shape.cpu * k, mem = s.free_mem - shape.mem * k;
        std::get<0>(key) =
            Fragmentation(*mix, s.type, node_rooms, cpu - shape.cpu, mem - shape.mem) -
            Fragmentation(*mix, s.type, node_rooms, cpu, mem);
      }
      if (mix != nullptr && s.gpu_count > 0) {
        std::array<int, 64> whole{};
        whole.fill(kWholeGpu);
        const std::span<const int> all(whole.data(), static_cast<size_t>(s.gpu_count));
        const Node& node = index.snapshot().nodes[static_cast<size_t>(s.node)];
        const int64_t cpu = node.milli_cpus - shape.cpu * k,
                      mem = node.memory_bytes - shape.mem * k;
        std::get<1>(key) = Fragmentation(*mix, s.type, all, cpu - shape.cpu, mem - shape.mem) -
                           Fragmentation(*mix, s.type, all, cpu, mem);
      }
      if (best < 0 || key < best_key) {
        best = n;
        best_key = key;
      }
    }
    if (best < 0) break;
    ++on_node[static_cast<size_t>(best)];
    out.replicas.emplace_back(best, 0);
  }
  if (static_cast<int>(out.replicas.size()) < shape.replicas) return std::nullopt;
  return out;
}

// A replica with no GPUs fits on any schedulable node with the CPUs and memory.
// same-nvlink means nothing without GPUs and is read as same-node.
std::optional<GangPlacement> PlaceCpuOnly(const NodeIndex& index, const GangRequest& req,
                                          const PlacementStyle& style) {
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
  if (style.best_fit)
    return PlaceCpuOnlyAway(index, req, style.fragmentation ? style.mix : nullptr);
  Builder b(index, req);
  for (int n = 0; n < index.NodeCount() && !b.full(); ++n) b.AddNode(n);
  return b.Result();
}

}  // namespace

WorkloadMix MixOf(const NodeIndex& index) {
  const Snapshot& snap = index.snapshot();
  using Key = std::tuple<int16_t, int, int64_t, int64_t>;
  std::map<Key, double> counts;
  const std::string* last_type = nullptr;
  int16_t type = -1;
  auto add = [&](const Resources& r, int64_t replicas) {
    if (r.gpus <= 0 || replicas <= 0) return;  // GPU fragmentation: GPU jobs only
    if (last_type == nullptr || *last_type != r.gpu_type) {
      last_type = &r.gpu_type;
      type = r.gpu_type.empty() ? int16_t{-1} : index.TypeOf(r.gpu_type);
    }
    const int share = ShareOf(r);
    const int milli =
        share > 0 ? share : static_cast<int>(std::min<int64_t>(r.gpus, 64) * kWholeGpu);
    // Weighted by the GPU capacity the kind asks for, not by its count: a node's
    // worth is the capacity it can give, and an 8-GPU job needs eight times what a
    // 1-GPU job needs (FGD weights by count).
    counts[Key{type, milli, r.milli_cpus, r.memory_bytes}] += static_cast<double>(replicas) * milli;
  };
  for (const RunningJob& j : snap.running)
    add(j.per_replica, static_cast<int64_t>(j.replicas.size()));
  for (const PendingJob& j : snap.pending) add(j.per_replica, j.replicas);
  std::vector<std::pair<double, Key>> by_count;
  by_count.reserve(counts.size());
  for (const auto& [key, count] : counts) by_count.emplace_back(count, key);
  // The most common first; equal counts in key order, so the mix is deterministic.
  std::stable_sort(by_count.begin(), by_count.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  if (by_count.size() > WorkloadMix::kMaxKinds) by_count.resize(WorkloadMix::kMaxKinds);
  double total = 0;
  for (const auto& [count, key] : by_count) total += count;
  WorkloadMix mix;
  for (const auto& [count, key] : by_count) {
    const auto& [t, milli, cpu, mem] = key;
    mix.kinds.push_back({t, milli, cpu, mem, count / total});
  }
  return mix;
}

bool MayFit(const NodeIndex& index, const GangRequest& req) {
  if (req.shape.gpus <= 0 || req.shape.share > 0) return true;  // shares: no cheap bound
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
  if (request.shape.gpus <= 0) return PlaceCpuOnly(index, request, style);
  if (request.shape.gpus > 64) return std::nullopt;
  // Shares: one walk over the nodes of every allowed type, so that a share fills the
  // best shared GPU of any type (trying the smallest pools first left more GPUs idle on
  // the Alibaba trace, docs/simulator.md).
  if (request.shape.share > 0) return PlaceShares(index, request, style, request.shape.type);
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
  for (const auto& [n, mask] : placement.replicas) {
    index.Take(n, mask, shape.cpu, shape.mem, shape.share);
  }
}

void Uncommit(NodeIndex& index, const GangPlacement& placement, const Shape& shape) {
  for (const auto& [n, mask] : placement.replicas) {
    index.Release(n, mask, shape.cpu, shape.mem, shape.share);
  }
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
