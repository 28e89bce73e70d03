#include "server/access.h"

#include <tuple>

#include <openssl/rand.h>

#include <algorithm>
#include <cstdio>

#include "core/names.h"

namespace trainyard::server {
namespace {}  // namespace

std::string RandomHex(size_t n_bytes) {
  std::vector<unsigned char> buf(n_bytes);
  if (RAND_bytes(buf.data(), static_cast<int>(buf.size())) != 1) {
    std::fprintf(stderr, "trainyard: the system's random number generator failed\n");
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n_bytes);
  for (unsigned char b : buf) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

AccessControl::AccessControl(store::Store* store, const Clock* clock, AccessOptions options)
    : store_(store), clock_(clock), opt_(options) {}

Result<std::unique_ptr<AccessControl>> AccessControl::Open(store::Store* store, const Clock* clock,
                                                           AccessOptions options) {
  std::unique_ptr<AccessControl> ac(new AccessControl(store, clock, options));
  TY_ASSIGN_OR_RETURN(std::vector<User> users, store->ListUsers());
  TY_ASSIGN_OR_RETURN(std::vector<ApiToken> tokens, store->ListTokens());
  for (User& u : users) ac->users_[u.name] = std::move(u);
  for (ApiToken& t : tokens) ac->tokens_[t.id] = std::move(t);
  return ac;
}

Result<Principal> AccessControl::Authenticate(std::string_view authorization) {
  if (opt_.insecure_local) {
    Principal p;
    p.user = "local";
    p.role = Role::kClusterAdmin;
    return p;
  }
  if (authorization.empty()) {
    return Unauthenticated(
        "no token: send Authorization: Bearer <token> (the CLI reads TRAINYARD_TOKEN or "
        "DATA_DIR/token; create one with `trainyard tokens create`)");
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (!authorization.starts_with(kBearer)) {
    return Unauthenticated("Authorization: expected \"Bearer <token>\"");
  }
  TY_ASSIGN_OR_RETURN(TokenParts parts, ParseTokenText(authorization.substr(kBearer.size())));
  const std::string hash = Sha256Hex(parts.secret);
  std::lock_guard lk(mu_);
  auto it = tokens_.find(parts.id);
  // Unknown id and wrong secret read the same, so ids cannot be probed.
  if (it == tokens_.end() || !ConstantTimeEqual(it->second.secret_hash, hash)) {
    return Unauthenticated("the token is not valid");
  }
  TY_RETURN_IF_ERROR(CheckTokenUsable(it->second, clock_->Now()));
  auto u = users_.find(it->second.user);
  if (u == users_.end()) return Unauthenticated("the token's user no longer exists");
  Principal p;
  p.user = u->second.name;
  p.tenant = u->second.tenant;
  p.role = u->second.role;
  p.priority_classes = u->second.priority_classes;
  p.token_id = parts.id;
  p.run_as_uid = u->second.run_as_uid;
  p.run_as_gid = u->second.run_as_gid;
  return p;
}

Status AccessControl::Admit(const Principal& p) {
  if (opt_.rate_per_second <= 0 || p.token_id.empty()) return Status::Ok();
  std::lock_guard lk(mu_);
  return TakeLocked(buckets_, p.token_id, "token " + p.token_id);
}

Status AccessControl::AdmitUnauthenticated(const std::string& address) {
  if (opt_.rate_per_second <= 0) return Status::Ok();
  std::lock_guard lk(mu_);
  // Addresses come and go; a full table starts afresh rather than growing.
  if (anonymous_.size() >= 100'000) anonymous_.clear();
  return TakeLocked(anonymous_, address, "unauthenticated requests from " + address);
}

Status AccessControl::TakeLocked(std::map<std::string, Bucket>& buckets, const std::string& key,
                                 const std::string& who) {
  const Timestamp now = clock_->Now();
  auto [it, fresh] = buckets.try_emplace(key, Bucket{opt_.rate_burst, now});
  Bucket& b = it->second;
  if (!fresh) {
    const double elapsed_s = std::chrono::duration<double>(now - b.last).count();
    b.tokens =
        std::min(opt_.rate_burst, b.tokens + std::max(0.0, elapsed_s) * opt_.rate_per_second);
    b.last = std::max(b.last, now);
  }
  if (b.tokens < 1) {
    char rate[64];
    std::snprintf(rate, sizeof rate, "%g requests/s (bursts of %g)", opt_.rate_per_second,
                  opt_.rate_burst);
    return ResourceExhausted("rate limit: " + who + " may make " + rate + "; slow down and retry");
  }
  b.tokens -= 1;
  return Status::Ok();
}

Result<NewToken> AccessControl::MintLocked(const std::string& user, std::string description,
                                           std::optional<Duration> ttl) {
  const Timestamp now = clock_->Now();
  NewToken out;
  TokenParts parts;
  do {
    parts.id = RandomHex(kTokenIdHexDigits / 2);
  } while (tokens_.contains(parts.id));
  parts.secret = RandomHex(kTokenSecretHexDigits / 2);
  out.token.id = parts.id;
  out.token.user = user;
  out.token.secret_hash = Sha256Hex(parts.secret);
  out.token.description = std::move(description);
  out.token.created = now;
  if (ttl) out.token.expires = now + *ttl;
  TY_RETURN_IF_ERROR(ValidateApiToken(out.token));
  store::WriteBatch batch;
  batch.PutToken(out.token);
  TY_RETURN_IF_ERROR(store_->Commit(batch));
  tokens_[out.token.id] = out.token;
  out.text = FormatTokenText(parts);
  return out;
}

Result<std::optional<NewToken>> AccessControl::Bootstrap(const std::string& name) {
  std::lock_guard lk(mu_);
  if (!users_.empty()) return std::optional<NewToken>();
  User admin;
  admin.name = name;
  admin.role = Role::kClusterAdmin;
  admin.created = clock_->Now();
  admin.created_by = "bootstrap";
  TY_RETURN_IF_ERROR(ValidateUser(admin));
  store::WriteBatch batch;
  batch.PutUser(admin);
  TY_RETURN_IF_ERROR(store_->Commit(batch));
  users_[admin.name] = admin;
  TY_ASSIGN_OR_RETURN(
      NewToken t, MintLocked(admin.name, "created when the server first started", std::nullopt));
  return std::optional<NewToken>(std::move(t));
}

std::string AccessControl::TenantOf(const std::string& name) {
  std::lock_guard lk(mu_);
  auto it = users_.find(std::string(UserOfActor(name)));
  return it == users_.end() ? "" : it->second.tenant;
}

Result<std::vector<User>> AccessControl::ListUsers(const Principal& caller) {
  TY_RETURN_IF_ERROR(Authorize(caller, Action::kReadUsers, {}));
  std::lock_guard lk(mu_);
  std::vector<User> out;
  for (const auto& [name, u] : users_) {
    if (caller.role == Role::kClusterAdmin || u.tenant == caller.tenant) out.push_back(u);
  }
  return out;
}

Result<User> AccessControl::GetUser(const Principal& caller, const std::string& name) {
  std::lock_guard lk(mu_);
  auto it = users_.find(name);
  if (it == users_.end() ||
      (caller.user != name && !Authorize(caller, Action::kReadUsers, {it->second.tenant}).ok())) {
    return NotFound("no user " + QuoteForMessage(name));
  }
  return it->second;
}

Status AccessControl::AuthorizeUserChange(const Principal& caller, const User& user) {
  return Authorize(caller, Action::kManageUsers, {user.tenant, user.name, user.role});
}

Result<User> AccessControl::CreateUser(const Principal& caller, User user) {
  user.created = clock_->Now();
  user.created_by = caller.Actor();
  TY_RETURN_IF_ERROR(ValidateUser(user));
  TY_RETURN_IF_ERROR(AuthorizeUserChange(caller, user));
  if (!user.priority_classes.empty() && caller.role != Role::kClusterAdmin) {
    return PermissionDenied("priority_classes: only a cluster-admin grants priority classes");
  }
  std::lock_guard lk(mu_);
  if (users_.contains(user.name)) {
    return AlreadyExists("user " + QuoteForMessage(user.name) + " exists");
  }
  store::WriteBatch batch;
  batch.PutUser(user);
  TY_RETURN_IF_ERROR(store_->Commit(batch));
  users_[user.name] = user;
  return user;
}

Result<User> AccessControl::UpdateUser(const Principal& caller, const std::string& name,
                                       const UserChange& change) {
  std::lock_guard lk(mu_);
  auto it = users_.find(name);
  if (it == users_.end()) return NotFound("no user " + QuoteForMessage(name));
  TY_RETURN_IF_ERROR(AuthorizeUserChange(caller, it->second));
  User updated = it->second;
  if (change.role) updated.role = *change.role;
  if (change.priority_classes) {
    if (caller.role != Role::kClusterAdmin) {
      return PermissionDenied("priority_classes: only a cluster-admin grants priority classes");
    }
    updated.priority_classes = *change.priority_classes;
  }
  if (change.run_as) {
    if (caller.role != Role::kClusterAdmin) {
      return PermissionDenied("run_as: only a cluster-admin maps users to Unix identities");
    }
    std::tie(updated.run_as_uid, updated.run_as_gid) = *change.run_as;
  }
  if (updated.role != Role::kClusterAdmin) TY_RETURN_IF_ERROR(KeepLastAdminLocked(it->second));
  if (updated.role == Role::kClusterAdmin) updated.tenant.clear();
  TY_RETURN_IF_ERROR(ValidateUser(updated));
  TY_RETURN_IF_ERROR(AuthorizeUserChange(caller, updated));
  store::WriteBatch batch;
  batch.PutUser(updated);
  TY_RETURN_IF_ERROR(store_->Commit(batch));
  it->second = updated;
  return updated;
}

Status AccessControl::KeepLastAdminLocked(const User& leaving) {
  if (leaving.role != Role::kClusterAdmin) return Status::Ok();
  for (const auto& [name, u] : users_) {
    if (u.role == Role::kClusterAdmin && name != leaving.name) return Status::Ok();
  }
  return FailedPrecondition("user " + leaving.name +
                            " is the last cluster-admin; make another one first");
}

Status AccessControl::DeleteUser(const Principal& caller, const std::string& name) {
  std::lock_guard lk(mu_);
  auto it = users_.find(name);
  if (it == users_.end()) return NotFound("no user " + QuoteForMessage(name));
  TY_RETURN_IF_ERROR(AuthorizeUserChange(caller, it->second));
  TY_RETURN_IF_ERROR(KeepLastAdminLocked(it->second));
  store::WriteBatch batch;
  batch.DeleteUser(name);
  TY_RETURN_IF_ERROR(store_->Commit(batch));
  users_.erase(it);
  std::erase_if(tokens_, [&](const auto& kv) { return kv.second.user == name; });
  return Status::Ok();
}

Result<NewToken> AccessControl::CreateToken(const Principal& caller, const std::string& user,
                                            std::string description, std::optional<Duration> ttl) {
  const std::string owner = user.empty() ? caller.user : user;
  if (ttl && ttl->count() <= 0) {
    return InvalidArgument("expires_in: must be positive, got " + FormatDuration(*ttl));
  }
  std::lock_guard lk(mu_);
  auto u = users_.find(owner);
  if (u == users_.end()) {
    if (opt_.insecure_local && user.empty()) {
      return FailedPrecondition(
          "the server runs with --insecure-local and has no users; name a user with --user");
    }
    return NotFound("no user " + QuoteForMessage(owner));
  }
  TY_RETURN_IF_ERROR(
      Authorize(caller, owner == caller.user ? Action::kManageOwnTokens : Action::kManageTokens,
                {u->second.tenant, owner, u->second.role}));
  return MintLocked(owner, std::move(description), ttl);
}

Result<std::vector<ApiToken>> AccessControl::ListTokens(const Principal& caller,
                                                        const std::string& user) {
  const std::string owner = user.empty() ? caller.user : user;
  std::lock_guard lk(mu_);
  if (owner != caller.user) {
    auto u = users_.find(owner);
    if (u == users_.end()) return NotFound("no user " + QuoteForMessage(owner));
    TY_RETURN_IF_ERROR(
        Authorize(caller, Action::kManageTokens, {u->second.tenant, owner, u->second.role}));
  }
  std::vector<ApiToken> out;
  for (const auto& [id, t] : tokens_) {
    if (t.user == owner) out.push_back(t);
  }
  return out;
}

Result<ApiToken> AccessControl::RevokeToken(const Principal& caller, const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = tokens_.find(id);
  if (it == tokens_.end()) return NotFound("no token " + QuoteForMessage(id));
  auto u = users_.find(it->second.user);
  const Target target{u == users_.end() ? "" : u->second.tenant, it->second.user,
                      u == users_.end() ? Role::kViewer : u->second.role};
  if (Status s = Authorize(
          caller, it->second.user == caller.user ? Action::kManageOwnTokens : Action::kManageTokens,
          target);
      !s.ok()) {
    // Tokens of other tenants are not even said to exist.
    if (!CanSeeTenant(caller, target.tenant)) return NotFound("no token " + QuoteForMessage(id));
    return s;
  }
  if (it->second.revoked) return it->second;
  ApiToken revoked = it->second;
  revoked.revoked = clock_->Now();
  store::WriteBatch batch;
  batch.PutToken(revoked);
  TY_RETURN_IF_ERROR(store_->Commit(batch));
  it->second = revoked;
  buckets_.erase(id);
  return revoked;
}

Status AccessControl::Record(AuditEntry entry) {
  AuditWait me;
  me.entry = std::move(entry);
  me.entry.time = clock_->Now();
  std::unique_lock lk(audit_mu_);
  audit_queue_.push_back(&me);
  while (!me.done) {
    if (audit_leader_) {
      audit_cv_.wait(lk);
      continue;
    }
    audit_leader_ = true;
    std::vector<AuditWait*> group;
    group.swap(audit_queue_);
    lk.unlock();
    store::WriteBatch batch;
    for (AuditWait* w : group) batch.AppendAudit(w->entry);
    const Status s = store_->Commit(batch);
    lk.lock();
    for (AuditWait* w : group) {
      w->result = s;
      w->done = true;
    }
    audit_leader_ = false;
    audit_cv_.notify_all();
  }
  return me.result;
}

Result<store::AuditPage> AccessControl::ListAudit(const Principal& caller, AuditFilter filter,
                                                  int64_t after_seq, int limit) {
  TY_RETURN_IF_ERROR(Authorize(caller, Action::kReadAudit, {filter.tenant}));
  if (caller.role != Role::kClusterAdmin) filter.tenant = caller.tenant;
  return store_->ListAudit(filter, after_seq, limit);
}

}  // namespace trainyard::server
