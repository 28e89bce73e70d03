#include "server/signal_buffer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard::server {
namespace {

using ::testing::SizeIs;

const Timestamp kT0{std::chrono::seconds(1'795'942'800)};
Timestamp At(double seconds) {
  return kT0 + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}
const monitor::Labels kGpu = {{"node", "n0"}, {"gpu", "0"}};

std::vector<double> Values(const SignalBuffer& b, const std::string& signal) {
  std::vector<double> out;
  for (const auto& s : b.Query(signal, At(-1e6), At(1e6))) {
    for (const auto& x : s.samples) out.push_back(x.value);
  }
  return out;
}

TEST(SignalBufferTest, ThinsRegularSamplesButKeepsTheNewestValue) {
  SignalBuffer b({std::chrono::minutes(40), std::chrono::seconds(5), 4096});
  for (int i = 0; i <= 20; ++i) b.Add("gpu.temp_c", kGpu, At(i), 40 + i);
  // Samples about 5 s apart (each kept sample stands for the ones after it that came
  // sooner), and the newest (60) as it came.
  EXPECT_THAT(Values(b, "gpu.temp_c"), ::testing::ElementsAre(40, 44, 48, 52, 56, 60));
  auto latest = b.Latest("gpu.temp_c", kGpu, At(19));
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->value, 60);
  EXPECT_FALSE(b.Latest("gpu.temp_c", kGpu, At(21)).has_value());
  EXPECT_FALSE(b.Latest("gpu.util", kGpu, At(0)).has_value());
}

TEST(SignalBufferTest, DenseSamplesAreAllKeptInTimeOrder) {
  SignalBuffer b;
  const monitor::Labels job = {{"job_id", "1"}};
  b.Add("job.loss", job, At(2), 2, true);
  b.Add("job.loss", job, At(3), 3, true);
  b.Add("job.loss", job, At(1), 1, true);  // late: inserted in order
  b.Add("job.loss", job, At(3.1), std::nan(""), true);
  auto v = Values(b, "job.loss");
  ASSERT_THAT(v, SizeIs(4));
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[2], 3);
  EXPECT_TRUE(std::isnan(v[3]));
}

TEST(SignalBufferTest, QueryReturnsOnlyTheWindowAndPruneDropsOldSeries) {
  SignalBuffer b({std::chrono::seconds(60), std::chrono::seconds(0), 100});
  b.Add("gpu.util", kGpu, At(0), 1);
  b.Add("gpu.util", kGpu, At(30), 2);
  b.Add("gpu.util", {{"node", "n1"}, {"gpu", "0"}}, At(0), 3);
  auto q = b.Query("gpu.util", At(10), At(40));
  ASSERT_THAT(q, SizeIs(1));
  EXPECT_EQ(q[0].labels, kGpu);
  ASSERT_THAT(q[0].samples, SizeIs(1));
  EXPECT_EQ(q[0].samples[0].value, 2);
  b.Prune(At(80));
  EXPECT_EQ(b.series_count(), 1u);
  EXPECT_EQ(b.sample_count(), 1u);
  b.Forget([](const std::string& signal, const monitor::Labels& l) {
    return signal == "gpu.util" && l.at("node") == "n0";
  });
  EXPECT_EQ(b.series_count(), 0u);
}

TEST(SignalBufferTest, CapsSamplesPerSeries) {
  SignalBuffer b({std::chrono::hours(1), std::chrono::seconds(0), 10});
  for (int i = 0; i < 25; ++i) b.Add("job.loss", {{"job_id", "1"}}, At(i), i, true);
  auto v = Values(b, "job.loss");
  ASSERT_THAT(v, SizeIs(10));
  EXPECT_EQ(v.front(), 15);
  EXPECT_EQ(v.back(), 24);
}

}  // namespace
}  // namespace trainyard::server
