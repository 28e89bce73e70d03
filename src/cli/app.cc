#include "cli/app.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "cli/client_cmd.h"
#include "cli/monitor_cmd.h"
#include "cli/runs_cmd.h"
#include "cli/sched_cmd.h"
#include "cli/sim_cmd.h"
#include "cli/validate.h"
#include "cli/version.h"
#include "core/names.h"

namespace trainyard::cli {
namespace {

void AddVersionCommand(CLI::App& app, std::string& output, int& exit_code, std::ostream& out) {
  CLI::App* cmd = app.add_subcommand("version", "Print the version of this binary");
  cmd->add_option("-o,--output", output, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([&output, &exit_code, &out] {
    if (output == "json") {
      out << nlohmann::ordered_json{{"version", TRAINYARD_VERSION}, {"git", TRAINYARD_GIT_DESCRIBE}}
                 .dump()
          << "\n";
    } else {
      out << "trainyard " << TRAINYARD_VERSION << " (" << TRAINYARD_GIT_DESCRIBE << ")\n";
    }
    exit_code = kExitOk;
  });
}

// Replaces this process with trainyard-daemon, found beside this executable, with the
// same arguments (argv[0] included, so `ps` shows what was typed). Returns only when
// that fails, with the exit status.
int ExecDaemon(const char* const* argv, std::ostream& out, std::ostream& err) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string daemon = (self.parent_path() / "trainyard-daemon").string();
  out.flush();
  err.flush();
  std::fflush(nullptr);
  ::execv(daemon.c_str(), const_cast<char* const*>(argv));
  const int e = errno;
  err << "trainyard " << argv[1] << ": cannot run " << daemon << ": " << std::strerror(e)
      << " (the server, agent, up and store commands live in trainyard-daemon, which is "
         "installed beside trainyard)\n";
  return kExitFailure;
}

}  // namespace

namespace {

// The one command RunCli builds, or empty for all of them (CommandWanted).
thread_local std::string_view t_only_command;

class OnlyCommand {
 public:
  explicit OnlyCommand(std::string_view name) { t_only_command = name; }
  ~OnlyCommand() { t_only_command = {}; }
  OnlyCommand(const OnlyCommand&) = delete;
  OnlyCommand& operator=(const OnlyCommand&) = delete;
};

// Builds the app (every command, or only the one CommandWanted names) and runs it.
// nullopt when only one command was wanted and no command of that name exists, so
// that the caller builds them all for the error and its hints.
std::optional<int> BuildAndRun(int argc, const char* const* argv, std::ostream& out,
                               std::ostream& err, AddCommandsFn add_daemon_commands) {
  CLI::App app{
      "Trainyard: a GPU training-cluster manager.\n"
      "Gang scheduling, quotas, checkpoint-aware preemption, experiment tracking and\n"
      "diagnosis in one tool.",
      "trainyard"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trainyard ") + TRAINYARD_VERSION + " (" +
                                        TRAINYARD_GIT_DESCRIBE + ")");
  app.footer("Run `trainyard COMMAND --help` for the options of one command.");

  int exit_code = kExitOk;
  ValidateOptions validate;
  if (CommandWanted("validate")) AddValidateCommand(app, validate, exit_code, out, err);
  if (CommandWanted("sched")) AddSchedCommand(app, exit_code, out, err);
  if (CommandWanted("sim")) AddSimCommand(app, exit_code, out, err);
  if (add_daemon_commands != nullptr) {
    add_daemon_commands(app, exit_code, out, err);
  } else {
    // Listed in the help; running one execs trainyard-daemon before parsing.
    for (const DaemonCommand& d : kDaemonCommands) {
      if (CommandWanted(d.name)) {
        app.add_subcommand(d.name, d.about)->allow_extras()->prefix_command();
      }
    }
  }
  AddClientCommands(app, exit_code, out, err);
  AddRunsCommands(app, exit_code, out, err);
  AddMonitorCommands(app, exit_code, out, err);
  std::string version_output = "text";
  if (CommandWanted("version")) AddVersionCommand(app, version_output, exit_code, out);

  // An unknown first word gets a hint rather than CLI11's "a subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string_view> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      if (!t_only_command.empty()) return std::nullopt;
      err << "trainyard: unknown command " << QuoteForMessage(argv[1]);
      if (std::string hint = ClosestMatch(argv[1], names); !hint.empty()) {
        err << "; did you mean " << hint << "?";
      }
      err << "\nCommands:";
      for (auto n : names) err << " " << n;
      err << "\nRun `trainyard --help` for usage.\n";
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion&) {
    out << app.version() << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    // Subcommand help ("trainyard validate --help") arrives here as a
    // CallForHelp raised inside the subcommand: CLI11 formats it via exit().
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      app.exit(e, out, err);
      return kExitOk;
    }
    err << "trainyard: " << e.what() << "\n";
    err << "Run `trainyard --help` for usage.\n";
    return kExitUsage;
  }
  return exit_code;
}

}  // namespace

bool CommandWanted(std::string_view name) {
  return t_only_command.empty() || name == t_only_command;
}

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
           AddCommandsFn add_daemon_commands) {
  if (argc > 1 && argv[1][0] != '-') {
    OnlyCommand only(argv[1]);
    if (std::optional<int> code = BuildAndRun(argc, argv, out, err, add_daemon_commands)) {
      return *code;
    }
  }
  return *BuildAndRun(argc, argv, out, err, add_daemon_commands);
}

const char* DaemonCommandAbout(const std::string& name) {
  for (const DaemonCommand& d : kDaemonCommands) {
    if (name == d.name) return d.about;
  }
  return "";
}

std::string DefaultDataDir() {
  if (const char* d = std::getenv("TRAINYARD_DATA_DIR"); d != nullptr && *d) return d;
  if (const char* h = std::getenv("HOME"); h != nullptr && *h) {
    return std::string(h) + "/.trainyard";
  }
  return ".trainyard";
}

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  if (argc > 1) {
    for (const DaemonCommand& d : kDaemonCommands) {
      if (std::strcmp(argv[1], d.name) == 0) return ExecDaemon(argv, out, err);
    }
  }
  return RunCli(argc, argv, out, err, nullptr);
}

}  // namespace trainyard::cli
