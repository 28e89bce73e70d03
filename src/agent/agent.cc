#include "agent/agent.h"

#include <httplib.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "agent/profile.h"
#include "agent/tail.h"
#include "core/job.h"
#include "core/names.h"
#include "core/units.h"
#include "http/tls.h"

namespace trainyard::agent {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using std::chrono::milliseconds;

constexpr Duration kLoopTick = milliseconds(25);
constexpr Duration kFirstBackoff = milliseconds(100);
// After a standby's 503, retries come at least this often for kStandbyWindow.
constexpr Duration kStandbyRetry = milliseconds(1'000);
constexpr Duration kStandbyWindow = milliseconds(60'000);
// How long a server that did not answer is not gone back to on a standby's word (a
// leader alive after all is tried again after this).
constexpr Duration kUnansweredMemory = milliseconds(5'000);

int64_t SteadyMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Chunks (1 MiB each) of a task's profile traces sent per shipping round: a 64 MiB
// trace takes a few seconds, and logs and heartbeats are not held up behind it.
constexpr int kProfileChunksPerShip = 4;

// Variables a task inherits from the agent (then the task's own env overrides them):
// enough for a program to find its interpreter and libraries, nothing node-specific.
constexpr const char* kInheritedEnv[] = {"PATH",   "HOME", "USER",   "LOGNAME",        "LANG",
                                         "LC_ALL", "TZ",   "TMPDIR", "LD_LIBRARY_PATH"};

std::string Dump(const ordered_json& j) {
  // Replace, not throw, on invalid UTF-8: a task's bytes must not take the agent down.
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string RankPath(const std::string& data_dir, const char* kind, const TaskStart& t,
                     const char* ext) {
  return data_dir + "/" + kind + "/" + std::to_string(t.job_id) + "/" + std::to_string(t.attempt) +
         "/rank-" + std::to_string(t.rank) + ext;
}

bool IsPermanentRefusal(int status) { return status == 400 || status == 401 || status == 403; }

protocol::GpuTelemetry Telemetry(const GpuSample& s) {
  auto number = [](const auto& v) -> std::optional<double> {
    if (!v) return std::nullopt;
    return static_cast<double>(*v);
  };
  protocol::GpuTelemetry t;
  t.index = s.index;
  t.util_pct = s.util_pct;
  t.mem_used_mib = number(s.mem_used_mib);
  t.temp_c = s.temp_c;
  t.power_w = s.power_w;
  t.sm_clock_mhz = number(s.sm_clock_mhz);
  t.throttled = s.throttled;
  t.ecc_uncorrectable = number(s.ecc_uncorrectable);
  t.xid_last = number(s.xid_last);
  t.xid_count = number(s.xid_count);
  return t;
}

// The disks report at most this many file systems.
constexpr size_t kMaxDisks = 16;

std::string FaultList(const std::vector<FaultSpec>& faults) {
  std::string out;
  for (const FaultSpec& f : faults) {
    if (!out.empty()) out += ", ";
    out += f.id + " " + std::string(FaultKindName(f.kind));
    if (f.kind == FaultKind::kCommSlow) {
      out += " job " + std::to_string(f.job_id);
    } else if (!f.node_wide()) {
      out += " gpu " + std::to_string(f.gpu);
    }
  }
  return out;
}

}  // namespace

Agent::Agent(AgentOptions options, std::unique_ptr<GpuBackend> gpus)
    : options_(std::move(options)),
      gpus_(std::move(gpus)),
      heartbeat_interval_(options_.heartbeat_interval) {
  for (size_t pos = 0; pos <= options_.server_url.size();) {
    size_t comma = options_.server_url.find(',', pos);
    if (comma == std::string::npos) comma = options_.server_url.size();
    std::string url = options_.server_url.substr(pos, comma - pos);
    while (!url.empty() && url.back() == '/') url.pop_back();
    if (!url.empty()) servers_.push_back(std::move(url));
    pos = comma + 1;
  }
  if (servers_.empty()) servers_.push_back(options_.server_url);
  client_ = MakeClient(servers_[0], false);
  poll_client_ = MakeClient(servers_[0], true);
}

std::unique_ptr<httplib::Client> Agent::MakeClient(const std::string& url, bool poll) const {
  auto c = std::make_unique<httplib::Client>(url);
  c->set_connection_timeout(std::chrono::seconds(2));
  c->set_read_timeout(poll ? options_.poll_wait + std::chrono::seconds(10)
                           : std::chrono::seconds(10));
  c->set_write_timeout(std::chrono::seconds(10));
  c->set_tcp_nodelay(true);  // else a request's body waits for a delayed ACK
  http::VerifyServer(*c, options_.ca_cert);
  return c;
}

Agent::~Agent() = default;

Timestamp Agent::Now() const {
  if (options_.now) return options_.now();
  return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
}

void Agent::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Duration Agent::Backoff(int failures) const {
  Duration d = kFirstBackoff;
  for (int i = 1; i < failures && d < options_.max_backoff; ++i) d *= 2;
  d = std::min(d, options_.max_backoff);
  // A standby answered lately: the control plane is there, electing a leader. Try
  // again as often as it asks (Retry-After: 1 s), so that the new leader hears from
  // this node within a second of taking over rather than after a long backoff.
  const int64_t seen = standby_seen_ms_.load();
  if (seen != 0 && SteadyMs() - seen < kStandbyWindow.count()) d = std::min(d, kStandbyRetry);
  return d;
}

Agent::HttpReply Agent::Post(bool poll, const std::string& path, const ordered_json& body) {
  const size_t at = server_.load();
  httplib::Client* client = nullptr;
  if (poll) {
    std::lock_guard lock(poll_client_mu_);
    if (poll_client_for_ != at) {
      poll_client_ = MakeClient(servers_[at], true);
      poll_client_for_ = at;
    }
    client = poll_client_.get();  // replaced only by this thread
  } else {
    if (client_for_ != at) {
      client_ = MakeClient(servers_[at], false);
      client_for_ = at;
    }
    client = client_.get();
  }
  httplib::Headers headers = {{"Authorization", "Bearer " + options_.join_token}};
  auto res = client->Post(path, headers, Dump(body), "application/json");
  HttpReply reply;
  if (!res) {
    reply.error = "no answer (" + http::DescribeError(res, *client) + ")";
    unanswered_ = at;
    unanswered_ms_ = SteadyMs();
    FailOver(at, reply);
    return reply;
  }
  reply.status = res->status;
  reply.body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (reply.body.is_discarded()) reply.body = json::object();
  if (reply.body.is_object() && reply.body.contains("error") && reply.body["error"].is_string()) {
    reply.error = reply.body["error"].get<std::string>();
  } else if (reply.status != 200) {
    reply.error = "HTTP " + std::to_string(reply.status);
  }
  if (reply.status == 503 && reply.body.is_object() && reply.body.value("standby", false)) {
    standby_seen_ms_ = SteadyMs();
    FailOver(at, reply);
  }
  return reply;
}

void Agent::FailOver(size_t from, const HttpReply& reply) {
  if (servers_.size() < 2) return;
  size_t to = (from + 1) % servers_.size();
  if (auto it = reply.body.find("leader");
      reply.body.is_object() && it != reply.body.end() && it->is_string()) {
    std::string leader = it->get<std::string>();
    while (!leader.empty() && leader.back() == '/') leader.pop_back();
    auto named = std::find(servers_.begin(), servers_.end(), leader);
    if (named != servers_.end()) to = static_cast<size_t>(named - servers_.begin());
    // A standby naming a leader that did not answer us a moment ago: that leader is
    // likely dead and its lease not yet run out. Stay with the standby, which leads
    // once it does.
    if (to == unanswered_.load() &&
        SteadyMs() - unanswered_ms_.load() < kUnansweredMemory.count()) {
      to = from;
    }
  }
  if (to == from) return;
  size_t expected = from;
  if (server_.compare_exchange_strong(expected, to)) {
    Log("server " + servers_[from] + ": " + reply.error + "; now talking to " + servers_[to]);
  }
}

std::vector<TaskStatus> Agent::TaskList(bool unacked_only) const {
  std::vector<TaskStatus> list;
  for (const auto& [id, t] : tasks_) {
    if (t.orphan || (unacked_only && t.acked)) continue;
    list.push_back(t.status);
  }
  return list;
}

std::vector<TaskStatus> Agent::Tasks() const {
  std::lock_guard lock(mu_);
  std::vector<TaskStatus> out;
  for (const auto& [id, t] : tasks_) {
    if (!t.acked && !t.orphan) out.push_back(t.status);
  }
  return out;
}

int64_t Agent::invalid_metrics_lines() const {
  std::lock_guard lock(mu_);
  return invalid_metrics_;
}

void Agent::Shutdown() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  cv_.notify_all();
}

Status Agent::Run() {
  auto devices = gpus_->Discover();
  if (!devices.ok()) return devices.status();
  devices_ = *devices;
  std::filesystem::create_directories(options_.data_dir);
  cgroups_ = options_.cgroups ? *options_.cgroups : Cgroups::Detect(CgroupHost::FromProc());
  // Containers first: deleting those an earlier agent left empties their groups.
  FindContainers();
  OpenDataCache();
  Log(options_.unmapped_uid >= 0
          ? "identity: ranks of tenants without run_as run as " +
                std::to_string(options_.unmapped_uid) + ":" +
                std::to_string(options_.unmapped_gid) + " (--unmapped-run-as)"
          : "identity: ranks of tenants without run_as run as this agent's user, uid " +
                std::to_string(geteuid()) + " (--unmapped-run-as)");
  Log(cgroups_.available() ? "task limits: " + cgroups_.Describe()
                           : "task limits: none, tasks run without cpu, memory or pids limits (" +
                                 cgroups_.problem() + ")");
  if (cgroups_.available()) {
    std::lock_guard lock(mu_);
    RemoveStaleGroups();
  }
  exec_helper_ = options_.exec_helper;
  if (exec_helper_.empty()) {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const auto beside = self.parent_path() / "trainyard-exec";
    if (!ec && access(beside.c_str(), X_OK) == 0) exec_helper_ = beside.string();
  }
  if (!options_.health_check.empty()) {
    health_checker_ = std::make_unique<HealthChecker>(
        HealthCheckOptions{options_.health_check, options_.node_name, options_.health_check_timeout,
                           [this] { return Now(); }});
    // The node registers once this first check has said how it is.
    health_checker_->Request("join");
    next_health_check_ = Now() + options_.health_check_interval;
    Log("health check " + options_.health_check + ": running it before registering");
  }
  std::thread poller([this] { PollLoop(); });
  // Fencing has a thread of its own: the main loop may wait seconds on a server that
  // stopped answering, and the deadline does not.
  std::thread fencer([this] { FenceLoop(); });

  Status result = Status::Ok();
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
    }
    bool registered;
    {
      std::lock_guard lock(mu_);
      registered = registered_;
    }
    TickHealthCheck();
    const bool join_checked = !health_checker_ || last_health_.has_value();
    if (!registered && join_checked && Now() >= next_attempt_) {
      result = Register();
      if (!result.ok()) break;
    }
    ApplyCommands();
    UpdateFaults();
    bool changed = TickTasks();
    // Ship the last bytes of a task that just exited before its exit is reported.
    Ship(changed);
    {
      std::lock_guard lock(mu_);
      registered = registered_;
    }
    Timestamp now = Now();
    if (registered && now >= next_attempt_ && (changed || now >= next_heartbeat_)) Heartbeat();
    ForgetFinished();
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, kLoopTick, [this] { return stopping_ || !commands_.empty(); });
  }

  // Drain: stop every task with its grace, wait for the group to go, report, leave.
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    Timestamp now = Now();
    int running = 0;
    for (auto& [id, t] : tasks_) {
      if (t.process && !t.process->exited()) {
        t.process->Stop(options_.stop_grace, now);
        ++running;
      }
    }
    if (running > 0) {
      Log("stopping " + std::to_string(running) + " task(s) (SIGTERM, SIGKILL after " +
          FormatDuration(options_.stop_grace) + ")");
    }
    cv_.notify_all();
  }
  fencer.join();
  for (;;) {
    TickTasks();
    bool all_exited = true;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, t] : tasks_) {
        if (t.process && !t.process->exited()) all_exited = false;
      }
    }
    if (all_exited) break;
    std::this_thread::sleep_for(kLoopTick);
  }
  bool registered;
  {
    std::lock_guard lock(mu_);
    registered = registered_;
  }
  if (registered && result.ok()) {
    Ship(true);
    next_attempt_ = Timestamp{};
    Heartbeat();
  }
  // The poll thread may be inside a long poll: cut its connection until it notices.
  for (;;) {
    std::unique_lock lock(mu_);
    if (poll_done_) break;
    lock.unlock();
    {
      std::lock_guard client_lock(poll_client_mu_);
      poll_client_->stop();
    }
    lock.lock();
    cv_.wait_for(lock, milliseconds(20), [this] { return poll_done_; });
  }
  poller.join();
  health_checker_.reset();  // kills a check under way
  return result;
}

Status Agent::Register() {
  protocol::Registration r;
  r.node.name = options_.node_name;
  r.node.labels = options_.labels;
  for (const auto& d : devices_) {
    Gpu gpu;
    gpu.index = d.index;
    gpu.uuid = d.uuid;
    gpu.model = d.type;
    gpu.memory_bytes = d.memory_mib * kMiB;
    gpu.nvlink_domain =
        options_.nvlink_domain.empty() ? options_.node_name : options_.nvlink_domain;
    r.node.gpus.push_back(std::move(gpu));
  }
  r.node.milli_cpus = options_.cpus * 1000;
  r.node.memory_bytes = options_.memory_mib * kMiB;
  r.node.topology.leaf = options_.leaf;
  r.address = options_.address;
  r.simulated = gpus_->simulated();
  r.health_check = last_health_;
  r.limits = cgroups_.available() ? cgroups_.Describe() : "none: " + cgroups_.problem();
  r.containers = DescribeContainers();
  {
    std::lock_guard lock(mu_);
    r.tasks = TaskList(/*unacked_only=*/true);
  }
  const Timestamp sent = Now();
  HttpReply reply = Post(false, "/api/v1/agent/register", protocol::ToJson(r));
  Timestamp now = Now();
  if (reply.status == 200) {
    // A reply it cannot read still registered the node: the agent keeps its interval
    // and fences never, as with an older server.
    protocol::RegisterReply told;
    if (auto parsed = protocol::ParseRegisterReply(reply.body); parsed.ok()) {
      told = std::move(*parsed);
    } else {
      Log("register: " + parsed.status().message());
    }
    std::lock_guard lock(mu_);
    registered_ = true;
    failures_ = 0;
    last_contact_ = sent;
    if (told.release_after.count() > 0) release_after_ = told.release_after;
    if (unreachable_logged_) Log("server reachable again");
    unreachable_logged_ = false;
    if (told.heartbeat_interval.count() > 0) heartbeat_interval_ = told.heartbeat_interval;
    int stopped = 0;
    for (const std::string& id : told.stop) {
      auto t = tasks_.find(id);
      if (t == tasks_.end()) continue;
      t->second.orphan = true;
      if (t->second.process) t->second.process->Stop(Duration::zero(), now);
      ++stopped;
    }
    next_heartbeat_ = now + heartbeat_interval_;
    Log("registered as node " + options_.node_name + " with " + std::to_string(devices_.size()) +
        " GPU(s), " + std::to_string(tasks_.size()) + " task(s)" +
        (stopped > 0 ? "; killed " + std::to_string(stopped) + " the server does not know" : ""));
    cv_.notify_all();
    return Status::Ok();
  }
  if (IsPermanentRefusal(reply.status)) {
    return FailedPrecondition("register: the server refused node " + options_.node_name + ": " +
                              std::to_string(reply.status) + " " + reply.error);
  }
  ++failures_;
  next_attempt_ = now + Backoff(failures_);
  if (!unreachable_logged_) {
    Log("register: " + CurrentServer() + ": " + reply.error + "; retrying (backoff up to " +
        FormatDuration(options_.max_backoff) + ")");
    unreachable_logged_ = true;
  }
  return Status::Ok();
}

void Agent::Heartbeat() {
  Timestamp now = Now();
  protocol::Heartbeat hb;
  hb.node = options_.node_name;
  hb.seq = ++seq_;
  hb.health_message = options_.health_note;
  if (auto samples = gpus_->Sample(now); samples.ok()) {
    for (const auto& s : *samples) hb.gpus.push_back(Telemetry(s));
  } else {
    hb.health_ok = false;
    hb.health_message = samples.status().message();
  }
  for (const LinkSample& l : gpus_->SampleLinks()) {
    hb.links.push_back({l.name, l.kind, l.up, static_cast<double>(l.errors)});
  }
  hb.disks = Disks();
  hb.health_check = last_health_;
  {
    std::lock_guard lock(mu_);
    hb.tasks = TaskList(/*unacked_only=*/true);
    for (const FaultSpec& f : faults_) hb.faults.push_back(f.id);
    if (data_cache_) hb.datasets = data_cache_->Statuses();
  }
  HttpReply reply = Post(false, "/api/v1/agent/heartbeat", protocol::ToJson(hb));
  std::lock_guard lock(mu_);
  next_heartbeat_ = now + heartbeat_interval_;
  if (reply.status == 200) {
    failures_ = 0;
    last_contact_ = now;
    if (unreachable_logged_) Log("server reachable again");
    unreachable_logged_ = false;
    auto acked = protocol::ParseHeartbeatReply(reply.body);
    if (!acked.ok()) {
      // Nothing acknowledged: the exits are reported again with the next heartbeat.
      Log("heartbeat: " + acked.status().message());
      return;
    }
    for (const std::string& id : acked->ack) {
      auto t = tasks_.find(id);
      if (t != tasks_.end() && t->second.status.state == TaskState::kExited) {
        t->second.acked = true;
      }
    }
    return;
  }
  if (reply.status == 404) {
    Log("heartbeat: the server does not know node " + options_.node_name + "; registering again");
    registered_ = false;
    next_attempt_ = now;
    return;
  }
  ++failures_;
  next_attempt_ = now + Backoff(failures_);
  if (!unreachable_logged_) {
    Log("heartbeat: " + CurrentServer() + ": " + reply.error +
        "; tasks keep running; retrying (backoff up to " + FormatDuration(options_.max_backoff) +
        ")");
    unreachable_logged_ = true;
  }
}

void Agent::ApplyCommands() {
  std::lock_guard lock(mu_);
  Timestamp now = Now();
  while (!commands_.empty()) {
    Command c = std::move(commands_.front());
    commands_.pop_front();
    if (c.kind == Command::Kind::kStart) {
      StartTask(c.start);
      continue;
    }
    if (c.kind == Command::Kind::kStage) {
      StageData(c.stage);
      continue;
    }
    if (c.kind == Command::Kind::kFaults) {
      if (c.faults != faults_) {
        Log(c.faults.empty() ? std::string("faults: none active")
                             : "faults: active " + FaultList(c.faults));
        faults_ = std::move(c.faults);
        faults_changed_ = true;
      }
      continue;
    }
    auto it = tasks_.find(c.task_id);
    if (it == tasks_.end() || !it->second.process) continue;  // unknown: ignored
    Task& t = it->second;
    if (c.kind == Command::Kind::kCheckpoint) {
      if (t.process->exited() || t.process->stopping()) continue;  // it can no longer answer
      const int64_t id = ++checkpoint_requests_;
      if (Status s = WriteFileAtomically(t.checkpoint_request_file, std::to_string(id) + "\n");
          !s.ok()) {
        Log("task " + t.status.task_id + ": checkpoint request: " + s.message());
      } else {
        Log("task " + t.status.task_id + ": checkpoint requested (request " + std::to_string(id) +
            ")");
      }
    } else if (c.kind == Command::Kind::kProfile) {
      if (t.process->exited() || t.process->stopping()) continue;  // it can no longer answer
      t.profile_ids.insert(c.profile_id);
      if (Status s = WriteProfileRequest(t.profile_file, c.profile_id, c.steps, t.profile_dir);
          !s.ok()) {
        Log("task " + t.status.task_id + ": profile " + c.profile_id + ": " + s.message());
        t.profile_uploads.push_back(
            {c.profile_id, "failed", "", "the agent could not write the request: " + s.message()});
      } else {
        Log("task " + t.status.task_id + ": profile " + c.profile_id + " of " +
            std::to_string(c.steps) + " steps requested");
      }
    } else if (c.kind == Command::Kind::kStop) {
      t.process->Stop(c.grace, now);
    } else if (Status s = t.process->Preempt(c.signal, c.grace, now, t.preempt_path); !s.ok()) {
      Log("task " + t.status.task_id + ": " + s.message());
    }
  }
}

// REQUIRES: mu_ held.
void Agent::StartTask(const TaskStart& spec) {
  if (tasks_.count(spec.task_id) > 0) return;  // a repeated start: idempotent
  Timestamp now = Now();
  Task t;
  t.spec = spec;
  t.status.task_id = spec.task_id;
  t.status.job_id = spec.job_id;
  t.status.attempt = spec.attempt;
  t.status.rank = spec.rank;
  t.status.started_ms = ToMs(now);
  t.log_path = RankPath(options_.data_dir, "logs", spec, ".log");
  t.metrics_path = RankPath(options_.data_dir, "metrics", spec, ".jsonl");

  LaunchSpec launch;
  launch.argv = spec.argv;
  for (const char* name : kInheritedEnv) {
    if (const char* v = std::getenv(name)) launch.env[name] = v;
  }
  for (const auto& [k, v] : spec.env) launch.env[k] = v;
  // The agent tails this file, so it must be ours, wherever the server thought it was.
  launch.env["TRAINYARD_METRICS_FILE"] = t.metrics_path;
  if (launch.env.count("TRAINYARD_PREEMPT_FILE") == 0) {
    launch.env["TRAINYARD_PREEMPT_FILE"] = RankPath(options_.data_dir, "preempt", spec, ".json");
  }
  t.preempt_path = launch.env["TRAINYARD_PREEMPT_FILE"];
  // Ours, like the metrics file: the agent writes the one and uploads from the other.
  // Absolute, since the task runs in its own working directory.
  std::error_code abs_ec;
  t.profile_file = std::filesystem::absolute(
                       RankPath(options_.data_dir, "profile-requests", spec, ".json"), abs_ec)
                       .string();
  t.profile_dir =
      std::filesystem::absolute(RankPath(options_.data_dir, "profiles", spec, ""), abs_ec).string();
  launch.env["TRAINYARD_PROFILE_FILE"] = t.profile_file;
  launch.env["TRAINYARD_PROFILE_DIR"] = t.profile_dir;
  // Ours too: the agent writes them, the SDK reads them (docs/faults.md). The task id
  // is a plain name: digits and dots (protocol::ParseTaskId).
  const std::string& file_name = spec.task_id;
  t.fault_file =
      std::filesystem::absolute(options_.data_dir + "/faults/" + file_name + ".json", abs_ec)
          .string();
  t.checkpoint_request_file =
      std::filesystem::absolute(options_.data_dir + "/checkpoint-requests/" + file_name, abs_ec)
          .string();
  launch.env["TRAINYARD_FAULT_FILE"] = t.fault_file;
  launch.env["TRAINYARD_CHECKPOINT_REQUEST_FILE"] = t.checkpoint_request_file;
  // A file left by an earlier agent must not speak for this task.
  std::error_code rm_ec;
  std::filesystem::remove(t.fault_file, rm_ec);
  std::filesystem::remove(t.checkpoint_request_file, rm_ec);
  if (auto dir = launch.env.find("TRAINYARD_CHECKPOINT_DIR");
      dir != launch.env.end() && !dir->second.empty()) {
    std::filesystem::path p(dir->second);
    if (p.is_relative()) {
      p = (spec.workdir.empty() ? std::filesystem::current_path(abs_ec)
                                : std::filesystem::path(spec.workdir)) /
          p;
    }
    t.checkpoint_dir = p.lexically_normal().string();
  }
  launch.env["TRAINYARD_TASK_ID"] = spec.task_id;
  if (launch.env.count("CUDA_VISIBLE_DEVICES") == 0 && !spec.gpus.empty()) {
    std::string list;
    for (int g : spec.gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
    launch.env["CUDA_VISIBLE_DEVICES"] = list;
  }
  // No workdir: the agent's own working directory, so relative paths in a job resolve
  // where the agent (or `trainyard up`) was started, e.g. a checkout of the repository.
  launch.workdir = spec.workdir;
  launch.log_path = t.log_path;
  launch.allowed_dirs = options_.allowed_dirs;
  launch.path_env = {"TRAINYARD_CHECKPOINT_DIR", "TRAINYARD_RESUME_FROM"};
  launch.secret_env = spec.secret_env;

  Status failed = Status::Ok();
  for (int g : spec.gpus) {
    if (g < 0 || g >= static_cast<int>(devices_.size())) {
      failed = InvalidArgument("gpus: GPU " + std::to_string(g) + " does not exist; node " +
                               options_.node_name + " has " + std::to_string(devices_.size()));
      break;
    }
  }
  if (failed.ok()) failed = PrepareData(spec, t, launch);
  if (failed.ok() && !spec.image.empty()) failed = PlaceContainerFiles(t);
  if (failed.ok()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(t.metrics_path).parent_path(), ec);
    failed = PrepareIsolation(spec, t, launch);
  }
  if (failed.ok() && !spec.image.empty()) failed = PrepareContainer(spec, t, launch);
  if (failed.ok()) {
    auto process = TaskProcess::Start(launch);
    if (process.ok()) {
      t.process = std::move(*process);
      t.status.state = TaskState::kRunning;
      t.status.pid = t.process->pid();
      Log("task " + spec.task_id + ": started pid " + std::to_string(t.status.pid));
    } else {
      failed = process.status();
    }
  }
  if (!failed.ok()) {
    // Said in the task's own log too, where its owner will look first.
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(t.log_path).parent_path(), ec);
    std::ofstream(t.log_path, std::ios::app) << "trainyard: " << failed.message() << "\n";
    t.status.state = TaskState::kExited;
    t.status.finished_ms = ToMs(now);
    t.status.exit_code = 127;
    t.status.message = failed.message();
    Log("task " + spec.task_id + ": " + failed.message());
    ReleaseGroup(t);
  }
  tasks_.emplace(spec.task_id, std::move(t));
  // Report the start (or its failure) at once.
  next_heartbeat_ = Timestamp{};
}

bool Agent::TickTasks() {
  std::unique_lock lock(mu_);
  Timestamp now = Now();
  // Exited containers, deleted with the runtime once the lock is released; their
  // groups are released after that (the container's cgroup lies inside its group's).
  std::vector<std::string> exited_containers;
  bool changed = next_heartbeat_ == Timestamp{};
  bool failed = false;
  std::set<int> busy;
  for (auto& [id, t] : tasks_) {
    if (!t.process) continue;
    bool was_running = t.status.state == TaskState::kRunning;
    // Before Tick: a stop whose SIGKILL Tick sends is still the agent's doing.
    const bool stopped_by_us = t.process->stopping() || t.orphan;
    t.process->Tick(now);
    if (was_running && t.process->exited()) {
      t.status.state = TaskState::kExited;
      t.status.finished_ms = ToMs(now);
      t.status.exit_code = t.process->exit_code();
      t.status.signal = t.process->term_signal();
      changed = true;
      if (!t.group.empty() && (t.status.exit_code != 0 || t.status.signal != 0)) {
        auto g = groups_.find(t.group);
        if (g != groups_.end() &&
            (g->second.group.OomKills() > t.oom_kills_before || ContainerOomKilled(t))) {
          t.status.message = std::string(kOomKilled) + ": memory limit " +
                             FormatMemory(g->second.group.limits().memory_bytes);
        }
      }
      if (t.container_id.empty()) {
        ReleaseGroup(t);
      } else {
        exited_containers.push_back(id);
      }
      Log("task " + id + ": exited " +
          (t.status.signal != 0 ? "on signal " + std::to_string(t.status.signal)
                                : "with code " + std::to_string(t.status.exit_code)));
      // A task that failed by itself may have met a sick node; one the agent stopped
      // (stop, preempt, drain) says nothing about it.
      if ((t.status.exit_code != 0 || t.status.signal != 0) && !stopped_by_us && !stopping_) {
        failed = true;
      }
    }
    if (t.status.state == TaskState::kRunning) busy.insert(t.spec.gpus.begin(), t.spec.gpus.end());
  }
  if (!exited_containers.empty()) {
    std::vector<std::string> ids;
    for (const std::string& id : exited_containers) ids.push_back(tasks_.at(id).container_id);
    lock.unlock();
    for (const std::string& cid : ids) DeleteContainer(cid);
    lock.lock();
    for (const std::string& id : exited_containers) {
      if (auto it = tasks_.find(id); it != tasks_.end()) ReleaseGroup(it->second);
    }
  }
  RemoveDeadGroupsLocked();
  gpus_->SetBusyGpus(busy);
  if (failed && health_checker_) health_checker_->Request("task-failed");
  return changed;
}

void Agent::FenceLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    FenceIfCutOffLocked();
    cv_.wait_for(lock, kLoopTick, [this] { return stopping_; });
  }
}

void Agent::FenceIfCutOffLocked() {
  if (release_after_.count() <= 0 || last_contact_ == Timestamp{}) return;
  const Timestamp now = Now();
  const Duration silent = now - last_contact_;
  // SIGTERM a third of the way before the server may release the node (at most 30 s
  // before), SIGKILL halfway from there: gone before anything is started elsewhere.
  const Duration margin = std::min<Duration>(release_after_ / 3, Duration(30'000));
  if (silent < release_after_ - margin) return;
  int fenced = 0;
  for (auto& [id, t] : tasks_) {
    if (!t.process || t.process->exited()) continue;
    if (t.status.fenced) {
      t.process->Tick(now);  // the SIGKILL when due, whatever the main loop waits on
      continue;
    }
    if (t.orphan) continue;
    t.status.fenced = true;
    t.status.message = "stopped by its agent: no contact with the server for " +
                       FormatDuration(silent) + ", and the server gives a silent node's work " +
                       "to other nodes after " + FormatDuration(release_after_);
    t.process->Stop(margin / 2, now);
    ++fenced;
  }
  if (fenced > 0) {
    Log("no contact with the server for " + FormatDuration(silent) + ": stopping " +
        std::to_string(fenced) + " task(s) (SIGTERM, SIGKILL after " + FormatDuration(margin / 2) +
        ") before it gives their work to other nodes at " + FormatDuration(release_after_));
  }
}

void Agent::UpdateFaults() {
  std::lock_guard lock(mu_);
  const int64_t now_ms = ToMs(Now());
  for (auto it = faults_.begin(); it != faults_.end();) {
    if (it->until_ms != 0 && it->until_ms <= now_ms) {
      Log("fault " + it->id + " (" + std::string(FaultKindName(it->kind)) + ") ended");
      it = faults_.erase(it);
      faults_changed_ = true;
    } else {
      ++it;
    }
  }
  if (faults_changed_) {
    faults_changed_ = false;
    gpus_->ApplyFaults(faults_);
    for (const FaultSpec& f : faults_) {
      if (!f.node_wide() && f.gpu >= static_cast<int>(devices_.size()) && !devices_.empty()) {
        Log("fault " + f.id + ": node " + options_.node_name + " has no GPU " +
            std::to_string(f.gpu) + " (it has " + std::to_string(devices_.size()) +
            "); the fault touches nothing");
      }
    }
    next_heartbeat_ = Timestamp{};  // tell the server at once which faults are active
  }

  std::vector<TaskPlacement> placements;
  std::vector<Task*> running;
  for (auto& [id, t] : tasks_) {
    if (t.orphan || !t.process || t.status.state != TaskState::kRunning) continue;
    placements.push_back({id, t.spec.job_id, t.spec.rank, t.spec.gpus});
    running.push_back(&t);
  }
  const std::vector<FaultEffects> effects = EffectsOnTasks(faults_, placements);
  for (size_t i = 0; i < running.size(); ++i) {
    Task& t = *running[i];
    if (effects[i] == t.fault_effects) continue;
    t.fault_effects = effects[i];
    if (Status s = WriteFileAtomically(t.fault_file, ToJson(effects[i]).dump() + "\n"); !s.ok()) {
      Log("task " + t.status.task_id + ": fault file: " + s.message());
    }
  }
}

void Agent::TickHealthCheck() {
  if (!health_checker_) return;
  const Timestamp now = Now();
  if (last_health_ && now >= next_health_check_) {
    health_checker_->Request("periodic");
    next_health_check_ = now + options_.health_check_interval;
  }
  const int64_t runs = health_checker_->runs();
  if (runs == health_runs_seen_) return;
  health_runs_seen_ = runs;
  std::optional<HealthCheckResult> result = health_checker_->Latest();
  if (!result) return;
  const bool news =
      !last_health_ || last_health_->ok != result->ok || last_health_->output != result->output;
  last_health_ = result;
  if (!news) return;
  Log("health check (" + result->trigger + "): " + (result->ok ? "ok" : "FAILED") +
      (result->output.empty() ? "" : ": " + result->output));
  std::lock_guard lock(mu_);
  next_heartbeat_ = Timestamp{};  // the server hears of a change at once
}

std::vector<protocol::DiskTelemetry> Agent::Disks() {
  std::vector<std::string> wanted = {options_.data_dir};
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, t] : tasks_) {
      if (t.status.state == TaskState::kRunning && !t.checkpoint_dir.empty()) {
        wanted.push_back(t.checkpoint_dir);
      }
    }
  }
  std::vector<protocol::DiskTelemetry> disks;
  std::set<std::string> seen;
  for (const std::string& path : wanted) {
    if (seen.size() >= kMaxDisks) break;
    // A checkpoint dir not created yet: the file system it will be created on.
    std::filesystem::path p = std::filesystem::path(path).lexically_normal();
    std::error_code ec;
    while (!std::filesystem::exists(p, ec) && p.has_relative_path()) p = p.parent_path();
    const std::string at = p.string();
    if (!seen.insert(at).second) continue;
    struct statvfs st {};
    if (statvfs(at.c_str(), &st) != 0) continue;
    disks.push_back({at, static_cast<double>(st.f_bavail) * static_cast<double>(st.f_frsize),
                     static_cast<double>(st.f_blocks) * static_cast<double>(st.f_frsize)});
  }
  return disks;
}

void Agent::Ship(bool force) {
  Timestamp now = Now();
  if (!force && now < next_ship_) return;
  next_ship_ = now + options_.ship_interval;
  struct Work {
    std::string id, log_path, metrics_path;
    int64_t log_offset, metrics_offset;
    bool exited;
  };
  std::vector<Work> work;
  {
    std::lock_guard lock(mu_);
    if (!registered_ || now < next_attempt_) return;
    for (const auto& [id, t] : tasks_) {
      if (t.orphan || t.drained) continue;
      work.push_back({id, t.log_path, t.metrics_path, t.log_offset, t.metrics_offset,
                      t.status.state == TaskState::kExited});
    }
  }
  auto fail = [&](const HttpReply& reply, const std::string& what) {
    std::lock_guard lock(mu_);
    if (reply.status == 404) {
      registered_ = false;
      next_attempt_ = now;
      return;
    }
    ++failures_;
    next_attempt_ = now + Backoff(failures_);
    if (!unreachable_logged_) {
      Log(what + ": " + CurrentServer() + ": " + reply.error + "; retrying");
      unreachable_logged_ = true;
    }
  };
  for (const Work& w : work) {
    bool nothing_new = true;
    auto chunk = ReadLogChunk(w.log_path, w.log_offset);
    if (chunk.ok() && !chunk->empty()) {
      nothing_new = false;
      int64_t end = w.log_offset + static_cast<int64_t>(chunk->size());
      protocol::LogUpload upload{options_.node_name, w.id, w.log_offset, std::move(*chunk)};
      HttpReply reply = Post(false, "/api/v1/agent/logs", protocol::ToJson(upload));
      if (reply.status == 0 || reply.status == 404 || reply.status >= 500) {
        fail(reply, "logs");
        return;
      }
      int64_t next = end;  // a 4xx other than 404 would repeat forever: skip the chunk
      if (reply.status == 200) {
        // A reply of the wrong shape reads as "all arrived".
        if (auto told = protocol::ParseUploadReply(reply.body); told.ok()) {
          next = std::clamp<int64_t>(told->next_offset, 0, end);
        }
      } else {
        Log("logs: task " + w.id + ": " + reply.error + "; skipping " +
            std::to_string(upload.data.size()) + " bytes");
      }
      std::lock_guard lock(mu_);
      if (auto t = tasks_.find(w.id); t != tasks_.end()) t->second.log_offset = next;
    }
    auto batch = ReadMetricsLines(w.metrics_path, w.metrics_offset);
    if (batch.ok() && batch->end_offset > w.metrics_offset) {
      nothing_new = false;
      int64_t next = batch->end_offset;
      if (!batch->lines.empty()) {
        // The server cannot work out where a batch of re-serialised lines ended in our
        // file (skipped invalid lines included), so we tell it: end_offset.
        protocol::MetricsUpload upload{options_.node_name, w.id, batch->offset, batch->end_offset,
                                       batch->lines};
        HttpReply reply = Post(false, "/api/v1/agent/metrics", protocol::ToJson(upload));
        if (reply.status == 0 || reply.status == 404 || reply.status >= 500) {
          fail(reply, "metrics");
          return;
        }
        if (reply.status == 200) {
          // The server is behind (it lost lines): resend from where it says.
          if (auto told = protocol::ParseUploadReply(reply.body);
              told.ok() && told->next_offset < batch->offset) {
            next = told->next_offset;
          }
        } else {
          Log("metrics: task " + w.id + ": " + reply.error + "; skipping " +
              std::to_string(batch->lines.size()) + " lines");
        }
      }
      std::lock_guard lock(mu_);
      if (auto t = tasks_.find(w.id); t != tasks_.end()) {
        t->second.metrics_offset = next;
        invalid_metrics_ += batch->invalid;
        TakeProfileRecordsLocked(t->second, batch->lines);
      }
    }
    if (auto stopped = ShipProfiles(w.id, kProfileChunksPerShip)) {
      fail(*stopped, "profile");
      return;
    }
    if (w.exited && nothing_new) {
      std::lock_guard lock(mu_);
      if (auto t = tasks_.find(w.id); t != tasks_.end() && t->second.profile_uploads.empty()) {
        t->second.drained = true;
      }
    }
  }
}

void Agent::TakeProfileRecordsLocked(Task& t, const std::vector<json>& lines) {
  for (const json& line : lines) {
    std::optional<ProfileRecord> r = ParseProfileRecord(line);
    if (!r) continue;
    if (!t.profile_ids.contains(r->id)) {
      Log("task " + t.status.task_id + ": ignoring a record of profile " + QuoteForMessage(r->id) +
          ", which was not asked of it");
      continue;
    }
    // A batch the server asked for again holds records already taken.
    if (!t.profile_records.insert(r->id + " " + r->status).second) continue;
    PendingProfile u{r->id, r->status, "", r->message, 0};
    if (r->status == "stored") {
      if (auto path = ProfileTracePath(r->path, t.profile_dir); path.ok()) {
        u.path = *path;
      } else {
        u.status = "failed";
        u.message = path.status().message();
      }
    }
    t.profile_uploads.push_back(std::move(u));
  }
}

std::optional<Agent::HttpReply> Agent::ShipProfiles(const std::string& task_id, int max_chunks) {
  int chunks = 0;
  while (chunks < max_chunks) {
    PendingProfile u;
    {
      std::lock_guard lock(mu_);
      auto t = tasks_.find(task_id);
      if (t == tasks_.end() || t->second.profile_uploads.empty()) return std::nullopt;
      u = t->second.profile_uploads.front();
    }
    protocol::ProfileUpload upload;
    upload.node = options_.node_name;
    upload.task_id = task_id;
    upload.id = u.id;
    upload.offset = u.offset;
    int64_t size = 0;
    if (u.status == "stored") {
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(u.path, ec);
      size = ec ? 0 : static_cast<int64_t>(bytes);
      std::string unreadable;
      Result<std::string> chunk = std::string();
      if (ec) {
        unreadable = ec.message();
      } else if (size == 0) {
        unreadable = "it is empty";
      } else if (chunk = ReadLogChunk(u.path, u.offset); !chunk.ok()) {
        unreadable = chunk.status().message();
      } else if (chunk->empty() && u.offset < size) {
        unreadable = "it shrank while being uploaded";
      }
      if (!unreadable.empty()) {
        // Reported as the rank's failure (and not retried: the file will not mend).
        upload.kind = protocol::ProfileUpload::Kind::kFailed;
        upload.message = "the agent cannot read the trace " + u.path + ": " + unreadable;
      } else {
        upload.kind = protocol::ProfileUpload::Kind::kChunk;
        upload.total_bytes = size;
        upload.data = std::move(*chunk);
        ++chunks;
      }
    } else {
      upload.kind = u.status == "failed" ? protocol::ProfileUpload::Kind::kFailed
                                         : protocol::ProfileUpload::Kind::kRecording;
      if (u.status == "failed") upload.message = u.message;
      ++chunks;  // a status is small, but it counts: the loop always ends
    }
    HttpReply reply = Post(false, "/api/v1/agent/profile", protocol::ToJson(upload));
    if (reply.status == 0 || reply.status >= 500) return reply;
    bool done = true;
    if (reply.status == 200 && upload.kind == protocol::ProfileUpload::Kind::kChunk) {
      // A reply of the wrong shape reads as "resend from where we were", never a throw.
      auto told = protocol::ParseProfileUploadReply(reply.body);
      const std::string state = told.ok() ? told->state : "";
      if (state == "stored") {
        Log("task " + task_id + ": profile " + u.id + " uploaded (" + std::to_string(size) +
            " bytes)");
        std::error_code ec;
        std::filesystem::remove(u.path, ec);  // the server has it; traces are large
      } else if (state == "failed") {
        Log("task " + task_id + ": profile " + u.id +
            ": the server refused the trace: " + told->message);
      } else {
        done = false;
        if (told.ok()) u.offset = std::clamp<int64_t>(told->next_offset, 0, size);
      }
    } else if (reply.status != 200) {
      // 4xx: resending would be refused the same way (the request is unknown, the
      // trace too big, ...).
      Log("task " + task_id + ": profile " + u.id + ": " + reply.error + "; not sent");
    }
    std::lock_guard lock(mu_);
    auto t = tasks_.find(task_id);
    if (t == tasks_.end() || t->second.profile_uploads.empty()) return std::nullopt;
    PendingProfile& front = t->second.profile_uploads.front();
    if (front.id != u.id || front.status != u.status) continue;
    if (done) {
      t->second.profile_uploads.pop_front();
    } else {
      front.offset = u.offset;
    }
  }
  return std::nullopt;
}

void Agent::ForgetFinished() {
  std::lock_guard lock(mu_);
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    const Task& t = it->second;
    bool gone = !t.process || t.process->exited();
    if ((t.acked && t.drained) || (t.orphan && gone)) {
      std::error_code ec;
      std::filesystem::remove(t.fault_file, ec);
      std::filesystem::remove(t.checkpoint_request_file, ec);
      if (!t.container_dir.empty()) std::filesystem::remove_all(t.container_dir, ec);
      it = tasks_.erase(it);
    } else {
      ++it;
    }
  }
}

void Agent::PollLoop() {
  int failures = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || registered_; });
      if (stopping_) break;
    }
    const protocol::PollRequest request{options_.node_name, options_.poll_wait};
    HttpReply reply = Post(true, "/api/v1/agent/poll", protocol::ToJson(request));
    std::unique_lock lock(mu_);
    if (stopping_) break;
    if (reply.status == 200) {
      failures = 0;
      // A command the agent cannot read is logged and ignored; the others still apply.
      std::vector<Status> rejected;
      auto got = protocol::ParsePollReply(reply.body, &rejected);
      for (const Status& s : rejected) Log("poll: ignoring a command: " + s.message());
      if (!got.ok()) {
        Log("poll: " + got.status().message());
        continue;
      }
      for (Command& c : got->commands) commands_.push_back(std::move(c));
      if (!got->commands.empty()) cv_.notify_all();
      continue;
    }
    if (reply.status == 404) {
      // The main loop registers again; wait for it rather than spin.
      registered_ = false;
      cv_.notify_all();
      continue;
    }
    ++failures;
    cv_.wait_for(lock, Backoff(failures), [this] { return stopping_; });
  }
  std::lock_guard lock(mu_);
  poll_done_ = true;
  cv_.notify_all();
}

}  // namespace trainyard::agent
