#include "store/memory_store.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "store/commit.h"

namespace trainyard::store {
namespace {

// Sets `map[key] = value`, recording in `undo` how to put the old entry back.
template <typename Map, typename Key, typename Value>
void PutWithUndo(Map& map, const Key& key, const Value& value,
                 std::vector<std::function<void()>>& undo) {
  auto it = map.find(key);
  if (it == map.end()) {
    map.emplace(key, value);
    undo.push_back([&map, key] { map.erase(key); });
  } else {
    undo.push_back([&map, key, old = it->second] { map[key] = old; });
    it->second = value;
  }
}

template <typename Map, typename Key>
void EraseWithUndo(Map& map, const Key& key, std::vector<std::function<void()>>& undo) {
  auto it = map.find(key);
  if (it == map.end()) return;
  undo.push_back([&map, key, old = it->second] { map.emplace(key, old); });
  map.erase(it);
}

template <typename Map>
std::vector<typename Map::mapped_type> Values(const Map& map) {
  std::vector<typename Map::mapped_type> out;
  out.reserve(map.size());
  for (const auto& [key, value] : map) out.push_back(value);
  return out;
}

}  // namespace

// Applies a batch to the maps of a MemoryStore, keeping an undo log so that a failed
// batch can be taken back. REQUIRES: the store's mu_ held for the Target's lifetime.
class MemoryStore::Target final : public CommitTarget {
 public:
  explicit Target(MemoryStore& s) : s_(s) {}

  // Undoes every write, newest first.
  void Rollback() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) (*it)();
    undo_.clear();
  }

  Result<JobId> NextJobId() override { return s_.next_job_id_; }
  Result<bool> HasJob(JobId id) override { return s_.jobs_.count(id) > 0; }
  Result<bool> HasNode(const std::string& name) override { return s_.nodes_.count(name) > 0; }
  Result<bool> HasTenant(const std::string& name) override { return s_.tenants_.count(name) > 0; }
  Result<std::optional<std::string>> QueueParent(const std::string& tenant,
                                                 const std::string& name) override {
    auto it = s_.queues_.find({tenant, name});
    if (it == s_.queues_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second.parent);
  }
  Result<std::vector<std::string>> QueuesOfTenant(const std::string& tenant, int limit) override {
    std::vector<std::string> out;
    for (auto it = s_.queues_.lower_bound({tenant, ""});
         it != s_.queues_.end() && it->first.first == tenant &&
         static_cast<int>(out.size()) < limit;
         ++it) {
      out.push_back(it->first.second);
    }
    return out;
  }
  Result<std::vector<std::string>> ChildQueues(const std::string& tenant, const std::string& name,
                                               int limit) override {
    std::vector<std::string> out;
    for (auto it = s_.queues_.lower_bound({tenant, ""});
         it != s_.queues_.end() && it->first.first == tenant &&
         static_cast<int>(out.size()) < limit;
         ++it) {
      if (it->second.parent == name) out.push_back(it->first.second);
    }
    return out;
  }
  Result<bool> HasPriorityClass(const std::string& name) override {
    return s_.priority_classes_.count(name) > 0;
  }
  Result<bool> HasUser(const std::string& name) override { return s_.users_.count(name) > 0; }
  Result<bool> HasDataset(const std::string& name) override { return s_.datasets_.count(name) > 0; }
  Result<std::vector<std::string>> UsersOfTenant(const std::string& tenant, int limit) override {
    std::vector<std::string> out;
    for (auto it = s_.users_.begin(); it != s_.users_.end() && static_cast<int>(out.size()) < limit;
         ++it) {
      if (it->second.tenant == tenant) out.push_back(it->first);
    }
    return out;
  }

  Status WriteJob(const Job& job, const std::string&) override {
    PutWithUndo(s_.jobs_, job.id, job, undo_);
    return Status::Ok();
  }
  Status WriteNode(const Node& node, const std::string&) override {
    PutWithUndo(s_.nodes_, node.name, node, undo_);
    return Status::Ok();
  }
  Status EraseNode(const std::string& name) override {
    EraseWithUndo(s_.nodes_, name, undo_);
    return Status::Ok();
  }
  Status WriteTenant(const Tenant& tenant, const std::string&) override {
    PutWithUndo(s_.tenants_, tenant.name, tenant, undo_);
    return Status::Ok();
  }
  Status EraseTenant(const std::string& name) override {
    EraseWithUndo(s_.tenants_, name, undo_);
    return Status::Ok();
  }
  Status WriteQueue(const Queue& queue, const std::string&) override {
    PutWithUndo(s_.queues_, std::make_pair(queue.tenant, queue.name), queue, undo_);
    return Status::Ok();
  }
  Status EraseQueue(const std::string& tenant, const std::string& name) override {
    EraseWithUndo(s_.queues_, std::make_pair(tenant, name), undo_);
    return Status::Ok();
  }
  Status WritePriorityClass(const PriorityClass& pc, const std::string&) override {
    PutWithUndo(s_.priority_classes_, pc.name, pc, undo_);
    return Status::Ok();
  }
  Status ErasePriorityClass(const std::string& name) override {
    EraseWithUndo(s_.priority_classes_, name, undo_);
    return Status::Ok();
  }
  Status WriteEvent(const JobEvent& event) override {
    JobEvent e = event;
    e.seq = ++s_.last_event_seq_;
    s_.events_[e.job_id].push_back(std::move(e));
    undo_.push_back([this, job_id = event.job_id] {
      auto it = s_.events_.find(job_id);
      it->second.pop_back();
      if (it->second.empty()) s_.events_.erase(it);
      --s_.last_event_seq_;
    });
    return Status::Ok();
  }
  Status WriteUser(const User& user, const std::string&) override {
    PutWithUndo(s_.users_, user.name, user, undo_);
    return Status::Ok();
  }
  Status EraseUser(const std::string& name) override {
    std::vector<std::string> tokens;
    for (const auto& [id, token] : s_.tokens_) {
      if (token.user == name) tokens.push_back(id);
    }
    for (const std::string& id : tokens) EraseWithUndo(s_.tokens_, id, undo_);
    EraseWithUndo(s_.users_, name, undo_);
    return Status::Ok();
  }
  Status WriteToken(const ApiToken& token, const std::string&) override {
    PutWithUndo(s_.tokens_, token.id, token, undo_);
    return Status::Ok();
  }
  Status WriteDataset(const Dataset& dataset, const std::string&) override {
    PutWithUndo(s_.datasets_, dataset.name, dataset, undo_);
    return Status::Ok();
  }
  Status EraseDataset(const std::string& name) override {
    EraseWithUndo(s_.datasets_, name, undo_);
    return Status::Ok();
  }
  Status WriteManifest(const std::string& version, const std::string& text) override {
    if (!s_.manifests_.contains(version)) PutWithUndo(s_.manifests_, version, text, undo_);
    return Status::Ok();
  }
  Status WriteAudit(const AuditEntry& entry) override {
    AuditEntry e = entry;
    e.seq = ++s_.last_audit_seq_;
    s_.audit_.push_back(std::move(e));
    undo_.push_back([this] {
      s_.audit_.pop_back();
      --s_.last_audit_seq_;
    });
    return Status::Ok();
  }

 private:
  MemoryStore& s_;
  std::vector<std::function<void()>> undo_;
};

Status MemoryStore::Commit(const WriteBatch& batch) {
  TY_ASSIGN_OR_RETURN(PreparedBatch prepared, PrepareBatch(batch));
  std::lock_guard lock(mu_);
  Target target(*this);
  Status s = ApplyBatch(prepared, target);
  if (!s.ok()) target.Rollback();
  return s;
}

Result<JobId> MemoryStore::ReserveJobIds(int64_t n) {
  TY_RETURN_IF_ERROR(CheckReservation(n));
  std::lock_guard lock(mu_);
  JobId first = next_job_id_;
  next_job_id_ += n;
  return first;
}

Result<std::optional<Job>> MemoryStore::GetJob(JobId id) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::optional<Job>();
  return std::optional<Job>(it->second);
}

Result<JobPage> MemoryStore::ListJobs(const JobFilter& filter, JobId after_id, int limit,
                                      JobOrder order) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListJobs", limit));
  std::lock_guard lock(mu_);
  JobPage page;
  // Adds `job` if it matches; false once the page is full (and another match exists).
  auto add = [&](const Job& job) {
    if (!Matches(filter, job)) return true;
    if (static_cast<int>(page.jobs.size()) == limit) {
      page.next_after_id = page.jobs.back().id;
      return false;
    }
    page.jobs.push_back(job);
    return true;
  };
  if (order == JobOrder::kAscending) {
    for (auto it = jobs_.upper_bound(after_id); it != jobs_.end() && add(it->second); ++it) {
    }
  } else {
    auto end = after_id == 0 ? jobs_.end() : jobs_.lower_bound(after_id);
    for (auto it = std::make_reverse_iterator(end); it != jobs_.rend() && add(it->second); ++it) {
    }
  }
  return page;
}

Result<EventPage> MemoryStore::ListEvents(JobId job_id, int64_t after_seq, int limit) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListEvents", limit));
  std::lock_guard lock(mu_);
  EventPage page;
  auto it = events_.find(job_id);
  if (it == events_.end()) return page;
  for (const JobEvent& e : it->second) {
    if (e.seq <= after_seq) continue;
    if (static_cast<int>(page.events.size()) == limit) {
      page.next_after_seq = page.events.back().seq;
      break;
    }
    page.events.push_back(e);
  }
  return page;
}

Result<AuditPage> MemoryStore::ListAudit(const AuditFilter& filter, int64_t after_seq, int limit) {
  TY_RETURN_IF_ERROR(CheckListLimit("ListAudit", limit));
  std::lock_guard lock(mu_);
  AuditPage page;
  auto it = std::upper_bound(audit_.begin(), audit_.end(), after_seq,
                             [](int64_t seq, const AuditEntry& e) { return seq < e.seq; });
  for (; it != audit_.end(); ++it) {
    if (!Matches(filter, *it)) continue;
    if (static_cast<int>(page.entries.size()) == limit) {
      page.next_after_seq = page.entries.back().seq;
      break;
    }
    page.entries.push_back(*it);
  }
  return page;
}

Result<std::vector<Node>> MemoryStore::ListNodes() {
  std::lock_guard lock(mu_);
  return Values(nodes_);
}

Result<std::vector<Tenant>> MemoryStore::ListTenants() {
  std::lock_guard lock(mu_);
  return Values(tenants_);
}

Result<std::vector<Queue>> MemoryStore::ListQueues() {
  std::lock_guard lock(mu_);
  return Values(queues_);
}

Result<std::vector<PriorityClass>> MemoryStore::ListPriorityClasses() {
  std::lock_guard lock(mu_);
  return Values(priority_classes_);
}

Result<std::vector<User>> MemoryStore::ListUsers() {
  std::lock_guard lock(mu_);
  return Values(users_);
}

Result<std::vector<ApiToken>> MemoryStore::ListTokens() {
  std::lock_guard lock(mu_);
  return Values(tokens_);
}

Result<std::vector<Dataset>> MemoryStore::ListDatasets() {
  std::lock_guard lock(mu_);
  return Values(datasets_);
}

Result<std::optional<std::string>> MemoryStore::GetManifest(const std::string& version) {
  std::lock_guard lock(mu_);
  auto it = manifests_.find(version);
  if (it == manifests_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

Result<StoredState> MemoryStore::LoadAll() {
  std::lock_guard lock(mu_);
  StoredState state;
  for (const auto& [id, job] : jobs_) {
    if (!IsTerminal(job.state)) state.active_jobs.push_back(job);
  }
  state.nodes = Values(nodes_);
  state.tenants = Values(tenants_);
  state.queues = Values(queues_);
  state.priority_classes = Values(priority_classes_);
  state.users = Values(users_);
  state.tokens = Values(tokens_);
  state.datasets = Values(datasets_);
  state.next_job_id = next_job_id_;
  state.last_event_seq = last_event_seq_;
  return state;
}

int MemoryStore::SchemaVersion() const { return 0; }

}  // namespace trainyard::store
