#include "sched/preemption.h"

#include <algorithm>

namespace trainyard::sched {

namespace {

// Sorts (key, value) pairs by key, keeping the order of equal keys; keys are in
// [0, keys). A counting sort: linear, where a comparison sort of a fleet's replicas
// is most of the pool's cost.
void StableSortByKey(std::vector<std::pair<int32_t, int>>& items, int keys) {
  std::vector<int32_t> start(static_cast<size_t>(keys) + 1, 0);
  for (const auto& [key, value] : items) ++start[key + 1];
  for (int k = 0; k < keys; ++k) start[k + 1] += start[k];
  std::vector<std::pair<int32_t, int>> sorted(items.size());
  for (const auto& item : items) sorted[start[item.first]++] = item;
  items.swap(sorted);
}

}  // namespace

VictimPool::VictimPool(const NodeIndex& index, const std::vector<int>& running,
                       const std::vector<double>& costs) {
  const Snapshot& snap = index.snapshot();
  victims_.reserve(running.size());
  for (size_t k = 0; k < running.size(); ++k) {
    const RunningJob& job = snap.running[running[k]];
    Victim v{running[k], costs[k], std::max<int64_t>(job.Gpus(), 1),
             static_cast<int32_t>(replicas_.size()), 0};
    for (const auto* h = index.HeldBegin(running[k]); h != index.HeldEnd(running[k]); ++h) {
      replicas_.push_back({h->node, h->mask});
      ++v.count;
    }
    victims_.push_back(v);
  }
  // Cheapest per GPU first; ties by running index for determinism. The keys are
  // computed once, not in every comparison.
  struct ByCost {
    double per_gpu;
    int running;
    int victim;
  };
  std::vector<ByCost> by_cost(victims_.size());
  for (size_t i = 0; i < victims_.size(); ++i) {
    const Victim& v = victims_[i];
    by_cost[i] = {v.cost / static_cast<double>(v.gpus), v.running, static_cast<int>(i)};
  }
  std::sort(by_cost.begin(), by_cost.end(), [](const ByCost& a, const ByCost& b) {
    return a.per_gpu != b.per_gpu ? a.per_gpu < b.per_gpu : a.running < b.running;
  });
  order_.resize(victims_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = by_cost[i].victim;

  // Per node and per leaf lists, in cost order, each victim once per node / leaf.
  std::vector<std::pair<int32_t, int>> at_node, at_leaf;
  for (int v : order_) {
    const Victim& victim = victims_[v];
    for (int32_t r = victim.first; r < victim.first + victim.count; ++r) {
      at_node.emplace_back(replicas_[r].node, v);
      at_leaf.emplace_back(index.slot(replicas_[r].node).leaf, v);
    }
  }
  // A stable sort by node keeps the cost order within each node.
  StableSortByKey(at_node, index.NodeCount());
  StableSortByKey(at_leaf, index.LeafCount());
  for (size_t i = 0; i < at_node.size(); ++i) {
    const auto [n, v] = at_node[i];
    if (node_ids_.empty() || node_ids_.back() != n) {
      node_ids_.push_back(n);
      node_start_.push_back(static_cast<int32_t>(node_victims_.size()));
    } else if (node_victims_.back() == v) {
      continue;  // two replicas of one victim on this node
    }
    node_victims_.push_back(v);
  }
  node_start_.push_back(static_cast<int32_t>(node_victims_.size()));
  leaf_start_.assign(index.LeafCount() + 1, 0);
  for (size_t i = 0; i < at_leaf.size(); ++i) {
    const auto [l, v] = at_leaf[i];
    // One victim's entries are adjacent: all of its replicas were listed before the
    // next victim's, and the sort is stable.
    if (i > 0 && at_leaf[i - 1].first == l && leaf_victims_.back() == v) continue;
    leaf_victims_.push_back(v);
    ++leaf_start_[l + 1];
  }
  for (size_t l = 1; l < leaf_start_.size(); ++l) leaf_start_[l] += leaf_start_[l - 1];
  free_.assign(index.NodeCount(), 0);
  stamp_.assign(index.NodeCount(), 0);
}

// One call of FindVictims.
class VictimSearch {
 public:
  VictimSearch(const NodeIndex& index, const GangRequest& req, const VictimPool& pool,
               const std::vector<VictimUse>& use, double penalty, int max_victims)
      : index_(index),
        req_(req),
        pool_(pool),
        use_(use),
        penalty_(penalty),
        max_victims_(max_victims),
        g_(std::max(req.shape.gpus, 1)) {}

  double Cost(int v) const {
    return pool_.victims_[v].cost + (use_[v] == VictimUse::kLastResort ? penalty_ : 0);
  }

  bool InScope(int n, int scope_leaf, int scope_node) const {
    const NodeSlot& s = index_.slot(n);
    if (!s.schedulable) return false;
    if (req_.shape.gpus > 0 &&
        (s.type < 0 || (req_.shape.type >= 0 && s.type != req_.shape.type))) {
      return false;
    }
    if (!req_.excluded.empty() &&
        std::binary_search(req_.excluded.begin(), req_.excluded.end(), n)) {
      return false;
    }
    if (scope_node >= 0) return n == scope_node;
    if (scope_leaf >= 0) return s.leaf == scope_leaf;
    return true;
  }

  // Greedy search in one scope over `list` (victims in cost order); false when even
  // every allowed victim would not do.
  bool Scope(const int* begin, const int* end, int64_t initial, int scope_leaf, int scope_node,
             std::vector<int>& victims, double& cost) {
    const int64_t need = req_.shape.replicas;
    if (++pool_.epoch_ == 0) {  // wrapped: forget every stamp
      std::fill(pool_.stamp_.begin(), pool_.stamp_.end(), 0);
      pool_.epoch_ = 1;
    }
    capacity_ = initial;
    chosen_.clear();
    for (VictimUse phase : {VictimUse::kYes, VictimUse::kLastResort}) {
      for (const int* it = begin; it != end && capacity_ < need; ++it) {
        if (use_[*it] != phase) continue;
        if (static_cast<int>(chosen_.size()) >= max_victims_) return false;
        Apply(*it, true, scope_leaf, scope_node);
        chosen_.push_back(*it);
      }
    }
    if (capacity_ < need) return false;
    // Drop what is not needed, most expensive first.
    std::sort(chosen_.begin(), chosen_.end(), [&](int a, int b) { return Cost(a) > Cost(b); });
    victims.clear();
    cost = 0;
    for (int v : chosen_) {
      Apply(v, false, scope_leaf, scope_node);
      if (capacity_ >= need) continue;
      Apply(v, true, scope_leaf, scope_node);
      victims.push_back(v);
      cost += Cost(v);
    }
    std::sort(victims.begin(), victims.end());
    return true;
  }

 private:
  void Apply(int v, bool add, int scope_leaf, int scope_node) {
    const VictimPool::Victim& victim = pool_.victims_[v];
    for (int32_t r = victim.first; r < victim.first + victim.count; ++r) {
      const VictimPool::Replica& rep = pool_.replicas_[r];
      if (!InScope(rep.node, scope_leaf, scope_node)) continue;
      int& free = FreeOf(rep.node);
      const int delta = __builtin_popcountll(rep.mask);
      const int before = free / g_;
      free += add ? delta : -delta;
      capacity_ += free / g_ - before;
    }
  }

  int& FreeOf(int n) {
    if (pool_.stamp_[n] != pool_.epoch_) {
      pool_.stamp_[n] = pool_.epoch_;
      pool_.free_[n] = index_.slot(n).FreeGpus();
    }
    return pool_.free_[n];
  }

  const NodeIndex& index_;
  const GangRequest& req_;
  const VictimPool& pool_;
  const std::vector<VictimUse>& use_;
  const double penalty_;
  const int max_victims_;
  const int g_;
  int64_t capacity_ = 0;
  std::vector<int> chosen_;
};

namespace {

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

// The best few sets found so far, by (cost, victims): a total order, so the result
// does not depend on the order in which scopes are searched.
class BestSets {
 public:
  explicit BestSets(size_t keep) : keep_(keep) {}
  void Offer(double cost, const std::vector<int>& victims) {
    auto entry = std::make_pair(cost, victims);
    if (sets_.size() == keep_ && !(entry < sets_.back())) return;
    sets_.insert(std::upper_bound(sets_.begin(), sets_.end(), entry), std::move(entry));
    if (sets_.size() > keep_) sets_.pop_back();
  }
  const std::vector<std::pair<double, std::vector<int>>>& sets() const { return sets_; }

 private:
  size_t keep_;
  std::vector<std::pair<double, std::vector<int>>> sets_;
};

}  // namespace

std::span<const int> VictimPool::VictimsOn(int32_t n) const {
  auto it = std::lower_bound(node_ids_.begin(), node_ids_.end(), n);
  if (it == node_ids_.end() || *it != n) return {};
  const size_t i = static_cast<size_t>(it - node_ids_.begin());
  return {node_victims_.data() + node_start_[i], node_victims_.data() + node_start_[i + 1]};
}

std::optional<VictimSet> FindVictims(NodeIndex& index, const GangRequest& req,
                                     const PlacementStyle& style, const VictimPool& pool,
                                     const std::vector<VictimUse>& use, double penalty,
                                     int max_victims) {
  if (pool.size() == 0 || req.shape.gpus <= 0) return std::nullopt;
  const Snapshot& snap = index.snapshot();
  VictimSearch search(index, req, pool, use, penalty, max_victims);
  // Confirm with a real placement on the freed capacity; the count-based search
  // ignores CPUs, memory and NVLink domains.
  constexpr size_t kMaxConfirm = 8;
  BestSets best(kMaxConfirm);
  std::vector<int> victims;
  double cost = 0;

  const TopologyConstraint c = req.topology.constraint;
  const bool hard = req.topology.hard;
  const bool one_node_gang =
      req.shape.replicas * req.shape.gpus <= 64 &&
      (c == TopologyConstraint::kNone || c == TopologyConstraint::kSameNode ||
       c == TopologyConstraint::kSameNvlink || !hard);
  if (c == TopologyConstraint::kSameNode || c == TopologyConstraint::kSameNvlink || one_node_gang) {
    for (size_t i = 0; i < pool.node_ids_.size(); ++i) {
      const int n = pool.node_ids_[i];
      if (!search.InScope(n, -1, n)) continue;
      const int* begin = pool.node_victims_.data() + pool.node_start_[i];
      const int* end = pool.node_victims_.data() + pool.node_start_[i + 1];
      if (std::all_of(begin, end, [&](int v) { return use[v] == VictimUse::kNo; })) continue;
      if (search.Scope(begin, end, index.ReplicasFit(n, req.shape), -1, n, victims, cost)) {
        best.Offer(cost, victims);
      }
    }
  }
  const bool node_only =
      hard && (c == TopologyConstraint::kSameNode || c == TopologyConstraint::kSameNvlink);
  if (!node_only) {
    if (c == TopologyConstraint::kSameLeaf || (style.pack_topology && req.max_replicas > 1)) {
      for (int l = 0; l < index.LeafCount(); ++l) {
        if (pool.leaf_start_[l] == pool.leaf_start_[l + 1]) continue;
        const int* begin = pool.leaf_victims_.data() + pool.leaf_start_[l];
        const int* end = pool.leaf_victims_.data() + pool.leaf_start_[l + 1];
        if (search.Scope(begin, end, BoundOver(index, req, l), l, -1, victims, cost)) {
          best.Offer(cost, victims);
        }
      }
    }
    if (!(c == TopologyConstraint::kSameLeaf && hard)) {
      const int* begin = pool.order_.data();
      const int* end = begin + pool.order_.size();
      if (search.Scope(begin, end, BoundOver(index, req, -1), -1, -1, victims, cost)) {
        best.Offer(cost, victims);
      }
    }
  }

  for (const auto& set : best.sets()) {
    const double set_cost = set.first;
    const std::vector<int>& chosen = set.second;  // clang 14 lambdas cannot capture bindings
    auto release = [&](bool give) {
      for (int v : chosen) {
        const RunningJob& job = snap.running[pool.running(v)];
        for (const auto* r = pool.replicas_begin(v); r != pool.replicas_end(v); ++r) {
          const int share = ShareOf(job.per_replica);
          if (give) {
            index.Release(r->node, r->mask, job.per_replica.milli_cpus,
                          job.per_replica.memory_bytes, share);
          } else {
            index.Take(r->node, r->mask, job.per_replica.milli_cpus, job.per_replica.memory_bytes,
                       share);
          }
        }
      }
    };
    release(true);
    auto placement = PlaceGang(index, req, style);
    release(false);
    if (placement) {
      VictimSet out;
      out.cost = set_cost;
      out.placement = std::move(*placement);
      for (int v : chosen) out.running.push_back(pool.running(v));
      std::sort(out.running.begin(), out.running.end());
      return out;
    }
  }
  return std::nullopt;
}

}  // namespace trainyard::sched
