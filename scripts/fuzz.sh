#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Builds the fuzzers with clang (libFuzzer + ASan + UBSan) into
# build-fuzz/ and runs each on its seed corpus for a bounded time:
# fuzz_packet (the packet parser and a live shard's receive path,
# fuzz/corpus/) and fuzz_card (the business card parser behind
# sx_peer_add, fuzz/corpus-card/). Exits non-zero when a fuzzer finds a
# crash, a leak or undefined behaviour, or cannot start; the input that
# triggered it is left in build-fuzz/artifacts/. .ci/run runs it, so a
# format change that breaks a harness fails CI.
#
#   FUZZ_SECONDS  how long to fuzz each target (default 60)
#   FUZZ_JOBS     parallel fuzzing processes (default 1)
#   FUZZ_ARGS     extra libFuzzer flags, e.g. "-max_len=2048"
#   CC            the clang to use (default clang)
#
# New inputs the fuzzers find go to build-fuzz/corpus-<target>/, never into
# the checked-in seed corpora; each run's log is build-fuzz/<target>.log;
# to reproduce a crash:
#   build-fuzz/fuzz/fuzz_packet build-fuzz/artifacts/crash-<hash>
set -eu

cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
cc=${CC:-clang}
build="build-fuzz"

# clang and its fuzzer runtime: Debian's clang and libclang-rt-dev,
# installed when missing and apt-get is here (as scripts/install-deps.sh).
if ! command -v "$cc" >/dev/null 2>&1 ||
    ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){(void)d;(void)n;return 0;}' |
    "$cc" -x c -fsanitize=fuzzer -o /dev/null - >/dev/null 2>&1; then
    if [ "$cc" = clang ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
        echo "fuzz.sh: installing clang and libclang-rt-dev"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            clang libclang-rt-dev >/dev/null
    fi
fi
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz.sh: $cc not found; libFuzzer needs clang (CC=clang-NN to pick one)" >&2
    exit 2
fi

cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSX_SANITIZE=address -DSX_BUILD_FUZZ=ON -DSX_BUILD_TESTS=OFF -DSX_BUILD_BENCH=OFF \
    -DSX_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target fuzz_packet fuzz_card

mkdir -p "$build/corpus" "$build/artifacts"
# Logging below error would only slow the fuzzer down; leaks and UB are
# failures; the engine's receive path must not need more than 2 GiB.
export SX_LOG_LEVEL=error
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# -jobs makes libFuzzer log to fuzz-N.log files, so only ask for it when
# more than one process is wanted.
parallel=""
if [ "$jobs" -gt 1 ]; then
    parallel="-jobs=$jobs -workers=$jobs"
fi

run() { # target seed-corpus
    mkdir -p "$build/corpus-$1"
    status=0
    # shellcheck disable=SC2086 # parallel and FUZZ_ARGS are lists of flags
    "$build/fuzz/$1" "$build/corpus-$1" "$2" \
        -max_total_time="$seconds" $parallel -max_len=4096 \
        -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/" ${FUZZ_ARGS:-} 2>"$build/$1.log" || status=$?
    grep -E '^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|average_exec_per_sec)' "$build/$1.log" |
        sed "s/^/fuzz.sh: $1: /"
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$build/$1.log" >&2
        echo "fuzz.sh: $1 failed (status $status); inputs in $build/artifacts/:" >&2
        ls -l "$build/artifacts" >&2
        exit 1
    fi
}
run fuzz_packet fuzz/corpus
run fuzz_card fuzz/corpus-card
echo "fuzz.sh: no crash in ${seconds} s per target (fuzz_packet, fuzz_card)"
