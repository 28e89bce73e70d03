// GPU discovery and telemetry as the agent sees it: a GpuBackend lists the node's GPUs
// once and samples their telemetry, and that of the node's network links, at every
// heartbeat.
//
// Two backends: NVML (nvml.h, the real thing, loaded at run time) and SimulatedGpus
// (below), which models N GPUs of one type and two links whose telemetry follows what
// runs on them and which injected faults (faults.h) make misbehave. Telemetry fields a
// backend cannot read for one GPU (ECC on a consumer card, XIDs without an event
// source) are empty optionals, "unavailable", never an error for the node. Real nodes
// (NVML, NoGpus) report their InfiniBand ports from sysfs (links.h), NVML nodes their
// NVLinks too, leaving out those never seen up (unused ports).
//
// Thread-safety: Discover/Sample/SampleLinks/SetBusyGpus/ApplyFaults are called from
// one thread (the agent loop). SimulatedGpus additionally takes SetFaults from any
// thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/faults.h"
#include "core/status.h"
#include "core/units.h"

namespace trainyard::agent {

struct GpuDevice {
  int index = 0;
  std::string uuid;        // "GPU-…"
  std::string model_name;  // as the driver names it: "NVIDIA H100 80GB HBM3"
  std::string type;        // our GPU type: "H100"
  int64_t memory_mib = 0;
  // The N of its device node /dev/nvidiaN (NVML's minor number), which need not be its
  // index; -1 when unknown (simulated GPUs, or a library without the call): the index.
  int minor = -1;
};

struct GpuSample {
  int index = 0;
  std::optional<double> util_pct;
  std::optional<int64_t> mem_used_mib;
  std::optional<double> temp_c;
  std::optional<double> power_w;
  std::optional<int64_t> sm_clock_mhz;
  std::optional<bool> throttled;  // clocks held down by power or thermal limits
  std::optional<int64_t> ecc_uncorrectable;
  std::optional<int64_t> xid_last;   // most recent XID code, 0 = none
  std::optional<int64_t> xid_count;  // XIDs since the agent started
};

// One network link of the node.
struct LinkSample {
  std::string name;  // "ib0", "nvlink0"; real ones "mlx5_0/1", "gpu0/nvlink3"
  std::string kind;  // "ib" | "nvlink"
  bool up = true;
  // An error counter: it only grows, except that it restarts from zero (the agent's
  // start for simulated links; a driver load or counter reset for real ones).
  int64_t errors = 0;
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // The node's GPUs, in index order.
  virtual Result<std::vector<GpuDevice>> Discover() = 0;
  // One sample per GPU at time `now` (the simulation uses it; NVML reads the hardware).
  virtual Result<std::vector<GpuSample>> Sample(Timestamp now) = 0;
  // Which GPU indices run a task now; the simulation drives its model with it.
  virtual void SetBusyGpus(const std::set<int>& /*busy*/) {}
  // The node's links, sampled once per heartbeat; none by default (no way to read them).
  virtual std::vector<LinkSample> SampleLinks() { return {}; }
  // Makes telemetry show `faults`, the complete set now active on the node (it replaces
  // the previous one). A backend that cannot fake telemetry (real GPUs) ignores it:
  // only the trainer effects of faults (faults.h) apply there.
  virtual void ApplyFaults(const std::vector<FaultSpec>& /*faults*/) {}
  virtual bool simulated() const = 0;
};

// A backend with no GPUs: a CPU-only node, or a node whose driver could not be loaded.
// Its links are the node's InfiniBand ports read under `infiniband_root` (by default
// /sys/class/infiniband), those seen up at least once since it was made (links.h).
class NoGpus : public GpuBackend {
 public:
  NoGpus();
  explicit NoGpus(std::string infiniband_root);

  Result<std::vector<GpuDevice>> Discover() override { return std::vector<GpuDevice>{}; }
  Result<std::vector<GpuSample>> Sample(Timestamp) override { return std::vector<GpuSample>{}; }
  std::vector<LinkSample> SampleLinks() override;
  bool simulated() const override { return false; }

 private:
  const std::string infiniband_root_;
  std::set<std::string> links_seen_up_;
};

// Maps a driver's model name to our GPU type: "NVIDIA H100 80GB HBM3" -> "H100",
// "Tesla V100-SXM2-16GB" -> "V100", "NVIDIA A100-SXM4-80GB" -> "A100". A model we do
// not know becomes its name without the vendor prefix, made a valid Trainyard name
// ("NVIDIA RTX A6000" -> "RTX-A6000").
std::string GpuTypeFromModelName(std::string_view model_name);

// What the simulation knows about a GPU type.
struct GpuTypeInfo {
  std::string_view type;
  std::string_view model_name;  // what NVML would call it
  int64_t memory_mib;
  double tdp_w;
  double idle_w;
  int64_t max_sm_clock_mhz;
};
// Nullptr for a type the table does not hold.
const GpuTypeInfo* FindGpuType(std::string_view type);
// "A100, B200, H100, ..." for messages.
std::string KnownGpuTypes();

// The faults of one simulated GPU.
struct SimulatedFaults {
  int64_t xid = 0;  // nonzero: an XID event with this code (counted once per SetFaults)
  int64_t ecc_uncorrectable = 0;  // uncorrectable ECC errors to add
  bool thermal = false;           // runs hot (~92 C) and is throttled
  bool slow = false;              // lower clocks, utilisation ~55-65 % while busy
  bool hang = false;              // utilisation 0 while a task holds it
  bool data_stall = false;        // utilisation ~2-5 % while busy: starved of input
};

// N simulated GPUs of one type. Telemetry moves toward a target that depends on
// whether a task runs on the GPU and on its faults: busy GPUs run at 90-99 % (noise from
// a seeded generator), ~85 % memory, warm toward ~75 C and draw near TDP; idle ones sit
// at 0 %, ~35 C and idle power. Temperature and power follow first-order lags in the
// time between samples, so a GPU heats up over a minute rather than at once.
//
// The node has two links, ib0 (InfiniBand) and nvlink0, up and error-free unless a
// link-down fault is active: then ib0 is down and counts one more error per sample.
class SimulatedGpus : public GpuBackend {
 public:
  // REQUIRES: FindGpuType(type) != nullptr, 0 <= count <= kMaxGpusPerNode.
  static Result<std::unique_ptr<SimulatedGpus>> Create(int count, std::string_view type,
                                                       std::string_view node_name, uint64_t seed);

  Result<std::vector<GpuDevice>> Discover() override;
  Result<std::vector<GpuSample>> Sample(Timestamp now) override;
  void SetBusyGpus(const std::set<int>& busy) override;
  bool simulated() const override { return true; }

  std::vector<LinkSample> SampleLinks() override;
  // Each GPU's faults become those `faults` name (GPU-specific or node-wide). The event
  // faults count once per fault id over the backend's life, however often a set that
  // holds them is applied: xid an XID 79, ecc an uncorrectable ECC error and its XID 48.
  // A fault naming a GPU the node lacks does nothing.
  void ApplyFaults(const std::vector<FaultSpec>& faults) override;

  // Replaces the faults of GPU `index` (a default SimulatedFaults clears them).
  Status SetFaults(int index, const SimulatedFaults& faults);

 private:
  struct State {
    bool busy = false;
    SimulatedFaults faults;
    double temp_c = 35;
    double power_w = 0;
    int64_t ecc = 0;
    int64_t xid_last = 0;
    int64_t xid_count = 0;
  };
  SimulatedGpus(const GpuTypeInfo& info, std::vector<GpuDevice> devices, uint64_t seed);
  // REQUIRES: mu_ held.
  static void SetFaultsLocked(State& s, const SimulatedFaults& faults);

  const GpuTypeInfo& info_;
  const std::vector<GpuDevice> devices_;
  std::mutex mu_;
  std::vector<State> state_;       // GUARDED_BY(mu_)
  std::mt19937_64 rng_;            // GUARDED_BY(mu_)
  std::optional<Timestamp> last_;  // GUARDED_BY(mu_)
  std::set<std::string> fired_;    // GUARDED_BY(mu_): event faults already counted
  bool link_down_ = false;         // GUARDED_BY(mu_)
  int64_t ib_errors_ = 0;          // GUARDED_BY(mu_)
};

}  // namespace trainyard::agent
