// Crash safety of SqliteStore: a writer process dies by SIGKILL while it commits,
// and the database must come back whole.
//
// The writer (a forked child) commits numbered batches — each several jobs and
// their events — and acknowledges a batch on a pipe only after Commit returned OK.
// It dies in one of three ways, each chosen by a count, never by a clock, so what
// the test asserts does not depend on timing:
//   - the parent kills it after reading N acknowledgements (between two commits);
//   - the parent kills it after N acknowledgements, as soon as it announces its next
//     Commit (inside a commit, at a point that depends on scheduling);
//   - it kills itself just before its N-th file write or sync, through a VFS shim
//     (at an exact point inside a commit or a migration; N sweeps over those points).
// The parent then reopens the database and checks: it opens, PRAGMA integrity_check
// is ok, every acknowledged batch is fully there, no batch is partly there, and job
// ids kept increasing across crashes. All rounds share one file, so each one also
// recovers from the crash before it.

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "store/sqlite_store.h"
#include "store/testing.h"

namespace trainyard::store {
namespace {

using test::At;
using test::RawDb;
using test::TestJob;

constexpr int kJobsPerBatch = 4;
constexpr int kEventsPerJob = 2;

// --- A VFS that forwards to the default one and dies at its N-th write or sync. ---
//
// Used only in the forked writer, which is single-threaded; plain globals suffice.

sqlite3_vfs* g_real_vfs = nullptr;
sqlite3_vfs g_killing_vfs;
sqlite3_io_methods g_killing_methods;
int64_t g_writes_left = 0;  // dies when this reaches 0; never when it starts <= 0

struct KillingFile {
  sqlite3_file base;   // first, as SQLite requires
  sqlite3_file* real;  // the default VFS's file, stored right after this struct
};

sqlite3_file* Real(sqlite3_file* f) { return reinterpret_cast<KillingFile*>(f)->real; }

void CountWrite() {
  if (--g_writes_left == 0) raise(SIGKILL);
}

int KillingOpen(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* file, int flags,
                int* out_flags) {
  auto* k = reinterpret_cast<KillingFile*>(file);
  k->real = reinterpret_cast<sqlite3_file*>(k + 1);
  int rc = g_real_vfs->xOpen(g_real_vfs, name, k->real, flags, out_flags);
  k->base.pMethods = k->real->pMethods != nullptr ? &g_killing_methods : nullptr;
  return rc;
}

// Makes the killing VFS the default for this process; it dies just before its
// `n`-th write or sync of any file.
void InstallKillingVfs(int64_t n) {
  g_writes_left = n;
  g_real_vfs = sqlite3_vfs_find(nullptr);
  TY_CHECK(g_real_vfs != nullptr);

  sqlite3_io_methods& m = g_killing_methods;
  m.iVersion = 3;
  m.xClose = [](sqlite3_file* f) { return Real(f)->pMethods->xClose(Real(f)); };
  m.xRead = [](sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
    return Real(f)->pMethods->xRead(Real(f), buf, n, off);
  };
  m.xWrite = [](sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
    CountWrite();
    return Real(f)->pMethods->xWrite(Real(f), buf, n, off);
  };
  m.xTruncate = [](sqlite3_file* f, sqlite3_int64 size) {
    return Real(f)->pMethods->xTruncate(Real(f), size);
  };
  m.xSync = [](sqlite3_file* f, int flags) {
    CountWrite();
    return Real(f)->pMethods->xSync(Real(f), flags);
  };
  m.xFileSize = [](sqlite3_file* f, sqlite3_int64* size) {
    return Real(f)->pMethods->xFileSize(Real(f), size);
  };
  m.xLock = [](sqlite3_file* f, int l) { return Real(f)->pMethods->xLock(Real(f), l); };
  m.xUnlock = [](sqlite3_file* f, int l) { return Real(f)->pMethods->xUnlock(Real(f), l); };
  m.xCheckReservedLock = [](sqlite3_file* f, int* out) {
    return Real(f)->pMethods->xCheckReservedLock(Real(f), out);
  };
  m.xFileControl = [](sqlite3_file* f, int op, void* arg) {
    return Real(f)->pMethods->xFileControl(Real(f), op, arg);
  };
  m.xSectorSize = [](sqlite3_file* f) { return Real(f)->pMethods->xSectorSize(Real(f)); };
  m.xDeviceCharacteristics = [](sqlite3_file* f) {
    return Real(f)->pMethods->xDeviceCharacteristics(Real(f));
  };
  m.xShmMap = [](sqlite3_file* f, int page, int size, int extend, void volatile** p) {
    return Real(f)->pMethods->xShmMap(Real(f), page, size, extend, p);
  };
  m.xShmLock = [](sqlite3_file* f, int offset, int n, int flags) {
    return Real(f)->pMethods->xShmLock(Real(f), offset, n, flags);
  };
  m.xShmBarrier = [](sqlite3_file* f) { Real(f)->pMethods->xShmBarrier(Real(f)); };
  m.xShmUnmap = [](sqlite3_file* f, int del) { return Real(f)->pMethods->xShmUnmap(Real(f), del); };
  m.xFetch = [](sqlite3_file* f, sqlite3_int64 off, int n, void** p) {
    return Real(f)->pMethods->xFetch(Real(f), off, n, p);
  };
  m.xUnfetch = [](sqlite3_file* f, sqlite3_int64 off, void* p) {
    return Real(f)->pMethods->xUnfetch(Real(f), off, p);
  };

  sqlite3_vfs& v = g_killing_vfs;
  v = sqlite3_vfs{};
  v.iVersion = 2;
  v.szOsFile = static_cast<int>(sizeof(KillingFile)) + g_real_vfs->szOsFile;
  v.mxPathname = g_real_vfs->mxPathname;
  v.zName = "trainyard-killing";
  v.xOpen = KillingOpen;
  v.xDelete = [](sqlite3_vfs*, const char* name, int sync_dir) {
    return g_real_vfs->xDelete(g_real_vfs, name, sync_dir);
  };
  v.xAccess = [](sqlite3_vfs*, const char* name, int flags, int* out) {
    return g_real_vfs->xAccess(g_real_vfs, name, flags, out);
  };
  v.xFullPathname = [](sqlite3_vfs*, const char* name, int n, char* out) {
    return g_real_vfs->xFullPathname(g_real_vfs, name, n, out);
  };
  v.xDlOpen = [](sqlite3_vfs*, const char* name) { return g_real_vfs->xDlOpen(g_real_vfs, name); };
  v.xDlError = [](sqlite3_vfs*, int n, char* out) { g_real_vfs->xDlError(g_real_vfs, n, out); };
  v.xDlSym = [](sqlite3_vfs*, void* handle, const char* symbol) {
    return g_real_vfs->xDlSym(g_real_vfs, handle, symbol);
  };
  v.xDlClose = [](sqlite3_vfs*, void* handle) { g_real_vfs->xDlClose(g_real_vfs, handle); };
  v.xRandomness = [](sqlite3_vfs*, int n, char* out) {
    return g_real_vfs->xRandomness(g_real_vfs, n, out);
  };
  v.xSleep = [](sqlite3_vfs*, int us) { return g_real_vfs->xSleep(g_real_vfs, us); };
  v.xCurrentTime = [](sqlite3_vfs*, double* t) { return g_real_vfs->xCurrentTime(g_real_vfs, t); };
  v.xGetLastError = [](sqlite3_vfs*, int n, char* out) {
    return g_real_vfs->xGetLastError(g_real_vfs, n, out);
  };
  v.xCurrentTimeInt64 = [](sqlite3_vfs*, sqlite3_int64* t) {
    return g_real_vfs->xCurrentTimeInt64(g_real_vfs, t);
  };
  TY_CHECK(sqlite3_vfs_register(&v, /*makeDflt=*/1) == SQLITE_OK);
}

// --- The writer and the parent's side of the pipe. ---

// What the writer says on the pipe: a batch number and whether its Commit is about
// to start or has returned OK.
struct Message {
  enum Kind : int64_t { kCommitting, kCommitted };
  Kind kind;
  int64_t batch;
};

struct Round {
  enum class Death {
    kAfterAcks,         // the parent kills it after `n` acknowledgements
    kWhenCommitStarts,  // ... after `n` acknowledgements, when the next Commit starts
    kAtWrite,           // it dies just before its `n`-th file write or sync
  };
  Death death;
  int64_t n;
  SqliteOptions::Sync sync;
};

// The child: commits batches first_batch, first_batch + 1, ... announcing each before
// Commit and acknowledging it once Commit returned OK. Runs until killed.
[[noreturn]] void RunWriter(const std::string& path, const Round& round, int64_t first_batch,
                            int fd) {
  // Die with the parent, should it fail before killing us.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) _exit(10);
  if (round.death == Round::Death::kAtWrite) InstallKillingVfs(round.n);
  auto say = [fd](Message m) {
    if (write(fd, &m, sizeof m) != static_cast<ssize_t>(sizeof m)) _exit(5);
  };
  try {
    Result<std::unique_ptr<Store>> store = SqliteStore::Open(path, {.synchronous = round.sync});
    if (!store.ok()) _exit(2);
    for (int64_t b = first_batch;; ++b) {
      Result<JobId> first = (*store)->ReserveJobIds(kJobsPerBatch);
      if (!first.ok()) _exit(3);
      WriteBatch batch;
      for (int j = 0; j < kJobsPerBatch; ++j) {
        Job job = TestJob(*first + j, "batch-" + std::to_string(b));
        job.spec.labels["batch"] = std::to_string(b);
        batch.PutJob(job);
        for (int e = 0; e < kEventsPerJob; ++e) {
          batch.AppendEvent(job.id, At(b), "writer", "Tick", std::to_string(b));
        }
      }
      say({Message::kCommitting, b});
      if (!(*store)->Commit(batch).ok()) _exit(4);
      say({Message::kCommitted, b});
    }
  } catch (...) {
    _exit(6);
  }
}

// Reads one message; false at end of stream. Writes this small to a pipe are atomic,
// so a message is never torn.
bool ReadMessage(int fd, Message& m) {
  auto* p = reinterpret_cast<char*>(&m);
  size_t got = 0;
  while (got < sizeof m) {
    ssize_t n = read(fd, p + got, sizeof m - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

struct RoundResult {
  int64_t acked_count = 0;  // acknowledgements read before the parent's kill
  int64_t last_acked = 0;   // highest batch acknowledged, before or after the kill
};

// Forks a writer, lets it die as `round` says, reaps it.
RoundResult RunUntilDeath(const std::string& path, const Round& round, int64_t first_batch) {
  int fds[2];
  TY_CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  TY_CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    RunWriter(path, round, first_batch, fds[1]);
  }
  close(fds[1]);
  RoundResult result;
  Message m;
  if (round.death != Round::Death::kAtWrite) {
    while (result.acked_count < round.n && ReadMessage(fds[0], m)) {
      if (m.kind != Message::kCommitted) continue;
      ++result.acked_count;
      result.last_acked = m.batch;
    }
    if (round.death == Round::Death::kWhenCommitStarts) {
      while (ReadMessage(fds[0], m) && m.kind != Message::kCommitting) {
      }
    }
    kill(pid, SIGKILL);
  }
  int status = 0;
  TY_CHECK(waitpid(pid, &status, 0) == pid);
  // Everything the writer acknowledged before it died promises a durable batch.
  while (ReadMessage(fds[0], m)) {
    if (m.kind == Message::kCommitted) result.last_acked = m.batch;
  }
  close(fds[0]);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the writer stopped by itself with status " << status;
  return result;
}

std::string Describe(const Round& round) {
  switch (round.death) {
    case Round::Death::kAfterAcks:
      return "killed after " + std::to_string(round.n) + " acks";
    case Round::Death::kWhenCommitStarts:
      return "killed after " + std::to_string(round.n) + " acks, in the next commit";
    case Round::Death::kAtWrite:
      return "died at write " + std::to_string(round.n);
  }
  return "";
}

std::vector<Round> Rounds() {
  using D = Round::Death;
  using S = SqliteOptions::Sync;
  std::vector<Round> rounds = {
      {D::kAtWrite, 2, S::kFull},  // inside the first migration
      {D::kAtWrite, 5, S::kFull},           {D::kAfterAcks, 5, S::kFull},
      {D::kWhenCommitStarts, 37, S::kFull}, {D::kAfterAcks, 120, S::kNormal},
      {D::kWhenCommitStarts, 1, S::kOff},   {D::kAfterAcks, 64, S::kOff},
  };
  // Every write and sync point of a few commits, in each sync mode.
  for (int64_t n = 1; n <= 24; ++n) {
    rounds.push_back({D::kAtWrite, 10 + n,
                      n % 3 == 0   ? S::kOff
                      : n % 3 == 1 ? S::kNormal
                                   : S::kFull});
  }
  return rounds;
}

TEST(SqliteCrashTest, EveryBatchIsWhollyPresentOrWhollyAbsent) {
  test::TempDir dir;
  const std::string path = dir.File("state.db");
  int64_t batches_present = 0;  // batches 1..batches_present are in the database
  JobId last_reserved = 0;      // the id the parent reserved after the previous round
  int64_t acked_total = 0;
  for (const Round& round : Rounds()) {
    SCOPED_TRACE(Describe(round));
    RoundResult r = RunUntilDeath(path, round, batches_present + 1);
    if (round.death != Round::Death::kAtWrite) {
      ASSERT_EQ(r.acked_count, round.n) << "the writer died before it was killed";
    }
    acked_total += r.acked_count;

    Result<std::unique_ptr<Store>> store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    RawDb raw(path);
    ASSERT_EQ(raw.One("PRAGMA integrity_check"), "ok");
    ASSERT_TRUE(raw.Column("PRAGMA foreign_key_check").empty());

    // Jobs and events per batch, and the id range of each batch.
    std::map<int64_t, int> jobs_of, events_of;
    std::map<int64_t, std::pair<JobId, JobId>> ids_of;
    for (const std::string& row :
         raw.Column("SELECT json_extract(doc, '$.spec.labels.batch') || ' ' || id FROM jobs")) {
      int64_t batch = std::stoll(row.substr(0, row.find(' ')));
      JobId id = std::stoll(row.substr(row.find(' ') + 1));
      ++jobs_of[batch];
      auto [it, fresh] = ids_of.try_emplace(batch, id, id);
      if (!fresh) {
        it->second.first = std::min(it->second.first, id);
        it->second.second = std::max(it->second.second, id);
      }
    }
    for (const std::string& message : raw.Column("SELECT message FROM job_events")) {
      ++events_of[std::stoll(message)];
    }

    // Batches 1..N, each complete, nothing else; N covers every acknowledgement.
    int64_t n = jobs_of.empty() ? 0 : jobs_of.rbegin()->first;
    EXPECT_GE(n, r.last_acked) << "an acknowledged batch is missing";
    EXPECT_EQ(static_cast<int64_t>(jobs_of.size()), n) << "a batch in the middle is missing";
    for (int64_t b = 1; b <= n; ++b) {
      EXPECT_EQ(jobs_of[b], kJobsPerBatch) << "batch " << b << " is partial";
      EXPECT_EQ(events_of[b], kJobsPerBatch * kEventsPerJob) << "batch " << b << " is partial";
    }
    EXPECT_EQ(events_of.size(), jobs_of.size()) << "events of a batch that is absent";
    // Ids increase from batch to batch, and never reuse one reserved before a crash.
    JobId previous_max = 0;
    for (const auto& [batch, range] : ids_of) {
      EXPECT_GT(range.first, previous_max) << "batch " << batch;
      if (batch > batches_present) {
        EXPECT_GT(range.first, last_reserved) << "batch " << batch << " reused an id";
      }
      previous_max = range.second;
    }

    // The store itself reads back what this round wrote, and keeps handing out fresh
    // ids. (Decoding every job each round would dominate the test's time.)
    Result<JobPage> fresh =
        (*store)->ListJobs({}, last_reserved, kMaxListLimit, JobOrder::kAscending);
    ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
    EXPECT_EQ(static_cast<int64_t>(fresh->jobs.size()), (n - batches_present) * kJobsPerBatch);
    Result<JobId> next = (*store)->ReserveJobIds(1);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    EXPECT_GT(*next, previous_max);
    last_reserved = *next;
    batches_present = n;
  }
  EXPECT_GE(batches_present, acked_total);

  Result<std::unique_ptr<Store>> store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Result<StoredState> state = (*store)->LoadAll();
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(static_cast<int64_t>(state->active_jobs.size()), batches_present * kJobsPerBatch);
  EXPECT_GE(state->last_event_seq, batches_present * kJobsPerBatch * kEventsPerJob);
}

}  // namespace
}  // namespace trainyard::store
