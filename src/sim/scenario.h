// Scenario: a tiny scripted cluster and a script of events, for replaying the
// scheduler step by step without a daemon (`trainyard sched replay`, replay.h).
//
// A scenario file is one YAML document:
//
//   policy:            # optional; every key optional, defaults as in sched::Policy
//     {ordering: priority, placement: topology, preemption: lost-work, backfill: true,
//      reservations: 1, min_runtime: 5m, restart_cost: 1m, max_victims: 256}
//   nodes:             # required; groups of identical nodes
//     - {name: a, count: 2, gpus: 8, gpu_type: H100, gpu_memory: 80Gi, cpus: 96,
//        memory: 1Ti, spine: spine-0, leaf: leaf-1, nvlink_group: 8, state: Ready}
//   queues:            # optional; absent: every queue is implicit and unlimited
//     - {name: research, tenant: nlp, parent: "", guaranteed: 8, limit: 16, weight: 1}
//   priority_classes:  # optional; added to (or, by name, overriding) the defaults
//     - {name: urgent, value: 800, preemptible: true}
//   jobs:              # every job the steps mention, by id
//     - {id: 1, name: job-1, tenant: default, queue: default, priority: normal,
//        replicas: 2, min_replicas: 2, gpus: 8, gpu_type: H100, gpu_memory: 80Gi,
//        cpus: 8, memory: 64Gi, topology: same-leaf, mode: hard, time_limit: 1h,
//        duration: 30m, checkpoint_interval: 10m, preempt_grace: 0s, exclude: [a-0]}
//   steps:             # in time order; times may repeat, never go back
//     - at: 0s
//       submit: [1, 2]
//       finish: [3]
//       checkpoint: [4]
//       hold: [5]
//       release: [6]
//       node_state: {a-1: NotReady}
//
// Nodes: a group with `count: N` expands to NAME-0 .. NAME-(N-1); without `count` it
// is one node called NAME. `gpus` (0-64) GPUs of `gpu_type` (required when gpus > 0)
// with `gpu_memory` each (default 80Gi), indexed 0..gpus-1. `nvlink_group: K` puts
// GPUs 0..K-1, K..2K-1, ... in one NVLink domain each (0, the default: no NVLink).
// `cpus` (cores, "0.5" or "500m") and `memory` default to 0; `leaf` and `spine`
// default to empty (all nodes under one leaf); `state` defaults to Ready.
//
// Jobs: `id` >= 1, unique. Defaults: tenant and queue `default`, priority `normal`,
// replicas 1, min_replicas = replicas, gpus 0, no topology constraint (a written
// `topology` is hard unless `mode: soft`), no time limit. `duration`: how long the
// job runs once started (absent: until a step finishes it); `checkpoint_interval`:
// the job completes a checkpoint every interval after it starts; `preempt_grace`:
// how long a preempted job keeps its GPUs (default 0s: it leaves at the next step);
// `exclude`: nodes it must never be placed on (e.g. where a retry failed).
//
// Priority classes: p0 (1000, not preemptible), production (500), normal (100) and
// best-effort (0) always exist; `priority_classes` adds more or changes these.
//
// Steps: `at` is a duration from time 0 (time 0 is the Unix epoch in timestamps the
// scheduler writes). Each list of job ids may also be one id. See replay.h for what
// a step does.
//
// Unknown fields, bad values, undefined job or node names, a job submitted twice or
// never, and steps going back in time are errors: `file:line: field: message`.
//
// Thread-safety: plain values and a pure parser.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/job.h"
#include "core/job_spec.h"
#include "core/node.h"
#include "core/resources.h"
#include "core/tenancy.h"
#include "core/units.h"
#include "sched/policy.h"
#include "sim/trace.h"

namespace trainyard::sim {

// The version a scenario's dataset name stands for ("sha256:" and 64 hex digits derived
// from the name): nodes' `cached_data` and jobs' `data` name datasets, not versions.
std::string ScenarioDataVersion(std::string_view dataset);

struct ScenarioJob {
  JobId id = 0;
  std::string name;  // default "job-<id>"
  std::string tenant = kDefaultTenant;
  std::string queue = kDefaultQueue;
  std::string priority = kDefaultPriorityClass;  // a class of Scenario::priority_classes
  int32_t replicas = 1;
  int32_t min_replicas = 1;
  Resources per_replica;
  TopologySpec topology;
  Duration time_limit{0};            // 0: none
  std::optional<Duration> duration;  // none: runs until a step finishes it
  Duration checkpoint_interval{0};   // 0: never checkpoints by itself
  Duration preempt_grace{0};         // how long it holds its GPUs once preempted
  std::vector<std::string> exclude;  // node names
  // Datasets it reads staged to local disk (ScenarioDataVersion names their version):
  // placement prefers nodes whose `cached_data` holds them.
  std::vector<std::string> data;
  int line = 0;  // where it is defined
};

// What one step does before its scheduling pass, with where each list was written.
struct ScenarioStep {
  Duration at{0};
  std::vector<std::pair<std::string, NodeState>> node_state;  // in file order
  std::vector<JobId> finish;
  std::vector<JobId> checkpoint;
  std::vector<JobId> submit;
  std::vector<JobId> hold;
  std::vector<JobId> release;
  int line = 0;
  std::map<std::string, int> field_lines;  // "finish" -> line
  int LineOf(const std::string& field) const {
    auto it = field_lines.find(field);
    return it == field_lines.end() ? line : it->second;
  }
};

struct Scenario {
  std::string file;  // as given to ParseScenario, for messages
  sched::Policy policy;
  std::vector<Node> nodes;  // expanded, in file order
  std::vector<Queue> queues;
  std::vector<PriorityClass> priority_classes;  // defaults first, then the file's
  std::vector<ScenarioJob> jobs;                // in file order
  std::vector<ScenarioStep> steps;

  const ScenarioJob* FindJob(JobId id) const;
  const PriorityClass* FindPriorityClass(std::string_view name) const;
};

struct ScenarioParseResult {
  std::optional<Scenario> scenario;  // set when there is no error
  std::vector<Diagnostic> errors;
  bool ok() const { return scenario.has_value(); }
};

// Parses and checks a scenario document; `file` is used only in messages. Reports
// every problem found, not just the first.
ScenarioParseResult ParseScenario(std::string_view text, std::string_view file);

// The cluster sections of a scenario (`nodes`, `queues`, `priority_classes`) as a
// document of their own: the cluster file of the trace simulator (cluster.h's
// ReadClusterYaml). The same reader and rules as ParseScenario; `policy`, `jobs` and
// `steps` are errors that say they belong in a scenario, any other key an unknown
// field. Tenants are those the queues name, in order of first mention.
struct ClusterParseResult {
  std::optional<ClusterSpec> cluster;  // set when there is no error
  std::vector<Diagnostic> errors;
  bool ok() const { return cluster.has_value(); }
};
ClusterParseResult ParseClusterSections(std::string_view text, std::string_view file);

// The field names of each object, for hints and docs.
const std::vector<std::string_view>& ScenarioFieldNames();

}  // namespace trainyard::sim
