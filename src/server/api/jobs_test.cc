#include "server/api/jobs.h"

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ParseLogReadTest, DefaultsBoundsAndUnknownParameters) {
  auto none = ParseLogRead({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->rank, 0);
  EXPECT_FALSE(none->attempt);
  EXPECT_EQ(none->max_bytes, kMaxLogChunkBytes);
  auto all = ParseLogRead(
      {{"rank", "2"}, {"attempt", "1"}, {"offset", "10"}, {"wait_ms", "500"}, {"max_bytes", "9"}});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->rank, 2);
  EXPECT_EQ(all->attempt, 1);
  EXPECT_EQ(all->offset, 10);
  EXPECT_EQ(all->wait_ms, 500);
  EXPECT_EQ(all->max_bytes, 9);
  EXPECT_EQ(ParseLogRead({{"wait_ms", "30001"}}).status().message(),
            "wait_ms: expected an integer 0..30000, got \"30001\"");
  EXPECT_EQ(ParseLogRead({{"max_bytes", "0"}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(ParseLogRead({{"ranks", "1"}}).status().message(),
              HasSubstr("unknown query parameter \"ranks\""));
}

TEST(ParseLogSearchTest, PatternRequiredAndOneLine) {
  auto r = ParseLogSearch({{"pattern", "CUDA"}, {"ignore_case", "1"}, {"max_matches", "5"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->pattern, "CUDA");
  EXPECT_TRUE(r->ignore_case);
  EXPECT_EQ(r->max_matches, 5);
  EXPECT_THAT(ParseLogSearch({}).status().message(), HasSubstr("pattern: required"));
  EXPECT_THAT(ParseLogSearch({{"pattern", "a\nb"}}).status().message(),
              HasSubstr("one line of text"));
  EXPECT_THAT(ParseLogSearch({{"pattern", "a"}, {"ignore_case", "yes"}}).status().message(),
              HasSubstr("ignore_case: expected true or false"));
}

// The summary GET /jobs and the job's state changes answer.
json Summary(JobId id, const std::string& state, const std::string& reason, bool held,
             int64_t attempts, const std::vector<std::string>& nodes, int64_t state_ms) {
  return {{"id", id},
          {"name", "a"},
          {"tenant", "default"},
          {"queue", "default"},
          {"priority", "normal"},
          {"state", state},
          {"reason", reason},
          {"replicas", 1},
          {"gpus_per_replica", 0},
          {"held", held},
          {"submit_time_ms", ApiFixture::kStartMs},
          {"state_time_ms", state_ms},
          {"nodes", nodes},
          {"attempts", attempts}};
}

std::string Path(JobId id, const std::string& rest = "") {
  return "/api/v1/jobs/" + std::to_string(id) + rest;
}

// The agent reports the job's only rank as exited with `code`.
void Exit(ApiFixture& f, JobId id, int code) {
  const std::string task = std::to_string(id) + ".0.0";
  Answer hb = f.Agent("/api/v1/agent/heartbeat", json({{"node", "n1"},
                                                       {"seq", 2},
                                                       {"tasks",
                                                        {{{"task_id", task},
                                                          {"job_id", id},
                                                          {"attempt", 0},
                                                          {"rank", 0},
                                                          {"state", "exited"},
                                                          {"exit_code", code}}}}})
                                                     .dump());
  ASSERT_EQ(hb.status, 200) << hb.text;
}

void UploadLog(ApiFixture& f, JobId id, const std::string& base64) {
  Answer a = f.Agent("/api/v1/agent/logs", json({{"node", "n1"},
                                                 {"task_id", std::to_string(id) + ".0.0"},
                                                 {"offset", 0},
                                                 {"data_b64", base64}})
                                               .dump());
  ASSERT_EQ(a.status, 200) << a.text;
}

}  // namespace

std::vector<RouteCase> JobRouteCases() {
  return {
      {"POST /api/v1/jobs",
       [](ApiFixture& f) {
         Answer a = f.Call("POST", "/api/v1/jobs", "name: a\ncommand: [x]\n");
         ASSERT_EQ(a.status, 201) << a.text;
         const JobId id = a.body["id"];
         EXPECT_EQ(a.body, json({{"id", id}, {"ids", {id}}, {"warnings", json::array()}}));
         Answer array = f.Call("POST", "/api/v1/jobs?array=1-3", "name: a\ncommand: [x]\n");
         ASSERT_EQ(array.status, 201) << array.text;
         EXPECT_EQ(array.body, json({{"id", id + 1},
                                     {"ids", {id + 1, id + 2, id + 3}},
                                     {"warnings", json::array()}}));
         Answer bad = f.Call("POST", "/api/v1/jobs", "name: a\nreplicas: 0\ncommand: [x]\n");
         EXPECT_EQ(bad.status, 400);
         ASSERT_EQ(bad.body.size(), 1u) << bad.text;
         EXPECT_THAT(bad.body["error"].get<std::string>(), HasSubstr("replicas"));
         Answer empty = f.Call("POST", "/api/v1/jobs", "");
         EXPECT_EQ(empty.body,
                   Error("empty body: send a job spec (YAML, JSON or an #SBATCH script)"));
         Answer denied = f.CallAs(f.member_token_, "POST", "/api/v1/jobs",
                                  "name: a\ncommand: [x]\npriority: p0\n");
         EXPECT_EQ(denied.status, 403);
         EXPECT_THAT(denied.body["error"].get<std::string>(), HasSubstr("priority class \"p0\""));
       }},
      {"GET /api/v1/jobs",
       [](ApiFixture& f) {
         const JobId first = f.Submit(), second = f.Submit();
         Answer a = f.Get("/api/v1/jobs");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(
             a.body,
             json({{"jobs",
                    {Summary(first, "Pending", "submitted", false, 0, {}, ApiFixture::kStartMs),
                     Summary(second, "Pending", "submitted", false, 0, {}, ApiFixture::kStartMs)}},
                   {"next_after", nullptr}}));
         Answer page = f.Get("/api/v1/jobs?limit=1&order=desc");
         ASSERT_EQ(page.status, 200) << page.text;
         EXPECT_EQ(page.body["jobs"].size(), 1u);
         EXPECT_EQ(page.body["jobs"][0]["id"], second);
         EXPECT_EQ(page.body["next_after"], second);
         // A member sees its own tenant's jobs.
         Answer mine = f.CallAs(f.member_token_, "GET", "/api/v1/jobs");
         EXPECT_EQ(mine.body, json({{"jobs", json::array()}, {"next_after", nullptr}}));
         EXPECT_EQ(f.Get("/api/v1/jobs?state=Nope").body,
                   Error("state: unknown job state \"Nope\"; valid: Pending, Starting, Running, "
                         "Preempting, Lost, Succeeded, Failed, Cancelled"));
         EXPECT_EQ(f.CallAs(f.member_token_, "GET", "/api/v1/jobs?tenant=default").status, 403);
       }},
      {"GET /api/v1/jobs/([^/]+)",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         Answer a = f.Get(Path(id));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body["id"], id);
         EXPECT_EQ(a.body["name"], "a");
         EXPECT_EQ(a.body["state"], "Running");
         EXPECT_EQ(a.body["spec"]["command"], json({"x"}));
         EXPECT_EQ(a.body["placement"], json({{{"node", "n1"}, {"gpus", {0}}}}));
         EXPECT_EQ(a.body["ranks"], json({{{"rank", 0},
                                           {"replica", 0},
                                           {"node", "n1"},
                                           {"gpus", {0}},
                                           {"state", "running"},
                                           {"exit_code", 0},
                                           {"signal", 0},
                                           {"message", ""}}}));
         EXPECT_EQ(a.body["stopping"], "");
         ASSERT_EQ(a.body["attempts"].size(), 1u);
         EXPECT_EQ(a.body["attempts"][0]["error_lines"], json::array());
         EXPECT_EQ(a.body["attempts"][0]["error_rank"], nullptr);
         // A failed attempt shows its first error lines.
         UploadLog(f, id, "c3RhcnQKUnVudGltZUVycm9yOiBDVURBIG91dCBvZiBtZW1vcnkK");
         Exit(f, id, 1);
         Answer failed = f.Get(Path(id));
         ASSERT_EQ(failed.status, 200) << failed.text;
         EXPECT_EQ(failed.body["state"], "Failed");
         EXPECT_EQ(failed.body["attempts"][0]["error_lines"],
                   json({"RuntimeError: CUDA out of memory"}));
         EXPECT_EQ(failed.body["attempts"][0]["error_rank"], 0);
         EXPECT_EQ(f.Get(Path(999)).body, Error("job 999 does not exist"));
         EXPECT_EQ(f.Get("/api/v1/jobs/abc").body,
                   Error("job id: expected a positive integer, got \"abc\""));
       }},
      {"POST /api/v1/jobs/([^/]+)/cancel",
       [](ApiFixture& f) {
         const JobId id = f.Submit();
         Answer a = f.Call("POST", Path(id, "/cancel"));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, Summary(id, "Cancelled", "cancelled by user:admin", false, 0, {},
                                   ApiFixture::kStartMs));
         Answer again = f.Call("POST", Path(id, "/cancel"));
         EXPECT_EQ(again.status, 409);
         EXPECT_THAT(again.body["error"].get<std::string>(), HasSubstr("finished"));
         EXPECT_EQ(f.CallAs(f.member_token_, "POST", Path(f.Submit(), "/cancel")).status, 403);
       }},
      {"POST /api/v1/jobs/([^/]+)/hold",
       [](ApiFixture& f) {
         const JobId id = f.Submit();
         Answer a = f.Call("POST", Path(id, "/hold"));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body,
                   Summary(id, "Pending", "held by user:admin", true, 0, {}, ApiFixture::kStartMs));
         EXPECT_EQ(f.Call("POST", Path(999, "/hold")).body, Error("job 999 does not exist"));
       }},
      {"POST /api/v1/jobs/([^/]+)/release",
       [](ApiFixture& f) {
         const JobId id = f.Submit();
         ASSERT_EQ(f.Call("POST", Path(id, "/hold")).status, 200);
         Answer a = f.Call("POST", Path(id, "/release"));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, Summary(id, "Pending", "released by user:admin", false, 0, {},
                                   ApiFixture::kStartMs));
         ASSERT_EQ(f.Call("POST", Path(id, "/cancel")).status, 200);
         Answer finished = f.Call("POST", Path(id, "/release"));
         EXPECT_EQ(finished.status, 409);
         EXPECT_EQ(finished.body.size(), 1u);
       }},
      {"GET /api/v1/jobs/([^/]+)/events",
       [](ApiFixture& f) {
         const JobId id = f.Submit();
         ASSERT_EQ(f.Call("POST", Path(id, "/cancel")).status, 200);
         Answer a = f.Get(Path(id, "/events"));
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["events"].size(), 2u) << a.text;
         const json& submitted = a.body["events"][0];
         EXPECT_EQ(submitted["kind"], "Submitted");
         EXPECT_EQ(submitted["actor"], "user:admin");
         EXPECT_EQ(submitted["time_ms"], ApiFixture::kStartMs);
         EXPECT_EQ(a.body["events"][1]["kind"], "Cancelled");
         for (const json& e : a.body["events"]) {
           EXPECT_EQ(e.size(), 5u) << e.dump();  // seq, time_ms, actor, kind, message
         }
         EXPECT_EQ(a.body["next_after"], nullptr);
         Answer page = f.Get(Path(id, "/events?limit=1"));
         EXPECT_EQ(page.body["events"].size(), 1u);
         EXPECT_EQ(page.body["next_after"], submitted["seq"]);
         EXPECT_EQ(f.Get(Path(id, "/events?limit=0")).body,
                   Error("limit: expected an integer 1..10000, got \"0\""));
       }},
      {"GET /api/v1/jobs/([^/]+)/logs",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         UploadLog(f, id, "aGVsbG8K");
         Answer a = f.Get(Path(id, "/logs?rank=0"));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.text, "hello\n");
         EXPECT_EQ(a.Header("Content-Type"), "application/octet-stream");
         EXPECT_EQ(a.Header("X-Trainyard-Next-Offset"), "6");
         EXPECT_EQ(a.Header("X-Trainyard-Attempt"), "0");
         EXPECT_EQ(a.Header("X-Trainyard-Job-State"), "Running");
         Answer rest = f.Get(Path(id, "/logs?offset=6"));
         EXPECT_EQ(rest.status, 200);
         EXPECT_EQ(rest.text, "");
         EXPECT_EQ(f.Get(Path(id, "/logs?rank=x")).body,
                   Error("rank: expected an integer 0..100000000, got \"x\""));
         EXPECT_EQ(f.Get(Path(id, "/logs?follow=1")).body,
                   Error("unknown query parameter \"follow\"; valid: rank, attempt, offset, "
                         "wait_ms, max_bytes"));
       }},
      {"GET /api/v1/jobs/([^/]+)/logs/search",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         UploadLog(f, id, "c3RhcnQKUnVudGltZUVycm9yOiBDVURBIG91dCBvZiBtZW1vcnkK");
         Answer a = f.Get(Path(id, "/logs/search?pattern=cuda&ignore_case=true"));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"matches",
                                  {{{"attempt", 0},
                                    {"rank", 0},
                                    {"line", 2},
                                    {"offset", 6},
                                    {"text", "RuntimeError: CUDA out of memory"}}}},
                                 {"truncated", false},
                                 {"pruned", false}}));
         EXPECT_THAT(f.Get(Path(id, "/logs/search")).body["error"].get<std::string>(),
                     HasSubstr("pattern: required"));
       }},
      {"POST /api/v1/jobs/([^/]+)/checkpoint",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         Answer a = f.Call("POST", Path(id, "/checkpoint"),
                           R"({"path": "/ck/3", "step": 3, "duration_ms": 1500})");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body["id"], id);
         EXPECT_EQ(a.body["checkpoint"]["path"], "/ck/3");
         EXPECT_EQ(a.body["checkpoint"]["step"], 3);
         EXPECT_EQ(a.body["ranks"].size(), 1u);
         EXPECT_EQ(f.Call("POST", Path(id, "/checkpoint"), R"({"step": 1})").body,
                   Error("checkpoint.path: required, a non-empty string"));
         EXPECT_EQ(f.Call("POST", Path(id, "/checkpoint"), "[]").body,
                   Error("checkpoint: the body must be a JSON object"));
       }},
      {"GET /api/v1/jobs/([^/]+)/trace",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         Answer chrome = f.Get(Path(id, "/trace"));
         ASSERT_EQ(chrome.status, 200) << chrome.text;
         EXPECT_EQ(chrome.body["displayTimeUnit"], "ms");
         ASSERT_TRUE(chrome.body["traceEvents"].is_array());
         bool attempt = false;
         for (const json& e : chrome.body["traceEvents"]) {
           attempt = attempt || (e.value("ph", "") == "X" &&
                                 e.value("name", "").find("attempt") != std::string::npos);
         }
         EXPECT_TRUE(attempt) << chrome.text;
         Answer otlp = f.Get(Path(id, "/trace?format=otlp"));
         ASSERT_EQ(otlp.status, 200) << otlp.text;
         EXPECT_FALSE(otlp.body["resourceSpans"][0]["scopeSpans"][0]["spans"].empty());
         EXPECT_EQ(f.Get(Path(id, "/trace?format=svg")).body,
                   Error("format: must be chrome or otlp, got \"svg\""));
         EXPECT_EQ(f.Get(Path(id, "/trace?steps=-1")).body,
                   Error("steps: expected an integer 0..1000000, got \"-1\""));
       }},
  };
}

}  // namespace trainyard::server
