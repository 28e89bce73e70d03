// What the fuzz targets share: stopping with the input that broke a property, and
// the round trip every accepted job spec must survive.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/spec_codec.h"

namespace trainyard::fuzz {

// Prints `target: what` and the text, then aborts (libFuzzer saves the input).
[[noreturn]] inline void Fail(const char* target, const char* what, std::string_view text) {
  std::fprintf(stderr, "%s: %s\n--- text ---\n%.*s\n", target, what, static_cast<int>(text.size()),
               text.data());
  std::abort();
}

// A rejection must say why; an accepted spec written back as YAML (and, with `json`,
// as JSON) must parse to an equal spec.
inline void CheckSpecResult(const char* target, const SpecParseResult& r, std::string_view text,
                            bool json) {
  if (!r.ok()) {
    if (r.errors.empty()) Fail(target, "rejected without an error", text);
    return;
  }
  const std::string yaml = SpecToYaml(*r.spec);
  SpecParseResult again = ParseSpec(yaml, "round-trip.yaml");
  if (!again.ok()) Fail(target, "its YAML form does not parse", yaml);
  if (!(*again.spec == *r.spec)) Fail(target, "its YAML form parses to another spec", yaml);
  if (!json) return;
  const std::string as_json = SpecToJson(*r.spec).dump();
  SpecParseResult from_json = ParseSpec(as_json, "round-trip.json");
  if (!from_json.ok() || !(*from_json.spec == *r.spec)) {
    Fail(target, "its JSON form differs", as_json);
  }
}

}  // namespace trainyard::fuzz
