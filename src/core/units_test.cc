#include "core/units.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <limits>

#include "core/names.h"

namespace trainyard {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

TEST(UnitsTest, ParsesDurations) {
  EXPECT_EQ(*ParseDuration("90s"), seconds(90));
  EXPECT_EQ(*ParseDuration("30m"), minutes(30));
  EXPECT_EQ(*ParseDuration("1h30m"), minutes(90));
  EXPECT_EQ(*ParseDuration("2d"), hours(48));
  EXPECT_EQ(*ParseDuration("250ms"), Duration(250));
  EXPECT_EQ(*ParseDuration("120"), seconds(120));
  EXPECT_EQ(*ParseDuration("0"), Duration(0));
}

TEST(UnitsTest, ParsesSlurmTimeForms) {
  EXPECT_EQ(*ParseDuration("10:30"), seconds(630));               // MM:SS
  EXPECT_EQ(*ParseDuration("02:00:00"), hours(2));                // HH:MM:SS
  EXPECT_EQ(*ParseDuration("1-00:00:00"), hours(24));             // D-HH:MM:SS
  EXPECT_EQ(*ParseDuration("1-12"), hours(36));                   // D-HH
  EXPECT_EQ(*ParseDuration("2-01:30"), hours(49) + minutes(30));  // D-HH:MM
}

TEST(UnitsTest, RejectsBadDurationsWithTheValue) {
  for (const char* bad : {"", "banana", "10x", "h", "1h30", "-5m", "1::2", "1:2:3:4", "1.5h"}) {
    auto r = ParseDuration(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string("\"") + bad + "\""), std::string::npos)
        << r.status().message();
  }
}

TEST(UnitsTest, RejectsOverflowingDurations) {
  EXPECT_FALSE(ParseDuration("99999999999999999999s").ok());
  EXPECT_FALSE(ParseDuration("9223372036854775807d").ok());
  EXPECT_FALSE(ParseDuration("9223372036854775807").ok());
}

TEST(UnitsTest, FormatsDurationsCanonically) {
  EXPECT_EQ(FormatDuration(Duration(0)), "0s");
  EXPECT_EQ(FormatDuration(minutes(90)), "1h30m");
  EXPECT_EQ(FormatDuration(hours(48)), "2d");
  EXPECT_EQ(FormatDuration(Duration(1250)), "1s250ms");
}

RC_GTEST_PROP(UnitsTest, DurationRoundTrips, ()) {
  const int64_t ms = *rc::gen::inRange<int64_t>(0, int64_t{400} * 86'400'000);
  auto back = ParseDuration(FormatDuration(Duration(ms)));
  RC_ASSERT(back.ok());
  RC_ASSERT(back->count() == ms);
}

TEST(UnitsTest, ParsesMemory) {
  EXPECT_EQ(*ParseMemory("256Gi"), 256 * kGiB);
  EXPECT_EQ(*ParseMemory("512Mi"), 512 * kMiB);
  EXPECT_EQ(*ParseMemory("1Ti"), kTiB);
  EXPECT_EQ(*ParseMemory("64G"), int64_t{64'000'000'000});
  EXPECT_EQ(*ParseMemory("1000"), 1000);
  EXPECT_FALSE(ParseMemory("lots").ok());
  EXPECT_FALSE(ParseMemory("-5Gi").ok());
  EXPECT_FALSE(ParseMemory("5 Gi").ok());
  EXPECT_FALSE(ParseMemory("99999999999Pi").ok());
}

RC_GTEST_PROP(UnitsTest, MemoryRoundTrips, ()) {
  const int64_t bytes = *rc::gen::inRange<int64_t>(0, int64_t{1} << 50);
  auto back = ParseMemory(FormatMemory(bytes));
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == bytes);
}

TEST(UnitsTest, SaturatingArithmeticNeverWraps) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(SaturatingAdd(kMax, 1), kMax);
  EXPECT_EQ(SaturatingMul(int64_t{1'000'000'000'000}, 1'000'000'000), kMax);
  EXPECT_EQ(SaturatingMul(3, 4), 12);
}

TEST(UnitsTest, FormatsTimestamps) {
  EXPECT_EQ(FormatTimestamp(Timestamp(Duration(0))), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatTimestamp(Timestamp(Duration(1'795'942'800'123))), "2026-11-29T09:00:00.123Z");
}

TEST(ParseDurationTest, QuotesBadInputEscaped) {
  auto d = ParseDuration("5\nminutes");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(std::string(d.status().message()).find('\n'), std::string::npos)
      << d.status().message();
  EXPECT_NE(std::string(d.status().message()).find("\"5\\x0aminutes\""), std::string::npos)
      << d.status().message();
}

TEST(QuoteForMessageTest, CutsLongValuesBetweenCharactersNotInsideOne) {
  const std::string value = std::string(79, 'a') + "\xc3\xa9\xc3\xa9tail";  // 79 + e-acute...
  const std::string q = QuoteForMessage(value);
  // 80 characters kept (the 80th is the first e-acute, both of its bytes), then "...".
  EXPECT_EQ(q, "\"" + std::string(79, 'a') + "\xc3\xa9...\"");
  EXPECT_EQ(QuoteForMessage("a\x1b[2Jb\"c"), "\"a\\x1b[2Jb\\\"c\"");
  // A byte that is no part of a valid UTF-8 character (YAML's "\x80" makes one) is
  // escaped, so the message stays valid UTF-8.
  EXPECT_EQ(QuoteForMessage("{{jo\x80id}} \xc3\xa9"), "\"{{jo\\x80id}} \xc3\xa9\"");
  EXPECT_EQ(QuoteForMessage("\xc3"), "\"\\xc3\"");
}

}  // namespace
}  // namespace trainyard
