// Lost-work preemption cost: a victim costs its GPUs times the work it would lose
// (time since its last completed checkpoint, or since it started when it has none)
// plus a fixed restart cost per GPU (rendezvous, loading the checkpoint, warming
// up). A job that checkpointed seconds ago is a cheap victim; one that has run an
// hour without checkpointing is an expensive one. A job already being preempted
// costs nothing more.
#include <algorithm>

#include "sched/policies.h"

namespace trainyard::sched {
namespace {

class LostWorkCost : public PreemptionCost {
 public:
  double Cost(const RunningJob& v, Timestamp now, const Policy& policy) const override {
    if (v.preempting) return 0;
    Timestamp since = v.start_time;
    if (v.last_checkpoint && *v.last_checkpoint > since) since = *v.last_checkpoint;
    double lost_s = std::max<double>(0, std::chrono::duration<double>(now - since).count());
    double restart_s = std::chrono::duration<double>(policy.restart_cost).count();
    return static_cast<double>(std::max<int64_t>(v.Gpus(), 1)) * (lost_s + restart_s);
  }
};

}  // namespace

std::unique_ptr<PreemptionCost> NewLostWorkCost() { return std::make_unique<LostWorkCost>(); }

}  // namespace trainyard::sched
