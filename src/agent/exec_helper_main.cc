// trainyard-exec: what a task's first process does before it becomes the task, when the
// agent gives it a cgroup or an identity (launcher.h). Small on purpose: it is exec'd
// once per rank, and uses nothing but libc.
//
//   trainyard-exec [--join FILE]... [--uid N --gid N] [--status-fd N] [--exec PATH]
//                  -- ARGV0 ARG...
//
// PATH (default: ARGV0) is the program exec'd, with ARGV0 ARG... as its argv.
// In this order: writes its own pid to each FILE (a cgroup.procs: its children are born
// in the group), drops supplementary groups and takes gid then uid (and
// no_new_privs, so that no setuid program gives them back), then execs PROGRAM with
// the environment it was given. A step that fails is written to the status descriptor
// ("<step>: <why>", which the agent returns as the start's error) and it exits 127; an
// exec that succeeds closes the descriptor (close-on-exec), which is how the agent
// knows.
#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// No C++ library here (no std::string): linked statically, as it is outside sanitized
// builds, the exec costs no dynamic loading, which was a third of the CPU a trivial
// job's start took on the agent's side.

extern char** environ;

namespace {

int status_fd = -1;

void WriteAll(int fd, const char* text) {
  const size_t n = std::strlen(text);
  ssize_t ignored = write(fd, text, n);
  (void)ignored;
}

// "WHAT: strerror(ERR)" to the status descriptor, else "trainyard-exec: ...\n" to
// stderr; exits 127. WHAT is "STEP" or "STEP DETAIL".
[[noreturn]] void Fail(const char* step, const char* detail, int err) {
  char msg[1024];
  std::snprintf(msg, sizeof msg, "%s%s%s%s: %s%s", status_fd >= 0 ? "" : "trainyard-exec: ", step,
                detail[0] != '\0' ? " " : "", detail, std::strerror(err),
                status_fd >= 0 ? "" : "\n");
  WriteAll(status_fd >= 0 ? status_fd : 2, msg);
  _exit(127);
}

bool ParseId(const char* text, long& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtol(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' && out >= 0 && out <= 0x7fffffff;
}

[[noreturn]] void Usage(const char* why, const char* value = "") {
  char msg[512];
  std::snprintf(msg, sizeof msg,
                "usage: trainyard-exec [--join FILE]... [--uid N --gid N] [--status-fd N] "
                "[--exec PATH] -- ARGV0 ARG... (%s%s%s)",
                why, value[0] != '\0' ? " " : "", value);
  Fail(msg, "", EINVAL);
}

}  // namespace

int main(int argc, char** argv) {
  long uid = -1;
  long gid = -1;
  int i = 1;
  // The status descriptor first, so that every later failure reaches the agent.
  for (int j = 1; j + 1 < argc && std::strcmp(argv[j], "--") != 0; ++j) {
    long fd = -1;
    if (std::strcmp(argv[j], "--status-fd") == 0 && ParseId(argv[j + 1], fd)) {
      status_fd = static_cast<int>(fd);
    }
  }
  if (status_fd >= 0 && fcntl(status_fd, F_SETFD, FD_CLOEXEC) != 0) {
    const int e = errno;
    status_fd = -1;
    Fail("status descriptor", "", e);
  }
  const char* program = nullptr;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    const char* flag = argv[i];
    if (i + 1 >= argc) Usage(flag, "needs a value");
    const char* value = argv[++i];
    if (std::strcmp(flag, "--join") == 0) {
      int fd = open(value, O_WRONLY | O_CLOEXEC);
      if (fd < 0) Fail("joining cgroup", value, errno);
      if (write(fd, "0", 1) != 1) Fail("joining cgroup", value, errno);
      close(fd);
    } else if (std::strcmp(flag, "--uid") == 0) {
      if (!ParseId(value, uid)) Usage("--uid", value);
    } else if (std::strcmp(flag, "--gid") == 0) {
      if (!ParseId(value, gid)) Usage("--gid", value);
    } else if (std::strcmp(flag, "--exec") == 0) {
      program = value;
    } else if (std::strcmp(flag, "--status-fd") != 0) {
      Usage("unknown flag", flag);
    }
  }
  if (i >= argc - 1) Usage("no program");
  if ((uid < 0) != (gid < 0)) Usage("--uid and --gid go together");
  if (uid >= 0) {
    char id[24];
    const gid_t g = static_cast<gid_t>(gid);
    std::snprintf(id, sizeof id, "%ld", gid);
    if (setgroups(1, &g) != 0) Fail("setgroups", id, errno);
    if (setgid(g) != 0) Fail("setgid", id, errno);
    std::snprintf(id, sizeof id, "%ld", uid);
    if (setuid(static_cast<uid_t>(uid)) != 0) Fail("setuid", id, errno);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail("no_new_privs", "", errno);
  }
  if (program == nullptr) program = argv[i + 1];
  execve(program, argv + i + 1, environ);
  Fail("execve", program, errno);
}
