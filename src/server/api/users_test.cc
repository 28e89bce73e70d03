#include "server/api/users.h"

#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ParseNewUserTest, FieldsByNameAndWhatTheCallerFillsIn) {
  auto r = ParseNewUser(R"({"name": "bob", "role": "viewer", "priority_classes": ["p0"]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->name, "bob");
  EXPECT_FALSE(r->tenant);
  Principal tenant_admin;
  tenant_admin.tenant = "vision";
  tenant_admin.role = Role::kTenantAdmin;
  auto u = NewUser(*r, tenant_admin);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->tenant, "vision");
  EXPECT_EQ(u->role, Role::kViewer);
  EXPECT_EQ(u->priority_classes, std::vector<std::string>{"p0"});
  EXPECT_EQ(ParseNewUser("{}").status().message(), "user.name: required");
  EXPECT_EQ(ParseNewUser(R"({"name": 5})").status().message(),
            "user.name: expected a string of at most 63 bytes");
  EXPECT_THAT(NewUser({"x", std::nullopt, "god", std::nullopt}, tenant_admin).status().message(),
              HasSubstr("valid: viewer, member, tenant-admin, cluster-admin"));
}

TEST(ParseNewTokenTest, AnEmptyBodyIsTheCallersTokenWithoutExpiry) {
  auto r = ParseNewToken("");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->user, "");
  EXPECT_FALSE(r->ttl);
  EXPECT_EQ(*ParseNewToken(R"({"expires_in": "90d"})")->ttl, std::chrono::hours(24 * 90));
  EXPECT_EQ(
      ParseNewToken(R"({"expires_in": "0s"})").status().message(),
      "token.expires_in: expected a duration from 1s to 3650d (\"90d\", \"12h\"), got \"0s\"");
}

json User(const std::string& name, const std::string& tenant, const std::string& role,
          const std::string& created_by) {
  return {{"name", name},
          {"tenant", tenant},
          {"role", role},
          {"priority_classes", json::array()},
          {"run_as", nullptr},  // the tenant's identity
          {"created_ms", ApiFixture::kStartMs},
          {"created_by", created_by}};
}

std::string TokenId(const std::string& text) {
  auto parts = ParseTokenText(text);
  return parts.ok() ? parts->id : "";
}

json Token(const std::string& id, const std::string& user, const std::string& description,
           const json& expires_ms = nullptr, const json& revoked_ms = nullptr) {
  return {{"id", id},
          {"user", user},
          {"description", description},
          {"created_ms", ApiFixture::kStartMs},
          {"expires_ms", expires_ms},
          {"revoked_ms", revoked_ms}};
}

}  // namespace

std::vector<RouteCase> UserRouteCases() {
  return {
      {"GET /api/v1/whoami",
       [](ApiFixture& f) {
         Answer a = f.Get("/api/v1/whoami");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"user", "admin"},
                                 {"tenant", ""},
                                 {"role", "cluster-admin"},
                                 {"priority_classes", json::array()},
                                 {"token_id", TokenId(f.admin_token_)}}));
         EXPECT_EQ(f.CallAs(f.member_token_, "GET", "/api/v1/whoami").body,
                   json({{"user", "alice"},
                         {"tenant", "vision"},
                         {"role", "member"},
                         {"priority_classes", json::array()},
                         {"token_id", TokenId(f.member_token_)}}));
         Answer anonymous = f.CallAs("", "GET", "/api/v1/whoami");
         EXPECT_EQ(anonymous.status, 401);
         EXPECT_EQ(anonymous.body.size(), 1u);
         EXPECT_THAT(anonymous.body["error"].get<std::string>(), HasSubstr("Authorization"));
       }},
      {"GET /api/v1/users",
       [](ApiFixture& f) {
         Answer a = f.Get("/api/v1/users");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"users",
                                  {User("admin", "", "cluster-admin", "bootstrap"),
                                   User("alice", "vision", "member", "user:admin")}}}));
         Answer denied = f.CallAs(f.member_token_, "GET", "/api/v1/users");
         EXPECT_EQ(denied.status, 403);
         EXPECT_THAT(denied.body["error"].get<std::string>(), HasSubstr("may not"));
       }},
      {"POST /api/v1/users",
       [](ApiFixture& f) {
         Answer a = f.Call("POST", "/api/v1/users",
                           R"({"name": "bob", "tenant": "vision", "role": "viewer"})");
         ASSERT_EQ(a.status, 201) << a.text;
         EXPECT_EQ(a.body, User("bob", "vision", "viewer", "user:admin"));
         EXPECT_EQ(
             f.Call("POST", "/api/v1/users", R"({"name": "x", "rol": "viewer"})").body,
             Error("user: unknown field \"rol\"; valid: name, tenant, role, priority_classes"));
         Answer exists = f.Call("POST", "/api/v1/users", R"({"name": "bob", "tenant": "vision"})");
         EXPECT_EQ(exists.status, 409);
         EXPECT_EQ(exists.body.size(), 1u);
       }},
      {"GET /api/v1/users/([^/]+)",
       [](ApiFixture& f) {
         Answer a = f.Get("/api/v1/users/alice");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, User("alice", "vision", "member", "user:admin"));
         EXPECT_EQ(f.CallAs(f.member_token_, "GET", "/api/v1/users/alice").body, a.body);
         Answer ghost = f.Get("/api/v1/users/ghost");
         EXPECT_EQ(ghost.status, 404);
         EXPECT_THAT(ghost.body["error"].get<std::string>(), HasSubstr("ghost"));
       }},
      {"PATCH /api/v1/users/([^/]+)",
       [](ApiFixture& f) {
         Answer a = f.Call("PATCH", "/api/v1/users/alice",
                           R"({"role": "viewer", "priority_classes": ["p0"]})");
         ASSERT_EQ(a.status, 200) << a.text;
         json want = User("alice", "vision", "viewer", "user:admin");
         want["priority_classes"] = {"p0"};
         EXPECT_EQ(a.body, want);
         Answer bad = f.Call("PATCH", "/api/v1/users/alice", R"({"role": "god"})");
         EXPECT_EQ(bad.status, 400);
         EXPECT_THAT(bad.body["error"].get<std::string>(),
                     HasSubstr("valid: viewer, member, tenant-admin, cluster-admin"));
         Answer last = f.Call("PATCH", "/api/v1/users/admin", R"({"role": "viewer"})");
         EXPECT_EQ(last.status, 409);
         EXPECT_THAT(last.body["error"].get<std::string>(), HasSubstr("last cluster-admin"));
       }},
      {"DELETE /api/v1/users/([^/]+)",
       [](ApiFixture& f) {
         Answer a = f.Call("DELETE", "/api/v1/users/alice");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"deleted", "alice"}}));
         EXPECT_EQ(f.Call("DELETE", "/api/v1/users/alice").status, 404);
         Answer last = f.Call("DELETE", "/api/v1/users/admin");
         EXPECT_EQ(last.status, 409);
         EXPECT_THAT(last.body["error"].get<std::string>(), HasSubstr("last cluster-admin"));
       }},
      {"GET /api/v1/tokens",
       [](ApiFixture& f) {
         Answer a = f.Get("/api/v1/tokens");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"tokens",
                                  {Token(TokenId(f.admin_token_), "admin",
                                         "created when the server first started")}}}));
         Answer alice = f.Get("/api/v1/tokens?user=alice");
         EXPECT_EQ(alice.body, json({{"tokens", {Token(TokenId(f.member_token_), "alice", "")}}}));
         EXPECT_EQ(f.CallAs(f.member_token_, "GET", "/api/v1/tokens?user=admin").status, 403);
         EXPECT_EQ(f.Get("/api/v1/tokens?owner=x").body,
                   Error("unknown query parameter \"owner\"; valid: user"));
       }},
      {"POST /api/v1/tokens",
       [](ApiFixture& f) {
         Answer a = f.Call("POST", "/api/v1/tokens",
                           R"({"user": "alice", "description": "ci", "expires_in": "1d"})");
         ASSERT_EQ(a.status, 201) << a.text;
         const std::string text = a.body.value("token", "");
         ASSERT_TRUE(ParseTokenText(text).ok()) << a.text;
         json want = Token(TokenId(text), "alice", "ci", ApiFixture::kStartMs + 86'400'000);
         want["token"] = text;
         EXPECT_EQ(a.body, want);
         EXPECT_EQ(f.CallAs(text, "GET", "/api/v1/whoami").body["user"], "alice");
         EXPECT_EQ(f.Call("POST", "/api/v1/tokens", R"({"expires_in": "-5s"})").status, 400);
         EXPECT_EQ(f.Call("POST", "/api/v1/tokens", R"({"user": "ghost"})").status, 404);
       }},
      {"DELETE /api/v1/tokens/([^/]+)",
       [](ApiFixture& f) {
         const std::string id = TokenId(f.member_token_);
         Answer a = f.Call("DELETE", "/api/v1/tokens/" + id);
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, Token(id, "alice", "", nullptr, ApiFixture::kStartMs));
         Answer revoked = f.CallAs(f.member_token_, "GET", "/api/v1/whoami");
         EXPECT_EQ(revoked.status, 401);
         EXPECT_THAT(revoked.body["error"].get<std::string>(), HasSubstr("revoked"));
         EXPECT_EQ(f.Call("DELETE", "/api/v1/tokens/0123456789ab").status, 404);
       }},
      {"GET /api/v1/audit",
       [](ApiFixture& f) {
         ASSERT_EQ(f.Call("POST", "/api/v1/users", R"({"name": "bob", "tenant": "vision"})").status,
                   201);
         Answer a = f.Get("/api/v1/audit");
         ASSERT_EQ(a.status, 200) << a.text;
         ASSERT_EQ(a.body["entries"].size(), 1u) << a.text;
         json e = a.body["entries"][0];
         EXPECT_THAT(e["source"].get<std::string>(), HasSubstr("127.0.0.1:"));
         e.erase("source");
         EXPECT_EQ(e, json({{"seq", e["seq"]},
                            {"time_ms", ApiFixture::kStartMs},
                            {"actor", "user:admin"},
                            {"token_id", TokenId(f.admin_token_)},
                            {"tenant", "vision"},
                            {"action", "POST /api/v1/users"},
                            {"object", "user/bob"},
                            {"status", 201},
                            {"message", ""}}));
         EXPECT_EQ(a.body["next_after"], nullptr);
         EXPECT_EQ(f.Get("/api/v1/audit?after=-1").body,
                   Error("after: expected an integer 0..9223372036854775807, got \"-1\""));
         EXPECT_EQ(f.CallAs(f.member_token_, "GET", "/api/v1/audit").status, 403);
       }},
  };
}

}  // namespace trainyard::server
