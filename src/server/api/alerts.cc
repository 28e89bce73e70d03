#include "server/api/alerts.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/names.h"
#include "monitor/diagnose.h"
#include "monitor/webhook.h"
#include "server/api/jobs.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::json;
using nlohmann::ordered_json;

Result<AlertQuery> ParseAlertQuery(const Params& params) {
  TY_RETURN_IF_ERROR(CheckParams(params, {"state", "rule", "job", "node"}));
  AlertQuery q;
  if (auto p = Param(params, "state")) {
    for (size_t pos = 0; pos <= p->size();) {
      const size_t comma = std::min(p->find(',', pos), p->size());
      const std::string state = p->substr(pos, comma - pos);
      if (state != "pending" && state != "firing" && state != "resolved") {
        return InvalidArgument("state: unknown alert state " + QuoteForMessage(state) +
                               "; one of pending, firing, resolved");
      }
      q.states.insert(state);
      pos = comma + 1;
    }
  }
  q.rule = Param(params, "rule").value_or("");
  q.job = Param(params, "job").value_or("");
  q.node = Param(params, "node").value_or("");
  return q;
}

bool AlertMatches(const monitor::Alert& a, const AlertQuery& q) {
  if (!q.states.empty() && !q.states.contains(std::string(monitor::AlertStateName(a.state)))) {
    return false;
  }
  auto label = [&](const char* k) {
    auto it = a.labels.find(k);
    return it == a.labels.end() ? std::string() : it->second;
  };
  return (q.rule.empty() || a.rule == q.rule) && (q.job.empty() || label("job_id") == q.job) &&
         (q.node.empty() || label("node") == q.node);
}

bool MaySeeAlert(const Principal& who, const monitor::Labels& labels) {
  auto t = labels.find("tenant");
  return t == labels.end() || CanSeeTenant(who, t->second);
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

namespace {

Status NoAlerting() { return Unavailable("this server does not evaluate alert rules"); }

Result<Reply> ListAlerts(const ApiServices& s, const Request& req, Call& call) {
  if (s.alerting == nullptr) return NoAlerting();
  TY_ASSIGN_OR_RETURN(AlertQuery q, ParseAlertQuery(req.params));
  ordered_json out = ordered_json::array();
  for (const monitor::Alert& a : s.alerting->Alerts()) {
    if (MaySeeAlert(call.who, a.labels) && AlertMatches(a, q)) out.push_back(RenderAlert(a));
  }
  return Reply::Json(200, ordered_json{{"alerts", std::move(out)}});
}

Result<Reply> ListAlertEvents(const ApiServices& s, const Request& req, Call& call) {
  if (s.alerting == nullptr) return NoAlerting();
  TY_RETURN_IF_ERROR(CheckParams(req.params, {"limit"}));
  int64_t limit = 100;
  if (auto p = Param(req.params, "limit")) {
    TY_ASSIGN_OR_RETURN(limit, ParseInt("limit", *p, 1, 1000));
  }
  std::vector<AlertEvent> events = s.alerting->Events();
  ordered_json out = ordered_json::array();
  for (auto it = events.rbegin(); it != events.rend() && std::ssize(out) < limit; ++it) {
    if (!MaySeeAlert(call.who, it->labels)) continue;
    out.push_back({{"at", monitor::FormatRfc3339(it->at)},
                   {"kind", it->kind},
                   {"rule", it->rule},
                   {"fingerprint", it->fingerprint},
                   {"labels", it->labels},
                   {"detail", it->detail}});
  }
  return Reply::Json(200, ordered_json{{"events", std::move(out)}});  // newest first
}

Result<Reply> ListAlertRules(const ApiServices& s, const Request&, Call&) {
  if (s.alerting == nullptr) return NoAlerting();
  ordered_json out = ordered_json::array();
  for (const monitor::Rule& r : s.alerting->rules().rules) {
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
  return Reply::Json(
      200, ordered_json{{"rules", std::move(out)}, {"disabled", s.alerting->rules().disabled}});
}

Result<Reply> Diagnose(const ApiServices& s, const Request& req, Call& call) {
  if (s.alerting == nullptr) return NoAlerting();
  TY_ASSIGN_OR_RETURN(JobView v,
                      VisibleJob(s.cluster, req.matches[1].str(), call, Action::kReadJobs));
  TY_ASSIGN_OR_RETURN(monitor::Diagnosis d, s.alerting->Diagnose(v.job.id));
  json out = json::parse(monitor::DiagnosisJson(d));
  out["text"] = monitor::RenderDiagnosis(d);
  return Reply::Json(200, out);
}

}  // namespace

void InstallAlertRoutes(Routes& routes, const ApiServices& s) {
  routes.User("GET", V1("/alerts"), Action::kReadCluster, Bind(s, ListAlerts));
  routes.User("GET", V1("/alerts/events"), Action::kReadCluster, Bind(s, ListAlertEvents));
  routes.User("GET", V1("/alerts/rules"), Action::kReadCluster, Bind(s, ListAlertRules));
  routes.User("GET", V1(R"(/jobs/([^/]+)/diagnosis)"), Action::kReadJobs, Bind(s, Diagnose));
}

}  // namespace trainyard::server
