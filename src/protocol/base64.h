// Standard base64 (RFC 4648, section 4: the "+/" alphabet, with "=" padding), the
// encoding of the raw bytes the agent ships in `data_b64` (logs, profile traces).
// Written here rather than taken from OpenSSL so that the client commands, which link
// the protocol, load no TLS library at start. The decoder accepts only the canonical
// text: no whitespace, no line breaks, padding only at the end.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace trainyard::protocol {

std::string EncodeBase64(std::string_view bytes);

// The bytes `text` encodes. InvalidArgument naming `field` when the length is not a
// multiple of 4, or for a character outside the alphabet (at its byte offset), "="
// anywhere but the last two places, or a character after a "=". Empty text is no bytes.
Result<std::string> DecodeBase64(std::string_view text, std::string_view field);

}  // namespace trainyard::protocol
