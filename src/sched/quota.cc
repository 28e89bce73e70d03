#include "sched/quota.h"

#include <algorithm>
#include <limits>

namespace trainyard::sched {

QueueUsage::QueueUsage(const Snapshot& snapshot) {
  for (const Node& n : snapshot.nodes) {  // what Add(cluster, n.Capacity()) sums, without copies
    cluster.gpus = SaturatingAdd(cluster.gpus, static_cast<int64_t>(n.gpus.size()));
    cluster.milli_cpus = SaturatingAdd(cluster.milli_cpus, n.milli_cpus);
    cluster.memory_bytes = SaturatingAdd(cluster.memory_bytes, n.memory_bytes);
  }
  for (const RunningJob& j : snapshot.running) Add(j, 1);
}

void QueueUsage::Add(const RunningJob& job, int delta) {
  const Resources total = Scale(job.per_replica, static_cast<int64_t>(job.replicas.size()));
  auto it = by_queue.find({job.tenant, job.queue});
  if (delta > 0) {
    if (it == by_queue.end()) it = by_queue.emplace(std::pair{job.tenant, job.queue}, Used{}).first;
    it->second.total = trainyard::Add(it->second.total, total);
    ++it->second.jobs;
    return;
  }
  if (it == by_queue.end()) return;
  it->second.total = SubtractClamped(it->second.total, total);
  if (--it->second.jobs <= 0) by_queue.erase(it);
}

QuotaState::QuotaState(const Snapshot& snapshot, const QueueUsage& usage) {
  implicit_ = snapshot.queues.empty();
  if (implicit_) {
    // Every (tenant, queue) named by a running or pending job, once, in name order.
    // Keys view the usage's and the snapshot's names while collecting.
    std::vector<NameKey> keys;
    auto add = [&](const std::string& tenant, const std::string& queue) {
      if (by_key_.try_emplace({tenant, queue}, 0).second) keys.emplace_back(tenant, queue);
    };
    for (const auto& [key, used] : usage.by_queue) add(key.first, key.second);
    for (const auto& j : snapshot.pending) add(j.tenant, j.queue);
    by_key_.clear();
    std::sort(keys.begin(), keys.end());
    queues_.reserve(keys.size());
    for (const auto& [tenant, queue] : keys) {
      Queue q;
      q.name = queue;
      q.tenant = tenant;
      q.limit_gpus = std::numeric_limits<int64_t>::max() / 4;
      queues_.push_back(std::move(q));
    }
  } else {
    queues_ = snapshot.queues;
  }
  by_key_.reserve(queues_.size());
  for (size_t i = 0; i < queues_.size(); ++i) {
    by_key_.insert_or_assign({queues_[i].tenant, queues_[i].name}, static_cast<int>(i));
  }
  parent_.assign(queues_.size(), -1);
  for (size_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i].parent.empty()) continue;
    auto it = by_key_.find({queues_[i].tenant, queues_[i].parent});
    if (it != by_key_.end() && it->second != static_cast<int>(i)) parent_[i] = it->second;
  }
  // A cycle in parents (bad input) is cut so that walks terminate.
  for (size_t i = 0; i < queues_.size(); ++i) {
    int slow = static_cast<int>(i), steps = 0;
    for (int q = parent_[i]; q >= 0; q = parent_[q]) {
      if (++steps > static_cast<int>(queues_.size())) {
        parent_[slow] = -1;
        break;
      }
    }
  }
  used_.assign(queues_.size(), Resources{});
  cluster_ = usage.cluster;
  for (const auto& [key, used] : usage.by_queue) {
    int q = Find(key.first, key.second);
    if (q >= 0) Add(q, used.total);
  }
}

int QuotaState::Find(const std::string& tenant, const std::string& queue) const {
  auto it = by_key_.find({tenant, queue});
  return it == by_key_.end() ? -1 : it->second;
}

std::string QuotaState::Unusable(const std::string& tenant, const std::string& queue) const {
  if (Find(tenant, queue) >= 0) return "";
  std::string names;
  for (const auto& q : queues_) {
    if (q.tenant != tenant) continue;
    names += names.empty() ? "" : ", ";
    names += q.name;
  }
  std::string msg = "queue '" + queue + "' of tenant '" + tenant + "' does not exist";
  msg += names.empty() ? "; tenant '" + tenant + "' has no queues" : "; its queues are " + names;
  return msg;
}

std::optional<std::string> QuotaState::LimitBlocks(int q, int64_t gpus) const {
  for (int a = q; a >= 0; a = parent_[a]) {
    if (used_[a].gpus + gpus > queues_[a].limit_gpus) {
      return "queue '" + queues_[a].name + "' at its limit of " +
             std::to_string(queues_[a].limit_gpus) + " GPUs (using " +
             std::to_string(used_[a].gpus) + ", job needs " + std::to_string(gpus) + ")";
    }
  }
  return std::nullopt;
}

int64_t QuotaState::Headroom(int q) const {
  int64_t h = std::numeric_limits<int64_t>::max();
  for (int a = q; a >= 0; a = parent_[a]) {
    h = std::min(h, std::max<int64_t>(0, queues_[a].limit_gpus - used_[a].gpus));
  }
  return h;
}

int64_t QuotaState::Ceiling(int q) const {
  int64_t c = std::numeric_limits<int64_t>::max();
  for (int a = q; a >= 0; a = parent_[a]) c = std::min(c, queues_[a].limit_gpus);
  return c;
}

bool QuotaState::WithinGuarantee(int q, int64_t gpus) const {
  return used_[q].gpus + gpus <= queues_[q].guaranteed_gpus;
}

bool QuotaState::Borrowing(int q) const { return used_[q].gpus > queues_[q].guaranteed_gpus; }

double QuotaState::Share(int q) const {
  auto frac = [](int64_t used, int64_t total) {
    return total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
  };
  double dominant =
      std::max({frac(used_[q].gpus, cluster_.gpus), frac(used_[q].milli_cpus, cluster_.milli_cpus),
                frac(used_[q].memory_bytes, cluster_.memory_bytes)});
  return dominant / std::max(queues_[q].weight, 1e-9);
}

void QuotaState::Add(int q, const Resources& total) {
  for (int a = q; a >= 0; a = parent_[a]) used_[a] = trainyard::Add(used_[a], total);
}

void QuotaState::Remove(int q, const Resources& total) {
  for (int a = q; a >= 0; a = parent_[a]) used_[a] = SubtractClamped(used_[a], total);
}

}  // namespace trainyard::sched
