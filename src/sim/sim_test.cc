#include "sim/sim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "sim/cluster.h"
#include "sim/report.h"
#include "sim/traces.h"

namespace trainyard::sim {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

ClusterSpec Cluster(int nodes, int gpus) {
  ClusterSpec c;
  for (int i = 0; i < nodes; ++i) {
    Node n;
    n.name = "n" + std::to_string(i);
    for (int g = 0; g < gpus; ++g) n.gpus.push_back(Gpu{g, "", "H100", 80 * kGiB, ""});
    n.topology.leaf = "leaf-0";
    c.nodes.push_back(std::move(n));
  }
  return c;
}

TraceJob Job(std::string id, Duration submit, int replicas, int gpus, Duration duration) {
  TraceJob j;
  j.id = std::move(id);
  j.submit = submit;
  j.replicas = replicas;
  j.gpus_per_replica = gpus;
  j.duration = duration;
  return j;
}

// The Kubernetes gang deadlock: 3 jobs of 4 single-GPU workers on 4 GPUs.
Trace DeadlockTrace() {
  Trace t;
  for (int i = 0; i < 3; ++i)
    t.jobs.push_back(Job("j" + std::to_string(i), seconds(0), 4, 1, hours(1)));
  return t;
}

TEST(SimTest, GangsAvoidTheDeadlockThatPodByPodPlacementHits) {
  ClusterSpec c = Cluster(4, 1);
  SimOptions o;
  o.policy = "k8s-default";
  auto k8s = Simulate(DeadlockTrace(), c, o);
  ASSERT_TRUE(k8s.ok()) << k8s.status().ToString();
  EXPECT_EQ(k8s->summary.never_started, 3);
  EXPECT_EQ(k8s->summary.completed, 0);
  o.policy = "trainyard";
  auto ours = Simulate(DeadlockTrace(), c, o);
  ASSERT_TRUE(ours.ok());
  EXPECT_EQ(ours->summary.completed, 3);
  EXPECT_EQ(ours->summary.never_started, 0);
  EXPECT_NEAR(ours->summary.makespan_s, 3 * 3600, 1);
  EXPECT_NEAR(ours->summary.gpu_util, 1.0, 1e-6);
}

TEST(SimTest, PreemptionLosesOnlyWorkSinceTheCheckpoint) {
  ClusterSpec c = Cluster(1, 8);
  Trace t;
  t.jobs.push_back(Job("low", seconds(0), 1, 8, hours(2)));
  TraceJob high = Job("high", minutes(45), 1, 8, minutes(30));
  high.priority_class = "production";
  t.jobs.push_back(high);
  SimOptions o;
  o.default_checkpoint_interval = minutes(20);
  o.preempt_grace = seconds(0);
  o.restart_overhead = seconds(0);
  o.schedule_interval = seconds(1);  // each pass's effects show at the next one
  auto r = Simulate(t, c, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->summary.preemptions, 1);
  // Preempted at 45m, last checkpoint at 40m: 5 minutes x 8 GPUs lost.
  EXPECT_NEAR(r->summary.lost_gpu_hours, 8 * 5.0 / 60, 1e-6);
  const JobRecord& low = r->jobs[0];
  EXPECT_EQ(low.preemptions, 1);
  // High starts one pass after the preemption and runs 30m; low then resumes from
  // its 40m of work and needs 80 more minutes.
  EXPECT_EQ(r->jobs[1].end, hours(1) + minutes(15) + seconds(1));
  EXPECT_EQ(low.end, hours(1) + minutes(15) + seconds(1) + minutes(80));
  EXPECT_LT(r->summary.ettr, 1.0);
}

TEST(SimTest, FailuresRequeueFromCheckpointsAndAreDeterministic) {
  ClusterSpec c = Cluster(8, 8);
  Trace t;
  for (int i = 0; i < 40; ++i)
    t.jobs.push_back(Job(std::string("j") + std::to_string(i), minutes(i), 1 + i % 2, 8, hours(3)));
  SimOptions o;
  o.gpu_mtbf_hours = 200;  // per GPU: a node of 8 fails every 25 hours on average
  o.seed = 7;
  auto a = Simulate(t, c, o);
  auto b = Simulate(t, c, o);
  ASSERT_TRUE(a.ok() && b.ok());
  int64_t failures = 0;
  for (const auto& j : a->jobs) failures += j.failures;
  EXPECT_GT(failures, 0);
  EXPECT_EQ(a->summary.completed, 40);
  EXPECT_EQ(a->summary.avg_jct_s, b->summary.avg_jct_s);
  EXPECT_EQ(a->summary.lost_gpu_hours, b->summary.lost_gpu_hours);
  EXPECT_GT(a->summary.lost_gpu_hours, 0);
}

TEST(SimTest, LoadFactorCompressesArrivals) {
  ClusterSpec c = Cluster(1, 8);
  Trace t;
  t.jobs.push_back(Job("a", seconds(0), 1, 8, minutes(10)));
  t.jobs.push_back(Job("b", hours(1), 1, 8, minutes(10)));
  SimOptions o;
  o.load_factor = 12;  // b arrives at 5m, while a still runs
  auto r = Simulate(t, c, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->jobs[1].submit, minutes(5));
  EXPECT_EQ(r->jobs[1].first_start, minutes(10));
}

// Without time limits backfill cannot plan when a blocked gang could start, so a
// later small job takes the GPUs it waits for; with estimated limits the gang gets
// a reservation and the small job waits behind it.
TEST(SimTest, TimeLimitFactorLetsBackfillReserveForABlockedGang) {
  ClusterSpec c = Cluster(1, 8);
  Trace t;
  t.jobs.push_back(Job("small0", seconds(0), 1, 4, hours(2)));
  t.jobs.push_back(Job("big", minutes(1), 1, 8, hours(1)));
  t.jobs.push_back(Job("small1", minutes(2), 1, 4, hours(2)));
  SimOptions o;
  auto plain = Simulate(t, c, o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->jobs[2].first_start, minutes(2));
  EXPECT_EQ(plain->jobs[1].first_start, hours(2) + minutes(2));
  o.time_limit_factor = 1;
  auto limited = Simulate(t, c, o);
  ASSERT_TRUE(limited.ok()) << limited.status().ToString();
  EXPECT_EQ(limited->jobs[1].first_start, hours(2));
  EXPECT_EQ(limited->jobs[2].first_start, hours(3));
  o.time_limit_factor = 0.5;  // limits would be hit, and the simulator does not stop jobs
  auto bad = Simulate(t, c, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("--time-limit-factor"));
}

// Everything a job's record says, as one line.
std::string RecordText(const JobRecord& r) {
  std::ostringstream out;
  out << r.id << ' ' << r.tenant << ' ' << r.gpus << ' ' << r.submit.count() << ' '
      << r.first_start.count() << ' ' << r.end.count() << ' ' << r.starts << ' ' << r.preemptions
      << ' ' << r.failures << ' ' << r.lost_work.count() << ' ' << r.run_gpu_time.count() << ' '
      << r.useful_gpu_time.count() << ' ' << r.held_idle_gpu_time.count();
  return out.str();
}

// The index the simulator keeps from pass to pass (sched::SnapshotIndex) changes how
// long passes take, never what they decide: under contention, with two tenants'
// guarantees and limits, three priority classes, time limits, gangs across leaves and
// node failures, every policy gives the same results both ways.
TEST(SimTest, KeptIndexGivesTheSameResultsAsFreshPasses) {
  SyntheticOptions so;
  so.seed = 5;
  so.jobs = 500;
  so.arrivals_per_hour = 300;
  so.duration_median = minutes(40);
  so.tenants = {{"a", 1.0}, {"b", 2.0}};
  so.priorities = {{"normal", 3.0}, {"production", 1.0}, {"best-effort", 1.0}};
  so.time_limit_factor = 1.5;
  const Trace trace = Synthesize(so);
  auto cluster = SyntheticCluster(24, 8, "H100", 6);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  cluster->queues = {Queue{"default", "a", "", 64, 160, 1.0},
                     Queue{"default", "b", "", 96, 192, 2.0}};
  for (std::string_view policy : PolicyNames()) {
    SimOptions o;
    o.policy = std::string(policy);
    o.gpu_mtbf_hours = 400;
    o.seed = 9;
    o.keep_index = true;
    auto kept = Simulate(trace, *cluster, o);
    o.keep_index = false;
    auto fresh = Simulate(trace, *cluster, o);
    ASSERT_TRUE(kept.ok() && fresh.ok()) << policy;
    EXPECT_GT(kept->summary.passes, 100) << policy;
    EXPECT_EQ(SummaryJson(kept->summary).dump(), SummaryJson(fresh->summary).dump()) << policy;
    ASSERT_EQ(kept->jobs.size(), fresh->jobs.size());
    for (size_t i = 0; i < kept->jobs.size(); ++i) {
      ASSERT_EQ(RecordText(kept->jobs[i]), RecordText(fresh->jobs[i])) << policy << " job " << i;
    }
  }
}

// Preemption pressure: injected high-priority jobs preempt the long normal jobs that
// fill the cluster (never under fifo, which does not preempt), every one of them runs,
// and the same seed gives the same jobs.
TEST(SimTest, PressureJobsPreemptLowerPriorityWork) {
  Trace t;
  for (int i = 0; i < 8; ++i) {
    t.jobs.push_back(Job("long" + std::to_string(i), minutes(i), 1, 4, hours(20)));
  }
  ClusterSpec c = Cluster(4, 8);
  SimOptions o;
  o.pressure_per_hour = 0.5;
  o.pressure_gpus = 16;  // two whole nodes
  o.pressure_duration = hours(1);
  auto ours = Simulate(t, c, o);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  int injected = 0;
  for (const JobRecord& r : ours->jobs) {
    if (r.id.rfind("pressure-", 0) != 0) continue;
    ++injected;
    EXPECT_EQ(r.gpus, 16) << r.id;
    EXPECT_EQ(r.tenant, "pressure") << r.id;
    EXPECT_GE(r.end.count(), 0) << r.id << " never finished";
    // It waits for its victims' grace period (60 s) and the next pass, no longer.
    EXPECT_LE(r.first_start - r.submit, Duration(minutes(2))) << r.id;
  }
  EXPECT_GT(injected, 0);
  EXPECT_GT(ours->summary.preemptions, 0);
  EXPECT_GT(ours->summary.lost_gpu_hours, 0);
  EXPECT_EQ(ours->summary.completed, ours->summary.jobs);
  auto again = Simulate(t, c, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(SummaryJson(again->summary).dump(), SummaryJson(ours->summary).dump());
  o.policy = "fifo";
  auto fifo = Simulate(t, c, o);
  ASSERT_TRUE(fifo.ok());
  EXPECT_EQ(fifo->summary.jobs, ours->summary.jobs);
  EXPECT_EQ(fifo->summary.preemptions, 0);
  // Configured queues: the first one by default, or the one named; others refused.
  c.queues = {Queue{"q1", "t1", "", 0, 32, 1.0}, Queue{"q2", "t2", "", 0, 32, 1.0}};
  for (TraceJob& j : t.jobs) {
    j.tenant = "t1";
    j.queue = "q1";
  }
  o.policy = "trainyard";
  auto first = Simulate(t, c, o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->jobs.back().tenant, "t1");
  o.pressure_queue = "t2/q2";
  auto named = Simulate(t, c, o);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->jobs.back().tenant, "t2");
  o.pressure_queue = "t3/q9";
  EXPECT_THAT(Simulate(t, c, o).status().message(),
              ::testing::AllOf(::testing::HasSubstr("--pressure-queue"),
                               ::testing::HasSubstr("t3/q9"), ::testing::HasSubstr("t1/q1")));
}

TEST(SimTest, RejectsBadPressureOptions) {
  Trace t;
  t.jobs.push_back(Job("a", seconds(0), 1, 1, hours(1)));
  ClusterSpec c = Cluster(2, 8);
  auto message = [&](auto change) {
    SimOptions o;
    o.pressure_per_hour = 1;
    change(o);
    auto r = Simulate(t, c, o);
    return r.ok() ? std::string("accepted") : std::string(r.status().message());
  };
  EXPECT_THAT(message([](SimOptions& o) { o.pressure_per_hour = -1; }),
              ::testing::HasSubstr("--pressure: must be a number of jobs per hour >= 0, got -1"));
  EXPECT_THAT(message([](SimOptions& o) { o.pressure_gpus = 0; }),
              ::testing::HasSubstr("--pressure-gpus: must be 1 to 1000000, got 0"));
  EXPECT_THAT(message([](SimOptions& o) { o.pressure_duration = Duration(0); }),
              ::testing::HasSubstr("--pressure-duration: must be > 0"));
  EXPECT_THAT(message([](SimOptions& o) { o.pressure_priority = "urgent"; }),
              ::testing::AllOf(::testing::HasSubstr("unknown priority class \"urgent\""),
                               ::testing::HasSubstr("valid: p0, production, normal, best-effort")));
  EXPECT_THAT(message([](SimOptions& o) { o.pressure_queue = "nobody"; }),
              ::testing::HasSubstr("--pressure-queue: must be TENANT/QUEUE, got \"nobody\""));
}

// Two jobs that each ask for half of one GPU run side by side with GPU sharing and
// count for half a GPU each; without it they take turns on whole GPUs.
TEST(SimTest, SharesOfOneGpuRunTogetherAndCountForTheirShare) {
  ClusterSpec c = Cluster(1, 1);
  Trace t;
  for (int i = 0; i < 2; ++i) {
    TraceJob j = Job("half-" + std::to_string(i), seconds(0), 1, 1, hours(1));
    j.gpu_milli = 500;
    t.jobs.push_back(j);
  }
  for (const char* policy : {"trainyard", "first-fit", "fragmentation", "k8s-default"}) {
    SimOptions o;
    o.policy = policy;
    auto shared = Simulate(t, c, o);
    ASSERT_TRUE(shared.ok()) << shared.status().ToString();
    EXPECT_EQ(shared->summary.completed, 2) << policy;
    EXPECT_NEAR(shared->summary.makespan_s, 3600, 60) << policy;  // side by side
    EXPECT_NEAR(shared->summary.gpu_util, 1.0, 0.02) << policy;   // 2 x 1/2 GPU for 1 h
    o.gpu_sharing = false;
    auto whole = Simulate(t, c, o);
    ASSERT_TRUE(whole.ok());
    EXPECT_NEAR(whole->summary.makespan_s, 7200, 60) << policy;  // one after the other
  }
}

TEST(SimTest, RejectsBadOptions) {
  SimOptions o;
  o.policy = "trainyrd";
  auto r = Simulate(DeadlockTrace(), Cluster(1, 1), o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("did you mean trainyard?"));
  o.policy = "fifo";
  o.load_factor = 0;
  EXPECT_FALSE(Simulate(DeadlockTrace(), Cluster(1, 1), o).ok());
  o.load_factor = 1;
  EXPECT_FALSE(Simulate(DeadlockTrace(), ClusterSpec{}, o).ok());
}

// The fill experiment: one kind of job, 3 GPUs, on two nodes of 4. To 100 % of the 8
// GPUs takes three (9 GPUs asked for; the trace's one job and two drawn copies); two
// fit, one per node, the third fails and 2 GPUs stay free, one on each node.
TEST(SimTest, FillDrawsJobsUntilTheDemandAndCountsTheGpusLeftFree) {
  Trace t;
  t.jobs.push_back(Job("three", seconds(0), 1, 3, hours(1)));
  FillOptions o;
  o.ratio = 1.0;
  for (const char* policy : {"first-fit", "best-fit", "fragmentation", "k8s-default", "fifo"}) {
    o.policy = policy;
    auto r = SimulateFill(t, Cluster(2, 4), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const FillSummary& s = r->summary;
    EXPECT_EQ(s.policy, policy);
    EXPECT_EQ(s.jobs, 3) << policy;
    EXPECT_EQ(s.placed, 2) << policy;
    EXPECT_EQ(s.failed, 1) << policy;
    EXPECT_EQ(s.capacity_gpus, 8);
    EXPECT_EQ(s.arrived_gpus, 9);
    EXPECT_DOUBLE_EQ(s.first_failure_arrived, 9.0 / 8.0);
    EXPECT_EQ(s.unallocated_gpus_at_capacity, 2) << policy;
    EXPECT_EQ(s.unallocated_gpus_end, 2) << policy;
    EXPECT_DOUBLE_EQ(s.gpu_alloc_ratio_end, 0.75);
    EXPECT_EQ(s.passes, 3);
    ASSERT_EQ(r->curve.size(), 3u);
    EXPECT_EQ(r->curve[0].arrived_gpus, 3);
    EXPECT_EQ(r->curve[0].allocated_gpus, 3);
    EXPECT_EQ(r->curve[1].allocated_gpus, 6);
    EXPECT_EQ(r->curve[2].arrived_gpus, 9);
    EXPECT_EQ(r->curve[2].allocated_gpus, 6);
    EXPECT_EQ(r->curve[0].job, "three");  // the trace's own jobs first, then drawn copies
    EXPECT_EQ(r->curve[1].job, "three#1");
    EXPECT_TRUE(r->curve[1].placed);
    EXPECT_FALSE(r->curve[2].placed);
  }
  // Below 100 % the capacity is never reached: no figure at capacity, and nothing failed.
  o.ratio = 0.5;
  auto half = SimulateFill(t, Cluster(2, 4), o);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->summary.jobs, 2);
  EXPECT_EQ(half->summary.failed, 0);
  EXPECT_EQ(half->summary.first_failure_arrived, -1);
  EXPECT_EQ(half->summary.unallocated_gpus_at_capacity, -1);
}

// Shares count for their share; jobs of no GPUs arrive and take CPUs but add no
// demand; the same seed gives the same run, another seed another order.
TEST(SimTest, FillCountsSharesAndIsDeterministicPerSeed) {
  Trace t;
  for (int i = 0; i < 6; ++i) {
    TraceJob j = Job("share" + std::to_string(i), seconds(i), 1, 1, hours(1));
    j.gpu_milli = 300 + 100 * i;
    j.milli_cpus = 8'000;
    t.jobs.push_back(j);
  }
  TraceJob cpu = Job("cpu", seconds(9), 1, 0, hours(1));
  cpu.milli_cpus = 4'000;
  t.jobs.push_back(cpu);
  ClusterSpec c = Cluster(2, 2);
  for (Node& n : c.nodes) n.milli_cpus = 32'000;
  FillOptions o;
  o.policy = "fragmentation";
  o.ratio = 2.0;
  auto a = SimulateFill(t, c, o);
  auto b = SimulateFill(t, c, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(nlohmann::ordered_json(FillSummaryJson(a->summary)).dump(),
            nlohmann::ordered_json(FillSummaryJson(b->summary)).dump());
  EXPECT_EQ(a->summary.placed + a->summary.failed, a->summary.jobs);
  EXPECT_GE(a->summary.arrived_gpus, 8);
  double last = 0;
  for (const FillPoint& p : a->curve) {
    EXPECT_GE(p.arrived_gpus, last);
    EXPECT_LE(p.allocated_gpus, 4 + 1e-9);
    last = p.arrived_gpus;
  }
  // Two halves of one GPU fill it: two arrive, both placed, nothing left free.
  Trace halves;
  halves.jobs.push_back(Job("half", seconds(0), 1, 1, hours(1)));
  halves.jobs[0].gpu_milli = 500;
  o.ratio = 1.0;
  auto h = SimulateFill(halves, Cluster(1, 1), o);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->summary.jobs, 2);
  EXPECT_EQ(h->summary.placed, 2);
  EXPECT_DOUBLE_EQ(h->summary.arrived_gpus, 1.0);
  EXPECT_DOUBLE_EQ(h->summary.unallocated_gpus_at_capacity, 0);
  o.ratio = 2.0;
  bool differs = false;
  for (uint64_t seed = 2; seed < 10 && !differs; ++seed) {
    o.seed = seed;
    auto other = SimulateFill(t, c, o);
    ASSERT_TRUE(other.ok());
    for (size_t i = 0; i < std::min(other->curve.size(), a->curve.size()); ++i) {
      differs = differs || other->curve[i].arrived_gpus != a->curve[i].arrived_gpus;
    }
  }
  EXPECT_TRUE(differs);
}

TEST(SimTest, FillRejectsBadOptions) {
  Trace t;
  t.jobs.push_back(Job("one", seconds(0), 1, 1, hours(1)));
  FillOptions o;
  for (double bad : {0.0, -1.0, 101.0, std::nan("")}) {
    o.ratio = bad;
    auto r = SimulateFill(t, Cluster(1, 1), o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("--fill: must be"));
  }
  o.ratio = 1;
  o.policy = "trainyrd";
  EXPECT_THAT(SimulateFill(t, Cluster(1, 1), o).status().message(),
              ::testing::HasSubstr("did you mean trainyard?"));
  o.policy = "trainyard";
  EXPECT_FALSE(SimulateFill(t, ClusterSpec{}, o).ok());
  EXPECT_THAT(SimulateFill(t, Cluster(1, 0), o).status().message(),
              ::testing::HasSubstr("has no GPUs"));
  Trace cpu_only;
  cpu_only.jobs.push_back(Job("cpu", seconds(0), 1, 0, hours(1)));
  EXPECT_THAT(SimulateFill(cpu_only, Cluster(1, 1), o).status().message(),
              ::testing::HasSubstr("ask for no GPUs"));
}

}  // namespace
}  // namespace trainyard::sim
