#include "server/api/jobs.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "core/codec.h"
#include "core/job_text.h"
#include "core/names.h"
#include "server/ingest.h"
#include "server/log_search.h"
#include "store/store.h"
#include "track/chrome_trace.h"
#include "track/runs.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::json;
using nlohmann::ordered_json;

Result<std::vector<int64_t>> ParseArrayRange(std::string_view text) {
  std::vector<int64_t> out;
  const std::string field = "array";
  if (text.empty()) return InvalidArgument("array: empty; write e.g. 1-1000, 0-9:2 or 1,3,5");
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string_view part =
        text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    int64_t step = 1;
    if (size_t colon = part.find(':'); colon != part.npos) {
      TY_ASSIGN_OR_RETURN(step, ParseInt("array step", part.substr(colon + 1), 1, 1'000'000'000));
      part = part.substr(0, colon);
    }
    int64_t lo = 0, hi = 0;
    if (size_t dash = part.find('-'); dash != part.npos) {
      TY_ASSIGN_OR_RETURN(lo, ParseInt(field, part.substr(0, dash), 0, 1'000'000'000));
      TY_ASSIGN_OR_RETURN(hi, ParseInt(field, part.substr(dash + 1), 0, 1'000'000'000));
      if (hi < lo) {
        return InvalidArgument("array: range " + QuoteForMessage(part) + " ends before it starts");
      }
    } else {
      TY_ASSIGN_OR_RETURN(lo, ParseInt(field, part, 0, 1'000'000'000));
      hi = lo;
    }
    for (int64_t i = lo; i <= hi; i += step) {
      if (static_cast<int64_t>(out.size()) >= kMaxArrayJobs) {
        return InvalidArgument("array: at most " + std::to_string(kMaxArrayJobs) +
                               " jobs per array, got more from " + QuoteForMessage(text));
      }
      out.push_back(i);
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Result<SubmitRequestParams> ParseSubmit(std::string_view body, const Params& params) {
  TY_RETURN_IF_ERROR(CheckParams(params, {"array", "code"}));
  if (body.size() > kMaxSubmitBytes) {
    return ResourceExhausted("job spec is " + std::to_string(body.size()) +
                             " bytes; the limit is " + std::to_string(kMaxSubmitBytes));
  }
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return InvalidArgument("empty body: send a job spec (YAML, JSON or an #SBATCH script)");
  }
  SpecParseResult parsed = ParseJobText(body, "job");
  if (!parsed.ok()) {
    std::string msg;
    for (const auto& d : parsed.errors) msg += (msg.empty() ? "" : "; ") + d.ToString();
    return InvalidArgument(msg);
  }
  SubmitRequestParams out;
  for (const auto& w : parsed.warnings) out.warnings.push_back(w.ToString());
  if (auto array = Param(params, "array")) {
    TY_ASSIGN_OR_RETURN(std::vector<int64_t> indices, ParseArrayRange(*array));
    for (int64_t i : indices) {
      JobSpec s = *parsed.spec;
      s.labels[kArrayIndexLabel] = std::to_string(i);
      if (s.labels.size() > SpecLimits::kMaxLabels) {
        return InvalidArgument("labels: an array job needs one free label of " +
                               std::to_string(SpecLimits::kMaxLabels));
      }
      out.specs.push_back(std::move(s));
    }
  } else {
    out.specs.push_back(std::move(*parsed.spec));
  }
  // `code`: the commit the submitter's working tree is at (the CLI captures it), for
  // specs that leave experiment.code to be captured ("auto"). Validated with the spec.
  if (auto code = Param(params, "code")) {
    for (JobSpec& s : out.specs) {
      if (s.experiment.code == "auto") s.experiment.code = std::string(*code);
    }
  }
  return out;
}

Result<ListJobsRequest> ParseListJobs(const Params& params) {
  TY_RETURN_IF_ERROR(
      CheckParams(params, {"state", "tenant", "queue", "name", "after", "limit", "order"}));
  ListJobsRequest r;
  if (auto states = Param(params, "state")) {
    std::string_view text = *states;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t comma = text.find(',', pos);
      std::string_view word =
          text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
      std::optional<JobState> s;
      for (JobState candidate : {JobState::kPending, JobState::kAdmitted, JobState::kStarting,
                                 JobState::kRunning, JobState::kPreempting, JobState::kLost,
                                 JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
        std::string name(JobStateName(candidate));
        if (word.size() == name.size() &&
            std::equal(word.begin(), word.end(), name.begin(),
                       [](char a, char b) { return std::tolower(a) == std::tolower(b); })) {
          s = candidate;
        }
      }
      if (!s) {
        return InvalidArgument("state: unknown job state " + QuoteForMessage(word) +
                               "; valid: Pending, Starting, Running, Preempting, Lost, "
                               "Succeeded, Failed, Cancelled");
      }
      r.filter.states.push_back(*s);
      if (comma == std::string_view::npos) break;
      pos = comma + 1;
    }
  }
  if (auto t = Param(params, "tenant")) {
    TY_RETURN_IF_ERROR(ValidateName("tenant", *t));
    r.filter.tenant = *t;
  }
  if (auto q = Param(params, "queue")) {
    TY_RETURN_IF_ERROR(ValidateName("queue", *q));
    r.filter.queue = *q;
  }
  if (auto n = Param(params, "name")) {
    if (n->size() > kMaxNameLength) {
      return InvalidArgument("name: a prefix of at most " + std::to_string(kMaxNameLength) +
                             " characters, got " + std::to_string(n->size()));
    }
    r.filter.name_prefix = *n;
  }
  if (auto a = Param(params, "after")) {
    TY_ASSIGN_OR_RETURN(r.after_id, ParseInt("after", *a, 0, INT64_MAX));
  }
  if (auto l = Param(params, "limit")) {
    TY_ASSIGN_OR_RETURN(int64_t limit, ParseInt("limit", *l, 1, store::kMaxListLimit));
    r.limit = static_cast<int>(limit);
  }
  if (auto o = Param(params, "order")) {
    if (*o != "asc" && *o != "desc") {
      return InvalidArgument("order: expected asc (oldest first) or desc (newest first), got " +
                             QuoteForMessage(*o));
    }
    r.order = *o == "desc" ? store::JobOrder::kDescending : store::JobOrder::kAscending;
  }
  return r;
}

Result<CheckpointReport> ParseCheckpoint(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "checkpoint"));
  return CheckpointFromJson(j);
}

Result<LogSearchRequest> ParseLogSearch(const Params& p) {
  TY_RETURN_IF_ERROR(CheckParams(p, {"pattern", "attempt", "rank", "ignore_case", "max_matches"}));
  LogSearchRequest r;
  auto pattern = Param(p, "pattern");
  if (!pattern || pattern->empty()) {
    return InvalidArgument("pattern: required, the text to find (a fixed string, 1.." +
                           std::to_string(kMaxSearchPatternBytes) + " bytes)");
  }
  if (pattern->size() > kMaxSearchPatternBytes) {
    return InvalidArgument("pattern: at most " + std::to_string(kMaxSearchPatternBytes) +
                           " bytes, got " + std::to_string(pattern->size()));
  }
  if (pattern->find_first_of("\r\n") != std::string::npos) {
    return InvalidArgument("pattern: one line of text (no newline), got " +
                           QuoteForMessage(*pattern));
  }
  r.pattern = *pattern;
  if (auto a = Param(p, "attempt")) {
    TY_ASSIGN_OR_RETURN(int64_t attempt, ParseInt("attempt", *a, 0, 1'000'000));
    r.attempt = static_cast<int32_t>(attempt);
  }
  if (auto rank = Param(p, "rank")) {
    TY_ASSIGN_OR_RETURN(int64_t v, ParseInt("rank", *rank, 0, 100'000'000));
    r.rank = static_cast<int32_t>(v);
  }
  if (auto m = Param(p, "max_matches")) {
    TY_ASSIGN_OR_RETURN(r.max_matches, ParseInt("max_matches", *m, 1, kMaxSearchMatches));
  }
  if (auto i = Param(p, "ignore_case")) {
    if (*i != "true" && *i != "false" && *i != "1" && *i != "0") {
      return InvalidArgument("ignore_case: expected true or false, got " + QuoteForMessage(*i));
    }
    r.ignore_case = *i == "true" || *i == "1";
  }
  return r;
}

Result<LogReadParams> ParseLogRead(const Params& params) {
  TY_RETURN_IF_ERROR(CheckParams(params, {"rank", "attempt", "offset", "wait_ms", "max_bytes"}));
  LogReadParams r;
  if (auto p = Param(params, "rank")) {
    TY_ASSIGN_OR_RETURN(int64_t rank, ParseInt("rank", *p, 0, 100'000'000));
    r.rank = static_cast<int32_t>(rank);
  }
  if (auto p = Param(params, "offset")) {
    TY_ASSIGN_OR_RETURN(r.offset, ParseInt("offset", *p, 0, INT64_MAX));
  }
  if (auto p = Param(params, "wait_ms")) {
    TY_ASSIGN_OR_RETURN(r.wait_ms, ParseInt("wait_ms", *p, 0, kMaxPollWait.count()));
  }
  if (auto p = Param(params, "max_bytes")) {
    TY_ASSIGN_OR_RETURN(r.max_bytes, ParseInt("max_bytes", *p, 1, kMaxLogChunkBytes));
  }
  if (auto p = Param(params, "attempt")) {
    TY_ASSIGN_OR_RETURN(int64_t attempt, ParseInt("attempt", *p, 0, 1'000'000));
    r.attempt = static_cast<int32_t>(attempt);
  }
  return r;
}

namespace {

ordered_json RenderPlacement(const std::vector<sched::Placement>& placement) {
  ordered_json a = ordered_json::array();
  for (const auto& p : placement) a.push_back({{"node", p.node}, {"gpus", p.gpus}});
  return a;
}

}  // namespace

ordered_json RenderJobSummary(const Job& job) {
  ordered_json j = ToJson(job);
  ordered_json out = ordered_json::object();
  out["id"] = job.id;
  out["name"] = job.spec.name;
  out["tenant"] = job.spec.tenant;
  out["queue"] = job.spec.queue;
  out["priority"] = job.spec.priority;
  out["state"] = std::string(JobStateName(job.state));
  out["reason"] = job.reason;
  out["replicas"] = job.spec.replicas;
  out["gpus_per_replica"] = job.spec.resources.gpus;
  out["held"] = job.held;
  out["submit_time_ms"] = job.submit_time.time_since_epoch().count();
  out["state_time_ms"] = job.state_time.time_since_epoch().count();
  const Attempt* a = job.CurrentAttempt();
  out["nodes"] = a ? a->nodes : std::vector<std::string>{};
  out["attempts"] = j["attempts"].size();
  if (auto it = job.spec.labels.find(kArrayIndexLabel); it != job.spec.labels.end()) {
    out["array_index"] = it->second;
  }
  return out;
}

ordered_json RenderJob(const JobView& v) {
  // What people see: the values of the spec's secret_env never leave the server here.
  Job shown = v.job;
  shown.spec = RedactSecrets(std::move(shown.spec));
  ordered_json j = ToJson(shown);
  j["name"] = v.job.spec.name;
  j["placement"] = RenderPlacement(v.placement);
  ordered_json ranks = ordered_json::array();
  for (const RankView& r : v.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"replica", r.replica},
                     {"node", r.node},
                     {"gpus", r.gpus},
                     {"state", r.state},
                     {"exit_code", r.exit_code},
                     {"signal", r.signal},
                     {"message", r.message}});
  }
  j["ranks"] = std::move(ranks);
  j["stopping"] = v.stopping;
  return j;
}

ordered_json RenderJobWithErrors(const JobView& v,
                                 const std::map<int32_t, RankErrorLines>& errors) {
  ordered_json j = RenderJob(v);
  for (ordered_json& a : j["attempts"]) {
    const auto index = a.value("index", int32_t{-1});
    auto e = errors.find(index);
    a["error_lines"] = e == errors.end() ? ordered_json::array() : ordered_json(e->second.lines);
    a["error_rank"] = e == errors.end() ? ordered_json(nullptr) : ordered_json(e->second.rank);
  }
  return j;
}

ordered_json RenderEvents(const store::EventPage& page) {
  ordered_json events = ordered_json::array();
  for (const auto& e : page.events) {
    events.push_back({{"seq", e.seq},
                      {"time_ms", e.time.time_since_epoch().count()},
                      {"actor", e.actor},
                      {"kind", e.kind},
                      {"message", e.message}});
  }
  return {{"events", std::move(events)},
          {"next_after",
           page.next_after_seq ? ordered_json(*page.next_after_seq) : ordered_json(nullptr)}};
}

ordered_json RenderLogSearch(const LogSearchResult& found) {
  ordered_json matches = ordered_json::array();
  for (const LogSearchMatch& m : found.matches) {
    matches.push_back({{"attempt", m.attempt},
                       {"rank", m.rank},
                       {"line", m.match.line},
                       {"offset", m.match.offset},
                       {"text", m.match.text}});
  }
  return {
      {"matches", std::move(matches)}, {"truncated", found.truncated}, {"pruned", found.pruned}};
}

Result<JobView> VisibleJob(Cluster& cluster, std::string_view id_text, Call& call, Action action) {
  TY_ASSIGN_OR_RETURN(JobId id, ParseJobId(id_text));
  call.object = "job/" + std::to_string(id);
  TY_ASSIGN_OR_RETURN(JobView v, cluster.GetJob(id));
  call.tenant = v.job.spec.tenant;
  TY_RETURN_IF_ERROR(Authorize(call.who, action,
                               {v.job.spec.tenant, std::string(UserOfActor(v.job.submitted_by))}));
  return v;
}

namespace {

Result<JobView> RequestedJob(const ApiServices& s, const Request& req, Call& call, Action action) {
  return VisibleJob(s.cluster, req.matches[1].str(), call, action);
}

// Specs that name no tenant (or the default one) go to the caller's, unless the caller
// is a cluster admin; the caller must be allowed to submit to each spec's tenant, at
// its priority class. Sets `call.tenant` (the last spec's) for the audit log.
Status AuthorizeSubmission(const Principal& who, const std::vector<PriorityClass>& classes,
                           std::vector<JobSpec>& specs, Call& call) {
  int32_t default_value = 0;
  for (const PriorityClass& pc : classes) {
    if (pc.name == kDefaultPriorityClass) default_value = pc.value;
  }
  for (JobSpec& s : specs) {
    if (who.role != Role::kClusterAdmin && s.tenant == kDefaultTenant) s.tenant = who.tenant;
    call.tenant = s.tenant;
    TY_RETURN_IF_ERROR(Authorize(who, Action::kSubmitJobs, {s.tenant}));
    for (const PriorityClass& pc : classes) {
      if (pc.name != s.priority) continue;
      TY_RETURN_IF_ERROR(AuthorizePriorityClass(who, pc.name, pc.value, default_value));
    }
  }
  return Status::Ok();
}

// The datasets the specs read, resolved to exact versions and their sources.
Status ResolveData(const ApiServices& s, std::vector<JobSpec>& specs) {
  bool any = false;
  for (const JobSpec& spec : specs) any = any || !spec.data.empty();
  if (!any) return Status::Ok();
  if (s.datasets == nullptr) {
    return FailedPrecondition("data: this server keeps no datasets; remove data: from the spec");
  }
  return s.datasets->Resolve(specs);
}

Result<Reply> Submit(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(SubmitRequestParams parsed, ParseSubmit(req.body, req.params));
  TY_RETURN_IF_ERROR(
      AuthorizeSubmission(call.who, s.cluster.ListPriorityClasses(), parsed.specs, call));
  TY_RETURN_IF_ERROR(ResolveData(s, parsed.specs));
  SubmitOptions so;
  so.may_create_queues = call.who.role == Role::kClusterAdmin;
  so.audit = call.audit;
  so.audit->tenant = call.tenant;
  so.audit->status = 201;
  so.run_as_uid = call.who.run_as_uid;
  so.run_as_gid = call.who.run_as_gid;
  auto ids = s.cluster.Submit(std::move(parsed.specs), call.who.Actor(), std::move(so));
  if (!ids.ok() && ids.status().code() == StatusCode::kResourceExhausted) {
    // The tenant's limit of unfinished jobs: retry once some have finished.
    return Reply::Json(429, ordered_json{{"error", ids.status().message()}})
        .Header("Retry-After", "10");
  }
  if (!ids.ok()) return ids.status();
  call.audited = true;  // committed with the jobs
  call.object = "job/" + std::to_string(ids->front());
  return Reply::Json(
      201, ordered_json{{"id", ids->front()}, {"ids", *ids}, {"warnings", parsed.warnings}});
}

Result<Reply> ListJobs(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(ListJobsRequest r, ParseListJobs(req.params));
  if (call.who.role != Role::kClusterAdmin) {
    if (r.filter.tenant.empty()) r.filter.tenant = call.who.tenant;
    TY_RETURN_IF_ERROR(Authorize(call.who, Action::kReadJobs, {r.filter.tenant}));
  }
  TY_ASSIGN_OR_RETURN(store::JobPage page, s.cluster.ListJobs(r));
  ordered_json jobs = ordered_json::array();
  for (const Job& j : page.jobs) jobs.push_back(RenderJobSummary(j));
  return Reply::Json(
      200, ordered_json{{"jobs", std::move(jobs)},
                        {"next_after", page.next_after_id ? ordered_json(*page.next_after_id)
                                                          : ordered_json(nullptr)}});
}

Result<Reply> GetJob(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(JobView v, RequestedJob(s, req, call, Action::kReadJobs));
  std::map<int32_t, RankErrorLines> errors;
  for (const Attempt& a : v.job.attempts) {
    if (!AttemptFailed(a.exit_reason)) continue;
    if (auto e = s.logs.ErrorLines(v.job.id, a.index)) errors[a.index] = std::move(*e);
  }
  return Reply::Json(200, RenderJobWithErrors(v, errors));
}

// POST /jobs/{id}/cancel, /hold or /release: `verb`.
Result<Reply> ChangeJob(const ApiServices& s, const std::string& verb, const Request& req,
                        Call& call) {
  TY_ASSIGN_OR_RETURN(JobView v, RequestedJob(s, req, call, Action::kManageJob));
  const JobId id = v.job.id;
  const std::string actor = call.who.Actor();
  TY_RETURN_IF_ERROR(verb == "cancel" ? s.cluster.Cancel(id, actor)
                     : verb == "hold" ? s.cluster.Hold(id, actor)
                                      : s.cluster.Release(id, actor));
  TY_ASSIGN_OR_RETURN(JobView now, s.cluster.GetJob(id));
  return Reply::Json(200, RenderJobSummary(now.job));
}

Result<Reply> ListEvents(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(CheckParams(req.params, {"after", "limit"}));
  TY_ASSIGN_OR_RETURN(JobView v, RequestedJob(s, req, call, Action::kReadJobs));
  TY_ASSIGN_OR_RETURN(Paging paging, ParsePaging(req.params, 1000));
  TY_ASSIGN_OR_RETURN(store::EventPage page,
                      s.cluster.ListEvents(v.job.id, paging.after, paging.limit));
  return Reply::Json(200, RenderEvents(page));
}

Result<Reply> ReadLog(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(
      CheckParams(req.params, {"rank", "attempt", "offset", "wait_ms", "max_bytes"}));
  TY_ASSIGN_OR_RETURN(JobView v, RequestedJob(s, req, call, Action::kReadJobs));
  TY_ASSIGN_OR_RETURN(LogReadParams p, ParseLogRead(req.params));
  const JobId id = v.job.id;
  const int32_t attempt =
      p.attempt.value_or(v.job.attempts.empty() ? 0 : v.job.attempts.back().index);
  // Following a finished job would only wait: answer at once.
  if (IsTerminal(v.job.state)) p.wait_ms = 0;
  TY_ASSIGN_OR_RETURN(LogChunk chunk, s.logs.ReadLog(id, attempt, p.rank, p.offset, p.max_bytes,
                                                     Duration(p.wait_ms)));
  auto now = s.cluster.GetJob(id);
  Reply reply{200, std::move(chunk.data), "application/octet-stream", {}};
  reply.Header("X-Trainyard-Next-Offset", std::to_string(chunk.next_offset))
      .Header("X-Trainyard-Attempt", std::to_string(attempt))
      .Header("X-Trainyard-Job-State",
              std::string(JobStateName(now.ok() ? now->job.state : v.job.state)));
  if (chunk.pruned) reply.Header("X-Trainyard-Log-Pruned", "true");
  return reply;
}

Result<Reply> SearchLogs(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(LogSearchRequest r, ParseLogSearch(req.params));
  TY_ASSIGN_OR_RETURN(JobView v, RequestedJob(s, req, call, Action::kReadJobs));
  TY_ASSIGN_OR_RETURN(LogSearchResult found, s.logs.Search(v.job.id, r));
  return Reply::Json(200, RenderLogSearch(found));
}

Result<Reply> ReportCheckpoint(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(CheckpointReport r, ParseCheckpoint(req.body));
  TY_ASSIGN_OR_RETURN(JobView v, RequestedJob(s, req, call, Action::kManageJob));
  TY_RETURN_IF_ERROR(s.cluster.ReportCheckpoint(v.job.id, r, call.who.Actor()));
  TY_ASSIGN_OR_RETURN(JobView now, s.cluster.GetJob(v.job.id));
  return Reply::Json(200, RenderJob(now));
}

// GET /jobs/{id}/trace query: format (chrome, the default, or otlp), steps (the most
// step spans, 0..1e6, default 10,000).
struct TraceParams {
  std::string format = "chrome";
  int64_t max_steps = 10'000;
};
Result<TraceParams> ParseTraceParams(const Params& params) {
  TY_RETURN_IF_ERROR(CheckParams(params, {"format", "steps"}));
  TraceParams p;
  p.format = Param(params, "format").value_or("chrome");
  if (p.format != "chrome" && p.format != "otlp") {
    return InvalidArgument("format: must be chrome or otlp, got " + QuoteForMessage(p.format));
  }
  if (auto steps = Param(params, "steps")) {
    TY_ASSIGN_OR_RETURN(p.max_steps, ParseInt("steps", *steps, 0, 1'000'000));
  }
  return p;
}

Result<Reply> Trace(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(JobView v, RequestedJob(s, req, call, Action::kReadJobs));
  TY_ASSIGN_OR_RETURN(TraceParams p, ParseTraceParams(req.params));
  track::TraceInput in;
  in.job = &v.job;
  in.now = Timestamp(
      std::chrono::duration_cast<Duration>(std::chrono::system_clock::now().time_since_epoch()));
  for (int64_t after = 0;;) {
    TY_ASSIGN_OR_RETURN(store::EventPage page, s.cluster.ListEvents(v.job.id, after, 1000));
    in.events.insert(in.events.end(), page.events.begin(), page.events.end());
    if (!page.next_after_seq) break;
    after = *page.next_after_seq;
  }
  if (s.series != nullptr) {
    TY_ASSIGN_OR_RETURN(track::TraceSpans spans,
                        track::TraceSpansFromSeries(*s.series, v.job, p.max_steps));
    in.steps = std::move(spans.steps);
    in.checkpoints = std::move(spans.checkpoints);
  }
  return Reply::Json(
      200, p.format == "otlp" ? track::JobTraceOtlp(in, "trainyard") : track::JobTrace(in));
}

}  // namespace

void InstallJobRoutes(Routes& routes, const ApiServices& s) {
  routes.User("POST", V1("/jobs"), Action::kSubmitJobs, Bind(s, Submit));
  routes.User("GET", V1("/jobs"), Action::kReadJobs, Bind(s, ListJobs));
  routes.User("GET", V1(R"(/jobs/([^/]+))"), Action::kReadJobs, Bind(s, GetJob));
  for (const std::string verb : {"cancel", "hold", "release"}) {
    routes.User(
        "POST", V1(R"(/jobs/([^/]+)/)" + verb), Action::kManageJob,
        [s, verb](const Request& req, Call& call) { return ChangeJob(s, verb, req, call); });
  }
  routes.User("GET", V1(R"(/jobs/([^/]+)/events)"), Action::kReadJobs, Bind(s, ListEvents));
  routes.User("GET", V1(R"(/jobs/([^/]+)/logs)"), Action::kReadJobs, Bind(s, ReadLog));
  routes.User("GET", V1(R"(/jobs/([^/]+)/logs/search)"), Action::kReadJobs, Bind(s, SearchLogs));
  routes.User("POST", V1(R"(/jobs/([^/]+)/checkpoint)"), Action::kManageJob,
              Bind(s, ReportCheckpoint));
  routes.User("GET", V1(R"(/jobs/([^/]+)/trace)"), Action::kReadJobs, Bind(s, Trace));
}

}  // namespace trainyard::server
