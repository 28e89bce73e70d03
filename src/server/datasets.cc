#include "server/datasets.h"

#include <utility>

#include "core/names.h"
#include "data/manifest.h"
#include "store/write_batch.h"

namespace trainyard::server {
namespace {

// What exists, for "no such version" messages: the newest few.
std::string VersionsHint(const Dataset& d) {
  if (d.versions.empty()) return "it has no versions yet";
  std::string out = "it has " + std::to_string(d.versions.size()) + " version(s), newest ";
  const size_t shown = std::min<size_t>(d.versions.size(), 3);
  for (size_t i = 0; i < shown; ++i) {
    if (i) out += ", ";
    out += d.versions[d.versions.size() - 1 - i].version;
  }
  return out + " (trainyard datasets show " + d.name + ")";
}

}  // namespace

Result<std::unique_ptr<DatasetRegistry>> DatasetRegistry::Open(store::Store* store,
                                                               const Clock* clock) {
  std::unique_ptr<DatasetRegistry> r(new DatasetRegistry(store, clock));
  TY_ASSIGN_OR_RETURN(std::vector<Dataset> all, store->ListDatasets());
  for (Dataset& d : all) r->datasets_[d.name] = std::move(d);
  return r;
}

Result<Registered> DatasetRegistry::Register(const Principal& caller,
                                             const RegisterDataset& request) {
  TY_RETURN_IF_ERROR(ValidateName("dataset.name", request.name));
  TY_RETURN_IF_ERROR(ValidateDatasetSource(request.source));
  const std::string tenant = request.tenant                       ? *request.tenant
                             : caller.role == Role::kClusterAdmin ? std::string()
                                                                  : caller.tenant;
  TY_RETURN_IF_ERROR(tenant.empty() ? Authorize(caller, Action::kManageTenants, {})
                                    : Authorize(caller, Action::kSubmitJobs, {tenant}));
  TY_ASSIGN_OR_RETURN(data::Manifest manifest, data::ParseManifest(request.manifest));
  DatasetVersion version;
  version.version = manifest.Version();
  version.files = static_cast<int64_t>(manifest.entries.size());
  version.bytes = manifest.total_bytes;
  version.registered = clock_->Now();
  version.registered_by = caller.Actor();

  std::lock_guard writer(write_mu_);
  Dataset d;
  {
    std::lock_guard lk(mu_);
    if (auto it = datasets_.find(request.name); it != datasets_.end()) d = it->second;
  }
  if (d.name.empty()) {
    d.name = request.name;
    d.tenant = tenant;
    d.source = request.source;
    d.created = version.registered;
    d.created_by = caller.Actor();
  } else {
    if (d.tenant != tenant) {
      // Not visible to the caller: say only that the name is taken.
      if (!CanSeeTenant(caller, d.tenant) && !d.tenant.empty()) {
        return AlreadyExists("dataset " + QuoteForMessage(d.name) +
                             " exists in another tenant; pick another name");
      }
      return InvalidArgument(
          "dataset " + d.name + " belongs to " +
          (d.tenant.empty() ? std::string("no tenant (cluster-wide)")
                            : "tenant " + QuoteForMessage(d.tenant)) +
          ", not " + (tenant.empty() ? std::string("cluster-wide") : QuoteForMessage(tenant)));
    }
    if (d.source != request.source) {
      return InvalidArgument("dataset " + d.name + ": source is " + QuoteForMessage(d.source) +
                             ", not " + QuoteForMessage(request.source) +
                             "; a dataset's versions come from one source (register another "
                             "dataset for another source)");
    }
  }
  if (!request.description.empty()) d.description = request.description;
  if (const DatasetVersion* known = d.Find(version.version)) {
    return Registered{d, *known, false};
  }
  d.versions.push_back(version);
  if (d.versions.size() > kMaxDatasetVersions) d.versions.erase(d.versions.begin());
  TY_RETURN_IF_ERROR(ValidateDataset(d));
  store::WriteBatch batch;
  batch.PutManifest(version.version, request.manifest);
  batch.PutDataset(d);
  TY_RETURN_IF_ERROR(store_->Commit(batch));
  {
    std::lock_guard lk(mu_);
    datasets_[d.name] = d;
  }
  return Registered{std::move(d), std::move(version), true};
}

std::vector<Dataset> DatasetRegistry::List(const Principal& caller) const {
  std::lock_guard lk(mu_);
  std::vector<Dataset> out;
  for (const auto& [name, d] : datasets_) {
    if (d.tenant.empty() || CanSeeTenant(caller, d.tenant)) out.push_back(d);
  }
  return out;
}

Result<Dataset> DatasetRegistry::VisibleLocked(const Principal& caller,
                                               const std::string& name) const {
  auto it = datasets_.find(name);
  if (it == datasets_.end() ||
      !(it->second.tenant.empty() || CanSeeTenant(caller, it->second.tenant))) {
    return NotFound("no dataset " + QuoteForMessage(name) +
                    " (trainyard datasets ls lists those you may use)");
  }
  return it->second;
}

Result<Dataset> DatasetRegistry::Get(const Principal& caller, const std::string& name) const {
  std::lock_guard lk(mu_);
  return VisibleLocked(caller, name);
}

Result<std::string> DatasetRegistry::Manifest(const Principal& caller, const std::string& name,
                                              const std::string& version) const {
  std::string want;
  {
    std::lock_guard lk(mu_);
    TY_ASSIGN_OR_RETURN(Dataset d, VisibleLocked(caller, name));
    const DatasetVersion* v = d.Find(version);
    if (v == nullptr) {
      return NotFound("dataset " + name + " has no version " + QuoteForMessage(version) + "; " +
                      VersionsHint(d));
    }
    want = v->version;
  }
  TY_ASSIGN_OR_RETURN(std::optional<std::string> text, store_->GetManifest(want));
  if (!text) return DataLoss("dataset " + name + ": the manifest of " + want + " is not stored");
  return std::move(*text);
}

Result<std::string> DatasetRegistry::ManifestOfVersion(const std::string& version) const {
  if (!IsContentVersion(version)) {
    return InvalidArgument("manifest.version: must be sha256:<64 hex>, got " +
                           QuoteForMessage(version));
  }
  TY_ASSIGN_OR_RETURN(std::optional<std::string> text, store_->GetManifest(version));
  if (!text) return NotFound("no manifest of dataset version " + version);
  return std::move(*text);
}

Status DatasetRegistry::Delete(const Principal& caller, const std::string& name) {
  std::lock_guard writer(write_mu_);
  Dataset d;
  {
    std::lock_guard lk(mu_);
    TY_ASSIGN_OR_RETURN(d, VisibleLocked(caller, name));
  }
  TY_RETURN_IF_ERROR(d.tenant.empty() ? Authorize(caller, Action::kManageTenants, {})
                                      : Authorize(caller, Action::kManageQueues, {d.tenant}));
  store::WriteBatch batch;
  batch.DeleteDataset(name);
  TY_RETURN_IF_ERROR(store_->Commit(batch));
  std::lock_guard lk(mu_);
  datasets_.erase(name);
  return Status::Ok();
}

Status DatasetRegistry::Resolve(std::vector<JobSpec>& specs) const {
  std::lock_guard lk(mu_);
  for (size_t s = 0; s < specs.size(); ++s) {
    JobSpec& spec = specs[s];
    const std::string job = specs.size() > 1 ? "job " + std::to_string(s) + ": " : "";
    for (size_t i = 0; i < spec.data.size(); ++i) {
      DataSpec& entry = spec.data[i];
      const std::string f = job + "data[" + std::to_string(i) + "]";
      auto it = datasets_.find(entry.dataset);
      if (it == datasets_.end() ||
          !(it->second.tenant.empty() || it->second.tenant == spec.tenant)) {
        return NotFound(f + ".dataset: no dataset " + QuoteForMessage(entry.dataset) +
                        " that jobs of tenant " + QuoteForMessage(spec.tenant) +
                        " may read (trainyard datasets ls; register it with trainyard datasets "
                        "register " +
                        entry.dataset + " --source DIR)");
      }
      const Dataset& d = it->second;
      const DatasetVersion* v = d.Find(entry.version);
      if (v == nullptr) {
        return NotFound(f + ".version: dataset " + d.name + " has no version " +
                        QuoteForMessage(entry.version) + "; " + VersionsHint(d));
      }
      if (!d.source.starts_with("/")) {
        return FailedPrecondition(f + ".dataset: dataset " + d.name + " is read from " +
                                  QuoteForMessage(d.source) +
                                  ", and the agents have no fetcher for it yet: only sources on "
                                  "a file system every node mounts can be read by jobs");
      }
      entry.version = v->version;
      entry.source = d.source;
    }
  }
  return Status::Ok();
}

}  // namespace trainyard::server
