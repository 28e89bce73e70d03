#include "monitor/rules.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace trainyard::monitor {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

std::vector<std::string> Errors(std::string_view text) {
  std::vector<std::string> out;
  for (const Diagnostic& d : ParseRules(text, "r.yaml").errors) out.push_back(d.ToString());
  return out;
}

// One rule around `body` (the lines after `- name: R`, indented by four).
std::string OneRule(std::string_view body) { return "rules:\n  - name: R\n" + std::string(body); }

TEST(RulesTest, ParsesEveryField) {
  auto r = ParseRules(R"(rules:
  - name: GradNormSpike
    signal: job.grad_norm
    condition: {zscore_above: 6, window: 10m, min_points: 50, min_stddev: 0.01}
    for: 1m
    keep_firing_for: 5m
    severity: critical
    labels: {team: ml}
    annotations: {summary: "grad norm of job {{job_id}} jumped to {{value}}", runbook: "see docs"}
    action: {kind: request_checkpoint}
)",
                      "r.yaml");
  ASSERT_TRUE(r.ok()) << r.errors[0].ToString();
  ASSERT_EQ(r.file->rules.size(), 1u);
  const Rule& rule = r.file->rules[0];
  EXPECT_EQ(rule.name, "GradNormSpike");
  EXPECT_EQ(rule.signal, "job.grad_norm");
  EXPECT_EQ(rule.condition.kind, ConditionKind::kZscoreAbove);
  EXPECT_EQ(rule.condition.threshold, 6);
  EXPECT_EQ(rule.condition.window, minutes(10));
  EXPECT_EQ(rule.condition.min_points, 50);
  EXPECT_EQ(rule.condition.min_stddev, 0.01);
  EXPECT_EQ(rule.for_duration, minutes(1));
  EXPECT_EQ(rule.keep_firing_for, minutes(5));
  EXPECT_EQ(rule.severity, Severity::kCritical);
  EXPECT_EQ(rule.labels, (Labels{{"team", "ml"}}));
  EXPECT_EQ(rule.annotations.at("summary"), "grad norm of job {{job_id}} jumped to {{value}}");
  EXPECT_EQ(rule.action, ActionKind::kRequestCheckpoint);
  EXPECT_TRUE(rule.enabled);
  EXPECT_EQ(rule.origin, "r.yaml:2");
}

TEST(RulesTest, DefaultsOfOptionalFields) {
  auto r = ParseRules(OneRule("    signal: gpu.temp_c\n    condition: {threshold_above: 85}\n"),
                      "r.yaml");
  ASSERT_TRUE(r.ok());
  const Rule& rule = r.file->rules[0];
  EXPECT_EQ(rule.condition.window, kDefaultLookback);
  EXPECT_EQ(rule.for_duration, seconds(0));
  EXPECT_EQ(rule.keep_firing_for, seconds(0));
  EXPECT_EQ(rule.severity, Severity::kWarning);
  EXPECT_EQ(rule.action, ActionKind::kNotify);
}

TEST(RulesTest, EveryConditionKindParses) {
  struct Case {
    std::string signal, condition;
    ConditionKind kind;
    double threshold;
    Duration window;
  };
  const std::vector<Case> cases = {
      {"gpu.temp_c", "{threshold_above: 85, window: 1m}", ConditionKind::kThresholdAbove, 85,
       minutes(1)},
      {"node.disk_free_ratio", "{threshold_below: 0.1}", ConditionKind::kThresholdBelow, 0.1,
       kDefaultLookback},
      {"link.errors", "{rate_above: 0.5, window: 10m}", ConditionKind::kRateAbove, 0.5,
       minutes(10)},
      {"gpu.xid_count", "{increase_above: 0, window: 10m}", ConditionKind::kIncreaseAbove, 0,
       minutes(10)},
      {"job.loss", "{zscore_above: 4, window: 15m}", ConditionKind::kZscoreAbove, 4, minutes(15)},
      {"job.loss", "{nan: true}", ConditionKind::kNan, 0, kDefaultLookback},
      {"gpu.temp_c", "{absent_for: 5m}", ConditionKind::kAbsentFor, 0, minutes(5)},
  };
  for (const Case& c : cases) {
    auto r = ParseRules(
        OneRule("    signal: " + c.signal + "\n    condition: " + c.condition + "\n"), "r.yaml");
    ASSERT_TRUE(r.ok()) << c.condition << ": " << r.errors[0].ToString();
    const Condition& got = r.file->rules[0].condition;
    EXPECT_EQ(got.kind, c.kind) << c.condition;
    EXPECT_EQ(got.threshold, c.threshold) << c.condition;
    EXPECT_EQ(got.window, c.window) << c.condition;
  }
  auto absent =
      ParseRules(OneRule("    signal: gpu.temp_c\n    condition: {absent_for: 5m}\n"), "r.yaml");
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(absent.file->rules[0].condition.absent_for, minutes(5));
}

TEST(RulesTest, ActionAsAPlainWord) {
  auto r = ParseRules(OneRule("    signal: gpu.ecc_uncorrectable\n"
                              "    condition: {increase_above: 0, window: 10m}\n"
                              "    action: cordon_node\n"),
                      "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.file->rules[0].action, ActionKind::kCordonNode);
}

TEST(RulesTest, EmptyTextIsAnEmptyFile) {
  auto r = ParseRules("", "r.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.file->rules.empty());
  EXPECT_TRUE(r.file->limits.empty());
  EXPECT_TRUE(ParseRules("# nothing here\n", "r.yaml").ok());
  EXPECT_TRUE(ParseRules("rules: []\n", "r.yaml").ok());
}

TEST(RulesTest, UnknownSignalListsTheKnownOnes) {
  EXPECT_EQ(
      Errors(OneRule("    signal: job.gradnorm\n    condition: {threshold_above: 1}\n")),
      std::vector<std::string>{
          "r.yaml:3: R.signal: unknown signal \"job.gradnorm\"; did you mean job.grad_norm? "
          "Known signals: job.loss, job.grad_norm, job.lr, job.step_time_s, job.tokens_per_s, "
          "job.data_wait_s, job.mfu, job.gpu_util, job.rank_step_time_ratio, "
          "job.checkpoint_age_ratio, job.checkpoint_write_s, job.progress_age_s, "
          "job.pending_ratio, gpu.util, gpu.temp_c, gpu.throttled, gpu.xid_count, "
          "gpu.ecc_uncorrectable, link.errors, link.down, node.heartbeat_age_s, "
          "node.disk_free_ratio"});
}

TEST(RulesTest, FieldErrorsNameFileLineRuleFieldValueAndFix) {
  // Each case: rule body -> the one expected message.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 85}\n    severty: info\n",
       "r.yaml:5: R.severty: unknown field; did you mean severity?"},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 85}\n    severity: warn\n",
       "r.yaml:5: R.severity: must be one of info, warning or critical, got \"warn\"; did you "
       "mean warning?"},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 85}\n    for: 5 minutes\n",
       "r.yaml:5: R.for: expected a duration such as \"90s\", \"30m\", \"1h30m\", \"2d\" or "
       "\"HH:MM:SS\", got \"5 minutes\""},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 85}\n    for: 30d\n",
       "r.yaml:5: R.for: must be between 0s and 7d, got \"30d\""},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: hot}\n",
       "r.yaml:4: R.condition.threshold_above: must be a number, got \"hot\""},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 85, rate_above: 1}\n",
       "r.yaml:4: R.condition: gives both threshold_above and rate_above; a rule tests one thing "
       "(write two rules for two tests)"},
      {"    signal: gpu.temp_c\n    condition: {window: 5m}\n",
       "r.yaml:4: R.condition: names no test; give one of threshold_above, threshold_below, "
       "rate_above, increase_above, zscore_above, nan or absent_for, e.g. {threshold_above: 85}"},
      {"    signal: gpu.temp_c\n    condition: {threshold_abve: 85}\n",
       "r.yaml:4: R.condition.threshold_abve: unknown field; did you mean threshold_above?"},
      {"    signal: gpu.temp_c\n    condition: 85\n",
       "r.yaml:4: R.condition: must be a map naming one test (threshold_above, threshold_below, "
       "rate_above, increase_above, zscore_above, nan or absent_for), e.g. {threshold_above: "
       "85}, got \"85\""},
      {"    signal: link.errors\n    condition: {rate_above: 1}\n",
       "r.yaml:4: R.condition.window: is required for rate_above: the span of samples it reads, "
       "e.g. window: 10m"},
      {"    signal: gpu.temp_c\n    condition: {absent_for: 5m, window: 10m}\n",
       "r.yaml:4: R.condition.window: absent_for takes no window (its duration is how long to "
       "wait); remove it"},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 85, min_points: 10}\n",
       "r.yaml:4: R.condition.min_points: applies to zscore_above only, not threshold_above; "
       "remove it"},
      {"    signal: job.loss\n    condition: {zscore_above: 4, window: 10m, min_points: 1}\n",
       "r.yaml:4: R.condition.min_points: must be between 2 and 1000000, got 1"},
      {"    signal: job.loss\n    condition: {zscore_above: 0, window: 10m}\n",
       "r.yaml:4: R.condition.zscore_above: must be > 0 (standard deviations above the mean), "
       "got 0"},
      {"    signal: job.loss\n    condition: {nan: false}\n",
       "r.yaml:4: R.condition.nan: must be true (nan: true matches NaN or infinite values)"},
      {"    signal: gpu.temp_c\n    condition: {absent_for: 0s}\n",
       "r.yaml:4: R.condition.absent_for: must be between 1s and 7d, got \"0s\""},
      {"    signal: gpu.xid_count\n    condition: {threshold_above: 0}\n",
       "r.yaml:4: R.condition: threshold_above reads the raw value, but gpu.xid_count is a "
       "counter (it only grows, and restarts at 0 with the agent); use rate_above or "
       "increase_above"},
      {"    signal: job.loss\n    condition: {rate_above: 1, window: 5m}\n",
       "r.yaml:4: R.condition: rate_above needs a counter signal (gpu.xid_count, "
       "gpu.ecc_uncorrectable, link.errors); job.loss is not one: use threshold_above or "
       "zscore_above"},
      {"    signal: job.loss\n    condition: {threshold_above: 10}\n    action: cordon_node\n",
       "r.yaml:5: R.action: cordon_node needs a signal whose series name a node "
       "(job.rank_step_time_ratio, gpu.util, gpu.temp_c, gpu.throttled, gpu.xid_count, "
       "gpu.ecc_uncorrectable, link.errors, link.down, node.heartbeat_age_s, "
       "node.disk_free_ratio); job.loss is job-wide: use notify or request_checkpoint"},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 90}\n"
       "    action: {kind: request_checkpoint}\n",
       "r.yaml:5: R.action: request_checkpoint needs a job signal (job.*); gpu.temp_c is about "
       "a node, not a job: use notify or cordon_node"},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 90}\n    action: {kind: reboot}\n",
       "r.yaml:5: R.action.kind: must be one of notify, cordon_node, requeue_excluding_node or "
       "request_checkpoint, got \"reboot\""},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 90}\n"
       "    action: {kind: notify, when: now}\n",
       "r.yaml:5: R.action.when: unknown field; valid fields of R.action are kind"},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 90}\n"
       "    labels: {alertname: X}\n",
       "r.yaml:5: R.labels.alertname: is set by the engine (alertname is the rule's name, "
       "severity its severity: field); remove it"},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 90}\n"
       "    labels: {2fast: x}\n",
       "r.yaml:5: R.labels.2fast: is not a valid name: use letters, digits and '_', not "
       "starting with a digit or \"__\""},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 90}\n"
       "    labels: {team: [a, b]}\n",
       "r.yaml:5: R.labels.team: must be a string, got a list"},
      {"    signal: gpu.temp_c\n    condition: {threshold_above: 90}\n"
       "    annotations: {summary: \"GPU {{gpu}} of job {{job_id}} is hot\"}\n",
       "r.yaml:5: R.annotations.summary: {{job_id}} names no label of gpu.temp_c or the rule. "
       "Placeholders available: alertname, gpu, node, severity, threshold, value"},
      {"    signal: job.loss\n    condition: {nan: true}\n"
       "    annotations: {summary: \"job {{jobid}}\"}\n",
       "r.yaml:5: R.annotations.summary: {{jobid}} names no label of job.loss or the rule; did "
       "you mean {{job_id}}? Placeholders available: alertname, job_id, queue, severity, "
       "tenant, threshold, value"},
      {"    signal: job.loss\n    condition: {nan: true}\n"
       "    annotations: {summary: \"job {{job_id\"}\n",
       "r.yaml:5: R.annotations.summary: has {{ without a closing }}"},
      {"    signal: job.loss\n    condition: {nan: true}\n"
       "    annotations: {summary: \"job {{ printf 1 }}\"}\n",
       "r.yaml:5: R.annotations.summary: has \"{{ printf 1 }}\", which is not a placeholder; write "
       "{{label}}, {{value}} or {{threshold}}"},
      {"    signal: job.loss\n    condition: {nan: true}\n    enabled: maybe\n",
       "r.yaml:5: R.enabled: must be true or false, got \"maybe\""},
      {"    condition: {nan: true}\n",
       "r.yaml:2: R.signal: is required: the signal the rule watches, one of job.loss, "
       "job.grad_norm, job.lr, job.step_time_s, job.tokens_per_s, job.data_wait_s, job.mfu, "
       "job.gpu_util, job.rank_step_time_ratio, job.checkpoint_age_ratio, job.checkpoint_write_s, "
       "job.progress_age_s, job.pending_ratio, gpu.util, gpu.temp_c, gpu.throttled, "
       "gpu.xid_count, gpu.ecc_uncorrectable, link.errors, link.down, node.heartbeat_age_s, "
       "node.disk_free_ratio"},
      {"    signal: job.loss\n",
       "r.yaml:2: R.condition: is required: one of threshold_above, threshold_below, rate_above, "
       "increase_above, zscore_above, nan or absent_for, e.g. {threshold_above: 85}"},
  };
  for (const auto& [body, want] : cases) {
    EXPECT_EQ(Errors(OneRule(body)), std::vector<std::string>{want}) << body;
  }
}

TEST(RulesTest, FileLevelErrors) {
  EXPECT_EQ(Errors("rules:\n  - signal: job.loss\n    condition: {nan: true}\n"),
            std::vector<std::string>{
                "r.yaml:2: rules[0].name: is required: every rule needs a name (e.g. GpuTooHot)"});
  EXPECT_EQ(Errors("rules:\n  - name: \"bad name\"\n    signal: job.loss\n"
                   "    condition: {nan: true}\n"),
            std::vector<std::string>{
                "r.yaml:2: rules[0].name: may hold only letters, digits, '-', '_' and '.', got "
                "\"bad name\""});
  EXPECT_EQ(Errors("rules:\n  - {name: A, signal: job.loss, condition: {nan: true}}\n"
                   "  - {name: A, signal: job.lr, condition: {nan: true}}\n"),
            std::vector<std::string>{
                "r.yaml:3: rules[1].name: rule \"A\" is defined twice (first at line 2); give "
                "each rule a unique name"});
  EXPECT_EQ(Errors("rule: []\n"),
            std::vector<std::string>{"r.yaml:1: rule: unknown field; did you mean rules?"});
  EXPECT_EQ(
      Errors("groups: []\n"),
      std::vector<std::string>{"r.yaml:1: groups: unknown field; valid fields are rules, limits"});
  EXPECT_EQ(Errors("rules: {name: A}\n"),
            std::vector<std::string>{
                "r.yaml:1: rules: must be a list of rules (- name: ...), got a map"});
  EXPECT_EQ(Errors("- name: A\n"),
            std::vector<std::string>{"r.yaml:1: a rules file must be a map with rules: (and "
                                     "optionally limits:), got a list"});
  EXPECT_EQ(Errors("rules: [\n"),
            std::vector<std::string>{"r.yaml:2: not valid YAML: end of sequence flow not found"});
  EXPECT_EQ(
      Errors("rules: []\n---\nrules: []\n"),
      std::vector<std::string>{"r.yaml: holds 2 YAML documents; put every rule in one document"});
  EXPECT_EQ(
      Errors(std::string("rules: []\n\0", 11)),
      std::vector<std::string>{"r.yaml:2: rules file contains a NUL byte; it must be UTF-8 text"});
}

TEST(RulesTest, EveryProblemIsReported) {
  auto errors = Errors(R"(rules:
  - name: A
    signal: gpu.tmp
    condition: {threshold_above: 85}
    severity: loud
  - name: B
    signal: job.loss
    condition: {nan: true}
    for: soon
)");
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].substr(0, 21), "r.yaml:3: A.signal: u");
  EXPECT_EQ(errors[1].substr(0, 23), "r.yaml:5: A.severity: m");
  EXPECT_EQ(errors[2].substr(0, 18), "r.yaml:9: B.for: e");
}

TEST(RulesTest, LimitErrors) {
  EXPECT_EQ(Errors("limits:\n  drain: {max_per_hour: 1}\n"),
            std::vector<std::string>{
                "r.yaml:2: limits.drain: unknown action; limits apply to cordon_node, "
                "requeue_excluding_node, request_checkpoint"});
  EXPECT_EQ(Errors("limits:\n  cordon_nodes: {max_per_hour: 1}\n"),
            std::vector<std::string>{
                "r.yaml:2: limits.cordon_nodes: unknown action; did you mean cordon_node? "
                "Limits apply to cordon_node, requeue_excluding_node, request_checkpoint"});
  EXPECT_EQ(Errors("limits:\n  notify: {max_per_hour: 1}\n"),
            std::vector<std::string>{
                "r.yaml:2: limits.notify: notify has no limits; limits apply to cordon_node, "
                "requeue_excluding_node, request_checkpoint"});
  EXPECT_EQ(Errors("limits:\n  request_checkpoint: {max_cordoned: 1}\n"),
            std::vector<std::string>{"r.yaml:2: limits.request_checkpoint.max_cordoned: applies "
                                     "to cordon_node only; remove it"});
  EXPECT_EQ(Errors("limits:\n  cordon_node: {max_per_hour: -1}\n"),
            std::vector<std::string>{
                "r.yaml:2: limits.cordon_node.max_per_hour: must be between 0 and 100000, got -1"});
  EXPECT_EQ(Errors("limits:\n  cordon_node: {max_per_hour: lots}\n"),
            std::vector<std::string>{
                "r.yaml:2: limits.cordon_node.max_per_hour: must be a whole number, got \"lots\""});
  auto ok = ParseRules("limits:\n  cordon_node: {max_cordoned: 1}\n", "r.yaml");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.file->limits.at(ActionKind::kCordonNode),
            (LimitOverride{std::nullopt, std::optional<int>(1)}));
}

TEST(RulesTest, DisablingNeedsOnlyTheName) {
  auto r = ParseRules("rules:\n  - {name: GpuTooHot, enabled: false}\n", "u.yaml");
  ASSERT_TRUE(r.ok()) << r.errors[0].ToString();
  EXPECT_FALSE(r.file->rules[0].enabled);
}

TEST(RulesTest, DefaultRulesAllParse) {
  auto parsed = ParseRules(DefaultRulesYaml(), kDefaultRulesFile);
  ASSERT_TRUE(parsed.ok()) << parsed.errors[0].ToString();
  auto set = LoadRules(DefaultRulesYaml(), "");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_GE(set->rules.size(), 12u);
  EXPECT_TRUE(set->disabled.empty());
  EXPECT_EQ(set->limits, DefaultActionLimits());
  // The issue's list, one rule (at least) each.
  for (const char* name :
       {"GradNormSpike", "LossSpike", "LossNotFinite", "JobGpuUtilCollapsed", "RankStraggler",
        "GpuTooHot", "GpuThermalThrottling", "GpuXidError", "GpuEccUncorrectable", "LinkDown",
        "LinkErrorsRising", "NodeHeartbeatLost", "CheckpointOverdue", "CheckpointWriteSlow",
        "TrainingStalled", "JobPendingTooLong", "CheckpointDiskNearlyFull"}) {
    const Rule* r = set->Find(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_FALSE(r->annotations.at("summary").empty()) << name;
  }
  // Every rule names its layer, and the origins point into the default text.
  for (const Rule& r : set->rules) {
    EXPECT_EQ(r.labels.count("layer"), 1u) << r.name;
    EXPECT_EQ(r.origin.rfind(std::string(kDefaultRulesFile) + ":", 0), 0u) << r.origin;
  }
}

#ifdef TRAINYARD_SOURCE_DIR
// docs/alerts.md's table of default rules lists every default rule, and only those,
// with the same signal, for, keep_firing_for, severity and action.
TEST(RulesTest, DocsTableMatchesTheDefaultRules) {
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/docs/alerts.md");
  ASSERT_TRUE(in) << "docs/alerts.md";
  std::string line;
  bool in_table = false;
  std::map<std::string, std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line == "## Default rules") in_table = true;
    if (!in_table || !line.starts_with("| ") || line.starts_with("| name")) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(2));
    for (std::string cell; std::getline(ss, cell, '|');) {
      while (!cell.empty() && cell.back() == ' ') cell.pop_back();
      while (!cell.empty() && cell.front() == ' ') cell.erase(0, 1);
      cells.push_back(cell);
    }
    if (cells.size() < 8) break;  // the next table
    rows[cells[0]] = cells;
  }
  auto set = LoadRules(DefaultRulesYaml(), "");
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(rows.size(), set->rules.size());
  for (const Rule& r : set->rules) {
    auto it = rows.find(r.name);
    ASSERT_NE(it, rows.end()) << r.name << " is not in docs/alerts.md";
    const std::vector<std::string>& c = it->second;
    EXPECT_EQ(c[1], r.signal) << r.name;
    EXPECT_EQ(c[2].substr(0, ConditionKindName(r.condition.kind).size()),
              ConditionKindName(r.condition.kind))
        << r.name;
    EXPECT_EQ(c[3], FormatDuration(r.for_duration)) << r.name;
    EXPECT_EQ(c[4], FormatDuration(r.keep_firing_for)) << r.name;
    EXPECT_EQ(c[5], SeverityName(r.severity)) << r.name;
    EXPECT_EQ(c[6], ActionKindName(r.action)) << r.name;
  }
}

// docs/alerts.md's table of signals lists every signal, in the table's order, with its
// labels and unit.
TEST(RulesTest, DocsTableListsEverySignal) {
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/docs/alerts.md");
  ASSERT_TRUE(in) << "docs/alerts.md";
  std::string line;
  bool in_table = false;
  std::vector<std::string> names, labels, units;
  while (std::getline(in, line)) {
    if (line == "## Signals") in_table = true;
    if (!in_table || !line.starts_with("| `")) {
      if (in_table && !names.empty() && !line.starts_with("|")) break;  // past the table
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(2));
    for (std::string cell; std::getline(ss, cell, '|');) {
      while (!cell.empty() && cell.back() == ' ') cell.pop_back();
      while (!cell.empty() && cell.front() == ' ') cell.erase(0, 1);
      cells.push_back(cell);
    }
    ASSERT_GE(cells.size(), 3u) << line;
    names.push_back(cells[0].substr(1, cells[0].size() - 2));  // inside the backquotes
    labels.push_back(cells[1]);
    units.push_back(cells[2]);
  }
  std::vector<std::string> want_names, want_labels, want_units;
  for (const SignalInfo& s : Signals()) {
    want_names.emplace_back(s.name);
    std::string l;
    for (std::string_view label : s.labels) l += (l.empty() ? "" : ", ") + std::string(label);
    want_labels.push_back(l);
    want_units.emplace_back(s.unit);
  }
  EXPECT_EQ(names, want_names);
  EXPECT_EQ(labels, want_labels);
  EXPECT_EQ(units, want_units);
}
#endif

TEST(RulesTest, UserRulesReplaceDisableAndAdd) {
  auto set = LoadRules(DefaultRulesYaml(), R"(limits:
  cordon_node: {max_cordoned: 5}
rules:
  - name: GpuTooHot
    signal: gpu.temp_c
    condition: {threshold_above: 80}
    severity: critical
  - {name: JobPendingTooLong, enabled: false}
  - name: LowThroughput
    signal: job.tokens_per_s
    condition: {threshold_below: 1000}
)",
                       "site.yaml");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  auto defaults = LoadRules(DefaultRulesYaml(), "");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(set->rules.size(), defaults->rules.size());  // one replaced, one off, one new
  EXPECT_EQ(set->disabled, std::vector<std::string>{"JobPendingTooLong"});
  EXPECT_EQ(set->Find("JobPendingTooLong"), nullptr);
  // Replaced in place: the same position as the default.
  size_t at = 0, default_at = 0;
  for (size_t i = 0; i < set->rules.size(); ++i) {
    if (set->rules[i].name == "GpuTooHot") at = i;
  }
  for (size_t i = 0; i < defaults->rules.size(); ++i) {
    if (defaults->rules[i].name == "GpuTooHot") default_at = i;
  }
  EXPECT_EQ(at, default_at);
  const Rule* hot = set->Find("GpuTooHot");
  EXPECT_EQ(hot->condition.threshold, 80);
  EXPECT_EQ(hot->severity, Severity::kCritical);
  EXPECT_TRUE(hot->labels.empty());  // replaced whole, not merged
  EXPECT_EQ(hot->origin, "site.yaml:4");
  EXPECT_EQ(set->rules.back().name, "LowThroughput");
  // Limits merge field by field.
  EXPECT_EQ(set->limits.at(ActionKind::kCordonNode), (ActionLimit{3, 5}));
  EXPECT_EQ(set->limits.at(ActionKind::kRequestCheckpoint), (ActionLimit{20, kNoLimit}));
}

TEST(RulesTest, LoadRulesReportsBothFiles) {
  auto set = LoadRules(
      "rules: [\n", "rules:\n  - {name: A, signal: nope, condition: {nan: true}}\n", "site.yaml");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kInvalidArgument);
  const std::string m = set.status().message();
  EXPECT_EQ(m.substr(0, m.find('\n')),
            "<default rules>:2: not valid YAML: end of sequence flow not found");
  const std::string second = m.substr(m.find('\n') + 1);
  EXPECT_TRUE(second.starts_with(
      "site.yaml:2: A.signal: unknown signal \"nope\". Known signals: job.loss, "))
      << second;
}

TEST(RulesTest, ExpandTemplate) {
  const Labels labels = {{"job_id", "42"}, {"node", "gpu-7"}};
  EXPECT_EQ(ExpandTemplate("job {{job_id}} on {{ node }} at {{value}} (> {{threshold}})", labels,
                           91.5, 85),
            "job 42 on gpu-7 at 91.5 (> 85)");
  EXPECT_EQ(ExpandTemplate("{{ $labels.job_id }}: {{ $value }}", labels, 0.25, 0), "42: 0.25");
  EXPECT_EQ(ExpandTemplate("[{{rank}}]", labels, 1, 0), "[]");
  EXPECT_EQ(ExpandTemplate("no placeholders", labels, 1, 0), "no placeholders");
  EXPECT_EQ(ExpandTemplate("broken {{job_id", labels, 1, 0), "broken {{job_id");
}

TEST(RulesTest, FormatValue) {
  EXPECT_EQ(FormatValue(6), "6");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(-2.5), "-2.5");
  EXPECT_EQ(FormatValue(1e-7), "1e-07");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(RulesTest, SignalTable) {
  std::set<std::string_view> names;
  for (const SignalInfo& s : Signals()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_FALSE(s.labels.empty()) << s.name;
    EXPECT_EQ(s.scope == SignalScope::kJob, s.name.starts_with("job.")) << s.name;
    EXPECT_EQ(FindSignal(s.name), &s);
  }
  EXPECT_EQ(names.size(), 22u);  // 13 job signals, 9 GPU, link and node ones
  EXPECT_EQ(FindSignal("job.nope"), nullptr);
  EXPECT_TRUE(SignalNamesNode(*FindSignal("job.rank_step_time_ratio")));
  EXPECT_FALSE(SignalNamesNode(*FindSignal("job.loss")));
  EXPECT_TRUE(FindSignal("gpu.xid_count")->counter);
}

}  // namespace
}  // namespace trainyard::monitor
