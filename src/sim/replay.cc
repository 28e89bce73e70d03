#include "sim/replay.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "lifecycle/lifecycle.h"
#include "sched/contract.h"
#include "sched/schedule.h"

namespace trainyard::sim {
namespace {

using sched::Placement;

Timestamp At(Duration d) { return Timestamp(d); }
Duration Offset(Timestamp t) { return t.time_since_epoch(); }
std::string When(Timestamp t) { return FormatDuration(Offset(t)); }

// A job as the replay's world tracks it; the job itself (its lifecycle and what the
// scheduler sees of it) is the ClusterState's.
struct JobRun {
  const ScenarioJob* spec = nullptr;
  ReplayState state = ReplayState::kNotSubmitted;
  bool held = false;
  // While Running or Preempting:
  std::vector<Placement> replicas;
  Timestamp start{};
  std::optional<Timestamp> last_checkpoint;
  Timestamp leaves_at{};  // Preempting: when it stops
  // Across attempts:
  Duration saved{0};  // work kept by checkpoints of earlier attempts
  JobOutcome outcome;

  int64_t Gpus() const {
    return std::max<int64_t>(spec->per_replica.gpus * static_cast<int64_t>(replicas.size()), 1);
  }
  // When this attempt ends by itself, and whether by its time limit.
  std::optional<std::pair<Timestamp, bool>> NaturalEnd() const {
    std::optional<std::pair<Timestamp, bool>> end;
    if (spec->duration) end = {start + std::max(Duration{0}, *spec->duration - saved), false};
    if (spec->time_limit.count() > 0) {
      Timestamp limit = start + spec->time_limit;
      if (!end || limit < end->first) end = {limit, true};
    }
    return end;
  }
  Duration LostWorkAt(Timestamp now) const {
    Timestamp since = last_checkpoint && *last_checkpoint > start ? *last_checkpoint : start;
    return std::max(Duration{0}, now - since) * Gpus();
  }
};

// The replay drives the job lifecycle the server runs (lifecycle/lifecycle.h) with the
// scenario's events and what its jobs do by themselves; it records what it saw.
class Replayer {
 public:
  explicit Replayer(const Scenario& sc) : sc_(sc), state_(OptionsFor(sc)) {
    for (const PriorityClass& pc : sc.priority_classes) state_.classes.try_emplace(pc.name, pc);
    for (const Queue& q : sc.queues) state_.queues[{q.tenant, q.name}] = q;
    for (const Node& n : sc.nodes) {
      lifecycle::NodeEntry& e = state_.nodes[n.name];
      e.node = n;
      e.connected = true;
      e.set_state = n.state;
    }
    state_.snapshot.SetNodes(sc.nodes);
    state_.snapshot.SetQueues(sc.queues);
    for (const ScenarioJob& j : sc.jobs) {
      JobRun& r = jobs_[j.id];
      r.spec = &j;
      TY_CHECK_MSG(sc.FindPriorityClass(j.priority) != nullptr,
                   "scenario job with an unknown priority class");
      r.outcome.id = j.id;
      r.outcome.name = j.name;
    }
  }

  ReplayResult Run() {
    for (size_t i = 0; i < sc_.steps.size() && result_.ok(); ++i) Step(i);
    for (auto& [id, r] : jobs_) {
      r.outcome.state = r.state;
      result_.jobs.push_back(r.outcome);
    }
    return std::move(result_);
  }

 private:
  static lifecycle::LifecycleOptions OptionsFor(const Scenario& sc) {
    lifecycle::LifecycleOptions o;
    o.policy = sc.policy;
    o.record = false;
    o.agents = false;
    o.check_tenancy = false;  // the scenario's parser checked its classes and queues
    o.max_unfinished_jobs_per_tenant = std::numeric_limits<int64_t>::max();
    return o;
  }

  // Applies `event` at `at`; the scenario was checked, so a refusal is a broken
  // invariant.
  void Apply(const lifecycle::Event& event, Timestamp at) {
    Result<lifecycle::Effects> fx = lifecycle::Apply(state_, event, at);
    TY_CHECK_MSG(fx.ok(), "replay: the job lifecycle refused an event");
  }

  // Every rank of the job's open attempt exited (stopped by a signal unless `done`).
  void GangExited(JobId id, Timestamp at, bool done) {
    const lifecycle::JobEntry* e = state_.FindJob(id);
    // A gang whose ranks were all on a node that went Down was requeued already.
    if (e == nullptr || !e->gang) return;
    Apply(lifecycle::GangExited{id, 0, done ? 0 : SIGTERM}, at);
  }

  void Step(size_t i) {
    const ScenarioStep& step = sc_.steps[i];
    const Timestamp now = At(step.at);
    StepOutcome out;
    out.number = static_cast<int>(i) + 1;
    out.at = step.at;
    events_ = &out.events;

    // (a) Preempted jobs whose grace is over leave.
    for (auto& [id, r] : jobs_) {
      if (r.state == ReplayState::kPreempting && r.leaves_at <= now) {
        Requeue(r, now, "preempted at " + When(r.leaves_at - r.spec->preempt_grace), false);
      }
    }
    // (b) Jobs end by themselves, or checkpoint.
    for (auto& [id, r] : jobs_) {
      if (r.state != ReplayState::kRunning) continue;
      if (auto end = r.NaturalEnd(); end && end->first <= now) {
        Finish(r, end->first, end->second ? ReplayState::kTimedOut : ReplayState::kSucceeded);
        continue;
      }
      const Duration every = r.spec->checkpoint_interval;
      if (every.count() <= 0) continue;
      Timestamp base = r.last_checkpoint.value_or(r.start);
      if (now - base >= every) {
        Checkpoint(r, base + ((now - base) / every) * every);
        Event(ReplayEvent::Kind::kCheckpoint, r.spec->id, *r.last_checkpoint,
              "every " + FormatDuration(every));
      }
    }
    // (c) The step's own events.
    if (!ApplyEvents(i, now)) return;

    const sched::Snapshot& snap = state_.snapshot.Prepare(now);
    out.decisions = sched::Schedule(snap, sc_.policy);
    for (sched::Violation& v : sched::CheckDecisions(snap, sc_.policy, out.decisions)) {
      out.violations.push_back(std::move(v.message));
    }
    ApplyDecisions(out.decisions, now);
    result_.steps.push_back(std::move(out));
  }

  void Event(ReplayEvent::Kind kind, JobId job, Timestamp at, std::string detail = "") {
    events_->push_back(ReplayEvent{kind, job, "", Offset(at), std::move(detail)});
  }

  void Fail(size_t step, const std::string& field, std::string message) {
    const ScenarioStep& s = sc_.steps[step];
    result_.errors.push_back(Diagnostic{sc_.file, s.LineOf(field),
                                        "steps[" + std::to_string(step) + "]." + field,
                                        std::move(message)});
  }

  void Checkpoint(JobRun& r, Timestamp at) {
    r.last_checkpoint = at;
    lifecycle::ReportCheckpoint c;
    c.id = r.spec->id;
    c.path = "checkpoint";
    c.actor = "scenario";
    Apply(c, at);
  }

  bool ApplyEvents(size_t i, Timestamp now) {
    const ScenarioStep& step = sc_.steps[i];
    const std::string when = " at " + When(now);
    auto state_of = [&](JobId id) { return std::string(ReplayStateName(jobs_[id].state)); };
    for (const auto& [name, state] : step.node_state) {
      // The state alone, as the scheduler sees it: a Draining node's jobs run on.
      Apply(lifecycle::SetNodeState{name, state, "scenario", "scenario", /*evict=*/false}, now);
      events_->push_back(ReplayEvent{ReplayEvent::Kind::kNodeState, 0, name, Offset(now),
                                     std::string(NodeStateName(state))});
      if (state != NodeState::kDown) continue;
      Apply(lifecycle::NodeLost{name, "went Down"}, now);
      for (auto& [id, r] : jobs_) {
        if (r.state != ReplayState::kRunning && r.state != ReplayState::kPreempting) continue;
        bool on_node = std::any_of(r.replicas.begin(), r.replicas.end(),
                                   [&node = name](const Placement& p) { return p.node == node; });
        if (on_node) Requeue(r, now, "node " + name + " went Down", true);
      }
    }
    for (JobId id : step.finish) {
      JobRun& r = jobs_[id];
      if (r.state != ReplayState::kRunning && r.state != ReplayState::kPreempting) {
        Fail(i, "finish",
             "job " + std::to_string(id) + " is " + state_of(id) + when +
                 ", not running; only a running job can finish");
        return false;
      }
      const bool preempting = r.state == ReplayState::kPreempting;
      r.state = ReplayState::kSucceeded;
      r.outcome.end = Offset(now);
      r.replicas.clear();
      GangExited(id, now, true);
      // A preempted gang that exits is requeued; this one has done its work.
      if (preempting) Apply(lifecycle::CancelJob{id, "scenario"}, now);
      Event(ReplayEvent::Kind::kFinished, id, now);
    }
    for (JobId id : step.checkpoint) {
      JobRun& r = jobs_[id];
      if (r.state != ReplayState::kRunning) {
        Fail(i, "checkpoint",
             "job " + std::to_string(id) + " is " + state_of(id) + when +
                 "; only a running job can complete a checkpoint");
        return false;
      }
      Checkpoint(r, now);
      Event(ReplayEvent::Kind::kCheckpoint, id, now);
    }
    for (JobId id : step.submit) {
      JobRun& r = jobs_[id];
      r.state = ReplayState::kPending;
      lifecycle::SubmitJobs submit;
      submit.specs.push_back(SpecOf(*r.spec));
      submit.first_id = id;
      submit.actor = "scenario";
      submit.excluded_nodes.push_back(r.spec->exclude);
      Apply(submit, now);
      Event(ReplayEvent::Kind::kSubmitted, id, now);
    }
    for (JobId id : step.hold) {
      JobRun& r = jobs_[id];
      if (r.state != ReplayState::kPending || r.held) {
        Fail(i, "hold",
             "job " + std::to_string(id) + " is " + (r.held ? "already held" : state_of(id)) +
                 when + "; only a pending job can be held");
        return false;
      }
      r.held = true;
      Apply(lifecycle::HoldJob{id, true, "scenario"}, now);
      Event(ReplayEvent::Kind::kHeld, id, now);
    }
    for (JobId id : step.release) {
      JobRun& r = jobs_[id];
      if (!r.held) {
        Fail(i, "release", "job " + std::to_string(id) + " is not held" + when);
        return false;
      }
      r.held = false;
      // A job held while Pending is released in the lifecycle; the world's flag follows
      // a job that was held when it was not pending any more.
      const lifecycle::JobEntry* e = state_.FindJob(id);
      if (e != nullptr && e->job.held) Apply(lifecycle::HoldJob{id, false, "scenario"}, now);
      Event(ReplayEvent::Kind::kReleased, id, now);
    }
    return true;
  }

  static JobSpec SpecOf(const ScenarioJob& j) {
    JobSpec s;
    s.name = j.name;
    s.tenant = j.tenant;
    s.queue = j.queue;
    s.priority = j.priority;
    s.replicas = j.replicas;
    s.min_replicas = j.min_replicas;
    s.resources = j.per_replica;
    s.topology = j.topology;
    s.time_limit = j.time_limit;
    s.checkpoint.preempt_grace = j.preempt_grace;
    for (const std::string& d : j.data) {
      s.data.push_back(
          {d, ScenarioDataVersion(d), "/data/" + d, DataStage::kLocal, "/scenario/" + d});
    }
    return s;
  }

  // Back to Pending from Running or Preempting; `lose`: charge the lost work now (a
  // preemption was charged when it was decided).
  void Requeue(JobRun& r, Timestamp now, std::string why, bool lose) {
    if (lose) {
      const Duration lost = r.LostWorkAt(now);
      r.outcome.lost_gpu_time += lost;
      char hours[32];
      std::snprintf(hours, sizeof hours, "%.2f", static_cast<double>(lost.count()) / 3'600'000.0);
      why += "; " + std::string(hours) + " GPU-h lost";
    }
    if (r.last_checkpoint && *r.last_checkpoint > r.start) r.saved += *r.last_checkpoint - r.start;
    r.state = ReplayState::kPending;
    r.replicas.clear();
    r.last_checkpoint.reset();
    GangExited(r.spec->id, now, false);
    Event(ReplayEvent::Kind::kRequeued, r.spec->id, now, std::move(why));
  }

  void Finish(JobRun& r, Timestamp at, ReplayState state) {
    r.state = state;
    r.outcome.end = Offset(at);
    r.replicas.clear();
    // A job stopped at its time limit is killed; one that is done exits 0.
    if (state == ReplayState::kTimedOut) {
      if (state_.FindJob(r.spec->id) != nullptr) {
        Apply(lifecycle::GangExited{r.spec->id, 0, SIGKILL}, at);
      }
    } else {
      GangExited(r.spec->id, at, true);
    }
    Event(state == ReplayState::kTimedOut ? ReplayEvent::Kind::kTimedOut
                                          : ReplayEvent::Kind::kSucceeded,
          r.spec->id, at, "ran " + FormatDuration(at - r.start));
  }

  void ApplyDecisions(const sched::Decisions& d, Timestamp now) {
    Result<lifecycle::Effects> fx = lifecycle::ApplyDecisions(state_, d, nullptr, now);
    TY_CHECK_MSG(fx.ok(), "replay: the job lifecycle refused a pass's decisions");
    for (const sched::Bind& b : d.binds) {
      auto it = jobs_.find(b.job);
      if (it == jobs_.end() || it->second.state != ReplayState::kPending) continue;
      JobRun& r = it->second;
      Apply(lifecycle::GangRunning{b.job}, now);
      r.state = ReplayState::kRunning;
      r.start = now;
      r.replicas = b.replicas;
      r.last_checkpoint.reset();
      ++r.outcome.starts;
      if (!r.outcome.first_start) r.outcome.first_start = Offset(now);
      r.outcome.last_start = Offset(now);
    }
    for (const sched::Preempt& p : d.preemptions) {
      auto it = jobs_.find(p.job);
      if (it == jobs_.end() || it->second.state != ReplayState::kRunning) continue;
      JobRun& r = it->second;
      r.state = ReplayState::kPreempting;
      r.leaves_at = now + r.spec->preempt_grace;
      ++r.outcome.preemptions;
      r.outcome.lost_gpu_time += p.lost_gpu_time;
    }
    for (const sched::Waiting& w : d.waiting) {
      if (auto it = jobs_.find(w.job); it != jobs_.end())
        it->second.outcome.reason = w.reason.str();
    }
    for (const sched::Infeasible& inf : d.infeasible) {
      auto it = jobs_.find(inf.job);
      if (it == jobs_.end() || it->second.state != ReplayState::kPending) continue;
      it->second.state = ReplayState::kInfeasible;
      it->second.outcome.reason = inf.reason;
      // Never considered again: this cluster does not change.
      Apply(lifecycle::CancelJob{inf.job, "scenario"}, now);
    }
    for (const sched::Bind& b : d.binds) {
      if (auto it = jobs_.find(b.job); it != jobs_.end()) it->second.outcome.reason.clear();
    }
  }

  const Scenario& sc_;
  lifecycle::ClusterState state_;
  std::map<JobId, JobRun> jobs_;
  ReplayResult result_;
  std::vector<ReplayEvent>* events_ = nullptr;
};

}  // namespace

std::string_view ReplayStateName(ReplayState s) {
  switch (s) {
    case ReplayState::kNotSubmitted:
      return "NotSubmitted";
    case ReplayState::kPending:
      return "Pending";
    case ReplayState::kRunning:
      return "Running";
    case ReplayState::kPreempting:
      return "Preempting";
    case ReplayState::kSucceeded:
      return "Succeeded";
    case ReplayState::kTimedOut:
      return "TimedOut";
    case ReplayState::kInfeasible:
      return "Infeasible";
  }
  return "Unknown";
}

std::string_view ReplayEventName(ReplayEvent::Kind k) {
  switch (k) {
    case ReplayEvent::Kind::kNodeState:
      return "node";
    case ReplayEvent::Kind::kSucceeded:
      return "succeeded";
    case ReplayEvent::Kind::kTimedOut:
      return "timed-out";
    case ReplayEvent::Kind::kFinished:
      return "finish";
    case ReplayEvent::Kind::kRequeued:
      return "requeue";
    case ReplayEvent::Kind::kCheckpoint:
      return "checkpoint";
    case ReplayEvent::Kind::kSubmitted:
      return "submit";
    case ReplayEvent::Kind::kHeld:
      return "hold";
    case ReplayEvent::Kind::kReleased:
      return "release";
  }
  return "unknown";
}

size_t ReplayResult::Violations() const {
  size_t n = 0;
  for (const StepOutcome& s : steps) n += s.violations.size();
  return n;
}

ReplayResult Replay(const Scenario& scenario) { return Replayer(scenario).Run(); }

}  // namespace trainyard::sim
