#include "track/series_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

namespace trainyard::track {
namespace {

class SeriesStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ty-series-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Reopen();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Reopen() {
    store_.reset();
    auto s = SeriesStore::Open((dir_ / "series.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  static std::vector<Point> Steps(int64_t from, int64_t to, double value_base = 0) {
    std::vector<Point> out;
    for (int64_t s = from; s <= to; ++s) out.push_back({s, 1000 + s, value_base + s});
    return out;
  }
  void Append(int64_t run, const std::string& key, std::vector<Point> points, int32_t rank = 0) {
    Status st = store_->Append({{run, rank, key, std::move(points)}});
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  std::vector<Point> All(int64_t run, const std::string& key, int32_t rank = 0) {
    auto r = store_->ReadAll(run, key, rank);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<Point>{};
  }

  std::filesystem::path dir_;
  std::unique_ptr<SeriesStore> store_;
};

TEST_F(SeriesStoreTest, SmallAppendsReadBackInOrderAndSurviveReopen) {
  for (int64_t s = 0; s < 3000; s += 7) Append(1, "loss", Steps(s, s + 6));
  EXPECT_EQ(All(1, "loss"), Steps(0, 3002));
  Reopen();
  EXPECT_EQ(All(1, "loss"), Steps(0, 3002));
  Append(1, "loss", Steps(3003, 3010));  // the tail is picked up again after reopening
  EXPECT_EQ(All(1, "loss"), Steps(0, 3010));
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->points, 3011);
  EXPECT_LE(stats->blocks, 3 + 1024 / 7 + 1);  // small blocks are merged into full ones
}

TEST_F(SeriesStoreTest, ARewindReplacesTheStepsFromThere) {
  Append(1, "loss", Steps(0, 2500));
  // A new attempt resumes from a checkpoint at step 1999 and logs 2000 on again.
  Append(1, "loss", Steps(2000, 2100, 0.5));
  std::vector<Point> want = Steps(0, 1999);
  for (const Point& p : Steps(2000, 2100, 0.5)) want.push_back(p);
  EXPECT_EQ(All(1, "loss"), want);
  Reopen();
  EXPECT_EQ(All(1, "loss"), want);
  // A rewind in the middle of one append, and a rewind past the start.
  Append(1, "loss", {{2101, 0, 1}, {2102, 0, 2}, {50, 0, 3}, {51, 0, 4}});
  want.resize(50);
  want.push_back({50, 0, 3});
  want.push_back({51, 0, 4});
  EXPECT_EQ(All(1, "loss"), want);
  Append(1, "loss", {{-5, 0, 9}});
  EXPECT_EQ(All(1, "loss"), (std::vector<Point>{{-5, 0, 9}}));
}

TEST_F(SeriesStoreTest, RepeatedStepsAreKept) {
  Append(1, "eval/loss", {{10, 1, 1}, {10, 2, 2}});
  Append(1, "eval/loss", {{10, 3, 3}});
  EXPECT_EQ(All(1, "eval/loss").size(), 3u);
}

TEST_F(SeriesStoreTest, SeriesAreKeptApartByRunKeyAndRank) {
  Append(1, "loss", Steps(0, 10));
  Append(2, "loss", Steps(0, 20));
  Append(1, "tokens_per_s", Steps(0, 30), 0);
  Append(1, "tokens_per_s", Steps(0, 40), 1);
  auto list = store_->ListSeries(1);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].key, "loss");
  EXPECT_EQ((*list)[0].count, 11);
  EXPECT_EQ((*list)[0].last.step, 10);
  EXPECT_EQ((*list)[0].min, 0);
  EXPECT_EQ((*list)[0].max, 10);
  EXPECT_EQ((*list)[1].key, "tokens_per_s");
  EXPECT_EQ((*list)[1].rank, 0);
  EXPECT_EQ((*list)[2].rank, 1);
  EXPECT_EQ((*list)[2].count, 41);
  EXPECT_EQ(store_->Read(1, "nope", 0, {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Read(3, "loss", 0, {}).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->DeleteRun(1).ok());
  EXPECT_TRUE(store_->ListSeries(1)->empty());
  EXPECT_EQ(All(2, "loss").size(), 21u);
}

TEST_F(SeriesStoreTest, NaNSurvivesStorageAndIsCounted) {
  Append(1, "loss", {{1, 0, std::nan("")}, {2, 0, 5}, {3, 0, INFINITY}, {4, 0, std::nan("")}});
  auto list = store_->ListSeries(1);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)[0].nan_count, 2);
  EXPECT_TRUE(std::isnan((*list)[0].last.value));
  EXPECT_EQ((*list)[0].min, 5);
  EXPECT_EQ((*list)[0].max, INFINITY);
  auto b = store_->Read(1, "loss", 0, {.buckets = 1});
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ((*b)[0].nan_count, 2);
  EXPECT_EQ((*b)[0].max, INFINITY);
}

TEST_F(SeriesStoreTest, DownsampledReadAgreesWithPointsInMemory) {
  std::mt19937_64 rng(7);
  std::vector<Point> points;
  int64_t step = 0;
  for (int i = 0; i < 50'000; ++i) {
    step += static_cast<int64_t>(rng() % 3);
    points.push_back({step, i, std::normal_distribution<double>(0, 1)(rng)});
  }
  for (size_t at = 0; at < points.size(); at += 777) {
    Append(4, "grad_norm",
           {points.begin() + static_cast<std::ptrdiff_t>(at),
            points.begin() + static_cast<std::ptrdiff_t>(std::min(points.size(), at + 777))});
  }
  for (SeriesRange r : {SeriesRange{.buckets = 1000}, SeriesRange{.buckets = 7},
                        SeriesRange{.from_step = 1000, .to_step = 20'000, .buckets = 333}}) {
    auto got = store_->Read(4, "grad_norm", 0, r);
    ASSERT_TRUE(got.ok());
    std::vector<Bucket> want = DownsamplePoints(points, r);
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*got)[i].first_step, want[i].first_step);
      EXPECT_EQ((*got)[i].count, want[i].count);
      EXPECT_EQ((*got)[i].min, want[i].min);
      EXPECT_EQ((*got)[i].max, want[i].max);
      EXPECT_EQ((*got)[i].last, want[i].last);
    }
  }
}

TEST_F(SeriesStoreTest, RawReadsAreBounded) {
  Append(1, "loss", Steps(0, 100));
  auto raw = store_->Read(1, "loss", 0, {.from_step = 10, .to_step = 19, .buckets = 0});
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->size(), 10u);
}

TEST_F(SeriesStoreTest, ParamsAreMergedByName) {
  ASSERT_TRUE(store_->PutParams(1, {{"lr", "0.001"}, {"model", "mlp"}}).ok());
  ASSERT_TRUE(store_->PutParams(1, {{"lr", "0.0003"}}).ok());
  ASSERT_TRUE(store_->PutParams(2, {{"lr", "1"}}).ok());
  auto p = store_->Params(1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::map<std::string, std::string>{{"lr", "0.0003"}, {"model", "mlp"}}));
}

TEST_F(SeriesStoreTest, AFullDayOfOneHzPointsTakesUnderSixteenBytesEach) {
  std::vector<Point> points;
  for (int64_t s = 0; s < 86'400; ++s) {
    points.push_back({s, 1'764'410'000'000 + s * 1000 + (s % 13), 2.0 + std::sin(s * 0.001)});
  }
  for (size_t at = 0; at < points.size(); at += 100) {
    Append(9, "loss",
           {points.begin() + static_cast<std::ptrdiff_t>(at),
            points.begin() + static_cast<std::ptrdiff_t>(at + 100)});
  }
  auto stats = store_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->points, 86'400);
  // The WAL holds copies of pages until a checkpoint; count the main file after one.
  Reopen();
  auto size = std::filesystem::file_size(dir_ / "series.db");
  EXPECT_LT(static_cast<double>(size) / 86'400, 16.0) << size;
}

}  // namespace
}  // namespace trainyard::track
