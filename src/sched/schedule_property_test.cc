// Property tests of sched::Schedule: invariants that must hold for every cluster,
// workload and policy, checked over thousands of random snapshots from fixed seeds
// (sched/testing.h). A failing case is shrunk (pending jobs, running jobs, nodes and
// queues dropped while the violation persists) and printed as a reproducer.
//
// TRAINYARD_PROP_CASES=N runs N snapshots instead of the default; TRAINYARD_PROP_SEED=S
// starts at seed S (to explore beyond the fixed ones).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sched/schedule.h"
#include "sched/testing.h"

namespace trainyard::sched {
namespace {

using std::chrono::minutes;

struct NamedPolicy {
  std::string name;
  Policy policy;
};

const std::vector<NamedPolicy>& Policies() {
  static const std::vector<NamedPolicy>* policies = [] {
    auto* out = new std::vector<NamedPolicy>();
    out->push_back({"default", Policy{}});
    Policy fifo;
    fifo.ordering = "fifo";
    fifo.backfill = false;
    out->push_back({"fifo-no-backfill", fifo});
    Policy best_fit;
    best_fit.placement = "best-fit";
    out->push_back({"best-fit", best_fit});
    Policy first_fit;
    first_fit.placement = "first-fit";
    out->push_back({"first-fit", first_fit});
    Policy none;
    none.preemption = "none";
    out->push_back({"no-preemption", none});
    Policy several;
    several.reservations = 4;
    out->push_back({"4-reservations", several});
    Policy las;
    las.ordering = "las";
    out->push_back({"las", las});
    Policy short_first;
    short_first.ordering = "short-first";
    out->push_back({"short-first", short_first});
    return out;
  }();
  return *policies;
}

int64_t EnvOr(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

int CaseCount() { return static_cast<int>(EnvOr("TRAINYARD_PROP_CASES", 1000)); }
uint64_t FirstSeed() { return static_cast<uint64_t>(EnvOr("TRAINYARD_PROP_SEED", 1)); }

// A small random cluster and workload; the shape itself is drawn from the seed so that
// the cases cover tiny and crowded clusters, few and many leaves, with and without
// queues.
Snapshot RandomCase(uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull);
  ClusterShape c;
  // Sizes skew small (most cases are quick) with a tail of crowded ones.
  c.nodes = static_cast<int>(DrawBetween(rng, 1, DrawBetween(rng, 4, 40)));
  c.nodes_per_leaf = static_cast<int>(DrawBetween(rng, 1, 12));
  c.leaves_per_spine = 2;
  c.gpus_per_node = DrawChance(rng, 0.85) ? 8 : 4;
  std::vector<GpuModel> models = ClusterShape().models;
  c.models.clear();
  for (const GpuModel& m : models) {
    if (c.models.empty() || DrawChance(rng, 0.4)) c.models.push_back(m);
  }
  c.unready_fraction = 0.15 * DrawUnit(rng);
  c.permuted_gpu_order_fraction = 0.2;
  c.cpu_node_fraction = 0.05;
  if (DrawChance(rng, 0.3)) {  // CPUs and memory bind before GPUs do
    c.milli_cpus = 64'000;
    c.memory_bytes = int64_t{512} << 30;
  }
  WorkloadShape w;
  w.tenants = static_cast<int>(DrawBetween(rng, 1, 4));
  w.queues_per_tenant = static_cast<int>(DrawBetween(rng, 1, 3));
  w.define_queues = DrawChance(rng, 0.9);
  w.guaranteed_fraction = 0.2 + 0.8 * DrawUnit(rng);
  w.running_fill = DrawUnit(rng);
  w.pending = static_cast<int>(DrawBetween(rng, 1, DrawBetween(rng, 8, 60)));
  static constexpr int kMaxSizes[] = {8, 16, 32, 64, 128, 512};
  w.mix.max_gpus = kMaxSizes[DrawBelow(rng, 6)];
  w.mix.cpu_only_fraction = 0.03;
  w.mix.unknown_type_fraction = 0.02;
  w.mix.elastic_fraction = 0.2;
  w.mix.topology_fraction = 0.5;
  w.mix.hard_topology_fraction = 0.5;
  w.young_fraction = 0.2;
  w.preempting_fraction = 0.05;
  w.held_fraction = 0.03;
  w.backoff_fraction = 0.05;
  w.excluded_fraction = 0.1;
  w.unknown_queue_fraction = 0.02;
  return SyntheticSnapshot(c, w, rng());
}

// --- Facts about a snapshot and its decisions -------------------------------------------

struct Facts {
  explicit Facts(const Snapshot& s) : snap(s) {
    for (const Node& n : s.nodes) node[n.name] = &n;
    for (const PendingJob& j : s.pending) pending[j.id] = &j;
    for (const RunningJob& r : s.running) {
      running[r.id] = &r;
      for (const Placement& p : r.replicas) {
        if (!node.count(p.node)) continue;
        for (int g : p.gpus) busy[p.node].insert(g);
        cpu_used[p.node] += r.per_replica.milli_cpus;
        mem_used[p.node] += r.per_replica.memory_bytes;
      }
    }
    for (size_t q = 0; q < s.queues.size(); ++q) {
      queue_at[{s.queues[q].tenant, s.queues[q].name}] = static_cast<int>(q);
    }
    used_start.assign(s.queues.size(), 0);
    for (const RunningJob& r : s.running) {
      for (int a : Chain(r.tenant, r.queue)) used_start[a] += r.Gpus();
    }
  }

  // The queue and its ancestors; empty when the queue is unknown or queues are implicit.
  std::vector<int> Chain(const std::string& tenant, const std::string& queue) const {
    std::vector<int> out;
    auto it = queue_at.find({tenant, queue});
    if (it == queue_at.end()) return out;
    for (int q = it->second; q >= 0 && out.size() <= snap.queues.size();) {
      out.push_back(q);
      const Queue& qq = snap.queues[q];
      auto p = queue_at.find({qq.tenant, qq.parent});
      q = qq.parent.empty() || p == queue_at.end() || p->second == q ? -1 : p->second;
    }
    return out;
  }

  const Gpu* GpuOf(const std::string& node_name, int index) const {
    auto it = node.find(node_name);
    if (it == node.end()) return nullptr;
    for (const Gpu& g : it->second->gpus) {
      if (g.index == index) return &g;
    }
    return nullptr;
  }

  const Snapshot& snap;
  std::map<std::string, const Node*> node;
  std::map<JobId, const PendingJob*> pending;
  std::map<JobId, const RunningJob*> running;
  std::map<std::string, std::set<int>> busy;
  std::map<std::string, int64_t> cpu_used, mem_used;
  std::map<std::pair<std::string, std::string>, int> queue_at;
  std::vector<int64_t> used_start;  // GPUs per queue, its descendants included
};

int64_t BoundGpus(const PendingJob& j, const Bind& b) {
  return j.per_replica.gpus * static_cast<int64_t>(b.replicas.size());
}

// GPUs per queue (descendants included) after the binds.
std::vector<int64_t> UsedAfter(const Facts& f, const Decisions& d) {
  std::vector<int64_t> used = f.used_start;
  for (const Bind& b : d.binds) {
    auto it = f.pending.find(b.job);
    if (it == f.pending.end()) continue;
    for (int a : f.Chain(it->second->tenant, it->second->queue))
      used[a] += BoundGpus(*it->second, b);
  }
  return used;
}

using Violations = std::vector<std::string>;
using Checker = std::function<Violations(const Snapshot&, const Policy&, const Decisions&)>;

std::string J(JobId id) { return "job " + std::to_string(id); }

// Never over-commit; Ready nodes only; GPU type, memory, exclusions and hard topology.
Violations CheckPlacements(const Snapshot& s, const Policy&, const Decisions& d) {
  Violations v;
  Facts f(s);
  std::map<std::string, std::set<int>> taken = f.busy;
  std::map<std::string, int64_t> cpu = f.cpu_used, mem = f.mem_used;
  std::set<std::string> touched;
  for (const Bind& b : d.binds) {
    auto pj = f.pending.find(b.job);
    if (pj == f.pending.end()) {
      v.push_back("bind of unknown " + J(b.job));
      continue;
    }
    const PendingJob& j = *pj->second;
    std::set<std::string> leaves, domains, models;
    std::set<std::string> nodes;
    for (const Placement& p : b.replicas) {
      auto pn = f.node.find(p.node);
      if (pn == f.node.end()) {
        v.push_back(J(j.id) + " bound on unknown node " + p.node);
        continue;
      }
      const Node& n = *pn->second;
      nodes.insert(n.name);
      leaves.insert(n.topology.leaf);
      touched.insert(n.name);
      if (n.state != NodeState::kReady) {
        v.push_back(J(j.id) + " bound on node " + n.name + " which is " +
                    std::string(NodeStateName(n.state)));
      }
      if (std::find(j.excluded_nodes.begin(), j.excluded_nodes.end(), n.name) !=
          j.excluded_nodes.end()) {
        v.push_back(J(j.id) + " bound on its excluded node " + n.name);
      }
      for (int g : p.gpus) {
        const Gpu* gpu = f.GpuOf(n.name, g);
        if (gpu == nullptr) {
          v.push_back(J(j.id) + " bound on GPU " + std::to_string(g) + " which node " + n.name +
                      " does not have");
          continue;
        }
        if (!taken[n.name].insert(g).second) {
          v.push_back(J(j.id) + " bound on GPU " + n.name + "[" + std::to_string(g) +
                      "] which is already in use");
        }
        if (!GpuTypeMatches(j.per_replica.gpu_type, gpu->model)) {
          v.push_back(J(j.id) + " asks for " + j.per_replica.gpu_type + ", got " + gpu->model +
                      " on " + n.name);
        }
        if (gpu->memory_bytes < j.per_replica.gpu_memory_bytes) {
          v.push_back(J(j.id) + " asks for " + FormatMemory(j.per_replica.gpu_memory_bytes) +
                      " per GPU, got " + FormatMemory(gpu->memory_bytes) + " on " + n.name);
        }
        domains.insert(gpu->nvlink_domain);
        models.insert(gpu->model);
      }
      cpu[n.name] += j.per_replica.milli_cpus;
      mem[n.name] += j.per_replica.memory_bytes;
    }
    if (j.topology.hard) {
      switch (j.topology.constraint) {
        case TopologyConstraint::kSameNode:
          if (nodes.size() > 1)
            v.push_back(J(j.id) + " (hard same-node) spans " + std::to_string(nodes.size()) +
                        " nodes");
          break;
        case TopologyConstraint::kSameLeaf:
          if (leaves.size() > 1)
            v.push_back(J(j.id) + " (hard same-leaf) spans " + std::to_string(leaves.size()) +
                        " leaves");
          break;
        case TopologyConstraint::kSameNvlink:
          if (domains.size() > 1)
            v.push_back(J(j.id) + " (hard same-nvlink) spans " + std::to_string(domains.size()) +
                        " NVLink domains");
          break;
        case TopologyConstraint::kNone:
          break;
      }
    }
    if (models.size() > 1) v.push_back(J(j.id) + " mixes GPU models in one gang");
  }
  for (const std::string& name : touched) {
    const Node& n = *f.node.at(name);
    if (cpu[name] > n.milli_cpus) {
      v.push_back("node " + name + " CPUs over-committed: " + std::to_string(cpu[name]) + "m of " +
                  std::to_string(n.milli_cpus) + "m");
    }
    if (mem[name] > n.memory_bytes) {
      v.push_back("node " + name + " memory over-committed: " + FormatMemory(mem[name]) + " of " +
                  FormatMemory(n.memory_bytes));
    }
  }
  return v;
}

// Gangs are bound whole; every pending job gets exactly one outcome.
Violations CheckGangs(const Snapshot& s, const Policy&, const Decisions& d) {
  Violations v;
  Facts f(s);
  std::map<JobId, int> seen;
  for (const Bind& b : d.binds) {
    ++seen[b.job];
    auto pj = f.pending.find(b.job);
    if (pj == f.pending.end()) continue;
    const PendingJob& j = *pj->second;
    const int lo = std::max(1, std::min(j.min_replicas, j.replicas));
    const int hi = std::max(j.replicas, lo);
    const int n = static_cast<int>(b.replicas.size());
    if (n < lo || n > hi) {
      v.push_back(J(j.id) + " bound with " + std::to_string(n) + " replicas; wants " +
                  std::to_string(lo) + ".." + std::to_string(hi));
    }
    for (const Placement& p : b.replicas) {
      if (static_cast<int64_t>(p.gpus.size()) != j.per_replica.gpus) {
        v.push_back(J(j.id) + " replica on " + p.node + " has " + std::to_string(p.gpus.size()) +
                    " GPUs; wants " + std::to_string(j.per_replica.gpus));
      }
    }
    if (j.held) v.push_back(J(j.id) + " is held but was bound");
    if (j.eligible_time > s.now) v.push_back(J(j.id) + " is in retry backoff but was bound");
  }
  for (const Waiting& w : d.waiting) ++seen[w.job];
  for (const Infeasible& i : d.infeasible) ++seen[i.job];
  for (const PendingJob& j : s.pending) {
    int n = seen.count(j.id) ? seen[j.id] : 0;
    if (n != 1) v.push_back(J(j.id) + " appears " + std::to_string(n) + " times in the decisions");
  }
  for (const auto& [id, n] : seen) {
    if (!f.pending.count(id)) v.push_back("decisions name " + J(id) + ", which is not pending");
  }
  return v;
}

// No queue (or ancestor) goes above its limit because of this pass's binds.
Violations CheckQueueLimits(const Snapshot& s, const Policy&, const Decisions& d) {
  Violations v;
  if (s.queues.empty()) return v;
  Facts f(s);
  std::vector<int64_t> after = UsedAfter(f, d);
  for (size_t q = 0; q < s.queues.size(); ++q) {
    if (after[q] > f.used_start[q] && after[q] > s.queues[q].limit_gpus) {
      std::string jobs;
      for (const Bind& b : d.binds) {
        const PendingJob& j = *f.pending.at(b.job);
        auto chain = f.Chain(j.tenant, j.queue);
        if (std::find(chain.begin(), chain.end(), static_cast<int>(q)) != chain.end()) {
          jobs += " " + std::to_string(b.job) + "(" + std::to_string(BoundGpus(j, b)) + ")";
        }
      }
      v.push_back("queue " + s.queues[q].name + " uses " + std::to_string(after[q]) +
                  " GPUs after the pass (" + std::to_string(f.used_start[q]) + " before), limit " +
                  std::to_string(s.queues[q].limit_gpus) + "; bound:" + jobs);
    }
  }
  for (const Bind& b : d.binds) {
    const PendingJob& j = *f.pending.at(b.job);
    if (f.Chain(j.tenant, j.queue).empty()) {
      v.push_back(J(j.id) + " bound in unknown queue " + j.tenant + "/" + j.queue);
    }
  }
  return v;
}

// Only preemptible, old enough, lower-priority victims, or reclaim of borrowed quota.
Violations CheckPreemptions(const Snapshot& s, const Policy& policy, const Decisions& d) {
  Violations v;
  Facts f(s);
  if (policy.preemption == "none" && !d.preemptions.empty()) {
    v.push_back("preemption 'none' but " + std::to_string(d.preemptions.size()) + " preemptions");
  }
  std::set<JobId> bound, waiting, victims;
  for (const Bind& b : d.binds) bound.insert(b.job);
  for (const Waiting& w : d.waiting) waiting.insert(w.job);
  std::vector<int64_t> after = UsedAfter(f, d);
  const bool implicit = s.queues.empty();
  auto guaranteed = [&](int q) { return q >= 0 ? s.queues[q].guaranteed_gpus : 0; };
  auto borrowing_after = [&](const std::string& tenant, const std::string& queue) {
    if (implicit) {
      int64_t used = 0;  // an implicit queue has no guarantee
      for (const RunningJob& r : s.running) {
        if (r.tenant == tenant && r.queue == queue) used += r.Gpus();
      }
      for (const Bind& b : d.binds) {
        const PendingJob& j = *f.pending.at(b.job);
        if (j.tenant == tenant && j.queue == queue) used += BoundGpus(j, b);
      }
      return used > 0;
    }
    auto chain = f.Chain(tenant, queue);
    return !chain.empty() && after[chain[0]] > guaranteed(chain[0]);
  };
  std::map<JobId, int> per_preemptor;
  for (const Preempt& p : d.preemptions) {
    auto rv = f.running.find(p.job);
    auto pj = f.pending.find(p.for_job);
    if (rv == f.running.end()) {
      v.push_back("preempts unknown running " + J(p.job));
      continue;
    }
    if (pj == f.pending.end()) {
      v.push_back(J(p.job) + " preempted for unknown pending " + J(p.for_job));
      continue;
    }
    const RunningJob& r = *rv->second;
    const PendingJob& j = *pj->second;
    const std::string what = J(r.id) + " preempted for " + J(j.id);
    if (!victims.insert(r.id).second) v.push_back(J(r.id) + " preempted twice");
    ++per_preemptor[j.id];
    if (!r.preemptible) v.push_back(what + ": victim is not preemptible");
    if (r.preempting) v.push_back(what + ": victim is already preempting");
    if (s.now - r.start_time < policy.min_runtime) {
      v.push_back(what + ": victim ran only " + FormatDuration(s.now - r.start_time) +
                  " (min_runtime " + FormatDuration(policy.min_runtime) + ")");
    }
    if (bound.count(j.id)) v.push_back(what + ", which was bound in the same pass");
    if (!waiting.count(j.id)) v.push_back(what + ", which is not waiting");
    const bool same_queue = r.tenant == j.tenant && r.queue == j.queue;
    const bool victim_borrowing = borrowing_after(r.tenant, r.queue);
    // The documented rule (schedule.h step 4): lower priority in the preemptor's own
    // queue or in a borrowing queue; or reclaim: the preemptor's queue stays within its
    // guarantee and the victim's queue borrows.
    const bool by_priority = r.priority < j.priority && (same_queue || victim_borrowing);
    bool by_reclaim = false;
    if (!implicit && !same_queue && victim_borrowing) {
      auto chain = f.Chain(j.tenant, j.queue);
      const int64_t need = j.per_replica.gpus * std::max(1, std::min(j.min_replicas, j.replicas));
      by_reclaim = !chain.empty() && f.used_start[chain[0]] + need <= guaranteed(chain[0]);
    }
    if (!by_priority && !by_reclaim) {
      v.push_back(what + ": priority " + std::to_string(r.priority) + " vs " +
                  std::to_string(j.priority) + (same_queue ? ", same queue" : ", other queue") +
                  (victim_borrowing ? " (borrowing)" : " (not borrowing)") +
                  ", and not a reclaim of borrowed quota");
    }
  }
  for (const auto& [id, n] : per_preemptor) {
    if (n > policy.max_victims) {
      v.push_back(J(id) + " preempts " + std::to_string(n) + " jobs, max_victims " +
                  std::to_string(policy.max_victims));
    }
  }
  return v;
}

// A reservation's GPUs that were free at pass start go only to jobs that end in time.
Violations CheckReservations(const Snapshot& s, const Policy& policy, const Decisions& d) {
  Violations v;
  Facts f(s);
  // A job that preempts also holds its placement (a Reserve from now); those holds
  // are not backfill reservations and do not count against policy.reservations.
  // Decisions does not mark them: a hold is a reservation from now of a job that
  // preempts or waits for preempting jobs to stop.
  std::set<JobId> preemptors;
  for (const Preempt& p : d.preemptions) preemptors.insert(p.for_job);
  for (const Waiting& w : d.waiting) {
    if (w.reason.str().find(" to stop") != std::string::npos) preemptors.insert(w.job);
  }
  int backfill_reservations = 0;
  for (const Reserve& r : d.reservations) {
    backfill_reservations += !(r.earliest_start == s.now && preemptors.count(r.job));
  }
  if (!policy.backfill && backfill_reservations > 0) {
    v.push_back("backfill off but " + std::to_string(backfill_reservations) + " reservations made");
  }
  if (backfill_reservations > policy.reservations) {
    v.push_back(std::to_string(backfill_reservations) + " reservations, policy allows " +
                std::to_string(policy.reservations));
  }
  std::set<JobId> waiting;
  for (const Waiting& w : d.waiting) waiting.insert(w.job);
  // (node, GPU) -> binds using it
  std::map<std::pair<std::string, int>, JobId> bound_on;
  for (const Bind& b : d.binds) {
    for (const Placement& p : b.replicas) {
      for (int g : p.gpus) bound_on[{p.node, g}] = b.job;
    }
  }
  // Two reservations may share a GPU only one after the other: the earlier job's time
  // limit ends by the later one's start.
  std::map<std::pair<std::string, int>, const Reserve*> reserved_for;
  auto ends_by = [&](const Reserve& a, const Reserve& b) {
    const PendingJob& j = *f.pending.at(a.job);
    return j.time_limit.count() > 0 && a.earliest_start + j.time_limit <= b.earliest_start;
  };
  for (const Reserve& r : d.reservations) {
    for (const Placement& p : r.replicas) {
      for (int g : p.gpus) {
        auto [it, fresh] = reserved_for.emplace(std::make_pair(p.node, g), &r);
        if (fresh || ends_by(*it->second, r) || ends_by(r, *it->second)) continue;
        v.push_back("GPU " + p.node + "[" + std::to_string(g) + "] reserved for both " +
                    J(it->second->job) + " (from now+" +
                    FormatDuration(it->second->earliest_start - s.now) + ") and " + J(r.job) +
                    " (from now+" + FormatDuration(r.earliest_start - s.now) + ")");
      }
    }
  }
  for (const Reserve& r : d.reservations) {
    if (r.earliest_start < s.now) {
      v.push_back("reservation of " + J(r.job) + " starts " +
                  FormatDuration(s.now - r.earliest_start) + " before now");
    }
    if (!waiting.count(r.job)) v.push_back("reservation of " + J(r.job) + ", which is not waiting");
    for (const Placement& p : r.replicas) {
      for (int g : p.gpus) {
        if (f.busy.count(p.node) && f.busy.at(p.node).count(g)) continue;  // freed by then
        auto it = bound_on.find({p.node, g});
        if (it == bound_on.end()) continue;
        const PendingJob& j = *f.pending.at(it->second);
        if (j.time_limit.count() <= 0 || s.now + j.time_limit > r.earliest_start) {
          v.push_back(J(j.id) + " bound on " + p.node + "[" + std::to_string(g) +
                      "], reserved for " + J(r.job) + " from now+" +
                      FormatDuration(r.earliest_start - s.now) + ", with time limit " +
                      FormatDuration(j.time_limit));
        }
      }
    }
  }
  return v;
}

// --- Shrinking -------------------------------------------------------------------------

// Drops elements of `items` (halves, then quarters, ... then single ones) while
// `fails` stays true.
template <typename T>
bool ShrinkVector(Snapshot& s, std::vector<T> Snapshot::*items,
                  const std::function<bool(const Snapshot&)>& fails) {
  bool progress = false;
  for (size_t chunk = std::max<size_t>((s.*items).size() / 2, 1); chunk >= 1; chunk /= 2) {
    for (size_t at = 0; at < (s.*items).size();) {
      Snapshot t = s;
      auto& v = t.*items;
      v.erase(v.begin() + at, v.begin() + std::min(v.size(), at + chunk));
      if (fails(t)) {
        s = std::move(t);
        progress = true;
      } else {
        at += chunk;
      }
    }
    if (chunk == 1) break;
  }
  return progress;
}

Snapshot Shrink(Snapshot s, const std::function<bool(const Snapshot&)>& fails) {
  for (int round = 0; round < 8; ++round) {
    bool progress = false;
    progress |= ShrinkVector(s, &Snapshot::pending, fails);
    progress |= ShrinkVector(s, &Snapshot::running, fails);
    progress |= ShrinkVector(s, &Snapshot::nodes, fails);
    progress |= ShrinkVector(s, &Snapshot::queues, fails);
    if (!progress) break;
  }
  return s;
}

// --- The driver ------------------------------------------------------------------------

// Every case with the decisions of every policy, computed once for all the tests.
struct Case {
  uint64_t seed = 0;
  Snapshot snapshot;
  std::vector<Decisions> decisions;  // one per Policies()
};

const std::vector<Case>& Cases() {
  static const std::vector<Case>* cases = [] {
    auto* out = new std::vector<Case>(CaseCount());
    for (size_t i = 0; i < out->size(); ++i) {
      Case& c = (*out)[i];
      c.seed = FirstSeed() + i;
      c.snapshot = RandomCase(c.seed);
      for (const NamedPolicy& np : Policies())
        c.decisions.push_back(Schedule(c.snapshot, np.policy));
    }
    return out;
  }();
  return *cases;
}

// Runs `check` on every case under the policies `use` accepts; reports the count of
// failing cases and a shrunk reproducer of the first.
void CheckAll(const std::string& property, const Checker& check,
              const std::function<bool(const NamedPolicy&)>& use = nullptr) {
  int failing = 0, checked = 0;
  std::map<std::string, int> by_policy;
  std::string first_report;
  for (const Case& c : Cases()) {
    for (size_t p = 0; p < Policies().size(); ++p) {
      const NamedPolicy& np = Policies()[p];
      if (use && !use(np)) continue;
      ++checked;
      Violations v = check(c.snapshot, np.policy, c.decisions[p]);
      if (v.empty()) continue;
      ++failing;
      ++by_policy[np.name];
      if (!first_report.empty()) continue;
      auto fails = [&](const Snapshot& t) {
        return !check(t, np.policy, Schedule(t, np.policy)).empty();
      };
      Snapshot small = Shrink(c.snapshot, fails);
      Decisions sd = Schedule(small, np.policy);
      Violations sv = check(small, np.policy, sd);
      first_report = property + " violated: seed " + std::to_string(c.seed) + ", policy " +
                     np.name + "\n  first violation: " + v.front() +
                     "\n  after shrinking: " + sv.front() + "\n--- snapshot ---\n" +
                     SnapshotToText(small) + "--- decisions ---\n" + DecisionsToText(sd, small.now);
    }
  }
  if (failing > 0) {
    std::string counts;
    for (const auto& [name, n] : by_policy) counts += " " + name + "=" + std::to_string(n);
    ADD_FAILURE() << failing << " of " << checked << " (case, policy) pairs fail (" << counts
                  << " )\n"
                  << first_report;
  }
}

bool DefaultOnly(const NamedPolicy& np) { return np.name == "default"; }

TEST(SchedulePropertyTest, NeverOverCommitsAndHonoursPlacementConstraints) {
  CheckAll("placement", CheckPlacements);
}

TEST(SchedulePropertyTest, GangsAreAllOrNothingAndEveryJobHasOneOutcome) {
  CheckAll("gang", CheckGangs);
}

TEST(SchedulePropertyTest, NoQueueGoesAboveItsLimit) { CheckAll("queue limit", CheckQueueLimits); }

TEST(SchedulePropertyTest, PreemptionsAreLegal) { CheckAll("preemption", CheckPreemptions); }

TEST(SchedulePropertyTest, ReservationsAreRespected) { CheckAll("reservation", CheckReservations); }

TEST(SchedulePropertyTest, SameSnapshotGivesSameDecisions) {
  CheckAll(
      "determinism",
      [](const Snapshot& s, const Policy& p, const Decisions& d) {
        Violations v;
        if (!(Schedule(s, p) == d))
          v.push_back("a second pass on the same snapshot decided differently");
        return v;
      },
      [](const NamedPolicy& np) { return np.name == "default" || np.name == "4-reservations"; });
}

// Which jobs are bound must not depend on the order in which the snapshot lists
// nodes, running jobs and pending jobs.
Snapshot Shuffled(const Snapshot& s, uint64_t seed, bool nodes, bool running, bool pending) {
  std::mt19937_64 rng(seed);
  Snapshot t = s;
  auto shuffle = [&](auto& v) {
    for (size_t k = v.size(); k > 1; --k) std::swap(v[k - 1], v[DrawBelow(rng, k)]);
  };
  if (nodes) shuffle(t.nodes);
  if (running) shuffle(t.running);
  if (pending) shuffle(t.pending);
  return t;
}

std::set<JobId> BoundJobs(const Decisions& d) {
  std::set<JobId> out;
  for (const Bind& b : d.binds) out.insert(b.job);
  return out;
}

Checker OrderIndependence(bool nodes, bool running, bool pending) {
  return [=](const Snapshot& s, const Policy& p, const Decisions& d) {
    Violations v;
    const std::set<JobId> want = BoundJobs(d);
    for (uint64_t k = 1; k <= 1; ++k) {
      std::set<JobId> got = BoundJobs(Schedule(Shuffled(s, k, nodes, running, pending), p));
      if (got != want) {
        std::string diff;
        for (JobId id : want) {
          if (!got.count(id)) diff += " -" + std::to_string(id);
        }
        for (JobId id : got) {
          if (!want.count(id)) diff += " +" + std::to_string(id);
        }
        v.push_back("shuffle " + std::to_string(k) + " changes the bound jobs:" + diff);
        break;
      }
    }
    return v;
  };
}

// First fit follows the node order by design; the other policies must not.
bool OrderFree(const NamedPolicy& np) {
  return np.name == "default" || np.name == "fifo-no-backfill" || np.name == "best-fit";
}

TEST(SchedulePropertyTest, PendingOrderDoesNotChangeWhichJobsAreBound) {
  CheckAll("pending order", OrderIndependence(false, false, true), OrderFree);
}

// Failed on an earlier scheduler (seed 100440 with TRAINYARD_PROP_SEED=100000):
// equal-cost victims are ordered by their position in Snapshot::running, and the
// what-if Release/Take of running jobs reorders NodeIndex buckets. Passes now over
// seeds 1-1000, 100000-101000, 200000-201500 and 300000-301500.
TEST(SchedulePropertyTest, RunningOrderDoesNotChangeWhichJobsAreBound) {
  CheckAll("running order", OrderIndependence(false, true, false), OrderFree);
}

// Ties between equally good nodes are broken by node name (NodeIndex orders its slots
// by name), never by where the snapshot happens to list a node.
TEST(SchedulePropertyTest, NodeOrderDoesNotChangeWhichJobsAreBound) {
  CheckAll("node order", OrderIndependence(true, false, false), OrderFree);
}

// "Not now" is not "never": a job is Infeasible exactly when it could not run even
// alone on this cluster with every node Ready and nothing running.
Violations CheckInfeasibleMeansNever(const Snapshot& s, const Policy& policy, const Decisions& d) {
  Violations v;
  std::map<JobId, std::string> outcome;
  for (const Waiting& w : d.waiting) outcome[w.job] = "waiting (" + w.reason.str() + ")";
  for (const Infeasible& i : d.infeasible) outcome[i.job] = "infeasible (" + i.reason + ")";
  Snapshot empty = s;
  empty.running.clear();
  for (Node& n : empty.nodes) n.state = NodeState::kReady;
  for (const PendingJob& j : s.pending) {
    auto it = outcome.find(j.id);
    if (it == outcome.end()) continue;  // bound
    const bool infeasible = it->second.rfind("infeasible", 0) == 0;
    PendingJob alone = j;
    alone.held = false;
    alone.eligible_time = s.now;
    empty.pending = {alone};
    const bool fits_alone = !Schedule(empty, policy).binds.empty();
    if (infeasible && fits_alone) {
      v.push_back(J(j.id) + " is " + it->second + " but runs alone on the empty cluster");
    } else if (!infeasible && !fits_alone) {
      v.push_back(J(j.id) + " is " + it->second +
                  " but cannot run even alone on the empty cluster");
    }
  }
  return v;
}

TEST(SchedulePropertyTest, InfeasibleExactlyWhenNeverRunnable) {
  CheckAll("infeasible", CheckInfeasibleMeansNever, DefaultOnly);
}

// --- Minimal reproducers of what the properties found ---------------------------------

Node SmallNode(const std::string& name, const std::string& model, int64_t milli_cpus = 64'000) {
  Node n;
  n.name = name;
  n.topology.leaf = "leaf-0";
  n.milli_cpus = milli_cpus;
  n.memory_bytes = int64_t{512} << 30;
  for (int g = 0; g < 8; ++g) {
    n.gpus.push_back(Gpu{g, name + "-" + std::to_string(g), model, int64_t{80} << 30,
                         name + "-nvl" + std::to_string(g / 4)});
  }
  return n;
}

PendingJob Job(JobId id, int replicas, int min_replicas, int gpus, int64_t milli_cpus = 0) {
  PendingJob j;
  j.id = id;
  j.name = "job-" + std::to_string(id);
  j.tenant = "t";
  j.queue = "q";
  j.priority = 100;
  j.replicas = replicas;
  j.min_replicas = min_replicas;
  j.per_replica.gpus = gpus;
  j.per_replica.milli_cpus = milli_cpus;
  j.submit_time = WorkloadShape::DefaultNow() - minutes(60 - id);
  j.eligible_time = j.submit_time;
  return j;
}

RunningJob Holding(JobId id, const std::string& node, std::vector<int> gpus, int64_t milli_cpus) {
  RunningJob r;
  r.id = id;
  r.tenant = "t";
  r.queue = "q";
  r.priority = 100;
  r.per_replica.gpus = static_cast<int64_t>(gpus.size());
  r.per_replica.milli_cpus = milli_cpus;
  r.replicas.push_back({node, std::move(gpus)});
  r.start_time = WorkloadShape::DefaultNow() - minutes(60);
  return r;
}

// LimitBlocks checks min_replicas' GPUs, then PlaceGang places up to `replicas`.
TEST(ScheduleRegressionTest, ElasticGangIsBoundBeyondItsQueueLimit) {
  Snapshot s;
  s.now = WorkloadShape::DefaultNow();
  s.nodes = {SmallNode("n0", "H100")};
  s.queues = {Queue{"q", "t", "", 0, 1, 1.0}};
  s.pending = {Job(1, /*replicas=*/2, /*min_replicas=*/1, /*gpus=*/1)};
  Decisions d = Schedule(s, Policy{});
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].replicas.size(), 1u) << "queue 'q' has a limit of 1 GPU";
}

// NeverFits adds up nodes of every GPU type for an untyped request, but a gang is
// placed on one type only.
TEST(ScheduleRegressionTest, UntypedGangLargerThanAnyOneTypeWaitsForever) {
  Snapshot s;
  s.now = WorkloadShape::DefaultNow();
  s.nodes = {SmallNode("n0", "H100"), SmallNode("n1", "A100")};
  s.pending = {Job(1, 2, 2, 8)};
  Decisions d = Schedule(s, Policy{});
  EXPECT_EQ(d.infeasible.size(), 1u) << DecisionsToText(d, s.now);
}

// With reservations > 1, the second reservation's what-if frees GPUs that the first
// reservation will already hold.
TEST(ScheduleRegressionTest, TwoReservationsHoldTheSameGpus) {
  Snapshot s;
  s.now = WorkloadShape::DefaultNow();
  s.nodes = {SmallNode("n0", "H100")};
  RunningJob r = Holding(1, "n0", {0, 1, 2, 3, 4, 5, 6, 7}, 0);
  r.time_limit = minutes(120);  // ends in an hour
  s.running = {r};
  s.pending = {Job(2, 1, 1, 8), Job(3, 1, 1, 8)};
  Policy p;
  p.reservations = 2;
  Decisions d = Schedule(s, p);
  EXPECT_LE(d.reservations.size(), 1u) << DecisionsToText(d, s.now);
}

// A job that preempts holds its placement from now, but only the free part is marked
// in the index; the backfill what-if then frees the victim at its time limit and
// reserves the same GPUs for a later job.
TEST(ScheduleRegressionTest, PreemptionHoldAndReservationShareGpus) {
  Snapshot s;
  s.now = WorkloadShape::DefaultNow();
  s.nodes = {SmallNode("n0", "H100")};
  RunningJob victim = Holding(1, "n0", {0, 1, 2, 3, 4, 5, 6, 7}, 0);
  victim.priority = 0;
  victim.time_limit = minutes(120);  // ends in an hour
  s.running = {victim};
  PendingJob preemptor = Job(2, 1, 1, 8);  // priority 100, no time limit
  PendingJob later = Job(3, 1, 1, 8);
  later.priority = 0;  // may not preempt
  s.pending = {preemptor, later};
  Decisions d = Schedule(s, Policy{});
  std::map<std::pair<std::string, int>, JobId> holder;
  for (const Reserve& r : d.reservations) {
    for (const Placement& p : r.replicas) {
      for (int g : p.gpus) {
        auto [it, fresh] = holder.emplace(std::make_pair(p.node, g), r.job);
        EXPECT_TRUE(fresh) << p.node << "[" << g << "] reserved for jobs " << it->second << " and "
                           << r.job << "\n"
                           << DecisionsToText(d, s.now);
        if (!fresh) return;
      }
    }
  }
}

// Best fit took the first of two nodes with 4 free GPUs each in snapshot order, with
// no regard to CPUs: job 2 (50 CPUs) then fitted only when job 1 went to n-b.
TEST(ScheduleRegressionTest, NodeOrderDecidesWhichJobFits) {
  Snapshot s;
  s.now = WorkloadShape::DefaultNow();
  s.nodes = {SmallNode("n-a", "H100"), SmallNode("n-b", "H100")};
  s.running = {Holding(1, "n-a", {0, 1, 2, 3}, 0), Holding(2, "n-b", {0, 1, 2, 3}, 40'000)};
  s.pending = {Job(3, 1, 1, 1, 20'000), Job(4, 1, 1, 1, 50'000)};
  Snapshot swapped = s;
  std::swap(swapped.nodes[0], swapped.nodes[1]);
  EXPECT_EQ(BoundJobs(Schedule(s, Policy{})), BoundJobs(Schedule(swapped, Policy{})));
}

// PlaceCpuOnly honours same-node only; a hard same-leaf gang of CPU-only replicas is
// spread over leaves.
TEST(ScheduleRegressionTest, CpuOnlyHardSameLeafGangSpansLeaves) {
  Snapshot s;
  s.now = WorkloadShape::DefaultNow();
  Node a = SmallNode("n-a", "H100", 32'000), b = SmallNode("n-b", "H100", 16'000);
  b.topology.leaf = "leaf-1";
  s.nodes = {a, b};
  s.running = {Holding(1, "n-a", {0}, 16'000)};
  PendingJob j = Job(2, 2, 2, 0, 16'000);
  j.topology = {TopologyConstraint::kSameLeaf, /*hard=*/true};
  s.pending = {j};
  Decisions d = Schedule(s, Policy{});
  std::set<std::string> nodes;
  for (const Bind& bind : d.binds) {
    for (const Placement& p : bind.replicas) nodes.insert(p.node);
  }
  EXPECT_LE(nodes.size(), 1u) << DecisionsToText(d, s.now);
}

// SearchScope adds every candidate, in global cost order, to a scope's victims
// whether or not it has replicas in the scope, so victims elsewhere use up
// max_victims (and make each scope's search sort all candidates).
TEST(ScheduleRegressionTest, VictimsOutsideTheScopeCountAgainstMaxVictims) {
  Snapshot s;
  s.now = WorkloadShape::DefaultNow();
  Node a = SmallNode("n-a", "A100"), b = SmallNode("n-b", "H100");
  b.topology.leaf = "leaf-1";
  s.nodes = {a, b};
  RunningJob cheap = Holding(1, "n-a", {0, 1, 2, 3, 4, 5, 6, 7}, 0);
  cheap.priority = 0;
  cheap.last_checkpoint = s.now;  // nothing to lose: the cheapest victim
  RunningJob victim = Holding(2, "n-b", {0, 1, 2, 3, 4, 5, 6, 7}, 0);
  victim.priority = 0;
  s.running = {cheap, victim};
  PendingJob j = Job(3, 1, 1, 8);
  j.per_replica.gpu_type = "H100";
  j.topology = {TopologyConstraint::kSameLeaf, /*hard=*/true};
  s.pending = {j};
  Policy p;
  p.max_victims = 1;
  Decisions d = Schedule(s, p);
  ASSERT_EQ(d.preemptions.size(), 1u) << DecisionsToText(d, s.now);
  EXPECT_EQ(d.preemptions[0].job, 2) << DecisionsToText(d, s.now);
}

// The generator itself: running jobs never over-commit and stay within queue limits,
// so that every violation above is the scheduler's.
TEST(SyntheticSnapshotTest, RunningJobsArePlacedConsistently) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    Snapshot s = RandomCase(seed);
    Facts f(s);
    std::map<std::string, std::set<int>> used;
    std::map<std::string, int64_t> cpu, mem;
    for (const RunningJob& r : s.running) {
      for (const Placement& p : r.replicas) {
        ASSERT_TRUE(f.node.count(p.node)) << "seed " << seed;
        ASSERT_NE(f.node.at(p.node)->state, NodeState::kDown) << "seed " << seed;
        ASSERT_EQ(static_cast<int64_t>(p.gpus.size()), r.per_replica.gpus);
        for (int g : p.gpus) {
          ASSERT_NE(f.GpuOf(p.node, g), nullptr) << "seed " << seed;
          ASSERT_TRUE(used[p.node].insert(g).second)
              << "seed " << seed << " " << p.node << "[" << g << "]";
        }
        cpu[p.node] += r.per_replica.milli_cpus;
        mem[p.node] += r.per_replica.memory_bytes;
      }
      ASSERT_LE(r.start_time, s.now);
      if (r.last_checkpoint) {
        ASSERT_GE(*r.last_checkpoint, r.start_time);
      }
    }
    for (const auto& [name, c] : cpu) ASSERT_LE(c, f.node.at(name)->milli_cpus) << "seed " << seed;
    for (const auto& [name, m] : mem)
      ASSERT_LE(m, f.node.at(name)->memory_bytes) << "seed " << seed;
    for (size_t q = 0; q < s.queues.size(); ++q) {
      ASSERT_LE(f.used_start[q], s.queues[q].limit_gpus) << "seed " << seed;
      ASSERT_LE(s.queues[q].guaranteed_gpus, s.queues[q].limit_gpus) << "seed " << seed;
    }
    std::set<JobId> ids;
    for (const RunningJob& r : s.running) ASSERT_TRUE(ids.insert(r.id).second);
    for (const PendingJob& j : s.pending) ASSERT_TRUE(ids.insert(j.id).second);
  }
}

TEST(SyntheticSnapshotTest, SameSeedSameSnapshot) {
  ClusterShape c;
  WorkloadShape w;
  Snapshot a = SyntheticSnapshot(c, w, 42), b = SyntheticSnapshot(c, w, 42);
  EXPECT_EQ(SnapshotToText(a), SnapshotToText(b));
  EXPECT_NE(SnapshotToText(a), SnapshotToText(SyntheticSnapshot(c, w, 43)));
}

TEST(SyntheticSnapshotTest, SizeMixIsMostlySmallWithAMultiNodeTail) {
  ClusterShape c;
  c.nodes = 1024;
  WorkloadShape w;
  w.pending = 20'000;
  w.running_fill = 0;
  Snapshot s = SyntheticSnapshot(c, w, 7);
  int small = 0, multi_node = 0, largest = 0;
  for (const PendingJob& j : s.pending) {
    int gpus = static_cast<int>(j.per_replica.gpus * j.replicas);
    small += gpus >= 1 && gpus <= 8;
    multi_node += gpus > 8;
    largest = std::max(largest, gpus);
    if (gpus > 8) {
      EXPECT_EQ(j.per_replica.gpus, 8);
    }
  }
  EXPECT_GT(small, 0.75 * w.pending);
  EXPECT_GT(multi_node, 0.1 * w.pending);
  EXPECT_EQ(largest, 512);
}

}  // namespace
}  // namespace trainyard::sched
