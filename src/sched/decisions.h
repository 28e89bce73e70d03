// Decisions: what one scheduling pass concluded. Something else (the server's
// applier, the simulator) carries them out.
//
// Every pending job of the snapshot appears exactly once: in `binds`, in `waiting`
// (not now, with the reason) or in `infeasible` (never on this cluster, with why).
// A job that caused preemptions or holds a reservation is also in `waiting`.
#pragma once

#include <memory>
#include <string>
#include <utility>
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

// Immutable text shared by the decisions that give it: one pass leaves tens of
// thousands of jobs waiting, for a few thousand distinct reasons, and a copy each
// would be an allocation each.
class SharedText {
 public:
  SharedText() = default;
  SharedText(std::string text)  // NOLINT: implicit, it stands for a string
      : text_(std::make_shared<const std::string>(std::move(text))) {}
  SharedText(const char* text) : SharedText(std::string(text)) {}  // NOLINT

  const std::string& str() const { return text_ ? *text_ : Empty(); }
  operator const std::string&() const { return str(); }  // NOLINT
  bool operator==(const SharedText& o) const { return str() == o.str(); }

 private:
  static const std::string& Empty() {
    static const std::string empty;
    return empty;
  }
  std::shared_ptr<const std::string> text_;
};

struct Waiting {
  JobId job = 0;
  SharedText reason;  // "waiting for 16x H100 in one leaf; queue 'research' at its limit ..."

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
