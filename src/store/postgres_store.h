// PostgresStore: the Store kept in a PostgreSQL database, so that the control plane's
// state can outlive the host it runs on.
//
// Same semantics as SqliteStore, through the same code: Commit runs PrepareBatch and
// ApplyBatch (commit.h) and reads documents back with documents.h. Each object is a
// row holding its JSON document as text (byte for byte what the codec wrote) beside
// the columns queries filter on; keys and filter columns are TEXT COLLATE "C", so
// ordering and name prefixes are byte-wise whatever the database's locale. The free
// text of job_events and audit_log is BYTEA: those fields are not validated as UTF-8
// and an audit record must never be refused. Both logs are append-only (triggers).
// meta holds the next job id; schema_migrations the migrations applied. The tables
// live in the session's search_path (conninfo "options='-c search_path=trainyard'"
// puts them in a schema of their own).
//
// Isolation: writers take one row lock. Every Commit and ReserveJobIds starts by
// locking meta's next_job_id row (SELECT ... FOR UPDATE, or the UPDATE itself), so
// all writers on the database, from any number of servers, run one at a time as with
// SQLite's BEGIN IMMEDIATE; under READ COMMITTED each statement after the lock sees
// every earlier commit, so a batch's checks and writes behave as if alone. Event and
// audit seqs are max + 1 under that lock: they are assigned in commit order, and a
// reader paging with after_seq never misses one that commits later with a lower seq.
// LoadAll reads one REPEATABLE READ snapshot. Single-statement reads need none.
//
// Connection loss: every call retries when the connection breaks (SQLSTATE class 08,
// 57P01..57P03, or libpq reports the connection bad) or the transaction is chosen as
// a deadlock or serialization victim (40P01, 40001), reconnecting with exponential
// backoff (initial_backoff doubling up to max_backoff) for up to retry_for; then it
// fails with Unavailable naming the server and libpq's message. A Commit is redone
// only when it is certain it was not applied: its connection broke before COMMIT was
// sent, or the server rolled it back. When the connection breaks during COMMIT, the
// outcome is unknown; each Commit writes a random token of its own (the same in each
// try) into its store's row of commit_markers, and after reconnecting the store takes the writer
// lock (which the lost transaction held until it ended, so it has ended) and reads
// the row back: its token means the batch was applied and Commit returns OK; any
// other means it was not, and the batch is applied again. A batch is thus applied
// exactly once. Should the retry budget run out before the outcome is known, Commit
// returns Unavailable saying the batch may or may not have been applied: the one
// exception to "on any error nothing of it is applied". Sessions set
// idle_in_transaction_session_timeout (orphan_timeout) so that a transaction whose
// client vanished without the server noticing cannot hold the writer lock for long.
// ReserveJobIds is always safe to redo: a lost reservation only leaves a gap.
//
// Schema versions: schema_migrations holds one row per migration applied. Open
// applies the missing ones, in order, in one transaction, under an advisory lock so
// that servers starting together migrate once. A database whose version is newer
// than kSchemaVersion is refused.
//
// Thread-safety: as Store. One connection, guarded by a mutex; calls are serialised.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/units.h"
#include "store/store.h"

struct pg_conn;
struct pg_result;

namespace trainyard::store {

struct PreparedBatch;

// Points of a Commit at which a test may break the connection (fault injection).
enum class CommitStage {
  kBeforeCommit,  // every statement ran; COMMIT is about to be sent
  kAfterCommit,   // COMMIT succeeded; its answer has not reached Commit's caller
};

struct PostgresOptions {
  // How long a call keeps reconnecting and retrying before it gives up (Unavailable).
  Duration retry_for{30'000};
  // The first wait between tries; each next one is twice as long, up to max_backoff.
  Duration initial_backoff{50};
  Duration max_backoff{2'000};
  // How long one connection attempt may take, unless the conninfo sets connect_timeout.
  Duration connect_timeout{10'000};
  // idle_in_transaction_session_timeout of the store's sessions: how long a server
  // keeps a transaction whose client went silent (and the writer lock it holds).
  Duration orphan_timeout{10'000};
  // The longest a statement may run (statement_timeout) and data sent may stay
  // unacknowledged (TCP_USER_TIMEOUT) before the call fails and is retried: a database
  // cut off by the network makes calls fail in this time instead of the kernel's ~15
  // minutes of retransmissions.
  Duration io_timeout{30'000};
  // For tests: called at each stage of each Commit try with the backend's pid (the
  // hook may terminate it); when it returns true the store drops its connection
  // there, as if it had broken. Empty in production.
  std::function<bool(CommitStage stage, int backend_pid)> inject_connection_loss;
};

class PostgresStore final : public Store {
 public:
  // The schema this binary writes: the number of migrations it knows.
  static constexpr int kSchemaVersion = 3;

  // Connects to the database named by `conninfo` (libpq's "key=value ..." or
  // "postgresql://..." form), retrying for opts.retry_for, and brings its schema up to
  // kSchemaVersion. Fails with InvalidArgument when conninfo does not parse,
  // Unavailable when no connection could be made, FailedPrecondition when the
  // database's schema is newer, its encoding is not UTF8 (or SQL_ASCII) or the server
  // is older than PostgreSQL 11.
  static Result<std::unique_ptr<Store>> Open(const std::string& conninfo,
                                             PostgresOptions opts = {});

  ~PostgresStore() override;
  PostgresStore(const PostgresStore&) = delete;
  PostgresStore& operator=(const PostgresStore&) = delete;

  Status Commit(const WriteBatch& batch) override;
  Result<JobId> ReserveJobIds(int64_t n) override;
  Result<std::optional<Job>> GetJob(JobId id) override;
  Result<JobPage> ListJobs(const JobFilter& filter, JobId after_id, int limit,
                           JobOrder order) override;
  Result<EventPage> ListEvents(JobId job_id, int64_t after_seq, int limit) override;
  Result<AuditPage> ListAudit(const AuditFilter& filter, int64_t after_seq, int limit) override;
  Result<std::vector<Node>> ListNodes() override;
  Result<std::vector<Tenant>> ListTenants() override;
  Result<std::vector<Queue>> ListQueues() override;
  Result<std::vector<PriorityClass>> ListPriorityClasses() override;
  Result<std::vector<User>> ListUsers() override;
  Result<std::vector<ApiToken>> ListTokens() override;
  Result<std::vector<Dataset>> ListDatasets() override;
  Result<std::optional<std::string>> GetManifest(const std::string& version) override;
  Result<StoredState> LoadAll() override;
  int SchemaVersion() const override { return kSchemaVersion; }

  // Leadership of the servers that share this database (docs/ha.md): one lease row,
  // timed by the database's clock, so the servers' clocks need not agree.
  struct Lease {
    std::string holder;  // the server that holds it (its id)
    std::string url;     // where it serves, for standbys to send clients to
    int64_t token = 0;   // grows every time the lease changes hands: the fencing token
    Duration left{0};    // until it expires, by the database's clock; <= 0: expired
  };
  // Takes the lease for `self` (serving at `url`) for `ttl` when nobody holds it or its
  // holder let it expire, or renews it when `self` holds it; returns the lease as it is
  // afterwards (self's when this server leads). Retried like every call.
  Result<Lease> ClaimLeadership(const std::string& self, const std::string& url, Duration ttl);
  // Lets the lease expire now, when `self` holds it (a clean shutdown hands over at once).
  Status ReleaseLeadership(const std::string& self);
  // Fencing: from now on every Commit applies only while the lease still has `token`
  // and has not expired, checked inside its transaction; otherwise FailedPrecondition
  // ("fenced: ..."), and nothing of the batch is applied. A leader that lost the lease,
  // even one paused for longer than the lease, cannot change the state the next leader
  // works from. 0 (the default) turns the check off.
  void SetFencingToken(int64_t token) { fence_.store(token); }
  // "postgres:" and the conninfo's settings, without any password.
  std::string Describe() const override { return "postgres:" + redacted_conninfo_; }

 private:
  class Params;
  class Target;
  struct ResultDeleter {
    void operator()(pg_result* r) const;
  };
  using PgResult = std::unique_ptr<pg_result, ResultDeleter>;
  struct ConnDeleter {
    void operator()(pg_conn* c) const;
  };
  // What broke the last statement, which decides whether a call tries again.
  enum class Failure { kNone, kConnection, kConflict, kOther };

  PostgresStore(std::string conninfo, std::string redacted_conninfo, PostgresOptions opts);

  // REQUIRES (all below): mu_ held, except during Open before the store is shared.
  //
  // Runs attempt() until it succeeds, fails for a reason other than a broken
  // connection or a conflict, or opts_.retry_for has passed; connects first when
  // there is no working connection. `doing` goes in errors.
  template <typename Attempt>
  Status WithRetries(std::string_view doing, Attempt attempt);
  // Makes sure there is a working, set-up connection.
  Status Connect(std::string_view doing);
  void DropConnection();
  // Runs `sql` with `params`; a failure sets failure_ and names `doing`.
  Result<PgResult> Exec(std::string_view sql, const Params& params, std::string_view doing);
  Result<PgResult> Exec(std::string_view sql, std::string_view doing);
  void RollbackIfOpen();
  // Runs `body` in a transaction begun by `begin`; rolls back when either fails.
  template <typename Body>
  Status InTransaction(std::string_view begin, std::string_view doing, Body body);

  Status Migrate();
  // One try of Commit; sets outcome_unknown when COMMIT's answer was lost.
  Status TryCommit(const PreparedBatch& batch, const std::string& token, bool& outcome_unknown);
  // Whether the transaction that wrote `token` into our commit marker committed.
  Result<bool> MarkerCommitted(const std::string& token);
  Result<JobId> NextJobId(std::string_view lock);
  Result<std::vector<Job>> QueryJobs(std::string_view sql, const Params& params,
                                     std::string_view doing);
  Result<std::vector<Node>> ReadNodes();
  Result<std::vector<Tenant>> ReadTenants();
  Result<std::vector<Queue>> ReadQueues();
  Result<std::vector<PriorityClass>> ReadPriorityClasses();
  Result<std::vector<User>> ReadUsers();
  Result<std::vector<ApiToken>> ReadTokens();
  Result<std::vector<Dataset>> ReadDatasets();
  // Everything of a kind, with retries: the List* calls.
  template <typename T>
  Result<std::vector<T>> ListWithRetries(std::string_view doing,
                                         Result<std::vector<T>> (PostgresStore::*read)());
  // LoadAll's reads, inside its snapshot.
  Status ReadState(StoredState& state);
  // "host:port/dbname" of the server, for messages.
  std::string Server() const;

  const std::string conninfo_;
  const std::string redacted_conninfo_;
  const PostgresOptions opts_;
  // This store's row in commit_markers: random, fixed for the store's life.
  const std::string client_id_;
  std::atomic<int64_t> fence_{0};
  std::mutex mu_;
  std::unique_ptr<pg_conn, ConnDeleter> conn_;  // GUARDED_BY(mu_)
  bool session_ready_ = false;                  // GUARDED_BY(mu_); conn_ set up
  Failure failure_ = Failure::kNone;            // GUARDED_BY(mu_)
};

}  // namespace trainyard::store
