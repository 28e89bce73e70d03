#include "server/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/spec_codec.h"
#include "store/memory_store.h"

namespace trainyard::server {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

JobSpec Spec(const std::string& yaml) {
  SpecParseResult r = ParseSpec(yaml, "test.yaml");
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].ToString());
  return *r.spec;
}

Registration Node(const std::string& name, int gpus, const std::string& address) {
  Registration r;
  r.node.name = name;
  for (int i = 0; i < gpus; ++i) {
    r.node.gpus.push_back({i, "GPU-" + name + "-" + std::to_string(i), "H100", 80 * kGiB, name});
  }
  r.node.milli_cpus = 64'000;
  r.node.memory_bytes = 512 * kGiB;
  r.address = address;
  r.simulated = true;
  return r;
}

TaskStatus Task(const Command& start, const std::string& state, int exit_code = 0, int sig = 0) {
  TaskStatus t;
  t.task_id = start.start.task_id;
  t.job_id = start.start.job_id;
  t.attempt = start.start.attempt;
  t.rank = start.start.rank;
  t.state = protocol::ParseTaskState(state).value();
  t.exit_code = exit_code;
  t.signal = sig;
  return t;
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    cluster_.reset();
    auto c = Cluster::Open(&store_, &clock_, options_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c);
  }

  JobId Submit(const std::string& yaml) {
    auto ids = cluster_->Submit({Spec(yaml)}, "user:test");
    EXPECT_TRUE(ids.ok()) << ids.status().ToString();
    return ids.ok() ? ids->front() : 0;
  }

  void Pass() {
    auto s = cluster_->SchedulePass();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }

  std::vector<Command> Commands(const std::string& node) {
    auto c = cluster_->Poll(node, Duration(0));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : std::vector<Command>{};
  }

  std::vector<std::string> Beat(const std::string& node, std::vector<TaskStatus> tasks) {
    Heartbeat hb;
    hb.node = node;
    hb.tasks = std::move(tasks);
    auto ack = cluster_->HandleHeartbeat(hb);
    EXPECT_TRUE(ack.ok()) << ack.status().ToString();
    return ack.ok() ? *ack : std::vector<std::string>{};
  }

  JobState State(JobId id) {
    auto v = cluster_->GetJob(id);
    EXPECT_TRUE(v.ok());
    return v.ok() ? v->job.state : JobState::kCancelled;
  }

  Job Stored(JobId id) {
    auto j = store_.GetJob(id);
    EXPECT_TRUE(j.ok() && j->has_value());
    return **j;
  }

  // Two 4-GPU nodes with `yaml` (a gang of two 4-GPU replicas) bound and running on
  // them: the job and the start command each node got.
  struct TwoNodeGang {
    JobId id = 0;
    Command on0, on1;
  };
  TwoNodeGang RunGangOnTwoNodes(const std::string& yaml) {
    TwoNodeGang g;
    EXPECT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
    EXPECT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
    g.id = Submit(yaml);
    Pass();
    auto c0 = Commands("node-0");
    auto c1 = Commands("node-1");
    EXPECT_EQ(c0.size(), 1u);
    EXPECT_EQ(c1.size(), 1u);
    if (c0.empty() || c1.empty()) return g;
    g.on0 = c0[0];
    g.on1 = c1[0];
    Beat("node-0", {Task(g.on0, "running")});
    Beat("node-1", {Task(g.on1, "running")});
    EXPECT_EQ(State(g.id), JobState::kRunning);
    return g;
  }

  store::MemoryStore store_;
  FakeClock clock_;
  ClusterOptions options_;
  std::unique_ptr<Cluster> cluster_;
};

constexpr const char* kGang =
    "name: gang\nreplicas: 2\nresources: {gpus: 4, gpu_type: H100}\n"
    "command: [python3, train.py]\nargs: [--lr, '3e-4']\n";

TEST_F(ClusterTest, GangStartsWithTorchrunEnvAndSucceeds) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  JobId id = Submit(kGang);
  Pass();
  EXPECT_EQ(State(id), JobState::kStarting);
  auto c0 = Commands("node-0");
  auto c1 = Commands("node-1");
  ASSERT_THAT(c0, SizeIs(1));
  ASSERT_THAT(c1, SizeIs(1));
  // Rank 0 is on one of the nodes; MASTER_ADDR is that node's address on both.
  const Command& r0 = c0[0].start.rank == 0 ? c0[0] : c1[0];
  const Command& r1 = c0[0].start.rank == 0 ? c1[0] : c0[0];
  EXPECT_EQ(r0.kind, Command::Kind::kStart);
  EXPECT_THAT(r0.start.argv, ElementsAre("python3", "train.py", "--lr", "3e-4"));
  EXPECT_EQ(r0.start.env.at("WORLD_SIZE"), "2");
  EXPECT_EQ(r1.start.env.at("RANK"), "1");
  EXPECT_EQ(r1.start.env.at("GROUP_RANK"), "1");
  EXPECT_EQ(r1.start.env.at("LOCAL_RANK"), "0");
  EXPECT_EQ(r1.start.env.at("LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(r0.start.env.at("MASTER_ADDR"), r1.start.env.at("MASTER_ADDR"));
  EXPECT_EQ(r0.start.env.at("MASTER_PORT"), r1.start.env.at("MASTER_PORT"));
  EXPECT_EQ(r0.start.env.at("CUDA_VISIBLE_DEVICES"), "0,1,2,3");
  EXPECT_EQ(r0.start.env.at("TRAINYARD_RESUME_FROM"), "");
  EXPECT_EQ(r0.start.env.at("TRAINYARD_PREEMPT_SIGNAL"), "SIGUSR1");  // the SDK's notice
  EXPECT_EQ(r0.start.env.at("TRAINYARD_JOB_ID"), std::to_string(id));
  const std::string n0 = c0[0].start.rank == 0 ? "node-0" : "node-1";
  const std::string n1 = n0 == "node-0" ? "node-1" : "node-0";
  EXPECT_EQ(r0.start.env.at("MASTER_ADDR"), n0 == "node-0" ? "10.0.0.1" : "10.0.0.2");

  Beat(n0, {Task(r0, "running")});
  EXPECT_EQ(State(id), JobState::kStarting);
  Beat(n1, {Task(r1, "running")});
  EXPECT_EQ(State(id), JobState::kRunning);
  EXPECT_EQ(Stored(id).state, JobState::kRunning);

  // The exit of one rank is not acknowledged until the attempt's end is stored.
  EXPECT_THAT(Beat(n0, {Task(r0, "exited", 0)}), IsEmpty());
  EXPECT_THAT(Beat(n1, {Task(r1, "exited", 0)}), ElementsAre(r1.start.task_id));
  EXPECT_THAT(Beat(n0, {Task(r0, "exited", 0)}), ElementsAre(r0.start.task_id));
  Job done = Stored(id);
  EXPECT_EQ(done.state, JobState::kSucceeded);
  ASSERT_THAT(done.attempts, SizeIs(1));
  EXPECT_EQ(done.attempts[0].exit_reason, ExitReason::kSucceeded);
  EXPECT_THAT(done.attempts[0].gpus, ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(0, 1, 2, 3)));
}

TEST_F(ClusterTest, ProcsPerReplicaSplitsGpusAcrossRanks) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  Submit("name: ddp\nprocs_per_replica: 2\nresources: {gpus: 4}\ncommand: [train]\n");
  Pass();
  auto c = Commands("node-0");
  ASSERT_THAT(c, SizeIs(2));
  EXPECT_EQ(c[0].start.env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(c[1].start.env.at("CUDA_VISIBLE_DEVICES"), "2,3");
  EXPECT_EQ(c[1].start.env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(c[1].start.env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(c[1].start.env.at("WORLD_SIZE"), "2");
}

TEST_F(ClusterTest, RankFailureStopsTheGangAndRetriesAfterBackoff) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  JobId id = Submit(std::string(kGang) + "retry: {max: 1, backoff: 30s}\n");
  Pass();
  auto c0 = Commands("node-0");
  auto c1 = Commands("node-1");
  ASSERT_THAT(c0, SizeIs(1));
  ASSERT_THAT(c1, SizeIs(1));
  Beat("node-0", {Task(c0[0], "running")});
  Beat("node-1", {Task(c1[0], "running")});
  ASSERT_EQ(State(id), JobState::kRunning);

  Beat("node-1", {Task(c1[0], "exited", 3)});
  // The surviving rank is told to stop; the job still holds its GPUs meanwhile.
  auto stop = Commands("node-0");
  ASSERT_THAT(stop, SizeIs(1));
  EXPECT_EQ(stop[0].kind, Command::Kind::kStop);
  EXPECT_EQ(stop[0].task_id, c0[0].start.task_id);
  EXPECT_EQ(State(id), JobState::kRunning);
  Beat("node-0", {Task(c0[0], "exited", -1, 15)});
  Job j = Stored(id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.retries, 1);
  EXPECT_EQ(j.attempts[0].exit_reason, ExitReason::kFailed);
  EXPECT_THAT(j.attempts[0].message, ::testing::HasSubstr("exited with code 3"));

  Pass();  // still in backoff
  EXPECT_EQ(State(id), JobState::kPending);
  clock_.Advance(Duration(31'000));
  Pass();
  EXPECT_EQ(State(id), JobState::kStarting);
  auto again = Commands("node-0");
  ASSERT_THAT(again, SizeIs(1));
  EXPECT_EQ(again[0].start.attempt, 1);

  // Failing again exhausts the retries: Failed for good.
  auto other = Commands("node-1");
  ASSERT_THAT(other, SizeIs(1));
  Beat("node-0", {Task(again[0], "exited", 1)});
  Beat("node-1", {Task(other[0], "exited", 1)});
  EXPECT_EQ(Stored(id).state, JobState::kFailed);
}

TEST_F(ClusterTest, PreemptionSendsNoticeAndRequeuesWithLostWork) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId low = Submit(
      "name: low\npriority: best-effort\nresources: {gpus: 4}\ncommand: [train]\n"
      "checkpoint: {preempt_grace: 30s, notice_signal: SIGUSR2}\n");
  Pass();
  auto start = Commands("node-0");
  ASSERT_THAT(start, SizeIs(1));
  Beat("node-0", {Task(start[0], "running")});
  clock_.Advance(Duration(600'000));
  ASSERT_TRUE(
      cluster_->ReportCheckpoint(low, {"/ckpt/low/step-100", 100, Duration(1500)}, "t").ok());
  clock_.Advance(Duration(120'000));

  JobId high = Submit("name: high\npriority: production\nresources: {gpus: 4}\ncommand: [train]\n");
  Pass();
  EXPECT_EQ(State(low), JobState::kPreempting);
  auto notice = Commands("node-0");
  ASSERT_THAT(notice, SizeIs(1));
  EXPECT_EQ(notice[0].kind, Command::Kind::kPreempt);
  EXPECT_EQ(notice[0].signal, 12);
  EXPECT_EQ(notice[0].grace, Duration(30'000));
  // The preemptor waits until the victim has left.
  Pass();
  EXPECT_EQ(State(high), JobState::kPending);

  clock_.Advance(Duration(10'000));
  Beat("node-0", {Task(start[0], "exited", 0)});
  Job j = Stored(low);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.retries, 0);
  EXPECT_EQ(j.attempts[0].exit_reason, ExitReason::kPreempted);
  EXPECT_EQ(j.attempts[0].lost_work, Duration(130'000));  // since the checkpoint

  Pass();
  EXPECT_EQ(State(high), JobState::kStarting);
  auto hs = Commands("node-0");
  ASSERT_THAT(hs, SizeIs(1));
  Beat("node-0", {Task(hs[0], "running")});
  Beat("node-0", {Task(hs[0], "exited", 0)});
  Pass();
  auto resumed = Commands("node-0");
  ASSERT_THAT(resumed, SizeIs(1));
  EXPECT_EQ(resumed[0].start.job_id, low);
  EXPECT_EQ(resumed[0].start.env.at("TRAINYARD_RESUME_FROM"), "/ckpt/low/step-100");
}

TEST_F(ClusterTest, ProfileCommandsGoToTheAskedRanksOfARunningGang) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  JobId id = Submit(kGang);
  EXPECT_EQ(cluster_->SendProfile(id, 0, {0}, "p-1-1", 5).code(), StatusCode::kFailedPrecondition);
  Pass();
  auto c0 = Commands("node-0");
  auto c1 = Commands("node-1");
  ASSERT_THAT(c0, SizeIs(1));
  ASSERT_THAT(c1, SizeIs(1));
  Beat("node-0", {Task(c0[0], "running")});
  Status starting = cluster_->SendProfile(id, 0, {0, 1}, "p-1-1", 5);
  EXPECT_EQ(starting.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(starting.message(), HasSubstr("is Starting; only a Running job can be profiled"));
  Beat("node-1", {Task(c1[0], "running")});
  ASSERT_EQ(State(id), JobState::kRunning);

  EXPECT_EQ(cluster_->SendProfile(id, 1, {0}, "p-1-1", 5).code(), StatusCode::kFailedPrecondition);
  Status bad_rank = cluster_->SendProfile(id, 0, {0, 2}, "p-1-1", 5);
  EXPECT_EQ(bad_rank.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_rank.message(), HasSubstr("has ranks 0..1, got 2"));
  EXPECT_THAT(Commands("node-0"), IsEmpty()) << "a refused request sends nothing";

  const std::string n1 = c1[0].start.rank == 1 ? "node-1" : "node-0";
  ASSERT_TRUE(cluster_->SendProfile(id, 0, {1}, "p-1-2", 7).ok());
  auto sent = Commands(n1);
  ASSERT_THAT(sent, SizeIs(1));
  EXPECT_EQ(sent[0].kind, Command::Kind::kProfile);
  EXPECT_EQ(sent[0].task_id, TaskId(id, 0, 1));
  EXPECT_EQ(sent[0].profile_id, "p-1-2");
  EXPECT_EQ(sent[0].steps, 7);
  EXPECT_EQ(ToJson(sent[0]).dump(),
            R"({"kind":"profile","task_id":")" + TaskId(id, 0, 1) + R"(","id":"p-1-2","steps":7})");
  EXPECT_THAT(Commands(n1 == "node-1" ? "node-0" : "node-1"), IsEmpty());
}

std::vector<std::string> EventKinds(Cluster& c, JobId id) {
  std::vector<std::string> out;
  auto events = c.ListEvents(id, 0, 100);
  EXPECT_TRUE(events.ok()) << events.status().ToString();
  if (events.ok()) {
    for (const auto& e : events->events) out.push_back(e.kind);
  }
  return out;
}

// Long polls answered without a waiting thread: by commands (the oldest poll of a node
// takes them), by the end of their wait, by the loss of their node, by shutdown.
TEST_F(ClusterTest, PollAsyncIsAnsweredByCommandsItsWaitNodeLossAndShutdown) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, Result<std::vector<Command>>> got;
  auto poll = [&](const std::string& node, int64_t wait_ms, int slot) {
    cluster_->PollAsync(node, Duration(wait_ms), [&, slot](Result<std::vector<Command>> r) {
      std::lock_guard lk(mu);
      EXPECT_FALSE(got.contains(slot)) << "poll " << slot << " answered twice";
      got.emplace(slot, std::move(r));
      cv.notify_all();
    });
  };
  auto answered = [&](int slot) {
    std::lock_guard lk(mu);
    return got.contains(slot);
  };
  auto answer = [&](int slot) {
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(5), [&] { return got.contains(slot); }))
        << "poll " << slot << " not answered";
    return got.contains(slot) ? got.at(slot) : Result<std::vector<Command>>(Internal("none"));
  };

  poll("node-9", 60'000, 0);
  ASSERT_TRUE(answered(0)) << "an unknown node's poll is answered at once";
  EXPECT_EQ(got.at(0).status().code(), StatusCode::kNotFound);

  poll("node-0", 60'000, 1);
  poll("node-0", 60'000, 2);
  EXPECT_FALSE(answered(1));
  EXPECT_FALSE(answered(2));
  const JobId id = Submit(kGang);
  Pass();
  // The gang's start for node-0 goes to its oldest poll; the other waits on.
  auto first = answer(1);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_THAT(*first, SizeIs(1));
  EXPECT_EQ((*first)[0].start.job_id, id);
  EXPECT_FALSE(answered(2));
  // node-1's start waited for a poll: a poll finds it at once.
  poll("node-1", 60'000, 3);
  ASSERT_TRUE(answered(3));
  EXPECT_THAT(*got.at(3), SizeIs(1));
  // Nothing more for node-1: answered when its (real-time) wait is over, with nothing.
  poll("node-1", 50, 4);
  auto timed_out = answer(4);
  ASSERT_TRUE(timed_out.ok());
  EXPECT_THAT(*timed_out, IsEmpty());

  // node-1 falls silent past node_timeout: its waiting poll is told the node is gone.
  poll("node-1", 60'000, 5);
  clock_.Advance(options_.node_timeout + Duration(1'000));
  Beat("node-0", {Task((*first)[0], "running")});
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(answer(5).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(answered(2));

  // Shutdown answers every poll still waiting, and any after it at once.
  cluster_->Shutdown();
  auto at_shutdown = answer(2);
  ASSERT_TRUE(at_shutdown.ok());
  EXPECT_THAT(*at_shutdown, IsEmpty());
  poll("node-0", 60'000, 6);
  EXPECT_TRUE(answered(6));
}

TEST_F(ClusterTest, NodeTimeoutThenGraceTearsDownTheGangAndRequeuesIt) {
  const TwoNodeGang g = RunGangOnTwoNodes(kGang);
  const JobId id = g.id;
  const std::vector<Command> c0 = {g.on0}, c1 = {g.on1};

  clock_.Advance(Duration(10'000));
  Beat("node-0", {Task(c0[0], "running")});
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(State(id), JobState::kRunning);
  // node_timeout (15 s) without a heartbeat: node-1 is NotReady, but its gang keeps
  // running for node_lost_grace (2 min), and the job says so.
  clock_.Advance(Duration(6'000));
  ASSERT_TRUE(cluster_->Tick().ok());
  auto nodes = cluster_->ListNodes();
  EXPECT_EQ(nodes[1].node.state, NodeState::kNotReady);
  EXPECT_EQ(State(id), JobState::kRunning);
  EXPECT_THAT(EventKinds(*cluster_, id), Contains("NodeUnreachable"));
  EXPECT_THAT(Commands("node-0"), IsEmpty());
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(Duration(10'000));
    Beat("node-0", {Task(c0[0], "running")});
    ASSERT_TRUE(cluster_->Tick().ok());
    ASSERT_EQ(State(id), JobState::kRunning) << "after " << 16 + 10 * (i + 1) << " s";
  }
  // 136 s > 15 s + 2 min: given up.
  clock_.Advance(Duration(10'000));
  Beat("node-0", {Task(c0[0], "running")});
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(State(id), JobState::kLost);
  auto stop = Commands("node-0");
  ASSERT_THAT(stop, SizeIs(1));
  EXPECT_EQ(stop[0].kind, Command::Kind::kStop);
  Beat("node-0", {Task(c0[0], "exited", -1, 15)});
  Job j = Stored(id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.attempts[0].exit_reason, ExitReason::kNodeLost);
  EXPECT_EQ(j.retries, 0);
  // node-1 is NotReady and there is no other room for two replicas.
  Pass();
  EXPECT_EQ(State(id), JobState::kPending);
  // A heartbeat from the lost node asks it to register again.
  Heartbeat hb;
  hb.node = "node-1";
  EXPECT_EQ(cluster_->HandleHeartbeat(hb).status().code(), StatusCode::kNotFound);
  // When it does, its old rank is told to stop; the job is not touched.
  Registration back = Node("node-1", 4, "10.0.0.2");
  back.tasks = {Task(c1[0], "running")};
  auto reply = cluster_->Register(back);
  ASSERT_TRUE(reply.ok());
  EXPECT_THAT(reply->stop, ElementsAre(c1[0].start.task_id));
  EXPECT_EQ(Stored(id).attempts.size(), 1u);
}

TEST_F(ClusterTest, NodeBackWithinTheGraceKeepsItsJobRunning) {
  const TwoNodeGang g = RunGangOnTwoNodes(kGang);
  const JobId id = g.id;
  const std::vector<Command> c0 = {g.on0}, c1 = {g.on1};
  // A partition of node-1 for 100 s.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(Duration(10'000));
    Beat("node-0", {Task(c0[0], "running")});
    ASSERT_TRUE(cluster_->Tick().ok());
  }
  EXPECT_EQ(cluster_->ListNodes()[1].node.state, NodeState::kNotReady);
  EXPECT_EQ(State(id), JobState::kRunning);
  // Back: its agent registers again with the rank still running.
  Registration back = Node("node-1", 4, "10.0.0.2");
  back.tasks = {Task(c1[0], "running")};
  auto reply = cluster_->Register(back);
  ASSERT_TRUE(reply.ok());
  EXPECT_THAT(reply->stop, IsEmpty());
  EXPECT_EQ(reply->release_after, Duration(135'000));  // node_timeout + node_lost_grace
  EXPECT_EQ(cluster_->ListNodes()[1].node.state, NodeState::kReady);
  EXPECT_EQ(State(id), JobState::kRunning);
  EXPECT_THAT(EventKinds(*cluster_, id),
              ElementsAre("Submitted", "Bound", "Running", "NodeUnreachable", "NodeReachable"));
  // Long after, nothing is given up: the node is heard from again.
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(Duration(10'000));
    Beat("node-0", {Task(c0[0], "running")});
    Beat("node-1", {Task(c1[0], "running")});
    ASSERT_TRUE(cluster_->Tick().ok());
  }
  EXPECT_EQ(State(id), JobState::kRunning);
  EXPECT_THAT(Commands("node-0"), IsEmpty());
  EXPECT_EQ(Stored(id).attempts.size(), 1u);
}

TEST_F(ClusterTest, RankItsAgentFencedGivesTheGangUpAsLostWithoutARetry) {
  const TwoNodeGang g = RunGangOnTwoNodes(
      "name: gang\nreplicas: 2\nresources: {gpus: 4, gpu_type: H100}\n"
      "command: [x]\nretry: {max: 0}\n");
  const JobId id = g.id;
  const std::vector<Command> c0 = {g.on0}, c1 = {g.on1};
  // node-1's agent lost contact, stopped its rank itself, and registers again (this
  // server, say, was down meanwhile and never marked the node).
  TaskStatus fenced = Task(c1[0], "exited", -1, 15);
  fenced.fenced = true;
  fenced.message = "stopped by its agent: no contact with the server for 1m50s";
  Registration back = Node("node-1", 4, "10.0.0.2");
  back.tasks = {fenced};
  ASSERT_TRUE(cluster_->Register(back).ok());
  EXPECT_EQ(State(id), JobState::kLost);
  auto stop = Commands("node-0");
  ASSERT_THAT(stop, SizeIs(1));
  EXPECT_EQ(stop[0].kind, Command::Kind::kStop);
  Beat("node-0", {Task(c0[0], "exited", -1, 15)});
  Job j = Stored(id);
  EXPECT_EQ(j.state, JobState::kPending);  // a lost node's job, not a failed one
  EXPECT_EQ(j.retries, 0);
  EXPECT_EQ(j.attempts[0].exit_reason, ExitReason::kNodeLost);
  EXPECT_THAT(j.attempts[0].message, HasSubstr("no contact with the server"));
}

TEST_F(ClusterTest, ZeroNodeLostGraceGivesTheGangUpAtTheTimeout) {
  options_.node_lost_grace = Duration(0);
  Open();
  const TwoNodeGang g = RunGangOnTwoNodes(kGang);
  const JobId id = g.id;
  const std::vector<Command> c0 = {g.on0}, c1 = {g.on1};
  clock_.Advance(Duration(10'000));
  Beat("node-0", {Task(c0[0], "running")});
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(State(id), JobState::kRunning);
  clock_.Advance(Duration(6'000));
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(State(id), JobState::kLost);
  EXPECT_THAT(EventKinds(*cluster_, id), Not(Contains("NodeUnreachable")));
}

TEST_F(ClusterTest, RestartRebuildsPlacementsAndAdoptsRunningTasks) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  JobId id = Submit(kGang);
  JobId waiting = Submit("name: w\nresources: {gpus: 4}\ncommand: [x]\n");
  Pass();
  auto c0 = Commands("node-0");
  auto c1 = Commands("node-1");
  Beat("node-0", {Task(c0[0], "running")});
  Beat("node-1", {Task(c1[0], "running")});

  Open();  // a new server process on the same store
  sched::Snapshot snap = cluster_->BuildSnapshot();
  ASSERT_THAT(snap.running, SizeIs(1));
  EXPECT_EQ(snap.running[0].id, id);
  EXPECT_THAT(snap.running[0].replicas, SizeIs(2));
  // Nodes not yet back are not schedulable; nothing is bound twice.
  Pass();
  EXPECT_EQ(State(waiting), JobState::kPending);

  Registration r0 = Node("node-0", 4, "10.0.0.1");
  r0.tasks = {Task(c0[0], "running")};
  auto reply = cluster_->Register(r0);
  ASSERT_TRUE(reply.ok());
  EXPECT_THAT(reply->stop, IsEmpty());
  // An agent reporting a task the server does not know is told to stop it.
  Registration r1 = Node("node-1", 4, "10.0.0.2");
  TaskStatus stray = Task(c1[0], "running");
  stray.task_id = "999.0.0";
  stray.job_id = 999;
  r1.tasks = {Task(c1[0], "running"), stray};
  reply = cluster_->Register(r1);
  ASSERT_TRUE(reply.ok());
  EXPECT_THAT(reply->stop, ElementsAre("999.0.0"));
  EXPECT_EQ(State(id), JobState::kRunning);
  Pass();
  EXPECT_EQ(State(waiting), JobState::kPending);  // both nodes are full
}

TEST_F(ClusterTest, RestartLosesRanksTheAgentNoLongerHas) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: one\nresources: {gpus: 2}\ncommand: [x]\n");
  Pass();
  auto c0 = Commands("node-0");
  Beat("node-0", {Task(c0[0], "running")});
  Open();
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  Job j = Stored(id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.attempts[0].exit_reason, ExitReason::kNodeLost);
}

TEST_F(ClusterTest, NodeThatNeverReturnsAfterRestartTimesOut) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: one\nresources: {gpus: 2}\ncommand: [x]\n");
  Pass();
  auto c0 = Commands("node-0");
  Beat("node-0", {Task(c0[0], "running")});
  Open();
  clock_.Advance(Duration(16'000));
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(Stored(id).state, JobState::kRunning);  // the node's grace has begun
  clock_.Advance(Duration(120'000));
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(Stored(id).state, JobState::kPending);
}

TEST_F(ClusterTest, CancelStopsRanksThenCancels) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: one\nresources: {gpus: 2}\ncommand: [x]\n");
  JobId pending = Submit("name: two\nresources: {gpus: 8}\ncommand: [x]\n");
  Pass();
  auto c0 = Commands("node-0");
  Beat("node-0", {Task(c0[0], "running")});
  ASSERT_TRUE(cluster_->Cancel(id, "user:a").ok());
  auto stop = Commands("node-0");
  ASSERT_THAT(stop, SizeIs(1));
  EXPECT_EQ(stop[0].kind, Command::Kind::kStop);
  Beat("node-0", {Task(c0[0], "exited", -1, 15)});
  EXPECT_EQ(Stored(id).state, JobState::kCancelled);
  ASSERT_TRUE(cluster_->Cancel(pending, "user:a").ok());
  EXPECT_EQ(Stored(pending).state, JobState::kCancelled);
  EXPECT_EQ(cluster_->Cancel(pending, "user:a").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cluster_->Cancel(12345, "user:a").code(), StatusCode::kNotFound);
}

TEST_F(ClusterTest, HoldAndRelease) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: one\nresources: {gpus: 2}\ncommand: [x]\n");
  ASSERT_TRUE(cluster_->Hold(id, "user:a").ok());
  Pass();
  EXPECT_EQ(State(id), JobState::kPending);
  EXPECT_TRUE(Stored(id).held);
  ASSERT_TRUE(cluster_->Release(id, "user:a").ok());
  Pass();
  EXPECT_EQ(State(id), JobState::kStarting);
  EXPECT_EQ(cluster_->Hold(id, "user:a").code(), StatusCode::kFailedPrecondition);
}

TEST_F(ClusterTest, DrainPreemptsAndCordonKeepsWorkOff) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: one\nresources: {gpus: 2}\ncommand: [x]\n");
  Pass();
  auto c0 = Commands("node-0");
  Beat("node-0", {Task(c0[0], "running")});
  ASSERT_TRUE(cluster_->SetNodeAdminState("node-0", NodeState::kDraining, "user:a").ok());
  EXPECT_EQ(State(id), JobState::kPreempting);
  auto notice = Commands("node-0");
  ASSERT_THAT(notice, SizeIs(1));
  EXPECT_EQ(notice[0].kind, Command::Kind::kPreempt);
  Beat("node-0", {Task(c0[0], "exited", 0)});
  EXPECT_EQ(State(id), JobState::kPending);
  Pass();
  EXPECT_EQ(State(id), JobState::kPending);
  ASSERT_TRUE(cluster_->SetNodeAdminState("node-0", NodeState::kReady, "user:a").ok());
  Pass();
  EXPECT_EQ(State(id), JobState::kStarting);
}

TEST_F(ClusterTest, SubmitRejectsUnknownPriorityAndStoresNothing) {
  auto r = cluster_->Submit({Spec("name: x\npriority: urgent\ncommand: [x]\n")}, "user:a");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("urgent"));
  auto page = store_.ListJobs({}, 0, 10, store::JobOrder::kAscending);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(page->jobs, IsEmpty());
}

TEST_F(ClusterTest, SubmitCreatesTenantAndQueueOnFirstUse) {
  Submit("name: x\ntenant: nlp\nqueue: research\ncommand: [x]\n");
  auto queues = cluster_->ListQueues();
  bool found = false;
  for (const auto& q : queues) found |= q.queue.tenant == "nlp" && q.queue.name == "research";
  EXPECT_TRUE(found);
  auto stored = store_.ListQueues();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(*stored, SizeIs(2));
}

TEST_F(ClusterTest, ConcurrentSubmissionsAllGetDistinctIds) {
  std::vector<std::thread> threads;
  std::vector<std::vector<JobId>> ids(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto r = cluster_->Submit({Spec("name: x\ncommand: [x]\n")}, "user:a");
        ASSERT_TRUE(r.ok());
        ids[static_cast<size_t>(t)].push_back(r->front());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<JobId> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 400u);
  auto page = store_.ListJobs({}, 0, 1000, store::JobOrder::kAscending);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(page->jobs, SizeIs(400));
}

TEST_F(ClusterTest, PendingReasonComesFromTheScheduler) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: big\nresources: {gpus: 16}\ncommand: [x]\n");
  Pass();
  auto v = cluster_->GetJob(id);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->job.state, JobState::kPending);
  EXPECT_THAT(v->job.reason, ::testing::HasSubstr("16"));
}

TEST_F(ClusterTest, ListJobsMergesLiveAndFinishedJobsInIdOrder) {
  std::vector<JobId> ids;
  for (int i = 0; i < 7; ++i)
    ids.push_back(Submit("name: j" + std::to_string(i) + "\nresources: {gpus: 1}\ncommand: [x]\n"));
  // Finished jobs live only in the store; the others are read from memory.
  ASSERT_TRUE(cluster_->Cancel(ids[1], "user:test").ok());
  ASSERT_TRUE(cluster_->Cancel(ids[4], "user:test").ok());
  ASSERT_TRUE(cluster_->Hold(ids[5], "user:test").ok());

  std::vector<JobId> seen;
  ListJobsRequest req;
  req.limit = 2;
  int pages = 0;
  while (true) {
    auto page = cluster_->ListJobs(req);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ASSERT_LE(page->jobs.size(), 2u);
    for (const Job& j : page->jobs) seen.push_back(j.id);
    ++pages;
    if (!page->next_after_id) break;
    EXPECT_EQ(*page->next_after_id, page->jobs.back().id);
    req.after_id = *page->next_after_id;
  }
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(pages, 4);

  req = ListJobsRequest{};
  req.filter.states = {JobState::kCancelled};
  auto cancelled = cluster_->ListJobs(req);
  ASSERT_TRUE(cancelled.ok());
  ASSERT_THAT(cancelled->jobs, SizeIs(2));
  EXPECT_EQ(cancelled->jobs[0].id, ids[1]);
  EXPECT_EQ(cancelled->jobs[1].id, ids[4]);
  EXPECT_FALSE(cancelled->next_after_id);

  req.filter.states = {JobState::kPending};
  req.filter.name_prefix = "j5";
  auto held = cluster_->ListJobs(req);
  ASSERT_TRUE(held.ok());
  ASSERT_THAT(held->jobs, SizeIs(1));
  EXPECT_EQ(held->jobs[0].id, ids[5]);
  EXPECT_THAT(held->jobs[0].reason, ::testing::HasSubstr("held by user:test"));  // live
}

// sched::Schedule runs outside the mutex on a snapshot; what it decides is re-checked
// when applied. Whatever interleaving the threads produce, a GPU is never given to two
// jobs and a job held (or cancelled) while Pending is never started.
TEST_F(ClusterTest, PassesRacingSubmitsHoldsAndCancelsNeverDoubleAllocate) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 8, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 8, "10.0.0.2")).ok());
  std::atomic<bool> done{false};
  std::thread passes([&] {
    while (!done.load()) {
      auto s = cluster_->SchedulePass();
      EXPECT_TRUE(s.ok()) << s.status().ToString();
    }
  });
  std::vector<JobId> ids, held, cancelled;
  for (int i = 0; i < 300; ++i) {
    const JobId id = Submit("name: r\nresources: {gpus: 3}\ncommand: [x]\n");
    ids.push_back(id);
    if (i % 3 == 0 && cluster_->Hold(id, "user:test").ok()) held.push_back(id);
    if (i % 3 == 1 && State(id) == JobState::kPending && cluster_->Cancel(id, "user:test").ok()) {
      cancelled.push_back(id);
    }
    if (i % 5 == 4 && !cancelled.empty()) {
      // Free GPUs now and then: cancelling a started job withdraws its starts at once.
      (void)cluster_->Cancel(ids[static_cast<size_t>(i) - 2], "user:test");
    }
  }
  done = true;
  passes.join();
  ASSERT_TRUE(cluster_->SchedulePass().ok());
  std::set<std::pair<std::string, int>> taken;
  int started = 0;
  for (JobId id : ids) {
    auto v = cluster_->GetJob(id);
    ASSERT_TRUE(v.ok());
    for (const auto& p : v->placement) {
      for (int g : p.gpus) {
        EXPECT_TRUE(taken.insert({p.node, g}).second)
            << "GPU " << p.node << ":" << g << " given twice (job " << id << ")";
      }
    }
    started += v->placement.empty() ? 0 : 1;
  }
  EXPECT_LE(taken.size(), 16u);
  EXPECT_GT(started, 0);
  for (JobId id : held) {
    const JobState s = State(id);
    EXPECT_TRUE(s == JobState::kPending || s == JobState::kCancelled) << id;
  }
  for (JobId id : cancelled) EXPECT_EQ(State(id), JobState::kCancelled) << id;
}

TEST_F(ClusterTest, JobHeldSinceThePlanIsNotStarted) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: j\nresources: {gpus: 2}\ncommand: [x]\n");
  PassPlan plan = cluster_->PlanPass();
  ASSERT_TRUE(cluster_->Hold(id, "user:test").ok());
  auto stats = cluster_->ApplyPass(std::move(plan));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->binds, 0);
  EXPECT_EQ(State(id), JobState::kPending);
  EXPECT_THAT(Commands("node-0"), IsEmpty());
  ASSERT_TRUE(cluster_->Release(id, "user:test").ok());
  Pass();
  EXPECT_EQ(State(id), JobState::kStarting);
}

TEST_F(ClusterTest, JobCancelledSinceThePlanStaysCancelled) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: j\nresources: {gpus: 2}\ncommand: [x]\n");
  PassPlan plan = cluster_->PlanPass();
  ASSERT_TRUE(cluster_->Cancel(id, "user:test").ok());
  auto stats = cluster_->ApplyPass(std::move(plan));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->binds, 0);
  EXPECT_EQ(Stored(id).state, JobState::kCancelled);
  EXPECT_THAT(Commands("node-0"), IsEmpty());
}

TEST_F(ClusterTest, NodeCordonedOrShrunkSinceThePlanGetsNothing) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId a = Submit("name: a\nresources: {gpus: 4}\ncommand: [x]\n");
  PassPlan plan = cluster_->PlanPass();
  ASSERT_TRUE(cluster_->SetNodeAdminState("node-0", NodeState::kCordoned, "user:admin").ok());
  auto stats = cluster_->ApplyPass(std::move(plan));
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->binds, 0);
  EXPECT_EQ(State(a), JobState::kPending);

  ASSERT_TRUE(cluster_->SetNodeAdminState("node-0", NodeState::kReady, "user:admin").ok());
  plan = cluster_->PlanPass();
  // The agent comes back with two GPUs fewer: GPUs 2 and 3 no longer exist.
  ASSERT_TRUE(cluster_->Register(Node("node-0", 2, "10.0.0.1")).ok());
  stats = cluster_->ApplyPass(std::move(plan));
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->binds, 0);
  EXPECT_EQ(State(a), JobState::kPending);
  Pass();
  EXPECT_EQ(State(a), JobState::kPending);  // asks for 4 of 2
  EXPECT_THAT(cluster_->GetJob(a)->job.reason, ::testing::HasSubstr("current nodes"));
}

TEST_F(ClusterTest, PassWithNothingNewIsSkippedUntilSomethingChanges) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 2, "10.0.0.1")).ok());
  JobId big = Submit("name: big\nresources: {gpus: 4}\ncommand: [x]\n");
  Pass();
  EXPECT_EQ(State(big), JobState::kPending);
  clock_.Advance(Duration(5'000));
  auto idle = cluster_->SchedulePass();
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(idle->waiting + idle->infeasible, 0);  // skipped: nothing it reads changed
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  auto again = cluster_->SchedulePass();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->binds, 1);
  EXPECT_EQ(State(big), JobState::kStarting);
}

TEST_F(ClusterTest, DefaultCheckpointDirIsPerTenantAndTheSameOnEveryAttempt) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit(
      "name: ck\ntenant: nlp\nresources: {gpus: 4}\ncommand: [train]\n"
      "retry: {max: 1, backoff: 1s}\n");
  Pass();
  auto first = Commands("node-0");
  ASSERT_THAT(first, SizeIs(1));
  const std::string dir = "/tmp/trainyard/checkpoints/nlp/" + std::to_string(id);
  EXPECT_EQ(first[0].start.env.at("TRAINYARD_CHECKPOINT_DIR"), dir);
  Beat("node-0", {Task(first[0], "running")});
  ASSERT_TRUE(cluster_->ReportCheckpoint(id, {dir + "/step-10", 10, Duration(100)}, "t").ok());
  Beat("node-0", {Task(first[0], "exited", 1)});
  ASSERT_EQ(State(id), JobState::kPending);
  clock_.Advance(Duration(2'000));
  Pass();
  auto second = Commands("node-0");
  ASSERT_THAT(second, SizeIs(1));
  EXPECT_EQ(second[0].start.attempt, 1);
  EXPECT_EQ(second[0].start.env.at("TRAINYARD_CHECKPOINT_DIR"), dir);
  EXPECT_EQ(second[0].start.env.at("TRAINYARD_RESUME_FROM"), dir + "/step-10");
}

TEST_F(ClusterTest, SubmitRefusesPathsOutsideTheAllowedDirsAndStoresNothing) {
  options_.allowed_dirs = {"/data/", "/scratch"};
  options_.checkpoint_root = "/srv/ty/checkpoints";
  Open();
  auto outside = cluster_->Submit(
      {Spec("name: x\ncommand: [x]\nworking_dir: /data2/run\ncheckpoint: {dir: /etc/ck}\n")},
      "user:a");
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(outside.status().message(),
            "working_dir: must lie in one of the directories the admin allows (/data, "
            "/scratch), got \"/data2/run\"; checkpoint.dir: must lie in one of the directories "
            "the admin allows (/data, /scratch), got \"/etc/ck\"");
  auto relative =
      cluster_->Submit({Spec("name: x\ncommand: [x]\ncheckpoint: {dir: ck}\n")}, "user:a");
  ASSERT_FALSE(relative.ok());
  EXPECT_THAT(relative.status().message(),
              ::testing::HasSubstr("checkpoint.dir: is relative to the agent's working directory"));
  auto page = store_.ListJobs({}, 0, 10, store::JobOrder::kAscending);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(page->jobs, IsEmpty());

  Submit("name: ok\ncommand: [x]\nworking_dir: /data/run\ncheckpoint: {dir: ck}\n");
  Submit("name: own\ntenant: nlp\ncommand: [x]\ncheckpoint: {dir: /srv/ty/checkpoints/nlp/x}\n");
}

TEST_F(ClusterTest, NoJobMayNameAnotherTenantsCheckpoints) {
  options_.checkpoint_root = "/srv/ty/checkpoints";
  Open();
  auto theirs = cluster_->Submit(
      {Spec(
          "name: x\ntenant: vision\ncommand: [x]\ncheckpoint: {dir: /srv/ty/checkpoints/nlp/3}\n")},
      "user:a");
  ASSERT_FALSE(theirs.ok());
  EXPECT_EQ(theirs.status().message(),
            "checkpoint.dir: lies in the checkpoint root /srv/ty/checkpoints outside tenant "
            "vision's part of it; jobs of tenant vision may use only "
            "/srv/ty/checkpoints/vision/..., got \"/srv/ty/checkpoints/nlp/3\"");
  EXPECT_FALSE(cluster_
                   ->Submit({Spec("name: x\ntenant: vision\ncommand: [x]\n"
                                  "checkpoint: {dir: /srv/ty/checkpoints}\n")},
                            "user:a")
                   .ok());

  // Nor be pointed at them by a checkpoint it reports (the next TRAINYARD_RESUME_FROM).
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit("name: v\ntenant: vision\nresources: {gpus: 4}\ncommand: [train]\n");
  Pass();
  auto start = Commands("node-0");
  ASSERT_THAT(start, SizeIs(1));
  Beat("node-0", {Task(start[0], "running")});
  Status s =
      cluster_->ReportCheckpoint(id, {"/srv/ty/checkpoints/nlp/3/step-9", 9, Duration(1)}, "t");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("outside tenant vision's part"));
  EXPECT_FALSE(cluster_->GetJob(id)->job.checkpoint.has_value());
  EXPECT_TRUE(
      cluster_
          ->ReportCheckpoint(
              id, {"/srv/ty/checkpoints/vision/" + std::to_string(id) + "/step-9", 9, Duration(1)},
              "t")
          .ok());
}

TEST_F(ClusterTest, ArgvAndEnvReachTheAgentAsVectorsVerbatim) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  Submit(
      "name: meta\nresources: {gpus: 1}\ncommand: [python3, train.py]\n"
      "args: [\"$(touch /tmp/x); rm -rf\", \"a b\", \"`id`\"]\n"
      "env: {EVIL: \"$(reboot) && echo\"}\n");
  Pass();
  auto c = Commands("node-0");
  ASSERT_THAT(c, SizeIs(1));
  EXPECT_THAT(c[0].start.argv,
              ElementsAre("python3", "train.py", "$(touch /tmp/x); rm -rf", "a b", "`id`"));
  EXPECT_EQ(c[0].start.env.at("EVIL"), "$(reboot) && echo");
}

TEST_F(ClusterTest, SecretEnvValuesReachRanksButNeverEventsOrMessages) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  JobId id = Submit(
      "name: s\nresources: {gpus: 4}\ncommand: [train]\n"
      "env: {HF_TOKEN: hf_Sup3rS3cret, LR: '0.1'}\nsecret_env: [HF_TOKEN]\n");
  Pass();
  auto c = Commands("node-0");
  ASSERT_THAT(c, SizeIs(1));
  EXPECT_EQ(c[0].start.env.at("HF_TOKEN"), "hf_Sup3rS3cret");  // the rank gets it
  EXPECT_THAT(c[0].start.secret_env, ElementsAre("HF_TOKEN"));
  Beat("node-0", {Task(c[0], "running")});
  TaskStatus exited = Task(c[0], "exited", 1);
  exited.message = "auth failed for token hf_Sup3rS3cret";
  Beat("node-0", {exited});
  Job j = Stored(id);
  EXPECT_EQ(j.state, JobState::kFailed);
  EXPECT_EQ(j.spec.env.at("HF_TOKEN"), "hf_Sup3rS3cret");  // stored for the next attempt
  EXPECT_THAT(j.reason, ::testing::HasSubstr("auth failed for token <redacted>"));
  EXPECT_THAT(j.attempts[0].message, ::testing::Not(::testing::HasSubstr("Sup3r")));
  auto events = cluster_->ListEvents(id, 0, 100);
  ASSERT_TRUE(events.ok());
  ASSERT_FALSE(events->events.empty());
  for (const auto& e : events->events) {
    EXPECT_THAT(e.message, ::testing::Not(::testing::HasSubstr("Sup3r"))) << e.kind;
  }
}

// ---- health checks, faults, remediation ------------------------------------------------

HealthCheckResult Check(bool ok, const std::string& output, const std::string& trigger) {
  HealthCheckResult r;
  r.ok = ok;
  r.output = output;
  r.trigger = trigger;
  return r;
}

TEST_F(ClusterTest, FailingHealthCheckCordonsAndPassingOneUncordons) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  Heartbeat hb;
  hb.node = "node-0";
  hb.health_check = Check(false, "gpu 2: ECC page retirement pending\nmore", "periodic");
  ASSERT_TRUE(cluster_->HandleHeartbeat(hb).ok());
  auto n = cluster_->GetNode("node-0");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->node.state, NodeState::kCordoned);
  EXPECT_EQ(n->node.state_reason,
            "health check failed (periodic): gpu 2: ECC page retirement pending");
  ASSERT_TRUE(n->health_check.has_value());
  EXPECT_FALSE(n->health_check->ok);
  // Stored: a restarted server knows why the node is cordoned.
  auto stored = store_.LoadAll();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->nodes[0].state, NodeState::kCordoned);

  hb.health_check = Check(true, "all good", "periodic");
  ASSERT_TRUE(cluster_->HandleHeartbeat(hb).ok());
  EXPECT_EQ(cluster_->GetNode("node-0")->node.state, NodeState::kReady);
}

TEST_F(ClusterTest, PassingHealthCheckLeavesAnAdminsCordonAlone) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->SetNodeAdminState("node-0", NodeState::kCordoned, "user:ops").ok());
  Heartbeat hb;
  hb.node = "node-0";
  hb.health_check = Check(false, "bad", "join");
  ASSERT_TRUE(cluster_->HandleHeartbeat(hb).ok());
  EXPECT_EQ(cluster_->GetNode("node-0")->node.state_reason, "cordoned by user:ops");
  hb.health_check = Check(true, "", "periodic");
  ASSERT_TRUE(cluster_->HandleHeartbeat(hb).ok());
  EXPECT_EQ(cluster_->GetNode("node-0")->node.state, NodeState::kCordoned);
}

TEST_F(ClusterTest, HealthCheckAtRegistrationCordonsBeforeAnythingIsPlaced) {
  Registration r = Node("node-0", 4, "10.0.0.1");
  r.health_check = Check(false, "nvidia-smi: no devices", "join");
  ASSERT_TRUE(cluster_->Register(r).ok());
  JobId id = Submit("name: one\nresources: {gpus: 1}\ncommand: [x]\n");
  Pass();
  EXPECT_EQ(State(id), JobState::kPending);
  EXPECT_EQ(cluster_->GetNode("node-0")->node.state, NodeState::kCordoned);
}

TEST_F(ClusterTest, InjectedFaultsReachTheAgentAndLinkDownSlowsTheJobsOtherNodes) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  JobId id = Submit(kGang);
  Pass();
  Commands("node-0");
  Commands("node-1");
  auto f = cluster_->InjectFault("node-0", "link-down", -1, Duration(0), "user:ops");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->fault.id, "f-1");
  auto c0 = Commands("node-0");
  ASSERT_THAT(c0, SizeIs(1));
  EXPECT_EQ(c0[0].kind, Command::Kind::kFaults);
  ASSERT_THAT(c0[0].faults, SizeIs(1));
  EXPECT_EQ(c0[0].faults[0].kind, FaultKind::kLinkDown);
  auto c1 = Commands("node-1");
  ASSERT_THAT(c1, SizeIs(1));
  ASSERT_THAT(c1[0].faults, SizeIs(1));
  EXPECT_EQ(c1[0].faults[0].kind, FaultKind::kCommSlow);
  EXPECT_EQ(c1[0].faults[0].job_id, id);
  // Nothing changed: nothing is sent again.
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_THAT(Commands("node-0"), IsEmpty());
  // An agent that reports other faults than it was sent gets its set again.
  Heartbeat hb;
  hb.node = "node-0";
  ASSERT_TRUE(cluster_->HandleHeartbeat(hb).ok());
  EXPECT_THAT(Commands("node-0"), SizeIs(1));
  hb.faults = {"f-1"};
  ASSERT_TRUE(cluster_->HandleHeartbeat(hb).ok());
  EXPECT_THAT(Commands("node-0"), IsEmpty());

  auto cleared = cluster_->ClearFaults("node-0", "");
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(*cleared, 1);
  c0 = Commands("node-0");
  ASSERT_THAT(c0, SizeIs(1));
  EXPECT_THAT(c0[0].faults, IsEmpty());
  c1 = Commands("node-1");
  ASSERT_THAT(c1, SizeIs(1));
  EXPECT_THAT(c1[0].faults, IsEmpty());
}

TEST_F(ClusterTest, FaultsExpireAndBadFaultsAreRefusedByName) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  auto f = cluster_->InjectFault("node-0", "thermal", 2, std::chrono::seconds(30), "user:ops");
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(Commands("node-0"), SizeIs(1));
  clock_.Advance(std::chrono::seconds(31));
  Heartbeat hb;  // the agent holds f-1 still (its own clock may lag)
  hb.node = "node-0";
  hb.faults = {"f-1"};
  ASSERT_TRUE(cluster_->HandleHeartbeat(hb).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  auto c = Commands("node-0");
  ASSERT_THAT(c, SizeIs(1));
  EXPECT_THAT(c[0].faults, IsEmpty());
  EXPECT_THAT(cluster_->ListFaults(), IsEmpty());

  auto bad = cluster_->InjectFault("node-0", "meltdown", -1, Duration(0), "u");
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown fault kind \"meltdown\"; one of xid"));
  bad = cluster_->InjectFault("node-0", "xid", 4, Duration(0), "u");
  EXPECT_THAT(bad.status().message(), HasSubstr("node node-0 has 4 GPU(s) (indices 0..3), got 4"));
  bad = cluster_->InjectFault("node-9", "xid", 0, Duration(0), "u");
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cluster_->ClearFaults("node-0", "f-77").status().code(), StatusCode::kNotFound);
}

TEST_F(ClusterTest, RequeueExcludingPreemptsAndKeepsTheJobOffTheNode) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  JobId id = Submit("name: one\nresources: {gpus: 4}\ncommand: [x]\n");
  Pass();
  auto v = cluster_->GetJob(id);
  ASSERT_TRUE(v.ok());
  const std::string node = v->ranks[0].node;
  auto start = Commands(node);
  ASSERT_THAT(start, SizeIs(1));
  Beat(node, {Task(start[0], "running")});
  EXPECT_EQ(State(id), JobState::kRunning);
  ASSERT_TRUE(
      cluster_->RequeueExcluding(id, node, "alert RankStraggler", "alert:RankStraggler").ok());
  EXPECT_EQ(State(id), JobState::kPreempting);
  EXPECT_THAT(Stored(id).excluded_nodes, ElementsAre(node));
  auto notice = Commands(node);
  ASSERT_THAT(notice, SizeIs(1));
  EXPECT_EQ(notice[0].kind, Command::Kind::kPreempt);
  Beat(node, {Task(start[0], "exited", 75)});
  EXPECT_EQ(State(id), JobState::kPending);
  Pass();
  v = cluster_->GetJob(id);
  ASSERT_TRUE(v.ok());
  ASSERT_THAT(v->ranks, SizeIs(1));
  EXPECT_NE(v->ranks[0].node, node);
  // Only a Running job.
  EXPECT_EQ(cluster_->RequeueExcluding(id, node, "x", "y").code(), StatusCode::kFailedPrecondition);
}

TEST_F(ClusterTest, RequestCheckpointSendsEveryRankTheCommand) {
  ASSERT_TRUE(cluster_->Register(Node("node-0", 4, "10.0.0.1")).ok());
  ASSERT_TRUE(cluster_->Register(Node("node-1", 4, "10.0.0.2")).ok());
  JobId id = Submit(kGang);
  EXPECT_EQ(cluster_->RequestCheckpoint(id, "why", "alert:X").code(),
            StatusCode::kFailedPrecondition);
  Pass();
  auto s0 = Commands("node-0");
  auto s1 = Commands("node-1");
  Beat("node-0", {Task(s0[0], "running")});
  Beat("node-1", {Task(s1[0], "running")});
  ASSERT_TRUE(cluster_->RequestCheckpoint(id, "alert CheckpointOverdue", "alert:X").ok());
  auto c0 = Commands("node-0");
  ASSERT_THAT(c0, SizeIs(1));
  EXPECT_EQ(c0[0].kind, Command::Kind::kCheckpoint);
  EXPECT_EQ(c0[0].task_id, s0[0].start.task_id);
  EXPECT_THAT(Commands("node-1"), SizeIs(1));
}

}  // namespace
}  // namespace trainyard::server
