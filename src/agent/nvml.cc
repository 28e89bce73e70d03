#include "agent/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <limits>

#include "core/names.h"

namespace trainyard::agent {

// The parts of nvml.h we use, declared from NVIDIA's documented ABI.
namespace {
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorInvalidArgument = 2;
constexpr nvmlReturn_t kNvmlErrorNotSupported = 3;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
constexpr int kNvmlTemperatureGpu = 0;          // NVML_TEMPERATURE_GPU
constexpr int kNvmlClockSm = 1;                 // NVML_CLOCK_SM
constexpr int kNvmlMemoryErrorUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kNvmlVolatileEcc = 0;             // NVML_VOLATILE_ECC: since the last driver load
constexpr unsigned kNvmlBufferSize = 96;        // NVML_DEVICE_{NAME_V2,UUID_V2}_BUFFER_SIZE
// Throttle reasons that mean "held down": SW power cap, HW slowdown, SW thermal,
// HW thermal, HW power brake. Idle and application-clock settings are not throttling.
constexpr unsigned long long kThrottledMask = 0x4ULL | 0x8ULL | 0x20ULL | 0x40ULL | 0x80ULL;
using nvmlEnableState_t = int;
constexpr nvmlEnableState_t kNvmlFeatureEnabled = 1;  // NVML_FEATURE_ENABLED
constexpr unsigned kNvmlNvLinkMaxLinks = 18;          // NVML_NVLINK_MAX_LINKS
// The nvmlNvLinkErrorCounter_t values we sum are 0..3: NVML_NVLINK_ERROR_DL_REPLAY,
// _DL_RECOVERY, _DL_CRC_FLIT, _DL_CRC_DATA (NvLink::counters holds one per value).
}  // namespace

struct NvmlGpus::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*get_count)(unsigned int*);
  nvmlReturn_t (*get_handle)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*get_minor)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*get_utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*get_temperature)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*get_power)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*get_clock)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*get_throttle)(nvmlDevice_t, unsigned long long*);
  nvmlReturn_t (*get_ecc)(nvmlDevice_t, int, int, unsigned long long*);
  // Optional (null when the driver lacks them).
  nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned int, nvmlEnableState_t*);
  nvmlReturn_t (*nvlink_error_counter)(nvmlDevice_t, unsigned int, int, unsigned long long*);

  std::string Error(nvmlReturn_t r) const {
    const char* s = error_string != nullptr ? error_string(r) : nullptr;
    return s != nullptr ? std::string(s) : "NVML error " + std::to_string(r);
  }
};

namespace {

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn*& out, std::string& missing) {
  out = reinterpret_cast<Fn*>(dlsym(handle, name));
  if (out == nullptr && missing.empty()) missing = name;
  return out != nullptr;
}

template <typename Fn>
void ResolveOptional(void* handle, const char* name, Fn*& out) {
  out = reinterpret_cast<Fn*>(dlsym(handle, name));
}

}  // namespace

Result<std::unique_ptr<NvmlGpus>> NvmlGpus::Open(const std::string& library,
                                                 std::string infiniband_root) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return NotFound("NVML: " + library +
                    " not found (no NVIDIA driver?); use --simulated-gpus N to run without GPUs");
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  Resolve(handle, "nvmlInit_v2", api->init, missing);
  Resolve(handle, "nvmlShutdown", api->shutdown, missing);
  Resolve(handle, "nvmlErrorString", api->error_string, missing);
  Resolve(handle, "nvmlDeviceGetCount_v2", api->get_count, missing);
  Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", api->get_handle, missing);
  Resolve(handle, "nvmlDeviceGetName", api->get_name, missing);
  Resolve(handle, "nvmlDeviceGetUUID", api->get_uuid, missing);
  Resolve(handle, "nvmlDeviceGetMemoryInfo", api->get_memory, missing);
  Resolve(handle, "nvmlDeviceGetUtilizationRates", api->get_utilization, missing);
  Resolve(handle, "nvmlDeviceGetTemperature", api->get_temperature, missing);
  Resolve(handle, "nvmlDeviceGetPowerUsage", api->get_power, missing);
  Resolve(handle, "nvmlDeviceGetClockInfo", api->get_clock, missing);
  Resolve(handle, "nvmlDeviceGetCurrentClocksThrottleReasons", api->get_throttle, missing);
  Resolve(handle, "nvmlDeviceGetTotalEccErrors", api->get_ecc, missing);
  ResolveOptional(handle, "nvmlDeviceGetMinorNumber", api->get_minor);
  ResolveOptional(handle, "nvmlDeviceGetNvLinkState", api->nvlink_state);
  ResolveOptional(handle, "nvmlDeviceGetNvLinkErrorCounter", api->nvlink_error_counter);
  if (!missing.empty()) {
    dlclose(handle);
    return Unavailable("NVML: " + library + " has no " + missing +
                       " (driver too old, or not NVML?); use --simulated-gpus N to run without "
                       "GPUs");
  }
  if (nvmlReturn_t r = api->init(); r != kNvmlSuccess) {
    std::string msg = api->Error(r);
    dlclose(handle);
    return Unavailable("NVML: nvmlInit_v2: " + msg +
                       "; is the NVIDIA driver loaded? (use --simulated-gpus N to run without "
                       "GPUs)");
  }
  return std::unique_ptr<NvmlGpus>(
      new NvmlGpus(handle, std::move(api), std::move(infiniband_root)));
}

NvmlGpus::NvmlGpus(void* handle, std::unique_ptr<Api> api, std::string infiniband_root)
    : handle_(handle), api_(std::move(api)), infiniband_root_(std::move(infiniband_root)) {}

NvmlGpus::~NvmlGpus() {
  api_->shutdown();
  dlclose(handle_);
}

Result<std::vector<GpuDevice>> NvmlGpus::Discover() {
  unsigned int count = 0;
  if (nvmlReturn_t r = api_->get_count(&count); r != kNvmlSuccess) {
    return Unavailable("NVML: nvmlDeviceGetCount_v2: " + api_->Error(r));
  }
  std::vector<GpuDevice> out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t r = api_->get_handle(i, &dev); r != kNvmlSuccess) {
      return Unavailable("NVML: GPU " + std::to_string(i) +
                         ": nvmlDeviceGetHandleByIndex_v2: " + api_->Error(r));
    }
    GpuDevice d;
    d.index = static_cast<int>(i);
    char buf[kNvmlBufferSize] = {};
    if (api_->get_name(dev, buf, sizeof buf) == kNvmlSuccess) d.model_name = buf;
    char uuid[kNvmlBufferSize] = {};
    if (nvmlReturn_t r = api_->get_uuid(dev, uuid, sizeof uuid); r != kNvmlSuccess) {
      return Unavailable("NVML: GPU " + std::to_string(i) +
                         ": nvmlDeviceGetUUID: " + api_->Error(r));
    }
    d.uuid = uuid;
    d.type = GpuTypeFromModelName(d.model_name);
    nvmlMemory_t mem{};
    if (api_->get_memory(dev, &mem) == kNvmlSuccess) {
      d.memory_mib = static_cast<int64_t>(mem.total / (1024 * 1024));
    }
    if (unsigned int minor = 0; api_->get_minor && api_->get_minor(dev, &minor) == kNvmlSuccess) {
      d.minor = static_cast<int>(minor);
    }
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<GpuSample>> NvmlGpus::Sample(Timestamp /*now*/) {
  unsigned int count = 0;
  if (nvmlReturn_t r = api_->get_count(&count); r != kNvmlSuccess) {
    return Unavailable("NVML: nvmlDeviceGetCount_v2: " + api_->Error(r));
  }
  std::vector<GpuSample> out;
  for (unsigned int i = 0; i < count; ++i) {
    GpuSample s;
    s.index = static_cast<int>(i);
    nvmlDevice_t dev = nullptr;
    // A GPU that fell off the bus still gets a sample, with every field unavailable.
    if (api_->get_handle(i, &dev) == kNvmlSuccess) {
      nvmlUtilization_t util{};
      if (api_->get_utilization(dev, &util) == kNvmlSuccess) s.util_pct = util.gpu;
      nvmlMemory_t mem{};
      if (api_->get_memory(dev, &mem) == kNvmlSuccess) {
        s.mem_used_mib = static_cast<int64_t>(mem.used / (1024 * 1024));
      }
      unsigned int v = 0;
      if (api_->get_temperature(dev, kNvmlTemperatureGpu, &v) == kNvmlSuccess) s.temp_c = v;
      if (api_->get_power(dev, &v) == kNvmlSuccess) s.power_w = v / 1000.0;  // mW
      if (api_->get_clock(dev, kNvmlClockSm, &v) == kNvmlSuccess) s.sm_clock_mhz = v;
      unsigned long long reasons = 0;
      if (api_->get_throttle(dev, &reasons) == kNvmlSuccess) {
        s.throttled = (reasons & kThrottledMask) != 0;
      }
      unsigned long long ecc = 0;
      if (api_->get_ecc(dev, kNvmlMemoryErrorUncorrected, kNvmlVolatileEcc, &ecc) == kNvmlSuccess) {
        s.ecc_uncorrectable = static_cast<int64_t>(ecc);
      }
    }
    out.push_back(s);
  }
  return out;
}

std::vector<LinkSample> NvmlGpus::SampleLinks() {
  std::vector<LinkSample> links = SampleNvLinks();
  std::vector<LinkSample> ib = ReadInfinibandLinks(infiniband_root_);
  links.insert(links.end(), std::make_move_iterator(ib.begin()), std::make_move_iterator(ib.end()));
  return KeepLinksSeenUp(std::move(links), links_seen_up_);
}

std::vector<LinkSample> NvmlGpus::SampleNvLinks() {
  if (api_->nvlink_state == nullptr) return {};
  unsigned int count = 0;
  if (api_->get_count(&count) == kNvmlSuccess) {
    count = std::min<unsigned int>(count, kMaxGpusPerNode);
    if (probed_.size() < count) probed_.resize(count, false);
  }
  for (unsigned int i = 0; i < probed_.size() && nvlinks_.size() < kMaxNvLinks; ++i) {
    if (probed_[i]) continue;
    nvmlDevice_t dev = nullptr;
    if (api_->get_handle(i, &dev) != kNvmlSuccess) continue;  // look again next time
    std::vector<NvLink> found;
    bool answered = true;
    for (unsigned int l = 0; l < kNvmlNvLinkMaxLinks; ++l) {
      nvmlEnableState_t active = 0;
      nvmlReturn_t r = api_->nvlink_state(dev, l, &active);
      if (r == kNvmlSuccess) {
        found.push_back({i, l, {}});
      } else if (r != kNvmlErrorNotSupported && r != kNvmlErrorInvalidArgument) {
        answered = false;  // e.g. the GPU is lost: no answer about its links yet
        break;
      }
    }
    if (!answered) continue;
    probed_[i] = true;
    found.resize(std::min(found.size(), kMaxNvLinks - nvlinks_.size()));
    nvlinks_.insert(nvlinks_.end(), found.begin(), found.end());
    // A GPU probed late (it was lost at first) goes in its place.
    std::sort(nvlinks_.begin(), nvlinks_.end(), [](const NvLink& a, const NvLink& b) {
      return a.gpu != b.gpu ? a.gpu < b.gpu : a.link < b.link;
    });
  }

  std::vector<LinkSample> out;
  out.reserve(nvlinks_.size());
  for (NvLink& k : nvlinks_) {
    LinkSample s;
    s.name = "gpu" + std::to_string(k.gpu) + "/nvlink" + std::to_string(k.link);
    s.kind = "nvlink";
    s.up = false;
    nvmlDevice_t dev = nullptr;
    if (api_->get_handle(k.gpu, &dev) == kNvmlSuccess) {
      nvmlEnableState_t active = 0;
      s.up =
          api_->nvlink_state(dev, k.link, &active) == kNvmlSuccess && active == kNvmlFeatureEnabled;
      for (size_t c = 0; c < k.counters.size() && api_->nvlink_error_counter != nullptr; ++c) {
        unsigned long long v = 0;
        if (api_->nvlink_error_counter(dev, k.link, static_cast<int>(c), &v) == kNvmlSuccess) {
          k.counters[c] = v;
        }
      }
    }
    constexpr auto kMax = static_cast<unsigned long long>(std::numeric_limits<int64_t>::max());
    unsigned long long sum = 0;
    for (unsigned long long v : k.counters) sum = v > kMax - sum ? kMax : sum + v;
    s.errors = static_cast<int64_t>(sum);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace trainyard::agent
