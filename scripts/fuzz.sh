#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Builds the packet fuzzer with clang (libFuzzer + ASan + UBSan) into
# build-fuzz/ and runs it on fuzz/corpus/ for a bounded time. Exits
# non-zero when the fuzzer finds a crash, a leak or undefined behaviour;
# the input that triggered it is left in build-fuzz/artifacts/.
#
#   FUZZ_SECONDS  how long to fuzz (default 60)
#   FUZZ_JOBS     parallel fuzzing processes (default 1)
#   FUZZ_ARGS     extra libFuzzer flags, e.g. "-max_len=2048"
#   CC            the clang to use (default clang)
#
# New inputs the fuzzer finds go to build-fuzz/corpus/, never into the
# checked-in seed corpus; to reproduce a crash:
#   build-fuzz/fuzz/fuzz_packet build-fuzz/artifacts/crash-<hash>
set -eu

cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
cc=${CC:-clang}
build="build-fuzz"

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz.sh: $cc not found; libFuzzer needs clang (CC=clang-NN to pick one)" >&2
    exit 2
fi

cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSX_SANITIZE=address -DSX_BUILD_FUZZ=ON -DSX_BUILD_TESTS=OFF -DSX_BUILD_BENCH=OFF \
    -DSX_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target fuzz_packet

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

status=0
# shellcheck disable=SC2086 # parallel and FUZZ_ARGS are lists of flags
"$build/fuzz/fuzz_packet" "$build/corpus" fuzz/corpus \
    -max_total_time="$seconds" $parallel -max_len=4096 \
    -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/" ${FUZZ_ARGS:-} || status=$?
if [ "$status" -ne 0 ]; then
    echo "fuzz.sh: the fuzzer failed (status $status); inputs in $build/artifacts/:" >&2
    ls -l "$build/artifacts" >&2
    exit 1
fi
echo "fuzz.sh: no crash in ${seconds} s"
