// libFuzzer target: the #SBATCH script reader (ParseSbatch). A script that parses
// must give a spec whose YAML form parses back to an equal spec; a rejected one must
// say why.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/sbatch.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  trainyard::fuzz::CheckSpecResult("fuzz_sbatch", trainyard::ParseSbatch(text, "fuzz.sbatch"), text,
                                   /*json=*/false);
  return 0;
}
