// Every route's bodies are asserted: the cases of every resource's test file run here,
// one test each, and a route InstallApi installs without a case fails
// EveryRouteHasABodyCase. A case must call its own route (as the route's pattern
// matches) and get at least one successful answer from it, not only errors.
#include <cctype>
#include <map>
#include <regex>
#include <set>

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

std::vector<RouteCase> AllCases() {
  std::vector<RouteCase> all;
  for (auto cases :
       {AgentRouteCases, AlertRouteCases, JobRouteCases, MonitoringRouteCases, NodeRouteCases,
        ProfileRouteCases, RunRouteCases, TenancyRouteCases, UserRouteCases, DatasetRouteCases}) {
    for (RouteCase& c : cases()) all.push_back(std::move(c));
  }
  return all;
}

class RouteBodyTest : public ApiFixture, public ::testing::WithParamInterface<RouteCase> {};

// The case asked its own route, and got at least one answer that is not an error.
TEST_P(RouteBodyTest, AnswersItsBodies) {
  const RouteCase& c = GetParam();
  c.check(*this);
  const size_t space = c.route.find(' ');
  ASSERT_NE(space, std::string::npos) << c.route;
  const std::string method = c.route.substr(0, space);
  const std::regex pattern(c.route.substr(space + 1));
  int asked = 0;
  int succeeded = 0;
  for (const Asked& a : asked_) {
    if (a.method != method || !std::regex_match(a.path, pattern)) continue;
    ++asked;
    if (a.status >= 200 && a.status < 400) ++succeeded;
  }
  EXPECT_GT(asked, 0) << c.route << ": the case never calls its route";
  EXPECT_GT(succeeded, 0) << c.route << ": the case never gets a successful answer";
}

// "POST /api/v1/jobs/([^/]+)/cancel" -> "POST_jobs_id_cancel".
std::string CaseName(const ::testing::TestParamInfo<RouteCase>& info) {
  std::string route = info.param.route;
  for (const std::string& group : {std::string("([^/]+)"), std::string("(.+)")}) {
    for (size_t at; (at = route.find(group)) != std::string::npos;)
      route.replace(at, group.size(), "id");
  }
  if (size_t at = route.find("/api/v1"); at != std::string::npos) route.erase(at, 7);
  std::string name;
  for (char c : route) {
    const bool word = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (word) {
      name += c;
    } else if (!name.empty() && name.back() != '_') {
      name += '_';
    }
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name;
}

INSTANTIATE_TEST_SUITE_P(Routes, RouteBodyTest, ::testing::ValuesIn(AllCases()), CaseName);

class RouteCoverageTest : public ApiFixture {};

TEST_F(RouteCoverageTest, EveryRouteHasABodyCase) {
  std::map<std::string, int> cases;
  for (const RouteCase& c : AllCases()) ++cases[c.route];
  std::set<std::string> routes;
  for (const RouteInfo& r : routes_) {
    const std::string key = r.method + " " + r.pattern;
    routes.insert(key);
    EXPECT_TRUE(cases.contains(key))
        << key << " has no body test: add a RouteCase to its resource's *_test.cc";
  }
  for (const auto& [route, n] : cases) {
    EXPECT_TRUE(routes.contains(route)) << "the case for " << route << " names no route";
    EXPECT_EQ(n, 1) << route << " has " << n << " cases: merge them";
  }
  EXPECT_GE(routes.size(), 60u);
}

}  // namespace
}  // namespace trainyard::server
