#include "http/client.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/names.h"

namespace trainyard::http {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;

std::string Errno(int e) { return std::strerror(e); }

// The part of OpenSSL this client uses, looked up in libssl.so.3 (and, through it,
// libcrypto.so.3) at run time. Declarations come from the headers, so a signature
// that does not match the library's fails to compile.
struct OpenSsl {
#define TY_SSL_FUNCTIONS(X)                                                                  \
  X(TLS_client_method)                                                                       \
  X(SSL_CTX_new)                                                                             \
  X(SSL_CTX_free)                                                                            \
  X(SSL_CTX_set_verify) X(SSL_CTX_load_verify_locations) X(SSL_CTX_set_default_verify_paths) \
      X(SSL_CTX_get0_param) X(SSL_CTX_ctrl) X(SSL_new) X(SSL_free) X(SSL_set_fd) X(SSL_ctrl) \
          X(SSL_set1_host) X(SSL_connect) X(SSL_read) X(SSL_write) X(SSL_shutdown)           \
              X(SSL_get_error) X(SSL_get_verify_result) X(X509_verify_cert_error_string)     \
                  X(X509_VERIFY_PARAM_set_flags) X(ERR_get_error) X(ERR_error_string_n)      \
                      X(ERR_clear_error)
#define TY_DECLARE(name) decltype(&::name) name = nullptr;
  TY_SSL_FUNCTIONS(TY_DECLARE)
#undef TY_DECLARE

  // The library, loaded once per process; nullptr and `error` set when it cannot be.
  static const OpenSsl* Get(std::string& error) {
    static std::once_flag once;
    static OpenSsl lib;
    static std::string load_error;
    std::call_once(once, [] {
      void* handle = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* why = dlerror();
        load_error = std::string("https needs OpenSSL 3 (libssl.so.3): ") +
                     (why != nullptr ? why : "cannot load it");
        return;
      }
#define TY_LOOK_UP(name)                                                            \
  lib.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));             \
  if (lib.name == nullptr) {                                                        \
    load_error = "https needs OpenSSL 3: libssl.so.3 has no " + std::string(#name); \
    return;                                                                         \
  }
      TY_SSL_FUNCTIONS(TY_LOOK_UP)
#undef TY_LOOK_UP
    });
    if (!load_error.empty()) {
      error = load_error;
      return nullptr;
    }
    return &lib;
  }
#undef TY_SSL_FUNCTIONS

  // The oldest queued error in words ("" when none); clears the queue.
  std::string TakeError() const {
    const unsigned long e = ERR_get_error();
    ERR_clear_error();
    if (e == 0) return "";
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    return buf;
  }
};

// Writes through OpenSSL without a SIGPIPE killing the process when the server has
// gone: the signal is blocked on this thread for the write, and one it raised is
// consumed (OpenSSL writes with write(2), which cannot be told MSG_NOSIGNAL).
class ScopedNoSigpipe {
 public:
  ScopedNoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    already_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedNoSigpipe() {
    if (!already_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedNoSigpipe(const ScopedNoSigpipe&) = delete;
  ScopedNoSigpipe& operator=(const ScopedNoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool already_pending_ = false;
};

struct Url {
  bool tls = false;
  std::string host;  // without brackets
  std::string port;
  std::string host_header;
};

std::variant<Url, Error> ParseUrl(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Error{ErrorKind::kUrl, "bad server URL \"" + url + "\": " + why +
                                      " (expected http://HOST:PORT or https://HOST:PORT)"};
  };
  Url u;
  std::string_view rest = url;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    u.tls = true;
    rest.remove_prefix(8);
  } else {
    return bad("the scheme must be http or https");
  }
  if (rest.ends_with('/')) rest.remove_suffix(1);
  std::string_view host, port;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("no ']' after the IPv6 address");
    host = rest.substr(1, close - 1);
    rest.remove_prefix(close + 1);
    if (!rest.empty() && rest[0] != ':') return bad("a path is not supported");
    if (!rest.empty()) port = rest.substr(1);
  } else {
    const size_t colon = rest.find(':');
    host = rest.substr(0, colon);
    if (colon != std::string_view::npos) port = rest.substr(colon + 1);
  }
  if (host.empty()) return bad("no host");
  if (host.find_first_of("/?#@ ") != std::string_view::npos ||
      port.find_first_of("/?#") != std::string_view::npos) {
    return bad("a path, query or user is not supported");
  }
  if (!port.empty()) {
    int n = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
    if (ec != std::errc() || end != port.data() + port.size() || n < 1 || n > 65535) {
      return bad("the port must be a number from 1 to 65535");
    }
  }
  u.host = std::string(host);
  u.port = port.empty() ? (u.tls ? "443" : "80") : std::string(port);
  const bool v6 = u.host.find(':') != std::string::npos;
  u.host_header = (v6 ? "[" + u.host + "]" : u.host) + (port.empty() ? "" : ":" + u.port);
  return u;
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

std::string Response::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

std::string EncodeComponent(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

struct Client::Impl {
  std::string url_text;
  std::variant<Url, Error> url;
  ClientOptions options;
  const OpenSsl* ssl_lib = nullptr;
  SSL_CTX* ctx = nullptr;
  // The open connection, when there is one.
  int fd = -1;
  SSL* ssl = nullptr;
  std::string buffered;  // read past the previous answer's end (none, normally)

  ~Impl() {
    Close();
    if (ctx != nullptr) ssl_lib->SSL_CTX_free(ctx);
  }

  void Close() {
    if (ssl != nullptr) {
      ssl_lib->SSL_free(ssl);
      ssl = nullptr;
    }
    if (fd >= 0) ::close(fd);
    fd = -1;
    buffered.clear();
  }

  std::optional<Error> Connect(const Url& u) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &found); rc != 0) {
      return Error{ErrorKind::kConnection,
                   "cannot resolve " + u.host + ": " + std::string(gai_strerror(rc))};
    }
    std::string why = "no address";
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (s < 0) {
        why = Errno(errno);
        continue;
      }
      int rc = ::connect(s, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        rc = ::poll(&p, 1, options.connect_timeout_ms);
        if (rc == 0) {
          why = "no connection within " + std::to_string(options.connect_timeout_ms) + " ms";
          ::close(s);
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
        if (rc < 0) err = errno;
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc != 0) {
        why = Errno(errno);
        ::close(s);
        continue;
      }
      fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
      const int one = 1;
      setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      timeval tv{options.read_timeout_ms / 1000, (options.read_timeout_ms % 1000) * 1000};
      setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      fd = s;
      break;
    }
    freeaddrinfo(found);
    if (fd < 0) return Error{ErrorKind::kConnection, why};
    if (u.tls) {
      if (auto e = Handshake(u)) {
        Close();
        return e;
      }
    }
    return std::nullopt;
  }

  std::optional<Error> Handshake(const Url& u) {
    if (ctx == nullptr) {
      std::string why;
      ssl_lib = OpenSsl::Get(why);
      if (ssl_lib == nullptr) return Error{ErrorKind::kTls, why};
      ctx = ssl_lib->SSL_CTX_new(ssl_lib->TLS_client_method());
      if (ctx == nullptr) {
        return Error{ErrorKind::kTls, "cannot make a TLS context: " + ssl_lib->TakeError()};
      }
      ssl_lib->SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr);
      ssl_lib->SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
      if (options.ca_file.empty()) {
        ssl_lib->SSL_CTX_set_default_verify_paths(ctx);
      } else {
        if (ssl_lib->SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr) != 1) {
          return Error{ErrorKind::kTls,
                       "cannot load the CA certificates to verify the server with"
                       " from " +
                           options.ca_file + ": " + ssl_lib->TakeError()};
        }
        ssl_lib->X509_VERIFY_PARAM_set_flags(ssl_lib->SSL_CTX_get0_param(ctx),
                                             X509_V_FLAG_PARTIAL_CHAIN);
      }
    }
    ssl = ssl_lib->SSL_new(ctx);
    if (ssl == nullptr) return Error{ErrorKind::kTls, "TLS: " + ssl_lib->TakeError()};
    ssl_lib->SSL_set_fd(ssl, fd);
    if (!IsIpAddress(u.host)) {
      ssl_lib->SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                        const_cast<char*>(u.host.c_str()));
    }
    ssl_lib->SSL_set1_host(ssl, u.host.c_str());  // an IP address is checked as one
    ssl_lib->ERR_clear_error();
    int rc;
    {
      ScopedNoSigpipe guard;
      rc = ssl_lib->SSL_connect(ssl);
    }
    if (rc == 1) return std::nullopt;
    const long verify = ssl_lib->SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      ssl_lib->ERR_clear_error();
      const bool wrong_name =
          verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH;
      return Error{ErrorKind::kTlsVerification,
                   std::string("the server's certificate failed verification: ") +
                       (wrong_name ? "it does not name the host in the URL"
                                   : ssl_lib->X509_verify_cert_error_string(verify))};
    }
    const std::string why = ssl_lib->TakeError();
    return Error{ErrorKind::kTls, "TLS handshake failed (does the server serve https?)" +
                                      (why.empty() ? "" : ": " + why)};
  }

  // Whether the kept connection is still usable: the server has sent nothing since
  // its last answer (not even the end of the stream).
  bool StillOpen() const {
    if (fd < 0) return false;
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }

  std::optional<Error> WriteAll(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n;
      if (ssl != nullptr) {
        ScopedNoSigpipe guard;
        const int chunk = static_cast<int>(std::min<size_t>(data.size() - done, 1 << 30));
        n = ssl_lib->SSL_write(ssl, data.data() + done, chunk);
        if (n <= 0) {
          return Error{ErrorKind::kIo, "sending the request failed: " + SslFailure(int(n))};
        }
      } else {
        n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return TimedOut("sending the request");
          return Error{ErrorKind::kIo, "sending the request failed: " + Errno(errno)};
        }
      }
      done += static_cast<size_t>(n);
    }
    return std::nullopt;
  }

  Error TimedOut(const std::string& what) const {
    return Error{ErrorKind::kTimeout, what + ": no progress within " +
                                          std::to_string(options.read_timeout_ms / 1000) + " s"};
  }

  std::string SslFailure(int rc) {
    const int e = ssl_lib->SSL_get_error(ssl, rc);
    if (e == SSL_ERROR_SYSCALL && errno != 0) return Errno(errno);
    std::string why = ssl_lib->TakeError();
    return why.empty() ? "TLS error " + std::to_string(e) : why;
  }

  // Appends what arrives next to `buffered`. Returns false at the end of the stream;
  // an Error when reading failed.
  std::variant<bool, Error> ReadMore() {
    char buf[16384];
    while (true) {
      ssize_t n;
      if (ssl != nullptr) {
        n = ssl_lib->SSL_read(ssl, buf, sizeof buf);
        if (n <= 0) {
          const int e = ssl_lib->SSL_get_error(ssl, static_cast<int>(n));
          if (e == SSL_ERROR_ZERO_RETURN) return false;
          if (e == SSL_ERROR_WANT_READ || (e == SSL_ERROR_SYSCALL && errno == EAGAIN)) {
            return TimedOut("waiting for the answer");
          }
          if (e == SSL_ERROR_SYSCALL && errno == 0) return false;  // closed without notify
          ssl_lib->ERR_clear_error();
          if (e == SSL_ERROR_SSL) return false;  // OpenSSL 3: unexpected EOF
          return Error{ErrorKind::kIo, "reading the answer failed: " + SslFailure(int(n))};
        }
      } else {
        n = ::recv(fd, buf, sizeof buf, 0);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return TimedOut("waiting for the answer");
          return Error{ErrorKind::kIo, "reading the answer failed: " + Errno(errno)};
        }
        if (n == 0) return false;
      }
      buffered.append(buf, static_cast<size_t>(n));
      return true;
    }
  }

  // Makes `buffered` hold at least `n` bytes; an Error (or the end of the stream,
  // reported as kIo naming `what`) otherwise.
  std::optional<Error> Need(size_t n, const char* what) {
    while (buffered.size() < n) {
      auto more = ReadMore();
      if (auto* e = std::get_if<Error>(&more)) return *e;
      if (!std::get<bool>(more)) {
        return Error{ErrorKind::kIo, std::string("the server closed the connection ") + what};
      }
    }
    return std::nullopt;
  }

  // The position just past the next "\r\n" in `buffered` from `from`, reading more as
  // needed.
  std::variant<size_t, Error> Line(size_t from, const char* what) {
    while (true) {
      const size_t eol = buffered.find("\r\n", from);
      if (eol != std::string::npos) return eol + 2;
      if (buffered.size() > kMaxHeaderBytes) {
        return Error{ErrorKind::kProtocol, std::string("a line too long ") + what};
      }
      if (auto e = Need(buffered.size() + 1, what)) return *e;
    }
  }

  std::variant<Response, Error> ReadResponse(const std::string& method, bool& keep) {
    Response res;
    // Status line and headers.
    size_t header_end;
    while (true) {
      header_end = buffered.find("\r\n\r\n");
      if (header_end != std::string::npos) break;
      if (buffered.size() > kMaxHeaderBytes) {
        return Error{ErrorKind::kProtocol, "the answer's headers exceed 64 KiB"};
      }
      auto more = ReadMore();
      if (auto* e = std::get_if<Error>(&more)) return *e;
      if (!std::get<bool>(more)) {
        return Error{ErrorKind::kIo, buffered.empty()
                                         ? "the server closed the connection without answering"
                                         : "the server closed the connection mid-answer"};
      }
    }
    const std::string head = buffered.substr(0, header_end);
    buffered.erase(0, header_end + 4);
    size_t pos = head.find("\r\n");
    const std::string status_line = head.substr(0, pos);
    if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12) {
      return Error{ErrorKind::kProtocol,
                   "not an HTTP answer: \"" + status_line.substr(0, 40) + "\""};
    }
    auto [end, ec] = std::from_chars(status_line.data() + 9, status_line.data() + 12, res.status);
    if (ec != std::errc() || res.status < 100) {
      return Error{ErrorKind::kProtocol, "bad status line \"" + status_line + "\""};
    }
    keep = status_line.starts_with("HTTP/1.1");
    while (pos != std::string::npos) {
      const size_t start = pos + 2;
      pos = head.find("\r\n", start);
      std::string_view line(head.data() + start,
                            (pos == std::string::npos ? head.size() : pos) - start);
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view value = TrimBlanks(line.substr(colon + 1));
      res.headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
    }
    if (EqualsIgnoreCase(res.Header("Connection"), "close")) keep = false;
    // Body.
    if (method == "HEAD" || res.status / 100 == 1 || res.status == 204 || res.status == 304) {
      return res;
    }
    const std::string te = res.Header("Transfer-Encoding");
    const std::string cl = res.Header("Content-Length");
    if (!te.empty() && te != "identity") {
      if (!EqualsIgnoreCase(te, "chunked")) {
        return Error{ErrorKind::kProtocol, "unsupported Transfer-Encoding \"" + te + "\""};
      }
      while (true) {
        auto line = Line(0, "mid-chunk");
        if (auto* e = std::get_if<Error>(&line)) return *e;
        const size_t after = std::get<size_t>(line);
        size_t size = 0;
        auto [p, ec2] = std::from_chars(buffered.data(), buffered.data() + after - 2, size, 16);
        if (ec2 != std::errc() || p == buffered.data()) {
          return Error{ErrorKind::kProtocol, "bad chunk size in the answer"};
        }
        buffered.erase(0, after);
        if (size == 0) {
          // Trailers, up to an empty line.
          while (true) {
            auto t = Line(0, "in the trailers");
            if (auto* e = std::get_if<Error>(&t)) return *e;
            const size_t n = std::get<size_t>(t);
            buffered.erase(0, n);
            if (n == 2) break;
          }
          break;
        }
        if (auto e = Need(size + 2, "mid-chunk")) return *e;
        res.body.append(buffered, 0, size);
        buffered.erase(0, size + 2);
      }
    } else if (!cl.empty()) {
      size_t length = 0;
      auto [p, ec2] = std::from_chars(cl.data(), cl.data() + cl.size(), length);
      if (ec2 != std::errc() || p != cl.data() + cl.size()) {
        return Error{ErrorKind::kProtocol, "bad Content-Length \"" + cl + "\""};
      }
      if (auto e = Need(length, "mid-answer")) return *e;
      res.body = buffered.substr(0, length);
      buffered.erase(0, length);
    } else {
      // Delimited by the end of the stream.
      while (true) {
        auto more = ReadMore();
        if (auto* e = std::get_if<Error>(&more)) return *e;
        if (!std::get<bool>(more)) break;
      }
      res.body = std::move(buffered);
      buffered.clear();
      keep = false;
    }
    return res;
  }
};

Client::Client(const std::string& url, ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->url_text = url;
  impl_->url = ParseUrl(url);
  impl_->options = std::move(options);
}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

std::variant<Response, Error> Client::Send(const std::string& method, const std::string& path,
                                           const std::string& body,
                                           const std::string& content_type) {
  Impl& c = *impl_;
  if (auto* e = std::get_if<Error>(&c.url)) return *e;
  const Url& u = std::get<Url>(c.url);
  if (path.empty() || path[0] != '/' || path.find_first_of("\r\n ") != std::string::npos) {
    return Error{ErrorKind::kUrl, "bad request path \"" + path + "\""};
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + u.host_header +
                    "\r\nUser-Agent: trainyard\r\nAccept: */*\r\n";
  for (const auto& [k, v] : c.options.headers) req += k + ": " + v + "\r\n";
  const bool with_body =
      !content_type.empty() || method == "POST" || method == "PUT" || method == "PATCH";
  if (with_body) {
    if (!content_type.empty()) req += "Content-Type: " + content_type + "\r\n";
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n";
  if (with_body) req += body;

  if (!c.StillOpen()) c.Close();
  if (c.fd < 0) {
    if (auto e = c.Connect(u)) return *e;
  }
  if (auto e = c.WriteAll(req)) {
    c.Close();
    return *e;
  }
  bool keep = false;
  auto res = c.ReadResponse(method, keep);
  if (std::holds_alternative<Error>(res) || !keep) c.Close();
  return res;
}

}  // namespace trainyard::http
