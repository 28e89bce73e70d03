// The middleware: what Routes does around a route of each access, shown on routes that
// do nothing else.
#include "server/api/routes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

#include "http/server.h"
#include "server/api/request.h"
#include "server/http_testing.h"
#include "store/memory_store.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using ::testing::HasSubstr;

TEST(HttpStatusForTest, EveryCode) {
  EXPECT_EQ(HttpStatusFor(Status::Ok()), 200);
  EXPECT_EQ(HttpStatusFor(InvalidArgument("x")), 400);
  EXPECT_EQ(HttpStatusFor(Unauthenticated("x")), 401);
  EXPECT_EQ(HttpStatusFor(PermissionDenied("x")), 403);
  EXPECT_EQ(HttpStatusFor(NotFound("x")), 404);
  EXPECT_EQ(HttpStatusFor(AlreadyExists("x")), 409);
  EXPECT_EQ(HttpStatusFor(FailedPrecondition("x")), 409);
  EXPECT_EQ(HttpStatusFor(ResourceExhausted("x")), 413);
  EXPECT_EQ(HttpStatusFor(Unavailable("x")), 503);
  EXPECT_EQ(HttpStatusFor(Internal("x")), 500);
  EXPECT_EQ(HttpStatusFor(DataLoss("x")), 500);
}

TEST(SendTest, RepliesAndErrors) {
  httplib::Response res;
  Send(Reply::Json(201, ordered_json{{"id", 7}}).Header("X-Thing", "1"), res);
  EXPECT_EQ(res.status, 201);
  EXPECT_EQ(res.body, "{\"id\":7}\n");
  EXPECT_EQ(res.get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(res.get_header_value("X-Thing"), "1");
  httplib::Response err;
  Send(NotFound("job 9 does not exist"), err);
  EXPECT_EQ(err.status, 404);
  EXPECT_EQ(err.body, "{\"error\":\"job 9 does not exist\"}\n");
  EXPECT_EQ(err.get_header_value("Content-Type"), "application/json");
}

// A body worth compressing: > kMinCompressBytes, repetitive.
ordered_json Big() {
  ordered_json items = ordered_json::array();
  for (int i = 0; i < 200; ++i) items.push_back({{"index", i}, {"name", "item"}});
  return {{"items", items}};
}

class RoutesTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({.rate_per_second = 0}); }
  void Start(AccessOptions options) {
    auto a = AccessControl::Open(&store_, &clock_, options);
    ASSERT_TRUE(a.ok());
    access_ = std::move(*a);
    auto boot = access_->Bootstrap("admin");
    ASSERT_TRUE(boot.ok() && boot->has_value());
    token_ = (*boot)->text;
    admin_.user = "admin";
    admin_.role = Role::kClusterAdmin;

    Routes routes(http_, *access_, "join-secret");
    routes.Public("GET", "/public", [](const httplib::Request&) -> Result<Reply> {
      return Reply::Json(200, ordered_json{{"ok", true}});
    });
    routes.Public("GET", "/missing", [](const httplib::Request&) -> Result<Reply> {
      return NotFound("no such thing");
    });
    routes.Public("GET", "/throw", [](const httplib::Request&) -> Result<Reply> {
      throw std::runtime_error("boom");
    });
    routes.PublicFile("/file", [](const httplib::Request&) -> Result<WebFile> {
      const std::string body = Big().dump();
      return WebFile{body, "text/css; charset=utf-8", "\"" + ContentHash(body) + "\"", ""};
    });
    routes.Agent("POST", "/agent", [](const httplib::Request&) -> Result<Reply> {
      return Reply::Json(200, ordered_json{{"agent", true}});
    });
    routes.AgentLater("/later", [](const httplib::Request&, const Routes::Answer& answer) {
      std::thread([answer] {
        answer([] { return Result<Reply>(Reply::Json(200, ordered_json{{"later", true}})); });
      }).detach();
    });
    routes.User(
        "GET", "/big", Action::kReadCluster,
        [](const httplib::Request&, Call&) -> Result<Reply> { return Reply::Json(200, Big()); });
    routes.User("GET", "/small", Action::kReadCluster,
                [](const httplib::Request&, Call&) -> Result<Reply> {
                  return Reply::Json(200, ordered_json{{"small", true}});
                });
    auto change = [](const httplib::Request& req, Call& call) -> Result<Reply> {
      call.object = "thing/1";
      call.tenant = "vision";
      if (req.body == "bad") return InvalidArgument("thing.field: bad");
      return Reply::Json(200, ordered_json{{"changed", true}});
    };
    routes.User("POST", "/change", Action::kManageJob, change);
    routes.User("POST", "/busy", Action::kManageJob, change, Audit::kRefusals);
    routes.User("POST", "/self-audited", Action::kManageJob,
                [](const httplib::Request&, Call& call) -> Result<Reply> {
                  call.audited = true;
                  return Reply::Json(200, ordered_json{{"audited", "by the handler"}});
                });
    list_ = routes.list();
    port_ = serving_.Start(http_);
    ASSERT_GT(port_, 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_decompress(false);
  }
  void TearDown() override { serving_.Stop(); }

  httplib::Response Do(const std::string& method, const std::string& path, std::string token,
                       const std::string& body = "", httplib::Headers headers = {}) {
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    auto res = method == "GET" ? client_->Get(path.c_str(), headers)
                               : client_->Post(path.c_str(), headers, body, "text/plain");
    return res ? *res : httplib::Response{};
  }
  std::vector<AuditEntry> Audited() {
    auto page = access_->ListAudit(admin_, {}, 0, 100);
    return page.ok() ? page->entries : std::vector<AuditEntry>{};
  }

  store::MemoryStore store_;
  FakeClock clock_;
  std::unique_ptr<AccessControl> access_;
  std::string token_;
  Principal admin_;
  http::Server http_;
  LoopbackServer serving_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
  std::vector<RouteInfo> list_;
};

TEST_F(RoutesTest, TheListHasEveryRouteWithItsAccess) {
  ASSERT_EQ(list_.size(), 11u);
  EXPECT_EQ(list_[0].method, "GET");
  EXPECT_EQ(list_[0].pattern, "/public");
  EXPECT_EQ(list_[0].access, RouteAccess::kPublic);
  EXPECT_EQ(list_[3].access, RouteAccess::kPublicFile);
  EXPECT_EQ(list_[4].access, RouteAccess::kAgent);
  EXPECT_EQ(list_[5].method, "POST");
  EXPECT_EQ(list_[5].access, RouteAccess::kAgent);
  EXPECT_EQ(list_[8].pattern, "/change");
  EXPECT_EQ(list_[8].access, RouteAccess::kUser);
  EXPECT_EQ(list_[8].action, Action::kManageJob);
}

TEST_F(RoutesTest, EveryErrorIsJson) {
  EXPECT_EQ(Do("GET", "/public", "").body, "{\"ok\":true}\n");
  httplib::Response missing = Do("GET", "/missing", "");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body, "{\"error\":\"no such thing\"}\n");
  httplib::Response no_route = Do("GET", "/nowhere", "");
  EXPECT_EQ(no_route.status, 404);
  EXPECT_EQ(json::parse(no_route.body), json({{"error", "no such endpoint: GET /nowhere"}}));
  httplib::Response thrown = Do("GET", "/throw", "");
  EXPECT_EQ(thrown.status, 500);
  EXPECT_EQ(json::parse(thrown.body), json({{"error", "internal error: boom"}}));
  httplib::Response large =
      Do("POST", "/agent", "join-secret", std::string(kMaxRequestBytes + 1, 'x'));
  EXPECT_EQ(large.status, 413);
  EXPECT_EQ(json::parse(large.body),
            json({{"error", "request body too large; the limit is 4194304 bytes"}}));
}

// `request` as bytes on a connection of its own, and everything the server sends back
// until it closes the connection (it does after a refusal).
std::string Exchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  const timeval timeout{.tv_sec = 5, .tv_usec = 0};  // a server that keeps it open fails
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;)
      got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return got;
}

TEST_F(RoutesTest, TheHttpServersOwnRefusalsAreJsonErrorsThatSayWhy) {
  const std::string raw = Exchange(
      port_, "POST /agent HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_EQ(raw.rfind("HTTP/1.1 400", 0), 0u) << raw;
  EXPECT_THAT(raw, HasSubstr("Content-Type: application/json"));
  const size_t body = raw.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << raw;
  EXPECT_EQ(raw.substr(body + 4),
            "{\"error\":\"Content-Length is given 2 times; give it once\"}\n");
}

TEST_F(RoutesTest, AgentRoutesTakeTheJoinTokenOnly) {
  const json refused = {{"error", "missing or wrong join token (Authorization: Bearer <token>)"}};
  for (const std::string path : {"/agent", "/later"}) {
    for (const std::string& token : {std::string(), token_, std::string("join-secre")}) {
      httplib::Response r = Do("POST", path, token, "{}");
      EXPECT_EQ(r.status, 401) << path << " " << token;
      EXPECT_EQ(json::parse(r.body, nullptr, false), refused) << path;
    }
  }
  EXPECT_EQ(json::parse(Do("POST", "/agent", "join-secret", "{}").body), json({{"agent", true}}));
  httplib::Response later = Do("POST", "/later", "join-secret", "{}");
  EXPECT_EQ(later.status, 200);
  EXPECT_EQ(json::parse(later.body), json({{"later", true}}));
  EXPECT_TRUE(Audited().empty());
}

TEST_F(RoutesTest, UserRoutesNeedATokenAndEveryChangeIsAudited) {
  httplib::Response anonymous = Do("GET", "/small", "");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_THAT(json::parse(anonymous.body)["error"].get<std::string>(), HasSubstr("Authorization"));
  EXPECT_EQ(Do("POST", "/change", "").status, 401);
  EXPECT_EQ(Do("POST", "/change", "tyt_nope").status, 401);
  EXPECT_EQ(Do("POST", "/change", token_, "ok").status, 200);
  httplib::Response bad = Do("POST", "/change", token_, "bad");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body, "{\"error\":\"thing.field: bad\"}\n");
  // Refusals only on a busy route; none by the middleware where the handler audits.
  EXPECT_EQ(Do("POST", "/busy", token_, "ok").status, 200);
  EXPECT_EQ(Do("POST", "/busy", token_, "bad").status, 400);
  EXPECT_EQ(Do("POST", "/self-audited", token_).status, 200);
  EXPECT_EQ(Do("GET", "/small", token_).status, 200);  // GETs are not audited

  const std::vector<AuditEntry> entries = Audited();
  ASSERT_EQ(entries.size(), 5u);
  EXPECT_EQ(entries[0].actor, "anonymous");
  EXPECT_EQ(entries[0].status, 401);
  EXPECT_EQ(entries[0].action, "POST /change");
  EXPECT_EQ(entries[0].object, "");
  EXPECT_EQ(entries[1].status, 401);
  EXPECT_EQ(entries[2].actor, "user:admin");
  EXPECT_EQ(entries[2].token_id, ParseTokenText(token_)->id);
  EXPECT_EQ(entries[2].object, "thing/1");
  EXPECT_EQ(entries[2].tenant, "vision");
  EXPECT_EQ(entries[2].status, 200);
  EXPECT_EQ(entries[2].message, "");
  EXPECT_THAT(entries[2].source, HasSubstr("127.0.0.1:"));
  EXPECT_EQ(entries[3].status, 400);
  EXPECT_EQ(entries[3].message, "thing.field: bad");
  EXPECT_EQ(entries[4].action, "POST /busy");
  EXPECT_EQ(entries[4].status, 400);
}

TEST_F(RoutesTest, UserGetsCarryATagAnd304WhenItHolds) {
  httplib::Response first = Do("GET", "/big", token_);
  ASSERT_EQ(first.status, 200);
  const std::string etag = first.get_header_value("ETag");
  EXPECT_EQ(etag, "W/\"" + ContentHash(first.body) + "\"");
  EXPECT_EQ(first.get_header_value("Cache-Control"), "no-cache");
  EXPECT_EQ(json::parse(first.body), json(Big()));
  httplib::Response same = Do("GET", "/big", token_, "", {{"If-None-Match", etag}});
  EXPECT_EQ(same.status, 304);
  EXPECT_EQ(same.body, "");
  EXPECT_FALSE(Do("GET", "/missing", token_).has_header("ETag"));
  // gzip when the client takes it and the body is worth it.
  httplib::Response gzipped = Do("GET", "/big", token_, "", {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(gzipped.status, 200);
  EXPECT_EQ(gzipped.get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(gzipped.get_header_value("Vary"), "Accept-Encoding");
  EXPECT_LT(gzipped.body.size(), first.body.size());
  EXPECT_EQ(gzipped.get_header_value("ETag"), etag);  // the tag of the body, not the bytes
  httplib::Response small = Do("GET", "/small", token_, "", {{"Accept-Encoding", "gzip"}});
  EXPECT_FALSE(small.has_header("Content-Encoding"));
  EXPECT_EQ(small.body, "{\"small\":true}\n");
}

TEST_F(RoutesTest, FilesCarryTheirTagSecurityHeadersAndGzip) {
  httplib::Response file = Do("GET", "/file", "");
  ASSERT_EQ(file.status, 200);
  EXPECT_EQ(file.get_header_value("ETag"), "\"" + ContentHash(file.body) + "\"");
  EXPECT_EQ(file.get_header_value("Cache-Control"), "no-cache");
  EXPECT_EQ(file.get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(file.get_header_value("Referrer-Policy"), "no-referrer");
  EXPECT_THAT(file.get_header_value("Content-Security-Policy"), HasSubstr("default-src 'self'"));
  EXPECT_EQ(file.get_header_value("Content-Type"), "text/css; charset=utf-8");
  EXPECT_EQ(Do("GET", "/file", "", "", {{"If-None-Match", file.get_header_value("ETag")}}).status,
            304);
  httplib::Response gzipped = Do("GET", "/file", "", "", {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(gzipped.get_header_value("Content-Encoding"), "gzip");
  EXPECT_LT(gzipped.body.size(), file.body.size());
}

class RateLimitedRoutesTest : public RoutesTest {
 protected:
  void SetUp() override { Start({.rate_per_second = 1, .rate_burst = 2}); }
};

TEST_F(RateLimitedRoutesTest, ATokenPastItsRateGets429AndIsAudited) {
  EXPECT_EQ(Do("GET", "/small", token_).status, 200);
  EXPECT_EQ(Do("GET", "/small", token_).status, 200);
  httplib::Response limited = Do("POST", "/change", token_, "ok");
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.get_header_value("Retry-After"), "1");
  EXPECT_THAT(json::parse(limited.body)["error"].get<std::string>(), HasSubstr("rate limit"));
  const std::vector<AuditEntry> entries = Audited();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].status, 429);
  // Callers that cannot authenticate are limited per address, and then not audited.
  EXPECT_EQ(Do("POST", "/change", "").status, 401);
  EXPECT_EQ(Do("POST", "/change", "").status, 401);
  httplib::Response flood = Do("POST", "/change", "");
  EXPECT_EQ(flood.status, 429);
  EXPECT_EQ(flood.get_header_value("Retry-After"), "1");
  EXPECT_EQ(Audited().size(), 3u);
}

}  // namespace
}  // namespace trainyard::server
