#include "sim/cluster.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "core/job_spec.h"
#include "core/names.h"
#include "core/resources.h"
#include "sim/csv.h"
#include "sim/scenario.h"
#include "sim/traces.h"

namespace trainyard::sim {
namespace {

constexpr int64_t kMaxNodes = 1'000'000;

// Places node `index` of a list in its leaf: kNodesPerLeaf nodes per leaf in order.
void PlaceInLeaf(Node& node, size_t index, int32_t nodes_per_leaf) {
  node.topology.spine = "spine-0";
  node.topology.leaf = "leaf-" + std::to_string(index / static_cast<size_t>(nodes_per_leaf));
}

// `count` GPUs of `model`; `nvlink` > 0 puts GPUs 0..nvlink-1, ... in one domain
// each, named as scenario files name them (NODE-nvlK).
void AddGpus(Node& node, int64_t count, const std::string& model, int64_t memory, int64_t nvlink) {
  for (int64_t i = 0; i < count; ++i) {
    Gpu g;
    g.index = static_cast<int>(i);
    g.uuid = node.name + "-gpu" + std::to_string(i);
    g.model = model;
    g.memory_bytes = memory;
    if (nvlink > 0) g.nvlink_domain = node.name + "-nvl" + std::to_string(i / nvlink);
    node.gpus.push_back(std::move(g));
  }
}

Status CheckNodeName(const CsvFile& csv, int column, const std::string& name,
                     std::map<std::string, int>& seen) {
  if (Status s = ValidateName("name", name); !s.ok()) {
    return csv.Error(column, s.message().substr(std::string("name: ").size()));
  }
  if (auto [it, fresh] = seen.emplace(name, csv.line()); !fresh) {
    return csv.Error(column, "node " + QuoteForMessage(name) + " is already listed at line " +
                                 std::to_string(it->second));
  }
  return Status::Ok();
}

// GPU memory of the models in Alibaba's node list; G1-G3 are undisclosed: 0.
int64_t AlibabaGpuMemory(std::string_view model) {
  if (model == "V100M32") return 32 * kGiB;
  if (model == "V100M16" || model == "P100" || model == "T4") return 16 * kGiB;
  if (model == "A10") return 24 * kGiB;
  if (model == "A100") return 80 * kGiB;
  return 0;
}

}  // namespace

Result<ClusterSpec> ReadClusterYaml(std::string_view text, std::string_view file) {
  ClusterParseResult r = ParseClusterSections(text, file);
  if (r.ok()) return std::move(*r.cluster);
  std::string msg;
  for (const Diagnostic& d : r.errors) msg += (msg.empty() ? "" : "\n") + d.ToString();
  return InvalidArgument(msg);
}

Result<ClusterSpec> ReadClusterYamlFile(const std::string& path) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ReadClusterYaml(text, path);
}

Result<ClusterSpec> ParsePhillyMachines(std::string_view text, std::string_view file) {
  TY_ASSIGN_OR_RETURN(
      CsvFile csv,
      CsvFile::Open(
          text, file,
          {"a Philly machine list", {"machineId", "number of GPUs", "single GPU mem"}, {}, false}));
  const int c_id = csv.Index("machineId"), c_gpus = csv.Index("number of GPUs"),
            c_mem = csv.Index("single GPU mem");
  ClusterSpec cluster;
  cluster.priority_classes = DefaultPriorityClasses();
  std::map<std::string, int> seen;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool more, csv.Next());
    if (!more) break;
    Node node;
    node.name = std::string(csv.Cell(c_id));
    TY_RETURN_IF_ERROR(CheckNodeName(csv, c_id, node.name, seen));
    TY_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(c_gpus, 0, static_cast<int64_t>(kMaxGpusPerNode)));
    std::string_view mem = csv.Cell(c_mem);
    std::string model;
    int64_t bytes = 0;
    if (mem == "12GB" || mem == "16GB") {
      model = "P100";
      bytes = (mem == "12GB" ? 12 : 16) * kGiB;
    } else if (mem == "24GB") {
      model = "P40";
      bytes = 24 * kGiB;
    } else if (gpus > 0 || !mem.empty()) {
      return csv.Error(c_mem,
                       "must be 12GB or 16GB (P100) or 24GB (P40), got " + QuoteForMessage(mem));
    }
    AddGpus(node, gpus, model, bytes, 0);
    PlaceInLeaf(node, cluster.nodes.size(), kNodesPerLeaf);
    cluster.nodes.push_back(std::move(node));
  }
  if (cluster.nodes.empty()) return InvalidArgument(std::string(file) + ": lists no machine");
  return cluster;
}

Result<ClusterSpec> PhillyClusterFromMachines(const std::string& path) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParsePhillyMachines(text, path);
}

Result<ClusterSpec> ParsePhillyVcs(std::string_view text, std::string_view file,
                                   int32_t gpus_per_node) {
  if (gpus_per_node < 1 || static_cast<size_t>(gpus_per_node) > kMaxGpusPerNode) {
    return InvalidArgument("gpus_per_node: must be between 1 and " +
                           std::to_string(kMaxGpusPerNode) + ", got " +
                           std::to_string(gpus_per_node));
  }
  TY_ASSIGN_OR_RETURN(CsvFile csv,
                      CsvFile::Open(text, file, {"a VC list", {"vc", "node num"}, {}, false}));
  const int c_vc = csv.Index("vc"), c_nodes = csv.Index("node num");
  ClusterSpec cluster;
  cluster.priority_classes = DefaultPriorityClasses();
  std::map<std::string, int> seen;
  int64_t total_nodes = 0;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool more, csv.Next());
    if (!more) break;
    TY_ASSIGN_OR_RETURN(std::string vc, csv.NameCell(c_vc));
    if (vc == kDefaultTenant) {
      return csv.Error(c_vc, "\"default\" is the tenant of jobs without a VC; rename this VC");
    }
    if (auto [it, fresh] = seen.emplace(vc, csv.line()); !fresh) {
      return csv.Error(c_vc,
                       "VC " + vc + " is already listed at line " + std::to_string(it->second));
    }
    TY_ASSIGN_OR_RETURN(int64_t nodes, csv.Int(c_nodes, 0, kMaxNodes));
    total_nodes += nodes;
    if (total_nodes > kMaxNodes) {
      return csv.Error(c_nodes,
                       "the VCs add up to more than " + std::to_string(kMaxNodes) + " nodes");
    }
    cluster.tenants.push_back(Tenant{vc, "Philly VC"});
    Queue q;
    q.name = vc;
    q.tenant = vc;
    q.guaranteed_gpus = nodes * gpus_per_node;
    cluster.queues.push_back(std::move(q));
  }
  if (total_nodes == 0) return InvalidArgument(std::string(file) + ": the VCs have no nodes");
  const int64_t total_gpus = total_nodes * gpus_per_node;
  cluster.tenants.push_back(Tenant{kDefaultTenant, "jobs without a VC"});
  Queue fallback;
  fallback.name = kDefaultQueue;
  fallback.tenant = kDefaultTenant;
  cluster.queues.push_back(std::move(fallback));
  for (Queue& q : cluster.queues) q.limit_gpus = total_gpus;
  for (int64_t i = 0; i < total_nodes; ++i) {
    Node node;
    node.name = "philly-" + std::to_string(i);
    AddGpus(node, gpus_per_node, "P40", 24 * kGiB, 0);
    PlaceInLeaf(node, static_cast<size_t>(i), kNodesPerLeaf);
    cluster.nodes.push_back(std::move(node));
  }
  return cluster;
}

Result<ClusterSpec> PhillyClusterFromVcs(const std::string& path, int32_t gpus_per_node) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParsePhillyVcs(text, path, gpus_per_node);
}

Result<ClusterSpec> ParseAlibabaNodes(std::string_view text, std::string_view file) {
  TY_ASSIGN_OR_RETURN(
      CsvFile csv,
      CsvFile::Open(text, file,
                    {"a node list", {"sn", "cpu_milli", "memory_mib", "gpu", "model"}, {}, false}));
  const int c_sn = csv.Index("sn"), c_cpu = csv.Index("cpu_milli"), c_mem = csv.Index("memory_mib"),
            c_gpu = csv.Index("gpu"), c_model = csv.Index("model");
  ClusterSpec cluster;
  cluster.priority_classes = DefaultPriorityClasses();
  std::map<std::string, int> seen;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool more, csv.Next());
    if (!more) break;
    Node node;
    node.name = std::string(csv.Cell(c_sn));
    TY_RETURN_IF_ERROR(CheckNodeName(csv, c_sn, node.name, seen));
    TY_ASSIGN_OR_RETURN(node.milli_cpus, csv.Int(c_cpu, 0, int64_t{1} << 40));
    TY_ASSIGN_OR_RETURN(int64_t mib, csv.Int(c_mem, 0, int64_t{1} << 30));
    node.memory_bytes = mib * kMiB;
    TY_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(c_gpu, 0, static_cast<int64_t>(kMaxGpusPerNode)));
    std::string model = NormalizeGpuType(csv.Cell(c_model));
    if (gpus > 0) {
      if (model.empty()) return csv.Error(c_model, "required when gpu > 0: the GPU model, e.g. T4");
      if (Status s = ValidateName("model", model); !s.ok()) {
        return csv.Error(c_model, s.message().substr(std::string("model: ").size()));
      }
    }
    AddGpus(node, gpus, model, AlibabaGpuMemory(model), gpus == 8 ? 4 : 0);
    PlaceInLeaf(node, cluster.nodes.size(), kNodesPerLeaf);
    cluster.nodes.push_back(std::move(node));
  }
  if (cluster.nodes.empty()) return InvalidArgument(std::string(file) + ": lists no node");
  return cluster;
}

Result<ClusterSpec> ReadAlibabaNodes(const std::string& path) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseAlibabaNodes(text, path);
}

Result<ClusterSpec> SyntheticCluster(int32_t nodes, int32_t gpus_per_node,
                                     std::string_view gpu_type, int32_t nodes_per_leaf) {
  if (nodes < 1 || nodes > kMaxNodes) {
    return InvalidArgument("nodes: must be between 1 and " + std::to_string(kMaxNodes) + ", got " +
                           std::to_string(nodes));
  }
  if (gpus_per_node < 0 || static_cast<size_t>(gpus_per_node) > kMaxGpusPerNode) {
    return InvalidArgument("gpus_per_node: must be between 0 and " +
                           std::to_string(kMaxGpusPerNode) + ", got " +
                           std::to_string(gpus_per_node));
  }
  const std::string model = NormalizeGpuType(gpu_type);
  if (gpus_per_node > 0) {
    if (model.empty())
      return InvalidArgument("gpu_type: required when gpus_per_node > 0 (e.g. H100)");
    TY_RETURN_IF_ERROR(ValidateName("gpu_type", model));
  }
  if (nodes_per_leaf < 1) {
    return InvalidArgument("nodes_per_leaf: must be >= 1, got " + std::to_string(nodes_per_leaf));
  }
  ClusterSpec cluster;
  cluster.priority_classes = DefaultPriorityClasses();
  cluster.nodes.reserve(static_cast<size_t>(nodes));
  for (int32_t i = 0; i < nodes; ++i) {
    Node node;
    node.name = "node-" + std::to_string(i);
    AddGpus(node, gpus_per_node, model, 80 * kGiB, gpus_per_node);
    PlaceInLeaf(node, static_cast<size_t>(i), nodes_per_leaf);
    cluster.nodes.push_back(std::move(node));
  }
  return cluster;
}

Result<ClusterSpec> ThinCluster(ClusterSpec cluster, double fraction) {
  if (!(fraction > 0 && fraction <= 1)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", fraction);
    return InvalidArgument(
        std::string("--node-fraction: must be greater than 0 and at most 1, got ") + text);
  }
  using Kind = std::tuple<std::string, size_t, int64_t, int64_t>;
  std::map<Kind, int64_t> seen;  // nodes of each kind so far
  std::vector<Node> kept;
  for (Node& n : cluster.nodes) {
    const Kind kind{n.gpus.empty() ? "" : n.gpus.front().model, n.gpus.size(), n.milli_cpus,
                    n.memory_bytes};
    const int64_t k = seen[kind]++;
    // Node k of its kind is kept when it takes the kept count of the kind past an
    // integer: floor((k + 1) f) > floor(k f).
    if (std::floor(static_cast<double>(k + 1) * fraction) >
        std::floor(static_cast<double>(k) * fraction)) {
      kept.push_back(std::move(n));
    }
  }
  cluster.nodes = std::move(kept);
  return cluster;
}

}  // namespace trainyard::sim
