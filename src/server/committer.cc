#include "server/committer.h"

#include <algorithm>
#include <utility>

namespace trainyard::server {
namespace {

// Failed ranges remembered for waiters that wake late; far more than can wait at once.
constexpr size_t kFailuresKept = 256;

}  // namespace

Committer::Committer(store::Store* store, Published published)
    : store_(store), published_(std::move(published)) {}

void Committer::Enqueue(uint64_t seq, store::WriteBatch batch) {
  std::lock_guard lk(mu_);
  queue_.push_back({seq, std::move(batch)});
}

uint64_t Committer::durable() const {
  std::lock_guard lk(mu_);
  return durable_;
}

void Committer::DrainAfterFailure() {
  std::lock_guard lk(mu_);
  for (const Entry& e : queue_) drained_to_ = std::max(drained_to_, e.seq);
  queue_.clear();
}

Status Committer::StatusOf(uint64_t seq) const {
  for (auto it = failures_.rbegin(); it != failures_.rend(); ++it) {
    if (seq >= it->first && seq <= it->last) return it->status;
  }
  return Status::Ok();
}

Status Committer::Wait(uint64_t seq) {
  std::unique_lock lk(mu_);
  while (durable_ < seq) {
    if (leading_ || queue_.empty()) {
      // Another thread commits (or has yet to enqueue what this one waits for, which
      // cannot happen: a number is enqueued before it is waited for).
      cv_.wait(lk);
      continue;
    }
    leading_ = true;
    std::vector<Entry> group(std::make_move_iterator(queue_.begin()),
                             std::make_move_iterator(queue_.end()));
    queue_.clear();
    lk.unlock();
    store::WriteBatch merged;
    for (Entry& e : group) merged.Append(std::move(e.batch));
    Status status = merged.empty() ? Status::Ok() : store_->Commit(merged);
    const uint64_t first = group.front().seq;
    uint64_t last = group.back().seq;
    published_(status, merged, first, last);
    lk.lock();
    if (!status.ok()) {
      // What was queued after the group was built on it (DrainAfterFailure): it fails too.
      last = std::max(last, drained_to_);
      drained_to_ = 0;
      failures_.push_back({first, last, status});
      if (failures_.size() > kFailuresKept) failures_.pop_front();
    }
    durable_ = last;
    leading_ = false;
    cv_.notify_all();
  }
  return StatusOf(seq);
}

}  // namespace trainyard::server
