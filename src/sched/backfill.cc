#include "sched/backfill.h"

#include <algorithm>

namespace trainyard::sched {
namespace {

// Capacity that comes back at `end`.
struct Release {
  Timestamp end;
  int order;  // tie-break: running jobs by index, then this pass's binds
  std::vector<std::pair<int32_t, uint64_t>> gpus;  // (node, GPU positions) per replica
  int64_t cpu = 0;                                 // per replica
  int64_t mem = 0;
  int share = 0;  // per replica, of its one GPU; 0: whole GPUs
};

}  // namespace

std::optional<PlannedStart> ReserveEarliestStart(NodeIndex& index, const GangRequest& req,
                                                 const PlacementStyle& style,
                                                 const std::vector<PassBind>& bound_this_pass,
                                                 const Claims& claimed) {
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
    Release r{end,
              static_cast<int>(i),
              {},
              j.per_replica.milli_cpus,
              j.per_replica.memory_bytes,
              ShareOf(j.per_replica)};
    for (const Placement& p : j.replicas) {
      int n = index.NodeByName(p.node);
      if (n >= 0) r.gpus.emplace_back(n, index.MaskOf(n, p.gpus));
    }
    ends.push_back(std::move(r));
  }
  for (size_t i = 0; i < bound_this_pass.size(); ++i) {
    const PassBind& b = bound_this_pass[i];
    if (b.time_limit.count() <= 0) continue;
    ends.push_back({snap.now + b.time_limit, static_cast<int>(snap.running.size() + i),
                    b.placement.replicas, b.shape.cpu, b.shape.mem, b.shape.share});
  }
  std::sort(ends.begin(), ends.end(), [](const Release& a, const Release& b) {
    return a.end != b.end ? a.end < b.end : a.order < b.order;
  });

  // What-if: give back each job's resources in end order until the gang fits.
  struct Freed {
    int32_t node;
    uint64_t mask;
    int64_t cpu, mem;
    int share;
  };
  std::vector<Freed> freed;
  std::optional<PlannedStart> planned;
  uint64_t attempts = 0;
  constexpr uint64_t kMaxAttempts = 256;
  for (size_t k = 0; k < ends.size() && !planned; ++k) {
    for (auto [n, mask] : ends[k].gpus) {
      if (auto c = claimed.find(n); c != claimed.end()) mask &= ~c->second;
      index.Release(n, mask, ends[k].cpu, ends[k].mem, ends[k].share);
      freed.push_back({n, mask, ends[k].cpu, ends[k].mem, ends[k].share});
    }
    // Several jobs may end at the same instant; try once they all have.
    if (k + 1 < ends.size() && ends[k + 1].end == ends[k].end) continue;
    if (!MayFit(index, req)) continue;
    if (++attempts > kMaxAttempts) break;
    if (auto p = PlaceGang(index, req, style)) planned = PlannedStart{ends[k].end, std::move(*p)};
  }
  // Undo the what-if, then hold what is free now.
  for (auto it = freed.rbegin(); it != freed.rend(); ++it) {
    index.Take(it->node, it->mask, it->cpu, it->mem, it->share);
  }
  if (!planned) return std::nullopt;
  for (const auto& [n, mask] : planned->placement.replicas) {
    index.Reserve(n, mask & index.slot(n).free_mask, planned->start);
  }
  return planned;
}

}  // namespace trainyard::sched
