#include "agent/health_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "agent/launcher.h"

namespace trainyard::agent {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

constexpr milliseconds kPollStep(20);

// "60s" for whole seconds (as an admin writes a timeout), else "1s500ms", "200ms".
std::string DescribeTimeout(Duration d) {
  const int64_t ms = d.count();
  if (ms > 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return FormatDuration(d);
}

std::string Trim(const std::string& s) {
  const char* space = " \t\r\n\f\v";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

// The output as reported: trimmed, and when the program wrote more than fits, the first
// part (cut between UTF-8 characters) and a line that says how much there was.
std::string ReportedOutput(const std::string& head, int64_t total) {
  if (total <= static_cast<int64_t>(kMaxHealthCheckOutput)) return Trim(head);
  const std::string note =
      "\n[output truncated: " + std::to_string(total) + " bytes in all, the first ones kept]";
  size_t cut = std::min(head.size(), kMaxHealthCheckOutput - note.size());
  while (cut > 0 && (static_cast<unsigned char>(head[cut]) & 0xC0) == 0x80) --cut;
  return Trim(head.substr(0, cut)) + note;
}

// Reads what is there without blocking; keeps the first kMaxHealthCheckOutput bytes.
// Returns false at end of file.
bool Drain(int fd, std::string& head, int64_t& total) {
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      total += n;
      if (head.size() < kMaxHealthCheckOutput) {
        head.append(buf,
                    std::min<size_t>(static_cast<size_t>(n), kMaxHealthCheckOutput - head.size()));
      }
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;  // else: unreadable, as if closed
  }
}

}  // namespace

Status CheckHealthCheckProgram(const std::string& flag, const std::string& path) {
  if (path.empty()) return InvalidArgument(flag + ": must name an executable, got \"\"");
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return InvalidArgument(flag + ": " + path + ": " +
                           (errno == ENOENT ? std::string("no such file") : std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(flag + ": " + path + ": not a regular file");
  if (access(path.c_str(), X_OK) != 0) {
    return InvalidArgument(flag + ": " + path + ": not executable (chmod +x it)");
  }
  return Status::Ok();
}

HealthCheckResult RunHealthCheck(const HealthCheckOptions& options, const std::string& trigger,
                                 const std::atomic<bool>* cancel) {
  auto now = [&] {
    return options.now ? options.now()
                       : std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
  };
  HealthCheckResult result;
  result.trigger = trigger;
  auto fail = [&](std::string output) {
    result.ok = false;
    result.output = std::move(output);
    result.at_ms = now().time_since_epoch().count();
    return result;
  };

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return fail("health check " + options.program + ": pipe: " + std::strerror(errno));
  }
  LaunchSpec spec;
  spec.argv = {options.program};
  if (const char* path = std::getenv("PATH")) spec.env["PATH"] = path;
  spec.env["TRAINYARD_NODE"] = options.node_name;
  spec.env["TRAINYARD_HEALTH_TRIGGER"] = trigger;
  spec.output_fd = fds[1];
  auto process = TaskProcess::Start(spec);
  close(fds[1]);
  if (!process.ok()) {
    close(fds[0]);
    return fail("health check " + options.program +
                " could not start: " + process.status().message());
  }
  TaskProcess& p = **process;
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);

  const auto deadline = Steady::now() + options.timeout;
  std::string head;
  int64_t total = 0;
  bool open = true;
  bool timed_out = false;
  bool cancelled = false;
  for (;;) {
    // Wait for output (or, once the pipe is closed, just a moment).
    pollfd pfd{fds[0], POLLIN, 0};
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
    const int wait_ms = static_cast<int>(std::clamp(left, milliseconds(0), kPollStep).count());
    if (poll(&pfd, open ? 1 : 0, wait_ms) > 0) open = Drain(fds[0], head, total);
    if (p.Poll()) {
      // The leader is gone and its group killed; take what is in the pipe, but do not
      // wait for a straggler in another session that still holds it.
      if (open) Drain(fds[0], head, total);
      break;
    }
    cancelled = cancel != nullptr && cancel->load();
    timed_out = Steady::now() >= deadline;
    if (cancelled || timed_out) {
      p.Signal(SIGKILL);
      while (!p.Poll()) std::this_thread::sleep_for(milliseconds(1));
      break;
    }
  }
  close(fds[0]);

  if (cancelled) return fail("health check cancelled: the agent is stopping");
  if (timed_out) return fail("health check timed out after " + DescribeTimeout(options.timeout));
  result.ok = p.exit_code() == 0 && p.term_signal() == 0;
  result.output = ReportedOutput(head, total);
  if (!result.ok && result.output.empty()) {
    result.output = p.term_signal() != 0
                        ? "health check killed by signal " + std::to_string(p.term_signal())
                        : "health check exited with status " + std::to_string(p.exit_code());
  }
  result.at_ms = now().time_since_epoch().count();
  return result;
}

HealthChecker::HealthChecker(HealthCheckOptions options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

HealthChecker::~HealthChecker() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cancel_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

void HealthChecker::Request(const std::string& trigger) {
  std::lock_guard lock(mu_);
  pending_ = trigger;
  cv_.notify_all();
}

std::optional<HealthCheckResult> HealthChecker::Latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

int64_t HealthChecker::runs() const {
  std::lock_guard lock(mu_);
  return runs_;
}

void HealthChecker::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || pending_.has_value(); });
    if (stopping_) return;
    const std::string trigger = *pending_;
    pending_.reset();
    lock.unlock();
    HealthCheckResult result = RunHealthCheck(options_, trigger, &cancel_);
    lock.lock();
    if (stopping_) return;  // a cancelled run says nothing about the node
    latest_ = std::move(result);
    ++runs_;
  }
}

}  // namespace trainyard::agent
