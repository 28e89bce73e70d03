#include "monitor/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "monitor/testing.h"

namespace trainyard::monitor {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using testing::At;
using testing::FakeSource;
using testing::Rules;

const Labels kGpu0 = {{"node", "n1"}, {"gpu", "0"}};
const Labels kGpu1 = {{"node", "n1"}, {"gpu", "1"}};
const Labels kJob = {{"job_id", "7"}, {"tenant", "t"}, {"queue", "q"}};

// The transitions of an evaluation as "kind alertname/fingerprint-less labels" strings.
std::vector<std::string> Kinds(const Evaluation& e) {
  std::vector<std::string> out;
  for (const Transition& t : e.transitions) {
    const char* k = t.kind == TransitionKind::kPending  ? "pending"
                    : t.kind == TransitionKind::kFiring ? "firing"
                                                        : "resolved";
    out.push_back(std::string(k) + " " + t.alert.rule);
  }
  return out;
}

const Alert* Find(const Evaluation& e, const std::string& rule) {
  for (const Alert& a : e.alerts) {
    if (a.rule == rule) return &a;
  }
  return nullptr;
}

using V = std::vector<std::string>;

TEST(EngineTest, ThresholdAboveReadsTheLatestSample) {
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}}
)"));
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 80);
  src.Add("gpu.temp_c", kGpu0, At(10), 90);
  src.Add("gpu.temp_c", kGpu1, At(0), 90);
  src.Add("gpu.temp_c", kGpu1, At(10), 80);
  Evaluation e = engine.Evaluate(At(10), src);
  EXPECT_EQ(Kinds(e), (V{"firing Hot"}));
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].labels.at("gpu"), "0");
  EXPECT_EQ(e.alerts[0].value, 90);
}

TEST(EngineTest, ThresholdBelow) {
  Engine engine(Rules(R"(rules:
  - {name: Full, signal: node.disk_free_ratio, condition: {threshold_below: 0.1}}
)"));
  FakeSource src;
  src.Add("node.disk_free_ratio", {{"node", "n1"}, {"path", "/ckpt"}}, At(0), 0.05);
  src.Add("node.disk_free_ratio", {{"node", "n2"}, {"path", "/ckpt"}}, At(0), 0.5);
  Evaluation e = engine.Evaluate(At(0), src);
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].labels.at("node"), "n1");
  EXPECT_EQ(e.alerts[0].value, 0.05);
}

TEST(EngineTest, StaleSeriesDoNotMatch) {
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85, window: 1m}}
)"));
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 95);
  EXPECT_EQ(engine.Evaluate(At(60), src).alerts.size(), 1u);  // 60 s old: within 1m
  EXPECT_EQ(engine.Evaluate(At(61), src).alerts.size(), 1u);  // resolved, retained
  EXPECT_EQ(engine.Evaluate(At(61), src).alerts[0].state, AlertState::kResolved);
}

TEST(EngineTest, IgnoresSamplesOutsideTheWindowAndSortsThem) {
  // A source that returns everything it has, unsorted, split over duplicate series.
  class Sloppy : public SignalSource {
   public:
    std::vector<Series> Query(const std::string&, Timestamp, Timestamp) const override {
      return {Series{kGpu0, {{At(100), 99}, {At(30), 70}}},  // At(100): in the future
              Series{kGpu0, {{At(40), 88}, {At(-1000), 99}}}};
    }
  };
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}}
)"));
  Evaluation e = engine.Evaluate(At(50), Sloppy());
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].value, 88);  // the latest sample in [now-5m, now]
}

TEST(EngineTest, NanMatchesNanAndInfinity) {
  Engine engine(Rules(R"(rules:
  - {name: LossNaN, signal: job.loss, condition: {nan: true}}
)"));
  FakeSource src;
  src.Add("job.loss", {{"job_id", "1"}}, At(0), std::nan(""));
  src.Add("job.loss", {{"job_id", "2"}}, At(0), std::numeric_limits<double>::infinity());
  src.Add("job.loss", {{"job_id", "3"}}, At(0), 2.5);
  src.Add("job.loss", {{"job_id", "4"}}, At(-10), std::nan(""));
  src.Add("job.loss", {{"job_id", "4"}}, At(0), 2.5);  // recovered: only the latest counts
  Evaluation e = engine.Evaluate(At(0), src);
  ASSERT_EQ(e.alerts.size(), 2u);
  EXPECT_EQ(e.alerts[0].labels.at("job_id"), "1");
  EXPECT_TRUE(std::isnan(e.alerts[0].value));
  EXPECT_EQ(e.alerts[1].labels.at("job_id"), "2");
}

TEST(EngineTest, RateAbovePerSecondOverTheWindow) {
  Engine engine(Rules(R"(rules:
  - {name: Errors, signal: link.errors, condition: {rate_above: 0.5, window: 5m}}
)"));
  FakeSource src;
  const Labels fast = {{"node", "n1"}, {"link", "ib0"}};
  const Labels slow = {{"node", "n1"}, {"link", "ib1"}};
  for (int i = 0; i <= 6; ++i) {
    src.Add("link.errors", fast, At(i * 10), i * 10.0);  // 1 per second
    src.Add("link.errors", slow, At(i * 10), i * 1.0);   // 0.1 per second
  }
  Evaluation e = engine.Evaluate(At(60), src);
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].labels.at("link"), "ib0");
  EXPECT_DOUBLE_EQ(e.alerts[0].value, 1.0);
}

TEST(EngineTest, CounterResetCountsTheNewValue) {
  Engine engine(Rules(R"(rules:
  - {name: Xid, signal: gpu.xid_count, condition: {increase_above: 6, window: 10m}}
  - {name: XidRate, signal: gpu.xid_count, condition: {rate_above: 0, window: 10m}}
)"));
  FakeSource src;
  // 10 -> 12 (+2), agent restart -> 2 (+2), -> 5 (+3): 7 in all, never negative.
  src.Add("gpu.xid_count", kGpu0, At(0), 10);
  src.Add("gpu.xid_count", kGpu0, At(100), 12);
  src.Add("gpu.xid_count", kGpu0, At(200), 2);
  src.Add("gpu.xid_count", kGpu0, At(300), std::nan(""));  // skipped
  src.Add("gpu.xid_count", kGpu0, At(350), 5);
  Evaluation e = engine.Evaluate(At(350), src);
  ASSERT_EQ(e.alerts.size(), 2u);
  EXPECT_EQ(e.alerts[0].rule, "Xid");
  EXPECT_EQ(e.alerts[0].value, 7);
  EXPECT_EQ(e.alerts[1].rule, "XidRate");
  EXPECT_DOUBLE_EQ(e.alerts[1].value, 7.0 / 350);
}

TEST(EngineTest, IncreaseNeedsTwoSamplesAndARise) {
  Engine engine(Rules(R"(rules:
  - {name: Xid, signal: gpu.xid_count, condition: {increase_above: 0, window: 10m}}
)"));
  FakeSource src;
  src.Add("gpu.xid_count", kGpu0, At(0), 3);  // one sample: no increase known
  src.Add("gpu.xid_count", kGpu1, At(0), 3);
  src.Add("gpu.xid_count", kGpu1, At(10), 3);  // flat
  EXPECT_TRUE(engine.Evaluate(At(10), src).alerts.empty());
  src.Add("gpu.xid_count", kGpu1, At(20), 4);
  EXPECT_EQ(engine.Evaluate(At(20), src).alerts.size(), 1u);
}

TEST(EngineTest, ZscoreAgainstTheWindowBeforeTheLatest) {
  Engine engine(Rules(R"(rules:
  - {name: Spike, signal: job.grad_norm, condition: {zscore_above: 6, window: 10m, min_points: 50}}
)"));
  const Labels spike = {{"job_id", "1"}};
  const Labels calm = {{"job_id", "2"}};
  const Labels young = {{"job_id", "3"}};
  FakeSource src;
  for (int i = 0; i < 60; ++i) {
    const double v = (i % 2 == 0) ? 0.9 : 1.1;  // mean 1, stddev 0.1
    src.Add("job.grad_norm", spike, At(i), v);
    src.Add("job.grad_norm", calm, At(i), v);
    if (i >= 20) src.Add("job.grad_norm", young, At(i), v);  // 40 points: too few
  }
  src.Add("job.grad_norm", spike, At(60), 1.7);  // z = 7
  src.Add("job.grad_norm", calm, At(60), 1.5);   // z = 5
  src.Add("job.grad_norm", young, At(60), 9.0);
  Evaluation e = engine.Evaluate(At(60), src);
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].labels.at("job_id"), "1");
  EXPECT_EQ(e.alerts[0].value, 1.7);  // the value, not the z-score
}

TEST(EngineTest, ZscoreScoresEverySampleSinceTheLastEvaluation) {
  Engine engine(Rules(R"(rules:
  - {name: Spike, signal: job.grad_norm, condition: {zscore_above: 6, window: 10m, min_points: 50}}
)"));
  const Labels job = {{"job_id", "1"}};
  FakeSource src;
  for (int i = 0; i < 60; ++i) src.Add("job.grad_norm", job, At(i), (i % 2 == 0) ? 0.9 : 1.1);
  EXPECT_TRUE(engine.Evaluate(At(60), src).alerts.empty());
  // One batch brings a spike and more spiked points after it: the latest alone scores
  // below 6 (the spikes before it lift the mean and the deviation), the first above.
  for (int i = 61; i <= 64; ++i) src.Add("job.grad_norm", job, At(i), 100.0);
  Evaluation e = engine.Evaluate(At(64), src);
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].value, 100.0);
  // Points that arrive late (their time is when they were logged, before the last
  // evaluation) are still scored: newer than the newest sample scored.
  Engine late(Rules(R"(rules:
  - {name: Spike, signal: job.grad_norm, condition: {zscore_above: 6, window: 10m, min_points: 50}}
)"));
  FakeSource src2;
  for (int i = 0; i < 60; ++i) src2.Add("job.grad_norm", job, At(i), (i % 2 == 0) ? 0.9 : 1.1);
  EXPECT_TRUE(late.Evaluate(At(66), src2).alerts.empty());
  for (int i = 61; i <= 64; ++i) src2.Add("job.grad_norm", job, At(i), 100.0);
  EXPECT_EQ(late.Evaluate(At(67), src2).alerts.size(), 1u);
  // Samples an earlier evaluation scored are not scored again.
  Engine fresh(Rules(R"(rules:
  - {name: Spike, signal: job.grad_norm, condition: {zscore_above: 6, window: 10m, min_points: 50}}
)"));
  EXPECT_TRUE(fresh.Evaluate(At(64), src).alerts.empty());  // first evaluation: latest only
  EXPECT_TRUE(fresh.Evaluate(At(65), src).alerts.empty());  // nothing new since
}

TEST(EngineTest, ZscoreFloorsTheStddevOfAFlatSeries) {
  Engine engine(Rules(R"(rules:
  - {name: Spike, signal: job.loss, condition: {zscore_above: 6, window: 10m, min_points: 10}}
)"));
  FakeSource src;
  for (int i = 0; i < 20; ++i) {
    for (const char* job : {"1", "2", "3"}) src.Add("job.loss", {{"job_id", job}}, At(i), 2.0);
  }
  src.Add("job.loss", {{"job_id", "1"}}, At(19), std::nan(""));  // NaNs in history: skipped
  src.Add("job.loss", {{"job_id", "1"}}, At(20), 2.001);         // 0.05% up: not a spike
  src.Add("job.loss", {{"job_id", "2"}}, At(20), 2.2);           // 10% up: 10 floors of 1%
  src.Add("job.loss", {{"job_id", "3"}}, At(20), std::nan(""));  // NaN latest: not a z-score
  Evaluation e = engine.Evaluate(At(20), src);
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].labels.at("job_id"), "2");
}

TEST(EngineTest, AbsentForFiresForSeriesSeenBefore) {
  EngineOptions options;
  options.forget_absent_after = hours(1);
  Engine engine(Rules(R"(rules:
  - {name: Silent, signal: gpu.temp_c, condition: {absent_for: 5m}}
)"),
                options);
  FakeSource src;
  for (int i = 0; i <= 60; i += 10) src.Add("gpu.temp_c", kGpu0, At(i), 50);
  EXPECT_TRUE(engine.Evaluate(At(60), src).alerts.empty());
  EXPECT_TRUE(engine.Evaluate(At(359), src).transitions.empty());  // 299 s of silence
  Evaluation e = engine.Evaluate(At(360), src);                    // 300 s
  EXPECT_EQ(Kinds(e), (V{"firing Silent"}));
  EXPECT_EQ(e.alerts[0].value, 300);
  EXPECT_EQ(e.alerts[0].labels.at("gpu"), "0");
  e = engine.Evaluate(At(400), src);
  EXPECT_TRUE(e.transitions.empty());
  EXPECT_EQ(e.alerts[0].value, 340);  // seconds of silence, updated
  // It reports again: resolved.
  src.Add("gpu.temp_c", kGpu0, At(410), 51);
  EXPECT_EQ(Kinds(engine.Evaluate(At(410), src)), (V{"resolved Silent"}));
  // Silent past forget_absent_after: taken as retired, the alert resolves.
  EXPECT_EQ(Kinds(engine.Evaluate(At(410 + 300), src)), (V{"firing Silent"}));
  EXPECT_TRUE(engine.Evaluate(At(410 + 3599), src).transitions.empty());
  EXPECT_EQ(Kinds(engine.Evaluate(At(410 + 3600), src)), (V{"resolved Silent"}));
  EXPECT_TRUE(engine.ExportState().seen.empty());
}

TEST(EngineTest, AbsentForSeesSeriesThatWentSilentBeforeTheEngineStarted) {
  Engine engine(Rules(R"(rules:
  - {name: Silent, signal: gpu.temp_c, condition: {absent_for: 5m}}
)"));
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 50);     // last sample 8 minutes before the first look
  src.Add("gpu.temp_c", kGpu1, At(-700), 50);  // beyond twice absent_for: unknown
  Evaluation e = engine.Evaluate(At(480), src);
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].labels.at("gpu"), "0");
  EXPECT_EQ(e.alerts[0].value, 480);
}

TEST(EngineTest, QueriesEachRulesWindow) {
  Engine engine(Rules(R"(rules:
  - {name: A, signal: gpu.temp_c, condition: {threshold_above: 85}}
  - {name: B, signal: job.loss, condition: {zscore_above: 5, window: 15m}}
  - {name: C, signal: gpu.temp_c, condition: {absent_for: 10m}}
)"));
  FakeSource src;
  (void)engine.Evaluate(At(3600), src);
  using Q = std::tuple<std::string, Timestamp, Timestamp>;
  EXPECT_EQ(src.queries, (std::vector<Q>{Q{"gpu.temp_c", At(3600 - 300), At(3600)},
                                         Q{"job.loss", At(3600 - 900), At(3600)},
                                         Q{"gpu.temp_c", At(3600 - 1200), At(3600)}}));
}

TEST(EngineTest, PendingForThenFiringThenResolved) {
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}, for: 1m}
)"));
  FakeSource src;
  for (int t = 0; t <= 90; t += 10) src.Add("gpu.temp_c", kGpu0, At(t), 90);

  Evaluation e = engine.Evaluate(At(0), src);
  EXPECT_EQ(Kinds(e), (V{"pending Hot"}));
  EXPECT_EQ(e.alerts[0].state, AlertState::kPending);
  EXPECT_EQ(e.alerts[0].active_at, At(0));
  EXPECT_EQ(e.alerts[0].starts_at, Timestamp{});
  EXPECT_TRUE(engine.Evaluate(At(30), src).transitions.empty());
  EXPECT_TRUE(engine.Evaluate(At(59), src).transitions.empty());
  e = engine.Evaluate(At(60), src);
  EXPECT_EQ(Kinds(e), (V{"firing Hot"}));
  EXPECT_EQ(e.transitions[0].alert.state, AlertState::kFiring);
  EXPECT_EQ(e.alerts[0].active_at, At(0));
  EXPECT_EQ(e.alerts[0].starts_at, At(60));
  EXPECT_TRUE(engine.Evaluate(At(90), src).transitions.empty());

  src.Add("gpu.temp_c", kGpu0, At(100), 70);
  e = engine.Evaluate(At(100), src);
  EXPECT_EQ(Kinds(e), (V{"resolved Hot"}));
  EXPECT_EQ(e.alerts[0].state, AlertState::kResolved);
  EXPECT_EQ(e.alerts[0].ends_at, At(100));
  EXPECT_EQ(e.alerts[0].value, 90);  // the last value that matched
}

TEST(EngineTest, PendingThatClearsStartsOver) {
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}, for: 1m}
)"));
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 90);
  src.Add("gpu.temp_c", kGpu0, At(50), 80);
  src.Add("gpu.temp_c", kGpu0, At(70), 90);
  EXPECT_EQ(Kinds(engine.Evaluate(At(0), src)), (V{"pending Hot"}));
  Evaluation e = engine.Evaluate(At(50), src);
  EXPECT_TRUE(e.transitions.empty());  // pending -> inactive is silent
  EXPECT_TRUE(e.alerts.empty());
  e = engine.Evaluate(At(70), src);
  EXPECT_EQ(Kinds(e), (V{"pending Hot"}));
  EXPECT_EQ(e.alerts[0].active_at, At(70));
  EXPECT_TRUE(engine.Evaluate(At(120), src).transitions.empty());
  EXPECT_EQ(Kinds(engine.Evaluate(At(130), src)), (V{"firing Hot"}));
}

TEST(EngineTest, KeepFiringForRidesOutFlappingInput) {
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}, keep_firing_for: 5m}
)"));
  FakeSource src;
  std::vector<std::string> all;
  // Hot and cool by turns every 30 s for 10 minutes.
  for (int t = 0; t <= 600; t += 30) {
    src.Add("gpu.temp_c", kGpu0, At(t), (t / 30) % 2 == 0 ? 90 : 80);
    for (const std::string& k : Kinds(engine.Evaluate(At(t), src))) all.push_back(k);
  }
  EXPECT_EQ(all, (V{"firing Hot"}));
  // Then cool for good: resolves keep_firing_for after the first cool evaluation.
  for (int t = 630; t <= 930; t += 30) {
    src.Add("gpu.temp_c", kGpu0, At(t), 80);
    Evaluation e = engine.Evaluate(At(t), src);
    if (t < 930) {
      EXPECT_TRUE(e.transitions.empty()) << t;
      EXPECT_EQ(e.alerts[0].state, AlertState::kFiring);
      EXPECT_EQ(e.alerts[0].keep_firing_since, At(630));
    } else {
      EXPECT_EQ(Kinds(e), (V{"resolved Hot"}));
      EXPECT_EQ(e.alerts[0].ends_at, At(930));
    }
  }
}

TEST(EngineTest, WithoutKeepFiringForFlappingInputFlaps) {
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}}
)"));
  FakeSource src;
  std::vector<std::string> all;
  for (int t = 0; t <= 90; t += 30) {
    src.Add("gpu.temp_c", kGpu0, At(t), (t / 30) % 2 == 0 ? 90 : 80);
    for (const std::string& k : Kinds(engine.Evaluate(At(t), src))) all.push_back(k);
  }
  EXPECT_EQ(all, (V{"firing Hot", "resolved Hot", "firing Hot", "resolved Hot"}));
}

TEST(EngineTest, ResolvedAlertsStayForTheRetentionThenGo) {
  EngineOptions options;
  options.resolved_retention = minutes(15);
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}}
)"),
                options);
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 90);
  src.Add("gpu.temp_c", kGpu0, At(10), 80);
  (void)engine.Evaluate(At(0), src);
  (void)engine.Evaluate(At(10), src);
  src.Add("gpu.temp_c", kGpu0, At(10 + 899), 80);
  EXPECT_EQ(engine.Evaluate(At(10 + 899), src).alerts.size(), 1u);
  src.Add("gpu.temp_c", kGpu0, At(10 + 900), 80);
  EXPECT_TRUE(engine.Evaluate(At(10 + 900), src).alerts.empty());
}

TEST(EngineTest, AResolvedAlertThatComesBackIsANewAlert) {
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}}
)"));
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 90);
  src.Add("gpu.temp_c", kGpu0, At(10), 80);
  src.Add("gpu.temp_c", kGpu0, At(20), 95);
  (void)engine.Evaluate(At(0), src);
  (void)engine.Evaluate(At(10), src);
  Evaluation e = engine.Evaluate(At(20), src);
  EXPECT_EQ(Kinds(e), (V{"firing Hot"}));
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].starts_at, At(20));
  EXPECT_EQ(e.alerts[0].ends_at, Timestamp{});
}

TEST(EngineTest, LabelsAnnotationsAndFingerprint) {
  Engine engine(Rules(R"(rules:
  - name: Hot
    signal: gpu.temp_c
    condition: {threshold_above: 85}
    severity: critical
    labels: {team: infra, gpu: any}
    annotations: {summary: "GPU on {{node}} at {{value}} C (limit {{threshold}}); {{team}}"}
)"));
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 90.5);
  Evaluation e = engine.Evaluate(At(0), src);
  ASSERT_EQ(e.alerts.size(), 1u);
  const Alert& a = e.alerts[0];
  // Rule labels win over series labels; alertname and severity over both.
  EXPECT_EQ(a.labels, (Labels{{"alertname", "Hot"},
                              {"gpu", "any"},
                              {"node", "n1"},
                              {"severity", "critical"},
                              {"team", "infra"}}));
  EXPECT_EQ(a.annotations.at("summary"), "GPU on n1 at 90.5 C (limit 85); infra");
  EXPECT_EQ(a.fingerprint, AlertFingerprint(a.labels));
  // Annotations follow the value.
  src.Add("gpu.temp_c", kGpu0, At(10), 92);
  e = engine.Evaluate(At(10), src);
  EXPECT_EQ(e.alerts[0].annotations.at("summary"), "GPU on n1 at 92 C (limit 85); infra");
}

TEST(EngineTest, FingerprintIsPrometheus) {
  // Prometheus' own test vectors (prometheus/common model/signature_test.go).
  EXPECT_EQ(AlertFingerprint({}), "cbf29ce484222325");
  EXPECT_EQ(AlertFingerprint({{"name", "garland, briggs"}, {"fear", "love is not enough"}}),
            "507a62d79ee76c9a");  // 5799056148416392346
}

TEST(EngineTest, DuplicateSeriesMakeOneAlert) {
  // Two series for GPU 0 and 1; the rule's `gpu` label makes their alert labels equal.
  Engine engine(Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}, labels: {gpu: all}}
)"));
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 90);
  src.Add("gpu.temp_c", kGpu1, At(0), 91);
  Evaluation e = engine.Evaluate(At(0), src);
  EXPECT_EQ(Kinds(e), (V{"firing Hot"}));
  ASSERT_EQ(e.alerts.size(), 1u);
  EXPECT_EQ(e.alerts[0].value, 90);  // the first series in label order
  // Evaluating again does not make a second alert, nor a second transition.
  EXPECT_TRUE(engine.Evaluate(At(5), src).transitions.empty());
  EXPECT_EQ(engine.Evaluate(At(6), src).alerts.size(), 1u);
}

TEST(EngineTest, AlertsOfRemovedRulesResolve) {
  const std::string yaml = R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}}
  - {name: Warm, signal: gpu.temp_c, condition: {threshold_above: 80}, for: 1h}
)";
  Engine engine(Rules(yaml));
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 90);
  EXPECT_EQ(Kinds(engine.Evaluate(At(0), src)), (V{"firing Hot", "pending Warm"}));
  engine.SetRules(Rules("rules: []\n"));
  Evaluation e = engine.Evaluate(At(10), src);
  EXPECT_EQ(Kinds(e), (V{"resolved Hot"}));
  ASSERT_EQ(e.alerts.size(), 1u);  // the pending one is gone
  EXPECT_EQ(e.alerts[0].state, AlertState::kResolved);
  e = engine.Evaluate(At(10 + 900), src);
  EXPECT_TRUE(e.alerts.empty());
  EXPECT_TRUE(engine.ExportState().alerts.empty());
}

TEST(EngineTest, ExportImportContinuesExactly) {
  const RuleSet rules = Rules(R"(rules:
  - {name: Hot, signal: gpu.temp_c, condition: {threshold_above: 85}, for: 1m, keep_firing_for: 2m}
  - {name: Silent, signal: gpu.temp_c, condition: {absent_for: 3m}}
  - name: Ecc
    signal: gpu.ecc_uncorrectable
    condition: {increase_above: 0, window: 10m}
    action: cordon_node
)");
  Engine a(rules);
  FakeSource src;
  for (int t = 0; t < 600; t += 15) {
    src.Add("gpu.temp_c", kGpu0, At(t), 80 + (t % 90) / 5.0);
    if (t < 200) src.Add("gpu.temp_c", kGpu1, At(t), 60);
    src.Add("gpu.ecc_uncorrectable", kGpu0, At(t), t / 120);
    (void)a.Evaluate(At(t), src);
  }
  const EngineState state = a.ExportState();
  EXPECT_FALSE(state.alerts.empty());
  EXPECT_FALSE(state.seen.empty());
  EXPECT_EQ(state.cordoned_nodes, std::vector<std::string>{"n1"});
  Engine b(rules);
  b.ImportState(state);
  EXPECT_EQ(b.ExportState(), state);
  for (int t = 600; t < 1200; t += 15) {
    src.Add("gpu.temp_c", kGpu0, At(t), 80 + (t % 90) / 5.0);
    src.Add("gpu.ecc_uncorrectable", kGpu0, At(t), t / 120);
    Evaluation ea = a.Evaluate(At(t), src);
    Evaluation eb = b.Evaluate(At(t), src);
    ASSERT_EQ(ea.alerts, eb.alerts) << t;
    ASSERT_EQ(ea.actions, eb.actions) << t;
    ASSERT_EQ(ea.transitions.size(), eb.transitions.size()) << t;
  }
}

// ---- Actions --------------------------------------------------------------------------

constexpr std::string_view kEccRule = R"(limits:
  cordon_node: {max_per_hour: 3, max_cordoned: 2}
rules:
  - name: Ecc
    signal: gpu.ecc_uncorrectable
    condition: {increase_above: 0, window: 10m}
    action: {kind: cordon_node}
)";

// One ECC error on `node` GPU 0 between t-10 and t.
void EccError(FakeSource& src, const std::string& node, int64_t t) {
  src.Add("gpu.ecc_uncorrectable", {{"node", node}, {"gpu", "0"}}, At(t - 10), 0);
  src.Add("gpu.ecc_uncorrectable", {{"node", node}, {"gpu", "0"}}, At(t), 1);
}

TEST(EngineTest, FiringYieldsAnActionRequest) {
  Engine engine(Rules(kEccRule));
  FakeSource src;
  EccError(src, "n1", 100);
  Evaluation e = engine.Evaluate(At(100), src);
  ASSERT_EQ(e.actions.size(), 1u);
  const ActionRequest& r = e.actions[0];
  EXPECT_EQ(r.kind, ActionKind::kCordonNode);
  EXPECT_EQ(r.rule, "Ecc");
  EXPECT_EQ(r.node, "n1");
  EXPECT_EQ(r.gpu, "0");
  EXPECT_EQ(r.job_id, "");
  EXPECT_EQ(r.at, At(100));
  EXPECT_EQ(r.fingerprint, e.alerts[0].fingerprint);
  EXPECT_FALSE(r.suppressed);
  // Staying firing asks nothing more.
  EXPECT_TRUE(engine.Evaluate(At(110), src).actions.empty());
  EXPECT_EQ(engine.ExportState().cordoned_nodes, std::vector<std::string>{"n1"});
}

TEST(EngineTest, MaxCordonedSuppressesUntilReleased) {
  Engine engine(Rules(kEccRule));
  FakeSource src;
  EccError(src, "n1", 100);
  EccError(src, "n2", 100);
  EccError(src, "n3", 100);
  Evaluation e = engine.Evaluate(At(100), src);
  ASSERT_EQ(e.actions.size(), 3u);
  EXPECT_FALSE(e.actions[0].suppressed);
  EXPECT_FALSE(e.actions[1].suppressed);
  EXPECT_TRUE(e.actions[2].suppressed);
  EXPECT_EQ(e.actions[2].node, "n3");
  EXPECT_EQ(e.actions[2].suppressed_reason,
            "cordon_node limit: 2 nodes already cordoned by alerts (max_cordoned: 2)");
  // The alert fires all the same: only the action is held back.
  EXPECT_EQ(e.alerts.size(), 3u);

  // An operator lifts n1's cordon; a new error on n3 may now cordon it.
  engine.ReleaseCordon("n1");
  src.Clear();
  e = engine.Evaluate(At(2000), src);  // everything resolves
  EXPECT_EQ(e.transitions.size(), 3u);
  EccError(src, "n3", 2100);
  e = engine.Evaluate(At(2100), src);
  ASSERT_EQ(e.actions.size(), 1u);
  EXPECT_FALSE(e.actions[0].suppressed);
  EXPECT_EQ(e.actions[0].node, "n3");
}

TEST(EngineTest, AnAlreadyCordonedNodeIsNotCordonedAgain) {
  Engine engine(Rules(kEccRule));
  FakeSource src;
  EccError(src, "n1", 100);
  (void)engine.Evaluate(At(100), src);
  src.Clear();
  (void)engine.Evaluate(At(1000), src);  // resolved; the cordon stays
  EccError(src, "n1", 1100);
  Evaluation e = engine.Evaluate(At(1100), src);
  ASSERT_EQ(e.actions.size(), 1u);
  EXPECT_TRUE(e.actions[0].suppressed);
  EXPECT_EQ(e.actions[0].suppressed_reason, "cordon_node: node n1 is already cordoned by an alert");
}

TEST(EngineTest, MaxPerHourCountsASlidingHour) {
  Engine engine(Rules(R"(limits:
  cordon_node: {max_per_hour: 3, max_cordoned: 100}
rules:
  - name: Ecc
    signal: gpu.ecc_uncorrectable
    condition: {increase_above: 0, window: 10m}
    action: {kind: cordon_node}
)"));
  FakeSource src;
  std::vector<std::pair<int64_t, std::string>> got;  // (time, reason)
  // A new node fails every 10 minutes.
  for (int i = 0; i < 9; ++i) {
    const int64_t t = 100 + i * 600;
    src.Clear();
    EccError(src, "n" + std::to_string(i), t);
    for (const ActionRequest& r : engine.Evaluate(At(t), src).actions) {
      got.emplace_back(t, r.suppressed_reason);
    }
  }
  const std::string over = "cordon_node limit: 3 requests in the last hour (max_per_hour: 3)";
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, std::string>>{{100, ""},
                                                               {700, ""},
                                                               {1300, ""},
                                                               {1900, over},
                                                               {2500, over},
                                                               {3100, over},
                                                               {3700, ""},  // 100 is an hour ago
                                                               {4300, ""},
                                                               {4900, ""}}));
}

TEST(EngineTest, RequestCheckpointAndRequeueCarryTheirTargets) {
  Engine engine(Rules(R"(limits:
  request_checkpoint: {max_per_hour: 0}
rules:
  - name: Overdue
    signal: job.checkpoint_age_ratio
    condition: {threshold_above: 2}
    action: {kind: request_checkpoint}
  - name: Straggler
    signal: job.rank_step_time_ratio
    condition: {threshold_above: 1.5}
    action: {kind: requeue_excluding_node}
  - name: Note
    signal: job.loss
    condition: {nan: true}
)"));
  FakeSource src;
  src.Add("job.checkpoint_age_ratio", kJob, At(0), 3);
  src.Add("job.rank_step_time_ratio",
          {{"job_id", "7"}, {"tenant", "t"}, {"queue", "q"}, {"rank", "3"}, {"node", "n9"}}, At(0),
          2);
  src.Add("job.loss", kJob, At(0), std::nan(""));
  Evaluation e = engine.Evaluate(At(0), src);
  EXPECT_EQ(e.alerts.size(), 3u);
  ASSERT_EQ(e.actions.size(), 2u);  // notify asks for nothing
  EXPECT_EQ(e.actions[0].kind, ActionKind::kRequestCheckpoint);
  EXPECT_EQ(e.actions[0].job_id, "7");
  EXPECT_TRUE(e.actions[0].suppressed);  // max_per_hour: 0 forbids it
  EXPECT_EQ(e.actions[0].suppressed_reason,
            "request_checkpoint limit: 0 requests in the last hour (max_per_hour: 0)");
  EXPECT_EQ(e.actions[1].kind, ActionKind::kRequeueExcludingNode);
  EXPECT_EQ(e.actions[1].job_id, "7");
  EXPECT_EQ(e.actions[1].node, "n9");
  EXPECT_FALSE(e.actions[1].suppressed);
}

TEST(EngineTest, ANodeActionWithoutANodeLabelIsSuppressed) {
  Engine engine(Rules(kEccRule));
  FakeSource src;
  src.Add("gpu.ecc_uncorrectable", {{"gpu", "0"}}, At(0), 0);  // a source bug: no node
  src.Add("gpu.ecc_uncorrectable", {{"gpu", "0"}}, At(10), 1);
  Evaluation e = engine.Evaluate(At(10), src);
  ASSERT_EQ(e.actions.size(), 1u);
  EXPECT_TRUE(e.actions[0].suppressed);
  EXPECT_EQ(e.actions[0].suppressed_reason, "cordon_node: the alert has no node label to act on");
  EXPECT_TRUE(engine.ExportState().recent_actions.empty());
}

TEST(EngineTest, DefaultRulesEvaluate) {
  auto rules = LoadRules(DefaultRulesYaml(), "");
  ASSERT_TRUE(rules.ok());
  Engine engine(*rules);
  FakeSource src;
  src.Add("gpu.temp_c", kGpu0, At(0), 95);
  src.Add("node.heartbeat_age_s", {{"node", "n1"}}, At(0), 300);
  src.Add("job.loss", kJob, At(0), std::nan(""));
  Evaluation e = engine.Evaluate(At(0), src);
  EXPECT_EQ(Kinds(e),
            (V{"firing LossNotFinite", "pending GpuTooHot", "pending NodeHeartbeatLost"}));
  const Alert* loss = Find(e, "LossNotFinite");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->annotations.at("summary"), "loss of job 7 is NaN");
  EXPECT_EQ(loss->labels.at("layer"), "training");
}

}  // namespace
}  // namespace trainyard::monitor
