#include "store/documents.h"

#include <nlohmann/json.hpp>

#include "core/codec.h"
#include "core/names.h"

namespace trainyard::store {
namespace {

// Decodes a stored document; anything wrong with it is DataLoss naming the row.
template <typename T>
Result<T> DecodeDoc(std::string_view what, Result<T> (*from_json)(const nlohmann::json&),
                    std::string_view doc) {
  nlohmann::json j = nlohmann::json::parse(doc, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return DataLoss(std::string(what) + ": stored document is not valid JSON");
  }
  Result<T> value = from_json(j);
  if (!value.ok()) {
    return DataLoss(std::string(what) +
                    ": stored document does not decode: " + value.status().message());
  }
  return value;
}

}  // namespace

Result<Job> DecodeJobRow(JobId id, std::string_view doc) {
  std::string what = "job " + std::to_string(id);
  TY_ASSIGN_OR_RETURN(Job job, DecodeDoc<Job>(what, JobFromJson, doc));
  if (job.id != id) return DataLoss(what + ": stored document has id " + std::to_string(job.id));
  return job;
}

Result<Node> DecodeNodeRow(std::string_view name, std::string_view doc) {
  return DecodeDoc<Node>("node " + std::string(name), NodeFromJson, doc);
}

Result<Tenant> DecodeTenantRow(std::string_view name, std::string_view doc) {
  return DecodeDoc<Tenant>("tenant " + std::string(name), TenantFromJson, doc);
}

Result<Queue> DecodeQueueRow(std::string_view tenant, std::string_view name, std::string_view doc) {
  return DecodeDoc<Queue>("queue " + std::string(tenant) + "/" + std::string(name), QueueFromJson,
                          doc);
}

Result<PriorityClass> DecodePriorityClassRow(std::string_view name, std::string_view doc) {
  return DecodeDoc<PriorityClass>("priority class " + std::string(name), PriorityClassFromJson,
                                  doc);
}

Result<User> DecodeUserRow(std::string_view name, std::string_view doc) {
  std::string what = "user " + std::string(name);
  TY_ASSIGN_OR_RETURN(User u, DecodeDoc<User>(what, UserFromJson, doc));
  if (u.name != name)
    return DataLoss(what + ": stored document has name " + QuoteForMessage(u.name));
  return u;
}

Result<Dataset> DecodeDatasetRow(std::string_view name, std::string_view doc) {
  std::string what = "dataset " + std::string(name);
  TY_ASSIGN_OR_RETURN(Dataset d, DecodeDoc<Dataset>(what, DatasetFromJson, doc));
  if (d.name != name)
    return DataLoss(what + ": stored document has name " + QuoteForMessage(d.name));
  return d;
}

Result<ApiToken> DecodeTokenRow(std::string_view id, std::string_view doc) {
  std::string what = "token " + std::string(id);
  TY_ASSIGN_OR_RETURN(ApiToken t, DecodeDoc<ApiToken>(what, ApiTokenFromJson, doc));
  if (t.id != id) return DataLoss(what + ": stored document has id " + QuoteForMessage(t.id));
  return t;
}

const std::vector<std::string>& NonTerminalStateNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (JobState s : {JobState::kPending, JobState::kAdmitted, JobState::kStarting,
                       JobState::kRunning, JobState::kPreempting, JobState::kLost,
                       JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
      if (!IsTerminal(s)) v->emplace_back(JobStateName(s));
    }
    return v;
  }();
  return *names;
}

}  // namespace trainyard::store
