// The server watched from outside: its health check, and the Prometheus exposition of
// the cluster, alerts and running jobs' training progress (docs/metrics.md).
//
//   GET /api/v1/healthz   {"ok": true}, for anyone
//   GET /metrics          text format 0.0.4; the jobs and alerts of the tenants the
//                         caller may read
//
// Thread-safety: handlers that call thread-safe services.
#pragma once

#include <memory>

#include "core/auth.h"
#include "server/api/routes.h"
#include "server/api/services.h"
#include "server/metrics_page.h"

namespace trainyard::server {

// What GET /metrics shows `who` at `now`: the cluster, its alerts and alerting counters
// (when there is alerting), running jobs' progress (when there is a series store) and
// the API's request durations (`http`).
Result<MetricsPage> GatherMetricsPage(const ApiServices& services, const HttpMetrics& http,
                                      const Principal& who, Timestamp now);

void InstallMonitoringRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
