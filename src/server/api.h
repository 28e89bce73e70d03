// The HTTP face of the control plane: REST API under /api/v1 (docs/api.md), the agent
// endpoints (docs/agent-protocol.md) and the web dashboard's files at / (web_assets.h).
//
// Where things are (docs/api.md, "Code layout"):
//   server/api/routes.h     how a route is declared with its access, and the middleware
//                           every route gets: authentication, rate limits, audit, ETag,
//                           gzip, errors as {"error": ...}
//   server/api/request.h    reading query parameters and JSON bodies; request limits
//   server/api/<resource>.h one file per resource, each installing its own routes:
//                           jobs, runs, profiles, nodes (and faults), tenancy (tenants,
//                           queues, priority classes), users (whoami, users, tokens,
//                           audit), alerts (and diagnosis), agent, dashboard, monitoring
//                           (healthz, /metrics)
//   server/ingest.h         agents' and training code's uploads, filed (no HTTP)
//
// Each endpoint is three small pieces: parse the request into a value (the Parse*
// functions, unit-tested without a server), call the core, render JSON (Render*).
// Only this layer turns a Status into an HTTP status code (HttpStatusFor). Parsing
// happens before anything is changed, so malformed input changes nothing.
//
// Thread-safety: the routes hold references to thread-safe objects; their handlers run
// on the HTTP server's worker threads concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/access.h"
#include "server/alerting.h"
#include "server/api/agent.h"
#include "server/api/alerts.h"
#include "server/api/jobs.h"
#include "server/api/nodes.h"
#include "server/api/profiles.h"
#include "server/api/request.h"
#include "server/api/routes.h"
#include "server/api/runs.h"
#include "server/api/tenancy.h"
#include "server/api/users.h"
#include "server/cluster.h"
#include "server/datasets.h"
#include "server/logs.h"
#include "server/profiles.h"

namespace trainyard::http {
class Server;
}

namespace trainyard::track {
class SeriesStore;
}

namespace trainyard::server {

struct ApiOptions {
  std::string join_token;  // agents must send it as a Bearer token
  // Where runs' metric series and logged params go (experiment tracking); without
  // one the /runs endpoints answer 503 and agents' metrics lines are only filed.
  track::SeriesStore* series = nullptr;
  // Where on-demand profiles are kept; without one the profile endpoints answer 503.
  ProfileStore* profiles = nullptr;
  // Alert rules, signals and diagnosis; without it the alert and diagnosis endpoints
  // answer 503 and agents' telemetry only updates the nodes.
  Alerting* alerting = nullptr;
  // Where the dashboard's files come from (web_assets.h): empty, the copy built into
  // the binary; else this directory, read on every request (--web-dir).
  std::string web_dir{};
  // Datasets and their versions; without it the /datasets endpoints answer 503 and a
  // job that names data is refused.
  DatasetRegistry* datasets = nullptr;
};

// Installs every route on `http` and returns them (the authorization matrix test
// walks this list, so a new route without a rule in that test fails it). What each
// route gets around its handler, by its access, is in server/api/routes.h.
std::vector<RouteInfo> InstallApi(http::Server& http, Cluster& cluster, LogStore& logs,
                                  AccessControl& access, ApiOptions options);

}  // namespace trainyard::server
