#include "cli/daemon.h"

#include "cli/agent_cmd.h"
#include "cli/server_cmd.h"
#include "cli/store_cmd.h"

namespace trainyard::cli {

void AddDaemonCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  AddAgentCommand(app, exit_code, out, err);
  AddServerCommand(app, exit_code, out, err);
  AddStoreCommand(app, exit_code, out, err);
  AddUpCommand(app, exit_code, out, err);
}

}  // namespace trainyard::cli
