#include "core/job.h"

#include <algorithm>

namespace trainyard {

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "Pending";
    case JobState::kAdmitted:
      return "Admitted";
    case JobState::kStarting:
      return "Starting";
    case JobState::kRunning:
      return "Running";
    case JobState::kPreempting:
      return "Preempting";
    case JobState::kLost:
      return "Lost";
    case JobState::kSucceeded:
      return "Succeeded";
    case JobState::kFailed:
      return "Failed";
    case JobState::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

namespace {
constexpr JobState kAllStates[] = {
    JobState::kPending,   JobState::kAdmitted,   JobState::kStarting,
    JobState::kRunning,   JobState::kPreempting, JobState::kLost,
    JobState::kSucceeded, JobState::kFailed,     JobState::kCancelled,
};
constexpr ExitReason kAllExitReasons[] = {
    ExitReason::kNone,        ExitReason::kSucceeded, ExitReason::kFailed,
    ExitReason::kStartFailed, ExitReason::kPreempted, ExitReason::kNodeLost,
    ExitReason::kCancelled,   ExitReason::kTimeLimit,
};

// States in which an attempt is open.
bool HoldsAttempt(JobState s) {
  return s == JobState::kStarting || s == JobState::kRunning || s == JobState::kPreempting ||
         s == JobState::kLost;
}
}  // namespace

std::optional<JobState> ParseJobState(std::string_view name) {
  for (auto s : kAllStates) {
    if (JobStateName(s) == name) return s;
  }
  return std::nullopt;
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

bool CanTransition(JobState from, JobState to) {
  using S = JobState;
  if (IsTerminal(from)) return false;
  if (to == S::kCancelled) return true;
  switch (from) {
    case S::kPending:
      return to == S::kAdmitted || to == S::kStarting;
    case S::kAdmitted:
      return to == S::kStarting || to == S::kPending;
    case S::kStarting:
      return to == S::kRunning || to == S::kPending || to == S::kFailed || to == S::kLost;
    case S::kRunning:
      return to == S::kSucceeded || to == S::kFailed || to == S::kPreempting || to == S::kLost ||
             to == S::kPending;
    case S::kPreempting:
      return to == S::kPending || to == S::kSucceeded || to == S::kFailed || to == S::kLost;
    case S::kLost:
      return to == S::kPending || to == S::kFailed;
    default:
      return false;
  }
}

std::string_view ExitReasonName(ExitReason r) {
  switch (r) {
    case ExitReason::kNone:
      return "none";
    case ExitReason::kSucceeded:
      return "succeeded";
    case ExitReason::kFailed:
      return "failed";
    case ExitReason::kStartFailed:
      return "start-failed";
    case ExitReason::kPreempted:
      return "preempted";
    case ExitReason::kNodeLost:
      return "node-lost";
    case ExitReason::kCancelled:
      return "cancelled";
    case ExitReason::kTimeLimit:
      return "time-limit";
  }
  return "none";
}

std::optional<ExitReason> ParseExitReason(std::string_view name) {
  for (auto r : kAllExitReasons) {
    if (ExitReasonName(r) == name) return r;
  }
  return std::nullopt;
}

namespace {
Status Illegal(const Job& job, JobState to) {
  return FailedPrecondition("job " + std::to_string(job.id) + ": cannot go from " +
                            std::string(JobStateName(job.state)) + " to " +
                            std::string(JobStateName(to)));
}
}  // namespace

Status Job::TransitionTo(JobState to, Timestamp at, std::string why) {
  if (!CanTransition(state, to)) return Illegal(*this, to);
  if (to == JobState::kStarting) {
    return FailedPrecondition("job " + std::to_string(id) +
                              ": entering Starting opens an attempt; use StartAttempt");
  }
  if (HoldsAttempt(state) && !HoldsAttempt(to)) {
    return FailedPrecondition("job " + std::to_string(id) + ": leaving " +
                              std::string(JobStateName(state)) +
                              " closes the open attempt; use EndAttempt");
  }
  state = to;
  state_time = at;
  reason = std::move(why);
  return Status::Ok();
}

Status Job::StartAttempt(Timestamp at, std::vector<std::string> nodes) {
  if (!CanTransition(state, JobState::kStarting)) return Illegal(*this, JobState::kStarting);
  if (held) return FailedPrecondition("job " + std::to_string(id) + " is held");
  Attempt a;
  a.index = static_cast<int32_t>(attempts.size());
  a.start_time = at;
  a.nodes = std::move(nodes);
  attempts.push_back(std::move(a));
  state = JobState::kStarting;
  state_time = at;
  reason.clear();
  return Status::Ok();
}

Status Job::EndAttempt(JobState to, Timestamp at, ExitReason exit, int32_t exit_code,
                       std::string message) {
  if (!CanTransition(state, to)) return Illegal(*this, to);
  if (!HoldsAttempt(state) || attempts.empty() || attempts.back().end_time) {
    return FailedPrecondition("job " + std::to_string(id) + " has no open attempt in state " +
                              std::string(JobStateName(state)));
  }
  if (HoldsAttempt(to)) {
    // Running -> Preempting / Lost keeps the attempt open; use TransitionTo.
    return FailedPrecondition("job " + std::to_string(id) + ": " + std::string(JobStateName(to)) +
                              " keeps the attempt open");
  }
  if (exit == ExitReason::kNone) {
    return InvalidArgument("job " + std::to_string(id) + ": an ended attempt needs an exit reason");
  }
  const Duration lost = exit == ExitReason::kSucceeded ? Duration(0) : LostWorkAt(at);
  Attempt& a = attempts.back();
  a.end_time = at;
  a.exit_reason = exit;
  a.exit_code = exit_code;
  a.message = message;
  a.lost_work = lost;
  if (to == JobState::kPending &&
      (exit == ExitReason::kFailed || exit == ExitReason::kStartFailed)) {
    ++retries;
  }
  state = to;
  state_time = at;
  reason = std::move(message);
  return Status::Ok();
}

const Attempt* Job::CurrentAttempt() const {
  if (attempts.empty() || attempts.back().end_time) return nullptr;
  return &attempts.back();
}

Duration Job::LostWorkAt(Timestamp at) const {
  const Attempt* a = CurrentAttempt();
  if (a == nullptr) return Duration(0);
  Timestamp from = a->start_time;
  if (checkpoint && checkpoint->completed_at > from) from = checkpoint->completed_at;
  return at > from ? std::chrono::duration_cast<Duration>(at - from) : Duration(0);
}

}  // namespace trainyard
