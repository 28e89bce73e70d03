// LogStore: the server's copy of every rank's output and metrics lines, as files.
//
//   <root>/logs/<job>/<attempt>/rank-<r>.log       the bytes the rank wrote, in order
//   <root>/metrics/<job>/<attempt>/rank-<r>.jsonl  metrics lines other than checkpoints
//
// Agents ship chunks with the offset they start at (docs/agent-protocol.md); a chunk
// that does not start where the server's copy ends is not written, and the reply's
// next offset tells the agent where to resend from. Metrics lines are filtered by
// the caller (checkpoint reports go to the Cluster); the rest are appended here until
// the series store exists. Readers can wait for a log to grow (for `logs -f`), search
// a job's logs for a string, and ask for a failed attempt's first error lines.
//
// Retention (Prune) deletes files and leaves markers, so that a deleted log reads as
// empty and "pruned" rather than as never written:
//
//   <root>/logs/<job>.pruned                       every file of the job was deleted
//   <root>/logs/<job>/<attempt>/rank-<r>.pruned    that rank log was deleted
//
// Thread-safety: every method may be called from any thread; one mutex serialises
// writers (and Prune), guards the offsets of metrics files and wakes readers; another
// guards the cache of error lines. Searches and error-line scans read files without
// holding either, so they never hold up agents' writes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/job.h"
#include "core/status.h"
#include "core/units.h"
#include "server/log_search.h"

namespace trainyard::server {

struct LogChunk {
  std::string data;
  int64_t next_offset = 0;  // pass back to continue after `data`
  int64_t size = 0;         // bytes the server holds for this rank now
  bool pruned = false;      // retention deleted this log (it reads as empty)
};

// A rank log the store holds, or held until retention deleted it.
struct RankLog {
  int32_t attempt = 0;
  int32_t rank = 0;
  int64_t size = 0;
  bool pruned = false;
};

struct LogSearchRequest {
  std::string pattern;             // a fixed string: 1..kMaxSearchPatternBytes, no newline
  std::optional<int32_t> attempt;  // unset: every attempt
  std::optional<int32_t> rank;     // unset: every rank
  bool ignore_case = false;
  int64_t max_matches = kDefaultSearchMatches;
  int64_t max_scan_bytes = kMaxSearchScanBytes;
};

struct LogSearchMatch {
  int32_t attempt = 0;
  int32_t rank = 0;
  LineMatch match;
};

struct LogSearchResult {
  std::vector<LogSearchMatch> matches;  // by attempt, rank, then line
  // Stopped early: more than max_matches lines matched, or max_scan_bytes were read.
  bool truncated = false;
  bool pruned = false;  // some log it would have searched was deleted by retention
};

// The first error lines of a failed attempt (FirstErrorLines) and the rank they are from.
struct RankErrorLines {
  int32_t rank = 0;
  std::vector<std::string> lines;
};

class LogStore {
 public:
  explicit LogStore(std::string root) : root_(std::move(root)) {}

  // Appends `data` when `offset` is where the copy ends; returns where it ends now.
  Result<int64_t> AppendLog(JobId job, int32_t attempt, int32_t rank, int64_t offset,
                            std::string_view data);
  // Up to `max_bytes` from `offset`. With `wait` > 0 and nothing new, waits that
  // long for the log to grow.
  Result<LogChunk> ReadLog(JobId job, int32_t attempt, int32_t rank, int64_t offset,
                           int64_t max_bytes, Duration wait);
  // Appends metrics lines (already serialised) sent from the agent's file `offset`
  // on and ending at `end_offset`; returns the agent-file offset to continue from and
  // whether the lines were taken. An offset behind what was already taken (a resend)
  // is answered with the offset taken so far, and nothing is written.
  struct MetricsAppend {
    int64_t next_offset = 0;
    bool taken = false;
  };
  Result<MetricsAppend> AppendMetrics(JobId job, int32_t attempt, int32_t rank, int64_t offset,
                                      int64_t end_offset, const std::vector<std::string>& lines);
  // Wakes every ReadLog waiter (shutdown).
  void WakeAll();

  // The rank logs of `job` (of one attempt, or of all), ascending attempt then rank.
  std::vector<RankLog> ListRankLogs(JobId job, std::optional<int32_t> attempt) const;
  // The lines of `job`'s logs that contain `request.pattern` (LineSearch), reading
  // at most request.max_scan_bytes. REQUIRES: the request is valid (the API checks).
  Result<LogSearchResult> Search(JobId job, const LogSearchRequest& request) const;
  // FirstErrorLines of the first rank of `attempt` (ascending) whose log has any,
  // looking at the first kMaxErrorScanBytes of each and at most kMaxErrorScanBytes * 4
  // in all; nullopt when none has. Remembered until the attempt's logs change size.
  std::optional<RankErrorLines> ErrorLines(JobId job, int32_t attempt);

  // Every rank log and metrics-line copy the store holds, for retention.
  std::vector<StoredLogFile> ListFiles() const;
  // Deletes what `plan` says, leaving the markers above. Carries on past a file it
  // cannot delete and returns the first such error.
  Status Prune(const LogPrunePlan& plan);

 private:
  std::string LogPath(JobId job, int32_t attempt, int32_t rank) const;
  std::string JobDir(JobId job) const;
  bool IsPruned(JobId job, int32_t attempt, int32_t rank) const;

  struct ErrorScan {
    int64_t files = 0;  // the attempt's rank logs when it was scanned
    int64_t bytes = 0;  // and their total size
    std::optional<RankErrorLines> found;
  };

  const std::string root_;
  std::mutex mu_;
  std::condition_variable grew_;
  std::map<std::tuple<JobId, int32_t, int32_t>, int64_t> metrics_offsets_;  // GUARDED_BY(mu_)
  bool shutdown_ = false;                                                   // GUARDED_BY(mu_)
  std::mutex scans_mu_;
  std::map<std::pair<JobId, int32_t>, ErrorScan> error_scans_;  // GUARDED_BY(scans_mu_)
};

}  // namespace trainyard::server
