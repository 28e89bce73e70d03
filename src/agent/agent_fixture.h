// The test server and fixture of the agent's tests (agent_test.cc, executor_test.cc):
// a FakeServer that speaks the agent protocol, and AgentTest, which runs an Agent
// against it in a temporary directory.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "agent/agent.h"

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;

std::string Base64Decode(const std::string& in) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(kAlphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

// The server side of docs/agent-protocol.md, just enough to drive an agent: records
// what it receives, acknowledges every exit, hands out queued commands. Its state
// survives Stop/Start, like a server restarted on a durable store.
class FakeServer {
 public:
  ~FakeServer() { Stop(); }

  void Start() {
    server_ = std::make_unique<httplib::Server>();
    Install(*server_);
    if (port_ == 0) {
      port_ = server_->bind_to_any_port("127.0.0.1");
    } else {
      ASSERT_TRUE(server_->bind_to_port("127.0.0.1", port_)) << "port " << port_ << " taken";
    }
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
  }
  void Stop() {
    if (!server_) return;
    // A stop before the listening thread got going is lost (and join would wait
    // forever): let it start first.
    for (int i = 0; i < 5'000 && !server_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    server_->stop();
    thread_.join();
    server_.reset();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void Push(json command) {
    std::lock_guard lock(mu_);
    commands_.push_back(std::move(command));
    cv_.notify_all();
  }
  void ForgetNodes(std::vector<std::string> stop_on_register) {
    std::lock_guard lock(mu_);
    known_.clear();
    stop_on_register_ = std::move(stop_on_register);
  }

  // What registrations are told of release_after_ms (0: not said, as an older server).
  void SetReleaseAfter(int64_t ms) {
    std::lock_guard lock(mu_);
    release_after_ms_ = ms;
  }

  // A standby control plane: every agent call gets 503 naming the leader (docs/ha.md);
  // "" makes this server lead again.
  void BeStandby(std::string leader) {
    std::lock_guard lock(mu_);
    standby_for_ = std::move(leader);
  }

  std::vector<json> registers() {
    std::lock_guard lock(mu_);
    return registers_;
  }
  std::vector<json> heartbeats() {
    std::lock_guard lock(mu_);
    return heartbeats_;
  }
  // The latest status the server heard for a task; {} if none.
  json task(const std::string& id) {
    std::lock_guard lock(mu_);
    auto it = tasks_.find(id);
    return it == tasks_.end() ? json::object() : it->second;
  }
  // Every status the server heard for a task, in order.
  std::vector<std::string> states(const std::string& id) {
    std::lock_guard lock(mu_);
    return states_[id];
  }
  std::string log(const std::string& id) {
    std::lock_guard lock(mu_);
    return logs_[id];
  }
  std::vector<json> metrics(const std::string& id) {
    std::lock_guard lock(mu_);
    return metrics_[id];
  }
  // What the agent reported of profile `id` of task `task`.
  struct Profile {
    std::vector<std::string> statuses;  // "recording", "failed", "stored" (last chunk)
    std::string message;
    std::string data;
  };
  Profile profile(const std::string& task, const std::string& id) {
    std::lock_guard lock(mu_);
    return profiles_[task + " " + id];
  }
  size_t profiles() {
    std::lock_guard lock(mu_);
    return profiles_.size();
  }

 private:
  void Reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }
  bool Authorised(const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard lock(mu_);
      if (!standby_for_.empty()) {
        Reply(res, 503,
              {{"error", "this server is a standby"}, {"standby", true}, {"leader", standby_for_}});
        return false;
      }
    }
    if (req.get_header_value("Authorization") == "Bearer sesame") return true;
    Reply(res, 401, {{"error", "bad join token"}});
    return false;
  }
  // REQUIRES: mu_ held.
  bool Known(const json& body, httplib::Response& res) {
    std::string node = body.value("node", "");
    if (known_.count(node)) return true;
    Reply(res, 404, {{"error", "unknown node " + node}});
    return false;
  }
  void Record(const json& tasks) {
    for (const auto& t : tasks) {
      std::string id = t["task_id"];
      tasks_[id] = t;
      auto& s = states_[id];
      if (s.empty() || s.back() != t["state"]) s.push_back(t["state"]);
    }
  }

  void Install(httplib::Server& s) {
    s.Post("/api/v1/agent/register", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorised(req, res)) return;
      json body = json::parse(req.body);
      std::lock_guard lock(mu_);
      registers_.push_back(body);
      known_.insert(body["node"]["name"].get<std::string>());
      Record(body["tasks"]);
      json reply = {{"heartbeat_interval_ms", 100}, {"stop", stop_on_register_}};
      if (release_after_ms_ > 0) reply["release_after_ms"] = release_after_ms_;
      Reply(res, 200, reply);
    });
    s.Post("/api/v1/agent/heartbeat", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorised(req, res)) return;
      json body = json::parse(req.body);
      std::lock_guard lock(mu_);
      if (!Known(body, res)) return;
      heartbeats_.push_back(body);
      Record(body["tasks"]);
      json ack = json::array();
      for (const auto& t : body["tasks"]) {
        if (t["state"] == "exited") ack.push_back(t["task_id"]);
      }
      Reply(res, 200, {{"ack", ack}});
    });
    s.Post("/api/v1/agent/poll", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorised(req, res)) return;
      json body = json::parse(req.body);
      std::unique_lock lock(mu_);
      if (!Known(body, res)) return;
      // Short waits, so that stopping the server never waits long on a handler.
      cv_.wait_for(lock, milliseconds(std::min<int64_t>(body["wait_ms"].get<int64_t>(), 100)),
                   [this] { return !commands_.empty(); });
      json commands = json::array();
      for (auto& c : commands_) commands.push_back(c);
      commands_.clear();
      Reply(res, 200, {{"commands", commands}});
    });
    s.Post("/api/v1/agent/logs", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorised(req, res)) return;
      json body = json::parse(req.body);
      std::lock_guard lock(mu_);
      if (!Known(body, res)) return;
      std::string& log = logs_[body["task_id"]];
      if (body["offset"].get<size_t>() == log.size()) log += Base64Decode(body["data_b64"]);
      Reply(res, 200, {{"next_offset", log.size()}});
    });
    s.Post("/api/v1/agent/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorised(req, res)) return;
      json body = json::parse(req.body);
      std::lock_guard lock(mu_);
      if (!Known(body, res)) return;
      for (const auto& l : body["lines"]) metrics_[body["task_id"]].push_back(l);
      Reply(res, 200, {{"next_offset", body["end_offset"]}});
    });
    s.Post("/api/v1/agent/profile", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorised(req, res)) return;
      json body = json::parse(req.body);
      std::lock_guard lock(mu_);
      Profile& p =
          profiles_[body["task_id"].get<std::string>() + " " + body["id"].get<std::string>()];
      if (body.contains("status")) {
        p.statuses.push_back(body["status"]);
        p.message = body.value("message", "");
        Reply(res, 200, {{"next_offset", 0}, {"state", body["status"]}});
        return;
      }
      const size_t total = body["total_bytes"];
      if (body["offset"].get<size_t>() == p.data.size()) p.data += Base64Decode(body["data_b64"]);
      const bool stored = p.data.size() == total;
      if (stored) p.statuses.push_back("stored");
      Reply(res, 200, {{"next_offset", p.data.size()}, {"state", stored ? "stored" : "recording"}});
    });
  }

  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> known_;
  std::string standby_for_;
  int64_t release_after_ms_ = 0;
  std::vector<std::string> stop_on_register_;
  std::deque<json> commands_;
  std::vector<json> registers_;
  std::vector<json> heartbeats_;
  std::map<std::string, json> tasks_;
  std::map<std::string, std::vector<std::string>> states_;
  std::map<std::string, std::string> logs_;
  std::map<std::string, std::vector<json>> metrics_;
  std::map<std::string, Profile> profiles_;
};

template <typename Pred>
bool WaitUntil(Pred pred, std::chrono::seconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trainyard-agent-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    server_.Start();
  }
  void TearDown() override {
    StopAgent();
    server_.Stop();
    fs::remove_all(dir_);
  }

  AgentOptions Options() {
    AgentOptions o;
    o.server_url = server_.url();
    o.join_token = "sesame";
    o.node_name = "node-1";
    o.data_dir = (dir_ / "data").string();
    o.cpus = 8;
    o.memory_mib = 65536;
    o.labels = {{"zone", "a"}};
    // The host's own cgroups only where a test asks for them (Limits...).
    o.cgroups = Cgroups::Disabled("not in this test");
    o.exec_helper = TRAINYARD_EXEC_HELPER;
    o.heartbeat_interval = milliseconds(100);
    o.poll_wait = milliseconds(300);
    o.max_backoff = milliseconds(200);
    o.stop_grace = std::chrono::seconds(2);
    if (getenv("TRAINYARD_AGENT_TEST_LOG") != nullptr) {
      o.log = [](const std::string& line) { fprintf(stderr, "agent: %s\n", line.c_str()); };
    }
    return o;
  }
  void StartAgent(AgentOptions o) {
    auto gpus = SimulatedGpus::Create(2, "H100", o.node_name, 1);
    ASSERT_TRUE(gpus.ok());
    agent_ = std::make_unique<Agent>(std::move(o), std::move(*gpus));
    thread_ = std::thread([this] { result_ = agent_->Run(); });
  }
  void StopAgent() {
    if (!agent_) return;
    agent_->Shutdown();
    if (thread_.joinable()) thread_.join();
  }

  // A task that prints, writes metrics, then waits for a file named `go` in its workdir.
  // `id` is "<job>.<attempt>.<rank>", and the start says those numbers, as a server's does.
  json StartCommand(const std::string& id, int exit_code = 7) {
    const size_t a = id.find('.'), b = id.rfind('.');
    std::string script =
        "echo hello; echo \"gpus=$CUDA_VISIBLE_DEVICES\"; "
        "printf '{\"step\":1}\\nnot json\\n{\"step\":2}\\n{\"step\":' >> "
        "\"$TRAINYARD_METRICS_FILE\"; "
        "while [ ! -e go ]; do sleep 0.01; done; exit " +
        std::to_string(exit_code);
    return {{"kind", "start"},
            {"task",
             {{"task_id", id},
              {"job_id", std::stoll(id.substr(0, a))},
              {"attempt", std::stoi(id.substr(a + 1, b - a - 1))},
              {"rank", std::stoi(id.substr(b + 1))},
              {"argv", {"/bin/sh", "-c", script}},
              {"env", {{"RANK", "0"}}},
              {"workdir", dir_.string()},
              {"gpus", {1}}}}};
  }
  void Go() { std::ofstream(dir_ / "go") << ""; }
  // The agent's clock: the wall clock, moved on by Advance() (for fault ends and
  // health-check intervals, so that no test waits for them).
  std::function<Timestamp()> Clock() {
    return [this] {
      return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()) +
             Duration(offset_ms_.load());
    };
  }
  void Advance(Duration d) { offset_ms_ += d.count(); }
  int64_t NowMs() { return ToMs(Clock()()); }
  // An executable shell script in the test's directory.
  std::string Script(const std::string& name, const std::string& body) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(path, fs::perms::owner_all);
    return path;
  }
  static std::string ReadFile(const fs::path& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  json FaultFile(const std::string& task_id) {
    std::ifstream in(dir_ / "data" / "faults" / (task_id + ".json"));
    return json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  // The latest heartbeat, {} before the first.
  json LastBeat() {
    auto hb = server_.heartbeats();
    return hb.empty() ? json::object() : hb.back();
  }
  bool Known(const std::string& id) {
    for (const auto& t : agent_->Tasks()) {
      if (t.task_id == id) return true;
    }
    return false;
  }

  fs::path dir_;
  FakeServer server_;
  std::unique_ptr<Agent> agent_;
  std::thread thread_;
  Status result_;
  std::atomic<int64_t> offset_ms_{0};
};

}  // namespace
}  // namespace trainyard::agent
