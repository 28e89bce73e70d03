#include "monitor/diagnose.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "monitor/testing.h"

namespace trainyard::monitor {
namespace {

using std::chrono::minutes;
using testing::At;
using testing::FakeSource;
using ::testing::HasSubstr;

// Job 17: 2 nodes on 2 leaf switches, 4 ranks of one GPU each.
//   rank 0: n1 GPU 0   rank 1: n1 GPU 1   rank 2: n2 GPU 0   rank 3: n2 GPU 1
const Labels kJob = {{"job_id", "17"}, {"tenant", "t"}, {"queue", "q"}};
constexpr int64_t kNow = 3600;  // seconds after kT0: the baseline (35m) fits before it

JobContext Job() {
  JobContext job;
  job.job_id = 17;
  job.tenant = "t";
  job.queue = "q";
  job.state = "running";
  job.ranks = {{0, "n1", {0}}, {1, "n1", {1}}, {2, "n2", {0}}, {3, "n2", {1}}};
  job.node_leaf = {{"n1", "leaf-a"}, {"n2", "leaf-b"}};
  job.checkpoint_interval = minutes(30);
  return job;
}

Labels Gpu(const std::string& node, int gpu) {
  return {{"node", node}, {"gpu", std::to_string(gpu)}};
}
Labels Rank(int rank, const std::string& node) {
  Labels l = kJob;
  l["rank"] = std::to_string(rank);
  l["node"] = node;
  return l;
}
Labels Link(const std::string& node, const std::string& link) {
  return {{"node", node}, {"link", link}};
}

// One sample every `every` seconds over [from, to] (seconds after kT0), valued f(i).
void Fill(FakeSource& src, const std::string& signal, const Labels& labels, int64_t from,
          int64_t to, int64_t every, const std::function<double(int)>& f) {
  int i = 0;
  for (int64_t t = from; t <= to; t += every) src.Add(signal, labels, At(t), f(i++));
}
void Set(FakeSource& src, const std::string& signal, const Labels& labels, double v) {
  src.Add(signal, labels, At(kNow), v);
}

const std::vector<std::pair<std::string, int>> kGpus = {{"n1", 0}, {"n1", 1}, {"n2", 0}, {"n2", 1}};

// The signals of a job that trains well: every check has data and finds nothing.
void Healthy(FakeSource& src) {
  for (const std::string node : {"n1", "n2"}) {
    Set(src, "node.heartbeat_age_s", {{"node", node}}, 1);
    Fill(src, "link.down", Link(node, "mlx5_0"), kNow - 60, kNow, 60, [](int) { return 0; });
    Fill(src, "link.errors", Link(node, "mlx5_0"), kNow - 60, kNow, 60, [](int) { return 5; });
  }
  for (const auto& [node, gpu] : kGpus) {
    Set(src, "gpu.util", Gpu(node, gpu), 95);
    Set(src, "gpu.temp_c", Gpu(node, gpu), 60);
    Set(src, "gpu.throttled", Gpu(node, gpu), 0);
    Fill(src, "gpu.xid_count", Gpu(node, gpu), kNow - 60, kNow, 60, [](int) { return 3; });
    Fill(src, "gpu.ecc_uncorrectable", Gpu(node, gpu), kNow - 60, kNow, 60, [](int) { return 0; });
  }
  Set(src, "job.progress_age_s", kJob, 2);
  Set(src, "job.gpu_util", kJob, 95);
  Fill(src, "job.step_time_s", kJob, kNow - 35 * 60, kNow, 10, [](int) { return 1.0; });
  Set(src, "job.data_wait_s", kJob, 0.01);
  const std::vector<double> ratios = {1.0, 1.01, 0.99, 1.0};
  for (int r = 0; r < 4; ++r)
    Set(src, "job.rank_step_time_ratio", Rank(r, r < 2 ? "n1" : "n2"), ratios[r]);
  Fill(src, "job.loss", kJob, kNow - 290, kNow, 10, [](int i) { return 3.0 - 0.01 * i; });
  Fill(src, "job.grad_norm", kJob, kNow - 290, kNow, 10, [](int i) { return i % 2 ? 1.05 : 1.0; });
  Set(src, "job.lr", kJob, 3e-4);
  Set(src, "job.checkpoint_age_ratio", kJob, 0.5);
}

Diagnosis DiagnoseAtNow(const FakeSource& src, const JobContext& job = Job()) {
  return Diagnose(job, src, At(kNow));
}

std::vector<std::string> Causes(const Diagnosis& d) {
  std::vector<std::string> out;
  for (const Finding& f : d.findings) out.push_back(f.cause);
  return out;
}

const Check& CheckNamed(const Diagnosis& d, const std::string& name) {
  for (const Check& c : d.checks) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no check " << name;
  static const Check kNone;
  return kNone;
}

std::string Evidence(const Finding& f) {
  std::string out;
  for (const std::string& e : f.evidence) out += e + "\n";
  return out;
}

using V = std::vector<std::string>;

const V kWalk = {"node_lost",  "out_of_memory", "gpu_errors", "thermal",         "hang",
                 "data_stall", "straggler",     "links",      "comm_bottleneck", "loss_nan",
                 "grad_spike", "loss_flat",     "checkpoint"};

TEST(DiagnoseTest, HealthyJobFindsNothingAndWalksEveryCheck) {
  FakeSource src;
  Healthy(src);
  Diagnosis d = DiagnoseAtNow(src);
  EXPECT_FALSE(d.found());
  EXPECT_EQ(d.job_id, 17);
  EXPECT_EQ(d.at, At(kNow));
  V names;
  for (const Check& c : d.checks) {
    names.push_back(c.name);
    EXPECT_EQ(c.result, "ok") << c.name << ": " << c.detail;
    EXPECT_FALSE(c.detail.empty()) << c.name;
  }
  EXPECT_EQ(names, kWalk);
  EXPECT_EQ(d.checks[0].layer, Layer::kSystem);
  EXPECT_EQ(d.checks[7].layer, Layer::kCommunication);
  EXPECT_EQ(d.checks[12].layer, Layer::kTraining);
}

TEST(DiagnoseTest, JobWithNoSignalsReportsNoDataEverywhere) {
  FakeSource src;
  Diagnosis d = DiagnoseAtNow(src);
  EXPECT_FALSE(d.found());
  ASSERT_EQ(d.checks.size(), kWalk.size());
  for (const Check& c : d.checks) {
    // The one check that reads no signal: the job's attempts, of which none has ended.
    if (c.name == "out_of_memory") {
      EXPECT_EQ(c.result, "ok");
      EXPECT_EQ(c.detail, "no attempt has ended");
      continue;
    }
    EXPECT_EQ(c.result, "no data") << c.name << ": " << c.detail;
  }
  EXPECT_EQ(CheckNamed(d, "node_lost").detail, "no node.heartbeat_age_s for the job's 2 nodes");
}

TEST(DiagnoseTest, PendingJobSaysItRunsNowhere) {
  FakeSource src;
  Healthy(src);
  JobContext job = Job();
  job.state = "pending";
  job.ranks.clear();
  Diagnosis d = DiagnoseAtNow(src, job);
  EXPECT_EQ(CheckNamed(d, "node_lost").result, "no data");
  EXPECT_EQ(CheckNamed(d, "node_lost").detail, "the job runs on no node (state pending)");
  EXPECT_EQ(CheckNamed(d, "thermal").result, "no data");
}

TEST(DiagnoseTest, ReadsOnlyTheJobsSeriesAndItsNodesAndGpus) {
  FakeSource src;
  Healthy(src);
  Labels other = kJob;
  other["job_id"] = "18";
  Set(src, "job.loss", other, std::nan(""));
  Set(src, "job.checkpoint_age_ratio", other, 9);
  Set(src, "node.heartbeat_age_s", {{"node", "n9"}}, 600);
  Fill(src, "gpu.xid_count", Gpu("n9", 0), kNow - 60, kNow, 30, [](int i) { return i; });
  Set(src, "gpu.temp_c", Gpu("n1", 5), 99);  // n1 has a GPU 5, but the job does not use it
  Set(src, "link.down", Link("n9", "mlx5_0"), 1);
  Diagnosis d = DiagnoseAtNow(src);
  EXPECT_FALSE(d.found()) << Causes(d)[0];
}

TEST(DiagnoseTest, NodeLostNamesTheNode) {
  FakeSource src;
  Healthy(src);
  src.Add("node.heartbeat_age_s", {{"node", "n2"}}, At(kNow), 40);  // after the 1 s sample
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"node_lost"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.layer, Layer::kSystem);
  EXPECT_EQ(f.node, "n2");
  EXPECT_EQ(f.gpu, "");
  EXPECT_EQ(f.rank, -1);
  EXPECT_EQ(f.summary,
            "node n2 is lost: its agent has not reported for 40s (ranks 2, 3 ran there)");
  EXPECT_EQ(CheckNamed(d, "node_lost").result, "found");
}

TEST(DiagnoseTest, AnAttemptEndedByTheOomKillerIsFoundWithWhatToDo) {
  FakeSource src;
  Healthy(src);
  JobContext job = Job();
  job.attempt_messages = {"rank 1 on n1 exited with code 1",
                          "rank 3 on n2 OOMKilled: memory limit 48Gi"};
  Diagnosis d = DiagnoseAtNow(src, job);
  ASSERT_EQ(Causes(d), V{"oom_killed"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.layer, Layer::kSystem);
  EXPECT_EQ(f.summary,
            "attempt 2 ended when the kernel killed rank 3 on n2 for using more memory than its "
            "replica may (OOMKilled: memory limit 48Gi)");
  EXPECT_EQ(Evidence(f), "attempt 2: rank 3 on n2 OOMKilled: memory limit 48Gi\n");
  EXPECT_THAT(f.next_step, HasSubstr("Raise resources.memory"));
  EXPECT_EQ(CheckNamed(d, "out_of_memory").result, "found");
  EXPECT_EQ(CheckNamed(d, "out_of_memory").detail, "2 attempts");

  job.attempt_messages = {"rank 1 on n1 exited with code 1"};
  Diagnosis clean = DiagnoseAtNow(src, job);
  EXPECT_FALSE(clean.found());
  EXPECT_EQ(CheckNamed(clean, "out_of_memory").detail, "1 attempt, none ended by the OOM killer");
}

TEST(DiagnoseTest, GpuErrorsNameTheNodeGpuAndRank) {
  FakeSource src;
  Healthy(src);
  Fill(src, "gpu.xid_count", Gpu("n2", 1), kNow - 30, kNow, 30, [](int i) { return 3 + 2 * i; });
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"gpu_error"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.node, "n2");
  EXPECT_EQ(f.gpu, "1");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.summary, "GPU 1 on n2 (rank 3) reports errors: +2 XID errors in the last 5m");
  EXPECT_THAT(Evidence(f), HasSubstr("XID count increase"));
  EXPECT_THAT(f.next_step, HasSubstr("trainyard drain n2"));
  EXPECT_THAT(f.next_step, HasSubstr("latest checkpoint"));
}

TEST(DiagnoseTest, EccIncreaseIsAGpuError) {
  FakeSource src;
  Healthy(src);
  Set(src, "gpu.ecc_uncorrectable", Gpu("n1", 0), 1);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"gpu_error"});
  EXPECT_EQ(d.findings[0].node, "n1");
  EXPECT_EQ(d.findings[0].gpu, "0");
  EXPECT_THAT(Evidence(d.findings[0]), HasSubstr("ECC increase"));
}

TEST(DiagnoseTest, CounterRestartIsNotAnErrorBurst) {
  FakeSource src;
  // The agent on n2 restarted: the XID counters of its GPUs fell from 120 to 0 and
  // stayed there.
  for (const auto& [node, gpu] : kGpus) {
    const bool restarted = node == "n2";
    Fill(src, "gpu.xid_count", Gpu(node, gpu), kNow - 200, kNow, 50,
         [restarted](int i) { return restarted && i >= 2 ? 0.0 : 120.0; });
  }
  Diagnosis d = DiagnoseAtNow(src);
  EXPECT_FALSE(d.found());
  EXPECT_EQ(CheckNamed(d, "gpu_errors").result, "ok");
  EXPECT_EQ(CheckNamed(d, "gpu_errors").detail, "4 GPUs, no XID or ECC increase in the last 5m");
}

TEST(DiagnoseTest, ThermalNamesTheHotGpu) {
  FakeSource src;
  Healthy(src);
  Set(src, "gpu.temp_c", Gpu("n1", 1), 91);
  Set(src, "gpu.throttled", Gpu("n1", 1), 1);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"thermal"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.node, "n1");
  EXPECT_EQ(f.gpu, "1");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.summary, "GPU 1 on n1 (rank 1) is throttled at 91°C");
}

TEST(DiagnoseTest, HotWithoutThrottleIsThermalToo) {
  FakeSource src;
  Healthy(src);
  Set(src, "gpu.temp_c", Gpu("n2", 0), 85);  // at the threshold
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"thermal"});
  EXPECT_EQ(d.findings[0].summary, "GPU 0 on n2 (rank 2) runs hot at 85°C");
}

TEST(DiagnoseTest, SeveralHotGpusOnANodeMakeOneFindingForTheNode) {
  FakeSource src;
  Healthy(src);
  Set(src, "gpu.temp_c", Gpu("n1", 0), 90);
  Set(src, "gpu.temp_c", Gpu("n1", 1), 91);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"thermal"});
  EXPECT_EQ(d.findings[0].node, "n1");
  EXPECT_EQ(d.findings[0].gpu, "");
  EXPECT_EQ(d.findings[0].rank, -1);
  EXPECT_EQ(d.findings[0].summary, "GPUs 0, 1 on n1 are hot or throttled");
  EXPECT_EQ(d.findings[0].evidence.size(), 2u);
}

TEST(DiagnoseTest, SamplesBeforeTheWindowAreIgnored) {
  FakeSource src;
  Healthy(src);
  src.Add("job.loss", kJob, At(kNow - 301), std::nan(""));
  src.Add("gpu.xid_count", Gpu("n1", 0), At(kNow - 400), 0);  // +3 up to the window's 3
  Diagnosis d = DiagnoseAtNow(src);
  EXPECT_FALSE(d.found()) << Causes(d)[0];
}

TEST(DiagnoseTest, HangNamesTheRankWhoseGpuIdles) {
  FakeSource src;
  Healthy(src);
  Set(src, "job.progress_age_s", kJob, 400);
  Set(src, "gpu.util", Gpu("n2", 0), 2);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.cause, "hang");
  EXPECT_EQ(f.node, "n2");
  EXPECT_EQ(f.gpu, "0");
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.summary,
            "the job hangs: no step for 6m40s; rank 2 on n2 (GPU 0) idle while the other ranks' "
            "GPUs are busy");
  EXPECT_THAT(f.next_step, HasSubstr("trainyard logs 17 --rank 2"));
  // A stuck job is not a data stall: that needs the job to step.
  EXPECT_EQ(Causes(d), V{"hang"});
}

TEST(DiagnoseTest, HangWithEveryGpuIdleNamesNoOne) {
  FakeSource src;
  Healthy(src);
  Set(src, "job.progress_age_s", kJob, 400);
  Set(src, "job.gpu_util", kJob, 1);
  for (const auto& [node, gpu] : kGpus) Set(src, "gpu.util", Gpu(node, gpu), 1);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].cause, "hang");
  EXPECT_EQ(d.findings[0].node, "");
  EXPECT_EQ(d.findings[0].rank, -1);
  EXPECT_THAT(d.findings[0].summary, HasSubstr("all its GPUs idle"));
  EXPECT_EQ(CheckNamed(d, "data_stall").result, "ok");
}

TEST(DiagnoseTest, HangWithoutGpuDataIsStillAHang) {
  FakeSource src;
  Set(src, "job.progress_age_s", kJob, 300);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"hang"});
  EXPECT_EQ(d.findings[0].node, "");
  EXPECT_EQ(d.findings[0].summary, "the job hangs: no step for 5m");
}

TEST(DiagnoseTest, DataStallFromDataWait) {
  FakeSource src;
  Healthy(src);
  Set(src, "job.data_wait_s", kJob, 0.6);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"data_stall"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.summary, "data-loading bottleneck: GPUs idle 60% waiting for input");
  EXPECT_THAT(f.next_step, HasSubstr("storage I/O"));
  EXPECT_THAT(f.next_step, HasSubstr("loader workers"));
}

TEST(DiagnoseTest, DataStallFromIdleGpusWhileTheJobSteps) {
  FakeSource src;
  Healthy(src);
  Set(src, "job.gpu_util", kJob, 4);
  Diagnosis d = DiagnoseAtNow(src);
  // loss_flat does not judge idle GPUs, so the stall is all there is.
  ASSERT_EQ(Causes(d), V{"data_stall"});
  EXPECT_EQ(d.findings[0].summary, "data-loading bottleneck: GPUs idle 96% waiting for input");
}

TEST(DiagnoseTest, DataStallFallsBackToTheGpusUtilisation) {
  FakeSource src;
  Healthy(src);
  src.Clear();
  Set(src, "job.progress_age_s", kJob, 1);
  for (const auto& [node, gpu] : kGpus) Set(src, "gpu.util", Gpu(node, gpu), 6);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"data_stall"});
  EXPECT_THAT(Evidence(d.findings[0]), HasSubstr("mean gpu.util of 4 GPUs"));
}

TEST(DiagnoseTest, StragglerNamesRankNodeAndGpu) {
  FakeSource src;
  Healthy(src);
  Set(src, "job.rank_step_time_ratio", Rank(3, "n2"), 2.1);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"straggler"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.node, "n2");
  EXPECT_EQ(f.gpu, "1");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.summary,
            "rank 3 on n2 (GPU 1) is a straggler: 2.1x the job's median step time; no GPU fault "
            "visible");
  EXPECT_THAT(Evidence(f), HasSubstr("n2 GPU 1: 60°C, not throttled, util 95%"));
  EXPECT_THAT(f.next_step, HasSubstr("trainyard drain n2"));
}

TEST(DiagnoseTest, StragglerSaysWhatIsWrongWithItsGpu) {
  FakeSource src;
  Healthy(src);
  Set(src, "job.rank_step_time_ratio", Rank(3, "n2"), 2.1);
  Set(src, "gpu.throttled", Gpu("n2", 1), 1);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), (V{"thermal", "straggler"}));
  EXPECT_THAT(d.findings[1].summary, HasSubstr("; GPU 1 throttled"));
}

TEST(DiagnoseTest, LinkDownNamesNodeAndLink) {
  FakeSource src;
  Healthy(src);
  Set(src, "link.down", Link("n1", "mlx5_0"), 1);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"link_down"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.layer, Layer::kCommunication);
  EXPECT_EQ(f.node, "n1");
  EXPECT_EQ(f.summary, "link mlx5_0 on n1 is down");
}

TEST(DiagnoseTest, LinkErrorIncreaseIsALinkProblem) {
  FakeSource src;
  Healthy(src);
  src.Add("link.errors", Link("n2", "nvlink3"), At(kNow - 100), 0);
  src.Add("link.errors", Link("n2", "nvlink3"), At(kNow), 120);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"link_down"});
  EXPECT_EQ(d.findings[0].node, "n2");
  EXPECT_EQ(d.findings[0].summary, "link nvlink3 on n2 is erroring (+120 errors in the last 5m)");
}

TEST(DiagnoseTest, CommBottleneckWhenEveryRankSlowsWithGpusBusy) {
  // Every rank twice as slow as in the 30 minutes before, alike, with GPUs busy.
  FakeSource src;
  Fill(src, "job.step_time_s", kJob, kNow - 35 * 60, kNow - 301, 10, [](int) { return 1.0; });
  Fill(src, "job.step_time_s", kJob, kNow - 290, kNow, 10, [](int) { return 2.0; });
  Set(src, "job.gpu_util", kJob, 90);
  for (int r = 0; r < 4; ++r)
    Set(src, "job.rank_step_time_ratio", Rank(r, r < 2 ? "n1" : "n2"), 1.0);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"comm_bottleneck"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.layer, Layer::kCommunication);
  EXPECT_EQ(f.node, "");
  EXPECT_THAT(f.summary, HasSubstr("2x slower"));
  EXPECT_THAT(Evidence(f), HasSubstr("the gang spans 2 leaf switches: leaf-a (n1), leaf-b (n2)"));
  EXPECT_THAT(Evidence(f), HasSubstr("no straggler"));
  EXPECT_THAT(f.next_step, HasSubstr("one leaf switch"));
  EXPECT_THAT(f.next_step, HasSubstr("data-parallel degree"));
}

TEST(DiagnoseTest, SlowdownWithAStragglerIsTheStragglers) {
  FakeSource src;
  Set(src, "job.gpu_util", kJob, 90);
  Fill(src, "job.step_time_s", kJob, kNow - 35 * 60, kNow - 301, 10, [](int) { return 1.0; });
  Fill(src, "job.step_time_s", kJob, kNow - 290, kNow, 10, [](int) { return 2.0; });
  for (int r = 0; r < 4; ++r) {
    Set(src, "job.rank_step_time_ratio", Rank(r, r < 2 ? "n1" : "n2"), r == 1 ? 2.0 : 1.0);
  }
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"straggler"});
  EXPECT_EQ(d.findings[0].rank, 1);
  EXPECT_EQ(d.findings[0].node, "n1");
  EXPECT_EQ(CheckNamed(d, "comm_bottleneck").result, "ok");
  EXPECT_THAT(CheckNamed(d, "comm_bottleneck").detail, HasSubstr("explained by the straggler"));
}

TEST(DiagnoseTest, LossNanIsFoundAnywhereInTheWindow) {
  FakeSource src;
  Healthy(src);
  src.Add("job.loss", kJob, At(kNow - 95), std::nan(""));
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"loss_nan"});
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.layer, Layer::kTraining);
  EXPECT_THAT(f.summary, HasSubstr("the loss is NaN"));
  EXPECT_THAT(Evidence(f), HasSubstr("2026-11-29T09:58:25Z"));
}

TEST(DiagnoseTest, OneInfiniteGradNormIsASkippedStepNotANan) {
  FakeSource src;
  Healthy(src);
  src.Add("job.grad_norm", kJob, At(kNow - 95), std::numeric_limits<double>::infinity());
  Diagnosis d = DiagnoseAtNow(src);
  EXPECT_FALSE(d.found()) << Causes(d)[0];
}

TEST(DiagnoseTest, ARunOfNonFiniteGradNormsIsANan) {
  FakeSource src;
  Fill(src, "job.grad_norm", kJob, kNow - 190, kNow, 10, [](int i) {
    return i < 10 ? 1.0 : std::numeric_limits<double>::infinity();  // the last 10 infinite
  });
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"loss_nan"});
  EXPECT_THAT(d.findings[0].summary, HasSubstr("the grad norm has not been finite"));
}

TEST(DiagnoseTest, GradSpike) {
  FakeSource src;
  Healthy(src);
  src.Add("job.grad_norm", kJob, At(kNow), 40);  // after the last 1.0/1.05
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"grad_spike"});
  EXPECT_THAT(d.findings[0].summary, HasSubstr("spiked to 40"));
  EXPECT_THAT(d.findings[0].next_step, HasSubstr("checkpoint before the spike"));
}

TEST(DiagnoseTest, GradSpikeNeedsHistory) {
  FakeSource src;
  Fill(src, "job.grad_norm", kJob, kNow - 50, kNow, 10, [](int i) { return i < 5 ? 1.0 : 50.0; });
  Diagnosis d = DiagnoseAtNow(src);
  EXPECT_EQ(CheckNamed(d, "grad_spike").result, "no data");
  EXPECT_FALSE(d.found());
}

TEST(DiagnoseTest, LossFlatWithBusyGpus) {
  FakeSource flat;
  Set(flat, "job.gpu_util", kJob, 95);
  Fill(flat, "job.loss", kJob, kNow - 290, kNow, 10, [](int i) { return 2.5 + (i % 2) * 0.01; });
  Set(flat, "job.lr", kJob, 0);
  Diagnosis d = DiagnoseAtNow(flat);
  ASSERT_EQ(Causes(d), V{"loss_flat"});
  EXPECT_THAT(d.findings[0].summary, HasSubstr("is not falling"));
  EXPECT_THAT(Evidence(d.findings[0]), HasSubstr("job.lr 0"));
  EXPECT_THAT(d.findings[0].next_step, HasSubstr("learning rate"));
}

TEST(DiagnoseTest, LossFlatNeedsTwentyPoints) {
  FakeSource src;
  Fill(src, "job.loss", kJob, kNow - 180, kNow, 10, [](int) { return 2.5; });  // 19 points
  Diagnosis d = DiagnoseAtNow(src);
  EXPECT_EQ(CheckNamed(d, "loss_flat").result, "no data");
}

TEST(DiagnoseTest, CheckpointOverdue) {
  FakeSource src;
  Healthy(src);
  Set(src, "job.checkpoint_age_ratio", kJob, 2.6);  // after the 0.5
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), V{"checkpoint_overdue"});
  EXPECT_EQ(d.findings[0].summary,
            "the last checkpoint is 2.6x its interval old (about 1h18m; interval 30m)");
}

TEST(DiagnoseTest, SystemFindingComesBeforeATrainingOne) {
  FakeSource src;
  Healthy(src);
  src.Add("job.loss", kJob, At(kNow), std::numeric_limits<double>::infinity());
  Set(src, "gpu.temp_c", Gpu("n2", 1), 92);
  Diagnosis d = DiagnoseAtNow(src);
  ASSERT_EQ(Causes(d), (V{"thermal", "loss_nan"}));
  EXPECT_EQ(d.findings[0].layer, Layer::kSystem);
  EXPECT_EQ(d.findings[1].layer, Layer::kTraining);
}

TEST(DiagnoseTest, FiringAlertsJoinTheEvidenceOfTheirFinding) {
  FakeSource src;
  Healthy(src);
  Set(src, "gpu.temp_c", Gpu("n2", 1), 92);
  JobContext job = Job();
  Alert hot;
  hot.rule = "GpuTooHot";
  hot.labels = {{"alertname", "GpuTooHot"}, {"severity", "warning"}, {"node", "n2"}, {"gpu", "1"}};
  hot.state = AlertState::kFiring;
  hot.starts_at = At(kNow - 120);
  Alert elsewhere = hot;
  elsewhere.labels["node"] = "n1";
  Alert pending = hot;
  pending.state = AlertState::kPending;
  pending.rule = "Pending";
  job.alerts = {hot, elsewhere, pending};
  Diagnosis d = DiagnoseAtNow(src, job);
  ASSERT_EQ(Causes(d), V{"thermal"});
  EXPECT_EQ(d.findings[0].evidence.back(),
            "alert GpuTooHot (warning) firing since 2026-11-29T09:58:00Z");
  EXPECT_EQ(d.findings[0].evidence.size(), 2u);
}

TEST(DiagnoseTest, JsonShape) {
  FakeSource src;
  Healthy(src);
  Set(src, "gpu.temp_c", Gpu("n2", 1), 92);
  auto j = nlohmann::json::parse(DiagnosisJson(DiagnoseAtNow(src)));
  EXPECT_EQ(j["job_id"], 17);
  EXPECT_EQ(j["at"], "2026-11-29T10:00:00Z");
  EXPECT_EQ(j["found"], true);
  ASSERT_TRUE(j["verdict"].is_object());
  EXPECT_EQ(j["verdict"]["cause"], "thermal");
  EXPECT_EQ(j["verdict"]["layer"], "system");
  EXPECT_EQ(j["verdict"]["node"], "n2");
  EXPECT_EQ(j["verdict"]["gpu"], "1");
  EXPECT_EQ(j["verdict"]["rank"], 3);
  EXPECT_TRUE(j["verdict"]["evidence"].is_array());
  EXPECT_FALSE(j["verdict"]["next_step"].get<std::string>().empty());
  ASSERT_EQ(j["findings"].size(), 1u);
  EXPECT_EQ(j["findings"][0], j["verdict"]);
  ASSERT_EQ(j["checks"].size(), kWalk.size());
  EXPECT_EQ(j["checks"][3]["name"], "thermal");
  EXPECT_EQ(j["checks"][3]["result"], "found");
  EXPECT_EQ(j["checks"][7]["layer"], "communication");
  EXPECT_TRUE(j["checks"][0]["detail"].is_string());

  auto healthy = nlohmann::json::parse(DiagnosisJson(DiagnoseAtNow(FakeSource())));
  EXPECT_EQ(healthy["found"], false);
  EXPECT_TRUE(healthy["verdict"].is_null());
  EXPECT_TRUE(healthy["findings"].empty());
}

TEST(DiagnoseTest, RenderLeadsWithTheVerdictAndItsNextStep) {
  FakeSource src;
  Healthy(src);
  Set(src, "job.rank_step_time_ratio", Rank(3, "n2"), 2.1);
  src.Add("job.loss", kJob, At(kNow), std::nan(""));
  Diagnosis d = DiagnoseAtNow(src);
  const std::string text = RenderDiagnosis(d);
  EXPECT_EQ(text.rfind("job 17: " + d.findings[0].summary + "\n", 0), 0u) << text;
  EXPECT_THAT(text, HasSubstr("evidence:\n  job.rank_step_time_ratio of rank 3: 2.1"));
  EXPECT_THAT(text, HasSubstr("next step: " + d.findings[0].next_step + "\n"));
  EXPECT_THAT(text, HasSubstr("also found:\n  training/loss_nan: the loss is NaN"));
  EXPECT_THAT(text, HasSubstr("walk:\n  LAYER          CHECK            RESULT  DETAIL\n"));
  EXPECT_THAT(text, HasSubstr("  system         straggler        found   4 ranks; rank 3 on n2"));
}

TEST(DiagnoseTest, RenderOfNothingFound) {
  FakeSource src;
  Healthy(src);
  const std::string text = RenderDiagnosis(DiagnoseAtNow(src));
  EXPECT_EQ(text.rfind("job 17: nothing wrong found (13 checks)\nwalk:\n", 0), 0u) << text;
  const std::string empty = RenderDiagnosis(DiagnoseAtNow(FakeSource()));
  EXPECT_THAT(empty, HasSubstr("note: 12 checks had no data to read (see the walk)\n"));
}

}  // namespace
}  // namespace trainyard::monitor
