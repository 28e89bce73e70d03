// Reading back the JSON documents (core/codec.h) that the SQL stores keep in their
// rows; PrepareBatch (commit.h) writes them. Each decoder turns a document that is
// not JSON, does not decode, or names another object than its row into DataLoss
// naming the row ("job 12: stored document has id 13"), so every store reports a
// damaged row the same way.
//
// Private to src/store/. Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/auth.h"
#include "core/dataset.h"
#include "core/job.h"
#include "core/node.h"
#include "core/status.h"
#include "core/tenancy.h"

namespace trainyard::store {

// The row of job `id`; its document must have that id.
Result<Job> DecodeJobRow(JobId id, std::string_view doc);
Result<Node> DecodeNodeRow(std::string_view name, std::string_view doc);
Result<Tenant> DecodeTenantRow(std::string_view name, std::string_view doc);
Result<Queue> DecodeQueueRow(std::string_view tenant, std::string_view name, std::string_view doc);
Result<PriorityClass> DecodePriorityClassRow(std::string_view name, std::string_view doc);
// The row of user `name`; its document must have that name.
Result<User> DecodeUserRow(std::string_view name, std::string_view doc);
// The row of token `id`; its document must have that id.
Result<ApiToken> DecodeTokenRow(std::string_view id, std::string_view doc);

// The row of dataset `name`; its document must have that name.
Result<Dataset> DecodeDatasetRow(std::string_view name, std::string_view doc);

// The names (JobStateName) of the states that are not terminal: the jobs LoadAll returns.
const std::vector<std::string>& NonTerminalStateNames();

// The SQL stores read one row more than a page's `limit` to learn whether another page
// follows: drops that row and returns the cursor for the next page (`key` of the last
// row kept), or nullopt when `rows` held no more than `limit`.
template <typename Row, typename Key>
auto CutToPage(std::vector<Row>& rows, int limit, Key key)
    -> std::optional<decltype(key(rows.back()))> {
  if (static_cast<int>(rows.size()) <= limit) return std::nullopt;
  rows.resize(static_cast<size_t>(limit));
  return key(rows.back());
}

}  // namespace trainyard::store
