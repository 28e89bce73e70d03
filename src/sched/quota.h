// Quota: what each queue uses, is guaranteed and may reach, during one pass.
//
// Queues form a tree per tenant (Queue::parent). A queue's use counts against its
// own limit and every ancestor's. Use beyond the guarantee is borrowed from other
// queues' idle guarantees; a queue below its guarantee may reclaim it by
// preemption. Shares for fair ordering are dominant-resource shares (DRF: the
// largest of GPU, CPU and memory use as a fraction of the cluster) over weight.
//
// When the snapshot defines no queues at all, every queue name is an implicit queue
// with no guarantee and no limit; implicit queues are numbered in name order, so
// that nothing depends on where the snapshot lists its jobs.
//
// Private to sched/. Thread-safety: none.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sched/snapshot.h"

namespace trainyard::sched {

// What running jobs use per (tenant, queue), and what the cluster holds: the part of
// a QuotaState that running jobs and nodes decide. sched::SnapshotIndex keeps one
// across passes.
struct QueueUsage {
  explicit QueueUsage(const Snapshot& snapshot);
  // `job` joined (+1) or left (-1) the running jobs.
  void Add(const RunningJob& job, int delta);

  struct Used {
    Resources total;
    int64_t jobs = 0;
  };
  Resources cluster;
  std::map<std::pair<std::string, std::string>, Used> by_queue;  // (tenant, queue)
};

class QuotaState {
 public:
  explicit QuotaState(const Snapshot& snapshot) : QuotaState(snapshot, QueueUsage(snapshot)) {}
  // REQUIRES: `usage` is QueueUsage(snapshot), however it was kept.
  QuotaState(const Snapshot& snapshot, const QueueUsage& usage);

  // -1 when the queue does not exist (and queues are configured).
  int Find(const std::string& tenant, const std::string& queue) const;
  // Why `tenant`/`queue` is unusable, for an Infeasible message; empty when fine.
  std::string Unusable(const std::string& tenant, const std::string& queue) const;

  // Why adding `gpus` would break a limit on `q` or an ancestor; nullopt when it fits.
  std::optional<std::string> LimitBlocks(int q, int64_t gpus) const;
  // GPUs `q` may still take now before it or an ancestor hits its limit.
  int64_t Headroom(int q) const;
  // The most GPUs `q` could ever hold (its limit and its ancestors').
  int64_t Ceiling(int q) const;
  // True when `q` would stay within its guarantee after adding `gpus`.
  bool WithinGuarantee(int q, int64_t gpus) const;
  // True when `q` uses more than its guarantee.
  bool Borrowing(int q) const;
  double Share(int q) const;

  void Add(int q, const Resources& total);
  void Remove(int q, const Resources& total);

  const std::string& Name(int q) const { return queues_[q].name; }
  int64_t Used(int q) const { return used_[q].gpus; }
  int64_t Guaranteed(int q) const { return queues_[q].guaranteed_gpus; }
  int64_t Limit(int q) const { return queues_[q].limit_gpus; }

 private:
  bool implicit_ = false;
  std::vector<Queue> queues_;
  std::vector<int> parent_;
  std::vector<Resources> used_;
  // (tenant, queue) -> index; the views are of queues_' names, which do not move.
  using NameKey = std::pair<std::string_view, std::string_view>;
  struct NameKeyHash {
    size_t operator()(const NameKey& k) const {
      const size_t a = std::hash<std::string_view>{}(k.first);
      return a ^ (std::hash<std::string_view>{}(k.second) + 0x9e3779b97f4a7c15ull + (a << 6) +
                  (a >> 2));
    }
  };
  std::unordered_map<NameKey, int, NameKeyHash> by_key_;
  Resources cluster_;
};

}  // namespace trainyard::sched
