// The job lifecycle as a pure function: Apply(state, event, now) -> effects.
//
// Everything that happens to jobs and nodes is an event (below). Apply checks it
// against the ClusterState (state.h), changes the state, and returns the Effects: the
// store batch that records the change, whether a pass may now decide differently, and
// what the caller is told back. Commands for agents go to the nodes' outboxes in the
// state, tagged with state.apply_seq so that none is delivered before its change is
// stored. ApplyDecisions does the same for a scheduling pass's decisions.
//
// The server drives it with agents' reports and users' requests, under its lock, and
// commits the batch outside it (server/cluster.h). The trace simulator and the scenario
// replay drive the same code with events of their own making (a gang runs, exits, a
// node fails), with recording and agents off (LifecycleOptions): the jobs, the snapshot
// the scheduler sees and what its decisions do are the server's, by construction.
//
// The gang lifecycle: a bound job is Starting with every rank sent its start; Running
// when all run; one rank failing stops the gang (retry with backoff, or Failed); all
// ranks done closes the attempt (Succeeded, requeued, retried, Failed, Cancelled). A
// preempted gang gets the notice (signal and grace) and is requeued when its ranks are
// done, resuming from its checkpoint. A node silent past node_timeout is NotReady (its
// gangs keep running); past node_lost_grace more its gangs are given up (Lost, other
// ranks stopped, requeued).
//
// Errors: a refusal (bad input, a job in the wrong state) is found before anything
// changes and names what is wrong; Internal means a broken invariant after changes
// began, and the caller must rebuild its state (the server reloads from the store).
//
// Thread-safety: pure functions of their arguments; the caller serialises access to
// the state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/auth.h"
#include "core/status.h"
#include "lifecycle/state.h"
#include "sched/decisions.h"
#include "store/store.h"

namespace trainyard::lifecycle {

// The label a job of an array carries its index in (TRAINYARD_ARRAY_INDEX for its
// ranks); spec.env may not hold TRAINYARD_* variables, so the index travels here.
inline constexpr const char* kArrayIndexLabel = "trainyard.dev/array-index";

// The admin-state reason of a node its health check cordoned; a passing check
// uncordons only a node whose reason starts with it.
inline constexpr std::string_view kHealthCheckCordonPrefix = "health check failed";

struct PassStats {
  int binds = 0;
  int preemptions = 0;
  int waiting = 0;
  int infeasible = 0;
};

struct Effects {
  store::WriteBatch batch;  // to commit before anything else here is acted on
  // Nodes whose outbox got commands (their polls wake once the batch is durable).
  std::vector<std::string> nodes_with_commands;
  // Nodes no longer connected (Tick): their agents' polls are answered NotFound.
  std::vector<std::string> disconnected;
  bool may_schedule = false;  // a pass may now decide differently
  // What the event's caller is told:
  std::vector<JobId> ids;         // SubmitJobs: the new jobs, in order
  std::vector<JobId> ended;       // jobs that finished (and left the state)
  std::vector<std::string> stop;  // AgentRegistered: tasks the agent must stop
  std::vector<std::string> acks;  // AgentHeartbeat: exits it may forget
  PassStats stats;                // ApplyDecisions
  std::optional<Tenant> tenant;   // SetTenantQuota, SetTenantIdentity
  std::optional<Queue> queue;     // PutQueue
};

// --- events ---------------------------------------------------------------------------

// New jobs, ids first_id, first_id + 1, ... (the caller reserves them). Refused whole
// when one is refused: unknown priority class or queue (unless it may be created),
// paths the rules forbid, a tenant beyond its unfinished-job limit.
struct SubmitJobs {
  std::vector<JobSpec> specs;
  JobId first_id = 0;
  std::string actor;
  // The submitting user's own Unix identity (User::run_as_uid), recorded on each job;
  // -1: the jobs run as their tenant's.
  int64_t run_as_uid = -1;
  int64_t run_as_gid = -1;
  // Whether queues (and tenants) the specs name may be created (when the options'
  // auto_create_queues allows it at all).
  bool may_create_queues = true;
  // Written in the jobs' own batch (object set to the first job, time to now).
  std::optional<AuditEntry> audit;
  // Nodes each job must never be placed on, by spec (a scenario's `exclude`); empty
  // or shorter than `specs`: none.
  std::vector<std::vector<std::string>> excluded_nodes;
};
struct CancelJob {
  JobId id = 0;
  std::string actor;
};
struct HoldJob {
  JobId id = 0;
  bool held = true;  // false: release
  std::string actor;
};
struct ReportCheckpoint {
  JobId id = 0;
  std::string path;
  int64_t step = 0;
  Duration write_duration{0};
  std::string actor;
};
// Asks every running rank to save a checkpoint now (the `checkpoint` command).
struct RequestCheckpoint {
  JobId id = 0;
  std::string why;
  std::string actor;
};
// Preempts the Running job and adds `node` to those it must not use again.
struct RequeueExcluding {
  JobId id = 0;
  std::string node;
  std::string why;
  std::string actor;
};
// Queues a `profile` command for each of `ranks` of attempt `attempt`.
struct SendProfile {
  JobId id = 0;
  int32_t attempt = 0;
  std::vector<int32_t> ranks;
  std::string profile_id;
  int32_t steps = 0;
};
// Cordon (no new work), drain (no new work, its gangs preempted), uncordon (Ready); a
// simulator may set any state. `reason` (optional) replaces "<verb> by <actor>".
struct SetNodeState {
  std::string node;
  NodeState state = NodeState::kReady;
  std::string actor;
  std::string reason;
  // Draining also moves the gangs running on the node off it, as preemptions (the
  // server's `nodes drain`). A scenario's `node_state` sets the state alone, as the
  // scheduler sees it: what runs there stays until it ends (docs/scheduler.md).
  bool evict = true;
};
// Gives up every gang with a live rank on `node` (Lost; other ranks stopped; requeued
// when they are done).
struct NodeLost {
  std::string node;
  std::string why;
};
struct AgentRegistered {
  protocol::Registration registration;
};
struct AgentHeartbeat {
  protocol::Heartbeat heartbeat;
};
// Node timeouts, gangs given up after the grace, time limits, resends of unanswered
// starts. Cheap; the server calls it every second or so.
struct Tick {};
// Simulators: every rank of the job's open attempt runs / has exited with
// `exit_code` (or was killed by `signal`) / was stopped as it was told.
struct GangRunning {
  JobId id = 0;
};
struct GangExited {
  JobId id = 0;
  int32_t exit_code = 0;
  int32_t signal = 0;
};
// Tenancy (the caller authorizes).
struct EnsureTenant {
  std::string name;
  std::string actor;
};
struct SetTenantQuota {
  std::string name;
  int64_t guaranteed = 0;
  int64_t limit = 0;
  std::string actor;
};
// The Unix identity an existing tenant's ranks run as (-1, -1: the agent's own) and
// whether it may be root's; allow_root unset keeps it.
struct SetTenantIdentity {
  std::string name;
  int64_t uid = -1;
  int64_t gid = -1;
  std::optional<bool> allow_root;
  std::string actor;
};
struct PutQueue {
  Queue queue;
};
struct DeleteQueue {
  std::string tenant;
  std::string name;
};

using Event = std::variant<SubmitJobs, CancelJob, HoldJob, ReportCheckpoint, RequestCheckpoint,
                           RequeueExcluding, SendProfile, SetNodeState, NodeLost, AgentRegistered,
                           AgentHeartbeat, Tick, GangRunning, GangExited, EnsureTenant,
                           SetTenantQuota, SetTenantIdentity, PutQueue, DeleteQueue>;

Result<Effects> Apply(ClusterState& state, const Event& event, Timestamp now);

// The decisions of a pass run on `copy` (SnapshotBuilder::SyncCopy), or on the
// builder's own snapshot when `copy` is nullptr. Each is checked against the state as
// it is now: a bind only for a job still Pending as the pass saw it, onto nodes still
// Ready and GPUs still free; a preemption only of a job still Running for a job still
// Pending. A decision that no longer holds is dropped and the state marked dirty.
Result<Effects> ApplyDecisions(ClusterState& state, const sched::Decisions& decisions,
                               const SnapshotCopy* copy, Timestamp now);

// Rebuilds `state` from what a store holds (Store::LoadAll): jobs with the ranks of
// their open attempts (states unknown until their agents report), nodes (their agents
// given node_timeout from `now` to come back), tenancy. Returns the batch that seeds an
// empty store (the default tenant, queue and priority classes) and requeues jobs left
// Admitted; the caller commits it before acting.
store::WriteBatch Load(ClusterState& state, store::StoredState stored, Timestamp now);

// Queues `command` for `node`'s agent (no-op when it is not connected); used by the
// server for commands outside the lifecycle (faults).
void Push(ClusterState& state, const std::string& node, protocol::Command command,
          Effects& effects);

// The ranks of `job`'s attempt `a`, laid out as the state header says.
std::vector<Rank> MakeRanks(const Job& job, const Attempt& a);
// The start command's task for rank `r` of `e`'s gang: argv, environment (torchrun's
// and Trainyard's), GPUs.
protocol::TaskStart BuildStart(const ClusterState& state, const JobEntry& e, const Rank& r);

}  // namespace trainyard::lifecycle
