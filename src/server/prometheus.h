// The Prometheus text exposition format, version 0.0.4: a writer (Exposition), which
// the server's /metrics renders with, and a strict parser (ParseExposition), which tests
// and end-to-end checks read /metrics back with.
//
// Format (https://prometheus.io/docs/instrumenting/exposition_formats/): one family of
// series per metric name, introduced by "# HELP name text" and "# TYPE name type", then
// its samples, one per line: `name{label="value",...} value [timestamp_ms]`.
//
// Naming conventions we follow, those `promtool check metrics` lints (the writer does
// not enforce them, because the GPU telemetry keeps dcgm-exporter's names and labels,
// e.g. DCGM_FI_DEV_XID_ERRORS, a gauge, with the label modelName):
//   - our own names start with "trainyard_" and carry the unit as a suffix, in base
//     units (_seconds, _bytes, _ratio);
//   - names and label names are snake_case (trainyard_gpu_xid_errors_total{gpu_type});
//   - counters end in "_total" (trainyard_preemptions_total), nothing else does;
//   - every family has HELP text;
//   - a histogram `name` is rendered as name_bucket{le="..."}, name_sum, name_count.
// server_prometheus_test runs promtool on a page with every family of the server's.
//
// Thread-safety: Exposition is a plain value built by one thread; ParseExposition and
// the free functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace trainyard::server {

enum class MetricType { kCounter, kGauge, kHistogram, kUntyped };

// "counter", "gauge", "histogram", "untyped": the spelling of a TYPE line.
std::string_view MetricTypeName(MetricType type);

// Label name/value pairs of one series, in the order they are rendered.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved for Prometheus itself).
bool IsValidLabelName(std::string_view name);

// A sample value as Prometheus spells it: "NaN", "+Inf", "-Inf", otherwise the shortest
// text that parses back to exactly `value` (std::to_chars): "0.1", "3", "1e+21".
std::string FormatMetricValue(double value);
// HELP text: backslash -> \\, line feed -> \n.
std::string EscapeHelp(std::string_view help);
// Label values: backslash -> \\, double quote -> \", line feed -> \n.
std::string EscapeLabelValue(std::string_view value);

// A histogram's state: counts per bucket (not cumulative) for fixed upper bounds, the
// last bucket being (bounds.back(), +Inf]. Observations equal to a bound fall in that
// bound's bucket (Prometheus buckets are "less than or equal"); NaN falls in the +Inf
// bucket and makes the sum NaN.
struct HistogramValue {
  std::vector<double> bounds;    // finite, strictly increasing; +Inf is implicit
  std::vector<uint64_t> counts;  // size bounds.size() + 1
  double sum = 0;

  // An empty histogram. REQUIRES: `bounds` finite and strictly increasing (CHECK).
  static HistogramValue WithBounds(std::vector<double> bounds);
  void Observe(double value);
  // The number of observations: the +Inf bucket's cumulative count.
  uint64_t Count() const;
};

// Builds one exposition. Families are rendered in the order they were started, each
// with its HELP and TYPE once, then its samples in the order they were added.
//
// Names, label names and the shape of what is added are constants of our code, so
// misuse is a programming error and CHECK-fails: an invalid metric or label name, the
// same family twice, a family whose series names collide with another's (histogram
// `x` and a family `x_count`), a sample before any family, Sample() on a histogram
// family or Histogram() on another, the same label set twice in one family, a label
// named twice, a histogram series with an "le" label. Label values and HELP text are
// free text and are escaped.
class Exposition {
 public:
  // Starts a family; samples added after it belong to it.
  void Family(std::string_view name, std::string_view help, MetricType type);
  // A sample of the current family. REQUIRES: its type is counter, gauge or untyped.
  void Sample(const MetricLabels& labels, double value);
  // One histogram series of the current family. REQUIRES: its type is histogram and
  // `h.counts.size() == h.bounds.size() + 1`.
  void Histogram(const MetricLabels& labels, const HistogramValue& h);

  // The exposition text; every line ends in a line feed.
  std::string Text() const;

 private:
  struct FamilyText {
    std::string name;
    MetricType type;
    std::string header;            // the HELP and TYPE lines
    std::string samples;           // the sample lines
    std::set<std::string> series;  // rendered label sets, to refuse duplicates
  };
  FamilyText& Current();
  void Claim(const std::string& sample_name);

  std::vector<FamilyText> families_;
  std::set<std::string> sample_names_;  // every sample name a family may use
};

// What ParseExposition reads.
struct ParsedSample {
  std::string name;     // as written, with a histogram's _bucket/_sum/_count suffix
  MetricLabels labels;  // as written, unescaped, in order
  double value = 0;
  std::optional<int64_t> timestamp_ms;
  int line = 0;  // 1-based

  // The value of label `name`; nullopt when the sample has none.
  std::optional<std::string> Label(std::string_view name) const;
};

struct ParsedFamily {
  std::string name;
  std::string help;                        // unescaped; empty without a HELP line
  MetricType type = MetricType::kUntyped;  // untyped without a TYPE line
  std::vector<ParsedSample> samples;
};

// Parses an exposition strictly, refusing what Prometheus would accept only leniently.
// Checks: line syntax (no CR, a final line feed, nothing after the timestamp), HELP and
// label escapes (only \\, \n and, in label values, \"), UTF-8 text, metric and label
// names, values (Go float syntax, NaN, +Inf, -Inf) and integer timestamps; each
// family's HELP and TYPE at most once and before its samples; a family's lines
// contiguous; a sample without a declared family is an untyped family of its own; no
// two samples with the same name and label set; histogram series with increasing le,
// cumulative non-decreasing bucket counts, a le="+Inf" bucket, _sum, and _count equal
// to the +Inf bucket. Type "summary" is refused: nothing of ours writes one.
//
// Returns the families in order of appearance, or InvalidArgument("line N: ...")
// naming the first problem.
Result<std::vector<ParsedFamily>> ParseExposition(std::string_view text);

// The family called `name`, or nullptr.
const ParsedFamily* FindFamily(const std::vector<ParsedFamily>& families, std::string_view name);

}  // namespace trainyard::server
