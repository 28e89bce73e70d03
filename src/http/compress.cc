#include "http/compress.h"

#include <httplib.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <stdexcept>

#include "core/names.h"

namespace trainyard::http {
namespace {

// The q-value of one Accept-Encoding element's parameters ("q=0.5"); 1 without one.
double QValue(std::string_view params) {
  while (!params.empty()) {
    size_t semi = params.find(';');
    std::string_view p = TrimBlanks(params.substr(0, semi));
    params = semi == std::string_view::npos ? std::string_view() : params.substr(semi + 1);
    if (p.size() >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
      std::string_view v = TrimBlanks(p.substr(2));
      // 0, 0., 0.0, 0.00, 0.000 are zero; anything else a client sends is not.
      return v.find_first_not_of("0.") == std::string_view::npos && !v.empty() ? 0.0 : 1.0;
    }
  }
  return 1.0;
}

}  // namespace

bool AcceptsGzip(std::string_view accept_encoding) {
  bool gzip = false, star = false, gzip_named = false;
  while (!accept_encoding.empty()) {
    size_t comma = accept_encoding.find(',');
    std::string_view element = accept_encoding.substr(0, comma);
    accept_encoding =
        comma == std::string_view::npos ? std::string_view() : accept_encoding.substr(comma + 1);
    size_t semi = element.find(';');
    std::string_view coding = TrimBlanks(element.substr(0, semi));
    const double q = semi == std::string_view::npos ? 1.0 : QValue(element.substr(semi + 1));
    if (EqualsIgnoreCase(coding, "gzip") || EqualsIgnoreCase(coding, "x-gzip")) {
      gzip_named = true;
      gzip = gzip || q > 0;
    } else if (coding == "*") {
      star = q > 0;
    }
  }
  return gzip_named ? gzip : star;
}

bool IsCompressible(std::string_view content_type) {
  std::string_view t = TrimBlanks(content_type.substr(0, content_type.find(';')));
  return t.starts_with("text/") || t == "application/json" || t == "application/javascript" ||
         t == "image/svg+xml" || t == "application/xml";
}

std::string Gzip(std::string_view bytes, int level) {
  z_stream z{};
  // 15 window bits, +16: a gzip header and trailer rather than zlib's.
  if (deflateInit2(&z, std::clamp(level, 1, 9), Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::runtime_error("gzip: deflateInit2 failed");
  }
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("gzip: deflate did not finish");
  return out;
}

void SendCompressed(const httplib::Request& req, httplib::Response& res, std::string bytes,
                    std::string_view content_type, std::string gzipped, int level) {
  res.set_header("Vary", "Accept-Encoding");
  if (bytes.size() >= kMinCompressBytes && IsCompressible(content_type) &&
      AcceptsGzip(req.get_header_value("Accept-Encoding"))) {
    if (gzipped.empty()) gzipped = Gzip(bytes, level);
    if (gzipped.size() < bytes.size()) {
      bytes = std::move(gzipped);
      res.set_header("Content-Encoding", "gzip");
    }
  }
  res.body.clear();
  res.headers.erase("Content-Type");  // set_content_provider sets it
  const size_t size = bytes.size();
  auto data = std::make_shared<const std::string>(std::move(bytes));
  res.set_content_provider(size, std::string(content_type),
                           [data](size_t offset, size_t length, httplib::DataSink& sink) {
                             return sink.write(data->data() + offset,
                                               std::min(length, data->size() - offset));
                           });
}

}  // namespace trainyard::http
