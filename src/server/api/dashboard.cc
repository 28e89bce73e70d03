#include "server/api/dashboard.h"

#include <memory>

#include "server/web_assets.h"

namespace trainyard::server {

void InstallDashboardRoutes(Routes& routes, const std::string& web_dir) {
  auto web = std::make_shared<const WebAssets>(web_dir.empty() ? WebAssets::Embedded()
                                                               : WebAssets::FromDirectory(web_dir));
  routes.PublicFile("/", [web](const httplib::Request&) { return web->Page(); });
  routes.PublicFile("/assets/(.+)", [web](const httplib::Request& req) {
    return web->Asset(req.matches[1].str());
  });
}

}  // namespace trainyard::server
