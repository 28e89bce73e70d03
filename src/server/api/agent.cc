#include "server/api/agent.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "core/names.h"
#include "server/api.h"
#include "server/api/request.h"
#include "server/protocol.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::json;

Result<TaskUpload> ParseTaskUpload(const json& j, std::string_view what) {
  TaskUpload u;
  TaskRef& t = u.task;
  auto node = j.find("node");
  if (node == j.end() || !node->is_string()) {
    return InvalidArgument(std::string(what) + ".node: required, a string");
  }
  t.node = node->get<std::string>();
  auto id = j.find("task_id");
  if (id == j.end() || !id->is_string()) {
    return InvalidArgument(std::string(what) + ".task_id: required, a string");
  }
  t.task_id = id->get<std::string>();
  const std::string_view s = t.task_id;
  const size_t a = s.find('.'), b = s.find('.', a == s.npos ? a : a + 1);
  if (a == s.npos || b == s.npos) {
    return InvalidArgument(std::string(what) + ".task_id: expected <job>.<attempt>.<rank>, got " +
                           QuoteForMessage(s));
  }
  TY_ASSIGN_OR_RETURN(t.job, ParseInt("task_id job", s.substr(0, a), 1, INT64_MAX));
  TY_ASSIGN_OR_RETURN(int64_t attempt,
                      ParseInt("task_id attempt", s.substr(a + 1, b - a - 1), 0, 1'000'000));
  TY_ASSIGN_OR_RETURN(int64_t rank, ParseInt("task_id rank", s.substr(b + 1), 0, 100'000'000));
  t.attempt = static_cast<int32_t>(attempt);
  t.rank = static_cast<int32_t>(rank);
  auto off = j.find("offset");
  if (off == j.end() || !off->is_number_integer() || off->get<int64_t>() < 0) {
    return InvalidArgument(std::string(what) + ".offset: required, an integer >= 0");
  }
  u.offset = off->get<int64_t>();
  return u;
}

Result<PollRequest> ParsePoll(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "poll"));
  auto node = j.find("node");
  if (node == j.end() || !node->is_string()) {
    return InvalidArgument("poll.node: required, a string");
  }
  PollRequest r;
  r.node = node->get<std::string>();
  if (auto w = j.find("wait_ms"); w != j.end()) {
    if (!w->is_number_integer() || w->get<int64_t>() < 0) {
      return InvalidArgument("poll.wait_ms: expected an integer >= 0");
    }
    r.wait = Duration(std::min<int64_t>(w->get<int64_t>(), kMaxPollWait.count()));
  }
  return r;
}

namespace {

// A profile request id of `job` in field `field`.
Result<std::string> ProfileIdField(const json& j, const std::string& field, JobId job) {
  auto id = j.find("id");
  if (id == j.end() || !id->is_string() || !ProfileSeq(id->get<std::string>(), job)) {
    return InvalidArgument(field + ": required, a profile id of job " + std::to_string(job) +
                           " (p-" + std::to_string(job) + "-<n>), got " +
                           (id == j.end() ? std::string("nothing") : QuoteForMessage(id->dump())));
  }
  return id->get<std::string>();
}

// The base64 field "data_b64" of an upload, decoded.
Result<std::string> DataField(const json& j, const std::string& field, const char* absent) {
  auto b64 = j.find("data_b64");
  if (b64 == j.end() || !b64->is_string()) return InvalidArgument(field + ": " + absent);
  return DecodeBase64(b64->get<std::string>(), field);
}

}  // namespace

Result<ProfileReport> ParseProfileReport(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(body, "profile"));
  TY_ASSIGN_OR_RETURN(TaskUpload u, ParseTaskUpload(j, "profile"));
  ProfileReport r;
  r.node = u.task.node;
  r.job = u.task.job;
  r.attempt = u.task.attempt;
  r.rank = u.task.rank;
  r.offset = u.offset;
  TY_ASSIGN_OR_RETURN(r.id, ProfileIdField(j, "profile.id", u.task.job));
  auto status = j.find("status");
  if (status != j.end() && !status->is_null()) {
    if (*status == "recording") {
      r.kind = ProfileReport::Kind::kRecording;
    } else if (*status == "failed") {
      r.kind = ProfileReport::Kind::kFailed;
      auto message = j.find("message");
      if (message != j.end() && message->is_string()) r.message = message->get<std::string>();
    } else {
      return InvalidArgument(
          "profile.status: expected recording or failed (a trace is sent as "
          "data_b64 chunks), got " +
          QuoteForMessage(status->dump()));
    }
    return r;
  }
  r.kind = ProfileReport::Kind::kChunk;
  auto total = j.find("total_bytes");
  if (total == j.end() || !total->is_number_integer() || total->get<int64_t>() < 1) {
    return InvalidArgument("profile.total_bytes: required with data_b64, the trace's size (>= 1)");
  }
  r.total_bytes = total->get<int64_t>();
  TY_ASSIGN_OR_RETURN(r.data,
                      DataField(j, "profile.data_b64", "required, a base64 string (or a status)"));
  if (static_cast<int64_t>(r.data.size()) > kMaxLogChunkBytes) {
    return ResourceExhausted("profile: at most 1 MiB of trace per request");
  }
  return r;
}

namespace {

Result<Reply> RegisterNode(const ApiServices& s, const Request& req) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(req.body, "register"));
  TY_ASSIGN_OR_RETURN(Registration reg, ParseRegistration(j));
  TY_ASSIGN_OR_RETURN(RegisterReply reply, s.cluster.Register(reg));
  return Reply::Json(200, protocol::ToJson(reply));
}

Result<Reply> TakeHeartbeat(const ApiServices& s, const Request& req) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(req.body, "heartbeat"));
  TY_ASSIGN_OR_RETURN(Heartbeat hb, ParseHeartbeat(j));
  TY_ASSIGN_OR_RETURN(std::vector<std::string> ack, s.cluster.HandleHeartbeat(hb));
  if (s.alerting != nullptr) s.alerting->ObserveHeartbeat(hb);
  return Reply::Json(200, protocol::ToJson(protocol::HeartbeatReply{std::move(ack)}));
}

// A long poll holds no thread while it waits: the cluster answers it when the node has
// commands, when its wait is over, or when the server stops.
void PollCommands(const ApiServices& s, const Request& req, const Routes::Answer& answer) {
  auto poll = ParsePoll(req.body);
  if (!poll.ok()) {
    return answer([why = poll.status()] { return Result<Reply>(why); });
  }
  s.cluster.PollAsync(poll->node, poll->wait, [answer](Result<std::vector<Command>> cmds) {
    // Rendered on the server's worker, not under the cluster's lock.
    answer([cmds = std::move(cmds)]() -> Result<Reply> {
      if (!cmds.ok()) return cmds.status();
      return Reply::Json(200, protocol::ToJson(protocol::PollReply{*cmds}));
    });
  });
}

Result<Reply> UploadLogs(const ApiServices& s, const Request& req) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(req.body, "logs"));
  TY_ASSIGN_OR_RETURN(TaskUpload u, ParseTaskUpload(j, "logs"));
  TY_ASSIGN_OR_RETURN(std::string data, DataField(j, "logs.data_b64", "required, a base64 string"));
  TY_ASSIGN_OR_RETURN(int64_t next, s.ingest->Logs(u.task, u.offset, data));
  return Reply::Json(200, protocol::ToJson(protocol::UploadReply{next}));
}

Result<Reply> UploadMetrics(const ApiServices& s, const Request& req) {
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(req.body, "metrics"));
  TY_ASSIGN_OR_RETURN(TaskUpload u, ParseTaskUpload(j, "metrics"));
  // The agent's file offset after these lines, when it knows it.
  std::optional<int64_t> end;
  if (auto e = j.find("end_offset"); e != j.end() && e->is_number_integer()) {
    end = e->get<int64_t>();
  }
  auto lines = j.find("lines");
  TY_ASSIGN_OR_RETURN(int64_t next,
                      s.ingest->Metrics(u.task, u.offset, end, lines == j.end() ? json() : *lines));
  return Reply::Json(200, protocol::ToJson(protocol::UploadReply{next}));
}

Result<Reply> UploadProfile(const ApiServices& s, const Request& req) {
  if (s.profiles == nullptr) return Unavailable("this server keeps no profiles");
  TY_ASSIGN_OR_RETURN(ProfileReport report, ParseProfileReport(req.body));
  TY_ASSIGN_OR_RETURN(ProfileReportReply reply, s.profiles->Report(report));
  return Reply::Json(
      200, protocol::ToJson(protocol::ProfileUploadReply{
               reply.next_offset, std::string(ProfileStateName(reply.state)), reply.message}));
}

// The manifest of a dataset version an agent stages (docs/datasets.md, "Staging").
Result<Reply> GetManifest(const ApiServices& s, const Request& req) {
  if (s.datasets == nullptr) return Unavailable("this server keeps no datasets");
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(req.body, "manifest"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "manifest", {"version"}));
  TY_ASSIGN_OR_RETURN(std::optional<std::string> version,
                      StringField(j, "manifest", "version", 71));
  if (!version) return InvalidArgument("manifest.version: required");
  TY_ASSIGN_OR_RETURN(std::string text, s.datasets->ManifestOfVersion(*version));
  return Reply::Json(200, nlohmann::ordered_json{{"version", *version}, {"manifest", text}});
}

}  // namespace

void InstallAgentRoutes(Routes& routes, const ApiServices& s) {
  routes.Agent("POST", V1("/agent/register"), Bind(s, RegisterNode));
  routes.Agent("POST", V1("/agent/heartbeat"), Bind(s, TakeHeartbeat));
  routes.Agent("POST", V1("/agent/manifest"), Bind(s, GetManifest));
  routes.AgentLater(V1("/agent/poll"), [s](const Request& req, const Routes::Answer& answer) {
    PollCommands(s, req, answer);
  });
  routes.Agent("POST", V1("/agent/logs"), Bind(s, UploadLogs));
  routes.Agent("POST", V1("/agent/metrics"), Bind(s, UploadMetrics));
  routes.Agent("POST", V1("/agent/profile"), Bind(s, UploadProfile));
}

}  // namespace trainyard::server
