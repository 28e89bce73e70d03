#include "server/api/tenancy.h"

#include <utility>

#include "core/codec.h"
#include "core/names.h"
#include "server/api/request.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// The two GPU counts both bodies carry, both required.
Status ReadGpuCounts(const json& j, std::string_view what, int64_t& guaranteed, int64_t& limit) {
  for (auto [key, out] :
       {std::pair{"guaranteed_gpus", &guaranteed}, std::pair{"limit_gpus", &limit}}) {
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> v, IntField(j, what, key));
    if (!v) return InvalidArgument(std::string(what) + "." + key + ": required, an integer");
    *out = *v;
  }
  return Status::Ok();
}

}  // namespace

Result<TenantQuota> ParseTenantQuota(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "tenant"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "tenant", {"guaranteed_gpus", "limit_gpus"}));
  TenantQuota q;
  TY_RETURN_IF_ERROR(ReadGpuCounts(j, "tenant", q.guaranteed_gpus, q.limit_gpus));
  return q;
}

Result<TenantIdentity> ParseTenantIdentity(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "tenant"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "tenant", {"run_as", "allow_root"}));
  TenantIdentity id;
  auto run_as = j.find("run_as");
  if (run_as == j.end())
    return InvalidArgument(
        "tenant.run_as: required (\"UID:GID\", or \"\" for none: the agents' --unmapped-run-as)");
  const std::string want = "\"UID:GID\" (decimal ids, 0.." + std::to_string(kMaxUnixId) +
                           "), or \"\" for none (the agents' --unmapped-run-as)";
  if (!run_as->is_string())
    return InvalidArgument("tenant.run_as: must be " + want + ", got " + run_as->dump());
  const std::string text = run_as->get<std::string>();
  if (!text.empty() && !ParseUnixIds(text, id.uid, id.gid)) {
    return InvalidArgument("tenant.run_as: must be " + want + ", got \"" + text + "\"");
  }
  if (auto root = j.find("allow_root"); root != j.end()) {
    if (!root->is_boolean())
      return InvalidArgument("tenant.allow_root: must be true or false, got " + root->dump());
    id.allow_root = root->get<bool>();
  }
  return id;
}

Result<Queue> ParseQueue(std::string_view body, const std::string& tenant,
                         const std::string& name) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "queue"));
  TY_RETURN_IF_ERROR(
      CheckBodyKeys(j, "queue", {"guaranteed_gpus", "limit_gpus", "weight", "parent"}));
  Queue q;
  q.tenant = tenant;
  q.name = name;
  TY_RETURN_IF_ERROR(ReadGpuCounts(j, "queue", q.guaranteed_gpus, q.limit_gpus));
  if (auto w = j.find("weight"); w != j.end() && !w->is_null()) {
    if (!w->is_number()) {
      return InvalidArgument("queue.weight: expected a number, got " + w->dump());
    }
    q.weight = w->get<double>();
  }
  if (auto p = j.find("parent"); p != j.end() && !p->is_null()) {
    if (!p->is_string())
      return InvalidArgument("queue.parent: expected a string, got " + p->dump());
    q.parent = p->get<std::string>();
  }
  TY_RETURN_IF_ERROR(ValidateQueue(q));
  return q;
}

ordered_json RenderTenant(const Tenant& t) { return ToJson(t); }

ordered_json RenderQueue(const QueueView& v) {
  ordered_json j = ToJson(v.queue);
  j["gpus_in_use"] = v.gpus_in_use;
  j["gpus_borrowed"] = v.gpus_borrowed;
  j["pending_jobs"] = v.pending_jobs;
  j["running_jobs"] = v.running_jobs;
  return j;
}

namespace {

Result<Reply> ListQueues(const ApiServices& s, const Request&, Call&) {
  ordered_json queues = ordered_json::array();
  for (const QueueView& q : s.cluster.ListQueues()) queues.push_back(RenderQueue(q));
  return Reply::Json(200, ordered_json{{"queues", std::move(queues)}});
}

Result<Reply> ListTenants(const ApiServices& s, const Request&, Call&) {
  ordered_json tenants = ordered_json::array();
  for (const Tenant& t : s.cluster.ListTenants()) tenants.push_back(RenderTenant(t));
  return Reply::Json(200, ordered_json{{"tenants", std::move(tenants)}});
}

// The tenant a request names (match 1), if the caller may manage tenants; sets the
// call's object and tenant for the audit log.
Result<std::string> ManagedTenant(const Request& req, Call& call) {
  std::string name = req.matches[1].str();
  call.object = "tenant/" + name.substr(0, 63);
  call.tenant = name.substr(0, 63);
  TY_RETURN_IF_ERROR(Authorize(call.who, Action::kManageTenants, {name}));
  TY_RETURN_IF_ERROR(ValidateName("tenant", name));
  return name;
}

Result<Reply> SetQuota(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(std::string name, ManagedTenant(req, call));
  TY_ASSIGN_OR_RETURN(TenantQuota quota, ParseTenantQuota(req.body));
  TY_ASSIGN_OR_RETURN(Tenant t, s.cluster.SetTenantQuota(name, quota.guaranteed_gpus,
                                                         quota.limit_gpus, call.who.Actor()));
  return Reply::Json(200, RenderTenant(t));
}

Result<Reply> SetRunAs(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(std::string name, ManagedTenant(req, call));
  TY_ASSIGN_OR_RETURN(TenantIdentity id, ParseTenantIdentity(req.body));
  TY_ASSIGN_OR_RETURN(
      Tenant t, s.cluster.SetTenantIdentity(name, id.uid, id.gid, id.allow_root, call.who.Actor()));
  return Reply::Json(200, RenderTenant(t));
}

// The queue a request names (matches 1 and 2), if the caller may manage its tenant's
// queues; sets the call's object and tenant for the audit log.
Status ManagedQueue(const Request& req, Call& call) {
  const std::string tenant = req.matches[1].str(), name = req.matches[2].str();
  call.object = "queue/" + tenant.substr(0, 63) + "/" + name.substr(0, 63);
  call.tenant = tenant.substr(0, 63);
  TY_RETURN_IF_ERROR(Authorize(call.who, Action::kManageQueues, {tenant}));
  TY_RETURN_IF_ERROR(ValidateName("tenant", tenant));
  return ValidateName("queue", name);
}

Result<Reply> PutQueue(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(ManagedQueue(req, call));
  TY_ASSIGN_OR_RETURN(Queue q, ParseQueue(req.body, req.matches[1].str(), req.matches[2].str()));
  bool existed = false;
  for (const QueueView& v : s.cluster.ListQueues()) {
    existed = existed || (v.queue.tenant == q.tenant && v.queue.name == q.name);
  }
  TY_ASSIGN_OR_RETURN(Queue put, s.cluster.PutQueue(q, call.who.Actor()));
  return Reply::Json(existed ? 200 : 201, ToJson(put));
}

Result<Reply> DeleteQueue(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(ManagedQueue(req, call));
  const std::string tenant = req.matches[1].str(), name = req.matches[2].str();
  TY_RETURN_IF_ERROR(s.cluster.DeleteQueue(tenant, name, call.who.Actor()));
  return Reply::Json(200, ordered_json{{"deleted", tenant + "/" + name}});
}

Result<Reply> ListPriorityClasses(const ApiServices& s, const Request&, Call&) {
  ordered_json classes = ordered_json::array();
  for (const PriorityClass& pc : s.cluster.ListPriorityClasses()) classes.push_back(ToJson(pc));
  return Reply::Json(200, ordered_json{{"priority_classes", std::move(classes)}});
}

}  // namespace

void InstallTenancyRoutes(Routes& routes, const ApiServices& s) {
  routes.User("GET", V1("/queues"), Action::kReadCluster, Bind(s, ListQueues));
  routes.User("GET", V1("/tenants"), Action::kReadCluster, Bind(s, ListTenants));
  routes.User("PUT", V1(R"(/tenants/([^/]+)/quota)"), Action::kManageTenants, Bind(s, SetQuota));
  routes.User("PUT", V1(R"(/tenants/([^/]+)/run-as)"), Action::kManageTenants, Bind(s, SetRunAs));
  routes.User("PUT", V1(R"(/queues/([^/]+)/([^/]+))"), Action::kManageQueues, Bind(s, PutQueue));
  routes.User("DELETE", V1(R"(/queues/([^/]+)/([^/]+))"), Action::kManageQueues,
              Bind(s, DeleteQueue));
  routes.User("GET", V1("/priority-classes"), Action::kReadCluster, Bind(s, ListPriorityClasses));
}

}  // namespace trainyard::server
