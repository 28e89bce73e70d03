#include "sim/traces.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <sstream>
#include <unordered_map>

#include "core/names.h"
#include "core/resources.h"
#include "sim/csv.h"

namespace trainyard::sim {
namespace {

constexpr int64_t kMsPerSecond = 1000;

std::string Join(const std::vector<std::string_view>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += v[i];
  }
  return out;
}

std::string Seconds(int64_t s) { return FormatDuration(Duration(s * kMsPerSecond)); }

// Collects the warnings of one read: every quirk or left-out row gets a line, up to
// `max_per_kind` lines per kind, then a summary line per kind at the end.
class QuirkLog {
 public:
  QuirkLog(std::string file, bool strict, size_t max_per_kind)
      : file_(std::move(file)), strict_(strict), max_per_kind_(max_per_kind) {}

  // A known data quirk, handled by `action` ("pod skipped"). With strict, an error.
  Status Quirk(std::string_view kind, Diagnostic d, std::string_view action) {
    if (strict_) {
      d.message += " (not accepted when reading strictly)";
      return InvalidArgument(d.ToString());
    }
    d.message += "; ";
    d.message += action;
    Note(kind, d);
    return Status::Ok();
  }

  // A row left out by the caller's choice: a warning in both modes.
  void Note(std::string_view kind, const Diagnostic& d) {
    auto it =
        std::find_if(kinds_.begin(), kinds_.end(), [&](const auto& k) { return k.first == kind; });
    if (it == kinds_.end()) {
      kinds_.emplace_back(std::string(kind), 0);
      it = kinds_.end() - 1;
    }
    if (++it->second <= max_per_kind_) lines_.push_back(d.ToString());
  }

  std::vector<std::string> Finish() {
    for (const auto& [kind, count] : kinds_) {
      if (count > max_per_kind_) {
        lines_.push_back(file_ + ": " + std::to_string(count) + " rows in all: " + kind +
                         " (only the first " + std::to_string(max_per_kind_) + " are listed)");
      }
    }
    return std::move(lines_);
  }

 private:
  std::string file_;
  bool strict_;
  size_t max_per_kind_;
  std::vector<std::pair<std::string, size_t>> kinds_;
  std::vector<std::string> lines_;
};

void SortBySubmit(std::vector<TraceJob>& jobs) {
  auto earlier = [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; };
  if (std::is_sorted(jobs.begin(), jobs.end(), earlier)) return;
  std::stable_sort(jobs.begin(), jobs.end(), earlier);
}

// ---- Timestamps ------------------------------------------------------------------

// "YYYY-MM-DD HH:MM:SS" (or with a 'T') as seconds since the Unix epoch, read as UTC:
// the trace's local time zone is unknown and only differences matter.
std::optional<int64_t> ParseTimestamp(std::string_view s) {
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  auto num = [&](size_t at, size_t len, int& out) {
    out = 0;
    for (size_t i = at; i < at + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, se;
  if (!num(0, 4, y) || !num(5, 2, mo) || !num(8, 2, d) || !num(11, 2, h) || !num(14, 2, mi) ||
      !num(17, 2, se)) {
    return std::nullopt;
  }
  std::chrono::year_month_day ymd{std::chrono::year(y),
                                  std::chrono::month(static_cast<unsigned>(mo)),
                                  std::chrono::day(static_cast<unsigned>(d))};
  if (!ymd.ok() || h > 23 || mi > 59 || se > 59) return std::nullopt;
  int64_t days = std::chrono::sys_days(ymd).time_since_epoch().count();
  return days * 86400 + h * 3600 + mi * 60 + se;
}

// ---- JSON with line numbers ------------------------------------------------------

struct JsonField;

// A parsed JSON value that remembers the line it starts on.
struct JsonValue {
  enum class Kind : uint8_t { kNull, kBool, kInt, kFloat, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  int line = 0;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string text;  // kString: the value; kFloat: the number as written
  std::vector<JsonValue> items;
  std::vector<JsonField> fields;  // kObject, in the order written

  const JsonValue* Find(std::string_view key) const;
};

// A member of an object (a struct, not a std::pair: a pair may not hold the
// incomplete JsonValue in its own definition).
struct JsonField {
  std::string key;
  JsonValue value;
};

const JsonValue* JsonValue::Find(std::string_view key) const {
  for (const JsonField& f : fields) {
    if (f.key == key) return &f.value;
  }
  return nullptr;
}

std::string Describe(const JsonValue& v) {
  switch (v.kind) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return v.boolean ? "true" : "false";
    case JsonValue::Kind::kInt:
      return std::to_string(v.integer);
    case JsonValue::Kind::kFloat:
      return v.text;
    case JsonValue::Kind::kString:
      return QuoteForMessage(v.text);
    case JsonValue::Kind::kArray:
      return "a list";
    case JsonValue::Kind::kObject:
      return "an object";
  }
  return "?";
}

// Where the parser is: the line of the last character it read, and that character.
struct LinePosition {
  int line = 1;
  char last = 0;
};

// A forward iterator over the text that counts the newlines it steps over; nlohmann's
// parser reads through it one character at a time.
class CountingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator() = default;
  CountingIterator(const char* p, LinePosition* pos) : p_(p), pos_(pos) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    pos_->last = *p_;
    if (*p_ == '\n') ++pos_->line;
    ++p_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }

 private:
  const char* p_ = nullptr;
  LinePosition* pos_ = nullptr;
};

// SAX handler for a top-level JSON list: builds each element as a JsonValue with
// lines and hands it to `on_item` as soon as it is complete, so memory holds one
// element at a time.
class ListSax {
 public:
  using json = nlohmann::json;
  using OnItem = std::function<Status(JsonValue&&, size_t index)>;

  ListSax(const LinePosition* pos, std::string file, std::string_view what, OnItem on_item)
      : pos_(pos), file_(std::move(file)), what_(what), on_item_(std::move(on_item)) {}

  bool null() { return Scalar(JsonValue{}); }
  bool boolean(bool b) {
    JsonValue v;
    v.kind = JsonValue::Kind::kBool;
    v.boolean = b;
    return Scalar(std::move(v));
  }
  bool number_integer(json::number_integer_t n) {
    JsonValue v;
    v.kind = JsonValue::Kind::kInt;
    v.integer = n;
    return Number(std::move(v));
  }
  bool number_unsigned(json::number_unsigned_t n) {
    JsonValue v;
    if (n <= static_cast<uint64_t>(INT64_MAX)) {
      v.kind = JsonValue::Kind::kInt;
      v.integer = static_cast<int64_t>(n);
    } else {
      v.kind = JsonValue::Kind::kFloat;
      v.number = static_cast<double>(n);
      v.text = std::to_string(n);
    }
    return Number(std::move(v));
  }
  bool number_float(json::number_float_t n, const json::string_t& s) {
    JsonValue v;
    v.kind = JsonValue::Kind::kFloat;
    v.number = n;
    v.text = s;
    return Number(std::move(v));
  }
  bool string(json::string_t& s) {
    JsonValue v;
    v.kind = JsonValue::Kind::kString;
    v.text = std::move(s);
    return Scalar(std::move(v));
  }
  bool binary(json::binary_t&) { return Scalar(JsonValue{}); }
  bool start_object(std::size_t) { return Open(JsonValue::Kind::kObject); }
  bool key(json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(JsonValue::Kind::kArray); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 3,
    // column 1: syntax error while parsing ...": keep what follows the position.
    std::string what = ex.what();
    if (size_t col = what.find("column "); col != std::string::npos) {
      if (size_t colon = what.find(": ", col); colon != std::string::npos) {
        what = what.substr(colon + 2);
      }
    } else if (size_t colon = what.find(": "); colon != std::string::npos) {
      what = what.substr(colon + 2);
    }
    Fail(pos_->line, "", "not valid JSON: " + what);
    return false;
  }

  const Status& status() const { return status_; }
  bool saw_list() const { return top_seen_; }

 private:
  void Fail(int line, std::string field, std::string message) {
    if (status_.ok()) {
      status_ =
          InvalidArgument(Diagnostic{file_, line, std::move(field), std::move(message)}.ToString());
    }
  }

  // The top level must be a list; its elements are handed out whole.
  bool Top(JsonValue::Kind kind, const JsonValue* scalar) {
    if (top_seen_) return true;
    if (kind == JsonValue::Kind::kArray) {
      top_seen_ = true;
      return true;
    }
    JsonValue probe;
    probe.kind = kind;
    Fail(pos_->line, "",
         "a " + std::string(what_) + " is a JSON list of jobs, got " +
             Describe(scalar != nullptr ? *scalar : probe));
    return false;
  }

  bool Number(JsonValue v) {
    // The lexer reads one character past a number: when that was a newline, the
    // number sits on the line before.
    v.line = pos_->line - (pos_->last == '\n' ? 1 : 0);
    return Place(std::move(v));
  }
  bool Scalar(JsonValue v) {
    v.line = pos_->line;
    return Place(std::move(v));
  }
  bool Place(JsonValue v) {
    if (!top_seen_) return Top(v.kind, &v);
    if (stack_.empty()) return Deliver(std::move(v));
    JsonValue& parent = stack_.back();
    if (parent.kind == JsonValue::Kind::kObject) {
      parent.fields.push_back(JsonField{std::move(key_), std::move(v)});
    } else {
      parent.items.push_back(std::move(v));
    }
    return true;
  }
  bool Open(JsonValue::Kind kind) {
    if (!top_seen_) return Top(kind, nullptr);
    JsonValue v;
    v.kind = kind;
    v.line = pos_->line;
    stack_.push_back(std::move(v));
    keys_.push_back(std::move(key_));
    return true;
  }
  bool Close() {
    if (stack_.empty()) return true;  // the end of the top-level list
    JsonValue v = std::move(stack_.back());
    stack_.pop_back();
    key_ = std::move(keys_.back());
    keys_.pop_back();
    return Place(std::move(v));
  }
  bool Deliver(JsonValue v) {
    Status s = on_item_(std::move(v), index_++);
    if (!s.ok()) {
      if (status_.ok()) status_ = s;
      return false;
    }
    return true;
  }

  const LinePosition* pos_;
  std::string file_;
  std::string_view what_;
  OnItem on_item_;
  bool top_seen_ = false;
  size_t index_ = 0;
  std::vector<JsonValue> stack_;
  std::vector<std::string> keys_;
  std::string key_;
  Status status_;
};

// Parses `text`, a JSON list, calling `on_item` for each element in order.
Status ForEachListItem(std::string_view text, const std::string& file, std::string_view what,
                       const ListSax::OnItem& on_item) {
  LinePosition pos;
  ListSax sax(&pos, file, what, on_item);
  CountingIterator first(text.data(), &pos), last(text.data() + text.size(), &pos);
  bool ok = nlohmann::json::sax_parse(first, last, &sax);
  if (!sax.status().ok()) return sax.status();
  if (!ok) return InvalidArgument(file + ": not valid JSON");
  return Status::Ok();
}

// ---- Philly ------------------------------------------------------------------------

struct PhillyAttempt {
  int64_t start = 0;
  int64_t end = -1;  // -1: still running when the log ended
};

struct PhillyRow {
  TraceJob job;
  int line = 0;
  int64_t submit = 0;  // seconds since the epoch
  std::vector<PhillyAttempt> attempts;
};

class PhillyReader {
 public:
  PhillyReader(std::string file, const PhillyReadOptions& options)
      : file_(std::move(file)),
        options_(options),
        log_(file_, options.strict, options.max_warnings_per_kind) {}

  Result<Trace> Read(std::string_view text) {
    TY_RETURN_IF_ERROR(
        ForEachListItem(text, file_, "Philly job log",
                        [this](JsonValue&& v, size_t index) { return Job(v, index); }));
    Trace trace;
    trace.source = "philly:" + file_;
    trace.jobs.reserve(rows_.size());
    for (PhillyRow& row : rows_) {
      int64_t run = 0;
      for (const PhillyAttempt& a : row.attempts) run += (a.end < 0 ? log_end_ : a.end) - a.start;
      if (run <= 0) {
        TY_RETURN_IF_ERROR(log_.Quirk(
            "jobs that ran for 0 s",
            {file_, row.line, "attempts", "job " + row.job.id + " ran for 0 s in all its attempts"},
            "job skipped"));
        continue;
      }
      row.job.duration = Duration(run * kMsPerSecond);
      row.job.submit = Duration((row.submit - first_submit_) * kMsPerSecond);
      trace.jobs.push_back(std::move(row.job));
    }
    SortBySubmit(trace.jobs);
    trace.warnings = log_.Finish();
    return trace;
  }

 private:
  Status TypeError(const JsonValue& v, const std::string& field, std::string_view expected) {
    return InvalidArgument(Diagnostic{file_, v.line, field,
                                      "must be " + std::string(expected) + ", got " + Describe(v)}
                               .ToString());
  }

  Status Missing(const JsonValue& at, const std::string& field, std::string_view what) {
    return InvalidArgument(
        Diagnostic{file_, at.line, field, "required: " + std::string(what)}.ToString());
  }

  // A timestamp, or nullopt for null, "", "None" (how the log writes a missing time).
  Result<std::optional<int64_t>> Time(const JsonValue* v, const std::string& field) {
    if (v == nullptr || v->kind == JsonValue::Kind::kNull) return std::optional<int64_t>();
    if (v->kind != JsonValue::Kind::kString) {
      return TypeError(*v, field, "a time such as \"2017-10-07 01:11:39\"");
    }
    if (v->text.empty() || v->text == "None") return std::optional<int64_t>();
    auto t = ParseTimestamp(v->text);
    if (!t) {
      return InvalidArgument(Diagnostic{
          file_, v->line, field,
          "must be a time \"YYYY-MM-DD HH:MM:SS\" such as \"2017-10-07 01:11:39\", got " +
              QuoteForMessage(v->text)}
                                 .ToString());
    }
    log_end_ = std::max(log_end_, *t);
    return std::optional<int64_t>(*t);
  }

  Result<int64_t> Count(const JsonValue& v, const std::string& field, int64_t hi) {
    int64_t n = 0;
    if (v.kind == JsonValue::Kind::kInt) {
      n = v.integer;
    } else if (v.kind == JsonValue::Kind::kFloat && std::isfinite(v.number) &&
               v.number == std::floor(v.number) && std::fabs(v.number) < 1e15) {
      n = static_cast<int64_t>(v.number);
    } else {
      return TypeError(v, field, "a whole number");
    }
    if (n < 0) {
      return InvalidArgument(
          Diagnostic{file_, v.line, field, "must be >= 0, got " + Describe(v)}.ToString());
    }
    if (n > hi) {
      return InvalidArgument(Diagnostic{file_, v.line, field,
                                        "must be <= " + std::to_string(hi) + ", got " + Describe(v)}
                                 .ToString());
    }
    return n;
  }

  Status Job(const JsonValue& v, size_t index) {
    const std::string at = "jobs[" + std::to_string(index) + "]";
    if (v.kind != JsonValue::Kind::kObject) return TypeError(v, at, "a job object");
    PhillyRow row;
    row.line = v.line;
    TraceJob& job = row.job;

    const JsonValue* id = v.Find("jobid");
    const char* id_field = "jobid";
    if (id == nullptr) {
      id = v.Find("id");
      id_field = "id";
    }
    if (id == nullptr) return Missing(v, "id", "the job's id (field id or jobid)");
    if (id->kind == JsonValue::Kind::kString && !id->text.empty()) {
      job.id = id->text;
    } else if (id->kind == JsonValue::Kind::kInt) {
      job.id = std::to_string(id->integer);
    } else {
      return TypeError(*id, id_field, "the job's id, a non-empty string");
    }

    const JsonValue* submitted = v.Find("submitted_time");
    if (submitted == nullptr) return Missing(v, "submitted_time", "when the job was submitted");
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> submit, Time(submitted, "submitted_time"));
    if (!submit) {
      return TypeError(*submitted, "submitted_time", "a time such as \"2017-10-07 01:11:39\"");
    }
    row.submit = *submit;
    first_submit_ = std::min(first_submit_, *submit);

    if (const JsonValue* vc = v.Find("vc");
        vc != nullptr && vc->kind != JsonValue::Kind::kNull &&
        !(vc->kind == JsonValue::Kind::kString && vc->text.empty())) {
      if (vc->kind != JsonValue::Kind::kString) return TypeError(*vc, "vc", "a VC name");
      if (Status s = ValidateName("vc", vc->text); !s.ok()) {
        return InvalidArgument(Diagnostic{file_, vc->line, "", s.message()}.ToString());
      }
      job.tenant = vc->text;
      job.queue = vc->text;
    }

    const JsonValue* attempts = v.Find("attempts");
    if (attempts == nullptr) {
      return Missing(v, "attempts", "the list of the job's attempts (it may be empty)");
    }
    if (attempts->kind != JsonValue::Kind::kArray && attempts->kind != JsonValue::Kind::kNull) {
      return TypeError(*attempts, "attempts", "a list of {start_time, end_time} objects");
    }
    std::optional<int64_t> detail_gpus;
    const size_t n = attempts->items.size();
    for (size_t i = 0; i < n; ++i) {
      const JsonValue& a = attempts->items[i];
      const std::string af = "attempts[" + std::to_string(i) + "]";
      if (a.kind != JsonValue::Kind::kObject) {
        return TypeError(a, af, "an object with start_time and end_time");
      }
      TY_ASSIGN_OR_RETURN(std::optional<int64_t> start,
                          Time(a.Find("start_time"), af + ".start_time"));
      TY_ASSIGN_OR_RETURN(std::optional<int64_t> end, Time(a.Find("end_time"), af + ".end_time"));
      if (const JsonValue* detail = a.Find("detail"); detail != nullptr && !detail_gpus) {
        TY_ASSIGN_OR_RETURN(detail_gpus, DetailGpus(*detail, af + ".detail"));
      }
      const std::string who = "job " + job.id + " " + af;
      if (!start) {
        TY_RETURN_IF_ERROR(log_.Quirk(
            "attempts without a start_time",
            {file_, a.line, af + ".start_time", who + " has no start time (a logging error)"},
            "attempt left out"));
        continue;
      }
      if (!end && i + 1 < n) {
        TY_RETURN_IF_ERROR(log_.Quirk(
            "attempts without an end_time before the last",
            {file_, a.line, af + ".end_time", who + " has no end time but a later attempt follows"},
            "attempt left out"));
        continue;
      }
      if (!end) {
        TY_RETURN_IF_ERROR(log_.Quirk("jobs still running when the log ended",
                                      {file_, a.line, af + ".end_time",
                                       who + " has no end time: still running when the log ended"},
                                      "counted as running until the log's last time"));
        row.attempts.push_back({*start, -1});
        continue;
      }
      if (*end < *start) {
        TY_RETURN_IF_ERROR(
            log_.Quirk("attempts that end before they start",
                       {file_, a.line, af + ".end_time",
                        who + " ends " + Seconds(*start - *end) + " before it starts"},
                       "attempt left out"));
        continue;
      }
      row.attempts.push_back({*start, *end});
    }
    if (row.attempts.empty()) {
      return log_.Quirk(
          "jobs that never started",
          {file_, v.line, "attempts",
           "job " + job.id + (n == 0 ? " has no attempts" : " has no usable attempt") +
               ": it never started"},
          "job skipped");
    }

    int64_t gpus = 0;
    if (const JsonValue* g = v.Find("num_gpus"); g != nullptr) {
      TY_ASSIGN_OR_RETURN(gpus, Count(*g, "num_gpus", SpecLimits::kMaxTotalGpus));
    } else {
      gpus = detail_gpus.value_or(0);
    }
    if (gpus == 0 && !options_.keep_cpu_jobs) {
      log_.Note("jobs without GPUs", {file_, v.line, "num_gpus",
                                      "job " + job.id + " holds no GPU; left out (keep_cpu_jobs)"});
      return Status::Ok();
    }
    if (!ids_.insert({job.id, v.line}).second) {
      return log_.Quirk(
          "repeated job ids",
          {file_, v.line, id_field,
           "job " + job.id + " is already listed at line " + std::to_string(ids_[job.id])},
          "the repeat skipped");
    }
    auto [replicas, per_replica] = GangShape(gpus, options_.gpus_per_node);
    job.replicas = replicas;
    job.gpus_per_replica = per_replica;
    job.trace_attempts = static_cast<int32_t>(row.attempts.size());
    int64_t wait = row.attempts.front().start - row.submit;
    if (wait < 0) {
      TY_RETURN_IF_ERROR(
          log_.Quirk("jobs that start before they are submitted",
                     {file_, v.line, "attempts[0].start_time",
                      "job " + job.id + " starts " + Seconds(-wait) + " before its submitted_time"},
                     "its trace wait counted as 0"));
      wait = 0;
    }
    job.trace_wait = Duration(wait * kMsPerSecond);
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  // GPUs of one attempt: the total length of its detail[].gpus lists.
  Result<int64_t> DetailGpus(const JsonValue& detail, const std::string& field) {
    if (detail.kind == JsonValue::Kind::kNull) return int64_t{0};
    if (detail.kind != JsonValue::Kind::kArray)
      return TypeError(detail, field, "a list of {ip, gpus}");
    int64_t total = 0;
    for (size_t k = 0; k < detail.items.size(); ++k) {
      const JsonValue& d = detail.items[k];
      const std::string df = field + "[" + std::to_string(k) + "]";
      if (d.kind != JsonValue::Kind::kObject) return TypeError(d, df, "an object with ip and gpus");
      const JsonValue* gpus = d.Find("gpus");
      if (gpus == nullptr || gpus->kind == JsonValue::Kind::kNull) continue;
      if (gpus->kind != JsonValue::Kind::kArray) {
        return TypeError(*gpus, df + ".gpus", "a list of GPU names such as [\"gpu0\"]");
      }
      total += static_cast<int64_t>(gpus->items.size());
    }
    return total;
  }

  std::string file_;
  PhillyReadOptions options_;
  QuirkLog log_;
  std::vector<PhillyRow> rows_;
  std::unordered_map<std::string, int> ids_;
  int64_t first_submit_ = INT64_MAX;
  int64_t log_end_ = INT64_MIN;
};

// ---- Alibaba -----------------------------------------------------------------------

const std::vector<std::string_view> kPodColumns = {
    "name", "cpu_milli", "memory_mib",    "num_gpu",       "gpu_milli",     "gpu_spec",
    "qos",  "pod_phase", "creation_time", "deletion_time", "scheduled_time"};
const std::vector<std::string_view> kQos = {"LS", "Guaranteed", "Burstable", "BE"};
const std::vector<std::string_view> kPodPhases = {"Succeeded", "Running", "Pending", "Failed"};

Result<Trace> ReadPods(std::string_view text, const std::string& file,
                       const AlibabaReadOptions& options) {
  TY_ASSIGN_OR_RETURN(CsvFile csv,
                      CsvFile::Open(text, file, {"a pod list", kPodColumns, {}, false}));
  const int c_name = csv.Index("name"), c_cpu = csv.Index("cpu_milli"),
            c_mem = csv.Index("memory_mib"), c_gpu = csv.Index("num_gpu"),
            c_milli = csv.Index("gpu_milli"), c_spec = csv.Index("gpu_spec"),
            c_qos = csv.Index("qos"), c_phase = csv.Index("pod_phase"),
            c_created = csv.Index("creation_time"), c_deleted = csv.Index("deletion_time"),
            c_scheduled = csv.Index("scheduled_time");
  QuirkLog log(file, options.strict, options.max_warnings_per_kind);
  Trace trace;
  trace.source = "alibaba:" + file;
  std::unordered_map<std::string, int> names;
  constexpr int64_t kMaxTime = int64_t{1} << 40;  // seconds; keeps * 1000 in range
  while (true) {
    TY_ASSIGN_OR_RETURN(bool more, csv.Next());
    if (!more) break;
    TraceJob job;
    job.id = std::string(csv.Cell(c_name));
    if (job.id.empty()) return csv.Error(c_name, "required: the pod's name");
    if (auto [it, fresh] = names.emplace(job.id, csv.line()); !fresh) {
      return csv.Error(c_name, "pod " + QuoteForMessage(job.id) + " is already listed at line " +
                                   std::to_string(it->second));
    }
    TY_ASSIGN_OR_RETURN(job.milli_cpus, csv.Int(c_cpu, 0, SpecLimits::kMaxMilliCpusPerReplica));
    TY_ASSIGN_OR_RETURN(int64_t mib, csv.Int(c_mem, 0, SpecLimits::kMaxMemoryPerReplica / kMiB));
    job.memory_bytes = mib * kMiB;
    TY_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(c_gpu, 0, SpecLimits::kMaxGpusPerReplica));
    TY_ASSIGN_OR_RETURN(int64_t milli, csv.Int(c_milli, 0, 1000));
    if (gpus == 0 && milli != 0) {
      return csv.Error(c_milli, "must be 0 when num_gpu is 0, got " + std::to_string(milli));
    }
    if (gpus == 1 && milli == 0) {
      return csv.Error(c_milli,
                       "must be 1..1000 (the share of the one GPU) when num_gpu is 1, got 0");
    }
    if (gpus > 1 && milli != 1000) {
      return csv.Error(c_milli,
                       "must be 1000 when num_gpu > 1 (only a single GPU is shared), got " +
                           std::to_string(milli));
    }
    job.gpus_per_replica = static_cast<int32_t>(gpus);
    job.gpu_milli = gpus == 1 && milli < 1000 ? static_cast<int32_t>(milli) : 0;
    std::string_view spec = csv.Cell(c_spec);
    if (size_t bar = spec.find('|'); bar != std::string_view::npos) {
      TY_RETURN_IF_ERROR(
          log.Quirk("pods that accept several GPU types",
                    csv.At(c_spec, "pod " + job.id + " accepts any of " + QuoteForMessage(spec)),
                    "it asks for the first, " + std::string(spec.substr(0, bar))));
      spec = spec.substr(0, bar);
    }
    job.gpu_type = NormalizeGpuType(spec);
    if (!job.gpu_type.empty()) {
      if (Status s = ValidateName("gpu_spec", job.gpu_type); !s.ok()) {
        return csv.Error(c_spec, "must be a GPU type such as V100M32 (or A|B), got " +
                                     QuoteForMessage(csv.Cell(c_spec)));
      }
    }
    std::string_view qos = csv.Cell(c_qos);
    if (qos == "LS" || qos == "Guaranteed") {
      job.priority_class = "production";
    } else if (qos == "Burstable") {
      job.priority_class = "normal";
    } else if (qos == "BE") {
      job.priority_class = "best-effort";
    } else {
      std::string msg = "must be one of " + Join(kQos) + ", got " + QuoteForMessage(qos);
      if (std::string hint = ClosestMatch(qos, kQos); !hint.empty())
        msg += "; did you mean " + hint + "?";
      return csv.Error(c_qos, msg);
    }
    std::string_view phase = csv.Cell(c_phase);
    if (std::find(kPodPhases.begin(), kPodPhases.end(), phase) == kPodPhases.end()) {
      return csv.Error(c_phase,
                       "must be one of " + Join(kPodPhases) + ", got " + QuoteForMessage(phase));
    }
    TY_ASSIGN_OR_RETURN(int64_t created, csv.Int(c_created, 0, kMaxTime));
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> deleted, csv.OptionalInt(c_deleted, 0, kMaxTime));
    TY_ASSIGN_OR_RETURN(std::optional<int64_t> scheduled,
                        csv.OptionalInt(c_scheduled, 0, kMaxTime));
    job.submit = Duration(created * kMsPerSecond);
    const std::string who = "pod " + job.id;
    if (gpus == 0 && !options.keep_cpu_pods) {
      log.Note("pods without GPUs",
               csv.At(c_gpu, who + " asks for no GPU; left out (keep_cpu_pods)"));
      continue;
    }
    if (!deleted) {
      TY_RETURN_IF_ERROR(log.Quirk("pods without a deletion_time",
                                   csv.At(c_deleted, who + " has no deletion time, so no run time"),
                                   "pod skipped"));
      continue;
    }
    int64_t run = 0;
    if (scheduled) {
      if (*scheduled < created) {
        TY_RETURN_IF_ERROR(
            log.Quirk("pods scheduled before they were created",
                      csv.At(c_scheduled, who + " is scheduled " + Seconds(created - *scheduled) +
                                              " before its creation_time"),
                      "its trace wait counted as 0"));
      }
      job.trace_wait = Duration(std::max<int64_t>(0, *scheduled - created) * kMsPerSecond);
      job.trace_attempts = 1;
      run = *deleted - *scheduled;
    } else {
      run = *deleted - created;
      if (run > 0) {
        TY_RETURN_IF_ERROR(log.Quirk(
            "pods never scheduled",
            csv.At(c_scheduled, who + " was never scheduled (" + std::string(phase) + ")"),
            "it runs for deletion_time - creation_time = " + Seconds(run)));
      }
    }
    if (run <= 0) {
      std::string why = run == 0 ? " lived for 0 s" : " is deleted before it starts";
      TY_RETURN_IF_ERROR(
          log.Quirk("pods with no run time", csv.At(c_deleted, who + why), "pod skipped"));
      continue;
    }
    job.duration = Duration(run * kMsPerSecond);
    trace.jobs.push_back(std::move(job));
  }
  SortBySubmit(trace.jobs);
  trace.warnings = log.Finish();
  return trace;
}

// ---- Trainyard CSV -----------------------------------------------------------------

const std::vector<std::string_view> kCsvColumns = {
    "submit",           "tenant",   "queue",    "priority",   "replicas",
    "gpus_per_replica", "gpu_type", "duration", "time_limit", "checkpoint_interval"};
const std::vector<std::string_view> kCsvOptional = {
    "id", "gpu_milli", "cpus", "memory", "topology", "trace_wait", "trace_attempts"};

// "8", "0.5" (cores) or "500m" (millicores).
std::optional<int64_t> ParseCpus(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (s.back() == 'm') {
    int64_t milli = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size() - 1, milli);
    if (ec != std::errc() || ptr != s.data() + s.size() - 1 || milli < 0) return std::nullopt;
    return milli;
  }
  double cores = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), cores);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(cores) || cores < 0 ||
      cores > 1e12) {
    return std::nullopt;
  }
  return std::llround(cores * 1000);
}

std::string CpusText(int64_t milli) {
  return milli % 1000 == 0 ? std::to_string(milli / 1000) : std::to_string(milli) + "m";
}

// Plain seconds when whole ("5400"), else milliseconds ("5400250ms"): exact, and
// what ParseDuration reads back.
std::string DurationText(Duration d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000)
                               : std::to_string(d.count()) + "ms";
}

std::string TopologyText(const TopologySpec& t) {
  std::string out(TopologyConstraintName(t.constraint));
  if (t.constraint != TopologyConstraint::kNone && !t.hard) out += ":soft";
  return out;
}

Result<Trace> ReadCsv(std::string_view text, const std::string& file) {
  TY_ASSIGN_OR_RETURN(
      CsvFile csv,
      CsvFile::Open(text, file, {"a Trainyard trace", kCsvColumns, kCsvOptional, true}));
  const int c_submit = csv.Index("submit"), c_tenant = csv.Index("tenant"),
            c_queue = csv.Index("queue"), c_priority = csv.Index("priority"),
            c_replicas = csv.Index("replicas"), c_gpus = csv.Index("gpus_per_replica"),
            c_type = csv.Index("gpu_type"), c_duration = csv.Index("duration"),
            c_limit = csv.Index("time_limit"), c_ckpt = csv.Index("checkpoint_interval"),
            c_id = csv.Index("id"), c_milli = csv.Index("gpu_milli"), c_cpus = csv.Index("cpus"),
            c_mem = csv.Index("memory"), c_topo = csv.Index("topology"),
            c_wait = csv.Index("trace_wait"), c_attempts = csv.Index("trace_attempts");
  Trace trace;
  trace.source = "trainyard:" + file;
  // At most one job per line: with this reserve the jobs never move while reading,
  // so `ids` may point into their id strings.
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  trace.jobs.reserve(lines);
  std::unordered_map<std::string_view, int> ids;
  ids.reserve(lines);
  int64_t row = 0;
  auto optional_duration = [&](int c, Duration none) -> Result<Duration> {
    if (csv.Cell(c).empty()) return none;
    return csv.DurationCell(c);
  };
  while (true) {
    TY_ASSIGN_OR_RETURN(bool more, csv.Next());
    if (!more) break;
    ++row;
    TraceJob& job = trace.jobs.emplace_back();
    job.id =
        c_id >= 0 && !csv.Cell(c_id).empty() ? std::string(csv.Cell(c_id)) : std::to_string(row);
    if (auto [it, fresh] = ids.emplace(job.id, csv.line()); !fresh) {
      return csv.Error(c_id, "job " + QuoteForMessage(job.id) + " is already defined at line " +
                                 std::to_string(it->second));
    }
    TY_ASSIGN_OR_RETURN(job.submit, csv.DurationCell(c_submit));
    TY_ASSIGN_OR_RETURN(job.tenant, csv.NameCell(c_tenant));
    TY_ASSIGN_OR_RETURN(job.queue, csv.NameCell(c_queue));
    TY_ASSIGN_OR_RETURN(job.priority_class, csv.NameCell(c_priority));
    TY_ASSIGN_OR_RETURN(int64_t replicas, csv.Int(c_replicas, 1, SpecLimits::kMaxReplicas));
    TY_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(c_gpus, 0, SpecLimits::kMaxGpusPerReplica));
    if (SaturatingMul(replicas, gpus) > SpecLimits::kMaxTotalGpus) {
      return csv.Error(c_gpus, "the gang asks for " + std::to_string(replicas * gpus) +
                                   " GPUs; at most " + std::to_string(SpecLimits::kMaxTotalGpus));
    }
    job.replicas = static_cast<int32_t>(replicas);
    job.gpus_per_replica = static_cast<int32_t>(gpus);
    if (!csv.Cell(c_type).empty()) {
      TY_ASSIGN_OR_RETURN(std::string type, csv.NameCell(c_type));
      job.gpu_type = NormalizeGpuType(type);
    }
    TY_ASSIGN_OR_RETURN(job.duration, csv.DurationCell(c_duration));
    if (job.duration.count() <= 0) {
      return csv.Error(c_duration, "must be > 0, got " + QuoteForMessage(csv.Cell(c_duration)));
    }
    TY_ASSIGN_OR_RETURN(job.time_limit, optional_duration(c_limit, Duration(0)));
    TY_ASSIGN_OR_RETURN(job.checkpoint_interval, optional_duration(c_ckpt, Duration(0)));
    if (c_milli >= 0) {
      TY_ASSIGN_OR_RETURN(std::optional<int64_t> milli, csv.OptionalInt(c_milli, 0, 1000));
      if (milli && *milli > 0 && *milli < 1000) {
        if (gpus != 1) {
          return csv.Error(
              c_milli, "a share of a GPU needs gpus_per_replica 1, got " + std::to_string(gpus));
        }
        job.gpu_milli = static_cast<int32_t>(*milli);
      }
    }
    if (!csv.Cell(c_cpus).empty()) {
      auto cpus = ParseCpus(csv.Cell(c_cpus));
      if (!cpus || *cpus > SpecLimits::kMaxMilliCpusPerReplica) {
        return csv.Error(c_cpus, "must be a number of CPUs such as 8, 0.5 or \"500m\" (at most " +
                                     std::to_string(SpecLimits::kMaxMilliCpusPerReplica / 1000) +
                                     "), got " + QuoteForMessage(csv.Cell(c_cpus)));
      }
      job.milli_cpus = *cpus;
    }
    if (!csv.Cell(c_mem).empty()) {
      auto mem = ParseMemory(csv.Cell(c_mem));
      if (!mem.ok()) return csv.Error(c_mem, mem.status().message());
      if (*mem > SpecLimits::kMaxMemoryPerReplica) {
        return csv.Error(c_mem, "must be at most 64Ti, got " + QuoteForMessage(csv.Cell(c_mem)));
      }
      job.memory_bytes = *mem;
    }
    if (std::string_view topo = csv.Cell(c_topo); !topo.empty()) {
      std::string_view name = topo, mode = "hard";
      if (size_t colon = topo.find(':'); colon != std::string_view::npos) {
        name = topo.substr(0, colon);
        mode = topo.substr(colon + 1);
      }
      auto constraint = ParseTopologyConstraint(name);
      if (!constraint || (mode != "hard" && mode != "soft") ||
          (*constraint == TopologyConstraint::kNone && name != topo)) {
        return csv.Error(c_topo,
                         "must be none, same-node, same-nvlink or same-leaf, optionally followed "
                         "by :soft or :hard (the default), got " +
                             QuoteForMessage(topo));
      }
      job.topology.constraint = *constraint;
      job.topology.hard = *constraint != TopologyConstraint::kNone && mode == "hard";
    }
    TY_ASSIGN_OR_RETURN(job.trace_wait, optional_duration(c_wait, Duration(-1)));
    if (c_attempts >= 0) {
      TY_ASSIGN_OR_RETURN(std::optional<int64_t> attempts,
                          csv.OptionalInt(c_attempts, 0, 1'000'000));
      job.trace_attempts = static_cast<int32_t>(attempts.value_or(0));
    }
  }
  SortBySubmit(trace.jobs);
  return trace;
}

// ---- Synthetic -----------------------------------------------------------------------

// Draws from std::mt19937_64 through our own transforms, identical everywhere.
class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}
  // Uniform in [0, 1), 53 random bits.
  double Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  // Exponential with the given mean.
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  // Standard normal (Box-Muller, one of the pair).
  double Normal() {
    double u1 = 1.0 - Uniform();  // (0, 1]
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 rng_;
};

// A discrete choice among weights by inverse CDF.
class WeightedChoice {
 public:
  explicit WeightedChoice(const std::vector<double>& weights) {
    double sum = 0;
    for (double w : weights) cumulative_.push_back(sum += w);
  }
  size_t Pick(double u) const {
    double x = u * cumulative_.back();
    auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), x);
    size_t i = static_cast<size_t>(it - cumulative_.begin());
    if (i >= cumulative_.size()) i = cumulative_.size() - 1;
    // Skip zero-weight entries that upper_bound can land on only at their edge.
    while (i > 0 && cumulative_[i] == cumulative_[i - 1]) --i;
    return i;
  }

 private:
  std::vector<double> cumulative_;
};

template <typename T>
Status CheckWeights(std::string_view knob, const std::vector<std::pair<T, double>>& mix) {
  if (mix.empty()) return InvalidArgument(std::string(knob) + ": must list at least one entry");
  double sum = 0;
  for (size_t i = 0; i < mix.size(); ++i) {
    double w = mix[i].second;
    if (!std::isfinite(w) || w < 0) {
      std::ostringstream v;
      v << w;
      return InvalidArgument(std::string(knob) + "[" + std::to_string(i) +
                             "]: weight must be a finite number >= 0, got " + v.str());
    }
    sum += w;
  }
  if (!(sum > 0)) return InvalidArgument(std::string(knob) + ": the weights must not all be 0");
  return Status::Ok();
}

}  // namespace

Result<std::string> ReadTextFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgument(path + ": is a directory; give the trace file itself");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open: " + std::strerror(errno));
  std::string text;
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size > 0) {
    text.resize(static_cast<size_t>(size));
    in.seekg(0, std::ios::beg);
    in.read(text.data(), size);
  } else {
    in.seekg(0, std::ios::beg);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (in.bad()) return DataLoss(path + ": read failed: " + std::strerror(errno));
  return text;
}

std::pair<int32_t, int32_t> GangShape(int64_t gpus, int32_t max_gpus_per_replica) {
  TY_CHECK(gpus >= 0 && max_gpus_per_replica >= 1);
  if (gpus == 0) return {1, 0};
  if (gpus <= max_gpus_per_replica) return {1, static_cast<int32_t>(gpus)};
  for (int32_t d : {8, 4, 2}) {
    if (d <= max_gpus_per_replica && gpus % d == 0) {
      return {static_cast<int32_t>(gpus / d), d};
    }
  }
  for (int32_t d = max_gpus_per_replica; d >= 1; --d) {
    if (gpus % d == 0) return {static_cast<int32_t>(gpus / d), d};
  }
  return {static_cast<int32_t>(gpus), 1};  // not reached: d = 1 divides
}

Result<Trace> ParsePhillyJobs(std::string_view text, std::string_view file,
                              const PhillyReadOptions& options) {
  if (options.gpus_per_node < 1 || options.gpus_per_node > SpecLimits::kMaxGpusPerReplica) {
    return InvalidArgument("gpus_per_node: must be between 1 and " +
                           std::to_string(SpecLimits::kMaxGpusPerReplica) + ", got " +
                           std::to_string(options.gpus_per_node));
  }
  PhillyReader reader{std::string(file), options};
  return reader.Read(text);
}

Result<Trace> ReadPhillyJobs(const std::string& path, const PhillyReadOptions& options) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParsePhillyJobs(text, path, options);
}

Result<Trace> ParseAlibabaPods(std::string_view text, std::string_view file,
                               const AlibabaReadOptions& options) {
  return ReadPods(text, std::string(file), options);
}

Result<Trace> ReadAlibabaPods(const std::string& path, const AlibabaReadOptions& options) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseAlibabaPods(text, path, options);
}

const std::vector<std::string_view>& TrainyardCsvColumns() { return kCsvColumns; }
const std::vector<std::string_view>& TrainyardCsvOptionalColumns() { return kCsvOptional; }

Result<Trace> ParseTrainyardCsv(std::string_view text, std::string_view file) {
  return ReadCsv(text, std::string(file));
}

Result<Trace> ReadTrainyardCsv(const std::string& path) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseTrainyardCsv(text, path);
}

void WriteTrainyardCsv(const Trace& trace, std::ostream& out) {
  std::string line;
  for (auto* columns : {&kCsvColumns, &kCsvOptional}) {
    for (std::string_view c : *columns) {
      if (!line.empty()) line += ',';
      line += c;
    }
  }
  out << line << '\n';
  for (const TraceJob& j : trace.jobs) {
    line.clear();
    line += DurationText(j.submit);
    line +=
        ',' + CsvQuote(j.tenant) + ',' + CsvQuote(j.queue) + ',' + CsvQuote(j.priority_class) + ',';
    line += std::to_string(j.replicas);
    line += ',';
    line += std::to_string(j.gpus_per_replica);
    line += ',' + CsvQuote(j.gpu_type) + ',';
    line += DurationText(j.duration);
    line += ',';
    if (j.time_limit.count() > 0) line += DurationText(j.time_limit);
    line += ',';
    if (j.checkpoint_interval.count() > 0) line += DurationText(j.checkpoint_interval);
    line += ',';
    line += CsvQuote(j.id);
    line += ',';
    if (j.gpu_milli > 0) line += std::to_string(j.gpu_milli);
    line += ',';
    if (j.milli_cpus > 0) line += CpusText(j.milli_cpus);
    line += ',';
    if (j.memory_bytes > 0) line += FormatMemory(j.memory_bytes);
    line += ',';
    if (j.topology.constraint != TopologyConstraint::kNone) line += TopologyText(j.topology);
    line += ',';
    if (j.trace_wait.count() >= 0) line += DurationText(j.trace_wait);
    line += ',';
    if (j.trace_attempts > 0) line += std::to_string(j.trace_attempts);
    line += '\n';
    out << line;
  }
}

Status WriteTrainyardCsvFile(const Trace& trace, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return NotFound(path + ": cannot create: " + std::strerror(errno));
  WriteTrainyardCsv(trace, out);
  out.flush();
  if (!out) return DataLoss(path + ": write failed: " + std::strerror(errno));
  return Status::Ok();
}

Status ValidateSyntheticOptions(const SyntheticOptions& o) {
  auto num = [](double d) {
    std::ostringstream s;
    s << d;
    return s.str();
  };
  if (o.jobs < 0 || o.jobs > 100'000'000) {
    return InvalidArgument("jobs: must be between 0 and 100000000, got " + std::to_string(o.jobs));
  }
  if (!std::isfinite(o.arrivals_per_hour) || o.arrivals_per_hour <= 0) {
    return InvalidArgument("arrivals_per_hour: must be a number > 0, got " +
                           num(o.arrivals_per_hour));
  }
  if (o.gpus_per_node < 1 || o.gpus_per_node > SpecLimits::kMaxGpusPerReplica) {
    return InvalidArgument("gpus_per_node: must be between 1 and " +
                           std::to_string(SpecLimits::kMaxGpusPerReplica) + ", got " +
                           std::to_string(o.gpus_per_node));
  }
  TY_RETURN_IF_ERROR(CheckWeights("size_mix", o.size_mix));
  for (size_t i = 0; i < o.size_mix.size(); ++i) {
    int32_t g = o.size_mix[i].first;
    if (g < 1 || g > SpecLimits::kMaxTotalGpus) {
      return InvalidArgument("size_mix[" + std::to_string(i) + "]: GPUs must be between 1 and " +
                             std::to_string(SpecLimits::kMaxTotalGpus) + ", got " +
                             std::to_string(g));
    }
    if (GangShape(g, o.gpus_per_node).first > SpecLimits::kMaxReplicas) {
      return InvalidArgument("size_mix[" + std::to_string(i) + "]: " + std::to_string(g) +
                             " GPUs make more than " + std::to_string(SpecLimits::kMaxReplicas) +
                             " replicas; raise gpus_per_node");
    }
  }
  if (o.duration_shape == DurationShape::kLognormal) {
    if (o.duration_median.count() <= 0) {
      return InvalidArgument("duration_median: must be > 0, got " +
                             FormatDuration(o.duration_median));
    }
    if (!std::isfinite(o.duration_sigma) || o.duration_sigma < 0 || o.duration_sigma > 10) {
      return InvalidArgument("duration_sigma: must be between 0 and 10, got " +
                             num(o.duration_sigma));
    }
  } else if (o.duration_mean.count() <= 0) {
    return InvalidArgument("duration_mean: must be > 0, got " + FormatDuration(o.duration_mean));
  }
  if (o.min_duration.count() < 1000) {
    return InvalidArgument("min_duration: must be >= 1s, got " + FormatDuration(o.min_duration));
  }
  if (o.max_duration < o.min_duration) {
    return InvalidArgument("max_duration: must be >= min_duration (" +
                           FormatDuration(o.min_duration) + "), got " +
                           FormatDuration(o.max_duration));
  }
  if (o.max_duration > SpecLimits::kMaxTimeLimit) {
    return InvalidArgument("max_duration: must be at most " +
                           FormatDuration(SpecLimits::kMaxTimeLimit) + ", got " +
                           FormatDuration(o.max_duration));
  }
  TY_RETURN_IF_ERROR(CheckWeights("tenants", o.tenants));
  for (size_t i = 0; i < o.tenants.size(); ++i) {
    TY_RETURN_IF_ERROR(ValidateName("tenants[" + std::to_string(i) + "]", o.tenants[i].first));
  }
  TY_RETURN_IF_ERROR(CheckWeights("priorities", o.priorities));
  for (size_t i = 0; i < o.priorities.size(); ++i) {
    TY_RETURN_IF_ERROR(
        ValidateName("priorities[" + std::to_string(i) + "]", o.priorities[i].first));
  }
  if (!std::isfinite(o.time_limit_factor) || o.time_limit_factor > 1000 ||
      (o.time_limit_factor != 0 && o.time_limit_factor < 1)) {
    return InvalidArgument("time_limit_factor: must be 0 (no limit) or between 1 and 1000, got " +
                           num(o.time_limit_factor));
  }
  if (o.checkpoint_interval.count() < 0) {
    return InvalidArgument("checkpoint_interval: must be >= 0, got " +
                           FormatDuration(o.checkpoint_interval));
  }
  if (!o.gpu_type.empty()) TY_RETURN_IF_ERROR(ValidateName("gpu_type", o.gpu_type));
  return Status::Ok();
}

Trace Synthesize(const SyntheticOptions& o) {
  Status valid = ValidateSyntheticOptions(o);
  TY_CHECK_MSG(valid.ok(), valid.message());
  std::vector<double> w;
  for (const auto& s : o.size_mix) w.push_back(s.second);
  const WeightedChoice sizes(w);
  w.clear();
  for (const auto& t : o.tenants) w.push_back(t.second);
  const WeightedChoice tenants(w);
  w.clear();
  for (const auto& p : o.priorities) w.push_back(p.second);
  const WeightedChoice priorities(w);
  std::vector<std::pair<int32_t, int32_t>> shapes;
  for (const auto& s : o.size_mix) shapes.push_back(GangShape(s.first, o.gpus_per_node));
  const std::string gpu_type = NormalizeGpuType(o.gpu_type);
  TopologySpec gang_topology = o.gang_topology;
  if (gang_topology.constraint == TopologyConstraint::kNone) gang_topology.hard = false;

  const double mean_gap_s = 3600.0 / o.arrivals_per_hour;
  const double log_median = std::log(static_cast<double>(o.duration_median.count()) / 1000.0);
  const double mean_s = static_cast<double>(o.duration_mean.count()) / 1000.0;
  const double min_s = static_cast<double>(o.min_duration.count()) / 1000.0;
  const double max_s = static_cast<double>(o.max_duration.count()) / 1000.0;

  Draw draw(o.seed);
  Trace trace;
  trace.source = "synthetic:seed=" + std::to_string(o.seed);
  trace.jobs.reserve(static_cast<size_t>(o.jobs));
  double t = 0;  // seconds
  for (int64_t i = 0; i < o.jobs; ++i) {
    TraceJob& j = trace.jobs.emplace_back();
    // Draw order per job, fixed: size, duration, tenant, priority, gap to the next.
    auto [replicas, per_replica] = shapes[sizes.Pick(draw.Uniform())];
    double d = o.duration_shape == DurationShape::kLognormal
                   ? std::exp(log_median + o.duration_sigma * draw.Normal())
                   : draw.Exponential(mean_s);
    d = std::clamp(std::round(d), min_s, max_s);
    j.id = std::to_string(i + 1);
    j.submit = Duration(std::llround(t * 1000));
    j.tenant = o.tenants[tenants.Pick(draw.Uniform())].first;
    j.queue = kDefaultQueue;
    j.priority_class = o.priorities[priorities.Pick(draw.Uniform())].first;
    j.replicas = replicas;
    j.gpus_per_replica = per_replica;
    j.gpu_type = gpu_type;
    j.duration = Duration(static_cast<int64_t>(d) * 1000);
    if (o.time_limit_factor > 0) {
      j.time_limit =
          Duration(std::llround(static_cast<double>(j.duration.count()) * o.time_limit_factor));
    }
    j.checkpoint_interval = o.checkpoint_interval;
    if (replicas > 1) j.topology = gang_topology;
    t += draw.Exponential(mean_gap_s);
  }
  return trace;
}

}  // namespace trainyard::sim
