// `trainyard agent`: the node agent. Registers this machine with a server, runs the
// tasks the server assigns, reports GPU telemetry, task exits, logs and metrics
// (docs/agent.md; wire protocol in docs/agent-protocol.md).
//
//   trainyard agent --server URL [--ca-cert FILE] --join-token T --name NODE --data-dir DIR
//                   [--simulated-gpus N --gpu-type H100] [--cpus N] [--memory 512Gi]
//                   [--address IP] [--leaf L] [--nvlink-domain D] [--label k=v ...]
//                   [--heartbeat-interval 1s] [--stop-grace 10s] [--allowed-dirs DIR,...]
//                   [--health-check PROGRAM [--health-check-interval 5m]
//                    [--health-check-timeout 60s]]
//
// Runs until SIGINT or SIGTERM; then stops its tasks (SIGTERM, SIGKILL after
// --stop-grace), reports their exits and returns.
//
// Exit statuses: 0 stopped by a signal, 1 the server refused the node, 2 bad flags.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "core/status.h"

namespace trainyard::cli {

struct AgentCommandOptions {
  std::string server;
  std::string ca_cert;  // empty: the system's store (for an https server)
  std::string join_token;
  std::string join_token_file;  // instead of join_token: kept out of the process list
  std::string name;
  std::string data_dir;
  std::string allowed_dirs;  // DIR[,DIR...]; empty: anywhere
  int simulated_gpus = -1;   // -1: discover through NVML
  std::string gpu_type = "H100";
  int64_t cpus = 0;     // 0: this machine's online CPUs
  std::string memory;   // empty: this machine's MemTotal
  std::string address;  // empty: the local address of the route to the server
  std::string leaf = "leaf-0";
  std::string nvlink_domain;  // empty: the node name
  std::vector<std::string> labels;
  std::string heartbeat_interval = "1s";
  std::string stop_grace = "10s";
  std::string health_check;  // an executable; empty: no health check
  std::string health_check_interval = "5m";
  std::string health_check_timeout = "60s";
  bool no_cgroups = false;
  int64_t task_pids_max = 32'768;
  std::string oci_runtime;      // "": runc; "none": no containers
  std::string unmapped_run_as;  // "UID:GID" or "agent"; "": nobody for root, else agent
  std::string image_store;      // "": ImageStore::DefaultRoot()
  std::string data_cache_dir;   // "": DATA_DIR/datasets
  std::string data_cache_size;  // "": 90% of its file system's free space at start
};

// Validates the flags and fills in machine defaults. Errors name the flag, the value
// and what is valid.
Result<agent::AgentOptions> AgentOptionsFromFlags(const AgentCommandOptions& flags);

int RunAgent(const AgentCommandOptions& options, std::ostream& out, std::ostream& err);

void AddAgentCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
