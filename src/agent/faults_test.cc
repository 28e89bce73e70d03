#include "agent/faults.h"

#include <gtest/gtest.h>

namespace trainyard::agent {
namespace {

FaultSpec F(std::string id, FaultKind kind, int gpu = -1, int64_t job_id = 0) {
  return FaultSpec{std::move(id), kind, gpu, 0, job_id};
}

FaultEffects Slow(double factor) {
  FaultEffects e;
  e.slow_factor = factor;
  return e;
}

TEST(FaultEffectsTest, TheFaultFileHoldsEveryEffect) {
  EXPECT_EQ(ToJson(FaultEffects{}), nlohmann::json::parse(R"({"slow_factor": 1.0, "hang": false,
            "data_stall_s": 0.0, "loss_nan": false, "grad_spike": false})"));
}

// Two tasks of job 5 on GPUs 0-1 and 2-3, one of job 6 on GPU 4.
const std::vector<TaskPlacement> kTasks = {
    {"5.0.0", 5, 0, {0, 1}}, {"5.0.1", 5, 1, {2, 3}}, {"6.0.0", 6, 0, {4}}};

TEST(EffectsOnTasksTest, NoFaultsNoEffects) {
  auto e = EffectsOnTasks({}, kTasks);
  ASSERT_EQ(e.size(), 3u);
  for (const auto& x : e) EXPECT_EQ(x, FaultEffects{});
}

TEST(EffectsOnTasksTest, AGpuFaultTouchesTheTaskOnThatGpu) {
  auto e = EffectsOnTasks({F("f-1", FaultKind::kSlow, 3)}, kTasks);
  EXPECT_EQ(e[0], FaultEffects{});
  EXPECT_EQ(e[1], Slow(3.0));
  EXPECT_EQ(e[2], FaultEffects{});
  // A GPU no task holds touches nobody.
  e = EffectsOnTasks({F("f-1", FaultKind::kHang, 7)}, kTasks);
  for (const auto& x : e) EXPECT_EQ(x, FaultEffects{});
}

TEST(EffectsOnTasksTest, NodeWideFaultsTouchEveryTask) {
  auto e = EffectsOnTasks({F("f-1", FaultKind::kThermal)}, kTasks);
  for (const auto& x : e) EXPECT_EQ(x, Slow(1.8));
  // link-down touches every task even when it names a GPU.
  e = EffectsOnTasks({F("f-2", FaultKind::kLinkDown, 4)}, kTasks);
  for (const auto& x : e) EXPECT_EQ(x, Slow(2.5));
}

TEST(EffectsOnTasksTest, CommSlowTouchesEveryTaskOfItsJobOnly) {
  auto e = EffectsOnTasks({F("f-1", FaultKind::kCommSlow, -1, 5)}, kTasks);
  EXPECT_EQ(e[0], Slow(2.5));
  EXPECT_EQ(e[1], Slow(2.5));
  EXPECT_EQ(e[2], FaultEffects{});
}

TEST(EffectsOnTasksTest, SeveralFaultsCombine) {
  auto e = EffectsOnTasks(
      {F("a", FaultKind::kThermal), F("b", FaultKind::kSlow, 0), F("c", FaultKind::kHang, 1),
       F("d", FaultKind::kDataStall, 4), F("e", FaultKind::kLossNan, 2),
       F("f", FaultKind::kGradSpike, 2), F("g", FaultKind::kXid), F("h", FaultKind::kEcc, 0)},
      kTasks);
  FaultEffects first = Slow(3.0);  // the largest factor: slow over thermal
  first.hang = true;
  EXPECT_EQ(e[0], first);
  FaultEffects second = Slow(1.8);
  second.loss_nan = true;
  second.grad_spike = true;
  EXPECT_EQ(e[1], second);
  FaultEffects third = Slow(1.8);
  third.data_stall_s = 1.0;
  EXPECT_EQ(e[2], third);
}

TEST(EffectsOnTasksTest, OnANodeWithoutGpusGpuIMeansTheIthTaskInRankOrder) {
  const std::vector<TaskPlacement> cpu = {
      {"9.0.2", 9, 2, {}}, {"9.0.0", 9, 0, {}}, {"9.0.1", 9, 1, {}}};
  auto e = EffectsOnTasks({F("f-1", FaultKind::kLossNan, 1)}, cpu);
  EXPECT_FALSE(e[0].loss_nan);
  EXPECT_FALSE(e[1].loss_nan);
  EXPECT_TRUE(e[2].loss_nan) << "rank 1 is the second task in rank order";
  e = EffectsOnTasks({F("f-1", FaultKind::kSlow, 3)}, cpu);
  for (const auto& x : e) EXPECT_EQ(x, FaultEffects{}) << "there is no fourth task";
  e = EffectsOnTasks({F("f-1", FaultKind::kHang)}, cpu);
  for (const auto& x : e) EXPECT_TRUE(x.hang) << "node-wide faults still apply";
}

}  // namespace
}  // namespace trainyard::agent
