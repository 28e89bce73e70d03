#include "core/tenancy.h"

#include <cmath>
#include <string>
#include <string_view>

#include "core/names.h"

namespace trainyard {
namespace {

Status CheckGpuRange(std::string_view field, int64_t v) {
  if (v < 0 || v > kMaxQueueGpus) {
    return InvalidArgument(std::string(field) + ": must be between 0 and " +
                           std::to_string(kMaxQueueGpus) + ", got " + std::to_string(v));
  }
  return Status::Ok();
}

}  // namespace

bool ParseUnixIds(std::string_view text, int64_t& uid, int64_t& gid) {
  const auto number = [](std::string_view s, int64_t& out) {
    if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string_view::npos)
      return false;
    out = std::stoll(std::string(s));
    return out <= kMaxUnixId;
  };
  const size_t colon = text.find(':');
  return colon != std::string_view::npos && number(text.substr(0, colon), uid) &&
         number(text.substr(colon + 1), gid);
}

Status ValidateUnixIds(std::string_view field, int64_t uid, int64_t gid) {
  const bool unset = uid == -1 && gid == -1;
  const auto in_range = [](int64_t id) { return id >= 0 && id <= kMaxUnixId; };
  if (!unset && !(in_range(uid) && in_range(gid))) {
    return InvalidArgument(std::string(field) + ": must be UID:GID, each 0.." +
                           std::to_string(kMaxUnixId) + ", got " + std::to_string(uid) + ":" +
                           std::to_string(gid));
  }
  return Status::Ok();
}

Status ValidateRunAs(const Tenant& t) {
  const std::string run_as = std::to_string(t.run_as_uid) + ":" + std::to_string(t.run_as_gid);
  const bool unset = t.run_as_uid == -1 && t.run_as_gid == -1;
  TY_RETURN_IF_ERROR(ValidateUnixIds("tenant.run_as", t.run_as_uid, t.run_as_gid));
  if (!unset && (t.run_as_uid == 0 || t.run_as_gid == 0) && !t.allow_root) {
    return InvalidArgument("tenant.run_as: " + run_as +
                           " is root's; a cluster admin must allow root for tenant " + t.name +
                           " first (allow_root)");
  }
  return Status::Ok();
}

Status ValidateTenant(const Tenant& t) {
  TY_RETURN_IF_ERROR(ValidateName("tenant.name", t.name));
  if (t.description.size() > 1024) {
    return InvalidArgument("tenant.description: must be at most 1024 characters");
  }
  TY_RETURN_IF_ERROR(CheckGpuRange("tenant.guaranteed_gpus", t.guaranteed_gpus));
  TY_RETURN_IF_ERROR(CheckGpuRange("tenant.limit_gpus", t.limit_gpus));
  TY_RETURN_IF_ERROR(ValidateRunAs(t));
  return Status::Ok();
}

Status ValidateQueue(const Queue& q) {
  TY_RETURN_IF_ERROR(ValidateName("queue.name", q.name));
  TY_RETURN_IF_ERROR(ValidateName("queue.tenant", q.tenant));
  if (!q.parent.empty()) {
    TY_RETURN_IF_ERROR(ValidateName("queue.parent", q.parent));
    if (q.parent == q.name)
      return InvalidArgument("queue.parent: a queue cannot be its own parent");
  }
  TY_RETURN_IF_ERROR(CheckGpuRange("queue.guaranteed_gpus", q.guaranteed_gpus));
  TY_RETURN_IF_ERROR(CheckGpuRange("queue.limit_gpus", q.limit_gpus));
  if (q.limit_gpus < q.guaranteed_gpus) {
    return InvalidArgument("queue.limit_gpus: must be >= guaranteed_gpus (" +
                           std::to_string(q.guaranteed_gpus) + "), got " +
                           std::to_string(q.limit_gpus));
  }
  if (!std::isfinite(q.weight) || q.weight <= 0 || q.weight > 1e6) {
    return InvalidArgument("queue.weight: must be a number in (0, 1000000], got " +
                           std::to_string(q.weight));
  }
  return Status::Ok();
}

Status ValidatePriorityClass(const PriorityClass& p) {
  TY_RETURN_IF_ERROR(ValidateName("priority_class.name", p.name));
  if (p.value < -1'000'000 || p.value > 1'000'000) {
    return InvalidArgument("priority_class.value: must be between -1000000 and 1000000, got " +
                           std::to_string(p.value));
  }
  return Status::Ok();
}

std::vector<PriorityClass> DefaultPriorityClasses() {
  return {
      {"p0", 1000, false},
      {"production", 500, true},
      {"normal", 100, true},
      {"best-effort", 0, true},
  };
}

}  // namespace trainyard
