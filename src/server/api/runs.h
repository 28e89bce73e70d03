// The runs resource: experiment tracking over jobs (docs/runs.md; track/).
//
//   GET  /api/v1/runs                       runs through a filter (?experiment, filter,
//                                           and the job listing's state, tenant, queue,
//                                           name, after, limit)
//   GET  /api/v1/runs/compare?ids=4,7       2..20 runs side by side
//   GET  /api/v1/runs/{id}                  a run: code, data, params, environment, metrics
//   GET  /api/v1/runs/{id}/metrics          its series
//   POST /api/v1/runs/{id}/metrics          a batch of points (JSON, or text/plain lines)
//   GET  /api/v1/runs/{id}/metrics/{key}    one series, downsampled (?rank, from, to, buckets)
//
// Without a series store (ApiServices::series) every route answers 503.
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "server/api/request.h"
#include "server/api/routes.h"
#include "server/api/services.h"
#include "track/ingest.h"
#include "track/run_filter.h"
#include "track/runs.h"
#include "track/series.h"

namespace trainyard::server {

// GET /runs query: the job listing's (ParseListJobs) plus experiment and filter.
struct ListRunsRequest {
  ListJobsRequest jobs;
  track::RunFilter filter;
  std::string experiment;
};
Result<ListRunsRequest> ParseListRuns(const Params& params);

// GET /runs/{id}/metrics/{key} query: rank (unset: the lowest that logged the key),
// from, to (steps), buckets (0..100,000; 0: raw points).
struct SeriesReadParams {
  std::optional<int32_t> rank;
  track::SeriesRange range;
};
Result<SeriesReadParams> ParseSeriesRead(const Params& params);

// POST /runs/{id}/metrics body: JSON columns per key, or (Content-Type text/plain) one
// point a line for the rank in query `rank` (track/ingest.h); points without a time
// are at `now_ms`.
Result<track::IngestBatch> ParseMetricsUpload(JobId run, std::string_view content_type,
                                              const Params& params, std::string_view body,
                                              int64_t now_ms);

// The GPU type a run's MFU is measured against: its spec's, else that of the node its
// latest attempt's first rank ran on (`gpu_type_of_node` answers "" when unknown).
void FillGpuType(track::RunRecord& run, const Job& job,
                 const std::function<std::string(const std::string&)>& gpu_type_of_node);

void InstallRunRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
