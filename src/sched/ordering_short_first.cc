// Short-first ordering: the priority ordering, except that within a priority class
// and guarantee standing, a job's place in line is its submission time pushed back
// by its declared time limit (jobs without one count as kAssumedLimit). Short jobs
// go ahead of long ones submitted a little earlier, which cuts the average wait the
// way shortest-job-first does; unlike it, nobody starves: a job with limit L is
// passed only by jobs submitted less than L - L' before it, so once that much time
// has gone by, no newcomer can go ahead of it (ageing). An accurate limit is worth
// giving: it moves a job up, and backfill plans with it.
#include "sched/policies.h"

namespace trainyard::sched {
namespace {

constexpr int64_t kAssumedLimitMs = 24 * 3'600'000;  // a job without a time limit

class ShortFirstOrdering : public Ordering {
 public:
  Key KeyOf(const PendingJob& job, double share, bool within_guarantee) const override {
    const int64_t limit = job.time_limit.count() > 0 ? job.time_limit.count() : kAssumedLimitMs;
    return Key{-static_cast<int64_t>(job.priority), within_guarantee ? 0 : 1, share,
               SaturatingAdd(job.submit_time.time_since_epoch().count(), limit), job.id};
  }
};

}  // namespace

std::unique_ptr<Ordering> NewShortFirstOrdering() { return std::make_unique<ShortFirstOrdering>(); }

}  // namespace trainyard::sched
