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
#include "cli/client.h"
#include "data/manifest.h"

namespace trainyard::cli {
namespace {

int Fail(std::ostream& err, const Status& s) {
  err << "trainyard datasets hash: " << s.message() << "\n";
  return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

std::string Bytes(int64_t n) { return FormatSize(n); }

std::string Enc(const std::string& s) { return http::EncodeComponent(s); }

std::string Rate(int64_t bytes, double secs) {
  if (bytes <= 0 || secs <= 0) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, ", %.0f MB/s", bytes / secs / 1e6);
  return buf;
}

std::string Short(const std::string& version) {
  // "sha256:" and the first 12 hex digits, as image ids are shown.
  return version.size() > 19 ? version.substr(0, 19) : version;
}

struct RegisterFlags {
  Common c;
  std::string name, source, tenant, description;
  int threads = 0;
};

// Hashes the source here (incrementally against the dataset's latest manifest, when it
// has one) and registers the version it names.
std::optional<Failure> Register(Api& api, const RegisterFlags& f, std::ostream& out) {
  namespace fs = std::filesystem;
  if (f.source.starts_with("s3://")) {
    return Failure{"--source " + f.source +
                       ": this build has no S3 fetcher; register a directory on a file system "
                       "every node mounts",
                   kExitUsage};
  }
  std::error_code ec;
  const std::string source = fs::absolute(f.source, ec).lexically_normal().string();
  if (ec || !fs::is_directory(source, ec)) {
    return Failure{"--source " + f.source + ": not a directory here", kExitUsage};
  }
  // The latest manifest, so that files whose size and mtime are unchanged are not read.
  std::optional<data::Manifest> previous;
  TY_CALL(list, api.Call("GET", "/api/v1/datasets"));
  for (const auto& d : list["datasets"]) {
    if (Str(d, "name") != f.name || Str(d, "source") != source || Str(d, "latest").empty())
      continue;
    auto text = api.Fetch("/api/v1/datasets/" + Enc(f.name) + "/manifest");
    if (auto* failed = std::get_if<Failure>(&text)) return *failed;
    if (auto m = data::ParseManifest(std::get<std::string>(text)); m.ok()) previous = std::move(*m);
  }
  const auto t0 = std::chrono::steady_clock::now();
  data::ManifestStats stats;
  auto m = data::BuildManifest(source, {f.threads, previous ? &*previous : nullptr}, &stats);
  if (!m.ok()) return Failure{m.status().message()};
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json body = {
      {"name", f.name}, {"source", source}, {"manifest", data::ManifestToText(*m)}};
  if (!f.tenant.empty()) body["tenant"] = f.tenant;
  if (!f.description.empty()) body["description"] = f.description;
  auto sent = api.Send("POST", "/api/v1/datasets", body.dump(), "application/json");
  if (auto* failed = std::get_if<Failure>(&sent)) return *failed;
  const http::Response& res = std::get<http::Response>(sent);
  json reply = json::parse(res.body, nullptr, false);
  if (reply.is_discarded()) return Failure{"the server's answer is not JSON"};
  if (f.c.output == "json") {
    reply["files_read"] = stats.files_read;
    reply["files_reused"] = stats.files_reused;
    reply["bytes_read"] = stats.bytes_read;
    reply["hash_seconds"] = secs;
    out << reply.dump() << "\n";
    return std::nullopt;
  }
  char took[32];
  std::snprintf(took, sizeof took, "%.2f s", secs);
  out << (reply.value("new_version", false) ? "registered " : "unchanged: ") << f.name << " "
      << Str(reply, "version") << "\n"
      << m->entries.size() << " files, " << Bytes(m->total_bytes) << "; hashed " << stats.files_read
      << " (" << Bytes(stats.bytes_read) << ") in " << took << Rate(stats.bytes_read, secs) << ", "
      << stats.files_reused << " unchanged since the last version\n";
  return std::nullopt;
}

void PrintList(std::ostream& out, const json& list) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "TENANT", "VERSIONS", "LATEST", "FILES", "SIZE", "SOURCE"}};
  for (const auto& d : list) {
    const auto& versions = d["versions"];
    const json last = versions.empty() ? json::object() : versions.back();
    rows.push_back(
        {Str(d, "name"), d["tenant"].is_null() ? "(cluster-wide)" : Str(d, "tenant"),
         std::to_string(versions.size()), versions.empty() ? "-" : Short(Str(last, "version")),
         versions.empty() ? "-" : Str(last, "files"),
         versions.empty() ? "-" : Bytes(last.value("bytes", int64_t{0})), Str(d, "source")});
  }
  Table(out, rows);
}

void PrintDataset(std::ostream& out, const json& d) {
  out << "Dataset:   " << Str(d, "name") << "\n"
      << "Tenant:    " << (d["tenant"].is_null() ? "(cluster-wide)" : Str(d, "tenant")) << "\n"
      << "Source:    " << Str(d, "source") << "\n";
  if (!Str(d, "description").empty()) out << "About:     " << Str(d, "description") << "\n";
  out << "Created:   " << Age(d.value("created_ms", int64_t{0})) << " ago by "
      << Str(d, "created_by") << "\n"
      << "Latest:    " << (Str(d, "latest").empty() ? "-" : Str(d, "latest")) << "\n";
  std::vector<std::vector<std::string>> rows = {{"VERSION", "FILES", "SIZE", "REGISTERED", "BY"}};
  const auto& versions = d["versions"];
  for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
    rows.push_back({Str(*it, "version"), Str(*it, "files"), Bytes(it->value("bytes", int64_t{0})),
                    Age(it->value("registered_ms", int64_t{0})) + " ago",
                    Str(*it, "registered_by")});
  }
  out << "Versions (newest first):\n";
  Table(out, rows);
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

  auto rf = std::make_shared<RegisterFlags>();
  CLI::App* reg = datasets->add_subcommand(
      "register",
      "Register the content of a directory as a version of a dataset (created if new): the "
      "files are hashed here, in parallel, reading only those changed since the latest version");
  AddCommon(reg, rf->c, true);
  reg->add_option("name", rf->name, "Dataset name (A-Z a-z 0-9 . _ -)")->required();
  reg->add_option("--source", rf->source,
                  "The directory, on a file system every node mounts at the same path")
      ->required();
  reg->add_option("--tenant", rf->tenant,
                  "Whose dataset (default: yours; a cluster-admin's: cluster-wide)");
  reg->add_option("--description", rf->description, "What it is (at most 1024 bytes)");
  reg->add_option("--threads", rf->threads, "Files hashed at once (0: one per CPU)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  reg->callback([rf, &exit_code, &out, &err] {
    exit_code =
        WithApi(rf->c, err, "datasets register", [&](Api& api) { return Register(api, *rf, out); });
  });

  auto lc = std::make_shared<Common>();
  CLI::App* ls = datasets->add_subcommand("ls", "List the datasets you may use");
  AddCommon(ls, *lc, true);
  ls->callback([lc, &exit_code, &out, &err] {
    exit_code = WithApi(*lc, err, "datasets ls", [&](Api& api) -> std::optional<Failure> {
      TY_CALL(res, api.Call("GET", "/api/v1/datasets"));
      if (lc->output == "json") {
        out << res.dump() << "\n";
      } else {
        PrintList(out, res["datasets"]);
      }
      return std::nullopt;
    });
  });

  struct ShowFlags {
    Common c;
    std::string name, version = "latest";
    bool files = false;
  };
  auto sf = std::make_shared<ShowFlags>();
  CLI::App* show =
      datasets->add_subcommand("show", "A dataset: its source and versions (or a version's files)");
  AddCommon(show, sf->c, true);
  show->add_option("name", sf->name, "Dataset name")->required();
  show->add_flag("--files", sf->files, "Print the files of a version (its manifest) instead");
  show->add_option("--version", sf->version, "With --files: which version (default latest)");
  show->callback([sf, &exit_code, &out, &err] {
    exit_code = WithApi(sf->c, err, "datasets show", [&](Api& api) -> std::optional<Failure> {
      if (sf->files) {
        auto text = api.Fetch("/api/v1/datasets/" + Enc(sf->name) +
                              "/manifest?version=" + Enc(sf->version));
        if (auto* failed = std::get_if<Failure>(&text)) return *failed;
        auto m = data::ParseManifest(std::get<std::string>(text));
        if (!m.ok()) return Failure{"the server's manifest: " + m.status().message()};
        if (sf->c.output == "json") {
          json files = json::array();
          for (const auto& e : m->entries) {
            files.push_back({{"path", e.path}, {"size", e.size}, {"sha256", e.sha256}});
          }
          out << json{{"version", m->Version()}, {"files", std::move(files)}}.dump() << "\n";
          return std::nullopt;
        }
        std::vector<std::vector<std::string>> rows = {{"SIZE", "SHA256", "PATH"}};
        for (const auto& e : m->entries) rows.push_back({Bytes(e.size), e.sha256, e.path});
        Table(out, rows);
        return std::nullopt;
      }
      TY_CALL(res, api.Call("GET", "/api/v1/datasets/" + Enc(sf->name)));
      if (sf->c.output == "json") {
        out << res.dump() << "\n";
      } else {
        PrintDataset(out, res);
      }
      return std::nullopt;
    });
  });

  auto df = std::make_shared<RegisterFlags>();
  CLI::App* rm = datasets->add_subcommand(
      "rm", "Delete a dataset from the registry (its files are not touched) [tenant-admin]");
  AddCommon(rm, df->c, false);
  rm->add_option("name", df->name, "Dataset name")->required();
  rm->callback([df, &exit_code, &out, &err] {
    exit_code = WithApi(df->c, err, "datasets rm", [&](Api& api) -> std::optional<Failure> {
      TY_CALL(res, api.Call("DELETE", "/api/v1/datasets/" + Enc(df->name)));
      out << "deleted dataset " << df->name << "\n";
      return std::nullopt;
    });
  });
}

}  // namespace trainyard::cli
