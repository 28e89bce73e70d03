// The Cluster and its agents: registration, heartbeats (and the telemetry they carry),
// long polls for commands, injected faults, and the periodic Tick.
#include <algorithm>
#include <future>
#include <set>

#include "core/names.h"
#include "server/cluster_impl.h"

namespace trainyard::server {

// --- registration and heartbeats --------------------------------------------------------

Result<RegisterReply> Cluster::Impl::Register(const Registration& reg) {
  const std::string& name = reg.node.name;
  TY_ASSIGN_OR_RETURN(lifecycle::Effects fx, Mutate([&](Timestamp now) {
                        Result<lifecycle::Effects> r =
                            lifecycle::Apply(state_, lifecycle::AgentRegistered{reg}, now);
                        if (!r.ok()) return r;
                        // A (re)started agent holds no faults: it gets the node's set if
                        // there is one. One that holds faults this process never sent
                        // says so in its heartbeats.
                        ExtrasLocked(name).sent_faults.clear();
                        SyncFaultsLocked(/*force_node_resend=*/false, name, *r);
                        return r;
                      }));
  RegisterReply reply;
  reply.heartbeat_interval = opt_.heartbeat_interval;
  reply.release_after = opt_.node_timeout + opt_.node_lost_grace;
  reply.stop = std::move(fx.stop);
  return reply;
}

Result<std::vector<std::string>> Cluster::Impl::HandleHeartbeat(const Heartbeat& hb) {
  TY_ASSIGN_OR_RETURN(lifecycle::Effects fx, Mutate([&](Timestamp now) {
                        Result<lifecycle::Effects> r =
                            lifecycle::Apply(state_, lifecycle::AgentHeartbeat{hb}, now);
                        if (!r.ok()) return r;
                        NodeExtras& x = ExtrasLocked(hb.node);
                        x.telemetry = hb.gpus;
                        x.links = hb.links;
                        x.disks = hb.disks;
                        // The agent's active faults differ from what it was last sent (this server
                        // restarted, or a command was lost): send its set again.
                        std::set<std::string> sent, held(hb.faults.begin(), hb.faults.end());
                        for (const FaultSpec& f : x.sent_faults) sent.insert(f.id);
                        if (sent != held) SyncFaultsLocked(/*force_node_resend=*/true, hb.node, *r);
                        return r;
                      }));
  return std::move(fx.acks);
}

Status Cluster::Impl::Tick() {
  // One change for every node that went silent, every gang given up, every time limit:
  // one batch, one commit.
  return Mutate([&](Timestamp now) {
           Result<lifecycle::Effects> r = lifecycle::Apply(state_, lifecycle::Tick{}, now);
           if (!r.ok()) return r;
           // Expired faults, and comm-slow following gangs that started or stopped.
           SyncFaultsLocked(false, "", *r);
           return r;
         })
      .status();
}

bool Cluster::Impl::KnowsTask(const std::string& node, JobId job, int32_t attempt) {
  std::lock_guard lk(mu_);
  auto it = state_.jobs.find(job);
  if (it != state_.jobs.end()) {
    const auto& attempts = it->second.job.attempts;
    if (attempt < 0 || static_cast<size_t>(attempt) >= attempts.size()) return false;
    const auto& nodes = attempts[static_cast<size_t>(attempt)].nodes;
    return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
  }
  // A finished job's last output may still arrive after it ended.
  return job > 0;
}

// --- polls --------------------------------------------------------------------------------

namespace {

// Whether the node's oldest queued command may be delivered: its change is durable.
bool Deliverable(const lifecycle::NodeEntry& n, uint64_t published) {
  return !n.outbox.empty() && n.outbox.front().after_seq <= published;
}

}  // namespace

void Cluster::Impl::PollAsync(const std::string& node, Duration wait, PollDone done) {
  std::lock_guard lk(mu_);
  lifecycle::NodeEntry* n = state_.FindNode(node);
  if (n == nullptr || !n->connected) return done(NotFound("unknown node " + node));
  if (Deliverable(*n, published_seq_) || shutdown_ || wait.count() <= 0) {
    return done(TakeCommandsLocked(*n));
  }
  auto w = std::make_shared<PollWaiter>();
  w->node = node;
  w->done = std::move(done);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  const bool earliest = poll_deadlines_.empty() || deadline < poll_deadlines_.begin()->first;
  w->at = poll_deadlines_.emplace(deadline, w);
  ExtrasLocked(node).polls.push_back(std::move(w));
  if (earliest) poll_timer_cv_.notify_all();
}

Result<std::vector<Command>> Cluster::Impl::Poll(const std::string& node, Duration wait) {
  std::promise<Result<std::vector<Command>>> answer;
  std::future<Result<std::vector<Command>>> got = answer.get_future();
  PollAsync(node, wait,
            [&answer](Result<std::vector<Command>> r) { answer.set_value(std::move(r)); });
  return got.get();
}

std::vector<Command> Cluster::Impl::TakeCommandsLocked(lifecycle::NodeEntry& n) {
  std::vector<Command> out;
  while (Deliverable(n, published_seq_)) {
    out.push_back(std::move(n.outbox.front().command));
    n.outbox.pop_front();
  }
  return out;
}

void Cluster::Impl::FinishPollLocked(NodeExtras& x,
                                     std::deque<std::shared_ptr<PollWaiter>>::iterator which,
                                     Result<std::vector<Command>> r) {
  std::shared_ptr<PollWaiter> w = std::move(*which);
  x.polls.erase(which);
  poll_deadlines_.erase(w->at);
  w->done(std::move(r));
}

void Cluster::Impl::WakePollsLocked(const std::string& node) {
  auto xit = extras_.find(node);
  if (xit == extras_.end() || xit->second.polls.empty()) return;
  NodeExtras& x = xit->second;
  lifecycle::NodeEntry* n = state_.FindNode(node);
  if (n == nullptr || !n->connected) {
    while (!x.polls.empty()) FinishPollLocked(x, x.polls.begin(), NotFound("unknown node " + node));
    return;
  }
  // The oldest poll takes the commands; the others wait on, unless the server stops.
  if (Deliverable(*n, published_seq_)) {
    FinishPollLocked(x, x.polls.begin(), TakeCommandsLocked(*n));
  }
  if (shutdown_) {
    while (!x.polls.empty()) FinishPollLocked(x, x.polls.begin(), TakeCommandsLocked(*n));
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
      NodeExtras& x = extras_.at(w->node);  // a node's polls end before its extras go
      lifecycle::NodeEntry* n = state_.FindNode(w->node);
      Result<std::vector<Command>> r = std::vector<Command>{};
      if (n == nullptr || !n->connected) {
        r = NotFound("unknown node " + w->node);
      } else {
        r = TakeCommandsLocked(*n);
      }
      FinishPollLocked(x, std::find(x.polls.begin(), x.polls.end(), w), std::move(r));
    }
  }
  // Polls still waiting now are dropped unanswered: the Cluster is being destroyed,
  // after its API server (which answers its own waiting requests when it stops).
}

// --- faults -----------------------------------------------------------------------------

Result<InjectedFault> Cluster::Impl::InjectFault(const std::string& node, const std::string& kind,
                                                 int gpu, Duration duration,
                                                 const std::string& actor) {
  InjectedFault f;
  TY_RETURN_IF_ERROR(
      Mutate([&](Timestamp now) -> Result<lifecycle::Effects> {
        lifecycle::NodeEntry* n = state_.FindNode(node);
        if (n == nullptr) return NotFound("node " + QuoteForMessage(node) + " does not exist");
        if (!IsFaultKind(kind)) {
          std::string kinds;
          for (std::string_view k : kFaultKinds) {
            kinds += (kinds.empty() ? "" : ", ") + std::string(k);
          }
          return InvalidArgument("kind: unknown fault kind " + QuoteForMessage(kind) + "; one of " +
                                 kinds);
        }
        const int gpus = static_cast<int>(n->node.gpus.size());
        if (gpu < -1 || (gpu >= 0 && gpu >= std::max(gpus, 1))) {
          return InvalidArgument("gpu: node " + node + " has " + std::to_string(gpus) +
                                 " GPU(s) (indices 0.." + std::to_string(std::max(gpus, 1) - 1) +
                                 "), got " + std::to_string(gpu));
        }
        if (duration.count() < 0 || duration > std::chrono::hours(24 * 7)) {
          return InvalidArgument("duration: must be 0 (until cleared) up to 7d, got " +
                                 FormatDuration(duration));
        }
        TY_ASSIGN_OR_RETURN(FaultKind parsed, ParseFaultKind(kind));
        f.node = node;
        f.fault.id = "f-" + std::to_string(next_fault_++);
        f.fault.kind = parsed;
        f.fault.gpu = gpu;
        f.fault.until_ms = duration.count() > 0 ? (now + duration).time_since_epoch().count() : 0;
        f.created = now;
        f.actor = actor;
        ExtrasLocked(node).faults.push_back(f);
        lifecycle::Effects fx;
        SyncFaultsLocked(false, "", fx);
        return fx;
      }).status());
  return f;
}

Result<int> Cluster::Impl::ClearFaults(const std::string& node, const std::string& id) {
  int cleared = 0;
  TY_RETURN_IF_ERROR(Mutate([&](Timestamp) -> Result<lifecycle::Effects> {
                       if (!node.empty() && state_.FindNode(node) == nullptr) {
                         return NotFound("node " + QuoteForMessage(node) + " does not exist");
                       }
                       for (auto& [name, x] : extras_) {
                         if (!node.empty() && name != node) continue;
                         const size_t before = x.faults.size();
                         std::erase_if(x.faults, [&](const InjectedFault& f) {
                           return id.empty() || f.fault.id == id;
                         });
                         cleared += static_cast<int>(before - x.faults.size());
                       }
                       if (!id.empty() && cleared == 0) {
                         return NotFound("no fault " + QuoteForMessage(id) +
                                         (node.empty() ? std::string() : " on node " + node));
                       }
                       lifecycle::Effects fx;
                       SyncFaultsLocked(false, "", fx);
                       return fx;
                     }).status());
  return cleared;
}

std::vector<InjectedFault> Cluster::Impl::ListFaults() {
  std::lock_guard lk(mu_);
  std::vector<InjectedFault> out;
  for (const auto& [name, x] : extras_) out.insert(out.end(), x.faults.begin(), x.faults.end());
  return out;
}

void Cluster::Impl::SyncFaultsLocked(bool force_node_resend, const std::string& node,
                                     lifecycle::Effects& fx) {
  const bool any = std::any_of(extras_.begin(), extras_.end(), [](const auto& kv) {
    return !kv.second.faults.empty() || !kv.second.sent_faults.empty();
  });
  if (!any && !force_node_resend) return;
  const int64_t now_ms = clock_->Now().time_since_epoch().count();
  std::map<std::string, std::vector<FaultSpec>> want;
  for (auto& [name, x] : extras_) {
    std::erase_if(x.faults, [&](const InjectedFault& f) {
      return f.fault.until_ms != 0 && f.fault.until_ms <= now_ms;
    });
    std::vector<FaultSpec>& set = want[name];
    for (const InjectedFault& f : x.faults) set.push_back(f.fault);
  }
  // A link down slows every rank of the jobs that span the node (they wait on it in
  // their collectives): their other nodes get comm-slow for those jobs.
  for (const auto& [name, x] : extras_) {
    for (const InjectedFault& f : x.faults) {
      if (f.fault.kind != FaultKind::kLinkDown) continue;
      for (const auto& [id, e] : state_.jobs) {
        if (!e.gang) continue;
        const std::string& down = name;  // (clang 14 cannot capture a structured binding)
        const auto on = [&down](const lifecycle::Rank& r) {
          return r.node == down && !lifecycle::RankDone(r.state);
        };
        if (std::none_of(e.gang->ranks.begin(), e.gang->ranks.end(), on)) continue;
        std::set<std::string> others;
        for (const lifecycle::Rank& r : e.gang->ranks) {
          if (r.node != name && !lifecycle::RankDone(r.state)) others.insert(r.node);
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
  for (auto& [name, set] : want) {
    NodeExtras& x = ExtrasLocked(name);
    const bool forced = force_node_resend && name == node;
    if (!forced && set == x.sent_faults) continue;
    const lifecycle::NodeEntry* n = state_.FindNode(name);
    if (n == nullptr || !n->connected) continue;
    x.sent_faults = set;
    Command c;
    c.kind = Command::Kind::kFaults;
    c.faults = set;
    lifecycle::Push(state_, name, std::move(c), fx);
  }
}

}  // namespace trainyard::server
