#include "agent/agent.h"

#include "agent/agent_fixture.h"

namespace trainyard::agent {
namespace {

// Several servers: a standby names the leader and the agent goes there; when the leader
// stops answering, the agent moves on to the next server and registers with it.
TEST_F(AgentTest, FollowsTheLeaderAcrossSeveralServers) {
  FakeServer standby;
  standby.Start();
  standby.BeStandby(server_.url() + "/");
  AgentOptions o = Options();
  o.server_url = standby.url() + "," + server_.url();
  StartAgent(std::move(o));
  ASSERT_TRUE(WaitUntil([&] { return !server_.registers().empty(); }));
  EXPECT_TRUE(standby.registers().empty());
  standby.BeStandby("");  // the standby leads from now on
  server_.Stop();
  ASSERT_TRUE(WaitUntil([&] { return !standby.registers().empty(); }));
  EXPECT_EQ(standby.registers()[0]["node"]["name"], "node-1");
  StopAgent();
  standby.Stop();
}

// The leader died; a standby (still naming it, until its lease runs out) answers 503.
// The agent keeps trying every second rather than backing off to --max-backoff, so
// the new leader hears from it within about a second of taking over.
TEST_F(AgentTest, RetriesEverySecondWhileAStandbyAnswers) {
  server_.Stop();  // the dead leader
  FakeServer standby;
  standby.Start();
  standby.BeStandby(server_.url());
  AgentOptions o = Options();
  o.server_url = server_.url() + "," + standby.url();
  o.max_backoff = std::chrono::seconds(5);
  StartAgent(std::move(o));
  // Long enough for an unbounded backoff to reach its 5 s cap (0.1 s doubling).
  std::this_thread::sleep_for(std::chrono::seconds(7));
  EXPECT_TRUE(standby.registers().empty());
  standby.BeStandby("");  // it takes over
  const auto led = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitUntil([&] { return !standby.registers().empty(); }));
  const auto after = std::chrono::steady_clock::now() - led;
  EXPECT_LT(after, std::chrono::milliseconds(3'000))
      << "registered " << std::chrono::duration_cast<milliseconds>(after).count()
      << " ms after the standby took over";
  StopAgent();
  standby.Stop();
}

TEST_F(AgentTest, RegistersRunsATaskReportsItsExitAndShipsItsOutput) {
  StartAgent(Options());
  ASSERT_TRUE(WaitUntil([&] { return !server_.registers().empty(); }));
  json reg = server_.registers()[0];
  EXPECT_EQ(reg["node"]["name"], "node-1");
  EXPECT_EQ(reg["node"]["gpu_type"], "H100");
  EXPECT_EQ(reg["node"]["gpus"].size(), 2u);
  EXPECT_EQ(reg["node"]["gpus"][1]["memory_mib"], 81559);
  EXPECT_EQ(reg["node"]["nvlink_domain"], "node-1");
  EXPECT_EQ(reg["node"]["labels"]["zone"], "a");
  EXPECT_EQ(reg["node"]["simulated"], true);
  EXPECT_TRUE(reg["tasks"].empty());

  // Sent twice: a repeated start is ignored.
  server_.Push(StartCommand("5.1.0"));
  server_.Push(StartCommand("5.1.0"));
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  EXPECT_GT(server_.task("5.1.0")["pid"].get<int>(), 0);
  // The simulated GPU the task holds shows the load.
  ASSERT_TRUE(WaitUntil([&] {
    auto hb = server_.heartbeats();
    return !hb.empty() && hb.back()["gpus"][1]["util_pct"].get<double>() >= 90.0;
  }));
  EXPECT_EQ(server_.heartbeats().back()["gpus"][0]["util_pct"].get<double>(), 0.0);

  Go();
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "exited"; }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 7);
  EXPECT_EQ(server_.task("5.1.0")["signal"], 0);
  EXPECT_GT(server_.task("5.1.0")["finished_ms"].get<int64_t>(), 0);
  EXPECT_EQ(server_.states("5.1.0"), (std::vector<std::string>{"running", "exited"}));
  // Acknowledged, shipped, forgotten.
  ASSERT_TRUE(WaitUntil([&] { return agent_->Tasks().empty(); }));
  EXPECT_TRUE(WaitUntil([&] { return server_.log("5.1.0") == "hello\ngpus=1\n"; }))
      << server_.log("5.1.0");
  ASSERT_TRUE(WaitUntil([&] { return server_.metrics("5.1.0").size() == 2; }));
  EXPECT_EQ(server_.metrics("5.1.0")[1]["step"], 2);
  EXPECT_TRUE(WaitUntil([&] { return agent_->invalid_metrics_lines() == 1; }));
  EXPECT_TRUE(fs::exists(dir_ / "data" / "logs" / "5" / "1" / "rank-0.log"));

  // Heartbeat sequence numbers go up by one.
  auto hb = server_.heartbeats();
  for (size_t i = 1; i < hb.size(); ++i) EXPECT_EQ(hb[i]["seq"], hb[i - 1]["seq"].get<int>() + 1);
  StopAgent();
  EXPECT_TRUE(result_.ok()) << result_.ToString();
}

// A replica's group on this host's cgroups: its ranks share it, the limits are the
// kernel's, an out-of-memory kill is reported as such, and the group goes with its last
// rank. CI runs as root on a host with cgroups; less fails here, saying what is missing.
TEST_F(AgentTest, LimitsEachReplicaReportsAnOomKillAndRemovesTheGroup) {
  ASSERT_EQ(geteuid(), 0u) << "this test makes cgroups: run it as root (CI does)";
  Cgroups cg = Cgroups::Detect(CgroupHost::FromProc());
  ASSERT_TRUE(cg.available()) << "no usable cgroups on this host: " << cg.problem();
  AgentOptions o = Options();
  o.cgroups = cg;
  o.task_pids_max = 99;
  // A group an earlier agent of this node left (its pid is gone) is removed at start.
  const std::string stale = "j1.1.r0.node-1.999999999";
  ASSERT_TRUE(cg.Create(stale, GroupLimits{}).ok());
  StartAgent(o);
  ASSERT_TRUE(WaitUntil([&] { return !server_.registers().empty(); }));
  EXPECT_EQ(server_.registers()[0]["limits"], cg.Describe());
  for (const std::string& base : cg.bases()) EXPECT_FALSE(fs::exists(fs::path(base) / stale));

  const std::string group = "j5.1.r0";
  // The group's directory: the node and the agent's pid make it this agent's alone.
  const std::string dir_name = group + ".node-1." + std::to_string(getpid());
  auto limited = [&](json start) {
    start["task"]["group"] = group;
    start["task"]["milli_cpus"] = 1500;
    start["task"]["memory_bytes"] = int64_t{48} << 20;
    return start;
  };
  server_.Push(limited(StartCommand("5.1.0", 0)));
  server_.Push(limited(StartCommand("5.1.1", 0)));
  ASSERT_TRUE(WaitUntil([&] {
    return server_.task("5.1.0").value("state", "") == "running" &&
           server_.task("5.1.1").value("state", "") == "running";
  }));
  for (const std::string& base : cg.bases()) {
    const fs::path dir = fs::path(base) / dir_name;
    ASSERT_TRUE(fs::exists(dir)) << dir;
    // Both ranks are in the one group.
    std::istringstream procs(ReadFile(dir / "cgroup.procs"));
    std::set<int64_t> pids;
    for (int64_t p; procs >> p;) pids.insert(p);
    EXPECT_TRUE(pids.count(server_.task("5.1.0")["pid"].get<int64_t>())) << dir;
    EXPECT_TRUE(pids.count(server_.task("5.1.1")["pid"].get<int64_t>())) << dir;
    if (fs::exists(dir / "cpu.cfs_quota_us"))
      EXPECT_EQ(ReadFile(dir / "cpu.cfs_quota_us"), "150000\n");
    if (fs::exists(dir / "cpu.max")) EXPECT_EQ(ReadFile(dir / "cpu.max"), "150000 100000\n");
    if (fs::exists(dir / "memory.limit_in_bytes")) {
      EXPECT_EQ(ReadFile(dir / "memory.limit_in_bytes"), std::to_string(int64_t{48} << 20) + "\n");
    }
    if (fs::exists(dir / "memory.max")) {
      EXPECT_EQ(ReadFile(dir / "memory.max"), std::to_string(int64_t{48} << 20) + "\n");
    }
    if (fs::exists(dir / "pids.max")) EXPECT_EQ(ReadFile(dir / "pids.max"), "99\n");
  }
  Go();
  ASSERT_TRUE(WaitUntil([&] {
    return server_.task("5.1.0").value("state", "") == "exited" &&
           server_.task("5.1.1").value("state", "") == "exited";
  }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 0);
  EXPECT_EQ(server_.task("5.1.0").value("message", ""), "");
  for (const std::string& base : cg.bases()) {
    EXPECT_TRUE(WaitUntil([&] { return !fs::exists(fs::path(base) / dir_name); })) << base;
  }

  // A rank that outgrows the replica's memory.
  json oom = limited(StartCommand("6.1.0"));
  oom["task"]["job_id"] = 6;
  oom["task"]["argv"] = {"/bin/sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\000' a)"};
  server_.Push(oom);
  ASSERT_TRUE(WaitUntil([&] { return server_.task("6.1.0").value("state", "") == "exited"; },
                        std::chrono::seconds(30)));
  EXPECT_EQ(server_.task("6.1.0")["signal"], SIGKILL) << server_.task("6.1.0").dump();
  EXPECT_EQ(server_.task("6.1.0")["message"], "OOMKilled: memory limit 48Mi");
  for (const std::string& base : cg.bases()) {
    EXPECT_TRUE(WaitUntil([&] { return !fs::exists(fs::path(base) / dir_name); })) << base;
  }
}

// Ranks run as their tenant's identity: their files are theirs, their checkpoint dir
// is theirs alone, and another tenant's rank is refused by the kernel when it reads it.
TEST_F(AgentTest, RunsRanksAsTheirTenantsIdentityAndKeepsOtherTenantsOut) {
  ASSERT_EQ(geteuid(), 0u) << "changing identity needs root: run this test as root (CI does)";
  fs::permissions(dir_, fs::perms::all);  // the tasks' workdir: anyone may enter and write
  StartAgent(Options());
  ASSERT_TRUE(WaitUntil([&] { return !server_.registers().empty(); }));
  EXPECT_EQ(server_.registers()[0]["limits"], "none: not in this test");
  const std::string ckpt = (dir_ / "checkpoints" / "vision" / "7").string();
  json a = StartCommand("7.1.0", 0);
  a["task"]["job_id"] = 7;
  a["task"]["uid"] = 2001;
  a["task"]["gid"] = 2001;
  a["task"]["env"]["TRAINYARD_CHECKPOINT_DIR"] = ckpt;
  a["task"]["argv"] = {"/bin/sh", "-c",
                       "id -u; echo weights > \"$TRAINYARD_CHECKPOINT_DIR/model.pt\" && "
                       "echo '{\"step\":1}' >> \"$TRAINYARD_METRICS_FILE\""};
  server_.Push(a);
  ASSERT_TRUE(WaitUntil([&] { return server_.task("7.1.0").value("state", "") == "exited"; }));
  EXPECT_EQ(server_.task("7.1.0")["exit_code"], 0) << server_.task("7.1.0").dump();
  EXPECT_TRUE(WaitUntil([&] { return server_.log("7.1.0") == "2001\n"; })) << server_.log("7.1.0");
  EXPECT_TRUE(WaitUntil([&] { return server_.metrics("7.1.0").size() == 1; }));
  struct stat st {};
  ASSERT_EQ(stat(ckpt.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 2001u);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((ckpt + "/model.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 2001u);
  ASSERT_EQ(stat((dir_ / "data" / "logs" / "7" / "1" / "rank-0.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 2001u);

  json b = StartCommand("8.1.0", 0);
  b["task"]["job_id"] = 8;
  b["task"]["uid"] = 2002;
  b["task"]["gid"] = 2002;
  b["task"]["argv"] = {"/bin/cat", ckpt + "/model.pt"};
  server_.Push(b);
  ASSERT_TRUE(WaitUntil([&] { return server_.task("8.1.0").value("state", "") == "exited"; }));
  EXPECT_EQ(server_.task("8.1.0")["exit_code"], 1);
  EXPECT_TRUE(WaitUntil([&] {
    return server_.log("8.1.0").find("Permission denied") != std::string::npos;
  })) << server_.log("8.1.0");
}

TEST_F(AgentTest, ReportsAStartThatFailed) {
  StartAgent(Options());
  server_.Push(
      {{"kind", "start"},
       {"task", {{"task_id", "6.1.0"}, {"job_id", 6}, {"attempt", 1}, {"argv", {"/no/such"}}}}});
  ASSERT_TRUE(WaitUntil([&] { return server_.task("6.1.0").value("state", "") == "exited"; }));
  EXPECT_EQ(server_.task("6.1.0")["exit_code"], 127);
  EXPECT_EQ(server_.task("6.1.0")["message"], "execve /no/such: No such file or directory");
  ASSERT_TRUE(WaitUntil([&] { return !server_.log("6.1.0").empty(); }));
  EXPECT_EQ(server_.log("6.1.0"), "trainyard: execve /no/such: No such file or directory\n");
}

TEST_F(AgentTest, RegistersAgainOn404AndKillsTheTasksTheServerDisowns) {
  StartAgent(Options());
  server_.Push(StartCommand("5.1.0"));
  server_.Push(StartCommand("5.1.1"));
  ASSERT_TRUE(WaitUntil([&] {
    return server_.task("5.1.0").value("state", "") == "running" &&
           server_.task("5.1.1").value("state", "") == "running";
  }));
  pid_t disowned = server_.task("5.1.1")["pid"].get<int>();

  server_.ForgetNodes({"5.1.1"});
  ASSERT_TRUE(WaitUntil([&] { return server_.registers().size() >= 2; }));
  json again = server_.registers()[1];
  ASSERT_EQ(again["tasks"].size(), 2u);
  EXPECT_EQ(again["tasks"][0]["task_id"], "5.1.0");
  EXPECT_EQ(again["tasks"][0]["state"], "running");

  ASSERT_TRUE(WaitUntil([&] { return !Known("5.1.1"); }));
  // Killed and reaped by the agent.
  EXPECT_TRUE(WaitUntil([&] { return kill(disowned, 0) == -1; }));
  EXPECT_TRUE(Known("5.1.0"));
  // The disowned task is never reported again.
  size_t beats = server_.heartbeats().size();
  ASSERT_TRUE(WaitUntil([&] { return server_.heartbeats().size() > beats + 1; }));
  json last = server_.heartbeats().back();
  for (const auto& t : last["tasks"]) EXPECT_NE(t["task_id"], "5.1.1");

  // Shutdown stops what runs (SIGTERM) and reports it.
  StopAgent();
  EXPECT_TRUE(result_.ok());
  EXPECT_EQ(server_.task("5.1.0")["state"], "exited");
  EXPECT_EQ(server_.task("5.1.0")["signal"], SIGTERM);
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], -1);
}

TEST_F(AgentTest, KeepsTasksRunningWhileTheServerIsDownAndReportsLater) {
  StartAgent(Options());
  server_.Push(StartCommand("5.1.0", 3));
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  server_.Stop();

  Go();
  ASSERT_TRUE(WaitUntil([&] {
    auto tasks = agent_->Tasks();
    return tasks.size() == 1 && tasks[0].state == TaskState::kExited;
  }));
  EXPECT_EQ(agent_->Tasks()[0].exit_code, 3);
  std::this_thread::sleep_for(milliseconds(300));  // a few failed retries
  EXPECT_EQ(agent_->Tasks().size(), 1u) << "an unreported exit is kept";

  server_.Start();
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "exited"; }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 3);
  ASSERT_TRUE(WaitUntil([&] { return agent_->Tasks().empty(); }));
  EXPECT_TRUE(WaitUntil([&] { return server_.log("5.1.0") == "hello\ngpus=1\n"; }))
      << server_.log("5.1.0");
  EXPECT_EQ(server_.registers().size(), 1u) << "the server kept the node; no new registration";
}

// The server gives a silent node's work to others release_after_ms after its last
// heartbeat; the agent has stopped its tasks by then (SIGTERM a third before, at most
// 30 s; SIGKILL halfway from there), and says so when the server answers again.
TEST_F(AgentTest, StopsItsTasksBeforeTheServerGivesTheirWorkAway) {
  server_.SetReleaseAfter(60'000);
  AgentOptions o = Options();
  o.now = Clock();
  StartAgent(std::move(o));
  server_.Push(StartCommand("5.1.0"));
  // One that ignores SIGTERM: it gets SIGKILL.
  json stubborn = StartCommand("5.1.1");
  stubborn["task"]["argv"] = {"/bin/sh", "-c", "trap '' TERM; while true; do sleep 0.05; done"};
  server_.Push(stubborn);
  ASSERT_TRUE(WaitUntil([&] {
    return server_.task("5.1.0").value("state", "") == "running" &&
           server_.task("5.1.1").value("state", "") == "running";
  }));
  server_.Stop();
  Advance(std::chrono::seconds(35));  // 35 s < 60 s - 20 s: keep running
  std::this_thread::sleep_for(milliseconds(300));
  for (const auto& t : agent_->Tasks()) EXPECT_EQ(t.state, TaskState::kRunning) << t.task_id;

  Advance(std::chrono::seconds(6));  // 41 s: SIGTERM
  ASSERT_TRUE(WaitUntil([&] {
    for (const auto& t : agent_->Tasks()) {
      if (t.task_id == "5.1.0") return t.state == TaskState::kExited;
    }
    return false;
  }));
  std::this_thread::sleep_for(milliseconds(300));
  for (const auto& t : agent_->Tasks()) {
    EXPECT_TRUE(t.fenced) << t.task_id;
    if (t.task_id == "5.1.0") {
      EXPECT_EQ(t.signal, SIGTERM);
    } else {
      EXPECT_EQ(t.state, TaskState::kRunning) << "SIGTERM ignored";
    }
  }
  Advance(std::chrono::seconds(11));  // 52 s: SIGKILL, 8 s before the server may release
  ASSERT_TRUE(WaitUntil([&] {
    auto tasks = agent_->Tasks();
    return std::all_of(tasks.begin(), tasks.end(),
                       [](const TaskStatus& t) { return t.state == TaskState::kExited; });
  }));
  for (const auto& t : agent_->Tasks()) {
    if (t.task_id == "5.1.1") {
      EXPECT_EQ(t.signal, SIGKILL);
    }
  }

  server_.Start();
  ASSERT_TRUE(WaitUntil([&] {
    return server_.task("5.1.0").value("state", "") == "exited" &&
           server_.task("5.1.1").value("state", "") == "exited";
  }));
  for (const char* id : {"5.1.0", "5.1.1"}) {
    json t = server_.task(id);
    EXPECT_EQ(t["fenced"], true) << id;
    EXPECT_THAT(t["message"].get<std::string>(),
                ::testing::HasSubstr("no contact with the server for"))
        << id;
  }
}

TEST_F(AgentTest, WithoutReleaseAfterFromTheServerTasksRunOnWhileItIsAway) {
  AgentOptions o = Options();
  o.now = Clock();
  StartAgent(std::move(o));
  server_.Push(StartCommand("5.1.0"));
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  server_.Stop();
  Advance(std::chrono::hours(1));
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_EQ(agent_->Tasks().size(), 1u);
  EXPECT_EQ(agent_->Tasks()[0].state, TaskState::kRunning);
  EXPECT_FALSE(agent_->Tasks()[0].fenced);
  server_.Start();
  Go();
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "exited"; }));
  EXPECT_EQ(server_.task("5.1.0")["fenced"], false);
}

TEST_F(AgentTest, PreemptWritesTheNoticeAndSignalsTheTask) {
  StartAgent(Options());
  json start = StartCommand("5.1.0");
  start["task"]["argv"] = {"/bin/sh", "-c",
                           "trap 'cat \"$TRAINYARD_PREEMPT_FILE\"; exit 0' USR1; echo ready; "
                           "while :; do sleep 0.01; done"};
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return server_.log("5.1.0") == "ready\n"; }));
  server_.Push(
      {{"kind", "preempt"}, {"task_id", "5.1.0"}, {"signal", SIGUSR1}, {"grace_ms", 60000}});
  server_.Push({{"kind", "stop"}, {"task_id", "no-such-task"}, {"grace_ms", 0}});
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "exited"; }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 0);
  EXPECT_TRUE(WaitUntil([&] {
    return server_.log("5.1.0").find("\"deadline_ms\"") != std::string::npos;
  })) << server_.log("5.1.0");
  EXPECT_TRUE(fs::exists(dir_ / "data" / "preempt" / "5" / "1" / "rank-0.json"));
}

TEST_F(AgentTest, ProfileCommandsReachTheTaskAndItsTracesTheServer) {
  StartAgent(Options());
  json start = StartCommand("5.1.0");
  // Stands in for the SDK: answers each request it finds in TRAINYARD_PROFILE_FILE with
  // "profile" records in its metrics file; p-5-1 with a trace in its profile dir, the
  // next one with a file elsewhere, which the agent must not upload.
  start["task"]["argv"] = {"/bin/sh", "-c",
                           R"sh(F=$TRAINYARD_PROFILE_FILE; M=$TRAINYARD_METRICS_FILE; done=""
echo "dir=$TRAINYARD_PROFILE_DIR"
while [ ! -e go ]; do
  if [ -s "$F" ]; then
    id=$(sed 's/.*"id":"\([^"]*\)".*/\1/' "$F"); dir=$(sed 's/.*"dir":"\([^"]*\)".*/\1/' "$F")
    if [ "$id" != "$done" ]; then
      done=$id
      printf '{"kind":"profile","id":"%s","status":"recording"}\n' "$id" >> "$M"
      if [ "$id" = p-5-1 ]; then
        printf '{"traceEvents":[{"name":"step 1","ph":"X","ts":1,"dur":1}]}' > "$dir/$id.json"
        printf '{"kind":"profile","id":"%s","status":"stored","path":"%s/%s.json"}\n' \
          "$id" "$dir" "$id" >> "$M"
        printf '{"kind":"profile","id":"p-9-9","status":"failed","message":"not asked"}\n' >> "$M"
      else
        printf '{"kind":"profile","id":"%s","status":"stored","path":"/etc/hostname"}\n' \
          "$id" >> "$M"
      fi
    fi
  fi
  sleep 0.01
done)sh"};
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  server_.Push({{"kind", "profile"}, {"task_id", "5.1.0"}, {"id", "p-5-1"}, {"steps", 3}});
  server_.Push({{"kind", "profile"}, {"task_id", "no-such-task"}, {"id", "p-5-1"}, {"steps", 3}});
  ASSERT_TRUE(WaitUntil([&] { return !server_.profile("5.1.0", "p-5-1").data.empty(); }));
  auto p1 = server_.profile("5.1.0", "p-5-1");
  EXPECT_EQ(p1.data, R"({"traceEvents":[{"name":"step 1","ph":"X","ts":1,"dur":1}]})");
  EXPECT_EQ(p1.statuses, (std::vector<std::string>{"recording", "stored"}));
  const fs::path dir = dir_ / "data" / "profiles" / "5" / "1" / "rank-0";
  EXPECT_TRUE(WaitUntil([&] { return !fs::exists(dir / "p-5-1.json"); }))
      << "an uploaded trace is deleted from the node";
  std::ifstream request(dir_ / "data" / "profile-requests" / "5" / "1" / "rank-0.json");
  EXPECT_EQ(json::parse(request), json({{"id", "p-5-1"}, {"steps", 3}, {"dir", dir.string()}}));

  server_.Push({{"kind", "profile"}, {"task_id", "5.1.0"}, {"id", "p-5-2"}, {"steps", 3}});
  ASSERT_TRUE(WaitUntil([&] { return server_.profile("5.1.0", "p-5-2").statuses.size() == 2; }));
  auto p2 = server_.profile("5.1.0", "p-5-2");
  EXPECT_EQ(p2.statuses, (std::vector<std::string>{"recording", "failed"}));
  EXPECT_THAT(p2.message, ::testing::HasSubstr("not in the task's TRAINYARD_PROFILE_DIR"));
  EXPECT_TRUE(p2.data.empty());
  // A record of a profile that was not asked of the task goes nowhere.
  EXPECT_EQ(server_.profiles(), 2u);
  Go();
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "exited"; }));
  EXPECT_NE(server_.log("5.1.0").find("dir=" + dir.string()), std::string::npos)
      << server_.log("5.1.0");
}

TEST_F(AgentTest, StopCommandEndsTheTask) {
  StartAgent(Options());
  server_.Push(StartCommand("5.1.0"));
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  server_.Push({{"kind", "stop"}, {"task_id", "5.1.0"}, {"grace_ms", 5000}});
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "exited"; }));
  EXPECT_EQ(server_.task("5.1.0")["signal"], SIGTERM);
}

json Effects(double slow_factor, bool hang = false, double data_stall_s = 0.0,
             bool loss_nan = false, bool grad_spike = false) {
  return {{"slow_factor", slow_factor},
          {"hang", hang},
          {"data_stall_s", data_stall_s},
          {"loss_nan", loss_nan},
          {"grad_spike", grad_spike}};
}

TEST_F(AgentTest, FaultsReachTelemetryHeartbeatsAndTheTasksTheyTouch) {
  AgentOptions o = Options();
  o.now = Clock();
  StartAgent(o);
  // 5.1.0 of job 5 on GPU 1; 6.1.0 of job 6 on GPU 0.
  json a = StartCommand("5.1.0");
  a["task"]["argv"][2] =
      "echo \"faults=$TRAINYARD_FAULT_FILE\"; " + a["task"]["argv"][2].get<std::string>();
  json b = StartCommand("6.1.0");
  b["task"]["job_id"] = 6;
  b["task"]["gpus"] = {0};
  server_.Push(a);
  server_.Push(b);
  ASSERT_TRUE(WaitUntil([&] {
    return server_.task("5.1.0").value("state", "") == "running" &&
           server_.task("6.1.0").value("state", "") == "running";
  }));
  ASSERT_TRUE(WaitUntil([&] { return LastBeat().contains("links"); }));
  EXPECT_EQ(LastBeat()["faults"], json::array());
  EXPECT_EQ(LastBeat()["links"],
            json::parse(R"([{"name": "ib0", "kind": "ib", "up": true, "errors": 0},
                            {"name": "nvlink0", "kind": "nvlink", "up": true, "errors": 0}])"));
  EXPECT_FALSE(fs::exists(dir_ / "data" / "faults" / "5.1.0.json")) << "no faults, no file";

  json faults = {{"kind", "faults"},
                 {"faults",
                  {{{"id", "f-1"}, {"kind", "slow"}, {"gpu", 1}, {"until_ms", 0}, {"job_id", 0}},
                   {{"id", "f-2"}, {"kind", "xid"}, {"gpu", 0}},
                   {{"id", "f-3"}, {"kind", "comm-slow"}, {"gpu", -1}, {"job_id", 6}},
                   {{"id", "f-4"}, {"kind", "grad-spike"}, {"gpu", 0}},
                   {{"id", "f-5"}, {"kind", "link-down"}, {"gpu", -1}}}}};
  server_.Push(faults);
  ASSERT_TRUE(WaitUntil([&] {
    return LastBeat()["faults"] == json({"f-1", "f-2", "f-3", "f-4", "f-5"});
  }));
  json beat = LastBeat();
  EXPECT_EQ(beat["gpus"][0]["xid_count"], 1);
  EXPECT_EQ(beat["gpus"][0]["xid_last"], 79);
  EXPECT_EQ(beat["gpus"][1]["xid_count"], 0);
  EXPECT_GE(beat["gpus"][1]["util_pct"].get<double>(), 55.0);
  EXPECT_LE(beat["gpus"][1]["util_pct"].get<double>(), 65.0);
  EXPECT_EQ(beat["links"][0]["up"], false);
  EXPECT_GE(beat["links"][0]["errors"].get<int>(), 1);
  EXPECT_EQ(beat["links"][1]["up"], true);
  // Slow (3x) on GPU 1 beats link-down (2.5x); job 6 has comm-slow and link-down (2.5x)
  // and the grad spike of its GPU 0.
  ASSERT_TRUE(WaitUntil([&] { return !FaultFile("5.1.0").is_discarded(); }));
  EXPECT_EQ(FaultFile("5.1.0"), Effects(3.0));
  ASSERT_TRUE(WaitUntil([&] { return !FaultFile("6.1.0").is_discarded(); }));
  EXPECT_EQ(FaultFile("6.1.0"), Effects(2.5, false, 0.0, false, true));
  EXPECT_TRUE(WaitUntil([&] {
    return server_.log("5.1.0").find(
               "faults=" + (dir_ / "data" / "faults" / "5.1.0.json").string()) != std::string::npos;
  })) << server_.log("5.1.0");

  // Resent (the server repeats the set): the XID is not counted again. Errors of the
  // downed link keep counting, one per heartbeat.
  const int64_t errors = LastBeat()["links"][0]["errors"];
  server_.Push(faults);
  const size_t beats = server_.heartbeats().size();
  ASSERT_TRUE(WaitUntil([&] { return server_.heartbeats().size() > beats + 3; }));
  EXPECT_EQ(LastBeat()["gpus"][0]["xid_count"], 1);
  EXPECT_GT(LastBeat()["links"][0]["errors"].get<int64_t>(), errors);

  // A new set replaces the old: only a hang of GPU 1 until an hour from now.
  server_.Push(
      {{"kind", "faults"},
       {"faults",
        {{{"id", "f-6"}, {"kind", "hang"}, {"gpu", 1}, {"until_ms", NowMs() + 3600000}}}}});
  ASSERT_TRUE(WaitUntil([&] { return LastBeat()["faults"] == json({"f-6"}); }));
  ASSERT_TRUE(WaitUntil([&] { return FaultFile("5.1.0") == Effects(1.0, true); }));
  ASSERT_TRUE(WaitUntil([&] { return FaultFile("6.1.0") == Effects(1.0); }));
  EXPECT_EQ(LastBeat()["links"][0]["up"], true);
  ASSERT_TRUE(WaitUntil([&] { return LastBeat()["gpus"][1]["util_pct"] == 0.0; }));

  // Its end passes: the agent drops it by itself.
  Advance(std::chrono::hours(2));
  ASSERT_TRUE(WaitUntil([&] { return LastBeat()["faults"] == json::array(); }));
  ASSERT_TRUE(WaitUntil([&] { return FaultFile("5.1.0") == Effects(1.0); }));
  ASSERT_TRUE(WaitUntil([&] { return LastBeat()["gpus"][1]["util_pct"].get<double>() >= 90.0; }));

  // A forgotten task's file goes with it.
  Go();
  ASSERT_TRUE(WaitUntil([&] { return agent_->Tasks().empty(); }));
  EXPECT_TRUE(WaitUntil([&] { return !fs::exists(dir_ / "data" / "faults" / "5.1.0.json"); }));
}

TEST_F(AgentTest, AGpuFaultOnANodeWithoutGpusTouchesTheTaskOfThatLocalIndex) {
  AgentOptions o = Options();
  agent_ = std::make_unique<Agent>(o, std::make_unique<NoGpus>("/nonexistent"));
  thread_ = std::thread([this] { result_ = agent_->Run(); });
  for (const char* id : {"7.0.1", "7.0.0"}) {
    json start = StartCommand(id);
    start["task"]["gpus"] = json::array();
    server_.Push(start);
  }
  ASSERT_TRUE(WaitUntil([&] { return agent_->Tasks().size() == 2; }));
  server_.Push(
      {{"kind", "faults"}, {"faults", {{{"id", "f-1"}, {"kind", "loss-nan"}, {"gpu", 1}}}}});
  ASSERT_TRUE(WaitUntil([&] { return !FaultFile("7.0.1").is_discarded(); }));
  EXPECT_EQ(FaultFile("7.0.1"), Effects(1.0, false, 0.0, true));
  EXPECT_FALSE(fs::exists(dir_ / "data" / "faults" / "7.0.0.json"));
  ASSERT_TRUE(WaitUntil([&] { return LastBeat()["faults"] == json({"f-1"}); }));
  EXPECT_FALSE(LastBeat().contains("links")) << "a backend that cannot read links reports none";
}

TEST_F(AgentTest, CheckpointCommandWritesANewRequestIdForTheTask) {
  StartAgent(Options());
  json start = StartCommand("5.1.0");
  start["task"]["argv"][2] = "echo \"request=$TRAINYARD_CHECKPOINT_REQUEST_FILE\"; " +
                             start["task"]["argv"][2].get<std::string>();
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  const fs::path file = dir_ / "data" / "checkpoint-requests" / "5.1.0";
  EXPECT_TRUE(WaitUntil([&] {
    return server_.log("5.1.0").find("request=" + file.string()) != std::string::npos;
  })) << server_.log("5.1.0");
  EXPECT_FALSE(fs::exists(file));

  server_.Push({{"kind", "checkpoint"}, {"task_id", "5.1.0"}});
  server_.Push({{"kind", "checkpoint"}, {"task_id", "no-such-task"}});
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(file) == "1\n"; }));
  server_.Push({{"kind", "checkpoint"}, {"task_id", "5.1.0"}});
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(file) == "2\n"; }));
  EXPECT_FALSE(fs::exists(file.string() + ".tmp"));

  Go();
  ASSERT_TRUE(WaitUntil([&] { return agent_->Tasks().empty(); }));
  EXPECT_TRUE(WaitUntil([&] { return !fs::exists(file); })) << "forgotten with its task";
}

TEST_F(AgentTest, HeartbeatsReportTheDisksOfTheDataDirAndCheckpointDirs) {
  StartAgent(Options());
  json start = StartCommand("5.1.0");
  // Not created yet: the nearest directory that exists stands for it.
  start["task"]["env"]["TRAINYARD_CHECKPOINT_DIR"] = "ckpt/not/yet";
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  auto has = [&](const fs::path& p) {
    for (const auto& d : LastBeat().value("disks", json::array())) {
      if (d["path"] == p.string()) {
        return d["total_bytes"].get<int64_t>() > 0 && d["free_bytes"].get<int64_t>() >= 0 &&
               d["free_bytes"].get<int64_t>() <= d["total_bytes"].get<int64_t>();
      }
    }
    return false;
  };
  ASSERT_TRUE(WaitUntil([&] { return has(dir_ / "data") && has(dir_); })) << LastBeat()["disks"];
  EXPECT_FALSE(LastBeat().contains("health_check")) << "no check program, no result";
}

TEST_F(AgentTest, HealthCheckRunsBeforeRegisteringPeriodicallyAndAfterATaskFails) {
  AgentOptions o = Options();
  o.now = Clock();
  const std::string runs = (dir_ / "runs").string();
  o.health_check =
      Script("check", "echo \"$TRAINYARD_HEALTH_TRIGGER\" >> " + runs +
                          "; echo \"node $TRAINYARD_NODE: $TRAINYARD_HEALTH_TRIGGER\"");
  o.health_check_interval = std::chrono::minutes(5);
  StartAgent(o);
  ASSERT_TRUE(WaitUntil([&] { return !server_.registers().empty(); }));
  json reg = server_.registers()[0];
  ASSERT_TRUE(reg.contains("health_check")) << reg;
  EXPECT_EQ(reg["health_check"]["ok"], true);
  EXPECT_EQ(reg["health_check"]["output"], "node node-1: join");
  EXPECT_EQ(reg["health_check"]["trigger"], "join");
  EXPECT_GT(reg["health_check"]["at_ms"].get<int64_t>(), 0);
  ASSERT_TRUE(WaitUntil([&] { return LastBeat().contains("health_check"); }));
  EXPECT_EQ(LastBeat()["health_check"], reg["health_check"]);

  // A task the agent stops says nothing about the node; one that fails does.
  server_.Push(StartCommand("5.1.0"));
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  server_.Push({{"kind", "stop"}, {"task_id", "5.1.0"}, {"grace_ms", 5000}});
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "exited"; }));
  server_.Push(StartCommand("5.1.1"));  // exits with 7
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.1").value("state", "") == "running"; }));
  Go();
  ASSERT_TRUE(WaitUntil([&] {
    return LastBeat().value("health_check", json::object()).value("trigger", "") == "task-failed";
  }));
  EXPECT_EQ(LastBeat()["health_check"]["output"], "node node-1: task-failed");

  Advance(std::chrono::minutes(6));
  ASSERT_TRUE(WaitUntil([&] {
    return LastBeat().value("health_check", json::object()).value("trigger", "") == "periodic";
  }));
  EXPECT_EQ(ReadFile(runs), "join\ntask-failed\nperiodic\n");
}

TEST_F(AgentTest, AFailingJoinCheckIsReportedAndTheNodeStillRegisters) {
  AgentOptions o = Options();
  o.health_check = Script("check", "echo 'nvidia-smi: no devices found' >&2; exit 2");
  StartAgent(o);
  ASSERT_TRUE(WaitUntil([&] { return !server_.registers().empty(); }));
  json check = server_.registers()[0]["health_check"];
  EXPECT_EQ(check["ok"], false);
  EXPECT_EQ(check["output"], "nvidia-smi: no devices found");
  EXPECT_EQ(check["trigger"], "join");
}

TEST_F(AgentTest, ABadJoinTokenEndsRunWithTheServersReason) {
  AgentOptions o = Options();
  o.join_token = "wrong";
  StartAgent(o);
  thread_.join();
  agent_.reset();
  ASSERT_FALSE(result_.ok());
  EXPECT_EQ(result_.message(), "register: the server refused node node-1: 401 bad join token");
}

}  // namespace
}  // namespace trainyard::agent
