// Policy: the named pieces a scheduling pass is assembled from.
//
// Each piece is chosen by name, lives in its own file behind one small interface,
// and is looked up in a registry, so a new ordering, placement scorer or
// preemption cost model slots in without touching the pass:
//
//   ordering    which pending job is considered next     (ordering_*.cc)
//   placement   which of the feasible nodes to prefer    (placement_*.cc)
//   preemption  what a set of victims costs              (preemption_cost_*.cc)
//
// Plus switches and knobs of the pass itself (backfill, reservations, anti-thrash).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sched/placement.h"
#include "sched/snapshot.h"

namespace trainyard::sched {

struct Policy {
  std::string ordering = "priority";     // priority | fifo | las
  std::string placement = "topology";    // topology | best-fit | first-fit | fragmentation
  std::string preemption = "lost-work";  // lost-work | none
  bool backfill = true;                  // EASY backfill around reservations
  int reservations = 1;                  // blocked jobs that get a reservation per pass
  Duration min_runtime{300'000};         // never preempt a job younger than this
  Duration restart_cost{60'000};         // charged per victim GPU on top of lost work
  int max_victims = 256;                 // give up a preemption search past this many
  // Victim searches per pass. Each costs time in the number of running jobs, and a
  // busy cluster can have thousands of blocked jobs that each could preempt; past
  // this many, the rest wait for the next pass (highest in line search first), as
  // Slurm bounds its passes with default_queue_depth and bf_max_job_test.
  int max_preemption_searches = 128;
};

// Checks that every named piece exists; the message lists the valid names.
Status ValidatePolicy(const Policy& policy);

// --- ordering -------------------------------------------------------------------
// Orders pending jobs: smaller keys go first. A queue's share changes as its jobs
// are bound, so the pass asks again for the key of a queue's next job after each
// bind; within one queue, keys must order jobs the same whatever the share.
class Ordering {
 public:
  struct Key {
    int64_t k0 = 0;
    int64_t k1 = 0;
    double share = 0;
    int64_t k2 = 0;
    int64_t k3 = 0;
    auto operator<=>(const Key&) const = default;
  };
  virtual ~Ordering() = default;
  // `queue_share`: the queue's dominant share over its weight, as of now in the
  // pass; `within_guarantee`: the job would keep its queue within its guarantee.
  virtual Key KeyOf(const PendingJob& job, double queue_share, bool within_guarantee) const = 0;
};

// --- preemption cost ----------------------------------------------------------------
class PreemptionCost {
 public:
  virtual ~PreemptionCost() = default;
  // Cost of stopping `victim` at `now`; victims are chosen to minimise the sum.
  virtual double Cost(const RunningJob& victim, Timestamp now, const Policy& policy) const = 0;
};

Result<std::unique_ptr<Ordering>> MakeOrdering(std::string_view name);
Result<PlacementStyle> MakePlacementStyle(std::string_view name);
// nullptr for "none": the pass preempts nothing.
Result<std::unique_ptr<PreemptionCost>> MakePreemptionCost(std::string_view name);

std::vector<std::string_view> OrderingNames();
std::vector<std::string_view> PlacementNames();
std::vector<std::string_view> PreemptionCostNames();

}  // namespace trainyard::sched
