#include "protocol/faults.h"

#include "core/names.h"

namespace trainyard::protocol {

bool IsFaultKind(std::string_view name) {
  for (std::string_view k : kFaultKinds) {
    if (k == name) return true;
  }
  return false;
}

std::string_view FaultKindName(FaultKind kind) {
  for (const auto& [k, name] : kFaultKindNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

Result<FaultKind> ParseFaultKind(std::string_view name) {
  for (const auto& [kind, n] : kFaultKindNames) {
    if (n == name) return kind;
  }
  return InvalidArgument("unknown fault kind " + QuoteForMessage(name) +
                         "; valid kinds: " + ValidFaultKinds());
}

std::string ValidFaultKinds() {
  std::string out;
  for (const auto& [kind, name] : kFaultKindNames) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace trainyard::protocol
