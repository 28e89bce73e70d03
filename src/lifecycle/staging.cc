// Staging a gang's datasets before it starts (docs/datasets.md, "Staging"): a bound
// job whose spec has data with stage: local sends a `stage` command to each node of
// its gang instead of starts; its ranks wait in RankState::kStaging. Heartbeats say
// what each node's cache holds; once every node has every version, the starts go out
// together, so no rank starts before the whole gang has its data. A node that cannot
// stage fails the attempt, which the retry policy may place elsewhere.
#include <algorithm>
#include <cstdio>
#include <set>

#include "core/units.h"
#include "lifecycle/internal.h"

namespace trainyard::lifecycle::internal {
namespace {

const protocol::DatasetStatus* StatusOn(const NodeEntry& n, const std::string& version) {
  for (const protocol::DatasetStatus& d : n.datasets) {
    if (d.version == version) return &d;
  }
  return nullptr;
}

// When `node` was last sent the gang's stage command (its staging ranks' sent_at).
Timestamp StageSentAt(const Gang& g, const std::string& node) {
  Timestamp at{};
  for (const Rank& r : g.ranks) {
    if (r.node == node && r.state == RankState::kStaging) at = std::max(at, r.sent_at);
  }
  return at;
}

std::string Rate(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MB/s", bytes_per_s / 1e6);
  return buf;
}

}  // namespace

bool NeedsStaging(const JobSpec& spec) {
  return std::any_of(spec.data.begin(), spec.data.end(),
                     [](const DataSpec& d) { return d.stage == DataStage::kLocal; });
}

void SendStage(Ctx& c, const JobEntry& e, const std::string& only_node) {
  if (!e.gang || e.gang->ranks.empty()) return;
  protocol::Command cmd;
  cmd.kind = protocol::Command::Kind::kStage;
  // The data as the gang's starts carry it (the first rank's start has it all).
  for (protocol::TaskData& d : BuildStart(c.s, e, e.gang->ranks.front()).data) {
    if (d.stage_local) cmd.stage.push_back(std::move(d));
  }
  std::set<std::string> nodes;
  for (const Rank& r : e.gang->ranks) {
    if (r.state == RankState::kStaging && (only_node.empty() || r.node == only_node)) {
      nodes.insert(r.node);
    }
  }
  for (const std::string& node : nodes) c.Push(node, cmd);
}

Status AdvanceStaging(Ctx& c, JobEntry& e) {
  if (!e.gang || e.gang->stopping != Stopping::kNone) return Status::Ok();
  Gang& g = *e.gang;
  if (std::none_of(g.ranks.begin(), g.ranks.end(),
                   [](const Rank& r) { return r.state == RankState::kStaging; })) {
    return Status::Ok();
  }
  std::set<std::string> nodes;
  for (const Rank& r : g.ranks) nodes.insert(r.node);
  int64_t done = 0, total = 0, size = 0;  // over nodes; size: of the versions, once
  double slowest_rate = -1;
  std::string slowest;
  bool all_ready = true;
  for (const DataSpec& d : e.job.spec.data) {
    if (d.stage != DataStage::kLocal) continue;
    int64_t version_size = 0;
    for (const std::string& node : nodes) {
      const NodeEntry* n = c.s.FindNode(node);
      const protocol::DatasetStatus* st = n == nullptr ? nullptr : StatusOn(*n, d.version);
      if (st == nullptr) {
        all_ready = false;
        continue;
      }
      if (st->state == protocol::DatasetState::kFailed &&
          c.now - StageSentAt(g, node) < c.s.options.stage_failure_grace) {
        all_ready = false;  // maybe an earlier attempt's failure (see the option)
        continue;
      }
      if (st->state == protocol::DatasetState::kFailed) {
        g.failure_code = 0;
        return StopGang(c, e, Stopping::kFailed,
                        "staging dataset " + d.dataset + " " + d.version + " on node " + node +
                            " failed: " + st->error);
      }
      done += st->state == protocol::DatasetState::kReady ? st->bytes_total : st->bytes_done;
      total += st->bytes_total;
      version_size = std::max(version_size, st->bytes_total);
      if (st->state != protocol::DatasetState::kReady) {
        all_ready = false;
        if (slowest_rate < 0 || st->bytes_per_s < slowest_rate) {
          slowest_rate = st->bytes_per_s;
          slowest = node;
        }
      }
    }
    size += version_size;
  }
  if (!all_ready) {
    // Where it stands, for `jobs`, `job show` and the dashboard: kept in memory only
    // (heartbeats move it on every few seconds; the store keeps the bind's reason).
    std::string reason = "staging data on " + std::to_string(nodes.size()) + " node(s): ";
    if (total == 0) {
      reason += "waiting for the nodes to start copying";
    } else {
      reason += FormatSize(done) + " of " + FormatSize(total) + " (" +
                std::to_string(done * 100 / total) + "%)";
    }
    if (slowest_rate > 0) {
      const int64_t left_s =
          static_cast<int64_t>(static_cast<double>(std::max<int64_t>(total - done, 0)) /
                               slowest_rate / static_cast<double>(nodes.size()));
      reason += ", " + Rate(slowest_rate) + " on the slowest (" + slowest + "), ETA " +
                FormatDuration(Duration(left_s * 1000));
    }
    e.job.reason = std::move(reason);
    c.Touch(e.job.id);
    return Status::Ok();
  }
  const Duration took = c.now - e.job.state_time;
  for (Rank& r : g.ranks) {
    if (r.state != RankState::kStaging) continue;
    r.state = RankState::kSent;
    r.sent_at = c.now;
    protocol::Command cmd;
    cmd.kind = protocol::Command::Kind::kStart;
    cmd.start = BuildStart(c.s, e, r);
    c.Push(r.node, std::move(cmd));
  }
  e.job.reason = "starting " + std::to_string(g.ranks.size()) + " rank(s): data staged";
  c.PutJob(e.job);
  c.AppendEvent(e.job.id, "server", "Staged",
                "data staged on all " + std::to_string(nodes.size()) + " node(s) (" +
                    FormatSize(size) + " each) in " + FormatDuration(took) + "; starting");
  c.Touch(e.job.id);
  return Status::Ok();
}

}  // namespace trainyard::lifecycle::internal
