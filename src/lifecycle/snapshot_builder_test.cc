#include "lifecycle/snapshot_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "sched/las.h"
#include "sched/schedule.h"

namespace trainyard::lifecycle {
namespace {

using std::chrono::hours;
using std::chrono::minutes;

const Timestamp kT0 = Timestamp(Duration(1'000'000));

Node MakeNode(const std::string& name, int gpus) {
  Node n;
  n.name = name;
  for (int i = 0; i < gpus; ++i)
    n.gpus.push_back({i, name + "-" + std::to_string(i), "H100", 80LL << 30, name});
  n.milli_cpus = 64'000;
  n.memory_bytes = 512LL << 30;
  n.topology.leaf = "leaf-0";
  return n;
}

Job PendingJob(JobId id, int gpus, int replicas = 1, const std::string& priority = "normal") {
  Job j;
  j.id = id;
  j.spec.name = "job-" + std::to_string(id);
  j.spec.tenant = "t";
  j.spec.queue = "q";
  j.spec.priority = priority;
  j.spec.replicas = replicas;
  j.spec.min_replicas = replicas;
  j.spec.resources.gpus = gpus;
  j.state = JobState::kPending;
  j.submit_time = kT0;
  j.state_time = kT0;
  return j;
}

void Start(Job& j, Timestamp at, std::vector<std::string> nodes,
           std::vector<std::vector<int>> gpus) {
  ASSERT_TRUE(j.StartAttempt(at, std::move(nodes)).ok());
  j.attempts.back().gpus = std::move(gpus);
  ASSERT_TRUE(j.TransitionTo(JobState::kRunning, at, "running").ok());
}

std::map<std::string, PriorityClass> Classes() {
  std::map<std::string, PriorityClass> out;
  for (const auto& pc : DefaultPriorityClasses()) out[pc.name] = pc;
  return out;
}

// A snapshot with its lists sorted by id, for comparing two built differently.
sched::Snapshot Sorted(sched::Snapshot s) {
  std::sort(s.pending.begin(), s.pending.end(), [](auto& a, auto& b) { return a.id < b.id; });
  std::sort(s.running.begin(), s.running.end(), [](auto& a, auto& b) { return a.id < b.id; });
  return s;
}

TEST(AttainedServiceTest, CountsEveryAttemptsGpuTimeAndTheOpenOneUpToNow) {
  Job j = PendingJob(1, 4, 2);
  EXPECT_EQ(AttainedService(j, kT0), Duration(0));
  Start(j, kT0, {"a", "b"}, {{0, 1, 2, 3}, {0, 1, 2, 3}});
  // 8 GPUs for 10 minutes so far.
  EXPECT_EQ(AttainedService(j, kT0 + minutes(10)), minutes(80));
  ASSERT_TRUE(
      j.EndAttempt(JobState::kPending, kT0 + minutes(30), ExitReason::kPreempted, 0, "").ok());
  EXPECT_EQ(AttainedService(j, kT0 + hours(5)), minutes(240));
  // A second attempt on one node only (an elastic gang at its minimum).
  Start(j, kT0 + hours(1), {"a"}, {{0, 1, 2, 3}});
  EXPECT_EQ(AttainedService(j, kT0 + hours(1) + minutes(15)), minutes(240 + 60));
}

TEST(AttainedServiceTest, SharesCountTheirPartAndJobsWithoutGpusCountOne) {
  Job share = PendingJob(1, 1);
  share.spec.resources.gpu_milli = 250;
  Start(share, kT0, {"a"}, {{0}});
  EXPECT_EQ(AttainedService(share, kT0 + hours(4)), hours(1));
  Job cpu = PendingJob(2, 0, 3);
  Start(cpu, kT0, {"a", "b", "c"}, {{}, {}, {}});
  EXPECT_EQ(AttainedService(cpu, kT0 + hours(2)), hours(2));
}

TEST(SnapshotBuilderTest, JobsGoWhereTheirStateSays) {
  auto classes = Classes();
  SnapshotBuilder b(sched::Policy{}, &classes, false);
  b.SetNodes({MakeNode("n2", 8), MakeNode("n1", 8)});
  Job a = PendingJob(1, 4);
  Job c = PendingJob(2, 8, 1, "production");
  b.Reflect(a, false, kT0);
  b.Reflect(c, false, kT0);
  const sched::Snapshot& s = b.Prepare(kT0);
  ASSERT_EQ(s.nodes.size(), 2u);
  EXPECT_EQ(s.nodes[0].name, "n1");  // name order
  ASSERT_EQ(s.pending.size(), 2u);
  EXPECT_EQ(b.FindPending(2)->priority, 500);
  Start(a, kT0, {"n1"}, {{0, 1, 2, 3}});
  b.Reflect(a, false, kT0);
  EXPECT_EQ(b.pending_count(), 1u);
  ASSERT_NE(b.FindRunning(1), nullptr);
  EXPECT_EQ(b.FindRunning(1)->replicas[0].gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(b.FindRunning(1)->preempting);
  b.Reflect(a, true, kT0);
  EXPECT_TRUE(b.FindRunning(1)->preempting);
  ASSERT_TRUE(
      a.EndAttempt(JobState::kSucceeded, kT0 + hours(1), ExitReason::kSucceeded, 0, "").ok());
  b.Reflect(a, false, kT0 + hours(1));
  EXPECT_EQ(b.FindRunning(1), nullptr);
  EXPECT_EQ(b.FindPending(1), nullptr);
  b.Forget(2);
  EXPECT_EQ(b.pending_count(), 0u);
}

TEST(SnapshotBuilderTest, ViewsCarryEligibilityExclusionsAndCheckpoints) {
  auto classes = Classes();
  Job j = PendingJob(7, 8);
  j.spec.retry.max = 3;
  j.spec.retry.exclude_failed_nodes = true;
  Start(j, kT0, {"n1"}, {{0, 1, 2, 3, 4, 5, 6, 7}});
  j.checkpoint = CheckpointInfo{"/ckpt/7", 100, kT0 + minutes(20), Duration(5'000)};
  sched::RunningJob r = RunningView(j, &classes.at("normal"), sched::Policy{}, false, kT0);
  ASSERT_TRUE(r.last_checkpoint.has_value());
  EXPECT_EQ(*r.last_checkpoint, kT0 + minutes(20));
  ASSERT_TRUE(
      j.EndAttempt(JobState::kPending, kT0 + minutes(30), ExitReason::kFailed, 1, "boom").ok());
  j.retries = 1;
  sched::PendingJob p = PendingView(j, &classes.at("normal"), sched::Policy{});
  EXPECT_EQ(p.excluded_nodes, std::vector<std::string>{"n1"});
  EXPECT_GT(p.eligible_time, kT0 + minutes(30));  // after the retry backoff
  EXPECT_EQ(p.attained_service, minutes(30) * 8);
  // A checkpoint of an earlier attempt is not this attempt's.
  Start(j, kT0 + hours(1), {"n2"}, {{0, 1, 2, 3, 4, 5, 6, 7}});
  r = RunningView(j, nullptr, sched::Policy{}, false, kT0 + hours(1));
  EXPECT_FALSE(r.last_checkpoint.has_value());
  EXPECT_EQ(r.priority, 0);  // unknown class
}

TEST(SnapshotBuilderTest, LasPrioritiesRiseAsServiceCrossesEachLevel) {
  auto classes = Classes();
  sched::Policy las;
  las.ordering = "las";
  SnapshotBuilder b(las, &classes, false);
  b.SetNodes({MakeNode("n1", 8)});
  Job j = PendingJob(1, 4);  // 4 GPUs: 1 GPU-hour after 15 minutes, 16 after 4 hours
  b.Reflect(j, false, kT0);
  EXPECT_EQ(b.FindPending(1)->priority, sched::LasPriority(100, Duration(0)));
  EXPECT_EQ(b.FindPending(1)->priority, 302);
  Start(j, kT0, {"n1"}, {{0, 1, 2, 3}});
  b.Reflect(j, false, kT0);
  EXPECT_EQ(b.Prepare(kT0 + minutes(14)).running[0].priority, 302);
  EXPECT_EQ(b.Prepare(kT0 + minutes(15)).running[0].priority, 301);
  EXPECT_EQ(b.Prepare(kT0 + hours(3)).running[0].priority, 301);
  EXPECT_EQ(b.Prepare(kT0 + hours(4)).running[0].priority, 300);
  // Requeued: the service it had counts while it waits.
  ASSERT_TRUE(j.EndAttempt(JobState::kPending, kT0 + hours(4), ExitReason::kPreempted, 0, "").ok());
  b.Reflect(j, false, kT0 + hours(4));
  EXPECT_EQ(b.FindPending(1)->priority, 300);
  // A class above still comes first, whatever its service.
  Job p0 = PendingJob(2, 8, 1, "production");
  Attempt old;
  old.start_time = kT0;
  old.end_time = kT0 + hours(100);
  old.nodes = {"n1"};
  old.exit_reason = ExitReason::kPreempted;
  p0.attempts.push_back(old);
  b.Reflect(p0, false, kT0 + hours(4));
  EXPECT_GT(b.FindPending(2)->priority, b.FindPending(1)->priority);
}

// Random changes applied to a builder and, in the same order, mirrored by a from-scratch
// build: the incrementally kept snapshot, its copies and its index give what building
// anew gives.
TEST(SnapshotBuilderTest, IncrementalSnapshotCopyAndIndexMatchAFreshBuild) {
  auto classes = Classes();
  for (bool las : {false, true}) {
    sched::Policy policy;
    if (las) policy.ordering = "las";
    SnapshotBuilder b(policy, &classes, /*keep_index=*/true);
    std::vector<Node> nodes;
    for (int n = 0; n < 6; ++n) nodes.push_back(MakeNode("n" + std::to_string(n), 8));
    b.SetNodes(nodes);
    SnapshotCopy copy;
    std::mt19937_64 rng(20261205 + las);
    std::map<JobId, Job> jobs;
    std::map<JobId, bool> preempting;
    std::map<std::string, std::set<int>> used;
    Timestamp now = kT0;
    JobId next = 1;
    for (int step = 0; step < 600; ++step) {
      now += minutes(static_cast<int>(rng() % 20));
      const int what = static_cast<int>(rng() % 6);
      if (what == 0 || jobs.empty()) {
        Job j = PendingJob(next++, 1 + static_cast<int>(rng() % 4));
        j.submit_time = now;
        jobs[j.id] = j;
        b.Reflect(j, false, now);
      } else {
        auto it = jobs.begin();
        std::advance(it, static_cast<long>(rng() % jobs.size()));
        Job& j = it->second;
        if (what == 1 && j.state == JobState::kPending) {
          // Free GPUs of one node (a GPU is never held twice).
          const std::string node = "n" + std::to_string(rng() % 6);
          std::vector<int> gpus;
          for (int g = 0; g < 8 && static_cast<int64_t>(gpus.size()) < j.spec.resources.gpus; ++g) {
            if (!used[node].contains(g)) gpus.push_back(g);
          }
          if (static_cast<int64_t>(gpus.size()) < j.spec.resources.gpus) continue;
          used[node].insert(gpus.begin(), gpus.end());
          Start(j, now, {node}, {gpus});
          preempting[j.id] = false;
        } else if (what == 2 && j.CurrentAttempt()) {
          const Attempt& a = *j.CurrentAttempt();
          for (int g : a.gpus[0]) used[a.nodes[0]].erase(g);
          ASSERT_TRUE(j.EndAttempt(JobState::kPending, now, ExitReason::kPreempted, 0, "").ok());
        } else if (what == 3 && j.CurrentAttempt()) {
          preempting[j.id] = !preempting[j.id];
        } else if (what == 4 && j.CurrentAttempt()) {
          j.checkpoint = CheckpointInfo{"c", 1, now, Duration(0)};
        } else if (what == 5) {
          if (const Attempt* a = j.CurrentAttempt()) {
            for (int g : a->gpus[0]) used[a->nodes[0]].erase(g);
          }
          b.Forget(j.id);
          jobs.erase(it);
          continue;
        }
        b.Reflect(j, preempting[j.id], now);
      }
      if (rng() % 7 == 0) {
        const size_t n = rng() % nodes.size();
        nodes[n].state =
            nodes[n].state == NodeState::kReady ? NodeState::kCordoned : NodeState::kReady;
        b.SetNodeState(nodes[n].name, nodes[n].state);
      }
      if (step % 5 != 0) continue;
      SnapshotBuilder fresh(policy, &classes, false);
      fresh.SetNodes(nodes);
      for (const auto& [id, j] : jobs) fresh.Reflect(j, preempting[id], now);
      const sched::Snapshot want = Sorted(fresh.Prepare(now));
      const sched::Snapshot& kept = b.Prepare(now);
      EXPECT_EQ(Sorted(kept).pending, want.pending) << "step " << step;
      EXPECT_EQ(Sorted(kept).running, want.running) << "step " << step;
      EXPECT_EQ(kept.nodes, want.nodes);
      EXPECT_EQ(sched::Schedule(kept, policy, *b.index()), sched::Schedule(want, policy))
          << "step " << step;
      if (step % 10 == 0) {
        b.SyncCopy(copy, now);
        EXPECT_EQ(Sorted(copy.snapshot()).pending, want.pending) << "step " << step;
        EXPECT_EQ(Sorted(copy.snapshot()).running, want.running) << "step " << step;
        EXPECT_EQ(copy.snapshot().nodes, want.nodes);
        for (const auto& p : want.pending) EXPECT_EQ(copy.Version(p.id), b.PendingVersion(p.id));
        EXPECT_EQ(sched::Schedule(copy.snapshot(), policy, *copy.index()),
                  sched::Schedule(want, policy))
            << "step " << step;
      }
    }
  }
}

TEST(SnapshotBuilderTest, AVersionChangesOnlyWhenWhatTheSchedulerSeesDoes) {
  auto classes = Classes();
  SnapshotBuilder b(sched::Policy{}, &classes, false);
  Job j = PendingJob(1, 4);
  b.Reflect(j, false, kT0);
  const uint64_t v = b.PendingVersion(1);
  EXPECT_NE(v, 0u);
  j.reason = "waiting for 4 GPUs";
  b.Reflect(j, false, kT0 + minutes(1));
  EXPECT_EQ(b.PendingVersion(1), v);
  j.held = true;
  b.Reflect(j, false, kT0 + minutes(2));
  EXPECT_NE(b.PendingVersion(1), v);
  b.Forget(1);
  EXPECT_EQ(b.PendingVersion(1), 0u);
}

}  // namespace
}  // namespace trainyard::lifecycle
