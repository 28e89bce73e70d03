#include "track/ingest.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace trainyard::track {
namespace {

using json = nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s.substr(0, 64)) {
    if (static_cast<unsigned char>(c) < 0x20 || c == '"' || c == '\\') {
      out += '?';
    } else {
      out += c;
    }
  }
  if (s.size() > 64) out += "...";
  return out + "\"";
}

// A metric value: a JSON number, or "NaN" / "Infinity" / "-Infinity".
std::optional<double> ValueOf(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "NaN") return kNaN;
    if (s == "Infinity") return kInf;
    if (s == "-Infinity") return -kInf;
  }
  return std::nullopt;
}

std::string ParamText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "null";
  return v.dump();
}

// Collects points per (key, rank) in arrival order.
class Collector {
 public:
  Collector(int64_t run, IngestBatch& out) : run_(run), out_(out) {}
  Status Add(std::string_view key, int32_t rank, Point p) {
    auto it = index_.find(Key{std::string(key), rank});
    if (it == index_.end()) {
      if (index_.size() >= kMaxKeysPerBatch) {
        return InvalidArgument("at most " + std::to_string(kMaxKeysPerBatch) +
                               " different keys in one batch");
      }
      it = index_.emplace(Key{std::string(key), rank}, out_.appends.size()).first;
      out_.appends.push_back({run_, rank, std::string(key), {}});
    }
    out_.appends[it->second].points.push_back(p);
    ++out_.points;
    return Status::Ok();
  }

 private:
  struct Key {
    std::string key;
    int32_t rank;
    bool operator==(const Key&) const = default;
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      return std::hash<std::string>()(k.key) * 31 + static_cast<size_t>(k.rank);
    }
  };
  int64_t run_;
  IngestBatch& out_;
  std::unordered_map<Key, size_t, Hash> index_;
};

std::optional<int64_t> IntField(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

bool IsValidKey(std::string_view key) {
  if (key.empty() || key.size() > 128) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

IngestBatch DecodeRecords(int64_t run, int32_t rank, const json& records) {
  IngestBatch out;
  Collector points(run, out);
  if (!records.is_array()) return out;
  for (const json& r : records) {
    if (!r.is_object()) {
      ++out.skipped;
      continue;
    }
    auto kind = r.find("kind");
    if (kind == r.end() || !kind->is_string()) {
      ++out.skipped;
      continue;
    }
    const auto& k = kind->get_ref<const std::string&>();
    auto time = IntField(r, "time_ms");
    if (k == "metrics") {
      auto step = IntField(r, "step");
      auto m = r.find("metrics");
      if (!step || *step < 0 || !time || m == r.end() || !m->is_object() || m->empty()) {
        ++out.skipped;
        continue;
      }
      bool bad = false;
      for (const auto& [key, v] : m->items()) bad = bad || !IsValidKey(key) || !ValueOf(v);
      if (bad) {
        ++out.skipped;
        continue;
      }
      for (const auto& [key, v] : m->items()) {
        if (!points.Add(key, rank, {*step, *time, *ValueOf(v)}).ok()) ++out.skipped;
      }
    } else if (k == "params") {
      auto p = r.find("params");
      if (p == r.end() || !p->is_object()) {
        ++out.skipped;
        continue;
      }
      for (const auto& [key, v] : p->items()) {
        if (IsValidKey(key) && !v.is_object() && !v.is_array()) out.params[key] = ParamText(v);
      }
    } else if (k == "checkpoint") {
      auto step = IntField(r, "step");
      if (!step || !time) {
        ++out.skipped;
        continue;
      }
      if (auto d = IntField(r, "duration_ms"); d && *d >= 0) {
        points.Add("checkpoint/write_s", rank, {*step, *time, static_cast<double>(*d) / 1000.0})
            .IgnoreError();  // two fixed keys cannot pass the key limit
      }
      if (auto b = IntField(r, "bytes"); b && *b >= 0) {
        points.Add("checkpoint/bytes", rank, {*step, *time, static_cast<double>(*b)}).IgnoreError();
      }
    }
  }
  return out;
}

Result<IngestBatch> ParseBatchJson(int64_t run, std::string_view body, int64_t now_ms) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("metrics: the body must be a JSON object (docs/api.md)");
  }
  IngestBatch out;
  Collector points(run, out);
  int32_t rank = 0;
  if (auto r = j.find("rank"); r != j.end()) {
    if (!r->is_number_integer() || r->get<int64_t>() < 0 || r->get<int64_t>() > 1'000'000) {
      return InvalidArgument("metrics.rank: must be an integer 0..1000000, got " + r->dump());
    }
    rank = static_cast<int32_t>(r->get<int64_t>());
  }
  if (auto s = j.find("series"); s != j.end()) {
    if (!s->is_array()) return InvalidArgument("metrics.series: must be a list");
    for (size_t i = 0; i < s->size(); ++i) {
      const json& e = (*s)[i];
      const std::string at = "metrics.series[" + std::to_string(i) + "]";
      if (!e.is_object()) return InvalidArgument(at + ": must be an object");
      auto key = e.find("key");
      if (key == e.end() || !key->is_string() || !IsValidKey(key->get_ref<const std::string&>())) {
        return InvalidArgument(at + ".key: must be 1-128 characters of A-Z a-z 0-9 _ . / -, got " +
                               (key == e.end() ? "nothing" : Quote(key->dump())));
      }
      auto steps = e.find("steps");
      auto values = e.find("values");
      if (steps == e.end() || !steps->is_array() || values == e.end() || !values->is_array() ||
          steps->size() != values->size()) {
        return InvalidArgument(at + ": needs \"steps\" and \"values\", lists of the same length");
      }
      auto times = e.find("times_ms");
      if (times != e.end() && (!times->is_array() || times->size() != steps->size())) {
        return InvalidArgument(at + ".times_ms: must be a list as long as \"steps\"");
      }
      const std::string& k = key->get_ref<const std::string&>();
      for (size_t n = 0; n < steps->size(); ++n) {
        const json& st = (*steps)[n];
        if (!st.is_number_integer() || st.get<int64_t>() < 0) {
          return InvalidArgument(at + ".steps[" + std::to_string(n) +
                                 "]: must be an integer >= 0, got " + Quote(st.dump()));
        }
        auto v = ValueOf((*values)[n]);
        if (!v) {
          return InvalidArgument(at + ".values[" + std::to_string(n) +
                                 "]: must be a number or \"NaN\", \"Infinity\", \"-Infinity\", "
                                 "got " +
                                 Quote((*values)[n].dump()));
        }
        int64_t t = now_ms;
        if (times != e.end()) {
          const json& tj = (*times)[n];
          if (!tj.is_number_integer()) {
            return InvalidArgument(at + ".times_ms[" + std::to_string(n) +
                                   "]: must be integer milliseconds since the epoch, got " +
                                   Quote(tj.dump()));
          }
          t = tj.get<int64_t>();
        }
        TY_RETURN_IF_ERROR(points.Add(k, rank, {st.get<int64_t>(), t, *v}));
      }
    }
  }
  if (auto p = j.find("params"); p != j.end()) {
    if (!p->is_object()) return InvalidArgument("metrics.params: must be an object");
    for (const auto& [key, v] : p->items()) {
      if (!IsValidKey(key)) {
        return InvalidArgument("metrics.params: key " + Quote(key) +
                               " must be 1-128 characters of A-Z a-z 0-9 _ . / -");
      }
      if (v.is_object() || v.is_array()) {
        return InvalidArgument("metrics.params." + key +
                               ": must be a string, number, boolean or null");
      }
      out.params[key] = ParamText(v);
    }
  }
  return out;
}

Result<IngestBatch> ParseBatchText(int64_t run, int32_t rank, std::string_view body,
                                   int64_t now_ms) {
  IngestBatch out;
  Collector points(run, out);
  size_t line_no = 0;
  while (!body.empty()) {
    ++line_no;
    size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    std::string_view fields[5];
    int n = 0;
    size_t pos = first;
    while (pos < line.size() && n < 5) {
      size_t end = line.find_first_of(" \t", pos);
      if (end == std::string_view::npos) end = line.size();
      fields[n++] = line.substr(pos, end - pos);
      pos = line.find_first_not_of(" \t", end);
      if (pos == std::string_view::npos) break;
    }
    auto error = [&](std::string what) {
      return InvalidArgument("metrics line " + std::to_string(line_no) + ": " + what);
    };
    if (n < 3 || n > 4) {
      return error("expected \"<key> <step> <value> [<time_ms>]\", got " + Quote(line));
    }
    if (!IsValidKey(fields[0])) {
      return error("key " + Quote(fields[0]) + " must be 1-128 characters of A-Z a-z 0-9 _ . / -");
    }
    int64_t step = 0;
    auto [sp, se] = std::from_chars(fields[1].data(), fields[1].data() + fields[1].size(), step);
    if (se != std::errc() || sp != fields[1].data() + fields[1].size() || step < 0) {
      return error("step must be an integer >= 0, got " + Quote(fields[1]));
    }
    double value = 0;
    std::string_view v = fields[2];
    if (v == "nan" || v == "NaN") {
      value = kNaN;
    } else if (v == "inf" || v == "+inf" || v == "Infinity") {
      value = kInf;
    } else if (v == "-inf" || v == "-Infinity") {
      value = -kInf;
    } else {
      auto [vp, ve] = std::from_chars(v.data(), v.data() + v.size(), value);
      if (ve != std::errc() || vp != v.data() + v.size()) {
        return error("value must be a number, nan, inf or -inf, got " + Quote(v));
      }
    }
    int64_t time = now_ms;
    if (n == 4) {
      auto [tp, te] = std::from_chars(fields[3].data(), fields[3].data() + fields[3].size(), time);
      if (te != std::errc() || tp != fields[3].data() + fields[3].size()) {
        return error("time_ms must be integer milliseconds since the epoch, got " +
                     Quote(fields[3]));
      }
    }
    TY_RETURN_IF_ERROR(points.Add(fields[0], rank, {step, time, value}));
  }
  return out;
}

}  // namespace trainyard::track
