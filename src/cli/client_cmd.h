// The client commands: submit, jobs, job show, cancel, hold, release, logs, nodes,
// cordon, drain, uncordon, queues. Each talks to the server's REST API (docs/api.md).
//
// The server is found through --server URL, else $TRAINYARD_SERVER, else the
// server.url file in --data-dir (default: DefaultDataDir()). Every listing takes
// `-o json`. Errors are one line on stderr and exit status 1 (2 for bad usage).
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>

namespace trainyard::cli {

void AddClientCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
