#include "server/api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/spec_codec.h"
#include "server/cluster_testing.h"
#include "server/http_testing.h"
#include "server/web_assets.h"
#include "store/memory_store.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseArrayRangeTest, RangesStepsAndLists) {
  EXPECT_THAT(*ParseArrayRange("1-3"), ElementsAre(1, 2, 3));
  EXPECT_THAT(*ParseArrayRange("0-6:3"), ElementsAre(0, 3, 6));
  EXPECT_THAT(*ParseArrayRange("5,1,2-3"), ElementsAre(1, 2, 3, 5));
  EXPECT_FALSE(ParseArrayRange("").ok());
  EXPECT_FALSE(ParseArrayRange("3-1").ok());
  EXPECT_FALSE(ParseArrayRange("a-b").ok());
  EXPECT_THAT(ParseArrayRange("1-20000").status().message(), HasSubstr("at most 10000"));
}

TEST(ParseListJobsTest, FiltersAndPaging) {
  Params p = {{"state", "pending,Running"}, {"tenant", "nlp"}, {"after", "7"}, {"limit", "5"}};
  auto r = ParseListJobs(p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(r->filter.states, ElementsAre(JobState::kPending, JobState::kRunning));
  EXPECT_EQ(r->after_id, 7);
  EXPECT_EQ(r->limit, 5);
  EXPECT_THAT(ParseListJobs({{"state", "Runing"}}).status().message(), HasSubstr("Runing"));
  EXPECT_THAT(ParseListJobs({{"limit", "0"}}).status().message(), HasSubstr("limit"));
  EXPECT_THAT(ParseListJobs({{"limit", "x"}}).status().message(), HasSubstr("limit"));
  EXPECT_THAT(ParseListJobs({{"stat", "Pending"}}).status().message(), HasSubstr("stat"));
  EXPECT_FALSE(ParseListJobs({{"tenant", "bad name!"}}).ok());
}

TEST(ParseListJobsTest, OrderIsAscOrDesc) {
  EXPECT_EQ(ParseListJobs({})->order, store::JobOrder::kAscending);
  EXPECT_EQ(ParseListJobs({{"order", "asc"}})->order, store::JobOrder::kAscending);
  EXPECT_EQ(ParseListJobs({{"order", "desc"}})->order, store::JobOrder::kDescending);
  auto bad = ParseListJobs({{"order", "newest"}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("order"));
  EXPECT_THAT(bad.status().message(), HasSubstr("\"newest\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("desc"));
}

TEST(WebAssetsTest, TagsAndTheirComparison) {
  EXPECT_EQ(ContentHash(""), "cbf29ce484222325");  // FNV-1a 64's offset basis
  EXPECT_EQ(ContentHash("a"), "af63dc4c8601ec8c");
  EXPECT_TRUE(IfNoneMatchHas("\"abc\"", "\"abc\""));
  EXPECT_TRUE(IfNoneMatchHas("W/\"abc\"", "\"abc\""));  // compared weakly
  EXPECT_TRUE(IfNoneMatchHas("\"abc\"", "W/\"abc\""));
  EXPECT_TRUE(IfNoneMatchHas("\"x\",  W/\"abc\" ", "W/\"abc\""));
  EXPECT_TRUE(IfNoneMatchHas("*", "\"abc\""));
  EXPECT_FALSE(IfNoneMatchHas("", "\"abc\""));
  EXPECT_FALSE(IfNoneMatchHas("\"abcd\"", "\"abc\""));
  EXPECT_FALSE(IfNoneMatchHas("abc", "\"abc\""));
}

TEST(WebAssetsTest, ContentTypesByExtension) {
  EXPECT_EQ(ContentTypeFor("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("pages/jobs.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("icon.svg"), "image/svg+xml");
  EXPECT_EQ(ContentTypeFor("a.json"), "application/json");
  EXPECT_EQ(ContentTypeFor("a.png"), "image/png");
  EXPECT_EQ(ContentTypeFor("favicon.ico"), "image/x-icon");
  EXPECT_EQ(ContentTypeFor("README"), "application/octet-stream");
  EXPECT_EQ(ContentTypeFor("a.js/b"), "application/octet-stream");
}

TEST(WebAssetsTest, TheEmbeddedCopyHasUPlotOrAStandIn) {
  const WebAssets web = WebAssets::Embedded();
  auto uplot = web.Asset("vendor/uPlot.esm.js");
  ASSERT_TRUE(uplot.ok()) << uplot.status().ToString();
  EXPECT_EQ(uplot->content_type, "text/javascript; charset=utf-8");
  // An ES module with a default export: uPlot's, or the stand-in's.
  const bool exports_a_default = uplot->body.find("export default") != std::string::npos ||
                                 uplot->body.find("as default }") != std::string::npos;
  EXPECT_TRUE(exports_a_default) << uplot->body.substr(0, 200);
  EXPECT_EQ(uplot->etag, "\"" + ContentHash(uplot->body) + "\"");
  EXPECT_TRUE(web.Asset("vendor/uPlot.min.css").ok());
  EXPECT_EQ(web.Asset("nope.js").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(web.Asset("../vendor/uPlot.esm.js").status().code(), StatusCode::kNotFound);
  // Built from a checkout with web/src: the page; without: a 404 that says why.
  const bool built_with_page =
      std::any_of(EmbeddedWebFiles().begin(), EmbeddedWebFiles().end(),
                  [](const EmbeddedWebFile& f) { return f.path == "index.html"; });
  auto page = web.Page();
  EXPECT_EQ(page.ok(), built_with_page);
  if (page.ok()) {
    EXPECT_EQ(page->content_type, "text/html; charset=utf-8");
  } else {
    EXPECT_THAT(page.status().message(), HasSubstr("web/src"));
  }
}

// A checkout's web/ in a temporary directory, for --web-dir.
class WebDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/api_test_web_" + std::to_string(getpid());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ + "/web/src/pages");
    std::filesystem::create_directories(root_ + "/web/node_modules/uplot/dist");
    Write("web/src/index.html", "<!doctype html><title>t</title>");
    Write("web/src/app.js", "import './pages/jobs.js';");
    Write("web/src/pages/jobs.js", "export {};");
    Write("web/node_modules/uplot/dist/uPlot.esm.js", "export default class uPlot {}");
    Write("secret.txt", "tyt_secret");
    std::filesystem::create_symlink(root_ + "/secret.txt", root_ + "/web/src/link.js");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    std::ofstream(root_ + "/" + path) << text;
  }
  std::string root_;
};

TEST_F(WebDirTest, ServesTheDirectoryAndNothingOutsideIt) {
  const WebAssets web = WebAssets::FromDirectory(root_ + "/web/src");
  auto page = web.Page();
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->body, "<!doctype html><title>t</title>");
  EXPECT_EQ(page->content_type, "text/html; charset=utf-8");
  auto jobs = web.Asset("pages/jobs.js");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->body, "export {};");
  auto uplot = web.Asset("vendor/uPlot.esm.js");
  ASSERT_TRUE(uplot.ok()) << uplot.status().ToString();
  EXPECT_EQ(uplot->body, "export default class uPlot {}");
  // Read on every request: a change shows at once, with a new tag.
  const std::string before = web.Asset("app.js")->etag;
  Write("web/src/app.js", "console.log(1);");
  EXPECT_EQ(web.Asset("app.js")->body, "console.log(1);");
  EXPECT_NE(web.Asset("app.js")->etag, before);
  // Missing uPlot says how to get it.
  EXPECT_THAT(web.Asset("vendor/uPlot.min.css").status().message(), HasSubstr("make web"));
  for (const char* path : {"../../secret.txt", "pages/../../../secret.txt", "link.js",
                           "/etc/passwd", "", "pages", "pages/", "./app.js", "nope.js"}) {
    auto r = web.Asset(path);
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << path;
  }
  EXPECT_THAT(WebAssets::FromDirectory(root_).Page().status().message(), HasSubstr("--web-dir"));
}

TEST(ParseSubmitTest, ArrayJobsCarryTheirIndex) {
  auto r = ParseSubmit("name: a\ncommand: [x]\n", {{"array", "1-3"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->specs.size(), 3u);
  EXPECT_EQ(r->specs[2].labels.at(kArrayIndexLabel), "3");
}

TEST(ParseSubmitTest, BadSpecsNameTheField) {
  EXPECT_THAT(ParseSubmit("name: a\nreplicas: 0\ncommand: [x]\n", {}).status().message(),
              HasSubstr("replicas"));
  EXPECT_EQ(ParseSubmit("", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSubmit(std::string(kMaxSubmitBytes + 1, 'a'), {}).status().code(),
            StatusCode::kResourceExhausted);
}

TEST(ParseCheckpointTest, WriteTimesAreBounded) {
  auto ok = ParseCheckpoint(R"({"path": "/ck/1", "step": 3, "duration_s": 1.5})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->write_duration, Duration(1500));
  // Beyond int64 as a double: rejected, not converted (found by fuzz_api_request).
  auto huge = ParseCheckpoint(R"({"path": "/ck/1", "duration_ms": 2e113})");
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(),
              ::testing::HasSubstr("checkpoint.duration_ms: expected a number from 0 to "
                                   "2592000000 (30 days), got 2e+113"));
  EXPECT_FALSE(ParseCheckpoint(R"({"path": "/ck/1", "duration_s": 2592001})").ok());
  EXPECT_FALSE(ParseCheckpoint(R"({"path": "/ck/1", "write_duration_ms": -1})").ok());
  EXPECT_FALSE(ParseCheckpoint(R"({"path": "/ck/1", "duration_ms": "5"})").ok());
}

TEST(ParseQueueTest, TheWholeQueueWithDefaultsAndNamedErrors) {
  auto q = ParseQueue(R"({"guaranteed_gpus": 2, "limit_gpus": 8})", "vision", "train");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(*q, (Queue{"train", "vision", "", 2, 8, 1.0}));
  q = ParseQueue(R"({"guaranteed_gpus": 2, "limit_gpus": 8, "weight": 2.5, "parent": "all"})",
                 "vision", "train");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(*q, (Queue{"train", "vision", "all", 2, 8, 2.5}));
  EXPECT_THAT(ParseQueue(R"({"limit_gpus": 8})", "vision", "train").status().message(),
              HasSubstr("queue.guaranteed_gpus: required"));
  EXPECT_THAT(
      ParseQueue(R"({"guaranteed_gpus": 1.5, "limit_gpus": 8})", "v", "t").status().message(),
      HasSubstr("queue.guaranteed_gpus: expected an integer, got 1.5"));
  EXPECT_THAT(ParseQueue(R"({"guaranteed_gpus": 1, "limit_gpus": 8, "parent": 3})", "v", "t")
                  .status()
                  .message(),
              HasSubstr("queue.parent: expected a string"));
  EXPECT_THAT(ParseQueue(R"({"guaranteed_gpus": 1, "limit_gpus": 8, "wieght": 3})", "v", "t")
                  .status()
                  .message(),
              HasSubstr("queue: unknown field \"wieght\""));
  EXPECT_THAT(ParseQueue("nope", "v", "t").status().message(), HasSubstr("not valid JSON"));
}

TEST(ParseTenantQuotaTest, BothCountsRequired) {
  auto q = ParseTenantQuota(R"({"guaranteed_gpus": 16, "limit_gpus": 32})");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->guaranteed_gpus, 16);
  EXPECT_EQ(q->limit_gpus, 32);
  EXPECT_THAT(ParseTenantQuota(R"({"guaranteed_gpus": 16})").status().message(),
              HasSubstr("tenant.limit_gpus: required"));
  EXPECT_THAT(
      ParseTenantQuota(R"({"guaranteed_gpus": 1, "limit_gpus": 2, "x": 1})").status().message(),
      HasSubstr("tenant: unknown field \"x\"; valid: guaranteed_gpus, limit_gpus"));
}

TEST(ParseProfileParamsTest, DefaultsBoundsAndNamedErrors) {
  auto none = ParseProfileParams("");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->steps, kDefaultProfileSteps);
  EXPECT_FALSE(none->rank);
  auto both = ParseProfileParams(R"({"steps": 5, "rank": 1})");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->steps, 5);
  EXPECT_EQ(both->rank, 1);
  EXPECT_EQ(ParseProfileParams(R"({"steps": 10000})")->steps, 10000);
  EXPECT_THAT(ParseProfileParams(R"({"steps": 0})").status().message(),
              HasSubstr("profile.steps: expected an integer 1..10000, got \"0\""));
  EXPECT_THAT(ParseProfileParams(R"({"steps": 10001})").status().message(),
              HasSubstr("profile.steps"));
  EXPECT_THAT(ParseProfileParams(R"({"steps": "5"})").status().message(),
              HasSubstr("profile.steps"));
  EXPECT_THAT(ParseProfileParams(R"({"rank": -1})").status().message(), HasSubstr("profile.rank"));
  EXPECT_THAT(ParseProfileParams(R"({"step": 5})").status().message(),
              HasSubstr("unknown field \"step\"; valid: steps, rank"));
  EXPECT_EQ(ParseProfileParams("[").status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseProfileReportTest, StatusesAndChunks) {
  auto rec = ParseProfileReport(
      R"({"node": "n1", "task_id": "7.2.1", "offset": 0, "id": "p-7-3", "status": "recording"})");
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->kind, ProfileReport::Kind::kRecording);
  EXPECT_EQ(rec->job, 7);
  EXPECT_EQ(rec->attempt, 2);
  EXPECT_EQ(rec->rank, 1);
  EXPECT_EQ(rec->id, "p-7-3");
  auto failed = ParseProfileReport(
      R"({"node": "n1", "task_id": "7.2.1", "offset": 0, "id": "p-7-3", "status": "failed",
          "message": "no space"})");
  EXPECT_EQ(failed->kind, ProfileReport::Kind::kFailed);
  EXPECT_EQ(failed->message, "no space");
  auto chunk = ParseProfileReport(
      R"({"node": "n1", "task_id": "7.2.1", "offset": 5, "id": "p-7-3", "data_b64": "aGVsbG8=",
          "total_bytes": 10})");
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_EQ(chunk->kind, ProfileReport::Kind::kChunk);
  EXPECT_EQ(chunk->data, "hello");
  EXPECT_EQ(chunk->offset, 5);
  EXPECT_EQ(chunk->total_bytes, 10);
  // Another job's id, a missing size, an unknown status: named.
  EXPECT_THAT(ParseProfileReport(R"({"node": "n1", "task_id": "7.2.1", "offset": 0,
                                     "id": "p-8-3", "status": "recording"})")
                  .status()
                  .message(),
              HasSubstr("profile.id"));
  EXPECT_THAT(ParseProfileReport(R"({"node": "n1", "task_id": "7.2.1", "offset": 0,
                                     "id": "p-7-3", "data_b64": ""})")
                  .status()
                  .message(),
              HasSubstr("profile.total_bytes"));
  EXPECT_THAT(ParseProfileReport(R"({"node": "n1", "task_id": "7.2.1", "offset": 0,
                                     "id": "p-7-3", "status": "stored"})")
                  .status()
                  .message(),
              HasSubstr("profile.status"));
  EXPECT_THAT(ParseProfileReport(R"({"node": "n1", "id": "p-7-3"})").status().message(),
              HasSubstr("profile.task_id"));
}

TEST(RenderProfileTest, RanksWithTheirStates) {
  ProfileRequest r;
  r.id = "p-7-1";
  r.job = 7;
  r.steps = 5;
  r.created_by = "user:alice";
  r.ranks = {{0, "n0", ProfileState::kStored, "", "", 1234, {}},
             {1, "n1", ProfileState::kFailed, "torch: boom", "", 0, {}}};
  ordered_json j = RenderProfile(r);
  EXPECT_EQ(j["id"], "p-7-1");
  EXPECT_EQ(j["done"], true);
  EXPECT_EQ(j["ranks"][0]["state"], "stored");
  EXPECT_EQ(j["ranks"][0]["bytes"], 1234);
  EXPECT_FALSE(j["ranks"][0].contains("message"));
  EXPECT_EQ(j["ranks"][1]["message"], "torch: boom");
  r.ranks[1].state = ProfileState::kRecording;
  EXPECT_EQ(RenderProfile(r)["done"], false);
}

TEST(RenderJobTest, SecretEnvValuesAreRedacted) {
  SpecParseResult r = ParseSpec(
      "name: s\ncommand: [x]\nenv: {HF_TOKEN: hf_abc123, LR: '0.1'}\nsecret_env: [HF_TOKEN]\n",
      "s.yaml");
  ASSERT_TRUE(r.ok());
  JobView v;
  v.job.id = 7;
  v.job.spec = *r.spec;
  RankView rank;
  rank.message = "exited";
  v.ranks.push_back(rank);
  json j = RenderJob(v);
  EXPECT_EQ(j["spec"]["env"]["HF_TOKEN"], "<redacted>");
  EXPECT_EQ(j["spec"]["env"]["LR"], "0.1");
  EXPECT_EQ(j["spec"]["secret_env"], json::array({"HF_TOKEN"}));
  EXPECT_EQ(j.dump().find("hf_abc123"), std::string::npos) << j.dump();
}

// The whole API on a real HTTP server on a port picked by the kernel.
class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Cluster::Open(&store_, &clock_, {});
    ASSERT_TRUE(c.ok());
    cluster_ = std::move(*c);
    logs_ = std::make_unique<LogStore>(::testing::TempDir() + "/api_test_logs");
    // These tests are about the API's behaviour, not who may call it (authz_test.cc):
    // every caller is the cluster admin "local".
    auto access = AccessControl::Open(&store_, &clock_, {.insecure_local = true});
    ASSERT_TRUE(access.ok());
    access_ = std::move(*access);
    profiles_dir_ = ::testing::TempDir() + "/api_test_profiles_" + std::to_string(getpid());
    std::filesystem::remove_all(profiles_dir_);
    profiles_ = std::make_unique<ProfileStore>(profiles_dir_, &clock_);
    InstallApi(http_, *cluster_, *logs_, *access_, ApiOptions{"secret", nullptr, profiles_.get()});
    port_ = serving_.Start(http_);
    ASSERT_GT(port_, 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  }
  void TearDown() override {
    cluster_->Shutdown();
    serving_.Stop();
    std::filesystem::remove_all(profiles_dir_);
  }

  std::pair<int, json> Post(const std::string& path, const std::string& body, bool agent = false) {
    httplib::Headers h;
    if (agent) h.emplace("Authorization", "Bearer secret");
    auto res = client_->Post(path.c_str(), h, body, "application/json");
    if (!res) return {0, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }
  std::pair<int, json> Get(const std::string& path) {
    auto res = client_->Get(path.c_str());
    if (!res) return {0, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }
  // A GET with `headers`; the whole response (status 0 when there was none).
  httplib::Response Fetch(const std::string& path, const httplib::Headers& headers = {}) {
    auto res = client_->Get(path.c_str(), headers);
    if (!res) return httplib::Response{};
    return *res;
  }
  size_t StoredJobs() {
    auto page = store_.ListJobs({}, 0, 1000, store::JobOrder::kAscending);
    return page.ok() ? page->jobs.size() : 0;
  }

  store::MemoryStore store_;
  FakeClock clock_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<LogStore> logs_;
  std::string profiles_dir_;
  std::unique_ptr<ProfileStore> profiles_;
  std::unique_ptr<AccessControl> access_;
  http::Server http_;
  LoopbackServer serving_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ApiTest, SubmitGetListCancel) {
  auto [status, body] = Post("/api/v1/jobs", "name: a\ncommand: [x]\n");
  ASSERT_EQ(status, 201) << body.dump();
  const int64_t id = body["id"];
  auto [s2, job] = Get("/api/v1/jobs/" + std::to_string(id));
  EXPECT_EQ(s2, 200);
  EXPECT_EQ(job["state"], "Pending");
  EXPECT_TRUE(job.contains("attempts"));
  EXPECT_TRUE(job.contains("checkpoint"));
  auto [s3, list] = Get("/api/v1/jobs?state=Pending");
  EXPECT_EQ(s3, 200);
  ASSERT_EQ(list["jobs"].size(), 1u);
  EXPECT_EQ(list["jobs"][0]["name"], "a");
  auto [s4, cancelled] = Post("/api/v1/jobs/" + std::to_string(id) + "/cancel", "");
  EXPECT_EQ(s4, 200);
  EXPECT_EQ(cancelled["state"], "Cancelled");
  auto [s5, again] = Post("/api/v1/jobs/" + std::to_string(id) + "/cancel", "");
  EXPECT_EQ(s5, 409);
  EXPECT_THAT(again["error"].get<std::string>(), HasSubstr("finished"));
}

TEST_F(ApiTest, ConditionalGetsAnswer304UntilTheBodyChanges) {
  ASSERT_EQ(Post("/api/v1/jobs", "name: a\ncommand: [x]\n").first, 201);
  httplib::Response first = Fetch("/api/v1/jobs");
  ASSERT_EQ(first.status, 200);
  const std::string etag = first.get_header_value("ETag");
  EXPECT_EQ(etag, "W/\"" + ContentHash(first.body) + "\"");
  EXPECT_EQ(first.get_header_value("Cache-Control"), "no-cache");

  httplib::Response same = Fetch("/api/v1/jobs", {{"If-None-Match", etag}});
  EXPECT_EQ(same.status, 304);
  EXPECT_EQ(same.body, "");
  EXPECT_EQ(same.get_header_value("ETag"), etag);
  // One of a list matches too; another tag does not.
  EXPECT_EQ(Fetch("/api/v1/jobs", {{"If-None-Match", "\"old\", " + etag}}).status, 304);
  EXPECT_EQ(Fetch("/api/v1/jobs", {{"If-None-Match", "W/\"0000000000000000\""}}).status, 200);

  ASSERT_EQ(Post("/api/v1/jobs", "name: b\ncommand: [x]\n").first, 201);
  httplib::Response changed = Fetch("/api/v1/jobs", {{"If-None-Match", etag}});
  EXPECT_EQ(changed.status, 200);
  EXPECT_THAT(changed.body, HasSubstr("\"b\""));
  EXPECT_NE(changed.get_header_value("ETag"), etag);
  EXPECT_FALSE(changed.get_header_value("ETag").empty());
  // Errors carry no tag.
  EXPECT_FALSE(Fetch("/api/v1/jobs/999").has_header("ETag"));
}

TEST_F(ApiTest, ListsJobsNewestFirstAcrossPendingAndFinished) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 9; ++i) {
    auto [status, body] = Post("/api/v1/jobs", "name: j" + std::to_string(i) + "\ncommand: [x]\n");
    ASSERT_EQ(status, 201) << body.dump();
    ids.push_back(body["id"]);
  }
  // Finished ones are read from the store, the rest from memory: a mix on every page.
  for (size_t i : {1u, 2u, 5u, 8u}) {
    ASSERT_EQ(Post("/api/v1/jobs/" + std::to_string(ids[i]) + "/cancel", "").first, 200);
  }
  for (int limit : {1, 2, 3, 4, 100}) {
    std::vector<int64_t> seen;
    std::string after;
    for (int pages = 0; pages < 20; ++pages) {
      auto [status, page] = Get("/api/v1/jobs?order=desc&limit=" + std::to_string(limit) + after);
      ASSERT_EQ(status, 200) << page.dump();
      ASSERT_LE(page["jobs"].size(), static_cast<size_t>(limit));
      for (const json& j : page["jobs"]) seen.push_back(j["id"]);
      if (page["next_after"].is_null()) break;
      after = "&after=" + std::to_string(page["next_after"].get<int64_t>());
    }
    EXPECT_EQ(seen, std::vector<int64_t>(ids.rbegin(), ids.rend())) << "limit " << limit;
  }
  // With a filter, and `after` below the newest.
  auto [s1, cancelled] =
      Get("/api/v1/jobs?order=desc&state=Cancelled,Pending&after=" + std::to_string(ids[6]) +
          "&limit=3");
  ASSERT_EQ(s1, 200);
  std::vector<int64_t> got;
  for (const json& j : cancelled["jobs"]) got.push_back(j["id"]);
  EXPECT_EQ(got, (std::vector<int64_t>{ids[5], ids[4], ids[3]}));
  EXPECT_EQ(cancelled["next_after"], ids[3]);
  auto [s2, ascending] = Get("/api/v1/jobs?order=asc&limit=2");
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(ascending["jobs"][0]["id"], ids[0]);
  auto [s3, bad] = Get("/api/v1/jobs?order=up");
  EXPECT_EQ(s3, 400);
  EXPECT_THAT(bad["error"].get<std::string>(), HasSubstr("order"));
}

TEST_F(ApiTest, ServesTheDashboardWithCachingAndSecurityHeaders) {
  httplib::Response uplot = Fetch("/assets/vendor/uPlot.esm.js");
  ASSERT_EQ(uplot.status, 200);
  EXPECT_EQ(uplot.get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  const std::string etag = uplot.get_header_value("ETag");
  EXPECT_EQ(etag, "\"" + ContentHash(uplot.body) + "\"");
  EXPECT_EQ(uplot.get_header_value("Cache-Control"), "no-cache");
  EXPECT_EQ(uplot.get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(uplot.get_header_value("Referrer-Policy"), "no-referrer");
  EXPECT_THAT(uplot.get_header_value("Content-Security-Policy"),
              HasSubstr("default-src 'self'; script-src 'self';"));
  EXPECT_THAT(uplot.get_header_value("Content-Security-Policy"),
              HasSubstr("frame-ancestors 'none'"));
  httplib::Response again = Fetch("/assets/vendor/uPlot.esm.js", {{"If-None-Match", etag}});
  EXPECT_EQ(again.status, 304);
  EXPECT_EQ(again.body, "");
  EXPECT_EQ(Fetch("/assets/vendor/uPlot.min.css").get_header_value("Content-Type"),
            "text/css; charset=utf-8");

  auto [missing, error] = Get("/assets/nope.js");
  EXPECT_EQ(missing, 404);
  EXPECT_THAT(error["error"].get<std::string>(), HasSubstr("/assets/nope.js"));
  EXPECT_EQ(Get("/assets/%2e%2e/%2e%2e/CMakeLists.txt").first, 404);

  httplib::Response page = Fetch("/");
  if (page.status == 200) {
    EXPECT_EQ(page.get_header_value("Content-Type"), "text/html; charset=utf-8");
    EXPECT_FALSE(page.get_header_value("Content-Security-Policy").empty());
  } else {
    EXPECT_EQ(page.status, 404);
    EXPECT_THAT(page.body, HasSubstr("web/src"));
  }
  auto head = client_->Head("/assets/vendor/uPlot.esm.js");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");
  EXPECT_EQ(head->get_header_value("ETag"), etag);
}

TEST_F(ApiTest, BadRequestsAreRejectedAndChangeNothing) {
  EXPECT_EQ(Post("/api/v1/jobs", "name: a\nreplicas: zero\ncommand: [x]\n").first, 400);
  EXPECT_EQ(Post("/api/v1/jobs", "{not json or yaml: [").first, 400);
  EXPECT_EQ(Post("/api/v1/jobs", std::string(2 << 20, 'x')).first, 413);
  EXPECT_EQ(Post("/api/v1/jobs", std::string(kMaxRequestBytes + 10, 'x')).first, 413);
  EXPECT_EQ(Post("/api/v1/jobs?array=9-1", "name: a\ncommand: [x]\n").first, 400);
  EXPECT_EQ(Post("/api/v1/jobs?bogus=1", "name: a\ncommand: [x]\n").first, 400);
  EXPECT_EQ(StoredJobs(), 0u);

  auto [s1, e1] = Get("/api/v1/jobs/42");
  EXPECT_EQ(s1, 404);
  EXPECT_THAT(e1["error"].get<std::string>(), HasSubstr("job 42"));
  EXPECT_EQ(Get("/api/v1/jobs/abc").first, 400);
  EXPECT_EQ(Get("/api/v1/jobs?state=Nope").first, 400);
  EXPECT_EQ(Get("/api/v1/jobs?limit=100000").first, 400);
  EXPECT_EQ(Get("/api/v1/nodes/nope").first, 404);
  EXPECT_EQ(Post("/api/v1/nodes/nope/cordon", "").first, 404);
  auto [s2, e2] = Get("/api/v1/nope");
  EXPECT_EQ(s2, 404);
  EXPECT_TRUE(e2.contains("error"));
  EXPECT_EQ(Post("/api/v1/jobs/1/checkpoint", "{\"step\": 1}").first, 400);
}

TEST_F(ApiTest, AgentEndpointsNeedTheTokenAndValidInput) {
  const std::string reg =
      R"({"node": {"name": "n1", "address": "127.0.0.1", "gpu_type": "H100",
          "gpus": [{"index": 0, "uuid": "GPU-0", "memory_mib": 81920}],
          "cpus": 8, "memory_mib": 65536}, "tasks": []})";
  EXPECT_EQ(Post("/api/v1/agent/register", reg, false).first, 401);
  EXPECT_EQ(Post("/api/v1/agent/register", "{", true).first, 400);
  EXPECT_EQ(Post("/api/v1/agent/register", R"({"node": {"name": "bad name"}})", true).first, 400);
  EXPECT_EQ(Post("/api/v1/agent/heartbeat", R"({"node": "n1"})", true).first, 404);
  auto [status, body] = Post("/api/v1/agent/register", reg, true);
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["heartbeat_interval_ms"], 1000);
  auto [hs, hb] = Post("/api/v1/agent/heartbeat",
                       R"({"node": "n1", "seq": 1, "tasks": [{"task_id": "7.0.0", "job_id": 7,
                           "attempt": 0, "rank": 0, "state": "exited"}]})",
                       true);
  EXPECT_EQ(hs, 200);
  EXPECT_EQ(hb["ack"], json::array({"7.0.0"}));
  EXPECT_EQ(Post("/api/v1/agent/heartbeat",
                 R"({"node": "n1", "tasks": [{"task_id": "7.0.0", "state": "gone"}]})", true)
                .first,
            400);
  auto [ps, poll] = Post("/api/v1/agent/poll", R"({"node": "n1", "wait_ms": 0})", true);
  EXPECT_EQ(ps, 200);
  EXPECT_EQ(poll["commands"], json::array());
  EXPECT_EQ(
      Post("/api/v1/agent/logs", R"({"node": "n1", "task_id": "x", "offset": 0})", true).first,
      400);
  auto [ns, nodes] = Get("/api/v1/nodes");
  EXPECT_EQ(ns, 200);
  ASSERT_EQ(nodes["nodes"].size(), 1u);
  EXPECT_EQ(nodes["nodes"][0]["state"], "Ready");
}

TEST_F(ApiTest, AgentPollWaitsForItsCommandsWithoutAThreadAndRefusesBadInput) {
  EXPECT_EQ(Post("/api/v1/agent/poll", R"({"node": "n1", "wait_ms": 0})", false).first, 401);
  EXPECT_EQ(Post("/api/v1/agent/poll", "{", true).first, 400);
  auto [ns, no_node] = Post("/api/v1/agent/poll", R"({"wait_ms": 0})", true);
  EXPECT_EQ(ns, 400);
  EXPECT_EQ(no_node["error"], "poll.node: required, a string");
  auto [ws, bad_wait] = Post("/api/v1/agent/poll", R"({"node": "n1", "wait_ms": -1})", true);
  EXPECT_EQ(ws, 400);
  EXPECT_EQ(bad_wait["error"], "poll.wait_ms: expected an integer >= 0");
  auto [us, unknown] = Post("/api/v1/agent/poll", R"({"node": "n1", "wait_ms": 60000})", true);
  EXPECT_EQ(us, 404) << "an unregistered node's poll is answered at once";
  EXPECT_EQ(unknown["error"], "unknown node n1");
  ASSERT_EQ(Post("/api/v1/agent/register",
                 R"({"node": {"name": "n1", "cpus": 1, "memory_mib": 1024}})", true)
                .first,
            200);
  // A poll with nothing to send waits, on no thread of the server's, until there is.
  std::pair<int, json> got;
  std::thread poller([&] {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    auto res = c.Post("/api/v1/agent/poll", {{"Authorization", "Bearer secret"}},
                      R"({"node": "n1", "wait_ms": 20000})", "application/json");
    if (res) got = {res->status, json::parse(res->body, nullptr, false)};
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (http_.waiting() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(http_.waiting(), 1u);
  auto [ss, submitted] = Post("/api/v1/jobs", "name: a\ncommand: [x]\n");
  ASSERT_EQ(ss, 201);
  ASSERT_TRUE(cluster_->SchedulePass().ok());
  poller.join();
  ASSERT_EQ(got.first, 200) << got.second.dump();
  ASSERT_EQ(got.second["commands"].size(), 1u);
  EXPECT_EQ(got.second["commands"][0]["kind"], "start");
  EXPECT_EQ(got.second["commands"][0]["task"]["job_id"], submitted["id"]);
  EXPECT_EQ(http_.waiting(), 0u);
}

TEST_F(ApiTest, LogsRoundTrip) {
  auto [status, body] = Post("/api/v1/jobs", "name: a\ncommand: [x]\n");
  ASSERT_EQ(status, 201);
  const std::string id = std::to_string(body["id"].get<int64_t>());
  const std::string reg = R"({"node": {"name": "n1", "cpus": 1, "memory_mib": 1024}})";
  ASSERT_EQ(Post("/api/v1/agent/register", reg, true).first, 200);
  ASSERT_TRUE(cluster_->SchedulePass().ok());
  auto [ls, lr] =
      Post("/api/v1/agent/logs",
           R"({"node": "n1", "task_id": ")" + id + R"(.0.0", "offset": 0, "data_b64": "aGVsbG8K"})",
           true);
  ASSERT_EQ(ls, 200) << lr.dump();
  EXPECT_EQ(lr["next_offset"], 6);
  // A chunk that does not start where the copy ends is not written.
  auto [ls2, lr2] =
      Post("/api/v1/agent/logs",
           R"({"node": "n1", "task_id": ")" + id + R"(.0.0", "offset": 3, "data_b64": "aGVsbG8K"})",
           true);
  EXPECT_EQ(lr2["next_offset"], 6);
  auto res = client_->Get(("/api/v1/jobs/" + id + "/logs?rank=0").c_str());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "hello\n");
  EXPECT_EQ(res->get_header_value("X-Trainyard-Next-Offset"), "6");
  // Checkpoint lines in metrics become the job's checkpoint.
  auto [ms, mr] = Post("/api/v1/agent/metrics",
                       R"({"node": "n1", "task_id": ")" + id +
                           R"(.0.0", "offset": 0, "end_offset": 100, "lines": [
                            {"kind": "checkpoint", "path": "/ck/1", "step": 5, "duration_ms": 20},
                            {"kind": "metric", "loss": 1.5}]})",
                       true);
  ASSERT_EQ(ms, 200) << mr.dump();
  EXPECT_EQ(mr["next_offset"], 100);
  auto [js, job] = Get("/api/v1/jobs/" + id);
  EXPECT_EQ(job["checkpoint"]["path"], "/ck/1");
}

TEST_F(ApiTest, ProfileOfARunningJobRoundTrips) {
  const std::string reg = R"({"node": {"name": "n1", "cpus": 2, "memory_mib": 1024}})";
  ASSERT_EQ(Post("/api/v1/agent/register", reg, true).first, 200);
  auto [status, body] = Post("/api/v1/jobs", "name: a\nreplicas: 2\ncommand: [x]\n");
  ASSERT_EQ(status, 201);
  const std::string id = std::to_string(body["id"].get<int64_t>());
  // Not running yet: refused, saying why.
  auto [pending, why] = Post("/api/v1/jobs/" + id + "/profile", R"({"steps": 3})");
  EXPECT_EQ(pending, 409);
  EXPECT_THAT(why["error"].get<std::string>(), HasSubstr("Pending; only a Running job"));
  ASSERT_TRUE(StartRanksOn(*cluster_, "n1").ok());

  EXPECT_EQ(Post("/api/v1/jobs/" + id + "/profile", R"({"steps": 0})").first, 400);
  EXPECT_EQ(Post("/api/v1/jobs/" + id + "/profile", R"({"rank": 2})").first, 400);
  auto [created, request] = Post("/api/v1/jobs/" + id + "/profile", R"({"steps": 3})");
  ASSERT_EQ(created, 201) << request.dump();
  const std::string pid = request["id"];
  EXPECT_EQ(pid, "p-" + id + "-1");
  EXPECT_EQ(request["ranks"].size(), 2u);
  EXPECT_EQ(request["ranks"][0]["state"], "requested");
  // The agent gets one `profile` command per rank.
  auto [ps, poll] = Post("/api/v1/agent/poll", R"({"node": "n1", "wait_ms": 0})", true);
  ASSERT_EQ(poll["commands"].size(), 2u) << poll.dump();
  EXPECT_EQ(poll["commands"][0],
            json({{"kind", "profile"}, {"task_id", id + ".0.0"}, {"id", pid}, {"steps", 3}}));

  const std::string trace =
      R"({"traceEvents":[{"name":"step 4","ph":"X","ts":1,"dur":2,"pid":9,"tid":1}]})";
  auto b64 = [](const std::string& text) {
    static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < text.size(); i += 3) {
      uint32_t n = static_cast<uint8_t>(text[i]) << 16;
      if (i + 1 < text.size()) n |= static_cast<uint8_t>(text[i + 1]) << 8;
      if (i + 2 < text.size()) n |= static_cast<uint8_t>(text[i + 2]);
      out += k[(n >> 18) & 63];
      out += k[(n >> 12) & 63];
      out += i + 1 < text.size() ? k[(n >> 6) & 63] : '=';
      out += i + 2 < text.size() ? k[n & 63] : '=';
    }
    return out;
  };
  auto [us, up] = Post("/api/v1/agent/profile",
                       json({{"node", "n1"},
                             {"task_id", id + ".0.0"},
                             {"id", pid},
                             {"offset", 0},
                             {"total_bytes", trace.size()},
                             {"data_b64", b64(trace)}})
                           .dump(),
                       true);
  ASSERT_EQ(us, 200) << up.dump();
  EXPECT_EQ(up["state"], "stored");
  EXPECT_EQ(up["next_offset"], trace.size());
  auto [fs, failed] = Post("/api/v1/agent/profile",
                           json({{"node", "n1"},
                                 {"task_id", id + ".0.1"},
                                 {"id", pid},
                                 {"offset", 0},
                                 {"status", "failed"},
                                 {"message", "torch.profiler: boom"}})
                               .dump(),
                           true);
  ASSERT_EQ(fs, 200) << failed.dump();
  // The agent's token is needed, and another job's id is refused.
  EXPECT_EQ(Post("/api/v1/agent/profile", "{}", false).first, 401);

  auto [ls, list] = Get("/api/v1/jobs/" + id + "/profiles");
  ASSERT_EQ(ls, 200);
  ASSERT_EQ(list["profiles"].size(), 1u);
  EXPECT_EQ(list["profiles"][0]["done"], true);
  EXPECT_EQ(list["profiles"][0]["ranks"][1]["message"], "torch.profiler: boom");
  auto raw = client_->Get(("/api/v1/jobs/" + id + "/profiles/" + pid + "?rank=0").c_str());
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->status, 200);
  EXPECT_EQ(raw->body, trace);
  auto [ms, merged] = Get("/api/v1/jobs/" + id + "/profiles/" + pid);
  ASSERT_EQ(ms, 200) << merged.dump();
  EXPECT_EQ(merged["otherData"]["ranks"], json::array({0}));
  EXPECT_EQ(merged["traceEvents"].back()["pid"], 0);
  EXPECT_EQ(Get("/api/v1/jobs/" + id + "/profiles/" + pid + "?rank=1").first, 409);
  EXPECT_EQ(Get("/api/v1/jobs/" + id + "/profiles/p-" + id + "-9").first, 404);
  EXPECT_EQ(Get("/api/v1/jobs/" + id + "/profiles/" + pid + "?rnk=1").first, 400);
}

TEST(ParseFaultRequestTest, RefusesBadFieldsByName) {
  auto ok = ParseFaultRequest(R"({"kind": "slow", "gpu": 1, "duration": "5m"})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->gpu, 1);
  EXPECT_EQ(ok->duration, std::chrono::minutes(5));
  EXPECT_EQ(ParseFaultRequest(R"({"kind": "xid", "duration": 60})")->duration,
            std::chrono::seconds(60));
  for (auto [body, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"kind": "melt"})", "fault.kind: unknown fault kind \"melt\""},
           {R"({"gpu": 1})", "fault.kind: required"},
           {R"({"kind": "xid", "gpu": -2})", "fault.gpu: expected a GPU index"},
           {R"({"kind": "xid", "duration": 9223372036854775807})",
            "fault.duration: expected a duration"},
           {R"({"kind": "xid", "duration": "soon"})", "fault.duration: "},
           {R"({"kind": "xid", "node": "n"})", "node"},
       }) {
    auto r = ParseFaultRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(std::string(r.status().message()).find(want), std::string::npos)
        << body << " -> " << r.status().message();
  }
}

}  // namespace
}  // namespace trainyard::server
