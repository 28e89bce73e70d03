#include "sched/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST(ScheduleTest, IsDeterministic) {
  Snapshot s;
  s.now = T(1000);
  for (int i = 0; i < 16; ++i)
    s.nodes.push_back(MakeNode("n" + std::to_string(i), 8, "leaf-" + std::to_string(i % 4)));
  for (int j = 1; j <= 40; ++j) s.pending.push_back(Pending(j, 1 + j % 3, 1 << (j % 4), j));
  EXPECT_EQ(Schedule(s, Policy{}), Schedule(s, Policy{}));
}

}  // namespace
}  // namespace trainyard::sched
