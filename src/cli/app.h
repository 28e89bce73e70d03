// The `trainyard` command line: one CLI11 app, each subcommand added by its own
// file (validate.h, ...). RunCli is main() minus the process: it writes to the given
// streams and returns the exit status, so tests drive it in-process.
//
// Exit statuses: 0 success, 1 a failure while doing the work, 2 bad input or usage.
#pragma once

#include <iosfwd>

namespace trainyard::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
