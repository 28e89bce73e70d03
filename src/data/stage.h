// Staging a dataset version to local disk (docs/datasets.md, "Staging"): every file of
// its manifest fetched from the dataset's source into a directory of its own, each
// checked against the manifest (size and SHA-256, computed while copying) so that what
// lands is exactly the version and nothing else.
//
// Fetchers read a source. SharedPathFetcher reads a directory on a file system every
// node mounts (NFS, a parallel file system); OpenFetcher picks one by the source's form,
// and says clearly which forms this build cannot read (an S3 fetcher would be one more
// Fetcher behind the same interface).
//
// Thread-safety: a Fetcher's Copy may be called from several threads at once.
// StageVersion runs its own threads and calls `progress` from them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "data/manifest.h"

namespace trainyard::data {

class Fetcher {
 public:
  virtual ~Fetcher() = default;
  // Copies file `e.path` of the source to `dest` (a new file, created 0444), calling
  // `progress(n)` as n more bytes land. Fails naming the file when it cannot be read or
  // is not what `e` says (size, SHA-256): the source changed since the version was
  // registered.
  virtual Status Copy(const ManifestEntry& e, const std::string& dest,
                      const std::function<void(int64_t)>& progress) = 0;
};

// Reads files under `root`, a directory.
class SharedPathFetcher final : public Fetcher {
 public:
  explicit SharedPathFetcher(std::string root) : root_(std::move(root)) {}
  Status Copy(const ManifestEntry& e, const std::string& dest,
              const std::function<void(int64_t)>& progress) override;

 private:
  std::string root_;
};

// The fetcher for `source`: an absolute path reads the directory; anything else is
// FailedPrecondition, naming the source and what this build reads.
Result<std::unique_ptr<Fetcher>> OpenFetcher(const std::string& source);

struct StageOptions {
  int threads = 4;  // files fetched at once
  // Set to stop early (the staging fails with Unavailable); may be null.
  const std::atomic<bool>* cancel = nullptr;
  // Called with each new run of bytes landed (from the fetching threads).
  std::function<void(int64_t)> progress;
};

// Fetches every file of `m` into `dir` (which must not exist; its parent must): first
// into "<dir>.partial" (removed when it exists, left by an earlier try), then renamed to
// `dir` once every file is there and checked, so `dir` only ever holds a whole version.
// Files are made 0444 and directories 0555: jobs read the copy, never change it.
Status StageVersion(const Manifest& m, Fetcher& fetcher, const std::string& dir,
                    const StageOptions& options = {});

// Removes a staged (or partial) directory, read-only directories included.
void RemoveStaged(const std::string& dir);

}  // namespace trainyard::data
