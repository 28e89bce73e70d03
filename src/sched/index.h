// NodeIndex: the free capacity of the cluster during one scheduling pass.
//
// Built from a Snapshot (capacity of each node minus what running jobs hold), then
// changed by the pass as it binds gangs and reserves GPUs. It answers "where does
// this replica shape fit" from aggregates first: nodes are bucketed by (GPU type,
// leaf switch, free GPUs), and the bucket sizes form a histogram per leaf, so a gang's
// fit per leaf is computed without touching nodes. A bucket is a bitset over the
// nodes of its (type, leaf) in slot order, so walks visit nodes in name order however
// the index got to its state.
//
// GPUs are addressed by position in the node's GPU list (at most 64 per node, so a
// node's free GPUs are one 64-bit mask); Placement converts positions to the GPU
// indices agents know.
//
// GPU sharing: a replica may take a share of one GPU (Shape::share, in thousandths).
// A GPU with shares in use is not free (not in free_mask) but keeps the room its
// shares leave (ShareRoom) for further shares; it is free again when the last share
// is released.
//
// Kept across passes (sched::SnapshotIndex): RunningAdded / RunningRemoved /
// NodeStateChanged follow the snapshot between passes, and BeginPass / EndPass put
// back everything a pass changed, so the next pass starts from the same state a
// fresh build of its snapshot would have.
//
// Private to sched/. Thread-safety: none; one pass owns one index.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sched/snapshot.h"

namespace trainyard::sched {

// A short list kept inline, spilling to the heap past N: nodes have one NVLink domain
// or a few, and an index is rebuilt every pass, so two heap lists per node would be
// thousands of allocations per pass. Only what NodeSlot needs of a vector.
template <typename T, size_t N>
class InlineList {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return i < N ? inline_[i] : spill_[i - N]; }
  T& operator[](size_t i) { return i < N ? inline_[i] : spill_[i - N]; }
  void push_back(const T& v) {
    if (size_ < N) {
      inline_[size_] = v;
    } else {
      spill_.push_back(v);
    }
    ++size_;
  }

 private:
  std::array<T, N> inline_{};
  std::vector<T> spill_;
  size_t size_ = 0;
};

// Names (views of strings that outlive the table) to ids: open addressing in one
// array, so interning ten thousand names costs no allocation each.
class NameTable {
 public:
  // Sized so that `expected` names fill at most 3/4 of it.
  explicit NameTable(size_t expected) {
    size_t cap = 16;
    while (cap * 3 < expected * 4) cap *= 2;
    entries_.resize(cap);
  }
  // The id of `name`, inserting `id` for it when it is new.
  int32_t Intern(std::string_view name, int32_t id) {
    const size_t hash = std::hash<std::string_view>{}(name);
    Entry& e = entries_[Slot(name, hash)];
    if (e.id < 0) {
      e = {name, id, static_cast<uint32_t>(hash)};
      if (++size_ * 4 > entries_.size() * 3) Grow();
      return id;
    }
    return e.id;
  }
  int32_t Find(std::string_view name) const {
    return entries_[Slot(name, std::hash<std::string_view>{}(name))].id;
  }
  size_t size() const { return size_; }

 private:
  struct Entry {
    std::string_view name;
    int32_t id = -1;
    uint32_t hash = 0;  // low bits of the name's hash: most mismatches skip the compare
  };
  // Where `name` is, or the empty slot where it would go.
  size_t Slot(std::string_view name, size_t hash) const {
    const size_t mask = entries_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const Entry& e = entries_[i];
      if (e.id < 0 || (e.hash == static_cast<uint32_t>(hash) && e.name == name)) return i;
    }
  }
  void Grow() {
    std::vector<Entry> old(entries_.size() * 2);
    old.swap(entries_);
    for (const Entry& e : old) {
      if (e.id >= 0) entries_[Slot(e.name, std::hash<std::string_view>{}(e.name))] = e;
    }
  }
  std::vector<Entry> entries_;
  size_t size_ = 0;
};

struct NodeSlot {
  int32_t node = 0;   // index into Snapshot::nodes
  int16_t type = -1;  // interned GPU type; -1: no GPUs
  int16_t leaf = 0;   // interned leaf switch
  bool schedulable = false;
  int gpu_count = 0;
  int64_t gpu_memory = 0;
  uint64_t free_mask = 0;      // free and not reserved
  uint64_t reserved_mask = 0;  // free now, but reserved for a blocked job
  Timestamp reserved_from{};   // earliest start among reservations on this node
  int64_t free_cpu = 0;        // millicores
  int64_t free_mem = 0;
  InlineList<uint64_t, 4> nvlink_masks;  // GPU positions per NVLink domain on this node
  InlineList<int32_t, 4> nvlink_ids;     // interned domain id of each mask

  int FreeGpus() const { return __builtin_popcountll(free_mask); }
};

// A GPU's capacity in thousandths, the unit of shares.
constexpr int kWholeGpu = 1000;

// A replica shape: what one replica needs, plus how many replicas.
struct Shape {
  int16_t type = -1;  // -1: any GPU type
  int gpus = 0;
  int share = 0;  // 1..999: a share of one GPU (gpus is 1); 0: whole GPUs
  int64_t cpu = 0;
  int64_t mem = 0;
  int64_t gpu_memory = 0;
  int replicas = 1;
};

// The share of one GPU `r` asks for per replica, 0 when it takes whole GPUs.
inline int ShareOf(const Resources& r) {
  return r.gpus == 1 && r.gpu_milli > 0 && r.gpu_milli < kWholeGpu ? static_cast<int>(r.gpu_milli)
                                                                   : 0;
}

class NodeIndex {
 public:
  // REQUIRES: `snapshot` outlives the index, and its nodes stay where they are.
  explicit NodeIndex(const Snapshot& snapshot);

  const Snapshot& snapshot() const { return *snapshot_; }
  int NodeCount() const { return static_cast<int>(slots_.size()); }
  const NodeSlot& slot(int i) const { return slots_[i]; }
  int LeafCount() const { return static_cast<int>(leaf_names_.size()); }
  int TypeCount() const { return static_cast<int>(type_names_.size()); }
  // Every leaf id, 0 .. LeafCount() - 1, for walks over the whole cluster.
  const std::vector<int>& AllLeaves() const { return all_leaves_; }
  // True when some NVLink domain has GPUs on more than one node (NVL72-style racks).
  bool DomainsSpanNodes() const { return domains_span_nodes_; }
  const std::string& TypeName(int t) const { return type_names_[t]; }
  const std::string& LeafName(int l) const { return leaf_names_[l]; }
  // -1 when no node has GPUs of this type.
  int16_t TypeOf(const std::string& gpu_type) const;
  int NodeByName(const std::string& name) const;  // -1 when unknown

  // GPU positions on node `n` of the given agent-visible GPU indices.
  uint64_t MaskOf(int n, const std::vector<int>& gpu_indices) const;

  // Where running job `i` (index into Snapshot::running) holds GPUs, one entry per
  // replica on a known node. EnsureHeld computes it (once per pass) before use.
  struct HeldGpus {
    int32_t node;
    uint64_t mask;
  };
  void EnsureHeld();
  const HeldGpus* HeldBegin(int i) const { return held_.data() + held_start_[i]; }
  const HeldGpus* HeldEnd(int i) const { return held_.data() + held_start_[i + 1]; }

  // Nodes alike for capacity on an empty cluster (GPU type, count and memory, CPUs,
  // memory, largest NVLink domain), with how many of them each leaf has: real
  // clusters have a handful. They do not depend on what runs or on node states.
  struct NodeClass {
    int type;
    int gpus;
    int64_t gpu_memory, cpu, mem;
    int max_domain;
    int64_t count = 0;
    std::vector<std::pair<int, int64_t>> per_leaf;  // (leaf, nodes), ascending leaf
  };
  void EnsureClasses();
  const std::vector<NodeClass>& Classes() const { return classes_; }
  int ClassOf(int n) const { return class_of_[n]; }

  // How many replicas of `s` fit on node `n` now (free, unreserved capacity); a shape
  // with no GPUs, CPUs or memory fits without bound (2^30).
  int ReplicasFit(int n, const Shape& s) const;
  // Thousandths of GPU position `g` of node `n` that one more share may take: what
  // its shares leave, kWholeGpu when it is free, 0 when it is held whole or reserved.
  int ShareRoom(int n, int g) const {
    const int used = share_used_[static_cast<size_t>(gpu_base_[n] + g)];
    if (used > 0) return std::max(0, kWholeGpu - used);
    return (slots_[n].free_mask >> g & 1) != 0 ? kWholeGpu : 0;
  }
  // Thousandths in use by shares on that GPU (0: none).
  int ShareUsed(int n, int g) const { return share_used_[static_cast<size_t>(gpu_base_[n] + g)]; }
  // Upper bound of replicas of `s` that fit in leaf `l` (from the histogram; ignores
  // CPU, memory and exclusions, so the real answer may be lower).
  int64_t LeafReplicaBound(int type, int leaf, int gpus) const;
  // The most free GPUs on one schedulable node of `type` (-1: any type).
  int MaxFree(int type) const;
  // True when some schedulable node of `type` has exactly `free` free GPUs.
  bool AnyWithFree(int type, int free) const {
    return type >= 0 && free >= 0 && free <= 64 && nodes_by_type_free_[type * 65 + free] > 0;
  }
  // True when some schedulable node of `type` in `leaf` has exactly `free` (> 0) free
  // GPUs: a test of one bit, for walks that would otherwise visit empty buckets.
  bool LeafHasFree(int type, int leaf, int free) const {
    return free > 0 && free <= 64 && (leaf_free_bits_[LeafKey(type, leaf)] >> (free - 1) & 1) != 0;
  }
  // Schedulable nodes of GPU type `type` in `leaf` with exactly `free` free GPUs.
  int BucketSize(int type, int leaf, int free) const {
    if (type < 0 || free < 0 || free >= bucket_stride_) return 0;
    return bucket_size_[BucketKey(type, leaf, free)];
  }
  // Calls fn(node) for each of them in slot order until fn returns false; false then.
  template <typename Fn>
  bool ForEachInBucket(int type, int leaf, int free, Fn&& fn) const {
    if (type < 0 || free < 0 || free >= bucket_stride_) return true;
    const size_t g = LeafKey(type, leaf);
    const int32_t* nodes = group_nodes_.data() + group_start_[g];
    const size_t words = GroupWords(g);
    const uint64_t* bits = bucket_bits_.data() + group_bits_[g] + free * words;
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t b = bits[w]; b != 0; b &= b - 1) {
        if (!fn(nodes[w * 64 + static_cast<size_t>(__builtin_ctzll(b))])) return false;
      }
    }
    return true;
  }

  // Takes the GPUs in `gpu_mask` (positions), CPUs and memory from node `n`; with
  // `share` > 0, that share of the one GPU in `gpu_mask` instead of the whole GPU.
  void Take(int n, uint64_t gpu_mask, int64_t cpu, int64_t mem, int share = 0);
  // Gives back what Take took (for what-if searches that undo themselves).
  void Release(int n, uint64_t gpu_mask, int64_t cpu, int64_t mem, int share = 0);
  // Marks free GPUs of node `n` reserved from time `from`; they stop counting as free.
  void Reserve(int n, uint64_t gpu_mask, Timestamp from);

  // Returns reserved GPUs of node `n` in `gpu_mask` to the free pool (and back).
  void Unreserve(int n, uint64_t gpu_mask);
  // Nodes that hold reserved GPUs, ascending.
  const std::set<int32_t>& ReservedNodes() const { return reserved_nodes_; }
  // Changes whenever Reserve or Unreserve is called: what was computed from the
  // reservations stays valid while it is the same.
  uint64_t ReservationEpoch() const { return reservation_epoch_; }

  // Free GPUs of `type` in the cluster (-1: all types), unreserved.
  int64_t FreeGpus(int type) const;
  // Every GPU of `type` that exists (any node state).
  int64_t TotalGpus(int type) const;

  // Between passes: `job` was added to / is about to leave Snapshot::running, or the
  // state of Snapshot::nodes[node] changed. REQUIRES: no pass under way.
  void RunningAdded(const RunningJob& job) { Hold(job, 1, nullptr); }
  void RunningRemoved(const RunningJob& job) { Hold(job, -1, nullptr); }
  void NodeStateChanged(size_t node);
  // A pass's changes (Take, Release, Reserve, Unreserve) are recorded from BeginPass
  // and undone by EndPass.
  void BeginPass();
  void EndPass();

 private:
  void Unbucket(int n);
  void Rebucket(int n);
  // Adds (+1) or removes (-1) what `job` holds to the per-GPU hold counts and the
  // CPU and memory in use, and recomputes the free capacity of its nodes; appends
  // where it holds GPUs to `held` when given.
  void Hold(const RunningJob& job, int delta, std::vector<HeldGpus>* held);
  // Calls fn(slot, GPU positions) for each replica of `job` on a known node.
  template <typename Fn>
  void ForEachHolding(const RunningJob& job, Fn&& fn) const;
  void RefreshFree(int n);
  // Adds `delta` thousandths to the shares in use on the one GPU of `gpu_mask` and
  // frees or unfrees it to match; journaled during a pass.
  void ChangeShare(int n, uint64_t gpu_mask, int delta);
  void Record(int n);  // saves node `n`'s state the first time a pass changes it
  size_t LeafKey(int type, int leaf) const {
    return static_cast<size_t>(type) * leaf_names_.size() + leaf;
  }
  size_t BucketKey(int type, int leaf, int free) const {
    return (static_cast<size_t>(type) * leaf_names_.size() + leaf) * bucket_stride_ + free;
  }
  size_t GroupWords(size_t g) const {
    return static_cast<size_t>(group_start_[g + 1] - group_start_[g] + 63) / 64;
  }

  const Snapshot* snapshot_;
  NameTable slot_by_name_;  // node name -> slot; views of the snapshot's names
  std::vector<NodeSlot> slots_;
  std::vector<int32_t> slot_of_node_;  // Snapshot::nodes position -> slot
  std::vector<std::string> type_names_;
  std::vector<std::string> leaf_names_;
  std::vector<int> all_leaves_;
  bool domains_span_nodes_ = false;
  // Buckets. The nodes of each (type, leaf) group in slot order, and per (group,
  // free count) a bitset over them.
  std::vector<int32_t> group_nodes_;   // slots, by group
  std::vector<int32_t> group_start_;   // LeafKey -> first in group_nodes_ (one past: end)
  std::vector<int32_t> group_pos_;     // slot -> position in its group
  std::vector<size_t> group_bits_;     // LeafKey -> first word of its free-count-0 bitset
  std::vector<uint64_t> bucket_bits_;  // per group: bucket_stride_ bitsets of GroupWords
  std::vector<int32_t> bucket_size_;   // BucketKey -> nodes in the bucket
  int bucket_stride_ = 65;             // 1 + the most GPUs on one node
  std::vector<int8_t> bucketed_;       // slot -> the free count it is bucketed at; -1: none
  bool buckets_ready_ = false;
  std::set<int32_t> reserved_nodes_;
  uint64_t reservation_epoch_ = 0;
  std::vector<int64_t> free_by_type_;
  std::vector<int32_t> nodes_by_type_free_;  // type * 65 + free -> schedulable nodes
  // Bit f-1 set: some schedulable node has exactly f (1..64) free GPUs; per type and
  // leaf (LeafKey), and per type.
  std::vector<uint64_t> leaf_free_bits_;
  std::vector<uint64_t> type_free_bits_;
  std::vector<int64_t> total_by_type_;
  // What running jobs hold: replicas per GPU position (gpu_base_[n] + position), and
  // CPU and memory per node, against the node's capacity.
  std::vector<int32_t> gpu_base_;
  std::vector<uint16_t> gpu_holds_;
  std::vector<uint64_t> held_mask_;  // slot -> GPU positions with a hold
  // Thousandths in use by shares, per GPU position: running jobs' and, during a
  // pass, its own (undone by EndPass from share_journal_).
  std::vector<int32_t> share_used_;
  std::vector<int64_t> cap_cpu_, cap_mem_, used_cpu_, used_mem_;
  std::vector<HeldGpus> held_;       // running jobs' replicas, in index terms
  std::vector<int32_t> held_start_;  // running job -> first entry in held_
  bool held_valid_ = false;
  std::vector<NodeClass> classes_;
  std::vector<int> class_of_;  // slot -> class
  bool classes_built_ = false;
  // The pass journal: each changed node's state before the pass's first change.
  struct Saved {
    int32_t node;
    uint64_t free_mask, reserved_mask;
    Timestamp reserved_from;
    int64_t free_cpu, free_mem;
  };
  std::vector<Saved> journal_;
  std::vector<std::pair<int32_t, int32_t>> share_journal_;  // (GPU position, share before)
  std::vector<uint32_t> touched_;  // slot -> the pass number that last saved it
  uint32_t pass_ = 0;
  bool journaling_ = false;
  // Nodes whose agent-visible GPU indices are their positions (0, 1, ...), the
  // usual case: MaskOf needs no search there.
  std::vector<bool> identity_indices_;
};

}  // namespace trainyard::sched
