#include "http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/names.h"

namespace trainyard::http {
namespace {

using SteadyClock = std::chrono::steady_clock;

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 507:
      return "Insufficient Storage";
    default:
      return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

// Whether a comma-separated header value lists `token` (any case).
bool ListsToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (EqualsIgnoreCase(TrimBlanks(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `s` (a malformed escape stays as it is); '+' is a space in a query.
std::string Decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexDigit(s[i + 1]), lo = HexDigit(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && s[i] == '+' ? ' ' : s[i]);
  }
  return out;
}

void ParseQuery(std::string_view q, httplib::Params& out) {
  while (!q.empty()) {
    const size_t amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      out.emplace(Decode(pair.substr(0, eq), true),
                  eq == std::string_view::npos ? "" : Decode(pair.substr(eq + 1), true));
    }
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
}

// One client connection. Owned by the server's table; at any moment either armed in
// the epoll set (idle, waiting for bytes) or with one worker, never both.
struct Conn {
  int fd = -1;
  SSL* ssl = nullptr;
  bool handshaken = false;
  std::string in;  // bytes read and not yet used
  size_t pos = 0;  // of `in`: where the next request starts
  std::string remote_addr;
  int remote_port = -1;
  SteadyClock::time_point ready_at;    // when the loop saw bytes to read
  bool idle = false;                   // GUARDED_BY(Impl::mu): armed in the epoll set
  SteadyClock::time_point idle_since;  // GUARDED_BY(Impl::mu)

  ~Conn() {
    if (ssl != nullptr) SSL_free(ssl);
    if (fd >= 0) ::close(fd);
  }
};

// Why reading a request stopped: the connection ended or stalled, or the request is
// refused (Refusal).
enum class ReadError { kNone, kClosed, kTimeout, kRefused };

// A request refused while it is read: the status and a one-line reason, the body of
// the answer.
struct Refusal {
  int status = 0;
  std::string why;
};

ReadError Refuse(Refusal& out, int status, std::string why) {
  out = {status, std::move(why)};
  return ReadError::kRefused;
}

// RFC 9110 section 5.6.2: the characters of a token (methods, field names, codings).
bool IsTokenChar(char ch) {
  if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) {
    return true;
  }
  return std::string_view("!#$%&'*+-.^_`|~").find(ch) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar);
}

// A control character other than horizontal tab (CR, LF and NUL among them), which a
// field value or request line may not hold (RFC 9110 section 5.5).
bool IsControl(char ch) {
  const auto u = static_cast<unsigned char>(ch);
  return (u < 0x20 && u != '\t') || u == 0x7f;
}

// How a request's body is delimited (RFC 9112 section 6.3).
struct Framing {
  bool chunked = false;
  uint64_t length = 0;  // when not chunked
};

// The framing the head gives, or a refusal (ServerOptions in server.h lists the rules).
std::optional<Framing> BodyFraming(const httplib::Request& req, size_t max_body, Refusal& no) {
  const size_t te_fields = req.headers.count("Transfer-Encoding");
  const size_t cl_fields = req.headers.count("Content-Length");
  if (te_fields > 0) {
    if (req.version == "HTTP/1.0") {
      Refuse(no, 400, "Transfer-Encoding is not allowed in an HTTP/1.0 request");
      return std::nullopt;
    }
    if (te_fields > 1) {
      Refuse(no, 400,
             "Transfer-Encoding is given " + std::to_string(te_fields) + " times; give it once");
      return std::nullopt;
    }
    if (cl_fields > 0) {
      Refuse(no, 400,
             "Transfer-Encoding and Content-Length are both given; a request may have one");
      return std::nullopt;
    }
    const std::string value = req.get_header_value("Transfer-Encoding");
    std::vector<std::string_view> codings;
    for (std::string_view rest = value; !rest.empty();) {
      const size_t comma = rest.find(',');
      const std::string_view coding = TrimBlanks(rest.substr(0, comma));
      if (!coding.empty()) codings.push_back(coding);  // empty list elements are ignored
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    const size_t chunked =
        static_cast<size_t>(std::count_if(codings.begin(), codings.end(), [](std::string_view c) {
          return EqualsIgnoreCase(c, "chunked");
        }));
    if (codings.empty() || !EqualsIgnoreCase(codings.back(), "chunked") || chunked > 1) {
      Refuse(no, 400,
             "Transfer-Encoding " + QuoteForMessage(value) +
                 ": the body's length cannot be known; the codings must end with chunked, "
                 "given once (only chunked is supported)");
      return std::nullopt;
    }
    if (codings.size() > 1) {
      Refuse(no, 501,
             "Transfer-Encoding " + QuoteForMessage(value) + ": coding " +
                 QuoteForMessage(codings.front()) + " is not implemented; only chunked is");
      return std::nullopt;
    }
    return Framing{.chunked = true};
  }
  if (cl_fields == 0) return Framing{};
  if (cl_fields > 1) {
    Refuse(no, 400,
           "Content-Length is given " + std::to_string(cl_fields) + " times; give it once");
    return std::nullopt;
  }
  const std::string text = req.get_header_value("Content-Length");
  uint64_t length = 0;
  bool digits = !text.empty();
  for (char ch : text) {
    if (ch < '0' || ch > '9') {
      digits = false;
      break;
    }
    const uint64_t d = static_cast<uint64_t>(ch - '0');
    if (length > (std::numeric_limits<uint64_t>::max() - d) / 10) {
      Refuse(no, 400, "Content-Length " + QuoteForMessage(text) + " does not fit in 64 bits");
      return std::nullopt;
    }
    length = length * 10 + d;
  }
  if (!digits) {
    Refuse(no, 400,
           "Content-Length " + QuoteForMessage(text) +
               " is not a number of bytes (decimal digits only, one value)");
    return std::nullopt;
  }
  if (length > max_body) {
    Refuse(no, 413, "request body too large; the limit is " + std::to_string(max_body) + " bytes");
    return std::nullopt;
  }
  return Framing{.length = length};
}

struct RouteEntry {
  std::string method;
  std::string text;  // the pattern as registered
  std::regex pattern;
  Server::Handler handler;  // one of these two
  Server::LaterHandler later;
};

// Where an answered Later goes back to be written (Server::Impl).
class LaterOwner {
 public:
  virtual void Resume(std::shared_ptr<Later::Pending> p) = 0;

 protected:
  ~LaterOwner() = default;
};

}  // namespace

// A request of a route answered later, from its handler's call until its answer is
// written. The connection is neither armed nor with a worker meanwhile.
struct Later::Pending {
  LaterOwner* owner = nullptr;
  Conn* conn = nullptr;
  httplib::Request req;
  bool keep_alive = true;
  SteadyClock::time_point began;
  const std::string* route = nullptr;
  std::mutex mu;
  std::function<void(httplib::Response&)> fill;  // GUARDED_BY(mu)
  bool answered = false;                         // GUARDED_BY(mu)
  // While the handler runs, an answer is taken by its worker after it returns.
  bool in_handler = true;  // GUARDED_BY(mu)
};

void Later::Answer(std::function<void(httplib::Response&)> fill) const {
  std::unique_lock lk(p_->mu);
  if (p_->answered) return;
  p_->answered = true;
  p_->fill = std::move(fill);
  if (p_->in_handler) return;
  lk.unlock();
  p_->owner->Resume(p_);
}

bool Later::answered() const {
  std::lock_guard lk(p_->mu);
  return p_->answered;
}

struct Server::Impl final : LaterOwner {
  explicit Impl(ServerOptions o, SSL_CTX* c) : opt(o), ctx(c) {}
  ~Impl() {
    if (listen_fd >= 0) ::close(listen_fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
    if (event_fd >= 0) ::close(event_fd);
    if (ctx != nullptr) SSL_CTX_free(ctx);
  }

  ServerOptions opt;
  SSL_CTX* ctx;
  std::vector<RouteEntry> routes;
  Handler error_handler;
  ExceptionHandler exception_handler;
  Observer observer;

  int listen_fd = -1;
  int epoll_fd = -1;
  int event_fd = -1;
  std::atomic<bool> stopping{false};

  mutable std::mutex mu;
  std::unordered_map<Conn*, std::unique_ptr<Conn>> conns;  // GUARDED_BY(mu)

  // The worker pool: connections with bytes to read, and the threads that serve them.
  mutable std::mutex pool_mu;
  std::deque<Conn*> ready;  // GUARDED_BY(pool_mu)
  // Workers are detached; ShutdownPool waits for the count to reach 0.
  size_t live_workers = 0;  // GUARDED_BY(pool_mu)
  // Idle workers, the most recently idle last: work goes to the last, so that under a
  // steady load the same few threads serve and the others stay idle long enough to end.
  struct IdleWorker {
    std::condition_variable cv;
    bool woken = false;
  };
  std::vector<IdleWorker*> idle;  // GUARDED_BY(pool_mu)
  std::condition_variable workers_gone;
  bool pool_closed = false;  // GUARDED_BY(pool_mu)
  std::atomic<size_t> worker_count{0};
  // Requests answered later: those waiting for Later::Answer, and those answered and
  // waiting for a worker to write the answer.
  std::unordered_set<std::shared_ptr<Later::Pending>> waiting;  // GUARDED_BY(pool_mu)
  std::deque<std::shared_ptr<Later::Pending>> answered;         // GUARDED_BY(pool_mu)
  bool later_closed = false;  // GUARDED_BY(pool_mu): Stop answered the waiting ones

  // --- the loop ---------------------------------------------------------------------
  void Accept();
  void Arm(Conn* c, int op);
  void SweepIdle();
  void CloseAllIdle();

  // --- the workers ------------------------------------------------------------------
  void Dispatch(Conn* c);
  // For a connection or an answer just queued: wakes the most recently idle worker, or
  // starts one. REQUIRES: pool_mu held.
  void WakeOrStartWorker();
  void Work();
  void ShutdownPool();
  // Serves requests on `c` while it has bytes for them; then parks it in the epoll set
  // again, or closes it.
  void Serve(Conn* c);
  void Close(Conn* c);
  void Park(Conn* c);
  // After an answer: serves the connection's next request if it comes soon, else parks
  // the connection (or closes it).
  void Continue(Conn* c, bool written, bool keep_alive);
  void Resume(std::shared_ptr<Later::Pending> p) override;
  // Writes the answer of `p` (on a worker).
  void Finish(const std::shared_ptr<Later::Pending>& p);
  // Answers 503 every request still waiting for its Later, and any that comes after.
  void CloseLater();

  // --- I/O with deadlines (the sockets are non-blocking) ---------------------------
  bool WaitFor(Conn& c, short events, std::chrono::milliseconds timeout);
  // Whether the connection's next request arrives within opt.next_request_wait.
  bool WaitForNext(Conn& c);
  // Reads more bytes into c.in; false at end of stream, on error or timeout (`why`:
  // kClosed or kTimeout).
  bool Fill(Conn& c, ReadError& why);
  bool WriteAll(Conn& c, std::string_view data);
  bool Handshake(Conn& c);
  bool HasBuffered(const Conn& c) const {
    return c.pos < c.in.size() || (c.ssl != nullptr && SSL_pending(c.ssl) > 0);
  }

  // --- HTTP --------------------------------------------------------------------------
  // Reads the next request; kRefused fills `no`.
  ReadError ReadRequest(Conn& c, Request& req, bool& keep_alive, Refusal& no);
  // Reads up to the empty line that ends the head, refusing a head beyond the limits;
  // kNone sets `end` to the offset of that empty line's CRLF in c.in.
  ReadError ReadHead(Conn& c, size_t& end, Refusal& no);
  // Parses the head c.in[c.pos, end) into `req`.
  ReadError ParseHead(Conn& c, size_t end, Request& req, Refusal& no);
  ReadError ReadChunkedBody(Conn& c, std::string& body, Refusal& no);
  // The next line, without its CRLF. kRefused when it would be longer than `limit`
  // (`no` is left for the caller to fill).
  ReadError ReadLine(Conn& c, size_t limit, std::string& line);
  // Runs the route `req` matches; returns its pattern ("" when none matched). For a
  // route answered later, `req` is moved into `*later` and `res` holds the answer only
  // when the handler gave it before returning (else *later is left set).
  const std::string& Route(Conn& c, Request& req, Response& res, bool keep_alive,
                           SteadyClock::time_point began, std::shared_ptr<Later::Pending>* later);
  // Runs `fn`, which fills `res`; a throw becomes a 500 (with the exception handler's
  // body).
  void Guarded(const Request& req, Response& res, const std::function<void()>& fn);
  // The status of an answer no one set, and the error handler's body.
  void Complete(const Request& req, Response& res, bool found);
  // Writes the answer; false when the connection must close (write failed, or a body
  // without a length).
  bool WriteResponse(Conn& c, const Request& req, Response& res, bool keep_alive);
  // Answers a refused request (its reason as a text/plain body, through the error
  // handler) and closes the connection.
  void AnswerRefusal(Conn* c, const Refusal& no);
  // Before closing a connection whose client may still be sending (a body refused
  // unread): stops writing, then reads and drops what comes for a while, so that the
  // client reads the answer instead of a reset (closing with unread bytes sends RST).
  void Linger(Conn& c);
};

// --- the loop -----------------------------------------------------------------------

void Server::Impl::Arm(Conn* c, int op) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.ptr = c;
  ::epoll_ctl(epoll_fd, op, c->fd, &ev);
}

void Server::Impl::Accept() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the connection waits in the backlog until one is closed.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return;  // EAGAIN: none left
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    char host[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      c->remote_port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      c->remote_port = ntohs(a->sin6_port);
    }
    c->remote_addr = host;
    if (ctx != nullptr) {
      c->ssl = SSL_new(ctx);
      if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
        ERR_clear_error();
        continue;  // ~Conn closes it
      }
    }
    Conn* raw = c.get();
    std::lock_guard lk(mu);
    raw->idle = true;
    raw->idle_since = SteadyClock::now();
    conns.emplace(raw, std::move(c));
    Arm(raw, EPOLL_CTL_ADD);
  }
}

void Server::Impl::SweepIdle() {
  const auto now = SteadyClock::now();
  std::lock_guard lk(mu);
  for (auto it = conns.begin(); it != conns.end();) {
    Conn* c = it->first;
    if (c->idle && now - c->idle_since > opt.idle_timeout) {
      ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
      it = conns.erase(it);
    } else {
      ++it;
    }
  }
}

void Server::Impl::CloseAllIdle() {
  std::lock_guard lk(mu);
  for (auto it = conns.begin(); it != conns.end();) {
    if (it->first->idle) {
      ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, it->first->fd, nullptr);
      it = conns.erase(it);
    } else {
      ++it;
    }
  }
}

// --- the workers --------------------------------------------------------------------

void Server::Impl::Dispatch(Conn* c) {
  std::lock_guard lk(pool_mu);
  ready.push_back(c);
  // A thread for every connection that would otherwise wait for one: a handler may
  // block (a submission waiting for its group commit), and a request must not wait
  // behind it.
  WakeOrStartWorker();
}

void Server::Impl::WakeOrStartWorker() {
  if (!idle.empty()) {
    IdleWorker* w = idle.back();
    idle.pop_back();
    w->woken = true;
    w->cv.notify_one();
    return;
  }
  if (pool_closed || live_workers >= std::max<size_t>(opt.max_threads, 1)) return;
  ++live_workers;
  worker_count = live_workers;
  std::thread([this] { Work(); }).detach();
}

void Server::Impl::Work() {
  // OpenSSL writes with write(2), which cannot be told MSG_NOSIGNAL: a client gone
  // mid-answer must not kill the process. Blocked here, on the pool's own threads, the
  // signal stays pending on the thread and is never delivered.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  std::unique_lock lk(pool_mu);
  for (;;) {
    if (ready.empty() && answered.empty() && !pool_closed) {
      IdleWorker me;
      idle.push_back(&me);
      me.cv.wait_for(lk, opt.worker_idle_exit, [&] { return me.woken || pool_closed; });
      if (!me.woken) {
        idle.erase(std::find(idle.begin(), idle.end(), &me));
        // Idle this long: a burst (a thousand agents registering at once) is over.
        if (!pool_closed && live_workers > opt.min_threads) break;
      }
      continue;  // woken: take the work, unless a busy worker took it first
    }
    if (!answered.empty()) {
      std::shared_ptr<Later::Pending> p = std::move(answered.front());
      answered.pop_front();
      lk.unlock();
      Finish(p);
      lk.lock();
      continue;
    }
    if (ready.empty()) break;  // closed
    Conn* c = ready.front();
    ready.pop_front();
    lk.unlock();
    Serve(c);
    lk.lock();
  }
  --live_workers;
  worker_count = live_workers;
  // Under pool_mu: ShutdownPool (and so ~Impl) cannot go on before this thread lets go
  // of the lock, after which it touches nothing of the server's.
  workers_gone.notify_all();
}

void Server::Impl::Resume(std::shared_ptr<Later::Pending> p) {
  std::lock_guard lk(pool_mu);
  waiting.erase(p);
  answered.push_back(std::move(p));
  WakeOrStartWorker();
}

void Server::Impl::Finish(const std::shared_ptr<Later::Pending>& p) {
  std::function<void(Response&)> fill;
  {
    std::lock_guard lk(p->mu);
    fill = std::move(p->fill);
  }
  Response res;
  Guarded(p->req, res, [&] { fill(res); });
  Complete(p->req, res, true);
  Conn* c = p->conn;
  const bool keep_alive = p->keep_alive && !stopping;
  const bool written = WriteResponse(*c, p->req, res, keep_alive);
  if (observer) observer(p->req, res, *p->route, SteadyClock::now() - p->began);
  Continue(c, written, keep_alive);
}

void Server::Impl::CloseLater() {
  std::unordered_set<std::shared_ptr<Later::Pending>> left;
  {
    std::lock_guard lk(pool_mu);
    later_closed = true;
    left.swap(waiting);
  }
  for (const auto& p : left) {
    Later(p).Answer([](Response& res) {
      res.status = 503;
      res.set_header("Connection", "close");
    });
  }
}

void Server::Impl::ShutdownPool() {
  std::unique_lock lk(pool_mu);
  pool_closed = true;  // no thread starts from now on
  for (IdleWorker* w : idle) {
    w->woken = true;
    w->cv.notify_one();
  }
  idle.clear();
  workers_gone.wait(lk, [&] { return live_workers == 0; });
}

void Server::Impl::Close(Conn* c) {
  std::lock_guard lk(mu);
  conns.erase(c);  // ~Conn closes the descriptor, which leaves the epoll set
}

void Server::Impl::Park(Conn* c) {
  std::lock_guard lk(mu);
  if (stopping) {
    conns.erase(c);
    return;
  }
  c->in.erase(0, c->pos);
  c->pos = 0;
  if (c->in.capacity() > (64 << 10)) c->in.shrink_to_fit();
  c->idle = true;
  c->idle_since = SteadyClock::now();
  Arm(c, EPOLL_CTL_MOD);
}

void Server::Impl::Serve(Conn* c) {
  if (c->ssl != nullptr && !c->handshaken) {
    if (!Handshake(*c)) return Close(c);
    c->handshaken = true;
    if (!HasBuffered(*c)) return Park(c);  // the request comes later
  }
  for (bool first = true;; first = false) {
    // A pipelined request counts from when the one before it was answered.
    const SteadyClock::time_point began = first ? c->ready_at : SteadyClock::now();
    // Requests already used are dropped from the buffer: a client that keeps sending
    // never lets the connection park (where it would be compacted too).
    if (c->pos > 0) {
      c->in.erase(0, c->pos);
      c->pos = 0;
    }
    Request req;
    bool keep_alive = true;
    Refusal no;
    switch (ReadRequest(*c, req, keep_alive, no)) {
      case ReadError::kNone:
        break;
      case ReadError::kClosed:
      case ReadError::kTimeout:
        return Close(c);
      case ReadError::kRefused:
        return AnswerRefusal(c, no);
    }
    Response res;
    std::shared_ptr<Later::Pending> later;
    const std::string& route = Route(*c, req, res, keep_alive, began, &later);
    if (later != nullptr) return;  // its answer comes later, on some worker (Finish)
    if (stopping) keep_alive = false;
    const bool written = WriteResponse(*c, req, res, keep_alive);
    if (observer) observer(req, res, route, SteadyClock::now() - began);
    if (!written || !keep_alive) return Close(c);
    if (!HasBuffered(*c) && !WaitForNext(*c)) return Park(c);
    // The next request is here (pipelined, or sent on the heels of the answer).
  }
}

void Server::Impl::Continue(Conn* c, bool written, bool keep_alive) {
  if (!written || !keep_alive) return Close(c);
  if (!HasBuffered(*c) && !WaitForNext(*c)) return Park(c);
  c->ready_at = SteadyClock::now();
  Serve(c);
}

// --- I/O ----------------------------------------------------------------------------

bool Server::Impl::WaitFor(Conn& c, short events, std::chrono::milliseconds timeout) {
  pollfd p{c.fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool Server::Impl::WaitForNext(Conn& c) {
  if (opt.next_request_wait.count() <= 0 || stopping) return false;
  pollfd p{c.fd, POLLIN, 0};
  const int64_t ns = std::chrono::nanoseconds(opt.next_request_wait).count();
  const timespec wait{static_cast<time_t>(ns / 1'000'000'000),
                      static_cast<long>(ns % 1'000'000'000)};
  return ::ppoll(&p, 1, &wait, nullptr) > 0;
}

bool Server::Impl::Fill(Conn& c, ReadError& why) {
  if (c.pos > 0 && c.pos == c.in.size()) {
    c.in.clear();
    c.pos = 0;
  }
  char buf[16 << 10];
  for (;;) {
    ssize_t n;
    if (c.ssl != nullptr) {
      ERR_clear_error();
      const int r = SSL_read(c.ssl, buf, sizeof buf);
      if (r > 0) {
        c.in.append(buf, static_cast<size_t>(r));
        return true;
      }
      const int e = SSL_get_error(c.ssl, r);
      if (e == SSL_ERROR_SYSCALL && errno == EINTR) continue;
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (!WaitFor(c, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, opt.read_timeout)) {
          why = ReadError::kTimeout;
          return false;
        }
        continue;
      }
      ERR_clear_error();
      why = ReadError::kClosed;
      return false;
    }
    n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) {
      why = ReadError::kClosed;
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      why = ReadError::kClosed;
      return false;
    }
    if (!WaitFor(c, POLLIN, opt.read_timeout)) {
      why = ReadError::kTimeout;
      return false;
    }
  }
}

bool Server::Impl::WriteAll(Conn& c, std::string_view data) {
  while (!data.empty()) {
    if (c.ssl != nullptr) {
      ERR_clear_error();
      const int r = SSL_write(c.ssl, data.data(), static_cast<int>(data.size()));
      if (r > 0) {
        data.remove_prefix(static_cast<size_t>(r));
        continue;
      }
      const int e = SSL_get_error(c.ssl, r);
      if (e == SSL_ERROR_SYSCALL && errno == EINTR) continue;
      if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
          WaitFor(c, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, opt.write_timeout)) {
        continue;
      }
      ERR_clear_error();
      return false;
    }
    const ssize_t n = ::send(c.fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        WaitFor(c, POLLOUT, opt.write_timeout)) {
      continue;
    }
    return false;
  }
  return true;
}

bool Server::Impl::Handshake(Conn& c) {
  for (;;) {
    ERR_clear_error();
    const int r = SSL_accept(c.ssl);
    if (r == 1) return true;
    const int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_SYSCALL && errno == EINTR) continue;  // a signal; try again
    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) &&
        WaitFor(c, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, opt.read_timeout)) {
      continue;
    }
    ERR_clear_error();
    return false;
  }
}

// --- HTTP ---------------------------------------------------------------------------

ReadError Server::Impl::ReadLine(Conn& c, size_t limit, std::string& line) {
  for (;;) {
    const size_t eol = c.in.find("\r\n", c.pos);
    if (eol != std::string::npos && eol - c.pos <= limit) {
      line.assign(c.in, c.pos, eol - c.pos);
      c.pos = eol + 2;
      return ReadError::kNone;
    }
    if (eol != std::string::npos || c.in.size() - c.pos > limit + 1) return ReadError::kRefused;
    ReadError why = ReadError::kNone;
    if (!Fill(c, why)) return why;
  }
}

ReadError Server::Impl::ReadChunkedBody(Conn& c, std::string& body, Refusal& no) {
  // Not a real client's: a chunk size with its extensions runs to a few dozen bytes.
  constexpr size_t kMaxChunkLine = 1024;
  std::string line;
  for (;;) {
    ReadError err = ReadLine(c, kMaxChunkLine, line);
    if (err == ReadError::kRefused) {
      return Refuse(no, 400,
                    "chunked body: a chunk size line longer than " + std::to_string(kMaxChunkLine) +
                        " bytes");
    }
    if (err == ReadError::kClosed) {
      return Refuse(no, 400, "chunked body: the connection ended before the last chunk");
    }
    if (err != ReadError::kNone) return err;
    const std::string_view size_text = TrimBlanks(std::string_view(line).substr(0, line.find(';')));
    if (size_text.empty() || !std::all_of(size_text.begin(), size_text.end(),
                                          [](char ch) { return HexDigit(ch) >= 0; })) {
      return Refuse(no, 400,
                    "chunked body: chunk size " + QuoteForMessage(size_text) +
                        " is not a hexadecimal number");
    }
    size_t size = 0;
    for (char ch : size_text) {
      size = size * 16 + static_cast<size_t>(HexDigit(ch));
      if (body.size() + size > opt.max_body_bytes) {
        return Refuse(no, 413,
                      "request body too large; the limit is " + std::to_string(opt.max_body_bytes) +
                          " bytes");
      }
    }
    if (size == 0) {
      // Trailer fields, up to the empty line; read within the head's limits, then ignored.
      size_t trailer_bytes = 0;
      for (;;) {
        err = ReadLine(c, opt.max_header_line_bytes, line);
        if (err == ReadError::kRefused ||
            (err == ReadError::kNone && (trailer_bytes += line.size()) > opt.max_header_bytes)) {
          return Refuse(no, 431, "chunked body: trailer fields beyond the header limits");
        }
        if (err == ReadError::kClosed) {
          return Refuse(no, 400, "chunked body: the connection ended inside the trailer");
        }
        if (err != ReadError::kNone) return err;
        if (line.empty()) return ReadError::kNone;
      }
    }
    while (c.in.size() - c.pos < size + 2) {
      ReadError why = ReadError::kNone;
      if (!Fill(c, why)) {
        if (why != ReadError::kClosed) return why;
        return Refuse(no, 400, "chunked body: the connection ended inside a chunk");
      }
    }
    if (c.in.compare(c.pos + size, 2, "\r\n") != 0) {
      return Refuse(no, 400, "chunked body: a chunk is longer than its size says");
    }
    body.append(c.in, c.pos, size);
    c.pos += size + 2;
  }
}

ReadError Server::Impl::ReadHead(Conn& c, size_t& end, Refusal& no) {
  // Line by line as bytes arrive, so that a head beyond a limit is refused as soon as
  // it passes it, never waited for to the end.
  size_t line_start = c.pos;   // of the line being read
  size_t search_from = c.pos;  // no CRLF before this, from line_start on
  size_t fields = 0;
  bool request_line = true;
  for (;;) {
    // Empty lines before a request are ignored (RFC 9112 section 2.2).
    if (request_line) {
      while (c.in.compare(c.pos, 2, "\r\n") == 0) c.pos += 2;
      line_start = std::max(line_start, c.pos);
      search_from = std::max(search_from, c.pos);
    }
    const size_t eol = c.in.find("\r\n", search_from);
    const size_t line_bytes = (eol == std::string::npos ? c.in.size() : eol) - line_start;
    if (request_line && line_bytes > opt.max_request_line_bytes) {
      return Refuse(no, 414,
                    "request line longer than " + std::to_string(opt.max_request_line_bytes) +
                        " bytes (the request target is too long)");
    }
    if (!request_line && line_bytes > opt.max_header_line_bytes) {
      return Refuse(no, 431,
                    "a header field line longer than " + std::to_string(opt.max_header_line_bytes) +
                        " bytes");
    }
    if ((eol == std::string::npos ? c.in.size() : eol) - c.pos > opt.max_header_bytes) {
      return Refuse(no, 431,
                    "request head (request line and header fields) longer than " +
                        std::to_string(opt.max_header_bytes) + " bytes");
    }
    if (eol == std::string::npos) {
      // A CR at the end may be followed by its LF in the next read.
      search_from = std::max(line_start, c.in.empty() ? 0 : c.in.size() - 1);
      const bool started = c.in.size() > c.pos;
      // Fill may move what is unread to the start of c.in.
      const size_t line_offset = line_start - c.pos, search_offset = search_from - c.pos;
      ReadError why = ReadError::kNone;
      if (Fill(c, why)) {
        line_start = c.pos + line_offset;
        search_from = c.pos + search_offset;
        continue;
      }
      // A connection closed between requests is the normal end of keep-alive.
      if (!started || why != ReadError::kClosed) return why;
      return Refuse(no, 400, "the connection ended inside the request head");
    }
    if (!request_line && eol == line_start) {
      end = eol;
      return ReadError::kNone;
    }
    if (!request_line && ++fields > opt.max_header_fields) {
      return Refuse(no, 431,
                    "more than " + std::to_string(opt.max_header_fields) + " header fields");
    }
    request_line = false;
    line_start = search_from = eol + 2;
  }
}

ReadError Server::Impl::ParseHead(Conn& c, size_t end, Request& req, Refusal& no) {
  const std::string_view head(c.in.data() + c.pos, end - c.pos);
  const size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  if (std::any_of(line.begin(), line.end(), IsControl)) {
    return Refuse(no, 400, "the request line holds a control character (CR, LF, NUL...)");
  }
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0) {
    return Refuse(no, 400,
                  "the request line must be METHOD TARGET HTTP/1.1, got " + QuoteForMessage(line));
  }
  req.method = std::string(line.substr(0, sp1));
  req.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  req.version = std::string(line.substr(sp2 + 1));
  if (req.version != "HTTP/1.1" && req.version != "HTTP/1.0") {
    return Refuse(no, 400,
                  "HTTP version " + QuoteForMessage(req.version) +
                      " is not supported; HTTP/1.1 or HTTP/1.0 is");
  }
  if ((req.target.empty() || req.target.front() != '/') && req.target != "*") {
    return Refuse(no, 400, "request target " + QuoteForMessage(req.target) + " must start with /");
  }
  if (!std::all_of(req.method.begin(), req.method.end(),
                   [](char ch) { return ch >= 'A' && ch <= 'Z'; })) {
    return Refuse(
        no, 400,
        "method " + QuoteForMessage(req.method) + " must be capital letters (GET, POST...)");
  }
  for (std::string_view rest = line_end == std::string_view::npos ? std::string_view()
                                                                  : head.substr(line_end + 2);
       !rest.empty();) {
    const size_t eol = rest.find("\r\n");
    const std::string_view h = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 2);
    if (!h.empty() && (h.front() == ' ' || h.front() == '\t')) {
      return Refuse(no, 400,
                    "a header field line starts with a space (line folding is not accepted)");
    }
    const size_t colon = h.find(':');
    const std::string_view name = h.substr(0, colon);
    if (colon == std::string_view::npos || !IsToken(name)) {
      return Refuse(no, 400,
                    "header field " + QuoteForMessage(h) +
                        " must be NAME: VALUE, with no space before the colon");
    }
    const std::string_view value = TrimBlanks(h.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(), IsControl)) {
      return Refuse(no, 400,
                    "header field " + QuoteForMessage(name) +
                        ": its value holds a control character (CR, LF, NUL...)");
    }
    req.headers.emplace(std::string(name), std::string(value));
  }
  return ReadError::kNone;
}

ReadError Server::Impl::ReadRequest(Conn& c, Request& req, bool& keep_alive, Refusal& no) {
  size_t end = 0;
  if (const ReadError err = ReadHead(c, end, no); err != ReadError::kNone) return err;
  if (const ReadError err = ParseHead(c, end, req, no); err != ReadError::kNone) return err;
  c.pos = end + 2;

  const std::string_view target = req.target;
  const size_t q = target.find('?');
  req.path = Decode(target.substr(0, q), false);
  if (q != std::string_view::npos) ParseQuery(target.substr(q + 1), req.params);
  req.remote_addr = c.remote_addr;
  req.remote_port = c.remote_port;

  const std::string connection = req.get_header_value("Connection");
  keep_alive = req.version == "HTTP/1.1" ? !ListsToken(connection, "close")
                                         : ListsToken(connection, "keep-alive");

  // The body.
  const std::optional<Framing> framing = BodyFraming(req, opt.max_body_bytes, no);
  if (!framing) return ReadError::kRefused;
  if ((framing->chunked || framing->length > 0) &&
      EqualsIgnoreCase(req.get_header_value("Expect"), "100-continue") && !HasBuffered(c)) {
    if (!WriteAll(c, "HTTP/1.1 100 Continue\r\n\r\n")) return ReadError::kClosed;
  }
  if (framing->chunked) return ReadChunkedBody(c, req.body, no);
  const size_t length = static_cast<size_t>(framing->length);
  while (c.in.size() - c.pos < length) {
    ReadError why = ReadError::kNone;
    if (!Fill(c, why)) {
      if (why != ReadError::kClosed) return why;
      return Refuse(no, 400,
                    "the connection ended after " + std::to_string(c.in.size() - c.pos) +
                        " of the body's " + std::to_string(length) + " bytes");
    }
  }
  req.body.assign(c.in, c.pos, length);
  c.pos += length;
  return ReadError::kNone;
}

void Server::Impl::Guarded(const Request& req, Response& res, const std::function<void()>& fn) {
  try {
    fn();
  } catch (...) {
    res = Response();
    res.status = 500;
    if (exception_handler) {
      try {
        exception_handler(req, res, std::current_exception());
      } catch (...) {
      }
    }
  }
}

void Server::Impl::Complete(const Request& req, Response& res, bool found) {
  if (res.status == -1) res.status = found ? 200 : 404;
  if (res.status >= 400 && error_handler) {
    try {
      error_handler(req, res);
    } catch (...) {
    }
  }
}

const std::string& Server::Impl::Route(Conn& c, Request& req, Response& res, bool keep_alive,
                                       SteadyClock::time_point began,
                                       std::shared_ptr<Later::Pending>* later) {
  static const std::string kNone;
  const std::string& method = req.method == "HEAD" ? std::string("GET") : req.method;
  for (const RouteEntry& r : routes) {
    if (r.method != method || !std::regex_match(req.path, req.matches, r.pattern)) continue;
    if (!r.later) {
      Guarded(req, res, [&] { r.handler(req, res); });
      Complete(req, res, true);
      return r.text;
    }
    auto p = std::make_shared<Later::Pending>();
    p->owner = this;
    p->conn = &c;
    p->req = std::move(req);
    std::regex_match(p->req.path, p->req.matches, r.pattern);  // into the moved path
    p->keep_alive = keep_alive;
    p->began = began;
    p->route = &r.text;
    bool closed;
    {
      std::lock_guard lk(pool_mu);
      closed = later_closed;
      if (!closed) waiting.insert(p);
    }
    const Later answer(p);
    if (closed) {
      answer.Answer([](Response& out) { out.status = 503; });
    } else {
      try {
        r.later(p->req, answer);
      } catch (...) {
        answer.Answer([e = std::current_exception()](Response&) { std::rethrow_exception(e); });
      }
    }
    std::unique_lock lk(p->mu);
    p->in_handler = false;
    if (!p->answered) {
      *later = std::move(p);  // Answer hands it to Resume
      return r.text;
    }
    std::function<void(Response&)> fill = std::move(p->fill);
    lk.unlock();
    {
      std::lock_guard pl(pool_mu);
      waiting.erase(p);
    }
    req = std::move(p->req);
    req.matches = std::smatch();
    std::regex_match(req.path, req.matches, r.pattern);
    Guarded(req, res, [&] { fill(res); });
    Complete(req, res, true);
    return r.text;
  }
  Complete(req, res, false);
  return kNone;
}

bool Server::Impl::WriteResponse(Conn& c, const Request& req, Response& res, bool keep_alive) {
  const bool head_only = req.method == "HEAD";
  const bool no_body = res.status == 204 || res.status == 304 || res.status < 200;
  std::string out;
  out.reserve(256 + res.body.size());
  out += "HTTP/1.1 ";
  out += std::to_string(res.status);
  out += ' ';
  out += res.reason.empty() ? ReasonPhrase(res.status) : res.reason;
  out += "\r\n";
  for (const auto& [name, value] : res.headers) {
    if (EqualsIgnoreCase(name, "Content-Length") || EqualsIgnoreCase(name, "Connection") ||
        EqualsIgnoreCase(name, "Transfer-Encoding")) {
      continue;
    }
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  // What the body is: bytes held, a provider of known length, or a stream.
  const bool provided = static_cast<bool>(res.content_provider_);
  const bool streamed = provided && (res.is_chunked_content_provider_ || res.content_length_ == 0);
  bool chunked = streamed && res.is_chunked_content_provider_ && req.version == "HTTP/1.1";
  if (streamed && !chunked) keep_alive = false;  // the body ends when the connection does
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (req.version == "HTTP/1.0") {
    out += "Connection: keep-alive\r\n";
  }
  if (!no_body) {
    if (chunked) {
      out += "Transfer-Encoding: chunked\r\n";
    } else if (!streamed) {
      out += "Content-Length: ";
      out += std::to_string(provided ? res.content_length_ : res.body.size());
      out += "\r\n";
    }
  }
  out += "\r\n";
  if (no_body || head_only) return WriteAll(c, out) && keep_alive;
  if (!provided) {
    out += res.body;
    return WriteAll(c, out);
  }
  if (!streamed) {
    // A provider of known length: its bytes go out with the head, as one write.
    httplib::DataSink sink;
    bool ok = true;
    sink.write = [&](const char* data, size_t n) {
      out.append(data, n);
      return true;
    };
    sink.is_writable = [] { return true; };
    sink.done = [] {};
    const size_t head_size = out.size();
    size_t offset = 0;
    while (offset < res.content_length_) {
      if (!res.content_provider_(offset, res.content_length_ - offset, sink)) {
        ok = false;
        break;
      }
      const size_t now = out.size() - head_size;
      if (now == offset) {  // no progress: the provider has nothing more
        ok = false;
        break;
      }
      offset = now;
    }
    res.content_provider_success_ = ok;
    if (!ok || offset != res.content_length_) return false;  // the length was promised
    return WriteAll(c, out);
  }
  // A stream: written as the provider gives it, in chunks or until the connection ends.
  if (!WriteAll(c, out)) return false;
  bool ok = true, done = false;
  size_t offset = 0;
  httplib::DataSink sink;
  sink.write = [&](const char* data, size_t n) {
    if (!ok) return false;
    if (n == 0) return true;
    if (chunked) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", n);
      std::string piece = size;
      piece.append(data, n);
      piece += "\r\n";
      ok = WriteAll(c, piece);
    } else {
      ok = WriteAll(c, std::string_view(data, n));
    }
    offset += n;
    return ok;
  };
  sink.is_writable = [&] { return ok; };
  sink.done = [&] { done = true; };
  while (ok && !done && !stopping) {
    if (!res.content_provider_(offset, 0, sink)) ok = false;
  }
  if (ok && done && chunked) ok = WriteAll(c, "0\r\n\r\n");
  res.content_provider_success_ = ok && done;
  return ok && done && keep_alive;
}

void Server::Impl::AnswerRefusal(Conn* c, const Refusal& no) {
  Request req;
  req.method = "GET";
  req.version = "HTTP/1.1";
  Response res;
  res.status = no.status;
  res.set_content(no.why + "\n", "text/plain");
  if (error_handler) {
    try {
      error_handler(req, res);
    } catch (...) {
    }
  }
  WriteResponse(*c, req, res, false);
  // The client may still be sending (a body refused unread, or the rest of a head).
  Linger(*c);
  Close(c);
}

void Server::Impl::Linger(Conn& c) {
  if (c.ssl == nullptr) ::shutdown(c.fd, SHUT_WR);
  const auto until = SteadyClock::now() + std::chrono::seconds(5);
  size_t dropped = 0;
  char buf[64 << 10];
  while (dropped < (size_t{256} << 20) && SteadyClock::now() < until) {
    if (!WaitFor(c, POLLIN, std::chrono::milliseconds(1000))) return;
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
    if (n > 0) dropped += static_cast<size_t>(n);
  }
}

// --- Server -------------------------------------------------------------------------

Server::Server(ServerOptions options) : Server(options, nullptr) {}

Server::Server(ServerOptions options, SSL_CTX* ctx) : impl_(std::make_unique<Impl>(options, ctx)) {
  impl_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  impl_->event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Server::~Server() {
  Stop();
  std::lock_guard lk(impl_->mu);
  impl_->conns.clear();
}

Server& Server::Route(const std::string& method, const std::string& pattern, Handler handler) {
  impl_->routes.push_back({method, pattern, std::regex(pattern), std::move(handler), nullptr});
  return *this;
}
Server& Server::PostLater(const std::string& pattern, LaterHandler handler) {
  impl_->routes.push_back({"POST", pattern, std::regex(pattern), nullptr, std::move(handler)});
  return *this;
}
Server& Server::Get(const std::string& pattern, Handler h) {
  return Route("GET", pattern, std::move(h));
}
Server& Server::Post(const std::string& pattern, Handler h) {
  return Route("POST", pattern, std::move(h));
}
Server& Server::Put(const std::string& pattern, Handler h) {
  return Route("PUT", pattern, std::move(h));
}
Server& Server::Patch(const std::string& pattern, Handler h) {
  return Route("PATCH", pattern, std::move(h));
}
Server& Server::Delete(const std::string& pattern, Handler h) {
  return Route("DELETE", pattern, std::move(h));
}

void Server::SetErrorHandler(Handler handler) { impl_->error_handler = std::move(handler); }
void Server::SetExceptionHandler(ExceptionHandler handler) {
  impl_->exception_handler = std::move(handler);
}
void Server::SetMaxBodyBytes(size_t bytes) { impl_->opt.max_body_bytes = bytes; }
void Server::SetObserver(Observer observer) { impl_->observer = std::move(observer); }

bool Server::BindToPort(const std::string& host, int port) {
  if (impl_->listen_fd >= 0) return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string h = host.size() > 2 && host.front() == '[' && host.back() == ']'
                            ? host.substr(1, host.size() - 2)
                            : host;
  if (::getaddrinfo(h.empty() ? nullptr : h.c_str(), std::to_string(port).c_str(), &hints,
                    &found) != 0) {
    return false;
  }
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      impl_->listen_fd = fd;
      break;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return impl_->listen_fd >= 0;
}

int Server::BindToAnyPort(const std::string& host) {
  if (!BindToPort(host, 0)) return -1;
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

bool Server::Serve() {
  Impl& s = *impl_;
  if (s.listen_fd < 0 || s.epoll_fd < 0 || s.event_fd < 0) return false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &s.listen_fd;
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &ev);
  ev.data.ptr = &s.event_fd;
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.event_fd, &ev);
  running_ = true;
  auto last_sweep = SteadyClock::now();
  // Idle connections are looked at this often: at most every second, and at least
  // twice per idle timeout.
  const auto sweep_every =
      std::chrono::milliseconds(std::min<int64_t>(1000, s.opt.idle_timeout.count() / 2 + 1));
  std::vector<epoll_event> events(256);
  while (!s.stopping) {
    const int n = ::epoll_wait(s.epoll_fd, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(sweep_every.count()));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      void* p = events[static_cast<size_t>(i)].data.ptr;
      if (p == &s.listen_fd) {
        s.Accept();
      } else if (p == &s.event_fd) {
        uint64_t v;
        while (::read(s.event_fd, &v, sizeof v) > 0) {
        }
      } else {
        Conn* c = static_cast<Conn*>(p);
        {
          std::lock_guard lk(s.mu);
          c->idle = false;
        }
        c->ready_at = SteadyClock::now();
        s.Dispatch(c);
      }
    }
    const auto now = SteadyClock::now();
    if (now - last_sweep >= sweep_every) {
      s.SweepIdle();
      last_sweep = now;
    }
  }
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_DEL, s.listen_fd, nullptr);
  ::close(s.listen_fd);
  s.listen_fd = -1;
  s.CloseAllIdle();
  s.CloseLater();
  s.ShutdownPool();  // in-flight requests are answered first
  running_ = false;
  return true;
}

void Server::Stop() {
  impl_->stopping = true;
  if (impl_->event_fd >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(impl_->event_fd, &one, sizeof one);
  }
}

size_t Server::waiting() const {
  std::lock_guard lk(impl_->pool_mu);
  return impl_->waiting.size();
}

size_t Server::connections() const {
  std::lock_guard lk(impl_->mu);
  return impl_->conns.size();
}

size_t Server::threads() const { return impl_->worker_count.load(); }

void RaiseOpenFileLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  r.rlim_cur = r.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &r);
}

}  // namespace trainyard::http
