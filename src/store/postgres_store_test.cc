// What only the PostgreSQL store has: a conninfo, a server that can be away or cut
// connections, several stores on one database, and versioned migrations. Behaviour
// shared with the other stores is tested in store_test.cc. Each test runs on a fresh
// schema of a throwaway server (postgres_testing.h).

#include "store/postgres_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/postgres_testing.h"
#include "store/testing.h"

namespace trainyard::store {
namespace {

using test::At;
using test::PgConnection;
using test::TestJob;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Short waits: a test that breaks connections should not sleep for seconds.
PostgresOptions FastRetries() {
  PostgresOptions o;
  o.retry_for = Duration(5'000);
  o.initial_backoff = Duration(5);
  o.max_backoff = Duration(50);
  return o;
}

// Every migration level, 1 to kSchemaVersion, once each: what schema_migrations holds.
std::vector<std::string> AllMigrations() {
  std::vector<std::string> v;
  for (int i = 1; i <= PostgresStore::kSchemaVersion; ++i) v.push_back(std::to_string(i));
  return v;
}

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<test::PostgresSchema>> schema = test::PostgresSchema::Create();
    if (!schema.ok()) TRAINYARD_SKIP_OR_FAIL_WITHOUT_POSTGRES(schema.status());
    schema_ = std::move(schema).value();
    raw_ = std::make_unique<PgConnection>(schema_->conninfo());
  }

  // A conninfo whose sessions show `name` in pg_stat_activity, for finding them.
  std::string Conninfo(const std::string& application_name = "trainyard-test") const {
    return schema_->conninfo() + " application_name=" + application_name;
  }

  std::unique_ptr<Store> Open(PostgresOptions opts = FastRetries(),
                              const std::string& application_name = "trainyard-test") {
    Result<std::unique_ptr<Store>> store =
        PostgresStore::Open(Conninfo(application_name), std::move(opts));
    TY_CHECK_MSG(store.ok(), store.status().ToString());
    return std::move(store).value();
  }

  // Terminates the backend with `pid` and waits until it is gone.
  void Terminate(int pid) {
    std::string p = std::to_string(pid);
    ASSERT_EQ(raw_->One("SELECT pg_terminate_backend(" + p + ")"), "t");
    for (int i = 0; i < 1000; ++i) {
      if (raw_->One("SELECT count(*) FROM pg_stat_activity WHERE pid = " + p) == "0") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    FAIL() << "backend " << pid << " did not exit";
  }

  // The pid of the one session named `application_name`.
  int BackendOf(const std::string& application_name) {
    return std::stoi(raw_->One("SELECT pid FROM pg_stat_activity WHERE application_name = '" +
                               application_name + "'"));
  }

  // A job with one event, ready to commit; `id` must have been reserved.
  static WriteBatch JobWithEvent(JobId id) {
    WriteBatch batch;
    batch.PutJob(TestJob(id, "job-" + std::to_string(id)));
    batch.AppendEvent(id, At(id), "user:alice", "Submitted", "job " + std::to_string(id));
    return batch;
  }

  // How many rows `table` has for job `id` (jobs: id, job_events: job_id).
  std::string Count(const std::string& table, JobId id) {
    std::string column = table == "jobs" ? "id" : "job_id";
    return raw_->One("SELECT count(*) FROM " + table + " WHERE " + column + " = " +
                     std::to_string(id));
  }

  std::unique_ptr<test::PostgresSchema> schema_;
  std::unique_ptr<PgConnection> raw_;
};

TEST_F(PostgresStoreTest, DescribesTheServerWithoutThePassword) {
  Result<std::unique_ptr<Store>> store =
      PostgresStore::Open(schema_->conninfo() + " password=hunter2", FastRetries());
  ASSERT_TRUE(store.ok()) << store.status().ToString();  // trust auth ignores it
  EXPECT_THAT((*store)->Describe(), StartsWith("postgres:"));
  EXPECT_THAT((*store)->Describe(), HasSubstr("dbname=postgres"));
  EXPECT_THAT((*store)->Describe(), Not(HasSubstr("hunter2")));
  EXPECT_THAT((*store)->Describe(), Not(HasSubstr("password")));
  EXPECT_EQ((*store)->SchemaVersion(), PostgresStore::kSchemaVersion);

  // The URI form; a value with a space comes back quoted.
  test::PostgresServer* server = *test::PostgresServer::Shared();
  store = PostgresStore::Open("postgresql://postgres:hunter2@/postgres?host=" + server->dir() +
                                  "&options=-c%20search_path%3D" + schema_->name(),
                              FastRetries());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_THAT((*store)->Describe(), Not(HasSubstr("hunter2")));
  EXPECT_THAT((*store)->Describe(), HasSubstr("options='-c search_path=" + schema_->name() + "'"));
}

TEST_F(PostgresStoreTest, RejectsAConninfoThatDoesNotParse) {
  for (const char* conninfo : {"host=/tmp dbname", "nosuchoption=1", "host='unterminated"}) {
    Result<std::unique_ptr<Store>> store = PostgresStore::Open(conninfo, FastRetries());
    ASSERT_FALSE(store.ok()) << conninfo;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << conninfo;
    EXPECT_THAT(store.status().message(), HasSubstr("conninfo does not parse")) << conninfo;
  }
}

TEST_F(PostgresStoreTest, AServerThatIsNotThereIsUnavailableAfterRetrying) {
  test::TempDir nowhere;  // no server listens on a socket here
  PostgresOptions opts = FastRetries();
  opts.retry_for = Duration(300);
  auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<Store>> store =
      PostgresStore::Open("host=" + nowhere.path() + " dbname=postgres user=postgres", opts);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  // Names the server and says what libpq said and how long it tried.
  EXPECT_THAT(store.status().message(), HasSubstr(nowhere.path()));
  EXPECT_THAT(store.status().message(), HasSubstr("No such file or directory"));
  EXPECT_THAT(store.status().message(), HasSubstr("gave up after"));
  EXPECT_GE(took, std::chrono::milliseconds(200));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(PostgresStoreTest, ReopenKeepsEverythingAndMigratesOnce) {
  StoredState before;
  {
    std::unique_ptr<Store> store = Open();
    ASSERT_EQ(*store->ReserveJobIds(2), 1);
    WriteBatch batch = JobWithEvent(1);
    batch.PutTenant(Tenant{"research", ""});
    batch.PutQueue(Queue{"vision", "research", "", 1, 2, 1.0});
    batch.PutJob(TestJob(2, "b", JobState::kSucceeded));
    ASSERT_TRUE(store->Commit(batch).ok());
    ASSERT_EQ(*store->ReserveJobIds(5), 3);  // reserved, never used
    before = *store->LoadAll();
  }
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<Store> store = Open();
    EXPECT_EQ(store->SchemaVersion(), PostgresStore::kSchemaVersion);
    Result<StoredState> after = store->LoadAll();
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    EXPECT_EQ(after->active_jobs, before.active_jobs);
    EXPECT_EQ(after->tenants, before.tenants);
    EXPECT_EQ(after->queues, before.queues);
    EXPECT_EQ(after->last_event_seq, 1);
    EXPECT_EQ(after->next_job_id, 8 + i);
    EXPECT_EQ(store->GetJob(2)->value(), TestJob(2, "b", JobState::kSucceeded));
    EXPECT_EQ(*store->ReserveJobIds(1), 8 + i);
  }
  EXPECT_THAT(raw_->Column("SELECT version FROM schema_migrations ORDER BY version"),
              ElementsAreArray(AllMigrations()));
  EXPECT_THAT(raw_->Column("SELECT table_name FROM information_schema.tables WHERE "
                           "table_schema = current_schema() ORDER BY table_name"),
              ElementsAre("api_tokens", "audit_log", "commit_markers", "dataset_manifests",
                          "datasets", "job_events", "jobs", "leader_lease", "meta", "nodes",
                          "priority_classes", "queues", "schema_migrations", "tenants", "users"));
}

TEST_F(PostgresStoreTest, StoresOpeningTogetherMigrateOnce) {
  std::vector<std::thread> threads;
  std::vector<Status> opened(4);
  for (Status& s : opened) {
    threads.emplace_back([&] { s = PostgresStore::Open(Conninfo(), FastRetries()).status(); });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : opened) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_THAT(raw_->Column("SELECT version FROM schema_migrations ORDER BY version"),
              ElementsAreArray(AllMigrations()));
  EXPECT_EQ(raw_->One("SELECT value FROM meta WHERE key = 'next_job_id'"), "1");
}

TEST_F(PostgresStoreTest, RefusesANewerSchema) {
  Open();
  ASSERT_EQ(raw_->Exec("INSERT INTO schema_migrations (version) VALUES (" +
                       std::to_string(PostgresStore::kSchemaVersion + 1) + ")"),
            "");
  Result<std::unique_ptr<Store>> store = PostgresStore::Open(Conninfo(), FastRetries());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("newer than version"));
}

TEST_F(PostgresStoreTest, EventAndAuditLogsAreAppendOnly) {
  std::unique_ptr<Store> store = Open();
  ASSERT_EQ(*store->ReserveJobIds(1), 1);
  WriteBatch batch = JobWithEvent(1);
  AuditEntry audit;
  audit.actor = "user:alice";
  audit.action = "POST /api/v1/jobs";
  batch.AppendAudit(audit);
  ASSERT_TRUE(store->Commit(batch).ok());
  for (const std::string table : {"job_events", "audit_log"}) {
    EXPECT_THAT(raw_->Exec("UPDATE " + table + " SET time_ms = 0"), HasSubstr("append-only"));
    EXPECT_THAT(raw_->Exec("DELETE FROM " + table), HasSubstr("append-only"));
    EXPECT_THAT(raw_->Exec("TRUNCATE " + table + " CASCADE"), HasSubstr("append-only"));
    EXPECT_EQ(raw_->One("SELECT count(*) FROM " + table), "1");
  }
}

TEST_F(PostgresStoreTest, EventAndAuditTextIsKeptByteForByte) {
  // Neither is checked for UTF-8; PostgreSQL's text would refuse these bytes.
  std::unique_ptr<Store> store = Open();
  ASSERT_EQ(*store->ReserveJobIds(1), 1);
  const char kOdd[] = "bad \xff\xfe utf-8 and a \0 NUL";
  const std::string odd(kOdd, sizeof kOdd - 1);
  WriteBatch batch = JobWithEvent(1);
  batch.AppendEvent(1, At(2), odd, "Odd", odd);
  AuditEntry audit;
  audit.actor = odd;
  audit.object = odd;
  audit.message = odd;
  batch.AppendAudit(audit);
  Status s = store->Commit(batch);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Result<EventPage> events = store->ListEvents(1, 0, 10);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->events.size(), 2u);
  EXPECT_EQ(events->events[1].actor, odd);
  EXPECT_EQ(events->events[1].message, odd);
  Result<AuditPage> page = store->ListAudit(AuditFilter{.actor = odd, .object = odd}, 0, 10);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].message, odd);
  // A filter no stored key can match matches nothing, without an error.
  Result<JobPage> jobs = store->ListJobs(JobFilter{.tenant = odd}, 0, 10, JobOrder::kAscending);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_TRUE(jobs->jobs.empty());
  WriteBatch del;
  del.DeleteNode(odd);
  EXPECT_EQ(store->Commit(del).code(), StatusCode::kNotFound);
}

TEST_F(PostgresStoreTest, TwoStoresOnOneDatabaseShareDataAndNeverShareAnId) {
  std::unique_ptr<Store> a = Open();
  std::unique_ptr<Store> b = Open();
  constexpr int kRounds = 60;
  std::vector<JobId> ids[2];
  std::atomic<bool> failed{false};
  auto work = [&](Store* store, std::vector<JobId>* mine) {
    for (int i = 0; i < kRounds && !failed; ++i) {
      Result<JobId> first = store->ReserveJobIds(1 + i % 3);
      if (!first.ok()) {
        ADD_FAILURE() << first.status().ToString();
        failed = true;
        return;
      }
      mine->push_back(*first);
      Status s = store->Commit(JobWithEvent(*first));
      if (!s.ok()) {
        ADD_FAILURE() << s.ToString();
        failed = true;
        return;
      }
    }
  };
  std::thread ta(work, a.get(), &ids[0]);
  std::thread tb(work, b.get(), &ids[1]);
  ta.join();
  tb.join();
  ASSERT_FALSE(failed);

  std::set<JobId> all;
  for (const std::vector<JobId>& mine : ids) {
    for (size_t i = 1; i < mine.size(); ++i) EXPECT_LT(mine[i - 1], mine[i]);
    all.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(all.size(), 2u * kRounds) << "an id was handed out twice";
  // Each store sees the other's jobs, and every event got its own seq.
  for (Store* store : {a.get(), b.get()}) {
    Result<StoredState> state = store->LoadAll();
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    EXPECT_EQ(state->active_jobs.size(), 2u * kRounds);
    EXPECT_EQ(state->last_event_seq, 2 * kRounds);
    EXPECT_GT(state->next_job_id, *all.rbegin());
  }
  EXPECT_EQ(raw_->One("SELECT count(DISTINCT seq) FROM job_events"), std::to_string(2 * kRounds));
}

TEST_F(PostgresStoreTest, ReconnectsWhenTheBackendIsTerminatedBetweenCalls) {
  std::unique_ptr<Store> store = Open(FastRetries(), "victim");
  ASSERT_EQ(*store->ReserveJobIds(3), 1);
  ASSERT_TRUE(store->Commit(JobWithEvent(1)).ok());

  Terminate(BackendOf("victim"));
  Result<std::optional<Job>> job = store->GetJob(1);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_TRUE(job->has_value());

  Terminate(BackendOf("victim"));
  Status s = store->Commit(JobWithEvent(2));
  ASSERT_TRUE(s.ok()) << s.ToString();

  Terminate(BackendOf("victim"));
  Result<JobId> next = store->ReserveJobIds(1);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, 4);

  for (JobId id : {1, 2}) {
    EXPECT_EQ(Count("jobs", id), "1");
    EXPECT_EQ(Count("job_events", id), "1");
  }
}

TEST_F(PostgresStoreTest, CommitWhoseBackendIsTerminatedMidTransactionIsRetried) {
  std::unique_ptr<Store> store = Open(FastRetries(), "victim");
  ASSERT_EQ(*store->ReserveJobIds(1), 1);

  // Hold the writer lock, so that the Commit stops inside its transaction.
  PgConnection holder(schema_->conninfo());
  ASSERT_EQ(holder.Exec("BEGIN"), "");
  ASSERT_EQ(holder.Exec("SELECT value FROM meta WHERE key = 'next_job_id' FOR UPDATE"), "");
  Status committed;
  std::thread writer([&] { committed = store->Commit(JobWithEvent(1)); });
  bool waiting = false;
  for (int i = 0; i < 5000 && !waiting; ++i) {
    waiting = raw_->One(
                  "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                  "'victim' AND wait_event_type = 'Lock'") == "1";
    if (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(waiting) << "the Commit never waited for the lock";
  Terminate(BackendOf("victim"));
  ASSERT_EQ(holder.Exec("COMMIT"), "");
  writer.join();

  ASSERT_TRUE(committed.ok()) << committed.ToString();
  EXPECT_EQ(Count("jobs", 1), "1");
  EXPECT_EQ(Count("job_events", 1), "1");
}

// The connection breaks at `stage` of the first try of a Commit.
struct LossCase {
  const char* name;
  CommitStage stage;
  bool terminate_backend;  // kill the backend for real rather than drop the connection
  bool redone;             // whether the batch must be applied again
};

class CommitLossTest : public PostgresStoreTest, public ::testing::WithParamInterface<LossCase> {};

TEST_P(CommitLossTest, CommitIsAppliedExactlyOnce) {
  const LossCase& c = GetParam();
  int reached = 0;  // how often a try reached c.stage
  PostgresOptions opts = FastRetries();
  opts.inject_connection_loss = [&](CommitStage stage, int backend_pid) {
    if (stage != c.stage || reached++ > 0) return false;
    if (!c.terminate_backend) return true;
    Terminate(backend_pid);  // COMMIT then goes to a dead connection
    return false;
  };
  std::unique_ptr<Store> store = Open(opts);
  ASSERT_EQ(*store->ReserveJobIds(2), 1);

  WriteBatch batch = JobWithEvent(1);
  AuditEntry audit;
  audit.actor = "user:alice";
  audit.object = "job/1";
  batch.AppendAudit(audit);
  Status s = store->Commit(batch);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(reached, c.redone ? 2 : 1);

  EXPECT_EQ(Count("jobs", 1), "1");
  EXPECT_EQ(Count("job_events", 1), "1");
  EXPECT_EQ(raw_->One("SELECT count(*) FROM audit_log"), "1");
  Result<StoredState> state = store->LoadAll();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->last_event_seq, 1);

  // The store carries on.
  ASSERT_TRUE(store->Commit(JobWithEvent(2)).ok());
  EXPECT_EQ(Count("job_events", 2), "1");
}

INSTANTIATE_TEST_SUITE_P(
    Stages, CommitLossTest,
    ::testing::Values(
        // COMMIT never reached the server: the marker is not there; the batch is redone.
        LossCase{"DroppedBeforeCommit", CommitStage::kBeforeCommit, false, true},
        LossCase{"BackendKilledBeforeCommit", CommitStage::kBeforeCommit, true, true},
        // COMMIT was applied but its answer lost: the marker is there; not redone.
        LossCase{"DroppedAfterCommit", CommitStage::kAfterCommit, false, false}),
    [](const ::testing::TestParamInfo<LossCase>& info) { return std::string(info.param.name); });

// --- leadership (docs/ha.md) ---

PostgresStore& Pg(const std::unique_ptr<Store>& store) {
  return *static_cast<PostgresStore*>(store.get());
}

TEST_F(PostgresStoreTest, OneServerLeadsUntilItsLeaseLapsesThenTheTokenGrows) {
  std::unique_ptr<Store> a = Open();
  std::unique_ptr<Store> b = Open();
  const Duration minute{60'000};
  auto first = Pg(a).ClaimLeadership("server-a", "http://a:1", minute);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->holder, "server-a");
  EXPECT_EQ(first->url, "http://a:1");
  EXPECT_EQ(first->token, 1);
  EXPECT_GT(first->left, Duration(50'000));
  // b finds a leading and changes nothing; a's renewals keep the token.
  auto seen = Pg(b).ClaimLeadership("server-b", "http://b:1", minute);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->holder, "server-a");
  EXPECT_EQ(seen->token, 1);
  auto renewed = Pg(a).ClaimLeadership("server-a", "http://a:1", minute);
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(renewed->token, 1);
  // a renews for 1 ms only and lets it lapse: b takes it, with a new token.
  ASSERT_TRUE(Pg(a).ClaimLeadership("server-a", "http://a:1", Duration(1)).ok());
  std::optional<PostgresStore::Lease> taken;
  for (int i = 0; i < 500; ++i) {
    auto claim = Pg(b).ClaimLeadership("server-b", "http://b:1", minute);
    ASSERT_TRUE(claim.ok()) << claim.status().ToString();
    taken = *claim;
    if (taken->holder == "server-b") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(taken->holder, "server-b");
  EXPECT_EQ(taken->token, 2);
  auto deposed = Pg(a).ClaimLeadership("server-a", "http://a:1", minute);
  ASSERT_TRUE(deposed.ok());
  EXPECT_EQ(deposed->holder, "server-b");
  EXPECT_EQ(deposed->url, "http://b:1");
  // A clean hand-over: b releases, a takes it at once.
  ASSERT_TRUE(Pg(b).ReleaseLeadership("server-b").ok());
  auto back = Pg(a).ClaimLeadership("server-a", "http://a:1", minute);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->holder, "server-a");
  EXPECT_EQ(back->token, 3);
}

TEST_F(PostgresStoreTest, ADeposedLeaderIsFencedOffFromCommitting) {
  std::unique_ptr<Store> a = Open();
  std::unique_ptr<Store> b = Open();
  const Duration minute{60'000};
  auto lease = Pg(a).ClaimLeadership("server-a", "http://a:1", minute);
  ASSERT_TRUE(lease.ok());
  Pg(a).SetFencingToken(lease->token);
  Result<JobId> id = a->ReserveJobIds(3);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(a->Commit(JobWithEvent(*id)).ok());
  // a's lease lapses (a paused, say) and b takes over.
  ASSERT_TRUE(Pg(a).ClaimLeadership("server-a", "http://a:1", Duration(1)).ok());
  std::optional<PostgresStore::Lease> b_lease;
  for (int i = 0; i < 500; ++i) {
    auto claim = Pg(b).ClaimLeadership("server-b", "http://b:1", minute);
    ASSERT_TRUE(claim.ok()) << claim.status().ToString();
    b_lease = *claim;
    if (b_lease->holder == "server-b") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(b_lease->holder, "server-b");
  Pg(b).SetFencingToken(b_lease->token);
  Status fenced = a->Commit(JobWithEvent(*id + 1));
  EXPECT_EQ(fenced.code(), StatusCode::kFailedPrecondition) << fenced.ToString();
  EXPECT_THAT(fenced.message(), HasSubstr("fenced"));
  EXPECT_EQ(Count("jobs", *id + 1), "0");
  EXPECT_EQ(Count("job_events", *id + 1), "0");
  ASSERT_TRUE(b->Commit(JobWithEvent(*id + 2)).ok());
  EXPECT_EQ(Count("jobs", *id + 2), "1");
  // Without a fence (a store no server leads through) commits are not checked.
  std::unique_ptr<Store> c = Open();
  EXPECT_TRUE(c->Commit(JobWithEvent(*id + 1)).ok());
}

}  // namespace
}  // namespace trainyard::store
