// Injected faults as the agent sees them (docs/faults.md, docs/agent-protocol.md: the
// `faults` command): the set the server says is active on this node, and what that set
// does to each task the node runs, which the agent hands to the task's SDK through
// TRAINYARD_FAULT_FILE. What a fault does to GPU and link telemetry is the GpuBackend's
// business (gpu.h: ApplyFaults), since only a simulated backend can fake it.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainyard::agent {

enum class FaultKind {
  kXid,        // an XID 79 event (GPU fell off the bus)
  kEcc,        // an uncorrectable ECC error and its XID 48
  kThermal,    // hot and throttled
  kLinkDown,   // the node's InfiniBand link is down
  kSlow,       // lower clocks: the GPU's work takes longer
  kHang,       // no progress: utilisation 0, the trainer stops stepping
  kDataStall,  // the input pipeline starves the GPUs
  kLossNan,    // the trainer's loss turns NaN
  kGradSpike,  // the trainer's gradient norm jumps
  kCommSlow,   // one job's collectives are slow
};

// "xid", "ecc", "thermal", "link-down", "slow", "hang", "data-stall", "loss-nan",
// "grad-spike", "comm-slow".
std::string_view FaultKindName(FaultKind kind);
// The kind a name means; InvalidArgument naming it and the valid kinds otherwise.
Result<FaultKind> ParseFaultKind(std::string_view name);
// "xid, ecc, thermal, ..." for messages.
std::string ValidFaultKinds();

struct Fault {
  std::string id;  // the server's, e.g. "f-3"
  FaultKind kind = FaultKind::kSlow;
  int gpu = -1;          // -1: every GPU of the node (node-wide)
  int64_t until_ms = 0;  // 0: until cleared; else the wall-clock epoch ms it ends at
  int64_t job_id = 0;    // kCommSlow: the job whose tasks it slows; else 0

  bool node_wide() const { return gpu < 0; }
  friend bool operator==(const Fault&, const Fault&) = default;
};

// Parses the `faults` list of a `faults` command: [{"id", "kind", "gpu", "until_ms",
// "job_id"}, ...]. `id` and `kind` are required; `gpu` defaults to -1, `until_ms` and
// `job_id` to 0. Errors name the element and field ("faults[2].kind: ..."); ids must be
// unique, and a comm-slow fault must name its job.
Result<std::vector<Fault>> ParseFaults(const nlohmann::json& list);

// What the faults that touch a task do to its training loop; the content of
// TRAINYARD_FAULT_FILE. Defaults: no effect.
struct FaultEffects {
  double slow_factor = 1.0;   // multiplies the step's compute time
  bool hang = false;          // the loop makes no progress
  double data_stall_s = 0.0;  // extra wait for each batch
  bool loss_nan = false;
  bool grad_spike = false;

  friend bool operator==(const FaultEffects&, const FaultEffects&) = default;
};
nlohmann::json ToJson(const FaultEffects& e);

// A task running on the node, as far as faults are concerned.
struct TaskPlacement {
  std::string task_id;
  int64_t job_id = 0;
  int64_t rank = 0;
  std::vector<int> gpus;
};

// The effects of `faults` on each of `tasks` (same order). A fault touches a task when
// it is node-wide or names one of the task's GPUs; when no task has any GPU (a CPU-only
// node), a fault of GPU i touches the i-th task in rank order instead. link-down touches
// every task of the node and comm-slow every task of its job, whatever their GPUs.
// Several faults: the largest slow factor and stall, flags or'ed.
//   slow 3x, thermal 1.8x, link-down 2.5x, comm-slow 2.5x; hang; data-stall 1 s per
//   batch; loss-nan; grad-spike. xid and ecc do not touch the trainer.
std::vector<FaultEffects> EffectsOnTasks(const std::vector<Fault>& faults,
                                         const std::vector<TaskPlacement>& tasks);

}  // namespace trainyard::agent
