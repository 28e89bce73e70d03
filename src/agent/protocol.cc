#include "agent/protocol.h"

#include "core/names.h"

namespace trainyard::agent {
namespace {

using nlohmann::json;

Status FieldError(std::string_view field, const json& value, std::string_view want) {
  return InvalidArgument(std::string(field) + ": must be " + std::string(want) + ", got " +
                         QuoteForMessage(value.dump()));
}

Result<int64_t> Int(const json& j, std::string_view field, bool required) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) return InvalidArgument(std::string(field) + ": missing");
    return int64_t{0};
  }
  if (!it->is_number_integer()) return FieldError(field, *it, "an integer");
  return it->get<int64_t>();
}

Result<std::string> Str(const json& j, std::string_view field, bool required) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) return InvalidArgument(std::string(field) + ": missing");
    return std::string();
  }
  if (!it->is_string()) return FieldError(field, *it, "a string");
  return it->get<std::string>();
}

Result<StartTask> ParseStart(const json& t) {
  if (!t.is_object()) return FieldError("task", t, "an object");
  StartTask s;
  TY_ASSIGN_OR_RETURN(s.task_id, Str(t, "task_id", true));
  if (s.task_id.empty()) return InvalidArgument("task.task_id: must not be empty");
  TY_ASSIGN_OR_RETURN(s.job_id, Int(t, "job_id", false));
  TY_ASSIGN_OR_RETURN(s.attempt, Int(t, "attempt", false));
  TY_ASSIGN_OR_RETURN(s.rank, Int(t, "rank", false));
  TY_ASSIGN_OR_RETURN(s.workdir, Str(t, "workdir", false));
  auto argv = t.find("argv");
  if (argv == t.end() || !argv->is_array() || argv->empty()) {
    return InvalidArgument("task " + s.task_id + ": argv: must be a non-empty list of strings");
  }
  for (const auto& a : *argv) {
    if (!a.is_string()) return FieldError("task " + s.task_id + ": argv", a, "a string");
    s.argv.push_back(a.get<std::string>());
  }
  if (auto env = t.find("env"); env != t.end() && !env->is_null()) {
    if (!env->is_object()) return FieldError("task " + s.task_id + ": env", *env, "an object");
    for (const auto& [k, v] : env->items()) {
      if (!v.is_string()) return FieldError("task " + s.task_id + ": env." + k, v, "a string");
      s.env[k] = v.get<std::string>();
    }
  }
  if (auto gpus = t.find("gpus"); gpus != t.end() && !gpus->is_null()) {
    if (!gpus->is_array()) return FieldError("task " + s.task_id + ": gpus", *gpus, "a list");
    for (const auto& g : *gpus) {
      if (!g.is_number_integer()) {
        return FieldError("task " + s.task_id + ": gpus", g, "GPU indices");
      }
      s.gpus.push_back(g.get<int>());
    }
  }
  if (auto secret = t.find("secret_env"); secret != t.end() && !secret->is_null()) {
    if (!secret->is_array()) {
      return FieldError("task " + s.task_id + ": secret_env", *secret, "a list of names");
    }
    for (const auto& name : *secret) {
      if (!name.is_string()) {
        return FieldError("task " + s.task_id + ": secret_env", name, "names");
      }
      s.secret_env.push_back(name.get<std::string>());
    }
  }
  return s;
}

}  // namespace

std::string_view TaskStateName(TaskState s) {
  switch (s) {
    case TaskState::kStarting:
      return "starting";
    case TaskState::kRunning:
      return "running";
    case TaskState::kExited:
      return "exited";
  }
  return "unknown";
}

json ToJson(const TaskStatus& t) {
  return {{"task_id", t.task_id},
          {"job_id", t.job_id},
          {"attempt", t.attempt},
          {"rank", t.rank},
          {"state", TaskStateName(t.state)},
          {"pid", t.pid},
          {"started_ms", ToMs(t.started)},
          {"finished_ms", ToMs(t.finished)},
          {"exit_code", t.exit_code},
          {"signal", t.signal},
          {"message", t.message},
          {"fenced", t.fenced}};
}

Result<Command> ParseCommand(const json& j) {
  if (!j.is_object()) return FieldError("command", j, "an object");
  TY_ASSIGN_OR_RETURN(std::string kind, Str(j, "kind", true));
  Command c;
  if (kind == "start") {
    auto task = j.find("task");
    if (task == j.end()) return InvalidArgument("start: task: missing");
    TY_ASSIGN_OR_RETURN(c.start, ParseStart(*task));
    c.kind = Command::Kind::kStart;
    c.task_id = c.start.task_id;
    return c;
  }
  if (kind == "profile") {
    c.kind = Command::Kind::kProfile;
    TY_ASSIGN_OR_RETURN(c.task_id, Str(j, "task_id", true));
    TY_ASSIGN_OR_RETURN(c.profile_id, Str(j, "id", true));
    // It names files and travels back in uploads: nothing but a plain name.
    const bool plain = !c.profile_id.empty() && c.profile_id.size() <= 64 &&
                       c.profile_id.find_first_not_of(
                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "abcdefghijklmnopqrstuvwxyz0123456789._-") == std::string::npos &&
                       c.profile_id.front() != '.';
    if (!plain) return FieldError("profile: id", j["id"], "1-64 of A-Z a-z 0-9 . _ -");
    TY_ASSIGN_OR_RETURN(int64_t steps, Int(j, "steps", true));
    if (steps < 1 || steps > 10'000) return FieldError("profile: steps", j["steps"], "1..10000");
    c.steps = static_cast<int32_t>(steps);
    return c;
  }
  if (kind == "faults") {
    c.kind = Command::Kind::kFaults;
    auto faults = j.find("faults");
    if (faults == j.end() || faults->is_null()) return InvalidArgument("faults: faults: missing");
    auto parsed = ParseFaults(*faults);
    if (!parsed.ok()) return InvalidArgument("faults: " + parsed.status().message());
    c.faults = std::move(*parsed);
    return c;
  }
  if (kind == "checkpoint") {
    c.kind = Command::Kind::kCheckpoint;
    auto task_id = Str(j, "task_id", true);
    if (!task_id.ok()) return InvalidArgument("checkpoint: " + task_id.status().message());
    if (task_id->empty()) return InvalidArgument("checkpoint: task_id: must not be empty");
    c.task_id = std::move(*task_id);
    return c;
  }
  if (kind != "stop" && kind != "preempt") {
    return InvalidArgument(
        "kind: must be start, stop, preempt, profile, faults or checkpoint, got " +
        QuoteForMessage(kind));
  }
  c.kind = kind == "stop" ? Command::Kind::kStop : Command::Kind::kPreempt;
  TY_ASSIGN_OR_RETURN(c.task_id, Str(j, "task_id", true));
  TY_ASSIGN_OR_RETURN(int64_t grace, Int(j, "grace_ms", false));
  if (grace < 0) return FieldError(kind + ": grace_ms", j["grace_ms"], ">= 0");
  c.grace = Duration(grace);
  if (c.kind == Command::Kind::kPreempt) {
    TY_ASSIGN_OR_RETURN(int64_t sig, Int(j, "signal", false));
    if (sig == 0) sig = 10;  // SIGUSR1, the documented default notice signal
    if (sig < 1 || sig > 64) return FieldError("preempt: signal", j["signal"], "1..64");
    c.signal = static_cast<int>(sig);
  }
  return c;
}

json ToJson(const GpuSample& s) {
  json j = {{"index", s.index}};
  if (s.util_pct) j["util_pct"] = *s.util_pct;
  if (s.mem_used_mib) j["mem_used_mib"] = *s.mem_used_mib;
  if (s.temp_c) j["temp_c"] = *s.temp_c;
  if (s.power_w) j["power_w"] = *s.power_w;
  if (s.sm_clock_mhz) j["sm_clock_mhz"] = *s.sm_clock_mhz;
  if (s.throttled) j["throttled"] = *s.throttled;
  if (s.ecc_uncorrectable) j["ecc_uncorrectable"] = *s.ecc_uncorrectable;
  if (s.xid_last) j["xid_last"] = *s.xid_last;
  if (s.xid_count) j["xid_count"] = *s.xid_count;
  return j;
}

json ToJson(const LinkSample& l) {
  return {{"name", l.name}, {"kind", l.kind}, {"up", l.up}, {"errors", l.errors}};
}

}  // namespace trainyard::agent
