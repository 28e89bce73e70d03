// A dataset version's manifest (docs/datasets.md): every regular file under a directory,
// with its size and SHA-256, and the version that names exactly that content.
//
// The version is "sha256:" + the SHA-256 of the manifest's canonical text, one line per
// file in byte order of path: "<sha256> <size> <path>\n". It depends on the files'
// contents and relative paths only: not on mtimes, owners, modes, the order files were
// written or the number of hashing threads. Empty directories are not part of it.
//
// Hashing reads every file once, in parallel. Given the manifest of an earlier build of
// the same directory, a file whose size and mtime (ns) are unchanged keeps its hash
// unread (incremental re-registration); ManifestStats says how many were read.
//
// Refused, naming the path: symbolic links (a version must not change with what a link
// points to), devices, sockets and FIFOs, paths with a newline, unreadable files, and a
// file that changed while it was read.
//
// Thread-safety: pure functions over the file system; BuildManifest runs its own threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainyard::data {

struct ManifestEntry {
  std::string path;  // relative to the root, '/'-separated
  int64_t size = 0;
  int64_t mtime_ns = 0;  // for incremental rebuilds only; not part of the version
  std::string sha256;    // 64 lowercase hex digits

  bool operator==(const ManifestEntry&) const = default;
};

struct Manifest {
  std::vector<ManifestEntry> entries;  // ascending path (byte order)
  int64_t total_bytes = 0;

  // "sha256:<64 hex>" of the canonical text.
  std::string Version() const;
  bool operator==(const Manifest&) const = default;
};

struct ManifestOptions {
  int threads = 0;                     // 0: the machine's hardware threads
  const Manifest* previous = nullptr;  // an earlier manifest of the same root, or null
};

struct ManifestStats {
  int64_t files_read = 0;    // hashed from their bytes
  int64_t files_reused = 0;  // hash taken from `previous`
  int64_t bytes_read = 0;
};

// The manifest of every regular file under `root` (a directory).
Result<Manifest> BuildManifest(const std::string& root, const ManifestOptions& options = {},
                               ManifestStats* stats = nullptr);

// The manifest as stored: a first line "trainyard-manifest 1", then per entry
// "<sha256> <size> <mtime_ns> <path>". ParseManifest reads it back, refusing anything
// else with the line number and what is wrong.
std::string ManifestToText(const Manifest& m);
Result<Manifest> ParseManifest(std::string_view text);

}  // namespace trainyard::data
