// The built-in alert rules. docs/alerts.md has the table of these rules with the reason
// for each threshold; change both together.
#include "monitor/rules.h"

namespace trainyard::monitor {

std::string_view DefaultRulesYaml() {
  static constexpr std::string_view kText = R"yaml(# Trainyard default alert rules.
limits:
  cordon_node: {max_per_hour: 3, max_cordoned: 2}
  requeue_excluding_node: {max_per_hour: 5}
  request_checkpoint: {max_per_hour: 20}

rules:
  # ---- Training -----------------------------------------------------------------------
  - name: GradNormSpike
    signal: job.grad_norm
    condition: {zscore_above: 6, window: 10m, min_points: 50}
    for: 0s
    keep_firing_for: 10m
    severity: warning
    labels: {layer: training}
    annotations:
      summary: "grad norm of job {{job_id}} jumped to {{value}}"
      description: "more than {{threshold}} standard deviations above its last 10 minutes"

  - name: LossSpike
    signal: job.loss
    condition: {zscore_above: 6, window: 15m, min_points: 50}
    for: 0s
    keep_firing_for: 10m
    severity: warning
    labels: {layer: training}
    annotations:
      summary: "loss of job {{job_id}} jumped to {{value}}"
      description: "more than {{threshold}} standard deviations above its last 15 minutes"

  - name: LossNotFinite
    signal: job.loss
    condition: {nan: true}
    for: 0s
    severity: critical
    labels: {layer: training}
    annotations:
      summary: "loss of job {{job_id}} is {{value}}"
      description: "training has diverged; resume from the last good checkpoint"

  - name: JobGpuUtilCollapsed
    signal: job.gpu_util
    condition: {threshold_below: 10}
    for: 10m
    severity: warning
    labels: {layer: training}
    annotations:
      summary: "GPUs of job {{job_id}} average {{value}}% busy"
      description: "a stalled data loader, a hung collective or a crashed rank"

  - name: RankStraggler
    signal: job.rank_step_time_ratio
    condition: {threshold_above: 1.5}
    for: 10m
    severity: warning
    labels: {layer: training}
    annotations:
      summary: "rank {{rank}} of job {{job_id}} on node {{node}} takes {{value}}x the median step"
      description: "one slow rank holds back every step of the job"

  - name: TrainingStalled
    signal: job.progress_age_s
    condition: {threshold_above: 1800}
    for: 1m
    severity: critical
    labels: {layer: training}
    annotations:
      summary: "job {{job_id}} has not advanced a step for {{value}} s"
      description: "the job holds its GPUs but does no training"

  - name: CheckpointOverdue
    signal: job.checkpoint_age_ratio
    condition: {threshold_above: 2}
    for: 5m
    severity: warning
    labels: {layer: training}
    annotations:
      summary: "job {{job_id}}'s last checkpoint is {{value}}x its interval old"
      description: "a failure now would lose more than two intervals of work"
    action: {kind: request_checkpoint}

  - name: CheckpointWriteSlow
    signal: job.checkpoint_write_s
    condition: {threshold_above: 600}
    for: 0s
    severity: warning
    labels: {layer: training}
    annotations:
      summary: "job {{job_id}}'s last checkpoint took {{value}} s to write"
      description: "slow storage; a preemption grace period may not cover a checkpoint"

  # ---- System -------------------------------------------------------------------------
  - name: GpuTooHot
    signal: gpu.temp_c
    condition: {threshold_above: 87}
    for: 5m
    severity: warning
    labels: {layer: system}
    annotations:
      summary: "GPU {{gpu}} on {{node}} is at {{value}} C"

  - name: GpuThermalThrottling
    signal: gpu.throttled
    condition: {threshold_above: 0}
    for: 15m
    severity: warning
    labels: {layer: system}
    annotations:
      summary: "GPU {{gpu}} on {{node}} has run throttled for 15 minutes"

  - name: GpuXidError
    signal: gpu.xid_count
    condition: {increase_above: 0, window: 10m}
    for: 0s
    keep_firing_for: 20m
    severity: critical
    labels: {layer: system}
    annotations:
      summary: "GPU {{gpu}} on {{node}} reported {{value}} XID error(s) in 10 minutes"
      description: "see the node's kernel log for the XID code"

  - name: GpuEccUncorrectable
    signal: gpu.ecc_uncorrectable
    condition: {increase_above: 0, window: 10m}
    for: 0s
    keep_firing_for: 20m
    severity: critical
    labels: {layer: system}
    annotations:
      summary: "GPU {{gpu}} on {{node}} had {{value}} uncorrectable ECC error(s)"
      description: "the node is cordoned; drain it and reset or replace the GPU"
    action: {kind: cordon_node}

  - name: GpuTelemetryAbsent
    signal: gpu.temp_c
    condition: {absent_for: 5m}
    for: 0s
    severity: warning
    labels: {layer: system}
    annotations:
      summary: "no telemetry from GPU {{gpu}} on {{node}} for {{value}} s"

  - name: NodeHeartbeatLost
    signal: node.heartbeat_age_s
    condition: {threshold_above: 60}
    for: 1m
    severity: critical
    labels: {layer: system}
    annotations:
      summary: "node {{node}} last reported {{value}} s ago"

  - name: CheckpointDiskNearlyFull
    signal: node.disk_free_ratio
    condition: {threshold_below: 0.1}
    for: 5m
    severity: warning
    labels: {layer: system}
    annotations:
      summary: "{{path}} on {{node}} has {{value}} of its space free"
      description: "checkpoints written there will fail when it fills"

  # ---- Communication ------------------------------------------------------------------
  - name: LinkDown
    signal: link.down
    condition: {threshold_above: 0}
    for: 2m
    severity: critical
    labels: {layer: communication}
    annotations:
      summary: "link {{link}} on {{node}} is down"

  - name: LinkErrorsRising
    signal: link.errors
    condition: {rate_above: 0.1, window: 10m}
    for: 5m
    severity: warning
    labels: {layer: communication}
    annotations:
      summary: "link {{link}} on {{node}} counts {{value}} errors a second"

  # ---- Scheduling ---------------------------------------------------------------------
  - name: JobPendingTooLong
    signal: job.pending_ratio
    condition: {threshold_above: 4}
    for: 30m
    severity: info
    labels: {layer: scheduling}
    annotations:
      summary: "job {{job_id}} has waited {{value}}x the usual time in queue {{queue}}"
      description: "`trainyard job show {{job_id}}` gives the scheduler's reason"
)yaml";
  return kText;
}

}  // namespace trainyard::monitor
