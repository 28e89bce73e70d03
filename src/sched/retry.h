// Retry policy: when a failed job may run again, and whether it may at all.
//
// After a failed attempt a job waits retry.backoff, doubled for each retry already
// made, capped at retry.max_backoff; after retry.max retries it fails for good.
// With retry.exclude_failed_nodes, the nodes its failed attempts ran on are
// excluded from its placements.
#pragma once

#include <string>
#include <vector>

#include "core/job.h"

namespace trainyard::sched {

// The backoff before retry number `retry` (1-based): backoff * 2^(retry-1), capped.
Duration RetryBackoff(const RetrySpec& spec, int32_t retry);

// True when a job that has failed `retries` times may be retried once more.
bool MayRetry(const RetrySpec& spec, int32_t retries);

// When `job` (Pending after a failed attempt) becomes eligible again: the end of
// its last failed attempt plus the backoff; its submit time when it never failed.
Timestamp EligibleTime(const Job& job);

// Nodes the job must avoid: those of its failed attempts, when it asked for that,
// plus any excluded explicitly. Sorted, unique.
std::vector<std::string> ExcludedNodes(const Job& job);

}  // namespace trainyard::sched
