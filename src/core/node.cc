#include "core/node.h"

#include <set>

#include "core/names.h"

namespace trainyard {

std::string_view NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kReady:
      return "Ready";
    case NodeState::kCordoned:
      return "Cordoned";
    case NodeState::kDraining:
      return "Draining";
    case NodeState::kNotReady:
      return "NotReady";
    case NodeState::kDown:
      return "Down";
  }
  return "Unknown";
}

std::optional<NodeState> ParseNodeState(std::string_view name) {
  for (auto s : {NodeState::kReady, NodeState::kCordoned, NodeState::kDraining,
                 NodeState::kNotReady, NodeState::kDown}) {
    if (NodeStateName(s) == name) return s;
  }
  return std::nullopt;
}

bool IsSchedulable(NodeState s) { return s == NodeState::kReady; }

Resources Node::Capacity() const {
  Resources r;
  r.gpus = static_cast<int64_t>(gpus.size());
  if (!gpus.empty()) {
    r.gpu_type = gpus.front().model;
    r.gpu_memory_bytes = GpuMemoryBytes();
  }
  r.milli_cpus = milli_cpus;
  r.memory_bytes = memory_bytes;
  return r;
}

int64_t Node::GpuMemoryBytes() const {
  if (gpus.empty()) return 0;
  int64_t least = gpus.front().memory_bytes;
  for (const auto& g : gpus) least = std::min(least, g.memory_bytes);
  return least;
}

Status ValidateNode(const Node& node) {
  if (auto s = ValidateName("name", node.name); !s.ok()) return s;
  if (node.gpus.size() > kMaxGpusPerNode) {
    return InvalidArgument("node " + node.name + ": gpus: at most " +
                           std::to_string(kMaxGpusPerNode) + " GPUs per node, got " +
                           std::to_string(node.gpus.size()));
  }
  if (node.milli_cpus < 0 || node.memory_bytes < 0) {
    return InvalidArgument("node " + node.name + ": cpus and memory must be >= 0");
  }
  std::set<int> indexes;
  for (const auto& g : node.gpus) {
    if (!indexes.insert(g.index).second) {
      return InvalidArgument("node " + node.name + ": gpus: index " + std::to_string(g.index) +
                             " appears twice");
    }
    if (g.model != node.gpus.front().model) {
      return InvalidArgument("node " + node.name + ": gpus: all GPUs must be one model, got " +
                             node.gpus.front().model + " and " + g.model);
    }
  }
  return Status::Ok();
}

}  // namespace trainyard
