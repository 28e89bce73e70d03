#include "server/api/alerts.h"

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ParseAlertQueryTest, StatesAndFilters) {
  auto q = ParseAlertQuery({{"state", "pending,firing"}, {"node", "n1"}});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->states, (std::set<std::string>{"pending", "firing"}));
  monitor::Alert a;
  a.rule = "Hot";
  a.state = monitor::AlertState::kFiring;
  a.labels = {{"node", "n1"}};
  EXPECT_TRUE(AlertMatches(a, *q));
  a.labels = {{"node", "n2"}};
  EXPECT_FALSE(AlertMatches(a, *q));
  EXPECT_EQ(ParseAlertQuery({{"state", "firing,on"}}).status().message(),
            "state: unknown alert state \"on\"; one of pending, firing, resolved");
}

TEST(MaySeeAlertTest, ATenantsAlertsAreItsOwn) {
  Principal member;
  member.tenant = "vision";
  member.role = Role::kMember;
  EXPECT_TRUE(MaySeeAlert(member, {{"node", "n1"}}));
  EXPECT_TRUE(MaySeeAlert(member, {{"tenant", "vision"}}));
  EXPECT_FALSE(MaySeeAlert(member, {{"tenant", "nlp"}}));
}

// GPU 0 of n1 at 90 C (rule Hot fires) and a job of tenant "default" logging loss 20
// (rule LossHigh fires), after one evaluation. Returns the job.
JobId Firing(ApiFixture& f) {
  Answer hb = f.Agent("/api/v1/agent/heartbeat",
                      R"({"node": "n1", "seq": 1, "gpus": [{"index": 0, "temp_c": 90}]})");
  EXPECT_EQ(hb.status, 200) << hb.text;
  const JobId id = f.Running();
  Answer m = f.Call("POST", "/api/v1/runs/" + std::to_string(id) + "/metrics",
                    R"({"series": [{"key": "loss", "steps": [1], "values": [20],
                              "times_ms": [)" +
                        std::to_string(ApiFixture::kStartMs) + "]}]}");
  EXPECT_EQ(m.status, 200) << m.text;
  EXPECT_TRUE(f.alerting_->Evaluate().ok());
  return id;
}

}  // namespace

std::vector<RouteCase> AlertRouteCases() {
  return {
      {"GET /api/v1/alerts",
       [](ApiFixture& f) {
         const JobId id = Firing(f);
         Answer a = f.Get("/api/v1/alerts?state=firing&node=n1");
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["alerts"].size(), 1u) << a.text;
         json hot = a.body["alerts"][0];
         EXPECT_FALSE(hot["fingerprint"].get<std::string>().empty());
         hot.erase("fingerprint");
         EXPECT_EQ(
             hot,
             json({{"rule", "Hot"},
                   {"state", "firing"},
                   {"labels",
                    {{"alertname", "Hot"}, {"gpu", "0"}, {"node", "n1"}, {"severity", "warning"}}},
                   {"annotations", {{"summary", "GPU 0 on n1 is at 90 C"}}},
                   {"active_at", "2025-11-24T16:00:00Z"},
                   {"starts_at", "2025-11-24T16:00:00Z"},
                   {"ends_at", nullptr},
                   {"value", 90}}));
         Answer job = f.Get("/api/v1/alerts?job=" + std::to_string(id));
         ASSERT_EQ(job.body["alerts"].size(), 1u) << job.text;
         EXPECT_EQ(job.body["alerts"][0]["rule"], "LossHigh");
         EXPECT_EQ(job.body["alerts"][0]["labels"]["tenant"], "default");
         // Another tenant's member sees the node's alert, not the job's.
         Answer member = f.CallAs(f.member_token_, "GET", "/api/v1/alerts");
         ASSERT_EQ(member.body["alerts"].size(), 1u) << member.text;
         EXPECT_EQ(member.body["alerts"][0]["rule"], "Hot");
         EXPECT_EQ(f.Get("/api/v1/alerts?state=resolved").body, json({{"alerts", json::array()}}));
         EXPECT_EQ(f.Get("/api/v1/alerts?state=on").body,
                   Error("state: unknown alert state \"on\"; one of pending, firing, resolved"));
       }},
      {"GET /api/v1/alerts/events",
       [](ApiFixture& f) {
         Firing(f);
         Answer a = f.Get("/api/v1/alerts/events?limit=10");
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["events"].size(), 2u) << a.text;
         std::set<std::string> rules;
         for (const json& e : a.body["events"]) {
           EXPECT_EQ(e["kind"], "firing");
           EXPECT_EQ(e["at"], "2025-11-24T16:00:00Z");
           EXPECT_EQ(e.size(), 6u) << e.dump();  // at, kind, rule, fingerprint, labels, detail
           rules.insert(e["rule"]);
         }
         EXPECT_EQ(rules, (std::set<std::string>{"Hot", "LossHigh"}));
         Answer member = f.CallAs(f.member_token_, "GET", "/api/v1/alerts/events");
         ASSERT_EQ(member.body["events"].size(), 1u) << member.text;
         EXPECT_EQ(member.body["events"][0]["detail"], "GPU 0 on n1 is at 90 C");
         EXPECT_EQ(f.Get("/api/v1/alerts/events?limit=1001").body,
                   Error("limit: expected an integer 1..1000, got \"1001\""));
       }},
      {"GET /api/v1/alerts/rules",
       [](ApiFixture& f) {
         Answer a = f.Get("/api/v1/alerts/rules");
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["rules"].size(), 2u) << a.text;
         EXPECT_EQ(a.body["rules"][0], json({{"name", "Hot"},
                                             {"signal", "gpu.temp_c"},
                                             {"condition", "threshold_above"},
                                             {"threshold", 85},
                                             {"window", "5m"},
                                             {"for", "0s"},
                                             {"keep_firing_for", "0s"},
                                             {"severity", "warning"},
                                             {"action", "notify"},
                                             {"origin", "test-rules.yaml:2"}}));
         EXPECT_EQ(a.body["rules"][1]["name"], "LossHigh");
         EXPECT_EQ(a.body["disabled"], json::array());
         EXPECT_EQ(f.CallAs("", "GET", "/api/v1/alerts/rules").status, 401);
       }},
      {"GET /api/v1/jobs/([^/]+)/diagnosis",
       [](ApiFixture& f) {
         const JobId id = Firing(f);
         Answer a = f.Get("/api/v1/jobs/" + std::to_string(id) + "/diagnosis");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body["job_id"], id) << a.text;
         EXPECT_THAT(a.body["text"].get<std::string>(), HasSubstr(std::to_string(id)));
         EXPECT_EQ(f.Get("/api/v1/jobs/999/diagnosis").body, Error("job 999 does not exist"));
       }},
  };
}

}  // namespace trainyard::server
