#include "store/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "store/commit.h"
#include "store/documents.h"

namespace trainyard::store {
namespace {

// The forward migrations, in order: entry i takes a database from user_version i to
// i + 1. Never edit an entry once released; add a new one.
constexpr const char* kMigrations[] = {
    // 1: the objects, the job id counter and the append-only event log.
    R"sql(
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('next_job_id', 1);

CREATE TABLE tenants (
  name TEXT PRIMARY KEY,
  doc TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE queues (
  tenant TEXT NOT NULL REFERENCES tenants (name),
  name TEXT NOT NULL,
  parent TEXT,  -- NULL for a top-level queue
  doc TEXT NOT NULL,
  PRIMARY KEY (tenant, name),
  FOREIGN KEY (tenant, parent) REFERENCES queues (tenant, name)
) WITHOUT ROWID;
CREATE INDEX queues_by_parent ON queues (tenant, parent);

CREATE TABLE priority_classes (
  name TEXT PRIMARY KEY,
  doc TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE nodes (
  name TEXT PRIMARY KEY,
  doc TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  state TEXT NOT NULL,
  tenant TEXT NOT NULL,
  queue TEXT NOT NULL,
  doc TEXT NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state, id);
CREATE INDEX jobs_by_tenant_queue ON jobs (tenant, queue, id);

CREATE TABLE job_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id INTEGER NOT NULL REFERENCES jobs (id),
  time_ms INTEGER NOT NULL,
  actor TEXT NOT NULL,
  kind TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX job_events_by_job ON job_events (job_id, seq);
CREATE TRIGGER job_events_no_update BEFORE UPDATE ON job_events
BEGIN
  SELECT RAISE(ABORT, 'job_events is append-only');
END;
CREATE TRIGGER job_events_no_delete BEFORE DELETE ON job_events
BEGIN
  SELECT RAISE(ABORT, 'job_events is append-only');
END;
)sql",
    // 2: jobs become listable by name prefix, by queue alone and by submit time.
    R"sql(
ALTER TABLE jobs ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN submit_time_ms INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET
  name = coalesce(json_extract(doc, '$.spec.name'), ''),
  submit_time_ms = coalesce(json_extract(doc, '$.submit_time_ms'), 0);
CREATE INDEX jobs_by_name ON jobs (name, id);
CREATE INDEX jobs_by_queue ON jobs (queue, id);
CREATE INDEX jobs_by_submit_time ON jobs (submit_time_ms);
)sql",
    // 3: users, their API tokens and the append-only audit log of requests.
    R"sql(
CREATE TABLE users (
  name TEXT PRIMARY KEY,
  tenant TEXT REFERENCES tenants (name),  -- NULL for a cluster admin
  doc TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX users_by_tenant ON users (tenant, name);

CREATE TABLE api_tokens (
  id TEXT PRIMARY KEY,
  user_name TEXT NOT NULL REFERENCES users (name),
  doc TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX api_tokens_by_user ON api_tokens (user_name);

CREATE TABLE audit_log (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  time_ms INTEGER NOT NULL,
  actor TEXT NOT NULL,
  token_id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  action TEXT NOT NULL,
  object TEXT NOT NULL,
  source TEXT NOT NULL,
  status INTEGER NOT NULL,
  message TEXT NOT NULL
);
-- One per ListAudit filter; with several filters SQLite picks the most selective.
CREATE INDEX audit_log_by_actor ON audit_log (actor, seq);
CREATE INDEX audit_log_by_tenant ON audit_log (tenant, seq);
CREATE INDEX audit_log_by_object ON audit_log (object, seq);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
  SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
  SELECT RAISE(ABORT, 'audit_log is append-only');
END;
)sql",
    // 4: datasets and the manifests of their versions (content-addressed, shared).
    R"sql(
CREATE TABLE datasets (
  name TEXT PRIMARY KEY,
  tenant TEXT,  -- NULL for a cluster-wide dataset
  doc TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE dataset_manifests (
  version TEXT PRIMARY KEY,
  text TEXT NOT NULL
);
)sql",
};
static_assert(std::size(kMigrations) == SqliteStore::kSchemaVersion,
              "kSchemaVersion must equal the number of migrations");

// What a SQLite result code means to our callers.
StatusCode CodeOf(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
      return StatusCode::kUnavailable;
    case SQLITE_FULL:
      return StatusCode::kResourceExhausted;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return StatusCode::kDataLoss;
    case SQLITE_CONSTRAINT:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return StatusCode::kFailedPrecondition;
    default:
      return StatusCode::kInternal;
  }
}

// "sqlite: <doing>: <SQLite's message>", with the code SQLite's result maps to.
Status SqliteError(sqlite3* db, int rc, std::string_view doing) {
  std::string detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if (detail != sqlite3_errstr(rc)) detail += std::string(" (") + sqlite3_errstr(rc) + ")";
  return Status(CodeOf(rc), "sqlite: " + std::string(doing) + ": " + detail);
}

// The smallest string greater than every string that starts with `prefix`, or
// nullopt when there is none (the prefix is all 0xff bytes).
std::optional<std::string> PrefixUpperBound(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (prefix.empty()) return std::nullopt;
  prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}

std::string Placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += i ? ",?" : "?";
  return out;
}

const char* SyncPragma(SqliteOptions::Sync sync) {
  switch (sync) {
    case SqliteOptions::Sync::kOff:
      return "PRAGMA synchronous = OFF";
    case SqliteOptions::Sync::kNormal:
      return "PRAGMA synchronous = NORMAL";
    case SqliteOptions::Sync::kFull:
      return "PRAGMA synchronous = FULL";
  }
  return "PRAGMA synchronous = FULL";
}

}  // namespace

// A cached prepared statement in use: binds parameters, steps, reads columns, and
// resets the statement (clearing its bindings) when it goes away, which also ends
// any read it holds open.
class SqliteStore::Statement {
 public:
  explicit Statement(sqlite3_stmt* stmt) : stmt_(stmt) {}
  Statement(Statement&& other) noexcept : stmt_(std::exchange(other.stmt_, nullptr)) {}
  Statement& operator=(Statement&&) = delete;
  ~Statement() {
    if (stmt_ != nullptr) {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }

  // Parameters are 1-based. Binding fails only on programming errors (bad index).
  Statement& Bind(int index, int64_t value) {
    Check(sqlite3_bind_int64(stmt_, index, value));
    return *this;
  }
  Statement& Bind(int index, std::string_view value) {
    Check(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                              SQLITE_UTF8));
    return *this;
  }
  Statement& BindNull(int index) {
    Check(sqlite3_bind_null(stmt_, index));
    return *this;
  }

  // True when a row is ready, false when the statement is done.
  Result<bool> Step(std::string_view doing) {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(sqlite3_db_handle(stmt_), rc, doing);
  }
  // Steps to the end, ignoring rows.
  Status Run(std::string_view doing) {
    while (true) {
      TY_ASSIGN_OR_RETURN(bool row, Step(doing));
      if (!row) return Status::Ok();
    }
  }

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    int n = sqlite3_column_bytes(stmt_, col);
    return p == nullptr ? std::string() : std::string(p, static_cast<size_t>(n));
  }

 private:
  void Check(int rc) {
    TY_CHECK_MSG(rc == SQLITE_OK,
                 std::string("sqlite bind: ") + sqlite3_errstr(rc) + " in " + sqlite3_sql(stmt_));
  }

  sqlite3_stmt* stmt_;
};

// Commit's reads and writes, inside the transaction Commit opened.
// REQUIRES: the store's mu_ held for the Target's lifetime.
class SqliteStore::Target final : public CommitTarget {
 public:
  explicit Target(SqliteStore& s) : s_(s) {}

  Result<JobId> NextJobId() override { return s_.NextJobId(); }
  Result<bool> HasJob(JobId id) override {
    return Exists("SELECT 1 FROM jobs WHERE id = ?1", [&](Statement& st) { st.Bind(1, id); });
  }
  Result<bool> HasNode(const std::string& name) override {
    return Exists("SELECT 1 FROM nodes WHERE name = ?1", [&](Statement& st) { st.Bind(1, name); });
  }
  Result<bool> HasTenant(const std::string& name) override {
    return Exists("SELECT 1 FROM tenants WHERE name = ?1",
                  [&](Statement& st) { st.Bind(1, name); });
  }
  Result<bool> HasPriorityClass(const std::string& name) override {
    return Exists("SELECT 1 FROM priority_classes WHERE name = ?1",
                  [&](Statement& st) { st.Bind(1, name); });
  }
  Result<std::optional<std::string>> QueueParent(const std::string& tenant,
                                                 const std::string& name) override {
    TY_ASSIGN_OR_RETURN(Statement st,
                        s_.Prepare("SELECT parent FROM queues WHERE tenant = ?1 AND name = ?2"));
    st.Bind(1, tenant).Bind(2, name);
    TY_ASSIGN_OR_RETURN(bool row, st.Step("reading queue"));
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(st.IsNull(0) ? std::string() : st.Text(0));
  }
  Result<std::vector<std::string>> QueuesOfTenant(const std::string& tenant, int limit) override {
    TY_ASSIGN_OR_RETURN(
        Statement st,
        s_.Prepare("SELECT name FROM queues WHERE tenant = ?1 ORDER BY name LIMIT ?2"));
    st.Bind(1, tenant).Bind(2, int64_t{limit});
    return Names(st, "reading queues");
  }
  Result<std::vector<std::string>> ChildQueues(const std::string& tenant, const std::string& name,
                                               int limit) override {
    TY_ASSIGN_OR_RETURN(Statement st, s_.Prepare("SELECT name FROM queues WHERE tenant = ?1 AND "
                                                 "parent = ?2 ORDER BY name LIMIT ?3"));
    st.Bind(1, tenant).Bind(2, name).Bind(3, int64_t{limit});
    return Names(st, "reading queues");
  }
  Result<bool> HasUser(const std::string& name) override {
    return Exists("SELECT 1 FROM users WHERE name = ?1", [&](Statement& st) { st.Bind(1, name); });
  }
  Result<bool> HasDataset(const std::string& name) override {
    return Exists("SELECT 1 FROM datasets WHERE name = ?1",
                  [&](Statement& st) { st.Bind(1, name); });
  }
  Result<std::vector<std::string>> UsersOfTenant(const std::string& tenant, int limit) override {
    TY_ASSIGN_OR_RETURN(
        Statement st,
        s_.Prepare("SELECT name FROM users WHERE tenant = ?1 ORDER BY name LIMIT ?2"));
    st.Bind(1, tenant).Bind(2, int64_t{limit});
    return Names(st, "reading users");
  }

  Status WriteJob(const Job& job, const std::string& doc) override {
    TY_ASSIGN_OR_RETURN(
        Statement st,
        s_.Prepare("INSERT INTO jobs (id, state, tenant, queue, name, submit_time_ms, doc) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO UPDATE SET "
                   "state = excluded.state, tenant = excluded.tenant, queue = excluded.queue, "
                   "name = excluded.name, submit_time_ms = excluded.submit_time_ms, "
                   "doc = excluded.doc"));
    st.Bind(1, job.id)
        .Bind(2, JobStateName(job.state))
        .Bind(3, job.spec.tenant)
        .Bind(4, job.spec.queue)
        .Bind(5, job.spec.name)
        .Bind(6, int64_t{job.submit_time.time_since_epoch().count()})
        .Bind(7, doc);
    return st.Run("writing job " + std::to_string(job.id));
  }
  Status WriteNode(const Node& node, const std::string& doc) override {
    return Upsert(
        "INSERT INTO nodes (name, doc) VALUES (?1, ?2) "
        "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
        node.name, doc, "writing node " + node.name);
  }
  Status EraseNode(const std::string& name) override {
    return Erase("DELETE FROM nodes WHERE name = ?1", name, "deleting node " + name);
  }
  Status WriteTenant(const Tenant& tenant, const std::string& doc) override {
    return Upsert(
        "INSERT INTO tenants (name, doc) VALUES (?1, ?2) "
        "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
        tenant.name, doc, "writing tenant " + tenant.name);
  }
  Status EraseTenant(const std::string& name) override {
    return Erase("DELETE FROM tenants WHERE name = ?1", name, "deleting tenant " + name);
  }
  Status WriteQueue(const Queue& queue, const std::string& doc) override {
    TY_ASSIGN_OR_RETURN(Statement st,
                        s_.Prepare("INSERT INTO queues (tenant, name, parent, doc) "
                                   "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (tenant, name) "
                                   "DO UPDATE SET parent = excluded.parent, doc = excluded.doc"));
    st.Bind(1, queue.tenant).Bind(2, queue.name).Bind(4, doc);
    if (queue.parent.empty()) {
      st.BindNull(3);
    } else {
      st.Bind(3, queue.parent);
    }
    return st.Run("writing queue " + queue.tenant + "/" + queue.name);
  }
  Status EraseQueue(const std::string& tenant, const std::string& name) override {
    TY_ASSIGN_OR_RETURN(Statement st,
                        s_.Prepare("DELETE FROM queues WHERE tenant = ?1 AND name = ?2"));
    st.Bind(1, tenant).Bind(2, name);
    return st.Run("deleting queue " + tenant + "/" + name);
  }
  Status WritePriorityClass(const PriorityClass& pc, const std::string& doc) override {
    return Upsert(
        "INSERT INTO priority_classes (name, doc) VALUES (?1, ?2) "
        "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
        pc.name, doc, "writing priority class " + pc.name);
  }
  Status ErasePriorityClass(const std::string& name) override {
    return Erase("DELETE FROM priority_classes WHERE name = ?1", name,
                 "deleting priority class " + name);
  }
  Status WriteEvent(const JobEvent& event) override {
    TY_ASSIGN_OR_RETURN(Statement st,
                        s_.Prepare("INSERT INTO job_events (job_id, time_ms, actor, kind, "
                                   "message) VALUES (?1, ?2, ?3, ?4, ?5)"));
    st.Bind(1, event.job_id)
        .Bind(2, int64_t{event.time.time_since_epoch().count()})
        .Bind(3, event.actor)
        .Bind(4, event.kind)
        .Bind(5, event.message);
    return st.Run("appending an event of job " + std::to_string(event.job_id));
  }
  Status WriteUser(const User& user, const std::string& doc) override {
    TY_ASSIGN_OR_RETURN(Statement st,
                        s_.Prepare("INSERT INTO users (name, tenant, doc) VALUES (?1, ?2, ?3) "
                                   "ON CONFLICT (name) DO UPDATE SET tenant = excluded.tenant, "
                                   "doc = excluded.doc"));
    st.Bind(1, user.name).Bind(3, doc);
    if (user.tenant.empty()) {
      st.BindNull(2);
    } else {
      st.Bind(2, user.tenant);
    }
    return st.Run("writing user " + user.name);
  }
  Status EraseUser(const std::string& name) override {
    TY_RETURN_IF_ERROR(Erase("DELETE FROM api_tokens WHERE user_name = ?1", name,
                             "deleting the tokens of user " + name));
    return Erase("DELETE FROM users WHERE name = ?1", name, "deleting user " + name);
  }
  Status WriteToken(const ApiToken& token, const std::string& doc) override {
    TY_ASSIGN_OR_RETURN(
        Statement st, s_.Prepare("INSERT INTO api_tokens (id, user_name, doc) VALUES (?1, ?2, ?3) "
                                 "ON CONFLICT (id) DO UPDATE SET user_name = excluded.user_name, "
                                 "doc = excluded.doc"));
    st.Bind(1, token.id).Bind(2, token.user).Bind(3, doc);
    return st.Run("writing token " + token.id);
  }
  Status WriteDataset(const Dataset& d, const std::string& doc) override {
    TY_ASSIGN_OR_RETURN(Statement st,
                        s_.Prepare("INSERT INTO datasets (name, tenant, doc) VALUES (?1, ?2, ?3) "
                                   "ON CONFLICT (name) DO UPDATE SET tenant = excluded.tenant, "
                                   "doc = excluded.doc"));
    st.Bind(1, d.name).Bind(3, doc);
    if (d.tenant.empty()) {
      st.BindNull(2);
    } else {
      st.Bind(2, d.tenant);
    }
    return st.Run("writing dataset " + d.name);
  }
  Status EraseDataset(const std::string& name) override {
    return Erase("DELETE FROM datasets WHERE name = ?1", name, "deleting dataset " + name);
  }
  Status WriteManifest(const std::string& version, const std::string& text) override {
    TY_ASSIGN_OR_RETURN(Statement st, s_.Prepare("INSERT INTO dataset_manifests (version, text) "
                                                 "VALUES (?1, ?2) ON CONFLICT DO NOTHING"));
    st.Bind(1, version).Bind(2, text);
    return st.Run("writing the manifest of " + version);
  }
  Status WriteAudit(const AuditEntry& e) override {
    TY_ASSIGN_OR_RETURN(
        Statement st,
        s_.Prepare("INSERT INTO audit_log (time_ms, actor, token_id, tenant, action, object, "
                   "source, status, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
    st.Bind(1, int64_t{e.time.time_since_epoch().count()})
        .Bind(2, e.actor)
        .Bind(3, e.token_id)
        .Bind(4, e.tenant)
        .Bind(5, e.action)
        .Bind(6, e.object)
        .Bind(7, e.source)
        .Bind(8, int64_t{e.status})
        .Bind(9, e.message);
    return st.Run("appending an audit entry");
  }

 private:
  template <typename BindFn>
  Result<bool> Exists(std::string_view sql, BindFn bind) {
    TY_ASSIGN_OR_RETURN(Statement st, s_.Prepare(sql));
    bind(st);
    return st.Step("reading");
  }
  static Result<std::vector<std::string>> Names(Statement& st, std::string_view doing) {
    std::vector<std::string> out;
    while (true) {
      TY_ASSIGN_OR_RETURN(bool row, st.Step(doing));
      if (!row) return out;
      out.push_back(st.Text(0));
    }
  }
  Status Upsert(std::string_view sql, const std::string& key, const std::string& doc,
                const std::string& doing) {
    TY_ASSIGN_OR_RETURN(Statement st, s_.Prepare(sql));
    st.Bind(1, key).Bind(2, doc);
    return st.Run(doing);
  }
  Status Erase(std::string_view sql, const std::string& key, const std::string& doing) {
    TY_ASSIGN_OR_RETURN(Statement st, s_.Prepare(sql));
    st.Bind(1, key);
    return st.Run(doing);
  }

  SqliteStore& s_;
};

SqliteStore::SqliteStore(sqlite3* db, std::string path) : path_(std::move(path)), db_(db) {}

SqliteStore::~SqliteStore() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Result<std::unique_ptr<Store>> SqliteStore::Open(const std::string& path,
                                                 const SqliteOptions& options) {
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (options.create_if_missing) flags |= SQLITE_OPEN_CREATE;
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(db, rc, "opening " + path);
    sqlite3_close_v2(db);
    return s;
  }
  // From here the store owns `db` and closes it on every path.
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path));
  std::lock_guard lock(store->mu_);
  TY_RETURN_IF_ERROR(store->Configure(options));
  TY_RETURN_IF_ERROR(store->Migrate());
  return std::unique_ptr<Store>(std::move(store));
}

Status SqliteStore::Configure(const SqliteOptions& options) {
  sqlite3_extended_result_codes(db_, 1);
  int rc = sqlite3_busy_timeout(
      db_, static_cast<int>(
               std::min<int64_t>(options.busy_timeout.count(), std::numeric_limits<int>::max())));
  if (rc != SQLITE_OK) return SqliteError(db_, rc, "setting busy_timeout on " + path_);
  {
    TY_ASSIGN_OR_RETURN(Statement st, Prepare("PRAGMA journal_mode = WAL"));
    std::string doing = "switching " + path_ + " to WAL journal mode";
    TY_ASSIGN_OR_RETURN(bool row, st.Step(doing));
    std::string mode = row ? st.Text(0) : "";
    if (mode != "wal") {
      return FailedPrecondition("sqlite: " + doing + ": the file stays in journal mode \"" + mode +
                                "\"");
    }
  }
  TY_RETURN_IF_ERROR(Run("PRAGMA foreign_keys = ON", "enabling foreign keys on " + path_));
  {
    TY_ASSIGN_OR_RETURN(Statement st, Prepare("PRAGMA foreign_keys"));
    TY_ASSIGN_OR_RETURN(bool row, st.Step("checking foreign keys on " + path_));
    if (!row || st.Int(0) != 1) {
      return FailedPrecondition("sqlite: this SQLite library does not enforce foreign keys");
    }
  }
  return Run(SyncPragma(options.synchronous), "setting synchronous on " + path_);
}

Status SqliteStore::Migrate() {
  return InWriteTransaction("migrating the schema of " + path_, [&]() -> Status {
    int64_t version = 0;
    {
      TY_ASSIGN_OR_RETURN(Statement st, Prepare("PRAGMA user_version"));
      TY_ASSIGN_OR_RETURN(bool row, st.Step("reading the schema version of " + path_));
      if (row) version = st.Int(0);
    }  // resets the statement before the migrations run
    if (version > kSchemaVersion) {
      return FailedPrecondition("database " + path_ + " has schema version " +
                                std::to_string(version) + ", newer than version " +
                                std::to_string(kSchemaVersion) +
                                ", the newest this binary knows; run a newer trainyard");
    }
    if (version < 0) {
      return DataLoss("database " + path_ + " has schema version " + std::to_string(version) +
                      "; a trainyard database has a version between 0 and " +
                      std::to_string(kSchemaVersion));
    }
    if (version == kSchemaVersion) return Status::Ok();
    for (int64_t v = version; v < kSchemaVersion; ++v) {
      char* error = nullptr;
      int rc = sqlite3_exec(db_, kMigrations[v], nullptr, nullptr, &error);
      if (rc != SQLITE_OK) {
        std::string detail = error != nullptr ? error : sqlite3_errstr(rc);
        sqlite3_free(error);
        return Status(CodeOf(rc), "sqlite: migrating " + path_ + " from schema version " +
                                      std::to_string(v) + " to " + std::to_string(v + 1) + ": " +
                                      detail);
      }
    }
    // PRAGMA takes no parameters; the value is our own constant.
    return Run("PRAGMA user_version = " + std::to_string(kSchemaVersion),
               "recording the schema version of " + path_);
  });
}

Result<SqliteStore::Statement> SqliteStore::Prepare(std::string_view sql) {
  auto it = statements_.find(std::string(sql));
  if (it != statements_.end()) return Statement(it->second);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return SqliteError(db_, rc, "preparing \"" + std::string(sql) + "\" on " + path_);
  }
  statements_.emplace(std::string(sql), stmt);
  return Statement(stmt);
}

Status SqliteStore::Run(std::string_view sql, std::string_view doing) {
  TY_ASSIGN_OR_RETURN(Statement st, Prepare(sql));
  return st.Run(doing);
}

void SqliteStore::RollbackIfOpen() {
  // Some errors (disk full, I/O) end the transaction themselves.
  if (sqlite3_get_autocommit(db_) != 0) return;
  Run("ROLLBACK", "rolling back").IgnoreError();  // the caller reports the first error
}

template <typename Body>
Status SqliteStore::InWriteTransaction(std::string_view doing, Body body) {
  TY_RETURN_IF_ERROR(Run("BEGIN IMMEDIATE", doing));
  Status s = body();
  if (s.ok()) s = Run("COMMIT", doing);
  if (!s.ok()) RollbackIfOpen();
  return s;
}

template <typename Body>
Status SqliteStore::InReadTransaction(std::string_view doing, Body body) {
  TY_RETURN_IF_ERROR(Run("BEGIN", doing));
  Status s = body();
  if (s.ok()) s = Run("COMMIT", doing);
  if (!s.ok()) RollbackIfOpen();
  return s;
}

Result<JobId> SqliteStore::NextJobId() {
  TY_ASSIGN_OR_RETURN(Statement st, Prepare("SELECT value FROM meta WHERE key = 'next_job_id'"));
  TY_ASSIGN_OR_RETURN(bool row, st.Step("reading the next job id"));
  if (!row) return DataLoss("database " + path_ + " has no next_job_id in its meta table");
  return st.Int(0);
}

Status SqliteStore::Commit(const WriteBatch& batch) {
  if (batch.empty()) return Status::Ok();
  TY_ASSIGN_OR_RETURN(PreparedBatch prepared, PrepareBatch(batch));
  std::lock_guard lock(mu_);
  return InWriteTransaction("committing a batch of " + std::to_string(batch.size()) + " ops", [&] {
    Target target(*this);
    return ApplyBatch(prepared, target);
  });
}

Result<JobId> SqliteStore::ReserveJobIds(int64_t n) {
  TY_RETURN_IF_ERROR(CheckReservation(n));
  std::lock_guard lock(mu_);
  JobId first = 0;
  TY_RETURN_IF_ERROR(InWriteTransaction("reserving job ids", [&]() -> Status {
    TY_ASSIGN_OR_RETURN(first, NextJobId());
    if (first > std::numeric_limits<int64_t>::max() - n) {
      return ResourceExhausted("job ids are exhausted");
    }
    TY_ASSIGN_OR_RETURN(Statement st,
                        Prepare("UPDATE meta SET value = ?1 WHERE key = 'next_job_id'"));
    st.Bind(1, first + n);
    return st.Run("reserving job ids");
  }));
  return first;
}

Result<std::vector<Job>> SqliteStore::QueryJobs(Statement& st, std::string_view doing) {
  std::vector<Job> jobs;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step(doing));
    if (!row) return jobs;
    TY_ASSIGN_OR_RETURN(Job job, DecodeJobRow(st.Int(0), st.Text(1)));
    jobs.push_back(std::move(job));
  }
}

Result<std::optional<Job>> SqliteStore::GetJob(JobId id) {
  std::lock_guard lock(mu_);
  TY_ASSIGN_OR_RETURN(Statement st, Prepare("SELECT id, doc FROM jobs WHERE id = ?1"));
  st.Bind(1, id);
  TY_ASSIGN_OR_RETURN(std::vector<Job> jobs, QueryJobs(st, "reading job " + std::to_string(id)));
  if (jobs.empty()) return std::optional<Job>();
  return std::optional<Job>(std::move(jobs.front()));
}

Result<JobPage> SqliteStore::ListJobs(const JobFilter& filter, JobId after_id, int limit,
                                      JobOrder order) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListJobs", limit));
  const bool descending = order == JobOrder::kDescending;
  // Distinct states keep the number of statement shapes (and cached statements) small.
  std::set<JobState> states(filter.states.begin(), filter.states.end());
  // Descending: ids below `after_id`, i.e. up to after_id - 1; every id when it is 0.
  std::string sql = descending ? "SELECT id, doc FROM jobs WHERE id <= ?"
                               : "SELECT id, doc FROM jobs WHERE id > ?";
  if (!states.empty()) sql += " AND state IN (" + Placeholders(states.size()) + ")";
  if (!filter.tenant.empty()) sql += " AND tenant = ?";
  if (!filter.queue.empty()) sql += " AND queue = ?";
  std::optional<std::string> name_end;
  if (!filter.name_prefix.empty()) {
    sql += " AND name >= ?";
    name_end = PrefixUpperBound(filter.name_prefix);
    if (name_end) sql += " AND name < ?";
  }
  sql += descending ? " ORDER BY id DESC LIMIT ?" : " ORDER BY id LIMIT ?";

  std::lock_guard lock(mu_);
  TY_ASSIGN_OR_RETURN(Statement st, Prepare(sql));
  int i = 0;
  st.Bind(++i, !descending     ? after_id
               : after_id == 0 ? std::numeric_limits<JobId>::max()
                               : after_id - 1);
  for (JobState s : states) st.Bind(++i, JobStateName(s));
  if (!filter.tenant.empty()) st.Bind(++i, filter.tenant);
  if (!filter.queue.empty()) st.Bind(++i, filter.queue);
  if (!filter.name_prefix.empty()) st.Bind(++i, filter.name_prefix);
  if (name_end) st.Bind(++i, *name_end);
  st.Bind(++i, int64_t{limit} + 1);  // one more tells whether another page exists
  JobPage page;
  TY_ASSIGN_OR_RETURN(page.jobs, QueryJobs(st, "listing jobs"));
  page.next_after_id = CutToPage(page.jobs, limit, [](const Job& j) { return j.id; });
  return page;
}

Result<EventPage> SqliteStore::ListEvents(JobId job_id, int64_t after_seq, int limit) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListEvents", limit));
  std::lock_guard lock(mu_);
  TY_ASSIGN_OR_RETURN(Statement st,
                      Prepare("SELECT seq, job_id, time_ms, actor, kind, message FROM job_events "
                              "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"));
  st.Bind(1, job_id).Bind(2, after_seq).Bind(3, int64_t{limit} + 1);
  EventPage page;
  std::string doing = "listing events of job " + std::to_string(job_id);
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step(doing));
    if (!row) break;
    page.events.push_back(JobEvent{st.Int(0), st.Int(1), Timestamp(Duration(st.Int(2))), st.Text(3),
                                   st.Text(4), st.Text(5)});
  }
  page.next_after_seq = CutToPage(page.events, limit, [](const JobEvent& e) { return e.seq; });
  return page;
}

Result<AuditPage> SqliteStore::ListAudit(const AuditFilter& filter, int64_t after_seq, int limit) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListAudit", limit));
  std::string sql =
      "SELECT seq, time_ms, actor, token_id, tenant, action, object, source, status, message "
      "FROM audit_log WHERE seq > ?";
  if (!filter.actor.empty()) sql += " AND actor = ?";
  if (!filter.tenant.empty()) sql += " AND tenant = ?";
  if (!filter.object.empty()) sql += " AND object = ?";
  sql += " ORDER BY seq LIMIT ?";

  std::lock_guard lock(mu_);
  TY_ASSIGN_OR_RETURN(Statement st, Prepare(sql));
  int i = 0;
  st.Bind(++i, after_seq);
  if (!filter.actor.empty()) st.Bind(++i, filter.actor);
  if (!filter.tenant.empty()) st.Bind(++i, filter.tenant);
  if (!filter.object.empty()) st.Bind(++i, filter.object);
  st.Bind(++i, int64_t{limit} + 1);  // one more tells whether another page exists
  AuditPage page;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step("listing the audit log"));
    if (!row) break;
    AuditEntry e;
    e.seq = st.Int(0);
    e.time = Timestamp(Duration(st.Int(1)));
    e.actor = st.Text(2);
    e.token_id = st.Text(3);
    e.tenant = st.Text(4);
    e.action = st.Text(5);
    e.object = st.Text(6);
    e.source = st.Text(7);
    e.status = static_cast<int32_t>(st.Int(8));
    e.message = st.Text(9);
    page.entries.push_back(std::move(e));
  }
  page.next_after_seq = CutToPage(page.entries, limit, [](const AuditEntry& e) { return e.seq; });
  return page;
}

Result<std::vector<Node>> SqliteStore::ReadNodes() {
  TY_ASSIGN_OR_RETURN(Statement st, Prepare("SELECT name, doc FROM nodes ORDER BY name"));
  std::vector<Node> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step("listing nodes"));
    if (!row) return out;
    TY_ASSIGN_OR_RETURN(Node n, DecodeNodeRow(st.Text(0), st.Text(1)));
    out.push_back(std::move(n));
  }
}

Result<std::vector<Tenant>> SqliteStore::ReadTenants() {
  TY_ASSIGN_OR_RETURN(Statement st, Prepare("SELECT name, doc FROM tenants ORDER BY name"));
  std::vector<Tenant> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step("listing tenants"));
    if (!row) return out;
    TY_ASSIGN_OR_RETURN(Tenant t, DecodeTenantRow(st.Text(0), st.Text(1)));
    out.push_back(std::move(t));
  }
}

Result<std::vector<Queue>> SqliteStore::ReadQueues() {
  TY_ASSIGN_OR_RETURN(Statement st,
                      Prepare("SELECT tenant, name, doc FROM queues ORDER BY tenant, name"));
  std::vector<Queue> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step("listing queues"));
    if (!row) return out;
    TY_ASSIGN_OR_RETURN(Queue q, DecodeQueueRow(st.Text(0), st.Text(1), st.Text(2)));
    out.push_back(std::move(q));
  }
}

Result<std::vector<PriorityClass>> SqliteStore::ReadPriorityClasses() {
  TY_ASSIGN_OR_RETURN(Statement st,
                      Prepare("SELECT name, doc FROM priority_classes ORDER BY name"));
  std::vector<PriorityClass> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step("listing priority classes"));
    if (!row) return out;
    TY_ASSIGN_OR_RETURN(PriorityClass p, DecodePriorityClassRow(st.Text(0), st.Text(1)));
    out.push_back(std::move(p));
  }
}

Result<std::vector<User>> SqliteStore::ReadUsers() {
  TY_ASSIGN_OR_RETURN(Statement st, Prepare("SELECT name, doc FROM users ORDER BY name"));
  std::vector<User> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step("listing users"));
    if (!row) return out;
    TY_ASSIGN_OR_RETURN(User u, DecodeUserRow(st.Text(0), st.Text(1)));
    out.push_back(std::move(u));
  }
}

Result<std::vector<ApiToken>> SqliteStore::ReadTokens() {
  TY_ASSIGN_OR_RETURN(Statement st, Prepare("SELECT id, doc FROM api_tokens ORDER BY id"));
  std::vector<ApiToken> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step("listing tokens"));
    if (!row) return out;
    TY_ASSIGN_OR_RETURN(ApiToken t, DecodeTokenRow(st.Text(0), st.Text(1)));
    out.push_back(std::move(t));
  }
}

Result<std::vector<Dataset>> SqliteStore::ReadDatasets() {
  TY_ASSIGN_OR_RETURN(Statement st, Prepare("SELECT name, doc FROM datasets ORDER BY name"));
  std::vector<Dataset> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st.Step("listing datasets"));
    if (!row) return out;
    TY_ASSIGN_OR_RETURN(Dataset d, DecodeDatasetRow(st.Text(0), st.Text(1)));
    out.push_back(std::move(d));
  }
}

Result<std::vector<Dataset>> SqliteStore::ListDatasets() {
  std::lock_guard lock(mu_);
  return ReadDatasets();
}

Result<std::optional<std::string>> SqliteStore::GetManifest(const std::string& version) {
  std::lock_guard lock(mu_);
  TY_ASSIGN_OR_RETURN(Statement st,
                      Prepare("SELECT text FROM dataset_manifests WHERE version = ?1"));
  st.Bind(1, version);
  TY_ASSIGN_OR_RETURN(bool row, st.Step("reading the manifest of " + version));
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(std::string(st.Text(0)));
}

Result<std::vector<Node>> SqliteStore::ListNodes() {
  std::lock_guard lock(mu_);
  return ReadNodes();
}

Result<std::vector<Tenant>> SqliteStore::ListTenants() {
  std::lock_guard lock(mu_);
  return ReadTenants();
}

Result<std::vector<Queue>> SqliteStore::ListQueues() {
  std::lock_guard lock(mu_);
  return ReadQueues();
}

Result<std::vector<PriorityClass>> SqliteStore::ListPriorityClasses() {
  std::lock_guard lock(mu_);
  return ReadPriorityClasses();
}

Result<std::vector<User>> SqliteStore::ListUsers() {
  std::lock_guard lock(mu_);
  return ReadUsers();
}

Result<std::vector<ApiToken>> SqliteStore::ListTokens() {
  std::lock_guard lock(mu_);
  return ReadTokens();
}

Result<StoredState> SqliteStore::LoadAll() {
  std::lock_guard lock(mu_);
  StoredState state;
  TY_RETURN_IF_ERROR(InReadTransaction("loading " + path_, [&]() -> Status {
    const std::vector<std::string>& active = NonTerminalStateNames();
    TY_ASSIGN_OR_RETURN(Statement st, Prepare("SELECT id, doc FROM jobs WHERE state IN (" +
                                              Placeholders(active.size()) + ") ORDER BY id"));
    for (size_t i = 0; i < active.size(); ++i) st.Bind(static_cast<int>(i) + 1, active[i]);
    TY_ASSIGN_OR_RETURN(state.active_jobs, QueryJobs(st, "loading active jobs"));
    TY_ASSIGN_OR_RETURN(state.nodes, ReadNodes());
    TY_ASSIGN_OR_RETURN(state.tenants, ReadTenants());
    TY_ASSIGN_OR_RETURN(state.queues, ReadQueues());
    TY_ASSIGN_OR_RETURN(state.priority_classes, ReadPriorityClasses());
    TY_ASSIGN_OR_RETURN(state.users, ReadUsers());
    TY_ASSIGN_OR_RETURN(state.tokens, ReadTokens());
    TY_ASSIGN_OR_RETURN(state.datasets, ReadDatasets());
    TY_ASSIGN_OR_RETURN(state.next_job_id, NextJobId());
    TY_ASSIGN_OR_RETURN(Statement seq, Prepare("SELECT coalesce(max(seq), 0) FROM job_events"));
    TY_ASSIGN_OR_RETURN(bool row, seq.Step("reading the last event seq"));
    state.last_event_seq = row ? seq.Int(0) : 0;
    return Status::Ok();
  }));
  return state;
}

}  // namespace trainyard::store
