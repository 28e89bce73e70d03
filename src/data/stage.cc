#include "data/stage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "core/names.h"
#include "core/sha256.h"

namespace trainyard::data {
namespace {

namespace fs = std::filesystem;

constexpr size_t kChunk = 1 << 20;

std::string Errno(int e) { return std::strerror(e); }

}  // namespace

void RemoveStaged(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) chmod(it->path().c_str(), 0755);
  }
  chmod(path.c_str(), 0755);
  fs::remove_all(path, ec);
}

Status SharedPathFetcher::Copy(const ManifestEntry& e, const std::string& dest,
                               const std::function<void(int64_t)>& progress) {
  const std::string src = root_ + "/" + e.path;
  const int in = open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (in < 0) {
    return FailedPrecondition(
        e.path + ": cannot open " + src + ": " + Errno(errno) +
        (errno == ENOENT ? " (removed since the version was registered?)" : ""));
  }
  const int out = open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (out < 0) {
    const int err = errno;
    close(in);
    return FailedPrecondition(e.path + ": cannot create " + dest + ": " + Errno(err));
  }
  posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
  Sha256 h;
  std::vector<char> buf(kChunk);
  int64_t total = 0;
  Status s = Status::Ok();
  for (;;) {
    const ssize_t n = read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = FailedPrecondition(e.path + ": cannot read " + src + ": " + Errno(errno));
      break;
    }
    if (n == 0) break;
    h.Update(buf.data(), static_cast<size_t>(n));
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        s = FailedPrecondition(e.path + ": cannot write " + dest + ": " + Errno(errno) +
                               (errno == ENOSPC ? " (the cache's disk is full)" : ""));
        break;
      }
      done += w;
    }
    if (!s.ok()) break;
    total += n;
    if (total > e.size) break;  // longer than the version's: no need to read on
    if (progress) progress(n);
  }
  close(in);
  if (close(out) != 0 && s.ok()) {
    s = FailedPrecondition(e.path + ": cannot write " + dest + ": " + Errno(errno));
  }
  if (s.ok() && total != e.size) {
    s = FailedPrecondition(e.path + ": " + std::to_string(e.size) + " bytes in the version, " +
                           (total > e.size ? "more" : std::to_string(total)) +
                           " at the source: it changed since the version was registered");
  }
  if (s.ok()) {
    const std::string got = h.Hex();
    if (got != e.sha256) {
      s = FailedPrecondition(e.path + ": its content at the source (sha256 " + got.substr(0, 12) +
                             "…) is not the version's (" + e.sha256.substr(0, 12) +
                             "…): it changed since the version was registered");
    }
  }
  return s;
}

Result<std::unique_ptr<Fetcher>> OpenFetcher(const std::string& source) {
  if (!source.empty() && source.front() == '/') {
    std::error_code ec;
    if (!fs::is_directory(source, ec)) {
      return FailedPrecondition("source " + QuoteForMessage(source) +
                                " is not a directory here (is the shared file system mounted?)");
    }
    return std::unique_ptr<Fetcher>(new SharedPathFetcher(source));
  }
  return FailedPrecondition("source " + QuoteForMessage(source) +
                            ": this build fetches from directories only (an absolute path on a "
                            "file system every node mounts)");
}

Status StageVersion(const Manifest& m, Fetcher& fetcher, const std::string& dir,
                    const StageOptions& options) {
  std::error_code ec;
  if (fs::exists(dir, ec)) return AlreadyExists(dir + " exists");
  const std::string partial = dir + ".partial";
  RemoveStaged(partial);
  if (!fs::create_directories(partial, ec) && ec) {
    return FailedPrecondition("cannot create " + partial + ": " + ec.message());
  }
  // The directories first, in one thread.
  std::set<std::string> dirs;
  for (const ManifestEntry& e : m.entries) {
    for (size_t slash = e.path.find('/'); slash != std::string::npos;
         slash = e.path.find('/', slash + 1)) {
      dirs.insert(e.path.substr(0, slash));
    }
  }
  for (const std::string& d : dirs) {
    if (mkdir((partial + "/" + d).c_str(), 0755) != 0 && errno != EEXIST) {
      return FailedPrecondition("cannot create " + partial + "/" + d + ": " + Errno(errno));
    }
  }
  // The files, in parallel; the first failure in manifest order is the one reported.
  const int threads =
      std::clamp(options.threads, 1, std::max(1, static_cast<int>(m.entries.size())));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<Status> results(m.entries.size(), Status::Ok());
  auto work = [&] {
    for (size_t i = next++; i < m.entries.size(); i = next++) {
      if (failed || (options.cancel != nullptr && *options.cancel)) return;
      const ManifestEntry& e = m.entries[i];
      results[i] = fetcher.Copy(e, partial + "/" + e.path, options.progress);
      if (!results[i].ok()) failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const Status& s : results) {
    if (!s.ok()) {
      RemoveStaged(partial);
      return s;
    }
  }
  if (options.cancel != nullptr && *options.cancel) {
    RemoveStaged(partial);
    return Unavailable("staging to " + dir + " was cancelled");
  }
  // Read-only from here: deepest first, so that no directory is closed before its
  // children are done.
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) chmod((partial + "/" + *it).c_str(), 0555);
  chmod(partial.c_str(), 0555);
  if (rename(partial.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    RemoveStaged(partial);
    return FailedPrecondition("cannot rename " + partial + " to " + dir + ": " + Errno(err));
  }
  return Status::Ok();
}

}  // namespace trainyard::data
