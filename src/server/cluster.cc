#include "server/cluster.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <future>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/names.h"
#include "core/spec_paths.h"
#include "sched/retry.h"
#include "sched/schedule.h"

namespace trainyard::server {
namespace {

using std::chrono::duration_cast;

enum class RankState { kUnknown, kSent, kStarting, kRunning, kExited, kGone };

std::string_view RankStateName(RankState s) {
  switch (s) {
    case RankState::kUnknown:
      return "unknown";
    case RankState::kSent:
      return "sent";
    case RankState::kStarting:
      return "starting";
    case RankState::kRunning:
      return "running";
    case RankState::kExited:
      return "exited";
    case RankState::kGone:
      return "gone";
  }
  return "unknown";
}

bool Done(RankState s) { return s == RankState::kExited || s == RankState::kGone; }

// Why a gang is being stopped (a preemption is the job's Preempting state instead).
enum class Stopping { kNone, kFailed, kCancelled, kLost, kRequeue, kTimeLimit };

constexpr std::string_view kCancelPrefix = "cancel requested";
constexpr std::string_view kTimeLimitPrefix = "time limit reached";

struct Rank {
  int32_t rank = 0;
  int32_t replica = 0;
  int32_t local = 0;
  std::string node;
  std::vector<int> gpus;
  RankState state = RankState::kUnknown;
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string message;
  Timestamp sent_at{};
};

struct Gang {
  int32_t attempt = 0;
  std::vector<Rank> ranks;
  Stopping stopping = Stopping::kNone;
  std::string stop_message;
  int32_t failure_code = 0;  // exit code (or -signal) of the rank that failed first
};

// A Pending job as the scheduler sees it, kept between passes so that a snapshot of
// 100,000 Pending jobs costs pointer copies under the mutex, not 100,000 conversions.
// `key` holds what the view is derived from besides the immutable spec: a view whose
// key no longer matches its job is stale (rebuilt by the next snapshot, and a bind
// decided on it is dropped).
struct PendingKey {
  Timestamp state_time{};
  bool held = false;
  size_t attempts = 0;
  int32_t retries = 0;
  size_t excluded = 0;

  bool operator==(const PendingKey&) const = default;
};

struct PendingView {
  PendingKey key;
  sched::PendingJob job;
};

PendingKey KeyOf(const Job& job) {
  return {job.state_time, job.held, job.attempts.size(), job.retries, job.excluded_nodes.size()};
}

struct JobEntry {
  Job job;
  std::optional<Gang> gang;
  std::shared_ptr<const PendingView> pending_view;  // while Pending; see PendingView
};

struct PollWaiter;

struct NodeEntry {
  Node node;  // as stored; node.state is what was last committed
  std::string address;
  bool simulated = false;
  bool connected = false;  // registered with this process and not timed out
  bool healthy = true;
  std::string health_message;
  Timestamp last_heartbeat{};
  // Marked NotReady for want of heartbeats (Tick), and since when; its gangs were given
  // up after node_timeout + node_lost_grace (released). Cleared when its agent
  // registers again.
  bool unreachable = false;
  Timestamp unreachable_at{};
  bool released = false;
  std::vector<GpuTelemetry> telemetry;  // from the last heartbeat
  std::vector<LinkTelemetry> links;
  std::vector<DiskTelemetry> disks;
  std::optional<HealthCheckResult> health_check;
  std::vector<InjectedFault> faults;    // injected, not yet expired or cleared
  std::vector<FaultSpec> sent_faults;   // the set last sent to the agent
  NodeState admin = NodeState::kReady;  // Ready, Cordoned or Draining
  std::deque<Command> commands;
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

std::string GpuList(const std::vector<int>& gpus) {
  std::string out;
  for (int g : gpus) out += (out.empty() ? "" : ",") + std::to_string(g);
  return out;
}

std::string DescribePlacement(const std::vector<sched::Placement>& replicas) {
  std::string out;
  for (const auto& p : replicas) {
    if (!out.empty()) out += " ";
    out += p.node + "[" + GpuList(p.gpus) + "]";
  }
  return out;
}

// Ports 20000..31999: below Linux's ephemeral range, so a rank's own outgoing
// connections never hold it. Derived from (job, attempt) so a restarted server
// computes the same port.
int MasterPort(JobId job, int32_t attempt) {
  return 20000 + static_cast<int>((job * 31 + attempt) % 12000);
}

// argv for a spec: its command + args, or its script run by its #! interpreter.
std::vector<std::string> TaskArgv(const JobSpec& spec) {
  if (!spec.command.empty()) {
    std::vector<std::string> argv = spec.command;
    argv.insert(argv.end(), spec.args.begin(), spec.args.end());
    return argv;
  }
  std::vector<std::string> argv;
  std::string_view script = spec.script;
  size_t start = script.find_first_not_of(" \t\r\n");
  if (start != std::string_view::npos && script.substr(start, 2) == "#!") {
    std::string_view line = script.substr(start + 2, script.find('\n', start) - start - 2);
    std::istringstream words{std::string(line)};
    for (std::string w; words >> w;) argv.push_back(w);
  }
  if (argv.empty()) argv = {"/bin/sh"};
  argv.push_back("-c");
  argv.push_back(spec.script);
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  return argv;
}

std::vector<Rank> MakeRanks(const Job& job, const Attempt& a) {
  std::vector<Rank> ranks;
  const int32_t procs = std::max(job.spec.procs_per_replica, 1);
  for (size_t r = 0; r < a.nodes.size(); ++r) {
    std::vector<int> gpus = r < a.gpus.size() ? a.gpus[r] : std::vector<int>{};
    const bool split = !gpus.empty() && gpus.size() % static_cast<size_t>(procs) == 0;
    const size_t per = split ? gpus.size() / static_cast<size_t>(procs) : gpus.size();
    for (int32_t l = 0; l < procs; ++l) {
      Rank rank;
      rank.replica = static_cast<int32_t>(r);
      rank.local = l;
      rank.rank = static_cast<int32_t>(r) * procs + l;
      rank.node = a.nodes[r];
      rank.gpus = split
                      ? std::vector<int>(gpus.begin() + static_cast<std::ptrdiff_t>(per * l),
                                         gpus.begin() + static_cast<std::ptrdiff_t>(per * (l + 1)))
                      : gpus;
      ranks.push_back(std::move(rank));
    }
  }
  return ranks;
}

std::vector<sched::Placement> PlacementOf(const Attempt& a) {
  std::vector<sched::Placement> out;
  for (size_t r = 0; r < a.nodes.size(); ++r) {
    out.push_back({a.nodes[r], r < a.gpus.size() ? a.gpus[r] : std::vector<int>{}});
  }
  return out;
}

// The path rules of `o` in normal form (core/spec_paths.h).
PathPolicy PathPolicyOf(const ClusterOptions& o) {
  PathPolicy p;
  p.allowed_dirs = o.allowed_dirs;
  for (std::string& d : p.allowed_dirs) d = NormalizePath(d);
  // The admin's own path: a ".." in it is resolved, not refused.
  p.checkpoint_root =
      o.checkpoint_root.empty()
          ? ""
          : NormalizePath(std::filesystem::path(o.checkpoint_root).lexically_normal().string());
  return p;
}

struct SubmitRequest {
  std::vector<JobSpec> specs;
  std::string actor;
  SubmitOptions options;
  std::optional<Result<std::vector<JobId>>> result;  // written by the leader
  bool done = false;                                 // GUARDED_BY(submit_mu_): result is final
  std::condition_variable cv;                        // its submitter waits here
};

}  // namespace

struct PassPlan::Data {
  std::unique_lock<std::mutex> pass_lock;  // Impl::pass_mu_
  bool skipped = false;                    // nothing to decide: apply does nothing
  sched::Snapshot snap;                    // without its pending jobs (see `pending`)
  std::vector<std::shared_ptr<const PendingView>> pending;  // ascending id
  sched::Decisions decisions;
};

PassPlan::PassPlan(std::unique_ptr<Data> data) : data_(std::move(data)) {}
PassPlan::PassPlan(PassPlan&&) noexcept = default;
PassPlan& PassPlan::operator=(PassPlan&&) noexcept = default;
PassPlan::~PassPlan() = default;

class Cluster::Impl {
 public:
  Impl(store::Store* store, const Clock* clock, ClusterOptions options)
      : store_(store), clock_(clock), opt_(std::move(options)), paths_(PathPolicyOf(opt_)) {
    poll_timer_ = std::thread([this] { ExpirePolls(); });
  }
  ~Impl() {
    {
      std::lock_guard lk(mu_);
      timer_stop_ = true;
    }
    poll_timer_cv_.notify_all();
    poll_timer_.join();
  }

  Status Load();

  // Users.
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
  std::vector<NodeView> ListNodes();
  Result<NodeView> GetNode(const std::string& name);
  Status SetNodeAdminState(const std::string& name, NodeState state, const std::string& actor,
                           const std::string& reason);
  Status RequeueExcluding(JobId id, const std::string& node, const std::string& why,
                          const std::string& actor);
  Status RequestCheckpoint(JobId id, const std::string& why, const std::string& actor);
  Result<InjectedFault> InjectFault(const std::string& node, const std::string& kind, int gpu,
                                    Duration duration, const std::string& actor);
  Result<int> ClearFaults(const std::string& node, const std::string& id);
  std::vector<InjectedFault> ListFaults();
  std::vector<QueueView> ListQueues();
  std::vector<Tenant> ListTenants();
  std::vector<PriorityClass> ListPriorityClasses();
  Result<Tenant> SetTenantQuota(const std::string& name, int64_t guaranteed, int64_t limit,
                                const std::string& actor);
  Result<Queue> PutQueue(const Queue& queue);
  Status DeleteQueue(const std::string& tenant, const std::string& name);

  // Agents.
  Result<RegisterReply> Register(const Registration& registration);
  Result<std::vector<std::string>> HandleHeartbeat(const Heartbeat& heartbeat);
  Result<std::vector<Command>> Poll(const std::string& node, Duration wait);
  void PollAsync(const std::string& node, Duration wait, PollDone done);
  bool KnowsTask(const std::string& node, JobId job, int32_t attempt);

  // Loop.
  Status Tick();
  std::unique_ptr<PassPlan::Data> PlanPass();
  Result<PassStats> ApplyPass(PassPlan::Data& plan);
  bool NeedsPass() {
    std::lock_guard lk(mu_);
    return dirty_;
  }
  void WaitForWork(Duration wait) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, wait, [&] { return dirty_ || shutdown_; });
  }
  void Shutdown() {
    {
      std::lock_guard lk(mu_);
      shutdown_ = true;
      for (auto& [name, n] : nodes_) WakePollsLocked(n);
    }
    cv_.notify_all();
  }
  sched::Snapshot BuildSnapshot() {
    std::vector<std::shared_ptr<const PendingView>> pending;
    sched::Snapshot snap;
    {
      std::lock_guard lk(mu_);
      snap = SnapshotLocked(pending);
    }
    FillPending(snap, pending);
    return snap;
  }

 private:
  // REQUIRES (all *Locked and the helpers below): mu_ held.
  Status CommitLocked(const store::WriteBatch& batch) {
    TY_RETURN_IF_ERROR(store_->Commit(batch));
    CountCommitted(batch);
    return Status::Ok();
  }

 public:
  // Counts what a committed batch did, by its job events: submissions, preemption
  // notices, finished jobs, and the work lost by attempts that ended early.
  void CountCommitted(const store::WriteBatch& batch) {
    std::map<JobId, const Job*> jobs;
    for (const auto& op : batch.ops()) {
      if (const auto* put = std::get_if<store::WriteBatch::PutJobOp>(&op))
        jobs[put->job.id] = &put->job;
    }
    std::lock_guard lk(metrics_mu_);
    for (const auto& op : batch.ops()) {
      const auto* ev = std::get_if<store::WriteBatch::AppendEventOp>(&op);
      if (ev == nullptr) continue;
      auto it = jobs.find(ev->event.job_id);
      if (it == jobs.end()) continue;
      const Job& job = *it->second;
      const ClusterMetrics::TenantQueue tq{job.spec.tenant, job.spec.queue};
      const std::string& kind = ev->event.kind;
      if (kind == "Submitted") {
        ++metrics_.submitted[tq];
      } else if (kind == "Preempting") {
        ++metrics_.preemptions[tq];
      }
      if (kind == "Succeeded" || kind == "Failed" || kind == "Cancelled") {
        ++metrics_.finished[{tq.first, tq.second, kind}];
      }
      if ((kind == "Requeued" || kind == "Failed" || kind == "Retrying") && !job.attempts.empty() &&
          job.attempts.back().end_time == ev->event.time) {
        const double gpus = static_cast<double>(job.spec.replicas) *
                            static_cast<double>(std::max<int64_t>(job.spec.resources.gpus, 0));
        metrics_.lost_work_gpu_seconds[tq] +=
            gpus * static_cast<double>(job.attempts.back().lost_work.count()) / 1000.0;
      }
    }
  }

  ClusterMetrics Metrics() {
    ClusterMetrics out;
    {
      std::lock_guard lk(metrics_mu_);
      out = metrics_;
    }
    out.pass_bounds = kPassBounds;
    {
      std::lock_guard lk(metrics_mu_);
      out.pass_counts = pass_counts_;
      out.pass_seconds_sum = pass_seconds_sum_;
    }
    std::lock_guard lk(mu_);
    for (const auto& [id, e] : jobs_) {
      ++out.jobs[{e.job.spec.tenant, e.job.spec.queue, std::string(JobStateName(e.job.state))}];
    }
    return out;
  }

  void ObservePassDuration(double seconds) {
    std::lock_guard lk(metrics_mu_);
    if (pass_counts_.empty()) pass_counts_.assign(kPassBounds.size() + 1, 0);
    size_t i = 0;
    while (i < kPassBounds.size() && seconds > kPassBounds[i]) ++i;
    ++pass_counts_[i];
    pass_seconds_sum_ += seconds;
  }

 private:
  inline static const std::vector<double> kPassBounds = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  std::mutex metrics_mu_;
  ClusterMetrics metrics_;             // GUARDED_BY(metrics_mu_): the counters
  std::vector<uint64_t> pass_counts_;  // GUARDED_BY(metrics_mu_)
  double pass_seconds_sum_ = 0;        // GUARDED_BY(metrics_mu_)
  // Everything of the snapshot but its Pending jobs, whose views (ascending id) go to
  // `pending`: copying them into the snapshot is left to FillPending, outside mu_.
  sched::Snapshot SnapshotLocked(std::vector<std::shared_ptr<const PendingView>>& pending);
  static void FillPending(sched::Snapshot& snap,
                          const std::vector<std::shared_ptr<const PendingView>>& pending) {
    snap.pending.reserve(pending.size());
    for (const auto& v : pending) snap.pending.push_back(v->job);
  }
  std::shared_ptr<const PendingView> PendingViewLocked(JobEntry& e);
  // Applies a pass's decisions, each re-checked against the state as it is now (the
  // pass ran on a snapshot, without mu_): a bind only for a job still Pending as the
  // snapshot saw it, onto nodes still Ready and GPUs still free; a preemption only of
  // a job still Running for a job still Pending. Commits, then acts.
  Result<PassStats> ApplyLocked(const sched::Snapshot& snap, const sched::Decisions& d,
                                const std::vector<std::shared_ptr<const PendingView>>& pending);
  JobView ViewLocked(const JobEntry& e) const;
  NodeState EffectiveState(const NodeEntry& n) const {
    if (!n.connected) return NodeState::kNotReady;
    if (!n.healthy) return NodeState::kNotReady;
    return n.admin;
  }
  // Persists the node when its effective state (or record) changed.
  Status SyncNodeLocked(NodeEntry& n, const std::string& reason);
  // A new health-check result of the node: a failing one cordons a Ready node (the
  // check's output as the reason), a passing one uncordons a node the check cordoned.
  Status ApplyHealthCheckLocked(NodeEntry& n, const std::optional<HealthCheckResult>& hc);
  // Drops expired faults and sends every connected node whose fault set (its own plus
  // comm-slow for jobs spanning a node with a link down) changed its new set.
  void SyncFaultsLocked(bool force_node_resend, const std::string& node);
  const PriorityClass* ClassOf(const Job& job) const {
    auto it = classes_.find(job.spec.priority);
    return it == classes_.end() ? nullptr : &it->second;
  }
  // Long polls. REQUIRES: mu_ held.
  std::vector<Command> TakeCommandsLocked(NodeEntry& n);
  // Answers the node's poll `which` with `r`.
  void FinishPollLocked(NodeEntry& n, std::deque<std::shared_ptr<PollWaiter>>::iterator which,
                        Result<std::vector<Command>> r);
  // Answers the polls that can be: all with NotFound when the node is not connected,
  // the oldest with the commands when there are any, all at shutdown.
  void WakePollsLocked(NodeEntry& n);
  // The poll timer's thread: answers each poll whose wait is over.
  void ExpirePolls();
  void Push(const std::string& node, Command c) {
    auto it = nodes_.find(node);
    if (it == nodes_.end() || !it->second.connected) return;
    it->second.commands.push_back(std::move(c));
    WakePollsLocked(it->second);
  }
  TaskStart BuildStart(const JobEntry& e, const Rank& r) const;
  // Sends stop (or withdraws a start not yet delivered) to every live rank.
  void StopRanksLocked(JobEntry& e);
  // Starts stopping the gang for `why`; kLost also moves the job to Lost (committed).
  Status StopGangLocked(JobEntry& e, Stopping why, std::string message);
  Status PreemptLocked(JobEntry& e, const std::string& why, const std::string& actor);
  // Moves the job on from what its ranks report: Running when all run; stop the
  // gang when one fails; end the attempt when all are done. Commits what it changes.
  Status EvaluateLocked(JobId id);
  // A rank the agent stopped itself when it lost contact (fenced) becomes Gone: the gang
  // is given up as Lost (ReportedRankLocked), not failed.
  void UpdateRankLocked(const JobSpec& spec, Rank& r, const TaskStatus& t) {
    if (t.state == TaskState::kExited && t.fenced) {
      r.state = RankState::kGone;
      r.message = RedactSecretValues(spec, t.message);
    } else if (t.state == TaskState::kExited) {
      r.state = RankState::kExited;
      r.exit_code = t.exit_code;
      r.signal = t.signal;
      // It reaches events, job reasons and the API: never with a secret in it.
      r.message = RedactSecretValues(spec, t.message);
    } else if (!Done(r.state)) {
      r.state = t.state == TaskState::kRunning ? RankState::kRunning : RankState::kStarting;
    }
  }
  // The rank `t` is about, when it belongs to the open attempt of an active job and
  // runs on `node`.
  std::pair<JobEntry*, Rank*> FindRank(const std::string& node, const TaskStatus& t);
  // Queues a `preempt` command (the spec's notice signal, its grace) for every rank of
  // `e`'s gang that has not finished.
  void SendPreemptNotices(const JobEntry& e);
  void CommitGroup(std::vector<SubmitRequest*>& group);
  // Returns the first of `n` consecutive unused job ids, taken from a block reserved
  // in the store ahead of time, so that a group commit is one transaction (one fsync)
  // rather than two. Ids of a block not used before a crash are skipped, never reused.
  // REQUIRES: the submit leader (one caller at a time).
  Result<JobId> TakeJobIds(int64_t n);

  store::Store* const store_;
  const Clock* const clock_;
  const ClusterOptions opt_;
  const PathPolicy paths_;  // of opt_

  // One pass at a time (SchedulePass runs sched::Schedule without mu_; only passes
  // allocate GPUs, so a GPU free in a pass's snapshot is free until it applies).
  std::mutex pass_mu_;
  // Whether the last pass changed nothing (no bind, no preemption), and when it ran:
  // a pass with nothing new to see (not dirty_, no running job whose clock matters,
  // no retry backoff ending since) would conclude the same, so it is skipped.
  bool last_pass_idle_ = false;  // GUARDED_BY(pass_mu_)
  Timestamp last_pass_at_{};     // GUARDED_BY(pass_mu_)
  // The Pending jobs of the last pass's snapshot and the views they were copied from
  // (parallel, ascending id), so that the next snapshot copies only what changed.
  std::vector<sched::PendingJob> last_pending_;                 // GUARDED_BY(pass_mu_)
  std::vector<std::shared_ptr<const PendingView>> last_views_;  // GUARDED_BY(pass_mu_)

  // Serialises changes of tenants and queues (quota checks, EnsureTenant, and each
  // submission group from its check of the queues to the end of its commit, which
  // runs outside mu_). Taken before mu_.
  std::mutex tenancy_mu_;
  std::mutex mu_;
  std::condition_variable cv_;              // the loop's WaitForWork (dirty_, shutdown_)
  bool dirty_ = true;                       // GUARDED_BY(mu_)
  bool shutdown_ = false;                   // GUARDED_BY(mu_)
  int64_t next_fault_ = 1;                  // GUARDED_BY(mu_): "f-<n>"
  std::map<JobId, JobEntry> jobs_;          // GUARDED_BY(mu_): active
  std::map<std::string, NodeEntry> nodes_;  // GUARDED_BY(mu_)
  // Every waiting long poll by deadline; one thread answers those whose wait is over,
  // so that a waiting poll holds no thread of its own.
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<PollWaiter>>
      poll_deadlines_;  // GUARDED_BY(mu_)
  std::condition_variable poll_timer_cv_;
  bool timer_stop_ = false;  // GUARDED_BY(mu_)
  std::thread poll_timer_;
  std::map<std::string, Tenant> tenants_;                        // GUARDED_BY(mu_)
  std::map<std::string, int64_t> unfinished_by_tenant_;          // GUARDED_BY(mu_): jobs_ by tenant
  std::map<std::pair<std::string, std::string>, Queue> queues_;  // GUARDED_BY(mu_)
  std::map<std::string, PriorityClass> classes_;                 // GUARDED_BY(mu_)

  // Group commit of submissions: the first waiter becomes the leader and commits
  // everything queued so far in one transaction.
  std::mutex submit_mu_;
  std::vector<SubmitRequest*> submit_queue_;  // GUARDED_BY(submit_mu_)
  bool submit_leader_ = false;                // GUARDED_BY(submit_mu_)
  JobId reserved_next_ = 0;                   // the submit leader's block of ids:
  JobId reserved_end_ = 0;                    // [reserved_next_, reserved_end_)
};

// Job ids reserved in the store at a time (see TakeJobIds).
constexpr int64_t kJobIdBlock = 4096;

// --- loading ------------------------------------------------------------------------

Status Cluster::Impl::Load() {
  TY_ASSIGN_OR_RETURN(store::StoredState state, store_->LoadAll());
  const Timestamp now = clock_->Now();
  store::WriteBatch seed;
  if (state.tenants.empty()) {
    seed.PutTenant(Tenant{kDefaultTenant, "created by the server on first start"});
    seed.PutQueue(Queue{kDefaultQueue, kDefaultTenant, "", 0, kMaxQueueGpus, 1.0});
  }
  if (state.priority_classes.empty()) {
    for (const auto& pc : DefaultPriorityClasses()) seed.PutPriorityClass(pc);
  }
  for (Job& job : state.active_jobs) {
    // Admitted is not used by this server: a binding is committed as Starting.
    if (job.state == JobState::kAdmitted) {
      TY_RETURN_IF_ERROR(job.TransitionTo(JobState::kPending, now, "requeued on server start"));
      seed.PutJob(job);
    }
  }
  if (!seed.empty()) {
    TY_RETURN_IF_ERROR(store_->Commit(seed));
    TY_ASSIGN_OR_RETURN(state, store_->LoadAll());
  }
  std::lock_guard lk(mu_);
  for (auto& t : state.tenants) tenants_[t.name] = t;
  for (auto& q : state.queues) queues_[{q.tenant, q.name}] = q;
  for (auto& pc : state.priority_classes) classes_[pc.name] = pc;
  for (auto& n : state.nodes) {
    NodeEntry e;
    e.node = n;
    e.admin = n.state == NodeState::kCordoned || n.state == NodeState::kDraining
                  ? n.state
                  : NodeState::kReady;
    // Agents get node_timeout from now to come back before their work is given up.
    e.last_heartbeat = now;
    nodes_[n.name] = std::move(e);
  }
  for (auto& job : state.active_jobs) {
    JobEntry e;
    e.job = std::move(job);
    if (const Attempt* a = e.job.CurrentAttempt()) {
      Gang g;
      g.attempt = a->index;
      g.ranks = MakeRanks(e.job, *a);
      if (e.job.state == JobState::kLost) {
        g.stopping = Stopping::kLost;
      } else if (e.job.reason.starts_with(kCancelPrefix)) {
        g.stopping = Stopping::kCancelled;
      } else if (e.job.reason.starts_with(kTimeLimitPrefix)) {
        g.stopping = Stopping::kTimeLimit;
      }
      g.stop_message = e.job.reason;
      e.gang = std::move(g);
    }
    ++unfinished_by_tenant_[e.job.spec.tenant];
    jobs_[e.job.id] = std::move(e);
  }
  dirty_ = true;
  return Status::Ok();
}

// --- snapshot ------------------------------------------------------------------------

std::shared_ptr<const PendingView> Cluster::Impl::PendingViewLocked(JobEntry& e) {
  const Job& job = e.job;
  const PendingKey key = KeyOf(job);
  if (e.pending_view && e.pending_view->key == key) return e.pending_view;
  auto v = std::make_shared<PendingView>();
  v->key = key;
  const PriorityClass* pc = ClassOf(job);
  sched::PendingJob& p = v->job;
  p.id = job.id;
  p.name = job.spec.name;
  p.tenant = job.spec.tenant;
  p.queue = job.spec.queue;
  p.priority = pc ? pc->value : 0;
  p.preemptible = pc ? pc->preemptible : true;
  p.replicas = job.spec.replicas;
  p.min_replicas = job.spec.min_replicas;
  p.per_replica = job.spec.resources;
  p.topology = job.spec.topology;
  p.submit_time = job.submit_time;
  p.eligible_time = sched::EligibleTime(job);
  p.time_limit = job.spec.time_limit;
  p.excluded_nodes = sched::ExcludedNodes(job);
  p.held = job.held;
  Duration attained{0};
  for (const Attempt& a : job.attempts) {
    if (a.end_time) {
      attained +=
          (*a.end_time - a.start_time) *
          std::max<int64_t>(1, job.spec.resources.gpus * static_cast<int64_t>(a.nodes.size()));
    }
  }
  p.attained_service = attained;
  e.pending_view = std::move(v);
  return e.pending_view;
}

sched::Snapshot Cluster::Impl::SnapshotLocked(
    std::vector<std::shared_ptr<const PendingView>>& pending) {
  sched::Snapshot s;
  s.now = clock_->Now();
  for (const auto& [name, n] : nodes_) {
    Node node = n.node;
    node.state = EffectiveState(n);
    s.nodes.push_back(std::move(node));
  }
  for (const auto& [key, q] : queues_) s.queues.push_back(q);
  pending.clear();
  for (auto& [id, e] : jobs_) {
    const Job& job = e.job;
    if (const Attempt* a = job.CurrentAttempt()) {
      const PriorityClass* pc = ClassOf(job);
      sched::RunningJob r;
      r.id = id;
      r.tenant = job.spec.tenant;
      r.queue = job.spec.queue;
      r.priority = pc ? pc->value : 0;
      r.preemptible = pc ? pc->preemptible : true;
      r.per_replica = job.spec.resources;
      r.replicas = PlacementOf(*a);
      r.start_time = a->start_time;
      if (job.checkpoint && job.checkpoint->completed_at > a->start_time) {
        r.last_checkpoint = job.checkpoint->completed_at;
      }
      r.time_limit = job.spec.time_limit;
      r.preempting =
          job.state != JobState::kRunning || (e.gang && e.gang->stopping != Stopping::kNone);
      s.running.push_back(std::move(r));
    } else if (job.state == JobState::kPending) {
      pending.push_back(PendingViewLocked(e));
    } else {
      e.pending_view.reset();
    }
  }
  return s;
}

JobView Cluster::Impl::ViewLocked(const JobEntry& e) const {
  JobView v;
  v.job = e.job;
  if (const Attempt* a = e.job.CurrentAttempt()) v.placement = PlacementOf(*a);
  if (e.gang) {
    for (const Rank& r : e.gang->ranks) {
      v.ranks.push_back({r.rank, r.replica, r.node, r.gpus, std::string(RankStateName(r.state)),
                         r.exit_code, r.signal, r.message});
    }
    v.stopping = e.gang->stop_message;
    if (e.gang->stopping == Stopping::kNone) v.stopping.clear();
  }
  return v;
}

// --- submission (group commit) ----------------------------------------------------------

Result<std::vector<JobId>> Cluster::Impl::Submit(std::vector<JobSpec> specs,
                                                 const std::string& actor, SubmitOptions options) {
  if (specs.empty()) return InvalidArgument("submit: no job given");
  for (const JobSpec& s : specs) {
    std::vector<Diagnostic> bad = CheckSpecPaths(s, paths_);
    if (bad.empty()) continue;
    std::string msg;
    for (const Diagnostic& d : bad) msg += (msg.empty() ? "" : "; ") + d.ToString();
    return InvalidArgument(std::move(msg));
  }
  SubmitRequest req;
  req.specs = std::move(specs);
  req.actor = actor;
  req.options = options;
  std::unique_lock lk(submit_mu_);
  submit_queue_.push_back(&req);
  while (!req.done) {
    if (!submit_leader_) {
      submit_leader_ = true;
      std::vector<SubmitRequest*> group;
      group.swap(submit_queue_);
      lk.unlock();
      CommitGroup(group);
      lk.lock();
      submit_leader_ = false;
      // Wake each submitter of the group (one thread each, not every waiter), and the
      // first of those queued meanwhile to lead the next group.
      for (SubmitRequest* r : group) {
        r->done = true;
        if (r != &req) r->cv.notify_one();
      }
      if (!submit_queue_.empty()) submit_queue_.front()->cv.notify_one();
    } else {
      req.cv.wait(lk);
    }
  }
  return std::move(*req.result);
}

Result<JobId> Cluster::Impl::TakeJobIds(int64_t n) {
  if (reserved_end_ - reserved_next_ < n) {
    const int64_t block = std::max(n, kJobIdBlock);
    TY_ASSIGN_OR_RETURN(JobId first, store_->ReserveJobIds(block));
    reserved_next_ = first;
    reserved_end_ = first + block;
  }
  const JobId first = reserved_next_;
  reserved_next_ += n;
  return first;
}

void Cluster::Impl::CommitGroup(std::vector<SubmitRequest*>& group) {
  // Queues checked below must not be deleted (nor tenants re-created) before the
  // commit.
  std::lock_guard tenancy(tenancy_mu_);
  const Timestamp now = clock_->Now();
  // Check each request against the tenancy as it is now; the rejected ones get
  // their error and take no part in the commit.
  std::vector<SubmitRequest*> accepted;
  std::vector<Tenant> new_tenants;
  std::vector<Queue> new_queues;
  {
    std::lock_guard lk(mu_);
    std::set<std::string> tenants_added;
    std::set<std::pair<std::string, std::string>> queues_added;
    std::map<std::string, int64_t> added_by_tenant;
    for (SubmitRequest* r : group) {
      Status bad;
      std::map<std::string, int64_t> mine;
      for (const JobSpec& s : r->specs) ++mine[s.tenant];
      for (const auto& [tenant, n] : mine) {
        auto have = unfinished_by_tenant_.find(tenant);
        const int64_t total =
            (have == unfinished_by_tenant_.end() ? 0 : have->second) + added_by_tenant[tenant] + n;
        if (total > opt_.max_unfinished_jobs_per_tenant) {
          bad = ResourceExhausted("tenant " + QuoteForMessage(tenant) + " may have at most " +
                                  std::to_string(opt_.max_unfinished_jobs_per_tenant) +
                                  " unfinished jobs; this submission would make it " +
                                  std::to_string(total));
        }
      }
      for (size_t i = 0; i < r->specs.size() && bad.ok(); ++i) {
        const JobSpec& s = r->specs[i];
        if (!classes_.contains(s.priority)) {
          std::string valid;
          for (const auto& [n, pc] : classes_) valid += (valid.empty() ? "" : ", ") + n;
          bad = InvalidArgument("priority: no priority class " + QuoteForMessage(s.priority) +
                                "; valid: " + valid);
        } else if (!queues_.contains({s.tenant, s.queue}) &&
                   !queues_added.contains({s.tenant, s.queue})) {
          if (!opt_.auto_create_queues || !r->options.may_create_queues) {
            bad = InvalidArgument("queue: tenant " + QuoteForMessage(s.tenant) + " has no queue " +
                                  QuoteForMessage(s.queue) + "; a cluster-admin creates queues");
          }
        }
      }
      if (!bad.ok()) {
        r->result = bad;
        continue;
      }
      for (const JobSpec& s : r->specs) {
        if (!tenants_.contains(s.tenant) && tenants_added.insert(s.tenant).second) {
          new_tenants.push_back(Tenant{s.tenant, "created on first submission"});
        }
        if (!queues_.contains({s.tenant, s.queue}) &&
            queues_added.insert({s.tenant, s.queue}).second) {
          new_queues.push_back(Queue{s.queue, s.tenant, "", 0, kMaxQueueGpus, 1.0});
        }
      }
      for (const auto& [tenant, n] : mine) added_by_tenant[tenant] += n;
      accepted.push_back(r);
    }
  }
  int64_t n = 0;
  for (SubmitRequest* r : accepted) n += static_cast<int64_t>(r->specs.size());
  if (n == 0) return;
  auto fail_all = [&](const Status& s) {
    for (SubmitRequest* r : accepted) r->result = s;
  };
  Result<JobId> first = TakeJobIds(n);
  if (!first.ok()) return fail_all(first.status());
  store::WriteBatch batch;
  for (const Tenant& t : new_tenants) batch.PutTenant(t);
  for (const Queue& q : new_queues) batch.PutQueue(q);
  std::vector<Job> jobs;
  jobs.reserve(static_cast<size_t>(n));
  JobId next = *first;
  for (SubmitRequest* r : accepted) {
    std::vector<JobId> ids;
    for (JobSpec& s : r->specs) {
      Job job;
      job.id = next++;
      job.spec = std::move(s);
      job.state = JobState::kPending;
      job.reason = "submitted";
      job.submit_time = now;
      job.state_time = now;
      job.submitted_by = r->actor;
      batch.PutJob(job);
      batch.AppendEvent(job.id, now, r->actor, "Submitted",
                        "submitted: " + std::to_string(job.spec.replicas) + " replica(s) of " +
                            Describe(job.spec.resources));
      ids.push_back(job.id);
      jobs.push_back(std::move(job));
    }
    if (r->options.audit) {
      AuditEntry e = std::move(*r->options.audit);
      e.time = now;
      e.object = "job/" + std::to_string(ids.front());
      batch.AppendAudit(std::move(e));
    }
    r->result = std::move(ids);
  }
  if (Status s = store_->Commit(batch); !s.ok()) return fail_all(s);
  CountCommitted(batch);
  {
    std::lock_guard lk(mu_);
    for (Tenant& t : new_tenants) tenants_[t.name] = t;
    for (Queue& q : new_queues) queues_[{q.tenant, q.name}] = q;
    for (Job& job : jobs) {
      const JobId id = job.id;
      ++unfinished_by_tenant_[job.spec.tenant];
      jobs_[id] = JobEntry{std::move(job), std::nullopt, nullptr};
    }
    dirty_ = true;
  }
  cv_.notify_all();
}

// --- user reads and writes ------------------------------------------------------------

Result<JobView> Cluster::Impl::GetJob(JobId id) {
  {
    std::lock_guard lk(mu_);
    auto it = jobs_.find(id);
    if (it != jobs_.end()) return ViewLocked(it->second);
  }
  TY_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
  if (!job) return NotFound("job " + std::to_string(id) + " does not exist");
  JobView v;
  v.job = std::move(*job);
  return v;
}

Result<store::JobPage> Cluster::Impl::ListJobs(const ListJobsRequest& req) {
  const store::JobFilter& f = req.filter;
  const size_t limit = static_cast<size_t>(std::max(req.limit, 1));
  const bool descending = req.order == store::JobOrder::kDescending;
  auto wanted = [&](JobState s) {
    return f.states.empty() || std::find(f.states.begin(), f.states.end(), s) != f.states.end();
  };
  // The answer is the first `limit` matching ids past the cursor in the order asked
  // for: the first `limit` of each source below, merged, hold them all.
  //
  // Jobs that have not finished are all in jobs_ (with their live Pending reasons): read
  // them there, under mu_ for the time of `limit` + 1 matches. Finished ones are only
  // in the store; they are read after, so a job that finishes in between is seen twice
  // (the stored record wins), never not at all.
  std::vector<Job> jobs;
  bool more = false;
  {
    std::lock_guard lk(mu_);
    // Adds the job if it matches; false once `limit` are in and another matches.
    auto add = [&](const Job& j) {
      if (!wanted(j.state) || (!f.tenant.empty() && j.spec.tenant != f.tenant) ||
          (!f.queue.empty() && j.spec.queue != f.queue) ||
          !std::string_view(j.spec.name).starts_with(f.name_prefix)) {
        return true;
      }
      if (jobs.size() == limit) {
        more = true;
        return false;
      }
      jobs.push_back(j);
      return true;
    };
    if (!descending) {
      for (auto it = jobs_.upper_bound(req.after_id); it != jobs_.end() && add(it->second.job);
           ++it) {
      }
    } else {
      auto end = req.after_id == 0 ? jobs_.end() : jobs_.lower_bound(req.after_id);
      for (auto it = std::make_reverse_iterator(end); it != jobs_.rend() && add(it->second.job);
           ++it) {
      }
    }
  }
  const size_t unfinished = jobs.size();
  // One query per finished state, each a range of the store's (state, id) index.
  for (JobState s : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    if (!wanted(s)) continue;
    store::JobFilter finished = f;
    finished.states = {s};
    TY_ASSIGN_OR_RETURN(store::JobPage page, store_->ListJobs(finished, req.after_id,
                                                              static_cast<int>(limit), req.order));
    more = more || page.next_after_id.has_value();
    std::move(page.jobs.begin(), page.jobs.end(), std::back_inserter(jobs));
  }
  // In order, each id once: a stored record (after `unfinished`) replaces the one read
  // from memory.
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return descending ? jobs[a].id > jobs[b].id : jobs[a].id < jobs[b].id;
  });
  store::JobPage out;
  for (size_t i : order) {
    if (!out.jobs.empty() && out.jobs.back().id == jobs[i].id) {
      if (i >= unfinished) out.jobs.back() = std::move(jobs[i]);
      continue;
    }
    if (out.jobs.size() == limit) {
      more = true;
      break;
    }
    out.jobs.push_back(std::move(jobs[i]));
  }
  if (more && !out.jobs.empty()) out.next_after_id = out.jobs.back().id;
  return out;
}

Result<store::EventPage> Cluster::Impl::ListEvents(JobId id, int64_t after_seq, int limit) {
  {
    std::lock_guard lk(mu_);
    if (!jobs_.contains(id)) {
      TY_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
      if (!job) return NotFound("job " + std::to_string(id) + " does not exist");
    }
  }
  return store_->ListEvents(id, after_seq, limit);
}

Status Cluster::Impl::EnsureTenant(const std::string& name, const std::string& actor) {
  TY_RETURN_IF_ERROR(ValidateTenant(Tenant{name, ""}));
  std::lock_guard tenancy(tenancy_mu_);
  std::lock_guard lk(mu_);
  if (tenants_.contains(name)) return Status::Ok();
  const Tenant tenant{name, "created by " + actor};
  const Queue queue{kDefaultQueue, name, "", 0, kMaxQueueGpus, 1.0};
  store::WriteBatch b;
  b.PutTenant(tenant);
  if (!queues_.contains({name, kDefaultQueue})) b.PutQueue(queue);
  TY_RETURN_IF_ERROR(CommitLocked(b));
  tenants_[name] = tenant;
  queues_.try_emplace({name, kDefaultQueue}, queue);
  return Status::Ok();
}

Status Cluster::Impl::Cancel(JobId id, const std::string& actor) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    TY_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
    if (!job) return NotFound("job " + std::to_string(id) + " does not exist");
    return FailedPrecondition("job " + std::to_string(id) +
                              " has already finished: " + std::string(JobStateName(job->state)));
  }
  JobEntry& e = it->second;
  const Timestamp now = clock_->Now();
  if (!e.gang) {
    Job next = e.job;
    TY_RETURN_IF_ERROR(next.TransitionTo(JobState::kCancelled, now, "cancelled by " + actor));
    store::WriteBatch b;
    b.PutJob(next);
    b.AppendEvent(id, now, actor, "Cancelled",
                  "cancelled while " + std::string(JobStateName(e.job.state)));
    TY_RETURN_IF_ERROR(CommitLocked(b));
    --unfinished_by_tenant_[it->second.job.spec.tenant];
    jobs_.erase(it);
    dirty_ = true;
    return Status::Ok();
  }
  if (e.gang->stopping == Stopping::kCancelled) return Status::Ok();
  // The request is stored first (in the job's reason), so a restarted server still
  // finishes the cancellation.
  Job next = e.job;
  next.reason = std::string(kCancelPrefix) + " by " + actor;
  store::WriteBatch b;
  b.PutJob(next);
  b.AppendEvent(id, now, actor, "CancelRequested", "stopping every rank");
  TY_RETURN_IF_ERROR(CommitLocked(b));
  e.job = std::move(next);
  e.gang->stopping = Stopping::kCancelled;
  e.gang->stop_message = e.job.reason;
  StopRanksLocked(e);
  return EvaluateLocked(id);
}

Status Cluster::Impl::SetHeld(JobId id, bool held, const std::string& actor) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  const std::string verb = held ? "hold" : "release";
  if (it == jobs_.end()) {
    TY_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
    if (!job) return NotFound("job " + std::to_string(id) + " does not exist");
    return FailedPrecondition("cannot " + verb + " job " + std::to_string(id) + ": it is " +
                              std::string(JobStateName(job->state)));
  }
  JobEntry& e = it->second;
  if (e.job.state != JobState::kPending) {
    return FailedPrecondition("cannot " + verb + " job " + std::to_string(id) + ": it is " +
                              std::string(JobStateName(e.job.state)) +
                              "; only Pending jobs can be " + (held ? "held" : "released"));
  }
  if (e.job.held == held) return Status::Ok();
  const Timestamp now = clock_->Now();
  Job next = e.job;
  next.held = held;
  next.reason = held ? "held by " + actor : "released by " + actor;
  store::WriteBatch b;
  b.PutJob(next);
  b.AppendEvent(id, now, actor, held ? "Held" : "Released", next.reason);
  TY_RETURN_IF_ERROR(CommitLocked(b));
  e.job = std::move(next);
  dirty_ = true;
  cv_.notify_all();
  return Status::Ok();
}

Status Cluster::Impl::ReportCheckpoint(JobId id, const CheckpointReport& report,
                                       const std::string& actor) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    TY_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
    if (!job) return NotFound("job " + std::to_string(id) + " does not exist");
    return FailedPrecondition("job " + std::to_string(id) + " has finished (" +
                              std::string(JobStateName(job->state)) +
                              "); checkpoints are reported while it runs");
  }
  JobEntry& e = it->second;
  if (!e.job.CurrentAttempt()) {
    return FailedPrecondition("job " + std::to_string(id) + " is " +
                              std::string(JobStateName(e.job.state)) +
                              "; checkpoints are reported while it runs");
  }
  // It becomes the next attempt's TRAINYARD_RESUME_FROM: the spec's path rules hold.
  TY_RETURN_IF_ERROR(CheckReportedCheckpoint(report.path, e.job.spec, paths_));
  const Timestamp now = clock_->Now();
  Job next = e.job;
  next.checkpoint = CheckpointInfo{report.path, report.step, now, report.write_duration};
  store::WriteBatch b;
  b.PutJob(next);
  b.AppendEvent(id, now, actor, "Checkpoint",
                "checkpoint at step " + std::to_string(report.step) + ": " + report.path +
                    " (written in " + FormatDuration(report.write_duration) + ")");
  TY_RETURN_IF_ERROR(CommitLocked(b));
  e.job = std::move(next);
  return Status::Ok();
}

Status Cluster::Impl::SendProfile(JobId id, int32_t attempt, const std::vector<int32_t>& ranks,
                                  const std::string& profile_id, int32_t steps) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  const std::string job = "job " + std::to_string(id);
  if (it == jobs_.end()) {
    TY_ASSIGN_OR_RETURN(std::optional<Job> stored, store_->GetJob(id));
    if (!stored) return NotFound(job + " does not exist");
    return FailedPrecondition(job + " has finished (" + std::string(JobStateName(stored->state)) +
                              "); only a Running job can be profiled");
  }
  const JobEntry& e = it->second;
  if (e.job.state != JobState::kRunning || !e.gang || e.gang->stopping != Stopping::kNone) {
    return FailedPrecondition(
        job + " is " + std::string(JobStateName(e.job.state)) +
        (e.gang && e.gang->stopping != Stopping::kNone ? " and stopping" : "") +
        "; only a Running job can be profiled");
  }
  if (e.gang->attempt != attempt) {
    return FailedPrecondition(job + " is running attempt " + std::to_string(e.gang->attempt) +
                              ", not attempt " + std::to_string(attempt));
  }
  std::vector<const Rank*> targets;
  for (int32_t r : ranks) {
    auto rank = std::find_if(e.gang->ranks.begin(), e.gang->ranks.end(),
                             [r](const Rank& x) { return x.rank == r; });
    if (rank == e.gang->ranks.end()) {
      return InvalidArgument("rank: " + job + " has ranks 0.." +
                             std::to_string(e.gang->ranks.size() - 1) + ", got " +
                             std::to_string(r));
    }
    targets.push_back(&*rank);
  }
  for (const Rank* r : targets) {
    Command c;
    c.kind = Command::Kind::kProfile;
    c.task_id = TaskId(id, attempt, r->rank);
    c.profile_id = profile_id;
    c.steps = steps;
    Push(r->node, std::move(c));
  }
  return Status::Ok();
}

std::vector<NodeView> Cluster::Impl::ListNodes() {
  std::lock_guard lk(mu_);
  std::map<std::string, NodeView> views;
  for (const auto& [name, n] : nodes_) {
    NodeView v;
    v.node = n.node;
    v.node.state = EffectiveState(n);
    if (!n.connected) {
      v.node.state_reason =
          n.node.state == NodeState::kNotReady ? n.node.state_reason : "agent not connected";
    } else if (!n.healthy) {
      v.node.state_reason = n.health_message;
    }
    v.address = n.address;
    v.simulated = n.simulated;
    v.connected = n.connected;
    v.last_heartbeat = n.last_heartbeat;
    v.telemetry = n.telemetry;
    v.links = n.links;
    v.disks = n.disks;
    v.health_check = n.health_check;
    for (const InjectedFault& f : n.faults) v.faults.push_back(f.fault);
    views[name] = std::move(v);
  }
  for (const auto& [id, e] : jobs_) {
    const Attempt* a = e.job.CurrentAttempt();
    if (a == nullptr) continue;
    for (const auto& p : PlacementOf(*a)) {
      auto it = views.find(p.node);
      if (it == views.end()) continue;
      it->second.gpus_used += static_cast<int64_t>(p.gpus.size());
      std::vector<JobId>& on_gpu = it->second.gpu_jobs;
      for (int32_t g : p.gpus) {
        if (g < 0) continue;
        if (on_gpu.size() <= static_cast<size_t>(g)) on_gpu.resize(static_cast<size_t>(g) + 1, 0);
        on_gpu[static_cast<size_t>(g)] = id;
      }
      if (it->second.jobs.empty() || it->second.jobs.back() != id) {
        it->second.jobs.push_back(id);
        it->second.job_tenants.push_back(e.job.spec.tenant);
      }
    }
  }
  std::vector<NodeView> out;
  for (auto& [name, v] : views) out.push_back(std::move(v));
  return out;
}

Result<NodeView> Cluster::Impl::GetNode(const std::string& name) {
  for (NodeView& v : ListNodes()) {
    if (v.node.name == name) return std::move(v);
  }
  return NotFound("node " + QuoteForMessage(name) + " does not exist");
}

Status Cluster::Impl::SyncNodeLocked(NodeEntry& n, const std::string& reason) {
  Node next = n.node;
  next.state = EffectiveState(n);
  next.state_reason = next.state == NodeState::kReady ? "" : reason;
  if (next == n.node) return Status::Ok();
  store::WriteBatch b;
  b.PutNode(next);
  TY_RETURN_IF_ERROR(CommitLocked(b));
  n.node = std::move(next);
  return Status::Ok();
}

Status Cluster::Impl::SetNodeAdminState(const std::string& name, NodeState state,
                                        const std::string& actor, const std::string& reason) {
  std::lock_guard lk(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return NotFound("node " + QuoteForMessage(name) + " does not exist");
  NodeEntry& n = it->second;
  const NodeState before = n.admin;
  n.admin = state;
  const std::string verb = state == NodeState::kReady      ? "uncordoned"
                           : state == NodeState::kCordoned ? "cordoned"
                                                           : "drained";
  if (Status s = SyncNodeLocked(n, reason.empty() ? verb + " by " + actor : reason); !s.ok()) {
    n.admin = before;
    return s;
  }
  dirty_ = true;
  cv_.notify_all();
  if (state != NodeState::kDraining) return Status::Ok();
  // Drain: move every gang with a rank here off the node, as a preemption.
  std::vector<JobId> ids;
  for (const auto& [id, e] : jobs_) {
    if (!e.gang) continue;
    for (const Rank& r : e.gang->ranks) {
      if (r.node == name && !Done(r.state)) {
        ids.push_back(id);
        break;
      }
    }
  }
  for (JobId id : ids) {
    JobEntry& e = jobs_[id];
    if (e.gang->stopping != Stopping::kNone || e.job.state == JobState::kPreempting) continue;
    if (e.job.state == JobState::kRunning) {
      TY_RETURN_IF_ERROR(PreemptLocked(e, "node " + name + " is being drained", actor));
    } else {
      TY_RETURN_IF_ERROR(
          StopGangLocked(e, Stopping::kRequeue, "node " + name + " is being drained"));
      TY_RETURN_IF_ERROR(EvaluateLocked(id));
    }
  }
  return Status::Ok();
}

Status Cluster::Impl::RequeueExcluding(JobId id, const std::string& node, const std::string& why,
                                       const std::string& actor) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("job " + std::to_string(id) + " is not active");
  JobEntry& e = it->second;
  if (e.job.state != JobState::kRunning || !e.gang || e.gang->stopping != Stopping::kNone) {
    return FailedPrecondition("job " + std::to_string(id) + " is " +
                              std::string(JobStateName(e.job.state)) +
                              "; only a Running job can be requeued");
  }
  const Timestamp now = clock_->Now();
  Job next = e.job;
  if (std::find(next.excluded_nodes.begin(), next.excluded_nodes.end(), node) ==
      next.excluded_nodes.end()) {
    next.excluded_nodes.push_back(node);
  }
  const std::string reason = why + "; requeued excluding node " + node;
  TY_RETURN_IF_ERROR(next.TransitionTo(JobState::kPreempting, now, reason));
  store::WriteBatch b;
  b.PutJob(next);
  b.AppendEvent(
      id, now, actor, "Preempting",
      reason + "; work since the last checkpoint so far: " + FormatDuration(e.job.LostWorkAt(now)));
  TY_RETURN_IF_ERROR(CommitLocked(b));
  e.job = std::move(next);
  SendPreemptNotices(e);
  dirty_ = true;
  cv_.notify_all();
  return Status::Ok();
}

Status Cluster::Impl::RequestCheckpoint(JobId id, const std::string& why,
                                        const std::string& actor) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("job " + std::to_string(id) + " is not active");
  JobEntry& e = it->second;
  if (e.job.state != JobState::kRunning || !e.gang) {
    return FailedPrecondition("job " + std::to_string(id) + " is " +
                              std::string(JobStateName(e.job.state)) +
                              "; only a Running job can be asked for a checkpoint");
  }
  store::WriteBatch b;
  b.AppendEvent(id, clock_->Now(), actor, "CheckpointRequested", why);
  TY_RETURN_IF_ERROR(CommitLocked(b));
  for (const Rank& r : e.gang->ranks) {
    if (Done(r.state)) continue;
    Command c;
    c.kind = Command::Kind::kCheckpoint;
    c.task_id = TaskId(id, e.gang->attempt, r.rank);
    Push(r.node, std::move(c));
  }
  return Status::Ok();
}

Status Cluster::Impl::ApplyHealthCheckLocked(NodeEntry& n,
                                             const std::optional<HealthCheckResult>& hc) {
  if (!hc || n.health_check == hc) return Status::Ok();
  n.health_check = hc;
  const bool cordoned_by_check =
      n.admin == NodeState::kCordoned && n.node.state_reason.starts_with(kHealthCheckCordonPrefix);
  if (!hc->ok) {
    if (n.admin != NodeState::kReady && !cordoned_by_check) return Status::Ok();
    std::string output = hc->output.substr(0, hc->output.find('\n'));
    if (output.size() > 200) output = output.substr(0, 200) + "...";
    const NodeState before = n.admin;
    n.admin = NodeState::kCordoned;
    std::string reason = std::string(kHealthCheckCordonPrefix) +
                         (hc->trigger.empty() ? "" : " (" + hc->trigger + ")") + ": " +
                         (output.empty() ? "no output" : output);
    if (Status s = SyncNodeLocked(n, reason); !s.ok()) {
      n.admin = before;
      return s;
    }
  } else if (cordoned_by_check) {
    n.admin = NodeState::kReady;
    if (Status s = SyncNodeLocked(n, ""); !s.ok()) {
      n.admin = NodeState::kCordoned;
      return s;
    }
  }
  dirty_ = true;
  cv_.notify_all();
  return Status::Ok();
}

Result<InjectedFault> Cluster::Impl::InjectFault(const std::string& node, const std::string& kind,
                                                 int gpu, Duration duration,
                                                 const std::string& actor) {
  std::lock_guard lk(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound("node " + QuoteForMessage(node) + " does not exist");
  if (!IsFaultKind(kind)) {
    std::string kinds;
    for (std::string_view k : kFaultKinds) kinds += (kinds.empty() ? "" : ", ") + std::string(k);
    return InvalidArgument("kind: unknown fault kind " + QuoteForMessage(kind) + "; one of " +
                           kinds);
  }
  const int gpus = static_cast<int>(it->second.node.gpus.size());
  if (gpu < -1 || (gpu >= 0 && gpu >= std::max(gpus, 1))) {
    return InvalidArgument("gpu: node " + node + " has " + std::to_string(gpus) +
                           " GPU(s) (indices 0.." + std::to_string(std::max(gpus, 1) - 1) +
                           "), got " + std::to_string(gpu));
  }
  if (duration.count() < 0 || duration > std::chrono::hours(24 * 7)) {
    return InvalidArgument("duration: must be 0 (until cleared) up to 7d, got " +
                           FormatDuration(duration));
  }
  const Timestamp now = clock_->Now();
  InjectedFault f;
  f.node = node;
  f.fault.id = "f-" + std::to_string(next_fault_++);
  f.fault.kind = *ParseFaultKind(kind);
  f.fault.gpu = gpu;
  f.fault.until_ms = duration.count() > 0 ? (now + duration).time_since_epoch().count() : 0;
  f.created = now;
  f.actor = actor;
  it->second.faults.push_back(f);
  SyncFaultsLocked(false, "");
  return f;
}

Result<int> Cluster::Impl::ClearFaults(const std::string& node, const std::string& id) {
  std::lock_guard lk(mu_);
  if (!node.empty() && !nodes_.contains(node)) {
    return NotFound("node " + QuoteForMessage(node) + " does not exist");
  }
  int cleared = 0;
  for (auto& [name, n] : nodes_) {
    if (!node.empty() && name != node) continue;
    const size_t before = n.faults.size();
    std::erase_if(n.faults, [&](const InjectedFault& f) { return id.empty() || f.fault.id == id; });
    cleared += static_cast<int>(before - n.faults.size());
  }
  if (!id.empty() && cleared == 0) {
    return NotFound("no fault " + QuoteForMessage(id) +
                    (node.empty() ? std::string() : " on node " + node));
  }
  SyncFaultsLocked(false, "");
  return cleared;
}

std::vector<InjectedFault> Cluster::Impl::ListFaults() {
  std::lock_guard lk(mu_);
  std::vector<InjectedFault> out;
  for (const auto& [name, n] : nodes_) out.insert(out.end(), n.faults.begin(), n.faults.end());
  return out;
}

void Cluster::Impl::SyncFaultsLocked(bool force_node_resend, const std::string& node) {
  const bool any = std::any_of(nodes_.begin(), nodes_.end(), [](const auto& kv) {
    return !kv.second.faults.empty() || !kv.second.sent_faults.empty();
  });
  if (!any && !force_node_resend) return;
  const int64_t now_ms = clock_->Now().time_since_epoch().count();
  std::map<std::string, std::vector<FaultSpec>> want;
  for (auto& [name, n] : nodes_) {
    std::erase_if(n.faults, [&](const InjectedFault& f) {
      return f.fault.until_ms != 0 && f.fault.until_ms <= now_ms;
    });
    std::vector<FaultSpec>& set = want[name];
    for (const InjectedFault& f : n.faults) set.push_back(f.fault);
  }
  // A link down slows every rank of the jobs that span the node (they wait on it in
  // their collectives): their other nodes get comm-slow for those jobs.
  for (const auto& [name, n] : nodes_) {
    for (const InjectedFault& f : n.faults) {
      if (f.fault.kind != FaultKind::kLinkDown) continue;
      for (const auto& [id, e] : jobs_) {
        if (!e.gang) continue;
        const std::string& down = name;  // (clang 14 cannot capture a structured binding)
        const auto on = [&down](const Rank& r) { return r.node == down && !Done(r.state); };
        if (std::none_of(e.gang->ranks.begin(), e.gang->ranks.end(), on)) continue;
        std::set<std::string> others;
        for (const Rank& r : e.gang->ranks) {
          if (r.node != name && !Done(r.state)) others.insert(r.node);
        }
        for (const std::string& other : others) {
          FaultSpec c;
          c.id = f.fault.id + "/job-" + std::to_string(id);
          c.kind = FaultKind::kCommSlow;
          c.until_ms = f.fault.until_ms;
          c.job_id = id;
          want[other].push_back(std::move(c));
        }
      }
    }
  }
  for (auto& [name, n] : nodes_) {
    std::vector<FaultSpec>& set = want[name];
    const bool forced = force_node_resend && name == node;
    if (!forced && set == n.sent_faults) continue;
    if (!n.connected) continue;
    n.sent_faults = set;
    Command c;
    c.kind = Command::Kind::kFaults;
    c.faults = set;
    Push(name, std::move(c));
  }
}

std::vector<QueueView> Cluster::Impl::ListQueues() {
  std::lock_guard lk(mu_);
  std::map<std::pair<std::string, std::string>, QueueView> views;
  for (const auto& [key, q] : queues_) views[key].queue = q;
  for (const auto& [id, e] : jobs_) {
    auto it = views.find({e.job.spec.tenant, e.job.spec.queue});
    if (it == views.end()) continue;
    if (const Attempt* a = e.job.CurrentAttempt()) {
      it->second.gpus_in_use += e.job.spec.resources.gpus * static_cast<int64_t>(a->nodes.size());
      ++it->second.running_jobs;
    } else if (e.job.state == JobState::kPending) {
      ++it->second.pending_jobs;
    }
  }
  std::vector<QueueView> out;
  for (auto& [key, v] : views) {
    v.gpus_borrowed = std::max<int64_t>(0, v.gpus_in_use - v.queue.guaranteed_gpus);
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<Tenant> Cluster::Impl::ListTenants() {
  std::lock_guard lk(mu_);
  std::vector<Tenant> out;
  for (const auto& [n, t] : tenants_) out.push_back(t);
  return out;
}

namespace {

std::string QueueKey(const std::string& tenant, const std::string& name) {
  return tenant + "/" + name;
}

}  // namespace

Result<Tenant> Cluster::Impl::SetTenantQuota(const std::string& name, int64_t guaranteed,
                                             int64_t limit, const std::string& actor) {
  Tenant tenant{name, "created by " + actor, guaranteed, limit};
  TY_RETURN_IF_ERROR(ValidateTenant(tenant));
  std::lock_guard tenancy(tenancy_mu_);
  std::lock_guard lk(mu_);
  store::WriteBatch b;
  std::vector<Queue> changed;
  if (auto it = tenants_.find(name); it != tenants_.end()) {
    tenant.description = it->second.description;
    int64_t sum = 0;
    for (const auto& [key, q] : queues_) {
      if (key.first != name) continue;
      sum += q.guaranteed_gpus;
      if (q.guaranteed_gpus > limit) {
        return FailedPrecondition(
            "tenant " + QuoteForMessage(name) + ": limit_gpus " + std::to_string(limit) +
            " is below the guarantee of its queue " + QueueKey(name, q.name) + " (" +
            std::to_string(q.guaranteed_gpus) + " GPUs); lower that queue's guarantee first");
      }
      if (q.limit_gpus > limit) {
        Queue lowered = q;
        lowered.limit_gpus = limit;
        changed.push_back(lowered);
      }
    }
    if (sum > guaranteed) {
      return FailedPrecondition("tenant " + QuoteForMessage(name) + ": guaranteed_gpus " +
                                std::to_string(guaranteed) + " is below the " +
                                std::to_string(sum) +
                                " GPUs its queues' guarantees already add up to; lower "
                                "their guarantees first");
    }
  } else if (!queues_.contains({name, kDefaultQueue})) {
    changed.push_back(Queue{kDefaultQueue, name, "", 0, limit, 1.0});
  }
  b.PutTenant(tenant);
  for (const Queue& q : changed) b.PutQueue(q);
  TY_RETURN_IF_ERROR(CommitLocked(b));
  tenants_[name] = tenant;
  for (const Queue& q : changed) queues_[{q.tenant, q.name}] = q;
  dirty_ = true;
  cv_.notify_all();
  return tenant;
}

Result<Queue> Cluster::Impl::PutQueue(const Queue& queue) {
  TY_RETURN_IF_ERROR(ValidateQueue(queue));
  std::lock_guard tenancy(tenancy_mu_);
  std::lock_guard lk(mu_);
  auto t = tenants_.find(queue.tenant);
  if (t == tenants_.end()) {
    return NotFound("tenant " + QuoteForMessage(queue.tenant) +
                    " does not exist; a cluster-admin creates it (`trainyard tenants quota`)");
  }
  const Tenant& tenant = t->second;
  const std::string key = QueueKey(queue.tenant, queue.name);
  if (!queue.parent.empty() && !queues_.contains({queue.tenant, queue.parent})) {
    return InvalidArgument("queue.parent: tenant " + QuoteForMessage(queue.tenant) +
                           " has no queue " + QuoteForMessage(queue.parent));
  }
  if (queue.limit_gpus > tenant.limit_gpus) {
    return FailedPrecondition("queue " + key + ": limit_gpus " + std::to_string(queue.limit_gpus) +
                              " is above tenant " + QuoteForMessage(tenant.name) + "'s limit of " +
                              std::to_string(tenant.limit_gpus) +
                              " GPUs per queue; a cluster-admin sets the tenant's quota");
  }
  int64_t others = 0;
  for (const auto& [k, q] : queues_) {
    if (k.first == queue.tenant && k.second != queue.name) others += q.guaranteed_gpus;
  }
  if (others + queue.guaranteed_gpus > tenant.guaranteed_gpus) {
    return FailedPrecondition(
        "queue " + key + ": guaranteed_gpus " + std::to_string(queue.guaranteed_gpus) +
        " plus the " + std::to_string(others) +
        " GPUs guaranteed to the tenant's other queues is " +
        std::to_string(others + queue.guaranteed_gpus) + ", above tenant " +
        QuoteForMessage(tenant.name) + "'s guaranteed_gpus of " +
        std::to_string(tenant.guaranteed_gpus) + "; at most " +
        std::to_string(std::max<int64_t>(0, tenant.guaranteed_gpus - others)) + " is left");
  }
  store::WriteBatch b;
  b.PutQueue(queue);
  TY_RETURN_IF_ERROR(CommitLocked(b));  // also refuses a parent that would make a cycle
  queues_[{queue.tenant, queue.name}] = queue;
  dirty_ = true;
  cv_.notify_all();
  return queue;
}

Status Cluster::Impl::DeleteQueue(const std::string& tenant, const std::string& name) {
  std::lock_guard tenancy(tenancy_mu_);
  std::lock_guard lk(mu_);
  const std::string key = QueueKey(tenant, name);
  if (!queues_.contains({tenant, name})) {
    return NotFound("queue " + QuoteForMessage(key) + " does not exist");
  }
  std::string children;
  for (const auto& [k, q] : queues_) {
    if (k.first == tenant && q.parent == name) children += (children.empty() ? "" : ", ") + q.name;
  }
  if (!children.empty()) {
    return FailedPrecondition("queue " + key + " still has child queues (" + children +
                              "); delete them first");
  }
  int64_t unfinished = 0;
  std::string ids;
  for (const auto& [id, e] : jobs_) {
    if (e.job.spec.tenant != tenant || e.job.spec.queue != name) continue;
    if (++unfinished <= 5) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  }
  if (unfinished > 0) {
    return FailedPrecondition("queue " + key + " still has " + std::to_string(unfinished) +
                              " unfinished job(s) (" + ids + (unfinished > 5 ? ", ..." : "") +
                              "); cancel them or wait for them to finish");
  }
  store::WriteBatch b;
  b.DeleteQueue(tenant, name);
  TY_RETURN_IF_ERROR(CommitLocked(b));
  queues_.erase({tenant, name});
  dirty_ = true;
  cv_.notify_all();
  return Status::Ok();
}

std::vector<PriorityClass> Cluster::Impl::ListPriorityClasses() {
  std::lock_guard lk(mu_);
  std::vector<PriorityClass> out;
  for (const auto& [n, pc] : classes_) out.push_back(pc);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.value > b.value; });
  return out;
}

// --- gang lifecycle -------------------------------------------------------------------

TaskStart Cluster::Impl::BuildStart(const JobEntry& e, const Rank& r) const {
  const Job& job = e.job;
  const Gang& g = *e.gang;
  TaskStart t;
  t.task_id = TaskId(job.id, g.attempt, r.rank);
  t.job_id = job.id;
  t.attempt = g.attempt;
  t.rank = r.rank;
  t.argv = TaskArgv(job.spec);
  t.workdir = job.spec.working_dir;
  t.gpus = r.gpus;
  t.env = job.spec.env;
  t.secret_env = job.spec.secret_env;
  std::string master_addr = "127.0.0.1";
  if (!g.ranks.empty()) {
    auto n = nodes_.find(g.ranks.front().node);
    if (n != nodes_.end() && !n->second.address.empty()) master_addr = n->second.address;
  }
  const int32_t procs = std::max(job.spec.procs_per_replica, 1);
  auto& env = t.env;
  env["MASTER_ADDR"] = master_addr;
  env["MASTER_PORT"] = std::to_string(MasterPort(job.id, g.attempt));
  env["WORLD_SIZE"] = std::to_string(g.ranks.size());
  env["RANK"] = std::to_string(r.rank);
  env["LOCAL_RANK"] = std::to_string(r.local);
  env["LOCAL_WORLD_SIZE"] = std::to_string(procs);
  env["GROUP_RANK"] = std::to_string(r.replica);
  env["NODE_RANK"] = std::to_string(r.replica);
  env["CUDA_VISIBLE_DEVICES"] = GpuList(r.gpus);
  env["TRAINYARD_JOB_ID"] = std::to_string(job.id);
  env["TRAINYARD_JOB_NAME"] = job.spec.name;
  env["TRAINYARD_ATTEMPT"] = std::to_string(g.attempt);
  env["TRAINYARD_TASK_ID"] = t.task_id;
  env["TRAINYARD_NUM_REPLICAS"] = std::to_string(g.ranks.size() / static_cast<size_t>(procs));
  // The default depends only on the job, so every attempt finds what the last one wrote.
  env["TRAINYARD_CHECKPOINT_DIR"] =
      !job.spec.checkpoint.dir.empty()
          ? job.spec.checkpoint.dir
          : DefaultCheckpointDir(paths_.checkpoint_root, job.spec.tenant, job.id);
  env["TRAINYARD_RESUME_FROM"] = job.checkpoint ? job.checkpoint->path : "";
  // The SDK treats this signal as the preemption notice (what PreemptLocked sends).
  env["TRAINYARD_PREEMPT_SIGNAL"] =
      CanonicalSignalName(job.spec.checkpoint.notice_signal).value_or("SIGUSR1");
  if (auto it = job.spec.labels.find(kArrayIndexLabel); it != job.spec.labels.end()) {
    env["TRAINYARD_ARRAY_INDEX"] = it->second;
  }
  return t;
}

void Cluster::Impl::StopRanksLocked(JobEntry& e) {
  Gang& g = *e.gang;
  for (Rank& r : g.ranks) {
    if (Done(r.state)) continue;
    const std::string id = TaskId(e.job.id, g.attempt, r.rank);
    auto n = nodes_.find(r.node);
    if (n == nodes_.end() || !n->second.connected) {
      // Its node is gone (or not back yet): the rank is counted out now if the node
      // is known dead, else when the node returns or times out.
      if (n == nodes_.end() || n->second.node.state == NodeState::kNotReady) {
        r.state = RankState::kGone;
      }
      continue;
    }
    if (r.state == RankState::kSent) {
      auto& q = n->second.commands;
      auto pos = std::find_if(q.begin(), q.end(), [&](const Command& c) {
        return c.kind == Command::Kind::kStart && c.start.task_id == id;
      });
      if (pos != q.end()) {
        q.erase(pos);
        r.state = RankState::kGone;
        continue;
      }
    }
    Command c;
    c.kind = Command::Kind::kStop;
    c.task_id = id;
    c.grace = opt_.stop_grace;
    Push(r.node, std::move(c));
  }
}

Status Cluster::Impl::StopGangLocked(JobEntry& e, Stopping why, std::string message) {
  Gang& g = *e.gang;
  if (why == Stopping::kLost || why == Stopping::kTimeLimit) {
    const Timestamp now = clock_->Now();
    Job next = e.job;
    if (why == Stopping::kLost && next.state != JobState::kLost) {
      TY_RETURN_IF_ERROR(next.TransitionTo(JobState::kLost, now, message));
    } else {
      next.reason = message;
    }
    store::WriteBatch b;
    b.PutJob(next);
    b.AppendEvent(e.job.id, now, "server", why == Stopping::kLost ? "Lost" : "TimeLimit", message);
    TY_RETURN_IF_ERROR(CommitLocked(b));
    e.job = std::move(next);
  }
  g.stopping = why;
  g.stop_message = std::move(message);
  StopRanksLocked(e);
  return Status::Ok();
}

Status Cluster::Impl::PreemptLocked(JobEntry& e, const std::string& why, const std::string& actor) {
  const Timestamp now = clock_->Now();
  Job next = e.job;
  TY_RETURN_IF_ERROR(next.TransitionTo(JobState::kPreempting, now, why));
  store::WriteBatch b;
  b.PutJob(next);
  b.AppendEvent(
      e.job.id, now, actor, "Preempting",
      why + "; work since the last checkpoint so far: " + FormatDuration(e.job.LostWorkAt(now)));
  TY_RETURN_IF_ERROR(CommitLocked(b));
  e.job = std::move(next);
  SendPreemptNotices(e);
  return Status::Ok();
}

void Cluster::Impl::SendPreemptNotices(const JobEntry& e) {
  const int signal = SignalNumber(e.job.spec.checkpoint.notice_signal).value_or(SIGUSR1);
  for (const Rank& r : e.gang->ranks) {
    if (Done(r.state)) continue;
    Command c;
    c.kind = Command::Kind::kPreempt;
    c.task_id = TaskId(e.job.id, e.gang->attempt, r.rank);
    c.signal = signal;
    c.grace = e.job.spec.checkpoint.preempt_grace;
    Push(r.node, std::move(c));
  }
}

Status Cluster::Impl::EvaluateLocked(JobId id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !it->second.gang) return Status::Ok();
  JobEntry& e = it->second;
  Gang& g = *e.gang;
  const Timestamp now = clock_->Now();
  const bool all_done =
      std::all_of(g.ranks.begin(), g.ranks.end(), [](const Rank& r) { return Done(r.state); });
  const Rank* failed = nullptr;
  for (const Rank& r : g.ranks) {
    if (r.state == RankState::kExited && (r.exit_code != 0 || r.signal != 0)) {
      failed = &r;
      break;
    }
  }
  auto describe = [&](const Rank& r) {
    std::string m = "rank " + std::to_string(r.rank) + " on " + r.node;
    if (r.signal != 0) {
      m += " killed by signal " + std::to_string(r.signal);
    } else {
      m += " exited with code " + std::to_string(r.exit_code);
    }
    if (!r.message.empty()) m += ": " + r.message;
    return m;
  };
  if (g.stopping == Stopping::kNone && e.job.state != JobState::kPreempting) {
    // A rank its agent stopped after losing contact (fenced): the node's work was
    // given up, as when the server gives it up itself (Tick).
    for (const Rank& r : g.ranks) {
      if (r.state != RankState::kGone) continue;
      TY_RETURN_IF_ERROR(
          StopGangLocked(e, Stopping::kLost,
                         "rank " + std::to_string(r.rank) + " on " + r.node + ": " + r.message));
      break;
    }
  }
  if (!all_done) {
    if (g.stopping == Stopping::kNone && e.job.state != JobState::kPreempting && failed) {
      g.failure_code = failed->signal ? -failed->signal : failed->exit_code;
      return StopGangLocked(e, Stopping::kFailed, describe(*failed));
    }
    const bool all_running = std::all_of(g.ranks.begin(), g.ranks.end(), [](const Rank& r) {
      return r.state == RankState::kRunning || r.state == RankState::kExited;
    });
    if (e.job.state == JobState::kStarting && all_running && g.stopping == Stopping::kNone) {
      Job next = e.job;
      TY_RETURN_IF_ERROR(next.TransitionTo(JobState::kRunning, now, "all ranks running"));
      store::WriteBatch b;
      b.PutJob(next);
      b.AppendEvent(id, now, "server", "Running",
                    "all " + std::to_string(g.ranks.size()) + " rank(s) running");
      TY_RETURN_IF_ERROR(CommitLocked(b));
      e.job = std::move(next);
    }
    return Status::Ok();
  }
  // Every rank is done: close the attempt.
  Job next = e.job;
  std::vector<std::pair<std::string, std::string>> events;  // kind, message
  const bool requeue = next.spec.requeue;
  if (next.state == JobState::kPreempting) {
    const Duration lost = next.LostWorkAt(now);
    TY_RETURN_IF_ERROR(next.EndAttempt(requeue ? JobState::kPending : JobState::kFailed, now,
                                       ExitReason::kPreempted, 0, "preempted: " + next.reason));
    events.emplace_back(requeue ? "Requeued" : "Failed",
                        "preempted; lost work " + FormatDuration(lost) +
                            (next.checkpoint ? "; resumes from " + next.checkpoint->path
                                             : "; no checkpoint, restarts from the beginning"));
  } else if (g.stopping == Stopping::kCancelled) {
    TY_RETURN_IF_ERROR(
        next.EndAttempt(JobState::kCancelled, now, ExitReason::kCancelled, 0, g.stop_message));
    events.emplace_back("Cancelled", "every rank stopped");
  } else if (g.stopping == Stopping::kLost || g.stopping == Stopping::kRequeue) {
    const bool lost = g.stopping == Stopping::kLost;
    const Duration lost_work = next.LostWorkAt(now);
    TY_RETURN_IF_ERROR(next.EndAttempt(requeue ? JobState::kPending : JobState::kFailed, now,
                                       lost ? ExitReason::kNodeLost : ExitReason::kPreempted, 0,
                                       g.stop_message));
    events.emplace_back(requeue ? "Requeued" : "Failed",
                        g.stop_message + "; lost work " + FormatDuration(lost_work));
  } else if (g.stopping == Stopping::kTimeLimit) {
    TY_RETURN_IF_ERROR(
        next.EndAttempt(JobState::kFailed, now, ExitReason::kTimeLimit, 0, g.stop_message));
    events.emplace_back("Failed", g.stop_message);
  } else if (failed || g.stopping == Stopping::kFailed) {
    // The first failure is the cause; later ones are usually the stop we sent.
    const bool first = g.stopping == Stopping::kFailed;
    const std::string why = first ? g.stop_message : describe(*failed);
    const int32_t code =
        first ? g.failure_code : (failed->signal ? -failed->signal : failed->exit_code);
    if (sched::MayRetry(next.spec.retry, next.retries)) {
      TY_RETURN_IF_ERROR(next.EndAttempt(JobState::kPending, now, ExitReason::kFailed, code, why));
      const Duration backoff = sched::RetryBackoff(next.spec.retry, next.retries);
      next.reason = why + "; retry " + std::to_string(next.retries) + " of " +
                    std::to_string(next.spec.retry.max) + " after " + FormatDuration(backoff);
      events.emplace_back("Retrying", next.reason);
    } else {
      if (next.state == JobState::kRunning || next.state == JobState::kStarting ||
          next.state == JobState::kLost || next.state == JobState::kPreempting) {
        TY_RETURN_IF_ERROR(next.EndAttempt(JobState::kFailed, now, ExitReason::kFailed, code, why));
      }
      events.emplace_back("Failed", why);
    }
  } else {
    if (next.state == JobState::kStarting) {
      TY_RETURN_IF_ERROR(next.TransitionTo(JobState::kRunning, now, "all ranks ran"));
    }
    TY_RETURN_IF_ERROR(
        next.EndAttempt(JobState::kSucceeded, now, ExitReason::kSucceeded, 0,
                        "all " + std::to_string(g.ranks.size()) + " rank(s) exited 0"));
    events.emplace_back("Succeeded", next.reason);
  }
  store::WriteBatch b;
  b.PutJob(next);
  for (auto& [kind, message] : events) b.AppendEvent(id, now, "server", kind, message);
  TY_RETURN_IF_ERROR(CommitLocked(b));
  e.job = std::move(next);
  e.gang.reset();
  if (IsTerminal(e.job.state)) {
    --unfinished_by_tenant_[e.job.spec.tenant];
    jobs_.erase(it);
  }
  dirty_ = true;
  cv_.notify_all();
  return Status::Ok();
}

// --- agents -------------------------------------------------------------------------------

std::pair<JobEntry*, Rank*> Cluster::Impl::FindRank(const std::string& node, const TaskStatus& t) {
  auto it = jobs_.find(t.job_id);
  if (it == jobs_.end() || !it->second.gang || it->second.gang->attempt != t.attempt) {
    return {nullptr, nullptr};
  }
  auto& ranks = it->second.gang->ranks;
  if (t.rank < 0 || static_cast<size_t>(t.rank) >= ranks.size()) return {nullptr, nullptr};
  Rank& r = ranks[static_cast<size_t>(t.rank)];
  if (r.node != node) return {nullptr, nullptr};
  return {&it->second, &r};
}

Result<RegisterReply> Cluster::Impl::Register(const Registration& reg) {
  std::lock_guard lk(mu_);
  const Timestamp now = clock_->Now();
  const std::string& name = reg.node.name;
  NodeEntry& n = nodes_[name];
  const bool known = !n.node.name.empty();
  const Node before = n.node;  // as stored
  Node incoming = reg.node;
  incoming.state = n.node.state;
  incoming.state_reason = n.node.state_reason;
  if (!known) incoming.state = NodeState::kNotReady;  // so that SyncNodeLocked stores it
  n.node = incoming;
  n.address = reg.address;
  n.simulated = reg.simulated;
  const bool was_unreachable = n.unreachable && !n.released;
  const Timestamp unreachable_at = n.unreachable_at;
  n.connected = true;
  n.unreachable = false;
  n.released = false;
  n.healthy = true;
  n.last_heartbeat = now;
  n.commands.clear();
  if (!known) {
    store::WriteBatch b;
    Node stored = n.node;
    stored.state = EffectiveState(n);
    stored.state_reason.clear();
    b.PutNode(stored);
    if (Status s = CommitLocked(b); !s.ok()) {
      n.connected = false;
      WakePollsLocked(n);
      nodes_.erase(name);
      return s;
    }
    n.node = std::move(stored);
  } else {
    store::WriteBatch b;
    Node stored = n.node;
    stored.state = EffectiveState(n);
    stored.state_reason = stored.state == NodeState::kReady ? "" : stored.state_reason;
    // Unchanged (an agent back after a blip, or every agent when a new leader starts):
    // nothing to write, so a thousand nodes re-registering cost no thousand commits.
    if (stored != before) {
      b.PutNode(stored);
      TY_RETURN_IF_ERROR(CommitLocked(b));
    }
    n.node = std::move(stored);
  }
  n.health_check.reset();
  TY_RETURN_IF_ERROR(ApplyHealthCheckLocked(n, reg.health_check));
  // A (re)started agent holds no faults: it gets the node's set if there is one. One
  // that holds faults this process never sent says so in its heartbeats (below).
  n.sent_faults.clear();
  SyncFaultsLocked(/*force_node_resend=*/false, name);
  RegisterReply reply;
  reply.heartbeat_interval = opt_.heartbeat_interval;
  reply.release_after = opt_.node_timeout + opt_.node_lost_grace;
  std::set<JobId> touched;
  std::set<std::string> reported;
  for (const TaskStatus& t : reg.tasks) {
    reported.insert(t.task_id);
    auto [e, r] = FindRank(name, t);
    if (e == nullptr || r->state == RankState::kGone) {
      if (t.state != TaskState::kExited) reply.stop.push_back(t.task_id);
      continue;
    }
    UpdateRankLocked(e->job.spec, *r, t);
    touched.insert(e->job.id);
    if (t.state != TaskState::kExited &&
        (e->gang->stopping != Stopping::kNone || e->job.state == JobState::kPreempting)) {
      // Still running but the gang is on its way out: stop it (again).
      reply.stop.push_back(t.task_id);
    }
  }
  // Ranks that should be here but the agent does not know: the agent lost them.
  for (auto& [id, e] : jobs_) {
    if (!e.gang) continue;
    for (Rank& r : e.gang->ranks) {
      if (r.node != name || Done(r.state)) continue;
      if (reported.contains(TaskId(id, e.gang->attempt, r.rank))) continue;
      if (r.state == RankState::kSent) {
        // Its start may not have reached this agent: send it again (starts are idempotent).
        Command c;
        c.kind = Command::Kind::kStart;
        c.start = BuildStart(e, r);
        r.sent_at = now;
        n.commands.push_back(std::move(c));
        continue;
      }
      r.state = RankState::kGone;
      r.message = "not running on " + name + " when its agent registered";
      touched.insert(id);
      if (e.gang->stopping == Stopping::kNone && e.job.state != JobState::kPreempting) {
        TY_RETURN_IF_ERROR(
            StopGangLocked(e, Stopping::kLost, "rank " + std::to_string(r.rank) + " " + r.message));
      }
    }
  }
  WakePollsLocked(n);  // starts sent again, above
  if (was_unreachable) {
    store::WriteBatch b;
    for (JobId id : touched) {
      const JobEntry& e = jobs_[id];
      if (e.gang->stopping != Stopping::kNone || e.job.state == JobState::kPreempting) continue;
      b.AppendEvent(id, now, "server", "NodeReachable",
                    "node " + name + " back after " + FormatDuration(now - unreachable_at) +
                        " NotReady; the job kept running");
    }
    if (!b.empty()) TY_RETURN_IF_ERROR(CommitLocked(b));
  }
  for (JobId id : touched) TY_RETURN_IF_ERROR(EvaluateLocked(id));
  dirty_ = true;
  cv_.notify_all();
  return reply;
}

Result<std::vector<std::string>> Cluster::Impl::HandleHeartbeat(const Heartbeat& hb) {
  std::lock_guard lk(mu_);
  auto nit = nodes_.find(hb.node);
  if (nit == nodes_.end() || !nit->second.connected) {
    return NotFound("unknown node " + hb.node);
  }
  NodeEntry& n = nit->second;
  const Timestamp now = clock_->Now();
  n.last_heartbeat = now;
  n.telemetry = hb.gpus;
  n.links = hb.links;
  n.disks = hb.disks;
  TY_RETURN_IF_ERROR(ApplyHealthCheckLocked(n, hb.health_check));
  {
    // The agent's active faults differ from what it was last sent (this server
    // restarted, or a command was lost): send its set again.
    std::set<std::string> sent, held(hb.faults.begin(), hb.faults.end());
    for (const FaultSpec& f : n.sent_faults) sent.insert(f.id);
    if (sent != held) SyncFaultsLocked(/*force_node_resend=*/true, hb.node);
  }
  if (n.healthy != hb.health_ok) {
    n.healthy = hb.health_ok;
    n.health_message = hb.health_message;
    TY_RETURN_IF_ERROR(SyncNodeLocked(n, "unhealthy: " + hb.health_message));
    dirty_ = true;
  }
  std::set<JobId> touched;
  for (const TaskStatus& t : hb.tasks) {
    auto [e, r] = FindRank(hb.node, t);
    if (e == nullptr) {
      if (t.state != TaskState::kExited) {
        Command c;
        c.kind = Command::Kind::kStop;
        c.task_id = t.task_id;
        c.grace = opt_.stop_grace;
        Push(hb.node, std::move(c));
      }
      continue;
    }
    if (r->state == RankState::kGone) continue;
    UpdateRankLocked(e->job.spec, *r, t);
    touched.insert(e->job.id);
  }
  for (JobId id : touched) TY_RETURN_IF_ERROR(EvaluateLocked(id));
  // An exit is acknowledged once its attempt's end is committed (or it belongs to
  // nothing the server knows), so a restarted server hears of it again otherwise.
  std::vector<std::string> ack;
  for (const TaskStatus& t : hb.tasks) {
    if (t.state != TaskState::kExited) continue;
    auto [e, r] = FindRank(hb.node, t);
    if (e == nullptr) ack.push_back(t.task_id);
  }
  return ack;
}

void Cluster::Impl::PollAsync(const std::string& node, Duration wait, PollDone done) {
  std::lock_guard lk(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end() || !it->second.connected) return done(NotFound("unknown node " + node));
  NodeEntry& n = it->second;
  if (!n.commands.empty() || shutdown_ || wait.count() <= 0) return done(TakeCommandsLocked(n));
  auto w = std::make_shared<PollWaiter>();
  w->node = node;
  w->done = std::move(done);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  const bool earliest = poll_deadlines_.empty() || deadline < poll_deadlines_.begin()->first;
  w->at = poll_deadlines_.emplace(deadline, w);
  n.polls.push_back(std::move(w));
  if (earliest) poll_timer_cv_.notify_all();
}

Result<std::vector<Command>> Cluster::Impl::Poll(const std::string& node, Duration wait) {
  std::promise<Result<std::vector<Command>>> answer;
  std::future<Result<std::vector<Command>>> got = answer.get_future();
  PollAsync(node, wait,
            [&answer](Result<std::vector<Command>> r) { answer.set_value(std::move(r)); });
  return got.get();
}

std::vector<Command> Cluster::Impl::TakeCommandsLocked(NodeEntry& n) {
  std::vector<Command> out(std::make_move_iterator(n.commands.begin()),
                           std::make_move_iterator(n.commands.end()));
  n.commands.clear();
  return out;
}

void Cluster::Impl::FinishPollLocked(NodeEntry& n,
                                     std::deque<std::shared_ptr<PollWaiter>>::iterator which,
                                     Result<std::vector<Command>> r) {
  std::shared_ptr<PollWaiter> w = std::move(*which);
  n.polls.erase(which);
  poll_deadlines_.erase(w->at);
  w->done(std::move(r));
}

void Cluster::Impl::WakePollsLocked(NodeEntry& n) {
  if (!n.connected) {
    while (!n.polls.empty()) {
      FinishPollLocked(n, n.polls.begin(), NotFound("unknown node " + n.node.name));
    }
    return;
  }
  // The oldest poll takes the commands; the others wait on, unless the server stops.
  if (!n.polls.empty() && !n.commands.empty()) {
    FinishPollLocked(n, n.polls.begin(), TakeCommandsLocked(n));
  }
  if (shutdown_) {
    while (!n.polls.empty()) FinishPollLocked(n, n.polls.begin(), TakeCommandsLocked(n));
  }
}

void Cluster::Impl::ExpirePolls() {
  std::unique_lock lk(mu_);
  while (!timer_stop_) {
    if (poll_deadlines_.empty()) {
      poll_timer_cv_.wait(lk);
    } else {
      // A copy: the entry may be gone by the time the wait reads it again.
      const auto next = poll_deadlines_.begin()->first;
      poll_timer_cv_.wait_until(lk, next);
    }
    const auto now = std::chrono::steady_clock::now();
    while (!poll_deadlines_.empty() && poll_deadlines_.begin()->first <= now) {
      std::shared_ptr<PollWaiter> w = poll_deadlines_.begin()->second;
      NodeEntry& n = nodes_.at(w->node);  // a node's polls end before it goes
      FinishPollLocked(n, std::find(n.polls.begin(), n.polls.end(), w), TakeCommandsLocked(n));
    }
  }
  // Polls still waiting now are dropped unanswered: the Cluster is being destroyed,
  // after its API server (which answers its own waiting requests when it stops).
}

bool Cluster::Impl::KnowsTask(const std::string& node, JobId job, int32_t attempt) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(job);
  if (it != jobs_.end()) {
    const auto& attempts = it->second.job.attempts;
    return attempt >= 0 && static_cast<size_t>(attempt) < attempts.size() &&
           std::find(attempts[static_cast<size_t>(attempt)].nodes.begin(),
                     attempts[static_cast<size_t>(attempt)].nodes.end(),
                     node) != attempts[static_cast<size_t>(attempt)].nodes.end();
  }
  // A finished job's last output may still arrive after it ended.
  return job > 0;
}

// --- the loop -------------------------------------------------------------------------------

Status Cluster::Impl::Tick() {
  std::lock_guard lk(mu_);
  const Timestamp now = clock_->Now();
  for (auto& [name, n] : nodes_) {
    const Duration silent = now - n.last_heartbeat;
    if (silent <= opt_.node_timeout) continue;
    if (n.connected) {
      n.connected = false;
      n.unreachable = true;
      n.unreachable_at = now;
      n.commands.clear();
      WakePollsLocked(n);
      TY_RETURN_IF_ERROR(SyncNodeLocked(n, "no heartbeat for " + FormatDuration(silent)));
      dirty_ = true;
      if (opt_.node_lost_grace.count() > 0) {
        // Its gangs keep running for the grace; say so on each.
        store::WriteBatch b;
        const std::string message =
            "node " + name + " not heard from for " + FormatDuration(silent) +
            "; the job keeps running there and is given up if the node is still silent in " +
            FormatDuration(opt_.node_lost_grace);
        const std::string& node = name;  // a lambda may not capture a structured binding (clang 14)
        for (auto& [id, e] : jobs_) {
          if (!e.gang) continue;
          if (std::any_of(e.gang->ranks.begin(), e.gang->ranks.end(),
                          [&](const Rank& r) { return r.node == node && !Done(r.state); })) {
            b.AppendEvent(id, now, "server", "NodeUnreachable", message);
          }
        }
        if (!b.empty()) TY_RETURN_IF_ERROR(CommitLocked(b));
      }
    }
    if (n.released || silent <= opt_.node_timeout + opt_.node_lost_grace) continue;
    n.released = true;
    const std::string why = "no heartbeat for " + FormatDuration(silent);
    for (auto& [id, e] : jobs_) {
      if (!e.gang) continue;
      bool hit = false;
      for (Rank& r : e.gang->ranks) {
        if (r.node == name && !Done(r.state)) {
          r.state = RankState::kGone;
          r.message = "node " + name + " lost: " + why;
          hit = true;
        }
      }
      if (!hit) continue;
      if (e.gang->stopping == Stopping::kNone && e.job.state != JobState::kPreempting) {
        TY_RETURN_IF_ERROR(StopGangLocked(e, Stopping::kLost, "node " + name + " lost: " + why));
      }
      TY_RETURN_IF_ERROR(EvaluateLocked(id));
    }
  }
  std::vector<JobId> over_limit;
  for (auto& [id, e] : jobs_) {
    if (!e.gang) continue;
    const Attempt* a = e.job.CurrentAttempt();
    if (e.gang->stopping == Stopping::kNone && e.job.state == JobState::kRunning && a &&
        e.job.spec.time_limit.count() > 0 && now - a->start_time > e.job.spec.time_limit) {
      over_limit.push_back(id);
    }
    for (Rank& r : e.gang->ranks) {
      if (r.state != RankState::kSent || now - r.sent_at < opt_.start_resend) continue;
      auto n = nodes_.find(r.node);
      if (n == nodes_.end() || !n->second.connected) continue;
      Command c;
      c.kind = Command::Kind::kStart;
      c.start = BuildStart(e, r);
      r.sent_at = now;
      Push(r.node, std::move(c));
    }
  }
  for (JobId id : over_limit) {
    JobEntry& e = jobs_[id];
    TY_RETURN_IF_ERROR(StopGangLocked(
        e, Stopping::kTimeLimit,
        std::string(kTimeLimitPrefix) + ": " + FormatDuration(e.job.spec.time_limit)));
  }
  // Expired faults, and comm-slow following gangs that started or stopped.
  SyncFaultsLocked(false, "");
  return Status::Ok();
}

std::unique_ptr<PassPlan::Data> Cluster::Impl::PlanPass() {
  auto plan = std::make_unique<PassPlan::Data>();
  plan->pass_lock = std::unique_lock(pass_mu_);
  sched::Snapshot& snap = plan->snap;
  {
    std::lock_guard lk(mu_);
    const bool dirty = dirty_;
    dirty_ = false;
    snap = SnapshotLocked(plan->pending);
    if (!dirty && last_pass_idle_ && snap.running.empty()) {
      // Only the clock moved; of what a pass reads, only retry backoffs depend on it
      // when nothing runs.
      const bool backoff_ended =
          std::any_of(plan->pending.begin(), plan->pending.end(), [&](const auto& v) {
            return v->job.eligible_time > last_pass_at_ && v->job.eligible_time <= snap.now;
          });
      if (!backoff_ended) plan->skipped = true;
    }
  }
  if (!plan->skipped && plan->pending.empty()) {
    last_pass_at_ = snap.now;
    last_pass_idle_ = true;
    plan->skipped = true;
  }
  if (plan->skipped) return plan;
  // The Pending part of the snapshot: the last pass's, with what changed since copied
  // in (moving the unchanged entries costs no allocation; copying 100,000 does).
  snap.pending.reserve(plan->pending.size());
  size_t k = 0;
  for (const auto& v : plan->pending) {
    while (k < last_views_.size() && last_views_[k]->job.id < v->job.id) ++k;
    if (k < last_views_.size() && last_views_[k] == v) {
      snap.pending.push_back(std::move(last_pending_[k]));
    } else {
      snap.pending.push_back(v->job);
    }
  }
  plan->decisions = sched::Schedule(snap, opt_.policy);
  // Kept for the next pass; ApplyPass checks against the views in plan->pending.
  last_pending_ = std::move(snap.pending);
  last_views_ = plan->pending;
  snap.pending.clear();
  return plan;
}

Result<PassStats> Cluster::Impl::ApplyPass(PassPlan::Data& plan) {
  if (plan.skipped) return PassStats{};
  last_pass_at_ = plan.snap.now;
  std::lock_guard lk(mu_);
  Result<PassStats> stats = ApplyLocked(plan.snap, plan.decisions, plan.pending);
  last_pass_idle_ = stats.ok() && stats->binds == 0 && stats->preemptions == 0;
  return stats;
}

Result<PassStats> Cluster::Impl::ApplyLocked(
    const sched::Snapshot& snap, const sched::Decisions& d,
    const std::vector<std::shared_ptr<const PendingView>>& pending) {
  const Timestamp now = snap.now;
  PassStats stats;
  // The view each decision was made on, by job id (`pending` ascends by id).
  auto seen = [&](JobId id) -> const PendingView* {
    auto it = std::lower_bound(pending.begin(), pending.end(), id,
                               [](const auto& v, JobId x) { return v->job.id < x; });
    return it != pending.end() && (*it)->job.id == id ? it->get() : nullptr;
  };
  // Still Pending, and unchanged since the snapshot (not held, cancelled or retried).
  auto still_pending = [&](JobId id) -> JobEntry* {
    auto it = jobs_.find(id);
    const PendingView* v = seen(id);
    if (it == jobs_.end() || v == nullptr || it->second.job.state != JobState::kPending ||
        it->second.job.held || !(KeyOf(it->second.job) == v->key)) {
      return nullptr;
    }
    return &it->second;
  };
  // GPUs held by open attempts now, per node, so that a bind never lands on one.
  // Gathered at the first bind: a pass that binds nothing (a flood of submissions
  // waiting for GPUs) does not walk every job for it.
  std::map<std::string, std::set<int>> used;
  bool used_gathered = false;
  auto placeable = [&](const sched::Bind& bind) {
    if (!used_gathered) {
      used_gathered = true;
      for (const auto& [id, e] : jobs_) {
        if (const Attempt* a = e.job.CurrentAttempt()) {
          for (size_t r = 0; r < a->nodes.size() && r < a->gpus.size(); ++r) {
            used[a->nodes[r]].insert(a->gpus[r].begin(), a->gpus[r].end());
          }
        }
      }
    }
    std::map<std::string, std::set<int>> taking;
    for (const auto& p : bind.replicas) {
      auto n = nodes_.find(p.node);
      if (n == nodes_.end() || EffectiveState(n->second) != NodeState::kReady) return false;
      for (int g : p.gpus) {
        const auto& gpus = n->second.node.gpus;
        const bool exists =
            std::any_of(gpus.begin(), gpus.end(), [&](const Gpu& x) { return x.index == g; });
        if (!exists || used[p.node].contains(g) || !taking[p.node].insert(g).second) return false;
      }
    }
    for (auto& [node, gpus] : taking) used[node].insert(gpus.begin(), gpus.end());
    return true;
  };
  store::WriteBatch b;
  std::vector<Job> bound;
  for (const sched::Bind& bind : d.binds) {
    JobEntry* e = still_pending(bind.job);
    if (e == nullptr || !placeable(bind)) {
      dirty_ = true;  // decided on a state that has moved on: look again
      continue;
    }
    Job next = e->job;
    std::vector<std::string> nodes;
    std::vector<std::vector<int>> gpus;
    for (const auto& p : bind.replicas) {
      nodes.push_back(p.node);
      gpus.push_back(p.gpus);
    }
    TY_RETURN_IF_ERROR(next.StartAttempt(now, nodes));
    next.attempts.back().gpus = std::move(gpus);
    next.reason = "starting " + std::to_string(bind.replicas.size()) + " replica(s)";
    b.PutJob(next);
    b.AppendEvent(next.id, now, "scheduler", "Bound",
                  "attempt " + std::to_string(next.attempts.back().index) + " on " +
                      DescribePlacement(bind.replicas));
    bound.push_back(std::move(next));
  }
  std::vector<const sched::Preempt*> preempts;
  std::vector<Job> preempted;
  for (const sched::Preempt& p : d.preemptions) {
    auto it = jobs_.find(p.job);
    if (it == jobs_.end() || it->second.job.state != JobState::kRunning || !it->second.gang ||
        it->second.gang->stopping != Stopping::kNone || still_pending(p.for_job) == nullptr) {
      dirty_ = true;
      continue;
    }
    Job next = it->second.job;
    const std::string why = "preempted for job " + std::to_string(p.for_job) + ": " + p.reason;
    TY_RETURN_IF_ERROR(next.TransitionTo(JobState::kPreempting, now, why));
    b.PutJob(next);
    b.AppendEvent(next.id, now, "scheduler", "Preempting",
                  why + "; work since the last checkpoint so far: " +
                      FormatDuration(it->second.job.LostWorkAt(now)));
    preempted.push_back(std::move(next));
    preempts.push_back(&p);
  }
  TY_RETURN_IF_ERROR(CommitLocked(b));
  // Committed: now act on it.
  for (Job& job : bound) {
    JobEntry& e = jobs_[job.id];
    e.job = std::move(job);
    e.pending_view.reset();
    Gang g;
    g.attempt = e.job.attempts.back().index;
    g.ranks = MakeRanks(e.job, e.job.attempts.back());
    e.gang = std::move(g);
    for (Rank& r : e.gang->ranks) {
      Command c;
      c.kind = Command::Kind::kStart;
      c.start = BuildStart(e, r);
      r.state = RankState::kSent;
      r.sent_at = now;
      Push(r.node, std::move(c));
    }
    ++stats.binds;
  }
  for (Job& job : preempted) {
    JobEntry& e = jobs_[job.id];
    e.job = std::move(job);
    SendPreemptNotices(e);
    ++stats.preemptions;
  }
  for (const sched::Waiting& w : d.waiting) {
    auto it = jobs_.find(w.job);
    if (it != jobs_.end() && it->second.job.state == JobState::kPending) {
      it->second.job.reason = it->second.job.held ? it->second.job.reason : w.reason.str();
    }
    ++stats.waiting;
  }
  for (const sched::Infeasible& inf : d.infeasible) {
    auto it = jobs_.find(inf.job);
    // Nodes come and go, so "never on this cluster" is only "not on the nodes we
    // have now": the job stays Pending and says why.
    if (it != jobs_.end() && it->second.job.state == JobState::kPending) {
      it->second.job.reason = "cannot run on the current nodes: " + inf.reason;
    }
    ++stats.infeasible;
  }
  cv_.notify_all();
  return stats;
}

// --- Cluster ----------------------------------------------------------------------------------

Result<std::unique_ptr<Cluster>> Cluster::Open(store::Store* store, const Clock* clock,
                                               ClusterOptions options) {
  TY_RETURN_IF_ERROR(sched::ValidatePolicy(options.policy));
  auto impl = std::make_unique<Impl>(store, clock, std::move(options));
  TY_RETURN_IF_ERROR(impl->Load());
  return std::unique_ptr<Cluster>(new Cluster(std::move(impl)));
}

Cluster::Cluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Cluster::~Cluster() = default;

Result<std::vector<JobId>> Cluster::Submit(std::vector<JobSpec> specs, const std::string& actor,
                                           SubmitOptions options) {
  return impl_->Submit(std::move(specs), actor, options);
}
Status Cluster::EnsureTenant(const std::string& name, const std::string& actor) {
  return impl_->EnsureTenant(name, actor);
}
Result<JobView> Cluster::GetJob(JobId id) { return impl_->GetJob(id); }
Result<store::JobPage> Cluster::ListJobs(const ListJobsRequest& r) { return impl_->ListJobs(r); }
Result<store::EventPage> Cluster::ListEvents(JobId id, int64_t after_seq, int limit) {
  return impl_->ListEvents(id, after_seq, limit);
}
Status Cluster::Cancel(JobId id, const std::string& actor) { return impl_->Cancel(id, actor); }
Status Cluster::Hold(JobId id, const std::string& actor) { return impl_->SetHeld(id, true, actor); }
Status Cluster::Release(JobId id, const std::string& actor) {
  return impl_->SetHeld(id, false, actor);
}
Status Cluster::ReportCheckpoint(JobId id, const CheckpointReport& report,
                                 const std::string& actor) {
  return impl_->ReportCheckpoint(id, report, actor);
}
Status Cluster::SendProfile(JobId id, int32_t attempt, const std::vector<int32_t>& ranks,
                            const std::string& profile_id, int32_t steps) {
  return impl_->SendProfile(id, attempt, ranks, profile_id, steps);
}
std::vector<NodeView> Cluster::ListNodes() { return impl_->ListNodes(); }
Result<NodeView> Cluster::GetNode(const std::string& name) { return impl_->GetNode(name); }
Status Cluster::SetNodeAdminState(const std::string& name, NodeState state,
                                  const std::string& actor, const std::string& reason) {
  return impl_->SetNodeAdminState(name, state, actor, reason);
}
Status Cluster::RequeueExcluding(JobId id, const std::string& node, const std::string& why,
                                 const std::string& actor) {
  return impl_->RequeueExcluding(id, node, why, actor);
}
Status Cluster::RequestCheckpoint(JobId id, const std::string& why, const std::string& actor) {
  return impl_->RequestCheckpoint(id, why, actor);
}
Result<InjectedFault> Cluster::InjectFault(const std::string& node, const std::string& kind,
                                           int gpu, Duration duration, const std::string& actor) {
  return impl_->InjectFault(node, kind, gpu, duration, actor);
}
Result<int> Cluster::ClearFaults(const std::string& node, const std::string& id) {
  return impl_->ClearFaults(node, id);
}
std::vector<InjectedFault> Cluster::ListFaults() { return impl_->ListFaults(); }
std::vector<QueueView> Cluster::ListQueues() { return impl_->ListQueues(); }
std::vector<Tenant> Cluster::ListTenants() { return impl_->ListTenants(); }
std::vector<PriorityClass> Cluster::ListPriorityClasses() { return impl_->ListPriorityClasses(); }
Result<Tenant> Cluster::SetTenantQuota(const std::string& name, int64_t guaranteed, int64_t limit,
                                       const std::string& actor) {
  return impl_->SetTenantQuota(name, guaranteed, limit, actor);
}
// The store keeps no author for queues: the audit log (server/api.cc) records who.
Result<Queue> Cluster::PutQueue(const Queue& queue, const std::string& /*actor*/) {
  return impl_->PutQueue(queue);
}
Status Cluster::DeleteQueue(const std::string& tenant, const std::string& name,
                            const std::string& /*actor*/) {
  return impl_->DeleteQueue(tenant, name);
}
Result<RegisterReply> Cluster::Register(const Registration& r) { return impl_->Register(r); }
Result<std::vector<std::string>> Cluster::HandleHeartbeat(const Heartbeat& h) {
  return impl_->HandleHeartbeat(h);
}
Result<std::vector<Command>> Cluster::Poll(const std::string& node, Duration wait) {
  return impl_->Poll(node, wait);
}
void Cluster::PollAsync(const std::string& node, Duration wait, PollDone done) {
  impl_->PollAsync(node, wait, std::move(done));
}
bool Cluster::KnowsTask(const std::string& node, JobId job, int32_t attempt) {
  return impl_->KnowsTask(node, job, attempt);
}
Status Cluster::Tick() { return impl_->Tick(); }
Result<PassStats> Cluster::SchedulePass() { return ApplyPass(PlanPass()); }
PassPlan Cluster::PlanPass() { return PassPlan(impl_->PlanPass()); }
Result<PassStats> Cluster::ApplyPass(PassPlan plan) {
  if (!plan.data_) return InvalidArgument("ApplyPass: the plan was moved from");
  Result<PassStats> stats = impl_->ApplyPass(*plan.data_);
  plan.data_.reset();  // ends the pass (releases its lock) now
  return stats;
}
bool Cluster::NeedsPass() { return impl_->NeedsPass(); }
void Cluster::WaitForWork(Duration wait) { impl_->WaitForWork(wait); }
void Cluster::Shutdown() { impl_->Shutdown(); }
sched::Snapshot Cluster::BuildSnapshot() { return impl_->BuildSnapshot(); }
ClusterMetrics Cluster::Metrics() { return impl_->Metrics(); }
void Cluster::ObservePassDuration(double seconds) { impl_->ObservePassDuration(seconds); }

}  // namespace trainyard::server
