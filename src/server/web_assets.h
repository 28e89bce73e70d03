// WebAssets: the dashboard's files as the server sends them — the page at `/`
// (web/src/index.html), the rest of web/src under `/assets/` and uPlot's two files
// under `/assets/vendor/` (docs/api.md, "Dashboard").
//
// Two sources, one layout: the copy built into the binary (cmake/WebAssets.cmake embeds
// web/src and web/node_modules/uplot/dist at build time), or a directory on disk that
// is read again on every request (`trainyard server --web-dir DIR`, for working on the
// front end without rebuilding the server).
//
// Also here: what the HTTP layer makes entity tags of (ContentHash) and how it compares
// them (IfNoneMatchHas), for these files and for the API's conditional GETs.
//
// Thread-safety: immutable after construction; Page and Asset may be called from any
// thread at once.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace trainyard::server {

struct WebFile {
  std::string body;
  std::string content_type;  // ContentTypeFor the file's name
  std::string etag;          // a strong tag, quoted: "\"" + ContentHash(body) + "\""
  std::string gzip;          // body gzipped once (embedded, compressible files); or empty
};

class WebAssets {
 public:
  // The copy built into the binary (EmbeddedWebFiles); the tags and the gzipped copies
  // (level 9, about 20 ms in all) are made here, once.
  static WebAssets Embedded();
  // The files under `dir`, read on every call: DIR/index.html, DIR/<path>, and uPlot
  // from DIR/../node_modules/uplot/dist (where `npm ci` in web/ puts it).
  static WebAssets FromDirectory(std::string dir);

  // index.html. NotFound, saying why and what to do, when there is none.
  Result<WebFile> Page() const;
  // The file served at /assets/<path>: a path under web/src ("app.js", "lib/chart.js"),
  // or "vendor/uPlot.esm.js" / "vendor/uPlot.min.css". NotFound when there is no such
  // file, and for a path that is empty, absolute, holds a "." or ".." segment, or
  // leads out of the directory (through a symbolic link, say).
  Result<WebFile> Asset(std::string_view path) const;

 private:
  struct Entry {
    std::string_view bytes;
    std::string etag;
    std::string gzip;  // made once, at Embedded(), for compressible types
  };
  WebAssets() = default;
  Result<WebFile> Find(std::string_view path) const;
  Result<WebFile> Read(std::string_view path) const;

  std::string dir_;  // empty: the embedded copy
  std::map<std::string, Entry, std::less<>> embedded_;
};

// The Content-Type for a file name, by its extension: "text/javascript; charset=utf-8"
// for .js, "text/css; charset=utf-8", "text/html; charset=utf-8", "image/svg+xml",
// "application/json", "image/png", "image/x-icon", ...; "application/octet-stream" for
// an extension it does not know.
std::string_view ContentTypeFor(std::string_view name);

// FNV-1a (64 bits) of `bytes` as 16 lowercase hex digits: the opaque part of an ETag.
std::string ContentHash(std::string_view bytes);

// Whether an If-None-Match header value ("*" or a comma-separated list of entity tags)
// holds `etag`, compared weakly (a W/ prefix on either side is ignored), as RFC 9110
// says for If-None-Match.
bool IfNoneMatchHas(std::string_view if_none_match, std::string_view etag);

// The table that cmake/WebAssets.cmake generates at build time (web_assets_data.cc):
// web/src's files by their path under it ("index.html", "app.js"), and uPlot's as
// "vendor/uPlot.esm.js" and "vendor/uPlot.min.css" — stand-ins that say how to get the
// real ones when the build found no web/node_modules/uplot. Sorted by path.
struct EmbeddedWebFile {
  std::string_view path;
  std::string_view bytes;
};
std::span<const EmbeddedWebFile> EmbeddedWebFiles();

}  // namespace trainyard::server
