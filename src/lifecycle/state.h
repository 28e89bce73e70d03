// ClusterState: everything the job lifecycle decides from — the jobs not yet finished
// with the ranks of their started gangs, the nodes, tenants, queues and priority
// classes, the commands waiting for each node's agent — and the SnapshotBuilder that
// shows the scheduler what it needs of it, kept in step by every Apply
// (lifecycle.h).
//
// It is a value with no I/O, no clock and no threads: the server keeps one under its
// lock (server/cluster.h), the simulator and the scenario replay one each.
//
// Rank layout: a replica runs spec.procs_per_replica ranks (torchrun's
// nproc_per_node; 1 by default). Rank r of the gang is local rank r % P of replica
// r / P; when P divides the replica's GPUs each rank sees its own G / P of them in
// CUDA_VISIBLE_DEVICES, otherwise every rank of the replica sees all of them.
//
// Thread-safety: none; its owner serialises access.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/job.h"
#include "core/node.h"
#include "core/spec_paths.h"
#include "core/tenancy.h"
#include "lifecycle/snapshot_builder.h"
#include "protocol/messages.h"
#include "sched/policy.h"

namespace trainyard::lifecycle {

// kStaging: bound, waiting for the datasets it reads to be staged on every node of its
// gang before its start is sent (docs/datasets.md, "Staging").
enum class RankState { kUnknown, kStaging, kSent, kStarting, kRunning, kExited, kGone };
// "unknown" | "staging" | "sent" | "starting" | "running" | "exited" | "gone"
std::string_view RankStateName(RankState s);
// Exited or gone: the rank holds nothing any more.
bool RankDone(RankState s);

struct Rank {
  int32_t rank = 0;
  int32_t replica = 0;
  int32_t local = 0;
  std::string node;
  std::vector<int> gpus;
  RankState state = RankState::kUnknown;
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string message;
  Timestamp sent_at{};  // when its start was last sent (kSent)
};

// Why a gang is being stopped (a preemption is the job's Preempting state instead).
enum class Stopping { kNone, kFailed, kCancelled, kLost, kRequeue, kTimeLimit };

// The ranks of a job's open attempt.
struct Gang {
  int32_t attempt = 0;
  std::vector<Rank> ranks;
  Stopping stopping = Stopping::kNone;
  std::string stop_message;
  int32_t failure_code = 0;  // exit code (or -signal) of the rank that failed first
};

struct JobEntry {
  Job job;
  std::optional<Gang> gang;  // while the job has an open attempt
};

// A command for a node's agent, deliverable once the commit it depends on is durable:
// the change that made it (a bind before its `start`) is never acted on before it is
// stored.
struct QueuedCommand {
  protocol::Command command;
  uint64_t after_seq = 0;  // ClusterState::apply_seq when it was queued
};

struct NodeEntry {
  Node node;  // as stored; node.state is its effective state (EffectiveState)
  std::string address;
  bool simulated = false;
  // Registered with this server process and heartbeating (a simulator's nodes always).
  bool connected = false;
  bool healthy = true;  // the agent's own health report
  std::string health_message;
  Timestamp last_heartbeat{};
  // Marked NotReady for want of heartbeats (Tick), and since when; its gangs were given
  // up after node_timeout + node_lost_grace (released). Cleared when its agent
  // registers again.
  bool unreachable = false;
  Timestamp unreachable_at{};
  bool released = false;
  // The state an admin set (Ready, Cordoned or Draining), or any state a simulator
  // sets; in effect while the node is connected and healthy.
  NodeState set_state = NodeState::kReady;
  std::optional<protocol::HealthCheckResult> health_check;  // the latest
  std::string limits;                // how its agent limits tasks (protocol::Registration::limits)
  std::string containers;            // whether it runs containers (Registration::containers)
  std::deque<QueuedCommand> outbox;  // oldest first
  // Its agent's dataset cache, as its latest heartbeat said (docs/datasets.md).
  std::vector<protocol::DatasetStatus> datasets;
};

// The state the scheduler and users see of `n`: NotReady while its agent is away or
// unhealthy, else the state set on it.
NodeState EffectiveState(const NodeEntry& n);

struct LifecycleOptions {
  sched::Policy policy;
  Duration node_timeout{15'000};  // no heartbeat this long: the node is NotReady
  // How long after a node went NotReady its gangs are given up (Lost, their other ranks
  // stopped, requeued). Until then they stay Running.
  Duration node_lost_grace{120'000};
  Duration stop_grace{10'000};    // SIGTERM -> SIGKILL for `stop` commands
  Duration start_resend{15'000};  // a rank not reported this long after its start: resend
  // A node's report that staging failed counts only this long after the gang's stage
  // command was sent: what it says before may be an earlier attempt's failure, from
  // before its agent got the command that starts the staging again.
  Duration stage_failure_grace{5'000};
  // The rules for paths in specs and reported checkpoints (core/spec_paths.h); its
  // checkpoint_root is where jobs that name no checkpoint.dir keep theirs.
  PathPolicy paths;
  // Tenants and queues named by a submission are created on first use (queue
  // guarantee 0, no limit). When false, a submission to an unknown queue is refused.
  bool auto_create_queues = true;
  // Submissions must name a known priority class and a queue that exists (or may be
  // created). A simulator, whose cluster lists its queues itself, turns it off.
  bool check_tenancy = true;
  // Jobs a tenant may have unfinished (pending, starting, running) at once.
  int64_t max_unfinished_jobs_per_tenant = 1'000'000;
  // Produce store batches and the texts of job events (the server). A simulator turns
  // it off: what it records is its own.
  bool record = true;
  // Queue commands for agents (the server). A simulator turns it off: it reports
  // what its ranks do through GangRunning / GangExited instead.
  bool agents = true;
  // Keep a sched::SnapshotIndex in step with the snapshot (SnapshotBuilder).
  bool keep_index = false;
};

// Not copyable or movable: its snapshot builder refers to its priority classes.
struct ClusterState {
  explicit ClusterState(LifecycleOptions o);
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  const LifecycleOptions options;
  std::map<JobId, JobEntry> jobs;  // not finished
  // Jobs whose gang may have ranks waiting for their data (RankState::kStaging); a
  // superset, pruned as heartbeats look at them.
  std::set<JobId> staging;
  std::map<std::string, NodeEntry> nodes;
  std::map<std::string, Tenant> tenants;
  std::map<std::pair<std::string, std::string>, Queue> queues;  // by (tenant, name)
  std::map<std::string, PriorityClass> classes;
  std::map<std::string, int64_t> unfinished_by_tenant;  // jobs, by tenant
  SnapshotBuilder snapshot;
  // The commit sequence number of the changes the next Apply makes: commands it queues
  // are delivered only once that commit is durable (the server sets it before each
  // Apply; a simulator leaves it 0).
  uint64_t apply_seq = 0;
  // Something changed since the last pass that may let a job start.
  bool dirty = true;

  const PriorityClass* ClassOf(const Job& job) const;
  JobEntry* FindJob(JobId id);
  NodeEntry* FindNode(const std::string& name);
};

}  // namespace trainyard::lifecycle
