#include "cli/server_cmd.h"

#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/app.h"
#include "core/memory.h"
#include "core/names.h"
#include "core/spec_paths.h"
#include "http/tls.h"
#include "server/server.h"

namespace trainyard::cli {
namespace {

struct ServerFlags {
  std::string data_dir;
  std::string listen;  // HOST:PORT
  int port = -1;       // overrides the port of --listen
  std::string join_token;
  std::string policy;  // KEY=VALUE,...
  std::string node_timeout = "15s";
  std::string node_lost_grace = "2m";  // NotReady this long: its gangs are requeued
  std::string leader_timeout = "10s";  // the leadership lease, with a PostgreSQL store
  std::string advertise_url;           // what standbys send clients to; empty: our URL
  std::string allowed_dirs;            // DIR[,DIR...]; empty: anywhere
  std::string tls_cert;                // with tls_key: serve HTTPS (docs/tls.md)
  std::string tls_key;
  bool insecure_local = false;  // no authentication; loopback only
  double rate_limit = 200;      // requests/s per API token; 0: none
  int64_t max_unfinished_jobs_per_tenant = 1'000'000;
  std::string log_retention = "30d";  // 0: forever
  std::string log_max_bytes = "0";    // per job; 0: no cap
  std::string alert_rules;            // rules file over the defaults (docs/alerts.md)
  std::vector<std::string> alert_webhooks;
  std::string alert_webhook_ca;
  std::string alert_interval = "1s";
  std::string web_dir;  // the dashboard from here, read per request; empty: built in
  std::string store;    // sqlite:PATH or postgres://...; empty: DATA_DIR/state.db
};

Status ParsePolicy(const std::string& text, sched::Policy& p) {
  if (text.empty()) return Status::Ok();
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = item.find('=');
    std::string key = eq == std::string::npos ? "ordering" : item.substr(0, eq);
    std::string value = eq == std::string::npos ? item : item.substr(eq + 1);
    if (key == "ordering") {
      p.ordering = value;
    } else if (key == "placement") {
      p.placement = value;
    } else if (key == "preemption") {
      p.preemption = value;
    } else if (key == "backfill") {
      if (value != "true" && value != "false") {
        return InvalidArgument("--policy backfill: expected true or false, got " +
                               QuoteForMessage(value));
      }
      p.backfill = value == "true";
    } else if (key == "min_runtime" || key == "restart_cost") {
      TY_ASSIGN_OR_RETURN(Duration d, ParseDuration(value));
      (key == "min_runtime" ? p.min_runtime : p.restart_cost) = d;
    } else {
      return InvalidArgument("--policy: unknown key " + QuoteForMessage(key) +
                             "; valid: ordering, placement, preemption, backfill, min_runtime, "
                             "restart_cost");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return sched::ValidatePolicy(p);
}

Result<server::ServerOptions> MakeServerOptions(const ServerFlags& f, int default_port) {
  server::ServerOptions o;
  o.data_dir = f.data_dir.empty() ? DefaultDataDir() : f.data_dir;
  o.port = default_port;
  if (!f.listen.empty()) {
    size_t colon = f.listen.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgument("--listen: expected HOST:PORT, got " + QuoteForMessage(f.listen));
    }
    o.host = f.listen.substr(0, colon);
    try {
      o.port = std::stoi(f.listen.substr(colon + 1));
    } catch (...) {
      return InvalidArgument("--listen: bad port in " + QuoteForMessage(f.listen));
    }
  }
  if (f.port >= 0) o.port = f.port;
  if (o.port < 0 || o.port > 65535) {
    return InvalidArgument("--port: expected 0..65535, got " + std::to_string(o.port));
  }
  o.join_token = f.join_token;
  o.insecure_local = f.insecure_local;
  if (f.insecure_local && !server::IsLoopbackHost(o.host)) {
    return InvalidArgument(
        "--insecure-local: serves without authentication, so only on a loopback "
        "address (127.0.0.1, ::1); got --listen host " +
        QuoteForMessage(o.host));
  }
  if (!(f.rate_limit >= 0 && f.rate_limit <= 1e6)) {
    return InvalidArgument("--rate-limit: expected 0 (none) to 1000000 requests/s, got " +
                           std::to_string(f.rate_limit));
  }
  o.rate_per_second = f.rate_limit;
  if (f.max_unfinished_jobs_per_tenant < 1) {
    return InvalidArgument("--max-jobs-per-tenant: expected at least 1, got " +
                           std::to_string(f.max_unfinished_jobs_per_tenant));
  }
  o.max_unfinished_jobs_per_tenant = f.max_unfinished_jobs_per_tenant;
  {
    auto lt = ParseDuration(f.leader_timeout);
    if (!lt.ok() || lt->count() < 500 || lt->count() > 600'000) {
      return InvalidArgument("--leader-timeout: expected a duration from 500ms to 10m, got " +
                             QuoteForMessage(f.leader_timeout));
    }
    o.leader_timeout = *lt;
  }
  if (!f.advertise_url.empty() && f.advertise_url.rfind("http://", 0) != 0 &&
      f.advertise_url.rfind("https://", 0) != 0) {
    return InvalidArgument("--advertise-url: expected http://HOST:PORT or https://HOST:PORT, got " +
                           QuoteForMessage(f.advertise_url));
  }
  o.advertise_url = f.advertise_url;
  TY_ASSIGN_OR_RETURN(o.node_timeout, ParseDuration(f.node_timeout));
  if (o.node_timeout.count() < 1000) {
    return InvalidArgument("--node-timeout: at least 1s, got " + f.node_timeout);
  }
  auto grace = ParseDuration(f.node_lost_grace);
  if (!grace.ok() || grace->count() < 0 || grace->count() > 7LL * 24 * 3600 * 1000) {
    return InvalidArgument(
        "--node-lost-grace: expected a duration from 0s (give a silent node's jobs up at "
        "once) to 7d, such as 2m, got " +
        QuoteForMessage(f.node_lost_grace));
  }
  o.node_lost_grace = *grace;
  auto retention = ParseDuration(f.log_retention);
  if (!retention.ok() || retention->count() < 0) {
    return InvalidArgument(
        "--log-retention: expected a duration such as 30d, 12h or 0 (keep "
        "forever), got " +
        QuoteForMessage(f.log_retention));
  }
  o.log_retention = *retention;
  auto max_bytes = ParseMemory(f.log_max_bytes);
  if (!max_bytes.ok() || *max_bytes < 0) {
    return InvalidArgument(
        "--log-max-bytes: expected a size such as 10Gi, 500Mi or 0 (no cap), "
        "got " +
        QuoteForMessage(f.log_max_bytes));
  }
  o.log_max_job_bytes = *max_bytes;
  if (!f.alert_rules.empty()) {
    o.alert_rules_file = std::filesystem::absolute(f.alert_rules).lexically_normal().string();
  }
  for (const std::string& url : f.alert_webhooks) {
    if (!url.starts_with("http://") && !url.starts_with("https://")) {
      return InvalidArgument("--alert-webhook: expected an http:// or https:// URL, got " +
                             QuoteForMessage(url));
    }
  }
  o.alert_webhooks = f.alert_webhooks;
  o.alert_webhook_ca = f.alert_webhook_ca;
  auto interval = ParseDuration(f.alert_interval);
  if (!interval.ok() || interval->count() < 100 || *interval > std::chrono::minutes(10)) {
    return InvalidArgument("--alert-interval: expected a duration from 100ms to 10m, got " +
                           QuoteForMessage(f.alert_interval));
  }
  o.alert_interval = *interval;
  if (!f.web_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(f.web_dir, ec)) {
      return InvalidArgument("--web-dir: " + QuoteForMessage(f.web_dir) +
                             " is not a directory; pass the front end's sources (web/src)");
    }
    o.web_dir = std::filesystem::absolute(f.web_dir).lexically_normal().string();
  }
  TY_RETURN_IF_ERROR(server::ParseStoreUrl(f.store).status());
  o.store = f.store;
  TY_RETURN_IF_ERROR(ParsePolicy(f.policy, o.policy));
  TY_ASSIGN_OR_RETURN(o.allowed_dirs, ParseAllowedDirs("--allowed-dirs", f.allowed_dirs));
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return InvalidArgument(f.tls_cert.empty()
                               ? "--tls-key: needs --tls-cert too (the certificate it belongs to)"
                               : "--tls-cert: needs --tls-key too (the certificate's private key)");
  }
  if (!f.tls_cert.empty()) {
    o.tls_cert = std::filesystem::absolute(f.tls_cert).lexically_normal().string();
    o.tls_key = std::filesystem::absolute(f.tls_key).lexically_normal().string();
  }
  return o;
}

void AddServerFlags(CLI::App* cmd, ServerFlags& f) {
  cmd->add_option("--data-dir", f.data_dir,
                  "State, logs and join token live here (default: " + DefaultDataDir() + ")");
  cmd->add_option("--listen", f.listen, "HOST:PORT to serve on (default 127.0.0.1:8470)");
  cmd->add_option("--port", f.port, "Port to serve on; 0 picks a free one and prints the URL");
  cmd->add_option("--join-token", f.join_token,
                  "Token agents must present (default: DATA_DIR/join-token, generated)");
  cmd->add_option("--policy", f.policy,
                  "Scheduling policy: ordering=priority|fifo|las,placement=topology|best-fit|"
                  "first-fit,preemption=lost-work|none,backfill=true|false");
  cmd->add_option("--node-timeout", f.node_timeout,
                  "A node without heartbeat this long is NotReady")
      ->capture_default_str();
  cmd->add_option("--node-lost-grace", f.node_lost_grace,
                  "How long jobs on a NotReady node keep running before they are given up "
                  "and requeued; agents out of contact stop their tasks before then "
                  "(docs/ha.md)")
      ->capture_default_str();
  cmd->add_option("--allowed-dirs", f.allowed_dirs,
                  "DIR[,DIR...]: every path a job names (working_dir, checkpoint.dir, output, "
                  "error) must lie in one of these (default: anywhere; \"..\" is always "
                  "refused)");
  cmd->add_flag("--insecure-local", f.insecure_local,
                "Serve without authentication (every caller is a cluster-admin); refused unless "
                "--listen is a loopback address. Default: API tokens; the first start writes an "
                "admin token to DATA_DIR/token (mode 0600)");
  cmd->add_option("--rate-limit", f.rate_limit,
                  "Requests per second per API token (bursts of twice that); 0: no limit")
      ->capture_default_str();
  cmd->add_option("--max-jobs-per-tenant", f.max_unfinished_jobs_per_tenant,
                  "Unfinished (pending or running) jobs a tenant may have at once")
      ->capture_default_str();
  cmd->add_option("--log-retention", f.log_retention,
                  "Delete the logs (and metrics-line copies) of jobs finished longer ago than "
                  "this; 0 keeps them forever")
      ->capture_default_str();
  cmd->add_option("--log-max-bytes", f.log_max_bytes,
                  "Rank logs one job may keep (e.g. 10Gi); over it, its oldest attempts' logs are "
                  "deleted first, never the current attempt's; 0: no cap")
      ->capture_default_str();
  cmd->add_option("--tls-cert", f.tls_cert,
                  "Serve HTTPS with this PEM certificate (chain); needs --tls-key (docs/tls.md)");
  cmd->add_option("--tls-key", f.tls_key, "PEM private key of --tls-cert (unencrypted)");
  cmd->add_option("--alert-rules", f.alert_rules,
                  "Alert rules file (YAML) merged over the built-in rules (docs/alerts.md)");
  cmd->add_option("--alert-webhook", f.alert_webhooks,
                  "POST firing and resolved alerts to this URL in Alertmanager's webhook format "
                  "(repeatable)");
  cmd->add_option("--alert-webhook-ca", f.alert_webhook_ca,
                  "PEM CA certificates for https webhooks (default: the system's)");
  cmd->add_option("--alert-interval", f.alert_interval, "How often the alert rules are evaluated")
      ->capture_default_str();
  cmd->add_option("--store", f.store,
                  "Where the state lives: sqlite:PATH (default DATA_DIR/state.db) or a "
                  "PostgreSQL database, postgres://[USER@]HOST[:PORT]/DATABASE (libpq's URI; "
                  "the password from ~/.pgpass or PGPASSWORD; docs/ha.md)");
  cmd->add_option("--leader-timeout", f.leader_timeout,
                  "With a PostgreSQL --store: the leadership lease; a standby takes over this "
                  "long after the leader stops renewing it (docs/ha.md)")
      ->capture_default_str();
  cmd->add_option("--advertise-url", f.advertise_url,
                  "With a PostgreSQL --store: the URL standbys send clients to while this server "
                  "leads (default: the URL it listens on)");
  cmd->add_option("--web-dir", f.web_dir,
                  "Serve the dashboard from DIR (e.g. web/src; uPlot from DIR/../node_modules), "
                  "read on every request, instead of the copy built into the binary: for "
                  "working on the front end");
}

// The dashboard's address; with `token`, one that signs the browser in: the page keeps
// the token from the fragment (never sent to the server) and removes it from the
// address bar.
std::string DashboardUrl(const std::string& server_url, const std::string& token = "") {
  return server_url + "/" + (token.empty() ? "" : "#token=" + token);
}

// Blocks SIGINT and SIGTERM in this thread (and so in the threads it starts) and
// returns the set, for sigwait.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

Status WriteUrl(const std::string& data_dir, const std::string& url) {
  const std::string tmp = data_dir + "/server.url.tmp";
  {
    std::ofstream out(tmp);
    out << url << "\n";
    if (!out) return Internal("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, data_dir + "/server.url", ec);
  if (ec) return Internal("cannot write " + data_dir + "/server.url: " + ec.message());
  return Status::Ok();
}

int RunServer(const ServerFlags& f, std::ostream& out, std::ostream& err) {
  auto opts = MakeServerOptions(f, 8470);
  if (!opts.ok()) {
    err << "trainyard server: " << opts.status().message() << "\n";
    return kExitUsage;
  }
  sigset_t signals = BlockStopSignals();
  KeepFreedMemoryForReuse();  // scheduling passes allocate and free tens of MB each
  server::Server srv(*opts);
  // Signals are awaited from the start: with a PostgreSQL store Start may wait, a
  // standby, for as long as another server leads.
  std::atomic<int> sig{0};
  std::atomic<bool> start_failed{false};
  std::thread watcher([&] {
    int s = 0;
    sigwait(&signals, &s);
    if (start_failed) return;
    sig = s;
    srv.RequestStop();
  });
  if (Status s = srv.Start(); !s.ok()) {
    const bool by_signal = sig != 0;
    if (!by_signal) {
      start_failed = true;
      pthread_kill(watcher.native_handle(), SIGTERM);  // ends its wait
    }
    watcher.join();
    if (by_signal) {
      out << "trainyard server: stopping (signal " << sig << ")\n" << std::flush;
      srv.Stop();
      return kExitOk;
    }
    err << "trainyard server: " << s.message() << "\n";
    return kExitFailure;
  }
  if (Status s = WriteUrl(opts->data_dir, srv.Url()); !s.ok()) {
    err << "trainyard server: " << s.message() << "\n";
  }
  out << "trainyard server listening on " << srv.Url() << "\n"
      << "  dashboard: " << DashboardUrl(srv.Url()) << "\n"
      << "data dir: " << opts->data_dir << "; agents join with --join-token from " << opts->data_dir
      << "/join-token\n"
      << (opts->insecure_local ? "authentication: none (--insecure-local)\n"
          : std::filesystem::exists(opts->data_dir + "/" + server::kAdminTokenFile)
              ? "API tokens required; the first start wrote an admin token to " + opts->data_dir +
                    "/" + server::kAdminTokenFile + "\n"
              : std::string("API tokens required (the store had users already, so no admin "
                            "token was written here; use one of theirs)\n"))
      << std::flush;
  watcher.join();  // until a signal
  out << "trainyard server: stopping (signal " << sig << ")\n" << std::flush;
  srv.Stop();
  return kExitOk;
}

struct UpFlags {
  ServerFlags server;
  int nodes = 4;
  int gpus_per_node = 8;
  std::string gpu_type = "H100";
  bool demo = false;
};

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: default signal mask, output to its log, exec.
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  FILE* log = std::fopen(log_path.c_str(), "a");
  if (log != nullptr) {
    dup2(fileno(log), 1);
    dup2(fileno(log), 2);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  std::perror("execv");
  _exit(127);
}

// `--demo` submits the example jobs when `trainyard up` runs at the root of a checkout
// (its agents start there too, so the examples' relative paths resolve), else kDemoJobs.
constexpr const char* kDemoExamples[] = {"examples/trainer/job.yaml", "examples/ddp/job.yaml"};

constexpr const char* kDemoJobs[] = {
    "name: demo-hello\nreplicas: 2\nresources: {gpus: 1}\n"
    "command: [\"/bin/sh\", \"-c\", \"echo rank $RANK of $WORLD_SIZE on GPUs "
    "$CUDA_VISIBLE_DEVICES; sleep 5\"]\n",
    "name: demo-sleep\npriority: best-effort\nresources: {gpus: 4}\n"
    "command: [\"/bin/sleep\", \"60\"]\n",
};

int RunUp(const UpFlags& f, std::ostream& out, std::ostream& err) {
  if (f.nodes < 1 || f.nodes > 256) {
    err << "trainyard up: --nodes: expected 1..256, got " << f.nodes << "\n";
    return kExitUsage;
  }
  if (f.gpus_per_node < 0 || f.gpus_per_node > 64) {
    err << "trainyard up: --gpus-per-node: expected 0..64, got " << f.gpus_per_node << "\n";
    return kExitUsage;
  }
  auto opts = MakeServerOptions(f.server, 8470);
  if (!opts.ok()) {
    err << "trainyard up: " << opts.status().message() << "\n";
    return kExitUsage;
  }
  const std::string dir = std::filesystem::absolute(opts->data_dir).string();
  opts->data_dir = dir;
  sigset_t signals = BlockStopSignals();
  server::Server srv(*opts);
  if (Status s = srv.Start(); !s.ok()) {
    err << "trainyard up: " << s.message() << "\n";
    return kExitFailure;
  }
  if (Status s = WriteUrl(dir, srv.Url()); !s.ok()) err << "trainyard up: " << s.message() << "\n";
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::vector<pid_t> agents;
  for (int i = 0; i < f.nodes; ++i) {
    const std::string name = "node-" + std::to_string(i);
    const std::string agent_dir = dir + "/agents/" + name;
    std::filesystem::create_directories(agent_dir, ec);
    std::vector<std::string> argv = {
        self, "agent", "--server", srv.Url(), "--join-token", srv.join_token(), "--name", name,
        "--data-dir", agent_dir, "--simulated-gpus", std::to_string(f.gpus_per_node), "--gpu-type",
        f.gpu_type,
        // A local cluster is its user's own: ranks run as that user, as their shell's
        // commands do (a shared cluster's agents run them as nobody, or each tenant's).
        "--unmapped-run-as", "agent"};
    // The agents trust the server's own certificate (docs/tls.md).
    if (!opts->tls_cert.empty()) argv.insert(argv.end(), {"--ca-cert", opts->tls_cert});
    agents.push_back(Spawn(argv, agent_dir + "/agent.log"));
  }
  // The admin token, for the dashboard link and the demo jobs (none with
  // --insecure-local).
  std::string admin_token;
  if (!opts->insecure_local) {
    if (std::ifstream in(dir + "/" + server::kAdminTokenFile); in) std::getline(in, admin_token);
  }
  out << "Trainyard local cluster: " << f.nodes << " node(s) x " << f.gpus_per_node << " "
      << f.gpu_type << " (simulated)\n"
      << "  dashboard: " << DashboardUrl(srv.Url(), admin_token) << "\n"
      << "  API:       " << srv.Url() << "/api/v1  (URL written to " << dir << "/server.url)\n"
      << "  data dir:  " << dir << " (agent logs in agents/NODE/agent.log)\n"
      << (opts->insecure_local
              ? "  auth:      none (--insecure-local; loopback only)\n"
              : "  auth:      admin API token in " + dir + "/" + server::kAdminTokenFile +
                    " (mode 0600; the CLI reads it from there)\n")
      << "Try:\n"
      << "  export TRAINYARD_SERVER=" << srv.Url() << "\n"
      << (opts->tls_cert.empty() ? "" : "  export TRAINYARD_CA_CERT=" + opts->tls_cert + "\n")
      << "  trainyard nodes\n"
      << "  trainyard submit examples/trainer/job.yaml   # from the repository root\n"
      << "  trainyard jobs\n"
      << "  trainyard logs ID -f\n"
      << "Ctrl-C stops the cluster.\n"
      << std::flush;
  if (f.demo) {
    std::vector<std::pair<std::string, std::string>> jobs;  // what, spec text
    for (const char* path : kDemoExamples) {
      std::ifstream in(path, std::ios::binary);
      if (!in) continue;
      std::stringstream text;
      text << in.rdbuf();
      jobs.emplace_back(path, text.str());
    }
    if (jobs.empty()) {
      for (const char* text : kDemoJobs) jobs.emplace_back("built-in", text);
    }
    httplib::Client client(srv.Url());
    http::VerifyServer(client, opts->tls_cert);
    if (!admin_token.empty()) {
      client.set_default_headers({{"Authorization", "Bearer " + admin_token}});
    }
    for (const auto& [what, text] : jobs) {
      auto res = client.Post("/api/v1/jobs", text, "application/yaml");
      if (res && res->status == 201) {
        out << "demo: submitted job " << nlohmann::json::parse(res->body).value("id", 0) << " ("
            << what << ")\n";
      } else {
        err << "demo: submit of " << what << " failed: " << (res ? res->body : "no answer") << "\n";
      }
    }
    out << std::flush;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  out << "trainyard up: stopping " << agents.size() << " agent(s) and the server\n" << std::flush;
  for (pid_t p : agents) kill(p, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  size_t left = agents.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    left = 0;
    for (pid_t& p : agents) {
      if (p <= 0) continue;
      if (waitpid(p, nullptr, WNOHANG) == p) {
        p = 0;
      } else {
        ++left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (pid_t p : agents) {
    if (p > 0) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
  srv.Stop();
  return kExitOk;
}

}  // namespace

void AddServerCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  auto f = std::make_shared<ServerFlags>();
  CLI::App* cmd = app.add_subcommand("server", DaemonCommandAbout("server"));
  AddServerFlags(cmd, *f);
  cmd->callback([f, &exit_code, &out, &err] { exit_code = RunServer(*f, out, err); });
}

void AddUpCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  auto f = std::make_shared<UpFlags>();
  CLI::App* cmd = app.add_subcommand("up", DaemonCommandAbout("up"));
  AddServerFlags(cmd, f->server);
  cmd->add_option("--nodes", f->nodes, "Agents to start")->capture_default_str();
  cmd->add_option("--gpus-per-node", f->gpus_per_node, "Simulated GPUs per agent")
      ->capture_default_str();
  cmd->add_option("--gpu-type", f->gpu_type, "GPU model of the simulated GPUs")
      ->capture_default_str();
  cmd->add_flag("--demo", f->demo,
                "Submit the examples/trainer and examples/ddp jobs (at a checkout's root; else "
                "built-in demo jobs)");
  cmd->callback([f, &exit_code, &out, &err] { exit_code = RunUp(*f, out, err); });
}

}  // namespace trainyard::cli
