#include "server/alerting.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/spec_codec.h"
#include "server/http_testing.h"
#include "store/memory_store.h"
#include "track/mfu.h"

namespace trainyard::server {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

Registration Node(const std::string& name, int gpus) {
  Registration r;
  r.node.name = name;
  for (int i = 0; i < gpus; ++i) {
    r.node.gpus.push_back({i, "GPU-" + name + "-" + std::to_string(i), "H100", 80 * kGiB, name});
  }
  r.node.milli_cpus = 64'000;
  r.node.memory_bytes = 512 * kGiB;
  r.node.topology.leaf = "leaf-" + name;
  r.address = "127.0.0.1";
  r.simulated = true;
  return r;
}

monitor::RuleSet Rules(const std::string& yaml) {
  auto r = monitor::LoadRules("", yaml, "test.yaml");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : monitor::RuleSet{};
}

class AlertingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("trainyard-alerting-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    clock_.Set(Timestamp(std::chrono::seconds(1'795'942'800)));
    auto c = Cluster::Open(&store_, &clock_, ClusterOptions{});
    ASSERT_TRUE(c.ok());
    cluster_ = std::move(*c);
    ASSERT_TRUE(cluster_->Register(Node("node-0", 2)).ok());
    ASSERT_TRUE(cluster_->Register(Node("node-1", 2)).ok());
  }
  void TearDown() override {
    alerting_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Open(const std::string& rules, std::vector<std::string> webhooks = {}) {
    AlertingOptions o;
    o.rules = Rules(rules);
    o.state_path = (dir_ / "alerts.json").string();
    o.webhooks = std::move(webhooks);
    o.webhook_attempts = 2;
    alerting_.reset();
    auto a = Alerting::Open(cluster_.get(), &clock_, o);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    alerting_ = std::move(*a);
  }

  void Telemetry(const std::string& node, double temp, double util = 95) {
    Heartbeat hb;
    hb.node = node;
    for (int g = 0; g < 2; ++g) {
      GpuTelemetry t;
      t.index = g;
      t.temp_c = g == 0 ? temp : 60;
      t.util_pct = util;
      t.xid_count = 0;
      hb.gpus.push_back(t);
    }
    ASSERT_TRUE(cluster_->HandleHeartbeat(hb).ok());
    alerting_->ObserveHeartbeat(hb);
  }

  void Step(Duration d) {
    clock_.Advance(d);
    ASSERT_TRUE(alerting_->Evaluate().ok());
  }

  // A 2-replica job running on node-0 and node-1, one rank each.
  JobId RunningGang() {
    auto spec = ParseSpec("name: g\nreplicas: 2\nresources: {gpus: 2}\ncommand: [x]\n", "t.yaml");
    auto ids = cluster_->Submit({*spec.spec}, "user:test");
    EXPECT_TRUE(ids.ok());
    EXPECT_TRUE(cluster_->SchedulePass().ok());
    for (const char* node : {"node-0", "node-1"}) {
      auto cmds = cluster_->Poll(node, Duration(0));
      EXPECT_TRUE(cmds.ok());
      for (const Command& c : *cmds) {
        if (c.kind != Command::Kind::kStart) continue;
        Heartbeat hb;
        hb.node = node;
        TaskStatus t;
        t.task_id = c.start.task_id;
        t.job_id = c.start.job_id;
        t.attempt = c.start.attempt;
        t.rank = c.start.rank;
        t.state = TaskState::kRunning;
        hb.tasks.push_back(t);
        EXPECT_TRUE(cluster_->HandleHeartbeat(hb).ok());
      }
    }
    return ids->front();
  }

  void StepTimes(JobId job, int64_t step, double rank0, double rank1) {
    const int64_t ms = clock_.Now().time_since_epoch().count();
    std::vector<track::SeriesAppend> a;
    a.push_back({job, 0, "step_time_s", {{step, ms, rank0}}});
    a.push_back({job, 1, "step_time_s", {{step, ms, rank1}}});
    a.push_back({job, 0, "loss", {{step, ms, 1.0 / static_cast<double>(step)}}});
    alerting_->ObserveMetrics(job, a);
  }

  std::filesystem::path dir_;
  store::MemoryStore store_;
  FakeClock clock_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Alerting> alerting_;
};

constexpr const char* kHotRule = R"(
rules:
  - name: GpuTooHot
    signal: gpu.temp_c
    condition: {threshold_above: 87}
    for: 5s
    severity: critical
    annotations: {summary: "GPU {{gpu}} of {{node}} at {{value}} C"}
    action: cordon_node
)";

TEST_F(AlertingTest, TelemetryAlertFiresCordonsAndResolves) {
  Open(kHotRule);
  Telemetry("node-0", 92);
  Step(Duration(1000));
  auto alerts = alerting_->Alerts();
  ASSERT_THAT(alerts, SizeIs(1));
  EXPECT_EQ(alerts[0].state, monitor::AlertState::kPending);
  for (int i = 0; i < 5; ++i) {
    Telemetry("node-0", 92);
    Step(Duration(1000));
  }
  alerts = alerting_->Alerts();
  ASSERT_THAT(alerts, SizeIs(1));
  EXPECT_EQ(alerts[0].state, monitor::AlertState::kFiring);
  EXPECT_EQ(alerts[0].labels.at("node"), "node-0");
  EXPECT_EQ(alerts[0].labels.at("gpu"), "0");
  auto n = cluster_->GetNode("node-0");
  EXPECT_EQ(n->node.state, NodeState::kCordoned);
  EXPECT_EQ(n->node.state_reason, "alert GpuTooHot: GPU 0 of node-0 at 92 C");
  EXPECT_EQ(cluster_->GetNode("node-1")->node.state, NodeState::kReady);
  std::vector<std::string> kinds;
  for (const AlertEvent& e : alerting_->Events()) kinds.push_back(e.kind);
  EXPECT_THAT(kinds, ::testing::ElementsAre("pending", "firing", "action"));
  EXPECT_EQ(alerting_->Events().back().detail, "cordon_node: cordoned node node-0");
  EXPECT_EQ(alerting_->Stats().actions_done, 1);

  Telemetry("node-0", 70);
  Step(Duration(1000));
  alerts = alerting_->Alerts();
  ASSERT_THAT(alerts, SizeIs(1));
  EXPECT_EQ(alerts[0].state, monitor::AlertState::kResolved);
}

TEST_F(AlertingTest, StateSurvivesARestartAndACorruptFileIsNamed) {
  Open(kHotRule);
  for (int i = 0; i < 7; ++i) {
    Telemetry("node-0", 95);
    Step(Duration(1000));
  }
  ASSERT_EQ(alerting_->Alerts().at(0).state, monitor::AlertState::kFiring);
  Open(kHotRule);  // a new process reads the state file
  auto alerts = alerting_->Alerts();
  ASSERT_THAT(alerts, SizeIs(1));
  EXPECT_EQ(alerts[0].state, monitor::AlertState::kFiring);
  EXPECT_THAT(alerting_->Events(), SizeIs(3));
  // Still hot: no second firing, no second cordon.
  Telemetry("node-0", 95);
  Step(Duration(1000));
  EXPECT_THAT(alerting_->Events(), SizeIs(3));

  alerting_.reset();
  std::ofstream(dir_ / "alerts.json") << "{not json";
  AlertingOptions o;
  o.state_path = (dir_ / "alerts.json").string();
  auto bad = Alerting::Open(cluster_.get(), &clock_, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("alerts.json: not a Trainyard alert state file"));
}

TEST_F(AlertingTest, PerRankStepTimesMakeAStragglerAlertThatRequeuesExcludingItsNode) {
  Open(R"(
rules:
  - name: RankStraggler
    signal: job.rank_step_time_ratio
    condition: {threshold_above: 1.5}
    for: 3s
    action: requeue_excluding_node
)");
  JobId job = RunningGang();
  auto v = cluster_->GetJob(job);
  ASSERT_EQ(v->job.state, JobState::kRunning);
  const std::string slow_node = v->ranks[1].node;
  const monitor::Labels job_labels = {
      {"job_id", std::to_string(job)}, {"tenant", "default"}, {"queue", "default"}};
  for (int64_t step = 1; step <= 4; ++step) {
    StepTimes(job, step, 0.1, 0.4);
    Step(Duration(1000));
    if (step == 1) {
      // The job-level signals are derived too: the median over ranks.
      auto median = alerting_->signals().Latest("job.step_time_s", job_labels, Timestamp{});
      ASSERT_TRUE(median.has_value());
      EXPECT_DOUBLE_EQ(median->value, 0.25);
    }
  }
  auto alerts = alerting_->Alerts();
  ASSERT_THAT(alerts, SizeIs(1));
  EXPECT_EQ(alerts[0].state, monitor::AlertState::kFiring);
  EXPECT_EQ(alerts[0].labels.at("rank"), "1");
  EXPECT_EQ(alerts[0].labels.at("node"), slow_node);
  EXPECT_EQ(cluster_->GetJob(job)->job.state, JobState::kPreempting);
  EXPECT_THAT(store_.GetJob(job)->value().excluded_nodes, Contains(slow_node));
  EXPECT_EQ(alerting_->Events().back().detail, "requeue_excluding_node: requeued job " +
                                                   std::to_string(job) + " excluding node " +
                                                   slow_node);
  // The job has left the node: the rank's series ends and the alert resolves, rather
  // than firing on for the lookback window over a placement that no longer exists.
  Step(Duration(1000));
  alerts = alerting_->Alerts();
  ASSERT_THAT(alerts, SizeIs(1));
  EXPECT_EQ(alerts[0].state, monitor::AlertState::kResolved);
  EXPECT_FALSE(alerting_->signals().Latest("job.step_time_s", job_labels, Timestamp{}));
}

TEST_F(AlertingTest, OccasionalSlowStepsOfABusyHostAreNotAStraggler) {
  Open(R"(
rules:
  - name: RankStraggler
    signal: job.rank_step_time_ratio
    condition: {threshold_above: 1.5}
    for: 0s
)");
  JobId job = RunningGang();
  const monitor::Labels rank1 = {{"job_id", std::to_string(job)},
                                 {"tenant", "default"},
                                 {"queue", "default"},
                                 {"rank", "1"},
                                 {"node", cluster_->GetJob(job)->ranks[1].node}};
  // Every third step of rank 1 is starved for CPU (3x as long): not a straggler.
  for (int64_t step = 1; step <= 30; ++step) {
    StepTimes(job, step, 0.05, step % 3 == 0 ? 0.15 : 0.05);
    Step(Duration(100));
    auto ratio = alerting_->signals().Latest("job.rank_step_time_ratio", rank1, Timestamp{});
    ASSERT_TRUE(ratio.has_value());
    EXPECT_LT(ratio->value, 1.5) << "step " << step;
  }
  EXPECT_THAT(alerting_->Alerts(), SizeIs(0));
  // Slow step after step (6x) is: the ratio crosses once most of the window is slow.
  int64_t crossed_at = 0;
  for (int64_t step = 31; step <= 50 && crossed_at == 0; ++step) {
    StepTimes(job, step, 0.05, 0.3);
    Step(Duration(100));
    if (alerting_->signals().Latest("job.rank_step_time_ratio", rank1, Timestamp{})->value > 1.5) {
      crossed_at = step;
    }
  }
  EXPECT_GT(crossed_at, 31);
  EXPECT_LE(crossed_at, 40);
  ASSERT_THAT(alerting_->Alerts(), SizeIs(1));
  EXPECT_EQ(alerting_->Alerts()[0].labels.at("rank"), "1");
}

TEST_F(AlertingTest, MfuIsDerivedFromTheJobsThroughputAndModel) {
  Open("rules: []\n");
  JobId job = RunningGang();
  const int64_t ms = clock_.Now().time_since_epoch().count();
  alerting_->ObserveMetrics(job,
                            {{job, 0, "tokens_per_s", {{1, ms, 40'000}}},
                             {job, 1, "tokens_per_s", {{1, ms, 60'000}}},
                             {job, 0, "step_time_s", {{1, ms, 0.1}}},
                             {job, 1, "step_time_s", {{1, ms, 0.1}}}},
                            {{"model_flops_per_token", "6e9"}, {"precision", "bf16"}});
  Step(Duration(1000));
  auto mfu = alerting_->signals().Latest(
      "job.mfu", {{"job_id", std::to_string(job)}, {"tenant", "default"}, {"queue", "default"}},
      Timestamp{});
  ASSERT_TRUE(mfu.has_value());
  track::MfuInput in;
  in.tokens_per_s = 100'000;
  in.model_flops_per_token = 6e9;
  in.gpu_type = "H100";
  in.gpu_count = 4;  // 2 replicas of 2 GPUs
  auto want = track::ComputeMfu(in);
  ASSERT_TRUE(want.ok());
  EXPECT_DOUBLE_EQ(mfu->value, want->value);
}

TEST_F(AlertingTest, NoProgressAndHeartbeatAgeAreDerived) {
  Open(R"(
rules:
  - name: TrainingStalled
    signal: job.progress_age_s
    condition: {threshold_above: 30}
  - name: NodeHeartbeatLost
    signal: node.heartbeat_age_s
    condition: {threshold_above: 20}
)");
  JobId job = RunningGang();
  StepTimes(job, 1, 0.1, 0.1);
  Step(std::chrono::seconds(10));
  EXPECT_THAT(alerting_->Alerts(), IsEmpty());
  Step(std::chrono::seconds(25));  // no new step for 35 s; no heartbeat for 35 s
  std::set<std::string> rules;
  for (const auto& a : alerting_->Alerts()) rules.insert(a.rule);
  EXPECT_THAT(rules, ::testing::ElementsAre("NodeHeartbeatLost", "TrainingStalled"));
}

TEST_F(AlertingTest, WebhookGetsFiringAndResolvedInAlertmanagerFormat) {
  http::Server receiver;
  std::mutex mu;
  std::vector<nlohmann::json> bodies;
  receiver.Post("/hook", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lk(mu);
    bodies.push_back(nlohmann::json::parse(req.body));
    res.status = 200;
  });
  LoopbackServer loop;
  const int port = loop.Start(receiver);
  ASSERT_GT(port, 0);
  Open(kHotRule, {"http://127.0.0.1:" + std::to_string(port) + "/hook"});
  alerting_->SetExternalUrl("http://trainyard.example:8470");
  for (int i = 0; i < 7; ++i) {
    Telemetry("node-0", 95);
    Step(Duration(1000));
  }
  Telemetry("node-0", 60);
  Step(Duration(1000));
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard lk(mu);
      if (bodies.size() >= 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  loop.Stop();
  std::lock_guard lk(mu);
  ASSERT_THAT(bodies, SizeIs(2));
  EXPECT_EQ(bodies[0]["status"], "firing");
  EXPECT_EQ(bodies[0]["version"], "4");
  EXPECT_EQ(bodies[0]["externalURL"], "http://trainyard.example:8470");
  EXPECT_EQ(bodies[0]["alerts"][0]["labels"]["alertname"], "GpuTooHot");
  EXPECT_EQ(bodies[0]["alerts"][0]["labels"]["node"], "node-0");
  EXPECT_EQ(bodies[1]["status"], "resolved");
  EXPECT_EQ(alerting_->Stats().webhook_sent, 2);
}

TEST_F(AlertingTest, DiagnoseNamesTheStragglersNodeAndGpu) {
  Open("rules: []\n");
  JobId job = RunningGang();
  auto v = cluster_->GetJob(job);
  const std::string slow_node = v->ranks[1].node;
  for (int64_t step = 1; step <= 30; ++step) {
    StepTimes(job, step, 0.1, 0.35);
    Telemetry("node-0", 60);
    Telemetry("node-1", 60);
    Step(Duration(1000));
  }
  auto d = alerting_->Diagnose(job);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE(d->found());
  EXPECT_EQ(d->findings[0].cause, "straggler");
  EXPECT_EQ(d->findings[0].node, slow_node);
  EXPECT_EQ(d->findings[0].rank, 1);
  EXPECT_EQ(alerting_->Diagnose(9999).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainyard::server
