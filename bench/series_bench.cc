// Metric series store: ingestion rate, downsampled read time and bytes on disk.
//
//   build-release/bench/series_bench
//
// Targets (issue 7): >= 1,000,000 points/s ingested, a 10,000,000-point series read
// back as 1,000 buckets in <= 50 ms, <= 16 bytes a point on disk. This measures the
// store alone; the HTTP batch endpoint is measured by bench/ingest_bench.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "track/series_store.h"

namespace trainyard::track {
namespace {

std::filesystem::path TempDb(const std::string& name) {
  auto dir =
      std::filesystem::temp_directory_path() / ("ty-series-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::filesystem::remove(path);
  std::filesystem::remove(path.string() + "-wal");
  return path;
}

std::vector<Point> Batch(int64_t first_step, int n) {
  std::vector<Point> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    int64_t s = first_step + i;
    out.push_back({s, 1'764'410'000'000 + s * 100, 2.0 + std::sin(static_cast<double>(s) * 1e-3)});
  }
  return out;
}

// Batches of 10,000 points over 8 keys (a request's worth from one job).
void BM_Ingest(benchmark::State& state) {
  auto opened = SeriesStore::Open(TempDb("ingest.db").string());
  auto store = std::move(*opened);
  const int per_key = static_cast<int>(state.range(0)) / 8;
  int64_t step = 0;
  int64_t points = 0;
  for (auto _ : state) {
    std::vector<SeriesAppend> batch;
    for (int k = 0; k < 8; ++k)
      batch.push_back({1, 0, "key" + std::to_string(k), Batch(step, per_key)});
    step += per_key;
    if (!store->Append(batch).ok()) state.SkipWithError("append failed");
    points += per_key * 8;
  }
  state.counters["points/s"] =
      benchmark::Counter(static_cast<double>(points), benchmark::Counter::kIsRate);
  auto stats = store->Stats();
  store.reset();  // checkpoints the WAL into the file
  auto bytes =
      std::filesystem::file_size(TempDb("ingest.db.size-probe").parent_path() / "ingest.db");
  state.counters["bytes/point"] = static_cast<double>(bytes) / static_cast<double>(stats->points);
}
BENCHMARK(BM_Ingest)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

// A 10,000,000-point series read back as 1,000 buckets (and as 100, and a zoomed-in
// tenth of it).
void BM_ReadDownsampled(benchmark::State& state) {
  static std::unique_ptr<SeriesStore> store = [] {
    auto opened = SeriesStore::Open(TempDb("read.db").string());
    auto s = std::move(*opened);
    for (int64_t step = 0; step < 10'000'000; step += 100'000) {
      if (!s->Append({{1, 0, "loss", Batch(step, 100'000)}}).ok()) std::abort();
    }
    return s;
  }();
  SeriesRange range{.buckets = static_cast<int32_t>(state.range(0))};
  if (state.range(1) != 0) {
    range.from_step = 4'000'000;
    range.to_step = 4'999'999;
  }
  for (auto _ : state) {
    auto r = store->Read(1, "loss", 0, range);
    if (!r.ok()) state.SkipWithError("read failed");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_ReadDownsampled)
    ->Args({1000, 0})
    ->Args({100, 0})
    ->Args({1000, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace trainyard::track

BENCHMARK_MAIN();
