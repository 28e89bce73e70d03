#include "agent/container.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "agent/launcher.h"

namespace trainyard::agent {
namespace {

using nlohmann::ordered_json;

ordered_json Mount(const std::string& target, const std::string& type, const std::string& source,
                   std::vector<std::string> options) {
  return {{"destination", target}, {"type", type}, {"source", source}, {"options", options}};
}

// The first line a program prints for `--version`, or "" (runs it: FindContainerRuntime only).
std::string VersionLine(const std::string& path) {
  std::string cmd = "'" + path + "' --version 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::array<char, 256> buf{};
  std::string line;
  if (fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) line = buf.data();
  pclose(p);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  // "runc version 1.1.5+ds1" -> "runc 1.1.5+ds1"
  if (auto at = line.find(" version "); at != std::string::npos) line.erase(at, 8);
  return line;
}

}  // namespace

Result<ContainerRuntime> FindContainerRuntime(const std::string& requested) {
  const std::string name = requested.empty() ? "runc" : requested;
  const char* path_env = std::getenv("PATH");
  std::string path = ResolveProgram(name, path_env != nullptr ? path_env : "/usr/sbin:/usr/bin");
  if (path.empty() || access(path.c_str(), X_OK) != 0) {
    return NotFound("no OCI runtime: " + name +
                    " is not an executable here (install runc, or name one with --oci-runtime)");
  }
  if (geteuid() != 0) {
    return FailedPrecondition("the agent is not root, and " + path +
                              " needs root to make a container's namespaces and mounts and to "
                              "run it as its tenant's user");
  }
  ContainerRuntime r;
  r.path = path;
  r.version = VersionLine(path);
  if (r.version.empty()) r.version = path;
  return r;
}

std::string BundleConfig(const ContainerPlan& plan) {
  ordered_json env = ordered_json::array();
  for (const auto& [k, v] : plan.env) env.push_back(k + "=" + v);

  const std::string shm =
      "size=" + std::to_string(plan.shm_bytes > 0 ? plan.shm_bytes : int64_t{64} << 20);
  ordered_json mounts = ordered_json::array({
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts",
            {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
      Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", shm}),
      Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
      // The host's network namespace is shared, so /sys is the host's, read-only.
      Mount("/sys", "bind", "/sys", {"rbind", "nosuid", "noexec", "nodev", "ro"}),
      Mount("/tmp", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=1777"}),
  });
  for (const ContainerBind& b : plan.binds) {
    std::vector<std::string> options = {"rbind", b.read_only ? "ro" : "rw", "nosuid", "nodev"};
    mounts.push_back(Mount(b.target, "bind", b.source, options));
  }

  ordered_json devices = ordered_json::array();
  // The default set every container gets (null, zero, full, random, urandom, tty) is
  // allowed by the runtime itself; these are the GPUs'.
  ordered_json allowed = ordered_json::array({{{"allow", false}, {"access", "rwm"}}});
  for (const ContainerDevice& d : plan.devices) {
    devices.push_back({{"path", d.path},
                       {"type", "c"},
                       {"major", d.major},
                       {"minor", d.minor},
                       {"fileMode", d.mode},
                       {"uid", 0},
                       {"gid", 0}});
    allowed.push_back({{"allow", true},
                       {"type", "c"},
                       {"major", d.major},
                       {"minor", d.minor},
                       {"access", "rwm"}});
  }

  ordered_json resources = {{"devices", allowed}};
  if (plan.milli_cpus > 0) {
    resources["cpu"] = {{"quota", plan.milli_cpus * 100}, {"period", 100000}};
  }
  if (plan.pids > 0) resources["pids"] = {{"limit", plan.pids}};
  ordered_json linux = {
      // New mount and IPC namespaces; the host's network, pid and UTS ones.
      {"namespaces", ordered_json::array({{{"type", "mount"}}, {{"type", "ipc"}}})},
      {"devices", devices},
      {"resources", resources},
      {"maskedPaths",
       {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
        "/proc/scsi"}},
      {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}},
  };
  if (!plan.cgroups_path.empty()) linux["cgroupsPath"] = plan.cgroups_path;

  // What an unprivileged process keeps: nothing beyond what any user has.
  const std::vector<std::string> caps = {};
  ordered_json process = {
      {"terminal", false},
      {"user", {{"uid", plan.uid}, {"gid", plan.gid}}},
      {"args", plan.args},
      {"env", env},
      {"cwd", plan.cwd},
      {"capabilities",
       {{"bounding", caps}, {"effective", caps}, {"permitted", caps}, {"ambient", caps}}},
      {"noNewPrivileges", true},
  };
  ordered_json config = {
      {"ociVersion", "1.0.2"},
      {"process", process},
      {"root", {{"path", plan.rootfs}, {"readonly", true}}},
      {"mounts", mounts},
      {"linux", linux},
  };
  return config.dump(1);
}

std::map<std::string, std::string> ContainerEnv(const std::vector<std::string>& image_env,
                                                const std::map<std::string, std::string>& task_env,
                                                const std::map<std::string, std::string>& job_env,
                                                const std::vector<std::string>& host_only) {
  std::map<std::string, std::string> env;
  for (const std::string& kv : image_env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : task_env) {
    const bool from_host =
        std::find(host_only.begin(), host_only.end(), k) != host_only.end() && !job_env.count(k);
    if (!from_host) env[k] = v;
  }
  if (!env.count("PATH"))
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  if (!env.count("HOME")) env["HOME"] = "/";
  return env;
}

std::pair<int, int> ContainerExitStatus(int runtime_exit_code) {
  if (runtime_exit_code > 128 && runtime_exit_code <= 128 + 64) {
    return {-1, runtime_exit_code - 128};
  }
  return {runtime_exit_code, 0};
}

}  // namespace trainyard::agent
