// The trace-driven simulator: replays a Trace on a ClusterSpec through the very same
// sched::Schedule the server runs, on a virtual clock, and measures what happens.
//
// Discrete events: arrivals (submit times divided by the load factor), completions,
// preempted jobs leaving after their grace period, and (optionally) GPU failures
// drawn from a per-GPU MTBF. Scheduling passes run at most once per
// `schedule_interval` of virtual time, when something changed, like a real
// scheduler loop. The snapshot is kept up to date incrementally between passes.
//
// Work and checkpoints: a job needs `duration` of running time. While it runs it
// completes a checkpoint every checkpoint interval; when it is preempted or its
// node fails, the work since its last checkpoint is lost (lost GPU-time = GPUs x
// that time) and it resumes later from the checkpoint, after a restart overhead.
//
// Named policies (PolicyNames()):
//   fifo           strict FIFO gangs, no backfill, no preemption (YARN-CS-like)
//   k8s-default    pod by pod, no gangs: each replica is placed on its own as soon
//                  as it fits and holds its GPUs until all of its job's replicas
//                  are placed; only then does the job run (plain kube-scheduler)
//   trainyard      the default policy: gangs, quotas, priority, preemption by least
//                  lost work, EASY backfill with reservations, topology placement
//   trainyard-las  least attained service first (Tiresias-style levels), with
//                  checkpoint-aware preemption of jobs that have had more service
//   best-fit, first-fit   trainyard with that placement style
//
// Deterministic: the same trace, cluster, options and seed give the same result.
// Thread-safety: Simulate is a pure function of its arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sched/decisions.h"
#include "sched/policy.h"
#include "sim/trace.h"

namespace trainyard::sim {

// What happened in the simulated world, as the server would hear of it, reported to
// SimOptions::on_world_event: for tests that drive another user of the job lifecycle
// (the server) through the same history.
struct WorldEvent {
  enum class Kind {
    kArrive,      // job submitted
    kRunning,     // every rank of its new attempt runs
    kExit,        // every rank exited: code 0 (work done), or -signal (stopped)
    kCheckpoint,  // it completed a checkpoint at `at` (reported when a pass needs it)
    kNodeDown,    // `node` failed
    kNodeUp,      // `node` is back
  };
  Kind kind = Kind::kArrive;
  Duration at{0};  // virtual time, as the simulator reached it
  JobId job = 0;   // the trace job's number: its index + 1
  int32_t code = 0;
  std::string node;
};

struct SimOptions {
  std::string policy = "trainyard";
  double load_factor = 1.0;                         // > 1 compresses inter-arrival times
  Duration schedule_interval{10'000};               // at most one pass per interval
  Duration default_checkpoint_interval{1'800'000};  // for jobs whose trace has none
  Duration restart_overhead{60'000};                // per (re)start after preemption or failure
  Duration preempt_grace{60'000};                   // a preempted job keeps its GPUs this long
  double gpu_mtbf_hours = 0;                        // per-GPU mean time between failures; 0: none
  Duration node_repair{3'600'000};                  // a failed node comes back after this
  // Preemption pressure: jobs of a high priority class injected at random (Poisson)
  // times from the trace's first submission to the end its last job would reach if
  // started at once, `pressure_per_hour` per hour of the trace's own time
  // (compressed with it by the load factor), each of `pressure_gpus` GPUs (a gang of
  // whole nodes above the largest node) running `pressure_duration`, in
  // `pressure_queue` ("tenant/queue"; empty: the cluster's first queue, or tenant
  // "pressure" when it defines none). They are jobs like the others in the results,
  // with ids "pressure-N". 0: none.
  double pressure_per_hour = 0;
  int32_t pressure_gpus = 8;
  Duration pressure_duration{3'600'000};
  std::string pressure_priority = "production";
  std::string pressure_queue;
  uint64_t seed = 1;
  // Jobs whose trace gives no time limit get one of this many times their duration
  // (a user's estimate), so that backfill can plan reservations around them; 0: none
  // (such jobs never end as far as planning knows). Planning only: no job is
  // stopped at its limit, so values below 1 are refused.
  double time_limit_factor = 0;
  Duration sample_interval{0};  // time series resolution; 0: automatic
  // Jobs that ask for a share of one GPU (the Alibaba trace's gpu_milli, the CSV
  // format's gpu_milli) get that share, and other shares may use the rest of the GPU;
  // false: each gets a whole GPU (no GPU sharing).
  bool gpu_sharing = true;
  // Keep the scheduler's view of nodes and running jobs from pass to pass
  // (sched::SnapshotIndex) instead of deriving it in every pass. Results are the same
  // either way (tested); only the time differs.
  bool keep_index = true;
  // Called now and then with (virtual time reached, trace end estimate), for a
  // progress bar. May be empty.
  std::function<void(Duration, Duration)> progress;
  // Called with each pass's snapshot and decisions, and with each event of the
  // simulated world (WorldEvent). May be empty.
  std::function<void(const sched::Snapshot&, const sched::Decisions&)> on_pass;
  std::function<void(const WorldEvent&)> on_world_event;
};

struct JobRecord {
  std::string id;
  std::string tenant;
  int64_t gpus = 0;  // at full size
  Duration submit{0};
  Duration first_start{-1};  // -1: never started
  Duration end{-1};          // -1: not finished when the simulation stopped
  int32_t starts = 0;
  int32_t preemptions = 0;
  int32_t failures = 0;
  Duration lost_work{0};        // GPU-time lost, summed over interruptions
  Duration run_gpu_time{0};     // GPU-time allocated while running
  Duration useful_gpu_time{0};  // GPU-time of work kept (= gpus x duration when done)
  Duration held_idle_gpu_time{
      0};  // k8s-default: GPU-time held by placed pods of a job not yet running
};

struct SeriesPoint {
  Duration t{0};
  double gpu_util = 0;  // allocated GPUs / all GPUs
  int64_t pending = 0;  // jobs waiting
};

struct TenantShare {
  std::string tenant;
  double share = 0;      // of allocated GPU-time
  double guarantee = 0;  // guaranteed GPUs / all GPUs (0 without quotas)
};

struct SimSummary {
  std::string policy;
  int64_t jobs = 0;
  int64_t completed = 0;
  double avg_jct_s = 0, p50_jct_s = 0, p95_jct_s = 0, p99_jct_s = 0;
  double avg_queue_s = 0, p99_queue_s = 0;
  double makespan_s = 0;
  double gpu_util = 0;  // allocated GPU-time / capacity-time, over the makespan
  double unallocated_gpu_hours_waiting = 0;  // free GPU-hours while some job waited
  int64_t preemptions = 0;
  double lost_gpu_hours = 0;
  double ettr = 0;  // useful GPU-time / allocated GPU-time
  int64_t never_started = 0;
  double jain_fairness = 0;  // over tenants' shares relative to their guarantees (or equal)
  std::vector<TenantShare> tenants;
  // Cost of the run itself: events and passes counted here; wall time and memory
  // are measured and filled in by the caller (this function reads no clock).
  int64_t events = 0;
  int64_t passes = 0;
  double wall_s = 0;
  int64_t peak_rss_kib = 0;
};

struct SimResult {
  SimSummary summary;
  std::vector<JobRecord> jobs;
  std::vector<SeriesPoint> series;
};

// The fill experiment of FGD ("Beware of Fragmentation", ATC'23): how much of the
// cluster a placement policy can allocate before fragmentation leaves the GPUs that
// are still free unusable. Jobs are drawn from the trace (all of it, in an order
// shuffled with `seed`, then more drawn at random from it as needed) until the GPUs
// they ask for reach `ratio` times the cluster's GPUs; they arrive one after another,
// each gets one scheduling pass of its own (the same sched::Schedule, preemption
// off), and one that is not placed by it fails and is gone. Nothing ever ends, so the
// free GPUs left are those the packing could not use. A job's demand is its GPUs
// (shares as fractions of one); jobs of no GPUs (CPU-only pods) arrive too and take
// CPUs and memory.
struct FillOptions {
  std::string policy = "trainyard";
  double ratio = 1.3;  // > 0: arrivals stop once the demand reaches ratio x capacity
  uint64_t seed = 1;
  bool gpu_sharing = true;  // as SimOptions::gpu_sharing
};

struct FillPoint {
  std::string job;            // the job that arrived (a drawn copy's id ends in "#N")
  bool placed = false;        // whether its pass placed it
  double arrived_gpus = 0;    // demand of the jobs arrived so far, failed ones included
  double allocated_gpus = 0;  // held by the jobs placed so far
};

struct FillSummary {
  std::string policy;
  int64_t jobs = 0;  // arrived
  int64_t placed = 0;
  int64_t failed = 0;
  double capacity_gpus = 0;
  double arrived_gpus = 0;
  // Demand arrived (fraction of capacity) when the first job failed; -1: none failed.
  double first_failure_arrived = -1;
  // Free GPUs when the demand arrived first reached the cluster's capacity (FGD's
  // "unallocated GPUs"; -1 when ratio < 1 never got there), and at the end.
  double unallocated_gpus_at_capacity = -1;
  double unallocated_gpus_end = 0;
  double gpu_alloc_ratio_end = 0;  // allocated / capacity at the end
  int64_t passes = 0;
  double wall_s = 0;  // filled in by the caller, as SimSummary's
  int64_t peak_rss_kib = 0;
};

struct FillResult {
  FillSummary summary;
  std::vector<FillPoint> curve;  // one point per arrival
};

Result<FillResult> SimulateFill(const Trace& trace, const ClusterSpec& cluster,
                                const FillOptions& options);
// The error SimulateFill gives for a bad FillOptions::ratio (naming --fill), or OK.
Status ValidateFillRatio(double ratio);

std::vector<std::string_view> PolicyNames();
// The scheduler policy behind a simulator policy name; error lists valid names.
Result<sched::Policy> PolicyFor(std::string_view name);

Result<SimResult> Simulate(const Trace& trace, const ClusterSpec& cluster,
                           const SimOptions& options);

}  // namespace trainyard::sim
