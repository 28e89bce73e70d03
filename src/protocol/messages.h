// The agent <-> server wire protocol (docs/agent-protocol.md), defined once: every
// message as a value, with both of its JSON directions. The agent encodes with the
// ToJson the server parses with, and the other way round, so the two cannot drift.
//
// Encoding writes what the previous agent and server wrote, field for field. Parsing
// is strict about the fields it reads (a given field of the wrong type or out of range
// is an error) and ignores fields it does not know (forward compatibility); a field
// that is absent or null is not given. Errors are InvalidArgument (ResourceExhausted
// for an upload over kMaxUploadBytes) and name the field by its path and the value:
// `heartbeat.tasks[0].state: expected starting, running or exited, got "gone"`.
//
// Every ToJson returns ordered_json (fields in the documented order); every Parse takes
// the parsed body. Parse(ToJson(x)) == x for every value a parser can return.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.h"
#include "core/node.h"
#include "core/status.h"
#include "core/units.h"
#include "protocol/faults.h"

namespace trainyard::protocol {

// --- task ids and states --------------------------------------------------------------

// A rank of one attempt of a job.
struct TaskIdParts {
  JobId job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  bool operator==(const TaskIdParts&) const = default;
};
// "<job>.<attempt>.<rank>", e.g. "17.2.1" (attempts count from 0).
std::string TaskId(JobId job, int32_t attempt, int32_t rank);
// The parts of a task id in that form: job 1.., attempt 0..1000000, rank 0..100000000,
// decimal without signs or leading zeros. InvalidArgument naming `field` otherwise.
Result<TaskIdParts> ParseTaskId(std::string_view text, std::string_view field);

enum class TaskState { kStarting, kRunning, kExited };
std::string_view TaskStateName(TaskState state);  // "starting" | "running" | "exited"
std::optional<TaskState> ParseTaskState(std::string_view name);
template <typename BasicJson>
void to_json(BasicJson& j, TaskState state) {
  j = TaskStateName(state);
}

// What an agent reports of a task (register and heartbeat bodies).
struct TaskStatus {
  std::string task_id;  // TaskId(job_id, attempt, rank)
  JobId job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  TaskState state = TaskState::kStarting;
  int64_t pid = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;  // 0 until exited
  int32_t exit_code = 0;    // -1 when killed by a signal
  int32_t signal = 0;
  std::string message;  // e.g. why it could not start
  // The agent stopped it itself after losing contact with the server for longer than
  // the node-lost grace (RegisterReply::release_after): the node's work was given up,
  // not failed.
  bool fenced = false;
  // The image a containerised rank runs, as the node's image store resolved its
  // reference: "sha256:<hex>" (the image id); "" for a host process.
  std::string image_digest;
  bool operator==(const TaskStatus&) const = default;
};

// --- register -------------------------------------------------------------------------

// The latest result of the node's health-check program (agent --health-check).
struct HealthCheckResult {
  bool ok = true;
  std::string output;   // what the program printed (the agent sends at most 4 KiB)
  int64_t at_ms = 0;    // when it ran (the agent's wall clock)
  std::string trigger;  // "join" | "periodic" | "task-failed"
  bool operator==(const HealthCheckResult&) const = default;
};
// Longer output is cut to this when parsed.
inline constexpr size_t kMaxHealthCheckOutputBytes = 8192;

// POST /agent/register. The node travels as the wire has it: one gpu_type and
// nvlink_domain for all its GPUs (the first GPU's when encoding), cpus as a number,
// memory in whole MiB; `address` defaults to 127.0.0.1.
struct Registration {
  Node node;  // name, gpus, milli_cpus, memory_bytes, labels, topology; state Ready
  std::string address;
  bool simulated = false;
  std::vector<TaskStatus> tasks;
  std::optional<HealthCheckResult> health_check;  // run before registering
  // How the agent limits tasks: "cgroup v1 at …", "cgroup v2 at …", or "none: <why>"
  // (tasks run without limits); "": not said (an older agent).
  std::string limits;
  // Whether its tasks may run in containers: "runc 1.1.5; images in <dir>", or
  // "none: <why>" (a job with an image fails there); "": not said (an older agent).
  std::string containers;
  bool operator==(const Registration&) const = default;
};

struct RegisterReply {
  // How often the agent heartbeats; 0: not said (the agent keeps its own).
  Duration heartbeat_interval{0};
  // node_timeout + node_lost_grace: how long after its last heartbeat the node's work
  // may be given to others. The agent has stopped its tasks by then. 0: not said (an
  // older server), and the agent never stops them itself.
  Duration release_after{0};
  std::vector<std::string> stop;  // task ids the agent kills at once
  bool operator==(const RegisterReply&) const = default;
};

// --- heartbeat ------------------------------------------------------------------------

// One GPU's last sample as an agent reports it; each value is absent when the agent
// could not read it.
struct GpuTelemetry {
  int index = 0;  // 0..1023, one sample per index
  std::optional<double> util_pct;
  std::optional<double> mem_used_mib;
  std::optional<double> temp_c;
  std::optional<double> power_w;
  std::optional<double> sm_clock_mhz;
  std::optional<bool> throttled;
  std::optional<double> ecc_uncorrectable;
  std::optional<double> xid_last;
  std::optional<double> xid_count;
  bool operator==(const GpuTelemetry&) const = default;
};

// One NVLink or InfiniBand link of a node.
struct LinkTelemetry {
  std::string name;  // "ib0", "nvlink0", "mlx5_0/1", "gpu0/nvlink3"
  std::string kind;  // "ib" | "nvlink" | "" (unknown)
  bool up = true;
  double errors = 0;  // an error counter (only grows, except when its source restarts)
  bool operator==(const LinkTelemetry&) const = default;
};

// Free space of one checkpoint or data path on a node.
struct DiskTelemetry {
  std::string path;
  double free_bytes = 0;
  double total_bytes = 0;
  bool operator==(const DiskTelemetry&) const = default;
};

// A dataset version in the node's cache (docs/datasets.md, "Staging"): being staged,
// ready (whole and checked), or failed (with why).
enum class DatasetState { kStaging, kReady, kFailed };
std::string_view DatasetStateName(DatasetState s);  // "staging" | "ready" | "failed"
struct DatasetStatus {
  std::string dataset;
  std::string version;  // "sha256:<64 hex>"
  DatasetState state = DatasetState::kStaging;
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
  double bytes_per_s = 0;  // while staging
  std::string error;       // kFailed
  int32_t in_use = 0;      // ranks reading it now
  bool operator==(const DatasetStatus&) const = default;
};

// POST /agent/heartbeat.
struct Heartbeat {
  std::string node;
  int64_t seq = 0;
  bool health_ok = true;  // the agent's GPU backend (e.g. no driver)
  std::string health_message;
  std::vector<TaskStatus> tasks;
  std::vector<GpuTelemetry> gpus;    // at most 1024, one per GPU index
  std::vector<LinkTelemetry> links;  // at most 256; left out of the JSON when empty
  std::vector<DiskTelemetry> disks;  // at most 64
  std::optional<HealthCheckResult> health_check;
  std::vector<std::string> faults;  // ids of the faults the agent has active (at most 1024)
  // The versions in the node's dataset cache (at most 1024): those ready, being staged,
  // or whose staging failed lately.
  std::vector<DatasetStatus> datasets;
  bool operator==(const Heartbeat&) const = default;
};

struct HeartbeatReply {
  std::vector<std::string> ack;  // exited tasks the server has durably recorded
  bool operator==(const HeartbeatReply&) const = default;
};

// --- poll and commands ----------------------------------------------------------------

// POST /agent/poll. The server waits at most 30 s, whatever is asked.
struct PollRequest {
  std::string node;
  Duration wait{20'000};  // the default when wait_ms is absent
  bool operator==(const PollRequest&) const = default;
};

// What a rank runs: the `task` object of a `start` command.
// A host path or volume made visible inside a rank's container (JobSpec's mounts).
struct TaskMount {
  std::string source;  // an absolute host path, or a volume name
  std::string target;  // absolute, inside the container
  bool read_only = false;
  bool operator==(const TaskMount&) const = default;
};

// A dataset version a rank reads (JobSpec's data, resolved by the server).
struct TaskData {
  std::string dataset;
  std::string version;       // "sha256:<64 hex>"
  std::string source;        // where it is read from (or staged from)
  std::string target;        // where a container sees it; unused for a host process
  bool stage_local = false;  // copied to the node's dataset cache before the rank starts
  bool operator==(const TaskData&) const = default;
};

struct TaskStart {
  std::string task_id;  // TaskId(job_id, attempt, rank)
  JobId job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  std::vector<std::string> argv;  // not empty; execve'd, never through a shell
  std::map<std::string, std::string> env;
  std::vector<std::string> secret_env;  // keys of env whose values are secret
  std::string workdir;                  // "": the agent's working directory
  std::vector<int> gpus;
  // The limits of the rank's replica on the node: its ranks share one cgroup, `group`
  // (a plain name), with these limits; 0 leaves one unlimited. "" (and from servers
  // that predate it): no group.
  std::string group;
  int64_t milli_cpus = 0;
  int64_t memory_bytes = 0;
  // The Unix identity the rank runs as (its tenant's run_as); -1: the agent's own.
  int64_t uid = -1;
  int64_t gid = -1;
  // The container image the rank runs in (a reference ParseImageRef reads); "": a host
  // process. mounts and shm_bytes (the size of /dev/shm; 0: the runtime's) with it.
  std::string image;
  std::vector<TaskMount> mounts;
  int64_t shm_bytes = 0;
  // The datasets it reads: the agent makes each visible (a read-only mount at `target`
  // in a container) and sets DataEnvName(dataset) to the path the rank reads it at.
  std::vector<TaskData> data;
  bool operator==(const TaskStart&) const = default;
};

inline constexpr int kDefaultNoticeSignal = 10;  // SIGUSR1, when a preempt names none

struct Command {
  enum class Kind {
    kStart,
    kPreempt,
    kStop,
    kProfile,
    kFaults,
    kCheckpoint,
    kStage
  } kind = Kind::kStart;
  TaskStart start;                // kStart
  std::string task_id;            // kPreempt, kStop, kProfile, kCheckpoint
  int signal = 0;                 // kPreempt: 1..64 (absent or 0 parses as kDefaultNoticeSignal)
  Duration grace{0};              // kPreempt, kStop
  std::string profile_id;         // kProfile: 1-64 of A-Z a-z 0-9 . _ -, not starting with "."
  int32_t steps = 0;              // kProfile: how many steps to record, 1..10000
  std::vector<FaultSpec> faults;  // kFaults: the node's whole set (empty clears); unique ids
  // kStage: dataset versions to copy into the node's cache now (those with stage_local),
  // before a start that reads them; the agent reports their progress in heartbeats.
  std::vector<TaskData> stage;
  bool operator==(const Command&) const = default;
};

struct PollReply {
  std::vector<Command> commands;
  bool operator==(const PollReply&) const = default;
};

// --- uploads: logs, metrics, profiles -------------------------------------------------

// The most raw bytes one logs or profile request carries.
inline constexpr int64_t kMaxUploadBytes = 1 << 20;

// POST /agent/logs: a chunk of one task's output (raw bytes; base64 on the wire).
struct LogUpload {
  std::string node;
  std::string task_id;
  int64_t offset = 0;  // where `data` starts in the task's log
  std::string data;
  bool operator==(const LogUpload&) const = default;
};

// POST /agent/metrics: complete lines of a task's metrics file.
struct MetricsUpload {
  std::string node;
  std::string task_id;
  int64_t offset = 0;  // the file offset of the first line
  // Just past the last complete line read, skipped invalid lines included (absent from
  // older agents: the server then estimates it from the lines).
  std::optional<int64_t> end_offset;
  std::vector<nlohmann::json> lines;  // the server files only the objects among them
  bool operator==(const MetricsUpload&) const = default;
};

// POST /agent/profile: a status of a profile, or a chunk of its trace.
struct ProfileUpload {
  enum class Kind { kRecording, kFailed, kChunk } kind = Kind::kChunk;
  std::string node;
  std::string task_id;
  std::string id;           // the profile's id (the `profile` command's)
  int64_t offset = 0;       // kChunk: where `data` starts in the trace
  std::string message;      // kFailed
  int64_t total_bytes = 0;  // kChunk: the whole trace's size, >= 1
  std::string data;         // kChunk: raw bytes; base64 on the wire
  bool operator==(const ProfileUpload&) const = default;
};

// The answer to a logs or metrics upload: where the server's copy ends.
struct UploadReply {
  int64_t next_offset = 0;
  bool operator==(const UploadReply&) const = default;
};

struct ProfileUploadReply {
  int64_t next_offset = 0;
  std::string state;    // the rank's: "requested" | "recording" | "stored" | "failed"
  std::string message;  // when failed; left out of the JSON when empty
  bool operator==(const ProfileUploadReply&) const = default;
};

// --- JSON, both directions ------------------------------------------------------------

nlohmann::ordered_json ToJson(const TaskStatus& t);
nlohmann::ordered_json ToJson(const HealthCheckResult& h);
nlohmann::ordered_json ToJson(const Registration& r);
nlohmann::ordered_json ToJson(const RegisterReply& r);
nlohmann::ordered_json ToJson(const GpuTelemetry& g);
nlohmann::ordered_json ToJson(const LinkTelemetry& l);
nlohmann::ordered_json ToJson(const DiskTelemetry& d);
nlohmann::ordered_json ToJson(const TaskData& d);
nlohmann::ordered_json ToJson(const DatasetStatus& d);
nlohmann::ordered_json ToJson(const Heartbeat& h);
nlohmann::ordered_json ToJson(const HeartbeatReply& r);
nlohmann::ordered_json ToJson(const PollRequest& p);
nlohmann::ordered_json ToJson(const FaultSpec& f);
nlohmann::ordered_json ToJson(const Command& c);
nlohmann::ordered_json ToJson(const PollReply& p);
nlohmann::ordered_json ToJson(const LogUpload& u);
nlohmann::ordered_json ToJson(const MetricsUpload& u);
nlohmann::ordered_json ToJson(const ProfileUpload& u);
nlohmann::ordered_json ToJson(const UploadReply& r);
nlohmann::ordered_json ToJson(const ProfileUploadReply& r);

// Paths in errors start with "register", "heartbeat", "poll", "logs", "metrics",
// "profile" (the request bodies), "register reply", "heartbeat reply", "poll reply",
// "upload reply", "profile reply", and "command".
Result<Registration> ParseRegistration(const nlohmann::json& j);
Result<RegisterReply> ParseRegisterReply(const nlohmann::json& j);
Result<Heartbeat> ParseHeartbeat(const nlohmann::json& j);
Result<HeartbeatReply> ParseHeartbeatReply(const nlohmann::json& j);
Result<PollRequest> ParsePollRequest(const nlohmann::json& j);
Result<Command> ParseCommand(const nlohmann::json& j);
// A reply whose `commands` is a list parses even when some of them do not: those are
// left out, and their errors (`poll reply.commands[2].faults[0].kind: ...`) appended
// to `rejected` when it is given, so that one bad command does not cost the others.
Result<PollReply> ParsePollReply(const nlohmann::json& j, std::vector<Status>* rejected = nullptr);
Result<LogUpload> ParseLogUpload(const nlohmann::json& j);
Result<MetricsUpload> ParseMetricsUpload(const nlohmann::json& j);
Result<ProfileUpload> ParseProfileUpload(const nlohmann::json& j);
Result<UploadReply> ParseUploadReply(const nlohmann::json& j);
Result<ProfileUploadReply> ParseProfileUploadReply(const nlohmann::json& j);

}  // namespace trainyard::protocol
