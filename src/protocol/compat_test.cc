// The wire as the previous build wrote it, before the protocol was defined once: each
// literal below is what its agent (src/agent/agent.cc, captured from a run against a
// recording server) or its server (server/protocol.cc ToJson, src/server/api.cc's
// replies) sent. This build must read every one of them, and write each one back the
// same: an agent of either build talks to a server of either build.
#include <gtest/gtest.h>

#include "protocol/messages.h"

namespace trainyard::protocol {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// The previous agent wrote nlohmann::json (keys sorted); the same text from ours.
std::string Sorted(const ordered_json& j) { return json(j).dump(); }

// --- what the previous agent sent -------------------------------------------------------

constexpr const char* kOldRegister =
    R"({"health_check":{"at_ms":1796457595243,"ok":true,"output":"all good","trigger":"join"},)"
    R"("node":{"address":"127.0.0.1","cpus":8,"gpu_type":"H100","gpus":[{"index":0,)"
    R"("memory_mib":81559,"uuid":"GPU-c4b31ccd-0a2c-e51e-50b2-519236336658"},{"index":1,)"
    R"("memory_mib":81559,"uuid":"GPU-c4b31dcd-0a2c-e6d1-a9de-bc7c09314ab9"}],)"
    R"("labels":{"zone":"a"},"leaf":"leaf-0","memory_mib":65536,"name":"node-1",)"
    R"("nvlink_domain":"node-1","simulated":true},"tasks":[]})";

constexpr const char* kOldHeartbeatRunning =
    R"({"disks":[{"free_bytes":81186590720,"path":"/tmp/capture/data","total_bytes":270553174016}],)"
    R"("faults":["f-1"],"gpus":[{"ecc_uncorrectable":0,"index":0,"mem_used_mib":0,"power_w":70.0,)"
    R"("sm_clock_mhz":207,"temp_c":34.8,"throttled":false,"util_pct":0.0,"xid_count":0,)"
    R"("xid_last":0},{"ecc_uncorrectable":0,"index":1,"mem_used_mib":69245,"power_w":70.0,)"
    R"("sm_clock_mhz":1980,"temp_c":34.7,"throttled":false,"util_pct":91.22766332729577,)"
    R"("xid_count":0,"xid_last":0}],"health":{"message":"","ok":true},"health_check":)"
    R"({"at_ms":1796457595243,"ok":true,"output":"all good","trigger":"join"},"links":[)"
    R"({"errors":0,"kind":"ib","name":"ib0","up":true},{"errors":0,"kind":"nvlink",)"
    R"("name":"nvlink0","up":true}],"node":"node-1","seq":1,"tasks":[{"attempt":1,)"
    R"("exit_code":0,"fenced":false,"finished_ms":0,"job_id":5,"message":"","pid":23140,)"
    R"("rank":0,"signal":0,"started_ms":1796457595261,"state":"running","task_id":"5.1.0"}]})";

constexpr const char* kOldHeartbeatExited =
    R"({"disks":[{"free_bytes":81173872640,"path":"/tmp/capture/data","total_bytes":270553174016}],)"
    R"("faults":["f-1"],"gpus":[{"ecc_uncorrectable":0,"index":0,"mem_used_mib":0,"power_w":70.0,)"
    R"("sm_clock_mhz":207,"temp_c":35.1,"throttled":false,"util_pct":0.0,"xid_count":0,)"
    R"("xid_last":0},{"ecc_uncorrectable":0,"index":1,"mem_used_mib":0,"power_w":516.0,)"
    R"("sm_clock_mhz":345,"temp_c":40.3,"throttled":false,"util_pct":0.0,"xid_count":0,)"
    R"("xid_last":0}],"health":{"message":"","ok":true},"health_check":{"at_ms":1796457595243,)"
    R"("ok":true,"output":"all good","trigger":"join"},"links":[{"errors":0,"kind":"ib",)"
    R"("name":"ib0","up":true},{"errors":0,"kind":"nvlink","name":"nvlink0","up":true}],)"
    R"("node":"node-1","seq":29,"tasks":[{"attempt":1,"exit_code":0,"fenced":false,)"
    R"("finished_ms":1796457598334,"job_id":5,"message":"","pid":23140,"rank":0,"signal":0,)"
    R"("started_ms":1796457595261,"state":"exited","task_id":"5.1.0"}]})";

// A node without GPUs, links or a health check, and a fenced task (from agent.cc's code).
constexpr const char* kOldHeartbeatBare =
    R"({"disks":[],"faults":[],"gpus":[],"health":{"message":"no NVIDIA driver","ok":false},)"
    R"("node":"cpu-0","seq":7,"tasks":[{"attempt":0,"exit_code":-1,"fenced":true,)"
    R"("finished_ms":1796457598334,"job_id":12,"message":"stopped by its agent","pid":4242,)"
    R"("rank":3,"signal":15,"started_ms":1796457595261,"state":"exited","task_id":"12.0.3"}]})";

constexpr const char* kOldPoll = R"({"node":"node-1","wait_ms":300})";
constexpr const char* kOldLogs =
    R"({"data_b64":"aGVsbG8K","node":"node-1","offset":0,"task_id":"5.1.0"})";
constexpr const char* kOldMetrics =
    R"({"end_offset":25,"lines":[{"loss":0.5,"step":1}],"node":"node-1","offset":0,)"
    R"("task_id":"5.1.0"})";
// Agent::ShipProfiles: a status, a failure, a chunk of a trace.
constexpr const char* kOldProfileRecording =
    R"({"id":"p-5-1","node":"node-1","offset":0,"status":"recording","task_id":"5.1.0"})";
constexpr const char* kOldProfileFailed =
    R"({"id":"p-5-1","message":"the agent cannot read the trace /d/t.json: it is empty",)"
    R"("node":"node-1","offset":0,"status":"failed","task_id":"5.1.0"})";
constexpr const char* kOldProfileChunk =
    R"({"data_b64":"eyJ0cmFjZUV2ZW50cyI6IFtdfQ==","id":"p-5-1","node":"node-1",)"
    R"("offset":0,"task_id":"5.1.0","total_bytes":20})";

TEST(CompatTest, TheOldAgentsRegistrationReadsAndIsWrittenTheSame) {
  auto r = ParseRegistration(json::parse(kOldRegister));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->node.name, "node-1");
  EXPECT_EQ(r->node.milli_cpus, 8000);
  EXPECT_EQ(r->node.memory_bytes, 65536 * kMiB);
  ASSERT_EQ(r->node.gpus.size(), 2u);
  EXPECT_EQ(r->node.gpus[1].uuid, "GPU-c4b31dcd-0a2c-e6d1-a9de-bc7c09314ab9");
  EXPECT_EQ(r->node.gpus[1].model, "H100");
  EXPECT_EQ(r->node.gpus[1].memory_bytes, 81559 * kMiB);
  EXPECT_EQ(r->node.gpus[1].nvlink_domain, "node-1");
  EXPECT_EQ(r->node.labels.at("zone"), "a");
  EXPECT_EQ(r->node.topology.leaf, "leaf-0");
  EXPECT_TRUE(r->simulated);
  ASSERT_TRUE(r->health_check.has_value());
  EXPECT_EQ(*r->health_check, (HealthCheckResult{true, "all good", 1796457595243, "join"}));
  EXPECT_EQ(Sorted(ToJson(*r)), kOldRegister);
}

TEST(CompatTest, TheOldAgentsHeartbeatsReadAndAreWrittenTheSame) {
  for (const char* text : {kOldHeartbeatRunning, kOldHeartbeatExited, kOldHeartbeatBare}) {
    auto h = ParseHeartbeat(json::parse(text));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(Sorted(ToJson(*h)), text);
  }
  auto running = ParseHeartbeat(json::parse(kOldHeartbeatRunning));
  ASSERT_EQ(running->tasks.size(), 1u);
  EXPECT_EQ(running->tasks[0].state, TaskState::kRunning);
  EXPECT_EQ(running->tasks[0].pid, 23140);
  EXPECT_EQ(running->gpus[1].util_pct, 91.22766332729577);
  EXPECT_EQ(running->gpus[1].mem_used_mib, 69245);
  EXPECT_EQ(running->links[1].name, "nvlink0");
  EXPECT_EQ(running->disks[0].total_bytes, 270553174016.0);
  EXPECT_EQ(running->faults, std::vector<std::string>{"f-1"});
  auto bare = ParseHeartbeat(json::parse(kOldHeartbeatBare));
  EXPECT_FALSE(bare->health_ok);
  EXPECT_EQ(bare->health_message, "no NVIDIA driver");
  EXPECT_TRUE(bare->tasks[0].fenced);
  EXPECT_EQ(bare->tasks[0].state, TaskState::kExited);
}

TEST(CompatTest, TheOldAgentsUploadsReadAndAreWrittenTheSame) {
  auto poll = ParsePollRequest(json::parse(kOldPoll));
  ASSERT_TRUE(poll.ok());
  EXPECT_EQ(*poll, (PollRequest{"node-1", Duration(300)}));
  EXPECT_EQ(Sorted(ToJson(*poll)), kOldPoll);

  auto logs = ParseLogUpload(json::parse(kOldLogs));
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(*logs, (LogUpload{"node-1", "5.1.0", 0, "hello\n"}));
  EXPECT_EQ(Sorted(ToJson(*logs)), kOldLogs);

  auto metrics = ParseMetricsUpload(json::parse(kOldMetrics));
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(metrics->end_offset, 25);
  EXPECT_EQ(metrics->lines, std::vector<json>{json::parse(R"({"step": 1, "loss": 0.5})")});
  EXPECT_EQ(Sorted(ToJson(*metrics)), kOldMetrics);

  for (const char* text : {kOldProfileRecording, kOldProfileFailed, kOldProfileChunk}) {
    auto p = ParseProfileUpload(json::parse(text));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(Sorted(ToJson(*p)), text);
  }
  auto chunk = ParseProfileUpload(json::parse(kOldProfileChunk));
  EXPECT_EQ(chunk->kind, ProfileUpload::Kind::kChunk);
  EXPECT_EQ(chunk->data, R"({"traceEvents": []})");
  EXPECT_EQ(chunk->total_bytes, 20);
}

// --- what the previous server sent ------------------------------------------------------

// server/protocol.cc ToJson(Command), one of each kind, in its field order.
constexpr const char* kOldCommands[] = {
    R"({"kind":"start","task":{"task_id":"17.2.1","job_id":17,"attempt":2,"rank":1,)"
    R"("argv":["/usr/bin/python3","train.py"],"env":{"HF_TOKEN":"t0k","MASTER_ADDR":"10.0.0.1"},)"
    R"("workdir":"/work","gpus":[0,1],"secret_env":["HF_TOKEN"]}})",
    R"({"kind":"start","task":{"task_id":"17.2.1","job_id":17,"attempt":2,"rank":1,)"
    R"("argv":["/usr/bin/python3","train.py"],"env":{},"workdir":"","gpus":[]}})",
    R"({"kind":"preempt","task_id":"17.2.1","signal":10,"grace_ms":60000})",
    R"({"kind":"stop","task_id":"17.2.1","grace_ms":10000})",
    R"({"kind":"profile","task_id":"17.2.1","id":"p-17-3","steps":20})",
    R"({"kind":"faults","faults":[{"id":"f-3","kind":"slow","gpu":1,"until_ms":0,"job_id":0},)"
    R"({"id":"f-4/job-17","kind":"comm-slow","gpu":-1,"until_ms":1790000600000,"job_id":17}]})",
    R"({"kind":"checkpoint","task_id":"17.2.1"})",
};

TEST(CompatTest, TheOldServersCommandsReadAndAreWrittenByteForByte) {
  ordered_json all = ordered_json::array();
  for (const char* text : kOldCommands) {
    auto c = ParseCommand(json::parse(text));
    ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << text;
    EXPECT_EQ(ToJson(*c).dump(), text);
    all.push_back(ordered_json::parse(text));
  }
  auto start = ParseCommand(json::parse(kOldCommands[0]));
  EXPECT_EQ(start->start.task_id, "17.2.1");
  EXPECT_EQ(start->start.env.at("HF_TOKEN"), "t0k");
  EXPECT_EQ(start->start.secret_env, std::vector<std::string>{"HF_TOKEN"});
  EXPECT_EQ(start->start.gpus, (std::vector<int>{0, 1}));
  auto faults = ParseCommand(json::parse(kOldCommands[5]));
  EXPECT_EQ(faults->faults[1],
            (FaultSpec{"f-4/job-17", FaultKind::kCommSlow, -1, 1790000600000, 17}));

  // The poll reply: {"commands": [...]}.
  const std::string reply = ordered_json{{"commands", all}}.dump();
  std::vector<Status> rejected;
  auto parsed = ParsePollReply(json::parse(reply), &rejected);
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(rejected.empty());
  ASSERT_EQ(parsed->commands.size(), std::size(kOldCommands));
  EXPECT_EQ(ToJson(*parsed).dump(), reply);
}

// src/api.cc's answers to the agent.
TEST(CompatTest, TheOldServersRepliesRead) {
  auto reg = ParseRegisterReply(
      json::parse(R"({"heartbeat_interval_ms":1000,"release_after_ms":135000,"stop":["3.0.1"]})"));
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(*reg, (RegisterReply{Duration(1000), Duration(135'000), {"3.0.1"}}));
  EXPECT_EQ(ToJson(*reg).dump(),
            R"({"heartbeat_interval_ms":1000,"release_after_ms":135000,"stop":["3.0.1"]})");

  auto ack = ParseHeartbeatReply(json::parse(R"({"ack":["5.1.0"]})"));
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->ack, std::vector<std::string>{"5.1.0"});
  EXPECT_EQ(ToJson(*ack).dump(), R"({"ack":["5.1.0"]})");

  auto next = ParseUploadReply(json::parse(R"({"next_offset":9000})"));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->next_offset, 9000);
  EXPECT_EQ(ToJson(*next).dump(), R"({"next_offset":9000})");

  for (const char* text :
       {R"({"next_offset":2097152,"state":"recording"})",
        R"({"next_offset":0,"state":"failed","message":"the trace of rank 0 is 70.2 MiB"})"}) {
    auto p = ParseProfileUploadReply(json::parse(text));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(ToJson(*p).dump(), text);
  }
}

}  // namespace
}  // namespace trainyard::protocol
