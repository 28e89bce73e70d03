// Fault kinds and the fault a `faults` command carries (docs/faults.md,
// docs/agent-protocol.md "Faults and checkpoint requests"): the one list of kinds, by
// name, that the server checks an injection against and the agent parses commands with.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/job.h"
#include "core/status.h"

namespace trainyard::protocol {

enum class FaultKind {
  kXid,        // an XID 79 event (GPU fell off the bus)
  kEcc,        // an uncorrectable ECC error and its XID 48
  kThermal,    // hot and throttled
  kLinkDown,   // the node's InfiniBand link is down
  kSlow,       // lower clocks: the GPU's work takes longer
  kHang,       // no progress: utilisation 0, the trainer stops stepping
  kDataStall,  // the input pipeline starves the GPUs
  kLossNan,    // the trainer's loss turns NaN
  kGradSpike,  // the trainer's gradient norm jumps
  kCommSlow,   // one job's collectives are slow (derived by the server, never injected)
};

// Every kind with its wire name, in the order messages list them.
inline constexpr std::array<std::pair<FaultKind, std::string_view>, 10> kFaultKindNames = {{
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
}};

// The names of the kinds an admin may inject: every kind but comm-slow, which the
// server derives for the other nodes of a job that spans a node whose link is down.
inline constexpr std::array<std::string_view, kFaultKindNames.size() - 1> kFaultKinds = [] {
  std::array<std::string_view, kFaultKindNames.size() - 1> out{};
  size_t i = 0;
  for (const auto& [kind, name] : kFaultKindNames) {
    if (kind != FaultKind::kCommSlow) out[i++] = name;
  }
  return out;
}();

// True for the names of kFaultKinds (the injectable kinds).
bool IsFaultKind(std::string_view name);
// "xid", "ecc", ..., "comm-slow".
std::string_view FaultKindName(FaultKind kind);
// The kind a name means (any of kFaultKindNames); InvalidArgument naming it and the
// valid kinds otherwise: `unknown fault kind "melt"; valid kinds: xid, ecc, ...`.
Result<FaultKind> ParseFaultKind(std::string_view name);
// "xid, ecc, thermal, ..., comm-slow", for messages.
std::string ValidFaultKinds();

// A fault kind is its name in JSON (nlohmann finds this by argument-dependent lookup,
// so `{"kind", fault.kind}` writes "link-down").
template <typename BasicJson>
void to_json(BasicJson& j, FaultKind kind) {
  j = FaultKindName(kind);
}

// One simulated fault on a node, as the `faults` command carries it.
struct FaultSpec {
  std::string id;                     // the server's, e.g. "f-3"; unique in a command
  FaultKind kind = FaultKind::kSlow;  // kFaultKinds, or comm-slow
  int gpu = -1;                       // a GPU index; -1: every GPU of the node
  int64_t until_ms = 0;               // wall-clock end (epoch ms); 0: until cleared
  JobId job_id = 0;                   // comm-slow only (and required there): the job it slows

  bool node_wide() const { return gpu < 0; }
  bool operator==(const FaultSpec&) const = default;
};

}  // namespace trainyard::protocol
