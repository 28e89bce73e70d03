// Tenants, their queues and the priority classes (docs/api.md, "Queues, tenants,
// priority classes"). A tenant's quota is a cluster admin's to set; its queues, within
// that quota, its tenant admins' too.
//
//   GET    /api/v1/tenants
//   PUT    /api/v1/tenants/{name}/quota      {"guaranteed_gpus", "limit_gpus"}
//   GET    /api/v1/queues
//   PUT    /api/v1/queues/{tenant}/{name}    the whole queue: 201 new, 200 replaced
//   DELETE /api/v1/queues/{tenant}/{name}
//   GET    /api/v1/priority-classes
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/tenancy.h"
#include "server/api/routes.h"
#include "server/api/services.h"
#include "server/cluster.h"

namespace trainyard::server {

// PUT /tenants/{name}/quota body: {"guaranteed_gpus", "limit_gpus"}, both required.
struct TenantQuota {
  int64_t guaranteed_gpus = 0;
  int64_t limit_gpus = 0;
};
Result<TenantQuota> ParseTenantQuota(std::string_view body);

// PUT /tenants/{name}/run-as: {"run_as": "UID:GID" or "" (the agent's own), "allow_root":
// bool (optional)}. InvalidArgument naming the field, the value and what is valid.
struct TenantIdentity {
  int64_t uid = -1;
  int64_t gid = -1;
  std::optional<bool> allow_root;
};
Result<TenantIdentity> ParseTenantIdentity(std::string_view body);
// PUT /queues/{tenant}/{name} body: {"guaranteed_gpus", "limit_gpus"} (required),
// "weight" (1), "parent" (none). The whole queue: omitted fields take their defaults.
Result<Queue> ParseQueue(std::string_view body, const std::string& tenant, const std::string& name);

nlohmann::ordered_json RenderQueue(const QueueView& view);
nlohmann::ordered_json RenderTenant(const Tenant& tenant);

void InstallTenancyRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
