#include "server/api.h"

#include <memory>
#include <utility>

#include "server/api/dashboard.h"
#include "server/api/monitoring.h"
#include "server/api/services.h"
#include "server/ingest.h"

namespace trainyard::server {

std::vector<RouteInfo> InstallApi(http::Server& http, Cluster& cluster, LogStore& logs,
                                  AccessControl& access, ApiOptions options) {
  Routes routes(http, access, options.join_token);
  const ApiServices services{
      cluster,         logs,
      access,          std::make_shared<Ingest>(cluster, logs, options.series, options.alerting),
      options.series,  options.profiles,
      options.alerting};
  InstallMonitoringRoutes(routes, services);
  InstallDashboardRoutes(routes, options.web_dir);
  InstallUserRoutes(routes, services);
  InstallJobRoutes(routes, services);
  InstallProfileRoutes(routes, services);
  InstallNodeRoutes(routes, services);
  InstallTenancyRoutes(routes, services);
  InstallRunRoutes(routes, services);
  InstallAlertRoutes(routes, services);
  InstallAgentRoutes(routes, services);
  return routes.list();
}

Result<std::string> DecodeBase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return InvalidArgument("data_b64: length is not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = text[i + static_cast<size_t>(k)];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = value(c)) < 0) {
        return InvalidArgument("data_b64: not base64 at byte " +
                               std::to_string(i + static_cast<size_t>(k)));
      }
    }
    const uint32_t n = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                       (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out.push_back(static_cast<char>((n >> 16) & 0xff));
    if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(n & 0xff));
  }
  return out;
}

}  // namespace trainyard::server
