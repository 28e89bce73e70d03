// Names and limits shared by every object users create: what characters a name may
// hold, how long it may be, and the ceilings that keep absurd input out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainyard {

inline constexpr size_t kMaxNameLength = 63;
inline constexpr size_t kMaxGpusPerNode = 64;

// A name: 1..63 characters of [A-Za-z0-9._-], starting with a letter or digit.
// The error names `field`, the value and what would be valid.
Status ValidateName(std::string_view field, std::string_view value);

// Levenshtein distance, for "did you mean" hints.
size_t EditDistance(std::string_view a, std::string_view b);
// The candidate closest to `word` (distance <= 2, or a prefix match); empty if none.
std::string ClosestMatch(std::string_view word, const std::vector<std::string_view>& candidates);

// `s` without its leading and trailing spaces and tabs (HTTP's optional whitespace,
// CSV fields).
std::string_view TrimBlanks(std::string_view s);

// Whether `a` and `b` are equal but for the case of ASCII letters (HTTP header names
// and tokens).
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view s);
// Byte offset of the first malformed UTF-8 sequence, or npos.
size_t FirstInvalidUtf8(std::string_view s);

// Quotes and escapes a user value for an error message, cutting it at 80 characters.
std::string QuoteForMessage(std::string_view value);

}  // namespace trainyard
