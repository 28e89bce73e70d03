// The gang lifecycle (stop, preempt, evaluate), the decisions of a pass, loading, and
// the dispatch of events to their files (agents.cc, requests.cc).
#include "lifecycle/lifecycle.h"

#include <algorithm>
#include <csignal>
#include <map>
#include <set>
#include <sstream>

#include "core/names.h"
#include "lifecycle/internal.h"
#include "sched/retry.h"

namespace trainyard::lifecycle {
namespace internal {

Status Broken(const Status& s) {
  if (s.ok()) return s;
  return Internal("job lifecycle: " + s.ToString());
}

bool Leaving(const JobEntry& e) {
  return e.job.state == JobState::kPreempting || (e.gang && e.gang->stopping != Stopping::kNone);
}

bool PreemptingForScheduler(const JobEntry& e) {
  return e.job.state != JobState::kRunning || (e.gang && e.gang->stopping != Stopping::kNone);
}

void Ctx::Push(const std::string& node, protocol::Command command) {
  if (!s.options.agents) return;
  auto it = s.nodes.find(node);
  if (it == s.nodes.end() || !it->second.connected) return;
  it->second.outbox.push_back({std::move(command), s.apply_seq});
  if (fx.nodes_with_commands.empty() || fx.nodes_with_commands.back() != node) {
    fx.nodes_with_commands.push_back(node);
  }
}

void Ctx::Finish() {
  for (const std::string& name : touched_nodes_) {
    auto it = s.nodes.find(name);
    if (it != s.nodes.end()) s.snapshot.PutNode(it->second.node);
  }
  for (JobId id : touched_jobs_) {
    auto it = s.jobs.find(id);
    if (it == s.jobs.end()) {
      s.snapshot.Forget(id);
    } else {
      s.snapshot.Reflect(it->second.job, PreemptingForScheduler(it->second), now);
    }
  }
  std::sort(fx.nodes_with_commands.begin(), fx.nodes_with_commands.end());
  fx.nodes_with_commands.erase(
      std::unique(fx.nodes_with_commands.begin(), fx.nodes_with_commands.end()),
      fx.nodes_with_commands.end());
}

void SyncNode(Ctx& c, NodeEntry& n, const std::string& reason) {
  Node next = n.node;
  next.state = EffectiveState(n);
  next.state_reason = next.state == NodeState::kReady ? "" : reason;
  if (next == n.node) return;
  if (c.record()) c.fx.batch.PutNode(next);
  n.node = std::move(next);
  c.TouchNode(n.node.name);
}

void ApplyHealthCheck(Ctx& c, NodeEntry& n, const std::optional<protocol::HealthCheckResult>& hc) {
  if (!hc || n.health_check == hc) return;
  n.health_check = hc;
  const bool cordoned_by_check = n.set_state == NodeState::kCordoned &&
                                 n.node.state_reason.starts_with(kHealthCheckCordonPrefix);
  if (!hc->ok) {
    if (n.set_state != NodeState::kReady && !cordoned_by_check) return;
    std::string output = hc->output.substr(0, hc->output.find('\n'));
    if (output.size() > 200) output = output.substr(0, 200) + "...";
    n.set_state = NodeState::kCordoned;
    SyncNode(c, n,
             std::string(kHealthCheckCordonPrefix) +
                 (hc->trigger.empty() ? "" : " (" + hc->trigger + ")") + ": " +
                 (output.empty() ? "no output" : output));
  } else if (cordoned_by_check) {
    n.set_state = NodeState::kReady;
    SyncNode(c, n, "");
  }
  c.Dirty();
}

void StopRanks(Ctx& c, JobEntry& e) {
  Gang& g = *e.gang;
  c.Touch(e.job.id);
  for (Rank& r : g.ranks) {
    if (RankDone(r.state)) continue;
    if (r.state == RankState::kStaging) {
      r.state = RankState::kGone;  // never started: nothing to stop
      continue;
    }
    const std::string id = protocol::TaskId(e.job.id, g.attempt, r.rank);
    auto n = c.s.nodes.find(r.node);
    if (n == c.s.nodes.end() || !n->second.connected) {
      // Its node is gone (or not back yet): the rank is counted out now if the node
      // is known dead, else when the node returns or times out.
      if (n == c.s.nodes.end() || n->second.node.state == NodeState::kNotReady) {
        r.state = RankState::kGone;
      }
      continue;
    }
    if (r.state == RankState::kSent) {
      auto& q = n->second.outbox;
      auto pos = std::find_if(q.begin(), q.end(), [&](const QueuedCommand& qc) {
        return qc.command.kind == protocol::Command::Kind::kStart && qc.command.start.task_id == id;
      });
      if (pos != q.end()) {
        q.erase(pos);
        r.state = RankState::kGone;
        continue;
      }
    }
    protocol::Command cmd;
    cmd.kind = protocol::Command::Kind::kStop;
    cmd.task_id = id;
    cmd.grace = c.s.options.stop_grace;
    c.Push(r.node, std::move(cmd));
  }
}

Status StopGang(Ctx& c, JobEntry& e, Stopping why, std::string message) {
  Gang& g = *e.gang;
  if (why == Stopping::kLost || why == Stopping::kTimeLimit) {
    if (why == Stopping::kLost && e.job.state != JobState::kLost) {
      TY_RETURN_IF_ERROR(Broken(e.job.TransitionTo(JobState::kLost, c.now, message)));
    } else {
      e.job.reason = message;
    }
    c.PutJob(e.job);
    c.AppendEvent(e.job.id, "server", why == Stopping::kLost ? "Lost" : "TimeLimit", message);
  }
  g.stopping = why;
  g.stop_message = std::move(message);
  StopRanks(c, e);
  return Status::Ok();
}

void SendPreemptNotices(Ctx& c, const JobEntry& e) {
  const int signal = SignalNumber(e.job.spec.checkpoint.notice_signal).value_or(SIGUSR1);
  for (const Rank& r : e.gang->ranks) {
    if (RankDone(r.state)) continue;
    protocol::Command cmd;
    cmd.kind = protocol::Command::Kind::kPreempt;
    cmd.task_id = protocol::TaskId(e.job.id, e.gang->attempt, r.rank);
    cmd.signal = signal;
    cmd.grace = e.job.spec.checkpoint.preempt_grace;
    c.Push(r.node, std::move(cmd));
  }
}

Status Preempt(Ctx& c, JobEntry& e, const std::string& why, const std::string& actor) {
  const Duration lost = e.job.LostWorkAt(c.now);
  TY_RETURN_IF_ERROR(Broken(e.job.TransitionTo(JobState::kPreempting, c.now, why)));
  c.PutJob(e.job);
  if (c.record()) {
    c.AppendEvent(e.job.id, actor, "Preempting",
                  why + "; work since the last checkpoint so far: " + FormatDuration(lost));
  }
  c.Touch(e.job.id);
  SendPreemptNotices(c, e);
  return Status::Ok();
}

Status Evaluate(Ctx& c, JobId id) {
  auto it = c.s.jobs.find(id);
  if (it == c.s.jobs.end() || !it->second.gang) return Status::Ok();
  JobEntry& e = it->second;
  Gang& g = *e.gang;
  const Timestamp now = c.now;
  c.Touch(id);
  const bool all_done =
      std::all_of(g.ranks.begin(), g.ranks.end(), [](const Rank& r) { return RankDone(r.state); });
  const Rank* failed = nullptr;
  for (const Rank& r : g.ranks) {
    if (r.state == RankState::kExited && (r.exit_code != 0 || r.signal != 0)) {
      failed = &r;
      break;
    }
  }
  auto describe = [&](const Rank& r) {
    std::string m = "rank " + std::to_string(r.rank) + " on " + r.node;
    // The agent saw the kernel's OOM killer end it: that is the reason, not the signal.
    if (r.message.starts_with(kOomKilled)) return m + " " + r.message;
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
          StopGang(c, e, Stopping::kLost,
                   "rank " + std::to_string(r.rank) + " on " + r.node + ": " + r.message));
      break;
    }
  }
  if (!all_done) {
    if (g.stopping == Stopping::kNone && e.job.state != JobState::kPreempting && failed) {
      g.failure_code = failed->signal ? -failed->signal : failed->exit_code;
      return StopGang(c, e, Stopping::kFailed, describe(*failed));
    }
    const bool all_running = std::all_of(g.ranks.begin(), g.ranks.end(), [](const Rank& r) {
      return r.state == RankState::kRunning || r.state == RankState::kExited;
    });
    if (e.job.state == JobState::kStarting && all_running && g.stopping == Stopping::kNone) {
      TY_RETURN_IF_ERROR(Broken(e.job.TransitionTo(JobState::kRunning, now, "all ranks running")));
      c.PutJob(e.job);
      if (c.record()) {
        c.AppendEvent(id, "server", "Running",
                      "all " + std::to_string(g.ranks.size()) + " rank(s) running");
      }
    }
    return Status::Ok();
  }
  // Every rank is done: close the attempt.
  Job& job = e.job;
  std::vector<std::pair<std::string, std::string>> events;  // kind, message
  const bool requeue = job.spec.requeue;
  if (job.state == JobState::kPreempting) {
    const Duration lost = job.LostWorkAt(now);
    TY_RETURN_IF_ERROR(
        Broken(job.EndAttempt(requeue ? JobState::kPending : JobState::kFailed, now,
                              ExitReason::kPreempted, 0, "preempted: " + job.reason)));
    if (c.record()) {
      events.emplace_back(requeue ? "Requeued" : "Failed",
                          "preempted; lost work " + FormatDuration(lost) +
                              (job.checkpoint ? "; resumes from " + job.checkpoint->path
                                              : "; no checkpoint, restarts from the beginning"));
    }
  } else if (g.stopping == Stopping::kCancelled) {
    TY_RETURN_IF_ERROR(Broken(
        job.EndAttempt(JobState::kCancelled, now, ExitReason::kCancelled, 0, g.stop_message)));
    events.emplace_back("Cancelled", "every rank stopped");
  } else if (g.stopping == Stopping::kLost || g.stopping == Stopping::kRequeue) {
    const bool lost = g.stopping == Stopping::kLost;
    const Duration lost_work = job.LostWorkAt(now);
    TY_RETURN_IF_ERROR(Broken(job.EndAttempt(requeue ? JobState::kPending : JobState::kFailed, now,
                                             lost ? ExitReason::kNodeLost : ExitReason::kPreempted,
                                             0, g.stop_message)));
    if (c.record()) {
      events.emplace_back(requeue ? "Requeued" : "Failed",
                          g.stop_message + "; lost work " + FormatDuration(lost_work));
    }
  } else if (g.stopping == Stopping::kTimeLimit) {
    TY_RETURN_IF_ERROR(
        Broken(job.EndAttempt(JobState::kFailed, now, ExitReason::kTimeLimit, 0, g.stop_message)));
    events.emplace_back("Failed", g.stop_message);
  } else if (failed || g.stopping == Stopping::kFailed) {
    // The first failure is the cause; later ones are usually the stop we sent.
    const bool first = g.stopping == Stopping::kFailed;
    const std::string why = first ? g.stop_message : describe(*failed);
    const int32_t code =
        first ? g.failure_code : (failed->signal ? -failed->signal : failed->exit_code);
    if (sched::MayRetry(job.spec.retry, job.retries)) {
      TY_RETURN_IF_ERROR(
          Broken(job.EndAttempt(JobState::kPending, now, ExitReason::kFailed, code, why)));
      const Duration backoff = sched::RetryBackoff(job.spec.retry, job.retries);
      job.reason = why + "; retry " + std::to_string(job.retries) + " of " +
                   std::to_string(job.spec.retry.max) + " after " + FormatDuration(backoff);
      events.emplace_back("Retrying", job.reason);
    } else {
      if (job.state == JobState::kRunning || job.state == JobState::kStarting ||
          job.state == JobState::kLost || job.state == JobState::kPreempting) {
        TY_RETURN_IF_ERROR(
            Broken(job.EndAttempt(JobState::kFailed, now, ExitReason::kFailed, code, why)));
      }
      events.emplace_back("Failed", why);
    }
  } else {
    if (job.state == JobState::kStarting) {
      TY_RETURN_IF_ERROR(Broken(job.TransitionTo(JobState::kRunning, now, "all ranks ran")));
    }
    TY_RETURN_IF_ERROR(
        Broken(job.EndAttempt(JobState::kSucceeded, now, ExitReason::kSucceeded, 0,
                              "all " + std::to_string(g.ranks.size()) + " rank(s) exited 0")));
    events.emplace_back("Succeeded", job.reason);
  }
  c.PutJob(job);
  for (auto& [kind, message] : events) c.AppendEvent(id, "server", kind, std::move(message));
  e.gang.reset();
  if (IsTerminal(job.state)) {
    --c.s.unfinished_by_tenant[job.spec.tenant];
    c.fx.ended.push_back(id);
    c.s.jobs.erase(it);
  }
  c.Dirty();
  return Status::Ok();
}

Status GiveUpNode(Ctx& c, const std::string& node, const std::string& why) {
  // Evaluate may end a job (and erase it): walk a list of ids, not the map.
  std::vector<JobId> hit;
  for (auto& [id, e] : c.s.jobs) {
    if (!e.gang) continue;
    for (const Rank& r : e.gang->ranks) {
      if (r.node == node && !RankDone(r.state)) {
        hit.push_back(id);
        break;
      }
    }
  }
  for (JobId id : hit) {
    JobEntry& e = c.s.jobs.at(id);
    for (Rank& r : e.gang->ranks) {
      if (r.node == node && !RankDone(r.state)) {
        r.state = RankState::kGone;
        r.message = "node " + node + " lost: " + why;
      }
    }
    if (!Leaving(e)) {
      TY_RETURN_IF_ERROR(StopGang(c, e, Stopping::kLost, "node " + node + " lost: " + why));
    }
    TY_RETURN_IF_ERROR(Evaluate(c, id));
  }
  return Status::Ok();
}

Status ApplyGangRunning(Ctx& c, const GangRunning& ev) {
  JobEntry* e = c.s.FindJob(ev.id);
  if (e == nullptr || !e->gang) {
    return FailedPrecondition("job " + std::to_string(ev.id) + " has no started gang");
  }
  for (Rank& r : e->gang->ranks) {
    if (!RankDone(r.state)) r.state = RankState::kRunning;
  }
  return Evaluate(c, ev.id);
}

Status ApplyGangExited(Ctx& c, const GangExited& ev) {
  JobEntry* e = c.s.FindJob(ev.id);
  if (e == nullptr || !e->gang) {
    return FailedPrecondition("job " + std::to_string(ev.id) + " has no started gang");
  }
  for (Rank& r : e->gang->ranks) {
    if (RankDone(r.state)) continue;
    r.state = RankState::kExited;
    r.exit_code = ev.exit_code;
    r.signal = ev.signal;
  }
  return Evaluate(c, ev.id);
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

// Ports 20000..31999: below Linux's ephemeral range, so a rank's own outgoing
// connections never hold it. Derived from (job, attempt) so a restarted server
// computes the same port.
int MasterPort(JobId job, int32_t attempt) {
  return 20000 + static_cast<int>((job * 31 + attempt) % 12000);
}

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

}  // namespace internal

using internal::Ctx;

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

protocol::TaskStart BuildStart(const ClusterState& state, const JobEntry& e, const Rank& r) {
  const Job& job = e.job;
  const Gang& g = *e.gang;
  protocol::TaskStart t;
  t.task_id = protocol::TaskId(job.id, g.attempt, r.rank);
  t.job_id = job.id;
  t.attempt = g.attempt;
  t.rank = r.rank;
  t.argv = internal::TaskArgv(job.spec);
  t.workdir = job.spec.working_dir;
  t.gpus = r.gpus;
  t.env = job.spec.env;
  t.secret_env = job.spec.secret_env;
  // One group per replica on its node, whose ranks share the replica's resources.
  t.group = "j" + std::to_string(job.id) + "." + std::to_string(g.attempt) + ".r" +
            std::to_string(r.replica);
  t.milli_cpus = job.spec.resources.milli_cpus;
  t.memory_bytes = job.spec.resources.memory_bytes;
  // The submitting user's own identity, else the tenant's (docs/execution.md).
  if (job.run_as_uid >= 0) {
    t.uid = job.run_as_uid;
    t.gid = job.run_as_gid;
  } else if (auto tenant = state.tenants.find(job.spec.tenant);
             tenant != state.tenants.end() && tenant->second.run_as_uid >= 0) {
    t.uid = tenant->second.run_as_uid;
    t.gid = tenant->second.run_as_gid;
  }
  t.image = job.spec.image;
  for (const MountSpec& m : job.spec.mounts) t.mounts.push_back({m.source, m.target, m.read_only});
  t.shm_bytes = job.spec.shm_bytes;
  for (const DataSpec& d : job.spec.data) {
    t.data.push_back({d.dataset, d.version, d.source, job.spec.image.empty() ? "" : d.mount,
                      d.stage == DataStage::kLocal});
  }
  std::string master_addr = "127.0.0.1";
  if (!g.ranks.empty()) {
    auto n = state.nodes.find(g.ranks.front().node);
    if (n != state.nodes.end() && !n->second.address.empty()) master_addr = n->second.address;
  }
  const int32_t procs = std::max(job.spec.procs_per_replica, 1);
  auto& env = t.env;
  env["MASTER_ADDR"] = master_addr;
  env["MASTER_PORT"] = std::to_string(internal::MasterPort(job.id, g.attempt));
  env["WORLD_SIZE"] = std::to_string(g.ranks.size());
  env["RANK"] = std::to_string(r.rank);
  env["LOCAL_RANK"] = std::to_string(r.local);
  env["LOCAL_WORLD_SIZE"] = std::to_string(procs);
  env["GROUP_RANK"] = std::to_string(r.replica);
  env["NODE_RANK"] = std::to_string(r.replica);
  env["CUDA_VISIBLE_DEVICES"] = internal::GpuList(r.gpus);
  env["TRAINYARD_JOB_ID"] = std::to_string(job.id);
  env["TRAINYARD_JOB_NAME"] = job.spec.name;
  env["TRAINYARD_ATTEMPT"] = std::to_string(g.attempt);
  env["TRAINYARD_TASK_ID"] = t.task_id;
  env["TRAINYARD_NUM_REPLICAS"] = std::to_string(g.ranks.size() / static_cast<size_t>(procs));
  // The default depends only on the job, so every attempt finds what the last one wrote.
  env["TRAINYARD_CHECKPOINT_DIR"] =
      !job.spec.checkpoint.dir.empty()
          ? job.spec.checkpoint.dir
          : DefaultCheckpointDir(state.options.paths.checkpoint_root, job.spec.tenant, job.id);
  env["TRAINYARD_RESUME_FROM"] = job.checkpoint ? job.checkpoint->path : "";
  // The SDK treats this signal as the preemption notice (what Preempt sends).
  env["TRAINYARD_PREEMPT_SIGNAL"] =
      CanonicalSignalName(job.spec.checkpoint.notice_signal).value_or("SIGUSR1");
  if (auto it = job.spec.labels.find(kArrayIndexLabel); it != job.spec.labels.end()) {
    env["TRAINYARD_ARRAY_INDEX"] = it->second;
  }
  return t;
}

void Push(ClusterState& state, const std::string& node, protocol::Command command,
          Effects& effects) {
  Ctx c(state, Timestamp{}, effects);
  c.Push(node, std::move(command));
}

Result<Effects> Apply(ClusterState& state, const Event& event, Timestamp now) {
  Effects fx;
  Ctx c(state, now, fx);
  using namespace internal;
  Status s = std::visit(
      [&](const auto& e) -> Status {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, SubmitJobs>) {
          return ApplySubmit(c, e);
        } else if constexpr (std::is_same_v<T, CancelJob>) {
          return ApplyCancel(c, e);
        } else if constexpr (std::is_same_v<T, HoldJob>) {
          return ApplyHold(c, e);
        } else if constexpr (std::is_same_v<T, ReportCheckpoint>) {
          return ApplyReportCheckpoint(c, e);
        } else if constexpr (std::is_same_v<T, RequestCheckpoint>) {
          return ApplyRequestCheckpoint(c, e);
        } else if constexpr (std::is_same_v<T, RequeueExcluding>) {
          return ApplyRequeueExcluding(c, e);
        } else if constexpr (std::is_same_v<T, SendProfile>) {
          return ApplySendProfile(c, e);
        } else if constexpr (std::is_same_v<T, SetNodeState>) {
          return ApplySetNodeState(c, e);
        } else if constexpr (std::is_same_v<T, NodeLost>) {
          return ApplyNodeLost(c, e);
        } else if constexpr (std::is_same_v<T, AgentRegistered>) {
          return ApplyRegistered(c, e);
        } else if constexpr (std::is_same_v<T, AgentHeartbeat>) {
          return ApplyHeartbeat(c, e);
        } else if constexpr (std::is_same_v<T, Tick>) {
          return ApplyTick(c, e);
        } else if constexpr (std::is_same_v<T, GangRunning>) {
          return ApplyGangRunning(c, e);
        } else if constexpr (std::is_same_v<T, GangExited>) {
          return ApplyGangExited(c, e);
        } else if constexpr (std::is_same_v<T, EnsureTenant>) {
          return ApplyEnsureTenant(c, e);
        } else if constexpr (std::is_same_v<T, SetTenantQuota>) {
          return ApplySetTenantQuota(c, e);
        } else if constexpr (std::is_same_v<T, SetTenantIdentity>) {
          return ApplySetTenantIdentity(c, e);
        } else if constexpr (std::is_same_v<T, PutQueue>) {
          return ApplyPutQueue(c, e);
        } else {
          static_assert(std::is_same_v<T, DeleteQueue>, "an event without its Apply");
          return ApplyDeleteQueue(c, e);
        }
      },
      event);
  // What changed is shown to the snapshot builder even when an internal error cut the
  // event short (the caller rebuilds the state then anyway).
  c.Finish();
  if (!s.ok()) return s;
  return fx;
}

Result<Effects> ApplyDecisions(ClusterState& state, const sched::Decisions& d,
                               const SnapshotCopy* copy, Timestamp now) {
  Effects fx;
  Ctx c(state, now, fx);
  PassStats& stats = fx.stats;
  // Still Pending, and unchanged since the pass saw it (not held, cancelled, retried).
  auto still_pending = [&](JobId id) -> JobEntry* {
    JobEntry* e = state.FindJob(id);
    if (e == nullptr || e->job.state != JobState::kPending || e->job.held) return nullptr;
    if (copy != nullptr) {
      const uint64_t seen = copy->Version(id);
      if (seen == 0 || seen != state.snapshot.PendingVersion(id)) return nullptr;
    }
    return e;
  };
  // GPUs held by open attempts now, per node, so that a bind never lands on one.
  // Gathered at the first bind of a pass run on a copy (a pass on the builder's own
  // snapshot saw exactly this state): a pass that binds nothing does not walk every
  // job for it.
  std::map<std::string, std::set<int>> used;
  bool used_gathered = false;
  auto placeable = [&](const sched::Bind& bind) {
    if (copy == nullptr) return true;
    if (!used_gathered) {
      used_gathered = true;
      for (const sched::RunningJob& r : state.snapshot.current().running) {
        for (const auto& p : r.replicas) used[p.node].insert(p.gpus.begin(), p.gpus.end());
      }
    }
    std::map<std::string, std::set<int>> taking;
    for (const auto& p : bind.replicas) {
      auto n = state.nodes.find(p.node);
      if (n == state.nodes.end() || EffectiveState(n->second) != NodeState::kReady) return false;
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
  Status s;
  for (const sched::Bind& bind : d.binds) {
    JobEntry* e = still_pending(bind.job);
    if (e == nullptr || !placeable(bind)) {
      c.Dirty();  // decided on a state that has moved on: look again
      continue;
    }
    Job& job = e->job;
    std::vector<std::string> nodes;
    std::vector<std::vector<int>> gpus;
    nodes.reserve(bind.replicas.size());
    gpus.reserve(bind.replicas.size());
    for (const auto& p : bind.replicas) {
      nodes.push_back(p.node);
      gpus.push_back(p.gpus);
    }
    s = internal::Broken(job.StartAttempt(now, std::move(nodes)));
    if (!s.ok()) break;
    job.attempts.back().gpus = std::move(gpus);
    job.reason = "starting " + std::to_string(bind.replicas.size()) + " replica(s)";
    c.PutJob(job);
    if (c.record()) {
      c.AppendEvent(job.id, "scheduler", "Bound",
                    "attempt " + std::to_string(job.attempts.back().index) + " on " +
                        internal::DescribePlacement(bind.replicas));
    }
    Gang g;
    g.attempt = job.attempts.back().index;
    g.ranks = MakeRanks(job, job.attempts.back());
    e->gang = std::move(g);
    if (state.options.agents && internal::NeedsStaging(job.spec)) {
      // Its data first, on every node of the gang; the starts follow once all have it.
      for (Rank& r : e->gang->ranks) {
        r.state = RankState::kStaging;
        r.sent_at = now;
      }
      const JobId id = job.id;  // Evaluate may end the job (and `job` with it)
      state.staging.insert(id);
      internal::SendStage(c, *e);
      c.Touch(id);
      ++stats.binds;
      s = internal::AdvanceStaging(c, *e);
      if (s.ok() && e->gang->stopping != Stopping::kNone) s = internal::Evaluate(c, id);
      if (!s.ok()) break;
      continue;
    }
    for (Rank& r : e->gang->ranks) {
      r.state = RankState::kSent;
      r.sent_at = now;
      if (state.options.agents) {
        protocol::Command cmd;
        cmd.kind = protocol::Command::Kind::kStart;
        cmd.start = BuildStart(state, *e, r);
        c.Push(r.node, std::move(cmd));
      }
    }
    c.Touch(job.id);
    ++stats.binds;
  }
  for (const sched::Preempt& p : d.preemptions) {
    if (!s.ok()) break;
    JobEntry* e = state.FindJob(p.job);
    if (e == nullptr || e->job.state != JobState::kRunning || !e->gang ||
        e->gang->stopping != Stopping::kNone || still_pending(p.for_job) == nullptr) {
      c.Dirty();
      continue;
    }
    s = internal::Preempt(c, *e, "preempted for job " + std::to_string(p.for_job) + ": " + p.reason,
                          "scheduler");
    ++stats.preemptions;
  }
  for (const sched::Waiting& w : d.waiting) {
    JobEntry* e = state.FindJob(w.job);
    if (e != nullptr && e->job.state == JobState::kPending && !e->job.held) {
      e->job.reason = w.reason.str();
    }
    ++stats.waiting;
  }
  for (const sched::Infeasible& inf : d.infeasible) {
    JobEntry* e = state.FindJob(inf.job);
    // Nodes come and go, so "never on this cluster" is only "not on the nodes we
    // have now": the job stays Pending and says why.
    if (e != nullptr && e->job.state == JobState::kPending) {
      e->job.reason = "cannot run on the current nodes: " + inf.reason;
    }
    ++stats.infeasible;
  }
  c.Finish();
  if (!s.ok()) return s;
  return fx;
}

store::WriteBatch Load(ClusterState& state, store::StoredState stored, Timestamp now) {
  store::WriteBatch seed;
  if (stored.tenants.empty()) {
    Tenant t{kDefaultTenant, "created by the server on first start"};
    Queue q{kDefaultQueue, kDefaultTenant, "", 0, kMaxQueueGpus, 1.0};
    seed.PutTenant(t);
    seed.PutQueue(q);
    stored.tenants.push_back(t);
    stored.queues.push_back(q);
  }
  if (stored.priority_classes.empty()) {
    for (const auto& pc : DefaultPriorityClasses()) {
      seed.PutPriorityClass(pc);
      stored.priority_classes.push_back(pc);
    }
  }
  for (Job& job : stored.active_jobs) {
    // Admitted is not used by this server: a binding is committed as Starting.
    if (job.state == JobState::kAdmitted &&
        job.TransitionTo(JobState::kPending, now, "requeued on server start").ok()) {
      seed.PutJob(job);
    }
  }
  for (const auto& [id, e] : state.jobs) state.snapshot.Forget(id);
  state.jobs.clear();
  state.nodes.clear();
  state.tenants.clear();
  state.queues.clear();
  state.classes.clear();
  state.unfinished_by_tenant.clear();
  for (auto& t : stored.tenants) state.tenants[t.name] = t;
  for (auto& q : stored.queues) state.queues[{q.tenant, q.name}] = q;
  for (auto& pc : stored.priority_classes) state.classes[pc.name] = pc;
  std::vector<Node> nodes;
  for (auto& n : stored.nodes) {
    NodeEntry e;
    e.node = n;
    e.set_state = n.state == NodeState::kCordoned || n.state == NodeState::kDraining
                      ? n.state
                      : NodeState::kReady;
    // Agents get node_timeout from now to come back before their work is given up.
    e.last_heartbeat = now;
    nodes.push_back(n);
    state.nodes[n.name] = std::move(e);
  }
  state.snapshot.SetNodes(std::move(nodes));
  std::vector<Queue> queues;
  for (const auto& [key, q] : state.queues) queues.push_back(q);
  state.snapshot.SetQueues(std::move(queues));
  for (auto& job : stored.active_jobs) {
    JobEntry e;
    e.job = std::move(job);
    if (const Attempt* a = e.job.CurrentAttempt()) {
      Gang g;
      g.attempt = a->index;
      g.ranks = MakeRanks(e.job, *a);
      if (e.job.state == JobState::kLost) {
        g.stopping = Stopping::kLost;
      } else if (e.job.reason.starts_with(internal::kCancelPrefix)) {
        g.stopping = Stopping::kCancelled;
      } else if (e.job.reason.starts_with(internal::kTimeLimitPrefix)) {
        g.stopping = Stopping::kTimeLimit;
      }
      g.stop_message = e.job.reason;
      e.gang = std::move(g);
    }
    ++state.unfinished_by_tenant[e.job.spec.tenant];
    const JobId id = e.job.id;
    auto [it, inserted] = state.jobs.emplace(id, std::move(e));
    state.snapshot.Reflect(it->second.job, internal::PreemptingForScheduler(it->second), now);
  }
  state.dirty = true;
  return seed;
}

}  // namespace trainyard::lifecycle
