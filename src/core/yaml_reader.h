// Reading user-written YAML documents field by field, with errors users can act on.
//
// YamlFieldReader is the common part of the readers of job specs, scheduler scenarios
// and alert rules: it walks a map against the list of fields it may hold (an unknown
// field gets "did you mean X?" or the list of valid ones; a repeated field and a
// non-word key are errors; `field:` with no value counts as not given), reads scalars
// with uniform messages ("replicas: must be an integer, got \"two\""), and collects
// every problem as a file:line Diagnostic instead of stopping at the first. A reader
// for one kind of document derives from it and adds what is particular to it.
//
// Not thread-safe: one reader reads one document on one thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_spec.h"  // Diagnostic
#include "core/units.h"

namespace trainyard {

// What a node is, for "got ..." in messages: "a map", "a list", "nothing", or the
// scalar quoted ("\"two\"").
std::string KindName(const YAML::Node& n);

// "a, b, c"; with last_sep " or ": "a, b or c".
std::string JoinNames(const std::vector<std::string_view>& names, std::string_view last_sep = ", ");

// How YamlFieldReader::Int words its errors; the readers grew different wordings, which
// their users and tests rely on.
struct IntWording {
  std::string_view noun = "an integer";  // "must be <noun>, got \"x\""
  // Out of range: "must be between LO and HI, got N" rather than "must be >= LO" /
  // "must be <= HI".
  bool between = false;
};

// A key as a field path shows it ("rule.labels.<key>"): as written when it is a plain
// word, else quoted and escaped, since a key may hold anything YAML can (control
// characters included) and error messages stay one line of text.
std::string PathKey(std::string_view key);

class YamlFieldReader;
// Reports a YAML syntax error at its line as "not valid YAML: <what>", with the parser's
// message escaped (it may quote the offending byte: a control character, or one byte
// of a multi-byte character).
void ReportYamlError(YamlFieldReader& reader, const YAML::Exception& e);

class YamlFieldReader {
 public:
  // `file` names the document in diagnostics only.
  explicit YamlFieldReader(std::string_view file) : file_(file) {}

  const std::string& file() const { return file_; }
  std::vector<Diagnostic>& errors() { return errors_; }

  void Error(const YAML::Node& at, std::string field, std::string message);
  void ErrorAtLine(int line, std::string field, std::string message);

  // 1-based line of `n`; 0 when it has none.
  static int LineOfNode(const YAML::Node& n);
  // Line where `field` (a path ForEachField or StringMap met, e.g. "resources.gpus"),
  // or failing that its closest enclosing field, was written; 0 when none was met.
  int LineOf(const std::string& field) const;

  // Calls fn(key, value) for each field of map `n` in the order written. `prefix` is the
  // path of `n` in messages ("" at top level, so that a field's path is `prefix`.key).
  // Unknown, repeated and non-word keys are errors and are not passed on; nor are fields
  // with no value. Keys in `ignored` are skipped without a word (the caller reports them).
  using FieldFn = std::function<void(const std::string& key, const YAML::Node& value)>;
  void ForEachField(const YAML::Node& n, const std::string& prefix,
                    const std::vector<std::string_view>& known, const FieldFn& fn,
                    const std::vector<std::string_view>& ignored = {});

  // Each reader below returns false, having recorded an error naming `field`, when `v`
  // is not what it reads; `out` is then unchanged.

  // `expected` completes "must be ..., got <kind>".
  bool Scalar(const YAML::Node& v, const std::string& field, std::string_view expected);
  bool String(const YAML::Node& v, const std::string& field, std::string& out);
  bool Int(const YAML::Node& v, const std::string& field, int64_t lo, int64_t hi, int64_t& out,
           IntWording wording = {});
  template <typename T>
  bool IntAs(const YAML::Node& v, const std::string& field, int64_t lo, int64_t hi, T& out,
             IntWording wording = {}) {
    int64_t n = 0;
    if (!Int(v, field, lo, hi, n, wording)) return false;
    out = static_cast<T>(n);
    return true;
  }
  // true/True/yes or false/False/no.
  bool Bool(const YAML::Node& v, const std::string& field, bool& out);
  bool DurationField(const YAML::Node& v, const std::string& field, Duration& out,
                     std::string_view expected = "a duration such as \"30m\"");
  bool MemoryField(const YAML::Node& v, const std::string& field, int64_t& out);
  // CPUs as millicores, written as cores ("8", "0.5") or millicores ("500m"). Above
  // `max_milli` is an error; without it the caller checks the range, and only a count
  // that would overflow (over 10^9 cores) is refused here.
  bool CpusField(const YAML::Node& v, const std::string& field, int64_t& out,
                 std::optional<int64_t> max_milli = std::nullopt);
  // One of `valid`, with a hint when close to one; returns its index. `last_sep` joins
  // the last two in the message.
  std::optional<size_t> ChoiceIndex(const YAML::Node& v, const std::string& field,
                                    const std::vector<std::string_view>& valid,
                                    std::string_view last_sep = ", ");
  bool Choice(const YAML::Node& v, const std::string& field,
              const std::vector<std::string_view>& valid, std::string& out);
  bool List(const YAML::Node& v, const std::string& field);
  // A map, whose fields `known` are listed when it is not.
  bool Map(const YAML::Node& v, const std::string& field,
           const std::vector<std::string_view>& known);

  // Adds the entries of a map of names to strings to `out` (`name:` alone is ""); a
  // name already in `out` is an error. `key_noun` says what keys must be ("strings");
  // `accept_key`, when given, reports and returns false for a key it refuses.
  using KeyCheck = std::function<bool(const YAML::Node& key, const std::string& path)>;
  void StringMap(const YAML::Node& v, const std::string& field,
                 std::map<std::string, std::string>& out, std::string_view key_noun = "strings",
                 const KeyCheck& accept_key = nullptr);

 private:
  std::string file_;
  std::vector<Diagnostic> errors_;
  std::map<std::string, int> lines_;  // field path -> line where it was first written
};

}  // namespace trainyard
