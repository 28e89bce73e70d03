// Container image references: what a job spec's `image:` and `trainyard image` take.
//
// A reference names an image in a node's image store (agent/image_store.h) in one of
// the forms Docker and Podman print:
//   name                      -> tag "latest"
//   name:tag
//   name@sha256:<64 hex>      -> exactly that image, whatever its tags
//   name:tag@sha256:<64 hex>  -> the digest decides; the tag is informational
//   sha256:<64 hex>           -> by digest alone (name empty)
// A name is lowercase path components joined by '/', each [a-z0-9]+ with single '.',
// '_' or runs of '-' (and "__") between alphanumerics, as Docker's grammar has it; the
// first component may be a registry host with a port ("localhost:5000/team/x"): it is a
// host when it contains '.' or ':' or is "localhost" and more components follow. A
// tag is [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; a digest is "sha256:" and 64 lowercase hex
// digits. No registry is ever contacted: a host part is only part of the name.
//
// Pure parsing, no I/O. Thread-safety: plain values.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace trainyard {

struct ImageRef {
  std::string name;    // "" for a bare digest
  std::string tag;     // "" when only a digest was given
  std::string digest;  // "sha256:<64 hex>" or ""

  // Canonical text: "name:tag", or "name@sha256:..." (the tag dropped) when a digest
  // is known, or "sha256:..." for a bare digest.
  std::string ToString() const;
  bool operator==(const ImageRef&) const = default;
};

// Parses `text` as above. InvalidArgument naming the value, what is wrong with it and
// what a valid reference looks like.
Result<ImageRef> ParseImageRef(std::string_view text);

// "name@sha256:..." for `ref`'s name pinned to `digest` ("sha256:<hex>"): what a job
// runs once the reference has been resolved, so that a re-tag meanwhile cannot change
// it. The bare digest when `ref` has no name.
std::string PinnedImageRef(const ImageRef& ref, std::string_view digest);

// Whether `digest` is "sha256:" followed by 64 lowercase hex digits.
bool IsImageDigest(std::string_view digest);

}  // namespace trainyard
