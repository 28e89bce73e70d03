#include "track/series.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace trainyard::track {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<Point> Line(int64_t first, int n, int64_t t0 = 1'764'410'000'000) {
  std::vector<Point> out;
  for (int i = 0; i < n; ++i) out.push_back({first + i, t0 + i * 250, 1.0 / (i + 1)});
  return out;
}

// Aggregates by brute force: the reference Downsample must agree with.
std::vector<Bucket> Reference(const std::vector<Point>& points, const SeriesRange& r) {
  std::vector<Bucket> out;
  if (points.empty()) return out;
  int64_t lo = std::max(r.from_step, points.front().step);
  int64_t hi = std::min(r.to_step, points.back().step);
  if (lo > hi) return out;
  unsigned __int128 span =
      static_cast<unsigned __int128>(static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo)) + 1;
  unsigned __int128 width = (span + r.buckets - 1) / r.buckets;
  std::map<uint64_t, std::vector<Point>> by;
  for (const Point& p : points) {
    if (p.step < lo || p.step > hi) continue;
    by[static_cast<uint64_t>((static_cast<uint64_t>(p.step) - static_cast<uint64_t>(lo)) / width)]
        .push_back(p);
  }
  for (auto& [_, ps] : by) {
    Bucket b;
    b.first_step = ps.front().step;
    b.last_step = ps.back().step;
    b.last_time_ms = ps.back().time_ms;
    b.last = ps.back().value;
    b.count = static_cast<int64_t>(ps.size());
    b.min = b.max = kNaN;
    bool any = false;
    for (const Point& p : ps) {
      if (std::isnan(p.value)) {
        ++b.nan_count;
        continue;
      }
      b.min = any ? std::min(b.min, p.value) : p.value;
      b.max = any ? std::max(b.max, p.value) : p.value;
      any = true;
    }
    out.push_back(b);
  }
  return out;
}

bool SameDouble(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

void ExpectSame(const std::vector<Bucket>& got, const std::vector<Bucket>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("bucket " + std::to_string(i));
    EXPECT_EQ(got[i].first_step, want[i].first_step);
    EXPECT_EQ(got[i].last_step, want[i].last_step);
    EXPECT_EQ(got[i].last_time_ms, want[i].last_time_ms);
    EXPECT_EQ(got[i].count, want[i].count);
    EXPECT_EQ(got[i].nan_count, want[i].nan_count);
    EXPECT_TRUE(SameDouble(got[i].min, want[i].min)) << got[i].min << " vs " << want[i].min;
    EXPECT_TRUE(SameDouble(got[i].max, want[i].max)) << got[i].max << " vs " << want[i].max;
    EXPECT_TRUE(SameDouble(got[i].last, want[i].last));
  }
}

TEST(SeriesTest, BlockRoundTripsExactly) {
  std::vector<Point> points = Line(100, 1024);
  points[3].value = kNaN;
  points[4].value = kInf;
  points[5].value = -kInf;
  points[6].value = -0.0;
  points[7].step = points[6].step;            // repeated step
  points[7].time_ms = points[6].time_ms - 5;  // clocks go backwards
  for (size_t i = 8; i < points.size(); ++i) points[i].step += 1'000'000'000'000;
  BlockSummary s = BlockSummary::Of(points);
  std::string data = EncodeBlock(points, s);
  std::vector<Point> back;
  ASSERT_TRUE(DecodeBlock(data, s, back).ok());
  ASSERT_EQ(back.size(), points.size());
  for (size_t i = 0; i < points.size(); ++i) EXPECT_EQ(back[i], points[i]) << i;
  EXPECT_TRUE(std::signbit(back[6].value));
}

TEST(SeriesTest, TypicalPointsTakeAboutElevenBytes) {
  std::vector<Point> points = Line(0, kMaxBlockPoints);
  std::string data = EncodeBlock(points, BlockSummary::Of(points));
  EXPECT_LE(data.size(), points.size() * 11);
}

TEST(SeriesTest, ExtremeStepsAndTimesRoundTrip) {
  std::vector<Point> points = {
      {INT64_MIN, INT64_MAX, 1}, {INT64_MAX, INT64_MIN, 2}, {INT64_MAX, 0, 3}};
  // Not non-decreasing in time; steps jump the whole range.
  BlockSummary s = BlockSummary::Of(points);
  std::vector<Point> back;
  ASSERT_TRUE(DecodeBlock(EncodeBlock(points, s), s, back).ok());
  ASSERT_EQ(back.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(back[i], points[i]);
}

TEST(SeriesTest, SummaryIgnoresNaNForMinAndMax) {
  std::vector<Point> points = {{1, 0, kNaN}, {2, 0, 5}, {3, 0, -1}, {4, 0, kNaN}};
  BlockSummary s = BlockSummary::Of(points);
  EXPECT_EQ(s.min, -1);
  EXPECT_EQ(s.max, 5);
  EXPECT_EQ(s.nan_count, 2);
  EXPECT_TRUE(std::isnan(s.last));
  std::vector<Point> all_nan = {{1, 0, kNaN}};
  EXPECT_TRUE(std::isnan(BlockSummary::Of(all_nan).min));
}

TEST(SeriesTest, CorruptBlocksAreReportedNotRead) {
  std::vector<Point> points = Line(0, 50);
  BlockSummary s = BlockSummary::Of(points);
  std::string data = EncodeBlock(points, s);
  std::vector<Point> out;
  Status st = DecodeBlock(data.substr(0, data.size() - 1), s, out);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(out.empty());
  BlockSummary wrong = s;
  wrong.count = 0;
  EXPECT_NE(DecodeBlock(data, wrong, out).message().find("count 0"), std::string::npos);
  wrong = s;
  wrong.last_step += 1;
  EXPECT_NE(DecodeBlock(data, wrong, out).message().find("last step"), std::string::npos);
  std::string unterminated(50 * 18, '\xff');  // varints that never end
  EXPECT_NE(DecodeBlock(unterminated, s, out).message().find("truncated"), std::string::npos);
  EXPECT_TRUE(out.empty());
}

TEST(SeriesTest, DownsampleKeepsSpikesVisible) {
  std::vector<Point> points = Line(0, 10'000);
  for (Point& p : points) p.value = 1.0;
  points[4321].value = 1e6;
  points[7000].value = kNaN;
  std::vector<Bucket> b = DownsamplePoints(points, {.buckets = 100});
  ASSERT_EQ(b.size(), 100u);
  EXPECT_EQ(b[43].max, 1e6);
  EXPECT_EQ(b[43].min, 1.0);
  EXPECT_EQ(b[70].nan_count, 1);
  EXPECT_EQ(b[0].first_step, 0);
  EXPECT_EQ(b[0].last_step, 99);
  EXPECT_EQ(b[0].count, 100);
}

TEST(SeriesTest, DownsampleHonoursTheRange) {
  std::vector<Point> points = Line(0, 5000);
  std::vector<Bucket> b =
      DownsamplePoints(points, {.from_step = 1000, .to_step = 1999, .buckets = 10});
  ASSERT_EQ(b.size(), 10u);
  EXPECT_EQ(b.front().first_step, 1000);
  EXPECT_EQ(b.back().last_step, 1999);
  EXPECT_TRUE(DownsamplePoints(points, {.from_step = 6000, .to_step = 7000}).empty());
  EXPECT_TRUE(DownsamplePoints(points, {.from_step = 10, .to_step = 5}).empty());
}

TEST(SeriesTest, RawReadReturnsEveryPointInRange) {
  std::vector<Point> points = Line(0, 3000);
  std::vector<Bucket> b =
      DownsamplePoints(points, {.from_step = 1020, .to_step = 1030, .buckets = 0});
  ASSERT_EQ(b.size(), 11u);
  EXPECT_EQ(b[0].first_step, 1020);
  EXPECT_EQ(b[0].count, 1);
  EXPECT_EQ(b[0].last, points[1020].value);
}

TEST(SeriesTest, DownsampleLoadsOnlyBlocksThatStraddleBuckets) {
  std::vector<Point> points = Line(0, kMaxBlockPoints * 100);
  std::vector<BlockSummary> summaries;
  for (size_t at = 0; at < points.size(); at += kMaxBlockPoints) {
    summaries.push_back(BlockSummary::Of(std::span(points).subspan(at, kMaxBlockPoints)));
  }
  int loads = 0;
  auto r = Downsample(summaries, {.buckets = 10}, [&](size_t i, std::vector<Point>& out) {
    ++loads;
    auto first = points.begin() + static_cast<std::ptrdiff_t>(i * kMaxBlockPoints);
    out.insert(out.end(), first, first + kMaxBlockPoints);
    return Status::Ok();
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 10u);
  EXPECT_LE(loads, 10);  // at most one block per bucket boundary
}

TEST(SeriesTest, DownsampleMatchesBruteForceOnRandomSeries) {
  std::mt19937_64 rng(20261129);
  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int n = std::uniform_int_distribution<int>(1, 5000)(rng);
    std::vector<Point> points;
    int64_t step = std::uniform_int_distribution<int64_t>(-1000, 1000)(rng);
    for (int i = 0; i < n; ++i) {
      step += std::uniform_int_distribution<int64_t>(0, 3)(rng);
      double v = std::normal_distribution<double>(0, 10)(rng);
      if (rng() % 50 == 0) v = kNaN;
      points.push_back({step, static_cast<int64_t>(rng() % 1'000'000), v});
    }
    SeriesRange r;
    r.buckets = std::uniform_int_distribution<int32_t>(1, 400)(rng);
    if (rng() % 2) {
      r.from_step = points[rng() % points.size()].step;
      r.to_step = r.from_step + std::uniform_int_distribution<int64_t>(0, 6000)(rng);
    }
    ExpectSame(DownsamplePoints(points, r), Reference(points, r));
  }
}

}  // namespace
}  // namespace trainyard::track
