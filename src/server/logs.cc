#include "server/logs.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "server/files.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;

// A non-negative number making up all of `text` (a directory name, "7" of
// "rank-7.log"), or -1.
int64_t NumberOf(std::string_view text) {
  int64_t v = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty() || v < 0) return -1;
  return v;
}

// The entries of `dir` (none when it cannot be read), without following links.
std::vector<fs::directory_entry> Entries(const fs::path& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) out.push_back(*it);
  return out;
}

// "rank-<r><suffix>" -> r, else -1.
int64_t RankOfName(const std::string& name, std::string_view suffix) {
  if (!name.starts_with("rank-") || !name.ends_with(suffix)) return -1;
  return NumberOf(std::string_view(name).substr(5, name.size() - 5 - suffix.size()));
}

// Up to `max_bytes` from the start of `path`, read in pieces handed to `each`; stops
// when `each` returns false. Returns the bytes read.
template <typename Each>
Result<int64_t> ReadFilePrefix(const std::string& path, int64_t max_bytes, Each each) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return 0;  // pruned or never written since it was listed
    return Internal("cannot open " + path + ": " + std::strerror(errno));
  }
  std::string buf(static_cast<size_t>(std::min<int64_t>(max_bytes, kMiB)), '\0');
  int64_t total = 0;
  while (total < max_bytes) {
    in.read(buf.data(), static_cast<std::streamsize>(std::min<int64_t>(
                            static_cast<int64_t>(buf.size()), max_bytes - total)));
    const auto n = in.gcount();
    if (n <= 0) break;
    total += n;
    if (!each(std::string_view(buf.data(), static_cast<size_t>(n)))) break;
  }
  return total;
}

constexpr int64_t kMaxErrorScanBytesPerAttempt = kMaxErrorScanBytes * 4;
constexpr size_t kMaxErrorScans = 10'000;  // attempts whose error lines are remembered

}  // namespace

std::string LogStore::JobDir(JobId job) const { return root_ + "/logs/" + std::to_string(job); }

bool LogStore::IsPruned(JobId job, int32_t attempt, int32_t rank) const {
  std::error_code ec;
  return fs::exists(JobDir(job) + ".pruned", ec) ||
         fs::exists(JobDir(job) + "/" + std::to_string(attempt) + "/rank-" + std::to_string(rank) +
                        ".pruned",
                    ec);
}

std::string LogStore::LogPath(JobId job, int32_t attempt, int32_t rank) const {
  return root_ + "/logs/" + std::to_string(job) + "/" + std::to_string(attempt) + "/rank-" +
         std::to_string(rank) + ".log";
}

Result<int64_t> LogStore::AppendLog(JobId job, int32_t attempt, int32_t rank, int64_t offset,
                                    std::string_view data) {
  const std::string path = LogPath(job, attempt, rank);
  std::lock_guard lk(mu_);
  const int64_t size = FileSize(path);
  if (offset != size || data.empty()) return size;
  TY_RETURN_IF_ERROR(AppendFile(path, data));
  grew_.notify_all();
  return size + static_cast<int64_t>(data.size());
}

Result<LogChunk> LogStore::ReadLog(JobId job, int32_t attempt, int32_t rank, int64_t offset,
                                   int64_t max_bytes, Duration wait) {
  const std::string path = LogPath(job, attempt, rank);
  std::unique_lock lk(mu_);
  if (wait.count() > 0 && FileSize(path) <= offset) {
    grew_.wait_for(lk, wait, [&] { return shutdown_ || FileSize(path) > offset; });
  }
  LogChunk chunk;
  chunk.size = FileSize(path);
  const int64_t from = std::min(offset, chunk.size);
  const int64_t n = std::min(max_bytes, chunk.size - from);
  chunk.next_offset = from;
  if (chunk.size == 0) chunk.pruned = IsPruned(job, attempt, rank);
  if (n <= 0) return chunk;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Internal("cannot open " + path + ": " + std::strerror(errno));
  in.seekg(from);
  chunk.data.resize(static_cast<size_t>(n));
  in.read(chunk.data.data(), n);
  chunk.data.resize(static_cast<size_t>(in.gcount()));
  chunk.next_offset = from + static_cast<int64_t>(chunk.data.size());
  return chunk;
}

Result<LogStore::MetricsAppend> LogStore::AppendMetrics(JobId job, int32_t attempt, int32_t rank,
                                                        int64_t offset, int64_t end_offset,
                                                        const std::vector<std::string>& lines) {
  std::lock_guard lk(mu_);
  auto key = std::make_tuple(job, attempt, rank);
  auto it = metrics_offsets_.find(key);
  // Lines before what was taken are a resend: drop them. A gap (or a server that
  // restarted and knows no offset) takes the agent's word: metrics are best effort.
  if (it != metrics_offsets_.end() && offset < it->second) {
    return MetricsAppend{it->second, false};
  }
  std::string data;
  for (const auto& l : lines) data += l + "\n";
  if (!data.empty()) {
    TY_RETURN_IF_ERROR(AppendFile(root_ + "/metrics/" + std::to_string(job) + "/" +
                                      std::to_string(attempt) + "/rank-" + std::to_string(rank) +
                                      ".jsonl",
                                  data));
  }
  metrics_offsets_[key] = end_offset;
  return MetricsAppend{end_offset, true};
}

std::vector<RankLog> LogStore::ListRankLogs(JobId job, std::optional<int32_t> attempt) const {
  std::vector<RankLog> out;
  std::vector<fs::path> dirs;
  if (attempt) {
    dirs.push_back(JobDir(job) + "/" + std::to_string(*attempt));
  } else {
    for (const auto& e : Entries(JobDir(job))) dirs.push_back(e.path());
  }
  for (const fs::path& dir : dirs) {
    const int64_t a = NumberOf(dir.filename().string());
    if (a < 0 || a > INT32_MAX) continue;
    for (const auto& e : Entries(dir)) {
      const std::string name = e.path().filename().string();
      const int64_t log = RankOfName(name, ".log"), pruned = RankOfName(name, ".pruned");
      const int64_t r = std::max(log, pruned);
      if (r < 0 || r > INT32_MAX) continue;
      std::error_code ec;
      const auto size = log >= 0 ? e.file_size(ec) : 0;
      out.push_back({static_cast<int32_t>(a), static_cast<int32_t>(r),
                     ec ? 0 : static_cast<int64_t>(size), pruned >= 0});
    }
  }
  std::sort(out.begin(), out.end(), [](const RankLog& x, const RankLog& y) {
    return std::tie(x.attempt, x.rank, x.pruned) < std::tie(y.attempt, y.rank, y.pruned);
  });
  // A log written again after it was pruned (a late resend) is listed once, as a log.
  out.erase(std::unique(out.begin(), out.end(),
                        [](const RankLog& x, const RankLog& y) {
                          return x.attempt == y.attempt && x.rank == y.rank;
                        }),
            out.end());
  return out;
}

Result<LogSearchResult> LogStore::Search(JobId job, const LogSearchRequest& request) const {
  LogSearchResult result;
  std::error_code ec;
  result.pruned = fs::exists(JobDir(job) + ".pruned", ec);
  int64_t budget = request.max_scan_bytes;
  for (const RankLog& log : ListRankLogs(job, request.attempt)) {
    if (request.rank && log.rank != *request.rank) continue;
    if (log.pruned) {
      result.pruned = true;
      continue;
    }
    if (budget <= 0) {
      result.truncated = true;
      break;
    }
    const int64_t left = request.max_matches - static_cast<int64_t>(result.matches.size());
    LineSearch search(request.pattern, request.ignore_case, left);
    TY_ASSIGN_OR_RETURN(int64_t read, ReadFilePrefix(LogPath(job, log.attempt, log.rank), budget,
                                                     [&](std::string_view piece) {
                                                       search.Feed(piece);
                                                       return !search.more();
                                                     }));
    // Read to its end (as listed), or cut off by the budget: then its last line is
    // not known to end there and is left out.
    if (read < budget || read >= log.size) {
      search.Finish();
    } else {
      result.truncated = true;
    }
    budget -= read;
    for (LineMatch& m : search.TakeMatches()) {
      result.matches.push_back({log.attempt, log.rank, std::move(m)});
    }
    if (search.more()) {
      result.truncated = true;
      break;
    }
  }
  return result;
}

std::optional<RankErrorLines> LogStore::ErrorLines(JobId job, int32_t attempt) {
  const std::vector<RankLog> logs = ListRankLogs(job, attempt);
  ErrorScan scan;
  for (const RankLog& l : logs) {
    scan.files += l.pruned ? 0 : 1;
    scan.bytes += l.size;
  }
  const auto key = std::make_pair(job, attempt);
  {
    std::lock_guard lk(scans_mu_);
    auto it = error_scans_.find(key);
    if (it != error_scans_.end() && it->second.files == scan.files &&
        it->second.bytes == scan.bytes) {
      return it->second.found;
    }
  }
  int64_t budget = kMaxErrorScanBytesPerAttempt;
  for (const RankLog& l : logs) {
    if (l.pruned || l.size == 0) continue;
    if (budget <= 0) break;
    std::string text;
    auto read = ReadFilePrefix(LogPath(job, attempt, l.rank), std::min(budget, kMaxErrorScanBytes),
                               [&](std::string_view piece) {
                                 text.append(piece);
                                 return true;
                               });
    if (!read.ok()) continue;  // error lines are a hint; an unreadable log has none
    budget -= *read;
    std::vector<std::string> lines = FirstErrorLines(text);
    if (!lines.empty()) {
      scan.found = RankErrorLines{l.rank, std::move(lines)};
      break;
    }
  }
  std::lock_guard lk(scans_mu_);
  if (error_scans_.size() >= kMaxErrorScans) error_scans_.clear();
  error_scans_[key] = scan;
  return scan.found;
}

std::vector<StoredLogFile> LogStore::ListFiles() const {
  std::vector<StoredLogFile> out;
  for (const bool is_log : {true, false}) {
    const std::string_view suffix = is_log ? ".log" : ".jsonl";
    for (const auto& job_dir : Entries(root_ + (is_log ? "/logs" : "/metrics"))) {
      const int64_t job = NumberOf(job_dir.path().filename().string());
      if (job < 0) continue;  // <job>.pruned markers, strays
      for (const auto& attempt_dir : Entries(job_dir.path())) {
        const int64_t attempt = NumberOf(attempt_dir.path().filename().string());
        if (attempt < 0 || attempt > INT32_MAX) continue;
        for (const auto& e : Entries(attempt_dir.path())) {
          const int64_t rank = RankOfName(e.path().filename().string(), suffix);
          if (rank < 0 || rank > INT32_MAX) continue;
          std::error_code ec, time_ec;
          const auto size = e.file_size(ec);
          const auto written = e.last_write_time(time_ec);
          out.push_back({e.path().string(), job, static_cast<int32_t>(attempt),
                         static_cast<int32_t>(rank), is_log, ec ? 0 : static_cast<int64_t>(size),
                         time_ec ? Timestamp{}
                                 : std::chrono::time_point_cast<Duration>(
                                       std::chrono::file_clock::to_sys(written))});
        }
      }
    }
  }
  return out;
}

Status LogStore::Prune(const LogPrunePlan& plan) {
  Status first;
  auto note = [&first](const std::string& what, const std::error_code& ec) {
    if (ec && first.ok()) first = Internal("cannot delete " + what + ": " + ec.message());
  };
  std::lock_guard lk(mu_);
  for (JobId job : plan.expired_jobs) {
    std::error_code ec;
    // The marker first: a reader between the two steps sees "pruned", never "empty".
    if (Status s = AppendFile(JobDir(job) + ".pruned", ""); !s.ok() && first.ok()) first = s;
    fs::remove_all(JobDir(job), ec);
    note(JobDir(job), ec);
    const std::string metrics = root_ + "/metrics/" + std::to_string(job);
    fs::remove_all(metrics, ec);
    note(metrics, ec);
    metrics_offsets_.erase(metrics_offsets_.lower_bound({job, INT32_MIN, INT32_MIN}),
                           metrics_offsets_.lower_bound({job + 1, INT32_MIN, INT32_MIN}));
  }
  for (const StoredLogFile& f : plan.files) {
    if (f.is_log && f.path.ends_with(".log")) {
      const std::string marker = f.path.substr(0, f.path.size() - 4) + ".pruned";
      if (Status s = AppendFile(marker, ""); !s.ok() && first.ok()) first = s;
    }
    std::error_code ec;
    fs::remove(f.path, ec);
    note(f.path, ec);
  }
  return first;
}

void LogStore::WakeAll() {
  {
    std::lock_guard lk(mu_);
    shutdown_ = true;
  }
  grew_.notify_all();
}

}  // namespace trainyard::server
