#include "core/job_text.h"

#include "core/sbatch.h"

namespace trainyard {

JobTextFormat DetectJobTextFormat(std::string_view text) {
  size_t i = 0;
  while (i < text.size() &&
         (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) {
    ++i;
  }
  std::string_view rest = text.substr(i);
  if (rest.substr(0, 2) == "#!" || rest.substr(0, 7) == "#SBATCH") return JobTextFormat::kSbatch;
  return JobTextFormat::kYaml;
}

SpecParseResult ParseJobText(std::string_view text, std::string_view file) {
  if (DetectJobTextFormat(text) == JobTextFormat::kSbatch) return ParseSbatch(text, file);
  return ParseSpec(text, file);
}

}  // namespace trainyard
