// The node health check (docs/agent.md, "Health checks"): like Slurm's
// HealthCheckProgram, an executable the admin names (--health-check) that the agent runs
// when the node joins, every interval and after a task fails; exit status 0 says the
// node is fit for work, anything else that it is not, and the output says why. The
// agent reports the latest result in its register and heartbeat bodies; the server
// decides what to do about it.
//
// The program is execve'd (argv = [program], no shell) as its own process group, with
// only PATH (the agent's), TRAINYARD_NODE and TRAINYARD_HEALTH_TRIGGER in its
// environment, stdin from /dev/null and stdout+stderr into a pipe. A run that outlives
// its timeout gets SIGKILL, group and all, and fails.
//
// A HealthChecker runs checks on a thread of its own, so that a slow check never holds
// up the agent's loop: one run at a time; a request while one runs makes one more run
// after it (later requests join that one).
//
// Thread-safety: every HealthChecker method is safe from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/status.h"
#include "core/units.h"
#include "protocol/messages.h"

namespace trainyard::agent {

// What a check said, as the agent reports it: `ok`, `output` (its stdout and stderr,
// trimmed, at most kMaxHealthCheckOutput bytes: the first part, and a line saying it
// was cut), `at_ms` (when it ended, by the agent's clock) and `trigger`.
using protocol::HealthCheckResult;

inline constexpr size_t kMaxHealthCheckOutput = 4096;

struct HealthCheckOptions {
  std::string program;    // absolute path of an executable
  std::string node_name;  // TRAINYARD_NODE
  Duration timeout = std::chrono::seconds(60);
  // The agent's clock, for HealthCheckResult::at_ms; default: the wall clock.
  std::function<Timestamp()> now;
};

// OK when `path` names an executable regular file; else InvalidArgument naming `flag`,
// the path and what is wrong with it ("--health-check: /x/check: no such file").
Status CheckHealthCheckProgram(const std::string& flag, const std::string& path);

// Runs the check once on the calling thread and returns what it said. A run that
// cannot start fails with the reason; one killed at the timeout fails with "health
// check timed out after 60s". `cancel`, when set, kills the check early (the result
// then says so).
HealthCheckResult RunHealthCheck(const HealthCheckOptions& options, const std::string& trigger,
                                 const std::atomic<bool>* cancel = nullptr);

class HealthChecker {
 public:
  explicit HealthChecker(HealthCheckOptions options);
  // Kills a check under way (SIGKILL to its group), waits for the thread.
  ~HealthChecker();
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  // Asks for a run for `trigger` (see the header comment for coalescing).
  void Request(const std::string& trigger);
  // The latest result; nullopt until the first run ends.
  std::optional<HealthCheckResult> Latest() const;
  // Runs ended so far.
  int64_t runs() const;

 private:
  void Loop();

  const HealthCheckOptions options_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::string> pending_;       // GUARDED_BY(mu_): the trigger of the next run
  std::optional<HealthCheckResult> latest_;  // GUARDED_BY(mu_)
  int64_t runs_ = 0;                         // GUARDED_BY(mu_)
  bool stopping_ = false;                    // GUARDED_BY(mu_)
  std::thread thread_;                       // last: starts once the rest is built
};

}  // namespace trainyard::agent
