// Job: a submitted JobSpec and where it is in its life.
//
// States and the only legal moves between them:
//
//   Pending -> Admitted -> Starting -> Running -> Succeeded | Failed | Cancelled
//   Running -> Preempting -> Pending        (requeued; resumes from its checkpoint)
//   Running | Starting | Preempting -> Lost -> Pending   (node failure)
//   Running | Starting -> Pending           (an attempt failed and a retry is left)
//   Admitted -> Pending                     (binding revoked before start)
//   any non-terminal -> Cancelled; Starting | Preempting | Lost -> Failed
//
// Each entry into Starting opens an Attempt (nodes, start time); leaving Running,
// Starting, Preempting or Lost for another state closes it with an exit reason.
// Transitions are checked: an illegal one returns FailedPrecondition and changes
// nothing. Time is passed in, never read.
//
// Thread-safety: a plain value; callers serialise access.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_spec.h"
#include "core/status.h"
#include "core/units.h"

namespace trainyard {

using JobId = int64_t;

enum class JobState {
  kPending,
  kAdmitted,
  kStarting,
  kRunning,
  kPreempting,
  kLost,
  kSucceeded,
  kFailed,
  kCancelled,
};

std::string_view JobStateName(JobState s);  // "Pending", "Admitted", ...
std::optional<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState s);
bool CanTransition(JobState from, JobState to);

enum class ExitReason {
  kNone,         // attempt still open
  kSucceeded,    // all ranks exited 0
  kFailed,       // a rank exited non-zero or was killed by a signal
  kStartFailed,  // could not start (exec failure, node refused)
  kPreempted,    // preempted; requeued
  kNodeLost,     // a node of the gang stopped reporting
  kCancelled,    // cancelled by a user
  kTimeLimit,    // ran past its time limit
};
std::string_view ExitReasonName(ExitReason r);  // "succeeded", "failed", ...
std::optional<ExitReason> ParseExitReason(std::string_view name);

// How an agent's report on a rank the kernel's OOM killer ended begins: "OOMKilled:
// memory limit 2Gi" (docs/execution.md); the attempt's message then says it.
inline constexpr std::string_view kOomKilled = "OOMKilled";

struct Attempt {
  int32_t index = 0;  // 0-based
  Timestamp start_time{};
  std::optional<Timestamp> end_time;
  std::vector<std::string> nodes;  // one per replica, in rank order
  // GPU indices each replica was bound to, parallel to `nodes` (empty when unknown,
  // e.g. attempts stored before this field existed). Kept so that a restarted
  // server rebuilds running placements exactly and never binds a GPU twice.
  std::vector<std::vector<int>> gpus;
  ExitReason exit_reason = ExitReason::kNone;
  int32_t exit_code = 0;
  std::string message;    // e.g. "rank 3 on node-7 killed by SIGSEGV"
  Duration lost_work{0};  // work since the last checkpoint when it ended early
  // The image its ranks ran, as the first node to start one resolved the spec's image:
  // "sha256:<hex>"; empty for host processes (and until a rank has started).
  std::string image_digest;

  bool operator==(const Attempt&) const = default;
};

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;
  Timestamp completed_at{};
  Duration write_duration{0};

  bool operator==(const CheckpointInfo&) const = default;
};

struct Job {
  JobId id = 0;
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;  // why it is in this state (pending reason, failure summary)
  Timestamp submit_time{};
  Timestamp state_time{};  // when it entered `state`
  std::string submitted_by;
  std::vector<Attempt> attempts;
  std::optional<CheckpointInfo> checkpoint;  // latest complete checkpoint
  int32_t retries = 0;                       // failed attempts that were retried
  std::vector<std::string> excluded_nodes;   // nodes this job must not use again
  bool held = false;                         // Pending but not to be scheduled
  // The submitting user's own Unix identity when it has one (User::run_as_uid, taken
  // at submission); -1: the ranks run as the tenant's run_as.
  int64_t run_as_uid = -1;
  int64_t run_as_gid = -1;

  bool operator==(const Job&) const = default;

  // Moves to `to` at `at` with `reason`. Fails, changing nothing, when the move is
  // not legal. Entering Starting requires StartAttempt instead.
  Status TransitionTo(JobState to, Timestamp at, std::string reason);
  // Pending|Admitted -> Starting: opens attempt N on `nodes`.
  Status StartAttempt(Timestamp at, std::vector<std::string> nodes);
  // Leaves an attempt-holding state for `to`, closing the open attempt with `exit`.
  // Lost work is computed from the latest checkpoint (or attempt start).
  Status EndAttempt(JobState to, Timestamp at, ExitReason exit, int32_t exit_code,
                    std::string message);

  // The open attempt, if any.
  const Attempt* CurrentAttempt() const;
  // Work lost if the job stopped at `at`: time since the later of its latest
  // checkpoint and the start of its current attempt; 0 when not running.
  Duration LostWorkAt(Timestamp at) const;
};

}  // namespace trainyard
