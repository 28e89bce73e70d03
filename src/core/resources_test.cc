#include "core/resources.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/node.h"
#include "core/tenancy.h"
#include "core/units.h"

namespace trainyard {
namespace {

Resources Gpus(int64_t n, std::string type, int64_t cpus = 0, int64_t mem = 0) {
  Resources r;
  r.gpus = n;
  r.gpu_type = std::move(type);
  r.milli_cpus = cpus * 1000;
  r.memory_bytes = mem;
  return r;
}

TEST(ResourcesTest, FitsChecksAllDimensions) {
  Resources node = Gpus(8, "H100", 96, 1024 * kGiB);
  node.gpu_memory_bytes = 80 * kGiB;
  EXPECT_TRUE(Fits(Gpus(8, "H100", 96, 1024 * kGiB), node));
  EXPECT_TRUE(Fits(Gpus(4, "", 8, kGiB), node));
  EXPECT_TRUE(Fits(Gpus(4, "h100"), node));
  EXPECT_FALSE(Fits(Gpus(9, "H100"), node));
  EXPECT_FALSE(Fits(Gpus(1, "A100"), node));
  EXPECT_FALSE(Fits(Gpus(1, "H100", 97), node));
  EXPECT_FALSE(Fits(Gpus(1, "H100", 1, 1025 * kGiB), node));
  Resources big_gpu = Gpus(1, "H100");
  big_gpu.gpu_memory_bytes = 141 * kGiB;
  EXPECT_FALSE(Fits(big_gpu, node));
  // A CPU-only request ignores the GPU type.
  EXPECT_TRUE(Fits(Gpus(0, "A100", 4), node));
}

TEST(ResourcesTest, AbsurdValuesDoNotOverflow) {
  Resources huge = Gpus(int64_t{1'000'000'000'000}, "H100");
  Resources scaled = Scale(huge, int64_t{1'000'000'000'000});
  EXPECT_EQ(scaled.gpus, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Add(scaled, scaled).gpus, std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(Fits(huge, Gpus(8, "H100")));
}

TEST(ResourcesTest, SubtractClampsAtZero) {
  Resources r = SubtractClamped(Gpus(2, "A100", 4, kGiB), Gpus(5, "A100", 8, 2 * kGiB));
  EXPECT_EQ(r.gpus, 0);
  EXPECT_EQ(r.milli_cpus, 0);
  EXPECT_EQ(r.memory_bytes, 0);
}

RC_GTEST_PROP(ResourcesTest, AddThenSubtractIsIdentity, ()) {
  auto gen = rc::gen::inRange<int64_t>(0, int64_t{1} << 40);
  Resources a = Gpus(*gen, "H100", 0, *gen);
  Resources b = Gpus(*gen, "H100", 0, *gen);
  a.milli_cpus = *gen;
  b.milli_cpus = *gen;
  RC_ASSERT(SubtractClamped(Add(a, b), b) == a);
  RC_ASSERT(Fits(b, Add(a, b)));
}

TEST(ResourcesTest, DescribesForPeople) {
  EXPECT_EQ(Describe(Gpus(8, "H100", 32, 256 * kGiB)), "8x H100, 32 CPUs, 256Gi memory");
  EXPECT_EQ(Describe(Gpus(0, "")), "no GPU");
  EXPECT_EQ(NormalizeGpuType("  a100 "), "A100");
}

TEST(NodeTest, ValidatesNodes) {
  Node n;
  n.name = "gpu-001";
  for (int i = 0; i < 8; ++i)
    n.gpus.push_back(Gpu{i, "GPU-" + std::to_string(i), "H100", 80 * kGiB, "nvl0"});
  EXPECT_TRUE(ValidateNode(n).ok());
  EXPECT_EQ(n.Capacity().gpus, 8);
  EXPECT_EQ(n.Capacity().gpu_type, "H100");
  n.gpus[3].model = "A100";
  EXPECT_NE(ValidateNode(n).message().find("all GPUs must be one model"), std::string::npos);
  n.gpus[3].model = "H100";
  n.gpus[3].index = 0;
  EXPECT_NE(ValidateNode(n).message().find("index 0 appears twice"), std::string::npos);
  n.name = "bad name";
  EXPECT_FALSE(ValidateNode(n).ok());
  EXPECT_EQ(ParseNodeState("Cordoned"), NodeState::kCordoned);
  EXPECT_FALSE(ParseNodeState("cordoned").has_value());
  EXPECT_TRUE(IsSchedulable(NodeState::kReady));
  EXPECT_FALSE(IsSchedulable(NodeState::kDraining));
}

TEST(TenancyTest, ValidatesQueues) {
  Queue q{"research", "nlp", "", 64, 128, 1.0};
  EXPECT_TRUE(ValidateQueue(q).ok());
  q.limit_gpus = 32;
  EXPECT_EQ(ValidateQueue(q).message(),
            "queue.limit_gpus: must be >= guaranteed_gpus (64), got 32");
  q.limit_gpus = 128;
  q.weight = 0;
  EXPECT_FALSE(ValidateQueue(q).ok());
  q.weight = 1;
  q.guaranteed_gpus = -1;
  EXPECT_FALSE(ValidateQueue(q).ok());
  q.guaranteed_gpus = 0;
  q.parent = "research";
  EXPECT_FALSE(ValidateQueue(q).ok());
  EXPECT_TRUE(ValidatePriorityClass(DefaultPriorityClasses()[0]).ok());
  EXPECT_FALSE(ValidatePriorityClass(PriorityClass{"x", 2'000'000'000, true}).ok());
  EXPECT_FALSE(ValidateTenant(Tenant{"", ""}).ok());
}

}  // namespace
}  // namespace trainyard
