#include "protocol/base64.h"

#include <gtest/gtest.h>

#include <random>

namespace trainyard::protocol {
namespace {

std::string Error(std::string_view text) {
  auto r = DecodeBase64(text, "logs.data_b64");
  return r.ok() ? "ok" : r.status().message();
}

TEST(Base64Test, EncodesWithPadding) {
  EXPECT_EQ(EncodeBase64(""), "");
  EXPECT_EQ(EncodeBase64("f"), "Zg==");
  EXPECT_EQ(EncodeBase64("fo"), "Zm8=");
  EXPECT_EQ(EncodeBase64("foo"), "Zm9v");
  EXPECT_EQ(EncodeBase64("foob"), "Zm9vYg==");
  EXPECT_EQ(EncodeBase64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(EncodeBase64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(EncodeBase64(std::string("\xff\x00\xfe", 3)), "/wD+");
}

TEST(Base64Test, DecodesWhatItEncodesAndStripsOnlyThePadding) {
  EXPECT_EQ(*DecodeBase64("", "f"), "");
  EXPECT_EQ(*DecodeBase64("Zg==", "f"), "f");
  EXPECT_EQ(*DecodeBase64("Zm8=", "f"), "fo");
  EXPECT_EQ(*DecodeBase64("Zm9v", "f"), "foo");
  EXPECT_EQ(*DecodeBase64("aGVsbG8=", "f"), "hello");
  EXPECT_EQ(*DecodeBase64("aGVsbG8h", "f"), "hello!");
  // Bytes that are zero, like the padding stands for, are data when they are there.
  EXPECT_EQ(*DecodeBase64("AAAA", "f"), std::string(3, '\0'));
  EXPECT_EQ(*DecodeBase64("AA==", "f"), std::string(1, '\0'));
  EXPECT_EQ(*DecodeBase64("/wD+", "f"), std::string("\xff\x00\xfe", 3));
}

TEST(Base64Test, RoundTripsEveryLengthAndByte) {
  std::mt19937 random(20261129);
  for (size_t n = 0; n < 300; ++n) {
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(random() & 0xff);
    const std::string text = EncodeBase64(bytes);
    EXPECT_EQ(text.size(), (n + 2) / 3 * 4);
    auto back = DecodeBase64(text, "f");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, bytes) << n;
  }
}

TEST(Base64Test, LargeInputsGoThroughInPieces) {
  // Larger than one piece of either direction (3 MiB of bytes, 4 MiB of text).
  std::string bytes(7 * (1 << 20) + 1, '\0');  // 2 bytes in the last group: one '='
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131) >> 3);
  const std::string text = EncodeBase64(bytes);
  EXPECT_EQ(text.size(), (bytes.size() + 2) / 3 * 4);
  EXPECT_EQ(text.substr(0, 4), EncodeBase64(bytes.substr(0, 3)));
  EXPECT_EQ(text.substr(text.size() - 4), EncodeBase64(bytes.substr(bytes.size() - 2)));
  EXPECT_EQ(text.back(), '=');
  // Where the encoder's pieces meet (every 3 MiB of bytes), the text runs on unbroken.
  const size_t seam = (3 << 20) / 3 * 4;
  EXPECT_EQ(text.substr(seam - 4, 8), EncodeBase64(bytes.substr((3 << 20) - 3, 6)));
  auto back = DecodeBase64(text, "f");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, bytes);
}

TEST(Base64Test, BadInputNamesTheFieldAndWhere) {
  EXPECT_EQ(Error("a"), "logs.data_b64: not base64: the length, 1, is not a multiple of 4");
  EXPECT_EQ(Error("aGVsbG8"), "logs.data_b64: not base64: the length, 7, is not a multiple of 4");
  EXPECT_EQ(Error("a*=="), "logs.data_b64: not base64 at byte 1");
  EXPECT_EQ(Error("aGVs bG8"), "logs.data_b64: not base64 at byte 4");
  // URL-safe base64 is another alphabet.
  EXPECT_EQ(Error("_-8="), "logs.data_b64: not base64 at byte 0");
  EXPECT_EQ(Error(std::string("Zm9\0", 4)), "logs.data_b64: not base64 at byte 3");
  EXPECT_EQ(Error("Zm9v\xc3\xa9Zg"), "logs.data_b64: not base64 at byte 4");
}

TEST(Base64Test, PaddingOnlyAtTheEnd) {
  EXPECT_EQ(Error("ab=c"), "logs.data_b64: not base64 at byte 2 (padding before the end)");
  EXPECT_EQ(Error("Zg==Zg=="), "logs.data_b64: not base64 at byte 2 (padding before the end)");
  EXPECT_EQ(Error("a==="), "logs.data_b64: not base64 at byte 1 (padding before the end)");
  EXPECT_EQ(Error("===="), "logs.data_b64: not base64 at byte 0 (padding before the end)");
  EXPECT_EQ(Error("=AAA"), "logs.data_b64: not base64 at byte 0 (padding before the end)");
}

// What OpenSSL's decoder lets through by itself: whitespace and line breaks around the
// text, '-' at its end. The protocol's text has none of them.
TEST(Base64Test, NothingAroundTheText) {
  EXPECT_EQ(Error(" aGVsbG8=   "), "logs.data_b64: not base64 at byte 0");
  EXPECT_EQ(Error("aGVsbG8h\r\n\r\n"), "logs.data_b64: not base64 at byte 8");
  EXPECT_EQ(Error("aGVs\nbG8h"),
            "logs.data_b64: not base64: the length, 9, is not a multiple of 4");
  EXPECT_EQ(Error("aGVs-\n\n\n"), "logs.data_b64: not base64 at byte 4");
  EXPECT_EQ(Error("aGVsbG8-"), "logs.data_b64: not base64 at byte 7");
}

}  // namespace
}  // namespace trainyard::protocol
