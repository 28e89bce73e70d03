#include "sched/index.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

namespace trainyard::sched {

NodeIndex::NodeIndex(const Snapshot& snapshot)
    : snapshot_(&snapshot), slot_by_name_(snapshot.nodes.size()) {
  std::map<std::string, int16_t> types, leaves;
  NameTable nvlink_ids(snapshot.nodes.size() * 2);  // views into the snapshot
  // Model strings as nodes spell them (clusters have a few), each normalised once and
  // then given its type id.
  struct Model {
    std::string_view spelled;
    std::string normalized;
    int16_t type = -1;
  };
  std::vector<Model> models;
  auto model_of = [&](const std::string& spelled) -> Model& {
    for (Model& m : models) {
      if (m.spelled == spelled) return m;
    }
    return models.emplace_back(Model{spelled, NormalizeGpuType(spelled)});
  };
  // Intern in sorted order so that the index does not depend on node order.
  {
    // Neighbours mostly share a model and a leaf: skip the lookups when they repeat.
    const std::string* model = nullptr;
    const std::string* leaf = nullptr;
    for (const Node& n : snapshot.nodes) {
      if (!n.gpus.empty() && (model == nullptr || *model != n.gpus.front().model)) {
        model = &n.gpus.front().model;
        model_of(*model);
      }
      if (leaf == nullptr || *leaf != n.topology.leaf) {
        leaf = &n.topology.leaf;
        if (leaves.find(*leaf) == leaves.end()) leaves.emplace(*leaf, 0);
      }
    }
  }
  for (const Model& m : models) types.emplace(m.normalized, 0);
  for (auto& [name, id] : types) {
    id = static_cast<int16_t>(type_names_.size());
    type_names_.push_back(name);
  }
  for (Model& m : models) m.type = types[m.normalized];
  for (auto& [name, id] : leaves) {
    id = static_cast<int16_t>(leaf_names_.size());
    leaf_names_.push_back(name);
  }
  if (leaf_names_.empty()) leaf_names_.push_back("");
  all_leaves_.resize(leaf_names_.size());
  for (size_t l = 0; l < all_leaves_.size(); ++l) all_leaves_[l] = static_cast<int>(l);

  slots_.resize(snapshot.nodes.size());
  slot_of_node_.resize(snapshot.nodes.size());
  identity_indices_.assign(snapshot.nodes.size(), false);
  cap_cpu_.resize(slots_.size());
  cap_mem_.resize(slots_.size());
  // Neighbouring nodes mostly share a leaf and a GPU model: remember the last lookup.
  const std::string* last_leaf = nullptr;
  int16_t last_leaf_id = 0;
  const std::string* last_model = nullptr;
  int16_t last_type = -1;
  // Slots go in node-name order, not snapshot order: every tie between equally good
  // nodes is broken by slot index, so the same cluster listed in another order gets
  // the same decisions.
  std::vector<int32_t> by_name(snapshot.nodes.size());
  for (size_t i = 0; i < by_name.size(); ++i) by_name[i] = static_cast<int32_t>(i);
  auto name_order = [&](int32_t a, int32_t b) {
    const std::string& na = snapshot.nodes[a].name;
    const std::string& nb = snapshot.nodes[b].name;
    return na != nb ? na < nb : a < b;
  };
  // Callers usually list nodes by name already; checking is far cheaper than sorting.
  if (!std::is_sorted(by_name.begin(), by_name.end(), name_order)) {
    std::sort(by_name.begin(), by_name.end(), name_order);
  }
  for (size_t k = 0; k < snapshot.nodes.size(); ++k) {
    const int32_t i = by_name[k];
    const Node& n = snapshot.nodes[i];
    NodeSlot& s = slots_[k];
    s.node = i;
    slot_of_node_[i] = static_cast<int32_t>(k);
    slot_by_name_.Intern(n.name, static_cast<int32_t>(k));  // the first of equal names wins
    if (last_leaf == nullptr || *last_leaf != n.topology.leaf) {
      last_leaf = &n.topology.leaf;
      last_leaf_id = leaves[n.topology.leaf];
    }
    s.leaf = last_leaf_id;
    s.schedulable = IsSchedulable(n.state);
    s.gpu_count = static_cast<int>(std::min<size_t>(n.gpus.size(), 64));
    if (s.gpu_count > 0) {
      if (last_model == nullptr || *last_model != n.gpus.front().model) {
        last_model = &n.gpus.front().model;
        last_type = model_of(n.gpus.front().model).type;
      }
      s.type = last_type;
      s.gpu_memory = n.GpuMemoryBytes();
    }
    bool identity = true;
    for (int g = 0; g < s.gpu_count; ++g) identity = identity && n.gpus[g].index == g;
    identity_indices_[k] = identity;
    s.free_mask = s.gpu_count == 64 ? ~uint64_t{0} : ((uint64_t{1} << s.gpu_count) - 1);
    cap_cpu_[k] = n.milli_cpus;
    cap_mem_[k] = n.memory_bytes;
    const std::string* last_domain = nullptr;
    int32_t last_domain_id = -1;
    const int32_t first_new_domain = static_cast<int32_t>(nvlink_ids.size());
    for (int g = 0; g < s.gpu_count; ++g) {
      const std::string& domain = n.gpus[g].nvlink_domain;
      if (domain.empty()) continue;
      if (last_domain == nullptr || *last_domain != domain) {
        last_domain = &domain;
        last_domain_id = nvlink_ids.Intern(domain, static_cast<int32_t>(nvlink_ids.size()));
        // Ids are handed out in node order: one below this node's first new id was
        // first seen on an earlier node.
        if (last_domain_id < first_new_domain) domains_span_nodes_ = true;
      }
      size_t pos = 0;
      while (pos < s.nvlink_ids.size() && s.nvlink_ids[pos] != last_domain_id) ++pos;
      if (pos == s.nvlink_ids.size()) {
        s.nvlink_ids.push_back(last_domain_id);
        s.nvlink_masks.push_back(0);
      }
      s.nvlink_masks[pos] |= uint64_t{1} << g;
    }
  }

  // What running jobs hold.
  gpu_base_.resize(slots_.size() + 1);
  for (size_t i = 0; i < slots_.size(); ++i) gpu_base_[i + 1] = gpu_base_[i] + slots_[i].gpu_count;
  gpu_holds_.assign(static_cast<size_t>(gpu_base_.back()), 0);
  share_used_.assign(static_cast<size_t>(gpu_base_.back()), 0);
  used_cpu_.assign(slots_.size(), 0);
  used_mem_.assign(slots_.size(), 0);
  held_mask_.assign(slots_.size(), 0);
  bucketed_.assign(slots_.size(), -1);
  // Where each running job holds GPUs is what the victim pool reads: noted on the way.
  held_start_.reserve(snapshot.running.size() + 1);
  for (const RunningJob& job : snapshot.running) {
    held_start_.push_back(static_cast<int32_t>(held_.size()));
    Hold(job, 1, &held_);
  }
  held_start_.push_back(static_cast<int32_t>(held_.size()));
  held_valid_ = true;
  for (size_t i = 0; i < slots_.size(); ++i) RefreshFree(static_cast<int>(i));

  free_by_type_.assign(type_names_.size(), 0);
  nodes_by_type_free_.assign(type_names_.size() * 65, 0);
  total_by_type_.assign(type_names_.size(), 0);
  // One bucket per possible free count: up to the largest node's GPUs, not 64, so
  // that a cluster of many leaves does not allocate thousands of empty buckets.
  int most_gpus = 0;
  for (const NodeSlot& s : slots_) most_gpus = std::max(most_gpus, s.gpu_count);
  bucket_stride_ = most_gpus + 1;
  // Groups: the GPU nodes of each (type, leaf), in slot order.
  const size_t groups = type_names_.size() * leaf_names_.size();
  group_start_.assign(groups + 1, 0);
  group_pos_.assign(slots_.size(), -1);
  for (const NodeSlot& s : slots_) {
    if (s.type >= 0) ++group_start_[LeafKey(s.type, s.leaf) + 1];
  }
  for (size_t g = 0; g < groups; ++g) group_start_[g + 1] += group_start_[g];
  group_nodes_.resize(static_cast<size_t>(group_start_[groups]));
  {
    std::vector<int32_t> next(group_start_.begin(), group_start_.end() - 1);
    for (size_t i = 0; i < slots_.size(); ++i) {
      const NodeSlot& s = slots_[i];
      if (s.type < 0) continue;
      const size_t g = LeafKey(s.type, s.leaf);
      group_pos_[i] = next[g] - group_start_[g];
      group_nodes_[static_cast<size_t>(next[g]++)] = static_cast<int32_t>(i);
    }
  }
  group_bits_.resize(groups);
  size_t words = 0;
  for (size_t g = 0; g < groups; ++g) {
    group_bits_[g] = words;
    words += GroupWords(g) * static_cast<size_t>(bucket_stride_);
  }
  bucket_bits_.assign(words, 0);
  bucket_size_.assign(groups * static_cast<size_t>(bucket_stride_), 0);
  leaf_free_bits_.assign(groups, 0);
  type_free_bits_.assign(type_names_.size(), 0);
  buckets_ready_ = true;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const NodeSlot& s = slots_[i];
    if (s.type < 0) continue;
    total_by_type_[s.type] += s.gpu_count;
    Rebucket(static_cast<int>(i));
  }
  touched_.assign(slots_.size(), 0);
}

template <typename Fn>
void NodeIndex::ForEachHolding(const RunningJob& job, Fn&& fn) const {
  // Replicas of a gang mostly share nodes with their neighbours: look up each once.
  const std::string* last_node = nullptr;
  int32_t n = -1;
  for (const Placement& p : job.replicas) {
    if (last_node == nullptr || *last_node != p.node) {
      last_node = &p.node;
      n = slot_by_name_.Find(p.node);
    }
    if (n >= 0) fn(n, MaskOf(n, p.gpus));
  }
}

void NodeIndex::Hold(const RunningJob& job, int delta, std::vector<HeldGpus>* held) {
  const int share = ShareOf(job.per_replica);
  ForEachHolding(job, [&](int32_t n, uint64_t mask) {
    if (held != nullptr) held->push_back({n, mask});
    for (uint64_t m = mask; m != 0; m &= m - 1) {
      const int g = __builtin_ctzll(m);
      if (share > 0) {
        int32_t& used = share_used_[static_cast<size_t>(gpu_base_[n] + g)];
        used = std::max(0, used + delta * share);
      }
      uint16_t& holds = gpu_holds_[static_cast<size_t>(gpu_base_[n] + g)];
      holds = static_cast<uint16_t>(std::max(0, holds + delta));
      if (holds == 0) {
        held_mask_[n] &= ~(uint64_t{1} << g);
      } else {
        held_mask_[n] |= uint64_t{1} << g;
      }
    }
    used_cpu_[n] += delta * job.per_replica.milli_cpus;
    used_mem_[n] += delta * job.per_replica.memory_bytes;
    if (buckets_ready_) {  // after the build: keep the buckets in step
      Unbucket(n);
      RefreshFree(n);
      Rebucket(n);
    }
  });
}

void NodeIndex::RefreshFree(int n) {
  NodeSlot& s = slots_[n];
  const uint64_t all = s.gpu_count == 64 ? ~uint64_t{0} : (uint64_t{1} << s.gpu_count) - 1;
  s.free_mask = all & ~held_mask_[n] & ~s.reserved_mask;
  s.free_cpu = std::max<int64_t>(0, cap_cpu_[n] - used_cpu_[n]);
  s.free_mem = std::max<int64_t>(0, cap_mem_[n] - used_mem_[n]);
}

void NodeIndex::NodeStateChanged(size_t node) {
  const int n = slot_of_node_[node];
  Unbucket(n);
  slots_[n].schedulable = IsSchedulable(snapshot_->nodes[node].state);
  Rebucket(n);
}

void NodeIndex::BeginPass() {
  journaling_ = true;
  journal_.clear();
  share_journal_.clear();
  if (++pass_ == 0) {  // wrapped: no slot may look saved already
    std::fill(touched_.begin(), touched_.end(), 0);
    pass_ = 1;
  }
  held_valid_ = false;  // the running jobs may have moved
}

void NodeIndex::EndPass() {
  for (auto it = share_journal_.rbegin(); it != share_journal_.rend(); ++it) {
    share_used_[static_cast<size_t>(it->first)] = it->second;
  }
  share_journal_.clear();
  for (const Saved& saved : journal_) {
    Unbucket(saved.node);
    NodeSlot& s = slots_[saved.node];
    s.free_mask = saved.free_mask;
    s.reserved_mask = saved.reserved_mask;
    s.reserved_from = saved.reserved_from;
    s.free_cpu = saved.free_cpu;
    s.free_mem = saved.free_mem;
    Rebucket(saved.node);
  }
  journal_.clear();
  reserved_nodes_.clear();  // no reservation outlives its pass
  ++reservation_epoch_;
  journaling_ = false;
  held_valid_ = false;
}

void NodeIndex::Record(int n) {
  if (!journaling_ || touched_[n] == pass_) return;
  touched_[n] = pass_;
  const NodeSlot& s = slots_[n];
  journal_.push_back({n, s.free_mask, s.reserved_mask, s.reserved_from, s.free_cpu, s.free_mem});
}

void NodeIndex::EnsureHeld() {
  if (held_valid_) return;
  held_valid_ = true;
  held_.clear();
  held_start_.clear();
  held_start_.reserve(snapshot_->running.size() + 1);
  for (const RunningJob& job : snapshot_->running) {
    held_start_.push_back(static_cast<int32_t>(held_.size()));
    ForEachHolding(job, [&](int32_t n, uint64_t mask) { held_.push_back({n, mask}); });
  }
  held_start_.push_back(static_cast<int32_t>(held_.size()));
}

void NodeIndex::EnsureClasses() {
  if (classes_built_) return;
  classes_built_ = true;
  using ClassKey = std::tuple<int, int, int64_t, int64_t, int64_t, int>;
  std::map<ClassKey, int> key_to_class;
  const int leaves = LeafCount();
  std::vector<int64_t> leaf_count;  // class * leaves + leaf
  class_of_.assign(slots_.size(), -1);
  // Neighbouring nodes are mostly of one class: skip the map when the key repeats.
  ClassKey last_key{};
  int last_class = -1;
  for (size_t n = 0; n < slots_.size(); ++n) {
    const NodeSlot& slot = slots_[n];
    int max_domain = 0;
    for (size_t d = 0; d < slot.nvlink_masks.size(); ++d) {
      max_domain = std::max(max_domain, __builtin_popcountll(slot.nvlink_masks[d]));
    }
    const ClassKey key{static_cast<int>(slot.type),
                       slot.gpu_count,
                       slot.gpu_memory,
                       cap_cpu_[n],
                       cap_mem_[n],
                       max_domain};
    if (last_class < 0 || key != last_key) {
      auto [it, inserted] = key_to_class.emplace(key, static_cast<int>(classes_.size()));
      if (inserted) {
        classes_.push_back(NodeClass{slot.type,
                                     slot.gpu_count,
                                     slot.gpu_memory,
                                     cap_cpu_[n],
                                     cap_mem_[n],
                                     max_domain,
                                     0,
                                     {}});
        leaf_count.resize(classes_.size() * leaves, 0);
      }
      last_key = key;
      last_class = it->second;
    }
    ++classes_[last_class].count;
    ++leaf_count[static_cast<size_t>(last_class) * leaves + slot.leaf];
    class_of_[n] = last_class;
  }
  for (size_t k = 0; k < classes_.size(); ++k) {
    for (int l = 0; l < leaves; ++l) {
      if (int64_t c = leaf_count[k * leaves + l]; c > 0) classes_[k].per_leaf.emplace_back(l, c);
    }
  }
}

int16_t NodeIndex::TypeOf(const std::string& gpu_type) const {
  for (size_t t = 0; t < type_names_.size(); ++t) {
    if (GpuTypeMatches(gpu_type, type_names_[t])) return static_cast<int16_t>(t);
  }
  return -1;
}

int NodeIndex::NodeByName(const std::string& name) const { return slot_by_name_.Find(name); }

uint64_t NodeIndex::MaskOf(int n, const std::vector<int>& gpu_indices) const {
  uint64_t mask = 0;
  if (identity_indices_[n]) {
    for (int gpu_index : gpu_indices) {
      if (gpu_index >= 0 && gpu_index < slots_[n].gpu_count) mask |= uint64_t{1} << gpu_index;
    }
    return mask;
  }
  const Node& node = snapshot_->nodes[slots_[n].node];
  for (int gpu_index : gpu_indices) {
    for (int g = 0; g < slots_[n].gpu_count; ++g) {
      if (node.gpus[g].index == gpu_index) mask |= uint64_t{1} << g;
    }
  }
  return mask;
}

int NodeIndex::ReplicasFit(int n, const Shape& shape) const {
  const NodeSlot& s = slots_[n];
  if (!s.schedulable) return 0;
  int64_t fit = int64_t{1} << 30;
  if (shape.gpus > 0) {
    if (s.type < 0 || (shape.type >= 0 && s.type != shape.type)) return 0;
    if (shape.gpu_memory > s.gpu_memory) return 0;
    if (shape.share > 0) {
      int64_t shares = 0;
      for (int g = 0; g < s.gpu_count; ++g) shares += ShareRoom(n, g) / shape.share;
      fit = std::min(fit, shares);
    } else {
      fit = std::min<int64_t>(fit, s.FreeGpus() / shape.gpus);
    }
  }
  if (shape.cpu > 0) fit = std::min(fit, s.free_cpu / shape.cpu);
  if (shape.mem > 0) fit = std::min(fit, s.free_mem / shape.mem);
  return static_cast<int>(std::max<int64_t>(0, fit));
}

int NodeIndex::MaxFree(int type) const {
  if (type < 0) {
    int m = 0;
    for (int t = 0; t < TypeCount(); ++t) m = std::max(m, MaxFree(t));
    return m;
  }
  const uint64_t bits = type_free_bits_[type];
  return bits == 0 ? 0 : 64 - __builtin_clzll(bits);
}

int64_t NodeIndex::LeafReplicaBound(int type, int leaf, int gpus) const {
  gpus = std::max(gpus, 1);
  if (gpus > 64) return 0;
  // Free counts present in the leaf, from `gpus` up.
  uint64_t bits = leaf_free_bits_[static_cast<size_t>(type) * leaf_names_.size() + leaf] >>
                  (gpus - 1) << (gpus - 1);
  int64_t bound = 0;
  while (bits != 0) {
    const int f = __builtin_ctzll(bits) + 1;
    bits &= bits - 1;
    bound += static_cast<int64_t>(bucket_size_[BucketKey(type, leaf, f)]) * (f / gpus);
  }
  return bound;
}

void NodeIndex::Unbucket(int n) {
  const int f = bucketed_[n];
  if (f < 0) return;
  bucketed_[n] = -1;
  const NodeSlot& s = slots_[n];
  const size_t g = LeafKey(s.type, s.leaf);
  const size_t pos = static_cast<size_t>(group_pos_[n]);
  bucket_bits_[group_bits_[g] + f * GroupWords(g) + pos / 64] &= ~(uint64_t{1} << (pos % 64));
  const bool emptied = --bucket_size_[BucketKey(s.type, s.leaf, f)] == 0;
  free_by_type_[s.type] -= f;
  if (f > 0) {
    if (emptied) leaf_free_bits_[g] &= ~(uint64_t{1} << (f - 1));
    if (--nodes_by_type_free_[s.type * 65 + f] == 0)
      type_free_bits_[s.type] &= ~(uint64_t{1} << (f - 1));
  } else {
    --nodes_by_type_free_[s.type * 65];
  }
}

void NodeIndex::Rebucket(int n) {
  const NodeSlot& s = slots_[n];
  if (!buckets_ready_ || s.type < 0 || !s.schedulable) return;
  const int f = s.FreeGpus();
  bucketed_[n] = static_cast<int8_t>(f);
  const size_t g = LeafKey(s.type, s.leaf);
  const size_t pos = static_cast<size_t>(group_pos_[n]);
  bucket_bits_[group_bits_[g] + f * GroupWords(g) + pos / 64] |= uint64_t{1} << (pos % 64);
  ++bucket_size_[BucketKey(s.type, s.leaf, f)];
  free_by_type_[s.type] += f;
  ++nodes_by_type_free_[s.type * 65 + f];
  if (f > 0) {
    leaf_free_bits_[g] |= uint64_t{1} << (f - 1);
    type_free_bits_[s.type] |= uint64_t{1} << (f - 1);
  }
}

void NodeIndex::ChangeShare(int n, uint64_t gpu_mask, int delta) {
  const size_t pos = static_cast<size_t>(gpu_base_[n] + __builtin_ctzll(gpu_mask));
  int32_t& used = share_used_[pos];
  if (journaling_) share_journal_.emplace_back(static_cast<int32_t>(pos), used);
  used = std::max(0, used + delta);
  // The GPU is free exactly when no share is left on it.
  NodeSlot& s = slots_[n];
  if (used > 0) {
    s.free_mask &= ~gpu_mask;
  } else {
    s.free_mask |= gpu_mask;
  }
}

void NodeIndex::Take(int n, uint64_t gpu_mask, int64_t cpu, int64_t mem, int share) {
  Record(n);
  Unbucket(n);
  NodeSlot& s = slots_[n];
  if (share > 0 && gpu_mask != 0) {
    ChangeShare(n, gpu_mask & (~gpu_mask + 1), share);
  } else {
    s.free_mask &= ~gpu_mask;
  }
  s.free_cpu -= cpu;
  s.free_mem -= mem;
  Rebucket(n);
}

void NodeIndex::Reserve(int n, uint64_t gpu_mask, Timestamp from) {
  Record(n);
  ++reservation_epoch_;
  Unbucket(n);
  NodeSlot& s = slots_[n];
  gpu_mask &= s.free_mask;
  if (s.reserved_mask == 0 || from < s.reserved_from) s.reserved_from = from;
  s.reserved_mask |= gpu_mask;
  s.free_mask &= ~gpu_mask;
  if (s.reserved_mask != 0) reserved_nodes_.insert(n);
  Rebucket(n);
}

void NodeIndex::Release(int n, uint64_t gpu_mask, int64_t cpu, int64_t mem, int share) {
  Record(n);
  Unbucket(n);
  NodeSlot& s = slots_[n];
  if (share > 0 && gpu_mask != 0) {
    ChangeShare(n, gpu_mask & (~gpu_mask + 1), -share);
  } else {
    s.free_mask |= gpu_mask;
  }
  s.free_cpu += cpu;
  s.free_mem += mem;
  Rebucket(n);
}

void NodeIndex::Unreserve(int n, uint64_t gpu_mask) {
  Record(n);
  ++reservation_epoch_;
  Unbucket(n);
  NodeSlot& s = slots_[n];
  gpu_mask &= s.reserved_mask;
  s.reserved_mask &= ~gpu_mask;
  s.free_mask |= gpu_mask;
  if (s.reserved_mask == 0) reserved_nodes_.erase(n);
  Rebucket(n);
}

int64_t NodeIndex::FreeGpus(int type) const {
  if (type >= 0) return free_by_type_[type];
  int64_t sum = 0;
  for (int64_t v : free_by_type_) sum += v;
  return sum;
}

int64_t NodeIndex::TotalGpus(int type) const {
  if (type >= 0) return total_by_type_[type];
  int64_t sum = 0;
  for (int64_t v : total_by_type_) sum += v;
  return sum;
}

}  // namespace trainyard::sched
