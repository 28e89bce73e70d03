#include "lifecycle/lifecycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <utility>

#include "core/job_spec.h"
#include "sched/schedule.h"

namespace trainyard::lifecycle {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const Timestamp kT0 = Timestamp(Duration(1'764'000'000'000));

protocol::Registration Agent(const std::string& name, int gpus) {
  protocol::Registration r;
  r.node.name = name;
  for (int i = 0; i < gpus; ++i) {
    r.node.gpus.push_back({i, "GPU-" + name + "-" + std::to_string(i), "H100", 80LL << 30, name});
  }
  r.node.milli_cpus = 64'000;
  r.node.memory_bytes = 512LL << 30;
  r.address = "10.0.0." + name.substr(name.size() - 1);
  return r;
}

JobSpec Gang(int replicas, int gpus) {
  JobSpec s;
  s.name = "train";
  s.tenant = kDefaultTenant;
  s.queue = kDefaultQueue;
  s.priority = "normal";
  s.replicas = replicas;
  s.min_replicas = replicas;
  s.resources.gpus = gpus;
  s.resources.gpu_type = "H100";
  s.command = {"python3", "train.py"};
  NormalizeSpec(s);
  return s;
}

// Kinds of the job events a batch appends, in order.
std::vector<std::string> EventKinds(const store::WriteBatch& b) {
  std::vector<std::string> out;
  for (const auto& op : b.ops()) {
    if (const auto* e = std::get_if<store::WriteBatch::AppendEventOp>(&op)) {
      out.push_back(e->event.kind);
    }
  }
  return out;
}

size_t PutNodes(const store::WriteBatch& b) {
  return static_cast<size_t>(std::count_if(b.ops().begin(), b.ops().end(), [](const auto& op) {
    return std::holds_alternative<store::WriteBatch::PutNodeOp>(op);
  }));
}

class LifecycleTest : public ::testing::Test {
 protected:
  LifecycleTest() : state_(Options()) { Load(state_, store::StoredState{}, kT0); }

  static LifecycleOptions Options() {
    LifecycleOptions o;
    o.node_timeout = seconds(15);
    o.node_lost_grace = minutes(2);
    return o;
  }

  Effects Must(const Event& e) {
    ++state_.apply_seq;
    Result<Effects> fx = Apply(state_, e, now_);
    EXPECT_TRUE(fx.ok()) << fx.status().ToString();
    return fx.ok() ? std::move(*fx) : Effects{};
  }

  JobId Submit(JobSpec spec) {
    SubmitJobs s;
    s.specs.push_back(std::move(spec));
    s.first_id = next_id_++;
    s.actor = "user:test";
    Effects fx = Must(s);
    return fx.ids.empty() ? 0 : fx.ids[0];
  }

  Effects Pass() {
    ++state_.apply_seq;
    const sched::Snapshot& snap = state_.snapshot.Prepare(now_);
    sched::Decisions d = sched::Schedule(snap, state_.options.policy);
    Result<Effects> fx = ApplyDecisions(state_, d, nullptr, now_);
    EXPECT_TRUE(fx.ok()) << fx.status().ToString();
    return fx.ok() ? std::move(*fx) : Effects{};
  }

  std::vector<protocol::Command> Take(const std::string& node) {
    std::vector<protocol::Command> out;
    for (const QueuedCommand& q : state_.nodes.at(node).outbox) out.push_back(q.command);
    state_.nodes.at(node).outbox.clear();
    return out;
  }

  protocol::TaskStatus Task(const protocol::Command& start, protocol::TaskState state, int code = 0,
                            int signal = 0) {
    protocol::TaskStatus t;
    t.task_id = start.start.task_id;
    t.job_id = start.start.job_id;
    t.attempt = start.start.attempt;
    t.rank = start.start.rank;
    t.state = state;
    t.exit_code = code;
    t.signal = signal;
    return t;
  }

  Effects Beat(const std::string& node, std::vector<protocol::TaskStatus> tasks) {
    protocol::Heartbeat hb;
    hb.node = node;
    hb.tasks = std::move(tasks);
    return Must(AgentHeartbeat{hb});
  }

  ClusterState state_;
  Timestamp now_ = kT0;
  JobId next_id_ = 1;
};

TEST_F(LifecycleTest, GangIsBoundStartedRunAndFinishedWithItsRecord) {
  Must(AgentRegistered{Agent("node-0", 4)});
  Must(AgentRegistered{Agent("node-1", 4)});
  const JobId id = Submit(Gang(2, 4));
  ASSERT_EQ(id, 1);
  EXPECT_EQ(state_.snapshot.pending_count(), 1u);
  Effects bound = Pass();
  EXPECT_EQ(bound.stats.binds, 1);
  EXPECT_THAT(EventKinds(bound.batch), ElementsAre("Bound"));
  EXPECT_THAT(bound.nodes_with_commands, ElementsAre("node-0", "node-1"));
  // The starts wait for the bind's commit.
  EXPECT_EQ(state_.nodes.at("node-0").outbox.front().after_seq, state_.apply_seq);
  EXPECT_EQ(state_.jobs.at(id).job.state, JobState::kStarting);
  EXPECT_TRUE(state_.snapshot.FindRunning(id)->preempting);  // not running yet
  auto c0 = Take("node-0");
  auto c1 = Take("node-1");
  ASSERT_EQ(c0.size(), 1u);
  EXPECT_EQ(c0[0].start.env.at("WORLD_SIZE"), "2");
  EXPECT_EQ(c1[0].start.env.at("MASTER_ADDR"), "10.0.0.0");
  Beat("node-0", {Task(c0[0], protocol::TaskState::kRunning)});
  EXPECT_EQ(state_.jobs.at(id).job.state, JobState::kStarting);
  Effects running = Beat("node-1", {Task(c1[0], protocol::TaskState::kRunning)});
  EXPECT_THAT(EventKinds(running.batch), ElementsAre("Running"));
  EXPECT_FALSE(state_.snapshot.FindRunning(id)->preempting);
  now_ += minutes(10);
  Beat("node-0", {Task(c0[0], protocol::TaskState::kExited)});
  Effects done = Beat("node-1", {Task(c1[0], protocol::TaskState::kExited)});
  EXPECT_THAT(EventKinds(done.batch), ElementsAre("Succeeded"));
  EXPECT_THAT(done.ended, ElementsAre(id));
  EXPECT_TRUE(done.may_schedule);
  EXPECT_FALSE(state_.jobs.contains(id));
  EXPECT_EQ(state_.snapshot.FindRunning(id), nullptr);
  // Its exit is acknowledged once the job's end is recorded.
  Effects again = Beat("node-1", {Task(c1[0], protocol::TaskState::kExited)});
  EXPECT_THAT(again.acks, ElementsAre(c1[0].start.task_id));
}

// Each replica's ranks share a group with the replica's cpus and memory, and run as their
// tenant's identity once one is set.
TEST_F(LifecycleTest, StartsCarryTheReplicasLimitsAndTheTenantsIdentity) {
  Must(AgentRegistered{Agent("node-0", 4)});
  Must(AgentRegistered{Agent("node-1", 4)});
  Must(EnsureTenant{"vision", "admin"});
  Effects set = Must(SetTenantIdentity{"vision", 2001, 2002, std::nullopt, "admin"});
  ASSERT_TRUE(set.tenant);
  EXPECT_EQ(set.tenant->run_as_uid, 2001);
  EXPECT_EQ(state_.tenants.at("vision").run_as_gid, 2002);
  JobSpec spec = Gang(2, 4);
  spec.tenant = "vision";
  spec.procs_per_replica = 2;
  spec.resources.milli_cpus = 8000;
  spec.resources.memory_bytes = int64_t{64} << 30;
  const JobId id = Submit(spec);
  Pass();
  auto c0 = Take("node-0");
  auto c1 = Take("node-1");
  ASSERT_EQ(c0.size(), 2u);
  ASSERT_EQ(c1.size(), 2u);
  const std::string prefix = "j" + std::to_string(id) + ".0.r";  // attempts count from 0
  for (const auto& c : c0) EXPECT_EQ(c.start.group, prefix + "0");
  for (const auto& c : c1) EXPECT_EQ(c.start.group, prefix + "1");
  EXPECT_EQ(c0[1].start.milli_cpus, 8000);
  EXPECT_EQ(c0[1].start.memory_bytes, int64_t{64} << 30);
  EXPECT_EQ(c1[0].start.uid, 2001);
  EXPECT_EQ(c1[0].start.gid, 2002);

  // The default tenant names none: the agent's own.
  Must(AgentRegistered{Agent("node-2", 4)});
  Submit(Gang(1, 4));
  Pass();
  auto next = Take("node-2");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].start.uid, -1);
  // Root's ids are refused until root is allowed; an unknown tenant is not found.
  EXPECT_FALSE(Apply(state_, SetTenantIdentity{"vision", 0, 0, std::nullopt, "a"}, now_).ok());
  EXPECT_EQ(state_.tenants.at("vision").run_as_uid, 2001);
  EXPECT_TRUE(Apply(state_, SetTenantIdentity{"vision", 0, 0, true, "a"}, now_).ok());
  auto ghost = Apply(state_, SetTenantIdentity{"ghost", 1, 1, std::nullopt, "a"}, now_);
  ASSERT_FALSE(ghost.ok());
  EXPECT_EQ(ghost.status().code(), StatusCode::kNotFound);
}

// A user's own identity, recorded on its jobs at submission, wins over its tenant's.
TEST_F(LifecycleTest, AJobSubmittedByAUserWithAnIdentityRunsAsThatUser) {
  Must(AgentRegistered{Agent("node-0", 4)});
  Must(EnsureTenant{"vision", "admin"});
  Must(SetTenantIdentity{"vision", 2001, 2001, std::nullopt, "admin"});
  JobSpec spec = Gang(1, 1);
  spec.tenant = "vision";
  SubmitJobs s;
  s.specs = {spec, spec};
  s.first_id = next_id_;
  next_id_ += 2;
  s.actor = "user:carol";
  s.run_as_uid = 3001;
  s.run_as_gid = 3002;
  Effects fx = Must(s);
  ASSERT_EQ(fx.ids.size(), 2u);
  EXPECT_EQ(state_.jobs.at(fx.ids[1]).job.run_as_uid, 3001);
  // One by the tenant's other users: the tenant's.
  const JobId other = Submit(spec);
  Pass();
  auto c = Take("node-0");
  ASSERT_EQ(c.size(), 3u);
  std::map<JobId, std::pair<int64_t, int64_t>> ids;
  for (const auto& cmd : c) ids[cmd.start.job_id] = {cmd.start.uid, cmd.start.gid};
  EXPECT_EQ(ids[fx.ids[0]], std::make_pair(int64_t{3001}, int64_t{3002}));
  EXPECT_EQ(ids[fx.ids[1]], std::make_pair(int64_t{3001}, int64_t{3002}));
  EXPECT_EQ(ids[other], std::make_pair(int64_t{2001}, int64_t{2001}));
}

// Data with stage: local is staged on every node of the gang before any rank starts;
// a node that cannot stage it fails the attempt, naming the node and why.
class StagingTest : public LifecycleTest {
 protected:
  const std::string kVersion = "sha256:" + std::string(64, 'd');
  JobSpec Staged() {
    JobSpec spec = Gang(2, 4);
    spec.data.push_back(
        {"imagenet", kVersion, "/data/imagenet", DataStage::kLocal, "/shared/imagenet"});
    return spec;
  }
  Effects Cache(const std::string& node, protocol::DatasetState state, int64_t done,
                const std::string& error = "") {
    protocol::Heartbeat hb;
    hb.node = node;
    hb.datasets.push_back({"imagenet", kVersion, state, done, 1000, 100e6, error, 0});
    return Must(AgentHeartbeat{hb});
  }
  static size_t Count(const std::vector<protocol::Command>& cmds, protocol::Command::Kind kind) {
    return static_cast<size_t>(
        std::count_if(cmds.begin(), cmds.end(), [&](const auto& c) { return c.kind == kind; }));
  }
};

TEST_F(StagingTest, TheGangStartsOnlyOnceEveryNodeHoldsItsData) {
  Must(AgentRegistered{Agent("node-0", 4)});
  Must(AgentRegistered{Agent("node-1", 4)});
  const JobId id = Submit(Staged());
  Pass();
  for (const std::string node : {"node-0", "node-1"}) {
    auto cmds = Take(node);
    ASSERT_EQ(cmds.size(), 1u) << node;
    ASSERT_EQ(cmds[0].kind, protocol::Command::Kind::kStage);
    ASSERT_EQ(cmds[0].stage.size(), 1u);
    EXPECT_EQ(cmds[0].stage[0].version, kVersion);
    EXPECT_EQ(cmds[0].stage[0].source, "/shared/imagenet");
    EXPECT_TRUE(cmds[0].stage[0].stage_local);
  }
  EXPECT_EQ(state_.jobs.at(id).job.state, JobState::kStarting);
  EXPECT_EQ(state_.jobs.at(id).job.reason,
            "staging data on 2 node(s): waiting for the nodes to start copying");
  // One node done, the other half way: no start yet, and the reason says how far.
  Cache("node-0", protocol::DatasetState::kReady, 1000);
  Cache("node-1", protocol::DatasetState::kStaging, 500);
  EXPECT_TRUE(Take("node-0").empty());
  EXPECT_TRUE(Take("node-1").empty());
  EXPECT_THAT(state_.jobs.at(id).job.reason,
              ::testing::StartsWith("staging data on 2 node(s): 1.5 KiB of 2.0 KiB (75%), 100 MB/s "
                                    "on the slowest (node-1), ETA"));
  // Nothing new from node-1 for a while: the stage is asked for again only where the data
  // was never reported.
  now_ += seconds(16);
  Cache("node-0", protocol::DatasetState::kReady, 1000);
  Cache("node-1", protocol::DatasetState::kStaging, 600);
  Must(Tick{});
  EXPECT_TRUE(Take("node-0").empty());
  EXPECT_TRUE(Take("node-1").empty());
  // Both hold it: every rank's start goes out at once, with the data in it.
  Effects fx = Cache("node-1", protocol::DatasetState::kReady, 1000);
  EXPECT_THAT(EventKinds(fx.batch), ::testing::Contains("Staged"));
  for (const std::string node : {"node-0", "node-1"}) {
    auto cmds = Take(node);
    ASSERT_EQ(Count(cmds, protocol::Command::Kind::kStart), 1u) << node;
    ASSERT_EQ(cmds[0].start.data.size(), 1u);
    EXPECT_TRUE(cmds[0].start.data[0].stage_local);
  }
  EXPECT_EQ(state_.jobs.at(id).job.reason, "starting 2 rank(s): data staged");
  // What each node holds is what the scheduler's locality sees.
  EXPECT_EQ(state_.nodes.at("node-1").node.cached_data, std::vector<std::string>{kVersion});
  EXPECT_THAT(state_.snapshot.current().nodes[1].cached_data, ElementsAre(kVersion));
}

TEST_F(StagingTest, DataAlreadyCachedStartsAtOnceAndAFailedStagingFailsTheAttempt) {
  Must(AgentRegistered{Agent("node-0", 4)});
  Must(AgentRegistered{Agent("node-1", 4)});
  Cache("node-0", protocol::DatasetState::kReady, 1000);
  Cache("node-1", protocol::DatasetState::kReady, 1000);
  const JobId hit = Submit(Staged());
  Pass();
  std::map<std::string, protocol::Command> starts;
  for (const std::string node : {"node-0", "node-1"}) {
    auto cmds = Take(node);
    EXPECT_EQ(Count(cmds, protocol::Command::Kind::kStage), 1u) << node;  // pins it there
    ASSERT_EQ(Count(cmds, protocol::Command::Kind::kStart), 1u) << node;
    for (const auto& c : cmds) {
      if (c.kind == protocol::Command::Kind::kStart) starts[node] = c;
    }
  }
  // It ends (cancelled), giving its GPUs back.
  Must(CancelJob{hit, "user:test"});
  for (const auto& [node, start] : starts) {
    Take(node);
    Beat(node, {Task(start, protocol::TaskState::kExited, 0, 15)});
  }
  ASSERT_FALSE(state_.jobs.contains(hit));

  JobSpec spec = Staged();
  spec.data[0].version = "sha256:" + std::string(64, 'e');
  const JobId id = Submit(spec);
  Pass();
  Take("node-0");
  Take("node-1");
  protocol::Heartbeat hb;
  hb.node = "node-1";
  hb.datasets.push_back({"imagenet", spec.data[0].version, protocol::DatasetState::kFailed, 0, 1000,
                         0, "dataset imagenet is 1000 B, more than node node-1's cache", 0});
  // Just after the stage command, a failure may be an earlier attempt's: not yet.
  Must(AgentHeartbeat{hb});
  ASSERT_TRUE(state_.jobs.contains(id));
  EXPECT_THAT(state_.jobs.at(id).job.reason, HasSubstr("staging data on 2 node(s)"));
  now_ += seconds(6);
  Effects fx = Must(AgentHeartbeat{hb});
  // Not started anywhere, so nothing to stop: the attempt ends at once, failed.
  EXPECT_FALSE(state_.jobs.contains(id));
  EXPECT_TRUE(Take("node-0").empty());
  std::string failed;
  for (const auto& op : fx.batch.ops()) {
    if (const auto* e = std::get_if<store::WriteBatch::AppendEventOp>(&op)) {
      if (e->event.kind == "Failed") failed = e->event.message;
    }
  }
  EXPECT_THAT(failed, HasSubstr("staging dataset imagenet sha256:eeee"));
  EXPECT_THAT(failed, HasSubstr("on node node-1 failed: dataset imagenet is 1000 B, more than"));
}

TEST_F(LifecycleTest, RefusalsChangeNothing) {
  JobSpec bad = Gang(1, 1);
  bad.priority = "urgent";
  SubmitJobs s;
  s.specs = {Gang(1, 1), bad};
  s.first_id = 1;
  Result<Effects> fx = Apply(state_, s, now_);
  ASSERT_FALSE(fx.ok());
  EXPECT_THAT(fx.status().message(), HasSubstr("no priority class \"urgent\""));
  EXPECT_TRUE(state_.jobs.empty());
  EXPECT_EQ(state_.snapshot.pending_count(), 0u);
  Result<Effects> cancel = Apply(state_, CancelJob{42, "user:test"}, now_);
  EXPECT_EQ(cancel.status().code(), StatusCode::kNotFound);
  const JobId id = Submit(Gang(1, 1));
  Result<Effects> profile = Apply(state_, SendProfile{id, 0, {0}, "p-1", 5}, now_);
  EXPECT_EQ(profile.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(state_.jobs.at(id).job.state, JobState::kPending);
}

TEST_F(LifecycleTest, PreemptedGangGetsItsNoticeAndIsRequeuedWithItsLostWork) {
  Must(AgentRegistered{Agent("node-0", 8)});
  const JobId low = Submit(Gang(1, 8));
  Pass();
  auto c = Take("node-0");
  Beat("node-0", {Task(c[0], protocol::TaskState::kRunning)});
  now_ += minutes(30);
  JobSpec urgent = Gang(1, 8);
  urgent.priority = "production";
  const JobId high = Submit(urgent);
  Effects pass = Pass();
  EXPECT_EQ(pass.stats.preemptions, 1);
  EXPECT_EQ(state_.jobs.at(low).job.state, JobState::kPreempting);
  auto notice = Take("node-0");
  ASSERT_EQ(notice.size(), 1u);
  EXPECT_EQ(notice[0].kind, protocol::Command::Kind::kPreempt);
  now_ += minutes(1);
  Effects exit = Beat("node-0", {Task(c[0], protocol::TaskState::kExited)});
  EXPECT_THAT(EventKinds(exit.batch), ElementsAre("Requeued"));
  const Job& j = state_.jobs.at(low).job;
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.attempts.back().exit_reason, ExitReason::kPreempted);
  EXPECT_EQ(j.attempts.back().lost_work, minutes(31));
  Effects next = Pass();
  EXPECT_EQ(next.stats.binds, 1);
  EXPECT_EQ(state_.jobs.at(high).job.state, JobState::kStarting);
}

TEST_F(LifecycleTest, OneTickGivesUpEverySilentNodeInOneBatch) {
  for (int n = 0; n < 3; ++n) Must(AgentRegistered{Agent("node-" + std::to_string(n), 4)});
  const JobId id = Submit(Gang(3, 4));
  Pass();
  for (int n = 0; n < 3; ++n) {
    const std::string node = "node-" + std::to_string(n);
    auto c = Take(node);
    Beat(node, {Task(c[0], protocol::TaskState::kRunning)});
  }
  ASSERT_EQ(state_.jobs.at(id).job.state, JobState::kRunning);
  now_ += seconds(16);
  Beat("node-0", {});
  Effects tick = Must(Tick{});
  // Two nodes went silent: one batch records both, and the job keeps running.
  EXPECT_EQ(PutNodes(tick.batch), 2u);
  EXPECT_THAT(tick.disconnected, ElementsAre("node-1", "node-2"));
  EXPECT_THAT(EventKinds(tick.batch), ElementsAre("NodeUnreachable", "NodeUnreachable"));
  EXPECT_EQ(state_.jobs.at(id).job.state, JobState::kRunning);
  EXPECT_EQ(state_.snapshot.current().nodes[1].state, NodeState::kNotReady);
  now_ += minutes(2);
  Beat("node-0", {});
  Effects lost = Must(Tick{});
  EXPECT_EQ(state_.jobs.at(id).job.state, JobState::kLost);
  auto stop = Take("node-0");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].kind, protocol::Command::Kind::kStop);
  protocol::TaskStatus t;
  t.task_id = stop[0].task_id;
  t.job_id = id;
  t.attempt = 0;
  t.rank = 0;
  t.state = protocol::TaskState::kExited;
  t.signal = 15;
  Effects requeued = Beat("node-0", {t});
  EXPECT_EQ(state_.jobs.at(id).job.state, JobState::kPending);
  EXPECT_EQ(state_.jobs.at(id).job.attempts.back().exit_reason, ExitReason::kNodeLost);
  EXPECT_THAT(EventKinds(requeued.batch), ElementsAre("Requeued"));
  (void)lost;
}

TEST_F(LifecycleTest, DecisionsMadeOnAStaleCopyAreDropped) {
  Must(AgentRegistered{Agent("node-0", 8)});
  const JobId id = Submit(Gang(1, 8));
  SnapshotCopy copy;
  state_.snapshot.SyncCopy(copy, now_);
  sched::Decisions d = sched::Schedule(copy.snapshot(), state_.options.policy);
  ASSERT_EQ(d.binds.size(), 1u);
  Must(HoldJob{id, true, "user:test"});  // after the pass saw it
  state_.dirty = false;
  Result<Effects> fx = ApplyDecisions(state_, d, &copy, now_);
  ASSERT_TRUE(fx.ok());
  EXPECT_EQ(fx->stats.binds, 0);
  EXPECT_TRUE(state_.dirty);
  EXPECT_EQ(state_.jobs.at(id).job.state, JobState::kPending);
  EXPECT_THAT(Take("node-0"), IsEmpty());
}

TEST_F(LifecycleTest, AStartNotYetDeliveredIsWithdrawnByACancel) {
  Must(AgentRegistered{Agent("node-0", 8)});
  const JobId id = Submit(Gang(1, 8));
  Pass();
  ASSERT_EQ(state_.nodes.at("node-0").outbox.size(), 1u);
  Effects cancel = Must(CancelJob{id, "user:test"});
  EXPECT_TRUE(state_.nodes.at("node-0").outbox.empty());
  EXPECT_THAT(EventKinds(cancel.batch), ElementsAre("CancelRequested", "Cancelled"));
  EXPECT_THAT(cancel.ended, ElementsAre(id));
}

}  // namespace
}  // namespace trainyard::lifecycle
