#include "server/logs.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;

int64_t FileSize(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}

Status AppendFile(const std::string& path, std::string_view data) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Internal("cannot create the directory of " + path + ": " + ec.message());
  std::ofstream out(path, std::ios::binary | std::ios::app);
  if (!out) return Internal("cannot open " + path + ": " + std::strerror(errno));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.flush();
  if (!out) return ResourceExhausted("cannot write " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

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

Result<int64_t> LogStore::AppendMetrics(JobId job, int32_t attempt, int32_t rank, int64_t offset,
                                        int64_t end_offset, const std::vector<std::string>& lines) {
  std::lock_guard lk(mu_);
  auto key = std::make_tuple(job, attempt, rank);
  auto it = metrics_offsets_.find(key);
  // Lines before what was taken are a resend: drop them. A gap (or a server that
  // restarted and knows no offset) takes the agent's word: metrics are best effort.
  if (it != metrics_offsets_.end() && offset < it->second) return it->second;
  std::string data;
  for (const auto& l : lines) data += l + "\n";
  if (!data.empty()) {
    TY_RETURN_IF_ERROR(AppendFile(root_ + "/metrics/" + std::to_string(job) + "/" +
                                      std::to_string(attempt) + "/rank-" + std::to_string(rank) +
                                      ".jsonl",
                                  data));
  }
  metrics_offsets_[key] = end_offset;
  return end_offset;
}

void LogStore::WakeAll() {
  {
    std::lock_guard lk(mu_);
    shutdown_ = true;
  }
  grew_.notify_all();
}

}  // namespace trainyard::server
