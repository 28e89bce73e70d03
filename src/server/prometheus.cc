#include "server/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>

namespace trainyard::server {
namespace {

constexpr std::string_view kHistogramSuffixes[] = {"_bucket", "_sum", "_count"};

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLabelNameChar(char c) { return IsAsciiLetter(c) || IsDigit(c) || c == '_'; }
bool IsMetricNameChar(char c) { return IsLabelNameChar(c) || c == ':'; }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// Sorted by label name, so that the order labels are written in does not matter.
std::string SeriesKey(std::string_view name, MetricLabels labels) {
  std::sort(labels.begin(), labels.end());
  std::string out(name);
  out += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ',';
    out += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + '"';
  }
  out += '}';
  return out;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are invalid.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

// Go's strconv.ParseFloat syntax, which Prometheus parses values with, less hexadecimal
// floats and underscores: [+-]digits[.digits][e[+-]digits], [+-]Inf, [+-]Infinity, NaN.
std::optional<double> ParseMetricValue(std::string_view s) {
  if (s.empty()) return std::nullopt;
  if (EqualsIgnoreCase(s, "nan")) return std::numeric_limits<double>::quiet_NaN();
  std::string_view body = s;
  const bool negative = body[0] == '-';
  if (body[0] == '+' || body[0] == '-') body.remove_prefix(1);
  if (EqualsIgnoreCase(body, "inf") || EqualsIgnoreCase(body, "infinity")) {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (body.empty() || !(IsDigit(body[0]) || body[0] == '.')) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (ec != std::errc() || end != body.data() + body.size()) return std::nullopt;
  return negative ? -v : v;
}

std::optional<int64_t> ParseTimestamp(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Renders `{a="x",b="y"}` (or "" for no labels), with `le` last when given.
// CHECK-fails on an invalid or repeated label name.
std::string RenderLabels(const MetricLabels& labels, std::optional<std::string_view> le) {
  if (labels.empty() && !le) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& name = labels[i].first;
    TY_CHECK_MSG(IsValidLabelName(name), "invalid label name \"" + name + "\"");
    for (size_t j = 0; j < i; ++j) {
      TY_CHECK_MSG(labels[j].first != name, "label " + name + " given twice");
    }
    if (i > 0) out += ',';
    out += name + "=\"" + EscapeLabelValue(labels[i].second) + '"';
  }
  if (le) {
    if (!labels.empty()) out += ',';
    out += "le=\"" + std::string(*le) + '"';
  }
  out += '}';
  return out;
}

}  // namespace

std::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kUntyped:
      return "untyped";
  }
  return "untyped";
}

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || IsDigit(name[0])) return false;
  return std::all_of(name.begin(), name.end(), IsMetricNameChar);
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || IsDigit(name[0]) || name.starts_with("__")) return false;
  return std::all_of(name.begin(), name.end(), IsLabelNameChar);
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  TY_CHECK(ec == std::errc());
  return std::string(buf, end);
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// --- HistogramValue ---

HistogramValue HistogramValue::WithBounds(std::vector<double> bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    TY_CHECK_MSG(std::isfinite(bounds[i]), "histogram bounds must be finite");
    TY_CHECK_MSG(i == 0 || bounds[i - 1] < bounds[i], "histogram bounds must increase");
  }
  HistogramValue h;
  h.counts.assign(bounds.size() + 1, 0);
  h.bounds = std::move(bounds);
  return h;
}

void HistogramValue::Observe(double value) {
  TY_CHECK(counts.size() == bounds.size() + 1);
  size_t bucket = bounds.size();
  if (!std::isnan(value)) {
    bucket =
        static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  }
  ++counts[bucket];
  sum += value;
}

uint64_t HistogramValue::Count() const {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

// --- Exposition ---

void Exposition::Family(std::string_view name, std::string_view help, MetricType type) {
  TY_CHECK_MSG(IsValidMetricName(name), "invalid metric name \"" + std::string(name) + "\"");
  FamilyText f;
  f.name = std::string(name);
  f.type = type;
  Claim(f.name);
  if (type == MetricType::kHistogram) {
    for (std::string_view suffix : kHistogramSuffixes) Claim(f.name + std::string(suffix));
  }
  f.header = "# HELP " + f.name;
  if (!help.empty()) f.header += " " + EscapeHelp(help);
  f.header += "\n# TYPE " + f.name + " " + std::string(MetricTypeName(type)) + "\n";
  families_.push_back(std::move(f));
}

void Exposition::Sample(const MetricLabels& labels, double value) {
  FamilyText& f = Current();
  TY_CHECK_MSG(f.type != MetricType::kHistogram,
               "Sample() on histogram " + f.name + "; use Histogram()");
  std::string rendered = RenderLabels(labels, std::nullopt);
  TY_CHECK_MSG(f.series.insert(SeriesKey(f.name, labels)).second,
               "series " + f.name + rendered + " added twice");
  f.samples += f.name + rendered + " " + FormatMetricValue(value) + "\n";
}

void Exposition::Histogram(const MetricLabels& labels, const HistogramValue& h) {
  FamilyText& f = Current();
  TY_CHECK_MSG(f.type == MetricType::kHistogram, "Histogram() on " + f.name + ", not a histogram");
  TY_CHECK(h.counts.size() == h.bounds.size() + 1);
  for (const auto& [name, value] : labels) {
    TY_CHECK_MSG(name != "le", "histogram " + f.name + ": \"le\" is the bucket label");
  }
  TY_CHECK_MSG(f.series.insert(SeriesKey(f.name, labels)).second,
               "series " + f.name + RenderLabels(labels, std::nullopt) + " added twice");
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    const bool inf = i == h.bounds.size();
    TY_CHECK_MSG(inf || (std::isfinite(h.bounds[i]) && (i == 0 || h.bounds[i - 1] < h.bounds[i])),
                 "histogram " + f.name + ": bounds must be finite and increasing");
    cumulative += h.counts[i];
    const std::string le = inf ? "+Inf" : FormatMetricValue(h.bounds[i]);
    f.samples += f.name + "_bucket" + RenderLabels(labels, le) + " " +
                 FormatMetricValue(static_cast<double>(cumulative)) + "\n";
  }
  const std::string rendered = RenderLabels(labels, std::nullopt);
  f.samples += f.name + "_sum" + rendered + " " + FormatMetricValue(h.sum) + "\n";
  f.samples += f.name + "_count" + rendered + " " +
               FormatMetricValue(static_cast<double>(cumulative)) + "\n";
}

std::string Exposition::Text() const {
  std::string out;
  for (const FamilyText& f : families_) out += f.header + f.samples;
  return out;
}

Exposition::FamilyText& Exposition::Current() {
  TY_CHECK_MSG(!families_.empty(), "a sample before any Family()");
  return families_.back();
}

void Exposition::Claim(const std::string& sample_name) {
  TY_CHECK_MSG(sample_names_.insert(sample_name).second,
               "metric name " + sample_name + " used by two families");
}

// --- ParseExposition ---

std::optional<std::string> ParsedSample::Label(std::string_view name) const {
  for (const auto& [n, v] : labels) {
    if (n == name) return v;
  }
  return std::nullopt;
}

const ParsedFamily* FindFamily(const std::vector<ParsedFamily>& families, std::string_view name) {
  for (const ParsedFamily& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

namespace {

Status LineError(int line, std::string_view message) {
  return InvalidArgument("line " + std::to_string(line) + ": " + std::string(message));
}

// One line being read, left to right.
class LineReader {
 public:
  LineReader(std::string_view text, int line) : s_(text), line_(line) {}

  bool AtEnd() const { return i_ == s_.size(); }
  char Peek() const { return AtEnd() ? '\0' : s_[i_]; }
  void Next() { ++i_; }
  // Returns whether any blank was skipped.
  bool SkipBlanks() {
    const size_t start = i_;
    while (!AtEnd() && IsBlank(s_[i_])) ++i_;
    return i_ > start;
  }
  std::string_view TakeWhile(bool (*pred)(char)) {
    const size_t start = i_;
    while (!AtEnd() && pred(s_[i_])) ++i_;
    return s_.substr(start, i_ - start);
  }
  std::string_view TakeToken() {
    const size_t start = i_;
    while (!AtEnd() && !IsBlank(s_[i_])) ++i_;
    return s_.substr(start, i_ - start);
  }
  std::string_view Rest() {
    std::string_view rest = s_.substr(i_);
    i_ = s_.size();
    return rest;
  }
  // What comes next, for messages: `'x'` or "the end of the line".
  std::string Upcoming() const {
    if (AtEnd()) return "the end of the line";
    return "'" + std::string(1, s_[i_]) + "'";
  }
  Status Error(std::string_view message) const { return LineError(line_, message); }

  // A metric name, validated.
  Result<std::string> MetricName(std::string_view what) {
    std::string_view name = TakeWhile(IsMetricNameChar);
    if (name.empty()) {
      return Error("expected " + std::string(what) + ", got " + Upcoming());
    }
    if (!IsValidMetricName(name)) {
      return Error("invalid metric name \"" + std::string(name) +
                   "\": names match [a-zA-Z_:][a-zA-Z0-9_:]*");
    }
    return std::string(name);
  }

  // `"..."` with the escapes \\, \" and \n.
  Result<std::string> QuotedLabelValue(std::string_view label) {
    if (Peek() != '"') {
      return Error("expected '\"' to open the value of label " + std::string(label) + ", got " +
                   Upcoming());
    }
    Next();
    std::string out;
    while (true) {
      if (AtEnd()) return Error("the value of label " + std::string(label) + " is not closed");
      char c = s_[i_++];
      if (c == '"') break;
      if (c == '\\') {
        if (AtEnd()) return Error("the value of label " + std::string(label) + " is not closed");
        char e = s_[i_++];
        if (e == '\\') {
          out += '\\';
        } else if (e == '"') {
          out += '"';
        } else if (e == 'n') {
          out += '\n';
        } else {
          return Error("invalid escape \\" + std::string(1, e) + " in the value of label " +
                       std::string(label) + "; only \\\\, \\\" and \\n are allowed");
        }
      } else {
        out += c;
      }
    }
    if (!IsValidUtf8(out)) {
      return Error("the value of label " + std::string(label) + " is not valid UTF-8");
    }
    return out;
  }

  // `{name="value",...}` with an optional trailing comma. REQUIRES: Peek() == '{'.
  Result<MetricLabels> Labels() {
    Next();
    MetricLabels labels;
    while (true) {
      SkipBlanks();
      if (Peek() == '}') {
        Next();
        return labels;
      }
      std::string_view name = TakeWhile(IsLabelNameChar);
      if (name.empty()) return Error("expected a label name or '}', got " + Upcoming());
      if (name.starts_with("__")) {
        return Error("label name " + std::string(name) + " starts with __, which is reserved");
      }
      if (!IsValidLabelName(name)) {
        return Error("invalid label name \"" + std::string(name) +
                     "\": names match [a-zA-Z_][a-zA-Z0-9_]*");
      }
      for (const auto& [n, v] : labels) {
        if (n == name) return Error("label " + std::string(name) + " given twice");
      }
      SkipBlanks();
      if (Peek() != '=') {
        return Error("expected '=' after label name " + std::string(name) + ", got " + Upcoming());
      }
      Next();
      SkipBlanks();
      TY_ASSIGN_OR_RETURN(std::string value, QuotedLabelValue(name));
      labels.emplace_back(std::string(name), std::move(value));
      SkipBlanks();
      if (Peek() == ',') {
        Next();
      } else if (Peek() != '}') {
        return Error("expected ',' or '}' after the value of label " + std::string(name) +
                     ", got " + Upcoming());
      }
    }
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  int line_;
};

class Parser {
 public:
  Result<std::vector<ParsedFamily>> Parse(std::string_view text) {
    if (!text.empty() && text.back() != '\n') {
      const auto lines = std::count(text.begin(), text.end(), '\n') + 1;
      return LineError(static_cast<int>(lines), "the last line does not end with a line feed");
    }
    int line = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t nl = text.find('\n', pos);
      std::string_view content = text.substr(pos, nl - pos);
      pos = nl + 1;
      ++line;
      if (content.find('\r') != std::string_view::npos) {
        return LineError(line, "carriage return in the line; lines end with a line feed only");
      }
      TY_RETURN_IF_ERROR(Line(content, line));
    }
    TY_RETURN_IF_ERROR(Close());
    std::vector<ParsedFamily> out;
    out.reserve(families_.size());
    for (State& s : families_) out.push_back(std::move(s.family));
    return out;
  }

 private:
  struct State {
    ParsedFamily family;
    int first_line = 0;
    int help_line = 0;  // 0: none
    int type_line = 0;
  };

  Status Line(std::string_view content, int line) {
    LineReader r(content, line);
    r.SkipBlanks();
    if (r.AtEnd()) return Status::Ok();
    if (r.Peek() == '#') {
      r.Next();
      r.SkipBlanks();
      std::string_view keyword = r.TakeToken();
      if (keyword != "HELP" && keyword != "TYPE") return Status::Ok();  // a comment
      if (!r.SkipBlanks()) {
        return r.Error(std::string(keyword) + " line without a metric name");
      }
      TY_ASSIGN_OR_RETURN(std::string name, r.MetricName("a metric name"));
      if (!r.AtEnd() && !IsBlank(r.Peek())) {
        return r.Error("unexpected " + r.Upcoming() + " after metric name " + name);
      }
      // One blank separates the name from the HELP text, which is kept verbatim.
      if (!r.AtEnd()) r.Next();
      if (keyword == "HELP") return Help(r, name, line);
      r.SkipBlanks();
      return Type(r, name, line);
    }
    return Sample(r, line);
  }

  Status Help(LineReader& r, const std::string& name, int line) {
    std::string_view raw = r.Rest();
    std::string help;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\') {
        help += raw[i];
        continue;
      }
      if (i + 1 == raw.size()) return r.Error("HELP text of " + name + " ends in a lone \\");
      const char e = raw[++i];
      if (e == '\\') {
        help += '\\';
      } else if (e == 'n') {
        help += '\n';
      } else {
        return r.Error("invalid escape \\" + std::string(1, e) + " in the HELP text of " + name +
                       "; only \\\\ and \\n are allowed");
      }
    }
    if (!IsValidUtf8(help)) return r.Error("HELP text of " + name + " is not valid UTF-8");
    TY_ASSIGN_OR_RETURN(State * s, Enter(name, line));
    if (s->help_line != 0) {
      return r.Error("second HELP line for " + name + " (the first is line " +
                     std::to_string(s->help_line) + ")");
    }
    if (!s->family.samples.empty()) {
      return r.Error("HELP line for " + name + " after its samples (the first is line " +
                     std::to_string(s->family.samples.front().line) + ")");
    }
    s->help_line = line;
    s->family.help = std::move(help);
    return Status::Ok();
  }

  Status Type(LineReader& r, const std::string& name, int line) {
    std::string_view type_name = r.TakeToken();
    r.SkipBlanks();
    if (!r.AtEnd()) return r.Error("unexpected text after the type of " + name);
    MetricType type;
    if (type_name == "counter") {
      type = MetricType::kCounter;
    } else if (type_name == "gauge") {
      type = MetricType::kGauge;
    } else if (type_name == "histogram") {
      type = MetricType::kHistogram;
    } else if (type_name == "untyped") {
      type = MetricType::kUntyped;
    } else if (type_name == "summary") {
      return r.Error("type summary of " + name + " is not supported");
    } else {
      return r.Error("unknown type \"" + std::string(type_name) + "\" for " + name +
                     "; expected counter, gauge, histogram or untyped");
    }
    TY_ASSIGN_OR_RETURN(State * s, Enter(name, line));
    if (s->type_line != 0) {
      return r.Error("second TYPE line for " + name + " (the first is line " +
                     std::to_string(s->type_line) + ")");
    }
    if (!s->family.samples.empty()) {
      return r.Error("TYPE line for " + name + " after its samples (the first is line " +
                     std::to_string(s->family.samples.front().line) + ")");
    }
    if (type == MetricType::kHistogram) {
      for (std::string_view suffix : kHistogramSuffixes) {
        auto it = by_name_.find(name + std::string(suffix));
        if (it != by_name_.end()) {
          return r.Error("histogram " + name + " would own the samples of family " + it->first +
                         " (line " + std::to_string(families_[it->second].first_line) + ")");
        }
      }
    }
    s->type_line = line;
    s->family.type = type;
    return Status::Ok();
  }

  Status Sample(LineReader& r, int line) {
    TY_ASSIGN_OR_RETURN(std::string name, r.MetricName("a metric name or '#'"));
    bool blank = r.SkipBlanks();
    MetricLabels labels;
    if (r.Peek() == '{') {
      TY_ASSIGN_OR_RETURN(labels, r.Labels());
      blank = r.SkipBlanks();
    }
    if (r.AtEnd()) return r.Error("sample " + name + " has no value");
    if (!blank) return r.Error("unexpected " + r.Upcoming() + " before the value of " + name);
    std::string_view value_text = r.TakeToken();
    std::optional<double> value = ParseMetricValue(value_text);
    if (!value) {
      return r.Error("value \"" + std::string(value_text) + "\" of " + name +
                     " is not a number (expected e.g. 1, -2.5e-3, NaN, +Inf, -Inf)");
    }
    std::optional<int64_t> timestamp;
    r.SkipBlanks();
    if (!r.AtEnd()) {
      std::string_view ts_text = r.TakeToken();
      timestamp = ParseTimestamp(ts_text);
      if (!timestamp) {
        return r.Error("timestamp \"" + std::string(ts_text) + "\" of " + name +
                       " is not an integer number of milliseconds");
      }
      r.SkipBlanks();
      if (!r.AtEnd()) return r.Error("unexpected text after the timestamp of " + name);
    }

    // Which family: a histogram's suffixed sample, else the family of that name,
    // else a new untyped family.
    std::string family_name = name;
    std::string_view suffix;
    for (std::string_view s : kHistogramSuffixes) {
      if (name.size() > s.size() && name.ends_with(s)) {
        auto it = by_name_.find(name.substr(0, name.size() - s.size()));
        if (it != by_name_.end() && families_[it->second].family.type == MetricType::kHistogram) {
          family_name = it->first;
          suffix = s;
        }
      }
    }
    TY_ASSIGN_OR_RETURN(State * s, Enter(family_name, line));
    if (s->family.type == MetricType::kHistogram) {
      if (suffix.empty()) {
        return r.Error("sample " + name + " of histogram " + name + " must be " + name +
                       "_bucket, " + name + "_sum or " + name + "_count");
      }
      const bool has_le =
          std::any_of(labels.begin(), labels.end(), [](const auto& l) { return l.first == "le"; });
      if (suffix == "_bucket" && !has_le) return r.Error(name + " has no le label");
      if (suffix != "_bucket" && has_le) {
        return r.Error(name + " has an le label; only " + family_name + "_bucket samples do");
      }
    }
    std::string key = SeriesKey(name, labels);
    auto [it, inserted] = series_.emplace(key, line);
    if (!inserted) {
      return r.Error("duplicate series " + key + " (first at line " + std::to_string(it->second) +
                     ")");
    }
    s->family.samples.push_back({name, std::move(labels), *value, timestamp, line});
    return Status::Ok();
  }

  // The family `name` for a line of it: the current one, or a new one. Refuses a
  // family whose lines resume after another family's, and a name a histogram owns.
  Result<State*> Enter(const std::string& name, int line) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) {
      if (current_ && *current_ == it->second) return &families_[it->second];
      return LineError(line, "family " + name + " (begun at line " +
                                 std::to_string(families_[it->second].first_line) +
                                 ") resumes after family " + families_[*current_].family.name +
                                 "; a family's lines must be together");
    }
    for (std::string_view suffix : kHistogramSuffixes) {
      if (name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
      auto base = by_name_.find(name.substr(0, name.size() - suffix.size()));
      if (base != by_name_.end() && families_[base->second].family.type == MetricType::kHistogram) {
        return LineError(line, "family " + name + " collides with the samples of histogram " +
                                   base->first + " (line " +
                                   std::to_string(families_[base->second].first_line) + ")");
      }
    }
    TY_RETURN_IF_ERROR(Close());
    State s;
    s.family.name = name;
    s.first_line = line;
    families_.push_back(std::move(s));
    by_name_.emplace(name, families_.size() - 1);
    current_ = families_.size() - 1;
    return &families_.back();
  }

  // Checks the current family once its lines are over.
  Status Close() {
    if (!current_) return Status::Ok();
    const ParsedFamily& f = families_[*current_].family;
    if (f.type != MetricType::kHistogram) return Status::Ok();
    struct Series {
      std::string key;
      int first_line;
      std::vector<const ParsedSample*> buckets;
      const ParsedSample* sum = nullptr;
      const ParsedSample* count = nullptr;
    };
    std::vector<Series> series;
    std::map<std::string, size_t> index;
    for (const ParsedSample& sample : f.samples) {
      MetricLabels labels;
      for (const auto& l : sample.labels) {
        if (l.first != "le") labels.push_back(l);
      }
      std::string key = SeriesKey(f.name, labels);
      auto [it, inserted] = index.emplace(key, series.size());
      if (inserted) series.push_back({key, sample.line, {}, nullptr, nullptr});
      Series& s = series[it->second];
      if (sample.name.ends_with("_bucket")) {
        s.buckets.push_back(&sample);
      } else if (sample.name.ends_with("_sum")) {
        s.sum = &sample;
      } else {
        s.count = &sample;
      }
    }
    for (const Series& s : series) {
      double previous_le = -std::numeric_limits<double>::infinity();
      double previous_count = 0;
      std::string previous_le_text;
      for (const ParsedSample* b : s.buckets) {
        const std::string le_text = *b->Label("le");
        std::optional<double> le = ParseMetricValue(le_text);
        if (!le || std::isnan(*le)) {
          return LineError(b->line, "le=\"" + le_text + "\" of " + b->name + " is not a number");
        }
        if (!previous_le_text.empty() && !(*le > previous_le)) {
          return LineError(b->line, "le=\"" + le_text + "\" after le=\"" + previous_le_text +
                                        "\": the buckets of " + s.key +
                                        " must be in increasing order of le");
        }
        if (std::isnan(b->value) || b->value < 0) {
          return LineError(b->line, "bucket le=\"" + le_text + "\" of " + s.key + " has count " +
                                        FormatMetricValue(b->value) + "; counts are non-negative");
        }
        if (b->value < previous_count) {
          return LineError(b->line, "bucket le=\"" + le_text + "\" of " + s.key + " has count " +
                                        FormatMetricValue(b->value) + ", less than the " +
                                        FormatMetricValue(previous_count) +
                                        " of the bucket before it; bucket counts are cumulative");
        }
        previous_le = *le;
        previous_le_text = le_text;
        previous_count = b->value;
      }
      if (s.buckets.empty() || !std::isinf(previous_le)) {
        return LineError(s.first_line, "histogram " + s.key + " has no le=\"+Inf\" bucket");
      }
      if (s.count == nullptr) {
        return LineError(s.first_line, "histogram " + s.key + " has no " + f.name + "_count");
      }
      if (s.count->value != previous_count) {
        return LineError(s.count->line, f.name + "_count of " + s.key + " is " +
                                            FormatMetricValue(s.count->value) +
                                            " but its le=\"+Inf\" bucket is " +
                                            FormatMetricValue(previous_count));
      }
      if (s.sum == nullptr) {
        return LineError(s.first_line, "histogram " + s.key + " has no " + f.name + "_sum");
      }
    }
    return Status::Ok();
  }

  std::vector<State> families_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::map<std::string, int> series_;  // SeriesKey -> line
  std::optional<size_t> current_;
};

}  // namespace

Result<std::vector<ParsedFamily>> ParseExposition(std::string_view text) {
  return Parser().Parse(text);
}

}  // namespace trainyard::server
