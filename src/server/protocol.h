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
};

struct Registration {
  Node node;  // name, gpus, cpus, memory, labels, topology; state Ready
  std::string address;
  bool simulated = false;
  std::vector<TaskStatus> tasks;
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

struct Heartbeat {
  std::string node;
  int64_t seq = 0;
  bool health_ok = true;
  std::string health_message;
  std::vector<TaskStatus> tasks;
  std::vector<GpuTelemetry> gpus;  // at most one per GPU index
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
  enum class Kind { kStart, kPreempt, kStop, kProfile } kind = Kind::kStart;
  TaskStart start;         // kStart
  std::string task_id;     // kPreempt, kStop, kProfile
  int signal = 0;          // kPreempt
  Duration grace{0};       // kPreempt, kStop
  std::string profile_id;  // kProfile: the request ("p-<job>-<seq>")
  int32_t steps = 0;       // kProfile: how many steps to record
};

Result<Registration> ParseRegistration(const nlohmann::json& j);
Result<Heartbeat> ParseHeartbeat(const nlohmann::json& j);
nlohmann::ordered_json ToJson(const Command& c);

}  // namespace trainyard::server
