#include "core/spec_codec.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <sstream>

#include "core/names.h"
#include "core/units.h"
#include "core/yaml_reader.h"
#include "core/yaml_text.h"

namespace trainyard {
namespace {

// Field names, one list per object, in the order they are written out.
const std::vector<std::string_view> kTopFields = {"name",
                                                  "tenant",
                                                  "queue",
                                                  "priority",
                                                  "replicas",
                                                  "min_replicas",
                                                  "procs_per_replica",
                                                  "resources",
                                                  "topology",
                                                  "command",
                                                  "args",
                                                  "script",
                                                  "env",
                                                  "secret_env",
                                                  "working_dir",
                                                  "time_limit",
                                                  "checkpoint",
                                                  "retry",
                                                  "requeue",
                                                  "experiment",
                                                  "labels",
                                                  "output",
                                                  "error",
                                                  "image",
                                                  "mounts",
                                                  "shm_size",
                                                  "data"};
const std::vector<std::string_view> kResourceFields = {"gpus", "gpu_type", "gpu_memory", "cpus",
                                                       "memory"};
const std::vector<std::string_view> kTopologyFields = {"constraint", "mode"};
const std::vector<std::string_view> kTopologyConstraints = {"none", "same-node", "same-nvlink",
                                                            "same-leaf"};
const std::vector<std::string_view> kCheckpointFields = {"dir", "interval", "preempt_grace",
                                                         "notice_signal"};
const std::vector<std::string_view> kRetryFields = {"max", "backoff", "max_backoff",
                                                    "exclude_failed_nodes"};
const std::vector<std::string_view> kMountFields = {"source", "target", "read_only"};
const std::vector<std::string_view> kDataFields = {"dataset", "version", "mount", "stage",
                                                   "source"};
const std::vector<std::string_view> kExperimentFields = {"name", "params", "data_version", "code"};

// Reads one YAML document into a JobSpec, collecting every problem it meets.
class SpecReader : public YamlFieldReader {
 public:
  explicit SpecReader(std::string_view file) : YamlFieldReader(file) {}

  void Read(const YAML::Node& root, JobSpec& spec) {
    if (!root.IsMap()) {
      Error(root, "",
            "a job spec must be a map of fields (name, replicas, resources, ...), got " +
                KindName(root));
      return;
    }
    ForEachField(root, "", kTopFields, [&](const std::string& key, const YAML::Node& v) {
      if (key == "name")
        String(v, key, spec.name);
      else if (key == "tenant")
        String(v, key, spec.tenant);
      else if (key == "queue")
        String(v, key, spec.queue);
      else if (key == "priority")
        String(v, key, spec.priority);
      else if (key == "replicas")
        Int32(v, key, spec.replicas);
      else if (key == "min_replicas")
        Int32(v, key, spec.min_replicas);
      else if (key == "procs_per_replica")
        Int32(v, key, spec.procs_per_replica);
      else if (key == "resources")
        ReadResources(v, spec.resources);
      else if (key == "topology")
        ReadTopology(v, spec.topology);
      else if (key == "command")
        StringList(v, key, spec.command);
      else if (key == "args")
        StringList(v, key, spec.args);
      else if (key == "script")
        String(v, key, spec.script);
      else if (key == "env")
        StringMap(v, key, spec.env);
      else if (key == "secret_env")
        NameList(v, key, spec.secret_env);
      else if (key == "working_dir")
        String(v, key, spec.working_dir);
      else if (key == "time_limit")
        DurationField(v, key, spec.time_limit);
      else if (key == "checkpoint")
        ReadCheckpoint(v, spec.checkpoint);
      else if (key == "retry")
        ReadRetry(v, spec.retry);
      else if (key == "requeue")
        Bool(v, key, spec.requeue);
      else if (key == "experiment")
        ReadExperiment(v, spec.experiment);
      else if (key == "labels")
        StringMap(v, key, spec.labels);
      else if (key == "output")
        String(v, key, spec.output);
      else if (key == "error")
        String(v, key, spec.error);
      else if (key == "image")
        String(v, key, spec.image);
      else if (key == "mounts")
        ReadMounts(v, spec.mounts);
      else if (key == "shm_size")
        MemoryField(v, key, spec.shm_bytes);
      else if (key == "data")
        ReadData(v, spec.data);
    });
  }

  std::vector<Diagnostic>& warnings() { return warnings_; }

 private:
  void Int32(const YAML::Node& v, const std::string& field, int32_t& out) {
    // Range is checked by ValidateSpec with the domain's limits; here only that it
    // is a number that fits.
    IntAs(v, field, INT32_MIN, INT32_MAX, out);
  }

  void StringList(const YAML::Node& v, const std::string& field, std::vector<std::string>& out) {
    if (v.IsScalar()) {
      Error(v, field,
            "must be a list of strings (an argv, e.g. [\"python3\", \"train.py\"]), got " +
                KindName(v) + "; to run a shell command line use script:");
      return;
    }
    if (!v.IsSequence()) {
      Error(v, field, "must be a list of strings, got " + KindName(v));
      return;
    }
    if (v.size() > SpecLimits::kMaxArgs) {
      Error(v, field,
            "must have at most " + std::to_string(SpecLimits::kMaxArgs) + " entries, got " +
                std::to_string(v.size()));
      return;
    }
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& e = v[i];
      std::string f = field + "[" + std::to_string(i) + "]";
      if (e.IsScalar()) {
        out.push_back(e.Scalar());
      } else {
        Error(e, f, "must be a string, got " + KindName(e));
      }
    }
  }

  // A list of names (secret_env: [HF_TOKEN, WANDB_API_KEY]).
  void NameList(const YAML::Node& v, const std::string& field, std::vector<std::string>& out) {
    if (!v.IsSequence()) {
      Error(v, field,
            "must be a list of env variable names, e.g. [HF_TOKEN, WANDB_API_KEY], got " +
                KindName(v));
      return;
    }
    if (v.size() > SpecLimits::kMaxEnv) {
      Error(v, field,
            "must have at most " + std::to_string(SpecLimits::kMaxEnv) + " entries, got " +
                std::to_string(v.size()));
      return;
    }
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& e = v[i];
      if (e.IsScalar()) {
        out.push_back(e.Scalar());
      } else {
        Error(e, field + "[" + std::to_string(i) + "]",
              "must be an env variable name, got " + KindName(e));
      }
    }
  }

  void StringMap(const YAML::Node& v, const std::string& field,
                 std::map<std::string, std::string>& out) {
    if (v.IsMap() && v.size() > SpecLimits::kMaxEnv + SpecLimits::kMaxParams) {
      Error(v, field, "has " + std::to_string(v.size()) + " entries; far beyond the limits");
      return;
    }
    YamlFieldReader::StringMap(v, field, out);
  }

  void ReadResources(const YAML::Node& v, Resources& r) {
    if (!Map(v, "resources", kResourceFields)) return;
    ForEachField(v, "resources", kResourceFields, [&](const std::string& key, const YAML::Node& x) {
      const std::string f = "resources." + key;
      if (key == "gpus") {
        Int(x, f, INT64_MIN, INT64_MAX, r.gpus);
      } else if (key == "gpu_type") {
        String(x, f, r.gpu_type);
      } else if (key == "gpu_memory") {
        MemoryField(x, f, r.gpu_memory_bytes);
      } else if (key == "cpus") {
        CpusField(x, f, r.milli_cpus);
      } else if (key == "memory") {
        MemoryField(x, f, r.memory_bytes);
      }
    });
  }

  void ReadTopology(const YAML::Node& v, TopologySpec& t) {
    auto constraint = [&](const YAML::Node& x, const std::string& f) {
      std::string name;
      if (Choice(x, f, kTopologyConstraints, name)) t.constraint = *ParseTopologyConstraint(name);
    };
    t.hard = true;  // a constraint that is written is meant, unless mode: soft says otherwise
    if (v.IsScalar()) {
      constraint(v, "topology");
      return;
    }
    if (!Map(v, "topology", kTopologyFields)) return;
    ForEachField(v, "topology", kTopologyFields, [&](const std::string& key, const YAML::Node& x) {
      const std::string f = "topology." + key;
      if (key == "constraint") {
        constraint(x, f);
      } else if (key == "mode") {
        if (!Scalar(x, f, "hard or soft")) return;
        if (x.Scalar() == "hard") {
          t.hard = true;
        } else if (x.Scalar() == "soft") {
          t.hard = false;
        } else {
          Error(x, f, "must be hard or soft, got " + QuoteForMessage(x.Scalar()));
        }
      }
    });
  }

  void ReadCheckpoint(const YAML::Node& v, CheckpointSpec& c) {
    if (!Map(v, "checkpoint", kCheckpointFields)) return;
    ForEachField(v, "checkpoint", kCheckpointFields,
                 [&](const std::string& key, const YAML::Node& x) {
                   const std::string f = "checkpoint." + key;
                   if (key == "dir")
                     String(x, f, c.dir);
                   else if (key == "interval")
                     DurationField(x, f, c.interval);
                   else if (key == "preempt_grace")
                     DurationField(x, f, c.preempt_grace);
                   else if (key == "notice_signal")
                     String(x, f, c.notice_signal);
                 });
  }

  void ReadRetry(const YAML::Node& v, RetrySpec& r) {
    if (!Map(v, "retry", kRetryFields)) return;
    ForEachField(v, "retry", kRetryFields, [&](const std::string& key, const YAML::Node& x) {
      const std::string f = "retry." + key;
      if (key == "max")
        Int32(x, f, r.max);
      else if (key == "backoff")
        DurationField(x, f, r.backoff);
      else if (key == "max_backoff")
        DurationField(x, f, r.max_backoff);
      else if (key == "exclude_failed_nodes")
        Bool(x, f, r.exclude_failed_nodes);
    });
  }

  // mounts: a list of {source, target, read_only} maps, or of "SOURCE:TARGET[:ro|:rw]"
  // strings as `docker run -v` takes them.
  void ReadMounts(const YAML::Node& v, std::vector<MountSpec>& out) {
    if (!v.IsSequence()) {
      Error(v, "mounts",
            "must be a list of mounts, e.g. [{source: /datasets, target: /data, read_only: "
            "true}] or [\"/datasets:/data:ro\"], got " +
                KindName(v));
      return;
    }
    if (v.size() > SpecLimits::kMaxMounts) {
      Error(v, "mounts",
            "must have at most " + std::to_string(SpecLimits::kMaxMounts) + " entries, got " +
                std::to_string(v.size()));
      return;
    }
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& e = v[i];
      const std::string f = "mounts[" + std::to_string(i) + "]";
      MountSpec m;
      if (e.IsScalar()) {
        const std::string& text = e.Scalar();
        std::vector<std::string> parts;
        for (size_t at = 0;;) {
          size_t colon = text.find(':', at);
          parts.push_back(text.substr(at, colon == std::string::npos ? colon : colon - at));
          if (colon == std::string::npos) break;
          at = colon + 1;
        }
        if (parts.size() < 2 || parts.size() > 3 ||
            (parts.size() == 3 && parts[2] != "ro" && parts[2] != "rw")) {
          Error(e, f,
                "must be SOURCE:TARGET, SOURCE:TARGET:ro or SOURCE:TARGET:rw, got " +
                    QuoteForMessage(text));
          continue;
        }
        m.source = parts[0];
        m.target = parts[1];
        m.read_only = parts.size() == 3 && parts[2] == "ro";
      } else {
        if (!Map(e, f, kMountFields)) continue;
        ForEachField(e, f, kMountFields, [&](const std::string& key, const YAML::Node& x) {
          if (key == "source")
            String(x, f + ".source", m.source);
          else if (key == "target")
            String(x, f + ".target", m.target);
          else if (key == "read_only")
            Bool(x, f + ".read_only", m.read_only);
        });
      }
      out.push_back(std::move(m));
    }
  }

  // data: a list of {dataset, version, mount, stage} maps, or of dataset names (the
  // latest version at /data/<name>, read where it is).
  void ReadData(const YAML::Node& v, std::vector<DataSpec>& out) {
    if (!v.IsSequence()) {
      Error(v, "data",
            "must be a list of datasets, e.g. [{dataset: imagenet, version: latest, mount: "
            "/data/imagenet, stage: local}], got " +
                KindName(v));
      return;
    }
    if (v.size() > SpecLimits::kMaxData) {
      Error(v, "data",
            "must have at most " + std::to_string(SpecLimits::kMaxData) + " entries, got " +
                std::to_string(v.size()));
      return;
    }
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& e = v[i];
      const std::string f = "data[" + std::to_string(i) + "]";
      DataSpec d;
      if (e.IsScalar()) {
        d.dataset = e.Scalar();
      } else {
        if (!Map(e, f, kDataFields)) continue;
        ForEachField(e, f, kDataFields, [&](const std::string& key, const YAML::Node& x) {
          if (key == "dataset") {
            String(x, f + ".dataset", d.dataset);
          } else if (key == "version") {
            String(x, f + ".version", d.version);
          } else if (key == "mount") {
            String(x, f + ".mount", d.mount);
          } else if (key == "source") {
            String(x, f + ".source", d.source);
          } else if (key == "stage") {
            std::string stage;
            String(x, f + ".stage", stage);
            if (stage == "local") {
              d.stage = DataStage::kLocal;
            } else if (stage == "none") {
              d.stage = DataStage::kNone;
            } else {
              Error(x, f + ".stage",
                    "must be local (copied to the node's disk before the ranks start) or none "
                    "(read where it is), got " +
                        QuoteForMessage(stage));
            }
          }
        });
      }
      out.push_back(std::move(d));
    }
  }

  void ReadExperiment(const YAML::Node& v, ExperimentSpec& e) {
    if (!Map(v, "experiment", kExperimentFields)) return;
    ForEachField(v, "experiment", kExperimentFields,
                 [&](const std::string& key, const YAML::Node& x) {
                   const std::string f = "experiment." + key;
                   if (key == "name")
                     String(x, f, e.name);
                   else if (key == "params")
                     StringMap(x, f, e.params);
                   else if (key == "data_version")
                     String(x, f, e.data_version);
                   else if (key == "code")
                     String(x, f, e.code);
                 });
  }

  std::vector<Diagnostic> warnings_;
};

std::string CpusText(int64_t milli) {
  if (milli % 1000 == 0) return std::to_string(milli / 1000);
  return std::to_string(milli) + "m";
}

// C0 and C1 control characters (and DEL), which YAML cannot carry unescaped.
bool HasControlCharacters(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return true;
    if (c == 0xC2 && i + 1 < s.size()) {
      unsigned char d = static_cast<unsigned char>(s[i + 1]);
      if (d >= 0x80 && d <= 0x9F) return true;
    }
  }
  return false;
}

// A multi-line string reads best as a literal block, which cannot hold control
// characters, leading blanks or trailing blanks on a line; those go double-quoted.
bool LiteralBlockSafe(const std::string& s) {
  // `|` keeps exactly one final newline, so the text must end with exactly one.
  if (s.size() < 2 || s.back() != '\n' || s[s.size() - 2] == '\n') return false;
  if (s.front() == ' ' || s.front() == '\n') return false;
  for (size_t i = 0; i + 1 < s.size(); ++i) {  // C1 controls need escapes
    if (static_cast<unsigned char>(s[i]) == 0xC2 && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      return false;
    }
  }
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
    if ((c == ' ' || c == '\t') && (i + 1 == s.size() || s[i + 1] == '\n')) return false;
  }
  return true;
}

void EmitYaml(YAML::Emitter& out, const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      out << YAML::Key << k << YAML::Value;
      EmitYaml(out, v);
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    bool flow = j.size() <= 8;
    for (const auto& e : j)
      flow = flow && e.is_string() && e.get_ref<const std::string&>().size() < 40;
    if (flow) out << YAML::Flow;
    out << YAML::BeginSeq;
    for (const auto& e : j) EmitYaml(out, e);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (LiteralBlockSafe(s)) {
      out << YAML::Literal << s;
    } else if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL" ||
               HasControlCharacters(s)) {
      // Plain, these would read back as "no value" or with their control
      // characters changed; double quotes escape them.
      out << YAML::DoubleQuoted << s;
    } else {
      out << s;  // the emitter quotes what needs quoting
    }
  } else if (j.is_boolean()) {
    out << (j.get<bool>() ? "true" : "false");
  } else if (j.is_number_integer()) {
    out << j.get<int64_t>();
  } else if (j.is_number()) {
    out << j.dump();
  } else {
    out << YAML::Null;
  }
}

}  // namespace

const std::vector<std::string_view>& SpecFieldNames() { return kTopFields; }

SpecParseResult ParseSpec(std::string_view text, std::string_view file, SpecOrigin origin) {
  SpecParseResult result;
  SpecReader reader(file);
  if (text.size() > SpecLimits::kMaxSpecBytes) {
    reader.ErrorAtLine(0, "",
                       "spec is " + std::to_string(text.size()) + " bytes; at most " +
                           std::to_string(SpecLimits::kMaxSpecBytes) + " are accepted");
    result.errors = std::move(reader.errors());
    return result;
  }
  if (auto nul = text.find('\0'); nul != std::string_view::npos) {
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + nul, '\n'));
    reader.ErrorAtLine(line, "", "spec contains a NUL byte; it must be UTF-8 text");
    result.errors = std::move(reader.errors());
    return result;
  }

  if (auto bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + bad, '\n'));
    reader.ErrorAtLine(line, "",
                       "spec is not valid UTF-8 (bad byte at offset " + std::to_string(bad) + ")");
    result.errors = std::move(reader.errors());
    return result;
  }

  JobSpec spec;
  try {
    YamlText yaml = LoadYamlText(text);
    if (yaml.documents == 0 || (yaml.documents == 1 && yaml.first.IsNull())) {
      reader.ErrorAtLine(0, "", "spec is empty; a job needs at least name and command");
    } else if (yaml.documents > 1) {
      reader.ErrorAtLine(0, "", "holds " + DocumentCount(yaml) + "; give one job per file");
    } else {
      reader.Read(yaml.first, spec);
    }
  } catch (const YAML::Exception& e) {
    ReportYamlError(reader, e);
  }

  if (reader.errors().empty()) {
    NormalizeSpec(spec);
    for (Diagnostic& d : ValidateSpec(spec, origin)) {
      d.file = reader.file();
      d.line = reader.LineOf(d.field);
      reader.errors().push_back(std::move(d));
    }
  }
  result.errors = std::move(reader.errors());
  result.warnings = std::move(reader.warnings());
  if (result.errors.empty()) result.spec = std::move(spec);
  return result;
}

nlohmann::ordered_json SpecToJson(const JobSpec& s) {
  using J = nlohmann::ordered_json;
  J j = J::object();
  j["name"] = s.name;
  j["tenant"] = s.tenant;
  j["queue"] = s.queue;
  j["priority"] = s.priority;
  j["replicas"] = s.replicas;
  j["min_replicas"] = s.min_replicas;
  j["procs_per_replica"] = s.procs_per_replica;
  J r = J::object();
  r["gpus"] = s.resources.gpus;
  if (!s.resources.gpu_type.empty()) r["gpu_type"] = s.resources.gpu_type;
  if (s.resources.gpu_memory_bytes > 0)
    r["gpu_memory"] = FormatMemory(s.resources.gpu_memory_bytes);
  if (s.resources.milli_cpus > 0) {
    if (s.resources.milli_cpus % 1000 == 0) {
      r["cpus"] = s.resources.milli_cpus / 1000;
    } else {
      r["cpus"] = CpusText(s.resources.milli_cpus);
    }
  }
  if (s.resources.memory_bytes > 0) r["memory"] = FormatMemory(s.resources.memory_bytes);
  j["resources"] = r;
  if (s.topology.constraint != TopologyConstraint::kNone) {
    j["topology"] = J{{"constraint", std::string(TopologyConstraintName(s.topology.constraint))},
                      {"mode", s.topology.hard ? "hard" : "soft"}};
  }
  if (!s.command.empty()) j["command"] = s.command;
  if (!s.args.empty()) j["args"] = s.args;
  if (!s.script.empty()) j["script"] = s.script;
  if (!s.env.empty()) j["env"] = s.env;
  if (!s.secret_env.empty()) j["secret_env"] = s.secret_env;
  if (!s.working_dir.empty()) j["working_dir"] = s.working_dir;
  if (s.time_limit.count() > 0) j["time_limit"] = FormatDuration(s.time_limit);
  J c = J::object();
  if (!s.checkpoint.dir.empty()) c["dir"] = s.checkpoint.dir;
  if (s.checkpoint.interval.count() > 0) c["interval"] = FormatDuration(s.checkpoint.interval);
  c["preempt_grace"] = FormatDuration(s.checkpoint.preempt_grace);
  c["notice_signal"] = s.checkpoint.notice_signal;
  j["checkpoint"] = c;
  j["retry"] = J{{"max", s.retry.max},
                 {"backoff", FormatDuration(s.retry.backoff)},
                 {"max_backoff", FormatDuration(s.retry.max_backoff)},
                 {"exclude_failed_nodes", s.retry.exclude_failed_nodes}};
  j["requeue"] = s.requeue;
  J e = J::object();
  if (!s.experiment.name.empty()) e["name"] = s.experiment.name;
  if (!s.experiment.params.empty()) e["params"] = s.experiment.params;
  if (!s.experiment.data_version.empty()) e["data_version"] = s.experiment.data_version;
  e["code"] = s.experiment.code;
  j["experiment"] = e;
  if (!s.labels.empty()) j["labels"] = s.labels;
  if (!s.output.empty()) j["output"] = s.output;
  if (!s.error.empty()) j["error"] = s.error;
  if (!s.image.empty()) j["image"] = s.image;
  if (!s.mounts.empty()) {
    J mounts = J::array();
    for (const MountSpec& m : s.mounts) {
      mounts.push_back(J{{"source", m.source}, {"target", m.target}, {"read_only", m.read_only}});
    }
    j["mounts"] = std::move(mounts);
  }
  if (s.shm_bytes > 0) j["shm_size"] = FormatMemory(s.shm_bytes);
  if (!s.data.empty()) {
    J data = J::array();
    for (const DataSpec& d : s.data) {
      data.push_back(J{{"dataset", d.dataset},
                       {"version", d.version},
                       {"mount", d.mount},
                       {"stage", d.stage == DataStage::kLocal ? "local" : "none"}});
      if (!d.source.empty()) data.back()["source"] = d.source;
    }
    j["data"] = std::move(data);
  }
  return j;
}

std::string SpecToYaml(const JobSpec& spec) {
  YAML::Emitter out;
  out.SetIndent(2);
  EmitYaml(out, SpecToJson(spec));
  std::string text = out.c_str();
  text += "\n";
  return text;
}

}  // namespace trainyard
