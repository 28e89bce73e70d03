#include "core/auth.h"

#include <algorithm>

#include "core/names.h"
#include "core/sha256.h"
#include "core/tenancy.h"

namespace trainyard {
namespace {

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool HasControlChars(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f;
  });
}

}  // namespace

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kViewer:
      return "viewer";
    case Role::kMember:
      return "member";
    case Role::kTenantAdmin:
      return "tenant-admin";
    case Role::kClusterAdmin:
      return "cluster-admin";
  }
  return "viewer";
}

Result<Role> ParseRole(std::string_view text) {
  for (Role r : {Role::kViewer, Role::kMember, Role::kTenantAdmin, Role::kClusterAdmin}) {
    if (text == RoleName(r)) return r;
  }
  return InvalidArgument("role: unknown role " + QuoteForMessage(text) +
                         "; valid: viewer, member, tenant-admin, cluster-admin");
}

Status ValidateUserName(std::string_view name) {
  auto ok = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (name.empty() || name.size() > 63 || !ok(name[0]) ||
      !std::all_of(name.begin(), name.end(),
                   [&](char c) { return ok(c) || c == '.' || c == '_' || c == '-'; })) {
    return InvalidArgument("user name: " + QuoteForMessage(name) +
                           " is not valid; use 1-63 of a-z 0-9 . _ - starting with a letter or "
                           "digit");
  }
  return Status::Ok();
}

Status ValidateUser(const User& u) {
  TY_RETURN_IF_ERROR(ValidateUserName(u.name));
  if (u.role == Role::kClusterAdmin) {
    if (!u.tenant.empty()) {
      return InvalidArgument("user " + u.name + ": a cluster-admin belongs to no tenant (got " +
                             QuoteForMessage(u.tenant) + ")");
    }
  } else {
    if (u.tenant.empty()) {
      return InvalidArgument("user " + u.name + ": tenant: required for role " +
                             std::string(RoleName(u.role)));
    }
    if (Status s = ValidateName("tenant", u.tenant); !s.ok()) return s;
  }
  if (u.priority_classes.size() > 64) {
    return InvalidArgument("user " + u.name + ": priority_classes: at most 64, got " +
                           std::to_string(u.priority_classes.size()));
  }
  for (const std::string& pc : u.priority_classes) {
    if (Status s = ValidateName("priority class", pc); !s.ok()) return s;
  }
  const std::string field = "user " + u.name + ": run_as";
  TY_RETURN_IF_ERROR(ValidateUnixIds(field, u.run_as_uid, u.run_as_gid));
  if (u.run_as_uid == 0 || u.run_as_gid == 0) {
    return InvalidArgument(field + ": " + std::to_string(u.run_as_uid) + ":" +
                           std::to_string(u.run_as_gid) +
                           " is root's; a user may not run as root (only a tenant may, where a "
                           "cluster admin allowed it: tenants update --allow-root)");
  }
  if (u.created_by.size() > 128) {
    return InvalidArgument("user " + u.name + ": created_by: at most 128 bytes");
  }
  return Status::Ok();
}

Status ValidateApiToken(const ApiToken& t) {
  if (t.id.size() != kTokenIdHexDigits || !IsLowerHex(t.id)) {
    return InvalidArgument("token id: expected " + std::to_string(kTokenIdHexDigits) +
                           " lower-case hex digits, got " + QuoteForMessage(t.id));
  }
  TY_RETURN_IF_ERROR(ValidateUserName(t.user));
  if (t.secret_hash.size() != 64 || !IsLowerHex(t.secret_hash)) {
    return InvalidArgument("token " + t.id + ": secret_hash: expected 64 lower-case hex digits");
  }
  if (t.description.size() > 200) {
    return InvalidArgument("token " + t.id + ": description: at most 200 bytes, got " +
                           std::to_string(t.description.size()));
  }
  if (HasControlChars(t.description)) {
    return InvalidArgument("token " + t.id + ": description: control characters are not allowed");
  }
  if (t.expires && *t.expires <= t.created) {
    return InvalidArgument("token " + t.id + ": expires: must be after its creation time");
  }
  return Status::Ok();
}

Result<TokenParts> ParseTokenText(std::string_view text) {
  const auto bad = [] {
    return Unauthenticated(
        "the token is malformed: expected tyt_<12 hex digits>_<64 hex digits> (as printed by "
        "`trainyard tokens create`)");
  };
  if (text.substr(0, kTokenPrefix.size()) != kTokenPrefix) return bad();
  text.remove_prefix(kTokenPrefix.size());
  if (text.size() != kTokenIdHexDigits + 1 + kTokenSecretHexDigits ||
      text[kTokenIdHexDigits] != '_') {
    return bad();
  }
  TokenParts p{std::string(text.substr(0, kTokenIdHexDigits)),
               std::string(text.substr(kTokenIdHexDigits + 1))};
  if (!IsLowerHex(p.id) || !IsLowerHex(p.secret)) return bad();
  return p;
}

std::string FormatTokenText(const TokenParts& parts) {
  return std::string(kTokenPrefix) + parts.id + "_" + parts.secret;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 h;
  h.Update(data.data(), data.size());
  return h.Hex();
}

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

Status CheckTokenUsable(const ApiToken& token, Timestamp now) {
  if (token.revoked) {
    return Unauthenticated("token " + token.id + " was revoked at " +
                           FormatTimestamp(*token.revoked) + "; create a new one");
  }
  if (token.expires && now >= *token.expires) {
    return Unauthenticated("token " + token.id + " expired at " + FormatTimestamp(*token.expires) +
                           "; create a new one");
  }
  return Status::Ok();
}

std::string_view ActionName(Action a) {
  switch (a) {
    case Action::kReadCluster:
      return "read-cluster";
    case Action::kReadJobs:
      return "read-jobs";
    case Action::kSubmitJobs:
      return "submit-jobs";
    case Action::kManageJob:
      return "manage-job";
    case Action::kManageNodes:
      return "manage-nodes";
    case Action::kReadUsers:
      return "read-users";
    case Action::kManageUsers:
      return "manage-users";
    case Action::kManageOwnTokens:
      return "manage-own-tokens";
    case Action::kManageTokens:
      return "manage-tokens";
    case Action::kReadAudit:
      return "read-audit";
    case Action::kManageTenants:
      return "manage-tenants";
    case Action::kManageQueues:
      return "manage-queues";
  }
  return "unknown";
}

std::string_view UserOfActor(std::string_view actor) {
  if (actor.starts_with("user:")) actor.remove_prefix(5);
  return actor;
}

bool CanSeeTenant(const Principal& p, std::string_view tenant) {
  return p.role == Role::kClusterAdmin || (!tenant.empty() && tenant == p.tenant);
}

Status Authorize(const Principal& p, Action action, const Target& target) {
  if (p.role == Role::kClusterAdmin) return Status::Ok();
  const auto deny = [&](std::string_view need) {
    std::string what = std::string(ActionName(action));
    if (!target.tenant.empty()) what += " in tenant " + QuoteForMessage(target.tenant);
    return PermissionDenied(
        "user " + QuoteForMessage(p.user) + " (" + std::string(RoleName(p.role)) + " of tenant " +
        QuoteForMessage(p.tenant) + ") may not " + what + "; needs " + std::string(need));
  };
  const bool own_tenant = !target.tenant.empty() && target.tenant == p.tenant;
  const bool any_tenant = target.tenant.empty();  // a listing, filtered afterwards
  switch (action) {
    case Action::kReadCluster:
      return Status::Ok();
    case Action::kReadJobs:
      if (own_tenant || any_tenant) return Status::Ok();
      return deny("to be a user of that tenant or a cluster-admin");
    case Action::kSubmitJobs:
      if (p.role == Role::kViewer) return deny("role member or above");
      if (own_tenant) return Status::Ok();
      return deny("to be a member of that tenant or a cluster-admin");
    case Action::kManageJob:
      if (p.role == Role::kViewer) return deny("role member or above");
      if (!own_tenant) return deny("to be a user of that tenant or a cluster-admin");
      if (p.role == Role::kTenantAdmin || target.owner == p.user) return Status::Ok();
      return deny("to have submitted the job, or role tenant-admin");
    case Action::kManageNodes:
    case Action::kManageTenants:
      return deny("role cluster-admin");
    case Action::kManageQueues:
      if (p.role != Role::kTenantAdmin) return deny("role tenant-admin or cluster-admin");
      if (!own_tenant) return deny("to be a tenant-admin of that tenant or a cluster-admin");
      return Status::Ok();
    case Action::kReadUsers:
    case Action::kReadAudit:
      if (p.role != Role::kTenantAdmin) return deny("role tenant-admin or cluster-admin");
      if (own_tenant || any_tenant) return Status::Ok();
      return deny("to be a tenant-admin of that tenant or a cluster-admin");
    case Action::kManageUsers:
      if (p.role != Role::kTenantAdmin) return deny("role tenant-admin or cluster-admin");
      if (!own_tenant) return deny("to be a tenant-admin of that tenant or a cluster-admin");
      if (target.role == Role::kClusterAdmin) return deny("role cluster-admin");
      return Status::Ok();
    case Action::kManageOwnTokens:
      if (target.owner == p.user) return Status::Ok();
      return deny("to own the token, or role tenant-admin of its user's tenant");
    case Action::kManageTokens:
      if (target.owner == p.user) return Status::Ok();
      if (p.role != Role::kTenantAdmin || !own_tenant) {
        return deny("to own the token, or role tenant-admin of its user's tenant");
      }
      if (target.role == Role::kClusterAdmin) return deny("role cluster-admin");
      return Status::Ok();
  }
  return deny("a rule for this action");
}

Status AuthorizePriorityClass(const Principal& p, std::string_view name, int32_t value,
                              int32_t default_value) {
  if (p.role == Role::kClusterAdmin || value <= default_value) return Status::Ok();
  if (std::find(p.priority_classes.begin(), p.priority_classes.end(), name) !=
      p.priority_classes.end()) {
    return Status::Ok();
  }
  return PermissionDenied("user " + QuoteForMessage(p.user) + " may not use priority class " +
                          QuoteForMessage(name) + " (value " + std::to_string(value) +
                          ", above the default's " + std::to_string(default_value) +
                          "); a cluster-admin can grant it with `trainyard users update " + p.user +
                          " --priority-class " + std::string(name) + "`");
}

}  // namespace trainyard
