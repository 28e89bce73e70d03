#include "server/api.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>

#include "core/codec.h"
#include "core/job_text.h"
#include "core/names.h"
#include "core/spec_codec.h"
#include "http/compress.h"
#include "http/server.h"
#include "monitor/diagnose.h"
#include "monitor/webhook.h"
#include "server/log_search.h"
#include "server/metrics_page.h"
#include "server/web_assets.h"
#include "track/chrome_trace.h"
#include "track/ingest.h"
#include "track/runs.h"
#include "track/series_store.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

void SendJson(httplib::Response& res, int status, const ordered_json& body) {
  res.status = status;
  res.set_content(body.dump() + "\n", "application/json");
}

void SendError(httplib::Response& res, const Status& s) {
  SendJson(res, HttpStatusFor(s), ordered_json{{"error", s.message()}});
}

Result<int64_t> ParseInt(std::string_view field, std::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty() || v < lo || v > hi) {
    return InvalidArgument(std::string(field) + ": expected an integer " + std::to_string(lo) +
                           ".." + std::to_string(hi) + ", got " + QuoteForMessage(text));
  }
  return v;
}

std::optional<std::string> Param(const Params& p, const std::string& key) {
  auto it = p.find(key);
  if (it == p.end()) return std::nullopt;
  return it->second;
}

Result<json> ParseJsonBody(std::string_view body, std::string_view what) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(std::string(what) + ": the body is not valid JSON");
  if (!j.is_object())
    return InvalidArgument(std::string(what) + ": the body must be a JSON object");
  return j;
}

// `after` (a sequence number, 0..) and `limit` (1..kMaxListLimit) of a paged listing.
struct Paging {
  int64_t after = 0;
  int limit = 0;
};
Result<Paging> ParsePaging(const Params& p, int default_limit) {
  Paging out{0, default_limit};
  if (auto a = Param(p, "after")) {
    TY_ASSIGN_OR_RETURN(out.after, ParseInt("after", *a, 0, INT64_MAX));
  }
  if (auto l = Param(p, "limit")) {
    TY_ASSIGN_OR_RETURN(int64_t limit, ParseInt("limit", *l, 1, store::kMaxListLimit));
    out.limit = static_cast<int>(limit);
  }
  return out;
}

// Unknown query parameters are errors: a typo ("stat=Pending") would otherwise
// silently widen a listing.
Status CheckParams(const Params& p, std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : p) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string valid;
      for (auto n : known) valid += (valid.empty() ? "" : ", ") + std::string(n);
      return InvalidArgument("unknown query parameter " + QuoteForMessage(k) + "; valid: " + valid);
    }
  }
  return Status::Ok();
}

// Unknown body fields are errors too, for the same reason.
Status CheckBodyKeys(const json& j, const char* what,
                     std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : j.items()) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string valid;
      for (auto n : known) valid += (valid.empty() ? "" : ", ") + std::string(n);
      return InvalidArgument(std::string(what) + ": unknown field " + QuoteForMessage(k) +
                             "; valid: " + valid);
    }
  }
  return Status::Ok();
}

// A user GET answered 200 with a body: a weak tag of the body, and 304 without the
// body when If-None-Match holds it. A poll that finds nothing changed costs the
// client a few headers.
void AnswerConditionally(const httplib::Request& req, httplib::Response& res) {
  if (res.status != 200 || res.body.empty()) return;
  const std::string etag = "W/\"" + ContentHash(res.body) + "\"";
  res.set_header("ETag", etag);
  res.set_header("Cache-Control", "no-cache");
  if (IfNoneMatchHas(req.get_header_value("If-None-Match"), etag)) {
    res.status = 304;
    res.body.clear();
  }
}

// The dashboard keeps to its own origin: its scripts and styles come from here (uPlot
// sets inline styles), it calls only this server's API and may not be framed.
constexpr const char* kDashboardPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'";

void SendWebFile(const httplib::Request& req, httplib::Response& res, Result<WebFile> file) {
  if (!file.ok()) return SendError(res, file.status());
  res.set_header("ETag", file->etag);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Content-Security-Policy", kDashboardPolicy);
  if (IfNoneMatchHas(req.get_header_value("If-None-Match"), file->etag)) {
    res.status = 304;
    return;
  }
  res.status = 200;
  http::SendCompressed(req, res, std::move(file->body), file->content_type, std::move(file->gzip),
                       6);
}

ordered_json Placement(const std::vector<sched::Placement>& placement) {
  ordered_json a = ordered_json::array();
  for (const auto& p : placement) a.push_back({{"node", p.node}, {"gpus", p.gpus}});
  return a;
}

}  // namespace

int HttpStatusFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 413;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    default:
      return 500;
  }
}

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

Result<JobId> ParseJobId(std::string_view text) {
  auto id = ParseInt("job id", text, 1, INT64_MAX);
  if (!id.ok()) {
    return InvalidArgument("job id: expected a positive integer, got " + QuoteForMessage(text));
  }
  return *id;
}

Result<CheckpointReport> ParseCheckpoint(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "checkpoint"));
  CheckpointReport r;
  auto path = j.find("path");
  if (path == j.end() || !path->is_string() || path->get<std::string>().empty()) {
    return InvalidArgument("checkpoint.path: required, a non-empty string");
  }
  r.path = path->get<std::string>();
  if (r.path.size() > SpecLimits::kMaxPathBytes) {
    return InvalidArgument("checkpoint.path: at most " + std::to_string(SpecLimits::kMaxPathBytes) +
                           " bytes");
  }
  if (auto step = j.find("step"); step != j.end() && !step->is_null()) {
    if (!step->is_number_integer() || step->get<int64_t>() < 0) {
      return InvalidArgument("checkpoint.step: expected an integer >= 0, got " + step->dump());
    }
    r.step = step->get<int64_t>();
  }
  // A write time in `unit_ms` milliseconds, checked before it becomes an integer (a
  // double beyond int64 is undefined to convert; found by fuzz_api_request).
  constexpr double kMaxWriteMs = 30.0 * 24 * 3600 * 1000;  // 30 days
  auto write_duration = [&](const char* key, double unit_ms) -> Status {
    auto d = j.find(key);
    if (d == j.end() || d->is_null()) return Status::Ok();
    const double ms = d->is_number() ? d->get<double>() * unit_ms : -1;
    if (!(ms >= 0 && ms <= kMaxWriteMs)) {
      return InvalidArgument(std::string("checkpoint.") + key + ": expected a number from 0 to " +
                             std::to_string(static_cast<int64_t>(kMaxWriteMs / unit_ms)) +
                             " (30 days), got " + d->dump());
    }
    r.write_duration = Duration(static_cast<int64_t>(ms));
    return Status::Ok();
  };
  TY_RETURN_IF_ERROR(write_duration("duration_ms", 1));
  TY_RETURN_IF_ERROR(write_duration("write_duration_ms", 1));
  TY_RETURN_IF_ERROR(write_duration("duration_s", 1000));
  return r;
}

namespace {

// An integer field of a JSON body; nullopt when absent or null.
Result<std::optional<int64_t>> IntField(const json& j, std::string_view what, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) {
    return InvalidArgument(std::string(what) + "." + key + ": expected an integer, got " +
                           it->dump());
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

// The two GPU counts both bodies carry, both required.
Status ReadGpuCounts(const json& j, std::string_view what, int64_t& guaranteed, int64_t& limit) {
  for (auto [key, out] :
       {std::pair{"guaranteed_gpus", &guaranteed}, std::pair{"limit_gpus", &limit}}) {
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> v, IntField(j, what, key));
    if (!v) return InvalidArgument(std::string(what) + "." + key + ": required, an integer");
    *out = *v;
  }
  return Status::Ok();
}

}  // namespace

Result<TenantQuota> ParseTenantQuota(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "tenant"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "tenant", {"guaranteed_gpus", "limit_gpus"}));
  TenantQuota q;
  TY_RETURN_IF_ERROR(ReadGpuCounts(j, "tenant", q.guaranteed_gpus, q.limit_gpus));
  return q;
}

Result<Queue> ParseQueue(std::string_view body, const std::string& tenant,
                         const std::string& name) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "queue"));
  TY_RETURN_IF_ERROR(
      CheckBodyKeys(j, "queue", {"guaranteed_gpus", "limit_gpus", "weight", "parent"}));
  Queue q;
  q.tenant = tenant;
  q.name = name;
  TY_RETURN_IF_ERROR(ReadGpuCounts(j, "queue", q.guaranteed_gpus, q.limit_gpus));
  if (auto w = j.find("weight"); w != j.end() && !w->is_null()) {
    if (!w->is_number()) {
      return InvalidArgument("queue.weight: expected a number, got " + w->dump());
    }
    q.weight = w->get<double>();
  }
  if (auto p = j.find("parent"); p != j.end() && !p->is_null()) {
    if (!p->is_string())
      return InvalidArgument("queue.parent: expected a string, got " + p->dump());
    q.parent = p->get<std::string>();
  }
  TY_RETURN_IF_ERROR(ValidateQueue(q));
  return q;
}

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
  j["placement"] = Placement(v.placement);
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

ordered_json RenderNode(const NodeView& v) {
  ordered_json j = ToJson(v.node);
  j["address"] = v.address;
  j["simulated"] = v.simulated;
  j["connected"] = v.connected;
  j["last_heartbeat_ms"] = v.last_heartbeat.time_since_epoch().count();
  j["gpus_total"] = v.node.gpus.size();
  j["gpus_used"] = v.gpus_used;
  j["gpu_type"] = v.node.gpus.empty() ? "" : v.node.gpus.front().model;
  j["jobs"] = v.jobs;
  // By GPU index: the job running on it, or null when it is free.
  ordered_json on_gpu = ordered_json::array();
  for (size_t g = 0; g < v.node.gpus.size(); ++g) {
    const JobId id = g < v.gpu_jobs.size() ? v.gpu_jobs[g] : 0;
    on_gpu.push_back(id == 0 ? ordered_json(nullptr) : ordered_json(id));
  }
  j["gpu_jobs"] = std::move(on_gpu);
  if (!v.telemetry.empty()) {
    ordered_json gpus = ordered_json::array();
    for (const GpuTelemetry& t : v.telemetry) {
      ordered_json g = {{"index", t.index}};
      for (auto [key, value] : {std::pair{"util_pct", t.util_pct},
                                {"mem_used_mib", t.mem_used_mib},
                                {"temp_c", t.temp_c},
                                {"power_w", t.power_w},
                                {"sm_clock_mhz", t.sm_clock_mhz},
                                {"ecc_uncorrectable", t.ecc_uncorrectable},
                                {"xid_last", t.xid_last},
                                {"xid_count", t.xid_count}}) {
        if (value) g[key] = *value;
      }
      if (t.throttled) g["throttled"] = *t.throttled;
      gpus.push_back(std::move(g));
    }
    j["telemetry"] = std::move(gpus);
  }
  if (!v.links.empty()) {
    ordered_json links = ordered_json::array();
    for (const LinkTelemetry& l : v.links) {
      links.push_back({{"name", l.name}, {"kind", l.kind}, {"up", l.up}, {"errors", l.errors}});
    }
    j["links"] = std::move(links);
  }
  if (!v.disks.empty()) {
    ordered_json disks = ordered_json::array();
    for (const DiskTelemetry& d : v.disks) {
      disks.push_back(
          {{"path", d.path}, {"free_bytes", d.free_bytes}, {"total_bytes", d.total_bytes}});
    }
    j["disks"] = std::move(disks);
  }
  if (v.health_check) {
    j["health_check"] = {{"ok", v.health_check->ok},
                         {"output", v.health_check->output},
                         {"at_ms", v.health_check->at_ms},
                         {"trigger", v.health_check->trigger}};
  }
  if (!v.faults.empty()) {
    ordered_json faults = ordered_json::array();
    for (const FaultSpec& f : v.faults) {
      faults.push_back({{"id", f.id}, {"kind", f.kind}, {"gpu", f.gpu}, {"until_ms", f.until_ms}});
    }
    j["faults"] = std::move(faults);
  }
  return j;
}

ordered_json RenderTenant(const Tenant& t) { return ToJson(t); }

ordered_json RenderQueue(const QueueView& v) {
  ordered_json j = ToJson(v.queue);
  j["gpus_in_use"] = v.gpus_in_use;
  j["gpus_borrowed"] = v.gpus_borrowed;
  j["pending_jobs"] = v.pending_jobs;
  j["running_jobs"] = v.running_jobs;
  return j;
}

namespace {

struct TaskRef {
  std::string node;
  JobId job = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  int64_t offset = 0;
};

// The fields common to the agent's logs and metrics requests.
Result<TaskRef> ParseTaskRef(const json& j, std::string_view what) {
  TaskRef t;
  auto node = j.find("node");
  if (node == j.end() || !node->is_string()) {
    return InvalidArgument(std::string(what) + ".node: required, a string");
  }
  t.node = node->get<std::string>();
  auto id = j.find("task_id");
  if (id == j.end() || !id->is_string()) {
    return InvalidArgument(std::string(what) + ".task_id: required, a string");
  }
  const std::string s = id->get<std::string>();
  const size_t a = s.find('.'), b = s.find('.', a == s.npos ? a : a + 1);
  if (a == s.npos || b == s.npos) {
    return InvalidArgument(std::string(what) + ".task_id: expected <job>.<attempt>.<rank>, got " +
                           QuoteForMessage(s));
  }
  TY_ASSIGN_OR_RETURN(t.job,
                      ParseInt("task_id job", std::string_view(s).substr(0, a), 1, INT64_MAX));
  TY_ASSIGN_OR_RETURN(
      int64_t attempt,
      ParseInt("task_id attempt", std::string_view(s).substr(a + 1, b - a - 1), 0, 1'000'000));
  TY_ASSIGN_OR_RETURN(int64_t rank,
                      ParseInt("task_id rank", std::string_view(s).substr(b + 1), 0, 100'000'000));
  t.attempt = static_cast<int32_t>(attempt);
  t.rank = static_cast<int32_t>(rank);
  auto off = j.find("offset");
  if (off == j.end() || !off->is_number_integer() || off->get<int64_t>() < 0) {
    return InvalidArgument(std::string(what) + ".offset: required, an integer >= 0");
  }
  t.offset = off->get<int64_t>();
  return t;
}

// A profile request id of `job` in field `field`.
Result<std::string> ProfileIdField(const json& j, const std::string& field, JobId job) {
  auto id = j.find("id");
  if (id == j.end() || !id->is_string() || !ProfileSeq(id->get<std::string>(), job)) {
    return InvalidArgument(field + ": required, a profile id of job " + std::to_string(job) +
                           " (p-" + std::to_string(job) + "-<n>), got " +
                           (id == j.end() ? std::string("nothing") : QuoteForMessage(id->dump())));
  }
  return id->get<std::string>();
}

// The checkpoint a metrics line reports, if it is one ({"kind": "checkpoint", ...}).
std::optional<CheckpointReport> CheckpointLine(const json& line) {
  auto kind = line.find("kind");
  if (kind == line.end() || !kind->is_string() || kind->get<std::string>() != "checkpoint") {
    return std::nullopt;
  }
  auto r = ParseCheckpoint(line.dump());
  if (!r.ok()) return std::nullopt;
  return *r;
}

}  // namespace

Result<ProfileParams> ParseProfileParams(std::string_view body) {
  ProfileParams p;
  const bool empty = body.find_first_not_of(" \t\r\n") == std::string_view::npos;
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(empty ? std::string_view("{}") : body, "profile"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "profile", {"steps", "rank"}));
  if (auto steps = j.find("steps"); steps != j.end() && !steps->is_null()) {
    if (!steps->is_number_integer() || steps->get<int64_t>() < 1 ||
        steps->get<int64_t>() > kMaxProfileSteps) {
      return InvalidArgument("profile.steps: expected an integer 1.." +
                             std::to_string(kMaxProfileSteps) + ", got " +
                             QuoteForMessage(steps->dump()));
    }
    p.steps = steps->get<int32_t>();
  }
  if (auto rank = j.find("rank"); rank != j.end() && !rank->is_null()) {
    if (!rank->is_number_integer() || rank->get<int64_t>() < 0 ||
        rank->get<int64_t>() > 100'000'000) {
      return InvalidArgument("profile.rank: expected a rank (an integer >= 0), got " +
                             QuoteForMessage(rank->dump()));
    }
    p.rank = rank->get<int32_t>();
  }
  return p;
}

Result<FaultRequest> ParseFaultRequest(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "fault"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "fault", {"kind", "gpu", "duration"}));
  FaultRequest f;
  auto kind = j.find("kind");
  if (kind == j.end() || !kind->is_string()) {
    return InvalidArgument(
        "fault.kind: required, one of xid, ecc, thermal, link-down, slow, "
        "hang, data-stall, loss-nan, grad-spike");
  }
  f.kind = kind->get<std::string>();
  if (!IsFaultKind(f.kind)) {
    return InvalidArgument("fault.kind: unknown fault kind " + QuoteForMessage(f.kind) +
                           "; one of xid, ecc, thermal, link-down, slow, hang, data-stall, "
                           "loss-nan, grad-spike");
  }
  if (auto gpu = j.find("gpu"); gpu != j.end() && !gpu->is_null()) {
    if (!gpu->is_number_integer() || gpu->get<int64_t>() < -1 || gpu->get<int64_t>() > 1023) {
      return InvalidArgument(
          "fault.gpu: expected a GPU index (0..1023) or -1 for the whole node, "
          "got " +
          QuoteForMessage(gpu->dump()));
    }
    f.gpu = gpu->get<int>();
  }
  if (auto d = j.find("duration"); d != j.end() && !d->is_null()) {
    if (d->is_number_integer() && d->get<int64_t>() >= 0 && d->get<int64_t>() <= 7 * 86'400) {
      f.duration = std::chrono::seconds(d->get<int64_t>());
    } else if (d->is_string()) {
      auto parsed = ParseDuration(d->get<std::string>());
      if (!parsed.ok()) {
        return InvalidArgument("fault.duration: " + std::string(parsed.status().message()));
      }
      f.duration = *parsed;
    } else {
      return InvalidArgument(
          "fault.duration: expected a duration such as \"90s\" or a number "
          "of seconds from 0 to 604800 (7d), got " +
          QuoteForMessage(d->dump()));
    }
  }
  return f;
}

ordered_json RenderAlert(const monitor::Alert& a) {
  auto time = [](Timestamp t) -> ordered_json {
    if (t == Timestamp{}) return nullptr;
    return monitor::FormatRfc3339(t);
  };
  ordered_json j = {{"rule", a.rule},
                    {"fingerprint", a.fingerprint},
                    {"state", std::string(monitor::AlertStateName(a.state))},
                    {"labels", a.labels},
                    {"annotations", a.annotations},
                    {"active_at", time(a.active_at)},
                    {"starts_at", time(a.starts_at)},
                    {"ends_at", time(a.ends_at)}};
  if (std::isfinite(a.value)) {
    j["value"] = a.value;
  } else {
    j["value"] = monitor::FormatValue(a.value);
  }
  return j;
}

Result<ProfileReport> ParseProfileReport(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "profile"));
  TY_ASSIGN_OR_RETURN(TaskRef t, ParseTaskRef(j, "profile"));
  ProfileReport r;
  r.node = t.node;
  r.job = t.job;
  r.attempt = t.attempt;
  r.rank = t.rank;
  r.offset = t.offset;
  TY_ASSIGN_OR_RETURN(r.id, ProfileIdField(j, "profile.id", t.job));
  auto status = j.find("status");
  if (status != j.end() && !status->is_null()) {
    if (*status == "recording") {
      r.kind = ProfileReport::Kind::kRecording;
    } else if (*status == "failed") {
      r.kind = ProfileReport::Kind::kFailed;
      auto message = j.find("message");
      if (message != j.end() && message->is_string()) r.message = message->get<std::string>();
    } else {
      return InvalidArgument(
          "profile.status: expected recording or failed (a trace is sent as "
          "data_b64 chunks), got " +
          QuoteForMessage(status->dump()));
    }
    return r;
  }
  r.kind = ProfileReport::Kind::kChunk;
  auto total = j.find("total_bytes");
  if (total == j.end() || !total->is_number_integer() || total->get<int64_t>() < 1) {
    return InvalidArgument("profile.total_bytes: required with data_b64, the trace's size (>= 1)");
  }
  r.total_bytes = total->get<int64_t>();
  auto b64 = j.find("data_b64");
  if (b64 == j.end() || !b64->is_string()) {
    return InvalidArgument("profile.data_b64: required, a base64 string (or a status)");
  }
  TY_ASSIGN_OR_RETURN(r.data, DecodeBase64(b64->get<std::string>(), "profile.data_b64"));
  if (static_cast<int64_t>(r.data.size()) > kMaxLogChunkBytes) {
    return ResourceExhausted("profile: at most 1 MiB of trace per request");
  }
  return r;
}

ordered_json RenderProfile(const ProfileRequest& r) {
  ordered_json ranks = ordered_json::array();
  for (const ProfileRank& k : r.ranks) {
    ordered_json rank = {{"rank", k.rank},
                         {"node", k.node},
                         {"state", ProfileStateName(k.state)},
                         {"bytes", k.bytes},
                         {"updated_ms", k.updated.time_since_epoch().count()}};
    if (!k.message.empty()) rank["message"] = k.message;
    ranks.push_back(std::move(rank));
  }
  return {{"id", r.id},
          {"job", r.job},
          {"attempt", r.attempt},
          {"steps", r.steps},
          {"created_ms", r.created.time_since_epoch().count()},
          {"created_by", r.created_by},
          {"done", r.Done()},
          {"ranks", std::move(ranks)}};
}

namespace {

// The GPU type a run's MFU is measured against: its spec's, else that of the node its
// latest attempt's first rank ran on (`gpu_type_of_node` answers "" when unknown).
void FillGpuType(track::RunRecord& run, const Job& job,
                 const std::function<std::string(const std::string&)>& gpu_type_of_node) {
  if (!run.gpu_type.empty() || job.attempts.empty() || job.attempts.back().nodes.empty()) return;
  run.gpu_type = gpu_type_of_node(job.attempts.back().nodes.front());
}

// A user request being served: who asks, and what it is about (for the audit log).
struct Call {
  Principal who;
  std::string object;  // "job/42"
  std::string tenant;  // the object's tenant, if it has one
  // The request's audit entry as far as known before the handler (who, what, from
  // where); a handler that commits it with its own change sets `audited`.
  AuditEntry audit;
  bool audited = false;
};

ordered_json RenderUser(const User& u) {
  return {{"name", u.name},
          {"tenant", u.tenant},
          {"role", RoleName(u.role)},
          {"priority_classes", u.priority_classes},
          {"created_ms", u.created.time_since_epoch().count()},
          {"created_by", u.created_by}};
}

ordered_json RenderToken(const ApiToken& t) {
  return {{"id", t.id},
          {"user", t.user},
          {"description", t.description},
          {"created_ms", t.created.time_since_epoch().count()},
          {"expires_ms",
           t.expires ? ordered_json(t.expires->time_since_epoch().count()) : ordered_json(nullptr)},
          {"revoked_ms", t.revoked ? ordered_json(t.revoked->time_since_epoch().count())
                                   : ordered_json(nullptr)}};
}

ordered_json RenderAudit(const AuditEntry& e) {
  return {{"seq", e.seq},       {"time_ms", e.time.time_since_epoch().count()},
          {"actor", e.actor},   {"token_id", e.token_id},
          {"tenant", e.tenant}, {"action", e.action},
          {"object", e.object}, {"source", e.source},
          {"status", e.status}, {"message", e.message}};
}

// Optional string field of a JSON body.
Result<std::optional<std::string>> StringField(const json& j, const char* what, const char* key,
                                               size_t max_bytes) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string() || it->get_ref<const std::string&>().size() > max_bytes) {
    return InvalidArgument(std::string(what) + "." + key + ": expected a string of at most " +
                           std::to_string(max_bytes) + " bytes");
  }
  return std::optional<std::string>(it->get<std::string>());
}

Result<std::optional<std::vector<std::string>>> StringListField(const json& j, const char* what,
                                                                const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::vector<std::string>>();
  const std::string field = std::string(what) + "." + key;
  if (!it->is_array() || it->size() > 64) {
    return InvalidArgument(field + ": expected a list of at most 64 names");
  }
  std::vector<std::string> out;
  for (const json& e : *it) {
    if (!e.is_string()) return InvalidArgument(field + ": expected names (strings)");
    out.push_back(e.get<std::string>());
    TY_RETURN_IF_ERROR(ValidateName(field, out.back()));
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

// GET /jobs/{id}/logs/search query: pattern (required), attempt, rank, ignore_case,
// max_matches.
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

// RenderJob, with each attempt's first error lines (`errors`, by attempt index):
// "error_lines" ([] when none) and "error_rank" (null when none).
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

}  // namespace

std::vector<RouteInfo> InstallApi(http::Server& server, Cluster& cluster, LogStore& logs,
                                  AccessControl& access, ApiOptions options) {
  using httplib::Request;
  using httplib::Response;
  const std::string v1 = "/api/v1";
  std::vector<RouteInfo> routes;
  Alerting* const alerting = options.alerting;

  server.SetMaxBodyBytes(kMaxRequestBytes);
  // Request durations per route, for /metrics. A method no route has is "other", so
  // that clients cannot add label values at will.
  auto http_metrics = std::make_shared<HttpMetrics>();
  server.SetObserver([http_metrics](const Request& req, const Response&, const std::string& route,
                                    std::chrono::nanoseconds took) {
    static const std::set<std::string> kMethods = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"};
    http_metrics->Observe(kMethods.contains(req.method) ? req.method : "other", route,
                          std::chrono::duration<double>(took).count());
  });
  server.SetErrorHandler([](const Request& req, Response& res) {
    // The HTTP server's own refusals (a malformed or oversized request) say why in a
    // line of text/plain; handlers' errors are JSON already.
    const bool refusal = res.get_header_value("Content-Type") == "text/plain";
    if (!res.body.empty() && !refusal) return;
    std::string msg = refusal             ? res.body.substr(0, res.body.find_last_not_of('\n') + 1)
                      : res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                      : res.status == 413 ? "request body too large; the limit is " +
                                                std::to_string(kMaxRequestBytes) + " bytes"
                                          : "HTTP " + std::to_string(res.status);
    res.set_content(ordered_json{{"error", msg}}.dump() + "\n", "application/json");
  });
  server.SetExceptionHandler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    SendJson(res, 500, {{"error", what}});
  });

  auto add = [&server](const std::string& method, const std::string& pattern,
                       http::Server::Handler h) { server.Route(method, pattern, std::move(h)); };
  // A user endpoint: authenticated, rate-limited, and (unless a GET) audited. The
  // handler checks what the caller may do with the object itself.
  using UserHandler = std::function<void(const Request&, Response&, Call&)>;
  // `audited` false: a data path too busy to audit request by request (metric
  // ingestion); the caller is still authenticated, rate-limited and authorized.
  auto user_at = [&](const std::string& method, const std::string& pattern, Action action,
                     UserHandler handler, bool audited) {
    routes.push_back({method, pattern, RouteAccess::kUser, action});
    add(method, pattern, [&access, method, handler, audited](const Request& req, Response& res) {
      Call call;
      auto p = access.Authenticate(req.get_header_value("Authorization"));
      call.audit.actor = p.ok() ? p->Actor() : "anonymous";
      call.audit.token_id = p.ok() ? p->token_id : "";
      call.audit.action = req.method + " " + req.path.substr(0, 256);
      call.audit.source = req.remote_addr + ":" + std::to_string(req.remote_port);
      if (p.ok()) {
        call.who = std::move(*p);
        if (Status s = access.Admit(call.who); !s.ok()) {
          res.set_header("Retry-After", "1");
          SendJson(res, 429, {{"error", s.message()}});
        } else {
          handler(req, res, call);
          if (method == "GET") {
            AnswerConditionally(req, res);
            // gzip at level 1 here rather than httplib's brotli at its slowest.
            const std::string type = res.get_header_value("Content-Type");
            if (res.status == 200 && !res.body.empty() && http::IsCompressible(type)) {
              http::SendCompressed(req, res, std::move(res.body), type);
            }
          }
        }
      } else if (Status s = access.AdmitUnauthenticated(req.remote_addr); !s.ok()) {
        // Past its rate a client that cannot authenticate is not audited either.
        res.set_header("Retry-After", "1");
        return SendJson(res, 429, {{"error", s.message()}});
      } else {
        SendError(res, p.status());
      }
      if (method == "GET" || (!audited && res.status < 400) || call.audited) return;
      AuditEntry e = std::move(call.audit);
      e.tenant = call.tenant;
      e.object = call.object;
      e.status = res.status;
      if (res.status >= 400) {
        json body = json::parse(res.body, nullptr, false);
        if (body.is_object() && body.contains("error") && body["error"].is_string()) {
          e.message = body["error"].get<std::string>().substr(0, 1000);
        }
      }
      // The request has been answered; an audit write that fails is reported on the
      // server's log rather than turned into an error for a change that was made.
      if (Status s = access.Record(std::move(e)); !s.ok()) {
        std::fprintf(stderr, "trainyard server: audit log: %s\n", s.message().c_str());
      }
    });
  };
  auto user = [&](const std::string& method, const std::string& path, Action action,
                  UserHandler handler, bool audited = true) {
    user_at(method, v1 + path, action, std::move(handler), audited);
  };
  // The job a request names, if the caller may `action` it.
  auto visible_job = [&cluster](const Request& req, Call& call, Action action) -> Result<JobView> {
    TY_ASSIGN_OR_RETURN(JobId id, ParseJobId(req.matches[1].str()));
    call.object = "job/" + std::to_string(id);
    TY_ASSIGN_OR_RETURN(JobView v, cluster.GetJob(id));
    call.tenant = v.job.spec.tenant;
    TY_RETURN_IF_ERROR(Authorize(
        call.who, action, {v.job.spec.tenant, std::string(UserOfActor(v.job.submitted_by))}));
    return v;
  };

  routes.push_back({"GET", v1 + "/healthz", RouteAccess::kPublic, Action::kReadCluster});
  server.Get(v1 + "/healthz", [](const Request&, Response& res) {
    SendJson(res, 200, {{"ok", true}});
  });

  // --- the dashboard: its page and files, for anyone ---
  auto web = std::make_shared<const WebAssets>(
      options.web_dir.empty() ? WebAssets::Embedded() : WebAssets::FromDirectory(options.web_dir));
  routes.push_back({"GET", "/", RouteAccess::kPublicFile, Action::kReadCluster});
  server.Get("/", [web](const Request& req, Response& res) { SendWebFile(req, res, web->Page()); });
  routes.push_back({"GET", "/assets/(.+)", RouteAccess::kPublicFile, Action::kReadCluster});
  server.Get("/assets/(.+)", [web](const Request& req, Response& res) {
    SendWebFile(req, res, web->Asset(req.matches[1].str()));
  });
  user("GET", "/whoami", Action::kReadCluster, [](const Request&, Response& res, Call& call) {
    SendJson(res, 200,
             {{"user", call.who.user},
              {"tenant", call.who.tenant},
              {"role", RoleName(call.who.role)},
              {"priority_classes", call.who.priority_classes},
              {"token_id", call.who.token_id}});
  });

  // --- jobs ---
  user("POST", "/jobs", Action::kSubmitJobs,
       [&cluster](const Request& req, Response& res, Call& call) {
         auto parsed = ParseSubmit(req.body, req.params);
         if (!parsed.ok()) return SendError(res, parsed.status());
         const Principal& who = call.who;
         const bool admin = who.role == Role::kClusterAdmin;
         const auto classes = cluster.ListPriorityClasses();
         int32_t default_value = 0;
         for (const PriorityClass& pc : classes) {
           if (pc.name == kDefaultPriorityClass) default_value = pc.value;
         }
         for (JobSpec& s : parsed->specs) {
           // A spec that names no tenant (or the default one) goes to the caller's.
           if (!admin && s.tenant == kDefaultTenant) s.tenant = who.tenant;
           call.tenant = s.tenant;
           if (Status st = Authorize(who, Action::kSubmitJobs, {s.tenant}); !st.ok()) {
             return SendError(res, st);
           }
           for (const PriorityClass& pc : classes) {
             if (pc.name != s.priority) continue;
             if (Status st = AuthorizePriorityClass(who, pc.name, pc.value, default_value);
                 !st.ok()) {
               return SendError(res, st);
             }
           }
         }
         SubmitOptions so;
         so.may_create_queues = admin;
         so.audit = call.audit;
         so.audit->tenant = call.tenant;
         so.audit->status = 201;
         auto ids = cluster.Submit(std::move(parsed->specs), who.Actor(), std::move(so));
         if (!ids.ok() && ids.status().code() == StatusCode::kResourceExhausted) {
           // The tenant's limit of unfinished jobs: retry once some have finished.
           res.set_header("Retry-After", "10");
           return SendJson(res, 429, {{"error", ids.status().message()}});
         }
         if (!ids.ok()) return SendError(res, ids.status());
         call.audited = true;  // committed with the jobs
         call.object = "job/" + std::to_string(ids->front());
         ordered_json out = {{"id", ids->front()}, {"ids", *ids}, {"warnings", parsed->warnings}};
         SendJson(res, 201, out);
       });
  user("GET", "/jobs", Action::kReadJobs,
       [&cluster](const Request& req, Response& res, Call& call) {
         auto r = ParseListJobs(req.params);
         if (!r.ok()) return SendError(res, r.status());
         if (call.who.role != Role::kClusterAdmin) {
           if (r->filter.tenant.empty()) r->filter.tenant = call.who.tenant;
           if (Status s = Authorize(call.who, Action::kReadJobs, {r->filter.tenant}); !s.ok()) {
             return SendError(res, s);
           }
         }
         auto page = cluster.ListJobs(*r);
         if (!page.ok()) return SendError(res, page.status());
         ordered_json jobs = ordered_json::array();
         for (const Job& j : page->jobs) jobs.push_back(RenderJobSummary(j));
         SendJson(res, 200,
                  {{"jobs", std::move(jobs)},
                   {"next_after", page->next_after_id ? ordered_json(*page->next_after_id)
                                                      : ordered_json(nullptr)}});
       });
  user("GET", R"(/jobs/([^/]+))", Action::kReadJobs,
       [&logs, visible_job](const Request& req, Response& res, Call& call) {
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         std::map<int32_t, RankErrorLines> errors;
         for (const Attempt& a : v->job.attempts) {
           if (!AttemptFailed(a.exit_reason)) continue;
           if (auto e = logs.ErrorLines(v->job.id, a.index)) errors[a.index] = std::move(*e);
         }
         SendJson(res, 200, RenderJobWithErrors(*v, errors));
       });
  for (const std::string verb : {"cancel", "hold", "release"}) {
    user("POST", R"(/jobs/([^/]+)/)" + verb, Action::kManageJob,
         [&cluster, visible_job, verb](const Request& req, Response& res, Call& call) {
           auto v = visible_job(req, call, Action::kManageJob);
           if (!v.ok()) return SendError(res, v.status());
           const JobId id = v->job.id;
           const std::string actor = call.who.Actor();
           Status s = verb == "cancel" ? cluster.Cancel(id, actor)
                      : verb == "hold" ? cluster.Hold(id, actor)
                                       : cluster.Release(id, actor);
           if (!s.ok()) return SendError(res, s);
           auto now = cluster.GetJob(id);
           if (!now.ok()) return SendError(res, now.status());
           SendJson(res, 200, RenderJobSummary(now->job));
         });
  }
  user("GET", R"(/jobs/([^/]+)/events)", Action::kReadJobs,
       [&cluster, visible_job](const Request& req, Response& res, Call& call) {
         if (Status s = CheckParams(req.params, {"after", "limit"}); !s.ok()) {
           return SendError(res, s);
         }
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         auto paging = ParsePaging(req.params, 1000);
         if (!paging.ok()) return SendError(res, paging.status());
         auto page = cluster.ListEvents(v->job.id, paging->after, paging->limit);
         if (!page.ok()) return SendError(res, page.status());
         ordered_json events = ordered_json::array();
         for (const auto& e : page->events) {
           events.push_back({{"seq", e.seq},
                             {"time_ms", e.time.time_since_epoch().count()},
                             {"actor", e.actor},
                             {"kind", e.kind},
                             {"message", e.message}});
         }
         SendJson(res, 200,
                  {{"events", std::move(events)},
                   {"next_after", page->next_after_seq ? ordered_json(*page->next_after_seq)
                                                       : ordered_json(nullptr)}});
       });
  user("GET", R"(/jobs/([^/]+)/logs)", Action::kReadJobs,
       [&cluster, &logs, visible_job](const Request& req, Response& res, Call& call) {
         if (Status s =
                 CheckParams(req.params, {"rank", "attempt", "offset", "wait_ms", "max_bytes"});
             !s.ok()) {
           return SendError(res, s);
         }
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         const JobId id = v->job.id;
         int64_t rank = 0, offset = 0, wait_ms = 0, max_bytes = kMaxLogChunkBytes;
         int64_t attempt = v->job.attempts.empty() ? 0 : v->job.attempts.back().index;
         struct P {
           const char* name;
           int64_t* out;
           int64_t lo, hi;
         };
         for (P p : {P{"rank", &rank, 0, 100'000'000}, P{"offset", &offset, 0, INT64_MAX},
                     P{"wait_ms", &wait_ms, 0, kMaxPollWait.count()},
                     P{"max_bytes", &max_bytes, 1, kMaxLogChunkBytes},
                     P{"attempt", &attempt, 0, 1'000'000}}) {
           if (auto text = Param(req.params, p.name)) {
             auto x = ParseInt(p.name, *text, p.lo, p.hi);
             if (!x.ok()) return SendError(res, x.status());
             *p.out = *x;
           }
         }
         // Following a finished job would only wait: answer at once.
         if (IsTerminal(v->job.state)) wait_ms = 0;
         auto chunk = logs.ReadLog(id, static_cast<int32_t>(attempt), static_cast<int32_t>(rank),
                                   offset, max_bytes, Duration(wait_ms));
         if (!chunk.ok()) return SendError(res, chunk.status());
         auto now = cluster.GetJob(id);
         res.set_header("X-Trainyard-Next-Offset", std::to_string(chunk->next_offset));
         res.set_header("X-Trainyard-Attempt", std::to_string(attempt));
         res.set_header("X-Trainyard-Job-State",
                        std::string(JobStateName(now.ok() ? now->job.state : v->job.state)));
         if (chunk->pruned) res.set_header("X-Trainyard-Log-Pruned", "true");
         res.status = 200;
         res.set_content(chunk->data, "application/octet-stream");
       });
  user("GET", R"(/jobs/([^/]+)/logs/search)", Action::kReadJobs,
       [&logs, visible_job](const Request& req, Response& res, Call& call) {
         auto r = ParseLogSearch(req.params);
         if (!r.ok()) return SendError(res, r.status());
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         auto found = logs.Search(v->job.id, *r);
         if (!found.ok()) return SendError(res, found.status());
         SendJson(res, 200, RenderLogSearch(*found));
       });
  user("POST", R"(/jobs/([^/]+)/checkpoint)", Action::kManageJob,
       [&cluster, visible_job](const Request& req, Response& res, Call& call) {
         auto r = ParseCheckpoint(req.body);
         if (!r.ok()) return SendError(res, r.status());
         auto v = visible_job(req, call, Action::kManageJob);
         if (!v.ok()) return SendError(res, v.status());
         if (Status s = cluster.ReportCheckpoint(v->job.id, *r, call.who.Actor()); !s.ok()) {
           return SendError(res, s);
         }
         auto now = cluster.GetJob(v->job.id);
         if (!now.ok()) return SendError(res, now.status());
         SendJson(res, 200, RenderJob(*now));
       });

  // --- profiles: on-demand profiling of running jobs (docs/runs.md, Profiling) ---
  ProfileStore* profiles = options.profiles;
  auto no_profiles = [profiles](Response& res) {
    if (profiles != nullptr) return false;
    SendError(res, Unavailable("this server keeps no profiles"));
    return true;
  };
  // The job's attempt that has not ended, if any: ranks of other attempts cannot answer.
  auto open_attempt = [](const Job& job) -> std::optional<int32_t> {
    if (job.attempts.empty() || job.attempts.back().end_time) return std::nullopt;
    return job.attempts.back().index;
  };
  user(
      "POST", R"(/jobs/([^/]+)/profile)", Action::kManageJob,
      [&cluster, visible_job, no_profiles, profiles](const Request& req, Response& res,
                                                     Call& call) {
        auto p = ParseProfileParams(req.body);
        if (!p.ok()) return SendError(res, p.status());
        auto v = visible_job(req, call, Action::kManageJob);
        if (!v.ok()) return SendError(res, v.status());
        if (no_profiles(res)) return;
        const JobId id = v->job.id;
        if (v->job.state != JobState::kRunning || v->ranks.empty() || v->job.attempts.empty()) {
          return SendError(res, FailedPrecondition("job " + std::to_string(id) + " is " +
                                                   std::string(JobStateName(v->job.state)) +
                                                   "; only a Running job can be profiled"));
        }
        std::vector<ProfileTarget> targets;
        std::vector<int32_t> ranks;
        for (const RankView& r : v->ranks) {
          if (p->rank && *p->rank != r.rank) continue;
          targets.push_back({r.rank, r.node});
          ranks.push_back(r.rank);
        }
        if (targets.empty()) {
          return SendError(
              res, InvalidArgument("profile.rank: job " + std::to_string(id) + " has ranks 0.." +
                                   std::to_string(v->ranks.size() - 1) + ", got " +
                                   std::to_string(*p->rank)));
        }
        const int32_t attempt = v->job.attempts.back().index;
        auto created = profiles->Create(id, attempt, p->steps, targets, call.who.Actor());
        if (!created.ok()) return SendError(res, created.status());
        if (Status s = cluster.SendProfile(id, attempt, ranks, created->id, p->steps); !s.ok()) {
          // The job stopped meanwhile: the request is kept, failed, saying so.
          profiles->Abandon(id, created->id, "not sent to the ranks: " + s.message()).IgnoreError();
          return SendError(res, s);
        }
        SendJson(res, 201, RenderProfile(*created));
      });
  user("GET", R"(/jobs/([^/]+)/profiles)", Action::kReadJobs,
       [visible_job, no_profiles, profiles, open_attempt](const Request& req, Response& res,
                                                          Call& call) {
         if (Status s = CheckParams(req.params, {}); !s.ok()) return SendError(res, s);
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         if (no_profiles(res)) return;
         auto list = profiles->List(v->job.id, open_attempt(v->job));
         if (!list.ok()) return SendError(res, list.status());
         ordered_json out = ordered_json::array();
         for (const ProfileRequest& r : *list) out.push_back(RenderProfile(r));
         SendJson(res, 200, {{"profiles", std::move(out)}});
       });
  user(
      "GET", R"(/jobs/([^/]+)/profiles/([^/]+))", Action::kReadJobs,
      [visible_job, no_profiles, profiles, open_attempt](const Request& req, Response& res,
                                                         Call& call) {
        if (Status s = CheckParams(req.params, {"rank"}); !s.ok()) return SendError(res, s);
        auto v = visible_job(req, call, Action::kReadJobs);
        if (!v.ok()) return SendError(res, v.status());
        if (no_profiles(res)) return;
        const std::string pid = req.matches[2].str();
        auto r = profiles->Get(v->job.id, pid, open_attempt(v->job));
        if (!r.ok()) return SendError(res, r.status());
        Result<std::string> trace = InvalidArgument("unreachable");
        if (auto rank = Param(req.params, "rank")) {
          auto n = ParseInt("rank", *rank, 0, 100'000'000);
          if (!n.ok()) return SendError(res, n.status());
          trace = profiles->ReadTrace(v->job.id, pid, static_cast<int32_t>(*n));
        } else {
          std::vector<int32_t> stored;
          std::string states;
          for (const ProfileRank& k : r->ranks) {
            if (k.state == ProfileState::kStored) stored.push_back(k.rank);
            states += (states.empty() ? "" : ", ") + std::string("rank ") + std::to_string(k.rank) +
                      " " + std::string(ProfileStateName(k.state));
          }
          if (stored.empty()) {
            return SendError(res, FailedPrecondition("no rank of profile " + pid +
                                                     " has stored its trace yet (" + states + ")"));
          }
          trace = MergeProfileTraces(
              pid, stored, [&](int32_t rank) { return profiles->ReadTrace(v->job.id, pid, rank); });
        }
        if (!trace.ok()) return SendError(res, trace.status());
        res.status = 200;
        res.body = std::move(*trace);  // up to 64 MiB a rank: not copied
        res.set_header("Content-Type", "application/json");
      });

  // --- nodes, queues, tenants, priority classes ---
  // A node shows every caller its GPUs, but only the jobs the caller may see.
  auto visible_node = [](const NodeView& n, const Principal& who) {
    ordered_json j = RenderNode(n);
    if (who.role == Role::kClusterAdmin) return j;
    ordered_json jobs = ordered_json::array();
    for (size_t i = 0; i < n.jobs.size() && i < n.job_tenants.size(); ++i) {
      if (CanSeeTenant(who, n.job_tenants[i])) jobs.push_back(n.jobs[i]);
    }
    j["jobs"] = std::move(jobs);
    // A GPU busy with a job the caller may not see says so without the job's id.
    for (ordered_json& g : j["gpu_jobs"]) {
      if (g.is_null()) continue;
      const auto id = g.get<JobId>();
      auto at = std::find(n.jobs.begin(), n.jobs.end(), id);
      const size_t i = static_cast<size_t>(at - n.jobs.begin());
      if (i >= n.job_tenants.size() || !CanSeeTenant(who, n.job_tenants[i])) g = "hidden";
    }
    return j;
  };
  user("GET", "/nodes", Action::kReadCluster,
       [&cluster, visible_node](const Request&, Response& res, Call& call) {
         ordered_json nodes = ordered_json::array();
         for (const NodeView& n : cluster.ListNodes()) nodes.push_back(visible_node(n, call.who));
         SendJson(res, 200, {{"nodes", std::move(nodes)}});
       });
  user("GET", R"(/nodes/([^/]+))", Action::kReadCluster,
       [&cluster, visible_node](const Request& req, Response& res, Call& call) {
         auto n = cluster.GetNode(req.matches[1].str());
         if (!n.ok()) return SendError(res, n.status());
         SendJson(res, 200, visible_node(*n, call.who));
       });
  for (const auto& action :
       std::vector<std::pair<std::string, NodeState>>{{"cordon", NodeState::kCordoned},
                                                      {"drain", NodeState::kDraining},
                                                      {"uncordon", NodeState::kReady}}) {
    const NodeState state = action.second;  // a variable: clang 14 cannot capture bindings
    user("POST", R"(/nodes/([^/]+)/)" + action.first, Action::kManageNodes,
         [&cluster, state](const Request& req, Response& res, Call& call) {
           const std::string name = req.matches[1].str();
           call.object = "node/" + name.substr(0, 128);
           if (Status s = Authorize(call.who, Action::kManageNodes, {}); !s.ok()) {
             return SendError(res, s);
           }
           if (Status s = cluster.SetNodeAdminState(name, state, call.who.Actor()); !s.ok()) {
             return SendError(res, s);
           }
           auto n = cluster.GetNode(name);
           if (!n.ok()) return SendError(res, n.status());
           SendJson(res, 200, RenderNode(*n));
         });
  }
  user("GET", "/queues", Action::kReadCluster, [&cluster](const Request&, Response& res, Call&) {
    ordered_json queues = ordered_json::array();
    for (const QueueView& q : cluster.ListQueues()) queues.push_back(RenderQueue(q));
    SendJson(res, 200, {{"queues", std::move(queues)}});
  });
  user("GET", "/tenants", Action::kReadCluster, [&cluster](const Request&, Response& res, Call&) {
    ordered_json tenants = ordered_json::array();
    for (const Tenant& t : cluster.ListTenants()) tenants.push_back(RenderTenant(t));
    SendJson(res, 200, {{"tenants", std::move(tenants)}});
  });
  // A tenant's quota is a cluster admin's to set; its queues, within that quota, its
  // tenant admins' too.
  user("PUT", R"(/tenants/([^/]+)/quota)", Action::kManageTenants,
       [&cluster](const Request& req, Response& res, Call& call) {
         const std::string name = req.matches[1].str();
         call.object = "tenant/" + name.substr(0, 63);
         call.tenant = name.substr(0, 63);
         if (Status s = Authorize(call.who, Action::kManageTenants, {name}); !s.ok()) {
           return SendError(res, s);
         }
         if (Status s = ValidateName("tenant", name); !s.ok()) return SendError(res, s);
         auto quota = ParseTenantQuota(req.body);
         if (!quota.ok()) return SendError(res, quota.status());
         auto t = cluster.SetTenantQuota(name, quota->guaranteed_gpus, quota->limit_gpus,
                                         call.who.Actor());
         if (!t.ok()) return SendError(res, t.status());
         SendJson(res, 200, RenderTenant(*t));
       });
  // The queue a request names, if the caller may manage its tenant's queues.
  auto managed_queue = [](const Request& req, Call& call) -> Status {
    const std::string tenant = req.matches[1].str(), name = req.matches[2].str();
    call.object = "queue/" + tenant.substr(0, 63) + "/" + name.substr(0, 63);
    call.tenant = tenant.substr(0, 63);
    TY_RETURN_IF_ERROR(Authorize(call.who, Action::kManageQueues, {tenant}));
    TY_RETURN_IF_ERROR(ValidateName("tenant", tenant));
    return ValidateName("queue", name);
  };
  user("PUT", R"(/queues/([^/]+)/([^/]+))", Action::kManageQueues,
       [&cluster, managed_queue](const Request& req, Response& res, Call& call) {
         if (Status s = managed_queue(req, call); !s.ok()) return SendError(res, s);
         auto q = ParseQueue(req.body, req.matches[1].str(), req.matches[2].str());
         if (!q.ok()) return SendError(res, q.status());
         bool existed = false;
         for (const QueueView& v : cluster.ListQueues()) {
           existed = existed || (v.queue.tenant == q->tenant && v.queue.name == q->name);
         }
         auto put = cluster.PutQueue(*q, call.who.Actor());
         if (!put.ok()) return SendError(res, put.status());
         SendJson(res, existed ? 200 : 201, ToJson(*put));
       });
  user("DELETE", R"(/queues/([^/]+)/([^/]+))", Action::kManageQueues,
       [&cluster, managed_queue](const Request& req, Response& res, Call& call) {
         if (Status s = managed_queue(req, call); !s.ok()) return SendError(res, s);
         const std::string tenant = req.matches[1].str(), name = req.matches[2].str();
         if (Status s = cluster.DeleteQueue(tenant, name, call.who.Actor()); !s.ok()) {
           return SendError(res, s);
         }
         SendJson(res, 200, {{"deleted", tenant + "/" + name}});
       });
  user("GET", "/priority-classes", Action::kReadCluster,
       [&cluster](const Request&, Response& res, Call&) {
         ordered_json classes = ordered_json::array();
         for (const PriorityClass& pc : cluster.ListPriorityClasses()) {
           classes.push_back(ToJson(pc));
         }
         SendJson(res, 200, {{"priority_classes", std::move(classes)}});
       });

  // --- users, tokens, audit ---
  user("GET", "/users", Action::kReadUsers, [&access](const Request&, Response& res, Call& call) {
    auto users = access.ListUsers(call.who);
    if (!users.ok()) return SendError(res, users.status());
    ordered_json out = ordered_json::array();
    for (const User& u : *users) out.push_back(RenderUser(u));
    SendJson(res, 200, {{"users", std::move(out)}});
  });
  user("POST", "/users", Action::kManageUsers,
       [&access, &cluster](const Request& req, Response& res, Call& call) {
         auto j = ParseJsonBody(req.body, "user");
         if (!j.ok()) return SendError(res, j.status());
         if (Status s = CheckBodyKeys(*j, "user", {"name", "tenant", "role", "priority_classes"});
             !s.ok()) {
           return SendError(res, s);
         }
         User u;
         auto name = StringField(*j, "user", "name", 63);
         auto tenant = StringField(*j, "user", "tenant", 63);
         auto role = StringField(*j, "user", "role", 32);
         auto classes = StringListField(*j, "user", "priority_classes");
         for (const Status& s : {name.status(), tenant.status(), role.status(), classes.status()}) {
           if (!s.ok()) return SendError(res, s);
         }
         if (!*name) return SendError(res, InvalidArgument("user.name: required"));
         u.name = **name;
         call.object = "user/" + u.name;
         u.role = Role::kMember;
         if (*role) {
           auto r = ParseRole(**role);
           if (!r.ok()) return SendError(res, r.status());
           u.role = *r;
         }
         // A tenant-admin's users join its tenant unless told otherwise.
         u.tenant = *tenant ? **tenant : u.role == Role::kClusterAdmin ? "" : call.who.tenant;
         call.tenant = u.tenant;
         if (*classes) u.priority_classes = **classes;
         if (Status s = ValidateUser(u); !s.ok()) return SendError(res, s);
         if (Status s = Authorize(call.who, Action::kManageUsers, {u.tenant, u.name, u.role});
             !s.ok()) {
           return SendError(res, s);
         }
         if (!u.tenant.empty()) {
           if (Status s = cluster.EnsureTenant(u.tenant, call.who.Actor()); !s.ok()) {
             return SendError(res, s);
           }
         }
         auto created = access.CreateUser(call.who, u);
         if (!created.ok()) return SendError(res, created.status());
         SendJson(res, 201, RenderUser(*created));
       });
  user("GET", R"(/users/([^/]+))", Action::kReadUsers,
       [&access](const Request& req, Response& res, Call& call) {
         auto u = access.GetUser(call.who, req.matches[1].str());
         if (!u.ok()) return SendError(res, u.status());
         SendJson(res, 200, RenderUser(*u));
       });
  user("PATCH", R"(/users/([^/]+))", Action::kManageUsers,
       [&access](const Request& req, Response& res, Call& call) {
         const std::string name = req.matches[1].str();
         call.object = "user/" + name.substr(0, 63);
         call.tenant = access.TenantOf(name);
         auto j = ParseJsonBody(req.body, "user");
         if (!j.ok()) return SendError(res, j.status());
         if (Status s = CheckBodyKeys(*j, "user", {"role", "priority_classes"}); !s.ok()) {
           return SendError(res, s);
         }
         auto role_text = StringField(*j, "user", "role", 32);
         if (!role_text.ok()) return SendError(res, role_text.status());
         auto classes = StringListField(*j, "user", "priority_classes");
         if (!classes.ok()) return SendError(res, classes.status());
         std::optional<Role> role;
         if (*role_text) {
           auto r = ParseRole(**role_text);
           if (!r.ok()) return SendError(res, r.status());
           role = *r;
         }
         auto u = access.UpdateUser(call.who, name, role, *classes);
         if (!u.ok()) return SendError(res, u.status());
         SendJson(res, 200, RenderUser(*u));
       });
  user("DELETE", R"(/users/([^/]+))", Action::kManageUsers,
       [&access](const Request& req, Response& res, Call& call) {
         const std::string name = req.matches[1].str();
         call.object = "user/" + name.substr(0, 63);
         call.tenant = access.TenantOf(name);
         if (Status s = access.DeleteUser(call.who, name); !s.ok()) return SendError(res, s);
         SendJson(res, 200, {{"deleted", name}});
       });
  user("GET", "/tokens", Action::kManageOwnTokens,
       [&access](const Request& req, Response& res, Call& call) {
         if (Status s = CheckParams(req.params, {"user"}); !s.ok()) return SendError(res, s);
         auto tokens = access.ListTokens(call.who, Param(req.params, "user").value_or(""));
         if (!tokens.ok()) return SendError(res, tokens.status());
         ordered_json out = ordered_json::array();
         for (const ApiToken& t : *tokens) out.push_back(RenderToken(t));
         SendJson(res, 200, {{"tokens", std::move(out)}});
       });
  user(
      "POST", "/tokens", Action::kManageOwnTokens,
      [&access](const Request& req, Response& res, Call& call) {
        auto j = ParseJsonBody(req.body.empty() ? std::string_view("{}") : req.body, "token");
        if (!j.ok()) return SendError(res, j.status());
        if (Status s = CheckBodyKeys(*j, "token", {"user", "description", "expires_in"}); !s.ok()) {
          return SendError(res, s);
        }
        auto owner = StringField(*j, "token", "user", 63);
        auto description = StringField(*j, "token", "description", 200);
        auto expires = StringField(*j, "token", "expires_in", 32);
        for (const Status& s : {owner.status(), description.status(), expires.status()}) {
          if (!s.ok()) return SendError(res, s);
        }
        std::optional<Duration> ttl;
        if (*expires) {
          auto d = ParseDuration(**expires);
          if (!d.ok() || d->count() <= 0 || *d > Duration(std::chrono::hours(24 * 3650))) {
            return SendError(res, InvalidArgument("token.expires_in: expected a duration from 1s "
                                                  "to 3650d (\"90d\", \"12h\"), got " +
                                                  QuoteForMessage(**expires)));
          }
          ttl = *d;
        }
        const std::string who = owner->value_or("");
        call.object = "user/" + (who.empty() ? call.who.user : who);
        call.tenant = access.TenantOf(who.empty() ? call.who.user : who);
        auto t = access.CreateToken(call.who, who, description->value_or(""), ttl);
        if (!t.ok()) return SendError(res, t.status());
        call.object = "token/" + t->token.id;
        ordered_json out = RenderToken(t->token);
        out["token"] = t->text;
        SendJson(res, 201, out);
      });
  user("DELETE", R"(/tokens/([^/]+))", Action::kManageOwnTokens,
       [&access](const Request& req, Response& res, Call& call) {
         const std::string id = req.matches[1].str();
         call.object = "token/" + id.substr(0, 32);
         auto t = access.RevokeToken(call.who, id);
         if (!t.ok()) return SendError(res, t.status());
         call.tenant = access.TenantOf(t->user);
         SendJson(res, 200, RenderToken(*t));
       });
  user("GET", "/audit", Action::kReadAudit,
       [&access](const Request& req, Response& res, Call& call) {
         if (Status s = CheckParams(req.params, {"actor", "tenant", "object", "after", "limit"});
             !s.ok()) {
           return SendError(res, s);
         }
         AuditFilter f;
         f.actor = Param(req.params, "actor").value_or("");
         f.tenant = Param(req.params, "tenant").value_or("");
         f.object = Param(req.params, "object").value_or("");
         auto paging = ParsePaging(req.params, 100);
         if (!paging.ok()) return SendError(res, paging.status());
         auto page = access.ListAudit(call.who, f, paging->after, paging->limit);
         if (!page.ok()) return SendError(res, page.status());
         ordered_json out = ordered_json::array();
         for (const AuditEntry& e : page->entries) out.push_back(RenderAudit(e));
         SendJson(res, 200,
                  {{"entries", std::move(out)},
                   {"next_after", page->next_after_seq ? ordered_json(*page->next_after_seq)
                                                       : ordered_json(nullptr)}});
       });

  // --- runs: experiment tracking (track/) ---
  track::SeriesStore* series = options.series;
  auto no_series = [series](Response& res) {
    if (series != nullptr) return false;
    SendError(res, Unavailable("this server keeps no metric series"));
    return true;
  };
  auto build_run = [series, &cluster](const Job& job) -> Result<track::RunRecord> {
    TY_ASSIGN_OR_RETURN(auto params, series->Params(job.id));
    TY_ASSIGN_OR_RETURN(auto infos, series->ListSeries(job.id));
    track::RunRecord run = track::BuildRun(job, params, infos);
    FillGpuType(run, job, [&cluster](const std::string& node) {
      auto v = cluster.GetNode(node);
      return v.ok() && !v->node.gpus.empty() ? v->node.gpus.front().model : std::string();
    });
    return run;
  };
  user("GET", "/runs", Action::kReadJobs,
       [&cluster, no_series, build_run](const Request& req, Response& res, Call& call) {
         if (no_series(res)) return;
         if (Status s = CheckParams(req.params, {"experiment", "filter", "state", "tenant", "queue",
                                                 "name", "after", "limit"});
             !s.ok()) {
           return SendError(res, s);
         }
         Params job_params = req.params;
         job_params.erase("experiment");
         job_params.erase("filter");
         auto r = ParseListJobs(job_params);
         if (!r.ok()) return SendError(res, r.status());
         auto filter = track::RunFilter::Parse(Param(req.params, "filter").value_or(""),
                                               {track::RunAttributeNames()});
         if (!filter.ok()) return SendError(res, filter.status());
         const std::string experiment(Param(req.params, "experiment").value_or(""));
         if (call.who.role != Role::kClusterAdmin) {
           if (r->filter.tenant.empty()) r->filter.tenant = call.who.tenant;
           if (Status s = Authorize(call.who, Action::kReadJobs, {r->filter.tenant}); !s.ok()) {
             return SendError(res, s);
           }
         }
         // Runs are jobs seen through the filter: page through jobs until the page of
         // runs is full, looking at no more than kMaxScan jobs per request.
         constexpr int kMaxScan = 10'000;
         const int want = r->limit;
         ordered_json runs = ordered_json::array();
         std::optional<JobId> next_after;
         int scanned = 0;
         bool more = true;
         while (more && static_cast<int>(runs.size()) < want && scanned < kMaxScan) {
           r->limit = 500;
           auto page = cluster.ListJobs(*r);
           if (!page.ok()) return SendError(res, page.status());
           more = page->next_after_id.has_value();
           for (const Job& j : page->jobs) {
             ++scanned;
             r->after_id = j.id;
             next_after = j.id;
             if (!experiment.empty() && j.spec.experiment.name != experiment &&
                 !(j.spec.experiment.name.empty() && j.spec.name == experiment)) {
               continue;
             }
             auto run = build_run(j);
             if (!run.ok()) return SendError(res, run.status());
             if (!filter->Matches(track::Filterable(*run))) continue;
             runs.push_back(track::RenderRunSummary(*run));
             if (static_cast<int>(runs.size()) == want || scanned == kMaxScan) break;
           }
         }
         if (!more && (static_cast<int>(runs.size()) < want)) next_after.reset();
         SendJson(res, 200,
                  {{"runs", std::move(runs)},
                   {"next_after", next_after ? ordered_json(*next_after) : ordered_json(nullptr)}});
       });
  user("GET", "/runs/compare", Action::kReadJobs,
       [&cluster, no_series, build_run](const Request& req, Response& res, Call& call) {
         if (no_series(res)) return;
         if (Status s = CheckParams(req.params, {"ids"}); !s.ok()) return SendError(res, s);
         const std::string ids_text = Param(req.params, "ids").value_or("");
         std::string_view ids = ids_text;
         std::vector<track::RunRecord> runs;
         while (!ids.empty()) {
           size_t comma = ids.find(',');
           std::string_view one = ids.substr(0, comma);
           ids = comma == std::string_view::npos ? std::string_view() : ids.substr(comma + 1);
           auto id = ParseJobId(one);
           if (!id.ok()) return SendError(res, id.status());
           auto v = cluster.GetJob(*id);
           if (!v.ok()) return SendError(res, v.status());
           if (Status s =
                   Authorize(call.who, Action::kReadJobs,
                             {v->job.spec.tenant, std::string(UserOfActor(v->job.submitted_by))});
               !s.ok()) {
             return SendError(res, s);
           }
           auto run = build_run(v->job);
           if (!run.ok()) return SendError(res, run.status());
           runs.push_back(std::move(*run));
           if (runs.size() > 20) {
             return SendError(res, InvalidArgument("ids: at most 20 runs to compare"));
           }
         }
         if (runs.size() < 2) {
           return SendError(res, InvalidArgument("ids: name at least two runs, e.g. ids=4,7"));
         }
         SendJson(res, 200, track::CompareRuns(runs));
       });
  user("GET", R"(/runs/([^/]+))", Action::kReadJobs,
       [visible_job, no_series, build_run](const Request& req, Response& res, Call& call) {
         if (no_series(res)) return;
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         auto run = build_run(v->job);
         if (!run.ok()) return SendError(res, run.status());
         SendJson(res, 200, track::RenderRun(*run));
       });
  user("GET", R"(/runs/([^/]+)/metrics)", Action::kReadJobs,
       [visible_job, no_series, series](const Request& req, Response& res, Call& call) {
         if (no_series(res)) return;
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         auto infos = series->ListSeries(v->job.id);
         if (!infos.ok()) return SendError(res, infos.status());
         ordered_json out = ordered_json::array();
         for (const track::SeriesInfo& i : *infos) {
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
         SendJson(res, 200, {{"series", std::move(out)}});
       });
  user("GET", R"(/runs/([^/]+)/metrics/(.+))", Action::kReadJobs,
       [visible_job, no_series, series](const Request& req, Response& res, Call& call) {
         if (no_series(res)) return;
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         if (Status s = CheckParams(req.params, {"rank", "from", "to", "buckets"}); !s.ok()) {
           return SendError(res, s);
         }
         const std::string key = req.matches[2].str();
         if (!track::IsValidKey(key)) {
           return SendError(res,
                            InvalidArgument("key " + QuoteForMessage(key) +
                                            ": must be 1-128 characters of A-Z a-z 0-9 _ . / -"));
         }
         track::SeriesRange range;
         std::optional<int32_t> rank;
         auto parse = [&]() -> Status {
           if (auto p = Param(req.params, "rank")) {
             TY_ASSIGN_OR_RETURN(int64_t r, ParseInt("rank", *p, 0, 1'000'000));
             rank = static_cast<int32_t>(r);
           }
           if (auto p = Param(req.params, "from")) {
             TY_ASSIGN_OR_RETURN(range.from_step, ParseInt("from", *p, INT64_MIN, INT64_MAX));
           }
           if (auto p = Param(req.params, "to")) {
             TY_ASSIGN_OR_RETURN(range.to_step, ParseInt("to", *p, INT64_MIN, INT64_MAX));
           }
           if (auto p = Param(req.params, "buckets")) {
             TY_ASSIGN_OR_RETURN(int64_t b, ParseInt("buckets", *p, 0, 100'000));
             range.buckets = static_cast<int32_t>(b);
           }
           return Status::Ok();
         };
         if (Status s = parse(); !s.ok()) return SendError(res, s);
         if (!rank) {
           // The lowest rank that logged the key.
           auto lowest = series->LowestRank(v->job.id, key);
           if (!lowest.ok()) return SendError(res, lowest.status());
           if (!*lowest) {
             return SendError(res, NotFound("run " + std::to_string(v->job.id) + " has no metric " +
                                            QuoteForMessage(key)));
           }
           rank = **lowest;
         }
         auto buckets = series->Read(v->job.id, key, *rank, range);
         if (!buckets.ok()) return SendError(res, buckets.status());
         ordered_json out = {
             {"run", v->job.id}, {"key", key}, {"rank", *rank}, {"buckets", range.buckets}};
         out["points"] = track::RenderBuckets(*buckets);
         SendJson(res, 200, out);
       });
  user(
      "POST", R"(/runs/([^/]+)/metrics)", Action::kManageJob,
      [visible_job, no_series, series, alerting](const Request& req, Response& res, Call& call) {
        if (no_series(res)) return;
        auto v = visible_job(req, call, Action::kManageJob);
        if (!v.ok()) return SendError(res, v.status());
        if (Status s = CheckParams(req.params, {"rank"}); !s.ok()) return SendError(res, s);
        const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
        Result<track::IngestBatch> batch = InvalidArgument("unreachable");
        if (req.get_header_value("Content-Type").starts_with("text/plain")) {
          int64_t rank = 0;
          if (auto p = Param(req.params, "rank")) {
            auto r = ParseInt("rank", *p, 0, 1'000'000);
            if (!r.ok()) return SendError(res, r.status());
            rank = *r;
          }
          batch = track::ParseBatchText(v->job.id, static_cast<int32_t>(rank), req.body, now_ms);
        } else {
          batch = track::ParseBatchJson(v->job.id, req.body, now_ms);
        }
        if (!batch.ok()) return SendError(res, batch.status());
        if (alerting != nullptr) alerting->ObserveMetrics(v->job.id, batch->appends, batch->params);
        if (Status s = series->Append(batch->appends); !s.ok()) return SendError(res, s);
        if (Status s = series->PutParams(v->job.id, batch->params); !s.ok()) {
          return SendError(res, s);
        }
        SendJson(res, 200,
                 {{"points", batch->points},
                  {"series", batch->appends.size()},
                  {"params", batch->params.size()}});
      },
      /*audited=*/false);
  user("GET", R"(/jobs/([^/]+)/trace)", Action::kReadJobs,
       [&cluster, visible_job, series](const Request& req, Response& res, Call& call) {
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         if (Status s = CheckParams(req.params, {"format", "steps"}); !s.ok()) {
           return SendError(res, s);
         }
         const std::string format(Param(req.params, "format").value_or("chrome"));
         if (format != "chrome" && format != "otlp") {
           return SendError(res, InvalidArgument("format: must be chrome or otlp, got " +
                                                 QuoteForMessage(format)));
         }
         int64_t max_steps = 10'000;
         if (auto p = Param(req.params, "steps")) {
           auto n = ParseInt("steps", *p, 0, 1'000'000);
           if (!n.ok()) return SendError(res, n.status());
           max_steps = *n;
         }
         track::TraceInput in;
         in.job = &v->job;
         in.now = Timestamp(std::chrono::duration_cast<Duration>(
             std::chrono::system_clock::now().time_since_epoch()));
         int64_t after = 0;
         while (true) {
           auto page = cluster.ListEvents(v->job.id, after, 1000);
           if (!page.ok()) return SendError(res, page.status());
           in.events.insert(in.events.end(), page->events.begin(), page->events.end());
           if (!page->next_after_seq) break;
           after = *page->next_after_seq;
         }
         if (series != nullptr) {
           auto spans = track::TraceSpansFromSeries(*series, v->job, max_steps);
           if (!spans.ok()) return SendError(res, spans.status());
           in.steps = std::move(spans->steps);
           in.checkpoints = std::move(spans->checkpoints);
         }
         json out = format == "otlp" ? track::JobTraceOtlp(in, "trainyard") : track::JobTrace(in);
         res.status = 200;
         res.set_content(out.dump() + "\n", "application/json");
       });

  // --- alerts, diagnosis and fault injection (docs/alerts.md, docs/diagnose.md,
  // docs/faults.md) ---
  auto no_alerting = [alerting](Response& res) {
    if (alerting != nullptr) return false;
    SendError(res, Unavailable("this server does not evaluate alert rules"));
    return true;
  };
  // Alerts about a tenant's jobs are that tenant's; alerts about nodes, everyone's.
  auto may_see_alert = [](const Principal& who, const monitor::Labels& labels) {
    auto t = labels.find("tenant");
    return t == labels.end() || CanSeeTenant(who, t->second);
  };
  user("GET", "/alerts", Action::kReadCluster,
       [alerting, no_alerting, may_see_alert](const Request& req, Response& res, Call& call) {
         if (no_alerting(res)) return;
         if (Status s = CheckParams(req.params, {"state", "rule", "job", "node"}); !s.ok()) {
           return SendError(res, s);
         }
         std::set<std::string> states;
         if (auto p = Param(req.params, "state")) {
           std::vector<std::string> words;
           for (size_t pos = 0; pos <= p->size();) {
             const size_t comma = std::min(p->find(',', pos), p->size());
             words.push_back(p->substr(pos, comma - pos));
             pos = comma + 1;
           }
           for (const std::string& st : words) {
             if (st != "pending" && st != "firing" && st != "resolved") {
               return SendError(
                   res, InvalidArgument("state: unknown alert state " + QuoteForMessage(st) +
                                        "; one of pending, firing, resolved"));
             }
             states.insert(st);
           }
         }
         const std::string rule = Param(req.params, "rule").value_or("");
         const std::string job = Param(req.params, "job").value_or("");
         const std::string node = Param(req.params, "node").value_or("");
         ordered_json out = ordered_json::array();
         for (const monitor::Alert& a : alerting->Alerts()) {
           if (!may_see_alert(call.who, a.labels)) continue;
           if (!states.empty() && !states.contains(std::string(monitor::AlertStateName(a.state)))) {
             continue;
           }
           auto label = [&](const char* k) {
             auto it = a.labels.find(k);
             return it == a.labels.end() ? std::string() : it->second;
           };
           if ((!rule.empty() && a.rule != rule) || (!job.empty() && label("job_id") != job) ||
               (!node.empty() && label("node") != node)) {
             continue;
           }
           out.push_back(RenderAlert(a));
         }
         SendJson(res, 200, {{"alerts", std::move(out)}});
       });
  user("GET", "/alerts/events", Action::kReadCluster,
       [alerting, no_alerting, may_see_alert](const Request& req, Response& res, Call& call) {
         if (no_alerting(res)) return;
         if (Status s = CheckParams(req.params, {"limit"}); !s.ok()) return SendError(res, s);
         int64_t limit = 100;
         if (auto p = Param(req.params, "limit")) {
           auto l = ParseInt("limit", *p, 1, 1000);
           if (!l.ok()) return SendError(res, l.status());
           limit = *l;
         }
         std::vector<AlertEvent> events = alerting->Events();
         ordered_json out = ordered_json::array();
         for (auto it = events.rbegin(); it != events.rend() && std::ssize(out) < limit; ++it) {
           if (!may_see_alert(call.who, it->labels)) continue;
           out.push_back({{"at", monitor::FormatRfc3339(it->at)},
                          {"kind", it->kind},
                          {"rule", it->rule},
                          {"fingerprint", it->fingerprint},
                          {"labels", it->labels},
                          {"detail", it->detail}});
         }
         SendJson(res, 200, {{"events", std::move(out)}});  // newest first
       });
  user("GET", "/alerts/rules", Action::kReadCluster,
       [alerting, no_alerting](const Request&, Response& res, Call&) {
         if (no_alerting(res)) return;
         ordered_json out = ordered_json::array();
         for (const monitor::Rule& r : alerting->rules().rules) {
           out.push_back({{"name", r.name},
                          {"signal", r.signal},
                          {"condition", std::string(monitor::ConditionKindName(r.condition.kind))},
                          {"threshold", r.condition.threshold},
                          {"window", FormatDuration(r.condition.window)},
                          {"for", FormatDuration(r.for_duration)},
                          {"keep_firing_for", FormatDuration(r.keep_firing_for)},
                          {"severity", std::string(monitor::SeverityName(r.severity))},
                          {"action", std::string(monitor::ActionKindName(r.action))},
                          {"origin", r.origin}});
         }
         SendJson(res, 200, {{"rules", std::move(out)}, {"disabled", alerting->rules().disabled}});
       });
  user("GET", R"(/jobs/([^/]+)/diagnosis)", Action::kReadJobs,
       [alerting, no_alerting, visible_job](const Request& req, Response& res, Call& call) {
         if (no_alerting(res)) return;
         auto v = visible_job(req, call, Action::kReadJobs);
         if (!v.ok()) return SendError(res, v.status());
         auto d = alerting->Diagnose(v->job.id);
         if (!d.ok()) return SendError(res, d.status());
         json out = json::parse(monitor::DiagnosisJson(*d));
         out["text"] = monitor::RenderDiagnosis(*d);
         SendJson(res, 200, out);
       });
  auto render_fault = [](const InjectedFault& f) {
    return ordered_json{{"id", f.fault.id},
                        {"node", f.node},
                        {"kind", f.fault.kind},
                        {"gpu", f.fault.gpu},
                        {"until_ms", f.fault.until_ms},
                        {"created", monitor::FormatRfc3339(f.created)},
                        {"actor", f.actor}};
  };
  user("GET", "/faults", Action::kManageNodes,
       [&cluster, render_fault](const Request&, Response& res, Call& call) {
         if (Status s = Authorize(call.who, Action::kManageNodes, {}); !s.ok()) {
           return SendError(res, s);
         }
         ordered_json out = ordered_json::array();
         for (const InjectedFault& f : cluster.ListFaults()) out.push_back(render_fault(f));
         SendJson(res, 200, {{"faults", std::move(out)}});
       });
  user("POST", R"(/nodes/([^/]+)/faults)", Action::kManageNodes,
       [&cluster, render_fault](const Request& req, Response& res, Call& call) {
         const std::string name = req.matches[1].str();
         call.object = "node/" + name.substr(0, 128);
         if (Status s = Authorize(call.who, Action::kManageNodes, {}); !s.ok()) {
           return SendError(res, s);
         }
         auto f = ParseFaultRequest(req.body);
         if (!f.ok()) return SendError(res, f.status());
         auto injected = cluster.InjectFault(name, f->kind, f->gpu, f->duration, call.who.Actor());
         if (!injected.ok()) return SendError(res, injected.status());
         SendJson(res, 201, render_fault(*injected));
       });
  for (const char* pattern : {R"(/nodes/([^/]+)/faults)", R"(/nodes/([^/]+)/faults/([^/]+))"}) {
    user("DELETE", pattern, Action::kManageNodes,
         [&cluster](const Request& req, Response& res, Call& call) {
           const std::string name = req.matches[1].str();
           call.object = "node/" + name.substr(0, 128);
           if (Status s = Authorize(call.who, Action::kManageNodes, {}); !s.ok()) {
             return SendError(res, s);
           }
           auto n = cluster.ClearFaults(name, req.matches.size() > 2 ? req.matches[2].str() : "");
           if (!n.ok()) return SendError(res, n.status());
           SendJson(res, 200, {{"cleared", *n}});
         });
  }
  user("DELETE", "/faults", Action::kManageNodes,
       [&cluster](const Request&, Response& res, Call& call) {
         if (Status s = Authorize(call.who, Action::kManageNodes, {}); !s.ok())
           return SendError(res, s);
         auto n = cluster.ClearFaults("", "");
         if (!n.ok()) return SendError(res, n.status());
         SendJson(res, 200, {{"cleared", *n}});
       });

  // --- Prometheus: GET /metrics (docs/metrics.md) ---
  user_at(
      "GET", "/metrics", Action::kReadCluster,
      [&cluster, series, alerting, may_see_alert, http_metrics](const Request&, Response& res,
                                                                Call& call) {
        MetricsPage page;
        page.http = http_metrics->Snapshot();
        page.now = Timestamp(std::chrono::duration_cast<Duration>(
            std::chrono::system_clock::now().time_since_epoch()));
        page.nodes = cluster.ListNodes();
        page.queues = cluster.ListQueues();
        page.cluster = cluster.Metrics();
        if (alerting != nullptr) {
          for (const monitor::Alert& a : alerting->Alerts()) {
            if (may_see_alert(call.who, a.labels)) page.alerts.push_back(a);
          }
          page.alerting = alerting->Stats();
        }
        // Running jobs' progress, of the tenants the caller may read.
        ListJobsRequest r;
        r.filter.states = {JobState::kRunning};
        if (call.who.role != Role::kClusterAdmin) r.filter.tenant = call.who.tenant;
        std::map<std::string, std::string> gpu_type_of_node;
        for (const NodeView& v : page.nodes) {
          if (!v.node.gpus.empty()) gpu_type_of_node[v.node.name] = v.node.gpus.front().model;
        }
        while (series != nullptr) {
          r.limit = 500;
          auto jobs = cluster.ListJobs(r);
          if (!jobs.ok()) return SendError(res, jobs.status());
          for (const Job& j : jobs->jobs) {
            r.after_id = j.id;
            auto params = series->Params(j.id);
            auto infos = series->ListSeries(j.id);
            if (!params.ok() || !infos.ok()) continue;
            track::RunRecord run = track::BuildRun(j, *params, *infos);
            FillGpuType(run, j, [&gpu_type_of_node](const std::string& node) {
              auto it = gpu_type_of_node.find(node);
              return it == gpu_type_of_node.end() ? std::string() : it->second;
            });
            JobProgress p;
            p.id = j.id;
            p.name = j.spec.name;
            p.tenant = j.spec.tenant;
            p.queue = j.spec.queue;
            p.attempts = static_cast<int32_t>(j.attempts.size());
            for (const auto& [key, m] : run.metrics) {
              if (!p.step || m.last_step > *p.step) p.step = m.last_step;
              p.latest[key] = m.last;
            }
            if (auto mfu = track::RunMfu(run)) p.mfu = mfu->value;
            if (j.checkpoint) {
              p.checkpoint_age_seconds =
                  std::chrono::duration<double>(page.now - j.checkpoint->completed_at).count();
            }
            page.jobs.push_back(std::move(p));
          }
          if (!jobs->next_after_id) break;
        }
        res.status = 200;
        res.set_content(RenderMetricsPage(page), "text/plain; version=0.0.4; charset=utf-8");
      },
      /*audited=*/false);

  // --- agents ---
  const std::string token = options.join_token;
  for (const char* path : {"/agent/register", "/agent/heartbeat", "/agent/poll", "/agent/logs",
                           "/agent/metrics", "/agent/profile"}) {
    routes.push_back({"POST", v1 + path, RouteAccess::kAgent, Action::kReadCluster});
  }
  auto authorized = [token](const Request& req, Response& res) {
    // Only the join token: a user's API token is not accepted here.
    if (!token.empty() &&
        ConstantTimeEqual(req.get_header_value("Authorization"), "Bearer " + token)) {
      return true;
    }
    SendJson(res, 401, {{"error", "missing or wrong join token (Authorization: Bearer <token>)"}});
    return false;
  };
  server.Post(v1 + "/agent/register", [&cluster, authorized](const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    auto j = ParseJsonBody(req.body, "register");
    if (!j.ok()) return SendError(res, j.status());
    auto reg = ParseRegistration(*j);
    if (!reg.ok()) return SendError(res, reg.status());
    auto reply = cluster.Register(*reg);
    if (!reply.ok()) return SendError(res, reply.status());
    SendJson(res, 200,
             {{"heartbeat_interval_ms", reply->heartbeat_interval.count()},
              {"release_after_ms", reply->release_after.count()},
              {"stop", reply->stop}});
  });
  server.Post(v1 + "/agent/heartbeat",
              [&cluster, authorized, alerting](const Request& req, Response& res) {
                if (!authorized(req, res)) return;
                auto j = ParseJsonBody(req.body, "heartbeat");
                if (!j.ok()) return SendError(res, j.status());
                auto hb = ParseHeartbeat(*j);
                if (!hb.ok()) return SendError(res, hb.status());
                auto ack = cluster.HandleHeartbeat(*hb);
                if (!ack.ok()) return SendError(res, ack.status());
                if (alerting != nullptr) alerting->ObserveHeartbeat(*hb);
                SendJson(res, 200, {{"ack", *ack}});
              });
  // A long poll holds no thread while it waits: the cluster answers it when the node
  // has commands, when its wait is over, or when the server stops.
  server.PostLater(
      v1 + "/agent/poll", [&cluster, authorized](const Request& req, http::Later later) {
        Response refused;
        auto answer_refused = [&later, &refused] {
          later.Answer([res = std::move(refused)](Response& out) mutable { out = std::move(res); });
        };
        auto refuse = [&](const Status& why) {
          SendError(refused, why);
          answer_refused();
        };
        if (!authorized(req, refused)) return answer_refused();
        auto j = ParseJsonBody(req.body, "poll");
        if (!j.ok()) return refuse(j.status());
        auto node = j->find("node");
        if (node == j->end() || !node->is_string()) {
          return refuse(InvalidArgument("poll.node: required, a string"));
        }
        int64_t wait_ms = 20'000;
        if (auto w = j->find("wait_ms"); w != j->end()) {
          if (!w->is_number_integer() || w->get<int64_t>() < 0) {
            return refuse(InvalidArgument("poll.wait_ms: expected an integer >= 0"));
          }
          wait_ms = std::min<int64_t>(w->get<int64_t>(), kMaxPollWait.count());
        }
        cluster.PollAsync(node->get<std::string>(), Duration(wait_ms),
                          [later](Result<std::vector<Command>> cmds) {
                            // Rendered on the server's worker, not under the cluster's lock.
                            later.Answer([cmds = std::move(cmds)](Response& res) {
                              if (!cmds.ok()) return SendError(res, cmds.status());
                              ordered_json out = ordered_json::array();
                              for (const Command& c : *cmds) out.push_back(ToJson(c));
                              SendJson(res, 200, {{"commands", std::move(out)}});
                            });
                          });
      });
  server.Post(v1 + "/agent/logs", [&cluster, &logs, authorized](const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    auto j = ParseJsonBody(req.body, "logs");
    if (!j.ok()) return SendError(res, j.status());
    auto t = ParseTaskRef(*j, "logs");
    if (!t.ok()) return SendError(res, t.status());
    auto b64 = j->find("data_b64");
    if (b64 == j->end() || !b64->is_string()) {
      return SendError(res, InvalidArgument("logs.data_b64: required, a base64 string"));
    }
    auto data = DecodeBase64(b64->get<std::string>(), "logs.data_b64");
    if (!data.ok()) return SendError(res, data.status());
    if (static_cast<int64_t>(data->size()) > kMaxLogChunkBytes) {
      return SendError(res, ResourceExhausted("logs: at most 1 MiB per request"));
    }
    if (!cluster.KnowsTask(t->node, t->job, t->attempt)) {
      return SendError(res, NotFound("unknown task " + j->at("task_id").get<std::string>()));
    }
    auto next = logs.AppendLog(t->job, t->attempt, t->rank, t->offset, *data);
    if (!next.ok()) return SendError(res, next.status());
    SendJson(res, 200, {{"next_offset", *next}});
  });
  server.Post(v1 + "/agent/metrics", [&cluster, &logs, authorized, series, alerting](
                                         const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    auto j = ParseJsonBody(req.body, "metrics");
    if (!j.ok()) return SendError(res, j.status());
    auto t = ParseTaskRef(*j, "metrics");
    if (!t.ok()) return SendError(res, t.status());
    auto lines = j->find("lines");
    if (lines == j->end() || !lines->is_array()) {
      return SendError(res, InvalidArgument("metrics.lines: required, a list of objects"));
    }
    // The agent's file offset after these lines: sent as end_offset when the agent
    // knows it; otherwise estimated from the lines as serialised here.
    int64_t end = t->offset;
    std::vector<std::string> keep;
    std::vector<CheckpointReport> checkpoints;
    for (const json& line : *lines) {
      std::string text = line.dump();
      end += static_cast<int64_t>(text.size()) + 1;
      if (!line.is_object()) continue;
      if (auto c = CheckpointLine(line)) {
        checkpoints.push_back(std::move(*c));
      } else {
        keep.push_back(std::move(text));
      }
    }
    if (auto e = j->find("end_offset"); e != j->end() && e->is_number_integer()) {
      end = std::max(t->offset, e->get<int64_t>());
    }
    auto next = logs.AppendMetrics(t->job, t->attempt, t->rank, t->offset, end, keep);
    if (!next.ok()) return SendError(res, next.status());
    // Only lines not seen before (next == end) are recorded in the run and report
    // their checkpoints.
    if (*next == end && series != nullptr) {
      track::IngestBatch batch = track::DecodeRecords(t->job, t->rank, *lines);
      if (alerting != nullptr) alerting->ObserveMetrics(t->job, batch.appends, batch.params);
      Status s = series->Append(batch.appends);
      if (s.ok()) s = series->PutParams(t->job, batch.params);
      if (!s.ok()) {
        // The lines are filed (the agent will not resend them); losing them from the
        // series is reported rather than failing the agent's upload.
        std::fprintf(stderr, "trainyard server: metrics of job %lld: %s\n",
                     static_cast<long long>(t->job), s.ToString().c_str());
      }
    }
    if (*next == end) {
      for (const CheckpointReport& c : checkpoints) {
        Status s = cluster.ReportCheckpoint(t->job, c, "agent:" + t->node);
        // A checkpoint of a job that has just stopped is of no use any more.
        s.IgnoreError();
      }
    }
    SendJson(res, 200, {{"next_offset", *next}});
  });
  server.Post(v1 + "/agent/profile", [authorized, profiles](const Request& req, Response& res) {
    if (!authorized(req, res)) return;
    if (profiles == nullptr) return SendError(res, Unavailable("this server keeps no profiles"));
    auto report = ParseProfileReport(req.body);
    if (!report.ok()) return SendError(res, report.status());
    auto reply = profiles->Report(*report);
    if (!reply.ok()) return SendError(res, reply.status());
    ordered_json out = {{"next_offset", reply->next_offset},
                        {"state", ProfileStateName(reply->state)}};
    if (!reply->message.empty()) out["message"] = reply->message;
    SendJson(res, 200, out);
  });
  return routes;
}

}  // namespace trainyard::server
