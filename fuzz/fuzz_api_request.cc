// libFuzzer target: what the API server parses from a request before it touches any
// state — submissions (YAML, JSON or #SBATCH body with its query), job listings'
// queries, checkpoint reports, tenant quotas and queues, array ranges, job ids, API
// tokens and role names, agent registrations and heartbeats (with GPU telemetry),
// agent commands, base64 log chunks, metric batches (text and JSON bodies of
// POST /runs/{id}/metrics, metrics-file records an agent forwards), and fault
// injections (POST /nodes/{name}/faults).
//
// Input: one selector byte, then for the query-taking requests a query line
// ("k=v&k=v"), a newline and the body. Every rejection must carry a message and map
// to a 4xx status: malformed input is the client's error, never the server's. An
// accepted fault names a fault kind, a GPU from -1 (the whole node) to 1023 and a
// duration that is not negative.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "agent/protocol.h"
#include "core/auth.h"
#include "server/api.h"
#include "server/protocol.h"
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string_view rest = input.substr(1);
  const size_t nl = rest.find('\n');
  const std::string_view query = rest.substr(0, nl);
  const std::string_view body = nl == std::string_view::npos ? "" : rest.substr(nl + 1);
  namespace server = trainyard::server;
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
    case 5:
      Check(server::ParseRegistration(Json(rest)), input);
      break;
    case 6:
      Check(server::ParseHeartbeat(Json(rest)), input);
      break;
    case 7:
      Check(trainyard::agent::ParseCommand(Json(rest)), input);
      break;
    case 8:
      Check(server::DecodeBase64(rest), input);
      break;
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
