// A small blocking HTTP/1.1 client: what the client commands (`trainyard submit`,
// `jobs`, `logs`, ...) talk to the server with.
//
// Why not cpp-httplib, which the server and the agent use: a command-line call should
// start in a few milliseconds, and Debian's cpp-httplib drags in OpenSSL, brotli and
// zlib at load time (OpenSSL's initialisation alone costs more than the whole
// request). This client links nothing but libc; an https:// URL loads OpenSSL
// (libssl.so.3) at run time, the first time one is used, and verifies the server the
// way http/tls.h's VerifyServer does for the agent.
//
// It sends requests one at a time over one connection, kept alive between requests;
// it never sends a request twice (a kept connection the server has closed is noticed
// before sending and replaced).
//
// Thread-safety: a Client is used by one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace trainyard::http {

struct ClientOptions {
  // https: trust the certificates in this PEM file as anchors (a CA's, an
  // intermediate's or the server's own, as curl does); empty: the system's store.
  // Verification is never turned off.
  std::string ca_file;
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every request
  int connect_timeout_ms = 5000;
  int read_timeout_ms = 60000;  // for each read and write
};

struct Response {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // in the order received
  std::string body;                                          // chunked encoding removed

  // The value of header `name` (any case); "" when absent.
  std::string Header(std::string_view name) const;
};

enum class ErrorKind {
  kUrl,              // the URL cannot be used
  kConnection,       // no connection was made: nothing was sent
  kTls,              // TLS could not be set up or the handshake failed
  kTlsVerification,  // the server's certificate was refused
  kTimeout,          // no answer in time
  kProtocol,         // the answer is not HTTP as this client reads it
  kIo,               // the connection failed during the exchange
};

struct Error {
  ErrorKind kind;
  std::string message;  // in words, for "cannot reach the server at URL: MESSAGE"
};

class Client {
 public:
  // `url`: "http://HOST[:PORT]" or "https://HOST[:PORT]" (an IPv6 address in brackets),
  // with nothing after the port but an optional "/". A bad URL is reported by the
  // first request (ErrorKind::kUrl).
  Client(const std::string& url, ClientOptions options);
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  // One exchange. `body` and `content_type` are sent when `content_type` is not empty
  // (or the method is POST, PUT or PATCH).
  std::variant<Response, Error> Send(const std::string& method, const std::string& path,
                                     const std::string& body = "",
                                     const std::string& content_type = "");

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `value` percent-encoded for a path segment or a query parameter: everything but
// letters, digits and "-._~" becomes %XX.
std::string EncodeComponent(std::string_view value);

}  // namespace trainyard::http
