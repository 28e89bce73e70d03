// JobSpec: what a user asks for, after parsing and normalisation.
//
// A job is a gang of `replicas` identical replicas (at least `min_replicas` of them
// start together, or none do). Each replica runs `procs_per_replica` ranks and asks
// for `resources`. The spec comes from YAML (spec_yaml.h), JSON (a YAML subset) or an
// #SBATCH script (sbatch.h); every path ends in ValidateSpec, so all carry the same
// rules and the same messages.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/resources.h"
#include "core/units.h"

namespace trainyard {

enum class TopologyConstraint { kNone, kSameNode, kSameNvlink, kSameLeaf };
std::string_view TopologyConstraintName(TopologyConstraint c);  // "none", "same-node", ...
std::optional<TopologyConstraint> ParseTopologyConstraint(std::string_view name);

struct TopologySpec {
  TopologyConstraint constraint = TopologyConstraint::kNone;
  bool hard = false;  // hard: never place otherwise; soft: prefer, else place anyway

  bool operator==(const TopologySpec&) const = default;
};

struct CheckpointSpec {
  std::string dir;                        // empty: <checkpoint root>/<tenant>/<job id>
  Duration interval{0};                   // 0: the job does not checkpoint periodically
  Duration preempt_grace{60'000};         // time to checkpoint after the notice
  std::string notice_signal = "SIGUSR1";  // sent to every rank on preemption

  bool operator==(const CheckpointSpec&) const = default;
};

struct RetrySpec {
  int32_t max = 0;                // retries after the first attempt
  Duration backoff{10'000};       // first delay; doubles each retry
  Duration max_backoff{600'000};  // ceiling of the doubling
  bool exclude_failed_nodes = false;

  bool operator==(const RetrySpec&) const = default;
};

struct ExperimentSpec {
  std::string name;
  std::map<std::string, std::string> params;  // values kept as written
  std::string data_version;
  std::string code;  // "auto" (capture git at submit), "none", or a commit id

  bool operator==(const ExperimentSpec&) const = default;
};

// A host path or a named volume made visible inside a job's containers.
struct MountSpec {
  // An absolute host path, or the name of a volume (a directory the agent keeps per
  // node under its data dir: volumes/<name>, made on first use).
  std::string source;
  std::string target;  // absolute path inside the container
  bool read_only = false;

  bool operator==(const MountSpec&) const = default;
};

// A registered dataset a job reads (docs/datasets.md, core/dataset.h).
enum class DataStage {
  kNone,   // the ranks read the dataset's source where it is
  kLocal,  // the agent copies the version to node-local disk before the ranks start
};
struct DataSpec {
  std::string dataset;
  // "latest" or "sha256:<64 hex>". The server resolves "latest" at submission, so a
  // stored spec always names the exact version.
  std::string version = "latest";
  // Where the ranks find it: the path it is mounted at inside a container; "" in input
  // means /data/<dataset> (normalised). Every rank also gets TRAINYARD_DATA_<NAME>
  // (upper case, '.' and '-' as '_') with the path it reads the dataset at.
  std::string mount;
  DataStage stage = DataStage::kNone;
  // Where the dataset is read from: set by the server from the registered dataset at
  // submission (a value given in input is replaced), so that agents need not ask.
  std::string source;

  bool operator==(const DataSpec&) const = default;
};

struct JobSpec {
  std::string name;
  std::string tenant;
  std::string queue;
  std::string priority;  // priority class name
  int32_t replicas = 1;
  int32_t min_replicas = 0;  // 0 in input means "= replicas"; normalised
  int32_t procs_per_replica = 1;
  Resources resources;  // per replica
  TopologySpec topology;
  std::vector<std::string> command;  // argv; exactly one of command and script
  std::vector<std::string> args;     // appended to command
  std::string script;                // a script body run by its #! interpreter
  std::map<std::string, std::string> env;
  // Keys of `env` whose values are secret (tokens, passwords): the ranks get the real
  // value; everything shown to people (API, CLI, events, errors) shows kRedacted.
  // Sorted and unique once normalised.
  std::vector<std::string> secret_env;
  std::string working_dir;  // relative: to the agent's working directory
  Duration time_limit{0};   // 0: none
  CheckpointSpec checkpoint;
  RetrySpec retry;
  bool requeue = true;  // back to Pending on preemption or node loss (else Failed)
  ExperimentSpec experiment;
  std::map<std::string, std::string> labels;
  std::string output;  // stdout path template; empty: the per-rank log store
  std::string error;   // stderr path template; empty: with stdout
  // The container image each rank runs in (name[:tag] or name@sha256:<hex>, as
  // ParseImageRef reads it); empty: the ranks run as host processes. mounts and
  // shm_size (the size of /dev/shm, 0: the runtime's 64Mi) need an image.
  std::string image;
  std::vector<MountSpec> mounts;
  int64_t shm_bytes = 0;
  std::vector<DataSpec> data;  // the datasets it reads, each at most once

  bool operator==(const JobSpec&) const = default;
};

// Limits that keep absurd or abusive specs out.
struct SpecLimits {
  static constexpr size_t kMaxSpecBytes = 1 << 20;
  static constexpr int32_t kMaxReplicas = 65'536;
  static constexpr int32_t kMaxProcsPerReplica = 1024;
  static constexpr int64_t kMaxGpusPerReplica = 64;
  static constexpr int64_t kMaxTotalGpus = 1 << 20;
  static constexpr int64_t kMaxMilliCpusPerReplica = 4096 * 1000;
  static constexpr int64_t kMaxMemoryPerReplica = int64_t{64} << 40;  // 64 TiB
  static constexpr size_t kMaxEnv = 1000;
  static constexpr size_t kMaxEnvValueBytes = 32 * 1024;
  static constexpr size_t kMaxArgs = 10'000;
  static constexpr size_t kMaxArgBytes = 128 * 1024;
  static constexpr size_t kMaxLabels = 64;
  static constexpr size_t kMaxLabelValueBytes = 256;
  static constexpr size_t kMaxParams = 1000;
  static constexpr size_t kMaxPathBytes = 4096;
  static constexpr int32_t kMaxRetries = 100;
  static constexpr size_t kMaxMounts = 64;
  static constexpr size_t kMaxData = 16;
  static constexpr Duration kMaxTimeLimit{int64_t{366} * 86'400'000};
  static constexpr Duration kMaxGrace{int64_t{86'400'000}};
};

// One problem found in a spec. `field` is a dotted path ("resources.gpus",
// "env.PATH"); `line` is 1-based, 0 when unknown.
struct Diagnostic {
  std::string file;
  int line = 0;
  std::string field;
  std::string message;

  // "job.yaml:7: replicas: must be >= 1, got 0"
  std::string ToString() const;
  bool operator==(const Diagnostic&) const = default;
};

// Fills defaults that depend on other fields (min_replicas, tenant, queue,
// priority) so that two equivalent specs compare equal.
void NormalizeSpec(JobSpec& spec);

// Where a spec comes from, for the rules that apply to it. A spec someone submits
// now meets every rule; one read back from the store was accepted when it was
// submitted, and a rule added since must not make the database unreadable: stored
// specs skip the path-text rule (no ".." component, no control character), which
// came after specs were first stored. The agent still confines every path at launch.
enum class SpecOrigin { kSubmitted, kStored };

// The variable every rank of a job reading `dataset` finds its path in:
// TRAINYARD_DATA_<NAME>, upper case, '.' and '-' as '_' ("imagenet-1k" ->
// TRAINYARD_DATA_IMAGENET_1K).
std::string DataEnvName(std::string_view dataset);

// Semantic checks shared by every input format. Returns one Diagnostic per problem
// (line 0; the caller fills file and line from where it read each field).
std::vector<Diagnostic> ValidateSpec(const JobSpec& spec,
                                     SpecOrigin origin = SpecOrigin::kSubmitted);

// Total GPUs of the gang at `replicas`, saturating.
int64_t TotalGpus(const JobSpec& spec);

// What a secret value is shown as.
inline constexpr std::string_view kRedacted = "<redacted>";

// `spec` with the value of every env variable named in secret_env replaced by
// kRedacted: the form of a spec that may be shown to people.
JobSpec RedactSecrets(JobSpec spec);
// `text` with every occurrence of a non-empty secret_env value of `spec` replaced by
// kRedacted; for messages that come from outside (a task's exit message).
std::string RedactSecretValues(const JobSpec& spec, std::string text);
// The same for an environment and the names of its secret variables.
std::string RedactSecretValues(const std::map<std::string, std::string>& env,
                               const std::vector<std::string>& secret_env, std::string text);

// Signal names accepted for checkpoint.notice_signal ("SIGUSR1", "USR1", "10").
// Returns the canonical "SIGxxx" name or nullopt.
std::optional<std::string> CanonicalSignalName(std::string_view name);
// The signal's number for any name CanonicalSignalName accepts; nullopt otherwise.
std::optional<int> SignalNumber(std::string_view name);

}  // namespace trainyard
