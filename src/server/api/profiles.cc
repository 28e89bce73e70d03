#include "server/api/profiles.h"

#include <string>

#include "core/names.h"
#include "server/api/jobs.h"
#include "server/api/request.h"

namespace trainyard::server {

using httplib::Request;
using nlohmann::json;
using nlohmann::ordered_json;

Result<ProfileParams> ParseProfileParams(std::string_view body) {
  ProfileParams p;
  const bool empty = body.find_first_not_of(" \t\r\n") == std::string_view::npos;
  TY_ASSIGN_OR_RETURN(json j, ParseJsonBody(empty ? std::string_view("{}") : body, "profile"));
  TY_RETURN_IF_ERROR(CheckBodyKeys(j, "profile", {"steps", "rank"}));
  if (auto steps = j.find("steps"); steps != j.end() && !steps->is_null()) {
    if (!steps->is_number_integer() || steps->get<int64_t>() < 1 ||
        steps->get<int64_t>() > kMaxProfileSteps) {
      return InvalidArgument("profile.steps: expected an integer 1.." +
                             std::to_string(kMaxProfileSteps) + ", got " +
                             QuoteForMessage(steps->dump()));
    }
    p.steps = steps->get<int32_t>();
  }
  if (auto rank = j.find("rank"); rank != j.end() && !rank->is_null()) {
    if (!rank->is_number_integer() || rank->get<int64_t>() < 0 ||
        rank->get<int64_t>() > 100'000'000) {
      return InvalidArgument("profile.rank: expected a rank (an integer >= 0), got " +
                             QuoteForMessage(rank->dump()));
    }
    p.rank = rank->get<int32_t>();
  }
  return p;
}

Result<std::vector<ProfileTarget>> ProfileTargets(const JobView& v, std::optional<int32_t> rank) {
  const JobId id = v.job.id;
  if (v.job.state != JobState::kRunning || v.ranks.empty() || v.job.attempts.empty()) {
    return FailedPrecondition("job " + std::to_string(id) + " is " +
                              std::string(JobStateName(v.job.state)) +
                              "; only a Running job can be profiled");
  }
  std::vector<ProfileTarget> targets;
  for (const RankView& r : v.ranks) {
    if (rank && *rank != r.rank) continue;
    targets.push_back({r.rank, r.node});
  }
  if (targets.empty()) {
    return InvalidArgument("profile.rank: job " + std::to_string(id) + " has ranks 0.." +
                           std::to_string(v.ranks.size() - 1) + ", got " + std::to_string(*rank));
  }
  return targets;
}

ordered_json RenderProfile(const ProfileRequest& r) {
  ordered_json ranks = ordered_json::array();
  for (const ProfileRank& k : r.ranks) {
    ordered_json rank = {{"rank", k.rank},
                         {"node", k.node},
                         {"state", ProfileStateName(k.state)},
                         {"bytes", k.bytes},
                         {"updated_ms", k.updated.time_since_epoch().count()}};
    if (!k.message.empty()) rank["message"] = k.message;
    ranks.push_back(std::move(rank));
  }
  return {{"id", r.id},
          {"job", r.job},
          {"attempt", r.attempt},
          {"steps", r.steps},
          {"created_ms", r.created.time_since_epoch().count()},
          {"created_by", r.created_by},
          {"done", r.Done()},
          {"ranks", std::move(ranks)}};
}

namespace {

Status NoProfiles() { return Unavailable("this server keeps no profiles"); }

// The job's attempt that has not ended, if any: ranks of other attempts cannot answer.
std::optional<int32_t> OpenAttempt(const Job& job) {
  if (job.attempts.empty() || job.attempts.back().end_time) return std::nullopt;
  return job.attempts.back().index;
}

Result<Reply> RequestProfile(const ApiServices& s, const Request& req, Call& call) {
  TY_ASSIGN_OR_RETURN(ProfileParams p, ParseProfileParams(req.body));
  TY_ASSIGN_OR_RETURN(JobView v,
                      VisibleJob(s.cluster, req.matches[1].str(), call, Action::kManageJob));
  if (s.profiles == nullptr) return NoProfiles();
  TY_ASSIGN_OR_RETURN(std::vector<ProfileTarget> targets, ProfileTargets(v, p.rank));
  std::vector<int32_t> ranks;
  for (const ProfileTarget& t : targets) ranks.push_back(t.rank);
  const JobId id = v.job.id;
  const int32_t attempt = v.job.attempts.back().index;
  TY_ASSIGN_OR_RETURN(ProfileRequest created,
                      s.profiles->Create(id, attempt, p.steps, targets, call.who.Actor()));
  if (Status sent = s.cluster.SendProfile(id, attempt, ranks, created.id, p.steps); !sent.ok()) {
    // The job stopped meanwhile: the request is kept, failed, saying so.
    s.profiles->Abandon(id, created.id, "not sent to the ranks: " + sent.message()).IgnoreError();
    return sent;
  }
  return Reply::Json(201, RenderProfile(created));
}

Result<Reply> ListProfiles(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(CheckParams(req.params, {}));
  TY_ASSIGN_OR_RETURN(JobView v,
                      VisibleJob(s.cluster, req.matches[1].str(), call, Action::kReadJobs));
  if (s.profiles == nullptr) return NoProfiles();
  TY_ASSIGN_OR_RETURN(auto list, s.profiles->List(v.job.id, OpenAttempt(v.job)));
  ordered_json out = ordered_json::array();
  for (const ProfileRequest& r : list) out.push_back(RenderProfile(r));
  return Reply::Json(200, ordered_json{{"profiles", std::move(out)}});
}

// The trace of one rank, or every stored rank's merged into one (FailedPrecondition
// when none has stored its trace yet).
Result<std::string> ProfileTrace(ProfileStore& profiles, const ProfileRequest& r,
                                 std::optional<int32_t> rank) {
  if (rank) return profiles.ReadTrace(r.job, r.id, *rank);
  std::vector<int32_t> stored;
  std::string states;
  for (const ProfileRank& k : r.ranks) {
    if (k.state == ProfileState::kStored) stored.push_back(k.rank);
    states += (states.empty() ? "" : ", ") + std::string("rank ") + std::to_string(k.rank) + " " +
              std::string(ProfileStateName(k.state));
  }
  if (stored.empty()) {
    return FailedPrecondition("no rank of profile " + r.id + " has stored its trace yet (" +
                              states + ")");
  }
  return MergeProfileTraces(r.id, stored,
                            [&](int32_t k) { return profiles.ReadTrace(r.job, r.id, k); });
}

Result<Reply> GetProfile(const ApiServices& s, const Request& req, Call& call) {
  TY_RETURN_IF_ERROR(CheckParams(req.params, {"rank"}));
  TY_ASSIGN_OR_RETURN(JobView v,
                      VisibleJob(s.cluster, req.matches[1].str(), call, Action::kReadJobs));
  if (s.profiles == nullptr) return NoProfiles();
  TY_ASSIGN_OR_RETURN(ProfileRequest r,
                      s.profiles->Get(v.job.id, req.matches[2].str(), OpenAttempt(v.job)));
  std::optional<int32_t> rank;
  if (auto text = Param(req.params, "rank")) {
    TY_ASSIGN_OR_RETURN(int64_t n, ParseInt("rank", *text, 0, 100'000'000));
    rank = static_cast<int32_t>(n);
  }
  TY_ASSIGN_OR_RETURN(std::string trace, ProfileTrace(*s.profiles, r, rank));
  return Reply{200, std::move(trace), "application/json", {}};  // up to 64 MiB a rank
}

}  // namespace

void InstallProfileRoutes(Routes& routes, const ApiServices& s) {
  routes.User("POST", V1(R"(/jobs/([^/]+)/profile)"), Action::kManageJob, Bind(s, RequestProfile));
  routes.User("GET", V1(R"(/jobs/([^/]+)/profiles)"), Action::kReadJobs, Bind(s, ListProfiles));
  routes.User("GET", V1(R"(/jobs/([^/]+)/profiles/([^/]+))"), Action::kReadJobs,
              Bind(s, GetProfile));
}

}  // namespace trainyard::server
