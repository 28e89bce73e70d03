#include "sched/retry.h"

#include <algorithm>

namespace trainyard::sched {

Duration RetryBackoff(const RetrySpec& spec, int32_t retry) {
  if (retry <= 0) return Duration(0);
  int64_t ms = spec.backoff.count();
  for (int32_t i = 1; i < retry && ms < spec.max_backoff.count(); ++i) ms = SaturatingMul(ms, 2);
  return Duration(std::min(ms, std::max(spec.max_backoff.count(), spec.backoff.count())));
}

bool MayRetry(const RetrySpec& spec, int32_t retries) { return retries < spec.max; }

Timestamp EligibleTime(const Job& job) {
  for (auto it = job.attempts.rbegin(); it != job.attempts.rend(); ++it) {
    if (!it->end_time) continue;
    if (it->exit_reason != ExitReason::kFailed && it->exit_reason != ExitReason::kStartFailed) {
      break;  // the last ended attempt was not a failure: no backoff
    }
    return *it->end_time + RetryBackoff(job.spec.retry, job.retries);
  }
  return job.submit_time;
}

std::vector<std::string> ExcludedNodes(const Job& job) {
  std::vector<std::string> out = job.excluded_nodes;
  if (job.spec.retry.exclude_failed_nodes) {
    for (const Attempt& a : job.attempts) {
      if (a.exit_reason == ExitReason::kFailed || a.exit_reason == ExitReason::kStartFailed) {
        out.insert(out.end(), a.nodes.begin(), a.nodes.end());
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace trainyard::sched
