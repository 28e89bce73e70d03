#include "protocol/fields.h"

namespace trainyard::protocol::internal {

using nlohmann::json;

std::string Show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 60) + "...";
  return std::string(v.type_name()) + " " + s;
}

Result<Fields> Fields::Open(const json& j, std::string path) {
  if (!j.is_object()) return InvalidArgument(path + ": expected an object, got " + Show(j));
  return Fields(j, std::move(path));
}

std::string Fields::Path(std::string_view key) const { return path_ + "." + std::string(key); }

const json* Fields::Get(std::string_view key) const {
  auto it = j_->find(key);
  return it == j_->end() || it->is_null() ? nullptr : &*it;
}

Status Fields::Missing(std::string_view key) const {
  return InvalidArgument(Path(key) + ": missing");
}

Status Fields::Wrong(std::string_view key, const json& value, std::string_view want) const {
  return InvalidArgument(Path(key) + ": expected " + std::string(want) + ", got " + Show(value));
}

Status Fields::Str(std::string_view key, std::string& out, bool required) const {
  const json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::Ok();
  if (!v->is_string()) return Wrong(key, *v, "a string");
  out = v->get<std::string>();
  return Status::Ok();
}

Status Fields::Int(std::string_view key, int64_t& out, int64_t lo, int64_t hi,
                   bool required) const {
  const json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::Ok();
  auto want = [&] {
    if (lo == std::numeric_limits<int64_t>::min() && hi == std::numeric_limits<int64_t>::max()) {
      return std::string("an integer");
    }
    if (hi == std::numeric_limits<int64_t>::max()) return "an integer >= " + std::to_string(lo);
    return "an integer " + std::to_string(lo) + ".." + std::to_string(hi);
  };
  // An unsigned value above INT64_MAX would read back negative.
  if (!v->is_number_integer() ||
      (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX})) {
    return Wrong(key, *v, want());
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) return Wrong(key, *v, want());
  out = x;
  return Status::Ok();
}

Status Fields::Millis(std::string_view key, Duration& out, bool required) const {
  int64_t ms = out.count();
  TY_RETURN_IF_ERROR(Int(key, ms, 0, std::numeric_limits<int64_t>::max(), required));
  out = Duration(ms);
  return Status::Ok();
}

Status Fields::Number(std::string_view key, double& out, bool required) const {
  const json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::Ok();
  if (!v->is_number()) return Wrong(key, *v, "a number");
  out = v->get<double>();
  return Status::Ok();
}

Status Fields::Number(std::string_view key, std::optional<double>& out) const {
  const json* v = Get(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return Wrong(key, *v, "a number");
  out = v->get<double>();
  return Status::Ok();
}

Status Fields::Bool(std::string_view key, bool& out, bool required) const {
  const json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::Ok();
  if (!v->is_boolean()) return Wrong(key, *v, "true or false");
  out = v->get<bool>();
  return Status::Ok();
}

Status Fields::Bool(std::string_view key, std::optional<bool>& out) const {
  const json* v = Get(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return Wrong(key, *v, "true or false");
  out = v->get<bool>();
  return Status::Ok();
}

Status Fields::StrList(std::string_view key, std::vector<std::string>& out, size_t max,
                       bool required) const {
  const json* v = Get(key);
  if (v == nullptr) return required ? Missing(key) : Status::Ok();
  const std::string want = "a list of at most " + std::to_string(max) + " strings";
  if (!v->is_array() || v->size() > max) return Wrong(key, *v, want);
  for (size_t i = 0; i < v->size(); ++i) {
    const json& s = (*v)[i];
    if (!s.is_string()) {
      return InvalidArgument(Path(key) + "[" + std::to_string(i) + "]: expected a string, got " +
                             Show(s));
    }
    out.push_back(s.get<std::string>());
  }
  return Status::Ok();
}

Status Fields::StrMap(std::string_view key, std::map<std::string, std::string>& out) const {
  const json* v = Get(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_object()) return Wrong(key, *v, "an object of strings");
  for (const auto& [k, value] : v->items()) {
    if (!value.is_string()) {
      return InvalidArgument(Path(key) + "." + k + ": expected a string, got " + Show(value));
    }
    out[k] = value.get<std::string>();
  }
  return Status::Ok();
}

}  // namespace trainyard::protocol::internal
