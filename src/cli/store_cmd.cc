#include "cli/store_cmd.h"

#include <chrono>
#include <filesystem>
#include <ostream>

#include "cli/app.h"
#include "core/units.h"
#include "server/server.h"
#include "store/copy.h"

namespace trainyard::cli {
namespace {

// ParseStoreUrl's message speaks of --store; here the flag is `flag`.
Status ForFlag(const Status& s, const std::string& flag) {
  std::string m = s.message();
  if (m.starts_with("--store")) m = flag + m.substr(7);
  return Status(s.code(), m);
}

Result<server::StoreUrl> ParseFlag(const std::string& value, const std::string& flag) {
  if (value.empty()) {
    return InvalidArgument(flag +
                           ": required; sqlite:PATH or postgres://[USER@]HOST[:PORT]/DATABASE");
  }
  auto where = server::ParseStoreUrl(value);
  if (!where.ok()) return ForFlag(where.status(), flag);
  return where;
}

}  // namespace

int RunStoreCopy(const StoreCopyOptions& options, std::ostream& out, std::ostream& err) {
  auto from = ParseFlag(options.from, "--from");
  auto to = from.ok() ? ParseFlag(options.to, "--to") : Result<server::StoreUrl>(from.status());
  if (!to.ok()) {
    err << "trainyard store copy: " << to.status().message() << "\n";
    return kExitUsage;
  }
  if (from->kind == server::StoreUrl::Kind::kSqlite && !std::filesystem::exists(from->path)) {
    // Opening would create an empty database and copy nothing.
    err << "trainyard store copy: --from " << from->path << ": no such file\n";
    return kExitFailure;
  }
  if (options.from == options.to) {
    err << "trainyard store copy: --from and --to name the same store\n";
    return kExitUsage;
  }
  auto source = server::OpenStore(*from, "");
  if (!source.ok()) {
    err << "trainyard store copy: --from: " << source.status().message() << "\n";
    return kExitFailure;
  }
  auto dest = server::OpenStore(*to, "");
  if (!dest.ok()) {
    err << "trainyard store copy: --to: " << dest.status().message() << "\n";
    return kExitFailure;
  }
  const auto started = std::chrono::steady_clock::now();
  auto last_said = started;
  auto copied = store::CopyStore(**source, **dest, 500, [&](const store::CopyStats& s) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_said < std::chrono::seconds(2)) return;
    last_said = now;
    err << "copied " << s.jobs << " jobs, " << s.events << " events, " << s.audit_entries
        << " audit entries so far\n"
        << std::flush;
  });
  if (!copied.ok()) {
    err << "trainyard store copy: " << copied.status().message() << "\n";
    return kExitFailure;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const store::CopyStats& s = *copied;
  out << "copied " << (*source)->Describe() << " to " << (*dest)->Describe() << " in "
      << FormatDuration(Duration(static_cast<int64_t>(seconds * 1000)))
      << " and checked it: " << s.jobs << " jobs, " << s.events << " events, " << s.audit_entries
      << " audit entries, " << s.nodes << " nodes, " << s.tenants << " tenants, " << s.queues
      << " queues, " << s.priority_classes << " priority classes, " << s.users << " users, "
      << s.tokens << " API tokens, " << s.datasets << " datasets; new jobs get ids from "
      << s.next_job_id << "\n";
  return kExitOk;
}

void AddStoreCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  CLI::App* store = app.add_subcommand("store", DaemonCommandAbout("store"));
  store->require_subcommand(1);
  auto o = std::make_shared<StoreCopyOptions>();
  CLI::App* copy = store->add_subcommand(
      "copy",
      "Copy every job, event, audit entry, node, tenant, queue, priority class, user and "
      "token into an empty store, then check the copy (stop the source's server first)");
  copy->add_option("--from", o->from, "The store to copy: sqlite:PATH or postgres://...")
      ->required();
  copy->add_option("--to", o->to, "An empty store to copy into: sqlite:PATH or postgres://...")
      ->required();
  copy->callback([o, &exit_code, &out, &err] { exit_code = RunStoreCopy(*o, out, err); });
}

}  // namespace trainyard::cli
