// The semantics of Store::Commit, shared by every implementation.
//
// Commit runs in two steps. PrepareBatch checks each value on its own and encodes
// the documents a store keeps; it needs no lock. ApplyBatch then walks the ops in
// order against a CommitTarget — the few primitive reads and writes a store offers
// inside its transaction — checking references and existence before each write. The
// caller opens the transaction before ApplyBatch and rolls it back if it fails. Keeping
// the rules here gives every store the same behaviour and the same messages.
//
// Private to src/store/.
//
// Thread-safety: PrepareBatch is a pure function. ApplyBatch uses only `target`;
// the caller holds whatever lock the target needs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "store/store.h"

namespace trainyard::store {

// An op of a batch with its encoded document (empty for deletes, events and audit
// entries).
struct PreparedOp {
  const WriteBatch::Op* op;
  std::string doc;
  // AppendAudit: the entry with its fields cut to their bounds.
  std::optional<AuditEntry> audit;
};

struct PreparedBatch {
  std::vector<PreparedOp> ops;
};

// Reads and writes inside the store's open transaction. Writes need not check
// anything: ApplyBatch has checked before calling them.
class CommitTarget {
 public:
  virtual ~CommitTarget() = default;

  virtual Result<JobId> NextJobId() = 0;
  virtual Result<bool> HasJob(JobId id) = 0;
  virtual Result<bool> HasNode(const std::string& name) = 0;
  virtual Result<bool> HasTenant(const std::string& name) = 0;
  // The parent of queue (tenant, name), "" for a top-level queue; nullopt when the
  // queue does not exist.
  virtual Result<std::optional<std::string>> QueueParent(const std::string& tenant,
                                                         const std::string& name) = 0;
  // Names of the queues of `tenant`, at most `limit` of them, ascending.
  virtual Result<std::vector<std::string>> QueuesOfTenant(const std::string& tenant, int limit) = 0;
  // Names of the queues whose parent is (tenant, name), at most `limit`, ascending.
  virtual Result<std::vector<std::string>> ChildQueues(const std::string& tenant,
                                                       const std::string& name, int limit) = 0;
  virtual Result<bool> HasPriorityClass(const std::string& name) = 0;
  virtual Result<bool> HasUser(const std::string& name) = 0;
  // Names of the users of `tenant`, at most `limit` of them, ascending.
  virtual Result<std::vector<std::string>> UsersOfTenant(const std::string& tenant, int limit) = 0;
  virtual Result<bool> HasDataset(const std::string& name) = 0;

  virtual Status WriteJob(const Job& job, const std::string& doc) = 0;
  virtual Status WriteNode(const Node& node, const std::string& doc) = 0;
  virtual Status EraseNode(const std::string& name) = 0;
  virtual Status WriteTenant(const Tenant& tenant, const std::string& doc) = 0;
  virtual Status EraseTenant(const std::string& name) = 0;
  virtual Status WriteQueue(const Queue& queue, const std::string& doc) = 0;
  virtual Status EraseQueue(const std::string& tenant, const std::string& name) = 0;
  virtual Status WritePriorityClass(const PriorityClass& pc, const std::string& doc) = 0;
  virtual Status ErasePriorityClass(const std::string& name) = 0;
  // Appends `event`, assigning the next seq (event.seq is ignored).
  virtual Status WriteEvent(const JobEvent& event) = 0;
  virtual Status WriteUser(const User& user, const std::string& doc) = 0;
  // Erases the user and every token of it.
  virtual Status EraseUser(const std::string& name) = 0;
  virtual Status WriteToken(const ApiToken& token, const std::string& doc) = 0;
  // Appends `entry`, assigning the next audit seq (entry.seq is ignored).
  virtual Status WriteAudit(const AuditEntry& entry) = 0;
  virtual Status WriteDataset(const Dataset& dataset, const std::string& doc) = 0;
  virtual Status EraseDataset(const std::string& name) = 0;
  // Keeps `text` under `version` unless a manifest is kept there already.
  virtual Status WriteManifest(const std::string& version, const std::string& text) = 0;
};

// Validates every value of `batch` and encodes its documents. The result points
// into `batch`, which must outlive it.
Result<PreparedBatch> PrepareBatch(const WriteBatch& batch);

// Applies `batch` to `target` op by op; returns the first failure (see
// Store::Commit for the rules and codes).
Status ApplyBatch(const PreparedBatch& batch, CommitTarget& target);

// "PutQueue research/vision", "AppendEvent job 12": an op, for messages.
std::string DescribeOp(const WriteBatch::Op& op);

// Returns InvalidArgument unless 1 <= limit <= kMaxListLimit; `what` names the call.
Status CheckListLimit(std::string_view what, int limit);
// Returns InvalidArgument unless 1 <= n <= kMaxJobIdReservation.
Status CheckReservation(int64_t n);

// True when `job` is matched by `filter` (the reference for SQL filters).
bool Matches(const JobFilter& filter, const Job& job);
bool Matches(const AuditFilter& filter, const AuditEntry& entry);

// `entry` with each text field cut to its bound (kMaxAudit*Bytes in store.h).
AuditEntry BoundAuditEntry(AuditEntry entry);

}  // namespace trainyard::store
