// Containers: a rank of a job with an `image` runs in an OCI container (docs/execution.md).
//
// The agent runs the container with runc, the OCI runtime found at start (--oci-runtime,
// else runc on PATH), on a bundle it writes per rank: the image's unpacked root file
// system from the node's image store (image_store.h), read-only, and a config.json that
// BundleConfig builds. runc is the rank's process as far as the launcher is concerned
// (launcher.h): its output is the rank's log, its exit status the rank's; it writes the
// pid of the container's first process, a session leader, to a file, and the launcher
// signals that process's group, so a notice, a stop and a kill reach the rank and its
// children exactly as they reach a host process's group. `run --keep` leaves the
// container, and its cgroup, for the agent to read the OOM count from and then delete.
//
// What a container shares with the host, and what it does not (the same choice as HPC
// container runtimes make for multi-node training):
//   shared   the network (torchrun's rendezvous and NCCL use the host's interfaces), the
//            pid namespace (signals and exit codes as for host processes), the hostname
//   its own  mounts (the image as /, read-only; a tmpfs /tmp), IPC with a /dev/shm of
//            the job's shm_size, /dev with only the placement's GPU device nodes, and a
//            devices cgroup that allows no others
// Bind mounts: the per-rank directory of Trainyard's files at /run/trainyard (metrics,
// preemption notice, profile requests, faults, checkpoint requests), the job's
// working_dir and checkpoint dir at their own paths, the host's /etc/hosts and
// /etc/resolv.conf read-only, and the job's mounts.
//
// Thread-safety: pure functions, and FindContainerRuntime reads the host.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace trainyard::agent {

// Where Trainyard's per-rank files appear inside a container.
inline constexpr char kContainerRunDir[] = "/run/trainyard";

struct ContainerRuntime {
  std::string path;     // the runc binary
  std::string version;  // e.g. "runc 1.1.5"
};

// `requested`: a path or a name looked up on PATH; empty: "runc". Fails with the reason
// containers cannot run here: no runtime, or an agent that is not root (the runtime
// needs root to make a container's namespaces and mounts and to run it as its tenant).
Result<ContainerRuntime> FindContainerRuntime(const std::string& requested);

struct ContainerBind {
  std::string source;  // absolute host path
  std::string target;  // absolute path inside the container
  bool read_only = false;
  bool operator==(const ContainerBind&) const = default;
};

// A character device the container may use (a GPU's /dev/nvidiaN, /dev/nvidiactl, ...).
struct ContainerDevice {
  std::string path;
  int64_t major = 0;
  int64_t minor = 0;
  uint32_t mode = 0666;
  bool operator==(const ContainerDevice&) const = default;
};

struct ContainerPlan {
  std::string rootfs;             // absolute
  std::vector<std::string> args;  // argv; a bare argv[0] is looked up on the env's PATH
  std::map<std::string, std::string> env;
  std::string cwd = "/";  // absolute, inside the container
  int64_t uid = 0;
  int64_t gid = 0;
  std::vector<ContainerBind> binds;
  std::vector<ContainerDevice> devices;
  int64_t shm_bytes = 0;     // 0: 64Mi
  std::string cgroups_path;  // the rank's group, relative to the hierarchies' roots; "": none
  // Limits the runtime sets on the container's own group (0: none): the replica's cpu
  // and pids, which its group may not bind where the hierarchies disagree (cgroup.h).
  int64_t milli_cpus = 0;
  int64_t pids = 0;
};

// The bundle's config.json (OCI runtime spec 1.0) for `plan`.
std::string BundleConfig(const ContainerPlan& plan);

// The environment a containerised rank starts with: the image's (its config's Env,
// "K=V"), then the task's. `host_only` names the variables the agent passes a host
// process from its own environment (PATH, HOME, ...): inside a container the image's
// count, unless the job set them itself (`job_env`).
std::map<std::string, std::string> ContainerEnv(const std::vector<std::string>& image_env,
                                                const std::map<std::string, std::string>& task_env,
                                                const std::map<std::string, std::string>& job_env,
                                                const std::vector<std::string>& host_only);

// runc reports a container whose first process died of signal N as exit status 128+N:
// the status a host process would have had, as (exit_code, signal).
std::pair<int, int> ContainerExitStatus(int runtime_exit_code);

}  // namespace trainyard::agent
