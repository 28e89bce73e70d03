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
      ElementsAre("job_events", "jobs", "meta", "nodes", "priority_classes", "queues", "tenants"));
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
  Result<JobPage> page = store->ListJobs({.name_prefix = "llama"}, 0, 10);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0], llama);
  EXPECT_EQ(store->ListEvents(1, 0, 10)->events.at(0).message, "from v1");
  EXPECT_THAT(*store->ListTenants(), ElementsAre(Tenant{"research", ""}));
  EXPECT_EQ(*store->ReserveJobIds(1), 3);
  EXPECT_EQ(store->LoadAll()->active_jobs.size(), 2u);
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
              HasSubstr("database " + path_ + " has schema version 7, newer than version 2"));
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
  EXPECT_EQ(store->ListJobs({}, 0, 10).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(store->LoadAll().status().code(), StatusCode::kDataLoss);
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
