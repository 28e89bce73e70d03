// Traces and clusters for the simulator: what jobs arrive when, asking for what, on
// which cluster.
//
// Every trace format (Philly's cluster_job_log JSON, Alibaba PAI's openb pod list,
// our own CSV, the synthetic generator) is read into the same Trace; every cluster
// description (our YAML, or one derived from a trace's node list) into the same
// ClusterSpec. Times are relative to the start of the trace: submit times start
// near 0.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/job_spec.h"
#include "core/node.h"
#include "core/tenancy.h"
#include "core/units.h"

namespace trainyard::sim {

struct TraceJob {
  std::string id;      // as the trace names it
  Duration submit{0};  // since the start of the trace
  std::string tenant = "default";
  std::string queue = "default";
  std::string priority_class = "normal";
  int32_t replicas = 1;
  int32_t gpus_per_replica = 0;     // whole GPUs a replica holds
  int32_t gpu_milli = 0;            // requested share of one GPU (Alibaba GPU sharing), 0 = whole
  std::string gpu_type;             // empty: any
  int64_t milli_cpus = 0;           // per replica
  int64_t memory_bytes = 0;         // per replica
  Duration duration{0};             // run time needed when never interrupted
  Duration time_limit{0};           // 0: none
  Duration checkpoint_interval{0};  // 0: the simulation's default
  TopologySpec topology;
  // What the trace says really happened, when it says (for comparisons): first
  // start after submit, and number of attempts.
  Duration trace_wait{-1};
  int32_t trace_attempts = 0;

  bool operator==(const TraceJob&) const = default;
};

struct Trace {
  std::string source;                 // "philly:FILE", "alibaba:FILE", ...
  std::vector<TraceJob> jobs;         // ascending submit time
  std::vector<std::string> warnings;  // rows skipped or adjusted, with why
};

struct ClusterSpec {
  std::vector<Node> nodes;
  std::vector<Queue> queues;  // empty: no quotas
  std::vector<Tenant> tenants;
  std::vector<PriorityClass> priority_classes;  // DefaultPriorityClasses() plus any defined
};

}  // namespace trainyard::sim
