// Property tests of sched::Schedule: invariants that must hold for every cluster,
// workload and policy, checked over thousands of random snapshots from fixed seeds
// (sched/testing.h). The decision contract is sched/contract.h's checker, one part per
// test; the properties that need more than one pass (determinism, order independence,
// infeasible means never) are here. A failing case is shrunk (pending jobs, running jobs, nodes and
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

#include "sched/contract.h"
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

// --- The decision contract -------------------------------------------------------------

using Violations = std::vector<std::string>;
using Checker = std::function<Violations(const Snapshot&, const Policy&, const Decisions&)>;

std::string J(JobId id) { return "job " + std::to_string(id); }

// The parts `parts` of the decision contract (sched/contract.h), as a property: each
// test below checks some of them, so that a failure names what broke and its
// reproducer is shrunk for that part alone. Together they check all of it.
Checker ContractParts(std::vector<Contract> parts) {
  return [parts](const Snapshot& s, const Policy& p, const Decisions& d) {
    Violations v;
    for (Violation& found : CheckDecisions(s, p, d)) {
      if (std::find(parts.begin(), parts.end(), found.contract) != parts.end()) {
        v.push_back(std::string(ContractName(found.contract)) + ": " + found.message);
      }
    }
    return v;
  };
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

// Never over-commit; Ready nodes only; GPU type, memory, exclusions and hard topology.
TEST(SchedulePropertyTest, NeverOverCommitsAndHonoursPlacementConstraints) {
  CheckAll("placement", ContractParts({Contract::kPlacement}));
}

// Gangs are bound whole; every pending job gets exactly one outcome; held jobs and
// jobs in retry backoff are not bound.
TEST(SchedulePropertyTest, GangsAreAllOrNothingAndEveryJobHasOneOutcome) {
  CheckAll("gang", ContractParts({Contract::kGang, Contract::kAnswer}));
}

// No queue (or ancestor) goes above its limit because of this pass's binds.
TEST(SchedulePropertyTest, NoQueueGoesAboveItsLimit) {
  CheckAll("queue limit", ContractParts({Contract::kQueue}));
}

// Only preemptible, old enough, lower-priority victims, or reclaim of borrowed quota.
TEST(SchedulePropertyTest, PreemptionsAreLegal) {
  CheckAll("preemption", ContractParts({Contract::kPreemption}));
}

// A reservation's GPUs go only to jobs that end in time.
TEST(SchedulePropertyTest, ReservationsAreRespected) {
  CheckAll("reservation", ContractParts({Contract::kReservation}));
}

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
    std::map<std::string, const Node*> node;
    for (const Node& n : s.nodes) node[n.name] = &n;
    auto has_gpu = [&](const std::string& name, int index) {
      const std::vector<Gpu>& gpus = node.at(name)->gpus;
      return std::any_of(gpus.begin(), gpus.end(), [&](const Gpu& g) { return g.index == index; });
    };
    std::map<std::string, std::set<int>> used;
    std::map<std::string, int64_t> cpu, mem;
    for (const RunningJob& r : s.running) {
      for (const Placement& p : r.replicas) {
        ASSERT_TRUE(node.count(p.node)) << "seed " << seed;
        ASSERT_NE(node.at(p.node)->state, NodeState::kDown) << "seed " << seed;
        ASSERT_EQ(static_cast<int64_t>(p.gpus.size()), r.per_replica.gpus);
        for (int g : p.gpus) {
          ASSERT_TRUE(has_gpu(p.node, g)) << "seed " << seed;
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
    for (const auto& [name, c] : cpu) ASSERT_LE(c, node.at(name)->milli_cpus) << "seed " << seed;
    for (const auto& [name, m] : mem) ASSERT_LE(m, node.at(name)->memory_bytes) << "seed " << seed;
    // GPUs per queue, its descendants included.
    std::map<std::pair<std::string, std::string>, const Queue*> queue;
    for (const Queue& q : s.queues) queue[{q.tenant, q.name}] = &q;
    std::map<const Queue*, int64_t> queue_used;
    for (const RunningJob& r : s.running) {
      auto it = queue.find({r.tenant, r.queue});
      for (size_t depth = 0; it != queue.end() && depth <= s.queues.size(); ++depth) {
        queue_used[it->second] += r.Gpus();
        it = it->second->parent.empty() ? queue.end()
                                        : queue.find({it->second->tenant, it->second->parent});
      }
    }
    for (const Queue& q : s.queues) {
      ASSERT_LE(queue_used[&q], q.limit_gpus) << "seed " << seed;
      ASSERT_LE(q.guaranteed_gpus, q.limit_gpus) << "seed " << seed;
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
