#include "agent/image_store.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "core/image_ref.h"
#include "core/names.h"
#include "core/sha256.h"

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kChunk = 1 << 20;
constexpr std::string_view kHow = "load it with trainyard image load FILE.tar";

std::string Errno(int e) { return std::strerror(e); }
std::string Q(std::string_view s) { return QuoteForMessage(s); }

// ----- small file helpers -----

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound(path + ": " + Errno(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes `content` to `path` through a temporary file, fsync and rename: readers see
// the old or the new file, never a part.
Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FailedPrecondition("creating " + tmp + ": " + Errno(errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return FailedPrecondition("writing " + tmp + ": " + Errno(e));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    unlink(tmp.c_str());
    return FailedPrecondition("writing " + tmp + ": " + Errno(errno));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return FailedPrecondition("renaming " + tmp + " to " + path + ": " + Errno(e));
  }
  return Status::Ok();
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return FailedPrecondition("creating the directory " + path + ": " + ec.message());
  return Status::Ok();
}

// ----- the store's lock -----

class StoreLock {
 public:
  static Result<std::unique_ptr<StoreLock>> Acquire(const std::string& root) {
    TY_RETURN_IF_ERROR(MakeDirs(root));
    const std::string path = root + "/lock";
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return FailedPrecondition("opening the image store's lock " + path + ": " + Errno(errno));
    while (flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      close(fd);
      return FailedPrecondition("locking " + path + ": " + Errno(e));
    }
    return std::unique_ptr<StoreLock>(new StoreLock(fd));
  }
  ~StoreLock() { close(fd_); }  // closing releases the flock
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  explicit StoreLock(int fd) : fd_(fd) {}
  int fd_;
};

// ----- libarchive handles -----

struct ArchiveReader {
  archive* a = archive_read_new();
  ~ArchiveReader() { archive_read_free(a); }
};
struct DiskWriter {
  archive* a = archive_write_disk_new();
  ~DiskWriter() { archive_write_free(a); }
};

std::string ArchiveError(archive* a) {
  const char* s = archive_error_string(a);
  return s != nullptr ? s : "unknown error";
}

// Opens `file` (tar; plain, gzip, zstd, xz, bzip2 ...) for reading.
Status OpenTar(ArchiveReader& r, const std::string& file, const std::string& what) {
  archive_read_support_filter_all(r.a);
  archive_read_support_format_tar(r.a);
  archive_read_support_format_gnutar(r.a);
  if (archive_read_open_filename(r.a, file.c_str(), kChunk) != ARCHIVE_OK) {
    return InvalidArgument(what + ": not a readable tar archive (" + ArchiveError(r.a) + ")");
  }
  return Status::Ok();
}

// ----- entry paths -----

std::string Basename(std::string_view p) {
  const size_t slash = p.rfind('/');
  return std::string(slash == std::string_view::npos ? p : p.substr(slash + 1));
}
std::string Dirname(std::string_view p) {
  const size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? "" : std::string(p.substr(0, slash));
}
std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// A tar entry's path, relative, without "." components, repeated or trailing slashes:
// "./usr//bin/" -> "usr/bin"; "." -> "". Absolute paths and ".." components are errors
// (`why` says which).
std::optional<std::string> CleanEntryPath(std::string_view name, std::string& why) {
  if (name.starts_with('/')) {
    why = "is an absolute path";
    return std::nullopt;
  }
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(start, end - start);
    if (part == "..") {
      why = "has a \"..\" component";
      return std::nullopt;
    }
    if (!part.empty() && part != ".") out = Join(out, std::string(part));
    start = end + 1;
  }
  return out;
}

// OK when no existing parent directory of `rel` under `rootfs` is a symlink. `rel` is
// clean (CleanEntryPath). Writing through a symlink could leave the rootfs.
Status CheckNoSymlinkParents(const std::string& rootfs, const std::string& rel,
                             const std::string& where) {
  std::string prefix;
  size_t start = 0;
  while (true) {
    const size_t slash = rel.find('/', start);
    if (slash == std::string::npos) return Status::Ok();
    prefix = rel.substr(0, slash);
    struct stat st {};
    const std::string path = rootfs + "/" + prefix;
    if (lstat(path.c_str(), &st) != 0) return Status::Ok();  // created as a directory
    if (S_ISLNK(st.st_mode)) {
      std::array<char, 4096> target{};
      const ssize_t n = readlink(path.c_str(), target.data(), target.size() - 1);
      return InvalidArgument(where + " goes through the symlink " + Q(prefix) + " (-> " +
                             Q(n > 0 ? std::string(target.data(), n) : "?") +
                             "): refusing to write where it may lead, outside the image's root "
                             "filesystem");
    }
    start = slash + 1;
  }
}

Status RemovePath(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);  // does not follow symlinks
  if (ec) return FailedPrecondition("removing " + path + ": " + ec.message());
  return Status::Ok();
}

// ----- the tarball -----

// A regular file of the tarball, copied out to `file`.
struct Blob {
  std::string file;
  std::string sha256;  // hex
  int64_t size = 0;
};

struct Tarball {
  std::string path;                          // for messages
  std::map<std::string, Blob> blobs;         // clean entry path -> copy
  std::map<std::string, std::string> links;  // clean entry path -> clean path it names

  const Blob* Find(std::string name) const {
    for (int hops = 0; hops < 16; ++hops) {
      if (auto b = blobs.find(name); b != blobs.end()) return &b->second;
      auto l = links.find(name);
      if (l == links.end()) return nullptr;
      name = l->second;
    }
    return nullptr;
  }
};

// Copies every regular file of the tarball at `path` to a numbered file in `dir`,
// hashing it on the way (the entry names are only keys: nothing is written by them).
Result<Tarball> ReadTarball(const std::string& path, const std::string& dir) {
  Tarball t;
  t.path = path;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return InvalidArgument(path + ": " + Errno(errno));
  if (S_ISDIR(st.st_mode)) return InvalidArgument(path + ": is a directory, not a tarball");
  ArchiveReader r;
  if (Status s = OpenTar(r, path, path); !s.ok()) {
    return InvalidArgument(s.message() + "; want what docker save, podman save or skopeo write");
  }
  std::vector<char> buf(kChunk);
  int n_files = 0;
  while (true) {
    archive_entry* e = nullptr;
    const int rc = archive_read_next_header(r.a, &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      return InvalidArgument(path + ": not a readable tar archive (" + ArchiveError(r.a) +
                             "); want what docker save, podman save or skopeo write");
    }
    std::string why;
    const char* raw = archive_entry_pathname(e);
    auto name = CleanEntryPath(raw != nullptr ? raw : "", why);
    if (!name) continue;  // a name we would never look up
    if (const char* hl = archive_entry_hardlink(e)) {
      if (auto target = CleanEntryPath(hl, why)) t.links[*name] = *target;
      continue;
    }
    const mode_t type = archive_entry_filetype(e);
    if (type == AE_IFLNK) {
      // docker save links a layer that another image entry already holds.
      const char* target = archive_entry_symlink(e);
      std::string joined = Join(Dirname(*name), target != nullptr ? target : "");
      // Resolve ".." against the entry's own directory.
      std::vector<std::string> parts;
      std::stringstream ss(joined);
      for (std::string p; std::getline(ss, p, '/');) {
        if (p.empty() || p == ".") continue;
        if (p == "..") {
          if (!parts.empty()) parts.pop_back();
          continue;
        }
        parts.push_back(p);
      }
      std::string clean;
      for (const auto& p : parts) clean = Join(clean, p);
      t.links[*name] = clean;
      continue;
    }
    if (type != AE_IFREG) continue;
    Blob b;
    b.file = dir + "/" + std::to_string(++n_files);
    int fd = open(b.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return FailedPrecondition("creating " + b.file + ": " + Errno(errno));
    Sha256 h;
    while (true) {
      const la_ssize_t n = archive_read_data(r.a, buf.data(), buf.size());
      if (n < 0) {
        close(fd);
        return InvalidArgument(path + ": reading " + Q(*name) + ": " + ArchiveError(r.a));
      }
      if (n == 0) break;
      h.Update(buf.data(), static_cast<size_t>(n));
      b.size += n;
      for (la_ssize_t done = 0; done < n;) {
        const ssize_t w = write(fd, buf.data() + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          const int err = errno;
          close(fd);
          return FailedPrecondition("writing " + b.file + ": " + Errno(err));
        }
        done += w;
      }
    }
    if (close(fd) != 0) return FailedPrecondition("writing " + b.file + ": " + Errno(errno));
    b.sha256 = h.Hex();
    t.blobs[*name] = std::move(b);
  }
  if (t.blobs.empty() && t.links.empty()) {
    return InvalidArgument(path +
                           ": an empty tar archive; want what docker save, podman save "
                           "or skopeo write");
  }
  return t;
}

// The file `name` of the tarball; `what` says what named it ("manifest.json names layer").
// A file stored as blobs/sha256/<hex> must hash to <hex>.
Result<const Blob*> FindBlob(const Tarball& t, const std::string& name, const std::string& what) {
  std::string why;
  auto clean = CleanEntryPath(name, why);
  const Blob* b = clean ? t.Find(*clean) : nullptr;
  if (b == nullptr) {
    return InvalidArgument(t.path + ": " + what + " " + Q(name) + ", which is not in it");
  }
  constexpr std::string_view kSha = "blobs/sha256/";
  if (clean->starts_with(kSha)) {
    const std::string want = clean->substr(kSha.size());
    if (want != b->sha256) {
      return InvalidArgument(t.path + ": the blob " + Q(*clean) + " is corrupt: its sha256 is " +
                             b->sha256 + ", not the " + want + " its name says");
    }
  }
  return b;
}

// The file of blob `digest` in an OCI layout.
Result<const Blob*> FindDigest(const Tarball& t, const json& descriptor, const std::string& what) {
  const json* d =
      descriptor.is_object() && descriptor.contains("digest") ? &descriptor["digest"] : nullptr;
  if (d == nullptr || !d->is_string()) {
    return InvalidArgument(t.path + ": " + what + " has no \"digest\"");
  }
  const std::string digest = d->get<std::string>();
  if (!IsImageDigest(digest)) {
    return InvalidArgument(t.path + ": " + what + " has the digest " + Q(digest) +
                           "; only sha256:<64 hex digits> is supported");
  }
  return FindBlob(t, "blobs/sha256/" + digest.substr(7), what + " names the blob");
}

Result<json> ParseJsonBlob(const Tarball& t, const Blob& b, const std::string& name) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadFile(b.file));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(t.path + ": " + name + " is not valid JSON");
  return j;
}

// What the tarball holds, once its manifest has been read.
struct ImageSource {
  const Blob* config = nullptr;
  std::vector<std::pair<std::string, const Blob*>> layers;  // name in the tarball, file
  std::vector<std::string> refs;
};

Result<std::string> StringField(const Tarball& t, const json& j, const char* key,
                                const std::string& what) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) {
    return InvalidArgument(t.path + ": " + what + " has no \"" + key + "\" string");
  }
  return j[key].get<std::string>();
}

// docker-archive: manifest.json = [{"Config": F, "RepoTags": [...], "Layers": [F, ...]}].
Result<ImageSource> ReadDockerManifest(const Tarball& t, const Blob& manifest_blob) {
  TY_ASSIGN_OR_RETURN(json m, ParseJsonBlob(t, manifest_blob, "manifest.json"));
  if (!m.is_array() || m.empty()) {
    return InvalidArgument(t.path + ": manifest.json is not a non-empty array of images");
  }
  if (m.size() > 1) {
    return InvalidArgument(t.path + ": manifest.json lists " + std::to_string(m.size()) +
                           " images; save one image per tarball");
  }
  const json& img = m[0];
  ImageSource src;
  TY_ASSIGN_OR_RETURN(std::string config, StringField(t, img, "Config", "manifest.json"));
  TY_ASSIGN_OR_RETURN(src.config, FindBlob(t, config, "manifest.json names the config"));
  if (!img.contains("Layers") || !img["Layers"].is_array()) {
    return InvalidArgument(t.path + ": manifest.json has no \"Layers\" array");
  }
  for (const json& l : img["Layers"]) {
    if (!l.is_string()) return InvalidArgument(t.path + ": manifest.json: a layer is not a string");
    TY_ASSIGN_OR_RETURN(const Blob* b,
                        FindBlob(t, l.get<std::string>(), "manifest.json names the layer"));
    src.layers.emplace_back(l.get<std::string>(), b);
  }
  if (img.contains("RepoTags") && img["RepoTags"].is_array()) {
    for (const json& r : img["RepoTags"]) {
      if (r.is_string()) src.refs.push_back(r.get<std::string>());
    }
  }
  return src;
}

// j[key], or null when j is not an object or has no such key.
json Field(const json& j, const char* key) {
  if (!j.is_object()) return json();
  auto it = j.find(key);
  return it == j.end() ? json() : *it;
}

std::string FieldString(const json& j, const char* key) {
  json v = Field(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

std::string HostArchitecture() {
  utsname u{};
  uname(&u);
  const std::string m = u.machine;
  if (m == "x86_64") return "amd64";
  if (m == "aarch64") return "arm64";
  return m;
}

// OCI image layout: index.json -> manifest (perhaps through an index of platforms) ->
// config + layers, every blob verified against its digest.
Result<ImageSource> ReadOciLayout(const Tarball& t, const Blob& index_blob) {
  TY_ASSIGN_OR_RETURN(json index, ParseJsonBlob(t, index_blob, "index.json"));
  if (!index.is_object() || !index.contains("manifests") || !index["manifests"].is_array() ||
      index["manifests"].empty()) {
    return InvalidArgument(t.path + ": index.json has no \"manifests\"");
  }
  ImageSource src;
  std::string manifest_digest;
  const Blob* manifest = nullptr;
  for (const json& d : index["manifests"]) {
    TY_ASSIGN_OR_RETURN(const Blob* b, FindDigest(t, d, "index.json"));
    TY_ASSIGN_OR_RETURN(json body, ParseJsonBlob(t, *b, "the manifest " + b->sha256));
    std::string media = FieldString(d, "mediaType");
    if (media.empty()) media = FieldString(body, "mediaType");
    std::string digest = b->sha256;
    if (media.find("index") != std::string::npos ||
        media.find("manifest.list") != std::string::npos) {
      // An index of platforms: the one this node runs.
      const std::string arch = HostArchitecture();
      const json* pick = nullptr;
      const json list = Field(body, "manifests");
      for (const json& p : list.is_array() ? list : json::array()) {
        const json plat = Field(p, "platform");
        const std::string os = FieldString(plat, "os");
        if ((os.empty() || os == "linux") && FieldString(plat, "architecture") == arch) {
          pick = &p;
          break;
        }
      }
      if (pick == nullptr) {
        return InvalidArgument(t.path + ": the image index " + b->sha256 +
                               " has no manifest for linux/" + arch);
      }
      TY_ASSIGN_OR_RETURN(b, FindDigest(t, *pick, "the image index " + digest));
      digest = b->sha256;
    }
    if (manifest != nullptr && digest != manifest_digest) {
      return InvalidArgument(t.path +
                             ": index.json lists more than one image; save one image "
                             "per tarball");
    }
    manifest = b;
    manifest_digest = digest;
    const json ann = Field(d, "annotations");
    std::string ref = FieldString(ann, "org.opencontainers.image.ref.name");
    const std::string full = FieldString(ann, "io.containerd.image.name");
    // A bare tag ("v2") with the full name beside it, as docker save writes them.
    if (!full.empty() && ref.find_first_of(":/") == std::string::npos) ref = full;
    if (!ref.empty()) src.refs.push_back(ref);
  }
  TY_ASSIGN_OR_RETURN(json m, ParseJsonBlob(t, *manifest, "the manifest " + manifest_digest));
  const std::string what = "the manifest sha256:" + manifest_digest;
  TY_ASSIGN_OR_RETURN(src.config, FindDigest(t, Field(m, "config"), what + "'s config"));
  const json layers = Field(m, "layers");
  if (!layers.is_array()) {
    return InvalidArgument(t.path + ": " + what + " has no \"layers\" array");
  }
  for (const json& l : layers) {
    TY_ASSIGN_OR_RETURN(const Blob* b, FindDigest(t, l, what + "'s layer"));
    src.layers.emplace_back(FieldString(l, "digest"), b);
  }
  return src;
}

Result<ImageSource> ReadSource(const Tarball& t) {
  if (const Blob* m = t.Find("manifest.json")) return ReadDockerManifest(t, *m);
  if (const Blob* i = t.Find("index.json")) return ReadOciLayout(t, *i);
  return InvalidArgument(t.path +
                         ": neither manifest.json (a docker-archive, as docker save "
                         "and podman save write) nor index.json (an OCI image layout) "
                         "is in it");
}

// ----- applying layers -----

struct Whiteouts {
  std::vector<std::string> opaque_dirs;  // rel paths
  std::vector<std::string> removed;      // rel paths
};

// Applies one layer to `rootfs`: its whiteouts first (they hide lower layers only), then
// its files. `where` names the tarball and the layer in messages.
Status ApplyLayer(const std::string& layer_file, const std::string& rootfs,
                  const std::string& where, bool as_root) {
  Whiteouts wh;
  {
    ArchiveReader r;
    TY_RETURN_IF_ERROR(OpenTar(r, layer_file, where));
    archive_entry* e = nullptr;
    int rc;
    while ((rc = archive_read_next_header(r.a, &e)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
      const char* raw = archive_entry_pathname(e);
      const std::string name = raw != nullptr ? raw : "";
      std::string why;
      auto rel = CleanEntryPath(name, why);
      if (!rel) {
        return InvalidArgument(where + ": the entry " + Q(name) + " " + why +
                               ": refusing to write outside the image's root filesystem");
      }
      const std::string base = Basename(*rel);
      if (base == ".wh..wh..opq") {
        wh.opaque_dirs.push_back(Dirname(*rel));
      } else if (base.starts_with(".wh.")) {
        wh.removed.push_back(Join(Dirname(*rel), base.substr(4)));
      }
    }
    if (rc != ARCHIVE_EOF) {
      return InvalidArgument(where + ": not a readable tar archive: " + ArchiveError(r.a));
    }
  }
  for (const std::string& dir : wh.opaque_dirs) {
    const std::string what = "the whiteout " + Q(Join(dir, ".wh..wh..opq"));
    TY_RETURN_IF_ERROR(CheckNoSymlinkParents(rootfs, Join(dir, "x"), where + ": " + what));
    const std::string path = dir.empty() ? rootfs : rootfs + "/" + dir;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    std::error_code ec;
    for (const auto& child : fs::directory_iterator(path, ec)) {
      TY_RETURN_IF_ERROR(RemovePath(child.path()));
    }
    if (ec) return FailedPrecondition("listing " + path + ": " + ec.message());
  }
  for (const std::string& rel : wh.removed) {
    TY_RETURN_IF_ERROR(CheckNoSymlinkParents(
        rootfs, rel, where + ": the whiteout " + Q(Join(Dirname(rel), ".wh." + Basename(rel)))));
    TY_RETURN_IF_ERROR(RemovePath(rootfs + "/" + rel));
  }

  ArchiveReader r;
  TY_RETURN_IF_ERROR(OpenTar(r, layer_file, where));
  DiskWriter w;
  int flags = ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
              ARCHIVE_EXTRACT_SECURE_NODOTDOT;
  if (as_root) flags |= ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_XATTR;
  archive_write_disk_set_options(w.a, flags);
  // No user or group lookup: owners stay the numbers in the layer (the image's
  // /etc/passwd, not the host's, gives them names).
  archive_entry* e = nullptr;
  int rc;
  while ((rc = archive_read_next_header(r.a, &e)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
    const std::string name = archive_entry_pathname(e) != nullptr ? archive_entry_pathname(e) : "";
    std::string why;
    const std::string rel = *CleanEntryPath(name, why);  // checked in the first pass
    if (rel.empty() || Basename(rel).starts_with(".wh.")) continue;
    const std::string entry = where + ": the entry " + Q(name);
    TY_RETURN_IF_ERROR(CheckNoSymlinkParents(rootfs, rel, entry));
    const mode_t type = archive_entry_filetype(e);
    if (!as_root && (type == AE_IFCHR || type == AE_IFBLK)) continue;
    const std::string path = rootfs + "/" + rel;
    // A file of this layer replaces a directory of a lower one, and a directory replaces
    // a non-directory (libarchive keeps an existing directory).
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) != (type == AE_IFDIR)) {
      TY_RETURN_IF_ERROR(RemovePath(path));
    }
    archive_entry_copy_pathname(e, path.c_str());
    if (const char* hl = archive_entry_hardlink(e)) {
      auto target = CleanEntryPath(hl, why);
      if (!target || target->empty()) {
        return InvalidArgument(entry + " is a hard link to " + Q(hl) +
                               ", outside the image's root filesystem");
      }
      TY_RETURN_IF_ERROR(CheckNoSymlinkParents(rootfs, *target, entry + "'s link target"));
      archive_entry_copy_hardlink(e, (rootfs + "/" + *target).c_str());
    }
    if (archive_write_header(w.a, e) < ARCHIVE_WARN) {
      return InvalidArgument(entry + ": " + ArchiveError(w.a));
    }
    if (archive_entry_size(e) > 0) {
      const void* block = nullptr;
      size_t size = 0;
      la_int64_t offset = 0;
      int drc;
      while ((drc = archive_read_data_block(r.a, &block, &size, &offset)) == ARCHIVE_OK) {
        if (archive_write_data_block(w.a, block, size, offset) < ARCHIVE_WARN) {
          return FailedPrecondition(entry + ": " + ArchiveError(w.a));
        }
      }
      if (drc != ARCHIVE_EOF) return InvalidArgument(entry + ": " + ArchiveError(r.a));
    }
    if (archive_write_finish_entry(w.a) < ARCHIVE_WARN) {
      return FailedPrecondition(entry + ": " + ArchiveError(w.a));
    }
  }
  if (rc != ARCHIVE_EOF) {
    return InvalidArgument(where + ": not a readable tar archive: " + ArchiveError(r.a));
  }
  // Directory modes and times are set last (a read-only directory still took its files).
  if (archive_write_close(w.a) < ARCHIVE_WARN) {
    return FailedPrecondition(where + ": " + ArchiveError(w.a));
  }
  return Status::Ok();
}

// Bytes of the regular files under `dir`, each inode once.
int64_t TreeSize(const std::string& dir) {
  int64_t total = 0;
  std::set<std::pair<dev_t, ino_t>> seen;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    struct stat st {};
    if (lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_nlink > 1 && !seen.insert({st.st_dev, st.st_ino}).second) continue;
    total += st.st_size;
  }
  return total;
}

std::vector<std::string> Strings(const json& j) {
  std::vector<std::string> out;
  if (j.is_array()) {
    for (const json& s : j) {
      if (s.is_string()) out.push_back(s.get<std::string>());
    }
  } else if (j.is_string()) {
    out.push_back(j.get<std::string>());
  }
  return out;
}

json RecordJson(const ImageRecord& r) {
  return json{{"digest", r.digest},         {"env", r.env},       {"workdir", r.workdir},
              {"entrypoint", r.entrypoint}, {"cmd", r.cmd},       {"user", r.user},
              {"size_bytes", r.size_bytes}, {"layers", r.layers}, {"loaded_ms", r.loaded_ms}};
}

// ----- refs.json and image.json -----

using RefMap = std::map<std::string, std::string>;  // canonical ref -> digest

Result<RefMap> ReadRefs(const std::string& root) {
  const std::string path = root + "/refs.json";
  auto text = ReadFile(path);
  if (!text.ok()) return RefMap{};
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLoss(path +
                    ": not a JSON object of ref -> digest; remove it and load the images "
                    "again");
  }
  RefMap out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

Status WriteRefs(const std::string& root, const RefMap& refs) {
  return WriteFileAtomically(root + "/refs.json", json(refs).dump(2) + "\n");
}

std::string ImageDir(const std::string& root, const std::string& digest) {
  return root + "/images/" + digest.substr(7);
}

Result<ImageRecord> ReadRecord(const std::string& root, const std::string& digest,
                               const RefMap& refs) {
  const std::string path = ImageDir(root, digest) + "/image.json";
  auto text = ReadFile(path);
  if (!text.ok()) return NotFound(path + ": missing");
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLoss(path + ": not valid JSON; remove the image and load it again");
  }
  ImageRecord r;
  r.digest = digest;
  r.rootfs = ImageDir(root, digest) + "/rootfs";
  auto number = [&](const char* key) {
    json v = Field(j, key);
    return v.is_number_integer() ? v.get<int64_t>() : 0;
  };
  r.env = Strings(Field(j, "env"));
  r.workdir = FieldString(j, "workdir");
  r.entrypoint = Strings(Field(j, "entrypoint"));
  r.cmd = Strings(Field(j, "cmd"));
  r.user = FieldString(j, "user");
  r.size_bytes = number("size_bytes");
  r.layers = number("layers");
  r.loaded_ms = number("loaded_ms");
  for (const auto& [ref, d] : refs) {
    if (d == digest) r.refs.push_back(ref);
  }
  return r;
}

// The keys refs.json may hold for `ref` (no digest): as written, and for a name without
// a registry host, as podman and docker record it.
std::vector<std::string> RefKeys(const ImageRef& ref) {
  std::vector<std::string> keys = {ref.ToString()};
  const std::string first = ref.name.substr(0, ref.name.find('/'));
  const bool has_host = ref.name.find('/') != std::string::npos &&
                        (first.find_first_of(".:") != std::string::npos || first == "localhost");
  if (!has_host) {
    for (const char* prefix : {"localhost/", "docker.io/library/", "docker.io/"}) {
      keys.push_back(prefix + ref.ToString());
    }
  }
  return keys;
}

std::string LoadedList(const RefMap& refs) {
  if (refs.empty()) return "no images loaded";
  std::string out = "loaded images: ";
  int n = 0;
  for (const auto& [ref, digest] : refs) {
    if (n == 10) {
      out += ", and " + std::to_string(refs.size() - 10) + " more";
      break;
    }
    out += (n++ > 0 ? ", " : "") + ref;
  }
  return out;
}

class TempDir {
 public:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

ImageStore::ImageStore(std::string root, std::function<int64_t()> now_ms)
    : now_ms_(std::move(now_ms)) {
  std::error_code ec;
  // Canonical: libarchive refuses to extract through a symlink anywhere in a path.
  fs::path p = fs::weakly_canonical(fs::absolute(root, ec), ec);
  root_ = ec ? root : p.lexically_normal().string();
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  if (!now_ms_) {
    now_ms_ = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
}

std::string ImageStore::DefaultRoot() {
  if (const char* s = std::getenv("TRAINYARD_IMAGE_STORE"); s != nullptr && *s) return s;
  if (geteuid() == 0) return "/var/lib/trainyard/images";
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && *x) {
    return std::string(x) + "/trainyard/images";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home ? home : ".") + "/.local/share/trainyard/images";
}

Result<ImageRecord> ImageStore::Load(const std::string& tar_path,
                                     const std::vector<std::string>& extra_refs) {
  std::vector<ImageRef> extra;
  for (const std::string& r : extra_refs) {
    TY_ASSIGN_OR_RETURN(ImageRef ref, ParseImageRef(r));
    if (!ref.digest.empty()) {
      return InvalidArgument("image " + Q(r) +
                             ": a ref to point at a loaded image is name[:tag], "
                             "without a digest");
    }
    extra.push_back(std::move(ref));
  }
  TY_ASSIGN_OR_RETURN(auto lock, StoreLock::Acquire(root_));
  TY_RETURN_IF_ERROR(RemovePath(root_ + "/tmp"));  // loads that did not finish
  TY_RETURN_IF_ERROR(MakeDirs(root_ + "/tmp"));
  TY_RETURN_IF_ERROR(MakeDirs(root_ + "/images"));
  std::string pattern = root_ + "/tmp/load-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    return FailedPrecondition("creating a directory in " + root_ + "/tmp: " + Errno(errno));
  }
  TempDir tmp(pattern);
  TY_RETURN_IF_ERROR(MakeDirs(tmp.path() + "/blobs"));
  TY_ASSIGN_OR_RETURN(Tarball tarball, ReadTarball(tar_path, tmp.path() + "/blobs"));

  ImageSource src;
  json config;
  try {
    TY_ASSIGN_OR_RETURN(src, ReadSource(tarball));
    TY_ASSIGN_OR_RETURN(config, ParseJsonBlob(tarball, *src.config, "the image config"));
    if (!config.is_object()) {
      return InvalidArgument(tar_path + ": the image config is not a JSON object");
    }
  } catch (const json::exception& e) {
    return InvalidArgument(tar_path + ": a manifest, index or config of unexpected shape (" +
                           e.what() + ")");
  }
  std::vector<std::string> refs;
  for (const std::string& r : src.refs) {
    auto ref = ParseImageRef(r);
    if (!ref.ok()) return InvalidArgument(tar_path + ": " + ref.status().message());
    refs.push_back(ref->ToString());
  }
  for (const ImageRef& r : extra) refs.push_back(r.ToString());

  const std::string digest = "sha256:" + src.config->sha256;
  const std::string final_dir = ImageDir(root_, digest);
  struct stat st {};
  if (stat((final_dir + "/image.json").c_str(), &st) != 0) {
    const json c = Field(config, "config");
    const json rootfs_info = Field(config, "rootfs");
    if (rootfs_info.is_object() && rootfs_info.contains("diff_ids") &&
        rootfs_info["diff_ids"].is_array() && rootfs_info["diff_ids"].size() != src.layers.size()) {
      return InvalidArgument(
          tar_path + ": the image config lists " + std::to_string(rootfs_info["diff_ids"].size()) +
          " layers (rootfs.diff_ids), the manifest " + std::to_string(src.layers.size()));
    }
    const std::string image_dir = tmp.path() + "/image";
    const std::string rootfs = image_dir + "/rootfs";
    TY_RETURN_IF_ERROR(MakeDirs(rootfs));
    chmod(rootfs.c_str(), 0755);
    const bool as_root = geteuid() == 0;
    for (size_t i = 0; i < src.layers.size(); ++i) {
      const std::string where =
          tar_path + ": layer " + std::to_string(i + 1) + " (" + src.layers[i].first + ")";
      TY_RETURN_IF_ERROR(ApplyLayer(src.layers[i].second->file, rootfs, where, as_root));
    }
    ImageRecord rec;
    rec.digest = digest;
    if (c.is_object()) {
      rec.env = Strings(Field(c, "Env"));
      rec.workdir = FieldString(c, "WorkingDir");
      rec.entrypoint = Strings(Field(c, "Entrypoint"));
      rec.cmd = Strings(Field(c, "Cmd"));
      rec.user = FieldString(c, "User");
    }
    rec.size_bytes = TreeSize(rootfs);
    rec.layers = static_cast<int64_t>(src.layers.size());
    rec.loaded_ms = now_ms_();
    TY_RETURN_IF_ERROR(
        WriteFileAtomically(image_dir + "/image.json", RecordJson(rec).dump(2) + "\n"));
    if (rename(image_dir.c_str(), final_dir.c_str()) != 0) {
      return FailedPrecondition("renaming " + image_dir + " to " + final_dir + ": " + Errno(errno));
    }
  }
  TY_ASSIGN_OR_RETURN(RefMap map, ReadRefs(root_));
  for (const std::string& r : refs) map[r] = digest;
  TY_RETURN_IF_ERROR(WriteRefs(root_, map));
  return ReadRecord(root_, digest, map);
}

namespace {

// The entry of `map` that names `ref` (a name and tag, no digest), or map.end().
RefMap::iterator FindRef(RefMap& map, const ImageRef& ref) {
  for (const std::string& key : RefKeys(ref)) {
    if (auto it = map.find(key); it != map.end()) return it;
  }
  return map.end();
}

}  // namespace

Result<ImageRecord> ImageStore::Resolve(const std::string& text) const {
  TY_ASSIGN_OR_RETURN(ImageRef ref, ParseImageRef(text));
  TY_ASSIGN_OR_RETURN(RefMap map, ReadRefs(root_));
  std::string digest = ref.digest;
  if (digest.empty()) {
    if (auto it = FindRef(map, ref); it != map.end()) digest = it->second;
  }
  if (!digest.empty()) {
    auto rec = ReadRecord(root_, digest, map);
    if (rec.ok() || rec.status().code() != StatusCode::kNotFound) return rec;
  }
  return NotFound("image " + Q(text) + " is not in the image store " + root_ + " (" +
                  LoadedList(map) + "); " + std::string(kHow));
}

std::vector<ImageRecord> ImageStore::List() const {
  std::vector<ImageRecord> out;
  auto map = ReadRefs(root_);
  const RefMap refs = map.ok() ? *map : RefMap{};
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root_ + "/images", ec)) {
    const std::string digest = "sha256:" + d.path().filename().string();
    if (!IsImageDigest(digest)) continue;
    if (auto rec = ReadRecord(root_, digest, refs); rec.ok()) out.push_back(std::move(*rec));
  }
  std::sort(out.begin(), out.end(), [](const ImageRecord& a, const ImageRecord& b) {
    if (a.refs.empty() != b.refs.empty()) return b.refs.empty();
    if (!a.refs.empty() && a.refs[0] != b.refs[0]) return a.refs[0] < b.refs[0];
    return a.digest < b.digest;
  });
  return out;
}

Status ImageStore::Remove(const std::string& text) {
  TY_ASSIGN_OR_RETURN(ImageRef ref, ParseImageRef(text));
  TY_ASSIGN_OR_RETURN(auto lock, StoreLock::Acquire(root_));
  TY_ASSIGN_OR_RETURN(RefMap map, ReadRefs(root_));
  std::string digest = ref.digest;
  if (digest.empty()) {
    if (auto it = FindRef(map, ref); it != map.end()) {
      digest = it->second;
      map.erase(it);
    }
  } else {
    std::erase_if(map, [&](const auto& kv) { return kv.second == digest; });
  }
  struct stat st {};
  const std::string dir = digest.empty() ? "" : ImageDir(root_, digest);
  const bool image_exists = !dir.empty() && stat(dir.c_str(), &st) == 0;
  if (digest.empty() || (!ref.digest.empty() && !image_exists)) {
    return NotFound("image " + Q(text) + " is not in the image store " + root_ + " (" +
                    LoadedList(map) + ")");
  }
  TY_RETURN_IF_ERROR(WriteRefs(root_, map));
  for (const auto& [r, d] : map) {
    if (d == digest) return Status::Ok();  // still named
  }
  if (!image_exists) return Status::Ok();
  // Out of images/ first, in one step, so that no reader finds half an image.
  TY_RETURN_IF_ERROR(MakeDirs(root_ + "/tmp"));
  const std::string gone = root_ + "/tmp/rm-" + digest.substr(7) + "-" + std::to_string(getpid());
  if (rename(dir.c_str(), gone.c_str()) != 0) {
    return FailedPrecondition("renaming " + dir + " to " + gone + ": " + Errno(errno));
  }
  return RemovePath(gone);
}

}  // namespace trainyard::agent
