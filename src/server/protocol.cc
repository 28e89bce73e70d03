#include "server/protocol.h"

#include <csignal>
#include <set>

#include "core/names.h"
#include "core/resources.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string Show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 60) + "...";
  return std::string(v.type_name()) + " " + s;
}

// Reads optional fields of one object; a present field of the wrong type is an error.
class Fields {
 public:
  static Result<Fields> Open(const json& j, std::string path) {
    if (!j.is_object()) return InvalidArgument(path + ": expected an object, got " + Show(j));
    return Fields(j, std::move(path));
  }
  const json* Get(const char* key) const {
    auto it = j_->find(key);
    return it == j_->end() || it->is_null() ? nullptr : &*it;
  }
  std::string Path(const char* key) const { return path_ + "." + key; }
  Status Str(const char* key, std::string& out, bool required = false) const {
    const json* v = Get(key);
    if (v == nullptr) return required ? InvalidArgument(Path(key) + ": missing") : Status::Ok();
    if (!v->is_string()) return InvalidArgument(Path(key) + ": expected a string, got " + Show(*v));
    out = v->get<std::string>();
    return Status::Ok();
  }
  template <typename Int>
  Status Integer(const char* key, Int& out, bool required = false) const {
    const json* v = Get(key);
    if (v == nullptr) return required ? InvalidArgument(Path(key) + ": missing") : Status::Ok();
    if (!v->is_number_integer()) {
      return InvalidArgument(Path(key) + ": expected an integer, got " + Show(*v));
    }
    const int64_t x = v->get<int64_t>();
    if (x < std::numeric_limits<Int>::min() || x > std::numeric_limits<Int>::max()) {
      return InvalidArgument(Path(key) + ": out of range, got " + Show(*v));
    }
    out = static_cast<Int>(x);
    return Status::Ok();
  }
  Status Number(const char* key, double& out) const {
    const json* v = Get(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_number()) return InvalidArgument(Path(key) + ": expected a number, got " + Show(*v));
    out = v->get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool& out) const {
    const json* v = Get(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_boolean())
      return InvalidArgument(Path(key) + ": expected true or false, got " + Show(*v));
    out = v->get<bool>();
    return Status::Ok();
  }

 private:
  Fields(const json& j, std::string path) : j_(&j), path_(std::move(path)) {}
  const json* j_;
  std::string path_;
};

Result<TaskStatus> ParseTaskStatus(const json& j, const std::string& path) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, path));
  TaskStatus t;
  TY_RETURN_IF_ERROR(f.Str("task_id", t.task_id, true));
  TY_RETURN_IF_ERROR(f.Integer("job_id", t.job_id, true));
  TY_RETURN_IF_ERROR(f.Integer("attempt", t.attempt, true));
  TY_RETURN_IF_ERROR(f.Integer("rank", t.rank, true));
  TY_RETURN_IF_ERROR(f.Str("state", t.state, true));
  if (t.state != "starting" && t.state != "running" && t.state != "exited") {
    return InvalidArgument(f.Path("state") + ": expected starting, running or exited, got " +
                           QuoteForMessage(t.state));
  }
  TY_RETURN_IF_ERROR(f.Integer("pid", t.pid));
  TY_RETURN_IF_ERROR(f.Integer("started_ms", t.started_ms));
  TY_RETURN_IF_ERROR(f.Integer("finished_ms", t.finished_ms));
  TY_RETURN_IF_ERROR(f.Integer("exit_code", t.exit_code));
  TY_RETURN_IF_ERROR(f.Integer("signal", t.signal));
  TY_RETURN_IF_ERROR(f.Str("message", t.message));
  TY_RETURN_IF_ERROR(f.Bool("fenced", t.fenced));
  return t;
}

Result<std::vector<TaskStatus>> ParseTasks(const Fields& f) {
  std::vector<TaskStatus> out;
  const json* tasks = f.Get("tasks");
  if (tasks == nullptr) return out;
  if (!tasks->is_array()) {
    return InvalidArgument(f.Path("tasks") + ": expected a list, got " + Show(*tasks));
  }
  for (size_t i = 0; i < tasks->size(); ++i) {
    TY_ASSIGN_OR_RETURN(TaskStatus t, ParseTaskStatus((*tasks)[i], f.Path("tasks") + "[" +
                                                                       std::to_string(i) + "]"));
    out.push_back(std::move(t));
  }
  return out;
}

// A list field of at most `max` entries, each an object parsed by `one`.
template <typename T, typename F>
Status ObjectList(const Fields& f, const char* key, size_t max, std::vector<T>& out, F one) {
  const json* list = f.Get(key);
  if (list == nullptr) return Status::Ok();
  if (!list->is_array() || list->size() > max) {
    return InvalidArgument(f.Path(key) + ": expected a list of at most " + std::to_string(max) +
                           " objects, got " + Show(*list));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    TY_ASSIGN_OR_RETURN(Fields item,
                        Fields::Open((*list)[i], f.Path(key) + "[" + std::to_string(i) + "]"));
    T value;
    TY_RETURN_IF_ERROR(one(item, value));
    out.push_back(std::move(value));
  }
  return Status::Ok();
}

Result<std::optional<HealthCheckResult>> ParseHealthCheck(const Fields& f) {
  const json* hc = f.Get("health_check");
  if (hc == nullptr) return std::optional<HealthCheckResult>();
  TY_ASSIGN_OR_RETURN(Fields h, Fields::Open(*hc, f.Path("health_check")));
  HealthCheckResult r;
  if (const json* ok = h.Get("ok"); ok == nullptr) {
    return InvalidArgument(h.Path("ok") + ": missing");
  }
  TY_RETURN_IF_ERROR(h.Bool("ok", r.ok));
  TY_RETURN_IF_ERROR(h.Str("output", r.output));
  if (r.output.size() > 8192) r.output.resize(8192);
  TY_RETURN_IF_ERROR(h.Integer("at_ms", r.at_ms));
  TY_RETURN_IF_ERROR(h.Str("trigger", r.trigger));
  return std::optional<HealthCheckResult>(std::move(r));
}

}  // namespace

bool IsFaultKind(std::string_view kind) {
  for (std::string_view k : kFaultKinds) {
    if (k == kind) return true;
  }
  return false;
}

std::string TaskId(JobId job, int32_t attempt, int32_t rank) {
  return std::to_string(job) + "." + std::to_string(attempt) + "." + std::to_string(rank);
}

Result<Registration> ParseRegistration(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields top, Fields::Open(j, "register"));
  const json* node_json = top.Get("node");
  if (node_json == nullptr) return InvalidArgument("register.node: missing");
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(*node_json, "register.node"));
  Registration r;
  Node& n = r.node;
  TY_RETURN_IF_ERROR(f.Str("name", n.name, true));
  TY_RETURN_IF_ERROR(ValidateName("register.node.name", n.name));
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
  if (cpus < 0 || cpus > 1e6) {
    return InvalidArgument("register.node.cpus: must be 0..1000000, got " + std::to_string(cpus));
  }
  n.milli_cpus = static_cast<int64_t>(cpus * 1000);
  int64_t memory_mib = 0;
  TY_RETURN_IF_ERROR(f.Integer("memory_mib", memory_mib));
  if (memory_mib < 0 || memory_mib > (int64_t{1} << 40)) {
    return InvalidArgument("register.node.memory_mib: out of range, got " +
                           std::to_string(memory_mib));
  }
  n.memory_bytes = memory_mib * kMiB;
  if (const json* labels = f.Get("labels")) {
    if (!labels->is_object()) {
      return InvalidArgument("register.node.labels: expected an object, got " + Show(*labels));
    }
    for (const auto& [k, v] : labels->items()) {
      if (!v.is_string()) {
        return InvalidArgument("register.node.labels." + k + ": expected a string, got " + Show(v));
      }
      n.labels[k] = v.get<std::string>();
    }
  }
  if (const json* gpus = f.Get("gpus")) {
    if (!gpus->is_array()) {
      return InvalidArgument("register.node.gpus: expected a list, got " + Show(*gpus));
    }
    for (size_t i = 0; i < gpus->size(); ++i) {
      TY_ASSIGN_OR_RETURN(
          Fields g, Fields::Open((*gpus)[i], "register.node.gpus[" + std::to_string(i) + "]"));
      Gpu gpu;
      TY_RETURN_IF_ERROR(g.Integer("index", gpu.index, true));
      TY_RETURN_IF_ERROR(g.Str("uuid", gpu.uuid));
      int64_t mib = 0;
      TY_RETURN_IF_ERROR(g.Integer("memory_mib", mib));
      gpu.memory_bytes = mib * kMiB;
      gpu.model = NormalizeGpuType(gpu_type);
      gpu.nvlink_domain = nvlink_domain;
      n.gpus.push_back(std::move(gpu));
    }
  }
  TY_RETURN_IF_ERROR(ValidateNode(n));
  TY_ASSIGN_OR_RETURN(r.tasks, ParseTasks(top));
  TY_ASSIGN_OR_RETURN(r.health_check, ParseHealthCheck(top));
  return r;
}

Result<Heartbeat> ParseHeartbeat(const json& j) {
  TY_ASSIGN_OR_RETURN(Fields f, Fields::Open(j, "heartbeat"));
  Heartbeat h;
  TY_RETURN_IF_ERROR(f.Str("node", h.node, true));
  TY_RETURN_IF_ERROR(f.Integer("seq", h.seq));
  if (const json* health = f.Get("health")) {
    TY_ASSIGN_OR_RETURN(Fields hf, Fields::Open(*health, "heartbeat.health"));
    TY_RETURN_IF_ERROR(hf.Bool("ok", h.health_ok));
    TY_RETURN_IF_ERROR(hf.Str("message", h.health_message));
  }
  TY_ASSIGN_OR_RETURN(h.tasks, ParseTasks(f));
  if (const json* gpus = f.Get("gpus")) {
    if (!gpus->is_array() || gpus->size() > 1024) {
      return InvalidArgument("heartbeat.gpus: must be a list of at most 1024 samples");
    }
    std::set<int> seen;
    for (size_t i = 0; i < gpus->size(); ++i) {
      const json& g = (*gpus)[i];
      const std::string at = "heartbeat.gpus[" + std::to_string(i) + "]";
      if (!g.is_object()) return InvalidArgument(at + ": must be an object");
      GpuTelemetry t;
      auto index = g.find("index");
      if (index == g.end() || !index->is_number_integer() || index->get<int64_t>() < 0 ||
          index->get<int64_t>() > 1023) {
        return InvalidArgument(at + ".index: required, an integer 0..1023");
      }
      t.index = static_cast<int>(index->get<int64_t>());
      if (!seen.insert(t.index).second) {
        return InvalidArgument(at + ".index: GPU " + std::to_string(t.index) + " sampled twice");
      }
      // Values the agent could not read are left out; a value of the wrong type is an
      // error rather than silently dropped.
      for (auto [key, out] : {std::pair{"util_pct", &t.util_pct},
                              {"mem_used_mib", &t.mem_used_mib},
                              {"temp_c", &t.temp_c},
                              {"power_w", &t.power_w},
                              {"sm_clock_mhz", &t.sm_clock_mhz},
                              {"ecc_uncorrectable", &t.ecc_uncorrectable},
                              {"xid_last", &t.xid_last},
                              {"xid_count", &t.xid_count}}) {
        auto v = g.find(key);
        if (v == g.end() || v->is_null()) continue;
        if (!v->is_number()) return InvalidArgument(at + "." + key + ": must be a number");
        *out = v->get<double>();
      }
      if (auto v = g.find("throttled"); v != g.end() && !v->is_null()) {
        if (!v->is_boolean()) return InvalidArgument(at + ".throttled: must be true or false");
        t.throttled = v->get<bool>();
      }
      h.gpus.push_back(t);
    }
  }
  TY_RETURN_IF_ERROR(ObjectList(f, "links", 256, h.links, [](const Fields& l, LinkTelemetry& v) {
    TY_RETURN_IF_ERROR(l.Str("name", v.name, true));
    TY_RETURN_IF_ERROR(l.Str("kind", v.kind));
    TY_RETURN_IF_ERROR(l.Bool("up", v.up));
    TY_RETURN_IF_ERROR(l.Number("errors", v.errors));
    return Status::Ok();
  }));
  TY_RETURN_IF_ERROR(ObjectList(f, "disks", 64, h.disks, [](const Fields& d, DiskTelemetry& v) {
    TY_RETURN_IF_ERROR(d.Str("path", v.path, true));
    TY_RETURN_IF_ERROR(d.Number("free_bytes", v.free_bytes));
    TY_RETURN_IF_ERROR(d.Number("total_bytes", v.total_bytes));
    if (v.free_bytes < 0 || v.total_bytes < 0) {
      return InvalidArgument(d.Path("free_bytes") + ": sizes must be >= 0");
    }
    return Status::Ok();
  }));
  TY_ASSIGN_OR_RETURN(h.health_check, ParseHealthCheck(f));
  if (const json* faults = f.Get("faults")) {
    if (!faults->is_array() || faults->size() > 1024) {
      return InvalidArgument(f.Path("faults") + ": expected a list of at most 1024 ids");
    }
    for (const json& id : *faults) {
      if (!id.is_string()) return InvalidArgument(f.Path("faults") + ": ids must be strings");
      h.faults.push_back(id.get<std::string>());
    }
  }
  return h;
}

ordered_json ToJson(const Command& c) {
  switch (c.kind) {
    case Command::Kind::kStart: {
      const TaskStart& t = c.start;
      ordered_json task = {{"task_id", t.task_id}, {"job_id", t.job_id}, {"attempt", t.attempt},
                           {"rank", t.rank},       {"argv", t.argv},     {"env", t.env},
                           {"workdir", t.workdir}, {"gpus", t.gpus}};
      if (!t.secret_env.empty()) task["secret_env"] = t.secret_env;
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
      for (const FaultSpec& f : c.faults) {
        faults.push_back({{"id", f.id},
                          {"kind", f.kind},
                          {"gpu", f.gpu},
                          {"until_ms", f.until_ms},
                          {"job_id", f.job_id}});
      }
      return {{"kind", "faults"}, {"faults", std::move(faults)}};
    }
    case Command::Kind::kCheckpoint:
      return {{"kind", "checkpoint"}, {"task_id", c.task_id}};
  }
  return {};
}

}  // namespace trainyard::server
