#include "cli/image_cmd.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "agent/image_store.h"
#include "cli/app.h"
#include "cli/client.h"

namespace trainyard::cli {
namespace {

agent::ImageStore OpenStore(const ImageOptions& o) {
  return agent::ImageStore(o.store.empty() ? agent::ImageStore::DefaultRoot() : o.store);
}

int Fail(std::ostream& err, const std::string& cmd, const Status& s) {
  err << "trainyard image " << cmd << ": " << s.message() << "\n";
  const bool input = s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound;
  return input ? kExitUsage : kExitFailure;
}

std::string RefsText(const agent::ImageRecord& r) {
  std::string out;
  for (const std::string& ref : r.refs) out += (out.empty() ? "" : ", ") + ref;
  return out.empty() ? "<none>" : out;
}

}  // namespace

std::string FormatImageSize(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = -1;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  return buf;
}

int RunImageLoad(const ImageOptions& o, std::ostream& out, std::ostream& err) {
  agent::ImageStore store = OpenStore(o);
  auto rec = store.Load(o.file, o.tags);
  if (!rec.ok()) return Fail(err, "load", rec.status());
  out << "loaded " << RefsText(*rec) << " " << rec->digest << " ("
      << FormatImageSize(rec->size_bytes) << ", " << rec->layers
      << (rec->layers == 1 ? " layer" : " layers") << ") into " << store.root() << "\n";
  return kExitOk;
}

int RunImageList(const ImageOptions& o, std::ostream& out, std::ostream&) {
  agent::ImageStore store = OpenStore(o);
  const std::vector<agent::ImageRecord> images = store.List();
  if (o.output == "json") {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const agent::ImageRecord& r : images) {
      all.push_back(nlohmann::ordered_json{{"digest", r.digest},
                                           {"refs", r.refs},
                                           {"rootfs", r.rootfs},
                                           {"env", r.env},
                                           {"workdir", r.workdir},
                                           {"entrypoint", r.entrypoint},
                                           {"cmd", r.cmd},
                                           {"user", r.user},
                                           {"size_bytes", r.size_bytes},
                                           {"layers", r.layers},
                                           {"loaded_ms", r.loaded_ms}});
    }
    out << all.dump() << "\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"REF", "DIGEST", "SIZE", "LOADED"}};
  for (const agent::ImageRecord& r : images) {
    const std::string digest = r.digest.substr(7, 12);
    const std::string size = FormatImageSize(r.size_bytes);
    const std::string loaded = Age(r.loaded_ms) + " ago";
    if (r.refs.empty()) rows.push_back({"<none>", digest, size, loaded});
    for (const std::string& ref : r.refs) rows.push_back({ref, digest, size, loaded});
  }
  Table(out, rows);
  return kExitOk;
}

int RunImageRemove(const ImageOptions& o, std::ostream& out, std::ostream& err) {
  agent::ImageStore store = OpenStore(o);
  auto before = store.Resolve(o.ref);
  if (!before.ok()) return Fail(err, "rm", before.status());
  Status s = store.Remove(o.ref);
  if (!s.ok()) return Fail(err, "rm", s);
  auto after = store.Resolve(before->digest);
  out << "removed " << o.ref
      << (after.ok()
              ? " (the image " + before->digest.substr(7, 12) + " stays: " + RefsText(*after) + ")"
              : " (image " + before->digest.substr(7, 12) + " deleted)")
      << "\n";
  return kExitOk;
}

void AddImageCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  CLI::App* image = app.add_subcommand("image", DaemonCommandAbout("image"));
  image->require_subcommand(1);
  auto o = std::make_shared<ImageOptions>();
  auto add_store = [&o](CLI::App* cmd) {
    cmd->add_option("--store", o->store,
                    "The image store directory (default: $TRAINYARD_IMAGE_STORE, else "
                    "/var/lib/trainyard/images for root, else ~/.local/share/trainyard/images)");
  };
  CLI::App* load = image->add_subcommand(
      "load",
      "Load an image tarball (docker save / podman save, or an OCI layout tarball) into this "
      "node's image store");
  load->add_option("file", o->file, "The tarball")->required();
  load->add_option("-t,--tag", o->tags, "Also name the image NAME[:TAG] (repeatable)");
  add_store(load);
  load->callback([o, &exit_code, &out, &err] { exit_code = RunImageLoad(*o, out, err); });

  CLI::App* ls = image->add_subcommand("ls", "List the images in this node's image store");
  ls->add_option("-o,--output", o->output, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  add_store(ls);
  ls->callback([o, &exit_code, &out, &err] { exit_code = RunImageList(*o, out, err); });

  CLI::App* rm = image->add_subcommand(
      "rm",
      "Remove a ref (NAME[:TAG]) from the image store, and the image once no ref names it; a "
      "digest (sha256:HEX, NAME@sha256:HEX) removes the image and all its refs");
  rm->add_option("ref", o->ref, "NAME[:TAG] or a digest")->required();
  add_store(rm);
  rm->callback([o, &exit_code, &out, &err] { exit_code = RunImageRemove(*o, out, err); });
}

}  // namespace trainyard::cli
