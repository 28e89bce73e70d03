#include "track/runs.h"

#include <gtest/gtest.h>

#include <cmath>

namespace trainyard::track {
namespace {

Job TwoAttemptJob() {
  Job j;
  j.id = 17;
  j.spec.name = "llm-7b";
  j.spec.tenant = "nlp";
  j.spec.queue = "research";
  j.spec.command = {"python3", "train.py"};
  j.spec.args = {"--steps", "100"};
  j.spec.replicas = 2;
  j.spec.resources.gpus = 8;
  j.spec.resources.gpu_type = "H100";
  j.spec.env = {{"NCCL_DEBUG", "WARN"}, {"WANDB_KEY", "s3cret"}};
  j.spec.secret_env = {"WANDB_KEY"};
  j.spec.experiment.name = "scaling";
  j.spec.experiment.params = {{"lr", "3e-4"}, {"batch", "32"}};
  j.spec.experiment.code = "0123abcd-dirty";
  j.spec.experiment.data_version = "pile@v2";
  j.state = JobState::kRunning;
  j.submitted_by = "user:alice";
  j.submit_time = Timestamp(Duration(1000));
  Attempt a0;
  a0.start_time = Timestamp(Duration(2000));
  a0.end_time = Timestamp(Duration(3000));
  a0.nodes = {"n1", "n2"};
  Attempt a1;
  a1.index = 1;
  a1.start_time = Timestamp(Duration(4000));
  a1.nodes = {"n3", "n1"};
  j.attempts = {a0, a1};
  return j;
}

SeriesInfo Info(std::string key, int32_t rank, double last, double min, double max) {
  SeriesInfo s;
  s.key = std::move(key);
  s.rank = rank;
  s.count = 10;
  s.last = {100, 5000, last};
  s.min = min;
  s.max = max;
  return s;
}

TEST(RunsTest, BuildsTheRecordFromTheJobParamsAndSeries) {
  RunRecord r = BuildRun(
      TwoAttemptJob(), {{"lr", "1e-4"}, {"env.python", "3.11.2"}},
      {Info("loss", 0, 2.5, 2.4, 9.0), Info("loss", 1, 2.6, 2.5, 9.1),
       Info("tokens_per_s", 0, 1000, 900, 1100), Info("tokens_per_s", 1, 1200, 800, 1300)});
  EXPECT_EQ(r.id, 17);
  EXPECT_EQ(r.experiment, "scaling");
  EXPECT_EQ(r.user, "alice");
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.nodes, (std::vector<std::string>{"n1", "n2", "n3"}));
  EXPECT_EQ(r.command, (std::vector<std::string>{"python3", "train.py", "--steps", "100"}));
  EXPECT_EQ(r.params.at("lr"), "1e-4");  // logged params win over the spec's
  EXPECT_EQ(r.params.at("batch"), "32");
  EXPECT_EQ(r.metrics.at("loss").last, 2.5);  // rank 0's
  EXPECT_EQ(r.metrics.at("loss").ranks, 2);
  EXPECT_EQ(r.metrics.at("tokens_per_s").last, 2200);  // summed over ranks
  EXPECT_TRUE(r.start_time.has_value());
  EXPECT_FALSE(r.end_time.has_value());  // still running
  auto json = RenderRun(r);
  EXPECT_EQ(json["code_dirty"], true);
  EXPECT_EQ(json["environment"].get<std::string>().substr(0, 7), "sha256:");
}

TEST(RunsTest, EnvironmentHashIgnoresSecretValuesButNotDeclaredEnv) {
  Job a = TwoAttemptJob();
  Job b = a;
  b.spec.env["WANDB_KEY"] = "other";
  EXPECT_EQ(EnvironmentHash(a.spec, {}), EnvironmentHash(b.spec, {}));
  b.spec.env["NCCL_DEBUG"] = "INFO";
  EXPECT_NE(EnvironmentHash(a.spec, {}), EnvironmentHash(b.spec, {}));
  EXPECT_NE(EnvironmentHash(a.spec, {{"env.python", "3.11"}}),
            EnvironmentHash(a.spec, {{"env.python", "3.12"}}));
  EXPECT_EQ(EnvironmentHash(a.spec, {{"lr", "1"}}), EnvironmentHash(a.spec, {{"lr", "2"}}));
}

TEST(RunsTest, FiltersSeeParamsMetricsAndAttributes) {
  RunRecord r = BuildRun(TwoAttemptJob(), {}, {Info("loss", 0, 1.5, 1.5, 3)});
  FilterableRun f = Filterable(r);
  EXPECT_EQ(f.attributes.at("state"), "Running");
  EXPECT_EQ(f.params.at("lr"), "3e-4");
  EXPECT_EQ(f.metrics.at("loss"), 1.5);
  auto filter = RunFilter::Parse("params.lr > 1e-4 and metrics.loss < 2 and state = 'Running'");
  ASSERT_TRUE(filter.ok()) << filter.status().ToString();
  EXPECT_TRUE(filter->Matches(f));
}

TEST(RunsTest, CompareMarksDifferingParamsAndBestMetrics) {
  RunRecord a = BuildRun(TwoAttemptJob(), {},
                         {Info("loss", 0, 2.0, 1.8, 5), Info("accuracy", 0, 0.7, 0.1, 0.75)});
  Job jb = TwoAttemptJob();
  jb.id = 18;
  jb.spec.experiment.params["lr"] = "1e-3";
  RunRecord b = BuildRun(jb, {}, {Info("loss", 0, std::nan(""), 1.2, 4)});
  auto c = CompareRuns({a, b});
  EXPECT_EQ(c["runs"], (nlohmann::ordered_json{17, 18}));
  bool saw_lr = false;
  for (const auto& p : c["params"]) {
    if (p["key"] == "lr") {
      saw_lr = true;
      EXPECT_TRUE(p["differs"].get<bool>());
      EXPECT_EQ(p["values"][1], "1e-3");
    }
    if (p["key"] == "batch") {
      EXPECT_FALSE(p["differs"].get<bool>());
    }
  }
  EXPECT_TRUE(saw_lr);
  for (const auto& m : c["metrics"]) {
    if (m["key"] == "loss") {
      EXPECT_EQ(m["best_is"], "min");
      EXPECT_EQ(m["best"][0], 1.8);
      EXPECT_EQ(m["last"][1], "NaN");
    }
    if (m["key"] == "accuracy") {
      EXPECT_EQ(m["best_is"], "max");
      EXPECT_EQ(m["best"][0], 0.75);
      EXPECT_TRUE(m["last"][1].is_null());
    }
  }
}

}  // namespace
}  // namespace trainyard::track
