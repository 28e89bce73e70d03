// Least-attained-service ordering, after Tiresias' discretised 2D-LAS: jobs that
// have received less GPU-time go first, in a few coarse levels (under 1 GPU-hour,
// under 16 GPU-hours, more), FIFO within a level. Short jobs finish quickly without
// knowing durations in advance; coarse levels keep long jobs from being reordered
// (and preempted) on every small difference.
#include "sched/policies.h"

namespace trainyard::sched {
namespace {

constexpr int64_t kLevelBoundsMs[] = {3'600'000, 16 * 3'600'000};

class LasOrdering : public Ordering {
 public:
  Key KeyOf(const PendingJob& job, double, bool) const override {
    int64_t level = 0;
    for (int64_t bound : kLevelBoundsMs) {
      if (job.attained_service.count() >= bound) ++level;
    }
    return Key{level, 0, 0, job.submit_time.time_since_epoch().count(), job.id};
  }
};

}  // namespace

std::unique_ptr<Ordering> NewLasOrdering() { return std::make_unique<LasOrdering>(); }

}  // namespace trainyard::sched
