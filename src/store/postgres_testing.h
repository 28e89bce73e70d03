// A throwaway PostgreSQL server for tests, and fresh schemas on it.
//
// PostgresServer::Shared() starts one server per test process on first use: initdb
// into a new temporary directory, then `postgres` listening only on a Unix socket in
// that directory (listen_addresses = '', so no TCP port that could clash), with
// fsync off. It runs as a child of the test process that dies with it
// (PR_SET_PDEATHSIG), so a crashed test leaves no server behind; at normal exit it is
// shut down (immediate mode) and its directory removed. PostgreSQL refuses to run as
// root: as root, initdb and postgres run as the `postgres` user (which the Debian
// package creates), in a directory chowned to it. The binaries are those in
// $TRAINYARD_PG_BINDIR when it is set, else the first in $PATH, else those of
// /usr/lib/postgresql/<newest>/bin.
//
// Each test takes a PostgresSchema: a fresh, empty schema (CREATE SCHEMA t_<n>) in the
// server's `postgres` database, which its conninfo makes the session's search_path, so
// a store opened on it sees nothing of other tests. A schema rather than a database
// per test: making one takes milliseconds where CREATE DATABASE copies a template
// (over 100 ms), and for a store that names no schema the two are alike.
//
// When PostgreSQL is not installed, Shared() and PostgresSchema::Create() fail with
// FailedPrecondition naming the package; TRAINYARD_SKIP_OR_FAIL_WITHOUT_POSTGRES skips
// the test then, except when $CI is set, where it fails (CI must not skip silently).
//
// Test-only; not part of the store library. Thread-safety: Shared() and Create() may
// be called from any thread; a PgConnection is for one thread at a time.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

struct pg_conn;

namespace trainyard::store::test {

class PostgresServer {
 public:
  // This process's server, started on the first call (about a second).
  static Result<PostgresServer*> Shared();

  // libpq conninfo for the `postgres` database as the superuser `postgres`; with a
  // `schema`, that schema is the session's search_path.
  std::string Conninfo(const std::string& schema = "") const;
  // The directory holding the data directory, the socket and the server's log.
  const std::string& dir() const { return dir_; }
  // Runs `sql` (no parameters, written by the test) on the server's own connection
  // to the `postgres` database.
  Status Exec(const std::string& sql);

  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

 private:
  PostgresServer() = default;
  static Result<std::unique_ptr<PostgresServer>> Start();
  void Stop();

  std::string dir_;
  int postmaster_pid_ = -1;
  std::mutex mu_;
  pg_conn* admin_ = nullptr;  // GUARDED_BY(mu_); opened on first use
};

// A fresh, empty schema on the shared server; dropped, with everything in it, on
// destruction (close the stores using it first).
class PostgresSchema {
 public:
  static Result<std::unique_ptr<PostgresSchema>> Create();
  ~PostgresSchema();
  PostgresSchema(const PostgresSchema&) = delete;
  PostgresSchema& operator=(const PostgresSchema&) = delete;

  const std::string& name() const { return name_; }
  // Connects to the server's database with this schema as the search_path.
  const std::string& conninfo() const { return conninfo_; }

 private:
  PostgresSchema(PostgresServer* server, std::string name);

  PostgresServer* server_;
  std::string name_;
  std::string conninfo_;
};

// A plain connection for looking underneath a store and breaking things: SQL written
// by the test, run as is.
class PgConnection {
 public:
  // Aborts (TY_CHECK) when it cannot connect.
  explicit PgConnection(const std::string& conninfo);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // Runs `sql`; returns "" on success, else the server's message.
  std::string Exec(const std::string& sql);
  // Column `col` of every row of `sql` as text (NULL as "NULL"); aborts on error.
  std::vector<std::string> Column(const std::string& sql, int col = 0);
  // The one value `sql` returns; aborts unless there is exactly one row.
  std::string One(const std::string& sql);

 private:
  pg_conn* conn_;
};

// True when $CI is set: tests that need PostgreSQL must fail without it, not skip.
bool PostgresRequired();

}  // namespace trainyard::store::test

// In a test body or SetUp(), given the Status of a failed Shared() or Create():
// GTEST_SKIP when PostgreSQL is not installed and $CI is not set; FAIL otherwise.
#define TRAINYARD_SKIP_OR_FAIL_WITHOUT_POSTGRES(status)                                  \
  do {                                                                                   \
    const ::trainyard::Status ty_pg_status_ = (status);                                  \
    if (ty_pg_status_.code() == ::trainyard::StatusCode::kFailedPrecondition &&          \
        !::trainyard::store::test::PostgresRequired()) {                                 \
      GTEST_SKIP() << ty_pg_status_.message();                                           \
    }                                                                                    \
    FAIL() << ty_pg_status_.ToString()                                                   \
           << (::trainyard::store::test::PostgresRequired()                              \
                   ? " ($CI is set, so tests that need PostgreSQL fail instead of skip)" \
                   : "");                                                                \
  } while (0)
