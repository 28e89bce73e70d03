// Reading and writing job specs as text.
//
// ParseSpec reads a YAML document (JSON is accepted, being a subset of YAML) into a
// normalised, validated JobSpec, or returns every problem found, each naming the
// file, line, field, bad value and what would be valid. Unknown fields are errors
// with a "did you mean" hint. SpecToJson / SpecToYaml write the normalised form with
// the same field names, so their output parses back to an equal spec.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_spec.h"

namespace trainyard {

struct SpecParseResult {
  std::optional<JobSpec> spec;       // set when there is no error
  std::vector<Diagnostic> errors;    // empty when spec is set
  std::vector<Diagnostic> warnings;  // problems that do not stop the job
  bool ok() const { return spec.has_value(); }
};

// `file` is used only in messages; `origin` picks the rules (job_spec.h).
SpecParseResult ParseSpec(std::string_view text, std::string_view file,
                          SpecOrigin origin = SpecOrigin::kSubmitted);

nlohmann::ordered_json SpecToJson(const JobSpec& spec);
std::string SpecToYaml(const JobSpec& spec);

// The top-level field names ParseSpec accepts, for hints and docs.
const std::vector<std::string_view>& SpecFieldNames();

}  // namespace trainyard
