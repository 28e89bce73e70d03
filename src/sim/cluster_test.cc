#include "sim/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "sim/traces.h"

namespace trainyard::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// The real files live in shared/traces beside the repository (CI copies shared/
// there too). A missing folder is a failure, never a skip.
std::string RealTrace(const std::string& name) {
  return std::string(TRAINYARD_SOURCE_DIR) + "/../shared/traces/" + name;
}

template <typename T>
T Ok(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().message() << "\n(The real traces must be at " << RealTrace("")
                      << ", shared/ beside the repository root; see docs/traces.md.)";
  return r.ok() ? std::move(r).value() : T{};
}

template <typename T>
std::string Error(const Result<T>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string("(no error)") : r.status().message();
}

int64_t Gpus(const ClusterSpec& c) {
  int64_t n = 0;
  for (const Node& node : c.nodes) n += static_cast<int64_t>(node.gpus.size());
  return n;
}

void ExpectValidNodes(const ClusterSpec& c) {
  std::set<std::string> names;
  for (const Node& n : c.nodes) {
    EXPECT_TRUE(ValidateNode(n).ok()) << n.name << ": " << ValidateNode(n).message();
    EXPECT_TRUE(names.insert(n.name).second) << n.name;
  }
}

// ---- Cluster YAML -----------------------------------------------------------------

TEST(ClusterYamlTest, ReadsTheScenarioSections) {
  ClusterSpec c = Ok(ReadClusterYaml(R"(
nodes:
  - {name: a, count: 2, gpus: 8, gpu_type: h100, nvlink_group: 4, leaf: leaf-1, cpus: 96}
  - {name: solo, gpus: 0}
queues:
  - {name: research, tenant: nlp, guaranteed: 8, limit: 16}
  - {name: sub, tenant: nlp, parent: research}
  - {name: default, tenant: vision, guaranteed: 4}
priority_classes:
  - {name: urgent, value: 800}
)",
                                     "c.yaml"));
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.nodes[1].name, "a-1");
  EXPECT_EQ(c.nodes[1].gpus.size(), 8u);
  EXPECT_EQ(c.nodes[1].gpus[5].model, "H100");
  EXPECT_EQ(c.nodes[1].gpus[5].nvlink_domain, "a-1-nvl1");
  EXPECT_EQ(c.nodes[1].milli_cpus, 96'000);
  EXPECT_EQ(c.nodes[1].topology.leaf, "leaf-1");
  ASSERT_EQ(c.queues.size(), 3u);
  EXPECT_EQ(c.queues[0].limit_gpus, 16);
  ASSERT_EQ(c.tenants.size(), 2u);
  EXPECT_EQ(c.tenants[0].name, "nlp");
  EXPECT_EQ(c.tenants[1].name, "vision");
  ASSERT_EQ(c.priority_classes.size(), 5u);
  EXPECT_EQ(c.priority_classes.back().name, "urgent");
}

TEST(ClusterYamlTest, RejectsScenarioAndUnknownKeysWithHints) {
  EXPECT_EQ(Error(ReadClusterYaml(R"(nodes:
  - {name: a, gpus: 8, gpu_type: H100}
jobs:
  - {id: 1}
steps: []
node: 3
queue:
  - {name: q}
)",
                                  "c.yaml")),
            "c.yaml:3: jobs: belongs in a scenario file, not a cluster file; a cluster file "
            "holds nodes, queues, priority_classes (jobs come from the trace)\n"
            "c.yaml:5: steps: belongs in a scenario file, not a cluster file; a cluster file "
            "holds nodes, queues, priority_classes (jobs come from the trace)\n"
            "c.yaml:6: node: unknown field; did you mean nodes?\n"
            "c.yaml:7: queue: unknown field; did you mean queues?");
  EXPECT_EQ(Error(ReadClusterYaml("queues: []\nextra: 1\n", "c.yaml")),
            "c.yaml:1: nodes: required: a cluster needs at least one node group\n"
            "c.yaml:2: extra: unknown field; valid fields are nodes, queues, priority_classes");
  EXPECT_EQ(Error(ReadClusterYaml("", "c.yaml")), "c.yaml: cluster is empty; it needs nodes");
  EXPECT_EQ(Error(ReadClusterYaml("- 1\n", "c.yaml")),
            "c.yaml:1: a cluster file must be a map with nodes (and optionally queues and "
            "priority_classes), got a list");
}

TEST(ClusterYamlTest, SharesTheScenarioRulesAndMessages) {
  EXPECT_EQ(Error(ReadClusterYaml(R"(nodes:
  - {name: a, gpus: -1, gpu_type: H100}
  - {name: b, gpus: 8}
queues:
  - {name: q, guaranteed: 8, limit: 4}
priority_classes:
  - {name: urgent}
)",
                                  "c.yaml")),
            "c.yaml:2: nodes[0].gpus: must be >= 0, got -1\n"
            "c.yaml:3: nodes[1].gpu_type: required when gpus > 0 (e.g. H100)\n"
            "c.yaml:5: queues[0].limit: must be >= guaranteed (8), got 4\n"
            "c.yaml:7: priority_classes[0].value: required: the class's priority value (higher "
            "goes first)");
}

TEST(ClusterYamlTest, ReadsTheExample) {
  ClusterSpec c =
      Ok(ReadClusterYamlFile(std::string(TRAINYARD_SOURCE_DIR) + "/examples/sim/cluster.yaml"));
  EXPECT_EQ(c.nodes.size(), 20u);
  EXPECT_EQ(Gpus(c), 144);
  ExpectValidNodes(c);
  // Every tenant and queue of the example trace exists in the example cluster.
  Trace t = Ok(ReadTrainyardCsv(std::string(TRAINYARD_SOURCE_DIR) + "/examples/sim/trace.csv"));
  for (const TraceJob& j : t.jobs) {
    bool found = false;
    for (const Queue& q : c.queues) found = found || (q.tenant == j.tenant && q.name == j.queue);
    EXPECT_TRUE(found) << j.id << ": " << j.tenant << "/" << j.queue;
  }
}

TEST(ClusterYamlTest, FileErrorsNameThePath) {
  EXPECT_THAT(Error(ReadClusterYamlFile("/nonexistent/c.yaml")),
              HasSubstr("/nonexistent/c.yaml: cannot open"));
}

// ---- Philly -------------------------------------------------------------------------

TEST(PhillyClusterTest, FromTheRealMachineList) {
  ClusterSpec c = Ok(PhillyClusterFromMachines(RealTrace("cluster_machine_list")));
  ASSERT_EQ(c.nodes.size(), 552u);
  EXPECT_EQ(Gpus(c), 2490);
  ExpectValidNodes(c);
  std::map<std::pair<std::string, size_t>, int> shapes;
  for (const Node& n : c.nodes) ++shapes[{n.gpus.front().model, n.gpus.size()}];
  EXPECT_THAT(shapes, ElementsAre(Pair(Pair("P100", 2), 321), Pair(Pair("P40", 8), 231)));
  EXPECT_EQ(c.nodes[0].name, "m0");
  EXPECT_EQ(c.nodes[0].gpus[0].memory_bytes, 12 * kGiB);
  EXPECT_EQ(c.nodes[0].topology.leaf, "leaf-0");
  EXPECT_EQ(c.nodes[32].topology.leaf, "leaf-1");
  EXPECT_EQ(c.nodes[551].topology.leaf, "leaf-17");
  EXPECT_EQ(c.nodes[551].topology.spine, "spine-0");
  EXPECT_TRUE(c.queues.empty());
}

TEST(PhillyClusterTest, FromTheRealVcList) {
  ClusterSpec c = Ok(PhillyClusterFromVcs(RealTrace("philly_vc.csv")));
  ASSERT_EQ(c.nodes.size(), 352u);
  EXPECT_EQ(Gpus(c), 2816);
  ExpectValidNodes(c);
  EXPECT_EQ(c.nodes[0].name, "philly-0");
  EXPECT_EQ(c.nodes[0].gpus[0].model, "P40");
  ASSERT_EQ(c.queues.size(), 12u);
  ASSERT_EQ(c.tenants.size(), 12u);
  EXPECT_EQ(c.queues[0].name, "6214e9");
  EXPECT_EQ(c.queues[0].tenant, "6214e9");
  EXPECT_EQ(c.queues[0].guaranteed_gpus, 64 * 8);
  EXPECT_EQ(c.queues[0].limit_gpus, 2816);
  EXPECT_EQ(c.queues[9].name, "103959");
  EXPECT_EQ(c.queues[9].guaranteed_gpus, 64);
  EXPECT_EQ(c.queues[11].name, "default");
  EXPECT_EQ(c.queues[11].tenant, "default");
  EXPECT_EQ(c.queues[11].guaranteed_gpus, 0);
  EXPECT_EQ(c.queues[11].limit_gpus, 2816);
  int64_t guaranteed = 0;
  for (const Queue& q : c.queues) {
    EXPECT_TRUE(ValidateQueue(q).ok()) << q.name;
    guaranteed += q.guaranteed_gpus;
  }
  EXPECT_EQ(guaranteed, 2816);

  ClusterSpec c4 = Ok(PhillyClusterFromVcs(RealTrace("philly_vc.csv"), 4));
  EXPECT_EQ(Gpus(c4), 1408);
  EXPECT_EQ(c4.queues[0].guaranteed_gpus, 256);
}

TEST(PhillyClusterTest, BadInput) {
  EXPECT_EQ(Error(ParsePhillyMachines("machineId, number of GPUs, single GPU mem\nm0,2, 10GB\n",
                                      "m.csv")),
            "m.csv:2: single GPU mem: must be 12GB or 16GB (P100) or 24GB (P40), got \"10GB\"");
  EXPECT_EQ(Error(ParsePhillyMachines("machineId, number of GPUs, single GPU mem\nm0,-2, 12GB\n",
                                      "m.csv")),
            "m.csv:2: number of GPUs: must be >= 0, got -2");
  EXPECT_EQ(Error(ParsePhillyMachines(
                "machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm0,8, 24GB\n", "m.csv")),
            "m.csv:3: machineId: node \"m0\" is already listed at line 2");
  EXPECT_EQ(Error(ParsePhillyMachines("machineId,gpus,mem\n", "m.csv")),
            "m.csv:1: gpus: unknown column; a Philly machine list has columns machineId, number "
            "of GPUs, single GPU mem\n"
            "m.csv:1: mem: unknown column; a Philly machine list has columns machineId, number "
            "of GPUs, single GPU mem\n"
            "m.csv:1: number of GPUs: missing column; a Philly machine list needs columns "
            "machineId, number of GPUs, single GPU mem\n"
            "m.csv:1: single GPU mem: missing column; a Philly machine list needs columns "
            "machineId, number of GPUs, single GPU mem");
  EXPECT_EQ(Error(ParsePhillyVcs("vc,node num\na,8\na,4\n", "v.csv")),
            "v.csv:3: vc: VC a is already listed at line 2");
  EXPECT_EQ(Error(ParsePhillyVcs("vc,node num\na,eight\n", "v.csv")),
            "v.csv:2: node num: must be an integer, got \"eight\"");
  EXPECT_EQ(Error(ParsePhillyVcs("vc,node num\na b,8\n", "v.csv")),
            "v.csv:2: vc: may hold only letters, digits, '-', '_' and '.', got \"a b\"");
  EXPECT_EQ(Error(ParsePhillyVcs("vc,node num\na,8\n", "v.csv", 0)),
            "gpus_per_node: must be between 1 and 64, got 0");
}

// ---- Alibaba ------------------------------------------------------------------------

TEST(AlibabaClusterTest, FromTheRealNodeList) {
  ClusterSpec c = Ok(ReadAlibabaNodes(RealTrace("openb_node_list_gpu_node.csv")));
  ASSERT_EQ(c.nodes.size(), 1213u);
  EXPECT_EQ(Gpus(c), 6212);
  ExpectValidNodes(c);
  std::map<std::string, std::pair<int, int64_t>> by_model;  // nodes, GPUs
  std::map<size_t, int> by_size;
  std::set<std::string> leaves;
  for (const Node& n : c.nodes) {
    ++by_size[n.gpus.size()];
    leaves.insert(n.topology.leaf);
    auto& m = by_model[n.gpus.front().model];
    ++m.first;
    m.second += static_cast<int64_t>(n.gpus.size());
    std::set<std::string> domains;
    for (const Gpu& g : n.gpus) domains.insert(g.nvlink_domain);
    if (n.gpus.size() == 8) {
      EXPECT_EQ(domains, (std::set<std::string>{n.name + "-nvl0", n.name + "-nvl1"}));
    } else {
      EXPECT_EQ(domains, (std::set<std::string>{""}));
    }
  }
  EXPECT_THAT(by_size, ElementsAre(Pair(1, 24), Pair(2, 518), Pair(4, 54), Pair(8, 617)));
  EXPECT_THAT(by_model, ElementsAre(Pair("A10", Pair(2, 2)), Pair("G2", Pair(549, 4392)),
                                    Pair("G3", Pair(39, 312)), Pair("P100", Pair(134, 265)),
                                    Pair("T4", Pair(404, 842)), Pair("V100M16", Pair(55, 195)),
                                    Pair("V100M32", Pair(30, 204))));
  EXPECT_EQ(leaves.size(), 38u);  // ceil(1213 / 32)
  const Node& first = c.nodes[0];
  EXPECT_EQ(first.name, "openb-node-0000");
  EXPECT_EQ(first.milli_cpus, 64'000);
  EXPECT_EQ(first.memory_bytes, 262'144 * kMiB);
  EXPECT_EQ(first.gpus[0].model, "P100");
  EXPECT_EQ(first.gpus[0].memory_bytes, 16 * kGiB);
}

TEST(AlibabaClusterTest, BadInput) {
  const std::string header = "sn,cpu_milli,memory_mib,gpu,model\n";
  EXPECT_EQ(Error(ParseAlibabaNodes(header + "n0,64000,262144,2,\n", "n.csv")),
            "n.csv:2: model: required when gpu > 0: the GPU model, e.g. T4");
  EXPECT_EQ(Error(ParseAlibabaNodes(header + "n0,64000,262144,65,T4\n", "n.csv")),
            "n.csv:2: gpu: must be <= 64, got 65");
  EXPECT_EQ(Error(ParseAlibabaNodes(header + "n0,-1,262144,2,T4\n", "n.csv")),
            "n.csv:2: cpu_milli: must be >= 0, got -1");
  EXPECT_EQ(Error(ParseAlibabaNodes(header + "n 0,64000,262144,2,T4\n", "n.csv")),
            "n.csv:2: sn: may hold only letters, digits, '-', '_' and '.', got \"n 0\"");
  EXPECT_EQ(Error(ParseAlibabaNodes("sn,cpu_milli,memory_mib,gpus,model\n", "n.csv")),
            "n.csv:1: gpus: unknown column; did you mean gpu?\n"
            "n.csv:1: gpu: missing column; a node list needs columns sn, cpu_milli, memory_mib, "
            "gpu, model");
  EXPECT_EQ(Error(ParseAlibabaNodes(header, "n.csv")), "n.csv: lists no node");
}

// ---- Synthetic ----------------------------------------------------------------------

TEST(SyntheticClusterTest, UniformNodesInLeaves) {
  ClusterSpec c = Ok(SyntheticCluster(100, 8, "h100", 16));
  ASSERT_EQ(c.nodes.size(), 100u);
  EXPECT_EQ(Gpus(c), 800);
  ExpectValidNodes(c);
  EXPECT_EQ(c.nodes[99].name, "node-99");
  EXPECT_EQ(c.nodes[99].topology.leaf, "leaf-6");
  EXPECT_EQ(c.nodes[15].topology.leaf, "leaf-0");
  EXPECT_EQ(c.nodes[16].topology.leaf, "leaf-1");
  EXPECT_EQ(c.nodes[0].gpus[7].model, "H100");
  EXPECT_EQ(c.nodes[0].gpus[7].nvlink_domain, "node-0-nvl0");
  EXPECT_EQ(c.priority_classes.size(), 4u);
  EXPECT_TRUE(c.queues.empty());

  EXPECT_EQ(Error(SyntheticCluster(0, 8, "H100")), "nodes: must be between 1 and 1000000, got 0");
  EXPECT_EQ(Error(SyntheticCluster(4, 65, "H100")),
            "gpus_per_node: must be between 0 and 64, got 65");
  EXPECT_EQ(Error(SyntheticCluster(4, 8, "")),
            "gpu_type: required when gpus_per_node > 0 (e.g. H100)");
  EXPECT_EQ(Error(SyntheticCluster(4, 8, "H100", 0)), "nodes_per_leaf: must be >= 1, got 0");
}

// Thinning keeps the mix: every kind of node keeps about the same fraction.
TEST(ThinClusterTest, KeepsAFractionOfEachKindOfNode) {
  ClusterSpec c;
  for (int i = 0; i < 30; ++i) {
    Node n;
    n.name = "n" + std::to_string(i);
    const int gpus = i % 3 == 0 ? 4 : 8;  // 10 nodes of 4 GPUs, 20 of 8
    for (int g = 0; g < gpus; ++g) n.gpus.push_back(Gpu{g, "", "V100", 16 * kGiB, ""});
    c.nodes.push_back(std::move(n));
  }
  auto half = ThinCluster(c, 0.5);
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  int four = 0, eight = 0;
  for (const Node& n : half->nodes) (n.gpus.size() == 4 ? four : eight) += 1;
  EXPECT_EQ(four, 5);
  EXPECT_EQ(eight, 10);
  auto all = ThinCluster(c, 1.0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->nodes.size(), 30u);
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    auto r = ThinCluster(c, bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()),
                ::testing::HasSubstr("--node-fraction: must be greater than 0 and at most 1"));
  }
}

}  // namespace
}  // namespace trainyard::sim
