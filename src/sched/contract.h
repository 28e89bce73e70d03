// The decision contract: what every pass of sched::Schedule promises, checked.
//
//   std::vector<Violation> CheckDecisions(const Snapshot&, const Policy&, const Decisions&)
//
// returns every way `decisions` break the contract for that snapshot and policy, in
// the order of the decisions; empty when they keep it. One checker, run by the
// property tests (schedule_property_test.cc, over thousands of random snapshots), by
// `trainyard sched replay` on every step, and by debug-build servers on every pass.
// The contract (docs/scheduler.md, "The decision contract"):
//
//  answer       every pending job is answered exactly once (bind, waiting or
//               infeasible) and decisions name only pending jobs; held jobs and jobs
//               not yet eligible (eligible_time > now) are never bound.
//  gang         a bind is whole: min_replicas..replicas replicas (as the pass reads
//               them: at least 1), each with exactly the GPUs a replica asks for.
//  placement    on known, schedulable (Ready) nodes the job does not exclude; on GPUs
//               that exist, of the asked-for type and memory, of one model per gang,
//               free in the snapshot and not given twice in the pass (a share of one
//               GPU, Resources::gpu_milli, may join other shares up to a whole GPU);
//               CPUs and memory never over-committed by a replica that asks for
//               them; inside a hard topology constraint (same-nvlink without GPUs
//               means one node, as placement reads it).
//  queue        after the pass no queue (its descendants included) is over its limit
//               because of this pass's binds; binds only into queues that exist.
//  preemption   none with preemption "none"; at most max_victims victims per job and
//               max_preemption_searches preempting jobs; each victim running, not
//               already preempting, preemptible, past min_runtime, preempted once,
//               charged GPUs x (now - last checkpoint, or start), for a pending job
//               that waits and is not bound; of lower priority in the preemptor's
//               queue or in a borrowing queue, or reclaimed by a queue that stays
//               within its guarantee from a borrowing queue. Queue use counts
//               descendants, as quotas do; "borrowing" is read after the pass's binds
//               and "within its guarantee" before them, the weakest forms of what the
//               pass tested at the time, since use only grows during a pass.
//  reservation  for waiting pending jobs, not in the past; with backfill off none but
//               the holds of preempting jobs, and at most `reservations` others; two
//               reservations share a GPU only one after the other; no bind takes a
//               reserved GPU that it would still hold when the reservation starts.
//
// Messages name the job, node and GPU ("bind of job 7: a-0 GPU 3 is already in use by
// job 2"); `trainyard sched replay` prints them to users as `!! violation:` lines.
//
// Pure: no I/O, no clock, no threads. Time is snapshot.now. Cost: linear in the
// snapshot and the decisions (jobs and nodes are found by id and name, never by
// scanning), so a debug server can run it on every pass.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sched/decisions.h"
#include "sched/policy.h"
#include "sched/snapshot.h"

namespace trainyard::sched {

// The part of the contract a violation breaks (the groups above).
enum class Contract {
  kAnswer,
  kGang,
  kPlacement,
  kQueue,
  kPreemption,
  kReservation,
};

// "answer", "gang", "placement", "queue", "preemption", "reservation".
std::string_view ContractName(Contract c);

struct Violation {
  Contract contract = Contract::kAnswer;
  std::string message;  // "bind of job 7: node a-0 is Cordoned"

  bool operator==(const Violation&) const = default;
};

// Every breach of the contract by `decisions`, a pass of Schedule(snapshot, policy);
// empty when there is none.
std::vector<Violation> CheckDecisions(const Snapshot& snapshot, const Policy& policy,
                                      const Decisions& decisions);

}  // namespace trainyard::sched
