// Nodes and their agents: registration (and reconciliation after a restart),
// heartbeats (rank reports, health), node timeouts and loss, admin states.
#include <algorithm>
#include <set>

#include "core/names.h"
#include "lifecycle/internal.h"

namespace trainyard::lifecycle::internal {
namespace {

bool Exited(const protocol::TaskStatus& t) { return t.state == protocol::TaskState::kExited; }

// What an agent says of a rank reaches events, job reasons and the API; the store
// takes event texts of a bounded size.
constexpr size_t kMaxRankMessageBytes = 4096;

std::string RankMessage(const JobSpec& spec, const std::string& message) {
  // Never with a secret in it.
  std::string m = RedactSecretValues(spec, message);
  if (m.size() > kMaxRankMessageBytes) {
    size_t n = kMaxRankMessageBytes - 3;
    while (n > 0 && (static_cast<unsigned char>(m[n]) & 0xc0) == 0x80) --n;
    m.resize(n);
    m += "...";
  }
  return m;
}

// A rank the agent stopped itself when it lost contact (fenced) becomes Gone: the gang
// is given up as Lost (Evaluate), not failed.
void UpdateRank(const JobSpec& spec, Rank& r, const protocol::TaskStatus& t) {
  if (Exited(t) && t.fenced) {
    r.state = RankState::kGone;
    r.message = RankMessage(spec, t.message);
  } else if (Exited(t)) {
    r.state = RankState::kExited;
    r.exit_code = t.exit_code;
    r.signal = t.signal;
    r.message = RankMessage(spec, t.message);
  } else if (!RankDone(r.state)) {
    r.state = t.state == protocol::TaskState::kRunning ? RankState::kRunning : RankState::kStarting;
  }
}

// The image a rank's node resolved the job's image to, kept on the attempt (the run's
// environment, and what `runs rerun` pins) the first time a rank reports it.
void RecordImage(Ctx& c, JobEntry& e, const protocol::TaskStatus& t) {
  if (t.image_digest.empty()) return;
  if (e.job.attempts.empty() || e.job.attempts.back().end_time) return;
  Attempt& a = e.job.attempts.back();
  if (a.index != t.attempt || !a.image_digest.empty()) return;
  a.image_digest = t.image_digest;
  c.PutJob(e.job);
}

// The rank `t` is about, when it belongs to the open attempt of an active job and runs
// on `node`.
std::pair<JobEntry*, Rank*> FindRank(ClusterState& s, const std::string& node,
                                     const protocol::TaskStatus& t) {
  auto it = s.jobs.find(t.job_id);
  if (it == s.jobs.end() || !it->second.gang || it->second.gang->attempt != t.attempt) {
    return {nullptr, nullptr};
  }
  auto& ranks = it->second.gang->ranks;
  if (t.rank < 0 || static_cast<size_t>(t.rank) >= ranks.size()) return {nullptr, nullptr};
  Rank& r = ranks[static_cast<size_t>(t.rank)];
  if (r.node != node) return {nullptr, nullptr};
  return {&it->second, &r};
}

protocol::Command StopCommand(const std::string& task_id, Duration grace) {
  protocol::Command c;
  c.kind = protocol::Command::Kind::kStop;
  c.task_id = task_id;
  c.grace = grace;
  return c;
}

}  // namespace

Status ApplyRegistered(Ctx& c, const AgentRegistered& ev) {
  const protocol::Registration& reg = ev.registration;
  const std::string& name = reg.node.name;
  NodeEntry& n = c.s.nodes[name];
  const bool known = !n.node.name.empty();
  const Node before = n.node;  // as stored
  Node incoming = reg.node;
  incoming.state = known ? n.node.state : NodeState::kNotReady;
  incoming.state_reason = n.node.state_reason;
  n.node = incoming;
  n.address = reg.address;
  n.simulated = reg.simulated;
  n.limits = reg.limits;
  n.containers = reg.containers;
  const bool was_unreachable = n.unreachable && !n.released;
  const Timestamp unreachable_at = n.unreachable_at;
  n.connected = true;
  n.unreachable = false;
  n.released = false;
  n.healthy = true;
  n.last_heartbeat = c.now;
  // What was queued for the agent's last life is of no use to this one.
  n.outbox.clear();
  {
    Node stored = n.node;
    stored.state = EffectiveState(n);
    stored.state_reason = !known || stored.state == NodeState::kReady ? "" : stored.state_reason;
    // Unchanged (an agent back after a blip, or every agent when a new leader starts):
    // nothing to write, so a thousand nodes re-registering cost no thousand commits.
    if (!known || stored != before) {
      if (c.record()) c.fx.batch.PutNode(stored);
    }
    n.node = std::move(stored);
  }
  c.TouchNode(name);
  n.health_check.reset();
  ApplyHealthCheck(c, n, reg.health_check);
  std::set<JobId> touched;
  std::set<std::string> reported;
  for (const protocol::TaskStatus& t : reg.tasks) {
    reported.insert(t.task_id);
    auto [e, r] = FindRank(c.s, name, t);
    if (e == nullptr || r->state == RankState::kGone) {
      if (!Exited(t)) c.fx.stop.push_back(t.task_id);
      continue;
    }
    UpdateRank(e->job.spec, *r, t);
    RecordImage(c, *e, t);
    touched.insert(e->job.id);
    if (!Exited(t) && Leaving(*e)) {
      // Still running but the gang is on its way out: stop it (again).
      c.fx.stop.push_back(t.task_id);
    }
  }
  // Ranks that should be here but the agent does not know: the agent lost them.
  std::set<JobId> staging_here;
  for (auto& [id, e] : c.s.jobs) {
    if (!e.gang) continue;
    for (Rank& r : e.gang->ranks) {
      if (r.node != name || RankDone(r.state)) continue;
      if (reported.contains(protocol::TaskId(id, e.gang->attempt, r.rank))) continue;
      if (r.state == RankState::kStaging) {
        // Not started yet: ask this agent for the data again (staging is idempotent).
        staging_here.insert(id);
        continue;
      }
      if (r.state == RankState::kSent) {
        // Its start may not have reached this agent: send it again (starts are idempotent).
        protocol::Command cmd;
        cmd.kind = protocol::Command::Kind::kStart;
        cmd.start = BuildStart(c.s, e, r);
        r.sent_at = c.now;
        c.Push(name, std::move(cmd));
        continue;
      }
      r.state = RankState::kGone;
      r.message = "not running on " + name + " when its agent registered";
      touched.insert(id);
      if (!Leaving(e)) {
        TY_RETURN_IF_ERROR(
            StopGang(c, e, Stopping::kLost, "rank " + std::to_string(r.rank) + " " + r.message));
      }
    }
  }
  if (was_unreachable && c.record()) {
    for (JobId id : touched) {
      const JobEntry& e = c.s.jobs.at(id);
      if (Leaving(e)) continue;
      c.AppendEvent(id, "server", "NodeReachable",
                    "node " + name + " back after " + FormatDuration(c.now - unreachable_at) +
                        " NotReady; the job kept running");
    }
  }
  for (JobId id : staging_here) {
    JobEntry& e = c.s.jobs.at(id);
    if (!Leaving(e)) SendStage(c, e, name);
  }
  for (JobId id : touched) TY_RETURN_IF_ERROR(Evaluate(c, id));
  c.Dirty();
  return Status::Ok();
}

Status ApplyHeartbeat(Ctx& c, const AgentHeartbeat& ev) {
  const protocol::Heartbeat& hb = ev.heartbeat;
  auto nit = c.s.nodes.find(hb.node);
  if (nit == c.s.nodes.end() || !nit->second.connected) {
    return NotFound("unknown node " + hb.node);
  }
  NodeEntry& n = nit->second;
  n.last_heartbeat = c.now;
  ApplyHealthCheck(c, n, hb.health_check);
  if (n.healthy != hb.health_ok) {
    n.healthy = hb.health_ok;
    n.health_message = hb.health_message;
    SyncNode(c, n, "unhealthy: " + hb.health_message);
    c.Dirty();
  }
  std::set<JobId> touched;
  for (const protocol::TaskStatus& t : hb.tasks) {
    auto [e, r] = FindRank(c.s, hb.node, t);
    if (e == nullptr) {
      if (!Exited(t)) c.Push(hb.node, StopCommand(t.task_id, c.s.options.stop_grace));
      continue;
    }
    if (r->state == RankState::kGone) continue;
    UpdateRank(e->job.spec, *r, t);
    RecordImage(c, *e, t);
    touched.insert(e->job.id);
  }
  for (JobId id : touched) TY_RETURN_IF_ERROR(Evaluate(c, id));
  // Data staged (or failing) here may let a waiting gang start (or end its attempt).
  n.datasets = hb.datasets;
  {
    std::vector<std::string> cached;
    for (const protocol::DatasetStatus& d : hb.datasets) {
      if (d.state == protocol::DatasetState::kReady) cached.push_back(d.version);
    }
    std::sort(cached.begin(), cached.end());
    if (cached != n.node.cached_data) {
      n.node.cached_data = std::move(cached);
      c.TouchNode(hb.node);  // the scheduler prefers nodes holding a job's data
      c.Dirty();
    }
  }
  if (!c.s.staging.empty()) {
    const std::vector<JobId> waiting(c.s.staging.begin(), c.s.staging.end());
    for (JobId id : waiting) {
      JobEntry* e = c.s.FindJob(id);
      const bool staging =
          e != nullptr && e->gang &&
          std::any_of(e->gang->ranks.begin(), e->gang->ranks.end(),
                      [](const Rank& r) { return r.state == RankState::kStaging; });
      if (!staging) {
        c.s.staging.erase(id);
        continue;
      }
      const bool here = std::any_of(e->gang->ranks.begin(), e->gang->ranks.end(),
                                    [&](const Rank& r) { return r.node == hb.node; });
      if (!here) continue;
      TY_RETURN_IF_ERROR(AdvanceStaging(c, *e));
      TY_RETURN_IF_ERROR(Evaluate(c, id));
    }
  }
  // An exit is acknowledged once its attempt's end is recorded (or it belongs to
  // nothing the server knows), so a restarted server hears of it again otherwise.
  for (const protocol::TaskStatus& t : hb.tasks) {
    if (!Exited(t)) continue;
    auto [e, r] = FindRank(c.s, hb.node, t);
    if (e == nullptr) c.fx.acks.push_back(t.task_id);
  }
  return Status::Ok();
}

Status ApplyTick(Ctx& c, const Tick&) {
  const LifecycleOptions& o = c.s.options;
  for (auto& [name, n] : c.s.nodes) {
    const Duration silent = c.now - n.last_heartbeat;
    if (silent <= o.node_timeout) continue;
    if (n.connected) {
      n.connected = false;
      n.unreachable = true;
      n.unreachable_at = c.now;
      n.outbox.clear();
      c.fx.disconnected.push_back(name);
      SyncNode(c, n, "no heartbeat for " + FormatDuration(silent));
      c.Dirty();
      if (o.node_lost_grace.count() > 0 && c.record()) {
        // Its gangs keep running for the grace; say so on each.
        const std::string message =
            "node " + name + " not heard from for " + FormatDuration(silent) +
            "; the job keeps running there and is given up if the node is still silent in " +
            FormatDuration(o.node_lost_grace);
        const std::string& node = name;  // a lambda may not capture a structured binding (clang 14)
        for (auto& [id, e] : c.s.jobs) {
          if (!e.gang) continue;
          if (std::any_of(e.gang->ranks.begin(), e.gang->ranks.end(),
                          [&](const Rank& r) { return r.node == node && !RankDone(r.state); })) {
            c.AppendEvent(id, "server", "NodeUnreachable", message);
          }
        }
      }
    }
    if (n.released || silent <= o.node_timeout + o.node_lost_grace) continue;
    n.released = true;
    TY_RETURN_IF_ERROR(GiveUpNode(c, name, "no heartbeat for " + FormatDuration(silent)));
  }
  std::vector<JobId> over_limit;
  for (auto& [id, e] : c.s.jobs) {
    if (!e.gang) continue;
    const Attempt* a = e.job.CurrentAttempt();
    if (e.gang->stopping == Stopping::kNone && e.job.state == JobState::kRunning && a &&
        e.job.spec.time_limit.count() > 0 && c.now - a->start_time > e.job.spec.time_limit) {
      over_limit.push_back(id);
    }
    for (Rank& r : e.gang->ranks) {
      if (r.state == RankState::kStaging && c.now - r.sent_at >= o.start_resend) {
        // No word of its data from the node yet: ask again (staging is idempotent).
        const NodeEntry* n = c.s.FindNode(r.node);
        if (n == nullptr || !n->connected) continue;
        const bool reported =
            std::all_of(e.job.spec.data.begin(), e.job.spec.data.end(), [&](const DataSpec& d) {
              return d.stage != DataStage::kLocal ||
                     std::any_of(
                         n->datasets.begin(), n->datasets.end(),
                         [&](const protocol::DatasetStatus& s) { return s.version == d.version; });
            });
        if (!reported) {
          for (Rank& other : e.gang->ranks) {
            if (other.node == r.node && other.state == RankState::kStaging) other.sent_at = c.now;
          }
          SendStage(c, e, r.node);
        }
        continue;
      }
      if (r.state != RankState::kSent || c.now - r.sent_at < o.start_resend) continue;
      auto n = c.s.nodes.find(r.node);
      if (n == c.s.nodes.end() || !n->second.connected) continue;
      protocol::Command cmd;
      cmd.kind = protocol::Command::Kind::kStart;
      cmd.start = BuildStart(c.s, e, r);
      r.sent_at = c.now;
      c.Push(r.node, std::move(cmd));
    }
  }
  for (JobId id : over_limit) {
    JobEntry& e = c.s.jobs.at(id);
    TY_RETURN_IF_ERROR(
        StopGang(c, e, Stopping::kTimeLimit,
                 std::string(kTimeLimitPrefix) + ": " + FormatDuration(e.job.spec.time_limit)));
  }
  return Status::Ok();
}

Status ApplyNodeLost(Ctx& c, const NodeLost& ev) {
  if (!c.s.nodes.contains(ev.node)) {
    return NotFound("node " + QuoteForMessage(ev.node) + " does not exist");
  }
  return GiveUpNode(c, ev.node, ev.why);
}

Status ApplySetNodeState(Ctx& c, const SetNodeState& ev) {
  auto it = c.s.nodes.find(ev.node);
  if (it == c.s.nodes.end()) {
    return NotFound("node " + QuoteForMessage(ev.node) + " does not exist");
  }
  NodeEntry& n = it->second;
  n.set_state = ev.state;
  const std::string verb = ev.state == NodeState::kReady      ? "uncordoned"
                           : ev.state == NodeState::kCordoned ? "cordoned"
                           : ev.state == NodeState::kDraining
                               ? "drained"
                               : "set " + std::string(NodeStateName(ev.state));
  SyncNode(c, n, ev.reason.empty() ? verb + " by " + ev.actor : ev.reason);
  c.Dirty();
  if (ev.state != NodeState::kDraining || !ev.evict) return Status::Ok();
  // Drain: move every gang with a rank here off the node, as a preemption.
  std::vector<JobId> ids;
  for (const auto& [id, e] : c.s.jobs) {
    if (!e.gang) continue;
    for (const Rank& r : e.gang->ranks) {
      if (r.node == ev.node && !RankDone(r.state)) {
        ids.push_back(id);
        break;
      }
    }
  }
  for (JobId id : ids) {
    auto jit = c.s.jobs.find(id);
    if (jit == c.s.jobs.end()) continue;
    JobEntry& e = jit->second;
    if (Leaving(e)) continue;
    if (e.job.state == JobState::kRunning) {
      TY_RETURN_IF_ERROR(Preempt(c, e, "node " + ev.node + " is being drained", ev.actor));
    } else {
      TY_RETURN_IF_ERROR(
          StopGang(c, e, Stopping::kRequeue, "node " + ev.node + " is being drained"));
      TY_RETURN_IF_ERROR(Evaluate(c, id));
    }
  }
  return Status::Ok();
}

}  // namespace trainyard::lifecycle::internal
