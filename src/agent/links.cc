#include "agent/links.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kIbPortActive = 4;   // IB_PORT_ACTIVE
constexpr uint64_t kIbPhysLinkUp = 5;   // "5: LinkUp"
constexpr size_t kMaxSysfsRead = 4096;  // every file we read is a line

constexpr const char* kErrorCounters[] = {
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
};

// "mlx5_2" before "mlx5_10", port "2" before "10".
bool NaturalLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      std::string_view na = a.substr(i, ei - i), nb = b.substr(j, ej - j);
      while (na.size() > 1 && na.front() == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb.front() == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// The names of the directories in `dir` (symlinks to directories included, as sysfs
// links devices), in natural order; none when it cannot be read.
std::vector<std::string> Subdirectories(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (fs::is_directory(it->path(), type_ec)) out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end(), NaturalLess);
  return out;
}

std::optional<std::string> ReadSmallFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data(kMaxSysfsRead, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (in.bad()) return std::nullopt;
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

// The leading decimal number of `text` after blanks: 4 for "4: ACTIVE\n", 17 for "17\n".
std::optional<uint64_t> LeadingNumber(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

std::optional<uint64_t> ReadNumber(const fs::path& path) {
  std::optional<std::string> text = ReadSmallFile(path);
  if (!text) return std::nullopt;
  return LeadingNumber(*text);
}

int64_t SaturatingAdd(int64_t sum, uint64_t more) {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (more > kMax - static_cast<uint64_t>(sum)) return std::numeric_limits<int64_t>::max();
  return sum + static_cast<int64_t>(more);
}

LinkSample ReadPort(const fs::path& port_dir, std::string name) {
  LinkSample link;
  link.name = std::move(name);
  link.kind = "ib";
  const std::optional<uint64_t> state = ReadNumber(port_dir / "state");
  const std::optional<uint64_t> phys = ReadNumber(port_dir / "phys_state");
  link.up = state == kIbPortActive && (!phys || *phys == kIbPhysLinkUp);
  for (const char* counter : kErrorCounters) {
    link.errors =
        SaturatingAdd(link.errors, ReadNumber(port_dir / "counters" / counter).value_or(0));
  }
  return link;
}

}  // namespace

std::vector<LinkSample> ReadInfinibandLinks(const std::string& root) {
  std::vector<LinkSample> out;
  for (const std::string& device : Subdirectories(root)) {
    const fs::path ports = fs::path(root) / device / "ports";
    for (const std::string& port : Subdirectories(ports)) {
      if (out.size() >= kMaxInfinibandLinks) return out;
      out.push_back(ReadPort(ports / port, device + "/" + port));
    }
  }
  return out;
}

std::vector<LinkSample> KeepLinksSeenUp(std::vector<LinkSample> links,
                                        std::set<std::string>& seen_up) {
  std::vector<LinkSample> out;
  out.reserve(links.size());
  for (LinkSample& link : links) {
    if (link.up) seen_up.insert(link.name);
    if (seen_up.count(link.name) > 0) out.push_back(std::move(link));
  }
  return out;
}

}  // namespace trainyard::agent
