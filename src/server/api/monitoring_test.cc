#include "server/api/monitoring.h"

#include <algorithm>

#include "server/api/api_testing.h"
#include "server/web_assets.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// The lines of a Prometheus text page that start with `prefix`.
std::vector<std::string> Lines(const std::string& page, const std::string& prefix) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < page.size()) {
    size_t end = page.find('\n', at);
    if (end == std::string::npos) end = page.size();
    std::string line = page.substr(at, end - at);
    if (line.starts_with(prefix)) out.push_back(std::move(line));
    at = end + 1;
  }
  return out;
}

}  // namespace

std::vector<RouteCase> MonitoringRouteCases() {
  return {
      {"GET /api/v1/healthz",
       [](ApiFixture& f) {
         Answer a = f.CallAs("", "GET", "/api/v1/healthz");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"ok", true}}));
         EXPECT_EQ(a.text, "{\"ok\":true}\n");
       }},
      {"GET /metrics",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         Answer m = f.Call("POST", "/api/v1/runs/" + std::to_string(id) + "/metrics",
                           R"({"series": [{"key": "loss", "steps": [7], "values": [1.25]}]})");
         ASSERT_EQ(m.status, 200) << m.text;
         Answer a = f.Get("/metrics");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.Header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
         EXPECT_THAT(a.text, HasSubstr("# TYPE trainyard_nodes gauge"));
         EXPECT_THAT(Lines(a.text, "trainyard_gpus{"), Not(::testing::IsEmpty()));
         const std::string job = "job_id=\"" + std::to_string(id) + "\"";
         const auto loss = Lines(a.text, "trainyard_job_loss{");
         ASSERT_EQ(loss.size(), 1u) << a.text;
         EXPECT_THAT(loss[0], HasSubstr(job));
         EXPECT_TRUE(loss[0].ends_with(" 1.25")) << loss[0];
         const auto step = Lines(a.text, "trainyard_job_step{");
         ASSERT_EQ(step.size(), 1u) << a.text;
         EXPECT_TRUE(step[0].ends_with(" 7")) << step[0];
         // Another tenant's member sees the cluster, not the job.
         Answer member = f.CallAs(f.member_token_, "GET", "/metrics");
         ASSERT_EQ(member.status, 200);
         EXPECT_THAT(member.text, HasSubstr("trainyard_nodes"));
         EXPECT_THAT(member.text, Not(HasSubstr(job)));
         Answer anonymous = f.CallAs("", "GET", "/metrics");
         EXPECT_EQ(anonymous.status, 401);
         EXPECT_EQ(anonymous.body.size(), 1u);
       }},
      {"GET /",
       [](ApiFixture& f) {
         Answer a = f.CallAs("", "GET", "/");
         auto page = WebAssets::Embedded().Page();
         if (page.ok()) {
           ASSERT_EQ(a.status, 200);
           EXPECT_EQ(a.text, page->body);
           EXPECT_EQ(a.Header("Content-Type"), "text/html; charset=utf-8");
           EXPECT_EQ(a.Header("ETag"), page->etag);
         } else {
           EXPECT_EQ(a.status, 404);
           EXPECT_EQ(a.body, Error(page.status().message()));
         }
       }},
      {"GET /assets/(.+)",
       [](ApiFixture& f) {
         Answer a = f.CallAs("", "GET", "/assets/vendor/uPlot.min.css");
         auto css = WebAssets::Embedded().Asset("vendor/uPlot.min.css");
         ASSERT_TRUE(css.ok());
         ASSERT_EQ(a.status, 200);
         EXPECT_EQ(a.text, css->body);
         EXPECT_EQ(a.Header("Content-Type"), "text/css; charset=utf-8");
         EXPECT_EQ(a.Header("ETag"), css->etag);
         Answer missing = f.CallAs("", "GET", "/assets/nope.js");
         EXPECT_EQ(missing.status, 404);
         ASSERT_EQ(missing.body.size(), 1u);
         EXPECT_THAT(missing.body["error"].get<std::string>(), HasSubstr("nope.js"));
       }},
  };
}

}  // namespace trainyard::server
