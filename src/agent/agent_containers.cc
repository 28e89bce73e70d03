// The agent's side of containers (container.h): finding the runtime, preparing a rank's
// bundle and files, and what is left to do once its container has exited.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "agent/agent.h"

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;

// The variables a host process gets from the agent's own environment (agent.cc); inside
// a container the image's count instead, unless the job set them.
const std::vector<std::string> kHostOnlyEnv = {"PATH",   "HOME", "USER",   "LOGNAME",        "LANG",
                                               "LC_ALL", "TZ",   "TMPDIR", "LD_LIBRARY_PATH"};

// Trainyard's per-rank files: where the agent keeps them (the rank's container dir,
// `run/`), and the variable that tells the rank where it sees them.
struct RankFile {
  const char* env;
  const char* name;
};
constexpr RankFile kRankFiles[] = {
    {"TRAINYARD_METRICS_FILE", "metrics.jsonl"},
    {"TRAINYARD_PREEMPT_FILE", "preempt.json"},
    {"TRAINYARD_PROFILE_FILE", "profile-request.json"},
    {"TRAINYARD_PROFILE_DIR", "profiles"},
    {"TRAINYARD_FAULT_FILE", "faults.json"},
    {"TRAINYARD_CHECKPOINT_REQUEST_FILE", "checkpoint-request"},
};

// The character device at `path`, if there is one.
std::optional<ContainerDevice> Device(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return std::nullopt;
  return ContainerDevice{path, major(st.st_rdev), minor(st.st_rdev), 0666};
}

}  // namespace

void Agent::FindContainers() {
  runtime_root_ = (fs::absolute(options_.data_dir) / "runc").string();
  images_ = std::make_unique<ImageStore>(options_.image_store.empty() ? ImageStore::DefaultRoot()
                                                                      : options_.image_store);
  if (options_.oci_runtime == "none") {
    containers_problem_ = "turned off (--oci-runtime none)";
  } else if (auto r = FindContainerRuntime(options_.oci_runtime); r.ok()) {
    runtime_ = *r;
  } else {
    containers_problem_ = r.status().message();
  }
  Log(runtime_ ? "containers: " + DescribeContainers()
               : "containers: none, a job with an image fails here (" + containers_problem_ + ")");
  if (runtime_) RemoveStaleContainers();
}

std::string Agent::DescribeContainers() const {
  if (!runtime_) return "none: " + containers_problem_;
  return runtime_->version + "; images in " + images_->root();
}

void Agent::RemoveStaleContainers() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(runtime_root_, ec)) {
    const std::string id = entry.path().filename().string();
    Log("containers: deleting " + id + ", left by an earlier agent");
    DeleteContainer(id);
  }
  fs::remove_all(fs::path(options_.data_dir) / "containers", ec);
}

void Agent::DeleteContainer(const std::string& id) const {
  if (!runtime_) return;
  const std::vector<std::string> argv = {runtime_->path, "--root",  runtime_root_,
                                         "delete",       "--force", id};
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // Its complaints (a container already gone) are of no use to anyone.
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, 1);
      dup2(null, 2);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  if (pid < 0) {
    Log("containers: cannot delete " + id + ": fork: " + std::strerror(errno));
    return;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

Status Agent::PlaceContainerFiles(Task& t) {
  std::error_code ec;
  t.container_dir = (fs::absolute(options_.data_dir) / "containers" / t.spec.task_id).string();
  // A directory of the same task left by an earlier agent must not speak for this one.
  fs::remove_all(t.container_dir, ec);
  const fs::path run = fs::path(t.container_dir) / "run";
  fs::create_directories(run, ec);
  if (ec)
    return FailedPrecondition("containers: cannot create " + run.string() + ": " + ec.message());
  t.metrics_path = (run / "metrics.jsonl").string();
  t.preempt_path = (run / "preempt.json").string();
  t.profile_file = (run / "profile-request.json").string();
  t.profile_dir = (run / "profiles").string();
  t.fault_file = (run / "faults.json").string();
  t.checkpoint_request_file = (run / "checkpoint-request").string();
  return Status::Ok();
}

Status Agent::PrepareContainer(const TaskStart& spec, Task& t, LaunchSpec& launch) {
  const std::string& node = options_.node_name;
  if (!runtime_) {
    return FailedPrecondition("image " + spec.image + ": node " + node +
                              " runs no containers: " + containers_problem_);
  }
  auto image = images_->Resolve(spec.image);
  if (!image.ok()) {
    return Status(image.status().code(), "on node " + node + ": " + image.status().message());
  }
  t.status.image_digest = image->digest;

  ContainerPlan plan;
  plan.rootfs = image->rootfs;
  plan.args = launch.argv;
  plan.env = ContainerEnv(image->env, launch.env, spec.env, kHostOnlyEnv);
  for (const RankFile& f : kRankFiles) {
    plan.env[f.env] = std::string(kContainerRunDir) + "/" + f.name;
  }
  // The placement's GPUs are the container's only ones, numbered from 0 as the driver
  // shows them inside; NVIDIA_VISIBLE_DEVICES keeps the node's own indices.
  std::string visible, host;
  for (size_t i = 0; i < spec.gpus.size(); ++i) {
    visible += (i ? "," : "") + std::to_string(i);
    host += (i ? "," : "") + std::to_string(spec.gpus[i]);
  }
  if (!spec.env.count("CUDA_VISIBLE_DEVICES")) plan.env["CUDA_VISIBLE_DEVICES"] = visible;
  plan.env["NVIDIA_VISIBLE_DEVICES"] = spec.gpus.empty() ? "void" : host;
  plan.uid = launch.uid >= 0 ? launch.uid : geteuid();
  plan.gid = launch.gid >= 0 ? launch.gid : getegid();
  plan.shm_bytes = spec.shm_bytes;

  // The binds, each checked where the agent confines tasks (--allowed-dirs).
  const fs::path run = fs::path(t.container_dir) / "run";
  plan.binds.push_back({run.string(), kContainerRunDir, false});
  if (plan.uid != static_cast<int64_t>(geteuid())) {
    if (chown(run.c_str(), static_cast<uid_t>(plan.uid), static_cast<gid_t>(plan.gid)) != 0 ||
        chmod(run.c_str(), 0700) != 0) {
      return FailedPrecondition("containers: cannot give " + run.string() + " to " +
                                std::to_string(plan.uid) + ": " + std::strerror(errno));
    }
  }
  auto host_dir = [&](const std::string& what, const std::string& path) -> Result<std::string> {
    TY_ASSIGN_OR_RETURN(std::string resolved, ResolvePath(path, fs::current_path().string()));
    if (!options_.allowed_dirs.empty()) {
      TY_RETURN_IF_ERROR(CheckAllowedPath(what, path, resolved, options_.allowed_dirs));
    }
    return resolved;
  };
  if (!spec.workdir.empty()) {
    TY_ASSIGN_OR_RETURN(std::string dir, host_dir("working_dir", spec.workdir));
    if (!fs::is_directory(dir)) {
      return FailedPrecondition("working_dir " + spec.workdir + ": no such directory on node " +
                                node);
    }
    plan.binds.push_back({dir, spec.workdir, false});
    plan.cwd = spec.workdir;
  } else if (!image->workdir.empty()) {
    plan.cwd = image->workdir;
  }
  if (!t.checkpoint_dir.empty()) {
    TY_ASSIGN_OR_RETURN(std::string dir, host_dir("TRAINYARD_CHECKPOINT_DIR", t.checkpoint_dir));
    std::error_code ec;
    fs::create_directories(dir, ec);
    plan.binds.push_back({dir, t.checkpoint_dir, false});
  }
  for (size_t i = 0; i < spec.mounts.size(); ++i) {
    const protocol::TaskMount& m = spec.mounts[i];
    const std::string what = "mounts[" + std::to_string(i) + "].source";
    std::string source;
    if (!m.source.empty() && m.source.front() == '/') {
      TY_ASSIGN_OR_RETURN(source, host_dir(what, m.source));
      if (!fs::exists(source)) {
        return FailedPrecondition(what + " " + m.source + ": no such file or directory on node " +
                                  node);
      }
    } else {
      // A volume: the node's own directory of that name, made on first use.
      source = (fs::absolute(options_.data_dir) / "volumes" / m.source).string();
      std::error_code ec;
      if (fs::create_directories(source, ec) && plan.uid != static_cast<int64_t>(geteuid())) {
        if (chown(source.c_str(), static_cast<uid_t>(plan.uid), static_cast<gid_t>(plan.gid)) !=
            0) {
          return FailedPrecondition("volume " + m.source + ": cannot give " + source + " to " +
                                    std::to_string(plan.uid) + ": " + std::strerror(errno));
        }
      }
    }
    plan.binds.push_back({source, m.target, m.read_only});
  }
  // Datasets, read-only, where the spec put them.
  for (size_t i = 0; i < spec.data.size() && i < t.data_paths.size(); ++i) {
    plan.binds.push_back({t.data_paths[i], spec.data[i].target, true});
    plan.env[DataEnvName(spec.data[i].dataset)] = spec.data[i].target;
  }
  // The host's network: its name resolution too.
  for (const char* file : {"/etc/hosts", "/etc/resolv.conf"}) {
    if (fs::exists(file)) plan.binds.push_back({file, file, true});
  }
  if (!spec.gpus.empty()) {
    for (int g : spec.gpus) {
      // The device node is /dev/nvidia<minor>; the index is only a guess at it.
      const int minor =
          g < static_cast<int>(devices_.size()) && devices_[g].minor >= 0 ? devices_[g].minor : g;
      if (auto d = Device("/dev/nvidia" + std::to_string(minor))) plan.devices.push_back(*d);
    }
    for (const char* path :
         {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}) {
      if (auto d = Device(path)) plan.devices.push_back(*d);
    }
  }

  // Its cgroup: a child of its replica's group, whose limits bound it.
  t.container_id = "ty-" + spec.task_id;
  if (!t.group.empty()) {
    plan.cgroups_path = cgroups_.RuntimePath(GroupDirName(t.group), t.container_id);
    if (!plan.cgroups_path.empty()) groups_.at(t.group).containers = true;
    plan.milli_cpus = spec.milli_cpus;
    plan.pids = options_.task_pids_max;
  }
  if (plan.cgroups_path.empty()) {
    // The runtime's own default group, without limits.
    if (!t.group.empty()) {
      Log("containers: task " + spec.task_id +
          " runs without its replica's limits: no cgroup path for the runtime");
    }
    plan.cgroups_path =
        "/trainyard-containers/" + t.container_id + "." + node + "." + std::to_string(getpid());
  }

  const fs::path bundle = fs::path(t.container_dir) / "bundle";
  std::error_code ec;
  fs::create_directories(bundle, ec);
  TY_RETURN_IF_ERROR(WriteFileAtomically((bundle / "config.json").string(), BundleConfig(plan)));
  const std::string pid_file = (fs::path(t.container_dir) / "leader.pid").string();
  launch.argv = {runtime_->path, "--root",        runtime_root_, "run",    "--keep",
                 "--bundle",     bundle.string(), "--pid-file",  pid_file, t.container_id};
  launch.env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
  launch.workdir.clear();
  launch.path_env.clear();
  // The runtime puts the container in its group and runs it as the tenant.
  launch.cgroup_procs.clear();
  launch.uid = -1;
  launch.gid = -1;
  launch.leader_pid_file = pid_file;
  return Status::Ok();
}

bool Agent::ContainerOomKilled(const Task& t) const {
  if (t.container_id.empty() || t.group.empty()) return false;
  auto g = groups_.find(t.group);
  if (g == groups_.end()) return false;
  // cgroup v1 counts a kill in the container's own group only; v2 in its parent too.
  std::vector<std::string> dirs;
  for (const std::string& d : g->second.group.dirs()) dirs.push_back(d + "/" + t.container_id);
  return TaskGroup(cgroups_.version(), dirs, g->second.group.limits()).OomKills() > 0;
}

}  // namespace trainyard::agent
