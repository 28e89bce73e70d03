// libFuzzer target: the job spec reader (YAML and JSON, ParseSpec / ParseJobText).
//
// Beyond "does not crash": every spec that parses must write back (YAML and JSON)
// to text that parses to an equal spec, and a rejected spec must say why.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/job_text.h"
#include "core/spec_codec.h"

namespace {

[[noreturn]] void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "fuzz_job_spec: %s\n--- text ---\n%.*s\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  trainyard::SpecParseResult r = trainyard::ParseJobText(text, "fuzz.yaml");
  if (!r.ok()) {
    if (r.errors.empty()) Fail("rejected without an error", text);
    return 0;
  }
  const std::string yaml = trainyard::SpecToYaml(*r.spec);
  trainyard::SpecParseResult again = trainyard::ParseSpec(yaml, "round-trip.yaml");
  if (!again.ok()) Fail("its YAML form does not parse", yaml);
  if (!(*again.spec == *r.spec)) Fail("its YAML form parses to another spec", yaml);
  const std::string json = trainyard::SpecToJson(*r.spec).dump();
  trainyard::SpecParseResult from_json = trainyard::ParseSpec(json, "round-trip.json");
  if (!from_json.ok() || !(*from_json.spec == *r.spec)) Fail("its JSON form differs", json);
  return 0;
}
