// `trainyard image load FILE.tar | ls | rm REF`: the node-local container image store
// (agent/image_store.h), worked on directly: no server is involved, and each node loads
// its own images. --store DIR picks the store (default ImageStore::DefaultRoot()).
//
// Exit statuses: 0 done; 2 bad input (a tarball that is not an image, a malformed or
// unknown ref, bad flags); 1 when the store cannot be read or written.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace trainyard::cli {

struct ImageOptions {
  std::string store;              // "" for ImageStore::DefaultRoot()
  std::string file;               // load: the tarball
  std::vector<std::string> tags;  // load: extra refs to point at the image
  std::string ref;                // rm
  std::string output = "text";    // ls: text or json
};

int RunImageLoad(const ImageOptions& options, std::ostream& out, std::ostream& err);
int RunImageList(const ImageOptions& options, std::ostream& out, std::ostream& err);
int RunImageRemove(const ImageOptions& options, std::ostream& out, std::ostream& err);

// "412.3 MiB", "880 B".
std::string FormatImageSize(int64_t bytes);

void AddImageCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
