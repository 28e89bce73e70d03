#include "protocol/base64.h"

#include <array>
#include <cstdint>

namespace trainyard::protocol {
namespace {

constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr int8_t kNotDigit = -1;

// The value of each character of the alphabet; kNotDigit for the rest ("=" included).
constexpr std::array<int8_t, 256> ValueTable() {
  std::array<int8_t, 256> value{};
  value.fill(kNotDigit);
  for (int i = 0; i < 64; ++i)
    value[static_cast<unsigned char>(kDigits[i])] = static_cast<int8_t>(i);
  return value;
}
constexpr std::array<int8_t, 256> kValue = ValueTable();

}  // namespace

std::string EncodeBase64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  const auto byte = [&](size_t i) {
    return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i]));
  };
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    out += kDigits[v >> 18 & 63];
    out += kDigits[v >> 12 & 63];
    out += kDigits[v >> 6 & 63];
    out += kDigits[v & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    const uint32_t v = byte(i) << 16 | (rest == 2 ? byte(i + 1) << 8 : 0);
    out += kDigits[v >> 18 & 63];
    out += kDigits[v >> 12 & 63];
    out += rest == 2 ? kDigits[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> DecodeBase64(std::string_view text, std::string_view field) {
  if (text.size() % 4 != 0) {
    return InvalidArgument(std::string(field) + ": not base64: the length, " +
                           std::to_string(text.size()) + ", is not a multiple of 4");
  }
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  const size_t body = text.size() - padding;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int pending = 0;  // bits held in `bits` not yet written out
  for (size_t i = 0; i < body; ++i) {
    const int8_t v = kValue[static_cast<unsigned char>(text[i])];
    if (v == kNotDigit) {
      return InvalidArgument(std::string(field) + ": not base64 at byte " + std::to_string(i) +
                             (text[i] == '=' ? " (padding before the end)" : ""));
    }
    bits = (bits << 6 | static_cast<uint32_t>(v)) & 0xffffff;
    pending += 6;
    if (pending >= 8) {
      pending -= 8;
      out += static_cast<char>(bits >> pending & 0xff);
    }
  }
  // What is left (2 or 4 bits before the padding) is no data.
  return out;
}

}  // namespace trainyard::protocol
