#include "core/yaml_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/names.h"

namespace trainyard {
namespace {

// Reads a scalar through `parse` (text -> Result<T>), whose error message is the user's.
template <typename T, typename Parse>
bool ReadParsed(YamlFieldReader& r, const YAML::Node& v, const std::string& field,
                std::string_view expected, Parse parse, T& out) {
  if (!r.Scalar(v, field, expected)) return false;
  auto parsed = parse(v.Scalar());
  if (!parsed.ok()) {
    r.Error(v, field, parsed.status().message());
    return false;
  }
  out = *parsed;
  return true;
}

}  // namespace

std::string KindName(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return QuoteForMessage(n.Scalar());
    default:
      return "an undefined value";
  }
}

std::string JoinNames(const std::vector<std::string_view>& names, std::string_view last_sep) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? last_sep : ", ";
    out += names[i];
  }
  return out;
}

void YamlFieldReader::Error(const YAML::Node& at, std::string field, std::string message) {
  ErrorAtLine(LineOfNode(at), std::move(field), std::move(message));
}

void YamlFieldReader::ErrorAtLine(int line, std::string field, std::string message) {
  errors_.push_back(Diagnostic{file_, line, std::move(field), std::move(message)});
}

int YamlFieldReader::LineOfNode(const YAML::Node& n) {
  if (!n.IsDefined()) return 0;
  const YAML::Mark m = n.Mark();
  return m.is_null() ? 0 : m.line + 1;
}

int YamlFieldReader::LineOf(const std::string& field) const {
  std::string f = field;
  while (true) {
    if (auto it = lines_.find(f); it != lines_.end()) return it->second;
    auto cut = f.find_last_of(".[");
    if (cut == std::string::npos) return 0;
    f = f.substr(0, cut);
  }
}

void ReportYamlError(YamlFieldReader& reader, const YAML::Exception& e) {
  std::string what;
  for (unsigned char c : e.msg) {
    if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      what += buf;
    } else {
      what += static_cast<char>(c);
    }
  }
  reader.ErrorAtLine(e.mark.is_null() ? 0 : e.mark.line + 1, "", "not valid YAML: " + what);
}

std::string PathKey(std::string_view key) {
  const bool plain =
      !key.empty() && key.size() <= 64 && std::all_of(key.begin(), key.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '_' || c == '-' || c == '/' || c == '$';
      });
  return plain ? std::string(key) : QuoteForMessage(key);
}

void YamlFieldReader::ForEachField(const YAML::Node& n, const std::string& prefix,
                                   const std::vector<std::string_view>& known, const FieldFn& fn,
                                   const std::vector<std::string_view>& ignored) {
  std::set<std::string> seen;
  for (const auto& kv : n) {
    const YAML::Node& k = kv.first;
    if (!k.IsScalar()) {
      Error(k, prefix, "field names must be plain words, got " + KindName(k));
      continue;
    }
    const std::string& key = k.Scalar();
    if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
    const std::string path = prefix.empty() ? PathKey(key) : prefix + "." + PathKey(key);
    lines_.emplace(path, LineOfNode(k));
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string msg = "unknown field";
      if (std::string hint = ClosestMatch(key, known); !hint.empty()) {
        msg += "; did you mean " + hint + "?";
      } else {
        msg += "; valid fields" + (prefix.empty() ? std::string() : " of " + prefix) + " are " +
               JoinNames(known);
      }
      Error(k, path, msg);
      continue;
    }
    if (!seen.insert(key).second) {
      Error(k, path, "appears more than once; give each field once");
      continue;
    }
    if (kv.second.IsNull()) continue;  // `field:` with no value: as if not given
    fn(key, kv.second);
  }
}

bool YamlFieldReader::Scalar(const YAML::Node& v, const std::string& field,
                             std::string_view expected) {
  if (v.IsScalar()) return true;
  Error(v, field, "must be " + std::string(expected) + ", got " + KindName(v));
  return false;
}

bool YamlFieldReader::String(const YAML::Node& v, const std::string& field, std::string& out) {
  if (!Scalar(v, field, "a string")) return false;
  out = v.Scalar();
  return true;
}

bool YamlFieldReader::Int(const YAML::Node& v, const std::string& field, int64_t lo, int64_t hi,
                          int64_t& out, IntWording wording) {
  if (!Scalar(v, field, wording.noun)) return false;
  const std::string& s = v.Scalar();
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec == std::errc::invalid_argument || ptr != s.data() + s.size()) {
    Error(v, field, "must be " + std::string(wording.noun) + ", got " + QuoteForMessage(s));
    return false;
  }
  const bool overflow = ec == std::errc::result_out_of_range;  // beyond 64 bits
  if (!overflow && n >= lo && n <= hi) {
    out = n;
    return true;
  }
  // A number too long for 64 bits is quoted as written; `n` does not hold it.
  const std::string got = overflow ? QuoteForMessage(s) : s;
  if (wording.between) {
    Error(v, field,
          "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + got);
  } else if (overflow ? s[0] == '-' : n < lo) {
    Error(v, field, "must be >= " + std::to_string(lo) + ", got " + got);
  } else {
    Error(v, field, "must be <= " + std::to_string(hi) + ", got " + got);
  }
  return false;
}

bool YamlFieldReader::Bool(const YAML::Node& v, const std::string& field, bool& out) {
  if (!Scalar(v, field, "true or false")) return false;
  const std::string& s = v.Scalar();
  if (s == "true" || s == "True" || s == "yes") {
    out = true;
  } else if (s == "false" || s == "False" || s == "no") {
    out = false;
  } else {
    Error(v, field, "must be true or false, got " + QuoteForMessage(s));
    return false;
  }
  return true;
}

bool YamlFieldReader::DurationField(const YAML::Node& v, const std::string& field, Duration& out,
                                    std::string_view expected) {
  return ReadParsed(*this, v, field, expected, ParseDuration, out);
}

bool YamlFieldReader::MemoryField(const YAML::Node& v, const std::string& field, int64_t& out) {
  return ReadParsed(*this, v, field, "a memory size such as \"256Gi\"", ParseMemory, out);
}

bool YamlFieldReader::CpusField(const YAML::Node& v, const std::string& field, int64_t& out,
                                std::optional<int64_t> max_milli) {
  if (!Scalar(v, field, "a number of CPUs such as 8, 0.5 or \"500m\"")) return false;
  const std::string& s = v.Scalar();
  const std::string hint =
      "must be a number of CPUs such as 8, 0.5 or \"500m\", got " + QuoteForMessage(s);
  if (!s.empty() && s.back() == 'm') {
    int64_t milli = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size() - 1, milli);
    if (ec != std::errc() || ptr != s.data() + s.size() - 1 || milli < 0 ||
        (max_milli && milli > *max_milli)) {
      Error(v, field, hint);
      return false;
    }
    out = milli;
    return true;
  }
  double cores = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), cores);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(cores) || cores < 0 ||
      (max_milli && cores * 1000 > static_cast<double>(*max_milli))) {
    Error(v, field, hint);
    return false;
  }
  if (cores > 1e9) {  // would overflow as millicores
    Error(
        v, field,
        "must be <= " + std::to_string(SpecLimits::kMaxMilliCpusPerReplica / 1000) + ", got " + s);
    return false;
  }
  out = std::llround(cores * 1000);
  return true;
}

std::optional<size_t> YamlFieldReader::ChoiceIndex(const YAML::Node& v, const std::string& field,
                                                   const std::vector<std::string_view>& valid,
                                                   std::string_view last_sep) {
  const std::string expected = "one of " + JoinNames(valid, last_sep);
  if (!Scalar(v, field, expected)) return std::nullopt;
  const std::string& s = v.Scalar();
  if (auto it = std::find(valid.begin(), valid.end(), s); it != valid.end()) {
    return static_cast<size_t>(it - valid.begin());
  }
  std::string msg = "must be " + expected + ", got " + QuoteForMessage(s);
  if (std::string hint = ClosestMatch(s, valid); !hint.empty()) {
    msg += "; did you mean " + hint + "?";
  }
  Error(v, field, msg);
  return std::nullopt;
}

bool YamlFieldReader::Choice(const YAML::Node& v, const std::string& field,
                             const std::vector<std::string_view>& valid, std::string& out) {
  auto i = ChoiceIndex(v, field, valid);
  if (!i) return false;
  out = valid[*i];
  return true;
}

bool YamlFieldReader::List(const YAML::Node& v, const std::string& field) {
  if (v.IsSequence()) return true;
  Error(v, field, "must be a list, got " + KindName(v));
  return false;
}

bool YamlFieldReader::Map(const YAML::Node& v, const std::string& field,
                          const std::vector<std::string_view>& known) {
  if (v.IsMap()) return true;
  Error(v, field, "must be a map with fields " + JoinNames(known) + ", got " + KindName(v));
  return false;
}

void YamlFieldReader::StringMap(const YAML::Node& v, const std::string& field,
                                std::map<std::string, std::string>& out, std::string_view key_noun,
                                const KeyCheck& accept_key) {
  if (!v.IsMap()) {
    Error(v, field, "must be a map of names to strings, got " + KindName(v));
    return;
  }
  for (const auto& kv : v) {
    if (!kv.first.IsScalar()) {
      Error(kv.first, field,
            "keys must be " + std::string(key_noun) + ", got " + KindName(kv.first));
      continue;
    }
    const std::string& key = kv.first.Scalar();
    const std::string path = field + "." + PathKey(key);
    lines_.emplace(path, LineOfNode(kv.first));
    if (accept_key && !accept_key(kv.first, path)) continue;
    if (out.count(key)) {
      Error(kv.first, path, "appears more than once");
      continue;
    }
    if (kv.second.IsNull()) {
      out[key] = "";
    } else if (kv.second.IsScalar()) {
      out[key] = kv.second.Scalar();
    } else {
      Error(kv.second, path, "must be a string, got " + KindName(kv.second));
    }
  }
}

}  // namespace trainyard
