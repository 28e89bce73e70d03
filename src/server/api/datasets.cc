#include "server/api/datasets.h"

#include <string>

#include "core/names.h"
#include "server/api/request.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

Result<DatasetRegistry*> Registry(const ApiServices& s) {
  if (s.datasets == nullptr) return Unavailable("datasets are not kept by this server");
  return s.datasets;
}

Result<Reply> ListDatasets(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(CheckParams(req.params, {}));
  TY_ASSIGN_OR_RETURN(DatasetRegistry * r, Registry(s));
  ordered_json out = ordered_json::array();
  for (const Dataset& d : r->List(call.who)) out.push_back(RenderDataset(d));
  return Reply::Json(200, ordered_json{{"datasets", std::move(out)}});
}

Result<Reply> RegisterVersion(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(DatasetRegistry * r, Registry(s));
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(req.body, "dataset"));
  TY_RETURN_IF_ERROR(
      CheckBodyKeys(j, "dataset", {"name", "tenant", "source", "description", "manifest"}));
  auto name = StringField(j, "dataset", "name", 63);
  auto tenant = StringField(j, "dataset", "tenant", 63);
  auto source = StringField(j, "dataset", "source", 4096);
  auto description = StringField(j, "dataset", "description", 1024);
  for (const Status& st : {name.status(), tenant.status(), source.status(), description.status()}) {
    TY_RETURN_IF_ERROR(st);
  }
  if (!*name) return InvalidArgument("dataset.name: required");
  if (!*source) return InvalidArgument("dataset.source: required");
  auto manifest = j.find("manifest");
  if (manifest == j.end() || !manifest->is_string()) {
    return InvalidArgument(
        "dataset.manifest: required: the version's manifest as text (trainyard datasets "
        "register computes it)");
  }
  RegisterDataset request{**name, *tenant, **source, description->value_or(""),
                          manifest->get<std::string>()};
  call.object = "dataset/" + request.name;
  TY_ASSIGN_OR_RETURN(Registered done, r->Register(call.who, request));
  call.tenant = done.dataset.tenant;
  ordered_json out = RenderDataset(done.dataset);
  out["version"] = done.version.version;
  out["new_version"] = done.new_version;
  return Reply::Json(done.new_version ? 201 : 200, out);
}

Result<Reply> GetDataset(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(CheckParams(req.params, {}));
  TY_ASSIGN_OR_RETURN(DatasetRegistry * r, Registry(s));
  TY_ASSIGN_OR_RETURN(Dataset d, r->Get(call.who, req.matches[1].str()));
  return Reply::Json(200, RenderDataset(d));
}

Result<Reply> GetManifest(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(CheckParams(req.params, {"version"}));
  TY_ASSIGN_OR_RETURN(DatasetRegistry * r, Registry(s));
  const std::string version = Param(req.params, "version").value_or(std::string(kLatestVersion));
  TY_ASSIGN_OR_RETURN(std::string text, r->Manifest(call.who, req.matches[1].str(), version));
  return Reply{200, std::move(text), "text/plain; charset=utf-8", {}};
}

Result<Reply> DeleteDataset(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(DatasetRegistry * r, Registry(s));
  const std::string name = req.matches[1].str();
  call.object = "dataset/" + name.substr(0, 63);
  TY_RETURN_IF_ERROR(r->Delete(call.who, name));
  return Reply::Json(200, ordered_json{{"deleted", name}});
}

}  // namespace

ordered_json RenderDataset(const Dataset& d) {
  ordered_json versions = ordered_json::array();
  for (const DatasetVersion& v : d.versions) {
    versions.push_back(ordered_json{{"version", v.version},
                                    {"files", v.files},
                                    {"bytes", v.bytes},
                                    {"registered_ms", v.registered.time_since_epoch().count()},
                                    {"registered_by", v.registered_by}});
  }
  return {{"name", d.name},
          {"tenant", d.tenant.empty() ? ordered_json(nullptr) : ordered_json(d.tenant)},
          {"source", d.source},
          {"description", d.description},
          {"created_ms", d.created.time_since_epoch().count()},
          {"created_by", d.created_by},
          {"latest",
           d.versions.empty() ? ordered_json(nullptr) : ordered_json(d.versions.back().version)},
          {"versions", std::move(versions)}};
}

void InstallDatasetRoutes(Routes& routes, const ApiServices& s) {
  // Reads are filtered by tenant in the registry; writes are authorised there too (who
  // may register depends on the dataset's tenant, which the body names).
  routes.User("GET", V1("/datasets"), Action::kReadCluster, Bind(s, ListDatasets));
  routes.User("POST", V1("/datasets"), Action::kSubmitJobs, Bind(s, RegisterVersion));
  routes.User("GET", V1("/datasets/([^/]+)"), Action::kReadCluster, Bind(s, GetDataset));
  routes.User("GET", V1("/datasets/([^/]+)/manifest"), Action::kReadCluster, Bind(s, GetManifest));
  routes.User("DELETE", V1("/datasets/([^/]+)"), Action::kManageQueues, Bind(s, DeleteDataset));
}

}  // namespace trainyard::server
