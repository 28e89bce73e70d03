#include "monitor/engine.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "monitor/series_math.h"

namespace trainyard::monitor {
namespace {

using std::chrono::hours;

constexpr Duration kActionWindow = hours(1);

bool SameDouble(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

Labels AlertLabels(const Rule& rule, const Labels& series) {
  Labels out = series;
  for (const auto& [k, v] : rule.labels) out[k] = v;
  out["alertname"] = rule.name;
  out["severity"] = std::string(SeverityName(rule.severity));
  return out;
}

}  // namespace

bool Sample::operator==(const Sample& o) const {
  return time == o.time && SameDouble(value, o.value);
}

bool Alert::operator==(const Alert& o) const {
  return rule == o.rule && fingerprint == o.fingerprint && labels == o.labels &&
         annotations == o.annotations && state == o.state && active_at == o.active_at &&
         starts_at == o.starts_at && ends_at == o.ends_at &&
         keep_firing_since == o.keep_firing_since && SameDouble(value, o.value);
}

std::string_view AlertStateName(AlertState s) {
  switch (s) {
    case AlertState::kPending:
      return "pending";
    case AlertState::kFiring:
      return "firing";
    case AlertState::kResolved:
      return "resolved";
  }
  return "unknown";
}

std::string AlertFingerprint(const Labels& labels) {
  constexpr uint64_t kOffset = 14695981039346656037ULL;
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t h = kOffset;
  auto add = [&](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= kPrime;
    }
  };
  auto add_separator = [&] {
    h ^= 0xff;
    h *= kPrime;
  };
  for (const auto& [name, value] : labels) {  // std::map: sorted by name
    add(name);
    add_separator();
    add(value);
    add_separator();
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

Engine::Engine(RuleSet rules, EngineOptions options)
    : rules_(std::move(rules)), options_(options) {}

void Engine::SetRules(RuleSet rules) { rules_ = std::move(rules); }

void Engine::ReleaseCordon(const std::string& node) { cordoned_.erase(node); }

std::map<Labels, double> Engine::Matches(const Rule& rule, Timestamp now,
                                         const SignalSource& source) {
  const Condition& c = rule.condition;
  // absent_for looks back twice its duration, so that series which fell silent just
  // before the engine (re)started are still seen once.
  const Duration span = c.kind == ConditionKind::kAbsentFor ? 2 * c.absent_for : c.window;
  const Timestamp from = now - span;

  const std::map<Labels, std::vector<Sample>> series = ReadSeries(source, rule.signal, from, now);

  std::map<Labels, double> out;
  auto match = [&](const Labels& series_labels, double value) {
    // Series that differ only in labels the rule overrides make one alert: the first.
    out.emplace(AlertLabels(rule, series_labels), value);
  };

  if (c.kind == ConditionKind::kAbsentFor) {
    std::map<Labels, Timestamp>& seen = seen_[rule.name];
    for (const auto& [labels, samples] : series) {
      if (samples.empty()) continue;
      auto [it, inserted] = seen.emplace(labels, samples.back().time);
      if (!inserted) it->second = std::max(it->second, samples.back().time);
    }
    for (auto it = seen.begin(); it != seen.end();) {
      const Duration age = now - it->second;
      if (age >= options_.forget_absent_after) {
        it = seen.erase(it);
        continue;
      }
      if (age >= c.absent_for) match(it->first, Seconds(age));
      ++it;
    }
    return out;
  }

  // zscore_above: per series, the newest sample scored so far (series gone from the
  // window are forgotten).
  std::map<Labels, Timestamp>& scored = scored_[rule.name];
  std::map<Labels, Timestamp> next_scored;
  for (const auto& [labels, samples] : series) {
    if (samples.empty()) continue;
    const double latest = samples.back().value;
    switch (c.kind) {
      case ConditionKind::kThresholdAbove:
        if (latest > c.threshold) match(labels, latest);
        break;
      case ConditionKind::kThresholdBelow:
        if (latest < c.threshold) match(labels, latest);
        break;
      case ConditionKind::kNan:
        if (!std::isfinite(latest)) match(labels, latest);
        break;
      case ConditionKind::kIncreaseAbove:
        if (auto inc = CounterIncrease(samples); inc && inc->amount > c.threshold) {
          match(labels, inc->amount);
        }
        break;
      case ConditionKind::kRateAbove:
        if (auto inc = CounterIncrease(samples)) {
          const double rate = inc->amount / Seconds(inc->span);
          if (rate > c.threshold) match(labels, rate);
        }
        break;
      case ConditionKind::kZscoreAbove: {
        // Every sample newer than the newest one the last evaluation scored, each against
        // those before it: points arrive in batches (and late: a sample's time is when
        // the job logged it), and a spike followed by more spiked points in the same
        // batch would hide behind them if only the latest were scored.
        size_t first = samples.size() - 1;
        if (auto it = scored.find(labels); it != scored.end()) {
          while (first > 0 && samples[first - 1].time > it->second) --first;
        }
        next_scored[labels] = samples.back().time;
        if (auto z = MaxZScore(samples, first, c.min_points, c.min_stddev);
            z && z->z > c.threshold) {
          match(labels, samples[z->index].value);
        }
        break;
      }
      case ConditionKind::kAbsentFor:
        break;  // handled above
    }
  }
  if (c.kind == ConditionKind::kZscoreAbove) scored = std::move(next_scored);
  return out;
}

ActionRequest Engine::Request(const Rule& rule, const Alert& alert, Timestamp now) {
  ActionRequest r;
  r.kind = rule.action;
  r.rule = rule.name;
  r.fingerprint = alert.fingerprint;
  r.node = Label(alert.labels, "node");
  r.gpu = Label(alert.labels, "gpu");
  r.job_id = Label(alert.labels, "job_id");
  r.at = now;
  const std::string name(ActionKindName(r.kind));
  auto suppress = [&](std::string why) {
    r.suppressed = true;
    r.suppressed_reason = std::move(why);
    return r;
  };

  std::erase_if(recent_actions_,
                [&](const ActionRecord& a) { return a.at <= now - kActionWindow; });
  ActionLimit limit;
  if (auto it = rules_.limits.find(r.kind); it != rules_.limits.end()) {
    limit = it->second;
  } else if (auto d = DefaultActionLimits(); d.count(r.kind)) {
    limit = d[r.kind];
  }
  const bool on_node =
      r.kind == ActionKind::kCordonNode || r.kind == ActionKind::kRequeueExcludingNode;
  if (on_node && r.node.empty()) {
    return suppress(name + ": the alert has no node label to act on");
  }
  if (r.kind == ActionKind::kRequestCheckpoint && r.job_id.empty()) {
    return suppress(name + ": the alert has no job_id label to act on");
  }
  if (r.kind == ActionKind::kCordonNode) {
    if (cordoned_.count(r.node)) {
      return suppress("cordon_node: node " + r.node + " is already cordoned by an alert");
    }
    const size_t n = cordoned_.size();
    if (limit.max_cordoned != kNoLimit && n >= static_cast<size_t>(limit.max_cordoned)) {
      return suppress(
          "cordon_node limit: " + std::to_string(n) + (n == 1 ? " node" : " nodes") +
          " already cordoned by alerts (max_cordoned: " + std::to_string(limit.max_cordoned) + ")");
    }
  }
  const auto in_hour = std::count_if(recent_actions_.begin(), recent_actions_.end(),
                                     [&](const ActionRecord& a) { return a.kind == r.kind; });
  if (limit.max_per_hour != kNoLimit && in_hour >= limit.max_per_hour) {
    return suppress(name + " limit: " + std::to_string(in_hour) + " request" +
                    (in_hour == 1 ? "" : "s") +
                    " in the last hour (max_per_hour: " + std::to_string(limit.max_per_hour) + ")");
  }
  recent_actions_.push_back(ActionRecord{r.kind, now});
  if (r.kind == ActionKind::kCordonNode) cordoned_.insert(r.node);
  return r;
}

void Engine::Advance(const Rule* rule, const std::string& name, std::map<Labels, Alert>& alerts,
                     const std::map<Labels, double>& matches, Timestamp now, Evaluation& out) {
  std::set<Labels> keys;
  for (const auto& [labels, alert] : alerts) keys.insert(labels);
  for (const auto& [labels, value] : matches) keys.insert(labels);

  auto fire = [&](Alert& a) {
    a.state = AlertState::kFiring;
    a.starts_at = now;
    out.transitions.push_back({TransitionKind::kFiring, a});
    if (rule->action != ActionKind::kNotify) out.actions.push_back(Request(*rule, a, now));
  };
  auto annotate = [&](Alert& a) {
    a.annotations.clear();
    for (const auto& [k, text] : rule->annotations) {
      a.annotations[k] = ExpandTemplate(text, a.labels, a.value, rule->condition.threshold);
    }
  };

  for (const Labels& labels : keys) {
    auto m = matches.find(labels);
    auto it = alerts.find(labels);
    if (m != matches.end()) {  // the condition holds (so the rule exists)
      if (it == alerts.end() || it->second.state == AlertState::kResolved) {
        Alert a;
        a.rule = name;
        a.labels = labels;
        a.fingerprint = AlertFingerprint(labels);
        a.active_at = now;
        a.value = m->second;
        annotate(a);
        if (rule->for_duration <= Duration(0)) {
          fire(a);
        } else {
          out.transitions.push_back({TransitionKind::kPending, a});
        }
        alerts.insert_or_assign(labels, std::move(a));
        continue;
      }
      Alert& a = it->second;
      a.value = m->second;
      a.keep_firing_since.reset();
      annotate(a);
      if (a.state == AlertState::kPending && now - a.active_at >= rule->for_duration) fire(a);
      continue;
    }
    Alert& a = it->second;
    switch (a.state) {
      case AlertState::kPending:
        alerts.erase(it);
        break;
      case AlertState::kFiring: {
        if (!a.keep_firing_since) a.keep_firing_since = now;
        const Duration keep = rule != nullptr ? rule->keep_firing_for : Duration(0);
        if (now - *a.keep_firing_since >= keep) {
          a.state = AlertState::kResolved;
          a.ends_at = now;
          a.keep_firing_since.reset();
          out.transitions.push_back({TransitionKind::kResolved, a});
        }
        break;
      }
      case AlertState::kResolved:
        if (now - a.ends_at >= options_.resolved_retention) alerts.erase(it);
        break;
    }
  }
}

Evaluation Engine::Evaluate(Timestamp now, const SignalSource& source) {
  Evaluation out;
  std::set<std::string> current;
  for (const Rule& rule : rules_.rules) {
    current.insert(rule.name);
    const std::map<Labels, double> matches = Matches(rule, now, source);
    Advance(&rule, rule.name, alerts_[rule.name], matches, now, out);
  }
  // Alerts of rules that are gone (or disabled) resolve; their memory goes.
  for (auto it = alerts_.begin(); it != alerts_.end();) {
    if (!current.count(it->first)) Advance(nullptr, it->first, it->second, {}, now, out);
    it = it->second.empty() ? alerts_.erase(it) : std::next(it);
  }
  std::erase_if(seen_, [&](const auto& kv) {
    const Rule* r = rules_.Find(kv.first);
    return r == nullptr || r->condition.kind != ConditionKind::kAbsentFor;
  });
  out.alerts = ExportState().alerts;
  return out;
}

EngineState Engine::ExportState() const {
  EngineState s;
  auto append = [&](const std::map<Labels, Alert>& alerts) {
    for (const auto& [labels, a] : alerts) s.alerts.push_back(a);
  };
  for (const Rule& rule : rules_.rules) {
    if (auto it = alerts_.find(rule.name); it != alerts_.end()) append(it->second);
  }
  for (const auto& [name, alerts] : alerts_) {
    if (rules_.Find(name) == nullptr) append(alerts);
  }
  for (const auto& [rule, series] : seen_) {
    for (const auto& [labels, t] : series) s.seen.push_back(SeenSeries{rule, labels, t});
  }
  s.recent_actions = recent_actions_;
  s.cordoned_nodes.assign(cordoned_.begin(), cordoned_.end());
  return s;
}

void Engine::ImportState(const EngineState& state) {
  alerts_.clear();
  seen_.clear();
  for (const Alert& a : state.alerts) alerts_[a.rule].insert_or_assign(a.labels, a);
  for (const SeenSeries& s : state.seen) seen_[s.rule][s.labels] = s.last_sample;
  recent_actions_ = state.recent_actions;
  cordoned_ = std::set<std::string>(state.cordoned_nodes.begin(), state.cordoned_nodes.end());
}

}  // namespace trainyard::monitor
