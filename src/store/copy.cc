#include "store/copy.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace trainyard::store {
namespace {

// What `to` holds that makes it not empty, or "" when it is empty.
Result<std::string> Contents(Store& to) {
  TY_ASSIGN_OR_RETURN(StoredState s, to.LoadAll());
  TY_ASSIGN_OR_RETURN(JobPage jobs, to.ListJobs({}, 0, 1, JobOrder::kAscending));
  TY_ASSIGN_OR_RETURN(AuditPage audit, to.ListAudit({}, 0, 1));
  std::vector<std::string> held;
  auto count = [&](size_t n, const char* what) {
    if (n > 0) held.push_back(std::to_string(n) + " " + what);
  };
  if (!jobs.jobs.empty()) held.push_back("jobs");
  count(s.nodes.size(), "node(s)");
  count(s.tenants.size(), "tenant(s)");
  count(s.queues.size(), "queue(s)");
  count(s.priority_classes.size(), "priority class(es)");
  count(s.users.size(), "user(s)");
  count(s.tokens.size(), "token(s)");
  count(s.datasets.size(), "dataset(s)");
  if (!audit.entries.empty()) held.push_back("audit entries");
  if (held.empty() && s.next_job_id != 1) {
    held.push_back("reserved job ids up to " + std::to_string(s.next_job_id - 1));
  }
  std::string out;
  for (const std::string& h : held) out += (out.empty() ? "" : ", ") + h;
  return out;
}

// Every event of `job`, in order.
Result<std::vector<JobEvent>> AllEvents(Store& s, JobId job) {
  std::vector<JobEvent> out;
  int64_t after = 0;
  for (;;) {
    TY_ASSIGN_OR_RETURN(EventPage page, s.ListEvents(job, after, kMaxListLimit));
    out.insert(out.end(), page.events.begin(), page.events.end());
    if (!page.next_after_seq) return out;
    after = *page.next_after_seq;
  }
}

// Queues with every parent before its children (the store refuses a queue whose
// parent is missing).
Result<std::vector<Queue>> ParentsFirst(std::vector<Queue> queues) {
  std::vector<Queue> out;
  std::set<std::pair<std::string, std::string>> placed;
  while (!queues.empty()) {
    const size_t before = queues.size();
    std::vector<Queue> later;
    for (Queue& q : queues) {
      if (q.parent.empty() || placed.contains({q.tenant, q.parent})) {
        placed.insert({q.tenant, q.name});
        out.push_back(std::move(q));
      } else {
        later.push_back(std::move(q));
      }
    }
    queues = std::move(later);
    if (queues.size() == before) {
      return DataLoss("copy: queue " + queues.front().tenant + "/" + queues.front().name +
                      " names parent " + queues.front().parent + ", which the source lacks");
    }
  }
  return out;
}

Status Check(bool equal, const std::string& what) {
  if (equal) return Status::Ok();
  return Internal("copy: check after copying: " + what +
                  " differ between source and destination; the destination is not a "
                  "faithful copy (empty it and copy again)");
}

}  // namespace

Result<CopyStats> CopyStore(Store& from, Store& to, int batch_jobs,
                            const std::function<void(const CopyStats&)>& progress) {
  batch_jobs = std::clamp(batch_jobs, 1, kMaxListLimit);
  TY_ASSIGN_OR_RETURN(std::string held, Contents(to));
  if (!held.empty()) {
    return FailedPrecondition("copy: the destination " + to.Describe() + " is not empty (" + held +
                              "); copy only into an empty store");
  }
  TY_ASSIGN_OR_RETURN(StoredState src, from.LoadAll());
  CopyStats stats;
  auto tick = [&] {
    if (progress) progress(stats);
  };

  // Job ids first: the store accepts only jobs whose ids it reserved.
  for (JobId left = src.next_job_id - 1; left > 0;) {
    const int64_t n = std::min<int64_t>(left, kMaxJobIdReservation);
    TY_RETURN_IF_ERROR(to.ReserveJobIds(n).status());
    left -= n;
  }
  stats.next_job_id = src.next_job_id;

  // The tenancy, users and tokens, nodes: one batch, in dependency order.
  {
    WriteBatch b;
    for (const Tenant& t : src.tenants) b.PutTenant(t);
    TY_ASSIGN_OR_RETURN(std::vector<Queue> queues, ParentsFirst(src.queues));
    for (const Queue& q : queues) b.PutQueue(q);
    for (const PriorityClass& pc : src.priority_classes) b.PutPriorityClass(pc);
    for (const User& u : src.users) b.PutUser(u);
    for (const ApiToken& t : src.tokens) b.PutToken(t);
    for (const Node& n : src.nodes) b.PutNode(n);
    TY_RETURN_IF_ERROR(to.Commit(b));
    stats.tenants = static_cast<int64_t>(src.tenants.size());
    stats.queues = static_cast<int64_t>(queues.size());
    stats.priority_classes = static_cast<int64_t>(src.priority_classes.size());
    stats.users = static_cast<int64_t>(src.users.size());
    stats.tokens = static_cast<int64_t>(src.tokens.size());
    stats.nodes = static_cast<int64_t>(src.nodes.size());
    tick();
  }

  // Datasets, each with the manifests of its versions (a batch per dataset: manifests
  // can be megabytes).
  for (const Dataset& d : src.datasets) {
    WriteBatch b;
    for (const DatasetVersion& v : d.versions) {
      TY_ASSIGN_OR_RETURN(std::optional<std::string> text, from.GetManifest(v.version));
      if (!text) {
        return DataLoss("dataset " + d.name + ": the manifest of version " + v.version +
                        " is missing from the source store");
      }
      b.PutManifest(v.version, std::move(*text));
    }
    b.PutDataset(d);
    TY_RETURN_IF_ERROR(to.Commit(b));
    ++stats.datasets;
  }
  tick();

  // Jobs of every state, each with its event log, a batch at a time.
  for (JobId after = 0;;) {
    TY_ASSIGN_OR_RETURN(JobPage page, from.ListJobs({}, after, batch_jobs, JobOrder::kAscending));
    WriteBatch b;
    int64_t events = 0;
    for (const Job& job : page.jobs) {
      b.PutJob(job);
      TY_ASSIGN_OR_RETURN(std::vector<JobEvent> log, AllEvents(from, job.id));
      for (JobEvent& e : log) {
        e.seq = 0;  // the destination numbers them
        b.AppendEvent(std::move(e));
      }
      events += static_cast<int64_t>(log.size());
    }
    TY_RETURN_IF_ERROR(to.Commit(b));
    stats.jobs += static_cast<int64_t>(page.jobs.size());
    stats.events += events;
    tick();
    if (!page.next_after_id) break;
    after = *page.next_after_id;
  }

  // The audit log, in order.
  for (int64_t after = 0;;) {
    TY_ASSIGN_OR_RETURN(AuditPage page, from.ListAudit({}, after, batch_jobs));
    WriteBatch b;
    for (AuditEntry e : page.entries) {
      e.seq = 0;
      b.AppendAudit(std::move(e));
    }
    TY_RETURN_IF_ERROR(to.Commit(b));
    stats.audit_entries += static_cast<int64_t>(page.entries.size());
    tick();
    if (!page.next_after_seq) break;
    after = *page.next_after_seq;
  }

  // The check: what a server would load, then every job and its log, then the audit
  // log, read back from both sides.
  TY_ASSIGN_OR_RETURN(StoredState dst, to.LoadAll());
  TY_RETURN_IF_ERROR(Check(src.active_jobs == dst.active_jobs, "unfinished jobs"));
  TY_RETURN_IF_ERROR(Check(src.nodes == dst.nodes, "nodes"));
  TY_RETURN_IF_ERROR(Check(src.tenants == dst.tenants, "tenants"));
  TY_RETURN_IF_ERROR(Check(src.queues == dst.queues, "queues"));
  TY_RETURN_IF_ERROR(Check(src.priority_classes == dst.priority_classes, "priority classes"));
  TY_RETURN_IF_ERROR(Check(src.users == dst.users, "users"));
  TY_RETURN_IF_ERROR(Check(src.tokens == dst.tokens, "API tokens"));
  TY_RETURN_IF_ERROR(Check(src.datasets == dst.datasets, "datasets"));
  for (const Dataset& d : src.datasets) {
    for (const DatasetVersion& v : d.versions) {
      TY_ASSIGN_OR_RETURN(std::optional<std::string> a, from.GetManifest(v.version));
      TY_ASSIGN_OR_RETURN(std::optional<std::string> b, to.GetManifest(v.version));
      TY_RETURN_IF_ERROR(Check(a == b, "the manifest of " + d.name + " " + v.version));
    }
  }
  TY_RETURN_IF_ERROR(Check(src.next_job_id == dst.next_job_id, "next job ids"));
  int64_t jobs = 0;
  for (JobId after = 0;;) {
    TY_ASSIGN_OR_RETURN(JobPage a, from.ListJobs({}, after, batch_jobs, JobOrder::kAscending));
    TY_ASSIGN_OR_RETURN(JobPage b, to.ListJobs({}, after, batch_jobs, JobOrder::kAscending));
    TY_RETURN_IF_ERROR(Check(a.jobs == b.jobs, "jobs after id " + std::to_string(after)));
    for (const Job& job : a.jobs) {
      TY_ASSIGN_OR_RETURN(std::vector<JobEvent> ea, AllEvents(from, job.id));
      TY_ASSIGN_OR_RETURN(std::vector<JobEvent> eb, AllEvents(to, job.id));
      bool same = ea.size() == eb.size();
      for (size_t i = 0; same && i < ea.size(); ++i) {
        ea[i].seq = eb[i].seq;
        same = ea[i] == eb[i];
      }
      TY_RETURN_IF_ERROR(Check(same, "the event logs of job " + std::to_string(job.id)));
    }
    jobs += static_cast<int64_t>(a.jobs.size());
    if (!a.next_after_id) break;
    after = *a.next_after_id;
  }
  TY_RETURN_IF_ERROR(Check(jobs == stats.jobs, "numbers of jobs"));
  for (int64_t after_a = 0, after_b = 0;;) {
    TY_ASSIGN_OR_RETURN(AuditPage a, from.ListAudit({}, after_a, batch_jobs));
    TY_ASSIGN_OR_RETURN(AuditPage b, to.ListAudit({}, after_b, batch_jobs));
    bool same = a.entries.size() == b.entries.size();
    for (size_t i = 0; same && i < a.entries.size(); ++i) {
      a.entries[i].seq = b.entries[i].seq;
      same = a.entries[i] == b.entries[i];
    }
    TY_RETURN_IF_ERROR(Check(same, "audit logs"));
    if (!a.next_after_seq || !b.next_after_seq) {
      TY_RETURN_IF_ERROR(Check(a.next_after_seq.has_value() == b.next_after_seq.has_value(),
                               "lengths of the audit logs"));
      break;
    }
    after_a = *a.next_after_seq;
    after_b = *b.next_after_seq;
  }
  return stats;
}

}  // namespace trainyard::store
