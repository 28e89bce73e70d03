// libFuzzer target: what the API server parses from a request before it touches any
// state — submissions (YAML, JSON or #SBATCH body with its query), job listings'
// queries, checkpoint reports, tenant quotas and queues, array ranges, job ids, API
// tokens and role names, the agent protocol's messages (protocol/messages.h: agent
// registrations and heartbeats with GPU telemetry, commands, polls, uploads and the
// server's replies), base64 log chunks, metric batches (text and JSON bodies of
// POST /runs/{id}/metrics, metrics-file records an agent forwards), and fault
// injections (POST /nodes/{name}/faults).
//
// Input: one selector byte, then for the query-taking requests a query line
// ("k=v&k=v"), a newline and the body. Every rejection must carry a message and map
// to a 4xx status: malformed input is the client's error, never the server's. An
// accepted protocol message encodes to JSON that parses back to an equal message (the
// other side reads what this side wrote); accepted base64 re-encodes to text of the
// same length that decodes to the same bytes. An accepted fault names a fault kind, a
// GPU from -1 (the whole node) to 1023 and a duration that is not negative.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/auth.h"
#include "protocol/base64.h"
#include "protocol/messages.h"
#include "server/api.h"
#include "track/ingest.h"

namespace {

using trainyard::Status;
using trainyard::server::Params;

[[noreturn]] void Fail(const char* what, const Status& s, std::string_view input) {
  std::fprintf(stderr, "fuzz_api_request: %s: %s\n--- input ---\n%.*s\n", what,
               s.ToString().c_str(), static_cast<int>(input.size()), input.data());
  std::abort();
}

template <typename R>
void Check(const R& r, std::string_view input) {
  if (r.ok()) return;
  const Status& s = r.status();
  if (s.message().empty()) Fail("rejected without a message", s, input);
  const int http = trainyard::server::HttpStatusFor(s);
  if (http < 400 || http >= 500) Fail("rejected with a non-4xx status", s, input);
}

// "a=1&b=&c" -> {a: 1, b: "", c: ""}; no percent-decoding (the HTTP layer does it).
Params ParseQuery(std::string_view q) {
  Params p;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    size_t eq = kv.find('=');
    p.emplace(std::string(kv.substr(0, eq)),
              eq == std::string_view::npos ? std::string() : std::string(kv.substr(eq + 1)));
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return p;
}

nlohmann::json Json(std::string_view text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// A protocol message: rejected with a 4xx message, or accepted and written back as JSON
// that parses to an equal message.
template <typename Parse>
void CheckMessage(Parse parse, const nlohmann::json& j, std::string_view input) {
  auto r = parse(j);
  Check(r, input);
  if (!r.ok()) return;
  auto back = parse(nlohmann::json(trainyard::protocol::ToJson(*r)));
  if (!back.ok()) Fail("an accepted message does not parse once encoded", back.status(), input);
  if (!(*back == *r)) {
    Fail("an accepted message parses to another once encoded", Status::Ok(), input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string_view rest = input.substr(1);
  const size_t nl = rest.find('\n');
  const std::string_view query = rest.substr(0, nl);
  const std::string_view body = nl == std::string_view::npos ? "" : rest.substr(nl + 1);
  namespace server = trainyard::server;
  namespace protocol = trainyard::protocol;
  switch (data[0] % 11) {
    case 0:
      Check(server::ParseSubmit(body, ParseQuery(query)), input);
      break;
    case 1:
      Check(server::ParseListJobs(ParseQuery(query)), input);
      break;
    case 2:
      Check(server::ParseCheckpoint(rest), input);
      Check(server::ParseTenantQuota(rest), input);
      Check(server::ParseQueue(rest, "vision", "research"), input);
      break;
    case 3:
      Check(server::ParseArrayRange(rest), input);
      break;
    case 4:
      Check(server::ParseJobId(rest), input);
      Check(trainyard::ParseTokenText(rest), input);
      Check(trainyard::ParseRole(rest), input);
      break;
    case 5: {
      const nlohmann::json j = Json(rest);
      CheckMessage(protocol::ParseRegistration, j, input);
      CheckMessage(protocol::ParseRegisterReply, j, input);
      break;
    }
    case 6: {
      const nlohmann::json j = Json(rest);
      CheckMessage(protocol::ParseHeartbeat, j, input);
      CheckMessage(protocol::ParseHeartbeatReply, j, input);
      CheckMessage(protocol::ParsePollRequest, j, input);
      break;
    }
    case 7: {
      const nlohmann::json j = Json(rest);
      CheckMessage(protocol::ParseCommand, j, input);
      CheckMessage([](const nlohmann::json& x) { return protocol::ParsePollReply(x); }, j, input);
      CheckMessage(protocol::ParseLogUpload, j, input);
      CheckMessage(protocol::ParseMetricsUpload, j, input);
      CheckMessage(protocol::ParseProfileUpload, j, input);
      CheckMessage(protocol::ParseUploadReply, j, input);
      CheckMessage(protocol::ParseProfileUploadReply, j, input);
      break;
    }
    case 8: {
      auto bytes = protocol::DecodeBase64(rest, "data_b64");
      Check(bytes, input);
      if (!bytes.ok()) break;
      // Not always the same text: bits below the last byte are ignored, as RFC 4648 allows.
      const std::string text = protocol::EncodeBase64(*bytes);
      auto again = protocol::DecodeBase64(text, "data_b64");
      if (text.size() != rest.size() || !again.ok() || *again != *bytes) {
        Fail("accepted base64 does not re-encode to the same bytes", Status::Ok(), input);
      }
      break;
    }
    case 9: {
      namespace track = trainyard::track;
      // What a batch holds must be what was counted, under valid keys.
      auto consistent = [&](const track::IngestBatch& b) {
        int64_t n = 0;
        for (const auto& a : b.appends) {
          if (!track::IsValidKey(a.key)) Fail("stored an invalid key", Status::Ok(), input);
          n += static_cast<int64_t>(a.points.size());
        }
        if (n != b.points) Fail("points miscounted", Status::Ok(), input);
      };
      auto text = track::ParseBatchText(1, 0, rest, 0);
      Check(text, input);
      if (text.ok()) consistent(*text);
      auto json = track::ParseBatchJson(1, rest, 0);
      Check(json, input);
      if (json.ok()) consistent(*json);
      consistent(track::DecodeRecords(1, 0, Json(rest)));
      break;
    }
    case 10: {
      auto fault = server::ParseFaultRequest(rest);
      Check(fault, input);
      if (fault.ok() && (!server::IsFaultKind(fault->kind) || fault->gpu < -1 ||
                         fault->gpu > 1023 || fault->duration.count() < 0)) {
        Fail("accepted an impossible fault", Status::Ok(), input);
      }
      break;
    }
  }
  return 0;
}
