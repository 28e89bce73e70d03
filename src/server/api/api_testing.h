// For the API's tests: the whole API (InstallApi, every service present) on a real HTTP
// server on a port the kernel picks, a node "n1" with two H100s, a cluster admin
// ("admin") and a member of tenant "vision" ("alice") with their tokens, and helpers
// to call routes and make jobs.
//
// The route body tests: each resource's test file (server/api/<resource>_test.cc)
// returns a RouteCase per route it installs, which calls the route and asserts the
// bodies it answers (success and the main errors). coverage_test.cc runs every case and
// fails for a route InstallApi installs that no case covers, and for a case that never
// got a successful answer from its own route.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/clock.h"
#include "server/http_testing.h"
#include "store/memory_store.h"
#include "track/series_store.h"

namespace trainyard::server {

// What a route answered.
struct Answer {
  int status = 0;  // 0: no answer
  std::string text;
  nlohmann::json body;  // the text as JSON; discarded when it is not
  httplib::Headers headers;
  std::string Header(const std::string& name) const;
};

class ApiFixture : public ::testing::Test {
 public:
  static constexpr const char* kJoinToken = "join-secret";
  static constexpr const char* kTenant = "vision";
  // The fake clock's time at the start of each test (ms since the epoch).
  static constexpr int64_t kStartMs = 1'764'000'000'000;

  void SetUp() override;
  void TearDown() override;

  // As the cluster admin.
  Answer Call(const std::string& method, const std::string& path, const std::string& body = "",
              const httplib::Headers& headers = {});
  Answer Get(const std::string& path) { return Call("GET", path); }
  // As `token` ("": no Authorization header).
  Answer CallAs(const std::string& token, const std::string& method, const std::string& path,
                const std::string& body = "", const httplib::Headers& headers = {});
  // POST with the join token.
  Answer Agent(const std::string& path, const std::string& body);

  // What `res` (the answer to `method` `path`) says; recorded in asked_.
  Answer Answered(const std::string& method, const std::string& path, const httplib::Result& res);

  // A job of `spec` (YAML) submitted by the cluster admin; its id.
  JobId Submit(const std::string& spec = "name: a\ncommand: [x]\n");
  // The same, scheduled on n1 and running.
  JobId Running(const std::string& spec = "name: a\ncommand: [x]\nresources: {gpus: 1}\n");

  // Every request Call, CallAs and Agent made in this test, and the status it got (0:
  // none): what the coverage test checks a case's route against.
  struct Asked {
    std::string method;
    std::string path;  // without the query
    int status = 0;
  };
  std::vector<Asked> asked_;

  store::MemoryStore store_;
  FakeClock clock_{Timestamp(Duration(kStartMs))};
  std::string dir_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<AccessControl> access_;
  std::unique_ptr<track::SeriesStore> series_;
  std::unique_ptr<ProfileStore> profiles_;
  std::unique_ptr<Alerting> alerting_;
  std::unique_ptr<DatasetRegistry> datasets_;
  std::string admin_token_;
  std::string member_token_;
  std::vector<RouteInfo> routes_;
  http::Server http_;
  LoopbackServer serving_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

// The checks of one route: `route` as RouteInfo names it ("GET /api/v1/jobs").
struct RouteCase {
  std::string route;
  std::function<void(ApiFixture&)> check;
};

std::vector<RouteCase> AgentRouteCases();
std::vector<RouteCase> AlertRouteCases();
std::vector<RouteCase> JobRouteCases();
std::vector<RouteCase> MonitoringRouteCases();  // and the dashboard's
std::vector<RouteCase> NodeRouteCases();
std::vector<RouteCase> ProfileRouteCases();
std::vector<RouteCase> RunRouteCases();
std::vector<RouteCase> TenancyRouteCases();
std::vector<RouteCase> UserRouteCases();
std::vector<RouteCase> DatasetRouteCases();

// {"error": message}.
inline nlohmann::json Error(const std::string& message) { return {{"error", message}}; }

}  // namespace trainyard::server
