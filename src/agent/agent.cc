#include "agent/agent.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "agent/profile.h"
#include "agent/tail.h"
#include "core/names.h"
#include "http/tls.h"

namespace trainyard::agent {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr Duration kLoopTick = milliseconds(25);
constexpr Duration kFirstBackoff = milliseconds(100);
// Chunks (1 MiB each) of a task's profile traces sent per shipping round: a 64 MiB
// trace takes a few seconds, and logs and heartbeats are not held up behind it.
constexpr int kProfileChunksPerShip = 4;

// Variables a task inherits from the agent (then the task's own env overrides them):
// enough for a program to find its interpreter and libraries, nothing node-specific.
constexpr const char* kInheritedEnv[] = {"PATH",   "HOME", "USER",   "LOGNAME",        "LANG",
                                         "LC_ALL", "TZ",   "TMPDIR", "LD_LIBRARY_PATH"};

std::string Dump(const json& j) {
  // Replace, not throw, on invalid UTF-8: a task's bytes must not take the agent down.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string RankPath(const std::string& data_dir, const char* kind, const StartTask& t,
                     const char* ext) {
  return data_dir + "/" + kind + "/" + std::to_string(t.job_id) + "/" + std::to_string(t.attempt) +
         "/rank-" + std::to_string(t.rank) + ext;
}

bool IsPermanentRefusal(int status) { return status == 400 || status == 401 || status == 403; }

}  // namespace

Agent::Agent(AgentOptions options, std::unique_ptr<GpuBackend> gpus)
    : options_(std::move(options)),
      gpus_(std::move(gpus)),
      heartbeat_interval_(options_.heartbeat_interval) {
  client_ = std::make_unique<httplib::Client>(options_.server_url);
  client_->set_connection_timeout(std::chrono::seconds(2));
  client_->set_read_timeout(std::chrono::seconds(10));
  client_->set_write_timeout(std::chrono::seconds(10));
  client_->set_tcp_nodelay(true);  // else a request's body waits for a delayed ACK
  http::VerifyServer(*client_, options_.ca_cert);
  poll_client_ = std::make_unique<httplib::Client>(options_.server_url);
  poll_client_->set_connection_timeout(std::chrono::seconds(2));
  poll_client_->set_read_timeout(options_.poll_wait + std::chrono::seconds(10));
  poll_client_->set_write_timeout(std::chrono::seconds(10));
  poll_client_->set_tcp_nodelay(true);
  http::VerifyServer(*poll_client_, options_.ca_cert);
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
  return std::min(d, options_.max_backoff);
}

Agent::HttpReply Agent::Post(httplib::Client& client, const std::string& path, const json& body) {
  httplib::Headers headers = {{"Authorization", "Bearer " + options_.join_token}};
  auto res = client.Post(path, headers, Dump(body), "application/json");
  HttpReply reply;
  if (!res) {
    reply.error = "no answer (" + http::DescribeError(res, client) + ")";
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
  return reply;
}

json Agent::TaskList(bool unacked_only) const {
  json list = json::array();
  for (const auto& [id, t] : tasks_) {
    if (t.orphan || (unacked_only && t.acked)) continue;
    list.push_back(ToJson(t.status));
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
  std::thread poller([this] { PollLoop(); });

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
    if (!registered && Now() >= next_attempt_) {
      result = Register();
      if (!result.ok()) break;
    }
    ApplyCommands();
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
    poll_client_->stop();
    lock.lock();
    cv_.wait_for(lock, milliseconds(20), [this] { return poll_done_; });
  }
  poller.join();
  return result;
}

Status Agent::Register() {
  json gpus = json::array();
  for (const auto& d : devices_) {
    gpus.push_back({{"index", d.index}, {"uuid", d.uuid}, {"memory_mib", d.memory_mib}});
  }
  json body;
  body["node"] = {{"name", options_.node_name},
                  {"address", options_.address},
                  {"gpu_type", devices_.empty() ? "" : devices_[0].type},
                  {"gpus", gpus},
                  {"cpus", options_.cpus},
                  {"memory_mib", options_.memory_mib},
                  {"labels", options_.labels},
                  {"leaf", options_.leaf},
                  {"nvlink_domain",
                   options_.nvlink_domain.empty() ? options_.node_name : options_.nvlink_domain},
                  {"simulated", gpus_->simulated()}};
  {
    std::lock_guard lock(mu_);
    body["tasks"] = TaskList(/*unacked_only=*/true);
  }
  HttpReply reply = Post(*client_, "/api/v1/agent/register", body);
  Timestamp now = Now();
  if (reply.status == 200) {
    std::lock_guard lock(mu_);
    registered_ = true;
    failures_ = 0;
    if (unreachable_logged_) Log("server reachable again");
    unreachable_logged_ = false;
    if (auto it = reply.body.find("heartbeat_interval_ms");
        it != reply.body.end() && it->is_number_integer() && it->get<int64_t>() > 0) {
      heartbeat_interval_ = Duration(it->get<int64_t>());
    }
    int stopped = 0;
    if (auto it = reply.body.find("stop"); it != reply.body.end() && it->is_array()) {
      for (const auto& id : *it) {
        if (!id.is_string()) continue;
        auto t = tasks_.find(id.get<std::string>());
        if (t == tasks_.end()) continue;
        t->second.orphan = true;
        if (t->second.process) t->second.process->Stop(Duration::zero(), now);
        ++stopped;
      }
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
    Log("register: " + options_.server_url + ": " + reply.error + "; retrying (backoff up to " +
        FormatDuration(options_.max_backoff) + ")");
    unreachable_logged_ = true;
  }
  return Status::Ok();
}

void Agent::Heartbeat() {
  Timestamp now = Now();
  json body;
  body["node"] = options_.node_name;
  body["seq"] = ++seq_;
  json health = {{"ok", true}, {"message", options_.health_note}};
  json gpus = json::array();
  if (auto samples = gpus_->Sample(now); samples.ok()) {
    for (const auto& s : *samples) gpus.push_back(ToJson(s));
  } else {
    health = {{"ok", false}, {"message", samples.status().message()}};
  }
  body["health"] = health;
  body["gpus"] = gpus;
  {
    std::lock_guard lock(mu_);
    body["tasks"] = TaskList(/*unacked_only=*/true);
  }
  HttpReply reply = Post(*client_, "/api/v1/agent/heartbeat", body);
  std::lock_guard lock(mu_);
  next_heartbeat_ = now + heartbeat_interval_;
  if (reply.status == 200) {
    failures_ = 0;
    if (unreachable_logged_) Log("server reachable again");
    unreachable_logged_ = false;
    if (auto it = reply.body.find("ack"); it != reply.body.end() && it->is_array()) {
      for (const auto& id : *it) {
        if (!id.is_string()) continue;
        auto t = tasks_.find(id.get<std::string>());
        if (t != tasks_.end() && t->second.status.state == TaskState::kExited) {
          t->second.acked = true;
        }
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
    Log("heartbeat: " + options_.server_url + ": " + reply.error +
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
    auto it = tasks_.find(c.task_id);
    if (it == tasks_.end() || !it->second.process) continue;  // unknown: ignored
    Task& t = it->second;
    if (c.kind == Command::Kind::kProfile) {
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
void Agent::StartTask(const agent::StartTask& spec) {
  if (tasks_.count(spec.task_id) > 0) return;  // a repeated start: idempotent
  Timestamp now = Now();
  Task t;
  t.spec = spec;
  t.status.task_id = spec.task_id;
  t.status.job_id = spec.job_id;
  t.status.attempt = spec.attempt;
  t.status.rank = spec.rank;
  t.status.started = now;
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
  if (failed.ok()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(t.metrics_path).parent_path(), ec);
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
    t.status.finished = now;
    t.status.exit_code = 127;
    t.status.message = failed.message();
    Log("task " + spec.task_id + ": " + failed.message());
  }
  tasks_.emplace(spec.task_id, std::move(t));
  // Report the start (or its failure) at once.
  next_heartbeat_ = Timestamp{};
}

bool Agent::TickTasks() {
  std::lock_guard lock(mu_);
  Timestamp now = Now();
  bool changed = next_heartbeat_ == Timestamp{};
  std::set<int> busy;
  for (auto& [id, t] : tasks_) {
    if (!t.process) continue;
    bool was_running = t.status.state == TaskState::kRunning;
    t.process->Tick(now);
    if (was_running && t.process->exited()) {
      t.status.state = TaskState::kExited;
      t.status.finished = now;
      t.status.exit_code = t.process->exit_code();
      t.status.signal = t.process->term_signal();
      changed = true;
      Log("task " + id + ": exited " +
          (t.status.signal != 0 ? "on signal " + std::to_string(t.status.signal)
                                : "with code " + std::to_string(t.status.exit_code)));
    }
    if (t.status.state == TaskState::kRunning) busy.insert(t.spec.gpus.begin(), t.spec.gpus.end());
  }
  gpus_->SetBusyGpus(busy);
  return changed;
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
      Log(what + ": " + options_.server_url + ": " + reply.error + "; retrying");
      unreachable_logged_ = true;
    }
  };
  for (const Work& w : work) {
    bool nothing_new = true;
    auto chunk = ReadLogChunk(w.log_path, w.log_offset);
    if (chunk.ok() && !chunk->empty()) {
      nothing_new = false;
      int64_t end = w.log_offset + static_cast<int64_t>(chunk->size());
      json body = {{"node", options_.node_name},
                   {"task_id", w.id},
                   {"offset", w.log_offset},
                   {"data_b64", Base64Encode(*chunk)}};
      HttpReply reply = Post(*client_, "/api/v1/agent/logs", body);
      if (reply.status == 0 || reply.status == 404 || reply.status >= 500) {
        fail(reply, "logs");
        return;
      }
      int64_t next = end;  // a 4xx other than 404 would repeat forever: skip the chunk
      if (reply.status == 200) {
        if (auto it = reply.body.find("next_offset");
            it != reply.body.end() && it->is_number_integer()) {
          next = std::clamp<int64_t>(it->get<int64_t>(), 0, end);
        }
      } else {
        Log("logs: task " + w.id + ": " + reply.error + "; skipping " +
            std::to_string(chunk->size()) + " bytes");
      }
      std::lock_guard lock(mu_);
      if (auto t = tasks_.find(w.id); t != tasks_.end()) t->second.log_offset = next;
    }
    auto batch = ReadMetricsLines(w.metrics_path, w.metrics_offset);
    if (batch.ok() && batch->end_offset > w.metrics_offset) {
      nothing_new = false;
      int64_t next = batch->end_offset;
      if (!batch->lines.empty()) {
        // end_offset is not in the protocol: the server cannot work out where a batch of
        // re-serialised lines ended in our file, so we tell it (see docs/agent.md).
        json body = {{"node", options_.node_name},
                     {"task_id", w.id},
                     {"offset", batch->offset},
                     {"end_offset", batch->end_offset},
                     {"lines", batch->lines}};
        HttpReply reply = Post(*client_, "/api/v1/agent/metrics", body);
        if (reply.status == 0 || reply.status == 404 || reply.status >= 500) {
          fail(reply, "metrics");
          return;
        }
        if (reply.status == 200) {
          // The server is behind (it lost lines): resend from where it says.
          if (auto it = reply.body.find("next_offset");
              it != reply.body.end() && it->is_number_integer() &&
              it->get<int64_t>() < batch->offset && it->get<int64_t>() >= 0) {
            next = it->get<int64_t>();
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
    ProfileUpload u{r->id, r->status, "", r->message, 0};
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
    ProfileUpload u;
    {
      std::lock_guard lock(mu_);
      auto t = tasks_.find(task_id);
      if (t == tasks_.end() || t->second.profile_uploads.empty()) return std::nullopt;
      u = t->second.profile_uploads.front();
    }
    json body = {
        {"node", options_.node_name}, {"task_id", task_id}, {"id", u.id}, {"offset", u.offset}};
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
        body["status"] = "failed";
        body["message"] = "the agent cannot read the trace " + u.path + ": " + unreadable;
      } else {
        body["total_bytes"] = size;
        body["data_b64"] = Base64Encode(*chunk);
        ++chunks;
      }
    } else {
      body["status"] = u.status;
      if (u.status == "failed") body["message"] = u.message;
      ++chunks;  // a status is small, but it counts: the loop always ends
    }
    HttpReply reply = Post(*client_, "/api/v1/agent/profile", body);
    if (reply.status == 0 || reply.status >= 500) return reply;
    bool done = true;
    if (reply.status == 200 && body.contains("data_b64")) {
      // A reply of the wrong shape reads as "resend from where we were", never a throw.
      auto text = [&](const char* key) {
        auto it = reply.body.find(key);
        return it != reply.body.end() && it->is_string() ? it->get<std::string>() : "";
      };
      const std::string state = text("state");
      if (state == "stored") {
        Log("task " + task_id + ": profile " + u.id + " uploaded (" + std::to_string(size) +
            " bytes)");
        std::error_code ec;
        std::filesystem::remove(u.path, ec);  // the server has it; traces are large
      } else if (state == "failed") {
        Log("task " + task_id + ": profile " + u.id +
            ": the server refused the trace: " + text("message"));
      } else {
        done = false;
        if (auto next = reply.body.find("next_offset");
            next != reply.body.end() && next->is_number_integer()) {
          u.offset = std::clamp<int64_t>(next->get<int64_t>(), 0, size);
        }
      }
    } else if (reply.status != 200) {
      // 4xx: resending would be refused the same way (the request is unknown, the
      // trace too big, ...).
      Log("task " + task_id + ": profile " + u.id + ": " + reply.error + "; not sent");
    }
    std::lock_guard lock(mu_);
    auto t = tasks_.find(task_id);
    if (t == tasks_.end() || t->second.profile_uploads.empty()) return std::nullopt;
    ProfileUpload& front = t->second.profile_uploads.front();
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
    json body = {{"node", options_.node_name},
                 {"wait_ms", std::chrono::duration_cast<milliseconds>(options_.poll_wait).count()}};
    HttpReply reply = Post(*poll_client_, "/api/v1/agent/poll", body);
    std::unique_lock lock(mu_);
    if (stopping_) break;
    if (reply.status == 200) {
      failures = 0;
      if (auto it = reply.body.find("commands"); it != reply.body.end() && it->is_array()) {
        for (const auto& c : *it) {
          auto command = ParseCommand(c);
          if (!command.ok()) {
            Log("poll: ignoring a command: " + command.status().message());
            continue;
          }
          commands_.push_back(std::move(*command));
        }
        cv_.notify_all();
      }
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
