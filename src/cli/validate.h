// `trainyard validate FILE...`: reads job specs (YAML, JSON or #SBATCH scripts),
// prints each normalised spec (values of secret_env variables as "<redacted>"), or
// each problem with file:line, field, value and fix.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>
#include <vector>

namespace trainyard::cli {

struct ValidateOptions {
  std::vector<std::string> files;  // "-" reads standard input
  std::string output = "yaml";     // yaml | json
};

// Returns kExitOk when every file is valid, kExitUsage when any is not (or cannot
// be read). Specs go to `out`; errors and warnings go to `err` (in json mode,
// everything goes to `out` as one list).
int RunValidate(const ValidateOptions& options, std::istream& in, std::ostream& out,
                std::ostream& err);

void AddValidateCommand(CLI::App& app, ValidateOptions& options, int& exit_code, std::ostream& out,
                        std::ostream& err);

}  // namespace trainyard::cli
