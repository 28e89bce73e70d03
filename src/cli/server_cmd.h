// `trainyard server` (the control plane) and `trainyard up` (a local cluster: the
// server plus N agents on this machine with simulated GPUs).
//
// Both write <data-dir>/server.url so that client commands find the server, and stop
// cleanly on SIGINT or SIGTERM (up stops its agents first: SIGTERM, then SIGKILL
// after 10 s).
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>

#include "cli/app.h"

namespace trainyard::cli {

void AddServerCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);
void AddUpCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
