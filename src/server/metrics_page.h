// What GET /metrics shows, in the Prometheus text format (docs/metrics.md lists the
// series): the cluster (nodes, GPUs, jobs, queues, scheduler), GPU telemetry under
// dcgm-exporter's names and labels (so its Grafana dashboards work unchanged), and
// the training progress of running jobs.
//
// Parse -> core -> render: the handler gathers a MetricsPage from the Cluster and the
// series store; RenderMetricsPage turns it into text without touching either.
//
// Thread-safety: plain values and a pure function.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "monitor/engine.h"
#include "server/alerting.h"
#include "server/cluster.h"

namespace trainyard::server {

// One running job's training progress.
struct JobProgress {
  JobId id = 0;
  std::string name;
  std::string tenant;
  std::string queue;
  int32_t attempts = 0;
  std::optional<int64_t> step;
  std::map<std::string, double> latest;  // loss, grad_norm, lr, step_time_s, tokens_per_s
  std::optional<double> mfu;
  std::optional<double> checkpoint_age_seconds;
};

struct MetricsPage {
  Timestamp now{};
  std::vector<NodeView> nodes;
  std::vector<QueueView> queues;
  ClusterMetrics cluster;
  std::vector<JobProgress> jobs;
  // Pending and firing alerts the caller may see (ALERTS), and the alerting counters.
  std::vector<monitor::Alert> alerts;
  std::optional<AlertingStats> alerting;
};

std::string RenderMetricsPage(const MetricsPage& page);

}  // namespace trainyard::server
