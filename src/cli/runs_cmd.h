// The experiment-tracking commands: runs (list, show, compare, rerun, metrics,
// export) and trace. Each talks to the server's REST API (docs/api.md, "Runs").
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>

namespace trainyard::cli {

void AddRunsCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
