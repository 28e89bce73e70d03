// Synthetic clusters and workloads: seeded random Snapshots for property tests,
// benchmarks and the simulator.
//
// A cluster is built the way GPU clusters are bought: nodes of 8 GPUs (two NVLink
// domains of 4) grouped under leaf switches, leaves under spines, one GPU model per
// leaf. A workload has tenants with a small tree of queues (guarantees summing to
// part of the cluster, limits above them), running jobs placed consistently (no GPU,
// CPU or memory is ever used twice; queue limits hold) with start times, checkpoints
// and time limits, and pending jobs with the size mix of published traces (Philly,
// Helios): most jobs ask for 1-8 GPUs, a tail are multi-node gangs of 8-GPU replicas
// up to 512 GPUs, with priorities, topology constraints, exclusions, holds and
// retry backoff.
//
// Everything is drawn from one std::mt19937_64 through the helpers below, which use
// only the engine's raw output (never std::*_distribution, whose results differ
// between standard libraries), so a seed names the same Snapshot on every platform.
// Nothing reads a clock: time is WorkloadShape::now.
//
// Thread-safety: plain functions over values; an engine must not be shared between
// threads.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sched/decisions.h"
#include "sched/snapshot.h"

namespace trainyard::sched {

// --- Random draws from the raw output of the engine ---------------------------------
// A value in [0, n); n > 0.
uint64_t DrawBelow(std::mt19937_64& rng, uint64_t n);
// A value in [lo, hi]; lo <= hi.
int64_t DrawBetween(std::mt19937_64& rng, int64_t lo, int64_t hi);
// A value in [0, 1).
double DrawUnit(std::mt19937_64& rng);
bool DrawChance(std::mt19937_64& rng, double p);
// An index drawn with probability proportional to `weights` (not all zero).
size_t DrawWeighted(std::mt19937_64& rng, const std::vector<double>& weights);

// --- Cluster --------------------------------------------------------------------------
struct GpuModel {
  std::string name;          // "H100"
  int64_t memory_bytes = 0;  // per GPU
  double weight = 1;         // share of leaves built with this model
};

struct ClusterShape {
  int nodes = 64;
  int gpus_per_node = 8;            // at most 64
  int nvlink_domains_per_node = 2;  // GPUs split evenly between them
  int nodes_per_leaf = 32;
  int leaves_per_spine = 16;
  int64_t milli_cpus = 192'000;             // per node
  int64_t memory_bytes = int64_t{2} << 40;  // per node
  // One model per leaf, drawn by weight. Two entries may share a name with different
  // memory (A100 40 GiB and 80 GiB), so requests for GPU memory matter.
  std::vector<GpuModel> models = {{"H100", int64_t{80} << 30, 5},
                                  {"A100", int64_t{80} << 30, 2},
                                  {"A100", int64_t{40} << 30, 1},
                                  {"L40S", int64_t{48} << 30, 1}};
  // Nodes not Ready (Cordoned, Draining, NotReady, Down, in that proportion 3:2:4:1).
  double unready_fraction = 0.01;
  // Nodes whose GPU list is not in index order (e.g. indices 4-7 listed first), to
  // catch confusions between a GPU's index and its position in the list.
  double permuted_gpu_order_fraction = 0;
  // Nodes with no GPUs at all (CPU partitions, data preprocessing).
  double cpu_node_fraction = 0;
};

// Nodes named "n00042", leaves "leaf-007", spines "spine-0"; NVLink domains are
// per node ("n00042-nvl1").
std::vector<Node> SyntheticCluster(const ClusterShape& shape, std::mt19937_64& rng);

// --- Jobs -----------------------------------------------------------------------------
struct JobMix {
  // Total GPUs of a job and its weight. Jobs up to a node's size are one replica (or
  // a few replicas on one node); larger ones are gangs of whole-node replicas.
  std::vector<std::pair<int, double>> sizes = {{1, 45}, {2, 10},   {4, 12},  {8, 15},  {16, 6},
                                               {32, 5}, {64, 3.5}, {128, 2}, {256, 1}, {512, 0.5}};
  int max_gpus = 512;                // sizes above this are not drawn
  double cpu_only_fraction = 0;      // replicas with no GPU (preprocessing, evaluation)
  double gpu_share_fraction = 0;     // 1-GPU replicas that ask for a share (100..900/1000)
  double typed_fraction = 0.6;       // asks for a GPU model of the cluster
  double unknown_type_fraction = 0;  // asks for a model the cluster does not have
  double gpu_memory_fraction = 0.1;  // asks for at least 80 GiB per GPU
  double cpu_heavy_fraction = 0.05;  // asks for most of a node's CPUs per replica
  // CPUs and memory of the rest: a round share of the node per GPU (1/4, 1/2, 3/4),
  // or, for this fraction, any share from 0.2 to 0.8 (so shapes rarely repeat).
  double custom_resources_fraction = 0.2;
  double elastic_fraction = 0.1;        // min_replicas < replicas (multi-replica jobs)
  double topology_fraction = 0.4;       // multi-replica jobs with a constraint
  double hard_topology_fraction = 0.4;  // of those, hard
  double time_limit_fraction = 0.6;
  // Priority classes (DefaultPriorityClasses order: p0, production, normal,
  // best-effort) and their weights.
  std::vector<double> priority_weights = {2, 13, 65, 20};
  double non_preemptible_fraction = 0.03;  // beyond p0, which never is
};

struct WorkloadShape {
  Timestamp now = DefaultNow();
  int tenants = 4;
  int queues_per_tenant = 3;         // a top-level queue and up to this many children
  bool define_queues = true;         // false: no queues, every name is an implicit queue
  double guaranteed_fraction = 0.8;  // of the cluster's GPUs, split between tenants
  double running_fill = 0.5;         // fraction of GPUs held by running jobs (a target)
  int pending = 100;
  JobMix mix;
  double unknown_queue_fraction = 0;
  double held_fraction = 0.02;
  double backoff_fraction = 0.03;     // eligible only after now
  double excluded_fraction = 0.05;    // excludes 1-3 nodes (sometimes unknown names)
  double preempting_fraction = 0.02;  // running jobs already told to stop
  double young_fraction = 0.1;        // running jobs started under 5 minutes ago

  static Timestamp DefaultNow();  // 2026-11-29T09:00:00Z
};

// Tenants "team-0".., each with a top-level queue "team-0" and children
// "team-0-q1"..; guarantees add up to guaranteed_fraction of `cluster_gpus`.
std::vector<Queue> SyntheticQueues(const WorkloadShape& shape, int64_t cluster_gpus,
                                   std::mt19937_64& rng);

// One pending job for the cluster `cluster` (for its GPU models and node size),
// submitted to one of `queues` (or "default" when there are none).
PendingJob SyntheticPendingJob(JobId id, const ClusterShape& cluster,
                               const std::vector<Node>& nodes, const std::vector<Queue>& queues,
                               const WorkloadShape& shape, std::mt19937_64& rng);

// Running jobs filling about running_fill of the GPUs of `nodes` (never Down ones),
// each placed whole without over-committing a node and within its queues' limits.
// Ids start at `first_id`.
std::vector<RunningJob> SyntheticRunning(JobId first_id, const ClusterShape& cluster,
                                         const std::vector<Node>& nodes,
                                         const std::vector<Queue>& queues,
                                         const WorkloadShape& shape, std::mt19937_64& rng);

// The whole thing from one seed: cluster, queues, running jobs (ids 1..R), pending
// jobs (ids R+1..).
Snapshot SyntheticSnapshot(const ClusterShape& cluster, const WorkloadShape& workload,
                           uint64_t seed);

// A readable dump of a snapshot, one line per node, queue and job, times relative to
// `now`; for failure messages and reproducers.
std::string SnapshotToText(const Snapshot& snapshot);
// The same for what a pass decided.
std::string DecisionsToText(const Decisions& decisions, Timestamp now);

}  // namespace trainyard::sched
