// Who may use the API (docs/api.md, "Users, tokens, audit"; docs/security.md): the
// caller itself, users, their API tokens, and the audit log.
//
//   GET    /api/v1/whoami
//   GET    /api/v1/users                 POST /api/v1/users {"name", "tenant", "role",
//                                        "priority_classes"}
//   GET    /api/v1/users/{name}          PATCH {"role", "priority_classes", "run_as"},
//                                        DELETE
//   GET    /api/v1/tokens[?user=]        POST /api/v1/tokens {"user", "description",
//                                        "expires_in"}: the token's text, shown once
//   DELETE /api/v1/tokens/{id}           revoke
//   GET    /api/v1/audit                 ?actor, tenant, object, after, limit
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/auth.h"
#include "server/api/routes.h"
#include "server/access.h"
#include "server/api/services.h"

namespace trainyard::server {

// POST /users body, field by field (the caller fills in what it leaves out: NewUser).
struct NewUserRequest {
  std::string name;  // required
  std::optional<std::string> tenant;
  std::optional<std::string> role;
  std::optional<std::vector<std::string>> priority_classes;
};
Result<NewUserRequest> ParseNewUser(std::string_view body);
// The user to create: role member unless told; a tenant admin's users join its tenant
// unless told otherwise (a cluster admin's, none). Not yet validated (ValidateUser).
Result<User> NewUser(const NewUserRequest& request, const Principal& caller);

// PATCH /users/{name} body: what to replace.
// PATCH /users/{name} body: "role", "priority_classes", "run_as" ("UID:GID", or "" for
// the tenant's identity).
Result<UserChange> ParseUserChange(std::string_view body);

// POST /tokens body (may be empty): "user" (the caller when empty), "description",
// "expires_in" (1s..3650d; none: no expiry).
struct NewTokenRequest {
  std::string user;
  std::string description;
  std::optional<Duration> ttl;
};
Result<NewTokenRequest> ParseNewToken(std::string_view body);

nlohmann::ordered_json RenderWhoami(const Principal& who);
nlohmann::ordered_json RenderUser(const User& user);
// Never the secret or its hash: a token's text is shown once, by POST /tokens.
nlohmann::ordered_json RenderToken(const ApiToken& token);
nlohmann::ordered_json RenderAudit(const AuditEntry& entry);

void InstallUserRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
