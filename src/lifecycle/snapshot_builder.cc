#include "lifecycle/snapshot_builder.h"

#include <algorithm>

#include "core/status.h"
#include "sched/las.h"
#include "sched/retry.h"

namespace trainyard::lifecycle {
namespace {

constexpr int64_t kWholeGpuMilli = 1000;

// Thousandths of a GPU an attempt of `replicas` replicas of `per_replica` holds; a
// job of no GPUs counts as one GPU.
int64_t WeightMilli(const Resources& per_replica, int64_t replicas) {
  const bool share =
      per_replica.gpus == 1 && per_replica.gpu_milli > 0 && per_replica.gpu_milli < kWholeGpuMilli;
  const int64_t per = share ? per_replica.gpu_milli : per_replica.gpus * kWholeGpuMilli;
  const int64_t total = per * std::max<int64_t>(replicas, 0);
  return total > 0 ? total : kWholeGpuMilli;
}

Duration Service(Duration held, int64_t weight_milli) {
  return Duration(held.count() * weight_milli / kWholeGpuMilli);
}

// Service of the attempts that have ended.
Duration EndedService(const Job& job) {
  Duration sum{0};
  for (const Attempt& a : job.attempts) {
    if (!a.end_time) continue;
    sum += Service(std::max(Duration(0), *a.end_time - a.start_time),
                   WeightMilli(job.spec.resources, static_cast<int64_t>(a.nodes.size())));
  }
  return sum;
}

int32_t PriorityOf(const PriorityClass* pc, bool las, Duration attained) {
  const int32_t value = pc ? pc->value : 0;
  return las ? sched::LasPriority(value, attained) : value;
}

template <typename T>
void SwapRemove(std::vector<T>& v, size_t pos) {
  if (pos + 1 != v.size()) v[pos] = std::move(v.back());
  v.pop_back();
}

}  // namespace

Duration AttainedService(const Job& job, Timestamp now) {
  Duration sum = EndedService(job);
  if (const Attempt* a = job.CurrentAttempt()) {
    sum += Service(std::max(Duration(0), now - a->start_time),
                   WeightMilli(job.spec.resources, static_cast<int64_t>(a->nodes.size())));
  }
  return sum;
}

sched::PendingJob PendingView(const Job& job, const PriorityClass* pc,
                              const sched::Policy& policy) {
  sched::PendingJob p;
  p.id = job.id;
  p.name = job.spec.name;
  p.tenant = job.spec.tenant;
  p.queue = job.spec.queue;
  p.attained_service = EndedService(job);
  p.priority = PriorityOf(pc, policy.ordering == "las", p.attained_service);
  p.preemptible = pc ? pc->preemptible : true;
  p.replicas = job.spec.replicas;
  p.min_replicas = job.spec.min_replicas;
  p.per_replica = job.spec.resources;
  p.topology = job.spec.topology;
  p.submit_time = job.submit_time;
  p.eligible_time = sched::EligibleTime(job);
  p.time_limit = job.spec.time_limit;
  p.excluded_nodes = sched::ExcludedNodes(job);
  for (const DataSpec& d : job.spec.data) {
    if (d.stage == DataStage::kLocal) p.data_versions.push_back(d.version);
  }
  p.held = job.held;
  return p;
}

std::vector<sched::Placement> PlacementOf(const Attempt& a) {
  std::vector<sched::Placement> out;
  out.reserve(a.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    out.push_back({a.nodes[i], i < a.gpus.size() ? a.gpus[i] : std::vector<int>{}});
  }
  return out;
}

sched::RunningJob RunningView(const Job& job, const PriorityClass* pc, const sched::Policy& policy,
                              bool preempting, Timestamp now) {
  sched::RunningJob r;
  const Attempt* a = job.CurrentAttempt();
  TY_CHECK_MSG(a != nullptr, "RunningView of a job without an open attempt");
  r.id = job.id;
  r.tenant = job.spec.tenant;
  r.queue = job.spec.queue;
  r.priority = PriorityOf(pc, policy.ordering == "las", AttainedService(job, now));
  r.preemptible = pc ? pc->preemptible : true;
  r.per_replica = job.spec.resources;
  r.replicas = PlacementOf(*a);
  r.start_time = a->start_time;
  if (job.checkpoint && job.checkpoint->completed_at > a->start_time) {
    r.last_checkpoint = job.checkpoint->completed_at;
  }
  r.time_limit = job.spec.time_limit;
  r.preempting = preempting;
  return r;
}

// --- SnapshotCopy ---------------------------------------------------------------------

SnapshotCopy::SnapshotCopy() = default;
SnapshotCopy::~SnapshotCopy() = default;

uint64_t SnapshotCopy::Version(JobId id) const {
  auto it = pending_pos_.find(id);
  return it == pending_pos_.end() ? 0 : pending_version_[it->second];
}

// --- SnapshotBuilder --------------------------------------------------------------------

SnapshotBuilder::SnapshotBuilder(sched::Policy policy,
                                 const std::map<std::string, PriorityClass>* classes,
                                 bool keep_index)
    : policy_(std::move(policy)),
      las_(policy_.ordering == "las"),
      classes_(classes),
      keep_index_(keep_index) {}

SnapshotBuilder::~SnapshotBuilder() = default;

const PriorityClass* SnapshotBuilder::ClassOf(const Job& job) const {
  if (classes_ == nullptr) return nullptr;
  auto it = classes_->find(job.spec.priority);
  return it == classes_->end() ? nullptr : &it->second;
}

void SnapshotBuilder::StructureChanged() {
  ++structure_generation_;
  index_.reset();  // rebuilt from the new structure when next asked for
}

void SnapshotBuilder::EnsureIndex() {
  if (keep_index_ && !index_) index_ = std::make_unique<sched::SnapshotIndex>(snap_);
}

void SnapshotBuilder::SetNodes(std::vector<Node> nodes) {
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const Node& a, const Node& b) { return a.name < b.name; });
  snap_.nodes = std::move(nodes);
  node_pos_.clear();
  for (size_t i = 0; i < snap_.nodes.size(); ++i) node_pos_[snap_.nodes[i].name] = i;
  StructureChanged();
}

void SnapshotBuilder::PutNode(const Node& node) {
  auto it = node_pos_.find(node.name);
  if (it != node_pos_.end()) {
    Node& have = snap_.nodes[it->second];
    if (have == node) return;
    const bool state_only = [&] {
      Node probe = node;
      probe.state = have.state;
      probe.state_reason = have.state_reason;
      return probe == have;
    }();
    if (state_only) {
      SetNodeState(node.name, node.state);
      have.state_reason = node.state_reason;
      changed_node_states_.insert(node.name);
      return;
    }
    have = node;
    StructureChanged();
    return;
  }
  auto pos = std::lower_bound(snap_.nodes.begin(), snap_.nodes.end(), node.name,
                              [](const Node& n, const std::string& name) { return n.name < name; });
  snap_.nodes.insert(pos, node);
  node_pos_.clear();
  for (size_t i = 0; i < snap_.nodes.size(); ++i) node_pos_[snap_.nodes[i].name] = i;
  StructureChanged();
}

void SnapshotBuilder::SetNodeState(const std::string& name, NodeState state) {
  auto it = node_pos_.find(name);
  if (it == node_pos_.end()) return;
  Node& n = snap_.nodes[it->second];
  if (n.state == state) return;
  n.state = state;
  if (index_) index_->NodeStateChanged(it->second);
  changed_node_states_.insert(name);
}

void SnapshotBuilder::SetQueues(std::vector<Queue> queues) {
  if (queues == snap_.queues) return;
  snap_.queues = std::move(queues);
  StructureChanged();
}

void SnapshotBuilder::Reflect(const Job& job, bool preempting, Timestamp now) {
  if (job.CurrentAttempt() != nullptr) {
    RemovePending(job.id);
    PutRunning(RunningView(job, ClassOf(job), policy_, preempting, now), job, now);
  } else if (job.state == JobState::kPending) {
    RemoveRunning(job.id);
    PutPending(PendingView(job, ClassOf(job), policy_));
  } else {
    Forget(job.id);
  }
}

void SnapshotBuilder::Forget(JobId id) {
  RemovePending(id);
  RemoveRunning(id);
}

void SnapshotBuilder::PutPending(sched::PendingJob view) {
  auto it = pending_pos_.find(view.id);
  if (it != pending_pos_.end()) {
    if (snap_.pending[it->second] == view) return;
    snap_.pending[it->second] = std::move(view);
    pending_version_[it->second] = next_version_++;
    changed_pending_.insert(snap_.pending[it->second].id);
    return;
  }
  const JobId id = view.id;
  pending_pos_[id] = snap_.pending.size();
  snap_.pending.push_back(std::move(view));
  pending_version_.push_back(next_version_++);
  changed_pending_.insert(id);
}

void SnapshotBuilder::RemovePending(JobId id) {
  auto it = pending_pos_.find(id);
  if (it == pending_pos_.end()) return;
  const size_t pos = it->second;
  pending_pos_.erase(it);
  if (pos + 1 != snap_.pending.size()) pending_pos_[snap_.pending.back().id] = pos;
  SwapRemove(snap_.pending, pos);
  SwapRemove(pending_version_, pos);
  changed_pending_.insert(id);
}

void SnapshotBuilder::PutRunning(sched::RunningJob view, const Job& job, Timestamp now) {
  auto it = running_pos_.find(view.id);
  const JobId id = view.id;
  if (it != running_pos_.end()) {
    sched::RunningJob& have = snap_.running[it->second];
    if (have == view) return;
    // The index follows placements; a change of anything else (priority, the
    // preempting flag, the last checkpoint) leaves it alone.
    const bool placement_changed = have.replicas != view.replicas ||
                                   !(have.per_replica == view.per_replica) ||
                                   have.tenant != view.tenant || have.queue != view.queue ||
                                   have.preempting != view.preempting;
    if (placement_changed && index_) index_->RunningRemoved(have);
    have = std::move(view);
    if (placement_changed && index_) index_->RunningAdded(have);
  } else {
    running_pos_[id] = snap_.running.size();
    snap_.running.push_back(std::move(view));
    if (index_) index_->RunningAdded(snap_.running.back());
  }
  changed_running_.insert(id);
  if (las_) {
    const Attempt* a = job.CurrentAttempt();
    const int64_t weight = WeightMilli(job.spec.resources, static_cast<int64_t>(a->nodes.size()));
    ScheduleLasRise(id, AttainedService(job, now), weight, now);
    LasBasis& b = las_basis_[id];
    b.attained_at_start = EndedService(job);
    b.weight_milli = weight;
    b.start = a->start_time;
    const PriorityClass* pc = ClassOf(job);
    b.class_value = pc ? pc->value : 0;
  }
}

void SnapshotBuilder::RemoveRunning(JobId id) {
  auto it = running_pos_.find(id);
  if (it == running_pos_.end()) return;
  const size_t pos = it->second;
  if (index_) index_->RunningRemoved(snap_.running[pos]);
  running_pos_.erase(it);
  if (pos + 1 != snap_.running.size()) running_pos_[snap_.running.back().id] = pos;
  SwapRemove(snap_.running, pos);
  changed_running_.insert(id);
  las_basis_.erase(id);
}

void SnapshotBuilder::ScheduleLasRise(JobId id, Duration attained, int64_t weight_milli,
                                      Timestamp now) {
  const int level = sched::LasLevel(attained);
  const Duration bound = sched::LasNextBound(level);
  const uint64_t generation = ++las_generation_;
  las_basis_[id].generation = generation;
  if (bound.count() == 0) return;  // at the last level: it never rises again
  // The least time after `now` at which the service reaches the bound.
  const int64_t missing = bound.count() - attained.count();
  const int64_t ms = (missing * kWholeGpuMilli + weight_milli - 1) / weight_milli;
  las_rises_.push({now + Duration(std::max<int64_t>(ms, 0)), id, generation});
}

void SnapshotBuilder::ApplyLasRises(Timestamp now) {
  while (!las_rises_.empty() && las_rises_.top().at <= now) {
    const LasRise rise = las_rises_.top();
    las_rises_.pop();
    auto b = las_basis_.find(rise.job);
    if (b == las_basis_.end() || b->second.generation != rise.generation) continue;
    auto pos = running_pos_.find(rise.job);
    if (pos == running_pos_.end()) continue;
    const Duration attained =
        b->second.attained_at_start +
        Service(std::max(Duration(0), now - b->second.start), b->second.weight_milli);
    sched::RunningJob& r = snap_.running[pos->second];
    r.priority = sched::LasPriority(b->second.class_value, attained);
    changed_running_.insert(rise.job);
    ScheduleLasRise(rise.job, attained, b->second.weight_milli, now);
  }
}

const sched::Snapshot& SnapshotBuilder::Prepare(Timestamp now) {
  snap_.now = now;
  if (las_) ApplyLasRises(now);
  EnsureIndex();
  return snap_;
}

sched::SnapshotIndex* SnapshotBuilder::index() {
  EnsureIndex();
  return index_.get();
}

uint64_t SnapshotBuilder::PendingVersion(JobId id) const {
  auto it = pending_pos_.find(id);
  return it == pending_pos_.end() ? 0 : pending_version_[it->second];
}

const sched::RunningJob* SnapshotBuilder::FindRunning(JobId id) const {
  auto it = running_pos_.find(id);
  return it == running_pos_.end() ? nullptr : &snap_.running[it->second];
}

const sched::PendingJob* SnapshotBuilder::FindPending(JobId id) const {
  auto it = pending_pos_.find(id);
  return it == pending_pos_.end() ? nullptr : &snap_.pending[it->second];
}

void SnapshotBuilder::SyncCopy(SnapshotCopy& copy, Timestamp now) {
  snap_.now = now;
  if (las_) ApplyLasRises(now);
  sched::Snapshot& c = copy.snap_;
  c.now = now;
  if (!copy.synced_ || copy.synced_generation_ != structure_generation_) {
    // Everything: the nodes or queues changed shape (or this is the first sync).
    c = snap_;
    copy.pending_pos_ = pending_pos_;
    copy.running_pos_ = running_pos_;
    copy.pending_version_ = pending_version_;
    copy.index_.reset();
    if (keep_index_) copy.index_ = std::make_unique<sched::SnapshotIndex>(c);
    copy.synced_generation_ = structure_generation_;
    copy.synced_ = true;
    changed_pending_.clear();
    changed_running_.clear();
    changed_node_states_.clear();
    return;
  }
  for (const std::string& name : changed_node_states_) {
    auto it = node_pos_.find(name);
    if (it == node_pos_.end()) continue;
    Node& n = c.nodes[it->second];
    n = snap_.nodes[it->second];
    if (copy.index_) copy.index_->NodeStateChanged(it->second);
  }
  // The running jobs stay in the builder's order: a pass's choices among equals (which
  // victims, which placement) follow it, and a copy decides as the builder would. When
  // jobs came or went, the list (a few thousand at most) is copied whole.
  const bool running_reordered = std::any_of(
      changed_running_.begin(), changed_running_.end(),
      [&](JobId id) { return copy.running_pos_.contains(id) != running_pos_.contains(id); });
  if (running_reordered) {
    if (copy.index_) {
      for (const sched::RunningJob& r : c.running) copy.index_->RunningRemoved(r);
    }
    c.running = snap_.running;
    copy.running_pos_ = running_pos_;
    if (copy.index_) {
      for (const sched::RunningJob& r : c.running) copy.index_->RunningAdded(r);
    }
    changed_running_.clear();
  }
  for (JobId id : changed_running_) {
    auto have = copy.running_pos_.find(id);
    auto want = running_pos_.find(id);
    if (have != copy.running_pos_.end()) {
      sched::RunningJob& old = c.running[have->second];
      if (want != running_pos_.end() && old == snap_.running[want->second]) continue;
      if (copy.index_) copy.index_->RunningRemoved(old);
      if (want != running_pos_.end()) {
        old = snap_.running[want->second];
        if (copy.index_) copy.index_->RunningAdded(old);
        continue;
      }
      const size_t pos = have->second;
      copy.running_pos_.erase(have);
      if (pos + 1 != c.running.size()) copy.running_pos_[c.running.back().id] = pos;
      SwapRemove(c.running, pos);
    } else if (want != running_pos_.end()) {
      copy.running_pos_[id] = c.running.size();
      c.running.push_back(snap_.running[want->second]);
      if (copy.index_) copy.index_->RunningAdded(c.running.back());
    }
  }
  for (JobId id : changed_pending_) {
    auto have = copy.pending_pos_.find(id);
    auto want = pending_pos_.find(id);
    if (have != copy.pending_pos_.end()) {
      if (want != pending_pos_.end()) {
        c.pending[have->second] = snap_.pending[want->second];
        copy.pending_version_[have->second] = pending_version_[want->second];
        continue;
      }
      const size_t pos = have->second;
      copy.pending_pos_.erase(have);
      if (pos + 1 != c.pending.size()) copy.pending_pos_[c.pending.back().id] = pos;
      SwapRemove(c.pending, pos);
      SwapRemove(copy.pending_version_, pos);
    } else if (want != pending_pos_.end()) {
      copy.pending_pos_[id] = c.pending.size();
      c.pending.push_back(snap_.pending[want->second]);
      copy.pending_version_.push_back(pending_version_[want->second]);
    }
  }
  changed_pending_.clear();
  changed_running_.clear();
  changed_node_states_.clear();
}

}  // namespace trainyard::lifecycle
