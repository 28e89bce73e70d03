#include "sim/sim.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <unordered_map>

#include "core/names.h"
#include "lifecycle/lifecycle.h"
#include "sched/schedule.h"
#include "sim/traces.h"

namespace trainyard::sim {
namespace {

using std::chrono::duration_cast;

// k8s-default: pod id = replica * stride + job id (job ids stay below the stride).
constexpr int64_t kPodIdStride = int64_t{1} << 32;

enum class Mode { kGang, kPods, kLas };

struct PolicyEntry {
  std::string_view name;
  Mode mode;
  sched::Policy policy;
};

std::vector<PolicyEntry> Policies() {
  sched::Policy fifo;
  fifo.ordering = "fifo";
  fifo.backfill = false;
  fifo.preemption = "none";
  sched::Policy pods;
  pods.ordering = "fifo";
  pods.placement = "best-fit";
  pods.preemption = "none";
  pods.backfill = true;
  pods.reservations = 0;
  sched::Policy las;
  las.ordering = "las";
  sched::Policy best_fit;
  best_fit.placement = "best-fit";
  sched::Policy first_fit;
  first_fit.placement = "first-fit";
  sched::Policy fragmentation;
  fragmentation.placement = "fragmentation";
  sched::Policy short_first;
  short_first.ordering = "short-first";
  return {
      {"fifo", Mode::kGang, fifo},
      {"k8s-default", Mode::kPods, pods},
      {"trainyard", Mode::kGang, sched::Policy{}},
      {"trainyard-las", Mode::kLas, las},
      {"best-fit", Mode::kGang, best_fit},
      {"first-fit", Mode::kGang, first_fit},
      {"fragmentation", Mode::kGang, fragmentation},
      {"trainyard-short", Mode::kGang, short_first},
  };
}

Result<PolicyEntry> FindPolicy(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& p : Policies()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  std::string valid;
  for (auto n : names) valid += (valid.empty() ? "" : ", ") + std::string(n);
  std::string msg =
      "policy: unknown simulator policy " + QuoteForMessage(name) + "; valid: " + valid;
  if (std::string hint = ClosestMatch(name, names); !hint.empty())
    msg += " (did you mean " + hint + "?)";
  return InvalidArgument(msg);
}

// Where a trace job is in the simulated world (its lifecycle state is the
// ClusterState's; this is what the simulator needs on top to play the workload).
enum class SimState { kFuture, kPending, kRunning, kPreempting, kDone, kRejected };

struct SimJob {
  const TraceJob* trace = nullptr;
  JobId id = 0;
  SimState state = SimState::kFuture;
  Duration submit{0};
  int64_t gpus = 0;            // per replica
  int32_t share = 0;           // 1..999: per replica, thousandths of its one GPU; 0: whole GPUs
  std::string priority_class;  // a class the cluster knows (unknown ones run as normal)
  Duration checkpoint_interval{0};
  // Progress: work kept (as of the last checkpoint), and the current attempt.
  Duration saved{0};
  Duration attempt_start{0};    // when this attempt's GPUs were taken
  Duration productive_from{0};  // attempt_start + restart overhead
  int64_t attempt = 0;          // increments per start; stale events carry old values
  std::vector<sched::Placement> placements;
  // k8s-default: replicas placed so far (each a lifecycle job of its own holding its
  // GPUs until the whole job has run).
  struct Pod {
    JobId id;
    sched::Placement placement;
    Duration since;
  };
  std::vector<Pod> pods;
  JobRecord record;
};

struct Event {
  enum Kind { kCompletion, kPreemptExit, kNodeFail, kNodeRepair, kTick } kind;
  Duration time;
  int64_t seq;
  int64_t subject;  // job index or node index
  int64_t attempt;  // for job events: the attempt it belongs to
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double rank = p * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The whole GPUs a replica of `t` holds: a share of one GPU is on one GPU.
int64_t ReplicaGpus(const TraceJob& t) {
  return t.gpus_per_replica > 0 ? t.gpus_per_replica : (t.gpu_milli > 0 ? 1 : 0);
}

// The share of one GPU a replica of `t` takes (thousandths), 0 for whole GPUs: a
// replica of one GPU asking for less than all of it, when shares are kept.
int32_t ReplicaShare(const TraceJob& t, bool gpu_sharing) {
  const bool share =
      gpu_sharing && ReplicaGpus(t) == 1 && t.gpu_milli > 0 && t.gpu_milli < sched::kWholeGpu;
  return share ? t.gpu_milli : 0;
}

// A job's GPUs in thousandths, as the fill experiment counts its demand: a share of
// one GPU counts as that share when shares are kept.
int64_t FillDemand(const TraceJob& t, bool gpu_sharing) {
  const int32_t share = ReplicaShare(t, gpu_sharing);
  return ReplicaGpus(t) * t.replicas * (share > 0 ? share : sched::kWholeGpu);
}

// The simulator drives the job lifecycle the server runs (lifecycle/lifecycle.h) with
// the events of a simulated world: jobs arrive, their gangs run once bound, complete
// their work, checkpoint, stop when preempted or when a node fails. Jobs, snapshots
// and what the scheduler's decisions do are the lifecycle's; the simulator keeps only
// the workload's progress and its measurements.
class Simulator {
 public:
  Simulator(const Trace& trace, const ClusterSpec& cluster, const SimOptions& options,
            PolicyEntry policy)
      : trace_(trace),
        cluster_(cluster),
        opt_(options),
        entry_(std::move(policy)),
        rng_(options.seed),
        state_(LifecycleOptionsFor(entry_, options)) {}

  Result<SimResult> Run() {
    TY_RETURN_IF_ERROR(Setup());
    while (true) {
      Duration next = NextTime();
      if (next == kNever) break;
      Advance(next);
      // Everything that happens at this instant, then at most one pass.
      while (next_arrival_ < jobs_.size() && jobs_[order_[next_arrival_]].submit == now_) {
        TY_RETURN_IF_ERROR(Arrive(order_[next_arrival_++]));
      }
      while (!events_.empty() && events_.top().time == now_) {
        Event e = events_.top();
        events_.pop();
        TY_RETURN_IF_ERROR(Handle(e));
      }
      if (dirty_) {
        if (now_ >= next_pass_) {
          TY_RETURN_IF_ERROR(Pass());
        } else if (!tick_pending_) {
          Push(Event::kTick, next_pass_, 0, 0);
          tick_pending_ = true;
        }
      }
      if (opt_.progress && ++progress_counter_ % 4096 == 0) opt_.progress(now_, trace_end_);
    }
    return Finish();
  }

  // The fill experiment (FillOptions): the trace's jobs arrive in order, one pass
  // each, and stay; a job the pass does not start fails. Events (completions) are
  // never processed: nothing ends.
  Result<FillResult> RunFill() {
    TY_RETURN_IF_ERROR(Setup());
    FillResult out;
    FillSummary& s = out.summary;
    s.policy = std::string(entry_.name);
    s.capacity_gpus = static_cast<double>(total_gpus_);
    int64_t arrived_milli = 0;
    out.curve.reserve(order_.size());
    for (size_t i : order_) {
      SimJob& j = jobs_[i];
      now_ = j.submit;
      TY_RETURN_IF_ERROR(Arrive(i));
      TY_RETURN_IF_ERROR(Pass());
      arrived_milli += FillDemand(*j.trace, opt_.gpu_sharing);
      if (j.state == SimState::kPending) {  // not placed by its pass
        // Pods already placed keep their GPUs, as in Kubernetes.
        TY_RETURN_IF_ERROR(Reject(i));
      }
      const double arrived = static_cast<double>(arrived_milli) / sched::kWholeGpu;
      const double allocated = static_cast<double>(allocated_milli_) / sched::kWholeGpu;
      if (j.state == SimState::kRejected) {
        ++s.failed;
        if (s.first_failure_arrived < 0) s.first_failure_arrived = arrived / s.capacity_gpus;
      } else {
        ++s.placed;
      }
      if (s.unallocated_gpus_at_capacity < 0 && arrived >= s.capacity_gpus) {
        s.unallocated_gpus_at_capacity = s.capacity_gpus - allocated;
      }
      out.curve.push_back({j.trace->id, j.state != SimState::kRejected, arrived, allocated});
    }
    s.jobs = static_cast<int64_t>(order_.size());
    s.arrived_gpus = static_cast<double>(arrived_milli) / sched::kWholeGpu;
    const double allocated = static_cast<double>(allocated_milli_) / sched::kWholeGpu;
    s.unallocated_gpus_end = s.capacity_gpus - allocated;
    s.gpu_alloc_ratio_end = s.capacity_gpus > 0 ? allocated / s.capacity_gpus : 0;
    s.passes = passes_;
    return out;
  }

 private:
  static constexpr Duration kNever = Duration::max();

  static lifecycle::LifecycleOptions LifecycleOptionsFor(const PolicyEntry& entry,
                                                         const SimOptions& o) {
    lifecycle::LifecycleOptions l;
    l.policy = entry.policy;
    l.record = false;
    l.agents = false;
    l.check_tenancy = false;  // the cluster lists its queues; every trace job is let in
    l.max_unfinished_jobs_per_tenant = std::numeric_limits<int64_t>::max();
    l.keep_index = o.keep_index;
    return l;
  }

  Status Setup() {
    for (const auto& pc : DefaultPriorityClasses()) state_.classes[pc.name] = pc;
    for (const auto& pc : cluster_.priority_classes) state_.classes[pc.name] = pc;
    for (const Queue& q : cluster_.queues) state_.queues[{q.tenant, q.name}] = q;
    for (const Node& n : cluster_.nodes) {
      lifecycle::NodeEntry& e = state_.nodes[n.name];
      e.node = n;
      e.connected = true;
      e.set_state = n.state;
      total_gpus_ += static_cast<int64_t>(n.gpus.size());
    }
    // The snapshot lists nodes by name (SnapshotBuilder), queues as the cluster has them.
    state_.snapshot.SetNodes(cluster_.nodes);
    state_.snapshot.SetQueues(cluster_.queues);

    jobs_.resize(trace_.jobs.size());
    const double lf = opt_.load_factor > 0 ? opt_.load_factor : 1.0;
    for (size_t i = 0; i < trace_.jobs.size(); ++i) {
      const TraceJob& t = trace_.jobs[i];
      SimJob& j = jobs_[i];
      j.trace = &t;
      j.id = static_cast<JobId>(i + 1);
      j.submit = Duration(static_cast<int64_t>(static_cast<double>(t.submit.count()) / lf));
      j.gpus = ReplicaGpus(t);
      j.share = ReplicaShare(t, opt_.gpu_sharing);
      j.priority_class = state_.classes.contains(t.priority_class) ? t.priority_class : "normal";
      j.checkpoint_interval = t.checkpoint_interval.count() > 0 ? t.checkpoint_interval
                                                                : opt_.default_checkpoint_interval;
      j.record.id = t.id;
      j.record.tenant = t.tenant;
      j.record.gpus = j.gpus * t.replicas;
      j.record.submit = j.submit;
      trace_end_ = std::max(trace_end_, j.submit);
    }
    order_.resize(jobs_.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return jobs_[a].submit < jobs_[b].submit; });
    if (opt_.gpu_mtbf_hours > 0) {
      for (size_t n = 0; n < cluster_.nodes.size(); ++n) ScheduleFailure(n, Duration(0));
    }
    sample_every_ = opt_.sample_interval.count() > 0
                        ? opt_.sample_interval
                        : std::max(Duration(60'000), Duration(trace_end_.count() / 2000 + 1));
    return Status::Ok();
  }

  Duration NextTime() const {
    // Done when nothing more can happen: no arrivals left, nothing running, every
    // node up, no pass due. Jobs still pending then can never start (deadlocked or
    // starved); node failures alone would go on forever.
    if (next_arrival_ >= jobs_.size() && running_jobs_ == 0 && down_gpus_ == 0 && !dirty_) {
      return kNever;
    }
    Duration t = kNever;
    if (next_arrival_ < jobs_.size()) t = jobs_[order_[next_arrival_]].submit;
    if (!events_.empty()) t = std::min(t, events_.top().time);
    return t;
  }

  // Moves the clock, integrating utilisation and idle capacity over the interval.
  void Advance(Duration to) {
    if (to < now_) to = now_;
    const double dt = Seconds(to - now_);
    if (dt > 0) {
      const double allocated = static_cast<double>(allocated_milli_) / sched::kWholeGpu;
      allocated_gpu_s_ += allocated * dt;
      if (pending_count_ > 0) {
        idle_waiting_gpu_s_ += (static_cast<double>(ready_gpus()) - allocated) * dt;
      }
      while (next_sample_ <= to) {
        series_.push_back({next_sample_,
                           total_gpus_ ? allocated / static_cast<double>(total_gpus_) : 0,
                           pending_count_});
        next_sample_ += sample_every_;
      }
    }
    now_ = to;
  }

  int64_t ready_gpus() const { return total_gpus_ - down_gpus_; }

  void Push(Event::Kind kind, Duration time, int64_t subject, int64_t attempt) {
    events_.push(Event{kind, time, seq_++, subject, attempt});
    ++event_count_;
  }

  void ScheduleFailure(size_t n, Duration after) {
    const double gpus = static_cast<double>(std::max<size_t>(cluster_.nodes[n].gpus.size(), 1));
    std::exponential_distribution<double> d(gpus / (opt_.gpu_mtbf_hours * 3600.0));
    Duration when = after + Duration(static_cast<int64_t>(d(rng_) * 1000.0) + 1);
    Push(Event::kNodeFail, when, static_cast<int64_t>(n), 0);
  }

  // --- the lifecycle --------------------------------------------------------------------

  // Applies `event` at `at` (now, unless the event says when it happened).
  Status Apply(const lifecycle::Event& event, Duration at) {
    // When to run a pass is the simulator's to decide (a scheduler loop's): it marks
    // itself dirty where something arrives or leaves.
    return lifecycle::Apply(state_, event, Timestamp(at)).status();
  }
  Status Apply(const lifecycle::Event& event) { return Apply(event, now_); }

  void Report(WorldEvent::Kind kind, JobId job, int32_t code = 0, std::string node = "",
              std::optional<Duration> at = std::nullopt) {
    if (opt_.on_world_event) {
      opt_.on_world_event({kind, at.value_or(now_), job, code, std::move(node)});
    }
  }

  // The lifecycle job of `j` (gang mode) or of its pod `replica` (k8s-default).
  JobSpec SpecOf(const SimJob& j, int replicas) const {
    const TraceJob& t = *j.trace;
    JobSpec s;
    s.name = t.id;
    s.tenant = t.tenant;
    s.queue = t.queue;
    s.priority = j.priority_class;
    s.replicas = replicas;
    s.min_replicas = replicas;
    s.resources.gpus = j.gpus;
    s.resources.gpu_milli = j.share;
    s.resources.gpu_type = t.gpu_type;
    s.resources.milli_cpus = t.milli_cpus;
    s.resources.memory_bytes = t.memory_bytes;
    s.topology = t.topology;
    s.time_limit = TimeLimit(j);
    return s;
  }

  Status Submit(JobSpec spec, JobId id, Duration at) {
    lifecycle::SubmitJobs e;
    e.specs.push_back(std::move(spec));
    e.first_id = id;
    e.actor = "simulator";
    return Apply(e, at);
  }

  Status Arrive(size_t i) {
    SimJob& j = jobs_[i];
    ++event_count_;
    j.state = SimState::kPending;
    Report(WorldEvent::Kind::kArrive, j.id);
    return AddPending(i);
  }

  // The job (again) waits for the scheduler: one lifecycle job, or one per pod.
  Status AddPending(size_t i) {
    SimJob& j = jobs_[i];
    ++pending_count_;
    dirty_ = true;
    if (entry_.mode != Mode::kPods) {
      // A requeued job is Pending again in the lifecycle already.
      if (state_.FindJob(j.id) != nullptr) return Status::Ok();
      return Submit(SpecOf(j, j.trace->replicas), j.id, j.submit);
    }
    // A job controller creates pods one after another, and pods of jobs submitted
    // together interleave in the scheduling queue: every pod is submitted (and
    // eligible) when its job is, and the queue's tie-break on ids, replica-major,
    // puts replica r of every such job before replica r + 1 of any.
    for (int r = 0; r < j.trace->replicas; ++r) {
      TY_RETURN_IF_ERROR(Submit(SpecOf(j, 1), PodId(j, r), j.submit));
    }
    return Status::Ok();
  }

  static JobId PodId(const SimJob& j, int replica) { return replica * kPodIdStride + j.id; }
  // The trace job a lifecycle job id belongs to.
  size_t Owner(JobId id) const {
    const JobId job = entry_.mode == Mode::kPods ? id % kPodIdStride : id;
    return static_cast<size_t>(job - 1);
  }

  // GPUs (thousandths) a lifecycle job holds while bound, for utilisation.
  void Hold(JobId id, const std::vector<sched::Placement>& placements, int share) {
    int64_t milli = 0;
    for (const auto& p : placements) {
      milli += static_cast<int64_t>(p.gpus.size()) * (share > 0 ? share : sched::kWholeGpu);
    }
    held_milli_[id] = milli;
    allocated_milli_ += milli;
  }
  void Unhold(JobId id) {
    auto it = held_milli_.find(id);
    if (it == held_milli_.end()) return;
    allocated_milli_ -= it->second;
    held_milli_.erase(it);
  }

  // The job's whole gang is placed: it starts now.
  void Start(size_t i, std::vector<sched::Placement> placements) {
    SimJob& j = jobs_[i];
    --pending_count_;
    j.state = SimState::kRunning;
    ++running_jobs_;
    j.placements = std::move(placements);
    j.attempt_start = now_;
    j.productive_from = now_ + (j.record.starts > 0 ? opt_.restart_overhead : Duration(0));
    ++j.attempt;
    ++j.record.starts;
    if (j.record.first_start.count() < 0) j.record.first_start = now_;
    const Duration remaining = j.trace->duration - j.saved;
    Push(Event::kCompletion, j.productive_from + std::max(remaining, Duration(0)),
         static_cast<int64_t>(i), j.attempt);
    // Checkpoints only matter to the cost of preempting a job: without preemption
    // the pass never reads them.
    if (entry_.policy.preemption != "none" && entry_.mode != Mode::kPods &&
        j.checkpoint_interval.count() > 0) {
      checkpoints_.push({j.productive_from + j.checkpoint_interval, i, j.attempt});
    }
  }

  // The job's time limit as the scheduler sees it: the trace's, or an estimate.
  Duration TimeLimit(const SimJob& j) const {
    const TraceJob& t = *j.trace;
    if (t.time_limit.count() > 0 || opt_.time_limit_factor <= 0) return t.time_limit;
    const double ms = std::ceil(static_cast<double>(t.duration.count()) * opt_.time_limit_factor);
    return std::max(Duration(1'000), Duration(static_cast<int64_t>(ms)));
  }

  Duration Progress(const SimJob& j) const {
    return j.saved + std::max(Duration(0), now_ - j.productive_from);
  }
  Duration LastCheckpointProgress(const SimJob& j) const {
    Duration ran = std::max(Duration(0), now_ - j.productive_from);
    if (j.checkpoint_interval.count() <= 0) return j.saved;
    return j.saved +
           Duration(ran.count() / j.checkpoint_interval.count() * j.checkpoint_interval.count());
  }
  // `d` on `placement`'s GPUs as GPU-time: shares count for their part of a GPU.
  Duration GpuTime(const SimJob& j, const sched::Placement& placement, Duration d) const {
    const int64_t milli =
        static_cast<int64_t>(placement.gpus.size()) * (j.share > 0 ? j.share : sched::kWholeGpu);
    return Duration(d.count() * milli / sched::kWholeGpu);
  }
  Duration GpuTime(const SimJob& j, Duration d) const {
    Duration sum{0};
    for (const auto& p : j.placements) sum += GpuTime(j, p, d);
    return sum;
  }

  // Ends the running attempt: done, or interrupted (back to pending). The lifecycle
  // hears that every rank exited: with 0 when done, else stopped by a signal (a
  // preempted gang or one a node failure broke up is requeued by it).
  Status EndAttempt(size_t i, bool done, bool failure) {
    SimJob& j = jobs_[i];
    --running_jobs_;
    const Duration held = now_ - j.attempt_start;
    j.record.run_gpu_time += GpuTime(j, held);
    if (done) {
      j.record.useful_gpu_time += GpuTime(j, j.trace->duration - j.saved);
      j.saved = j.trace->duration;
      j.state = SimState::kDone;
      j.record.end = now_;
    } else {
      const Duration kept = LastCheckpointProgress(j);
      j.record.useful_gpu_time += GpuTime(j, kept - j.saved);
      j.record.lost_work += GpuTime(j, Progress(j) - kept);
      j.saved = kept;
      (failure ? j.record.failures : j.record.preemptions) += 1;
      if (!failure) ++preemptions_;
    }
    ++j.attempt;
    const int32_t signal = done ? 0 : SIGTERM;
    if (entry_.mode == Mode::kPods) {
      for (const auto& pod : j.pods) TY_RETURN_IF_ERROR(EndLifecycleJob(pod.id, done, signal));
      j.pods.clear();
    } else {
      TY_RETURN_IF_ERROR(EndLifecycleJob(j.id, done, signal));
    }
    Report(WorldEvent::Kind::kExit, j.id, done ? 0 : -signal);
    j.placements.clear();
    dirty_ = true;
    if (!done) {
      j.state = SimState::kPending;
      TY_RETURN_IF_ERROR(AddPending(i));
    }
    return Status::Ok();
  }

  // Every rank of lifecycle job `id` exited; a pod of a job that is not done is
  // cancelled (its job's pods are made again).
  Status EndLifecycleJob(JobId id, bool done, int32_t signal) {
    Unhold(id);
    if (entry_.mode == Mode::kPods && !done) {
      TY_RETURN_IF_ERROR(Apply(lifecycle::CancelJob{id, "simulator"}));
    }
    const lifecycle::JobEntry* e = state_.FindJob(id);
    // A gang whose ranks were all on a failed node was requeued by the lifecycle itself.
    if (e == nullptr || !e->gang) return Status::Ok();
    return Apply(lifecycle::GangExited{id, 0, signal});
  }

  Status Handle(const Event& e) {
    switch (e.kind) {
      case Event::kTick:
        tick_pending_ = false;
        break;
      case Event::kCompletion: {
        SimJob& j = jobs_[e.subject];
        if (j.attempt != e.attempt || j.state == SimState::kDone) break;
        if (j.state != SimState::kRunning && j.state != SimState::kPreempting) break;
        return EndAttempt(static_cast<size_t>(e.subject), true, false);
      }
      case Event::kPreemptExit: {
        SimJob& j = jobs_[e.subject];
        if (j.attempt != e.attempt || j.state != SimState::kPreempting) break;
        return EndAttempt(static_cast<size_t>(e.subject), false, false);
      }
      case Event::kNodeFail: {
        const size_t n = static_cast<size_t>(e.subject);
        const Node& node = cluster_.nodes[n];
        const lifecycle::NodeEntry* have = state_.FindNode(node.name);
        if (have == nullptr || have->node.state == NodeState::kNotReady) break;
        // The trace jobs with GPUs on the node, before the lifecycle gives them up.
        std::vector<size_t> owners;
        for (const sched::RunningJob& r : state_.snapshot.current().running) {
          for (const auto& p : r.replicas) {
            if (p.node == node.name) {
              owners.push_back(Owner(r.id));
              break;
            }
          }
        }
        std::sort(owners.begin(), owners.end());
        owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
        TY_RETURN_IF_ERROR(
            Apply(lifecycle::SetNodeState{node.name, NodeState::kNotReady, "simulator", "failed"}));
        TY_RETURN_IF_ERROR(Apply(lifecycle::NodeLost{node.name, "failed"}));
        Report(WorldEvent::Kind::kNodeDown, 0, 0, node.name);
        down_gpus_ += static_cast<int64_t>(node.gpus.size());
        for (size_t i : owners) {
          SimJob& j = jobs_[i];
          if (j.state == SimState::kRunning || j.state == SimState::kPreempting) {
            TY_RETURN_IF_ERROR(EndAttempt(i, false, true));
          } else if (entry_.mode == Mode::kPods && j.state == SimState::kPending) {
            TY_RETURN_IF_ERROR(ReleasePods(i));  // placed pods of a job that never started
          }
        }
        Push(Event::kNodeRepair, now_ + opt_.node_repair, e.subject, 0);
        dirty_ = true;
        break;
      }
      case Event::kNodeRepair: {
        const size_t n = static_cast<size_t>(e.subject);
        const Node& node = cluster_.nodes[n];
        const lifecycle::NodeEntry* have = state_.FindNode(node.name);
        if (have == nullptr || have->node.state != NodeState::kNotReady) break;
        TY_RETURN_IF_ERROR(
            Apply(lifecycle::SetNodeState{node.name, node.state, "simulator", "repaired"}));
        Report(WorldEvent::Kind::kNodeUp, 0, 0, node.name);
        down_gpus_ -= static_cast<int64_t>(node.gpus.size());
        ScheduleFailure(n, now_);
        dirty_ = true;
        break;
      }
    }
    return Status::Ok();
  }

  // k8s-default: a job whose pods are placed but which never started loses them.
  Status ReleasePods(size_t i) {
    SimJob& j = jobs_[i];
    for (const auto& pod : j.pods) {
      j.record.held_idle_gpu_time += GpuTime(j, pod.placement, now_ - pod.since);
      TY_RETURN_IF_ERROR(EndLifecycleJob(pod.id, false, SIGTERM));
    }
    j.pods.clear();
    TY_RETURN_IF_ERROR(CancelPendingPods(i));
    --pending_count_;
    return AddPending(i);
  }

  Status CancelPendingPods(size_t i) {
    const SimJob& j = jobs_[i];
    for (int r = 0; r < j.trace->replicas; ++r) {
      const lifecycle::JobEntry* e = state_.FindJob(PodId(j, r));
      if (e != nullptr && e->job.state == trainyard::JobState::kPending) {
        TY_RETURN_IF_ERROR(Apply(lifecycle::CancelJob{PodId(j, r), "simulator"}));
      }
    }
    return Status::Ok();
  }

  // A pending job is never to be placed (infeasible here, or not placed by its pass
  // in the fill experiment): its lifecycle jobs are cancelled.
  Status Reject(size_t i) {
    SimJob& j = jobs_[i];
    if (j.state != SimState::kPending) return Status::Ok();
    if (entry_.mode == Mode::kPods) {
      TY_RETURN_IF_ERROR(CancelPendingPods(i));
    } else if (state_.FindJob(j.id) != nullptr) {
      TY_RETURN_IF_ERROR(Apply(lifecycle::CancelJob{j.id, "simulator"}));
    }
    j.state = SimState::kRejected;
    --pending_count_;
    return Status::Ok();
  }

  // --- scheduling ---------------------------------------------------------------------

  Status Pass() {
    dirty_ = false;
    next_pass_ = now_ + opt_.schedule_interval;
    if (state_.snapshot.pending_count() == 0) return Status::Ok();
    // Each running job's latest checkpoint, for the jobs that completed one since the
    // last pass (a job's first is due one interval after its productive start).
    while (!checkpoints_.empty() && checkpoints_.top().at <= now_) {
      const Due due = checkpoints_.top();
      checkpoints_.pop();
      const SimJob& j = jobs_[due.job];
      if (j.attempt != due.attempt || state_.snapshot.FindRunning(j.id) == nullptr) continue;
      const Duration ran = now_ - j.productive_from;
      const Duration k =
          Duration(ran.count() / j.checkpoint_interval.count() * j.checkpoint_interval.count());
      const Duration at = j.productive_from + k;
      lifecycle::ReportCheckpoint c;
      c.id = j.id;
      c.path = "checkpoint";
      c.step = k.count() / j.checkpoint_interval.count();
      c.actor = "simulator";
      TY_RETURN_IF_ERROR(Apply(c, at));
      Report(WorldEvent::Kind::kCheckpoint, j.id, 0, "", at);
      checkpoints_.push({at + j.checkpoint_interval, due.job, due.attempt});
    }
    ++passes_;
    const sched::Snapshot& snap = state_.snapshot.Prepare(Timestamp(now_));
    sched::SnapshotIndex* index = state_.snapshot.index();
    sched::Decisions d =
        index ? sched::Schedule(snap, entry_.policy, *index) : sched::Schedule(snap, entry_.policy);
    if (opt_.on_pass) opt_.on_pass(snap, d);
    TY_ASSIGN_OR_RETURN(lifecycle::Effects fx,
                        lifecycle::ApplyDecisions(state_, d, nullptr, Timestamp(now_)));
    (void)fx;
    for (const auto& b : d.binds) TY_RETURN_IF_ERROR(Bound(b));
    for (const auto& p : d.preemptions) Preempted(p);
    for (const auto& inf : d.infeasible) TY_RETURN_IF_ERROR(Reject(Owner(inf.job)));
    return Status::Ok();
  }

  // The lifecycle bound `b` (a pass in place never sees a bind dropped): its ranks run.
  Status Bound(const sched::Bind& b) {
    const size_t i = Owner(b.job);
    SimJob& j = jobs_[i];
    Hold(b.job, b.replicas, j.share);
    TY_RETURN_IF_ERROR(Apply(lifecycle::GangRunning{b.job}));
    if (entry_.mode != Mode::kPods) {
      Start(i, b.replicas);
      Report(WorldEvent::Kind::kRunning, j.id);
      return Status::Ok();
    }
    // A pod: it holds its GPUs from now on; the job runs once all its pods are placed.
    for (const auto& placement : b.replicas) j.pods.push_back({b.job, placement, now_});
    if (static_cast<int>(j.pods.size()) == j.trace->replicas) {
      std::vector<sched::Placement> all;
      for (const auto& pod : j.pods) {
        j.record.held_idle_gpu_time += GpuTime(j, pod.placement, now_ - pod.since);
        all.push_back(pod.placement);
      }
      Start(i, all);
      Report(WorldEvent::Kind::kRunning, j.id);
    }
    return Status::Ok();
  }

  // The lifecycle told the gang to stop; it leaves after the grace period.
  void Preempted(const sched::Preempt& p) {
    const size_t i = Owner(p.job);
    SimJob& j = jobs_[i];
    if (j.state != SimState::kRunning) return;
    j.state = SimState::kPreempting;
    Push(Event::kPreemptExit, now_ + opt_.preempt_grace, static_cast<int64_t>(i), j.attempt);
  }

  // --- results --------------------------------------------------------------------------

  Result<SimResult> Finish() {
    Advance(now_);
    SimResult out;
    SimSummary& s = out.summary;
    s.policy = std::string(entry_.name);
    s.jobs = static_cast<int64_t>(jobs_.size());
    std::vector<double> jct, queue;
    Duration first_submit = jobs_.empty() ? Duration(0) : jobs_[order_.front()].submit;
    Duration last_end = first_submit;
    double useful = 0, run = 0, lost = 0;
    std::map<std::string, double> tenant_gpu_s;
    for (SimJob& j : jobs_) {
      // A k8s-default job still holding pods at the end held them idle until now.
      for (const auto& pod : j.pods) {
        j.record.held_idle_gpu_time += GpuTime(j, pod.placement, now_ - pod.since);
      }
      const JobRecord& r = j.record;
      if (r.end.count() >= 0) {
        ++s.completed;
        jct.push_back(Seconds(r.end - r.submit));
        last_end = std::max(last_end, r.end);
      }
      if (r.first_start.count() >= 0) {
        queue.push_back(Seconds(r.first_start - r.submit));
      } else {
        ++s.never_started;
      }
      useful += Seconds(r.useful_gpu_time);
      run += Seconds(r.run_gpu_time) + Seconds(r.held_idle_gpu_time);
      lost += Seconds(r.lost_work);
      tenant_gpu_s[r.tenant] += Seconds(r.run_gpu_time);
      out.jobs.push_back(r);
    }
    s.makespan_s = Seconds(std::max(last_end, now_) - first_submit);
    double sum = 0;
    for (double v : jct) sum += v;
    s.avg_jct_s = jct.empty() ? 0 : sum / static_cast<double>(jct.size());
    s.p50_jct_s = Percentile(jct, 0.50);
    s.p95_jct_s = Percentile(jct, 0.95);
    s.p99_jct_s = Percentile(jct, 0.99);
    sum = 0;
    for (double v : queue) sum += v;
    s.avg_queue_s = queue.empty() ? 0 : sum / static_cast<double>(queue.size());
    s.p99_queue_s = Percentile(queue, 0.99);
    const double capacity = static_cast<double>(total_gpus_) * s.makespan_s;
    s.gpu_util = capacity > 0 ? allocated_gpu_s_ / capacity : 0;
    s.unallocated_gpu_hours_waiting = idle_waiting_gpu_s_ / 3600.0;
    s.preemptions = preemptions_;
    s.lost_gpu_hours = lost / 3600.0;
    s.ettr = run > 0 ? useful / run : 0;
    // Fairness: each tenant's share of GPU-time relative to its guarantee (or to an
    // equal split without quotas); Jain's index over those ratios.
    std::map<std::string, double> guarantee;
    int64_t guaranteed_total = 0;
    for (const Queue& q : cluster_.queues) guaranteed_total += q.guaranteed_gpus;
    for (const Queue& q : cluster_.queues) {
      if (guaranteed_total > 0)
        guarantee[q.tenant] +=
            static_cast<double>(q.guaranteed_gpus) / static_cast<double>(guaranteed_total);
    }
    double total_gpu_s = 0;
    for (const auto& [t, v] : tenant_gpu_s) total_gpu_s += v;
    double sx = 0, sxx = 0;
    const double n = static_cast<double>(tenant_gpu_s.size());
    for (const auto& [t, v] : tenant_gpu_s) {
      TenantShare ts{t, total_gpu_s > 0 ? v / total_gpu_s : 0,
                     guarantee.count(t) ? guarantee[t] : 0};
      double fair = guaranteed_total > 0 ? ts.guarantee : 1.0 / n;
      double x = fair > 0 ? ts.share / fair : 0;
      sx += x;
      sxx += x * x;
      s.tenants.push_back(ts);
    }
    s.jain_fairness = sxx > 0 ? (sx * sx) / (n * sxx) : 1.0;
    s.events = event_count_;
    s.passes = passes_;
    out.series = std::move(series_);
    return out;
  }

  const Trace& trace_;
  const ClusterSpec& cluster_;
  const SimOptions& opt_;
  PolicyEntry entry_;
  std::mt19937_64 rng_;
  lifecycle::ClusterState state_;

  std::vector<SimJob> jobs_;
  std::vector<size_t> order_;  // job indices by submit time
  size_t next_arrival_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  Duration now_{0};
  Duration next_pass_{0};
  bool dirty_ = false;
  bool tick_pending_ = false;
  Duration trace_end_{0};
  uint64_t progress_counter_ = 0;

  // When a running job's attempt next completes a checkpoint, earliest first;
  // entries of attempts that have ended are skipped.
  struct Due {
    Duration at;
    size_t job;
    int64_t attempt;
    bool operator>(const Due& o) const { return at > o.at; }
  };
  std::priority_queue<Due, std::vector<Due>, std::greater<>> checkpoints_;
  std::unordered_map<JobId, int64_t> held_milli_;  // by lifecycle job, while bound

  int64_t total_gpus_ = 0;
  int64_t down_gpus_ = 0;
  int64_t allocated_milli_ = 0;  // thousandths of GPUs
  int64_t pending_count_ = 0;    // jobs (not pods) waiting
  int64_t running_jobs_ = 0;     // started and not yet ended
  double allocated_gpu_s_ = 0;
  double idle_waiting_gpu_s_ = 0;
  int64_t preemptions_ = 0;
  int64_t event_count_ = 0;
  int64_t passes_ = 0;
  Duration sample_every_{60'000};
  Duration next_sample_{0};
  std::vector<SeriesPoint> series_;
};

}  // namespace

std::vector<std::string_view> PolicyNames() {
  std::vector<std::string_view> out;
  for (const auto& p : Policies()) out.push_back(p.name);
  return out;
}

Result<sched::Policy> PolicyFor(std::string_view name) {
  TY_ASSIGN_OR_RETURN(PolicyEntry e, FindPolicy(name));
  return e.policy;
}

namespace {

// The trace with the preemption-pressure jobs of `o` added (a copy only when there
// are some); errors name the option, the value and what is valid.
Result<std::optional<Trace>> WithPressure(const Trace& trace, const ClusterSpec& cluster,
                                          const SimOptions& o) {
  if (!(o.pressure_per_hour >= 0) || !std::isfinite(o.pressure_per_hour)) {
    return InvalidArgument("--pressure: must be a number of jobs per hour >= 0, got " +
                           FormatNumber(o.pressure_per_hour));
  }
  if (o.pressure_per_hour == 0) return std::optional<Trace>();
  if (o.pressure_gpus < 1 || o.pressure_gpus > 1'000'000) {
    return InvalidArgument("--pressure-gpus: must be 1 to 1000000, got " +
                           std::to_string(o.pressure_gpus));
  }
  if (o.pressure_duration.count() <= 0) {
    return InvalidArgument("--pressure-duration: must be > 0, got " +
                           std::to_string(o.pressure_duration.count()) + " ms");
  }
  std::vector<std::string_view> classes;
  bool known = false;
  std::vector<PriorityClass> all = DefaultPriorityClasses();
  all.insert(all.end(), cluster.priority_classes.begin(), cluster.priority_classes.end());
  for (const PriorityClass& pc : all) {
    known = known || pc.name == o.pressure_priority;
    if (std::find(classes.begin(), classes.end(), pc.name) == classes.end())
      classes.push_back(pc.name);
  }
  if (!known) {
    std::string valid;
    for (auto c : classes) valid += (valid.empty() ? "" : ", ") + std::string(c);
    std::string msg = "--pressure-priority: unknown priority class " +
                      QuoteForMessage(o.pressure_priority) + "; valid: " + valid;
    if (std::string hint = ClosestMatch(o.pressure_priority, classes); !hint.empty())
      msg += " (did you mean " + hint + "?)";
    return InvalidArgument(msg);
  }
  std::string tenant = "pressure", queue = "default";
  if (!o.pressure_queue.empty()) {
    const size_t slash = o.pressure_queue.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == o.pressure_queue.size()) {
      return InvalidArgument("--pressure-queue: must be TENANT/QUEUE, got " +
                             QuoteForMessage(o.pressure_queue));
    }
    tenant = o.pressure_queue.substr(0, slash);
    queue = o.pressure_queue.substr(slash + 1);
  } else if (!cluster.queues.empty()) {
    tenant = cluster.queues.front().tenant;
    queue = cluster.queues.front().name;
  }
  if (!cluster.queues.empty()) {
    std::string valid;
    bool exists = false;
    for (const Queue& q : cluster.queues) {
      exists = exists || (q.tenant == tenant && q.name == queue);
      valid += (valid.empty() ? "" : ", ") + q.tenant + "/" + q.name;
    }
    if (!exists) {
      return InvalidArgument("--pressure-queue: the cluster has no queue " +
                             QuoteForMessage(tenant + "/" + queue) + "; valid: " + valid);
    }
  }
  int32_t largest = 1;
  for (const Node& n : cluster.nodes) {
    largest = std::max(largest, static_cast<int32_t>(std::min<size_t>(n.gpus.size(), 64)));
  }
  const auto [replicas, per_replica] = GangShape(o.pressure_gpus, largest);
  Duration first = Duration::max(), last = Duration::min();
  for (const TraceJob& j : trace.jobs) {
    first = std::min(first, j.submit);
    last = std::max(last, j.submit + j.duration);
  }
  std::optional<Trace> out = trace;
  if (trace.jobs.empty()) return out;
  // A stream of its own, so that failures draw the same times with or without it.
  std::mt19937_64 rng(o.seed ^ 0x7072657373757265ull);
  std::exponential_distribution<double> gap(o.pressure_per_hour / 3'600'000.0);  // per ms
  int64_t n = 0;
  for (double t = static_cast<double>(first.count()) + gap(rng);
       t <= static_cast<double>(last.count()); t += gap(rng)) {
    TraceJob j;
    j.id = "pressure-" + std::to_string(++n);
    j.submit = Duration(static_cast<int64_t>(t));
    j.tenant = tenant;
    j.queue = queue;
    j.priority_class = o.pressure_priority;
    j.replicas = replicas;
    j.gpus_per_replica = per_replica;
    j.duration = o.pressure_duration;
    out->jobs.push_back(std::move(j));
  }
  return out;
}

}  // namespace

Result<SimResult> Simulate(const Trace& trace, const ClusterSpec& cluster,
                           const SimOptions& options) {
  TY_ASSIGN_OR_RETURN(PolicyEntry entry, FindPolicy(options.policy));
  if (!(options.load_factor > 0) || !std::isfinite(options.load_factor)) {
    return InvalidArgument(
        "--load-factor: must be a number > 0 (2 halves the gaps between arrivals), got " +
        FormatNumber(options.load_factor));
  }
  if (options.schedule_interval.count() <= 0) {
    return InvalidArgument("schedule_interval: must be > 0");
  }
  if (options.gpu_mtbf_hours < 0 || !std::isfinite(options.gpu_mtbf_hours)) {
    return InvalidArgument("gpu_mtbf_hours: must be >= 0");
  }
  if (!std::isfinite(options.time_limit_factor) ||
      (options.time_limit_factor != 0 && !(options.time_limit_factor >= 1))) {
    return InvalidArgument(
        "--time-limit-factor: must be 0 (no limits) or >= 1 (limits are never hit: the "
        "simulator does not stop jobs at them), got " +
        FormatNumber(options.time_limit_factor));
  }
  if (cluster.nodes.empty()) return InvalidArgument("cluster: has no nodes");
  TY_ASSIGN_OR_RETURN(std::optional<Trace> pressured, WithPressure(trace, cluster, options));
  const Trace& input = pressured ? *pressured : trace;
  for (const TraceJob& j : input.jobs) {
    if (j.replicas < 1 || j.gpus_per_replica < 0 || j.duration.count() < 0) {
      return InvalidArgument("trace job " + j.id +
                             ": replicas must be >= 1 and gpus and duration >= 0");
    }
  }
  return Simulator(input, cluster, options, std::move(entry)).Run();
}

Status ValidateFillRatio(double ratio) {
  if (!(ratio > 0) || !std::isfinite(ratio) || ratio > 100) {
    return InvalidArgument(
        "--fill: must be the demand to bring, as a multiple of the cluster's GPUs, "
        "above 0 and at most 100 (1.3: 130 %), got " +
        FormatNumber(ratio));
  }
  return Status::Ok();
}

Result<FillResult> SimulateFill(const Trace& trace, const ClusterSpec& cluster,
                                const FillOptions& options) {
  TY_ASSIGN_OR_RETURN(PolicyEntry entry, FindPolicy(options.policy));
  entry.policy.preemption = "none";  // jobs that never end: nothing to make room for
  TY_RETURN_IF_ERROR(ValidateFillRatio(options.ratio));
  if (cluster.nodes.empty()) return InvalidArgument("cluster: has no nodes");
  int64_t capacity_milli = 0;
  for (const Node& n : cluster.nodes) {
    capacity_milli += static_cast<int64_t>(n.gpus.size()) * sched::kWholeGpu;
  }
  if (capacity_milli == 0) return InvalidArgument("cluster: has no GPUs");
  int64_t trace_milli = 0;
  for (const TraceJob& j : trace.jobs) {
    if (j.replicas < 1 || j.gpus_per_replica < 0) {
      return InvalidArgument("trace job " + j.id + ": replicas must be >= 1 and gpus >= 0");
    }
    trace_milli += FillDemand(j, options.gpu_sharing);
  }
  if (trace_milli == 0) {
    return InvalidArgument(
        "--fill: the trace's jobs ask for no GPUs, so none can fill the cluster");
  }
  // The trace shuffled, then jobs drawn from it at random, until the demand is reached.
  std::mt19937_64 rng(options.seed ^ 0x66696c6cull);
  std::vector<size_t> shuffled(trace.jobs.size());
  for (size_t i = 0; i < shuffled.size(); ++i) shuffled[i] = i;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  std::uniform_int_distribution<size_t> draw(0, trace.jobs.size() - 1);
  const auto target =
      static_cast<int64_t>(std::ceil(static_cast<double>(capacity_milli) * options.ratio));
  Trace input;
  input.source = trace.source;
  int64_t demand = 0;
  for (size_t k = 0; demand < target; ++k) {
    const bool drawn = k >= shuffled.size();
    TraceJob j = trace.jobs[drawn ? draw(rng) : shuffled[k]];
    if (drawn) j.id += "#" + std::to_string(k);
    j.submit = Duration(static_cast<int64_t>(input.jobs.size()));  // one a millisecond
    j.duration = std::chrono::hours(24 * 365 * 100);               // never reached
    j.time_limit = Duration(0);
    demand += FillDemand(j, options.gpu_sharing);
    input.jobs.push_back(std::move(j));
  }
  SimOptions o;
  o.policy = options.policy;
  o.gpu_sharing = options.gpu_sharing;
  o.schedule_interval = Duration(1);
  return Simulator(input, cluster, o, std::move(entry)).RunFill();
}

}  // namespace trainyard::sim
