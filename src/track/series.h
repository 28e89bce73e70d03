// Metric series: the points a run logs for one key on one rank, their compact block
// encoding, and downsampling for plots.
//
// A series is a sequence of points (step, time, value) in the order they were logged.
// Steps never decrease within a series: when a new attempt of the run resumes from a
// checkpoint and logs a step it had already logged, the points from that step on are
// replaced (SeriesStore does the truncation), so the history stays one continuous
// curve keyed by step.
//
// Points are stored in blocks of at most kMaxBlockPoints. A block's summary (step
// range, count, min, max, last value, NaN count) lives beside its encoded data, so a
// read that only needs aggregates over whole blocks never decodes them.
//
// Block data layout (little endian), for n points:
//   n x zigzag varint: step - previous step (the first against summary.first_step)
//   n x zigzag varint: time_ms - previous time_ms (the first against summary.first_time_ms)
//   n x 8 bytes: the value's IEEE 754 bits
// Typically 10-11 bytes a point: step deltas of 1 take one byte, time deltas of up
// to 8 s two.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainyard::track {

struct Point {
  int64_t step = 0;
  int64_t time_ms = 0;
  double value = 0;

  bool operator==(const Point& o) const;  // NaN equals NaN here (bitwise on NaN)
};

inline constexpr int kMaxBlockPoints = 1024;

struct BlockSummary {
  int64_t first_step = 0;
  int64_t last_step = 0;
  int64_t first_time_ms = 0;
  int64_t last_time_ms = 0;
  int32_t count = 0;
  int32_t nan_count = 0;
  double min = 0;  // over non-NaN values; NaN when every value is NaN
  double max = 0;
  double last = 0;  // the value of the last point (may be NaN)

  // The summary of `points` (non-empty, steps non-decreasing).
  static BlockSummary Of(std::span<const Point> points);
};

// Encodes `points` (1..kMaxBlockPoints, steps non-decreasing) as block data.
std::string EncodeBlock(std::span<const Point> points, const BlockSummary& summary);
// Decodes block data written by EncodeBlock for `summary`, appending to `out`.
// Fails (naming what is wrong) on data that does not match the summary.
Status DecodeBlock(std::string_view data, const BlockSummary& summary, std::vector<Point>& out);

// One bucket of a downsampled read: aggregates of the points whose steps fall in
// [first_step, last_step] (the steps actually seen, not the bucket's bounds).
struct Bucket {
  int64_t first_step = 0;
  int64_t last_step = 0;
  int64_t last_time_ms = 0;
  int64_t count = 0;
  int64_t nan_count = 0;
  double min = 0;  // NaN when every value is NaN
  double max = 0;
  double last = 0;
};

// What to read: steps in [from_step, to_step], in at most `buckets` buckets of equal
// step width. buckets == 0 means raw points (no aggregation).
struct SeriesRange {
  int64_t from_step = INT64_MIN;
  int64_t to_step = INT64_MAX;
  int32_t buckets = 1000;
};

// Downsamples a series held as blocks (sorted by step, not overlapping). `summaries`
// describe the blocks; `load(i, out)` appends the points of block i and is called only
// for blocks that straddle a bucket or range boundary. The bucket width is
// ceil((hi - lo + 1) / buckets) steps, where [lo, hi] is the range clipped to the
// steps present; empty buckets are left out.
Result<std::vector<Bucket>> Downsample(
    std::span<const BlockSummary> summaries, const SeriesRange& range,
    const std::function<Status(size_t, std::vector<Point>&)>& load);

// The same over points in memory (tests, small series).
std::vector<Bucket> DownsamplePoints(std::span<const Point> points, const SeriesRange& range);

}  // namespace trainyard::track
