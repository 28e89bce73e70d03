// sched::Schedule: the scheduling policy, as one pure function.
//
//   Decisions Schedule(const Snapshot&, const Policy&)
//
// No I/O, no clock (time is snapshot.now), no threads; the same snapshot and policy
// always give the same decisions. The server and the simulator both call it.
//
// One pass, in order:
//  1. Jobs that can never run on this cluster (no node or leaf large enough, no such
//     queue, more GPUs than their queue may ever hold) are Infeasible, with why.
//     Held jobs and jobs in retry backoff wait.
//  2. The rest are taken in the policy's order (by default: priority class, then
//     jobs within their queue's guarantee, then the queue with the smallest weighted
//     dominant share, then age), one queue head at a time so shares stay current.
//  3. Each job is bound whole (a gang) where it fits now, within its queue's limit
//     and its topology constraint; or, when it only fits on GPUs reserved for an
//     earlier blocked gang, only if its time limit ends before that reservation.
//  4. A gang that does not fit may preempt: running jobs of lower priority (in its
//     own queue, or in a queue that is borrowing), or any job of a borrowing queue
//     when its own queue is below its guarantee (reclaim); never within their
//     minimum runtime, never a non-preemptible one. Victims are whole gangs chosen
//     for the least lost work (preemption.h).
//  5. Otherwise the first blocked gangs get a reservation (backfill.h), and the rest
//     wait with a reason. With backfill off, nothing starts after the first blocked
//     job (strict FIFO).
#pragma once

#include <cstddef>
#include <memory>

#include "sched/decisions.h"
#include "sched/policy.h"
#include "sched/snapshot.h"

namespace trainyard::sched {

// REQUIRES: ValidatePolicy(policy).ok().
Decisions Schedule(const Snapshot& snapshot, const Policy& policy);

class NodeIndex;
struct QueueUsage;

// For a caller that runs many passes over one snapshot that changes a little between
// them (the simulator): what every pass would otherwise derive from all nodes and all
// running jobs, kept in step by being told of each change. Schedule with it returns
// exactly what Schedule without it returns for the same snapshot (the tests check
// it), in time that grows with the pending jobs and not with the cluster.
//
// The snapshot must outlive it, and its nodes vector must not be resized; tell it of
// every running job added (after appending it) or removed (before erasing it), and of
// every node whose state changes. Nothing else about nodes may change.
// Thread-safety: none.
class SnapshotIndex {
 public:
  explicit SnapshotIndex(const Snapshot& snapshot);
  ~SnapshotIndex();
  SnapshotIndex(const SnapshotIndex&) = delete;
  SnapshotIndex& operator=(const SnapshotIndex&) = delete;

  void RunningAdded(const RunningJob& job);
  void RunningRemoved(const RunningJob& job);
  void NodeStateChanged(size_t node);  // position in Snapshot::nodes

 private:
  friend Decisions Schedule(const Snapshot&, const Policy&, SnapshotIndex&);
  const Snapshot* snapshot_;
  std::unique_ptr<NodeIndex> index_;
  std::unique_ptr<QueueUsage> usage_;
};

// Schedule(snapshot, policy), with `kept` made from this very snapshot object and
// told of every change since; `kept` is as it was when this returns.
Decisions Schedule(const Snapshot& snapshot, const Policy& policy, SnapshotIndex& kept);

}  // namespace trainyard::sched
