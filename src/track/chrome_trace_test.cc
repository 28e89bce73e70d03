#include "track/chrome_trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace trainyard::track {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::Pair;

const Timestamp kT0 = Timestamp{} + std::chrono::hours(24 * 365 * 56);

int64_t Us(Duration since_t0) { return (kT0 + since_t0).time_since_epoch().count() * 1000; }

store::JobEvent Event(int64_t seq, Duration at, std::string actor, std::string kind,
                      std::string message) {
  return {seq, 17, kT0 + at, std::move(actor), std::move(kind), std::move(message)};
}

// Job 17: preempted after a notice in attempt 0, running again in attempt 1.
Job PreemptedThenRunning() {
  Job job;
  job.id = 17;
  job.spec.name = "llama";
  job.spec.tenant = "research";
  job.spec.queue = "default";
  job.submitted_by = "user:alice";
  job.submit_time = kT0;
  job.state = JobState::kRunning;
  job.state_time = kT0 + seconds(132);
  Attempt a0;
  a0.index = 0;
  a0.start_time = kT0 + seconds(10);
  a0.end_time = kT0 + seconds(100);
  a0.nodes = {"node-1", "node-2"};
  a0.exit_reason = ExitReason::kPreempted;
  a0.message = "preempted: preempted for job 18";
  a0.lost_work = seconds(20);
  Attempt a1;
  a1.index = 1;
  a1.start_time = kT0 + seconds(130);
  a1.nodes = {"node-3", "node-4"};
  job.attempts = {a0, a1};
  job.checkpoint = CheckpointInfo{"/ckpt/step-200", 200, kT0 + seconds(150), seconds(5)};
  return job;
}

TraceInput Scenario(const Job& job) {
  TraceInput in;
  in.job = &job;
  // Out of order on purpose: sorted by (time, seq) in the trace.
  in.events = {
      Event(6, seconds(100), "server", "Requeued", "preempted; lost work 20s"),
      Event(1, seconds(0), "user:alice", "Submitted", "submitted: 2 replica(s) of 8x H100"),
      Event(2, seconds(10), "scheduler", "Bound", "attempt 0 on node-1, node-2"),
      Event(3, seconds(12), "server", "Running", "all 2 rank(s) running"),
      Event(4, seconds(80), "agent:node-1", "Checkpoint", "checkpoint at step 100"),
      Event(5, seconds(90), "scheduler", "Preempting", "preempted for job 18: higher priority"),
      Event(8, seconds(132), "server", "Running", "all 2 rank(s) running"),
      Event(7, seconds(130), "scheduler", "Bound", "attempt 1 on node-3, node-4"),
      Event(9, seconds(150), "agent:node-3", "Checkpoint", "checkpoint at step 200"),
  };
  in.checkpoints = {
      {0, 100, kT0 + seconds(78), seconds(2), "/ckpt/step-100"},
      {1, 200, kT0 + seconds(145), seconds(5), "/ckpt/step-200"},
  };
  in.steps = {
      {0, 0, 1, kT0 + seconds(20), seconds(1)},
      {0, 1, 1, kT0 + seconds(20), seconds(3)},  // rank 1 straggles
      {1, 0, 101, kT0 + seconds(140), seconds(1)},
      {1, 1, 101, kT0 + seconds(140), seconds(1)},
      {1, 0, 102, kT0 + seconds(141), Duration(-5)},  // clamped to 0
  };
  in.now = kT0 + seconds(200);
  return in;
}

std::vector<const json*> OfPhase(const json& trace, std::string_view ph) {
  std::vector<const json*> out;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(&e);
  }
  return out;
}

using SpanRow = std::tuple<std::string, int64_t, int64_t, int64_t>;  // name, tid, ts, dur
std::vector<SpanRow> Spans(const json& trace) {
  std::vector<SpanRow> out;
  for (const json* e : OfPhase(trace, "X")) {
    out.emplace_back((*e)["name"], (*e)["tid"], (*e)["ts"], (*e)["dur"]);
  }
  return out;
}

const json* FindSpan(const json& trace, std::string_view name) {
  for (const json* e : OfPhase(trace, "X")) {
    if ((*e)["name"] == name) return e;
  }
  return nullptr;
}

// What every trace must satisfy, whatever went in.
void ExpectWellFormed(const json& trace) {
  ASSERT_TRUE(trace.contains("traceEvents"));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  const std::string text = trace.dump();
  EXPECT_EQ(json::parse(text), trace);
  for (const json& e : trace["traceEvents"]) {
    EXPECT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
    EXPECT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e;
    EXPECT_TRUE(e.contains("ts") && e["ts"].is_number_integer()) << e;
    EXPECT_TRUE(e.contains("name") && e["name"].is_string()) << e;
    const std::string ph = e["ph"];
    EXPECT_TRUE(ph == "X" || ph == "i" || ph == "M") << e;
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur")) << e;
      EXPECT_GE(e["dur"].get<int64_t>(), 0) << e;
    }
    if (ph == "i") {
      EXPECT_EQ(e["s"], "t") << e;
    }
  }
}

TEST(JobTraceTest, DrawsAttemptsQueueingGraceCheckpointsAndRanks) {
  const Job job = PreemptedThenRunning();
  const json trace = JobTrace(Scenario(job));
  ExpectWellFormed(trace);
  EXPECT_THAT(
      Spans(trace),
      ElementsAre(SpanRow{"queued", kLifecycleTid, Us(seconds(0)), 10'000'000},
                  SpanRow{"attempt 0", kLifecycleTid, Us(seconds(10)), 90'000'000},
                  SpanRow{"grace period", kLifecycleTid, Us(seconds(90)), 10'000'000},
                  SpanRow{"requeued", kLifecycleTid, Us(seconds(100)), 30'000'000},
                  SpanRow{"attempt 1", kLifecycleTid, Us(seconds(130)), 70'000'000},
                  SpanRow{"checkpoint step 100", kCheckpointsTid, Us(seconds(78)), 2'000'000},
                  SpanRow{"checkpoint step 200", kCheckpointsTid, Us(seconds(145)), 5'000'000},
                  SpanRow{"step 1", kFirstRankTid, Us(seconds(20)), 1'000'000},
                  SpanRow{"step 101", kFirstRankTid, Us(seconds(140)), 1'000'000},
                  SpanRow{"step 102", kFirstRankTid, Us(seconds(141)), 0},
                  SpanRow{"step 1", kFirstRankTid + 1, Us(seconds(20)), 3'000'000},
                  SpanRow{"step 101", kFirstRankTid + 1, Us(seconds(140)), 1'000'000}));
  for (const json* e : OfPhase(trace, "X")) EXPECT_EQ((*e)["pid"], 17);
}

TEST(JobTraceTest, NamesTheProcessAndSortsItsThreads) {
  const Job job = PreemptedThenRunning();
  const json trace = JobTrace(Scenario(job));
  std::vector<std::tuple<std::string, int64_t, json>> meta;
  for (const json* e : OfPhase(trace, "M"))
    meta.emplace_back((*e)["name"], (*e)["tid"], (*e)["args"]);
  using M = std::tuple<std::string, int64_t, json>;
  EXPECT_THAT(meta, ElementsAre(M{"process_name", 0, {{"name", "job 17 llama"}}},
                                M{"thread_name", 1, {{"name", "lifecycle"}}},
                                M{"thread_sort_index", 1, {{"sort_index", 1}}},
                                M{"thread_name", 2, {{"name", "checkpoints"}}},
                                M{"thread_sort_index", 2, {{"sort_index", 2}}},
                                M{"thread_name", 100, {{"name", "rank 0"}}},
                                M{"thread_sort_index", 100, {{"sort_index", 100}}},
                                M{"thread_name", 101, {{"name", "rank 1"}}},
                                M{"thread_sort_index", 101, {{"sort_index", 101}}}));
  for (const json* e : OfPhase(trace, "M")) EXPECT_EQ((*e)["pid"], 17);
}

TEST(JobTraceTest, EveryEventIsAnInstantInTimeOrder) {
  const Job job = PreemptedThenRunning();
  const json trace = JobTrace(Scenario(job));
  std::vector<std::pair<std::string, int64_t>> instants;
  for (const json* e : OfPhase(trace, "i")) {
    EXPECT_EQ((*e)["tid"], kLifecycleTid);
    instants.emplace_back((*e)["name"], (*e)["ts"]);
  }
  EXPECT_THAT(instants,
              ElementsAre(Pair("Submitted", Us(seconds(0))), Pair("Bound", Us(seconds(10))),
                          Pair("Running", Us(seconds(12))), Pair("Checkpoint", Us(seconds(80))),
                          Pair("Preempting", Us(seconds(90))), Pair("Requeued", Us(seconds(100))),
                          Pair("Bound", Us(seconds(130))), Pair("Running", Us(seconds(132))),
                          Pair("Checkpoint", Us(seconds(150)))));
  const json& preempting = *OfPhase(trace, "i")[4];
  EXPECT_EQ(preempting["args"]["message"], "preempted for job 18: higher priority");
  EXPECT_EQ(preempting["args"]["actor"], "scheduler");
  EXPECT_EQ(preempting["args"]["seq"], 5);
}

TEST(JobTraceTest, AttemptArgsCarryNodesExitAndLostWork) {
  const Job job = PreemptedThenRunning();
  const json trace = JobTrace(Scenario(job));
  const json* a0 = FindSpan(trace, "attempt 0");
  ASSERT_NE(a0, nullptr);
  EXPECT_EQ((*a0)["cat"], "attempt");
  EXPECT_EQ((*a0)["args"]["nodes"], json({"node-1", "node-2"}));
  EXPECT_EQ((*a0)["args"]["exit_reason"], "preempted");
  EXPECT_EQ((*a0)["args"]["exit_code"], 0);
  EXPECT_EQ((*a0)["args"]["message"], "preempted: preempted for job 18");
  EXPECT_EQ((*a0)["args"]["lost_work"], "20s");
  EXPECT_EQ((*a0)["args"]["lost_work_ms"], 20'000);
  const json* a1 = FindSpan(trace, "attempt 1");
  ASSERT_NE(a1, nullptr);
  EXPECT_EQ((*a1)["args"]["exit_reason"], "running");
  EXPECT_FALSE((*a1)["args"].contains("exit_code"));
  const json* grace = FindSpan(trace, "grace period");
  ASSERT_NE(grace, nullptr);
  EXPECT_EQ((*grace)["args"]["notice"], "preempted for job 18: higher priority");
  EXPECT_EQ((*grace)["args"]["attempt"], 0);
  const json* requeued = FindSpan(trace, "requeued");
  ASSERT_NE(requeued, nullptr);
  EXPECT_EQ((*requeued)["args"]["after"], "preempted");
  const json* ckpt = FindSpan(trace, "checkpoint step 100");
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ((*ckpt)["args"]["path"], "/ckpt/step-100");
  EXPECT_EQ((*ckpt)["args"]["attempt"], 0);
}

TEST(JobTraceTest, NoGracePeriodWithoutANotice) {
  const Job job = PreemptedThenRunning();
  TraceInput in = Scenario(job);
  std::erase_if(in.events, [](const store::JobEvent& e) { return e.kind == "Preempting"; });
  EXPECT_EQ(FindSpan(JobTrace(in), "grace period"), nullptr);
}

TEST(JobTraceTest, DrawsTheLatestCheckpointWhenNoSpanReportsIt) {
  const Job job = PreemptedThenRunning();
  TraceInput in = Scenario(job);
  in.checkpoints.clear();
  const json trace = JobTrace(in);
  const json* ckpt = FindSpan(trace, "checkpoint step 200");
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ((*ckpt)["ts"], Us(seconds(145)));
  EXPECT_EQ((*ckpt)["dur"], 5'000'000);
  EXPECT_EQ((*ckpt)["args"]["attempt"], 1);
  EXPECT_EQ(FindSpan(trace, "checkpoint step 100"), nullptr);
}

TEST(JobTraceTest, PendingJobIsOneQueuedSpanUntilNow) {
  Job job;
  job.id = 3;
  job.submit_time = kT0;
  job.state_time = kT0;
  job.reason = "waiting for 16 H100";
  TraceInput in{&job, {}, {}, {}, kT0 + seconds(45)};
  const json trace = JobTrace(in);
  ExpectWellFormed(trace);
  EXPECT_THAT(Spans(trace),
              ElementsAre(SpanRow{"queued", kLifecycleTid, Us(seconds(0)), 45'000'000}));
  EXPECT_EQ(FindSpan(trace, "queued")->at("args")["reason"], "waiting for 16 H100");
  EXPECT_EQ(FindSpan(trace, "queued")->at("args")["state"], "Pending");
  // Only the process and the lifecycle thread are named: no empty threads.
  EXPECT_EQ(OfPhase(trace, "M").size(), 3u);
  EXPECT_EQ(OfPhase(trace, "M")[0]->at("args")["name"], "job 3");
}

TEST(JobTraceTest, JobCancelledWhilePendingStopsWaitingWhenCancelled) {
  Job job;
  job.id = 4;
  job.submit_time = kT0;
  job.state = JobState::kCancelled;
  job.state_time = kT0 + seconds(30);
  TraceInput in{&job, {}, {}, {}, kT0 + seconds(600)};
  EXPECT_THAT(Spans(JobTrace(in)),
              ElementsAre(SpanRow{"queued", kLifecycleTid, Us(seconds(0)), 30'000'000}));
}

TEST(JobTraceTest, FailedAttemptWaitingForRetryIsRequeuedUntilNow) {
  Job job;
  job.id = 5;
  job.submit_time = kT0;
  job.state = JobState::kPending;
  job.state_time = kT0 + seconds(20);
  Attempt a;
  a.start_time = kT0 + seconds(5);
  a.end_time = kT0 + seconds(20);
  a.exit_reason = ExitReason::kFailed;
  a.exit_code = 139;
  a.message = "rank 3 on node-7 killed by SIGSEGV";
  job.attempts = {a};
  TraceInput in{&job, {}, {}, {}, kT0 + seconds(50)};
  const json trace = JobTrace(in);
  ExpectWellFormed(trace);
  EXPECT_THAT(Spans(trace),
              ElementsAre(SpanRow{"queued", kLifecycleTid, Us(seconds(0)), 5'000'000},
                          SpanRow{"attempt 0", kLifecycleTid, Us(seconds(5)), 15'000'000},
                          SpanRow{"requeued", kLifecycleTid, Us(seconds(20)), 30'000'000}));
  EXPECT_EQ(FindSpan(trace, "attempt 0")->at("args")["exit_code"], 139);
}

TEST(JobTraceTest, SucceededJobHasNoTrailingWait) {
  Job job;
  job.id = 6;
  job.submit_time = kT0;
  job.state = JobState::kSucceeded;
  job.state_time = kT0 + seconds(20);
  Attempt a;
  a.start_time = kT0 + seconds(5);
  a.end_time = kT0 + seconds(20);
  a.exit_reason = ExitReason::kSucceeded;
  job.attempts = {a};
  TraceInput in{&job, {}, {}, {}, kT0 + seconds(500)};
  EXPECT_THAT(Spans(JobTrace(in)),
              ElementsAre(SpanRow{"queued", kLifecycleTid, Us(seconds(0)), 5'000'000},
                          SpanRow{"attempt 0", kLifecycleTid, Us(seconds(5)), 15'000'000}));
}

TEST(JobTraceTest, BackwardsTimesAndBadTextStillGiveAWellFormedTrace) {
  Job job;
  job.id = 8;
  job.spec.name = "bad\xff name";
  job.submit_time = kT0 + seconds(100);  // after everything else
  job.state = JobState::kRunning;
  Attempt a;
  a.start_time = kT0 + seconds(50);
  a.end_time = kT0 + seconds(40);  // ends before it starts
  a.exit_reason = ExitReason::kNodeLost;
  a.message = "node-\xc3 lost";
  a.lost_work = Duration(-7);
  Attempt b;
  b.index = 1;
  b.start_time = kT0 + seconds(60);  // open, and `now` is before it
  job.attempts = {a, b};
  TraceInput in;
  in.job = &job;
  in.events = {Event(2, seconds(5), "server", "", "\xe2\x28\xa1"),
               Event(1, seconds(70), "scheduler", "Preempting", "notice")};
  in.steps = {{0, -1, 1, kT0, seconds(1)}, {0, 2, 1, kT0, Duration(-1000)}};
  in.checkpoints = {{0, 1, kT0, Duration(-1), "/x"}};
  in.now = kT0;
  const json trace = JobTrace(in);
  ExpectWellFormed(trace);
  EXPECT_EQ(FindSpan(trace, "attempt 0")->at("dur"), 0);
  EXPECT_EQ(FindSpan(trace, "attempt 0")->at("args")["lost_work_ms"], 0);
  EXPECT_EQ(FindSpan(trace, "attempt 1")->at("dur"), 0);
  EXPECT_EQ(FindSpan(trace, "queued")->at("dur"), 0);
  EXPECT_EQ(OfPhase(trace, "M")[0]->at("args")["name"], "job 8 bad\xef\xbf\xbd name");
  // Rank -1 is left out; rank 2 has its thread.
  std::set<int64_t> tids;
  for (const json* e : OfPhase(trace, "X")) tids.insert((*e)["tid"].get<int64_t>());
  EXPECT_EQ(tids, (std::set<int64_t>{kLifecycleTid, kCheckpointsTid, kFirstRankTid + 2}));
  // An event without a kind is still drawn, under a name.
  EXPECT_EQ(OfPhase(trace, "i")[0]->at("name"), "event");
}

// --- OTLP --------------------------------------------------------------------------------

bool IsLowerHex(const json& v, size_t digits) {
  if (!v.is_string()) return false;
  const std::string s = v;
  if (s.size() != digits || s == std::string(digits, '0')) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  }
  return true;
}

bool IsDecimal(const json& v) {
  if (!v.is_string() || v.get<std::string>().empty()) return false;
  for (char c : v.get<std::string>()) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

const json& OtlpSpans(const json& otlp) {
  return otlp["resourceSpans"][0]["scopeSpans"][0]["spans"];
}

json AttributeValue(const json& attributes, std::string_view key) {
  for (const json& a : attributes) {
    if (a["key"] == key) return a["value"];
  }
  return nullptr;
}

TEST(JobTraceOtlpTest, IdsAreWellFormedDeterministicAndParentedToTheJob) {
  const Job job = PreemptedThenRunning();
  const json otlp = JobTraceOtlp(Scenario(job), "trainyard");
  EXPECT_EQ(json::parse(otlp.dump()), otlp);
  EXPECT_EQ(otlp, JobTraceOtlp(Scenario(job), "trainyard"));

  EXPECT_EQ(AttributeValue(otlp["resourceSpans"][0]["resource"]["attributes"], "service.name"),
            json({{"stringValue", "trainyard"}}));
  const json& spans = OtlpSpans(otlp);
  // The root plus one child per span of the Chrome trace.
  ASSERT_EQ(spans.size(), 1 + Spans(JobTrace(Scenario(job))).size());
  const json& root = spans[0];
  EXPECT_EQ(root["name"], "job 17 llama");
  EXPECT_FALSE(root.contains("parentSpanId"));
  const json trace_id = root["traceId"];
  EXPECT_TRUE(IsLowerHex(trace_id, 32)) << trace_id;
  std::set<std::string> span_ids;
  for (const json& s : spans) {
    EXPECT_EQ(s["traceId"], trace_id);
    EXPECT_TRUE(IsLowerHex(s["spanId"], 16)) << s;
    span_ids.insert(s["spanId"]);
    EXPECT_EQ(s["kind"], 1);
    EXPECT_TRUE(IsDecimal(s["startTimeUnixNano"])) << s;
    EXPECT_TRUE(IsDecimal(s["endTimeUnixNano"])) << s;
    EXPECT_LE(std::stoll(s["startTimeUnixNano"].get<std::string>()),
              std::stoll(s["endTimeUnixNano"].get<std::string>()));
    if (&s != &root) {
      EXPECT_EQ(s["parentSpanId"], root["spanId"]) << s;
    }
  }
  EXPECT_EQ(span_ids.size(), spans.size());

  // Another job: another trace id; the same job with other input keeps its ids.
  Job other = job;
  other.id = 18;
  TraceInput other_in = Scenario(other);
  EXPECT_NE(OtlpSpans(JobTraceOtlp(other_in, "trainyard"))[0]["traceId"], trace_id);
  TraceInput fewer = Scenario(job);
  fewer.steps.clear();
  const json fewer_otlp = JobTraceOtlp(fewer, "trainyard");
  const json& fewer_spans = OtlpSpans(fewer_otlp);
  EXPECT_EQ(fewer_spans[0]["traceId"], trace_id);
  EXPECT_EQ(fewer_spans[0]["spanId"], root["spanId"]);
}

TEST(JobTraceOtlpTest, TimesAttributesAndEvents) {
  const Job job = PreemptedThenRunning();
  const json otlp = JobTraceOtlp(Scenario(job), "trainyard");
  const json& spans = OtlpSpans(otlp);
  const json& root = spans[0];
  EXPECT_EQ(root["startTimeUnixNano"], std::to_string(Us(seconds(0)) * 1000));
  EXPECT_EQ(root["endTimeUnixNano"], std::to_string(Us(seconds(200)) * 1000));
  EXPECT_EQ(AttributeValue(root["attributes"], "trainyard.job.id"), json({{"intValue", "17"}}));
  ASSERT_EQ(root["events"].size(), 9u);
  EXPECT_EQ(root["events"][4]["name"], "Preempting");
  EXPECT_EQ(root["events"][4]["timeUnixNano"], std::to_string(Us(seconds(90)) * 1000));
  EXPECT_EQ(AttributeValue(root["events"][4]["attributes"], "trainyard.actor"),
            json({{"stringValue", "scheduler"}}));

  const json* attempt0 = nullptr;
  const json* straggler = nullptr;
  for (const json& s : spans) {
    if (s["name"] == "attempt 0") attempt0 = &s;
    if (s["name"] == "step 1" &&
        AttributeValue(s["attributes"], "trainyard.track") == json({{"stringValue", "rank 1"}})) {
      straggler = &s;
    }
  }
  ASSERT_NE(attempt0, nullptr);
  EXPECT_EQ((*attempt0)["startTimeUnixNano"], std::to_string(Us(seconds(10)) * 1000));
  EXPECT_EQ((*attempt0)["endTimeUnixNano"], std::to_string(Us(seconds(100)) * 1000));
  EXPECT_EQ(AttributeValue((*attempt0)["attributes"], "trainyard.exit_reason"),
            json({{"stringValue", "preempted"}}));
  EXPECT_EQ(AttributeValue((*attempt0)["attributes"], "trainyard.lost_work_ms"),
            json({{"intValue", "20000"}}));
  EXPECT_EQ(AttributeValue((*attempt0)["attributes"], "trainyard.nodes"),
            json::parse(R"({"arrayValue":{"values":[{"stringValue":"node-1"},
                                                     {"stringValue":"node-2"}]}})"));
  EXPECT_FALSE(attempt0->contains("status"));  // preempted is not an error
  ASSERT_NE(straggler, nullptr);
  EXPECT_EQ((*straggler)["endTimeUnixNano"], std::to_string(Us(seconds(23)) * 1000));
}

TEST(JobTraceOtlpTest, FailedAttemptsAndJobsHaveErrorStatus) {
  Job job;
  job.id = 9;
  job.submit_time = kT0;
  job.state = JobState::kFailed;
  job.state_time = kT0 + seconds(20);
  job.reason = "rank 3 on node-7 killed by SIGSEGV";
  Attempt a;
  a.start_time = kT0 + seconds(5);
  a.end_time = kT0 + seconds(20);
  a.exit_reason = ExitReason::kFailed;
  a.message = "rank 3 on node-7 killed by SIGSEGV";
  job.attempts = {a};
  const json otlp = JobTraceOtlp({&job, {}, {}, {}, kT0 + seconds(30)}, "ty");
  const json& spans = OtlpSpans(otlp);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0]["status"], json({{"code", 2}, {"message", job.reason}}));
  EXPECT_FALSE(spans[1].contains("status"));  // queued
  EXPECT_EQ(spans[2]["status"], json({{"code", 2}, {"message", a.message}}));
}

TEST(JobTraceOtlpTest, RepeatedStepsStillGetDistinctSpanIds) {
  Job job;
  job.id = 10;
  job.submit_time = kT0;
  TraceInput in{&job, {}, {}, {}, kT0};
  in.steps = {{0, 0, 7, kT0, seconds(1)}, {0, 0, 7, kT0, seconds(1)}, {0, 0, 7, kT0, seconds(1)}};
  const json otlp = JobTraceOtlp(in, "ty");
  const json& spans = OtlpSpans(otlp);
  std::set<std::string> ids;
  for (const json& s : spans) ids.insert(s["spanId"]);
  EXPECT_EQ(ids.size(), spans.size());
  EXPECT_EQ(spans.size(), 5u);  // root, queued, three steps
}

}  // namespace
}  // namespace trainyard::track
