#include "core/dataset.h"

#include <algorithm>
#include <set>

#include "core/names.h"

namespace trainyard {

const DatasetVersion* Dataset::Find(std::string_view want) const {
  if (want == kLatestVersion) return versions.empty() ? nullptr : &versions.back();
  for (const DatasetVersion& v : versions) {
    if (v.version == want) return &v;
  }
  return nullptr;
}

bool IsContentVersion(std::string_view text) {
  constexpr std::string_view kPrefix = "sha256:";
  if (text.size() != kPrefix.size() + 64 || !text.starts_with(kPrefix)) return false;
  return std::all_of(text.begin() + kPrefix.size(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Status ValidateDatasetSource(std::string_view source) {
  const std::string want =
      "an absolute directory path on storage every node reads (\"/shared/imagenet\") or "
      "\"s3://bucket/prefix\"";
  if (source.empty()) return InvalidArgument("dataset.source: required: " + want);
  if (source.size() > 4096 || source.find('\0') != std::string_view::npos ||
      source.find('\n') != std::string_view::npos) {
    return InvalidArgument("dataset.source: must be at most 4096 bytes without NUL or newline");
  }
  if (source.starts_with("s3://")) {
    const std::string_view rest = source.substr(5);
    const std::string_view bucket = rest.substr(0, rest.find('/'));
    const bool ok =
        bucket.size() >= 3 && bucket.size() <= 63 &&
        std::all_of(bucket.begin(), bucket.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
        });
    if (!ok) {
      return InvalidArgument("dataset.source: " + QuoteForMessage(source) +
                             " has no valid bucket (3 to 63 of a-z 0-9 . -): want " + want);
    }
    return Status::Ok();
  }
  if (source[0] != '/') {
    return InvalidArgument("dataset.source: " + QuoteForMessage(source) + " is not " + want);
  }
  for (size_t at = 0; at <= source.size();) {
    const size_t slash = std::min(source.find('/', at), source.size());
    if (source.substr(at, slash - at) == "..") {
      return InvalidArgument("dataset.source: " + QuoteForMessage(source) +
                             " has a \"..\" component; give the path without it");
    }
    at = slash + 1;
  }
  return Status::Ok();
}

Status ValidateDataset(const Dataset& d) {
  TY_RETURN_IF_ERROR(ValidateName("dataset.name", d.name));
  if (!d.tenant.empty()) TY_RETURN_IF_ERROR(ValidateName("dataset.tenant", d.tenant));
  TY_RETURN_IF_ERROR(ValidateDatasetSource(d.source));
  if (d.description.size() > 1024) {
    return InvalidArgument("dataset.description: must be at most 1024 bytes, got " +
                           std::to_string(d.description.size()));
  }
  if (d.versions.size() > kMaxDatasetVersions) {
    return InvalidArgument("dataset " + d.name + ": at most " +
                           std::to_string(kMaxDatasetVersions) + " versions, got " +
                           std::to_string(d.versions.size()));
  }
  std::set<std::string_view> seen;
  for (const DatasetVersion& v : d.versions) {
    if (!IsContentVersion(v.version)) {
      return InvalidArgument("dataset " + d.name + ": version " + QuoteForMessage(v.version) +
                             " is not sha256:<64 lowercase hex>");
    }
    if (!seen.insert(v.version).second) {
      return InvalidArgument("dataset " + d.name + ": version " + v.version + " is listed twice");
    }
    if (v.files < 0 || v.bytes < 0) {
      return InvalidArgument("dataset " + d.name + ": version " + v.version +
                             " has a negative file count or size");
    }
  }
  return Status::Ok();
}

}  // namespace trainyard
