// The paths a job spec names, and the rules that keep them where the admin allows.
//
// A spec names four paths: working_dir (where its ranks start), checkpoint.dir
// (TRAINYARD_CHECKPOINT_DIR), output and error (stdout/stderr templates), and the host
// paths its containers mount (mounts[i].source; volume names are the agent's own). A relative
// path is relative to the rank's working directory: working_dir when it is set, else
// the agent's own working directory. Three layers check them:
//   1. every spec, in ValidateSpec (so `trainyard validate` too): no ".." component and
//      no control characters (PathTextProblem);
//   2. the server, at submission (CheckSpecPaths): lexically, after normalising, every
//      path lies in one of the server's --allowed-dirs when it has any, and never in
//      another tenant's subtree of the checkpoint root (<root>/<tenant>/...);
//   3. the agent, at launch, after resolving symlinks (agent/launcher.h), so that a
//      symlink inside an allowed directory that points outside it is refused.
// The server cannot see the agents' filesystems, so layer 2 is lexical only.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/job_spec.h"
#include "core/status.h"

namespace trainyard {

// The paths `spec` names, as (field, value) in the order above; unset ones left out.
std::vector<std::pair<std::string, std::string>> SpecPaths(const JobSpec& spec);

// What is wrong with `path` as a path anywhere in Trainyard ("has a \"..\" component",
// "holds a control character"), or "" when nothing is. Checks text only.
std::string PathTextProblem(std::string_view path);

// The lexically normal form of `path`: "//a/./b/" -> "/a/b", "./x" -> "x", "/" -> "/".
// ".." components are kept as they are (they are refused before this matters).
std::string NormalizePath(std::string_view path);

// True when `path` is `dir` or lies inside it, comparing whole components ("/data2"
// is not inside "/data"). Both absolute and normalised.
bool PathWithin(std::string_view path, std::string_view dir);

// Parses a "DIR[,DIR...]" flag value: each an absolute path without ".." components
// or control characters. Returns them normalised, duplicates removed; an empty text
// gives an empty list. Errors name `flag`, the bad value and what is valid.
Result<std::vector<std::string>> ParseAllowedDirs(std::string_view flag, std::string_view text);

// What the server enforces on the paths of a submitted spec.
struct PathPolicy {
  // Normalised absolute directories every path must lie in; empty: anywhere.
  std::vector<std::string> allowed_dirs;
  // Normalised absolute root of the default checkpoint dirs; a tenant's jobs may use
  // <root>/<their tenant>/... (allowed even when not under allowed_dirs) and nothing
  // else under the root. Empty: no such rule.
  std::string checkpoint_root;
};

// The checkpoint dir of a job that names none: <root>/<tenant>/<job id>. The same for
// every attempt of the job, so a restart finds what the last attempt wrote.
std::string DefaultCheckpointDir(std::string_view root, std::string_view tenant, int64_t job_id);

// Checks every path of `spec` (normalised and valid, so text-clean) against `policy`.
// Returns one Diagnostic per bad field naming the value and what would be valid.
std::vector<Diagnostic> CheckSpecPaths(const JobSpec& spec, const PathPolicy& policy);

// Checks a checkpoint path reported by a running job of `spec` (it becomes the next
// attempt's TRAINYARD_RESUME_FROM) by the same rules as the spec's own paths.
// InvalidArgument naming the path and what is valid when it breaks one.
Status CheckReportedCheckpoint(std::string_view path, const JobSpec& spec,
                               const PathPolicy& policy);

}  // namespace trainyard
