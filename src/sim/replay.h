// Replay: runs a Scenario through sched::Schedule, one pass per step, and records
// what happened before each pass and what the pass decided.
//
// This is the simulator's smallest loop, deterministic and integer-timed: no clock,
// no randomness, one pass per step and none between steps. At each step's time `at`:
//
//  (a) Jobs preempted earlier whose grace has run out (by default: every job
//      preempted at an earlier step) stop and go back to Pending, keeping their
//      submit time. Work since their last checkpoint is lost; what they had saved
//      (up to the last checkpoint) counts towards their duration when they rerun.
//  (b) Running jobs whose start + remaining duration <= at succeed; those whose
//      start + time limit comes first are stopped at the limit (TimedOut). Jobs with
//      a checkpoint interval complete checkpoints at last + k * interval <= at
//      (last: the previous checkpoint, or the start).
//  (c) The step's own events apply, in this order: node_state (a node going Down
//      requeues the jobs on it), finish, checkpoint, submit, hold, release.
//
// Then the Snapshot is taken (lifecycle::SnapshotBuilder, as the server's: nodes with
// their current state; running jobs with placements, priority and preemptible flag of
// their class, start time, last checkpoint, time limit and preempting flag; pending
// jobs with submit time, held flag, excluded nodes and their attained service),
// Schedule runs, and its decisions apply: a bind starts the job at `at`; a preemption
// marks the victim preempting (it keeps its GPUs until (a)); an infeasible job is
// rejected and never considered again.
//
// Each pass's decisions are also checked against the scheduler's contract
// (sched::CheckDecisions, sched/contract.h). Any breach is recorded as a violation of
// that step.
//
// The jobs are the job lifecycle's (lifecycle/lifecycle.h), as in the server and the
// trace simulator: the replay plays the scenario's events and what its jobs do by
// themselves to it, and records what it saw.
//
// Thread-safety: a pure function of its input.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_spec.h"
#include "sched/decisions.h"
#include "sim/scenario.h"

namespace trainyard::sim {

enum class ReplayState {
  kNotSubmitted,
  kPending,
  kRunning,
  kPreempting,  // told to stop; still holds its GPUs
  kSucceeded,
  kTimedOut,
  kInfeasible,
};
std::string_view ReplayStateName(ReplayState s);  // "Pending", "TimedOut", ...

// Something that happened before a pass.
struct ReplayEvent {
  enum class Kind {
    kNodeState,   // node, detail = new state
    kSucceeded,   // job; at = when it ended
    kTimedOut,    // job; at = when its time limit stopped it
    kFinished,    // job finished by the step
    kRequeued,    // job back to Pending (preempted earlier, or its node went Down)
    kCheckpoint,  // job; at = when the checkpoint completed
    kSubmitted,
    kHeld,
    kReleased,
  };
  Kind kind = Kind::kSubmitted;
  JobId job = 0;
  std::string node;
  Duration at{0};
  std::string detail;
};
std::string_view ReplayEventName(ReplayEvent::Kind k);  // "submit", "requeue", ...

struct StepOutcome {
  int number = 0;  // 1-based
  Duration at{0};
  std::vector<ReplayEvent> events;
  sched::Decisions decisions;
  std::vector<std::string> violations;  // broken scheduler contracts
};

struct JobOutcome {
  JobId id = 0;
  std::string name;
  ReplayState state = ReplayState::kNotSubmitted;
  std::string reason;  // latest waiting or infeasible reason
  int starts = 0;
  int preemptions = 0;
  std::optional<Duration> first_start;
  std::optional<Duration> last_start;
  std::optional<Duration> end;  // when it succeeded or timed out
  Duration lost_gpu_time{0};    // GPU-time lost to preemptions and node loss
};

struct ReplayResult {
  std::vector<StepOutcome> steps;
  std::vector<JobOutcome> jobs;    // by id
  std::vector<Diagnostic> errors;  // an event that cannot apply; the replay stops there
  bool ok() const { return errors.empty(); }
  size_t Violations() const;
};

// REQUIRES: `scenario` came from ParseScenario (its policy is valid).
ReplayResult Replay(const Scenario& scenario);

}  // namespace trainyard::sim
