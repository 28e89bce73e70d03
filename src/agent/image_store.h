// The node-local store of unpacked container images (docs/images.md).
//
// No registry is reachable from a node: images arrive as tarballs, loaded with
// `trainyard image load FILE.tar` on each node, and the container executor runs a rank
// with an image's unpacked root filesystem. One store per host, shared by the agents
// and the CLI, is a directory:
//   ROOT/lock                         flock(2)ed while the store changes
//   ROOT/refs.json                    {"name:tag": "sha256:<hex>", ...}
//   ROOT/images/<hex>/rootfs/         the unpacked root filesystem
//   ROOT/images/<hex>/image.json      digest, the config's Env, WorkingDir, Entrypoint,
//                                     Cmd, User, size, layer count, load time
//   ROOT/tmp/                         loads in progress
// refs.json is the one record of which refs name which image (image.json holds no refs,
// so that the two cannot disagree). An image is identified by its digest: "sha256:" and
// the sha256 of its config blob, the image ID that `docker images` / `podman images`
// show.
//
// Load reads a docker-archive tarball (`docker save`, `podman save`: manifest.json) or an
// OCI image layout tarball (oci-layout, index.json, blobs/sha256/), verifies every blob
// stored under its digest, and applies the layers (tar, gzip or zstd) in order with the
// OCI whiteouts (".wh.NAME" deletes NAME of the lower layers, ".wh..wh..opq" empties the
// directory of their content). Nothing is written outside the rootfs: an entry with an
// absolute path, a ".." component, or whose parent path goes through a symlink is
// refused (layers that docker, podman and buildah write record real paths, so none of
// theirs is), and a hard link must name a file inside the rootfs. As root, owners, modes,
// times and extended attributes are kept; otherwise modes and times only, and device
// nodes are skipped. The image is unpacked under ROOT/tmp and renamed into place, so a
// crash leaves no half image and a reader never sees one; stale loads are removed by the
// next Load.
//
// Thread- and process-safety: the methods may be called from any thread and from any
// process at once. Writers (Load, Remove) hold the lock; readers (Resolve, List) take
// none: every file they read is replaced by rename. A Remove while a container runs from
// the image removes the rootfs under it: the executor's business to avoid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace trainyard::agent {

struct ImageRecord {
  std::string digest;             // "sha256:<64 hex>"
  std::vector<std::string> refs;  // canonical "name:tag", sorted; may be empty
  std::string rootfs;             // absolute path of the unpacked root filesystem
  std::vector<std::string> env;   // the image config's Env, "K=V"
  std::string workdir;            // WorkingDir ("" when unset)
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::string user;        // User ("" when unset): "uid[:gid]" or names
  int64_t size_bytes = 0;  // of the unpacked files (hard links counted once)
  int64_t layers = 0;      // how many layers were applied
  int64_t loaded_ms = 0;   // when it was first loaded, ms since the Unix epoch
};

class ImageStore {
 public:
  // A store at `root` (created on first Load). `now_ms` gives the load time (default:
  // the system clock).
  explicit ImageStore(std::string root, std::function<int64_t()> now_ms = nullptr);

  // $TRAINYARD_IMAGE_STORE if set; else /var/lib/trainyard/images for root; else
  // $XDG_DATA_HOME/trainyard/images, or ~/.local/share/trainyard/images.
  static std::string DefaultRoot();

  const std::string& root() const { return root_; }

  // Loads the image in the tarball at `tar_path` and points its refs (RepoTags, or the
  // OCI ref name annotation) and `extra_refs` at it; a ref that named another image
  // moves (that image stays until removed). Loading an image already in the store only
  // adds or moves refs. InvalidArgument naming the tarball and what is wrong with it
  // (not a tarball, no manifest, a missing or corrupt blob, an entry that would write
  // outside the rootfs, ...); FailedPrecondition when the store cannot be written.
  Result<ImageRecord> Load(const std::string& tar_path,
                           const std::vector<std::string>& extra_refs = {});

  // The image `ref` names: "name[:tag]" (tag latest) through refs.json, or by digest
  // ("name@sha256:...", "sha256:..."; the digest alone decides). A name without a
  // registry host also matches the same name under localhost/, docker.io/library/ and
  // docker.io/, as podman and docker record them. NotFound naming the image, the store
  // and the images loaded, and how to load one; InvalidArgument for a malformed ref.
  Result<ImageRecord> Resolve(const std::string& ref) const;

  // Every image, by first ref (images without a ref last, by digest).
  std::vector<ImageRecord> List() const;

  // Removes the ref "name[:tag]"; the image goes when no ref names it any more. A
  // digest ("sha256:...", "name@sha256:...") removes the image and every ref to it.
  // NotFound as Resolve.
  Status Remove(const std::string& ref);

 private:
  std::string root_;
  std::function<int64_t()> now_ms_;
};

}  // namespace trainyard::agent
