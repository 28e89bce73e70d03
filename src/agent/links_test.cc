#include "agent/links.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;

// A fake /sys/class/infiniband in a fresh temporary directory.
class InfinibandLinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "trainyard-links-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    root_ = dir_ / "infiniband";
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  void Write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  // A port as the kernel shows it; `counters` are file name -> contents.
  void Port(const std::string& device, const std::string& port, const std::string& state,
            const std::string& phys_state, const std::map<std::string, std::string>& counters) {
    const fs::path p = root_ / device / "ports" / port;
    Write(p / "state", state);
    Write(p / "phys_state", phys_state);
    for (const auto& [name, value] : counters) Write(p / "counters" / name, value + "\n");
  }
  std::vector<LinkSample> Read() { return ReadInfinibandLinks(root_.string()); }

  fs::path dir_;
  fs::path root_;
};

TEST_F(InfinibandLinksTest, ActivePortIsUpAndSumsItsErrorCounters) {
  Port("mlx5_0", "1", "4: ACTIVE\n", "5: LinkUp\n",
       {{"symbol_error", "1"},
        {"link_error_recovery", "2"},
        {"link_downed", "3"},
        {"port_rcv_errors", "4"},
        {"port_xmit_discards", "5"},
        {"local_link_integrity_errors", "6"},
        {"excessive_buffer_overrun_errors", "7"},
        {"port_rcv_data", "999999"},  // traffic, not errors
        {"VL15_dropped", "100"}});
  auto links = Read();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].name, "mlx5_0/1");
  EXPECT_EQ(links[0].kind, "ib");
  EXPECT_TRUE(links[0].up);
  EXPECT_EQ(links[0].errors, 28);
}

TEST_F(InfinibandLinksTest, DownPortIsDownAndKeepsItsCounters) {
  Port("mlx5_1", "1", "1: DOWN\n", "3: Disabled\n",
       {{"link_downed", "2"}, {"symbol_error", "65535"}});
  auto links = Read();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_FALSE(links[0].up);
  EXPECT_EQ(links[0].errors, 65537);
}

TEST_F(InfinibandLinksTest, ActiveStateWithoutPhysicalLinkIsDown) {
  Port("mlx5_0", "1", "4: ACTIVE\n", "4: PortConfigurationTraining\n", {});
  auto links = Read();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_FALSE(links[0].up);
}

TEST_F(InfinibandLinksTest, InitializingPortWithoutSubnetManagerIsDown) {
  Port("mlx5_0", "1", "2: INIT\n", "5: LinkUp\n", {});
  EXPECT_FALSE(Read()[0].up);
}

TEST_F(InfinibandLinksTest, MissingCountersDirectoryCountsZero) {
  Port("mlx5_0", "1", "4: ACTIVE\n", "5: LinkUp\n", {});
  ASSERT_FALSE(fs::exists(root_ / "mlx5_0" / "ports" / "1" / "counters"));
  auto links = Read();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_TRUE(links[0].up);
  EXPECT_EQ(links[0].errors, 0);
}

TEST_F(InfinibandLinksTest, MissingPhysStateLeavesTheStateToDecide) {
  Write(root_ / "mlx5_0" / "ports" / "1" / "state", "4: ACTIVE\n");
  auto links = Read();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_TRUE(links[0].up);
}

TEST_F(InfinibandLinksTest, GarbageReadsAsDownAndZeroNeverAsAnError) {
  Port("mlx5_0", "1", "ACTIVE?? \x01\xff", "5: LinkUp\n",
       {{"symbol_error", "lots"}, {"link_downed", "-3"}, {"port_rcv_errors", "7"}});
  Port("mlx5_0", "2", "", "", {{"symbol_error", ""}});
  Write(root_ / "mlx5_0" / "ports" / "3" / "phys_state", "5: LinkUp\n");  // no state file
  auto links = Read();
  ASSERT_EQ(links.size(), 3u);
  EXPECT_FALSE(links[0].up);
  EXPECT_EQ(links[0].errors, 7);
  EXPECT_FALSE(links[1].up);
  EXPECT_EQ(links[1].errors, 0);
  EXPECT_EQ(links[2].name, "mlx5_0/3");
  EXPECT_FALSE(links[2].up);
}

TEST_F(InfinibandLinksTest, AbsentOrUnreadableRootHasNoLinks) {
  EXPECT_TRUE(ReadInfinibandLinks((dir_ / "no-such-dir").string()).empty());
  Write(dir_ / "a-file", "4: ACTIVE\n");
  EXPECT_TRUE(ReadInfinibandLinks((dir_ / "a-file").string()).empty());
  EXPECT_TRUE(Read().empty()) << "an empty class directory";
  fs::create_directories(root_ / "mlx5_0");  // a device without ports/
  Write(root_ / "stray-file", "x");
  EXPECT_TRUE(Read().empty());
}

TEST_F(InfinibandLinksTest, DevicesAndPortsInNaturalOrderRoceIncluded) {
  Port("mlx5_10", "1", "4: ACTIVE\n", "5: LinkUp\n", {});
  Port("mlx5_2", "2", "1: DOWN\n", "2: Polling\n", {});
  Port("mlx5_2", "1", "4: ACTIVE\n", "5: LinkUp\n", {});
  // A RoCE port: Ethernet link layer, the same files.
  Port("mlx5_bond_0", "1", "4: ACTIVE\n", "5: LinkUp\n", {{"port_xmit_discards", "9"}});
  Write(root_ / "mlx5_bond_0" / "ports" / "1" / "link_layer", "Ethernet\n");
  auto links = Read();
  ASSERT_EQ(links.size(), 4u);
  EXPECT_EQ(links[0].name, "mlx5_2/1");
  EXPECT_EQ(links[1].name, "mlx5_2/2");
  EXPECT_EQ(links[2].name, "mlx5_10/1");
  EXPECT_EQ(links[3].name, "mlx5_bond_0/1");
  EXPECT_EQ(links[3].kind, "ib");
  EXPECT_TRUE(links[3].up);
  EXPECT_EQ(links[3].errors, 9);
}

TEST_F(InfinibandLinksTest, FollowsDeviceSymlinksAsSysfsHasThem) {
  // /sys/class/infiniband/mlx5_0 -> ../../devices/pci0000:00/.../infiniband/mlx5_0
  const fs::path real = dir_ / "devices" / "pci0000:00" / "infiniband" / "mlx5_0";
  Write(real / "ports" / "1" / "state", "4: ACTIVE\n");
  Write(real / "ports" / "1" / "phys_state", "5: LinkUp\n");
  Write(real / "ports" / "1" / "counters" / "link_downed", "1\n");
  fs::create_directory_symlink(real, root_ / "mlx5_0");
  auto links = Read();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].name, "mlx5_0/1");
  EXPECT_TRUE(links[0].up);
  EXPECT_EQ(links[0].errors, 1);
}

TEST_F(InfinibandLinksTest, ReadsAtMost64Ports) {
  for (int d = 0; d < 40; ++d) {
    for (const char* p : {"1", "2"}) {
      Port("mlx5_" + std::to_string(d), p, "4: ACTIVE\n", "5: LinkUp\n", {});
    }
  }
  auto links = Read();
  ASSERT_EQ(links.size(), kMaxInfinibandLinks);
  EXPECT_EQ(links.back().name, "mlx5_31/2");
}

TEST_F(InfinibandLinksTest, HugeCountersSaturateInsteadOfOverflowing) {
  Port(
      "mlx5_0", "1", "4: ACTIVE\n", "5: LinkUp\n",
      {{"port_rcv_errors", "9223372036854775807"}, {"port_xmit_discards", "18446744073709551615"}});
  EXPECT_EQ(Read()[0].errors, std::numeric_limits<int64_t>::max());
}

TEST_F(InfinibandLinksTest, CountersAreReadAgainAtEverySample) {
  Port("mlx5_0", "1", "4: ACTIVE\n", "5: LinkUp\n", {{"symbol_error", "1"}});
  EXPECT_EQ(Read()[0].errors, 1);
  Port("mlx5_0", "1", "1: DOWN\n", "2: Polling\n", {{"symbol_error", "5"}, {"link_downed", "1"}});
  auto links = Read();
  EXPECT_FALSE(links[0].up);
  EXPECT_EQ(links[0].errors, 6);
}

TEST(KeepLinksSeenUpTest, LeavesOutLinksNeverUpAndKeepsThoseOnceUp) {
  std::set<std::string> seen_up;
  auto names = [](const std::vector<LinkSample>& links) {
    std::vector<std::string> out;
    for (const LinkSample& l : links) out.push_back(l.name + (l.up ? "+" : "-"));
    return out;
  };
  const LinkSample a_up{"a", "ib", true, 0}, a_down{"a", "ib", false, 3};
  const LinkSample b_up{"b", "nvlink", true, 0}, b_down{"b", "nvlink", false, 0};
  EXPECT_EQ(names(KeepLinksSeenUp({a_down, b_up}, seen_up)), std::vector<std::string>{"b+"});
  EXPECT_EQ(names(KeepLinksSeenUp({a_up, b_down}, seen_up)),
            (std::vector<std::string>{"a+", "b-"}));
  auto links = KeepLinksSeenUp({a_down, b_down}, seen_up);
  EXPECT_EQ(names(links), (std::vector<std::string>{"a-", "b-"}));
  EXPECT_EQ(links[0].errors, 3);
  EXPECT_EQ(names(KeepLinksSeenUp({}, seen_up)), std::vector<std::string>{});
  EXPECT_EQ(names(KeepLinksSeenUp({b_down}, seen_up)), std::vector<std::string>{"b-"});
}

}  // namespace
}  // namespace trainyard::agent
