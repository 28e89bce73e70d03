// `trainyard sim`: replays a trace through the production scheduler under several
// policies in one invocation and prints one row per policy.
//
//   trainyard sim --trace FORMAT:FILE [--cluster SPEC] --policies A,B,...
//                 [--load-factor X] [-o table|json] [--report DIR] [...]
//
// Trace formats: philly:FILE (cluster_job_log JSON), alibaba:FILE (openb pod list),
// csv:FILE (our format, docs/traces.md), synthetic:KEY=VALUE,... (generator knobs).
// Cluster: a YAML file, or philly-vcs:FILE, philly-machines:FILE,
// alibaba-nodes:FILE, synthetic:nodes=N,gpus=G[,type=T][,leaf=K]; by default it is
// derived from the trace's own node list next to the trace file.
//
// Exit statuses: 0 ran, 1 a simulation failed, 2 bad arguments or input.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>
#include <vector>

namespace trainyard::cli {

struct SimCommandOptions {
  std::string trace;
  std::string cluster;
  std::string policies = "trainyard";
  double load_factor = 1.0;
  double node_fraction = 1.0;    // keep this share of the cluster's nodes (ThinCluster)
  std::string output = "table";  // table | json
  std::string report_dir;
  uint64_t seed = 1;
  double gpu_mtbf_hours = 0;
  double pressure_per_hour = 0;  // injected high-priority jobs per hour; 0: none
  int32_t pressure_gpus = 8;
  std::string pressure_duration = "1h";
  std::string pressure_priority = "production";
  std::string pressure_queue;    // TENANT/QUEUE; empty: the cluster's first queue
  double time_limit_factor = 0;  // 0: trace jobs without a limit keep none
  std::string checkpoint_interval = "30m";
  std::string schedule_interval = "10s";
  std::string preempt_grace = "60s";
  std::string restart_overhead = "1m";
  bool gpu_sharing = true;  // shares of one GPU as the trace asks; false: whole GPUs
  bool progress = true;     // a progress bar when standard error is a terminal
  double fill = 0;          // > 0: the fill experiment to this demand (sim::FillOptions::ratio)
};

int RunSim(const SimCommandOptions& options, std::ostream& out, std::ostream& err);

void AddSimCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
