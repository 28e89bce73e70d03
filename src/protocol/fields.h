// Private to the protocol module: reading the fields of one JSON object strictly.
//
// A field that is absent or null is "not given" (optional fields keep their default,
// required ones are an error); a field that is given must have the right type and
// range. Unknown fields are never looked at. Every error names the field by its path
// ("heartbeat.gpus[2].temp_c") and shows the value it got.
//
// Thread-safety: a Fields refers to a JSON value it does not own; plain reads.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace trainyard::protocol::internal {

// The value for an error message: its JSON type and text, cut at 60 characters.
std::string Show(const nlohmann::json& value);

class Fields {
 public:
  // InvalidArgument naming `path` unless `j` is an object.
  static Result<Fields> Open(const nlohmann::json& j, std::string path);

  const std::string& path() const { return path_; }
  std::string Path(std::string_view key) const;
  // The field's value; null when it is absent or null.
  const nlohmann::json* Get(std::string_view key) const;

  Status Missing(std::string_view key) const;
  // "<path>.<key>: expected <want>, got <value>".
  Status Wrong(std::string_view key, const nlohmann::json& value, std::string_view want) const;

  Status Str(std::string_view key, std::string& out, bool required = false) const;
  // An integer in [lo, hi].
  Status Int(std::string_view key, int64_t& out, int64_t lo, int64_t hi,
             bool required = false) const;
  // An integer that fits in `out`'s type.
  template <typename I>
  Status Integer(std::string_view key, I& out, bool required = false) const {
    int64_t v = out;
    TY_RETURN_IF_ERROR(
        Int(key, v, std::numeric_limits<I>::min(), std::numeric_limits<I>::max(), required));
    out = static_cast<I>(v);
    return Status::Ok();
  }
  // Whole milliseconds, >= 0.
  Status Millis(std::string_view key, Duration& out, bool required = false) const;
  Status Number(std::string_view key, double& out, bool required = false) const;
  Status Number(std::string_view key, std::optional<double>& out) const;
  Status Bool(std::string_view key, bool& out, bool required = false) const;
  Status Bool(std::string_view key, std::optional<bool>& out) const;
  // A list of at most `max` strings.
  Status StrList(std::string_view key, std::vector<std::string>& out, size_t max,
                 bool required = false) const;
  // An object of string values.
  Status StrMap(std::string_view key, std::map<std::string, std::string>& out) const;
  // A list of at most `max` objects, each read by `one(const Fields&, T&) -> Status`.
  template <typename T, typename F>
  Status ObjectList(std::string_view key, size_t max, std::vector<T>& out, F one) const {
    const nlohmann::json* list = Get(key);
    if (list == nullptr) return Status::Ok();
    if (!list->is_array() || list->size() > max) {
      return Wrong(key, *list, "a list of at most " + std::to_string(max) + " objects");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      TY_ASSIGN_OR_RETURN(Fields item, Open((*list)[i], Path(key) + "[" + std::to_string(i) + "]"));
      T value;
      TY_RETURN_IF_ERROR(one(item, value));
      out.push_back(std::move(value));
    }
    return Status::Ok();
  }

 private:
  Fields(const nlohmann::json& j, std::string path) : j_(&j), path_(std::move(path)) {}
  const nlohmann::json* j_;
  std::string path_;
};

}  // namespace trainyard::protocol::internal
