// The nodes resource (docs/api.md, "Nodes"; docs/faults.md): the cluster's machines,
// their administrative state, and faults injected into them.
//
//   GET    /api/v1/nodes                           every node, with the jobs the caller may see
//   GET    /api/v1/nodes/{name}
//   POST   /api/v1/nodes/{name}/cordon|drain|uncordon
//   GET    /api/v1/faults                          faults injected and active
//   POST   /api/v1/nodes/{name}/faults             inject one ({"kind", "gpu", "duration"})
//   DELETE /api/v1/nodes/{name}/faults[/{id}]      clear the node's faults (or one)
//   DELETE /api/v1/faults                          clear every fault
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/auth.h"
#include "server/api/routes.h"
#include "server/api/services.h"
#include "server/cluster.h"

namespace trainyard::server {

// POST /nodes/{name}/faults body: {"kind" (required), "gpu" (default -1: the whole
// node), "duration" (a duration string or seconds; default 0: until cleared)}.
struct FaultRequest {
  std::string kind;
  int gpu = -1;
  Duration duration{0};
};
Result<FaultRequest> ParseFaultRequest(std::string_view body);

nlohmann::ordered_json RenderNode(const NodeView& view);
// RenderNode as `who` may see it: every node's GPUs, but only the jobs of tenants it
// may see ("gpu_jobs" says "hidden" for a GPU busy with another's job).
nlohmann::ordered_json RenderNodeFor(const NodeView& view, const Principal& who);
nlohmann::ordered_json RenderFault(const InjectedFault& fault);

void InstallNodeRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
