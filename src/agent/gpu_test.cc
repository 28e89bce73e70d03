#include "agent/gpu.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "agent/links.h"
#include "agent/nvml.h"
#include "core/names.h"

namespace trainyard::agent {
namespace {

using std::chrono::seconds;
const Timestamp kT0 = Timestamp{} + std::chrono::hours(24 * 365 * 56);

TEST(GpuTypeFromModelNameTest, MapsDriverNamesToTypes) {
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA H100 PCIe"), "H100");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA H200"), "H200");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA GH200 480GB"), "GH200");
  EXPECT_EQ(GpuTypeFromModelName("Tesla V100-SXM2-16GB"), "V100");
  EXPECT_EQ(GpuTypeFromModelName("Tesla V100S-PCIE-32GB"), "V100S");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA A100 80GB PCIe"), "A100");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA A10G"), "A10G");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA L40S"), "L40S");
  EXPECT_EQ(GpuTypeFromModelName("Tesla P40"), "P40");
  EXPECT_EQ(GpuTypeFromModelName("Tesla T4"), "T4");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA B200"), "B200");
  EXPECT_EQ(GpuTypeFromModelName("  NVIDIA H100 NVL "), "H100");
}

TEST(GpuTypeFromModelNameTest, UnknownModelsBecomeValidNames) {
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA RTX A6000"), "RTX-A6000");
  EXPECT_EQ(GpuTypeFromModelName("NVIDIA GeForce RTX 4090"), "RTX-4090");
  EXPECT_EQ(GpuTypeFromModelName("Quadro RTX 8000 (rev 2)"), "RTX-8000-rev-2");
  EXPECT_EQ(GpuTypeFromModelName(""), "unknown");
  EXPECT_EQ(GpuTypeFromModelName("???"), "unknown");
  std::string long_name = GpuTypeFromModelName(std::string(200, 'x'));
  EXPECT_TRUE(ValidateName("gpu_type", long_name).ok());
}

TEST(SimulatedGpusTest, DiscoversGpusOfTheType) {
  auto gpus = SimulatedGpus::Create(4, "H100", "node-1", 1);
  ASSERT_TRUE(gpus.ok());
  auto devices = (*gpus)->Discover();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 4u);
  EXPECT_EQ((*devices)[3].index, 3);
  EXPECT_EQ((*devices)[0].type, "H100");
  EXPECT_EQ((*devices)[0].memory_mib, 81559);
  EXPECT_EQ((*devices)[0].uuid.substr(0, 4), "GPU-");
  EXPECT_NE((*devices)[0].uuid, (*devices)[1].uuid);
  // Stable across restarts of the same node, different on another node.
  auto again = SimulatedGpus::Create(4, "H100", "node-1", 99);
  auto other = SimulatedGpus::Create(4, "H100", "node-2", 1);
  EXPECT_EQ((*(*again)->Discover())[0].uuid, (*devices)[0].uuid);
  EXPECT_NE((*(*other)->Discover())[0].uuid, (*devices)[0].uuid);
}

TEST(SimulatedGpusTest, RejectsUnknownTypeNamingKnownOnes) {
  auto gpus = SimulatedGpus::Create(2, "X999", "n", 1);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().message(),
            "--gpu-type: unknown GPU type \"X999\" for simulated GPUs; known: " + KnownGpuTypes());
  EXPECT_FALSE(SimulatedGpus::Create(65, "H100", "n", 1).ok());
}

TEST(SimulatedGpusTest, TelemetryFollowsTheWork) {
  auto created = SimulatedGpus::Create(2, "H100", "node-1", 7);
  SimulatedGpus& gpus = **created;
  auto idle = gpus.Sample(kT0);
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(*(*idle)[0].util_pct, 0.0);
  EXPECT_NEAR(*(*idle)[0].temp_c, 35.0, 1.0);
  EXPECT_EQ(*(*idle)[0].mem_used_mib, 0);

  gpus.SetBusyGpus({0});
  std::vector<GpuSample> s;
  for (int i = 1; i <= 300; ++i) s = *gpus.Sample(kT0 + seconds(i));
  EXPECT_GE(*s[0].util_pct, 90.0);
  EXPECT_LE(*s[0].util_pct, 99.0);
  EXPECT_GT(*s[0].temp_c, 70.0);
  EXPECT_LT(*s[0].temp_c, 80.0);
  EXPECT_GT(*s[0].power_w, 600.0);
  EXPECT_GT(*s[0].mem_used_mib, 60000);
  EXPECT_EQ(*s[0].sm_clock_mhz, 1980);
  EXPECT_FALSE(*s[0].throttled);
  // The other GPU stayed idle.
  EXPECT_EQ(*s[1].util_pct, 0.0);
  EXPECT_NEAR(*s[1].temp_c, 35.0, 1.0);
  EXPECT_NEAR(*s[1].power_w, 70.0, 1.0);

  // Heating takes time: one second in, the GPU is far from its busy temperature.
  auto fresh = SimulatedGpus::Create(1, "H100", "node-1", 7);
  (*fresh)->SetBusyGpus({0});
  (void)(*fresh)->Sample(kT0);
  auto one = *(*fresh)->Sample(kT0 + seconds(1));
  EXPECT_LT(*one[0].temp_c, 40.0);
}

TEST(SimulatedGpusTest, SameSeedSameTelemetry) {
  auto a = SimulatedGpus::Create(2, "A100", "n", 42);
  auto b = SimulatedGpus::Create(2, "A100", "n", 42);
  (*a)->SetBusyGpus({0, 1});
  (*b)->SetBusyGpus({0, 1});
  for (int i = 0; i < 10; ++i) {
    auto sa = *(*a)->Sample(kT0 + seconds(i));
    auto sb = *(*b)->Sample(kT0 + seconds(i));
    EXPECT_EQ(*sa[1].util_pct, *sb[1].util_pct);
    EXPECT_EQ(*sa[1].temp_c, *sb[1].temp_c);
  }
}

TEST(SimulatedGpusTest, FaultsShowInTelemetry) {
  auto created = SimulatedGpus::Create(4, "H100", "node-1", 3);
  SimulatedGpus& gpus = **created;
  gpus.SetBusyGpus({0, 1, 2, 3});
  ASSERT_TRUE(gpus.SetFaults(0, {.xid = 79}).ok());
  ASSERT_TRUE(gpus.SetFaults(0, {.xid = 48, .ecc_uncorrectable = 3}).ok());
  ASSERT_TRUE(gpus.SetFaults(1, {.thermal = true}).ok());
  ASSERT_TRUE(gpus.SetFaults(2, {.slow = true}).ok());
  ASSERT_TRUE(gpus.SetFaults(3, {.hang = true}).ok());
  EXPECT_EQ(gpus.SetFaults(4, {}).message(), "gpu: no simulated GPU 4; this node has 4");
  std::vector<GpuSample> s;
  for (int i = 0; i <= 300; ++i) s = *gpus.Sample(kT0 + seconds(i));
  EXPECT_EQ(*s[0].xid_last, 48);
  EXPECT_EQ(*s[0].xid_count, 2);
  EXPECT_EQ(*s[0].ecc_uncorrectable, 3);
  EXPECT_TRUE(*s[1].throttled);
  EXPECT_GT(*s[1].temp_c, 88.0);
  EXPECT_LT(*s[1].sm_clock_mhz, 1980);
  EXPECT_GE(*s[2].util_pct, 55.0);
  EXPECT_LE(*s[2].util_pct, 65.0);
  EXPECT_LT(*s[2].sm_clock_mhz, 1980);
  EXPECT_EQ(*s[3].util_pct, 0.0);
  EXPECT_GT(*s[3].mem_used_mib, 0) << "a hung GPU still holds its memory";
  // Clearing a fault keeps the counters (they count events, not state).
  ASSERT_TRUE(gpus.SetFaults(0, {}).ok());
  s = *gpus.Sample(kT0 + seconds(301));
  EXPECT_EQ(*s[0].xid_count, 2);
  EXPECT_EQ(*s[0].ecc_uncorrectable, 3);
}

TEST(SimulatedGpusTest, AppliedFaultsShowInTelemetry) {
  auto created = SimulatedGpus::Create(4, "H100", "node-1", 3);
  SimulatedGpus& gpus = **created;
  gpus.SetBusyGpus({0, 1, 2, 3});
  const std::vector<FaultSpec> faults = {{"f-1", FaultKind::kXid, 0, 0, 0},
                                         {"f-2", FaultKind::kEcc, 1, 0, 0},
                                         {"f-3", FaultKind::kDataStall, 2, 0, 0},
                                         {"f-4", FaultKind::kSlow, 3, 0, 0},
                                         {"f-5", FaultKind::kLossNan, 0, 0, 0}};
  gpus.ApplyFaults(faults);
  // The same set again (the server resends it) counts no new events.
  gpus.ApplyFaults(faults);
  std::vector<GpuSample> s;
  for (int i = 0; i <= 60; ++i) s = *gpus.Sample(kT0 + seconds(i));
  EXPECT_EQ(*s[0].xid_last, 79);
  EXPECT_EQ(*s[0].xid_count, 1);
  EXPECT_EQ(*s[0].ecc_uncorrectable, 0);
  EXPECT_GE(*s[0].util_pct, 90.0) << "loss-nan is the trainer's, not the GPU's";
  EXPECT_EQ(*s[1].xid_last, 48);
  EXPECT_EQ(*s[1].xid_count, 1);
  EXPECT_EQ(*s[1].ecc_uncorrectable, 1);
  EXPECT_GE(*s[2].util_pct, 2.0);
  EXPECT_LE(*s[2].util_pct, 5.0);
  EXPECT_EQ(*s[2].sm_clock_mhz, 1980) << "a starved GPU keeps its clocks";
  EXPECT_GE(*s[3].util_pct, 55.0);
  EXPECT_LE(*s[3].util_pct, 65.0);
  EXPECT_LT(*s[3].sm_clock_mhz, 1980);

  // Dropping one fault and keeping the other leaves the counters and ends the state.
  gpus.ApplyFaults({faults[0]});
  s = *gpus.Sample(kT0 + seconds(61));
  EXPECT_EQ(*s[0].xid_count, 1);
  EXPECT_EQ(*s[1].xid_count, 1);
  EXPECT_GE(*s[2].util_pct, 90.0);
  // A new id is a new event; a node-wide one lands on every GPU.
  gpus.ApplyFaults({faults[0], {"f-6", FaultKind::kXid, -1, 0, 0}});
  s = *gpus.Sample(kT0 + seconds(62));
  EXPECT_EQ(*s[0].xid_count, 2);
  EXPECT_EQ(*s[3].xid_count, 1);
  EXPECT_EQ(*s[3].xid_last, 79);
  // Cleared, and sent again later with an old id: still no new event.
  gpus.ApplyFaults({});
  gpus.ApplyFaults({faults[0]});
  s = *gpus.Sample(kT0 + seconds(63));
  EXPECT_EQ(*s[0].xid_count, 2);
}

TEST(SimulatedGpusTest, NodeWideThermalAndHang) {
  auto created = SimulatedGpus::Create(2, "H100", "node-1", 3);
  SimulatedGpus& gpus = **created;
  gpus.SetBusyGpus({0, 1});
  gpus.ApplyFaults({{"t", FaultKind::kThermal, -1, 0, 0}, {"h", FaultKind::kHang, 1, 0, 0}});
  std::vector<GpuSample> s;
  for (int i = 0; i <= 300; ++i) s = *gpus.Sample(kT0 + seconds(i));
  for (const auto& g : s) {
    EXPECT_TRUE(*g.throttled);
    EXPECT_GT(*g.temp_c, 88.0);
  }
  EXPECT_EQ(*s[1].util_pct, 0.0);
  EXPECT_GT(*s[0].util_pct, 0.0);
}

TEST(SimulatedGpusTest, LinkDownTakesIb0DownAndCountsErrorsPerSample) {
  auto created = SimulatedGpus::Create(2, "H100", "node-1", 3);
  SimulatedGpus& gpus = **created;
  auto links = gpus.SampleLinks();
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[0].name, "ib0");
  EXPECT_EQ(links[0].kind, "ib");
  EXPECT_TRUE(links[0].up);
  EXPECT_EQ(links[0].errors, 0);
  EXPECT_EQ(links[1].name, "nvlink0");
  EXPECT_EQ(links[1].kind, "nvlink");
  EXPECT_TRUE(links[1].up);

  gpus.ApplyFaults({{"l", FaultKind::kLinkDown, -1, 0, 0}});
  links = gpus.SampleLinks();
  EXPECT_FALSE(links[0].up);
  EXPECT_EQ(links[0].errors, 1);
  links = gpus.SampleLinks();
  EXPECT_EQ(links[0].errors, 2);
  EXPECT_TRUE(links[1].up);
  gpus.ApplyFaults({});
  links = gpus.SampleLinks();
  EXPECT_TRUE(links[0].up);
  EXPECT_EQ(links[0].errors, 2) << "errors count since the agent started";
}

// A fake /sys/class/infiniband: mlx5_0/1 active with 2 errors, mlx5_0/2 with no cable.
class FakeInfiniband {
 public:
  FakeInfiniband() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "trainyard-gpu-ib-XXXXXX").string();
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    SetPort("1", true);
    const std::filesystem::path counters = root_ / "mlx5_0" / "ports" / "1" / "counters";
    std::filesystem::create_directories(counters);
    std::ofstream(counters / "symbol_error") << "2\n";
    SetPort("2", false);
  }
  ~FakeInfiniband() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  void SetPort(const std::string& port, bool up) {
    const std::filesystem::path dir = root_ / "mlx5_0" / "ports" / port;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "state") << (up ? "4: ACTIVE\n" : "1: DOWN\n");
    std::ofstream(dir / "phys_state") << (up ? "5: LinkUp\n" : "2: Polling\n");
  }
  std::string root() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

TEST(NoGpusTest, ReportsInfinibandPortsOnceSeenUpAndIgnoresFaults) {
  FakeInfiniband ib;
  NoGpus none(ib.root());
  none.ApplyFaults({{"l", FaultKind::kLinkDown, -1, 0, 0}});
  auto links = none.SampleLinks();
  ASSERT_EQ(links.size(), 1u) << "mlx5_0/2 has never been up: nothing is plugged in";
  EXPECT_EQ(links[0].name, "mlx5_0/1");
  EXPECT_EQ(links[0].kind, "ib");
  EXPECT_TRUE(links[0].up) << "a real node's links do not show injected faults";
  EXPECT_EQ(links[0].errors, 2);

  ib.SetPort("2", true);
  links = none.SampleLinks();
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[1].name, "mlx5_0/2");
  EXPECT_TRUE(links[1].up);
  ib.SetPort("1", false);
  ib.SetPort("2", false);
  links = none.SampleLinks();
  ASSERT_EQ(links.size(), 2u) << "links seen up are reported down";
  EXPECT_FALSE(links[0].up);
  EXPECT_FALSE(links[1].up);
}

TEST(NoGpusTest, NodeWithoutInfinibandHasNoLinks) {
  NoGpus none("/nonexistent/sys/class/infiniband");
  EXPECT_TRUE(none.SampleLinks().empty());
}

TEST(NvmlGpusTest, MissingLibrarySaysWhatToDo) {
  auto nvml = NvmlGpus::Open("libnvidia-ml-does-not-exist.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(nvml.status().message(),
            "NVML: libnvidia-ml-does-not-exist.so.1 not found (no NVIDIA driver?); use "
            "--simulated-gpus N to run without GPUs");
}

TEST(NvmlGpusTest, DefaultLibraryAbsentOnThisMachineOrLoads) {
  // The build machines have no driver; on one that has, Open must succeed instead.
  auto nvml = NvmlGpus::Open();
  if (!nvml.ok()) {
    EXPECT_EQ(nvml.status().message(),
              "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver?); use --simulated-gpus N "
              "to run without GPUs");
  }
}

TEST(NvmlGpusTest, LibraryWithoutNvmlIsRejected) {
  auto nvml = NvmlGpus::Open("libm.so.6");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(nvml.status().message().find("libm.so.6 has no nvmlInit_v2"), std::string::npos)
      << nvml.status().message();
}

TEST(NvmlGpusTest, ReadsDevicesAndTelemetryThroughTheLoadedLibrary) {
  auto nvml = NvmlGpus::Open(TRAINYARD_FAKE_NVML);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto devices = (*nvml)->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[0].type, "H100");
  EXPECT_EQ((*devices)[0].model_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ((*devices)[0].uuid, "GPU-00000000-1111-2222-3333-444444444444");
  EXPECT_EQ((*devices)[0].memory_mib, 81559);
  EXPECT_EQ((*devices)[1].type, "V100");
  EXPECT_EQ((*devices)[0].minor, 4) << "/dev/nvidia4: NVML's minor number, not the index";
  EXPECT_EQ((*devices)[1].minor, 2);

  auto samples = (*nvml)->Sample(kT0);
  ASSERT_TRUE(samples.ok());
  const GpuSample& a = (*samples)[0];
  EXPECT_EQ(*a.util_pct, 97.0);
  EXPECT_EQ(*a.mem_used_mib, 1024);
  EXPECT_EQ(*a.temp_c, 71.0);
  EXPECT_DOUBLE_EQ(*a.power_w, 612.5);
  EXPECT_EQ(*a.sm_clock_mhz, 1980);
  EXPECT_FALSE(*a.throttled);
  EXPECT_EQ(*a.ecc_uncorrectable, 2);
  EXPECT_FALSE(a.xid_count.has_value());
  const GpuSample& b = (*samples)[1];
  EXPECT_TRUE(*b.throttled);
  EXPECT_FALSE(b.ecc_uncorrectable.has_value()) << "unsupported ECC is unavailable, not an error";
}

// The fake library's NVLink controls (fake_nvml.cc), reset to its defaults around a
// test. Holding the library open keeps its state between NvmlGpus instances.
class FakeNvLinks {
 public:
  FakeNvLinks() : handle_(dlopen(TRAINYARD_FAKE_NVML, RTLD_NOW | RTLD_LOCAL)) {
    EXPECT_NE(handle_, nullptr) << dlerror();
    reset_ = reinterpret_cast<void (*)()>(dlsym(handle_, "fakeNvmlReset"));
    set_state_ = reinterpret_cast<void (*)(unsigned, unsigned, int)>(
        dlsym(handle_, "fakeNvmlSetNvLinkState"));
    set_counter_ = reinterpret_cast<void (*)(unsigned, unsigned, int, unsigned long long)>(
        dlsym(handle_, "fakeNvmlSetNvLinkErrorCounter"));
    set_lost_ = reinterpret_cast<void (*)(unsigned, int)>(dlsym(handle_, "fakeNvmlSetGpuLost"));
    EXPECT_TRUE(reset_ && set_state_ && set_counter_ && set_lost_);
    reset_();
  }
  ~FakeNvLinks() {
    reset_();
    dlclose(handle_);
  }
  void SetState(unsigned gpu, unsigned link, bool active) { set_state_(gpu, link, active); }
  void SetCounter(unsigned gpu, unsigned link, int counter, unsigned long long v) {
    set_counter_(gpu, link, counter, v);
  }
  void SetLost(unsigned gpu, bool lost) { set_lost_(gpu, lost); }

 private:
  void* handle_;
  void (*reset_)() = nullptr;
  void (*set_state_)(unsigned, unsigned, int) = nullptr;
  void (*set_counter_)(unsigned, unsigned, int, unsigned long long) = nullptr;
  void (*set_lost_)(unsigned, int) = nullptr;
};

TEST(NvmlGpusTest, ReportsNvLinksThenInfinibandPorts) {
  FakeNvLinks fake;
  FakeInfiniband ib;
  auto nvml = NvmlGpus::Open(TRAINYARD_FAKE_NVML, ib.root());
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto links = (*nvml)->SampleLinks();
  // GPU 0 has two NVLinks, the second never active yet; GPU 1 has none (NOT_SUPPORTED);
  // indices 2..17 do not exist. mlx5_0/2 has never been up either.
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(links[0].name, "gpu0/nvlink0");
  EXPECT_EQ(links[0].kind, "nvlink");
  EXPECT_TRUE(links[0].up);
  EXPECT_EQ(links[0].errors, 6) << "replay 3 + recovery 1 + CRC flit 2 + CRC data 0";
  EXPECT_EQ(links[1].name, "mlx5_0/1");
  EXPECT_EQ(links[1].kind, "ib");
  EXPECT_EQ(links[1].errors, 2);

  // The second NVLink comes up (say the fabric manager started late) and goes down.
  fake.SetState(0, 1, true);
  links = (*nvml)->SampleLinks();
  ASSERT_EQ(links.size(), 3u);
  EXPECT_EQ(links[1].name, "gpu0/nvlink1");
  EXPECT_TRUE(links[1].up);
  EXPECT_EQ(links[1].errors, 4) << "an unsupported counter counts nothing";
  fake.SetState(0, 1, false);
  links = (*nvml)->SampleLinks();
  ASSERT_EQ(links.size(), 3u);
  EXPECT_EQ(links[1].name, "gpu0/nvlink1");
  EXPECT_FALSE(links[1].up);
}

TEST(NvmlGpusTest, NvLinkStateAndCountersAreReadAtEverySample) {
  FakeNvLinks fake;
  auto nvml = NvmlGpus::Open(TRAINYARD_FAKE_NVML, "/nonexistent");
  ASSERT_TRUE(nvml.ok());
  fake.SetState(0, 1, true);
  ASSERT_EQ((*nvml)->SampleLinks().size(), 2u);
  fake.SetCounter(0, 0, 0, 10);  // replays
  fake.SetState(0, 0, false);
  fake.SetCounter(0, 1, 1, 5);  // recoveries
  auto links = (*nvml)->SampleLinks();
  ASSERT_EQ(links.size(), 2u);
  EXPECT_FALSE(links[0].up);
  EXPECT_EQ(links[0].errors, 13);
  EXPECT_TRUE(links[1].up);
  EXPECT_EQ(links[1].errors, 5);
  // Links are looked for once: one appearing later (it cannot, on real GPUs) is not.
  fake.SetState(0, 5, true);
  EXPECT_EQ((*nvml)->SampleLinks().size(), 2u);
}

TEST(NvmlGpusTest, LinksOfALostGpuStayAndReadDownWithTheirLastCounts) {
  FakeNvLinks fake;
  auto nvml = NvmlGpus::Open(TRAINYARD_FAKE_NVML, "/nonexistent");
  ASSERT_TRUE(nvml.ok());
  fake.SetState(0, 1, true);
  ASSERT_EQ((*nvml)->SampleLinks().size(), 2u);
  fake.SetLost(0, true);
  auto links = (*nvml)->SampleLinks();
  ASSERT_EQ(links.size(), 2u);
  EXPECT_FALSE(links[0].up);
  EXPECT_EQ(links[0].errors, 6) << "not a drop to 0, which would read as a counter restart";
  EXPECT_FALSE(links[1].up);
  EXPECT_EQ(links[1].errors, 4);
  fake.SetLost(0, false);
  links = (*nvml)->SampleLinks();
  EXPECT_TRUE(links[0].up);
  EXPECT_EQ(links[0].errors, 6);
}

TEST(NvmlGpusTest, GpuLostAtFirstSampleHasItsNvLinksLookedForAgain) {
  FakeNvLinks fake;
  fake.SetLost(0, true);
  auto nvml = NvmlGpus::Open(TRAINYARD_FAKE_NVML, "/nonexistent");
  ASSERT_TRUE(nvml.ok());
  EXPECT_TRUE((*nvml)->SampleLinks().empty());
  fake.SetLost(0, false);
  auto links = (*nvml)->SampleLinks();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].name, "gpu0/nvlink0");
  EXPECT_TRUE(links[0].up);
}

TEST(NvmlGpusTest, DriverWithoutNvLinkFunctionsLoadsAndReportsInfinibandOnly) {
  FakeInfiniband ib;
  auto nvml = NvmlGpus::Open(TRAINYARD_FAKE_NVML_WITHOUT_NVLINK, ib.root());
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  ASSERT_EQ((*(*nvml)->Discover()).size(), 2u);
  auto links = (*nvml)->SampleLinks();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].name, "mlx5_0/1");
}

}  // namespace
}  // namespace trainyard::agent
