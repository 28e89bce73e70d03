#include "agent/profile.h"

#include <filesystem>

#include "agent/launcher.h"

namespace trainyard::agent {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<ProfileRecord> ParseProfileRecord(const json& line) {
  if (!line.is_object()) return std::nullopt;
  auto kind = line.find("kind");
  if (kind == line.end() || *kind != "profile") return std::nullopt;
  auto id = line.find("id");
  auto status = line.find("status");
  if (id == line.end() || !id->is_string() || status == line.end() || !status->is_string()) {
    return std::nullopt;
  }
  ProfileRecord r;
  r.id = id->get<std::string>();
  r.status = status->get<std::string>();
  if (r.status != "recording" && r.status != "stored" && r.status != "failed") return std::nullopt;
  if (auto path = line.find("path"); path != line.end() && path->is_string()) {
    r.path = path->get<std::string>();
  }
  if (auto message = line.find("message"); message != line.end() && message->is_string()) {
    r.message = message->get<std::string>();
  }
  if (r.status == "stored" && r.path.empty()) return std::nullopt;
  return r;
}

Status WriteProfileRequest(const std::string& file, const std::string& id, int32_t steps,
                           const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("profile directory " + dir + ": " + ec.message());
  if (Status s =
          WriteFileAtomically(file, json{{"id", id}, {"steps", steps}, {"dir", dir}}.dump() + "\n");
      !s.ok()) {
    return Internal("profile request file " + s.message());
  }
  return Status::Ok();
}

Result<std::string> ProfileTracePath(const std::string& path, const std::string& dir) {
  TY_ASSIGN_OR_RETURN(std::string real_dir, ResolvePath(dir, "/"));
  TY_ASSIGN_OR_RETURN(std::string resolved, ResolvePath(path, real_dir));
  if (!resolved.starts_with(real_dir + "/")) {
    return FailedPrecondition("the trace " + path + " is not in the task's TRAINYARD_PROFILE_DIR " +
                              dir + (resolved == path ? "" : " (it resolves to " + resolved + ")"));
  }
  std::error_code ec;
  if (!fs::is_regular_file(resolved, ec)) {
    return FailedPrecondition("the trace " + path + " is not a file" +
                              (ec ? ": " + ec.message() : ""));
  }
  return resolved;
}

}  // namespace trainyard::agent
