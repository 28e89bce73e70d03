// Identity and access: users, their roles, API tokens, the audit log, and the one
// table that says which role may do what (Authorize).
//
// A user belongs to one tenant (a cluster admin to none: it sees every tenant) and
// has one role:
//   viewer        reads its tenant's jobs, logs and events, nodes, queues, classes;
//   member        + submits jobs to its tenant's queues and manages (cancel, hold,
//                 release, checkpoint) the jobs it submitted;
//   tenant-admin  + manages every job of its tenant, its tenant's users and tokens,
//                 its tenant's queues (within the tenant's quota), reads its tenant's
//                 audit entries;
//   cluster-admin everything: nodes (cordon, drain), every tenant and its quota,
//                 every user.
// Priority classes above the default class ("normal") are usable only by users
// granted them by name (User::priority_classes) and by cluster admins.
//
// An API token is shown once, at creation, as "tyt_<id>_<secret>"; the store keeps
// only the id and the SHA-256 of the secret (hex). Tokens expire (optionally) and can
// be revoked; agent join tokens are a different thing (server/api.h) and are never
// accepted where a user token is expected, nor the other way round.
//
// Everything here is pure: no I/O, no clock (times are handed in), no randomness.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace trainyard {

enum class Role { kViewer, kMember, kTenantAdmin, kClusterAdmin };

// "viewer", "member", "tenant-admin", "cluster-admin".
std::string_view RoleName(Role r);
Result<Role> ParseRole(std::string_view text);

struct User {
  std::string name;    // [a-z0-9][a-z0-9._-]{0,62}
  std::string tenant;  // empty only for a cluster admin
  Role role = Role::kMember;
  // Priority classes beyond the default ones this user may submit with ("p0").
  std::vector<std::string> priority_classes;
  Timestamp created{};
  std::string created_by;  // "user:alice", "bootstrap"
  // The Unix identity this user's jobs run as on the nodes, in place of its tenant's
  // run_as (docs/execution.md); -1: its tenant's. Never root's: only a tenant's
  // identity may be root, and only where a cluster admin allowed it.
  int64_t run_as_uid = -1;
  int64_t run_as_gid = -1;

  bool operator==(const User&) const = default;
};

struct ApiToken {
  std::string id;           // 12 lower-case hex digits; public (listings, audit)
  std::string user;         // whose it is
  std::string secret_hash;  // SHA-256 of the secret, 64 lower-case hex digits
  std::string description;  // at most 200 bytes
  Timestamp created{};
  std::optional<Timestamp> expires;  // none: never
  std::optional<Timestamp> revoked;  // none: not revoked

  bool operator==(const ApiToken&) const = default;
};

// One audited request: who did what to which object, when, from where, and how it
// ended. Appended, never changed.
struct AuditEntry {
  int64_t seq = 0;  // assigned by the store, increasing
  Timestamp time{};
  std::string actor;     // "user:alice", "local" (insecure mode), "anonymous"
  std::string token_id;  // empty when none was presented
  std::string tenant;    // the tenant of the object, empty for cluster-wide objects
  std::string action;    // "POST /api/v1/jobs/42/cancel"
  std::string object;    // "job/42", "node/gpu-7", "token/0a1b2c3d4e5f", "user/bob"
  std::string source;    // the client's address, "10.0.0.7:53412"
  int32_t status = 0;    // the HTTP status answered
  std::string message;   // the error, if any

  bool operator==(const AuditEntry&) const = default;
};

struct AuditFilter {
  std::string actor{};   // exact; empty: any
  std::string tenant{};  // exact; empty: any
  std::string object{};  // exact; empty: any
};

Status ValidateUserName(std::string_view name);
// Name, role/tenant consistency (a cluster admin has no tenant, others have one),
// class names.
Status ValidateUser(const User& u);
Status ValidateApiToken(const ApiToken& t);

// --- tokens -----------------------------------------------------------------------

inline constexpr std::string_view kTokenPrefix = "tyt_";
inline constexpr size_t kTokenIdHexDigits = 12;
inline constexpr size_t kTokenSecretHexDigits = 64;

struct TokenParts {
  std::string id;
  std::string secret;
};
// "tyt_<12 hex>_<64 hex>" -> its parts. The message never repeats the text (it may be
// a secret pasted in the wrong place).
Result<TokenParts> ParseTokenText(std::string_view text);
std::string FormatTokenText(const TokenParts& parts);
// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);
// Compares without an early exit, so the time taken says nothing of where they differ.
bool ConstantTimeEqual(std::string_view a, std::string_view b);
// Ok when `token` is usable at `now`; Unauthenticated-style PermissionDenied naming
// why (revoked at T, expired at T) otherwise.
Status CheckTokenUsable(const ApiToken& token, Timestamp now);

// --- authorization ------------------------------------------------------------------

// Who is asking, once authenticated.
struct Principal {
  std::string user;    // "alice"; "local" in --insecure-local mode
  std::string tenant;  // empty for a cluster admin
  Role role = Role::kViewer;
  std::vector<std::string> priority_classes;
  std::string token_id;
  int64_t run_as_uid = -1;  // the user's own identity (User::run_as_uid), -1: none
  int64_t run_as_gid = -1;

  std::string Actor() const { return "user:" + user; }
};

// The user an actor string names: "user:alice" -> "alice"; other actors as they are.
std::string_view UserOfActor(std::string_view actor);

// What a request does. Every API endpoint maps to exactly one (server/api.cc).
enum class Action {
  kReadCluster,      // health, nodes, queues, tenants, priority classes (filtered)
  kReadJobs,         // list, get, events, logs of jobs
  kSubmitJobs,       // submit to a tenant's queue
  kManageJob,        // cancel, hold, release, report a checkpoint
  kManageNodes,      // cordon, drain, uncordon
  kReadUsers,        // list users
  kManageUsers,      // create, change, delete users
  kManageOwnTokens,  // create, list, revoke one's own tokens
  kManageTokens,     // tokens of other users
  kReadAudit,
  kManageTenants,  // create tenants, set their quota (cluster-admin only)
  kManageQueues,   // create, change, delete a tenant's queues (its tenant-admin)
};
std::string_view ActionName(Action a);

// The object an action is about. Empty tenant: cluster-wide (or "every tenant", for
// listings, which are then filtered with CanSee).
struct Target {
  std::string tenant{};
  std::string owner{};       // the user a job or token belongs to; empty when none
  Role role{Role::kViewer};  // kManageUsers / kManageTokens: the role given or held
};

// Ok, or PermissionDenied naming the user, the action and what would be needed.
Status Authorize(const Principal& p, Action action, const Target& target);
// Whether `p` may see objects of `tenant` (listings are filtered with this).
bool CanSeeTenant(const Principal& p, std::string_view tenant);
// Whether `p` may submit with priority class `name` of `value`; `default_value` is the
// value of the default class (kDefaultPriorityClass).
Status AuthorizePriorityClass(const Principal& p, std::string_view name, int32_t value,
                              int32_t default_value);

}  // namespace trainyard
