// Snapshot: everything the scheduling policy may look at, as one immutable value.
//
// The server (or the simulator) builds a Snapshot from its state and hands it to
// sched::Schedule; nothing in sched/ ever sees live state, reads a clock or does
// I/O. Time is `now`. Resources in use are not stored on nodes: they are derived
// from the placements of running jobs, so the two can never disagree.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/job.h"
#include "core/job_spec.h"
#include "core/node.h"
#include "core/resources.h"
#include "core/tenancy.h"
#include "core/units.h"

namespace trainyard::sched {

// Where one replica runs: a node and the GPU indices on it.
struct Placement {
  std::string node;
  std::vector<int> gpus;

  bool operator==(const Placement&) const = default;
};

struct RunningJob {
  JobId id = 0;
  std::string tenant;
  std::string queue;
  int32_t priority = 0;  // the value of its priority class
  bool preemptible = true;
  Resources per_replica;
  std::vector<Placement> replicas;  // one per bound replica
  Timestamp start_time{};
  std::optional<Timestamp> last_checkpoint;  // latest completed checkpoint
  Duration time_limit{0};                    // 0: none (its end time is unknown)
  bool preempting = false;                   // already told to stop; still holds its GPUs

  bool operator==(const RunningJob&) const = default;
  int64_t Gpus() const { return per_replica.gpus * static_cast<int64_t>(replicas.size()); }
};

struct PendingJob {
  JobId id = 0;
  std::string name;
  std::string tenant;
  std::string queue;
  int32_t priority = 0;
  bool preemptible = true;
  int32_t replicas = 1;
  int32_t min_replicas = 1;
  Resources per_replica;
  TopologySpec topology;
  Timestamp submit_time{};
  Timestamp eligible_time{};  // not before this (retry backoff); <= now when eligible
  Duration time_limit{0};     // 0: none; such a job cannot backfill ahead of a reservation
  std::vector<std::string> excluded_nodes;
  // The dataset versions it reads staged to local disk (stage: local): nodes whose
  // cache holds them all are preferred (Node::cached_data).
  std::vector<std::string> data_versions;
  bool held = false;
  Duration attained_service{0};  // GPU-time received so far (for least-attained-service)

  bool operator==(const PendingJob&) const = default;
};

struct Snapshot {
  Timestamp now{};
  std::vector<Node> nodes;
  std::vector<RunningJob> running;
  std::vector<PendingJob> pending;
  std::vector<Queue> queues;
};

}  // namespace trainyard::sched
