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
        const bool present = index.BucketSize(t, l, f) > 0;
        ASSERT_EQ(index.LeafHasFree(t, l, f), present)
            << when << ": type " << t << " leaf " << l << " free " << f;
        if (present) max_free = std::max(max_free, f);
      }
      for (int g = 1; g <= 9; ++g) {
        int64_t bound = 0;
        for (int f = g; f <= 64; ++f) {
          bound += static_cast<int64_t>(index.BucketSize(t, l, f)) * (f / g);
        }
        ASSERT_EQ(index.LeafReplicaBound(t, l, g), bound)
            << when << ": type " << t << " leaf " << l << " gpus " << g;
      }
    }
    ASSERT_EQ(index.MaxFree(t), max_free) << when << ": type " << t;
  }
  // Each bucket holds exactly the schedulable GPU nodes of its type, leaf and free
  // count, in slot order, and its size says how many.
  for (int t = 0; t < index.TypeCount(); ++t) {
    for (int l = 0; l < index.LeafCount(); ++l) {
      for (int f = 0; f <= 64; ++f) {
        std::vector<int> expected, seen;
        for (int n = 0; n < index.NodeCount(); ++n) {
          const NodeSlot& s = index.slot(n);
          if (s.type == t && s.leaf == l && s.schedulable && s.FreeGpus() == f)
            expected.push_back(n);
        }
        index.ForEachInBucket(t, l, f, [&](int n) {
          seen.push_back(n);
          return true;
        });
        ASSERT_EQ(seen, expected) << when << ": type " << t << " leaf " << l << " free " << f;
        ASSERT_EQ(index.BucketSize(t, l, f), static_cast<int>(expected.size())) << when;
      }
    }
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

// Two indexes of one snapshot agree on every node's capacity and every bucket.
void ExpectSameState(const NodeIndex& kept, const NodeIndex& fresh, const std::string& when) {
  ASSERT_EQ(kept.NodeCount(), fresh.NodeCount());
  for (int n = 0; n < kept.NodeCount(); ++n) {
    const NodeSlot& a = kept.slot(n);
    const NodeSlot& b = fresh.slot(n);
    ASSERT_EQ(a.free_mask, b.free_mask) << when << ": node " << n;
    ASSERT_EQ(a.reserved_mask, b.reserved_mask) << when << ": node " << n;
    ASSERT_EQ(a.free_cpu, b.free_cpu) << when << ": node " << n;
    ASSERT_EQ(a.free_mem, b.free_mem) << when << ": node " << n;
    ASSERT_EQ(a.schedulable, b.schedulable) << when << ": node " << n;
    for (int g = 0; g < a.gpu_count; ++g) {
      ASSERT_EQ(kept.ShareUsed(n, g), fresh.ShareUsed(n, g))
          << when << ": node " << n << " GPU " << g;
    }
  }
  for (int t = -1; t < kept.TypeCount(); ++t) {
    ASSERT_EQ(kept.FreeGpus(t), fresh.FreeGpus(t)) << when << ": type " << t;
    ASSERT_EQ(kept.MaxFree(t), fresh.MaxFree(t)) << when << ": type " << t;
  }
  ASSERT_TRUE(kept.ReservedNodes().empty()) << when;
  ExpectConsistent(kept, when);
}

// An index told of each running job that comes and goes and of each node state
// change, through passes that take, release and reserve, is the index a fresh build
// of the snapshot would be.
TEST(NodeIndexTest, KeptInStepItEqualsAFreshBuild) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    ClusterShape c;
    c.nodes = 48;
    c.nodes_per_leaf = 8;
    WorkloadShape w;
    w.pending = 0;
    w.mix.gpu_share_fraction = seed % 2 == 0 ? 0.5 : 0;  // running shares of one GPU
    Snapshot snap = SyntheticSnapshot(c, w, seed);
    ASSERT_FALSE(snap.running.empty());
    NodeIndex kept(snap);
    std::vector<RunningJob> gone;
    std::mt19937_64 rng(seed);
    for (int step = 0; step < 150; ++step) {
      const std::string when = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      switch (rng() % 4) {
        case 0:
          if (!snap.running.empty()) {  // a job ends; the last one takes its place
            const size_t i = rng() % snap.running.size();
            kept.RunningRemoved(snap.running[i]);
            gone.push_back(snap.running[i]);
            snap.running[i] = std::move(snap.running.back());
            snap.running.pop_back();
          }
          break;
        case 1:
          if (!gone.empty()) {  // a job starts (it may overlap one that runs: bad input)
            const size_t i = rng() % gone.size();
            snap.running.push_back(gone[i]);
            gone.erase(gone.begin() + static_cast<ptrdiff_t>(i));
            kept.RunningAdded(snap.running.back());
          }
          break;
        case 2: {
          const size_t node = rng() % snap.nodes.size();
          snap.nodes[node].state = snap.nodes[node].state == NodeState::kReady
                                       ? (rng() % 2 ? NodeState::kNotReady : NodeState::kCordoned)
                                       : NodeState::kReady;
          kept.NodeStateChanged(node);
          break;
        }
        case 3: {  // a pass, undone at its end
          kept.BeginPass();
          for (int k = 0; k < 20; ++k) {
            const int n = static_cast<int>(rng() % kept.NodeCount());
            const NodeSlot& s = kept.slot(n);
            const uint64_t mask =
                rng() & ((s.gpu_count == 64 ? 0 : uint64_t{1} << s.gpu_count) - 1);
            const int g = s.gpu_count > 0 ? static_cast<int>(rng() % s.gpu_count) : 0;
            const int share = static_cast<int>(rng() % 9 + 1) * 100;
            switch (rng() % 6) {
              case 0:
                kept.Take(n, mask & s.free_mask, 1000, 1 << 20);
                break;
              case 4:  // a share of one GPU with room for it
                if (s.gpu_count > 0 && kept.ShareRoom(n, g) >= share) {
                  kept.Take(n, uint64_t{1} << g, 1000, 1 << 20, share);
                }
                break;
              case 5:  // a share given back
                if (s.gpu_count > 0 && kept.ShareUsed(n, g) >= share) {
                  kept.Release(n, uint64_t{1} << g, 1000, 1 << 20, share);
                }
                break;
              case 1:
                kept.Release(n, mask & ~s.free_mask & ~s.reserved_mask, 1000, 1 << 20);
                break;
              case 2:
                kept.Reserve(n, mask, snap.now);
                break;
              case 3:
                kept.Unreserve(n, mask);
                break;
            }
          }
          kept.EndPass();
          break;
        }
      }
      const NodeIndex fresh(snap);
      ExpectSameState(kept, fresh, when);
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

// Shares of one GPU: running jobs' shares leave room for more; the GPU is free
// (whole) only once every share on it is gone, in a pass or between passes.
TEST(NodeIndexTest, SharesOfOneGpuLeaveRoomAndFreeItWhenAllAreGone) {
  Snapshot snap = WithDomains({{"d0", "d0"}});
  RunningJob a;
  a.id = 1;
  a.per_replica.gpus = 1;
  a.per_replica.gpu_milli = 300;
  a.replicas = {{"n0", {0}}};
  RunningJob b = a;
  b.id = 2;
  b.per_replica.gpu_milli = 500;
  snap.running = {a, b};
  NodeIndex index(snap);
  EXPECT_EQ(index.ShareUsed(0, 0), 800);
  EXPECT_EQ(index.ShareRoom(0, 0), 200);
  EXPECT_EQ(index.ShareRoom(0, 1), kWholeGpu);  // free
  EXPECT_EQ(index.slot(0).free_mask, 0b10u);    // GPU 0 is not free while shared
  Shape share;
  share.gpus = 1;
  share.share = 200;
  EXPECT_EQ(index.ReplicasFit(0, share), 1 + 5);  // 200 left on GPU 0, 5 x 200 on GPU 1
  share.share = 250;
  EXPECT_EQ(index.ReplicasFit(0, share), 4);

  index.BeginPass();
  index.Take(0, 0b10, 0, 0, 600);  // a share of the free GPU takes it out of the free pool
  EXPECT_EQ(index.slot(0).free_mask, 0u);
  EXPECT_EQ(index.ShareRoom(0, 1), 400);
  index.Release(0, 0b01, 0, 0, 300);  // what-if: job 1 ends; job 2 still shares GPU 0
  EXPECT_EQ(index.slot(0).free_mask, 0u);
  EXPECT_EQ(index.ShareRoom(0, 0), 500);
  index.Release(0, 0b01, 0, 0, 500);  // and job 2: GPU 0 is whole again
  EXPECT_EQ(index.slot(0).free_mask, 0b01u);
  EXPECT_EQ(index.ShareRoom(0, 0), kWholeGpu);
  index.EndPass();
  ExpectSameState(index, NodeIndex(snap), "after the pass");

  index.RunningRemoved(snap.running[0]);
  snap.running.erase(snap.running.begin());
  EXPECT_EQ(index.ShareRoom(0, 0), 500);
  index.RunningRemoved(snap.running[0]);
  snap.running.clear();
  EXPECT_EQ(index.slot(0).free_mask, 0b11u);
  ExpectSameState(index, NodeIndex(snap), "after both ended");
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
