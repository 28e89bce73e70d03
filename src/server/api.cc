#include "server/api.h"

#include <memory>
#include <utility>

#include "server/api/dashboard.h"
#include "server/api/datasets.h"
#include "server/api/monitoring.h"
#include "server/api/services.h"
#include "server/ingest.h"

namespace trainyard::server {

std::vector<RouteInfo> InstallApi(http::Server& http, Cluster& cluster, LogStore& logs,
                                  AccessControl& access, ApiOptions options) {
  Routes routes(http, access, options.join_token);
  const ApiServices services{
      cluster,          logs,
      access,           std::make_shared<Ingest>(cluster, logs, options.series, options.alerting),
      options.series,   options.profiles,
      options.alerting, options.datasets};
  InstallMonitoringRoutes(routes, services);
  InstallDashboardRoutes(routes, options.web_dir);
  InstallUserRoutes(routes, services);
  InstallJobRoutes(routes, services);
  InstallProfileRoutes(routes, services);
  InstallNodeRoutes(routes, services);
  InstallTenancyRoutes(routes, services);
  InstallRunRoutes(routes, services);
  InstallAlertRoutes(routes, services);
  InstallDatasetRoutes(routes, services);
  InstallAgentRoutes(routes, services);
  return routes.list();
}

}  // namespace trainyard::server
