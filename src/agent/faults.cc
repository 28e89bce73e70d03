#include "agent/faults.h"

#include <algorithm>
#include <set>

#include "core/names.h"

namespace trainyard::agent {
namespace {

using nlohmann::json;

struct KindName {
  FaultKind kind;
  std::string_view name;
};
constexpr KindName kKinds[] = {
    {FaultKind::kXid, "xid"},
    {FaultKind::kEcc, "ecc"},
    {FaultKind::kThermal, "thermal"},
    {FaultKind::kLinkDown, "link-down"},
    {FaultKind::kSlow, "slow"},
    {FaultKind::kHang, "hang"},
    {FaultKind::kDataStall, "data-stall"},
    {FaultKind::kLossNan, "loss-nan"},
    {FaultKind::kGradSpike, "grad-spike"},
    {FaultKind::kCommSlow, "comm-slow"},
};

// How much longer a step takes under each kind that slows it (1: not at all).
double SlowFactor(FaultKind kind) {
  switch (kind) {
    case FaultKind::kSlow:
      return 3.0;
    case FaultKind::kThermal:
      return 1.8;
    case FaultKind::kLinkDown:
    case FaultKind::kCommSlow:
      return 2.5;
    default:
      return 1.0;
  }
}

constexpr double kDataStallSeconds = 1.0;

Status FieldError(const std::string& field, const json& value, std::string_view want) {
  return InvalidArgument(field + ": must be " + std::string(want) + ", got " +
                         QuoteForMessage(value.dump()));
}

}  // namespace

std::string_view FaultKindName(FaultKind kind) {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

std::string ValidFaultKinds() {
  std::string out;
  for (const auto& k : kKinds) {
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

Result<FaultKind> ParseFaultKind(std::string_view name) {
  for (const auto& k : kKinds) {
    if (k.name == name) return k.kind;
  }
  return InvalidArgument("unknown fault kind " + QuoteForMessage(name) +
                         "; valid kinds: " + ValidFaultKinds());
}

Result<std::vector<Fault>> ParseFaults(const json& list) {
  if (!list.is_array()) return FieldError("faults", list, "a list of faults");
  std::vector<Fault> out;
  std::set<std::string> ids;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& f = list[i];
    const std::string at = "faults[" + std::to_string(i) + "]";
    if (!f.is_object()) return FieldError(at, f, "an object");
    Fault fault;
    auto id = f.find("id");
    if (id == f.end() || id->is_null()) return InvalidArgument(at + ".id: missing");
    if (!id->is_string() || id->get<std::string>().empty()) {
      return FieldError(at + ".id", *id, "a non-empty string");
    }
    fault.id = id->get<std::string>();
    if (!ids.insert(fault.id).second) {
      return InvalidArgument(at + ".id: " + QuoteForMessage(fault.id) +
                             " appears twice; fault ids must be unique");
    }
    auto kind = f.find("kind");
    if (kind == f.end() || kind->is_null()) return InvalidArgument(at + ".kind: missing");
    if (!kind->is_string()) return FieldError(at + ".kind", *kind, "a string");
    auto parsed = ParseFaultKind(kind->get<std::string>());
    if (!parsed.ok()) return InvalidArgument(at + ".kind: " + parsed.status().message());
    fault.kind = *parsed;
    auto integer = [&](const char* name, int64_t min) -> Result<int64_t> {
      auto it = f.find(name);
      if (it == f.end() || it->is_null()) return min < 0 ? int64_t{-1} : int64_t{0};
      if (!it->is_number_integer() || it->get<int64_t>() < min) {
        return FieldError(at + "." + name, *it,
                          min < 0 ? "a GPU index or -1 (every GPU)" : "an integer >= 0");
      }
      return it->get<int64_t>();
    };
    TY_ASSIGN_OR_RETURN(int64_t gpu, integer("gpu", -1));
    if (gpu >= static_cast<int64_t>(kMaxGpusPerNode)) {
      return FieldError(
          at + ".gpu", f["gpu"],
          "a GPU index below " + std::to_string(kMaxGpusPerNode) + " or -1 (every GPU)");
    }
    fault.gpu = static_cast<int>(gpu);
    TY_ASSIGN_OR_RETURN(fault.until_ms, integer("until_ms", 0));
    TY_ASSIGN_OR_RETURN(fault.job_id, integer("job_id", 0));
    if (fault.kind == FaultKind::kCommSlow && fault.job_id == 0) {
      return InvalidArgument(at + ".job_id: a comm-slow fault must name the job it slows (> 0)");
    }
    out.push_back(std::move(fault));
  }
  return out;
}

json ToJson(const FaultEffects& e) {
  return {{"slow_factor", e.slow_factor},
          {"hang", e.hang},
          {"data_stall_s", e.data_stall_s},
          {"loss_nan", e.loss_nan},
          {"grad_spike", e.grad_spike}};
}

std::vector<FaultEffects> EffectsOnTasks(const std::vector<Fault>& faults,
                                         const std::vector<TaskPlacement>& tasks) {
  std::vector<FaultEffects> out(tasks.size());
  const bool no_gpus = std::all_of(tasks.begin(), tasks.end(),
                                   [](const TaskPlacement& t) { return t.gpus.empty(); });
  // On a node without GPUs, GPU i stands for the i-th task in rank order.
  std::vector<size_t> by_rank(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) by_rank[i] = i;
  std::stable_sort(by_rank.begin(), by_rank.end(), [&](size_t a, size_t b) {
    if (tasks[a].rank != tasks[b].rank) return tasks[a].rank < tasks[b].rank;
    if (tasks[a].job_id != tasks[b].job_id) return tasks[a].job_id < tasks[b].job_id;
    return tasks[a].task_id < tasks[b].task_id;
  });
  std::vector<size_t> position(tasks.size());
  for (size_t i = 0; i < by_rank.size(); ++i) position[by_rank[i]] = i;

  for (size_t i = 0; i < tasks.size(); ++i) {
    const TaskPlacement& t = tasks[i];
    FaultEffects& e = out[i];
    for (const Fault& f : faults) {
      bool touches;
      if (f.kind == FaultKind::kCommSlow) {
        touches = f.job_id == t.job_id;
      } else if (f.kind == FaultKind::kLinkDown || f.node_wide()) {
        touches = true;
      } else if (no_gpus) {
        touches = position[i] == static_cast<size_t>(f.gpu);
      } else {
        touches = std::find(t.gpus.begin(), t.gpus.end(), f.gpu) != t.gpus.end();
      }
      if (!touches) continue;
      e.slow_factor = std::max(e.slow_factor, SlowFactor(f.kind));
      e.hang = e.hang || f.kind == FaultKind::kHang;
      if (f.kind == FaultKind::kDataStall)
        e.data_stall_s = std::max(e.data_stall_s, kDataStallSeconds);
      e.loss_nan = e.loss_nan || f.kind == FaultKind::kLossNan;
      e.grad_spike = e.grad_spike || f.kind == FaultKind::kGradSpike;
    }
  }
  return out;
}

}  // namespace trainyard::agent
