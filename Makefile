# A thin wrapper over CMake. `make test` and `make up` work on a fresh Debian 12
# machine: each first installs what is missing (scripts/setup).
#
#   make test    setup, build (debug + ASan/UBSan), run every test suite
#   make up      setup, release build, start what Trainyard can run locally
#   make bench   setup, release build, run the benchmarks in bench/
#   make fuzz    setup, clang build of fuzz/, run each fuzzer FUZZ_SECONDS (default 300)
#   make web     npm ci in web/ (uPlot for the dashboard, playwright-core for its tests)
#   make format  clang-format every C++ file

JOBS     ?= $(shell nproc)
WERROR   ?= OFF
BUILD    ?= build
ASAN     ?= build-asan
RELEASE  ?= build-release
FUZZ     ?= build-fuzz
FUZZ_SECONDS ?= 300
CMAKE_FLAGS ?=
# Debug info of the debug, ASan and fuzz builds. CI (.ci/run) builds with -g1: line
# tables only, enough for stack traces and sanitizer reports, and ~13% less compile
# CPU than full -g (20 sampled files); a local `make build` keeps -g for the debugger.
DEBUG_INFO ?= -g
# The debug build's suites are mostly end-to-end tests that wait on the wall clock
# (servers, agents, timeouts), so twice as many run at once as there are cores; the
# ASan run is CPU-bound and runs one per core.
CTEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))

.PHONY: all setup web build build-asan build-release build-fuzz test test-all test-asan test-fuzz up bench fuzz soak format clean

all: build

setup:
	@scripts/setup

# The dashboard's npm packages, installed exactly as web/package-lock.json pins them;
# again only when the lock file changes. The server embeds uPlot at build time.
web/node_modules/.package-lock.json: web/package-lock.json web/package.json
	cd web && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

web: setup web/node_modules/.package-lock.json

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="$(DEBUG_INFO)" -DTRAINYARD_WERROR=$(WERROR) -DTRAINYARD_BENCH=OFF $(CMAKE_FLAGS)

$(ASAN)/CMakeCache.txt:
	cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="$(DEBUG_INFO)" -DTRAINYARD_SANITIZE=ON -DTRAINYARD_WERROR=$(WERROR) -DTRAINYARD_BENCH=OFF $(CMAKE_FLAGS)

$(RELEASE)/CMakeCache.txt:
	cmake -S . -B $(RELEASE) -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_WERROR=$(WERROR) -DTRAINYARD_BENCH=ON $(CMAKE_FLAGS)

# The fuzzers: clang, coverage instrumentation, ASan + UBSan, -O1 (fuzz/CMakeLists.txt).
$(FUZZ)/CMakeCache.txt:
	cmake -S . -B $(FUZZ) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 $(DEBUG_INFO)" \
	  -DCMAKE_CXX_COMPILER=clang++ -DTRAINYARD_FUZZ=ON -DTRAINYARD_BENCH=OFF $(CMAKE_FLAGS)

build: setup web $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

build-asan: setup web $(ASAN)/CMakeCache.txt
	cmake --build $(ASAN) -j $(JOBS)

build-release: setup web $(RELEASE)/CMakeCache.txt
	cmake --build $(RELEASE) -j $(JOBS)

build-fuzz: setup web $(FUZZ)/CMakeCache.txt
	cmake --build $(FUZZ) --target fuzzers -j $(JOBS)

# Every suite in the debug build, the unit suites again under ASan + UBSan, and a
# short, fixed-seed run of each fuzzer.
test: test-all test-asan test-fuzz

test-all: build
	cd $(BUILD) && ctest -j $(CTEST_JOBS) --output-on-failure --no-tests=error

test-asan: build-asan
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j $(JOBS) -L unit --output-on-failure --no-tests=error

# A fixed number of executions from a fixed seed per fuzzer (deterministic).
test-fuzz: build-fuzz
	cd $(FUZZ) && ctest -j $(JOBS) -L fuzz --output-on-failure --no-tests=error

# Each fuzzer for FUZZ_SECONDS from a random seed; findings are kept in
# $(FUZZ)/fuzz/work/<fuzzer>/findings and fail the run.
fuzz: build-fuzz
	@for f in fuzz_job_spec fuzz_sbatch fuzz_api_request fuzz_metrics_jsonl fuzz_run_filter fuzz_alert_rules; do \
	  echo "== $$f ($(FUZZ_SECONDS) s)"; \
	  fuzz/run.sh $(FUZZ)/fuzz/$$f fuzz/corpus/$$f $(FUZZ)/fuzz/work/$$f \
	    -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

up: build-release
	@scripts/up $(RELEASE)

bench: build-release
	@scripts/bench $(RELEASE)

# A healthy local cluster running the example jobs for SOAK_SECONDS with the built-in
# alert rules: not one alert may fire (tests/server/healthy_soak.sh).
SOAK_SECONDS ?= 600
soak: build
	@tests/server/healthy_soak.sh $(BUILD)/trainyard $(SOAK_SECONDS)

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN) $(RELEASE) $(FUZZ)
