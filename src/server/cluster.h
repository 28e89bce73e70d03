// Cluster: the control plane's state machine, driving the job lifecycle.
//
// It owns the working state (a lifecycle::ClusterState: jobs not yet finished with
// the ranks of their gangs, nodes, tenants, queues, priority classes, the commands
// waiting for each node's agent) and turns what users, agents and the scheduling loop
// ask into lifecycle events (lifecycle/lifecycle.h): the lifecycle decides, the
// Cluster makes it durable and delivers it. What the server keeps beyond the
// lifecycle is its own: agents' telemetry, injected faults, waiting long polls. It
// knows nothing of HTTP: the API layer (api.h) parses requests, calls it, and renders
// what it returns.
//
// Durability: a change is applied to the state under the state's mutex, and its store
// batch queued, in order, for the Committer (committer.h), which commits what is
// queued in groups with no lock held, then publishes it. A caller is answered only
// once its change is durable; a command for an agent is delivered only once the
// change that made it is (a `start` never before its bind is stored); an agent's
// exited task is acknowledged only once its attempt's end is. Reads see the state as
// it is, which can include changes whose commit is still under way (a few
// milliseconds); a failed commit makes the Cluster rebuild its state from the store
// and fail the changes built on it. On construction the state is rebuilt from
// Store::LoadAll, including the GPUs held by started gangs, before any pass runs.
//
// Time comes from the injected Clock; nothing here sleeps except Poll, which waits
// for commands with a deadline (PollAsync waits without a thread: one timer thread
// answers the polls whose wait is over).
//
// Thread-safety: every public method may be called from any thread. One mutex guards
// the state and is never held across store I/O on the way of a change (only the
// rebuild after a failed commit reads the store under it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/auth.h"
#include "core/job.h"
#include "core/node.h"
#include "core/status.h"
#include "core/tenancy.h"
#include "lifecycle/lifecycle.h"
#include "sched/decisions.h"
#include "sched/policy.h"
#include "sched/snapshot.h"
#include "server/clock.h"
#include "server/protocol.h"
#include "store/store.h"

namespace trainyard::server {

using lifecycle::kArrayIndexLabel;
using lifecycle::kHealthCheckCordonPrefix;
using lifecycle::PassStats;

struct ClusterOptions {
  sched::Policy policy;
  Duration node_timeout{15'000};  // no heartbeat this long: the node is NotReady
  // How long after a node went NotReady its gangs are given up (Lost, their other ranks
  // stopped, requeued). Until then they stay Running: a partition or a server outage
  // shorter than node_timeout + node_lost_grace costs no work. Agents are told the sum
  // (RegisterReply::release_after) and stop their tasks themselves before it runs out
  // without contact, so a requeued job never runs twice at once.
  Duration node_lost_grace{120'000};
  Duration heartbeat_interval{1'000};  // told to agents on register
  Duration stop_grace{10'000};         // SIGTERM -> SIGKILL for `stop` commands
  Duration start_resend{15'000};       // a rank not reported this long after its start: resend
  // Root for checkpoints of jobs that name no checkpoint.dir: <root>/<tenant>/<job id>.
  // A job may name a checkpoint.dir (or any path) in its own tenant's part of the root,
  // never in another's (core/spec_paths.h).
  std::string checkpoint_root = "/tmp/trainyard/checkpoints";
  // Directories (absolute) every path a spec names must lie in, checked lexically at
  // submission (core/spec_paths.h); empty: anywhere, only ".." and control characters
  // are refused. The server's --allowed-dirs.
  std::vector<std::string> allowed_dirs;
  // Tenants and queues named by a submission are created on first use (queue
  // guarantee 0, no limit). When false, a submission to an unknown queue is refused.
  bool auto_create_queues = true;
  // Jobs a tenant may have unfinished (pending, starting, running) at once; a
  // submission beyond it is refused whole (ResourceExhausted).
  int64_t max_unfinished_jobs_per_tenant = 1'000'000;
  // Called by each pass that runs the scheduler, with the snapshot it ran on and its
  // decisions, before they apply (tests compare the server's passes with the
  // simulator's). Must be quick and must not call the Cluster.
  std::function<void(const sched::Snapshot&, const sched::Decisions&)> on_pass;
};

// One rank of a started gang, as the server knows it.
struct RankView {
  int32_t rank = 0;
  int32_t replica = 0;
  std::string node;
  std::vector<int> gpus;
  std::string state;  // "unknown" | "sent" | "starting" | "running" | "exited" | "gone"
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string message;
};

// A job with what the server knows beyond the stored record.
struct JobView {
  Job job;
  std::vector<sched::Placement> placement;  // of the open attempt; empty otherwise
  std::vector<RankView> ranks;              // of the open attempt
  std::string stopping;                     // why the gang is being stopped, if it is
};

struct NodeView {
  Node node;
  std::string address;
  bool simulated = false;
  bool connected = false;      // registered with this server process and heartbeating
  Timestamp last_heartbeat{};  // 0 when never since this server started
  int64_t gpus_used = 0;
  std::vector<JobId> jobs;                        // with ranks on it
  std::vector<std::string> job_tenants;           // the tenant of each of `jobs`
  std::vector<JobId> gpu_jobs;                    // by GPU index: the job on it, 0 when free
  std::vector<GpuTelemetry> telemetry;            // from the last heartbeat, by GPU index
  std::vector<LinkTelemetry> links;               // from the last heartbeat
  std::vector<DiskTelemetry> disks;               // from the last heartbeat
  std::optional<HealthCheckResult> health_check;  // the latest, when the agent runs one
  // How its agent limits tasks: "cgroup v1 at …", "cgroup v2 at …", "none: <why>";
  // "" when the agent does not say.
  std::string limits;
  // Whether its agent runs containers: "runc 1.1.5; images in <dir>", "none: <why>".
  std::string containers;
  std::vector<FaultSpec> faults;  // injected and active (not comm-slow)
  // Its agent's dataset cache, as its last heartbeat said (docs/datasets.md).
  std::vector<protocol::DatasetStatus> datasets;
};

// A fault injected into a node (docs/faults.md).
struct InjectedFault {
  std::string node;
  FaultSpec fault;
  Timestamp created;
  std::string actor;
};

struct QueueView {
  Queue queue;
  int64_t gpus_in_use = 0;
  int64_t gpus_borrowed = 0;  // in use beyond the guarantee
  int64_t pending_jobs = 0;
  int64_t running_jobs = 0;
};

struct ListJobsRequest {
  store::JobFilter filter;
  // The cursor: ascending lists ids above it, descending ids below it (0: from the
  // newest); see store::Store::ListJobs.
  JobId after_id = 0;
  int limit = 100;
  store::JobOrder order = store::JobOrder::kAscending;
};

struct CheckpointReport {
  std::string path;
  int64_t step = 0;
  Duration write_duration{0};
};

struct SubmitOptions {
  // Whether queues (and tenants) the specs name may be created (when the cluster's
  // auto_create_queues allows it at all). The API allows it to cluster admins only.
  bool may_create_queues = true;
  // The audit log's entry for this request, committed in the jobs' own transaction when
  // they are accepted (object set to the first job, time to the commit's), so that an
  // audited submission costs one commit, not two. Not written when they are refused:
  // the caller records the refusal itself.
  std::optional<AuditEntry> audit;
  // The submitting user's own Unix identity (User::run_as_uid); -1: the tenant's.
  int64_t run_as_uid = -1;
  int64_t run_as_gid = -1;
};

// What /metrics shows of the control plane. Counters count since this server
// process started (Prometheus copes with resets); job counts are of unfinished jobs.
struct ClusterMetrics {
  using TenantQueue = std::pair<std::string, std::string>;
  std::map<std::tuple<std::string, std::string, std::string>, int64_t>
      jobs;  // tenant, queue, state
  std::map<TenantQueue, int64_t> submitted;
  std::map<TenantQueue, int64_t> preemptions;
  std::map<TenantQueue, double> lost_work_gpu_seconds;
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> finished;  // ..., state
  // Scheduling pass durations, seconds: upper bounds and counts per bucket (the last
  // is +Inf), and their sum.
  std::vector<double> pass_bounds;
  std::vector<uint64_t> pass_counts;
  double pass_seconds_sum = 0;
};

// A scheduling pass between its two steps (see Cluster::PlanPass). Move-only; while
// one exists no other pass can start.
class PassPlan {
 public:
  PassPlan(PassPlan&&) noexcept;
  PassPlan& operator=(PassPlan&&) noexcept;
  ~PassPlan();

 private:
  friend class Cluster;
  struct Data;
  explicit PassPlan(std::unique_ptr<Data> data);
  std::unique_ptr<Data> data_;
};

class Cluster {
 public:
  // Loads the state from `store` (LoadAll); seeds the default tenant, queue and
  // priority classes into an empty store. Fails when the store cannot be read.
  static Result<std::unique_ptr<Cluster>> Open(store::Store* store, const Clock* clock,
                                               ClusterOptions options);
  ~Cluster();

  // --- users ---------------------------------------------------------------------
  // Validates (paths against the allowed dirs and the tenant's part of the checkpoint
  // root, tenant/queue, priority class), commits all `specs` as new Pending
  // jobs in one group commit, and returns their ids in order. All or nothing.
  Result<std::vector<JobId>> Submit(std::vector<JobSpec> specs, const std::string& actor,
                                    SubmitOptions options = {});
  // Creates tenant `name` with its default queue (no guarantee, no limit) unless it
  // exists.
  Status EnsureTenant(const std::string& name, const std::string& actor);
  Result<JobView> GetJob(JobId id);
  Result<store::JobPage> ListJobs(const ListJobsRequest& request);
  Result<store::EventPage> ListEvents(JobId id, int64_t after_seq, int limit);
  Status Cancel(JobId id, const std::string& actor);
  Status Hold(JobId id, const std::string& actor);
  Status Release(JobId id, const std::string& actor);
  Status ReportCheckpoint(JobId id, const CheckpointReport& report, const std::string& actor);
  // Queues a `profile` command (record `steps` steps as profile `profile_id`) for each
  // of `ranks` of attempt `attempt`, to the agents they run on. FailedPrecondition,
  // saying why, unless the job is Running that attempt and not being stopped;
  // InvalidArgument, naming the range, for a rank its gang lacks (nothing is queued).
  Status SendProfile(JobId id, int32_t attempt, const std::vector<int32_t>& ranks,
                     const std::string& profile_id, int32_t steps);

  std::vector<NodeView> ListNodes();
  Result<NodeView> GetNode(const std::string& name);
  // Cordon: no new work. Drain: no new work, and its gangs are preempted (requeued).
  // Uncordon: Ready again.
  // `reason` (optional) replaces "cordoned by <actor>" as the node's state reason.
  Status SetNodeAdminState(const std::string& name, NodeState state, const std::string& actor,
                           const std::string& reason = "");

  // --- remediation (alert actions, docs/alerts.md) -----------------------------------
  // Checkpoint-and-requeue: preempts the Running job (notice, grace, checkpoint) and
  // adds `node` to the nodes it must not use again, in one commit. FailedPrecondition
  // unless the job is Running and not being stopped.
  Status RequeueExcluding(JobId id, const std::string& node, const std::string& why,
                          const std::string& actor);
  // Asks every running rank of the job to save a checkpoint now (the `checkpoint`
  // command; the SDK's checkpoint_requested()). FailedPrecondition unless Running.
  Status RequestCheckpoint(JobId id, const std::string& why, const std::string& actor);

  // --- fault injection (simulated GPUs and the example trainer, docs/faults.md) ------
  // Injects a fault of `kind` (kFaultKinds) into `node`, GPU `gpu` (-1: the whole node),
  // for `duration` (0: until cleared). The node's agent gets its whole fault set again.
  // Faults are not persisted: a restarted server starts with none and clears agents'.
  Result<InjectedFault> InjectFault(const std::string& node, const std::string& kind, int gpu,
                                    Duration duration, const std::string& actor);
  // Clears the fault `id` of `node` (empty: every fault of the node; empty node: every
  // fault). Returns how many were cleared; NotFound for a node or id that has none.
  Result<int> ClearFaults(const std::string& node, const std::string& id);
  std::vector<InjectedFault> ListFaults();

  std::vector<QueueView> ListQueues();
  std::vector<Tenant> ListTenants();
  std::vector<PriorityClass> ListPriorityClasses();

  // --- tenancy (the API authorizes: quotas are a cluster-admin's, queues their
  // tenant-admin's) -------------------------------------------------------------------
  // Sets tenant `name`'s quota, creating the tenant (with its default queue) when it
  // does not exist. Queues whose limit is above `limit` are lowered to it in the same
  // commit. FailedPrecondition, naming the numbers, when `guaranteed` is below what
  // its queues' guarantees add up to or `limit` below a queue's guarantee.
  Result<Tenant> SetTenantQuota(const std::string& name, int64_t guaranteed, int64_t limit,
                                const std::string& actor);
  // The identity an existing tenant's ranks run as (NotFound otherwise); -1, -1: the
  // agent's own. allow_root unset keeps it. InvalidArgument for root's ids without
  // allow_root (ValidateRunAs). Jobs started afterwards run as the new identity.
  Result<Tenant> SetTenantIdentity(const std::string& name, int64_t uid, int64_t gid,
                                   std::optional<bool> allow_root, const std::string& actor);
  // Creates or changes queue `queue` of an existing tenant (NotFound otherwise).
  // InvalidArgument for a bad queue (ValidateQueue) or a parent the tenant lacks;
  // FailedPrecondition, naming the numbers, when the tenant's queues' guarantees would
  // add up to more than its guaranteed_gpus or the queue's limit exceed its limit_gpus.
  Result<Queue> PutQueue(const Queue& queue, const std::string& actor);
  // Deletes a queue. NotFound when it does not exist; FailedPrecondition while it has
  // unfinished jobs or child queues.
  Status DeleteQueue(const std::string& tenant, const std::string& name, const std::string& actor);

  // --- agents ----------------------------------------------------------------------
  Result<RegisterReply> Register(const Registration& registration);
  // NotFound when the node is not registered with this server process.
  Result<std::vector<std::string>> HandleHeartbeat(const Heartbeat& heartbeat);
  // Waits up to `wait` for commands for `node` and returns them (possibly none).
  // NotFound when the node is not registered. Returns early on Shutdown.
  Result<std::vector<Command>> Poll(const std::string& node, Duration wait);
  // Poll without a waiting thread: `done` is called once, with what Poll would return,
  // when that is known: before PollAsync returns, or later on another thread. It runs
  // with the cluster's lock held, so it must be quick and must not call the Cluster.
  // Of several polls waiting for one node, the oldest takes the commands.
  using PollDone = std::function<void(Result<std::vector<Command>>)>;
  void PollAsync(const std::string& node, Duration wait, PollDone done);
  // The task's job and attempt are known (the caller may store its logs).
  bool KnowsTask(const std::string& node, JobId job, int32_t attempt);

  // --- the loop ----------------------------------------------------------------------
  // Node timeouts, resends of unanswered starts. Cheap; call every second or so.
  Status Tick();
  // One scheduling pass: ApplyPass(PlanPass()).
  Result<PassStats> SchedulePass();
  // The pass in two steps. PlanPass takes a snapshot (briefly under the state mutex)
  // and runs sched::Schedule on it without the mutex, so submissions, listings and
  // agents are not held up by it. ApplyPass re-checks each decision against the state
  // as it is by then (a job held, cancelled or changed since is not started; a node no
  // longer Ready or a GPU no longer free gets nothing), commits, then acts. Passes are
  // serialised: PlanPass waits while another plan exists. A plan that is dropped
  // without ApplyPass changes nothing.
  PassPlan PlanPass();
  Result<PassStats> ApplyPass(PassPlan plan);
  // True when something happened since the last pass that may let a job start.
  bool NeedsPass();
  // Blocks until NeedsPass() or `wait` passes or Shutdown.
  void WaitForWork(Duration wait);
  // Wakes every waiter (Poll, WaitForWork) and makes them return at once from now on.
  void Shutdown();

  // Counters and gauges for /metrics.
  ClusterMetrics Metrics();
  // Records how long a scheduling pass took (the server's loop measures it).
  void ObservePassDuration(double seconds);

  // The snapshot the next pass would see (for tests and debugging).
  sched::Snapshot BuildSnapshot();

 private:
  class Impl;
  explicit Cluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard::server
