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

#include "sched/decisions.h"
#include "sched/policy.h"
#include "sched/snapshot.h"

namespace trainyard::sched {

// REQUIRES: ValidatePolicy(policy).ok().
Decisions Schedule(const Snapshot& snapshot, const Policy& policy);

}  // namespace trainyard::sched
