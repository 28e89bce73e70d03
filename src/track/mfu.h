// MFU (model FLOPs utilisation): the share of the GPUs' peak arithmetic that a training
// run turns into model FLOPs, from its token throughput.
//
//   achieved FLOP/s per GPU = tokens_per_s * FLOPs per token / gpu_count
//   MFU                     = achieved / peak of one GPU at the run's precision
//
// FLOPs per token is the model's reported forward + backward count when it gives one,
// else the 6N estimate of Kaplan et al. (2020) for a dense transformer of N parameters
// (2N forward, 4N backward). 6N leaves out attention's own FLOPs, so it reads a little
// low at long context; recomputed activations are not model FLOPs under either.
//
// Peaks are NVIDIA's dense (no 2:4 sparsity) datasheet figures, in TFLOPS, for the GPU
// types Trainyard names (core/resources.h: upper-case family, "H100"); a site can set
// its own, e.g. for a GPU the table lacks or a power-capped part. "H100" is the SXM
// part and "H100-PCIE" the PCIe card; note that agents name every H100 board "H100"
// (agent/gpu.h), so a site with PCIe or NVL cards should Set its own "H100" figures.
// "fp32" is the CUDA-core rate; "tf32", "bf16", "fp16" and "fp8" are tensor-core rates.
//
// Thread-safety: PeakTable is a plain value (const methods may run concurrently; Set
// needs exclusive access); ComputeMfu is a pure function.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainyard::track {

// The precisions a peak may be given for, in the order messages list them.
inline constexpr std::string_view kMfuPrecisions[] = {"fp8", "bf16", "fp16", "tf32", "fp32"};

class PeakTable {
 public:
  // An empty table.
  PeakTable() = default;
  // NVIDIA's datasheet figures for A10, A100, B200, H100, H100-PCIE, H200, L4, L40S,
  // T4, V100 (mfu.cc cites the datasheet of each).
  static PeakTable NvidiaDatasheets();

  // Sets the dense peak of one GPU of `gpu_type` (canonicalised as NormalizeGpuType
  // does; "h100" is "H100") at `precision` (case-insensitive, one of kMfuPrecisions)
  // to `tflops`, replacing any figure there was. InvalidArgument, changing nothing,
  // when the type is empty, the precision unknown or `tflops` not a finite number > 0.
  Status Set(std::string_view gpu_type, std::string_view precision, double tflops);

  // The dense peak TFLOPS of one GPU. NotFound naming the type and the known types when
  // the type is unknown, or the precision and the type's known precisions when it has
  // no figure at that precision (a V100 has no bf16); InvalidArgument when the precision
  // is not one of kMfuPrecisions.
  Result<double> Peak(std::string_view gpu_type, std::string_view precision) const;

  // The types with at least one figure, ascending.
  std::vector<std::string> GpuTypes() const;

 private:
  std::map<std::string, std::map<std::string, double>> tflops_;  // type -> precision -> peak
};

struct MfuInput {
  double tokens_per_s = 0;  // over the whole run: the sum over ranks; >= 0
  // Training FLOPs (forward + backward) per token, as the model reports them.
  std::optional<double> model_flops_per_token;
  // Parameters, for the 6N estimate when model_flops_per_token is absent.
  std::optional<double> num_params;
  std::string gpu_type;   // e.g. "H100"
  int64_t gpu_count = 0;  // GPUs the run uses; >= 1
  std::string precision = "bf16";
};

struct Mfu {
  double value = 0;            // achieved / peak; 0.4 is 40%. May exceed 1 when the
                               // FLOPs/token or the peak is wrong.
  double achieved_tflops = 0;  // model TFLOP/s per GPU
  double peak_tflops = 0;      // dense peak of one GPU at the precision
  std::string how;             // "reported FLOPs/token" or "6N estimate"
};

// MFU of a run, with peaks from `peaks`. InvalidArgument naming the field, the value and
// what is valid for bad input ("mfu: gpu_count: must be >= 1, got 0"); Peak's errors,
// prefixed "mfu: ", when the table has no figure for the type and precision.
Result<Mfu> ComputeMfu(const MfuInput& in, const PeakTable& peaks);
// The same with PeakTable::NvidiaDatasheets().
Result<Mfu> ComputeMfu(const MfuInput& in);

}  // namespace trainyard::track
