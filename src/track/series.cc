#include "track/series.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace trainyard::track {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1)); }

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads a varint at `pos`; false when it runs past `end` or is longer than 10 bytes.
bool GetVarint(const unsigned char*& pos, const unsigned char* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 70 && pos < end; shift += 7) {
    uint64_t b = *pos++;
    v |= (b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Wrapping difference: deltas of any two int64 values fit, and add back exactly.
int64_t Delta(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t AddDelta(int64_t a, int64_t d) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(d));
}

// Aggregates points and block summaries into one bucket.
struct Accumulator {
  Bucket b;
  bool empty = true;
  bool has_value = false;  // a non-NaN value was seen

  void AddValues(double min, double max, int64_t count, int64_t nans) {
    if (count - nans <= 0) return;
    if (!has_value) {
      b.min = min;
      b.max = max;
      has_value = true;
    } else {
      b.min = std::min(b.min, min);
      b.max = std::max(b.max, max);
    }
  }
  void Add(const Point& p) {
    if (empty) {
      b.first_step = p.step;
      empty = false;
    }
    b.last_step = p.step;
    b.last_time_ms = p.time_ms;
    b.last = p.value;
    ++b.count;
    if (std::isnan(p.value)) {
      ++b.nan_count;
    } else {
      AddValues(p.value, p.value, 1, 0);
    }
  }
  void Add(const BlockSummary& s) {
    if (empty) {
      b.first_step = s.first_step;
      empty = false;
    }
    b.last_step = s.last_step;
    b.last_time_ms = s.last_time_ms;
    b.last = s.last;
    b.count += s.count;
    b.nan_count += s.nan_count;
    AddValues(s.min, s.max, s.count, s.nan_count);
  }
  Bucket Take() {
    Bucket out = b;
    if (!has_value) out.min = out.max = kNaN;
    *this = Accumulator{};
    return out;
  }
};

// Maps steps in [lo, hi] to bucket indexes of equal width.
struct Bucketing {
  int64_t lo = 0;
  unsigned __int128 width = 1;

  Bucketing(int64_t lo_step, int64_t hi_step, int32_t buckets) : lo(lo_step) {
    unsigned __int128 span =
        static_cast<unsigned __int128>(static_cast<uint64_t>(Delta(hi_step, lo_step))) + 1;
    unsigned __int128 n = static_cast<unsigned __int128>(std::max(buckets, 1));
    width = (span + n - 1) / n;
    if (width == 0) width = 1;
  }
  uint64_t Index(int64_t step) const {
    return static_cast<uint64_t>(static_cast<uint64_t>(Delta(step, lo)) / width);
  }
};

// Emits buckets in step order; a new index closes the current bucket.
class BucketWriter {
 public:
  BucketWriter(const Bucketing& bucketing, std::vector<Bucket>& out)
      : bucketing_(bucketing), out_(out) {}
  void Add(const Point& p) {
    Switch(bucketing_.Index(p.step));
    acc_.Add(p);
  }
  void Add(const BlockSummary& s) {
    Switch(bucketing_.Index(s.first_step));
    acc_.Add(s);
  }
  void Finish() {
    if (!acc_.empty) out_.push_back(acc_.Take());
  }

 private:
  void Switch(uint64_t index) {
    if (has_current_ && current_ == index) return;
    Finish();
    has_current_ = true;
    current_ = index;
  }
  const Bucketing& bucketing_;
  std::vector<Bucket>& out_;
  Accumulator acc_;
  bool has_current_ = false;
  uint64_t current_ = 0;
};

Bucket RawBucket(const Point& p) {
  Accumulator a;
  a.Add(p);
  return a.Take();
}

}  // namespace

bool Point::operator==(const Point& o) const {
  return step == o.step && time_ms == o.time_ms &&
         (value == o.value || (std::isnan(value) && std::isnan(o.value)));
}

BlockSummary BlockSummary::Of(std::span<const Point> points) {
  BlockSummary s;
  if (points.empty()) return s;
  s.first_step = points.front().step;
  s.last_step = points.back().step;
  s.first_time_ms = points.front().time_ms;
  s.last_time_ms = points.back().time_ms;
  s.count = static_cast<int32_t>(points.size());
  s.last = points.back().value;
  bool has_value = false;
  for (const Point& p : points) {
    if (std::isnan(p.value)) {
      ++s.nan_count;
    } else if (!has_value) {
      s.min = s.max = p.value;
      has_value = true;
    } else {
      s.min = std::min(s.min, p.value);
      s.max = std::max(s.max, p.value);
    }
  }
  if (!has_value) s.min = s.max = kNaN;
  return s;
}

std::string EncodeBlock(std::span<const Point> points, const BlockSummary& summary) {
  std::string out;
  out.reserve(points.size() * 11);
  int64_t prev = summary.first_step;
  for (const Point& p : points) {
    PutVarint(out, ZigZag(Delta(p.step, prev)));
    prev = p.step;
  }
  prev = summary.first_time_ms;
  for (const Point& p : points) {
    PutVarint(out, ZigZag(Delta(p.time_ms, prev)));
    prev = p.time_ms;
  }
  size_t at = out.size();
  out.resize(at + points.size() * 8);
  for (const Point& p : points) {
    uint64_t bits = std::bit_cast<uint64_t>(p.value);
    if constexpr (std::endian::native == std::endian::big) bits = __builtin_bswap64(bits);
    std::memcpy(out.data() + at, &bits, 8);
    at += 8;
  }
  return out;
}

Status DecodeBlock(std::string_view data, const BlockSummary& summary, std::vector<Point>& out) {
  if (summary.count < 1 || summary.count > kMaxBlockPoints) {
    return DataLoss("series block: count " + std::to_string(summary.count) + " is outside 1.." +
                    std::to_string(kMaxBlockPoints));
  }
  const size_t n = static_cast<size_t>(summary.count);
  if (data.size() < n * 10) {
    return DataLoss("series block: " + std::to_string(data.size()) + " bytes cannot hold " +
                    std::to_string(n) + " points");
  }
  const auto* pos = reinterpret_cast<const unsigned char*>(data.data());
  const auto* end = pos + data.size() - n * 8;
  const size_t base = out.size();
  out.resize(base + n);
  int64_t step = summary.first_step;
  for (size_t i = 0; i < n; ++i) {
    uint64_t v;
    if (!GetVarint(pos, end, v)) {
      out.resize(base);
      return DataLoss("series block: step " + std::to_string(i) + " is truncated");
    }
    step = AddDelta(step, UnZigZag(v));
    out[base + i].step = step;
  }
  int64_t time = summary.first_time_ms;
  for (size_t i = 0; i < n; ++i) {
    uint64_t v;
    if (!GetVarint(pos, end, v)) {
      out.resize(base);
      return DataLoss("series block: time " + std::to_string(i) + " is truncated");
    }
    time = AddDelta(time, UnZigZag(v));
    out[base + i].time_ms = time;
  }
  if (pos != end) {
    out.resize(base);
    return DataLoss("series block: " + std::to_string(end - pos) +
                    " stray bytes before the values");
  }
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits;
    std::memcpy(&bits, pos + i * 8, 8);
    if constexpr (std::endian::native == std::endian::big) bits = __builtin_bswap64(bits);
    out[base + i].value = std::bit_cast<double>(bits);
  }
  if (out.back().step != summary.last_step) {
    out.resize(base);
    return DataLoss("series block: last step does not match its summary");
  }
  return Status::Ok();
}

Result<std::vector<Bucket>> Downsample(
    std::span<const BlockSummary> summaries, const SeriesRange& range,
    const std::function<Status(size_t, std::vector<Point>&)>& load) {
  std::vector<Bucket> out;
  if (summaries.empty() || range.from_step > range.to_step) return out;
  const int64_t lo = std::max(range.from_step, summaries.front().first_step);
  const int64_t hi = std::min(range.to_step, summaries.back().last_step);
  if (lo > hi) return out;
  std::vector<Point> points;
  if (range.buckets <= 0) {
    for (size_t i = 0; i < summaries.size(); ++i) {
      const BlockSummary& s = summaries[i];
      if (s.last_step < lo || s.first_step > hi) continue;
      points.clear();
      TY_RETURN_IF_ERROR(load(i, points));
      for (const Point& p : points) {
        if (p.step >= lo && p.step <= hi) out.push_back(RawBucket(p));
      }
    }
    return out;
  }
  const Bucketing bucketing(lo, hi, range.buckets);
  BucketWriter writer(bucketing, out);
  for (size_t i = 0; i < summaries.size(); ++i) {
    const BlockSummary& s = summaries[i];
    if (s.last_step < lo || s.first_step > hi) continue;
    const bool inside = s.first_step >= lo && s.last_step <= hi &&
                        bucketing.Index(s.first_step) == bucketing.Index(s.last_step);
    if (inside) {
      writer.Add(s);
      continue;
    }
    points.clear();
    TY_RETURN_IF_ERROR(load(i, points));
    for (const Point& p : points) {
      if (p.step >= lo && p.step <= hi) writer.Add(p);
    }
  }
  writer.Finish();
  return out;
}

std::vector<Bucket> DownsamplePoints(std::span<const Point> points, const SeriesRange& range) {
  std::vector<BlockSummary> summaries;
  for (size_t at = 0; at < points.size(); at += kMaxBlockPoints) {
    size_t n = std::min<size_t>(kMaxBlockPoints, points.size() - at);
    summaries.push_back(BlockSummary::Of(points.subspan(at, n)));
  }
  auto r = Downsample(summaries, range, [&](size_t i, std::vector<Point>& out) {
    size_t at = i * kMaxBlockPoints;
    size_t n = std::min<size_t>(kMaxBlockPoints, points.size() - at);
    out.insert(out.end(), points.begin() + at, points.begin() + at + n);
    return Status::Ok();
  });
  return r.ok() ? std::move(*r) : std::vector<Bucket>{};
}

}  // namespace trainyard::track
