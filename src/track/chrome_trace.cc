#include "track/chrome_trace.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "core/names.h"

namespace trainyard::track {
namespace {

using nlohmann::json;

// The event kind the server records when it starts preempting a job: the moment the
// ranks are sent their notice signal (server/cluster.cc).
constexpr std::string_view kPreemptionNoticeKind = "Preempting";

// Text that serialises: invalid UTF-8 bytes become U+FFFD (json::dump throws on them).
std::string Utf8(std::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t bad = FirstInvalidUtf8(s.substr(pos));
    if (bad == std::string_view::npos) {
      out.append(s.substr(pos));
      break;
    }
    out.append(s.substr(pos, bad));
    out.append("\xEF\xBF\xBD");
    pos += bad + 1;
  }
  return out;
}

struct Track {
  int64_t tid = 0;
  std::string name;
};

struct Span {
  int64_t tid = 0;
  std::string category;  // "queue", "attempt", "preemption", "checkpoint", "step"
  std::string name;
  Timestamp start{};
  Duration duration{0};  // >= 0
  json args = json::object();
  std::string key;     // what the span is, unique in the timeline; seeds its OTLP id
  bool error = false;  // ended badly: OTLP status ERROR
  std::string error_message;
};

struct Instant {
  Timestamp time{};
  int64_t seq = 0;
  std::string name;
  json args = json::object();
};

struct Timeline {
  JobId job_id = 0;
  std::string process_name;
  std::vector<Track> tracks;  // ascending tid
  std::vector<Span> spans;    // by (tid, start, longest first)
  std::vector<Instant> instants;
  Timestamp begin{};  // the earliest moment drawn
  Timestamp end{};    // the latest moment drawn; >= begin
};

Duration NonNegative(Duration d) { return std::max(d, Duration{0}); }

bool EndedBadly(ExitReason r) {
  return r == ExitReason::kFailed || r == ExitReason::kStartFailed || r == ExitReason::kNodeLost ||
         r == ExitReason::kTimeLimit;
}

std::string StepKey(const StepSpan& s) {
  return "rank " + std::to_string(s.rank) + " step " + std::to_string(s.step) + " of attempt " +
         std::to_string(s.attempt);
}

Timeline BuildTimeline(const TraceInput& in) {
  TY_CHECK_MSG(in.job != nullptr, "TraceInput::job is null");
  const Job& job = *in.job;
  Timeline t;
  t.job_id = job.id;
  t.process_name =
      Utf8("job " + std::to_string(job.id) + (job.spec.name.empty() ? "" : " " + job.spec.name));
  t.tracks.push_back({kLifecycleTid, "lifecycle"});

  auto add = [&t](Span s) {
    s.duration = NonNegative(s.duration);
    t.spans.push_back(std::move(s));
  };
  auto between = [](Timestamp from, Timestamp to) { return NonNegative(to - from); };

  std::vector<store::JobEvent> events = in.events;
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return std::tie(a.time, a.seq) < std::tie(b.time, b.seq);
  });

  // Lifecycle: waits and attempts. A wait ends where the next attempt starts; the one
  // after the last attempt (or, with none, after submit) ends now, or when the job
  // reached a terminal state without starting again.
  const Timestamp last_moment = IsTerminal(job.state) ? job.state_time : in.now;
  const std::vector<Attempt>& attempts = job.attempts;
  auto wait_span = [&](size_t ordinal, Timestamp from, Timestamp to, json args) {
    Span s;
    s.tid = kLifecycleTid;
    s.category = "queue";
    s.name = ordinal == 0 ? "queued" : "requeued";
    s.start = from;
    s.duration = between(from, to);
    s.args = std::move(args);
    s.args["wait"] = FormatDuration(s.duration);
    s.key = "wait " + std::to_string(ordinal);
    add(std::move(s));
  };
  size_t waits = 0;
  for (size_t i = 0; i < attempts.size(); ++i) {
    const Attempt& a = attempts[i];
    if (i == 0) {
      wait_span(waits++, job.submit_time, a.start_time, json::object());
    } else if (attempts[i - 1].end_time) {
      const Attempt& prev = attempts[i - 1];
      wait_span(waits++, *prev.end_time, a.start_time,
                {{"after_attempt", prev.index},
                 {"after", std::string(ExitReasonName(prev.exit_reason))}});
    }

    const bool open = !a.end_time.has_value();
    const Timestamp end = open ? std::max(in.now, a.start_time) : *a.end_time;
    Span s;
    s.tid = kLifecycleTid;
    s.category = "attempt";
    s.name = "attempt " + std::to_string(a.index);
    s.start = a.start_time;
    s.duration = between(a.start_time, end);
    s.key = s.name;
    json nodes = json::array();
    for (const std::string& n : a.nodes) nodes.push_back(Utf8(n));
    s.args = {{"attempt", a.index}, {"nodes", std::move(nodes)}};
    if (open) {
      s.args["exit_reason"] = "running";
    } else {
      s.args["exit_reason"] = std::string(ExitReasonName(a.exit_reason));
      s.args["exit_code"] = a.exit_code;
      s.error_message = Utf8(a.message);
      s.args["message"] = s.error_message;
      s.args["lost_work"] = FormatDuration(NonNegative(a.lost_work));
      s.args["lost_work_ms"] = NonNegative(a.lost_work).count();
      s.error = EndedBadly(a.exit_reason);
    }
    add(std::move(s));

    // The grace period: from the first preemption notice within the attempt to its end.
    for (const store::JobEvent& e : events) {
      if (e.kind != kPreemptionNoticeKind || e.time < a.start_time || e.time > end) continue;
      Span g;
      g.tid = kLifecycleTid;
      g.category = "preemption";
      g.name = "grace period";
      g.start = e.time;
      g.duration = between(e.time, end);
      g.key = "grace period of attempt " + std::to_string(a.index);
      g.args = {{"attempt", a.index}, {"notice", Utf8(e.message)}, {"actor", Utf8(e.actor)}};
      if (open) g.args["open"] = true;
      add(std::move(g));
      break;
    }
  }
  if (attempts.empty()) {
    wait_span(waits++, job.submit_time, last_moment,
              {{"state", std::string(JobStateName(job.state))}, {"reason", Utf8(job.reason)}});
  } else if (const Attempt& last = attempts.back();
             last.end_time && (!IsTerminal(job.state) || job.state_time > *last.end_time)) {
    wait_span(waits++, *last.end_time, std::max(last_moment, *last.end_time),
              {{"after_attempt", last.index},
               {"after", std::string(ExitReasonName(last.exit_reason))},
               {"state", std::string(JobStateName(job.state))},
               {"reason", Utf8(job.reason)}});
  }

  // Checkpoint writes, and the job's latest checkpoint when the ranks' reports lack it.
  std::vector<CheckpointSpan> checkpoints = in.checkpoints;
  if (job.checkpoint) {
    const CheckpointInfo& c = *job.checkpoint;
    const bool reported = std::any_of(checkpoints.begin(), checkpoints.end(), [&](const auto& s) {
      return s.step == c.step && s.path == c.path;
    });
    if (!reported) {
      const Duration write = NonNegative(c.write_duration);
      int32_t attempt = -1;  // the attempt it was written in, when one holds its time
      for (const Attempt& a : attempts) {
        if (a.start_time <= c.completed_at && (!a.end_time || c.completed_at <= *a.end_time)) {
          attempt = a.index;
        }
      }
      checkpoints.push_back({attempt, c.step, c.completed_at - write, write, c.path});
    }
  }
  for (const CheckpointSpan& c : checkpoints) {
    Span s;
    s.tid = kCheckpointsTid;
    s.category = "checkpoint";
    s.name = "checkpoint step " + std::to_string(c.step);
    s.start = c.started;
    s.duration = c.duration;
    s.key = s.name + " of attempt " + std::to_string(c.attempt);
    s.args = {{"step", c.step}, {"path", Utf8(c.path)}};
    if (c.attempt >= 0) s.args["attempt"] = c.attempt;
    add(std::move(s));
  }
  if (!checkpoints.empty()) t.tracks.push_back({kCheckpointsTid, "checkpoints"});

  // Steps, one thread per rank.
  std::set<int32_t> ranks;
  for (const StepSpan& st : in.steps) {
    if (st.rank < 0) continue;
    ranks.insert(st.rank);
    Span s;
    s.tid = kFirstRankTid + st.rank;
    s.category = "step";
    s.name = "step " + std::to_string(st.step);
    s.start = st.start;
    s.duration = st.duration;
    s.key = StepKey(st);
    s.args = {{"step", st.step}, {"rank", st.rank}, {"attempt", st.attempt}};
    add(std::move(s));
  }
  for (int32_t r : ranks) t.tracks.push_back({kFirstRankTid + r, "rank " + std::to_string(r)});

  for (const store::JobEvent& e : events) {
    Instant i;
    i.time = e.time;
    i.seq = e.seq;
    i.name = e.kind.empty() ? "event" : Utf8(e.kind);
    i.args = {{"message", Utf8(e.message)}, {"actor", Utf8(e.actor)}, {"seq", e.seq}};
    t.instants.push_back(std::move(i));
  }

  // Nesting needs a parent before its children: by start, then the longer first.
  std::stable_sort(t.spans.begin(), t.spans.end(), [](const Span& a, const Span& b) {
    return std::make_tuple(a.tid, a.start, -a.duration.count()) <
           std::make_tuple(b.tid, b.start, -b.duration.count());
  });
  // Keys seed span ids, so they must be unique: number repeats ("step 5 ... #2").
  std::map<std::string, int> seen;
  for (Span& s : t.spans) {
    if (int n = ++seen[s.key]; n > 1) s.key += " #" + std::to_string(n);
  }

  t.begin = job.submit_time;
  t.end = std::max(job.submit_time, last_moment);
  for (const Span& s : t.spans) {
    t.begin = std::min(t.begin, s.start);
    t.end = std::max(t.end, s.start + s.duration);
  }
  for (const Instant& i : t.instants) {
    t.begin = std::min(t.begin, i.time);
    t.end = std::max(t.end, i.time);
  }
  return t;
}

int64_t Micros(Timestamp t) { return t.time_since_epoch().count() * 1000; }
int64_t Micros(Duration d) { return d.count() * 1000; }

json Metadata(int64_t pid, int64_t tid, std::string_view name, json args) {
  return {{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"ts", 0}, {"name", name}, {"args", args}};
}

// --- OTLP ----------------------------------------------------------------------------

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// SplitMix64's finaliser: spreads every input bit over the output.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A non-zero 64-bit id for `what` of job `job` (all-zero ids are invalid in OTLP).
uint64_t IdOf(JobId job, std::string_view what) {
  const uint64_t h = Mix(Fnv1a(what) ^ Mix(static_cast<uint64_t>(job)));
  return h == 0 ? 1 : h;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Nanos(Timestamp t) {
  // fixed64 in the proto: times before the epoch cannot be written.
  return std::to_string(std::max<int64_t>(t.time_since_epoch().count(), 0) * 1'000'000);
}

json AnyValue(const json& v) {
  if (v.is_string()) return {{"stringValue", v}};
  if (v.is_boolean()) return {{"boolValue", v}};
  if (v.is_number_integer()) return {{"intValue", std::to_string(v.get<int64_t>())}};
  if (v.is_number_float()) return {{"doubleValue", v}};
  if (v.is_array()) {
    json values = json::array();
    for (const json& e : v) values.push_back(AnyValue(e));
    return {{"arrayValue", {{"values", std::move(values)}}}};
  }
  return {{"stringValue", v.dump()}};
}

json Attribute(std::string key, const json& value) {
  return {{"key", std::move(key)}, {"value", AnyValue(value)}};
}

json Attributes(const json& args) {
  json out = json::array();
  for (const auto& [k, v] : args.items()) out.push_back(Attribute("trainyard." + k, v));
  return out;
}

}  // namespace

json JobTrace(const TraceInput& in) {
  const Timeline t = BuildTimeline(in);
  const int64_t pid = t.job_id;
  json events = json::array();
  events.push_back(Metadata(pid, 0, "process_name", {{"name", t.process_name}}));
  for (const Track& k : t.tracks) {
    events.push_back(Metadata(pid, k.tid, "thread_name", {{"name", k.name}}));
    events.push_back(Metadata(pid, k.tid, "thread_sort_index", {{"sort_index", k.tid}}));
  }
  for (const Span& s : t.spans) {
    events.push_back({{"ph", "X"},
                      {"pid", pid},
                      {"tid", s.tid},
                      {"ts", Micros(s.start)},
                      {"dur", Micros(s.duration)},
                      {"name", s.name},
                      {"cat", s.category},
                      {"args", s.args}});
  }
  for (const Instant& i : t.instants) {
    events.push_back({{"ph", "i"},
                      {"s", "t"},
                      {"pid", pid},
                      {"tid", kLifecycleTid},
                      {"ts", Micros(i.time)},
                      {"name", i.name},
                      {"cat", "event"},
                      {"args", i.args}});
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"job_id", t.job_id}, {"job", t.process_name}}}};
}

json JobTraceOtlp(const TraceInput& in, std::string_view service_name) {
  const Timeline t = BuildTimeline(in);
  const Job& job = *in.job;
  const std::string trace_id = Hex(IdOf(t.job_id, "trace")) + Hex(IdOf(t.job_id, "trace id"));
  // Span ids are unique within the trace: a clash (2^-64 per pair) is rehashed.
  std::set<uint64_t> used;
  auto span_id = [&](std::string key) {
    uint64_t id = IdOf(t.job_id, key);
    while (!used.insert(id).second) id = IdOf(t.job_id, key += "'");
    return Hex(id);
  };
  const std::string root_id = span_id("job");

  std::map<int64_t, std::string> track_names;
  for (const Track& k : t.tracks) track_names[k.tid] = k.name;

  json root_events = json::array();
  for (const Instant& i : t.instants) {
    root_events.push_back(
        {{"timeUnixNano", Nanos(i.time)}, {"name", i.name}, {"attributes", Attributes(i.args)}});
  }
  json root = {{"traceId", trace_id},
               {"spanId", root_id},
               {"name", t.process_name},
               {"kind", 1},
               {"startTimeUnixNano", Nanos(t.begin)},
               {"endTimeUnixNano", Nanos(t.end)},
               {"attributes", Attributes({{"job.id", job.id},
                                          {"job.name", Utf8(job.spec.name)},
                                          {"job.tenant", Utf8(job.spec.tenant)},
                                          {"job.queue", Utf8(job.spec.queue)},
                                          {"job.state", std::string(JobStateName(job.state))},
                                          {"job.submitted_by", Utf8(job.submitted_by)}})},
               {"events", std::move(root_events)}};
  if (job.state == JobState::kFailed) {
    root["status"] = {{"code", 2}, {"message", Utf8(job.reason)}};
  }

  json spans = json::array();
  spans.push_back(std::move(root));
  for (const Span& s : t.spans) {
    json attributes = Attributes(s.args);
    attributes.push_back(Attribute("trainyard.track", track_names[s.tid]));
    json span = {{"traceId", trace_id},
                 {"spanId", span_id(s.key)},
                 {"parentSpanId", root_id},
                 {"name", s.name},
                 {"kind", 1},
                 {"startTimeUnixNano", Nanos(s.start)},
                 {"endTimeUnixNano", Nanos(s.start + s.duration)},
                 {"attributes", std::move(attributes)}};
    if (s.error) span["status"] = {{"code", 2}, {"message", s.error_message}};
    spans.push_back(std::move(span));
  }

  json resource = {{"attributes", json::array({Attribute("service.name", Utf8(service_name)),
                                               Attribute("trainyard.job.id", t.job_id)})}};
  json scope = {{"scope", {{"name", "trainyard.track"}}}, {"spans", std::move(spans)}};
  return {{"resourceSpans", json::array({{{"resource", std::move(resource)},
                                          {"scopeSpans", json::array({std::move(scope)})}}})}};
}

}  // namespace trainyard::track
