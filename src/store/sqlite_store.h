// SqliteStore: the Store kept in one SQLite 3 database file.
//
// Each object is a row holding its JSON document (core/codec.h) beside the columns
// that queries filter on (jobs: state, tenant, queue, name, submit_time_ms; users:
// tenant; api_tokens: user_name). job_events and audit_log are append-only: triggers
// abort any UPDATE or DELETE of them. meta holds the next job id. The file runs in
// WAL mode with foreign keys enforced; every Commit and ReserveJobIds is one BEGIN
// IMMEDIATE transaction, rolled back on any error, so a crash leaves each batch
// wholly present or wholly absent. Several processes may open the same file; a
// writer waits up to busy_timeout for another.
//
// Schema versions: PRAGMA user_version records how many migrations have been
// applied. Open applies the missing ones, in order, in one transaction. A file whose
// version is newer than kSchemaVersion (written by a newer binary) is refused.
//
// Thread-safety: as Store. One connection, guarded by a mutex; calls are serialised.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/units.h"
#include "store/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace trainyard::store {

struct SqliteOptions {
  enum class Sync { kOff, kNormal, kFull };
  // kFull: a batch whose Commit returned OK survives power loss, not just a crash of
  // the process. kNormal in WAL mode may lose the last batches on power loss, never
  // consistency. kOff: for throwaway databases.
  Sync synchronous = Sync::kFull;
  // How long a call waits for another process holding the write lock.
  Duration busy_timeout{5'000};
  // When false, Open fails if the file does not exist.
  bool create_if_missing = true;
};

class SqliteStore final : public Store {
 public:
  // The schema this binary writes: the number of migrations it knows.
  static constexpr int kSchemaVersion = 4;

  // Opens (creating when allowed) the database at `path` and brings its schema up to
  // kSchemaVersion. Fails with FailedPrecondition when the file's schema is newer,
  // DataLoss when it is not a database.
  static Result<std::unique_ptr<Store>> Open(const std::string& path,
                                             const SqliteOptions& options = {});

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  Status Commit(const WriteBatch& batch) override;
  Result<JobId> ReserveJobIds(int64_t n) override;
  Result<std::optional<Job>> GetJob(JobId id) override;
  Result<JobPage> ListJobs(const JobFilter& filter, JobId after_id, int limit,
                           JobOrder order) override;
  Result<EventPage> ListEvents(JobId job_id, int64_t after_seq, int limit) override;
  Result<AuditPage> ListAudit(const AuditFilter& filter, int64_t after_seq, int limit) override;
  Result<std::vector<Node>> ListNodes() override;
  Result<std::vector<Tenant>> ListTenants() override;
  Result<std::vector<Queue>> ListQueues() override;
  Result<std::vector<PriorityClass>> ListPriorityClasses() override;
  Result<std::vector<User>> ListUsers() override;
  Result<std::vector<ApiToken>> ListTokens() override;
  Result<std::vector<Dataset>> ListDatasets() override;
  Result<std::optional<std::string>> GetManifest(const std::string& version) override;
  Result<StoredState> LoadAll() override;
  int SchemaVersion() const override { return kSchemaVersion; }
  std::string Describe() const override { return "sqlite:" + path_; }

 private:
  class Statement;
  class Target;

  SqliteStore(sqlite3* db, std::string path);

  // REQUIRES (all below): mu_ held, except during Open before the store is shared.
  Status Configure(const SqliteOptions& options);
  Status Migrate();
  // A cached prepared statement for `sql`, reset when the Statement goes away.
  Result<Statement> Prepare(std::string_view sql);
  // Runs `sql` (no parameters, no rows) from the cache; `doing` goes in errors.
  Status Run(std::string_view sql, std::string_view doing);
  // Runs `body` between BEGIN IMMEDIATE and COMMIT; rolls back when either fails.
  template <typename Body>
  Status InWriteTransaction(std::string_view doing, Body body);
  // Runs `body` in one read transaction, so that it sees one snapshot.
  template <typename Body>
  Status InReadTransaction(std::string_view doing, Body body);
  void RollbackIfOpen();

  Result<JobId> NextJobId();
  Result<std::vector<Job>> QueryJobs(Statement& stmt, std::string_view doing);
  Result<std::vector<Node>> ReadNodes();
  Result<std::vector<Tenant>> ReadTenants();
  Result<std::vector<Queue>> ReadQueues();
  Result<std::vector<PriorityClass>> ReadPriorityClasses();
  Result<std::vector<User>> ReadUsers();
  Result<std::vector<ApiToken>> ReadTokens();
  Result<std::vector<Dataset>> ReadDatasets();

  const std::string path_;
  std::mutex mu_;
  sqlite3* db_;                                                // GUARDED_BY(mu_)
  std::unordered_map<std::string, sqlite3_stmt*> statements_;  // GUARDED_BY(mu_)
};

}  // namespace trainyard::store
