#include "track/tensorboard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace trainyard::track {
namespace {

using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<uint8_t> bytes) {
  std::string out;
  for (const uint8_t b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

// A length-delimited field: its tag byte, the varint length, the bytes.
std::string LengthDelimited(uint8_t tag, std::string_view body) {
  std::string out(1, static_cast<char>(tag));
  for (uint64_t n = body.size(); true; n >>= 7) {
    out.push_back(static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)));
    if (n < 0x80) break;
  }
  out.append(body);
  return out;
}

// A point as ReadEventFile returns it: the value narrowed to float and widened back.
ScalarPoint AsRead(ScalarPoint p) {
  p.value = static_cast<double>(static_cast<float>(p.value));
  return p;
}

// Equality that treats two NaNs as equal and tells -0.0 from 0.0.
void ExpectSamePoint(const ScalarPoint& got, const ScalarPoint& want, size_t index) {
  SCOPED_TRACE("point " + std::to_string(index));
  EXPECT_EQ(got.tag, want.tag);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.time_ms, want.time_ms);
  if (std::isnan(want.value)) {
    EXPECT_TRUE(std::isnan(got.value)) << got.value;
  } else {
    EXPECT_EQ(got.value, want.value);
    EXPECT_EQ(std::signbit(got.value), std::signbit(want.value));
  }
}

void ExpectSamePoints(const std::vector<ScalarPoint>& got, const std::vector<ScalarPoint>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ExpectSamePoint(got[i], want[i], i);
}

// Offsets of the records in an event file written by WriteEventFile.
std::vector<size_t> RecordOffsets(const std::string& file) {
  std::vector<size_t> offsets;
  size_t pos = 0;
  while (pos < file.size()) {
    offsets.push_back(pos);
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(file[pos + i]);
    pos += 12 + length + 4;
  }
  return offsets;
}

std::string ErrorOf(std::string_view file) {
  Result<std::vector<ScalarPoint>> r = ReadEventFile(file);
  if (r.ok()) return "OK";
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  return r.status().message();
}

TEST(TensorboardTest, Crc32cKnownAnswers) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);  // RFC 3720 B.4
}

TEST(TensorboardTest, MaskCrc32cRotatesAndAddsTheConstant) {
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(0xE3069283u), 0xc78ab0e5u);
  EXPECT_EQ(MaskCrc32c(1), (1u << 17) + 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(1u << 15), 1u + 0xa282ead8u);
}

TEST(TensorboardTest, FrameRecordLayout) {
  // Length 3 (uint64 LE), masked CRC of the length bytes, payload, masked CRC of it.
  EXPECT_EQ(FrameRecord("abc"), Bytes({0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  //
                                       0xb0, 0x99, 0x49, 0x0e,                          //
                                       'a', 'b', 'c',                                   //
                                       0x6e, 0x57, 0xf1, 0x21}));
  const std::string empty = FrameRecord("");
  ASSERT_EQ(empty.size(), 16u);
  EXPECT_EQ(empty.substr(0, 8), std::string(8, '\0'));
  const uint32_t masked_empty = MaskCrc32c(0);
  EXPECT_EQ(empty.substr(12), Bytes({static_cast<uint8_t>(masked_empty & 0xff),
                                     static_cast<uint8_t>((masked_empty >> 8) & 0xff),
                                     static_cast<uint8_t>((masked_empty >> 16) & 0xff),
                                     static_cast<uint8_t>(masked_empty >> 24)}));
}

TEST(TensorboardTest, EncodesOneScalarEventByteForByte) {
  const std::string want = Bytes({
      0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,  // wall_time: 1.5 (fixed64)
      0x10, 0x05,                                            // step: 5
      0x2a, 0x0d,                                            // summary, 13 bytes
      0x0a, 0x0b,                                            //   value, 11 bytes
      0x0a, 0x04, 'l',  'o',  's',  's',                     //     tag: "loss"
      0x15, 0x00, 0x00, 0x00, 0x3f,                          //     simple_value: 0.5f
  });
  EXPECT_EQ(EncodeScalarEvent({.tag = "loss", .step = 5, .time_ms = 1500, .value = 0.5}), want);
}

TEST(TensorboardTest, EncodesNegativeStepAsTenByteVarintAndLeavesDefaultsOut) {
  // wall_time 0 and an empty tag are proto3 defaults and are left out; simple_value
  // is in a oneof and is always written.
  EXPECT_EQ(EncodeScalarEvent({.tag = "", .step = -1, .time_ms = 0, .value = 0}),
            Bytes({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,  //
                   0x2a, 0x07, 0x0a, 0x05, 0x15, 0x00, 0x00, 0x00, 0x00}));
}

TEST(TensorboardTest, EncodesFileVersionEvent) {
  std::string want = Bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40,  // 2.5
                            0x1a, 0x0d});
  want += "brain.Event:2";
  EXPECT_EQ(EncodeFileVersionEvent(2500), want);
}

TEST(TensorboardTest, FileVersionRecordHeaderMatchesTensorFlowFiles) {
  // Every event file TensorFlow writes opens with these 12 bytes: a 24-byte payload
  // (wall_time, file_version "brain.Event:2") and its masked length CRC.
  const std::string file = WriteEventFile({}, 1'700'000'000'123);
  EXPECT_EQ(file.substr(0, 12),
            Bytes({0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa3, 0x7f, 0x4b, 0x22}));
}

TEST(TensorboardTest, WriteEventFileIsFileVersionThenOneRecordPerPoint) {
  const std::vector<ScalarPoint> points = {{"loss", 1, 1000, 2.0}, {"lr", 1, 1000, 0.1}};
  const std::string file = WriteEventFile(points, 999);
  EXPECT_EQ(file, FrameRecord(EncodeFileVersionEvent(999)) +
                      FrameRecord(EncodeScalarEvent(points[0])) +
                      FrameRecord(EncodeScalarEvent(points[1])));
}

TEST(TensorboardTest, EventFileNameUsesSecondsAndHost) {
  EXPECT_EQ(EventFileName(1'700'000'000'999, "gpu-node-1"),
            "events.out.tfevents.1700000000.gpu-node-1");
  EXPECT_EQ(EventFileName(5'000, "node.example.com"),
            "events.out.tfevents.0000000005.node.example.com");
  EXPECT_EQ(EventFileName(5'000, "../a/b c"), "events.out.tfevents.0000000005..._a_b_c");
}

TEST(TensorboardTest, RoundTripsManyPoints) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<ScalarPoint> points = {
      {"loss", 0, 1'700'000'000'000, 2.5},
      {"train/loss", 1, 1'700'000'000'001, 2.25},
      {"eval/accuracy", 1'000'000'000'000, 1'700'000'000'123, 0.875},
      {"lr", -1, 1'700'000'001'000, 3e-4},
      {"lr", std::numeric_limits<int64_t>::min(), 0, -0.0},
      {"grad_norm", std::numeric_limits<int64_t>::max(), 1, nan},
      {"grad_norm", 7, 2, inf},
      {"grad_norm", 8, 3, -inf},
      {"", 9, 4, 1e-40},  // a float denormal
      {"uni/\xc3\xa9t\xc3\xa9", 10, 5, -123456.789},
  };
  Result<std::vector<ScalarPoint>> read = ReadEventFile(WriteEventFile(points, 1'699'999'999'000));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  std::vector<ScalarPoint> want;
  for (const ScalarPoint& p : points) want.push_back(AsRead(p));
  ExpectSamePoints(*read, want);
}

TEST(TensorboardTest, ValuesAreNarrowedToFloatWithRoundToNearest) {
  const double float_max = std::numeric_limits<float>::max();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<ScalarPoint> points = {
      {"a", 0, 0, 0.1},
      {"b", 0, 0, 1e300},
      {"c", 0, 0, -1e300},
      {"d", 0, 0, float_max + 0x1p102},  // below the midpoint: rounds down to FLT_MAX
      {"e", 0, 0, float_max + 0x1p103},  // the midpoint: ties to even, which is inf
  };
  Result<std::vector<ScalarPoint>> read = ReadEventFile(WriteEventFile(points, 0));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->size(), 5u);
  EXPECT_EQ((*read)[0].value, static_cast<double>(0.1f));
  EXPECT_EQ((*read)[1].value, inf);
  EXPECT_EQ((*read)[2].value, -inf);
  EXPECT_EQ((*read)[3].value, float_max);
  EXPECT_EQ((*read)[4].value, inf);
}

TEST(TensorboardTest, EmptyFileAndFileVersionOnlyReadAsNoPoints) {
  Result<std::vector<ScalarPoint>> empty = ReadEventFile("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  Result<std::vector<ScalarPoint>> header_only = ReadEventFile(WriteEventFile({}, 1234));
  ASSERT_TRUE(header_only.ok()) << header_only.status().ToString();
  EXPECT_TRUE(header_only->empty());
}

TEST(TensorboardTest, SkipsUnknownFieldsOfEveryWireType) {
  // Fields 15..18 with wire types varint, fixed64, length-delimited and fixed32.
  const std::string unknown = Bytes({0x78, 0x96, 0x01,                             //
                                     0x81, 0x01, 1,    2,   3,   4,   5, 6, 7, 8,  //
                                     0x8a, 0x01, 0x03, 'x', 'y', 'z',              //
                                     0x95, 0x01, 9,    9,   9,   9});
  const std::string value = unknown + Bytes({0x0a, 0x01, 't'}) + unknown +
                            Bytes({0x15, 0x00, 0x00, 0x80, 0x3f}) + unknown;  // 1.0f
  const std::string summary = unknown + LengthDelimited(0x0a, value) + unknown;
  const std::string event =
      unknown + Bytes({0x10, 0x2a}) + unknown + LengthDelimited(0x2a, summary) + unknown;
  Result<std::vector<ScalarPoint>> read = ReadEventFile(FrameRecord(event));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ExpectSamePoints(*read, {{"t", 42, 0, 1.0}});
}

TEST(TensorboardTest, SkipsNonScalarValuesAndEventsAndReadsEveryScalarOfASummary) {
  // Event{step 3, summary{value{tag "img", image{...}}, value{tag "a", 1.0f},
  // value{tag "b", 2.0f}}}, then an Event with only a log_message (field 6).
  const std::string image_value = Bytes({0x0a, 0x03, 'i', 'm', 'g', 0x22, 0x02, 0x08, 0x01});
  const std::string a_value = Bytes({0x0a, 0x01, 'a', 0x15, 0x00, 0x00, 0x80, 0x3f});
  const std::string b_value = Bytes({0x0a, 0x01, 'b', 0x15, 0x00, 0x00, 0x00, 0x40});
  std::string summary;
  for (const std::string& v : {image_value, a_value, b_value}) {
    summary += LengthDelimited(0x0a, v);
  }
  const std::string event = Bytes({0x10, 0x03}) + LengthDelimited(0x2a, summary);
  const std::string log_event = Bytes({0x10, 0x04, 0x32, 0x02, 0x08, 0x01});
  Result<std::vector<ScalarPoint>> read = ReadEventFile(
      FrameRecord(EncodeFileVersionEvent(1)) + FrameRecord(event) + FrameRecord(log_event));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ExpectSamePoints(*read, {{"a", 3, 0, 1.0}, {"b", 3, 0, 2.0}});
}

TEST(TensorboardTest, FlippedLengthByteIsALengthCrcMismatchAtThatRecord) {
  std::string file = WriteEventFile({{"loss", 1, 10, 1.0}, {"loss", 2, 20, 0.5}}, 0);
  const std::vector<size_t> offsets = RecordOffsets(file);
  ASSERT_EQ(offsets.size(), 3u);
  file[offsets[2] + 1] ^= 0x40;
  EXPECT_THAT(ErrorOf(file),
              HasSubstr("record at byte " + std::to_string(offsets[2]) + ": length CRC mismatch"));
}

TEST(TensorboardTest, FlippedPayloadByteIsADataCrcMismatchAtThatRecord) {
  std::string file = WriteEventFile({{"loss", 1, 10, 1.0}, {"loss", 2, 20, 0.5}}, 0);
  const std::vector<size_t> offsets = RecordOffsets(file);
  file[offsets[1] + 12 + 3] ^= 0x01;
  EXPECT_THAT(ErrorOf(file),
              HasSubstr("record at byte " + std::to_string(offsets[1]) + ": data CRC mismatch"));
}

TEST(TensorboardTest, TruncatedFileNamesTheLastRecord) {
  const std::string file = WriteEventFile({{"loss", 1, 10, 1.0}, {"loss", 2, 20, 0.5}}, 0);
  const std::vector<size_t> offsets = RecordOffsets(file);
  const std::string last = "record at byte " + std::to_string(offsets[2]) + ": ";
  EXPECT_THAT(ErrorOf(file.substr(0, file.size() - 1)), HasSubstr(last + "truncated: length"));
  EXPECT_THAT(ErrorOf(file.substr(0, offsets[2] + 14)), HasSubstr(last + "truncated: length"));
  EXPECT_THAT(ErrorOf(file.substr(0, offsets[2] + 5)),
              HasSubstr(last + "truncated header: 5 bytes left"));
}

TEST(TensorboardTest, LengthPastTheEndWithAValidLengthCrcIsTruncation) {
  std::string huge_length(8, '\xff');
  std::string file = huge_length;
  const uint32_t crc = MaskCrc32c(Crc32c(huge_length));
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  file += "some bytes";
  EXPECT_THAT(ErrorOf(file), HasSubstr("record at byte 0: truncated: length 18446744073709551615"));
}

TEST(TensorboardTest, MalformedEventsNameTheByte) {
  const std::string prefix = FrameRecord(EncodeFileVersionEvent(1));
  const std::string record = "record at byte " + std::to_string(prefix.size()) + ": ";
  const size_t payload_at = prefix.size() + 12;
  auto at = [&](size_t offset) { return "byte " + std::to_string(payload_at + offset) + ": "; };

  // step's varint ends with the payload.
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x10, 0x80, 0x80}))),
              HasSubstr(record + "Event at " + at(1) + "truncated varint"));
  // 11 continuation bytes.
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                                  0x80, 0x80, 0x80, 0x01}))),
              HasSubstr(at(1) + "varint longer than 10 bytes"));
  // A truncated tag.
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x80}))), HasSubstr(at(0) + "truncated varint"));
  // summary claims 5 bytes, 1 is there.
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x2a, 0x05, 0x0a}))),
              HasSubstr(at(0) + "field 5 (length-delimited) needs 5 bytes, only 1 left"));
  // wall_time with 3 of its 8 bytes.
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x09, 0x00, 0x00, 0x00}))),
              HasSubstr(at(0) + "field 1 (fixed64) needs 8 bytes, only 3 left"));
  // Inside the nested Value: simple_value with 2 of its 4 bytes.
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x2a, 0x05, 0x0a, 0x03, 0x15, 0x00, 0x00}))),
              HasSubstr(at(4) + "field 2 (fixed32) needs 4 bytes, only 2 left"));
  // A known field with the wrong wire type.
  EXPECT_THAT(
      ErrorOf(prefix + FrameRecord(Bytes({0x08, 0x01}))),
      HasSubstr(at(0) + "Event.wall_time (field 1) has wire type varint, expected fixed64"));
  // Groups and invalid wire types, field number 0.
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x7b}))),
              HasSubstr(at(0) + "field 15 uses wire type 3"));
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x7e}))),
              HasSubstr(at(0) + "field 15 has invalid wire type 6"));
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(Bytes({0x00, 0x00}))),
              HasSubstr(at(0) + "invalid field number 0"));
  // A wall_time that is no time in milliseconds.
  const std::string nan_time = Bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x7f, 0x2a,
                                      0x07, 0x0a, 0x05, 0x15, 0, 0, 0, 0});
  EXPECT_THAT(ErrorOf(prefix + FrameRecord(nan_time)),
              HasSubstr("Event.wall_time nan is not a representable time"));
}

std::vector<ScalarPoint> RandomPoints(std::mt19937& rng) {
  static const std::vector<std::string> kTags = {"loss", "train/loss",          "eval/acc", "",
                                                 "lr",   std::string(200, 'x'), "\xc3\xa9"};
  static const std::vector<double> kSpecial = {std::numeric_limits<double>::quiet_NaN(),
                                               std::numeric_limits<double>::infinity(),
                                               -std::numeric_limits<double>::infinity(),
                                               -0.0,
                                               0.0,
                                               1e-45,
                                               3.4e38,
                                               -1e300};
  static const std::vector<int64_t> kSteps = {
      0, 1, -1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 127, 128};
  std::uniform_int_distribution<int> count(0, 40);
  std::uniform_int_distribution<size_t> tag(0, kTags.size() - 1);
  std::uniform_int_distribution<size_t> special(0, kSpecial.size() - 1);
  std::uniform_int_distribution<size_t> special_step(0, kSteps.size() - 1);
  std::uniform_int_distribution<int64_t> step(-1'000'000'000'000, 1'000'000'000'000);
  std::uniform_int_distribution<int64_t> time_ms(0, 4'000'000'000'000);
  std::uniform_real_distribution<double> value(-1e6, 1e6);
  std::bernoulli_distribution coin(0.2);

  std::vector<ScalarPoint> points(count(rng));
  for (ScalarPoint& p : points) {
    p.tag = kTags[tag(rng)];
    p.step = coin(rng) ? kSteps[special_step(rng)] : step(rng);
    p.time_ms = coin(rng) ? 0 : time_ms(rng);
    p.value = coin(rng) ? kSpecial[special(rng)] : value(rng);
  }
  return points;
}

TEST(TensorboardTest, PropertyRandomPointListsRoundTrip) {
  std::mt19937 rng(20240601);
  for (int iteration = 0; iteration < 500; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    const std::vector<ScalarPoint> points = RandomPoints(rng);
    Result<std::vector<ScalarPoint>> read =
        ReadEventFile(WriteEventFile(points, 1'700'000'000'000));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    std::vector<ScalarPoint> want;
    for (const ScalarPoint& p : points) want.push_back(AsRead(p));
    ExpectSamePoints(*read, want);
  }
}

TEST(TensorboardTest, PropertyEverySingleByteCorruptionIsDetected) {
  std::mt19937 rng(7);
  for (int iteration = 0; iteration < 300; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    std::string file = WriteEventFile(RandomPoints(rng), 1'700'000'000'000);
    std::uniform_int_distribution<size_t> where(0, file.size() - 1);
    std::uniform_int_distribution<int> flip(1, 255);
    const size_t at = where(rng);
    file[at] = static_cast<char>(file[at] ^ flip(rng));
    EXPECT_FALSE(ReadEventFile(file).ok()) << "byte " << at;
  }
}

TEST(TensorboardTest, PropertyTruncationIsAnErrorUnlessAtARecordBoundary) {
  std::mt19937 rng(11);
  for (int iteration = 0; iteration < 300; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    const std::string file = WriteEventFile(RandomPoints(rng), 1'700'000'000'000);
    const std::vector<size_t> offsets = RecordOffsets(file);
    std::uniform_int_distribution<size_t> cut(0, file.size() - 1);
    const size_t length = cut(rng);
    const bool at_boundary =
        length == 0 || std::find(offsets.begin(), offsets.end(), length) != offsets.end();
    EXPECT_EQ(ReadEventFile(std::string_view(file).substr(0, length)).ok(), at_boundary)
        << "cut at " << length;
  }
}

TEST(TensorboardTest, PropertyRandomPayloadsNeverReadOutOfBounds) {
  // Well-framed records of random bytes: the decoder must answer, not crash
  // (run under ASan/UBSan to check the "never out of bounds" half).
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> size(0, 64);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> pick(0, 4);
  const std::vector<uint8_t> kUseful = {0x09, 0x10, 0x2a, 0x0a, 0x15, 0x80, 0x01};
  int decoded = 0;
  for (int iteration = 0; iteration < 5000; ++iteration) {
    std::string payload;
    for (int n = size(rng); n > 0; --n) {
      const int b = pick(rng) == 0 ? byte(rng) : kUseful[byte(rng) % kUseful.size()];
      payload.push_back(static_cast<char>(b));
    }
    Result<std::vector<ScalarPoint>> r = ReadEventFile(FrameRecord(payload));
    if (r.ok()) {
      ++decoded;
    } else {
      EXPECT_THAT(r.status().message(), HasSubstr("record at byte 0: Event at byte "));
    }
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace trainyard::track
