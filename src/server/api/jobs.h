// The jobs resource (docs/api.md, "Jobs"): submit, list, get, cancel / hold / release,
// events, logs and their search, checkpoint reports, the job's trace.
//
//   POST /api/v1/jobs                          submit (YAML, JSON or #SBATCH; ?array, ?code)
//   GET  /api/v1/jobs                          list (?state, tenant, queue, name, after,
//                                              limit, order)
//   GET  /api/v1/jobs/{id}                     the job, with its failed attempts' error lines
//   POST /api/v1/jobs/{id}/cancel|hold|release
//   GET  /api/v1/jobs/{id}/events
//   GET  /api/v1/jobs/{id}/logs                a rank's output (octet-stream)
//   GET  /api/v1/jobs/{id}/logs/search
//   POST /api/v1/jobs/{id}/checkpoint
//   GET  /api/v1/jobs/{id}/trace               Chrome trace or OTLP JSON
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.h"
#include "core/status.h"
#include "server/api/request.h"
#include "server/api/routes.h"
#include "server/api/services.h"
#include "server/cluster.h"
#include "server/logs.h"

namespace trainyard::server {

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
// POST /jobs/{id}/checkpoint body: a checkpoint record (CheckpointFromJson).
Result<CheckpointReport> ParseCheckpoint(std::string_view body);
// GET /jobs/{id}/logs/search query: pattern (required), attempt, rank, ignore_case,
// max_matches.
Result<LogSearchRequest> ParseLogSearch(const Params& params);
// GET /jobs/{id}/logs query: rank (0), attempt (unset: the job's latest), offset (0),
// wait_ms (0..kMaxPollWait), max_bytes (1..kMaxLogChunkBytes).
struct LogReadParams {
  int32_t rank = 0;
  std::optional<int32_t> attempt;
  int64_t offset = 0;
  int64_t wait_ms = 0;
  int64_t max_bytes = kMaxLogChunkBytes;
};
Result<LogReadParams> ParseLogRead(const Params& params);

// The job as people see it: the values of its spec's secret_env are "<redacted>".
nlohmann::ordered_json RenderJob(const JobView& view);
// RenderJob, with each attempt's first error lines (`errors`, by attempt index):
// "error_lines" ([] when none) and "error_rank" (null when none).
nlohmann::ordered_json RenderJobWithErrors(const JobView& view,
                                           const std::map<int32_t, RankErrorLines>& errors);
nlohmann::ordered_json RenderJobSummary(const Job& job);
nlohmann::ordered_json RenderEvents(const store::EventPage& page);
nlohmann::ordered_json RenderLogSearch(const LogSearchResult& found);

// The job `id_text` names, if the caller may `action` it; sets the call's object and
// tenant for the audit log.
Result<JobView> VisibleJob(Cluster& cluster, std::string_view id_text, Call& call, Action action);

void InstallJobRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
