// Job spec parsing: the cost every submission pays before it is acknowledged.
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>

#include "core/job_text.h"

namespace trainyard {
namespace {

std::string Example(const char* rel) {
  std::ifstream f(std::string(TRAINYARD_SOURCE_DIR) + "/examples/" + rel);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void BM_ParseYamlSpec(benchmark::State& state) {
  const std::string text = Example("train-2replica.yaml");
  for (auto _ : state) {
    auto r = ParseJobText(text, "train-2replica.yaml");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseYamlSpec);

void BM_ParseJsonSpec(benchmark::State& state) {
  const std::string text =
      SpecToJson(*ParseJobText(Example("train-2replica.yaml"), "x").spec).dump();
  for (auto _ : state) {
    auto r = ParseJobText(text, "x.json");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseJsonSpec);

void BM_ParseSbatch(benchmark::State& state) {
  const std::string text = Example("train-2node.sbatch");
  for (auto _ : state) {
    auto r = ParseJobText(text, "train-2node.sbatch");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseSbatch);

}  // namespace
}  // namespace trainyard

BENCHMARK_MAIN();
