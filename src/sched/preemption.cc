#include "sched/preemption.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace trainyard::sched {
namespace {

struct VictimReplica {
  int32_t node;
  uint64_t mask;
};

struct Victim {
  int running;
  double cost;
  int64_t gpus;
  std::vector<VictimReplica> replicas;
};

// Replica capacity of one scope as victims are added and removed.
class ScopeCapacity {
 public:
  ScopeCapacity(const NodeIndex& index, const GangRequest& req, int64_t initial)
      : index_(index), req_(req), capacity_(initial) {}

  int64_t capacity() const { return capacity_; }

  void Apply(const Victim& v, bool add, int scope_leaf, int scope_node) {
    const int g = std::max(req_.shape.gpus, 1);
    for (const auto& r : v.replicas) {
      if (!InScope(r.node, scope_leaf, scope_node)) continue;
      int& free = FreeOf(r.node);
      int delta = __builtin_popcountll(r.mask);
      int before = free / g;
      free += add ? delta : -delta;
      capacity_ += free / g - before;
    }
  }

  bool InScope(int n, int scope_leaf, int scope_node) const {
    const NodeSlot& s = index_.slot(n);
    if (!s.schedulable) return false;
    if (req_.shape.gpus > 0 &&
        (s.type < 0 || (req_.shape.type >= 0 && s.type != req_.shape.type))) {
      return false;
    }
    if (req_.excluded && std::binary_search(req_.excluded->begin(), req_.excluded->end(), n)) {
      return false;
    }
    if (scope_node >= 0) return n == scope_node;
    if (scope_leaf >= 0) return s.leaf == scope_leaf;
    return true;
  }

 private:
  int& FreeOf(int n) {
    auto it = free_.find(n);
    if (it == free_.end()) it = free_.emplace(n, index_.slot(n).FreeGpus()).first;
    return it->second;
  }

  const NodeIndex& index_;
  const GangRequest& req_;
  int64_t capacity_;
  std::unordered_map<int, int> free_;
};

struct ScopeResult {
  std::vector<int> victims;  // indices into the Victim list
  double cost = 0;
};

// Greedy search in one scope; nullopt when even every victim would not do.
std::optional<ScopeResult> SearchScope(const NodeIndex& index, const GangRequest& req,
                                       const std::vector<Victim>& victims,
                                       const std::vector<int>& order, int64_t initial,
                                       int scope_leaf, int scope_node, int max_victims) {
  const int64_t need = req.shape.replicas;
  ScopeCapacity cap(index, req, initial);
  std::vector<int> chosen;
  for (int v : order) {
    if (cap.capacity() >= need) break;
    if (static_cast<int>(chosen.size()) >= max_victims) return std::nullopt;
    cap.Apply(victims[v], true, scope_leaf, scope_node);
    chosen.push_back(v);
  }
  if (cap.capacity() < need) return std::nullopt;
  // Drop what is not needed, most expensive first.
  std::vector<int> by_cost = chosen;
  std::sort(by_cost.begin(), by_cost.end(),
            [&](int a, int b) { return victims[a].cost > victims[b].cost; });
  ScopeResult out;
  for (int v : by_cost) {
    cap.Apply(victims[v], false, scope_leaf, scope_node);
    if (cap.capacity() >= need) continue;
    cap.Apply(victims[v], true, scope_leaf, scope_node);
    out.victims.push_back(v);
    out.cost += victims[v].cost;
  }
  std::sort(out.victims.begin(), out.victims.end());
  return out;
}

int64_t BoundOver(const NodeIndex& index, const GangRequest& req, int leaf) {
  const int g = req.shape.gpus;
  int64_t sum = 0;
  for (int t = 0; t < index.TypeCount(); ++t) {
    if (req.shape.type >= 0 && t != req.shape.type) continue;
    if (leaf >= 0) {
      sum += index.LeafReplicaBound(t, leaf, g);
    } else {
      for (int l = 0; l < index.LeafCount(); ++l) sum += index.LeafReplicaBound(t, l, g);
    }
  }
  return sum;
}

}  // namespace

std::optional<VictimSet> FindVictims(NodeIndex& index, const GangRequest& req,
                                     const PlacementStyle& style,
                                     const std::vector<Candidate>& candidates, int max_victims) {
  if (candidates.empty() || req.shape.gpus <= 0) return std::nullopt;
  const Snapshot& snap = index.snapshot();
  std::vector<Victim> victims;
  victims.reserve(candidates.size());
  for (const Candidate& c : candidates) {
    const RunningJob& job = snap.running[c.running];
    Victim v{c.running, c.cost, std::max<int64_t>(job.Gpus(), 1), {}};
    if (c.gpus != nullptr) {
      for (const auto& [n, mask] : *c.gpus) v.replicas.push_back({n, mask});
    } else {
      for (const Placement& p : job.replicas) {
        int n = index.NodeByName(p.node);
        if (n >= 0) v.replicas.push_back({n, index.MaskOf(n, p.gpus)});
      }
    }
    victims.push_back(std::move(v));
  }
  // Cheapest per GPU first; ties by running index for determinism.
  std::vector<int> order(victims.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    double ca = victims[a].cost / victims[a].gpus, cb = victims[b].cost / victims[b].gpus;
    return ca != cb ? ca < cb : victims[a].running < victims[b].running;
  });

  struct Scope {
    int leaf = -1;
    int node = -1;
  };
  std::vector<Scope> scopes;
  // Victims per node and per leaf, in cost order, so a scope walks only its own.
  std::unordered_map<int, std::vector<int>> by_node, by_leaf;
  for (int v : order) {
    int last_node = -1, last_leaf = -1;
    for (const auto& r : victims[v].replicas) {
      if (r.node != last_node) {
        auto& list = by_node[r.node];
        if (list.empty() || list.back() != v) list.push_back(v);
        last_node = r.node;
      }
      int leaf = index.slot(r.node).leaf;
      if (leaf != last_leaf) {
        auto& list = by_leaf[leaf];
        if (list.empty() || list.back() != v) list.push_back(v);
        last_leaf = leaf;
      }
    }
  }
  const TopologyConstraint c = req.topology.constraint;
  const bool hard = req.topology.hard;
  const bool one_node_gang =
      req.shape.replicas * req.shape.gpus <= 64 &&
      (c == TopologyConstraint::kNone || c == TopologyConstraint::kSameNode ||
       c == TopologyConstraint::kSameNvlink || !hard);
  if (c == TopologyConstraint::kSameNode || c == TopologyConstraint::kSameNvlink || one_node_gang) {
    std::vector<int> nodes;
    for (const auto& [n, list] : by_node) nodes.push_back(n);
    std::sort(nodes.begin(), nodes.end());
    for (int n : nodes) scopes.push_back({-1, n});
  }
  const bool node_only =
      hard && (c == TopologyConstraint::kSameNode || c == TopologyConstraint::kSameNvlink);
  if (!node_only) {
    if (c == TopologyConstraint::kSameLeaf || (style.pack_topology && req.max_replicas > 1)) {
      for (int l = 0; l < index.LeafCount(); ++l) {
        if (by_leaf.count(l)) scopes.push_back({l, -1});
      }
    }
    if (!(c == TopologyConstraint::kSameLeaf && hard)) scopes.push_back({});
  }

  std::vector<std::pair<double, std::vector<int>>> found;
  for (const Scope& s : scopes) {
    int64_t initial = 0;
    if (s.node >= 0) {
      initial = index.ReplicasFit(s.node, req.shape);
    } else {
      initial = BoundOver(index, req, s.leaf);
    }
    const std::vector<int>& list =
        s.node >= 0 ? by_node[s.node] : (s.leaf >= 0 ? by_leaf[s.leaf] : order);
    auto r = SearchScope(index, req, victims, list, initial, s.leaf, s.node, max_victims);
    if (r) found.emplace_back(r->cost, std::move(r->victims));
  }
  std::sort(found.begin(), found.end());

  // Confirm with a real placement on the freed capacity; the count-based search
  // ignores CPUs, memory and NVLink domains.
  constexpr size_t kMaxConfirm = 8;
  for (size_t i = 0; i < found.size() && i < kMaxConfirm; ++i) {
    const auto& chosen = found[i].second;
    auto release = [&](bool give) {
      for (int v : chosen) {
        const RunningJob& job = snap.running[victims[v].running];
        for (const auto& r : victims[v].replicas) {
          if (give) {
            index.Release(r.node, r.mask, job.per_replica.milli_cpus, job.per_replica.memory_bytes);
          } else {
            index.Take(r.node, r.mask, job.per_replica.milli_cpus, job.per_replica.memory_bytes);
          }
        }
      }
    };
    release(true);
    auto placement = PlaceGang(index, req, style);
    release(false);
    if (placement) {
      VictimSet out;
      out.cost = found[i].first;
      out.placement = std::move(*placement);
      for (int v : chosen) out.running.push_back(victims[v].running);
      std::sort(out.running.begin(), out.running.end());
      return out;
    }
  }
  return std::nullopt;
}

}  // namespace trainyard::sched
