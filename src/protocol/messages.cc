#include "protocol/messages.h"

#include <charconv>
#include <cmath>
#include <set>

#include "core/dataset.h"
#include "core/names.h"
#include "core/resources.h"
#include "protocol/base64.h"
#include "protocol/fields.h"

namespace trainyard::protocol {
namespace {

using internal::Fields;
using internal::Show;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr int64_t kMaxAttempt = 1'000'000;
constexpr int64_t kMaxRank = 100'000'000;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A counter or size the agent measures in whole units: written as an integer when it
// is one (as the agent always wrote it), else as the number it is.
ordered_json Count(double v) {
  if (std::trunc(v) == v && v >= -9.2e18 && v <= 9.2e18) return static_cast<int64_t>(v);
  return v;
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// A task id in field `key`, in agreement with the numbers it stands for when given.
Status TaskIdField(const Fields& f, std::string_view key, std::string& out,
                   const TaskIdParts* must_match = nullptr) {
  TY_RETURN_IF_ERROR(f.Str(key, out, /*required=*/true));
  TY_ASSIGN_OR_RETURN(TaskIdParts parts, ParseTaskId(out, f.Path(key)));
  if (must_match != nullptr && parts != *must_match) {
    return InvalidArgument(f.Path(key) + ": " + QuoteForMessage(out) + " is not the task of job " +
                           std::to_string(must_match->job_id) + ", attempt " +
                           std::to_string(must_match->attempt) + ", rank " +
                           std::to_string(must_match->rank) + " (" +
                           TaskId(must_match->job_id, must_match->attempt, must_match->rank) + ")");
  }
  return Status::Ok();
}

// A list of task ids.
Status TaskIdList(const Fields& f, std::string_view key, std::vector<std::string>& out) {
  TY_RETURN_IF_ERROR(f.StrList(key, out, 100'000));
  for (size_t i = 0; i < out.size(); ++i) {
    TY_RETURN_IF_ERROR(ParseTaskId(out[i], Index(f.Path(key), i)).status());
  }
  return Status::Ok();
}

// task_id, and the job_id, attempt and rank it stands for. `required`: the numbers
// must be given; else one that is absent is taken from the id.
Status TaskNumbers(const Fields& f, bool required, std::string& task_id, JobId& job,
                   int32_t& attempt, int32_t& rank) {
  TY_RETURN_IF_ERROR(f.Str("task_id", task_id, true));
  TaskIdParts parts;
  if (!required) {
    TY_ASSIGN_OR_RETURN(parts, ParseTaskId(task_id, f.Path("task_id")));
  }
  int64_t a = parts.attempt, r = parts.rank;
  TY_RETURN_IF_ERROR(f.Int("job_id", parts.job_id, 1, kInt64Max, required));
  TY_RETURN_IF_ERROR(f.Int("attempt", a, 0, kMaxAttempt, required));
  TY_RETURN_IF_ERROR(f.Int("rank", r, 0, kMaxRank, required));
  parts.attempt = static_cast<int32_t>(a);
  parts.rank = static_cast<int32_t>(r);
  TY_RETURN_IF_ERROR(TaskIdField(f, "task_id", task_id, &parts));
  job = parts.job_id;
  attempt = parts.attempt;
  rank = parts.rank;
  return Status::Ok();
}

Result<TaskStatus> ParseTaskStatus(const Fields& f) {
  TaskStatus t;
  TY_RETURN_IF_ERROR(TaskNumbers(f, /*required=*/true, t.task_id, t.job_id, t.attempt, t.rank));
  std::string state;
  TY_RETURN_IF_ERROR(f.Str("state", state, true));
  std::optional<TaskState> parsed = ParseTaskState(state);
  if (!parsed) {
    return InvalidArgument(f.Path("state") + ": expected starting, running or exited, got " +
                           QuoteForMessage(state));
  }
  t.state = *parsed;
  TY_RETURN_IF_ERROR(f.Integer("pid", t.pid));
  TY_RETURN_IF_ERROR(f.Integer("started_ms", t.started_ms));
  TY_RETURN_IF_ERROR(f.Integer("finished_ms", t.finished_ms));
  TY_RETURN_IF_ERROR(f.Integer("exit_code", t.exit_code));
  TY_RETURN_IF_ERROR(f.Integer("signal", t.signal));
  TY_RETURN_IF_ERROR(f.Str("message", t.message));
  TY_RETURN_IF_ERROR(f.Bool("fenced", t.fenced));
  TY_RETURN_IF_ERROR(f.Str("image_digest", t.image_digest));
  return t;
}

Status ParseTasks(const Fields& f, std::vector<TaskStatus>& out) {
  return f.ObjectList("tasks", 100'000, out, [](const Fields& item, TaskStatus& t) {
    TY_ASSIGN_OR_RETURN(t, ParseTaskStatus(item));
    return Status::Ok();
  });
}

ordered_json TaskList(const std::vector<TaskStatus>& tasks) {
  ordered_json list = ordered_json::array();
  for (const TaskStatus& t : tasks) list.push_back(ToJson(t));
  return list;
}

Status ParseHealthCheck(const Fields& f, std::optional<HealthCheckResult>& out) {
  const json* hc = f.Get("health_check");
  if (hc == nullptr) return Status::Ok();
  TY_ASSIGN_OR_RETURN(Fields h, Fields::Open(*hc, f.Path("health_check")));
  HealthCheckResult r;
  TY_RETURN_IF_ERROR(h.Bool("ok", r.ok, true));
  TY_RETURN_IF_ERROR(h.Str("output", r.output));
  if (r.output.size() > kMaxHealthCheckOutputBytes) r.output.resize(kMaxHealthCheckOutputBytes);
  TY_RETURN_IF_ERROR(h.Integer("at_ms", r.at_ms));
  TY_RETURN_IF_ERROR(h.Str("trigger", r.trigger));
  out = std::move(r);
  return Status::Ok();
}

// The `profile` command's id and the profile upload's: it names files on both sides.
Status ProfileIdField(const Fields& f, std::string& out) {
  TY_RETURN_IF_ERROR(f.Str("id", out, true));
  const bool plain = !out.empty() && out.size() <= 64 && out.front() != '.' &&
                     out.find_first_not_of(
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                         "abcdefghijklmnopqrstuvwxyz0123456789._-") == std::string::npos;
  if (!plain) {
    return f.Wrong("id", *f.Get("id"), "1-64 of A-Z a-z 0-9 . _ -, not starting with \".\"");
  }
  return Status::Ok();
}

Status ParseTaskData(const Fields& d, TaskData& out);

Result<TaskStart> ParseTaskStart(const Fields& f) {
  TaskStart s;
  // The previous agent read a start without job_id, attempt or rank; their id says them.
  TY_RETURN_IF_ERROR(TaskNumbers(f, /*required=*/false, s.task_id, s.job_id, s.attempt, s.rank));
  TY_RETURN_IF_ERROR(f.StrList("argv", s.argv, 100'000, true));
  if (s.argv.empty()) return f.Wrong("argv", *f.Get("argv"), "a non-empty list of strings");
  TY_RETURN_IF_ERROR(f.StrMap("env", s.env));
  TY_RETURN_IF_ERROR(f.StrList("secret_env", s.secret_env, 100'000));
  TY_RETURN_IF_ERROR(f.Str("workdir", s.workdir));
  if (const json* gpus = f.Get("gpus")) {
    if (!gpus->is_array() || gpus->size() > kMaxGpusPerNode) {
      return f.Wrong("gpus", *gpus,
                     "a list of at most " + std::to_string(kMaxGpusPerNode) + " GPU indices");
    }
    for (size_t i = 0; i < gpus->size(); ++i) {
      const json& g = (*gpus)[i];
      const bool is_int = g.is_number_integer() &&
                          !(g.is_number_unsigned() && g.get<uint64_t>() > uint64_t{INT32_MAX});
      const int64_t x = is_int ? g.get<int64_t>() : 0;
      if (!is_int || x < INT32_MIN || x > INT32_MAX) {
        return InvalidArgument(Index(f.Path("gpus"), i) + ": expected a GPU index, got " + Show(g));
      }
      s.gpus.push_back(static_cast<int>(x));
    }
  }
  TY_RETURN_IF_ERROR(f.Str("group", s.group));
  const bool plain_group =
      s.group.size() <= 200 && (s.group.empty() || s.group.front() != '.') &&
      s.group.find_first_not_of(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == std::string::npos;
  if (!plain_group) {
    return f.Wrong("group", *f.Get("group"), "0-200 of A-Z a-z 0-9 . _ -, not starting with \".\"");
  }
  TY_RETURN_IF_ERROR(f.Int("milli_cpus", s.milli_cpus, 0, int64_t{1} << 40));
  TY_RETURN_IF_ERROR(f.Int("memory_bytes", s.memory_bytes, 0, int64_t{1} << 56));
  TY_RETURN_IF_ERROR(f.Int("uid", s.uid, -1, INT32_MAX));
  TY_RETURN_IF_ERROR(f.Int("gid", s.gid, -1, INT32_MAX));
  if ((s.uid < 0) != (s.gid < 0)) {
    return f.Wrong("gid", f.Get("gid") ? *f.Get("gid") : json(s.gid),
                   "set together with uid (both >= 0, or both absent)");
  }
  TY_RETURN_IF_ERROR(f.Str("image", s.image));
  TY_RETURN_IF_ERROR(f.ObjectList("mounts", 64, s.mounts, [](const Fields& m, TaskMount& out) {
    TY_RETURN_IF_ERROR(m.Str("source", out.source, true));
    TY_RETURN_IF_ERROR(m.Str("target", out.target, true));
    if (out.target.empty() || out.target.front() != '/') {
      return m.Wrong("target", *m.Get("target"), "an absolute path inside the container");
    }
    return m.Bool("read_only", out.read_only);
  }));
  if (!s.mounts.empty() && s.image.empty()) {
    return f.Wrong("mounts", *f.Get("mounts"), "absent: mounts need an image");
  }
  TY_RETURN_IF_ERROR(f.Int("shm_bytes", s.shm_bytes, 0, int64_t{1} << 56));
  TY_RETURN_IF_ERROR(f.ObjectList("data", 16, s.data, ParseTaskData));
  return s;
}

// A dataset entry of a start or stage command.
Status ParseTaskData(const Fields& d, TaskData& out) {
  TY_RETURN_IF_ERROR(d.Str("dataset", out.dataset, true));
  TY_RETURN_IF_ERROR(d.Str("version", out.version, true));
  if (!IsContentVersion(out.version)) {
    return d.Wrong("version", *d.Get("version"), "sha256:<64 lowercase hex>");
  }
  TY_RETURN_IF_ERROR(d.Str("source", out.source, true));
  if (out.source.empty() || out.source.front() != '/') {
    return d.Wrong("source", *d.Get("source"), "an absolute path");
  }
  TY_RETURN_IF_ERROR(d.Str("target", out.target));
  if (!out.target.empty() && out.target.front() != '/') {
    return d.Wrong("target", *d.Get("target"), "an absolute path inside the container");
  }
  return d.Bool("stage_local", out.stage_local);
}

Status ParseFaultList(const Fields& f, std::vector<FaultSpec>& out) {
  if (f.Get("faults") == nullptr) return f.Missing("faults");
  std::set<std::string> ids;
  return f.ObjectList("faults", 1024, out, [&ids](const Fields& item, FaultSpec& fault) {
    TY_RETURN_IF_ERROR(item.Str("id", fault.id, true));
    if (fault.id.empty()) return item.Wrong("id", *item.Get("id"), "a non-empty string");
    if (!ids.insert(fault.id).second) {
      return InvalidArgument(item.Path("id") + ": " + QuoteForMessage(fault.id) +
                             " appears twice; fault ids must be unique");
    }
    std::string kind;
    TY_RETURN_IF_ERROR(item.Str("kind", kind, true));
    auto parsed = ParseFaultKind(kind);
    if (!parsed.ok()) return InvalidArgument(item.Path("kind") + ": " + parsed.status().message());
    fault.kind = *parsed;
    int64_t gpu = -1;
    TY_RETURN_IF_ERROR(item.Int("gpu", gpu, -1, static_cast<int64_t>(kMaxGpusPerNode) - 1));
    fault.gpu = static_cast<int>(gpu);
    TY_RETURN_IF_ERROR(item.Int("until_ms", fault.until_ms, 0, kInt64Max));
    TY_RETURN_IF_ERROR(item.Int("job_id", fault.job_id, 0, kInt64Max));
    if (fault.kind == FaultKind::kCommSlow && fault.job_id == 0) {
      return InvalidArgument(item.Path("job_id") +
                             ": a comm-slow fault must name the job it slows (> 0)");
    }
    return Status::Ok();
  });
}

Result<Command> ParseCommandAt(const json& j, const std::string& path) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, path));
  std::string kind;
  TY_RETURN_IF_ERROR(f.Str("kind", kind, true));
  Command c;
  if (kind == "start") {
    c.kind = Command::Kind::kStart;
    const json* task = f.Get("task");
    if (task == nullptr) return f.Missing("task");
    TY_ASSIGN_OR_RETURN(Fields t, Fields::Open(*task, f.Path("task")));
    TY_ASSIGN_OR_RETURN(c.start, ParseTaskStart(t));
    return c;
  }
  if (kind == "faults") {
    c.kind = Command::Kind::kFaults;
    TY_RETURN_IF_ERROR(ParseFaultList(f, c.faults));
    return c;
  }
  if (kind == "stage") {
    c.kind = Command::Kind::kStage;
    if (f.Get("data") == nullptr) return f.Missing("data");
    TY_RETURN_IF_ERROR(f.ObjectList("data", 16, c.stage, ParseTaskData));
    return c;
  }
  if (kind == "preempt") {
    c.kind = Command::Kind::kPreempt;
  } else if (kind == "stop") {
    c.kind = Command::Kind::kStop;
  } else if (kind == "profile") {
    c.kind = Command::Kind::kProfile;
  } else if (kind == "checkpoint") {
    c.kind = Command::Kind::kCheckpoint;
  } else {
    return InvalidArgument(
        f.Path("kind") +
        ": expected start, stop, preempt, profile, faults, checkpoint or stage, got " +
        QuoteForMessage(kind));
  }
  TY_RETURN_IF_ERROR(TaskIdField(f, "task_id", c.task_id));
  if (c.kind == Command::Kind::kStop || c.kind == Command::Kind::kPreempt) {
    TY_RETURN_IF_ERROR(f.Millis("grace_ms", c.grace));
  }
  if (c.kind == Command::Kind::kPreempt) {
    int64_t sig = 0;
    TY_RETURN_IF_ERROR(f.Int("signal", sig, 0, 64));
    c.signal = sig == 0 ? kDefaultNoticeSignal : static_cast<int>(sig);
  }
  if (c.kind == Command::Kind::kProfile) {
    TY_RETURN_IF_ERROR(ProfileIdField(f, c.profile_id));
    int64_t steps = 0;
    TY_RETURN_IF_ERROR(f.Int("steps", steps, 1, 10'000, true));
    c.steps = static_cast<int32_t>(steps);
  }
  return c;
}

// node, task_id and offset: what every upload starts with.
Status UploadHead(const Fields& f, std::string& node, std::string& task_id, int64_t& offset) {
  TY_RETURN_IF_ERROR(f.Str("node", node, true));
  TY_RETURN_IF_ERROR(TaskIdField(f, "task_id", task_id));
  return f.Int("offset", offset, 0, kInt64Max, true);
}

Status Base64Field(const Fields& f, std::string& out) {
  std::string text;
  TY_RETURN_IF_ERROR(f.Str("data_b64", text, true));
  TY_ASSIGN_OR_RETURN(out, DecodeBase64(text, f.Path("data_b64")));
  if (static_cast<int64_t>(out.size()) > kMaxUploadBytes) {
    return ResourceExhausted(f.path() + ": at most 1 MiB per request");
  }
  return Status::Ok();
}

}  // namespace

// --- task ids and states --------------------------------------------------------------

std::string TaskId(JobId job, int32_t attempt, int32_t rank) {
  return std::to_string(job) + "." + std::to_string(attempt) + "." + std::to_string(rank);
}

Result<TaskIdParts> ParseTaskId(std::string_view text, std::string_view field) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(std::string(field) + ": expected <job>.<attempt>.<rank>, got " +
                           QuoteForMessage(text) + why);
  };
  int64_t parts[3] = {0, 0, 0};
  const int64_t lo[3] = {1, 0, 0};
  const int64_t hi[3] = {kInt64Max, kMaxAttempt, kMaxRank};
  const char* names[3] = {"job", "attempt", "rank"};
  std::string_view rest = text;
  for (int i = 0; i < 3; ++i) {
    const size_t dot = i < 2 ? rest.find('.') : rest.size();
    if (dot == std::string_view::npos) return bad("");
    const std::string_view digits = rest.substr(0, dot);
    const bool canonical = !digits.empty() && (digits.size() == 1 || digits[0] != '0') &&
                           digits.find_first_not_of("0123456789") == std::string_view::npos;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parts[i]);
    if (!canonical || ec != std::errc() || end != digits.data() + digits.size()) {
      return bad(std::string(" (the ") + names[i] + " is not a decimal number)");
    }
    if (parts[i] < lo[i] || parts[i] > hi[i]) {
      return bad(std::string(" (the ") + names[i] + " must be " + std::to_string(lo[i]) + ".." +
                 std::to_string(hi[i]) + ")");
    }
    rest.remove_prefix(std::min(rest.size(), dot + 1));
  }
  return TaskIdParts{parts[0], static_cast<int32_t>(parts[1]), static_cast<int32_t>(parts[2])};
}

std::string_view TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kStarting:
      return "starting";
    case TaskState::kRunning:
      return "running";
    case TaskState::kExited:
      return "exited";
  }
  return "unknown";
}

std::optional<TaskState> ParseTaskState(std::string_view name) {
  for (TaskState s : {TaskState::kStarting, TaskState::kRunning, TaskState::kExited}) {
    if (TaskStateName(s) == name) return s;
  }
  return std::nullopt;
}

// --- encoding -------------------------------------------------------------------------

ordered_json ToJson(const TaskStatus& t) {
  ordered_json j = {{"task_id", t.task_id},       {"job_id", t.job_id},
                    {"attempt", t.attempt},       {"rank", t.rank},
                    {"state", t.state},           {"pid", t.pid},
                    {"started_ms", t.started_ms}, {"finished_ms", t.finished_ms},
                    {"exit_code", t.exit_code},   {"signal", t.signal},
                    {"message", t.message},       {"fenced", t.fenced}};
  if (!t.image_digest.empty()) j["image_digest"] = t.image_digest;
  return j;
}

ordered_json ToJson(const HealthCheckResult& h) {
  return {{"ok", h.ok}, {"output", h.output}, {"at_ms", h.at_ms}, {"trigger", h.trigger}};
}

ordered_json ToJson(const Registration& r) {
  const Node& n = r.node;
  ordered_json gpus = ordered_json::array();
  for (const Gpu& g : n.gpus) {
    gpus.push_back({{"index", g.index}, {"uuid", g.uuid}, {"memory_mib", g.memory_bytes / kMiB}});
  }
  ordered_json cpus = n.milli_cpus % 1000 == 0
                          ? ordered_json(n.milli_cpus / 1000)
                          : ordered_json(static_cast<double>(n.milli_cpus) / 1000);
  ordered_json node = {{"name", n.name},
                       {"address", r.address},
                       {"gpu_type", n.gpus.empty() ? "" : n.gpus[0].model},
                       {"gpus", std::move(gpus)},
                       {"cpus", std::move(cpus)},
                       {"memory_mib", n.memory_bytes / kMiB},
                       {"labels", n.labels},
                       {"leaf", n.topology.leaf}};
  if (!n.topology.spine.empty()) node["spine"] = n.topology.spine;
  node["nvlink_domain"] = n.gpus.empty() ? "" : n.gpus[0].nvlink_domain;
  node["simulated"] = r.simulated;
  ordered_json j = {{"node", std::move(node)}};
  if (r.health_check) j["health_check"] = ToJson(*r.health_check);
  if (!r.limits.empty()) j["limits"] = r.limits;
  if (!r.containers.empty()) j["containers"] = r.containers;
  j["tasks"] = TaskList(r.tasks);
  return j;
}

ordered_json ToJson(const RegisterReply& r) {
  return {{"heartbeat_interval_ms", r.heartbeat_interval.count()},
          {"release_after_ms", r.release_after.count()},
          {"stop", r.stop}};
}

ordered_json ToJson(const GpuTelemetry& g) {
  ordered_json j = {{"index", g.index}};
  if (g.util_pct) j["util_pct"] = *g.util_pct;
  if (g.mem_used_mib) j["mem_used_mib"] = Count(*g.mem_used_mib);
  if (g.temp_c) j["temp_c"] = *g.temp_c;
  if (g.power_w) j["power_w"] = *g.power_w;
  if (g.sm_clock_mhz) j["sm_clock_mhz"] = Count(*g.sm_clock_mhz);
  if (g.throttled) j["throttled"] = *g.throttled;
  if (g.ecc_uncorrectable) j["ecc_uncorrectable"] = Count(*g.ecc_uncorrectable);
  if (g.xid_last) j["xid_last"] = Count(*g.xid_last);
  if (g.xid_count) j["xid_count"] = Count(*g.xid_count);
  return j;
}

ordered_json ToJson(const LinkTelemetry& l) {
  return {{"name", l.name}, {"kind", l.kind}, {"up", l.up}, {"errors", Count(l.errors)}};
}

ordered_json ToJson(const TaskData& d) {
  return {{"dataset", d.dataset},
          {"version", d.version},
          {"source", d.source},
          {"target", d.target},
          {"stage_local", d.stage_local}};
}

std::string_view DatasetStateName(DatasetState s) {
  switch (s) {
    case DatasetState::kStaging:
      return "staging";
    case DatasetState::kReady:
      return "ready";
    case DatasetState::kFailed:
      return "failed";
  }
  return "staging";
}

ordered_json ToJson(const DatasetStatus& d) {
  ordered_json j = {{"dataset", d.dataset},
                    {"version", d.version},
                    {"state", DatasetStateName(d.state)},
                    {"bytes_done", d.bytes_done},
                    {"bytes_total", d.bytes_total},
                    {"in_use", d.in_use}};
  if (d.state == DatasetState::kStaging) j["bytes_per_s"] = d.bytes_per_s;
  if (!d.error.empty()) j["error"] = d.error;
  return j;
}

ordered_json ToJson(const DiskTelemetry& d) {
  return {
      {"path", d.path}, {"free_bytes", Count(d.free_bytes)}, {"total_bytes", Count(d.total_bytes)}};
}

ordered_json ToJson(const Heartbeat& h) {
  ordered_json j = {{"node", h.node},
                    {"seq", h.seq},
                    {"health", {{"ok", h.health_ok}, {"message", h.health_message}}}};
  ordered_json gpus = ordered_json::array();
  for (const GpuTelemetry& g : h.gpus) gpus.push_back(ToJson(g));
  j["gpus"] = std::move(gpus);
  if (!h.links.empty()) {
    ordered_json links = ordered_json::array();
    for (const LinkTelemetry& l : h.links) links.push_back(ToJson(l));
    j["links"] = std::move(links);
  }
  ordered_json disks = ordered_json::array();
  for (const DiskTelemetry& d : h.disks) disks.push_back(ToJson(d));
  j["disks"] = std::move(disks);
  if (h.health_check) j["health_check"] = ToJson(*h.health_check);
  j["tasks"] = TaskList(h.tasks);
  j["faults"] = h.faults;
  if (!h.datasets.empty()) {
    ordered_json datasets = ordered_json::array();
    for (const DatasetStatus& d : h.datasets) datasets.push_back(ToJson(d));
    j["datasets"] = std::move(datasets);
  }
  return j;
}

ordered_json ToJson(const HeartbeatReply& r) { return {{"ack", r.ack}}; }

ordered_json ToJson(const PollRequest& p) {
  return {{"node", p.node}, {"wait_ms", p.wait.count()}};
}

ordered_json ToJson(const FaultSpec& f) {
  return {{"id", f.id},
          {"kind", f.kind},
          {"gpu", f.gpu},
          {"until_ms", f.until_ms},
          {"job_id", f.job_id}};
}

ordered_json ToJson(const Command& c) {
  switch (c.kind) {
    case Command::Kind::kStart: {
      const TaskStart& t = c.start;
      ordered_json task = {{"task_id", t.task_id}, {"job_id", t.job_id}, {"attempt", t.attempt},
                           {"rank", t.rank},       {"argv", t.argv},     {"env", t.env},
                           {"workdir", t.workdir}, {"gpus", t.gpus}};
      if (!t.secret_env.empty()) task["secret_env"] = t.secret_env;
      if (!t.group.empty()) {
        task["group"] = t.group;
        task["milli_cpus"] = t.milli_cpus;
        task["memory_bytes"] = t.memory_bytes;
      }
      if (t.uid >= 0) {
        task["uid"] = t.uid;
        task["gid"] = t.gid;
      }
      if (!t.image.empty()) {
        task["image"] = t.image;
        ordered_json mounts = ordered_json::array();
        for (const TaskMount& m : t.mounts) {
          mounts.push_back(
              {{"source", m.source}, {"target", m.target}, {"read_only", m.read_only}});
        }
        if (!mounts.empty()) task["mounts"] = std::move(mounts);
        if (t.shm_bytes > 0) task["shm_bytes"] = t.shm_bytes;
      }
      if (!t.data.empty()) {
        ordered_json data = ordered_json::array();
        for (const TaskData& d : t.data) data.push_back(ToJson(d));
        task["data"] = std::move(data);
      }
      return {{"kind", "start"}, {"task", std::move(task)}};
    }
    case Command::Kind::kPreempt:
      return {{"kind", "preempt"},
              {"task_id", c.task_id},
              {"signal", c.signal},
              {"grace_ms", c.grace.count()}};
    case Command::Kind::kStop:
      return {{"kind", "stop"}, {"task_id", c.task_id}, {"grace_ms", c.grace.count()}};
    case Command::Kind::kProfile:
      return {
          {"kind", "profile"}, {"task_id", c.task_id}, {"id", c.profile_id}, {"steps", c.steps}};
    case Command::Kind::kFaults: {
      ordered_json faults = ordered_json::array();
      for (const FaultSpec& f : c.faults) faults.push_back(ToJson(f));
      return {{"kind", "faults"}, {"faults", std::move(faults)}};
    }
    case Command::Kind::kCheckpoint:
      return {{"kind", "checkpoint"}, {"task_id", c.task_id}};
    case Command::Kind::kStage: {
      ordered_json data = ordered_json::array();
      for (const TaskData& d : c.stage) data.push_back(ToJson(d));
      return {{"kind", "stage"}, {"data", std::move(data)}};
    }
  }
  return {};
}

ordered_json ToJson(const PollReply& p) {
  ordered_json commands = ordered_json::array();
  for (const Command& c : p.commands) commands.push_back(ToJson(c));
  return {{"commands", std::move(commands)}};
}

ordered_json ToJson(const LogUpload& u) {
  return {{"node", u.node},
          {"task_id", u.task_id},
          {"offset", u.offset},
          {"data_b64", EncodeBase64(u.data)}};
}

ordered_json ToJson(const MetricsUpload& u) {
  ordered_json j = {{"node", u.node}, {"task_id", u.task_id}, {"offset", u.offset}};
  if (u.end_offset) j["end_offset"] = *u.end_offset;
  ordered_json lines = ordered_json::array();
  for (const json& line : u.lines) lines.push_back(ordered_json(line));
  j["lines"] = std::move(lines);
  return j;
}

ordered_json ToJson(const ProfileUpload& u) {
  ordered_json j = {{"node", u.node}, {"task_id", u.task_id}, {"id", u.id}, {"offset", u.offset}};
  switch (u.kind) {
    case ProfileUpload::Kind::kRecording:
      j["status"] = "recording";
      break;
    case ProfileUpload::Kind::kFailed:
      j["status"] = "failed";
      j["message"] = u.message;
      break;
    case ProfileUpload::Kind::kChunk:
      j["total_bytes"] = u.total_bytes;
      j["data_b64"] = EncodeBase64(u.data);
      break;
  }
  return j;
}

ordered_json ToJson(const UploadReply& r) { return {{"next_offset", r.next_offset}}; }

ordered_json ToJson(const ProfileUploadReply& r) {
  ordered_json j = {{"next_offset", r.next_offset}, {"state", r.state}};
  if (!r.message.empty()) j["message"] = r.message;
  return j;
}

// --- parsing --------------------------------------------------------------------------

Result<Registration> ParseRegistration(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields top, Fields::Open(j, "register"));
  const json* node_json = top.Get("node");
  if (node_json == nullptr) return top.Missing("node");
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(*node_json, top.Path("node")));
  Registration r;
  Node& n = r.node;
  TY_RETURN_IF_ERROR(f.Str("name", n.name, true));
  TY_RETURN_IF_ERROR(ValidateName(f.Path("name"), n.name));
  TY_RETURN_IF_ERROR(f.Str("address", r.address));
  if (r.address.empty()) r.address = "127.0.0.1";
  std::string gpu_type;
  TY_RETURN_IF_ERROR(f.Str("gpu_type", gpu_type));
  std::string nvlink_domain;
  TY_RETURN_IF_ERROR(f.Str("nvlink_domain", nvlink_domain));
  TY_RETURN_IF_ERROR(f.Str("leaf", n.topology.leaf));
  TY_RETURN_IF_ERROR(f.Str("spine", n.topology.spine));
  TY_RETURN_IF_ERROR(f.Bool("simulated", r.simulated));
  double cpus = 0;
  TY_RETURN_IF_ERROR(f.Number("cpus", cpus));
  if (cpus < 0 || cpus > 1e6) return f.Wrong("cpus", *f.Get("cpus"), "a number 0..1000000");
  n.milli_cpus = std::llround(cpus * 1000);
  int64_t memory_mib = 0;
  TY_RETURN_IF_ERROR(f.Int("memory_mib", memory_mib, 0, int64_t{1} << 40));
  n.memory_bytes = memory_mib * kMiB;
  TY_RETURN_IF_ERROR(f.StrMap("labels", n.labels));
  TY_RETURN_IF_ERROR(f.ObjectList("gpus", kMaxGpusPerNode, n.gpus, [&](const Fields& g, Gpu& gpu) {
    TY_RETURN_IF_ERROR(g.Integer("index", gpu.index, true));
    TY_RETURN_IF_ERROR(g.Str("uuid", gpu.uuid));
    int64_t mib = 0;
    TY_RETURN_IF_ERROR(g.Int("memory_mib", mib, 0, int64_t{1} << 40));
    gpu.memory_bytes = mib * kMiB;
    gpu.model = NormalizeGpuType(gpu_type);
    gpu.nvlink_domain = nvlink_domain;
    return Status::Ok();
  }));
  TY_RETURN_IF_ERROR(ValidateNode(n));
  TY_RETURN_IF_ERROR(ParseTasks(top, r.tasks));
  TY_RETURN_IF_ERROR(ParseHealthCheck(top, r.health_check));
  TY_RETURN_IF_ERROR(top.Str("limits", r.limits));
  if (r.limits.size() > 4096) {
    return top.Wrong("limits", *top.Get("limits"), "at most 4096 bytes");
  }
  TY_RETURN_IF_ERROR(top.Str("containers", r.containers));
  if (r.containers.size() > 4096) {
    return top.Wrong("containers", *top.Get("containers"), "at most 4096 bytes");
  }
  return r;
}

Result<RegisterReply> ParseRegisterReply(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "register reply"));
  RegisterReply r;
  TY_RETURN_IF_ERROR(f.Millis("heartbeat_interval_ms", r.heartbeat_interval));
  TY_RETURN_IF_ERROR(f.Millis("release_after_ms", r.release_after));
  TY_RETURN_IF_ERROR(TaskIdList(f, "stop", r.stop));
  return r;
}

Result<Heartbeat> ParseHeartbeat(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "heartbeat"));
  Heartbeat h;
  TY_RETURN_IF_ERROR(f.Str("node", h.node, true));
  TY_RETURN_IF_ERROR(f.Integer("seq", h.seq));
  if (const json* health = f.Get("health")) {
    TY_ASSIGN_OR_RETURN(Fields hf, Fields::Open(*health, f.Path("health")));
    TY_RETURN_IF_ERROR(hf.Bool("ok", h.health_ok));
    TY_RETURN_IF_ERROR(hf.Str("message", h.health_message));
  }
  TY_RETURN_IF_ERROR(ParseTasks(f, h.tasks));
  std::set<int> seen;
  TY_RETURN_IF_ERROR(f.ObjectList("gpus", 1024, h.gpus, [&](const Fields& g, GpuTelemetry& t) {
    int64_t index = 0;
    TY_RETURN_IF_ERROR(g.Int("index", index, 0, 1023, true));
    t.index = static_cast<int>(index);
    if (!seen.insert(t.index).second) {
      return InvalidArgument(g.Path("index") + ": GPU " + std::to_string(t.index) +
                             " sampled twice");
    }
    // Values the agent could not read are left out; a value of the wrong type is an
    // error rather than silently dropped.
    TY_RETURN_IF_ERROR(g.Number("util_pct", t.util_pct));
    TY_RETURN_IF_ERROR(g.Number("mem_used_mib", t.mem_used_mib));
    TY_RETURN_IF_ERROR(g.Number("temp_c", t.temp_c));
    TY_RETURN_IF_ERROR(g.Number("power_w", t.power_w));
    TY_RETURN_IF_ERROR(g.Number("sm_clock_mhz", t.sm_clock_mhz));
    TY_RETURN_IF_ERROR(g.Bool("throttled", t.throttled));
    TY_RETURN_IF_ERROR(g.Number("ecc_uncorrectable", t.ecc_uncorrectable));
    TY_RETURN_IF_ERROR(g.Number("xid_last", t.xid_last));
    TY_RETURN_IF_ERROR(g.Number("xid_count", t.xid_count));
    return Status::Ok();
  }));
  TY_RETURN_IF_ERROR(f.ObjectList("links", 256, h.links, [](const Fields& l, LinkTelemetry& v) {
    TY_RETURN_IF_ERROR(l.Str("name", v.name, true));
    TY_RETURN_IF_ERROR(l.Str("kind", v.kind));
    TY_RETURN_IF_ERROR(l.Bool("up", v.up));
    TY_RETURN_IF_ERROR(l.Number("errors", v.errors));
    return Status::Ok();
  }));
  TY_RETURN_IF_ERROR(f.ObjectList("disks", 64, h.disks, [](const Fields& d, DiskTelemetry& v) {
    TY_RETURN_IF_ERROR(d.Str("path", v.path, true));
    TY_RETURN_IF_ERROR(d.Number("free_bytes", v.free_bytes));
    TY_RETURN_IF_ERROR(d.Number("total_bytes", v.total_bytes));
    if (v.free_bytes < 0) return d.Wrong("free_bytes", *d.Get("free_bytes"), "a size >= 0");
    if (v.total_bytes < 0) return d.Wrong("total_bytes", *d.Get("total_bytes"), "a size >= 0");
    return Status::Ok();
  }));
  TY_RETURN_IF_ERROR(ParseHealthCheck(f, h.health_check));
  TY_RETURN_IF_ERROR(f.StrList("faults", h.faults, 1024));
  TY_RETURN_IF_ERROR(
      f.ObjectList("datasets", 1024, h.datasets, [](const Fields& d, DatasetStatus& v) {
        TY_RETURN_IF_ERROR(d.Str("dataset", v.dataset, true));
        TY_RETURN_IF_ERROR(d.Str("version", v.version, true));
        if (!IsContentVersion(v.version)) {
          return d.Wrong("version", *d.Get("version"), "sha256:<64 lowercase hex>");
        }
        std::string state;
        TY_RETURN_IF_ERROR(d.Str("state", state, true));
        if (state == "staging") {
          v.state = DatasetState::kStaging;
        } else if (state == "ready") {
          v.state = DatasetState::kReady;
        } else if (state == "failed") {
          v.state = DatasetState::kFailed;
        } else {
          return d.Wrong("state", *d.Get("state"), "staging, ready or failed");
        }
        TY_RETURN_IF_ERROR(d.Int("bytes_done", v.bytes_done, 0, kInt64Max));
        TY_RETURN_IF_ERROR(d.Int("bytes_total", v.bytes_total, 0, kInt64Max));
        TY_RETURN_IF_ERROR(d.Number("bytes_per_s", v.bytes_per_s));
        TY_RETURN_IF_ERROR(d.Str("error", v.error));
        int64_t in_use = 0;
        TY_RETURN_IF_ERROR(d.Int("in_use", in_use, 0, INT32_MAX));
        v.in_use = static_cast<int32_t>(in_use);
        return Status::Ok();
      }));
  return h;
}

Result<HeartbeatReply> ParseHeartbeatReply(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "heartbeat reply"));
  HeartbeatReply r;
  TY_RETURN_IF_ERROR(TaskIdList(f, "ack", r.ack));
  return r;
}

Result<PollRequest> ParsePollRequest(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "poll"));
  PollRequest p;
  TY_RETURN_IF_ERROR(f.Str("node", p.node, true));
  TY_RETURN_IF_ERROR(f.Millis("wait_ms", p.wait));
  return p;
}

Result<Command> ParseCommand(const json& j) { return ParseCommandAt(j, "command"); }

Result<PollReply> ParsePollReply(const json& j, std::vector<Status>* rejected) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "poll reply"));
  PollReply r;
  const json* commands = f.Get("commands");
  if (commands == nullptr) return f.Missing("commands");
  if (!commands->is_array()) return f.Wrong("commands", *commands, "a list of commands");
  for (size_t i = 0; i < commands->size(); ++i) {
    auto c = ParseCommandAt((*commands)[i], Index(f.Path("commands"), i));
    if (c.ok()) {
      r.commands.push_back(std::move(*c));
    } else if (rejected != nullptr) {
      rejected->push_back(c.status());
    }
  }
  return r;
}

Result<LogUpload> ParseLogUpload(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "logs"));
  LogUpload u;
  TY_RETURN_IF_ERROR(UploadHead(f, u.node, u.task_id, u.offset));
  TY_RETURN_IF_ERROR(Base64Field(f, u.data));
  return u;
}

Result<MetricsUpload> ParseMetricsUpload(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "metrics"));
  MetricsUpload u;
  TY_RETURN_IF_ERROR(UploadHead(f, u.node, u.task_id, u.offset));
  if (f.Get("end_offset") != nullptr) {
    int64_t end = 0;
    TY_RETURN_IF_ERROR(f.Int("end_offset", end, 0, kInt64Max));
    u.end_offset = end;
  }
  const json* lines = f.Get("lines");
  if (lines == nullptr) return f.Missing("lines");
  if (!lines->is_array()) return f.Wrong("lines", *lines, "a list of objects");
  u.lines.assign(lines->begin(), lines->end());
  return u;
}

Result<ProfileUpload> ParseProfileUpload(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "profile"));
  ProfileUpload u;
  TY_RETURN_IF_ERROR(UploadHead(f, u.node, u.task_id, u.offset));
  TY_RETURN_IF_ERROR(ProfileIdField(f, u.id));
  if (const json* status = f.Get("status")) {
    if (*status == "recording") {
      u.kind = ProfileUpload::Kind::kRecording;
    } else if (*status == "failed") {
      u.kind = ProfileUpload::Kind::kFailed;
      TY_RETURN_IF_ERROR(f.Str("message", u.message));
    } else {
      return f.Wrong("status", *status, "recording or failed (a trace is sent as data_b64 chunks)");
    }
    return u;
  }
  u.kind = ProfileUpload::Kind::kChunk;
  TY_RETURN_IF_ERROR(f.Int("total_bytes", u.total_bytes, 1, kInt64Max, true));
  TY_RETURN_IF_ERROR(Base64Field(f, u.data));
  return u;
}

Result<UploadReply> ParseUploadReply(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "upload reply"));
  UploadReply r;
  TY_RETURN_IF_ERROR(f.Int("next_offset", r.next_offset, 0, kInt64Max, true));
  return r;
}

Result<ProfileUploadReply> ParseProfileUploadReply(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "profile reply"));
  ProfileUploadReply r;
  TY_RETURN_IF_ERROR(f.Int("next_offset", r.next_offset, 0, kInt64Max, true));
  TY_RETURN_IF_ERROR(f.Str("state", r.state, true));
  TY_RETURN_IF_ERROR(f.Str("message", r.message));
  return r;
}

}  // namespace trainyard::protocol
