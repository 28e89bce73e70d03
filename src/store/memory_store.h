// MemoryStore: a Store held in memory, for tests of the layers above the store.
//
// Same semantics as SqliteStore — the same checks and messages on Commit (both run
// store/commit.h), all-or-nothing batches, the same paging, id reservation and event
// log — without durability: everything is gone when the object is destroyed.
//
// Thread-safety: as Store; one mutex serialises all calls.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"

namespace trainyard::store {

class MemoryStore final : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

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
  int SchemaVersion() const override;
  std::string Describe() const override { return "memory"; }

 private:
  class Target;

  std::mutex mu_;
  std::map<JobId, Job> jobs_;                                    // GUARDED_BY(mu_)
  std::map<JobId, std::vector<JobEvent>> events_;                // GUARDED_BY(mu_)
  std::map<std::string, Node> nodes_;                            // GUARDED_BY(mu_)
  std::map<std::string, Tenant> tenants_;                        // GUARDED_BY(mu_)
  std::map<std::pair<std::string, std::string>, Queue> queues_;  // GUARDED_BY(mu_)
  std::map<std::string, PriorityClass> priority_classes_;        // GUARDED_BY(mu_)
  std::map<std::string, User> users_;                            // GUARDED_BY(mu_)
  std::map<std::string, ApiToken> tokens_;                       // GUARDED_BY(mu_)
  std::map<std::string, Dataset> datasets_;                      // GUARDED_BY(mu_)
  std::map<std::string, std::string> manifests_;                 // GUARDED_BY(mu_)
  std::vector<AuditEntry> audit_;                                // ascending seq; GUARDED_BY(mu_)
  JobId next_job_id_ = 1;                                        // GUARDED_BY(mu_)
  int64_t last_event_seq_ = 0;                                   // GUARDED_BY(mu_)
  int64_t last_audit_seq_ = 0;                                   // GUARDED_BY(mu_)
};

}  // namespace trainyard::store
