// The server and the trace simulator drive one job lifecycle: the same history gives
// the same scheduling decisions in both, pass by pass. A trace is simulated (with
// least-attained-service scheduling, whose priorities move with time and with every
// attempt, and with the default policy); everything its world did (arrivals, gangs
// running, exits, checkpoints) is then played to a server Cluster as its agents and
// users would, at the same times, with a pass wherever the simulator ran one, and
// every pass's decisions are compared.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <variant>

#include "core/job_spec.h"
#include "sched/schedule.h"
#include "server/cluster.h"
#include "sim/sim.h"
#include "store/memory_store.h"

namespace trainyard::server {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

// The simulator's virtual time starts at the epoch; the server's clock follows it.
const Timestamp kT0 = Timestamp(Duration(0));

Node MakeNode(const std::string& name, int gpus) {
  Node n;
  n.name = name;
  for (int i = 0; i < gpus; ++i) {
    n.gpus.push_back({i, "GPU-" + name + "-" + std::to_string(i), "H100", 80LL << 30,
                      name + "-nvl" + std::to_string(i / 4)});
  }
  n.milli_cpus = 64'000;
  n.memory_bytes = 512LL << 30;
  n.topology = {"spine-0", "leaf-0"};
  return n;
}

// Jobs of 1 to 16 GPUs (2-node gangs above 8), minutes to hours long, arriving over
// three hours: enough contention for LAS to preempt and requeue.
sim::Trace MakeTrace() {
  sim::Trace t;
  const struct {
    int minute;
    int replicas, gpus;
    int run_minutes;
  } jobs[] = {{0, 1, 8, 300},  {1, 1, 4, 20},   {3, 2, 8, 240},  {10, 1, 2, 15}, {12, 1, 8, 90},
              {25, 1, 1, 400}, {31, 1, 4, 35},  {40, 2, 4, 120}, {55, 1, 8, 10}, {70, 1, 2, 180},
              {95, 1, 8, 60},  {110, 1, 4, 25}, {130, 2, 8, 45}, {150, 1, 1, 5}, {170, 1, 6, 75}};
  int n = 0;
  for (const auto& j : jobs) {
    sim::TraceJob tj;
    tj.id = "job-" + std::to_string(++n);
    tj.submit = minutes(j.minute);
    tj.replicas = j.replicas;
    tj.gpus_per_replica = j.gpus;
    tj.duration = minutes(j.run_minutes);
    tj.checkpoint_interval = minutes(20);
    t.jobs.push_back(tj);
  }
  return t;
}

// The decisions as text, for a readable failure.
std::string Describe(const sched::Decisions& d) {
  std::string out;
  auto placement = [](const std::vector<sched::Placement>& ps) {
    std::string s;
    for (const auto& p : ps) {
      s += " " + p.node + ":";
      for (int g : p.gpus) s += std::to_string(g) + ",";
    }
    return s;
  };
  for (const auto& b : d.binds)
    out += "bind " + std::to_string(b.job) + placement(b.replicas) + "\n";
  for (const auto& p : d.preemptions) {
    out += "preempt " + std::to_string(p.job) + " for " + std::to_string(p.for_job) + " (" +
           p.reason + ")\n";
  }
  for (const auto& r : d.reservations) {
    out += "reserve " + std::to_string(r.job) + placement(r.replicas) + "\n";
  }
  for (const auto& w : d.waiting)
    out += "wait " + std::to_string(w.job) + ": " + w.reason.str() + "\n";
  for (const auto& i : d.infeasible)
    out += "infeasible " + std::to_string(i.job) + ": " + i.reason + "\n";
  return out;
}

// What the simulator did, in the order it did it.
struct PassRecord {
  sched::Snapshot snapshot;
  sched::Decisions decisions;
};
using Step = std::variant<sim::WorldEvent, PassRecord>;

class LifecycleEquivalenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cluster_spec_.nodes = {MakeNode("node-0", 8), MakeNode("node-1", 8)};
    // The queue a server starts with, so that both apply the same quota rules.
    cluster_spec_.queues = {Queue{kDefaultQueue, kDefaultTenant, "", 0, kMaxQueueGpus, 1.0}};
    trace_ = MakeTrace();
  }

  std::vector<Step> Simulate() {
    std::vector<Step> steps;
    sim::SimOptions o;
    o.policy = GetParam();
    o.schedule_interval = seconds(10);
    o.restart_overhead = seconds(60);
    o.preempt_grace = seconds(60);
    o.on_pass = [&](const sched::Snapshot& s, const sched::Decisions& d) {
      steps.push_back(PassRecord{s, d});
    };
    o.on_world_event = [&](const sim::WorldEvent& e) { steps.push_back(e); };
    Result<sim::SimResult> r = sim::Simulate(trace_, cluster_spec_, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return steps;
  }

  JobSpec SpecOf(const sim::TraceJob& t) {
    JobSpec s;
    s.name = t.id;
    s.tenant = kDefaultTenant;
    s.queue = kDefaultQueue;
    s.priority = "normal";
    s.replicas = t.replicas;
    s.min_replicas = t.replicas;
    s.resources.gpus = t.gpus_per_replica;
    s.command = {"python3", "train.py"};
    NormalizeSpec(s);
    return s;
  }

  store::MemoryStore store_;
  FakeClock clock_{kT0};
  sim::ClusterSpec cluster_spec_;
  sim::Trace trace_;
};

TEST_P(LifecycleEquivalenceTest, TheServerDecidesAsTheSimulatorDidPassByPass) {
  const std::vector<Step> steps = Simulate();
  ClusterOptions options;
  Result<sched::Policy> policy = sim::PolicyFor(GetParam());
  ASSERT_TRUE(policy.ok());
  options.policy = *policy;
  options.node_timeout = hours(1000);  // agents never time out here
  std::vector<std::pair<sched::Snapshot, sched::Decisions>> server_passes;
  options.on_pass = [&](const sched::Snapshot& s, const sched::Decisions& d) {
    server_passes.push_back({s, d});
  };
  Result<std::unique_ptr<Cluster>> opened = Cluster::Open(&store_, &clock_, options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Cluster& cluster = **opened;
  for (const Node& n : cluster_spec_.nodes) {
    Registration r;
    r.node = n;
    r.address = "10.0.0.1";
    ASSERT_TRUE(cluster.Register(r).ok());
  }
  // The start commands of each job's open attempt, as its agents got them.
  std::map<JobId, std::vector<std::pair<std::string, TaskStart>>> starts;
  auto collect_starts = [&] {
    for (const Node& n : cluster_spec_.nodes) {
      Result<std::vector<Command>> got = cluster.Poll(n.name, Duration(0));
      ASSERT_TRUE(got.ok());
      for (const Command& c : *got) {
        if (c.kind == Command::Kind::kStart) starts[c.start.job_id].push_back({n.name, c.start});
      }
    }
  };
  auto report = [&](JobId job, TaskState state, int32_t code) {
    ASSERT_TRUE(starts.contains(job)) << "job " << job << " has no start commands";
    for (const auto& [node, start] : starts[job]) {
      Heartbeat hb;
      hb.node = node;
      TaskStatus t;
      t.task_id = start.task_id;
      t.job_id = start.job_id;
      t.attempt = start.attempt;
      t.rank = start.rank;
      t.state = state;
      if (code < 0)
        t.signal = -code;
      else
        t.exit_code = code;
      hb.tasks.push_back(t);
      ASSERT_TRUE(cluster.HandleHeartbeat(hb).ok());
    }
    if (state == TaskState::kExited) starts.erase(job);
  };
  int passes = 0, preemptions = 0;
  for (const Step& step : steps) {
    if (const auto* e = std::get_if<sim::WorldEvent>(&step)) {
      clock_.Set(kT0 + e->at);
      switch (e->kind) {
        case sim::WorldEvent::Kind::kArrive: {
          Result<std::vector<JobId>> ids =
              cluster.Submit({SpecOf(trace_.jobs[static_cast<size_t>(e->job - 1)])}, "user:test");
          ASSERT_TRUE(ids.ok()) << ids.status().ToString();
          ASSERT_EQ(ids->front(), e->job);
          break;
        }
        case sim::WorldEvent::Kind::kRunning:
          report(e->job, TaskState::kRunning, 0);
          break;
        case sim::WorldEvent::Kind::kExit:
          report(e->job, TaskState::kExited, e->code);
          break;
        case sim::WorldEvent::Kind::kCheckpoint:
          // As of when it completed (the simulator tells when a pass needs it).
          ASSERT_TRUE(
              cluster.ReportCheckpoint(e->job, {"checkpoint", 1, Duration(0)}, "agent").ok());
          break;
        case sim::WorldEvent::Kind::kNodeDown:
        case sim::WorldEvent::Kind::kNodeUp:
          FAIL() << "no node fails in this test";
      }
      continue;
    }
    const PassRecord& pass = std::get<PassRecord>(step);
    clock_.Set(pass.snapshot.now);
    const size_t before = server_passes.size();
    Result<PassStats> stats = cluster.SchedulePass();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    ASSERT_EQ(server_passes.size(), before + 1)
        << "the server skipped the pass at " << FormatDuration(pass.snapshot.now - kT0);
    const auto& [snap, decisions] = server_passes.back();
    ++passes;
    preemptions += static_cast<int>(decisions.preemptions.size());
    // The same jobs in the same places with the same priorities...
    auto by_id = [](auto v) {
      std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
      return v;
    };
    ASSERT_EQ(by_id(snap.pending), by_id(pass.snapshot.pending))
        << "pass " << passes << " at " << FormatDuration(pass.snapshot.now - kT0);
    ASSERT_EQ(by_id(snap.running), by_id(pass.snapshot.running))
        << "pass " << passes << " at " << FormatDuration(pass.snapshot.now - kT0);
    ASSERT_EQ(snap.nodes, pass.snapshot.nodes);
    ASSERT_EQ(snap.now, pass.snapshot.now);
    ASSERT_EQ(snap.queues, pass.snapshot.queues);
    ASSERT_EQ(Describe(sched::Schedule(pass.snapshot, options.policy)), Describe(pass.decisions))
        << "the simulator's pass " << passes << " decided otherwise on a fresh index";
    // ... and so every decision.
    ASSERT_EQ(Describe(decisions), Describe(pass.decisions))
        << "pass " << passes << " at " << FormatDuration(pass.snapshot.now - kT0);
    collect_starts();
  }
  EXPECT_GT(passes, 20);
  if (GetParam() == "trainyard-las") {
    EXPECT_GT(preemptions, 0) << "the trace should make LAS preempt";
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, LifecycleEquivalenceTest,
                         ::testing::Values("trainyard-las", "trainyard"), [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace trainyard::server
