// Resources: what a replica asks for and what a node offers.
//
// GPUs are counted whole and typed ("H100", "A100"; empty = any type); a request may
// also ask for a minimum GPU memory. CPUs are in millicores, memory in bytes. All
// arithmetic saturates instead of overflowing, so absurd values (10^12 GPUs) compare
// and add without undefined behaviour; validation rejects them before they get here.
#pragma once

#include <cstdint>
#include <string>

namespace trainyard {

struct Resources {
  int64_t gpus = 0;
  // 1..999: a share of one GPU in thousandths (gpus is then 1), which other shares
  // may use at the same time; 0: whole GPUs. Set by trace replays with GPU sharing;
  // job specs do not offer it yet.
  int64_t gpu_milli = 0;
  std::string gpu_type;          // upper-case model family, e.g. "H100"; empty = any
  int64_t gpu_memory_bytes = 0;  // minimum memory per GPU; 0 = any
  int64_t milli_cpus = 0;
  int64_t memory_bytes = 0;

  bool operator==(const Resources&) const = default;
};

// Canonical GPU type: upper-case, surrounding blanks removed ("a100" -> "A100").
std::string NormalizeGpuType(std::string_view type);

// True when a GPU of `offered` type satisfies a request for `requested` (empty = any).
bool GpuTypeMatches(std::string_view requested, std::string_view offered);

// Element-wise sum / difference of the counted dimensions; the type fields are taken
// from `a`. Subtraction clamps at zero.
Resources Add(const Resources& a, const Resources& b);
Resources SubtractClamped(const Resources& a, const Resources& b);
// `r` times `n` (e.g. per-replica request times replicas), saturating.
Resources Scale(const Resources& r, int64_t n);

// True when `request` fits in `available`: enough GPUs of a matching type with enough
// memory each, enough CPUs and memory. All three dimensions must fit.
bool Fits(const Resources& request, const Resources& available);

// "8x H100, 32 CPUs, 256Gi" for messages.
std::string Describe(const Resources& r);

}  // namespace trainyard
