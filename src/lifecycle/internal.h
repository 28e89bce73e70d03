// Private to lifecycle/: what the files implementing Apply share.
//
// An Apply works through one Ctx: it changes the state, records the change (when the
// options say to) in the Effects' batch, queues commands, and remembers which jobs and
// nodes it touched so that Finish shows them to the snapshot builder once, at the end.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "lifecycle/lifecycle.h"

namespace trainyard::lifecycle::internal {

// A job's reason starts with these while its gang is stopped for a cancel or its time
// limit, so that a restarted server knows why (Load).
inline constexpr std::string_view kCancelPrefix = "cancel requested";
inline constexpr std::string_view kTimeLimitPrefix = "time limit reached";

class Ctx {
 public:
  Ctx(ClusterState& state, Timestamp now, Effects& effects) : s(state), now(now), fx(effects) {}

  ClusterState& s;
  const Timestamp now;
  Effects& fx;

  bool record() const { return s.options.record; }
  // Marks the job for the snapshot builder (and the pass: something changed).
  void Touch(JobId id) { touched_jobs_.insert(id); }
  void TouchNode(const std::string& name) { touched_nodes_.insert(name); }
  void PutJob(const Job& job) {
    if (record()) fx.batch.PutJob(job);
  }
  void AppendEvent(JobId id, const std::string& actor, std::string kind, std::string message) {
    if (record()) fx.batch.AppendEvent(id, now, actor, std::move(kind), std::move(message));
  }
  // Queues `c` for `node`'s agent, when agents are on and it is connected.
  void Push(const std::string& node, protocol::Command c);
  void Dirty() {
    s.dirty = true;
    fx.may_schedule = true;
  }
  // Shows every touched job and node to the snapshot builder.
  void Finish();

 private:
  std::set<JobId> touched_jobs_;
  std::set<std::string> touched_nodes_;
};

// A job's gang is on its way out (stopping, or the job is Preempting).
bool Leaving(const JobEntry& e);
// What the scheduler must not preempt: not Running yet, or already leaving.
bool PreemptingForScheduler(const JobEntry& e);

// Persists the node when its effective state (or record) changed; `reason` is its
// state reason when not Ready.
void SyncNode(Ctx& c, NodeEntry& n, const std::string& reason);
// A new health-check result of the node: a failing one cordons a Ready node (the
// check's output as the reason), a passing one uncordons a node the check cordoned.
void ApplyHealthCheck(Ctx& c, NodeEntry& n, const std::optional<protocol::HealthCheckResult>& hc);

// Sends stop (or withdraws a start not yet delivered) to every live rank.
void StopRanks(Ctx& c, JobEntry& e);
// Starts stopping the gang for `why`; kLost and kTimeLimit also record it on the job.
Status StopGang(Ctx& c, JobEntry& e, Stopping why, std::string message);
// Running -> Preempting, with the notice to every live rank.
Status Preempt(Ctx& c, JobEntry& e, const std::string& why, const std::string& actor);
// Queues a `preempt` command (the spec's notice signal, its grace) for every live rank.
void SendPreemptNotices(Ctx& c, const JobEntry& e);
// Moves the job on from what its ranks report: Running when all run; stop the gang
// when one fails; close the attempt when all are done (the job may leave the state).
Status Evaluate(Ctx& c, JobId id);
// Gives up the gangs with live ranks on `node` (ranks Gone, gang Lost, evaluated).
Status GiveUpNode(Ctx& c, const std::string& node, const std::string& why);

// Staging (staging.cc, docs/datasets.md). Whether a job's ranks wait for data staged
// on their nodes before they start.
bool NeedsStaging(const JobSpec& spec);
// Asks each node of the gang to stage the data (a `stage` command per node).
void SendStage(Ctx& c, const JobEntry& e, const std::string& only_node = "");
// Sends the starts once every node of the gang holds the data; fails the attempt when a
// node could not stage it; else says how far staging is in the job's reason.
Status AdvanceStaging(Ctx& c, JobEntry& e);

// Wraps an error of a transition the lifecycle made itself (a broken invariant).
Status Broken(const Status& s);

// Per-event implementations (lifecycle.cc, agents.cc, requests.cc).
Status ApplySubmit(Ctx& c, const SubmitJobs& e);
Status ApplyCancel(Ctx& c, const CancelJob& e);
Status ApplyHold(Ctx& c, const HoldJob& e);
Status ApplyReportCheckpoint(Ctx& c, const ReportCheckpoint& e);
Status ApplyRequestCheckpoint(Ctx& c, const RequestCheckpoint& e);
Status ApplyRequeueExcluding(Ctx& c, const RequeueExcluding& e);
Status ApplySendProfile(Ctx& c, const SendProfile& e);
Status ApplySetNodeState(Ctx& c, const SetNodeState& e);
Status ApplyNodeLost(Ctx& c, const NodeLost& e);
Status ApplyRegistered(Ctx& c, const AgentRegistered& e);
Status ApplyHeartbeat(Ctx& c, const AgentHeartbeat& e);
Status ApplyTick(Ctx& c, const Tick& e);
Status ApplyGangRunning(Ctx& c, const GangRunning& e);
Status ApplyGangExited(Ctx& c, const GangExited& e);
Status ApplyEnsureTenant(Ctx& c, const EnsureTenant& e);
Status ApplySetTenantQuota(Ctx& c, const SetTenantQuota& e);
Status ApplySetTenantIdentity(Ctx& c, const SetTenantIdentity& e);
Status ApplyPutQueue(Ctx& c, const PutQueue& e);
Status ApplyDeleteQueue(Ctx& c, const DeleteQueue& e);

}  // namespace trainyard::lifecycle::internal
