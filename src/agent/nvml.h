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
// Links: the NVLinks of every GPU ("gpu0/nvlink3", kind "nvlink"), then the node's
// InfiniBand ports (links.h); of both, those seen up at least once since Open
// (KeepLinksSeenUp: a never-active NVLink is one without a bridge or switch behind it).
// The NVLink functions are optional: a driver without them (older than NVLink) still
// loads, and its nodes report InfiniBand only. A GPU's NVLinks are looked for once, at
// the first sample that reaches it: a link index whose state reads NOT_SUPPORTED or
// INVALID_ARGUMENT does not exist. A link found then is read at every later sample;
// one whose state cannot be read any more (the GPU fell off the bus) reads down, its
// counters at their last values. `errors` sums the link's four data-link error
// counters (replay, recovery, CRC flit, CRC data) as the driver counts them.
//
// Thread-safety: as GpuBackend; NVML itself is thread-safe.
#pragma once

#include <array>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "agent/gpu.h"
#include "agent/links.h"

namespace trainyard::agent {

inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

class NvmlGpus : public GpuBackend {
 public:
  // Loads `library` (a soname or a path) and initialises NVML; InfiniBand ports are
  // read under `infiniband_root`. Errors:
  //   NOT_FOUND   "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver?); use
  //               --simulated-gpus N to run without GPUs"
  //   UNAVAILABLE the library lacks a function we need, or nvmlInit_v2 failed.
  static Result<std::unique_ptr<NvmlGpus>> Open(const std::string& library = kNvmlLibrary,
                                                std::string infiniband_root = kInfinibandSysfsRoot);
  ~NvmlGpus() override;  // nvmlShutdown, dlclose

  Result<std::vector<GpuDevice>> Discover() override;
  Result<std::vector<GpuSample>> Sample(Timestamp now) override;
  // NVLinks, then InfiniBand ports (see above).
  std::vector<LinkSample> SampleLinks() override;
  bool simulated() const override { return false; }

  struct Api;  // the resolved function pointers (nvml.cc)

 private:
  struct NvLink {
    unsigned int gpu = 0;
    unsigned int link = 0;
    std::array<unsigned long long, 4> counters{};  // last values read, by counter type
  };

  NvmlGpus(void* handle, std::unique_ptr<Api> api, std::string infiniband_root);
  // Looks for the NVLinks of GPUs not probed yet; then samples every one found.
  std::vector<LinkSample> SampleNvLinks();

  void* handle_;
  std::unique_ptr<Api> api_;
  const std::string infiniband_root_;
  std::vector<bool> probed_;     // by GPU index: its NVLinks have been looked for
  std::vector<NvLink> nvlinks_;  // those found, in (GPU, link) order
  std::set<std::string> links_seen_up_;
};

}  // namespace trainyard::agent
