#include "monitor/rules.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <set>

#include "core/names.h"
#include "core/yaml_reader.h"
#include "core/yaml_text.h"

namespace trainyard::monitor {
namespace {

using std::chrono::hours;

constexpr size_t kMaxRulesBytes = 1 << 20;
constexpr size_t kMaxRules = 1000;
constexpr size_t kMaxLabels = 64;
constexpr Duration kMaxWindow = hours(24 * 7);
constexpr int kMaxPerHourCeiling = 100000;

// ---- The signal table -----------------------------------------------------------------

const std::vector<SignalInfo>& SignalTable() {
  static const auto* table = [] {
    const std::vector<std::string_view> job = {"job_id", "tenant", "queue"};
    const std::vector<std::string_view> rank = {"job_id", "tenant", "queue", "rank", "node"};
    const std::vector<std::string_view> gpu = {"node", "gpu"};
    const std::vector<std::string_view> link = {"node", "link"};
    const auto J = SignalScope::kJob;
    const auto N = SignalScope::kNode;
    return new std::vector<SignalInfo>{
        {"job.loss", J, false, job, "loss", "training loss, as the job logs it"},
        {"job.grad_norm", J, false, job, "norm", "global gradient norm, as the job logs it"},
        {"job.lr", J, false, job, "learning rate", "learning rate, as the job logs it"},
        {"job.step_time_s", J, false, job, "seconds",
         "seconds per training step (median over the job's ranks)"},
        {"job.tokens_per_s", J, false, job, "tokens/s", "training throughput of the whole job"},
        {"job.data_wait_s", J, false, job, "seconds",
         "seconds per step the job's ranks waited for input data (median over ranks), as the "
         "job logs it (data_wait_s)"},
        {"job.mfu", J, false, job, "ratio",
         "model FLOPs utilisation (0-1) of the job, from its tokens/s and model size "
         "(docs/runs.md); a drop means the GPUs do less useful work"},
        {"job.gpu_util", J, false, job, "percent",
         "mean utilisation of the job's GPUs (0-100), over all its nodes"},
        {"job.rank_step_time_ratio", J, false, rank, "ratio",
         "one rank's step time over the job's median step time (1 = typical; stragglers are "
         "above); `node` is where the rank runs"},
        {"job.checkpoint_age_ratio", J, false, job, "ratio",
         "time since the last completed checkpoint over the job's checkpoint interval"},
        {"job.checkpoint_write_s", J, false, job, "seconds",
         "how long the job's latest checkpoint took to write"},
        {"job.progress_age_s", J, false, job, "seconds",
         "seconds since the job's step last increased (running jobs only)"},
        {"job.pending_ratio", J, false, job, "ratio",
         "time the job has been pending over the median pending time of jobs its queue "
         "admitted lately (pending jobs only)"},
        {"gpu.util", N, false, gpu, "percent", "utilisation of one GPU (0-100)"},
        {"gpu.temp_c", N, false, gpu, "degrees C", "GPU core temperature"},
        {"gpu.throttled", N, false, gpu, "0/1",
         "1 while the GPU's clocks are held down by a power or thermal limit"},
        {"gpu.xid_count", N, true, gpu, "count",
         "XID errors the driver reported since the agent started (a counter)"},
        {"gpu.ecc_uncorrectable", N, true, gpu, "count",
         "uncorrectable ECC errors since the agent started (a counter)"},
        {"link.errors", N, true, link, "count",
         "error counter of one NVLink or InfiniBand link (a counter)"},
        {"link.down", N, false, link, "0/1", "1 while the link is down"},
        {"node.heartbeat_age_s",
         N,
         false,
         {"node"},
         "seconds",
         "seconds since the node's agent last reported"},
        {"node.disk_free_ratio",
         N,
         false,
         {"node", "path"},
         "ratio",
         "free space over capacity of a checkpoint or data path on the node (0-1)"},
    };
  }();
  return *table;
}

std::vector<std::string_view> SignalNames(const std::function<bool(const SignalInfo&)>& keep) {
  std::vector<std::string_view> out;
  for (const SignalInfo& s : SignalTable()) {
    if (keep(s)) out.push_back(s.name);
  }
  return out;
}

// ---- Names of enum values -------------------------------------------------------------

const std::vector<std::string_view> kConditionKinds = {
    "threshold_above", "threshold_below", "rate_above", "increase_above", "zscore_above", "nan",
    "absent_for"};
const std::vector<std::string_view> kSeverities = {"info", "warning", "critical"};
const std::vector<std::string_view> kActionKinds = {"notify", "cordon_node",
                                                    "requeue_excluding_node", "request_checkpoint"};

const std::vector<std::string_view> kTopFields = {"rules", "limits"};
const std::vector<std::string_view> kRuleFields = {
    "name",     "signal", "condition",   "for",    "keep_firing_for",
    "severity", "labels", "annotations", "action", "enabled"};
const std::vector<std::string_view> kConditionFields = {
    "threshold_above", "threshold_below", "rate_above", "increase_above", "zscore_above", "nan",
    "absent_for",      "window",          "min_points", "min_stddev"};
const std::vector<std::string_view> kActionFields = {"kind"};
const std::vector<std::string_view> kLimitFields = {"max_per_hour", "max_cordoned"};
const std::vector<std::string_view> kLimitedActions = {"cordon_node", "requeue_excluding_node",
                                                       "request_checkpoint"};
// Labels the engine sets itself; rules may not.
const std::vector<std::string_view> kReservedLabels = {"alertname", "severity"};
// Template names that are not labels.
const std::vector<std::string_view> kTemplateNumbers = {"value", "threshold"};

template <typename E>
std::optional<E> EnumOf(const std::vector<std::string_view>& names, std::string_view s) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == s) return static_cast<E>(i);
  }
  return std::nullopt;
}

bool IsLabelName(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(s[0])) return false;
  for (char c : s) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return !(s.size() >= 2 && s[0] == '_' && s[1] == '_');
}

// ---- Templates ------------------------------------------------------------------------

struct Piece {
  bool placeholder = false;
  std::string text;  // literal text, or the placeholder's name
};

// Splits `text` into literal text and {{placeholders}}. On a malformed placeholder
// returns false with `error` saying what is wrong.
bool SplitTemplate(std::string_view text, std::vector<Piece>& out, std::string& error) {
  out.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t open = text.find("{{", pos);
    if (open == std::string_view::npos) {
      out.push_back({false, std::string(text.substr(pos))});
      break;
    }
    if (open > pos) out.push_back({false, std::string(text.substr(pos, open - pos))});
    size_t close = text.find("}}", open + 2);
    if (close == std::string_view::npos) {
      error = "has {{ without a closing }}";
      return false;
    }
    std::string_view inner = text.substr(open + 2, close - open - 2);
    while (!inner.empty() && inner.front() == ' ') inner.remove_prefix(1);
    while (!inner.empty() && inner.back() == ' ') inner.remove_suffix(1);
    std::string_view name = inner;
    if (name.starts_with("$labels.")) {
      name.remove_prefix(8);
    } else if (name.starts_with("$")) {
      name.remove_prefix(1);
    }
    if (!IsLabelName(name)) {
      error = "has " + QuoteForMessage(text.substr(open, close + 2 - open)) +
              ", which is not a placeholder; write {{label}}, {{value}} or {{threshold}}";
      return false;
    }
    out.push_back({true, std::string(name)});
    pos = close + 2;
  }
  return true;
}

// ---- The reader -----------------------------------------------------------------------

class RulesReader : public YamlFieldReader {
 public:
  explicit RulesReader(std::string_view file) : YamlFieldReader(file) {}

  void Read(const YAML::Node& root, RuleFile& out) {
    if (root.IsNull()) return;  // an empty file: no rules, no limits
    if (!root.IsMap()) {
      Error(
          root, "",
          "a rules file must be a map with rules: (and optionally limits:), got " + KindName(root));
      return;
    }
    ForEachField(root, "", kTopFields, [&](const std::string& key, const YAML::Node& v) {
      if (key == "rules") {
        ReadRules(v, out.rules);
      } else if (key == "limits") {
        ReadLimits(v, out.limits);
      }
    });
  }

 private:
  static std::string Path(const std::string& prefix, std::string_view key) {
    return prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
  }

  bool Number(const YAML::Node& v, const std::string& field, double& out) {
    if (!Scalar(v, field, "a number")) return false;
    const std::string& s = v.Scalar();
    double d = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(d)) {
      Error(v, field, "must be a number, got " + QuoteForMessage(s));
      return false;
    }
    out = d;
    return true;
  }

  bool WholeNumber(const YAML::Node& v, const std::string& field, int lo, int hi, int& out) {
    return IntAs(v, field, lo, hi, out, IntWording{"a whole number", /*between=*/true});
  }

  // A duration between `lo` and kMaxWindow.
  bool BoundedDuration(const YAML::Node& v, const std::string& field, Duration lo, Duration& out) {
    Duration d{0};
    if (!DurationField(v, field, d, "a duration such as \"5m\"")) return false;
    if (d < lo || d > kMaxWindow) {
      Error(v, field,
            "must be between " + FormatDuration(lo) + " and " + FormatDuration(kMaxWindow) +
                ", got " + QuoteForMessage(v.Scalar()));
      return false;
    }
    out = d;
    return true;
  }

  // One of `names`, as an enum; the error lists them and suggests the closest.
  template <typename E>
  bool EnumChoice(const YAML::Node& v, const std::string& field,
                  const std::vector<std::string_view>& names, E& out) {
    auto i = ChoiceIndex(v, field, names, " or ");
    if (!i) return false;
    out = static_cast<E>(*i);
    return true;
  }

  // Labels or annotations: their names must be label names; `reserve` refuses the ones
  // the engine sets itself.
  void LabelMap(const YAML::Node& v, const std::string& field, bool reserve, Labels& out) {
    if (v.IsMap() && v.size() > kMaxLabels) {
      Error(v, field,
            "has " + std::to_string(v.size()) + " entries; at most " + std::to_string(kMaxLabels) +
                " are accepted");
      return;
    }
    StringMap(v, field, out, "names", [&](const YAML::Node& key, const std::string& f) {
      if (!IsLabelName(key.Scalar())) {
        Error(key, f,
              "is not a valid name: use letters, digits and '_', not starting with a digit "
              "or \"__\"");
        return false;
      }
      if (reserve && std::find(kReservedLabels.begin(), kReservedLabels.end(), key.Scalar()) !=
                         kReservedLabels.end()) {
        Error(key, f,
              "is set by the engine (alertname is the rule's name, severity its severity: "
              "field); remove it");
        return false;
      }
      return true;
    });
  }

  void ReadRules(const YAML::Node& v, std::vector<Rule>& out) {
    if (!v.IsSequence()) {
      Error(v, "rules", "must be a list of rules (- name: ...), got " + KindName(v));
      return;
    }
    if (v.size() > kMaxRules) {
      Error(v, "rules",
            "has " + std::to_string(v.size()) + " rules; at most " + std::to_string(kMaxRules) +
                " are accepted");
      return;
    }
    std::map<std::string, int> first_line;
    for (size_t i = 0; i < v.size(); ++i) {
      Rule rule;
      if (!ReadRule(v[i], i, rule)) continue;
      const int line = LineOfNode(v[i]);
      auto [it, inserted] = first_line.emplace(rule.name, line);
      if (!inserted) {
        Error(v[i]["name"], "rules[" + std::to_string(i) + "].name",
              "rule " + QuoteForMessage(rule.name) + " is defined twice (first at line " +
                  std::to_string(it->second) + "); give each rule a unique name");
        continue;
      }
      out.push_back(std::move(rule));
    }
  }

  // Reads rules[index]; false when it has errors (they are recorded).
  bool ReadRule(const YAML::Node& n, size_t index, Rule& rule) {
    const size_t errors_before = errors().size();
    std::string prefix = "rules[" + std::to_string(index) + "]";
    if (!n.IsMap()) {
      Error(n, prefix, "must be a map with name, signal, condition, ..., got " + KindName(n));
      return false;
    }
    rule.origin = file() + ":" + std::to_string(LineOfNode(n));
    // The name goes first, so that every message about this rule can use it.
    const YAML::Node name = n["name"];
    if (!name.IsDefined() || name.IsNull()) {
      Error(n, prefix + ".name", "is required: every rule needs a name (e.g. GpuTooHot)");
    } else if (Scalar(name, prefix + ".name", "a name such as GpuTooHot")) {
      Status s = ValidateName(prefix + ".name", name.Scalar());
      if (s.ok()) {
        rule.name = name.Scalar();
        prefix = rule.name;
      } else {
        Error(name, "", s.message());
      }
    }

    bool has_signal = false;
    bool has_condition = false;
    YAML::Node signal_node, action_node, annotations_node;
    ForEachField(n, prefix, kRuleFields, [&](const std::string& key, const YAML::Node& v) {
      const std::string f = Path(prefix, key);
      if (key == "signal") {
        signal_node = v;
        has_signal = ReadSignal(v, f, rule.signal);
      } else if (key == "condition") {
        has_condition = ReadCondition(v, f, rule.condition);
      } else if (key == "for") {
        BoundedDuration(v, f, Duration(0), rule.for_duration);
      } else if (key == "keep_firing_for") {
        BoundedDuration(v, f, Duration(0), rule.keep_firing_for);
      } else if (key == "severity") {
        EnumChoice(v, f, kSeverities, rule.severity);
      } else if (key == "labels") {
        LabelMap(v, f, /*reserve=*/true, rule.labels);
      } else if (key == "annotations") {
        annotations_node = v;
        LabelMap(v, f, /*reserve=*/false, rule.annotations);
      } else if (key == "action") {
        action_node = v;
        ReadAction(v, f, rule.action);
      } else if (key == "enabled") {
        Bool(v, f, rule.enabled);
      }
    });
    // A rule that only switches a default off (`- {name: X, enabled: false}`) needs
    // nothing else.
    if (rule.enabled || n["signal"].IsDefined() || n["condition"].IsDefined()) {
      if (!n["signal"].IsDefined() || n["signal"].IsNull()) {
        Error(n, prefix + ".signal",
              "is required: the signal the rule watches, one of " +
                  JoinNames(SignalNames([](const SignalInfo&) { return true; })));
      }
      if (!n["condition"].IsDefined() || n["condition"].IsNull()) {
        Error(n, prefix + ".condition",
              "is required: one of " + JoinNames(kConditionKinds, " or ") +
                  ", e.g. {threshold_above: 85}");
      }
    }
    if (has_signal && has_condition) {
      const SignalInfo& signal = *FindSignal(rule.signal);
      CheckConditionFits(n["condition"], prefix + ".condition", rule.condition, signal);
      CheckActionFits(action_node.IsDefined() ? action_node : signal_node, prefix + ".action",
                      rule.action, signal);
      CheckTemplates(annotations_node, prefix + ".annotations", rule, signal);
    }
    return errors().size() == errors_before;
  }

  bool ReadSignal(const YAML::Node& v, const std::string& field, std::string& out) {
    const std::vector<std::string_view> all = SignalNames([](const SignalInfo&) { return true; });
    if (!Scalar(v, field, "a signal name such as gpu.temp_c")) return false;
    if (FindSignal(v.Scalar()) == nullptr) {
      std::string msg = "unknown signal " + QuoteForMessage(v.Scalar());
      if (std::string hint = ClosestMatch(v.Scalar(), all); !hint.empty()) {
        msg += "; did you mean " + hint + "?";
      } else {
        msg += ".";
      }
      msg += " Known signals: " + JoinNames(all);
      Error(v, field, msg);
      return false;
    }
    out = v.Scalar();
    return true;
  }

  bool ReadCondition(const YAML::Node& v, const std::string& field, Condition& c) {
    if (!v.IsMap()) {
      Error(v, field,
            "must be a map naming one test (" + JoinNames(kConditionKinds, " or ") +
                "), e.g. {threshold_above: 85}, got " + KindName(v));
      return false;
    }
    const size_t errors_before = errors().size();
    std::vector<std::string> kinds;
    std::optional<Duration> window;
    std::optional<int> min_points;
    std::optional<double> min_stddev;
    ForEachField(v, field, kConditionFields, [&](const std::string& key, const YAML::Node& x) {
      const std::string f = Path(field, key);
      if (auto kind = EnumOf<ConditionKind>(kConditionKinds, key)) {
        kinds.push_back(key);
        c.kind = *kind;
        switch (*kind) {
          case ConditionKind::kNan: {
            bool on = false;
            if (Bool(x, f, on) && !on) {
              Error(x, f, "must be true (nan: true matches NaN or infinite values)");
            }
            break;
          }
          case ConditionKind::kAbsentFor:
            BoundedDuration(x, f, std::chrono::seconds(1), c.absent_for);
            break;
          case ConditionKind::kZscoreAbove:
            if (Number(x, f, c.threshold) && c.threshold <= 0) {
              Error(x, f, "must be > 0 (standard deviations above the mean), got " + x.Scalar());
            }
            break;
          case ConditionKind::kRateAbove:
          case ConditionKind::kIncreaseAbove:
            if (Number(x, f, c.threshold) && c.threshold < 0) {
              Error(x, f, "must be >= 0 (a counter never decreases), got " + x.Scalar());
            }
            break;
          default:
            Number(x, f, c.threshold);
        }
      } else if (key == "window") {
        Duration d{0};
        if (BoundedDuration(x, f, std::chrono::seconds(1), d)) window = d;
      } else if (key == "min_points") {
        int n = 0;
        if (WholeNumber(x, f, 2, 1000000, n)) min_points = n;
      } else if (key == "min_stddev") {
        double d = 0;
        if (Number(x, f, d)) {
          if (d < 0) {
            Error(x, f, "must be >= 0, got " + x.Scalar());
          } else {
            min_stddev = d;
          }
        }
      }
    });
    if (kinds.empty()) {
      if (errors().size() > errors_before) return false;  // e.g. a misspelt test, reported
      Error(v, field,
            "names no test; give one of " + JoinNames(kConditionKinds, " or ") +
                ", e.g. {threshold_above: 85}");
      return false;
    }
    if (kinds.size() > 1) {
      Error(v, field,
            "gives both " + kinds[0] + " and " + kinds[1] +
                "; a rule tests one thing (write two rules for two tests)");
      return false;
    }
    const std::string kind = kinds[0];
    const bool needs_window = c.kind == ConditionKind::kRateAbove ||
                              c.kind == ConditionKind::kIncreaseAbove ||
                              c.kind == ConditionKind::kZscoreAbove;
    if (window) {
      if (c.kind == ConditionKind::kAbsentFor) {
        Error(v["window"], Path(field, "window"),
              "absent_for takes no window (its duration is how long to wait); remove it");
      }
      c.window = *window;
    } else if (needs_window) {
      Error(v, Path(field, "window"),
            "is required for " + kind + ": the span of samples it reads, e.g. window: 10m");
    }
    if (c.kind == ConditionKind::kAbsentFor) c.window = c.absent_for;
    if (min_points) {
      if (c.kind != ConditionKind::kZscoreAbove) {
        Error(v["min_points"], Path(field, "min_points"),
              "applies to zscore_above only, not " + kind + "; remove it");
      }
      c.min_points = *min_points;
    }
    if (min_stddev) {
      if (c.kind != ConditionKind::kZscoreAbove) {
        Error(v["min_stddev"], Path(field, "min_stddev"),
              "applies to zscore_above only, not " + kind + "; remove it");
      }
      c.min_stddev = *min_stddev;
    }
    return errors().size() == errors_before;
  }

  void CheckConditionFits(const YAML::Node& at, const std::string& field, const Condition& c,
                          const SignalInfo& signal) {
    const std::string kind(ConditionKindName(c.kind));
    const bool reads_counter =
        c.kind == ConditionKind::kRateAbove || c.kind == ConditionKind::kIncreaseAbove;
    const bool reads_raw = c.kind == ConditionKind::kThresholdAbove ||
                           c.kind == ConditionKind::kThresholdBelow ||
                           c.kind == ConditionKind::kZscoreAbove;
    if (reads_counter && !signal.counter) {
      Error(at, field,
            kind + " needs a counter signal (" +
                JoinNames(SignalNames([](const SignalInfo& s) { return s.counter; })) + "); " +
                std::string(signal.name) + " is not one: use threshold_above or zscore_above");
    }
    if (reads_raw && signal.counter) {
      Error(at, field,
            kind + " reads the raw value, but " + std::string(signal.name) +
                " is a counter (it only grows, and restarts at 0 with the agent); use "
                "rate_above or increase_above");
    }
  }

  void CheckActionFits(const YAML::Node& at, const std::string& field, ActionKind action,
                       const SignalInfo& signal) {
    const std::string kind(ActionKindName(action));
    if ((action == ActionKind::kCordonNode || action == ActionKind::kRequeueExcludingNode) &&
        !SignalNamesNode(signal)) {
      Error(at, field,
            kind + " needs a signal whose series name a node (" +
                JoinNames(SignalNames([](const SignalInfo& s) { return SignalNamesNode(s); })) +
                "); " + std::string(signal.name) + " is job-wide: use notify or " +
                "request_checkpoint");
    }
    if (action == ActionKind::kRequestCheckpoint && signal.scope != SignalScope::kJob) {
      Error(at, field,
            kind + " needs a job signal (job.*); " + std::string(signal.name) +
                " is about a node, not a job: use notify or cordon_node");
    }
  }

  void CheckTemplates(const YAML::Node& at, const std::string& field, const Rule& rule,
                      const SignalInfo& signal) {
    std::vector<std::string_view> names(signal.labels.begin(), signal.labels.end());
    for (const auto& [k, v] : rule.labels) names.push_back(k);
    names.insert(names.end(), kReservedLabels.begin(), kReservedLabels.end());
    names.insert(names.end(), kTemplateNumbers.begin(), kTemplateNumbers.end());
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (const auto& [key, text] : rule.annotations) {
      const std::string f = field + "." + PathKey(key);
      const YAML::Node node = at.IsDefined() ? at[key] : at;
      std::vector<Piece> pieces;
      std::string error;
      if (!SplitTemplate(text, pieces, error)) {
        Error(node, f, error);
        continue;
      }
      for (const Piece& p : pieces) {
        if (!p.placeholder) continue;
        if (std::find(names.begin(), names.end(), p.text) != names.end()) continue;
        std::string msg =
            "{{" + p.text + "}} names no label of " + std::string(signal.name) + " or the rule";
        if (std::string hint = ClosestMatch(p.text, names); !hint.empty()) {
          msg += "; did you mean {{" + hint + "}}?";
        } else {
          msg += ".";
        }
        msg += " Placeholders available: " + JoinNames(names);
        Error(node, f, msg);
      }
    }
  }

  void ReadAction(const YAML::Node& v, const std::string& field, ActionKind& out) {
    if (v.IsScalar()) {
      EnumChoice(v, field, kActionKinds, out);
      return;
    }
    if (!v.IsMap()) {
      Error(v, field,
            "must be a map such as {kind: cordon_node}, got " + KindName(v) + "; kinds are " +
                JoinNames(kActionKinds));
      return;
    }
    ForEachField(v, field, kActionFields, [&](const std::string& key, const YAML::Node& x) {
      if (key == "kind") EnumChoice(x, Path(field, key), kActionKinds, out);
    });
  }

  void ReadLimits(const YAML::Node& v, std::map<ActionKind, LimitOverride>& out) {
    if (!v.IsMap()) {
      Error(v, "limits",
            "must be a map from action to its limits, e.g. {cordon_node: {max_per_hour: 3}}, "
            "got " +
                KindName(v));
      return;
    }
    std::set<std::string> seen;
    for (const auto& kv : v) {
      if (!kv.first.IsScalar()) {
        Error(kv.first, "limits", "keys must be action names, got " + KindName(kv.first));
        continue;
      }
      const std::string& name = kv.first.Scalar();
      const std::string f = "limits." + PathKey(name);
      auto kind = EnumOf<ActionKind>(kActionKinds, name);
      if (!kind || *kind == ActionKind::kNotify) {
        std::string msg = kind ? "notify has no limits" : "unknown action";
        if (std::string hint = ClosestMatch(name, kLimitedActions); !kind && !hint.empty()) {
          msg += "; did you mean " + hint + "? Limits apply to ";
        } else {
          msg += "; limits apply to ";
        }
        msg += JoinNames(kLimitedActions);
        Error(kv.first, f, msg);
        continue;
      }
      if (!seen.insert(name).second) {
        Error(kv.first, f, "appears more than once; give each action's limits once");
        continue;
      }
      if (kv.second.IsNull()) continue;
      if (!Map(kv.second, f, kLimitFields)) continue;
      LimitOverride& limit = out[*kind];
      ForEachField(kv.second, f, kLimitFields, [&](const std::string& key, const YAML::Node& x) {
        const std::string lf = Path(f, key);
        int n = 0;
        if (key == "max_per_hour") {
          if (WholeNumber(x, lf, 0, kMaxPerHourCeiling, n)) limit.max_per_hour = n;
        } else if (key == "max_cordoned") {
          if (*kind != ActionKind::kCordonNode) {
            Error(x, lf, "applies to cordon_node only; remove it");
          } else if (WholeNumber(x, lf, 0, kMaxPerHourCeiling, n)) {
            limit.max_cordoned = n;
          }
        }
      });
    }
  }
};

std::string JoinDiagnostics(const std::vector<Diagnostic>& ds) {
  std::string out;
  for (const Diagnostic& d : ds) {
    if (!out.empty()) out += '\n';
    out += d.ToString();
  }
  return out;
}

}  // namespace

// ---- Public functions -----------------------------------------------------------------

const std::vector<SignalInfo>& Signals() { return SignalTable(); }

const SignalInfo* FindSignal(std::string_view name) {
  for (const SignalInfo& s : SignalTable()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool SignalNamesNode(const SignalInfo& signal) {
  return std::find(signal.labels.begin(), signal.labels.end(), "node") != signal.labels.end();
}

std::string_view ConditionKindName(ConditionKind kind) {
  return kConditionKinds[static_cast<size_t>(kind)];
}
std::string_view SeverityName(Severity s) { return kSeverities[static_cast<size_t>(s)]; }
std::string_view ActionKindName(ActionKind a) { return kActionKinds[static_cast<size_t>(a)]; }

std::map<ActionKind, ActionLimit> DefaultActionLimits() {
  return {
      {ActionKind::kCordonNode, ActionLimit{3, 2}},
      {ActionKind::kRequeueExcludingNode, ActionLimit{5, kNoLimit}},
      {ActionKind::kRequestCheckpoint, ActionLimit{20, kNoLimit}},
  };
}

const Rule* RuleSet::Find(std::string_view name) const {
  for (const Rule& r : rules) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

RulesParseResult ParseRules(std::string_view text, std::string_view file) {
  RulesParseResult result;
  RulesReader reader(file);
  auto line_at = [&](size_t offset) {
    return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
  };
  if (text.size() > kMaxRulesBytes) {
    reader.ErrorAtLine(0, "",
                       "rules file is " + std::to_string(text.size()) + " bytes; at most " +
                           std::to_string(kMaxRulesBytes) + " are accepted");
  } else if (auto nul = text.find('\0'); nul != std::string_view::npos) {
    reader.ErrorAtLine(line_at(nul), "", "rules file contains a NUL byte; it must be UTF-8 text");
  } else if (auto bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    reader.ErrorAtLine(
        line_at(bad), "",
        "rules file is not valid UTF-8 (bad byte at offset " + std::to_string(bad) + ")");
  } else {
    RuleFile out;
    try {
      YamlText yaml = LoadYamlText(text);
      if (yaml.documents > 1) {
        reader.ErrorAtLine(0, "",
                           "holds " + DocumentCount(yaml) + "; put every rule in one document");
      } else if (yaml.documents == 1) {
        reader.Read(yaml.first, out);
      }
    } catch (const YAML::Exception& e) {
      ReportYamlError(reader, e);
    }
    if (reader.errors().empty()) result.file = std::move(out);
  }
  result.errors = std::move(reader.errors());
  return result;
}

Result<RuleSet> LoadRules(std::string_view default_text, std::string_view user_text,
                          std::string_view user_file) {
  RulesParseResult defaults = ParseRules(default_text, kDefaultRulesFile);
  RulesParseResult user = ParseRules(user_text, user_file);
  std::vector<Diagnostic> errors = defaults.errors;
  errors.insert(errors.end(), user.errors.begin(), user.errors.end());
  if (!errors.empty()) return InvalidArgument(JoinDiagnostics(errors));

  std::vector<Rule> merged = std::move(defaults.file->rules);
  for (Rule& r : user.file->rules) {
    auto same =
        std::find_if(merged.begin(), merged.end(), [&](const Rule& d) { return d.name == r.name; });
    if (same != merged.end()) {
      *same = std::move(r);
    } else {
      merged.push_back(std::move(r));
    }
  }
  RuleSet set;
  for (Rule& r : merged) {
    if (r.enabled) {
      set.rules.push_back(std::move(r));
    } else {
      set.disabled.push_back(r.name);
    }
  }
  set.limits = DefaultActionLimits();
  for (const RuleFile* f : {&*defaults.file, &*user.file}) {
    for (const auto& [kind, o] : f->limits) {
      if (o.max_per_hour) set.limits[kind].max_per_hour = *o.max_per_hour;
      if (o.max_cordoned) set.limits[kind].max_cordoned = *o.max_cordoned;
    }
  }
  return set;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  TY_CHECK(ec == std::errc());
  return std::string(buf, ptr);
}

std::string ExpandTemplate(std::string_view text, const Labels& labels, double value,
                           double threshold) {
  std::vector<Piece> pieces;
  std::string error;
  if (!SplitTemplate(text, pieces, error)) return std::string(text);
  std::string out;
  for (const Piece& p : pieces) {
    if (!p.placeholder) {
      out += p.text;
    } else if (auto it = labels.find(p.text); it != labels.end()) {
      out += it->second;
    } else if (p.text == "value") {
      out += FormatValue(value);
    } else if (p.text == "threshold") {
      out += FormatValue(threshold);
    }
  }
  return out;
}

}  // namespace trainyard::monitor
