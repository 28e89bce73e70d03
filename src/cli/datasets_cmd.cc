#include "cli/datasets_cmd.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>

#include "cli/app.h"
#include "data/manifest.h"

namespace trainyard::cli {
namespace {

int Fail(std::ostream& err, const Status& s) {
  err << "trainyard datasets hash: " << s.message() << "\n";
  return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

std::string Bytes(int64_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace

int RunDatasetHash(const DatasetHashOptions& o, std::ostream& out, std::ostream& err) {
  namespace fs = std::filesystem;
  std::optional<data::Manifest> previous;
  std::error_code ec;
  if (!o.manifest.empty() && fs::exists(o.manifest, ec)) {
    std::ifstream in(o.manifest, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return Fail(err, FailedPrecondition("--manifest " + o.manifest + ": cannot read"));
    auto m = data::ParseManifest(text.str());
    if (!m.ok())
      return Fail(err, InvalidArgument("--manifest " + o.manifest + ": " + m.status().message()));
    previous = std::move(*m);
  }
  const auto t0 = std::chrono::steady_clock::now();
  data::ManifestStats stats;
  auto m = data::BuildManifest(o.dir, {o.threads, previous ? &*previous : nullptr}, &stats);
  if (!m.ok()) return Fail(err, m.status());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.manifest.empty()) {
    const std::string tmp = o.manifest + ".tmp";
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << data::ManifestToText(*m);
    f.close();
    if (!f || (fs::rename(tmp, o.manifest, ec), ec)) {
      return Fail(err, FailedPrecondition("--manifest " + o.manifest + ": cannot write"));
    }
  }
  const std::string version = m->Version();
  if (o.output == "json") {
    out << nlohmann::ordered_json{{"dir", o.dir},
                                  {"version", version},
                                  {"files", m->entries.size()},
                                  {"bytes", m->total_bytes},
                                  {"files_read", stats.files_read},
                                  {"files_reused", stats.files_reused},
                                  {"bytes_read", stats.bytes_read},
                                  {"seconds", secs}}
               .dump()
        << "\n";
    return kExitOk;
  }
  char rate[64] = "";
  if (stats.bytes_read > 0 && secs > 0) {
    std::snprintf(rate, sizeof rate, ", %.0f MB/s", stats.bytes_read / secs / 1e6);
  }
  char took[32];
  std::snprintf(took, sizeof took, "%.2f s", secs);
  out << version << "\n"
      << m->entries.size() << " files, " << Bytes(m->total_bytes) << "; read " << stats.files_read
      << " (" << Bytes(stats.bytes_read) << "), reused " << stats.files_reused
      << " from the manifest, in " << took << rate << "\n";
  return kExitOk;
}

void AddDatasetsCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  CLI::App* datasets = app.add_subcommand("datasets", DaemonCommandAbout("datasets"));
  datasets->require_subcommand(1);
  auto o = std::make_shared<DatasetHashOptions>();
  CLI::App* hash = datasets->add_subcommand(
      "hash",
      "Print the version of a directory's content (sha256 of its manifest: every file's path, "
      "size and sha256), computed here in parallel; no server needed");
  hash->add_option("dir", o->dir, "The directory")->required();
  hash->add_option("--manifest", o->manifest,
                   "Keep the manifest in FILE; a FILE from an earlier run is read first, and "
                   "files whose size and mtime are unchanged are not read again");
  hash->add_option("--threads", o->threads, "Files hashed at once (0: one per CPU)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  hash->add_option("-o,--output", o->output, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  hash->callback([o, &exit_code, &out, &err] { exit_code = RunDatasetHash(*o, out, err); });
}

}  // namespace trainyard::cli
