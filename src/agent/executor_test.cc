// One behaviour, two executors: every case here runs a rank as a host process and in a
// container (container.h) and expects the same of both: output, metrics, exit codes and
// signals, the preemption notice and its grace, a stop that ends the rank's children,
// the SIGKILL after the grace, an OOM kill named as such, and the tenant's identity.
// The container cases use a busybox image built by tests/containers/make_busybox_image.sh
// and need root and runc (CI has both: scripts/setup).
#include <sys/stat.h>

#include "agent/agent_fixture.h"
#include "agent/image_store.h"

namespace trainyard::agent {
namespace {

constexpr char kImage[] = "trainyard-test/busybox:1";

class ExecutorTest : public AgentTest, public ::testing::WithParamInterface<std::string> {
 protected:
  bool container() const { return GetParam() == "container"; }

  void SetUp() override {
    AgentTest::SetUp();
    if (!container()) return;
    ASSERT_EQ(geteuid(), 0u) << "containers need root: run this test as root (CI does)";
    store_ = (dir_ / "images").string();
    const std::string tar = (dir_ / "busybox.tar").string();
    const std::string cmd = std::string("bash ") + TRAINYARD_SOURCE_DIR +
                            "/tests/containers/make_busybox_image.sh " + tar + " " + kImage +
                            " >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto loaded = ImageStore(store_).Load(tar);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    digest_ = loaded->digest;
  }

  AgentOptions Options() {
    AgentOptions o = AgentTest::Options();
    o.image_store = container() ? store_ : (dir_ / "no-images").string();
    return o;
  }

  // The start of a rank that runs `script` with /bin/sh, in the executor under test.
  json Start(const std::string& id, const std::string& script) {
    json start = StartCommand(id);
    start["task"]["job_id"] = std::stoll(id.substr(0, id.find('.')));
    start["task"]["argv"] = {"/bin/sh", "-c", script};
    if (container()) start["task"]["image"] = kImage;
    return start;
  }

  bool Exited(const std::string& id) { return server_.task(id).value("state", "") == "exited"; }

  std::string store_;
  std::string digest_;
};

INSTANTIATE_TEST_SUITE_P(Executors, ExecutorTest, ::testing::Values("process", "container"),
                         [](const auto& info) { return info.param; });

TEST_P(ExecutorTest, RunsTheRankShipsItsOutputAndMetricsAndReportsItsExitCode) {
  StartAgent(Options());
  ASSERT_TRUE(WaitUntil([&] { return !server_.registers().empty(); }));
  const std::string containers = server_.registers()[0].value("containers", "");
  if (container()) {
    EXPECT_THAT(containers, ::testing::StartsWith("runc ")) << containers;
    EXPECT_THAT(containers, ::testing::HasSubstr("images in " + store_));
  }
  server_.Push(Start("5.1.0",
                     "echo hello; echo \"gpus=$CUDA_VISIBLE_DEVICES\"; "
                     "printf '{\"step\":1}\\n{\"step\":2}\\n' >> \"$TRAINYARD_METRICS_FILE\"; "
                     "while [ ! -e go ]; do sleep 0.01; done; exit 7"));
  ASSERT_TRUE(WaitUntil([&] { return server_.task("5.1.0").value("state", "") == "running"; }));
  EXPECT_EQ(server_.task("5.1.0").value("image_digest", ""), container() ? digest_ : "");
  Go();
  ASSERT_TRUE(WaitUntil([&] { return Exited("5.1.0"); }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 7) << server_.task("5.1.0").dump();
  EXPECT_EQ(server_.task("5.1.0")["signal"], 0);
  EXPECT_EQ(server_.states("5.1.0"), (std::vector<std::string>{"running", "exited"}));
  // GPU 1 of the node: the container's only GPU, so its GPU 0 there.
  const std::string gpus = container() ? "0" : "1";
  EXPECT_TRUE(WaitUntil([&] { return server_.log("5.1.0") == "hello\ngpus=" + gpus + "\n"; }))
      << server_.log("5.1.0");
  ASSERT_TRUE(WaitUntil([&] { return server_.metrics("5.1.0").size() == 2; }));
  EXPECT_EQ(server_.metrics("5.1.0")[1]["step"], 2);
  ASSERT_TRUE(WaitUntil([&] { return agent_->Tasks().empty(); }));
  // Nothing of a container is left once its task is forgotten.
  EXPECT_TRUE(WaitUntil([&] { return !fs::exists(dir_ / "data" / "containers" / "5.1.0"); }));
  EXPECT_FALSE(fs::exists(dir_ / "data" / "runc" / "ty-5.1.0"));
}

TEST_P(ExecutorTest, ExitCodesAndSignalsAreTheRanksOwn) {
  StartAgent(Options());
  server_.Push(Start("5.1.0", "exit 3"));
  server_.Push(Start("6.1.0", "kill -KILL $$"));
  server_.Push(Start("7.1.0", "kill -SEGV $$"));
  ASSERT_TRUE(WaitUntil([&] { return Exited("5.1.0") && Exited("6.1.0") && Exited("7.1.0"); }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 3) << server_.log("5.1.0");
  EXPECT_EQ(server_.task("5.1.0")["signal"], 0);
  EXPECT_EQ(server_.task("6.1.0")["exit_code"], -1);
  EXPECT_EQ(server_.task("6.1.0")["signal"], SIGKILL);
  EXPECT_EQ(server_.task("7.1.0")["signal"], SIGSEGV);
}

TEST_P(ExecutorTest, ThePreemptionNoticeReachesTheRankWhichCheckpointsInItsGrace) {
  StartAgent(Options());
  const std::string ckpt = (dir_ / "checkpoints" / "5").string();
  fs::create_directories(ckpt);
  json start = Start("5.1.0",
                     "trap 'cat \"$TRAINYARD_PREEMPT_FILE\"; echo saved > "
                     "\"$TRAINYARD_CHECKPOINT_DIR/step-9\"; exit 0' USR1; echo ready; "
                     "while :; do sleep 0.01; done");
  start["task"]["env"]["TRAINYARD_CHECKPOINT_DIR"] = ckpt;
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return server_.log("5.1.0") == "ready\n"; }));
  server_.Push(
      {{"kind", "preempt"}, {"task_id", "5.1.0"}, {"signal", SIGUSR1}, {"grace_ms", 60000}});
  ASSERT_TRUE(WaitUntil([&] { return Exited("5.1.0"); }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 0) << server_.task("5.1.0").dump();
  EXPECT_TRUE(WaitUntil([&] {
    return server_.log("5.1.0").find("\"grace_ms\":60000") != std::string::npos;
  })) << server_.log("5.1.0");
  EXPECT_EQ(ReadFile(fs::path(ckpt) / "step-9"), "saved\n");
}

TEST_P(ExecutorTest, AStopEndsTheRankAndItsChildren) {
  StartAgent(Options());
  server_.Push(Start("5.1.0", "sleep 1000 & echo $! > child.pid; wait"));
  ASSERT_TRUE(WaitUntil([&] { return !ReadFile(dir_ / "child.pid").empty(); }));
  const pid_t child = std::stoi(ReadFile(dir_ / "child.pid"));
  ASSERT_EQ(kill(child, 0), 0);
  server_.Push({{"kind", "stop"}, {"task_id", "5.1.0"}, {"grace_ms", 5000}});
  ASSERT_TRUE(WaitUntil([&] { return Exited("5.1.0"); }));
  EXPECT_EQ(server_.task("5.1.0")["signal"], SIGTERM) << server_.task("5.1.0").dump();
  // The rank's own child went with it (zombies aside: not ours to reap in a container).
  EXPECT_TRUE(WaitUntil([&] {
    const std::string stat = ReadFile("/proc/" + std::to_string(child) + "/stat");
    return stat.empty() || stat.find(") Z ") != std::string::npos;
  }));
}

TEST_P(ExecutorTest, ARankThatIgnoresTheStopIsKilledWhenItsGraceEnds) {
  StartAgent(Options());
  server_.Push(Start("5.1.0", "trap '' TERM; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(WaitUntil([&] { return server_.log("5.1.0") == "ready\n"; }));
  server_.Push({{"kind", "stop"}, {"task_id", "5.1.0"}, {"grace_ms", 300}});
  ASSERT_TRUE(WaitUntil([&] { return Exited("5.1.0"); }));
  EXPECT_EQ(server_.task("5.1.0")["signal"], SIGKILL) << server_.task("5.1.0").dump();
}

TEST_P(ExecutorTest, AnOutOfMemoryKillIsReportedAsSuch) {
  ASSERT_EQ(geteuid(), 0u) << "this test makes cgroups: run it as root (CI does)";
  Cgroups cg = Cgroups::Detect(CgroupHost::FromProc());
  ASSERT_TRUE(cg.available()) << "no usable cgroups on this host: " << cg.problem();
  AgentOptions o = Options();
  o.cgroups = cg;
  StartAgent(o);
  // Whichever process the kernel picks (the shell, or tr inside it), the rank fails.
  json start = Start("6.1.0", "x=$(head -c 200000000 /dev/zero | tr '\\000' a) || exit 1");
  start["task"]["group"] = "j6.1.r0";
  start["task"]["memory_bytes"] = int64_t{48} << 20;
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return Exited("6.1.0"); }, std::chrono::seconds(30)));
  EXPECT_EQ(server_.task("6.1.0")["message"], "OOMKilled: memory limit 48Mi")
      << server_.task("6.1.0").dump();
  // The replica's group goes, and what the runtime made beside it.
  const std::string dir_name = "j6.1.r0.node-1." + std::to_string(getpid());
  for (const std::string& d : cg.RuntimeDirs(dir_name)) {
    EXPECT_TRUE(WaitUntil([&] { return !fs::exists(d); })) << d;
  }
}

TEST_P(ExecutorTest, TheRankRunsAsItsTenantsIdentity) {
  ASSERT_EQ(geteuid(), 0u) << "changing identity needs root: run this test as root (CI does)";
  fs::permissions(dir_, fs::perms::all);
  StartAgent(Options());
  const std::string ckpt = (dir_ / "checkpoints" / "7").string();
  json start = Start("7.1.0",
                     "id -u; echo w > \"$TRAINYARD_CHECKPOINT_DIR/model.pt\" && "
                     "echo '{\"step\":1}' >> \"$TRAINYARD_METRICS_FILE\"");
  start["task"]["uid"] = 2001;
  start["task"]["gid"] = 2001;
  start["task"]["env"]["TRAINYARD_CHECKPOINT_DIR"] = ckpt;
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return Exited("7.1.0"); }));
  EXPECT_EQ(server_.task("7.1.0")["exit_code"], 0) << server_.task("7.1.0").dump();
  EXPECT_TRUE(WaitUntil([&] { return server_.log("7.1.0") == "2001\n"; })) << server_.log("7.1.0");
  EXPECT_TRUE(WaitUntil([&] { return server_.metrics("7.1.0").size() == 1; }));
  struct stat st {};
  ASSERT_EQ(stat((ckpt + "/model.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 2001u);
}

// --- containers only ---------------------------------------------------------------

class ContainerTest : public ExecutorTest {};
INSTANTIATE_TEST_SUITE_P(Containers, ContainerTest, ::testing::Values("container"),
                         [](const auto& info) { return info.param; });

TEST_P(ContainerTest, TheRankSeesTheImageItsMountsAndItsGpusOnly) {
  StartAgent(Options());
  const fs::path data = dir_ / "datasets";
  fs::create_directories(data);
  std::ofstream(data / "train.txt") << "tokens\n";
  json start = Start("5.1.0",
                     "[ -e /usr/bin/python3 ] && echo host-visible; cat /data/train.txt; "
                     "(echo x > /data/new) 2>/dev/null || echo read-only; "
                     "echo kept > /cache/f; cat /cache/f; "
                     "df -k /dev/shm | tail -1 | awk '{print $2}'; "
                     "echo \"$NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES\"; "
                     "echo $TRAINYARD_METRICS_FILE");
  start["task"]["mounts"] = {{{"source", data.string()}, {"target", "/data"}, {"read_only", true}},
                             {{"source", "cache"}, {"target", "/cache"}}};
  start["task"]["shm_bytes"] = int64_t{32} << 20;
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return Exited("5.1.0"); }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 0) << server_.task("5.1.0").dump();
  EXPECT_TRUE(WaitUntil([&] {
    return server_.log("5.1.0") ==
           "tokens\nread-only\nkept\n32768\n1 0\n/run/trainyard/metrics.jsonl\n";
  })) << server_.log("5.1.0");
  EXPECT_FALSE(fs::exists(data / "new"));
  // A volume is the node's, and outlives the rank.
  EXPECT_EQ(ReadFile(dir_ / "data" / "volumes" / "cache" / "f"), "kept\n");
}

TEST_P(ContainerTest, AMissingImageFailsTheStartNamingTheImageAndTheNode) {
  StartAgent(Options());
  json start = Start("5.1.0", "true");
  start["task"]["image"] = "no-such/image:2";
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return Exited("5.1.0"); }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 127);
  const std::string message = server_.task("5.1.0").value("message", "");
  EXPECT_THAT(message, ::testing::HasSubstr("on node node-1"));
  EXPECT_THAT(message, ::testing::HasSubstr("no-such/image:2"));
  EXPECT_THAT(message, ::testing::HasSubstr("trainyard image load"));
}

TEST_P(ContainerTest, AnImageIsRunByItsDigestWhateverItsTagNowNames) {
  StartAgent(Options());
  json start = Start("5.1.0", "echo pinned");
  start["task"]["image"] = "trainyard-test/busybox@" + digest_;
  server_.Push(start);
  ASSERT_TRUE(WaitUntil([&] { return Exited("5.1.0"); }));
  EXPECT_EQ(server_.task("5.1.0")["exit_code"], 0) << server_.task("5.1.0").dump();
  EXPECT_EQ(server_.task("5.1.0").value("image_digest", ""), digest_);
}

}  // namespace
}  // namespace trainyard::agent
