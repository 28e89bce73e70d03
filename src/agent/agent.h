// The node agent: registers the node with the server, runs the tasks the server asks
// for, and reports on them (docs/agent-protocol.md, docs/agent.md).
//
// Run() is the agent's main loop on the calling thread; it starts one more thread that
// keeps a long poll for commands outstanding. The main loop registers, applies
// commands, reaps and escalates task processes, heartbeats every interval and at once
// when a task starts or exits, and ships new log bytes and metrics lines at most every
// ship_interval, with the profiles its tasks' SDKs record (a few 1 MiB chunks of a
// trace per task each time). A server that cannot be reached is retried with
// exponential backoff capped at max_backoff while the tasks keep running; what happened
// meanwhile is reported when it answers again. A 404 from the server means it lost this
// node: the agent registers again with every task it still knows, then kills those the
// server lists in `stop`.
//
// Faults the server injects (a `faults` command: the complete set active on the node)
// go to the GPU backend, whose telemetry shows them where it can fake it, and to each
// task they touch through its TRAINYARD_FAULT_FILE (docs/faults.md); the agent drops a
// fault whose until_ms has passed by itself. A `checkpoint` command writes a new request
// id into the task's TRAINYARD_CHECKPOINT_REQUEST_FILE. With a health-check program
// (health_check.h) the agent runs it before it first registers, every
// health_check_interval and after a task fails, and heartbeats at once when the result
// changes.
//
// Shutdown() (from any thread) ends Run(): running tasks get SIGTERM and, after
// stop_grace, SIGKILL (as a node drain would), a last heartbeat reports their exits,
// and Run() returns.
//
// Thread-safety: Shutdown, Tasks and registrations are safe from any thread. All
// mutable state is under one mutex; HTTP requests are made without holding it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/cgroup.h"
#include "agent/container.h"
#include "agent/data_cache.h"
#include "agent/faults.h"
#include "agent/gpu.h"
#include "agent/health_check.h"
#include "agent/image_store.h"
#include "agent/launcher.h"
#include "core/status.h"
#include "core/units.h"
#include "protocol/messages.h"

namespace httplib {
class Client;
}

namespace trainyard::agent {

// The messages the agent exchanges with the server (docs/agent-protocol.md).
using protocol::Command;
using protocol::TaskStart;
using protocol::TaskState;
using protocol::TaskStatus;

// Milliseconds since the epoch, as the protocol carries times.
inline int64_t ToMs(Timestamp t) { return t.time_since_epoch().count(); }

struct AgentOptions {
  // "http://host:port" or "https://host:port"; several, comma-separated, for a control
  // plane with standbys (docs/ha.md): the agent talks to one at a time and moves to the
  // next when it does not answer, or to the leader a standby names.
  std::string server_url;
  // For https: the PEM certificates the server's certificate must chain to (a CA's, or
  // the server's own); empty: the system's store. Never unverified (docs/tls.md).
  std::string ca_cert;
  std::string join_token;
  std::string node_name;
  // logs/, metrics/, preempt/, profile-requests/, profiles/, faults/ and
  // checkpoint-requests/ live here.
  std::string data_dir;
  // Directories (absolute) a task's working_dir, TRAINYARD_CHECKPOINT_DIR and
  // TRAINYARD_RESUME_FROM must lie in once symlinks are resolved (--allowed-dirs);
  // empty: anywhere. A task outside
  // fails to start with a message that says why (agent/launcher.h).
  std::vector<std::string> allowed_dirs;
  std::string address = "127.0.0.1";
  int64_t cpus = 1;
  int64_t memory_mib = 1024;
  std::string leaf = "leaf-0";
  std::string nvlink_domain;  // empty: the node name
  std::map<std::string, std::string> labels;
  // Until the server's register response names one.
  Duration heartbeat_interval = std::chrono::seconds(1);
  Duration poll_wait = std::chrono::seconds(20);
  Duration ship_interval = std::chrono::milliseconds(200);
  Duration max_backoff = std::chrono::seconds(5);
  Duration stop_grace = std::chrono::seconds(10);  // for the tasks, on Shutdown
  // Said in every heartbeat's health message, e.g. why there are no GPUs.
  std::string health_note;
  // The node health check (health_check.h): an executable, absolute; empty: none.
  std::string health_check;
  Duration health_check_interval = std::chrono::minutes(5);
  Duration health_check_timeout = std::chrono::seconds(60);
  // How tasks are limited (cgroup.h): nullopt detects what the host gives at Run; a
  // test or `--no-cgroups` hands in its own. Where there are none, the agent says why
  // once at start and in its registration, and runs tasks without limits.
  std::optional<Cgroups> cgroups;
  // pids.max of each replica's group; 0: unlimited.
  int64_t task_pids_max = 32'768;
  // Who ranks of a tenant without run_as run as (docs/execution.md): -1 (both) the
  // agent's own identity. The CLI makes it nobody (65534:65534) for a root agent, so
  // that no rank is root unless its tenant is allowed root (--unmapped-run-as).
  int64_t unmapped_uid = -1;
  int64_t unmapped_gid = -1;
  // trainyard-exec (exec_helper_main.cc), which a task with a cgroup or an identity
  // starts through; empty: beside the running executable.
  std::string exec_helper;
  // Containers (container.h): the OCI runtime, a path or a name on PATH ("": runc;
  // "none": no containers), and the image store (image_store.h; "": its default root).
  // Where there is no runtime, the agent says why once at start and in its
  // registration, and a task with an image fails to start, saying so.
  std::string oci_runtime;
  std::string image_store;
  // The dataset cache (data_cache.h): where staged versions live ("": <data_dir>/datasets)
  // and the most it holds (0: 90% of that file system's free space at start).
  std::string data_cache_dir;
  int64_t data_cache_bytes = 0;
  // The wall clock; tests may replace it. Called from the agent's threads (the loop, the
  // health-check thread), so a replacement must be thread-safe.
  std::function<Timestamp()> now;
  // Where the agent says what it does (a line at a time, no newline); default: nowhere.
  std::function<void(const std::string&)> log;
};

class Agent {
 public:
  Agent(AgentOptions options, std::unique_ptr<GpuBackend> gpus);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs until Shutdown(). Returns an error only when the server refuses this agent
  // for good (400/401/403 on register: a bad token or an invalid node) or the GPUs
  // cannot be listed.
  Status Run();
  void Shutdown();

  // The tasks the agent knows (not yet acknowledged as finished), for tests and status.
  std::vector<TaskStatus> Tasks() const;
  // Invalid metrics lines skipped so far.
  int64_t invalid_metrics_lines() const;

 private:
  // A profile report on its way to the server: a status, or a stored trace in chunks.
  struct PendingProfile {
    std::string id;
    std::string status;   // "recording" | "stored" | "failed"
    std::string path;     // stored: the trace, checked to lie in the task's profile dir
    std::string message;  // failed
    int64_t offset = 0;   // stored: where the next chunk starts
  };
  struct Task {
    TaskStatus status;
    TaskStart spec;
    std::unique_ptr<TaskProcess> process;  // null when the start failed
    std::string log_path;
    std::string metrics_path;
    std::string preempt_path;
    std::string profile_file;             // TRAINYARD_PROFILE_FILE: the request the SDK watches
    std::string profile_dir;              // TRAINYARD_PROFILE_DIR: where it writes traces
    std::string fault_file;               // TRAINYARD_FAULT_FILE: the faults' effects on it
    std::string checkpoint_request_file;  // TRAINYARD_CHECKPOINT_REQUEST_FILE
    std::string checkpoint_dir;           // TRAINYARD_CHECKPOINT_DIR, absolute; empty: none
    std::vector<std::string> data_paths;  // where each of spec.data is read on the host
    std::vector<std::string> data_held;   // cached versions it holds (DataCache::Acquire)
    std::string group;                    // its replica's cgroup (groups_); empty: none
    int64_t oom_kills_before = 0;         // the group's OOM kills when it started
    // A container's (container.h): its id with the runtime, the directory of its bundle
    // and of the files it sees at /run/trainyard; empty for a host process.
    std::string container_id;
    std::string container_dir;
    FaultEffects fault_effects;  // as last written to fault_file (none: no effect)
    int64_t log_offset = 0;
    int64_t metrics_offset = 0;
    std::set<std::string> profile_ids;           // profiles asked of this task
    std::set<std::string> profile_records;       // "<id> <status>" records already taken
    std::deque<PendingProfile> profile_uploads;  // what is still to tell the server, in order
    bool acked = false;    // the server recorded its exit: ship what is left, then forget
    bool orphan = false;   // the server does not know it: kill it, report nothing
    bool drained = false;  // exited, every byte of its log and metrics and its profiles shipped
  };
  struct HttpReply {
    int status = 0;  // 0: no answer (connection failed, timed out)
    nlohmann::json body;
    std::string error;
  };

  // POSTs to the server every thread talks to now: with the main loop's client, or the
  // poll thread's (`poll`). A server that does not answer, or a standby (503 with
  // "standby"), makes the agent move on (FailOver).
  HttpReply Post(bool poll, const std::string& path, const nlohmann::ordered_json& body);
  std::unique_ptr<httplib::Client> MakeClient(const std::string& url, bool poll) const;
  // From servers_[from] (which gave `reply`) to the leader a standby named, if it is one
  // of servers_, else to the next one; once, however many threads saw the failure.
  void FailOver(size_t from, const HttpReply& reply);
  std::string CurrentServer() const { return servers_[server_.load()]; }
  Timestamp Now() const;
  void Log(const std::string& line) const;
  Duration Backoff(int failures) const;

  // Main-loop steps. Each takes mu_ itself where it touches state.
  Status Register();
  void Heartbeat();
  void ApplyCommands();
  void StartTask(const TaskStart& spec);
  // Drops expired faults; hands a changed fault set to the GPU backend; rewrites the
  // fault files whose effects changed.
  void UpdateFaults();
  bool TickTasks();  // returns true when a task changed state
  // Stops every task (SIGTERM, SIGKILL later) once the server has not been reached for
  // nearly the time after which it gives this node's work to other nodes
  // (release_after_): a requeued job never runs here and elsewhere at once. The tasks
  // are reported as fenced when the server answers again. REQUIRES: mu_ held.
  void FenceIfCutOffLocked();
  void FenceLoop();  // FenceIfCutOffLocked every loop tick, on a thread of its own
  // Starts periodic health checks when due; notices a new result (a changed one makes
  // the next heartbeat go at once). Main loop only.
  void TickHealthCheck();
  // Free and total space of the data dir and the running tasks' checkpoint dirs.
  std::vector<protocol::DiskTelemetry> Disks();
  void Ship(bool force);
  // Takes the profile records among `lines` of the task's metrics file. REQUIRES: mu_ held.
  void TakeProfileRecordsLocked(Task& t, const std::vector<nlohmann::json>& lines);
  // Sends the task's profile reports, at most `max_chunks` chunks of traces; returns the
  // reply that stopped it when the server could not be reached (no answer, or 5xx).
  std::optional<HttpReply> ShipProfiles(const std::string& task_id, int max_chunks);
  void PollLoop();
  void ForgetFinished();
  std::vector<TaskStatus> TaskList(bool unacked_only) const;  // REQUIRES: mu_ held

  const AgentOptions options_;
  const std::unique_ptr<GpuBackend> gpus_;
  std::vector<GpuDevice> devices_;
  std::vector<std::string> servers_;  // options_.server_url, split at commas
  std::atomic<size_t> server_{0};     // the index in servers_ every thread talks to now
  // When (steady clock, ms) a standby last answered 503; 0: never (Backoff).
  std::atomic<int64_t> standby_seen_ms_{0};
  // The server that last did not answer at all, and when (steady ms): a standby naming
  // it as the leader does not send the agent back there (FailOver).
  std::atomic<size_t> unanswered_{SIZE_MAX};
  std::atomic<int64_t> unanswered_ms_{0};
  std::unique_ptr<httplib::Client> client_;  // main loop only; for servers_[client_for_]
  size_t client_for_ = 0;
  // The poll thread's client, for servers_[poll_client_for_]; the mutex lets Shutdown
  // cut a long poll while the poll thread may be replacing the client.
  std::mutex poll_client_mu_;
  std::unique_ptr<httplib::Client> poll_client_;
  size_t poll_client_for_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Task> tasks_;  // GUARDED_BY(mu_)
  std::deque<Command> commands_;       // GUARDED_BY(mu_)
  std::vector<FaultSpec> faults_;      // GUARDED_BY(mu_): active on this node
  bool faults_changed_ = false;        // GUARDED_BY(mu_): not yet given to the backend
  int64_t checkpoint_requests_ = 0;    // GUARDED_BY(mu_)
  bool stopping_ = false;              // GUARDED_BY(mu_)
  bool registered_ = false;            // GUARDED_BY(mu_)
  bool poll_done_ = false;             // GUARDED_BY(mu_)
  int64_t invalid_metrics_ = 0;        // GUARDED_BY(mu_)
  Duration heartbeat_interval_;        // GUARDED_BY(mu_)
  // Main-loop only.
  int64_t seq_ = 0;
  int failures_ = 0;
  Timestamp next_attempt_{};
  Timestamp next_heartbeat_{};
  Timestamp next_ship_{};
  bool unreachable_logged_ = false;
  // From the server's registration reply: how long after the last heartbeat it received
  // it may give this node's work away; zero: never (an older server), no fencing.
  Duration release_after_{0};  // GUARDED_BY(mu_)
  Timestamp last_contact_{};   // GUARDED_BY(mu_): when the last answered heartbeat (or
                               // registration) was sent
  std::unique_ptr<HealthChecker> health_checker_;  // during Run, when configured
  Timestamp next_health_check_{};
  int64_t health_runs_seen_ = 0;
  std::optional<HealthCheckResult> last_health_;
  // Task limits (Run); each replica's group with how many of its ranks run, and groups
  // whose ranks are gone but that could not be removed yet.
  Cgroups cgroups_;
  std::string exec_helper_;
  struct GroupUse {
    TaskGroup group;
    int tasks = 0;
    bool containers = false;  // a runtime made cgroups under it (Cgroups::RuntimeDirs)
  };
  std::map<std::string, GroupUse> groups_;  // GUARDED_BY(mu_)
  std::vector<TaskGroup> dead_groups_;      // GUARDED_BY(mu_)
  // Starts the task's rank in its replica's group, as its tenant's identity; the
  // error when that cannot be. REQUIRES: mu_ held.
  Status PrepareIsolation(const TaskStart& spec, Task& t, LaunchSpec& launch);
  // Forgets the task's use of its group; the last rank out kills what is left in it
  // and removes it. REQUIRES: mu_ held.
  void ReleaseGroup(Task& t);
  void RemoveDeadGroupsLocked();
  std::string GroupDirName(const std::string& group) const;
  void RemoveStaleGroups();  // REQUIRES: mu_ held

  // Datasets (agent_data.cc): finds where each dataset the task reads is on this node
  // (t.data_paths) and tells a host process where (DataEnvName). REQUIRES: mu_ held.
  Status PrepareData(const TaskStart& spec, Task& t, LaunchSpec& launch);
  // Opens the dataset cache (Run); without one, stage: local data fails, saying why.
  void OpenDataCache();
  // Starts staging what a `stage` command asks for. REQUIRES: mu_ held.
  void StageData(const std::vector<protocol::TaskData>& data);
  // The manifest of `version`, from the server (any thread).
  Result<std::string> FetchManifest(const std::string& version);
  // Hands back the cached versions the task held. REQUIRES: mu_ held.
  void ReleaseData(Task& t);
  std::unique_ptr<DataCache> data_cache_;  // set in Run; null when it could not be opened
  std::string data_cache_problem_;

  // Containers (agent_containers.cc). Found at Run: the runtime, else why not.
  std::optional<ContainerRuntime> runtime_;
  std::string containers_problem_;
  std::unique_ptr<ImageStore> images_;
  std::string runtime_root_;  // the runtime's state directory (--root): <data_dir>/runc
  void FindContainers();
  // Deletes what a runtime left of containers of an earlier agent on this data dir.
  void RemoveStaleContainers();
  // "runc 1.1.5; images in <dir>" or "none: <why>", for the registration.
  std::string DescribeContainers() const;
  // Before PrepareIsolation: puts the rank's Trainyard files in a directory of its own,
  // which its container mounts at /run/trainyard. REQUIRES: mu_ held.
  Status PlaceContainerFiles(Task& t);
  // After PrepareIsolation: resolves the image, writes the bundle and makes `launch`
  // run the runtime on it. REQUIRES: mu_ held.
  Status PrepareContainer(const TaskStart& spec, Task& t, LaunchSpec& launch);
  // Once the task's runtime has exited: whether the kernel's OOM killer acted in its
  // container. REQUIRES: mu_ held.
  bool ContainerOomKilled(const Task& t) const;
  // Deletes the container with the runtime (no lock needed: runs the runtime).
  void DeleteContainer(const std::string& id) const;
};

}  // namespace trainyard::agent
