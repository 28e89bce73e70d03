// The monitoring commands: `alerts` (list, events, rules, check), `diagnose JOB` and
// `fault inject|clear|list` (docs/alerts.md, docs/diagnose.md, docs/faults.md).
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>

namespace trainyard::cli {

// `diagnose` exits with this when it found something wrong (0: nothing found; 1 and 2
// are errors, as for every command).
inline constexpr int kExitFound = 3;

void AddMonitorCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
