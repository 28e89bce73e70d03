#include "sim/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "core/names.h"
#include "core/yaml_reader.h"
#include "core/yaml_text.h"

namespace trainyard::sim {
namespace {

const std::vector<std::string_view> kTopFields = {"policy",           "nodes", "queues",
                                                  "priority_classes", "jobs",  "steps"};
// A cluster file holds the cluster sections of a scenario and nothing else.
const std::vector<std::string_view> kClusterFields = {"nodes", "queues", "priority_classes"};
const std::vector<std::string_view> kScenarioOnlyFields = {"policy", "jobs", "steps"};
const std::vector<std::string_view> kPolicyFields = {
    "ordering",     "placement",    "preemption",
    "backfill",     "reservations", "min_runtime",
    "restart_cost", "max_victims",  "max_preemption_searches"};
const std::vector<std::string_view> kNodeFields = {
    "name",   "count", "gpus", "gpu_type",     "gpu_memory", "cpus",
    "memory", "spine", "leaf", "nvlink_group", "state",      "cached_data"};
const std::vector<std::string_view> kQueueFields = {"name",       "tenant", "parent",
                                                    "guaranteed", "limit",  "weight"};
const std::vector<std::string_view> kClassFields = {"name", "value", "preemptible"};
const std::vector<std::string_view> kJobFields = {"id",
                                                  "name",
                                                  "tenant",
                                                  "queue",
                                                  "priority",
                                                  "replicas",
                                                  "min_replicas",
                                                  "gpus",
                                                  "gpu_type",
                                                  "gpu_memory",
                                                  "cpus",
                                                  "memory",
                                                  "topology",
                                                  "mode",
                                                  "time_limit",
                                                  "duration",
                                                  "checkpoint_interval",
                                                  "preempt_grace",
                                                  "exclude",
                                                  "data"};
const std::vector<std::string_view> kStepFields = {"at",   "submit",  "finish",    "checkpoint",
                                                   "hold", "release", "node_state"};
const std::vector<std::string_view> kNodeStates = {"Ready", "Cordoned", "Draining", "NotReady",
                                                   "Down"};
const std::vector<std::string_view> kTopologies = {"none", "same-node", "same-nvlink", "same-leaf"};

constexpr int64_t kMaxNodesPerGroup = 10'000;
constexpr size_t kMaxScenarioBytes = 4 << 20;

std::string Indexed(const std::string& list, size_t i) {
  return list + "[" + std::to_string(i) + "]";
}

// Reads one scenario document, collecting every problem it meets.
class ScenarioReader : public YamlFieldReader {
 public:
  explicit ScenarioReader(std::string_view file) : YamlFieldReader(file) {}

  // A cluster document: only the cluster sections; scenario-only keys get a hint.
  void ReadCluster(const YAML::Node& root, ClusterSpec& c) {
    if (!root.IsMap()) {
      Error(root, "",
            "a cluster file must be a map with nodes (and optionally queues and "
            "priority_classes), got " +
                KindName(root));
      return;
    }
    for (const PriorityClass& p : DefaultPriorityClasses()) c.priority_classes.push_back(p);
    for (const auto& kv : root) {
      if (!kv.first.IsScalar()) continue;  // ForEachField reports it
      const std::string& key = kv.first.Scalar();
      if (std::find(kScenarioOnlyFields.begin(), kScenarioOnlyFields.end(), key) !=
          kScenarioOnlyFields.end()) {
        Error(kv.first, key,
              "belongs in a scenario file, not a cluster file; a cluster file holds " +
                  JoinNames(kClusterFields) + " (jobs come from the trace)");
      }
    }
    std::optional<YAML::Node> nodes, queues, classes;
    ForEachField(
        root, "", kClusterFields,
        [&](const std::string& key, const YAML::Node& v) {
          if (key == "nodes") {
            nodes = v;
          } else if (key == "queues") {
            queues = v;
          } else if (key == "priority_classes") {
            classes = v;
          }
        },
        kScenarioOnlyFields);
    ReadClusterSections(root, nodes, queues, classes, "cluster", c.nodes, c.queues,
                        c.priority_classes);
    for (const Queue& q : c.queues) {
      if (std::none_of(c.tenants.begin(), c.tenants.end(),
                       [&](const Tenant& t) { return t.name == q.tenant; })) {
        c.tenants.push_back(Tenant{q.tenant, ""});
      }
    }
  }

  void Read(const YAML::Node& root, Scenario& sc) {
    if (!root.IsMap()) {
      Error(root, "", "a scenario must be a map with nodes, jobs and steps, got " + KindName(root));
      return;
    }
    for (const PriorityClass& p : DefaultPriorityClasses()) sc.priority_classes.push_back(p);
    std::optional<YAML::Node> nodes, queues, classes, jobs, steps, policy;
    ForEachField(root, "", kTopFields, [&](const std::string& key, const YAML::Node& v) {
      if (key == "policy") {
        policy = v;
      } else if (key == "nodes") {
        nodes = v;
      } else if (key == "queues") {
        queues = v;
      } else if (key == "priority_classes") {
        classes = v;
      } else if (key == "jobs") {
        jobs = v;
      } else if (key == "steps") {
        steps = v;
      }
    });
    // Order matters: jobs refer to nodes and classes, steps to jobs and nodes.
    if (policy) ReadPolicy(*policy, sc.policy);
    ReadClusterSections(root, nodes, queues, classes, "scenario", sc.nodes, sc.queues,
                        sc.priority_classes);
    if (jobs) {
      ReadJobs(*jobs, sc);
    } else {
      Error(root, "jobs", "required: list the jobs the steps submit");
    }
    if (steps) {
      ReadSteps(*steps, sc);
    } else {
      Error(root, "steps", "required: a scenario needs at least one step");
    }
  }

  // The sections a scenario and a cluster file share, with the same rules.
  void ReadClusterSections(const YAML::Node& root, const std::optional<YAML::Node>& nodes,
                           const std::optional<YAML::Node>& queues,
                           const std::optional<YAML::Node>& classes, std::string_view what,
                           std::vector<Node>& out_nodes, std::vector<Queue>& out_queues,
                           std::vector<PriorityClass>& out_classes) {
    if (nodes) {
      ReadNodes(*nodes, out_nodes);
    } else {
      Error(root, "nodes", "required: a " + std::string(what) + " needs at least one node group");
    }
    if (queues) ReadQueues(*queues, out_queues);
    if (classes) ReadClasses(*classes, out_classes);
  }

 private:
  bool Name(const YAML::Node& v, const std::string& field, std::string& out) {
    if (!String(v, field, out)) return false;
    if (Status s = ValidateName(field, out); !s.ok()) {
      Error(v, field, StripField(s.message(), field));
      return false;
    }
    return true;
  }

  // Messages from core validators start with "FIELD: "; the diagnostic names the field.
  static std::string StripField(const std::string& message, const std::string& field) {
    if (message.rfind(field + ": ", 0) == 0) return message.substr(field.size() + 2);
    return message;
  }

  void ReadPolicy(const YAML::Node& v, sched::Policy& p) {
    if (!Map(v, "policy", kPolicyFields)) return;
    ForEachField(v, "policy", kPolicyFields, [&](const std::string& key, const YAML::Node& x) {
      const std::string f = "policy." + key;
      auto named = [&](std::string& out, auto make) {
        if (!Scalar(x, f, "a name")) return;
        if (auto r = make(x.Scalar()); !r.ok()) {
          Error(x, f, StripField(r.status().message(), key));
          return;
        }
        out = x.Scalar();
      };
      if (key == "ordering") {
        named(p.ordering, sched::MakeOrdering);
      } else if (key == "placement") {
        named(p.placement, sched::MakePlacementStyle);
      } else if (key == "preemption") {
        named(p.preemption, sched::MakePreemptionCost);
      } else if (key == "backfill") {
        Bool(x, f, p.backfill);
      } else if (key == "reservations") {
        IntAs(x, f, 0, 1000, p.reservations);
      } else if (key == "min_runtime") {
        DurationField(x, f, p.min_runtime);
      } else if (key == "restart_cost") {
        DurationField(x, f, p.restart_cost);
      } else if (key == "max_victims") {
        IntAs(x, f, 1, 1'000'000, p.max_victims);
      } else if (key == "max_preemption_searches") {
        IntAs(x, f, 0, 1'000'000, p.max_preemption_searches);
      }
    });
  }

  void ReadNodes(const YAML::Node& v, std::vector<Node>& out) {
    if (!List(v, "nodes")) return;
    if (v.size() == 0) Error(v, "nodes", "must list at least one node group");
    std::map<std::string, std::string> seen;  // node name -> field that defined it
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& g = v[i];
      const std::string at = Indexed("nodes", i);
      if (!Map(g, at, kNodeFields)) continue;
      std::string name, gpu_type, spine, leaf, state_name = "Ready";
      std::vector<std::string> cached;
      int64_t count = 0, gpus = 0, nvlink = 0, cpus = 0, memory = 0, gpu_memory = 80 * kGiB;
      bool has_count = false, ok = true, name_given = false, name_ok = false;
      ForEachField(g, at, kNodeFields, [&](const std::string& key, const YAML::Node& x) {
        const std::string f = at + "." + key;
        bool r = true;
        if (key == "name") {
          name_given = true;
          r = name_ok = Name(x, f, name);
        } else if (key == "count") {
          r = has_count = Int(x, f, 1, kMaxNodesPerGroup, count);
        } else if (key == "gpus") {
          r = Int(x, f, 0, static_cast<int64_t>(kMaxGpusPerNode), gpus);
        } else if (key == "gpu_type") {
          r = String(x, f, gpu_type);
        } else if (key == "gpu_memory") {
          r = MemoryField(x, f, gpu_memory);
        } else if (key == "cpus") {
          r = CpusField(x, f, cpus, SpecLimits::kMaxMilliCpusPerReplica);
        } else if (key == "memory") {
          r = MemoryField(x, f, memory);
        } else if (key == "spine") {
          r = String(x, f, spine);
        } else if (key == "leaf") {
          r = String(x, f, leaf);
        } else if (key == "nvlink_group") {
          r = Int(x, f, 0, static_cast<int64_t>(kMaxGpusPerNode), nvlink);
        } else if (key == "state") {
          r = Choice(x, f, kNodeStates, state_name);
        } else if (key == "cached_data") {
          r = DatasetList(x, f, cached);
        }
        ok = ok && r;
      });
      if (!name_ok) {
        if (!name_given) Error(g, at + ".name", "required: give the node (or group) a name");
        continue;
      }
      if (gpus > 0 && NormalizeGpuType(gpu_type).empty()) {
        Error(g, at + ".gpu_type", "required when gpus > 0 (e.g. H100)");
        ok = false;
      }
      if (nvlink > gpus) {
        Error(g["nvlink_group"], at + ".nvlink_group",
              "must be <= gpus (" + std::to_string(gpus) + "), got " + std::to_string(nvlink));
        ok = false;
      }
      // Names first, so that a duplicate is found even in a group with other errors.
      std::vector<std::string> names;
      for (int64_t k = 0; k < (has_count ? count : 1); ++k) {
        names.push_back(has_count ? name + "-" + std::to_string(k) : name);
      }
      for (const std::string& n : names) {
        if (auto it = seen.find(n); it != seen.end()) {
          Error(g, at + ".name", "node " + n + " is already defined by " + it->second);
          ok = false;
          break;
        }
        if (Status s = ValidateName(at + ".name", n); !s.ok()) {
          Error(g, at + ".name", StripField(s.message(), at + ".name"));
          ok = false;
          break;
        }
      }
      for (const std::string& n : names) seen.emplace(n, at);
      if (!ok) continue;
      for (const std::string& n : names) {
        Node node;
        node.name = n;
        for (int64_t gi = 0; gi < gpus; ++gi) {
          Gpu gpu;
          gpu.index = static_cast<int>(gi);
          gpu.uuid = node.name + "-gpu" + std::to_string(gi);
          gpu.model = NormalizeGpuType(gpu_type);
          gpu.memory_bytes = gpu_memory;
          if (nvlink > 0) gpu.nvlink_domain = node.name + "-nvl" + std::to_string(gi / nvlink);
          node.gpus.push_back(std::move(gpu));
        }
        node.milli_cpus = cpus;
        node.memory_bytes = memory;
        node.topology.spine = spine;
        node.topology.leaf = leaf;
        node.state = *ParseNodeState(state_name);
        for (const std::string& d : cached) node.cached_data.push_back(ScenarioDataVersion(d));
        std::sort(node.cached_data.begin(), node.cached_data.end());
        if (node.state != NodeState::kReady) node.state_reason = "scenario";
        out.push_back(std::move(node));
      }
    }
    for (const Node& n : out) node_names_.push_back(n.name);
  }

  void ReadQueues(const YAML::Node& v, std::vector<Queue>& out) {
    if (!List(v, "queues")) return;
    std::vector<int> lines;
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& e = v[i];
      const std::string at = Indexed("queues", i);
      if (!Map(e, at, kQueueFields)) continue;
      Queue q;
      q.tenant = kDefaultTenant;
      q.limit_gpus = -1;
      bool ok = true;
      ForEachField(e, at, kQueueFields, [&](const std::string& key, const YAML::Node& x) {
        const std::string f = at + "." + key;
        bool r = true;
        if (key == "name") {
          r = Name(x, f, q.name);
        } else if (key == "tenant") {
          r = Name(x, f, q.tenant);
        } else if (key == "parent") {
          r = Name(x, f, q.parent);
        } else if (key == "guaranteed") {
          r = Int(x, f, 0, kMaxQueueGpus, q.guaranteed_gpus);
        } else if (key == "limit") {
          r = Int(x, f, 0, kMaxQueueGpus, q.limit_gpus);
        } else if (key == "weight") {
          r = Scalar(x, f, "a positive number");
          if (r) {
            const std::string& s = x.Scalar();
            auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), q.weight);
            r = ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(q.weight) &&
                q.weight > 0 && q.weight <= 1e6;
            if (!r) Error(x, f, "must be a number in (0, 1000000], got " + QuoteForMessage(s));
          }
        }
        ok = ok && r;
      });
      if (q.name.empty()) {
        Error(e, at + ".name", "required: give the queue a name");
        continue;
      }
      if (q.limit_gpus < 0) q.limit_gpus = std::max<int64_t>(kMaxQueueGpus, q.guaranteed_gpus);
      if (q.limit_gpus < q.guaranteed_gpus) {
        Error(e["limit"], at + ".limit",
              "must be >= guaranteed (" + std::to_string(q.guaranteed_gpus) + "), got " +
                  std::to_string(q.limit_gpus));
        ok = false;
      }
      if (q.parent == q.name) {
        Error(e["parent"], at + ".parent", "a queue cannot be its own parent");
        ok = false;
      }
      for (size_t k = 0; k < out.size(); ++k) {
        if (out[k].name == q.name && out[k].tenant == q.tenant) {
          Error(e["name"], at + ".name",
                "queue " + q.name + " of tenant " + q.tenant + " is already defined at line " +
                    std::to_string(lines[k]));
          ok = false;
        }
      }
      if (!ok) continue;
      out.push_back(q);
      lines.push_back(LineOfNode(e));
    }
    for (size_t i = 0; i < out.size(); ++i) {
      const Queue& q = out[i];
      if (q.parent.empty()) continue;
      bool found = std::any_of(out.begin(), out.end(), [&](const Queue& p) {
        return p.tenant == q.tenant && p.name == q.parent;
      });
      if (!found) {
        ErrorAtLine(lines[i], "queues.parent",
                    "queue " + q.name + ": parent " + QuoteForMessage(q.parent) +
                        " is not a queue of tenant " + q.tenant);
      }
    }
  }

  void ReadClasses(const YAML::Node& v, std::vector<PriorityClass>& out) {
    if (!List(v, "priority_classes")) return;
    const size_t defaults = out.size();
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& e = v[i];
      const std::string at = Indexed("priority_classes", i);
      if (!Map(e, at, kClassFields)) continue;
      PriorityClass p;
      bool has_value = false, ok = true;
      ForEachField(e, at, kClassFields, [&](const std::string& key, const YAML::Node& x) {
        const std::string f = at + "." + key;
        bool r = true;
        if (key == "name") {
          r = Name(x, f, p.name);
        } else if (key == "value") {
          r = has_value = IntAs(x, f, -1'000'000, 1'000'000, p.value);
        } else if (key == "preemptible") {
          r = Bool(x, f, p.preemptible);
        }
        ok = ok && r;
      });
      if (p.name.empty()) {
        Error(e, at + ".name", "required: give the class a name");
        continue;
      }
      if (!has_value && ok) {
        Error(e, at + ".value", "required: the class's priority value (higher goes first)");
        continue;
      }
      if (!ok) continue;
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const PriorityClass& c) { return c.name == p.name; });
      if (it != out.end() && static_cast<size_t>(it - out.begin()) >= defaults) {
        Error(e["name"], at + ".name", "class " + p.name + " is defined twice");
      } else if (it != out.end()) {
        *it = p;
      } else {
        out.push_back(p);
      }
    }
  }

  void ReadJobs(const YAML::Node& v, Scenario& sc) {
    if (!List(v, "jobs")) return;
    std::vector<std::string_view> class_names;
    for (const auto& c : sc.priority_classes) class_names.push_back(c.name);
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& e = v[i];
      const std::string at = Indexed("jobs", i);
      if (!Map(e, at, kJobFields)) continue;
      ScenarioJob j;
      j.line = LineOfNode(e);
      bool ok = true, has_min = false, has_mode = false;
      std::string topology = "none", mode = "hard";
      ForEachField(e, at, kJobFields, [&](const std::string& key, const YAML::Node& x) {
        const std::string f = at + "." + key;
        bool r = true;
        if (key == "id") {
          r = Int(x, f, 1, INT64_MAX, j.id);
        } else if (key == "name") {
          r = Name(x, f, j.name);
        } else if (key == "tenant") {
          r = Name(x, f, j.tenant);
        } else if (key == "queue") {
          r = Name(x, f, j.queue);
        } else if (key == "priority") {
          r = Choice(x, f, class_names, j.priority);
        } else if (key == "replicas") {
          r = IntAs(x, f, 1, SpecLimits::kMaxReplicas, j.replicas);
        } else if (key == "min_replicas") {
          r = has_min = IntAs(x, f, 1, SpecLimits::kMaxReplicas, j.min_replicas);
        } else if (key == "gpus") {
          r = Int(x, f, 0, SpecLimits::kMaxGpusPerReplica, j.per_replica.gpus);
        } else if (key == "gpu_type") {
          r = String(x, f, j.per_replica.gpu_type);
          j.per_replica.gpu_type = NormalizeGpuType(j.per_replica.gpu_type);
        } else if (key == "gpu_memory") {
          r = MemoryField(x, f, j.per_replica.gpu_memory_bytes);
        } else if (key == "cpus") {
          r = CpusField(x, f, j.per_replica.milli_cpus, SpecLimits::kMaxMilliCpusPerReplica);
        } else if (key == "memory") {
          r = MemoryField(x, f, j.per_replica.memory_bytes);
        } else if (key == "topology") {
          r = Choice(x, f, kTopologies, topology);
        } else if (key == "mode") {
          r = has_mode = Choice(x, f, {"hard", "soft"}, mode);
        } else if (key == "time_limit") {
          r = DurationField(x, f, j.time_limit);
        } else if (key == "duration") {
          Duration d{0};
          r = DurationField(x, f, d);
          if (r && d.count() <= 0) {
            Error(x, f,
                  "must be > 0, got " + QuoteForMessage(x.Scalar()) +
                      "; leave it out for a job that runs until a step finishes it");
            r = false;
          }
          if (r) j.duration = d;
        } else if (key == "checkpoint_interval") {
          r = DurationField(x, f, j.checkpoint_interval);
        } else if (key == "preempt_grace") {
          r = DurationField(x, f, j.preempt_grace);
        } else if (key == "exclude") {
          r = NodeList(x, f, j.exclude);
        } else if (key == "data") {
          r = DatasetList(x, f, j.data);
        }
        ok = ok && r;
      });
      if (j.id == 0) {
        if (ok) Error(e, at + ".id", "required: every job needs an id >= 1");
        continue;
      }
      if (!has_min) j.min_replicas = j.replicas;
      if (j.min_replicas > j.replicas) {
        Error(e["min_replicas"], at + ".min_replicas",
              "must be <= replicas (" + std::to_string(j.replicas) + "), got " +
                  std::to_string(j.min_replicas));
        ok = false;
      }
      if (SaturatingMul(j.per_replica.gpus, j.replicas) > SpecLimits::kMaxTotalGpus) {
        Error(e["gpus"], at + ".gpus",
              "the gang asks for more than " + std::to_string(SpecLimits::kMaxTotalGpus) + " GPUs");
        ok = false;
      }
      j.topology.constraint = *ParseTopologyConstraint(topology);
      j.topology.hard = mode == "hard";
      if (has_mode && j.topology.constraint == TopologyConstraint::kNone) {
        Error(e["mode"], at + ".mode", "applies only with a topology constraint; add topology:");
        ok = false;
      }
      if (j.name.empty()) j.name = "job-" + std::to_string(j.id);
      if (auto [it, fresh] = job_lines_.emplace(j.id, j.line); !fresh) {
        Error(e["id"], at + ".id",
              "job " + std::to_string(j.id) + " is already defined at line " +
                  std::to_string(it->second));
        continue;
      }
      if (!ok) {
        bad_jobs_.insert(j.id);  // defined, so steps may refer to it without more noise
        continue;
      }
      sc.jobs.push_back(std::move(j));
    }
  }

  // A list of dataset names (scenarios name data by dataset; each stands for one version).
  bool DatasetList(const YAML::Node& x, const std::string& f, std::vector<std::string>& out) {
    if (!List(x, f)) return false;
    bool ok = true;
    for (size_t k = 0; k < x.size(); ++k) {
      std::string n;
      if (!Name(x[k], Indexed(f, k), n)) {
        ok = false;
        continue;
      }
      out.push_back(n);
    }
    return ok;
  }

  bool NodeList(const YAML::Node& x, const std::string& f, std::vector<std::string>& out) {
    if (!List(x, f)) return false;
    bool ok = true;
    for (size_t k = 0; k < x.size(); ++k) {
      std::string n;
      if (!String(x[k], Indexed(f, k), n)) {
        ok = false;
        continue;
      }
      if (!KnownNode(x[k], Indexed(f, k), n)) {
        ok = false;
        continue;
      }
      out.push_back(n);
    }
    return ok;
  }

  bool KnownNode(const YAML::Node& at, const std::string& f, const std::string& name) {
    if (std::find(node_names_.begin(), node_names_.end(), name) != node_names_.end()) return true;
    std::string msg = "no node is called " + QuoteForMessage(name);
    std::vector<std::string_view> names(node_names_.begin(), node_names_.end());
    if (std::string hint = ClosestMatch(name, names); !hint.empty()) {
      msg += "; did you mean " + hint + "?";
    } else if (!names.empty()) {
      msg += "; nodes are " +
             JoinNames(std::vector<std::string_view>(
                 names.begin(), names.begin() + std::min<size_t>(names.size(), 8))) +
             (names.size() > 8 ? ", ..." : "");
    }
    Error(at, f, msg);
    return false;
  }

  // Job ids: a list, or a single id.
  bool JobIds(const YAML::Node& x, const std::string& f, const Scenario& sc,
              std::vector<JobId>& out) {
    auto one = [&](const YAML::Node& e, const std::string& ef) {
      int64_t id = 0;
      if (!Int(e, ef, 1, INT64_MAX, id)) return false;
      if (sc.FindJob(id) == nullptr) {
        if (bad_jobs_.count(id) == 0) {
          Error(e, ef, "job " + std::to_string(id) + " is not defined; add it under jobs:");
        }
        return false;
      }
      if (std::find(out.begin(), out.end(), id) != out.end()) {
        Error(e, ef, "job " + std::to_string(id) + " is listed twice");
        return false;
      }
      out.push_back(id);
      return true;
    };
    if (x.IsScalar()) return one(x, f);
    if (!x.IsSequence()) {
      Error(x, f, "must be a list of job ids, got " + KindName(x));
      return false;
    }
    bool ok = true;
    for (size_t k = 0; k < x.size(); ++k) ok = one(x[k], Indexed(f, k)) && ok;
    return ok;
  }

  void ReadSteps(const YAML::Node& v, Scenario& sc) {
    if (!List(v, "steps")) return;
    if (v.size() == 0) Error(v, "steps", "must list at least one step");
    std::map<JobId, std::string> submitted;  // job -> where
    Duration last{0};
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& e = v[i];
      const std::string at = Indexed("steps", i);
      if (!Map(e, at, kStepFields)) continue;
      ScenarioStep s;
      s.line = LineOfNode(e);
      bool has_at = false, at_given = false;
      ForEachField(e, at, kStepFields, [&](const std::string& key, const YAML::Node& x) {
        const std::string f = at + "." + key;
        s.field_lines[key] = LineOfNode(x);
        if (key == "at") {
          at_given = true;
          has_at = DurationField(x, f, s.at);
          if (has_at && s.at < last) {
            Error(x, f,
                  "steps must not go back in time: " + FormatDuration(s.at) +
                      " is before the previous step's " + FormatDuration(last));
          }
          if (has_at) last = std::max(last, s.at);
        } else if (key == "submit") {
          JobIds(x, f, sc, s.submit);
          for (JobId id : s.submit) {
            auto [it, fresh] = submitted.emplace(id, f);
            if (!fresh) {
              Error(x, f,
                    "job " + std::to_string(id) + " is already submitted by " + it->second +
                        "; a job is submitted once (preempted jobs requeue by themselves)");
            }
          }
        } else if (key == "finish") {
          JobIds(x, f, sc, s.finish);
        } else if (key == "checkpoint") {
          JobIds(x, f, sc, s.checkpoint);
        } else if (key == "hold") {
          JobIds(x, f, sc, s.hold);
        } else if (key == "release") {
          JobIds(x, f, sc, s.release);
        } else if (key == "node_state") {
          ReadNodeStates(x, f, s);
        }
      });
      if (!at_given) {
        Error(e, at + ".at", "required: when the step happens, e.g. at: 10m");
      }
      sc.steps.push_back(std::move(s));
    }
    for (const ScenarioJob& j : sc.jobs) {
      if (submitted.count(j.id) == 0) {
        ErrorAtLine(j.line, "jobs",
                    "job " + std::to_string(j.id) +
                        " is never submitted; submit it in a step or remove it");
      }
    }
  }

  void ReadNodeStates(const YAML::Node& x, const std::string& f, ScenarioStep& s) {
    if (!x.IsMap()) {
      Error(x, f,
            "must be a map of node name to state (" + JoinNames(kNodeStates) + "), got " +
                KindName(x));
      return;
    }
    for (const auto& kv : x) {
      if (!kv.first.IsScalar()) {
        Error(kv.first, f, "keys must be node names, got " + KindName(kv.first));
        continue;
      }
      const std::string name = kv.first.Scalar();
      const std::string nf = f + "." + name;
      if (!KnownNode(kv.first, nf, name)) continue;
      std::string state;
      if (!Choice(kv.second, nf, kNodeStates, state)) continue;
      s.node_state.emplace_back(name, *ParseNodeState(state));
    }
  }

  std::vector<std::string> node_names_;
  std::set<JobId> bad_jobs_;        // defined with errors
  std::map<JobId, int> job_lines_;  // every job id defined, and where
};

}  // namespace

const ScenarioJob* Scenario::FindJob(JobId id) const {
  for (const ScenarioJob& j : jobs) {
    if (j.id == id) return &j;
  }
  return nullptr;
}

const PriorityClass* Scenario::FindPriorityClass(std::string_view name) const {
  for (const PriorityClass& p : priority_classes) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const std::vector<std::string_view>& ScenarioFieldNames() { return kTopFields; }

namespace {

// Checks the text itself (size, encoding, YAML syntax, exactly one document) and
// hands the document to `read`; problems go to `reader`. `what` names the kind of
// file in messages ("scenario"), `needs` what it must hold.
void ReadOneDocument(std::string_view text, std::string_view what, std::string_view needs,
                     ScenarioReader& reader, const std::function<void(const YAML::Node&)>& read) {
  const std::string kind(what);
  if (text.size() > kMaxScenarioBytes) {
    reader.ErrorAtLine(0, "",
                       kind + " is " + std::to_string(text.size()) + " bytes; at most " +
                           std::to_string(kMaxScenarioBytes) + " are accepted");
    return;
  }
  if (auto bad = FirstInvalidUtf8(text);
      bad != std::string_view::npos || text.find('\0') != std::string_view::npos) {
    if (bad == std::string_view::npos) bad = text.find('\0');
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + bad, '\n'));
    reader.ErrorAtLine(
        line, "", kind + " is not UTF-8 text (bad byte at offset " + std::to_string(bad) + ")");
    return;
  }
  try {
    YamlText yaml = LoadYamlText(text);
    if (yaml.documents == 0 || (yaml.documents == 1 && yaml.first.IsNull())) {
      reader.ErrorAtLine(0, "", kind + " is empty; it needs " + std::string(needs));
    } else if (yaml.documents > 1) {
      reader.ErrorAtLine(0, "",
                         "holds " + DocumentCount(yaml) + "; give one " + kind + " per file");
    } else {
      read(yaml.first);
    }
  } catch (const YAML::Exception& e) {
    ReportYamlError(reader, e);
  }
}

void SortByLine(std::vector<Diagnostic>& errors) {
  std::stable_sort(errors.begin(), errors.end(),
                   [](const Diagnostic& a, const Diagnostic& b) { return a.line < b.line; });
}

}  // namespace

std::string ScenarioDataVersion(std::string_view dataset) {
  // Four FNV-1a hashes of the name with different seeds: 64 hex digits that stand for
  // the version (scenarios have no content to hash, and the CLI that replays them
  // loads no crypto library).
  std::string out = "sha256:";
  for (uint64_t seed : {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull, 0x9e3779b97f4a7c15ull,
                        0xc2b2ae3d27d4eb4full}) {
    uint64_t h = seed;
    for (char c : dataset) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001b3ull;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    out += buf;
  }
  return out;
}

ScenarioParseResult ParseScenario(std::string_view text, std::string_view file) {
  ScenarioParseResult result;
  ScenarioReader reader(file);
  Scenario sc;
  sc.file = std::string(file);
  ReadOneDocument(text, "scenario", "nodes, jobs and steps", reader,
                  [&](const YAML::Node& root) { reader.Read(root, sc); });
  if (reader.errors().empty()) result.scenario = std::move(sc);
  result.errors = std::move(reader.errors());
  SortByLine(result.errors);
  return result;
}

ClusterParseResult ParseClusterSections(std::string_view text, std::string_view file) {
  ClusterParseResult result;
  ScenarioReader reader(file);
  ClusterSpec cluster;
  ReadOneDocument(text, "cluster", "nodes", reader,
                  [&](const YAML::Node& root) { reader.ReadCluster(root, cluster); });
  if (reader.errors().empty()) result.cluster = std::move(cluster);
  result.errors = std::move(reader.errors());
  SortByLine(result.errors);
  return result;
}

}  // namespace trainyard::sim
