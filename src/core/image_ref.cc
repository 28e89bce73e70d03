#include "core/image_ref.h"

#include <cctype>
#include <vector>

#include "core/names.h"

namespace trainyard {
namespace {

constexpr size_t kMaxImageNameLength = 255;  // Docker's limit on a repository name
constexpr size_t kMaxTagLength = 128;
constexpr std::string_view kValid = "valid: name[:tag] or name@sha256:<64 hex digits>";

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// [a-z0-9]+ ((. | _ | __ | -+) [a-z0-9]+)*
bool ValidPathComponent(std::string_view c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  for (size_t i = 0; i < c.size();) {
    if (IsLowerAlnum(c[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < c.size() && !IsLowerAlnum(c[j])) ++j;
    const std::string_view sep = c.substr(i, j - i);
    const bool ok = sep == "." || sep == "_" || sep == "__" ||
                    sep.find_first_not_of('-') == std::string_view::npos;
    if (!ok) return false;
    i = j;
  }
  return true;
}

// host[:port], host = labels of [a-z0-9-] (no '-' at either end) joined by '.'.
bool ValidHost(std::string_view h) {
  const size_t colon = h.find(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = h.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != port.npos) {
      return false;
    }
    h = h.substr(0, colon);
  }
  size_t start = 0;
  while (true) {
    const size_t dot = h.find('.', start);
    const std::string_view label =
        h.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!IsLowerAlnum(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool ValidTag(std::string_view t) {
  if (t.empty() || t.size() > kMaxTagLength) return false;
  auto word = [](char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!word(t[0])) return false;
  for (char c : t) {
    if (!word(c) && c != '.' && c != '-') return false;
  }
  return true;
}

std::vector<std::string_view> SplitSlash(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t slash = s.find('/', start);
    if (slash == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, slash - start));
    start = slash + 1;
  }
}

}  // namespace

bool IsImageDigest(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (!digest.starts_with(kPrefix) || digest.size() != kPrefix.size() + 64) return false;
  for (char c : digest.substr(kPrefix.size())) {
    if (!IsHex(c)) return false;
  }
  return true;
}

Result<ImageRef> ParseImageRef(std::string_view text) {
  auto bad = [&](const std::string& why) -> Status {
    return InvalidArgument("image " + QuoteForMessage(text) + ": " + why + "; " +
                           std::string(kValid));
  };
  if (text.empty()) return bad("must not be empty");

  ImageRef ref;
  std::string_view rest = text;
  std::string_view digest;
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (rest.empty()) return bad("no name before '@'");
  } else if (rest.starts_with("sha256:")) {
    digest = rest;
    rest = {};
  }
  if (!digest.empty() || text.back() == '@') {
    if (!IsImageDigest(digest)) {
      std::string why = "the digest must be sha256: and 64 lowercase hex digits";
      if (digest.starts_with("sha256:")) {
        why += ", got " + std::to_string(digest.size() - 7) + " characters";
        for (char c : digest.substr(7)) {
          if (!IsHex(c)) {
            why += " with " + QuoteForMessage(std::string(1, c)) + " among them";
            break;
          }
        }
      } else {
        why += ", got " + QuoteForMessage(digest);
      }
      return bad(why);
    }
    ref.digest = std::string(digest);
    if (rest.empty()) return ref;
  }

  // A ':' after the last '/' starts the tag; one before it is a registry port.
  const size_t last_slash = rest.rfind('/');
  const size_t colon = rest.find(':', last_slash == std::string_view::npos ? 0 : last_slash);
  std::string_view name = rest;
  if (colon != std::string_view::npos) {
    const std::string_view tag = rest.substr(colon + 1);
    name = rest.substr(0, colon);
    if (tag.empty()) return bad("the tag after ':' is empty");
    if (!ValidTag(tag)) {
      return bad(tag.size() > kMaxTagLength
                     ? "the tag is " + std::to_string(tag.size()) + " characters, at most " +
                           std::to_string(kMaxTagLength) + " are allowed"
                     : "the tag " + QuoteForMessage(tag) +
                           " must be letters, digits, '_', '.' and '-', not starting with '.' "
                           "or '-'");
    }
    ref.tag = std::string(tag);
  }
  if (name.empty()) return bad("the name is empty");
  if (name.size() > kMaxImageNameLength) {
    return bad("the name is " + std::to_string(name.size()) + " characters, at most " +
               std::to_string(kMaxImageNameLength) + " are allowed");
  }
  std::vector<std::string_view> parts = SplitSlash(name);
  size_t first = 0;
  if (parts.size() > 1 && !parts[0].empty() &&
      std::isalnum(static_cast<unsigned char>(parts[0][0])) &&
      (parts[0].find_first_of(".:") != std::string_view::npos || parts[0] == "localhost")) {
    if (!ValidHost(parts[0])) {
      return bad("the registry host " + QuoteForMessage(parts[0]) +
                 " must be lowercase host name labels joined by '.', with an optional :port");
    }
    first = 1;
  }
  for (size_t i = first; i < parts.size(); ++i) {
    if (parts[i].empty())
      return bad("the name has an empty path component (\"//\" or a '/' at an end)");
    if (!ValidPathComponent(parts[i])) {
      return bad(
          "the name must be lowercase letters and digits, with single '.', '_' or '-' "
          "between them, in components joined by '/'; " +
          QuoteForMessage(parts[i]) + " is not");
    }
  }
  ref.name = std::string(name);
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

std::string ImageRef::ToString() const {
  if (!digest.empty()) return name.empty() ? digest : name + "@" + digest;
  return name + ":" + tag;
}

std::string PinnedImageRef(const ImageRef& ref, std::string_view digest) {
  if (ref.name.empty()) return std::string(digest);
  return ref.name + "@" + std::string(digest);
}

}  // namespace trainyard
