// Helpers shared by the store's tests: a temporary directory that cleans up after
// itself, valid jobs, specs, users and tokens, and raw SQLite access for looking
// under a store.
//
// Test-only; not part of the store library. Thread-safety: plain values.
#pragma once

#include <sqlite3.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/auth.h"
#include "core/job.h"
#include "core/job_spec.h"
#include "core/status.h"

namespace trainyard::store::test {

// Writes `content` to `path` (binary), making its parent directories first.
inline void WriteFile(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on
// destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base ? base : "/tmp") + "/trainyard-store-XXXXXX";
    TY_CHECK_MSG(mkdtemp(pattern.data()) != nullptr, "mkdtemp " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline Timestamp At(int64_t ms) { return Timestamp(Duration(ms)); }

inline JobSpec TestSpec(const std::string& name, const std::string& tenant = "research",
                        const std::string& queue = "vision") {
  JobSpec spec;
  spec.name = name;
  spec.tenant = tenant;
  spec.queue = queue;
  spec.replicas = 2;
  spec.resources.gpus = 8;
  spec.resources.gpu_type = "H100";
  spec.command = {"python", "train.py"};
  spec.labels = {{"team", "llm"}};
  NormalizeSpec(spec);
  return spec;
}

inline Job TestJob(JobId id, const std::string& name, JobState state = JobState::kPending,
                   const std::string& tenant = "research", const std::string& queue = "vision") {
  Job job;
  job.id = id;
  job.spec = TestSpec(name, tenant, queue);
  job.state = state;
  job.submit_time = At(1'000 * id);
  job.state_time = At(1'000 * id + 500);
  job.submitted_by = "alice";
  return job;
}

inline User TestUser(const std::string& name, const std::string& tenant = "research",
                     Role role = Role::kMember) {
  User u;
  u.name = name;
  u.tenant = tenant;
  u.role = role;
  u.created = At(1'000);
  u.created_by = "bootstrap";
  return u;
}

// A token of `user` whose id is `id_digit` repeated (12 hex digits).
inline ApiToken TestToken(char id_digit, const std::string& user) {
  ApiToken t;
  t.id = std::string(kTokenIdHexDigits, id_digit);
  t.user = user;
  t.secret_hash = std::string(64, 'f');
  t.description = "token of " + user;
  t.created = At(2'000);
  return t;
}

// A second connection to a store's file, for looking at and tampering with it.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    int rc =
        sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    TY_CHECK_MSG(rc == SQLITE_OK, "open " + path);
    sqlite3_busy_timeout(db_, 5'000);
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  // Runs `sql`; returns "" on success, else SQLite's message.
  std::string Exec(const std::string& sql) {
    char* error = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    std::string out = rc == SQLITE_OK ? "" : (error != nullptr ? error : sqlite3_errstr(rc));
    sqlite3_free(error);
    return out;
  }

  // Column `col` (the first by default) of every row of `sql`, as text (NULL as
  // "NULL").
  std::vector<std::string> Column(const std::string& sql, int col = 0) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr);
    TY_CHECK_MSG(rc == SQLITE_OK, sql + ": " + sqlite3_errmsg(db_));
    std::vector<std::string> out;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, col);
      out.emplace_back(text != nullptr ? reinterpret_cast<const char*>(text) : "NULL");
    }
    TY_CHECK_MSG(rc == SQLITE_DONE, sql + ": " + sqlite3_errmsg(db_));
    sqlite3_finalize(stmt);
    return out;
  }
  std::string One(const std::string& sql) {
    std::vector<std::string> rows = Column(sql);
    TY_CHECK_MSG(rows.size() == 1, sql + ": expected one row");
    return rows[0];
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace trainyard::store::test
