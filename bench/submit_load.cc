// A load generator for the submission benchmark (bench/server_bench.py --only submit):
// CONNECTIONS threads, each with one keep-alive connection (http/client.h), each
// submitting JOBS / CONNECTIONS jobs one after another, all starting together.
//
// Why not only Python: on a 2-core machine the Python clients took a third of the
// CPU, so the figure said as much about them as about the server. This client spends a
// few microseconds a request.
//
//   submit_load URL TOKEN CONNECTIONS JOBS BODY
//
// Prints one JSON object: jobs, seconds, jobs_per_s (acknowledged with 201), p50_ms,
// p99_ms, non_201, errors (no answer).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "http/client.h"

namespace {

using SteadyClock = std::chrono::steady_clock;

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100 * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s URL TOKEN CONNECTIONS JOBS BODY\n", argv[0]);
    return 2;
  }
  const std::string url = argv[1], token = argv[2], body = argv[5];
  const int connections = std::atoi(argv[3]);
  const int jobs = std::atoi(argv[4]);
  if (connections < 1 || jobs < connections) {
    std::fprintf(stderr, "submit_load: CONNECTIONS must be >= 1 and JOBS >= CONNECTIONS\n");
    return 2;
  }
  const int per = jobs / connections;
  std::vector<std::vector<double>> latencies(static_cast<size_t>(connections));
  std::atomic<int> non_201{0}, errors{0}, ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      trainyard::http::ClientOptions options;
      options.headers.push_back({"Authorization", "Bearer " + token});
      trainyard::http::Client client(url, options);
      // Connected before the clock starts, as the Python clients are.
      auto warm = client.Send("GET", "/api/v1/healthz");
      if (std::holds_alternative<trainyard::http::Error>(warm)) ++errors;
      std::vector<double>& lat = latencies[static_cast<size_t>(c)];
      lat.reserve(static_cast<size_t>(per));
      ++ready;
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < per; ++i) {
        const auto a = SteadyClock::now();
        auto r = client.Send("POST", "/api/v1/jobs", body, "application/json");
        lat.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - a).count());
        if (auto* res = std::get_if<trainyard::http::Response>(&r)) {
          if (res->status != 201) ++non_201;
        } else {
          ++errors;
        }
      }
    });
  }
  while (ready.load() < connections) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = SteadyClock::now();
  go = true;
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  const int total = per * connections;
  const int acked = total - non_201.load() - errors.load();
  std::printf(
      "{\"jobs\": %d, \"seconds\": %.3f, \"jobs_per_s\": %.1f, \"p50_ms\": %.2f, \"p99_ms\": %.2f, "
      "\"non_201\": %d, \"errors\": %d}\n",
      total, seconds, acked / seconds, Percentile(all, 50), Percentile(all, 99), non_201.load(),
      errors.load());
  return 0;
}
