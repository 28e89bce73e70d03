// Cluster readers: the machines (and, where the source has them, the tenants and
// queues) a trace runs on in the simulator, as a ClusterSpec (trace.h).
//
//   our cluster YAML                   ReadClusterYaml / ReadClusterYamlFile
//   Philly cluster_machine_list        PhillyClusterFromMachines
//   Philly per-VC node counts (Helios) PhillyClusterFromVcs
//   Alibaba openb node list            ParseAlibabaNodes / ReadAlibabaNodes
//   a uniform cluster                  SyntheticCluster
//
// Nodes from a trace's list are grouped into leaves of kNodesPerLeaf nodes in file
// order (leaf-0, leaf-1, ...) under one spine, spine-0: the traces say nothing of
// the network, and 32 nodes is a common size for a leaf switch's rail group. GPU
// models, memory and NVLink domains follow docs/traces.md.
//
// Errors are `FILE:LINE: field: message`, naming the value and what would be valid;
// a YAML file reports every problem found, the CSV readers the first.
//
// Thread-safety: pure functions; call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "sim/trace.h"

namespace trainyard::sim {

inline constexpr int32_t kNodesPerLeaf = 32;

// The cluster YAML: the `nodes`, `queues` and `priority_classes` sections of a
// scenario file (scenario.h), parsed by the same code with the same rules and
// messages; any other top-level key is an error. Tenants are those the queues name,
// in order of first mention; priority classes are the defaults plus the file's.
Result<ClusterSpec> ReadClusterYaml(std::string_view text, std::string_view file);
Result<ClusterSpec> ReadClusterYamlFile(const std::string& path);

// Philly's cluster_machine_list: `machineId, number of GPUs, single GPU mem`, one
// node per machine named by its id; 12GB (or 16GB) GPUs are "P100", 24GB "P40". No
// CPU, memory or NVLink information: nodes get 0 CPUs and memory and no NVLink.
Result<ClusterSpec> ParsePhillyMachines(std::string_view text, std::string_view file);
Result<ClusterSpec> PhillyClusterFromMachines(const std::string& path);

// The Helios artifact's philly_vc.csv: `vc, node num`. Builds sum(node num) nodes
// philly-0, philly-1, ... of `gpus_per_node` 24GB "P40" GPUs, and one tenant and
// queue per VC (both named by the VC) guaranteed node num x gpus_per_node GPUs with
// the whole cluster as limit, plus tenant and queue "default" (guaranteed 0, limit
// the whole cluster) for jobs without a VC.
Result<ClusterSpec> ParsePhillyVcs(std::string_view text, std::string_view file,
                                   int32_t gpus_per_node = 8);
Result<ClusterSpec> PhillyClusterFromVcs(const std::string& path, int32_t gpus_per_node = 8);

// Alibaba's openb node list: `sn, cpu_milli, memory_mib, gpu, model`. 8-GPU nodes
// get two NVLink domains of 4 GPUs (an assumption: the trace does not say); others
// none.
Result<ClusterSpec> ParseAlibabaNodes(std::string_view text, std::string_view file);
Result<ClusterSpec> ReadAlibabaNodes(const std::string& path);

// `nodes` identical nodes node-0, node-1, ... of `gpus_per_node` GPUs of `gpu_type`
// (80Gi each, one NVLink domain per node), `nodes_per_leaf` nodes per leaf, no
// CPUs or memory, no queues. Errors name the argument and its valid range.
Result<ClusterSpec> SyntheticCluster(int32_t nodes, int32_t gpus_per_node,
                                     std::string_view gpu_type,
                                     int32_t nodes_per_leaf = kNodesPerLeaf);

// Keeps `fraction` (0 < fraction <= 1) of the cluster's nodes, spread evenly over
// each kind of node (GPU model and count, CPUs, memory) in listed order, so that the
// smaller cluster has the same mix: a way to replay a light trace under contention
// without changing its arrivals. Queues and priority classes are kept as they are.
Result<ClusterSpec> ThinCluster(ClusterSpec cluster, double fraction);

}  // namespace trainyard::sim
