// The agent's side of limits and identities (execution.md): each replica's cgroup,
// the identity its ranks run as, and the groups' removal once their ranks are gone.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "agent/agent.h"

namespace trainyard::agent {

// Agents of other clusters on the same host (test clusters, side by side) number their
// jobs alike: the node and the agent's pid make the name this agent's alone.
std::string Agent::GroupDirName(const std::string& group) const {
  return group + "." + options_.node_name + "." + std::to_string(getpid());
}

void Agent::RemoveStaleGroups() {
  // "<group>.<this node>.<pid>" of an agent that is gone: its ranks went with it.
  const std::string mark = "." + options_.node_name + ".";
  for (const std::string& name : cgroups_.List()) {
    const size_t at = name.rfind(mark);
    if (at == std::string::npos) continue;
    const std::string pid = name.substr(at + mark.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos ||
        pid == std::to_string(getpid()) || std::filesystem::exists("/proc/" + pid)) {
      continue;
    }
    TaskGroup stale = cgroups_.Open(name);
    stale.KillAll();
    Log("limits: removing " + name + ", left by an agent that is gone");
    dead_groups_.push_back(std::move(stale));
  }
  RemoveDeadGroupsLocked();
}

Status Agent::PrepareIsolation(const TaskStart& spec, Task& t, LaunchSpec& launch) {
  // The tenant's identity, else this agent's identity for tenants without one.
  const bool mapped = spec.uid >= 0;
  const int64_t run_uid = mapped ? spec.uid : options_.unmapped_uid;
  const int64_t run_gid = mapped ? spec.gid : options_.unmapped_gid;
  if (run_uid >= 0 && static_cast<uid_t>(run_uid) != geteuid()) {
    launch.uid = run_uid;
    launch.gid = run_gid;
    // What the agent makes for the task and the task writes to is the task's: its
    // metrics file, profile dir and checkpoint dir (that one for it alone).
    const auto uid = static_cast<uid_t>(run_uid);
    const auto gid = static_cast<gid_t>(run_gid);
    auto own = [&](const std::string& path, bool dir, bool private_to_it) -> Status {
      std::error_code ec;
      if (dir) {
        std::filesystem::create_directories(path, ec);
      } else if (!std::filesystem::exists(path, ec)) {
        std::ofstream(path, std::ios::app);
      }
      if (chown(path.c_str(), uid, gid) != 0 ||
          (private_to_it && chmod(path.c_str(), dir ? 0700 : 0600) != 0)) {
        return FailedPrecondition("run as " + std::to_string(run_uid) + ":" +
                                  std::to_string(run_gid) + ": cannot give " + path +
                                  " to it: " + std::strerror(errno));
      }
      return Status::Ok();
    };
    TY_RETURN_IF_ERROR(own(t.metrics_path, false, true));
    TY_RETURN_IF_ERROR(own(t.profile_dir, true, true));
    if (!t.checkpoint_dir.empty()) TY_RETURN_IF_ERROR(own(t.checkpoint_dir, true, true));
  }
  if (!spec.group.empty() && cgroups_.available()) {
    auto it = groups_.find(spec.group);
    if (it == groups_.end()) {
      GroupLimits limits{spec.milli_cpus, spec.memory_bytes, options_.task_pids_max};
      auto group = cgroups_.Create(GroupDirName(spec.group), limits);
      if (!group.ok()) {
        return Status(group.status().code(), "limits: " + group.status().message());
      }
      it = groups_.emplace(spec.group, GroupUse{std::move(*group), 0}).first;
    }
    ++it->second.tasks;
    t.group = spec.group;
    t.oom_kills_before = it->second.group.OomKills();
    launch.cgroup_procs = it->second.group.ProcsFiles();
  }
  launch.exec_helper = exec_helper_;
  return Status::Ok();
}

void Agent::ReleaseGroup(Task& t) {
  // What else the task held on the node: its cached datasets.
  ReleaseData(t);
  if (t.group.empty()) return;
  auto it = groups_.find(t.group);
  t.group.clear();
  if (it == groups_.end() || --it->second.tasks > 0) return;
  // The last rank is out: what it left behind (a daemonised child) goes with it.
  it->second.group.KillAll();
  if (it->second.containers) {
    // With what the runtime made for its containers in the other hierarchies.
    std::vector<std::string> dirs = it->second.group.dirs();
    for (const std::string& d : cgroups_.RuntimeDirs(GroupDirName(it->first))) {
      if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
    }
    dead_groups_.emplace_back(cgroups_.version(), std::move(dirs), it->second.group.limits());
  } else {
    dead_groups_.push_back(std::move(it->second.group));
  }
  groups_.erase(it);
  RemoveDeadGroupsLocked();
}

void Agent::RemoveDeadGroupsLocked() {
  std::erase_if(dead_groups_, [this](const TaskGroup& g) {
    if (!g.Empty()) {
      g.KillAll();
      return false;
    }
    if (Status s = g.Remove(); !s.ok()) {
      Log("limits: " + s.message());
      return false;
    }
    return true;
  });
}

}  // namespace trainyard::agent
