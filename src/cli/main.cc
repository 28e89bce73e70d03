// The `trainyard` executable: the client commands; the daemons' run trainyard-daemon
// (cli/app.h).
#include <iostream>

#include "cli/app.h"

int main(int argc, char** argv) { return trainyard::cli::RunCli(argc, argv, std::cout, std::cerr); }
