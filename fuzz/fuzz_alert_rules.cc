// libFuzzer target: alert rules files (`trainyard alerts check`, `server --alert-rules`;
// monitor/rules.h) and the annotation templates they hold.
//
// The input is a rules file. Beyond "does not crash": ParseRules returns a file or
// errors, never both; each error is one line of printable UTF-8 starting with the file
// name and, unless it is about the whole file, the line (`alert-rules.yaml:7: `); an
// accepted file merged with the defaults by LoadRules gives enabled rules with unique
// names, the user's rules as written (each in place of the default it names), every
// disabled name, and the user's limits. ExpandTemplate, on the input itself and on
// every accepted annotation, never throws, and writes only bytes of the template, of
// the label values and of the two numbers, no more than the template's length plus one
// label value or number per placeholder.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/names.h"
#include "fuzz_check.h"
#include "monitor/rules.h"

namespace {

using trainyard::Diagnostic;
using trainyard::monitor::ExpandTemplate;
using trainyard::monitor::FormatValue;
using trainyard::monitor::Labels;
using trainyard::monitor::Rule;
using trainyard::monitor::RuleFile;
using trainyard::monitor::RuleSet;

constexpr std::string_view kFile = "alert-rules.yaml";

[[noreturn]] void Fail(const char* what, std::string_view text) {
  trainyard::fuzz::Fail("fuzz_alert_rules", what, text);
}

// Valid UTF-8 without control characters: what a terminal prints on one line.
bool IsOneLine(std::string_view s) {
  return trainyard::IsValidUtf8(s) && std::none_of(s.begin(), s.end(), [](char c) {
           const auto b = static_cast<unsigned char>(c);
           return b < 0x20 || b == 0x7F;
         });
}

void CheckError(const Diagnostic& d, std::string_view text) {
  const std::string message = d.ToString();
  if (!IsOneLine(message)) Fail("an error is not one line of printable UTF-8", message);
  if (d.file != kFile) Fail("an error names another file", message);
  if (d.message.empty()) Fail("an error says nothing", message);
  if (d.line == 0) {
    // Only what is about the whole file (too big, several documents) has no line.
    if (!d.field.empty()) Fail("an error about a field names no line", message);
    if (message.rfind(std::string(kFile) + ": ", 0) != 0) Fail("an error names no file", message);
    return;
  }
  const std::string prefix = std::string(kFile) + ":" + std::to_string(d.line) + ": ";
  if (message.rfind(prefix, 0) != 0) Fail("an error does not start with FILE:LINE:", message);
  const auto lines = 1 + std::count(text.begin(), text.end(), '\n');
  if (d.line < 0 || d.line > lines) Fail("an error names a line the file does not have", message);
}

// The merge LoadRules documents: unique names, user rules as written, disabled names
// dropped from the rules, user limits over the defaults'.
void CheckMerged(const RuleFile& user, const RuleSet& set, std::string_view text) {
  std::set<std::string> names;
  for (const Rule& r : set.rules) {
    if (!names.insert(r.name).second) Fail("the merged rules repeat a name", r.name);
    if (!r.enabled) Fail("a disabled rule is among the rules", r.name);
  }
  const std::set<std::string> disabled(set.disabled.begin(), set.disabled.end());
  if (disabled.size() != set.disabled.size()) Fail("a name is disabled twice", text);
  for (const std::string& name : set.disabled) {
    if (names.count(name)) Fail("a disabled name is among the rules", name);
  }
  for (const Rule& r : user.rules) {
    const Rule* merged = set.Find(r.name);
    if (r.enabled && (merged == nullptr || !(*merged == r))) {
      Fail("a user rule is not in the merged rules as written", r.name);
    }
    if (!r.enabled && (merged != nullptr || !disabled.count(r.name))) {
      Fail("a rule switched off is not disabled", r.name);
    }
  }
  for (const auto& [kind, o] : user.limits) {
    const auto it = set.limits.find(kind);
    if (it == set.limits.end() || (o.max_per_hour && it->second.max_per_hour != *o.max_per_hour) ||
        (o.max_cordoned && it->second.max_cordoned != *o.max_cordoned)) {
      Fail("a user limit is not in the merged limits", text);
    }
  }
}

// ExpandTemplate never throws, and its output is made of the template, label values
// and the two numbers: no byte from anywhere else, and at most one label value or
// number in place of each "{{".
void CheckExpansion(std::string_view tmpl, const Labels& labels, double value, double threshold) {
  std::string out;
  try {
    out = ExpandTemplate(tmpl, labels, value, threshold);
  } catch (...) {
    Fail("ExpandTemplate threw", tmpl);
  }
  bool allowed[256] = {};
  const auto allow = [&](std::string_view s) {
    for (char c : s) allowed[static_cast<unsigned char>(c)] = true;
    return s.size();
  };
  allow(tmpl);
  size_t widest = std::max(allow(FormatValue(value)), allow(FormatValue(threshold)));
  for (const auto& [name, v] : labels) widest = std::max(widest, allow(v));
  size_t opens = 0;
  for (size_t i = 0; i + 1 < tmpl.size(); ++i) opens += tmpl[i] == '{' && tmpl[i + 1] == '{';
  if (opens == 0 && out != tmpl) Fail("a template without {{ changed", tmpl);
  if (out.size() > tmpl.size() + opens * widest) Fail("the expansion is too long", tmpl);
  for (char c : out) {
    if (!allowed[static_cast<unsigned char>(c)]) Fail("the expansion holds a foreign byte", tmpl);
  }
}

// Numbers an alert's value or threshold may be, the awkward ones included.
constexpr double kNumbers[] = {0,
                               -0.0,
                               87,
                               0.1,
                               -1.5e-7,
                               5e-324,
                               std::numeric_limits<double>::max(),
                               -std::numeric_limits<double>::max(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()};
constexpr size_t kNumberCount = sizeof(kNumbers) / sizeof(kNumbers[0]);

// The labels an alert of `rule` carries (its signal's, its own, alertname and
// severity), each signal label set to `fill`.
Labels AlertLabels(const Rule& rule, const std::string& fill) {
  Labels labels;
  if (const auto* signal = trainyard::monitor::FindSignal(rule.signal)) {
    for (std::string_view name : signal->labels) labels[std::string(name)] = fill;
  }
  for (const auto& [k, v] : rule.labels) labels[k] = v;
  labels["alertname"] = rule.name;
  labels["severity"] = std::string(trainyard::monitor::SeverityName(rule.severity));
  return labels;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace monitor = trainyard::monitor;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const double value = kNumbers[size % kNumberCount];
  const double threshold = kNumbers[(size / kNumberCount) % kNumberCount];
  // A label value taken from the input, so that it may hold "{{value}}", braces, bytes
  // of any kind.
  const std::string excerpt(text.substr(0, 96));

  // The input as a template, with labels such as a job's and a node's alerts carry.
  CheckExpansion(text,
                 Labels{{"job_id", "17"},
                        {"node", "gpu-node-3"},
                        {"gpu", "0"},
                        {"rank", ""},
                        {"summary", "{{value}} {{ $labels.node }}"},
                        {"tenant", excerpt}},
                 value, threshold);

  monitor::RulesParseResult parsed = monitor::ParseRules(text, kFile);
  if (parsed.ok() == !parsed.errors.empty()) {
    Fail(parsed.ok() ? "accepted with errors" : "rejected without an error", text);
  }
  for (const Diagnostic& d : parsed.errors) CheckError(d, text);

  // LoadRules only for accepted files: it parses the defaults again each time, which
  // costs more than the rest of a run, and rejects a rejected file by joining the very
  // errors checked above.
  if (!parsed.ok()) return 0;
  trainyard::Result<RuleSet> set = monitor::LoadRules(monitor::DefaultRulesYaml(), text, kFile);
  if (!set.ok()) Fail("LoadRules rejects a file ParseRules accepts", set.status().message());
  CheckMerged(*parsed.file, *set, text);

  for (const Rule& rule : parsed.file->rules) {
    const Labels labels = AlertLabels(rule, excerpt);
    for (const auto& [name, tmpl] : rule.annotations) {
      CheckExpansion(tmpl, labels, value, rule.condition.threshold);
    }
  }
  return 0;
}
