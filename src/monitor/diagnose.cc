#include "monitor/diagnose.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "core/job.h"
#include "monitor/series_math.h"
#include "monitor/webhook.h"  // FormatRfc3339

namespace trainyard::monitor {
namespace {

using Json = nlohmann::ordered_json;
using SeriesMap = std::map<Labels, std::vector<Sample>>;
using GpuId = std::pair<std::string, int>;  // node, GPU index on it

// Thresholds that are not options (docs/diagnose.md lists them with the options').
constexpr double kGradSpikeZ = 6;              // grad_spike: z-score of the latest grad norm
constexpr size_t kGradSpikeRecent = 30;        // grad_spike: the points looked at for a spike
constexpr int kGradSpikeMinPoints = 10;        // grad_spike: grad norms needed before the latest
constexpr int kLossFlatMinPoints = 20;         // loss_flat: finite losses needed in the window
constexpr double kLossFlatMinDrop = 0.01;      // loss_flat: the loss must fall by more than this
constexpr double kCheckpointOverdueRatio = 2;  // checkpoint: age / interval above this
// loss_nan: with fp16 loss scaling an infinite grad norm on a skipped step is normal
// (docs/alerts.md, LossNotFinite); only a run of this many at the end counts.
constexpr int kNonFiniteGradRun = 10;

constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr std::string_view kFound = "found";
constexpr std::string_view kOk = "ok";
constexpr std::string_view kNoData = "no data";

// ---- Text -----------------------------------------------------------------------------

// A number for people: three significant digits, whole numbers from 100 up.
std::string Num(double v) {
  if (!std::isfinite(v) || v == 0) return FormatValue(v);
  if (std::abs(v) >= 100) return FormatValue(std::round(v));
  const double scale = std::pow(10.0, 2 - std::floor(std::log10(std::abs(v))));
  return FormatValue(std::round(v * scale) / scale);
}

std::string Pct(double v) { return Num(v) + "%"; }
std::string Celsius(double v) { return Num(v) + "°C"; }
// A span of seconds read from a signal, to the second: "47s", "6m5s".
std::string Age(double seconds) {
  if (!std::isfinite(seconds)) return FormatValue(seconds) + "s";
  return FormatDuration(std::chrono::seconds(std::llround(seconds)));
}
// "0.98-1.02", or one number when low == high.
std::string Range(double low, double high) {
  return low == high ? Num(low) : Num(low) + "-" + Num(high);
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep = ", ") {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

template <typename T>
std::vector<std::string> Strings(const T& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    if constexpr (std::is_convertible_v<decltype(v), std::string>) {
      out.push_back(v);
    } else {
      out.push_back(std::to_string(v));
    }
  }
  return out;
}

// "GPU 3" / "GPUs 1, 3"; "rank 2" / "ranks 2, 3".
template <typename T>
std::string Counted(std::string_view one, std::string_view many, const T& values) {
  return std::string(values.size() == 1 ? one : many) + " " + Join(Strings(values));
}

std::string Plural(size_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

std::optional<int> ParseInt(const std::string& s) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// ---- Series arithmetic ----------------------------------------------------------------

std::vector<double> Finite(const std::vector<Sample>& samples) {
  std::vector<double> out;
  for (const Sample& s : samples) {
    if (std::isfinite(s.value)) out.push_back(s.value);
  }
  return out;
}

// REQUIRES: !values.empty()
double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Least-squares slope of the finite samples, per second. REQUIRES: two finite samples.
double Slope(const std::vector<Sample>& samples) {
  double n = 0, st = 0, sv = 0, stt = 0, stv = 0;
  const Timestamp t0 = samples.front().time;
  for (const Sample& s : samples) {
    if (!std::isfinite(s.value)) continue;
    const double t = Seconds(s.time - t0);
    n += 1;
    st += t;
    sv += s.value;
    stt += t * t;
    stv += t * s.value;
  }
  const double denominator = n * stt - st * st;
  return denominator == 0 ? 0 : (n * stv - st * sv) / denominator;
}

// ---- The walk -------------------------------------------------------------------------

// What one GPU of the job reports in the window.
// A GPU this many points below the mean utilisation of the job's other GPUs is slow.
constexpr double kUtilGapPct = 15;

struct GpuTelemetry {
  std::optional<double> util, temp_c, throttled;     // the latest samples
  std::optional<double> xid_increase, ecc_increase;  // set when the counter has a series
};

// The job-wide GPU utilisation and where it comes from.
struct JobUtil {
  double pct = 0;
  std::string from;  // "job.gpu_util", "mean gpu.util of 8 GPUs"
};

class Walk {
 public:
  Walk(const JobContext& job, const SignalSource& source, Timestamp now,
       const DiagnoseOptions& options)
      : job_(job),
        source_(source),
        now_(now),
        options_(options),
        job_id_(std::to_string(job.job_id)),
        window_from_(now - options.window),
        baseline_from_(now - options.window - options.baseline) {
    for (const RankPlacement& r : job.ranks) {
      nodes_.insert(r.node);
      ranks_[r.rank] = &r;
      for (int gpu : r.gpus) rank_of_gpu_.emplace(GpuId{r.node, gpu}, r.rank);
    }
  }

  Diagnosis Run() {
    ReadGpus();
    NodeLost();
    OutOfMemory();
    GpuErrors();
    Thermal();
    Hang();
    DataStall();
    Straggler();
    Links();
    CommBottleneck();
    LossNan();
    GradSpike();
    LossFlat();
    Checkpoint();
    AttachAlerts();
    Diagnosis d;
    d.job_id = job_.job_id;
    d.at = now_;
    d.checks = std::move(checks_);
    d.findings = std::move(findings_);
    return d;
  }

 private:
  // ---- Reading ----

  // The series of `signal` over [from, now] that are the job's: job signals by job_id,
  // GPU signals by the job's GPUs, other node signals by the job's nodes.
  SeriesMap Read(const std::string& signal, Timestamp from) const {
    const SignalInfo* info = FindSignal(signal);
    TY_CHECK(info != nullptr);
    auto has = [&](std::string_view label) {
      return std::find(info->labels.begin(), info->labels.end(), label) != info->labels.end();
    };
    SeriesMap series = ReadSeries(source_, signal, from, now_);
    std::erase_if(series, [&](const auto& kv) {
      const Labels& labels = kv.first;
      if (kv.second.empty()) return true;
      if (has("job_id")) return Label(labels, "job_id") != job_id_;
      if (has("gpu")) {
        auto gpu = ParseInt(Label(labels, "gpu"));
        return !gpu || !rank_of_gpu_.count(GpuId{Label(labels, "node"), *gpu});
      }
      return !nodes_.count(Label(labels, "node"));
    });
    return series;
  }

  // The job's samples of a job-wide signal over [from, now], its series merged, in
  // time order.
  std::vector<Sample> JobSamples(const std::string& signal, Timestamp from) const {
    std::vector<Sample> out;
    for (const auto& [labels, samples] : Read(signal, from)) {
      out.insert(out.end(), samples.begin(), samples.end());
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Sample& a, const Sample& b) { return a.time < b.time; });
    return out;
  }

  std::optional<double> JobLatest(const std::string& signal) const {
    std::vector<Sample> samples = JobSamples(signal, window_from_);
    if (samples.empty()) return std::nullopt;
    return samples.back().value;
  }

  void ReadGpus() {
    auto each = [&](const std::string& signal, auto set) {
      for (const auto& [labels, samples] : Read(signal, window_from_)) {
        set(gpus_[GpuId{Label(labels, "node"), *ParseInt(Label(labels, "gpu"))}], samples);
      }
    };
    each("gpu.util", [](GpuTelemetry& t, const auto& s) { t.util = s.back().value; });
    each("gpu.temp_c", [](GpuTelemetry& t, const auto& s) { t.temp_c = s.back().value; });
    each("gpu.throttled", [](GpuTelemetry& t, const auto& s) { t.throttled = s.back().value; });
    auto increase = [](const std::vector<Sample>& s) {
      auto inc = CounterIncrease(s);
      return inc ? inc->amount : 0.0;
    };
    each("gpu.xid_count", [&](GpuTelemetry& t, const auto& s) { t.xid_increase = increase(s); });
    each("gpu.ecc_uncorrectable",
         [&](GpuTelemetry& t, const auto& s) { t.ecc_increase = increase(s); });
  }

  // job.gpu_util's latest sample; without it, the mean of the job's GPUs' latest
  // gpu.util. nullopt when neither has data.
  std::optional<JobUtil> JobGpuUtil() const {
    if (auto util = JobLatest("job.gpu_util"); util && std::isfinite(*util)) {
      return JobUtil{*util, "job.gpu_util"};
    }
    double sum = 0;
    int n = 0;
    for (const auto& [id, t] : gpus_) {
      if (t.util && std::isfinite(*t.util)) {
        sum += *t.util;
        ++n;
      }
    }
    if (n == 0) return std::nullopt;
    return JobUtil{sum / n, "mean gpu.util of " + Plural(n, "GPU")};
  }

  // ---- Naming ----

  bool Hot(const GpuTelemetry& t) const { return t.temp_c && *t.temp_c >= options_.hot_temp_c; }
  static bool Throttled(const GpuTelemetry& t) { return t.throttled && *t.throttled >= 1; }
  bool Idle(const GpuTelemetry& t) const { return t.util && *t.util < options_.idle_util_pct; }

  std::string Window() const { return "the last " + FormatDuration(options_.window); }

  // "GPU 3 on n2 (rank 7)".
  std::string GpuName(const GpuId& id) const {
    std::string out = "GPU " + std::to_string(id.second) + " on " + id.first;
    if (auto it = rank_of_gpu_.find(id); it != rank_of_gpu_.end()) {
      out += " (rank " + std::to_string(it->second) + ")";
    }
    return out;
  }

  std::set<int32_t> RanksOn(const std::string& node) const {
    std::set<int32_t> out;
    for (const RankPlacement& r : job_.ranks) {
      if (r.node == node) out.insert(r.rank);
    }
    return out;
  }

  // "+2 XID errors", "+1 uncorrectable ECC errors": the GPU's error increases.
  static std::vector<std::string> ErrorCounts(const GpuTelemetry& t) {
    std::vector<std::string> out;
    if (t.xid_increase.value_or(0) > 0) out.push_back("+" + Num(*t.xid_increase) + " XID errors");
    if (t.ecc_increase.value_or(0) > 0) {
      out.push_back("+" + Num(*t.ecc_increase) + " uncorrectable ECC errors");
    }
    return out;
  }

  // The readings of one GPU: "91°C, throttled, util 97%, +2 XID errors".
  std::string Readings(const GpuId& id) const {
    auto it = gpus_.find(id);
    if (it == gpus_.end()) return "no telemetry";
    const GpuTelemetry& t = it->second;
    std::vector<std::string> parts;
    if (t.temp_c) parts.push_back(Celsius(*t.temp_c));
    if (t.throttled) parts.push_back(Throttled(t) ? "throttled" : "not throttled");
    if (t.util) parts.push_back("util " + Pct(*t.util));
    if (t.xid_increase || t.ecc_increase) {
      std::vector<std::string> errors = ErrorCounts(t);
      parts.push_back(errors.empty() ? "no XID or ECC increase" : Join(errors));
    }
    return parts.empty() ? "no telemetry" : Join(parts);
  }

  // What is wrong with one GPU, from its telemetry; empty when nothing visible.
  std::vector<std::string> Faults(const GpuId& id) const {
    std::vector<std::string> out;
    auto it = gpus_.find(id);
    if (it == gpus_.end()) return out;
    const GpuTelemetry& t = it->second;
    if (Throttled(t)) out.push_back("throttled");
    if (Hot(t)) out.push_back("running at " + Celsius(*t.temp_c));
    for (std::string& e : ErrorCounts(t)) out.push_back(std::move(e));
    // Busy well below the job's other GPUs: lower clocks (a slow or degraded GPU).
    if (t.util) {
      double sum = 0;
      int n = 0;
      for (const auto& [other, u] : gpus_) {
        if (other == id || !u.util) continue;
        sum += *u.util;
        ++n;
      }
      if (n > 0 && *t.util < sum / n - kUtilGapPct) {
        out.push_back("at " + Pct(*t.util) + " utilisation against " + Pct(sum / n) +
                      " on the job's other GPUs");
      }
    }
    return out;
  }

  // Why a node check has nothing to read.
  std::string NoNodeData(const std::string& what) const {
    if (job_.ranks.empty()) return "the job runs on no node (state " + job_.state + ")";
    return "no " + what + " for the job's " + Plural(nodes_.size(), "node");
  }
  std::string NoGpuData(const std::string& what) const {
    if (job_.ranks.empty()) return "the job runs on no GPU (state " + job_.state + ")";
    return "no " + what + " for the job's " + Plural(rank_of_gpu_.size(), "GPU");
  }

  std::string MoveOff(const std::string& node) const {
    return "Cordon " + node + " and move the job off it: `trainyard drain " + node +
           "` cordons the node and requeues the jobs on it, and job " + job_id_ +
           " resumes from its latest checkpoint on other nodes.";
  }

  // ---- Recording ----

  static Finding NewFinding(Layer layer, std::string cause) {
    Finding f;
    f.layer = layer;
    f.cause = std::move(cause);
    return f;
  }

  void Record(Layer layer, std::string name, std::string_view result, std::string detail) {
    checks_.push_back(Check{layer, std::move(name), std::string(result), std::move(detail)});
  }

  // Records the check as found (with `found`'s findings) or ok.
  void Conclude(Layer layer, std::string name, std::vector<Finding> found, std::string detail) {
    Record(layer, std::move(name), found.empty() ? kOk : kFound, std::move(detail));
    for (Finding& f : found) findings_.push_back(std::move(f));
  }

  // ---- System layer ----

  // An attempt whose rank the kernel killed for outgrowing its replica's memory limit
  // (the agent reports it as "OOMKilled: memory limit <limit>", docs/execution.md).
  void OutOfMemory() {
    const auto& messages = job_.attempt_messages;
    std::vector<Finding> found;
    for (size_t i = 0; i < messages.size(); ++i) {
      const size_t at = messages[i].find(kOomKilled);
      if (at == std::string::npos) continue;
      Finding f = NewFinding(Layer::kSystem, "oom_killed");
      f.summary = "attempt " + std::to_string(i + 1) + " ended when the kernel killed " +
                  messages[i].substr(0, at == 0 ? 0 : at - 1) + (at == 0 ? "a rank" : "") +
                  " for using more memory than its replica may (" + messages[i].substr(at) + ")";
      f.evidence.push_back("attempt " + std::to_string(i + 1) + ": " + messages[i]);
      f.next_step =
          "Raise resources.memory in the job spec (a replica's ranks share it), or make the "
          "job use less: a smaller batch, fewer data loader workers. `trainyard jobs show " +
          job_id_ + "` lists every attempt's reason.";
      found.push_back(std::move(f));
    }
    if (messages.empty())
      return Record(Layer::kSystem, "out_of_memory", kOk, "no attempt has ended");
    std::string detail = Plural(messages.size(), "attempt");
    if (found.empty()) detail += ", none ended by the OOM killer";
    Conclude(Layer::kSystem, "out_of_memory", std::move(found), std::move(detail));
  }

  void NodeLost() {
    const SeriesMap series = Read("node.heartbeat_age_s", window_from_);
    if (series.empty()) {
      return Record(Layer::kSystem, "node_lost", kNoData, NoNodeData("node.heartbeat_age_s"));
    }
    const double lost_s = Seconds(options_.heartbeat_lost);
    std::map<std::string, double> age;  // node -> latest heartbeat age
    for (const auto& [labels, samples] : series) age[Label(labels, "node")] = samples.back().value;
    std::vector<Finding> found;
    std::vector<std::string> lost;
    double oldest_ok = 0;
    for (const auto& [node, seconds] : age) {
      if (!(seconds > lost_s)) {
        if (std::isfinite(seconds)) oldest_ok = std::max(oldest_ok, seconds);
        continue;
      }
      lost.push_back(node + " silent " + Age(seconds));
      Finding f = NewFinding(Layer::kSystem, "node_lost");
      f.node = node;
      const std::set<int32_t> ranks = RanksOn(node);
      f.summary = "node " + node + " is lost: its agent has not reported for " + Age(seconds) +
                  " (" + Counted("rank", "ranks", ranks) + " ran there)";
      f.evidence.push_back("node.heartbeat_age_s of " + node + ": " + Age(seconds) +
                           " (lost above " + FormatDuration(options_.heartbeat_lost) + ")");
      f.next_step = "Find out why " + node +
                    " stopped reporting (power, network, a crashed agent; `trainyard nodes` shows "
                    "its state). When the node is marked down the job is requeued and resumes "
                    "from its latest checkpoint; if it stays up but silent, `trainyard drain " +
                    node + "` moves the job off it.";
      found.push_back(std::move(f));
    }
    std::string detail = Plural(age.size(), "node");
    if (!lost.empty()) {
      detail += "; " + Join(lost) + " (lost above " + FormatDuration(options_.heartbeat_lost) + ")";
    } else {
      detail += ", heartbeat age at most " + Age(oldest_ok) + " (lost above " +
                FormatDuration(options_.heartbeat_lost) + ")";
    }
    if (age.size() < nodes_.size()) {
      std::vector<std::string> silent;
      for (const std::string& n : nodes_) {
        if (!age.count(n)) silent.push_back(n);
      }
      detail += "; no data for " + Join(silent);
    }
    Conclude(Layer::kSystem, "node_lost", std::move(found), std::move(detail));
  }

  void GpuErrors() {
    size_t with_data = 0;
    std::map<std::string, std::vector<GpuId>> bad;  // node -> GPUs with errors
    for (const auto& [id, t] : gpus_) {
      if (!t.xid_increase && !t.ecc_increase) continue;
      ++with_data;
      if (t.xid_increase.value_or(0) > 0 || t.ecc_increase.value_or(0) > 0) {
        bad[id.first].push_back(id);
      }
    }
    if (with_data == 0) {
      return Record(Layer::kSystem, "gpu_errors", kNoData,
                    NoGpuData("gpu.xid_count or gpu.ecc_uncorrectable"));
    }
    std::vector<Finding> found;
    std::vector<std::string> where;
    for (const auto& [node, ids] : bad) {
      Finding f = NewFinding(Layer::kSystem, "gpu_error");
      f.node = node;
      std::vector<int> indices;
      for (const GpuId& id : ids) {
        indices.push_back(id.second);
        const GpuTelemetry& t = gpus_.at(id);
        std::vector<std::string> what;
        if (t.xid_increase.value_or(0) > 0) {
          what.push_back("gpu.xid_count +" + Num(*t.xid_increase) + " (XID count increase)");
        }
        if (t.ecc_increase.value_or(0) > 0) {
          what.push_back("gpu.ecc_uncorrectable +" + Num(*t.ecc_increase) + " (ECC increase)");
        }
        f.evidence.push_back(node + " GPU " + std::to_string(id.second) + ": " + Join(what) +
                             " in " + Window());
      }
      if (ids.size() == 1) {
        f.gpu = std::to_string(ids[0].second);
        if (auto it = rank_of_gpu_.find(ids[0]); it != rank_of_gpu_.end()) f.rank = it->second;
        f.summary = GpuName(ids[0]) + " reports errors: " + Join(ErrorCounts(gpus_.at(ids[0])));
      } else {
        f.summary = Counted("GPU", "GPUs", indices) + " on " + node + " report XID or ECC errors";
      }
      f.summary += " in " + Window();
      f.next_step = MoveOff(node) + " Have the node checked (the XID code in its kernel log, " +
                    "`nvidia-smi -q -d ECC`) before `trainyard uncordon " + node + "`.";
      where.push_back(node + " " + Counted("GPU", "GPUs", indices));
      found.push_back(std::move(f));
    }
    std::string detail = Plural(with_data, "GPU") + ", ";
    detail += where.empty() ? "no XID or ECC increase in " + Window()
                            : "XID or ECC increase on " + Join(where, "; ");
    Conclude(Layer::kSystem, "gpu_errors", std::move(found), std::move(detail));
  }

  void Thermal() {
    size_t with_data = 0;
    std::optional<double> hottest;
    std::map<std::string, std::vector<GpuId>> bad;  // node -> hot or throttled GPUs
    for (const auto& [id, t] : gpus_) {
      if (!t.temp_c && !t.throttled) continue;
      ++with_data;
      if (t.temp_c && std::isfinite(*t.temp_c)) {
        hottest = std::max(hottest.value_or(*t.temp_c), *t.temp_c);
      }
      if (Hot(t) || Throttled(t)) bad[id.first].push_back(id);
    }
    if (with_data == 0) {
      return Record(Layer::kSystem, "thermal", kNoData, NoGpuData("gpu.temp_c or gpu.throttled"));
    }
    std::vector<Finding> found;
    std::vector<std::string> where;
    for (const auto& [node, ids] : bad) {
      Finding f = NewFinding(Layer::kSystem, "thermal");
      f.node = node;
      std::vector<int> indices;
      for (const GpuId& id : ids) {
        indices.push_back(id.second);
        const GpuTelemetry& t = gpus_.at(id);
        std::vector<std::string> what;
        if (t.temp_c) {
          what.push_back("gpu.temp_c " + Celsius(*t.temp_c) + " (hot at " +
                         Celsius(options_.hot_temp_c) + " and above)");
        }
        if (t.throttled) what.push_back("gpu.throttled " + FormatValue(*t.throttled));
        if (t.util) what.push_back("gpu.util " + Pct(*t.util));
        f.evidence.push_back(node + " GPU " + std::to_string(id.second) + ": " + Join(what));
      }
      if (ids.size() == 1) {
        const GpuTelemetry& t = gpus_.at(ids[0]);
        f.gpu = std::to_string(ids[0].second);
        if (auto it = rank_of_gpu_.find(ids[0]); it != rank_of_gpu_.end()) f.rank = it->second;
        f.summary = GpuName(ids[0]) + (Throttled(t) ? " is throttled" : " runs hot");
        if (t.temp_c) f.summary += " at " + Celsius(*t.temp_c);
      } else {
        f.summary = Counted("GPU", "GPUs", indices) + " on " + node + " are hot or throttled";
      }
      f.next_step = "Check " + node +
                    "'s cooling and power limits (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE` "
                    "shows the throttle reason): a throttled GPU slows every rank of a "
                    "synchronous job. If it persists, `trainyard drain " +
                    node + "` moves the job off it (it resumes from its latest checkpoint).";
      where.push_back(node + " " + Counted("GPU", "GPUs", indices));
      found.push_back(std::move(f));
    }
    std::string detail = Plural(with_data, "GPU");
    if (!where.empty()) {
      detail += "; hot or throttled: " + Join(where, "; ");
    } else {
      if (hottest) detail += ", hottest " + Celsius(*hottest);
      detail += ", none throttled (hot at " + Celsius(options_.hot_temp_c) + " and above)";
    }
    Conclude(Layer::kSystem, "thermal", std::move(found), std::move(detail));
  }

  void Hang() {
    const std::vector<Sample> progress = JobSamples("job.progress_age_s", window_from_);
    if (progress.empty()) {
      progressing_ = !JobSamples("job.step_time_s", window_from_).empty();
      return Record(Layer::kSystem, "hang", kNoData, "no job.progress_age_s in " + Window());
    }
    const double no_progress_s = Seconds(options_.no_progress);
    const double age = progress.back().value;
    const std::string limit = "(stuck above " + FormatDuration(options_.no_progress) + ")";
    progressing_ = !(age > no_progress_s);
    if (progressing_) {
      return Record(Layer::kSystem, "hang", kOk, "last step " + Age(age) + " ago " + limit);
    }
    Finding f = NewFinding(Layer::kSystem, "hang");
    f.summary = "the job hangs: no step for " + Age(age);
    f.evidence.push_back("job.progress_age_s: " + Age(age) + " " + limit);
    std::vector<GpuId> idle, busy;
    double low = 100, high = 0;
    for (const auto& [id, t] : gpus_) {
      if (!t.util || !std::isfinite(*t.util)) continue;
      (Idle(t) ? idle : busy).push_back(id);
      low = std::min(low, *t.util);
      high = std::max(high, *t.util);
    }
    const std::string idle_below = " (idle below " + Pct(options_.idle_util_pct) + ")";
    if (idle.empty() && busy.empty()) {
      f.evidence.push_back(NoGpuData("gpu.util") + ": no GPU to name");
    } else if (busy.empty()) {
      f.summary += " and all its GPUs idle";
      f.evidence.push_back("gpu.util of all " + Plural(idle.size(), "GPU") + ": " +
                           Range(low, high) + "%" + idle_below);
    } else if (idle.empty()) {
      f.summary += " while its GPUs stay busy (ranks spinning in a collective?)";
      f.evidence.push_back("gpu.util of all " + Plural(busy.size(), "GPU") + ": " +
                           Range(low, high) + "%" + idle_below);
    } else {
      std::set<std::string> nodes;
      std::set<int32_t> ranks;
      std::vector<std::string> names;
      for (const GpuId& id : idle) {
        nodes.insert(id.first);
        auto it = rank_of_gpu_.find(id);
        ranks.insert(it == rank_of_gpu_.end() ? -1 : it->second);
        names.push_back(GpuName(id) + " " + Pct(*gpus_.at(id).util));
      }
      if (nodes.size() == 1) f.node = *nodes.begin();
      if (ranks.size() == 1) f.rank = *ranks.begin();
      if (idle.size() == 1) f.gpu = std::to_string(idle[0].second);
      std::string who;
      if (f.rank >= 0) {
        who = "rank " + std::to_string(f.rank) + " on " + f.node + " (" +
              Counted("GPU", "GPUs", GpusOf(idle)) + ")";
      } else if (!f.node.empty()) {
        who = Counted("GPU", "GPUs", GpusOf(idle)) + " on " + f.node;
      } else {
        who = Plural(idle.size(), "GPU");
      }
      f.summary += "; " + who + " idle while the other ranks' GPUs are busy";
      f.evidence.push_back("gpu.util idle: " + Join(names) + idle_below);
      f.evidence.push_back("gpu.util of the other " + Plural(busy.size(), "GPU") + ": busy");
    }
    const std::string logs = "`trainyard logs " + job_id_ +
                             (f.rank >= 0 ? " --rank " + std::to_string(f.rank) : "") + "`";
    f.next_step = "Read " + std::string(f.rank >= 0 ? "the idle rank's" : "the job's") +
                  " log and stack (" + logs +
                  ", py-spy dump on its process): a rank that crashed, deadlocked or waits on I/O "
                  "leaves the others blocked in a collective. Requeue the job once the cause is "
                  "known; it resumes from its latest checkpoint.";
    Conclude(Layer::kSystem, "hang", {std::move(f)}, "no step for " + Age(age) + " " + limit);
  }

  static std::vector<int> GpusOf(const std::vector<GpuId>& ids) {
    std::vector<int> out;
    for (const GpuId& id : ids) out.push_back(id.second);
    return out;
  }

  void DataStall() {
    const std::optional<JobUtil> util = JobGpuUtil();
    std::optional<double> wait, step, fraction;
    if (auto w = JobLatest("job.data_wait_s"); w && std::isfinite(*w)) wait = *w;
    if (auto s = JobLatest("job.step_time_s"); s && std::isfinite(*s) && *s > 0) step = *s;
    if (wait && step) fraction = *wait / *step;
    if (!util && !fraction) {
      return Record(
          Layer::kSystem, "data_stall", kNoData,
          "no GPU utilisation, and no job.data_wait_s with job.step_time_s, in " + Window());
    }
    const bool idle = util && util->pct < options_.idle_util_pct;
    const bool waits = fraction && *fraction > options_.data_wait_fraction;
    std::vector<std::string> looked;
    if (util) looked.push_back("GPU util " + Pct(util->pct) + " (" + util->from + ")");
    if (fraction) {
      looked.push_back("data wait " + Num(*wait) + "s of a " + Num(*step) + "s step (" +
                       Pct(*fraction * 100) + ")");
    }
    std::string detail = Join(looked);
    if (!(waits || (idle && progressing_))) {
      if (idle) detail += "; GPUs idle but the job makes no progress (see hang)";
      return Record(Layer::kSystem, "data_stall", kOk, std::move(detail));
    }
    data_stall_found_ = true;
    Finding f = NewFinding(Layer::kSystem, "data_stall");
    const double idle_pct = waits ? *fraction * 100 : 100 - util->pct;
    f.summary = "data-loading bottleneck: GPUs idle " + Pct(idle_pct) + " waiting for input";
    if (idle && progressing_) {
      f.evidence.push_back("GPU util " + Pct(util->pct) + " (" + util->from + "; idle below " +
                           Pct(options_.idle_util_pct) + ") while the job still steps");
    } else if (util) {
      f.evidence.push_back("GPU util " + Pct(util->pct) + " (" + util->from + ")");
    }
    if (fraction) {
      f.evidence.push_back("job.data_wait_s " + Num(*wait) + "s of job.step_time_s " + Num(*step) +
                           "s: " + Pct(*fraction * 100) +
                           " of each step waits for data (input-bound above " +
                           Pct(options_.data_wait_fraction * 100) + ")");
    }
    f.next_step =
        "Check storage I/O and the data loader: more loader workers, prefetching, or staging "
        "the data on local disk.";
    Conclude(Layer::kSystem, "data_stall", {std::move(f)}, std::move(detail));
  }

  void Straggler() {
    struct RankRatio {
      double ratio = 0;
      std::string node;
    };
    std::map<int32_t, RankRatio> ratios;
    for (const auto& [labels, samples] : Read("job.rank_step_time_ratio", window_from_)) {
      auto rank = ParseInt(Label(labels, "rank"));
      if (!rank || !std::isfinite(samples.back().value)) continue;
      auto placed = ranks_.find(*rank);
      // A series of the rank on another node is of an earlier attempt.
      if (placed != ranks_.end() && !Label(labels, "node").empty() &&
          Label(labels, "node") != placed->second->node) {
        continue;
      }
      ratios[*rank] =
          RankRatio{samples.back().value,
                    placed != ranks_.end() ? placed->second->node : Label(labels, "node")};
    }
    if (ratios.empty()) {
      return Record(Layer::kSystem, "straggler", kNoData,
                    "no job.rank_step_time_ratio in " + Window());
    }
    const std::string limit = "(straggler above " + Num(options_.straggler_ratio) + ")";
    std::map<std::string, std::vector<int32_t>> slow;  // node -> its slow ranks
    double low = kInf, high = -kInf;                   // over the ranks that are not slow
    for (const auto& [rank, r] : ratios) {
      if (r.ratio > options_.straggler_ratio) {
        slow[r.node].push_back(rank);
      } else {
        low = std::min(low, r.ratio);
        high = std::max(high, r.ratio);
      }
    }
    rank_ratio_range_ = {low, high};
    const std::string ranks = Plural(ratios.size(), "rank");
    if (slow.empty()) {
      return Record(Layer::kSystem, "straggler", kOk,
                    ranks + ", step-time ratio " + Range(low, high) + " " + limit);
    }
    if (!std::isfinite(low)) {  // every rank slow: not one rank's problem
      return Record(
          Layer::kSystem, "straggler", kOk,
          ranks + ", every one above " + Num(options_.straggler_ratio) + ": no single straggler");
    }
    straggler_found_ = true;
    std::vector<Finding> found;
    std::vector<std::string> named;
    size_t slow_count = 0;
    for (const auto& [node, slow_ranks] : slow) slow_count += slow_ranks.size();
    for (const auto& [node, slow_ranks] : slow) {
      Finding f = NewFinding(Layer::kSystem, "straggler");
      f.node = node;
      std::vector<GpuId> gpus;
      std::vector<std::string> times;
      for (int32_t rank : slow_ranks) {
        times.push_back(Num(ratios.at(rank).ratio) + "x");
        f.evidence.push_back("job.rank_step_time_ratio of rank " + std::to_string(rank) + ": " +
                             Num(ratios.at(rank).ratio) + " " + limit);
        if (auto it = ranks_.find(rank); it != ranks_.end()) {
          for (int gpu : it->second->gpus) gpus.push_back(GpuId{node, gpu});
        }
      }
      f.evidence.push_back("the other " + Plural(ratios.size() - slow_count, "rank") + ": " +
                           Range(low, high));
      std::vector<std::string> faults;
      for (const GpuId& id : gpus) {
        f.evidence.push_back(node + " GPU " + std::to_string(id.second) + ": " + Readings(id));
        for (const std::string& fault : Faults(id)) {
          faults.push_back(gpus.size() == 1 ? fault
                                            : "GPU " + std::to_string(id.second) + " " + fault);
        }
      }
      if (slow_ranks.size() == 1) f.rank = slow_ranks[0];
      if (gpus.size() == 1) f.gpu = std::to_string(gpus[0].second);
      std::string gpu_text = gpus.empty() ? "" : " (" + Counted("GPU", "GPUs", GpusOf(gpus)) + ")";
      f.summary = Counted("rank", "ranks", slow_ranks) + " on " + node + gpu_text +
                  (slow_ranks.size() == 1 ? " is a straggler: " : " are stragglers: ") +
                  Join(times, ", ") + " the job's median step time; ";
      if (gpus.empty()) {
        f.summary += "its GPUs are not known";
      } else if (faults.empty()) {
        f.summary += "no GPU fault visible";
      } else {
        f.summary +=
            (gpus.size() == 1 ? "GPU " + std::to_string(gpus[0].second) + " " : "") + Join(faults);
      }
      f.next_step = MoveOff(node);
      named.push_back(Counted("rank", "ranks", slow_ranks) + " on " + node + " at " +
                      Join(times, ", "));
      found.push_back(std::move(f));
    }
    Conclude(Layer::kSystem, "straggler", std::move(found),
             ranks + "; " + Join(named, "; ") + " " + limit);
  }

  // ---- Communication layer ----

  void Links() {
    const SeriesMap down = Read("link.down", window_from_);
    const SeriesMap errors = Read("link.errors", window_from_);
    if (down.empty() && errors.empty()) {
      return Record(Layer::kCommunication, "links", kNoData,
                    NoNodeData("link.down or link.errors"));
    }
    // node -> link -> what is wrong with it
    std::map<std::string, std::map<std::string, std::vector<std::string>>> bad;
    std::set<std::pair<std::string, std::string>> links;
    for (const auto& [labels, samples] : down) {
      links.emplace(Label(labels, "node"), Label(labels, "link"));
      if (samples.back().value >= 1) {
        bad[Label(labels, "node")][Label(labels, "link")].push_back("down");
      }
    }
    for (const auto& [labels, samples] : errors) {
      links.emplace(Label(labels, "node"), Label(labels, "link"));
      auto inc = CounterIncrease(samples);
      if (inc && inc->amount > 0) {
        bad[Label(labels, "node")][Label(labels, "link")].push_back("+" + Num(inc->amount) +
                                                                    " errors in " + Window());
      }
    }
    std::vector<Finding> found;
    std::vector<std::string> where;
    for (const auto& [node, by_link] : bad) {
      Finding f = NewFinding(Layer::kCommunication, "link_down");
      f.node = node;
      std::vector<std::string> names;
      for (const auto& [link, what] : by_link) {
        names.push_back(link);
        f.evidence.push_back("link " + link + " on " + node + ": " + Join(what) +
                             " (link.down, link.errors)");
      }
      if (by_link.size() == 1) {
        const auto& [link, what] = *by_link.begin();
        f.summary = "link " + link + " on " + node + " is " +
                    (what[0] == "down" ? std::string("down") : "erroring (" + what[0] + ")");
      } else {
        f.summary = Plural(by_link.size(), "link") + " on " + node +
                    " are down or erroring: " + Join(names);
      }
      f.next_step = "Check the link's cable, port and switch on " + node +
                    " (`ibstat`, `nvidia-smi nvlink -e`); until it is fixed, `trainyard drain " +
                    node + "` moves the job off the node (it resumes from its latest checkpoint).";
      where.push_back(node + " " + Join(names));
      found.push_back(std::move(f));
    }
    std::string detail = Plural(links.size(), "link") + " on " + Plural(nodes_.size(), "node");
    detail += where.empty() ? ", none down, no error increase in " + Window()
                            : "; down or erroring: " + Join(where, "; ");
    Conclude(Layer::kCommunication, "links", std::move(found), std::move(detail));
  }

  // "2 leaf switches: leaf-a (n1), leaf-b (n2)", from the placement's nodes.
  std::string LeafSpan() const {
    std::map<std::string, std::vector<std::string>> by_leaf;
    for (const std::string& node : nodes_) {
      auto it = job_.node_leaf.find(node);
      by_leaf[it == job_.node_leaf.end() ? "unknown leaf" : it->second].push_back(node);
    }
    std::vector<std::string> parts;
    for (const auto& [leaf, nodes] : by_leaf) parts.push_back(leaf + " (" + Join(nodes) + ")");
    return std::to_string(by_leaf.size()) +
           (by_leaf.size() == 1 ? " leaf switch: " : " leaf switches: ") + Join(parts);
  }

  void CommBottleneck() {
    std::vector<Sample> recent, before;
    for (const Sample& s : JobSamples("job.step_time_s", baseline_from_)) {
      (s.time >= window_from_ ? recent : before).push_back(s);
    }
    const std::vector<double> now_values = Finite(recent), base_values = Finite(before);
    const std::string baseline = "the " + FormatDuration(options_.baseline) + " before";
    if (now_values.empty()) {
      return Record(Layer::kCommunication, "comm_bottleneck", kNoData,
                    "no job.step_time_s in " + Window());
    }
    if (base_values.empty() || Median(base_values) <= 0) {
      return Record(Layer::kCommunication, "comm_bottleneck", kNoData,
                    "no job.step_time_s in " + baseline + " " + Window() + " to compare with");
    }
    const double step = Median(now_values), base = Median(base_values);
    const double ratio = step / base;
    std::string detail = "step time " + Num(step) + "s, " + Num(ratio) + "x its " + Num(base) +
                         "s of " + baseline + " (slow above " + Num(options_.slowdown_ratio) + "x)";
    if (!(ratio > options_.slowdown_ratio)) {
      return Record(Layer::kCommunication, "comm_bottleneck", kOk, std::move(detail));
    }
    const std::optional<JobUtil> util = JobGpuUtil();
    if (straggler_found_) {
      return Record(Layer::kCommunication, "comm_bottleneck", kOk,
                    detail + "; explained by the straggler above");
    }
    if (data_stall_found_) {
      return Record(Layer::kCommunication, "comm_bottleneck", kOk,
                    detail + "; explained by the data stall above");
    }
    if (util && util->pct < options_.idle_util_pct) {
      return Record(Layer::kCommunication, "comm_bottleneck", kOk,
                    detail + "; GPUs idle (" + Pct(util->pct) + "), not communication-bound");
    }
    Finding f = NewFinding(Layer::kCommunication, "comm_bottleneck");
    const std::string span = nodes_.empty() ? "" : "the gang spans " + LeafSpan();
    f.summary = "every rank is " + Num(ratio) + "x slower than the job's own step time of " +
                baseline + " with its GPUs busy: communication-bound" +
                (span.empty() ? "" : " (" + span + ")");
    f.evidence.push_back("job.step_time_s median " + Num(step) + "s in " + Window() + ", " +
                         Num(base) + "s in " + baseline + ": " + Num(ratio) + "x (slow above " +
                         Num(options_.slowdown_ratio) + "x)");
    if (const auto [low, high] = rank_ratio_range_; std::isfinite(low)) {
      f.evidence.push_back("job.rank_step_time_ratio " + Range(low, high) +
                           ": every rank slow alike, no straggler");
    } else {
      f.evidence.push_back("no job.rank_step_time_ratio: a straggler is not ruled out");
    }
    f.evidence.push_back(util ? "GPU util " + Pct(util->pct) + " (" + util->from + "): not idle"
                              : "no GPU utilisation: idle GPUs are not ruled out");
    f.evidence.push_back(span.empty() ? "the job's placement is not known" : span);
    f.next_step =
        "Place the job tighter (one leaf switch or NVLink domain), lower its data-parallel "
        "degree, and check the fabric for congestion or errors.";
    Conclude(Layer::kCommunication, "comm_bottleneck", {std::move(f)}, std::move(detail));
  }

  // ---- Training layer ----

  void LossNan() {
    const std::vector<Sample> loss = JobSamples("job.loss", window_from_);
    const std::vector<Sample> grad = JobSamples("job.grad_norm", window_from_);
    if (loss.empty() && grad.empty()) {
      return Record(Layer::kTraining, "loss_nan", kNoData,
                    "no job.loss or job.grad_norm in " + Window());
    }
    std::optional<Sample> first_bad;
    size_t bad = 0;
    for (const Sample& s : loss) {
      if (std::isfinite(s.value)) continue;
      ++bad;
      if (!first_bad) first_bad = s;
    }
    size_t grad_run = 0;  // non-finite grad norms at the end
    for (auto it = grad.rbegin(); it != grad.rend() && !std::isfinite(it->value); ++it) ++grad_run;
    const bool grad_bad = grad_run >= static_cast<size_t>(kNonFiniteGradRun);
    if (bad == 0 && !grad_bad) {
      return Record(Layer::kTraining, "loss_nan", kOk,
                    Plural(loss.size(), "loss sample") + " in " + Window() + ", all finite" +
                        (grad_run > 0 ? "; " + Plural(grad_run, "non-finite grad norm") +
                                            " at the end (skipped steps)"
                                      : ""));
    }
    Finding f = NewFinding(Layer::kTraining, "loss_nan");
    if (bad > 0) {
      f.summary = "the loss is " + FormatValue(first_bad->value) + ": " + std::to_string(bad) +
                  " of " + Plural(loss.size(), "loss sample") + " in " + Window() + " not finite";
      f.evidence.push_back("job.loss: first non-finite value (" + FormatValue(first_bad->value) +
                           ") at " + FormatRfc3339(first_bad->time) + ", latest " +
                           FormatValue(loss.back().value));
    } else {
      f.summary =
          "the grad norm has not been finite for its last " + std::to_string(grad_run) + " samples";
    }
    if (grad_run > 0) {
      f.evidence.push_back("job.grad_norm: the last " + std::to_string(grad_run) +
                           " samples not finite (a run of " + std::to_string(kNonFiniteGradRun) +
                           " counts; fewer are steps the loss scaler skips)");
    }
    f.next_step =
        "Stop the job and resume from the last checkpoint before the first non-finite value "
        "with a lower learning rate, gradient clipping, or bf16 instead of fp16; check the "
        "data batch at that step.";
    Conclude(Layer::kTraining, "loss_nan", {std::move(f)},
             bad > 0 ? Plural(bad, "non-finite loss sample") + " in " + Window()
                     : std::to_string(grad_run) + " non-finite grad norms at the end");
  }

  void GradSpike() {
    const std::vector<Sample> grad = JobSamples("job.grad_norm", window_from_);
    if (grad.empty()) {
      return Record(Layer::kTraining, "grad_spike", kNoData, "no job.grad_norm in " + Window());
    }
    if (!std::isfinite(grad.back().value)) {
      return Record(
          Layer::kTraining, "grad_spike", kOk,
          "the latest grad norm is " + FormatValue(grad.back().value) + " (see loss_nan)");
    }
    // The spike is the highest z-score among the last few points, each against the
    // points before it: a spike that lasts several steps lifts the mean and the
    // deviation for the points after its start, so the latest alone would miss it.
    const size_t first = grad.size() > kGradSpikeRecent ? grad.size() - kGradSpikeRecent : 0;
    const std::optional<ZScore> z = MaxZScore(grad, first, kGradSpikeMinPoints, 0);
    const size_t at = z ? z->index : grad.size() - 1;
    if (!z) {
      return Record(Layer::kTraining, "grad_spike", kNoData,
                    std::to_string(Finite(grad).size()) + " finite grad norms in " + Window() +
                        "; the test needs " + std::to_string(kGradSpikeMinPoints + 1));
    }
    const double latest = grad[at].value;
    std::string detail = "highest z-score of the last " + std::to_string(grad.size() - first) +
                         " grad norms " + Num(z->z) + " (" + Num(latest) + ", over " +
                         Plural(z->points, "point") + " before it; spike above " +
                         Num(kGradSpikeZ) + ")";
    if (!(z->z > kGradSpikeZ)) {
      return Record(Layer::kTraining, "grad_spike", kOk, std::move(detail));
    }
    Finding f = NewFinding(Layer::kTraining, "grad_spike");
    f.summary = "the grad norm spiked to " + Num(latest) + ", " + Num(z->z) +
                " standard deviations above its mean of " + Num(z->mean) +
                ": a loss spike may follow";
    f.evidence.push_back("job.grad_norm " + Num(latest) + " at " + FormatRfc3339(grad[at].time) +
                         "; mean " + Num(z->mean) + ", standard deviation " + Num(z->stddev) +
                         " over the " + Plural(z->points, "sample") + " before it in " + Window());
    f.next_step =
        "Lower the learning rate, clip gradients, or check the data batch at that step; if the "
        "loss diverges, resume from the checkpoint before the spike.";
    Conclude(Layer::kTraining, "grad_spike", {std::move(f)}, std::move(detail));
  }

  void LossFlat() {
    std::vector<Sample> loss;
    for (const Sample& s : JobSamples("job.loss", window_from_)) {
      if (std::isfinite(s.value)) loss.push_back(s);
    }
    if (loss.size() < static_cast<size_t>(kLossFlatMinPoints)) {
      return Record(Layer::kTraining, "loss_flat", kNoData,
                    Plural(loss.size(), "finite loss sample") + " in " + Window() +
                        "; the test needs " + std::to_string(kLossFlatMinPoints));
    }
    const std::optional<JobUtil> util = JobGpuUtil();
    if (util && util->pct < options_.idle_util_pct) {
      return Record(Layer::kTraining, "loss_flat", kOk,
                    "GPUs idle (" + Pct(util->pct) + "): the loss is not judged");
    }
    const double first = loss.front().value, last = loss.back().value;
    const double per_minute = Slope(loss) * 60;
    std::string detail = "loss " + Num(first) + " -> " + Num(last) + " over " +
                         Plural(loss.size(), "sample") + ", slope " + Num(per_minute) + "/min";
    const bool falling = per_minute < 0 || last < first - kLossFlatMinDrop * std::abs(first);
    if (falling) return Record(Layer::kTraining, "loss_flat", kOk, std::move(detail));
    Finding f = NewFinding(Layer::kTraining, "loss_flat");
    f.summary = "the loss is not falling: " + Num(first) + " -> " + Num(last) + " over " +
                Window() + " with its GPUs busy";
    f.evidence.push_back("job.loss least-squares slope " + Num(per_minute) + " per minute over " +
                         Plural(loss.size(), "sample") + "; the last is not " +
                         Pct(kLossFlatMinDrop * 100) + " below the first");
    if (util) f.evidence.push_back("GPU util " + Pct(util->pct) + " (" + util->from + ")");
    if (auto lr = JobLatest("job.lr")) f.evidence.push_back("job.lr " + FormatValue(*lr));
    f.next_step =
        "Check the learning rate (decayed to nothing, or a warm-up that never ends), the data "
        "(a repeated shard, broken labels) and the precision (fp16 underflow).";
    Conclude(Layer::kTraining, "loss_flat", {std::move(f)}, std::move(detail));
  }

  void Checkpoint() {
    const std::vector<Sample> age = JobSamples("job.checkpoint_age_ratio", window_from_);
    const bool on_demand = job_.checkpoint_interval <= Duration(0);
    if (age.empty()) {
      return Record(Layer::kTraining, "checkpoint", kNoData,
                    "no job.checkpoint_age_ratio in " + Window() +
                        (on_demand ? " (the job checkpoints on demand only)" : ""));
    }
    if (on_demand) {
      return Record(Layer::kTraining, "checkpoint", kOk,
                    "the job checkpoints on demand only: no interval to be overdue against");
    }
    const double ratio = age.back().value;
    const std::string interval = FormatDuration(job_.checkpoint_interval);
    std::string detail = "last checkpoint " + Num(ratio) + "x the " + interval +
                         " interval old (overdue above " + Num(kCheckpointOverdueRatio) + "x)";
    if (!(ratio > kCheckpointOverdueRatio)) {
      return Record(Layer::kTraining, "checkpoint", kOk, std::move(detail));
    }
    Finding f = NewFinding(Layer::kTraining, "checkpoint_overdue");
    const double age_s = ratio * Seconds(job_.checkpoint_interval);
    f.summary = "the last checkpoint is " + Num(ratio) + "x its interval old (about " + Age(age_s) +
                "; interval " + interval + ")";
    f.evidence.push_back("job.checkpoint_age_ratio " + Num(ratio) + " (overdue above " +
                         Num(kCheckpointOverdueRatio) + ")");
    f.next_step =
        "Ask the job for a checkpoint now (the CheckpointOverdue alert requests one), and find "
        "out why they stopped: how long writes take (job.checkpoint_write_s) and the free "
        "space on the checkpoint path (node.disk_free_ratio).";
    Conclude(Layer::kTraining, "checkpoint", {std::move(f)}, std::move(detail));
  }

  // ---- Alerts ----

  // Each firing alert goes to the evidence of the first finding it is about: a finding
  // on a node takes the node's alerts (and the GPU's, the rank's, when both name one);
  // a job-wide finding takes the job's alerts that name no node.
  void AttachAlerts() {
    for (const Alert& a : job_.alerts) {
      if (a.state != AlertState::kFiring) continue;
      const std::string node = Label(a.labels, "node"), gpu = Label(a.labels, "gpu");
      const std::string rank = Label(a.labels, "rank"), job = Label(a.labels, "job_id");
      if (!job.empty() && job != job_id_) continue;
      for (Finding& f : findings_) {
        bool about;
        if (f.node.empty()) {
          about = node.empty() && job == job_id_;
        } else {
          about = node == f.node && (gpu.empty() || f.gpu.empty() || gpu == f.gpu) &&
                  (rank.empty() || f.rank < 0 || rank == std::to_string(f.rank));
        }
        if (!about) continue;
        f.evidence.push_back("alert " + a.rule + " (" + Label(a.labels, "severity") +
                             ") firing since " + FormatRfc3339(a.starts_at));
        break;
      }
    }
  }

  const JobContext& job_;
  const SignalSource& source_;
  const Timestamp now_;
  const DiagnoseOptions& options_;
  const std::string job_id_;
  const Timestamp window_from_, baseline_from_;
  std::set<std::string> nodes_;
  std::map<int32_t, const RankPlacement*> ranks_;
  std::map<GpuId, int32_t> rank_of_gpu_;
  std::map<GpuId, GpuTelemetry> gpus_;

  // What earlier steps established for later ones.
  bool progressing_ = false;  // the job still steps (hang)
  bool data_stall_found_ = false;
  bool straggler_found_ = false;
  std::pair<double, double> rank_ratio_range_{kInf, -kInf};  // ranks not straggling

  std::vector<Check> checks_;
  std::vector<Finding> findings_;
};

Json FindingJson(const Finding& f) {
  return Json{{"layer", LayerName(f.layer)},
              {"cause", f.cause},
              {"summary", f.summary},
              {"node", f.node},
              {"gpu", f.gpu},
              {"rank", f.rank},
              {"evidence", f.evidence},
              {"next_step", f.next_step}};
}

}  // namespace

std::string_view LayerName(Layer l) {
  switch (l) {
    case Layer::kSystem:
      return "system";
    case Layer::kCommunication:
      return "communication";
    case Layer::kTraining:
      return "training";
  }
  return "unknown";
}

Diagnosis Diagnose(const JobContext& job, const SignalSource& signals, Timestamp now,
                   const DiagnoseOptions& options) {
  return Walk(job, signals, now, options).Run();
}

std::string DiagnosisJson(const Diagnosis& d) {
  Json findings = Json::array();
  for (const Finding& f : d.findings) findings.push_back(FindingJson(f));
  Json checks = Json::array();
  for (const Check& c : d.checks) {
    checks.push_back(Json{{"layer", LayerName(c.layer)},
                          {"name", c.name},
                          {"result", c.result},
                          {"detail", c.detail}});
  }
  Json out = {{"job_id", d.job_id},
              {"at", FormatRfc3339(d.at)},
              {"found", d.found()},
              {"verdict", d.found() ? FindingJson(d.findings[0]) : Json(nullptr)},
              {"findings", std::move(findings)},
              {"checks", std::move(checks)}};
  return out.dump();
}

std::string RenderDiagnosis(const Diagnosis& d) {
  const std::string job = "job " + std::to_string(d.job_id) + ": ";
  std::string out;
  if (!d.found()) {
    out += job + "nothing wrong found (" + Plural(d.checks.size(), "check") + ")\n";
    const auto no_data = std::count_if(d.checks.begin(), d.checks.end(),
                                       [](const Check& c) { return c.result == kNoData; });
    if (no_data > 0) {
      out += "note: " + Plural(static_cast<size_t>(no_data), "check") +
             " had no data to read (see the walk)\n";
    }
  } else {
    const Finding& v = d.findings[0];
    out += job + v.summary + "\n";
    if (!v.evidence.empty()) {
      out += "evidence:\n";
      for (const std::string& e : v.evidence) out += "  " + e + "\n";
    }
    out += "next step: " + v.next_step + "\n";
    if (d.findings.size() > 1) {
      out += "also found:\n";
      for (size_t i = 1; i < d.findings.size(); ++i) {
        const Finding& f = d.findings[i];
        out += "  " + std::string(LayerName(f.layer)) + "/" + f.cause + ": " + f.summary + "\n";
      }
    }
  }
  std::vector<std::array<std::string, 4>> rows = {{"LAYER", "CHECK", "RESULT", "DETAIL"}};
  for (const Check& c : d.checks) {
    rows.push_back({std::string(LayerName(c.layer)), c.name, c.result, c.detail});
  }
  std::array<size_t, 3> width{};
  for (const auto& row : rows) {
    for (size_t i = 0; i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  out += "walk:\n";
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t i = 0; i < width.size(); ++i) {
      line += row[i] + std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + row[3] + "\n";
  }
  return out;
}

}  // namespace trainyard::monitor
