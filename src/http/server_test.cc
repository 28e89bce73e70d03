#include "http/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "http/client.h"
#include "http/tls.h"

namespace trainyard::http {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Polls `done` every millisecond until it holds or `timeout` passes; for state the
// server exposes only as a getter (running(), connections()).
template <typename Pred>
bool WaitFor(Pred done, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An answer as read off the wire; `raw` holds the bytes it was read from (all that
// arrived, when it could not be read), for failure messages.
struct RawResponse {
  int status = 0;  // 0: no complete answer arrived
  std::string status_line;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string raw;

  std::string Header(const std::string& name) const {
    auto it = headers.find(Lower(name));
    return it == headers.end() ? "" : it->second;
  }
};

// A client connection that writes exact bytes and reads answers one at a time (over
// TLS when given an SSL_CTX): for what http::Client never sends (pipelining, chunked
// bodies, Expect, malformed requests) and for connections that send nothing.
class RawConnection {
 public:
  explicit RawConnection(int port, SSL_CTX* tls = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ADD_FAILURE() << "cannot connect to port " << port << ": " << std::strerror(errno);
      Close();
      return;
    }
    // A bound on blocking reads (SSL_read), so a silent server fails a test instead of
    // hanging it.
    timeval tv{.tv_sec = 5, .tv_usec = 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (tls != nullptr) {
      ssl_ = SSL_new(tls);
      SSL_set_fd(ssl_, fd_);
      SSL_set1_host(ssl_, "127.0.0.1");
      if (SSL_connect(ssl_) != 1) {
        ADD_FAILURE() << "TLS handshake failed";
        Close();
      }
    }
  }
  ~RawConnection() { Close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  void Close() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    ssl_ = nullptr;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool Send(std::string_view data) {
    if (fd_ < 0) return false;
    if (ssl_ != nullptr) {
      return SSL_write(ssl_, data.data(), static_cast<int>(data.size())) ==
             static_cast<int>(data.size());
    }
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads up to and including the next blank line ("" if none comes in time).
  std::string ReadHead(std::chrono::milliseconds timeout = 5s) {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(timeout)) return "";
    }
    std::string head = buf_.substr(0, end + 4);
    buf_.erase(0, end + 4);
    return head;
  }

  // The next answer; `head` for the answer to a HEAD request (no body follows).
  RawResponse Read(bool head = false, std::chrono::milliseconds timeout = 5s) {
    RawResponse r;
    std::string text = ReadHead(timeout);
    if (text.empty()) {
      r.raw = buf_;
      return r;
    }
    r.raw = text;
    const size_t line_end = text.find("\r\n");
    r.status_line = text.substr(0, line_end);
    size_t pos = line_end + 2;
    while (pos < text.size() - 2) {
      const size_t eol = text.find("\r\n", pos);
      const std::string line = text.substr(pos, eol - pos);
      pos = eol + 2;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      value.erase(value.find_last_not_of(" \t") + 1);
      r.headers[Lower(line.substr(0, colon))] = value;
    }
    int status = 0;
    if (std::sscanf(r.status_line.c_str(), "HTTP/1.%*d %d", &status) != 1) return r;
    const bool no_body = head || status / 100 == 1 || status == 204 || status == 304;
    if (!no_body && Lower(r.Header("Transfer-Encoding")) == "chunked") {
      while (true) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos) {
          if (!Fill(timeout)) return r;
        }
        const size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
        while (buf_.size() < eol + 2 + size + 2) {
          if (!Fill(timeout)) return r;
        }
        r.raw += buf_.substr(0, eol + 2 + size + 2);
        if (size == 0) {  // no trailers expected from our server
          buf_.erase(0, eol + 2 + size + 2);
          break;
        }
        r.body += buf_.substr(eol + 2, size);
        buf_.erase(0, eol + 2 + size + 2);
      }
    } else if (!no_body && r.headers.count("content-length") != 0) {
      const size_t size = std::stoul(r.Header("Content-Length"));
      while (buf_.size() < size) {
        if (!Fill(timeout)) return r;
      }
      r.body = buf_.substr(0, size);
      r.raw += r.body;
      buf_.erase(0, size);
    } else if (!no_body) {
      while (Fill(timeout)) {
      }
      r.body = std::move(buf_);
      buf_.clear();
      r.raw += r.body;
    }
    r.status = status;
    return r;
  }

  // Whether the server closes the connection within `timeout`; what it sent before
  // closing goes to `rest`.
  bool WaitForClose(std::chrono::milliseconds timeout = 5s, std::string* rest = nullptr) {
    const auto deadline = Clock::now() + timeout;
    while (!closed_ && Clock::now() < deadline) {
      Fill(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    }
    if (rest != nullptr) *rest = buf_;
    return closed_;
  }

  // Bytes received but not yet read as an answer.
  const std::string& buffered() const { return buf_; }

 private:
  // Appends what arrives within `timeout` to buf_; false at end of stream (sets
  // closed_), on error, or when nothing came in time.
  bool Fill(std::chrono::milliseconds timeout) {
    if (fd_ < 0 || closed_) return false;
    if (ssl_ == nullptr || SSL_pending(ssl_) == 0) {
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(timeout.count(), 0))) <= 0) {
        return false;
      }
    }
    char chunk[65536];
    ssize_t n;
    if (ssl_ != nullptr) {
      n = SSL_read(ssl_, chunk, sizeof chunk);
    } else {
      n = ::recv(fd_, chunk, sizeof chunk, 0);
    }
    if (n > 0) {
      buf_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    // An orderly close; a reset counts as closed too.
    if (ssl_ != nullptr) {
      const int e = SSL_get_error(ssl_, static_cast<int>(n));
      closed_ = e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
    } else {
      closed_ = n == 0 || errno == ECONNRESET;
    }
    return false;
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string buf_;
  bool closed_ = false;
};

Response Ok(std::variant<Response, Error> r) {
  if (auto* e = std::get_if<Error>(&r)) {
    ADD_FAILURE() << "request failed: " << e->message;
    return {};
  }
  return std::get<Response>(std::move(r));
}

// Holds handlers until the test releases them, and tells the test how many are held.
class Gate {
 public:
  void Enter() {
    std::unique_lock lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  bool WaitForEntered(int n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return entered_ >= n; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool released_ = false;
};

// A server on a free loopback port, served on its own thread. Tests replace server_
// (for other options), add routes, then Start.
class ServerTest : public ::testing::Test {
 protected:
  void Start() {
    port_ = server_->BindToAnyPort("127.0.0.1");
    ASSERT_GT(port_, 0);
    serve_ = std::thread([this] {
      served_ = server_->Serve();
      serve_returned_ = true;
    });
    ASSERT_TRUE(WaitFor([&] { return server_->running(); })) << "Serve did not start";
  }
  void StopServer() {
    if (!serve_.joinable()) return;
    server_->Stop();
    serve_.join();
  }
  void TearDown() override {
    // Blocked handlers first: Stop waits for requests in flight.
    gate_.Release();
    StopServer();
    for (auto& t : clients_) t.join();
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // GET /block waits at gate_, then answers "released"; GET /fast answers "fast".
  void AddBlockAndFastRoutes() {
    server_->Get("/block", [&](const httplib::Request&, httplib::Response& res) {
      gate_.Enter();
      res.set_content("released", "text/plain");
    });
    server_->Get("/fast", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("fast", "text/plain");
    });
  }

  std::unique_ptr<Server> server_ = std::make_unique<Server>();
  int port_ = 0;
  std::thread serve_;
  std::atomic<bool> served_{false};
  std::atomic<bool> serve_returned_{false};
  Gate gate_;
  std::vector<std::thread> clients_;
};

// Routing.

TEST_F(ServerTest, RoutesEachMethodToItsHandler) {
  auto named = [](std::string name) {
    return [name](const httplib::Request& req, httplib::Response& res) {
      res.set_content(name + ":" + req.method + ":" + req.body, "text/plain");
    };
  };
  server_->Get("/thing", named("get"))
      .Post("/thing", named("post"))
      .Put("/thing", named("put"))
      .Patch("/thing", named("patch"))
      .Delete("/thing", named("delete"))
      .Route("OPTIONS", "/thing", named("options"));
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  EXPECT_EQ(Ok(client.Send("GET", "/thing")).body, "get:GET:");
  EXPECT_EQ(Ok(client.Send("POST", "/thing", "a", "text/plain")).body, "post:POST:a");
  EXPECT_EQ(Ok(client.Send("PUT", "/thing", "b", "text/plain")).body, "put:PUT:b");
  EXPECT_EQ(Ok(client.Send("PATCH", "/thing", "c", "text/plain")).body, "patch:PATCH:c");
  EXPECT_EQ(Ok(client.Send("DELETE", "/thing")).body, "delete:DELETE:");
  EXPECT_EQ(Ok(client.Send("OPTIONS", "/thing")).body, "options:OPTIONS:");
  // A method with no route for the path is not served by another method's route.
  EXPECT_GE(Ok(client.Send("PUT", "/other", "x", "text/plain")).status, 400);
}

TEST_F(ServerTest, PassesRegexCapturesInMatches) {
  server_->Get(R"(/jobs/(\d+)/logs/(\w+))", [](const httplib::Request& req,
                                               httplib::Response& res) {
    ASSERT_EQ(req.matches.size(), 3u);
    res.set_content(req.matches[0].str() + "|" + req.matches[1].str() + "|" + req.matches[2].str(),
                    "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  EXPECT_EQ(Ok(client.Send("GET", "/jobs/42/logs/stdout")).body, "/jobs/42/logs/stdout|42|stdout");
  // The pattern must match the whole path.
  EXPECT_EQ(Ok(client.Send("GET", "/jobs/42/logs/stdout/more")).status, 404);
  EXPECT_EQ(Ok(client.Send("GET", "/v1/jobs/42/logs/stdout")).status, 404);
  EXPECT_EQ(Ok(client.Send("GET", "/jobs/x/logs/stdout")).status, 404);
}

TEST_F(ServerTest, UsesTheFirstRegisteredRouteThatMatches) {
  server_->Get("/a/.*", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("wide", "text/plain");
  });
  server_->Get("/a/b", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("narrow", "text/plain");
  });
  server_->Get("/c/d", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("narrow", "text/plain");
  });
  server_->Get("/c/.*", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("wide", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  EXPECT_EQ(Ok(client.Send("GET", "/a/b")).body, "wide");
  EXPECT_EQ(Ok(client.Send("GET", "/c/d")).body, "narrow");
  EXPECT_EQ(Ok(client.Send("GET", "/c/e")).body, "wide");
}

TEST_F(ServerTest, PercentDecodesThePath) {
  server_->Get("/files/(.+)", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.path + "|" + req.matches[1].str(), "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  EXPECT_EQ(Ok(client.Send("GET", "/files/a%20b")).body, "/files/a b|a b");
  // '+' is a space only in a query, not in a path.
  EXPECT_EQ(Ok(client.Send("GET", "/files/a+b%2Bc")).body, "/files/a+b+c|a+b+c");
  EXPECT_EQ(Ok(client.Send("GET", "/files/%C3%BC")).body, "/files/\xC3\xBC|\xC3\xBC");
  // The query is not part of the path.
  EXPECT_EQ(Ok(client.Send("GET", "/files/x?y=1")).body, "/files/x|x");
}

TEST_F(ServerTest, DecodesQueryParams) {
  server_->Get("/q", [](const httplib::Request& req, httplib::Response& res) {
    // All of them, in order (cpp-httplib's get_param_value(key, i) runs past the end
    // for a missing i).
    std::string out;
    for (const auto& [key, value] : req.params) out += "[" + key + "=" + value + "]";
    res.set_content(out, "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  // cpp-httplib decodes '+' in a query as a space (form encoding); handlers rely on it.
  EXPECT_EQ(Ok(client.Send("GET", "/q?name=a%26b+c%3D&x=1&x=2&empty=&a+b=%2B&flag")).body,
            "[a b=+][empty=][flag=][name=a&b c=][x=1][x=2]");
  EXPECT_EQ(Ok(client.Send("GET", "/q")).body, "");
  EXPECT_EQ(Ok(client.Send("GET", "/q?")).body, "");
}

TEST_F(ServerTest, AnswersUnknownPathsWith404ThroughTheErrorHandler) {
  server_->Get("/forbidden",
               [](const httplib::Request&, httplib::Response& res) { res.status = 403; });
  server_->SetErrorHandler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) {
      res.set_content("error " + std::to_string(res.status) + " at " + req.path, "text/plain");
    }
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  Response missing = Ok(client.Send("GET", "/nowhere"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body, "error 404 at /nowhere");
  EXPECT_EQ(missing.Header("Content-Length"), std::to_string(missing.body.size()));
  // A handler's own error status goes through it too.
  Response forbidden = Ok(client.Send("GET", "/forbidden"));
  EXPECT_EQ(forbidden.status, 403);
  EXPECT_EQ(forbidden.body, "error 403 at /forbidden");
  // The connection survives error answers.
  EXPECT_EQ(Ok(client.Send("GET", "/nowhere")).status, 404);
}

TEST_F(ServerTest, AnswersUnknownPathsWith404WithoutAnErrorHandler) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  EXPECT_EQ(Ok(client.Send("GET", "/nowhere")).status, 404);
  EXPECT_EQ(Ok(client.Send("POST", "/nowhere", "x", "text/plain")).status, 404);
}

TEST_F(ServerTest, SendsAThrowingHandlerToTheExceptionHandler) {
  server_->Get("/boom", [](const httplib::Request&, httplib::Response&) {
    throw std::runtime_error("boom");
  });
  server_->Get("/int", [](const httplib::Request&, httplib::Response&) { throw 42; });
  server_->SetExceptionHandler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "not an std::exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content(req.path + ": " + what, "text/plain");
      });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  Response boom = Ok(client.Send("GET", "/boom"));
  EXPECT_EQ(boom.status, 500);
  EXPECT_EQ(boom.body, "/boom: boom");
  Response other = Ok(client.Send("GET", "/int"));
  EXPECT_EQ(other.status, 500);
  EXPECT_EQ(other.body, "/int: not an std::exception");
}

TEST_F(ServerTest, AnswersABare500WhenAHandlerThrowsWithoutAnExceptionHandler) {
  server_->Get("/boom", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("half-made answer", "text/plain");
    throw std::runtime_error("boom");
  });
  server_->Get("/int", [](const httplib::Request&, httplib::Response&) { throw 42; });
  server_->Get("/ok", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("fine", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  Response boom = Ok(client.Send("GET", "/boom"));
  EXPECT_EQ(boom.status, 500);
  // Nothing of what the handler made before throwing is sent.
  EXPECT_EQ(boom.body, "");
  EXPECT_EQ(Ok(client.Send("GET", "/int")).status, 500);
  // The server (and its worker) carry on.
  EXPECT_EQ(Ok(client.Send("GET", "/ok")).body, "fine");
}

// Answers.

TEST_F(ServerTest, AnswersWith200AndTheHandlersHeadersWhenNoStatusIsSet) {
  server_->Get("/plain", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("X-Custom", "yes");
    res.set_header("Cache-Control", "no-store");
    res.set_content("hello, world", "text/plain");
  });
  server_->Get("/nothing", [](const httplib::Request&, httplib::Response&) {});
  server_->Post("/created", [](const httplib::Request&, httplib::Response& res) {
    res.status = 201;
    res.set_content("{}", "application/json");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConnection conn(port_);
  ASSERT_TRUE(conn.Send("GET /plain HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawResponse plain = conn.Read();
  EXPECT_THAT(plain.status_line, StartsWith("HTTP/1.1 200")) << plain.raw;
  EXPECT_EQ(plain.Header("X-Custom"), "yes") << plain.raw;
  EXPECT_EQ(plain.Header("Cache-Control"), "no-store") << plain.raw;
  EXPECT_EQ(plain.Header("Content-Type"), "text/plain") << plain.raw;
  EXPECT_EQ(plain.Header("Content-Length"), "12") << plain.raw;
  EXPECT_EQ(plain.body, "hello, world");

  ASSERT_TRUE(conn.Send("GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawResponse nothing = conn.Read();
  EXPECT_EQ(nothing.status, 200) << nothing.raw;
  EXPECT_EQ(nothing.Header("Content-Length"), "0") << nothing.raw;
  EXPECT_EQ(nothing.body, "");

  ASSERT_TRUE(conn.Send("POST /created HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
  RawResponse created = conn.Read();
  EXPECT_THAT(created.status_line, StartsWith("HTTP/1.1 201")) << created.raw;
  EXPECT_EQ(created.Header("Content-Length"), "2") << created.raw;
  EXPECT_EQ(created.body, "{}");
  // Nothing follows the answers.
  EXPECT_EQ(conn.buffered(), "");
}

TEST_F(ServerTest, PassesRequestHeadersAndTheRemoteAddress) {
  server_->Get("/who", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.get_header_value("x-token") + "|" +
                        std::to_string(req.get_header_value_count("X-Many")) + "|" +
                        req.remote_addr + "|" + (req.remote_port > 0 ? "port" : "no port"),
                    "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConnection conn(port_);
  ASSERT_TRUE(conn.Send(
      "GET /who HTTP/1.1\r\nHost: x\r\nX-Token:  abc \r\nX-Many: 1\r\nx-many: 2\r\n\r\n"));
  RawResponse r = conn.Read();
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body, "abc|2|127.0.0.1|port");
}

TEST_F(ServerTest, WritesLargeAnswers) {
  const std::string big(5 << 20, 'z');
  server_->Get("/big", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(big, "application/octet-stream");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  Response r = Ok(client.Send("GET", "/big"));
  EXPECT_EQ(r.Header("Content-Length"), std::to_string(big.size()));
  EXPECT_TRUE(r.body == big) << r.body.size() << " bytes";
}

// Connections.

TEST_F(ServerTest, KeepsAConnectionAliveAcrossRequests) {
  server_->Get("/port", [](const httplib::Request& req, httplib::Response& res) {
    res.set_header("X-Port", std::to_string(req.remote_port));
    res.set_content("ok", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  const std::string first = Ok(client.Send("GET", "/port")).Header("X-Port");
  EXPECT_NE(first, "");
  for (int i = 0; i < 5; ++i) {
    // The same client port: one connection for all.
    EXPECT_EQ(Ok(client.Send("GET", "/port")).Header("X-Port"), first);
  }
  EXPECT_EQ(server_->connections(), 1u);
}

TEST_F(ServerTest, ClosesTheConnectionWhenTheClientAsksTo) {
  server_->Get("/hello", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("hello", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body, "hello");
    std::string rest;
    EXPECT_TRUE(conn.WaitForClose(5s, &rest)) << "the server kept the connection open";
    EXPECT_EQ(rest, "");
  }
  {
    // HTTP/1.0 without keep-alive: one request per connection as well.
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send("GET /hello HTTP/1.0\r\n\r\n"));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body, "hello");
    EXPECT_TRUE(conn.WaitForClose()) << "the server kept an HTTP/1.0 connection open";
  }
  EXPECT_TRUE(WaitFor([&] { return server_->connections() == 0; }))
      << server_->connections() << " connections";
}

TEST_F(ServerTest, AnswersPipelinedRequestsInOrder) {
  server_->Get("/n/(\\d+)", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content("get " + req.matches[1].str(), "text/plain");
  });
  server_->Post("/n/(\\d+)", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content("post " + req.matches[1].str() + " " + req.body, "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConnection conn(port_);
  // Three requests in one write: the server must not lose what it read past the first.
  ASSERT_TRUE(
      conn.Send("GET /n/1 HTTP/1.1\r\nHost: x\r\n\r\n"
                "POST /n/2 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"
                "GET /n/3 HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawResponse first = conn.Read();
  RawResponse second = conn.Read();
  RawResponse third = conn.Read();
  EXPECT_EQ(first.body, "get 1") << first.raw;
  EXPECT_EQ(second.body, "post 2 body") << second.raw;
  EXPECT_EQ(third.body, "get 3") << third.raw;
  // And the connection is still good for more.
  ASSERT_TRUE(conn.Send("GET /n/4 HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(conn.Read().body, "get 4");
}

// Request bodies.

TEST_F(ServerTest, EchoesAContentLengthBody) {
  server_->Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.body, req.get_header_value("Content-Type"));
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  Response small = Ok(client.Send("POST", "/echo", "name: x\n", "application/yaml"));
  EXPECT_EQ(small.body, "name: x\n");
  EXPECT_EQ(small.Header("Content-Type"), "application/yaml");
  // Large enough to arrive in many reads.
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  Response r = Ok(client.Send("POST", "/echo", big, "application/octet-stream"));
  EXPECT_TRUE(r.body == big) << r.body.size() << " bytes";
  EXPECT_EQ(Ok(client.Send("POST", "/echo", "", "text/plain")).body, "");
}

TEST_F(ServerTest, DecodesAChunkedRequestBody) {
  server_->Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.body, "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConnection conn(port_);
  ASSERT_TRUE(
      conn.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\nhello\r\n"
                "1a\r\n, abcdefghijklmnopqrstuvwx\r\n"
                "0\r\n\r\n"));
  RawResponse r = conn.Read();
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body, "hello, abcdefghijklmnopqrstuvwx");
  // Sent in pieces, with a chunk extension and a trailer, on the same connection.
  ASSERT_TRUE(conn.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3"));
  ASSERT_TRUE(conn.Send(";name=value\r\nabc\r"));
  ASSERT_TRUE(conn.Send("\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"));
  RawResponse pieces = conn.Read();
  EXPECT_EQ(pieces.status, 200) << pieces.raw;
  EXPECT_EQ(pieces.body, "abc0123456789");
  // An empty chunked body.
  ASSERT_TRUE(
      conn.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                "0\r\n\r\n"));
  RawResponse empty = conn.Read();
  EXPECT_EQ(empty.status, 200) << empty.raw;
  EXPECT_EQ(empty.body, "");
}

TEST_F(ServerTest, Sends100ContinueBeforeTheBodyIsSent) {
  server_->Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content("got " + req.body, "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConnection conn(port_);
  ASSERT_TRUE(conn.Send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
  // The body is held back until the server asks for it.
  const std::string interim = conn.ReadHead();
  EXPECT_THAT(interim, StartsWith("HTTP/1.1 100 Continue\r\n")) << interim;
  ASSERT_TRUE(conn.Send("hello"));
  RawResponse r = conn.Read();
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body, "got hello");
}

TEST_F(ServerTest, RefusesABodyOverTheLimitWith413WithoutRunningTheHandler) {
  std::atomic<int> calls{0};
  server_->Post("/echo", [&](const httplib::Request& req, httplib::Response& res) {
    ++calls;
    res.set_content(std::to_string(req.body.size()), "text/plain");
  });
  server_->SetErrorHandler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 413) res.set_content("too big", "text/plain");
  });
  server_->SetMaxBodyBytes(1024);
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    // At the limit: served.
    Client client(Url(), {});
    EXPECT_EQ(Ok(client.Send("POST", "/echo", std::string(1024, 'a'), "text/plain")).body, "1024");
    EXPECT_EQ(calls.load(), 1);
  }
  {
    // Over it: refused from the headers alone, the body never sent.
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n"));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 413) << r.raw;
    EXPECT_EQ(r.body, "too big");
  }
  {
    // With Expect: the refusal comes instead of 100 Continue.
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send(
        "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n"));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 413) << r.raw;
  }
  {
    // Chunked: the size is known only while reading.
    RawConnection conn(port_);
    const std::string chunk(800, 'b');
    ASSERT_TRUE(
        conn.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "320\r\n" +
                  chunk + "\r\n320\r\n" + chunk + "\r\n0\r\n\r\n"));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 413) << r.raw;
  }
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(ServerTest, RefusesMalformedRequestsWith400) {
  std::atomic<int> calls{0};
  server_->Get("/x", [&](const httplib::Request&, httplib::Response&) { ++calls; });
  server_->Post("/x", [&](const httplib::Request&, httplib::Response&) { ++calls; });
  server_->SetErrorHandler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 400) res.set_content("bad request", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  for (const char* request : {
           "this is not http\r\n\r\n",
           "GET /x\r\nHost: x\r\n\r\n",
           "GET /x HTTP/1.1 extra\r\nHost: x\r\n\r\n",
           "GET /x FTP/1.1\r\nHost: x\r\n\r\n",
           "GET /x HTTP/1.1\r\nno colon here\r\n\r\n",
           "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
           "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
           "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
       }) {
    SCOPED_TRACE(request);
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send(request));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_EQ(r.body, "bad request") << r.raw;
    // After a request it cannot read, the server cannot find the next one: it closes.
    EXPECT_TRUE(conn.WaitForClose());
  }
  EXPECT_EQ(calls.load(), 0);
}

TEST_F(ServerTest, RefusesAHeaderSectionOverTheLimitWith431) {
  std::atomic<int> calls{0};
  server_ = std::make_unique<Server>(ServerOptions{.max_header_bytes = 1024});
  server_->Get("/x", [&](const httplib::Request&, httplib::Response& res) {
    ++calls;
    res.set_content("ok", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_EQ(conn.Read().body, "ok");
  }
  {
    RawConnection conn(port_);
    ASSERT_TRUE(
        conn.Send("GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n"));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 431) << r.raw;
  }
  {
    // Headers that never end are refused once past the limit, not waited for.
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send("GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(3000, 'a')));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 431) << r.raw;
  }
  EXPECT_EQ(calls.load(), 1);
}

// Hardening: what the server refuses before any handler runs (server.h), each refusal
// answered with a status and a body saying why, then the connection closed.

// A server whose routes count their calls; Refused sends `request` on a new connection
// and returns the answer, checking that the connection is closed after it.
class RefusalTest : public ServerTest {
 protected:
  void StartCounting() {
    for (const char* method : {"GET", "POST", "PUT"}) {
      server_->Route(method, "/x", [&](const httplib::Request& req, httplib::Response& res) {
        ++calls_;
        res.set_content("body=" + req.body, "text/plain");
      });
    }
    ASSERT_NO_FATAL_FAILURE(Start());
  }
  RawResponse Refused(const std::string& request) {
    RawConnection conn(port_);
    EXPECT_TRUE(conn.Send(request));
    RawResponse r = conn.Read();
    std::string rest;
    EXPECT_TRUE(conn.WaitForClose(5s, &rest)) << "the connection stayed open after " << r.raw;
    EXPECT_EQ(rest, "") << "more after the refusal";
    EXPECT_EQ(r.Header("Connection"), "close") << r.raw;
    EXPECT_THAT(r.Header("Content-Type"), StartsWith("text/plain")) << r.raw;
    return r;
  }
  // Sends `request` and returns the answer's body, expecting it served.
  std::string Served(const std::string& request) {
    RawConnection conn(port_);
    EXPECT_TRUE(conn.Send(request));
    RawResponse r = conn.Read();
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body;
  }

  std::atomic<int> calls_{0};
};

TEST_F(RefusalTest, RefusesTransferEncodingsOtherThanChunked) {
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  struct Case {
    std::string headers;
    int status;
    std::string why;
  };
  const std::vector<Case> cases = {
      // The body's length cannot be known: 400 (RFC 9112 section 6.3).
      {"Transfer-Encoding: gzip\r\n", 400, "must end with chunked"},
      {"Transfer-Encoding: identity\r\n", 400, "must end with chunked"},
      {"Transfer-Encoding: deflate\r\n", 400, "must end with chunked"},
      {"Transfer-Encoding: chunked, gzip\r\n", 400, "must end with chunked"},
      {"Transfer-Encoding: chunked, identity\r\n", 400, "must end with chunked"},
      {"Transfer-Encoding: chunked, chunked\r\n", 400, "given once"},
      {"Transfer-Encoding: x-unknown\r\n", 400, "must end with chunked"},
      {"Transfer-Encoding: chunked;ext=1\r\n", 400, "must end with chunked"},
      {"Transfer-Encoding: \r\n", 400, "must end with chunked"},
      {"Transfer-Encoding: ,\r\n", 400, "must end with chunked"},
      // Two fields, even ones that would combine into a valid list.
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400, "given 2 times"},
      {"Transfer-Encoding: gzip\r\ntransfer-encoding: chunked\r\n", 400, "given 2 times"},
      // chunked last, with codings before it that the server does not implement: 501.
      {"Transfer-Encoding: gzip, chunked\r\n", 501, "\"gzip\" is not implemented"},
      {"Transfer-Encoding: x-unknown, chunked\r\n", 501, "\"x-unknown\" is not implemented"},
      {"Transfer-Encoding: identity, chunked\r\n", 501, "\"identity\" is not implemented"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.headers);
    RawResponse r =
        Refused("POST /x HTTP/1.1\r\nHost: x\r\n" + c.headers + "\r\n5\r\nhello\r\n0\r\n\r\n");
    EXPECT_EQ(r.status, c.status) << r.raw;
    EXPECT_THAT(r.body, HasSubstr("Transfer-Encoding")) << r.raw;
    EXPECT_THAT(r.body, HasSubstr(c.why)) << r.raw;
  }
  // Transfer-Encoding has no meaning in HTTP/1.0 (RFC 9112 section 6.1).
  RawResponse old =
      Refused("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  EXPECT_EQ(old.status, 400) << old.raw;
  EXPECT_THAT(old.body, HasSubstr("HTTP/1.0")) << old.raw;
  EXPECT_EQ(calls_.load(), 0);
  // chunked, in any case and with spaces around it, is served as before.
  EXPECT_EQ(Served("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:  ChUnKeD \r\n\r\n"
                   "5\r\nhello\r\n0\r\n\r\n"),
            "body=hello");
}

TEST_F(RefusalTest, RefusesTransferEncodingWithContentLengthAndHandlesNothingSmuggled) {
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  // Read by Content-Length, the body would end after "0\r\n\r\n" and a second request
  // (to /x) would follow; read as chunked, the second request is body. Either reading
  // is an attack on some server in front: the request is refused and nothing after it
  // is handled.
  const std::string smuggled = "GET /x HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const std::string& headers :
       {std::string("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
        std::string("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"),
        std::string("Transfer-Encoding: chunked\r\nContent-Length: 0\r\n")}) {
    SCOPED_TRACE(headers);
    RawResponse r =
        Refused("POST /x HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n0\r\n\r\n" + smuggled);
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_THAT(r.body, HasSubstr("Transfer-Encoding and Content-Length are both given"));
  }
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(RefusalTest, RefusesDuplicateOrMalformedContentLength) {
  server_->SetMaxBodyBytes(1 << 20);
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  struct Case {
    std::string headers;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"Content-Length: 5\r\nContent-Length: 5\r\n", "given 2 times"},
      {"Content-Length: 5\r\nContent-Length: 6\r\n", "given 2 times"},
      {"Content-Length: 5\r\ncontent-length: 5\r\nContent-Length: 5\r\n", "given 3 times"},
      {"Content-Length: 5, 5\r\n", "not a number of bytes"},
      {"Content-Length: 5,5\r\n", "not a number of bytes"},
      {"Content-Length: +5\r\n", "not a number of bytes"},
      {"Content-Length: -5\r\n", "not a number of bytes"},
      {"Content-Length: 5 5\r\n", "not a number of bytes"},
      {"Content-Length: 0x5\r\n", "not a number of bytes"},
      {"Content-Length: 5a\r\n", "not a number of bytes"},
      {"Content-Length: 5.0\r\n", "not a number of bytes"},
      {"Content-Length: \r\n", "not a number of bytes"},
      {"Content-Length: 18446744073709551616\r\n", "does not fit in 64 bits"},
      {"Content-Length: 99999999999999999999999999\r\n", "does not fit in 64 bits"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.headers);
    RawResponse r = Refused("POST /x HTTP/1.1\r\nHost: x\r\n" + c.headers + "\r\nhello");
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_THAT(r.body, HasSubstr("Content-Length")) << r.raw;
    EXPECT_THAT(r.body, HasSubstr(c.why)) << r.raw;
  }
  // The largest 64-bit number is a length, only too large.
  RawResponse huge =
      Refused("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551615\r\n\r\n");
  EXPECT_EQ(huge.status, 413) << huge.raw;
  EXPECT_THAT(huge.body, HasSubstr("the limit is 1048576 bytes"));
  EXPECT_EQ(calls_.load(), 0);
  // Leading zeros and spaces around the value are a valid length.
  EXPECT_EQ(Served("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length:  0005 \r\n\r\nhello"),
            "body=hello");
}

TEST_F(RefusalTest, RefusesARequestLineOverTheLimitWith414) {
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  // "GET " + target + " HTTP/1.1" at exactly the limit is served.
  const size_t fixed = std::string_view("GET  HTTP/1.1").size();
  const std::string at_limit = "/x?q=" + std::string(kMaxRequestLineBytes - fixed - 5, 'a');
  EXPECT_EQ(Served("GET " + at_limit + " HTTP/1.1\r\nHost: x\r\n\r\n"), "body=");
  EXPECT_EQ(calls_.load(), 1);
  RawResponse over = Refused("GET " + at_limit + "a HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(over.status, 414) << over.raw;
  EXPECT_THAT(over.status_line, HasSubstr("URI Too Long"));
  EXPECT_THAT(over.body, HasSubstr("request line longer than 8192 bytes"));
  // A request line that never ends is refused once past the limit, not waited for.
  RawResponse endless = Refused("GET /x?q=" + std::string(3 * kMaxRequestLineBytes, 'a'));
  EXPECT_EQ(endless.status, 414) << endless.raw;
  EXPECT_EQ(calls_.load(), 1);
}

TEST_F(RefusalTest, RefusesAHeaderLineOverTheLimitWith431) {
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  const std::string name = "X-Big: ";
  const std::string at_limit = name + std::string(kMaxHeaderLineBytes - name.size(), 'a');
  EXPECT_EQ(Served("GET /x HTTP/1.1\r\nHost: x\r\n" + at_limit + "\r\n\r\n"), "body=");
  RawResponse over = Refused("GET /x HTTP/1.1\r\nHost: x\r\n" + at_limit + "a\r\n\r\n");
  EXPECT_EQ(over.status, 431) << over.raw;
  EXPECT_THAT(over.body, HasSubstr("header field line longer than 8192 bytes"));
  RawResponse endless =
      Refused("GET /x HTTP/1.1\r\nHost: x\r\n" + name + std::string(kMaxHeaderLineBytes, 'a'));
  EXPECT_EQ(endless.status, 431) << endless.raw;
  EXPECT_EQ(calls_.load(), 1);
}

TEST_F(RefusalTest, RefusesAHeadOverTheLimitWith431) {
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  // Lines within their limit that add up to more than the head's.
  std::string fields;
  for (int i = 0; fields.size() <= kMaxHeaderBytes; ++i) {
    fields += "X-" + std::to_string(i) + ": " + std::string(8000, 'a') + "\r\n";
  }
  RawResponse r = Refused("GET /x HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n");
  EXPECT_EQ(r.status, 431) << r.raw;
  EXPECT_THAT(r.body, HasSubstr("longer than 65536 bytes"));
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(RefusalTest, RefusesMoreHeaderFieldsThanTheLimitWith431) {
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  std::string fields;
  for (size_t i = 1; i < kMaxHeaderFields; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";
  // Host and 99 more: at the limit.
  EXPECT_EQ(Served("GET /x HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n"), "body=");
  RawResponse r = Refused("GET /x HTTP/1.1\r\nHost: x\r\n" + fields + "X-Last: v\r\n\r\n");
  EXPECT_EQ(r.status, 431) << r.raw;
  EXPECT_THAT(r.body, HasSubstr("more than 100 header fields"));
  EXPECT_EQ(calls_.load(), 1);
}

TEST_F(RefusalTest, RefusesControlCharactersAndFoldedLinesWith400) {
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  struct Case {
    std::string request;
    std::string why;
  };
  const std::vector<Case> cases = {
      {std::string("GET /x HTTP/1.1\r\nX-A: a\rb\r\n\r\n"), "control character"},
      {std::string("GET /x HTTP/1.1\r\nX-A: a\nTransfer-Encoding: chunked\r\n\r\n"),
       "control character"},
      {[] {
         const char with_nul[] = "GET /x HTTP/1.1\r\nX-A: a\0b\r\n\r\n";
         return std::string(with_nul, sizeof with_nul - 1);
       }(),
       "control character"},
      {std::string("GET /x\x01 HTTP/1.1\r\nHost: x\r\n\r\n"), "control character"},
      {std::string("GET /x HTTP/1.1\nHost: x\r\n\r\n"), "control character"},
      {std::string("GET /x HTTP/1.1\r\nX-A: a\r\n  folded\r\n\r\n"), "line folding"},
      {std::string("GET /x HTTP/1.1\r\nX-A : a\r\n\r\n"), "no space before the colon"},
      {std::string("GET /x HTTP/1.1\r\nX(A): a\r\n\r\n"), "must be NAME: VALUE"},
      {std::string("GET /x HTTP/1.1\r\n: a\r\n\r\n"), "must be NAME: VALUE"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request);
    RawResponse r = Refused(c.request);
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_THAT(r.body, HasSubstr(c.why)) << r.raw;
  }
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(RefusalTest, GivesTheErrorHandlerTheReasonToKeepOrReplace) {
  std::vector<std::string> seen;
  std::mutex mu;
  server_->SetErrorHandler([&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mu);
    seen.push_back(std::to_string(res.status) + " " + res.get_header_value("Content-Type") + " " +
                   res.body);
    if (res.status == 501) res.set_content("{\"error\": \"not implemented\"}", "application/json");
  });
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  RawResponse kept = Refused("POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n");
  EXPECT_EQ(kept.status, 400);
  EXPECT_EQ(kept.body, "Content-Length is given 2 times; give it once\n");
  RawConnection conn(port_);
  ASSERT_TRUE(conn.Send("POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"));
  RawResponse replaced = conn.Read();
  EXPECT_EQ(replaced.status, 501) << replaced.raw;
  EXPECT_EQ(replaced.Header("Content-Type"), "application/json");
  EXPECT_EQ(replaced.body, "{\"error\": \"not implemented\"}");
  EXPECT_TRUE(conn.WaitForClose());
  std::lock_guard lock(mu);
  EXPECT_THAT(seen, ::testing::ElementsAre(
                        "400 text/plain Content-Length is given 2 times; give it once\n",
                        "501 text/plain Transfer-Encoding \"gzip, chunked\": coding \"gzip\" is "
                        "not implemented; only chunked is\n"));
}

TEST_F(RefusalTest, KeepsServingAConnectionUntilItsRefusedRequest) {
  ASSERT_NO_FATAL_FAILURE(StartCounting());
  RawConnection conn(port_);
  // Two good requests, a refused one, and one after it that is never read.
  ASSERT_TRUE(
      conn.Send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
                "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                "2\r\ncd\r\n0\r\n\r\n"
                "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n"
                "\r\ne"
                "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(conn.Read().body, "body=ab");
  EXPECT_EQ(conn.Read().body, "body=cd");
  RawResponse refused = conn.Read();
  EXPECT_EQ(refused.status, 400) << refused.raw;
  std::string rest;
  EXPECT_TRUE(conn.WaitForClose(5s, &rest));
  EXPECT_EQ(rest, "");
  EXPECT_EQ(calls_.load(), 2);
}

// HEAD and content providers.

constexpr size_t kProvidedSize = 300'000;
char ProvidedByte(size_t i) { return static_cast<char>('a' + i % 23); }

void AddProviderRoutes(Server& server) {
  server.Get("/doc", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("0123456789", "text/plain");
  });
  server.Get("/sized", [](const httplib::Request&, httplib::Response& res) {
    res.set_content_provider(kProvidedSize, "application/octet-stream",
                             [](size_t offset, size_t length, httplib::DataSink& sink) {
                               // Fewer bytes than asked for: the server asks again.
                               std::string part(std::min<size_t>(length, 7001), '\0');
                               for (size_t i = 0; i < part.size(); ++i) {
                                 part[i] = ProvidedByte(offset + i);
                               }
                               return sink.write(part.data(), part.size());
                             });
  });
  server.Get("/chunked", [](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
      if (offset >= 3 * 70000) {
        sink.done();
        return true;
      }
      const std::string part(70000, static_cast<char>('a' + offset / 70000));
      return sink.write(part.data(), part.size());
    });
  });
}

TEST_F(ServerTest, AnswersHeadFromTheGetRouteWithoutTheBody) {
  AddProviderRoutes(*server_);
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConnection conn(port_);
  ASSERT_TRUE(conn.Send("HEAD /doc HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawResponse head = conn.Read(/*head=*/true);
  EXPECT_EQ(head.status, 200) << head.raw;
  EXPECT_EQ(head.Header("Content-Length"), "10") << head.raw;
  EXPECT_EQ(head.Header("Content-Type"), "text/plain") << head.raw;
  // Had a body followed, it would be read here as the start of the next answer.
  ASSERT_TRUE(conn.Send("GET /doc HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawResponse get = conn.Read();
  EXPECT_EQ(get.status, 200) << get.raw;
  EXPECT_EQ(get.body, "0123456789");

  ASSERT_TRUE(conn.Send("HEAD /sized HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawResponse sized = conn.Read(/*head=*/true);
  EXPECT_EQ(sized.status, 200) << sized.raw;
  EXPECT_EQ(sized.Header("Content-Length"), std::to_string(kProvidedSize)) << sized.raw;
  ASSERT_TRUE(conn.Send("GET /doc HTTP/1.1\r\nHost: x\r\n\r\n"));
  RawResponse after = conn.Read();
  EXPECT_EQ(after.status, 200) << after.raw.substr(0, 200);
  EXPECT_EQ(after.body, "0123456789");

  // No GET route: no HEAD either.
  ASSERT_TRUE(conn.Send("HEAD /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(conn.Read(/*head=*/true).status, 404);
}

TEST_F(ServerTest, SendsWhatContentProvidersWrite) {
  AddProviderRoutes(*server_);
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  Response sized = Ok(client.Send("GET", "/sized"));
  EXPECT_EQ(sized.status, 200);
  EXPECT_EQ(sized.Header("Content-Length"), std::to_string(kProvidedSize));
  ASSERT_EQ(sized.body.size(), kProvidedSize);
  size_t wrong = 0;
  for (size_t i = 0; i < kProvidedSize; ++i) wrong += sized.body[i] != ProvidedByte(i);
  EXPECT_EQ(wrong, 0u);

  Response chunked = Ok(client.Send("GET", "/chunked"));
  EXPECT_EQ(chunked.status, 200);
  EXPECT_EQ(Lower(chunked.Header("Transfer-Encoding")), "chunked");
  ASSERT_EQ(chunked.body.size(), 3u * 70000);
  EXPECT_EQ(chunked.body.substr(0, 3), "aaa");
  EXPECT_EQ(chunked.body.substr(70000, 3), "bbb");
  EXPECT_EQ(chunked.body.substr(140000, 3), "ccc");
  // The connection stays usable after both.
  EXPECT_EQ(Ok(client.Send("GET", "/doc")).body, "0123456789");

  // And cpp-httplib's client reads them alike.
  httplib::Client other(Url());
  auto res = other.Get("/chunked");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->body.size(), 3u * 70000);
}

// Threads and connections.

TEST_F(ServerTest, AnswersOtherRequestsWhileHandlersBlock) {
  constexpr int kBlocked = 50;
  AddBlockAndFastRoutes();
  ASSERT_NO_FATAL_FAILURE(Start());
  std::vector<std::variant<Response, Error>> answers(kBlocked);
  for (int i = 0; i < kBlocked; ++i) {
    clients_.emplace_back([&, i] {
      ClientOptions options;
      options.read_timeout_ms = 20'000;
      Client client(Url(), options);
      answers[i] = client.Send("GET", "/block");
    });
  }
  // EXPECT, not ASSERT, here and below: the client threads write to locals until joined.
  EXPECT_TRUE(gate_.WaitForEntered(kBlocked)) << "not all handlers ran at once";
  {
    Client client(Url(), {});
    EXPECT_EQ(Ok(client.Send("GET", "/fast")).body, "fast");
  }
  gate_.Release();
  for (auto& t : clients_) t.join();
  clients_.clear();
  for (int i = 0; i < kBlocked; ++i) {
    Response r = Ok(std::move(answers[i]));
    EXPECT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.body, "released") << i;
  }
}

TEST_F(ServerTest, QueuesRequestsBeyondMaxThreads) {
  server_ = std::make_unique<Server>(ServerOptions{.max_threads = 2});
  std::atomic<int> answered{0};
  AddBlockAndFastRoutes();
  ASSERT_NO_FATAL_FAILURE(Start());
  for (int i = 0; i < 4; ++i) {
    clients_.emplace_back([&] {
      ClientOptions options;
      options.read_timeout_ms = 20'000;
      Client client(Url(), options);
      if (Ok(client.Send("GET", "/block")).body == "released") ++answered;
    });
  }
  EXPECT_TRUE(gate_.WaitForEntered(2));
  // Four requests, two threads: the others wait for one.
  EXPECT_TRUE(WaitFor([&] { return server_->connections() == 4; }));
  EXPECT_LE(server_->threads(), 2u);
  gate_.Release();
  for (auto& t : clients_) t.join();
  clients_.clear();
  EXPECT_EQ(answered.load(), 4);
  EXPECT_LE(server_->threads(), 2u);
}

TEST_F(ServerTest, EndsWorkersIdleAfterABurstDownToMinThreads) {
  constexpr int kBurst = 20;
  server_ = std::make_unique<Server>(
      ServerOptions{.min_threads = 2, .worker_idle_exit = std::chrono::milliseconds(100)});
  AddBlockAndFastRoutes();
  ASSERT_NO_FATAL_FAILURE(Start());
  std::atomic<int> answered{0};
  for (int i = 0; i < kBurst; ++i) {
    clients_.emplace_back([&] {
      ClientOptions options;
      options.read_timeout_ms = 20'000;
      if (Ok(Client(Url(), options).Send("GET", "/block")).body == "released") ++answered;
    });
  }
  EXPECT_TRUE(gate_.WaitForEntered(kBurst));
  EXPECT_GE(server_->threads(), static_cast<size_t>(kBurst));
  gate_.Release();
  for (auto& t : clients_) t.join();
  clients_.clear();
  EXPECT_EQ(answered.load(), kBurst);
  EXPECT_TRUE(WaitFor([&] { return server_->threads() <= 2; }))
      << server_->threads() << " threads left";
  // Those left (and new ones) serve on.
  EXPECT_EQ(Ok(Client(Url(), {}).Send("GET", "/fast")).body, "fast");
}

TEST_F(ServerTest, AnswersManyKeepAliveClientsAtOnce) {
  server_->Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.body, "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  std::atomic<int> right{0};
  for (int c = 0; c < 8; ++c) {
    clients_.emplace_back([&, c] {
      Client client(Url(), {});
      for (int i = 0; i < 100; ++i) {
        const std::string body = std::to_string(c) + "/" + std::to_string(i);
        if (Ok(client.Send("POST", "/echo", body, "text/plain")).body == body) ++right;
      }
    });
  }
  for (auto& t : clients_) t.join();
  clients_.clear();
  EXPECT_EQ(right.load(), 800);
}

TEST_F(ServerTest, HoldsIdleConnectionsWithoutThreads) {
  constexpr size_t kIdle = 500;
  RaiseOpenFileLimit();
  server_->Get("/ping", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("pong", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (size_t i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<RawConnection>(port_));
    ASSERT_TRUE(idle.back()->ok()) << i;
  }
  ASSERT_TRUE(WaitFor([&] { return server_->connections() >= kIdle; }))
      << server_->connections() << " connections";
  {
    Client client(Url(), {});
    const auto start = Clock::now();
    EXPECT_EQ(Ok(client.Send("GET", "/ping")).body, "pong");
    EXPECT_LT(Clock::now() - start, 2s);
    EXPECT_EQ(server_->connections(), kIdle + 1);
  }
  EXPECT_LT(server_->threads(), 50u);
  idle.clear();
  EXPECT_TRUE(WaitFor([&] { return server_->connections() == 0; }))
      << server_->connections() << " connections left";
}

TEST_F(ServerTest, ClosesIdleConnectionsAfterTheIdleTimeout) {
  server_ = std::make_unique<Server>(ServerOptions{.idle_timeout = 200ms});
  server_->Get("/ping", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("pong", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    // Never a request.
    RawConnection conn(port_);
    const auto start = Clock::now();
    EXPECT_TRUE(conn.WaitForClose(3s)) << "still open";
    EXPECT_GE(Clock::now() - start, 100ms) << "closed long before the timeout";
  }
  {
    // Idle after an answer.
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_EQ(conn.Read().body, "pong");
    std::string rest;
    EXPECT_TRUE(conn.WaitForClose(3s, &rest)) << "still open";
    EXPECT_EQ(rest, "");
  }
  {
    // http::Client notices the closed connection and opens another.
    Client client(Url(), {});
    EXPECT_EQ(Ok(client.Send("GET", "/ping")).body, "pong");
    ASSERT_TRUE(WaitFor([&] { return server_->connections() == 0; }));
    EXPECT_EQ(Ok(client.Send("GET", "/ping")).body, "pong");
  }
  EXPECT_TRUE(WaitFor([&] { return server_->connections() == 0; }));
}

TEST_F(ServerTest, GivesUpOnARequestThatStopsHalfway) {
  std::atomic<int> calls{0};
  server_ = std::make_unique<Server>(ServerOptions{.read_timeout = 200ms});
  server_->Post("/x", [&](const httplib::Request&, httplib::Response&) { ++calls; });
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send("GET /x HTTP/1.1\r\nHost"));
    EXPECT_TRUE(conn.WaitForClose(3s)) << "still open";
  }
  {
    RawConnection conn(port_);
    ASSERT_TRUE(conn.Send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
    EXPECT_TRUE(conn.WaitForClose(3s)) << "still open";
  }
  EXPECT_EQ(calls.load(), 0);
  EXPECT_TRUE(WaitFor([&] { return server_->connections() == 0; }));
}

// Serving and stopping.

TEST_F(ServerTest, FinishesARequestInFlightBeforeServeReturns) {
  server_->Get("/slow", [&](const httplib::Request&, httplib::Response& res) {
    gate_.Enter();
    res.set_content("finished", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  std::variant<Response, Error> answer;
  clients_.emplace_back([&] {
    ClientOptions options;
    options.read_timeout_ms = 20'000;
    Client client(Url(), options);
    answer = client.Send("GET", "/slow");
  });
  EXPECT_TRUE(gate_.WaitForEntered(1));
  // Stop may wait for the request; call it from elsewhere.
  std::thread stopper([&] { server_->Stop(); });
  // A moment for a wrong Serve to return early; a right one waits for the handler.
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(serve_returned_.load()) << "Serve returned with a request in flight";
  gate_.Release();
  serve_.join();
  stopper.join();
  clients_[0].join();
  clients_.clear();
  EXPECT_TRUE(served_.load());
  EXPECT_FALSE(server_->running());
  Response r = Ok(std::move(answer));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "finished");
}

TEST_F(ServerTest, StopsWithIdleConnectionsOpen) {
  server_->Get("/ping", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("pong", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConnection idle(port_);
  Client client(Url(), {});
  EXPECT_EQ(Ok(client.Send("GET", "/ping")).body, "pong");
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 2; }));
  StopServer();
  EXPECT_TRUE(served_.load());
  EXPECT_FALSE(server_->running());
  // The connections are closed with it.
  EXPECT_TRUE(idle.WaitForClose(3s));
}

// Routes answered later.

TEST_F(ServerTest, HoldsNoThreadForARequestAnsweredLater) {
  constexpr size_t kWaiting = 200;
  RaiseOpenFileLimit();
  // Idle workers end quickly: once all wait, threads left prove none is held by a wait.
  server_ = std::make_unique<Server>(
      ServerOptions{.min_threads = 2, .worker_idle_exit = std::chrono::milliseconds(200)});
  std::mutex mu;
  std::vector<std::pair<std::string, Later>> held;  // body, answer
  server_->PostLater("/wait", [&](const httplib::Request& req, Later later) {
    std::lock_guard lk(mu);
    held.emplace_back(req.body, std::move(later));
  });
  server_->Get("/fast", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("fast", "text/plain");
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  std::vector<std::string> got(kWaiting), again(kWaiting);
  for (size_t i = 0; i < kWaiting; ++i) {
    clients_.emplace_back([&, i] {
      ClientOptions options;
      options.read_timeout_ms = 20'000;
      Client client(Url(), options);
      got[i] = Ok(client.Send("POST", "/wait", "body " + std::to_string(i), "text/plain")).body;
      // The connection serves its next request after an answer given later.
      again[i] = Ok(client.Send("GET", "/fast")).body;
    });
  }
  EXPECT_TRUE(WaitFor([&] { return server_->waiting() == kWaiting; }, 20s))
      << server_->waiting() << " waiting";
  EXPECT_TRUE(WaitFor([&] { return server_->threads() <= 2; }))
      << server_->threads() << " threads for " << server_->waiting() << " waiting requests";
  {
    Client client(Url(), {});
    EXPECT_EQ(Ok(client.Send("GET", "/fast")).body, "fast");
  }
  {
    // Answered from this thread, in reverse order of arrival.
    std::lock_guard lk(mu);
    for (auto it = held.rbegin(); it != held.rend(); ++it) {
      it->second.Answer([body = it->first](httplib::Response& res) {
        res.set_content("answer to " + body, "text/plain");
      });
      EXPECT_TRUE(it->second.answered());
    }
  }
  for (auto& t : clients_) t.join();
  clients_.clear();
  for (size_t i = 0; i < kWaiting; ++i) {
    EXPECT_EQ(got[i], "answer to body " + std::to_string(i));
    EXPECT_EQ(again[i], "fast") << i;
  }
  EXPECT_EQ(server_->waiting(), 0u);
}

TEST_F(ServerTest, WritesAnAnswerGivenBeforeTheHandlerReturnsAtOnce) {
  server_->PostLater(R"(/now/(\w+))", [](const httplib::Request& req, Later later) {
    // The captures are of the request the handler is given.
    later.Answer([who = req.matches[1].str()](httplib::Response& res) {
      res.set_content("hello " + who, "text/plain");
    });
    // Only the first answer counts.
    later.Answer([](httplib::Response& res) { res.set_content("second", "text/plain"); });
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  RawConnection conn(port_);
  // Two pipelined requests on one connection, answered in order.
  ASSERT_TRUE(
      conn.Send("POST /now/ada HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                "POST /now/bob HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
  RawResponse a = conn.Read();
  RawResponse b = conn.Read();
  EXPECT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.body, "hello ada");
  EXPECT_EQ(b.body, "hello bob");
  EXPECT_EQ(server_->waiting(), 0u);
}

TEST_F(ServerTest, AnswersA500WhenALaterHandlerOrItsAnswerThrows) {
  std::mutex mu;
  std::vector<Later> held;
  server_->SetExceptionHandler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          res.set_content(std::string("caught: ") + ex.what(), "text/plain");
        }
      });
  server_->PostLater("/throws", [](const httplib::Request&, Later) {
    throw std::runtime_error("in the handler");
  });
  server_->PostLater("/answer-throws", [&](const httplib::Request&, Later later) {
    std::lock_guard lk(mu);
    held.push_back(std::move(later));
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  Client client(Url(), {});
  Response r = Ok(client.Send("POST", "/throws", "", "text/plain"));
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, "caught: in the handler");
  std::variant<Response, Error> answer;
  clients_.emplace_back(
      [&] { answer = Client(Url(), {}).Send("POST", "/answer-throws", "", "text/plain"); });
  ASSERT_TRUE(WaitFor([&] { return server_->waiting() == 1; }));
  {
    std::lock_guard lk(mu);
    held[0].Answer([](httplib::Response&) { throw std::runtime_error("in the answer"); });
  }
  clients_[0].join();
  clients_.clear();
  r = Ok(std::move(answer));
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, "caught: in the answer");
  // The server still answers on the first connection.
  EXPECT_EQ(Ok(client.Send("POST", "/throws", "", "text/plain")).status, 500);
}

TEST_F(ServerTest, AnswersRequestsStillWaitingWith503WhenItStops) {
  std::mutex mu;
  std::vector<Later> held;
  server_->PostLater("/wait", [&](const httplib::Request&, Later later) {
    std::lock_guard lk(mu);
    held.push_back(std::move(later));
  });
  ASSERT_NO_FATAL_FAILURE(Start());
  std::variant<Response, Error> answer;
  clients_.emplace_back([&] {
    ClientOptions options;
    options.read_timeout_ms = 20'000;
    answer = Client(Url(), options).Send("POST", "/wait", "", "text/plain");
  });
  ASSERT_TRUE(WaitFor([&] { return server_->waiting() == 1; }));
  StopServer();
  clients_[0].join();
  clients_.clear();
  EXPECT_TRUE(served_.load());
  EXPECT_EQ(Ok(std::move(answer)).status, 503);
  std::lock_guard lk(mu);
  EXPECT_TRUE(held[0].answered());
  // An answer after the stop does nothing.
  held[0].Answer([](httplib::Response& res) { res.status = 200; });
  EXPECT_EQ(server_->waiting(), 0u);
}

TEST(ServerLifecycleTest, ServeReturnsAtOnceWhenStoppedBeforeItStarts) {
  Server server;
  ASSERT_GT(server.BindToAnyPort("127.0.0.1"), 0);
  server.Stop();
  std::atomic<bool> returned{false};
  std::thread serve([&] {
    server.Serve();
    returned = true;
  });
  const bool in_time = WaitFor([&] { return returned.load(); });
  EXPECT_TRUE(in_time) << "Serve did not return after an early Stop";
  if (!in_time) server.Stop();  // so that the join below ends
  serve.join();
  EXPECT_FALSE(server.running());
}

TEST(ServerLifecycleTest, ServeFailsWhenNotBoundAndBindFailsForATakenPort) {
  Server unbound;
  EXPECT_FALSE(unbound.Serve());
  Server first;
  const int port = first.BindToAnyPort("127.0.0.1");
  ASSERT_GT(port, 0);
  Server second;
  EXPECT_FALSE(second.BindToPort("127.0.0.1", port));
  EXPECT_EQ(Server().BindToAnyPort("not an address"), -1);
}

// TLS.

struct FreeX509 {
  void operator()(X509* x) const { X509_free(x); }
};
struct FreeKey {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct FreeCtx {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using X509Ptr = std::unique_ptr<X509, FreeX509>;
using KeyPtr = std::unique_ptr<EVP_PKEY, FreeKey>;
using CtxPtr = std::unique_ptr<SSL_CTX, FreeCtx>;

// A self-signed certificate for 127.0.0.1 (as tls_test.cc makes them).
X509Ptr MakeSelfSigned(EVP_PKEY* key) {
  X509Ptr cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("server"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "CA:FALSE"},
                            std::pair{NID_subject_alt_name, "IP:127.0.0.1"}}) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    EXPECT_NE(ext, nullptr) << value;
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(cert.get(), key, EVP_sha256());
  return cert;
}

class ServerTlsTest : public ServerTest {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("trainyard-server-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    key_.reset(EVP_EC_gen("P-256"));
    cert_ = MakeSelfSigned(key_.get());
    FILE* f = std::fopen(CaPath().c_str(), "w");
    PEM_write_X509(f, cert_.get());
    std::fclose(f);

    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    ASSERT_EQ(SSL_CTX_use_certificate(ctx, cert_.get()), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey(ctx, key_.get()), 1);
    server_ = std::make_unique<Server>(ServerOptions{}, ctx);  // takes ctx
    server_->Get("/ping", [](const httplib::Request& req, httplib::Response& res) {
      res.set_header("X-Port", std::to_string(req.remote_port));
      res.set_content("pong", "text/plain");
    });
    server_->Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "text/plain");
    });
  }
  void TearDown() override {
    ServerTest::TearDown();
    std::filesystem::remove_all(dir_);
  }
  std::string CaPath() const { return (dir_ / "server.crt").string(); }
  std::string HttpsUrl() const { return "https://127.0.0.1:" + std::to_string(port_); }

  // A client context that trusts the test certificate.
  CtxPtr ClientContext() const {
    CtxPtr ctx(SSL_CTX_new(TLS_client_method()));
    SSL_CTX_load_verify_locations(ctx.get(), CaPath().c_str(), nullptr);
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    return ctx;
  }

  std::filesystem::path dir_;
  KeyPtr key_;
  X509Ptr cert_;
};

TEST_F(ServerTlsTest, ServesHttpsWithTheGivenContext) {
  ASSERT_NO_FATAL_FAILURE(Start());
  httplib::Client client(HttpsUrl());
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_keep_alive(true);
  VerifyServer(client, CaPath());
  auto first = client.Get("/ping");
  ASSERT_TRUE(first) << DescribeError(first, client);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "pong");
  auto second = client.Get("/ping");
  ASSERT_TRUE(second) << DescribeError(second, client);
  EXPECT_EQ(second->body, "pong");
  // Two requests, one connection.
  EXPECT_EQ(second->get_header_value("X-Port"), first->get_header_value("X-Port"));

  // The client commands' client, too, keeps its connection.
  ClientOptions options;
  options.ca_file = CaPath();
  Client cli(HttpsUrl(), options);
  Response a = Ok(cli.Send("GET", "/ping"));
  EXPECT_EQ(a.body, "pong");
  EXPECT_EQ(Ok(cli.Send("GET", "/ping")).Header("X-Port"), a.Header("X-Port"));
  const std::string big(1 << 20, 'q');
  EXPECT_TRUE(Ok(cli.Send("POST", "/echo", big, "text/plain")).body == big);
}

TEST_F(ServerTlsTest, AnswersPipelinedRequestsOverTls) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CtxPtr ctx = ClientContext();
  RawConnection conn(port_, ctx.get());
  ASSERT_TRUE(conn.ok());
  // Both requests in one TLS record: the second is decrypted with the first, so the
  // server must look in OpenSSL's buffer, not only wait for the socket.
  ASSERT_TRUE(
      conn.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
                "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"));
  RawResponse first = conn.Read();
  RawResponse second = conn.Read();
  EXPECT_EQ(first.body, "pong") << first.raw;
  EXPECT_EQ(second.body, "abc") << second.raw;
}

TEST_F(ServerTlsTest, SurvivesPlainHttpOnItsPort) {
  ASSERT_NO_FATAL_FAILURE(Start());
  {
    Client plain(Url(), {});
    EXPECT_TRUE(std::holds_alternative<Error>(plain.Send("GET", "/ping")));
  }
  {
    // A client that connects and never starts the handshake is an idle connection.
    RawConnection silent(port_);
    ASSERT_TRUE(WaitFor([&] { return server_->connections() >= 1; }));
    ClientOptions options;
    options.ca_file = CaPath();
    Client cli(HttpsUrl(), options);
    EXPECT_EQ(Ok(cli.Send("GET", "/ping")).body, "pong");
  }
}

}  // namespace
}  // namespace trainyard::http
