// DatasetRegistry: the datasets of the cluster and their versions (core/dataset.h,
// docs/datasets.md), kept in memory and written through the Store before any change
// is acknowledged; the manifests of versions are read from the store on demand.
//
// A dataset belongs to a tenant: its members register versions of it and its jobs read
// it; a cluster admin may register cluster-wide datasets (no tenant) that every
// tenant's jobs read. A version is registered by handing in its manifest (computed
// where the source is readable: `trainyard datasets register` hashes the files); the
// registry checks the manifest's text and names the version by its content, so
// registering the same content again is a no-op that answers the same version.
//
// Resolve fills in a job spec's `data:` at submission: "latest" becomes the version
// it names now, and every entry gets the dataset's source, so a stored job names
// exactly what it read.
//
// Thread-safety: every method may be called from any thread. Readers take a short
// lock over the in-memory map and never wait on store I/O; writers are serialised by
// a lock of their own that is held across the commit.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/auth.h"
#include "core/dataset.h"
#include "core/job_spec.h"
#include "core/status.h"
#include "server/clock.h"
#include "store/store.h"

namespace trainyard::server {

struct RegisterDataset {
  std::string name;
  // Whose: empty means the caller's tenant (a cluster admin's: cluster-wide).
  std::optional<std::string> tenant;
  std::string source;  // must equal the dataset's when it exists
  std::string description;
  std::string manifest;  // data/manifest.h's text
};

struct Registered {
  Dataset dataset;
  DatasetVersion version;
  bool new_version = false;  // false: that content was registered before
};

class DatasetRegistry {
 public:
  // Loads the datasets from `store`. `store` and `clock` outlive this object.
  static Result<std::unique_ptr<DatasetRegistry>> Open(store::Store* store, const Clock* clock);

  Result<Registered> Register(const Principal& caller, const RegisterDataset& request);
  // Those the caller may see (its tenant's and the cluster-wide ones; all for an admin).
  std::vector<Dataset> List(const Principal& caller) const;
  Result<Dataset> Get(const Principal& caller, const std::string& name) const;
  // The manifest text of `version` ("latest" or "sha256:...") of `name`.
  Result<std::string> Manifest(const Principal& caller, const std::string& name,
                               const std::string& version) const;
  // The manifest of `version` ("sha256:..."), for an agent that stages it: NotFound
  // when no manifest is kept under it.
  Result<std::string> ManifestOfVersion(const std::string& version) const;
  // Deletes a dataset (its tenant's admins, cluster admins). Versions' manifests stay
  // in the store (jobs that ran on them still name them).
  Status Delete(const Principal& caller, const std::string& name);

  // Resolves every spec's data entries (see above), for jobs of `spec.tenant`. Errors
  // name the spec's index when there are several, the entry, the dataset and version,
  // and what exists.
  Status Resolve(std::vector<JobSpec>& specs) const;

 private:
  DatasetRegistry(store::Store* store, const Clock* clock) : store_(store), clock_(clock) {}
  Result<Dataset> VisibleLocked(const Principal& caller, const std::string& name) const;

  store::Store* store_;
  const Clock* clock_;
  std::mutex write_mu_;  // serialises writers (held across their commit)
  mutable std::mutex mu_;
  std::map<std::string, Dataset> datasets_;  // GUARDED_BY(mu_)
};

}  // namespace trainyard::server
