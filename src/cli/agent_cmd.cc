#include "cli/agent_cmd.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "agent/gpu.h"
#include "agent/health_check.h"
#include "agent/nvml.h"
#include "cli/app.h"
#include "core/names.h"
#include "core/spec_paths.h"
#include "core/tenancy.h"
#include "core/units.h"
#include "http/tls.h"

namespace trainyard::cli {
namespace {

int64_t MachineMemoryMib() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib / 1024;
  }
  return 0;
}

// "http://host:port/..." -> host (brackets stripped for IPv6).
std::string UrlHost(const std::string& url) {
  size_t start = url.find("://");
  start = start == std::string::npos ? 0 : start + 3;
  std::string rest = url.substr(start);
  rest = rest.substr(0, rest.find('/'));
  if (!rest.empty() && rest[0] == '[') return rest.substr(1, rest.find(']') - 1);
  return rest.substr(0, rest.find(':'));
}

// The local address this machine uses to reach `host`: what ranks on other nodes can
// most likely reach too. A UDP connect sends nothing; it only picks the route.
std::string RouteAddressTo(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char buf[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* addr =
          local.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, addr, buf, sizeof buf) != nullptr) out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

Result<Duration> DurationFlag(const char* flag, const std::string& text, Duration min,
                              Duration max) {
  auto d = ParseDuration(text);
  if (!d.ok()) return InvalidArgument(std::string(flag) + ": " + d.status().message());
  if (*d < min || *d > max) {
    return InvalidArgument(std::string(flag) + ": must be between " + FormatDuration(min) +
                           " and " + FormatDuration(max) + ", got " + QuoteForMessage(text));
  }
  return *d;
}

}  // namespace

Result<agent::AgentOptions> AgentOptionsFromFlags(const AgentCommandOptions& f) {
  agent::AgentOptions o;
  // One URL, or several separated by commas (a leader and its standbys, docs/ha.md).
  std::vector<std::string> urls;
  for (size_t pos = 0; pos <= f.server.size();) {
    size_t comma = f.server.find(',', pos);
    if (comma == std::string::npos) comma = f.server.size();
    std::string url = f.server.substr(pos, comma - pos);
    pos = comma + 1;
    if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
      return InvalidArgument("--server: expected http://HOST:PORT or https://HOST:PORT" +
                             std::string(urls.empty() && pos > f.server.size()
                                             ? ""
                                             : " (several separated by commas)") +
                             ", got " + QuoteForMessage(url.empty() ? f.server : url));
    }
    if (UrlHost(url).empty()) {
      return InvalidArgument("--server: no host in " + QuoteForMessage(url) +
                             "; expected http://HOST:PORT");
    }
    while (url.size() > 1 && url.back() == '/') url.pop_back();
    urls.push_back(std::move(url));
  }
  for (const std::string& url : urls) o.server_url += (o.server_url.empty() ? "" : ",") + url;
  if (!f.ca_cert.empty()) {
    if (f.server.rfind("https://", 0) != 0) {
      return InvalidArgument("--ca-cert: verifies an https:// server, but --server is " +
                             QuoteForMessage(f.server));
    }
    TY_RETURN_IF_ERROR(http::CheckCaFile("--ca-cert", f.ca_cert));
    o.ca_cert = std::filesystem::absolute(f.ca_cert).lexically_normal().string();
  }
  if (!f.join_token.empty() && !f.join_token_file.empty()) {
    return InvalidArgument("--join-token and --join-token-file: give one of them, not both");
  }
  if (!f.join_token_file.empty()) {
    std::ifstream in(f.join_token_file);
    std::string token;
    if (!in || !std::getline(in, token)) {
      return InvalidArgument("--join-token-file: cannot read " +
                             QuoteForMessage(f.join_token_file));
    }
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
      token.pop_back();
    }
    if (token.empty()) {
      return InvalidArgument("--join-token-file: " + QuoteForMessage(f.join_token_file) +
                             " starts with an empty line; expected the token the server wrote "
                             "to DATA_DIR/join-token");
    }
    o.join_token = token;
  } else if (f.join_token.empty()) {
    return InvalidArgument(
        "--join-token or --join-token-file: one is required (the token the server printed, or "
        "a file holding it such as the server's DATA_DIR/join-token)");
  } else {
    o.join_token = f.join_token;
  }
  TY_RETURN_IF_ERROR(ValidateName("--name", f.name));
  o.node_name = f.name;
  if (f.data_dir.empty()) return InvalidArgument("--data-dir: must not be empty");
  o.data_dir = std::filesystem::absolute(f.data_dir).lexically_normal().string();
  TY_ASSIGN_OR_RETURN(o.allowed_dirs, ParseAllowedDirs("--allowed-dirs", f.allowed_dirs));

  long online = sysconf(_SC_NPROCESSORS_ONLN);
  o.cpus = f.cpus != 0 ? f.cpus : std::max<long>(1, online);
  if (o.cpus < 1 || o.cpus > 65536) {
    return InvalidArgument("--cpus: must be between 1 and 65536, got " + std::to_string(f.cpus));
  }
  if (!f.memory.empty()) {
    auto bytes = ParseMemory(f.memory);
    if (!bytes.ok()) return InvalidArgument("--memory: " + bytes.status().message());
    if (*bytes < kMiB) {
      return InvalidArgument("--memory: must be at least 1Mi, got " + QuoteForMessage(f.memory));
    }
    o.memory_mib = *bytes / kMiB;
  } else {
    o.memory_mib = MachineMemoryMib();
    if (o.memory_mib <= 0) {
      return InvalidArgument("--memory: cannot read MemTotal from /proc/meminfo; give --memory");
    }
  }

  if (!f.address.empty()) {
    unsigned char buf[sizeof(in6_addr)];
    if (inet_pton(AF_INET, f.address.c_str(), buf) != 1 &&
        inet_pton(AF_INET6, f.address.c_str(), buf) != 1) {
      return InvalidArgument("--address: must be an IPv4 or IPv6 address, got " +
                             QuoteForMessage(f.address));
    }
    o.address = f.address;
  } else {
    o.address = RouteAddressTo(UrlHost(urls.front()));
    if (o.address.empty()) o.address = "127.0.0.1";
  }
  TY_RETURN_IF_ERROR(ValidateName("--leaf", f.leaf));
  o.leaf = f.leaf;
  o.nvlink_domain = f.nvlink_domain.empty() ? f.name : f.nvlink_domain;
  TY_RETURN_IF_ERROR(ValidateName("--nvlink-domain", o.nvlink_domain));
  for (const auto& label : f.labels) {
    auto eq = label.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument("--label: expected KEY=VALUE, got " + QuoteForMessage(label));
    }
    std::string key = label.substr(0, eq);
    TY_RETURN_IF_ERROR(ValidateName("--label key", key));
    o.labels[key] = label.substr(eq + 1);
  }
  if (f.simulated_gpus < -1 || f.simulated_gpus > static_cast<int>(kMaxGpusPerNode)) {
    return InvalidArgument("--simulated-gpus: must be between 0 and " +
                           std::to_string(kMaxGpusPerNode) + ", got " +
                           std::to_string(f.simulated_gpus));
  }
  if (f.simulated_gpus >= 0 && agent::FindGpuType(f.gpu_type) == nullptr) {
    return InvalidArgument("--gpu-type: unknown GPU type " + QuoteForMessage(f.gpu_type) +
                           " for simulated GPUs; known: " + agent::KnownGpuTypes());
  }
  TY_ASSIGN_OR_RETURN(o.heartbeat_interval,
                      DurationFlag("--heartbeat-interval", f.heartbeat_interval,
                                   std::chrono::milliseconds(100), std::chrono::minutes(1)));
  TY_ASSIGN_OR_RETURN(o.stop_grace, DurationFlag("--stop-grace", f.stop_grace, Duration::zero(),
                                                 std::chrono::hours(1)));
  if (!f.health_check.empty()) {
    TY_RETURN_IF_ERROR(agent::CheckHealthCheckProgram("--health-check", f.health_check));
    o.health_check = std::filesystem::absolute(f.health_check).lexically_normal().string();
  }
  TY_ASSIGN_OR_RETURN(o.health_check_interval,
                      DurationFlag("--health-check-interval", f.health_check_interval,
                                   std::chrono::seconds(1), std::chrono::hours(24)));
  TY_ASSIGN_OR_RETURN(o.health_check_timeout,
                      DurationFlag("--health-check-timeout", f.health_check_timeout,
                                   std::chrono::milliseconds(100), std::chrono::hours(1)));
  if (f.no_cgroups) o.cgroups = agent::Cgroups::Disabled("--no-cgroups");
  if (f.task_pids_max < 0 || f.task_pids_max > 4'194'304) {
    return InvalidArgument("--task-pids-max: must be between 0 (unlimited) and 4194304, got " +
                           std::to_string(f.task_pids_max));
  }
  o.task_pids_max = f.task_pids_max;
  o.oci_runtime = f.oci_runtime;
  // Nobody by default for a root agent: a rank is root only where its tenant is allowed.
  const std::string unmapped =
      f.unmapped_run_as.empty() ? (geteuid() == 0 ? "65534:65534" : "agent") : f.unmapped_run_as;
  if (unmapped != "agent") {
    if (!ParseUnixIds(unmapped, o.unmapped_uid, o.unmapped_gid)) {
      return InvalidArgument("--unmapped-run-as: must be UID:GID (decimal, 0.." +
                             std::to_string(kMaxUnixId) + ") or agent, got " +
                             QuoteForMessage(unmapped));
    }
    if (o.unmapped_uid == 0 || o.unmapped_gid == 0) {
      return InvalidArgument("--unmapped-run-as " + unmapped +
                             ": root is never the default identity; give the tenants that "
                             "need it run_as 0:0 with allow_root, or use agent");
    }
    if (geteuid() != 0 && static_cast<uid_t>(o.unmapped_uid) != geteuid()) {
      return InvalidArgument("--unmapped-run-as " + unmapped +
                             ": switching identity needs root, and this agent runs as uid " +
                             std::to_string(geteuid()) + "; use agent");
    }
  }
  if (!f.image_store.empty()) {
    o.image_store = std::filesystem::absolute(f.image_store).lexically_normal().string();
  }
  if (!f.data_cache_dir.empty()) {
    o.data_cache_dir = std::filesystem::absolute(f.data_cache_dir).lexically_normal().string();
  }
  if (!f.data_cache_size.empty()) {
    auto size = ParseMemory(f.data_cache_size);
    if (!size.ok() || *size <= 0) {
      return InvalidArgument("--data-cache-size: must be a size above 0 (\"500Gi\", \"2T\"), got " +
                             QuoteForMessage(f.data_cache_size));
    }
    o.data_cache_bytes = *size;
  }
  return o;
}

int RunAgent(const AgentCommandOptions& flags, std::ostream& out, std::ostream& err) {
  (void)out;
  auto options = AgentOptionsFromFlags(flags);
  if (!options.ok()) {
    err << "trainyard agent: " << options.status().message() << "\n";
    return kExitUsage;
  }
  std::error_code ec;
  std::filesystem::create_directories(options->data_dir, ec);
  if (ec) {
    err << "trainyard agent: --data-dir: cannot create " << options->data_dir << ": "
        << ec.message() << "\n";
    return kExitUsage;
  }
  auto log_mu = std::make_shared<std::mutex>();
  options->log = [&err, log_mu](const std::string& line) {
    std::lock_guard lock(*log_mu);
    err << FormatTimestamp(std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()))
        << " trainyard agent: " << line << std::endl;
  };

  std::unique_ptr<agent::GpuBackend> gpus;
  if (flags.simulated_gpus >= 0) {
    auto sim = agent::SimulatedGpus::Create(flags.simulated_gpus, flags.gpu_type,
                                            options->node_name, /*seed=*/1);
    if (!sim.ok()) {
      err << "trainyard agent: " << sim.status().message() << "\n";
      return kExitUsage;
    }
    gpus = std::move(*sim);
  } else if (auto nvml = agent::NvmlGpus::Open(); nvml.ok()) {
    gpus = std::move(*nvml);
  } else {
    // The protocol's promise: a node without a driver reports zero GPUs and says why.
    options->log("warning: " + nvml.status().message() + "; reporting 0 GPUs");
    options->health_note = nvml.status().message();
    gpus = std::make_unique<agent::NoGpus>();
  }

  // OpenSSL writes to its sockets without MSG_NOSIGNAL: a server that closes an https
  // connection while the agent sends would kill it with SIGPIPE. With a handler that
  // does nothing the write fails with EPIPE and the agent retries; exec resets the
  // handler, so tasks start with the default.
  struct sigaction on_pipe {};
  on_pipe.sa_handler = [](int) {};
  sigemptyset(&on_pipe.sa_mask);
  sigaction(SIGPIPE, &on_pipe, nullptr);

  // SIGINT/SIGTERM are taken by a thread of our own (sigtimedwait), so that the agent
  // loop, its poll thread and libraries never run a handler. Tasks unblock them again.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);

  agent::Agent node(std::move(*options), std::move(gpus));
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    timespec tick{0, 200 * 1000 * 1000};
    while (!done.load()) {
      int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        node.Shutdown();
        return;
      }
    }
  });
  Status s = node.Run();
  done = true;
  waiter.join();
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (!s.ok()) {
    err << "trainyard agent: " << s.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

void AddAgentCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  auto o = std::make_shared<AgentCommandOptions>();
  CLI::App* cmd = app.add_subcommand("agent", DaemonCommandAbout("agent"));
  cmd->add_option("--server", o->server,
                  "Server URL, http://HOST:PORT or https://HOST:PORT; several separated by "
                  "commas for a leader and its standbys (docs/ha.md)")
      ->required();
  cmd->add_option("--ca-cert", o->ca_cert,
                  "PEM file of the CA (or the server certificate) to verify an https:// server "
                  "with (default: the system's CA store); see docs/tls.md");
  cmd->add_option("--join-token", o->join_token,
                  "Token the server accepts agents with (visible in the process list; "
                  "prefer --join-token-file)");
  cmd->add_option("--join-token-file", o->join_token_file,
                  "File whose first line is the join token (e.g. a copy of the server's "
                  "DATA_DIR/join-token, mode 0600)");
  cmd->add_option("--name", o->name, "Node name, unique in the cluster")->required();
  cmd->add_option("--data-dir", o->data_dir, "Where task logs, metrics and notices are kept")
      ->required();
  cmd->add_option("--allowed-dirs", o->allowed_dirs,
                  "DIR[,DIR...]: a task's working_dir and checkpoint paths must lie in these once "
                  "symlinks are resolved, else it fails to start (default: anywhere)");
  cmd->add_option("--simulated-gpus", o->simulated_gpus,
                  "Simulate N GPUs instead of discovering them through NVML");
  cmd->add_option("--gpu-type", o->gpu_type, "Type of the simulated GPUs")->capture_default_str();
  cmd->add_option("--cpus", o->cpus, "CPUs to offer (default: this machine's)");
  cmd->add_option("--memory", o->memory, "Memory to offer, e.g. 512Gi (default: this machine's)");
  cmd->add_option("--address", o->address,
                  "IP other nodes reach this one at (MASTER_ADDR); default: the local address "
                  "of the route to the server");
  cmd->add_option("--leaf", o->leaf, "Leaf switch this node hangs off")->capture_default_str();
  cmd->add_option("--nvlink-domain", o->nvlink_domain, "NVLink domain (default: the node name)");
  cmd->add_option("--label", o->labels, "KEY=VALUE; repeat for more")->take_all();
  cmd->add_option("--heartbeat-interval", o->heartbeat_interval, "Until the server names its own")
      ->capture_default_str();
  cmd->add_option("--stop-grace", o->stop_grace,
                  "On SIGTERM/SIGINT: how long tasks get between SIGTERM and SIGKILL")
      ->capture_default_str();
  cmd->add_option("--health-check", o->health_check,
                  "Executable run (no shell) when the node joins, every --health-check-interval "
                  "and after a task fails; exit 0 = healthy, else its output says what is wrong "
                  "(see docs/agent.md)");
  cmd->add_option("--health-check-interval", o->health_check_interval,
                  "How often the health check runs")
      ->capture_default_str();
  cmd->add_option("--health-check-timeout", o->health_check_timeout,
                  "A health check running longer is killed and fails")
      ->capture_default_str();
  cmd->add_flag("--no-cgroups", o->no_cgroups,
                "Run tasks without cgroup limits even where the host offers cgroups (see "
                "docs/execution.md)");
  cmd->add_option("--task-pids-max", o->task_pids_max,
                  "pids.max of each replica's cgroup; 0: unlimited")
      ->capture_default_str();
  cmd->add_option("--unmapped-run-as", o->unmapped_run_as,
                  "Who ranks of a tenant without run_as run as: UID:GID, or agent (this "
                  "agent's own user); default 65534:65534 (nobody) for a root agent, so that no "
                  "rank is root unless its tenant allows it; see docs/execution.md");
  cmd->add_option("--oci-runtime", o->oci_runtime,
                  "The OCI runtime that runs jobs with an image (a path, or a name on PATH; "
                  "default runc; none: no containers; see docs/execution.md)");
  cmd->add_option("--image-store", o->image_store,
                  "The image store jobs' images are read from (default: $TRAINYARD_IMAGE_STORE, "
                  "else /var/lib/trainyard/images for root; see `trainyard image load`)");
  cmd->add_option("--data-cache-dir", o->data_cache_dir,
                  "Where datasets of stage: local are copied before their jobs start (default: "
                  "DATA_DIR/datasets; see docs/datasets.md)");
  cmd->add_option("--data-cache-size", o->data_cache_size,
                  "The most the dataset cache holds (\"500Gi\"); least recently used versions "
                  "that no job reads are removed to make room (default: 90% of its file "
                  "system's free space at start)");
  cmd->callback([o, &exit_code, &out, &err] { exit_code = RunAgent(*o, out, err); });
}

}  // namespace trainyard::cli
