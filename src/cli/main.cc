// The `trainyard` executable.
#include <iostream>

#include "cli/app.h"

int main(int argc, char** argv) { return trainyard::cli::RunCli(argc, argv, std::cout, std::cerr); }
