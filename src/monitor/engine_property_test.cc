// Property tests of the alert engine over random rules and random telemetry, from
// fixed seeds:
//   - evaluation is deterministic: two engines fed the same inputs agree exactly, and
//     an engine rebuilt from ExportState mid-run continues exactly as the original;
//   - an alert never fires without having been pending, in every evaluation, for the
//     rule's `for`; pending appears only from nothing, resolved only from firing;
//   - a firing alert resolves only after its condition has been false for
//     keep_firing_for;
//   - action limits hold: requests let through never exceed max_per_hour in any hour,
//     nor nodes cordoned max_cordoned.
//
// TRAINYARD_PROP_CASES=N runs N cases instead of the default; TRAINYARD_PROP_SEED=S
// starts at seed S.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "monitor/engine.h"
#include "monitor/testing.h"

namespace trainyard::monitor {
namespace {

using std::chrono::seconds;
using testing::At;
using testing::FakeSource;

int64_t EnvOr(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

int64_t Between(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
bool Chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }

struct Case {
  std::string yaml;
  int max_per_hour = 0;
  int max_cordoned = 0;
  int nodes = 1;
  int gpus = 1;
  int steps = 0;
  uint64_t seed = 0;
};

Case RandomCase(uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x5EEDull);
  Case c;
  c.seed = seed;
  c.max_per_hour = static_cast<int>(Between(rng, 0, 4));
  c.max_cordoned = static_cast<int>(Between(rng, 0, 3));
  c.nodes = static_cast<int>(Between(rng, 1, 4));
  c.gpus = static_cast<int>(Between(rng, 1, 3));
  c.steps = static_cast<int>(Between(rng, 20, 200));
  static constexpr const char* kDurations[] = {"0s", "5s", "20s", "1m", "3m"};
  c.yaml = "limits:\n  cordon_node: {max_per_hour: " + std::to_string(c.max_per_hour) +
           ", max_cordoned: " + std::to_string(c.max_cordoned) + "}\nrules:\n";
  const int rules = static_cast<int>(Between(rng, 1, 5));
  for (int i = 0; i < rules; ++i) {
    std::string condition, signal = "gpu.temp_c";
    switch (Between(rng, 0, 4)) {
      case 0:
        condition = "{threshold_above: " + std::to_string(Between(rng, 70, 95)) + "}";
        break;
      case 1:
        condition = "{threshold_below: " + std::to_string(Between(rng, 70, 95)) +
                    ", window: " + std::to_string(Between(rng, 5, 60)) + "s}";
        break;
      case 2:
        condition = "{absent_for: " + std::to_string(Between(rng, 10, 120)) + "s}";
        break;
      case 3:
        condition = "{zscore_above: 2, window: 2m, min_points: 5}";
        break;
      default:
        signal = "gpu.xid_count";
        condition = "{increase_above: 0, window: " + std::to_string(Between(rng, 10, 120)) + "s}";
    }
    c.yaml += "  - name: R" + std::to_string(i) + "\n    signal: " + signal +
              "\n    condition: " + condition + "\n    for: " + kDurations[Between(rng, 0, 4)] +
              "\n    keep_firing_for: " + kDurations[Between(rng, 0, 4)] +
              "\n    action: " + (Chance(rng, 0.5) ? "cordon_node" : "notify") + "\n";
  }
  return c;
}

// Feeds random telemetry to engines, step by step.
class Telemetry {
 public:
  explicit Telemetry(const Case& c) : c_(c), rng_(c.seed ^ 0xFEEDull) {}

  // Adds the next step's samples; returns its time.
  Timestamp Step() {
    t_ += Between(rng_, 1, 20);
    for (int n = 0; n < c_.nodes; ++n) {
      for (int g = 0; g < c_.gpus; ++g) {
        const Labels labels = {{"node", "n" + std::to_string(n)}, {"gpu", std::to_string(g)}};
        if (Chance(rng_, 0.8)) {  // sometimes silent
          double& temp = temp_[labels];
          temp = std::clamp(temp + static_cast<double>(Between(rng_, -6, 6)), 60.0, 100.0);
          src_.Add("gpu.temp_c", labels, At(t_), temp);
        }
        int64_t& xid = xid_[labels];
        if (Chance(rng_, 0.03)) xid = 0;  // agent restart
        if (Chance(rng_, 0.05)) xid += Between(rng_, 1, 3);
        src_.Add("gpu.xid_count", labels, At(t_), static_cast<double>(xid));
      }
    }
    return At(t_);
  }
  const FakeSource& source() const { return src_; }

 private:
  const Case& c_;
  std::mt19937_64 rng_;
  int64_t t_ = 0;
  FakeSource src_;
  std::map<Labels, double> temp_;
  std::map<Labels, int64_t> xid_;
};

// Checks one evaluation against the alert set of the one before.
void CheckLifecycle(const RuleSet& rules, const std::map<std::string, Alert>& before,
                    const Evaluation& e, Timestamp now, const std::string& where) {
  std::set<std::string> fingerprints;
  for (const Alert& a : e.alerts) {
    ASSERT_TRUE(fingerprints.insert(a.fingerprint).second) << where << " duplicate alert";
    ASSERT_EQ(a.fingerprint, AlertFingerprint(a.labels)) << where;
    const Rule* rule = rules.Find(a.rule);
    ASSERT_NE(rule, nullptr) << where;
    auto prev = before.find(a.fingerprint);
    if (a.state == AlertState::kPending && prev != before.end() &&
        prev->second.state == AlertState::kPending) {
      // Still pending: the same pending spell.
      ASSERT_EQ(a.active_at, prev->second.active_at) << where;
    }
    if (a.state == AlertState::kFiring) {
      ASSERT_GE(a.starts_at - a.active_at, rule->for_duration) << where << " fired early";
    }
  }
  for (const Transition& t : e.transitions) {
    const Alert& a = t.alert;
    const Rule* rule = rules.Find(a.rule);
    auto prev = before.find(a.fingerprint);
    const bool was_pending = prev != before.end() && prev->second.state == AlertState::kPending;
    const bool was_firing = prev != before.end() && prev->second.state == AlertState::kFiring;
    switch (t.kind) {
      case TransitionKind::kPending:
        ASSERT_FALSE(was_pending || was_firing) << where;
        ASSERT_EQ(a.active_at, now) << where;
        ASSERT_GT(rule->for_duration, Duration(0)) << where;
        break;
      case TransitionKind::kFiring:
        ASSERT_FALSE(was_firing) << where;
        ASSERT_EQ(a.starts_at, now) << where;
        if (rule->for_duration > Duration(0)) {
          // Pending in the evaluation before, since the same active_at, for `for`.
          ASSERT_TRUE(was_pending) << where << " fired without pending";
          ASSERT_EQ(prev->second.active_at, a.active_at) << where;
        } else {
          ASSERT_EQ(a.active_at, now) << where;
        }
        ASSERT_GE(now - a.active_at, rule->for_duration) << where;
        break;
      case TransitionKind::kResolved:
        ASSERT_TRUE(was_firing) << where << " resolved without firing";
        ASSERT_EQ(a.ends_at, now) << where;
        // False since keep_firing_since (cleared on resolving), for keep_firing_for.
        if (prev->second.keep_firing_since) {
          ASSERT_GE(now - *prev->second.keep_firing_since, rule->keep_firing_for) << where;
        } else {
          ASSERT_EQ(rule->keep_firing_for, Duration(0)) << where;
        }
        break;
    }
  }
}

TEST(EnginePropertyTest, DeterministicAndLifecycleHolds) {
  const int cases = static_cast<int>(EnvOr("TRAINYARD_PROP_CASES", 200));
  const uint64_t first = static_cast<uint64_t>(EnvOr("TRAINYARD_PROP_SEED", 1));
  int transitions = 0, fired = 0, suppressed = 0;
  for (uint64_t seed = first; seed < first + cases; ++seed) {
    const Case c = RandomCase(seed);
    auto rules = LoadRules("", c.yaml, "prop.yaml");
    ASSERT_TRUE(rules.ok()) << rules.status().ToString() << "\n" << c.yaml;
    Engine a(*rules), b(*rules);
    std::optional<Engine> restored;
    const int restore_at = static_cast<int>(seed % c.steps);
    Telemetry run(c);
    std::map<std::string, Alert> before;
    std::vector<Timestamp> let_through;  // cordons not suppressed
    for (int step = 0; step < c.steps; ++step) {
      const Timestamp now = run.Step();
      const std::string where =
          "seed " + std::to_string(seed) + " step " + std::to_string(step) + "\n" + c.yaml;
      if (step == restore_at) {
        restored.emplace(*rules);
        restored->ImportState(a.ExportState());
      }
      const Evaluation ea = a.Evaluate(now, run.source());
      const Evaluation eb = b.Evaluate(now, run.source());
      ASSERT_EQ(ea.alerts, eb.alerts) << where;
      ASSERT_EQ(ea.actions, eb.actions) << where;
      ASSERT_EQ(ea.transitions.size(), eb.transitions.size()) << where;
      for (size_t i = 0; i < ea.transitions.size(); ++i) {
        ASSERT_EQ(ea.transitions[i].kind, eb.transitions[i].kind) << where;
        ASSERT_EQ(ea.transitions[i].alert, eb.transitions[i].alert) << where;
      }
      if (restored) {
        const Evaluation er = restored->Evaluate(now, run.source());
        ASSERT_EQ(ea.alerts, er.alerts) << where << " after restore";
        ASSERT_EQ(ea.actions, er.actions) << where << " after restore";
      }
      ASSERT_NO_FATAL_FAILURE(CheckLifecycle(*rules, before, ea, now, where));

      for (const ActionRequest& r : ea.actions) {
        if (r.suppressed) {
          ++suppressed;
          continue;
        }
        let_through.push_back(now);
        std::erase_if(let_through, [&](Timestamp t) { return t <= now - std::chrono::hours(1); });
        ASSERT_LE(static_cast<int>(let_through.size()), c.max_per_hour) << where;
      }
      ASSERT_LE(static_cast<int>(a.ExportState().cordoned_nodes.size()), c.max_cordoned) << where;

      before.clear();
      for (const Alert& x : ea.alerts) before[x.fingerprint] = x;
      transitions += static_cast<int>(ea.transitions.size());
      for (const Transition& t : ea.transitions) fired += t.kind == TransitionKind::kFiring;
    }
  }
  // The cases exercise what they claim to.
  EXPECT_GT(transitions, cases);
  EXPECT_GT(fired, cases / 2);
  EXPECT_GT(suppressed, 0);
}

}  // namespace
}  // namespace trainyard::monitor
