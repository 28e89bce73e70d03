// Reading a job from the text a user hands us, whatever its format.
//
// A file is an #SBATCH script when it starts with "#!" or its first non-blank line
// is an "#SBATCH" directive; otherwise it is a YAML (or JSON) spec. Both paths end in
// the same normalisation and validation (job_spec.h).
#pragma once

#include <string_view>

#include "core/spec_codec.h"

namespace trainyard {

enum class JobTextFormat { kYaml, kSbatch };

JobTextFormat DetectJobTextFormat(std::string_view text);
SpecParseResult ParseJobText(std::string_view text, std::string_view file);

}  // namespace trainyard
