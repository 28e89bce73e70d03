#include "server/committer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "core/spec_codec.h"
#include "server/cluster.h"
#include "store/memory_store.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A MemoryStore whose commits can be held at a gate and made to fail, and which counts
// them.
class ProbeStore final : public store::Store {
 public:
  Status Commit(const store::WriteBatch& batch) override {
    {
      std::unique_lock lk(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait(lk, [&] { return !gated_; });
      ++commits_;
      if (fail_next_) {
        fail_next_ = false;
        return Unavailable("disk on fire");
      }
    }
    return inner_.Commit(batch);
  }
  Result<JobId> ReserveJobIds(int64_t n) override { return inner_.ReserveJobIds(n); }
  Result<std::optional<Job>> GetJob(JobId id) override { return inner_.GetJob(id); }
  Result<store::JobPage> ListJobs(const store::JobFilter& f, JobId after, int limit,
                                  store::JobOrder order) override {
    return inner_.ListJobs(f, after, limit, order);
  }
  Result<store::EventPage> ListEvents(JobId id, int64_t after, int limit) override {
    return inner_.ListEvents(id, after, limit);
  }
  Result<store::AuditPage> ListAudit(const AuditFilter& f, int64_t after, int limit) override {
    return inner_.ListAudit(f, after, limit);
  }
  Result<std::vector<Node>> ListNodes() override { return inner_.ListNodes(); }
  Result<std::vector<Tenant>> ListTenants() override { return inner_.ListTenants(); }
  Result<std::vector<Queue>> ListQueues() override { return inner_.ListQueues(); }
  Result<std::vector<PriorityClass>> ListPriorityClasses() override {
    return inner_.ListPriorityClasses();
  }
  Result<std::vector<User>> ListUsers() override { return inner_.ListUsers(); }
  Result<std::vector<ApiToken>> ListTokens() override { return inner_.ListTokens(); }
  Result<std::vector<Dataset>> ListDatasets() override { return inner_.ListDatasets(); }
  Result<std::optional<std::string>> GetManifest(const std::string& version) override {
    return inner_.GetManifest(version);
  }
  Result<store::StoredState> LoadAll() override { return inner_.LoadAll(); }
  int SchemaVersion() const override { return 0; }
  std::string Describe() const override { return "probe"; }

  void Gate() {
    std::lock_guard lk(mu_);
    gated_ = true;
  }
  void Open() {
    std::lock_guard lk(mu_);
    gated_ = false;
    cv_.notify_all();
  }
  // Blocks until `n` commits have reached the store (held at the gate or not).
  void AwaitEntered(int n) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return entered_ >= n; });
  }
  void FailNext() {
    std::lock_guard lk(mu_);
    fail_next_ = true;
  }
  int commits() {
    std::lock_guard lk(mu_);
    return commits_;
  }

 private:
  store::MemoryStore inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool gated_ = false;
  bool fail_next_ = false;
  int entered_ = 0;
  int commits_ = 0;
};

store::WriteBatch TenantBatch(const std::string& name) {
  store::WriteBatch b;
  b.PutTenant(Tenant{name, "test"});
  return b;
}

struct Published {
  bool ok;
  uint64_t first, last;
  size_t ops;
};

class CommitterTest : public ::testing::Test {
 protected:
  CommitterTest()
      : committer_(&store_, [this](const Status& s, const store::WriteBatch& group, uint64_t first,
                                   uint64_t last) {
          {
            std::lock_guard lk(mu_);
            published_.push_back({s.ok(), first, last, group.ops().size()});
          }
          if (!s.ok()) committer_.DrainAfterFailure();
        }) {}

  std::vector<Published> published() {
    std::lock_guard lk(mu_);
    return published_;
  }

  ProbeStore store_;
  std::mutex mu_;
  std::vector<Published> published_;
  Committer committer_;
};

bool operator==(const Published& a, const Published& b) {
  return a.ok == b.ok && a.first == b.first && a.last == b.last && a.ops == b.ops;
}

TEST_F(CommitterTest, CommitsAndPublishesInOrder) {
  committer_.Enqueue(1, TenantBatch("a"));
  ASSERT_TRUE(committer_.Wait(1).ok());
  EXPECT_EQ(committer_.durable(), 1u);
  committer_.Enqueue(2, TenantBatch("b"));
  ASSERT_TRUE(committer_.Wait(2).ok());
  EXPECT_THAT(published(), ElementsAre(Published{true, 1, 1, 1}, Published{true, 2, 2, 1}));
  auto tenants = store_.ListTenants();
  ASSERT_TRUE(tenants.ok());
  EXPECT_EQ(tenants->size(), 2u);
}

TEST_F(CommitterTest, AnEmptyGroupIsPublishedWithoutACommit) {
  committer_.Enqueue(1, store::WriteBatch());
  ASSERT_TRUE(committer_.Wait(1).ok());
  EXPECT_EQ(store_.commits(), 0);
  EXPECT_THAT(published(), ElementsAre(Published{true, 1, 1, 0}));
}

TEST_F(CommitterTest, ChangesQueuedDuringACommitShareTheNextOne) {
  store_.Gate();
  committer_.Enqueue(1, TenantBatch("a"));
  auto first = std::async(std::launch::async, [&] { return committer_.Wait(1); });
  store_.AwaitEntered(1);  // the leader is in the store with change 1 alone
  committer_.Enqueue(2, TenantBatch("b"));
  committer_.Enqueue(3, TenantBatch("c"));
  auto second = std::async(std::launch::async, [&] { return committer_.Wait(2); });
  auto third = std::async(std::launch::async, [&] { return committer_.Wait(3); });
  store_.Open();
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  EXPECT_TRUE(third.get().ok());
  // Two transactions for three changes: 2 and 3 went together.
  EXPECT_EQ(store_.commits(), 2);
  EXPECT_THAT(published(), ElementsAre(Published{true, 1, 1, 1}, Published{true, 2, 3, 2}));
}

TEST_F(CommitterTest, AFailedCommitFailsTheChangesBuiltOnIt) {
  store_.Gate();
  store_.FailNext();
  committer_.Enqueue(1, TenantBatch("a"));
  auto first = std::async(std::launch::async, [&] { return committer_.Wait(1); });
  store_.AwaitEntered(1);
  committer_.Enqueue(2, TenantBatch("b"));  // built on 1, queued while 1 commits
  store_.Open();
  Status s1 = first.get();
  EXPECT_EQ(s1.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s1.message(), HasSubstr("disk on fire"));
  // Drained with the failure: never written, and failed with the same error.
  Status s2 = committer_.Wait(2);
  EXPECT_EQ(s2.code(), StatusCode::kUnavailable);
  EXPECT_EQ(store_.commits(), 1);
  // What comes after the failure commits again.
  committer_.Enqueue(3, TenantBatch("c"));
  EXPECT_TRUE(committer_.Wait(3).ok());
  auto tenants = store_.ListTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->size(), 1u);
  EXPECT_EQ(tenants->front().name, "c");
}

// --- the Cluster holds no lock across a commit --------------------------------------------

JobSpec Spec(const std::string& yaml) {
  SpecParseResult r = ParseSpec(yaml, "test.yaml");
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].ToString());
  return *r.spec;
}

Registration NodeRegistration(const std::string& name, int gpus) {
  Registration r;
  r.node.name = name;
  for (int i = 0; i < gpus; ++i) {
    r.node.gpus.push_back({i, "GPU-" + name + "-" + std::to_string(i), "H100", 80 * kGiB, name});
  }
  r.node.milli_cpus = 64'000;
  r.node.memory_bytes = 512 * kGiB;
  r.address = "10.0.0.1";
  r.simulated = true;
  return r;
}

TEST(ClusterCommitTest, ReadsAndHeartbeatsGoOnWhileAChangeCommits) {
  ProbeStore store;
  FakeClock clock;
  auto opened = Cluster::Open(&store, &clock, ClusterOptions{});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Cluster& cluster = **opened;
  ASSERT_TRUE(cluster.Register(NodeRegistration("node-0", 8)).ok());

  store.Gate();
  const int before = store.commits();
  auto submitted = std::async(std::launch::async, [&] {
    return cluster.Submit({Spec("name: held\nreplicas: 1\nresources: {gpus: 1}\ncommand: [x]\n")},
                          "user:test");
  });
  store.AwaitEntered(before + 1);  // the submission's commit is held in the store
  // Meanwhile the cluster answers: a heartbeat that changes nothing, reads of the
  // node, the queues and the jobs (which show the change being committed).
  Heartbeat hb;
  hb.node = "node-0";
  EXPECT_TRUE(cluster.HandleHeartbeat(hb).ok());
  auto node = cluster.GetNode("node-0");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->node.name, "node-0");
  EXPECT_FALSE(cluster.ListQueues().empty());
  auto page = cluster.ListJobs(ListJobsRequest{});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->jobs.size(), 1u);
  // The submitter is answered only once its commit is done.
  EXPECT_EQ(submitted.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  store.Open();
  auto ids = submitted.get();
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->size(), 1u);
}

TEST(ClusterCommitTest, AFailedCommitIsReportedAndTheStateRebuiltFromTheStore) {
  ProbeStore store;
  FakeClock clock;
  auto opened = Cluster::Open(&store, &clock, ClusterOptions{});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Cluster& cluster = **opened;
  store.FailNext();
  auto ids = cluster.Submit({Spec("name: lost\nreplicas: 1\nresources: {gpus: 1}\ncommand: [x]\n")},
                            "user:test");
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("disk on fire"));
  // The job was applied in memory before the commit failed; it is gone again.
  auto page = cluster.ListJobs(ListJobsRequest{});
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->jobs.empty());
  // And the next submission works.
  auto again = cluster.Submit(
      {Spec("name: kept\nreplicas: 1\nresources: {gpus: 1}\ncommand: [x]\n")}, "user:test");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  page = cluster.ListJobs(ListJobsRequest{});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs.front().spec.name, "kept");
}

}  // namespace
}  // namespace trainyard::server
