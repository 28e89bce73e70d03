// Node: a machine that runs replicas, as the control plane and the scheduler see it.
//
// A node has GPUs (each with an index, UUID, model and memory, and the NVLink domain
// it belongs to), CPUs, memory, labels and a place in the network topology
// (spine/leaf/node). Its state says whether it may receive work.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/resources.h"
#include "core/status.h"

namespace trainyard {

enum class NodeState {
  kReady,     // healthy, schedulable
  kCordoned,  // healthy, receives no new work; running work continues
  kDraining,  // receives no new work; running work is being moved off
  kNotReady,  // heartbeat missed or health check failing; may come back
  kDown,      // gone; its work has been requeued
};

std::string_view NodeStateName(NodeState s);  // "Ready", "Cordoned", ...
std::optional<NodeState> ParseNodeState(std::string_view name);
// True only for kReady: every other state receives nothing new.
bool IsSchedulable(NodeState s);

struct Gpu {
  int index = 0;
  std::string uuid;
  std::string model;  // canonical type, e.g. "H100"
  int64_t memory_bytes = 0;
  std::string nvlink_domain;  // GPUs sharing a domain talk over NVLink

  bool operator==(const Gpu&) const = default;
};

// Where a node sits in the network: GPUs under one leaf switch talk at full
// bisection; crossing leaves goes through the spine.
struct Topology {
  std::string spine;
  std::string leaf;

  bool operator==(const Topology&) const = default;
};

struct Node {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<Gpu> gpus;
  int64_t milli_cpus = 0;
  int64_t memory_bytes = 0;
  Topology topology;
  NodeState state = NodeState::kReady;
  std::string state_reason;  // why it is not Ready, for people
  // Dataset versions its agent's cache holds ready ("sha256:<hex>", sorted), as its
  // latest heartbeat said (docs/datasets.md): for placement's locality; not stored.
  std::vector<std::string> cached_data;

  // Capacity as a Resources value; gpu_type/gpu_memory from the first GPU (nodes
  // are homogeneous in GPU model; Validate enforces it).
  Resources Capacity() const;
  // The smallest GPU's memory (what a replica can count on per GPU); 0 without GPUs.
  int64_t GpuMemoryBytes() const;

  bool operator==(const Node&) const = default;
};

// Checks names, counts and that all GPUs share one model. Messages name the field.
Status ValidateNode(const Node& node);

}  // namespace trainyard
