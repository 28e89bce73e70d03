// On-demand profiles of running jobs (docs/runs.md, "Profiling"; server/profiles.h).
//
//   POST /api/v1/jobs/{id}/profile            ask the ranks for a profile ({"steps", "rank"})
//   GET  /api/v1/jobs/{id}/profiles           the job's profile requests
//   GET  /api/v1/jobs/{id}/profiles/{profile} the traces of the ranks, merged (?rank: one's)
//
// The agents' uploads (POST /api/v1/agent/profile) are in server/api/agent.h. Without a
// ProfileStore (ApiServices::profiles) every route answers 503.
//
// Thread-safety: pure functions, and handlers that call thread-safe services.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "server/api/routes.h"
#include "server/api/services.h"
#include "server/cluster.h"
#include "server/profiles.h"

namespace trainyard::server {

// POST /jobs/{id}/profile body: {"steps": 1..kMaxProfileSteps (default
// kDefaultProfileSteps), "rank": R (default: every rank)}; an empty body takes both
// defaults.
struct ProfileParams {
  int32_t steps = kDefaultProfileSteps;
  std::optional<int32_t> rank;
};
Result<ProfileParams> ParseProfileParams(std::string_view body);

// The ranks of a Running job to profile: `rank`, or all. FailedPrecondition when the
// job is not Running; InvalidArgument for a rank it does not have.
Result<std::vector<ProfileTarget>> ProfileTargets(const JobView& job, std::optional<int32_t> rank);

nlohmann::ordered_json RenderProfile(const ProfileRequest& request);

void InstallProfileRoutes(Routes& routes, const ApiServices& services);

}  // namespace trainyard::server
