#include "agent/container.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace trainyard::agent {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;

ContainerPlan Plan() {
  ContainerPlan p;
  p.rootfs = "/var/lib/trainyard/images/images/ab/rootfs";
  p.args = {"python3", "train.py"};
  p.env = {{"PATH", "/usr/bin"}, {"RANK", "3"}};
  p.cwd = "/work/run";
  p.uid = 2001;
  p.gid = 2002;
  p.binds = {{"/agent/containers/5.1.0/run", "/run/trainyard", false},
             {"/datasets", "/data", true}};
  p.devices = {{"/dev/nvidia3", 195, 3, 0666}, {"/dev/nvidiactl", 195, 255, 0666}};
  p.shm_bytes = int64_t{8} << 30;
  p.cgroups_path = "/trainyard/j5.1.r0.node-1.77/ty-5.1.0";
  return p;
}

json Mount(const json& config, const std::string& target) {
  for (const json& m : config["mounts"]) {
    if (m["destination"] == target) return m;
  }
  return json();
}

TEST(BundleConfigTest, TheRanksProcessRunsAsItsTenantWithNoPrivileges) {
  json c = json::parse(BundleConfig(Plan()));
  EXPECT_EQ(c["process"]["args"], json({"python3", "train.py"}));
  EXPECT_EQ(c["process"]["env"], json({"PATH=/usr/bin", "RANK=3"}));
  EXPECT_EQ(c["process"]["cwd"], "/work/run");
  EXPECT_EQ(c["process"]["user"], json({{"uid", 2001}, {"gid", 2002}}));
  EXPECT_EQ(c["process"]["terminal"], false);
  EXPECT_EQ(c["process"]["noNewPrivileges"], true);
  EXPECT_TRUE(c["process"]["capabilities"]["bounding"].empty());
  EXPECT_EQ(c["root"], json({{"path", Plan().rootfs}, {"readonly", true}}));
}

TEST(BundleConfigTest, ItSharesTheHostsNetworkAndPidsButNotItsMountsOrIpc) {
  json c = json::parse(BundleConfig(Plan()));
  std::vector<std::string> namespaces;
  for (const json& n : c["linux"]["namespaces"]) namespaces.push_back(n["type"]);
  EXPECT_THAT(namespaces, ElementsAre("mount", "ipc"));
  EXPECT_EQ(c["linux"]["cgroupsPath"], "/trainyard/j5.1.r0.node-1.77/ty-5.1.0");
}

TEST(BundleConfigTest, MountsTheRanksFilesItsBindsAndASizedShm) {
  json c = json::parse(BundleConfig(Plan()));
  EXPECT_EQ(Mount(c, "/run/trainyard")["source"], "/agent/containers/5.1.0/run");
  EXPECT_THAT(Mount(c, "/run/trainyard")["options"], Contains("rw"));
  EXPECT_EQ(Mount(c, "/data")["source"], "/datasets");
  EXPECT_THAT(Mount(c, "/data")["options"], Contains("ro"));
  EXPECT_THAT(Mount(c, "/dev/shm")["options"], Contains("size=8589934592"));
  EXPECT_EQ(Mount(c, "/tmp")["type"], "tmpfs");
  EXPECT_EQ(Mount(c, "/proc")["type"], "proc");

  ContainerPlan small = Plan();
  small.shm_bytes = 0;
  EXPECT_THAT(Mount(json::parse(BundleConfig(small)), "/dev/shm")["options"],
              Contains("size=67108864"));
}

TEST(BundleConfigTest, OnlyThePlacementsGpuDevicesExistAndMayBeOpened) {
  json c = json::parse(BundleConfig(Plan()));
  ASSERT_EQ(c["linux"]["devices"].size(), 2u);
  EXPECT_EQ(c["linux"]["devices"][0]["path"], "/dev/nvidia3");
  EXPECT_EQ(c["linux"]["devices"][0]["major"], 195);
  EXPECT_EQ(c["linux"]["devices"][0]["minor"], 3);
  const json& rules = c["linux"]["resources"]["devices"];
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0], json({{"allow", false}, {"access", "rwm"}}));  // everything else: no
  EXPECT_EQ(rules[1]["minor"], 3);
  EXPECT_EQ(rules[2]["minor"], 255);
}

TEST(ContainerEnvTest, TheImagesEnvironmentUnderTheTasksWithoutTheAgentsOwn) {
  auto env = ContainerEnv({"PATH=/opt/conda/bin:/usr/bin", "LANG=C.UTF-8", "BAD", "=x"},
                          {{"PATH", "/host/bin"},
                           {"HOME", "/root"},
                           {"RANK", "0"},
                           {"LANG", "en_US.UTF-8"},
                           {"TZ", "UTC"}},
                          {{"TZ", "UTC"}}, {"PATH", "HOME", "LANG", "TZ"});
  EXPECT_EQ(env["PATH"], "/opt/conda/bin:/usr/bin");  // the image's, not the agent's
  EXPECT_EQ(env["LANG"], "C.UTF-8");
  EXPECT_EQ(env["TZ"], "UTC");  // the job set it
  EXPECT_EQ(env["RANK"], "0");
  EXPECT_EQ(env["HOME"], "/");
  EXPECT_FALSE(env.count("BAD"));
  EXPECT_FALSE(env.count(""));
}

TEST(ContainerExitStatusTest, StatusesAboveOneHundredTwentyEightAreSignals) {
  EXPECT_EQ(ContainerExitStatus(0), std::make_pair(0, 0));
  EXPECT_EQ(ContainerExitStatus(3), std::make_pair(3, 0));
  EXPECT_EQ(ContainerExitStatus(128), std::make_pair(128, 0));
  EXPECT_EQ(ContainerExitStatus(137), std::make_pair(-1, 9));
  EXPECT_EQ(ContainerExitStatus(143), std::make_pair(-1, 15));
  EXPECT_EQ(ContainerExitStatus(255), std::make_pair(255, 0));
}

}  // namespace
}  // namespace trainyard::agent
