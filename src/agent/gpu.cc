#include "agent/gpu.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "agent/links.h"
#include "core/names.h"

namespace trainyard::agent {
namespace {

// Memory as NVML reports it for the common board of each type.
constexpr GpuTypeInfo kGpuTypes[] = {
    {"A100", "NVIDIA A100-SXM4-80GB", 81920, 400, 55, 1410},
    {"B200", "NVIDIA B200", 183359, 1000, 120, 1965},
    {"H100", "NVIDIA H100 80GB HBM3", 81559, 700, 70, 1980},
    {"H200", "NVIDIA H200", 143771, 700, 75, 1980},
    {"L4", "NVIDIA L4", 23034, 72, 16, 2040},
    {"L40S", "NVIDIA L40S", 46068, 350, 35, 2520},
    {"P40", "Tesla P40", 24576, 250, 30, 1531},
    {"T4", "Tesla T4", 15360, 70, 10, 1590},
    {"V100", "Tesla V100-SXM2-16GB", 16160, 300, 40, 1530},
};

bool IsFamilyToken(std::string_view t) {
  // One or two letters, one to four digits, an optional letter: H100, GH200, A10G, L40S.
  size_t i = 0;
  while (i < t.size() && std::isalpha(static_cast<unsigned char>(t[i]))) ++i;
  if (i < 1 || i > 2) return false;
  size_t digits = i;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
  if (i - digits < 1 || i - digits > 4) return false;
  if (i < t.size() && std::isalpha(static_cast<unsigned char>(t[i]))) ++i;
  return i == t.size();
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// XID codes the simulation reports (NVIDIA's XID catalogue).
constexpr int64_t kXidDoubleBitEcc = 48;
constexpr int64_t kXidFallenOffTheBus = 79;

// Moves `value` toward `target` as a first-order lag with time constant `tau_s`.
double Approach(double value, double target, double dt_s, double tau_s) {
  if (dt_s <= 0) return value;
  return target + (value - target) * std::exp(-dt_s / tau_s);
}

}  // namespace

std::string GpuTypeFromModelName(std::string_view name) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  name = trim(name);
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (std::string_view prefix : {"NVIDIA ", "Tesla ", "GeForce ", "Quadro "}) {
      if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix) {
        name = trim(name.substr(prefix.size()));
        stripped = true;
      }
    }
  }
  std::string_view first = name.substr(0, std::min(name.find_first_of(" -_"), name.size()));
  if (IsFamilyToken(first)) {
    std::string t(first);
    for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return t;
  }
  // Unknown: keep the model, as a valid name ([A-Za-z0-9._-], starting alphanumeric).
  std::string out;
  for (char c : name) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (ok) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) out.erase(0, 1);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > kMaxNameLength) out.resize(kMaxNameLength);
  return out.empty() ? "unknown" : out;
}

const GpuTypeInfo* FindGpuType(std::string_view type) {
  for (const auto& t : kGpuTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

std::string KnownGpuTypes() {
  std::string out;
  for (const auto& t : kGpuTypes) {
    if (!out.empty()) out += ", ";
    out += t.type;
  }
  return out;
}

NoGpus::NoGpus() : NoGpus(kInfinibandSysfsRoot) {}

NoGpus::NoGpus(std::string infiniband_root) : infiniband_root_(std::move(infiniband_root)) {}

std::vector<LinkSample> NoGpus::SampleLinks() {
  return KeepLinksSeenUp(ReadInfinibandLinks(infiniband_root_), links_seen_up_);
}

Result<std::unique_ptr<SimulatedGpus>> SimulatedGpus::Create(int count, std::string_view type,
                                                             std::string_view node_name,
                                                             uint64_t seed) {
  const GpuTypeInfo* info = FindGpuType(type);
  if (info == nullptr) {
    return InvalidArgument("--gpu-type: unknown GPU type " + QuoteForMessage(type) +
                           " for simulated GPUs; known: " + KnownGpuTypes());
  }
  if (count < 0 || count > static_cast<int>(kMaxGpusPerNode)) {
    return InvalidArgument("--simulated-gpus: must be 0.." + std::to_string(kMaxGpusPerNode) +
                           ", got " + std::to_string(count));
  }
  std::vector<GpuDevice> devices;
  for (int i = 0; i < count; ++i) {
    // A stable UUID in NVML's format, so a restarted agent reports the same GPUs.
    uint64_t a = Fnv1a(std::string(node_name) + "/" + std::to_string(i));
    uint64_t b = Fnv1a(std::to_string(i) + "/" + std::string(node_name));
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-%08x-%04x-%04x-%04x-%012llx",
                  static_cast<unsigned>(a >> 32), static_cast<unsigned>((a >> 16) & 0xffff),
                  static_cast<unsigned>(a & 0xffff), static_cast<unsigned>(b >> 48),
                  static_cast<unsigned long long>(b & 0xffffffffffffULL));
    devices.push_back(
        {i, uuid, std::string(info->model_name), std::string(info->type), info->memory_mib});
  }
  return std::unique_ptr<SimulatedGpus>(new SimulatedGpus(*info, std::move(devices), seed));
}

SimulatedGpus::SimulatedGpus(const GpuTypeInfo& info, std::vector<GpuDevice> devices, uint64_t seed)
    : info_(info), devices_(std::move(devices)), state_(devices_.size()), rng_(seed) {
  for (auto& s : state_) s.power_w = info_.idle_w;
}

Result<std::vector<GpuDevice>> SimulatedGpus::Discover() { return devices_; }

void SimulatedGpus::SetBusyGpus(const std::set<int>& busy) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < state_.size(); ++i) state_[i].busy = busy.count(static_cast<int>(i)) > 0;
}

Status SimulatedGpus::SetFaults(int index, const SimulatedFaults& faults) {
  std::lock_guard lock(mu_);
  if (index < 0 || index >= static_cast<int>(state_.size())) {
    return InvalidArgument("gpu: no simulated GPU " + std::to_string(index) + "; this node has " +
                           std::to_string(state_.size()));
  }
  SetFaultsLocked(state_[index], faults);
  return Status::Ok();
}

void SimulatedGpus::SetFaultsLocked(State& s, const SimulatedFaults& faults) {
  s.faults = faults;
  s.ecc += faults.ecc_uncorrectable;
  if (faults.xid != 0) {
    s.xid_last = faults.xid;
    ++s.xid_count;
  }
}

void SimulatedGpus::ApplyFaults(const std::vector<FaultSpec>& faults) {
  std::lock_guard lock(mu_);
  std::vector<SimulatedFaults> next(state_.size());
  link_down_ = false;
  for (const FaultSpec& f : faults) {
    if (f.kind == FaultKind::kLinkDown) link_down_ = true;
    // A new event fault fires once, on the GPUs it names.
    const bool fires =
        (f.kind == FaultKind::kXid || f.kind == FaultKind::kEcc) && fired_.insert(f.id).second;
    for (size_t i = 0; i < next.size(); ++i) {
      if (!f.node_wide() && f.gpu != static_cast<int>(i)) continue;
      SimulatedFaults& g = next[i];
      State& s = state_[i];
      switch (f.kind) {
        case FaultKind::kXid:
          if (fires) {
            s.xid_last = kXidFallenOffTheBus;
            ++s.xid_count;
          }
          break;
        case FaultKind::kEcc:
          if (fires) {
            s.xid_last = kXidDoubleBitEcc;
            ++s.xid_count;
            ++s.ecc;
          }
          break;
        case FaultKind::kThermal:
          g.thermal = true;
          break;
        case FaultKind::kSlow:
          g.slow = true;
          break;
        case FaultKind::kHang:
          g.hang = true;
          break;
        case FaultKind::kDataStall:
          g.data_stall = true;
          break;
        default:  // trainer-only faults and links: no GPU telemetry
          break;
      }
    }
  }
  for (size_t i = 0; i < state_.size(); ++i) SetFaultsLocked(state_[i], next[i]);
}

std::vector<LinkSample> SimulatedGpus::SampleLinks() {
  std::lock_guard lock(mu_);
  if (link_down_) ++ib_errors_;
  return {{"ib0", "ib", !link_down_, ib_errors_}, {"nvlink0", "nvlink", true, 0}};
}

Result<std::vector<GpuSample>> SimulatedGpus::Sample(Timestamp now) {
  std::lock_guard lock(mu_);
  double dt_s = last_ ? std::chrono::duration<double>(now - *last_).count() : 0.0;
  last_ = now;
  std::uniform_real_distribution<double> busy_util(90.0, 99.0);
  std::uniform_real_distribution<double> jitter(-1.0, 1.0);
  std::vector<GpuSample> out;
  for (size_t i = 0; i < state_.size(); ++i) {
    State& s = state_[i];
    const SimulatedFaults& f = s.faults;
    double util = s.busy ? busy_util(rng_) : 0.0;
    // Faults map the 90-99 % of a busy GPU onto their own band (the same draws, so a
    // fault does not shift the noise of the other GPUs).
    if (s.busy && f.slow) util = 55.0 + (util - 90.0) * 10.0 / 9.0;
    if (s.busy && f.data_stall) util = 2.0 + (util - 90.0) * 3.0 / 9.0;
    if (f.hang) util = 0.0;
    // A hung kernel holds memory and burns some power but does no work.
    double load = s.busy ? (f.hang ? 0.3 : util / 100.0) : 0.0;
    double temp_target = 35.0 + 42.0 * load;
    if (f.thermal) temp_target = 92.0;
    s.temp_c = Approach(s.temp_c, temp_target, dt_s, 20.0);
    double power_target = info_.idle_w + (info_.tdp_w - info_.idle_w) * load;
    if (f.thermal) power_target = std::min(power_target, info_.tdp_w * 0.6);
    s.power_w = Approach(s.power_w, power_target, dt_s, 2.0);
    bool throttled = f.thermal;
    double clock = s.busy ? static_cast<double>(info_.max_sm_clock_mhz) : 345.0;
    if (f.slow || f.thermal) clock *= 0.6;

    GpuSample g;
    g.index = static_cast<int>(i);
    g.util_pct = util;
    g.mem_used_mib = s.busy ? static_cast<int64_t>(static_cast<double>(devices_[i].memory_mib) *
                                                   (0.85 + 0.01 * jitter(rng_)))
                            : 0;
    g.temp_c = std::round((s.temp_c + 0.3 * jitter(rng_)) * 10) / 10;
    g.power_w = std::round(s.power_w * 10) / 10;
    g.sm_clock_mhz = static_cast<int64_t>(clock);
    g.throttled = throttled;
    g.ecc_uncorrectable = s.ecc;
    g.xid_last = s.xid_last;
    g.xid_count = s.xid_count;
    out.push_back(g);
  }
  return out;
}

}  // namespace trainyard::agent
