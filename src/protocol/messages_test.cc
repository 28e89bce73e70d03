#include "protocol/messages.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>

namespace trainyard::protocol {
namespace {

using nlohmann::json;

// Encodes, writes the text as it goes on the wire, parses it back.
template <typename T, typename Parse>
void ExpectRoundTrip(const T& value, Parse parse) {
  const std::string text = ToJson(value).dump();
  auto back = parse(json::parse(text));
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_TRUE(*back == value) << text << "\nparsed back as\n" << ToJson(*back).dump();
}

template <typename Parse>
std::string Error(Parse parse, const std::string& text) {
  auto r = parse(json::parse(text));
  return r.ok() ? "ok" : r.status().message();
}

TaskStatus Task(std::string id, JobId job, int32_t attempt, int32_t rank, TaskState state) {
  TaskStatus t;
  t.task_id = std::move(id);
  t.job_id = job;
  t.attempt = attempt;
  t.rank = rank;
  t.state = state;
  return t;
}

TaskStatus Exited() {
  TaskStatus t = Task("17.2.1", 17, 2, 1, TaskState::kExited);
  t.pid = 12345;
  t.started_ms = 1764410000000;
  t.finished_ms = 1764410060000;
  t.exit_code = -1;
  t.signal = 15;
  t.message = "stopped by its agent: no contact";
  t.fenced = true;
  t.image_digest = "sha256:" + std::string(64, 'b');
  return t;
}

Node TwoGpuNode() {
  Node n;
  n.name = "node-1";
  n.labels = {{"zone", "a"}, {"rack", "r7"}};
  for (int i = 0; i < 2; ++i) {
    Gpu g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.model = "H100";
    g.memory_bytes = 81920 * kMiB;
    g.nvlink_domain = "node-1";
    n.gpus.push_back(g);
  }
  n.milli_cpus = 64'000;
  n.memory_bytes = 524288 * kMiB;
  n.topology.leaf = "leaf-0";
  return n;
}

// --- task ids ---------------------------------------------------------------------------

TEST(TaskIdTest, FormatsAndParses) {
  EXPECT_EQ(TaskId(17, 2, 1), "17.2.1");
  auto parts = ParseTaskId("17.2.1", "task_id");
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(*parts, (TaskIdParts{17, 2, 1}));
  EXPECT_EQ(*ParseTaskId("9223372036854775807.1000000.100000000", "t"),
            (TaskIdParts{std::numeric_limits<int64_t>::max(), 1'000'000, 100'000'000}));
  for (const TaskIdParts& p : {TaskIdParts{1, 0, 0}, TaskIdParts{40, 7, 1023}}) {
    EXPECT_EQ(*ParseTaskId(TaskId(p.job_id, p.attempt, p.rank), "t"), p);
  }
}

TEST(TaskIdTest, BadIdsNameTheFieldAndThePart) {
  auto error = [](std::string_view text) {
    auto r = ParseTaskId(text, "logs.task_id");
    return r.ok() ? "ok" : r.status().message();
  };
  EXPECT_EQ(error("x"), "logs.task_id: expected <job>.<attempt>.<rank>, got \"x\"");
  EXPECT_EQ(error("17.2"), "logs.task_id: expected <job>.<attempt>.<rank>, got \"17.2\"");
  EXPECT_EQ(error(""), "logs.task_id: expected <job>.<attempt>.<rank>, got \"\"");
  EXPECT_EQ(error("17.2.1.0"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"17.2.1.0\" (the rank is not a "
            "decimal number)");
  EXPECT_EQ(error("0.0.0"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"0.0.0\" (the job must be "
            "1..9223372036854775807)");
  EXPECT_EQ(error("5.-1.0"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"5.-1.0\" (the attempt is not a "
            "decimal number)");
  EXPECT_EQ(error("5.1000001.0"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"5.1000001.0\" (the attempt "
            "must be 0..1000000)");
  EXPECT_EQ(error("5.0.100000001"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"5.0.100000001\" (the rank must "
            "be 0..100000000)");
  // One spelling per task: the one TaskId writes.
  EXPECT_EQ(error("017.2.1"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"017.2.1\" (the job is not a "
            "decimal number)");
  EXPECT_EQ(error("+17.2.1"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"+17.2.1\" (the job is not a "
            "decimal number)");
  EXPECT_EQ(error("17. 2.1"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"17. 2.1\" (the attempt is not "
            "a decimal number)");
  EXPECT_EQ(error("99999999999999999999.0.0"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"99999999999999999999.0.0\" "
            "(the job is not a decimal number)");
}

TEST(TaskStateTest, NamesRoundTrip) {
  for (TaskState s : {TaskState::kStarting, TaskState::kRunning, TaskState::kExited}) {
    EXPECT_EQ(ParseTaskState(TaskStateName(s)), s);
    EXPECT_EQ(json(s), json(TaskStateName(s))) << "a state is its name in JSON";
  }
  EXPECT_EQ(ParseTaskState("Running"), std::nullopt);
}

// --- round trips --------------------------------------------------------------------------

TEST(RoundTripTest, Registration) {
  Registration bare;  // what a node with no GPUs and nothing running sends
  bare.node.name = "cpu-0";
  bare.node.milli_cpus = 1000;
  bare.node.memory_bytes = 1024 * kMiB;
  bare.address = "127.0.0.1";
  ExpectRoundTrip(bare, ParseRegistration);

  Registration full;
  full.node = TwoGpuNode();
  full.node.topology.spine = "spine-1";
  full.address = "10.0.0.7";
  full.simulated = true;
  full.tasks = {Task("17.2.1", 17, 2, 1, TaskState::kRunning), Exited()};
  full.health_check =
      HealthCheckResult{false, "GPU 3: row remapping pending", 1790000000000, "join"};
  ExpectRoundTrip(full, ParseRegistration);

  Registration fractional = bare;  // cpus that are not whole
  fractional.node.milli_cpus = 1500;
  ExpectRoundTrip(fractional, ParseRegistration);
  fractional.node.milli_cpus = 1001;
  ExpectRoundTrip(fractional, ParseRegistration);
}

TEST(RoundTripTest, RegistrationDefaultsTheAddressAndNormalizesTheGpuType) {
  auto r = ParseRegistration(json::parse(R"({"node": {"name": "n", "gpu_type": " h100 ",
      "gpus": [{"index": 0}], "nvlink_domain": "d"}})"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->address, "127.0.0.1");
  EXPECT_EQ(r->node.gpus[0].model, "H100");
  EXPECT_EQ(r->node.gpus[0].nvlink_domain, "d");
  EXPECT_TRUE(r->tasks.empty());
  EXPECT_FALSE(r->health_check.has_value());
}

TEST(RoundTripTest, RegisterReply) {
  ExpectRoundTrip(RegisterReply{}, ParseRegisterReply);
  ExpectRoundTrip(RegisterReply{Duration(1000), Duration(135'000), {"17.2.1", "18.0.0"}},
                  ParseRegisterReply);
  // An older server says nothing of release_after: the agent never fences.
  auto old = ParseRegisterReply(json::parse(R"({"heartbeat_interval_ms": 500, "stop": []})"));
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->heartbeat_interval, Duration(500));
  EXPECT_EQ(old->release_after, Duration(0));
}

TEST(RoundTripTest, Heartbeat) {
  Heartbeat bare;
  bare.node = "node-1";
  ExpectRoundTrip(bare, ParseHeartbeat);

  Heartbeat full;
  full.node = "node-1";
  full.seq = 42;
  full.health_ok = false;
  full.health_message = "NVML: driver not loaded";
  full.tasks = {Task("17.2.1", 17, 2, 1, TaskState::kStarting), Exited()};
  GpuTelemetry all;
  all.index = 0;
  all.util_pct = 97.5;
  all.mem_used_mib = 60000;
  all.temp_c = 71.0;
  all.power_w = 612.25;
  all.sm_clock_mhz = 1980;
  all.throttled = true;
  all.ecc_uncorrectable = 2;
  all.xid_last = 79;
  all.xid_count = 3;
  GpuTelemetry none;  // a GPU the agent could read nothing of
  none.index = 7;
  GpuTelemetry fractional;  // counters the JSON may carry as any number
  fractional.index = 1023;
  fractional.mem_used_mib = 0.5;
  fractional.xid_count = 1e300;
  fractional.ecc_uncorrectable = -0.0;
  full.gpus = {all, none, fractional};
  full.links = {
      {"ib0", "ib", true, 0}, {"gpu0/nvlink3", "nvlink", false, 12}, {"x", "", true, 0.5}};
  full.disks = {{"/var/lib/trainyard", 912680550400, 1968874332160}, {"/ckpt", 0, 0}};
  full.health_check = HealthCheckResult{true, "", 1790000000000, "periodic"};
  full.faults = {"f-3", "f-4"};
  ExpectRoundTrip(full, ParseHeartbeat);
}

TEST(RoundTripTest, HeartbeatReplyAndPoll) {
  ExpectRoundTrip(HeartbeatReply{}, ParseHeartbeatReply);
  ExpectRoundTrip(HeartbeatReply{{"17.2.1", "3.0.4"}}, ParseHeartbeatReply);
  ExpectRoundTrip(PollRequest{"node-1", Duration(0)}, ParsePollRequest);
  ExpectRoundTrip(PollRequest{"node-1", Duration(20'000)}, ParsePollRequest);
  auto defaulted = ParsePollRequest(json::parse(R"({"node": "n"})"));
  ASSERT_TRUE(defaulted.ok());
  EXPECT_EQ(defaulted->wait, Duration(20'000));
}

Command Start(bool optional_fields) {
  Command c;
  c.kind = Command::Kind::kStart;
  TaskStart& t = c.start;
  t.task_id = "17.2.1";
  t.job_id = 17;
  t.attempt = 2;
  t.rank = 1;
  t.argv = {"/usr/bin/python3", "train.py", "--lr", "3e-4"};
  if (optional_fields) {
    t.env = {{"MASTER_ADDR", "10.0.0.1"}, {"HF_TOKEN", "secret"}, {"EMPTY", ""}};
    t.secret_env = {"HF_TOKEN"};
    t.workdir = "/work/project";
    t.gpus = {0, 1, 6};
    t.image = "team/trainer@sha256:" + std::string(64, 'a');
    t.mounts = {{"/datasets", "/data", true}, {"scratch", "/scratch", false}};
    t.shm_bytes = int64_t{8} << 30;
  }
  return c;
}

Command OnTask(Command::Kind kind) {
  Command c;
  c.kind = kind;
  c.task_id = "17.2.1";
  return c;
}

TEST(RoundTripTest, EveryCommandKind) {
  ExpectRoundTrip(Start(false), ParseCommand);
  ExpectRoundTrip(Start(true), ParseCommand);

  Command preempt = OnTask(Command::Kind::kPreempt);
  preempt.signal = 10;
  ExpectRoundTrip(preempt, ParseCommand);
  preempt.signal = 64;
  preempt.grace = Duration(60'000);
  ExpectRoundTrip(preempt, ParseCommand);

  Command stop = OnTask(Command::Kind::kStop);
  ExpectRoundTrip(stop, ParseCommand);
  stop.grace = Duration(10'000);
  ExpectRoundTrip(stop, ParseCommand);

  Command profile = OnTask(Command::Kind::kProfile);
  profile.profile_id = "p-17-3";
  profile.steps = 1;
  ExpectRoundTrip(profile, ParseCommand);
  profile.profile_id = std::string(64, 'a');
  profile.steps = 10'000;
  ExpectRoundTrip(profile, ParseCommand);

  Command faults;
  faults.kind = Command::Kind::kFaults;
  ExpectRoundTrip(faults, ParseCommand);  // the empty set clears every fault
  for (const auto& [kind, name] : kFaultKindNames) {
    FaultSpec f{"f-" + std::string(name), kind, 1, 0, 0};
    if (kind == FaultKind::kCommSlow) f = {"f-3/job-17", kind, -1, 1790000600000, 17};
    faults.faults.push_back(f);
  }
  faults.faults.push_back({"f-node", FaultKind::kHang, -1, 0, 0});
  faults.faults.push_back({"f-last-gpu", FaultKind::kSlow, 63, 1, 0});
  ExpectRoundTrip(faults, ParseCommand);

  ExpectRoundTrip(OnTask(Command::Kind::kCheckpoint), ParseCommand);

  Command stage;
  stage.kind = Command::Kind::kStage;
  const std::string v = "sha256:" + std::string(64, 'a');
  stage.stage = {{"imagenet", v, "/shared/imagenet", "/data/imagenet", true},
                 {"coco", v, "/shared/coco", "", true}};
  ExpectRoundTrip(stage, ParseCommand);
  Command with_data = Start(true);
  with_data.start.data = stage.stage;
  with_data.start.data[1].stage_local = false;
  ExpectRoundTrip(with_data, ParseCommand);

  PollReply reply;
  ExpectRoundTrip(reply, [](const json& j) { return ParsePollReply(j); });
  reply.commands = {Start(true), preempt, stop,
                    profile,     faults,  OnTask(Command::Kind::kCheckpoint)};
  ExpectRoundTrip(reply, [](const json& j) { return ParsePollReply(j); });
}

TEST(RoundTripTest, FaultsCarryTheWholeSetWithDefaults) {
  auto c = ParseCommand(json::parse(R"({"kind": "faults", "faults": [
      {"id": "f-3", "kind": "slow", "gpu": 1, "until_ms": 0, "job_id": 0},
      {"id": "f-4", "kind": "comm-slow", "gpu": -1, "until_ms": 1790000000000, "job_id": 17},
      {"id": "f-5", "kind": "link-down"}]})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->kind, Command::Kind::kFaults);
  ASSERT_EQ(c->faults.size(), 3u);
  EXPECT_EQ(c->faults[0], (FaultSpec{"f-3", FaultKind::kSlow, 1, 0, 0}));
  EXPECT_EQ(c->faults[1], (FaultSpec{"f-4", FaultKind::kCommSlow, -1, 1790000000000, 17}));
  EXPECT_EQ(c->faults[2], (FaultSpec{"f-5", FaultKind::kLinkDown, -1, 0, 0}));
  EXPECT_TRUE(c->faults[2].node_wide());
}

TEST(RoundTripTest, PreemptWithoutASignalSendsTheDefaultNotice) {
  auto c = ParseCommand(json::parse(R"({"kind": "preempt", "task_id": "1.0.0"})"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->signal, kDefaultNoticeSignal);
  EXPECT_EQ(c->grace, Duration(0));
  c = ParseCommand(json::parse(R"({"kind": "preempt", "task_id": "1.0.0", "signal": 0})"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->signal, kDefaultNoticeSignal);
}

TEST(RoundTripTest, Uploads) {
  ExpectRoundTrip(LogUpload{"node-1", "17.2.1", 0, ""}, ParseLogUpload);
  ExpectRoundTrip(LogUpload{"node-1", "17.2.1", 8192, std::string("out\0\xff\n", 6)},
                  ParseLogUpload);
  ExpectRoundTrip(LogUpload{"node-1", "17.2.1", 0, std::string(kMaxUploadBytes, 'x')},
                  ParseLogUpload);

  MetricsUpload m{"node-1", "17.2.1", 4096, std::nullopt, {}};
  ExpectRoundTrip(m, ParseMetricsUpload);
  m.end_offset = 5120;
  m.lines = {json::parse(R"({"step": 1, "loss": 2.5, "tags": {"a": [1, null]}})"),
             json::parse(R"({"kind": "checkpoint", "step": 100, "path": "/c/100"})"), json(7)};
  ExpectRoundTrip(m, ParseMetricsUpload);

  ProfileUpload recording;
  recording.kind = ProfileUpload::Kind::kRecording;
  recording.node = "node-1";
  recording.task_id = "17.2.1";
  recording.id = "p-17-3";
  ExpectRoundTrip(recording, ParseProfileUpload);
  ProfileUpload failed = recording;
  failed.kind = ProfileUpload::Kind::kFailed;
  ExpectRoundTrip(failed, ParseProfileUpload);
  failed.message = "the agent cannot read the trace /x: it is empty";
  ExpectRoundTrip(failed, ParseProfileUpload);
  ProfileUpload chunk = recording;
  chunk.kind = ProfileUpload::Kind::kChunk;
  chunk.offset = 1048576;
  chunk.total_bytes = 3145728;
  chunk.data = R"({"traceEvents": [)";
  ExpectRoundTrip(chunk, ParseProfileUpload);

  ExpectRoundTrip(UploadReply{}, ParseUploadReply);
  ExpectRoundTrip(UploadReply{9000}, ParseUploadReply);
  ExpectRoundTrip(ProfileUploadReply{2097152, "recording", ""}, ParseProfileUploadReply);
  ExpectRoundTrip(ProfileUploadReply{0, "failed", "the trace of rank 0 is 70.2 MiB"},
                  ParseProfileUploadReply);
}

// Any GPU sample and task status the agent may report comes back as it was.
RC_GTEST_PROP(RoundTripProperty, HeartbeatsOfAnyNumbers, ()) {
  auto number = [] {
    return *rc::gen::oneOf(
        rc::gen::map(rc::gen::arbitrary<int64_t>(), [](int64_t v) { return double(v); }),
        rc::gen::map(rc::gen::arbitrary<int32_t>(), [](int32_t v) { return v / 7.0; }),
        rc::gen::element(0.0, -0.0, 1e-300, 9.2e18, 9.3e18, 1.7e308));
  };
  auto maybe = [&]() -> std::optional<double> {
    if (*rc::gen::arbitrary<bool>()) return std::nullopt;
    return number();
  };
  Heartbeat h;
  h.node = "n";
  h.seq = *rc::gen::arbitrary<int64_t>();
  const int gpus = *rc::gen::inRange(0, 9);
  for (int i = 0; i < gpus; ++i) {
    GpuTelemetry g;
    g.index = i;
    g.util_pct = maybe();
    g.mem_used_mib = maybe();
    g.temp_c = maybe();
    g.power_w = maybe();
    g.sm_clock_mhz = maybe();
    g.ecc_uncorrectable = maybe();
    g.xid_last = maybe();
    g.xid_count = maybe();
    h.gpus.push_back(g);
  }
  h.links.push_back({"ib0", "ib", *rc::gen::arbitrary<bool>(), number()});
  h.disks.push_back({"/d", std::abs(number()), std::abs(number())});
  TaskStatus t = Task(TaskId(*rc::gen::inRange<int64_t>(1, 1'000'000'000), 3, 4), 0, 3, 4,
                      TaskState::kRunning);
  t.job_id = ParseTaskId(t.task_id, "t")->job_id;
  t.pid = *rc::gen::arbitrary<int64_t>();
  t.started_ms = *rc::gen::arbitrary<int64_t>();
  t.exit_code = *rc::gen::arbitrary<int32_t>();
  t.message = *rc::gen::arbitrary<std::string>();
  h.tasks.push_back(t);
  const std::string text = ToJson(h).dump(-1, ' ', false, json::error_handler_t::replace);
  auto back = ParseHeartbeat(json::parse(text));
  RC_ASSERT(back.ok());
  // A message of arbitrary bytes is not always UTF-8: the wire carries it repaired.
  back->tasks[0].message = t.message;
  RC_ASSERT(*back == h);
}

// --- bad input: errors name the field and the value ---------------------------------------

TEST(BadInputTest, RegistrationFields) {
  auto error = [](const std::string& text) { return Error(ParseRegistration, text); };
  EXPECT_EQ(error("[]"), "register: expected an object, got array []");
  EXPECT_EQ(error("{}"), "register.node: missing");
  EXPECT_EQ(error(R"({"node": {"cpus": 1}})"), "register.node.name: missing");
  EXPECT_EQ(error(R"({"node": {"name": 7}})"),
            "register.node.name: expected a string, got number 7");
  EXPECT_EQ(error(R"({"node": {"name": "n", "cpus": "64"}})"),
            "register.node.cpus: expected a number, got string \"64\"");
  EXPECT_EQ(error(R"({"node": {"name": "n", "cpus": -1}})"),
            "register.node.cpus: expected a number 0..1000000, got number -1");
  EXPECT_EQ(error(R"({"node": {"name": "n", "memory_mib": 1.5}})"),
            "register.node.memory_mib: expected an integer 0..1099511627776, got number 1.5");
  EXPECT_EQ(error(R"({"node": {"name": "n", "labels": {"zone": 1}}})"),
            "register.node.labels.zone: expected a string, got number 1");
  EXPECT_EQ(error(R"({"node": {"name": "n", "gpus": [{"uuid": "GPU-0"}]}})"),
            "register.node.gpus[0].index: missing");
  EXPECT_EQ(error(R"({"node": {"name": "n", "gpus": {"index": 0}}})"),
            "register.node.gpus: expected a list of at most 64 objects, got object {\"index\":0}");
  EXPECT_EQ(error(R"({"node": {"name": "n", "simulated": "yes"}})"),
            "register.node.simulated: expected true or false, got string \"yes\"");
  EXPECT_EQ(error(R"({"node": {"name": "n"}, "tasks": {}})"),
            "register.tasks: expected a list of at most 100000 objects, got object {}");
  EXPECT_EQ(error(R"({"node": {"name": "n"}, "health_check": {"output": ""}})"),
            "register.health_check.ok: missing");
  EXPECT_EQ(error(R"({"node": {"name": "n"}, "health_check": {"ok": 1}})"),
            "register.health_check.ok: expected true or false, got number 1");
}

TEST(BadInputTest, TaskStatusFields) {
  auto error = [](const std::string& task) {
    return Error(ParseHeartbeat, R"({"node": "n", "tasks": [)" + task + "]}");
  };
  EXPECT_EQ(error(R"({"task_id": "7.0.0", "job_id": 7, "attempt": 0, "rank": 0, "state": "gone"})"),
            "heartbeat.tasks[0].state: expected starting, running or exited, got \"gone\"");
  EXPECT_EQ(error(R"({"task_id": "7.0.0", "state": "running"})"),
            "heartbeat.tasks[0].job_id: missing");
  EXPECT_EQ(error(R"({"job_id": 7, "attempt": 0, "rank": 0, "state": "running"})"),
            "heartbeat.tasks[0].task_id: missing");
  EXPECT_EQ(error(R"({"task_id": "7.0.0", "job_id": "7", "attempt": 0, "rank": 0})"),
            "heartbeat.tasks[0].job_id: expected an integer >= 1, got string \"7\"");
  EXPECT_EQ(error(R"({"task_id": "7.0.0", "job_id": 7, "attempt": 0, "rank": 0})"),
            "heartbeat.tasks[0].state: missing");
  EXPECT_EQ(error(R"({"task_id": "seven", "job_id": 7, "attempt": 0, "rank": 0,
                      "state": "running"})"),
            "heartbeat.tasks[0].task_id: expected <job>.<attempt>.<rank>, got \"seven\"");
  EXPECT_EQ(error(R"({"task_id": "7.0.1", "job_id": 7, "attempt": 0, "rank": 0,
                      "state": "running"})"),
            "heartbeat.tasks[0].task_id: \"7.0.1\" is not the task of job 7, attempt 0, rank 0 "
            "(7.0.0)");
  EXPECT_EQ(error(R"({"task_id": "7.0.0", "job_id": 7, "attempt": 0, "rank": 0,
                      "state": "exited", "exit_code": 4294967296})"),
            "heartbeat.tasks[0].exit_code: expected an integer -2147483648..2147483647, got "
            "number 4294967296");
  EXPECT_EQ(error(R"({"task_id": "7.0.0", "job_id": 7, "attempt": 0, "rank": 0,
                      "state": "exited", "pid": 18446744073709551615})"),
            "heartbeat.tasks[0].pid: expected an integer, got number 18446744073709551615");
  EXPECT_EQ(error(R"({"task_id": "7.0.0", "job_id": 7, "attempt": 0, "rank": 0,
                      "state": "exited", "fenced": "no"})"),
            "heartbeat.tasks[0].fenced: expected true or false, got string \"no\"");
}

TEST(BadInputTest, HeartbeatFields) {
  auto error = [](const std::string& text) { return Error(ParseHeartbeat, text); };
  EXPECT_EQ(error(R"({"seq": 1})"), "heartbeat.node: missing");
  EXPECT_EQ(error(R"({"node": "n", "seq": "1"})"),
            "heartbeat.seq: expected an integer, got string \"1\"");
  EXPECT_EQ(error(R"({"node": "n", "health": true})"),
            "heartbeat.health: expected an object, got boolean true");
  EXPECT_EQ(error(R"({"node": "n", "gpus": [{"index": 0, "temp_c": "hot"}]})"),
            "heartbeat.gpus[0].temp_c: expected a number, got string \"hot\"");
  EXPECT_EQ(error(R"({"node": "n", "gpus": [{"index": 0, "throttled": 1}]})"),
            "heartbeat.gpus[0].throttled: expected true or false, got number 1");
  EXPECT_EQ(error(R"({"node": "n", "gpus": [{"util_pct": 1}]})"),
            "heartbeat.gpus[0].index: missing");
  EXPECT_EQ(error(R"({"node": "n", "gpus": [{"index": 1024}]})"),
            "heartbeat.gpus[0].index: expected an integer 0..1023, got number 1024");
  EXPECT_EQ(error(R"({"node": "n", "gpus": [{"index": 3}, {"index": 3}]})"),
            "heartbeat.gpus[1].index: GPU 3 sampled twice");
  EXPECT_EQ(error(R"({"node": "n", "gpus": [7]})"),
            "heartbeat.gpus[0]: expected an object, got number 7");
  EXPECT_EQ(error(R"({"node": "n", "links": [{"kind": "ib"}]})"),
            "heartbeat.links[0].name: missing");
  EXPECT_EQ(error(R"({"node": "n", "links": [{"name": "ib0", "errors": "3"}]})"),
            "heartbeat.links[0].errors: expected a number, got string \"3\"");
  EXPECT_EQ(error(R"({"node": "n", "disks": [{"path": "/d", "free_bytes": -1}]})"),
            "heartbeat.disks[0].free_bytes: expected a size >= 0, got number -1");
  EXPECT_EQ(error(R"({"node": "n", "faults": ["f-1", 2]})"),
            "heartbeat.faults[1]: expected a string, got number 2");
  EXPECT_EQ(error(R"({"node": "n", "faults": "f-1"})"),
            "heartbeat.faults: expected a list of at most 1024 strings, got string \"f-1\"");
  EXPECT_EQ(error(R"({"node": "n", "datasets": [{"dataset": "d", "version": "v1",
                       "state": "ready"}]})"),
            "heartbeat.datasets[0].version: expected sha256:<64 lowercase hex>, got string \"v1\"");
  const std::string v = "sha256:" + std::string(64, 'a');
  EXPECT_EQ(error(R"({"node": "n", "datasets": [{"dataset": "d", "version": ")" + v +
                  R"(", "state": "lost"}]})"),
            "heartbeat.datasets[0].state: expected staging, ready or failed, got string \"lost\"");
}

TEST(RoundTripTest, HeartbeatWithTheDatasetCache) {
  Heartbeat hb;
  hb.node = "n";
  const std::string v = "sha256:" + std::string(64, 'b');
  hb.datasets = {{"imagenet", v, DatasetState::kStaging, 100, 1000, 5e8, "", 0},
                 {"coco", v, DatasetState::kReady, 1000, 1000, 0, "", 2},
                 {"big", v, DatasetState::kFailed, 0, 1000, 0, "too large", 0}};
  ExpectRoundTrip(hb, ParseHeartbeat);
}

TEST(BadInputTest, RepliesAndPolls) {
  EXPECT_EQ(Error(ParseRegisterReply, R"({"heartbeat_interval_ms": "1s"})"),
            "register reply.heartbeat_interval_ms: expected an integer >= 0, got string \"1s\"");
  EXPECT_EQ(Error(ParseRegisterReply, R"({"release_after_ms": -5})"),
            "register reply.release_after_ms: expected an integer >= 0, got number -5");
  EXPECT_EQ(Error(ParseRegisterReply, R"({"stop": ["7.0.0", "x"]})"),
            "register reply.stop[1]: expected <job>.<attempt>.<rank>, got \"x\"");
  EXPECT_EQ(Error(ParseHeartbeatReply, R"({"ack": [17]})"),
            "heartbeat reply.ack[0]: expected a string, got number 17");
  EXPECT_EQ(Error(ParsePollRequest, R"({"wait_ms": 0})"), "poll.node: missing");
  EXPECT_EQ(Error(ParsePollRequest, R"({"node": "n", "wait_ms": -1})"),
            "poll.wait_ms: expected an integer >= 0, got number -1");
  auto poll_reply = [](const json& j) { return ParsePollReply(j); };
  EXPECT_EQ(Error(poll_reply, "{}"), "poll reply.commands: missing");
  EXPECT_EQ(Error(poll_reply, R"({"commands": {}})"),
            "poll reply.commands: expected a list of commands, got object {}");
  EXPECT_EQ(Error(ParseUploadReply, R"({"next_offset": 1.5})"),
            "upload reply.next_offset: expected an integer >= 0, got number 1.5");
  EXPECT_EQ(Error(ParseProfileUploadReply, R"({"next_offset": 0})"),
            "profile reply.state: missing");
}

TEST(BadInputTest, OneBadCommandDoesNotCostTheOthers) {
  std::vector<trainyard::Status> rejected;
  auto r = ParsePollReply(json::parse(R"({"commands": [
      {"kind": "checkpoint", "task_id": "1.0.0"},
      {"kind": "faults", "faults": [{"id": "f-1", "kind": "melt"}]},
      {"kind": "reboot"},
      {"kind": "stop", "task_id": "1.0.0"}]})"),
                          &rejected);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->commands.size(), 2u);
  EXPECT_EQ(r->commands[0].kind, Command::Kind::kCheckpoint);
  EXPECT_EQ(r->commands[1].kind, Command::Kind::kStop);
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_EQ(rejected[0].message(),
            "poll reply.commands[1].faults[0].kind: unknown fault kind \"melt\"; valid kinds: "
            "xid, ecc, thermal, link-down, slow, hang, data-stall, loss-nan, grad-spike, "
            "comm-slow");
  EXPECT_EQ(rejected[1].message(),
            "poll reply.commands[2].kind: expected start, stop, preempt, profile, faults, "
            "checkpoint or stage, got \"reboot\"");
}

TEST(BadInputTest, StartCommands) {
  auto error = [](const std::string& task) {
    return Error(ParseCommand, R"({"kind": "start", "task": )" + task + "}");
  };
  const std::string ids = R"("task_id": "7.0.1", "job_id": 7, "attempt": 0, "rank": 1)";
  EXPECT_EQ(Error(ParseCommand, R"({"kind": "start"})"), "command.task: missing");
  EXPECT_EQ(error("[]"), "command.task: expected an object, got array []");
  EXPECT_EQ(error(R"({"argv": ["x"]})"), "command.task.task_id: missing");
  EXPECT_EQ(error(R"({"task_id": "7.0.x", "argv": ["x"]})"),
            "command.task.task_id: expected <job>.<attempt>.<rank>, got \"7.0.x\" (the rank is "
            "not a decimal number)");
  EXPECT_EQ(error("{" + ids + "}"), "command.task.argv: missing");
  EXPECT_EQ(error("{" + ids + R"(, "argv": []})"),
            "command.task.argv: expected a non-empty list of strings, got array []");
  EXPECT_EQ(error("{" + ids + R"(, "argv": ["python", 3]})"),
            "command.task.argv[1]: expected a string, got number 3");
  EXPECT_EQ(error("{" + ids + R"(, "argv": ["x"], "env": {"A": 1}})"),
            "command.task.env.A: expected a string, got number 1");
  EXPECT_EQ(error("{" + ids + R"(, "argv": ["x"], "env": ["A=1"]})"),
            "command.task.env: expected an object of strings, got array [\"A=1\"]");
  EXPECT_EQ(error("{" + ids + R"(, "argv": ["x"], "gpus": [0, "1"]})"),
            "command.task.gpus[1]: expected a GPU index, got string \"1\"");
  EXPECT_EQ(error("{" + ids + R"(, "argv": ["x"], "secret_env": "HF_TOKEN"})"),
            "command.task.secret_env: expected a list of at most 100000 strings, got string "
            "\"HF_TOKEN\"");
  EXPECT_EQ(error("{" + ids + R"(, "argv": ["x"], "workdir": false})"),
            "command.task.workdir: expected a string, got boolean false");
  EXPECT_EQ(error(R"({"task_id": "7.0.1", "job_id": 8, "attempt": 0, "rank": 1, "argv": ["x"]})"),
            "command.task.task_id: \"7.0.1\" is not the task of job 8, attempt 0, rank 1 (8.0.1)");
  EXPECT_EQ(error(R"({"task_id": "7.0.1", "rank": 2, "argv": ["x"]})"),
            "command.task.task_id: \"7.0.1\" is not the task of job 7, attempt 0, rank 2 (7.0.2)");
  EXPECT_EQ(error(R"({"task_id": "7.0.1", "attempt": "0", "argv": ["x"]})"),
            "command.task.attempt: expected an integer 0..1000000, got string \"0\"");
  EXPECT_EQ(error("{" + ids + R"(, "argv": ["x"], "mounts": [{"source": "/a", "target": "/b"}]})"),
            "command.task.mounts: expected absent: mounts need an image, got array "
            "[{\"source\":\"/a\",\"target\":\"/b\"}]");
  EXPECT_EQ(error("{" + ids +
                  R"(, "argv": ["x"], "image": "t", "mounts": [{"source": "/a", "target": "b"}]})"),
            "command.task.mounts[0].target: expected an absolute path inside the container, got "
            "string \"b\"");
  EXPECT_EQ(error("{" + ids + R"(, "argv": ["x"], "image": "t", "shm_bytes": -1})"),
            "command.task.shm_bytes: expected an integer 0..72057594037927936, got number -1");
}

// The previous agent started a task whose start named only its id: the numbers are the id's.
TEST(RoundTripTest, AStartWithoutItsNumbersTakesThemFromTheId) {
  auto c = ParseCommand(json::parse(
      R"({"kind": "start", "task": {"task_id": "6.1.0", "job_id": 6, "attempt": 1, "argv": ["x"]}})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->start.job_id, 6);
  EXPECT_EQ(c->start.attempt, 1);
  EXPECT_EQ(c->start.rank, 0);
  c = ParseCommand(
      json::parse(R"({"kind": "start", "task": {"task_id": "9.3.2", "argv": ["x"]}})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->start.job_id, 9);
  EXPECT_EQ(c->start.attempt, 3);
  EXPECT_EQ(c->start.rank, 2);
}

TEST(BadInputTest, TaskCommands) {
  auto error = [](const std::string& text) { return Error(ParseCommand, text); };
  EXPECT_EQ(error("7"), "command: expected an object, got number 7");
  EXPECT_EQ(error("{}"), "command.kind: missing");
  EXPECT_EQ(
      error(R"({"kind": "reboot"})"),
      "command.kind: expected start, stop, preempt, profile, faults, checkpoint or stage, got "
      "\"reboot\"");
  EXPECT_EQ(error(R"({"kind": "stop"})"), "command.task_id: missing");
  EXPECT_EQ(error(R"({"kind": "checkpoint", "task_id": 17})"),
            "command.task_id: expected a string, got number 17");
  EXPECT_EQ(error(R"({"kind": "checkpoint", "task_id": ""})"),
            "command.task_id: expected <job>.<attempt>.<rank>, got \"\"");
  EXPECT_EQ(error(R"({"kind": "stop", "task_id": "1.0.0", "grace_ms": -1})"),
            "command.grace_ms: expected an integer >= 0, got number -1");
  EXPECT_EQ(error(R"({"kind": "preempt", "task_id": "1.0.0", "signal": 65})"),
            "command.signal: expected an integer 0..64, got number 65");
  EXPECT_EQ(error(R"({"kind": "preempt", "task_id": "1.0.0", "signal": "USR1"})"),
            "command.signal: expected an integer 0..64, got string \"USR1\"");
  EXPECT_EQ(error(R"({"kind": "profile", "task_id": "7.0.1", "steps": 20})"),
            "command.id: missing");
  for (const char* id : {R"("a/b")", R"("")", R"(".hidden")", R"("p 1")"}) {
    EXPECT_EQ(error(R"({"kind": "profile", "task_id": "7.0.1", "steps": 1, "id": )" +
                    std::string(id) + "}"),
              "command.id: expected 1-64 of A-Z a-z 0-9 . _ -, not starting with \".\", got "
              "string " +
                  std::string(id));
  }
  EXPECT_EQ(error(R"({"kind": "profile", "task_id": "7.0.1", "id": "p", "steps": 0})"),
            "command.steps: expected an integer 1..10000, got number 0");
  EXPECT_EQ(error(R"({"kind": "profile", "task_id": "7.0.1", "id": "p", "steps": 10001})"),
            "command.steps: expected an integer 1..10000, got number 10001");
  EXPECT_EQ(error(R"({"kind": "profile", "task_id": "7.0.1", "id": "p"})"),
            "command.steps: missing");
}

TEST(BadInputTest, FaultsCommands) {
  auto error = [](const std::string& faults) {
    return Error(ParseCommand, R"({"kind": "faults", "faults": )" + faults + "}");
  };
  EXPECT_EQ(Error(ParseCommand, R"({"kind": "faults"})"), "command.faults: missing");
  EXPECT_EQ(error(R"("slow")"),
            "command.faults: expected a list of at most 1024 objects, got string \"slow\"");
  EXPECT_EQ(error("[7]"), "command.faults[0]: expected an object, got number 7");
  EXPECT_EQ(error(R"([{"id": "f-1", "kind": "melt"}])"),
            "command.faults[0].kind: unknown fault kind \"melt\"; valid kinds: xid, ecc, "
            "thermal, link-down, slow, hang, data-stall, loss-nan, grad-spike, comm-slow");
  EXPECT_EQ(error(R"([{"id": "f-1", "kind": "Slow"}])"),
            "command.faults[0].kind: unknown fault kind \"Slow\"; valid kinds: xid, ecc, "
            "thermal, link-down, slow, hang, data-stall, loss-nan, grad-spike, comm-slow");
  EXPECT_EQ(error(R"([{"kind": "slow"}])"), "command.faults[0].id: missing");
  EXPECT_EQ(error(R"([{"id": "", "kind": "slow"}])"),
            "command.faults[0].id: expected a non-empty string, got string \"\"");
  EXPECT_EQ(error(R"([{"id": "f-1"}])"), "command.faults[0].kind: missing");
  EXPECT_EQ(error(R"([{"id": "f-1", "kind": 3}])"),
            "command.faults[0].kind: expected a string, got number 3");
  EXPECT_EQ(error(R"([{"id": "f-1", "kind": "slow", "gpu": -2}])"),
            "command.faults[0].gpu: expected an integer -1..63, got number -2");
  EXPECT_EQ(error(R"([{"id": "f-1", "kind": "slow", "gpu": 64}])"),
            "command.faults[0].gpu: expected an integer -1..63, got number 64");
  EXPECT_EQ(error(R"([{"id": "f-1", "kind": "slow", "until_ms": "soon"}])"),
            "command.faults[0].until_ms: expected an integer >= 0, got string \"soon\"");
  EXPECT_EQ(error(R"([{"id": "f-1", "kind": "slow"}, {"id": "f-1", "kind": "hang"}])"),
            "command.faults[1].id: \"f-1\" appears twice; fault ids must be unique");
  EXPECT_EQ(error(R"([{"id": "f-1", "kind": "comm-slow"}])"),
            "command.faults[0].job_id: a comm-slow fault must name the job it slows (> 0)");
}

TEST(BadInputTest, Uploads) {
  const std::string head = R"("node": "n", "task_id": "7.0.1", "offset": 0)";
  EXPECT_EQ(Error(ParseLogUpload, R"({"task_id": "7.0.1", "offset": 0, "data_b64": ""})"),
            "logs.node: missing");
  EXPECT_EQ(Error(ParseLogUpload, R"({"node": "n", "task_id": "x", "offset": 0, "data_b64": ""})"),
            "logs.task_id: expected <job>.<attempt>.<rank>, got \"x\"");
  EXPECT_EQ(Error(ParseLogUpload, R"({"node": "n", "task_id": "7.0.1", "data_b64": ""})"),
            "logs.offset: missing");
  EXPECT_EQ(
      Error(ParseLogUpload, R"({"node": "n", "task_id": "7.0.1", "offset": -1, "data_b64": ""})"),
      "logs.offset: expected an integer >= 0, got number -1");
  EXPECT_EQ(Error(ParseLogUpload, "{" + head + "}"), "logs.data_b64: missing");
  EXPECT_EQ(Error(ParseLogUpload, "{" + head + R"(, "data_b64": "a*=="})"),
            "logs.data_b64: not base64 at byte 1");
  auto too_big =
      ParseLogUpload(ToJson(LogUpload{"n", "7.0.1", 0, std::string(kMaxUploadBytes + 1, 'x')}));
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(too_big.status().message(), "logs: at most 1 MiB per request");

  EXPECT_EQ(Error(ParseMetricsUpload, "{" + head + "}"), "metrics.lines: missing");
  EXPECT_EQ(Error(ParseMetricsUpload, "{" + head + R"(, "lines": {}})"),
            "metrics.lines: expected a list of objects, got object {}");
  EXPECT_EQ(Error(ParseMetricsUpload, "{" + head + R"(, "lines": [], "end_offset": "9"})"),
            "metrics.end_offset: expected an integer >= 0, got string \"9\"");

  EXPECT_EQ(Error(ParseProfileUpload, "{" + head + R"(, "status": "recording"})"),
            "profile.id: missing");
  EXPECT_EQ(Error(ParseProfileUpload, "{" + head + R"(, "id": "../x", "status": "recording"})"),
            "profile.id: expected 1-64 of A-Z a-z 0-9 . _ -, not starting with \".\", got string "
            "\"../x\"");
  EXPECT_EQ(Error(ParseProfileUpload, "{" + head + R"(, "id": "p-7-1", "status": "stored"})"),
            "profile.status: expected recording or failed (a trace is sent as data_b64 chunks), "
            "got string \"stored\"");
  EXPECT_EQ(Error(ParseProfileUpload,
                  "{" + head + R"(, "id": "p-7-1", "status": "failed", "message": 1})"),
            "profile.message: expected a string, got number 1");
  EXPECT_EQ(Error(ParseProfileUpload, "{" + head + R"(, "id": "p-7-1", "data_b64": ""})"),
            "profile.total_bytes: missing");
  EXPECT_EQ(Error(ParseProfileUpload,
                  "{" + head + R"(, "id": "p-7-1", "total_bytes": 0, "data_b64": ""})"),
            "profile.total_bytes: expected an integer >= 1, got number 0");
  EXPECT_EQ(Error(ParseProfileUpload, "{" + head + R"(, "id": "p-7-1", "total_bytes": 3})"),
            "profile.data_b64: missing");
}

TEST(BadInputTest, UnknownFieldsAreIgnored) {
  auto hb = ParseHeartbeat(json::parse(R"({"node": "n", "future": {"x": 1},
      "gpus": [{"index": 0, "nvlink_bandwidth": "high"}],
      "tasks": [{"task_id": "7.0.0", "job_id": 7, "attempt": 0, "rank": 0, "state": "running",
                 "cgroup": "/sys/fs/cgroup/x"}]})"));
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_EQ(hb->gpus.size(), 1u);
  auto c = ParseCommand(json::parse(R"({"kind": "checkpoint", "task_id": "1.0.0", "why": "x"})"));
  ASSERT_TRUE(c.ok());
  // null is "not given", for optional fields.
  auto s = ParseCommand(json::parse(R"({"kind": "stop", "task_id": "1.0.0", "grace_ms": null})"));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->grace, Duration(0));
}

TEST(FaultKindTest, TheListAndTheCheck) {
  EXPECT_EQ(kFaultKinds.size(), 9u);
  for (std::string_view k : kFaultKinds) {
    EXPECT_TRUE(IsFaultKind(k)) << k;
    ASSERT_TRUE(ParseFaultKind(k).ok()) << k;
    EXPECT_EQ(FaultKindName(*ParseFaultKind(k)), k);
  }
  EXPECT_FALSE(IsFaultKind("comm-slow")) << "derived by the server, never injected";
  EXPECT_TRUE(ParseFaultKind("comm-slow").ok()) << "but agents are sent it";
  EXPECT_FALSE(IsFaultKind("melt"));
  EXPECT_FALSE(IsFaultKind(""));
  EXPECT_EQ(ParseFaultKind("melt").status().message(),
            "unknown fault kind \"melt\"; valid kinds: " + ValidFaultKinds());
  EXPECT_EQ(json(FaultKind::kLinkDown), json("link-down")) << "a kind is its name in JSON";
  EXPECT_EQ(nlohmann::ordered_json(FaultKind::kCommSlow), nlohmann::ordered_json("comm-slow"));
}

}  // namespace
}  // namespace trainyard::protocol
