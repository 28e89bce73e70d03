// Injected faults as the agent sees them (docs/faults.md, docs/agent-protocol.md: the
// `faults` command, protocol/faults.h): what the set the server says is active on this
// node does to each task the node runs, which the agent hands to the task's SDK through
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

#include "protocol/faults.h"

namespace trainyard::agent {

// The fault kinds and the fault a `faults` command carries are the protocol's.
using protocol::FaultKind;
using protocol::FaultKindName;
using protocol::FaultSpec;

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
std::vector<FaultEffects> EffectsOnTasks(const std::vector<FaultSpec>& faults,
                                         const std::vector<TaskPlacement>& tasks);

}  // namespace trainyard::agent
