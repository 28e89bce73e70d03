#include "protocol/base64.h"

#include <openssl/evp.h>

#include <array>
#include <cstdint>

namespace trainyard::protocol {
namespace {

// OpenSSL takes lengths as int: work in pieces well below INT_MAX, a multiple of 3
// bytes (4 characters) so that the pieces join without padding between them.
constexpr size_t kEncodePiece = 3 << 20;
constexpr size_t kDecodePiece = 4 << 20;

constexpr std::array<bool, 256> AlphabetTable() {
  std::array<bool, 256> in{};
  for (unsigned char c = 'A'; c <= 'Z'; ++c) in[c] = true;
  for (unsigned char c = 'a'; c <= 'z'; ++c) in[c] = true;
  for (unsigned char c = '0'; c <= '9'; ++c) in[c] = true;
  in['+'] = true;
  in['/'] = true;
  return in;
}
constexpr std::array<bool, 256> kAlphabet = AlphabetTable();

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

std::string EncodeBase64(std::string_view bytes) {
  const size_t chars = (bytes.size() + 2) / 3 * 4;
  std::string out(chars + 1, '\0');  // EVP_EncodeBlock ends each piece with a NUL
  size_t written = 0;
  for (size_t at = 0; at < bytes.size(); at += kEncodePiece) {
    const std::string_view piece = bytes.substr(at, kEncodePiece);
    written += static_cast<size_t>(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(&out[written]),
                                                   Bytes(piece), static_cast<int>(piece.size())));
  }
  out.resize(chars);
  return out;
}

Result<std::string> DecodeBase64(std::string_view text, std::string_view field) {
  if (text.size() % 4 != 0) {
    return InvalidArgument(std::string(field) + ": not base64: the length, " +
                           std::to_string(text.size()) + ", is not a multiple of 4");
  }
  // EVP_DecodeBlock trims whitespace at both ends, ignores '-' and line breaks at the
  // end and reads '=' anywhere as zero bits: check the text is canonical first.
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  const size_t body = text.size() - padding;
  for (size_t i = 0; i < body; ++i) {
    if (!kAlphabet[static_cast<unsigned char>(text[i])]) {
      return InvalidArgument(std::string(field) + ": not base64 at byte " + std::to_string(i) +
                             (text[i] == '=' ? " (padding before the end)" : ""));
    }
  }
  std::string out(text.size() / 4 * 3, '\0');
  size_t written = 0;
  for (size_t at = 0; at < text.size(); at += kDecodePiece) {
    const std::string_view piece = text.substr(at, kDecodePiece);
    const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(&out[written]), Bytes(piece),
                                  static_cast<int>(piece.size()));
    if (n < 0) return InvalidArgument(std::string(field) + ": not base64");
    written += static_cast<size_t>(n);
  }
  // EVP_DecodeBlock counts the zero bytes the padding stands for: they are not data.
  out.resize(written - padding);
  return out;
}

}  // namespace trainyard::protocol
