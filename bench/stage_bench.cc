// The data layer's speed targets (docs/datasets.md, "Speed"): staging a dataset version
// to local disk against `cp -r` of the same directory, in the same run, and manifest
// hashing per core on cached files.
//
//   stage_bench [--dir DIR] [--files 10000] [--mib 2048] [--runs 3] [--threads 4]
//
// Makes FILES files totalling MIB MiB under DIR/src (kept between invocations when their
// count and size match), reads them once so that both sides read from the page cache,
// then alternates `cp -r DIR/src DIR/cp` and data::StageVersion(DIR/src -> DIR/staged)
// RUNS times, removing each copy after it was timed (neither side includes an fsync).
// Prints each run and the medians: MB/s of each, and staging's share of cp's.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/stage.h"

namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;
using trainyard::data::BuildManifest;
using trainyard::data::Manifest;

double Seconds(SteadyClock::time_point since) {
  return std::chrono::duration<double>(SteadyClock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// FILES files of about the same size, 100 to a directory, with varied bytes.
void MakeDataset(const std::string& src, int files, int64_t bytes) {
  const int64_t each = bytes / files;
  std::vector<char> buf(static_cast<size_t>(each));
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < files; ++i) {
    const std::string dir = src + "/d" + std::to_string(i / 100);
    fs::create_directories(dir);
    for (char& c : buf) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      c = static_cast<char>(x);
    }
    std::ofstream(dir + "/f" + std::to_string(i), std::ios::binary)
        .write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/trainyard-stage-bench";
  int files = 10'000, runs = 3, threads = 4;
  int64_t mib = 2048;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag.starts_with("--benchmark_")) {  // what scripts/bench gives every *_bench
      --i;
      continue;
    }
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--dir")
      dir = value;
    else if (flag == "--files")
      files = std::atoi(value.c_str());
    else if (flag == "--mib")
      mib = std::atoll(value.c_str());
    else if (flag == "--runs")
      runs = std::atoi(value.c_str());
    else if (flag == "--threads")
      threads = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "stage_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (files < 1 || mib < 1 || runs < 1 || threads < 1) {
    std::fprintf(stderr, "stage_bench: --files, --mib, --runs and --threads must be >= 1\n");
    return 2;
  }
  const std::string src = dir + "/src";
  auto m = BuildManifest(src, {threads, nullptr});
  if (!m.ok() || static_cast<int>(m->entries.size()) != files ||
      m->total_bytes != (mib << 20) / files * files) {
    fs::remove_all(src);
    std::printf("making %d files, %lld MiB in %s\n", files, static_cast<long long>(mib),
                src.c_str());
    MakeDataset(src, files, mib << 20);
  }
  // Hashing per core, on cached files (the first pass warmed the cache).
  auto t = SteadyClock::now();
  m = BuildManifest(src, {1, nullptr});
  if (!m.ok()) {
    std::fprintf(stderr, "stage_bench: %s\n", m.status().message().c_str());
    return 1;
  }
  const double hash1 = Seconds(t);
  t = SteadyClock::now();
  m = BuildManifest(src, {threads, nullptr});
  const double hashn = Seconds(t);
  const double mb = static_cast<double>(m->total_bytes) / 1e6;
  std::printf("manifest: %zu files, %.0f MB; 1 thread %.0f MB/s, %d threads %.0f MB/s\n",
              m->entries.size(), mb, mb / hash1, threads, mb / hashn);

  const std::string cp_dest = dir + "/cp", staged = dir + "/staged";
  std::vector<double> cp_rate, stage_rate;
  for (int r = 0; r < runs; ++r) {
    fs::remove_all(cp_dest);
    trainyard::data::RemoveStaged(staged);
    sync();
    t = SteadyClock::now();
    const std::string cmd = "cp -r '" + src + "' '" + cp_dest + "'";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "stage_bench: %s failed\n", cmd.c_str());
      return 1;
    }
    const double cp_s = Seconds(t);
    fs::remove_all(cp_dest);
    sync();
    trainyard::data::SharedPathFetcher fetcher(src);
    trainyard::data::StageOptions so;
    so.threads = threads;
    t = SteadyClock::now();
    auto s = trainyard::data::StageVersion(*m, fetcher, staged, so);
    const double stage_s = Seconds(t);
    if (!s.ok()) {
      std::fprintf(stderr, "stage_bench: %s\n", s.message().c_str());
      return 1;
    }
    trainyard::data::RemoveStaged(staged);
    cp_rate.push_back(mb / cp_s);
    stage_rate.push_back(mb / stage_s);
    std::printf("run %d: cp -r %.2f s (%.0f MB/s), staging %.2f s (%.0f MB/s), %.0f%%\n", r + 1,
                cp_s, mb / cp_s, stage_s, mb / stage_s, 100 * cp_s / stage_s);
  }
  std::printf(
      "median: cp -r %.0f MB/s, staging (%d threads, with SHA-256 checks) %.0f MB/s: "
      "%.0f%% of cp -r\n",
      Median(cp_rate), threads, Median(stage_rate), 100 * Median(stage_rate) / Median(cp_rate));
  return 0;
}
