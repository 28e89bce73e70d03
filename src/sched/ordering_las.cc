// Least-attained-service ordering (sched/las.h): by priority class first, then jobs
// that have received less GPU-time, in a few coarse levels, FIFO within a level.
//
// A snapshot built for this ordering (lifecycle::SnapshotBuilder) carries each job's
// LAS priority (LasPriority: class and level in one number); a snapshot with plain
// class values is ordered the same way, the level then coming from attained_service.
#include "sched/las.h"
#include "sched/policies.h"

namespace trainyard::sched {
namespace {

class LasOrdering : public Ordering {
 public:
  Key KeyOf(const PendingJob& job, double, bool) const override {
    return Key{-static_cast<int64_t>(job.priority), LasLevel(job.attained_service), 0,
               job.submit_time.time_since_epoch().count(), job.id};
  }
};

}  // namespace

std::unique_ptr<Ordering> NewLasOrdering() { return std::make_unique<LasOrdering>(); }

}  // namespace trainyard::sched
