#include "http/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "http/testing.h"

namespace trainyard::http {
namespace {

using ::testing::HasSubstr;

// A cpp-httplib server on a free loopback port, on its own thread.
class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/hello", [](const httplib::Request& req, httplib::Response& res) {
      res.set_header("X-Auth", req.get_header_value("Authorization"));
      res.set_header("X-Port", std::to_string(req.remote_port));
      res.set_content("hello, world", "text/plain");
    });
    server_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 201;
      res.set_content(req.get_header_value("Content-Type") + "|" + req.body, "text/plain");
    });
    server_.Get("/chunked", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
        if (offset >= 3 * 70000) {
          sink.done();
          return true;
        }
        const std::string part(70000, static_cast<char>('a' + offset / 70000));
        sink.write(part.data(), part.size());
        return true;
      });
    });
    server_.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      res.set_content("late", "text/plain");
    });
    server_.Get(R"(/path/(.*))", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.matches[1].str() + "?" + req.get_param_value("q"), "text/plain");
    });
    server_.Delete("/thing", [](const httplib::Request&, httplib::Response& res) {
      res.status = 404;
      res.set_content(R"({"error":"no such thing"})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

ClientOptions WithHeader(std::string name, std::string value) {
  ClientOptions o;
  o.headers.emplace_back(std::move(name), std::move(value));
  return o;
}
ClientOptions WithReadTimeout(int ms) {
  ClientOptions o;
  o.read_timeout_ms = ms;
  return o;
}

Response Ok(std::variant<Response, Error> r) {
  if (auto* e = std::get_if<Error>(&r)) {
    ADD_FAILURE() << "request failed: " << e->message;
    return {};
  }
  return std::get<Response>(std::move(r));
}

TEST_F(ClientTest, GetsWithHeadersAndKeepsTheConnection) {
  Client client(Url() + "/", WithHeader("Authorization", "Bearer abc"));
  Response first = Ok(client.Send("GET", "/hello"));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "hello, world");
  EXPECT_EQ(first.Header("x-auth"), "Bearer abc");
  EXPECT_EQ(first.Header("CONTENT-TYPE"), "text/plain");
  EXPECT_EQ(first.Header("X-None"), "");
  Response second = Ok(client.Send("GET", "/hello"));
  EXPECT_EQ(second.body, "hello, world");
  // The same client port: one connection for both.
  EXPECT_EQ(second.Header("X-Port"), first.Header("X-Port"));
}

TEST_F(ClientTest, PostsABodyAndReadsStatusAndErrors) {
  Client client(Url(), {});
  Response r = Ok(client.Send("POST", "/echo", "name: x\n", "application/yaml"));
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.body, "application/yaml|name: x\n");
  Response empty = Ok(client.Send("POST", "/echo"));
  EXPECT_EQ(empty.body, "|");
  Response missing = Ok(client.Send("DELETE", "/thing"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body, R"({"error":"no such thing"})");
  EXPECT_EQ(Ok(client.Send("GET", "/nowhere")).status, 404);
}

TEST_F(ClientTest, ReadsChunkedAnswers) {
  Client client(Url(), {});
  Response r = Ok(client.Send("GET", "/chunked"));
  ASSERT_EQ(r.body.size(), 3u * 70000);
  EXPECT_EQ(r.body.substr(0, 3), "aaa");
  EXPECT_EQ(r.body.substr(70000, 3), "bbb");
  EXPECT_EQ(r.body.substr(140000, 3), "ccc");
  // The connection stays usable after a chunked answer.
  EXPECT_EQ(Ok(client.Send("GET", "/hello")).body, "hello, world");
}

TEST_F(ClientTest, ReconnectsWhenTheServerClosedTheKeptConnection) {
  server_.set_keep_alive_max_count(1);  // the server closes after each answer
  Client client(Url(), {});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Ok(client.Send("GET", "/hello")).body, "hello, world");
}

TEST_F(ClientTest, EncodesPathsAndQueries) {
  EXPECT_EQ(EncodeComponent("a b/c?d&e=f%~-._"), "a%20b%2Fc%3Fd%26e%3Df%25~-._");
  EXPECT_EQ(EncodeComponent("ü"), "%C3%BC");
  Client client(Url(), {});
  EXPECT_EQ(Ok(client.Send("GET", "/path/job-1?q=" + EncodeComponent("a&b c"))).body,
            "job-1?a&b c");
}

TEST_F(ClientTest, TimesOutWhenNoAnswerComes) {
  Client client(Url(), WithReadTimeout(200));
  auto r = client.Send("GET", "/slow");
  ASSERT_TRUE(std::holds_alternative<Error>(r));
  EXPECT_EQ(std::get<Error>(r).kind, ErrorKind::kTimeout);
  EXPECT_THAT(std::get<Error>(r).message, HasSubstr("waiting for the answer"));
}

TEST(ClientErrorsTest, ConnectionRefusedIsAConnectionError) {
  // A port nothing listens on: bind one, close it.
  Client client("http://127.0.0.1:" + std::to_string(testing::ClosedLoopbackPort()), {});
  auto r = client.Send("GET", "/hello");
  ASSERT_TRUE(std::holds_alternative<Error>(r));
  EXPECT_EQ(std::get<Error>(r).kind, ErrorKind::kConnection);
  EXPECT_THAT(std::get<Error>(r).message, HasSubstr("refused"));
}

TEST(ClientErrorsTest, BadUrlsAreNamed) {
  for (const char* url : {"ftp://h:1", "127.0.0.1:80", "http://", "http://h:0", "http://h:70000",
                          "http://h:1/api", "http://[::1", "http://h:x"}) {
    Client client(url, {});
    auto r = client.Send("GET", "/");
    ASSERT_TRUE(std::holds_alternative<Error>(r)) << url;
    EXPECT_EQ(std::get<Error>(r).kind, ErrorKind::kUrl) << url;
    EXPECT_THAT(std::get<Error>(r).message, HasSubstr(std::string("\"") + url + "\"")) << url;
  }
  Client client("http://127.0.0.1:1", {});
  auto r = client.Send("GET", "no-slash");
  ASSERT_TRUE(std::holds_alternative<Error>(r));
  EXPECT_THAT(std::get<Error>(r).message, HasSubstr("bad request path"));
}

TEST(ClientErrorsTest, AnAnswerThatIsNotHttpIsAProtocolError) {
  int port = 0;
  const int listener = testing::BindLoopback(port);
  ASSERT_EQ(::listen(listener, 4), 0);
  std::thread peer([listener] {
    for (const char* answer :
         {"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}) {
      int c = ::accept(listener, nullptr, nullptr);
      char buf[1024];
      [[maybe_unused]] auto n = ::recv(c, buf, sizeof buf, 0);
      [[maybe_unused]] auto w = ::send(c, answer, std::strlen(answer), MSG_NOSIGNAL);
      ::close(c);
    }
  });
  Client client("http://127.0.0.1:" + std::to_string(port), {});
  auto garbage = client.Send("GET", "/");
  ASSERT_TRUE(std::holds_alternative<Error>(garbage));
  EXPECT_EQ(std::get<Error>(garbage).kind, ErrorKind::kProtocol);
  EXPECT_THAT(std::get<Error>(garbage).message, HasSubstr("not an HTTP answer"));
  auto cut = client.Send("GET", "/");
  ASSERT_TRUE(std::holds_alternative<Error>(cut));
  EXPECT_EQ(std::get<Error>(cut).kind, ErrorKind::kIo);
  EXPECT_THAT(std::get<Error>(cut).message, HasSubstr("closed the connection mid-answer"));
  peer.join();
  ::close(listener);
}

}  // namespace
}  // namespace trainyard::http
