#include "track/mfu.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/names.h"
#include "core/resources.h"

namespace trainyard::track {
namespace {

struct DatasheetRow {
  std::string_view gpu_type;
  std::string_view precision;
  double tflops;  // dense
};

// Dense peak TFLOPS of one GPU. Where a datasheet gives only figures "with sparsity"
// (marked *, "specifications are one-half lower without sparsity"), the dense figure
// here is half of it. "-" below: the GPU has no tensor cores for that precision, so it
// has no row.
constexpr DatasheetRow kDatasheets[] = {
    // NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP32 67; TF32 989*,
    // BF16 1,979*, FP16 1,979*, FP8 3,958*.
    {"H100", "fp32", 67},
    {"H100", "tf32", 494.5},
    {"H100", "bf16", 989.5},
    {"H100", "fp16", 989.5},
    {"H100", "fp8", 1979},
    // The same datasheet, H100 PCIe column: FP32 51; TF32 756*, BF16 1,513*,
    // FP16 1,513*, FP8 3,026*.
    {"H100-PCIE", "fp32", 51},
    {"H100-PCIE", "tf32", 378},
    {"H100-PCIE", "bf16", 756.5},
    {"H100-PCIE", "fp16", 756.5},
    {"H100-PCIE", "fp8", 1513},
    // NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: FP32 67; TF32 989*,
    // BF16 1,979*, FP16 1,979*, FP8 3,958* (the H100's GH100 with more memory).
    {"H200", "fp32", 67},
    {"H200", "tf32", 494.5},
    {"H200", "bf16", 989.5},
    {"H200", "fp16", 989.5},
    {"H200", "fp8", 1979},
    // NVIDIA HGX B200 datasheet, per-GPU ("Individual Blackwell GPU") column: FP32 75;
    // TF32 2.2 PF*, FP16/BF16 4.5 PF*, FP8 9 PF*.
    {"B200", "fp32", 75},
    {"B200", "tf32", 1100},
    {"B200", "bf16", 2250},
    {"B200", "fp16", 2250},
    {"B200", "fp8", 4500},
    // NVIDIA A100 Tensor Core GPU datasheet, which lists dense figures: FP32 19.5;
    // TF32 156, BF16 312, FP16 312; FP8 -. The same for the 40GB and 80GB SXM boards
    // (and the PCIe cards, which agents also name "A100").
    {"A100", "fp32", 19.5},
    {"A100", "tf32", 156},
    {"A100", "bf16", 312},
    {"A100", "fp16", 312},
    // NVIDIA A10 Tensor Core GPU datasheet (dense listed): FP32 31.2; TF32 62.5,
    // BF16 125, FP16 125; FP8 -.
    {"A10", "fp32", 31.2},
    {"A10", "tf32", 62.5},
    {"A10", "bf16", 125},
    {"A10", "fp16", 125},
    // NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3; TF32 120*, BF16 242*, FP16 242*,
    // FP8 485*.
    {"L4", "fp32", 30.3},
    {"L4", "tf32", 60},
    {"L4", "bf16", 121},
    {"L4", "fp16", 121},
    {"L4", "fp8", 242.5},
    // NVIDIA L40S GPU datasheet (dense listed): FP32 91.6; TF32 183, BF16 362.05,
    // FP16 362.05, FP8 733.
    {"L40S", "fp32", 91.6},
    {"L40S", "tf32", 183},
    {"L40S", "bf16", 362.05},
    {"L40S", "fp16", 362.05},
    {"L40S", "fp8", 733},
    // NVIDIA Tesla V100 GPU datasheet, V100 SXM2 column: single precision 15.7;
    // tensor performance (FP16 in, FP32 accumulate) 125; TF32, BF16, FP8 -.
    {"V100", "fp32", 15.7},
    {"V100", "fp16", 125},
    // The same datasheet, V100S PCIe column: 16.4; 130.
    {"V100S", "fp32", 16.4},
    {"V100S", "fp16", 130},
    // NVIDIA T4 Tensor Core GPU datasheet: single precision 8.1; mixed precision
    // (FP16/FP32) 65; TF32, BF16, FP8 -.
    {"T4", "fp32", 8.1},
    {"T4", "fp16", 65},
};

std::string Lower(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool KnownPrecision(std::string_view p) {
  return std::find(std::begin(kMfuPrecisions), std::end(kMfuPrecisions), p) !=
         std::end(kMfuPrecisions);
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Status BadPrecision(std::string_view precision) {
  std::vector<std::string> known(std::begin(kMfuPrecisions), std::end(kMfuPrecisions));
  return InvalidArgument("precision: must be one of " + Join(known) + ", got " +
                         QuoteForMessage(precision));
}

}  // namespace

PeakTable PeakTable::NvidiaDatasheets() {
  PeakTable t;
  for (const DatasheetRow& r : kDatasheets) {
    t.tflops_[std::string(r.gpu_type)][std::string(r.precision)] = r.tflops;
  }
  return t;
}

Status PeakTable::Set(std::string_view gpu_type, std::string_view precision, double tflops) {
  std::string type = NormalizeGpuType(gpu_type);
  if (type.empty()) return InvalidArgument("gpu_type: must not be empty");
  std::string p = Lower(precision);
  if (!KnownPrecision(p)) return BadPrecision(precision);
  if (!std::isfinite(tflops) || tflops <= 0) {
    return InvalidArgument("peak TFLOPS of " + type + " at " + p + ": must be a number > 0, got " +
                           Number(tflops));
  }
  tflops_[std::move(type)][std::move(p)] = tflops;
  return Status::Ok();
}

Result<double> PeakTable::Peak(std::string_view gpu_type, std::string_view precision) const {
  const std::string type = NormalizeGpuType(gpu_type);
  const std::string p = Lower(precision);
  if (!KnownPrecision(p)) return BadPrecision(precision);
  auto it = tflops_.find(type);
  if (it == tflops_.end()) {
    const std::string known = GpuTypes().empty() ? "none" : Join(GpuTypes());
    return NotFound("no peak TFLOPS known for GPU type " + QuoteForMessage(gpu_type) +
                    "; known types: " + known + "; set a peak for it to compute MFU");
  }
  auto at = it->second.find(p);
  if (at == it->second.end()) {
    std::vector<std::string> has;
    for (std::string_view q : kMfuPrecisions) {
      if (it->second.count(std::string(q))) has.emplace_back(q);
    }
    return NotFound("no " + p + " peak TFLOPS known for GPU type " + type + "; it has " +
                    Join(has));
  }
  return at->second;
}

std::vector<std::string> PeakTable::GpuTypes() const {
  std::vector<std::string> out;
  for (const auto& [type, peaks] : tflops_) {
    if (!peaks.empty()) out.push_back(type);
  }
  return out;
}

Result<Mfu> ComputeMfu(const MfuInput& in, const PeakTable& peaks) {
  if (in.gpu_count < 1) {
    return InvalidArgument("mfu: gpu_count: must be >= 1, got " + std::to_string(in.gpu_count));
  }
  if (!std::isfinite(in.tokens_per_s) || in.tokens_per_s < 0) {
    return InvalidArgument("mfu: tokens_per_s: must be a number >= 0, got " +
                           Number(in.tokens_per_s));
  }
  Mfu m;
  double flops_per_token = 0;
  if (in.model_flops_per_token) {
    flops_per_token = *in.model_flops_per_token;
    if (!std::isfinite(flops_per_token) || flops_per_token <= 0) {
      return InvalidArgument("mfu: model_flops_per_token: must be a number > 0, got " +
                             Number(flops_per_token));
    }
    m.how = "reported FLOPs/token";
  } else if (in.num_params) {
    if (!std::isfinite(*in.num_params) || *in.num_params <= 0) {
      return InvalidArgument("mfu: num_params: must be a number > 0, got " +
                             Number(*in.num_params));
    }
    flops_per_token = 6 * *in.num_params;
    m.how = "6N estimate";
  } else {
    return InvalidArgument(
        "mfu: needs model_flops_per_token or num_params (for the 6N estimate); got neither");
  }
  if (NormalizeGpuType(in.gpu_type).empty()) {
    return InvalidArgument("mfu: gpu_type: missing; the GPU type the run used, one of " +
                           Join(peaks.GpuTypes()));
  }
  Result<double> peak = peaks.Peak(in.gpu_type, in.precision);
  if (!peak.ok()) return Status(peak.status().code(), "mfu: " + peak.status().message());

  m.peak_tflops = *peak;
  m.achieved_tflops = in.tokens_per_s * flops_per_token / static_cast<double>(in.gpu_count) / 1e12;
  if (!std::isfinite(m.achieved_tflops)) {
    return InvalidArgument("mfu: tokens_per_s " + Number(in.tokens_per_s) + " times " +
                           Number(flops_per_token) + " FLOPs/token is out of range");
  }
  m.value = m.achieved_tflops / m.peak_tflops;
  return m;
}

Result<Mfu> ComputeMfu(const MfuInput& in) { return ComputeMfu(in, PeakTable::NvidiaDatasheets()); }

}  // namespace trainyard::track
