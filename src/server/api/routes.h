// Routes: how the API's resource files (server/api/<resource>.cc) declare their
// routes, and what is done around every route (the middleware), in this one place.
//
// A route names who may call it and a handler: parse the request, call the core,
// render a Reply (or return the error Status). What the access needs is done here,
// so no handler repeats it:
//
//   kPublic      nothing (GET /api/v1/healthz).
//   kPublicFile  a file of the dashboard (WebFile): its ETag, 304 when If-None-Match
//                holds it, Cache-Control: no-cache, headers that keep the page to its
//                own origin (Content-Security-Policy, nosniff, no referrer), and the
//                file gzipped (made once, at start) when the client takes gzip.
//   kAgent       the join token as "Authorization: Bearer <token>", else 401 (a user's
//                API token is not one).
//   kUser        an API token (401 without a valid one) within its rate (429 with
//                Retry-After; callers that fail to authenticate are limited per client
//                address, and past that rate not audited), then the handler, which
//                checks what the caller may do with the object (core/auth.h). Every
//                request that is not a GET is written to the audit log, allowed or not
//                (Audit::kRefusals: only refused ones, for data paths too busy to audit
//                request by request). A GET answered 200 with a body carries a weak
//                ETag of the body and Cache-Control: no-cache, and becomes 304 without
//                the body when If-None-Match holds that tag; otherwise a compressible
//                body is gzipped at level 1 when the client takes gzip.
//
// Errors are {"error": message} with the status HttpStatusFor gives. The HTTP server's
// own answers (404 no such route, 413 body too large) and a handler's exception get the
// same shape; how long each route takes is observed for /metrics (http_metrics()).
//
// Thread-safety: declare routes before the server serves; the installed handlers run
// concurrently on the server's worker threads.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/auth.h"
#include "core/status.h"
#include "server/access.h"
#include "server/metrics_page.h"
#include "server/web_assets.h"

namespace trainyard::http {
class Server;
}

namespace trainyard::server {

// Who may call a route: anyone (health checks), anyone for the dashboard's page and
// files (they hold no data: the page's API calls carry the user's token), agents (the
// join token), or users (an API token, then the rules of core/auth.h for `action` on
// the object).
enum class RouteAccess { kPublic, kPublicFile, kAgent, kUser };
struct RouteInfo {
  std::string method;   // GET, POST, PUT, PATCH, DELETE
  std::string pattern;  // as registered, e.g. "/api/v1/jobs/([^/]+)/cancel"
  RouteAccess access = RouteAccess::kUser;
  Action action = Action::kReadCluster;  // for kUser routes
};

// "/api/v1" + path.
inline std::string V1(std::string_view path) { return "/api/v1" + std::string(path); }

// The HTTP status of an error: InvalidArgument 400, Unauthenticated 401,
// PermissionDenied 403, NotFound 404, AlreadyExists / FailedPrecondition 409,
// ResourceExhausted 413, Unavailable 503, others 500.
int HttpStatusFor(const Status& s);

// A handler's answer.
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type

  // `body` as one line of JSON and a newline, application/json.
  template <typename JsonValue>
  static Reply Json(int status, const JsonValue& body) {
    return {status, body.dump() + "\n", "application/json", {}};
  }
  // {"error": message} with HttpStatusFor(s).
  static Reply Error(const Status& s);
  Reply& Header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
    return *this;
  }
};

// Writes `reply`, or its error as Reply::Error, into `res`.
void Send(Result<Reply> reply, httplib::Response& res);

// A user request being served: who asks, and what it is about (for the audit log).
struct Call {
  Principal who;
  std::string object;  // "job/42"
  std::string tenant;  // the object's tenant, if it has one
  // The request's audit entry as far as known before the handler (who, what, from
  // where); a handler that commits it with its own change sets `audited`.
  AuditEntry audit;
  bool audited = false;
};

enum class Audit { kEveryRequest, kRefusals };

class Routes {
 public:
  using Request = httplib::Request;
  using Handler = std::function<Result<Reply>(const Request&)>;
  using UserHandler = std::function<Result<Reply>(const Request&, Call&)>;
  using FileHandler = std::function<Result<WebFile>(const Request&)>;
  // Answers a request of a route answered later, once, from any thread; `render` runs
  // on one of the server's worker threads.
  using Answer = std::function<void(std::function<Result<Reply>()> render)>;
  using LaterHandler = std::function<void(const Request&, const Answer&)>;

  // Sets `http` up for the API: the body limit (kMaxRequestBytes), error and exception
  // answers as JSON, request durations per route. `access` checks users' tokens and
  // keeps the audit log; agents must send `join_token` (empty: no agent is let in).
  // `http` and `access` outlive the routes.
  Routes(http::Server& http, AccessControl& access, std::string join_token);

  void Public(const std::string& method, const std::string& pattern, Handler handler);
  void PublicFile(const std::string& pattern, FileHandler handler);
  void Agent(const std::string& method, const std::string& pattern, Handler handler);
  // A POST of agents answered later (a long poll holds no thread while it waits).
  void AgentLater(const std::string& pattern, LaterHandler handler);
  void User(const std::string& method, const std::string& pattern, Action action,
            UserHandler handler, Audit audit = Audit::kEveryRequest);

  // Every route declared so far, in order.
  const std::vector<RouteInfo>& list() const { return list_; }
  // How long requests took, per route (for GET /metrics).
  const std::shared_ptr<HttpMetrics>& http_metrics() const { return http_metrics_; }

 private:
  http::Server& http_;
  AccessControl& access_;
  const std::string join_token_;
  std::shared_ptr<HttpMetrics> http_metrics_;
  std::vector<RouteInfo> list_;
};

}  // namespace trainyard::server
