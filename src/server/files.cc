#include "server/files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace trainyard::server {

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

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Internal("cannot create the directory of " + path + ": " + ec.message());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return Internal("cannot write " + tmp + ": " + std::strerror(errno));
  }
  fs::rename(tmp, path, ec);
  if (ec) return Internal("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace trainyard::server
