#include "agent/launcher.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

const Timestamp kT0 = Timestamp{} + std::chrono::hours(24 * 365 * 56);

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trainyard-launcher-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  LaunchSpec Spec(std::vector<std::string> argv) {
    LaunchSpec s;
    s.argv = std::move(argv);
    s.env = {{"PATH", "/usr/bin:/bin"}};
    s.log_path = (dir_ / "logs" / "7" / "1" / "rank-0.log").string();
    return s;
  }

  std::string Log() {
    std::ifstream f(dir_ / "logs" / "7" / "1" / "rank-0.log");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

  fs::path dir_;
};

// Polls until the leader has exited; fails the test after a generous deadline.
void WaitExit(TaskProcess& p) {
  auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (!p.Poll()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "task did not exit";
    std::this_thread::sleep_for(milliseconds(5));
  }
}

template <typename Pred>
bool WaitFor(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// Live (non-zombie) processes whose process group is `pgid`, read from /proc: killed
// grandchildren may linger as zombies of whatever reaps orphans here, which is not ours.
int LiveInGroup(pid_t pgid) {
  int n = 0;
  DIR* d = opendir("/proc");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    // pid (comm) state ppid pgrp ...; comm may hold spaces, so parse after the last ')'.
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    long ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != 'Z' && state != 'X') ++n;
  }
  closedir(d);
  return n;
}

TEST_F(LauncherTest, ReportsExitCodes) {
  auto t = TaskProcess::Start(Spec({"/bin/true"}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WaitExit(**t);
  EXPECT_EQ((*t)->exit_code(), 0);
  EXPECT_EQ((*t)->term_signal(), 0);

  auto f = TaskProcess::Start(Spec({"/bin/false"}));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  WaitExit(**f);
  EXPECT_EQ((*f)->exit_code(), 1);

  auto e = TaskProcess::Start(Spec({"/bin/sh", "-c", "exit 42"}));
  ASSERT_TRUE(e.ok());
  WaitExit(**e);
  EXPECT_EQ((*e)->exit_code(), 42);
}

TEST_F(LauncherTest, AppendsStdoutAndStderrToOneLogCreatingDirectories) {
  for (int i = 0; i < 2; ++i) {
    auto t = TaskProcess::Start(Spec({"/bin/sh", "-c", "echo out; echo err >&2"}));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    WaitExit(**t);
  }
  EXPECT_EQ(Log(), "out\nerr\nout\nerr\n");
}

TEST_F(LauncherTest, UsesOnlyTheGivenEnvironmentAndWorkdir) {
  setenv("TRAINYARD_LAUNCHER_TEST_LEAK", "leaked", 1);
  LaunchSpec s = Spec({"sh", "-c", "echo \"$FOO|$TRAINYARD_LAUNCHER_TEST_LEAK|$(pwd)\""});
  s.env["FOO"] = "bar baz";
  s.workdir = dir_.string();
  auto t = TaskProcess::Start(s);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WaitExit(**t);
  EXPECT_EQ(Log(), "bar baz||" + fs::canonical(dir_).string() + "\n");
  unsetenv("TRAINYARD_LAUNCHER_TEST_LEAK");
}

TEST_F(LauncherTest, ExecveFailureIsReportedToTheCaller) {
  auto t = TaskProcess::Start(Spec({"/no/such"}));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "execve /no/such: No such file or directory");

  auto bare = TaskProcess::Start(Spec({"no-such-program-xyz"}));
  ASSERT_FALSE(bare.ok());
  EXPECT_EQ(bare.status().message(), "execve no-such-program-xyz: not found in PATH /usr/bin:/bin");

  LaunchSpec s = Spec({"/bin/true"});
  s.workdir = (dir_ / "missing").string();
  auto c = TaskProcess::Start(s);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "chdir " + s.workdir + ": No such file or directory");
}

TEST_F(LauncherTest, StopKillsTheWholeGroupIncludingGrandchildren) {
  // The shell ignores SIGTERM (and so does its child, which inherits that), so only the
  // SIGKILL at the end of the grace period ends them.
  auto t = TaskProcess::Start(
      Spec({"/bin/sh", "-c", "trap '' TERM; sleep 100 & echo ready; wait; wait"}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  TaskProcess& p = **t;
  ASSERT_TRUE(WaitFor([&] { return Log() == "ready\n"; }));
  EXPECT_EQ(LiveInGroup(p.pid()), 2);

  p.Stop(seconds(5), kT0);
  EXPECT_TRUE(p.stopping());
  p.Tick(kT0 + seconds(4));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(p.Poll()) << "SIGTERM is ignored; nothing may die before the grace ends";
  p.Tick(kT0 + seconds(5));
  WaitExit(p);
  EXPECT_EQ(p.exit_code(), -1);
  EXPECT_EQ(p.term_signal(), SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return LiveInGroup(p.pid()) == 0; }));
}

TEST_F(LauncherTest, StopEndsAGroupThatHonoursSigterm) {
  auto t = TaskProcess::Start(Spec({"/bin/sh", "-c", "sleep 100 & echo ready; wait"}));
  ASSERT_TRUE(t.ok());
  TaskProcess& p = **t;
  ASSERT_TRUE(WaitFor([&] { return Log() == "ready\n"; }));
  p.Stop(seconds(30), kT0);
  WaitExit(p);
  EXPECT_EQ(p.term_signal(), SIGTERM);
  EXPECT_TRUE(WaitFor([&] { return LiveInGroup(p.pid()) == 0; }));
}

TEST_F(LauncherTest, LeaderExitTakesItsStragglersWithIt) {
  auto t = TaskProcess::Start(Spec({"/bin/sh", "-c", "sleep 100 & echo ready"}));
  ASSERT_TRUE(t.ok());
  WaitExit(**t);
  EXPECT_EQ((*t)->exit_code(), 0);
  EXPECT_TRUE(WaitFor([&] { return LiveInGroup((*t)->pid()) == 0; }));
}

TEST_F(LauncherTest, PreemptWritesNoticeSignalsThenEscalates) {
  std::string notice = (dir_ / "preempt" / "notice.json").string();
  auto t = TaskProcess::Start(
      Spec({"/bin/sh", "-c",
            "trap 'echo notice' USR1; trap '' TERM; echo ready; while :; do sleep 0.02; done"}));
  ASSERT_TRUE(t.ok());
  TaskProcess& p = **t;
  ASSERT_TRUE(WaitFor([&] { return Log() == "ready\n"; }));

  ASSERT_TRUE(p.Preempt(SIGUSR1, seconds(30), kT0, notice).ok());
  std::ifstream f(notice);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["deadline_ms"].get<int64_t>(), (kT0 + seconds(30)).time_since_epoch().count());
  EXPECT_EQ(j["signal"].get<int>(), SIGUSR1);
  EXPECT_TRUE(WaitFor([&] { return Log().find("notice\n") != std::string::npos; }));

  // A second preempt or a stop does not restart the clock.
  ASSERT_TRUE(p.Preempt(SIGUSR1, seconds(300), kT0 + seconds(1), notice).ok());
  p.Tick(kT0 + seconds(29));
  p.Tick(kT0 + seconds(30));  // SIGTERM, ignored by the script
  p.Tick(kT0 + seconds(39));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(p.Poll());
  p.Tick(kT0 + seconds(40));  // SIGKILL
  WaitExit(p);
  EXPECT_EQ(p.term_signal(), SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return LiveInGroup(p.pid()) == 0; }));
}

// Requirement: argv and env reach execve as vectors, never through a shell, so shell
// metacharacters are data. Nothing here may run `touch` or `rm`.
TEST_F(LauncherTest, ShellMetacharactersInArgvAndEnvArriveVerbatim) {
  const fs::path marker = dir_ / "pwned";
  const fs::path keep = dir_ / "keep";
  std::ofstream(keep) << "x";
  const std::vector<std::string> args = {
      "$(touch " + marker.string() + "); rm -rf " + keep.string(),
      "`touch " + marker.string() + "`",
      "a;b|c&&d>" + marker.string(),
      "*",
      "~ $HOME ${PATH}",
      "'single' \"double\" \\back",
      "two\nlines",
      "",
  };
  std::vector<std::string> argv = {"/usr/bin/printf", "[%s]\n"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto t = TaskProcess::Start(Spec(argv));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WaitExit(**t);
  EXPECT_EQ((*t)->exit_code(), 0);
  std::string expected;
  for (const std::string& a : args) expected += "[" + a + "]\n";
  EXPECT_EQ(Log(), expected);

  fs::remove(dir_ / "logs" / "7" / "1" / "rank-0.log");
  LaunchSpec s = Spec({"/usr/bin/env"});
  s.env["EVIL"] = "$(touch " + marker.string() + ")`touch " + marker.string() + "`; rm -rf /";
  auto env = TaskProcess::Start(s);
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  WaitExit(**env);
  EXPECT_THAT("\n" + Log(), ::testing::HasSubstr("\nEVIL=" + s.env["EVIL"] + "\n"));

  EXPECT_FALSE(fs::exists(marker)) << "a shell ran the input";
  EXPECT_TRUE(fs::exists(keep)) << "a shell ran the input";
}

TEST_F(LauncherTest, ErrorMessagesNeverShowSecretEnvValues) {
  LaunchSpec s = Spec({"no-such-program-xyz"});
  s.env["PATH"] = "/opt/hf_s3cr3t/bin:/usr/bin";
  s.secret_env = {"PATH"};
  auto t = TaskProcess::Start(s);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "execve no-such-program-xyz: not found in PATH <redacted>");
}

class ConfinedLaunchTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    allowed_ = dir_ / "allowed";
    outside_ = dir_ / "outside";
    fs::create_directories(allowed_ / "work");
    fs::create_directories(outside_);
  }
  LaunchSpec Confined(const std::string& workdir) {
    LaunchSpec s = Spec({"/bin/sh", "-c", "pwd"});
    s.workdir = workdir;
    s.allowed_dirs = {allowed_.string()};
    s.path_env = {"TRAINYARD_CHECKPOINT_DIR"};
    return s;
  }
  fs::path allowed_, outside_;
};

TEST_F(ConfinedLaunchTest, RunsInsideTheAllowedDirs) {
  LaunchSpec s = Confined((allowed_ / "work").string());
  s.env["TRAINYARD_CHECKPOINT_DIR"] = (allowed_ / "ckpt" / "not-yet" / "there").string();
  auto t = TaskProcess::Start(s);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WaitExit(**t);
  EXPECT_EQ(Log(), fs::canonical(allowed_ / "work").string() + "\n");
  // Relative values are relative to the workdir; a symlink that stays inside is fine.
  fs::create_directory_symlink(allowed_ / "work", allowed_ / "alias");
  s = Confined((allowed_ / "alias").string());
  s.env["TRAINYARD_CHECKPOINT_DIR"] = "ckpt";
  auto again = TaskProcess::Start(s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  WaitExit(**again);
}

TEST_F(ConfinedLaunchTest, SymlinkedWorkdirLeadingOutsideIsRefused) {
  fs::create_directory_symlink(outside_, allowed_ / "escape");
  LaunchSpec s = Confined((allowed_ / "escape").string());
  auto t = TaskProcess::Start(s);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.status().message(),
            "working_dir " + s.workdir + " resolves to " + fs::canonical(outside_).string() +
                ", outside the directories this agent allows (--allowed-dirs " + allowed_.string() +
                ")");
  EXPECT_EQ(Log(), "") << "nothing ran";

  // A plain directory outside, and a ".." that climbs out.
  auto plain = TaskProcess::Start(Confined(outside_.string()));
  ASSERT_FALSE(plain.ok());
  EXPECT_THAT(plain.status().message(),
              ::testing::HasSubstr(" is outside the directories this agent allows"));
  auto climb = TaskProcess::Start(Confined((allowed_ / "work" / ".." / "..").string()));
  ASSERT_FALSE(climb.ok());
  EXPECT_THAT(climb.status().message(), ::testing::HasSubstr("outside the directories"));
}

TEST_F(ConfinedLaunchTest, SymlinkedCheckpointDirLeadingOutsideIsRefused) {
  fs::create_directory_symlink(outside_, allowed_ / "ckpt");
  LaunchSpec s = Confined((allowed_ / "work").string());
  s.env["TRAINYARD_CHECKPOINT_DIR"] = (allowed_ / "ckpt" / "vision" / "7").string();
  auto t = TaskProcess::Start(s);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "TRAINYARD_CHECKPOINT_DIR " + s.env["TRAINYARD_CHECKPOINT_DIR"] + " resolves to " +
                (fs::canonical(outside_) / "vision" / "7").string() +
                ", outside the directories this agent allows (--allowed-dirs " + allowed_.string() +
                ")");

  // Relative to the workdir, through the same symlink.
  s.env["TRAINYARD_CHECKPOINT_DIR"] = "../ckpt";
  auto rel = TaskProcess::Start(s);
  ASSERT_FALSE(rel.ok());
  EXPECT_THAT(rel.status().message(), ::testing::HasSubstr("\"..\" component"));

  // A dangling symlink: where it leads is only known once something creates it.
  fs::create_directory_symlink(outside_ / "later", allowed_ / "dangling");
  s.env["TRAINYARD_CHECKPOINT_DIR"] = (allowed_ / "dangling" / "x").string();
  auto dangling = TaskProcess::Start(s);
  ASSERT_FALSE(dangling.ok());
  EXPECT_THAT(dangling.status().message(),
              ::testing::HasSubstr("is a symlink to something that does not exist"));
}

TEST_F(ConfinedLaunchTest, AllowedDirsAreComparedAsRealPaths) {
  // The admin names a symlink to the real directory.
  fs::create_directory_symlink(allowed_, dir_ / "allowed-link");
  LaunchSpec s = Confined((allowed_ / "work").string());
  s.allowed_dirs = {(dir_ / "allowed-link").string()};
  auto t = TaskProcess::Start(s);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  WaitExit(**t);
}

// Through the exec helper: the task runs as the identity it is given, owns its log, and
// a step that fails before the program runs comes back as the start's error.
TEST_F(LauncherTest, RunsAsAnotherUserThroughTheExecHelper) {
  ASSERT_EQ(geteuid(), 0u) << "changing identity needs root: run this test as root (CI does)";
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  LaunchSpec spec = Spec({"/bin/sh", "-c", "id -u; id -g; id -G; touch mine"});
  spec.workdir = dir_.string();
  spec.uid = 2001;
  spec.gid = 2002;
  spec.exec_helper = TRAINYARD_EXEC_HELPER;
  fs::permissions(dir_, fs::perms::others_write, fs::perm_options::add);
  auto p = TaskProcess::Start(spec);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  WaitExit(**p);
  EXPECT_EQ((*p)->exit_code(), 0) << Log();
  EXPECT_EQ(Log(), "2001\n2002\n2002\n");
  struct stat st {};
  ASSERT_EQ(stat(spec.log_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 2001u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((dir_ / "mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 2001u);
  EXPECT_EQ(st.st_gid, 2002u);
}

TEST_F(LauncherTest, ExecHelperFailuresAreTheStartsError) {
  LaunchSpec spec = Spec({"/bin/true"});
  spec.cgroup_procs = {(dir_ / "no-such-group" / "cgroup.procs").string()};
  // Without the helper: said, not run unlimited.
  auto p = TaskProcess::Start(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("needs trainyard-exec"));

  spec.exec_helper = TRAINYARD_EXEC_HELPER;
  p = TaskProcess::Start(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "joining cgroup " + spec.cgroup_procs[0] + ": No such file or directory");

  spec.cgroup_procs.clear();
  spec.uid = 2001;  // no gid
  p = TaskProcess::Start(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), ::testing::HasSubstr("uid and gid go together"));
}

TEST(ResolvePathTest, FollowsSymlinksOfTheExistingPrefix) {
  const fs::path d = fs::temp_directory_path() / ("trainyard-resolve-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "real" / "sub");
  fs::create_directory_symlink(d / "real", d / "link");
  const std::string real = fs::canonical(d / "real").string();
  EXPECT_EQ(*ResolvePath((d / "link" / "sub").string(), "/"), real + "/sub");
  EXPECT_EQ(*ResolvePath((d / "link" / "new" / "deeper").string(), "/"), real + "/new/deeper");
  EXPECT_EQ(*ResolvePath("sub/./x", (d / "link").string()), real + "/sub/x");
  EXPECT_EQ(*ResolvePath("/", "/"), "/");
  EXPECT_FALSE(ResolvePath((d / "real" / ".." / "x").string(), "/").ok());
  fs::remove_all(d);
}

TEST(ResolveProgramTest, SearchesPathForBareNames) {
  EXPECT_EQ(ResolveProgram("/x/y", "/bin"), "/x/y");
  EXPECT_EQ(ResolveProgram("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(ResolveProgram("no-such-program-xyz", "/bin:/usr/bin"), "");
}

}  // namespace
}  // namespace trainyard::agent
