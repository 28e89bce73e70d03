#include "server/api/request.h"

#include <algorithm>
#include <charconv>

#include "core/names.h"
#include "store/store.h"

namespace trainyard::server {

using nlohmann::json;

namespace {

std::string ListNames(std::initializer_list<std::string_view> names) {
  std::string out;
  for (auto n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace

Result<int64_t> ParseInt(std::string_view field, std::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty() || v < lo || v > hi) {
    return InvalidArgument(std::string(field) + ": expected an integer " + std::to_string(lo) +
                           ".." + std::to_string(hi) + ", got " + QuoteForMessage(text));
  }
  return v;
}

std::optional<std::string> Param(const Params& p, const std::string& key) {
  auto it = p.find(key);
  if (it == p.end()) return std::nullopt;
  return it->second;
}

Status CheckParams(const Params& p, std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : p) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      return InvalidArgument("unknown query parameter " + QuoteForMessage(k) +
                             "; valid: " + ListNames(known));
    }
  }
  return Status::Ok();
}

Result<Paging> ParsePaging(const Params& p, int default_limit) {
  Paging out{0, default_limit};
  if (auto a = Param(p, "after")) {
    TY_ASSIGN_OR_RETURN(out.after, ParseInt("after", *a, 0, INT64_MAX));
  }
  if (auto l = Param(p, "limit")) {
    TY_ASSIGN_OR_RETURN(int64_t limit, ParseInt("limit", *l, 1, store::kMaxListLimit));
    out.limit = static_cast<int>(limit);
  }
  return out;
}

Result<JobId> ParseJobId(std::string_view text) {
  auto id = ParseInt("job id", text, 1, INT64_MAX);
  if (!id.ok()) {
    return InvalidArgument("job id: expected a positive integer, got " + QuoteForMessage(text));
  }
  return *id;
}

Result<json> ParseJsonBody(std::string_view body, std::string_view what) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(std::string(what) + ": the body is not valid JSON");
  if (!j.is_object()) {
    return InvalidArgument(std::string(what) + ": the body must be a JSON object");
  }
  return j;
}

Status CheckBodyKeys(const json& j, std::string_view what,
                     std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : j.items()) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      return InvalidArgument(std::string(what) + ": unknown field " + QuoteForMessage(k) +
                             "; valid: " + ListNames(known));
    }
  }
  return Status::Ok();
}

Result<std::optional<int64_t>> IntField(const json& j, std::string_view what, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) {
    return InvalidArgument(std::string(what) + "." + key + ": expected an integer, got " +
                           it->dump());
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

Result<std::optional<std::string>> StringField(const json& j, std::string_view what,
                                               const char* key, size_t max_bytes) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string() || it->get_ref<const std::string&>().size() > max_bytes) {
    return InvalidArgument(std::string(what) + "." + key + ": expected a string of at most " +
                           std::to_string(max_bytes) + " bytes");
  }
  return std::optional<std::string>(it->get<std::string>());
}

Result<std::optional<std::vector<std::string>>> StringListField(const json& j,
                                                                std::string_view what,
                                                                const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::vector<std::string>>();
  const std::string field = std::string(what) + "." + key;
  if (!it->is_array() || it->size() > 64) {
    return InvalidArgument(field + ": expected a list of at most 64 names");
  }
  std::vector<std::string> out;
  for (const json& e : *it) {
    if (!e.is_string()) return InvalidArgument(field + ": expected names (strings)");
    out.push_back(e.get<std::string>());
    TY_RETURN_IF_ERROR(ValidateName(field, out.back()));
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

}  // namespace trainyard::server
