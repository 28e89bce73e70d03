// Benchmarks of sched::Schedule at the scale the scheduler is judged at: 10,000
// nodes of 8 GPUs and 100,000 pending jobs (ARCHITECTURE.md, "Notes on speed").
// Snapshots come from the seeded generator in sched/testing.h and are built outside
// the timed loop. Figures only; nothing here passes or fails on time.
//
//   FullPass/leaf_nodes:N     one pass, 10k nodes half full, 100k pending jobs of the
//                             realistic size mix; N nodes per leaf switch. Reports
//                             the pass's peak RSS growth (VmHWM after the pass minus
//                             VmRSS before it, with the peak reset in between).
//   Burst/custom_pct:P        10,000 single-GPU jobs onto an empty 10k-node cluster;
//                             items_per_second is jobs bound per second. P% of jobs
//                             ask for their own CPUs/memory (many distinct shapes).
//   PreemptFor512GpuGang/N    one 512-GPU hard same-leaf gang on a full cluster of
//                             low-priority preemptible jobs: the victim search.
//   Scaling/nodes/pending     pass time at 1k-10k nodes and 10k-100k pending jobs.
//   IndexBuild/leaf_nodes:N   building the node index alone (what every pass pays
//                             first) for the PreemptFor512GpuGang cluster.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <fstream>
#include <functional>
#include <string>
#include <string_view>

#include "core/memory.h"
#include "sched/index.h"
#include "sched/schedule.h"
#include "sched/testing.h"

namespace trainyard::sched {
namespace {

// The snapshot last asked for, kept between Google Benchmark's calls of a benchmark
// (it calls each one several times while it settles the iteration count).
const Snapshot& Cached(const std::string& key, const std::function<Snapshot()>& make) {
  static std::string* cached_key = new std::string();
  static Snapshot* cached = new Snapshot();
  if (*cached_key != key) {
    *cached = Snapshot();  // free the old one before building the next
    *cached = make();
    *cached_key = key;
  }
  return *cached;
}

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 when unreadable.
int64_t StatusKiB(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false when not allowed.
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

int64_t MaxRssKiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

void CountDecisions(benchmark::State& state, const Decisions& d) {
  state.counters["binds"] = static_cast<double>(d.binds.size());
  state.counters["waiting"] = static_cast<double>(d.waiting.size());
  state.counters["infeasible"] = static_cast<double>(d.infeasible.size());
  state.counters["preempts"] = static_cast<double>(d.preemptions.size());
  state.counters["reserves"] = static_cast<double>(d.reservations.size());
}

double GpuFill(const Snapshot& s) {
  int64_t total = 0, used = 0;
  for (const Node& n : s.nodes) total += static_cast<int64_t>(n.gpus.size());
  for (const RunningJob& r : s.running) used += r.Gpus();
  return total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0;
}

// A cluster of `nodes` 8-GPU nodes, `running_fill` of its GPUs busy, and `pending`
// jobs of the default (trace-like) size mix.
Snapshot Workload(int nodes, int nodes_per_leaf, int pending, double running_fill) {
  ClusterShape c;
  c.nodes = nodes;
  c.nodes_per_leaf = nodes_per_leaf;
  WorkloadShape w;
  w.pending = pending;
  w.running_fill = running_fill;
  return SyntheticSnapshot(c, w, /*seed=*/20261129);
}

void BM_FullPass(benchmark::State& state) {
  const int per_leaf = static_cast<int>(state.range(0));
  const Snapshot& s = Cached("full/" + std::to_string(per_leaf),
                             [&] { return Workload(10'000, per_leaf, 100'000, 0.5); });
  const Policy policy;
  const bool reset = ResetPeakRss();
  const int64_t rss_before = StatusKiB("VmRSS");
  const int64_t maxrss_before = MaxRssKiB();
  Decisions d;
  for (auto _ : state) {
    d = Schedule(s, policy);
    benchmark::DoNotOptimize(d);
  }
  CountDecisions(state, d);
  state.counters["leaves"] = (10'000 + per_leaf - 1) / per_leaf;
  state.counters["fill"] = GpuFill(s);
  // Includes the Decisions kept alive in `d`, which is what a caller holds too.
  state.counters["peak_rss_growth_MiB"] =
      reset ? static_cast<double>(StatusKiB("VmHWM") - rss_before) / 1024
            : static_cast<double>(MaxRssKiB() - maxrss_before) / 1024;
  state.counters["process_peak_MiB"] = static_cast<double>(MaxRssKiB()) / 1024;
}
// 16 leaves of 625 nodes, and 313 leaves of 32 nodes (a 64-port leaf switch with
// 8 rails of 400G per node is closer to 32 nodes).
BENCHMARK(BM_FullPass)
    ->ArgName("leaf_nodes")
    ->Arg(625)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Burst(benchmark::State& state) {
  const int jobs = 10'000;
  const double custom = static_cast<double>(state.range(0)) / 100;
  const Snapshot& s = Cached("burst/" + std::to_string(state.range(0)), [&] {
    ClusterShape c;
    c.nodes = 10'000;
    WorkloadShape w;
    w.pending = jobs;
    w.running_fill = 0;
    w.mix.sizes = {{1, 1}};
    w.mix.custom_resources_fraction = custom;
    w.held_fraction = 0;
    w.backoff_fraction = 0;
    w.excluded_fraction = 0;
    return SyntheticSnapshot(c, w, 7);
  });
  const Policy policy;
  Decisions d;
  for (auto _ : state) {
    d = Schedule(s, policy);
    benchmark::DoNotOptimize(d);
  }
  CountDecisions(state, d);
  state.SetItemsProcessed(state.iterations() * jobs);
}
// custom_pct: share of jobs with their own CPU/memory request (the rest take one of
// a few round defaults); the pass's cost grows with the number of distinct shapes.
BENCHMARK(BM_Burst)
    ->ArgName("custom_pct")
    ->Arg(20)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_PreemptFor512GpuGang(benchmark::State& state) {
  const int per_leaf = static_cast<int>(state.range(0));
  const Snapshot& s = Cached("preempt/" + std::to_string(per_leaf), [&] {
    ClusterShape c;
    c.nodes = 10'000;
    c.nodes_per_leaf = per_leaf;
    c.models = {{"H100", int64_t{80} << 30, 1}};
    c.unready_fraction = 0;
    WorkloadShape w;
    w.define_queues = false;  // implicit queues: every busy queue is borrowing
    w.running_fill = 1.0;
    w.pending = 0;
    w.young_fraction = 0;
    w.preempting_fraction = 0;
    w.mix.priority_weights = {0, 0, 0, 1};  // best-effort
    w.mix.non_preemptible_fraction = 0;
    Snapshot snap = SyntheticSnapshot(c, w, 11);
    PendingJob j;
    j.id = 1'000'000;
    j.name = "gang-512";
    j.tenant = kDefaultTenant;
    j.queue = "q0";
    j.priority = 500;
    j.replicas = 64;
    j.min_replicas = 64;
    j.per_replica.gpus = 8;
    j.per_replica.gpu_type = "H100";
    j.per_replica.milli_cpus = 96'000;
    j.per_replica.memory_bytes = int64_t{1} << 40;
    j.topology = {TopologyConstraint::kSameLeaf, /*hard=*/true};
    j.submit_time = snap.now - std::chrono::minutes(5);
    j.eligible_time = j.submit_time;
    snap.pending.push_back(j);
    return snap;
  });
  const Policy policy;
  Decisions d;
  for (auto _ : state) {
    d = Schedule(s, policy);
    benchmark::DoNotOptimize(d);
  }
  CountDecisions(state, d);
  double lost = 0;
  for (const Preempt& p : d.preemptions)
    lost += std::chrono::duration<double>(p.lost_gpu_time).count();
  state.counters["lost_gpu_hours"] = lost / 3600;
  state.counters["running_jobs"] = static_cast<double>(s.running.size());
  state.counters["fill"] = GpuFill(s);
}
// 64 nodes per leaf: a leaf holds exactly one 512-GPU gang; 625: 16 leaves.
BENCHMARK(BM_PreemptFor512GpuGang)
    ->ArgName("leaf_nodes")
    ->Arg(64)
    ->Arg(625)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_IndexBuild(benchmark::State& state) {
  const int per_leaf = static_cast<int>(state.range(0));
  ClusterShape c;
  c.nodes = 10'000;
  c.nodes_per_leaf = per_leaf;
  c.models = {{"H100", int64_t{80} << 30, 1}};
  c.unready_fraction = 0;
  WorkloadShape w;
  w.define_queues = false;
  w.running_fill = 1.0;
  w.pending = 0;
  const Snapshot& s =
      Cached("index/" + std::to_string(per_leaf), [&] { return SyntheticSnapshot(c, w, 11); });
  for (auto _ : state) {
    NodeIndex index(s);
    benchmark::DoNotOptimize(index);
  }
  state.counters["running_jobs"] = static_cast<double>(s.running.size());
}
BENCHMARK(BM_IndexBuild)->ArgName("leaf_nodes")->Arg(64)->Unit(benchmark::kMillisecond);

void BM_Scaling(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int pending = static_cast<int>(state.range(1));
  const Snapshot& s = Cached("scale/" + std::to_string(nodes) + "/" + std::to_string(pending),
                             [&] { return Workload(nodes, 32, pending, 0.5); });
  const Policy policy;
  Decisions d;
  for (auto _ : state) {
    d = Schedule(s, policy);
    benchmark::DoNotOptimize(d);
  }
  CountDecisions(state, d);
}
BENCHMARK(BM_Scaling)
    ->ArgNames({"nodes", "pending"})
    ->ArgsProduct({{1'000, 5'000, 10'000}, {10'000, 50'000, 100'000}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace trainyard::sched

// The server and the simulator keep freed memory for reuse (core/memory.h); so does
// this benchmark, unless --default-malloc asks for the C library's defaults (to
// measure what that setting is worth).
int main(int argc, char** argv) {
  bool default_malloc = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--default-malloc") {
      default_malloc = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (!default_malloc) trainyard::KeepFreedMemoryForReuse();
  benchmark::AddCustomContext("malloc", default_malloc ? "default" : "keep freed memory");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
