// A job's timeline as a trace: Chrome's Trace Event Format (what Perfetto and
// chrome://tracing load) and OTLP/HTTP JSON (what an OpenTelemetry collector takes).
//
// Both are drawn from one timeline, built from the job record (its attempts and latest
// checkpoint), its event log, and the step and checkpoint spans the ranks reported:
//
//   process "job 17 train-llama" (pid = job id)
//     tid 1    "lifecycle"    spans  "queued" (submit -> first start), "requeued" (an
//                                    attempt's end -> the next start, or -> now while
//                                    pending again), "attempt N" (start -> end, or -> now
//                                    while open), "grace period" (the "Preempting" event,
//                                    which is when notices go to the ranks -> the
//                                    attempt's end);
//                             instants: every JobEvent, named by its kind ("Submitted",
//                                    "Bound", "Running", "Preempting", "Requeued", ...)
//     tid 2    "checkpoints"  spans  "checkpoint step N" (the write: start -> +duration)
//     tid 100+r "rank r"      spans  "step N", one thread per rank that reported steps,
//                                    so a straggler rank stands out
//
// Chrome timestamps ("ts") are microseconds since the Unix epoch, so a job's trace lines
// up with other traces of the same wall clock (Perfetto shows them relative to the
// first event); "dur" is microseconds. OTLP times are nanoseconds since the epoch as
// decimal strings. Timestamps have the millisecond resolution of core/units.h.
//
// Rendering never fails: events in any order, attempts without an end, a job that never
// started, negative durations (clamped to 0) and spans that end before they start
// (drawn with duration 0) all give a well-formed trace. Text that is not valid UTF-8 is
// repaired (U+FFFD) so that the result always serialises.
//
// Thread-safety: pure functions of their arguments; safe to call from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.h"
#include "core/units.h"
#include "store/store.h"

namespace trainyard::track {

// One training step of one rank, as the rank reported it.
struct StepSpan {
  int32_t attempt = 0;
  int32_t rank = 0;  // ranks < 0 are left out of the trace
  int64_t step = 0;
  Timestamp start{};
  Duration duration{0};
};

// One checkpoint write.
struct CheckpointSpan {
  int32_t attempt = 0;
  int64_t step = 0;
  Timestamp started{};
  Duration duration{0};  // the write time
  std::string path;
};

struct TraceInput {
  const Job* job = nullptr;  // REQUIRES: not null
  // The job's history (Store::ListEvents), in any order; sorted by (time, seq) here.
  std::vector<store::JobEvent> events;
  std::vector<StepSpan> steps;
  // The job's latest checkpoint (Job::checkpoint) is drawn too when no span here has
  // its step and path.
  std::vector<CheckpointSpan> checkpoints;
  Timestamp now{};  // where open spans (a running attempt, a pending wait) end
};

inline constexpr int64_t kLifecycleTid = 1;
inline constexpr int64_t kCheckpointsTid = 2;
inline constexpr int64_t kFirstRankTid = 100;  // rank r is thread kFirstRankTid + r

// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}: metadata events
// ("M": process_name, thread_name, thread_sort_index) first, then the spans ("X") of
// each thread in time order, then the events ("i", thread-scoped on "lifecycle"). Every
// event has pid, tid and ts; every "X" has dur >= 0.
nlohmann::json JobTrace(const TraceInput& in);

// The same timeline as OTLP/HTTP JSON (ExportTraceServiceRequest):
// resourceSpans[0].resource carries service.name = `service_name` and the job id;
// scopeSpans[0].spans holds a root span for the job (submit -> its last moment) and one
// child per timeline span, parented to the root, with its thread in the attribute
// "trainyard.track". Events become span events of the root span. The trace id (32 hex
// digits) is a hash of the job id and each span id (16 hex digits) a hash of the job id
// and what the span is ("attempt 1", "rank 3 step 1200 of attempt 1"), so the same input
// gives the same ids and a job's trace can be looked up from its id.
// Attempts that ended badly (failed, start-failed, node-lost, time-limit) and the root
// of a Failed job have status code 2 (ERROR).
nlohmann::json JobTraceOtlp(const TraceInput& in, std::string_view service_name);

}  // namespace trainyard::track
