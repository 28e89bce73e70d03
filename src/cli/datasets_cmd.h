// `trainyard datasets hash DIR` (a trainyard-daemon command: hashing needs libcrypto,
// which the client binary does not load): the version of a directory's content as a dataset
// (data/manifest.h), computed here, in parallel, with no server: what `datasets
// register` will record. --manifest FILE keeps the manifest, and a FILE from an earlier
// run makes the next one read only the files whose size or mtime changed.
//
// Exit statuses: 0 done; 2 bad input (not a directory, a link or special file in it, a
// manifest file that is not one); 1 when a file cannot be read or the manifest written.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>

namespace trainyard::cli {

struct DatasetHashOptions {
  std::string dir;
  std::string manifest;  // read (when it exists) and written; "": neither
  int threads = 0;       // 0: the machine's hardware threads
  std::string output = "text";
};

int RunDatasetHash(const DatasetHashOptions& options, std::ostream& out, std::ostream& err);

void AddDatasetsCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
