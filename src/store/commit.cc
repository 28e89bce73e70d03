#include "store/commit.h"

#include <algorithm>
#include <exception>
#include <type_traits>

#include "core/auth.h"
#include "core/codec.h"
#include "core/job_spec.h"
#include "core/names.h"

namespace trainyard::store {
namespace {

constexpr size_t kMaxEventFieldBytes = 64 * 1024;
// Queues or users a message lists before "...".
constexpr int kListInMessage = 5;
// How much of an audit entry's object DescribeOp shows.
constexpr size_t kAuditObjectInMessage = 80;

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

std::string Quote(std::string_view s) { return QuoteForMessage(s); }

std::string JoinNames(const std::vector<std::string>& names, int limit) {
  std::string out;
  for (size_t i = 0; i < names.size() && static_cast<int>(i) < limit; ++i) {
    if (i) out += ", ";
    out += names[i];
  }
  if (static_cast<int>(names.size()) > limit) out += ", ...";
  return out;
}

template <typename T>
Result<std::string> Encode(const T& value) {
  try {
    return ToJson(value).dump();
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("cannot encode as JSON: ") + e.what());
  }
}

Result<std::string> PrepareJob(const Job& job) {
  if (job.id < 1) return InvalidArgument("job id must be >= 1, got " + std::to_string(job.id));
  // Submissions were checked against every rule on their way in; the store checks
  // what it must to read the job back (a job accepted before a rule was added is
  // written again on each of its transitions).
  std::vector<Diagnostic> problems = ValidateSpec(job.spec, SpecOrigin::kStored);
  if (!problems.empty()) {
    std::string msg = "spec: ";
    for (size_t i = 0; i < problems.size(); ++i) {
      if (i) msg += "; ";
      msg += problems[i].ToString();
    }
    return InvalidArgument(std::move(msg));
  }
  JobSpec normal = job.spec;
  NormalizeSpec(normal);
  if (normal != job.spec) {
    // The store reads specs back through ParseSpec, which normalises; only a
    // normalised spec reads back equal to what was written.
    return InvalidArgument("spec: is not normalised; pass it through NormalizeSpec first");
  }
  return Encode(job);
}

Status PrepareEvent(const JobEvent& e) {
  if (e.job_id < 1) {
    return InvalidArgument("event.job_id must be >= 1, got " + std::to_string(e.job_id));
  }
  if (e.kind.empty()) return InvalidArgument("event.kind must not be empty");
  for (const std::string* s : {&e.actor, &e.kind, &e.message}) {
    if (s->size() > kMaxEventFieldBytes) {
      return InvalidArgument("event fields must be at most " + std::to_string(kMaxEventFieldBytes) +
                             " bytes, got " + std::to_string(s->size()));
    }
  }
  return Status::Ok();
}

// Cuts `s` to at most `max` (>= 3) bytes, ending it with "..." when it was longer,
// without splitting a UTF-8 sequence.
void CutTo(std::string& s, size_t max) {
  if (s.size() <= max) return;
  size_t n = max - 3;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  s.resize(n);
  s += "...";
}

// Validates one op; returns its document ("" for deletes, events and audit entries).
Result<std::string> PrepareOp(const WriteBatch::Op& op) {
  using W = WriteBatch;
  return std::visit(
      Overloaded{
          [](const W::PutJobOp& o) -> Result<std::string> { return PrepareJob(o.job); },
          [](const W::PutNodeOp& o) -> Result<std::string> {
            TY_RETURN_IF_ERROR(ValidateNode(o.node));
            return Encode(o.node);
          },
          [](const W::PutTenantOp& o) -> Result<std::string> {
            TY_RETURN_IF_ERROR(ValidateTenant(o.tenant));
            return Encode(o.tenant);
          },
          [](const W::PutQueueOp& o) -> Result<std::string> {
            TY_RETURN_IF_ERROR(ValidateQueue(o.queue));
            return Encode(o.queue);
          },
          [](const W::PutPriorityClassOp& o) -> Result<std::string> {
            TY_RETURN_IF_ERROR(ValidatePriorityClass(o.priority_class));
            return Encode(o.priority_class);
          },
          [](const W::AppendEventOp& o) -> Result<std::string> {
            TY_RETURN_IF_ERROR(PrepareEvent(o.event));
            return std::string();
          },
          [](const W::PutUserOp& o) -> Result<std::string> {
            TY_RETURN_IF_ERROR(ValidateUser(o.user));
            return Encode(o.user);
          },
          [](const W::PutTokenOp& o) -> Result<std::string> {
            TY_RETURN_IF_ERROR(ValidateApiToken(o.token));
            return Encode(o.token);
          },
          [](const W::PutDatasetOp& o) -> Result<std::string> {
            TY_RETURN_IF_ERROR(ValidateDataset(o.dataset));
            return Encode(o.dataset);
          },
          [](const W::PutManifestOp& o) -> Result<std::string> {
            if (!IsContentVersion(o.version)) {
              return InvalidArgument("manifest version " + Quote(o.version) +
                                     " is not sha256:<64 hex>");
            }
            if (o.text.find('\0') != std::string::npos) {
              return InvalidArgument("manifest " + o.version + " holds a NUL byte");
            }
            return std::string();
          },
          // Deletes and audit entries (see BoundAuditEntry).
          [](const auto&) -> Result<std::string> { return std::string(); },
      },
      op);
}

// Checks that queue (tenant, name) may hang under `parent` and that the parent exists.
Status CheckQueueParent(CommitTarget& target, const Queue& q) {
  if (q.parent.empty()) return Status::Ok();
  std::string ancestor = q.parent;
  // A chain longer than the number of queues means a cycle already stored; bound the
  // walk so that corrupt data cannot hang a commit.
  for (int depth = 0; !ancestor.empty(); ++depth) {
    if (ancestor == q.name) {
      return FailedPrecondition("queue " + q.tenant + "/" + q.name + " cannot have parent " +
                                q.parent + ": it would become its own ancestor");
    }
    if (depth > 100'000) return Internal("queue hierarchy of tenant " + q.tenant + " has a cycle");
    TY_ASSIGN_OR_RETURN(std::optional<std::string> next, target.QueueParent(q.tenant, ancestor));
    if (!next.has_value()) {
      return FailedPrecondition("parent queue " + Quote(q.parent) + " does not exist in tenant " +
                                Quote(q.tenant) + "; create it first");
    }
    ancestor = *next;
  }
  return Status::Ok();
}

Status ApplyOp(const PreparedOp& p, CommitTarget& target) {
  using W = WriteBatch;
  return std::visit(
      Overloaded{
          [&](const W::PutJobOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(JobId next, target.NextJobId());
            if (o.job.id >= next) {
              return FailedPrecondition("job id " + std::to_string(o.job.id) +
                                        " was never reserved (the next id is " +
                                        std::to_string(next) + "); take ids from ReserveJobIds");
            }
            return target.WriteJob(o.job, p.doc);
          },
          [&](const W::PutNodeOp& o) -> Status { return target.WriteNode(o.node, p.doc); },
          [&](const W::DeleteNodeOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(bool exists, target.HasNode(o.name));
            if (!exists) return NotFound("node " + Quote(o.name) + " does not exist");
            return target.EraseNode(o.name);
          },
          [&](const W::PutTenantOp& o) -> Status { return target.WriteTenant(o.tenant, p.doc); },
          [&](const W::DeleteTenantOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(bool exists, target.HasTenant(o.name));
            if (!exists) return NotFound("tenant " + Quote(o.name) + " does not exist");
            TY_ASSIGN_OR_RETURN(std::vector<std::string> queues,
                                target.QueuesOfTenant(o.name, kListInMessage + 1));
            if (!queues.empty()) {
              return FailedPrecondition("tenant " + Quote(o.name) + " still has queues (" +
                                        JoinNames(queues, kListInMessage) + "); delete them first");
            }
            TY_ASSIGN_OR_RETURN(std::vector<std::string> users,
                                target.UsersOfTenant(o.name, kListInMessage + 1));
            if (!users.empty()) {
              return FailedPrecondition("tenant " + Quote(o.name) + " still has users (" +
                                        JoinNames(users, kListInMessage) + "); delete them first");
            }
            return target.EraseTenant(o.name);
          },
          [&](const W::PutQueueOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(bool tenant_exists, target.HasTenant(o.queue.tenant));
            if (!tenant_exists) {
              return FailedPrecondition("tenant " + Quote(o.queue.tenant) +
                                        " does not exist; create it first");
            }
            TY_RETURN_IF_ERROR(CheckQueueParent(target, o.queue));
            return target.WriteQueue(o.queue, p.doc);
          },
          [&](const W::DeleteQueueOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(std::optional<std::string> parent,
                                target.QueueParent(o.tenant, o.name));
            if (!parent.has_value()) {
              return NotFound("queue " + Quote(o.name) + " does not exist in tenant " +
                              Quote(o.tenant));
            }
            TY_ASSIGN_OR_RETURN(std::vector<std::string> children,
                                target.ChildQueues(o.tenant, o.name, kListInMessage + 1));
            if (!children.empty()) {
              return FailedPrecondition(
                  "queue " + o.tenant + "/" + o.name + " still has child queues (" +
                  JoinNames(children, kListInMessage) + "); delete them first");
            }
            return target.EraseQueue(o.tenant, o.name);
          },
          [&](const W::PutPriorityClassOp& o) -> Status {
            return target.WritePriorityClass(o.priority_class, p.doc);
          },
          [&](const W::DeletePriorityClassOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(bool exists, target.HasPriorityClass(o.name));
            if (!exists) return NotFound("priority class " + Quote(o.name) + " does not exist");
            return target.ErasePriorityClass(o.name);
          },
          [&](const W::AppendEventOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(bool exists, target.HasJob(o.event.job_id));
            if (!exists) {
              return FailedPrecondition("job " + std::to_string(o.event.job_id) +
                                        " does not exist; put the job before its events");
            }
            return target.WriteEvent(o.event);
          },
          [&](const W::PutUserOp& o) -> Status {
            if (!o.user.tenant.empty()) {
              TY_ASSIGN_OR_RETURN(bool tenant_exists, target.HasTenant(o.user.tenant));
              if (!tenant_exists) {
                return FailedPrecondition("tenant " + Quote(o.user.tenant) +
                                          " does not exist; create it first");
              }
            }
            return target.WriteUser(o.user, p.doc);
          },
          [&](const W::DeleteUserOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(bool exists, target.HasUser(o.name));
            if (!exists) return NotFound("user " + Quote(o.name) + " does not exist");
            return target.EraseUser(o.name);
          },
          [&](const W::PutTokenOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(bool user_exists, target.HasUser(o.token.user));
            if (!user_exists) {
              return FailedPrecondition("user " + Quote(o.token.user) +
                                        " does not exist; put the user before its tokens");
            }
            return target.WriteToken(o.token, p.doc);
          },
          [&](const W::AppendAuditOp&) -> Status { return target.WriteAudit(*p.audit); },
          [&](const W::PutDatasetOp& o) -> Status {
            if (!o.dataset.tenant.empty()) {
              TY_ASSIGN_OR_RETURN(bool tenant_exists, target.HasTenant(o.dataset.tenant));
              if (!tenant_exists) {
                return FailedPrecondition("tenant " + Quote(o.dataset.tenant) +
                                          " does not exist; create it first");
              }
            }
            return target.WriteDataset(o.dataset, p.doc);
          },
          [&](const W::DeleteDatasetOp& o) -> Status {
            TY_ASSIGN_OR_RETURN(bool exists, target.HasDataset(o.name));
            if (!exists) return NotFound("dataset " + Quote(o.name) + " does not exist");
            return target.EraseDataset(o.name);
          },
          [&](const W::PutManifestOp& o) -> Status {
            return target.WriteManifest(o.version, o.text);
          },
      },
      *p.op);
}

Status InOp(const Status& s, size_t index, size_t count, const WriteBatch::Op& op) {
  return Status(s.code(), "commit: op " + std::to_string(index + 1) + " of " +
                              std::to_string(count) + " (" + DescribeOp(op) + "): " + s.message());
}

}  // namespace

std::string DescribeOp(const WriteBatch::Op& op) {
  using W = WriteBatch;
  return std::visit(
      Overloaded{
          [](const W::PutJobOp& o) { return "PutJob " + std::to_string(o.job.id); },
          [](const W::PutNodeOp& o) { return "PutNode " + o.node.name; },
          [](const W::DeleteNodeOp& o) { return "DeleteNode " + o.name; },
          [](const W::PutTenantOp& o) { return "PutTenant " + o.tenant.name; },
          [](const W::DeleteTenantOp& o) { return "DeleteTenant " + o.name; },
          [](const W::PutQueueOp& o) { return "PutQueue " + o.queue.tenant + "/" + o.queue.name; },
          [](const W::DeleteQueueOp& o) { return "DeleteQueue " + o.tenant + "/" + o.name; },
          [](const W::PutPriorityClassOp& o) {
            return "PutPriorityClass " + o.priority_class.name;
          },
          [](const W::DeletePriorityClassOp& o) { return "DeletePriorityClass " + o.name; },
          [](const W::AppendEventOp& o) {
            return "AppendEvent job " + std::to_string(o.event.job_id);
          },
          [](const W::PutUserOp& o) { return "PutUser " + o.user.name; },
          [](const W::DeleteUserOp& o) { return "DeleteUser " + o.name; },
          [](const W::PutTokenOp& o) { return "PutToken " + o.token.id; },
          [](const W::AppendAuditOp& o) {
            std::string object = o.entry.object;
            CutTo(object, kAuditObjectInMessage);
            return "AppendAudit " + object;
          },
          [](const W::PutDatasetOp& o) { return "PutDataset " + o.dataset.name; },
          [](const W::DeleteDatasetOp& o) { return "DeleteDataset " + o.name; },
          [](const W::PutManifestOp& o) { return "PutManifest " + o.version; },
      },
      op);
}

Result<PreparedBatch> PrepareBatch(const WriteBatch& batch) {
  PreparedBatch prepared;
  prepared.ops.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const WriteBatch::Op& op = batch.ops()[i];
    Result<std::string> doc = PrepareOp(op);
    if (!doc.ok()) return InOp(doc.status(), i, batch.size(), op);
    PreparedOp& p = prepared.ops.emplace_back(PreparedOp{&op, std::move(doc).value(), {}});
    if (const auto* audit = std::get_if<WriteBatch::AppendAuditOp>(&op)) {
      p.audit = BoundAuditEntry(audit->entry);
    }
  }
  return prepared;
}

Status ApplyBatch(const PreparedBatch& batch, CommitTarget& target) {
  for (size_t i = 0; i < batch.ops.size(); ++i) {
    Status s = ApplyOp(batch.ops[i], target);
    if (!s.ok()) return InOp(s, i, batch.ops.size(), *batch.ops[i].op);
  }
  return Status::Ok();
}

Status CheckListLimit(std::string_view what, int limit) {
  if (limit < 1 || limit > kMaxListLimit) {
    return InvalidArgument(std::string(what) + ": limit must be between 1 and " +
                           std::to_string(kMaxListLimit) + ", got " + std::to_string(limit));
  }
  return Status::Ok();
}

Status CheckReservation(int64_t n) {
  if (n < 1 || n > kMaxJobIdReservation) {
    return InvalidArgument("ReserveJobIds: n must be between 1 and " +
                           std::to_string(kMaxJobIdReservation) + ", got " + std::to_string(n));
  }
  return Status::Ok();
}

bool Matches(const JobFilter& filter, const Job& job) {
  if (!filter.states.empty() &&
      std::find(filter.states.begin(), filter.states.end(), job.state) == filter.states.end()) {
    return false;
  }
  if (!filter.tenant.empty() && job.spec.tenant != filter.tenant) return false;
  if (!filter.queue.empty() && job.spec.queue != filter.queue) return false;
  return job.spec.name.compare(0, filter.name_prefix.size(), filter.name_prefix) == 0;
}

bool Matches(const AuditFilter& filter, const AuditEntry& entry) {
  return (filter.actor.empty() || entry.actor == filter.actor) &&
         (filter.tenant.empty() || entry.tenant == filter.tenant) &&
         (filter.object.empty() || entry.object == filter.object);
}

AuditEntry BoundAuditEntry(AuditEntry entry) {
  CutTo(entry.action, kMaxAuditActionBytes);
  CutTo(entry.object, kMaxAuditObjectBytes);
  CutTo(entry.message, kMaxAuditMessageBytes);
  for (std::string* s : {&entry.actor, &entry.token_id, &entry.tenant, &entry.source}) {
    CutTo(*s, kMaxAuditOtherFieldBytes);
  }
  return entry;
}

}  // namespace trainyard::store
