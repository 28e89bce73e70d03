#include "store/postgres_testing.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

namespace trainyard::store::test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPort = "5432";
constexpr const char* kSuperuser = "postgres";
constexpr auto kStartTimeout = std::chrono::seconds(60);

// Who the server runs as: ourselves, or (when we are root) the `postgres` user.
struct RunAs {
  bool switch_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

bool IsExecutable(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0; }

bool HasServerBinaries(const fs::path& dir) {
  return IsExecutable(dir / "initdb") && IsExecutable(dir / "postgres");
}

// The directory of initdb and postgres, or nullopt.
std::optional<std::string> FindBinDir() {
  // When set, exactly these binaries or none.
  if (const char* env = getenv("TRAINYARD_PG_BINDIR"); env != nullptr && *env != '\0') {
    if (HasServerBinaries(env)) return std::string(env);
    return std::nullopt;
  }
  if (const char* path = getenv("PATH"); path != nullptr) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      if (!dir.empty() && HasServerBinaries(dir)) return dir;
    }
  }
  // Debian and Ubuntu keep each major version's server apart.
  std::optional<std::pair<int, std::string>> newest;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    int version = std::atoi(e.path().filename().c_str());
    fs::path bin = e.path() / "bin";
    if (version > 0 && HasServerBinaries(bin) && (!newest || version > newest->first)) {
      newest = {version, bin.string()};
    }
  }
  if (newest) return newest->second;
  return std::nullopt;
}

// A directory for the server: short (a socket path has at most 107 bytes) and, as
// root, reachable by the postgres user; hence /tmp unless $TMPDIR is a plain path.
std::string BaseDir(bool as_root) {
  const char* env = getenv("TMPDIR");
  if (as_root || env == nullptr || *env != '/' || std::string_view(env).size() > 40) return "/tmp";
  for (const char* c = env; *c != '\0'; ++c) {
    if (!isalnum(static_cast<unsigned char>(*c)) &&
        std::string_view("/._-").find(*c) == std::string_view::npos) {
      return "/tmp";
    }
  }
  return env;
}

bool ProcessAlive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// Removes the directories of servers whose test process is gone (it crashed; its
// server died with it).
void RemoveStaleDirs(const std::string& base) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(base, ec)) {
    if (!e.path().filename().string().starts_with("trainyard-pg-")) continue;
    std::ifstream owner(e.path() / "owner.pid");
    pid_t pid = 0;
    if (!(owner >> pid) || ProcessAlive(pid)) continue;
    fs::remove_all(e.path(), ec);
  }
}

std::string Tail(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
  return text;
}

// Starts argv[0] (an absolute path) with stdout and stderr appended to `log`, in
// `cwd`, as `as`; with `die_with_parent`, it gets SIGQUIT (PostgreSQL's immediate
// shutdown) when the thread that started it ends.
Result<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log,
                    const std::string& cwd, const RunAs& as, bool die_with_parent) {
  // Everything the child needs is made before fork: after it, only async-signal-safe
  // calls.
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Internal("open " + log + ": " + std::strerror(errno));
  if (as.switch_user && ::fchown(fd, as.uid, as.gid) != 0) {
    ::close(fd);
    return Internal("chown " + log + ": " + std::strerror(errno));
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    if (::dup2(fd, STDOUT_FILENO) < 0 || ::dup2(fd, STDERR_FILENO) < 0) _exit(126);
    if (as.switch_user &&
        (::setgroups(0, nullptr) != 0 || ::setgid(as.gid) != 0 || ::setuid(as.uid) != 0)) {
      _exit(126);
    }
    // After setuid, which clears it.
    if (die_with_parent && (::prctl(PR_SET_PDEATHSIG, SIGQUIT) != 0 || ::getppid() != parent)) {
      _exit(126);
    }
    if (::chdir(cwd.c_str()) != 0) _exit(126);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(fd);
  return pid;
}

Status RunToEnd(const std::vector<std::string>& args, const std::string& log,
                const std::string& cwd, const RunAs& as) {
  TY_ASSIGN_OR_RETURN(pid_t pid, Spawn(args, log, cwd, as, /*die_with_parent=*/false));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Internal(std::string("waitpid: ") + std::strerror(errno));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal(args[0] + " failed (status " + std::to_string(status) + "):\n" + Tail(log));
  }
  return Status::Ok();
}

std::string FirstLine(const char* message) {
  std::string s = message != nullptr ? message : "";
  if (size_t end = s.find('\n'); end != std::string::npos) s.resize(end);
  return s;
}

std::mutex& SharedMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
// GUARDED_BY(SharedMutex()): the server, or why there is none.
PostgresServer* shared_server = nullptr;
Status* shared_error = nullptr;
pid_t shared_owner = 0;

}  // namespace

Result<std::unique_ptr<PostgresServer>> PostgresServer::Start() {
  std::optional<std::string> bin = FindBinDir();
  if (!bin) {
    const char* env = getenv("TRAINYARD_PG_BINDIR");
    std::string where = env != nullptr && *env != '\0'
                            ? "in $TRAINYARD_PG_BINDIR (" + std::string(env) + ")"
                            : "in $PATH or /usr/lib/postgresql/*/bin";
    return FailedPrecondition(
        "PostgreSQL tests need the server binaries initdb and postgres, "
        "not found " +
        where +
        "; install the Debian package postgresql (apt-get install "
        "postgresql)");
  }
  const bool as_root = ::geteuid() == 0;
  RunAs as;
  if (as_root) {
    const passwd* pw = ::getpwnam("postgres");
    if (pw == nullptr) {
      return FailedPrecondition(
          "PostgreSQL refuses to run as root and there is no `postgres` user to run it as; "
          "install the Debian package postgresql, which creates it");
    }
    as = RunAs{true, pw->pw_uid, pw->pw_gid};
  }

  std::string base = BaseDir(as_root);
  RemoveStaleDirs(base);
  std::string pattern = base + "/trainyard-pg-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Internal("mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  std::unique_ptr<PostgresServer> server(new PostgresServer);
  server->dir_ = pattern;
  {
    std::ofstream owner(server->dir_ + "/owner.pid");
    owner << ::getpid() << "\n";
  }
  if (as.switch_user && ::chown(server->dir_.c_str(), as.uid, as.gid) != 0) {
    Status s = Internal("chown " + server->dir_ + ": " + std::strerror(errno));
    server->Stop();
    return s;
  }

  const std::string data = server->dir_ + "/data";
  const std::string log = server->dir_ + "/server.log";
  Status s = RunToEnd({*bin + "/initdb", "-D", data, "-U", kSuperuser, "--auth=trust",
                       "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions"},
                      server->dir_ + "/initdb.log", server->dir_, as);
  if (!s.ok()) {
    server->Stop();
    return s;
  }

  // Started from a thread of its own that lives as long as the process and reaps the
  // server when it exits: PR_SET_PDEATHSIG fires when the starting thread ends.
  std::vector<std::string> args = {*bin + "/postgres",
                                   "-D",
                                   data,
                                   "-c",
                                   "listen_addresses=",
                                   "-c",
                                   "unix_socket_directories=" + server->dir_,
                                   "-c",
                                   std::string("port=") + kPort,
                                   "-c",
                                   "fsync=off",
                                   "-c",
                                   "synchronous_commit=off",
                                   "-c",
                                   "full_page_writes=off",
                                   "-c",
                                   "max_connections=200"};
  std::promise<Result<pid_t>> started;
  std::future<Result<pid_t>> pid_future = started.get_future();
  std::thread([args, log, cwd = server->dir_, as, started = std::move(started)]() mutable {
    Result<pid_t> pid = Spawn(args, log, cwd, as, /*die_with_parent=*/true);
    bool ok = pid.ok();
    pid_t child = ok ? *pid : -1;
    started.set_value(std::move(pid));
    if (!ok) return;
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }).detach();
  Result<pid_t> pid = pid_future.get();
  if (!pid.ok()) {
    server->Stop();
    return pid.status();
  }
  server->postmaster_pid_ = *pid;

  const std::string conninfo = server->Conninfo();
  auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (PQping(conninfo.c_str()) != PQPING_OK) {
    if (!ProcessAlive(server->postmaster_pid_) || std::chrono::steady_clock::now() > deadline) {
      Status failed = Internal("the test PostgreSQL server in " + server->dir_ +
                               " did not start:\n" + Tail(log));
      server->Stop();
      return failed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return server;
}

Status PostgresServer::Exec(const std::string& sql) {
  std::lock_guard lock(mu_);
  if (admin_ == nullptr || PQstatus(admin_) != CONNECTION_OK) {
    PQfinish(admin_);
    admin_ = PQconnectdb(Conninfo().c_str());
    if (PQstatus(admin_) != CONNECTION_OK) {
      return Internal("connecting to the test server: " + FirstLine(PQerrorMessage(admin_)));
    }
    PQsetNoticeProcessor(
        admin_, [](void*, const char*) {}, nullptr);
  }
  PGresult* r = PQexec(admin_, sql.c_str());
  Status s;
  if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
    s = Internal(sql + ": " + FirstLine(PQresultErrorMessage(r)));
  }
  PQclear(r);
  return s;
}

void PostgresServer::Stop() {
  {
    std::lock_guard lock(mu_);
    PQfinish(admin_);
    admin_ = nullptr;
  }
  if (postmaster_pid_ > 0) {
    ::kill(postmaster_pid_, SIGQUIT);  // immediate shutdown; the thread that started it reaps it
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::kill(postmaster_pid_, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    postmaster_pid_ = -1;
  }
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

Result<PostgresServer*> PostgresServer::Shared() {
  std::lock_guard lock(SharedMutex());
  if (shared_server != nullptr) return shared_server;
  if (shared_error != nullptr) return *shared_error;  // do not try again for every test
  Result<std::unique_ptr<PostgresServer>> server = Start();
  if (!server.ok()) {
    shared_error = new Status(server.status());
    return *shared_error;
  }
  shared_server = server->release();
  shared_owner = ::getpid();
  std::atexit([] {
    std::lock_guard lock(SharedMutex());
    // A forked child that exits must not stop its parent's server.
    if (shared_server != nullptr && ::getpid() == shared_owner) shared_server->Stop();
  });
  return shared_server;
}

std::string PostgresServer::Conninfo(const std::string& schema) const {
  std::string out = "host=" + dir_ + " port=" + kPort + " dbname=postgres user=" + kSuperuser;
  if (!schema.empty()) out += " options='-c search_path=" + schema + "'";
  return out;
}

Result<std::unique_ptr<PostgresSchema>> PostgresSchema::Create() {
  static std::atomic<int> next{1};
  TY_ASSIGN_OR_RETURN(PostgresServer * server, PostgresServer::Shared());
  std::string name = "t_" + std::to_string(next++);
  // Identifiers cannot be parameters; this one is ours ("t_<n>").
  TY_RETURN_IF_ERROR(server->Exec("CREATE SCHEMA " + name));
  return std::unique_ptr<PostgresSchema>(new PostgresSchema(server, std::move(name)));
}

PostgresSchema::PostgresSchema(PostgresServer* server, std::string name)
    : server_(server), name_(std::move(name)), conninfo_(server->Conninfo(name_)) {}

PostgresSchema::~PostgresSchema() {
  Status s = server_->Exec("DROP SCHEMA " + name_ + " CASCADE");
  if (!s.ok()) ADD_FAILURE() << "dropping test schema " << name_ << ": " << s.ToString();
}

PgConnection::PgConnection(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {
  TY_CHECK_MSG(PQstatus(conn_) == CONNECTION_OK,
               "connecting to " + conninfo + ": " + FirstLine(PQerrorMessage(conn_)));
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
}

PgConnection::~PgConnection() { PQfinish(conn_); }

std::string PgConnection::Exec(const std::string& sql) {
  PGresult* r = PQexec(conn_, sql.c_str());
  ExecStatusType st = PQresultStatus(r);
  std::string out =
      st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? "" : FirstLine(PQresultErrorMessage(r));
  if (out.empty() && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) out = "error";
  PQclear(r);
  return out;
}

std::vector<std::string> PgConnection::Column(const std::string& sql, int col) {
  PGresult* r = PQexec(conn_, sql.c_str());
  TY_CHECK_MSG(PQresultStatus(r) == PGRES_TUPLES_OK,
               sql + ": " + FirstLine(PQresultErrorMessage(r)));
  std::vector<std::string> out;
  for (int i = 0; i < PQntuples(r); ++i) {
    out.emplace_back(PQgetisnull(r, i, col) ? "NULL" : PQgetvalue(r, i, col));
  }
  PQclear(r);
  return out;
}

std::string PgConnection::One(const std::string& sql) {
  std::vector<std::string> rows = Column(sql);
  TY_CHECK_MSG(rows.size() == 1, sql + ": expected one row, got " + std::to_string(rows.size()));
  return rows[0];
}

bool PostgresRequired() {
  const char* ci = getenv("CI");
  return ci != nullptr && *ci != '\0';
}

}  // namespace trainyard::store::test
