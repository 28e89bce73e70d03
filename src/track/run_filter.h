// RunFilter: the search language of `trainyard runs --filter '...'` and
// `GET /api/v1/runs?filter=...`, parsed once and matched against many runs.
//
// Thread-safety: a RunFilter is immutable once parsed. Copies share the parsed tree;
// every const method may be called from any number of threads at once.
//
// Grammar (keywords AND OR NOT LIKE ILIKE IN IS NULL are case-insensitive):
//
//   filter     := <empty or blanks: matches every run> | or
//   or         := and { OR and }
//   and        := not { AND not }                  precedence: NOT > AND > OR
//   not        := NOT not | "(" or ")" | comparison
//   comparison := column ( op value
//                        | [NOT] (LIKE | ILIKE) string
//                        | [NOT] IN "(" value { "," value } ")"
//                        | IS [NOT] NULL )
//   op         := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
//   column     := prefix "." segment { "." segment } | name
//   prefix     := params | param | metrics | metric | attributes | attribute | attr | run
//               | labels | label | tags | tag          (case-insensitive)
//   name       := [A-Za-z_][A-Za-z0-9_-]* (not a keyword) | `backticked`: an attribute
//   segment    := [A-Za-z0-9_][A-Za-z0-9_-]* | `backticked`; the segments joined by "."
//                 make the key: params.optim.name has the key "optim.name",
//                 params.`eval/loss` the key "eval/loss"
//   value      := number | string
//   number     := [-] (digits [. digits] | . digits) [(e|E) [+|-] digits], within the
//                 range of a double
//   string     := '...' or "...": \\ \' \" \` \n \t \r are escapes; a backslash before
//                 any other character is kept, so 'a\%' and 'a\\%' are both the LIKE
//                 pattern a\% (a literal %), and '\\\\' is the pattern that matches one
//                 backslash. Backticked keys follow the same rules.
//
// Meaning. Every comparison is true or false (no SQL NULL logic), and:
//  - metrics are numbers (the run's latest value of each key); params, attributes and
//    labels are strings. Keys and attribute names are case-sensitive.
//  - A key the run lacks makes every comparison false (!=, NOT LIKE and NOT IN
//    included); only IS NULL is true for it. NOT (x = 1) is true for a run without x,
//    x != 1 is not.
//  - A metric is compared with number literals only (a string, LIKE or ILIKE on a
//    metric is a parse error). A NaN metric makes every comparison false except !=.
//  - A string field compared with a number literal is compared as a number when the
//    whole string parses as one (std::from_chars: "3e-4", "-2", "inf", "nan"; no
//    blanks, no leading +), so params.lr > 1e-4 holds for "3e-4"; otherwise the
//    comparison is false. A string that parses as "nan" behaves as a NaN metric.
//  - A string field compared with a string literal compares bytes lexicographically.
//  - x IN (a, b) is x = a OR x = b; x NOT IN (a, b) is x != a AND x != b.
//  - LIKE matches the whole value: % is any run of characters, _ is one character
//    (one UTF-8 sequence), a backslash makes the next character literal. ILIKE also
//    folds ASCII letters. Matching takes at most O(|value| * |pattern|) steps.
//
// Limits: the text may be at most kMaxFilterBytes bytes of valid UTF-8 with no control
// characters but tab, CR and newline, and "(" and NOT may nest at most kMaxFilterDepth
// deep (AND / OR chains may be as long as the text allows). Errors read
// `filter: column 14: expected a comparison operator (...), got "lr"`, where the
// column counts characters from 1 at the start of the text.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace trainyard::track {

inline constexpr size_t kMaxFilterBytes = 4096;
inline constexpr int kMaxFilterDepth = 64;

// What a filter looks at in a run. Callers may load only the keys the filter names
// (RunFilter::MetricKeys and ParamKeys).
struct FilterableRun {
  // id, name, experiment, state, tenant, queue, user, code, data_version, ...
  std::map<std::string, std::string, std::less<>> attributes;
  std::map<std::string, std::string, std::less<>> params;
  std::map<std::string, double, std::less<>> metrics;  // latest value of each key
  std::map<std::string, std::string, std::less<>> labels;
};

struct RunFilterOptions {
  // When not empty, an attribute outside this list is a parse error (a misspelt
  // `staet = 'Running'` would otherwise silently match nothing).
  std::vector<std::string> known_attributes;
};

struct RunFilterNode;  // the parsed tree, private to run_filter.cc

class RunFilter {
 public:
  // Matches every run; ToString() is "".
  RunFilter();

  // Returns the filter, or InvalidArgument naming the column and what was expected.
  static Result<RunFilter> Parse(std::string_view text, const RunFilterOptions& options = {});

  bool Matches(const FilterableRun& run) const;
  // True for the empty filter.
  bool MatchesAll() const;

  // Canonical form: full prefixes, upper-case keywords, one space around operators,
  // parentheses only where needed, numbers in their shortest exact form. Parse of it
  // gives an equivalent filter whose ToString() is the same text. It can be longer
  // than the text parsed (prefixes are spelled out), so a filter typed near
  // kMaxFilterBytes may print to text over the limit.
  std::string ToString() const;

  // The keys the filter names, sorted, without repeats.
  std::vector<std::string> MetricKeys() const;
  std::vector<std::string> ParamKeys() const;
  std::vector<std::string> AttributeKeys() const;
  std::vector<std::string> LabelKeys() const;

 private:
  explicit RunFilter(std::shared_ptr<const RunFilterNode> root);

  std::shared_ptr<const RunFilterNode> root_;  // null: matches every run
};

}  // namespace trainyard::track
