// Alerting: the server's side of monitoring (docs/alerts.md). It keeps the recent
// history of every signal (SignalBuffer), evaluates the alert rules on it once per
// `Evaluate` (the server's loop calls it every evaluation interval), carries out the
// actions the engine lets through (cordon a node, checkpoint-and-requeue a job away
// from a node, ask a job for a checkpoint), delivers firing and resolved alerts to
// webhooks in Alertmanager's format, keeps the alert state across restarts, and
// answers `diagnose` for one job.
//
// Where the signals come from:
//   heartbeats (ObserveHeartbeat)  gpu.* per GPU, link.* per link, node.disk_free_ratio
//   metrics lines (ObserveMetrics) job.loss, job.grad_norm, job.lr, job.checkpoint_write_s
//                                  (every point, from the job's lowest reporting rank), and
//                                  per rank the median of its last kRankStepWindow
//                                  step_time_s points (one slow step on a busy host is
//                                  not a straggler), the latest tokens_per_s,
//                                  data_wait_s and step
//   each evaluation                node.heartbeat_age_s; for Running jobs job.gpu_util,
//                                  job.step_time_s (median over ranks), job.tokens_per_s
//                                  (sum), job.data_wait_s (median), job.rank_step_time_ratio,
//                                  job.checkpoint_age_ratio, job.progress_age_s, job.mfu (when
//                                  the job logged its FLOPs per token or parameter count
//                                  and tokens_per_s, on GPUs of a known type); for Pending
//                                  jobs job.pending_ratio (every 30 s)
// Job signals carry job_id, tenant, queue (+ rank, node per rank); node signals node and
// gpu / link / path.
//
// Actions are carried out as the actor "alert:<rule>" and recorded as events; a failed
// action is recorded with its error and not retried (the alert stays firing).
//
// Thread-safety: every public method may be called from any thread. Observe* and reads
// take a short lock; Evaluate is meant for one caller (the loop) at a time and calls the
// Cluster without holding its own lock. Webhooks are posted by a thread of their own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "monitor/diagnose.h"
#include "monitor/engine.h"
#include "monitor/rules.h"
#include "server/clock.h"
#include "server/cluster.h"
#include "server/protocol.h"
#include "server/signal_buffer.h"
#include "track/series_store.h"

namespace trainyard::server {

struct AlertingOptions {
  monitor::RuleSet rules;
  std::vector<std::string> webhooks;  // http(s) URLs; each gets every notification
  std::string webhook_ca;             // for https webhooks: CA file (empty: system store)
  std::string state_path;             // where alert state is kept; empty: memory only
  SignalBufferOptions signals;
  monitor::DiagnoseOptions diagnose;
  monitor::EngineOptions engine;
  Duration webhook_timeout = std::chrono::seconds(5);
  int webhook_attempts = 5;  // per notification, with backoff 1 s, 2 s, 4 s, ...
  Duration pending_interval = std::chrono::seconds(30);  // job.pending_ratio refresh
};

// One thing that happened to an alert: a transition or an action.
struct AlertEvent {
  Timestamp at;
  std::string kind;  // "pending" | "firing" | "resolved" | "action"
  std::string rule;
  std::string fingerprint;
  monitor::Labels labels;
  std::string detail;  // the summary annotation, or what the action did / why not
};

struct AlertingStats {
  int64_t evaluations = 0;
  double last_evaluation_seconds = 0;
  int64_t webhook_sent = 0;
  int64_t webhook_failed = 0;  // notifications given up on after every attempt
  int64_t actions_done = 0;
  int64_t actions_suppressed = 0;
  int64_t actions_failed = 0;
  size_t signal_series = 0;
  size_t signal_samples = 0;
};

class Alerting {
 public:
  // Loads the alert state from options.state_path when the file exists (a corrupt
  // file is an error naming it); starts the webhook thread when there are webhooks.
  static Result<std::unique_ptr<Alerting>> Open(Cluster* cluster, const Clock* clock,
                                                AlertingOptions options);
  ~Alerting();
  Alerting(const Alerting&) = delete;
  Alerting& operator=(const Alerting&) = delete;

  void ObserveHeartbeat(const Heartbeat& hb);
  // Points of one job (each append names its rank) and the params it logged with them
  // (model_flops_per_token, num_params and precision feed job.mfu).
  void ObserveMetrics(JobId job, const std::vector<track::SeriesAppend>& appends,
                      const std::map<std::string, std::string>& params = {});

  // One evaluation at the clock's now: derive signals, evaluate, act, notify, persist.
  Status Evaluate();

  // Every alert now pending, firing or recently resolved, in rule order.
  std::vector<monitor::Alert> Alerts() const;
  // Recent transitions and actions, oldest first (at most 1000).
  std::vector<AlertEvent> Events() const;
  AlertingStats Stats() const;
  const monitor::RuleSet& rules() const { return rules_; }

  // Diagnoses one job over its recent signals; NotFound for an unknown job.
  Result<monitor::Diagnosis> Diagnose(JobId id);

  const SignalBuffer& signals() const { return signals_; }
  // This server's URL, for the webhook payload's externalURL and generatorURL.
  void SetExternalUrl(const std::string& url);

 private:
  struct RankStat {
    Timestamp at;               // of the latest step_time_s
    double step_time = 0;       // median of `recent`
    std::deque<double> recent;  // the last kRankStepWindow step_time_s points
    std::optional<double> tokens;
    std::optional<double> data_wait;
  };
  struct JobStat {
    monitor::Labels labels;  // job_id, tenant, queue
    int32_t lowest_rank = -1;
    int64_t last_step = -1;
    Timestamp progress_at{};  // when the step last increased; epoch: never
    int32_t attempt = -1;     // the attempt the rank stats are of
    std::map<int32_t, RankStat> ranks;
    bool admitted_counted = false;
    // For job.mfu: what the job logged about its model (metrics or params).
    std::optional<double> model_flops_per_token;
    std::optional<double> num_params;
    std::string precision;
  };
  struct Notification {
    std::string url;
    std::string body;
  };

  Alerting(Cluster* cluster, const Clock* clock, AlertingOptions options);
  Status Load();
  Status Save();
  // The labels of a job's signals; looks the job up once. REQUIRES: mu_ held.
  JobStat* JobLocked(JobId job);
  void DeriveNodeSignals(Timestamp now, const std::vector<NodeView>& nodes);
  Status DeriveJobSignals(Timestamp now, const std::vector<NodeView>& nodes);
  Status DerivePendingSignals(Timestamp now);
  void Act(const monitor::ActionRequest& request, const monitor::Alert* alert, Timestamp now);
  void Record(AlertEvent event);  // REQUIRES: mu_ held
  void Notify(const std::vector<monitor::Transition>& transitions);
  void WebhookLoop();

  Cluster* const cluster_;
  const Clock* const clock_;
  const AlertingOptions opt_;
  const monitor::RuleSet rules_;
  SignalBuffer signals_;

  std::mutex eval_mu_;  // one evaluation at a time; guards engine_
  monitor::Engine engine_;
  Timestamp last_pending_{};

  mutable std::mutex mu_;
  std::map<JobId, JobStat> jobs_;  // GUARDED_BY(mu_)
  // Pending durations of jobs each queue admitted lately (tenant/queue -> seconds).
  std::map<std::pair<std::string, std::string>, std::deque<double>> admitted_;  // GUARDED_BY(mu_)
  std::vector<monitor::Alert> alerts_;  // GUARDED_BY(mu_): as of the last evaluation
  std::deque<AlertEvent> events_;       // GUARDED_BY(mu_)
  AlertingStats stats_;                 // GUARDED_BY(mu_)

  std::mutex hook_mu_;
  std::condition_variable hook_cv_;
  std::deque<Notification> outbox_;  // GUARDED_BY(hook_mu_)
  std::string external_url_;         // GUARDED_BY(hook_mu_)
  bool stopping_ = false;            // GUARDED_BY(hook_mu_)
  std::thread hook_thread_;
};

}  // namespace trainyard::server
