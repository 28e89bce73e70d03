#include "server/web_assets.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "http/compress.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPage = "index.html";
// Where /assets/vendor/<name> comes from in a --web-dir checkout: web/node_modules.
constexpr std::string_view kVendorPrefix = "vendor/";
constexpr std::string_view kVendorFiles[] = {"uPlot.esm.js", "uPlot.min.css"};
constexpr std::string_view kVendorDir = "../node_modules/uplot/dist";

std::string Quoted(std::string_view hash) {
  std::string out;  // not "\"" + std::string(hash): GCC 12 warns falsely (-Wrestrict) at -O3
  out.reserve(hash.size() + 2);
  out.push_back('"');
  out.append(hash);
  out.push_back('"');
  return out;
}

// A relative path of plain segments: not empty, not absolute, no "", "." or "..".
bool IsPlainRelativePath(std::string_view path) {
  if (path.empty() || path.front() == '/') return false;
  size_t pos = 0;
  while (true) {
    const size_t slash = path.find('/', pos);
    const std::string_view segment = path.substr(pos, slash - pos);
    if (segment.empty() || segment == "." || segment == ".." ||
        segment.find('\\') != std::string_view::npos ||
        segment.find('\0') != std::string_view::npos) {
      return false;
    }
    if (slash == std::string_view::npos) return true;
    pos = slash + 1;
  }
}

// Whether `path` is `dir` or lies under it; both canonical.
bool IsWithin(const fs::path& path, const fs::path& dir) {
  auto [d, p] = std::mismatch(dir.begin(), dir.end(), path.begin(), path.end());
  return d == dir.end();
}

Status NoSuchFile(std::string_view path) {
  return NotFound("no such file in the dashboard: /assets/" + std::string(path));
}

}  // namespace

WebAssets WebAssets::Embedded() {
  WebAssets w;
  for (const EmbeddedWebFile& f : EmbeddedWebFiles()) {
    std::string gzip =
        http::IsCompressible(ContentTypeFor(f.path)) ? http::Gzip(f.bytes, 9) : std::string();
    w.embedded_.emplace(std::string(f.path),
                        Entry{f.bytes, Quoted(ContentHash(f.bytes)), std::move(gzip)});
  }
  return w;
}

WebAssets WebAssets::FromDirectory(std::string dir) {
  WebAssets w;
  w.dir_ = dir.empty() ? std::string(".") : std::move(dir);
  return w;
}

Result<WebFile> WebAssets::Page() const {
  auto page = Find(kPage);
  if (page.ok() || page.status().code() != StatusCode::kNotFound) return page;
  if (!dir_.empty()) {
    return NotFound("no dashboard page: " + (fs::path(dir_) / kPage).string() +
                    " does not exist (--web-dir)");
  }
  return NotFound(
      "no dashboard in this server: web/src/index.html was missing when it was built; "
      "build it from a checkout that has web/src, or serve one with --web-dir DIR");
}

Result<WebFile> WebAssets::Asset(std::string_view path) const {
  if (!IsPlainRelativePath(path)) return NoSuchFile(path);
  return Find(path);
}

Result<WebFile> WebAssets::Find(std::string_view path) const {
  if (!dir_.empty()) return Read(path);
  auto it = embedded_.find(path);
  if (it == embedded_.end()) return NoSuchFile(path);
  return WebFile{std::string(it->second.bytes), std::string(ContentTypeFor(path)), it->second.etag,
                 it->second.gzip};
}

Result<WebFile> WebAssets::Read(std::string_view path) const {
  std::error_code ec;
  const fs::path root = fs::canonical(dir_, ec);
  if (ec) return NotFound("--web-dir " + dir_ + ": " + ec.message());
  fs::path file = root / path;
  bool vendor = false;
  if (path.starts_with(kVendorPrefix)) {
    for (std::string_view name : kVendorFiles) {
      if (path.substr(kVendorPrefix.size()) == name) {
        file = root / kVendorDir / name;
        vendor = true;
      }
    }
  }
  const fs::path real = fs::canonical(file, ec);
  if (ec) {
    if (vendor) {
      return NotFound("/assets/" + std::string(path) + ": " + file.lexically_normal().string() +
                      " does not exist; run `make web` (npm ci in web/)");
    }
    return NoSuchFile(path);
  }
  // A fixed vendor file may lie outside the directory; nothing else may.
  if ((!vendor && !IsWithin(real, root)) || !fs::is_regular_file(real, ec)) {
    return NoSuchFile(path);
  }
  std::ifstream in(real, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) return Internal("cannot read " + real.string());
  WebFile f;
  f.body = std::move(bytes).str();
  f.content_type = std::string(ContentTypeFor(path));
  f.etag = Quoted(ContentHash(f.body));
  return f;
}

std::string_view ContentTypeFor(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".txt", "text/plain; charset=utf-8"},
      {".woff2", "font/woff2"},
  };
  const size_t dot = name.rfind('.');
  const size_t slash = name.rfind('/');
  if (dot != std::string_view::npos && (slash == std::string_view::npos || dot > slash)) {
    const std::string_view ext = name.substr(dot);
    for (const auto& [e, type] : kTypes) {
      if (e == ext) return type;
    }
  }
  return "application/octet-stream";
}

std::string ContentHash(std::string_view bytes) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[static_cast<size_t>(i)] = kHex[h & 0xf];
  return out;
}

bool IfNoneMatchHas(std::string_view if_none_match, std::string_view etag) {
  auto opaque = [](std::string_view tag) {
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    return tag;
  };
  const std::string_view want = opaque(etag);
  size_t pos = 0;
  while (pos <= if_none_match.size()) {
    const size_t comma = if_none_match.find(',', pos);
    std::string_view tag = if_none_match.substr(pos, comma - pos);
    const size_t first = tag.find_first_not_of(" \t");
    if (first != std::string_view::npos) {
      tag = tag.substr(first, tag.find_last_not_of(" \t") - first + 1);
      if (tag == "*" || opaque(tag) == want) return true;
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return false;
}

}  // namespace trainyard::server
