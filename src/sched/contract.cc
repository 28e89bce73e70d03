#include "sched/contract.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "sched/index.h"

namespace trainyard::sched {
namespace {

std::string Job(JobId id) { return "job " + std::to_string(id); }

// "now+1h", "now-30s": times of a pass relative to its `now`, readable alike in a
// replay (time 0 is the epoch) and on a server.
std::string Relative(Timestamp t, Timestamp now) {
  return t < now ? "now-" + FormatDuration(now - t) : "now+" + FormatDuration(t - now);
}

// "a, b, c and 4 more".
std::string List(const std::vector<std::string>& items, size_t shown = 4) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < shown; ++i) {
    if (i > 0) out += ", ";
    out += items[i];
  }
  if (items.size() > shown) out += " and " + std::to_string(items.size() - shown) + " more";
  return out;
}

std::string JobIds(const std::vector<JobId>& ids) {
  std::vector<std::string> text;
  text.reserve(ids.size());
  for (JobId id : ids) text.push_back(std::to_string(id));
  return List(text, 8);
}

std::string_view TopologyName(TopologyConstraint c) {
  switch (c) {
    case TopologyConstraint::kSameNode:
      return "same-node";
    case TopologyConstraint::kSameNvlink:
      return "same-nvlink";
    case TopologyConstraint::kSameLeaf:
      return "same-leaf";
    case TopologyConstraint::kNone:
      return "none";
  }
  return "none";
}

// Jobs by id: (id, position) pairs sorted by id, found by binary search. Snapshots
// usually list jobs by id already, and then building it costs no sort.
class IdTable {
 public:
  template <typename Jobs>
  explicit IdTable(const Jobs& jobs) {
    by_id_.reserve(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) by_id_.emplace_back(jobs[i].id, static_cast<int>(i));
    if (!std::is_sorted(by_id_.begin(), by_id_.end())) std::sort(by_id_.begin(), by_id_.end());
  }
  // The position of the first job with this id; -1 when there is none.
  int Find(JobId id) const {
    auto it = std::lower_bound(by_id_.begin(), by_id_.end(), std::make_pair(id, -1));
    return it != by_id_.end() && it->first == id ? it->second : -1;
  }

 private:
  std::vector<std::pair<JobId, int>> by_id_;
};

class Checker {
 public:
  Checker(const Snapshot& s, const Policy& p, const Decisions& d)
      : snap_(s), policy_(p), dec_(d), pending_(s.pending), running_(s.running) {}

  std::vector<Violation> Run() {
    IndexNodes();
    IndexQueues();
    CheckAnswers();
    TakeRunning();
    for (size_t b = 0; b < dec_.binds.size(); ++b) CheckBind(b);
    CheckQueueLimits();
    CheckPreemptions();
    CheckReservations();
    return std::move(out_);
  }

 private:
  void Add(Contract c, std::string message) { out_.push_back({c, std::move(message)}); }

  const PendingJob* PendingOf(JobId id) const {
    const int i = pending_.Find(id);
    return i < 0 ? nullptr : &snap_.pending[static_cast<size_t>(i)];
  }

  // --- Nodes and GPUs --------------------------------------------------------------
  void IndexNodes() {
    const size_t n = snap_.nodes.size();
    node_by_name_.reserve(n);
    gpu_base_.resize(n + 1, 0);
    identity_.resize(n, true);
    for (size_t i = 0; i < n; ++i) {
      const Node& node = snap_.nodes[i];
      node_by_name_.emplace(node.name, static_cast<int>(i));  // the first of equal names
      gpu_base_[i + 1] = gpu_base_[i] + node.gpus.size();
      for (size_t g = 0; g < node.gpus.size(); ++g) {
        if (node.gpus[g].index != static_cast<int>(g)) identity_[i] = false;
      }
    }
    gpu_use_.assign(gpu_base_[n], 0);
    gpu_holder_.assign(gpu_base_[n], 0);
    cpu_used_.assign(n, 0);
    mem_used_.assign(n, 0);
  }

  int NodeOf(const std::string& name) const {
    auto it = node_by_name_.find(name);
    return it == node_by_name_.end() ? -1 : it->second;
  }

  // The position of the GPU with agent-visible index `gpu` in node `n`'s list; -1
  // when the node has no such GPU.
  int GpuPos(int n, int gpu) const {
    const std::vector<Gpu>& gpus = snap_.nodes[static_cast<size_t>(n)].gpus;
    if (identity_[static_cast<size_t>(n)]) {
      return gpu >= 0 && static_cast<size_t>(gpu) < gpus.size() ? gpu : -1;
    }
    for (size_t g = 0; g < gpus.size(); ++g) {
      if (gpus[g].index == gpu) return static_cast<int>(g);
    }
    return -1;
  }

  size_t Slot(int n, int pos) const {
    return gpu_base_[static_cast<size_t>(n)] + static_cast<size_t>(pos);
  }

  std::string GpuName(int n, int gpu) const {
    return snap_.nodes[static_cast<size_t>(n)].name + " GPU " + std::to_string(gpu);
  }

  // --- Queues ----------------------------------------------------------------------
  // Queues as quotas read them: the snapshot's, or, when it defines none, one
  // implicit queue (no guarantee, no limit) per (tenant, queue) that a job names.
  void IndexQueues() {
    implicit_ = snap_.queues.empty();
    if (implicit_) {
      auto add = [&](const std::string& tenant, const std::string& queue) {
        if (queue_by_name_.try_emplace({tenant, queue}, 0).second) {
          Queue q;
          q.tenant = tenant;
          q.name = queue;
          q.limit_gpus = std::numeric_limits<int64_t>::max() / 4;
          implicit_queues_.push_back(std::move(q));
        }
      };
      for (const RunningJob& r : snap_.running) add(r.tenant, r.queue);
      for (const PendingJob& j : snap_.pending) add(j.tenant, j.queue);
      queue_by_name_.clear();
    }
    const std::vector<Queue>& queues = Queues();
    for (size_t q = 0; q < queues.size(); ++q) {
      queue_by_name_.insert_or_assign({queues[q].tenant, queues[q].name}, static_cast<int>(q));
    }
    parent_.assign(queues.size(), -1);
    for (size_t q = 0; q < queues.size(); ++q) {
      if (queues[q].parent.empty()) continue;
      auto it = queue_by_name_.find({queues[q].tenant, queues[q].parent});
      if (it != queue_by_name_.end() && it->second != static_cast<int>(q)) parent_[q] = it->second;
    }
    used_start_.assign(queues.size(), 0);
    for (const RunningJob& r : snap_.running) {
      ForChain(QueueOf(r.tenant, r.queue), [&](int a) { used_start_[a] += r.Gpus(); });
    }
    used_after_ = used_start_;
    added_.assign(queues.size(), 0);
  }

  const std::vector<Queue>& Queues() const { return implicit_ ? implicit_queues_ : snap_.queues; }

  int QueueOf(const std::string& tenant, const std::string& queue) const {
    auto it = queue_by_name_.find({tenant, queue});
    return it == queue_by_name_.end() ? -1 : it->second;
  }

  // Calls fn(q) for `q` and each of its ancestors (a cycle of parents, bad input,
  // is walked at most once around).
  template <typename Fn>
  void ForChain(int q, Fn&& fn) const {
    for (size_t steps = 0; q >= 0 && steps <= parent_.size(); ++steps, q = parent_[q]) fn(q);
  }

  bool InChain(int q, int ancestor) const {
    bool found = false;
    ForChain(q, [&](int a) { found = found || a == ancestor; });
    return found;
  }

  // --- Answers ---------------------------------------------------------------------
  void CheckAnswers() {
    const size_t n = snap_.pending.size();
    binds_of_.assign(n, 0);
    waits_of_.assign(n, 0);
    infeasible_of_.assign(n, 0);
    waiting_entry_.assign(n, -1);
    auto count = [&](JobId id, const char* as, std::vector<int>& counts) {
      const int i = pending_.Find(id);
      if (i < 0) {
        Add(Contract::kAnswer, std::string(as) + " for " + Job(id) + ", which is not pending");
        return -1;
      }
      ++counts[static_cast<size_t>(i)];
      return i;
    };
    for (const Bind& b : dec_.binds) count(b.job, "bind", binds_of_);
    for (size_t w = 0; w < dec_.waiting.size(); ++w) {
      const int i = count(dec_.waiting[w].job, "wait", waits_of_);
      if (i >= 0 && waiting_entry_[static_cast<size_t>(i)] < 0) {
        waiting_entry_[static_cast<size_t>(i)] = static_cast<int>(w);
      }
    }
    for (const Infeasible& f : dec_.infeasible) count(f.job, "infeasible", infeasible_of_);
    for (size_t i = 0; i < n; ++i) {
      const int answers = binds_of_[i] + waits_of_[i] + infeasible_of_[i];
      if (answers == 1) continue;
      if (pending_.Find(snap_.pending[i].id) != static_cast<int>(i)) continue;  // a duplicate id
      std::vector<std::string> kinds;
      if (binds_of_[i] > 0) kinds.push_back(std::to_string(binds_of_[i]) + " bind");
      if (waits_of_[i] > 0) kinds.push_back(std::to_string(waits_of_[i]) + " wait");
      if (infeasible_of_[i] > 0) kinds.push_back(std::to_string(infeasible_of_[i]) + " infeasible");
      Add(Contract::kAnswer, "pending " + Job(snap_.pending[i].id) + " is answered " +
                                 std::to_string(answers) + " times (" +
                                 (kinds.empty() ? "no bind, wait or infeasible" : List(kinds)) +
                                 "); expected once");
    }
  }

  bool IsBound(int pending_pos) const { return binds_of_[static_cast<size_t>(pending_pos)] > 0; }
  bool IsWaiting(int pending_pos) const { return waits_of_[static_cast<size_t>(pending_pos)] > 0; }

  // --- Binds -----------------------------------------------------------------------
  // What running jobs hold: GPUs (in thousandths: a whole GPU or a share), CPUs and
  // memory per node.
  void TakeRunning() {
    for (const RunningJob& r : snap_.running) {
      const int share = ShareOf(r.per_replica);
      for (const Placement& p : r.replicas) {
        const int n = NodeOf(p.node);
        if (n < 0) continue;
        cpu_used_[static_cast<size_t>(n)] += r.per_replica.milli_cpus;
        mem_used_[static_cast<size_t>(n)] += r.per_replica.memory_bytes;
        for (int g : p.gpus) {
          const int pos = GpuPos(n, g);
          if (pos < 0) continue;
          gpu_use_[Slot(n, pos)] += share > 0 ? share : kWholeGpu;
          gpu_holder_[Slot(n, pos)] = r.id;
        }
      }
    }
    start_use_ = gpu_use_;
  }

  void CheckBind(size_t bind_index) {
    const Bind& b = dec_.binds[bind_index];
    const int pos = pending_.Find(b.job);
    if (pos < 0) return;  // reported as an answer for a job that is not pending
    const PendingJob& j = snap_.pending[static_cast<size_t>(pos)];
    // Composed only for a message: most binds have none.
    auto who = [&] { return "bind of " + Job(j.id) + ": "; };
    if (j.held) Add(Contract::kAnswer, who() + "it is held");
    if (j.eligible_time > snap_.now) {
      Add(Contract::kAnswer, who() + "it is not eligible before " +
                                 FormatTimestamp(j.eligible_time) + " (" +
                                 Relative(j.eligible_time, snap_.now) + ", retry backoff)");
    }

    // A gang, as the pass reads it: at least max(1, min(min_replicas, replicas)).
    const int lo = std::max(1, std::min(j.min_replicas, j.replicas));
    const int hi = std::max(j.replicas, lo);
    const int placed = static_cast<int>(b.replicas.size());
    if (placed < lo || placed > hi) {
      Add(Contract::kGang, who() + std::to_string(placed) + " replicas placed; the gang needs " +
                               std::to_string(lo) + " to " + std::to_string(hi));
    }

    const int share = ShareOf(j.per_replica);
    const int need = share > 0 ? share : kWholeGpu;
    std::vector<int>& nodes = scratch_nodes_;
    std::vector<std::string_view>& leaves = scratch_leaves_;
    std::vector<std::string_view>& domains = scratch_domains_;
    std::vector<std::string_view>& models = scratch_models_;
    nodes.clear();
    leaves.clear();
    domains.clear();
    models.clear();
    bool outside_domains = false;
    std::vector<std::pair<int, bool>> overcommit_reported;  // (node, memory?) of this bind
    for (const Placement& p : b.replicas) {
      if (static_cast<int64_t>(p.gpus.size()) != j.per_replica.gpus) {
        Add(Contract::kGang, who() + "a replica on " + p.node + " got " +
                                 std::to_string(p.gpus.size()) + " GPUs; it asks for " +
                                 std::to_string(j.per_replica.gpus));
      }
      const int n = NodeOf(p.node);
      if (n < 0) {
        Add(Contract::kPlacement, who() + "unknown node " + p.node);
        continue;
      }
      const Node& node = snap_.nodes[static_cast<size_t>(n)];
      nodes.push_back(n);
      leaves.push_back(node.topology.leaf);
      if (!IsSchedulable(node.state)) {
        Add(Contract::kPlacement,
            who() + "node " + node.name + " is " + std::string(NodeStateName(node.state)));
      }
      if (std::find(j.excluded_nodes.begin(), j.excluded_nodes.end(), node.name) !=
          j.excluded_nodes.end()) {
        Add(Contract::kPlacement, who() + "node " + node.name + " is excluded for this job");
      }
      for (int g : p.gpus) {
        const int gp = GpuPos(n, g);
        if (gp < 0) {
          Add(Contract::kPlacement,
              who() + "node " + node.name + " has no GPU " + std::to_string(g));
          continue;
        }
        const Gpu& gpu = node.gpus[static_cast<size_t>(gp)];
        domains.push_back(gpu.nvlink_domain);
        outside_domains = outside_domains || gpu.nvlink_domain.empty();
        models.push_back(gpu.model);
        if (!GpuTypeMatches(j.per_replica.gpu_type, gpu.model)) {
          Add(Contract::kPlacement, who() + GpuName(n, g) + " is " + gpu.model + ", not " +
                                        NormalizeGpuType(j.per_replica.gpu_type));
        }
        if (gpu.memory_bytes < j.per_replica.gpu_memory_bytes) {
          Add(Contract::kPlacement, who() + GpuName(n, g) + " has " +
                                        FormatMemory(gpu.memory_bytes) +
                                        " of memory; the job asks for " +
                                        FormatMemory(j.per_replica.gpu_memory_bytes) + " per GPU");
        }
        const size_t slot = Slot(n, gp);
        const int used = gpu_use_[slot];
        if (used + need > kWholeGpu) {
          const JobId holder = gpu_holder_[slot];
          std::string why;
          if (holder == j.id && share == 0) {
            why = " is given to this job twice";
          } else if (used >= kWholeGpu) {
            why = " is already in use by " + Job(holder);
          } else if (share == 0) {
            why = " already has shares in use (" + std::to_string(used) + "/1000, " + Job(holder) +
                  " among them)";
          } else {
            why = " has " + std::to_string(used) + "/1000 in use (" + Job(holder) +
                  " among them); a share of " + std::to_string(share) + "/1000 does not fit";
          }
          Add(Contract::kPlacement, who() + GpuName(n, g) + why);
        }
        gpu_use_[slot] = used + need;
        gpu_holder_[slot] = j.id;
        bound_gpus_.push_back(
            {slot, static_cast<int>(bind_index), g, start_use_[slot] + need > kWholeGpu});
      }
      // A replica that asks for no CPUs (or memory) is not refused for them.
      auto charge = [&](std::vector<int64_t>& used, int64_t asked, int64_t capacity, bool memory) {
        used[static_cast<size_t>(n)] += asked;
        if (asked <= 0 || used[static_cast<size_t>(n)] <= capacity) return;
        const std::pair<int, bool> key{n, memory};
        if (std::find(overcommit_reported.begin(), overcommit_reported.end(), key) !=
            overcommit_reported.end()) {
          return;
        }
        overcommit_reported.push_back(key);
        const int64_t total = used[static_cast<size_t>(n)];
        Add(Contract::kPlacement,
            who() + "node " + node.name + " is over-committed on " +
                (memory ? "memory: " + FormatMemory(total) + " of " + FormatMemory(capacity)
                        : "CPUs: " + std::to_string(total) + "m of " + std::to_string(capacity) +
                              "m"));
      };
      charge(cpu_used_, j.per_replica.milli_cpus, node.milli_cpus, false);
      charge(mem_used_, j.per_replica.memory_bytes, node.memory_bytes, true);
    }

    auto distinct = [](auto& v) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    };
    distinct(nodes);
    distinct(leaves);
    distinct(domains);
    distinct(models);
    if (models.size() > 1) {
      Add(Contract::kPlacement,
          who() + "mixes GPU models " + List(Strings(models)) + " in one gang");
    }
    if (j.topology.hard) CheckTopology(j, nodes, leaves, domains, outside_domains);

    // Queue use after the pass.
    const int q = QueueOf(j.tenant, j.queue);
    if (q < 0) {
      Add(Contract::kQueue,
          who() + "its queue '" + j.queue + "' of tenant '" + j.tenant + "' does not exist");
      return;
    }
    const int64_t gpus = SaturatingMul(j.per_replica.gpus, placed);
    ForChain(q, [&](int a) {
      used_after_[a] += gpus;
      added_[a] += gpus;
    });
  }

  template <typename T>
  static std::vector<std::string> Strings(const std::vector<T>& items) {
    std::vector<std::string> out;
    for (const auto& item : items) out.emplace_back(item);
    return out;
  }

  void CheckTopology(const PendingJob& j, const std::vector<int>& nodes,
                     const std::vector<std::string_view>& leaves,
                     const std::vector<std::string_view>& domains, bool outside_domains) {
    const std::string who = "bind of " + Job(j.id) + ": ";
    const std::string rule = " despite hard " + std::string(TopologyName(j.topology.constraint));
    auto node_names = [&] {
      std::vector<std::string> names;
      for (int n : nodes) names.push_back(snap_.nodes[static_cast<size_t>(n)].name);
      return List(names);
    };
    switch (j.topology.constraint) {
      case TopologyConstraint::kSameNode:
        if (nodes.size() > 1) {
          Add(Contract::kPlacement, who + "spans " + std::to_string(nodes.size()) + " nodes (" +
                                        node_names() + ")" + rule);
        }
        break;
      case TopologyConstraint::kSameLeaf:
        if (leaves.size() > 1) {
          Add(Contract::kPlacement, who + "spans " + std::to_string(leaves.size()) + " leaves (" +
                                        List(Strings(leaves)) + ")" + rule);
        }
        break;
      case TopologyConstraint::kSameNvlink:
        if (j.per_replica.gpus <= 0) {  // no GPUs: placement reads it as same-node
          if (nodes.size() > 1) {
            Add(Contract::kPlacement, who + "spans " + std::to_string(nodes.size()) + " nodes (" +
                                          node_names() + ")" + rule + " (without GPUs: one node)");
          }
        } else if (outside_domains) {
          Add(Contract::kPlacement, who + "uses GPUs outside any NVLink domain" + rule);
        } else if (domains.size() > 1) {
          Add(Contract::kPlacement, who + "spans " + std::to_string(domains.size()) +
                                        " NVLink domains (" + List(Strings(domains)) + ")" + rule);
        }
        break;
      case TopologyConstraint::kNone:
        break;
    }
  }

  // --- Queues ----------------------------------------------------------------------
  void CheckQueueLimits() {
    const std::vector<Queue>& queues = Queues();
    for (size_t q = 0; q < queues.size(); ++q) {
      if (added_[q] <= 0 || used_after_[q] <= queues[q].limit_gpus) continue;
      std::vector<std::string> bound;
      for (const Bind& b : dec_.binds) {
        const PendingJob* j = PendingOf(b.job);
        if (j == nullptr || !InChain(QueueOf(j->tenant, j->queue), static_cast<int>(q))) continue;
        bound.push_back(Job(j->id) + " with " +
                        std::to_string(SaturatingMul(j->per_replica.gpus,
                                                     static_cast<int64_t>(b.replicas.size()))));
      }
      Add(Contract::kQueue,
          "queue '" + queues[q].name + "' holds " + std::to_string(used_after_[q]) +
              " GPUs after this pass, over its limit of " + std::to_string(queues[q].limit_gpus) +
              " (" + std::to_string(used_start_[q]) + " before; this pass bound " + List(bound) +
              ")");
    }
  }

  // --- Preemptions -----------------------------------------------------------------
  void CheckPreemptions() {
    std::vector<JobId> victims, preemptors;
    for (const Preempt& p : dec_.preemptions) {
      victims.push_back(p.job);
      preemptors.push_back(p.for_job);
    }
    std::sort(victims.begin(), victims.end());
    for (size_t i = 0; i < victims.size();) {
      size_t k = i;
      while (k < victims.size() && victims[k] == victims[i]) ++k;
      if (k - i > 1) {
        Add(Contract::kPreemption, Job(victims[i]) + " is preempted " +
                                       (k - i == 2 ? "twice" : std::to_string(k - i) + " times"));
      }
      i = k;
    }
    std::sort(preemptors.begin(), preemptors.end());
    std::vector<JobId> distinct;
    for (size_t i = 0; i < preemptors.size();) {
      size_t k = i;
      while (k < preemptors.size() && preemptors[k] == preemptors[i]) ++k;
      distinct.push_back(preemptors[i]);
      if (static_cast<int64_t>(k - i) > policy_.max_victims) {
        Add(Contract::kPreemption, Job(preemptors[i]) + " preempts " + std::to_string(k - i) +
                                       " jobs; max_victims is " +
                                       std::to_string(policy_.max_victims));
      }
      i = k;
    }
    if (static_cast<int64_t>(distinct.size()) > policy_.max_preemption_searches) {
      Add(Contract::kPreemption, std::to_string(distinct.size()) + " jobs preempt in this pass (" +
                                     JobIds(distinct) + "); max_preemption_searches is " +
                                     std::to_string(policy_.max_preemption_searches));
    }
    for (const Preempt& p : dec_.preemptions) CheckPreempt(p);
  }

  void CheckPreempt(const Preempt& p) {
    const std::string who = "preemption of " + Job(p.job) + ": ";
    if (policy_.preemption == "none") {
      Add(Contract::kPreemption, who + "the policy preempts nothing (preemption: none)");
    }
    const int rpos = running_.Find(p.job);
    if (rpos < 0) {
      Add(Contract::kPreemption, who + "it is not running");
      return;
    }
    const RunningJob& v = snap_.running[static_cast<size_t>(rpos)];
    if (v.preempting) Add(Contract::kPreemption, who + "it is already being preempted");
    if (!v.preemptible) Add(Contract::kPreemption, who + "its priority class is not preemptible");
    if (!v.preempting && snap_.now - v.start_time < policy_.min_runtime) {
      Add(Contract::kPreemption, who + "it started " + FormatDuration(snap_.now - v.start_time) +
                                     " ago, within min_runtime " +
                                     FormatDuration(policy_.min_runtime));
    }
    const Timestamp since =
        v.last_checkpoint && *v.last_checkpoint > v.start_time ? *v.last_checkpoint : v.start_time;
    const Duration lost = (snap_.now - since) * std::max<int64_t>(v.Gpus(), 1);
    if (p.lost_gpu_time != lost) {
      Add(Contract::kPreemption, who + "lost GPU-time " + FormatDuration(p.lost_gpu_time) +
                                     ", expected " + FormatDuration(lost) + " (" +
                                     std::to_string(std::max<int64_t>(v.Gpus(), 1)) +
                                     " GPUs since " + Relative(since, snap_.now) + ")");
    }
    const int fpos = pending_.Find(p.for_job);
    if (fpos < 0) {
      Add(Contract::kPreemption, who + "for " + Job(p.for_job) + ", which is not pending");
      return;
    }
    const PendingJob& f = snap_.pending[static_cast<size_t>(fpos)];
    if (IsBound(fpos))
      Add(Contract::kPreemption, who + "for " + Job(f.id) + ", which was bound anyway");
    if (!IsWaiting(fpos))
      Add(Contract::kPreemption, who + "for " + Job(f.id) + ", which is not waiting");

    // Lower priority in the preemptor's queue or a borrowing one; or reclaim: the
    // preemptor's queue within its guarantee, the victim's borrowing.
    const std::vector<Queue>& queues = Queues();
    const bool same_queue = v.tenant == f.tenant && v.queue == f.queue;
    const int vq = QueueOf(v.tenant, v.queue);
    const bool borrowing = vq >= 0 && used_after_[vq] > queues[vq].guaranteed_gpus;
    const std::string prio = "priority " + std::to_string(v.priority) + " preempted for priority " +
                             std::to_string(f.priority);
    if (!same_queue && !borrowing) {
      std::string standing = vq < 0 ? "it does not exist"
                                    : "it holds " + std::to_string(used_after_[vq]) +
                                          " GPUs after this pass, guaranteed " +
                                          std::to_string(queues[vq].guaranteed_gpus);
      Add(Contract::kPreemption, who + "queue '" + v.queue + "' is not borrowing (" + standing +
                                     "), and " + Job(f.id) + " is in another queue ('" + f.queue +
                                     "')");
      return;
    }
    if (v.priority < f.priority) return;
    if (same_queue) {
      Add(Contract::kPreemption, who + prio + " in the same queue");
      return;
    }
    if (implicit_) {
      Add(Contract::kPreemption, who + prio + " (no quotas to reclaim)");
      return;
    }
    const int fq = QueueOf(f.tenant, f.queue);
    const int64_t need = SaturatingMul(std::min<int64_t>(f.per_replica.gpus, 1 << 20),
                                       std::max(1, std::min(f.min_replicas, f.replicas)));
    if (fq < 0 || used_start_[fq] + need > queues[fq].guaranteed_gpus) {
      std::string standing = fq < 0 ? "it does not exist"
                                    : "it uses " + std::to_string(used_start_[fq]) + " of " +
                                          std::to_string(queues[fq].guaranteed_gpus) +
                                          " guaranteed GPUs before this pass, and " + Job(f.id) +
                                          " needs " + std::to_string(need);
      Add(Contract::kPreemption, who + prio + ", but queue '" + f.queue +
                                     "' would go beyond its guarantee: not a reclaim (" + standing +
                                     ")");
    }
  }

  // --- Reservations ----------------------------------------------------------------
  // A reservation from now of a job that preempts (or waits for its victims to stop)
  // holds its placement until the victims are gone; it is not a backfill reservation.
  bool IsHold(const Reserve& r, const std::vector<JobId>& preemptors) const {
    if (r.earliest_start != snap_.now) return false;
    if (std::binary_search(preemptors.begin(), preemptors.end(), r.job)) return true;
    const int pos = pending_.Find(r.job);
    if (pos < 0 || waiting_entry_[static_cast<size_t>(pos)] < 0) return false;
    const Waiting& w = dec_.waiting[static_cast<size_t>(waiting_entry_[static_cast<size_t>(pos)])];
    return w.reason.str().find(" to stop") != std::string::npos;
  }

  void CheckReservations() {
    std::vector<JobId> preemptors;
    for (const Preempt& p : dec_.preemptions) preemptors.push_back(p.for_job);
    std::sort(preemptors.begin(), preemptors.end());
    std::vector<JobId> backfill;
    for (const Reserve& r : dec_.reservations) {
      if (!IsHold(r, preemptors)) backfill.push_back(r.job);
    }
    if (!policy_.backfill && !backfill.empty()) {
      Add(Contract::kReservation, std::to_string(backfill.size()) + " reservation(s) (" +
                                      JobIds(backfill) + ") with backfill off");
    } else if (static_cast<int64_t>(backfill.size()) > policy_.reservations) {
      Add(Contract::kReservation, std::to_string(backfill.size()) + " reservations (" +
                                      JobIds(backfill) + "); the policy allows " +
                                      std::to_string(policy_.reservations));
    }

    // (slot, reservation, GPU index) of every reserved GPU, by slot.
    struct Reserved {
      size_t slot;
      int reservation;
      int gpu;
      bool operator<(const Reserved& o) const {
        return std::tie(slot, reservation) < std::tie(o.slot, o.reservation);
      }
    };
    std::vector<Reserved> reserved;
    for (size_t k = 0; k < dec_.reservations.size(); ++k) {
      const Reserve& r = dec_.reservations[k];
      const std::string who = "reservation of " + Job(r.job) + ": ";
      const int pos = pending_.Find(r.job);
      if (pos < 0) {
        Add(Contract::kReservation, who + "it is not pending");
        continue;
      }
      if (!IsWaiting(pos)) Add(Contract::kReservation, who + "it is not waiting");
      if (r.earliest_start < snap_.now) {
        Add(Contract::kReservation,
            who + "it starts in the past (" + Relative(r.earliest_start, snap_.now) + ")");
      }
      for (const Placement& p : r.replicas) {
        const int n = NodeOf(p.node);
        if (n < 0) continue;
        for (int g : p.gpus) {
          const int gp = GpuPos(n, g);
          if (gp >= 0) reserved.push_back({Slot(n, gp), static_cast<int>(k), g});
        }
      }
    }
    std::sort(reserved.begin(), reserved.end());
    std::sort(bound_gpus_.begin(), bound_gpus_.end());

    // Two reservations share a GPU only one after the other: the earlier job's time
    // limit ends by the later one's start. Reported once per pair, at the first GPU.
    auto ends_by = [&](const Reserve& a, const Reserve& b) {
      const PendingJob* j = PendingOf(a.job);
      return j != nullptr && j->time_limit.count() > 0 &&
             a.earliest_start + j->time_limit <= b.earliest_start;
    };
    std::map<std::pair<int, int>, std::pair<const Reserved*, int>> shared;  // pair -> (first, GPUs)
    for (size_t i = 0; i < reserved.size(); ++i) {
      for (size_t k = i + 1; k < reserved.size() && reserved[k].slot == reserved[i].slot; ++k) {
        const Reserve& a = dec_.reservations[static_cast<size_t>(reserved[i].reservation)];
        const Reserve& b = dec_.reservations[static_cast<size_t>(reserved[k].reservation)];
        if (reserved[i].reservation == reserved[k].reservation || ends_by(a, b) || ends_by(b, a)) {
          continue;
        }
        auto [it, fresh] =
            shared.try_emplace({reserved[i].reservation, reserved[k].reservation}, &reserved[i], 0);
        ++it->second.second;
      }
    }
    for (const auto& [pair, first] : shared) {
      const Reserve& a = dec_.reservations[static_cast<size_t>(pair.first)];
      const Reserve& b = dec_.reservations[static_cast<size_t>(pair.second)];
      Add(Contract::kReservation,
          GpuAt(first.first->slot, first.first->gpu) + " is reserved for both " + Job(a.job) +
              " (from " + Relative(a.earliest_start, snap_.now) + ") and " + Job(b.job) +
              " (from " + Relative(b.earliest_start, snap_.now) + ")" +
              More(first.second, "shared GPU"));
    }

    // EASY backfill: a bind may take a reserved GPU only when its time limit ends by
    // the reservation's start. A bind already reported for taking a GPU that running
    // jobs hold is not reported again for it (reservations name busy GPUs too: their
    // jobs end by the start). Once per (reservation, bind), at the first GPU.
    std::map<std::pair<int, int>, std::pair<const Reserved*, int>> taken;  // -> (first, GPUs)
    for (const Reserved& rg : reserved) {
      const Reserve& r = dec_.reservations[static_cast<size_t>(rg.reservation)];
      auto it =
          std::lower_bound(bound_gpus_.begin(), bound_gpus_.end(), BoundGpu{rg.slot, -1, 0, false});
      for (; it != bound_gpus_.end() && it->slot == rg.slot; ++it) {
        if (it->busy_at_start) continue;
        const Bind& b = dec_.binds[static_cast<size_t>(it->bind)];
        const PendingJob* j = PendingOf(b.job);
        if (j == nullptr || j->id == r.job) continue;
        if (j->time_limit.count() > 0 && snap_.now + j->time_limit <= r.earliest_start) continue;
        auto [t, fresh] = taken.try_emplace({rg.reservation, it->bind}, &rg, 0);
        ++t->second.second;
      }
    }
    for (const auto& [pair, first] : taken) {
      const Reserve& r = dec_.reservations[static_cast<size_t>(pair.first)];
      const PendingJob& j = *PendingOf(dec_.binds[static_cast<size_t>(pair.second)].job);
      Add(Contract::kReservation,
          "bind of " + Job(j.id) + " takes " + GpuAt(first.first->slot, first.first->gpu) +
              ", reserved for " + Job(r.job) + " from " + Relative(r.earliest_start, snap_.now) +
              ", and " +
              (j.time_limit.count() > 0
                   ? "runs past it (time limit " + FormatDuration(j.time_limit) + ")"
                   : "has no time limit") +
              More(first.second, "reserved GPU"));
    }
  }

  // "a-0 GPU 3" for a GPU slot.
  std::string GpuAt(size_t slot, int gpu) const {
    const size_t n = static_cast<size_t>(
        std::upper_bound(gpu_base_.begin(), gpu_base_.end(), slot) - gpu_base_.begin() - 1);
    return GpuName(static_cast<int>(n), gpu);
  }

  static std::string More(int count, const std::string& what) {
    return count > 1 ? " (and " + std::to_string(count - 1) + " more " + what +
                           (count > 2 ? "s" : "") + ")"
                     : "";
  }

  const Snapshot& snap_;
  const Policy& policy_;
  const Decisions& dec_;
  IdTable pending_, running_;
  std::vector<Violation> out_;

  std::unordered_map<std::string_view, int> node_by_name_;
  std::vector<size_t> gpu_base_;   // node -> first slot of its GPUs (one past the last: end)
  std::vector<bool> identity_;     // node -> its GPU list is in index order (0, 1, ...)
  std::vector<int> gpu_use_;       // slot -> thousandths in use (running jobs, then binds)
  std::vector<int> start_use_;     // slot -> thousandths running jobs use
  std::vector<JobId> gpu_holder_;  // slot -> the last job given it
  std::vector<int64_t> cpu_used_, mem_used_;  // node -> in use
  struct BoundGpu {
    size_t slot;
    int bind;  // index into Decisions::binds
    int gpu;
    bool busy_at_start;  // running jobs leave no room on it for this bind
    bool operator<(const BoundGpu& o) const {
      return std::tie(slot, bind) < std::tie(o.slot, o.bind);
    }
  };
  std::vector<BoundGpu> bound_gpus_;
  // Per bind, kept to save allocations: its nodes, leaves, NVLink domains and models.
  std::vector<int> scratch_nodes_;
  std::vector<std::string_view> scratch_leaves_, scratch_domains_, scratch_models_;

  bool implicit_ = false;
  std::vector<Queue> implicit_queues_;
  std::map<std::pair<std::string_view, std::string_view>, int> queue_by_name_;
  std::vector<int> parent_;
  std::vector<int64_t> used_start_, used_after_, added_;  // per queue, descendants included

  std::vector<int> binds_of_, waits_of_, infeasible_of_;  // pending position -> count
  std::vector<int> waiting_entry_;                        // pending position -> Waiting index
};

}  // namespace

std::string_view ContractName(Contract c) {
  switch (c) {
    case Contract::kAnswer:
      return "answer";
    case Contract::kGang:
      return "gang";
    case Contract::kPlacement:
      return "placement";
    case Contract::kQueue:
      return "queue";
    case Contract::kPreemption:
      return "preemption";
    case Contract::kReservation:
      return "reservation";
  }
  return "unknown";
}

std::vector<Violation> CheckDecisions(const Snapshot& snapshot, const Policy& policy,
                                      const Decisions& decisions) {
  return Checker(snapshot, policy, decisions).Run();
}

}  // namespace trainyard::sched
