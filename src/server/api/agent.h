// The agent protocol's routes (docs/agent-protocol.md): what node agents call, with the
// join token. The messages themselves are decoded by server/protocol.h; uploads are
// filed by the Ingest service (server/ingest.h).
//
//   POST /api/v1/agent/register    the node and the tasks it runs
//   POST /api/v1/agent/heartbeat   task states and telemetry; acknowledged task ids back
//   POST /api/v1/agent/poll        commands for the node (a long poll: {"node", "wait_ms"})
//   POST /api/v1/agent/logs        a chunk of a rank's output (base64)
//   POST /api/v1/agent/metrics     lines of a rank's metrics file
//   POST /api/v1/agent/profile     a rank's profile: its state, or a chunk of its trace
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/api/routes.h"
#include "server/api/services.h"
#include "server/ingest.h"
#include "server/profiles.h"

namespace trainyard::server {

// The fields the agent's logs, metrics and profile uploads share: "node", "task_id"
// ("<job>.<attempt>.<rank>") and "offset" (>= 0) where the upload starts. Errors are
// named "<what>.<field>".
struct TaskUpload {
  TaskRef task;
  int64_t offset = 0;
};
Result<TaskUpload> ParseTaskUpload(const nlohmann::json& j, std::string_view what);

// POST /agent/poll body: {"node" (required), "wait_ms" (>= 0, default 20,000, at most
// kMaxPollWait)}.
struct PollRequest {
  std::string node;
  Duration wait{20'000};
};
Result<PollRequest> ParsePoll(std::string_view body);

// POST /agent/profile body: {"node", "task_id", "offset", "id"} and either "status"
// ("recording", or "failed" with "message") or a chunk ("data_b64", "total_bytes").
Result<ProfileReport> ParseProfileReport(std::string_view body);

void InstallAgentRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
