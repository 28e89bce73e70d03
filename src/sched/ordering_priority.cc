// Priority ordering (the default): higher priority class first; then jobs that keep
// their queue within its guarantee; then the queue with the smallest weighted
// dominant share (DRF), so queues that want more than their guarantee split the rest
// by weight; then submission order.
#include "sched/policies.h"

namespace trainyard::sched {
namespace {

class PriorityOrdering : public Ordering {
 public:
  Key KeyOf(const PendingJob& job, double share, bool within_guarantee) const override {
    return Key{-static_cast<int64_t>(job.priority), within_guarantee ? 0 : 1, share,
               job.submit_time.time_since_epoch().count(), job.id};
  }
};

}  // namespace

std::unique_ptr<Ordering> NewPriorityOrdering() { return std::make_unique<PriorityOrdering>(); }

}  // namespace trainyard::sched
