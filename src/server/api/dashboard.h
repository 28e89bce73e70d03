// The web dashboard's page and files (docs/api.md, "Dashboard"; server/web_assets.h),
// for anyone: they hold no data, and the page's API calls carry the user's token.
//
//   GET /                the page
//   GET /assets/{path}   its scripts, styles and uPlot
//
// Thread-safety: the routes read immutable assets (or the directory, per request).
#pragma once

#include <string>

#include "server/api/routes.h"

namespace trainyard::server {

// From the copy built into the binary, or from `web_dir` when not empty (--web-dir).
void InstallDashboardRoutes(Routes& routes, const std::string& web_dir);

}  // namespace trainyard::server
