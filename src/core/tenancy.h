// Tenants, queues and priority classes: who may use how much, and who goes first.
//
// A tenant (a team or project) owns a tree of queues. Each queue has a guaranteed
// number of GPUs (its deserved share, which it may reclaim by preemption), a limit
// (the ceiling including what it borrows from others' idle guarantees) and a weight
// for fair sharing beyond guarantees. A priority class orders jobs and says whether
// its jobs may be preempted.
//
// A tenant's quota, set by a cluster admin, bounds what its tenant admins may give
// its queues: their guarantees add up to at most Tenant::guaranteed_gpus, and no
// queue's limit exceeds Tenant::limit_gpus.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainyard {

inline constexpr int64_t kMaxQueueGpus = 10'000'000;

struct Tenant {
  std::string name;
  std::string description;
  // The quota: the most its queues' guarantees may add up to, and the most any one
  // of its queues' limit may be. The defaults leave a tenant unbounded (as tenants
  // stored before quotas existed are).
  int64_t guaranteed_gpus = kMaxQueueGpus;
  int64_t limit_gpus = kMaxQueueGpus;
  // The Unix identity its jobs' ranks run as on the nodes (docs/execution.md); -1: the
  // agent's own. uid or gid 0 only with allow_root, which a cluster admin sets.
  int64_t run_as_uid = -1;
  int64_t run_as_gid = -1;
  bool allow_root = false;

  bool operator==(const Tenant&) const = default;
};

// The largest uid or gid a tenant may run as (Linux: 2^32 - 2; kept to what every
// tool reads as a signed 32-bit number).
inline constexpr int64_t kMaxUnixId = 2'147'483'646;

// tenant.run_as: both unset (-1) or both in 0..kMaxUnixId; root's ids only with
// allow_root. InvalidArgument naming the field and value.
Status ValidateRunAs(const Tenant& t);

// `field`'s uid and gid: both unset (-1) or both in 0..kMaxUnixId. InvalidArgument
// naming the field and value otherwise. (Root is each caller's own rule.)
Status ValidateUnixIds(std::string_view field, int64_t uid, int64_t gid);

// "UID:GID", decimal, each 0..kMaxUnixId; false for anything else.
bool ParseUnixIds(std::string_view text, int64_t& uid, int64_t& gid);

struct Queue {
  std::string name;
  std::string tenant;
  std::string parent;  // empty for a top-level queue of its tenant
  int64_t guaranteed_gpus = 0;
  int64_t limit_gpus = 0;  // >= guaranteed_gpus
  double weight = 1.0;     // share of contested capacity beyond guarantees

  bool operator==(const Queue&) const = default;
};

struct PriorityClass {
  std::string name;
  int32_t value = 0;  // higher runs first and may preempt lower
  bool preemptible = true;

  bool operator==(const PriorityClass&) const = default;
};

Status ValidateTenant(const Tenant& t);
Status ValidateQueue(const Queue& q);
Status ValidatePriorityClass(const PriorityClass& p);

// The classes a fresh cluster starts with, highest first:
// p0 (1000, not preemptible), production (500), normal (100, the default),
// best-effort (0).
std::vector<PriorityClass> DefaultPriorityClasses();
inline constexpr const char* kDefaultPriorityClass = "normal";
inline constexpr const char* kDefaultTenant = "default";
inline constexpr const char* kDefaultQueue = "default";

}  // namespace trainyard
