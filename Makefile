# A thin wrapper over CMake. `make test` and `make up` work on a fresh Debian 12
# machine: each first installs what is missing (scripts/setup).
#
#   make test    setup, the check build (clang, ASan + UBSan, fuzzers), run every suite
#   make up      setup, release build, start what Trainyard can run locally
#   make bench   setup, release build, run the benchmarks in bench/
#   make fuzz    setup, the check build, run each fuzzer FUZZ_SECONDS (default 300)
#   make web     npm ci in web/ (uPlot for the dashboard, playwright-core for its tests)
#   make format  clang-format every C++ file

JOBS     ?= $(shell nproc)
WERROR   ?= OFF
BUILD    ?= build
CHECK    ?= build-check
RELEASE  ?= build-release
FUZZ_SECONDS ?= 300
CMAKE_FLAGS ?=
# Debug info of the debug and check builds. CI (.ci/run) builds with -g1: line tables
# only, enough for stack traces and sanitizer reports, and ~13% less compile CPU than
# full -g (20 sampled files); a local `make build` keeps -g for the debugger.
DEBUG_INFO ?= -g
# Many suites are end-to-end tests that wait on the wall clock (servers, agents,
# timeouts), so twice as many run at once as there are cores.
CTEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))

.PHONY: all setup web build build-check build-release test test-fuzz up bench fuzz soak format clean

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

$(RELEASE)/CMakeCache.txt:
	cmake -S . -B $(RELEASE) -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_WERROR=$(WERROR) -DTRAINYARD_BENCH=ON $(CMAKE_FLAGS)

# The check build, the one `make test` and CI run: clang, ASan + UBSan, the libraries
# at -O1 with coverage instrumentation for the fuzzers, the test sources at -O0 (see
# the top CMakeLists), every suite and the fuzz targets. One build instead of a debug,
# an ASan and a fuzz build: a third of the compile time (issue 28).
$(CHECK)/CMakeCache.txt:
	cmake -S . -B $(CHECK) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 $(DEBUG_INFO)" \
	  -DCMAKE_CXX_COMPILER=clang++ -DTRAINYARD_FUZZ=ON -DTRAINYARD_TEST_CXX_FLAGS=-O0 \
	  -DTRAINYARD_WERROR=$(WERROR) -DTRAINYARD_BENCH=OFF $(CMAKE_FLAGS)

build: setup web $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

build-check: setup web $(CHECK)/CMakeCache.txt
	cmake --build $(CHECK) -j $(JOBS)

build-release: setup web $(RELEASE)/CMakeCache.txt
	cmake --build $(RELEASE) -j $(JOBS)

# Every suite, under ASan + UBSan, including a short, fixed-seed run of each fuzzer.
test: build-check
	cd $(CHECK) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j $(CTEST_JOBS) --output-on-failure --no-tests=error

# The fuzz label alone: a fixed number of executions from a fixed seed per fuzzer.
test-fuzz: build-check
	cd $(CHECK) && ctest -j $(JOBS) -L fuzz --output-on-failure --no-tests=error

# Each fuzzer for FUZZ_SECONDS from a random seed; findings are kept in
# $(CHECK)/fuzz/work/<fuzzer>/findings and fail the run.
fuzz: build-check
	@for f in fuzz_job_spec fuzz_sbatch fuzz_api_request fuzz_metrics_jsonl fuzz_run_filter fuzz_alert_rules; do \
	  echo "== $$f ($(FUZZ_SECONDS) s)"; \
	  fuzz/run.sh $(CHECK)/fuzz/$$f fuzz/corpus/$$f $(CHECK)/fuzz/work/$$f \
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
	rm -rf $(BUILD) $(CHECK) $(RELEASE)
