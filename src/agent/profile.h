// On-demand profiling, the agent's part (docs/agent-protocol.md: the `profile` command
// and POST /api/v1/agent/profile): the request file a task's SDK watches
// (TRAINYARD_PROFILE_FILE), the "profile" records the SDK answers with in the task's
// metrics file (docs/metrics-file.md), and the check that a trace a record names lies
// in the task's own profile directory (TRAINYARD_PROFILE_DIR), so that a record cannot
// make the agent upload any other file.
//
// Thread-safety: pure functions, and writes of the paths they are given.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"

namespace trainyard::agent {

struct ProfileRecord {
  std::string id;
  std::string status;   // "recording" | "stored" | "failed"
  std::string path;     // stored: the trace
  std::string message;  // failed: why
};

// The profile record a metrics line holds ({"kind": "profile", "id", "status", ...}
// with a string id and a known status; a stored one names its path); nullopt for any
// other line.
std::optional<ProfileRecord> ParseProfileRecord(const nlohmann::json& line);

// Writes {"id", "steps", "dir"} to `file` through a temporary file and a rename, so
// that the task never reads half of it; creates the parent directory of `file`, and
// `dir`, where the task is to write its trace.
Status WriteProfileRequest(const std::string& file, const std::string& id, int32_t steps,
                           const std::string& dir);

// Where the trace `path` (relative: to `dir`) is once symlinks are resolved, when that
// is a regular file inside `dir`; otherwise FailedPrecondition saying why.
Result<std::string> ProfileTracePath(const std::string& path, const std::string& dir);

}  // namespace trainyard::agent
