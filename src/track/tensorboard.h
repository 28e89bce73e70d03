// TensorBoard export: a run's scalar metric series as a TensorBoard event file.
//
// An event file is a sequence of TFRecords, each holding one serialized
// tensorflow.Event (tensorflow/core/util/event.proto). Both are written here by hand,
// with no protobuf or TensorFlow library:
//
//   record = uint64 LE length | uint32 LE MaskCrc32c(Crc32c(length bytes))
//            | payload | uint32 LE MaskCrc32c(Crc32c(payload))
//
// The first record is Event{wall_time, file_version: "brain.Event:2"}; each scalar
// point is then Event{wall_time, step, summary{value{tag, simple_value}}}. Events are
// serialized the way protobuf does for proto3: fields in field-number order, a plain
// scalar field left out when it holds its default (step 0, wall_time 0, an empty tag),
// simple_value always written because it is a member of a oneof.
//
// simple_value is a float32: a value is narrowed with IEEE round-to-nearest (a finite
// double beyond float range becomes +-inf; NaN stays NaN), and the reader returns that
// float widened to double. Times are wall_time = time_ms / 1000.0 seconds and are read
// back rounded to the nearest millisecond.
//
// These are pure functions on values with no I/O: the caller writes WriteEventFile's
// bytes to DIR/<run>/<EventFileName(...)>.
//
// Thread-safety: pure functions; safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainyard::track {

struct ScalarPoint {
  std::string tag;
  int64_t step = 0;
  int64_t time_ms = 0;
  double value = 0;

  // Plain member-wise comparison: a NaN value never compares equal.
  friend bool operator==(const ScalarPoint&, const ScalarPoint&) = default;
};

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
uint32_t Crc32c(std::string_view data);

// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskCrc32c(uint32_t crc);

// Returns one TFRecord holding `payload` (the layout in the header comment).
std::string FrameRecord(std::string_view payload);

// Returns the serialized Event{wall_time: time_ms / 1000.0, file_version: "brain.Event:2"}.
std::string EncodeFileVersionEvent(int64_t time_ms);

// Returns the serialized Event{wall_time: p.time_ms / 1000.0, step: p.step,
// summary{value{tag: p.tag, simple_value: float(p.value)}}}.
std::string EncodeScalarEvent(const ScalarPoint& p);

// Returns a whole event file: the file_version record (wall time `created_ms`) first,
// then one record per point, in the order given.
std::string WriteEventFile(const std::vector<ScalarPoint>& points, int64_t created_ms);

// Returns "events.out.tfevents.<seconds>.<host>", seconds = floor(created_ms / 1000)
// zero-padded to 10 digits as TensorFlow writes it. Characters of `host` outside
// [A-Za-z0-9._-] become '_', so the name is always a single path component.
std::string EventFileName(int64_t created_ms, std::string_view host);

// Reads an event file back. Checks the framing and both CRCs of every record and
// decodes each Event; returns one point per Summary.Value holding a simple_value, in
// file order (the file_version record, other kinds of events and other kinds of
// values are skipped, as are unknown fields). A malformed file gives DATA_LOSS naming
// the record's byte offset and what is wrong:
//   record at byte 1234: data CRC mismatch (stored 0x..., computed 0x...)
//   record at byte 0: Event at byte 14: truncated varint
// It never reads outside `bytes`.
Result<std::vector<ScalarPoint>> ReadEventFile(std::string_view bytes);

}  // namespace trainyard::track
