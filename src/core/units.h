// Time and quantity types shared by every layer, and their text forms.
//
// Time is a value handed in (core and sched never read a clock): Timestamp is
// milliseconds since the Unix epoch, Duration is milliseconds. Quantities of memory
// are bytes. Parsers return a message that names what would be valid; callers add
// the field and location.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace trainyard {

using Duration = std::chrono::milliseconds;
using Timestamp = std::chrono::sys_time<Duration>;

inline constexpr int64_t kKiB = 1024;
inline constexpr int64_t kMiB = 1024 * kKiB;
inline constexpr int64_t kGiB = 1024 * kMiB;
inline constexpr int64_t kTiB = 1024 * kGiB;

// Durations: "90s", "30m", "1h30m", "2d", "250ms", or a plain number of seconds.
// Also Slurm's forms "MM:SS", "HH:MM:SS", "D-HH[:MM[:SS]]".
Result<Duration> ParseDuration(std::string_view text);
// Canonical short form: "1h30m", "45s", "250ms", "0s".
std::string FormatDuration(Duration d);

// Memory: "256Gi", "512Mi", "1Ti", "64G" (decimal), "1000000" (bytes).
Result<int64_t> ParseMemory(std::string_view text);
// Largest binary unit that represents the value exactly: "256Gi", "1536Mi", "17".
std::string FormatMemory(int64_t bytes);
// A size for people, rounded: "512 B", "3.9 KiB", "1.2 GiB".
std::string FormatSize(int64_t bytes);

// Saturating arithmetic on non-negative counts: never overflows, never wraps.
int64_t SaturatingAdd(int64_t a, int64_t b);
int64_t SaturatingMul(int64_t a, int64_t b);

// "2026-11-29T09:00:00.000Z".
std::string FormatTimestamp(Timestamp t);

}  // namespace trainyard
