// Trace readers and the synthetic trace generator: every source of jobs for the
// simulator ends up as one Trace (trace.h).
//
//   Microsoft Philly  cluster_job_log JSON       ParsePhillyJobs / ReadPhillyJobs
//   Alibaba PAI       openb pod list CSV         ParseAlibabaPods / ReadAlibabaPods
//   Trainyard         our own CSV trace format   ParseTrainyardCsv / ReadTrainyardCsv,
//                                                WriteTrainyardCsv
//   synthetic         seeded generator           Synthesize
//
// docs/traces.md describes each format, every mapping decision (how a Philly job
// becomes a gang, how an Alibaba QoS becomes a priority class, ...) and the
// generator's knobs.
//
// Errors and quirks. Input that breaks a format (not JSON, a missing column, a
// negative GPU count, a malformed timestamp) is an error `FILE:LINE: field: message`
// that names the value and what would be valid; reading stops at the first one.
// Known quirks of real traces (a Philly attempt with no start time, an Alibaba pod
// that was never scheduled, ...) are skipped or adjusted, each with a line in
// Trace::warnings; with `strict` they are errors instead. Jobs left out by choice
// (CPU-only jobs when not kept) are listed in warnings in both modes.
//
// Every Parse* function is pure: text in, Trace out. Read* functions read the file
// and parse it. Thread-safety: no shared state; call from any thread.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sim/trace.h"

namespace trainyard::sim {

// The whole file; an error names the path and why it could not be read.
Result<std::string> ReadTextFile(const std::string& path);

// How a job of `gpus` GPUs becomes a gang when the trace gives only a total:
// {replicas, gpus_per_replica}. Up to `max_gpus_per_replica` GPUs: one replica
// holding them all. Beyond it: replicas of the largest of 8, 4, 2 that divides
// `gpus` and fits in `max_gpus_per_replica` (16 -> 2x8, 12 -> 3x4, 20 -> 5x4,
// 24 -> 3x8); for an odd total, of its largest divisor that fits (9 -> 3x3,
// 11 -> 11x1). 0 GPUs: {1, 0}.
// REQUIRES: gpus >= 0, max_gpus_per_replica >= 1.
std::pair<int32_t, int32_t> GangShape(int64_t gpus, int32_t max_gpus_per_replica);

// ---- Microsoft Philly: cluster_job_log JSON -------------------------------------

struct PhillyReadOptions {
  bool strict = false;                // quirks are errors instead of warnings
  int32_t gpus_per_node = 8;          // the largest replica of a gang (GangShape)
  bool keep_cpu_jobs = false;         // jobs whose attempts hold no GPU
  size_t max_warnings_per_kind = 20;  // then one summary line per kind
};

// A JSON list of jobs, as `cluster_job_log` of the Philly trace or the
// `analysis/jobs.json` subset of its forks: `id` or `jobid`, `submitted_time`,
// `attempts` [{start_time, end_time, detail: [{ip, gpus}]}], and optionally
// `num_gpus` (else counted from the first attempt's detail), `vc` (the tenant and
// queue), anything else (ignored). Rows may come in any order; the Trace is sorted
// by submit time, which counts from the earliest submit in the file. Duration = the
// sum of the attempts' run times. `file` is used only in messages.
Result<Trace> ParsePhillyJobs(std::string_view text, std::string_view file,
                              const PhillyReadOptions& options = {});
Result<Trace> ReadPhillyJobs(const std::string& path, const PhillyReadOptions& options = {});

// ---- Alibaba PAI: openb pod list CSV (cluster-trace-gpu-v2023) -------------------

struct AlibabaReadOptions {
  bool strict = false;                // quirks are errors instead of warnings
  bool keep_cpu_pods = true;          // pods with num_gpu = 0 (they hold CPUs and memory)
  size_t max_warnings_per_kind = 20;  // then one summary line per kind
};

// Columns name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos,
// pod_phase, creation_time, deletion_time, scheduled_time; one single-replica job
// per pod. QoS LS and Guaranteed -> priority class "production", Burstable ->
// "normal", BE -> "best-effort".
Result<Trace> ParseAlibabaPods(std::string_view text, std::string_view file,
                               const AlibabaReadOptions& options = {});
Result<Trace> ReadAlibabaPods(const std::string& path, const AlibabaReadOptions& options = {});

// ---- Trainyard CSV trace ---------------------------------------------------------

// Required columns, in the order the writer puts them.
const std::vector<std::string_view>& TrainyardCsvColumns();
// Optional columns, in the order the writer puts them after the required ones.
const std::vector<std::string_view>& TrainyardCsvOptionalColumns();

// Reads our own CSV trace (docs/traces.md). Every bad cell is an error: this
// format has no quirks. Rows may come in any order; the Trace is sorted by submit
// time (stable).
Result<Trace> ParseTrainyardCsv(std::string_view text, std::string_view file);
Result<Trace> ReadTrainyardCsv(const std::string& path);

// Writes `trace` in our CSV format, every column, one job per line, in the order of
// trace.jobs. ParseTrainyardCsv reads back jobs equal to these (round trip) when the
// names are valid names and the jobs sorted by submit, as every reader and Synthesize
// make them; a cell that needs it is quoted, so nothing breaks the columns.
void WriteTrainyardCsv(const Trace& trace, std::ostream& out);
Status WriteTrainyardCsvFile(const Trace& trace, const std::string& path);

// ---- Synthetic traces ------------------------------------------------------------

enum class DurationShape {
  kLognormal,    // median `duration_median`, log-space spread `duration_sigma`
  kExponential,  // mean `duration_mean`
};

struct SyntheticOptions {
  uint64_t seed = 1;
  int64_t jobs = 1000;
  double arrivals_per_hour = 60;  // Poisson process: exponential gaps; first job at 0
  // Total GPUs of a job -> relative weight (weights need not sum to 1). A total above
  // gpus_per_node becomes a gang by GangShape.
  std::vector<std::pair<int32_t, double>> size_mix = {
      {1, 0.6},   {2, 0.1},   {4, 0.1},     {8, 0.12},    {16, 0.04},
      {32, 0.02}, {64, 0.01}, {128, 0.005}, {256, 0.003}, {512, 0.002}};
  int32_t gpus_per_node = 8;
  DurationShape duration_shape = DurationShape::kLognormal;
  Duration duration_median{3'600'000};       // lognormal
  double duration_sigma = 1.5;               // lognormal
  Duration duration_mean{3'600'000};         // exponential
  Duration min_duration{60'000};             // draws are clamped into [min, max] and
  Duration max_duration{30 * 86'400'000LL};  // rounded to whole seconds
  // Tenant name -> weight; each job's queue is "default" of its tenant.
  std::vector<std::pair<std::string, double>> tenants = {{"default", 1.0}};
  // Priority class name -> weight.
  std::vector<std::pair<std::string, double>> priorities = {{"normal", 1.0}};
  double time_limit_factor = 0;     // limit = duration x factor (>= 1); 0: no limit
  Duration checkpoint_interval{0};  // every job's; 0: the simulation's default
  std::string gpu_type;             // every job's; empty: any
  TopologySpec gang_topology;       // for jobs of more than one replica
};

// Checks every knob: positive counts and rates, weights >= 0 with a positive sum,
// sizes in 1..kMaxTotalGpus, valid names, min <= max duration, factor 0 or >= 1.
// Messages name the knob, the value and what would be valid.
Status ValidateSyntheticOptions(const SyntheticOptions& options);

// Draws `options.jobs` jobs from std::mt19937_64 seeded with `options.seed`, with
// our own transforms of its raw output (no std::*_distribution), so a seed gives the
// same trace with every standard library. Job ids are "1", "2", ...
// REQUIRES: ValidateSyntheticOptions(options).ok().
Trace Synthesize(const SyntheticOptions& options);

}  // namespace trainyard::sim
