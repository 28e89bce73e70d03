// The Cluster's changes: how a lifecycle event becomes durable (Mutate, the Committer
// and what it publishes), users' requests, tenancy, and the scheduling loop. Agents,
// faults and polls are in cluster_agents.cc; reads in cluster_views.cc.
#include "server/cluster.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "core/names.h"
#include "core/spec_paths.h"
#include "sched/contract.h"
#include "sched/schedule.h"
#include "server/cluster_impl.h"

namespace trainyard::server {
namespace {

// Job ids reserved in the store at a time: a submission then commits in one
// transaction, not two. Ids of a block not used before a crash are skipped, never
// reused.
constexpr int64_t kJobIdBlock = 4096;

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

lifecycle::LifecycleOptions LifecycleOptionsOf(const ClusterOptions& o) {
  lifecycle::LifecycleOptions l;
  l.policy = o.policy;
  l.node_timeout = o.node_timeout;
  l.node_lost_grace = o.node_lost_grace;
  l.stop_grace = o.stop_grace;
  l.start_resend = o.start_resend;
  l.paths = PathPolicyOf(o);
  l.auto_create_queues = o.auto_create_queues;
  l.max_unfinished_jobs_per_tenant = o.max_unfinished_jobs_per_tenant;
  return l;
}

std::string JobName(JobId id) { return "job " + std::to_string(id); }

// The lifecycle's answer for a job it does not hold.
bool IsNotActive(const Status& s) { return s.code() == StatusCode::kNotFound; }

}  // namespace

PassPlan::PassPlan(std::unique_ptr<Data> data) : data_(std::move(data)) {}
PassPlan::PassPlan(PassPlan&&) noexcept = default;
PassPlan& PassPlan::operator=(PassPlan&&) noexcept = default;
PassPlan::~PassPlan() = default;

Cluster::Impl::Impl(store::Store* store, const Clock* clock, ClusterOptions options)
    : store_(store),
      clock_(clock),
      opt_(std::move(options)),
      state_(LifecycleOptionsOf(opt_)),
      committer_(store, [this](const Status& status, const store::WriteBatch& group, uint64_t first,
                               uint64_t last) { OnPublished(status, group, first, last); }) {
  poll_timer_ = std::thread([this] { ExpirePolls(); });
}

Cluster::Impl::~Impl() {
  {
    std::lock_guard lk(mu_);
    timer_stop_ = true;
  }
  poll_timer_cv_.notify_all();
  poll_timer_.join();
}

// --- loading and changes ----------------------------------------------------------------

Status Cluster::Impl::Load() {
  TY_ASSIGN_OR_RETURN(store::StoredState stored, store_->LoadAll());
  std::lock_guard lk(mu_);
  store::WriteBatch seed = lifecycle::Load(state_, std::move(stored), clock_->Now());
  // Before anything acts on it (no other thread runs yet).
  if (!seed.empty()) TY_RETURN_IF_ERROR(store_->Commit(seed));
  return Status::Ok();
}

Status Cluster::Impl::Reload() {
  TY_ASSIGN_OR_RETURN(store::StoredState stored, store_->LoadAll());
  store::WriteBatch seed = lifecycle::Load(state_, std::move(stored), clock_->Now());
  if (!seed.empty()) TY_RETURN_IF_ERROR(store_->Commit(seed));
  // Nodes come back as their agents register again; their polls are answered now.
  for (auto& [name, x] : extras_) {
    x.sent_faults.clear();
    WakePollsLocked(name);
  }
  wake_at_.clear();
  published_seq_ = next_seq_ - 1;
  return Status::Ok();
}

uint64_t Cluster::Impl::EnqueueLocked(lifecycle::Effects& fx) {
  for (const std::string& node : fx.disconnected) WakePollsLocked(node);
  if (fx.batch.empty() && fx.nodes_with_commands.empty()) return 0;
  const uint64_t seq = next_seq_++;
  committer_.Enqueue(seq, std::move(fx.batch));
  fx.batch = store::WriteBatch();
  if (!fx.nodes_with_commands.empty()) wake_at_[seq] = fx.nodes_with_commands;
  return seq;
}

Result<lifecycle::Effects> Cluster::Impl::Mutate(
    const std::function<Result<lifecycle::Effects>(Timestamp now)>& change) {
  uint64_t seq = 0;
  lifecycle::Effects fx;
  {
    std::lock_guard lk(mu_);
    if (!broken_.ok()) return broken_;
    // Commands the change queues wait for its commit (QueuedCommand::after_seq).
    state_.apply_seq = next_seq_;
    Result<lifecycle::Effects> r = change(clock_->Now());
    if (!r.ok()) {
      if (r.status().code() != StatusCode::kInternal) return r.status();
      // A broken invariant after changes began: what is in memory can no longer be
      // trusted. Once what was queued before is durable, rebuild from the store.
      broken_ = Unavailable("the control plane is rebuilding its state after an error: " +
                            r.status().message());
      std::fprintf(stderr, "trainyard: %s\n", broken_.message().c_str());
      const uint64_t before = next_seq_ - 1;
      mu_.unlock();
      if (before > 0) (void)committer_.Wait(before);
      mu_.lock();
      if (Status s = Reload(); !s.ok()) {
        std::fprintf(stderr, "trainyard: rebuilding the state failed: %s\n", s.ToString().c_str());
      } else {
        broken_ = Status::Ok();
      }
      cv_.notify_all();
      return r.status();
    }
    fx = std::move(*r);
    seq = EnqueueLocked(fx);
  }
  if (fx.may_schedule) cv_.notify_all();
  if (seq != 0) TY_RETURN_IF_ERROR(committer_.Wait(seq));
  return fx;
}

void Cluster::Impl::OnPublished(const Status& status, const store::WriteBatch& group,
                                uint64_t /*first*/, uint64_t last) {
  if (status.ok()) {
    CountCommitted(group);
    std::lock_guard lk(mu_);
    published_seq_ = std::max(published_seq_, last);
    // The commands of the changes now durable may be delivered.
    while (!wake_at_.empty() && wake_at_.begin()->first <= published_seq_) {
      for (const std::string& node : wake_at_.begin()->second) WakePollsLocked(node);
      wake_at_.erase(wake_at_.begin());
    }
    return;
  }
  // What is in memory went beyond what the store holds: fail the changes built on it
  // and rebuild from the store, refusing new changes until then.
  std::lock_guard lk(mu_);
  committer_.DrainAfterFailure();
  std::fprintf(stderr, "trainyard: a commit failed (%s); rebuilding the state from the store\n",
               status.ToString().c_str());
  if (Status s = Reload(); !s.ok()) {
    broken_ = Unavailable("the control plane could not rebuild its state after a failed commit: " +
                          s.message());
    std::fprintf(stderr, "trainyard: %s\n", broken_.message().c_str());
  } else {
    broken_ = Status::Ok();
  }
  cv_.notify_all();
}

void Cluster::Impl::CountCommitted(const store::WriteBatch& batch) {
  std::map<JobId, const Job*> jobs;
  for (const auto& op : batch.ops()) {
    if (const auto* put = std::get_if<store::WriteBatch::PutJobOp>(&op)) {
      jobs[put->job.id] = &put->job;
    }
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

Status Cluster::Impl::ExplainInactive(JobId id, const std::function<Status(JobState)>& finished) {
  // The job may have finished in a change whose commit is still under way: read the
  // store once everything applied so far is in it.
  uint64_t last = 0;
  {
    std::lock_guard lk(mu_);
    last = next_seq_ - 1;
  }
  if (last > 0) (void)committer_.Wait(last);
  TY_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
  if (!job) return NotFound(JobName(id) + " does not exist");
  if (!IsTerminal(job->state)) {
    return Unavailable(JobName(id) + " is being reloaded; try again");
  }
  return finished(job->state);
}

// --- users ------------------------------------------------------------------------------

Result<std::vector<JobId>> Cluster::Impl::Submit(std::vector<JobSpec> specs,
                                                 const std::string& actor, SubmitOptions options) {
  if (specs.empty()) return InvalidArgument("submit: no job given");
  const int64_t n = static_cast<int64_t>(specs.size());
  lifecycle::SubmitJobs ev;
  ev.specs = std::move(specs);
  ev.actor = actor;
  ev.may_create_queues = options.may_create_queues;
  ev.audit = std::move(options.audit);
  ev.run_as_uid = options.run_as_uid;
  ev.run_as_gid = options.run_as_gid;
  for (;;) {
    {
      // Ids come from a block reserved ahead of time; refilling it is store I/O, done
      // under id_mu_ alone.
      std::lock_guard ids(id_mu_);
      if (reserved_end_ - reserved_next_ < n) {
        const int64_t block = std::max(n, kJobIdBlock);
        TY_ASSIGN_OR_RETURN(JobId first, store_->ReserveJobIds(block));
        reserved_next_ = first;
        reserved_end_ = first + block;
      }
    }
    bool short_of_ids = false;
    Result<lifecycle::Effects> fx = Mutate([&](Timestamp now) -> Result<lifecycle::Effects> {
      // Taken under mu_ so that ids rise in the order changes commit.
      std::lock_guard ids(id_mu_);
      if (reserved_end_ - reserved_next_ < n) {
        short_of_ids = true;  // others took them since: refill and try again
        return lifecycle::Effects{};
      }
      ev.first_id = reserved_next_;
      Result<lifecycle::Effects> r = lifecycle::Apply(state_, ev, now);
      if (r.ok()) reserved_next_ += n;
      return r;
    });
    if (short_of_ids) continue;
    if (!fx.ok()) return fx.status();
    return std::move(fx->ids);
  }
}

Status Cluster::Impl::EnsureTenant(const std::string& name, const std::string& actor) {
  return MutateEvent(lifecycle::EnsureTenant{name, actor}).status();
}

Status Cluster::Impl::Cancel(JobId id, const std::string& actor) {
  Status s = MutateEvent(lifecycle::CancelJob{id, actor}).status();
  if (!IsNotActive(s)) return s;
  return ExplainInactive(id, [&](JobState state) {
    return FailedPrecondition(JobName(id) +
                              " has already finished: " + std::string(JobStateName(state)));
  });
}

Status Cluster::Impl::SetHeld(JobId id, bool held, const std::string& actor) {
  Status s = MutateEvent(lifecycle::HoldJob{id, held, actor}).status();
  if (!IsNotActive(s)) return s;
  return ExplainInactive(id, [&](JobState state) {
    return FailedPrecondition("cannot " + std::string(held ? "hold" : "release") + " " +
                              JobName(id) + ": it is " + std::string(JobStateName(state)));
  });
}

Status Cluster::Impl::ReportCheckpoint(JobId id, const CheckpointReport& report,
                                       const std::string& actor) {
  Status s = MutateEvent(lifecycle::ReportCheckpoint{id, report.path, report.step,
                                                     report.write_duration, actor})
                 .status();
  if (!IsNotActive(s)) return s;
  return ExplainInactive(id, [&](JobState state) {
    return FailedPrecondition(JobName(id) + " has finished (" + std::string(JobStateName(state)) +
                              "); checkpoints are reported while it runs");
  });
}

Status Cluster::Impl::SendProfile(JobId id, int32_t attempt, const std::vector<int32_t>& ranks,
                                  const std::string& profile_id, int32_t steps) {
  Status s = MutateEvent(lifecycle::SendProfile{id, attempt, ranks, profile_id, steps}).status();
  if (!IsNotActive(s)) return s;
  return ExplainInactive(id, [&](JobState state) {
    return FailedPrecondition(JobName(id) + " has finished (" + std::string(JobStateName(state)) +
                              "); only a Running job can be profiled");
  });
}

Status Cluster::Impl::SetNodeAdminState(const std::string& name, NodeState state,
                                        const std::string& actor, const std::string& reason) {
  return MutateEvent(lifecycle::SetNodeState{name, state, actor, reason}).status();
}

Status Cluster::Impl::RequeueExcluding(JobId id, const std::string& node, const std::string& why,
                                       const std::string& actor) {
  return MutateEvent(lifecycle::RequeueExcluding{id, node, why, actor}).status();
}

Status Cluster::Impl::RequestCheckpoint(JobId id, const std::string& why,
                                        const std::string& actor) {
  return MutateEvent(lifecycle::RequestCheckpoint{id, why, actor}).status();
}

// --- tenancy ----------------------------------------------------------------------------

Result<Tenant> Cluster::Impl::SetTenantQuota(const std::string& name, int64_t guaranteed,
                                             int64_t limit, const std::string& actor) {
  TY_ASSIGN_OR_RETURN(lifecycle::Effects fx,
                      MutateEvent(lifecycle::SetTenantQuota{name, guaranteed, limit, actor}));
  if (!fx.tenant) return Internal("tenant quota: the lifecycle returned no tenant");
  return std::move(*fx.tenant);
}

Result<Tenant> Cluster::Impl::SetTenantIdentity(const std::string& name, int64_t uid, int64_t gid,
                                                std::optional<bool> allow_root,
                                                const std::string& actor) {
  TY_ASSIGN_OR_RETURN(lifecycle::Effects fx,
                      MutateEvent(lifecycle::SetTenantIdentity{name, uid, gid, allow_root, actor}));
  if (!fx.tenant) return Internal("tenant identity: the lifecycle returned no tenant");
  return std::move(*fx.tenant);
}

Result<Queue> Cluster::Impl::PutQueue(const Queue& queue) {
  TY_ASSIGN_OR_RETURN(lifecycle::Effects fx, MutateEvent(lifecycle::PutQueue{queue}));
  if (!fx.queue) return Internal("put queue: the lifecycle returned no queue");
  return std::move(*fx.queue);
}

Status Cluster::Impl::DeleteQueue(const std::string& tenant, const std::string& name) {
  return MutateEvent(lifecycle::DeleteQueue{tenant, name}).status();
}

// --- the loop ---------------------------------------------------------------------------

std::unique_ptr<PassPlan::Data> Cluster::Impl::PlanPass() {
  auto plan = std::make_unique<PassPlan::Data>();
  plan->pass_lock = std::unique_lock(pass_mu_);
  {
    std::lock_guard lk(mu_);
    const bool dirty = state_.dirty;
    state_.dirty = false;
    plan->now = clock_->Now();
    // What changed since the last pass is copied over; the pass runs on the copy.
    state_.snapshot.SyncCopy(pass_copy_, plan->now);
    const sched::Snapshot& snap = pass_copy_.snapshot();
    if (!dirty && last_pass_idle_ && snap.running.empty()) {
      // Only the clock moved; of what a pass reads, only retry backoffs depend on it
      // when nothing runs.
      const bool backoff_ended =
          std::any_of(snap.pending.begin(), snap.pending.end(), [&](const sched::PendingJob& p) {
            return p.eligible_time > last_pass_at_ && p.eligible_time <= plan->now;
          });
      if (!backoff_ended) plan->skipped = true;
    }
  }
  const sched::Snapshot& snap = pass_copy_.snapshot();
  if (!plan->skipped && snap.pending.empty()) {
    last_pass_at_ = plan->now;
    last_pass_idle_ = true;
    plan->skipped = true;
  }
  if (plan->skipped) return plan;
  plan->decisions = pass_copy_.index() != nullptr
                        ? sched::Schedule(snap, opt_.policy, *pass_copy_.index())
                        : sched::Schedule(snap, opt_.policy);
#ifndef NDEBUG
  // Debug builds check every pass against the decision contract (sched/contract.h).
  for (const sched::Violation& v : sched::CheckDecisions(snap, opt_.policy, plan->decisions)) {
    std::fprintf(stderr, "trainyard: scheduler decision contract violated: %s\n",
                 v.message.c_str());
  }
#endif
  if (opt_.on_pass) opt_.on_pass(snap, plan->decisions);
  return plan;
}

Result<PassStats> Cluster::Impl::ApplyPass(PassPlan::Data& plan) {
  if (plan.skipped) return PassStats{};
  last_pass_at_ = plan.now;
  // Each decision is checked against the state as it is now (lifecycle.h): the pass ran
  // on pass_copy_ without mu_.
  Result<lifecycle::Effects> fx = Mutate([&](Timestamp) {
    return lifecycle::ApplyDecisions(state_, plan.decisions, &pass_copy_, plan.now);
  });
  if (!fx.ok()) {
    last_pass_idle_ = false;
    return fx.status();
  }
  last_pass_idle_ = fx->stats.binds == 0 && fx->stats.preemptions == 0;
  return fx->stats;
}

bool Cluster::Impl::NeedsPass() {
  std::lock_guard lk(mu_);
  return state_.dirty;
}

void Cluster::Impl::WaitForWork(Duration wait) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, wait, [&] { return state_.dirty || shutdown_; });
}

void Cluster::Impl::Shutdown() {
  {
    std::lock_guard lk(mu_);
    shutdown_ = true;
    for (const auto& [name, x] : extras_) WakePollsLocked(name);
  }
  cv_.notify_all();
}

// --- Cluster ----------------------------------------------------------------------------

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
Result<Tenant> Cluster::SetTenantIdentity(const std::string& name, int64_t uid, int64_t gid,
                                          std::optional<bool> allow_root,
                                          const std::string& actor) {
  return impl_->SetTenantIdentity(name, uid, gid, allow_root, actor);
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
