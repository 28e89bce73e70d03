// Store: the durable record of the control plane — jobs, nodes, tenants, queues,
// priority classes, users and their API tokens, the next job id, an append-only log
// of what happened to each job (who did what, when) and an append-only audit log of
// requests (core/auth.h).
//
// The server keeps its working state in memory and writes every change through a
// Store before acknowledging it; on restart it rebuilds that state from LoadAll().
// Writes are grouped in a WriteBatch and applied by Commit() in one transaction: all
// of the batch or none of it. Reads return values decoded from what was committed.
//
// Implementations: SqliteStore (sqlite_store.h, WAL, the default), PostgresStore
// (postgres_store.h, a PostgreSQL database, so the state can outlive the host) and
// MemoryStore (memory_store.h, same semantics, no durability; for tests of upper
// layers).
//
// Thread-safety: every method may be called from any thread at any time; each call is
// atomic (a reader never sees half of a batch) and calls are serialised in some order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/auth.h"
#include "core/job.h"
#include "core/node.h"
#include "core/status.h"
#include "core/tenancy.h"
#include "core/units.h"
#include "store/write_batch.h"

namespace trainyard::store {

// Bounds on the text fields of an AuditEntry, in bytes. Commit cuts a longer field
// (at a UTF-8 character boundary, ending it with "...") rather than failing: an
// audit record must not be lost, nor the request it records refused, because a
// client sent a long path or a long error came back.
inline constexpr size_t kMaxAuditActionBytes = 1024;
inline constexpr size_t kMaxAuditObjectBytes = 512;
inline constexpr size_t kMaxAuditMessageBytes = 4096;
// actor, token_id, tenant, source.
inline constexpr size_t kMaxAuditOtherFieldBytes = 256;

// Which jobs ListJobs returns; every set field must match.
struct JobFilter {
  std::vector<JobState> states{};  // any of these; empty: any state
  std::string tenant{};            // exact; empty: any
  std::string queue{};             // exact queue name (of any tenant); empty: any
  std::string name_prefix{};       // byte-wise prefix of spec.name; empty: any
};

// The order of a listing of jobs by id: kAscending (oldest first; the cursor `after_id`
// is a lower bound) or kDescending (newest first; `after_id` is an upper bound).
enum class JobOrder { kAscending, kDescending };

struct JobPage {
  std::vector<Job> jobs;  // ascending id, or descending with JobOrder::kDescending
  // Pass as `after_id` (with the same order) to get the next page; nullopt when no
  // matching job is left.
  std::optional<JobId> next_after_id;
};

struct EventPage {
  std::vector<JobEvent> events;  // ascending seq
  // Pass as `after_seq` to get the next page; nullopt when no event is left.
  std::optional<int64_t> next_after_seq;
};

struct AuditPage {
  std::vector<AuditEntry> entries;  // ascending seq
  // Pass as `after_seq` to get the next page; nullopt when no matching entry is left.
  std::optional<int64_t> next_after_seq;
};

// What a server needs to rebuild its state on restart.
struct StoredState {
  // Every job that is not terminal (IsTerminal), ascending id. Finished jobs stay in
  // the store and are read on demand with GetJob / ListJobs.
  std::vector<Job> active_jobs;
  std::vector<Node> nodes;                      // ascending name
  std::vector<Tenant> tenants;                  // ascending name
  std::vector<Queue> queues;                    // ascending (tenant, name)
  std::vector<PriorityClass> priority_classes;  // ascending name
  std::vector<User> users;                      // ascending name
  std::vector<ApiToken> tokens;                 // ascending id
  std::vector<Dataset> datasets;                // ascending name (manifests: GetManifest)
  JobId next_job_id = 1;                        // the id ReserveJobIds would return next
  int64_t last_event_seq = 0;                   // 0 when the log is empty
};

inline constexpr int kMaxListLimit = 10'000;
inline constexpr int64_t kMaxJobIdReservation = 1'000'000;

class Store {
 public:
  virtual ~Store() = default;

  // Applies every mutation of `batch`, in order, in one transaction; on any error
  // nothing of it is applied. Empty batches succeed. Checks, in order for each op:
  //   - values are valid (ValidateSpec and a normalised spec (NormalizeSpec),
  //     ValidateNode, ValidateTenant, ValidateQueue, ValidatePriorityClass,
  //     ValidateUser, ValidateApiToken, ValidateDataset, a manifest's version is a
  //     content version, and the document encodes as JSON):
  //     InvalidArgument;
  //   - PutJob: the id came from ReserveJobIds: FailedPrecondition;
  //   - PutQueue: its tenant exists, its parent (if any) exists in that tenant and the
  //     queue is not its own ancestor: FailedPrecondition;
  //   - PutUser: its tenant, when not empty, exists: FailedPrecondition;
  //   - PutToken: its user exists: FailedPrecondition;
  //   - PutDataset: its tenant, when not empty, exists: FailedPrecondition;
  //   - Delete*: the object exists: NotFound; DeleteTenant: it has no queues and no
  //     users left, DeleteQueue: it has no child queues: FailedPrecondition;
  //     DeleteUser deletes the user's tokens with it;
  //   - AppendEvent: the job exists: FailedPrecondition;
  //   - AppendAudit: never fails a check; text fields longer than their bound
  //     (kMaxAudit*Bytes) are cut to it.
  // The message names the op ("commit: op 2 of 5 (PutQueue research/vision): tenant
  // \"research\" does not exist"). Failures of the medium come back as Unavailable
  // (busy), ResourceExhausted (disk full), DataLoss (corruption) or Internal.
  virtual Status Commit(const WriteBatch& batch) = 0;

  // Durably reserves `n` (1..kMaxJobIdReservation) consecutive new job ids and returns
  // the first. Ids strictly increase over the life of the store, restarts included;
  // ids reserved but never used are skipped (gaps are normal).
  virtual Result<JobId> ReserveJobIds(int64_t n) = 0;

  // The job with `id`, or nullopt when there is none; an error only when the store
  // cannot be read (DataLoss when its stored document does not decode).
  virtual Result<std::optional<Job>> GetJob(JobId id) = 0;

  // Up to `limit` (1..kMaxListLimit) jobs matching `filter`, in `order`: with
  // kAscending those with id > `after_id`, lowest first; with kDescending those with
  // id < `after_id` (any id when after_id is 0), highest first. Start with after_id = 0.
  virtual Result<JobPage> ListJobs(const JobFilter& filter, JobId after_id, int limit,
                                   JobOrder order) = 0;

  // Up to `limit` (1..kMaxListLimit) events of `job_id` with seq > `after_seq`,
  // ascending seq. A job without events (or no such job) gives an empty page.
  virtual Result<EventPage> ListEvents(JobId job_id, int64_t after_seq, int limit) = 0;

  // Up to `limit` (1..kMaxListLimit) audit entries matching `filter` (every set field
  // equal) with seq > `after_seq`, ascending seq. Start with after_seq = 0.
  virtual Result<AuditPage> ListAudit(const AuditFilter& filter, int64_t after_seq, int limit) = 0;

  // Everything of a kind, ascending key (see StoredState).
  virtual Result<std::vector<Node>> ListNodes() = 0;
  virtual Result<std::vector<Tenant>> ListTenants() = 0;
  virtual Result<std::vector<Queue>> ListQueues() = 0;
  virtual Result<std::vector<PriorityClass>> ListPriorityClasses() = 0;
  virtual Result<std::vector<User>> ListUsers() = 0;
  virtual Result<std::vector<ApiToken>> ListTokens() = 0;
  virtual Result<std::vector<Dataset>> ListDatasets() = 0;
  // The manifest kept under `version` (PutManifest), or nullopt.
  virtual Result<std::optional<std::string>> GetManifest(const std::string& version) = 0;

  // One consistent snapshot of what a server needs on start (see StoredState).
  virtual Result<StoredState> LoadAll() = 0;

  // The version of the stored schema: a SQL store's migration level; 0 for a store
  // without one (MemoryStore).
  virtual int SchemaVersion() const = 0;
  // "sqlite:/var/lib/trainyard/state.db", "postgres:dbname=trainyard host=db1",
  // "memory", for logs.
  virtual std::string Describe() const = 0;
};

}  // namespace trainyard::store
