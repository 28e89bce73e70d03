// Test helpers for the monitor layer: an in-memory SignalSource and a rules builder.
// Header-only, for tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "monitor/engine.h"
#include "monitor/rules.h"

namespace trainyard::monitor::testing {

// 2026-11-29T09:00:00Z: tests count seconds from here.
inline constexpr Timestamp kT0{std::chrono::seconds(1795942800)};
inline Timestamp At(int64_t seconds) { return kT0 + std::chrono::seconds(seconds); }

// Series held in memory. Query answers like a real store (samples in [from, to]) and
// records what it was asked.
class FakeSource : public SignalSource {
 public:
  void Add(const std::string& signal, const Labels& labels, Timestamp t, double v) {
    std::vector<Sample>& samples = data_[signal][labels];
    samples.insert(std::upper_bound(samples.begin(), samples.end(), t, ByTime()),
                   Sample{t, v});  // kept in time order
  }
  void Clear() { data_.clear(); }

  std::vector<Series> Query(const std::string& signal, Timestamp from,
                            Timestamp to) const override {
    queries.emplace_back(signal, from, to);
    std::vector<Series> out;
    auto it = data_.find(signal);
    if (it == data_.end()) return out;
    for (const auto& [labels, samples] : it->second) {
      auto begin = std::lower_bound(samples.begin(), samples.end(), from, ByTime());
      auto end = std::upper_bound(samples.begin(), samples.end(), to, ByTime());
      if (begin < end) out.push_back(Series{labels, std::vector<Sample>(begin, end)});
    }
    return out;
  }

  mutable std::vector<std::tuple<std::string, Timestamp, Timestamp>> queries;

 private:
  struct ByTime {
    bool operator()(const Sample& a, Timestamp t) const { return a.time < t; }
    bool operator()(Timestamp t, const Sample& a) const { return t < a.time; }
  };
  std::map<std::string, std::map<Labels, std::vector<Sample>>> data_;
};

// The rule set of a user file alone (no defaults); fails the test on an error.
inline RuleSet Rules(std::string_view yaml) {
  auto set = LoadRules("", yaml, "test.yaml");
  EXPECT_TRUE(set.ok()) << set.status().ToString();
  return set.ok() ? *set : RuleSet{};
}

}  // namespace trainyard::monitor::testing
