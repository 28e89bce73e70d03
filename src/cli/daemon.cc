#include "cli/daemon.h"

#include "cli/agent_cmd.h"
#include "cli/app.h"
#include "cli/datasets_cmd.h"
#include "cli/image_cmd.h"
#include "cli/server_cmd.h"
#include "cli/store_cmd.h"

namespace trainyard::cli {

void AddDaemonCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  if (CommandWanted("agent")) AddAgentCommand(app, exit_code, out, err);
  if (CommandWanted("image")) AddImageCommand(app, exit_code, out, err);
  if (CommandWanted("datasets")) AddDatasetsCommands(app, exit_code, out, err);
  if (CommandWanted("server")) AddServerCommand(app, exit_code, out, err);
  if (CommandWanted("store")) AddStoreCommand(app, exit_code, out, err);
  if (CommandWanted("up")) AddUpCommand(app, exit_code, out, err);
}

}  // namespace trainyard::cli
