// Least attained service (LAS): the one definition of its levels and of the priority
// a job has under it, shared by the LAS ordering (ordering_las.cc) and by whoever
// builds snapshots for a policy with `ordering: las` (lifecycle/snapshot_builder.h).
//
// After Tiresias' discretised 2D-LAS: a job's attained service is the GPU-time it has
// held so far (lifecycle::AttainedService), put in a few coarse levels (under 1
// GPU-hour, under 16 GPU-hours, more). Jobs of a lower level go first, and may preempt
// jobs of a higher level within their priority class: short jobs finish quickly
// without knowing durations in advance, and coarse levels keep long jobs from being
// reordered (and preempted) on every small difference. Priority classes still come
// first: a job never preempts one of a higher class because it has had less service.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "core/units.h"

namespace trainyard::sched {

// Upper bounds of the levels below the last, in GPU-milliseconds.
inline constexpr int64_t kLasLevelBoundsMs[] = {3'600'000, 16 * 3'600'000};
inline constexpr int kLasLevels = 3;

// 0 for the least attained service, kLasLevels - 1 for the most.
int LasLevel(Duration attained_service);

// The priority a job of class value `class_value` has under LAS:
// class_value * kLasLevels + (kLasLevels - 1 - level). Orders by class first, then by
// level; a job is of higher priority than every job of its class with more service.
int32_t LasPriority(int32_t class_value, Duration attained_service);

// The least attained service at which a job reaches the level above `level`; 0 when
// `level` is the last (there is none).
Duration LasNextBound(int level);

}  // namespace trainyard::sched
