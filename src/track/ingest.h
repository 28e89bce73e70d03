// Metric ingestion: what arrives from jobs, decoded into series appends and params.
//
// Three ways in, one result (IngestBatch):
//   - records of the metrics file (docs/metrics-file.md) that an agent forwards for
//     one rank: "metrics" records become points, "params" records params, and
//     "checkpoint" records the points checkpoint/write_s (write duration, at the
//     checkpoint's step) and checkpoint/bytes; other kinds are ignored;
//   - the batch endpoint's JSON body, columns per key:
//       {"rank": 0, "series": [{"key": "loss", "steps": [1, 2], "values": [2.3, "NaN"],
//                               "times_ms": [1764410000000, 1764410000100]}],
//        "params": {"lr": 0.0003}}
//     (times_ms optional: the time of arrival);
//   - the batch endpoint's text body, one point a line, for any language and for
//     speed: "<key> <step> <value> [<time_ms>]", blank lines and "#" comments
//     skipped; values as C would print them, "nan", "inf", "-inf" included.
// Keys match [A-Za-z0-9_./-]{1,128}. Errors name the line or field and the value.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"
#include "track/series_store.h"

namespace trainyard::track {

inline constexpr size_t kMaxKeysPerBatch = 1000;

struct IngestBatch {
  std::vector<SeriesAppend> appends;  // one per (key, rank), points in arrival order
  std::map<std::string, std::string> params;
  int64_t points = 0;
  int64_t skipped = 0;  // records that were not valid (metrics-file records only)
};

bool IsValidKey(std::string_view key);

// Metrics-file records (a JSON array of objects) of one rank. Invalid records are
// skipped and counted rather than failing the batch: the file is written by user
// code and one bad line must not hold up the rest.
IngestBatch DecodeRecords(int64_t run, int32_t rank, const nlohmann::json& records);

Result<IngestBatch> ParseBatchJson(int64_t run, std::string_view body, int64_t now_ms);
Result<IngestBatch> ParseBatchText(int64_t run, int32_t rank, std::string_view body,
                                   int64_t now_ms);

}  // namespace trainyard::track
