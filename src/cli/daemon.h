// The daemons' commands (server, agent, up, store) for trainyard-daemon (cli/app.h).
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>

namespace trainyard::cli {

// Adds them to `app`; pass it to RunCli.
void AddDaemonCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
