#include "server/api/runs.h"

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ParseListRunsTest, TheJobListingsQueryPlusExperimentAndFilter) {
  auto r = ParseListRuns({{"experiment", "bert"}, {"filter", "metrics.loss < 2"}, {"limit", "5"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->experiment, "bert");
  EXPECT_EQ(r->jobs.limit, 5);
  EXPECT_FALSE(r->filter.MatchesAll());
  EXPECT_THAT(ParseListRuns({{"filter", "staet = 'Running'"}}).status().message(),
              HasSubstr("staet"));
  EXPECT_THAT(ParseListRuns({{"experiments", "x"}}).status().message(),
              HasSubstr("unknown query parameter \"experiments\""));
}

TEST(ParseSeriesReadTest, RangeAndBuckets) {
  auto r = ParseSeriesRead({{"rank", "1"}, {"from", "-5"}, {"to", "100"}, {"buckets", "0"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->range.from_step, -5);
  EXPECT_EQ(r->range.to_step, 100);
  EXPECT_EQ(r->range.buckets, 0);
  EXPECT_EQ(ParseSeriesRead({{"buckets", "100001"}}).status().message(),
            "buckets: expected an integer 0..100000, got \"100001\"");
}

TEST(ParseMetricsUploadTest, JsonOrTextByContentType) {
  auto j = ParseMetricsUpload(7, "application/json", {},
                              R"({"series": [{"key": "loss", "steps": [1], "values": [2]}]})", 5);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->points, 1);
  auto t = ParseMetricsUpload(7, "text/plain; charset=utf-8", {{"rank", "2"}}, "loss 1 2.5\n", 5);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->appends.size(), 1u);
  EXPECT_EQ(t->appends[0].rank, 2);
  EXPECT_EQ(t->appends[0].points[0].time_ms, 5);
  EXPECT_EQ(ParseMetricsUpload(7, "text/plain", {{"rank", "-1"}}, "", 5).status().message(),
            "rank: expected an integer 0..1000000, got \"-1\"");
  EXPECT_THAT(ParseMetricsUpload(7, "text/plain", {{"step", "1"}}, "", 5).status().message(),
              HasSubstr("unknown query parameter \"step\""));
}

std::string RunPath(JobId id, const std::string& rest = "") {
  return "/api/v1/runs/" + std::to_string(id) + rest;
}

// A job whose rank 0 logged loss 2.5 at step 1 and 2.0 at step 2, and a param.
JobId JobWithLoss(ApiFixture& f, const std::string& spec = "name: a\ncommand: [x]\n") {
  const JobId id = f.Submit(spec);
  Answer a = f.Call("POST", RunPath(id, "/metrics"),
                    R"({"series": [{"key": "loss", "steps": [1, 2], "values": [2.5, 2.0],
                                    "times_ms": [1000, 2000]}], "params": {"lr": 0.001}})");
  EXPECT_EQ(a.status, 200) << a.text;
  return id;
}

}  // namespace

std::vector<RouteCase> RunRouteCases() {
  return {
      {"GET /api/v1/runs",
       [](ApiFixture& f) {
         const JobId bert = JobWithLoss(f, "name: a\ncommand: [x]\nexperiment: {name: bert}\n");
         f.Submit();
         Answer a = f.Get("/api/v1/runs?experiment=bert");
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["runs"].size(), 1u) << a.text;
         const json& run = a.body["runs"][0];
         EXPECT_EQ(run["id"], bert);
         EXPECT_EQ(run["experiment"], "bert");
         EXPECT_EQ(run["state"], "Pending");
         EXPECT_EQ(run["tenant"], "default");
         EXPECT_EQ(run["user"], "admin");
         EXPECT_EQ(run["submit_time_ms"], ApiFixture::kStartMs);
         EXPECT_EQ(run["params"], json({{"lr", "0.001"}}));
         EXPECT_EQ(run["metrics"], json({{"loss", 2.0}}));
         EXPECT_EQ(a.body["next_after"], nullptr);
         Answer filtered = f.Get("/api/v1/runs?filter=metrics.loss%20%3E%203");
         EXPECT_EQ(filtered.body, json({{"runs", json::array()}, {"next_after", nullptr}}));
         EXPECT_THAT(f.Get("/api/v1/runs?filter=staet%20%3D%201").body["error"].get<std::string>(),
                     HasSubstr("staet"));
       }},
      {"GET /api/v1/runs/compare",
       [](ApiFixture& f) {
         const JobId a = JobWithLoss(f), b = f.Submit();
         Answer c =
             f.Get("/api/v1/runs/compare?ids=" + std::to_string(a) + "," + std::to_string(b));
         ASSERT_EQ(c.status, 200) << c.text;
         EXPECT_EQ(c.body["runs"], json({a, b}));
         ASSERT_FALSE(c.body["attributes"].empty()) << c.text;
         EXPECT_EQ(c.body["attributes"][0],
                   json({{"key", "name"}, {"values", {"a", "a"}}, {"differs", false}}));
         EXPECT_EQ(c.body["params"],
                   json({{{"key", "lr"}, {"values", {"0.001", nullptr}}, {"differs", true}}}));
         ASSERT_EQ(c.body["metrics"].size(), 1u);
         EXPECT_EQ(c.body["metrics"][0]["key"], "loss");
         EXPECT_EQ(c.body["metrics"][0]["best_is"], "min");
         EXPECT_EQ(c.body["metrics"][0]["last"], json({2.0, nullptr}));
         EXPECT_EQ(f.Get("/api/v1/runs/compare?ids=" + std::to_string(a)).body,
                   Error("ids: name at least two runs, e.g. ids=4,7"));
         EXPECT_EQ(f.Get("/api/v1/runs/compare?ids=1,x").body,
                   Error("job id: expected a positive integer, got \"x\""));
       }},
      {"GET /api/v1/runs/([^/]+)",
       [](ApiFixture& f) {
         const JobId id = JobWithLoss(f);
         Answer a = f.Get(RunPath(id));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body["id"], id);
         EXPECT_EQ(a.body["name"], "a");
         EXPECT_EQ(a.body["command"], json({"x"}));
         EXPECT_EQ(a.body["resources"],
                   json({{"replicas", 1}, {"gpus_per_replica", 0}, {"gpu_type", ""}}));
         EXPECT_EQ(a.body["params"], json({{"lr", "0.001"}}));
         EXPECT_EQ(a.body["metrics"]["loss"]["last"], 2.0);
         EXPECT_EQ(a.body["mfu"], nullptr);
         EXPECT_EQ(a.body["start_time_ms"], nullptr);
         EXPECT_EQ(f.Get(RunPath(999)).body, Error("job 999 does not exist"));
       }},
      {"GET /api/v1/runs/([^/]+)/metrics",
       [](ApiFixture& f) {
         const JobId id = JobWithLoss(f);
         Answer a = f.Get(RunPath(id, "/metrics"));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"series",
                                  {{{"key", "loss"},
                                    {"rank", 0},
                                    {"count", 2},
                                    {"nan_count", 0},
                                    {"first_step", 1},
                                    {"last_step", 2},
                                    {"last_time_ms", 2000},
                                    {"last", 2.0},
                                    {"min", 2.0},
                                    {"max", 2.5}}}}}));
         EXPECT_EQ(f.Get(RunPath(f.Submit(), "/metrics")).body, json({{"series", json::array()}}));
         EXPECT_EQ(f.CallAs(f.member_token_, "GET", RunPath(id, "/metrics")).status, 403);
       }},
      {"GET /api/v1/runs/([^/]+)/metrics/(.+)",
       [](ApiFixture& f) {
         const JobId id = JobWithLoss(f);
         Answer a = f.Get(RunPath(id, "/metrics/loss?buckets=0"));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"run", id},
                                 {"key", "loss"},
                                 {"rank", 0},
                                 {"buckets", 0},
                                 {"points",
                                  {{"first_step", {1, 2}},
                                   {"last_step", {1, 2}},
                                   {"time_ms", {1000, 2000}},
                                   {"count", {1, 1}},
                                   {"nan_count", {0, 0}},
                                   {"min", {2.5, 2.0}},
                                   {"max", {2.5, 2.0}},
                                   {"last", {2.5, 2.0}}}}}));
         EXPECT_EQ(f.Get(RunPath(id, "/metrics/acc")).body,
                   Error("run " + std::to_string(id) + " has no metric \"acc\""));
         EXPECT_EQ(f.Get(RunPath(id, "/metrics/a%20b")).body,
                   Error("key \"a b\": must be 1-128 characters of A-Z a-z 0-9 _ . / -"));
         EXPECT_EQ(f.Get(RunPath(id, "/metrics/loss?buckets=x")).body,
                   Error("buckets: expected an integer 0..100000, got \"x\""));
       }},
      {"POST /api/v1/runs/([^/]+)/metrics",
       [](ApiFixture& f) {
         const JobId id = f.Submit();
         Answer a = f.Call("POST", RunPath(id, "/metrics"),
                           R"({"series": [{"key": "loss", "steps": [1, 2], "values": [3, 2]},
                                          {"key": "acc", "steps": [2], "values": [0.5]}],
                               "params": {"lr": 0.1, "optimizer": "adam"}})");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"points", 3}, {"series", 2}, {"params", 2}}));
         Answer text = f.Call("POST", RunPath(id, "/metrics?rank=1"), "loss 3 1.5\nloss 4 1.25\n",
                              {{"Content-Type", "text/plain"}});
         ASSERT_EQ(text.status, 200) << text.text;
         EXPECT_EQ(text.body, json({{"points", 2}, {"series", 1}, {"params", 0}}));
         Answer bad = f.Call("POST", RunPath(id, "/metrics"), "[1]");
         EXPECT_EQ(bad.body, Error("metrics: the body must be a JSON object (docs/api.md)"));
         EXPECT_EQ(f.CallAs(f.member_token_, "POST", RunPath(id, "/metrics"), "{}").status, 403);
       }},
  };
}

}  // namespace trainyard::server
