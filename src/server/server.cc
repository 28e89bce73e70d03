#include "server/server.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include "core/names.h"
#include "http/tls.h"
#include "monitor/rules.h"
#include "server/alerting.h"
#include "server/api.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"
#include "track/series_store.h"

namespace trainyard::server {
namespace {}  // namespace

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.starts_with("127.");
}

Status WriteSecretFile(const std::string& path, const std::string& secret) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Internal("cannot write " + tmp + ": " + std::strerror(errno));
  const std::string line = secret + "\n";
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return Internal("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

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

Result<StoreUrl> ParseStoreUrl(const std::string& text) {
  StoreUrl out;
  if (text.empty()) return out;
  if (text.starts_with("sqlite:")) {
    out.path = text.substr(7);
    if (out.path.empty()) {
      return InvalidArgument(
          "--store: sqlite: needs a file, e.g. sqlite:/var/lib/trainyard/state.db");
    }
    return out;
  }
  if (text.starts_with("postgres://") || text.starts_with("postgresql://")) {
    out.kind = StoreUrl::Kind::kPostgres;
    out.conninfo = text;
    return out;
  }
  // A value with '@' or "password" may carry a secret: say what is wrong without it.
  const bool secret =
      text.find('@') != std::string::npos || text.find("password") != std::string::npos;
  return InvalidArgument(
      "--store: expected sqlite:PATH or postgres://[USER@]HOST[:PORT]/DATABASE, got " +
      (secret ? std::string("a value of another form (not shown: it may hold a password)")
              : QuoteForMessage(text)));
}

Result<std::unique_ptr<store::Store>> OpenStore(const StoreUrl& where,
                                                const std::string& data_dir) {
  if (where.kind == StoreUrl::Kind::kPostgres) return store::PostgresStore::Open(where.conninfo);
  return store::SqliteStore::Open(where.path.empty() ? data_dir + "/state.db" : where.path);
}

Server::Server(ServerOptions options) : opt_(std::move(options)) {}

Server::~Server() { Stop(); }

Status Server::Start() {
  if (opt_.insecure_local && !IsLoopbackHost(opt_.host)) {
    return InvalidArgument(
        "--insecure-local serves without authentication and so only on a "
        "loopback address (127.0.0.1, ::1, localhost); got --listen host " +
        opt_.host);
  }
  // The certificate and key first: a wrong file is reported before anything is opened.
  if (opt_.tls_cert.empty() != opt_.tls_key.empty()) {
    return InvalidArgument(opt_.tls_cert.empty() ? "--tls-key needs --tls-cert as well"
                                                 : "--tls-cert needs --tls-key as well");
  }
  http::ServerOptions hopt;
  hopt.max_threads = static_cast<size_t>(std::max(opt_.http_threads, 1));
  if (opt_.tls_cert.empty()) {
    http_ = std::make_unique<http::Server>(hopt);
  } else {
    TY_ASSIGN_OR_RETURN(http_, http::MakeTlsServer(opt_.tls_cert, opt_.tls_key, hopt));
  }
  http::RaiseOpenFileLimit();  // a connection per agent and client, and a long poll each
  std::error_code ec;
  std::filesystem::create_directories(opt_.data_dir, ec);
  if (ec) return InvalidArgument("--data-dir " + opt_.data_dir + ": " + ec.message());
  token_ = opt_.join_token;
  if (token_.empty()) {
    TY_ASSIGN_OR_RETURN(token_, LoadOrCreateJoinToken(opt_.data_dir));
  }
  TY_ASSIGN_OR_RETURN(StoreUrl where, ParseStoreUrl(opt_.store));
  TY_ASSIGN_OR_RETURN(store_, OpenStore(where, opt_.data_dir));
  if (where.kind == StoreUrl::Kind::kPostgres) {
    TY_ASSIGN_OR_RETURN(lease_store_, OpenStore(where, opt_.data_dir));
    TY_RETURN_IF_ERROR(BecomeLeader());
    // Renewing starts now, before the state is loaded: a load longer than the lease
    // must not cost the leadership just won.
    lease_thread_ = std::thread([this] { KeepLeadership(); });
    fence_thread_ = std::thread([this] { FenceOnLeaseExpiry(); });
  }
  ClusterOptions copt;
  copt.policy = opt_.policy;
  copt.node_timeout = opt_.node_timeout;
  copt.node_lost_grace = opt_.node_lost_grace;
  copt.checkpoint_root = std::filesystem::absolute(opt_.data_dir).string() + "/checkpoints";
  copt.max_unfinished_jobs_per_tenant = opt_.max_unfinished_jobs_per_tenant;
  copt.allowed_dirs = opt_.allowed_dirs;
  TY_ASSIGN_OR_RETURN(cluster_, Cluster::Open(store_.get(), &clock_, copt));
  AccessOptions aopt;
  aopt.insecure_local = opt_.insecure_local;
  aopt.rate_per_second = opt_.rate_per_second;
  aopt.rate_burst = 2 * opt_.rate_per_second;
  TY_ASSIGN_OR_RETURN(access_, AccessControl::Open(store_.get(), &clock_, aopt));
  if (!opt_.insecure_local) {
    TY_ASSIGN_OR_RETURN(std::optional<NewToken> admin, access_->Bootstrap("admin"));
    if (admin)
      TY_RETURN_IF_ERROR(WriteSecretFile(opt_.data_dir + "/" + kAdminTokenFile, admin->text));
  }
  logs_ = std::make_unique<LogStore>(opt_.data_dir);
  profiles_ = std::make_unique<ProfileStore>(opt_.data_dir + "/profiles", &clock_);
  TY_ASSIGN_OR_RETURN(series_, track::SeriesStore::Open(opt_.data_dir + "/series.db"));
  {
    std::string user_rules;
    if (!opt_.alert_rules_file.empty()) {
      std::ifstream in(opt_.alert_rules_file);
      if (!in) return InvalidArgument("--alert-rules: cannot read " + opt_.alert_rules_file);
      std::stringstream text;
      text << in.rdbuf();
      user_rules = text.str();
    }
    auto rules = monitor::LoadRules(
        monitor::DefaultRulesYaml(), user_rules,
        opt_.alert_rules_file.empty() ? "alert-rules.yaml" : opt_.alert_rules_file);
    if (!rules.ok()) return InvalidArgument("--alert-rules: " + rules.status().message());
    AlertingOptions ao;
    ao.rules = std::move(*rules);
    ao.webhooks = opt_.alert_webhooks;
    ao.webhook_ca = opt_.alert_webhook_ca;
    ao.state_path = opt_.data_dir + "/alerts.json";
    // Three missed heartbeats: long before the node timeout gives the node up.
    ao.diagnose.heartbeat_lost = 3 * ClusterOptions{}.heartbeat_interval;
    TY_ASSIGN_OR_RETURN(alerting_, Alerting::Open(cluster_.get(), &clock_, std::move(ao)));
  }
  TY_ASSIGN_OR_RETURN(datasets_, DatasetRegistry::Open(store_.get(), &clock_));
  InstallApi(*http_, *cluster_, *logs_, *access_,
             ApiOptions{token_, series_.get(), profiles_.get(), alerting_.get(), opt_.web_dir,
                        datasets_.get()});
  if (opt_.port == 0) {
    port_ = http_->BindToAnyPort(opt_.host);
    if (port_ <= 0) return Unavailable("cannot bind " + opt_.host + " to any port");
  } else {
    if (!http_->BindToPort(opt_.host, opt_.port)) {
      return Unavailable("cannot listen on " + opt_.host + ":" + std::to_string(opt_.port) +
                         " (in use? try --port 0)");
    }
    port_ = opt_.port;
  }
  alerting_->SetExternalUrl(Url());  // after binding: the port may have been picked
  loop_thread_ = std::thread([this] { Loop(); });
  // Alert rules on a thread of their own: an evaluation that pages through many jobs
  // never delays a scheduling pass.
  alert_thread_ = std::thread([this] { AlertLoop(); });
  http_thread_ = std::thread([this] { http_->Serve(); });
  return Status::Ok();
}

namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status Server::BecomeLeader() {
  auto& pg = static_cast<store::PostgresStore&>(*lease_store_);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  char suffix[9];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  self_id_ = std::string(host) + "/" + std::to_string(::getpid()) + "/" + suffix;

  // The standby answers on the port the leader will serve on (picked now when 0).
  std::unique_ptr<http::Server> standby;
  if (opt_.tls_cert.empty()) {
    standby = std::make_unique<http::Server>();
  } else {
    TY_ASSIGN_OR_RETURN(standby, http::MakeTlsServer(opt_.tls_cert, opt_.tls_key));
  }
  std::mutex mu;
  std::string leader;  // the current leader's URL, as the lease says
  // REQUIRES: mu held. The leader's URL, or null before there is one.
  auto leader_json = [&] {
    return leader.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(leader);
  };
  standby->Get("/api/v1/healthz", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lk(mu);
    nlohmann::ordered_json j = {{"ok", true}, {"role", "standby"}, {"leader", leader_json()}};
    res.set_content(j.dump() + "\n", "application/json");
  });
  auto refuse = [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lk(mu);
    nlohmann::ordered_json j = {
        {"error", "this server is a standby; " +
                      (leader.empty() ? std::string("no leader yet") : "the leader is " + leader)},
        {"standby", true}};
    j["leader"] = leader_json();
    if (!leader.empty()) res.set_header("X-Trainyard-Leader", leader);
    res.set_header("Retry-After", "1");
    res.status = 503;
    res.set_content(j.dump() + "\n", "application/json");
  };
  standby->Get(".*", refuse);
  standby->Post(".*", refuse);
  standby->Put(".*", refuse);
  standby->Patch(".*", refuse);
  standby->Delete(".*", refuse);
  if (opt_.port == 0) {
    port_ = standby->BindToAnyPort(opt_.host);
    if (port_ <= 0) return Unavailable("cannot bind " + opt_.host + " to any port");
  } else {
    if (!standby->BindToPort(opt_.host, opt_.port)) {
      return Unavailable("cannot listen on " + opt_.host + ":" + std::to_string(opt_.port));
    }
    port_ = opt_.port;
  }
  opt_.port = port_;  // the leader's server binds the same port
  leader_url_ = opt_.advertise_url.empty() ? Url() : opt_.advertise_url;
  std::thread serving([&] { standby->Serve(); });
  const Duration ttl = opt_.leader_timeout;
  const auto every = std::min<Duration>(ttl / 4, Duration(1'000));
  std::string said;
  Status result = Status::Ok();
  for (;;) {
    if (stop_requested_) {
      result = Unavailable("stopped while a standby");
      break;
    }
    const int64_t sent_ns = SteadyNs();
    auto lease = pg.ClaimLeadership(self_id_, leader_url_, ttl);
    if (lease.ok() && lease->holder == self_id_) {
      static_cast<store::PostgresStore&>(*store_).SetFencingToken(lease->token);
      lease_deadline_ns_ = sent_ns + std::chrono::nanoseconds(ttl).count();
      std::fprintf(stderr, "trainyard server: leading (lease token %lld, %s)\n",
                   static_cast<long long>(lease->token), pg.Describe().c_str());
      break;
    }
    std::string now = lease.ok() ? "standby at " + leader_url_ + "; the leader is " + lease->url +
                                       " (" + lease->holder + ")"
                                 : "standby: " + lease.status().message();
    if (lease.ok()) {
      std::lock_guard lk(mu);
      leader = lease->url;
    }
    if (now != said) {
      std::fprintf(stderr, "trainyard server: %s\n", now.c_str());
      said = now;
    }
    for (auto slept = Duration(0); slept < every && !stop_requested_; slept += Duration(50)) {
      std::this_thread::sleep_for(Duration(50));
    }
  }
  standby->Stop();
  serving.join();
  return result;
}

void Server::KeepLeadership() {
  auto& pg = static_cast<store::PostgresStore&>(*lease_store_);
  const Duration ttl = opt_.leader_timeout;
  for (;;) {
    {
      std::unique_lock lk(alert_mu_);
      alert_cv_.wait_for(lk, ttl / 4, [this] { return stopping_.load(); });
    }
    if (stopping_) return;
    const int64_t sent_ns = SteadyNs();
    auto lease = pg.ClaimLeadership(self_id_, leader_url_, ttl);
    if (lease.ok() && lease->holder == self_id_) {
      static_cast<store::PostgresStore&>(*store_).SetFencingToken(lease->token);
      lease_deadline_ns_ = sent_ns + std::chrono::nanoseconds(ttl).count();
      continue;
    }
    // Another server leads: stop deciding at once. The store already refuses this
    // server's commits (fencing); exiting ends the scheduling loop and the API with
    // them, and a supervisor restarts it as a standby. A renewal that failed is tried
    // again until FenceOnLeaseExpiry's deadline.
    if (lease.ok()) {
      std::fprintf(stderr, "trainyard server: lost the leadership to %s (%s); exiting\n",
                   lease->url.c_str(), lease->holder.c_str());
      std::_Exit(75);
    }
    std::fprintf(stderr, "trainyard server: renewing the leadership lease: %s\n",
                 lease.status().message().c_str());
  }
}

void Server::FenceOnLeaseExpiry() {
  const auto ttl_ms = static_cast<long long>(opt_.leader_timeout.count());
  std::unique_lock lk(alert_mu_);
  while (
      !alert_cv_.wait_for(lk, std::chrono::milliseconds(20), [this] { return stopping_.load(); })) {
    if (SteadyNs() < lease_deadline_ns_.load()) continue;
    std::fprintf(stderr,
                 "trainyard server: the leadership lease was not renewed within %lld ms (the "
                 "database is unreachable or slow); exiting so that a standby can lead\n",
                 ttl_ms);
    std::_Exit(75);
  }
}

std::string Server::Url() const {
  return (opt_.tls_cert.empty() ? "http://" : "https://") + opt_.host + ":" + std::to_string(port_);
}

Status Server::PruneLogs() {
  const LogRetentionPolicy policy{opt_.log_retention, opt_.log_max_job_bytes};
  if (policy.retention.count() <= 0 && policy.max_job_bytes <= 0) return Status::Ok();
  const std::vector<StoredLogFile> files = logs_->ListFiles();
  if (files.empty()) return Status::Ok();
  const Timestamp now = clock_.Now();
  // End times of the finished jobs whose files may be past the retention. A job ends
  // after its last write, so one with a file written since `now - retention` has not
  // been finished that long; the others are looked up from the lowest id to the
  // highest, a page at a time.
  std::map<JobId, JobLogFacts> jobs;
  std::map<JobId, Timestamp> last_written;
  for (const StoredLogFile& f : files) {
    auto [it, added] = last_written.emplace(f.job, f.modified);
    it->second = std::max(it->second, f.modified);
  }
  std::set<JobId> old;
  for (const auto& [job, written] : last_written) {
    if (policy.retention.count() > 0 && now - written > policy.retention) old.insert(job);
  }
  if (!old.empty()) {
    ListJobsRequest req;
    req.filter.states = {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled};
    req.after_id = *old.begin() - 1;
    req.limit = 1000;
    while (req.after_id < *old.rbegin()) {
      TY_ASSIGN_OR_RETURN(store::JobPage page, cluster_->ListJobs(req));
      for (const Job& j : page.jobs) {
        if (!old.contains(j.id)) continue;
        jobs[j.id] = {j.state_time, j.attempts.empty() ? -1 : j.attempts.back().index};
      }
      if (!page.next_after_id) break;
      req.after_id = *page.next_after_id;
    }
  }
  const LogPrunePlan plan = PlanLogPruning(files, jobs, now, policy);
  if (plan.empty()) return Status::Ok();
  Status s = logs_->Prune(plan);
  for (JobId job : plan.expired_jobs) {
    // Profiles go with the logs of the job they were recorded of.
    if (Status p = profiles_->DeleteJob(job); !p.ok() && s.ok()) s = p;
  }
  std::cerr << "trainyard server: log retention: deleted";
  if (!plan.expired_jobs.empty()) {
    std::cerr << " the logs of " << plan.expired_jobs.size() << " job(s) finished over "
              << FormatDuration(policy.retention) << " ago (--log-retention)";
  }
  if (!plan.files.empty()) {
    std::cerr << (plan.expired_jobs.empty() ? " " : "; ") << plan.files.size()
              << " rank log(s) of earlier attempts of jobs over "
              << FormatMemory(policy.max_job_bytes) << " (--log-max-bytes)";
  }
  std::cerr << "\n";
  return s;
}

void Server::Loop() {
  Timestamp last_tick{};
  Timestamp last_prune{};
  Duration last_pass{0};
  while (!stopping_.load()) {
    cluster_->WaitForWork(std::chrono::milliseconds(500));
    if (stopping_.load()) break;
    if (Status s = cluster_->Tick(); !s.ok()) {
      std::cerr << "trainyard server: " << s.ToString() << "\n";
    }
    const Timestamp now = clock_.Now();
    if (now - last_prune >= opt_.log_prune_interval) {
      last_prune = now;
      if (Status s = PruneLogs(); !s.ok()) {
        std::cerr << "trainyard server: log retention: " << s.ToString() << "\n";
      }
    }
    if (cluster_->NeedsPass() || now - last_tick >= opt_.pass_interval) {
      // Let a burst of events land before the pass; and after a long pass (100,000
      // Pending jobs), wait as long again, so that under a flood of submissions passes
      // take at most about half of a core from the requests that cause them.
      std::this_thread::sleep_for(std::max(opt_.coalesce, last_pass));
      last_tick = now;
      const auto started = std::chrono::steady_clock::now();
      auto stats = cluster_->SchedulePass();
      const auto took = std::chrono::steady_clock::now() - started;
      last_pass = std::chrono::duration_cast<Duration>(took);
      cluster_->ObservePassDuration(std::chrono::duration<double>(took).count());
      if (!stats.ok()) std::cerr << "trainyard server: " << stats.status().ToString() << "\n";
    }
  }
}

void Server::AlertLoop() {
  std::unique_lock lk(alert_mu_);
  while (!alert_cv_.wait_for(lk, opt_.alert_interval, [this] { return stopping_.load(); })) {
    lk.unlock();
    if (Status s = alerting_->Evaluate(); !s.ok()) {
      std::cerr << "trainyard server: alerts: " << s.ToString() << "\n";
    }
    lk.lock();
  }
}

void Server::Stop() {
  if (stopping_.exchange(true)) return;
  {
    std::lock_guard lk(alert_mu_);  // AlertLoop is waiting or evaluating, never between
  }
  alert_cv_.notify_all();
  if (cluster_) cluster_->Shutdown();
  if (logs_) logs_->WakeAll();
  if (http_) http_->Stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  if (http_thread_.joinable()) http_thread_.join();
  if (alert_thread_.joinable()) alert_thread_.join();
  if (fence_thread_.joinable()) fence_thread_.join();
  if (lease_thread_.joinable()) {
    lease_thread_.join();
    // A clean stop hands over at once rather than after the lease runs out.
    auto& pg = static_cast<store::PostgresStore&>(*lease_store_);
    if (Status s = pg.ReleaseLeadership(self_id_); !s.ok()) {
      std::fprintf(stderr, "trainyard server: releasing the leadership: %s\n", s.message().c_str());
    }
  }
  alerting_.reset();  // ends its webhook thread
}

}  // namespace trainyard::server
