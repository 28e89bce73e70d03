#include "server/ingest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/spec_codec.h"
#include "server/cluster_testing.h"
#include "store/memory_store.h"
#include "track/series_store.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A cluster with one running job of one rank on node n1, the stores uploads go to,
// and alerting.
class IngestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/ingest_test_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    clock_.Set(Timestamp(std::chrono::hours(24 * 365 * 50)));
    auto c = Cluster::Open(&store_, &clock_, {});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c);
    logs_ = std::make_unique<LogStore>(dir_ + "/logs");
    auto series = track::SeriesStore::Open(dir_ + "/series.db");
    ASSERT_TRUE(series.ok()) << series.status().ToString();
    series_ = std::move(*series);
    auto alerting = Alerting::Open(cluster_.get(), &clock_, {});
    ASSERT_TRUE(alerting.ok()) << alerting.status().ToString();
    alerting_ = std::move(*alerting);
    ingest_ = std::make_unique<Ingest>(*cluster_, *logs_, series_.get(), alerting_.get());

    Registration node;
    node.node.name = "n1";
    node.node.milli_cpus = 8000;
    node.node.memory_bytes = 64LL << 30;
    ASSERT_TRUE(cluster_->Register(node).ok());
    SpecParseResult r = ParseSpec("name: j\ncommand: [x]\n", "j.yaml");
    ASSERT_TRUE(r.ok());
    auto ids = cluster_->Submit({*r.spec}, "user:test");
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    job_ = ids->front();
    auto started = StartRanksOn(*cluster_, "n1");
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    ASSERT_EQ(started->size(), 1u);
    task_ = TaskRef{std::to_string(job_) + ".0.0", "n1", job_, 0, 0};
  }
  void TearDown() override {
    cluster_->Shutdown();
    std::filesystem::remove_all(dir_);
  }

  // Every point of the run's series `key` of rank 0.
  std::vector<track::Point> Points(const std::string& key) {
    auto points = series_->ReadAll(job_, key, 0);
    return points.ok() ? *points : std::vector<track::Point>{};
  }
  size_t LossSignals() {
    size_t n = 0;
    for (const monitor::Series& s :
         alerting_->signals().Query("job.loss", Timestamp{}, Timestamp(Duration(INT64_MAX / 2)))) {
      n += s.samples.size();
    }
    return n;
  }

  std::string dir_;
  store::MemoryStore store_;
  FakeClock clock_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<track::SeriesStore> series_;
  std::unique_ptr<Alerting> alerting_;
  std::unique_ptr<Ingest> ingest_;
  JobId job_ = 0;
  TaskRef task_;
};

TEST_F(IngestTest, LogsAreFiledInOrder) {
  EXPECT_EQ(*ingest_->Logs(task_, 0, "hello\n"), 6);
  // A chunk that does not start where the copy ends is not written.
  EXPECT_EQ(*ingest_->Logs(task_, 3, "lo\nagain\n"), 6);
  EXPECT_EQ(*ingest_->Logs(task_, 6, "world\n"), 12);
  auto chunk = logs_->ReadLog(job_, 0, 0, 0, 1000, Duration(0));
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_EQ(chunk->data, "hello\nworld\n");
}

TEST_F(IngestTest, LogsOfAnUnknownTaskOrTooLargeAreRefused) {
  TaskRef other = task_;
  other.attempt = 3;
  other.task_id = std::to_string(job_) + ".3.0";
  auto unknown = ingest_->Logs(other, 0, "x");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "unknown task " + other.task_id);
  TaskRef elsewhere = task_;
  elsewhere.node = "n2";
  EXPECT_EQ(ingest_->Logs(elsewhere, 0, "x").status().code(), StatusCode::kNotFound);
  auto big = ingest_->Logs(task_, 0, std::string(kMaxLogChunkBytes + 1, 'x'));
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(big.status().message(), "logs: at most 1 MiB per request");
  EXPECT_EQ(*ingest_->Logs(task_, 0, std::string(kMaxLogChunkBytes, 'x')), kMaxLogChunkBytes);
}

const json kLines = json::parse(R"([
  {"kind": "metrics", "step": 1, "time_ms": 1000, "metrics": {"loss": 2.5}},
  {"kind": "params", "params": {"lr": 0.001}},
  {"kind": "checkpoint", "step": 1, "time_ms": 1100, "path": "/ck/1", "duration_ms": 250},
  "not an object",
  {"kind": "metrics", "step": 2, "time_ms": 2000, "metrics": {"loss": 2.25}}
])");

TEST_F(IngestTest, MetricsFileLinesReportCheckpointsAndFeedTheSeriesAndAlerting) {
  auto next = ingest_->Metrics(task_, 0, 4096, kLines);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, 4096);
  // The checkpoint line is the job's checkpoint, reported by the agent of its node.
  auto job = cluster_->GetJob(job_);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(job->job.checkpoint.has_value());
  EXPECT_EQ(job->job.checkpoint->path, "/ck/1");
  EXPECT_EQ(job->job.checkpoint->step, 1);
  auto events = cluster_->ListEvents(job_, 0, 1000);
  ASSERT_TRUE(events.ok());
  bool reported = false;
  for (const auto& e : events->events) reported = reported || e.actor == "agent:n1";
  EXPECT_TRUE(reported);
  // Every record in the run: points, params, the checkpoint's write time.
  auto loss = Points("loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_EQ(loss[0].step, 1);
  EXPECT_EQ(loss[0].value, 2.5);
  EXPECT_EQ(loss[1].value, 2.25);
  EXPECT_EQ(series_->Params(job_)->at("lr"), "0.001");
  ASSERT_EQ(Points("checkpoint/write_s").size(), 1u);
  EXPECT_EQ(Points("checkpoint/write_s")[0].value, 0.25);
  EXPECT_EQ(LossSignals(), 2u);
  // Lines other than checkpoints are filed, one object a line.
  std::ifstream filed(dir_ + "/logs/metrics/" + std::to_string(job_) + "/0/rank-0.jsonl");
  std::string first, second, third;
  std::getline(filed, first);
  std::getline(filed, second);
  std::getline(filed, third);
  EXPECT_EQ(json::parse(first), kLines[0]);
  EXPECT_EQ(json::parse(second), kLines[1]);
  EXPECT_EQ(json::parse(third), kLines[4]);
}

TEST_F(IngestTest, LinesSentAgainAreNotRecordedTwice) {
  ASSERT_EQ(*ingest_->Metrics(task_, 0, 500, kLines), 500);
  // The agent did not hear the answer and sends the same lines again, or older ones.
  EXPECT_EQ(*ingest_->Metrics(task_, 0, 500, kLines), 500);
  EXPECT_EQ(*ingest_->Metrics(task_, 100, 500, kLines), 500);
  EXPECT_EQ(Points("loss").size(), 2u);
  EXPECT_EQ(Points("checkpoint/write_s").size(), 1u);
  EXPECT_EQ(LossSignals(), 2u);
  // The next lines, from where the last ended, are taken.
  const json more =
      json::parse(R"([{"kind": "metrics", "step": 3, "time_ms": 3000, "metrics": {"loss": 2.0}}])");
  EXPECT_EQ(*ingest_->Metrics(task_, 500, 600, more), 600);
  EXPECT_EQ(Points("loss").size(), 3u);
  EXPECT_EQ(LossSignals(), 3u);
}

TEST_F(IngestTest, WithoutAnEndOffsetTheLinesAsSerialisedAreCounted) {
  int64_t bytes = 0;
  for (const json& line : kLines) bytes += static_cast<int64_t>(line.dump().size()) + 1;
  EXPECT_EQ(*ingest_->Metrics(task_, 10, std::nullopt, kLines), 10 + bytes);
  // An end before the start is the start.
  EXPECT_EQ(*ingest_->Metrics(task_, 10 + bytes, 5, json::array()), 10 + bytes);
}

TEST_F(IngestTest, BadMetricsAndFilingErrorsAreReturned) {
  auto no_lines = ingest_->Metrics(task_, 0, std::nullopt, json());
  EXPECT_EQ(no_lines.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(no_lines.status().message(), "metrics.lines: required, a list of objects");
  EXPECT_FALSE(ingest_->Metrics(task_, 0, std::nullopt, json::object()).ok());
  // A LogStore that cannot write: the error, and nothing recorded or reported.
  std::ofstream(dir_ + "/file") << "x";
  LogStore broken(dir_ + "/file/logs");
  Ingest ingest(*cluster_, broken, series_.get(), alerting_.get());
  auto failed = ingest.Metrics(task_, 0, 500, kLines);
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(Points("loss").size(), 0u);
  EXPECT_FALSE(cluster_->GetJob(job_)->job.checkpoint.has_value());
  EXPECT_FALSE(ingest.Logs(task_, 0, "x").ok());
}

TEST_F(IngestTest, PointsGoToTheSeriesAndAlerting) {
  auto batch = track::ParseBatchJson(
      job_, R"({"series": [{"key": "loss", "steps": [1, 2], "values": [3.0, 2.0]}],
                "params": {"optimizer": "adam"}})",
      5000);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_TRUE(ingest_->Points(job_, *batch).ok());
  EXPECT_EQ(Points("loss").size(), 2u);
  EXPECT_EQ(series_->Params(job_)->at("optimizer"), "adam");
  EXPECT_EQ(LossSignals(), 2u);
}

TEST_F(IngestTest, WithoutASeriesStoreLinesAreOnlyFiledAndBatchesRefused) {
  Ingest ingest(*cluster_, *logs_, nullptr, nullptr);
  EXPECT_EQ(*ingest.Metrics(task_, 0, 500, kLines), 500);
  EXPECT_EQ(Points("loss").size(), 0u);
  EXPECT_EQ(cluster_->GetJob(job_)->job.checkpoint->path, "/ck/1");  // still reported
  Status refused = ingest.Points(job_, track::IngestBatch{});
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused.message(), "this server keeps no metric series");
}

TEST(CheckpointFromJsonTest, FieldsAndBoundsNamed) {
  auto ok = CheckpointFromJson(json::parse(R"({"path": "/ck/2", "step": 7, "duration_s": 2})"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->path, "/ck/2");
  EXPECT_EQ(ok->step, 7);
  EXPECT_EQ(ok->write_duration, Duration(2000));
  EXPECT_THAT(CheckpointFromJson(json::parse(R"({"step": 1})")).status().message(),
              HasSubstr("checkpoint.path: required"));
  EXPECT_THAT(CheckpointFromJson(json::parse(R"({"path": "/a", "step": -1})")).status().message(),
              HasSubstr("checkpoint.step: expected an integer >= 0, got -1"));
  EXPECT_THAT(CheckpointFromJson(json::array()).status().message(), HasSubstr("checkpoint"));
}

}  // namespace
}  // namespace trainyard::server
