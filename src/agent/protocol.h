// The agent's side of docs/agent-protocol.md as values: task statuses it reports,
// commands it receives, and their JSON forms.
//
// Parsing is lenient where the protocol says so (unknown fields are ignored) and strict
// about what the agent needs: a start without a task_id or argv is an error that names
// the field.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/faults.h"
#include "agent/gpu.h"
#include "core/status.h"
#include "core/units.h"

namespace trainyard::agent {

enum class TaskState { kStarting, kRunning, kExited };
std::string_view TaskStateName(TaskState s);  // "starting" | "running" | "exited"

struct TaskStatus {
  std::string task_id;  // "<job>.<attempt>.<rank>"
  int64_t job_id = 0;
  int64_t attempt = 0;
  int64_t rank = 0;
  TaskState state = TaskState::kStarting;
  int64_t pid = 0;
  Timestamp started{};
  Timestamp finished{};  // epoch (0) until exited
  int exit_code = 0;     // -1 when killed by a signal
  int signal = 0;
  std::string message;
  bool fenced = false;  // stopped by the agent for want of contact (Agent::FenceIfCutOff)
};
nlohmann::json ToJson(const TaskStatus& t);

struct StartTask {
  std::string task_id;
  int64_t job_id = 0;
  int64_t attempt = 0;
  int64_t rank = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::vector<std::string> secret_env;  // keys of env whose values are never shown
  std::string workdir;
  std::vector<int> gpus;
};

struct Command {
  enum class Kind { kStart, kStop, kPreempt, kProfile, kFaults, kCheckpoint };
  Kind kind = Kind::kStart;
  StartTask start;            // kStart
  std::string task_id;        // every kind but kFaults
  int signal = 0;             // kPreempt
  Duration grace{};           // kStop, kPreempt
  std::string profile_id;     // kProfile: 1-64 of A-Z a-z 0-9 . _ -
  int32_t steps = 0;          // kProfile: 1..10000
  std::vector<Fault> faults;  // kFaults: the complete set now active on the node
};

// Parses one command object; the error names the field and the value.
Result<Command> ParseCommand(const nlohmann::json& j);

// One GPU sample; unavailable fields are left out.
nlohmann::json ToJson(const GpuSample& s);
// {"name", "kind", "up", "errors"}.
nlohmann::json ToJson(const LinkSample& l);

inline int64_t ToMs(Timestamp t) { return t.time_since_epoch().count(); }

}  // namespace trainyard::agent
