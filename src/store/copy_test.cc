// CopyStore between every pair of kinds that matter: SQLite to PostgreSQL (the move to
// high availability; skipped without PostgreSQL, failed then under $CI), SQLite to
// SQLite and memory to SQLite.

#include "store/copy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "store/memory_store.h"
#include "store/postgres_store.h"
#include "store/postgres_testing.h"
#include "store/sqlite_store.h"
#include "store/testing.h"

namespace trainyard::store {
namespace {

using test::At;
using test::TestJob;
using test::TestToken;
using test::TestUser;
using ::testing::HasSubstr;

std::unique_ptr<Store> Must(Result<std::unique_ptr<Store>> store) {
  TY_CHECK_MSG(store.ok(), store.status().ToString());
  return std::move(store).value();
}

void MustCommit(Store& s, const WriteBatch& b) {
  Status st = s.Commit(b);
  TY_CHECK_MSG(st.ok(), st.ToString());
}

// A store with a bit of everything, in the orders that trip a naive copy: a child
// queue whose name sorts before its parent's, events of several jobs interleaved, job
// ids with gaps and ids reserved past the last job.
void Populate(Store& s) {
  WriteBatch b;
  b.PutTenant(Tenant{"research", "the research org"});
  b.PutTenant(Tenant{"prod", ""});
  b.PutQueue(Queue{"zeta", "research", "", 8, 16, 1.0});
  b.PutQueue(Queue{"alpha", "research", "zeta", 4, 8, 2.0});  // child sorts first
  b.PutQueue(Queue{"serving", "prod", "", 16, 32, 1.0});
  b.PutPriorityClass(PriorityClass{"urgent", 100, false});
  b.PutUser(TestUser("ann"));
  b.PutUser(TestUser("ops", "", Role::kClusterAdmin));
  b.PutToken(TestToken('a', "ann"));
  b.PutToken(TestToken('b', "ops"));
  Node n;
  n.name = "gpu-7";
  n.labels = {{"zone", "b"}};
  n.gpus = {Gpu{0, "GPU-0", "H100", 80 * kGiB, "d0"}};
  n.milli_cpus = 64'000;
  n.memory_bytes = 512 * kGiB;
  n.state = NodeState::kCordoned;
  n.state_reason = "maintenance";
  b.PutNode(n);
  MustCommit(s, b);

  Result<JobId> first = s.ReserveJobIds(40);
  TY_CHECK(first.ok());
  std::vector<Job> jobs;
  for (int i = 0; i < 12; ++i) {
    const JobId id = *first + 3 * i;  // gaps
    const JobState state = i % 3 == 0   ? JobState::kSucceeded
                           : i % 3 == 1 ? JobState::kRunning
                                        : JobState::kPending;
    Job j = TestJob(id, "job-" + std::to_string(i), state, i % 2 ? "research" : "prod",
                    i % 2 ? "alpha" : "serving");
    if (state != JobState::kPending) {
      Attempt a;
      a.start_time = At(5'000 + i);
      a.nodes = {"gpu-7"};
      a.gpus = {{0}};
      if (state == JobState::kSucceeded) a.end_time = At(9'000 + i);
      j.attempts.push_back(a);
    }
    jobs.push_back(j);
  }
  WriteBatch put;
  for (const Job& j : jobs) put.PutJob(j);
  MustCommit(s, put);
  // Events interleaved across jobs, several commits.
  for (int round = 0; round < 3; ++round) {
    WriteBatch ev;
    for (const Job& j : jobs) {
      ev.AppendEvent(j.id, At(10'000 + round * 100 + j.id), round == 0 ? "user:ann" : "scheduler",
                     round == 0 ? "Submitted" : "Note", "round " + std::to_string(round));
    }
    MustCommit(s, ev);
  }
  WriteBatch audit;
  for (int i = 0; i < 7; ++i) {
    AuditEntry e;
    e.time = At(20'000 + i);
    e.actor = i % 2 ? "user:ann" : "user:ops";
    e.token_id = std::string(kTokenIdHexDigits, i % 2 ? 'a' : 'b');
    e.tenant = i % 2 ? "research" : "";
    e.action = "POST /api/v1/jobs";
    e.object = "job/" + std::to_string(i);
    e.source = "10.0.0.7:5341" + std::to_string(i);
    e.status = i == 3 ? 400 : 201;
    e.message = i == 3 ? "bad spec" : "";
    audit.AppendAudit(e);
  }
  MustCommit(s, audit);
}

std::vector<JobEvent> Events(Store& s, JobId id) {
  Result<EventPage> page = s.ListEvents(id, 0, kMaxListLimit);
  TY_CHECK(page.ok());
  for (JobEvent& e : page->events) e.seq = 0;
  return page->events;
}

std::vector<Job> AllJobs(Store& s) {
  Result<JobPage> page = s.ListJobs({}, 0, kMaxListLimit, JobOrder::kAscending);
  TY_CHECK(page.ok());
  return page->jobs;
}

std::vector<AuditEntry> Audit(Store& s) {
  Result<AuditPage> page = s.ListAudit({}, 0, kMaxListLimit);
  TY_CHECK(page.ok());
  for (AuditEntry& e : page->entries) e.seq = 0;
  return page->entries;
}

// Everything `from` holds is in `to`, read back through the Store interface.
void ExpectSameContents(Store& from, Store& to) {
  Result<StoredState> a = from.LoadAll();
  Result<StoredState> b = to.LoadAll();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->active_jobs, b->active_jobs);
  EXPECT_EQ(a->nodes, b->nodes);
  EXPECT_EQ(a->tenants, b->tenants);
  EXPECT_EQ(a->queues, b->queues);
  EXPECT_EQ(a->priority_classes, b->priority_classes);
  EXPECT_EQ(a->users, b->users);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->next_job_id, b->next_job_id);
  std::vector<Job> ja = AllJobs(from), jb = AllJobs(to);
  EXPECT_EQ(ja, jb);
  for (const Job& j : ja) EXPECT_EQ(Events(from, j.id), Events(to, j.id)) << "job " << j.id;
  EXPECT_EQ(Audit(from), Audit(to));
}

void CopyAndCheck(Store& from, Store& to) {
  Populate(from);
  std::vector<CopyStats> seen;
  Result<CopyStats> stats =
      CopyStore(from, to, /*batch_jobs=*/5, [&](const CopyStats& s) { seen.push_back(s); });
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->jobs, 12);
  EXPECT_EQ(stats->events, 36);
  EXPECT_EQ(stats->audit_entries, 7);
  EXPECT_EQ(stats->nodes, 1);
  EXPECT_EQ(stats->tenants, 2);
  EXPECT_EQ(stats->queues, 3);
  EXPECT_EQ(stats->priority_classes, 1);
  EXPECT_EQ(stats->users, 2);
  EXPECT_EQ(stats->tokens, 2);
  ASSERT_FALSE(seen.empty());
  EXPECT_GE(seen.size(), 4u) << "progress after the tenancy and each batch of 5 jobs";
  ExpectSameContents(from, to);
  // New jobs continue above every copied and reserved id.
  Result<JobId> next = to.ReserveJobIds(1);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, stats->next_job_id);
  EXPECT_GT(*next, AllJobs(from).back().id);
  // Copying again into the now full store is refused, naming what it holds, and
  // changes nothing.
  Result<CopyStats> again = CopyStore(from, to);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("is not empty (jobs, 1 node(s), 2 tenant(s)"));
  EXPECT_THAT(again.status().message(), HasSubstr("copy only into an empty store"));
  EXPECT_EQ(AllJobs(to).size(), 12u);
  EXPECT_EQ(Audit(to).size(), 7u);
}

TEST(CopyStoreTest, SqliteToPostgres) {
  Result<std::unique_ptr<test::PostgresSchema>> schema = test::PostgresSchema::Create();
  if (!schema.ok()) TRAINYARD_SKIP_OR_FAIL_WITHOUT_POSTGRES(schema.status());
  test::TempDir dir;
  std::unique_ptr<Store> from = Must(SqliteStore::Open(dir.File("state.db")));
  std::unique_ptr<Store> to = Must(PostgresStore::Open((*schema)->conninfo()));
  CopyAndCheck(*from, *to);
}

TEST(CopyStoreTest, SqliteToSqlite) {
  test::TempDir dir;
  std::unique_ptr<Store> from = Must(SqliteStore::Open(dir.File("a.db")));
  std::unique_ptr<Store> to = Must(SqliteStore::Open(dir.File("b.db")));
  CopyAndCheck(*from, *to);
}

TEST(CopyStoreTest, MemoryToSqlite) {
  test::TempDir dir;
  MemoryStore from;
  std::unique_ptr<Store> to = Must(SqliteStore::Open(dir.File("b.db")));
  CopyAndCheck(from, *to);
}

TEST(CopyStoreTest, EmptySourceCopiesNothingAndADestinationWithOnlyReservedIdsIsRefused) {
  test::TempDir dir;
  MemoryStore from;
  std::unique_ptr<Store> to = Must(SqliteStore::Open(dir.File("b.db")));
  Result<CopyStats> stats = CopyStore(from, *to);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->jobs, 0);
  EXPECT_EQ(stats->next_job_id, 1);
  ASSERT_TRUE(to->ReserveJobIds(5).ok());
  Result<CopyStats> again = CopyStore(from, *to);
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.status().message(), HasSubstr("reserved job ids up to 5"));
}

}  // namespace
}  // namespace trainyard::store
