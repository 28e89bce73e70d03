#include "lifecycle/state.h"

namespace trainyard::lifecycle {

std::string_view RankStateName(RankState s) {
  switch (s) {
    case RankState::kUnknown:
      return "unknown";
    case RankState::kStaging:
      return "staging";
    case RankState::kSent:
      return "sent";
    case RankState::kStarting:
      return "starting";
    case RankState::kRunning:
      return "running";
    case RankState::kExited:
      return "exited";
    case RankState::kGone:
      return "gone";
  }
  return "unknown";
}

bool RankDone(RankState s) { return s == RankState::kExited || s == RankState::kGone; }

NodeState EffectiveState(const NodeEntry& n) {
  if (!n.connected || !n.healthy) return NodeState::kNotReady;
  return n.set_state;
}

ClusterState::ClusterState(LifecycleOptions o)
    : options(std::move(o)), snapshot(options.policy, &classes, options.keep_index) {}

const PriorityClass* ClusterState::ClassOf(const Job& job) const {
  auto it = classes.find(job.spec.priority);
  return it == classes.end() ? nullptr : &it->second;
}

JobEntry* ClusterState::FindJob(JobId id) {
  auto it = jobs.find(id);
  return it == jobs.end() ? nullptr : &it->second;
}

NodeEntry* ClusterState::FindNode(const std::string& name) {
  auto it = nodes.find(name);
  return it == nodes.end() ? nullptr : &it->second;
}

}  // namespace trainyard::lifecycle
