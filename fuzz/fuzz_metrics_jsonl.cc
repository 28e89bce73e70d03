// libFuzzer target: the metrics file reader (TRAINYARD_METRICS_FILE, JSON Lines) and
// the checkpoint reports the server takes out of its lines.
//
// Checks: lines are only ever taken whole (end_offset is just after a newline, or
// where it started when there is none); every kept line is a JSON object; a kept
// line serialised and parsed again is the same object, and the batch sent as the
// agent sends it (protocol::MetricsUpload) is read back as the same lines (what the
// agent ships is what the server reads).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/tail.h"
#include "fuzz_check.h"
#include "protocol/messages.h"
#include "server/api.h"

namespace {

[[noreturn]] void Fail(const char* what, std::string_view text) {
  trainyard::fuzz::Fail("fuzz_metrics_jsonl", what, text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr int64_t kOffset = 1000;
  trainyard::agent::MetricsBatch b = trainyard::agent::ParseMetricsLines(text, kOffset);
  const int64_t consumed = b.end_offset - kOffset;
  if (consumed < 0 || consumed > static_cast<int64_t>(size)) Fail("end_offset out of range", text);
  if (consumed > 0 && text[consumed - 1] != '\n') Fail("end_offset not after a newline", text);
  if (consumed == 0 && text.find('\n') != std::string_view::npos) Fail("a line was dropped", text);
  for (const nlohmann::json& line : b.lines) {
    if (!line.is_object()) Fail("a kept line is not an object", text);
    const std::string shipped = line.dump();
    nlohmann::json back = nlohmann::json::parse(shipped, nullptr, false);
    if (back.is_discarded() || back != line) Fail("a line does not survive shipping", shipped);
    auto c = trainyard::server::ParseCheckpoint(shipped);
    if (!c.ok() && c.status().message().empty()) Fail("checkpoint rejected silently", shipped);
  }
  namespace protocol = trainyard::protocol;
  const protocol::MetricsUpload upload{"node-1", "7.0.1", b.offset, b.end_offset, b.lines};
  const std::string body = protocol::ToJson(upload).dump();
  auto read = protocol::ParseMetricsUpload(nlohmann::json::parse(body, nullptr, false));
  if (!read.ok() || !(*read == upload)) Fail("the upload is not read back as sent", body);
  return 0;
}
