// The alert engine: evaluates rules against signals, keeps each alert's lifecycle, and
// turns newly firing alerts into remediation requests under safety limits.
//
// Pure code: no I/O, no clock, no threads, no randomness. The caller passes `now` and
// a SignalSource; the same inputs in the same state give the same output, so the
// server can evaluate every few seconds and tests can drive it with a fake clock.
//
// Lifecycle of one alert, per (rule, label set):
//
//   inactive --condition true--> pending --true for `for`--> firing
//   pending  --condition false--> inactive (dropped, no transition reported)
//   firing   --false for keep_firing_for--> resolved --after resolved_retention--> dropped
//   resolved --condition true--> pending again (a new alert: new active_at)
//
// With for: 0 an alert goes straight to firing. A firing alert whose condition flaps
// stays firing as long as the condition is never false for keep_firing_for on end.
// An alert's identity is its label set (rule labels + series labels + alertname +
// severity), fingerprinted as Prometheus and Alertmanager do, so duplicate series
// give one alert.
//
// Actions: every transition to firing of a rule whose action is not notify yields an
// ActionRequest; the engine checks the rules file's limits (requests per hour,
// nodes cordoned at once) and marks a request over a limit as suppressed, with the
// reason. Only requests let through count against the limits. A cordon placed by an
// alert counts until the server reports it lifted (ReleaseCordon).
//
// Thread-safety: none; one caller at a time (the server's evaluation loop).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/units.h"
#include "monitor/rules.h"

namespace trainyard::monitor {

struct Sample {
  Timestamp time;
  double value = 0;
  bool operator==(const Sample& o) const;  // NaN equals NaN here
};

struct Series {
  Labels labels;
  std::vector<Sample> samples;
};

// What the server implements over its metric store and live telemetry.
class SignalSource {
 public:
  virtual ~SignalSource() = default;
  // Every series of `signal` that has samples in [from, to], with those samples. Order
  // does not matter (the engine sorts); samples outside [from, to] are ignored; two
  // series with equal labels are read as one.
  virtual std::vector<Series> Query(const std::string& signal, Timestamp from,
                                    Timestamp to) const = 0;
};

enum class AlertState { kPending, kFiring, kResolved };
std::string_view AlertStateName(AlertState s);  // "pending", "firing", "resolved"

struct Alert {
  std::string rule;
  std::string fingerprint;  // 16 hex digits (AlertFingerprint(labels))
  Labels labels;            // rule labels + series labels + alertname + severity
  Labels annotations;       // the rule's templates, expanded with the latest value
  AlertState state = AlertState::kPending;
  Timestamp active_at;  // when it became pending
  Timestamp starts_at;  // when it became firing; the epoch while pending
  Timestamp ends_at;    // when it resolved; the epoch until then
  // While firing: since when the condition has been false (keep_firing_for runs).
  std::optional<Timestamp> keep_firing_since;
  double value = 0;  // at the last evaluation where the condition held

  bool operator==(const Alert& o) const;  // NaN values compare equal
};

enum class TransitionKind { kPending, kFiring, kResolved };
struct Transition {
  TransitionKind kind = TransitionKind::kPending;
  Alert alert;  // as it is after the transition
};

struct ActionRequest {
  ActionKind kind = ActionKind::kNotify;
  std::string rule;
  std::string fingerprint;  // of the alert that asked
  std::string node;         // from the alert's labels; empty when it has none
  std::string gpu;
  std::string job_id;
  Timestamp at;
  bool suppressed = false;
  std::string suppressed_reason;  // "cordon_node limit: 2 nodes already cordoned by alerts"

  bool operator==(const ActionRequest&) const = default;
};

struct Evaluation {
  std::vector<Transition> transitions;  // in rule order, then label order
  std::vector<ActionRequest> actions;   // one per transition to firing with an action
  std::vector<Alert> alerts;            // every alert now pending, firing or resolved
};

// ---- Persistable state ----------------------------------------------------------------

struct SeenSeries {  // for absent_for: a series and its newest sample
  std::string rule;
  Labels labels;
  Timestamp last_sample;
  bool operator==(const SeenSeries&) const = default;
};

struct ActionRecord {  // a request let through, for the per-hour limits
  ActionKind kind = ActionKind::kNotify;
  Timestamp at;
  bool operator==(const ActionRecord&) const = default;
};

// Everything the engine remembers between evaluations, as plain values.
struct EngineState {
  std::vector<Alert> alerts;
  std::vector<SeenSeries> seen;
  std::vector<ActionRecord> recent_actions;  // within the last hour
  std::vector<std::string> cordoned_nodes;   // cordoned by alerts, not yet released
  bool operator==(const EngineState&) const = default;
};

struct EngineOptions {
  // A resolved alert stays in the set this long, for receivers that poll.
  Duration resolved_retention = std::chrono::minutes(15);
  // absent_for: a series absent this long is taken as retired (a finished job, a
  // removed node) and forgotten; its alert resolves.
  Duration forget_absent_after = std::chrono::hours(24);
};

// Prometheus' label-set fingerprint (FNV-1a 64 over sorted name, 0xff, value, 0xff),
// as 16 lowercase hex digits: the same value Alertmanager puts in `fingerprint`.
std::string AlertFingerprint(const Labels& labels);

class Engine {
 public:
  explicit Engine(RuleSet rules, EngineOptions options = {});

  // Evaluates every rule at `now`, asking `source` for each rule's window.
  Evaluation Evaluate(Timestamp now, const SignalSource& source);

  // Replaces the rules; alerts of rules that are gone resolve at the next evaluation.
  void SetRules(RuleSet rules);
  const RuleSet& rules() const { return rules_; }

  // A cordon an alert placed has been lifted: the node no longer counts against
  // max_cordoned, and a new alert may cordon it again.
  void ReleaseCordon(const std::string& node);

  EngineState ExportState() const;
  // Replaces the engine's memory with `state` (from ExportState, maybe of an earlier
  // process).
  void ImportState(const EngineState& state);

 private:
  // Series where the rule's condition holds now, keyed by alert labels -> value.
  std::map<Labels, double> Matches(const Rule& rule, Timestamp now, const SignalSource& source);
  void Advance(const Rule* rule, const std::string& name, std::map<Labels, Alert>& alerts,
               const std::map<Labels, double>& matches, Timestamp now, Evaluation& out);
  ActionRequest Request(const Rule& rule, const Alert& alert, Timestamp now);

  RuleSet rules_;
  EngineOptions options_;
  std::map<std::string, std::map<Labels, Alert>> alerts_;    // rule -> alert labels -> alert
  std::map<std::string, std::map<Labels, Timestamp>> seen_;  // rule -> series -> last sample
  std::vector<ActionRecord> recent_actions_;
  std::set<std::string> cordoned_;
  // zscore_above: rule -> series -> the newest sample scored (not persisted: the first
  // evaluation of a process scores each series' latest sample alone).
  std::map<std::string, std::map<Labels, Timestamp>> scored_;
};

}  // namespace trainyard::monitor
