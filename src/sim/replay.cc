#include "sim/replay.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "sched/schedule.h"

namespace trainyard::sim {
namespace {

using sched::Placement;

Timestamp At(Duration d) { return Timestamp(d); }
Duration Offset(Timestamp t) { return t.time_since_epoch(); }
std::string When(Timestamp t) { return FormatDuration(Offset(t)); }

// A job as the replay tracks it.
struct JobRun {
  const ScenarioJob* spec = nullptr;
  const PriorityClass* priority = nullptr;
  ReplayState state = ReplayState::kNotSubmitted;
  Timestamp submit_time{};
  bool held = false;
  // While Running or Preempting:
  std::vector<Placement> replicas;
  Timestamp start{};
  std::optional<Timestamp> last_checkpoint;
  Timestamp leaves_at{};  // Preempting: when it stops
  // Across attempts:
  Duration saved{0};     // work kept by checkpoints of earlier attempts
  Duration attained{0};  // GPU-time received by earlier attempts
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

// Checks one pass's decisions against the contracts sched::Schedule promises.
class DecisionChecker {
 public:
  DecisionChecker(const sched::Snapshot& s, const sched::Decisions& d, const sched::Policy& p)
      : snap_(s), dec_(d), policy_(p) {
    for (const auto& j : s.pending) pending_[j.id] = &j;
    for (const auto& j : s.running) running_[j.id] = &j;
    for (const auto& n : s.nodes) nodes_[n.name] = &n;
  }

  std::vector<std::string> Run() {
    CheckAnswers();
    TakeRunning();
    for (const auto& b : dec_.binds) CheckBind(b);
    std::set<JobId> victims;
    for (const auto& p : dec_.preemptions) {
      if (!victims.insert(p.job).second) Violation("job " + Id(p.job) + " is preempted twice");
      CheckPreempt(p);
    }
    for (const auto& r : dec_.reservations) CheckReserve(r);
    CheckQuotas();
    return std::move(out_);
  }

 private:
  static std::string Id(JobId id) { return std::to_string(id); }
  const sched::PendingJob* PendingOf(JobId id) const {
    auto it = pending_.find(id);
    return it == pending_.end() ? nullptr : it->second;
  }
  void Violation(std::string what) { out_.push_back(std::move(what)); }

  void CheckAnswers() {
    std::map<JobId, int> answered;
    auto count = [&](JobId id, const char* as) {
      ++answered[id];
      if (!pending_.count(id))
        Violation(std::string(as) + " for job " + Id(id) + ", which is not pending");
    };
    for (const auto& b : dec_.binds) count(b.job, "bind");
    for (const auto& w : dec_.waiting) count(w.job, "wait");
    for (const auto& i : dec_.infeasible) count(i.job, "infeasible");
    for (const auto& [id, job] : pending_) {
      int n = answered[id];
      if (n != 1) {
        Violation("pending job " + Id(id) + " is answered " + std::to_string(n) +
                  " times (bind, wait or infeasible); expected once");
      }
    }
    for (const auto& w : dec_.waiting) waiting_.insert(w.job);
    for (const auto& b : dec_.binds) bound_.insert(b.job);
  }

  void TakeRunning() {
    for (const auto& j : snap_.running) {
      for (const Placement& p : j.replicas) {
        for (int g : p.gpus) used_[p.node].insert(g);
        cpu_[p.node] += j.per_replica.milli_cpus;
        mem_[p.node] += j.per_replica.memory_bytes;
      }
    }
  }

  const Gpu* FindGpu(const Node& n, int index) const {
    for (const Gpu& g : n.gpus) {
      if (g.index == index) return &g;
    }
    return nullptr;
  }

  void CheckBind(const sched::Bind& b) {
    auto it = pending_.find(b.job);
    if (it == pending_.end()) return;  // reported by CheckAnswers
    const sched::PendingJob& j = *it->second;
    const std::string who = "bind of job " + Id(b.job) + ": ";
    const int64_t n = static_cast<int64_t>(b.replicas.size());
    if (n < std::max(1, j.min_replicas) || n > j.replicas) {
      Violation(who + std::to_string(n) + " replicas placed; the gang needs " +
                std::to_string(j.min_replicas) + " to " + std::to_string(j.replicas));
    }
    std::set<std::string> leaves, node_names, domains;
    for (const Placement& p : b.replicas) {
      auto nit = nodes_.find(p.node);
      if (nit == nodes_.end()) {
        Violation(who + "unknown node " + p.node);
        continue;
      }
      const Node& node = *nit->second;
      node_names.insert(node.name);
      leaves.insert(node.topology.leaf);
      if (!IsSchedulable(node.state)) {
        Violation(who + "node " + node.name + " is " + std::string(NodeStateName(node.state)));
      }
      if (std::find(j.excluded_nodes.begin(), j.excluded_nodes.end(), node.name) !=
          j.excluded_nodes.end()) {
        Violation(who + "node " + node.name + " is excluded for this job");
      }
      if (static_cast<int64_t>(p.gpus.size()) != j.per_replica.gpus) {
        Violation(who + "a replica on " + node.name + " got " + std::to_string(p.gpus.size()) +
                  " GPUs; it asks for " + std::to_string(j.per_replica.gpus));
      }
      for (int g : p.gpus) {
        const Gpu* gpu = FindGpu(node, g);
        if (gpu == nullptr) {
          Violation(who + "node " + node.name + " has no GPU " + std::to_string(g));
          continue;
        }
        domains.insert(gpu->nvlink_domain);
        if (!GpuTypeMatches(j.per_replica.gpu_type, gpu->model)) {
          Violation(who + node.name + " GPU " + std::to_string(g) + " is " + gpu->model + ", not " +
                    j.per_replica.gpu_type);
        }
        if (gpu->memory_bytes < j.per_replica.gpu_memory_bytes) {
          Violation(who + node.name + " GPU " + std::to_string(g) + " has too little memory");
        }
        if (!used_[node.name].insert(g).second) {
          Violation(who + node.name + " GPU " + std::to_string(g) + " is already in use");
        }
      }
      cpu_[node.name] += j.per_replica.milli_cpus;
      mem_[node.name] += j.per_replica.memory_bytes;
      if (cpu_[node.name] > node.milli_cpus || mem_[node.name] > node.memory_bytes) {
        Violation(who + node.name + " is over-committed on CPUs or memory");
      }
    }
    if (j.topology.hard && j.per_replica.gpus > 0) {
      switch (j.topology.constraint) {
        case TopologyConstraint::kSameNode:
          if (node_names.size() > 1) Violation(who + "spans nodes despite hard same-node");
          break;
        case TopologyConstraint::kSameLeaf:
          if (leaves.size() > 1) Violation(who + "spans leaves despite hard same-leaf");
          break;
        case TopologyConstraint::kSameNvlink:
          if (domains.size() > 1 || domains.count("") > 0) {
            Violation(who + "spans NVLink domains despite hard same-nvlink");
          }
          break;
        case TopologyConstraint::kNone:
          break;
      }
    }
  }

  // GPUs the jobs of one queue hold in the snapshot; with `with_binds`, also those
  // bound by this pass.
  int64_t QueueUse(const std::string& tenant, const std::string& queue, bool with_binds) const {
    int64_t used = 0;
    for (const auto& r : snap_.running) {
      if (r.tenant == tenant && r.queue == queue) used += r.Gpus();
    }
    if (!with_binds) return used;
    for (const auto& b : dec_.binds) {
      const sched::PendingJob* j = PendingOf(b.job);
      if (j != nullptr && j->tenant == tenant && j->queue == queue) {
        used += j->per_replica.gpus * static_cast<int64_t>(b.replicas.size());
      }
    }
    return used;
  }
  const Queue* FindQueue(const std::string& tenant, const std::string& name) const {
    for (const Queue& q : snap_.queues) {
      if (q.tenant == tenant && q.name == name) return &q;
    }
    return nullptr;
  }

  void CheckPreempt(const sched::Preempt& p) {
    const std::string who = "preemption of job " + Id(p.job) + ": ";
    auto rit = running_.find(p.job);
    if (rit == running_.end()) {
      Violation(who + "it is not running");
      return;
    }
    const sched::RunningJob& v = *rit->second;
    if (v.preempting) Violation(who + "it is already being preempted");
    if (!v.preemptible) Violation(who + "its priority class is not preemptible");
    if (!v.preempting && snap_.now - v.start_time < policy_.min_runtime) {
      Violation(who + "it started " + FormatDuration(snap_.now - v.start_time) +
                " ago, within min_runtime " + FormatDuration(policy_.min_runtime));
    }
    Timestamp since =
        v.last_checkpoint && *v.last_checkpoint > v.start_time ? *v.last_checkpoint : v.start_time;
    Duration lost = (snap_.now - since) * std::max<int64_t>(v.Gpus(), 1);
    if (p.lost_gpu_time != lost) {
      Violation(who + "lost GPU-time " + FormatDuration(p.lost_gpu_time) + ", expected " +
                FormatDuration(lost));
    }
    auto fit = pending_.find(p.for_job);
    if (fit == pending_.end()) {
      Violation(who + "for job " + Id(p.for_job) + ", which is not pending");
      return;
    }
    const sched::PendingJob& f = *fit->second;
    if (bound_.count(f.id)) Violation(who + "for job " + Id(f.id) + ", which was bound anyway");
    if (!waiting_.count(f.id)) Violation(who + "for job " + Id(f.id) + ", which is not waiting");
    if (snap_.queues.empty()) {
      if (v.priority >= f.priority) {
        Violation(who + "priority " + std::to_string(v.priority) + " preempted for priority " +
                  std::to_string(f.priority) + " (no quotas to reclaim)");
      }
      return;
    }
    const bool same_queue = v.tenant == f.tenant && v.queue == f.queue;
    const Queue* vq = FindQueue(v.tenant, v.queue);
    const bool borrowing = vq != nullptr && QueueUse(v.tenant, v.queue, true) > vq->guaranteed_gpus;
    if (!same_queue && !borrowing) {
      Violation(who + "queue '" + v.queue + "' is not borrowing, and job " + Id(f.id) +
                " is in another queue");
    }
    if (v.priority >= f.priority && same_queue) {
      Violation(who + "priority " + std::to_string(v.priority) + " preempted for priority " +
                std::to_string(f.priority) + " in the same queue");
    }
    if (v.priority >= f.priority && !same_queue) {
      // Only a reclaim: the preemptor's queue must stay within its guarantee.
      const Queue* fq = FindQueue(f.tenant, f.queue);
      const int64_t need = f.per_replica.gpus * std::max(1, std::min(f.min_replicas, f.replicas));
      if (fq == nullptr || QueueUse(f.tenant, f.queue, false) + need > fq->guaranteed_gpus) {
        Violation(who + "priority " + std::to_string(v.priority) + " preempted for priority " +
                  std::to_string(f.priority) + ", but queue '" + f.queue +
                  "' would go beyond its guarantee: not a reclaim");
      }
    }
  }

  void CheckReserve(const sched::Reserve& r) {
    const std::string who = "reservation of job " + Id(r.job) + ": ";
    if (!pending_.count(r.job)) {
      Violation(who + "it is not pending");
      return;
    }
    if (!waiting_.count(r.job)) Violation(who + "it is not waiting");
    if (r.earliest_start < snap_.now) Violation(who + "starts in the past");
    // EASY backfill: nothing bound now may still hold reserved GPUs at the start.
    std::set<std::pair<std::string, int>> reserved;
    for (const Placement& p : r.replicas) {
      for (int g : p.gpus) reserved.insert({p.node, g});
    }
    for (const auto& b : dec_.binds) {
      const sched::PendingJob* jp = PendingOf(b.job);
      if (jp == nullptr) continue;
      const sched::PendingJob& j = *jp;
      const bool ends_before =
          j.time_limit.count() > 0 && snap_.now + j.time_limit <= r.earliest_start;
      if (ends_before) continue;
      for (const Placement& p : b.replicas) {
        for (int g : p.gpus) {
          if (reserved.count({p.node, g})) {
            Violation("bind of job " + Id(b.job) + " takes " + p.node + " GPU " +
                      std::to_string(g) + ", reserved for job " + Id(r.job) + " from " +
                      When(r.earliest_start) + ", and " +
                      (j.time_limit.count() > 0 ? "runs past it" : "has no time limit"));
          }
        }
      }
    }
  }

  void CheckQuotas() {
    if (snap_.queues.empty()) return;
    std::map<const Queue*, int64_t> use, added;
    auto charge = [&](const std::string& tenant, const std::string& queue, int64_t gpus, bool now) {
      for (const Queue* q = FindQueue(tenant, queue); q != nullptr;
           q = q->parent.empty() ? nullptr : FindQueue(q->tenant, q->parent)) {
        use[q] += gpus;
        if (now) added[q] += gpus;
        if (use.size() > snap_.queues.size() * 2) break;  // a parent cycle
      }
    };
    for (const auto& r : snap_.running) charge(r.tenant, r.queue, r.Gpus(), false);
    for (const auto& b : dec_.binds) {
      const sched::PendingJob* j = PendingOf(b.job);
      if (j == nullptr) continue;
      charge(j->tenant, j->queue, j->per_replica.gpus * static_cast<int64_t>(b.replicas.size()),
             true);
    }
    for (const auto& [q, gpus] : added) {
      if (gpus > 0 && use[q] > q->limit_gpus) {
        Violation("queue '" + q->name + "' holds " + std::to_string(use[q]) +
                  " GPUs after this pass, over its limit of " + std::to_string(q->limit_gpus));
      }
    }
  }

  const sched::Snapshot& snap_;
  const sched::Decisions& dec_;
  const sched::Policy& policy_;
  std::map<JobId, const sched::PendingJob*> pending_;
  std::map<JobId, const sched::RunningJob*> running_;
  std::map<std::string, const Node*> nodes_;
  std::set<JobId> waiting_, bound_;
  std::map<std::string, std::set<int>> used_;
  std::map<std::string, int64_t> cpu_, mem_;
  std::vector<std::string> out_;
};

class Replayer {
 public:
  explicit Replayer(const Scenario& sc) : sc_(sc), nodes_(sc.nodes) {
    for (const ScenarioJob& j : sc.jobs) {
      JobRun& r = jobs_[j.id];
      r.spec = &j;
      r.priority = sc.FindPriorityClass(j.priority);
      TY_CHECK_MSG(r.priority != nullptr, "scenario job with an unknown priority class");
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
        r.last_checkpoint = base + ((now - base) / every) * every;
        Event(ReplayEvent::Kind::kCheckpoint, r.spec->id, *r.last_checkpoint,
              "every " + FormatDuration(every));
      }
    }
    // (c) The step's own events.
    if (!ApplyEvents(i, now)) return;

    sched::Snapshot snap = BuildSnapshot(now);
    out.decisions = sched::Schedule(snap, sc_.policy);
    out.violations = DecisionChecker(snap, out.decisions, sc_.policy).Run();
    Apply(out.decisions, now);
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

  bool ApplyEvents(size_t i, Timestamp now) {
    const ScenarioStep& step = sc_.steps[i];
    const std::string when = " at " + When(now);
    auto state_of = [&](JobId id) { return std::string(ReplayStateName(jobs_[id].state)); };
    for (const auto& [name, state] : step.node_state) {
      for (Node& n : nodes_) {
        if (n.name != name) continue;
        n.state = state;
        n.state_reason = state == NodeState::kReady ? "" : "scenario";
      }
      events_->push_back(ReplayEvent{ReplayEvent::Kind::kNodeState, 0, name, Offset(now),
                                     std::string(NodeStateName(state))});
      if (state != NodeState::kDown) continue;
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
      r.state = ReplayState::kSucceeded;
      r.outcome.end = Offset(now);
      r.attained += (now - r.start) * r.Gpus();
      r.replicas.clear();
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
      r.last_checkpoint = now;
      Event(ReplayEvent::Kind::kCheckpoint, id, now);
    }
    for (JobId id : step.submit) {
      JobRun& r = jobs_[id];
      r.state = ReplayState::kPending;
      r.submit_time = now;
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
      Event(ReplayEvent::Kind::kHeld, id, now);
    }
    for (JobId id : step.release) {
      JobRun& r = jobs_[id];
      if (!r.held) {
        Fail(i, "release", "job " + std::to_string(id) + " is not held" + when);
        return false;
      }
      r.held = false;
      Event(ReplayEvent::Kind::kReleased, id, now);
    }
    return true;
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
    r.attained += (now - r.start) * r.Gpus();
    r.state = ReplayState::kPending;
    r.replicas.clear();
    r.last_checkpoint.reset();
    Event(ReplayEvent::Kind::kRequeued, r.spec->id, now, std::move(why));
  }

  void Finish(JobRun& r, Timestamp at, ReplayState state) {
    r.state = state;
    r.outcome.end = Offset(at);
    r.attained += (at - r.start) * r.Gpus();
    r.replicas.clear();
    Event(state == ReplayState::kTimedOut ? ReplayEvent::Kind::kTimedOut
                                          : ReplayEvent::Kind::kSucceeded,
          r.spec->id, at, "ran " + FormatDuration(at - r.start));
  }

  sched::Snapshot BuildSnapshot(Timestamp now) const {
    sched::Snapshot s;
    s.now = now;
    s.nodes = nodes_;
    s.queues = sc_.queues;
    for (const auto& [id, r] : jobs_) {
      const ScenarioJob& j = *r.spec;
      if (r.state == ReplayState::kRunning || r.state == ReplayState::kPreempting) {
        sched::RunningJob rj;
        rj.id = id;
        rj.tenant = j.tenant;
        rj.queue = j.queue;
        rj.priority = r.priority->value;
        rj.preemptible = r.priority->preemptible;
        rj.per_replica = j.per_replica;
        rj.replicas = r.replicas;
        rj.start_time = r.start;
        rj.last_checkpoint = r.last_checkpoint;
        rj.time_limit = j.time_limit;
        rj.preempting = r.state == ReplayState::kPreempting;
        s.running.push_back(std::move(rj));
      } else if (r.state == ReplayState::kPending) {
        sched::PendingJob pj;
        pj.id = id;
        pj.name = j.name;
        pj.tenant = j.tenant;
        pj.queue = j.queue;
        pj.priority = r.priority->value;
        pj.preemptible = r.priority->preemptible;
        pj.replicas = j.replicas;
        pj.min_replicas = j.min_replicas;
        pj.per_replica = j.per_replica;
        pj.topology = j.topology;
        pj.submit_time = r.submit_time;
        pj.eligible_time = r.submit_time;
        pj.time_limit = j.time_limit;
        pj.excluded_nodes = j.exclude;
        pj.held = r.held;
        pj.attained_service = r.attained;
        s.pending.push_back(std::move(pj));
      }
    }
    return s;
  }

  void Apply(const sched::Decisions& d, Timestamp now) {
    for (const sched::Bind& b : d.binds) {
      auto it = jobs_.find(b.job);
      if (it == jobs_.end() || it->second.state != ReplayState::kPending) continue;
      JobRun& r = it->second;
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
    }
    for (const sched::Bind& b : d.binds) {
      if (auto it = jobs_.find(b.job); it != jobs_.end()) it->second.outcome.reason.clear();
    }
  }

  const Scenario& sc_;
  std::vector<Node> nodes_;
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
