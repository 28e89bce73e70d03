// Private to server/cluster*.cc: the Cluster's implementation.
//
// The state (jobs, ranks, nodes, tenancy) is a lifecycle::ClusterState under mu_, and
// every change to it is a lifecycle event applied there (Mutate): the lifecycle
// returns the change's store batch, which is enqueued with the change's sequence
// number before mu_ is let go, and committed by the Committer in a group, outside
// every lock. The caller waits for its number before it answers, so nothing is
// acknowledged before it is durable; commands the change queued for agents are
// deliverable only from then on (published_seq_). A failed commit rebuilds the state
// from the store (OnPublished).
//
// What the server keeps of nodes beyond the lifecycle (telemetry, injected faults,
// waiting polls) is in `extras_`, also under mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lifecycle/lifecycle.h"
#include "server/cluster.h"
#include "server/committer.h"

namespace trainyard::server {

struct PollWaiter;

// What the server keeps of a node beyond its lifecycle state.
struct NodeExtras {
  std::vector<GpuTelemetry> telemetry;  // from the last heartbeat
  std::vector<LinkTelemetry> links;
  std::vector<DiskTelemetry> disks;
  std::vector<InjectedFault> faults;   // injected, not yet expired or cleared
  std::vector<FaultSpec> sent_faults;  // the set last sent to the agent
  // Long polls waiting for this node's commands, oldest first (Cluster::PollAsync).
  std::deque<std::shared_ptr<PollWaiter>> polls;
};

// A long poll waiting for its node's commands: in its node's `polls` and in the
// cluster's deadlines until `done` is called.
struct PollWaiter {
  std::string node;
  Cluster::PollDone done;
  std::multimap<std::chrono::steady_clock::time_point,
                std::shared_ptr<PollWaiter>>::iterator at;  // in Impl::poll_deadlines_
};

struct PassPlan::Data {
  std::unique_lock<std::mutex> pass_lock;  // Impl::pass_mu_
  bool skipped = false;                    // nothing to decide: apply does nothing
  Timestamp now{};
  sched::Decisions decisions;  // made on Impl::pass_copy_
};

class Cluster::Impl {
 public:
  Impl(store::Store* store, const Clock* clock, ClusterOptions options);
  ~Impl();

  Status Load();

  // Users (cluster.cc).
  Result<std::vector<JobId>> Submit(std::vector<JobSpec> specs, const std::string& actor,
                                    SubmitOptions options);
  Status EnsureTenant(const std::string& name, const std::string& actor);
  Result<JobView> GetJob(JobId id);
  Result<store::JobPage> ListJobs(const ListJobsRequest& request);
  Result<store::EventPage> ListEvents(JobId id, int64_t after_seq, int limit);
  Status Cancel(JobId id, const std::string& actor);
  Status SetHeld(JobId id, bool held, const std::string& actor);
  Status ReportCheckpoint(JobId id, const CheckpointReport& report, const std::string& actor);
  Status SendProfile(JobId id, int32_t attempt, const std::vector<int32_t>& ranks,
                     const std::string& profile_id, int32_t steps);
  Status SetNodeAdminState(const std::string& name, NodeState state, const std::string& actor,
                           const std::string& reason);
  Status RequeueExcluding(JobId id, const std::string& node, const std::string& why,
                          const std::string& actor);
  Status RequestCheckpoint(JobId id, const std::string& why, const std::string& actor);
  Result<Tenant> SetTenantQuota(const std::string& name, int64_t guaranteed, int64_t limit,
                                const std::string& actor);
  Result<Tenant> SetTenantIdentity(const std::string& name, int64_t uid, int64_t gid,
                                   std::optional<bool> allow_root, const std::string& actor);
  Result<Queue> PutQueue(const Queue& queue);
  Status DeleteQueue(const std::string& tenant, const std::string& name);

  // Reads (cluster_views.cc).
  std::vector<NodeView> ListNodes();
  Result<NodeView> GetNode(const std::string& name);
  std::vector<QueueView> ListQueues();
  std::vector<Tenant> ListTenants();
  std::vector<PriorityClass> ListPriorityClasses();
  ClusterMetrics Metrics();
  void ObservePassDuration(double seconds);
  sched::Snapshot BuildSnapshot();
  bool KnowsTask(const std::string& node, JobId job, int32_t attempt);

  // Agents, faults and polls (cluster_agents.cc).
  Result<RegisterReply> Register(const Registration& registration);
  Result<std::vector<std::string>> HandleHeartbeat(const Heartbeat& heartbeat);
  Result<std::vector<Command>> Poll(const std::string& node, Duration wait);
  void PollAsync(const std::string& node, Duration wait, PollDone done);
  Result<InjectedFault> InjectFault(const std::string& node, const std::string& kind, int gpu,
                                    Duration duration, const std::string& actor);
  Result<int> ClearFaults(const std::string& node, const std::string& id);
  std::vector<InjectedFault> ListFaults();
  Status Tick();

  // The loop (cluster.cc).
  std::unique_ptr<PassPlan::Data> PlanPass();
  Result<PassStats> ApplyPass(PassPlan::Data& plan);
  bool NeedsPass();
  void WaitForWork(Duration wait);
  void Shutdown();

 private:
  // --- changes (cluster.cc) ---------------------------------------------------------
  // Applies `change` to the state under mu_ (it returns the lifecycle's effects), and
  // enqueues the effects' batch with the next sequence number when there is anything
  // to commit or deliver; then, without mu_, waits for that number to be durable.
  // Returns the effects, or the refusal, or the commit's error.
  Result<lifecycle::Effects> Mutate(
      const std::function<Result<lifecycle::Effects>(Timestamp now)>& change);
  Result<lifecycle::Effects> MutateEvent(const lifecycle::Event& event) {
    return Mutate([&](Timestamp now) { return lifecycle::Apply(state_, event, now); });
  }
  // REQUIRES: mu_ held. The sequence number to wait for (0: nothing was enqueued).
  uint64_t EnqueueLocked(lifecycle::Effects& fx);
  // The committer's callback: makes a committed group's commands deliverable, or
  // rebuilds the state after a failed one.
  void OnPublished(const Status& status, const store::WriteBatch& group, uint64_t first,
                   uint64_t last);
  // Reads the store and replaces the state with it (after a failed commit).
  Status Reload();
  // Counts what a committed batch did, by its job events: submissions, preemption
  // notices, finished jobs, and the work lost by attempts that ended early.
  void CountCommitted(const store::WriteBatch& batch);
  // The message for job `id` that the lifecycle does not hold: NotFound when it
  // never existed, else `finished(state)` (FailedPrecondition) for a finished one.
  Status ExplainInactive(JobId id, const std::function<Status(JobState)>& finished);

  // --- nodes and polls (cluster_agents.cc) -------------------------------------------
  // REQUIRES (all *Locked): mu_ held.
  NodeExtras& ExtrasLocked(const std::string& node) { return extras_[node]; }
  // Drops expired faults and queues for every connected node whose fault set (its own
  // plus comm-slow for jobs spanning a node with a link down) changed its new set.
  void SyncFaultsLocked(bool force_node_resend, const std::string& node, lifecycle::Effects& fx);
  // The deliverable commands of the node (those whose change is durable), taken.
  std::vector<Command> TakeCommandsLocked(lifecycle::NodeEntry& n);
  // Answers the node's poll `which` with `r`.
  void FinishPollLocked(NodeExtras& x, std::deque<std::shared_ptr<PollWaiter>>::iterator which,
                        Result<std::vector<Command>> r);
  // Answers the polls that can be: all with NotFound when the node is not connected,
  // the oldest with the commands when any are deliverable, all at shutdown.
  void WakePollsLocked(const std::string& node);
  // The poll timer's thread: answers each poll whose wait is over.
  void ExpirePolls();

  // --- views (cluster_views.cc) --------------------------------------------------------
  JobView ViewLocked(const lifecycle::JobEntry& e) const;
  NodeView NodeViewLocked(const std::string& name, const lifecycle::NodeEntry& n);

  store::Store* const store_;
  const Clock* const clock_;
  const ClusterOptions opt_;

  // One pass at a time (SchedulePass runs sched::Schedule without mu_ on pass_copy_;
  // only passes allocate GPUs, so a GPU free in a pass's snapshot is free until it
  // applies, unless the decision is checked stale).
  std::mutex pass_mu_;
  // Whether the last pass changed nothing (no bind, no preemption), and when it ran:
  // a pass with nothing new to see (not dirty, nothing running, no retry backoff
  // ending since) would conclude the same, so it is skipped.
  bool last_pass_idle_ = false;        // GUARDED_BY(pass_mu_)
  Timestamp last_pass_at_{};           // GUARDED_BY(pass_mu_)
  lifecycle::SnapshotCopy pass_copy_;  // GUARDED_BY(pass_mu_); synced under mu_ too

  std::mutex mu_;
  std::condition_variable cv_;                // the loop's WaitForWork (dirty, shutdown_)
  lifecycle::ClusterState state_;             // GUARDED_BY(mu_)
  std::map<std::string, NodeExtras> extras_;  // GUARDED_BY(mu_)
  bool shutdown_ = false;                     // GUARDED_BY(mu_)
  int64_t next_fault_ = 1;                    // GUARDED_BY(mu_): "f-<n>"
  uint64_t next_seq_ = 1;                     // GUARDED_BY(mu_): the next change's number
  uint64_t published_seq_ = 0;                // GUARDED_BY(mu_): changes durable up to this one
  // Nodes whose commands wait for change N, by N (woken when N is published).
  std::map<uint64_t, std::vector<std::string>> wake_at_;  // GUARDED_BY(mu_)
  // After a failed commit, until the state is rebuilt from the store: changes are
  // refused with this status.
  Status broken_;  // GUARDED_BY(mu_)

  // Every waiting long poll by deadline; one thread answers those whose wait is over,
  // so that a waiting poll holds no thread of its own.
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<PollWaiter>>
      poll_deadlines_;  // GUARDED_BY(mu_)
  std::condition_variable poll_timer_cv_;
  bool timer_stop_ = false;  // GUARDED_BY(mu_)
  std::thread poll_timer_;

  // Job ids are reserved from the store in blocks, so that a submission commits in one
  // transaction. A block is refilled under id_mu_ alone (its I/O holds no other lock);
  // ids are taken from it under mu_ and id_mu_, so that they rise in commit order.
  std::mutex id_mu_;         // taken after mu_ when both are held
  JobId reserved_next_ = 0;  // GUARDED_BY(id_mu_): [reserved_next_, reserved_end_)
  JobId reserved_end_ = 0;   // GUARDED_BY(id_mu_)

  std::mutex metrics_mu_;
  ClusterMetrics metrics_;             // GUARDED_BY(metrics_mu_): the counters
  std::vector<uint64_t> pass_counts_;  // GUARDED_BY(metrics_mu_)
  double pass_seconds_sum_ = 0;        // GUARDED_BY(metrics_mu_)

  Committer committer_;  // last: its callback uses the members above
};

}  // namespace trainyard::server
