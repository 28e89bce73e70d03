// Committer: the one path from the control plane's changes to its store, with no lock
// of the cluster held across the store's I/O.
//
// The cluster applies a change to its in-memory state under its lock (lifecycle.h),
// gives it the next sequence number and enqueues its batch here before it lets the
// lock go. Whoever then waits for a number leads a group commit of everything queued
// so far: one transaction for a burst of changes, run with no cluster lock held. After
// the commit the leader calls the cluster back (Published) to make what the group made
// visible: the commands its changes queued become deliverable, polls wake. Waiters of
// the group are answered with the commit's status; an empty group is not written.
//
// Order: numbers are committed in the order they were enqueued, and a group only after
// the groups before it. When a commit fails, every change after the last durable one
// (the group, and whatever was queued after it, built on it) is failed with its error:
// the cluster, told so through Published, rebuilds its state from the store.
//
// Thread-safety: every method may be called from any thread. Enqueue must be called
// in sequence order (the cluster does so under its own lock).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "store/store.h"

namespace trainyard::server {

class Committer {
 public:
  // Called by the leader after each group, with no lock of the committer held: the
  // group's changes [first, last] and their batches, in order, as one batch (committed,
  // or not when `status` is an error). On an error the callee must call
  // DrainAfterFailure while it stops new changes being built on the failed ones (the
  // cluster: under its lock, as it rebuilds its state).
  using Published = std::function<void(const Status& status, const store::WriteBatch& group,
                                       uint64_t first, uint64_t last)>;

  Committer(store::Store* store, Published published);

  // Queues the batch of change `seq` (the next number after the last enqueued).
  void Enqueue(uint64_t seq, store::WriteBatch batch);
  // Blocks until change `seq` is committed and published, leading the group commit
  // when no one is. Returns the commit's status.
  Status Wait(uint64_t seq);
  // The last number committed (or failed) and published.
  uint64_t durable() const;
  // Fails every change queued now, with the error of the group being published.
  // REQUIRES: called from Published, for a failed group.
  void DrainAfterFailure();

 private:
  Status StatusOf(uint64_t seq) const;  // REQUIRES: mu_ held; seq <= durable_

  store::Store* const store_;
  const Published published_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Entry {
    uint64_t seq = 0;
    store::WriteBatch batch;
  };
  std::deque<Entry> queue_;  // GUARDED_BY(mu_)
  bool leading_ = false;     // GUARDED_BY(mu_): a group commit is under way
  // The highest number DrainAfterFailure failed along with the group (0: none).
  uint64_t drained_to_ = 0;  // GUARDED_BY(mu_)
  uint64_t durable_ = 0;     // GUARDED_BY(mu_)
  // The latest failed ranges of numbers [first, last] and their errors, newest last.
  struct Failure {
    uint64_t first, last;
    Status status;
  };
  std::deque<Failure> failures_;  // GUARDED_BY(mu_)
};

}  // namespace trainyard::server
