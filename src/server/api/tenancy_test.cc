#include "server/api/tenancy.h"

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The queue `name` of tenant `tenant` in a GET /queues answer.
json QueueIn(const json& listing, const std::string& tenant, const std::string& name) {
  for (const json& q : listing["queues"]) {
    if (q["tenant"] == tenant && q["name"] == name) return q;
  }
  return nullptr;
}

}  // namespace

std::vector<RouteCase> TenancyRouteCases() {
  return {
      {"GET /api/v1/queues",
       [](ApiFixture& f) {
         f.Running("name: a\ncommand: [x]\ntenant: vision\nresources: {gpus: 1}\n");
         f.Submit("name: b\ncommand: [x]\ntenant: vision\nresources: {gpus: 4}\n");
         Answer a = f.Get("/api/v1/queues");
         ASSERT_EQ(a.status, 200) << a.text;
         // One GPU in use beyond a guarantee of none: borrowed.
         EXPECT_EQ(QueueIn(a.body, "vision", "default"), json({{"name", "default"},
                                                               {"tenant", "vision"},
                                                               {"parent", ""},
                                                               {"guaranteed_gpus", 0},
                                                               {"limit_gpus", 10000000},
                                                               {"weight", 1.0},
                                                               {"gpus_in_use", 1},
                                                               {"gpus_borrowed", 1},
                                                               {"pending_jobs", 1},
                                                               {"running_jobs", 1}}));
         EXPECT_FALSE(QueueIn(a.body, "default", "default").is_null());
       }},
      {"GET /api/v1/tenants",
       [](ApiFixture& f) {
         Answer a = f.Get("/api/v1/tenants");
         ASSERT_EQ(a.status, 200) << a.text;
         bool found = false;
         for (const json& t : a.body["tenants"]) {
           if (t["name"] != "vision") continue;
           found = true;
           EXPECT_EQ(t.size(), 4u) << t.dump();  // name, description, guaranteed_gpus, limit_gpus
           EXPECT_EQ(t["description"], "created by test");
         }
         EXPECT_TRUE(found) << a.text;
       }},
      {"PUT /api/v1/tenants/([^/]+)/quota",
       [](ApiFixture& f) {
         Answer a = f.Call("PUT", "/api/v1/tenants/vision/quota",
                           R"({"guaranteed_gpus": 2, "limit_gpus": 4})");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"name", "vision"},
                                 {"description", "created by test"},
                                 {"guaranteed_gpus", 2},
                                 {"limit_gpus", 4}}));
         EXPECT_EQ(f.Call("PUT", "/api/v1/tenants/vision/quota", R"({"guaranteed_gpus": 2})").body,
                   Error("tenant.limit_gpus: required, an integer"));
         Answer denied = f.CallAs(f.member_token_, "PUT", "/api/v1/tenants/vision/quota",
                                  R"({"guaranteed_gpus": 9, "limit_gpus": 9})");
         EXPECT_EQ(denied.status, 403);
         EXPECT_THAT(denied.body["error"].get<std::string>(),
                     HasSubstr("needs role cluster-admin"));
       }},
      {"PUT /api/v1/tenants/([^/]+)/run-as",
       [](ApiFixture& f) {
         Answer a = f.Call("PUT", "/api/v1/tenants/vision/run-as", R"({"run_as": "2001:2002"})");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"name", "vision"},
                                 {"description", "created by test"},
                                 {"guaranteed_gpus", kMaxQueueGpus},
                                 {"limit_gpus", kMaxQueueGpus},
                                 {"run_as_uid", 2001},
                                 {"run_as_gid", 2002}}));
         // A quota change keeps the identity.
         Answer q = f.Call("PUT", "/api/v1/tenants/vision/quota",
                           R"({"guaranteed_gpus": 2, "limit_gpus": 4})");
         EXPECT_EQ(q.body["run_as_uid"], 2001) << q.text;
         // Root's ids need allow_root; then they are taken.
         EXPECT_EQ(f.Call("PUT", "/api/v1/tenants/vision/run-as", R"({"run_as": "0:0"})").body,
                   Error("tenant.run_as: 0:0 is root's; a cluster admin must allow root for "
                         "tenant vision first (allow_root)"));
         Answer root = f.Call("PUT", "/api/v1/tenants/vision/run-as",
                              R"({"run_as": "0:0", "allow_root": true})");
         ASSERT_EQ(root.status, 200) << root.text;
         EXPECT_EQ(root.body["allow_root"], true);
         // Back to the agent's own identity.
         Answer reset = f.Call("PUT", "/api/v1/tenants/vision/run-as", R"({"run_as": ""})");
         ASSERT_EQ(reset.status, 200) << reset.text;
         EXPECT_FALSE(reset.body.contains("run_as_uid")) << reset.text;
         for (const char* bad : {R"({"run_as": "2001"})", R"({"run_as": "a:b"})",
                                 R"({"run_as": "-1:5"})", R"({"run_as": "9999999999:1"})"}) {
           Answer b = f.Call("PUT", "/api/v1/tenants/vision/run-as", bad);
           EXPECT_EQ(b.status, 400) << bad;
           EXPECT_THAT(b.body["error"].get<std::string>(),
                       HasSubstr("tenant.run_as: must be \"UID:GID\""))
               << bad;
         }
         EXPECT_EQ(f.Call("PUT", "/api/v1/tenants/vision/run-as", R"({"run_as": 5})").status, 400);
         EXPECT_EQ(
             f.Call("PUT", "/api/v1/tenants/vision/run-as", R"({"run_as": "", "allow_root": 1})")
                 .body,
             Error("tenant.allow_root: must be true or false, got 1"));
         EXPECT_EQ(f.Call("PUT", "/api/v1/tenants/ghost/run-as", R"({"run_as": "1:1"})").status,
                   404);
         EXPECT_EQ(f.CallAs(f.member_token_, "PUT", "/api/v1/tenants/vision/run-as",
                            R"({"run_as": "1:1"})")
                       .status,
                   403);
       }},
      {"PUT /api/v1/queues/([^/]+)/([^/]+)",
       [](ApiFixture& f) {
         Answer a = f.Call("PUT", "/api/v1/queues/vision/train",
                           R"({"guaranteed_gpus": 0, "limit_gpus": 2})");
         ASSERT_EQ(a.status, 201) << a.text;
         const json want = {{"name", "train"},      {"tenant", "vision"}, {"parent", ""},
                            {"guaranteed_gpus", 0}, {"limit_gpus", 2},    {"weight", 1.0}};
         EXPECT_EQ(a.body, want);
         Answer again = f.Call("PUT", "/api/v1/queues/vision/train",
                               R"({"guaranteed_gpus": 0, "limit_gpus": 2, "weight": 2})");
         EXPECT_EQ(again.status, 200);
         json changed = want;
         changed["weight"] = 2.0;
         EXPECT_EQ(again.body, changed);
         EXPECT_EQ(f.Call("PUT", "/api/v1/queues/vision/train", R"({"guaranteed_gpus": 1,
                           "limit_gpus": 2, "wieght": 3})")
                       .body,
                   Error("queue: unknown field \"wieght\"; valid: guaranteed_gpus, limit_gpus, "
                         "weight, parent"));
         EXPECT_EQ(f.Call("PUT", "/api/v1/queues/ghost/q", R"({"guaranteed_gpus": 0,
                           "limit_gpus": 1})")
                       .status,
                   404);
       }},
      {"DELETE /api/v1/queues/([^/]+)/([^/]+)",
       [](ApiFixture& f) {
         ASSERT_EQ(f.Call("PUT", "/api/v1/queues/vision/train",
                          R"({"guaranteed_gpus": 0, "limit_gpus": 2})")
                       .status,
                   201);
         Answer a = f.Call("DELETE", "/api/v1/queues/vision/train");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"deleted", "vision/train"}}));
         Answer gone = f.Call("DELETE", "/api/v1/queues/vision/train");
         EXPECT_EQ(gone.status, 404);
         EXPECT_EQ(gone.body.size(), 1u);
         EXPECT_EQ(f.CallAs(f.member_token_, "DELETE", "/api/v1/queues/vision/default").status,
                   403);
       }},
      {"GET /api/v1/priority-classes",
       [](ApiFixture& f) {
         Answer a = f.Get("/api/v1/priority-classes");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body,
                   json({{"priority_classes",
                          {{{"name", "p0"}, {"value", 1000}, {"preemptible", false}},
                           {{"name", "production"}, {"value", 500}, {"preemptible", true}},
                           {{"name", "normal"}, {"value", 100}, {"preemptible", true}},
                           {{"name", "best-effort"}, {"value", 0}, {"preemptible", true}}}}}));
       }},
  };
}

}  // namespace trainyard::server
