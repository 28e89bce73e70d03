// libFuzzer target: the job spec reader (YAML and JSON, ParseJobText).
//
// Beyond "does not crash": every spec that parses must write back (YAML and JSON)
// to text that parses to an equal spec, and a rejected spec must say why.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/job_text.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  trainyard::fuzz::CheckSpecResult("fuzz_job_spec", trainyard::ParseJobText(text, "fuzz.yaml"),
                                   text, /*json=*/true);
  return 0;
}
