#include "track/tensorboard.h"

#include <array>
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <utility>

namespace trainyard::track {
namespace {

constexpr std::string_view kFileVersion = "brain.Event:2";
constexpr size_t kRecordHeaderSize = 12;  // uint64 length + uint32 masked CRC of it
constexpr size_t kRecordFooterSize = 4;   // uint32 masked CRC of the payload

// Field numbers from event.proto and summary.proto.
constexpr uint32_t kEventWallTime = 1;
constexpr uint32_t kEventStep = 2;
constexpr uint32_t kEventFileVersion = 3;
constexpr uint32_t kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1;
constexpr uint32_t kValueSimpleValue = 2;

// Event.what and Summary.Value.value are oneofs: a later member of the oneof clears
// an earlier one. These are the other members' field numbers.
constexpr bool IsOtherEventWhat(uint32_t field) {
  return field == kEventFileVersion || field == 4 || (field >= 6 && field <= 9);
}
constexpr bool IsOtherValueKind(uint32_t field) {
  return field == 3 || field == 4 || field == 5 || field == 6 || field == 8;
}

enum class WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

std::string_view WireTypeName(WireType type) {
  switch (type) {
    case WireType::kVarint:
      return "varint";
    case WireType::kFixed64:
      return "fixed64";
    case WireType::kLengthDelimited:
      return "length-delimited";
    case WireType::kStartGroup:
      return "start-group";
    case WireType::kEndGroup:
      return "end-group";
    case WireType::kFixed32:
      return "fixed32";
  }
  return "invalid";
}

constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08" PRIx32, v);
  return buf;
}

// ---- Writing -------------------------------------------------------------------------

void PutFixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutFixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutTag(std::string& out, uint32_t field, WireType type) {
  PutVarint(out, (uint64_t{field} << 3) | static_cast<uint32_t>(type));
}

void PutLengthDelimited(std::string& out, uint32_t field, std::string_view bytes) {
  PutTag(out, field, WireType::kLengthDelimited);
  PutVarint(out, bytes.size());
  out.append(bytes);
}

// IEEE round-to-nearest narrowing. A plain static_cast of a finite double outside
// float range is undefined behaviour, so that case is decided here: values at or past
// the midpoint between FLT_MAX and 2^128 round to infinity, the rest to FLT_MAX.
float ToFloat32(double v) {
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  constexpr double kOverflow = kFloatMax + 0x1p103;  // half an ulp above FLT_MAX
  if (std::isfinite(v) && std::fabs(v) > kFloatMax) {
    const float magnitude =
        std::fabs(v) >= kOverflow ? std::numeric_limits<float>::infinity() : kFloatMax;
    return std::signbit(v) ? -magnitude : magnitude;
  }
  return static_cast<float>(v);
}

// Event fields common to every event: wall_time and step, default values left out.
std::string EventPrefix(int64_t time_ms, int64_t step) {
  std::string out;
  if (time_ms != 0) {
    PutTag(out, kEventWallTime, WireType::kFixed64);
    PutFixed64(out, std::bit_cast<uint64_t>(static_cast<double>(time_ms) / 1000.0));
  }
  if (step != 0) {
    PutTag(out, kEventStep, WireType::kVarint);
    PutVarint(out, static_cast<uint64_t>(step));
  }
  return out;
}

// ---- Reading -------------------------------------------------------------------------

uint32_t LoadFixed32(std::string_view bytes) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  return v;
}

uint64_t LoadFixed64(std::string_view bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  return v;
}

std::string At(size_t offset) { return "byte " + std::to_string(offset); }

// One field as read off the wire. `value` holds a varint's, fixed64's or fixed32's
// bits; `bytes` a length-delimited field's contents (a view into the input).
struct WireField {
  uint32_t number = 0;
  WireType type = WireType::kVarint;
  size_t offset = 0;  // of the tag, within the whole file
  uint64_t value = 0;
  std::string_view bytes;
  size_t bytes_offset = 0;  // of `bytes`, within the whole file
};

// Reads the fields of one message in order. `base` is the offset of data[0] within
// the whole file, so errors can name absolute offsets.
class WireReader {
 public:
  WireReader(std::string_view data, size_t base) : data_(data), base_(base) {}

  bool done() const { return pos_ == data_.size(); }

  // REQUIRES: !done().
  Result<WireField> Next() {
    WireField field;
    field.offset = base_ + pos_;
    TY_ASSIGN_OR_RETURN(const uint64_t key, ReadVarint());
    const uint64_t number = key >> 3;
    field.type = static_cast<WireType>(key & 7);
    if (number == 0 || number > (uint64_t{1} << 29) - 1) {
      return DataLoss(At(field.offset) + ": invalid field number " + std::to_string(number));
    }
    field.number = static_cast<uint32_t>(number);
    switch (field.type) {
      case WireType::kVarint: {
        TY_ASSIGN_OR_RETURN(field.value, ReadVarint());
        return field;
      }
      case WireType::kFixed64: {
        TY_ASSIGN_OR_RETURN(const std::string_view raw, ReadBytes(8, field));
        field.value = LoadFixed64(raw);
        return field;
      }
      case WireType::kFixed32: {
        TY_ASSIGN_OR_RETURN(const std::string_view raw, ReadBytes(4, field));
        field.value = LoadFixed32(raw);
        return field;
      }
      case WireType::kLengthDelimited: {
        TY_ASSIGN_OR_RETURN(const uint64_t length, ReadVarint());
        field.bytes_offset = base_ + pos_;
        TY_ASSIGN_OR_RETURN(field.bytes, ReadBytes(length, field));
        return field;
      }
      case WireType::kStartGroup:
      case WireType::kEndGroup:
        return DataLoss(At(field.offset) + ": field " + std::to_string(number) +
                        " uses wire type " + std::to_string(key & 7) +
                        " (groups), which these messages never contain");
    }
    return DataLoss(At(field.offset) + ": field " + std::to_string(number) +
                    " has invalid wire type " + std::to_string(key & 7));
  }

 private:
  Result<uint64_t> ReadVarint() {
    const size_t start = pos_;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == data_.size()) return DataLoss(At(base_ + start) + ": truncated varint");
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
    return DataLoss(At(base_ + start) + ": varint longer than 10 bytes");
  }

  Result<std::string_view> ReadBytes(uint64_t n, const WireField& field) {
    const size_t left = data_.size() - pos_;
    if (n > left) {
      return DataLoss(At(field.offset) + ": field " + std::to_string(field.number) + " (" +
                      std::string(WireTypeName(field.type)) + ") needs " + std::to_string(n) +
                      " bytes, only " + std::to_string(left) + " left in the message");
    }
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  std::string_view data_;
  size_t base_;
  size_t pos_ = 0;
};

Status ExpectWireType(const WireField& field, WireType want, std::string_view name) {
  if (field.type == want) return Status::Ok();
  return DataLoss(At(field.offset) + ": " + std::string(name) + " (field " +
                  std::to_string(field.number) + ") has wire type " +
                  std::string(WireTypeName(field.type)) + ", expected " +
                  std::string(WireTypeName(want)));
}

struct TaggedValue {
  std::string tag;
  float value = 0;
};

// Decodes a Summary.Value; returns nullopt for a value that is not a simple_value.
Result<std::optional<TaggedValue>> DecodeValue(std::string_view bytes, size_t base) {
  WireReader reader(bytes, base);
  TaggedValue out;
  bool has_simple_value = false;
  while (!reader.done()) {
    TY_ASSIGN_OR_RETURN(const WireField field, reader.Next());
    if (field.number == kValueTag) {
      TY_RETURN_IF_ERROR(ExpectWireType(field, WireType::kLengthDelimited, "Summary.Value.tag"));
      out.tag = std::string(field.bytes);
    } else if (field.number == kValueSimpleValue) {
      TY_RETURN_IF_ERROR(ExpectWireType(field, WireType::kFixed32, "Summary.Value.simple_value"));
      out.value = std::bit_cast<float>(static_cast<uint32_t>(field.value));
      has_simple_value = true;
    } else if (IsOtherValueKind(field.number)) {
      has_simple_value = false;
    }
  }
  if (!has_simple_value) return std::optional<TaggedValue>();
  return std::optional<TaggedValue>(std::move(out));
}

Status DecodeSummary(std::string_view bytes, size_t base, std::vector<TaggedValue>& values) {
  WireReader reader(bytes, base);
  while (!reader.done()) {
    TY_ASSIGN_OR_RETURN(const WireField field, reader.Next());
    if (field.number != kSummaryValue) continue;
    TY_RETURN_IF_ERROR(ExpectWireType(field, WireType::kLengthDelimited, "Summary.value"));
    TY_ASSIGN_OR_RETURN(std::optional<TaggedValue> value,
                        DecodeValue(field.bytes, field.bytes_offset));
    if (value) values.push_back(std::move(*value));
  }
  return Status::Ok();
}

// Decodes one Event and appends a point per scalar value it carries.
Status DecodeEvent(std::string_view payload, size_t base, std::vector<ScalarPoint>& points) {
  WireReader reader(payload, base);
  double wall_time = 0;
  int64_t step = 0;
  std::vector<TaggedValue> values;
  while (!reader.done()) {
    TY_ASSIGN_OR_RETURN(const WireField field, reader.Next());
    if (field.number == kEventWallTime) {
      TY_RETURN_IF_ERROR(ExpectWireType(field, WireType::kFixed64, "Event.wall_time"));
      wall_time = std::bit_cast<double>(field.value);
    } else if (field.number == kEventStep) {
      TY_RETURN_IF_ERROR(ExpectWireType(field, WireType::kVarint, "Event.step"));
      step = static_cast<int64_t>(field.value);
    } else if (field.number == kEventSummary) {
      TY_RETURN_IF_ERROR(ExpectWireType(field, WireType::kLengthDelimited, "Event.summary"));
      TY_RETURN_IF_ERROR(DecodeSummary(field.bytes, field.bytes_offset, values));
    } else if (IsOtherEventWhat(field.number)) {
      values.clear();
    }
  }
  if (values.empty()) return Status::Ok();
  const double ms = wall_time * 1000.0;
  // 2^63 ms; anything at or beyond it (or NaN) does not fit an int64.
  if (!(std::fabs(ms) < 0x1p63)) {
    return DataLoss(At(base) + ": Event.wall_time " + std::to_string(wall_time) +
                    " is not a representable time");
  }
  const int64_t time_ms = std::llround(ms);
  for (TaggedValue& v : values) {
    points.push_back(ScalarPoint{std::move(v.tag), step, time_ms, static_cast<double>(v.value)});
  }
  return Status::Ok();
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (const char c : data) crc = (crc >> 8) ^ kCrc32cTable[(crc ^ static_cast<uint8_t>(c)) & 0xff];
  return crc ^ 0xffffffffu;
}

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string FrameRecord(std::string_view payload) {
  std::string out;
  out.reserve(kRecordHeaderSize + payload.size() + kRecordFooterSize);
  PutFixed64(out, payload.size());
  PutFixed32(out, MaskCrc32c(Crc32c(out)));
  out.append(payload);
  PutFixed32(out, MaskCrc32c(Crc32c(payload)));
  return out;
}

std::string EncodeFileVersionEvent(int64_t time_ms) {
  std::string out = EventPrefix(time_ms, 0);
  PutLengthDelimited(out, kEventFileVersion, kFileVersion);
  return out;
}

std::string EncodeScalarEvent(const ScalarPoint& p) {
  std::string value;
  if (!p.tag.empty()) PutLengthDelimited(value, kValueTag, p.tag);
  PutTag(value, kValueSimpleValue, WireType::kFixed32);
  PutFixed32(value, std::bit_cast<uint32_t>(ToFloat32(p.value)));

  std::string summary;
  PutLengthDelimited(summary, kSummaryValue, value);

  std::string out = EventPrefix(p.time_ms, p.step);
  PutLengthDelimited(out, kEventSummary, summary);
  return out;
}

std::string WriteEventFile(const std::vector<ScalarPoint>& points, int64_t created_ms) {
  std::string out = FrameRecord(EncodeFileVersionEvent(created_ms));
  for (const ScalarPoint& p : points) out += FrameRecord(EncodeScalarEvent(p));
  return out;
}

std::string EventFileName(int64_t created_ms, std::string_view host) {
  int64_t seconds = created_ms / 1000;
  if (created_ms % 1000 < 0) --seconds;  // floor, not truncation
  char buf[32];
  std::snprintf(buf, sizeof buf, "%010" PRId64, seconds);
  std::string out = "events.out.tfevents.";
  out += buf;
  out += '.';
  for (const char c : host) {
    const bool safe = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
    out += safe ? c : '_';
  }
  return out;
}

Result<std::vector<ScalarPoint>> ReadEventFile(std::string_view bytes) {
  std::vector<ScalarPoint> points;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const std::string record_at = "record at byte " + std::to_string(pos) + ": ";
    const size_t left = bytes.size() - pos;
    if (left < kRecordHeaderSize) {
      return DataLoss(record_at + "truncated header: " + std::to_string(left) +
                      " bytes left, a record header is " + std::to_string(kRecordHeaderSize));
    }
    const std::string_view length_bytes = bytes.substr(pos, 8);
    const uint32_t stored_length_crc = LoadFixed32(bytes.substr(pos + 8, 4));
    const uint32_t length_crc = MaskCrc32c(Crc32c(length_bytes));
    if (stored_length_crc != length_crc) {
      return DataLoss(record_at + "length CRC mismatch (stored " + Hex32(stored_length_crc) +
                      ", computed " + Hex32(length_crc) + ")");
    }
    const uint64_t length = LoadFixed64(length_bytes);
    const size_t after_header = left - kRecordHeaderSize;
    if (after_header < kRecordFooterSize || length > after_header - kRecordFooterSize) {
      return DataLoss(record_at + "truncated: length " + std::to_string(length) + " needs " +
                      std::to_string(length) + " + " + std::to_string(kRecordFooterSize) +
                      " bytes after the header, " + std::to_string(after_header) + " left");
    }
    const size_t payload_at = pos + kRecordHeaderSize;
    const std::string_view payload = bytes.substr(payload_at, length);
    const uint32_t stored_data_crc = LoadFixed32(bytes.substr(payload_at + length, 4));
    const uint32_t data_crc = MaskCrc32c(Crc32c(payload));
    if (stored_data_crc != data_crc) {
      return DataLoss(record_at + "data CRC mismatch (stored " + Hex32(stored_data_crc) +
                      ", computed " + Hex32(data_crc) + ")");
    }
    if (Status s = DecodeEvent(payload, payload_at, points); !s.ok()) {
      return DataLoss(record_at + "Event at " + s.message());
    }
    pos = payload_at + length + kRecordFooterSize;
  }
  return points;
}

}  // namespace trainyard::track
