// Alert rules: what to watch, when it is wrong, and what to do about it.
//
// A rules file is YAML in the spirit of Prometheus alerting rules, but over
// Trainyard's own signals (job.loss, gpu.temp_c, ...) rather than PromQL:
//
//   limits:
//     cordon_node: {max_per_hour: 3, max_cordoned: 2}
//   rules:
//     - name: GradNormSpike
//       signal: job.grad_norm
//       condition: {zscore_above: 6, window: 10m, min_points: 50}
//       for: 0s
//       keep_firing_for: 10m
//       severity: warning
//       labels: {team: ml}
//       annotations: {summary: "grad norm of job {{job_id}} jumped to {{value}}"}
//       action: {kind: request_checkpoint}
//
// ParseRules reads one file and reports every problem, each naming the file:line, the
// rule, the field, the bad value and what would be valid. LoadRules merges the built-in
// defaults (DefaultRulesYaml) with a user file: a user rule replaces the default of the
// same name, and `enabled: false` switches one off. docs/alerts.md is the user's guide.
//
// Which actions fit which signals: cordon_node and requeue_excluding_node need to know
// a node, so they are accepted on node-scoped signals (gpu.*, link.*, node.*) and on
// per-rank job signals, whose samples carry the `node` the rank runs on (the server
// attaches it from the job's placement). request_checkpoint needs a job, so it is
// accepted on job signals only. notify fits everything.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_spec.h"  // Diagnostic
#include "core/status.h"
#include "core/units.h"

namespace trainyard::monitor {

// Label name -> value; ordered, so that iteration (and everything built from it) is
// deterministic.
using Labels = std::map<std::string, std::string>;

// ---- Signals --------------------------------------------------------------------------

enum class SignalScope { kJob, kNode };

struct SignalInfo {
  std::string_view name;
  SignalScope scope = SignalScope::kJob;
  // A counter only grows, and restarts from zero when its source restarts: rules read
  // it through rate_above / increase_above, never its raw value.
  bool counter = false;
  // The labels every series of this signal carries.
  std::vector<std::string_view> labels;
  std::string_view unit;     // "ratio", "seconds", "percent", ...
  std::string_view meaning;  // one line, for docs and error messages
};

// Every signal, in the order docs/alerts.md lists them.
const std::vector<SignalInfo>& Signals();
// nullptr when `name` is not a signal.
const SignalInfo* FindSignal(std::string_view name);
// True when the signal's series carry a `node` label (what node actions need).
bool SignalNamesNode(const SignalInfo& signal);

// ---- Rules ----------------------------------------------------------------------------

enum class ConditionKind {
  kThresholdAbove,  // latest value > threshold
  kThresholdBelow,  // latest value < threshold
  kRateAbove,       // counter increase over the window, per second, > threshold
  kIncreaseAbove,   // counter increase over the window > threshold
  kZscoreAbove,     // (latest - mean) / stddev of the window before it > threshold
  kNan,             // latest value is NaN or infinite
  kAbsentFor,       // a series seen before has had no sample for absent_for
};
std::string_view ConditionKindName(ConditionKind kind);  // "threshold_above", ...

// How far back threshold_* and nan look for "the latest value" when no window is
// given: a series with no sample that recent is stale and does not match.
inline constexpr Duration kDefaultLookback = std::chrono::minutes(5);
// zscore_above needs this many points before the latest unless min_points says.
inline constexpr int kDefaultMinPoints = 30;
// zscore_above never divides by less than this fraction of |mean| (nor by less than
// min_stddev): a flat series must move by a few percent, not a few ulps, to spike.
inline constexpr double kRelativeStddevFloor = 0.01;

struct Condition {
  ConditionKind kind = ConditionKind::kThresholdAbove;
  double threshold = 0;                // the number after the kind (z for zscore_above)
  Duration window = kDefaultLookback;  // the span of samples the condition reads
  Duration absent_for{0};              // kAbsentFor only
  int min_points = kDefaultMinPoints;  // kZscoreAbove only
  double min_stddev = 0;               // kZscoreAbove only

  bool operator==(const Condition&) const = default;
};

enum class Severity { kInfo, kWarning, kCritical };
std::string_view SeverityName(Severity s);  // "info", "warning", "critical"

enum class ActionKind { kNotify, kCordonNode, kRequeueExcludingNode, kRequestCheckpoint };
std::string_view ActionKindName(ActionKind a);  // "notify", "cordon_node", ...

struct Rule {
  std::string name;    // becomes the alertname label
  std::string signal;  // a name from Signals()
  Condition condition;
  Duration for_duration{0};     // condition true this long before pending turns firing
  Duration keep_firing_for{0};  // firing stays firing this long after the condition clears
  Severity severity = Severity::kWarning;
  Labels labels;       // added to every alert of the rule
  Labels annotations;  // templates: {{label}}, {{value}}, {{threshold}}
  ActionKind action = ActionKind::kNotify;
  bool enabled = true;
  std::string origin;  // "alert-rules.yaml:12", where the rule was written

  bool operator==(const Rule&) const = default;
};

// Safety limits on automatic actions. kNoLimit switches a limit off; 0 forbids the
// action outright (every request is suppressed).
inline constexpr int kNoLimit = -1;
struct ActionLimit {
  int max_per_hour = kNoLimit;  // requests let through in any 60-minute span
  int max_cordoned = kNoLimit;  // cordon_node only: nodes cordoned by alerts at once
  bool operator==(const ActionLimit&) const = default;
};
// The limits that hold when no rules file sets them.
std::map<ActionKind, ActionLimit> DefaultActionLimits();

struct RuleSet {
  std::vector<Rule> rules;                   // enabled rules, defaults first, file order
  std::map<ActionKind, ActionLimit> limits;  // one entry for every action but notify
  std::vector<std::string> disabled;         // names switched off with enabled: false

  const Rule* Find(std::string_view name) const;
};

// The limits one file sets; fields it leaves out are unset.
struct LimitOverride {
  std::optional<int> max_per_hour;
  std::optional<int> max_cordoned;
  bool operator==(const LimitOverride&) const = default;
};

// One rules file as written.
struct RuleFile {
  std::vector<Rule> rules;  // including those with enabled: false
  std::map<ActionKind, LimitOverride> limits;
};

struct RulesParseResult {
  std::optional<RuleFile> file;    // set when there is no error
  std::vector<Diagnostic> errors;  // "rules.yaml:9: GradNormSpike.signal: unknown signal ..."
  bool ok() const { return file.has_value(); }
};

// Parses and validates one rules file; `file` is used only in messages. Empty text is
// an empty file (no rules, no limits).
RulesParseResult ParseRules(std::string_view text, std::string_view file);

// The built-in rule set (docs/alerts.md lists and explains every rule).
std::string_view DefaultRulesYaml();
inline constexpr std::string_view kDefaultRulesFile = "<default rules>";

// Merges the defaults with the user's file: a user rule replaces the default rule of
// the same name in place, other user rules follow the defaults, rules with
// enabled: false are dropped (and named in `disabled`), and limits the user sets
// override those of the defaults field by field. Every problem in either text is in
// the error, one per line.
Result<RuleSet> LoadRules(std::string_view default_text, std::string_view user_text,
                          std::string_view user_file = "alert-rules.yaml");

// ---- Annotation templates -------------------------------------------------------------

// Expands {{name}} (also {{ name }}, {{ $labels.name }}) from `labels`, and {{value}}
// ({{ $value }}) and {{threshold}} from the numbers. A name with no label expands to
// "" (ParseRules rejects such names up front, so that only happens for labels a
// series failed to carry).
std::string ExpandTemplate(std::string_view text, const Labels& labels, double value,
                           double threshold);

// A number as templates and messages show it: shortest form that reads back the same
// ("6", "0.25", "1e-07"), "NaN", "+Inf", "-Inf".
std::string FormatValue(double v);

}  // namespace trainyard::monitor
