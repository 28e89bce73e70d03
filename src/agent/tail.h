// Reading what tasks write, for shipping to the server: raw bytes of a log file from
// an offset, and complete JSON lines of a metrics file from an offset.
//
// Both are stateless functions of (file, offset): the caller keeps the offsets, so a
// failed shipment is retried by reading again from the same offset.
//
// Thread-safety: no shared state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "protocol/messages.h"

namespace trainyard::agent {

inline constexpr int64_t kMaxShipBytes = protocol::kMaxUploadBytes;  // per request

// Up to `max_bytes` of `path` from `offset`; empty when there is nothing new or the file
// does not exist yet.
Result<std::string> ReadLogChunk(const std::string& path, int64_t offset,
                                 int64_t max_bytes = kMaxShipBytes);

struct MetricsBatch {
  int64_t offset = 0;                 // where the first line read starts (the offset asked for)
  int64_t end_offset = 0;             // just after the last complete line consumed
  std::vector<nlohmann::json> lines;  // the valid ones: JSON objects
  int64_t invalid = 0;                // lines skipped: not JSON, or not an object
};

// The complete lines of `path` from `offset`, reading at most about `max_bytes`; a
// trailing line without its newline is left for next time. Blank lines are skipped
// silently. A line longer than `max_bytes` is skipped and counted invalid once its
// newline arrives.
Result<MetricsBatch> ReadMetricsLines(const std::string& path, int64_t offset,
                                      int64_t max_bytes = kMaxShipBytes);

// The complete lines of `text` (read from a metrics file at `offset`): blank lines
// skipped, lines that are not JSON objects counted invalid, a trailing line without
// its newline left out (end_offset stops before it). No I/O; ReadMetricsLines uses it.
MetricsBatch ParseMetricsLines(std::string_view text, int64_t offset);

}  // namespace trainyard::agent
