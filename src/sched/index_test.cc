// NodeIndex's derived bookkeeping (free-count masks, maximum free, leaf bounds, the
// reservation epoch) agrees with its buckets through any sequence of changes.
#include "sched/index.h"

#include <gtest/gtest.h>

#include <random>

#include "sched/testing.h"

namespace trainyard::sched {
namespace {

// Everything the masks summarise, recomputed from the buckets.
void ExpectConsistent(const NodeIndex& index, const std::string& when) {
  for (int t = 0; t < index.TypeCount(); ++t) {
    int max_free = 0;
    for (int l = 0; l < index.LeafCount(); ++l) {
      for (int f = 1; f <= 64; ++f) {
        const bool present = !index.Bucket(t, l, f).empty();
        ASSERT_EQ(index.LeafHasFree(t, l, f), present)
            << when << ": type " << t << " leaf " << l << " free " << f;
        if (present) max_free = std::max(max_free, f);
      }
      for (int g = 1; g <= 9; ++g) {
        int64_t bound = 0;
        for (int f = g; f <= 64; ++f) {
          bound += static_cast<int64_t>(index.Bucket(t, l, f).size()) * (f / g);
        }
        ASSERT_EQ(index.LeafReplicaBound(t, l, g), bound)
            << when << ": type " << t << " leaf " << l << " gpus " << g;
      }
    }
    ASSERT_EQ(index.MaxFree(t), max_free) << when << ": type " << t;
  }
  // Every schedulable GPU node sits in the bucket of its free count.
  for (int n = 0; n < index.NodeCount(); ++n) {
    const NodeSlot& s = index.slot(n);
    if (s.type < 0 || !s.schedulable || s.FreeGpus() == 0) continue;
    const auto& bucket = index.Bucket(s.type, s.leaf, s.FreeGpus());
    ASSERT_NE(std::find(bucket.begin(), bucket.end(), n), bucket.end()) << when << ": node " << n;
  }
}

TEST(NodeIndexTest, MasksFollowTakesReleasesAndReservations) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    ClusterShape c;
    c.nodes = 96;
    c.nodes_per_leaf = 16;
    WorkloadShape w;
    w.pending = 0;
    const Snapshot snap = SyntheticSnapshot(c, w, seed);
    NodeIndex index(snap);
    ExpectConsistent(index, "seed " + std::to_string(seed) + " built");
    std::mt19937_64 rng(seed);
    for (int step = 0; step < 200; ++step) {
      const int n = static_cast<int>(rng() % index.NodeCount());
      const NodeSlot& s = index.slot(n);
      const uint64_t mask = rng() & ((s.gpu_count == 64 ? 0 : uint64_t{1} << s.gpu_count) - 1);
      const uint64_t epoch = index.ReservationEpoch();
      switch (rng() % 4) {
        case 0:
          index.Take(n, mask & s.free_mask, 0, 0);
          EXPECT_EQ(index.ReservationEpoch(), epoch);
          break;
        case 1:
          index.Release(n, mask & ~s.free_mask & ~s.reserved_mask, 0, 0);
          EXPECT_EQ(index.ReservationEpoch(), epoch);
          break;
        case 2:
          index.Reserve(n, mask, snap.now);
          EXPECT_NE(index.ReservationEpoch(), epoch);
          break;
        case 3:
          index.Unreserve(n, mask);
          EXPECT_NE(index.ReservationEpoch(), epoch);
          break;
      }
      ExpectConsistent(index, "seed " + std::to_string(seed) + " step " + std::to_string(step));
      if (HasFatalFailure()) return;
    }
  }
}

// Nodes with GPUs in the given NVLink domains, one entry per GPU.
Snapshot WithDomains(const std::vector<std::vector<std::string>>& per_node) {
  Snapshot snap;
  for (size_t k = 0; k < per_node.size(); ++k) {
    Node n;
    n.name = "n" + std::to_string(k);
    n.milli_cpus = 64'000;
    n.memory_bytes = int64_t{512} << 30;
    for (size_t g = 0; g < per_node[k].size(); ++g) {
      n.gpus.push_back(Gpu{static_cast<int>(g), n.name + "-" + std::to_string(g), "H100",
                           int64_t{80} << 30, per_node[k][g]});
    }
    snap.nodes.push_back(std::move(n));
  }
  return snap;
}

TEST(NodeIndexTest, SaysWhetherNvlinkDomainsSpanNodes) {
  // Per-node domains, one of them interleaved (GPUs 0 and 2 in a, 1 in b).
  Snapshot own = WithDomains({{"a", "b", "a"}, {"c", "c"}});
  EXPECT_FALSE(NodeIndex(own).DomainsSpanNodes());
  // An NVL72-style rack: one domain over two nodes.
  Snapshot rack = WithDomains({{"r", "r"}, {"x", "r"}});
  EXPECT_TRUE(NodeIndex(rack).DomainsSpanNodes());
  Snapshot none = WithDomains({{"", ""}, {"", ""}});
  EXPECT_FALSE(NodeIndex(none).DomainsSpanNodes());
  EXPECT_EQ(NodeIndex(own).AllLeaves(), std::vector<int>{0});
}

TEST(NodeIndexTest, FindsNodesByNameFirstOfEqualNamesWins) {
  Snapshot snap = WithDomains({{"a"}, {"b"}, {"c"}});
  snap.nodes[2].name = "n0";  // a duplicate name, listed after the first n0
  const NodeIndex index(snap);
  EXPECT_EQ(index.NodeByName("n1"), 2);  // slots are in name order: n0, n0, n1
  const int n0 = index.NodeByName("n0");
  ASSERT_GE(n0, 0);
  EXPECT_EQ(index.slot(n0).node, 0);
  EXPECT_EQ(index.NodeByName("n9"), -1);
}

}  // namespace
}  // namespace trainyard::sched
