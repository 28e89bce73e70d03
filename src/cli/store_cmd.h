// `trainyard store copy --from STORE --to STORE`: copies a control plane's whole state
// from one store to an empty other (store/copy.h), e.g. from the SQLite file a single
// server grew up on to the PostgreSQL database of a highly available pair
// (docs/ha.md, "Moving from SQLite"). STORE is what `trainyard server --store` takes:
// sqlite:PATH or postgres://[USER@]HOST[:PORT]/DATABASE.
//
// Exit statuses: 0 when copied and checked; 1 when a store could not be opened, the
// destination is not empty, or copying or its check failed; 2 for bad flags.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>

namespace trainyard::cli {

struct StoreCopyOptions {
  std::string from;
  std::string to;
};

int RunStoreCopy(const StoreCopyOptions& options, std::ostream& out, std::ostream& err);

void AddStoreCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
