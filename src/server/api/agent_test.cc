#include "server/api/agent.h"

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ParseTaskUploadTest, NodeTaskAndOffsetNamedByField) {
  auto u =
      ParseTaskUpload(json::parse(R"({"node": "n1", "task_id": "7.2.1", "offset": 5})"), "logs");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->task.task_id, "7.2.1");
  EXPECT_EQ(u->task.node, "n1");
  EXPECT_EQ(u->task.job, 7);
  EXPECT_EQ(u->task.attempt, 2);
  EXPECT_EQ(u->task.rank, 1);
  EXPECT_EQ(u->offset, 5);
  EXPECT_EQ(ParseTaskUpload(json::parse(R"({"task_id": "7.2.1", "offset": 5})"), "logs")
                .status()
                .message(),
            "logs.node: required, a string");
  EXPECT_EQ(
      ParseTaskUpload(json::parse(R"({"node": "n1", "task_id": "7.2", "offset": 5})"), "metrics")
          .status()
          .message(),
      "metrics.task_id: expected <job>.<attempt>.<rank>, got \"7.2\"");
  EXPECT_EQ(
      ParseTaskUpload(json::parse(R"({"node": "n1", "task_id": "7.2.1", "offset": -1})"), "logs")
          .status()
          .message(),
      "logs.offset: required, an integer >= 0");
}

TEST(ParsePollTest, WaitIsBounded) {
  auto p = ParsePoll(R"({"node": "n1"})");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->wait, Duration(20'000));
  EXPECT_EQ(ParsePoll(R"({"node": "n1", "wait_ms": 99999})")->wait, kMaxPollWait);
  EXPECT_EQ(ParsePoll(R"({"node": "n1", "wait_ms": "1"})").status().message(),
            "poll.wait_ms: expected an integer >= 0");
  EXPECT_EQ(ParsePoll("[]").status().message(), "poll: the body must be a JSON object");
}

const json kNoJoinToken = Error("missing or wrong join token (Authorization: Bearer <token>)");

std::string Task(JobId id) { return std::to_string(id) + ".0.0"; }

}  // namespace

std::vector<RouteCase> AgentRouteCases() {
  return {
      {"POST /api/v1/agent/register",
       [](ApiFixture& f) {
         Answer a = f.Agent("/api/v1/agent/register",
                            R"({"node": {"name": "n2", "cpus": 4, "memory_mib": 1024},
                                "tasks": [{"task_id": "77.0.0", "job_id": 77, "attempt": 0,
                                           "rank": 0, "state": "running"}]})");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"heartbeat_interval_ms", 1000},
                                 {"release_after_ms", 135000},
                                 {"stop", {"77.0.0"}}}));
         Answer bad = f.Agent("/api/v1/agent/register", R"({"node": {"name": "bad name"}})");
         EXPECT_EQ(bad.status, 400);
         EXPECT_EQ(bad.body.size(), 1u);
         EXPECT_EQ(f.Agent("/api/v1/agent/register", "{").body,
                   Error("register: the body is not valid JSON"));
         EXPECT_EQ(f.CallAs(f.admin_token_, "POST", "/api/v1/agent/register", "{}").body,
                   kNoJoinToken);
       }},
      {"POST /api/v1/agent/heartbeat",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         Answer a = f.Agent("/api/v1/agent/heartbeat", json({{"node", "n1"},
                                                             {"seq", 3},
                                                             {"tasks",
                                                              {{{"task_id", Task(id)},
                                                                {"job_id", id},
                                                                {"attempt", 0},
                                                                {"rank", 0},
                                                                {"state", "exited"},
                                                                {"exit_code", 0}}}}})
                                                           .dump());
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"ack", {Task(id)}}}));
         EXPECT_EQ(f.Get("/api/v1/jobs/" + std::to_string(id)).body["state"], "Succeeded");
         EXPECT_EQ(f.Agent("/api/v1/agent/heartbeat", R"({"node": "n9"})").body,
                   Error("unknown node n9"));
         EXPECT_EQ(f.CallAs("", "POST", "/api/v1/agent/heartbeat", "{}").body, kNoJoinToken);
       }},
      {"POST /api/v1/agent/manifest",
       [](ApiFixture& f) {
         const std::string text = "trainyard-manifest 1\n" + std::string(64, 'a') + " 3 1 f0\n";
         Answer r = f.Call("POST", "/api/v1/datasets",
                           json{{"name", "d"}, {"source", "/shared/d"}, {"manifest", text}}.dump());
         ASSERT_EQ(r.status, 201) << r.text;
         const std::string version = r.body["version"];
         Answer a = f.Agent("/api/v1/agent/manifest", json{{"version", version}}.dump());
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"version", version}, {"manifest", text}}));
         a = f.Agent("/api/v1/agent/manifest",
                     json{{"version", "sha256:" + std::string(64, 'f')}}.dump());
         EXPECT_EQ(a.status, 404);
         EXPECT_THAT(a.text, HasSubstr("no manifest of dataset version"));
         a = f.Agent("/api/v1/agent/manifest", R"({"version": "v1"})");
         EXPECT_EQ(a.status, 400);
         EXPECT_THAT(a.body["error"].get<std::string>(),
                     HasSubstr("manifest.version: must be sha256:<64 hex>, got \"v1\""));
       }},
      {"POST /api/v1/agent/poll",
       [](ApiFixture& f) {
         EXPECT_EQ(f.Agent("/api/v1/agent/poll", R"({"node": "n1", "wait_ms": 0})").body,
                   json({{"commands", json::array()}}));
         const JobId id = f.Submit("name: a\ncommand: [x]\nresources: {gpus: 1}\n");
         ASSERT_TRUE(f.cluster_->SchedulePass().ok());
         Answer a = f.Agent("/api/v1/agent/poll", R"({"node": "n1", "wait_ms": 0})");
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["commands"].size(), 1u) << a.text;
         const json& start = a.body["commands"][0];
         EXPECT_EQ(start["kind"], "start");
         EXPECT_EQ(start["task"]["job_id"], id);
         EXPECT_EQ(start["task"]["task_id"], Task(id));
         EXPECT_EQ(start["task"]["gpus"], json::array({0}));
         EXPECT_EQ(f.Agent("/api/v1/agent/poll", R"({"wait_ms": 0})").body,
                   Error("poll.node: required, a string"));
         EXPECT_EQ(f.Agent("/api/v1/agent/poll", R"({"node": "n9", "wait_ms": 0})").body,
                   Error("unknown node n9"));
         EXPECT_EQ(f.CallAs("", "POST", "/api/v1/agent/poll", "{}").body, kNoJoinToken);
       }},
      {"POST /api/v1/agent/logs",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         const json chunk = {
             {"node", "n1"}, {"task_id", Task(id)}, {"offset", 0}, {"data_b64", "aGVsbG8K"}};
         Answer a = f.Agent("/api/v1/agent/logs", chunk.dump());
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"next_offset", 6}}));
         EXPECT_EQ(f.Agent("/api/v1/agent/logs", chunk.dump()).body, json({{"next_offset", 6}}));
         // An attempt the job does not have.
         json unknown = chunk;
         unknown["task_id"] = std::to_string(id) + ".5.0";
         EXPECT_EQ(f.Agent("/api/v1/agent/logs", unknown.dump()).body,
                   Error("unknown task " + std::to_string(id) + ".5.0"));
         json bad = chunk;
         bad["data_b64"] = "a*==";
         Answer not_base64 = f.Agent("/api/v1/agent/logs", bad.dump());
         EXPECT_EQ(not_base64.status, 400);
         EXPECT_THAT(not_base64.body["error"].get<std::string>(), HasSubstr("data_b64"));
         bad.erase("data_b64");
         EXPECT_EQ(f.Agent("/api/v1/agent/logs", bad.dump()).body,
                   Error("logs.data_b64: required, a base64 string"));
       }},
      {"POST /api/v1/agent/metrics",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         const json upload = {
             {"node", "n1"},
             {"task_id", Task(id)},
             {"offset", 0},
             {"end_offset", 100},
             {"lines",
              {{{"kind", "checkpoint"}, {"path", "/ck/1"}, {"step", 5}, {"duration_ms", 20}},
               {{"kind", "metrics"},
                {"step", 5},
                {"time_ms", 1000},
                {"metrics", {{"loss", 1.5}}}}}}};
         Answer a = f.Agent("/api/v1/agent/metrics", upload.dump());
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"next_offset", 100}}));
         EXPECT_EQ(f.Get("/api/v1/jobs/" + std::to_string(id)).body["checkpoint"]["path"], "/ck/1");
         EXPECT_EQ(f.Get("/api/v1/runs/" + std::to_string(id)).body["metrics"]["loss"]["last"],
                   1.5);
         json no_lines = upload;
         no_lines.erase("lines");
         EXPECT_EQ(f.Agent("/api/v1/agent/metrics", no_lines.dump()).body,
                   Error("metrics.lines: required, a list of objects"));
         EXPECT_EQ(f.Agent("/api/v1/agent/metrics", R"({"node": "n1"})").body,
                   Error("metrics.task_id: required, a string"));
       }},
      {"POST /api/v1/agent/profile",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         Answer p = f.Call("POST", "/api/v1/jobs/" + std::to_string(id) + "/profile", "");
         ASSERT_EQ(p.status, 201) << p.text;
         const std::string pid = p.body["id"];
         Answer a = f.Agent("/api/v1/agent/profile", json({{"node", "n1"},
                                                           {"task_id", Task(id)},
                                                           {"id", pid},
                                                           {"offset", 0},
                                                           {"status", "recording"}})
                                                         .dump());
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"next_offset", 0}, {"state", "recording"}}));
         Answer failed = f.Agent("/api/v1/agent/profile", json({{"node", "n1"},
                                                                {"task_id", Task(id)},
                                                                {"id", pid},
                                                                {"offset", 0},
                                                                {"status", "failed"},
                                                                {"message", "boom"}})
                                                              .dump());
         ASSERT_EQ(failed.status, 200) << failed.text;
         EXPECT_EQ(failed.body,
                   json({{"next_offset", 0}, {"state", "failed"}, {"message", "boom"}}));
         Answer other = f.Agent("/api/v1/agent/profile", json({{"node", "n1"},
                                                               {"task_id", Task(id)},
                                                               {"id", "p-999-1"},
                                                               {"offset", 0},
                                                               {"status", "recording"}})
                                                             .dump());
         EXPECT_EQ(other.status, 400);
         EXPECT_THAT(other.body["error"].get<std::string>(), HasSubstr("profile.id: required"));
       }},
  };
}

}  // namespace trainyard::server
