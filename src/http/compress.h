// Response compression the server controls: gzip at a level it picks (static files
// once, at start; API bodies at level 1), sent as the body's bytes (SendCompressed).
// The HTTP server (http/server.h) never compresses by itself. (cpp-httplib's server,
// used before it, compressed bodies it held with brotli at its slowest quality: about
// 250 ms for uPlot's 145 KB on the build machine, paid on every request.)
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>
#include <string_view>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace trainyard::http {

// Whether an Accept-Encoding header value accepts gzip: a "gzip" (or "x-gzip") or "*"
// coding whose q-value is not 0, as RFC 9110 section 12.5.3 reads.
bool AcceptsGzip(std::string_view accept_encoding);

// Whether a Content-Type is text worth compressing: text/*, JSON, JavaScript, SVG, XML.
bool IsCompressible(std::string_view content_type);

// `bytes` in the gzip format (RFC 1952) at zlib level `level` (1 fastest .. 9 smallest).
std::string Gzip(std::string_view bytes, int level);

// Sets the response to `bytes` of `content_type`, gzipped (`gzipped`, when not empty,
// is that already made; else it is made at `level`) when the request accepts gzip, the
// type is compressible and the body is at least kMinCompressBytes; otherwise as is.
// The bytes go through a content provider of known length. Adds Vary: Accept-Encoding.
inline constexpr size_t kMinCompressBytes = 1024;
void SendCompressed(const httplib::Request& req, httplib::Response& res, std::string bytes,
                    std::string_view content_type, std::string gzipped = {}, int level = 1);

}  // namespace trainyard::http
