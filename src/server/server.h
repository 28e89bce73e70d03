// Server: the `trainyard server` process in one object — a SQLite store in the data
// directory, the Cluster state machine, the HTTP API, and the scheduling loop thread
// (a pass after every burst of events, coalesced, and at least every few seconds;
// node timeouts checked every 500 ms; old logs, and the profiles of their jobs, pruned
// at most once a minute).
//
// Thread-safety: Start and Stop from one thread; everything else runs on the HTTP
// worker threads and the loop thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "sched/policy.h"
#include "server/access.h"
#include "server/alerting.h"
#include "server/clock.h"
#include "server/cluster.h"
#include "server/datasets.h"
#include "server/logs.h"
#include "server/profiles.h"
#include "store/store.h"

namespace trainyard::http {
class Server;
}

namespace trainyard::track {
class SeriesStore;
}

namespace trainyard::server {

struct ServerOptions {
  std::string data_dir;
  std::string host = "127.0.0.1";
  int port = 8470;         // 0: any free port
  std::string join_token;  // empty: read <data_dir>/join-token, or generate it there (0600)
  // No authentication: every caller is the cluster admin "local". Only on a loopback
  // address (Start refuses any other host).
  bool insecure_local = false;
  // Per-token request rate (see AccessOptions); 0: unlimited.
  double rate_per_second = 200;
  int64_t max_unfinished_jobs_per_tenant = 1'000'000;
  // HTTPS with this PEM certificate chain and key (docs/tls.md); both empty: plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  // Directories every path a job spec names must lie in (ClusterOptions::allowed_dirs);
  // empty: anywhere.
  std::vector<std::string> allowed_dirs;
  sched::Policy policy;
  Duration node_timeout{15'000};
  Duration node_lost_grace{120'000};  // ClusterOptions::node_lost_grace
  Duration pass_interval{2'000};      // a pass at least this often
  Duration coalesce{20};              // wait this long after an event for more
  // Requests handled at once (http/server.h: idle connections hold no thread; a
  // request holds one while handled, and an agent's long poll while it waits).
  int http_threads = 4096;
  // Log retention (LogRetentionPolicy): the logs and metrics-line copies of jobs
  // finished longer ago than `log_retention` are deleted (0: kept forever), and a job's
  // rank logs over `log_max_job_bytes` lose their oldest attempts first (0: no cap).
  Duration log_retention{int64_t{30} * 86'400'000};
  int64_t log_max_job_bytes = 0;
  Duration log_prune_interval{60'000};  // at most this often
  // Alerting (docs/alerts.md): a rules file merged over the defaults (empty: the
  // defaults alone), webhook URLs that get Alertmanager-format notifications, and how
  // often the rules are evaluated.
  std::string alert_rules_file;
  std::vector<std::string> alert_webhooks;
  std::string alert_webhook_ca;
  Duration alert_interval{1'000};
  // The dashboard's files from this directory, read on every request, instead of the
  // copy built into the binary (ApiOptions::web_dir); empty: the built-in copy.
  std::string web_dir;
  // Where the control plane's state lives (docs/ha.md): empty for SQLite at
  // DATA_DIR/state.db, "sqlite:PATH", or a PostgreSQL database ("postgres://..." or
  // "postgresql://..." URI, as libpq reads it). Checked by ParseStoreUrl.
  std::string store;
  // With a PostgreSQL store (docs/ha.md): servers sharing the database elect one leader
  // through a lease of this length; the others are standbys that answer 503 naming the
  // leader, and take over once its lease lapses. A leader that cannot renew within it
  // stops at once (its commits are fenced off before that).
  Duration leader_timeout{10'000};
  // The URL standbys send clients to while this server leads; empty: Url().
  std::string advertise_url;
};

// What --store names: "" / "sqlite:PATH" (SQLite; `path` empty for DATA_DIR/state.db)
// or a PostgreSQL URI (postgres:// or postgresql://). InvalidArgument naming the value
// and the forms that are valid otherwise.
struct StoreUrl {
  enum class Kind { kSqlite, kPostgres } kind = Kind::kSqlite;
  std::string path;      // kSqlite
  std::string conninfo;  // kPostgres: the URI as given
};
Result<StoreUrl> ParseStoreUrl(const std::string& text);
// Opens the store `where` names; a SQLite store without a path is DATA_DIR/state.db
// under `data_dir`.
Result<std::unique_ptr<store::Store>> OpenStore(const StoreUrl& where, const std::string& data_dir);

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Opens the store, rebuilds the state, binds the port and starts serving.
  Status Start();
  // The URL it serves on ("http://127.0.0.1:8470", "https://..." with TLS); valid after
  // Start.
  std::string Url() const;
  const std::string& join_token() const { return token_; }
  void Stop();
  // Asks a Start that waits as a standby (a PostgreSQL store) to give up; safe from any
  // thread, at any time. Stop is still called after Start returns.
  void RequestStop() { stop_requested_ = true; }

 private:
  // Serves as a standby (503 naming the leader, on the port this server will use) until
  // this server holds the leadership lease, then sets the store's fencing token.
  Status BecomeLeader();
  // Renews the lease every leader_timeout / 4 (on a connection of its own, so that a
  // long load or commit never delays it); exits the process at once when another server
  // holds it.
  void KeepLeadership();
  // Exits the process the moment the lease this server last renewed may have run out,
  // counted from before the renewal was sent, so never later than the database's own
  // expiry: a leader cut off from PostgreSQL (whose calls hang rather than fail) stops
  // deciding before a standby can take over.
  void FenceOnLeaseExpiry();
  void Loop();
  void AlertLoop();
  // Deletes the logs that the retention options say to (PlanLogPruning).
  Status PruneLogs();

  ServerOptions opt_;
  std::string token_;
  int port_ = 0;
  SystemClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<AccessControl> access_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<ProfileStore> profiles_;
  std::unique_ptr<track::SeriesStore> series_;
  std::unique_ptr<Alerting> alerting_;
  std::unique_ptr<DatasetRegistry> datasets_;
  std::unique_ptr<http::Server> http_;
  std::thread http_thread_;
  std::thread loop_thread_;
  std::thread alert_thread_;
  std::mutex alert_mu_;
  std::condition_variable alert_cv_;  // wakes AlertLoop at Stop
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stop_requested_{false};
  // Leadership, with a PostgreSQL store (BecomeLeader, KeepLeadership).
  std::string self_id_;                        // this process, in the lease: host/pid/random
  std::string leader_url_;                     // what this server advertises while it leads
  std::unique_ptr<store::Store> lease_store_;  // its own connection, for the lease only
  // steady_clock nanoseconds after which this server's lease may have lapsed.
  std::atomic<int64_t> lease_deadline_ns_{0};
  std::thread lease_thread_;
  std::thread fence_thread_;
};

// On a store without users: creates the cluster admin "admin" and writes its token to
// <data_dir>/token (mode 0600), where the CLI finds it. Nothing when users exist.
inline constexpr const char* kAdminTokenFile = "token";

bool IsLoopbackHost(std::string_view host);
// Writes `secret` and a newline to `path` with mode 0600 (through a temporary file).
Status WriteSecretFile(const std::string& path, const std::string& secret);

// Reads <data_dir>/join-token, or writes a new random one there with mode 0600.
Result<std::string> LoadOrCreateJoinToken(const std::string& data_dir);

}  // namespace trainyard::server
