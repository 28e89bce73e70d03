// Reading a request: its query parameters and JSON body into values, with errors that
// name the field, the value and what would be valid (400 by HttpStatusFor). Shared by
// every resource file of the API (server/api/*.cc); the limits of requests are here.
//
// Unknown query parameters and body fields are errors: a typo ("stat=Pending") would
// otherwise silently widen a listing or drop a setting.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.h"
#include "core/status.h"
#include "core/units.h"

namespace trainyard::server {

inline constexpr size_t kMaxRequestBytes = 4 << 20;  // whole request body
inline constexpr size_t kMaxSubmitBytes = 1 << 20;   // a job spec
inline constexpr int64_t kMaxArrayJobs = 10'000;     // jobs per array submission
inline constexpr Duration kMaxPollWait{30'000};

// A request's query, decoded (httplib::Params).
using Params = std::multimap<std::string, std::string>;

// `text` as an integer lo..hi; else InvalidArgument naming `field`.
Result<int64_t> ParseInt(std::string_view field, std::string_view text, int64_t lo, int64_t hi);
// The value of query parameter `key`, if given.
std::optional<std::string> Param(const Params& params, const std::string& key);
// InvalidArgument naming a parameter not in `known` (and listing those).
Status CheckParams(const Params& params, std::initializer_list<std::string_view> known);

// `after` (a sequence number, 0..) and `limit` (1..kMaxListLimit) of a paged listing.
struct Paging {
  int64_t after = 0;
  int limit = 0;
};
Result<Paging> ParsePaging(const Params& params, int default_limit);

Result<JobId> ParseJobId(std::string_view text);

// A body that must be one JSON object; errors start with `what` ("queue: ...").
Result<nlohmann::json> ParseJsonBody(std::string_view body, std::string_view what);
// InvalidArgument naming a field of `j` not in `known`.
Status CheckBodyKeys(const nlohmann::json& j, std::string_view what,
                     std::initializer_list<std::string_view> known);
// Optional fields of a JSON body (nullopt when absent or null); errors name
// "<what>.<key>".
Result<std::optional<int64_t>> IntField(const nlohmann::json& j, std::string_view what,
                                        const char* key);
// A string of at most `max_bytes`.
Result<std::optional<std::string>> StringField(const nlohmann::json& j, std::string_view what,
                                               const char* key, size_t max_bytes);
// A list of at most 64 valid names (core/names.h).
Result<std::optional<std::vector<std::string>>> StringListField(const nlohmann::json& j,
                                                                std::string_view what,
                                                                const char* key);

}  // namespace trainyard::server
