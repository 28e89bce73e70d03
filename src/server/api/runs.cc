#include "server/api/runs.h"

#include <chrono>
#include <vector>

#include "core/names.h"
#include "server/api/jobs.h"
#include "track/series_store.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::ordered_json;

Result<ListRunsRequest> ParseListRuns(const Params& params) {
  TY_RETURN_IF_ERROR(CheckParams(
      params, {"experiment", "filter", "state", "tenant", "queue", "name", "after", "limit"}));
  Params job_params = params;
  job_params.erase("experiment");
  job_params.erase("filter");
  ListRunsRequest r;
  TY_ASSIGN_OR_RETURN(r.jobs, ParseListJobs(job_params));
  TY_ASSIGN_OR_RETURN(r.filter, track::RunFilter::Parse(Param(params, "filter").value_or(""),
                                                        {track::RunAttributeNames()}));
  r.experiment = Param(params, "experiment").value_or("");
  return r;
}

Result<SeriesReadParams> ParseSeriesRead(const Params& params) {
  TY_RETURN_IF_ERROR(CheckParams(params, {"rank", "from", "to", "buckets"}));
  SeriesReadParams r;
  if (auto p = Param(params, "rank")) {
    TY_ASSIGN_OR_RETURN(int64_t rank, ParseInt("rank", *p, 0, 1'000'000));
    r.rank = static_cast<int32_t>(rank);
  }
  if (auto p = Param(params, "from")) {
    TY_ASSIGN_OR_RETURN(r.range.from_step, ParseInt("from", *p, INT64_MIN, INT64_MAX));
  }
  if (auto p = Param(params, "to")) {
    TY_ASSIGN_OR_RETURN(r.range.to_step, ParseInt("to", *p, INT64_MIN, INT64_MAX));
  }
  if (auto p = Param(params, "buckets")) {
    TY_ASSIGN_OR_RETURN(int64_t b, ParseInt("buckets", *p, 0, 100'000));
    r.range.buckets = static_cast<int32_t>(b);
  }
  return r;
}

Result<track::IngestBatch> ParseMetricsUpload(JobId run, std::string_view content_type,
                                              const Params& params, std::string_view body,
                                              int64_t now_ms) {
  TY_RETURN_IF_ERROR(CheckParams(params, {"rank"}));
  if (!content_type.starts_with("text/plain")) return track::ParseBatchJson(run, body, now_ms);
  int64_t rank = 0;
  if (auto p = Param(params, "rank")) {
    TY_ASSIGN_OR_RETURN(rank, ParseInt("rank", *p, 0, 1'000'000));
  }
  return track::ParseBatchText(run, static_cast<int32_t>(rank), body, now_ms);
}

void FillGpuType(track::RunRecord& run, const Job& job,
                 const std::function<std::string(const std::string&)>& gpu_type_of_node) {
  if (!run.gpu_type.empty() || job.attempts.empty() || job.attempts.back().nodes.empty()) return;
  run.gpu_type = gpu_type_of_node(job.attempts.back().nodes.front());
}

namespace {

Status NoSeries() { return Unavailable("this server keeps no metric series"); }

// The run record of `job`, its GPU type from the cluster's nodes.
Result<track::RunRecord> BuildRun(const ApiServices& s, const Job& job) {
  TY_ASSIGN_OR_RETURN(auto params, s.series->Params(job.id));
  TY_ASSIGN_OR_RETURN(auto infos, s.series->ListSeries(job.id));
  track::RunRecord run = track::BuildRun(job, params, infos);
  FillGpuType(run, job, [&s](const std::string& node) {
    auto v = s.cluster.GetNode(node);
    return v.ok() && !v->node.gpus.empty() ? v->node.gpus.front().model : std::string();
  });
  return run;
}

ordered_json RenderSeriesList(const std::vector<track::SeriesInfo>& infos) {
  ordered_json out = ordered_json::array();
  for (const track::SeriesInfo& i : infos) {
    out.push_back({{"key", i.key},
                   {"rank", i.rank},
                   {"count", i.count},
                   {"nan_count", i.nan_count},
                   {"first_step", i.first_step},
                   {"last_step", i.last.step},
                   {"last_time_ms", i.last.time_ms},
                   {"last", track::JsonNumber(i.last.value)},
                   {"min", track::JsonNumber(i.min)},
                   {"max", track::JsonNumber(i.max)}});
  }
  return {{"series", std::move(out)}};
}

bool InExperiment(const Job& j, const std::string& experiment) {
  return experiment.empty() || j.spec.experiment.name == experiment ||
         (j.spec.experiment.name.empty() && j.spec.name == experiment);
}

Result<Reply> ListRuns(const ApiServices& s, const Request& req, Call& call) {
  if (s.series == nullptr) return NoSeries();
  TY_ASSIGN_OR_RETURN(ListRunsRequest r, ParseListRuns(req.params));
  if (call.who.role != Role::kClusterAdmin) {
    if (r.jobs.filter.tenant.empty()) r.jobs.filter.tenant = call.who.tenant;
    TY_RETURN_IF_ERROR(Authorize(call.who, Action::kReadJobs, {r.jobs.filter.tenant}));
  }
  // Runs are jobs seen through the filter: page through jobs until the page of runs is
  // full, looking at no more than kMaxScan jobs per request.
  constexpr int kMaxScan = 10'000;
  const int want = r.jobs.limit;
  ordered_json runs = ordered_json::array();
  std::optional<JobId> next_after;
  int scanned = 0;
  bool more = true;
  while (more && static_cast<int>(runs.size()) < want && scanned < kMaxScan) {
    r.jobs.limit = 500;
    TY_ASSIGN_OR_RETURN(store::JobPage page, s.cluster.ListJobs(r.jobs));
    more = page.next_after_id.has_value();
    for (const Job& j : page.jobs) {
      ++scanned;
      r.jobs.after_id = j.id;
      next_after = j.id;
      if (!InExperiment(j, r.experiment)) continue;
      TY_ASSIGN_OR_RETURN(track::RunRecord run, BuildRun(s, j));
      if (!r.filter.Matches(track::Filterable(run))) continue;
      runs.push_back(track::RenderRunSummary(run));
      if (static_cast<int>(runs.size()) == want || scanned == kMaxScan) break;
    }
  }
  if (!more && (static_cast<int>(runs.size()) < want)) next_after.reset();
  return Reply::Json(200, ordered_json{{"runs", std::move(runs)},
                                       {"next_after", next_after ? ordered_json(*next_after)
                                                                 : ordered_json(nullptr)}});
}

Result<Reply> CompareRuns(const ApiServices& s, const Request& req, Call& call) {
  if (s.series == nullptr) return NoSeries();
  TY_RETURN_IF_ERROR(CheckParams(req.params, {"ids"}));
  const std::string ids_text = Param(req.params, "ids").value_or("");
  std::string_view ids = ids_text;
  std::vector<track::RunRecord> runs;
  while (!ids.empty()) {
    size_t comma = ids.find(',');
    std::string_view one = ids.substr(0, comma);
    ids = comma == std::string_view::npos ? std::string_view() : ids.substr(comma + 1);
    TY_ASSIGN_OR_RETURN(JobId id, ParseJobId(one));
    TY_ASSIGN_OR_RETURN(JobView v, s.cluster.GetJob(id));
    TY_RETURN_IF_ERROR(
        Authorize(call.who, Action::kReadJobs,
                  {v.job.spec.tenant, std::string(UserOfActor(v.job.submitted_by))}));
    TY_ASSIGN_OR_RETURN(track::RunRecord run, BuildRun(s, v.job));
    runs.push_back(std::move(run));
    if (runs.size() > 20) return InvalidArgument("ids: at most 20 runs to compare");
  }
  if (runs.size() < 2) return InvalidArgument("ids: name at least two runs, e.g. ids=4,7");
  return Reply::Json(200, track::CompareRuns(runs));
}

Result<Reply> GetRun(const ApiServices& s, const Request& req, Call& call) {
  if (s.series == nullptr) return NoSeries();
  TY_ASSIGN_OR_RETURN(JobView v,
                      VisibleJob(s.cluster, req.matches[1].str(), call, Action::kReadJobs));
  TY_ASSIGN_OR_RETURN(track::RunRecord run, BuildRun(s, v.job));
  return Reply::Json(200, track::RenderRun(run));
}

Result<Reply> ListSeries(const ApiServices& s, const Request& req, Call& call) {
  if (s.series == nullptr) return NoSeries();
  TY_ASSIGN_OR_RETURN(JobView v,
                      VisibleJob(s.cluster, req.matches[1].str(), call, Action::kReadJobs));
  TY_ASSIGN_OR_RETURN(auto infos, s.series->ListSeries(v.job.id));
  return Reply::Json(200, RenderSeriesList(infos));
}

Result<Reply> ReadSeries(const ApiServices& s, const Request& req, Call& call) {
  if (s.series == nullptr) return NoSeries();
  TY_ASSIGN_OR_RETURN(JobView v,
                      VisibleJob(s.cluster, req.matches[1].str(), call, Action::kReadJobs));
  TY_RETURN_IF_ERROR(CheckParams(req.params, {"rank", "from", "to", "buckets"}));
  const std::string key = req.matches[2].str();
  if (!track::IsValidKey(key)) {
    return InvalidArgument("key " + QuoteForMessage(key) +
                           ": must be 1-128 characters of A-Z a-z 0-9 _ . / -");
  }
  TY_ASSIGN_OR_RETURN(SeriesReadParams p, ParseSeriesRead(req.params));
  if (!p.rank) {
    // The lowest rank that logged the key.
    TY_ASSIGN_OR_RETURN(std::optional<int32_t> lowest, s.series->LowestRank(v.job.id, key));
    if (!lowest) {
      return NotFound("run " + std::to_string(v.job.id) + " has no metric " + QuoteForMessage(key));
    }
    p.rank = *lowest;
  }
  TY_ASSIGN_OR_RETURN(auto buckets, s.series->Read(v.job.id, key, *p.rank, p.range));
  ordered_json out = {
      {"run", v.job.id}, {"key", key}, {"rank", *p.rank}, {"buckets", p.range.buckets}};
  out["points"] = track::RenderBuckets(buckets);
  return Reply::Json(200, out);
}

Result<Reply> UploadMetrics(const ApiServices& s, const Request& req, Call& call) {
  if (s.series == nullptr) return NoSeries();
  TY_ASSIGN_OR_RETURN(JobView v,
                      VisibleJob(s.cluster, req.matches[1].str(), call, Action::kManageJob));
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  TY_ASSIGN_OR_RETURN(track::IngestBatch batch,
                      ParseMetricsUpload(v.job.id, req.get_header_value("Content-Type"), req.params,
                                         req.body, now_ms));
  TY_RETURN_IF_ERROR(s.ingest->Points(v.job.id, batch));
  return Reply::Json(200, ordered_json{{"points", batch.points},
                                       {"series", batch.appends.size()},
                                       {"params", batch.params.size()}});
}

}  // namespace

void InstallRunRoutes(Routes& routes, const ApiServices& s) {
  routes.User("GET", V1("/runs"), Action::kReadJobs, Bind(s, ListRuns));
  // Before /runs/{id}, which "compare" would match too.
  routes.User("GET", V1("/runs/compare"), Action::kReadJobs, Bind(s, CompareRuns));
  routes.User("GET", V1(R"(/runs/([^/]+))"), Action::kReadJobs, Bind(s, GetRun));
  routes.User("GET", V1(R"(/runs/([^/]+)/metrics)"), Action::kReadJobs, Bind(s, ListSeries));
  routes.User("GET", V1(R"(/runs/([^/]+)/metrics/(.+))"), Action::kReadJobs, Bind(s, ReadSeries));
  // Points come in bursts from training loops: audited only when refused.
  routes.User("POST", V1(R"(/runs/([^/]+)/metrics)"), Action::kManageJob, Bind(s, UploadMetrics),
              Audit::kRefusals);
}

}  // namespace trainyard::server
