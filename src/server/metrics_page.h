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
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "monitor/engine.h"
#include "server/alerting.h"
#include "server/cluster.h"
#include "server/prometheus.h"

namespace trainyard::server {

// One running job's training progress.
struct JobProgress {
  JobId id = 0;
  std::string name;
  std::string tenant;
  std::string queue;
  int32_t attempts = 0;
  std::optional<int64_t> step;
  // loss, grad_norm, lr, step_time_s, tokens_per_s, data_wait_s
  std::map<std::string, double> latest;
  std::optional<double> mfu;
  std::optional<double> checkpoint_age_seconds;
  std::optional<double> checkpoint_write_seconds;  // of its latest complete checkpoint
};

// How long the API took to answer, per route (the pattern as registered; "unmatched"
// for requests no route took), from http::Server's observer: the time from a request's
// first bytes to its answer written, waiting for a worker included.
struct HttpRouteDurations {
  std::string method;
  std::string route;
  HistogramValue seconds;
};

// Thread-safety: Observe and Snapshot from any thread.
class HttpMetrics {
 public:
  void Observe(const std::string& method, const std::string& route, double seconds);
  std::vector<HttpRouteDurations> Snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, HistogramValue> by_route_;  // GUARDED_BY(mu_)
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
  std::vector<HttpRouteDurations> http;
};

std::string RenderMetricsPage(const MetricsPage& page);

}  // namespace trainyard::server
