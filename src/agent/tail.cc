#include "agent/tail.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace trainyard::agent {
namespace {

// Reads up to `max` bytes at `offset`; a missing file reads as empty.
Result<std::string> PRead(const std::string& path, int64_t offset, int64_t max) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return Internal(path + ": " + std::strerror(errno));
  }
  // Sized by what the file holds past `offset`, not by `max`: called for every task's
  // logs on every shipping round, mostly with nothing new, a buffer of `max` zeroed
  // each time (1 MiB) was most of the agent's CPU per task.
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return Internal(path + ": " + std::strerror(e));
  }
  const int64_t available = std::max<int64_t>(0, static_cast<int64_t>(st.st_size) - offset);
  std::string out(static_cast<size_t>(std::min(max, available)), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = pread(fd, out.data() + got, out.size() - got, offset + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return Internal(path + ": " + std::strerror(e));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(got);
  return out;
}

bool IsBlank(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\t' && c != '\r') return false;
  }
  return true;
}

}  // namespace

Result<std::string> ReadLogChunk(const std::string& path, int64_t offset, int64_t max_bytes) {
  return PRead(path, offset, max_bytes);
}

Result<MetricsBatch> ReadMetricsLines(const std::string& path, int64_t offset, int64_t max_bytes) {
  MetricsBatch batch;
  batch.offset = batch.end_offset = offset;
  TY_ASSIGN_OR_RETURN(std::string buf, PRead(path, offset, max_bytes));
  size_t last_nl = buf.rfind('\n');
  if (last_nl == std::string::npos) {
    if (static_cast<int64_t>(buf.size()) < max_bytes) return batch;  // a partial line waits
    // One line longer than a whole request: find its end and skip it.
    int64_t pos = offset + static_cast<int64_t>(buf.size());
    for (;;) {
      TY_ASSIGN_OR_RETURN(std::string more, PRead(path, pos, max_bytes));
      if (more.empty()) return batch;  // its newline has not arrived yet
      if (size_t nl = more.find('\n'); nl != std::string::npos) {
        batch.end_offset = pos + static_cast<int64_t>(nl) + 1;
        batch.invalid = 1;
        return batch;
      }
      pos += static_cast<int64_t>(more.size());
    }
  }
  return ParseMetricsLines(std::string_view(buf.data(), last_nl + 1), offset);
}

MetricsBatch ParseMetricsLines(std::string_view text, int64_t offset) {
  MetricsBatch batch;
  batch.offset = offset;
  const size_t last_nl = text.rfind('\n');
  const std::string_view complete =
      last_nl == std::string_view::npos ? std::string_view() : text.substr(0, last_nl + 1);
  size_t start = 0;
  while (start < complete.size()) {
    size_t nl = complete.find('\n', start);
    std::string_view line = complete.substr(start, nl - start);
    start = nl + 1;
    if (IsBlank(line)) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      ++batch.invalid;
    } else {
      batch.lines.push_back(std::move(j));
    }
  }
  batch.end_offset = offset + static_cast<int64_t>(complete.size());
  return batch;
}

}  // namespace trainyard::agent
