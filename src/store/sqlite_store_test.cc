// What only the SQLite store has: a file that outlives the process, a schema with
// versions and migrations, and a second connection that can look underneath.
// Behaviour shared with MemoryStore is tested in store_test.cc.

#include "store/sqlite_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "core/codec.h"
#include "store/testing.h"

namespace trainyard::store {
namespace {

using test::At;
using test::RawDb;
using test::TestJob;
using test::TestToken;
using test::TestUser;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class SqliteStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> Open(const SqliteOptions& options = {}) {
    Result<std::unique_ptr<Store>> store = SqliteStore::Open(path_, options);
    TY_CHECK_MSG(store.ok(), store.status().ToString());
    return std::move(store).value();
  }

  test::TempDir dir_;
  std::string path_ = dir_.File("state.db");
};

void MustCommit(Store& store, const WriteBatch& batch) {
  Status s = store.Commit(batch);
  TY_CHECK_MSG(s.ok(), s.ToString());
}

TEST_F(SqliteStoreTest, ReopenKeepsEverythingAndIdsKeepIncreasing) {
  Node node;
  node.name = "n1";
  node.gpus = {Gpu{0, "GPU-0", "A100", 40 * kGiB, "d0"}};
  StoredState before;
  std::vector<JobEvent> events_before;
  {
    std::unique_ptr<Store> store = Open();
    ASSERT_EQ(*store->ReserveJobIds(2), 1);
    WriteBatch batch;
    batch.PutTenant(Tenant{"research", ""});
    batch.PutQueue(Queue{"vision", "research", "", 1, 2, 1.0});
    batch.PutPriorityClass(PriorityClass{"p0", 1000, false});
    batch.PutNode(node);
    batch.PutJob(TestJob(1, "a"));
    batch.PutJob(TestJob(2, "b", JobState::kSucceeded));
    batch.AppendEvent(1, At(1), "user:alice", "Submitted", "");
    batch.AppendEvent(2, At(2), "user:alice", "Submitted", "");
    MustCommit(*store, batch);
    ASSERT_EQ(*store->ReserveJobIds(5), 3);  // reserved, never used
    before = *store->LoadAll();
    events_before = store->ListEvents(1, 0, 10)->events;
  }
  std::unique_ptr<Store> store = Open();
  Result<StoredState> after = store->LoadAll();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->active_jobs, before.active_jobs);
  EXPECT_THAT(after->nodes, ElementsAre(node));
  EXPECT_EQ(after->tenants, before.tenants);
  EXPECT_EQ(after->queues, before.queues);
  EXPECT_EQ(after->priority_classes, before.priority_classes);
  EXPECT_EQ(after->last_event_seq, 2);
  EXPECT_EQ(after->next_job_id, 8);
  EXPECT_EQ(store->ListEvents(1, 0, 10)->events, events_before);
  EXPECT_EQ(store->GetJob(2)->value(), TestJob(2, "b", JobState::kSucceeded));
  EXPECT_EQ(*store->ReserveJobIds(1), 8);
}

TEST_F(SqliteStoreTest, UsesWalForeignKeysAndTheLatestSchema) {
  std::unique_ptr<Store> store = Open();
  EXPECT_EQ(store->SchemaVersion(), SqliteStore::kSchemaVersion);
  EXPECT_EQ(store->Describe(), "sqlite:" + path_);
  RawDb raw(path_);
  EXPECT_EQ(raw.One("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.One("PRAGMA user_version"), std::to_string(SqliteStore::kSchemaVersion));
  EXPECT_THAT(
      raw.Column("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                 "'sqlite_%' ORDER BY name"),
      ElementsAre("api_tokens", "audit_log", "dataset_manifests", "datasets", "job_events", "jobs",
                  "meta", "nodes", "priority_classes", "queues", "tenants", "users"));
  EXPECT_EQ(raw.One("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(raw.Column("PRAGMA foreign_key_check").size(), 0u);
}

TEST_F(SqliteStoreTest, OpensWithEverySyncMode) {
  for (auto sync :
       {SqliteOptions::Sync::kOff, SqliteOptions::Sync::kNormal, SqliteOptions::Sync::kFull}) {
    std::unique_ptr<Store> store = Open({.synchronous = sync});
    EXPECT_TRUE(store->ReserveJobIds(1).ok());
  }
}

TEST_F(SqliteStoreTest, EventLogIsAppendOnly) {
  std::unique_ptr<Store> store = Open();
  ASSERT_EQ(*store->ReserveJobIds(1), 1);
  WriteBatch batch;
  batch.PutJob(TestJob(1, "a"));
  batch.AppendEvent(1, At(1), "user:alice", "Submitted", "original");
  MustCommit(*store, batch);

  RawDb raw(path_);
  EXPECT_THAT(raw.Exec("UPDATE job_events SET message = 'rewritten'"), HasSubstr("append-only"));
  EXPECT_THAT(raw.Exec("DELETE FROM job_events"), HasSubstr("append-only"));
  EXPECT_EQ(raw.One("SELECT message FROM job_events"), "original");
  EXPECT_EQ(store->ListEvents(1, 0, 10)->events.at(0).message, "original");
}

TEST_F(SqliteStoreTest, ReopenKeepsUsersTokensAndTheAuditLog) {
  User alice = TestUser("alice");
  alice.priority_classes = {"p0"};
  User root = TestUser("root", "", Role::kClusterAdmin);
  ApiToken token = TestToken('a', "alice");
  token.expires = At(50'000);
  AuditEntry entry{.time = At(7),
                   .actor = "user:root",
                   .token_id = "0123456789ab",
                   .tenant = "research",
                   .action = "POST /api/v1/users",
                   .object = "user/alice",
                   .source = "[::1]:4000",
                   .status = 201,
                   .message = ""};
  {
    std::unique_ptr<Store> store = Open();
    WriteBatch batch;
    batch.PutTenant(Tenant{"research", ""});
    batch.PutUser(alice);
    batch.PutUser(root);
    batch.PutToken(token);
    batch.AppendAudit(entry);
    batch.AppendAudit(entry);
    MustCommit(*store, batch);
  }
  std::unique_ptr<Store> store = Open();
  Result<StoredState> state = store->LoadAll();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_THAT(state->users, ElementsAre(alice, root));
  EXPECT_THAT(state->tokens, ElementsAre(token));
  Result<AuditPage> audit = store->ListAudit({}, 0, 10);
  ASSERT_TRUE(audit.ok()) << audit.status().ToString();
  ASSERT_EQ(audit->entries.size(), 2u);
  entry.seq = 2;
  EXPECT_EQ(audit->entries[1], entry);

  // The cluster admin's tenant is NULL, so the foreign key to tenants holds.
  RawDb raw(path_);
  EXPECT_THAT(raw.Column("SELECT coalesce(tenant, 'NULL') FROM users ORDER BY name"),
              ElementsAre("research", "NULL"));
  EXPECT_EQ(raw.One("SELECT user_name FROM api_tokens"), "alice");
  EXPECT_EQ(raw.Column("PRAGMA foreign_key_check").size(), 0u);

  // Sequence numbers keep increasing across a reopen.
  WriteBatch more;
  more.AppendAudit(entry);
  MustCommit(*store, more);
  EXPECT_EQ(store->ListAudit({}, 2, 10)->entries.at(0).seq, 3);
}

TEST_F(SqliteStoreTest, AuditLogIsAppendOnly) {
  std::unique_ptr<Store> store = Open();
  WriteBatch batch;
  AuditEntry entry;
  entry.actor = "user:alice";
  entry.message = "original";
  batch.AppendAudit(entry);
  MustCommit(*store, batch);

  RawDb raw(path_);
  EXPECT_THAT(raw.Exec("UPDATE audit_log SET message = 'rewritten'"), HasSubstr("append-only"));
  EXPECT_THAT(raw.Exec("DELETE FROM audit_log"), HasSubstr("append-only"));
  EXPECT_EQ(raw.One("SELECT message FROM audit_log"), "original");
}

TEST_F(SqliteStoreTest, ListAuditFiltersUseAnIndex) {
  Open();
  RawDb raw(path_);
  // The shape of ListAudit's query with one filter: a search of the index, in seq
  // order, no scan and no sort.
  const std::string select = "EXPLAIN QUERY PLAN SELECT * FROM audit_log WHERE seq > 0 AND ";
  for (const std::string column : {"actor", "tenant", "object"}) {
    std::vector<std::string> plan =
        raw.Column(select + column + " = 'x' ORDER BY seq LIMIT 10", /*col=*/3);
    ASSERT_EQ(plan.size(), 1u) << column;
    // Older SQLite says "SEARCH TABLE audit_log"; a sort would be a row of its own.
    EXPECT_THAT(plan[0],
                HasSubstr("USING INDEX audit_log_by_" + column + " (" + column + "=? AND seq>?)"));
  }
}

TEST_F(SqliteStoreTest, UnreadableUserOrTokenDocumentsAreDataLoss) {
  std::unique_ptr<Store> store = Open();
  WriteBatch batch;
  batch.PutTenant(Tenant{"research", ""});
  batch.PutUser(TestUser("alice"));
  batch.PutToken(TestToken('a', "alice"));
  MustCommit(*store, batch);
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("UPDATE users SET doc = json_set(doc, '$.role', 'admin')"), "");
  }
  Result<std::vector<User>> users = store->ListUsers();
  EXPECT_EQ(users.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(users.status().message(),
              HasSubstr("user alice: stored document does not decode: user.role: unknown value"));
  EXPECT_EQ(store->LoadAll().status().code(), StatusCode::kDataLoss);
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("UPDATE users SET doc = json_set(doc, '$.role', 'member');"
                       "UPDATE api_tokens SET doc = json_set(doc, '$.id', 'bbbbbbbbbbbb')"),
              "");
  }
  ASSERT_TRUE(store->ListUsers().ok());
  // A document under another token's id must not be believed.
  Result<std::vector<ApiToken>> tokens = store->ListTokens();
  EXPECT_EQ(tokens.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(tokens.status().message(),
            "token aaaaaaaaaaaa: stored document has id \"bbbbbbbbbbbb\"");
}

// The schema as version 1 of this binary wrote it, by hand: no name or
// submit_time_ms columns on jobs.
constexpr const char* kVersion1Schema = R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('next_job_id', 1);
CREATE TABLE tenants (name TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE queues (
  tenant TEXT NOT NULL REFERENCES tenants (name), name TEXT NOT NULL, parent TEXT,
  doc TEXT NOT NULL, PRIMARY KEY (tenant, name),
  FOREIGN KEY (tenant, parent) REFERENCES queues (tenant, name)) WITHOUT ROWID;
CREATE INDEX queues_by_parent ON queues (tenant, parent);
CREATE TABLE priority_classes (name TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE nodes (name TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, tenant TEXT NOT NULL,
                   queue TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX jobs_by_state ON jobs (state, id);
CREATE INDEX jobs_by_tenant_queue ON jobs (tenant, queue, id);
CREATE TABLE job_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL REFERENCES jobs (id),
  time_ms INTEGER NOT NULL, actor TEXT NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL);
CREATE INDEX job_events_by_job ON job_events (job_id, seq);
CREATE TRIGGER job_events_no_update BEFORE UPDATE ON job_events
BEGIN SELECT RAISE(ABORT, 'job_events is append-only'); END;
CREATE TRIGGER job_events_no_delete BEFORE DELETE ON job_events
BEGIN SELECT RAISE(ABORT, 'job_events is append-only'); END;
PRAGMA user_version = 1;
)sql";

std::string SqlQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

TEST_F(SqliteStoreTest, MigratesAVersion1Database) {
  Job llama = TestJob(1, "llama-7b", JobState::kRunning);
  Job bert = TestJob(2, "bert", JobState::kPending);
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec(kVersion1Schema), "");
    std::string sql = "UPDATE meta SET value = 3 WHERE key = 'next_job_id';";
    sql += "INSERT INTO tenants VALUES ('research', " +
           SqlQuote(ToJson(Tenant{"research", ""}).dump()) + ");";
    for (const Job* job : {&llama, &bert}) {
      sql += "INSERT INTO jobs VALUES (" + std::to_string(job->id) + ", '" +
             std::string(JobStateName(job->state)) + "', 'research', 'vision', " +
             SqlQuote(ToJson(*job).dump()) + ");";
    }
    sql +=
        "INSERT INTO job_events (job_id, time_ms, actor, kind, message) VALUES "
        "(1, 5, 'user:alice', 'Submitted', 'from v1');";
    ASSERT_EQ(raw.Exec(sql), "");
    ASSERT_EQ(raw.One("PRAGMA user_version"), "1");
  }

  std::unique_ptr<Store> store = Open();
  RawDb raw(path_);
  EXPECT_EQ(raw.One("PRAGMA user_version"), std::to_string(SqliteStore::kSchemaVersion));
  // The new columns were filled from the documents.
  EXPECT_THAT(raw.Column("SELECT name || ' ' || submit_time_ms FROM jobs ORDER BY id"),
              ElementsAre("llama-7b 1000", "bert 2000"));
  EXPECT_EQ(raw.One("PRAGMA integrity_check"), "ok");

  EXPECT_EQ(store->GetJob(1)->value(), llama);
  Result<JobPage> page = store->ListJobs({.name_prefix = "llama"}, 0, 10, JobOrder::kAscending);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0], llama);
  EXPECT_EQ(store->ListEvents(1, 0, 10)->events.at(0).message, "from v1");
  EXPECT_THAT(*store->ListTenants(), ElementsAre(Tenant{"research", ""}));
  EXPECT_EQ(*store->ReserveJobIds(1), 3);
  EXPECT_EQ(store->LoadAll()->active_jobs.size(), 2u);
}

// What version 2 added to version 1, by hand.
constexpr const char* kVersion2Changes = R"sql(
ALTER TABLE jobs ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN submit_time_ms INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_by_name ON jobs (name, id);
CREATE INDEX jobs_by_queue ON jobs (queue, id);
CREATE INDEX jobs_by_submit_time ON jobs (submit_time_ms);
PRAGMA user_version = 2;
)sql";

TEST_F(SqliteStoreTest, MigratesAVersion2Database) {
  Job llama = TestJob(1, "llama-7b", JobState::kRunning);
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec(kVersion1Schema), "");
    ASSERT_EQ(raw.Exec(kVersion2Changes), "");
    std::string sql = "UPDATE meta SET value = 2 WHERE key = 'next_job_id';";
    sql += "INSERT INTO tenants VALUES ('research', " +
           SqlQuote(ToJson(Tenant{"research", ""}).dump()) + ");";
    sql += "INSERT INTO jobs (id, state, tenant, queue, name, submit_time_ms, doc) VALUES (1, '" +
           std::string(JobStateName(llama.state)) + "', 'research', 'vision', 'llama-7b', 1000, " +
           SqlQuote(ToJson(llama).dump()) + ");";
    sql +=
        "INSERT INTO job_events (job_id, time_ms, actor, kind, message) VALUES "
        "(1, 5, 'user:alice', 'Submitted', 'from v2');";
    ASSERT_EQ(raw.Exec(sql), "");
    ASSERT_EQ(raw.One("PRAGMA user_version"), "2");
  }

  std::unique_ptr<Store> store = Open();
  {
    RawDb raw(path_);
    EXPECT_EQ(raw.One("PRAGMA user_version"), std::to_string(SqliteStore::kSchemaVersion));
    EXPECT_THAT(raw.Column("SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
                           "('users', 'api_tokens', 'audit_log', 'datasets', "
                           "'dataset_manifests') ORDER BY name"),
                ElementsAre("api_tokens", "audit_log", "dataset_manifests", "datasets", "users"));
    EXPECT_EQ(raw.One("PRAGMA integrity_check"), "ok");
  }
  // What was there is still there.
  EXPECT_EQ(store->GetJob(1)->value(), llama);
  EXPECT_EQ(store->ListEvents(1, 0, 10)->events.at(0).message, "from v2");
  EXPECT_THAT(*store->ListTenants(), ElementsAre(Tenant{"research", ""}));
  EXPECT_EQ(*store->ReserveJobIds(1), 2);
  Result<StoredState> state = store->LoadAll();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->active_jobs.size(), 1u);
  EXPECT_TRUE(state->users.empty());
  EXPECT_TRUE(state->tokens.empty());

  // And the new tables work, with their checks.
  WriteBatch batch;
  batch.PutUser(TestUser("alice"));
  batch.PutToken(TestToken('a', "alice"));
  AuditEntry entry;
  entry.actor = "user:alice";
  batch.AppendAudit(entry);
  MustCommit(*store, batch);
  EXPECT_EQ(store->ListUsers()->size(), 1u);
  EXPECT_EQ(store->ListTokens()->size(), 1u);
  EXPECT_EQ(store->ListAudit({}, 0, 10)->entries.at(0).seq, 1);
  WriteBatch delete_tenant;
  delete_tenant.DeleteTenant("research");
  EXPECT_EQ(store->Commit(delete_tenant).code(), StatusCode::kFailedPrecondition);
}

TEST_F(SqliteStoreTest, RefusesANewerSchema) {
  Open();
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("PRAGMA user_version = 7"), "");
  }
  Result<std::unique_ptr<Store>> store = SqliteStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr("database " + path_ + " has schema version 7, newer than version " +
                        std::to_string(SqliteStore::kSchemaVersion)));
  // And left it as it was.
  RawDb raw(path_);
  EXPECT_EQ(raw.One("PRAGMA user_version"), "7");
}

TEST_F(SqliteStoreTest, RefusesAFileThatIsNotADatabase) {
  {
    std::ofstream out(path_);
    for (int i = 0; i < 200; ++i) out << "this is not a database, it is a text file\n";
  }
  Result<std::unique_ptr<Store>> store = SqliteStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));
}

TEST_F(SqliteStoreTest, CreatesOnlyWhenAllowed) {
  Result<std::unique_ptr<Store>> store = SqliteStore::Open(path_, {.create_if_missing = false});
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("opening " + path_));
  Result<std::unique_ptr<Store>> nowhere = SqliteStore::Open(dir_.File("no/such/dir/state.db"));
  ASSERT_FALSE(nowhere.ok());
  EXPECT_THAT(nowhere.status().message(), HasSubstr("no/such/dir/state.db"));
}

TEST_F(SqliteStoreTest, UnreadableDocumentsAreDataLoss) {
  std::unique_ptr<Store> store = Open();
  ASSERT_EQ(*store->ReserveJobIds(2), 1);
  WriteBatch batch;
  batch.PutJob(TestJob(1, "a"));
  batch.PutJob(TestJob(2, "b"));
  MustCommit(*store, batch);
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("UPDATE jobs SET doc = '{\"id\": 1}' WHERE id = 1;"
                       "UPDATE jobs SET doc = 'not json' WHERE id = 2;"),
              "");
  }
  Result<std::optional<Job>> one = store->GetJob(1);
  EXPECT_EQ(one.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(one.status().message(), "job 1: stored document does not decode: job.spec: missing");
  EXPECT_EQ(store->GetJob(2).status().message(), "job 2: stored document is not valid JSON");
  EXPECT_EQ(store->ListJobs({}, 0, 10, JobOrder::kAscending).status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(store->LoadAll().status().code(), StatusCode::kDataLoss);
}

TEST_F(SqliteStoreTest, SpecsStoredBeforeThePathRuleStillLoadAndWriteBack) {
  // A job stored before path fields lost ".." components (an earlier version wrote
  // such specs): the database loads, and the job's next transition writes it again.
  std::unique_ptr<Store> store = Open();
  ASSERT_EQ(*store->ReserveJobIds(1), 1);
  WriteBatch batch;
  batch.PutJob(TestJob(1, "a"));
  MustCommit(*store, batch);
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.Exec("UPDATE jobs SET doc = json_set(doc, '$.spec.working_dir', "
                       "'/data/team/../shared') WHERE id = 1;"),
              "");
  }
  Result<std::optional<Job>> job = store->GetJob(1);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(job->has_value());
  EXPECT_EQ((*job)->spec.working_dir, "/data/team/../shared");
  EXPECT_TRUE(store->LoadAll().ok());
  Job next = **job;
  next.state = JobState::kCancelled;
  WriteBatch again;
  again.PutJob(next);
  EXPECT_TRUE(store->Commit(again).ok());
  EXPECT_EQ((*store->GetJob(1))->state, JobState::kCancelled);
}

TEST_F(SqliteStoreTest, TwoStoresOnOneFileShareIdsAndData) {
  std::unique_ptr<Store> a = Open();
  std::unique_ptr<Store> b = Open();
  std::vector<JobId> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(*a->ReserveJobIds(1));
    ids.push_back(*b->ReserveJobIds(1));
  }
  EXPECT_EQ(ids, (std::vector<JobId>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  WriteBatch batch;
  batch.PutJob(TestJob(3, "from-a"));
  MustCommit(*a, batch);
  ASSERT_TRUE(b->GetJob(3)->has_value());
  EXPECT_EQ(b->GetJob(3)->value().spec.name, "from-a");
}

}  // namespace
}  // namespace trainyard::store
