#include "sched/schedule.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>
#include <map>
#include <queue>
#include <span>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "sched/backfill.h"
#include "sched/index.h"
#include "sched/placement.h"
#include "sched/preemption.h"
#include "sched/quota.h"

namespace trainyard::sched {
namespace {

// A small fixed-size key for the pass's caches (shapes, their misfits, reasons):
// hashing nine integers is far cheaper than building and hashing a string per job.
struct Key {
  std::array<int64_t, 9> v{};
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words, with a final mix
    for (int64_t x : k.v) {
      h ^= static_cast<uint64_t>(x);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h ^ (h >> 32));
  }
};

// What the pass keeps per admitted job: small, since there can be 100,000 of them
// and every byte of a pass's memory is memory new to it. The request itself is the
// shape's (ShapeReq), plus the job's excluded nodes (a range of the pass's pool).
struct JobCtx {
  const PendingJob* job = nullptr;
  int32_t queue = -1;
  int32_t shape = -1;  // index into the pass's shape table
  int64_t gpus = 0;    // at min_replicas
  int32_t excl_begin = 0;
  int32_t excl_count = 0;
};

constexpr double kBelowGuaranteePenalty = 1e15;

// "8 H100", "1 GPU", "8 GPUs".
std::string GpuCount(const NodeIndex& index, int64_t n, int type) {
  if (type >= 0) return std::to_string(n) + " " + index.TypeName(type);
  return std::to_string(n) + (n == 1 ? " GPU" : " GPUs");
}

// What one replica of `s` asks for in GPUs: "2 H100", or "250/1000 of one V100".
std::string ReplicaGpus(const NodeIndex& index, const Shape& s) {
  if (s.share <= 0) return GpuCount(index, s.gpus, s.type);
  return std::to_string(s.share) + "/1000 of one " +
         (s.type >= 0 ? index.TypeName(s.type) : std::string("GPU"));
}

std::string TopologyText(const TopologySpec& t) {
  switch (t.constraint) {
    case TopologyConstraint::kSameNode:
      return t.hard ? " on one node" : "";
    case TopologyConstraint::kSameNvlink:
      return t.hard ? " in one NVLink domain" : "";
    case TopologyConstraint::kSameLeaf:
      return t.hard ? " in one leaf" : "";
    case TopologyConstraint::kNone:
      return "";
  }
  return "";
}

std::string GpuHours(double gpu_seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", gpu_seconds / 3600.0);
  return buf;
}

// Ascending, so that the text does not depend on the order jobs sit in the snapshot.
std::string JobList(std::vector<JobId> ids) {
  std::sort(ids.begin(), ids.end());
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > 8) out += " and " + std::to_string(ids.size() - 8) + " more";
  return out;
}

class Pass {
 public:
  // `index` is a fresh NodeIndex of `snapshot`, or one kept in step with it.
  Pass(const Snapshot& snapshot, const Policy& policy, NodeIndex& index, const QueueUsage& usage)
      : snap_(snapshot), policy_(policy), index_(index), quota_(snapshot, usage) {
    auto ordering = MakeOrdering(policy.ordering);
    auto style = MakePlacementStyle(policy.placement);
    auto cost = MakePreemptionCost(policy.preemption);
    TY_CHECK_MSG(ordering.ok() && style.ok() && cost.ok(), "Schedule: invalid policy");
    ordering_ = std::move(ordering).value();
    style_ = *style;
    cost_ = std::move(cost).value();
    if (style_.fragmentation) {
      mix_ = MixOf(index_);
      style_.mix = &mix_;
    }
  }

  Decisions Run() {
    std::vector<std::pair<size_t, size_t>> by_queue;
    Admit(by_queue);
    Loop(by_queue);
    auto by_id = [](const auto& a, const auto& b) { return a.job < b.job; };
    std::sort(out_.binds.begin(), out_.binds.end(), by_id);
    std::sort(out_.preemptions.begin(), out_.preemptions.end(), by_id);
    std::sort(out_.reservations.begin(), out_.reservations.end(), by_id);
    OrderWaiting();
    std::sort(out_.infeasible.begin(), out_.infeasible.end(), by_id);
    return std::move(out_);
  }

 private:
  // Every job that stays pending gets one Waiting entry, through here.
  void Wait(const PendingJob& job, SharedText reason) {
    out_.waiting.push_back({job.id, std::move(reason)});
    waiting_pos_.push_back(static_cast<int32_t>(&job - snap_.pending.data()));
  }
  // Waiting entries by job id. When the snapshot lists pending jobs by id (the server
  // and the simulator do), their positions give that order without comparing.
  void OrderWaiting() {
    auto sort_by_id = [&] {
      std::sort(out_.waiting.begin(), out_.waiting.end(),
                [](const Waiting& a, const Waiting& b) { return a.job < b.job; });
    };
    if (!pending_by_id_) return sort_by_id();
    std::vector<int32_t> at(snap_.pending.size(), -1);  // position -> waiting entry
    for (size_t w = 0; w < waiting_pos_.size(); ++w) {
      int32_t& slot = at[waiting_pos_[w]];
      if (slot >= 0) return sort_by_id();  // two entries for one job: keep both, sorted
      slot = static_cast<int32_t>(w);
    }
    std::vector<Waiting> ordered;
    ordered.reserve(out_.waiting.size());
    for (int32_t w : at) {
      if (w >= 0) ordered.push_back(std::move(out_.waiting[w]));
    }
    out_.waiting = std::move(ordered);
  }

  // Step 1: sort jobs into infeasible, not-yet-eligible and candidates per queue.
  // Contexts end up in ctxs_; order_ lists them grouped by queue, each queue's in
  // its order, and by_queue holds each queue's [begin, end) range of order_.
  void Admit(std::vector<std::pair<size_t, size_t>>& by_queue) {
    ctxs_.reserve(snap_.pending.size());
    order_.reserve(snap_.pending.size());
    out_.waiting.reserve(snap_.pending.size());
    waiting_pos_.reserve(snap_.pending.size());
    for (const PendingJob& job : snap_.pending) {
      pending_by_id_ = pending_by_id_ && (&job == snap_.pending.data() || (&job - 1)->id < job.id);
      const int queue = quota_.Find(job.tenant, job.queue);
      if (queue < 0) {
        out_.infeasible.push_back({job.id, quota_.Unusable(job.tenant, job.queue)});
        continue;
      }
      JobCtx ctx;
      ctx.job = &job;
      ctx.queue = queue;
      GangRequest req;
      Shape& s = req.shape;
      s.gpus = static_cast<int>(std::min<int64_t>(job.per_replica.gpus, 1 << 20));
      s.share = ShareOf(job.per_replica);
      s.cpu = job.per_replica.milli_cpus;
      s.mem = job.per_replica.memory_bytes;
      s.gpu_memory = job.per_replica.gpu_memory_bytes;
      s.replicas = std::max(1, std::min(job.min_replicas, job.replicas));
      req.max_replicas = std::max(job.replicas, s.replicas);
      req.topology = job.topology;
      ctx.gpus = SaturatingMul(s.gpus, s.replicas);
      if (!job.per_replica.gpu_type.empty() && s.gpus > 0) {
        s.type = TypeOf(job.per_replica.gpu_type);
        if (s.type < 0) {
          out_.infeasible.push_back({job.id, "asks for " +
                                                 NormalizeGpuType(job.per_replica.gpu_type) +
                                                 " GPUs; this cluster has " + TypeList()});
          continue;
        }
      }
      ctx.excl_begin = static_cast<int32_t>(excluded_pool_.size());
      for (const std::string& name : job.excluded_nodes) {
        int n = index_.NodeByName(name);
        if (n >= 0) excluded_pool_.push_back(n);
      }
      std::sort(excluded_pool_.begin() + ctx.excl_begin, excluded_pool_.end());
      excluded_pool_.erase(
          std::unique(excluded_pool_.begin() + ctx.excl_begin, excluded_pool_.end()),
          excluded_pool_.end());  // a node named twice is excluded once
      ctx.excl_count = static_cast<int32_t>(excluded_pool_.size()) - ctx.excl_begin;
      ctx.shape = InternShape(req);

      if (int64_t ceiling = quota_.Ceiling(ctx.queue); ctx.gpus > ceiling) {
        out_.infeasible.push_back({job.id, "needs " + std::to_string(ctx.gpus) + " GPUs; queue '" +
                                               job.queue + "' may never hold more than " +
                                               std::to_string(ceiling)});
        continue;
      }
      if (std::string why = NeverFits(ctx); !why.empty()) {
        out_.infeasible.push_back({job.id, why});
        continue;
      }
      if (job.held) {
        Wait(job, held_text_);
        continue;
      }
      if (job.eligible_time > snap_.now) {
        Wait(job, "retry backoff until " + FormatTimestamp(job.eligible_time));
        continue;
      }
      order_.push_back(
          {ctx.queue, ordering_->KeyOf(job, 0, false), static_cast<int32_t>(ctxs_.size())});
      ctxs_.push_back(ctx);
    }
    // The visiting order, queue by queue, each by key and then snapshot order: one
    // sort of compact entries in place (contexts stay where they are; moving them
    // would write every one of them again, into memory new to the pass).
    std::sort(order_.begin(), order_.end(), [](const Visit& a, const Visit& b) {
      return std::tie(a.queue, a.key, a.ctx) < std::tie(b.queue, b.key, b.ctx);
    });
    for (size_t i = 0; i < order_.size(); ++i) {
      const size_t q = static_cast<size_t>(order_[i].queue);
      if (by_queue.size() <= q) by_queue.resize(q + 1, {i, i});
      if (by_queue[q].first == by_queue[q].second) by_queue[q].first = i;
      by_queue[q].second = i + 1;
    }
  }

  // Steps 2-5.
  void Loop(const std::vector<std::pair<size_t, size_t>>& by_queue) {
    using Entry = std::pair<Ordering::Key, int>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heads;
    std::vector<size_t> next(by_queue.size());
    for (size_t q = 0; q < by_queue.size(); ++q) next[q] = by_queue[q].first;
    // The entry for queue q's next job; false when the queue has none left.
    auto head = [&](int q, Entry& e) {
      const size_t i = next[q];
      if (i >= by_queue[q].second) return false;
      // What the jobs a few steps ahead will read, in no useful order in memory: their
      // contexts first, then (once those have arrived) their jobs and shapes.
      constexpr size_t kAhead = 4;
      if (i + 2 * kAhead < by_queue[q].second)
        __builtin_prefetch(&ctxs_[order_[i + 2 * kAhead].ctx]);
      if (i + kAhead < by_queue[q].second) {
        const JobCtx& ahead = ctxs_[order_[i + kAhead].ctx];
        __builtin_prefetch(ahead.job);
        __builtin_prefetch(&shapes_[ahead.shape]);
      }
      const JobCtx& c = ctxs_[order_[i].ctx];
      e = {ordering_->KeyOf(*c.job, quota_.Share(q), quota_.WithinGuarantee(q, c.gpus)), q};
      return true;
    };
    Entry e;
    for (size_t q = 0; q < by_queue.size(); ++q) {
      if (head(static_cast<int>(q), e)) heads.push(e);
    }
    while (!heads.empty()) {
      const int q = heads.top().second;
      heads.pop();
      Consider(ctxs_[order_[next[q]++].ctx]);
      // Mostly the same queue goes on (its share only moves when a job binds): then
      // its next job is considered without a trip through the heap.
      while (head(q, e)) {
        if (!heads.empty() && !(e < heads.top())) {
          heads.push(e);
          break;
        }
        Consider(ctxs_[order_[next[q]++].ctx]);
      }
    }
  }

  void Consider(const JobCtx& c) {
    const PendingJob& job = *c.job;
    if (fifo_blocker_ != 0) {
      Wait(job, "behind job " + std::to_string(fifo_blocker_) +
                    ", first in line (strict FIFO: no backfill)");
      return;
    }
    if (auto blocked = quota_.LimitBlocks(c.queue, c.gpus)) {
      Wait(job, std::move(*blocked));
      return;
    }
    // Free capacity only shrinks during a pass, so a shape that did not fit once
    // will not fit later in the pass.
    // An elastic gang takes no more replicas than its queue's limit allows.
    GangRequest req = FullReq(c);
    if (req.shape.gpus > 0 && req.max_replicas > req.shape.replicas) {
      int64_t room = quota_.Headroom(c.queue) / req.shape.gpus;
      req.max_replicas =
          static_cast<int>(std::clamp<int64_t>(room, req.shape.replicas, req.max_replicas));
    }
    // Excluded nodes and a lower replica ceiling only narrow a request: where its
    // shape is known not to fit, neither does it. Only the shape's own misses are
    // recorded.
    const bool cacheable = c.excl_count == 0 && req.max_replicas == ShapeReq(c).max_replicas;
    if (!KnownMisfit(c)) {
      // Locality: a job reading data staged to local disk goes to nodes that hold it
      // already when its whole gang fits there (its topology and gang rules as ever);
      // else wherever it fits, and the data is staged there.
      if (std::span<const int32_t> cached = CachedNodes(c); !cached.empty()) {
        GangRequest local = req;
        local.only = cached;
        if (auto p = PlaceGang(index_, local, style_)) {
          Bind(c, *p);
          return;
        }
      }
      if (auto p = PlaceGang(index_, req, style_)) {
        Bind(c, *p);
        return;
      }
      if (cacheable) RecordMisfit(c);
    }
    if (auto p = BackfillIntoReservations(c, req)) {
      Bind(c, *p);
      return;
    }
    search_limit_hit_ = false;
    if (TryPreempt(c)) return;
    if (search_limit_hit_ && deferred_note_.empty()) {
      deferred_note_ = "; victims not searched this pass (max_preemption_searches " +
                       std::to_string(policy_.max_preemption_searches) + " reached)";
    }
    static const std::string kNone;
    const std::string& deferred = search_limit_hit_ ? deferred_note_ : kNone;
    if (policy_.backfill && reservations_made_ < policy_.reservations) {
      std::string reason = WaitReason(c, deferred).str();  // before its own GPUs are held
      if (auto planned = ReserveEarliestStart(index_, FullReq(c), style_, bound_, claimed_)) {
        ++reservations_made_;
        Claim(planned->placement);
        out_.reservations.push_back(
            {job.id, ToPlacements(index_, planned->placement), planned->start});
        Wait(job, reason + "; reserved " + std::to_string(planned->placement.replicas.size()) +
                      " replica(s) from " + FormatTimestamp(planned->start));
        return;
      }
    }
    if (!policy_.backfill) fifo_blocker_ = job.id;
    Wait(job, WaitReason(c, deferred));
  }

  static int64_t TopologyCode(const TopologySpec& t) {
    return static_cast<int64_t>(t.constraint) * 2 + (t.hard ? 1 : 0);
  }
  // Type, replicas and topology: what decides whether per-replica needs compare.
  Key CoarseKey(const JobCtx& c) const {
    const Shape& s = ShapeReq(c).shape;
    return Key{{s.type, s.replicas, TopologyCode(ShapeReq(c).topology)}};
  }
  // GPUs in thousandths: a share that found no room means no free GPU either, so
  // a whole-GPU shape with no smaller other needs cannot fit; the converse is false.
  std::array<int64_t, 4> Needs(const JobCtx& c) const {
    const Shape& s = ShapeReq(c).shape;
    return {s.share > 0 ? s.share : SaturatingMul(s.gpus, kWholeGpu), s.cpu, s.mem, s.gpu_memory};
  }
  using NeedsCache = std::unordered_map<Key, std::vector<std::array<int64_t, 4>>, KeyHash>;
  static bool Dominated(const NeedsCache& cache, const Key& key,
                        const std::array<int64_t, 4>& need) {
    auto it = cache.find(key);
    if (it == cache.end()) return false;
    for (const auto& f : it->second) {
      if (f[0] <= need[0] && f[1] <= need[1] && f[2] <= need[2] && f[3] <= need[3]) return true;
    }
    return false;
  }
  static void Record(NeedsCache& cache, const Key& key, const std::array<int64_t, 4>& need) {
    auto& list = cache[key];
    if (list.size() < 64) list.push_back(need);
  }
  // A shape found not to fit stays so for the rest of the pass; the dominance test
  // runs at most once per shape until then.
  // The nodes (index ids, sorted) whose dataset cache holds every version `c`'s job
  // reads staged; empty when it reads none or no node holds them all.
  std::span<const int32_t> CachedNodes(const JobCtx& c) {
    const PendingJob& job = *c.job;
    if (job.data_versions.empty()) return {};
    if (!cached_gathered_) {
      cached_gathered_ = true;
      for (const Node& n : snap_.nodes) {
        const int id = index_.NodeByName(n.name);
        if (id < 0) continue;
        for (const std::string& v : n.cached_data) cached_[v].push_back(id);
      }
      for (auto& [v, ids] : cached_) std::sort(ids.begin(), ids.end());
    }
    locality_.clear();
    for (size_t i = 0; i < job.data_versions.size(); ++i) {
      auto it = cached_.find(job.data_versions[i]);
      if (it == cached_.end()) return {};
      if (i == 0) {
        locality_ = it->second;
        continue;
      }
      std::vector<int32_t> both;
      std::set_intersection(locality_.begin(), locality_.end(), it->second.begin(),
                            it->second.end(), std::back_inserter(both));
      locality_.swap(both);
    }
    return locality_;
  }

  bool KnownMisfit(const JobCtx& c) {
    ShapeInfo& info = shapes_[c.shape];
    if (!info.misfit && Dominated(misfit_, CoarseKey(c), Needs(c))) info.misfit = true;
    return info.misfit;
  }
  void RecordMisfit(const JobCtx& c) {
    shapes_[c.shape].misfit = true;
    Record(misfit_, CoarseKey(c), Needs(c));
  }

  void Claim(const GangPlacement& p) {
    ++version_;  // called whenever GPUs are reserved
    for (const auto& [n, mask] : p.replicas) {
      claimed_[n] |= mask;
      MarkClaimed(n, mask);
    }
  }
  // Pool victims holding any of `mask` on node `n` may no longer be chosen.
  void MarkClaimed(int32_t n, uint64_t mask) {
    if (!pool_) return;  // the pool, once built, marks what was claimed before
    for (int k : pool_->VictimsOn(n)) {
      for (const auto* r = pool_->replicas_begin(k); r != pool_->replicas_end(k); ++r) {
        if (r->node == n && (r->mask & mask) != 0) facts_[k].claimed = true;
      }
    }
  }

  // Jobs that may ever be victims in this pass, by ascending priority; once per pass
  // and only when preemption is considered.
  void EnsurePreemptible() {
    if (preemptible_known_) return;
    preemptible_known_ = true;
    for (size_t i = 0; i < snap_.running.size(); ++i) {
      const RunningJob& v = snap_.running[i];
      if (!v.preemptible && !v.preempting) continue;
      if (!v.preempting && snap_.now - v.start_time < policy_.min_runtime) continue;
      // The victim search counts whole GPUs freed; a share frees its GPU only with
      // the other shares on it, which the search does not model.
      if (ShareOf(v.per_replica) > 0) continue;
      preemptible_.push_back(static_cast<int>(i));
    }
    std::stable_sort(preemptible_.begin(), preemptible_.end(), [&](int a, int b) {
      return snap_.running[a].priority < snap_.running[b].priority;
    });
    preemptible_priority_.reserve(preemptible_.size());
    for (int i : preemptible_) preemptible_priority_.push_back(snap_.running[i].priority);
  }

  // Once per pass and only when preemption is considered: the pool of victims with
  // their costs, and what the victim scan reads of each.
  void EnsureRunningInfo() {
    if (pool_) return;
    index_.EnsureHeld();
    std::vector<double> costs(preemptible_.size());
    facts_.resize(preemptible_.size());
    pool_pos_.assign(snap_.running.size(), -1);
    for (size_t k = 0; k < preemptible_.size(); ++k) {
      const RunningJob& v = snap_.running[preemptible_[k]];
      costs[k] = cost_ ? cost_->Cost(v, snap_.now, policy_) : 0;
      facts_[k] = {v.priority, quota_.Find(v.tenant, v.queue), v.Gpus(), v.preempting, false,
                   false};
      pool_pos_[preemptible_[k]] = static_cast<int32_t>(k);
    }
    pool_.emplace(index_, preemptible_, costs);
    use_.assign(preemptible_.size(), VictimUse::kNo);
    for (const auto& [n, mask] : claimed_) MarkClaimed(n, mask);
  }

  void Bind(const JobCtx& c, const GangPlacement& p) {
    ++version_;
    Commit(index_, p, ShapeReq(c).shape);
    Resources total = c.job->per_replica;
    total = Scale(total, static_cast<int64_t>(p.replicas.size()));
    quota_.Add(c.queue, total);
    out_.binds.push_back({c.job->id, ToPlacements(index_, p)});
    bound_.push_back({p, ShapeReq(c).shape, c.job->time_limit});
  }

  // A job whose time limit ends before some reservations start may use their GPUs.
  std::optional<GangPlacement> BackfillIntoReservations(const JobCtx& c, const GangRequest& req) {
    if (reservations_made_ == 0 || c.job->time_limit.count() <= 0) return std::nullopt;
    const Timestamp end = snap_.now + c.job->time_limit;
    // Which reservations lend GPUs depends only on the job's end time, and the lent
    // set only grows with it; capacity only shrinks: a miss stays a miss. Counting
    // the lenders needs no change to the index, so a known miss costs a search.
    const size_t lenders = LendersFrom(end);
    if (lenders == 0) return std::nullopt;
    const Key key{{c.shape, static_cast<int64_t>(lenders)}};
    const bool cacheable = c.excl_count == 0 && req.max_replicas == ShapeReq(c).max_replicas;
    if (backfill_misfit_.count(key)) return std::nullopt;  // narrower requests miss too
    std::vector<std::tuple<int32_t, uint64_t, Timestamp>> lent;
    lent.reserve(lenders);
    for (int32_t n : index_.ReservedNodes()) {
      const NodeSlot& s = index_.slot(n);
      if (s.reserved_from >= end) lent.emplace_back(n, s.reserved_mask, s.reserved_from);
    }
    for (const auto& [n, mask, from] : lent) index_.Unreserve(n, mask);
    std::optional<GangPlacement> p = PlaceGang(index_, req, style_);
    if (!p && cacheable) backfill_misfit_.insert(key);
    if (p) Commit(index_, *p, req.shape);
    for (const auto& [n, mask, from] : lent) index_.Reserve(n, mask, from);
    if (p) {
      Uncommit(index_, *p, req.shape);  // Bind commits it again
    } else {
      lenders_epoch_ = index_.ReservationEpoch();  // the reservations are as they were
    }
    return p;
  }

  // How many reserved nodes have all their reservations start at or after `end`.
  size_t LendersFrom(Timestamp end) {
    if (lenders_epoch_ != index_.ReservationEpoch()) {
      lender_starts_.clear();
      for (int32_t n : index_.ReservedNodes())
        lender_starts_.push_back(index_.slot(n).reserved_from);
      std::sort(lender_starts_.begin(), lender_starts_.end());
      lenders_epoch_ = index_.ReservationEpoch();
    }
    return static_cast<size_t>(lender_starts_.end() -
                               std::lower_bound(lender_starts_.begin(), lender_starts_.end(), end));
  }

  bool TryPreempt(const JobCtx& c) {
    if (!cost_ || c.gpus <= 0) return false;
    const PendingJob& job = *c.job;
    const bool within = quota_.WithinGuarantee(c.queue, c.gpus);
    // Candidates only dwindle during a pass: a shape that found no victims at this
    // priority, queue and guarantee standing will not, nor will any larger one.
    Key key = CoarseKey(c);
    key.v[3] = job.priority;
    key.v[4] = c.queue;
    key.v[5] = within ? 1 : 0;
    if (c.excl_count == 0 && Dominated(no_victims_, key, Needs(c))) return false;
    EnsurePreemptible();
    // Only jobs of lower priority can be victims, except when reclaiming a guarantee.
    const size_t scan =
        within ? preemptible_.size()
               : static_cast<size_t>(std::lower_bound(preemptible_priority_.begin(),
                                                      preemptible_priority_.end(), job.priority) -
                                     preemptible_priority_.begin());
    if (scan == 0) return false;
    if (searches_ >= policy_.max_preemption_searches) {
      search_limit_hit_ = true;
      return false;
    }
    EnsureRunningInfo();
    bool any = false;
    std::fill(use_.begin(), use_.begin() + static_cast<ptrdiff_t>(use_end_), VictimUse::kNo);
    use_end_ = scan;  // every entry from here on is still kNo
    for (size_t k = 0; k < scan; ++k) {
      const VictimFacts& v = facts_[k];
      if (v.taken || v.claimed) continue;
      const int vq = v.queue;
      bool borrowing = vq >= 0 && quota_.Borrowing(vq);
      bool by_priority = v.priority < job.priority && (vq == c.queue || borrowing);
      bool by_reclaim = within && vq != c.queue && borrowing;
      if (v.preempting || by_priority || by_reclaim) {
        // Reclaim takes back what a queue borrows: a victim that would take its queue
        // below its own guarantee is the last resort.
        use_[k] = !v.preempting && !by_priority && quota_.Used(vq) - v.gpus < quota_.Guaranteed(vq)
                      ? VictimUse::kLastResort
                      : VictimUse::kYes;
        any = true;
      }
    }
    std::optional<VictimSet> found;
    if (any) {
      ++searches_;
      found = FindVictims(index_, FullReq(c), style_, *pool_, use_, kBelowGuaranteePenalty,
                          policy_.max_victims);
    }
    if (!found) {
      if (c.excl_count == 0) Record(no_victims_, key, Needs(c));
      return false;
    }
    // Hold the free part of the planned placement so that no later job in this pass
    // takes it; the rest frees up as the victims stop.
    std::string reason = WaitReason(c).str();
    for (const auto& [n, mask] : found->placement.replicas) {
      index_.Reserve(n, mask & index_.slot(n).free_mask, snap_.now);
    }
    Claim(found->placement);
    out_.reservations.push_back({job.id, ToPlacements(index_, found->placement), snap_.now});
    std::vector<JobId> fresh, draining;
    for (int i : found->running) {
      const RunningJob& v = snap_.running[i];
      if (pool_pos_[i] >= 0) facts_[pool_pos_[i]].taken = true;
      if (v.preempting) {
        draining.push_back(v.id);
        continue;
      }
      Timestamp since = v.start_time;
      if (v.last_checkpoint && *v.last_checkpoint > since) since = *v.last_checkpoint;
      Duration lost =
          std::chrono::duration_cast<Duration>(snap_.now - since) * std::max<int64_t>(v.Gpus(), 1);
      int vq = quota_.Find(v.tenant, v.queue);
      std::string why;
      if (v.priority < job.priority && (vq == c.queue || quota_.Borrowing(vq))) {
        why = "preempted by job " + std::to_string(job.id) + " (priority " +
              std::to_string(job.priority) + " > " + std::to_string(v.priority) + ")";
      } else {
        why = "reclaimed by queue '" + job.queue + "' (below its guarantee of " +
              std::to_string(quota_.Guaranteed(c.queue)) + " GPUs) from queue '" + v.queue +
              "', which is borrowing";
      }
      out_.preemptions.push_back({v.id, job.id, lost, why});
      fresh.push_back(v.id);
    }
    if (!fresh.empty()) {
      double lost_s = 0;
      for (const auto& p : out_.preemptions) {
        if (p.for_job == job.id) lost_s += std::chrono::duration<double>(p.lost_gpu_time).count();
      }
      reason += "; preempting job(s) " + JobList(fresh) + " to make room (" + GpuHours(lost_s) +
                " GPU-hours since their checkpoints)";
    }
    if (!draining.empty()) reason += "; waiting for job(s) " + JobList(draining) + " to stop";
    Wait(job, std::move(reason));
    return true;
  }

  // The reason text depends on the shape and the free capacity only; jobs of one
  // shape share it until the index changes.
  SharedText WaitReason(const JobCtx& c, const std::string& suffix = "") {
    if (c.excl_count != 0) return ComposeWaitReason(c) + suffix;
    ShapeInfo& info = shapes_[c.shape];
    const int k = suffix.empty() ? 0 : 1;  // the only suffix is the deferred-search note
    if (info.reason_version[k] != version_) {
      info.reason[k] = ComposeWaitReason(c) + suffix;
      info.reason_version[k] = version_;
    }
    return info.reason[k];
  }

  // "waiting for <what>[; <free now>][<what else>]": the first and last parts are
  // the shape's and composed once; the middle is the free capacity of a GPU type,
  // composed once per type each time capacity changes.
  std::string ComposeWaitReason(const JobCtx& c) {
    const Shape& s = ShapeReq(c).shape;
    ShapeInfo& info = shapes_[c.shape];
    if (!info.wait_known) {
      info.wait_known = true;
      info.wait_head = "waiting for ";
      if (s.gpus == 0) {
        info.wait_head +=
            std::to_string(s.replicas) + " replica(s) of " + Describe(c.job->per_replica);
      } else {
        if (s.replicas > 1) {
          info.wait_head += std::to_string(s.replicas) + " x " + ReplicaGpus(index_, s);
          if (s.share == 0) info.wait_head += " (" + std::to_string(c.gpus) + " in all)";
        } else {
          info.wait_head += ReplicaGpus(index_, s);
        }
        info.wait_head += TopologyText(ShapeReq(c).topology);
        if (s.cpu > 0 || s.mem > 0)
          info.wait_tail = " (each replica also needs " + Describe(c.job->per_replica) + ")";
      }
    }
    if (s.gpus == 0) return info.wait_head;
    const std::string& free = FreeText(s.type);
    std::string out;
    out.reserve(info.wait_head.size() + free.size() + info.wait_tail.size() + 64);
    out += info.wait_head;
    out += free;
    out += info.wait_tail;
    if (c.excl_count != 0) out += "; " + std::to_string(c.excl_count) + " node(s) excluded";
    return out;
  }

  // "; 96 H100 free, at most 8 on one node" for `type` (-1: any), as of now.
  const std::string& FreeText(int type) {
    const size_t k = static_cast<size_t>(type + 1);
    if (free_text_.size() <= k) free_text_.resize(k + 1, {-1, ""});
    auto& [version, text] = free_text_[k];
    if (version != version_) {
      const int max_free = index_.MaxFree(type);
      text = "; " + GpuCount(index_, index_.FreeGpus(type), type) + " free";
      if (max_free > 0) text += ", at most " + std::to_string(max_free) + " on one node";
      version = version_;
    }
    return text;
  }

  // Replica capacity of an empty cluster for one GPU type (-1: GPU-less shapes).
  struct EmptyCapacity {
    int64_t best_node = 0;
    int64_t total = 0;
    int64_t best_leaf = 0;
    int64_t best_domain = 0;
  };
  using NodeClass = NodeIndex::NodeClass;

  // Replicas of the job's shape one node of class `cls` holds when empty.
  int64_t ClassFit(const NodeClass& cls, const Shape& s, int type) const {
    int64_t fit = int64_t{1} << 30;
    if (s.gpus > 0) {
      if (cls.type != type || s.gpu_memory > cls.gpu_memory) return 0;
      fit = cls.gpus / s.gpus;
    }
    if (s.cpu > 0) fit = std::min(fit, cls.cpu / s.cpu);
    if (s.mem > 0) fit = std::min(fit, cls.mem / s.mem);
    return fit;
  }

  // Per-leaf capacity (best_leaf) only when `need_leaf`: it costs a pass over the
  // leaves, and only a hard same-leaf constraint asks for it.
  EmptyCapacity CapacityOfType(const JobCtx& c, int type, bool need_leaf) {
    index_.EnsureClasses();
    const std::vector<NodeClass>& classes = index_.Classes();
    const Shape& s = ShapeReq(c).shape;
    // Excluded nodes as (class, leaf), sorted: a job excludes a few nodes, so they are
    // subtracted from the counts rather than looked up for every class and leaf.
    std::vector<std::pair<int, int>> excluded;
    excluded.reserve(Excl(c).size());
    for (int32_t n : Excl(c)) excluded.emplace_back(index_.ClassOf(n), index_.slot(n).leaf);
    std::sort(excluded.begin(), excluded.end());
    auto excluded_in = [&](std::pair<int, int> from, std::pair<int, int> to) {
      return std::lower_bound(excluded.begin(), excluded.end(), to) -
             std::lower_bound(excluded.begin(), excluded.end(), from);
    };
    EmptyCapacity cap;
    std::vector<int64_t> per_leaf(need_leaf ? index_.LeafCount() : 0, 0);
    for (size_t k = 0; k < classes.size(); ++k) {
      const NodeClass& cls = classes[k];
      const int64_t fit = ClassFit(cls, s, type);
      if (fit <= 0) continue;
      const int cls_id = static_cast<int>(k);
      int64_t left_in_class = cls.count - excluded_in({cls_id, 0}, {cls_id + 1, 0});
      if (need_leaf) {
        for (const auto& [leaf, count] : cls.per_leaf) {
          const int64_t n = count - excluded_in({cls_id, leaf}, {cls_id, leaf + 1});
          if (n > 0) per_leaf[leaf] = SaturatingAdd(per_leaf[leaf], SaturatingMul(fit, n));
        }
      }
      if (left_in_class == 0) continue;
      cap.best_node = std::max(cap.best_node, fit);
      cap.total = SaturatingAdd(cap.total, SaturatingMul(fit, left_in_class));
      if (s.gpus > 0)
        cap.best_domain =
            std::max(cap.best_domain, std::min<int64_t>(fit, cls.max_domain / s.gpus));
    }
    for (int64_t v : per_leaf) cap.best_leaf = std::max(cap.best_leaf, v);
    if (index_.DomainsSpanNodes() && s.gpus > 0) cap.best_domain = DomainCapacityByNodes(c, type);
    return cap;
  }

  // Same-NVLink capacity when domains span nodes: summed over the nodes sharing one.
  int64_t DomainCapacityByNodes(const JobCtx& c, int type) const {
    const Shape& s = ShapeReq(c).shape;
    const std::span<const int32_t> excl = Excl(c);
    std::unordered_map<int32_t, int64_t> per_domain;
    for (int n = 0; n < index_.NodeCount(); ++n) {
      if (std::binary_search(excl.begin(), excl.end(), n)) continue;
      const NodeSlot& slot = index_.slot(n);
      const int64_t fit = ClassFit(index_.Classes()[index_.ClassOf(n)], s, type);
      if (fit <= 0) continue;
      for (size_t d = 0; d < slot.nvlink_masks.size(); ++d) {
        per_domain[slot.nvlink_ids[d]] +=
            std::min<int64_t>(fit, __builtin_popcountll(slot.nvlink_masks[d]) / s.gpus);
      }
    }
    int64_t best = 0;
    for (const auto& [d, v] : per_domain) best = std::max(best, v);
    return best;
  }

  // Why the job could not run even on an empty cluster; empty when it could. A gang
  // is one GPU type, so an untyped gang must fit within one type.
  std::string NeverFits(const JobCtx& c) {
    // Cached for jobs without excluded nodes only: exclusions change the answer.
    if (c.excl_count == 0 && shapes_[c.shape].never_known) return shapes_[c.shape].never;
    const Shape& s = ShapeReq(c).shape;
    const PendingJob& job = *c.job;
    const TopologySpec& topo = ShapeReq(c).topology;
    auto fits = [&](const EmptyCapacity& cap) {
      if (cap.best_node == 0 || cap.total < s.replicas) return false;
      if (!topo.hard) return true;
      switch (topo.constraint) {
        case TopologyConstraint::kSameNode:
          return cap.best_node >= s.replicas;
        case TopologyConstraint::kSameLeaf:
          return cap.best_leaf >= s.replicas;
        case TopologyConstraint::kSameNvlink:
          return (s.gpus > 0 ? cap.best_domain : cap.best_node) >= s.replicas;  // no GPUs: one node
        case TopologyConstraint::kNone:
          return true;
      }
      return true;
    };
    // The type that comes closest, for the message.
    EmptyCapacity best;
    // The types to try: -1 alone for GPU-less shapes, the asked-for type, or all.
    const int first_type = s.gpus <= 0 ? -1 : std::max<int>(s.type, 0);
    const int end_type = s.gpus <= 0 || s.type >= 0 ? first_type + 1 : index_.TypeCount();
    bool ok = false;
    for (int t = first_type; t < end_type; ++t) {
      EmptyCapacity cap =
          CapacityOfType(c, t, topo.hard && topo.constraint == TopologyConstraint::kSameLeaf);
      if (fits(cap)) {
        ok = true;
        break;
      }
      if (cap.total > best.total) best = cap;
    }
    std::string why;
    if (!ok) {
      const std::string what = s.gpus > 0 ? ReplicaGpus(index_, s) : Describe(job.per_replica);
      const std::string excluding =
          c.excl_count == 0
              ? ""
              : " (excluding its " + std::to_string(c.excl_count) + " excluded node(s))";
      const std::string one_type = s.gpus > 0 && s.type < 0 && index_.TypeCount() > 1
                                       ? " of any one GPU type (a gang does not mix types)"
                                       : "";
      if (best.best_node == 0) {
        why = "asks for " + Describe(job.per_replica) + " per replica; no node" +
              (c.excl_count == 0 ? "" : " outside its excluded nodes") + " has that much";
        if (s.gpus > 0) {
          int64_t most = 0;
          for (int n = 0; n < index_.NodeCount(); ++n) {
            const NodeSlot& slot = index_.slot(n);
            if (s.type < 0 || slot.type == s.type) most = std::max<int64_t>(most, slot.gpu_count);
          }
          why += " (the largest " + (s.type >= 0 ? index_.TypeName(s.type) : std::string("GPU")) +
                 " node has " + std::to_string(most) + " GPUs)";
        }
      } else if (best.total < s.replicas) {
        why = "needs " + std::to_string(s.replicas) + " replicas of " + what +
              "; the whole cluster holds at most " + std::to_string(best.total) + one_type +
              excluding;
      } else {
        int64_t most = 0;
        std::string where;
        switch (topo.constraint) {
          case TopologyConstraint::kSameNode:
            most = best.best_node;
            where = "one node";
            break;
          case TopologyConstraint::kSameLeaf:
            most = best.best_leaf;
            where = "one leaf";
            break;
          case TopologyConstraint::kSameNvlink:
            most = best.best_domain;
            where = "one NVLink domain";
            break;
          case TopologyConstraint::kNone:
            most = best.total;
            break;
        }
        why = "needs " + std::to_string(s.replicas) + " replicas of " + what + " in " + where +
              " (hard constraint); the largest holds " + std::to_string(most) + excluding;
      }
    }
    if (c.excl_count == 0) {
      shapes_[c.shape].never = why;
      shapes_[c.shape].never_known = true;
    }
    return why;
  }

  // Jobs of one shape (resources per replica, replicas, topology) share what the pass
  // learns about it: whether it could ever fit, whether it fits now, the reason text.
  struct ShapeInfo {
    GangRequest req;  // what every job of the shape asks for (no exclusions)
    bool never_known = false;
    bool misfit = false;
    std::string never;  // why it can never fit; empty when it can
    std::array<int64_t, 2> reason_version{-1, -1};
    std::array<SharedText, 2> reason;  // without and with the deferred-search note
    bool wait_known = false;
    std::string wait_head, wait_tail;  // of the reason, around the free capacity
  };
  int InternShape(const GangRequest& req) {
    const Shape& s = req.shape;
    const Key key{{s.type, s.gpus, s.cpu, s.mem, s.gpu_memory, s.replicas, req.max_replicas,
                   TopologyCode(req.topology), s.share}};
    // Open addressing over shape ids: one table, no allocation per shape.
    if ((shapes_.size() + 1) * 2 > shape_slots_.size()) {
      std::vector<int32_t> old(std::max<size_t>(1024, shape_slots_.size() * 2), -1);
      old.swap(shape_slots_);
      for (int32_t id : old) {
        if (id >= 0) shape_slots_[ShapeSlot(shape_keys_[id])] = id;
      }
    }
    int32_t& id = shape_slots_[ShapeSlot(key)];
    if (id < 0) {
      id = static_cast<int32_t>(shapes_.size());
      shape_keys_.push_back(key);
      shapes_.emplace_back().req = req;
    }
    return id;
  }
  // Where `key`'s shape id is in shape_slots_, or the empty slot where it would go.
  size_t ShapeSlot(const Key& key) const {
    const size_t mask = shape_slots_.size() - 1;
    for (size_t i = KeyHash{}(key)&mask;; i = (i + 1) & mask) {
      if (shape_slots_[i] < 0 || shape_keys_[shape_slots_[i]] == key) return i;
    }
  }

  // The index's type for a spelling, remembered: jobs spell a few models many times.
  int16_t TypeOf(const std::string& spelled) {
    for (const auto& [seen, type] : type_memo_) {
      if (seen == spelled) return type;
    }
    const int16_t type = index_.TypeOf(spelled);
    if (type_memo_.size() < 16) type_memo_.emplace_back(spelled, type);
    return type;
  }

  const GangRequest& ShapeReq(const JobCtx& c) const { return shapes_[c.shape].req; }
  std::span<const int32_t> Excl(const JobCtx& c) const {
    return {excluded_pool_.data() + c.excl_begin, static_cast<size_t>(c.excl_count)};
  }
  // The job's request: its shape's, with its excluded nodes.
  GangRequest FullReq(const JobCtx& c) const {
    GangRequest req = ShapeReq(c);
    req.excluded = Excl(c);
    return req;
  }

  std::string TypeList() const {
    std::string out;
    for (int t = 0; t < index_.TypeCount(); ++t) out += (t ? ", " : "") + index_.TypeName(t);
    return out.empty() ? "no GPUs" : out;
  }

  const Snapshot& snap_;
  const Policy& policy_;
  NodeIndex& index_;
  QuotaState quota_;
  std::unique_ptr<Ordering> ordering_;
  PlacementStyle style_;
  WorkloadMix mix_;  // for fragmentation-aware placement only
  std::unique_ptr<PreemptionCost> cost_;
  Decisions out_;
  std::vector<PassBind> bound_;  // gangs bound so far in this pass
  Claims claimed_;               // busy GPUs earlier jobs of this pass count on
  int64_t version_ = 0;          // bumped whenever free capacity changes
  std::vector<JobCtx> ctxs_;     // admitted jobs, in snapshot order
  // The order the loop visits them: queue by queue, each queue's in its order.
  struct Visit {
    int32_t queue;
    Ordering::Key key;
    int32_t ctx;  // index into ctxs_
  };
  std::vector<Visit> order_;
  std::vector<int32_t> waiting_pos_;    // per out_.waiting entry: its job's snapshot position
  bool pending_by_id_ = true;           // the snapshot lists pending jobs by ascending id
  std::vector<int32_t> excluded_pool_;  // every job's excluded nodes, sorted per job
  // Locality: the nodes whose dataset cache holds each version (index ids, sorted),
  // gathered at the first job of the pass that reads staged data; and the nodes
  // holding every version of the job being placed.
  bool cached_gathered_ = false;
  std::map<std::string_view, std::vector<int32_t>> cached_;
  std::vector<int32_t> locality_;
  std::vector<std::pair<std::string_view, int16_t>> type_memo_;  // views of the snapshot
  std::vector<int32_t> shape_slots_;  // hash table of shape ids (-1: empty), size 2^k
  std::vector<Key> shape_keys_;       // by shape id
  std::vector<ShapeInfo> shapes_;
  std::vector<std::pair<int64_t, std::string>> free_text_;  // by type + 1: (version, text)
  bool preemptible_known_ = false;
  std::vector<int> preemptible_;               // indices into running, ascending priority
  std::vector<int32_t> preemptible_priority_;  // their priorities, side by side
  // Shapes that did not fit, by (type, replicas, topology): any shape needing at
  // least as much of everything will not fit either.
  NeedsCache misfit_;
  std::unordered_set<Key, KeyHash> backfill_misfit_;
  std::vector<Timestamp> lender_starts_;   // reserved_from of every reserved node, ascending
  uint64_t lenders_epoch_ = ~uint64_t{0};  // the index's reservation epoch they are of
  NeedsCache no_victims_;
  // What the victim scan reads of each pool victim, side by side: a running job's
  // record is large, and a scan visits thousands of them.
  struct VictimFacts {
    int32_t priority;
    int32_t queue;  // -1: not a queue of this cluster
    int64_t gpus;
    bool preempting;
    bool taken;            // already a victim in this pass
    bool claimed = false;  // holds GPUs an earlier job of this pass counts on
  };
  std::vector<VictimFacts> facts_;  // by pool position
  std::vector<int32_t> pool_pos_;   // running job -> pool position, -1 if not in the pool
  std::optional<VictimPool> pool_;  // built on the first victim search of the pass
  std::vector<VictimUse> use_;      // per pool victim, for the current search
  size_t use_end_ = 0;              // use_ is kNo from here on
  int reservations_made_ = 0;
  int searches_ = 0;               // victim searches so far in this pass
  bool search_limit_hit_ = false;  // the job considered now skipped its victim search
  std::string deferred_note_;      // what a reason says when it did
  JobId fifo_blocker_ = 0;
  const SharedText held_text_{"held; release it to schedule"};
};

}  // namespace

Decisions Schedule(const Snapshot& snapshot, const Policy& policy) {
  NodeIndex index(snapshot);
  return Pass(snapshot, policy, index, QueueUsage(snapshot)).Run();
}

SnapshotIndex::SnapshotIndex(const Snapshot& snapshot)
    : snapshot_(&snapshot),
      index_(std::make_unique<NodeIndex>(snapshot)),
      usage_(std::make_unique<QueueUsage>(snapshot)) {}

SnapshotIndex::~SnapshotIndex() = default;

void SnapshotIndex::RunningAdded(const RunningJob& job) {
  index_->RunningAdded(job);
  usage_->Add(job, 1);
}

void SnapshotIndex::RunningRemoved(const RunningJob& job) {
  index_->RunningRemoved(job);
  usage_->Add(job, -1);
}

void SnapshotIndex::NodeStateChanged(size_t node) { index_->NodeStateChanged(node); }

Decisions Schedule(const Snapshot& snapshot, const Policy& policy, SnapshotIndex& kept) {
  TY_CHECK_MSG(&snapshot == kept.snapshot_, "Schedule: a SnapshotIndex of another snapshot");
  kept.index_->BeginPass();
  Decisions d = Pass(snapshot, policy, *kept.index_, *kept.usage_).Run();
  kept.index_->EndPass();
  return d;
}

}  // namespace trainyard::sched
