// DataCache: the node's copies of dataset versions (docs/datasets.md, "Staging").
//
// A version staged here lives in <root>/<64 hex>/ (files 0444, directories 0555), with
// <root>/<64 hex>.json saying which dataset it is and its size; a directory holds a
// whole, checked version or does not exist (data::StageVersion stages into a
// ".partial" directory and renames it). Jobs on the node share one copy.
//
// Stage starts copying a version in a thread of its own unless it is ready or being
// staged; a version whose staging failed is tried again by the next Stage. Acquire
// hands a ready version's directory to a rank and counts it in use until Release.
// The cache holds at most `budget_bytes`: before staging, the least recently used
// versions that no rank uses (and that were not staged within `pin` for a start still
// to come) are removed to make room; a version that cannot fit fails with a message
// naming the version, its size, the budget and what is in use.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "protocol/messages.h"

namespace trainyard::agent {

struct DataCacheOptions {
  std::string root;          // created if missing
  int64_t budget_bytes = 0;  // > 0
  int threads = 4;           // files copied at once per version
  std::string node;          // for messages
  // A freshly staged version is kept from eviction this long, for the start that asked
  // for it.
  std::chrono::steady_clock::duration pin = std::chrono::minutes(30);
  // Where it says what it staged, evicted or failed to stage (a line at a time).
  std::function<void(const std::string&)> log;
};

// Hands the manifest text of a version (the server has it).
using ManifestSource = std::function<Result<std::string>(const std::string& version)>;

class DataCache {
 public:
  // Finds the versions already cached under options.root; removes partial ones.
  static Result<std::unique_ptr<DataCache>> Open(DataCacheOptions options);
  ~DataCache();  // stops stagings in progress (their partial copies are removed)

  void Stage(const protocol::TaskData& d, const ManifestSource& manifests);
  // The directory of a ready version, in use until Release; FailedPrecondition naming
  // the version and its state otherwise.
  Result<std::string> Acquire(const std::string& version);
  void Release(const std::string& version);
  // Every version known: ready, staging, or failed (the last failure of each).
  std::vector<protocol::DatasetStatus> Statuses() const;
  const DataCacheOptions& options() const { return opt_; }

 private:
  struct Entry {
    protocol::DatasetStatus status;
    std::chrono::steady_clock::time_point started{}, last_used{}, pinned_until{};
    std::atomic<int64_t> done{0};
  };
  explicit DataCache(DataCacheOptions o) : opt_(std::move(o)) {}
  void Run(std::string version, protocol::TaskData d, ManifestSource manifests);
  // Makes room for `bytes` more; the error when it cannot. REQUIRES: mu_ held.
  Status MakeRoomLocked(const std::string& version, int64_t bytes);
  std::string DirOf(const std::string& version) const;

  const DataCacheOptions opt_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;  // by version; GUARDED_BY(mu_)
  std::vector<std::thread> threads_;                       // GUARDED_BY(mu_)
  std::atomic<bool> stopping_{false};
};

}  // namespace trainyard::agent
