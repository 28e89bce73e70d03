#include "core/names.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>

namespace trainyard {

size_t FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool IsValidUtf8(std::string_view s) { return FirstInvalidUtf8(s) == std::string_view::npos; }

std::string QuoteForMessage(std::string_view value) {
  constexpr size_t kMax = 80;
  std::string out = "\"";
  auto escape = [&out](unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  };
  size_t n = 0;
  for (size_t i = 0; i < value.size();) {
    if (n++ == kMax) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      escape(c);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      // A whole, valid UTF-8 character as it is; any other byte escaped (a YAML or JSON
      // escape can put any byte in a string), so the message stays valid UTF-8.
      const size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
      const bool whole = len > 0 && i + len <= value.size() && IsValidUtf8(value.substr(i, len));
      if (whole) {
        out.append(value.substr(i, len));
        i += len;
      } else {
        escape(c);
        ++i;
      }
    }
  }
  out += '"';
  return out;
}

Status ValidateName(std::string_view field, std::string_view value) {
  auto fail = [&](std::string why) {
    return InvalidArgument(std::string(field) + ": " + why + ", got " + QuoteForMessage(value));
  };
  if (value.empty()) return InvalidArgument(std::string(field) + ": must not be empty");
  if (value.size() > kMaxNameLength) {
    return fail("must be at most " + std::to_string(kMaxNameLength) + " characters (has " +
                std::to_string(value.size()) + ")");
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(value.front())) return fail("must start with a letter or digit");
  for (char c : value) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') {
      return fail("may hold only letters, digits, '-', '_' and '.'");
    }
  }
  return Status::Ok();
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string ClosestMatch(std::string_view word, const std::vector<std::string_view>& candidates) {
  std::string best;
  size_t best_d = 3;
  for (auto c : candidates) {
    size_t d = EditDistance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  if (best.empty() && word.size() >= 3) {
    for (auto c : candidates) {
      if (c.substr(0, word.size()) == word || word.substr(0, c.size()) == c) return std::string(c);
    }
  }
  return best;
}

}  // namespace trainyard
