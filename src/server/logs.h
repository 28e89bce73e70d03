// LogStore: the server's copy of every rank's output and metrics lines, as files.
//
//   <root>/logs/<job>/<attempt>/rank-<r>.log       the bytes the rank wrote, in order
//   <root>/metrics/<job>/<attempt>/rank-<r>.jsonl  metrics lines other than checkpoints
//
// Agents ship chunks with the offset they start at (docs/agent-protocol.md); a chunk
// that does not start where the server's copy ends is not written, and the reply's
// next offset tells the agent where to resend from. Metrics lines are filtered by
// the caller (checkpoint reports go to the Cluster); the rest are appended here until
// the series store exists. Readers can wait for a log to grow (for `logs -f`).
//
// Thread-safety: every method may be called from any thread; one mutex guards the
// offsets of metrics files, and one more serialises writers and wakes readers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/job.h"
#include "core/status.h"
#include "core/units.h"

namespace trainyard::server {

struct LogChunk {
  std::string data;
  int64_t next_offset = 0;  // pass back to continue after `data`
  int64_t size = 0;         // bytes the server holds for this rank now
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
  // on and ending at `end_offset`; returns the agent-file offset to continue from.
  // An offset behind what was already taken is answered with the offset taken so
  // far, and nothing is written.
  Result<int64_t> AppendMetrics(JobId job, int32_t attempt, int32_t rank, int64_t offset,
                                int64_t end_offset, const std::vector<std::string>& lines);
  // Wakes every ReadLog waiter (shutdown).
  void WakeAll();

 private:
  std::string LogPath(JobId job, int32_t attempt, int32_t rank) const;

  const std::string root_;
  std::mutex mu_;
  std::condition_variable grew_;
  std::map<std::tuple<JobId, int32_t, int32_t>, int64_t> metrics_offsets_;  // GUARDED_BY(mu_)
  bool shutdown_ = false;                                                   // GUARDED_BY(mu_)
};

}  // namespace trainyard::server
