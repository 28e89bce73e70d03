// For tests: drive a Cluster the way its agents would, without an agent.
#pragma once

#include <string>
#include <vector>

#include "server/cluster.h"

namespace trainyard::server {

// Runs a scheduling pass, takes the commands waiting for `node`, and reports every
// rank it was told to start as running (as its agent's next heartbeat would).
// Returns those commands.
inline Result<std::vector<Command>> StartRanksOn(Cluster& cluster, const std::string& node) {
  TY_RETURN_IF_ERROR(cluster.SchedulePass().status());
  TY_ASSIGN_OR_RETURN(std::vector<Command> commands, cluster.Poll(node, Duration(0)));
  Heartbeat hb;
  hb.node = node;
  for (const Command& c : commands) {
    hb.tasks.push_back({c.start.task_id, c.start.job_id, c.start.attempt, c.start.rank,
                        TaskState::kRunning, 1, 0, 0, 0, 0, "", false, ""});
  }
  TY_RETURN_IF_ERROR(cluster.HandleHeartbeat(hb).status());
  return commands;
}

}  // namespace trainyard::server
