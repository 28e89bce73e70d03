// libFuzzer target: the #SBATCH script reader (ParseSbatch). A script that parses
// must give a spec whose YAML form parses back to an equal spec; a rejected one must
// say why.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/sbatch.h"
#include "core/spec_codec.h"

namespace {

[[noreturn]] void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "fuzz_sbatch: %s\n--- text ---\n%.*s\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  trainyard::SpecParseResult r = trainyard::ParseSbatch(text, "fuzz.sbatch");
  if (!r.ok()) {
    if (r.errors.empty()) Fail("rejected without an error", text);
    return 0;
  }
  const std::string yaml = trainyard::SpecToYaml(*r.spec);
  trainyard::SpecParseResult again = trainyard::ParseSpec(yaml, "round-trip.yaml");
  if (!again.ok()) Fail("its YAML form does not parse", yaml);
  if (!(*again.spec == *r.spec)) Fail("its YAML form parses to another spec", yaml);
  return 0;
}
