// The HTTP face of the control plane: REST API under /api/v1 (docs/api.md) and the
// agent endpoints (docs/agent-protocol.md).
//
// Each endpoint is three small pieces: parse the request into a value (the Parse*
// functions, unit-tested without a server), call the Cluster, render JSON. Only this
// layer turns a Status into an HTTP status code: InvalidArgument 400, NotFound 404,
// AlreadyExists / FailedPrecondition 409, ResourceExhausted 413 (body too large) or
// 507, Unavailable 503, others 500. Every error body is {"error": "..."}. Parsing
// happens before anything is changed, so malformed input changes nothing.
//
// Thread-safety: Api holds references to thread-safe objects; its handlers run on
// the HTTP server's worker threads concurrently.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/cluster.h"
#include "server/logs.h"

namespace httplib {
class Server;
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
// A submission body (YAML, JSON or #SBATCH) and its query (`array`).
struct SubmitRequestParams {
  std::vector<JobSpec> specs;
  std::vector<std::string> warnings;
};
Result<SubmitRequestParams> ParseSubmit(std::string_view body, const Params& params);
// GET /jobs query: state (comma list), tenant, queue, name (prefix), after, limit.
Result<ListJobsRequest> ParseListJobs(const Params& params);
Result<JobId> ParseJobId(std::string_view text);
Result<CheckpointReport> ParseCheckpoint(std::string_view body);

nlohmann::ordered_json RenderJob(const JobView& view);
nlohmann::ordered_json RenderJobSummary(const Job& job);
nlohmann::ordered_json RenderNode(const NodeView& view);
nlohmann::ordered_json RenderQueue(const QueueView& view);

struct ApiOptions {
  std::string join_token;  // agents must send it as a Bearer token
};

// Installs every route on `http`.
void InstallApi(httplib::Server& http, Cluster& cluster, LogStore& logs, ApiOptions options);

// Standard base64 (RFC 4648, with padding); InvalidArgument on bad input.
Result<std::string> DecodeBase64(std::string_view text);

}  // namespace trainyard::server
