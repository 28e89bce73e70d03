// FIFO ordering: submission order, nothing else (the baseline of production
// schedulers such as YARN's capacity scheduler). Combined with backfill off it is
// strict FIFO: nothing starts ahead of a blocked job.
#include "sched/policies.h"

namespace trainyard::sched {
namespace {

class FifoOrdering : public Ordering {
 public:
  Key KeyOf(const PendingJob& job, double, bool) const override {
    return Key{0, 0, 0, job.submit_time.time_since_epoch().count(), job.id};
  }
};

}  // namespace

std::unique_ptr<Ordering> NewFifoOrdering() { return std::make_unique<FifoOrdering>(); }

}  // namespace trainyard::sched
