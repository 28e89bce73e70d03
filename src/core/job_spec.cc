#include "core/job_spec.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <csignal>

#include "core/dataset.h"
#include "core/image_ref.h"
#include "core/names.h"
#include "core/spec_paths.h"
#include "core/tenancy.h"

namespace trainyard {
namespace {

struct SignalEntry {
  const char* name;
  int number;
};
constexpr std::array kSignals = {
    SignalEntry{"SIGHUP", SIGHUP},   SignalEntry{"SIGINT", SIGINT},
    SignalEntry{"SIGQUIT", SIGQUIT}, SignalEntry{"SIGKILL", SIGKILL},
    SignalEntry{"SIGUSR1", SIGUSR1}, SignalEntry{"SIGUSR2", SIGUSR2},
    SignalEntry{"SIGTERM", SIGTERM}, SignalEntry{"SIGCONT", SIGCONT},
    SignalEntry{"SIGSTOP", SIGSTOP}, SignalEntry{"SIGXCPU", SIGXCPU},
    SignalEntry{"SIGALRM", SIGALRM}, SignalEntry{"SIGPWR", SIGPWR},
};

bool ValidEnvKey(std::string_view k) {
  if (k.empty() || k.size() > 256) return false;
  if (!((k[0] >= 'A' && k[0] <= 'Z') || (k[0] >= 'a' && k[0] <= 'z') || k[0] == '_')) return false;
  for (char c : k) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

bool ValidLabelKey(std::string_view k) {
  if (k.empty() || k.size() > 253) return false;
  for (char c : k) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

// Free text must be UTF-8 without NUL bytes (it ends up in argv, env and JSON).
bool BadText(std::string_view s) {
  return s.find('\0') != std::string_view::npos || !IsValidUtf8(s);
}

class Checker {
 public:
  void Add(std::string field, std::string message) {
    out_.push_back(Diagnostic{"", 0, std::move(field), std::move(message)});
  }
  void Range(std::string field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo) {
      Add(std::move(field), "must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
    } else if (v > hi) {
      Add(std::move(field), "must be <= " + std::to_string(hi) + ", got " + std::to_string(v));
    }
  }
  void Name(std::string field, std::string_view v, bool required) {
    if (v.empty() && !required) return;
    Status s = ValidateName(field, v);
    if (!s.ok()) {
      // ValidateName prefixes the field; keep the rest.
      std::string m = s.message();
      std::string prefix = field + ": ";
      if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
      Add(std::move(field), m);
    }
  }
  explicit Checker(SpecOrigin origin) : origin_(origin) {}
  void Path(std::string field, std::string_view v) {
    if (v.size() > SpecLimits::kMaxPathBytes) {
      Add(std::move(field), "must be at most " + std::to_string(SpecLimits::kMaxPathBytes) +
                                " bytes, got " + std::to_string(v.size()));
    } else if (BadText(v)) {
      Add(std::move(field), "must be UTF-8 text without NUL bytes");
    } else if (origin_ == SpecOrigin::kSubmitted) {
      if (std::string problem = PathTextProblem(v); !problem.empty()) {
        Add(std::move(field), problem + ", got " + QuoteForMessage(v));
      }
    }
  }
  std::vector<Diagnostic> Take() { return std::move(out_); }

 private:
  SpecOrigin origin_;
  std::vector<Diagnostic> out_;
};

// Targets the runtime or Trainyard itself mounts in every container.
constexpr std::array<std::string_view, 5> kReservedTargets = {
    "/proc", "/sys", "/dev", "/var/run/trainyard", "/run/trainyard"};

bool ValidVolumeName(std::string_view v) {
  if (v.empty() || v.size() > 63 || v[0] == '.' || v[0] == '-' || v[0] == '_') return false;
  return std::all_of(v.begin(), v.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
           ch == '.';
  });
}

// image, mounts and shm_size: a container's, so the last two need the first.
void CheckContainer(Checker& c, const JobSpec& spec) {
  if (!spec.image.empty()) {
    if (auto ref = ParseImageRef(spec.image); !ref.ok()) c.Add("image", ref.status().message());
  }
  if (spec.image.empty() && !spec.mounts.empty()) {
    c.Add("mounts",
          "needs image: mounts are made inside a container, and without an image the ranks run "
          "on the host's own file system");
  }
  if (spec.image.empty() && spec.shm_bytes != 0) {
    c.Add("shm_size", "needs image: it sizes the container's /dev/shm");
  }
  if (spec.shm_bytes < 0 || spec.shm_bytes > SpecLimits::kMaxMemoryPerReplica) {
    c.Add("shm_size",
          "must be between 0 (the runtime's 64Mi) and 64Ti, got " + FormatMemory(spec.shm_bytes));
  } else if (spec.resources.memory_bytes > 0 && spec.shm_bytes > spec.resources.memory_bytes) {
    c.Add("shm_size", FormatMemory(spec.shm_bytes) + " is more than resources.memory (" +
                          FormatMemory(spec.resources.memory_bytes) +
                          "), against which what /dev/shm holds is counted");
  }
  if (spec.mounts.size() > SpecLimits::kMaxMounts) {
    c.Add("mounts", "at most " + std::to_string(SpecLimits::kMaxMounts) + " mounts, got " +
                        std::to_string(spec.mounts.size()));
    return;
  }
  std::vector<std::string> targets;
  for (size_t i = 0; i < spec.mounts.size(); ++i) {
    const MountSpec& m = spec.mounts[i];
    const std::string f = "mounts[" + std::to_string(i) + "]";
    if (m.source.empty()) {
      c.Add(f + ".source", "is required: an absolute host path or a volume name");
    } else if (m.source[0] == '/') {
      c.Path(f + ".source", m.source);
    } else if (!ValidVolumeName(m.source)) {
      c.Add(f + ".source",
            "must be an absolute host path or a volume name (1 to 63 of a-z 0-9 . _ -, "
            "starting with a letter or digit), got " +
                QuoteForMessage(m.source));
    }
    if (m.target.empty() || m.target[0] != '/') {
      c.Add(f + ".target",
            "must be an absolute path inside the container, got " + QuoteForMessage(m.target));
      continue;
    }
    c.Path(f + ".target", m.target);
    std::string target = m.target;
    while (target.size() > 1 && target.back() == '/') target.pop_back();
    if (target == "/") {
      c.Add(f + ".target", "cannot be / (the image is the root file system)");
      continue;
    }
    for (std::string_view reserved : kReservedTargets) {
      if (target == reserved || target.starts_with(std::string(reserved) + "/")) {
        c.Add(f + ".target", QuoteForMessage(m.target) + " is under " + std::string(reserved) +
                                 ", which the runtime or Trainyard mounts in every container");
      }
    }
    if (std::find(targets.begin(), targets.end(), target) != targets.end()) {
      c.Add(f + ".target", QuoteForMessage(m.target) + " is the target of an earlier mount");
    }
    targets.push_back(target);
  }
}

// data: each a registered dataset's name, once; a version; a mount path that no other
// mount or dataset takes.
void CheckData(Checker& c, const JobSpec& spec, SpecOrigin origin) {
  if (spec.data.size() > SpecLimits::kMaxData) {
    c.Add("data", "at most " + std::to_string(SpecLimits::kMaxData) + " datasets, got " +
                      std::to_string(spec.data.size()));
    return;
  }
  const auto trimmed = [](std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    return path;
  };
  std::vector<std::string> targets;
  for (const MountSpec& m : spec.mounts) targets.push_back(trimmed(m.target));
  std::vector<std::string_view> names;
  for (size_t i = 0; i < spec.data.size(); ++i) {
    const DataSpec& d = spec.data[i];
    const std::string f = "data[" + std::to_string(i) + "]";
    if (d.dataset.empty()) {
      c.Add(f + ".dataset", "is required: a registered dataset's name (trainyard datasets ls)");
    } else if (!ValidateName(f + ".dataset", d.dataset).ok()) {
      c.Name(f + ".dataset", d.dataset, true);
    } else if (std::find(names.begin(), names.end(), d.dataset) != names.end()) {
      c.Add(f + ".dataset", QuoteForMessage(d.dataset) + " is named twice; read it once");
    }
    names.push_back(d.dataset);
    if (d.version != kLatestVersion && !IsContentVersion(d.version)) {
      c.Add(f + ".version",
            "must be \"latest\" or a version \"sha256:<64 hex>\" (trainyard "
            "datasets show " +
                d.dataset + "), got " + QuoteForMessage(d.version));
    } else if (origin == SpecOrigin::kStored && d.version == kLatestVersion) {
      c.Add(f + ".version", "a stored spec names an exact version, got \"latest\"");
    }
    if (!d.source.empty()) {
      if (Status s = ValidateDatasetSource(d.source); !s.ok()) {
        std::string m = s.message();
        constexpr std::string_view kPrefix = "dataset.source: ";
        if (m.starts_with(kPrefix)) m = m.substr(kPrefix.size());
        c.Add(f + ".source", m);
      }
    } else if (origin == SpecOrigin::kStored) {
      c.Add(f + ".source", "a stored spec names where the dataset is read from");
    }
    if (d.mount.empty() || d.mount[0] != '/') {
      c.Add(f + ".mount",
            "must be an absolute path (default /data/<dataset>), got " + QuoteForMessage(d.mount));
      continue;
    }
    c.Path(f + ".mount", d.mount);
    const std::string target = trimmed(d.mount);
    if (target == "/") {
      c.Add(f + ".mount", "cannot be /");
      continue;
    }
    for (std::string_view reserved : kReservedTargets) {
      if (target == reserved || target.starts_with(std::string(reserved) + "/")) {
        c.Add(f + ".mount", QuoteForMessage(d.mount) + " is under " + std::string(reserved) +
                                ", which the runtime or Trainyard mounts in every container");
      }
    }
    if (std::find(targets.begin(), targets.end(), target) != targets.end()) {
      c.Add(f + ".mount", QuoteForMessage(d.mount) + " is the target of another mount");
    }
    targets.push_back(target);
  }
}

}  // namespace

std::string DataEnvName(std::string_view dataset) {
  std::string out = "TRAINYARD_DATA_";
  for (char ch : dataset) {
    out += (ch >= 'a' && ch <= 'z')   ? static_cast<char>(ch - 'a' + 'A')
           : (ch == '.' || ch == '-') ? '_'
                                      : ch;
  }
  return out;
}

std::string Diagnostic::ToString() const {
  std::string out;
  if (!file.empty()) {
    out += file;
    out += ':';
    if (line > 0) {
      out += std::to_string(line);
      out += ':';
    }
    out += ' ';
  }
  if (!field.empty()) {
    out += field;
    out += ": ";
  }
  out += message;
  return out;
}

std::string_view TopologyConstraintName(TopologyConstraint c) {
  switch (c) {
    case TopologyConstraint::kNone:
      return "none";
    case TopologyConstraint::kSameNode:
      return "same-node";
    case TopologyConstraint::kSameNvlink:
      return "same-nvlink";
    case TopologyConstraint::kSameLeaf:
      return "same-leaf";
  }
  return "none";
}

std::optional<TopologyConstraint> ParseTopologyConstraint(std::string_view name) {
  for (auto c : {TopologyConstraint::kNone, TopologyConstraint::kSameNode,
                 TopologyConstraint::kSameNvlink, TopologyConstraint::kSameLeaf}) {
    if (TopologyConstraintName(c) == name) return c;
  }
  return std::nullopt;
}

std::optional<std::string> CanonicalSignalName(std::string_view name) {
  int number = 0;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), number);
  bool numeric = ec == std::errc() && ptr == name.data() + name.size() && !name.empty();
  for (const auto& s : kSignals) {
    std::string_view full = s.name;
    if (numeric ? s.number == number : (name == full || name == full.substr(3))) {
      return std::string(full);
    }
  }
  return std::nullopt;
}

std::optional<int> SignalNumber(std::string_view name) {
  std::optional<std::string> canonical = CanonicalSignalName(name);
  if (!canonical) return std::nullopt;
  for (const auto& s : kSignals) {
    if (*canonical == s.name) return s.number;
  }
  return std::nullopt;
}

void NormalizeSpec(JobSpec& spec) {
  if (spec.min_replicas == 0) spec.min_replicas = spec.replicas;
  if (spec.tenant.empty()) spec.tenant = kDefaultTenant;
  if (spec.queue.empty()) spec.queue = kDefaultQueue;
  if (spec.priority.empty()) spec.priority = kDefaultPriorityClass;
  spec.resources.gpu_type = NormalizeGpuType(spec.resources.gpu_type);
  if (auto sig = CanonicalSignalName(spec.checkpoint.notice_signal)) {
    spec.checkpoint.notice_signal = *sig;
  }
  if (spec.retry.max_backoff < spec.retry.backoff) spec.retry.max_backoff = spec.retry.backoff;
  if (spec.experiment.code.empty()) spec.experiment.code = "auto";
  for (DataSpec& d : spec.data) {
    if (d.mount.empty() && !d.dataset.empty()) d.mount = "/data/" + d.dataset;
  }
  std::sort(spec.secret_env.begin(), spec.secret_env.end());
  spec.secret_env.erase(std::unique(spec.secret_env.begin(), spec.secret_env.end()),
                        spec.secret_env.end());
}

JobSpec RedactSecrets(JobSpec spec) {
  for (const std::string& key : spec.secret_env) {
    if (auto it = spec.env.find(key); it != spec.env.end()) it->second = kRedacted;
  }
  return spec;
}

std::string RedactSecretValues(const JobSpec& spec, std::string text) {
  return RedactSecretValues(spec.env, spec.secret_env, std::move(text));
}

std::string RedactSecretValues(const std::map<std::string, std::string>& env,
                               const std::vector<std::string>& secret_env, std::string text) {
  // The values that occur at all, longest first so that a secret holding another is
  // replaced whole; then one pass, so that no replacement is searched again.
  std::vector<const std::string*> values;
  for (const std::string& key : secret_env) {
    if (auto it = env.find(key);
        it != env.end() && !it->second.empty() && text.find(it->second) != std::string::npos) {
      values.push_back(&it->second);
    }
  }
  if (values.empty()) return text;
  std::sort(values.begin(), values.end(),
            [](const std::string* a, const std::string* b) { return a->size() > b->size(); });
  std::string out;
  for (size_t i = 0; i < text.size();) {
    auto hit = std::find_if(values.begin(), values.end(), [&](const std::string* v) {
      return text.compare(i, v->size(), *v) == 0;
    });
    if (hit != values.end()) {
      out += kRedacted;
      i += (*hit)->size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

int64_t TotalGpus(const JobSpec& spec) {
  return SaturatingMul(spec.resources.gpus, std::max<int64_t>(spec.replicas, 0));
}

std::vector<Diagnostic> ValidateSpec(const JobSpec& spec, SpecOrigin origin) {
  Checker c(origin);
  c.Name("name", spec.name, /*required=*/true);
  c.Name("tenant", spec.tenant, false);
  c.Name("queue", spec.queue, false);
  c.Name("priority", spec.priority, false);

  c.Range("replicas", spec.replicas, 1, SpecLimits::kMaxReplicas);
  if (spec.min_replicas != 0) {
    c.Range("min_replicas", spec.min_replicas, 1, spec.replicas > 0 ? spec.replicas : 1);
  }
  c.Range("procs_per_replica", spec.procs_per_replica, 1, SpecLimits::kMaxProcsPerReplica);

  const Resources& r = spec.resources;
  c.Range("resources.gpus", r.gpus, 0, SpecLimits::kMaxGpusPerReplica);
  if (r.gpus >= 0 && r.gpus <= SpecLimits::kMaxGpusPerReplica && spec.replicas >= 1 &&
      spec.replicas <= SpecLimits::kMaxReplicas && TotalGpus(spec) > SpecLimits::kMaxTotalGpus) {
    c.Add("resources.gpus", "the gang asks for " + std::to_string(TotalGpus(spec)) +
                                " GPUs in all (replicas x gpus); at most " +
                                std::to_string(SpecLimits::kMaxTotalGpus) + " are allowed");
  }
  if (!r.gpu_type.empty()) {
    bool ok = r.gpu_type.size() <= 64;
    for (char ch : r.gpu_type) {
      ok = ok && ((ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
                  ch == '.');
    }
    if (!ok) {
      c.Add("resources.gpu_type",
            "must be a GPU model such as H100, A100 or L40S, got " + QuoteForMessage(r.gpu_type));
    }
    if (r.gpus == 0) {
      c.Add("resources.gpu_type", "is set to " + r.gpu_type + " but resources.gpus is 0");
    }
  }
  c.Range("resources.gpu_memory", r.gpu_memory_bytes, 0, int64_t{16} << 40);
  if (r.milli_cpus < 0 || r.milli_cpus > SpecLimits::kMaxMilliCpusPerReplica) {
    std::string got = r.milli_cpus % 1000 == 0 ? std::to_string(r.milli_cpus / 1000)
                                               : std::to_string(r.milli_cpus) + "m";
    c.Add("resources.cpus", "must be between 0 and " +
                                std::to_string(SpecLimits::kMaxMilliCpusPerReplica / 1000) +
                                ", got " + got);
  }
  if (r.memory_bytes < 0 || r.memory_bytes > SpecLimits::kMaxMemoryPerReplica) {
    c.Add("resources.memory", "must be between 0 and 64Ti, got " + FormatMemory(r.memory_bytes));
  }

  if (spec.command.empty() == spec.script.empty()) {
    c.Add(spec.command.empty() ? "command" : "script",
          spec.command.empty() ? "one of command (an argv list) or script is required"
                               : "give either command or script, not both");
  }
  if (spec.command.size() + spec.args.size() > SpecLimits::kMaxArgs) {
    c.Add("args", "at most " + std::to_string(SpecLimits::kMaxArgs) +
                      " command and args entries, got " +
                      std::to_string(spec.command.size() + spec.args.size()));
  }
  auto check_argv = [&](std::string_view field, const std::vector<std::string>& v) {
    for (size_t i = 0; i < v.size(); ++i) {
      std::string f = std::string(field) + "[" + std::to_string(i) + "]";
      if (BadText(v[i])) c.Add(f, "must be UTF-8 text without NUL bytes");
      if (v[i].size() > SpecLimits::kMaxArgBytes) {
        c.Add(f, "must be at most " + std::to_string(SpecLimits::kMaxArgBytes) + " bytes");
      }
    }
  };
  check_argv("command", spec.command);
  check_argv("args", spec.args);
  if (!spec.command.empty() && spec.command[0].empty()) {
    c.Add("command[0]", "must name the program to run, got an empty string");
  }
  if (BadText(spec.script)) c.Add("script", "must be UTF-8 text without NUL bytes");

  if (spec.env.size() > SpecLimits::kMaxEnv) {
    c.Add("env", "at most " + std::to_string(SpecLimits::kMaxEnv) + " variables, got " +
                     std::to_string(spec.env.size()));
  }
  for (const auto& [k, v] : spec.env) {
    if (!ValidEnvKey(k)) {
      c.Add("env", "variable name must match [A-Za-z_][A-Za-z0-9_]*, got " + QuoteForMessage(k));
    } else if (k.rfind("TRAINYARD_", 0) == 0) {
      c.Add("env." + k, "names starting with TRAINYARD_ are set by Trainyard and are reserved");
    }
    if (v.size() > SpecLimits::kMaxEnvValueBytes) {
      c.Add("env." + k, "value must be at most " + std::to_string(SpecLimits::kMaxEnvValueBytes) +
                            " bytes, got " + std::to_string(v.size()));
    } else if (BadText(v)) {
      c.Add("env." + k, "value must be UTF-8 text without NUL bytes");
    }
  }
  if (spec.secret_env.size() > SpecLimits::kMaxEnv) {
    c.Add("secret_env", "at most " + std::to_string(SpecLimits::kMaxEnv) + " names, got " +
                            std::to_string(spec.secret_env.size()));
  } else {
    std::vector<std::string_view> keys;
    for (const auto& [k, v] : spec.env) keys.push_back(k);
    for (const std::string& name : spec.secret_env) {
      if (spec.env.count(name) > 0) continue;
      // Names only: a value is never echoed.
      std::string msg = "names " + QuoteForMessage(name) +
                        ", which is not a variable of env; secret_env lists keys of env";
      if (std::string hint = ClosestMatch(name, keys); !hint.empty()) {
        msg += "; did you mean " + hint + "?";
      } else if (keys.empty()) {
        msg += ", and env is empty";
      }
      c.Add("secret_env", std::move(msg));
    }
  }
  c.Path("working_dir", spec.working_dir);
  c.Path("output", spec.output);
  c.Path("error", spec.error);
  c.Path("checkpoint.dir", spec.checkpoint.dir);

  CheckContainer(c, spec);
  CheckData(c, spec, origin);

  if (spec.time_limit.count() < 0 || spec.time_limit > SpecLimits::kMaxTimeLimit) {
    c.Add("time_limit",
          "must be between 0 (none) and 366d, got " + FormatDuration(spec.time_limit));
  }
  const CheckpointSpec& ck = spec.checkpoint;
  if (ck.interval.count() < 0 || ck.interval > SpecLimits::kMaxTimeLimit) {
    c.Add("checkpoint.interval",
          "must be between 0 (none) and 366d, got " + FormatDuration(ck.interval));
  }
  if (ck.preempt_grace.count() < 0 || ck.preempt_grace > SpecLimits::kMaxGrace) {
    c.Add("checkpoint.preempt_grace",
          "must be between 0s and 1d, got " + FormatDuration(ck.preempt_grace));
  }
  if (!CanonicalSignalName(ck.notice_signal)) {
    c.Add("checkpoint.notice_signal",
          "must be a signal such as SIGUSR1, SIGUSR2, SIGTERM or SIGINT, got " +
              QuoteForMessage(ck.notice_signal));
  } else if (*CanonicalSignalName(ck.notice_signal) == "SIGKILL" ||
             *CanonicalSignalName(ck.notice_signal) == "SIGSTOP") {
    c.Add("checkpoint.notice_signal",
          ck.notice_signal + " cannot be caught, so the job could never checkpoint; use SIGUSR1");
  }

  c.Range("retry.max", spec.retry.max, 0, SpecLimits::kMaxRetries);
  if (spec.retry.backoff.count() < 0 || spec.retry.backoff > SpecLimits::kMaxGrace) {
    c.Add("retry.backoff", "must be between 0s and 1d, got " + FormatDuration(spec.retry.backoff));
  }
  if (spec.retry.max_backoff.count() < 0 || spec.retry.max_backoff > SpecLimits::kMaxGrace) {
    c.Add("retry.max_backoff",
          "must be between 0s and 1d, got " + FormatDuration(spec.retry.max_backoff));
  }

  const ExperimentSpec& ex = spec.experiment;
  c.Name("experiment.name", ex.name, false);
  if (ex.params.size() > SpecLimits::kMaxParams) {
    c.Add("experiment.params", "at most " + std::to_string(SpecLimits::kMaxParams) +
                                   " parameters, got " + std::to_string(ex.params.size()));
  }
  for (const auto& [k, v] : ex.params) {
    // Control characters would also make the JSON form's key (escaped, 6 bytes each)
    // outgrow what a YAML reader accepts as a key (found by fuzz_job_spec).
    const bool control = std::any_of(k.begin(), k.end(), [](char ch) {
      return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
    });
    if (k.empty() || k.size() > 250 || BadText(k) || control) {
      c.Add("experiment.params",
            "parameter names must be 1 to 250 characters, none of them "
            "control characters, got " +
                QuoteForMessage(k));
    }
    if (v.size() > 6000 || BadText(v)) {
      c.Add("experiment.params." + k, "value must be at most 6000 characters without NUL bytes");
    }
  }
  if (ex.data_version.size() > 1024 || BadText(ex.data_version)) {
    c.Add("experiment.data_version", "must be at most 1024 characters without NUL bytes");
  }
  if (!ex.code.empty() && ex.code != "auto" && ex.code != "none") {
    // A commit id, with "-dirty" when the working tree had uncommitted changes (as
    // `git describe --dirty` marks it).
    std::string_view id = ex.code;
    if (id.ends_with("-dirty")) id.remove_suffix(6);
    bool hex = id.size() >= 7 && id.size() <= 64;
    for (char ch : id) hex = hex && ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'));
    if (!hex) {
      c.Add("experiment.code",
            "must be auto, none or a git commit id (7 to 64 hex digits, optionally ending in "
            "-dirty), got " +
                QuoteForMessage(ex.code));
    }
  }

  if (spec.labels.size() > SpecLimits::kMaxLabels) {
    c.Add("labels", "at most " + std::to_string(SpecLimits::kMaxLabels) + " labels, got " +
                        std::to_string(spec.labels.size()));
  }
  for (const auto& [k, v] : spec.labels) {
    if (!ValidLabelKey(k)) {
      c.Add("labels",
            "label keys may hold only letters, digits, '-', '_', '.', '/' (1 to 253), "
            "got " +
                QuoteForMessage(k));
    }
    if (v.size() > SpecLimits::kMaxLabelValueBytes || BadText(v)) {
      c.Add("labels." + k, "value must be at most " +
                               std::to_string(SpecLimits::kMaxLabelValueBytes) +
                               " characters without NUL bytes");
    }
  }
  return c.Take();
}

}  // namespace trainyard
