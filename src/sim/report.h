// Simulator reports: the comparison table, the stable JSON schema, per-job CSV and
// plots (utilisation and queue length over time, JCT CDF) per policy.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/sim.h"

namespace trainyard::sim {

// One row per policy, aligned columns, for a terminal.
std::string RenderTable(const std::vector<SimSummary>& rows);

// The stable schema scripts rely on: policy, jobs, completed, avg_jct_s, p50_jct_s,
// p95_jct_s, p99_jct_s, avg_queue_s, p99_queue_s, makespan_s, gpu_util,
// unallocated_gpu_hours_waiting, preemptions, lost_gpu_hours, ettr, never_started,
// jain_fairness; plus tenants (share vs guarantee), events and passes. Wall time and
// memory are not in it: the same input gives the same JSON.
nlohmann::ordered_json SummaryJson(const SimSummary& s);

// Writes DIR/jobs-POLICY.csv for each result, and DIR/utilisation.png,
// DIR/queue-length.png and DIR/jct-cdf.png comparing the policies.
Status WriteReport(const std::string& dir, const std::vector<SimResult>& results);

// The fill experiment (FillOptions): its table, its JSON (policy, jobs, placed, failed,
// capacity_gpus, arrived_gpus, first_failure_arrived, unallocated_gpus_at_capacity,
// unallocated_gpus_end, gpu_alloc_ratio_end, passes) and its report: DIR/fill-POLICY.csv
// (each arrival: the job, whether it was placed, demand arrived and GPUs allocated) and
// DIR/fill.png (free GPUs against demand arrived, both as % of the cluster's GPUs, one line per
// policy).
std::string RenderFillTable(const std::vector<FillSummary>& rows);
nlohmann::ordered_json FillSummaryJson(const FillSummary& s);
Status WriteFillReport(const std::string& dir, const std::vector<FillResult>& results);

}  // namespace trainyard::sim
