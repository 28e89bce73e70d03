// A stand-in for libnvidia-ml.so.1, built as a shared library for gpu_test: two GPUs,
// the second without ECC support and with power throttling, so that the loader, the
// per-field "unavailable" handling and the unit conversions run without a driver.
//
// NVLink: GPU 0 has links 0 (active; error counters replay 3, recovery 1, CRC flit 2,
// CRC data 0) and 1 (inactive; recovery 4, CRC data not supported); its other link
// indices are INVALID_ARGUMENT. GPU 1 has no NVLink (NOT_SUPPORTED). Tests change that
// through the fakeNvml* functions at the end (dlsym them from the same library); built
// with FAKE_NVML_WITHOUT_NVLINK the library lacks the NVLink functions, like a driver
// older than NVLink.
#include <cstring>

extern "C" {
struct nvmlDevice_st {
  int index;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};

static nvmlDevice_st g_devices[2] = {{0}, {1}};
static int g_initialised = 0;

int nvmlInit_v2() {
  ++g_initialised;
  return 0;
}
int nvmlShutdown() {
  --g_initialised;
  return 0;
}
const char* nvmlErrorString(int r) { return r == 3 ? "Not Supported" : "Unknown Error"; }
int nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_st** d) {
  if (i >= 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *d = &g_devices[i];
  return 0;
}
int nvmlDeviceGetName(nvmlDevice_st* d, char* buf, unsigned int len) {
  const char* name = d->index == 0 ? "NVIDIA H100 80GB HBM3" : "Tesla V100-SXM2-16GB";
  std::strncpy(buf, name, len - 1);
  return 0;
}
int nvmlDeviceGetUUID(nvmlDevice_st* d, char* buf, unsigned int len) {
  const char* uuid = d->index == 0 ? "GPU-00000000-1111-2222-3333-444444444444"
                                   : "GPU-55555555-6666-7777-8888-999999999999";
  std::strncpy(buf, uuid, len - 1);
  return 0;
}
// Device nodes need not follow the index (as after a GPU is hot-removed): 0 -> 4, 1 -> 2.
int nvmlDeviceGetMinorNumber(nvmlDevice_st* d, unsigned int* minor) {
  *minor = d->index == 0 ? 4 : 2;
  return 0;
}
int nvmlDeviceGetMemoryInfo(nvmlDevice_st*, nvmlMemory_t* m) {
  m->total = 81559ULL << 20;
  m->used = 1024ULL << 20;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_st* d, nvmlUtilization_t* u) {
  u->gpu = d->index == 0 ? 97 : 0;
  u->memory = 50;
  return 0;
}
int nvmlDeviceGetTemperature(nvmlDevice_st*, int sensor, unsigned int* t) {
  if (sensor != 0) return 2;
  *t = 71;
  return 0;
}
int nvmlDeviceGetPowerUsage(nvmlDevice_st*, unsigned int* mw) {
  *mw = 612500;
  return 0;
}
int nvmlDeviceGetClockInfo(nvmlDevice_st*, int type, unsigned int* mhz) {
  if (type != 1) return 2;
  *mhz = 1980;
  return 0;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_st* d, unsigned long long* r) {
  *r = d->index == 0 ? 0x1ULL /* idle: not throttling */ : 0x4ULL /* SW power cap */;
  return 0;
}
int nvmlDeviceGetTotalEccErrors(nvmlDevice_st* d, int, int, unsigned long long* n) {
  if (d->index == 1) return 3;  // NVML_ERROR_NOT_SUPPORTED
  *n = 2;
  return 0;
}

#ifndef FAKE_NVML_WITHOUT_NVLINK
enum { kMaxLinks = 18, kCounters = 4 };
static const unsigned long long kUnsupported = ~0ULL;
struct FakeNvLink {
  int exists;
  int active;
  unsigned long long counters[kCounters];  // kUnsupported: NOT_SUPPORTED
};
static FakeNvLink g_nvlinks[2][kMaxLinks];
static int g_lost[2];

void fakeNvmlReset() {
  std::memset(g_nvlinks, 0, sizeof g_nvlinks);
  std::memset(g_lost, 0, sizeof g_lost);
  g_nvlinks[0][0] = {1, 1, {3, 1, 2, 0}};
  g_nvlinks[0][1] = {1, 0, {0, 4, 0, kUnsupported}};
}
// Defaults in place before the first call.
__attribute__((constructor)) static void FakeNvmlLoad() { fakeNvmlReset(); }

void fakeNvmlSetNvLinkState(unsigned int gpu, unsigned int link, int active) {
  g_nvlinks[gpu][link].exists = 1;
  g_nvlinks[gpu][link].active = active;
}
void fakeNvmlSetNvLinkErrorCounter(unsigned int gpu, unsigned int link, int counter,
                                   unsigned long long value) {
  g_nvlinks[gpu][link].counters[counter] = value;
}
// A lost GPU answers every NVLink call with NVML_ERROR_GPU_IS_LOST.
void fakeNvmlSetGpuLost(unsigned int gpu, int lost) { g_lost[gpu] = lost; }

static int NvLinkStatus(nvmlDevice_st* d, unsigned int link) {
  if (g_lost[d->index]) return 15;  // NVML_ERROR_GPU_IS_LOST
  if (d->index == 1) return 3;      // NVML_ERROR_NOT_SUPPORTED: no NVLink on this board
  if (link >= kMaxLinks || !g_nvlinks[d->index][link].exists) return 2;  // INVALID_ARGUMENT
  return 0;
}
int nvmlDeviceGetNvLinkState(nvmlDevice_st* d, unsigned int link, int* is_active) {
  if (int r = NvLinkStatus(d, link); r != 0) return r;
  *is_active = g_nvlinks[d->index][link].active;
  return 0;
}
int nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_st* d, unsigned int link, int counter,
                                    unsigned long long* value) {
  if (int r = NvLinkStatus(d, link); r != 0) return r;
  if (counter < 0 || counter >= kCounters) return 2;
  unsigned long long v = g_nvlinks[d->index][link].counters[counter];
  if (v == kUnsupported) return 3;
  *value = v;
  return 0;
}
#endif
}
