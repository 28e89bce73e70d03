// Arithmetic on signal series that the alert engine and the job diagnosis share: how a
// window of samples is read from a SignalSource, how a counter's increase is counted
// across restarts, how far the latest sample stands above the ones before it; a
// series' label values and durations in seconds.
// Private to src/monitor: the engine's and the diagnosis' headers are the interface.
//
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "monitor/engine.h"
#include "monitor/rules.h"

namespace trainyard::monitor {

// zscore_above never divides by less than this, whatever the mean.
inline constexpr double kAbsoluteStddevFloor = 1e-12;

inline double Seconds(Duration d) { return static_cast<double>(d.count()) / 1000.0; }

// The value of label `name`; "" when the labels have none.
inline std::string Label(const Labels& labels, const std::string& name) {
  auto it = labels.find(name);
  return it == labels.end() ? std::string() : it->second;
}

// Every series of `signal` with samples in [from, to], by labels: series with equal
// labels merged, samples outside [from, to] dropped, samples in time order (stable, so
// equal times keep the source's order).
inline std::map<Labels, std::vector<Sample>> ReadSeries(const SignalSource& source,
                                                        const std::string& signal, Timestamp from,
                                                        Timestamp to) {
  auto in_window = [&](const Sample& x) { return x.time >= from && x.time <= to; };
  auto by_time = [](const Sample& a, const Sample& b) { return a.time < b.time; };
  std::map<Labels, std::vector<Sample>> series;
  for (Series& s : source.Query(signal, from, to)) {
    std::vector<Sample>& samples = series[std::move(s.labels)];
    if (samples.empty() && std::all_of(s.samples.begin(), s.samples.end(), in_window)) {
      samples = std::move(s.samples);  // the usual case: one series, all in the window
    } else {
      std::copy_if(s.samples.begin(), s.samples.end(), std::back_inserter(samples), in_window);
    }
  }
  for (auto& [labels, samples] : series) {
    if (!std::is_sorted(samples.begin(), samples.end(), by_time)) {
      std::stable_sort(samples.begin(), samples.end(), by_time);
    }
  }
  return series;
}

// Sum of the counter's increases between consecutive finite samples; a drop is a
// restart from zero, which counts as the whole new value. Also the time the finite
// samples span. nullopt with fewer than two finite samples.
struct Increase {
  double amount = 0;
  Duration span{0};
};
inline std::optional<Increase> CounterIncrease(const std::vector<Sample>& samples) {
  Increase out;
  std::optional<Sample> first, prev;
  for (const Sample& s : samples) {
    if (!std::isfinite(s.value)) continue;
    if (prev) {
      out.amount += s.value >= prev->value ? s.value - prev->value : s.value;
    } else {
      first = s;
    }
    prev = s;
  }
  if (!first || prev->time == first->time) return std::nullopt;
  out.span = prev->time - first->time;
  return out;
}

// One sample against the finite samples before it.
struct ZScore {
  double z = 0;       // (sample - mean) / max(stddev, floor)
  double mean = 0;    // of the samples before it
  double stddev = 0;  // of those samples, unfloored
  int points = 0;     // how many finite samples came before it
  size_t index = 0;   // of the sample in the series
};

// The highest z-score among samples[first..]: each sample's distance above the mean
// of the finite samples before it, in standard deviations, never dividing by less
// than min_stddev, kRelativeStddevFloor x |mean| or kAbsoluteStddevFloor (rules.h).
// Samples that are not finite, or have fewer than max(min_points, 1) finite samples
// before them, are skipped; nullopt when none is left. One pass (Welford's running
// mean and variance), so a rule may look at every sample since its last evaluation.
inline std::optional<ZScore> MaxZScore(const std::vector<Sample>& samples, size_t first,
                                       int min_points, double min_stddev) {
  std::optional<ZScore> best;
  double mean = 0, m2 = 0;
  int n = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double v = samples[i].value;
    if (!std::isfinite(v)) continue;
    if (i >= first && n >= std::max(min_points, 1)) {
      const double stddev = std::sqrt(m2 / n);
      const double floor =
          std::max({min_stddev, kRelativeStddevFloor * std::abs(mean), kAbsoluteStddevFloor});
      const double z = (v - mean) / std::max(stddev, floor);
      if (!best || z > best->z) best = ZScore{z, mean, stddev, n, i};
    }
    ++n;
    const double d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
  }
  return best;
}

// The latest sample's z-score (MaxZScore of the last sample alone); nullopt when it is
// not finite or too few finite samples come before it.
inline std::optional<ZScore> ZScoreOfLatest(const std::vector<Sample>& samples, int min_points,
                                            double min_stddev) {
  if (samples.empty() || !std::isfinite(samples.back().value)) return std::nullopt;
  return MaxZScore(samples, samples.size() - 1, min_points, min_stddev);
}

}  // namespace trainyard::monitor
