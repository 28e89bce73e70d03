#include "cli/sched_cmd.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "cli/app.h"

namespace trainyard::cli {
namespace {

using nlohmann::ordered_json;
using sim::ReplayEvent;

constexpr size_t kMaxScenarioFileBytes = 4 << 20;

std::string Time(Duration d) { return FormatDuration(d); }
std::string Time(Timestamp t) { return FormatDuration(t.time_since_epoch()); }

std::string GpuHours(Duration gpu_time) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(gpu_time.count()) / 3'600'000.0);
  return buf;
}

// "0-3,6": sorted indices with runs of three or more collapsed.
std::string IndexRanges(std::vector<int> gpus) {
  std::sort(gpus.begin(), gpus.end());
  std::string out;
  for (size_t i = 0; i < gpus.size();) {
    size_t j = i;
    while (j + 1 < gpus.size() && gpus[j + 1] == gpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    if (j >= i + 2) {
      out += std::to_string(gpus[i]) + "-" + std::to_string(gpus[j]);
    } else {
      for (size_t k = i; k <= j; ++k) out += (k > i ? "," : "") + std::to_string(gpus[k]);
    }
    i = j + 1;
  }
  return out;
}

std::string Replicas(const std::vector<sched::Placement>& replicas) {
  std::string out;
  for (const auto& p : replicas) {
    if (!out.empty()) out += " ";
    out += p.node + "[" + IndexRanges(p.gpus) + "]";
  }
  return out;
}

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

ordered_json ReplicasJson(const std::vector<sched::Placement>& replicas) {
  ordered_json a = ordered_json::array();
  for (const auto& p : replicas) a.push_back({{"node", p.node}, {"gpus", p.gpus}});
  return a;
}

ordered_json DiagnosticJson(const Diagnostic& d) {
  return {{"file", d.file}, {"line", d.line}, {"field", d.field}, {"message", d.message}};
}

// Event kinds that carry only a job id are listed on one line per kind.
bool Groupable(ReplayEvent::Kind k) {
  return k == ReplayEvent::Kind::kSubmitted || k == ReplayEvent::Kind::kFinished ||
         k == ReplayEvent::Kind::kHeld || k == ReplayEvent::Kind::kReleased;
}

std::string EventText(const ReplayEvent& e) {
  std::string out = "+ " + Pad(std::string(sim::ReplayEventName(e.kind)), 11);
  switch (e.kind) {
    case ReplayEvent::Kind::kNodeState:
      return out + e.node + " " + e.detail;
    case ReplayEvent::Kind::kSucceeded:
    case ReplayEvent::Kind::kTimedOut:
      return out + std::to_string(e.job) + " at " + Time(e.at) + ", " + e.detail;
    case ReplayEvent::Kind::kCheckpoint:
      return out + std::to_string(e.job) + " at " + Time(e.at) +
             (e.detail.empty() ? "" : " (" + e.detail + ")");
    case ReplayEvent::Kind::kRequeued:
      return out + std::to_string(e.job) + ": " + e.detail;
    default:
      return out + std::to_string(e.job);
  }
}

// The text of a scenario file, or why it cannot be read.
Result<std::string> ReadScenarioFile(const std::string& path, std::istream& in) {
  auto slurp = [](std::istream& s) {
    // One byte past the limit, so that an oversized file is reported, not loaded.
    std::string buf(kMaxScenarioFileBytes + 1, '\0');
    s.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    buf.resize(static_cast<size_t>(s.gcount()));
    return buf;
  };
  if (path == "-") return slurp(in);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return InvalidArgument("cannot read: " + std::string(std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) return InvalidArgument("is a directory; give a scenario file");
  std::ifstream file(path, std::ios::binary);
  if (!file) return InvalidArgument("cannot read: " + std::string(std::strerror(errno)));
  return slurp(file);
}

}  // namespace

std::string RenderReplayText(const sim::ReplayResult& result) {
  std::string out;
  auto line = [&](const std::string& verb, JobId job, const std::string& rest) {
    out += Pad(verb, 11) + Pad(std::to_string(job), 3) + "  " + rest + "\n";
  };
  Duration end{0};
  for (const sim::StepOutcome& s : result.steps) {
    end = s.at;
    out += "== step " + std::to_string(s.number) + " at " + Time(s.at) + "\n";
    for (size_t i = 0; i < s.events.size(); ++i) {
      const ReplayEvent& e = s.events[i];
      if (!Groupable(e.kind)) {
        out += EventText(e) + "\n";
        continue;
      }
      std::string ids = std::to_string(e.job);
      while (i + 1 < s.events.size() && s.events[i + 1].kind == e.kind) {
        ids += ", " + std::to_string(s.events[++i].job);
      }
      out += "+ " + Pad(std::string(sim::ReplayEventName(e.kind)), 11) + ids + "\n";
    }
    const sched::Decisions& d = s.decisions;
    for (const auto& b : d.binds) line("bind", b.job, Replicas(b.replicas));
    for (const auto& p : d.preemptions) {
      line("preempt", p.job,
           "for " + std::to_string(p.for_job) + ", lost " + GpuHours(p.lost_gpu_time) +
               " GPU-h: " + p.reason);
    }
    for (const auto& r : d.reservations) {
      line("reserve", r.job, "from " + Time(r.earliest_start) + ": " + Replicas(r.replicas));
    }
    for (const auto& w : d.waiting) line("wait", w.job, w.reason);
    for (const auto& i : d.infeasible) line("infeasible", i.job, i.reason);
    if (d.binds.empty() && d.preemptions.empty() && d.reservations.empty() && d.waiting.empty() &&
        d.infeasible.empty()) {
      out += "(no pending jobs)\n";
    }
    for (const auto& v : s.violations) out += "!! violation: " + v + "\n";
  }
  out += "== summary at " + Time(end) + "\n";
  out += "job  state        starts  first   last    ended   preempted  lost GPU-h\n";
  auto opt = [](const std::optional<Duration>& d) { return d ? Time(*d) : std::string("-"); };
  for (const sim::JobOutcome& j : result.jobs) {
    std::string row =
        Pad(std::to_string(j.id), 5) + Pad(std::string(sim::ReplayStateName(j.state)), 13) +
        Pad(std::to_string(j.starts), 8) + Pad(opt(j.first_start), 8) + Pad(opt(j.last_start), 8) +
        Pad(opt(j.end), 8) + Pad(std::to_string(j.preemptions), 11) + GpuHours(j.lost_gpu_time);
    out += row + "\n";
  }
  return out;
}

ordered_json RenderReplayJson(const sim::ReplayResult& result) {
  ordered_json steps = ordered_json::array();
  for (const sim::StepOutcome& s : result.steps) {
    ordered_json st;
    st["step"] = s.number;
    st["at"] = Time(s.at);
    st["at_ms"] = s.at.count();
    ordered_json events = ordered_json::array();
    for (const ReplayEvent& e : s.events) {
      ordered_json ev;
      ev["event"] = std::string(sim::ReplayEventName(e.kind));
      ev["job"] = e.job != 0 ? ordered_json(e.job) : ordered_json(nullptr);
      ev["node"] = e.node.empty() ? ordered_json(nullptr) : ordered_json(e.node);
      ev["at"] = Time(e.at);
      ev["at_ms"] = e.at.count();
      ev["detail"] = e.detail;
      events.push_back(std::move(ev));
    }
    st["events"] = std::move(events);
    const sched::Decisions& d = s.decisions;
    ordered_json binds = ordered_json::array();
    for (const auto& b : d.binds) {
      binds.push_back({{"job", b.job}, {"replicas", ReplicasJson(b.replicas)}});
    }
    st["binds"] = std::move(binds);
    ordered_json preemptions = ordered_json::array();
    for (const auto& p : d.preemptions) {
      preemptions.push_back({{"job", p.job},
                             {"for_job", p.for_job},
                             {"lost_gpu_ms", p.lost_gpu_time.count()},
                             {"reason", p.reason}});
    }
    st["preemptions"] = std::move(preemptions);
    ordered_json reservations = ordered_json::array();
    for (const auto& r : d.reservations) {
      reservations.push_back({{"job", r.job},
                              {"earliest_start", Time(r.earliest_start)},
                              {"earliest_start_ms", r.earliest_start.time_since_epoch().count()},
                              {"replicas", ReplicasJson(r.replicas)}});
    }
    st["reservations"] = std::move(reservations);
    ordered_json waiting = ordered_json::array();
    for (const auto& w : d.waiting) waiting.push_back({{"job", w.job}, {"reason", w.reason.str()}});
    st["waiting"] = std::move(waiting);
    ordered_json infeasible = ordered_json::array();
    for (const auto& i : d.infeasible) infeasible.push_back({{"job", i.job}, {"reason", i.reason}});
    st["infeasible"] = std::move(infeasible);
    st["violations"] = s.violations;
    steps.push_back(std::move(st));
  }
  ordered_json jobs = ordered_json::array();
  auto opt = [](const std::optional<Duration>& d) -> ordered_json {
    return d ? ordered_json(d->count()) : ordered_json(nullptr);
  };
  for (const sim::JobOutcome& j : result.jobs) {
    jobs.push_back({{"job", j.id},
                    {"name", j.name},
                    {"state", std::string(sim::ReplayStateName(j.state))},
                    {"reason", j.reason},
                    {"starts", j.starts},
                    {"first_start_ms", opt(j.first_start)},
                    {"last_start_ms", opt(j.last_start)},
                    {"end_ms", opt(j.end)},
                    {"preemptions", j.preemptions},
                    {"lost_gpu_ms", j.lost_gpu_time.count()}});
  }
  return {{"steps", std::move(steps)}, {"jobs", std::move(jobs)}};
}

int RunSchedReplay(const SchedReplayOptions& options, std::istream& in, std::ostream& out,
                   std::ostream& err) {
  const bool json = options.output == "json";
  const std::string name = options.file == "-" ? "<stdin>" : options.file;
  std::vector<Diagnostic> errors;
  std::optional<sim::Scenario> scenario;
  if (Result<std::string> text = ReadScenarioFile(options.file, in); !text.ok()) {
    errors.push_back(Diagnostic{name, 0, "", text.status().message()});
  } else {
    sim::ScenarioParseResult parsed = sim::ParseScenario(*text, name);
    errors = std::move(parsed.errors);
    scenario = std::move(parsed.scenario);
  }
  sim::ReplayResult result;
  if (scenario) {
    result = sim::Replay(*scenario);
    errors = result.errors;
  }
  if (!errors.empty()) {
    if (json) {
      ordered_json j = {{"errors", ordered_json::array()}};
      for (const auto& d : errors) j["errors"].push_back(DiagnosticJson(d));
      out << j.dump(2) << "\n";
    } else {
      for (const auto& d : errors) err << d.ToString() << "\n";
    }
    return kExitUsage;
  }
  if (json) {
    out << RenderReplayJson(result).dump(2) << "\n";
  } else {
    out << RenderReplayText(result);
  }
  if (size_t n = result.Violations(); n > 0) {
    err << "trainyard sched replay: " << n
        << " decision(s) broke the scheduler's contracts; see the `!! violation` lines\n";
    return kExitFailure;
  }
  return kExitOk;
}

void AddSchedCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  CLI::App* sched = app.add_subcommand("sched", "Scheduler tools that need no server");
  sched->require_subcommand(1);
  auto options = std::make_shared<SchedReplayOptions>();
  CLI::App* replay = sched->add_subcommand(
      "replay",
      "Run a scenario file (a small cluster and a script of events) through the scheduling\n"
      "policy step by step and print each step's events and decisions, then a summary.\n"
      "Exit status 1 when a decision breaks the scheduler's contracts, 2 when the scenario\n"
      "is invalid (FILE:LINE: FIELD: message). Format: docs/scheduler.md.");
  replay->add_option("scenario", options->file, "Scenario file (YAML); - reads standard input")
      ->required();
  replay->add_option("-o,--output", options->output, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  replay->callback([options, &exit_code, &out, &err] {
    exit_code = RunSchedReplay(*options, std::cin, out, err);
  });
}

}  // namespace trainyard::cli
