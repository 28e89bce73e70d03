// Resource limits for tasks through the kernel's control groups (docs/execution.md).
//
// At start the agent finds what the host gives it (Cgroups::Detect): a cgroup v2 subtree
// it may manage (a delegated systemd unit, a container's own namespace, or the root),
// else writable cgroup v1 hierarchies of the cpu, memory and pids controllers; else
// nothing, with the reason, and tasks run without limits. Each replica of a job on the
// node gets one group (its ranks join it) with
//   cpu     v2 cpu.max "<quota> 100000" / v1 cpu.cfs_quota_us + cpu.cfs_period_us
//   memory  v2 memory.max (+ memory.swap.max 0) / v1 memory.limit_in_bytes
//   pids    pids.max
// A limit of 0 leaves that resource unlimited. The group tells whether the kernel's OOM
// killer acted in it (v2 memory.events, v1 memory.oom_control: "oom_kill N"), kills
// everything in it, and is removed when its last rank has gone.
//
// Where the groups live: v2, under the agent's own cgroup: the agent moves itself into
// a leaf "<base>/agent" (a cgroup with children may hold no processes) and the groups
// are "<base>/<name>"; v1, "<mount><agent's path>/trainyard/<name>" in each hierarchy.
//
// The host is read from text (/proc/self/cgroup, /proc/self/mountinfo), so tests build
// a fake one in a directory.
//
// Thread-safety: Cgroups is immutable after Detect; TaskGroup is not thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace trainyard::agent {

struct GroupLimits {
  int64_t milli_cpus = 0;    // 0: unlimited
  int64_t memory_bytes = 0;  // 0: unlimited
  int64_t pids = 0;          // 0: unlimited
  bool operator==(const GroupLimits&) const = default;
};

// One group: the files a process writes its pid to in order to join it (one per v1
// hierarchy, one for v2), and what the agent asks of it.
class TaskGroup {
 public:
  TaskGroup() = default;
  TaskGroup(int version, std::vector<std::string> dirs, GroupLimits limits)
      : version_(version), dirs_(std::move(dirs)), limits_(limits) {}

  // "<dir>/cgroup.procs" of each directory.
  std::vector<std::string> ProcsFiles() const;
  const std::vector<std::string>& dirs() const { return dirs_; }
  const GroupLimits& limits() const { return limits_; }

  // How many processes the OOM killer has killed in the group (0 when unknown).
  int64_t OomKills() const;
  // SIGKILL to every process in the group (v2 cgroup.kill where the kernel has it).
  void KillAll() const;
  // True when no process is left in it.
  bool Empty() const;
  // Removes the group's directories (they must be empty of processes).
  Status Remove() const;

 private:
  int version_ = 0;
  std::vector<std::string> dirs_;
  GroupLimits limits_;
};

// What the host offers, as /proc describes it.
struct CgroupHost {
  std::string proc_self_cgroup;  // text of /proc/self/cgroup
  std::string mountinfo;         // text of /proc/self/mountinfo
  // Read from the real /proc.
  static CgroupHost FromProc();
};

class Cgroups {
 public:
  // Finds a usable hierarchy and prepares it (v2: the agent's leaf and the controllers
  // enabled for its children; v1: "trainyard" in each hierarchy). Never fails: when
  // nothing can be used, available() is false and problem() says why.
  static Cgroups Detect(const CgroupHost& host);
  // No limits: what a test or an agent started with --no-cgroups uses.
  static Cgroups Disabled(std::string why);

  bool available() const { return version_ != 0; }
  int version() const { return version_; }  // 2, 1, or 0 when not available
  // Why there are no limits ("" when available).
  const std::string& problem() const { return problem_; }
  // "cgroup v2 at /sys/fs/cgroup/system.slice/agent.service" or the problem.
  std::string Describe() const;
  // Where the groups are made (v2: one directory; v1: one per hierarchy).
  const std::vector<std::string>& bases() const { return bases_; }

  // Creates the group `name` (a plain name: letters, digits, '.', '-', '_') with
  // `limits`. An existing group of that name is reused.
  Result<TaskGroup> Create(const std::string& name, const GroupLimits& limits) const;
  // The groups that exist (in the first hierarchy), but the agent's own leaf.
  std::vector<std::string> List() const;
  // An existing group, to kill what is in it and remove it.
  TaskGroup Open(const std::string& name) const;

  // For an OCI runtime (container.h), which makes a container's cgroup itself: the path
  // of `child` under the group `name`, relative to the hierarchies' mount points (its
  // linux.cgroupsPath). A runtime uses one path in every hierarchy; where v1 hierarchies
  // place the groups at different paths, it is the memory hierarchy's, so that the
  // replica's memory limit and OOM count bind the container (the runtime then sets the
  // cpu and pids limits on the container's own group: ContainerPlan). A runtime makes
  // the path in every hierarchy it manages and removes only the leaf: RuntimeDirs is the
  // group's directory in each hierarchy mounted, to remove as well.
  std::string RuntimePath(const std::string& name, const std::string& child) const;
  std::vector<std::string> RuntimeDirs(const std::string& name) const;

 private:
  int version_ = 0;
  std::string problem_;
  std::vector<std::string> bases_;         // v2: one; v1: cpu, memory, pids (those present)
  std::string runtime_base_;               // the memory base less its mount point
  std::vector<std::string> mount_points_;  // of every cgroup and cgroup2 hierarchy
};

}  // namespace trainyard::agent
