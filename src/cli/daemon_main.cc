// The `trainyard-daemon` executable: every command, the daemons' (server, agent, up,
// store) included; `trainyard` execs it for those (cli/app.h).
#include <iostream>

#include "cli/app.h"
#include "cli/daemon.h"

int main(int argc, char** argv) {
  return trainyard::cli::RunCli(argc, argv, std::cout, std::cerr,
                                &trainyard::cli::AddDaemonCommands);
}
