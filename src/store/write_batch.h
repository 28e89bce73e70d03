// WriteBatch: the changes one Store::Commit applies in one transaction, and JobEvent,
// the entry of a job's history a batch may append. Plain values, apart from the Store
// (store.h), so that code that only produces changes (lifecycle/) needs no store.
//
// Thread-safety: plain values; callers serialise access.
#pragma once

#include <iterator>
#include <string>
#include <variant>
#include <vector>

#include "core/auth.h"
#include "core/dataset.h"
#include "core/job.h"
#include "core/node.h"
#include "core/tenancy.h"
#include "core/units.h"

namespace trainyard::store {

// One entry of a job's history. Appended, never changed or removed.
struct JobEvent {
  int64_t seq = 0;  // assigned by Commit: increasing over the whole store, may skip
  JobId job_id = 0;
  Timestamp time{};
  std::string actor;    // who: "user:alice", "scheduler", "agent:node-7"
  std::string kind;     // what, as a short CamelCase word: "Submitted", "Preempted"
  std::string message;  // for people

  bool operator==(const JobEvent&) const = default;
};

// Mutations that Commit applies together, in the order they were added, so a later
// one sees the earlier ones (a queue may follow its tenant; an event may follow the
// job it is about; a token may follow its user). Put* inserts or replaces the object
// with the same key: job id, node name, tenant name, (tenant, queue name), priority
// class name, user name, token id.
//
// Thread-safety: a plain value; callers serialise access.
class WriteBatch {
 public:
  struct PutJobOp {
    Job job;
  };
  struct PutNodeOp {
    Node node;
  };
  struct DeleteNodeOp {
    std::string name;
  };
  struct PutTenantOp {
    Tenant tenant;
  };
  struct DeleteTenantOp {
    std::string name;
  };
  struct PutQueueOp {
    Queue queue;
  };
  struct DeleteQueueOp {
    std::string tenant;
    std::string name;
  };
  struct PutPriorityClassOp {
    PriorityClass priority_class;
  };
  struct DeletePriorityClassOp {
    std::string name;
  };
  struct AppendEventOp {
    JobEvent event;  // seq is ignored; Commit assigns it
  };
  struct PutUserOp {
    User user;
  };
  struct DeleteUserOp {
    std::string name;
  };
  struct PutTokenOp {
    ApiToken token;
  };
  struct PutDatasetOp {
    Dataset dataset;
  };
  struct DeleteDatasetOp {
    std::string name;
  };
  // A version's manifest (data/manifest.h's text), kept under the version it hashes
  // to. Content-addressed, so never replaced: putting a version already kept is a no-op.
  struct PutManifestOp {
    std::string version;
    std::string text;
  };
  struct AppendAuditOp {
    // seq is ignored; Commit assigns it: increasing over the audit log (a sequence
    // of its own, apart from JobEvent::seq), may skip.
    AuditEntry entry;
  };
  using Op = std::variant<PutJobOp, PutNodeOp, DeleteNodeOp, PutTenantOp, DeleteTenantOp,
                          PutQueueOp, DeleteQueueOp, PutPriorityClassOp, DeletePriorityClassOp,
                          AppendEventOp, PutUserOp, DeleteUserOp, PutTokenOp, AppendAuditOp,
                          PutDatasetOp, DeleteDatasetOp, PutManifestOp>;

  void PutJob(const Job& job) { ops_.emplace_back(PutJobOp{job}); }
  void PutNode(const Node& node) { ops_.emplace_back(PutNodeOp{node}); }
  void DeleteNode(std::string name) { ops_.emplace_back(DeleteNodeOp{std::move(name)}); }
  void PutTenant(const Tenant& tenant) { ops_.emplace_back(PutTenantOp{tenant}); }
  void DeleteTenant(std::string name) { ops_.emplace_back(DeleteTenantOp{std::move(name)}); }
  void PutQueue(const Queue& queue) { ops_.emplace_back(PutQueueOp{queue}); }
  void DeleteQueue(std::string tenant, std::string name) {
    ops_.emplace_back(DeleteQueueOp{std::move(tenant), std::move(name)});
  }
  void PutPriorityClass(const PriorityClass& pc) { ops_.emplace_back(PutPriorityClassOp{pc}); }
  void DeletePriorityClass(std::string name) {
    ops_.emplace_back(DeletePriorityClassOp{std::move(name)});
  }
  void AppendEvent(JobEvent event) { ops_.emplace_back(AppendEventOp{std::move(event)}); }
  void AppendEvent(JobId job_id, Timestamp time, std::string actor, std::string kind,
                   std::string message) {
    AppendEvent(JobEvent{0, job_id, time, std::move(actor), std::move(kind), std::move(message)});
  }
  void PutUser(const User& user) { ops_.emplace_back(PutUserOp{user}); }
  // Deletes the user and every token of it.
  void DeleteUser(std::string name) { ops_.emplace_back(DeleteUserOp{std::move(name)}); }
  void PutToken(const ApiToken& token) { ops_.emplace_back(PutTokenOp{token}); }
  void AppendAudit(AuditEntry entry) { ops_.emplace_back(AppendAuditOp{std::move(entry)}); }
  void PutDataset(const Dataset& d) { ops_.emplace_back(PutDatasetOp{d}); }
  void DeleteDataset(std::string name) { ops_.emplace_back(DeleteDatasetOp{std::move(name)}); }
  void PutManifest(std::string version, std::string text) {
    ops_.emplace_back(PutManifestOp{std::move(version), std::move(text)});
  }

  // Adds the operations of `other` after this batch's own.
  void Append(WriteBatch&& other) {
    if (ops_.empty()) {
      ops_ = std::move(other.ops_);
    } else {
      ops_.insert(ops_.end(), std::make_move_iterator(other.ops_.begin()),
                  std::make_move_iterator(other.ops_.end()));
    }
    other.ops_.clear();
  }

  const std::vector<Op>& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }
  size_t size() const { return ops_.size(); }
  void Clear() { ops_.clear(); }

 private:
  std::vector<Op> ops_;
};

}  // namespace trainyard::store
