#include "cli/sim_cmd.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/app.h"
#include "core/memory.h"
#include "core/names.h"
#include "sim/cluster.h"
#include "sim/report.h"
#include "sim/sim.h"
#include "sim/traces.h"

namespace trainyard::cli {
namespace {

struct Spec {
  std::string kind;
  std::string rest;
};

Spec SplitSpec(const std::string& s) {
  auto colon = s.find(':');
  if (colon == std::string::npos) return {"", s};
  return {s.substr(0, colon), s.substr(colon + 1)};
}

std::string DirOf(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// "a=1,b=2" -> map; errors name the option and the bad item.
Result<std::map<std::string, std::string>> KeyValues(const std::string& flag,
                                                     const std::string& s) {
  std::map<std::string, std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument(flag + ": expected KEY=VALUE, got " + QuoteForMessage(item));
    }
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

Result<double> Number(const std::string& flag, const std::string& key, const std::string& v) {
  try {
    size_t used = 0;
    double d = std::stod(v, &used);
    if (used == v.size()) return d;
  } catch (...) {
  }
  return InvalidArgument(flag + ": " + key + " must be a number, got " + QuoteForMessage(v));
}

Result<sim::Trace> LoadTrace(const std::string& spec_text) {
  Spec spec = SplitSpec(spec_text);
  if (spec.kind == "philly") return sim::ReadPhillyJobs(spec.rest);
  if (spec.kind == "alibaba") return sim::ReadAlibabaPods(spec.rest);
  if (spec.kind == "csv") return sim::ReadTrainyardCsv(spec.rest);
  if (spec.kind == "synthetic") {
    TY_ASSIGN_OR_RETURN(auto kv, KeyValues("--trace synthetic", spec.rest));
    sim::SyntheticOptions o;
    const std::vector<std::string_view> keys = {"jobs",       "rate",          "seed",
                                                "median",     "sigma",         "limit",
                                                "checkpoint", "gpus_per_node", "tenants"};
    for (const auto& [k, v] : kv) {
      if (k == "jobs" || k == "rate" || k == "seed" || k == "sigma" || k == "limit" ||
          k == "gpus_per_node") {
        TY_ASSIGN_OR_RETURN(double d, Number("--trace synthetic", k, v));
        if (k == "jobs") o.jobs = static_cast<int64_t>(d);
        if (k == "rate") o.arrivals_per_hour = d;
        if (k == "seed") o.seed = static_cast<uint64_t>(d);
        if (k == "sigma") o.duration_sigma = d;
        if (k == "limit") o.time_limit_factor = d;
        if (k == "gpus_per_node") o.gpus_per_node = static_cast<int32_t>(d);
      } else if (k == "median" || k == "checkpoint") {
        auto d = ParseDuration(v);
        if (!d.ok())
          return InvalidArgument("--trace synthetic: " + k + ": " + d.status().message());
        (k == "median" ? o.duration_median : o.checkpoint_interval) = *d;
      } else if (k == "tenants") {
        o.tenants.clear();
        std::stringstream ts(v);
        std::string name;
        while (std::getline(ts, name, ';')) {
          if (!name.empty()) o.tenants.emplace_back(name, 1.0);
        }
      } else {
        std::string msg = "--trace synthetic: unknown knob " + QuoteForMessage(k);
        if (auto hint = ClosestMatch(k, keys); !hint.empty()) msg += "; did you mean " + hint + "?";
        return InvalidArgument(msg +
                               "; knobs: jobs, rate, seed, median, sigma, limit, checkpoint, "
                               "gpus_per_node, tenants (a;b;c)");
      }
    }
    TY_RETURN_IF_ERROR(sim::ValidateSyntheticOptions(o));
    return sim::Synthesize(o);
  }
  return InvalidArgument(
      "--trace: expected FORMAT:FILE with FORMAT one of philly, alibaba, csv, "
      "synthetic, got " +
      QuoteForMessage(spec_text));
}

Result<sim::ClusterSpec> LoadCluster(const std::string& cluster, const std::string& trace) {
  Spec spec = SplitSpec(cluster);
  if (cluster.empty()) {
    Spec t = SplitSpec(trace);
    if (t.kind == "philly") return sim::PhillyClusterFromVcs(DirOf(t.rest) + "/philly_vc.csv");
    if (t.kind == "alibaba")
      return sim::ReadAlibabaNodes(DirOf(t.rest) + "/openb_node_list_gpu_node.csv");
    return InvalidArgument("--cluster: required for a " + (t.kind.empty() ? "" : t.kind + " ") +
                           "trace (a YAML file or synthetic:nodes=N,gpus=G)");
  }
  if (spec.kind == "philly-vcs") return sim::PhillyClusterFromVcs(spec.rest);
  if (spec.kind == "philly-machines") return sim::PhillyClusterFromMachines(spec.rest);
  if (spec.kind == "alibaba-nodes") return sim::ReadAlibabaNodes(spec.rest);
  if (spec.kind == "synthetic") {
    TY_ASSIGN_OR_RETURN(auto kv, KeyValues("--cluster synthetic", spec.rest));
    int32_t nodes = 0, gpus = 8, leaf = 32;
    std::string type = "H100";
    for (const auto& [k, v] : kv) {
      if (k == "type") {
        type = v;
        continue;
      }
      TY_ASSIGN_OR_RETURN(double d, Number("--cluster synthetic", k, v));
      if (k == "nodes")
        nodes = static_cast<int32_t>(d);
      else if (k == "gpus")
        gpus = static_cast<int32_t>(d);
      else if (k == "leaf")
        leaf = static_cast<int32_t>(d);
      else
        return InvalidArgument("--cluster synthetic: unknown key " + QuoteForMessage(k) +
                               "; keys: nodes, gpus, type, leaf");
    }
    return sim::SyntheticCluster(nodes, gpus, type, leaf);
  }
  return sim::ReadClusterYamlFile(cluster);
}

// A one-line progress bar on standard error.
class ProgressBar {
 public:
  explicit ProgressBar(std::ostream& err, std::string label)
      : err_(err), label_(std::move(label)) {}
  void Update(Duration now, Duration end) {
    double f =
        end.count() > 0
            ? std::min(1.0, static_cast<double>(now.count()) / static_cast<double>(end.count()))
            : 1.0;
    int filled = static_cast<int>(f * 30);
    err_ << "\r" << label_ << " [" << std::string(filled, '#') << std::string(30 - filled, ' ')
         << "] " << static_cast<int>(f * 100) << "% " << std::flush;
  }
  void Done() { err_ << "\r" << std::string(label_.size() + 40, ' ') << "\r" << std::flush; }

 private:
  std::ostream& err_;
  std::string label_;
};

// The trace's source without directories, so that output does not depend on them.
std::string SourceName(const sim::Trace& trace) {
  std::string source = trace.source;
  if (auto slash = source.rfind('/'); slash != std::string::npos) {
    source = source.substr(0, source.find(':') + 1) + source.substr(slash + 1);
  }
  return source;
}

int64_t PeakRssKib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// Runs `run(policy)` for each policy in turn, recording in each result's summary what
// the run cost (wall time, peak RSS so far). On a failure: prints it, returns its exit
// status.
template <typename R, typename Run>
std::optional<int> RunPolicies(const std::vector<std::string>& policies, std::ostream& err,
                               std::vector<R>& results, Run&& run) {
  for (const std::string& p : policies) {
    auto start = std::chrono::steady_clock::now();
    Result<R> r = run(p);
    if (!r.ok()) {
      err << "trainyard sim: " << p << ": " << r.status().message() << "\n";
      return r.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
    }
    r->summary.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r->summary.peak_rss_kib = PeakRssKib();
    results.push_back(std::move(*r));
  }
  return std::nullopt;
}

// The results' summaries as a JSON list, one object per policy.
template <typename R, typename ToJson>
void PrintJsonList(const std::vector<R>& results, ToJson&& to_json, std::ostream& out) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& r : results) list.push_back(to_json(r.summary));
  out << list.dump(2) << "\n";
}

// A bad --fill, or an option of the replay that means nothing to the fill experiment
// (it has no time and nothing ends): an error naming it.
Status CheckFillOptions(const SimCommandOptions& o) {
  TY_RETURN_IF_ERROR(sim::ValidateFillRatio(o.fill));
  const SimCommandOptions defaults;
  struct Clash {
    const char* flag;
    bool given;
  };
  for (Clash c :
       {Clash{"--load-factor", o.load_factor != defaults.load_factor},
        Clash{"--mtbf-hours", o.gpu_mtbf_hours != defaults.gpu_mtbf_hours},
        Clash{"--pressure", o.pressure_per_hour != defaults.pressure_per_hour},
        Clash{"--time-limit-factor", o.time_limit_factor != defaults.time_limit_factor}}) {
    if (c.given) {
      return InvalidArgument(std::string("--fill: cannot be combined with ") + c.flag +
                             " (in the fill experiment jobs arrive one by one and never end)");
    }
  }
  return Status::Ok();
}

int RunFill(const SimCommandOptions& options, const std::vector<std::string>& policies,
            const sim::Trace& trace, const sim::ClusterSpec& cluster, std::ostream& out,
            std::ostream& err) {
  std::vector<sim::FillResult> results;
  if (auto failed = RunPolicies(policies, err, results, [&](const std::string& p) {
        sim::FillOptions o;
        o.policy = p;
        o.ratio = options.fill;
        o.seed = options.seed;
        o.gpu_sharing = options.gpu_sharing;
        return sim::SimulateFill(trace, cluster, o);
      })) {
    return *failed;
  }
  if (options.output == "json") {
    PrintJsonList(results, sim::FillSummaryJson, out);
  } else {
    std::vector<sim::FillSummary> rows;
    for (const auto& r : results) rows.push_back(r.summary);
    out << "fill experiment: " << SourceName(trace) << " to " << options.fill * 100
        << "% of the GPUs of " << cluster.nodes.size() << " nodes";
    if (options.node_fraction != 1.0) out << " (node fraction " << options.node_fraction << ")";
    out << ", seed " << options.seed << "\n" << sim::RenderFillTable(rows);
  }
  for (const auto& r : results) {
    err << r.summary.policy << ": " << r.summary.passes << " passes in " << r.summary.wall_s
        << " s, peak RSS " << r.summary.peak_rss_kib / 1024 << " MiB\n";
  }
  if (!options.report_dir.empty()) {
    if (Status s = sim::WriteFillReport(options.report_dir, results); !s.ok()) {
      err << "trainyard sim: " << s.message() << "\n";
      return kExitFailure;
    }
  }
  return kExitOk;
}

}  // namespace

int RunSim(const SimCommandOptions& options, std::ostream& out, std::ostream& err) {
  auto fail = [&](const Status& s) {
    err << "trainyard sim: " << s.message() << "\n";
    return kExitUsage;
  };
  KeepFreedMemoryForReuse();  // thousands of passes, each allocating and freeing
  std::vector<std::string> policies;
  {
    std::stringstream ss(options.policies);
    std::string p;
    while (std::getline(ss, p, ',')) {
      if (p.empty()) continue;
      if (auto r = sim::PolicyFor(p); !r.ok()) return fail(r.status());
      policies.push_back(p);
    }
    if (policies.empty()) return fail(InvalidArgument("--policies: give at least one policy"));
  }
  if (options.fill != 0) {
    if (Status s = CheckFillOptions(options); !s.ok()) return fail(s);
  }
  sim::SimOptions base;
  base.load_factor = options.load_factor;
  base.seed = options.seed;
  base.gpu_mtbf_hours = options.gpu_mtbf_hours;
  base.pressure_per_hour = options.pressure_per_hour;
  base.pressure_gpus = options.pressure_gpus;
  base.pressure_priority = options.pressure_priority;
  base.pressure_queue = options.pressure_queue;
  base.time_limit_factor = options.time_limit_factor;
  base.gpu_sharing = options.gpu_sharing;
  struct DurationFlag {
    const char* flag;
    const std::string* text;
    Duration* out;
  };
  for (DurationFlag f :
       {DurationFlag{"--checkpoint-interval", &options.checkpoint_interval,
                     &base.default_checkpoint_interval},
        DurationFlag{"--schedule-interval", &options.schedule_interval, &base.schedule_interval},
        DurationFlag{"--preempt-grace", &options.preempt_grace, &base.preempt_grace},
        DurationFlag{"--restart-overhead", &options.restart_overhead, &base.restart_overhead},
        DurationFlag{"--pressure-duration", &options.pressure_duration, &base.pressure_duration}}) {
    auto d = ParseDuration(*f.text);
    if (!d.ok()) return fail(InvalidArgument(std::string(f.flag) + ": " + d.status().message()));
    *f.out = *d;
  }
  auto trace = LoadTrace(options.trace);
  if (!trace.ok()) return fail(trace.status());
  auto cluster = LoadCluster(options.cluster, options.trace);
  if (!cluster.ok()) return fail(cluster.status());
  if (options.node_fraction != 1.0) {
    cluster = sim::ThinCluster(std::move(*cluster), options.node_fraction);
    if (!cluster.ok()) return fail(cluster.status());
  }
  for (const auto& w : trace->warnings) err << "warning: " << w << "\n";
  if (options.fill != 0) return RunFill(options, policies, *trace, *cluster, out, err);

  const bool bar = options.progress && isatty(STDERR_FILENO);
  std::vector<sim::SimResult> results;
  if (auto failed = RunPolicies(policies, err, results, [&](const std::string& p) {
        sim::SimOptions o = base;
        o.policy = p;
        std::unique_ptr<ProgressBar> progress;
        if (bar) {
          progress = std::make_unique<ProgressBar>(err, p);
          o.progress = [&progress](Duration now, Duration end) { progress->Update(now, end); };
        }
        auto r = sim::Simulate(*trace, *cluster, o);
        if (progress) progress->Done();
        return r;
      })) {
    return *failed;
  }
  if (options.output == "json") {
    PrintJsonList(results, sim::SummaryJson, out);
  } else {
    std::vector<sim::SimSummary> rows;
    for (const auto& r : results) rows.push_back(r.summary);
    out << SourceName(*trace) << ": " << trace->jobs.size() << " jobs on " << cluster->nodes.size()
        << " nodes";
    if (options.node_fraction != 1.0) out << " (node fraction " << options.node_fraction << ")";
    out << ", load factor " << options.load_factor << "\n";
    out << sim::RenderTable(rows);
  }
  // What the run itself cost goes to standard error, so that standard output is the
  // same for the same input (golden tests compare it).
  for (const auto& r : results) {
    err << r.summary.policy << ": " << r.summary.events << " events, " << r.summary.passes
        << " passes in " << r.summary.wall_s << " s ("
        << static_cast<int64_t>(static_cast<double>(r.summary.events) /
                                std::max(r.summary.wall_s, 1e-9))
        << " events/s), peak RSS " << r.summary.peak_rss_kib / 1024 << " MiB\n";
  }
  if (!options.report_dir.empty()) {
    if (Status s = sim::WriteReport(options.report_dir, results); !s.ok()) {
      err << "trainyard sim: " << s.message() << "\n";
      return kExitFailure;
    }
  }
  return kExitOk;
}

void AddSimCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  auto o = std::make_shared<SimCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "sim",
      "Replay a GPU-cluster trace through the production scheduler under several policies\n"
      "and compare them: JCT, queueing, utilisation, fragmentation, preemptions, lost work,\n"
      "effective training time, starvation and fairness. See docs/simulator.md.");
  cmd->add_option("--trace", o->trace,
                  "FORMAT:FILE with FORMAT philly, alibaba or csv; or synthetic:KEY=VALUE,...")
      ->required();
  cmd->add_option(
      "--cluster", o->cluster,
      "Cluster YAML, philly-vcs:FILE, philly-machines:FILE, alibaba-nodes:FILE or "
      "synthetic:nodes=N,gpus=G[,type=T][,leaf=K]; default: from the trace's node list");
  cmd->add_option(
         "--policies", o->policies,
         "Comma-separated: fifo, k8s-default, trainyard, trainyard-las, best-fit, first-fit")
      ->capture_default_str();
  cmd->add_option("--load-factor", o->load_factor,
                  "Divide inter-arrival times by X (X > 1: more contention on the same cluster)")
      ->capture_default_str();
  cmd->add_option("--node-fraction", o->node_fraction,
                  "Keep this fraction (0 < F <= 1) of the cluster's nodes, evenly over each\n"
                  "kind of node (more contention for the same arrivals)")
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--report", o->report_dir, "Also write per-job CSV and PNG plots into DIR");
  cmd->add_option("--seed", o->seed, "Seed for failure injection")->capture_default_str();
  cmd->add_option("--mtbf-hours", o->gpu_mtbf_hours, "Per-GPU mean time between failures (0: none)")
      ->capture_default_str();
  cmd->add_option("--pressure", o->pressure_per_hour,
                  "Preemption pressure: high-priority jobs injected per hour of trace time\n"
                  "at random (seeded) times (0: none)")
      ->capture_default_str();
  cmd->add_option("--pressure-gpus", o->pressure_gpus, "GPUs of each injected job")
      ->capture_default_str();
  cmd->add_option("--pressure-duration", o->pressure_duration, "Running time of each injected job")
      ->capture_default_str();
  cmd->add_option("--pressure-priority", o->pressure_priority,
                  "Priority class of the injected jobs")
      ->capture_default_str();
  cmd->add_option("--pressure-queue", o->pressure_queue,
                  "TENANT/QUEUE of the injected jobs (default: the cluster's first queue)");
  cmd->add_option("--time-limit-factor", o->time_limit_factor,
                  "Give jobs without a time limit one of X times their duration, so that\n"
                  "backfill can plan reservations (X >= 1; 0: none)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-interval", o->checkpoint_interval,
                  "For jobs whose trace gives none")
      ->capture_default_str();
  cmd->add_option("--schedule-interval", o->schedule_interval, "At most one pass per interval")
      ->capture_default_str();
  cmd->add_option("--preempt-grace", o->preempt_grace, "How long a preempted job keeps its GPUs")
      ->capture_default_str();
  cmd->add_option("--restart-overhead", o->restart_overhead, "Per restart after an interruption")
      ->capture_default_str();
  cmd->add_flag("!--no-gpu-sharing", o->gpu_sharing,
                "Give a job that asks for a share of one GPU (gpu_milli) a whole GPU");
  cmd->add_flag("!--no-progress", o->progress, "No progress bar");
  cmd->add_option("--fill", o->fill,
                  "Instead of a replay, FGD's fill experiment: jobs drawn from the trace\n"
                  "(seeded by --seed) arrive one by one and never end until their GPUs reach\n"
                  "X times the cluster's (1.3: 130 %); reports the GPUs left free");
  cmd->callback([o, &exit_code, &out, &err] { exit_code = RunSim(*o, out, err); });
}

}  // namespace trainyard::cli
