// Small file helpers the server's file-backed stores share (logs.cc, profiles.cc).
//
// Thread-safety: plain functions; callers serialise writers of one file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace trainyard::server {

// The size of `path` in bytes; 0 when it does not exist or cannot be read.
int64_t FileSize(const std::string& path);
// Appends `data` to `path`, creating the file and its directories when missing.
// Internal when the file cannot be opened, ResourceExhausted when the write fails
// (a full disk).
Status AppendFile(const std::string& path, std::string_view data);
// Writes `text` to `path` through a temporary file and a rename, so a reader (or a
// restart after a crash) sees the old content or the new, never a part; creates the
// parent directories.
Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace trainyard::server
