#include "server/api/monitoring.h"

#include <chrono>
#include <map>
#include <string>

#include "server/api/alerts.h"
#include "server/api/runs.h"
#include "track/runs.h"
#include "track/series_store.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::ordered_json;

namespace {

// A running job's progress: its latest step and metrics, MFU, checkpoint age.
JobProgress ProgressOf(const Job& j, const track::RunRecord& run, Timestamp now) {
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
        std::chrono::duration<double>(now - j.checkpoint->completed_at).count();
    p.checkpoint_write_seconds =
        std::chrono::duration<double>(j.checkpoint->write_duration).count();
  }
  return p;
}

}  // namespace

Result<MetricsPage> GatherMetricsPage(const ApiServices& s, const HttpMetrics& http,
                                      const Principal& who, Timestamp now) {
  MetricsPage page;
  page.http = http.Snapshot();
  page.now = now;
  page.nodes = s.cluster.ListNodes();
  page.queues = s.cluster.ListQueues();
  page.cluster = s.cluster.Metrics();
  if (s.alerting != nullptr) {
    for (const monitor::Alert& a : s.alerting->Alerts()) {
      if (MaySeeAlert(who, a.labels)) page.alerts.push_back(a);
    }
    page.alerting = s.alerting->Stats();
  }
  if (s.series == nullptr) return page;
  // Running jobs' progress, of the tenants the caller may read.
  ListJobsRequest r;
  r.filter.states = {JobState::kRunning};
  if (who.role != Role::kClusterAdmin) r.filter.tenant = who.tenant;
  std::map<std::string, std::string> gpu_type_of_node;
  for (const NodeView& v : page.nodes) {
    if (!v.node.gpus.empty()) gpu_type_of_node[v.node.name] = v.node.gpus.front().model;
  }
  while (true) {
    r.limit = 500;
    TY_ASSIGN_OR_RETURN(store::JobPage jobs, s.cluster.ListJobs(r));
    for (const Job& j : jobs.jobs) {
      r.after_id = j.id;
      auto params = s.series->Params(j.id);
      auto infos = s.series->ListSeries(j.id);
      if (!params.ok() || !infos.ok()) continue;
      track::RunRecord run = track::BuildRun(j, *params, *infos);
      FillGpuType(run, j, [&gpu_type_of_node](const std::string& node) {
        auto it = gpu_type_of_node.find(node);
        return it == gpu_type_of_node.end() ? std::string() : it->second;
      });
      page.jobs.push_back(ProgressOf(j, run, page.now));
    }
    if (!jobs.next_after_id) break;
  }
  return page;
}

void InstallMonitoringRoutes(Routes& routes, const ApiServices& s) {
  routes.Public("GET", V1("/healthz"), [](const Request&) -> Result<Reply> {
    return Reply::Json(200, ordered_json{{"ok", true}});
  });
  routes.User(
      "GET", "/metrics", Action::kReadCluster,
      [s, http = routes.http_metrics()](const Request&, Call& call) -> Result<Reply> {
        const Timestamp now(std::chrono::duration_cast<Duration>(
            std::chrono::system_clock::now().time_since_epoch()));
        TY_ASSIGN_OR_RETURN(MetricsPage page, GatherMetricsPage(s, *http, call.who, now));
        return Reply{200, RenderMetricsPage(page), "text/plain; version=0.0.4; charset=utf-8", {}};
      });
}

}  // namespace trainyard::server
