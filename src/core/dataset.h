// Datasets (docs/datasets.md): named data with versions identified by content.
//
// A dataset has a source (a directory on storage every node can read: a shared file
// system or an NFS mount; an "s3://bucket/prefix" URL is accepted by name, fetched by a
// pluggable fetcher) and versions. A version is the SHA-256 of the manifest of every
// file under the source ("sha256:<64 hex>", data/manifest.h): the same bytes under the
// same paths are the same version, whoever registered them and when.
//
// A job names the data it reads in its spec (`data:`, DataSpec in job_spec.h); the
// server resolves `version: latest` to a version at submission, so the stored spec, the
// run and `runs rerun` name exactly the data the job read.
//
// Pure types and checks: no I/O, no clock. Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace trainyard {

// One registered version: its manifest lives in the store under `version`.
struct DatasetVersion {
  std::string version;  // "sha256:<64 hex>"
  int64_t files = 0;
  int64_t bytes = 0;
  Timestamp registered{};
  std::string registered_by;  // "user:alice"

  bool operator==(const DatasetVersion&) const = default;
};

struct Dataset {
  std::string name;    // a name (core/names.h: 1 to 63 of A-Z a-z 0-9 . _ -)
  std::string tenant;  // whose it is; its jobs (and cluster admins) use it
  std::string source;  // an absolute path, or s3://bucket[/prefix]
  std::string description;
  Timestamp created{};
  std::string created_by;
  std::vector<DatasetVersion> versions;  // oldest first; the last is "latest"

  // The version `want` names ("latest" or "sha256:..."), or null.
  const DatasetVersion* Find(std::string_view want) const;
  bool operator==(const Dataset&) const = default;
};

inline constexpr std::string_view kLatestVersion = "latest";
// Most versions a dataset keeps on record (the oldest are dropped past it, never one a
// job still names: the registry checks).
inline constexpr size_t kMaxDatasetVersions = 1000;

// "sha256:" and 64 lowercase hex digits.
bool IsContentVersion(std::string_view text);

// Name, tenant, source, description, versions (each a content version, unique).
// InvalidArgument naming the field and value.
Status ValidateDataset(const Dataset& d);
// source: "/abs/path" (no "..", no NUL, at most 4096 bytes) or "s3://bucket[/prefix]"
// (a bucket of 3 to 63 of a-z 0-9 . -).
Status ValidateDatasetSource(std::string_view source);

}  // namespace trainyard
