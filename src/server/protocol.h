// The agent protocol's messages (docs/agent-protocol.md) as values, with their JSON
// forms. Parsing is strict about types of the fields it reads and ignores unknown
// fields (forward compatibility); errors name the field and the value.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.h"
#include "core/node.h"
#include "core/status.h"
#include "core/units.h"

namespace trainyard::server {

// "<job>.<attempt>.<rank>", e.g. "17.2.1".
std::string TaskId(JobId job, int32_t attempt, int32_t rank);

struct TaskStatus {
  std::string task_id;
  JobId job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  std::string state;  // "starting" | "running" | "exited"
  int64_t pid = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string message;
  // The agent stopped it itself after losing contact with the server for longer than
  // the node-lost grace (RegisterReply::release_after): the node's work was given up,
  // not failed.
  bool fenced = false;
};

// The latest result of the node's health-check program (agent --health-check).
struct HealthCheckResult {
  bool ok = true;
  std::string output;   // what the program printed, at most 4 KiB
  int64_t at_ms = 0;    // when it ran (agent's wall clock)
  std::string trigger;  // "join" | "periodic" | "task-failed"
  bool operator==(const HealthCheckResult&) const = default;
};

struct Registration {
  Node node;  // name, gpus, cpus, memory, labels, topology; state Ready
  std::string address;
  bool simulated = false;
  std::vector<TaskStatus> tasks;
  std::optional<HealthCheckResult> health_check;  // run before registering
};

// One GPU's last sample as an agent reports it (agent/gpu.h GpuSample); each value
// is absent when the agent could not read it.
struct GpuTelemetry {
  int index = 0;
  std::optional<double> util_pct;
  std::optional<double> mem_used_mib;
  std::optional<double> temp_c;
  std::optional<double> power_w;
  std::optional<double> sm_clock_mhz;
  std::optional<bool> throttled;
  std::optional<double> ecc_uncorrectable;
  std::optional<double> xid_last;
  std::optional<double> xid_count;

  bool operator==(const GpuTelemetry&) const = default;
};

// One NVLink or InfiniBand link of a node.
struct LinkTelemetry {
  std::string name;  // "ib0", "nvlink0"
  std::string kind;  // "ib" | "nvlink" | "" (unknown)
  bool up = true;
  double errors = 0;  // error counter since the agent started
  bool operator==(const LinkTelemetry&) const = default;
};

// Free space of one checkpoint or data path on a node.
struct DiskTelemetry {
  std::string path;
  double free_bytes = 0;
  double total_bytes = 0;
  bool operator==(const DiskTelemetry&) const = default;
};

struct Heartbeat {
  std::string node;
  int64_t seq = 0;
  bool health_ok = true;
  std::string health_message;
  std::vector<TaskStatus> tasks;
  std::vector<GpuTelemetry> gpus;  // at most one per GPU index
  std::vector<LinkTelemetry> links;
  std::vector<DiskTelemetry> disks;
  std::optional<HealthCheckResult> health_check;
  std::vector<std::string> faults;  // ids of the faults the agent has active
};

// Fault kinds an admin may inject (docs/faults.md); kCommSlow is derived by the
// server for the other nodes of a job that spans a node whose link is down.
inline constexpr std::string_view kFaultKinds[] = {
    "xid", "ecc", "thermal", "link-down", "slow", "hang", "data-stall", "loss-nan", "grad-spike"};
inline constexpr std::string_view kCommSlowFault = "comm-slow";
// True for the kinds of kFaultKinds.
bool IsFaultKind(std::string_view kind);

// One simulated fault on a node, as the `faults` command carries it.
struct FaultSpec {
  std::string id;        // "f-<n>"
  std::string kind;      // a kFaultKinds entry, or kCommSlowFault
  int gpu = -1;          // GPU index; -1: the whole node
  int64_t until_ms = 0;  // wall-clock end (epoch ms); 0: until cleared
  JobId job_id = 0;      // comm-slow only: the job whose ranks it slows
  bool operator==(const FaultSpec&) const = default;
};

// What a rank runs: the `task` object of a `start` command.
struct TaskStart {
  std::string task_id;
  JobId job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::vector<std::string> secret_env;  // keys of env whose values are secret
  std::string workdir;
  std::vector<int> gpus;
};

struct Command {
  enum class Kind { kStart, kPreempt, kStop, kProfile, kFaults, kCheckpoint } kind = Kind::kStart;
  TaskStart start;                // kStart
  std::string task_id;            // kPreempt, kStop, kProfile, kCheckpoint
  int signal = 0;                 // kPreempt
  Duration grace{0};              // kPreempt, kStop
  std::string profile_id;         // kProfile: the request ("p-<job>-<seq>")
  int32_t steps = 0;              // kProfile: how many steps to record
  std::vector<FaultSpec> faults;  // kFaults: the node's whole set (empty clears)
};

Result<Registration> ParseRegistration(const nlohmann::json& j);
Result<Heartbeat> ParseHeartbeat(const nlohmann::json& j);
nlohmann::ordered_json ToJson(const Command& c);

}  // namespace trainyard::server
