#include "sched/policy.h"

#include "core/names.h"
#include "sched/policies.h"

namespace trainyard::sched {
namespace {

template <typename T>
struct Entry {
  std::string_view name;
  T (*make)();
};

const Entry<std::unique_ptr<Ordering>> kOrderings[] = {
    {"priority", NewPriorityOrdering},
    {"fifo", NewFifoOrdering},
    {"las", NewLasOrdering},
    {"short-first", NewShortFirstOrdering},
};
const Entry<PlacementStyle> kPlacements[] = {
    {"topology", TopologyPlacement},
    {"best-fit", BestFitPlacement},
    {"first-fit", FirstFitPlacement},
    {"fragmentation", FragmentationPlacement},
};
std::unique_ptr<PreemptionCost> NoPreemption() { return nullptr; }
const Entry<std::unique_ptr<PreemptionCost>> kCosts[] = {
    {"lost-work", NewLostWorkCost},
    {"none", NoPreemption},
};

template <typename T, size_t N>
std::vector<std::string_view> Names(const Entry<T> (&table)[N]) {
  std::vector<std::string_view> out;
  for (const auto& e : table) out.push_back(e.name);
  return out;
}

template <typename T, size_t N>
Result<T> Make(const Entry<T> (&table)[N], std::string_view field, std::string_view name) {
  for (const auto& e : table) {
    if (e.name == name) return e.make();
  }
  std::string valid;
  for (const auto& e : table) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  std::string msg =
      std::string(field) + ": unknown policy " + QuoteForMessage(name) + "; valid: " + valid;
  if (std::string hint = ClosestMatch(name, Names(table)); !hint.empty()) {
    msg += " (did you mean " + hint + "?)";
  }
  return InvalidArgument(msg);
}

}  // namespace

Result<std::unique_ptr<Ordering>> MakeOrdering(std::string_view name) {
  return Make(kOrderings, "ordering", name);
}
Result<PlacementStyle> MakePlacementStyle(std::string_view name) {
  return Make(kPlacements, "placement", name);
}
Result<std::unique_ptr<PreemptionCost>> MakePreemptionCost(std::string_view name) {
  return Make(kCosts, "preemption", name);
}

std::vector<std::string_view> OrderingNames() { return Names(kOrderings); }
std::vector<std::string_view> PlacementNames() { return Names(kPlacements); }
std::vector<std::string_view> PreemptionCostNames() { return Names(kCosts); }

Status ValidatePolicy(const Policy& p) {
  if (auto r = MakeOrdering(p.ordering); !r.ok()) return r.status();
  if (auto r = MakePlacementStyle(p.placement); !r.ok()) return r.status();
  if (auto r = MakePreemptionCost(p.preemption); !r.ok()) return r.status();
  if (p.reservations < 0 || p.reservations > 1000) {
    return InvalidArgument("reservations: must be between 0 and 1000, got " +
                           std::to_string(p.reservations));
  }
  if (p.min_runtime.count() < 0) return InvalidArgument("min_runtime: must be >= 0");
  if (p.restart_cost.count() < 0) return InvalidArgument("restart_cost: must be >= 0");
  if (p.max_victims < 1) return InvalidArgument("max_victims: must be >= 1");
  if (p.max_preemption_searches < 0) {
    return InvalidArgument("max_preemption_searches: must be >= 0, got " +
                           std::to_string(p.max_preemption_searches));
  }
  return Status::Ok();
}

}  // namespace trainyard::sched
