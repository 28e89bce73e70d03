#include "server/metrics_page.h"

#include <set>

#include "server/prometheus.h"

namespace trainyard::server {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

void Gauges(Exposition& e, const char* name, const char* help,
            const std::map<MetricLabels, double>& values) {
  e.Family(name, help, MetricType::kGauge);
  for (const auto& [labels, v] : values) e.Sample(labels, v);
}

}  // namespace

void HttpMetrics::Observe(const std::string& method, const std::string& route, double seconds) {
  static const std::vector<double> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25,   0.5,   1,      2.5,   5,    10,    30};
  std::lock_guard lk(mu_);
  auto [it, added] = by_route_.try_emplace({method, route.empty() ? "unmatched" : route});
  if (added) it->second = HistogramValue::WithBounds(kBounds);
  it->second.Observe(seconds);
}

std::vector<HttpRouteDurations> HttpMetrics::Snapshot() const {
  std::lock_guard lk(mu_);
  std::vector<HttpRouteDurations> out;
  out.reserve(by_route_.size());
  for (const auto& [key, h] : by_route_) out.push_back({key.first, key.second, h});
  return out;
}

std::string RenderMetricsPage(const MetricsPage& page) {
  Exposition e;

  // --- nodes and GPUs ---
  std::map<std::string, double> by_state;
  for (NodeState s : {NodeState::kReady, NodeState::kCordoned, NodeState::kDraining,
                      NodeState::kNotReady, NodeState::kDown}) {
    by_state[std::string(NodeStateName(s))] = 0;
  }
  std::map<MetricLabels, double> gpus;
  std::map<MetricLabels, double> heartbeat_age, limited;
  std::map<MetricLabels, double> cache_bytes, cache_versions, staged_bytes, staging_rate;
  std::map<MetricLabels, double> link_up, link_errors, disk_free, disk_total;
  for (const NodeView& v : page.nodes) {
    ++by_state[std::string(NodeStateName(v.node.state))];
    const int64_t total = static_cast<int64_t>(v.node.gpus.size());
    const std::string type = v.node.gpus.empty() ? "none" : v.node.gpus.front().model;
    const bool usable = IsSchedulable(v.node.state);
    gpus[{{"gpu_type", type}, {"state", "allocated"}}] += static_cast<double>(v.gpus_used);
    gpus[{{"gpu_type", type}, {"state", usable ? "free" : "unavailable"}}] +=
        static_cast<double>(std::max<int64_t>(0, total - v.gpus_used));
    gpus.try_emplace({{"gpu_type", type}, {"state", usable ? "unavailable" : "free"}}, 0);
    if (v.last_heartbeat != Timestamp{}) {
      heartbeat_age[{{"node", v.node.name}}] =
          std::chrono::duration<double>(page.now - v.last_heartbeat).count();
    }
    if (!v.limits.empty()) limited[{{"node", v.node.name}}] = v.limits.starts_with("none") ? 0 : 1;
    for (const protocol::LinkTelemetry& l : v.links) {
      const MetricLabels labels = {
          {"node", v.node.name}, {"link", l.name}, {"kind", l.kind.empty() ? "unknown" : l.kind}};
      link_up[labels] = l.up ? 1 : 0;
      link_errors[labels] = l.errors;
    }
    for (const protocol::DiskTelemetry& d : v.disks) {
      disk_free[{{"node", v.node.name}, {"path", d.path}}] = d.free_bytes;
      disk_total[{{"node", v.node.name}, {"path", d.path}}] = d.total_bytes;
    }
    for (const protocol::DatasetStatus& d : v.datasets) {
      const std::string state(protocol::DatasetStateName(d.state));
      const MetricLabels by_state = {{"node", v.node.name}, {"state", state}};
      cache_versions[by_state] += 1;
      if (d.state != protocol::DatasetState::kFailed) {
        cache_bytes[by_state] += static_cast<double>(
            d.state == protocol::DatasetState::kReady ? d.bytes_total : d.bytes_done);
      }
      if (d.state == protocol::DatasetState::kStaging) {
        const MetricLabels l = {{"node", v.node.name}, {"dataset", d.dataset}};
        staged_bytes[l] += static_cast<double>(d.bytes_done);
        staging_rate[l] += d.bytes_per_s;
      }
    }
  }
  e.Family("trainyard_nodes", "Nodes by state.", MetricType::kGauge);
  for (const auto& [state, n] : by_state) e.Sample({{"state", state}}, n);
  Gauges(e, "trainyard_gpus", "GPUs by type and state (allocated, free, unavailable).", gpus);
  Gauges(e, "trainyard_node_heartbeat_age_seconds",
         "Seconds since each node's agent last reported to this server.", heartbeat_age);
  Gauges(e, "trainyard_node_task_limits",
         "1 when the node's agent runs tasks in cgroups with cpu, memory and pids limits, 0 "
         "when the host gives it none (nodes says why).",
         limited);

  Gauges(e, "trainyard_node_link_up",
         "1 when the node's network link (InfiniBand port, NVLink) is up, 0 when down, as its "
         "agent last said.",
         link_up);
  Gauges(e, "trainyard_node_link_errors",
         "The link's error counter as its agent last read it (it only grows, except when its "
         "source restarts: use increase() over it).",
         link_errors);
  Gauges(e, "trainyard_node_disk_free_bytes",
         "Free bytes of each checkpoint and data path the node's agent watches.", disk_free);
  Gauges(e, "trainyard_node_disk_total_bytes",
         "Size of the file system of each path the node's agent watches.", disk_total);
  Gauges(e, "trainyard_node_dataset_cache_bytes",
         "Bytes in each node's dataset cache: versions ready, and copied so far of those "
         "being staged.",
         cache_bytes);
  Gauges(e, "trainyard_node_dataset_cache_versions",
         "Dataset versions in each node's cache by state (ready, staging, failed).",
         cache_versions);
  Gauges(e, "trainyard_dataset_staging_bytes",
         "Bytes of a dataset copied so far to a node's cache, while it is being staged.",
         staged_bytes);
  Gauges(e, "trainyard_dataset_staging_bytes_per_second",
         "How fast a dataset is being staged to a node's cache.", staging_rate);

  // --- jobs and queues ---
  std::map<MetricLabels, double> jobs;
  for (const auto& [k, n] : page.cluster.jobs) {
    const auto& [tenant, queue, state] = k;
    jobs[{{"tenant", tenant}, {"queue", queue}, {"state", state}}] = static_cast<double>(n);
  }
  Gauges(e, "trainyard_jobs", "Unfinished jobs by tenant, queue and state.", jobs);
  std::map<MetricLabels, double> guaranteed, limit, in_use, borrowed, pending;
  for (const QueueView& q : page.queues) {
    const MetricLabels l = {{"tenant", q.queue.tenant}, {"queue", q.queue.name}};
    guaranteed[l] = static_cast<double>(q.queue.guaranteed_gpus);
    limit[l] = static_cast<double>(q.queue.limit_gpus);
    in_use[l] = static_cast<double>(q.gpus_in_use);
    borrowed[l] = static_cast<double>(q.gpus_borrowed);
    pending[l] = static_cast<double>(q.pending_jobs);
  }
  Gauges(e, "trainyard_queue_gpus_guaranteed", "GPUs guaranteed to the queue.", guaranteed);
  Gauges(e, "trainyard_queue_gpus_limit", "Most GPUs the queue may use, borrowing included.",
         limit);
  Gauges(e, "trainyard_queue_gpus_in_use", "GPUs the queue's running jobs hold.", in_use);
  Gauges(e, "trainyard_queue_gpus_borrowed", "GPUs the queue uses beyond its guarantee.", borrowed);
  Gauges(e, "trainyard_queue_pending_jobs", "Jobs waiting in the queue.", pending);

  auto counters = [&e](const char* name, const char* help, const auto& values) {
    e.Family(name, help, MetricType::kCounter);
    for (const auto& [k, v] : values) {
      e.Sample({{"tenant", k.first}, {"queue", k.second}}, static_cast<double>(v));
    }
  };
  counters("trainyard_jobs_submitted_total", "Jobs submitted since the server started.",
           page.cluster.submitted);
  counters("trainyard_preemptions_total", "Preemption notices sent to jobs.",
           page.cluster.preemptions);
  counters("trainyard_lost_work_gpu_seconds_total",
           "GPU-seconds of work lost by attempts that ended before a checkpoint (preemption, "
           "node loss, failure).",
           page.cluster.lost_work_gpu_seconds);
  e.Family("trainyard_jobs_finished_total", "Jobs that finished, by final state.",
           MetricType::kCounter);
  for (const auto& [k, n] : page.cluster.finished) {
    const auto& [tenant, queue, state] = k;
    e.Sample({{"tenant", tenant}, {"queue", queue}, {"state", state}}, static_cast<double>(n));
  }
  e.Family("trainyard_scheduling_pass_duration_seconds",
           "Duration of scheduling passes (snapshot, policy, applying decisions).",
           MetricType::kHistogram);
  HistogramValue h = HistogramValue::WithBounds(page.cluster.pass_bounds);
  if (page.cluster.pass_counts.size() == h.counts.size()) {
    h.counts = page.cluster.pass_counts;
    h.sum = page.cluster.pass_seconds_sum;
  }
  e.Histogram({}, h);
  e.Family("trainyard_http_request_duration_seconds",
           "Time from a request's first bytes to its answer written, by method and route "
           "(the route's pattern; \"unmatched\" when none matched).",
           MetricType::kHistogram);
  for (const HttpRouteDurations& r : page.http) {
    e.Histogram({{"method", r.method}, {"route", r.route}}, r.seconds);
  }

  // --- GPU telemetry, as dcgm-exporter names it ---
  struct Dcgm {
    const char* name;
    const char* help;
    std::optional<double> GpuTelemetry::*field;
  };
  const Dcgm dcgm[] = {
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", &GpuTelemetry::util_pct},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", &GpuTelemetry::mem_used_mib},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", &GpuTelemetry::temp_c},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", &GpuTelemetry::power_w},
      {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", &GpuTelemetry::sm_clock_mhz},
      {"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.",
       &GpuTelemetry::xid_last},
      {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
       &GpuTelemetry::ecc_uncorrectable},
  };
  // The GPU a sample is about: its index, UUID, device file and model, and its node.
  // The DCGM_FI_* series name them as dcgm-exporter does, so that its dashboards work
  // unchanged; our own (trainyard_gpu_*) in snake_case, the node and the GPU type
  // under the names the other trainyard_* series give them.
  enum class Naming { kDcgm, kOwn };
  auto gpu_labels = [](const NodeView& v, const GpuTelemetry& t, Naming naming = Naming::kDcgm) {
    std::string uuid, model;
    for (const Gpu& g : v.node.gpus) {
      if (g.index == t.index) {
        uuid = g.uuid;
        model = g.model;
      }
    }
    const bool dcgm = naming == Naming::kDcgm;
    return MetricLabels{{"gpu", std::to_string(t.index)},
                        {dcgm ? "UUID" : "uuid", uuid},
                        {"device", "nvidia" + std::to_string(t.index)},
                        {dcgm ? "modelName" : "gpu_type", model},
                        {dcgm ? "Hostname" : "node", v.node.name}};
  };
  for (const Dcgm& d : dcgm) {
    e.Family(d.name, d.help, MetricType::kGauge);
    for (const NodeView& v : page.nodes) {
      for (const GpuTelemetry& t : v.telemetry) {
        if (const auto& value = t.*d.field) e.Sample(gpu_labels(v, t), *value);
      }
    }
  }
  e.Family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", MetricType::kGauge);
  for (const NodeView& v : page.nodes) {
    for (const GpuTelemetry& t : v.telemetry) {
      if (!t.mem_used_mib) continue;
      for (const Gpu& g : v.node.gpus) {
        if (g.index == t.index && g.memory_bytes > 0) {
          e.Sample(gpu_labels(v, t),
                   static_cast<double>(g.memory_bytes) / (1 << 20) - *t.mem_used_mib);
        }
      }
    }
  }
  e.Family("trainyard_gpu_xid_errors_total",
           "XID errors counted by the node's agent since it started.", MetricType::kCounter);
  for (const NodeView& v : page.nodes) {
    for (const GpuTelemetry& t : v.telemetry) {
      if (t.xid_count) e.Sample(gpu_labels(v, t, Naming::kOwn), *t.xid_count);
    }
  }

  // --- training progress of running jobs ---
  struct JobGauge {
    const char* name;
    const char* help;
    const char* key;
  };
  const JobGauge job_gauges[] = {
      {"trainyard_job_loss", "The job's latest training loss (rank 0).", "loss"},
      {"trainyard_job_grad_norm", "The job's latest gradient norm (rank 0).", "grad_norm"},
      {"trainyard_job_learning_rate", "The job's latest learning rate.", "lr"},
      {"trainyard_job_step_time_seconds", "Wall time of the job's latest step (rank 0).",
       "step_time_s"},
      {"trainyard_job_tokens_per_second", "Tokens per second, summed over ranks.", "tokens_per_s"},
      {"trainyard_job_data_wait_seconds",
       "Time the job's latest step waited for its data (rank 0; the SDK's trainyard.timed "
       "measures it).",
       "data_wait_s"},
  };
  auto job_labels = [](const JobProgress& j) {
    return MetricLabels{
        {"job_id", Str(j.id)}, {"name", j.name}, {"tenant", j.tenant}, {"queue", j.queue}};
  };
  e.Family("trainyard_job_step", "The latest step the job reported.", MetricType::kGauge);
  for (const JobProgress& j : page.jobs) {
    if (j.step) e.Sample(job_labels(j), static_cast<double>(*j.step));
  }
  for (const JobGauge& g : job_gauges) {
    e.Family(g.name, g.help, MetricType::kGauge);
    for (const JobProgress& j : page.jobs) {
      if (auto it = j.latest.find(g.key); it != j.latest.end()) e.Sample(job_labels(j), it->second);
    }
  }
  e.Family("trainyard_job_mfu_ratio",
           "Model FLOPs utilisation: achieved model FLOP/s over the GPUs' dense peak.",
           MetricType::kGauge);
  for (const JobProgress& j : page.jobs) {
    if (j.mfu) e.Sample(job_labels(j), *j.mfu);
  }
  e.Family("trainyard_job_checkpoint_age_seconds",
           "Seconds since the job's latest complete checkpoint.", MetricType::kGauge);
  for (const JobProgress& j : page.jobs) {
    if (j.checkpoint_age_seconds) e.Sample(job_labels(j), *j.checkpoint_age_seconds);
  }
  e.Family("trainyard_job_checkpoint_write_seconds",
           "How long the job's latest complete checkpoint took to write.", MetricType::kGauge);
  for (const JobProgress& j : page.jobs) {
    if (j.checkpoint_write_seconds) e.Sample(job_labels(j), *j.checkpoint_write_seconds);
  }
  e.Family("trainyard_job_attempts", "Attempts the job has made (retries and preemptions add one).",
           MetricType::kGauge);
  for (const JobProgress& j : page.jobs) e.Sample(job_labels(j), static_cast<double>(j.attempts));

  // --- alerts, as Prometheus exposes its own: ALERTS{alertname, alertstate, ...} 1 ---
  e.Family("ALERTS", "Pending and firing alerts of Trainyard's rules (docs/alerts.md).",
           MetricType::kGauge);
  for (const monitor::Alert& a : page.alerts) {
    if (a.state == monitor::AlertState::kResolved) continue;
    MetricLabels l(a.labels.begin(), a.labels.end());
    l.emplace_back("alertstate", std::string(monitor::AlertStateName(a.state)));
    e.Sample(l, 1);
  }
  if (page.alerting) {
    const AlertingStats& s = *page.alerting;
    e.Family("trainyard_alert_evaluations_total", "Evaluations of the alert rules.",
             MetricType::kCounter);
    e.Sample({}, static_cast<double>(s.evaluations));
    e.Family("trainyard_alert_evaluation_seconds", "How long the last evaluation took.",
             MetricType::kGauge);
    e.Sample({}, s.last_evaluation_seconds);
    e.Family("trainyard_alert_notifications_total",
             "Webhook notifications delivered (sent) or given up on (failed).",
             MetricType::kCounter);
    e.Sample({{"result", "sent"}}, static_cast<double>(s.webhook_sent));
    e.Sample({{"result", "failed"}}, static_cast<double>(s.webhook_failed));
    e.Family("trainyard_alert_actions_total",
             "Alert actions carried out (done), refused by a safety limit (suppressed) or failed.",
             MetricType::kCounter);
    e.Sample({{"result", "done"}}, static_cast<double>(s.actions_done));
    e.Sample({{"result", "suppressed"}}, static_cast<double>(s.actions_suppressed));
    e.Sample({{"result", "failed"}}, static_cast<double>(s.actions_failed));
    e.Family("trainyard_alert_signal_series", "Signal series the alert engine holds in memory.",
             MetricType::kGauge);
    e.Sample({}, static_cast<double>(s.signal_series));
  }
  return e.Text();
}

}  // namespace trainyard::server
