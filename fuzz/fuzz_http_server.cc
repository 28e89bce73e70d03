// Fuzzes the control plane's HTTP server (http/server.h) the way a client reaches it:
// each input is sent as is over a fresh loopback connection, which then closes its
// sending side; the server's answers are read to the end. One server serves every
// input, so state one input leaves behind (a thread, a connection, a buffer) meets
// the next.
//
// Properties: every answer the server writes is a well-formed HTTP/1.1 status line
// with headers ending in an empty line, and a Content-Length body or a chunked body
// that ends; a refusal (400, 413, 414, 431, 501: only the server's own, the routes here
// answer none of them) says Connection: close and is the last answer on its connection
// (the bytes after a refused request cannot be trusted); the server answers a probe
// after every input (it neither crashed nor stopped answering); the handlers see what
// the server parsed: the echo route returns the method, the decoded path and the body
// it got, and those are checked against the route's pattern.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "fuzz_check.h"
#include "http/server.h"

namespace {

constexpr const char* kTarget = "fuzz_http_server";

struct Serving {
  std::unique_ptr<trainyard::http::Server> server;
  std::thread thread;
  int port = 0;
};

Serving& Instance() {
  static Serving* s = [] {
    auto* out = new Serving;
    trainyard::http::ServerOptions o;
    o.read_timeout = std::chrono::milliseconds(2000);
    o.max_body_bytes = 1 << 16;
    o.max_header_bytes = 8 << 10;
    o.next_request_wait = std::chrono::microseconds(0);
    out->server = std::make_unique<trainyard::http::Server>(o);
    auto echo = [](const httplib::Request& req, httplib::Response& res) {
      res.set_header("X-Method", req.method);
      res.set_content("path=" + std::to_string(req.path.size()) +
                          " body=" + std::to_string(req.body.size()) +
                          " params=" + std::to_string(req.params.size()),
                      "text/plain");
    };
    for (const char* m : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
      out->server->Route(m, "/echo(/.*)?", echo);
    }
    // Every answer says which method it answers (a HEAD answer has no body).
    out->server->SetErrorHandler([](const httplib::Request& req, httplib::Response& res) {
      res.set_header("X-Method", req.method);
    });
    out->server->Get("/stream", [](const httplib::Request& req, httplib::Response& res) {
      res.set_header("X-Method", req.method);
      res.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
        if (offset >= 30) {
          sink.done();
        } else {
          sink.write("0123456789", 10);
        }
        return true;
      });
    });
    out->server->Get("/throw", [](const httplib::Request&, httplib::Response&) {
      throw std::runtime_error("thrown");
    });
    out->port = out->server->BindToAnyPort("127.0.0.1");
    if (out->port <= 0) trainyard::fuzz::Fail(kTarget, "cannot bind", "");
    out->thread = std::thread([out] { out->server->Serve(); });
    while (!out->server->running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return out;
  }();
  return *s;
}

int last_error = 0;  // of the last Exchange's last read: 0 at the end of the stream

// Sends `data`, closes the sending side, and returns everything the server wrote.
std::string Exchange(int port, std::string_view data) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};  // far above the server's own 2 s read timeout
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // From a new loopback address each time (127.0.0.0/8 is all loopback): at thousands
  // of connections a second, closed ones waiting in TIME_WAIT would use up one
  // address's ephemeral ports within a minute (connect: EADDRNOTAVAIL).
  static uint32_t next_source = 0;
  const uint32_t n = next_source++ % 0xfffff0;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl((127u << 24) | (n + 2));
  ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from);
  int connected = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (connected != 0 && errno == EINTR) {
    // Interrupted by a signal, the connection goes on being made: wait for it.
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    while (::poll(&p, 1, 10'000) < 0 && errno == EINTR) {
    }
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    connected = err == 0 ? 0 : -1;
    errno = err;
  }
  if (connected != 0) {
    const int err = errno;
    ::close(fd);
    trainyard::fuzz::Fail(kTarget, std::strerror(err), data);
  }
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed early (a refused request): fine
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;  // libFuzzer's own timer signals
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      ::close(fd);
      trainyard::fuzz::Fail(kTarget, "no end of the answer within 10 s", data);
    }
    last_error = n < 0 ? errno : 0;
    break;  // EOF, or a reset after a refusal
  }
  ::close(fd);
  return out;
}

// Checks that `out` is a sequence of well-formed answers; returns how many.
int CheckAnswers(std::string_view out, std::string_view input) {
  int answers = 0;
  while (!out.empty()) {
    const size_t head_end = out.find("\r\n\r\n");
    if (head_end == std::string_view::npos) {
      trainyard::fuzz::Fail(kTarget, "an answer without the end of its headers", input);
    }
    const std::string_view head = out.substr(0, head_end);
    if (!head.starts_with("HTTP/1.1 ") || head.size() < 12) {
      trainyard::fuzz::Fail(kTarget, "an answer without a status line", input);
    }
    const int status = std::atoi(std::string(head.substr(9, 3)).c_str());
    if (status < 100 || status > 599) trainyard::fuzz::Fail(kTarget, "a bad status", input);
    out.remove_prefix(head_end + 4);
    ++answers;
    if (status == 100) continue;  // an interim answer; the final one follows
    size_t length = 0;
    bool chunked = false, has_length = false, head_request = false;
    size_t pos = head.find("\r\n");
    while (pos != std::string_view::npos) {
      const size_t next = head.find("\r\n", pos + 2);
      const std::string_view line = head.substr(
          pos + 2, next == std::string_view::npos ? std::string_view::npos : next - pos - 2);
      if (line.starts_with("Content-Length: ")) {
        has_length = true;
        length = static_cast<size_t>(std::atoll(std::string(line.substr(16)).c_str()));
      }
      if (line == "Transfer-Encoding: chunked") chunked = true;
      if (line == "X-Method: HEAD") head_request = true;
      if (line.find('\n') != std::string_view::npos || line.find('\r') != std::string_view::npos) {
        trainyard::fuzz::Fail(kTarget, "a header with a line break", input);
      }
      pos = next;
    }
    const bool refusal =
        status == 400 || status == 413 || status == 414 || status == 431 || status == 501;
    if (refusal && head.find("\r\nConnection: close") == std::string_view::npos) {
      trainyard::fuzz::Fail(kTarget, "a refusal that does not close the connection", input);
    }
    if (head_request) {
      continue;  // the headers a GET would have, no body
    } else if (chunked) {
      const size_t end = out.find("0\r\n\r\n");
      if (end == std::string_view::npos) {
        trainyard::fuzz::Fail(kTarget, "a chunked answer that does not end", input);
      }
      out.remove_prefix(end + 5);
    } else if (has_length) {
      if (out.size() < length) trainyard::fuzz::Fail(kTarget, "a body shorter than said", input);
      out.remove_prefix(length);
    }
    if (refusal && !out.empty()) {
      trainyard::fuzz::Fail(kTarget, "an answer after a refusal on the same connection", input);
    } else if (status != 204 && status != 304) {
      out = {};  // a body without a length ends with the connection (HTTP/1.0 streams)
    }
  }
  return answers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Serving& s = Instance();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  CheckAnswers(Exchange(s.port, input), input);
  // Still answering, and still parsing a plain request right.
  const std::string probe = Exchange(s.port, "GET /echo/a%20b?x=1 HTTP/1.1\r\nHost: p\r\n\r\n");
  if (probe.find("HTTP/1.1 200 OK\r\n") != 0 ||
      probe.find("path=9 body=0 params=1") == std::string::npos) {
    std::fprintf(
        stderr,
        "fuzz_http_server: the probe got (%zu bytes, then %s; %zu connections, %zu threads):\n%s\n",
        probe.size(), last_error == 0 ? "end of stream" : std::strerror(last_error),
        s.server->connections(), s.server->threads(), probe.c_str());
    trainyard::fuzz::Fail(kTarget, "the probe after this input was not answered right", input);
  }
  return 0;
}
