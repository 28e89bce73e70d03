#include "core/spec_paths.h"

#include <algorithm>
#include <cstdio>

#include "core/names.h"

namespace trainyard {
namespace {

std::string JoinDirs(const std::vector<std::string>& dirs) {
  std::string out;
  for (const std::string& d : dirs) out += (out.empty() ? "" : ", ") + d;
  return out;
}

bool IsAbsolute(std::string_view p) { return !p.empty() && p.front() == '/'; }

// Where `value` of `field` points, as a normalised absolute path: relative paths are
// relative to working_dir. Empty when that cannot be known here (relative to the
// agent's working directory).
std::string Resolve(std::string_view field, std::string_view value, const JobSpec& spec) {
  if (IsAbsolute(value)) return NormalizePath(value);
  if (field != "working_dir" && IsAbsolute(spec.working_dir)) {
    return NormalizePath(spec.working_dir + "/" + std::string(value));
  }
  return "";
}

// The problem with one path of a job of spec.tenant under `policy`, or "".
std::string PolicyProblem(std::string_view field, std::string_view value, const JobSpec& spec,
                          const PathPolicy& policy) {
  if (std::string p = PathTextProblem(value); !p.empty()) {
    return p + ", got " + QuoteForMessage(value);
  }
  const std::string path = Resolve(field, value, spec);
  if (path.empty()) {
    if (policy.allowed_dirs.empty()) return "";
    return "is relative to the agent's working directory, which the server cannot check "
           "against the directories the admin allows (" +
           JoinDirs(policy.allowed_dirs) + "); give an absolute path in one of them" +
           (field == "working_dir" ? "" : " or set working_dir to one") + ", got " +
           QuoteForMessage(value);
  }
  const std::string shown = QuoteForMessage(value) + (path != value ? " (" + path + ")" : "");
  std::string own;
  if (!policy.checkpoint_root.empty()) {
    own = NormalizePath(policy.checkpoint_root + "/" + spec.tenant);
    if (PathWithin(path, policy.checkpoint_root) && !PathWithin(path, own)) {
      return "lies in the checkpoint root " + policy.checkpoint_root + " outside tenant " +
             spec.tenant + "'s part of it; jobs of tenant " + spec.tenant + " may use only " + own +
             "/..., got " + shown;
    }
  }
  if (policy.allowed_dirs.empty() || (!own.empty() && PathWithin(path, own))) return "";
  for (const std::string& dir : policy.allowed_dirs) {
    if (PathWithin(path, dir)) return "";
  }
  return "must lie in one of the directories the admin allows (" + JoinDirs(policy.allowed_dirs) +
         "), got " + shown;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> SpecPaths(const JobSpec& spec) {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](std::string field, const std::string& value) {
    if (!value.empty()) out.emplace_back(std::move(field), value);
  };
  add("working_dir", spec.working_dir);
  add("checkpoint.dir", spec.checkpoint.dir);
  add("output", spec.output);
  add("error", spec.error);
  for (size_t i = 0; i < spec.mounts.size(); ++i) {
    if (IsAbsolute(spec.mounts[i].source)) {
      add("mounts[" + std::to_string(i) + "].source", spec.mounts[i].source);
    }
  }
  return out;
}

std::string PathTextProblem(std::string_view path) {
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    const bool c1 = c == 0xC2 && i + 1 < path.size() &&
                    static_cast<unsigned char>(path[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(path[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7f || c1) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c1 ? static_cast<unsigned char>(path[i + 1]) : c);
      return std::string("must be printable text, without control characters (found ") +
             (c1 ? "U+00" + std::string(code + 2) : std::string("byte ") + code) + ")";
    }
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (path.substr(start, end - start) == "..") {
      return "must not have a \"..\" component; name the directory itself";
    }
    start = end + 1;
  }
  return "";
}

std::string NormalizePath(std::string_view path) {
  std::string out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (!part.empty() && part != ".") {
      if (!out.empty() || IsAbsolute(path)) out += '/';
      out += part;
    }
    start = end + 1;
  }
  if (out.empty()) return IsAbsolute(path) ? "/" : ".";
  return out;
}

bool PathWithin(std::string_view path, std::string_view dir) {
  if (dir == "/") return IsAbsolute(path);
  return path.starts_with(dir) && (path.size() == dir.size() || path[dir.size()] == '/');
}

Result<std::vector<std::string>> ParseAllowedDirs(std::string_view flag, std::string_view text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  const std::string what = " (DIR[,DIR...], absolute paths)";
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view dir = text.substr(start, end - start);
    if (dir.empty()) {
      return InvalidArgument(std::string(flag) + ": empty directory in " + QuoteForMessage(text) +
                             what);
    }
    if (!IsAbsolute(dir)) {
      return InvalidArgument(std::string(flag) + ": must be absolute paths" + what + ", got " +
                             QuoteForMessage(dir));
    }
    if (std::string p = PathTextProblem(dir); !p.empty()) {
      return InvalidArgument(std::string(flag) + ": " + p + ", got " + QuoteForMessage(dir));
    }
    std::string normal = NormalizePath(dir);
    if (std::find(out.begin(), out.end(), normal) == out.end()) out.push_back(std::move(normal));
    start = end + 1;
  }
  return out;
}

std::string DefaultCheckpointDir(std::string_view root, std::string_view tenant, int64_t job_id) {
  return NormalizePath(std::string(root) + "/" + std::string(tenant) + "/" +
                       std::to_string(job_id));
}

std::vector<Diagnostic> CheckSpecPaths(const JobSpec& spec, const PathPolicy& policy) {
  std::vector<Diagnostic> out;
  for (const auto& [field, value] : SpecPaths(spec)) {
    if (std::string p = PolicyProblem(field, value, spec, policy); !p.empty()) {
      out.push_back(Diagnostic{"", 0, std::string(field), std::move(p)});
    }
  }
  return out;
}

Status CheckReportedCheckpoint(std::string_view path, const JobSpec& spec,
                               const PathPolicy& policy) {
  if (std::string p = PolicyProblem("checkpoint path", path, spec, policy); !p.empty()) {
    return InvalidArgument("checkpoint path: " + p);
  }
  return Status::Ok();
}

}  // namespace trainyard
