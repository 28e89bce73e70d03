// Alerts and diagnosis (docs/alerts.md, docs/diagnose.md): what the alert rules found,
// and the diagnosis of one job.
//
//   GET /api/v1/alerts                  ?state (pending,firing,resolved), rule, job, node
//   GET /api/v1/alerts/events           transitions and actions, newest first (?limit)
//   GET /api/v1/alerts/rules            the rules in force
//   GET /api/v1/jobs/{id}/diagnosis     system -> communication -> training
//
// Alerts about a tenant's jobs are that tenant's; alerts about nodes, everyone's.
// Without alerting (ApiServices::alerting) every route answers 503.
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/auth.h"
#include "monitor/engine.h"
#include "server/api/request.h"
#include "server/api/routes.h"
#include "server/api/services.h"

namespace trainyard::server {

// GET /alerts query.
struct AlertQuery {
  std::set<std::string> states;  // empty: every state
  std::string rule;
  std::string job;
  std::string node;
};
Result<AlertQuery> ParseAlertQuery(const Params& params);
bool AlertMatches(const monitor::Alert& alert, const AlertQuery& query);

// Whether `who` may see an alert with these labels (its tenant's, or no tenant's).
bool MaySeeAlert(const Principal& who, const monitor::Labels& labels);

nlohmann::ordered_json RenderAlert(const monitor::Alert& alert);

void InstallAlertRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
