# The top-level Makefile only orchestrates: CMake builds, ctest runs tests.
#   make test        build into build/ and run every test
#   make bench       build and run the scaling benchmark (sx_bench mt)
#   make test-asan   the same tests under ASan+UBSan, in build-asan/
#   make test-tsan   the same tests under ThreadSanitizer, in build-tsan/
#   make bench-mpi   the shardx Open MPI BTL against the tcp BTL and UCX
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
SX_WERROR  ?= ON
CMAKE_ARGS ?=
CTEST_ARGS ?=

CONFIGURE = cmake -S . -DSX_WERROR=$(SX_WERROR) $(CMAKE_ARGS)

.PHONY: all deps build test bench bench-mpi build-asan test-asan build-tsan test-tsan fuzz install format clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@$(CONFIGURE) -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build -j $(JOBS)

test: build
	ctest --test-dir build --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The main job: the scaling benchmark (sx_bench mt: sharded vs global, 1..N
# threads, UDP over loopback, two local processes), as a table and as JSON
# under build/bench-results/.
bench: build
	./build/sx_info | head -n 7
	./build/bench/sx_bench mt
	@mkdir -p build/bench-results
	./build/bench/sx_bench mt --json > build/bench-results/mt.json
	@echo "bench: JSON in build/bench-results/mt.json"

# The Open MPI comparison (integrations/openmpi-btl): ping-pong, message
# rate and multithreaded latency over btl shardx, btl tcp and UCX on tcp,
# as a table, build/bench-results/mpi.json and mpi.png.
bench-mpi: build
	bench/bench_mpi.sh build

build-asan: deps
	@$(CONFIGURE) -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSX_SANITIZE=address >/dev/null
	@cmake --build build-asan -j $(JOBS)

test-asan: build-asan
	ctest --test-dir build-asan --output-on-failure -j $(JOBS) $(CTEST_ARGS)

build-tsan: deps
	@$(CONFIGURE) -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSX_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS)

test-tsan: build-tsan
	ctest --test-dir build-tsan --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# libFuzzer over the packet parser and a live shard's receive path (clang).
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

PREFIX ?= /usr/local
install: build
	cmake --install build --prefix $(PREFIX)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-tsan build-fuzz
