#include "agent/faults.h"

#include <algorithm>

namespace trainyard::agent {
namespace {

using nlohmann::json;

// How much longer a step takes under each kind that slows it (1: not at all).
double SlowFactor(FaultKind kind) {
  switch (kind) {
    case FaultKind::kSlow:
      return 3.0;
    case FaultKind::kThermal:
      return 1.8;
    case FaultKind::kLinkDown:
    case FaultKind::kCommSlow:
      return 2.5;
    default:
      return 1.0;
  }
}

constexpr double kDataStallSeconds = 1.0;

}  // namespace

json ToJson(const FaultEffects& e) {
  return {{"slow_factor", e.slow_factor},
          {"hang", e.hang},
          {"data_stall_s", e.data_stall_s},
          {"loss_nan", e.loss_nan},
          {"grad_spike", e.grad_spike}};
}

std::vector<FaultEffects> EffectsOnTasks(const std::vector<FaultSpec>& faults,
                                         const std::vector<TaskPlacement>& tasks) {
  std::vector<FaultEffects> out(tasks.size());
  const bool no_gpus = std::all_of(tasks.begin(), tasks.end(),
                                   [](const TaskPlacement& t) { return t.gpus.empty(); });
  // On a node without GPUs, GPU i stands for the i-th task in rank order.
  std::vector<size_t> by_rank(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) by_rank[i] = i;
  std::stable_sort(by_rank.begin(), by_rank.end(), [&](size_t a, size_t b) {
    if (tasks[a].rank != tasks[b].rank) return tasks[a].rank < tasks[b].rank;
    if (tasks[a].job_id != tasks[b].job_id) return tasks[a].job_id < tasks[b].job_id;
    return tasks[a].task_id < tasks[b].task_id;
  });
  std::vector<size_t> position(tasks.size());
  for (size_t i = 0; i < by_rank.size(); ++i) position[by_rank[i]] = i;

  for (size_t i = 0; i < tasks.size(); ++i) {
    const TaskPlacement& t = tasks[i];
    FaultEffects& e = out[i];
    for (const FaultSpec& f : faults) {
      bool touches;
      if (f.kind == FaultKind::kCommSlow) {
        touches = f.job_id == t.job_id;
      } else if (f.kind == FaultKind::kLinkDown || f.node_wide()) {
        touches = true;
      } else if (no_gpus) {
        touches = position[i] == static_cast<size_t>(f.gpu);
      } else {
        touches = std::find(t.gpus.begin(), t.gpus.end(), f.gpu) != t.gpus.end();
      }
      if (!touches) continue;
      e.slow_factor = std::max(e.slow_factor, SlowFactor(f.kind));
      e.hang = e.hang || f.kind == FaultKind::kHang;
      if (f.kind == FaultKind::kDataStall)
        e.data_stall_s = std::max(e.data_stall_s, kDataStallSeconds);
      e.loss_nan = e.loss_nan || f.kind == FaultKind::kLossNan;
      e.grad_spike = e.grad_spike || f.kind == FaultKind::kGradSpike;
    }
  }
  return out;
}

}  // namespace trainyard::agent
