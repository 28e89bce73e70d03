#include "server/api/routes.h"

#include <array>
#include <cstdio>
#include <exception>

#include "http/compress.h"
#include "http/server.h"
#include "server/api/request.h"

namespace trainyard::server {
namespace {

using httplib::Request;
using httplib::Response;
using nlohmann::json;
using nlohmann::ordered_json;

// The dashboard keeps to its own origin: its scripts and styles come from here (uPlot
// sets inline styles), it calls only this server's API and may not be framed.
constexpr const char* kDashboardPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'";

// 429: the caller has used up its rate.
Reply TooManyRequests(const Status& s) {
  return Reply::Json(429, ordered_json{{"error", s.message()}}).Header("Retry-After", "1");
}

// A user GET answered 200 with a body: a weak tag of the body, and 304 without the
// body when If-None-Match holds it. A poll that finds nothing changed costs the
// client a few headers.
void AnswerConditionally(const Request& req, Response& res) {
  if (res.status != 200 || res.body.empty()) return;
  const std::string etag = "W/\"" + ContentHash(res.body) + "\"";
  res.set_header("ETag", etag);
  res.set_header("Cache-Control", "no-cache");
  if (IfNoneMatchHas(req.get_header_value("If-None-Match"), etag)) {
    res.status = 304;
    res.body.clear();
  }
}

// gzip at level 1 of a compressible body answered 200 (cheap enough for every answer).
void Compress(const Request& req, Response& res) {
  const std::string type = res.get_header_value("Content-Type");
  if (res.status == 200 && !res.body.empty() && http::IsCompressible(type)) {
    http::SendCompressed(req, res, std::move(res.body), type);
  }
}

void SendWebFile(const Request& req, Response& res, Result<WebFile> file) {
  if (!file.ok()) return Send(file.status(), res);
  res.set_header("ETag", file->etag);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Content-Security-Policy", kDashboardPolicy);
  if (IfNoneMatchHas(req.get_header_value("If-None-Match"), file->etag)) {
    res.status = 304;
    return;
  }
  res.status = 200;
  http::SendCompressed(req, res, std::move(file->body), file->content_type, std::move(file->gzip),
                       6);
}

bool HasJoinToken(const Request& req, const std::string& token) {
  // Only the join token: a user's API token is not accepted here.
  return !token.empty() &&
         ConstantTimeEqual(req.get_header_value("Authorization"), "Bearer " + token);
}

Status NoJoinToken() {
  return Unauthenticated("missing or wrong join token (Authorization: Bearer <token>)");
}

// The audit entry of an answered user request.
AuditEntry AuditOf(Call& call, const Response& res) {
  AuditEntry e = std::move(call.audit);
  e.tenant = call.tenant;
  e.object = call.object;
  e.status = res.status;
  if (res.status >= 400) {
    json body = json::parse(res.body, nullptr, false);
    if (body.is_object() && body.contains("error") && body["error"].is_string()) {
      e.message = body["error"].get<std::string>().substr(0, 1000);
    }
  }
  return e;
}

}  // namespace

int HttpStatusFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 413;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    default:
      return 500;
  }
}

Reply Reply::Error(const Status& s) {
  return Json(HttpStatusFor(s), ordered_json{{"error", s.message()}});
}

void Send(Result<Reply> reply, Response& res) {
  Reply r = reply.ok() ? std::move(*reply) : Reply::Error(reply.status());
  res.status = r.status;
  res.body = std::move(r.body);  // a trace may be 64 MiB a rank: moved, not copied
  res.headers.erase("Content-Type");
  if (!r.content_type.empty()) res.set_header("Content-Type", r.content_type);
  for (auto& [name, value] : r.headers) res.set_header(name, value);
}

Routes::Routes(http::Server& http, AccessControl& access, std::string join_token)
    : http_(http),
      access_(access),
      join_token_(std::move(join_token)),
      http_metrics_(std::make_shared<HttpMetrics>()) {
  http_.SetMaxBodyBytes(kMaxRequestBytes);
  // A method no route has is "other", so that clients cannot add label values at will.
  http_.SetObserver([metrics = http_metrics_](const Request& req, const Response&,
                                              const std::string& route,
                                              std::chrono::nanoseconds took) {
    constexpr std::array<std::string_view, 6> kMethods = {"GET", "HEAD",  "POST",
                                                          "PUT", "PATCH", "DELETE"};
    const bool known = std::find(kMethods.begin(), kMethods.end(), req.method) != kMethods.end();
    metrics->Observe(known ? req.method : "other", route,
                     std::chrono::duration<double>(took).count());
  });
  http_.SetErrorHandler([](const Request& req, Response& res) {
    // The HTTP server's own refusals (a malformed or oversized request) say why in a
    // line of text/plain; handlers' errors are JSON already.
    const bool refusal = res.get_header_value("Content-Type") == "text/plain";
    if (!res.body.empty() && !refusal) return;
    std::string msg = refusal             ? res.body.substr(0, res.body.find_last_not_of('\n') + 1)
                      : res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                      : res.status == 413 ? "request body too large; the limit is " +
                                                std::to_string(kMaxRequestBytes) + " bytes"
                                          : "HTTP " + std::to_string(res.status);
    res.set_content(ordered_json{{"error", msg}}.dump() + "\n", "application/json");
  });
  http_.SetExceptionHandler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    Send(Reply::Json(500, ordered_json{{"error", what}}), res);
  });
}

void Routes::Public(const std::string& method, const std::string& pattern, Handler handler) {
  list_.push_back({method, pattern, RouteAccess::kPublic, Action::kReadCluster});
  http_.Route(method, pattern, [handler = std::move(handler)](const Request& req, Response& res) {
    Send(handler(req), res);
  });
}

void Routes::PublicFile(const std::string& pattern, FileHandler handler) {
  list_.push_back({"GET", pattern, RouteAccess::kPublicFile, Action::kReadCluster});
  http_.Get(pattern, [handler = std::move(handler)](const Request& req, Response& res) {
    SendWebFile(req, res, handler(req));
  });
}

void Routes::Agent(const std::string& method, const std::string& pattern, Handler handler) {
  list_.push_back({method, pattern, RouteAccess::kAgent, Action::kReadCluster});
  http_.Route(
      method, pattern,
      [token = join_token_, handler = std::move(handler)](const Request& req, Response& res) {
        if (!HasJoinToken(req, token)) return Send(NoJoinToken(), res);
        Send(handler(req), res);
      });
}

void Routes::AgentLater(const std::string& pattern, LaterHandler handler) {
  list_.push_back({"POST", pattern, RouteAccess::kAgent, Action::kReadCluster});
  http_.PostLater(pattern, [token = join_token_, handler = std::move(handler)](const Request& req,
                                                                               http::Later later) {
    const Answer answer = [later](std::function<Result<Reply>()> render) {
      later.Answer([render = std::move(render)](Response& res) { Send(render(), res); });
    };
    if (!HasJoinToken(req, token)) {
      return answer([] { return Result<Reply>(NoJoinToken()); });
    }
    handler(req, answer);
  });
}

void Routes::User(const std::string& method, const std::string& pattern, Action action,
                  UserHandler handler, Audit audit) {
  list_.push_back({method, pattern, RouteAccess::kUser, action});
  http_.Route(method, pattern,
              [&access = access_, method, handler = std::move(handler), audit](const Request& req,
                                                                               Response& res) {
                Call call;
                auto p = access.Authenticate(req.get_header_value("Authorization"));
                call.audit.actor = p.ok() ? p->Actor() : "anonymous";
                call.audit.token_id = p.ok() ? p->token_id : "";
                call.audit.action = req.method + " " + req.path.substr(0, 256);
                call.audit.source = req.remote_addr + ":" + std::to_string(req.remote_port);
                if (p.ok()) {
                  call.who = std::move(*p);
                  if (Status s = access.Admit(call.who); !s.ok()) {
                    Send(TooManyRequests(s), res);
                  } else {
                    Send(handler(req, call), res);
                    if (method == "GET") {
                      AnswerConditionally(req, res);
                      Compress(req, res);
                    }
                  }
                } else if (Status s = access.AdmitUnauthenticated(req.remote_addr); !s.ok()) {
                  // Past its rate a client that cannot authenticate is not audited either.
                  return Send(TooManyRequests(s), res);
                } else {
                  Send(p.status(), res);
                }
                if (method == "GET" || call.audited) return;
                if (audit == Audit::kRefusals && res.status < 400) return;
                // The request has been answered; an audit write that fails is reported on the
                // server's log rather than turned into an error for a change that was made.
                if (Status s = access.Record(AuditOf(call, res)); !s.ok()) {
                  std::fprintf(stderr, "trainyard server: audit log: %s\n", s.message().c_str());
                }
              });
}

}  // namespace trainyard::server
