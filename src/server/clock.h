// Clock: where the server reads the time, injected so that tests move it by hand.
//
// The state machine (cluster.h) never reads the system clock; it asks its Clock.
// SystemClock reads std::chrono::system_clock; FakeClock is set and advanced by tests.
//
// Thread-safety: Now() may be called from any thread; FakeClock's setters too.
#pragma once

#include <atomic>
#include <chrono>

#include "core/units.h"

namespace trainyard::server {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Timestamp Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  Timestamp Now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(Timestamp start = Timestamp(Duration(1'764'000'000'000))) {
    ms_.store(start.time_since_epoch().count());
  }
  Timestamp Now() const override { return Timestamp(Duration(ms_.load())); }
  void Advance(Duration d) { ms_.fetch_add(d.count()); }
  void Set(Timestamp t) { ms_.store(t.time_since_epoch().count()); }

 private:
  std::atomic<int64_t> ms_{0};
};

}  // namespace trainyard::server
