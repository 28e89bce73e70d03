// SignalBuffer: the recent history of every alert signal (monitor/rules.h Signals()),
// in memory, for the alert engine and `diagnose` to read.
//
// The server writes samples as they arrive (heartbeats, metrics lines) and as it derives
// them (once per evaluation: step-time ratios, checkpoint and heartbeat ages, ...). A
// series is one signal with one label set. History older than `horizon` is dropped, and
// each series holds at most `max_samples`. Signals that a source reports at a fixed
// rate (telemetry, derived values) are thinned to one sample per `spacing`, except
// that the newest sample is always kept as it came: a sample arriving less than
// `spacing` after the one before the last replaces the last, so alerts see every new
// value at once while an hour of 1 Hz telemetry costs a few hundred samples. Points a
// job logs (loss, grad norm, ...) are kept one by one (z-scores need them).
//
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/units.h"
#include "monitor/engine.h"

namespace trainyard::server {

struct SignalBufferOptions {
  Duration horizon = std::chrono::minutes(40);
  Duration spacing = std::chrono::seconds(5);
  size_t max_samples = 4096;
};

class SignalBuffer : public monitor::SignalSource {
 public:
  explicit SignalBuffer(SignalBufferOptions options = {}) : opt_(options) {}

  // Adds a sample. `dense`: keep every sample (points a job logs); otherwise thinned to
  // `spacing`. Samples older than the series' newest are inserted in time order.
  void Add(const std::string& signal, const monitor::Labels& labels, Timestamp t, double value,
           bool dense = false);

  // The newest sample of one series, if it has one at or after `since`.
  std::optional<monitor::Sample> Latest(const std::string& signal, const monitor::Labels& labels,
                                        Timestamp since) const;

  // Drops samples older than now - horizon, and series left empty.
  void Prune(Timestamp now);
  // Drops every series for which `match(signal, labels)` holds.
  void Forget(const std::function<bool(const std::string&, const monitor::Labels&)>& match);

  std::vector<monitor::Series> Query(const std::string& signal, Timestamp from,
                                     Timestamp to) const override;

  size_t series_count() const;
  size_t sample_count() const;

 private:
  using History = std::deque<monitor::Sample>;
  const SignalBufferOptions opt_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<monitor::Labels, History>> data_;  // GUARDED_BY(mu_)
};

}  // namespace trainyard::server
