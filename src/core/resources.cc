#include "core/resources.h"

#include <algorithm>
#include <cctype>

#include "core/units.h"

namespace trainyard {

std::string NormalizeGpuType(std::string_view type) {
  size_t b = 0, e = type.size();
  while (b < e && std::isspace(static_cast<unsigned char>(type[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(type[e - 1]))) --e;
  std::string out(type.substr(b, e - b));
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool GpuTypeMatches(std::string_view requested, std::string_view offered) {
  if (requested.empty()) return true;
  if (requested.size() != offered.size()) return false;
  for (size_t i = 0; i < requested.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(requested[i])) !=
        std::toupper(static_cast<unsigned char>(offered[i]))) {
      return false;
    }
  }
  return true;
}

Resources Add(const Resources& a, const Resources& b) {
  Resources r = a;
  r.gpus = SaturatingAdd(a.gpus, b.gpus);
  r.milli_cpus = SaturatingAdd(a.milli_cpus, b.milli_cpus);
  r.memory_bytes = SaturatingAdd(a.memory_bytes, b.memory_bytes);
  return r;
}

Resources SubtractClamped(const Resources& a, const Resources& b) {
  Resources r = a;
  r.gpus = std::max<int64_t>(0, a.gpus - std::max<int64_t>(0, b.gpus));
  r.milli_cpus = std::max<int64_t>(0, a.milli_cpus - std::max<int64_t>(0, b.milli_cpus));
  r.memory_bytes = std::max<int64_t>(0, a.memory_bytes - std::max<int64_t>(0, b.memory_bytes));
  return r;
}

Resources Scale(const Resources& r, int64_t n) {
  Resources out = r;
  out.gpus = SaturatingMul(r.gpus, n);
  out.milli_cpus = SaturatingMul(r.milli_cpus, n);
  out.memory_bytes = SaturatingMul(r.memory_bytes, n);
  return out;
}

bool Fits(const Resources& request, const Resources& available) {
  if (request.gpus > 0) {
    if (request.gpus > available.gpus) return false;
    if (!GpuTypeMatches(request.gpu_type, available.gpu_type)) return false;
    if (request.gpu_memory_bytes > available.gpu_memory_bytes) return false;
  }
  return request.milli_cpus <= available.milli_cpus &&
         request.memory_bytes <= available.memory_bytes;
}

std::string Describe(const Resources& r) {
  std::string out;
  if (r.gpus == 1 && r.gpu_milli > 0 && r.gpu_milli < 1000) {
    out += std::to_string(r.gpu_milli) + "/1000 of one " +
           (r.gpu_type.empty() ? std::string("GPU") : r.gpu_type);
    if (r.gpu_memory_bytes > 0) out += " (" + FormatMemory(r.gpu_memory_bytes) + ")";
  } else if (r.gpus > 0) {
    out += std::to_string(r.gpus);
    out += r.gpu_type.empty() ? (r.gpus == 1 ? " GPU" : " GPUs") : "x " + r.gpu_type;
    if (r.gpu_memory_bytes > 0) out += " (" + FormatMemory(r.gpu_memory_bytes) + " each)";
  } else {
    out += "no GPU";
  }
  if (r.milli_cpus > 0) {
    out += ", ";
    if (r.milli_cpus % 1000 == 0) {
      out += std::to_string(r.milli_cpus / 1000);
    } else {
      out += std::to_string(r.milli_cpus) + "m";
    }
    out += " CPUs";
  }
  if (r.memory_bytes > 0) out += ", " + FormatMemory(r.memory_bytes) + " memory";
  return out;
}

}  // namespace trainyard
