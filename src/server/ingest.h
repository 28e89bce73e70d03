// Ingest: what agents and training code upload about runs, filed where it belongs.
// The agent routes (POST /agent/logs, /agent/metrics) and POST /runs/{id}/metrics
// parse their requests and call it; nothing here knows of HTTP.
//
//   a rank's output         the LogStore's copy of the rank's log, in order: a chunk
//                           that does not start where the copy ends is not written.
//   a rank's metrics lines  (the records of its metrics file, docs/metrics-file.md)
//                           checkpoint records are reported to the Cluster as the job's
//                           checkpoints, as "agent:<node>"; other objects are filed in
//                           the LogStore; every record is decoded (track/ingest.h) into
//                           the run's series and fed to alerting. Lines the server has
//                           taken already (sent again from an offset behind its copy)
//                           are none of these a second time.
//   a batch of points       fed to alerting, then stored in the run's series and params.
//
// Without a series store, metrics lines are only filed (and checkpoints reported), and
// batches are refused (Unavailable); without alerting nothing is fed to it.
//
// Thread-safety: every method may be called from any thread at once; the objects it
// is built on are thread-safe and outlive it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/job.h"
#include "core/status.h"
#include "server/alerting.h"
#include "server/cluster.h"
#include "server/logs.h"
#include "track/ingest.h"

namespace trainyard::track {
class SeriesStore;
}

namespace trainyard::server {

// The most bytes of a rank's output (or of a profile's trace) one upload may carry.
inline constexpr int64_t kMaxLogChunkBytes = 1 << 20;

// A job's checkpoint record ({"path", "step", "duration_ms" | "write_duration_ms" |
// "duration_s"}), as a metrics line or POST /jobs/{id}/checkpoint carries it.
// Errors name the field ("checkpoint.path: ...").
Result<CheckpointReport> CheckpointFromJson(const nlohmann::json& record);

// One rank of an attempt of a job, running on `node`.
struct TaskRef {
  std::string task_id;  // as the agent named it: "<job>.<attempt>.<rank>"
  std::string node;
  JobId job = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
};

class Ingest {
 public:
  // `series` and `alerting` may be null.
  Ingest(Cluster& cluster, LogStore& logs, track::SeriesStore* series, Alerting* alerting);

  // `data` of the task's output, from `offset` of it on. Returns where the server's
  // copy ends now: offset + data's size, or, when offset is not where the copy
  // ended, that end (nothing written). NotFound for a task the Cluster does not know
  // on that node; ResourceExhausted for more than kMaxLogChunkBytes.
  Result<int64_t> Logs(const TaskRef& task, int64_t offset, std::string_view data);

  // `lines` (a JSON array; else InvalidArgument) of the task's metrics file, read from `offset` of
  // it up to `end_offset` (nullopt: estimated as each line serialised plus a newline). Returns the
  // offset to read on from: `end_offset` when the lines were taken, or, when the server's copy ends
  // elsewhere, that end (the lines were not taken). A failure to store the lines' points is written
  // to the server's log rather than returned: the lines are filed, and the agent will not send them
  // again.
  Result<int64_t> Metrics(const TaskRef& task, int64_t offset, std::optional<int64_t> end_offset,
                          const nlohmann::json& lines);

  // The points and params of a run (POST /runs/{id}/metrics).
  Status Points(JobId run, const track::IngestBatch& batch);

 private:
  Status Record(JobId run, const track::IngestBatch& batch);

  Cluster& cluster_;
  LogStore& logs_;
  track::SeriesStore* const series_;
  Alerting* const alerting_;
};

}  // namespace trainyard::server
