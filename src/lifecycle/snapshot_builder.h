// SnapshotBuilder: the one place a sched::Snapshot is built from jobs and nodes, for
// the server and the simulators alike, kept up to date as they change rather than
// rebuilt for every pass.
//
// What the scheduler sees of a job is derived from the job record alone, by
// PendingView and RunningView (the one mapping: priority, eligibility after a retry
// backoff, excluded nodes, placements, last checkpoint, attained service). The
// builder holds those views in a Snapshot, each job where its state puts it (Pending:
// in `pending`; an open attempt: in `running`; otherwise nowhere), and is told of
// every change: Reflect(job) after a job changed, Forget(id) when it left, PutNode /
// SetNodeState for nodes, SetQueues for queues.
//
// Two ways to run a pass on what it holds:
//  - in place (the simulator and the scenario replay, one thread): Prepare(now) brings
//    the time-dependent parts up to `now` and returns the snapshot, with a
//    sched::SnapshotIndex kept in step when `keep_index` (Schedule with it costs time
//    in the pending jobs, not the cluster);
//  - on a copy (the server, whose pass runs without its lock while the state moves
//    on): SyncCopy brings a SnapshotCopy up to date in time proportional to what
//    changed since the copy's last sync; decisions made on the copy are checked against
//    the builder before they apply (PendingVersion).
//
// Least attained service: with `ordering: las`, a job's priority is its LAS priority
// (sched/las.h) from its attained service; a running job's rises a level as its
// service crosses a bound, which Prepare and SyncCopy apply when the time comes.
//
// Thread-safety: none; its owner serialises access (the server under its lock).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/job.h"
#include "core/node.h"
#include "core/tenancy.h"
#include "sched/policy.h"
#include "sched/schedule.h"
#include "sched/snapshot.h"

namespace trainyard::lifecycle {

// The GPU-time a job has held, the one definition of attained service: for every
// attempt, the time it held its GPUs (the open attempt's up to `now`) times the GPUs it
// held, a share of one GPU counting for its part and a job of no GPUs as one GPU.
Duration AttainedService(const Job& job, Timestamp now);

// Where an attempt's replicas run: node and GPUs of each, in replica order.
std::vector<sched::Placement> PlacementOf(const Attempt& a);

// What the scheduler sees of a Pending job. `pc`: its priority class (nullptr when
// the class is unknown: priority 0, preemptible).
sched::PendingJob PendingView(const Job& job, const PriorityClass* pc, const sched::Policy& policy);
// What the scheduler sees of a job with an open attempt; `preempting`: it has been told
// to stop (or is not yet running) and may not be chosen as a victim.
sched::RunningJob RunningView(const Job& job, const PriorityClass* pc, const sched::Policy& policy,
                              bool preempting, Timestamp now);

class SnapshotBuilder;

// A snapshot a pass runs on away from its builder (SnapshotBuilder::SyncCopy).
class SnapshotCopy {
 public:
  SnapshotCopy();
  ~SnapshotCopy();
  SnapshotCopy(const SnapshotCopy&) = delete;
  SnapshotCopy& operator=(const SnapshotCopy&) = delete;

  const sched::Snapshot& snapshot() const { return snap_; }
  // Kept in step with snapshot() when the builder keeps an index; else nullptr.
  sched::SnapshotIndex* index() { return index_.get(); }
  // The version of pending job `id` this copy holds; 0 when it holds none.
  uint64_t Version(JobId id) const;

 private:
  friend class SnapshotBuilder;
  sched::Snapshot snap_;
  std::unordered_map<JobId, size_t> pending_pos_;
  std::unordered_map<JobId, size_t> running_pos_;
  std::vector<uint64_t> pending_version_;  // parallel to snap_.pending
  std::unique_ptr<sched::SnapshotIndex> index_;
  uint64_t synced_generation_ = 0;  // the builder's structure generation last copied
  bool synced_ = false;
};

class SnapshotBuilder {
 public:
  // `classes` are the priority classes jobs name, looked up by name on every Reflect;
  // it must outlive the builder (the owner keeps it current).
  SnapshotBuilder(sched::Policy policy, const std::map<std::string, PriorityClass>* classes,
                  bool keep_index);
  ~SnapshotBuilder();
  SnapshotBuilder(const SnapshotBuilder&) = delete;
  SnapshotBuilder& operator=(const SnapshotBuilder&) = delete;

  const sched::Policy& policy() const { return policy_; }

  // --- nodes and queues ------------------------------------------------------------
  // Replaces every node (kept in name order, the order the scheduler keeps them in).
  void SetNodes(std::vector<Node> nodes);
  // Adds the node or replaces the one of its name.
  void PutNode(const Node& node);
  // Only the state of the node `name` changes (cheaper than PutNode: the index is kept).
  void SetNodeState(const std::string& name, NodeState state);
  void SetQueues(std::vector<Queue> queues);

  // --- jobs ------------------------------------------------------------------------
  // Puts `job` where its state says, as of `now`: Pending in the pending list, with an
  // open attempt in the running list (`preempting` as RunningView), else nowhere.
  void Reflect(const Job& job, bool preempting, Timestamp now);
  // The job is gone from both lists.
  void Forget(JobId id);

  // --- passes ----------------------------------------------------------------------
  // The snapshot at `now` (time-dependent parts, LAS priorities of running jobs,
  // brought up to it), for a pass in place. Valid until the next change.
  const sched::Snapshot& Prepare(Timestamp now);
  // The index kept in step with Prepare's snapshot; nullptr without keep_index.
  sched::SnapshotIndex* index();
  // Brings `copy` up to `now`: what changed since its last sync is copied over.
  void SyncCopy(SnapshotCopy& copy, Timestamp now);
  // The version of pending job `id` (changes whenever its view does); 0 when the job
  // is not pending.
  uint64_t PendingVersion(JobId id) const;

  // --- reads -------------------------------------------------------------------------
  const sched::Snapshot& current() const { return snap_; }
  const sched::RunningJob* FindRunning(JobId id) const;
  const sched::PendingJob* FindPending(JobId id) const;
  size_t pending_count() const { return snap_.pending.size(); }
  size_t running_count() const { return snap_.running.size(); }

 private:
  const PriorityClass* ClassOf(const Job& job) const;
  void PutPending(sched::PendingJob view);
  void RemovePending(JobId id);
  void PutRunning(sched::RunningJob view, const Job& job, Timestamp now);
  void RemoveRunning(JobId id);
  // LAS: queues the time running job `id` reaches its next level, if it will.
  void ScheduleLasRise(JobId id, Duration attained, int64_t weight_milli, Timestamp now);
  // LAS: raises the priorities of running jobs whose service crossed a bound by `now`.
  void ApplyLasRises(Timestamp now);
  void StructureChanged();
  void EnsureIndex();

  const sched::Policy policy_;
  const bool las_;
  const std::map<std::string, PriorityClass>* classes_;
  const bool keep_index_;

  sched::Snapshot snap_;
  std::unordered_map<JobId, size_t> pending_pos_;
  std::unordered_map<JobId, size_t> running_pos_;
  std::unordered_map<std::string, size_t> node_pos_;
  std::vector<uint64_t> pending_version_;  // parallel to snap_.pending
  uint64_t next_version_ = 1;
  std::unique_ptr<sched::SnapshotIndex> index_;  // with keep_index_, once built

  // LAS: when each running job's service next crosses a level bound.
  struct LasRise {
    Timestamp at;
    JobId job;
    uint64_t generation;  // the job's running entry this was queued for
    bool operator>(const LasRise& o) const { return at > o.at; }
  };
  std::priority_queue<LasRise, std::vector<LasRise>, std::greater<>> las_rises_;
  struct LasBasis {
    Duration attained_at_start{0};  // service before the open attempt
    int64_t weight_milli = 0;
    Timestamp start{};
    int32_t class_value = 0;
    uint64_t generation = 0;
  };
  std::unordered_map<JobId, LasBasis> las_basis_;
  uint64_t las_generation_ = 0;

  // For copies: what changed since the copies' last sync. A structural change (nodes
  // added or replaced, queues) makes the next sync copy everything.
  uint64_t structure_generation_ = 1;
  std::unordered_set<JobId> changed_pending_;
  std::unordered_set<JobId> changed_running_;
  std::unordered_set<std::string> changed_node_states_;
};

}  // namespace trainyard::lifecycle
