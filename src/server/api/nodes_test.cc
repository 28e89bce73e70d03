#include "server/api/nodes.h"

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(RenderNodeForTest, JobsOfOtherTenantsAreHidden) {
  NodeView v;
  v.node.name = "n1";
  v.node.gpus.push_back({0, "GPU-0", "H100", 80LL << 30, ""});
  v.node.gpus.push_back({1, "GPU-1", "H100", 80LL << 30, ""});
  v.jobs = {4, 5};
  v.job_tenants = {"vision", "nlp"};
  v.gpu_jobs = {4, 5};
  Principal member;
  member.user = "alice";
  member.tenant = "vision";
  member.role = Role::kMember;
  json j = RenderNodeFor(v, member);
  EXPECT_EQ(j["jobs"], json::array({4}));
  EXPECT_EQ(j["gpu_jobs"], json({4, "hidden"}));
  Principal admin;
  admin.role = Role::kClusterAdmin;
  EXPECT_EQ(json(RenderNodeFor(v, admin))["gpu_jobs"], json({4, 5}));
}

// What every node answer holds about n1 besides its state, jobs and telemetry.
void ExpectN1(const json& n) {
  EXPECT_EQ(n["name"], "n1");
  EXPECT_EQ(n["address"], "10.0.0.1");
  EXPECT_EQ(n["simulated"], true);
  EXPECT_EQ(n["gpus_total"], 2);
  EXPECT_EQ(n["gpu_type"], "H100");
  EXPECT_EQ(n["milli_cpus"], 16000);
  EXPECT_EQ(n["gpus"].size(), 2u);
  EXPECT_EQ(n["gpus"][0]["uuid"], "GPU-0");
}

std::string NodePath(const std::string& rest = "") { return "/api/v1/nodes/n1" + rest; }

}  // namespace

std::vector<RouteCase> NodeRouteCases() {
  auto state_change = [](const std::string& verb, const std::string& state) {
    return RouteCase{"POST /api/v1/nodes/([^/]+)/" + verb, [verb, state](ApiFixture& f) {
                       if (verb == "uncordon") f.Call("POST", NodePath("/cordon"));
                       Answer a = f.Call("POST", NodePath("/" + verb));
                       ASSERT_EQ(a.status, 200) << a.text;
                       ExpectN1(a.body);
                       EXPECT_EQ(a.body["state"], state);
                       EXPECT_EQ(f.Call("POST", "/api/v1/nodes/n9/" + verb).status, 404);
                       Answer denied = f.CallAs(f.member_token_, "POST", NodePath("/" + verb));
                       EXPECT_EQ(denied.status, 403);
                       EXPECT_THAT(denied.body["error"].get<std::string>(), HasSubstr("may not"));
                     }};
  };
  return {
      {"GET /api/v1/nodes",
       [](ApiFixture& f) {
         const JobId id = f.Running();
         Answer a = f.Get("/api/v1/nodes");
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["nodes"].size(), 1u);
         const json& n = a.body["nodes"][0];
         ExpectN1(n);
         EXPECT_EQ(n["state"], "Ready");
         EXPECT_EQ(n["gpus_used"], 1);
         EXPECT_EQ(n["jobs"], json({id}));
         EXPECT_EQ(n["gpu_jobs"], json({id, nullptr}));
         // A member of another tenant sees the GPU busy, not the job.
         Answer member = f.CallAs(f.member_token_, "GET", "/api/v1/nodes");
         EXPECT_EQ(member.body["nodes"][0]["jobs"], json::array());
         EXPECT_EQ(member.body["nodes"][0]["gpu_jobs"], json({"hidden", nullptr}));
       }},
      {"GET /api/v1/nodes/([^/]+)",
       [](ApiFixture& f) {
         Answer hb = f.Agent("/api/v1/agent/heartbeat",
                             R"({"node": "n1", "seq": 1,
                                 "gpus": [{"index": 0, "temp_c": 60, "util_pct": 50}]})");
         ASSERT_EQ(hb.status, 200) << hb.text;
         Answer a = f.Get(NodePath());
         ASSERT_EQ(a.status, 200) << a.text;
         ExpectN1(a.body);
         EXPECT_EQ(a.body["jobs"], json::array());
         EXPECT_EQ(a.body["gpu_jobs"], json({nullptr, nullptr}));
         EXPECT_EQ(a.body["telemetry"],
                   json({{{"index", 0}, {"util_pct", 50.0}, {"temp_c", 60.0}}}));
         EXPECT_EQ(f.Get("/api/v1/nodes/n9").body, Error("node \"n9\" does not exist"));
       }},
      state_change("cordon", "Cordoned"),
      state_change("drain", "Draining"),
      state_change("uncordon", "Ready"),
      {"GET /api/v1/faults",
       [](ApiFixture& f) {
         EXPECT_EQ(f.Get("/api/v1/faults").body, json({{"faults", json::array()}}));
         ASSERT_EQ(f.Call("POST", NodePath("/faults"), R"({"kind": "slow"})").status, 201);
         Answer a = f.Get("/api/v1/faults");
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["faults"].size(), 1u);
         EXPECT_EQ(a.body["faults"][0]["kind"], "slow");
         EXPECT_EQ(a.body["faults"][0]["node"], "n1");
         EXPECT_EQ(f.CallAs(f.member_token_, "GET", "/api/v1/faults").status, 403);
       }},
      {"POST /api/v1/nodes/([^/]+)/faults",
       [](ApiFixture& f) {
         Answer a =
             f.Call("POST", NodePath("/faults"), R"({"kind": "thermal", "gpu": 1, "duration": 0})");
         ASSERT_EQ(a.status, 201) << a.text;
         const std::string id = a.body["id"];
         EXPECT_EQ(a.body, json({{"id", id},
                                 {"node", "n1"},
                                 {"kind", "thermal"},
                                 {"gpu", 1},
                                 {"until_ms", 0},
                                 {"created", "2025-11-24T16:00:00Z"},
                                 {"actor", "user:admin"}}));
         EXPECT_EQ(f.Call("POST", NodePath("/faults"), R"({"kind": "melt"})").body,
                   Error("fault.kind: unknown fault kind \"melt\"; one of xid, ecc, thermal, "
                         "link-down, slow, hang, data-stall, loss-nan, grad-spike"));
         EXPECT_EQ(f.Call("POST", "/api/v1/nodes/n9/faults", R"({"kind": "xid"})").status, 404);
       }},
      {"DELETE /api/v1/nodes/([^/]+)/faults",
       [](ApiFixture& f) {
         f.Call("POST", NodePath("/faults"), R"({"kind": "slow"})");
         f.Call("POST", NodePath("/faults"), R"({"kind": "xid", "gpu": 0})");
         Answer a = f.Call("DELETE", NodePath("/faults"));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"cleared", 2}}));
         EXPECT_EQ(f.Call("DELETE", NodePath("/faults")).body, json({{"cleared", 0}}));
       }},
      {"DELETE /api/v1/nodes/([^/]+)/faults/([^/]+)",
       [](ApiFixture& f) {
         const std::string id =
             f.Call("POST", NodePath("/faults"), R"({"kind": "slow"})").body.value("id", "");
         Answer a = f.Call("DELETE", NodePath("/faults/" + id));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"cleared", 1}}));
         Answer gone = f.Call("DELETE", NodePath("/faults/" + id));
         EXPECT_EQ(gone.status, 404) << gone.text;
         EXPECT_EQ(gone.body.size(), 1u);
       }},
      {"DELETE /api/v1/faults",
       [](ApiFixture& f) {
         f.Call("POST", NodePath("/faults"), R"({"kind": "slow"})");
         Answer a = f.Call("DELETE", "/api/v1/faults");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"cleared", 1}}));
         EXPECT_EQ(f.CallAs(f.member_token_, "DELETE", "/api/v1/faults").status, 403);
       }},
  };
}

}  // namespace trainyard::server
