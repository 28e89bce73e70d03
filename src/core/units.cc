#include "core/units.h"

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <limits>
#include <vector>

#include "core/names.h"

namespace trainyard {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

bool ParseUint(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Escaped and cut as every error message quotes outside input (names.h).
std::string Quote(std::string_view s) { return QuoteForMessage(s); }

// Slurm time forms: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS".
std::optional<int64_t> ParseColonSeconds(std::string_view text) {
  int64_t days = 0;
  std::string_view rest = text;
  bool has_days = false;
  if (auto dash = rest.find('-'); dash != std::string_view::npos) {
    if (!ParseUint(rest.substr(0, dash), &days)) return std::nullopt;
    rest = rest.substr(dash + 1);
    has_days = true;
  }
  std::vector<int64_t> parts;
  while (true) {
    auto colon = rest.find(':');
    int64_t v = 0;
    if (!ParseUint(rest.substr(0, colon), &v)) return std::nullopt;
    parts.push_back(v);
    if (colon == std::string_view::npos) break;
    rest = rest.substr(colon + 1);
  }
  if (parts.size() > 3) return std::nullopt;
  int64_t h = 0, m = 0, s = 0;
  if (has_days) {
    h = parts[0];
    if (parts.size() > 1) m = parts[1];
    if (parts.size() > 2) s = parts[2];
  } else if (parts.size() == 2) {
    m = parts[0];
    s = parts[1];
  } else {
    h = parts[0];
    m = parts[1];
    s = parts[2];
  }
  if (days > 100000 || h > 100000 * 24 || m > 100000 * 24 * 60 || s > kMax / 2000) {
    return std::nullopt;
  }
  return ((days * 24 + h) * 60 + m) * 60 + s;
}

}  // namespace

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return (b > 0) ? kMax : std::numeric_limits<int64_t>::min();
  return r;
}

int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    return ((a < 0) != (b < 0)) ? std::numeric_limits<int64_t>::min() : kMax;
  }
  return r;
}

Result<Duration> ParseDuration(std::string_view text) {
  const std::string hint =
      "expected a duration such as \"90s\", \"30m\", \"1h30m\", \"2d\" or \"HH:MM:SS\", got " +
      Quote(text);
  if (text.empty()) return InvalidArgument(hint);
  if (text.find_first_of(":-") != std::string_view::npos) {
    auto secs = ParseColonSeconds(text);
    if (!secs) return InvalidArgument(hint);
    return Duration(*secs * 1000);
  }
  int64_t plain = 0;
  if (ParseUint(text, &plain)) {
    if (plain > kMax / 1000) return InvalidArgument("duration " + Quote(text) + " is too large");
    return Duration(plain * 1000);
  }
  int64_t total_ms = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t i = 0;
    while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9') ++i;
    int64_t n = 0;
    if (i == 0 || !ParseUint(rest.substr(0, i), &n)) return InvalidArgument(hint);
    rest = rest.substr(i);
    size_t j = 0;
    while (j < rest.size() && !(rest[j] >= '0' && rest[j] <= '9')) ++j;
    std::string_view unit = rest.substr(0, j);
    rest = rest.substr(j);
    int64_t mult = 0;
    if (unit == "ms")
      mult = 1;
    else if (unit == "s")
      mult = 1000;
    else if (unit == "m")
      mult = 60'000;
    else if (unit == "h")
      mult = 3'600'000;
    else if (unit == "d")
      mult = 86'400'000;
    else
      return InvalidArgument(hint);
    int64_t part = SaturatingMul(n, mult);
    total_ms = SaturatingAdd(total_ms, part);
    if (total_ms == kMax) return InvalidArgument("duration " + Quote(text) + " is too large");
  }
  return Duration(total_ms);
}

std::string FormatDuration(Duration d) {
  int64_t ms = d.count();
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 0) {
    out = "-";
    ms = ms == std::numeric_limits<int64_t>::min() ? kMax : -ms;
  }
  struct Unit {
    int64_t ms;
    const char* name;
  };
  static constexpr Unit kUnits[] = {
      {86'400'000, "d"}, {3'600'000, "h"}, {60'000, "m"}, {1000, "s"}, {1, "ms"}};
  for (const auto& u : kUnits) {
    if (ms >= u.ms) {
      out += std::to_string(ms / u.ms);
      out += u.name;
      ms %= u.ms;
    }
  }
  return out;
}

Result<int64_t> ParseMemory(std::string_view text) {
  const std::string hint =
      "expected a memory size such as \"512Mi\", \"256Gi\", \"1Ti\", \"64G\" or a number of bytes, "
      "got " +
      Quote(text);
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  int64_t n = 0;
  if (i == 0 || !ParseUint(text.substr(0, i), &n)) return InvalidArgument(hint);
  std::string_view unit = text.substr(i);
  int64_t mult = 0;
  if (unit.empty())
    mult = 1;
  else if (unit == "Ki")
    mult = kKiB;
  else if (unit == "Mi")
    mult = kMiB;
  else if (unit == "Gi")
    mult = kGiB;
  else if (unit == "Ti")
    mult = kTiB;
  else if (unit == "Pi")
    mult = 1024 * kTiB;
  else if (unit == "K" || unit == "k")
    mult = 1000;
  else if (unit == "M")
    mult = 1000'000;
  else if (unit == "G")
    mult = 1000'000'000;
  else if (unit == "T")
    mult = 1000'000'000'000;
  else
    return InvalidArgument(hint);
  int64_t bytes = SaturatingMul(n, mult);
  if (bytes == kMax) return InvalidArgument("memory size " + Quote(text) + " is too large");
  return bytes;
}

std::string FormatMemory(int64_t bytes) {
  static constexpr std::pair<int64_t, const char*> kUnits[] = {
      {1024 * kTiB, "Pi"}, {kTiB, "Ti"}, {kGiB, "Gi"}, {kMiB, "Mi"}, {kKiB, "Ki"}};
  if (bytes > 0) {
    for (const auto& [mult, name] : kUnits) {
      if (bytes % mult == 0) return std::to_string(bytes / mult) + name;
    }
  }
  return std::to_string(bytes);
}

std::string FormatSize(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string FormatTimestamp(Timestamp t) {
  int64_t ms = t.time_since_epoch().count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  int64_t frac = ms % 1000;
  if (frac < 0) {
    frac += 1000;
    secs -= 1;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03" PRId64 "Z", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

}  // namespace trainyard
