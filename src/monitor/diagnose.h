// Diagnosis of one job: walks the troubleshooting order system -> communication ->
// training over the job's signals (the same SignalSource the alert engine reads) and
// its placement, and says what it found, with the evidence and the next step.
//
// The walk, in order (docs/diagnose.md has each check's signal and threshold):
//   system:        nodes of the job lost (heartbeat age), GPU errors (XID, uncorrectable
//                  ECC increase), thermal throttling / temperature, a hang (no progress;
//                  names the rank whose GPU idles while the others' are busy), a
//                  data-loading stall (data wait a large part of the step, or the job's
//                  GPUs idle while it still steps), a straggler (one rank's step time
//                  well above the others', named with its node, GPU and what is wrong
//                  with that GPU)
//   communication: NVLink/IB links down or erroring on the job's nodes; every rank
//                  slower than the job's own earlier step time with GPUs busy and no
//                  straggler or data stall to explain it (all-reduce bound), with how
//                  many leaves the gang spans
//   training:      loss NaN/Inf (or a long run of non-finite grad norms), grad-norm
//                  spike, loss not falling, checkpoint overdue
// Every step of the walk is reported (found / ok / no data); `findings` holds what was
// found, most fundamental layer first: the first finding is the verdict. Only series
// of the job (job_id) and of its placement's nodes and GPUs are read. A firing alert in
// JobContext.alerts is added to the evidence of the first finding about its node (or,
// for an alert that names no node, the first job-wide finding).
//
// Pure code: no I/O, no clock (`now` is passed). Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/units.h"
#include "monitor/engine.h"

namespace trainyard::monitor {

// Where one rank of the job runs.
struct RankPlacement {
  int32_t rank = 0;
  std::string node;
  std::vector<int> gpus;  // GPU indices on the node
};

// What the server knows about the job besides its signals.
struct JobContext {
  int64_t job_id = 0;
  std::string tenant;
  std::string queue;
  std::string state;                             // "running", "pending", ...
  std::vector<RankPlacement> ranks;              // of the open attempt; empty when none
  std::map<std::string, std::string> node_leaf;  // node -> its leaf switch
  Duration checkpoint_interval{0};               // 0: the job checkpoints on demand only
  std::vector<Alert> alerts;  // firing alerts about the job or its nodes (for evidence)
  // Why each of its ended attempts ended, oldest first ("" for one still open).
  std::vector<std::string> attempt_messages;
};

struct DiagnoseOptions {
  // The span of recent samples the walk reads.
  Duration window = std::chrono::minutes(5);
  // The span before `window` that "the job's own earlier step time" is taken from.
  Duration baseline = std::chrono::minutes(30);
  double idle_util_pct = 10;        // GPU utilisation below this is idle
  double straggler_ratio = 1.5;     // rank step time / job median above this: straggler
  double slowdown_ratio = 1.5;      // job step time / its baseline above this: slow
  double hot_temp_c = 85;           // GPU temperature at or above this: too hot
  double data_wait_fraction = 0.3;  // data wait / step time above this: input-bound
  Duration heartbeat_lost{std::chrono::seconds(15)};
  Duration no_progress{std::chrono::minutes(2)};  // progress age above this: stuck
};

enum class Layer { kSystem, kCommunication, kTraining };
std::string_view LayerName(Layer l);  // "system", "communication", "training"

// One step of the walk.
struct Check {
  Layer layer = Layer::kSystem;
  std::string name;    // "gpu_errors", "thermal", "straggler", ... (docs/diagnose.md)
  std::string result;  // "found" | "ok" | "no data"
  std::string detail;  // one line: what was looked at, e.g. "4 GPUs, no XID or ECC increase"
  bool operator==(const Check&) const = default;
};

struct Finding {
  Layer layer = Layer::kSystem;
  // Machine-readable cause: node_lost, gpu_error, thermal, hang, data_stall, straggler,
  // link_down, comm_bottleneck, loss_nan, grad_spike, loss_flat, checkpoint_overdue.
  std::string cause;
  std::string summary;                // one sentence, names the node/GPU/rank when known
  std::string node;                   // empty when the cause is not one node's
  std::string gpu;                    // GPU index on `node`, empty when not one GPU's
  int32_t rank = -1;                  // -1 when not one rank's
  std::vector<std::string> evidence;  // the numbers behind it, one per line
  std::string next_step;              // what to do, one or two sentences
  bool operator==(const Finding&) const = default;
};

struct Diagnosis {
  int64_t job_id = 0;
  Timestamp at;
  std::vector<Check> checks;      // every step walked, in order
  std::vector<Finding> findings;  // most fundamental layer first; empty: nothing found
  bool found() const { return !findings.empty(); }
};

Diagnosis Diagnose(const JobContext& job, const SignalSource& signals, Timestamp now,
                   const DiagnoseOptions& options = {});

// The diagnosis as JSON text (the API's and `diagnose -o json`'s form), compact:
// {"job_id", "at" (RFC 3339), "found", "verdict" (the first finding or null),
//  "findings": [{"layer", "cause", "summary", "node", "gpu", "rank", "evidence",
//  "next_step"}], "checks": [{"layer", "name", "result", "detail"}]}.
// As in Finding: node and gpu are "" and rank is -1 when the finding is not one's.
std::string DiagnosisJson(const Diagnosis& d);

// The diagnosis for people: the verdict, its evidence and next step, then the walk.
std::string RenderDiagnosis(const Diagnosis& d);

}  // namespace trainyard::monitor
