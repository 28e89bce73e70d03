#include "agent/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "agent/container.h"
#include "core/job_spec.h"
#include "core/spec_paths.h"

namespace trainyard::agent {
namespace {

int DupAbove2(int fd) {
  if (fd > 2) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return moved;
}

std::string Errno(int e) { return std::strerror(e); }

// Where the exec helper finds its status descriptor.
constexpr int kStatusFd = 3;

std::string JoinDirs(const std::vector<std::string>& dirs) {
  std::string out;
  for (const std::string& d : dirs) out += (out.empty() ? "" : ", ") + d;
  return out;
}

std::string CurrentDir() {
  char buf[PATH_MAX];
  return getcwd(buf, sizeof buf) != nullptr ? std::string(buf) : std::string("/");
}

// Checks the workdir (held open as `dir_fd`, -1 when none) and the path_env values of
// `spec` against spec.allowed_dirs.
Status CheckConfined(const LaunchSpec& spec, int dir_fd) {
  std::string base;  // where the task starts, resolved
  if (dir_fd < 0) {
    base = CurrentDir();
  } else {
    // What the descriptor we hold (and will enter) is, not what its name means now.
    char buf[PATH_MAX];
    const std::string link = "/proc/self/fd/" + std::to_string(dir_fd);
    ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
    if (n > 0 && buf[0] == '/') {
      base.assign(buf, static_cast<size_t>(n));
    } else {
      // No /proc: resolve the name, and make sure it still is the directory we hold.
      auto resolved = ResolvePath(spec.workdir, CurrentDir());
      struct stat held {};
      struct stat named {};
      if (!resolved.ok() || fstat(dir_fd, &held) != 0 || stat(resolved->c_str(), &named) != 0 ||
          held.st_dev != named.st_dev || held.st_ino != named.st_ino) {
        return FailedPrecondition("working_dir " + spec.workdir +
                                  ": cannot tell where it leads (no /proc/self/fd, and its name "
                                  "no longer leads to the directory opened); refused, since "
                                  "this agent allows only " +
                                  JoinDirs(spec.allowed_dirs));
      }
      base = *resolved;
    }
    TY_RETURN_IF_ERROR(CheckAllowedPath("working_dir", spec.workdir, base, spec.allowed_dirs));
  }
  for (const std::string& name : spec.path_env) {
    auto it = spec.env.find(name);
    if (it == spec.env.end() || it->second.empty()) continue;
    auto resolved = ResolvePath(it->second, base);
    if (!resolved.ok()) {
      return Status(resolved.status().code(), name + " " + resolved.status().message());
    }
    TY_RETURN_IF_ERROR(CheckAllowedPath(name, it->second, *resolved, spec.allowed_dirs));
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> ResolvePath(const std::string& path, const std::string& base) {
  if (std::string problem = PathTextProblem(path); !problem.empty()) {
    return InvalidArgument(path + ": " + problem);
  }
  std::string prefix = NormalizePath(path.starts_with('/') ? path : base + "/" + path);
  std::string tail;  // the components that do not exist (yet)
  for (;;) {
    char buf[PATH_MAX];
    if (realpath(prefix.c_str(), buf) != nullptr) {
      std::string out = buf;
      if (!tail.empty()) out += (out == "/" ? "" : "/") + tail;
      return out;
    }
    const int e = errno;
    if (e != ENOENT && e != ENOTDIR) {
      return FailedPrecondition(path + ": cannot resolve " + prefix + ": " + Errno(e));
    }
    struct stat st {};
    if (lstat(prefix.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      return FailedPrecondition(path + ": " + prefix +
                                " is a symlink to something that does not exist, so where it "
                                "leads cannot be checked");
    }
    const size_t slash = prefix.rfind('/');
    if (slash == std::string::npos || prefix == "/") {
      return FailedPrecondition(path + ": cannot resolve " + prefix + ": " + Errno(e));
    }
    const std::string last = prefix.substr(slash + 1);
    tail = tail.empty() ? last : last + "/" + tail;
    prefix = slash == 0 ? "/" : prefix.substr(0, slash);
  }
}

Status CheckAllowedPath(const std::string& what, const std::string& path,
                        const std::string& resolved, const std::vector<std::string>& allowed_dirs) {
  for (const std::string& dir : allowed_dirs) {
    // An allowed dir may itself be (or pass through) a symlink: compare real paths.
    char buf[PATH_MAX];
    const std::string real = realpath(dir.c_str(), buf) != nullptr ? buf : NormalizePath(dir);
    if (PathWithin(resolved, real) || PathWithin(resolved, NormalizePath(dir))) {
      return Status::Ok();
    }
  }
  std::string where = resolved == NormalizePath(path) ? " is" : " resolves to " + resolved + ",";
  return FailedPrecondition(what + " " + path + where +
                            " outside the directories this agent allows (--allowed-dirs " +
                            JoinDirs(allowed_dirs) + ")");
}

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return Internal(path + ": cannot create its directory: " + ec.message());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
    f << content;
    f.flush();
    if (!f) return Internal(tmp + ": cannot write it");
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) return Internal(path + ": " + ec.message());
  return Status::Ok();
}

std::string ResolveProgram(const std::string& program, const std::string& path_value) {
  if (program.find('/') != std::string::npos) return program;
  size_t start = 0;
  while (start <= path_value.size()) {
    size_t end = path_value.find(':', start);
    if (end == std::string::npos) end = path_value.size();
    std::string dir = path_value.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + program;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return "";
}

Result<std::unique_ptr<TaskProcess>> TaskProcess::Start(const LaunchSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return InvalidArgument("argv: must name a program, got an empty argv");
  }
  // Messages may name env values (PATH); the secret ones never.
  auto redacted = [&spec](const Status& s) {
    return Status(s.code(), RedactSecretValues(spec.env, spec.secret_env, s.message()));
  };
  std::string path_value;
  if (auto it = spec.env.find("PATH"); it != spec.env.end()) {
    path_value = it->second;
  } else if (const char* p = getenv("PATH")) {
    path_value = p;
  }
  std::string program = ResolveProgram(spec.argv[0], path_value);
  if (program.empty()) {
    return redacted(NotFound("execve " + spec.argv[0] + ": not found in PATH " + path_value));
  }

  // The workdir is opened here and entered with fchdir in the child, so the directory
  // checked is the directory entered.
  int dir_fd = -1;
  if (!spec.workdir.empty()) {
    dir_fd = open(spec.workdir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
      const int e = errno;
      return Status(e == ENOENT ? StatusCode::kNotFound : StatusCode::kFailedPrecondition,
                    "chdir " + spec.workdir + ": " + Errno(e));
    }
  }
  if (!spec.allowed_dirs.empty()) {
    if (Status s = CheckConfined(spec, dir_fd); !s.ok()) {
      if (dir_fd >= 0) close(dir_fd);
      return redacted(s);
    }
  }

  // Through the exec helper when the task joins a cgroup or changes identity.
  const bool helper = !spec.cgroup_procs.empty() || spec.uid >= 0;
  std::vector<std::string> helper_argv;
  if (helper) {
    if (spec.exec_helper.empty()) {
      if (dir_fd >= 0) close(dir_fd);
      return FailedPrecondition(
          "starting " + spec.argv[0] +
          ": a cgroup or another user needs trainyard-exec, which this agent did not find "
          "beside its executable");
    }
    if ((spec.uid >= 0) != (spec.gid >= 0)) {
      if (dir_fd >= 0) close(dir_fd);
      return InvalidArgument("run as: uid and gid go together, got uid " +
                             std::to_string(spec.uid) + " and gid " + std::to_string(spec.gid));
    }
    helper_argv = {spec.exec_helper, "--status-fd", std::to_string(kStatusFd)};
    for (const std::string& f : spec.cgroup_procs) {
      helper_argv.insert(helper_argv.end(), {"--join", f});
    }
    if (spec.uid >= 0) {
      helper_argv.insert(helper_argv.end(),
                         {"--uid", std::to_string(spec.uid), "--gid", std::to_string(spec.gid)});
    }
    helper_argv.insert(helper_argv.end(), {"--exec", program, "--"});
    helper_argv.insert(helper_argv.end(), spec.argv.begin(), spec.argv.end());
  }
  const std::vector<std::string>& args = helper ? helper_argv : spec.argv;
  const std::string& exe = helper ? spec.exec_helper : program;

  // Everything the child needs is built before it starts.
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = -1;
  if (spec.output_fd >= 0) {
    log_fd = fcntl(spec.output_fd, F_DUPFD_CLOEXEC, 3);
    if (log_fd < 0) {
      const int e = errno;
      if (dir_fd >= 0) close(dir_fd);
      return Internal("starting " + spec.argv[0] + ": output descriptor: " + Errno(e));
    }
  } else {
    std::error_code ec;
    std::filesystem::path log_path(spec.log_path);
    if (log_path.has_parent_path()) {
      std::filesystem::create_directories(log_path.parent_path(), ec);
      if (ec) {
        if (dir_fd >= 0) close(dir_fd);
        return Internal("log file " + spec.log_path +
                        ": cannot create its directory: " + ec.message());
      }
    }
    log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      const int e = errno;
      if (dir_fd >= 0) close(dir_fd);
      return Internal("log file " + spec.log_path + ": " + Errno(e));
    }
    log_fd = DupAbove2(log_fd);
    // Another user's: theirs alone to read (the agent, root, reads it to ship it).
    if (log_fd >= 0 && spec.uid >= 0 &&
        (fchown(log_fd, static_cast<uid_t>(spec.uid), static_cast<gid_t>(spec.gid)) != 0 ||
         fchmod(log_fd, 0600) != 0)) {
      const int e = errno;
      close(log_fd);
      if (dir_fd >= 0) close(dir_fd);
      return FailedPrecondition("log file " + spec.log_path + ": chown to " +
                                std::to_string(spec.uid) + ":" + std::to_string(spec.gid) + ": " +
                                Errno(e));
    }
  }
  int null_fd = DupAbove2(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_fd < 0 || log_fd < 0) {
    int e = errno;
    if (log_fd >= 0) close(log_fd);
    if (null_fd >= 0) close(null_fd);
    if (dir_fd >= 0) close(dir_fd);
    return Internal("starting " + spec.argv[0] + ": " + Errno(e));
  }

  // posix_spawn, not fork: glibc starts the child with CLONE_VM | CLONE_VFORK, so the
  // agent's page tables are not copied for a child that only execs (fork was most of
  // the agent's CPU per task). The child: its own session (killed as a group), signals
  // unblocked and at their defaults, the workdir entered, stdin from /dev/null, output
  // to the log, no other descriptor. A step that fails comes back as the error.
  // The helper's status descriptor: what it writes is why it failed; EOF, that it
  // exec'd the program.
  int status_pipe[2] = {-1, -1};
  if (helper && pipe2(status_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    close(log_fd);
    close(null_fd);
    if (dir_fd >= 0) close(dir_fd);
    return Internal("starting " + spec.argv[0] + ": status pipe: " + Errno(e));
  }
  pid_t pid = -1;
  int rc = 0;
  {
    posix_spawnattr_t attr;
    posix_spawn_file_actions_t actions;
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&actions);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (dir_fd >= 0) posix_spawn_file_actions_addfchdir_np(&actions, dir_fd);
    posix_spawn_file_actions_adddup2(&actions, null_fd, 0);
    posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
    if (helper) posix_spawn_file_actions_adddup2(&actions, status_pipe[1], kStatusFd);
    posix_spawn_file_actions_addclosefrom_np(&actions, helper ? kStatusFd + 1 : 3);
    rc = posix_spawn(&pid, exe.c_str(), &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  close(log_fd);
  close(null_fd);
  if (helper) {
    close(status_pipe[1]);
    std::string why;
    if (rc == 0) {
      char buf[512];
      for (;;) {
        ssize_t n = read(status_pipe[0], buf, sizeof buf);
        if (n > 0) {
          why.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          break;
        }
      }
    }
    close(status_pipe[0]);
    if (!why.empty()) {
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (dir_fd >= 0) close(dir_fd);
      return redacted(FailedPrecondition(why));
    }
  }
  if (rc != 0) {
    // Which step failed is not reported; the workdir is the one that can, besides the
    // program itself (it was opened above, but entering it needs search permission).
    const bool chdir_failed = dir_fd >= 0 && faccessat(dir_fd, "", X_OK, AT_EMPTY_PATH) != 0;
    if (dir_fd >= 0) close(dir_fd);
    Status s(rc == ENOENT ? StatusCode::kNotFound : StatusCode::kFailedPrecondition,
             (chdir_failed ? "chdir " + spec.workdir : "execve " + exe) + ": " + Errno(rc));
    return redacted(s);
  }
  if (dir_fd >= 0) close(dir_fd);
  auto process = std::unique_ptr<TaskProcess>(new TaskProcess(pid));
  process->leader_pid_file_ = spec.leader_pid_file;
  return process;
}

TaskProcess::~TaskProcess() = default;

bool TaskProcess::Poll() {
  if (exited_) return true;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return false;
  if (r < 0 && errno == EINTR) return false;
  const pid_t leader = SignalGroup();
  exited_ = true;
  if (r == pid_ && WIFEXITED(status)) {
    exit_code_ = WEXITSTATUS(status);
    if (!leader_pid_file_.empty()) std::tie(exit_code_, signal_) = ContainerExitStatus(exit_code_);
  } else if (r == pid_ && WIFSIGNALED(status)) {
    signal_ = WTERMSIG(status);
  }
  // The leader is gone; its group may not outlive it. The group id cannot have been
  // reused while any member is alive, so this reaches only our stragglers.
  kill(-pid_, SIGKILL);
  if (leader != pid_) kill(-leader, SIGKILL);
  return true;
}

pid_t TaskProcess::SignalGroup() {
  if (leader_pid_file_.empty()) return pid_;
  if (leader_ == 0) {
    std::ifstream in(leader_pid_file_);
    long pid = 0;
    if (in >> pid && pid > 1) leader_ = static_cast<pid_t>(pid);
  }
  return leader_ != 0 ? leader_ : pid_;
}

void TaskProcess::Signal(int sig) {
  if (exited_) return;
  kill(-SignalGroup(), sig);
}

void TaskProcess::Stop(Duration grace, Timestamp now) {
  if (Poll() || phase_ == Phase::kKilled) return;
  if (grace <= Duration::zero()) {
    Signal(SIGKILL);
    phase_ = Phase::kKilled;
    return;
  }
  if (phase_ == Phase::kTerm) {
    kill_at_ = std::min(kill_at_, now + grace);
    return;
  }
  Signal(SIGTERM);
  phase_ = Phase::kTerm;
  kill_at_ = now + grace;
}

Status TaskProcess::Preempt(int sig, Duration grace, Timestamp now,
                            const std::string& notice_file) {
  if (Poll() || phase_ != Phase::kRunning) return Status::Ok();
  Status written = Status::Ok();
  if (!notice_file.empty()) {
    Timestamp deadline = now + grace;
    nlohmann::json notice = {{"deadline_ms", deadline.time_since_epoch().count()},
                             {"signal", sig},
                             {"grace_ms", grace.count()}};
    if (Status s = WriteFileAtomically(notice_file, notice.dump() + "\n"); !s.ok()) {
      written = Internal("preempt notice file " + s.message());
    }
  }
  Signal(sig);
  phase_ = Phase::kNotice;
  term_at_ = now + grace;
  return written;
}

void TaskProcess::Tick(Timestamp now) {
  if (Poll()) return;
  if (phase_ == Phase::kNotice && now >= term_at_) {
    Signal(SIGTERM);
    phase_ = Phase::kTerm;
    kill_at_ = now + kPreemptKillDelay;
  }
  if (phase_ == Phase::kTerm && now >= kill_at_) {
    Signal(SIGKILL);
    phase_ = Phase::kKilled;
  }
}

}  // namespace trainyard::agent
