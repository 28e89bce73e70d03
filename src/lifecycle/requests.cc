// What users ask of jobs (submit, cancel, hold, checkpoints, profiles, requeue) and of
// tenancy (tenants, quotas, queues).
#include <algorithm>
#include <set>

#include "core/names.h"
#include "lifecycle/internal.h"

namespace trainyard::lifecycle::internal {
namespace {

std::string JobName(JobId id) { return "job " + std::to_string(id); }

// NotFound for a job the state does not hold: it never existed or it has finished
// (the server tells which from its store).
Status NotActive(JobId id) { return NotFound(JobName(id) + " is not active"); }

std::string QueueKey(const std::string& tenant, const std::string& name) {
  return tenant + "/" + name;
}

// Shows the scheduler the queues as they are now.
void SyncQueues(Ctx& c) {
  std::vector<Queue> queues;
  queues.reserve(c.s.queues.size());
  for (const auto& [key, q] : c.s.queues) queues.push_back(q);
  c.s.snapshot.SetQueues(std::move(queues));
  c.Dirty();
}

// The store reads a spec back through ParseSpec: only a valid, normalised spec reads
// back equal to what was written. Checked before anything changes, so that a spec
// the store would refuse is refused here, by itself.
Status CheckStorable(const JobSpec& spec) {
  std::vector<Diagnostic> problems = ValidateSpec(spec, SpecOrigin::kStored);
  if (!problems.empty()) {
    std::string msg;
    for (const Diagnostic& d : problems) msg += (msg.empty() ? "" : "; ") + d.ToString();
    return InvalidArgument(std::move(msg));
  }
  JobSpec normal = spec;
  NormalizeSpec(normal);
  if (!(normal == spec)) {
    return InvalidArgument("spec: is not normalised; pass it through NormalizeSpec first");
  }
  return Status::Ok();
}

}  // namespace

Status ApplySubmit(Ctx& c, const SubmitJobs& ev) {
  ClusterState& s = c.s;
  const LifecycleOptions& o = s.options;
  if (ev.specs.empty()) return InvalidArgument("submit: no job given");
  for (const JobSpec& spec : ev.specs) {
    std::vector<Diagnostic> bad = CheckSpecPaths(spec, o.paths);
    if (!bad.empty()) {
      std::string msg;
      for (const Diagnostic& d : bad) msg += (msg.empty() ? "" : "; ") + d.ToString();
      return InvalidArgument(std::move(msg));
    }
    if (o.record) TY_RETURN_IF_ERROR(CheckStorable(spec));
  }
  std::map<std::string, int64_t> mine;
  for (const JobSpec& spec : ev.specs) ++mine[spec.tenant];
  for (const auto& [tenant, n] : mine) {
    auto have = s.unfinished_by_tenant.find(tenant);
    const int64_t total = (have == s.unfinished_by_tenant.end() ? 0 : have->second) + n;
    if (total > o.max_unfinished_jobs_per_tenant) {
      return ResourceExhausted("tenant " + QuoteForMessage(tenant) + " may have at most " +
                               std::to_string(o.max_unfinished_jobs_per_tenant) +
                               " unfinished jobs; this submission would make it " +
                               std::to_string(total));
    }
  }
  for (const JobSpec& spec : ev.specs) {
    if (!o.check_tenancy) break;
    if (!s.classes.contains(spec.priority)) {
      std::string valid;
      for (const auto& [n, pc] : s.classes) valid += (valid.empty() ? "" : ", ") + n;
      return InvalidArgument("priority: no priority class " + QuoteForMessage(spec.priority) +
                             "; valid: " + valid);
    }
    if (!s.queues.contains({spec.tenant, spec.queue}) &&
        (!o.auto_create_queues || !ev.may_create_queues)) {
      return InvalidArgument("queue: tenant " + QuoteForMessage(spec.tenant) + " has no queue " +
                             QuoteForMessage(spec.queue) + "; a cluster-admin creates queues");
    }
  }
  bool queues_added = false;
  for (const JobSpec& spec : ev.specs) {
    if (!o.check_tenancy) break;
    if (!s.tenants.contains(spec.tenant)) {
      Tenant t{spec.tenant, "created on first submission"};
      if (c.record()) c.fx.batch.PutTenant(t);
      s.tenants[t.name] = t;
    }
    if (!s.queues.contains({spec.tenant, spec.queue})) {
      Queue q{spec.queue, spec.tenant, "", 0, kMaxQueueGpus, 1.0};
      if (c.record()) c.fx.batch.PutQueue(q);
      s.queues[{q.tenant, q.name}] = q;
      queues_added = true;
    }
  }
  if (queues_added) SyncQueues(c);
  JobId next = ev.first_id;
  for (size_t i = 0; i < ev.specs.size(); ++i) {
    const JobSpec& spec = ev.specs[i];
    Job job;
    job.id = next++;
    job.spec = spec;
    if (i < ev.excluded_nodes.size()) job.excluded_nodes = ev.excluded_nodes[i];
    job.state = JobState::kPending;
    job.reason = "submitted";
    job.submit_time = c.now;
    job.state_time = c.now;
    job.submitted_by = ev.actor;
    job.run_as_uid = ev.run_as_uid;
    job.run_as_gid = ev.run_as_gid;
    c.PutJob(job);
    if (c.record()) {
      c.AppendEvent(job.id, ev.actor, "Submitted",
                    "submitted: " + std::to_string(job.spec.replicas) + " replica(s) of " +
                        Describe(job.spec.resources));
    }
    c.fx.ids.push_back(job.id);
    ++s.unfinished_by_tenant[job.spec.tenant];
    const JobId id = job.id;
    s.jobs[id] = JobEntry{std::move(job), std::nullopt};
    c.Touch(id);
  }
  if (ev.audit && c.record()) {
    AuditEntry a = *ev.audit;
    a.time = c.now;
    a.object = "job/" + std::to_string(ev.first_id);
    c.fx.batch.AppendAudit(std::move(a));
  }
  c.Dirty();
  return Status::Ok();
}

Status ApplyCancel(Ctx& c, const CancelJob& ev) {
  JobEntry* e = c.s.FindJob(ev.id);
  if (e == nullptr) return NotActive(ev.id);
  if (!e->gang) {
    const JobState before = e->job.state;
    TY_RETURN_IF_ERROR(
        e->job.TransitionTo(JobState::kCancelled, c.now, "cancelled by " + ev.actor));
    c.PutJob(e->job);
    c.AppendEvent(ev.id, ev.actor, "Cancelled",
                  "cancelled while " + std::string(JobStateName(before)));
    --c.s.unfinished_by_tenant[e->job.spec.tenant];
    c.fx.ended.push_back(ev.id);
    c.s.jobs.erase(ev.id);
    c.Touch(ev.id);
    c.Dirty();
    return Status::Ok();
  }
  if (e->gang->stopping == Stopping::kCancelled) return Status::Ok();
  // The request is stored first (in the job's reason), so a restarted server still
  // finishes the cancellation.
  e->job.reason = std::string(kCancelPrefix) + " by " + ev.actor;
  c.PutJob(e->job);
  c.AppendEvent(ev.id, ev.actor, "CancelRequested", "stopping every rank");
  e->gang->stopping = Stopping::kCancelled;
  e->gang->stop_message = e->job.reason;
  StopRanks(c, *e);
  return Evaluate(c, ev.id);
}

Status ApplyHold(Ctx& c, const HoldJob& ev) {
  JobEntry* e = c.s.FindJob(ev.id);
  if (e == nullptr) return NotActive(ev.id);
  if (e->job.state != JobState::kPending) {
    return FailedPrecondition("cannot " + std::string(ev.held ? "hold" : "release") + " " +
                              JobName(ev.id) + ": it is " +
                              std::string(JobStateName(e->job.state)) +
                              "; only Pending jobs can be " + (ev.held ? "held" : "released"));
  }
  if (e->job.held == ev.held) return Status::Ok();
  e->job.held = ev.held;
  e->job.reason = ev.held ? "held by " + ev.actor : "released by " + ev.actor;
  c.PutJob(e->job);
  c.AppendEvent(ev.id, ev.actor, ev.held ? "Held" : "Released", e->job.reason);
  c.Touch(ev.id);
  c.Dirty();
  return Status::Ok();
}

Status ApplyReportCheckpoint(Ctx& c, const ReportCheckpoint& ev) {
  JobEntry* e = c.s.FindJob(ev.id);
  if (e == nullptr) return NotActive(ev.id);
  if (!e->job.CurrentAttempt()) {
    return FailedPrecondition(JobName(ev.id) + " is " + std::string(JobStateName(e->job.state)) +
                              "; checkpoints are reported while it runs");
  }
  // It becomes the next attempt's TRAINYARD_RESUME_FROM: the spec's path rules hold.
  TY_RETURN_IF_ERROR(CheckReportedCheckpoint(ev.path, e->job.spec, c.s.options.paths));
  e->job.checkpoint = CheckpointInfo{ev.path, ev.step, c.now, ev.write_duration};
  c.PutJob(e->job);
  if (c.record()) {
    c.AppendEvent(ev.id, ev.actor, "Checkpoint",
                  "checkpoint at step " + std::to_string(ev.step) + ": " + ev.path +
                      " (written in " + FormatDuration(ev.write_duration) + ")");
  }
  c.Touch(ev.id);
  return Status::Ok();
}

Status ApplyRequestCheckpoint(Ctx& c, const RequestCheckpoint& ev) {
  JobEntry* e = c.s.FindJob(ev.id);
  if (e == nullptr) return NotActive(ev.id);
  if (e->job.state != JobState::kRunning || !e->gang) {
    return FailedPrecondition(JobName(ev.id) + " is " + std::string(JobStateName(e->job.state)) +
                              "; only a Running job can be asked for a checkpoint");
  }
  c.AppendEvent(ev.id, ev.actor, "CheckpointRequested", ev.why);
  for (const Rank& r : e->gang->ranks) {
    if (RankDone(r.state)) continue;
    protocol::Command cmd;
    cmd.kind = protocol::Command::Kind::kCheckpoint;
    cmd.task_id = protocol::TaskId(ev.id, e->gang->attempt, r.rank);
    c.Push(r.node, std::move(cmd));
  }
  return Status::Ok();
}

Status ApplyRequeueExcluding(Ctx& c, const RequeueExcluding& ev) {
  JobEntry* e = c.s.FindJob(ev.id);
  if (e == nullptr) return NotActive(ev.id);
  if (e->job.state != JobState::kRunning || !e->gang || e->gang->stopping != Stopping::kNone) {
    return FailedPrecondition(JobName(ev.id) + " is " + std::string(JobStateName(e->job.state)) +
                              "; only a Running job can be requeued");
  }
  auto& excluded = e->job.excluded_nodes;
  if (std::find(excluded.begin(), excluded.end(), ev.node) == excluded.end()) {
    excluded.push_back(ev.node);
  }
  return Preempt(c, *e, ev.why + "; requeued excluding node " + ev.node, ev.actor);
}

Status ApplySendProfile(Ctx& c, const SendProfile& ev) {
  JobEntry* e = c.s.FindJob(ev.id);
  if (e == nullptr) return NotActive(ev.id);
  const std::string job = JobName(ev.id);
  if (e->job.state != JobState::kRunning || !e->gang || e->gang->stopping != Stopping::kNone) {
    return FailedPrecondition(
        job + " is " + std::string(JobStateName(e->job.state)) +
        (e->gang && e->gang->stopping != Stopping::kNone ? " and stopping" : "") +
        "; only a Running job can be profiled");
  }
  if (e->gang->attempt != ev.attempt) {
    return FailedPrecondition(job + " is running attempt " + std::to_string(e->gang->attempt) +
                              ", not attempt " + std::to_string(ev.attempt));
  }
  std::vector<const Rank*> targets;
  for (int32_t r : ev.ranks) {
    auto rank = std::find_if(e->gang->ranks.begin(), e->gang->ranks.end(),
                             [r](const Rank& x) { return x.rank == r; });
    if (rank == e->gang->ranks.end()) {
      return InvalidArgument("rank: " + job + " has ranks 0.." +
                             std::to_string(e->gang->ranks.size() - 1) + ", got " +
                             std::to_string(r));
    }
    targets.push_back(&*rank);
  }
  for (const Rank* r : targets) {
    protocol::Command cmd;
    cmd.kind = protocol::Command::Kind::kProfile;
    cmd.task_id = protocol::TaskId(ev.id, ev.attempt, r->rank);
    cmd.profile_id = ev.profile_id;
    cmd.steps = ev.steps;
    c.Push(r->node, std::move(cmd));
  }
  return Status::Ok();
}

// --- tenancy ------------------------------------------------------------------------------

Status ApplyEnsureTenant(Ctx& c, const EnsureTenant& ev) {
  TY_RETURN_IF_ERROR(ValidateTenant(Tenant{ev.name, ""}));
  if (c.s.tenants.contains(ev.name)) return Status::Ok();
  const Tenant tenant{ev.name, "created by " + ev.actor};
  if (c.record()) c.fx.batch.PutTenant(tenant);
  c.s.tenants[ev.name] = tenant;
  if (!c.s.queues.contains({ev.name, kDefaultQueue})) {
    const Queue queue{kDefaultQueue, ev.name, "", 0, kMaxQueueGpus, 1.0};
    if (c.record()) c.fx.batch.PutQueue(queue);
    c.s.queues[{ev.name, kDefaultQueue}] = queue;
    SyncQueues(c);
  }
  return Status::Ok();
}

Status ApplySetTenantQuota(Ctx& c, const SetTenantQuota& ev) {
  Tenant tenant{ev.name, "created by " + ev.actor, ev.guaranteed, ev.limit};
  TY_RETURN_IF_ERROR(ValidateTenant(tenant));
  std::vector<Queue> changed;
  if (auto it = c.s.tenants.find(ev.name); it != c.s.tenants.end()) {
    // The quota alone changes.
    tenant = it->second;
    tenant.guaranteed_gpus = ev.guaranteed;
    tenant.limit_gpus = ev.limit;
    int64_t sum = 0;
    for (const auto& [key, q] : c.s.queues) {
      if (key.first != ev.name) continue;
      sum += q.guaranteed_gpus;
      if (q.guaranteed_gpus > ev.limit) {
        return FailedPrecondition(
            "tenant " + QuoteForMessage(ev.name) + ": limit_gpus " + std::to_string(ev.limit) +
            " is below the guarantee of its queue " + QueueKey(ev.name, q.name) + " (" +
            std::to_string(q.guaranteed_gpus) + " GPUs); lower that queue's guarantee first");
      }
      if (q.limit_gpus > ev.limit) {
        Queue lowered = q;
        lowered.limit_gpus = ev.limit;
        changed.push_back(lowered);
      }
    }
    if (sum > ev.guaranteed) {
      return FailedPrecondition("tenant " + QuoteForMessage(ev.name) + ": guaranteed_gpus " +
                                std::to_string(ev.guaranteed) + " is below the " +
                                std::to_string(sum) +
                                " GPUs its queues' guarantees already add up to; lower "
                                "their guarantees first");
    }
  } else if (!c.s.queues.contains({ev.name, kDefaultQueue})) {
    changed.push_back(Queue{kDefaultQueue, ev.name, "", 0, ev.limit, 1.0});
  }
  if (c.record()) {
    c.fx.batch.PutTenant(tenant);
    for (const Queue& q : changed) c.fx.batch.PutQueue(q);
  }
  c.s.tenants[ev.name] = tenant;
  for (const Queue& q : changed) c.s.queues[{q.tenant, q.name}] = q;
  SyncQueues(c);
  c.fx.tenant = tenant;
  return Status::Ok();
}

Status ApplySetTenantIdentity(Ctx& c, const SetTenantIdentity& ev) {
  auto it = c.s.tenants.find(ev.name);
  if (it == c.s.tenants.end()) {
    return NotFound("tenant " + QuoteForMessage(ev.name) +
                    " does not exist; a cluster-admin creates it (`trainyard tenants quota`)");
  }
  Tenant tenant = it->second;
  tenant.run_as_uid = ev.uid;
  tenant.run_as_gid = ev.gid;
  if (ev.allow_root) tenant.allow_root = *ev.allow_root;
  TY_RETURN_IF_ERROR(ValidateTenant(tenant));
  if (c.record()) c.fx.batch.PutTenant(tenant);
  it->second = tenant;
  c.fx.tenant = tenant;
  return Status::Ok();
}

Status ApplyPutQueue(Ctx& c, const PutQueue& ev) {
  const Queue& queue = ev.queue;
  TY_RETURN_IF_ERROR(ValidateQueue(queue));
  auto t = c.s.tenants.find(queue.tenant);
  if (t == c.s.tenants.end()) {
    return NotFound("tenant " + QuoteForMessage(queue.tenant) +
                    " does not exist; a cluster-admin creates it (`trainyard tenants quota`)");
  }
  const Tenant& tenant = t->second;
  const std::string key = QueueKey(queue.tenant, queue.name);
  if (!queue.parent.empty() && !c.s.queues.contains({queue.tenant, queue.parent})) {
    return InvalidArgument("queue.parent: tenant " + QuoteForMessage(queue.tenant) +
                           " has no queue " + QuoteForMessage(queue.parent));
  }
  // The parent chain must not come back to this queue.
  for (std::string ancestor = queue.parent; !ancestor.empty();) {
    if (ancestor == queue.name) {
      return FailedPrecondition("queue " + key + " cannot have parent " + queue.parent +
                                ": it would become its own ancestor");
    }
    auto up = c.s.queues.find({queue.tenant, ancestor});
    if (up == c.s.queues.end()) break;
    ancestor = up->second.parent;
  }
  if (queue.limit_gpus > tenant.limit_gpus) {
    return FailedPrecondition("queue " + key + ": limit_gpus " + std::to_string(queue.limit_gpus) +
                              " is above tenant " + QuoteForMessage(tenant.name) + "'s limit of " +
                              std::to_string(tenant.limit_gpus) +
                              " GPUs per queue; a cluster-admin sets the tenant's quota");
  }
  int64_t others = 0;
  for (const auto& [k, q] : c.s.queues) {
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
  if (c.record()) c.fx.batch.PutQueue(queue);
  c.s.queues[{queue.tenant, queue.name}] = queue;
  SyncQueues(c);
  c.fx.queue = queue;
  return Status::Ok();
}

Status ApplyDeleteQueue(Ctx& c, const DeleteQueue& ev) {
  const std::string key = QueueKey(ev.tenant, ev.name);
  if (!c.s.queues.contains({ev.tenant, ev.name})) {
    return NotFound("queue " + QuoteForMessage(key) + " does not exist");
  }
  std::string children;
  for (const auto& [k, q] : c.s.queues) {
    if (k.first == ev.tenant && q.parent == ev.name) {
      children += (children.empty() ? "" : ", ") + q.name;
    }
  }
  if (!children.empty()) {
    return FailedPrecondition("queue " + key + " still has child queues (" + children +
                              "); delete them first");
  }
  int64_t unfinished = 0;
  std::string ids;
  for (const auto& [id, e] : c.s.jobs) {
    if (e.job.spec.tenant != ev.tenant || e.job.spec.queue != ev.name) continue;
    if (++unfinished <= 5) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  }
  if (unfinished > 0) {
    return FailedPrecondition("queue " + key + " still has " + std::to_string(unfinished) +
                              " unfinished job(s) (" + ids + (unfinished > 5 ? ", ..." : "") +
                              "); cancel them or wait for them to finish");
  }
  if (c.record()) c.fx.batch.DeleteQueue(ev.tenant, ev.name);
  c.s.queues.erase({ev.tenant, ev.name});
  SyncQueues(c);
  return Status::Ok();
}

}  // namespace trainyard::lifecycle::internal
