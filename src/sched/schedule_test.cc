#include "sched/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "sched/testing.h"

namespace trainyard::sched {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::HasSubstr;

Timestamp T(int64_t s) { return Timestamp(seconds(s)); }

Node MakeNode(std::string name, int gpus, std::string leaf = "leaf-0", std::string type = "H100") {
  Node n;
  n.name = std::move(name);
  for (int i = 0; i < gpus; ++i) {
    n.gpus.push_back(Gpu{i, n.name + "-gpu" + std::to_string(i), type, 80 * kGiB,
                         n.name + "-nvl" + std::to_string(i / 4)});
  }
  n.milli_cpus = 96'000;
  n.memory_bytes = 1024 * kGiB;
  n.topology.leaf = std::move(leaf);
  return n;
}

PendingJob Pending(JobId id, int replicas, int gpus, int64_t submit = 0) {
  PendingJob j;
  j.id = id;
  j.name = "job-" + std::to_string(id);
  j.tenant = "default";
  j.queue = "default";
  j.priority = 100;
  j.replicas = replicas;
  j.min_replicas = replicas;
  j.per_replica.gpus = gpus;
  j.submit_time = T(submit);
  return j;
}

TEST(ScheduleTest, GangsStartWholeNeverPartially) {
  // The Kubernetes deadlock: 3 jobs of 4 workers on 4 GPUs. Pod-by-pod placement
  // gives each job some workers and none can run; gangs start one job whole.
  Snapshot s;
  s.now = T(100);
  for (int i = 0; i < 4; ++i) s.nodes.push_back(MakeNode("n" + std::to_string(i), 1));
  for (int j = 1; j <= 3; ++j) s.pending.push_back(Pending(j, 4, 1, j));
  Decisions d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, 1);
  EXPECT_EQ(d.binds[0].replicas.size(), 4u);
  EXPECT_EQ(d.waiting.size(), 2u);
}

// One free GPU and three 1-GPU jobs: which one short-first binds.
JobId ShortFirstPick(std::vector<PendingJob> jobs) {
  Snapshot s;
  s.now = T(10 * 24 * 3600);
  s.nodes.push_back(MakeNode("n0", 1));
  s.pending = std::move(jobs);
  Policy p;
  p.ordering = "short-first";
  Decisions d = Schedule(s, p);
  EXPECT_EQ(d.binds.size(), 1u);
  return d.binds.empty() ? 0 : d.binds[0].job;
}

TEST(ScheduleTest, ShortFirstPutsShortLimitsAheadButAgesLongOnes) {
  auto job = [](JobId id, int64_t submit_h, int64_t limit_h) {
    PendingJob j = Pending(id, 1, 1, submit_h * 3600);
    j.time_limit = hours(limit_h);
    return j;
  };
  // A 1-hour job submitted 2 hours after a 10-hour one goes first...
  EXPECT_EQ(ShortFirstPick({job(1, 0, 10), job(2, 2, 1)}), 2);
  // ...but not one submitted 10 hours after it: the long job has aged past it.
  EXPECT_EQ(ShortFirstPick({job(1, 0, 10), job(2, 10, 1)}), 1);
  // Higher priority still comes first, whatever the limits.
  PendingJob urgent = job(3, 5, 48);
  urgent.priority = 200;
  EXPECT_EQ(ShortFirstPick({job(1, 0, 1), urgent}), 3);
  // A job without a limit counts as 24 hours.
  PendingJob open = Pending(4, 1, 1, 0);
  EXPECT_EQ(ShortFirstPick({open, job(5, 20, 3)}), 5);
  EXPECT_EQ(ShortFirstPick({open, job(5, 22, 3)}), 4);
  // Equal limits: submission order, as the priority ordering.
  EXPECT_EQ(ShortFirstPick({job(7, 1, 2), job(6, 0, 2)}), 6);
}

TEST(ScheduleTest, InfeasibleJobsSayWhy) {
  Snapshot s;
  s.nodes.push_back(MakeNode("n0", 8));
  s.pending.push_back(Pending(1, 1, 16));
  PendingJob a100 = Pending(2, 1, 1);
  a100.per_replica.gpu_type = "A100";
  s.pending.push_back(a100);
  Decisions d = Schedule(s, Policy{});
  ASSERT_EQ(d.infeasible.size(), 2u);
  EXPECT_THAT(d.infeasible[0].reason, HasSubstr("the largest GPU node has 8 GPUs"));
  EXPECT_THAT(d.infeasible[1].reason, HasSubstr("asks for A100 GPUs; this cluster has H100"));
}

TEST(ScheduleTest, ANodeExcludedTwiceCountsOnce) {
  // Three 8-GPU nodes; a 2-node gang that excludes n0 (named twice) still fits on
  // the other two, and one that needs all three says one node is excluded.
  Snapshot s;
  for (int i = 0; i < 3; ++i) s.nodes.push_back(MakeNode("n" + std::to_string(i), 8));
  PendingJob fits = Pending(1, 2, 8);
  fits.excluded_nodes = {"n0", "n0"};
  PendingJob too_big = Pending(2, 3, 8);
  too_big.excluded_nodes = {"n0", "n0"};
  s.pending = {too_big, fits};
  Decisions d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, 1);
  for (const Placement& p : d.binds[0].replicas) EXPECT_NE(p.node, "n0");
  ASSERT_EQ(d.infeasible.size(), 1u);
  EXPECT_EQ(d.infeasible[0].job, 2);
  EXPECT_THAT(d.infeasible[0].reason,
              HasSubstr("the whole cluster holds at most 2 (excluding its 1 excluded node(s))"));
}

TEST(ScheduleTest, AJobReadingStagedDataPrefersNodesHoldingItButNeverWaitsForThem) {
  const std::string imagenet = "sha256:" + std::string(64, 'a');
  const std::string coco = "sha256:" + std::string(64, 'c');
  // Best fit alone puts a 4-GPU job on n4 (4 GPUs) rather than n8 (8 GPUs).
  auto cluster = [&] {
    Snapshot s;
    s.nodes.push_back(MakeNode("n4", 4));
    s.nodes.push_back(MakeNode("n8", 8));
    s.nodes[1].cached_data = {imagenet};
    return s;
  };
  Snapshot s = cluster();
  PendingJob reader = Pending(1, 1, 4);
  reader.data_versions = {imagenet};
  PendingJob plain = Pending(2, 1, 4);
  s.pending = {reader, plain};
  Decisions d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 2u);
  EXPECT_EQ(d.binds[0].replicas[0].node, "n8");  // holds its data
  EXPECT_EQ(d.binds[1].replicas[0].node, "n4");  // best fit, as ever

  // A gang that does not fit on the nodes holding its data goes where it fits.
  s = cluster();
  PendingJob gang = Pending(3, 3, 4);  // n8 holds two replicas, not three
  gang.data_versions = {imagenet};
  s.pending = {gang};
  d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].replicas.size(), 3u);
  // No node holds both of its versions: no preference, best fit.
  s = cluster();
  PendingJob both = Pending(4, 1, 4);
  both.data_versions = {imagenet, coco};
  s.pending = {both};
  d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].replicas[0].node, "n4");
  // A hard topology rule still wins: same-node cannot use n8 and n4 together.
  s = cluster();
  PendingJob pinned = Pending(5, 2, 4);
  pinned.data_versions = {imagenet};
  pinned.topology.constraint = TopologyConstraint::kSameNode;
  s.pending = {pinned};
  d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].replicas[0].node, "n8");
  EXPECT_EQ(d.binds[0].replicas[1].node, "n8");
}

TEST(ScheduleTest, IsDeterministic) {
  Snapshot s;
  s.now = T(1000);
  for (int i = 0; i < 16; ++i)
    s.nodes.push_back(MakeNode("n" + std::to_string(i), 8, "leaf-" + std::to_string(i % 4)));
  for (int j = 1; j <= 40; ++j) s.pending.push_back(Pending(j, 1 + j % 3, 1 << (j % 4), j));
  EXPECT_EQ(Schedule(s, Policy{}), Schedule(s, Policy{}));
}

// Schedule with a SnapshotIndex kept in step decides exactly what Schedule decides
// from scratch, pass after pass, as jobs bind, victims leave, running jobs end and
// nodes change state; with configured and implicit queues.
TEST(ScheduleTest, AKeptSnapshotIndexDecidesAsAFreshPass) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ClusterShape c;
    c.nodes = 96;
    c.nodes_per_leaf = 16;
    c.unready_fraction = 0.05;
    WorkloadShape w;
    w.pending = 150;
    w.define_queues = seed % 2 == 0;
    w.mix.gpu_share_fraction = seed % 3 == 0 ? 0.4 : 0;  // shares of one GPU
    Snapshot snap = SyntheticSnapshot(c, w, seed);
    SnapshotIndex kept(snap);
    std::mt19937_64 rng(seed);
    for (int round = 0; round < 8; ++round) {
      const std::string when = "seed " + std::to_string(seed) + " round " + std::to_string(round);
      const Decisions d = Schedule(snap, Policy{}, kept);
      ASSERT_TRUE(d == Schedule(snap, Policy{})) << when;
      ASSERT_TRUE(Schedule(snap, Policy{}, kept) == d) << when << " (again)";
      // Bound jobs start; victims and a few other running jobs end.
      for (const Bind& b : d.binds) {
        auto it = std::find_if(snap.pending.begin(), snap.pending.end(),
                               [&](const PendingJob& p) { return p.id == b.job; });
        ASSERT_NE(it, snap.pending.end());
        RunningJob r;
        r.id = it->id;
        r.tenant = it->tenant;
        r.queue = it->queue;
        r.priority = it->priority;
        r.preemptible = it->preemptible;
        r.per_replica = it->per_replica;
        r.replicas = b.replicas;
        r.start_time = snap.now;
        snap.pending.erase(it);
        snap.running.push_back(std::move(r));
        kept.RunningAdded(snap.running.back());
      }
      std::set<JobId> leaving;
      for (const Preempt& p : d.preemptions) leaving.insert(p.job);
      for (const RunningJob& r : snap.running) {
        if (rng() % 10 == 0) leaving.insert(r.id);
      }
      for (size_t i = 0; i < snap.running.size();) {
        if (leaving.count(snap.running[i].id) == 0) {
          ++i;
          continue;
        }
        kept.RunningRemoved(snap.running[i]);
        snap.running[i] = std::move(snap.running.back());
        snap.running.pop_back();
      }
      for (int k = 0; k < 3; ++k) {
        const size_t n = rng() % snap.nodes.size();
        snap.nodes[n].state =
            snap.nodes[n].state == NodeState::kReady ? NodeState::kNotReady : NodeState::kReady;
        kept.NodeStateChanged(n);
      }
      snap.now += minutes(10);
    }
  }
}

// GPU sharing: shares fill a GPU before another is taken (best fit) so that whole
// GPUs stay whole; a whole-GPU job never lands on a shared GPU; a share that finds
// no room waits, saying what it asks for.
TEST(ScheduleTest, SharesOfOneGpuPackAndLeaveWholeGpusWhole) {
  Snapshot s;
  s.now = T(100);
  s.nodes.push_back(MakeNode("n0", 2));
  RunningJob r;
  r.id = 1;
  r.tenant = r.queue = "default";
  r.per_replica.gpus = 1;
  r.per_replica.gpu_milli = 600;
  r.replicas = {{"n0", {1}}};
  r.start_time = T(0);
  s.running.push_back(r);
  auto share = [](JobId id, int milli) {
    PendingJob j = Pending(id, 1, 1, id);
    j.per_replica.gpu_milli = milli;
    return j;
  };
  s.pending = {share(2, 400), share(3, 500), Pending(4, 1, 1, 4), share(5, 600)};
  for (const char* placement : {"topology", "best-fit", "fragmentation", "first-fit"}) {
    Policy p;
    p.placement = placement;
    p.preemption = "none";
    Decisions d = Schedule(s, p);
    ASSERT_EQ(d.binds.size(), 2u) << placement;
    EXPECT_EQ(d.binds[0].job, 2) << placement;
    EXPECT_EQ(d.binds[1].job, 3) << placement;
    if (std::string(placement) == "first-fit") {
      // The first GPU with room, free or not: both shares on GPU 0, 100 + 400 left.
      EXPECT_EQ(d.binds[0].replicas[0].gpus, std::vector<int>{0});
      EXPECT_EQ(d.binds[1].replicas[0].gpus, std::vector<int>{0});
    } else {
      // Job 2 fills shared GPU 1 exactly; job 3 then needs GPU 0.
      EXPECT_EQ(d.binds[0].replicas[0].gpus, std::vector<int>{1}) << placement;
      EXPECT_EQ(d.binds[1].replicas[0].gpus, std::vector<int>{0}) << placement;
    }
    // The whole-GPU job does not land on a shared GPU; the 600 share finds no room.
    ASSERT_EQ(d.waiting.size(), 2u) << placement;
    EXPECT_EQ(d.waiting[0].job, 4) << placement;
    EXPECT_EQ(d.waiting[1].job, 5) << placement;
    EXPECT_THAT(d.waiting[1].reason.str(), HasSubstr("waiting for 600/1000 of one GPU"))
        << placement;
  }
}

// Replicas of no GPUs keep off free GPUs: first fit takes node order; best fit the
// node with the fewest GPUs free; fragmentation the node where their CPUs strand the
// least GPU capacity for the mix (a node whose last CPUs a 1-GPU job needs is avoided
// even when it has fewer GPUs free).
TEST(ScheduleTest, CpuOnlyJobsKeepOffFreeGpus) {
  auto cpu_only = [](JobId id, int replicas, int64_t milli_cpus) {
    PendingJob j = Pending(id, replicas, 0, id);
    j.per_replica.milli_cpus = milli_cpus;
    return j;
  };
  auto running = [](JobId id, const std::string& node, std::vector<int> gpus, int64_t milli_cpus) {
    RunningJob r;
    r.id = id;
    r.tenant = r.queue = "default";
    r.per_replica.gpus = static_cast<int>(gpus.size());
    r.per_replica.milli_cpus = milli_cpus;
    r.replicas = {{node, std::move(gpus)}};
    r.start_time = T(0);
    return r;
  };
  auto placed_on = [](const Policy& p, const Snapshot& s) {
    Decisions d = Schedule(s, p);
    std::vector<std::string> nodes;
    if (d.binds.size() == 1) {
      for (const auto& r : d.binds[0].replicas) nodes.push_back(r.node);
    }
    return nodes;
  };
  using V = std::vector<std::string>;
  {
    // n0: both GPUs free; n1: one of two taken; n2: both taken.
    Snapshot s;
    s.now = T(100);
    for (const char* n : {"n0", "n1", "n2"}) s.nodes.push_back(MakeNode(n, 2));
    s.running = {running(1, "n1", {0}, 8'000), running(2, "n2", {0, 1}, 8'000)};
    s.pending = {cpu_only(3, 3, 40'000)};
    Policy p;
    p.preemption = "none";
    p.placement = "first-fit";
    EXPECT_EQ(placed_on(p, s), (V{"n0", "n0", "n1"}));
    // Two fit on n2 (88 CPUs free, 40 each); the third goes where one GPU is free.
    for (const char* placement : {"best-fit", "fragmentation", "topology"}) {
      p.placement = placement;
      EXPECT_EQ(placed_on(p, s), (V{"n2", "n2", "n1"})) << placement;
    }
  }
  {
    // n1 has one GPU free and 8 CPUs: a 4-CPU job there would leave its GPU unusable
    // to the 1-GPU, 8-CPU jobs of the mix; n0 has two GPUs free and CPUs to spare.
    Snapshot s;
    s.now = T(100);
    s.nodes = {MakeNode("n0", 2), MakeNode("n1", 2)};
    s.nodes[1].milli_cpus = 16'000;
    s.running = {running(1, "n1", {0}, 8'000)};
    s.pending = {cpu_only(2, 1, 4'000)};
    Policy p;
    p.preemption = "none";
    p.placement = "best-fit";
    EXPECT_EQ(placed_on(p, s), V{"n1"});
    p.placement = "fragmentation";
    EXPECT_EQ(placed_on(p, s), V{"n0"});
  }
  {
    // Every GPU taken. The mix has an 8-GPU kind that needs 120 CPUs, which only n0
    // (128 CPUs) could give once its jobs end: fragmentation keeps n0 for it, best fit
    // takes node order.
    Snapshot s;
    s.now = T(100);
    s.nodes = {MakeNode("n0", 8), MakeNode("n1", 8)};
    s.nodes[0].milli_cpus = 128'000;
    s.running = {running(1, "n0", {0, 1, 2, 3, 4, 5, 6, 7}, 8'000),
                 running(2, "n1", {0, 1, 2, 3, 4, 5, 6, 7}, 8'000)};
    PendingJob big = Pending(3, 1, 8, 3);
    big.per_replica.milli_cpus = 120'000;
    s.pending = {big, cpu_only(4, 1, 10'000)};
    Policy p;
    p.preemption = "none";
    p.placement = "best-fit";
    EXPECT_EQ(placed_on(p, s), V{"n0"});
    p.placement = "fragmentation";
    EXPECT_EQ(placed_on(p, s), V{"n1"});
  }
}

// A gang of shares keeps to one node under a hard same-node constraint, and spreads
// by best fit without one.
TEST(ScheduleTest, AGangOfSharesKeepsItsTopologyConstraint) {
  Snapshot s;
  s.now = T(100);
  s.nodes.push_back(MakeNode("n0", 1));
  s.nodes.push_back(MakeNode("n1", 2));
  PendingJob gang = Pending(1, 2, 1, 1);
  gang.per_replica.gpu_milli = 600;
  s.pending = {gang};
  Decisions spread = Schedule(s, Policy{});
  ASSERT_EQ(spread.binds.size(), 1u);
  ASSERT_EQ(spread.binds[0].replicas.size(), 2u);
  EXPECT_EQ(spread.binds[0].replicas[0].node, "n0");  // the node with the fewest free GPUs
  EXPECT_EQ(spread.binds[0].replicas[1].node, "n1");
  s.pending[0].topology.constraint = TopologyConstraint::kSameNode;
  s.pending[0].topology.hard = true;
  Decisions together = Schedule(s, Policy{});
  ASSERT_EQ(together.binds.size(), 1u);
  ASSERT_EQ(together.binds[0].replicas.size(), 2u);
  EXPECT_EQ(together.binds[0].replicas[0].node, "n1");  // n0's one GPU holds one share
  EXPECT_EQ(together.binds[0].replicas[1].node, "n1");
  EXPECT_NE(together.binds[0].replicas[0].gpus, together.binds[0].replicas[1].gpus);
}

// An elastic gang of shares (min_replicas 1) was placed without its hard constraint:
// PlaceShares tested the constraint only for gangs of more than one replica at
// minimum, and then placed up to `replicas` anywhere (found by the contract checker).
TEST(ScheduleTest, AnElasticGangOfSharesKeepsItsHardConstraint) {
  Snapshot s;
  s.now = T(100);
  s.nodes.push_back(MakeNode("n0", 1));
  s.nodes.push_back(MakeNode("n1", 1));
  PendingJob gang = Pending(1, 2, 1, 1);
  gang.min_replicas = 1;
  gang.per_replica.gpu_milli = 600;
  gang.topology = {TopologyConstraint::kSameNode, true};
  s.pending = {gang};
  Decisions d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 1u) << "one replica fits on either node";
  ASSERT_EQ(d.binds[0].replicas.size(), 1u) << "a second one would be on the other node";
  s.pending[0].topology = {};  // no constraint: both replicas, one per node
  d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].replicas.size(), 2u);
}

}  // namespace
}  // namespace trainyard::sched
