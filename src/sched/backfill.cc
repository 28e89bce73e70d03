#include "sched/backfill.h"

#include <algorithm>

namespace trainyard::sched {
namespace {

struct Release {
  Timestamp end;
  int running;
};

}  // namespace

std::optional<PlannedStart> ReserveEarliestStart(NodeIndex& index, const GangRequest& req,
                                                 const PlacementStyle& style) {
  const Snapshot& snap = index.snapshot();
  std::vector<Release> ends;
  for (size_t i = 0; i < snap.running.size(); ++i) {
    const RunningJob& j = snap.running[i];
    Timestamp end;
    if (j.preempting) {
      end = snap.now;  // told to stop; gone within its grace period
    } else if (j.time_limit.count() > 0) {
      end = std::max(snap.now, j.start_time + j.time_limit);
    } else {
      continue;
    }
    ends.push_back({end, static_cast<int>(i)});
  }
  std::sort(ends.begin(), ends.end(), [](const Release& a, const Release& b) {
    return a.end != b.end ? a.end < b.end : a.running < b.running;
  });

  // What-if: give back each job's resources in end order until the gang fits.
  struct Freed {
    int32_t node;
    uint64_t mask;
    int64_t cpu, mem;
  };
  std::vector<Freed> freed;
  std::optional<PlannedStart> planned;
  uint64_t attempts = 0;
  constexpr uint64_t kMaxAttempts = 256;
  for (size_t k = 0; k < ends.size() && !planned; ++k) {
    const RunningJob& j = snap.running[ends[k].running];
    for (const Placement& p : j.replicas) {
      int n = index.NodeByName(p.node);
      if (n < 0) continue;
      uint64_t mask = index.MaskOf(n, p.gpus);
      index.Release(n, mask, j.per_replica.milli_cpus, j.per_replica.memory_bytes);
      freed.push_back({n, mask, j.per_replica.milli_cpus, j.per_replica.memory_bytes});
    }
    // Several jobs may end at the same instant; try once they all have.
    if (k + 1 < ends.size() && ends[k + 1].end == ends[k].end) continue;
    if (!MayFit(index, req)) continue;
    if (++attempts > kMaxAttempts) break;
    if (auto p = PlaceGang(index, req, style)) planned = PlannedStart{ends[k].end, std::move(*p)};
  }
  // Undo the what-if, then hold what is free now.
  for (auto it = freed.rbegin(); it != freed.rend(); ++it) {
    index.Take(it->node, it->mask, it->cpu, it->mem);
  }
  if (!planned) return std::nullopt;
  for (const auto& [n, mask] : planned->placement.replicas) {
    index.Reserve(n, mask & index.slot(n).free_mask, planned->start);
  }
  return planned;
}

}  // namespace trainyard::sched
