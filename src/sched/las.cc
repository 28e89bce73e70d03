#include "sched/las.h"

namespace trainyard::sched {

int LasLevel(Duration attained_service) {
  int level = 0;
  for (int64_t bound : kLasLevelBoundsMs) {
    if (attained_service.count() >= bound) ++level;
  }
  return level;
}

int32_t LasPriority(int32_t class_value, Duration attained_service) {
  const int64_t p = static_cast<int64_t>(class_value) * kLasLevels +
                    (kLasLevels - 1 - LasLevel(attained_service));
  return static_cast<int32_t>(p);
}

Duration LasNextBound(int level) {
  if (level < 0 || level >= kLasLevels - 1) return Duration(0);
  return Duration(kLasLevelBoundsMs[level]);
}

}  // namespace trainyard::sched
