#include "track/runs.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/auth.h"

namespace trainyard::track {
namespace {

using ordered_json = nlohmann::ordered_json;

int64_t Millis(Timestamp t) { return t.time_since_epoch().count(); }

ordered_json MetricJson(const RunMetric& m) {
  return {{"last", JsonNumber(m.last)}, {"step", m.last_step},      {"time_ms", m.last_time_ms},
          {"min", JsonNumber(m.min)},   {"max", JsonNumber(m.max)}, {"count", m.count},
          {"nan_count", m.nan_count},   {"ranks", m.ranks}};
}

double Best(const RunMetric& m) { return LowerIsBetter(m.key) ? m.min : m.max; }

}  // namespace

ordered_json JsonNumber(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

bool IsPerRankRate(std::string_view key) { return key == "tokens_per_s" || key == "samples_per_s"; }

bool LowerIsBetter(std::string_view key) {
  for (std::string_view word :
       {"loss", "error", "err", "perplexity", "ppl", "time", "latency", "wer", "cer"}) {
    if (key.find(word) != std::string_view::npos) return true;
  }
  return false;
}

std::string EnvironmentHash(const JobSpec& spec, const std::map<std::string, std::string>& params,
                            const std::string& image_digest) {
  // One line per fact, in a fixed order, so the hash changes only when they do.
  std::string text = "program=" + (spec.command.empty() ? "script" : spec.command.front()) + "\n";
  if (!spec.image.empty()) {
    text += "image=" + (image_digest.empty() ? spec.image : image_digest) + "\n";
  }
  std::set<std::string_view> secret(spec.secret_env.begin(), spec.secret_env.end());
  for (const auto& [k, v] : spec.env) {
    text += "env." + k + "=" + (secret.contains(k) ? std::string("<secret>") : v) + "\n";
  }
  for (auto it = params.lower_bound("env."); it != params.end() && it->first.starts_with("env.");
       ++it) {
    text += "param." + it->first + "=" + it->second + "\n";
  }
  return "sha256:" + Sha256Hex(text);
}

// The digest of the image the job's latest attempt that started a container ran.
std::string ImageDigest(const Job& job) {
  for (auto it = job.attempts.rbegin(); it != job.attempts.rend(); ++it) {
    if (!it->image_digest.empty()) return it->image_digest;
  }
  return "";
}

RunRecord BuildRun(const Job& job, const std::map<std::string, std::string>& logged_params,
                   const std::vector<SeriesInfo>& series) {
  RunRecord r;
  const JobSpec& spec = job.spec;
  r.id = job.id;
  r.name = spec.name;
  r.experiment = spec.experiment.name.empty() ? spec.name : spec.experiment.name;
  r.tenant = spec.tenant;
  r.queue = spec.queue;
  r.user = std::string(UserOfActor(job.submitted_by));
  r.state = std::string(JobStateName(job.state));
  r.submit_time = job.submit_time;
  if (!job.attempts.empty()) {
    r.start_time = job.attempts.front().start_time;
    if (IsTerminal(job.state)) r.end_time = job.attempts.back().end_time;
  }
  r.code = spec.experiment.code;
  // The datasets the job read, exactly (the server resolved each to its version at
  // submission); else what the spec's experiment says of its data.
  for (const DataSpec& d : spec.data) {
    r.data_version += (r.data_version.empty() ? "" : ",") + d.dataset + "@" + d.version;
  }
  if (r.data_version.empty()) r.data_version = spec.experiment.data_version;
  r.command = spec.command;
  r.command.insert(r.command.end(), spec.args.begin(), spec.args.end());
  r.replicas = spec.replicas;
  r.gpus_per_replica = spec.resources.gpus;
  r.gpu_type = spec.resources.gpu_type;
  std::set<std::string> nodes;
  for (const Attempt& a : job.attempts) nodes.insert(a.nodes.begin(), a.nodes.end());
  r.nodes.assign(nodes.begin(), nodes.end());
  r.attempts = static_cast<int32_t>(job.attempts.size());
  r.params = spec.experiment.params;
  for (const auto& [k, v] : logged_params) r.params[k] = v;
  r.image = spec.image;
  r.image_digest = ImageDigest(job);
  r.environment = EnvironmentHash(spec, r.params, r.image_digest);
  r.labels = spec.labels;
  r.checkpoint = job.checkpoint;

  // `series` is sorted by key then rank: the first of a key is its lowest rank.
  for (const SeriesInfo& s : series) {
    auto [it, fresh] = r.metrics.try_emplace(s.key);
    RunMetric& m = it->second;
    if (fresh) {
      m.key = s.key;
      m.last_step = s.last.step;
      m.last_time_ms = s.last.time_ms;
      m.last = s.last.value;
      m.min = s.min;
      m.max = s.max;
    } else if (IsPerRankRate(s.key)) {
      m.last += s.last.value;
      m.last_step = std::max(m.last_step, s.last.step);
      m.last_time_ms = std::max(m.last_time_ms, s.last.time_ms);
    }
    ++m.ranks;
    m.count += s.count;
    m.nan_count += s.nan_count;
  }
  return r;
}

namespace {

std::optional<double> NumberOf(const RunRecord& run, const std::string& key) {
  if (auto m = run.metrics.find(key); m != run.metrics.end() && std::isfinite(m->second.last)) {
    return m->second.last;
  }
  if (auto p = run.params.find(key); p != run.params.end()) {
    char* end = nullptr;
    double v = std::strtod(p->second.c_str(), &end);
    if (end != p->second.c_str() && *end == '\0' && std::isfinite(v)) return v;
  }
  return std::nullopt;
}

std::string PrecisionOf(const RunRecord& run) {
  for (const char* key : {"precision", "dtype"}) {
    auto it = run.params.find(key);
    if (it == run.params.end()) continue;
    std::string v = it->second;
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (v.starts_with("torch.")) v = v.substr(6);
    if (v == "bfloat16" || v == "bf16" || v == "bf16-mixed") return "bf16";
    if (v == "float16" || v == "fp16" || v == "half" || v == "16-mixed") return "fp16";
    if (v == "float8" || v == "fp8" || v.starts_with("float8_")) return "fp8";
    if (v == "tf32") return "tf32";
    if (v == "float32" || v == "fp32" || v == "float" || v == "32") return "fp32";
  }
  return "bf16";
}

}  // namespace

std::optional<Mfu> RunMfu(const RunRecord& run) {
  auto tps = NumberOf(run, "tokens_per_s");
  if (!tps || *tps <= 0 || run.gpu_type.empty()) return std::nullopt;
  MfuInput in;
  in.tokens_per_s = *tps;
  in.model_flops_per_token = NumberOf(run, "model_flops_per_token");
  in.num_params = NumberOf(run, "num_params");
  in.gpu_type = run.gpu_type;
  in.gpu_count = static_cast<int64_t>(run.replicas) * run.gpus_per_replica;
  in.precision = PrecisionOf(run);
  auto m = ComputeMfu(in);
  if (!m.ok()) return std::nullopt;
  return *m;
}

const std::vector<std::string>& RunAttributeNames() {
  static const auto* names = [] {
    auto* out = new std::vector<std::string>;
    for (const auto& [k, _] : Filterable(RunRecord{}).attributes) out->push_back(k);
    return out;
  }();
  return *names;
}

FilterableRun Filterable(const RunRecord& run) {
  FilterableRun f;
  f.attributes = {{"id", std::to_string(run.id)},
                  {"name", run.name},
                  {"experiment", run.experiment},
                  {"state", run.state},
                  {"status", run.state},
                  {"tenant", run.tenant},
                  {"queue", run.queue},
                  {"user", run.user},
                  {"code", run.code},
                  {"data_version", run.data_version},
                  {"environment", run.environment},
                  {"image", run.image},
                  {"image_digest", run.image_digest},
                  {"gpu_type", run.gpu_type},
                  {"gpus", std::to_string(run.gpus_per_replica * run.replicas)},
                  {"attempts", std::to_string(run.attempts)},
                  {"submit_time_ms", std::to_string(Millis(run.submit_time))}};
  for (const auto& [k, v] : run.params) f.params.emplace(k, v);
  for (const auto& [k, m] : run.metrics) f.metrics.emplace(k, m.last);
  if (auto mfu = RunMfu(run)) f.metrics.emplace("mfu", mfu->value);
  for (const auto& [k, v] : run.labels) f.labels.emplace(k, v);
  return f;
}

ordered_json RenderRunSummary(const RunRecord& run) {
  ordered_json metrics = ordered_json::object();
  for (const auto& [k, m] : run.metrics) metrics[k] = JsonNumber(m.last);
  return {{"id", run.id},
          {"name", run.name},
          {"experiment", run.experiment},
          {"state", run.state},
          {"tenant", run.tenant},
          {"queue", run.queue},
          {"user", run.user},
          {"submit_time_ms", Millis(run.submit_time)},
          {"code", run.code},
          {"data_version", run.data_version},
          {"attempts", run.attempts},
          {"params", run.params},
          {"metrics", std::move(metrics)}};
}

ordered_json RenderRun(const RunRecord& run) {
  ordered_json metrics = ordered_json::object();
  for (const auto& [k, m] : run.metrics) metrics[k] = MetricJson(m);
  ordered_json out = {
      {"id", run.id},
      {"name", run.name},
      {"experiment", run.experiment},
      {"state", run.state},
      {"tenant", run.tenant},
      {"queue", run.queue},
      {"user", run.user},
      {"submit_time_ms", Millis(run.submit_time)},
      {"start_time_ms", run.start_time ? ordered_json(Millis(*run.start_time)) : nullptr},
      {"end_time_ms", run.end_time ? ordered_json(Millis(*run.end_time)) : nullptr},
      {"code", run.code},
      {"code_dirty", run.code.ends_with("-dirty")},
      {"data_version", run.data_version},
      {"environment", run.environment},
      {"image", run.image.empty() ? ordered_json(nullptr) : ordered_json(run.image)},
      {"image_digest",
       run.image_digest.empty() ? ordered_json(nullptr) : ordered_json(run.image_digest)},
      {"command", run.command},
      {"resources",
       {{"replicas", run.replicas},
        {"gpus_per_replica", run.gpus_per_replica},
        {"gpu_type", run.gpu_type}}},
      {"nodes", run.nodes},
      {"attempts", run.attempts},
      {"params", run.params},
      {"metrics", std::move(metrics)},
      {"labels", run.labels},
  };
  if (auto mfu = RunMfu(run)) {
    out["mfu"] = {{"value", mfu->value},
                  {"achieved_tflops_per_gpu", mfu->achieved_tflops},
                  {"peak_tflops_per_gpu", mfu->peak_tflops},
                  {"how", mfu->how}};
  } else {
    out["mfu"] = nullptr;
  }
  if (run.checkpoint) {
    out["checkpoint"] = {{"path", run.checkpoint->path},
                         {"step", run.checkpoint->step},
                         {"completed_ms", Millis(run.checkpoint->completed_at)},
                         {"write_ms", run.checkpoint->write_duration.count()}};
  }
  return out;
}

ordered_json CompareRuns(const std::vector<RunRecord>& runs) {
  ordered_json ids = ordered_json::array();
  for (const RunRecord& r : runs) ids.push_back(r.id);
  std::set<std::string> param_keys, metric_keys;
  for (const RunRecord& r : runs) {
    for (const auto& [k, _] : r.params) param_keys.insert(k);
    for (const auto& [k, _] : r.metrics) metric_keys.insert(k);
  }
  ordered_json params = ordered_json::array();
  for (const std::string& k : param_keys) {
    ordered_json values = ordered_json::array();
    std::set<std::optional<std::string>> distinct;
    for (const RunRecord& r : runs) {
      auto it = r.params.find(k);
      std::optional<std::string> v;
      if (it != r.params.end()) v = it->second;
      distinct.insert(v);
      values.push_back(v ? ordered_json(*v) : ordered_json(nullptr));
    }
    params.push_back({{"key", k}, {"values", values}, {"differs", distinct.size() > 1}});
  }
  ordered_json metrics = ordered_json::array();
  for (const std::string& k : metric_keys) {
    ordered_json last = ordered_json::array(), best = ordered_json::array();
    for (const RunRecord& r : runs) {
      auto it = r.metrics.find(k);
      last.push_back(it == r.metrics.end() ? ordered_json(nullptr) : JsonNumber(it->second.last));
      best.push_back(it == r.metrics.end() ? ordered_json(nullptr) : JsonNumber(Best(it->second)));
    }
    metrics.push_back({{"key", k},
                       {"best_is", LowerIsBetter(k) ? "min" : "max"},
                       {"last", last},
                       {"best", best}});
  }
  ordered_json attrs = ordered_json::array();
  auto attr = [&](const char* name, auto get) {
    ordered_json values = ordered_json::array();
    std::set<std::string> distinct;
    for (const RunRecord& r : runs) {
      std::string v = get(r);
      distinct.insert(v);
      values.push_back(v);
    }
    attrs.push_back({{"key", name}, {"values", values}, {"differs", distinct.size() > 1}});
  };
  attr("name", [](const RunRecord& r) { return r.name; });
  attr("experiment", [](const RunRecord& r) { return r.experiment; });
  attr("state", [](const RunRecord& r) { return r.state; });
  attr("code", [](const RunRecord& r) { return r.code; });
  attr("data_version", [](const RunRecord& r) { return r.data_version; });
  attr("environment", [](const RunRecord& r) { return r.environment; });
  attr("gpus", [](const RunRecord& r) { return std::to_string(r.gpus_per_replica * r.replicas); });
  return {{"runs", ids}, {"attributes", attrs}, {"params", params}, {"metrics", metrics}};
}

namespace {

int32_t AttemptAt(const Job& job, int64_t time_ms) {
  int32_t found = 0;
  for (const Attempt& a : job.attempts) {
    if (Millis(a.start_time) <= time_ms) found = a.index;
  }
  return found;
}

Duration SecondsToDuration(double s) {
  if (!std::isfinite(s) || s < 0) return Duration(0);
  return Duration(static_cast<int64_t>(std::llround(std::min(s, 1e9) * 1000.0)));
}

}  // namespace

Result<TraceSpans> TraceSpansFromSeries(SeriesStore& series, const Job& job, int64_t max_steps) {
  TraceSpans out;
  TY_ASSIGN_OR_RETURN(auto infos, series.ListSeries(job.id));
  for (const SeriesInfo& info : infos) {
    const bool steps = info.key == "step_time_s";
    if (!steps && info.key != "checkpoint/write_s") continue;
    SeriesRange range;
    range.buckets = 0;
    if (steps && max_steps <= 0) continue;
    if (steps && info.last.step - info.first_step >= max_steps) {
      range.from_step = info.last.step - max_steps + 1;
    }
    auto raw = series.Read(job.id, info.key, info.rank, range);
    if (!raw.ok()) {
      // Too many points even so (steps repeated many times): keep the trace without them.
      if (raw.status().code() == StatusCode::kResourceExhausted) continue;
      return raw.status();
    }
    for (const Bucket& b : *raw) {
      const Duration d = SecondsToDuration(b.last);
      const Timestamp end{Duration(b.last_time_ms)};
      if (steps) {
        out.steps.push_back({AttemptAt(job, b.last_time_ms), info.rank, b.last_step, end - d, d});
      } else {
        out.checkpoints.push_back({AttemptAt(job, b.last_time_ms), b.last_step, end - d, d, ""});
      }
    }
  }
  return out;
}

ordered_json RenderBuckets(const std::vector<Bucket>& buckets) {
  // Columns rather than objects: a 1,000-bucket reply stays small and quick to plot.
  ordered_json first = ordered_json::array(), last_step = ordered_json::array(),
               time = ordered_json::array(), count = ordered_json::array(),
               nans = ordered_json::array(), mn = ordered_json::array(), mx = ordered_json::array(),
               last = ordered_json::array();
  for (const Bucket& b : buckets) {
    first.push_back(b.first_step);
    last_step.push_back(b.last_step);
    time.push_back(b.last_time_ms);
    count.push_back(b.count);
    nans.push_back(b.nan_count);
    mn.push_back(JsonNumber(b.min));
    mx.push_back(JsonNumber(b.max));
    last.push_back(JsonNumber(b.last));
  }
  return {{"first_step", first}, {"last_step", last_step},
          {"time_ms", time},     {"count", count},
          {"nan_count", nans},   {"min", mn},
          {"max", mx},           {"last", last}};
}

}  // namespace trainyard::track
