// Datasets and their versions (docs/datasets.md, docs/api.md "Datasets"):
//
//   GET    /api/v1/datasets                    those the caller may use
//   POST   /api/v1/datasets                    {"name", "tenant"?, "source", "description"?,
//                                               "manifest"}: registers the manifest's
//                                               version (201 new, 200 known)
//   GET    /api/v1/datasets/{name}             the dataset and its versions
//   GET    /api/v1/datasets/{name}/manifest    ?version= (default latest): text/plain
//   DELETE /api/v1/datasets/{name}
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <nlohmann/json.hpp>

#include "core/dataset.h"
#include "server/api/routes.h"
#include "server/api/services.h"

namespace trainyard::server {

// {"name", "tenant" (null: cluster-wide), "source", "description", "created_ms",
//  "created_by", "versions": [{"version", "files", "bytes", "registered_ms",
//  "registered_by"}] oldest first, "latest": the last version or null}.
nlohmann::ordered_json RenderDataset(const Dataset& d);

void InstallDatasetRoutes(Routes& routes, const ApiServices& s);

}  // namespace trainyard::server
