#include "server/server.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "server/api.h"
#include "store/sqlite_store.h"

namespace trainyard::server {

Result<std::string> LoadOrCreateJoinToken(const std::string& data_dir) {
  const std::string path = data_dir + "/join-token";
  if (std::ifstream in(path); in) {
    std::string token;
    std::getline(in, token);
    if (!token.empty()) return token;
  }
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 32; ++i) token.push_back(kHex[rd() % 16]);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Internal("cannot write " + path + ": " + std::strerror(errno));
  const std::string line = token + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!ok) return Internal("cannot write " + path + ": " + std::strerror(errno));
  return token;
}

Server::Server(ServerOptions options) : opt_(std::move(options)) {}

Server::~Server() { Stop(); }

Status Server::Start() {
  std::error_code ec;
  std::filesystem::create_directories(opt_.data_dir, ec);
  if (ec) return InvalidArgument("--data-dir " + opt_.data_dir + ": " + ec.message());
  token_ = opt_.join_token;
  if (token_.empty()) {
    TY_ASSIGN_OR_RETURN(token_, LoadOrCreateJoinToken(opt_.data_dir));
  }
  TY_ASSIGN_OR_RETURN(store_, store::SqliteStore::Open(opt_.data_dir + "/state.db"));
  ClusterOptions copt;
  copt.policy = opt_.policy;
  copt.node_timeout = opt_.node_timeout;
  copt.checkpoint_root = std::filesystem::absolute(opt_.data_dir).string() + "/checkpoints";
  TY_ASSIGN_OR_RETURN(cluster_, Cluster::Open(store_.get(), &clock_, copt));
  logs_ = std::make_unique<LogStore>(opt_.data_dir);
  http_ = std::make_unique<httplib::Server>();
  const int threads = opt_.http_threads;
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  http_->set_keep_alive_max_count(100'000);
  http_->set_read_timeout(60, 0);
  http_->set_write_timeout(60, 0);
  InstallApi(*http_, *cluster_, *logs_, ApiOptions{token_});
  if (opt_.port == 0) {
    port_ = http_->bind_to_any_port(opt_.host);
    if (port_ <= 0) return Unavailable("cannot bind " + opt_.host + " to any port");
  } else {
    if (!http_->bind_to_port(opt_.host, opt_.port)) {
      return Unavailable("cannot listen on " + opt_.host + ":" + std::to_string(opt_.port) +
                         " (in use? try --port 0)");
    }
    port_ = opt_.port;
  }
  loop_thread_ = std::thread([this] { Loop(); });
  http_thread_ = std::thread([this] { http_->listen_after_bind(); });
  return Status::Ok();
}

std::string Server::Url() const { return "http://" + opt_.host + ":" + std::to_string(port_); }

void Server::Loop() {
  Timestamp last_tick{};
  while (!stopping_.load()) {
    cluster_->WaitForWork(std::chrono::milliseconds(500));
    if (stopping_.load()) break;
    if (Status s = cluster_->Tick(); !s.ok()) {
      std::cerr << "trainyard server: " << s.ToString() << "\n";
    }
    const Timestamp now = clock_.Now();
    if (cluster_->NeedsPass() || now - last_tick >= opt_.pass_interval) {
      // Let a burst of events land before the pass.
      std::this_thread::sleep_for(opt_.coalesce);
      last_tick = now;
      auto stats = cluster_->SchedulePass();
      if (!stats.ok()) std::cerr << "trainyard server: " << stats.status().ToString() << "\n";
    }
  }
}

void Server::Stop() {
  if (stopping_.exchange(true)) return;
  if (cluster_) cluster_->Shutdown();
  if (logs_) logs_->WakeAll();
  if (http_) http_->stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  if (http_thread_.joinable()) http_thread_.join();
}

}  // namespace trainyard::server
