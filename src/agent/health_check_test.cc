#include "agent/health_check.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
const Timestamp kT0 = Timestamp{} + std::chrono::hours(24 * 365 * 56);

// Whether `pid` runs (a zombie does not).
bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

class HealthCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trainyard-health-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An executable shell script in the test's directory.
  std::string Script(const std::string& name, const std::string& body) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
    return path;
  }
  HealthCheckOptions Options(const std::string& program) {
    HealthCheckOptions o;
    o.program = program;
    o.node_name = "node-7";
    o.timeout = std::chrono::seconds(30);
    o.now = [] { return kT0; };
    return o;
  }

  fs::path dir_;
};

TEST_F(HealthCheckTest, APassingCheckIsOkWithItsOutputAndEnvironment) {
  auto o =
      Options(Script("check", R"(echo "  node=$TRAINYARD_NODE trigger=$TRAINYARD_HEALTH_TRIGGER"
echo "home=${HOME:-unset} path=${PATH:+set}" >&2
exit 0)"));
  HealthCheckResult r = RunHealthCheck(o, "join");
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.output, "node=node-7 trigger=join\nhome=unset path=set");
  EXPECT_EQ(r.at_ms, kT0.time_since_epoch().count());
  EXPECT_EQ(r.trigger, "join");
}

TEST_F(HealthCheckTest, AFailingCheckFailsWithWhatItSaid) {
  auto o = Options(Script("check", "echo 'GPU 3: XID 79 seen'; echo 'ib0 down' >&2; exit 1"));
  HealthCheckResult r = RunHealthCheck(o, "periodic");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.output, "GPU 3: XID 79 seen\nib0 down");
  EXPECT_EQ(r.trigger, "periodic");

  r = RunHealthCheck(Options(Script("quiet", "exit 3")), "periodic");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.output, "health check exited with status 3");
  r = RunHealthCheck(Options(Script("killed", "kill -9 $$")), "periodic");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.output, "health check killed by signal 9");
}

TEST_F(HealthCheckTest, ACheckPastItsTimeoutIsKilledWithItsGroup) {
  // The check's child would outlive it but for the SIGKILL to the whole group.
  const std::string pid_file = (dir_ / "child.pid").string();
  auto o = Options(Script("check", "sleep 5 & echo $! > " + pid_file + "; echo started; wait"));
  o.timeout = std::chrono::milliseconds(200);
  const auto started = std::chrono::steady_clock::now();
  HealthCheckResult r = RunHealthCheck(o, "periodic");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(4));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.output, "health check timed out after 200ms");
  pid_t child = 0;
  std::ifstream(pid_file) >> child;
  ASSERT_GT(child, 0);
  // Killed (a zombie until whatever adopted it reaps it).
  for (int i = 0; i < 500 && Alive(child); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(Alive(child)) << "the check's child survived";

  o.program = Script("slow", "sleep 5");
  EXPECT_EQ(RunHealthCheck(o, "join").output, "health check timed out after 200ms");
}

TEST_F(HealthCheckTest, LongOutputKeepsTheFirstPartAndSaysItWasCut) {
  auto o = Options(Script("check",
                          "i=0; while [ $i -lt 2000 ]; do echo \"line $i\"; "
                          "i=$((i+1)); done; exit 1"));
  HealthCheckResult r = RunHealthCheck(o, "periodic");
  EXPECT_FALSE(r.ok);
  EXPECT_LE(r.output.size(), kMaxHealthCheckOutput);
  EXPECT_EQ(r.output.substr(0, 14), "line 0\nline 1\n");
  EXPECT_NE(r.output.find("[output truncated: "), std::string::npos) << r.output;
}

TEST_F(HealthCheckTest, AProgramThatCannotStartFails) {
  auto o = Options((dir_ / "gone").string());
  HealthCheckResult r = RunHealthCheck(o, "join");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.output.find("could not start"), std::string::npos) << r.output;
}

TEST_F(HealthCheckTest, CheckProgramValidation) {
  EXPECT_TRUE(CheckHealthCheckProgram("--health-check", Script("ok", "exit 0")).ok());
  EXPECT_EQ(CheckHealthCheckProgram("--health-check", (dir_ / "none").string()).message(),
            "--health-check: " + (dir_ / "none").string() + ": no such file");
  const std::string plain = (dir_ / "plain").string();
  std::ofstream(plain) << "exit 0\n";
  EXPECT_EQ(CheckHealthCheckProgram("--health-check", plain).message(),
            "--health-check: " + plain + ": not executable (chmod +x it)");
  EXPECT_EQ(CheckHealthCheckProgram("--health-check", dir_.string()).message(),
            "--health-check: " + dir_.string() + ": not a regular file");
}

TEST_F(HealthCheckTest, CheckerRunsOnItsThreadAndCoalescesRequests) {
  // Each run appends its trigger; the first blocks until `go` exists.
  const std::string log = (dir_ / "runs").string();
  const std::string go = (dir_ / "go").string();
  auto o =
      Options(Script("check", "echo $TRAINYARD_HEALTH_TRIGGER >> " + log + "; while [ ! -e " + go +
                                  " ]; do sleep 0.01; done; "
                                  "echo fine"));
  HealthChecker checker(o);
  EXPECT_FALSE(checker.Latest().has_value());
  checker.Request("join");
  // Wait until the first run has begun, then ask twice more: one more run follows it.
  for (int i = 0; i < 1000 && !fs::exists(log); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  checker.Request("periodic");
  checker.Request("task-failed");
  EXPECT_EQ(checker.runs(), 0) << "Request does not wait for the check";
  std::ofstream(go) << "";
  for (int i = 0; i < 1000 && checker.runs() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(checker.runs(), 2);
  auto latest = checker.Latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_TRUE(latest->ok);
  EXPECT_EQ(latest->output, "fine");
  EXPECT_EQ(latest->trigger, "task-failed");
  std::ifstream in(log);
  std::string runs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(runs, "join\ntask-failed\n");
}

TEST_F(HealthCheckTest, DestroyingTheCheckerKillsACheckUnderWay) {
  auto o = Options(Script("check", "sleep 30"));
  const auto started = std::chrono::steady_clock::now();
  {
    HealthChecker checker(o);
    checker.Request("join");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

}  // namespace
}  // namespace trainyard::agent
