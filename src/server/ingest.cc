#include "server/ingest.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "track/series_store.h"

namespace trainyard::server {

using nlohmann::json;

Result<CheckpointReport> CheckpointFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("checkpoint: expected a JSON object");
  CheckpointReport r;
  auto path = j.find("path");
  if (path == j.end() || !path->is_string() || path->get<std::string>().empty()) {
    return InvalidArgument("checkpoint.path: required, a non-empty string");
  }
  r.path = path->get<std::string>();
  if (r.path.size() > SpecLimits::kMaxPathBytes) {
    return InvalidArgument("checkpoint.path: at most " + std::to_string(SpecLimits::kMaxPathBytes) +
                           " bytes");
  }
  if (auto step = j.find("step"); step != j.end() && !step->is_null()) {
    if (!step->is_number_integer() || step->get<int64_t>() < 0) {
      return InvalidArgument("checkpoint.step: expected an integer >= 0, got " + step->dump());
    }
    r.step = step->get<int64_t>();
  }
  // A write time in `unit_ms` milliseconds, checked before it becomes an integer (a
  // double beyond int64 is undefined to convert; found by fuzz_api_request).
  constexpr double kMaxWriteMs = 30.0 * 24 * 3600 * 1000;  // 30 days
  auto write_duration = [&](const char* key, double unit_ms) -> Status {
    auto d = j.find(key);
    if (d == j.end() || d->is_null()) return Status::Ok();
    const double ms = d->is_number() ? d->get<double>() * unit_ms : -1;
    if (!(ms >= 0 && ms <= kMaxWriteMs)) {
      return InvalidArgument(std::string("checkpoint.") + key + ": expected a number from 0 to " +
                             std::to_string(static_cast<int64_t>(kMaxWriteMs / unit_ms)) +
                             " (30 days), got " + d->dump());
    }
    r.write_duration = Duration(static_cast<int64_t>(ms));
    return Status::Ok();
  };
  TY_RETURN_IF_ERROR(write_duration("duration_ms", 1));
  TY_RETURN_IF_ERROR(write_duration("write_duration_ms", 1));
  TY_RETURN_IF_ERROR(write_duration("duration_s", 1000));
  return r;
}

namespace {

// The checkpoint a metrics line reports, if it is one ({"kind": "checkpoint", ...}).
std::optional<CheckpointReport> CheckpointLine(const json& line) {
  auto kind = line.find("kind");
  if (kind == line.end() || !kind->is_string() || kind->get<std::string>() != "checkpoint") {
    return std::nullopt;
  }
  auto r = CheckpointFromJson(line);
  if (!r.ok()) return std::nullopt;
  return *r;
}

}  // namespace

Ingest::Ingest(Cluster& cluster, LogStore& logs, track::SeriesStore* series, Alerting* alerting)
    : cluster_(cluster), logs_(logs), series_(series), alerting_(alerting) {}

Result<int64_t> Ingest::Logs(const TaskRef& task, int64_t offset, std::string_view data) {
  if (static_cast<int64_t>(data.size()) > kMaxLogChunkBytes) {
    return ResourceExhausted("logs: at most 1 MiB per request");
  }
  if (!cluster_.KnowsTask(task.node, task.job, task.attempt)) {
    return NotFound("unknown task " + task.task_id);
  }
  return logs_.AppendLog(task.job, task.attempt, task.rank, offset, data);
}

Result<int64_t> Ingest::Metrics(const TaskRef& task, int64_t offset,
                                std::optional<int64_t> end_offset, const json& lines) {
  if (!lines.is_array()) return InvalidArgument("metrics.lines: required, a list of objects");
  int64_t end = offset;
  std::vector<std::string> keep;
  std::vector<CheckpointReport> checkpoints;
  for (const json& line : lines) {
    std::string text = line.dump();
    end += static_cast<int64_t>(text.size()) + 1;
    if (!line.is_object()) continue;
    if (auto c = CheckpointLine(line)) {
      checkpoints.push_back(std::move(*c));
    } else {
      keep.push_back(std::move(text));
    }
  }
  if (end_offset) end = std::max(offset, *end_offset);
  TY_ASSIGN_OR_RETURN(LogStore::MetricsAppend filed,
                      logs_.AppendMetrics(task.job, task.attempt, task.rank, offset, end, keep));
  // Only lines not taken before are recorded in the run and report their checkpoints.
  if (!filed.taken) return filed.next_offset;
  if (series_ != nullptr) {
    if (Status s = Record(task.job, track::DecodeRecords(task.job, task.rank, lines)); !s.ok()) {
      std::fprintf(stderr, "trainyard server: metrics of job %lld: %s\n",
                   static_cast<long long>(task.job), s.ToString().c_str());
    }
  }
  for (const CheckpointReport& c : checkpoints) {
    // A checkpoint of a job that has just stopped is of no use any more.
    cluster_.ReportCheckpoint(task.job, c, "agent:" + task.node).IgnoreError();
  }
  return filed.next_offset;
}

Status Ingest::Points(JobId run, const track::IngestBatch& batch) {
  if (series_ == nullptr) return Unavailable("this server keeps no metric series");
  return Record(run, batch);
}

Status Ingest::Record(JobId run, const track::IngestBatch& batch) {
  if (alerting_ != nullptr) alerting_->ObserveMetrics(run, batch.appends, batch.params);
  TY_RETURN_IF_ERROR(series_->Append(batch.appends));
  return series_->PutParams(run, batch.params);
}

}  // namespace trainyard::server
