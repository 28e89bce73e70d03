#include "server/api/nodes.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/codec.h"
#include "core/names.h"
#include "monitor/webhook.h"
#include "server/api/request.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::json;
using nlohmann::ordered_json;

Result<FaultRequest> ParseFaultRequest(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "fault"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "fault", {"kind", "gpu", "duration"}));
  FaultRequest f;
  auto kind = j.find("kind");
  if (kind == j.end() || !kind->is_string()) {
    return InvalidArgument(
        "fault.kind: required, one of xid, ecc, thermal, link-down, slow, "
        "hang, data-stall, loss-nan, grad-spike");
  }
  f.kind = kind->get<std::string>();
  if (!IsFaultKind(f.kind)) {
    return InvalidArgument("fault.kind: unknown fault kind " + QuoteForMessage(f.kind) +
                           "; one of xid, ecc, thermal, link-down, slow, hang, data-stall, "
                           "loss-nan, grad-spike");
  }
  if (auto gpu = j.find("gpu"); gpu != j.end() && !gpu->is_null()) {
    if (!gpu->is_number_integer() || gpu->get<int64_t>() < -1 || gpu->get<int64_t>() > 1023) {
      return InvalidArgument(
          "fault.gpu: expected a GPU index (0..1023) or -1 for the whole node, "
          "got " +
          QuoteForMessage(gpu->dump()));
    }
    f.gpu = gpu->get<int>();
  }
  if (auto d = j.find("duration"); d != j.end() && !d->is_null()) {
    if (d->is_number_integer() && d->get<int64_t>() >= 0 && d->get<int64_t>() <= 7 * 86'400) {
      f.duration = std::chrono::seconds(d->get<int64_t>());
    } else if (d->is_string()) {
      auto parsed = ParseDuration(d->get<std::string>());
      if (!parsed.ok()) {
        return InvalidArgument("fault.duration: " + std::string(parsed.status().message()));
      }
      f.duration = *parsed;
    } else {
      return InvalidArgument(
          "fault.duration: expected a duration such as \"90s\" or a number "
          "of seconds from 0 to 604800 (7d), got " +
          QuoteForMessage(d->dump()));
    }
  }
  return f;
}

ordered_json RenderNode(const NodeView& v) {
  ordered_json j = ToJson(v.node);
  j["address"] = v.address;
  j["simulated"] = v.simulated;
  j["connected"] = v.connected;
  j["last_heartbeat_ms"] = v.last_heartbeat.time_since_epoch().count();
  j["gpus_total"] = v.node.gpus.size();
  j["gpus_used"] = v.gpus_used;
  j["gpu_type"] = v.node.gpus.empty() ? "" : v.node.gpus.front().model;
  j["jobs"] = v.jobs;
  // By GPU index: the job running on it, or null when it is free.
  ordered_json on_gpu = ordered_json::array();
  for (size_t g = 0; g < v.node.gpus.size(); ++g) {
    const JobId id = g < v.gpu_jobs.size() ? v.gpu_jobs[g] : 0;
    on_gpu.push_back(id == 0 ? ordered_json(nullptr) : ordered_json(id));
  }
  j["gpu_jobs"] = std::move(on_gpu);
  if (!v.telemetry.empty()) {
    ordered_json gpus = ordered_json::array();
    for (const GpuTelemetry& t : v.telemetry) {
      ordered_json g = {{"index", t.index}};
      for (auto [key, value] : {std::pair{"util_pct", t.util_pct},
                                {"mem_used_mib", t.mem_used_mib},
                                {"temp_c", t.temp_c},
                                {"power_w", t.power_w},
                                {"sm_clock_mhz", t.sm_clock_mhz},
                                {"ecc_uncorrectable", t.ecc_uncorrectable},
                                {"xid_last", t.xid_last},
                                {"xid_count", t.xid_count}}) {
        if (value) g[key] = *value;
      }
      if (t.throttled) g["throttled"] = *t.throttled;
      gpus.push_back(std::move(g));
    }
    j["telemetry"] = std::move(gpus);
  }
  if (!v.links.empty()) {
    ordered_json links = ordered_json::array();
    for (const LinkTelemetry& l : v.links) {
      links.push_back({{"name", l.name}, {"kind", l.kind}, {"up", l.up}, {"errors", l.errors}});
    }
    j["links"] = std::move(links);
  }
  if (!v.disks.empty()) {
    ordered_json disks = ordered_json::array();
    for (const DiskTelemetry& d : v.disks) {
      disks.push_back(
          {{"path", d.path}, {"free_bytes", d.free_bytes}, {"total_bytes", d.total_bytes}});
    }
    j["disks"] = std::move(disks);
  }
  if (!v.limits.empty()) j["limits"] = v.limits;
  if (!v.containers.empty()) j["containers"] = v.containers;
  if (v.health_check) {
    j["health_check"] = {{"ok", v.health_check->ok},
                         {"output", v.health_check->output},
                         {"at_ms", v.health_check->at_ms},
                         {"trigger", v.health_check->trigger}};
  }
  if (!v.faults.empty()) {
    ordered_json faults = ordered_json::array();
    for (const FaultSpec& f : v.faults) {
      faults.push_back({{"id", f.id}, {"kind", f.kind}, {"gpu", f.gpu}, {"until_ms", f.until_ms}});
    }
    j["faults"] = std::move(faults);
  }
  return j;
}

ordered_json RenderNodeFor(const NodeView& n, const Principal& who) {
  ordered_json j = RenderNode(n);
  if (who.role == Role::kClusterAdmin) return j;
  ordered_json jobs = ordered_json::array();
  for (size_t i = 0; i < n.jobs.size() && i < n.job_tenants.size(); ++i) {
    if (CanSeeTenant(who, n.job_tenants[i])) jobs.push_back(n.jobs[i]);
  }
  j["jobs"] = std::move(jobs);
  // A GPU busy with a job the caller may not see says so without the job's id.
  for (ordered_json& g : j["gpu_jobs"]) {
    if (g.is_null()) continue;
    const auto id = g.get<JobId>();
    auto at = std::find(n.jobs.begin(), n.jobs.end(), id);
    const size_t i = static_cast<size_t>(at - n.jobs.begin());
    if (i >= n.job_tenants.size() || !CanSeeTenant(who, n.job_tenants[i])) g = "hidden";
  }
  return j;
}

ordered_json RenderFault(const InjectedFault& f) {
  return {{"id", f.fault.id},
          {"node", f.node},
          {"kind", f.fault.kind},
          {"gpu", f.fault.gpu},
          {"until_ms", f.fault.until_ms},
          {"created", monitor::FormatRfc3339(f.created)},
          {"actor", f.actor}};
}

namespace {

// The node a request names (matches[1]), for a caller who must be a cluster admin to
// manage nodes; sets the call's object for the audit log.
Result<std::string> ManagedNode(const Request& req, Call& call) {
  const std::string name = req.matches[1].str();
  call.object = "node/" + name.substr(0, 128);
  TY_RETURN_IF_ERROR(Authorize(call.who, Action::kManageNodes, {}));
  return name;
}

Result<Reply> ListNodes(const ApiServices& s, const Request&, Call& call) {
  ordered_json nodes = ordered_json::array();
  for (const NodeView& n : s.cluster.ListNodes()) nodes.push_back(RenderNodeFor(n, call.who));
  return Reply::Json(200, ordered_json{{"nodes", std::move(nodes)}});
}

Result<Reply> GetNode(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(NodeView n, s.cluster.GetNode(req.matches[1].str()));
  return Reply::Json(200, RenderNodeFor(n, call.who));
}

Result<Reply> SetNodeState(const ApiServices& s, NodeState state, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(std::string name, ManagedNode(req, call));
  TY_RETURN_IF_ERROR(s.cluster.SetNodeAdminState(name, state, call.who.Actor()));
  TY_ASSIGN_OR_RETURN(NodeView n, s.cluster.GetNode(name));
  return Reply::Json(200, RenderNode(n));
}

Result<Reply> ListFaults(const ApiServices& s, const Request&, Call& call) {
  TY_RETURN_IF_ERROR(Authorize(call.who, Action::kManageNodes, {}));
  ordered_json out = ordered_json::array();
  for (const InjectedFault& f : s.cluster.ListFaults()) out.push_back(RenderFault(f));
  return Reply::Json(200, ordered_json{{"faults", std::move(out)}});
}

Result<Reply> InjectFault(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(std::string name, ManagedNode(req, call));
  TY_ASSIGN_OR_RETURN(FaultRequest f, ParseFaultRequest(req.body));
  TY_ASSIGN_OR_RETURN(InjectedFault injected,
                      s.cluster.InjectFault(name, f.kind, f.gpu, f.duration, call.who.Actor()));
  return Reply::Json(201, RenderFault(injected));
}

// DELETE /nodes/{name}/faults and /nodes/{name}/faults/{id}.
Result<Reply> ClearNodeFaults(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(std::string name, ManagedNode(req, call));
  TY_ASSIGN_OR_RETURN(
      int n, s.cluster.ClearFaults(name, req.matches.size() > 2 ? req.matches[2].str() : ""));
  return Reply::Json(200, ordered_json{{"cleared", n}});
}

Result<Reply> ClearAllFaults(const ApiServices& s, const Request&, Call& call) {
  TY_RETURN_IF_ERROR(Authorize(call.who, Action::kManageNodes, {}));
  TY_ASSIGN_OR_RETURN(int n, s.cluster.ClearFaults("", ""));
  return Reply::Json(200, ordered_json{{"cleared", n}});
}

}  // namespace

void InstallNodeRoutes(Routes& routes, const ApiServices& s) {
  routes.User("GET", V1("/nodes"), Action::kReadCluster, Bind(s, ListNodes));
  routes.User("GET", V1(R"(/nodes/([^/]+))"), Action::kReadCluster, Bind(s, GetNode));
  for (const auto& [verb, state] :
       std::vector<std::pair<std::string, NodeState>>{{"cordon", NodeState::kCordoned},
                                                      {"drain", NodeState::kDraining},
                                                      {"uncordon", NodeState::kReady}}) {
    routes.User(
        "POST", V1(R"(/nodes/([^/]+)/)" + verb), Action::kManageNodes,
        [s, to = state](const Request& req, Call& call) { return SetNodeState(s, to, req, call); });
  }
  routes.User("GET", V1("/faults"), Action::kManageNodes, Bind(s, ListFaults));
  routes.User("POST", V1(R"(/nodes/([^/]+)/faults)"), Action::kManageNodes, Bind(s, InjectFault));
  routes.User("DELETE", V1(R"(/nodes/([^/]+)/faults)"), Action::kManageNodes,
              Bind(s, ClearNodeFaults));
  routes.User("DELETE", V1(R"(/nodes/([^/]+)/faults/([^/]+))"), Action::kManageNodes,
              Bind(s, ClearNodeFaults));
  routes.User("DELETE", V1("/faults"), Action::kManageNodes, Bind(s, ClearAllFaults));
}

}  // namespace trainyard::server
