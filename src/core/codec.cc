#include "core/codec.h"

#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/names.h"
#include "core/spec_codec.h"

namespace trainyard {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

int64_t Millis(Timestamp t) { return t.time_since_epoch().count(); }
int64_t Millis(Duration d) { return d.count(); }

// "string \"soon\"", "array [1,2]": the JSON type and a short rendering of the value.
std::string DescribeValue(const json& v) {
  if (v.is_null()) return "null";
  std::string text;
  try {
    text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception&) {
    text = "?";
  }
  constexpr size_t kMax = 60;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return std::string(v.type_name()) + " " + text;
}

// Reads the fields of one JSON object, naming each by its path ("job.attempts[0]")
// in errors. Every getter returns the first problem it meets.
class ObjectReader {
 public:
  // Fails when `v` is not an object.
  static Result<ObjectReader> Open(const json& v, std::string path) {
    if (!v.is_object()) {
      return InvalidArgument(path + ": expected an object, got " + DescribeValue(v));
    }
    return ObjectReader(v, std::move(path));
  }

  std::string FieldPath(std::string_view key) const { return path_ + "." + std::string(key); }

  // The value under `key`; an error when the key is missing.
  Result<const json*> Field(std::string_view key) const {
    auto it = obj_->find(std::string(key));
    if (it == obj_->end()) return InvalidArgument(FieldPath(key) + ": missing");
    return &*it;
  }
  // The value under `key`, or nullptr when it is missing or null.
  const json* OptionalField(std::string_view key) const {
    auto it = obj_->find(std::string(key));
    if (it == obj_->end() || it->is_null()) return nullptr;
    return &*it;
  }

  Status String(std::string_view key, std::string& out) const {
    TY_ASSIGN_OR_RETURN(const json* v, Field(key));
    return ReadString(*v, FieldPath(key), out);
  }
  Status Bool(std::string_view key, bool& out) const {
    TY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_boolean()) return Expected(key, "true or false", *v);
    out = v->get<bool>();
    return Status::Ok();
  }
  Status Int64(std::string_view key, int64_t& out) const {
    TY_ASSIGN_OR_RETURN(const json* v, Field(key));
    return ReadInt(*v, FieldPath(key), std::numeric_limits<int64_t>::min(),
                   std::numeric_limits<int64_t>::max(), out);
  }
  Status Int32(std::string_view key, int32_t& out) const {
    TY_ASSIGN_OR_RETURN(const json* v, Field(key));
    int64_t wide = 0;
    TY_RETURN_IF_ERROR(ReadInt(*v, FieldPath(key), std::numeric_limits<int32_t>::min(),
                               std::numeric_limits<int32_t>::max(), wide));
    out = static_cast<int32_t>(wide);
    return Status::Ok();
  }
  Status Double(std::string_view key, double& out) const {
    TY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_number()) return Expected(key, "a number", *v);
    out = v->get<double>();
    return Status::Ok();
  }
  Status TimeMs(std::string_view key, Timestamp& out) const {
    int64_t ms = 0;
    TY_RETURN_IF_ERROR(Int64(key, ms));
    out = Timestamp(Duration(ms));
    return Status::Ok();
  }
  Status OptionalTimeMs(std::string_view key, std::optional<Timestamp>& out) const {
    out.reset();
    if (OptionalField(key) == nullptr) return Status::Ok();
    Timestamp t;
    TY_RETURN_IF_ERROR(TimeMs(key, t));
    out = t;
    return Status::Ok();
  }
  Status DurationMs(std::string_view key, Duration& out) const {
    int64_t ms = 0;
    TY_RETURN_IF_ERROR(Int64(key, ms));
    out = Duration(ms);
    return Status::Ok();
  }
  Status StringList(std::string_view key, std::vector<std::string>& out) const {
    TY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_array()) return Expected(key, "a list of strings", *v);
    out.clear();
    out.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      std::string s;
      TY_RETURN_IF_ERROR(ReadString((*v)[i], Index(FieldPath(key), i), s));
      out.push_back(std::move(s));
    }
    return Status::Ok();
  }
  Status StringMap(std::string_view key, std::map<std::string, std::string>& out) const {
    TY_ASSIGN_OR_RETURN(const json* v, Field(key));
    if (!v->is_object()) return Expected(key, "an object of strings", *v);
    out.clear();
    for (const auto& [k, value] : v->items()) {
      std::string s;
      TY_RETURN_IF_ERROR(ReadString(value, FieldPath(key) + "." + k, s));
      out.emplace(k, std::move(s));
    }
    return Status::Ok();
  }
  // An enum written by name; `parse` maps a name to a value, `names` lists the valid
  // ones for the message.
  template <typename E, typename ParseFn>
  Status Enum(std::string_view key, ParseFn parse, const std::vector<std::string_view>& names,
              E& out) const {
    std::string name;
    TY_RETURN_IF_ERROR(String(key, name));
    std::optional<E> e = parse(name);
    if (e.has_value()) {
      out = *e;
      return Status::Ok();
    }
    std::string msg =
        FieldPath(key) + ": unknown value " + QuoteForMessage(name) + "; expected one of ";
    for (size_t i = 0; i < names.size(); ++i) {
      if (i) msg += ", ";
      msg += names[i];
    }
    if (std::string hint = ClosestMatch(name, names); !hint.empty()) {
      msg += " (did you mean " + hint + "?)";
    }
    return InvalidArgument(std::move(msg));
  }

  static std::string Index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

 private:
  ObjectReader(const json& obj, std::string path) : obj_(&obj), path_(std::move(path)) {}

  Status Expected(std::string_view key, std::string_view what, const json& got) const {
    return InvalidArgument(FieldPath(key) + ": expected " + std::string(what) + ", got " +
                           DescribeValue(got));
  }
  static Status ReadString(const json& v, const std::string& path, std::string& out) {
    if (!v.is_string()) {
      return InvalidArgument(path + ": expected a string, got " + DescribeValue(v));
    }
    out = v.get<std::string>();
    return Status::Ok();
  }
  static Status ReadInt(const json& v, const std::string& path, int64_t lo, int64_t hi,
                        int64_t& out) {
    auto range_error = [&] {
      return InvalidArgument(path + ": expected an integer between " + std::to_string(lo) +
                             " and " + std::to_string(hi) + ", got " + DescribeValue(v));
    };
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) return range_error();
      out = static_cast<int64_t>(u);
      return Status::Ok();
    }
    if (v.is_number_integer()) {
      int64_t i = v.get<int64_t>();
      if (i < lo || i > hi) return range_error();
      out = i;
      return Status::Ok();
    }
    return InvalidArgument(path + ": expected an integer, got " + DescribeValue(v));
  }

  const json* obj_;
  std::string path_;
};

template <typename E, size_t N>
std::vector<std::string_view> Names(std::string_view (*name)(E), const E (&values)[N]) {
  std::vector<std::string_view> out;
  for (E e : values) out.push_back(name(e));
  return out;
}

const std::vector<std::string_view>& JobStateNames() {
  static const auto* names = new std::vector<std::string_view>(
      Names(JobStateName, {JobState::kPending, JobState::kAdmitted, JobState::kStarting,
                           JobState::kRunning, JobState::kPreempting, JobState::kLost,
                           JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}));
  return *names;
}

const std::vector<std::string_view>& ExitReasonNames() {
  static const auto* names = new std::vector<std::string_view>(Names(
      ExitReasonName, {ExitReason::kNone, ExitReason::kSucceeded, ExitReason::kFailed,
                       ExitReason::kStartFailed, ExitReason::kPreempted, ExitReason::kNodeLost,
                       ExitReason::kCancelled, ExitReason::kTimeLimit}));
  return *names;
}

const std::vector<std::string_view>& RoleNames() {
  static const auto* names = new std::vector<std::string_view>(
      Names(RoleName, {Role::kViewer, Role::kMember, Role::kTenantAdmin, Role::kClusterAdmin}));
  return *names;
}

std::optional<Role> ParseRoleName(std::string_view name) {
  Result<Role> role = ParseRole(name);
  if (!role.ok()) return std::nullopt;
  return *role;
}

const std::vector<std::string_view>& NodeStateNames() {
  static const auto* names = new std::vector<std::string_view>(
      Names(NodeStateName, {NodeState::kReady, NodeState::kCordoned, NodeState::kDraining,
                            NodeState::kNotReady, NodeState::kDown}));
  return *names;
}

ojson AttemptToJson(const Attempt& a) {
  ojson j = ojson::object();
  j["index"] = a.index;
  j["start_time_ms"] = Millis(a.start_time);
  j["end_time_ms"] = a.end_time ? ojson(Millis(*a.end_time)) : ojson(nullptr);
  j["nodes"] = a.nodes;
  j["gpus"] = a.gpus;
  j["exit_reason"] = std::string(ExitReasonName(a.exit_reason));
  j["exit_code"] = a.exit_code;
  j["message"] = a.message;
  j["lost_work_ms"] = Millis(a.lost_work);
  if (!a.image_digest.empty()) j["image_digest"] = a.image_digest;
  return j;
}

Result<Attempt> AttemptFromJson(const json& v, std::string path) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, std::move(path)));
  Attempt a;
  TY_RETURN_IF_ERROR(r.Int32("index", a.index));
  TY_RETURN_IF_ERROR(r.TimeMs("start_time_ms", a.start_time));
  TY_RETURN_IF_ERROR(r.OptionalTimeMs("end_time_ms", a.end_time));
  TY_RETURN_IF_ERROR(r.StringList("nodes", a.nodes));
  // Optional: documents written before per-replica GPU indices were kept lack it.
  if (const json* g = r.OptionalField("gpus")) {
    if (!g->is_array()) {
      return InvalidArgument(r.FieldPath("gpus") +
                             ": expected a list of lists of GPU indices, got " + DescribeValue(*g));
    }
    for (size_t i = 0; i < g->size(); ++i) {
      const json& row = (*g)[i];
      std::vector<int> indices;
      if (row.is_array()) {
        for (const json& x : row) {
          if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > 1023) {
            indices.clear();
            break;
          }
          indices.push_back(x.get<int>());
        }
      }
      if (!row.is_array() || indices.size() != row.size()) {
        return InvalidArgument(r.FieldPath("gpus") + "[" + std::to_string(i) +
                               "]: expected a list of GPU indices 0..1023, got " +
                               DescribeValue(row));
      }
      a.gpus.push_back(std::move(indices));
    }
  }
  TY_RETURN_IF_ERROR(r.Enum("exit_reason", ParseExitReason, ExitReasonNames(), a.exit_reason));
  TY_RETURN_IF_ERROR(r.Int32("exit_code", a.exit_code));
  TY_RETURN_IF_ERROR(r.String("message", a.message));
  TY_RETURN_IF_ERROR(r.DurationMs("lost_work_ms", a.lost_work));
  // Optional: only attempts of containerised jobs have one.
  if (r.OptionalField("image_digest") != nullptr) {
    TY_RETURN_IF_ERROR(r.String("image_digest", a.image_digest));
  }
  return a;
}

ojson CheckpointToJson(const CheckpointInfo& c) {
  ojson j = ojson::object();
  j["path"] = c.path;
  j["step"] = c.step;
  j["completed_at_ms"] = Millis(c.completed_at);
  j["write_duration_ms"] = Millis(c.write_duration);
  return j;
}

Result<CheckpointInfo> CheckpointFromJson(const json& v, std::string path) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, std::move(path)));
  CheckpointInfo c;
  TY_RETURN_IF_ERROR(r.String("path", c.path));
  TY_RETURN_IF_ERROR(r.Int64("step", c.step));
  TY_RETURN_IF_ERROR(r.TimeMs("completed_at_ms", c.completed_at));
  TY_RETURN_IF_ERROR(r.DurationMs("write_duration_ms", c.write_duration));
  return c;
}

Result<JobSpec> SpecFromJson(const ObjectReader& r) {
  TY_ASSIGN_OR_RETURN(const json* v, r.Field("spec"));
  if (!v->is_object()) {
    return InvalidArgument(r.FieldPath("spec") + ": expected an object, got " + DescribeValue(*v));
  }
  // A json built in code may hold invalid UTF-8; dump() then throws.
  std::string text = v->dump();
  SpecParseResult parsed = ParseSpec(text, "<store>", SpecOrigin::kStored);
  if (!parsed.ok()) {
    std::string msg = r.FieldPath("spec") + ": ";
    for (size_t i = 0; i < parsed.errors.size(); ++i) {
      if (i) msg += "; ";
      const Diagnostic& d = parsed.errors[i];
      msg += d.field.empty() ? d.message : d.field + ": " + d.message;
    }
    return InvalidArgument(std::move(msg));
  }
  return std::move(*parsed.spec);
}

Result<Job> JobFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "job"));
  Job job;
  TY_RETURN_IF_ERROR(r.Int64("id", job.id));
  TY_ASSIGN_OR_RETURN(job.spec, SpecFromJson(r));
  TY_RETURN_IF_ERROR(r.Enum("state", ParseJobState, JobStateNames(), job.state));
  TY_RETURN_IF_ERROR(r.String("reason", job.reason));
  TY_RETURN_IF_ERROR(r.TimeMs("submit_time_ms", job.submit_time));
  TY_RETURN_IF_ERROR(r.TimeMs("state_time_ms", job.state_time));
  TY_RETURN_IF_ERROR(r.String("submitted_by", job.submitted_by));
  TY_ASSIGN_OR_RETURN(const json* attempts, r.Field("attempts"));
  if (!attempts->is_array()) {
    return InvalidArgument(r.FieldPath("attempts") + ": expected a list, got " +
                           DescribeValue(*attempts));
  }
  for (size_t i = 0; i < attempts->size(); ++i) {
    TY_ASSIGN_OR_RETURN(
        Attempt a,
        AttemptFromJson((*attempts)[i], ObjectReader::Index(r.FieldPath("attempts"), i)));
    job.attempts.push_back(std::move(a));
  }
  if (const json* c = r.OptionalField("checkpoint")) {
    TY_ASSIGN_OR_RETURN(job.checkpoint, CheckpointFromJson(*c, r.FieldPath("checkpoint")));
  }
  TY_RETURN_IF_ERROR(r.Int32("retries", job.retries));
  TY_RETURN_IF_ERROR(r.StringList("excluded_nodes", job.excluded_nodes));
  TY_RETURN_IF_ERROR(r.Bool("held", job.held));
  // Jobs stored before users had identities run as their tenant's.
  if (r.OptionalField("run_as_uid") != nullptr) {
    TY_RETURN_IF_ERROR(r.Int64("run_as_uid", job.run_as_uid));
    TY_RETURN_IF_ERROR(r.Int64("run_as_gid", job.run_as_gid));
  }
  return job;
}

ojson GpuToJson(const Gpu& g) {
  ojson j = ojson::object();
  j["index"] = g.index;
  j["uuid"] = g.uuid;
  j["model"] = g.model;
  j["memory_bytes"] = g.memory_bytes;
  j["nvlink_domain"] = g.nvlink_domain;
  return j;
}

Result<Gpu> GpuFromJson(const json& v, std::string path) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, std::move(path)));
  Gpu g;
  TY_RETURN_IF_ERROR(r.Int32("index", g.index));
  TY_RETURN_IF_ERROR(r.String("uuid", g.uuid));
  TY_RETURN_IF_ERROR(r.String("model", g.model));
  TY_RETURN_IF_ERROR(r.Int64("memory_bytes", g.memory_bytes));
  TY_RETURN_IF_ERROR(r.String("nvlink_domain", g.nvlink_domain));
  return g;
}

Result<Node> NodeFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "node"));
  Node n;
  TY_RETURN_IF_ERROR(r.String("name", n.name));
  TY_RETURN_IF_ERROR(r.StringMap("labels", n.labels));
  TY_ASSIGN_OR_RETURN(const json* gpus, r.Field("gpus"));
  if (!gpus->is_array()) {
    return InvalidArgument(r.FieldPath("gpus") + ": expected a list, got " + DescribeValue(*gpus));
  }
  for (size_t i = 0; i < gpus->size(); ++i) {
    TY_ASSIGN_OR_RETURN(Gpu g,
                        GpuFromJson((*gpus)[i], ObjectReader::Index(r.FieldPath("gpus"), i)));
    n.gpus.push_back(std::move(g));
  }
  TY_RETURN_IF_ERROR(r.Int64("milli_cpus", n.milli_cpus));
  TY_RETURN_IF_ERROR(r.Int64("memory_bytes", n.memory_bytes));
  TY_ASSIGN_OR_RETURN(const json* topology, r.Field("topology"));
  TY_ASSIGN_OR_RETURN(ObjectReader t, ObjectReader::Open(*topology, r.FieldPath("topology")));
  TY_RETURN_IF_ERROR(t.String("spine", n.topology.spine));
  TY_RETURN_IF_ERROR(t.String("leaf", n.topology.leaf));
  TY_RETURN_IF_ERROR(r.Enum("state", ParseNodeState, NodeStateNames(), n.state));
  TY_RETURN_IF_ERROR(r.String("state_reason", n.state_reason));
  return n;
}

Result<Tenant> TenantFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "tenant"));
  Tenant t;
  TY_RETURN_IF_ERROR(r.String("name", t.name));
  TY_RETURN_IF_ERROR(r.String("description", t.description));
  // Documents stored before quotas existed have none: the defaults (unbounded).
  if (r.OptionalField("guaranteed_gpus") != nullptr) {
    TY_RETURN_IF_ERROR(r.Int64("guaranteed_gpus", t.guaranteed_gpus));
  }
  if (r.OptionalField("limit_gpus") != nullptr) {
    TY_RETURN_IF_ERROR(r.Int64("limit_gpus", t.limit_gpus));
  }
  // And before identities: the agent's own.
  if (r.OptionalField("run_as_uid") != nullptr) {
    TY_RETURN_IF_ERROR(r.Int64("run_as_uid", t.run_as_uid));
    TY_RETURN_IF_ERROR(r.Int64("run_as_gid", t.run_as_gid));
  }
  if (r.OptionalField("allow_root") != nullptr)
    TY_RETURN_IF_ERROR(r.Bool("allow_root", t.allow_root));
  return t;
}

Result<Queue> QueueFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "queue"));
  Queue q;
  TY_RETURN_IF_ERROR(r.String("name", q.name));
  TY_RETURN_IF_ERROR(r.String("tenant", q.tenant));
  TY_RETURN_IF_ERROR(r.String("parent", q.parent));
  TY_RETURN_IF_ERROR(r.Int64("guaranteed_gpus", q.guaranteed_gpus));
  TY_RETURN_IF_ERROR(r.Int64("limit_gpus", q.limit_gpus));
  TY_RETURN_IF_ERROR(r.Double("weight", q.weight));
  return q;
}

Result<PriorityClass> PriorityClassFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "priority_class"));
  PriorityClass p;
  TY_RETURN_IF_ERROR(r.String("name", p.name));
  TY_RETURN_IF_ERROR(r.Int32("value", p.value));
  TY_RETURN_IF_ERROR(r.Bool("preemptible", p.preemptible));
  return p;
}

Result<User> UserFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "user"));
  User u;
  TY_RETURN_IF_ERROR(r.String("name", u.name));
  TY_RETURN_IF_ERROR(r.String("tenant", u.tenant));
  TY_RETURN_IF_ERROR(r.Enum("role", ParseRoleName, RoleNames(), u.role));
  TY_RETURN_IF_ERROR(r.StringList("priority_classes", u.priority_classes));
  TY_RETURN_IF_ERROR(r.TimeMs("created_ms", u.created));
  TY_RETURN_IF_ERROR(r.String("created_by", u.created_by));
  // Users stored before users had identities have none.
  if (r.OptionalField("run_as_uid") != nullptr) {
    TY_RETURN_IF_ERROR(r.Int64("run_as_uid", u.run_as_uid));
    TY_RETURN_IF_ERROR(r.Int64("run_as_gid", u.run_as_gid));
  }
  return u;
}

Result<Dataset> DatasetFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "dataset"));
  Dataset d;
  TY_RETURN_IF_ERROR(r.String("name", d.name));
  TY_RETURN_IF_ERROR(r.String("tenant", d.tenant));
  TY_RETURN_IF_ERROR(r.String("source", d.source));
  TY_RETURN_IF_ERROR(r.String("description", d.description));
  TY_RETURN_IF_ERROR(r.TimeMs("created_ms", d.created));
  TY_RETURN_IF_ERROR(r.String("created_by", d.created_by));
  TY_ASSIGN_OR_RETURN(const json* versions, r.Field("versions"));
  if (!versions->is_array()) {
    return InvalidArgument(r.FieldPath("versions") + ": expected a list, got " +
                           DescribeValue(*versions));
  }
  for (size_t i = 0; i < versions->size(); ++i) {
    TY_ASSIGN_OR_RETURN(
        ObjectReader vr,
        ObjectReader::Open((*versions)[i], ObjectReader::Index(r.FieldPath("versions"), i)));
    DatasetVersion dv;
    TY_RETURN_IF_ERROR(vr.String("version", dv.version));
    TY_RETURN_IF_ERROR(vr.Int64("files", dv.files));
    TY_RETURN_IF_ERROR(vr.Int64("bytes", dv.bytes));
    TY_RETURN_IF_ERROR(vr.TimeMs("registered_ms", dv.registered));
    TY_RETURN_IF_ERROR(vr.String("registered_by", dv.registered_by));
    d.versions.push_back(std::move(dv));
  }
  return d;
}

Result<ApiToken> ApiTokenFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "api_token"));
  ApiToken t;
  TY_RETURN_IF_ERROR(r.String("id", t.id));
  TY_RETURN_IF_ERROR(r.String("user", t.user));
  TY_RETURN_IF_ERROR(r.String("secret_hash", t.secret_hash));
  TY_RETURN_IF_ERROR(r.String("description", t.description));
  TY_RETURN_IF_ERROR(r.TimeMs("created_ms", t.created));
  TY_RETURN_IF_ERROR(r.OptionalTimeMs("expires_ms", t.expires));
  TY_RETURN_IF_ERROR(r.OptionalTimeMs("revoked_ms", t.revoked));
  return t;
}

Result<AuditEntry> AuditEntryFromJsonOrThrow(const json& v) {
  TY_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, "audit_entry"));
  AuditEntry e;
  TY_RETURN_IF_ERROR(r.Int64("seq", e.seq));
  TY_RETURN_IF_ERROR(r.TimeMs("time_ms", e.time));
  TY_RETURN_IF_ERROR(r.String("actor", e.actor));
  TY_RETURN_IF_ERROR(r.String("token_id", e.token_id));
  TY_RETURN_IF_ERROR(r.String("tenant", e.tenant));
  TY_RETURN_IF_ERROR(r.String("action", e.action));
  TY_RETURN_IF_ERROR(r.String("object", e.object));
  TY_RETURN_IF_ERROR(r.String("source", e.source));
  TY_RETURN_IF_ERROR(r.Int32("status", e.status));
  TY_RETURN_IF_ERROR(r.String("message", e.message));
  return e;
}

// Runs a decoder, turning any exception (nlohmann or yaml-cpp) into a Status.
template <typename T>
Result<T> Guarded(std::string_view what, Result<T> (*decode)(const json&), const json& v) {
  try {
    return decode(v);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string(what) + ": cannot decode: " + e.what());
  }
}

}  // namespace

ojson ToJson(const Job& job) {
  ojson j = ojson::object();
  j["id"] = job.id;
  j["spec"] = SpecToJson(job.spec);
  j["state"] = std::string(JobStateName(job.state));
  j["reason"] = job.reason;
  j["submit_time_ms"] = Millis(job.submit_time);
  j["state_time_ms"] = Millis(job.state_time);
  j["submitted_by"] = job.submitted_by;
  ojson attempts = ojson::array();
  for (const Attempt& a : job.attempts) attempts.push_back(AttemptToJson(a));
  j["attempts"] = std::move(attempts);
  j["checkpoint"] = job.checkpoint ? CheckpointToJson(*job.checkpoint) : ojson(nullptr);
  j["retries"] = job.retries;
  j["excluded_nodes"] = job.excluded_nodes;
  j["held"] = job.held;
  if (job.run_as_uid >= 0) {
    j["run_as_uid"] = job.run_as_uid;
    j["run_as_gid"] = job.run_as_gid;
  }
  return j;
}

Result<Job> JobFromJson(const json& j) { return Guarded("job", JobFromJsonOrThrow, j); }

ojson ToJson(const Node& node) {
  ojson j = ojson::object();
  j["name"] = node.name;
  j["labels"] = node.labels;
  ojson gpus = ojson::array();
  for (const Gpu& g : node.gpus) gpus.push_back(GpuToJson(g));
  j["gpus"] = std::move(gpus);
  j["milli_cpus"] = node.milli_cpus;
  j["memory_bytes"] = node.memory_bytes;
  j["topology"] = ojson{{"spine", node.topology.spine}, {"leaf", node.topology.leaf}};
  j["state"] = std::string(NodeStateName(node.state));
  j["state_reason"] = node.state_reason;
  return j;
}

Result<Node> NodeFromJson(const json& j) { return Guarded("node", NodeFromJsonOrThrow, j); }

ojson ToJson(const Tenant& tenant) {
  ojson j = ojson::object();
  j["name"] = tenant.name;
  j["description"] = tenant.description;
  j["guaranteed_gpus"] = tenant.guaranteed_gpus;
  j["limit_gpus"] = tenant.limit_gpus;
  if (tenant.run_as_uid >= 0) {
    j["run_as_uid"] = tenant.run_as_uid;
    j["run_as_gid"] = tenant.run_as_gid;
  }
  if (tenant.allow_root) j["allow_root"] = true;
  return j;
}

Result<Tenant> TenantFromJson(const json& j) { return Guarded("tenant", TenantFromJsonOrThrow, j); }

ojson ToJson(const Queue& queue) {
  ojson j = ojson::object();
  j["name"] = queue.name;
  j["tenant"] = queue.tenant;
  j["parent"] = queue.parent;
  j["guaranteed_gpus"] = queue.guaranteed_gpus;
  j["limit_gpus"] = queue.limit_gpus;
  j["weight"] = queue.weight;
  return j;
}

Result<Queue> QueueFromJson(const json& j) { return Guarded("queue", QueueFromJsonOrThrow, j); }

ojson ToJson(const PriorityClass& priority_class) {
  ojson j = ojson::object();
  j["name"] = priority_class.name;
  j["value"] = priority_class.value;
  j["preemptible"] = priority_class.preemptible;
  return j;
}

Result<PriorityClass> PriorityClassFromJson(const json& j) {
  return Guarded("priority_class", PriorityClassFromJsonOrThrow, j);
}

ojson ToJson(const User& user) {
  ojson j = ojson::object();
  j["name"] = user.name;
  j["tenant"] = user.tenant;
  j["role"] = std::string(RoleName(user.role));
  j["priority_classes"] = user.priority_classes;
  j["created_ms"] = Millis(user.created);
  j["created_by"] = user.created_by;
  if (user.run_as_uid >= 0) {
    j["run_as_uid"] = user.run_as_uid;
    j["run_as_gid"] = user.run_as_gid;
  }
  return j;
}

Result<User> UserFromJson(const json& j) { return Guarded("user", UserFromJsonOrThrow, j); }

ojson ToJson(const ApiToken& token) {
  ojson j = ojson::object();
  j["id"] = token.id;
  j["user"] = token.user;
  j["secret_hash"] = token.secret_hash;
  j["description"] = token.description;
  j["created_ms"] = Millis(token.created);
  j["expires_ms"] = token.expires ? ojson(Millis(*token.expires)) : ojson(nullptr);
  j["revoked_ms"] = token.revoked ? ojson(Millis(*token.revoked)) : ojson(nullptr);
  return j;
}

ojson ToJson(const Dataset& d) {
  ojson j = ojson::object();
  j["name"] = d.name;
  j["tenant"] = d.tenant;
  j["source"] = d.source;
  j["description"] = d.description;
  j["created_ms"] = Millis(d.created);
  j["created_by"] = d.created_by;
  ojson versions = ojson::array();
  for (const DatasetVersion& v : d.versions) {
    versions.push_back(ojson{{"version", v.version},
                             {"files", v.files},
                             {"bytes", v.bytes},
                             {"registered_ms", Millis(v.registered)},
                             {"registered_by", v.registered_by}});
  }
  j["versions"] = std::move(versions);
  return j;
}

Result<Dataset> DatasetFromJson(const json& j) {
  return Guarded("dataset", DatasetFromJsonOrThrow, j);
}

Result<ApiToken> ApiTokenFromJson(const json& j) {
  return Guarded("api_token", ApiTokenFromJsonOrThrow, j);
}

ojson ToJson(const AuditEntry& entry) {
  ojson j = ojson::object();
  j["seq"] = entry.seq;
  j["time_ms"] = Millis(entry.time);
  j["actor"] = entry.actor;
  j["token_id"] = entry.token_id;
  j["tenant"] = entry.tenant;
  j["action"] = entry.action;
  j["object"] = entry.object;
  j["source"] = entry.source;
  j["status"] = entry.status;
  j["message"] = entry.message;
  return j;
}

Result<AuditEntry> AuditEntryFromJson(const json& j) {
  return Guarded("audit_entry", AuditEntryFromJsonOrThrow, j);
}

}  // namespace trainyard
