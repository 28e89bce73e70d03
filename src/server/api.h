// The HTTP face of the control plane: REST API under /api/v1 (docs/api.md), the agent
// endpoints (docs/agent-protocol.md) and the web dashboard's files at / (web_assets.h).
//
// Each endpoint is three small pieces: parse the request into a value (the Parse*
// functions, unit-tested without a server), call the Cluster, render JSON. Only this
// layer turns a Status into an HTTP status code: InvalidArgument 400, NotFound 404,
// AlreadyExists / FailedPrecondition 409, ResourceExhausted 413 (body too large) or
// 507, Unavailable 503, others 500. Every error body is {"error": "..."}. Parsing
// happens before anything is changed, so malformed input changes nothing.
//
// Authentication: user endpoints need "Authorization: Bearer <API token>"
// (Unauthenticated 401), and what the caller may do is checked against the object's
// tenant and owner (PermissionDenied 403); agent endpoints need the join token; a
// token that has used up its rate gets 429 with Retry-After.
//
// Thread-safety: Api holds references to thread-safe objects; its handlers run on
// the HTTP server's worker threads concurrently.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/auth.h"
#include "core/status.h"
#include "server/access.h"
#include "server/alerting.h"
#include "server/cluster.h"
#include "server/logs.h"
#include "server/profiles.h"

namespace trainyard::http {
class Server;
}

namespace trainyard::track {
class SeriesStore;
}

namespace trainyard::server {

inline constexpr size_t kMaxRequestBytes = 4 << 20;    // whole request body
inline constexpr size_t kMaxSubmitBytes = 1 << 20;     // a job spec
inline constexpr int64_t kMaxArrayJobs = 10'000;       // jobs per array submission
inline constexpr int64_t kMaxLogChunkBytes = 1 << 20;  // per agent log request
inline constexpr Duration kMaxPollWait{30'000};

using Params = std::multimap<std::string, std::string>;

int HttpStatusFor(const Status& s);

// "1-1000", "0-9:2" (step), "1,3,5-7". Indices 0..1e9, at most kMaxArrayJobs.
Result<std::vector<int64_t>> ParseArrayRange(std::string_view text);
// A submission body (YAML, JSON or #SBATCH) and its query: `array`, and `code`, the
// git commit ("-dirty" appended when uncommitted changes) for experiment.code auto.
struct SubmitRequestParams {
  std::vector<JobSpec> specs;
  std::vector<std::string> warnings;
};
Result<SubmitRequestParams> ParseSubmit(std::string_view body, const Params& params);
// GET /jobs query: state (comma list), tenant, queue, name (prefix), after, limit, order
// (asc, the default, or desc: newest first, `after` then an upper bound).
Result<ListJobsRequest> ParseListJobs(const Params& params);
Result<JobId> ParseJobId(std::string_view text);
Result<CheckpointReport> ParseCheckpoint(std::string_view body);
// PUT /tenants/{name}/quota body: {"guaranteed_gpus", "limit_gpus"}, both required.
struct TenantQuota {
  int64_t guaranteed_gpus = 0;
  int64_t limit_gpus = 0;
};
Result<TenantQuota> ParseTenantQuota(std::string_view body);
// PUT /queues/{tenant}/{name} body: {"guaranteed_gpus", "limit_gpus"} (required),
// "weight" (1), "parent" (none). The whole queue: omitted fields take their defaults.
Result<Queue> ParseQueue(std::string_view body, const std::string& tenant, const std::string& name);

// POST /jobs/{id}/profile body: {"steps": 1..kMaxProfileSteps (default
// kDefaultProfileSteps), "rank": R (default: every rank)}; an empty body takes both
// defaults.
struct ProfileParams {
  int32_t steps = kDefaultProfileSteps;
  std::optional<int32_t> rank;
};
Result<ProfileParams> ParseProfileParams(std::string_view body);
// POST /agent/profile body: {"node", "task_id", "offset", "id"} and either "status"
// ("recording", or "failed" with "message") or a chunk ("data_b64", "total_bytes").
Result<ProfileReport> ParseProfileReport(std::string_view body);
nlohmann::ordered_json RenderProfile(const ProfileRequest& request);

// The job as people see it: the values of its spec's secret_env are "<redacted>".
nlohmann::ordered_json RenderJob(const JobView& view);
nlohmann::ordered_json RenderJobSummary(const Job& job);
nlohmann::ordered_json RenderNode(const NodeView& view);
nlohmann::ordered_json RenderQueue(const QueueView& view);
nlohmann::ordered_json RenderTenant(const Tenant& tenant);

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
};

// POST /nodes/{name}/faults body: {"kind" (required), "gpu" (default -1: the whole
// node), "duration" (a duration string or seconds; default 0: until cleared)}.
struct FaultRequest {
  std::string kind;
  int gpu = -1;
  Duration duration{0};
};
Result<FaultRequest> ParseFaultRequest(std::string_view body);
nlohmann::ordered_json RenderAlert(const monitor::Alert& alert);

// Who may call a route: anyone (health checks), anyone for the dashboard's page and
// files (they hold no data: the page's API calls carry the user's token), agents (the
// join token), or users (an API token, then the rules of core/auth.h for `action` on
// the object).
enum class RouteAccess { kPublic, kPublicFile, kAgent, kUser };
struct RouteInfo {
  std::string method;   // GET, POST, PATCH, DELETE
  std::string pattern;  // as registered, e.g. "/api/v1/jobs/([^/]+)/cancel"
  RouteAccess access = RouteAccess::kUser;
  Action action = Action::kReadCluster;  // for kUser routes
};

// Installs every route on `http` and returns them (the authorization matrix test
// walks this list, so a new route without a rule in that test fails it). User routes
// authenticate with `access`, are rate-limited per token, and every request that is
// not a GET is written to the audit log, allowed or not. A user GET answered 200 with
// a body carries a weak ETag of the body and `Cache-Control: no-cache`, and becomes 304
// without the body when the request's If-None-Match holds that tag.
//
// The dashboard (docs/api.md, "Dashboard"): GET / is its page and GET /assets/<path>
// its files, with an ETag (304 on If-None-Match), Cache-Control: no-cache, and
// headers that keep the page to its own origin (Content-Security-Policy, nosniff,
// no referrer).
std::vector<RouteInfo> InstallApi(http::Server& http, Cluster& cluster, LogStore& logs,
                                  AccessControl& access, ApiOptions options);

}  // namespace trainyard::server
