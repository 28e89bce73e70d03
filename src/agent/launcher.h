// Task launcher: runs one task (one rank) as its own session and process group, and
// stops it with the escalation the preemption protocol prescribes.
//
// A task is started with fork + setsid + execve of an argv vector and an explicit
// environment (never through a shell: each argv element reaches the program as is,
// metacharacters and all), in its workdir, with stdout and stderr appended to one log
// file. When the agent confines tasks to allowed directories, the workdir and the
// paths named in `path_env` are checked after resolving symlinks before anything runs. Signals go
// to the whole process group, so a rank's own children (data loader workers, a wrapper script's
// child) are stopped with it. When the leader exits, whatever is left of its group is killed: a
// task's processes never outlive it.
//
// Escalation is a state machine driven by Tick(now) with the time handed in: Stop and
// Preempt send the first signal at once and record deadlines; Tick sends the later
// signals when their deadlines pass. Tests drive it with a fake time.
//
// Thread-safety: a TaskProcess is not thread-safe; its owner serialises calls. Start
// may be called from any thread (the child only makes async-signal-safe calls).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace trainyard::agent {

struct LaunchSpec {
  // argv[0] is a path, or a bare name looked up in the PATH of `env` (then of the agent).
  std::vector<std::string> argv;
  // The task's whole environment: nothing else is inherited.
  std::map<std::string, std::string> env;
  std::string workdir;   // empty: the agent's working directory
  std::string log_path;  // stdout+stderr appended here; parent directories are created
  // When >= 0, stdout+stderr go to this descriptor instead (a pipe the caller reads) and
  // log_path is not used; the caller keeps and closes it.
  int output_fd = -1;
  // Directories (absolute) the task's paths must lie in once symlinks are resolved (the
  // agent's --allowed-dirs); empty: anywhere. Checked: the workdir, as the directory
  // actually entered (opened, checked, then entered with fchdir, so a symlink swapped
  // in meanwhile cannot redirect it), and the value of every variable of `env` named
  // in `path_env` (relative values against the workdir). The agent's own working
  // directory, used when workdir is empty, is not checked.
  std::vector<std::string> allowed_dirs;
  std::vector<std::string> path_env;
  // Names of variables of `env` whose values never appear in an error message.
  std::vector<std::string> secret_env;
  // The cgroup.procs files the task joins before it runs (cgroup.h), and the identity
  // it runs as (-1: the agent's own). Either one starts the task through the exec
  // helper, trainyard-exec at `exec_helper` (exec_helper_main.cc), which does both and
  // then execs the program: its children are born in the groups, as that user. The log
  // file is then that user's, mode 0600.
  std::vector<std::string> cgroup_procs;
  int64_t uid = -1;
  int64_t gid = -1;
  std::string exec_helper;
  // A container (container.h): the program is its runtime, which writes the pid of the
  // container's first process, a session leader, to this file. Signals then go to that
  // process's group (the rank and its children, as for a host process) rather than to
  // the runtime, and an exit status 128+N is read back as death by signal N.
  std::string leader_pid_file;
};

// SIGKILL follows the SIGTERM of a preemption this long after it.
inline constexpr Duration kPreemptKillDelay = std::chrono::seconds(10);

class TaskProcess {
 public:
  // Starts the task. Returns an error when the log file cannot be opened, when a path
  // lies outside spec.allowed_dirs (FailedPrecondition; the message names the path,
  // where it leads and what is allowed), or when the child could not chdir or execve
  // (then the message says which and why, e.g. "execve /no/such: No such file or
  // directory"); the child has been reaped by then.
  static Result<std::unique_ptr<TaskProcess>> Start(const LaunchSpec& spec);

  ~TaskProcess();  // does not kill the task: callers decide (see Stop).
  TaskProcess(const TaskProcess&) = delete;
  TaskProcess& operator=(const TaskProcess&) = delete;

  pid_t pid() const { return pid_; }  // also the process group and session id

  // Reaps the leader if it has exited (non-blocking). Returns true once it has exited.
  bool Poll();
  bool exited() const { return exited_; }
  // Valid once exited(): exit_code >= 0 for a normal exit (then signal == 0), or
  // exit_code == -1 and the signal that killed it.
  int exit_code() const { return exit_code_; }
  int term_signal() const { return signal_; }

  // Sends `sig` to the whole group. No-op once exited.
  void Signal(int sig);

  // SIGTERM to the group now, SIGKILL at now + grace (unless it exits first). A second
  // Stop never postpones an earlier SIGKILL deadline.
  void Stop(Duration grace, Timestamp now);

  // Writes the preemption notice file (JSON: {"deadline_ms", "signal", "grace_ms"}) when
  // `notice_file` is not empty, sends `sig` to the group, then SIGTERM at now + grace and
  // SIGKILL kPreemptKillDelay later. Ignored when a Stop or Preempt is already under way.
  Status Preempt(int sig, Duration grace, Timestamp now, const std::string& notice_file);

  // Reaps, then sends any signal whose deadline has passed.
  void Tick(Timestamp now);

  // True while a Stop or Preempt is under way or done.
  bool stopping() const { return phase_ != Phase::kRunning; }

 private:
  enum class Phase { kRunning, kNotice, kTerm, kKilled };
  explicit TaskProcess(pid_t pid) : pid_(pid) {}
  // The group signals go to: the container's first process's once it is known, else
  // the task's own.
  pid_t SignalGroup();

  pid_t pid_;
  std::string leader_pid_file_;
  pid_t leader_ = 0;
  bool exited_ = false;
  int exit_code_ = -1;
  int signal_ = 0;
  Phase phase_ = Phase::kRunning;
  Timestamp term_at_{};  // kNotice: when SIGTERM goes out
  Timestamp kill_at_{};  // kTerm: when SIGKILL goes out
};

// Resolves a bare program name against a PATH value ("a:b:c"); a name with a '/' is
// returned as is. Returns empty when nothing executable is found.
std::string ResolveProgram(const std::string& program, const std::string& path_value);

// Where `path` leads once every symlink is followed: relative paths are taken against
// `base` (absolute), then the longest prefix that exists goes through realpath(3) and
// the components that do not exist yet are appended. Refuses (InvalidArgument /
// FailedPrecondition, naming the path) a ".." component and a dangling symlink, whose
// target would only be known once something is created through it.
Result<std::string> ResolvePath(const std::string& path, const std::string& base);

// OK when `resolved` (absolute, no symlinks) is in one of `allowed_dirs` (themselves
// resolved when they exist); else FailedPrecondition: "<what> <path> resolves to
// <resolved>, outside the directories this agent allows (<dirs>)".
Status CheckAllowedPath(const std::string& what, const std::string& path,
                        const std::string& resolved, const std::vector<std::string>& allowed_dirs);

// Writes `content` to `path` through `path`.tmp and a rename, so that a task reading it
// never sees half of it; creates the parent directories. Errors name the file.
Status WriteFileAtomically(const std::string& path, const std::string& content);

}  // namespace trainyard::agent
