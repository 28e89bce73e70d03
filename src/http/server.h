// The control plane's HTTP/1.1 server: connections wait for their next request in one
// epoll set, and a request is handled on a worker thread from the moment its first
// bytes arrive until its answer is written.
//
// Why not cpp-httplib's server: it gives every open connection a thread for as long as
// the connection stays open, and that thread waits for the next request in a loop of
// 10 ms polls and 1 ms sleeps. A thousand agents (a heartbeat a second each, a long
// poll each) or 64 keep-alive clients kept hundreds of threads polling, which took more
// CPU than the requests themselves. Here an idle connection costs a file descriptor
// and a few hundred bytes; only requests being handled hold threads.
//
// Handlers may block (a submission waits for its group commit): the worker pool starts
// a thread whenever a request would otherwise wait for one, up to `max_threads`, and
// keeps it for later requests until it has been idle for `worker_idle_exit`. A request that waits
// for an event rather than for work (a long poll) is better served by a route answered later
// (PostLater): its handler returns at once with a Later, the connection holds no thread while it
// waits, and whoever has the answer calls Later::Answer from any thread.
//
// Requests and responses are cpp-httplib's structs (httplib::Request, httplib::Response),
// so handlers read the same as with its server: method, path (percent-decoded), params
// (the query, decoded), headers, body, matches (of the route's pattern), remote_addr.
// Supported: keep-alive and pipelining, Content-Length and chunked request bodies,
// `Expect: 100-continue`, HEAD (served by the GET route, without the body), responses
// with a body or a content provider (sized, or chunked), TLS through an OpenSSL
// context. Not supported: multipart form parsing, byte ranges, HTTP/2, upgrades.
//
// Thread-safety: routes and options are set before Serve; Serve runs on one thread,
// Stop may be called from any thread (and before Serve starts: Serve then returns at
// once); handlers run concurrently on the worker threads.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "core/status.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace trainyard::http {

// Limits on a request's head, far above what any real client sends (browsers, curl,
// Python's http.client and our own clients send a request line of a few hundred bytes
// and a dozen header fields). A request beyond one is refused (below) and its
// connection closed. The defaults of ServerOptions.
//
// The request line (method, target, version), excluding its CRLF: beyond it, 414 URI
// Too Long (the target is what makes a request line long).
inline constexpr size_t kMaxRequestLineBytes = 8 << 10;
// One header field line (name, colon, value), excluding its CRLF: beyond it, 431.
inline constexpr size_t kMaxHeaderLineBytes = 8 << 10;
// The whole head (request line and header fields, excluding the empty line that ends
// it): beyond it, 431.
inline constexpr size_t kMaxHeaderBytes = 64 << 10;
// Header field lines: beyond it, 431.
inline constexpr size_t kMaxHeaderFields = 100;

// What the server refuses before any handler runs, with the status RFC 9110 and 9112
// give and a one-line text/plain body saying why (the error handler sees both and may
// replace the body); the connection is closed after the answer, since the rest of its
// bytes cannot be trusted to start a request:
//   - a head beyond the limits above: 414 for the request line, 431 for header fields;
//   - a malformed request line or header field (a name that is not a token, a space
//     before the colon, CR, LF or NUL inside a line, a folded line): 400;
//   - framing (RFC 9112 section 6): Transfer-Encoding in an HTTP/1.0 request; the field
//     given twice; with Content-Length as well (request smuggling); chunked not the
//     last coding, or given twice (the body's length cannot be known): 400. Codings
//     before a final chunked (gzip, or one HTTP does not define): 501, none being
//     implemented. Content-Length given twice (even with equal values), as a list, or
//     not a decimal number of at most 64 bits (a sign, a space inside, hex): 400; a
//     number above max_body_bytes: 413;
//   - a malformed chunked body, or one that ends with the connection: 400.
struct ServerOptions {
  // Request bodies larger than this are refused with 413 (before being read).
  size_t max_body_bytes = 8 << 20;
  // Limits on the head (above).
  size_t max_request_line_bytes = kMaxRequestLineBytes;
  size_t max_header_line_bytes = kMaxHeaderLineBytes;
  size_t max_header_bytes = kMaxHeaderBytes;
  size_t max_header_fields = kMaxHeaderFields;
  // A request being read, or an answer being written, that makes no progress for this
  // long is given up and its connection closed.
  std::chrono::milliseconds read_timeout{60'000};
  std::chrono::milliseconds write_timeout{60'000};
  // A connection with no request for this long is closed.
  std::chrono::milliseconds idle_timeout{120'000};
  // After answering, the worker waits this long for the connection's next request
  // (blocked in poll, not spinning) before handing the connection back to the epoll
  // set: a busy keep-alive client's next request then costs no trip through the loop
  // thread and no wake-up of another worker.
  std::chrono::microseconds next_request_wait{2'000};
  // Worker threads: started on demand; one idle for `worker_idle_exit` ends unless only
  // `min_threads` are left.
  size_t max_threads = 4096;
  size_t min_threads = 8;
  std::chrono::milliseconds worker_idle_exit{60'000};
};

// The answer to a request of a route answered later (Server::PostLater). Copyable;
// every copy is the same answer. Answer may be called from any thread and returns at
// once: `fill` then writes the response (status, body, headers) on a worker thread.
// Only the first call counts. A request not answered by the time the server stops is
// answered 503 then, and any Answer after that does nothing.
class Later {
 public:
  struct Pending;
  explicit Later(std::shared_ptr<Pending> p) : p_(std::move(p)) {}
  void Answer(std::function<void(httplib::Response&)> fill) const;
  // Whether an answer was given (by Answer, or by the server when it stopped).
  bool answered() const;

 private:
  std::shared_ptr<Pending> p_;
};

class Server {
 public:
  using Request = httplib::Request;
  using Response = httplib::Response;
  using Handler = std::function<void(const Request&, Response&)>;
  // Must return at once; answers through `later`, now or from another thread.
  using LaterHandler = std::function<void(const Request&, Later later)>;
  using ExceptionHandler = std::function<void(const Request&, Response&, std::exception_ptr)>;
  // Told of every answer written: the route's pattern as registered ("" when no route
  // matched), and how long the request took from its first bytes' arrival (including
  // any wait for a worker) until its answer was written.
  using Observer = std::function<void(const Request&, const Response&, const std::string& route,
                                      std::chrono::nanoseconds took)>;

  explicit Server(ServerOptions options = {});
  // HTTPS: the server takes `ctx` (a server context with its certificate and key).
  Server(ServerOptions options, SSL_CTX* ctx);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Routes: `pattern` is an ECMAScript regular expression the whole path must match;
  // the first route registered that matches is used. HEAD requests use the GET routes.
  Server& Get(const std::string& pattern, Handler handler);
  Server& Post(const std::string& pattern, Handler handler);
  Server& Put(const std::string& pattern, Handler handler);
  Server& Patch(const std::string& pattern, Handler handler);
  Server& Delete(const std::string& pattern, Handler handler);
  Server& Route(const std::string& method, const std::string& pattern, Handler handler);
  // A POST route whose requests are answered later (Later). A handler that throws
  // before answering gets the exception handler's answer.
  Server& PostLater(const std::string& pattern, LaterHandler handler);

  // Called for an answer with status >= 400 (a handler's, or the server's own 400, 404,
  // 413, 414, 431, 501): it may fill in the body. The server's own refusals other than
  // 404 come with a one-line text/plain body saying why, which it may keep, reword or
  // wrap.
  void SetErrorHandler(Handler handler);
  // Called when a handler throws; without one the answer is a bare 500.
  void SetExceptionHandler(ExceptionHandler handler);
  void SetMaxBodyBytes(size_t bytes);
  // Called on the worker thread after each answer; must be quick and thread-safe.
  void SetObserver(Observer observer);

  // Binds and listens (backlog SOMAXCONN, SO_REUSEADDR). BindToAnyPort returns the port
  // the kernel picked, or -1; BindToPort false when the port cannot be had.
  int BindToAnyPort(const std::string& host);
  bool BindToPort(const std::string& host, int port);
  // Serves until Stop; returns false when not bound. In-flight requests are finished
  // (their answers written) before Serve returns.
  bool Serve();
  void Stop();
  bool running() const { return running_.load(); }
  // Connections open now, idle or busy (for tests and metrics).
  size_t connections() const;
  // Worker threads alive now.
  size_t threads() const;
  // Requests of routes answered later still waiting for their answer.
  size_t waiting() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> running_{false};
};

// Raises this process's soft limit on open files to its hard limit: each connection is a
// descriptor, and the usual soft limit (1024) is below a thousand agents' connections.
void RaiseOpenFileLimit();

}  // namespace trainyard::http
