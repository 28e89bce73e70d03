// AccessControl: who may talk to the control plane — users, their API tokens, the
// per-token rate limit and the audit log — kept in memory and written through the
// Store before any change is acknowledged (core/auth.h has the rules themselves).
//
// Authentication: "Authorization: Bearer tyt_<id>_<secret>". The token is found by
// its id, its secret compared by SHA-256 in constant time, then checked for
// revocation and expiry against the injected clock, then its user looked up (a
// deleted user's tokens stop working with it). Every failure is Unauthenticated with
// a message that never repeats the secret.
//
// In insecure-local mode (`trainyard server --insecure-local`, loopback only) no
// token is asked for and every caller is the cluster admin "local".
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/auth.h"
#include "core/status.h"
#include "server/clock.h"
#include "store/store.h"

namespace trainyard::server {

// What PATCH /users/{name} changes; nullopt: left as it is.
struct UserChange {
  std::optional<Role> role;
  std::optional<std::vector<std::string>> priority_classes;
  // {uid, gid}, or {-1, -1}: back to the tenant's identity.
  std::optional<std::pair<int64_t, int64_t>> run_as;
};

struct AccessOptions {
  bool insecure_local = false;
  // Token bucket per token: this many requests per second on average, bursts of
  // `rate_burst`. 0: no limit.
  double rate_per_second = 200;
  double rate_burst = 400;
};

// A new token: its text is shown once and not kept anywhere.
struct NewToken {
  ApiToken token;
  std::string text;
};

class AccessControl {
 public:
  // Loads users and tokens from `store`. `clock` outlives this object.
  static Result<std::unique_ptr<AccessControl>> Open(store::Store* store, const Clock* clock,
                                                     AccessOptions options);

  bool insecure() const { return opt_.insecure_local; }

  // The caller presenting `authorization` (the header's value; may be empty).
  Result<Principal> Authenticate(std::string_view authorization);
  // ResourceExhausted when `p`'s token has used up its rate; Ok otherwise.
  Status Admit(const Principal& p);
  // The same for requests that failed authentication, per client address (the same
  // rate as one token), so that they cannot flood the audit log.
  Status AdmitUnauthenticated(const std::string& address);

  // When no user exists yet: creates the cluster admin `name` and a token for it.
  // nullopt when users exist already.
  Result<std::optional<NewToken>> Bootstrap(const std::string& name);

  // --- users (each checks Authorize for `caller`) ------------------------------------
  Result<std::vector<User>> ListUsers(const Principal& caller);
  Result<User> GetUser(const Principal& caller, const std::string& name);
  // The user's tenant must exist (the API creates it first for a cluster admin).
  Result<User> CreateUser(const Principal& caller, User user);
  // Replaces what `change` sets of an existing user. Priority classes and the Unix
  // identity only a cluster admin grants.
  Result<User> UpdateUser(const Principal& caller, const std::string& name,
                          const UserChange& change);
  Status DeleteUser(const Principal& caller, const std::string& name);

  // --- tokens ------------------------------------------------------------------------
  // For `user` (empty: the caller), valid for `ttl` (nullopt: no expiry).
  Result<NewToken> CreateToken(const Principal& caller, const std::string& user,
                               std::string description, std::optional<Duration> ttl);
  // The caller's own tokens, or those of `user` when given (ascending id).
  Result<std::vector<ApiToken>> ListTokens(const Principal& caller, const std::string& user);
  Result<ApiToken> RevokeToken(const Principal& caller, const std::string& id);

  // --- audit ----------------------------------------------------------------------------
  // Appends one entry (seq and time are filled in here) and returns once it is
  // committed. Concurrent calls share one transaction (group commit), so auditing
  // every write costs one store commit per burst, not one per request.
  Status Record(AuditEntry entry);
  Result<store::AuditPage> ListAudit(const Principal& caller, AuditFilter filter, int64_t after_seq,
                                     int limit);

  // The tenant of user `name`, empty for a cluster admin or an unknown user.
  std::string TenantOf(const std::string& name);

 private:
  struct Bucket {
    double tokens = 0;
    Timestamp last{};
  };
  AccessControl(store::Store* store, const Clock* clock, AccessOptions options);
  Status AuthorizeUserChange(const Principal& caller, const User& user);
  // FailedPrecondition when `leaving` is the only cluster-admin (deleted or demoted,
  // nobody could manage the cluster any more).
  Status KeepLastAdminLocked(const User& leaving);
  Result<NewToken> MintLocked(const std::string& user, std::string description,
                              std::optional<Duration> ttl);

  store::Store* store_;
  const Clock* clock_;
  AccessOptions opt_;
  std::mutex mu_;
  std::map<std::string, User> users_;        // GUARDED_BY(mu_)
  std::map<std::string, ApiToken> tokens_;   // GUARDED_BY(mu_), by id
  std::map<std::string, Bucket> buckets_;    // GUARDED_BY(mu_), by token id
  std::map<std::string, Bucket> anonymous_;  // GUARDED_BY(mu_), by client address

  // Audit group commit: entries wait in `audit_queue_`; the first waiter with no
  // leader commits everything queued and wakes the rest.
  struct AuditWait {
    AuditEntry entry;
    Status result;
    bool done = false;
  };
  std::mutex audit_mu_;
  std::condition_variable audit_cv_;
  std::vector<AuditWait*> audit_queue_;  // GUARDED_BY(audit_mu_)
  bool audit_leader_ = false;            // GUARDED_BY(audit_mu_)
  Status TakeLocked(std::map<std::string, Bucket>& buckets, const std::string& key,
                    const std::string& who);
};

// 2*n random lower-case hex digits from the system's CSPRNG.
std::string RandomHex(size_t n_bytes);

}  // namespace trainyard::server
