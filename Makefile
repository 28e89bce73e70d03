# A thin wrapper over CMake. `make test` and `make up` work on a fresh Debian 12
# machine: each first installs what is missing (scripts/setup).
#
#   make test    setup, build (debug + ASan/UBSan), run every test suite
#   make up      setup, release build, start what Trainyard can run locally
#   make bench   setup, release build, run the benchmarks in bench/
#   make format  clang-format every C++ file

JOBS     ?= $(shell nproc)
WERROR   ?= OFF
BUILD    ?= build
ASAN     ?= build-asan
RELEASE  ?= build-release
CMAKE_FLAGS ?=

.PHONY: all setup build build-asan build-release test test-all test-asan up bench format clean

all: build

setup:
	@scripts/setup

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Debug -DTRAINYARD_WERROR=$(WERROR) -DTRAINYARD_BENCH=OFF $(CMAKE_FLAGS)

$(ASAN)/CMakeCache.txt:
	cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DTRAINYARD_SANITIZE=ON -DTRAINYARD_WERROR=$(WERROR) -DTRAINYARD_BENCH=OFF $(CMAKE_FLAGS)

$(RELEASE)/CMakeCache.txt:
	cmake -S . -B $(RELEASE) -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_WERROR=$(WERROR) -DTRAINYARD_BENCH=ON $(CMAKE_FLAGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

build-asan: setup $(ASAN)/CMakeCache.txt
	cmake --build $(ASAN) -j $(JOBS)

build-release: setup $(RELEASE)/CMakeCache.txt
	cmake --build $(RELEASE) -j $(JOBS)

# Every suite in the debug build, then the unit suites again under ASan + UBSan.
test: test-all test-asan

test-all: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure --no-tests=error

test-asan: build-asan
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j $(JOBS) -L unit --output-on-failure --no-tests=error

up: build-release
	@scripts/up $(RELEASE)

bench: build-release
	@scripts/bench $(RELEASE)

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN) $(RELEASE)
