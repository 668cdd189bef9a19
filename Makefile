# SPDX-License-Identifier: BSD-3-Clause
# The top-level Makefile only orchestrates: CMake builds, ctest runs tests.
#   make test        build into build/ and run every test
#   make docs        the API reference (Doxygen) in build/docs/html
#   make bench       build and run the scaling benchmark (sx_bench mt), with plots
#   make test-asan   the same tests under ASan+UBSan, in build-asan/
#   make test-tsan   the same tests under ThreadSanitizer, in build-tsan/
#   make bench-mpi   the shardx Open MPI BTL against the tcp BTL and UCX
#   make bench-incast  congestion control: incast into one shaped host of
#                    the namespace cluster (needs root; skipped without)
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
SX_WERROR  ?= ON
CMAKE_ARGS ?=
CTEST_ARGS ?=

CONFIGURE = cmake -S . -DSX_WERROR=$(SX_WERROR) $(CMAKE_ARGS)

.PHONY: all deps build docs test bench bench-all bench-readme bench-mpi bench-incast build-asan test-asan build-tsan test-tsan fuzz install format clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@$(CONFIGURE) -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build -j $(JOBS)

# The API reference (Doxygen; a warning fails it) in build/docs/html.
docs: build
	cmake --build build --target docs

# cd, not ctest --test-dir: a ctest older than 3.20 ignores that option,
# finds no tests and succeeds.
test: build
	cd build && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The main job: the scaling benchmark (sx_bench mt: sharded vs global, 1..N
# threads, UDP over loopback, two local processes started by sx_run, then
# the injection-only variant), with the latency and loss benchmarks that
# the plots need; tables on stdout, JSON, PNG plots and a markdown summary
# under build/bench-results/.
# Figures on a shared machine move from run to run, so each benchmark runs
# BENCH_REPEAT times (run1/, run2/, ... under the results) and the plots
# and results.md show the median with the spread over the runs. The runs
# are interleaved (round 1 runs every benchmark, then round 2, ...) so
# that a change of load falls on all benchmarks alike instead of on the
# last one. latency-dgram is the latency benchmark at 65,000 B, the
# largest message the raw-UDP floor can send in one datagram, so the
# floor's line ends at that limit instead of at the ladder's 32 KiB.
# About 30 seconds on 2 cores with BENCH_REPEAT=3.
RESULTS      = build/bench-results
SXRUN        = ./build/sx_run -n 2 --no-prefix --timeout 600
BENCH_REPEAT ?= 3
BENCH_MAIN   = mt latency latency-dgram loss
BENCH_MORE   = rate bw bw-dgram

# $(call bench_rounds,BENCHMARKS): BENCH_REPEAT rounds of the benchmarks,
# round r writing $(RESULTS)/run<r>/<benchmark>.json; a failure stops it.
define bench_rounds
	@set -e; r=1; while [ $$r -le $(BENCH_REPEAT) ]; do \
	    mkdir -p $(RESULTS)/run$$r; \
	    for b in $(1); do \
	        case $$b in \
	            *-dgram) args="$${b%-dgram} --size 65000" ;; \
	            *) args=$$b ;; \
	        esac; \
	        echo "bench: round $$r of $(BENCH_REPEAT): sx_bench $$args"; \
	        $(SXRUN) ./build/bench/sx_bench $$args --json-file $(RESULTS)/run$$r/$$b.json; \
	    done; \
	    r=$$((r + 1)); \
	done
endef

bench: build
	@rm -rf $(RESULTS)/run[0-9]*
	@mkdir -p $(RESULTS)
	./build/sx_info | head -n 7
	$(call bench_rounds,$(BENCH_MAIN))
	bench/plot.sh $(RESULTS) $(RESULTS)/run*/*.json
	bench/results.sh $(RESULTS)/run*/*.json > $(RESULTS)/results.md
	@echo "bench: JSON (run1/ .. run$(BENCH_REPEAT)/), PNGs and results.md in $(RESULTS)/"

# Everything sx_bench has (adds rate and bw, BENCH_REPEAT rounds of them
# too; about 15 seconds more on 2 cores), then the incast benchmark
# (bench-incast; it says so and is skipped where no namespace cluster can be
# made, as without root).
bench-all: bench
	$(call bench_rounds,$(BENCH_MORE))
	bench/plot.sh $(RESULTS) $(RESULTS)/run*/*.json
	bench/results.sh $(RESULTS)/run*/*.json > $(RESULTS)/results.md
	BENCH_REPEAT=$(BENCH_REPEAT) bench/bench_incast.sh build

# Puts the last run's results.md and plots into the README's results
# section (between its bench-results markers) and docs/bench/.
bench-readme:
	@test -f $(RESULTS)/results.md || { echo "run make bench first" >&2; exit 1; }
	@mkdir -p docs/bench
	cp $(RESULTS)/*.png docs/bench/
	scripts/splice-readme.sh README.md $(RESULTS)/results.md

# The Open MPI comparison (integrations/openmpi-btl): ping-pong, message
# rate and multithreaded latency over btl shardx, btl tcp and UCX on tcp,
# as a table, build/bench-results/mpi.json and mpi.png; BENCH_REPEAT
# rounds of every test, the figures their medians (bench/bench_mpi.sh).
bench-mpi: build
	BENCH_REPEAT=$(BENCH_REPEAT) bench/bench_mpi.sh build
	BENCH_REPEAT=$(BENCH_REPEAT) bench/bench_mpi_hosts.sh build

# Congestion control under incast (issue 23): 2 and 4 senders into one host
# of the namespace cluster, its switch port shaped to 1 Gbit/s with a
# 256 KB queue; sx_bench incast with and without congestion control, the
# shardx and tcp BTLs (mpi_bench incast), an 8-byte prober's p99 and a TCP
# flow beside shardx; a table, the issue's ratios,
# build/bench-results/incast.json and incast.png (bench/bench_incast.sh;
# BENCH_REPEAT rounds of BENCH_INCAST_SECONDS, 5, each; about 3 minutes a
# round on 2 cores). Needs root; skipped with a message without.
bench-incast: build
	BENCH_REPEAT=$(BENCH_REPEAT) bench/bench_incast.sh build

build-asan: deps
	@$(CONFIGURE) -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSX_SANITIZE=address >/dev/null
	@cmake --build build-asan -j $(JOBS)

test-asan: build-asan
	cd build-asan && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

build-tsan: deps
	@$(CONFIGURE) -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSX_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS)

test-tsan: build-tsan
	cd build-tsan && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# libFuzzer over the packet parser and a live shard's receive path, and over
# the business card parser (clang), FUZZ_SECONDS each; .ci/run runs it.
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

PREFIX ?= /usr/local
# The install script itself, not cmake --install (CMake 3.15+): the
# project needs 3.13.
install: build
	cmake -DCMAKE_INSTALL_PREFIX=$(PREFIX) -P build/cmake_install.cmake

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-tsan build-fuzz
