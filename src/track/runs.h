// Runs: every job is a run, its experiment record. A RunRecord is assembled from the job
// (spec, attempts, checkpoint), the params the job logged and the summaries of its
// metric series; it is a view, rebuilt on each read, never stored on its own.
//
//   code         the spec's experiment.code: a git commit id captured at submit
//                (ending "-dirty" when the tree had uncommitted changes), or "none"
//   data         experiment.data_version
//   params       experiment.params, overlaid by params the job logged (logged win)
//   environment  "sha256:<hex>" over what the job declares about its environment:
//                the program it runs, its non-secret environment variables, and the
//                env.* params the SDK logs (interpreter version, installed packages),
//                and the container image (its digest once a node has resolved it)
//   metrics      per key, aggregated over ranks: the lowest rank's series, except
//                per-rank rates (tokens_per_s, samples_per_s) whose last values are
//                summed over ranks
// Lineage: one run per job across retries and preemptions; `attempts` counts them and
// the series hold one history keyed by step (series_store.h).
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.h"
#include "track/chrome_trace.h"
#include "track/mfu.h"
#include "track/run_filter.h"
#include "track/series_store.h"

namespace trainyard::track {

struct RunMetric {
  std::string key;
  int32_t ranks = 0;  // how many ranks logged it
  int64_t count = 0;  // points, all ranks
  int64_t nan_count = 0;
  int64_t last_step = 0;
  int64_t last_time_ms = 0;
  double last = 0;
  double min = 0;  // of the series the value comes from; NaN when it has no number
  double max = 0;
};

struct RunRecord {
  JobId id = 0;
  std::string name;
  std::string experiment;  // the spec's experiment.name, else the job name
  std::string tenant;
  std::string queue;
  std::string user;
  std::string state;
  Timestamp submit_time{};
  std::optional<Timestamp> start_time;  // of the first attempt
  std::optional<Timestamp> end_time;    // of the last attempt, once the job is over
  std::string code;
  std::string data_version;
  std::string environment;
  std::string image;         // the spec's image reference; "" for host processes
  std::string image_digest;  // what its latest attempt ran: "sha256:<hex>"
  std::vector<std::string> command;
  int32_t replicas = 0;
  int64_t gpus_per_replica = 0;
  std::string gpu_type;
  std::vector<std::string> nodes;  // every node any attempt ran on, sorted
  int32_t attempts = 0;
  std::map<std::string, std::string> params;
  std::map<std::string, RunMetric> metrics;
  std::map<std::string, std::string> labels;
  std::optional<CheckpointInfo> checkpoint;
};

// Keys whose values are per rank and add up to the job's (docs/metrics-file.md).
bool IsPerRankRate(std::string_view key);
// Whether a lower value of the metric is better (loss, error, perplexity, step time).
bool LowerIsBetter(std::string_view key);

RunRecord BuildRun(const Job& job, const std::map<std::string, std::string>& logged_params,
                   const std::vector<SeriesInfo>& series);
// `image_digest`: what the image resolved to (stands for spec.image once known).
std::string EnvironmentHash(const JobSpec& spec, const std::map<std::string, std::string>& params,
                            const std::string& image_digest = "");

FilterableRun Filterable(const RunRecord& run);
// The attribute names Filterable fills in (for RunFilterOptions::known_attributes, so
// that a misspelt attribute in a filter is an error rather than matching nothing).
const std::vector<std::string>& RunAttributeNames();

// Model FLOPs utilisation of the run now: its tokens_per_s (summed over ranks) times
// model_flops_per_token (or 6 x num_params), metrics or params, against the peak of
// its GPU type at its precision (param "precision" or "dtype": bf16 unless said).
// nullopt when the run reports no throughput or no model size, or the GPU type is
// not in the table.
std::optional<Mfu> RunMfu(const RunRecord& run);

// JSON faces (docs/api.md): a summary for lists, the whole record, and a comparison
// of several runs (params side by side with which differ; metrics last and best).
nlohmann::ordered_json RenderRunSummary(const RunRecord& run);
nlohmann::ordered_json RenderRun(const RunRecord& run);
nlohmann::ordered_json CompareRuns(const std::vector<RunRecord>& runs);
// The spans a job's trace draws from its series: per-rank steps from step_time_s (a
// point at step s, time t, value d seconds is the step that ran from t - d to t) and
// checkpoint writes from checkpoint/write_s; each is given the attempt that was open
// at its time. At most the last `max_steps` steps of each rank.
struct TraceSpans {
  std::vector<StepSpan> steps;
  std::vector<CheckpointSpan> checkpoints;
};
Result<TraceSpans> TraceSpansFromSeries(SeriesStore& series, const Job& job, int64_t max_steps);

nlohmann::ordered_json RenderBuckets(const std::vector<Bucket>& buckets);
// A number as JSON: finite values as numbers, NaN and infinities as the strings
// "NaN", "Infinity", "-Infinity" (as the metrics file spells them).
nlohmann::ordered_json JsonNumber(double v);

}  // namespace trainyard::track
