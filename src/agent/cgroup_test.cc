#include "agent/cgroup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/launcher.h"

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cgroup_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  // A mountinfo line for a cgroup file system at `point` (under root_).
  std::string MountLine(int id, const std::string& point, const std::string& fstype,
                        const std::string& super) {
    return std::to_string(id) + " 1 0:" + std::to_string(id) + " / " + (root_ / point).string() +
           " rw,nosuid - " + fstype + " " + fstype + " " + super + "\n";
  }
  // What the kernel makes in a new group: its control files.
  void KernelFiles(const fs::path& dir, std::initializer_list<const char*> files) {
    for (const char* f : files) Write(dir / f, "");
  }
  fs::path root_;
};

TEST_F(CgroupTest, V2DelegatedSubtreeMovesTheAgentToALeafAndLimitsEachGroup) {
  const fs::path base = root_ / "v2/system.slice/trainyard-agent.service";
  Write(base / "cgroup.controllers", "cpuset cpu io memory pids\n");
  KernelFiles(base, {"cgroup.subtree_control", "cgroup.procs"});
  KernelFiles(base / "agent", {"cgroup.procs"});
  CgroupHost host{"0::/system.slice/trainyard-agent.service\n",
                  MountLine(30, "v2", "cgroup2", "rw,nsdelegate")};
  Cgroups cg = Cgroups::Detect(host);
  ASSERT_TRUE(cg.available()) << cg.problem();
  EXPECT_EQ(cg.version(), 2);
  EXPECT_EQ(cg.Describe(), "cgroup v2 at " + base.string());
  EXPECT_EQ(Read(base / "agent/cgroup.procs"), "0");  // the agent moved itself
  EXPECT_EQ(Read(base / "cgroup.subtree_control"), "+cpu +memory +pids");

  KernelFiles(base / "j7.2.r0", {"cgroup.procs", "cpu.max", "memory.max", "memory.swap.max",
                                 "memory.oom.group", "pids.max"});
  Write(base / "j7.2.r0/memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n");
  auto g = cg.Create("j7.2.r0", GroupLimits{2500, int64_t{3} << 30, 512});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(Read(base / "j7.2.r0/cpu.max"), "250000 100000");
  EXPECT_EQ(Read(base / "j7.2.r0/memory.max"), std::to_string(int64_t{3} << 30));
  EXPECT_EQ(Read(base / "j7.2.r0/memory.swap.max"), "0");
  EXPECT_EQ(Read(base / "j7.2.r0/memory.oom.group"), "1");
  EXPECT_EQ(Read(base / "j7.2.r0/pids.max"), "512");
  EXPECT_EQ(g->ProcsFiles(), std::vector<std::string>{(base / "j7.2.r0/cgroup.procs").string()});
  EXPECT_EQ(g->OomKills(), 1);
  EXPECT_TRUE(g->Empty());
  // A container runtime names a child of the group from the hierarchy's root.
  EXPECT_EQ(cg.RuntimePath("j7.2.r0", "ty-7.2.0"),
            "/system.slice/trainyard-agent.service/j7.2.r0/ty-7.2.0");
  EXPECT_EQ(cg.RuntimeDirs("j7.2.r0"), std::vector<std::string>{(base / "j7.2.r0").string()});

  // Unlimited: 0 leaves a resource at "max".
  KernelFiles(base / "j8.1.r0", {"cpu.max", "memory.max", "pids.max"});
  ASSERT_TRUE(cg.Create("j8.1.r0", GroupLimits{}).ok());
  EXPECT_EQ(Read(base / "j8.1.r0/cpu.max"), "max 100000");
  EXPECT_EQ(Read(base / "j8.1.r0/memory.max"), "max");
  EXPECT_EQ(Read(base / "j8.1.r0/pids.max"), "max");
}

TEST_F(CgroupTest, HybridHostWithoutV2ControllersUsesTheV1Hierarchies) {
  // As on this project's CI machines: v2 mounted with no cpu or memory, v1 for those.
  Write(root_ / "unified/cgroup.controllers", "hugetlb\n");
  for (const char* d : {"cpu", "memory/box/17", "pids"}) fs::create_directories(root_ / d);
  std::string mounts =
      MountLine(20, "unified", "cgroup2", "rw") + MountLine(21, "cpu", "cgroup", "rw,cpu,cpuacct") +
      MountLine(22, "memory", "cgroup", "rw,memory") + MountLine(23, "pids", "cgroup", "rw,pids");
  CgroupHost host{"9:name=systemd:/\n8:pids:/\n4:memory:/box/17\n1:cpu,cpuacct:/\n0::/\n", mounts};
  Cgroups cg = Cgroups::Detect(host);
  ASSERT_TRUE(cg.available()) << cg.problem();
  EXPECT_EQ(cg.version(), 1);
  EXPECT_EQ(cg.bases(), (std::vector<std::string>{(root_ / "cpu/trainyard").string(),
                                                  (root_ / "memory/box/17/trainyard").string(),
                                                  (root_ / "pids/trainyard").string()}));
  KernelFiles(root_ / "cpu/trainyard/j3.1.r1", {"cpu.cfs_period_us", "cpu.cfs_quota_us"});
  KernelFiles(root_ / "memory/box/17/trainyard/j3.1.r1", {"memory.limit_in_bytes"});
  Write(root_ / "memory/box/17/trainyard/j3.1.r1/memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  KernelFiles(root_ / "pids/trainyard/j3.1.r1", {"pids.max"});
  auto g = cg.Create("j3.1.r1", GroupLimits{500, int64_t{64} << 20, 100});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(Read(root_ / "cpu/trainyard/j3.1.r1/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(Read(root_ / "cpu/trainyard/j3.1.r1/cpu.cfs_quota_us"), "50000");
  EXPECT_EQ(Read(root_ / "memory/box/17/trainyard/j3.1.r1/memory.limit_in_bytes"),
            std::to_string(int64_t{64} << 20));
  EXPECT_EQ(Read(root_ / "pids/trainyard/j3.1.r1/pids.max"), "100");
  EXPECT_EQ(g->ProcsFiles().size(), 3u);
  EXPECT_EQ(g->OomKills(), 2);
  // The memory hierarchy places the groups elsewhere than cpu and pids: a container
  // runtime gets the memory hierarchy's path (it sets cpu and pids itself).
  EXPECT_EQ(cg.RuntimePath("j3.1.r1", "ty-3.1.0"), "/box/17/trainyard/j3.1.r1/ty-3.1.0");
  EXPECT_EQ(cg.RuntimeDirs("j3.1.r1").size(), 4u);
}

TEST_F(CgroupTest, AContainerRuntimesGroupsLieInEveryHierarchyMounted) {
  Write(root_ / "unified/cgroup.controllers", "hugetlb\n");
  for (const char* d : {"cpu", "memory", "pids", "devices"}) fs::create_directories(root_ / d);
  std::string mounts =
      MountLine(20, "unified", "cgroup2", "rw") + MountLine(21, "cpu", "cgroup", "rw,cpu,cpuacct") +
      MountLine(22, "memory", "cgroup", "rw,memory") + MountLine(23, "pids", "cgroup", "rw,pids") +
      MountLine(24, "devices", "cgroup", "rw,devices");
  CgroupHost host{"8:pids:/\n5:devices:/\n4:memory:/\n1:cpu,cpuacct:/\n0::/\n", mounts};
  Cgroups cg = Cgroups::Detect(host);
  ASSERT_TRUE(cg.available()) << cg.problem();
  EXPECT_EQ(cg.RuntimePath("j3.1.r1", "ty-3.1.0"), "/trainyard/j3.1.r1/ty-3.1.0");
  std::vector<std::string> dirs;
  for (const char* d : {"unified", "cpu", "memory", "pids", "devices"}) {
    dirs.push_back((root_ / d / "trainyard/j3.1.r1").string());
  }
  EXPECT_EQ(cg.RuntimeDirs("j3.1.r1"), dirs);
}

TEST_F(CgroupTest, NoUsableHierarchySaysWhyAndCreatesNothing) {
  Write(root_ / "unified/cgroup.controllers", "hugetlb\n");
  CgroupHost host{"0::/\n", MountLine(20, "unified", "cgroup2", "rw")};
  Cgroups cg = Cgroups::Detect(host);
  EXPECT_FALSE(cg.available());
  EXPECT_EQ(cg.version(), 0);
  EXPECT_THAT(cg.problem(), HasSubstr("offers only hugetlb"));
  EXPECT_THAT(cg.problem(), HasSubstr("no cgroup v1 cpu hierarchy"));
  EXPECT_THAT(cg.Describe(), HasSubstr("no cgroup limits: "));
  auto g = cg.Create("j1.1.r0", GroupLimits{1000, 0, 0});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("no cgroup limits on this node"));

  EXPECT_THAT(Cgroups::Detect(CgroupHost{"", ""}).problem(), HasSubstr("no cgroup v2 mount"));
  EXPECT_EQ(Cgroups::Disabled("--no-cgroups").problem(), "--no-cgroups");
}

TEST_F(CgroupTest, RefusesANameThatIsNotPlain) {
  Write(root_ / "v2/cgroup.controllers", "cpu memory pids\n");
  KernelFiles(root_ / "v2", {"cgroup.subtree_control"});
  Cgroups cg = Cgroups::Detect(CgroupHost{"0::/\n", MountLine(30, "v2", "cgroup2", "rw")});
  ASSERT_TRUE(cg.available()) << cg.problem();
  for (const char* bad : {"", "../escape", ".hidden", "a/b", "a b"}) {
    auto g = cg.Create(bad, GroupLimits{});
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_THAT(g.status().message(), HasSubstr("letters, digits")) << bad;
  }
  EXPECT_FALSE(fs::exists(root_ / "escape"));
}

// The kernel's own: this host's hierarchy, a process that outgrows its memory limit, its
// cpu quota as the kernel reads it, and the group gone afterwards. CI runs as root on a
// host with cgroups; anything less fails here, saying what is missing.
TEST(RealCgroupTest, TheKernelEnforcesTheLimitsAndReportsTheOomKill) {
  ASSERT_EQ(geteuid(), 0u) << "this test makes cgroups: run it as root (CI does)";
  Cgroups cg = Cgroups::Detect(CgroupHost::FromProc());
  ASSERT_TRUE(cg.available()) << "no usable cgroups on this host: " << cg.problem();
  const std::string name = "test-" + std::to_string(getpid());
  auto g = cg.Create(name, GroupLimits{500, int64_t{32} << 20, 64});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const std::string& dir : g->dirs()) {
    if (fs::exists(dir + "/cpu.cfs_quota_us"))
      EXPECT_EQ(Read(dir + "/cpu.cfs_quota_us"), "50000\n");
    if (fs::exists(dir + "/cpu.max")) EXPECT_EQ(Read(dir + "/cpu.max"), "50000 100000\n");
    if (fs::exists(dir + "/memory.limit_in_bytes")) {
      EXPECT_EQ(Read(dir + "/memory.limit_in_bytes"), std::to_string(int64_t{32} << 20) + "\n");
    }
    if (fs::exists(dir + "/pids.max")) EXPECT_EQ(Read(dir + "/pids.max"), "64\n");
  }

  // A shell that reads 200 MB into a variable, in the group through the exec helper.
  char tmpl[] = "/tmp/cgroup_oom.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  LaunchSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "grep -q " + name +
                   " /proc/self/cgroup || { echo not in group; exit 3; }; "
                   "x=$(head -c 200000000 /dev/zero | tr '\\000' a); echo survived"};
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  spec.log_path = std::string(tmpl) + "/log";
  spec.cgroup_procs = g->ProcsFiles();
  spec.exec_helper = TRAINYARD_EXEC_HELPER;
  auto p = TaskProcess::Start(spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (int i = 0; i < 3000 && !(*p)->Poll(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE((*p)->exited()) << Read(spec.log_path);
  EXPECT_EQ((*p)->term_signal(), SIGKILL)
      << "exit " << (*p)->exit_code() << ": " << Read(spec.log_path);
  EXPECT_GE(g->OomKills(), 1);
  EXPECT_EQ(Read(spec.log_path).find("survived"), std::string::npos);
  g->KillAll();
  for (int i = 0; i < 500 && !g->Empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(g->Remove().ok());
  for (const std::string& dir : g->dirs()) EXPECT_FALSE(fs::exists(dir)) << dir;
  fs::remove_all(tmpl);
}

}  // namespace
}  // namespace trainyard::agent
