// One suite of Store behaviour, run against every implementation. The PostgreSQL
// instantiation runs on a throwaway server (postgres_testing.h), one fresh schema
// per test; it skips when PostgreSQL is not installed, and fails then when $CI is set.

#include "store/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/names.h"
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
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

struct StoreKind {
  std::string name;
  // Opens a fresh, empty store at `where`: a temporary directory the test owns, or
  // with `postgres`, the conninfo of a fresh schema (postgres_testing.h).
  std::function<std::unique_ptr<Store>(const std::string& where)> open;
  bool postgres = false;
};

void PrintTo(const StoreKind& kind, std::ostream* os) { *os << kind.name; }

std::unique_ptr<Store> OpenSqlite(const std::string& dir) {
  Result<std::unique_ptr<Store>> store = SqliteStore::Open(dir + "/state.db");
  TY_CHECK_MSG(store.ok(), store.status().ToString());
  return std::move(store).value();
}

std::unique_ptr<Store> OpenPostgres(const std::string& conninfo) {
  Result<std::unique_ptr<Store>> store = PostgresStore::Open(conninfo);
  TY_CHECK_MSG(store.ok(), store.status().ToString());
  return std::move(store).value();
}

class StoreTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    if (!GetParam().postgres) {
      store_ = GetParam().open(dir_.path());
      return;
    }
    Result<std::unique_ptr<test::PostgresSchema>> schema = test::PostgresSchema::Create();
    if (!schema.ok()) TRAINYARD_SKIP_OR_FAIL_WITHOUT_POSTGRES(schema.status());
    schema_ = std::move(schema).value();
    store_ = GetParam().open(schema_->conninfo());
  }

  // Reserves ids and commits one Pending job per name, in order; returns their ids.
  std::vector<JobId> AddJobs(const std::vector<std::string>& names,
                             JobState state = JobState::kPending) {
    Result<JobId> first = store_->ReserveJobIds(static_cast<int64_t>(names.size()));
    TY_CHECK(first.ok());
    WriteBatch batch;
    std::vector<JobId> ids;
    for (size_t i = 0; i < names.size(); ++i) {
      ids.push_back(*first + static_cast<JobId>(i));
      batch.PutJob(TestJob(ids.back(), names[i], state));
    }
    Status s = store_->Commit(batch);
    TY_CHECK_MSG(s.ok(), s.ToString());
    return ids;
  }

  void AddTenancy() {
    WriteBatch batch;
    batch.PutTenant(Tenant{"research", "the research org"});
    batch.PutQueue(Queue{"vision", "research", "", 8, 16, 1.0});
    MustCommit(batch);
  }

  void MustCommit(const WriteBatch& batch) {
    Status s = store_->Commit(batch);
    TY_CHECK_MSG(s.ok(), s.ToString());
  }

  // Commits a batch filled by `fill`; returns what Commit returned.
  template <typename Fill>
  Status CommitWith(Fill fill) {
    WriteBatch batch;
    fill(batch);
    return store_->Commit(batch);
  }

  std::vector<AuditEntry> AllAudit(const AuditFilter& filter = {}) {
    Result<AuditPage> page = store_->ListAudit(filter, 0, kMaxListLimit);
    TY_CHECK_MSG(page.ok(), page.status().ToString());
    return page->entries;
  }

  // Everything a reader can see, for before/after comparisons.
  struct Everything {
    StoredState state;
    std::vector<Job> all_jobs;
    std::vector<JobEvent> events;  // of jobs 1..all_jobs.back().id
  };
  Everything ReadEverything() {
    Everything e;
    Result<StoredState> state = store_->LoadAll();
    TY_CHECK(state.ok());
    e.state = *state;
    Result<JobPage> jobs = store_->ListJobs({}, 0, kMaxListLimit, JobOrder::kAscending);
    TY_CHECK(jobs.ok());
    e.all_jobs = jobs->jobs;
    for (const Job& job : e.all_jobs) {
      Result<EventPage> events = store_->ListEvents(job.id, 0, kMaxListLimit);
      TY_CHECK(events.ok());
      e.events.insert(e.events.end(), events->events.begin(), events->events.end());
    }
    return e;
  }

  test::TempDir dir_;
  std::unique_ptr<test::PostgresSchema> schema_;  // outlives store_
  std::unique_ptr<Store> store_;
};

Node NamedNode(const std::string& name) {
  Node node;
  node.name = name;
  return node;
}

std::vector<JobId> Ids(const JobPage& page) {
  std::vector<JobId> ids;
  for (const Job& job : page.jobs) ids.push_back(job.id);
  return ids;
}

std::vector<int64_t> Seqs(const std::vector<AuditEntry>& entries) {
  std::vector<int64_t> seqs;
  for (const AuditEntry& e : entries) seqs.push_back(e.seq);
  return seqs;
}

std::vector<std::string> UserNames(const std::vector<User>& users) {
  std::vector<std::string> names;
  for (const User& u : users) names.push_back(u.name);
  return names;
}

std::vector<std::string> TokenIds(const std::vector<ApiToken>& tokens) {
  std::vector<std::string> ids;
  for (const ApiToken& t : tokens) ids.push_back(t.id);
  return ids;
}

AuditEntry Audit(const std::string& actor, const std::string& tenant, const std::string& object,
                 int32_t status = 200) {
  AuditEntry e;
  e.time = At(10'000);
  e.actor = actor;
  e.tenant = tenant;
  e.action = "POST /api/v1/" + object;
  e.object = object;
  e.source = "10.0.0.7:53412";
  e.status = status;
  return e;
}

TEST_P(StoreTest, StartsEmpty) {
  Result<StoredState> state = store_->LoadAll();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_TRUE(state->active_jobs.empty());
  EXPECT_TRUE(state->nodes.empty());
  EXPECT_TRUE(state->tenants.empty());
  EXPECT_TRUE(state->queues.empty());
  EXPECT_TRUE(state->priority_classes.empty());
  EXPECT_TRUE(state->users.empty());
  EXPECT_TRUE(state->tokens.empty());
  EXPECT_EQ(state->next_job_id, 1);
  EXPECT_EQ(state->last_event_seq, 0);
  EXPECT_TRUE(store_->ListUsers()->empty());
  EXPECT_TRUE(store_->ListTokens()->empty());
  Result<AuditPage> audit = store_->ListAudit({}, 0, 10);
  ASSERT_TRUE(audit.ok()) << audit.status().ToString();
  EXPECT_TRUE(audit->entries.empty());
  EXPECT_FALSE(audit->next_after_seq.has_value());
  Result<std::optional<Job>> job = store_->GetJob(1);
  ASSERT_TRUE(job.ok());
  EXPECT_FALSE(job->has_value());
  EXPECT_TRUE(store_->Commit(WriteBatch()).ok());
}

TEST_P(StoreTest, CommitsAndReadsBackEveryKind) {
  Job job = TestJob(1, "llama");
  ASSERT_TRUE(job.StartAttempt(At(2'000), {"n1", "n2"}).ok());
  ASSERT_TRUE(job.TransitionTo(JobState::kRunning, At(2'100), "all ranks up").ok());
  job.checkpoint = CheckpointInfo{"/ckpt/1", 10, At(2'500), Duration(300)};
  Node node;
  node.name = "n1";
  node.gpus = {Gpu{0, "GPU-0", "H100", 80 * kGiB, "d0"}};
  node.milli_cpus = 64'000;
  node.memory_bytes = kTiB;
  node.topology = {"s1", "l1"};
  Tenant tenant{"research", "ml research", 12, 8};
  Queue parent{"all", "research", "", 8, 32, 1.0};
  Queue child{"vision", "research", "all", 4, 16, 2.0};
  PriorityClass pc{"production", 500, true};

  ASSERT_EQ(*store_->ReserveJobIds(1), 1);
  WriteBatch batch;
  batch.PutJob(job);
  batch.PutNode(node);
  batch.PutTenant(tenant);
  batch.PutQueue(parent);
  batch.PutQueue(child);
  batch.PutPriorityClass(pc);
  batch.AppendEvent(1, At(1'000), "user:alice", "Submitted", "submitted from the CLI");
  Status committed = store_->Commit(batch);
  ASSERT_TRUE(committed.ok()) << committed.ToString();

  Result<std::optional<Job>> got = store_->GetJob(1);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, job);
  EXPECT_THAT(*store_->ListNodes(), ElementsAre(node));
  EXPECT_THAT(*store_->ListTenants(), ElementsAre(tenant));
  EXPECT_THAT(*store_->ListQueues(), ElementsAre(parent, child));
  EXPECT_THAT(*store_->ListPriorityClasses(), ElementsAre(pc));
  Result<EventPage> events = store_->ListEvents(1, 0, 10);
  ASSERT_TRUE(events.ok());
  EXPECT_THAT(events->events, ElementsAre(JobEvent{1, 1, At(1'000), "user:alice", "Submitted",
                                                   "submitted from the CLI"}));

  Result<StoredState> state = store_->LoadAll();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_THAT(state->active_jobs, ElementsAre(job));
  EXPECT_THAT(state->nodes, ElementsAre(node));
  EXPECT_THAT(state->queues, ElementsAre(parent, child));
  EXPECT_EQ(state->next_job_id, 2);
  EXPECT_EQ(state->last_event_seq, 1);
}

TEST_P(StoreTest, PutReplacesByKey) {
  AddTenancy();
  std::vector<JobId> ids = AddJobs({"a"});
  Job job = TestJob(ids[0], "a");
  ASSERT_TRUE(job.TransitionTo(JobState::kAdmitted, At(5'000), "bound").ok());
  WriteBatch batch;
  batch.PutJob(job);
  batch.PutQueue(Queue{"vision", "research", "", 2, 4, 3.0});
  batch.PutTenant(Tenant{"research", "renamed"});
  ASSERT_TRUE(store_->Commit(batch).ok());

  EXPECT_EQ(store_->GetJob(ids[0])->value(), job);
  EXPECT_THAT(*store_->ListQueues(), ElementsAre(Queue{"vision", "research", "", 2, 4, 3.0}));
  EXPECT_THAT(*store_->ListTenants(), ElementsAre(Tenant{"research", "renamed"}));
  // The indexed columns follow the document.
  EXPECT_TRUE(store_->ListJobs({.states = {JobState::kPending}}, 0, 10, JobOrder::kAscending)
                  ->jobs.empty());
  EXPECT_EQ(
      store_->ListJobs({.states = {JobState::kAdmitted}}, 0, 10, JobOrder::kAscending)->jobs.size(),
      1u);
}

TEST_P(StoreTest, ReservesIncreasingIds) {
  EXPECT_EQ(*store_->ReserveJobIds(1), 1);
  EXPECT_EQ(*store_->ReserveJobIds(10), 2);
  EXPECT_EQ(*store_->ReserveJobIds(1), 12);
  EXPECT_EQ(store_->LoadAll()->next_job_id, 13);
}

TEST_P(StoreTest, RejectsBadArguments) {
  EXPECT_EQ(store_->ReserveJobIds(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ReserveJobIds(kMaxJobIdReservation + 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_THAT(store_->ListJobs({}, 0, 0, JobOrder::kAscending).status().message(),
              HasSubstr("ListJobs: limit must be between 1 and 10000, got 0"));
  EXPECT_EQ(store_->ListJobs({}, 0, kMaxListLimit + 1, JobOrder::kAscending).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ListEvents(1, 0, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(store_->ListAudit({}, 0, 0).status().message(),
              HasSubstr("ListAudit: limit must be between 1 and 10000, got 0"));
  EXPECT_EQ(store_->ListAudit({}, 0, kMaxListLimit + 1).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, RejectsJobIdsThatWereNotReserved) {
  AddJobs({"a", "b"});
  WriteBatch batch;
  batch.PutJob(TestJob(3, "c"));
  Status s = store_->Commit(batch);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "commit: op 1 of 1 (PutJob 3): job id 3 was never reserved (the next id is 3); take "
            "ids from ReserveJobIds");
}

TEST_P(StoreTest, PagesJobsInIdOrder) {
  std::vector<std::string> names;
  for (int i = 0; i < 25; ++i) names.push_back("job-" + std::to_string(i));
  std::vector<JobId> ids = AddJobs(names);

  std::vector<JobId> seen;
  JobId after = 0;
  int pages = 0;
  while (true) {
    Result<JobPage> page = store_->ListJobs({}, after, 10, JobOrder::kAscending);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ++pages;
    for (JobId id : Ids(*page)) seen.push_back(id);
    if (!page->next_after_id) break;
    EXPECT_EQ(*page->next_after_id, page->jobs.back().id);
    after = *page->next_after_id;
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, ids);

  // A page that ends exactly at the last job says there is no more.
  Result<JobPage> exact = store_->ListJobs({}, ids[14], 10, JobOrder::kAscending);
  EXPECT_EQ(exact->jobs.size(), 10u);
  EXPECT_FALSE(exact->next_after_id.has_value());
}

TEST_P(StoreTest, PagesJobsNewestFirst) {
  std::vector<std::string> names;
  for (int i = 0; i < 25; ++i) names.push_back("job-" + std::to_string(i));
  std::vector<JobId> ids = AddJobs(names);

  std::vector<JobId> seen;
  JobId after = 0;
  int pages = 0;
  while (true) {
    Result<JobPage> page = store_->ListJobs({}, after, 10, JobOrder::kDescending);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ++pages;
    for (JobId id : Ids(*page)) seen.push_back(id);
    if (!page->next_after_id) break;
    EXPECT_EQ(*page->next_after_id, page->jobs.back().id);
    after = *page->next_after_id;
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, std::vector<JobId>(ids.rbegin(), ids.rend()));

  // `after` is an upper bound: the ids below it, highest first.
  Result<JobPage> below = store_->ListJobs({}, ids[10], 3, JobOrder::kDescending);
  EXPECT_EQ(Ids(*below), (std::vector<JobId>{ids[9], ids[8], ids[7]}));
  EXPECT_EQ(below->next_after_id, ids[7]);
  // A page that ends exactly at the first job says there is no more.
  Result<JobPage> exact = store_->ListJobs({}, ids[10], 10, JobOrder::kDescending);
  EXPECT_EQ(exact->jobs.size(), 10u);
  EXPECT_FALSE(exact->next_after_id.has_value());
  EXPECT_TRUE(store_->ListJobs({}, ids[0], 10, JobOrder::kDescending)->jobs.empty());
}

TEST_P(StoreTest, FiltersJobs) {
  ASSERT_EQ(*store_->ReserveJobIds(6), 1);
  WriteBatch batch;
  batch.PutJob(TestJob(1, "llama-7b", JobState::kPending, "research", "vision"));
  batch.PutJob(TestJob(2, "llama-70b", JobState::kRunning, "research", "nlp"));
  batch.PutJob(TestJob(3, "bert", JobState::kRunning, "prod", "vision"));
  batch.PutJob(TestJob(4, "llama-13b", JobState::kSucceeded, "prod", "nlp"));
  batch.PutJob(TestJob(5, "llam", JobState::kPending, "research", "vision"));
  batch.PutJob(TestJob(6, "llamb", JobState::kFailed, "research", "vision"));
  ASSERT_TRUE(store_->Commit(batch).ok());

  auto ids = [&](const JobFilter& f) {
    Result<JobPage> page = store_->ListJobs(f, 0, 100, JobOrder::kAscending);
    TY_CHECK_MSG(page.ok(), page.status().ToString());
    return Ids(*page);
  };
  using V = std::vector<JobId>;
  EXPECT_EQ(ids({}), (V{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ids({.states = {JobState::kRunning}}), (V{2, 3}));
  EXPECT_EQ(ids({.states = {JobState::kRunning, JobState::kPending}}), (V{1, 2, 3, 5}));
  EXPECT_EQ(ids({.states = {JobState::kRunning, JobState::kRunning}}), (V{2, 3}));
  EXPECT_EQ(ids({.tenant = "prod"}), (V{3, 4}));
  EXPECT_EQ(ids({.queue = "nlp"}), (V{2, 4}));
  EXPECT_EQ(ids({.tenant = "research", .queue = "vision"}), (V{1, 5, 6}));
  EXPECT_EQ(ids({.name_prefix = "llama"}), (V{1, 2, 4}));
  EXPECT_EQ(ids({.name_prefix = "llam"}), (V{1, 2, 4, 5, 6}));
  EXPECT_EQ(ids({.name_prefix = "llama-7b"}), (V{1}));
  EXPECT_EQ(ids({.name_prefix = "z"}), V{});
  EXPECT_EQ(ids({.states = {JobState::kPending, JobState::kSucceeded},
                 .tenant = "prod",
                 .name_prefix = "llama"}),
            (V{4}));
  // Filters and paging together.
  Result<JobPage> first = store_->ListJobs({.name_prefix = "llam"}, 0, 2, JobOrder::kAscending);
  EXPECT_EQ(Ids(*first), (V{1, 2}));
  Result<JobPage> second =
      store_->ListJobs({.name_prefix = "llam"}, *first->next_after_id, 2, JobOrder::kAscending);
  EXPECT_EQ(Ids(*second), (V{4, 5}));
  Result<JobPage> third =
      store_->ListJobs({.name_prefix = "llam"}, *second->next_after_id, 2, JobOrder::kAscending);
  EXPECT_EQ(Ids(*third), (V{6}));
  EXPECT_FALSE(third->next_after_id.has_value());
  // The same, newest first.
  auto desc = [&](const JobFilter& f, JobId after, int limit) {
    Result<JobPage> page = store_->ListJobs(f, after, limit, JobOrder::kDescending);
    TY_CHECK_MSG(page.ok(), page.status().ToString());
    return *page;
  };
  EXPECT_EQ(Ids(desc({.states = {JobState::kRunning, JobState::kPending}}, 0, 100)),
            (V{5, 3, 2, 1}));
  EXPECT_EQ(Ids(desc({.tenant = "research", .queue = "vision"}, 6, 100)), (V{5, 1}));
  JobPage d1 = desc({.name_prefix = "llam"}, 0, 2);
  EXPECT_EQ(Ids(d1), (V{6, 5}));
  JobPage d2 = desc({.name_prefix = "llam"}, *d1.next_after_id, 2);
  EXPECT_EQ(Ids(d2), (V{4, 2}));
  JobPage d3 = desc({.name_prefix = "llam"}, *d2.next_after_id, 2);
  EXPECT_EQ(Ids(d3), (V{1}));
  EXPECT_FALSE(d3.next_after_id.has_value());
}

TEST_P(StoreTest, EventsAreOrderedPagedAndKeptPerJob) {
  std::vector<JobId> ids = AddJobs({"a", "b"});
  for (int round = 0; round < 3; ++round) {
    WriteBatch batch;
    for (JobId id : ids) {
      batch.AppendEvent(id, At(round), "scheduler", "Tick", "round " + std::to_string(round));
    }
    ASSERT_TRUE(store_->Commit(batch).ok());
  }
  Result<EventPage> a = store_->ListEvents(ids[0], 0, 10);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->events.size(), 3u);
  EXPECT_FALSE(a->next_after_seq.has_value());
  std::vector<int64_t> seqs;
  for (size_t i = 0; i < a->events.size(); ++i) {
    EXPECT_EQ(a->events[i].job_id, ids[0]);
    EXPECT_EQ(a->events[i].message, "round " + std::to_string(i));
    seqs.push_back(a->events[i].seq);
  }
  EXPECT_THAT(seqs, ElementsAre(1, 3, 5));  // interleaved with job b's

  Result<EventPage> page = store_->ListEvents(ids[1], 0, 2);
  ASSERT_EQ(page->events.size(), 2u);
  ASSERT_TRUE(page->next_after_seq.has_value());
  Result<EventPage> rest = store_->ListEvents(ids[1], *page->next_after_seq, 2);
  ASSERT_EQ(rest->events.size(), 1u);
  EXPECT_EQ(rest->events[0].message, "round 2");
  EXPECT_FALSE(rest->next_after_seq.has_value());

  EXPECT_TRUE(store_->ListEvents(999, 0, 10)->events.empty());
  EXPECT_EQ(store_->LoadAll()->last_event_seq, 6);
}

TEST_P(StoreTest, EventMayFollowItsJobInTheSameBatch) {
  ASSERT_EQ(*store_->ReserveJobIds(1), 1);
  WriteBatch batch;
  batch.PutJob(TestJob(1, "a"));
  batch.AppendEvent(1, At(1), "user:alice", "Submitted", "");
  EXPECT_TRUE(store_->Commit(batch).ok());

  // ...but not precede it.
  ASSERT_EQ(*store_->ReserveJobIds(1), 2);
  WriteBatch wrong_order;
  wrong_order.AppendEvent(2, At(1), "user:alice", "Submitted", "");
  wrong_order.PutJob(TestJob(2, "b"));
  Status s = store_->Commit(wrong_order);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("op 1 of 2 (AppendEvent job 2): job 2 does not exist"));
}

TEST_P(StoreTest, FailedBatchLeavesNoTrace) {
  AddTenancy();
  AddJobs({"before"});
  ASSERT_TRUE(store_->ReserveJobIds(3).ok());
  Everything before = ReadEverything();

  // Every kind of write, then a queue whose tenant does not exist.
  WriteBatch batch;
  batch.PutJob(TestJob(2, "new-1"));
  batch.PutJob(TestJob(3, "new-2", JobState::kRunning));
  batch.AppendEvent(1, At(7), "scheduler", "Admitted", "");
  batch.AppendEvent(2, At(7), "user:bob", "Submitted", "");
  batch.PutNode(NamedNode("n9"));
  batch.PutTenant(Tenant{"prod", ""});
  batch.PutQueue(Queue{"serving", "prod", "", 0, 8, 1.0});
  batch.PutPriorityClass(PriorityClass{"p0", 1000, false});
  batch.PutQueue(Queue{"infra", "ops", "", 0, 8, 1.0});
  Status s = store_->Commit(batch);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "commit: op 9 of 9 (PutQueue ops/infra): tenant \"ops\" does not exist; create it "
            "first");

  Everything after = ReadEverything();
  EXPECT_EQ(after.all_jobs, before.all_jobs);
  EXPECT_EQ(after.events, before.events);
  EXPECT_EQ(after.state.nodes, before.state.nodes);
  EXPECT_EQ(after.state.tenants, before.state.tenants);
  EXPECT_EQ(after.state.queues, before.state.queues);
  EXPECT_EQ(after.state.priority_classes, before.state.priority_classes);
  EXPECT_EQ(after.state.last_event_seq, before.state.last_event_seq);
  EXPECT_FALSE(store_->GetJob(2)->has_value());

  // The store carries on: the next event takes the next seq.
  WriteBatch next;
  next.AppendEvent(1, At(8), "scheduler", "Admitted", "");
  ASSERT_TRUE(store_->Commit(next).ok());
  EXPECT_EQ(store_->LoadAll()->last_event_seq, before.state.last_event_seq + 1);
}

TEST_P(StoreTest, EventForMissingJobFailsTheWholeBatch) {
  AddJobs({"a"});
  WriteBatch batch;
  batch.PutNode(NamedNode("n1"));
  batch.AppendEvent(1, At(1), "scheduler", "Admitted", "");
  batch.AppendEvent(77, At(1), "scheduler", "Admitted", "");
  Status s = store_->Commit(batch);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("op 3 of 3 (AppendEvent job 77): job 77 does not exist"));
  EXPECT_TRUE(store_->ListNodes()->empty());
  EXPECT_TRUE(store_->ListEvents(1, 0, 10)->events.empty());
}

TEST_P(StoreTest, ChecksDeletesAndQueueHierarchy) {
  AddTenancy();
  auto commit = [&](auto fill) {
    WriteBatch batch;
    fill(batch);
    return store_->Commit(batch);
  };
  Status s = commit([](WriteBatch& b) { b.DeleteNode("ghost"); });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("node \"ghost\" does not exist"));
  EXPECT_EQ(commit([](WriteBatch& b) { b.DeleteTenant("ghost"); }).code(), StatusCode::kNotFound);
  EXPECT_EQ(commit([](WriteBatch& b) { b.DeleteQueue("research", "ghost"); }).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(commit([](WriteBatch& b) { b.DeletePriorityClass("ghost"); }).code(),
            StatusCode::kNotFound);

  s = commit([](WriteBatch& b) { b.PutQueue(Queue{"cv", "research", "nope", 0, 1, 1.0}); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("parent queue \"nope\" does not exist in tenant \"research\""));

  ASSERT_TRUE(commit([](WriteBatch& b) {
                b.PutQueue(Queue{"cv", "research", "vision", 0, 1, 1.0});
                b.PutQueue(Queue{"detection", "research", "cv", 0, 1, 1.0});
              }).ok());
  s = commit([](WriteBatch& b) {
    b.PutQueue(Queue{"vision", "research", "detection", 0, 1, 1.0});
  });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("it would become its own ancestor"));

  s = commit([](WriteBatch& b) { b.DeleteTenant("research"); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("tenant \"research\" still has queues (cv, detection, vision)"));
  s = commit([](WriteBatch& b) { b.DeleteQueue("research", "vision"); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("research/vision still has child queues (cv)"));

  // Leaves first, then the tenant, in one batch.
  ASSERT_TRUE(commit([](WriteBatch& b) {
                b.DeleteQueue("research", "detection");
                b.DeleteQueue("research", "cv");
                b.DeleteQueue("research", "vision");
                b.DeleteTenant("research");
              }).ok());
  EXPECT_TRUE(store_->ListQueues()->empty());
  EXPECT_TRUE(store_->ListTenants()->empty());

  ASSERT_TRUE(commit([](WriteBatch& b) {
                b.PutNode(NamedNode("n1"));
                b.PutPriorityClass(PriorityClass{"p0", 1000, false});
              }).ok());
  ASSERT_TRUE(commit([](WriteBatch& b) {
                b.DeleteNode("n1");
                b.DeletePriorityClass("p0");
              }).ok());
  EXPECT_TRUE(store_->ListNodes()->empty());
  EXPECT_TRUE(store_->ListPriorityClasses()->empty());
}

TEST_P(StoreTest, RejectsInvalidValues) {
  AddTenancy();
  ASSERT_EQ(*store_->ReserveJobIds(1), 1);
  auto code_and_message = [&](auto fill) {
    WriteBatch batch;
    fill(batch);
    Status s = store_->Commit(batch);
    return std::make_pair(s.code(), s.message());
  };
  auto [code, msg] = code_and_message([](WriteBatch& b) { b.PutNode(NamedNode("bad name")); });
  EXPECT_EQ(code, StatusCode::kInvalidArgument);
  EXPECT_THAT(msg, HasSubstr("commit: op 1 of 1 (PutNode bad name): name: may hold only"));

  std::tie(code, msg) = code_and_message([](WriteBatch& b) {
    b.PutQueue(Queue{"q", "research", "", 10, 5, 1.0});
  });
  EXPECT_EQ(code, StatusCode::kInvalidArgument);
  EXPECT_THAT(msg, HasSubstr("queue.limit_gpus: must be >= guaranteed_gpus"));

  std::tie(code, msg) = code_and_message([](WriteBatch& b) {
    Job job = TestJob(1, "a");
    job.spec.replicas = 0;
    b.PutJob(job);
  });
  EXPECT_EQ(code, StatusCode::kInvalidArgument);
  EXPECT_THAT(msg, HasSubstr("(PutJob 1): spec: "));
  EXPECT_THAT(msg, HasSubstr("replicas"));

  std::tie(code, msg) = code_and_message([](WriteBatch& b) {
    Job job = TestJob(1, "a");
    job.spec.experiment.code = "";  // NormalizeSpec would fill it
    b.PutJob(job);
  });
  EXPECT_EQ(code, StatusCode::kInvalidArgument);
  EXPECT_THAT(msg, HasSubstr("spec: is not normalised"));

  std::tie(code, msg) = code_and_message([](WriteBatch& b) {
    Node node = NamedNode("n1");
    node.labels["note"] = "bad utf-8 \xff";
    b.PutNode(node);
  });
  EXPECT_EQ(code, StatusCode::kInvalidArgument);
  EXPECT_THAT(msg, HasSubstr("(PutNode n1): cannot encode as JSON"));

  std::tie(code, msg) =
      code_and_message([](WriteBatch& b) { b.AppendEvent(1, At(1), "scheduler", "", "no kind"); });
  EXPECT_EQ(code, StatusCode::kInvalidArgument);
  EXPECT_THAT(msg, HasSubstr("event.kind must not be empty"));

  EXPECT_TRUE(store_->ListJobs({}, 0, 10, JobOrder::kAscending)->jobs.empty());
}

TEST_P(StoreTest, LoadAllReturnsActiveJobsOnly) {
  ASSERT_EQ(*store_->ReserveJobIds(4), 1);
  WriteBatch batch;
  batch.PutJob(TestJob(1, "pending", JobState::kPending));
  batch.PutJob(TestJob(2, "done", JobState::kSucceeded));
  batch.PutJob(TestJob(3, "running", JobState::kRunning));
  batch.PutJob(TestJob(4, "cancelled", JobState::kCancelled));
  ASSERT_TRUE(store_->Commit(batch).ok());
  Result<StoredState> state = store_->LoadAll();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->active_jobs.size(), 2u);
  EXPECT_EQ(state->active_jobs[0].id, 1);
  EXPECT_EQ(state->active_jobs[1].id, 3);
  // Finished jobs are still there on demand.
  EXPECT_TRUE(store_->GetJob(2)->has_value());
}

TEST_P(StoreTest, ConcurrentCallsAreSerialised) {
  constexpr int kThreads = 4;
  constexpr int kBatchesPerThread = 10;
  std::vector<std::thread> threads;
  std::vector<Status> errors(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int b = 0; b < kBatchesPerThread; ++b) {
        Result<JobId> id = store_->ReserveJobIds(1);
        if (!id.ok()) {
          errors[t] = id.status();
          return;
        }
        WriteBatch batch;
        batch.PutJob(TestJob(*id, "t" + std::to_string(t)));
        batch.AppendEvent(*id, At(b), "thread", "Submitted", std::to_string(t));
        if (Status s = store_->Commit(batch); !s.ok()) {
          errors[t] = s;
          return;
        }
        if (Result<JobPage> page = store_->ListJobs({}, 0, 5, JobOrder::kAscending); !page.ok()) {
          errors[t] = page.status();
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : errors) EXPECT_TRUE(s.ok()) << s.ToString();

  Result<JobPage> all = store_->ListJobs({}, 0, kMaxListLimit, JobOrder::kAscending);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->jobs.size(), size_t{kThreads * kBatchesPerThread});
  std::set<int64_t> seqs;
  for (const Job& job : all->jobs) {
    Result<EventPage> events = store_->ListEvents(job.id, 0, 10);
    ASSERT_EQ(events->events.size(), 1u);
    seqs.insert(events->events[0].seq);
  }
  EXPECT_EQ(seqs.size(), size_t{kThreads * kBatchesPerThread});
  EXPECT_EQ(*seqs.rbegin(), kThreads * kBatchesPerThread);
}

// --- datasets ------------------------------------------------------------------------

Dataset TestDataset(const std::string& name, const std::string& tenant, int versions) {
  Dataset d;
  d.name = name;
  d.tenant = tenant;
  d.source = "/shared/" + name;
  d.created = At(1'000);
  d.created_by = "user:alice";
  for (int i = 0; i < versions; ++i) {
    d.versions.push_back({"sha256:" + std::string(63, 'a') + static_cast<char>('0' + i), 10 + i,
                          1'000 + i, At(2'000 + i), "user:alice"});
  }
  return d;
}

TEST_P(StoreTest, DatasetsAndTheirManifestsReadBackAndDeletesCheck) {
  AddTenancy();
  const Dataset imagenet = TestDataset("imagenet", "research", 2);
  const Dataset shared = TestDataset("common-crawl", "", 1);
  WriteBatch b;
  b.PutManifest(imagenet.versions[0].version, "trainyard-manifest 1\nfirst\n");
  b.PutManifest(imagenet.versions[1].version, "trainyard-manifest 1\nsecond\n");
  b.PutDataset(imagenet);
  b.PutDataset(shared);
  MustCommit(b);
  EXPECT_THAT(*store_->ListDatasets(), ElementsAre(shared, imagenet));
  Result<StoredState> state = store_->LoadAll();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_THAT(state->datasets, ElementsAre(shared, imagenet));
  auto text = store_->GetManifest(imagenet.versions[1].version);
  ASSERT_TRUE(text.ok() && text->has_value());
  EXPECT_EQ(**text, "trainyard-manifest 1\nsecond\n");
  // Content-addressed: a second put of a version keeps the first text.
  MustCommit([&] {
    WriteBatch w;
    w.PutManifest(imagenet.versions[1].version, "something else");
    return w;
  }());
  EXPECT_EQ(**store_->GetManifest(imagenet.versions[1].version), "trainyard-manifest 1\nsecond\n");
  EXPECT_FALSE(store_->GetManifest("sha256:" + std::string(64, 'f'))->has_value());

  // A dataset's tenant must exist; a bad version is refused; deletes check existence.
  Status s = CommitWith([](WriteBatch& w) { w.PutDataset(TestDataset("x", "ghost", 0)); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("tenant \"ghost\" does not exist"));
  s = CommitWith([](WriteBatch& w) { w.PutManifest("v1", "x"); });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  Dataset bad = TestDataset("y", "research", 1);
  bad.source = "relative/path";
  s = CommitWith([&](WriteBatch& w) { w.PutDataset(bad); });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("dataset.source"));
  s = CommitWith([](WriteBatch& w) { w.DeleteDataset("ghost"); });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  MustCommit([] {
    WriteBatch w;
    w.DeleteDataset("common-crawl");
    return w;
  }());
  EXPECT_THAT(*store_->ListDatasets(), ElementsAre(imagenet));
}

// --- users, tokens, audit log ------------------------------------------------------

TEST_P(StoreTest, UsersAndTokensReadBackInKeyOrder) {
  User bob = TestUser("bob");
  User alice = TestUser("alice", "research", Role::kTenantAdmin);
  alice.priority_classes = {"p0"};
  User root = TestUser("root", "", Role::kClusterAdmin);
  ApiToken bobs = TestToken('b', "bob");
  bobs.expires = At(9'000);
  ApiToken alices = TestToken('0', "alice");
  ApiToken roots = TestToken('7', "root");
  WriteBatch batch;
  batch.PutTenant(Tenant{"research", ""});
  batch.PutUser(bob);
  batch.PutUser(alice);
  batch.PutUser(root);
  batch.PutToken(bobs);
  batch.PutToken(alices);
  batch.PutToken(roots);
  MustCommit(batch);

  EXPECT_THAT(*store_->ListUsers(), ElementsAre(alice, bob, root));
  EXPECT_THAT(*store_->ListTokens(), ElementsAre(alices, roots, bobs));
  Result<StoredState> state = store_->LoadAll();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_THAT(state->users, ElementsAre(alice, bob, root));
  EXPECT_THAT(state->tokens, ElementsAre(alices, roots, bobs));
}

TEST_P(StoreTest, PutUserAndPutTokenReplaceByKey) {
  AddTenancy();
  MustCommit([] {
    WriteBatch b;
    b.PutTenant(Tenant{"prod", ""});
    b.PutUser(TestUser("alice"));
    b.PutUser(TestUser("bob"));
    b.PutToken(TestToken('a', "alice"));
    return b;
  }());

  User moved = TestUser("alice", "prod", Role::kViewer);
  ApiToken revoked = TestToken('a', "alice");
  revoked.revoked = At(5'000);
  revoked.description = "lost laptop";
  ApiToken handed_over = TestToken('c', "alice");
  WriteBatch batch;
  batch.PutUser(moved);
  batch.PutToken(revoked);
  batch.PutToken(handed_over);
  handed_over.user = "bob";  // a later op sees the earlier one and replaces it
  batch.PutToken(handed_over);
  MustCommit(batch);

  EXPECT_THAT(*store_->ListUsers(), ElementsAre(moved, TestUser("bob")));
  EXPECT_THAT(*store_->ListTokens(), ElementsAre(revoked, handed_over));
  // The user left research: research may go (once its queue is gone), prod may not.
  EXPECT_EQ(CommitWith([](WriteBatch& b) {
              b.DeleteQueue("research", "vision");
              b.DeleteTenant("prod");
            }).code(),
            StatusCode::kFailedPrecondition);
  Status s = CommitWith([](WriteBatch& b) {
    b.DeleteQueue("research", "vision");
    b.DeleteUser("bob");
    b.DeleteTenant("research");
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_P(StoreTest, PutUserChecksItsTenant) {
  Status s = CommitWith([](WriteBatch& b) { b.PutUser(TestUser("alice", "ghost")); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "commit: op 1 of 1 (PutUser alice): tenant \"ghost\" does not exist; create it first");

  // A cluster admin needs no tenant; a user may follow its tenant in the same batch.
  s = CommitWith([](WriteBatch& b) {
    b.PutUser(TestUser("root", "", Role::kClusterAdmin));
    b.PutTenant(Tenant{"research", ""});
    b.PutUser(TestUser("alice"));
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(UserNames(*store_->ListUsers()), (std::vector<std::string>{"alice", "root"}));
}

TEST_P(StoreTest, PutTokenChecksItsUser) {
  AddTenancy();
  Status s = CommitWith([](WriteBatch& b) { b.PutToken(TestToken('a', "ghost")); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "commit: op 1 of 1 (PutToken aaaaaaaaaaaa): user \"ghost\" does not exist; put the "
            "user before its tokens");

  // Before its user in the batch is too early.
  s = CommitWith([](WriteBatch& b) {
    b.PutToken(TestToken('a', "alice"));
    b.PutUser(TestUser("alice"));
  });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("op 1 of 2 (PutToken aaaaaaaaaaaa): user \"alice\""));
  EXPECT_TRUE(store_->ListUsers()->empty());

  s = CommitWith([](WriteBatch& b) {
    b.PutUser(TestUser("alice"));
    b.PutToken(TestToken('a', "alice"));
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(TokenIds(*store_->ListTokens()), (std::vector<std::string>{"aaaaaaaaaaaa"}));
}

TEST_P(StoreTest, DeleteUserDeletesItsTokens) {
  AddTenancy();
  MustCommit([] {
    WriteBatch b;
    b.PutUser(TestUser("alice"));
    b.PutUser(TestUser("bob"));
    b.PutToken(TestToken('1', "alice"));
    b.PutToken(TestToken('2', "bob"));
    b.PutToken(TestToken('3', "alice"));
    return b;
  }());

  Status s = CommitWith([](WriteBatch& b) { b.DeleteUser("ghost"); });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "commit: op 1 of 1 (DeleteUser ghost): user \"ghost\" does not exist");

  ASSERT_TRUE(CommitWith([](WriteBatch& b) { b.DeleteUser("alice"); }).ok());
  EXPECT_EQ(UserNames(*store_->ListUsers()), (std::vector<std::string>{"bob"}));
  EXPECT_EQ(TokenIds(*store_->ListTokens()), (std::vector<std::string>{"222222222222"}));
  EXPECT_EQ(TokenIds(store_->LoadAll()->tokens), (std::vector<std::string>{"222222222222"}));

  // Gone means gone: no new tokens, no second delete.
  EXPECT_EQ(CommitWith([](WriteBatch& b) { b.PutToken(TestToken('4', "alice")); }).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(CommitWith([](WriteBatch& b) { b.DeleteUser("alice"); }).code(), StatusCode::kNotFound);

  // Deleted and created again in one batch: the old tokens stay gone.
  ASSERT_TRUE(CommitWith([](WriteBatch& b) {
                b.DeleteUser("bob");
                b.PutUser(TestUser("bob", "research", Role::kViewer));
              }).ok());
  EXPECT_TRUE(store_->ListTokens()->empty());
  EXPECT_THAT(*store_->ListUsers(), ElementsAre(TestUser("bob", "research", Role::kViewer)));
}

TEST_P(StoreTest, DeleteTenantFailsWhileUsersRemain) {
  MustCommit([] {
    WriteBatch b;
    b.PutTenant(Tenant{"research", ""});
    b.PutTenant(Tenant{"prod", ""});
    b.PutQueue(Queue{"vision", "research", "", 0, 8, 1.0});
    for (const char* name : {"u6", "u2", "u5", "u1", "u4", "u3"}) b.PutUser(TestUser(name));
    b.PutUser(TestUser("carol", "prod"));
    b.PutUser(TestUser("root", "", Role::kClusterAdmin));
    return b;
  }());

  // Queues are named first, then users, at most five of them.
  Status s = CommitWith([](WriteBatch& b) { b.DeleteTenant("research"); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("tenant \"research\" still has queues (vision)"));
  s = CommitWith([](WriteBatch& b) {
    b.DeleteQueue("research", "vision");
    b.DeleteTenant("research");
  });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "commit: op 2 of 2 (DeleteTenant research): tenant \"research\" still has users (u1, "
            "u2, u3, u4, u5, ...); delete them first");
  EXPECT_EQ(store_->ListQueues()->size(), 1u);  // the failed batch took nothing

  s = CommitWith([](WriteBatch& b) { b.DeleteTenant("prod"); });
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("tenant \"prod\" still has users (carol); delete them first"));

  s = CommitWith([](WriteBatch& b) {
    b.DeleteUser("carol");
    b.DeleteTenant("prod");
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(store_->ListTenants()->size(), 1u);
  EXPECT_EQ(store_->ListUsers()->size(), 7u);  // research's six and the cluster admin
}

TEST_P(StoreTest, RejectsInvalidUsersAndTokens) {
  AddTenancy();
  MustCommit([] {
    WriteBatch b;
    b.PutUser(TestUser("alice"));
    return b;
  }());
  Status s = CommitWith([](WriteBatch& b) { b.PutUser(TestUser("Bad Name")); });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("commit: op 1 of 1 (PutUser Bad Name): user name: "));

  s = CommitWith([](WriteBatch& b) { b.PutUser(TestUser("bob", "")); });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("(PutUser bob): user bob: tenant: required"));

  s = CommitWith([](WriteBatch& b) {
    User u = TestUser("bob");
    u.created_by = "bad utf-8 \xff";
    b.PutUser(u);
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("(PutUser bob): cannot encode as JSON"));

  s = CommitWith([](WriteBatch& b) {
    ApiToken t = TestToken('a', "alice");
    t.id = "ABC";
    b.PutToken(t);
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("(PutToken ABC): token id: expected 12 lower-case hex"));

  const std::string secret_hash = std::string(63, 'e') + "X";
  s = CommitWith([&](WriteBatch& b) {
    ApiToken t = TestToken('a', "alice");
    t.secret_hash = secret_hash;
    b.PutToken(t);
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("secret_hash"));
  EXPECT_THAT(s.message(), Not(HasSubstr(secret_hash)));

  // Validity is checked before anything is applied: the first op is not kept.
  s = CommitWith([](WriteBatch& b) {
    b.PutUser(TestUser("carol"));
    ApiToken t = TestToken('a', "carol");
    t.expires = t.created;
    b.PutToken(t);
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("op 2 of 2 (PutToken aaaaaaaaaaaa)"));
  EXPECT_EQ(UserNames(*store_->ListUsers()), (std::vector<std::string>{"alice"}));
  EXPECT_TRUE(store_->ListTokens()->empty());
}

TEST_P(StoreTest, AuditIsOrderedPagedAndFiltered) {
  std::vector<JobId> ids = AddJobs({"a"});
  MustCommit([&] {
    WriteBatch b;
    b.AppendAudit(Audit("user:alice", "research", "job/1"));
    b.AppendEvent(ids[0], At(1), "user:alice", "Cancelled", "");  // its own sequence
    b.AppendAudit(Audit("user:bob", "research", "job/2", 403));
    return b;
  }());
  MustCommit([] {
    WriteBatch b;
    b.AppendAudit(Audit("user:alice", "prod", "job/3"));
    b.AppendAudit(Audit("user:root", "", "node/gpu-7"));
    AuditEntry with_seq = Audit("user:alice", "research", "job/1");
    with_seq.seq = 99;  // ignored
    b.AppendAudit(with_seq);
    b.AppendAudit(Audit("anonymous", "", "", 401));
    return b;
  }());

  std::vector<AuditEntry> all = AllAudit();
  ASSERT_EQ(all.size(), 6u);
  EXPECT_THAT(Seqs(all), ElementsAre(1, 2, 3, 4, 5, 6));
  AuditEntry expected = Audit("user:bob", "research", "job/2", 403);
  expected.seq = 2;
  EXPECT_EQ(all[1], expected);
  EXPECT_EQ(store_->LoadAll()->last_event_seq, 1);

  using V = std::vector<int64_t>;
  EXPECT_EQ(Seqs(AllAudit({.actor = "user:alice"})), (V{1, 3, 5}));
  EXPECT_EQ(Seqs(AllAudit({.tenant = "research"})), (V{1, 2, 5}));
  EXPECT_EQ(Seqs(AllAudit({.object = "job/1"})), (V{1, 5}));
  EXPECT_EQ(Seqs(AllAudit({.actor = "user:alice", .tenant = "research"})), (V{1, 5}));
  EXPECT_EQ(Seqs(AllAudit({.actor = "user:alice", .tenant = "prod", .object = "job/3"})), (V{3}));
  EXPECT_EQ(Seqs(AllAudit({.actor = "user:alic"})), V{});  // exact, not a prefix
  EXPECT_EQ(Seqs(AllAudit({.actor = "user:bob", .tenant = "prod"})), V{});

  // Paging, alone and with a filter.
  Result<AuditPage> first = store_->ListAudit({}, 0, 4);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_THAT(Seqs(first->entries), ElementsAre(1, 2, 3, 4));
  ASSERT_EQ(first->next_after_seq, std::optional<int64_t>(4));
  Result<AuditPage> second = store_->ListAudit({}, *first->next_after_seq, 4);
  EXPECT_THAT(Seqs(second->entries), ElementsAre(5, 6));
  EXPECT_FALSE(second->next_after_seq.has_value());
  Result<AuditPage> exact = store_->ListAudit({}, 2, 4);  // ends at the last entry
  EXPECT_THAT(Seqs(exact->entries), ElementsAre(3, 4, 5, 6));
  EXPECT_FALSE(exact->next_after_seq.has_value());

  Result<AuditPage> alice = store_->ListAudit({.actor = "user:alice"}, 0, 2);
  EXPECT_THAT(Seqs(alice->entries), ElementsAre(1, 3));
  ASSERT_EQ(alice->next_after_seq, std::optional<int64_t>(3));
  alice = store_->ListAudit({.actor = "user:alice"}, *alice->next_after_seq, 2);
  EXPECT_THAT(Seqs(alice->entries), ElementsAre(5));
  EXPECT_FALSE(alice->next_after_seq.has_value());
  EXPECT_TRUE(store_->ListAudit({}, 6, 10)->entries.empty());
}

TEST_P(StoreTest, AuditFieldsAreCutToTheirBounds) {
  AuditEntry e = Audit("user:alice", "research", "job/1");
  e.message = std::string(3 * kMaxAuditMessageBytes, 'm');
  e.object = std::string(kMaxAuditObjectBytes, 'o');  // exactly at the bound: kept
  std::string e_acute = "\xc3\xa9";                   // two bytes
  e.action = "GET /";
  while (e.action.size() < 2 * kMaxAuditActionBytes) e.action += e_acute;
  e.source = std::string(kMaxAuditOtherFieldBytes + 1, 's');
  MustCommit([&] {
    WriteBatch b;
    b.AppendAudit(e);
    return b;
  }());

  std::vector<AuditEntry> all = AllAudit();
  ASSERT_EQ(all.size(), 1u);
  const AuditEntry& got = all[0];
  EXPECT_EQ(got.message, std::string(kMaxAuditMessageBytes - 3, 'm') + "...");
  EXPECT_EQ(got.object, e.object);
  EXPECT_EQ(got.source, std::string(kMaxAuditOtherFieldBytes - 3, 's') + "...");
  EXPECT_LE(got.action.size(), kMaxAuditActionBytes);
  EXPECT_GE(got.action.size(), kMaxAuditActionBytes - 1);
  EXPECT_TRUE(IsValidUtf8(got.action)) << "cut inside a character";
  EXPECT_EQ(got.action.substr(0, got.action.size() - 3), e.action.substr(0, got.action.size() - 3));
  EXPECT_EQ(got.action.substr(got.action.size() - 3), "...");
  EXPECT_EQ(got.actor, "user:alice");
  EXPECT_EQ(got.tenant, "research");
}

TEST_P(StoreTest, FailedBatchOfUsersTokensAndAuditLeavesNoTrace) {
  AddTenancy();
  MustCommit([] {
    WriteBatch b;
    b.PutUser(TestUser("alice"));
    b.PutToken(TestToken('a', "alice"));
    b.AppendAudit(Audit("user:root", "research", "user/alice"));
    return b;
  }());
  std::vector<User> users_before = *store_->ListUsers();
  std::vector<ApiToken> tokens_before = *store_->ListTokens();
  std::vector<AuditEntry> audit_before = AllAudit();

  // Every kind of new write, then a token whose user does not exist.
  WriteBatch batch;
  batch.PutUser(TestUser("bob"));
  batch.PutToken(TestToken('b', "bob"));
  User changed = TestUser("alice", "research", Role::kViewer);
  batch.PutUser(changed);
  ApiToken revoked = TestToken('a', "alice");
  revoked.revoked = At(3'000);
  batch.PutToken(revoked);
  batch.AppendAudit(Audit("user:root", "research", "user/bob"));
  batch.DeleteUser("alice");
  batch.PutTenant(Tenant{"prod", ""});
  batch.AppendAudit(Audit("user:root", "research", "user/alice"));
  batch.PutToken(TestToken('c', "carol"));
  Status s = store_->Commit(batch);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("op 9 of 9 (PutToken cccccccccccc)"));

  EXPECT_EQ(*store_->ListUsers(), users_before);
  EXPECT_EQ(*store_->ListTokens(), tokens_before);
  EXPECT_EQ(AllAudit(), audit_before);
  EXPECT_EQ(store_->ListTenants()->size(), 1u);
  Result<StoredState> state = store_->LoadAll();
  EXPECT_EQ(state->users, users_before);
  EXPECT_EQ(state->tokens, tokens_before);

  // The store carries on: the next audit entry takes the next seq.
  MustCommit([] {
    WriteBatch b;
    b.AppendAudit(Audit("user:root", "", "node/n1"));
    return b;
  }());
  EXPECT_THAT(Seqs(AllAudit()), ElementsAre(1, 2));
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreTest,
    ::testing::Values(StoreKind{"Sqlite", OpenSqlite},
                      StoreKind{"Postgres", OpenPostgres, /*postgres=*/true},
                      StoreKind{"Memory",
                                [](const std::string&) -> std::unique_ptr<Store> {
                                  return std::make_unique<MemoryStore>();
                                }}),
    [](const ::testing::TestParamInfo<StoreKind>& info) { return info.param.name; });

}  // namespace
}  // namespace trainyard::store
