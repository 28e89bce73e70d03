#include "data/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "core/sha256.h"

namespace trainyard::data {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kHeader = "trainyard-manifest 1";
constexpr size_t kReadChunk = 1 << 20;

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

std::string Errno(int err) { return std::strerror(err); }

// Hashes root/e.path into e.sha256; refuses a file that is not the one listed (size or
// mtime) when opened or when read to its end.
Status HashFile(const std::string& root, ManifestEntry& e, int64_t& bytes) {
  const std::string path = root + "/" + e.path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return FailedPrecondition(e.path + ": cannot open: " + Errno(errno));
  struct stat st {};
  auto changed = [&] {
    return fstat(fd, &st) != 0 || st.st_size != e.size || MtimeNs(st) != e.mtime_ns;
  };
  Status s = Status::Ok();
  if (changed()) {
    s = FailedPrecondition(e.path + ": changed while the manifest was being built");
  } else {
    Sha256 h;
    std::vector<char> buf(kReadChunk);
    int64_t total = 0;
    for (;;) {
      const ssize_t n = read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        s = FailedPrecondition(e.path + ": cannot read: " + Errno(errno));
        break;
      }
      if (n == 0) break;
      h.Update(buf.data(), static_cast<size_t>(n));
      total += n;
    }
    if (s.ok() && (total != e.size || changed())) {
      s = FailedPrecondition(e.path + ": changed while it was being read");
    }
    if (s.ok()) {
      e.sha256 = h.Hex();
      bytes += total;
    }
  }
  close(fd);
  return s;
}

bool IsHex64(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

template <typename T>
bool ParseInt(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// A relative path as a manifest may hold it: no leading '/', no empty, "." or ".."
// component.
bool CleanRelative(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.back() == '/') return false;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string_view part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

std::string Manifest::Version() const {
  Sha256 h;
  for (const ManifestEntry& e : entries) {
    const std::string line = e.sha256 + " " + std::to_string(e.size) + " " + e.path + "\n";
    h.Update(line.data(), line.size());
  }
  return "sha256:" + h.Hex();
}

Result<Manifest> BuildManifest(const std::string& root, const ManifestOptions& options,
                               ManifestStats* stats) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return InvalidArgument(root + ": not a directory");
  }
  // The listing, in one thread: every regular file with its size and mtime.
  Manifest m;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return FailedPrecondition(root + ": cannot list: " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return FailedPrecondition(root + ": cannot list: " + ec.message());
    const fs::path& p = it->path();
    std::string rel = p.lexically_relative(root).generic_string();
    if (rel.find('\n') != std::string::npos) {
      return InvalidArgument(root + ": a path holds a newline, which a manifest cannot list: " +
                             p.parent_path().string());
    }
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0) {
      return FailedPrecondition(rel + ": cannot stat: " + Errno(errno));
    }
    if (S_ISDIR(st.st_mode)) continue;
    if (S_ISLNK(st.st_mode)) {
      return InvalidArgument(rel +
                             ": a symbolic link; a dataset holds regular files and directories "
                             "only (copy what it points to, or register that directory)");
    }
    if (!S_ISREG(st.st_mode)) {
      return InvalidArgument(rel + ": not a regular file (a device, socket or FIFO)");
    }
    m.entries.push_back({std::move(rel), static_cast<int64_t>(st.st_size), MtimeNs(st), ""});
  }
  std::sort(m.entries.begin(), m.entries.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.path < b.path; });

  // What the previous manifest already knows.
  std::vector<size_t> to_read;
  ManifestStats st;
  std::map<std::string_view, const ManifestEntry*> before;
  if (options.previous != nullptr) {
    for (const ManifestEntry& e : options.previous->entries) before.emplace(e.path, &e);
  }
  for (size_t i = 0; i < m.entries.size(); ++i) {
    ManifestEntry& e = m.entries[i];
    m.total_bytes += e.size;
    auto prev = before.find(e.path);
    if (prev != before.end() && prev->second->size == e.size &&
        prev->second->mtime_ns == e.mtime_ns && IsHex64(prev->second->sha256)) {
      e.sha256 = prev->second->sha256;
      ++st.files_reused;
    } else {
      to_read.push_back(i);
    }
  }

  // The reading, in parallel; the first failure in path order is the one reported.
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::clamp(threads, 1, std::max<int>(1, static_cast<int>(to_read.size())));
  std::atomic<size_t> next{0};
  std::vector<Status> failed(to_read.size(), Status::Ok());
  std::vector<int64_t> bytes(static_cast<size_t>(threads), 0);
  auto work = [&](int t) {
    for (size_t k = next++; k < to_read.size(); k = next++) {
      failed[k] = HashFile(root, m.entries[to_read[k]], bytes[static_cast<size_t>(t)]);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
  for (const Status& s : failed) {
    if (!s.ok()) return s;
  }
  st.files_read = static_cast<int64_t>(to_read.size());
  for (int64_t b : bytes) st.bytes_read += b;
  if (stats != nullptr) *stats = st;
  return m;
}

std::string ManifestToText(const Manifest& m) {
  std::string out(kHeader);
  out += "\n";
  for (const ManifestEntry& e : m.entries) {
    out += e.sha256 + " " + std::to_string(e.size) + " " + std::to_string(e.mtime_ns) + " " +
           e.path + "\n";
  }
  return out;
}

Result<Manifest> ParseManifest(std::string_view text) {
  Manifest m;
  size_t line_no = 0;
  size_t pos = 0;
  auto bad = [&](const std::string& what) {
    return InvalidArgument("manifest line " + std::to_string(line_no) + ": " + what);
  };
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      ++line_no;
      return bad("does not end with a newline");
    }
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (++line_no == 1) {
      if (line != kHeader) {
        return bad("expected \"" + std::string(kHeader) + "\", got \"" + std::string(line) + "\"");
      }
      continue;
    }
    std::string_view fields[3];
    std::string_view rest = line;
    for (std::string_view& f : fields) {
      const size_t sp = rest.find(' ');
      if (sp == std::string_view::npos)
        return bad("expected \"<sha256> <size> <mtime_ns> <path>\"");
      f = rest.substr(0, sp);
      rest.remove_prefix(sp + 1);
    }
    ManifestEntry e;
    if (!IsHex64(fields[0])) return bad("sha256: expected 64 lowercase hex digits");
    e.sha256 = std::string(fields[0]);
    if (!ParseInt(fields[1], e.size) || e.size < 0) {
      return bad("size: expected a byte count, got \"" + std::string(fields[1]) + "\"");
    }
    if (!ParseInt(fields[2], e.mtime_ns)) {
      return bad("mtime_ns: expected an integer, got \"" + std::string(fields[2]) + "\"");
    }
    if (!CleanRelative(rest)) {
      return bad("path \"" + std::string(rest) +
                 "\": expected a relative path without empty, \".\" or \"..\" parts");
    }
    e.path = std::string(rest);
    if (!m.entries.empty() && !(m.entries.back().path < e.path)) {
      return bad("path \"" + e.path + "\": paths must be unique and in ascending order");
    }
    m.total_bytes += e.size;
    m.entries.push_back(std::move(e));
  }
  if (line_no == 0)
    return InvalidArgument("manifest: empty (no \"" + std::string(kHeader) + "\" line)");
  return m;
}

}  // namespace trainyard::data
