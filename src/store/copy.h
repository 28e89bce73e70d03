// CopyStore: moves a control plane's state from one store to another — from the
// SQLite file a single server started with to the PostgreSQL database that servers
// in high availability share (docs/ha.md, "Moving from SQLite"), or back.
//
// Everything the Store holds is copied: jobs of every state with their attempts,
// each job's event log (times, actors and order kept), the audit log (in order),
// nodes, tenants, queues (parents before children), priority classes, users and API
// tokens (the tokens' hashes: the same secrets keep working), and the job id counter
// (new jobs get ids above every copied one). Event and audit sequence numbers are the
// destination's own; the order within a job's log and of the audit log is kept.
// Not in a Store and so not copied: logs, metrics series and profiles, which stay in
// the server's data dir.
//
// No I/O of its own and no clock: only calls on the two stores. The source must not
// change meanwhile (stop its server first); the destination must be empty.
#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"
#include "store/store.h"

namespace trainyard::store {

struct CopyStats {
  int64_t jobs = 0;
  int64_t events = 0;
  int64_t audit_entries = 0;
  int64_t nodes = 0;
  int64_t tenants = 0;
  int64_t queues = 0;
  int64_t priority_classes = 0;
  int64_t users = 0;
  int64_t tokens = 0;
  int64_t datasets = 0;
  JobId next_job_id = 1;
};

// Copies `from` into `to` in batches of at most `batch_jobs` jobs (with their events)
// or audit entries, calling `progress` after each. Then checks the copy: the state a
// server would load (StoredState) is equal on both sides, and so are the numbers of
// jobs, events and audit entries. FailedPrecondition naming what `to` already holds
// when it is not empty; the stores' errors as they come (a failure part-way leaves
// `to` part-copied: empty it and copy again).
Result<CopyStats> CopyStore(Store& from, Store& to, int batch_jobs = 500,
                            const std::function<void(const CopyStats&)>& progress = {});

}  // namespace trainyard::store
