// The NVML GPU backend: NVIDIA's management library, loaded at run time.
//
// libnvidia-ml.so.1 ships with the driver, not with the toolkit, so the agent binary
// must run on machines without it: we dlopen it and look up the dozen functions we
// use, with their types declared in nvml.cc (no CUDA or NVML headers at build time).
// A function that fails for one GPU (ECC on a board without ECC, power on a board that
// does not report it) leaves that field unavailable; only a failure to load or
// initialise the library is an error.
//
// XIDs are not read yet (they need NVML's event API): xid_last/xid_count stay empty.
//
// Thread-safety: as GpuBackend; NVML itself is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "agent/gpu.h"

namespace trainyard::agent {

inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

class NvmlGpus : public GpuBackend {
 public:
  // Loads `library` (a soname or a path) and initialises NVML. Errors:
  //   NOT_FOUND   "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver?); use
  //               --simulated-gpus N to run without GPUs"
  //   UNAVAILABLE the library lacks a function we need, or nvmlInit_v2 failed.
  static Result<std::unique_ptr<NvmlGpus>> Open(const std::string& library = kNvmlLibrary);
  ~NvmlGpus() override;  // nvmlShutdown, dlclose

  Result<std::vector<GpuDevice>> Discover() override;
  Result<std::vector<GpuSample>> Sample(Timestamp now) override;
  bool simulated() const override { return false; }

  struct Api;  // the resolved function pointers (nvml.cc)

 private:
  NvmlGpus(void* handle, std::unique_ptr<Api> api);
  void* handle_;
  std::unique_ptr<Api> api_;
};

}  // namespace trainyard::agent
