#include "sched/index.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace trainyard::sched {

const std::vector<int32_t>& NodeIndex::EmptyBucket() {
  static const std::vector<int32_t> empty;
  return empty;
}

NodeIndex::NodeIndex(const Snapshot& snapshot)
    : snapshot_(snapshot), slot_by_name_(snapshot.nodes.size()) {
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
  identity_indices_.assign(snapshot.nodes.size(), false);
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
    s.free_cpu = n.milli_cpus;
    s.free_mem = n.memory_bytes;
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

  // Subtract what running jobs hold, and remember where they hold it. Their nodes
  // are found by hashing: a binary search compares a dozen names per replica.
  held_start_.reserve(snapshot.running.size() + 1);
  for (const RunningJob& job : snapshot.running) {
    held_start_.push_back(static_cast<int32_t>(held_.size()));
    const std::string* last_node = nullptr;
    int32_t last_id = -1;
    for (const Placement& p : job.replicas) {
      if (last_node == nullptr || *last_node != p.node) {
        last_node = &p.node;
        last_id = slot_by_name_.Find(p.node);
      }
      if (last_id < 0) continue;
      NodeSlot& s = slots_[last_id];
      const uint64_t mask = MaskOf(last_id, p.gpus);
      held_.push_back({last_id, mask});
      s.free_mask &= ~mask;
      s.free_cpu -= job.per_replica.milli_cpus;
      s.free_mem -= job.per_replica.memory_bytes;
    }
  }
  held_start_.push_back(static_cast<int32_t>(held_.size()));

  free_by_type_.assign(type_names_.size(), 0);
  nodes_by_type_free_.assign(type_names_.size() * 65, 0);
  total_by_type_.assign(type_names_.size(), 0);
  // One bucket per possible free count: up to the largest node's GPUs, not 64, so
  // that a cluster of many leaves does not allocate thousands of empty buckets.
  int most_gpus = 0;
  for (const NodeSlot& s : slots_) most_gpus = std::max(most_gpus, s.gpu_count);
  bucket_stride_ = most_gpus + 1;
  buckets_.assign(type_names_.size() * leaf_names_.size() * bucket_stride_, {});
  leaf_free_bits_.assign(type_names_.size() * leaf_names_.size(), 0);
  type_free_bits_.assign(type_names_.size(), 0);
  bucket_pos_.assign(slots_.size(), -1);
  for (size_t i = 0; i < slots_.size(); ++i) {
    NodeSlot& s = slots_[i];
    s.free_cpu = std::max<int64_t>(0, s.free_cpu);
    s.free_mem = std::max<int64_t>(0, s.free_mem);
    if (s.type < 0) continue;
    total_by_type_[s.type] += s.gpu_count;
    Rebucket(static_cast<int>(i));
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
  const Node& node = snapshot_.nodes[slots_[n].node];
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
    fit = std::min<int64_t>(fit, s.FreeGpus() / shape.gpus);
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
    bound += static_cast<int64_t>(buckets_[BucketKey(type, leaf, f)].size()) * (f / gpus);
  }
  return bound;
}

void NodeIndex::Unbucket(int n) {
  NodeSlot& s = slots_[n];
  if (bucket_pos_[n] < 0) return;
  auto& b = buckets_[BucketKey(s.type, s.leaf, s.FreeGpus())];
  int pos = bucket_pos_[n];
  b[pos] = b.back();
  bucket_pos_[b[pos]] = pos;
  b.pop_back();
  bucket_pos_[n] = -1;
  const int f = s.FreeGpus();
  free_by_type_[s.type] -= f;
  if (f > 0) {
    if (b.empty()) leaf_free_bits_[LeafKey(s.type, s.leaf)] &= ~(uint64_t{1} << (f - 1));
    if (--nodes_by_type_free_[s.type * 65 + f] == 0)
      type_free_bits_[s.type] &= ~(uint64_t{1} << (f - 1));
  } else {
    --nodes_by_type_free_[s.type * 65];
  }
}

void NodeIndex::Rebucket(int n) {
  NodeSlot& s = slots_[n];
  if (s.type < 0 || !s.schedulable) return;
  auto& b = buckets_[BucketKey(s.type, s.leaf, s.FreeGpus())];
  bucket_pos_[n] = static_cast<int32_t>(b.size());
  b.push_back(n);
  const int f = s.FreeGpus();
  free_by_type_[s.type] += f;
  ++nodes_by_type_free_[s.type * 65 + f];
  if (f > 0) {
    leaf_free_bits_[LeafKey(s.type, s.leaf)] |= uint64_t{1} << (f - 1);
    type_free_bits_[s.type] |= uint64_t{1} << (f - 1);
  }
}

void NodeIndex::Take(int n, uint64_t gpu_mask, int64_t cpu, int64_t mem) {
  Unbucket(n);
  NodeSlot& s = slots_[n];
  s.free_mask &= ~gpu_mask;
  s.free_cpu -= cpu;
  s.free_mem -= mem;
  Rebucket(n);
}

void NodeIndex::Reserve(int n, uint64_t gpu_mask, Timestamp from) {
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

void NodeIndex::Release(int n, uint64_t gpu_mask, int64_t cpu, int64_t mem) {
  Unbucket(n);
  NodeSlot& s = slots_[n];
  s.free_mask |= gpu_mask;
  s.free_cpu += cpu;
  s.free_mem += mem;
  Rebucket(n);
}

void NodeIndex::Unreserve(int n, uint64_t gpu_mask) {
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
