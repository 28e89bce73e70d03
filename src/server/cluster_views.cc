// The Cluster's reads: jobs (from the state, then the store), nodes, queues, tenants,
// priority classes, metrics and the snapshot a pass would see. Each reads what it
// needs under the state's mutex, never a whole listing to answer for one entity.
#include <algorithm>
#include <iterator>

#include "core/names.h"
#include "server/cluster_impl.h"

namespace trainyard::server {
namespace {

// Scheduling pass durations' bucket bounds, seconds.
const std::vector<double> kPassBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,    1,     2.5,  5,     10};

// Adds what job `id`'s open attempt holds on the node of `v` to it.
void AddJobOnNode(NodeView& v, JobId id, const Job& job, const sched::Placement& p) {
  v.gpus_used += static_cast<int64_t>(p.gpus.size());
  std::vector<JobId>& on_gpu = v.gpu_jobs;
  for (int32_t g : p.gpus) {
    if (g < 0) continue;
    if (on_gpu.size() <= static_cast<size_t>(g)) on_gpu.resize(static_cast<size_t>(g) + 1, 0);
    on_gpu[static_cast<size_t>(g)] = id;
  }
  if (v.jobs.empty() || v.jobs.back() != id) {
    v.jobs.push_back(id);
    v.job_tenants.push_back(job.spec.tenant);
  }
}

}  // namespace

// --- jobs -------------------------------------------------------------------------------

JobView Cluster::Impl::ViewLocked(const lifecycle::JobEntry& e) const {
  JobView v;
  v.job = e.job;
  if (const Attempt* a = e.job.CurrentAttempt()) v.placement = lifecycle::PlacementOf(*a);
  if (e.gang) {
    for (const lifecycle::Rank& r : e.gang->ranks) {
      v.ranks.push_back({r.rank, r.replica, r.node, r.gpus,
                         std::string(lifecycle::RankStateName(r.state)), r.exit_code, r.signal,
                         r.message});
    }
    if (e.gang->stopping != lifecycle::Stopping::kNone) v.stopping = e.gang->stop_message;
  }
  return v;
}

Result<JobView> Cluster::Impl::GetJob(JobId id) {
  {
    std::lock_guard lk(mu_);
    auto it = state_.jobs.find(id);
    if (it != state_.jobs.end()) return ViewLocked(it->second);
  }
  TY_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
  if (!job) return NotFound("job " + std::to_string(id) + " does not exist");
  JobView v;
  v.job = std::move(*job);
  return v;
}

Result<store::JobPage> Cluster::Impl::ListJobs(const ListJobsRequest& req) {
  const store::JobFilter& f = req.filter;
  const size_t limit = static_cast<size_t>(std::max(req.limit, 1));
  const bool descending = req.order == store::JobOrder::kDescending;
  auto wanted = [&](JobState s) {
    return f.states.empty() || std::find(f.states.begin(), f.states.end(), s) != f.states.end();
  };
  // The answer is the first `limit` matching ids past the cursor in the order asked
  // for: the first `limit` of each source below, merged, hold them all.
  //
  // Jobs that have not finished are all in the state (with their live Pending reasons):
  // read them there, under mu_ for the time of `limit` + 1 matches. Finished ones are
  // only in the store; they are read after, so a job that finishes in between is seen
  // twice (the stored record wins), never not at all.
  std::vector<Job> jobs;
  bool more = false;
  {
    std::lock_guard lk(mu_);
    // Adds the job if it matches; false once `limit` are in and another matches.
    auto add = [&](const Job& j) {
      if (!wanted(j.state) || (!f.tenant.empty() && j.spec.tenant != f.tenant) ||
          (!f.queue.empty() && j.spec.queue != f.queue) ||
          !std::string_view(j.spec.name).starts_with(f.name_prefix)) {
        return true;
      }
      if (jobs.size() == limit) {
        more = true;
        return false;
      }
      jobs.push_back(j);
      return true;
    };
    const auto& active = state_.jobs;
    if (!descending) {
      for (auto it = active.upper_bound(req.after_id); it != active.end() && add(it->second.job);
           ++it) {
      }
    } else {
      auto end = req.after_id == 0 ? active.end() : active.lower_bound(req.after_id);
      for (auto it = std::make_reverse_iterator(end); it != active.rend() && add(it->second.job);
           ++it) {
      }
    }
  }
  const size_t unfinished = jobs.size();
  // One query per finished state, each a range of the store's (state, id) index.
  for (JobState s : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    if (!wanted(s)) continue;
    store::JobFilter finished = f;
    finished.states = {s};
    TY_ASSIGN_OR_RETURN(store::JobPage page, store_->ListJobs(finished, req.after_id,
                                                              static_cast<int>(limit), req.order));
    more = more || page.next_after_id.has_value();
    std::move(page.jobs.begin(), page.jobs.end(), std::back_inserter(jobs));
  }
  // In order, each id once: a stored record (after `unfinished`) replaces the one read
  // from memory.
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return descending ? jobs[a].id > jobs[b].id : jobs[a].id < jobs[b].id;
  });
  store::JobPage out;
  for (size_t i : order) {
    if (!out.jobs.empty() && out.jobs.back().id == jobs[i].id) {
      if (i >= unfinished) out.jobs.back() = std::move(jobs[i]);
      continue;
    }
    if (out.jobs.size() == limit) {
      more = true;
      break;
    }
    out.jobs.push_back(std::move(jobs[i]));
  }
  if (more && !out.jobs.empty()) out.next_after_id = out.jobs.back().id;
  return out;
}

Result<store::EventPage> Cluster::Impl::ListEvents(JobId id, int64_t after_seq, int limit) {
  bool active = false;
  {
    std::lock_guard lk(mu_);
    active = state_.jobs.contains(id);
  }
  if (!active) {
    TY_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
    if (!job) return NotFound("job " + std::to_string(id) + " does not exist");
  }
  return store_->ListEvents(id, after_seq, limit);
}

// --- nodes ------------------------------------------------------------------------------

NodeView Cluster::Impl::NodeViewLocked(const std::string& name, const lifecycle::NodeEntry& n) {
  NodeView v;
  v.node = n.node;
  v.node.state = lifecycle::EffectiveState(n);
  if (!n.connected) {
    v.node.state_reason =
        n.node.state == NodeState::kNotReady ? n.node.state_reason : "agent not connected";
  } else if (!n.healthy) {
    v.node.state_reason = n.health_message;
  }
  v.address = n.address;
  v.simulated = n.simulated;
  v.connected = n.connected;
  v.last_heartbeat = n.last_heartbeat;
  v.health_check = n.health_check;
  v.limits = n.limits;
  v.containers = n.containers;
  v.datasets = n.datasets;
  if (auto x = extras_.find(name); x != extras_.end()) {
    v.telemetry = x->second.telemetry;
    v.links = x->second.links;
    v.disks = x->second.disks;
    for (const InjectedFault& f : x->second.faults) v.faults.push_back(f.fault);
  }
  return v;
}

std::vector<NodeView> Cluster::Impl::ListNodes() {
  std::lock_guard lk(mu_);
  std::vector<NodeView> out;
  std::map<std::string, size_t> pos;
  for (const auto& [name, n] : state_.nodes) {
    pos[name] = out.size();
    out.push_back(NodeViewLocked(name, n));
  }
  for (const auto& [id, e] : state_.jobs) {
    const Attempt* a = e.job.CurrentAttempt();
    if (a == nullptr) continue;
    for (const sched::Placement& p : lifecycle::PlacementOf(*a)) {
      auto it = pos.find(p.node);
      if (it != pos.end()) AddJobOnNode(out[it->second], id, e.job, p);
    }
  }
  return out;
}

Result<NodeView> Cluster::Impl::GetNode(const std::string& name) {
  std::lock_guard lk(mu_);
  const lifecycle::NodeEntry* n = state_.FindNode(name);
  if (n == nullptr) return NotFound("node " + QuoteForMessage(name) + " does not exist");
  NodeView v = NodeViewLocked(name, *n);
  for (const auto& [id, e] : state_.jobs) {
    const Attempt* a = e.job.CurrentAttempt();
    if (a == nullptr) continue;
    for (size_t r = 0; r < a->nodes.size(); ++r) {
      if (a->nodes[r] != name) continue;
      AddJobOnNode(v, id, e.job,
                   {a->nodes[r], r < a->gpus.size() ? a->gpus[r] : std::vector<int>{}});
    }
  }
  return v;
}

// --- tenancy ----------------------------------------------------------------------------

std::vector<QueueView> Cluster::Impl::ListQueues() {
  std::lock_guard lk(mu_);
  std::map<std::pair<std::string, std::string>, QueueView> views;
  for (const auto& [key, q] : state_.queues) views[key].queue = q;
  for (const auto& [id, e] : state_.jobs) {
    auto it = views.find({e.job.spec.tenant, e.job.spec.queue});
    if (it == views.end()) continue;
    if (const Attempt* a = e.job.CurrentAttempt()) {
      it->second.gpus_in_use += e.job.spec.resources.gpus * static_cast<int64_t>(a->nodes.size());
      ++it->second.running_jobs;
    } else if (e.job.state == JobState::kPending) {
      ++it->second.pending_jobs;
    }
  }
  std::vector<QueueView> out;
  for (auto& [key, v] : views) {
    v.gpus_borrowed = std::max<int64_t>(0, v.gpus_in_use - v.queue.guaranteed_gpus);
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<Tenant> Cluster::Impl::ListTenants() {
  std::lock_guard lk(mu_);
  std::vector<Tenant> out;
  for (const auto& [n, t] : state_.tenants) out.push_back(t);
  return out;
}

std::vector<PriorityClass> Cluster::Impl::ListPriorityClasses() {
  std::lock_guard lk(mu_);
  std::vector<PriorityClass> out;
  for (const auto& [n, pc] : state_.classes) out.push_back(pc);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.value > b.value; });
  return out;
}

// --- metrics and snapshots --------------------------------------------------------------

ClusterMetrics Cluster::Impl::Metrics() {
  ClusterMetrics out;
  {
    std::lock_guard lk(metrics_mu_);
    out = metrics_;
    out.pass_counts = pass_counts_;
    out.pass_seconds_sum = pass_seconds_sum_;
  }
  out.pass_bounds = kPassBounds;
  std::lock_guard lk(mu_);
  for (const auto& [id, e] : state_.jobs) {
    ++out.jobs[{e.job.spec.tenant, e.job.spec.queue, std::string(JobStateName(e.job.state))}];
  }
  return out;
}

void Cluster::Impl::ObservePassDuration(double seconds) {
  std::lock_guard lk(metrics_mu_);
  if (pass_counts_.empty()) pass_counts_.assign(kPassBounds.size() + 1, 0);
  size_t i = 0;
  while (i < kPassBounds.size() && seconds > kPassBounds[i]) ++i;
  ++pass_counts_[i];
  pass_seconds_sum_ += seconds;
}

sched::Snapshot Cluster::Impl::BuildSnapshot() {
  std::lock_guard lk(mu_);
  return state_.snapshot.Prepare(clock_->Now());
}

}  // namespace trainyard::server
