// libFuzzer target: the run search filter (`runs --filter`, `GET /api/v1/runs?filter=`,
// track/run_filter.h).
//
// Beyond "does not crash": a rejection reads "filter: column N: ..." (or names the
// length limit) in printable UTF-8; an accepted filter prints a canonical form that
// parses to a filter with the same canonical form, the same keys and the same verdict
// on runs built from the keys it names, and NOT of it gives the opposite verdict.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "track/run_filter.h"

namespace {

using trainyard::track::FilterableRun;
using trainyard::track::RunFilter;

[[noreturn]] void Fail(const char* what, std::string_view text) {
  trainyard::fuzz::Fail("fuzz_run_filter", what, text);
}

bool IsPrintableUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x20 || b == 0x7F) return false;
    size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Runs in which each key the filter names is missing or holds one of a few values
// (numbers as text, NaN, words, the fuzz input itself), chosen by run and key.
std::vector<FilterableRun> RunsFor(const RunFilter& f, std::string_view text) {
  const std::string input(text.substr(0, 512));
  const std::string strings[] = {"",     "0",      "3e-4", "-2.5", "nan",   "inf", "adam",
                                 "a%b_", "Zürich", "\\",   "x'y",  "1e308", input};
  const double numbers[] = {0,
                            -0.0,
                            1e-4,
                            2,
                            -1,
                            1e308,
                            std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN()};
  constexpr size_t kStrings = sizeof(strings) / sizeof(strings[0]);
  constexpr size_t kNumbers = sizeof(numbers) / sizeof(numbers[0]);
  std::vector<FilterableRun> runs(8);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto pick = [i](const std::string& key, size_t n) {
      return (std::hash<std::string>()(key) + i * 7) % (n + 1);  // n: missing
    };
    for (const std::string& key : f.MetricKeys()) {
      if (const size_t k = pick(key, kNumbers); k < kNumbers) runs[i].metrics[key] = numbers[k];
    }
    const auto fill = [&](const std::vector<std::string>& keys, auto& fields) {
      for (const std::string& key : keys) {
        if (const size_t k = pick(key, kStrings); k < kStrings) fields[key] = strings[k];
      }
    };
    fill(f.ParamKeys(), runs[i].params);
    fill(f.AttributeKeys(), runs[i].attributes);
    fill(f.LabelKeys(), runs[i].labels);
  }
  return runs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  trainyard::Result<RunFilter> f = RunFilter::Parse(text);
  if (!f.ok()) {
    const std::string message = f.status().message();
    if (message.rfind("filter: ", 0) != 0) Fail("the error does not start with \"filter: \"", text);
    if (message.rfind("filter: column ", 0) != 0 && size <= trainyard::track::kMaxFilterBytes) {
      Fail("the error names no column", text);
    }
    if (!IsPrintableUtf8(message)) Fail("the error is not printable UTF-8", message);
    return 0;
  }
  const std::string canonical = f->ToString();
  if (!IsPrintableUtf8(canonical)) Fail("the canonical form is not printable UTF-8", canonical);
  if (canonical.size() > trainyard::track::kMaxFilterBytes) return 0;  // too long to parse back
  trainyard::Result<RunFilter> again = RunFilter::Parse(canonical);
  if (!again.ok()) Fail("the canonical form does not parse", canonical);
  if (again->ToString() != canonical) Fail("the canonical form is not stable", canonical);
  if (again->MetricKeys() != f->MetricKeys() || again->ParamKeys() != f->ParamKeys() ||
      again->AttributeKeys() != f->AttributeKeys() || again->LabelKeys() != f->LabelKeys()) {
    Fail("the canonical form names other keys", canonical);
  }
  trainyard::Result<RunFilter> negated = RunFilter::Parse("NOT (" + canonical + ")");
  for (const FilterableRun& run : RunsFor(*f, text)) {
    const bool verdict = f->Matches(run);
    if (again->Matches(run) != verdict) Fail("the canonical form matches other runs", canonical);
    if (negated.ok() && negated->Matches(run) == verdict) Fail("NOT does not negate", canonical);
  }
  return 0;
}
