#include "sched/testing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "core/tenancy.h"

namespace trainyard::sched {

uint64_t DrawBelow(std::mt19937_64& rng, uint64_t n) {
  // Lemire's multiply-shift: one engine call, identical on every standard library.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * n) >> 64);
}

int64_t DrawBetween(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<int64_t>(DrawBelow(rng, static_cast<uint64_t>(hi - lo) + 1));
}

double DrawUnit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

bool DrawChance(std::mt19937_64& rng, double p) { return p > 0 && DrawUnit(rng) < p; }

size_t DrawWeighted(std::mt19937_64& rng, const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += std::max(w, 0.0);
  double x = DrawUnit(rng) * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    double w = std::max(weights[i], 0.0);
    if (x < w) return i;
    x -= w;
  }
  for (size_t i = weights.size(); i-- > 0;) {
    if (weights[i] > 0) return i;
  }
  return 0;
}

namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

constexpr int64_t kGiB64 = int64_t{1} << 30;

std::string Padded(int64_t v, int width) {
  std::string s = std::to_string(v);
  if (static_cast<int>(s.size()) < width) s.insert(0, width - s.size(), '0');
  return s;
}

Duration DrawDuration(std::mt19937_64& rng, Duration lo, Duration hi) {
  return Duration(DrawBetween(rng, lo.count(), hi.count()));
}

// What one job asks for, before it is given an id, a queue and times.
struct JobBody {
  int32_t replicas = 1;
  int32_t min_replicas = 1;
  Resources per_replica;
  TopologySpec topology;
  int32_t priority = 0;
  bool preemptible = true;
};

JobBody DrawJobBody(const JobMix& mix, const ClusterShape& cluster, std::mt19937_64& rng) {
  JobBody b;
  const int per_node = std::max(1, std::min(cluster.gpus_per_node, 64));
  const int domains = std::max(1, cluster.nvlink_domains_per_node);
  if (DrawChance(rng, mix.cpu_only_fraction)) {
    b.replicas = static_cast<int32_t>(DrawBetween(rng, 1, 4));
    b.min_replicas = b.replicas;
    b.per_replica.milli_cpus = DrawBetween(rng, 1, 32) * 1000;
    b.per_replica.memory_bytes = DrawBetween(rng, 4, 256) * kGiB64;
    if (b.replicas > 1 && DrawChance(rng, mix.topology_fraction)) {
      b.topology.constraint =
          DrawChance(rng, 0.5) ? TopologyConstraint::kSameNode : TopologyConstraint::kSameLeaf;
      b.topology.hard = DrawChance(rng, mix.hard_topology_fraction);
    }
  } else {
    std::vector<double> weights;
    std::vector<int> sizes;
    for (const auto& [gpus, w] : mix.sizes) {
      if (gpus >= 1 && gpus <= mix.max_gpus) {
        sizes.push_back(gpus);
        weights.push_back(w);
      }
    }
    const int total = sizes.empty() ? 1 : sizes[DrawWeighted(rng, weights)];
    int per = total;
    if (total > per_node) {
      per = per_node;
    } else if (total > 1 && DrawChance(rng, 0.25)) {
      // A few replicas on one node (data-parallel workers of 1 or 2 GPUs).
      std::vector<int> divisors;
      for (int p = 1; p < total; p *= 2) {
        if (total % p == 0) divisors.push_back(p);
      }
      per = divisors[DrawBelow(rng, divisors.size())];
    }
    b.replicas = static_cast<int32_t>((total + per - 1) / per);
    b.min_replicas = b.replicas;
    b.per_replica.gpus = per;
    if (per == 1 && mix.gpu_share_fraction > 0 && DrawChance(rng, mix.gpu_share_fraction)) {
      b.per_replica.gpu_milli = DrawBetween(rng, 1, 9) * 100;
    }
    const double node_share = static_cast<double>(per) / per_node;
    // Most jobs take a round share of the node per GPU (the defaults of their
    // launcher); some ask for exactly what they want.
    static constexpr double kRoundShares[] = {0.25, 0.5, 0.75};
    const bool custom = DrawChance(rng, mix.custom_resources_fraction);
    auto share = [&] {
      return custom ? 0.2 + 0.6 * DrawUnit(rng) : kRoundShares[DrawBelow(rng, 3)];
    };
    if (DrawChance(rng, mix.cpu_heavy_fraction)) {
      b.per_replica.milli_cpus =
          static_cast<int64_t>(cluster.milli_cpus * (0.5 + 0.5 * DrawUnit(rng))) / 1000 * 1000;
    } else {
      b.per_replica.milli_cpus =
          static_cast<int64_t>(cluster.milli_cpus * node_share * share()) / 1000 * 1000;
    }
    b.per_replica.memory_bytes =
        static_cast<int64_t>(static_cast<double>(cluster.memory_bytes) * node_share * share()) /
        kGiB64 * kGiB64;
    if (DrawChance(rng, mix.unknown_type_fraction)) {
      b.per_replica.gpu_type = "MI300X";
    } else if (DrawChance(rng, mix.typed_fraction) && !cluster.models.empty()) {
      std::vector<double> mw;
      for (const GpuModel& m : cluster.models) mw.push_back(m.weight);
      b.per_replica.gpu_type = cluster.models[DrawWeighted(rng, mw)].name;
    }
    if (DrawChance(rng, mix.gpu_memory_fraction)) b.per_replica.gpu_memory_bytes = 80 * kGiB64;
    if (b.replicas > 1 && DrawChance(rng, mix.topology_fraction)) {
      const int gang = per * b.replicas;
      if (gang <= per_node / domains && DrawChance(rng, 0.5)) {
        b.topology.constraint = TopologyConstraint::kSameNvlink;
      } else if (gang <= per_node) {
        b.topology.constraint = TopologyConstraint::kSameNode;
      } else {
        b.topology.constraint = TopologyConstraint::kSameLeaf;
      }
      b.topology.hard = DrawChance(rng, mix.hard_topology_fraction);
    }
  }
  if (b.replicas > 1 && DrawChance(rng, mix.elastic_fraction)) {
    b.min_replicas = static_cast<int32_t>(DrawBetween(rng, 1, b.replicas - 1));
  }
  const std::vector<PriorityClass> classes = DefaultPriorityClasses();
  std::vector<double> pw = mix.priority_weights;
  pw.resize(classes.size(), 0);
  const PriorityClass& pc = classes[DrawWeighted(rng, pw)];
  b.priority = pc.value;
  b.preemptible = pc.preemptible && !DrawChance(rng, mix.non_preemptible_fraction);
  return b;
}

// Queues a job may be submitted to: leaves of the trees, and now and then a parent.
const Queue* DrawQueue(const std::vector<Queue>& queues, std::mt19937_64& rng) {
  if (queues.empty()) return nullptr;
  std::vector<double> weights;
  for (const Queue& q : queues) {
    bool has_children = std::any_of(queues.begin(), queues.end(), [&](const Queue& c) {
      return c.tenant == q.tenant && c.parent == q.name;
    });
    weights.push_back(has_children ? 0.1 : 1.0);
  }
  return &queues[DrawWeighted(rng, weights)];
}

// "a,b,c". (Appending piece by piece also keeps clear of GCC 12's false -Wrestrict
// on `"literal" + std::string&&`.)
std::string Join(const std::vector<std::string>& items, char sep) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

std::string JoinInts(const std::vector<int>& items) {
  std::vector<std::string> text;
  for (int v : items) text.push_back(std::to_string(v));
  return Join(text, ',');
}

std::string PlacementsText(const std::vector<Placement>& replicas) {
  std::string out;
  for (const Placement& p : replicas) out += " " + p.node + "[" + JoinInts(p.gpus) + "]";
  return out;
}

std::string NodeStateText(const Node& n) { return std::string(NodeStateName(n.state)); }

std::string Relative(Timestamp t, Timestamp now) {
  int64_t ms = (t - now).count();
  std::string sign = ms < 0 ? "-" : "+";
  ms = ms < 0 ? -ms : ms;
  return sign + FormatDuration(Duration(ms));
}

}  // namespace

Timestamp WorkloadShape::DefaultNow() {
  using namespace std::chrono;
  return Timestamp(duration_cast<Duration>(sys_days{year{2026} / 11 / 29}.time_since_epoch()) +
                   hours(9));
}

std::vector<Node> SyntheticCluster(const ClusterShape& shape, std::mt19937_64& rng) {
  const int gpus = std::max(0, std::min(shape.gpus_per_node, 64));
  const int domains = std::max(1, shape.nvlink_domains_per_node);
  const int per_leaf = std::max(1, shape.nodes_per_leaf);
  const int per_spine = std::max(1, shape.leaves_per_spine);
  const int leaves = (shape.nodes + per_leaf - 1) / per_leaf;
  std::vector<double> weights;
  for (const GpuModel& m : shape.models) weights.push_back(m.weight);
  std::vector<size_t> leaf_model(leaves, 0);
  for (int l = 0; l < leaves; ++l) {
    leaf_model[l] = shape.models.empty() ? 0 : DrawWeighted(rng, weights);
  }
  const int width = shape.nodes > 99'999 ? 7 : 5;
  std::vector<Node> nodes;
  nodes.reserve(shape.nodes);
  for (int i = 0; i < shape.nodes; ++i) {
    const int leaf = i / per_leaf;
    Node n;
    n.name = "n" + Padded(i, width);
    n.topology.leaf = "leaf-" + Padded(leaf, 3);
    n.topology.spine = "spine-" + std::to_string(leaf / per_spine);
    n.milli_cpus = shape.milli_cpus;
    n.memory_bytes = shape.memory_bytes;
    const GpuModel model =
        shape.models.empty() ? GpuModel{"H100", 80 * kGiB64, 1} : shape.models[leaf_model[leaf]];
    const int domain_size = std::max(1, gpus / domains);
    const bool cpu_node = DrawChance(rng, shape.cpu_node_fraction);
    for (int g = 0; g < (cpu_node ? 0 : gpus); ++g) {
      Gpu gpu;
      gpu.index = g;
      gpu.uuid = "GPU-" + n.name + "-" + std::to_string(g);
      gpu.model = model.name;
      gpu.memory_bytes = model.memory_bytes;
      gpu.nvlink_domain = n.name + "-nvl" + std::to_string(std::min(g / domain_size, domains - 1));
      n.gpus.push_back(std::move(gpu));
    }
    if (DrawChance(rng, shape.permuted_gpu_order_fraction)) {
      for (size_t k = n.gpus.size(); k > 1; --k)
        std::swap(n.gpus[k - 1], n.gpus[DrawBelow(rng, k)]);
    }
    if (!cpu_node) n.labels["trainyard.io/gpu-model"] = model.name;
    if (DrawChance(rng, shape.unready_fraction)) {
      static constexpr NodeState kStates[] = {NodeState::kCordoned, NodeState::kDraining,
                                              NodeState::kNotReady, NodeState::kDown};
      n.state = kStates[DrawWeighted(rng, {3, 2, 4, 1})];
      n.state_reason = "synthetic";
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

std::vector<Queue> SyntheticQueues(const WorkloadShape& shape, int64_t cluster_gpus,
                                   std::mt19937_64& rng) {
  std::vector<Queue> out;
  if (!shape.define_queues) return out;
  const int tenants = std::max(1, shape.tenants);
  std::vector<double> share(tenants);
  double sum = 0;
  for (double& s : share) sum += (s = 0.5 + 1.5 * DrawUnit(rng));
  const double guaranteed_total = shape.guaranteed_fraction * static_cast<double>(cluster_gpus);
  for (int t = 0; t < tenants; ++t) {
    Queue top;
    top.tenant = "team-" + std::to_string(t);
    top.name = top.tenant;
    top.guaranteed_gpus = static_cast<int64_t>(guaranteed_total * share[t] / sum);
    top.limit_gpus =
        std::min<int64_t>(std::max<int64_t>(cluster_gpus, 1),
                          static_cast<int64_t>(top.guaranteed_gpus * (1.2 + 1.8 * DrawUnit(rng))) +
                              DrawBetween(rng, 0, std::max<int64_t>(cluster_gpus / 10, 1)));
    top.limit_gpus = std::max(top.limit_gpus, top.guaranteed_gpus);
    top.weight = 0.5 + 1.5 * DrawUnit(rng);
    out.push_back(top);
    const int children =
        static_cast<int>(DrawBetween(rng, 0, std::max(0, shape.queues_per_tenant - 1)));
    std::vector<double> split(children);
    double split_sum = 0;
    for (double& s : split) split_sum += (s = 0.5 + DrawUnit(rng));
    for (int c = 0; c < children; ++c) {
      Queue q;
      q.tenant = top.tenant;
      q.parent = top.name;
      q.name = top.name + "-q" + std::to_string(c + 1);
      q.guaranteed_gpus = static_cast<int64_t>(top.guaranteed_gpus * split[c] / split_sum);
      q.limit_gpus = std::max(q.guaranteed_gpus,
                              static_cast<int64_t>(top.limit_gpus * (0.4 + 0.6 * DrawUnit(rng))));
      q.weight = 0.5 + 1.5 * DrawUnit(rng);
      out.push_back(q);
    }
  }
  Queue scavenger;
  scavenger.tenant = kDefaultTenant;
  scavenger.name = kDefaultQueue;
  scavenger.limit_gpus = std::max<int64_t>(cluster_gpus / 2, 1);
  out.push_back(scavenger);
  return out;
}

PendingJob SyntheticPendingJob(JobId id, const ClusterShape& cluster,
                               const std::vector<Node>& nodes, const std::vector<Queue>& queues,
                               const WorkloadShape& shape, std::mt19937_64& rng) {
  JobBody b = DrawJobBody(shape.mix, cluster, rng);
  PendingJob j;
  j.id = id;
  j.name = "job-" + std::to_string(id);
  if (const Queue* q = DrawQueue(queues, rng)) {
    j.tenant = q->tenant;
    j.queue = q->name;
  } else {
    j.tenant = kDefaultTenant;
    j.queue = shape.define_queues ? kDefaultQueue : "q" + std::to_string(DrawBelow(rng, 4));
  }
  if (DrawChance(rng, shape.unknown_queue_fraction)) j.queue = "no-such-queue";
  j.priority = b.priority;
  j.preemptible = b.preemptible;
  j.replicas = b.replicas;
  j.min_replicas = b.min_replicas;
  j.per_replica = b.per_replica;
  j.topology = b.topology;
  j.submit_time = shape.now - DrawDuration(rng, Duration(0), hours(24));
  j.eligible_time = j.submit_time;
  if (DrawChance(rng, shape.backoff_fraction)) {
    j.eligible_time = shape.now + DrawDuration(rng, seconds(1), minutes(10));
  }
  if (DrawChance(rng, shape.mix.time_limit_fraction)) {
    j.time_limit = minutes(DrawBetween(rng, 10, 48 * 60));
  }
  if (!nodes.empty() && DrawChance(rng, shape.excluded_fraction)) {
    const int count = static_cast<int>(DrawBetween(rng, 1, 3));
    for (int k = 0; k < count; ++k) {
      j.excluded_nodes.push_back(DrawChance(rng, 0.1) ? "gone-node"
                                                      : nodes[DrawBelow(rng, nodes.size())].name);
    }
  }
  j.held = DrawChance(rng, shape.held_fraction);
  if (DrawChance(rng, 0.3)) {
    j.attained_service = minutes(DrawBetween(rng, 0, 100 * 60)) *
                         std::max<int64_t>(1, b.per_replica.gpus * b.replicas);
  }
  return j;
}

std::vector<RunningJob> SyntheticRunning(JobId first_id, const ClusterShape& cluster,
                                         const std::vector<Node>& nodes,
                                         const std::vector<Queue>& queues,
                                         const WorkloadShape& shape, std::mt19937_64& rng) {
  struct Free {
    std::vector<int> gpus;  // positions in Node::gpus
    int64_t cpu = 0;
    int64_t mem = 0;
  };
  std::vector<Free> free(nodes.size());
  std::map<std::string, std::vector<int>> by_leaf;  // usable nodes per leaf
  int64_t capacity = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.state == NodeState::kDown) continue;  // its work was requeued
    for (size_t g = 0; g < n.gpus.size() && g < 64; ++g)
      free[i].gpus.push_back(static_cast<int>(g));
    free[i].cpu = n.milli_cpus;
    free[i].mem = n.memory_bytes;
    by_leaf[n.topology.leaf].push_back(static_cast<int>(i));
    capacity += static_cast<int64_t>(free[i].gpus.size());
  }
  std::vector<const std::vector<int>*> leaves;
  for (const auto& [name, members] : by_leaf) leaves.push_back(&members);

  // Queue use, counted against each queue and its ancestors.
  std::map<std::pair<std::string, std::string>, size_t> queue_at;
  for (size_t q = 0; q < queues.size(); ++q) queue_at[{queues[q].tenant, queues[q].name}] = q;
  std::vector<int64_t> used(queues.size(), 0);
  auto ancestors = [&](size_t q) {
    std::vector<size_t> out;
    for (size_t a = q; out.size() <= queues.size();) {
      out.push_back(a);
      auto it = queue_at.find({queues[a].tenant, queues[a].parent});
      if (queues[a].parent.empty() || it == queue_at.end()) break;
      a = it->second;
    }
    return out;
  };

  const int64_t target = static_cast<int64_t>(shape.running_fill * static_cast<double>(capacity));
  int64_t held = 0;
  JobMix mix = shape.mix;
  mix.unknown_type_fraction = 0;
  std::vector<RunningJob> out;
  int misses = 0;
  const int max_misses = 200;
  JobId id = first_id;
  // Bounded even when every draw places (jobs with no GPUs never raise `held`).
  int64_t attempts = 50 * static_cast<int64_t>(nodes.size()) + 10'000;
  while (held < target && misses < max_misses && !leaves.empty() && attempts-- > 0) {
    JobBody b = DrawJobBody(mix, cluster, rng);
    const int64_t gpus = b.per_replica.gpus * static_cast<int64_t>(b.replicas);
    if (held + gpus > target + std::max<int64_t>(8, target / 50)) {
      ++misses;
      continue;
    }
    const Queue* queue = DrawQueue(queues, rng);
    std::vector<size_t> chain;
    if (queue != nullptr) {
      chain = ancestors(static_cast<size_t>(queue - queues.data()));
      bool fits = std::all_of(chain.begin(), chain.end(),
                              [&](size_t a) { return used[a] + gpus <= queues[a].limit_gpus; });
      if (!fits) {
        ++misses;
        continue;
      }
    }
    // Place replica by replica: from a random leaf and node onwards, packing each
    // node before moving on; a gang keeps to one GPU model.
    std::string model = b.per_replica.gpu_type;
    struct Taken {
      int node;
      std::vector<int> positions;
    };
    std::vector<Taken> taken;
    const size_t first_leaf = DrawBelow(rng, leaves.size());
    for (size_t li = 0; li < leaves.size() && static_cast<int>(taken.size()) < b.replicas; ++li) {
      const std::vector<int>& members = *leaves[(first_leaf + li) % leaves.size()];
      const size_t first_node = DrawBelow(rng, members.size());
      for (size_t ni = 0; ni < members.size() && static_cast<int>(taken.size()) < b.replicas;
           ++ni) {
        const int n = members[(first_node + ni) % members.size()];
        const Node& node = nodes[n];
        Free& f = free[n];
        // Cheap counts first: near a full cluster most nodes fail here.
        if (static_cast<int64_t>(f.gpus.size()) < b.per_replica.gpus ||
            f.cpu < b.per_replica.milli_cpus || f.mem < b.per_replica.memory_bytes) {
          continue;
        }
        if (b.per_replica.gpus > 0) {
          if (node.gpus.empty()) continue;
          if (!model.empty() && !GpuTypeMatches(model, node.gpus.front().model)) continue;
          if (node.gpus.front().memory_bytes < b.per_replica.gpu_memory_bytes) continue;
        }
        while (static_cast<int>(taken.size()) < b.replicas &&
               static_cast<int64_t>(f.gpus.size()) >= b.per_replica.gpus &&
               f.cpu >= b.per_replica.milli_cpus && f.mem >= b.per_replica.memory_bytes) {
          if (b.per_replica.gpus > 0 && model.empty()) model = node.gpus.front().model;
          // The GPUs of one NVLink domain when one has room, else the first free.
          std::map<std::string, std::vector<int>> by_domain;
          for (int g : f.gpus) by_domain[node.gpus[g].nvlink_domain].push_back(g);
          std::vector<int> pick;
          for (const auto& [domain, members_in_domain] : by_domain) {
            if (static_cast<int64_t>(members_in_domain.size()) >= b.per_replica.gpus) {
              pick.assign(members_in_domain.begin(),
                          members_in_domain.begin() + b.per_replica.gpus);
              break;
            }
          }
          if (pick.empty()) pick.assign(f.gpus.begin(), f.gpus.begin() + b.per_replica.gpus);
          for (int g : pick) f.gpus.erase(std::find(f.gpus.begin(), f.gpus.end(), g));
          f.cpu -= b.per_replica.milli_cpus;
          f.mem -= b.per_replica.memory_bytes;
          taken.push_back({n, std::move(pick)});
        }
      }
    }
    if (static_cast<int>(taken.size()) < b.replicas) {
      for (const Taken& t : taken) {
        Free& f = free[t.node];
        f.gpus.insert(f.gpus.end(), t.positions.begin(), t.positions.end());
        std::sort(f.gpus.begin(), f.gpus.end());
        f.cpu += b.per_replica.milli_cpus;
        f.mem += b.per_replica.memory_bytes;
      }
      ++misses;
      continue;
    }
    misses = 0;
    RunningJob r;
    r.id = id++;
    if (queue != nullptr) {
      r.tenant = queue->tenant;
      r.queue = queue->name;
      for (size_t a : chain) used[a] += gpus;
    } else {
      r.tenant = kDefaultTenant;
      r.queue = shape.define_queues ? kDefaultQueue : "q" + std::to_string(DrawBelow(rng, 4));
    }
    r.priority = b.priority;
    r.preemptible = b.preemptible;
    r.per_replica = b.per_replica;
    if (b.per_replica.gpus > 0) r.per_replica.gpu_type = model;
    for (const Taken& t : taken) {
      Placement p;
      p.node = nodes[t.node].name;
      for (int g : t.positions) p.gpus.push_back(nodes[t.node].gpus[g].index);
      std::sort(p.gpus.begin(), p.gpus.end());
      r.replicas.push_back(std::move(p));
    }
    const Duration age = DrawChance(rng, shape.young_fraction)
                             ? DrawDuration(rng, Duration(0), seconds(299))
                             : DrawDuration(rng, minutes(5), hours(48));
    r.start_time = shape.now - age;
    if (DrawChance(rng, 0.7))
      r.last_checkpoint = r.start_time + DrawDuration(rng, Duration(0), age);
    if (DrawChance(rng, shape.mix.time_limit_fraction)) {
      r.time_limit = DrawChance(rng, 0.05)
                         ? DrawDuration(rng, minutes(1), std::max<Duration>(age, minutes(1)))
                         : age + DrawDuration(rng, minutes(1), hours(24));
    }
    r.preempting = DrawChance(rng, shape.preempting_fraction);
    held += gpus;
    out.push_back(std::move(r));
  }
  return out;
}

Snapshot SyntheticSnapshot(const ClusterShape& cluster, const WorkloadShape& workload,
                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  Snapshot s;
  s.now = workload.now;
  s.nodes = SyntheticCluster(cluster, rng);
  int64_t gpus = 0;
  for (const Node& n : s.nodes) gpus += static_cast<int64_t>(n.gpus.size());
  s.queues = SyntheticQueues(workload, gpus, rng);
  s.running = SyntheticRunning(1, cluster, s.nodes, s.queues, workload, rng);
  const JobId first = static_cast<JobId>(s.running.size()) + 1;
  s.pending.reserve(workload.pending);
  for (int i = 0; i < workload.pending; ++i) {
    s.pending.push_back(SyntheticPendingJob(first + i, cluster, s.nodes, s.queues, workload, rng));
  }
  return s;
}

std::string SnapshotToText(const Snapshot& s) {
  std::string out = "now " + FormatTimestamp(s.now) + "\n";
  for (const Node& n : s.nodes) {
    out += "node " + n.name + " " + NodeStateText(n) + " leaf=" + n.topology.leaf;
    if (!n.gpus.empty()) {
      out += " gpus=" + std::to_string(n.gpus.size()) + "x" + n.gpus.front().model + "(" +
             FormatMemory(n.gpus.front().memory_bytes) + ")";
      bool in_order = true;
      for (size_t g = 0; g < n.gpus.size(); ++g) in_order &= n.gpus[g].index == static_cast<int>(g);
      std::map<std::string, std::vector<int>> domains;
      std::vector<int> order;
      for (const Gpu& g : n.gpus) {
        domains[g.nvlink_domain].push_back(g.index);
        order.push_back(g.index);
      }
      std::vector<std::string> domain_text;
      for (const auto& [d, list] : domains) domain_text.push_back(d + ":" + JoinInts(list));
      out += " nvlink=" + Join(domain_text, '|');
      if (!in_order) out += " order=" + JoinInts(order);
    }
    out += " cpu=" + std::to_string(n.milli_cpus) + "m mem=" + FormatMemory(n.memory_bytes) + "\n";
  }
  for (const Queue& q : s.queues) {
    out += "queue " + q.tenant + "/" + q.name + " parent=" + (q.parent.empty() ? "-" : q.parent) +
           " guaranteed=" + std::to_string(q.guaranteed_gpus) +
           " limit=" + std::to_string(q.limit_gpus) + "\n";
  }
  for (const RunningJob& r : s.running) {
    out += "running " + std::to_string(r.id) + " " + r.tenant + "/" + r.queue +
           " prio=" + std::to_string(r.priority) + (r.preemptible ? "" : " non-preemptible") +
           " per_replica=[" + Describe(r.per_replica) + "] on" + PlacementsText(r.replicas);
    out += " start=" + Relative(r.start_time, s.now);
    if (r.last_checkpoint) out += " ckpt=" + Relative(*r.last_checkpoint, s.now);
    if (r.time_limit.count() > 0) out += " limit=" + FormatDuration(r.time_limit);
    if (r.preempting) out += " preempting";
    out += "\n";
  }
  for (const PendingJob& j : s.pending) {
    out += "pending " + std::to_string(j.id) + " " + j.tenant + "/" + j.queue +
           " prio=" + std::to_string(j.priority) + (j.preemptible ? "" : " non-preemptible") +
           " replicas=" + std::to_string(j.replicas) + " min=" + std::to_string(j.min_replicas) +
           " per_replica=[" + Describe(j.per_replica) + "]";
    if (j.topology.constraint != TopologyConstraint::kNone) {
      out += " topology=" + std::string(TopologyConstraintName(j.topology.constraint)) +
             (j.topology.hard ? "(hard)" : "(soft)");
    }
    out += " submit=" + Relative(j.submit_time, s.now);
    if (j.eligible_time > s.now) out += " eligible=" + Relative(j.eligible_time, s.now);
    if (j.time_limit.count() > 0) out += " limit=" + FormatDuration(j.time_limit);
    if (!j.excluded_nodes.empty()) {
      out += " excluded=" + Join(j.excluded_nodes, ',');
    }
    if (j.held) out += " held";
    out += "\n";
  }
  return out;
}

std::string DecisionsToText(const Decisions& d, Timestamp now) {
  std::string out;
  for (const Bind& b : d.binds)
    out += "bind " + std::to_string(b.job) + PlacementsText(b.replicas) + "\n";
  for (const Preempt& p : d.preemptions) {
    out += "preempt " + std::to_string(p.job) + " for " + std::to_string(p.for_job) + ": " +
           p.reason + "\n";
  }
  for (const Reserve& r : d.reservations) {
    out += "reserve " + std::to_string(r.job) + " from " + Relative(r.earliest_start, now) +
           PlacementsText(r.replicas) + "\n";
  }
  for (const Waiting& w : d.waiting)
    out += "waiting " + std::to_string(w.job) + ": " + w.reason.str() + "\n";
  for (const Infeasible& i : d.infeasible) {
    out += "infeasible " + std::to_string(i.job) + ": " + i.reason + "\n";
  }
  return out;
}

}  // namespace trainyard::sched
