// The `trainyard` command line: one CLI11 app, each subcommand added by its own
// file (validate.h, ...). RunCli is main() minus the process: it writes to the given
// streams and returns the exit status, so tests drive it in-process.
//
// Two executables share it. `trainyard` holds the commands people type many times a
// minute (submit, jobs, logs, sim, ...) and links only what they need, so that it
// starts in a few milliseconds; the long-running daemons' commands (server, agent,
// up, store), which link the HTTP server, TLS, SQLite and PostgreSQL, live in
// `trainyard-daemon`, installed beside it, and `trainyard server ...` runs it in the
// same process (exec, keeping the process id and argv[0]). trainyard-daemon also
// answers every client command.
//
// Exit statuses: 0 success, 1 a failure while doing the work, 2 bad input or usage.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

namespace CLI {
class App;
}

namespace trainyard::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// The daemons' commands and their one-line descriptions.
struct DaemonCommand {
  const char* name;
  const char* about;
};
inline constexpr DaemonCommand kDaemonCommands[] = {
    {"agent",
     "Run the node agent: register this machine with a server, run the tasks it assigns,\n"
     "report GPU telemetry, exits, logs and metrics. SIGINT/SIGTERM stop the tasks (SIGTERM,\n"
     "SIGKILL after --stop-grace) and exit. See docs/agent.md."},
    {"image",
     "Load, list and remove container images in this node's image store (images come as\n"
     "tarballs from docker save / podman save; see docs/images.md)"},
    {"datasets", "Datasets and their versions (docs/datasets.md)"},
    {"server", "Run the control plane: REST API, scheduler loop and agent endpoints (docs/api.md)"},
    {"store", "Work on a control plane's store (docs/ha.md)"},
    {"up", "Start a local cluster: the server and N agents with simulated GPUs on this machine"},
};
// The description of daemon command `name` (one of kDaemonCommands).
const char* DaemonCommandAbout(const std::string& name);

// Adds the daemons' commands to `app` (trainyard-daemon's main passes it).
using AddCommandsFn = void (*)(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

// `trainyard`: the client commands; a daemon command execs trainyard-daemon.
int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);
// `trainyard-daemon`: every command, the daemons' added by `add_daemon_commands`
// (nullptr: they are only listed in the help).
int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
           AddCommandsFn add_daemon_commands);

// Whether the top-level command `name` is to be added to the app being built. A call
// builds only the command typed (CLI11 building the tree of every command was a third
// of a client call's start-up); help, errors and a bare `trainyard` build them all.
// Every function that adds top-level commands asks this for each.
bool CommandWanted(std::string_view name);

// The data directory used when none is given: $TRAINYARD_DATA_DIR, else
// $HOME/.trainyard, else ./.trainyard.
std::string DefaultDataDir();

}  // namespace trainyard::cli
