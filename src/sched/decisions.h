// Decisions: what one scheduling pass concluded. Something else (the server's
// applier, the simulator) carries them out.
//
// Every pending job of the snapshot appears exactly once: in `binds`, in `waiting`
// (not now, with the reason) or in `infeasible` (never on this cluster, with why).
// A job that caused preemptions or holds a reservation is also in `waiting`.
#pragma once

#include <string>
#include <vector>

#include "sched/snapshot.h"

namespace trainyard::sched {

// Start `job` with these replicas (all of them at once: a gang).
struct Bind {
  JobId job = 0;
  std::vector<Placement> replicas;

  bool operator==(const Bind&) const = default;
};

// Tell a running job to checkpoint and stop; it goes back to Pending.
struct Preempt {
  JobId job = 0;
  JobId for_job = 0;          // the pending job that needs its resources
  Duration lost_gpu_time{0};  // its GPUs x time since its last checkpoint (or start)
  std::string reason;

  bool operator==(const Preempt&) const = default;
};

// `job` will start on these GPUs no later than `earliest_start` (from running
// jobs' time limits); others may use them only if they finish before then.
struct Reserve {
  JobId job = 0;
  std::vector<Placement> replicas;
  Timestamp earliest_start{};

  bool operator==(const Reserve&) const = default;
};

struct Waiting {
  JobId job = 0;
  std::string reason;  // "waiting for 16x H100 in one leaf; queue 'research' at its limit ..."

  bool operator==(const Waiting&) const = default;
};

struct Infeasible {
  JobId job = 0;
  std::string reason;  // "asks for 16 H100 per replica; the largest H100 node has 8"

  bool operator==(const Infeasible&) const = default;
};

struct Decisions {
  std::vector<Bind> binds;
  std::vector<Preempt> preemptions;
  std::vector<Reserve> reservations;
  std::vector<Waiting> waiting;
  std::vector<Infeasible> infeasible;

  bool operator==(const Decisions&) const = default;
};

}  // namespace trainyard::sched
