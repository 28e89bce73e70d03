#include "store/postgres_store.h"

#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "core/names.h"
#include "store/commit.h"
#include "store/documents.h"

namespace trainyard::store {
namespace {

// The forward migrations, in order: entry i of kMigrations takes a database from
// version i to i + 1, one statement at a time. Never edit an entry once released; add
// a new one.
//
// 1: the objects, the job id counter, the append-only logs and commit markers.
constexpr const char* kMigration1[] = {
    R"sql(CREATE TABLE meta (
  key TEXT COLLATE "C" PRIMARY KEY,
  value BIGINT NOT NULL
))sql",
    "INSERT INTO meta (key, value) VALUES ('next_job_id', 1)",
    R"sql(CREATE TABLE tenants (
  name TEXT COLLATE "C" PRIMARY KEY,
  doc TEXT NOT NULL
))sql",
    R"sql(CREATE TABLE queues (
  tenant TEXT COLLATE "C" NOT NULL REFERENCES tenants (name),
  name TEXT COLLATE "C" NOT NULL,
  parent TEXT COLLATE "C",  -- NULL for a top-level queue
  doc TEXT NOT NULL,
  PRIMARY KEY (tenant, name),
  FOREIGN KEY (tenant, parent) REFERENCES queues (tenant, name)
))sql",
    "CREATE INDEX queues_by_parent ON queues (tenant, parent)",
    R"sql(CREATE TABLE priority_classes (
  name TEXT COLLATE "C" PRIMARY KEY,
  doc TEXT NOT NULL
))sql",
    R"sql(CREATE TABLE nodes (
  name TEXT COLLATE "C" PRIMARY KEY,
  doc TEXT NOT NULL
))sql",
    R"sql(CREATE TABLE jobs (
  id BIGINT PRIMARY KEY,
  state TEXT COLLATE "C" NOT NULL,
  tenant TEXT COLLATE "C" NOT NULL,
  queue TEXT COLLATE "C" NOT NULL,
  name TEXT COLLATE "C" NOT NULL,
  submit_time_ms BIGINT NOT NULL,
  doc TEXT NOT NULL
))sql",
    "CREATE INDEX jobs_by_state ON jobs (state, id)",
    "CREATE INDEX jobs_by_tenant_queue ON jobs (tenant, queue, id)",
    "CREATE INDEX jobs_by_name ON jobs (name, id)",
    "CREATE INDEX jobs_by_queue ON jobs (queue, id)",
    "CREATE INDEX jobs_by_submit_time ON jobs (submit_time_ms)",
    // seq: max + 1 under the writer lock, so in commit order and without gaps.
    R"sql(CREATE TABLE job_events (
  seq BIGINT PRIMARY KEY,
  job_id BIGINT NOT NULL REFERENCES jobs (id),
  time_ms BIGINT NOT NULL,
  actor BYTEA NOT NULL,
  kind BYTEA NOT NULL,
  message BYTEA NOT NULL
))sql",
    "CREATE INDEX job_events_by_job ON job_events (job_id, seq)",
    R"sql(CREATE TABLE users (
  name TEXT COLLATE "C" PRIMARY KEY,
  tenant TEXT COLLATE "C" REFERENCES tenants (name),  -- NULL for a cluster admin
  doc TEXT NOT NULL
))sql",
    "CREATE INDEX users_by_tenant ON users (tenant, name)",
    R"sql(CREATE TABLE api_tokens (
  id TEXT COLLATE "C" PRIMARY KEY,
  user_name TEXT COLLATE "C" NOT NULL REFERENCES users (name),
  doc TEXT NOT NULL
))sql",
    "CREATE INDEX api_tokens_by_user ON api_tokens (user_name)",
    R"sql(CREATE TABLE audit_log (
  seq BIGINT PRIMARY KEY,
  time_ms BIGINT NOT NULL,
  actor BYTEA NOT NULL,
  token_id BYTEA NOT NULL,
  tenant BYTEA NOT NULL,
  action BYTEA NOT NULL,
  object BYTEA NOT NULL,
  source BYTEA NOT NULL,
  status INTEGER NOT NULL,
  message BYTEA NOT NULL
))sql",
    // One per ListAudit filter.
    "CREATE INDEX audit_log_by_actor ON audit_log (actor, seq)",
    "CREATE INDEX audit_log_by_tenant ON audit_log (tenant, seq)",
    "CREATE INDEX audit_log_by_object ON audit_log (object, seq)",
    // One row per store (client_id, random per Open), holding the token of its last
    // committed batch; see "Connection loss" in postgres_store.h.
    R"sql(CREATE TABLE commit_markers (
  client_id TEXT COLLATE "C" PRIMARY KEY,
  token TEXT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL
))sql",
    R"sql(CREATE FUNCTION trainyard_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END
$$)sql",
    "CREATE TRIGGER job_events_append_only BEFORE UPDATE OR DELETE ON job_events "
    "FOR EACH ROW EXECUTE FUNCTION trainyard_append_only()",
    "CREATE TRIGGER job_events_no_truncate BEFORE TRUNCATE ON job_events "
    "FOR EACH STATEMENT EXECUTE FUNCTION trainyard_append_only()",
    "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log "
    "FOR EACH ROW EXECUTE FUNCTION trainyard_append_only()",
    "CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log "
    "FOR EACH STATEMENT EXECUTE FUNCTION trainyard_append_only()",
};
// 2: the leadership lease (ClaimLeadership; docs/ha.md).
constexpr const char* kMigration2[] = {
    R"sql(CREATE TABLE leader_lease (
  name TEXT COLLATE "C" PRIMARY KEY,
  holder TEXT NOT NULL,
  url TEXT NOT NULL,
  token BIGINT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL
))sql",
};
// 3: datasets and the manifests of their versions (content-addressed, shared).
constexpr const char* kMigration3[] = {
    R"sql(CREATE TABLE datasets (
  name TEXT COLLATE "C" PRIMARY KEY,
  tenant TEXT COLLATE "C",  -- NULL for a cluster-wide dataset
  doc TEXT NOT NULL
))sql",
    R"sql(CREATE TABLE dataset_manifests (
  version TEXT COLLATE "C" PRIMARY KEY,
  text TEXT NOT NULL
))sql",
};
constexpr std::span<const char* const> kMigrations[] = {kMigration1, kMigration2, kMigration3};
static_assert(std::size(kMigrations) == PostgresStore::kSchemaVersion,
              "kSchemaVersion must equal the number of migrations");

// Held (pg_advisory_xact_lock) while migrating, so that stores opening together on one
// database migrate one after the other: "trainyar" in ASCII.
constexpr int64_t kMigrationLockKey = 0x747261696e796172;

// Every write transaction takes this row lock first; it serialises the writers.
constexpr const char* kWriterLock = "SELECT value FROM meta WHERE key = 'next_job_id' FOR UPDATE";
constexpr const char* kReadNextJobId = "SELECT value FROM meta WHERE key = 'next_job_id'";

// Commit markers unused this long belong to stores long gone; Open deletes them.
constexpr const char* kStaleMarkers = "30 days";

// Type OIDs of the parameters we send (pg_type.h is a server header).
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kTextOid = 25;

// libpq's messages end in a newline and may run over several lines; the first line
// says what happened.
std::string FirstLine(const char* message) {
  std::string s = message != nullptr ? message : "";
  size_t end = s.find('\n');
  if (end != std::string::npos) s.resize(end);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s.empty() ? "unknown error" : s;
}

// True when `s` can be a value of a TEXT column: no NUL, valid UTF-8. Every key the
// store writes passed a name check, so a string that is not storable names nothing.
bool Storable(std::string_view s) {
  return s.find('\0') == std::string_view::npos && IsValidUtf8(s);
}

bool IsConnectionState(std::string_view sqlstate) {
  // 08: connection exception; 57P01..57P03: admin / crash shutdown, cannot connect now.
  return sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" ||
         sqlstate == "57P03";
}

bool IsConflictState(std::string_view sqlstate) {
  return sqlstate == "40001" || sqlstate == "40P01";  // serialization failure, deadlock
}

// What a SQLSTATE means to our callers (connection and conflict states are
// Unavailable; they are retried first).
StatusCode CodeOf(std::string_view sqlstate) {
  if (IsConnectionState(sqlstate) || IsConflictState(sqlstate)) return StatusCode::kUnavailable;
  if (sqlstate == "57014" || sqlstate == "55P03") return StatusCode::kUnavailable;  // timeouts
  if (sqlstate.starts_with("53")) return StatusCode::kResourceExhausted;  // disk full, memory
  if (sqlstate == "XX001" || sqlstate == "XX002") return StatusCode::kDataLoss;  // corrupt
  if (sqlstate.starts_with("22")) return StatusCode::kInvalidArgument;           // bad data
  // Constraints, privileges, authorization, a read-only (standby) server.
  if (sqlstate.starts_with("23") || sqlstate.starts_with("28") || sqlstate == "42501" ||
      sqlstate == "25006") {
    return StatusCode::kFailedPrecondition;
  }
  return StatusCode::kInternal;
}

// A conninfo value as libpq reads it back: bare when it can be, else single-quoted.
std::string QuoteConninfoValue(std::string_view v) {
  bool bare = !v.empty() && v.find_first_of(" \t\n\r\f\v'\\=") == std::string_view::npos;
  if (bare) return std::string(v);
  std::string out = "'";
  for (char c : v) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// The settings of `conninfo`, in libpq's order, without passwords; InvalidArgument
// when it does not parse.
Result<std::string> RedactConninfo(const std::string& conninfo) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(conninfo.c_str(), &error);
  if (options == nullptr) {
    std::string detail = error != nullptr ? FirstLine(error) : "out of memory";
    PQfreemem(error);
    return InvalidArgument("postgres: conninfo does not parse: " + detail +
                           "; write it as \"host=... dbname=... user=...\" or "
                           "\"postgresql://user@host/dbname\"");
  }
  std::string out;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    std::string_view keyword = o->keyword;
    if (o->val == nullptr || keyword == "password" || keyword == "sslpassword") continue;
    if (!out.empty()) out += ' ';
    out += std::string(keyword) + "=" + QuoteConninfoValue(o->val);
  }
  PQconninfoFree(options);
  return out;
}

// 32 random hex digits: a store's client id, a commit's marker token.
std::string RandomHex() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    out += buf;
  }
  return out;
}

std::string Seconds(Duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// Reading the rows of a text-format result.
int Rows(const PGresult* r) { return PQntuples(r); }
bool IsNull(const PGresult* r, int row, int col) { return PQgetisnull(r, row, col) != 0; }
std::string Text(const PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), static_cast<size_t>(PQgetlength(r, row, col)));
}
int64_t Int(const PGresult* r, int row, int col) {
  return std::strtoll(PQgetvalue(r, row, col), nullptr, 10);
}
// A BYTEA column, which text format sends escaped ("\x6869").
std::string Bytes(const PGresult* r, int row, int col) {
  size_t n = 0;
  unsigned char* raw =
      PQunescapeBytea(reinterpret_cast<const unsigned char*>(PQgetvalue(r, row, col)), &n);
  TY_CHECK_MSG(raw != nullptr, "PQunescapeBytea: out of memory");
  std::string out(reinterpret_cast<const char*>(raw), n);
  PQfreemem(raw);
  return out;
}

}  // namespace

void PostgresStore::ResultDeleter::operator()(pg_result* r) const { PQclear(r); }
void PostgresStore::ConnDeleter::operator()(pg_conn* c) const { PQfinish(c); }

// The parameters of one statement, $1, $2, ... in the order they are added. Text and
// integers go as text; BYTEA goes as binary, byte for byte.
class PostgresStore::Params {
 public:
  // REQUIRES: no NUL in `v` (text parameters are C strings); callers pass names that
  // passed a name check, codec output, or values checked with Storable.
  Params& Text(std::string_view v) {
    TY_CHECK_MSG(v.find('\0') == std::string_view::npos, "postgres: NUL in a text parameter");
    return Add(std::string(v), kTextOid, 0);
  }
  Params& Int(int64_t v) { return Add(std::to_string(v), kInt8Oid, 0); }
  Params& Bytes(std::string_view v) { return Add(std::string(v), kByteaOid, 1); }
  // `v`, or NULL when it is empty.
  Params& TextOrNull(std::string_view v) {
    if (!v.empty()) return Text(v);
    values_.emplace_back(std::nullopt);
    types_.push_back(kTextOid);
    formats_.push_back(0);
    return *this;
  }
  // "$n" of the last parameter added.
  std::string Last() const { return "$" + std::to_string(values_.size()); }

  int size() const { return static_cast<int>(values_.size()); }
  const Oid* types() const { return types_.data(); }
  const int* formats() const { return formats_.data(); }
  // Pointers into this object: valid while it lives unchanged.
  std::vector<const char*> values() const {
    std::vector<const char*> out;
    for (const auto& v : values_) out.push_back(v ? v->c_str() : nullptr);
    return out;
  }
  std::vector<int> lengths() const {
    std::vector<int> out;
    for (const auto& v : values_) out.push_back(v ? static_cast<int>(v->size()) : 0);
    return out;
  }

 private:
  Params& Add(std::string v, Oid type, int format) {
    values_.emplace_back(std::move(v));
    types_.push_back(type);
    formats_.push_back(format);
    return *this;
  }

  std::vector<std::optional<std::string>> values_;
  std::vector<Oid> types_;
  std::vector<int> formats_;
};

// Commit's reads and writes, inside the transaction TryCommit opened, which holds the
// writer lock: next_job_id cannot change under it.
// REQUIRES: the store's mu_ held for the Target's lifetime.
class PostgresStore::Target final : public CommitTarget {
 public:
  Target(PostgresStore& s, JobId next_job_id) : s_(s), next_job_id_(next_job_id) {}

  Result<JobId> NextJobId() override { return next_job_id_; }
  Result<bool> HasJob(JobId id) override {
    return Exists("SELECT 1 FROM jobs WHERE id = $1", Params().Int(id));
  }
  Result<bool> HasNode(const std::string& name) override {
    if (!Storable(name)) return false;
    return Exists("SELECT 1 FROM nodes WHERE name = $1", Params().Text(name));
  }
  Result<bool> HasTenant(const std::string& name) override {
    if (!Storable(name)) return false;
    return Exists("SELECT 1 FROM tenants WHERE name = $1", Params().Text(name));
  }
  Result<bool> HasPriorityClass(const std::string& name) override {
    if (!Storable(name)) return false;
    return Exists("SELECT 1 FROM priority_classes WHERE name = $1", Params().Text(name));
  }
  Result<std::optional<std::string>> QueueParent(const std::string& tenant,
                                                 const std::string& name) override {
    if (!Storable(tenant) || !Storable(name)) return std::optional<std::string>();
    TY_ASSIGN_OR_RETURN(PgResult r,
                        s_.Exec("SELECT parent FROM queues WHERE tenant = $1 AND name = $2",
                                Params().Text(tenant).Text(name), "reading queue"));
    if (Rows(r.get()) == 0) return std::optional<std::string>();
    return std::optional<std::string>(IsNull(r.get(), 0, 0) ? std::string() : Text(r.get(), 0, 0));
  }
  Result<std::vector<std::string>> QueuesOfTenant(const std::string& tenant, int limit) override {
    return Names("SELECT name FROM queues WHERE tenant = $1 ORDER BY name LIMIT $2",
                 Params().Text(tenant).Int(limit), "reading queues");
  }
  Result<std::vector<std::string>> ChildQueues(const std::string& tenant, const std::string& name,
                                               int limit) override {
    return Names("SELECT name FROM queues WHERE tenant = $1 AND parent = $2 ORDER BY name LIMIT $3",
                 Params().Text(tenant).Text(name).Int(limit), "reading queues");
  }
  Result<bool> HasUser(const std::string& name) override {
    if (!Storable(name)) return false;
    return Exists("SELECT 1 FROM users WHERE name = $1", Params().Text(name));
  }
  Result<bool> HasDataset(const std::string& name) override {
    if (!Storable(name)) return false;
    return Exists("SELECT 1 FROM datasets WHERE name = $1", Params().Text(name));
  }
  Result<std::vector<std::string>> UsersOfTenant(const std::string& tenant, int limit) override {
    return Names("SELECT name FROM users WHERE tenant = $1 ORDER BY name LIMIT $2",
                 Params().Text(tenant).Int(limit), "reading users");
  }

  Status WriteJob(const Job& job, const std::string& doc) override {
    return Run(
        "INSERT INTO jobs (id, state, tenant, queue, name, submit_time_ms, doc) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET "
        "state = excluded.state, tenant = excluded.tenant, queue = excluded.queue, "
        "name = excluded.name, submit_time_ms = excluded.submit_time_ms, doc = excluded.doc",
        Params()
            .Int(job.id)
            .Text(JobStateName(job.state))
            .Text(job.spec.tenant)
            .Text(job.spec.queue)
            .Text(job.spec.name)
            .Int(job.submit_time.time_since_epoch().count())
            .Text(doc),
        "writing job " + std::to_string(job.id));
  }
  Status WriteNode(const Node& node, const std::string& doc) override {
    return Run(
        "INSERT INTO nodes (name, doc) VALUES ($1, $2) "
        "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
        Params().Text(node.name).Text(doc), "writing node " + node.name);
  }
  Status EraseNode(const std::string& name) override {
    return Run("DELETE FROM nodes WHERE name = $1", Params().Text(name), "deleting node " + name);
  }
  Status WriteTenant(const Tenant& tenant, const std::string& doc) override {
    return Run(
        "INSERT INTO tenants (name, doc) VALUES ($1, $2) "
        "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
        Params().Text(tenant.name).Text(doc), "writing tenant " + tenant.name);
  }
  Status EraseTenant(const std::string& name) override {
    return Run("DELETE FROM tenants WHERE name = $1", Params().Text(name),
               "deleting tenant " + name);
  }
  Status WriteQueue(const Queue& queue, const std::string& doc) override {
    return Run(
        "INSERT INTO queues (tenant, name, parent, doc) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (tenant, name) DO UPDATE SET parent = excluded.parent, doc = excluded.doc",
        Params().Text(queue.tenant).Text(queue.name).TextOrNull(queue.parent).Text(doc),
        "writing queue " + queue.tenant + "/" + queue.name);
  }
  Status EraseQueue(const std::string& tenant, const std::string& name) override {
    return Run("DELETE FROM queues WHERE tenant = $1 AND name = $2",
               Params().Text(tenant).Text(name), "deleting queue " + tenant + "/" + name);
  }
  Status WritePriorityClass(const PriorityClass& pc, const std::string& doc) override {
    return Run(
        "INSERT INTO priority_classes (name, doc) VALUES ($1, $2) "
        "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
        Params().Text(pc.name).Text(doc), "writing priority class " + pc.name);
  }
  Status ErasePriorityClass(const std::string& name) override {
    return Run("DELETE FROM priority_classes WHERE name = $1", Params().Text(name),
               "deleting priority class " + name);
  }
  Status WriteEvent(const JobEvent& event) override {
    return Run(
        "INSERT INTO job_events (seq, job_id, time_ms, actor, kind, message) "
        "SELECT coalesce(max(seq), 0) + 1, $1, $2, $3, $4, $5 FROM job_events",
        Params()
            .Int(event.job_id)
            .Int(event.time.time_since_epoch().count())
            .Bytes(event.actor)
            .Bytes(event.kind)
            .Bytes(event.message),
        "appending an event of job " + std::to_string(event.job_id));
  }
  Status WriteUser(const User& user, const std::string& doc) override {
    return Run(
        "INSERT INTO users (name, tenant, doc) VALUES ($1, $2, $3) "
        "ON CONFLICT (name) DO UPDATE SET tenant = excluded.tenant, doc = excluded.doc",
        Params().Text(user.name).TextOrNull(user.tenant).Text(doc), "writing user " + user.name);
  }
  Status EraseUser(const std::string& name) override {
    TY_RETURN_IF_ERROR(Run("DELETE FROM api_tokens WHERE user_name = $1", Params().Text(name),
                           "deleting the tokens of user " + name));
    return Run("DELETE FROM users WHERE name = $1", Params().Text(name), "deleting user " + name);
  }
  Status WriteToken(const ApiToken& token, const std::string& doc) override {
    return Run(
        "INSERT INTO api_tokens (id, user_name, doc) VALUES ($1, $2, $3) "
        "ON CONFLICT (id) DO UPDATE SET user_name = excluded.user_name, doc = excluded.doc",
        Params().Text(token.id).Text(token.user).Text(doc), "writing token " + token.id);
  }
  Status WriteDataset(const Dataset& d, const std::string& doc) override {
    return Run(
        "INSERT INTO datasets (name, tenant, doc) VALUES ($1, $2, $3) "
        "ON CONFLICT (name) DO UPDATE SET tenant = excluded.tenant, doc = excluded.doc",
        Params().Text(d.name).TextOrNull(d.tenant).Text(doc), "writing dataset " + d.name);
  }
  Status EraseDataset(const std::string& name) override {
    return Run("DELETE FROM datasets WHERE name = $1", Params().Text(name),
               "deleting dataset " + name);
  }
  Status WriteManifest(const std::string& version, const std::string& text) override {
    return Run(
        "INSERT INTO dataset_manifests (version, text) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        Params().Text(version).Text(text), "writing the manifest of " + version);
  }
  Status WriteAudit(const AuditEntry& e) override {
    return Run(
        "INSERT INTO audit_log (seq, time_ms, actor, token_id, tenant, action, object, source, "
        "status, message) SELECT coalesce(max(seq), 0) + 1, $1, $2, $3, $4, $5, $6, $7, $8, $9 "
        "FROM audit_log",
        Params()
            .Int(e.time.time_since_epoch().count())
            .Bytes(e.actor)
            .Bytes(e.token_id)
            .Bytes(e.tenant)
            .Bytes(e.action)
            .Bytes(e.object)
            .Bytes(e.source)
            .Int(e.status)
            .Bytes(e.message),
        "appending an audit entry");
  }

 private:
  Result<bool> Exists(std::string_view sql, const Params& params) {
    TY_ASSIGN_OR_RETURN(PgResult r, s_.Exec(sql, params, "reading"));
    return Rows(r.get()) > 0;
  }
  Result<std::vector<std::string>> Names(std::string_view sql, const Params& params,
                                         std::string_view doing) {
    TY_ASSIGN_OR_RETURN(PgResult r, s_.Exec(sql, params, doing));
    std::vector<std::string> out;
    for (int i = 0; i < Rows(r.get()); ++i) out.push_back(Text(r.get(), i, 0));
    return out;
  }
  Status Run(std::string_view sql, const Params& params, const std::string& doing) {
    return s_.Exec(sql, params, doing).status();
  }

  PostgresStore& s_;
  const JobId next_job_id_;
};

PostgresStore::PostgresStore(std::string conninfo, std::string redacted_conninfo,
                             PostgresOptions opts)
    : conninfo_(std::move(conninfo)),
      redacted_conninfo_(std::move(redacted_conninfo)),
      opts_(std::move(opts)),
      client_id_(RandomHex()) {}

PostgresStore::~PostgresStore() = default;

Result<std::unique_ptr<Store>> PostgresStore::Open(const std::string& conninfo,
                                                   PostgresOptions opts) {
  TY_ASSIGN_OR_RETURN(std::string redacted, RedactConninfo(conninfo));
  std::unique_ptr<PostgresStore> store(new PostgresStore(conninfo, redacted, std::move(opts)));
  std::lock_guard lock(store->mu_);
  TY_RETURN_IF_ERROR(store->Migrate());
  TY_RETURN_IF_ERROR(store->WithRetries("deleting stale commit markers", [&] {
    return store
        ->Exec("DELETE FROM commit_markers WHERE updated_at < now() - $1::interval",
               Params().Text(kStaleMarkers), "deleting stale commit markers")
        .status();
  }));
  return std::unique_ptr<Store>(std::move(store));
}

std::string PostgresStore::Server() const {
  if (conn_ == nullptr) return "(not connected)";
  auto or_default = [](const char* s, const char* fallback) {
    return std::string(s != nullptr && *s != '\0' ? s : fallback);
  };
  return or_default(PQhost(conn_.get()), "localhost") + ":" +
         or_default(PQport(conn_.get()), "5432") + "/" + or_default(PQdb(conn_.get()), "");
}

Status PostgresStore::Connect(std::string_view doing) {
  if (conn_ != nullptr && PQstatus(conn_.get()) == CONNECTION_OK && session_ready_) {
    return Status::Ok();
  }
  session_ready_ = false;
  if (conn_ != nullptr) {
    // Broken, or connected but not set up (that failed): start over with the same
    // settings.
    PQreset(conn_.get());
  } else {
    // Later keywords win: the conninfo (expanded from "dbname") may override the
    // defaults before it; client_encoding after it is ours.
    std::string timeout_s = std::to_string(std::max<int64_t>(
        2, (opts_.connect_timeout.count() + 999) / 1000));  // libpq counts whole seconds
    const std::string io_ms = std::to_string(opts_.io_timeout.count());
    const char* keywords[] = {"connect_timeout",  "keepalives_idle",  "keepalives_interval",
                              "keepalives_count", "tcp_user_timeout", "fallback_application_name",
                              "dbname",           "client_encoding",  nullptr};
    const char* values[] = {timeout_s.c_str(), "10",   "5",    "3", io_ms.c_str(), "trainyard",
                            conninfo_.c_str(), "UTF8", nullptr};
    conn_.reset(PQconnectdbParams(keywords, values, /*expand_dbname=*/1));
    TY_CHECK_MSG(conn_ != nullptr, "PQconnectdbParams: out of memory");
    // Notices ("relation already exists, skipping") are not errors; keep them off stderr.
    PQsetNoticeProcessor(
        conn_.get(), [](void*, const char*) {}, nullptr);
  }
  if (PQstatus(conn_.get()) != CONNECTION_OK) {
    failure_ = Failure::kConnection;
    return Unavailable("postgres: " + std::string(doing) + ": " +
                       FirstLine(PQerrorMessage(conn_.get())));
  }
  if (PQserverVersion(conn_.get()) < 110000) {
    failure_ = Failure::kOther;
    return FailedPrecondition("postgres: server " + Server() + " runs PostgreSQL " +
                              std::to_string(PQserverVersion(conn_.get())) +
                              "; trainyard needs PostgreSQL 11 or newer");
  }
  TY_ASSIGN_OR_RETURN(
      PgResult r,
      Exec("SELECT set_config('idle_in_transaction_session_timeout', $1, false), "
           "set_config('statement_timeout', $2, false), current_setting('server_encoding')",
           Params()
               .Text(std::to_string(opts_.orphan_timeout.count()))
               .Text(std::to_string(opts_.io_timeout.count())),
           "setting up the session"));
  std::string encoding = Text(r.get(), 0, 2);
  if (encoding != "UTF8" && encoding != "SQL_ASCII") {
    failure_ = Failure::kOther;
    return FailedPrecondition("postgres: database " + Server() + " has encoding " + encoding +
                              "; trainyard needs a UTF8 database (CREATE DATABASE ... "
                              "ENCODING 'UTF8')");
  }
  session_ready_ = true;
  return Status::Ok();
}

void PostgresStore::DropConnection() {
  conn_.reset();
  session_ready_ = false;
}

Result<PostgresStore::PgResult> PostgresStore::Exec(std::string_view sql, const Params& params,
                                                    std::string_view doing) {
  if (conn_ == nullptr || PQstatus(conn_.get()) != CONNECTION_OK) {
    failure_ = Failure::kConnection;
    return Unavailable("postgres: " + std::string(doing) + ": not connected");
  }
  std::string query(sql);
  std::vector<const char*> values = params.values();
  std::vector<int> lengths = params.lengths();
  PgResult r(PQexecParams(conn_.get(), query.c_str(), params.size(), params.types(), values.data(),
                          lengths.data(), params.formats(), /*resultFormat=*/0));
  ExecStatusType status = r != nullptr ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return r;

  const char* state = r != nullptr ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
  std::string sqlstate = state != nullptr ? state : "";
  const char* primary =
      r != nullptr ? PQresultErrorField(r.get(), PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  std::string detail = FirstLine(primary != nullptr ? primary : PQerrorMessage(conn_.get()));
  if (!sqlstate.empty()) detail += " (SQLSTATE " + sqlstate + ")";
  if (PQstatus(conn_.get()) != CONNECTION_OK || IsConnectionState(sqlstate)) {
    failure_ = Failure::kConnection;
  } else if (IsConflictState(sqlstate)) {
    failure_ = Failure::kConflict;
  } else {
    failure_ = Failure::kOther;
  }
  StatusCode code = failure_ == Failure::kConnection ? StatusCode::kUnavailable : CodeOf(sqlstate);
  return Status(code, "postgres: " + std::string(doing) + ": " + detail);
}

Result<PostgresStore::PgResult> PostgresStore::Exec(std::string_view sql, std::string_view doing) {
  return Exec(sql, Params(), doing);
}

void PostgresStore::RollbackIfOpen() {
  if (conn_ == nullptr || PQstatus(conn_.get()) != CONNECTION_OK) return;  // gone with it
  if (PQtransactionStatus(conn_.get()) == PQTRANS_IDLE) return;
  Failure first = failure_;  // the caller reports the first error, not ROLLBACK's
  Exec("ROLLBACK", "rolling back").status().IgnoreError();
  failure_ = first;
}

template <typename Attempt>
Status PostgresStore::WithRetries(std::string_view doing, Attempt attempt) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + opts_.retry_for;
  Duration backoff = opts_.initial_backoff;
  for (int tries = 1;; ++tries) {
    failure_ = Failure::kNone;
    Status s = Connect(doing);
    if (s.ok()) s = attempt();
    if (s.ok()) return s;
    if (failure_ != Failure::kConnection && failure_ != Failure::kConflict) return s;
    if (Clock::now() + backoff > deadline) {
      auto spent = std::chrono::duration_cast<Duration>(Clock::now() - start);
      return Unavailable(s.message() + " (server " + Server() + "; gave up after " +
                         std::to_string(tries) + (tries == 1 ? " try" : " tries") + " in " +
                         Seconds(spent) + ")");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, opts_.max_backoff);
  }
}

template <typename Body>
Status PostgresStore::InTransaction(std::string_view begin, std::string_view doing, Body body) {
  TY_RETURN_IF_ERROR(Exec(begin, doing).status());
  Status s = body();
  if (s.ok()) s = Exec("COMMIT", doing).status();
  if (!s.ok()) RollbackIfOpen();
  return s;
}

Status PostgresStore::Migrate() {
  std::string doing = "migrating the schema";
  return WithRetries(doing, [&] {
    return InTransaction("BEGIN", doing, [&]() -> Status {
      TY_RETURN_IF_ERROR(
          Exec("SELECT pg_advisory_xact_lock($1)", Params().Int(kMigrationLockKey), doing)
              .status());
      TY_RETURN_IF_ERROR(Exec("CREATE TABLE IF NOT EXISTS schema_migrations ("
                              "version INTEGER PRIMARY KEY, "
                              "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                              doing)
                             .status());
      TY_ASSIGN_OR_RETURN(PgResult r,
                          Exec("SELECT coalesce(max(version), 0) FROM schema_migrations", doing));
      int64_t version = Int(r.get(), 0, 0);
      if (version > kSchemaVersion) {
        return FailedPrecondition("database " + Server() + " has schema version " +
                                  std::to_string(version) + ", newer than version " +
                                  std::to_string(kSchemaVersion) +
                                  ", the newest this binary knows; run a newer trainyard");
      }
      if (version < 0) {
        return DataLoss("database " + Server() + " has schema version " + std::to_string(version) +
                        "; a trainyard database has a version between 0 and " +
                        std::to_string(kSchemaVersion));
      }
      for (int64_t v = version; v < kSchemaVersion; ++v) {
        std::string step =
            "migrating from schema version " + std::to_string(v) + " to " + std::to_string(v + 1);
        for (const char* statement : kMigrations[static_cast<size_t>(v)]) {
          TY_RETURN_IF_ERROR(Exec(statement, step).status());
        }
        TY_RETURN_IF_ERROR(
            Exec("INSERT INTO schema_migrations (version) VALUES ($1)", Params().Int(v + 1), step)
                .status());
      }
      return Status::Ok();
    });
  });
}

Result<JobId> PostgresStore::NextJobId(std::string_view sql) {
  TY_ASSIGN_OR_RETURN(PgResult r, Exec(sql, "reading the next job id"));
  if (Rows(r.get()) == 0) {
    return DataLoss("database " + Server() + " has no next_job_id in its meta table");
  }
  return Int(r.get(), 0, 0);
}

Result<bool> PostgresStore::MarkerCommitted(const std::string& token) {
  std::string doing = "finding out whether a commit whose answer was lost was applied";
  bool committed = false;
  TY_RETURN_IF_ERROR(InTransaction("BEGIN", doing, [&]() -> Status {
    // The lost transaction held this lock from its start to its end: once we hold it,
    // that transaction has committed or rolled back, and its marker says which.
    TY_RETURN_IF_ERROR(NextJobId(kWriterLock).status());
    TY_ASSIGN_OR_RETURN(PgResult r, Exec("SELECT token FROM commit_markers WHERE client_id = $1",
                                         Params().Text(client_id_), doing));
    committed = Rows(r.get()) == 1 && Text(r.get(), 0, 0) == token;
    return Status::Ok();
  }));
  return committed;
}

Status PostgresStore::TryCommit(const PreparedBatch& batch, const std::string& token,
                                bool& outcome_unknown) {
  std::string doing = "committing a batch of " + std::to_string(batch.ops.size()) + " ops";
  if (outcome_unknown) {
    TY_ASSIGN_OR_RETURN(bool committed, MarkerCommitted(token));
    if (committed) return Status::Ok();
    outcome_unknown = false;  // certainly not applied: apply it again
  }
  TY_RETURN_IF_ERROR(Exec("BEGIN", doing).status());
  Status s = [&]() -> Status {
    TY_ASSIGN_OR_RETURN(JobId next_job_id, NextJobId(kWriterLock));
    if (const int64_t fence = fence_.load(); fence != 0) {
      // FOR SHARE: a claim that would take the lease waits for this commit to end.
      TY_ASSIGN_OR_RETURN(PgResult r,
                          Exec("SELECT token FROM leader_lease WHERE name = 'leader' AND "
                               "expires_at > now() FOR SHARE",
                               "checking the leadership lease"));
      if (Rows(r.get()) != 1 || Int(r.get(), 0, 0) != fence) {
        return FailedPrecondition(
            "fenced: this server no longer holds the leadership lease (its token " +
            std::to_string(fence) +
            (Rows(r.get()) == 1 ? " was superseded by " + std::to_string(Int(r.get(), 0, 0))
                                : " expired") +
            "); nothing of the batch was applied");
      }
    }
    Target target(*this, next_job_id);
    TY_RETURN_IF_ERROR(ApplyBatch(batch, target));
    return Exec(
               "INSERT INTO commit_markers (client_id, token, updated_at) VALUES ($1, $2, now()) "
               "ON CONFLICT (client_id) DO UPDATE SET token = excluded.token, "
               "updated_at = excluded.updated_at",
               Params().Text(client_id_).Text(token), "writing the commit marker")
        .status();
  }();
  if (!s.ok()) {
    RollbackIfOpen();
    return s;
  }

  // From here a broken connection leaves the outcome unknown until the marker says.
  auto inject = [&](CommitStage stage) {
    if (!opts_.inject_connection_loss ||
        !opts_.inject_connection_loss(stage, PQbackendPID(conn_.get()))) {
      return false;
    }
    DropConnection();
    failure_ = Failure::kConnection;
    outcome_unknown = true;
    return true;
  };
  if (inject(CommitStage::kBeforeCommit)) {
    return Unavailable("postgres: " + doing + ": connection dropped before COMMIT (injected)");
  }
  Status committed = Exec("COMMIT", doing).status();
  if (!committed.ok()) {
    if (failure_ == Failure::kConnection) outcome_unknown = true;
    RollbackIfOpen();
    return committed;
  }
  if (inject(CommitStage::kAfterCommit)) {
    return Unavailable("postgres: " + doing + ": connection dropped after COMMIT (injected)");
  }
  return Status::Ok();
}

Status PostgresStore::Commit(const WriteBatch& batch) {
  if (batch.empty()) return Status::Ok();
  TY_ASSIGN_OR_RETURN(PreparedBatch prepared, PrepareBatch(batch));
  std::lock_guard lock(mu_);
  const std::string token = RandomHex();
  bool outcome_unknown = false;
  Status s = WithRetries("committing a batch of " + std::to_string(batch.size()) + " ops",
                         [&] { return TryCommit(prepared, token, outcome_unknown); });
  if (!s.ok() && outcome_unknown) {
    return Status(s.code(), s.message() +
                                "; the connection broke during COMMIT and the server could not "
                                "be asked since, so the batch may or may not have been applied");
  }
  return s;
}

Result<PostgresStore::Lease> PostgresStore::ClaimLeadership(const std::string& self,
                                                            const std::string& url, Duration ttl) {
  if (self.empty() || !Storable(self) || !Storable(url)) {
    return InvalidArgument("leadership: the server id and URL must be non-empty text");
  }
  std::lock_guard lock(mu_);
  const std::string doing = "claiming the leadership lease";
  Lease lease;
  TY_RETURN_IF_ERROR(WithRetries(doing, [&]() -> Status {
    // One statement: take it when free or expired, renew it when ours; the token
    // changes whenever the holder does (or ours had lapsed, since someone may have
    // acted on that). Two claiming at once: the row lock orders them, and the second
    // finds the first's fresh lease and changes nothing.
    TY_ASSIGN_OR_RETURN(
        PgResult r,
        Exec("INSERT INTO leader_lease AS l (name, holder, url, token, expires_at) "
             "VALUES ('leader', $1, $2, 1, now() + $3 * interval '1 millisecond') "
             "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, url = excluded.url, "
             "token = CASE WHEN l.holder = excluded.holder AND l.expires_at > now() "
             "THEN l.token ELSE l.token + 1 END, expires_at = excluded.expires_at "
             "WHERE l.holder = excluded.holder OR l.expires_at <= now() "
             "RETURNING holder, url, token, "
             "(extract(epoch FROM expires_at - now()) * 1000)::bigint",
             Params().Text(self).Text(url).Int(ttl.count()), doing));
    if (Rows(r.get()) == 0) {
      TY_ASSIGN_OR_RETURN(r, Exec("SELECT holder, url, token, "
                                  "(extract(epoch FROM expires_at - now()) * 1000)::bigint "
                                  "FROM leader_lease WHERE name = 'leader'",
                                  doing));
      if (Rows(r.get()) != 1) return Internal("leadership: the lease row is missing");
    }
    lease.holder = Text(r.get(), 0, 0);
    lease.url = Text(r.get(), 0, 1);
    lease.token = Int(r.get(), 0, 2);
    lease.left = Duration(Int(r.get(), 0, 3));
    return Status::Ok();
  }));
  return lease;
}

Status PostgresStore::ReleaseLeadership(const std::string& self) {
  std::lock_guard lock(mu_);
  const std::string doing = "releasing the leadership lease";
  return WithRetries(doing, [&]() -> Status {
    return Exec(
               "UPDATE leader_lease SET expires_at = now() WHERE name = 'leader' AND "
               "holder = $1 AND expires_at > now()",
               Params().Text(self), doing)
        .status();
  });
}

Result<JobId> PostgresStore::ReserveJobIds(int64_t n) {
  TY_RETURN_IF_ERROR(CheckReservation(n));
  std::lock_guard lock(mu_);
  JobId first = 0;
  // One statement, its own transaction; redoing it after a lost answer leaves a gap.
  TY_RETURN_IF_ERROR(WithRetries("reserving job ids", [&]() -> Status {
    TY_ASSIGN_OR_RETURN(
        PgResult r,
        Exec("UPDATE meta SET value = value + $1 WHERE key = 'next_job_id' AND value <= $2 "
             "RETURNING value - $1",
             Params().Int(n).Int(std::numeric_limits<int64_t>::max() - n), "reserving job ids"));
    if (Rows(r.get()) == 1) {
      first = Int(r.get(), 0, 0);
      return Status::Ok();
    }
    TY_RETURN_IF_ERROR(NextJobId(kReadNextJobId).status());
    return ResourceExhausted("job ids are exhausted");
  }));
  return first;
}

Result<std::vector<Job>> PostgresStore::QueryJobs(std::string_view sql, const Params& params,
                                                  std::string_view doing) {
  TY_ASSIGN_OR_RETURN(PgResult r, Exec(sql, params, doing));
  std::vector<Job> jobs;
  for (int i = 0; i < Rows(r.get()); ++i) {
    TY_ASSIGN_OR_RETURN(Job job, DecodeJobRow(Int(r.get(), i, 0), Text(r.get(), i, 1)));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::optional<Job>> PostgresStore::GetJob(JobId id) {
  std::lock_guard lock(mu_);
  std::string doing = "reading job " + std::to_string(id);
  std::vector<Job> jobs;
  TY_RETURN_IF_ERROR(WithRetries(doing, [&]() -> Status {
    TY_ASSIGN_OR_RETURN(
        jobs, QueryJobs("SELECT id, doc FROM jobs WHERE id = $1", Params().Int(id), doing));
    return Status::Ok();
  }));
  if (jobs.empty()) return std::optional<Job>();
  return std::optional<Job>(std::move(jobs.front()));
}

Result<JobPage> PostgresStore::ListJobs(const JobFilter& filter, JobId after_id, int limit,
                                        JobOrder order) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListJobs", limit));
  // A value no stored row can hold matches nothing (and cannot be sent as text).
  for (const std::string* s : {&filter.tenant, &filter.queue, &filter.name_prefix}) {
    if (!Storable(*s)) return JobPage{};
  }
  const bool descending = order == JobOrder::kDescending;
  Params params;
  // Descending: ids below `after_id`, i.e. up to after_id - 1; every id when it is 0.
  params.Int(!descending     ? after_id
             : after_id == 0 ? std::numeric_limits<JobId>::max()
                             : after_id - 1);
  std::string sql = descending ? "SELECT id, doc FROM jobs WHERE id <= $1"
                               : "SELECT id, doc FROM jobs WHERE id > $1";
  std::set<JobState> states(filter.states.begin(), filter.states.end());
  if (!states.empty()) {
    sql += " AND state IN (";
    for (JobState s : states) {
      params.Text(JobStateName(s));
      sql += (s == *states.begin() ? "" : ", ") + params.Last();
    }
    sql += ")";
  }
  if (!filter.tenant.empty()) sql += " AND tenant = " + params.Text(filter.tenant).Last();
  if (!filter.queue.empty()) sql += " AND queue = " + params.Text(filter.queue).Last();
  if (!filter.name_prefix.empty()) {
    // Byte-wise: the column's collation is "C".
    sql += " AND starts_with(name, " + params.Text(filter.name_prefix).Last() + ")";
  }
  // One more than asked tells whether another page exists.
  sql += std::string(descending ? " ORDER BY id DESC" : " ORDER BY id") + " LIMIT " +
         params.Int(int64_t{limit} + 1).Last();

  std::lock_guard lock(mu_);
  JobPage page;
  TY_RETURN_IF_ERROR(WithRetries("listing jobs", [&]() -> Status {
    TY_ASSIGN_OR_RETURN(page.jobs, QueryJobs(sql, params, "listing jobs"));
    return Status::Ok();
  }));
  page.next_after_id = CutToPage(page.jobs, limit, [](const Job& j) { return j.id; });
  return page;
}

Result<EventPage> PostgresStore::ListEvents(JobId job_id, int64_t after_seq, int limit) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListEvents", limit));
  std::lock_guard lock(mu_);
  std::string doing = "listing events of job " + std::to_string(job_id);
  EventPage page;
  TY_RETURN_IF_ERROR(WithRetries(doing, [&]() -> Status {
    TY_ASSIGN_OR_RETURN(PgResult r,
                        Exec("SELECT seq, job_id, time_ms, actor, kind, message FROM job_events "
                             "WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                             Params().Int(job_id).Int(after_seq).Int(int64_t{limit} + 1), doing));
    page.events.clear();
    const PGresult* res = r.get();
    for (int i = 0; i < Rows(res); ++i) {
      page.events.push_back(JobEvent{Int(res, i, 0), Int(res, i, 1),
                                     Timestamp(Duration(Int(res, i, 2))), Bytes(res, i, 3),
                                     Bytes(res, i, 4), Bytes(res, i, 5)});
    }
    return Status::Ok();
  }));
  page.next_after_seq = CutToPage(page.events, limit, [](const JobEvent& e) { return e.seq; });
  return page;
}

Result<AuditPage> PostgresStore::ListAudit(const AuditFilter& filter, int64_t after_seq,
                                           int limit) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListAudit", limit));
  Params params;
  params.Int(after_seq);
  std::string sql =
      "SELECT seq, time_ms, actor, token_id, tenant, action, object, source, status, message "
      "FROM audit_log WHERE seq > $1";
  if (!filter.actor.empty()) sql += " AND actor = " + params.Bytes(filter.actor).Last();
  if (!filter.tenant.empty()) sql += " AND tenant = " + params.Bytes(filter.tenant).Last();
  if (!filter.object.empty()) sql += " AND object = " + params.Bytes(filter.object).Last();
  // One more than asked tells whether another page exists.
  sql += " ORDER BY seq LIMIT " + params.Int(int64_t{limit} + 1).Last();

  std::lock_guard lock(mu_);
  AuditPage page;
  TY_RETURN_IF_ERROR(WithRetries("listing the audit log", [&]() -> Status {
    TY_ASSIGN_OR_RETURN(PgResult r, Exec(sql, params, "listing the audit log"));
    page.entries.clear();
    const PGresult* res = r.get();
    for (int i = 0; i < Rows(res); ++i) {
      AuditEntry e;
      e.seq = Int(res, i, 0);
      e.time = Timestamp(Duration(Int(res, i, 1)));
      e.actor = Bytes(res, i, 2);
      e.token_id = Bytes(res, i, 3);
      e.tenant = Bytes(res, i, 4);
      e.action = Bytes(res, i, 5);
      e.object = Bytes(res, i, 6);
      e.source = Bytes(res, i, 7);
      e.status = static_cast<int32_t>(Int(res, i, 8));
      e.message = Bytes(res, i, 9);
      page.entries.push_back(std::move(e));
    }
    return Status::Ok();
  }));
  page.next_after_seq = CutToPage(page.entries, limit, [](const AuditEntry& e) { return e.seq; });
  return page;
}

Result<std::vector<Node>> PostgresStore::ReadNodes() {
  TY_ASSIGN_OR_RETURN(PgResult r,
                      Exec("SELECT name, doc FROM nodes ORDER BY name", "listing nodes"));
  std::vector<Node> out;
  for (int i = 0; i < Rows(r.get()); ++i) {
    TY_ASSIGN_OR_RETURN(Node n, DecodeNodeRow(Text(r.get(), i, 0), Text(r.get(), i, 1)));
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<Tenant>> PostgresStore::ReadTenants() {
  TY_ASSIGN_OR_RETURN(PgResult r,
                      Exec("SELECT name, doc FROM tenants ORDER BY name", "listing tenants"));
  std::vector<Tenant> out;
  for (int i = 0; i < Rows(r.get()); ++i) {
    TY_ASSIGN_OR_RETURN(Tenant t, DecodeTenantRow(Text(r.get(), i, 0), Text(r.get(), i, 1)));
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<Queue>> PostgresStore::ReadQueues() {
  TY_ASSIGN_OR_RETURN(PgResult r, Exec("SELECT tenant, name, doc FROM queues ORDER BY tenant, name",
                                       "listing queues"));
  std::vector<Queue> out;
  for (int i = 0; i < Rows(r.get()); ++i) {
    TY_ASSIGN_OR_RETURN(
        Queue q, DecodeQueueRow(Text(r.get(), i, 0), Text(r.get(), i, 1), Text(r.get(), i, 2)));
    out.push_back(std::move(q));
  }
  return out;
}

Result<std::vector<PriorityClass>> PostgresStore::ReadPriorityClasses() {
  TY_ASSIGN_OR_RETURN(PgResult r, Exec("SELECT name, doc FROM priority_classes ORDER BY name",
                                       "listing priority classes"));
  std::vector<PriorityClass> out;
  for (int i = 0; i < Rows(r.get()); ++i) {
    TY_ASSIGN_OR_RETURN(PriorityClass p,
                        DecodePriorityClassRow(Text(r.get(), i, 0), Text(r.get(), i, 1)));
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::vector<User>> PostgresStore::ReadUsers() {
  TY_ASSIGN_OR_RETURN(PgResult r,
                      Exec("SELECT name, doc FROM users ORDER BY name", "listing users"));
  std::vector<User> out;
  for (int i = 0; i < Rows(r.get()); ++i) {
    TY_ASSIGN_OR_RETURN(User u, DecodeUserRow(Text(r.get(), i, 0), Text(r.get(), i, 1)));
    out.push_back(std::move(u));
  }
  return out;
}

Result<std::vector<ApiToken>> PostgresStore::ReadTokens() {
  TY_ASSIGN_OR_RETURN(PgResult r,
                      Exec("SELECT id, doc FROM api_tokens ORDER BY id", "listing tokens"));
  std::vector<ApiToken> out;
  for (int i = 0; i < Rows(r.get()); ++i) {
    TY_ASSIGN_OR_RETURN(ApiToken t, DecodeTokenRow(Text(r.get(), i, 0), Text(r.get(), i, 1)));
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<Dataset>> PostgresStore::ReadDatasets() {
  TY_ASSIGN_OR_RETURN(PgResult r,
                      Exec("SELECT name, doc FROM datasets ORDER BY name", "listing datasets"));
  std::vector<Dataset> out;
  for (int i = 0; i < Rows(r.get()); ++i) {
    TY_ASSIGN_OR_RETURN(Dataset d, DecodeDatasetRow(Text(r.get(), i, 0), Text(r.get(), i, 1)));
    out.push_back(std::move(d));
  }
  return out;
}

template <typename T>
Result<std::vector<T>> PostgresStore::ListWithRetries(
    std::string_view doing, Result<std::vector<T>> (PostgresStore::*read)()) {
  std::lock_guard lock(mu_);
  std::vector<T> out;
  TY_RETURN_IF_ERROR(WithRetries(doing, [&]() -> Status {
    TY_ASSIGN_OR_RETURN(out, (this->*read)());
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<Node>> PostgresStore::ListNodes() {
  return ListWithRetries("listing nodes", &PostgresStore::ReadNodes);
}
Result<std::vector<Tenant>> PostgresStore::ListTenants() {
  return ListWithRetries("listing tenants", &PostgresStore::ReadTenants);
}
Result<std::vector<Queue>> PostgresStore::ListQueues() {
  return ListWithRetries("listing queues", &PostgresStore::ReadQueues);
}
Result<std::vector<PriorityClass>> PostgresStore::ListPriorityClasses() {
  return ListWithRetries("listing priority classes", &PostgresStore::ReadPriorityClasses);
}
Result<std::vector<User>> PostgresStore::ListUsers() {
  return ListWithRetries("listing users", &PostgresStore::ReadUsers);
}
Result<std::vector<ApiToken>> PostgresStore::ListTokens() {
  return ListWithRetries("listing tokens", &PostgresStore::ReadTokens);
}
Result<std::vector<Dataset>> PostgresStore::ListDatasets() {
  return ListWithRetries("listing datasets", &PostgresStore::ReadDatasets);
}

Result<std::optional<std::string>> PostgresStore::GetManifest(const std::string& version) {
  if (!Storable(version)) return std::optional<std::string>();
  std::lock_guard lock(mu_);
  const std::string doing = "reading the manifest of " + version;
  std::optional<std::string> out;
  TY_RETURN_IF_ERROR(WithRetries(doing, [&]() -> Status {
    TY_ASSIGN_OR_RETURN(PgResult r, Exec("SELECT text FROM dataset_manifests WHERE version = $1",
                                         Params().Text(version), doing));
    out.reset();
    if (Rows(r.get()) > 0) out = std::string(Text(r.get(), 0, 0));
    return Status::Ok();
  }));
  return out;
}

Status PostgresStore::ReadState(StoredState& state) {
  const std::vector<std::string>& active = NonTerminalStateNames();
  Params params;
  std::string sql = "SELECT id, doc FROM jobs WHERE state IN (";
  for (size_t i = 0; i < active.size(); ++i) {
    sql += (i ? ", " : "") + params.Text(active[i]).Last();
  }
  sql += ") ORDER BY id";
  TY_ASSIGN_OR_RETURN(state.active_jobs, QueryJobs(sql, params, "loading active jobs"));
  TY_ASSIGN_OR_RETURN(state.nodes, ReadNodes());
  TY_ASSIGN_OR_RETURN(state.tenants, ReadTenants());
  TY_ASSIGN_OR_RETURN(state.queues, ReadQueues());
  TY_ASSIGN_OR_RETURN(state.priority_classes, ReadPriorityClasses());
  TY_ASSIGN_OR_RETURN(state.users, ReadUsers());
  TY_ASSIGN_OR_RETURN(state.tokens, ReadTokens());
  TY_ASSIGN_OR_RETURN(state.datasets, ReadDatasets());
  TY_ASSIGN_OR_RETURN(state.next_job_id, NextJobId(kReadNextJobId));
  TY_ASSIGN_OR_RETURN(PgResult r, Exec("SELECT coalesce(max(seq), 0) FROM job_events",
                                       "reading the last event seq"));
  state.last_event_seq = Int(r.get(), 0, 0);
  return Status::Ok();
}

Result<StoredState> PostgresStore::LoadAll() {
  std::lock_guard lock(mu_);
  StoredState state;
  std::string doing = "loading the stored state";
  TY_RETURN_IF_ERROR(WithRetries(doing, [&] {
    state = StoredState{};
    return InTransaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", doing,
                         [&] { return ReadState(state); });
  }));
  return state;
}

}  // namespace trainyard::store
