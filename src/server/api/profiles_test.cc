#include "server/api/profiles.h"

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ProfileTargetsTest, EveryRankOrOneOfARunningJob) {
  JobView v;
  v.job.id = 7;
  v.job.state = JobState::kRunning;
  v.job.attempts.emplace_back();
  v.ranks = {RankView{0, 0, "n1", {0}, "running", 0, 0, ""},
             RankView{1, 0, "n2", {1}, "running", 0, 0, ""}};
  auto all = ProfileTargets(v, std::nullopt);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[1].node, "n2");
  auto one = ProfileTargets(v, 1);
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].rank, 1);
  EXPECT_EQ(ProfileTargets(v, 2).status().message(), "profile.rank: job 7 has ranks 0..1, got 2");
  v.job.state = JobState::kPending;
  EXPECT_EQ(ProfileTargets(v, std::nullopt).status().message(),
            "job 7 is Pending; only a Running job can be profiled");
}

constexpr const char* kTrace =
    R"({"traceEvents":[{"name":"step 1","ph":"X","ts":1,"dur":2,"pid":9,"tid":1}]})";
constexpr const char* kTraceBase64 =
    "eyJ0cmFjZUV2ZW50cyI6W3sibmFtZSI6InN0ZXAgMSIsInBoIjoiWCIsInRzIjoxLCJkdXIiOjIsInBpZCI6OSwidGlk"
    "IjoxfV19";

std::string Path(JobId id, const std::string& rest) {
  return "/api/v1/jobs/" + std::to_string(id) + rest;
}

// A running job with a profile asked of its rank; the profile's id.
std::string Profiled(ApiFixture& f, JobId& id) {
  id = f.Running();
  Answer a = f.Call("POST", Path(id, "/profile"), R"({"steps": 3})");
  EXPECT_EQ(a.status, 201) << a.text;
  return a.body.value("id", "");
}

void StoreTrace(ApiFixture& f, JobId id, const std::string& pid) {
  Answer a = f.Agent("/api/v1/agent/profile", json({{"node", "n1"},
                                                    {"task_id", std::to_string(id) + ".0.0"},
                                                    {"id", pid},
                                                    {"offset", 0},
                                                    {"total_bytes", 75},
                                                    {"data_b64", kTraceBase64}})
                                                  .dump());
  ASSERT_EQ(a.status, 200) << a.text;
}

}  // namespace

std::vector<RouteCase> ProfileRouteCases() {
  return {
      {"POST /api/v1/jobs/([^/]+)/profile",
       [](ApiFixture& f) {
         const JobId pending = f.Submit();
         EXPECT_EQ(f.Call("POST", Path(pending, "/profile"), "").body,
                   Error("job " + std::to_string(pending) +
                         " is Pending; only a Running job can be profiled"));
         f.Call("POST", Path(pending, "/cancel"));
         const JobId id = f.Running();
         Answer a = f.Call("POST", Path(id, "/profile"), R"({"steps": 3})");
         ASSERT_EQ(a.status, 201) << a.text;
         const std::string pid = "p-" + std::to_string(id) + "-1";
         EXPECT_EQ(a.body, json({{"id", pid},
                                 {"job", id},
                                 {"attempt", 0},
                                 {"steps", 3},
                                 {"created_ms", ApiFixture::kStartMs},
                                 {"created_by", "user:admin"},
                                 {"done", false},
                                 {"ranks",
                                  {{{"rank", 0},
                                    {"node", "n1"},
                                    {"state", "requested"},
                                    {"bytes", 0},
                                    {"updated_ms", ApiFixture::kStartMs}}}}}));
         EXPECT_EQ(f.Call("POST", Path(id, "/profile"), R"({"steps": 0})").body,
                   Error("profile.steps: expected an integer 1..10000, got \"0\""));
         EXPECT_EQ(f.Call("POST", Path(id, "/profile"), R"({"rank": 1})").body,
                   Error("profile.rank: job " + std::to_string(id) + " has ranks 0..0, got 1"));
       }},
      {"GET /api/v1/jobs/([^/]+)/profiles",
       [](ApiFixture& f) {
         JobId id = 0;
         const std::string pid = Profiled(f, id);
         StoreTrace(f, id, pid);
         Answer a = f.Get(Path(id, "/profiles"));
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["profiles"].size(), 1u) << a.text;
         const json& p = a.body["profiles"][0];
         EXPECT_EQ(p["id"], pid);
         EXPECT_EQ(p["done"], true);
         EXPECT_EQ(p["ranks"], json({{{"rank", 0},
                                      {"node", "n1"},
                                      {"state", "stored"},
                                      {"bytes", 75},
                                      {"updated_ms", ApiFixture::kStartMs}}}));
         EXPECT_EQ(f.Get(Path(f.Submit(), "/profiles")).body, json({{"profiles", json::array()}}));
         EXPECT_EQ(f.Get(Path(id, "/profiles?all=1")).body,
                   Error("unknown query parameter \"all\"; valid: "));
       }},
      {"GET /api/v1/jobs/([^/]+)/profiles/([^/]+)",
       [](ApiFixture& f) {
         JobId id = 0;
         const std::string pid = Profiled(f, id);
         Answer early = f.Get(Path(id, "/profiles/" + pid));
         EXPECT_EQ(early.status, 409);
         EXPECT_EQ(early.body, Error("no rank of profile " + pid +
                                     " has stored its trace yet (rank 0 requested)"));
         StoreTrace(f, id, pid);
         Answer raw = f.Get(Path(id, "/profiles/" + pid + "?rank=0"));
         ASSERT_EQ(raw.status, 200) << raw.text;
         EXPECT_EQ(raw.text, kTrace);
         EXPECT_EQ(raw.Header("Content-Type"), "application/json");
         Answer merged = f.Get(Path(id, "/profiles/" + pid));
         ASSERT_EQ(merged.status, 200) << merged.text;
         EXPECT_EQ(merged.body["otherData"]["ranks"], json::array({0}));
         EXPECT_EQ(merged.body["traceEvents"].back()["name"], "step 1");
         EXPECT_EQ(merged.body["traceEvents"].back()["pid"], 0);
         EXPECT_EQ(f.Get(Path(id, "/profiles/p-" + std::to_string(id) + "-9")).status, 404);
         EXPECT_EQ(f.Get(Path(id, "/profiles/" + pid + "?rank=x")).body,
                   Error("rank: expected an integer 0..100000000, got \"x\""));
       }},
  };
}

}  // namespace trainyard::server
