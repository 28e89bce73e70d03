#include "server/profiles.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/names.h"
#include "server/files.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr size_t kMaxMessageBytes = 2000;

std::optional<int64_t> Number(std::string_view text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty() || v < 0) {
    return std::nullopt;
  }
  return v;
}

std::string Clip(std::string message) {
  if (message.size() > kMaxMessageBytes) message = message.substr(0, kMaxMessageBytes) + "...";
  return message;
}

int64_t Ms(Timestamp t) { return t.time_since_epoch().count(); }

// "64.0 MiB": sizes in messages, to one decimal (FormatMemory is exact, so 64 MiB + 1
// would read 67108865).
std::string MiB(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / kMiB);
  return text;
}

ordered_json ToJson(const ProfileRequest& r) {
  ordered_json ranks = ordered_json::array();
  for (const ProfileRank& k : r.ranks) {
    ranks.push_back({{"rank", k.rank},
                     {"node", k.node},
                     {"state", ProfileStateName(k.state)},
                     {"message", k.message},
                     {"superseded_by", k.superseded_by},
                     {"bytes", k.bytes},
                     {"updated_ms", Ms(k.updated)}});
  }
  return {{"id", r.id},
          {"job", r.job},
          {"attempt", r.attempt},
          {"steps", r.steps},
          {"created_ms", Ms(r.created)},
          {"created_by", r.created_by},
          {"ranks", std::move(ranks)}};
}

std::optional<ProfileState> StateOf(std::string_view name) {
  for (ProfileState s : {ProfileState::kRequested, ProfileState::kRecording, ProfileState::kStored,
                         ProfileState::kFailed}) {
    if (ProfileStateName(s) == name) return s;
  }
  return std::nullopt;
}

// request.json back into a request; nullopt when it is not one (then it is skipped).
std::optional<ProfileRequest> FromJson(const json& j) {
  try {
    ProfileRequest r;
    r.id = j.at("id").get<std::string>();
    r.job = j.at("job").get<JobId>();
    r.attempt = j.at("attempt").get<int32_t>();
    r.steps = j.at("steps").get<int32_t>();
    r.created = Timestamp(Duration(j.at("created_ms").get<int64_t>()));
    r.created_by = j.value("created_by", "");
    for (const json& k : j.at("ranks")) {
      ProfileRank rank;
      rank.rank = k.at("rank").get<int32_t>();
      rank.node = k.value("node", "");
      auto state = StateOf(k.at("state").get<std::string>());
      if (!state) return std::nullopt;
      rank.state = *state;
      rank.message = k.value("message", "");
      rank.superseded_by = k.value("superseded_by", "");
      rank.bytes = k.value("bytes", int64_t{0});
      rank.updated = Timestamp(Duration(k.value("updated_ms", int64_t{0})));
      r.ranks.push_back(std::move(rank));
    }
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// Empty when `path` holds a JSON object or array, else why not. SAX parsing: nothing
// of the document is kept in memory.
std::string CheckTraceJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read the uploaded trace: " + std::string(std::strerror(errno));
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  if (first != '{' && first != '[') {
    return "it is not Chrome trace JSON (an object with traceEvents, or an array of events)";
  }
  in.clear();
  in.seekg(0);
  if (!json::accept(in)) return "it is not valid JSON";
  return "";
}

std::string RankName(int32_t rank) { return "rank " + std::to_string(rank); }

}  // namespace

std::string_view ProfileStateName(ProfileState s) {
  switch (s) {
    case ProfileState::kRequested:
      return "requested";
    case ProfileState::kRecording:
      return "recording";
    case ProfileState::kStored:
      return "stored";
    case ProfileState::kFailed:
      return "failed";
  }
  return "unknown";
}

bool IsDone(ProfileState s) { return s == ProfileState::kStored || s == ProfileState::kFailed; }

bool ProfileRequest::Done() const {
  return std::all_of(ranks.begin(), ranks.end(),
                     [](const ProfileRank& r) { return IsDone(r.state); });
}

std::optional<int64_t> ProfileSeq(std::string_view id, JobId job) {
  const std::string prefix = "p-" + std::to_string(job) + "-";
  if (!id.starts_with(prefix)) return std::nullopt;
  auto seq = Number(id.substr(prefix.size()));
  if (!seq || *seq < 1 || id.substr(prefix.size()).starts_with('0')) return std::nullopt;
  return seq;
}

ProfileStore::ProfileStore(std::string root, const Clock* clock)
    : root_(std::move(root)), clock_(clock) {}

std::string ProfileStore::RequestDir(JobId job, const std::string& id) const {
  return root_ + "/" + std::to_string(job) + "/" + id;
}

std::string ProfileStore::TracePath(JobId job, const std::string& id, int32_t rank,
                                    bool part) const {
  return RequestDir(job, id) + "/rank-" + std::to_string(rank) + (part ? ".part" : ".json");
}

ProfileStore::JobProfiles& ProfileStore::LoadLocked(JobId job) {
  auto [it, added] = jobs_.try_emplace(job);
  if (!added) return it->second;
  JobProfiles& p = it->second;
  std::error_code ec;
  fs::directory_iterator dir(root_ + "/" + std::to_string(job), ec), end;
  for (; !ec && dir != end; dir.increment(ec)) {
    const std::string name = dir->path().filename().string();
    auto seq = ProfileSeq(name, job);
    if (!seq) continue;
    // A number once handed out is never handed out again, even if its request is gone.
    p.last_seq = std::max(p.last_seq, *seq);
    std::ifstream in(dir->path() / "request.json");
    json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (auto r = FromJson(j); r && r->id == name && r->job == job) {
      p.requests.emplace(*seq, std::move(*r));
    }
  }
  return p;
}

Result<ProfileRequest*> ProfileStore::FindLocked(JobId job, const std::string& id) {
  auto seq = ProfileSeq(id, job);
  JobProfiles& p = LoadLocked(job);
  auto it = seq ? p.requests.find(*seq) : p.requests.end();
  if (it == p.requests.end()) {
    return NotFound("job " + std::to_string(job) + " has no profile " + QuoteForMessage(id) +
                    " (trainyard profile " + std::to_string(job) + " --list)");
  }
  return &it->second;
}

Status ProfileStore::WriteLocked(const ProfileRequest& r) {
  return WriteFileAtomically(RequestDir(r.job, r.id) + "/request.json", ToJson(r).dump(2) + "\n");
}

Status ProfileStore::SaveLocked(ProfileRequest& current, ProfileRequest next) {
  TY_RETURN_IF_ERROR(WriteLocked(next));
  current = std::move(next);
  return Status::Ok();
}

Result<ProfileRequest> ProfileStore::Create(JobId job, int32_t attempt, int32_t steps,
                                            const std::vector<ProfileTarget>& ranks,
                                            const std::string& created_by) {
  if (ranks.empty()) return InvalidArgument("a profile asks at least one rank");
  if (steps < 1 || steps > kMaxProfileSteps) {
    return InvalidArgument("steps: must be 1.." + std::to_string(kMaxProfileSteps) + ", got " +
                           std::to_string(steps));
  }
  std::lock_guard lock(mu_);
  JobProfiles& p = LoadLocked(job);
  const Timestamp now = clock_->Now();
  ProfileRequest r;
  r.job = job;
  r.attempt = attempt;
  r.steps = steps;
  r.created = now;
  r.created_by = created_by;
  r.id = "p-" + std::to_string(job) + "-" + std::to_string(p.last_seq + 1);
  std::set<int32_t> asked;
  for (const ProfileTarget& t : ranks) {
    if (!asked.insert(t.rank).second) {
      return InvalidArgument("rank " + std::to_string(t.rank) + " is asked twice");
    }
    r.ranks.push_back({t.rank, t.node, ProfileState::kRequested, "", "", 0, now});
  }
  std::sort(r.ranks.begin(), r.ranks.end(),
            [](const ProfileRank& a, const ProfileRank& b) { return a.rank < b.rank; });
  ++p.last_seq;  // taken even if the write below fails: ids are never reused
  TY_RETURN_IF_ERROR(WriteLocked(r));
  for (auto& [seq, older] : p.requests) {
    if (older.attempt != attempt) continue;
    ProfileRequest next = older;
    bool changed = false;
    for (ProfileRank& k : next.ranks) {
      if (k.state != ProfileState::kRequested || !asked.contains(k.rank)) continue;
      k.state = ProfileState::kFailed;
      k.superseded_by = r.id;
      k.message = "superseded by " + r.id + " before " + RankName(k.rank) + " began recording";
      k.updated = now;
      changed = true;
    }
    if (changed) TY_RETURN_IF_ERROR(SaveLocked(older, std::move(next)));
  }
  p.requests.emplace(p.last_seq, r);
  return r;
}

Status ProfileStore::Abandon(JobId job, const std::string& id, const std::string& message) {
  std::lock_guard lock(mu_);
  TY_ASSIGN_OR_RETURN(ProfileRequest * r, FindLocked(job, id));
  ProfileRequest next = *r;
  for (ProfileRank& k : next.ranks) {
    if (IsDone(k.state)) continue;
    k.state = ProfileState::kFailed;
    k.message = Clip(message);
    k.updated = clock_->Now();
  }
  return SaveLocked(*r, std::move(next));
}

Status ProfileStore::SettleLocked(ProfileRequest& r, std::optional<int32_t> open_attempt) {
  const Timestamp now = clock_->Now();
  const bool open = open_attempt && *open_attempt == r.attempt;
  const std::string attempt = "attempt " + std::to_string(r.attempt);
  ProfileRequest next = r;
  bool changed = false;
  for (ProfileRank& k : next.ranks) {
    std::string why;
    if (k.state == ProfileState::kRequested && !open) {
      why = attempt + " ended before " + RankName(k.rank) + " began recording";
    } else if (k.state == ProfileState::kRequested && now - r.created > kProfileStartTimeout) {
      why = RankName(k.rank) + " did not begin recording within " +
            FormatDuration(kProfileStartTimeout) +
            ": profiles are recorded by the Trainyard Python SDK at trainyard.log(step=...) "
            "calls; does the job log every step through it?";
    } else if (k.state == ProfileState::kRecording && !open &&
               now - k.updated > kProfileUploadGrace) {
      why = attempt + " ended before " + RankName(k.rank) + "'s trace was uploaded";
    }
    if (why.empty()) continue;
    k.state = ProfileState::kFailed;
    k.message = why;
    k.updated = now;
    changed = true;
    std::error_code ec;
    fs::remove(TracePath(r.job, r.id, k.rank, /*part=*/true), ec);
  }
  if (!changed) return Status::Ok();
  return SaveLocked(r, std::move(next));
}

Result<std::vector<ProfileRequest>> ProfileStore::List(JobId job,
                                                       std::optional<int32_t> open_attempt) {
  std::lock_guard lock(mu_);
  std::vector<ProfileRequest> out;
  for (auto& [seq, r] : LoadLocked(job).requests) {
    TY_RETURN_IF_ERROR(SettleLocked(r, open_attempt));
    out.push_back(r);
  }
  return out;
}

Result<ProfileRequest> ProfileStore::Get(JobId job, const std::string& id,
                                         std::optional<int32_t> open_attempt) {
  std::lock_guard lock(mu_);
  TY_ASSIGN_OR_RETURN(ProfileRequest * r, FindLocked(job, id));
  TY_RETURN_IF_ERROR(SettleLocked(*r, open_attempt));
  return *r;
}

Result<ProfileReportReply> ProfileStore::Report(const ProfileReport& report) {
  std::lock_guard lock(mu_);
  TY_ASSIGN_OR_RETURN(ProfileRequest * r, FindLocked(report.job, report.id));
  auto k = std::find_if(r->ranks.begin(), r->ranks.end(),
                        [&](const ProfileRank& x) { return x.rank == report.rank; });
  if (k == r->ranks.end() || k->node != report.node) {
    return NotFound("profile " + r->id + " did not ask " + RankName(report.rank) + " on node " +
                    QuoteForMessage(report.node));
  }
  if (report.attempt != r->attempt) {
    return FailedPrecondition("profile " + r->id + " was asked of attempt " +
                              std::to_string(r->attempt) + ", not " +
                              std::to_string(report.attempt));
  }
  const size_t index = static_cast<size_t>(k - r->ranks.begin());
  const Timestamp now = clock_->Now();
  if (k->state == ProfileState::kStored) return ProfileReportReply{k->bytes, k->state, ""};
  if (k->state == ProfileState::kFailed) {
    if (report.kind == ProfileReport::Kind::kFailed) {
      return ProfileReportReply{0, k->state, k->message};
    }
    if (k->superseded_by.empty()) {
      return FailedPrecondition("profile " + r->id + " of " + RankName(k->rank) +
                                " has failed: " + k->message);
    }
  }
  ProfileRequest next = *r;
  ProfileRank& rank = next.ranks[index];
  switch (report.kind) {
    case ProfileReport::Kind::kRecording:
      if (rank.state == ProfileState::kRecording)
        return ProfileReportReply{rank.bytes, rank.state, ""};
      rank.state = ProfileState::kRecording;
      rank.message.clear();
      rank.superseded_by.clear();
      rank.updated = now;
      TY_RETURN_IF_ERROR(SaveLocked(*r, std::move(next)));
      return ProfileReportReply{r->ranks[index].bytes, ProfileState::kRecording, ""};
    case ProfileReport::Kind::kFailed: {
      rank.state = ProfileState::kFailed;
      rank.message = Clip(report.message.empty() ? "the job's SDK could not record a profile"
                                                 : report.message);
      rank.superseded_by.clear();
      rank.updated = now;
      std::error_code ec;
      fs::remove(TracePath(r->job, r->id, rank.rank, /*part=*/true), ec);
      TY_RETURN_IF_ERROR(SaveLocked(*r, std::move(next)));
      return ProfileReportReply{0, ProfileState::kFailed, r->ranks[index].message};
    }
    case ProfileReport::Kind::kChunk:
      return AppendLocked(*r, index, report);
  }
  return Internal("unknown profile report kind");
}

Result<ProfileReportReply> ProfileStore::AppendLocked(ProfileRequest& r, size_t index,
                                                      const ProfileReport& report) {
  const Timestamp now = clock_->Now();
  const int32_t rank = r.ranks[index].rank;
  const std::string part = TracePath(r.job, r.id, rank, /*part=*/true);
  ProfileRequest next = r;
  ProfileRank& k = next.ranks[index];
  auto fail = [&](std::string why) -> Status {
    k.state = ProfileState::kFailed;
    k.message = Clip(std::move(why));
    k.superseded_by.clear();
    k.updated = now;
    std::error_code ec;
    fs::remove(part, ec);
    return SaveLocked(r, next);
  };
  if (report.total_bytes > kMaxProfileTraceBytes) {
    const std::string why = "the trace of " + RankName(rank) + " is " + MiB(report.total_bytes) +
                            "; the server keeps at most " + MiB(kMaxProfileTraceBytes) +
                            " per rank (record fewer steps: trainyard profile --steps)";
    TY_RETURN_IF_ERROR(fail(why));
    return ResourceExhausted(why);
  }
  const int64_t size = FileSize(part);
  const bool was_recording = k.state == ProfileState::kRecording && k.superseded_by.empty();
  if (report.offset != size) return ProfileReportReply{size, r.ranks[index].state, ""};
  if (report.offset + static_cast<int64_t>(report.data.size()) > report.total_bytes) {
    return InvalidArgument("profile chunk: offset " + std::to_string(report.offset) + " + " +
                           std::to_string(report.data.size()) + " bytes is past total_bytes " +
                           std::to_string(report.total_bytes));
  }
  TY_RETURN_IF_ERROR(AppendFile(part, report.data));
  k.state = ProfileState::kRecording;
  k.message.clear();
  k.superseded_by.clear();
  k.bytes = size + static_cast<int64_t>(report.data.size());
  k.updated = now;
  if (k.bytes < report.total_bytes) {
    // Progress alone is not worth a rewrite of request.json; a change of state is.
    if (was_recording) {
      r = std::move(next);
    } else {
      TY_RETURN_IF_ERROR(SaveLocked(r, std::move(next)));
    }
    return ProfileReportReply{r.ranks[index].bytes, ProfileState::kRecording, ""};
  }
  if (std::string why = CheckTraceJson(part); !why.empty()) {
    TY_RETURN_IF_ERROR(fail("the trace " + RankName(rank) + " uploaded was refused: " + why));
    return ProfileReportReply{0, ProfileState::kFailed, r.ranks[index].message};
  }
  std::error_code ec;
  fs::rename(part, TracePath(r.job, r.id, rank, /*part=*/false), ec);
  if (ec) return Internal("cannot store the trace of " + RankName(rank) + ": " + ec.message());
  k.state = ProfileState::kStored;
  TY_RETURN_IF_ERROR(SaveLocked(r, std::move(next)));
  return ProfileReportReply{r.ranks[index].bytes, ProfileState::kStored, ""};
}

Result<std::string> ProfileStore::ReadTrace(JobId job, const std::string& id, int32_t rank) {
  {
    std::lock_guard lock(mu_);
    TY_ASSIGN_OR_RETURN(ProfileRequest * r, FindLocked(job, id));
    auto k = std::find_if(r->ranks.begin(), r->ranks.end(),
                          [&](const ProfileRank& x) { return x.rank == rank; });
    if (k == r->ranks.end()) {
      return NotFound("profile " + id + " did not ask " + RankName(rank));
    }
    if (k->state != ProfileState::kStored) {
      return FailedPrecondition("the trace of " + RankName(rank) + " in profile " + id +
                                " is not stored: it is " + std::string(ProfileStateName(k->state)) +
                                (k->message.empty() ? "" : ": " + k->message));
    }
  }
  const std::string path = TracePath(job, id, rank, /*part=*/false);
  std::ifstream in(path, std::ios::binary);
  if (!in) return DataLoss("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Status ProfileStore::DeleteJob(JobId job) {
  std::lock_guard lock(mu_);
  jobs_.erase(job);
  std::error_code ec;
  fs::remove_all(root_ + "/" + std::to_string(job), ec);
  if (ec)
    return Internal("cannot delete the profiles of job " + std::to_string(job) + ": " +
                    ec.message());
  return Status::Ok();
}

Result<std::string> MergeProfileTraces(const std::string& id, const std::vector<int32_t>& ranks,
                                       const std::function<Result<std::string>(int32_t)>& read,
                                       int64_t max_bytes) {
  std::string out = R"({"traceEvents":[)";
  bool first = true;
  auto add = [&](const json& event) {
    if (!first) out += ",";
    first = false;
    out += event.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  for (int32_t rank : ranks) {
    add({{"name", "process_name"},
         {"ph", "M"},
         {"pid", rank},
         {"tid", 0},
         {"args", {{"name", RankName(rank)}}}});
    add({{"name", "process_sort_index"},
         {"ph", "M"},
         {"pid", rank},
         {"tid", 0},
         {"args", {{"sort_index", rank}}}});
  }
  for (int32_t rank : ranks) {
    TY_ASSIGN_OR_RETURN(std::string text, read(rank));
    json trace = json::parse(text, nullptr, /*allow_exceptions=*/false);
    text.clear();
    text.shrink_to_fit();
    json* events = &trace;
    if (trace.is_object()) {
      auto it = trace.find("traceEvents");
      events = it == trace.end() ? nullptr : &*it;
    }
    if (events == nullptr || !events->is_array()) {
      return DataLoss("the stored trace of " + RankName(rank) + " in profile " + id +
                      " is not Chrome trace JSON");
    }
    for (json& e : *events) {
      if (!e.is_object()) continue;
      auto ph = e.find("ph");
      auto name = e.find("name");
      if (ph != e.end() && *ph == "M" && name != e.end() &&
          (*name == "process_name" || *name == "process_sort_index" || *name == "process_labels")) {
        continue;
      }
      e["pid"] = rank;
      add(e);
      if (static_cast<int64_t>(out.size()) > max_bytes) {
        return ResourceExhausted("the merged trace of profile " + id + " would be over " +
                                 MiB(max_bytes) +
                                 "; fetch the ranks one at a time (?rank=R; trainyard profile "
                                 "--get " +
                                 id + " --rank R)");
      }
    }
  }
  out += R"(],"displayTimeUnit":"ms","otherData":)";
  out += ordered_json{{"profile", id}, {"ranks", ranks}}.dump();
  out += "}\n";
  return out;
}

}  // namespace trainyard::server
