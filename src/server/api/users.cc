#include "server/api/users.h"

#include <chrono>

#include "core/names.h"
#include "core/tenancy.h"
#include "server/api/request.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::json;
using nlohmann::ordered_json;

Result<NewUserRequest> ParseNewUser(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "user"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "user", {"name", "tenant", "role", "priority_classes"}));
  auto name = StringField(j, "user", "name", 63);
  auto tenant = StringField(j, "user", "tenant", 63);
  auto role = StringField(j, "user", "role", 32);
  auto classes = StringListField(j, "user", "priority_classes");
  for (const Status& s : {name.status(), tenant.status(), role.status(), classes.status()}) {
    TY_RETURN_IF_ERROR(s);
  }
  if (!*name) return InvalidArgument("user.name: required");
  return NewUserRequest{**name, *tenant, *role, *classes};
}

Result<User> NewUser(const NewUserRequest& r, const Principal& caller) {
  User u;
  u.name = r.name;
  u.role = Role::kMember;
  if (r.role) {
    TY_ASSIGN_OR_RETURN(u.role, ParseRole(*r.role));
  }
  u.tenant = r.tenant ? *r.tenant : u.role == Role::kClusterAdmin ? "" : caller.tenant;
  if (r.priority_classes) u.priority_classes = *r.priority_classes;
  return u;
}

Result<UserChange> ParseUserChange(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "user"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "user", {"role", "priority_classes", "run_as"}));
  TY_ASSIGN_OR_RETURN(std::optional<std::string> role_text, StringField(j, "user", "role", 32));
  UserChange c;
  TY_ASSIGN_OR_RETURN(c.priority_classes, StringListField(j, "user", "priority_classes"));
  if (role_text) {
    TY_ASSIGN_OR_RETURN(c.role, ParseRole(*role_text));
  }
  TY_ASSIGN_OR_RETURN(std::optional<std::string> run_as, StringField(j, "user", "run_as", 32));
  if (run_as) {
    int64_t uid = -1, gid = -1;
    if (!run_as->empty() && !ParseUnixIds(*run_as, uid, gid)) {
      return InvalidArgument("user.run_as: must be \"UID:GID\" (each 0.." +
                             std::to_string(kMaxUnixId) +
                             ") or \"\" for the tenant's identity, got " + QuoteForMessage(*run_as));
    }
    c.run_as = {uid, gid};
  }
  return c;
}

Result<NewTokenRequest> ParseNewToken(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body.empty() ? std::string_view("{}") : body, "token"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "token", {"user", "description", "expires_in"}));
  auto owner = StringField(j, "token", "user", 63);
  auto description = StringField(j, "token", "description", 200);
  auto expires = StringField(j, "token", "expires_in", 32);
  for (const Status& s : {owner.status(), description.status(), expires.status()}) {
    TY_RETURN_IF_ERROR(s);
  }
  NewTokenRequest r{owner->value_or(""), description->value_or(""), std::nullopt};
  if (*expires) {
    auto d = ParseDuration(**expires);
    if (!d.ok() || d->count() <= 0 || *d > Duration(std::chrono::hours(24 * 3650))) {
      return InvalidArgument(
          "token.expires_in: expected a duration from 1s to 3650d (\"90d\", \"12h\"), got " +
          QuoteForMessage(**expires));
    }
    r.ttl = *d;
  }
  return r;
}

ordered_json RenderWhoami(const Principal& who) {
  return {{"user", who.user},
          {"tenant", who.tenant},
          {"role", RoleName(who.role)},
          {"priority_classes", who.priority_classes},
          {"token_id", who.token_id}};
}

ordered_json RenderUser(const User& u) {
  return {{"name", u.name},
          {"tenant", u.tenant},
          {"role", RoleName(u.role)},
          {"priority_classes", u.priority_classes},
          {"run_as", u.run_as_uid >= 0 ? ordered_json(std::to_string(u.run_as_uid) + ":" +
                                                      std::to_string(u.run_as_gid))
                                       : ordered_json(nullptr)},
          {"created_ms", u.created.time_since_epoch().count()},
          {"created_by", u.created_by}};
}

ordered_json RenderToken(const ApiToken& t) {
  return {{"id", t.id},
          {"user", t.user},
          {"description", t.description},
          {"created_ms", t.created.time_since_epoch().count()},
          {"expires_ms",
           t.expires ? ordered_json(t.expires->time_since_epoch().count()) : ordered_json(nullptr)},
          {"revoked_ms", t.revoked ? ordered_json(t.revoked->time_since_epoch().count())
                                   : ordered_json(nullptr)}};
}

ordered_json RenderAudit(const AuditEntry& e) {
  return {{"seq", e.seq},       {"time_ms", e.time.time_since_epoch().count()},
          {"actor", e.actor},   {"token_id", e.token_id},
          {"tenant", e.tenant}, {"action", e.action},
          {"object", e.object}, {"source", e.source},
          {"status", e.status}, {"message", e.message}};
}

namespace {

Result<Reply> Whoami(const ApiServices&, const Request&, Call& call) {
  return Reply::Json(200, RenderWhoami(call.who));
}

Result<Reply> ListUsers(const ApiServices& s, const Request&, Call& call) {
  TY_ASSIGN_OR_RETURN(std::vector<User> users, s.access.ListUsers(call.who));
  ordered_json out = ordered_json::array();
  for (const User& u : users) out.push_back(RenderUser(u));
  return Reply::Json(200, ordered_json{{"users", std::move(out)}});
}

Result<Reply> CreateUser(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(NewUserRequest r, ParseNewUser(req.body));
  call.object = "user/" + r.name;
  TY_ASSIGN_OR_RETURN(User u, NewUser(r, call.who));
  call.tenant = u.tenant;
  TY_RETURN_IF_ERROR(ValidateUser(u));
  TY_RETURN_IF_ERROR(Authorize(call.who, Action::kManageUsers, {u.tenant, u.name, u.role}));
  // A cluster admin's new user may bring its tenant into being.
  if (!u.tenant.empty()) TY_RETURN_IF_ERROR(s.cluster.EnsureTenant(u.tenant, call.who.Actor()));
  TY_ASSIGN_OR_RETURN(User created, s.access.CreateUser(call.who, u));
  return Reply::Json(201, RenderUser(created));
}

Result<Reply> GetUser(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(User u, s.access.GetUser(call.who, req.matches[1].str()));
  return Reply::Json(200, RenderUser(u));
}

Result<Reply> UpdateUser(const ApiServices& s, const Request& req, Call& call) {
  const std::string name = req.matches[1].str();
  call.object = "user/" + name.substr(0, 63);
  call.tenant = s.access.TenantOf(name);
  TY_ASSIGN_OR_RETURN(UserChange c, ParseUserChange(req.body));
  TY_ASSIGN_OR_RETURN(User u, s.access.UpdateUser(call.who, name, c));
  return Reply::Json(200, RenderUser(u));
}

Result<Reply> DeleteUser(const ApiServices& s, const Request& req, Call& call) {
  const std::string name = req.matches[1].str();
  call.object = "user/" + name.substr(0, 63);
  call.tenant = s.access.TenantOf(name);
  TY_RETURN_IF_ERROR(s.access.DeleteUser(call.who, name));
  return Reply::Json(200, ordered_json{{"deleted", name}});
}

Result<Reply> ListTokens(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(CheckParams(req.params, {"user"}));
  TY_ASSIGN_OR_RETURN(std::vector<ApiToken> tokens,
                      s.access.ListTokens(call.who, Param(req.params, "user").value_or("")));
  ordered_json out = ordered_json::array();
  for (const ApiToken& t : tokens) out.push_back(RenderToken(t));
  return Reply::Json(200, ordered_json{{"tokens", std::move(out)}});
}

Result<Reply> CreateToken(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(NewTokenRequest r, ParseNewToken(req.body));
  const std::string owner = r.user.empty() ? call.who.user : r.user;
  call.object = "user/" + owner;
  call.tenant = s.access.TenantOf(owner);
  TY_ASSIGN_OR_RETURN(NewToken t, s.access.CreateToken(call.who, r.user, r.description, r.ttl));
  call.object = "token/" + t.token.id;
  ordered_json out = RenderToken(t.token);
  out["token"] = t.text;
  return Reply::Json(201, out);
}

Result<Reply> RevokeToken(const ApiServices& s, const Request& req, Call& call) {
  const std::string id = req.matches[1].str();
  call.object = "token/" + id.substr(0, 32);
  TY_ASSIGN_OR_RETURN(ApiToken t, s.access.RevokeToken(call.who, id));
  call.tenant = s.access.TenantOf(t.user);
  return Reply::Json(200, RenderToken(t));
}

Result<Reply> ListAudit(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(CheckParams(req.params, {"actor", "tenant", "object", "after", "limit"}));
  AuditFilter f;
  f.actor = Param(req.params, "actor").value_or("");
  f.tenant = Param(req.params, "tenant").value_or("");
  f.object = Param(req.params, "object").value_or("");
  TY_ASSIGN_OR_RETURN(Paging paging, ParsePaging(req.params, 100));
  TY_ASSIGN_OR_RETURN(store::AuditPage page,
                      s.access.ListAudit(call.who, f, paging.after, paging.limit));
  ordered_json out = ordered_json::array();
  for (const AuditEntry& e : page.entries) out.push_back(RenderAudit(e));
  return Reply::Json(
      200, ordered_json{{"entries", std::move(out)},
                        {"next_after", page.next_after_seq ? ordered_json(*page.next_after_seq)
                                                           : ordered_json(nullptr)}});
}

}  // namespace

void InstallUserRoutes(Routes& routes, const ApiServices& s) {
  routes.User("GET", V1("/whoami"), Action::kReadCluster, Bind(s, Whoami));
  routes.User("GET", V1("/users"), Action::kReadUsers, Bind(s, ListUsers));
  routes.User("POST", V1("/users"), Action::kManageUsers, Bind(s, CreateUser));
  routes.User("GET", V1(R"(/users/([^/]+))"), Action::kReadUsers, Bind(s, GetUser));
  routes.User("PATCH", V1(R"(/users/([^/]+))"), Action::kManageUsers, Bind(s, UpdateUser));
  routes.User("DELETE", V1(R"(/users/([^/]+))"), Action::kManageUsers, Bind(s, DeleteUser));
  routes.User("GET", V1("/tokens"), Action::kManageOwnTokens, Bind(s, ListTokens));
  routes.User("POST", V1("/tokens"), Action::kManageOwnTokens, Bind(s, CreateToken));
  routes.User("DELETE", V1(R"(/tokens/([^/]+))"), Action::kManageOwnTokens, Bind(s, RevokeToken));
  routes.User("GET", V1("/audit"), Action::kReadAudit, Bind(s, ListAudit));
}

}  // namespace trainyard::server
