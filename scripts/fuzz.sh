#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Builds the fuzzers with clang (libFuzzer + ASan + UBSan) into
# build-fuzz/ and runs each on its seed corpus for a bounded time:
#
#   fuzz_packet      the packet parser and a live shard's receive path   fuzz/corpus/
#   fuzz_card        the business card parser behind sx_peer_add          fuzz/corpus-card/
#   fuzz_oob         OOB frames as a connection delivers them             fuzz/corpus-oob/
#   fuzz_rendezvous  the sx_run rendezvous, server and rank sides         fuzz/corpus-rendezvous/
#   fuzz_pmix        what the PMIx modex makes of a PMIx server's answers fuzz/corpus-pmix/
#                    (built only when PMIx was found; said so when skipped)
#
# Exits non-zero when a fuzzer finds a crash, a leak or undefined
# behaviour, or cannot start, or when most of its seed corpus no longer
# reaches distinct code (a format change that makes the harness reject
# every seed at the first check); the input that triggered a failure is
# left in build-fuzz/artifacts/. .ci/run runs it, so a format change that
# breaks a harness fails CI. At the end it prints, per target, the
# executions per second and the coverage (libFuzzer's cov: edges and ft:
# features) reached; fuzz/README.md has a table of them.
#
#   FUZZ_SECONDS  how long to fuzz each target (default 60)
#   FUZZ_JOBS     parallel fuzzing processes (default 1)
#   FUZZ_ARGS     extra libFuzzer flags, e.g. "-max_len=2048"
#   FUZZ_TARGETS  the targets to run (default: all of the above)
#   CC            the clang to use (default clang)
#
# New inputs the fuzzers find go to build-fuzz/corpus-<target>/, never into
# the checked-in seed corpora; each run's log is build-fuzz/<target>.log;
# the library's own log lines go to SX_LOG_FILE (default /dev/null: they
# are still formatted, so the formatting is fuzzed too). To reproduce a
# crash, with the library's log on stderr:
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
# Every target and its seed corpus; fuzz_pmix only where the library
# has the PMIx backend (without it the backend is a stub).
all="fuzz_packet fuzz_card fuzz_oob fuzz_rendezvous"
if grep -q 'SX_HAVE_PMIX *1' "$build/generated/build_config.h"; then
    all="$all fuzz_pmix"
else
    echo "fuzz.sh: fuzz_pmix skipped: PMIx was not found, so the pmix modex is a stub" >&2
fi
targets=${FUZZ_TARGETS:-$all}
seeds() {
    case $1 in
    fuzz_packet) echo fuzz/corpus ;;
    *) echo "fuzz/corpus-${1#fuzz_}" ;;
    esac
}
# shellcheck disable=SC2086 # a list of targets
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target $targets

mkdir -p "$build/corpus" "$build/artifacts"
# Logging below error would only slow the fuzzer down; leaks and UB are
# failures; the engine's receive path must not need more than 2 GiB.
export SX_LOG_LEVEL=error
export SX_LOG_FILE="${SX_LOG_FILE:-/dev/null}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# -jobs makes libFuzzer log to fuzz-N.log files, so only ask for it when
# more than one process is wanted.
parallel=""
if [ "$jobs" -gt 1 ]; then
    parallel="-jobs=$jobs -workers=$jobs"
fi

# libFuzzer's "#N INITED cov: C ft: F corp: K/Sb ..." or "#N DONE ..."
# line: the value after @2 (cov:, ft:, corp:, exec/s:).
field() { # log-text line-kind field
    printf '%s\n' "$1" | awk -v kind="$2" -v f="$3" '
        $2 == kind { for (i = 3; i < NF; i++) if ($i == f) v = $(i + 1) }
        END { print v }'
}

summary=""
run() { # target seed-corpus
    mkdir -p "$build/corpus-$1"
    # The seeds alone, once each: a crash on a seed, or seeds that no
    # longer reach distinct code (all rejected by the same early check),
    # fail here rather than hide behind a minute of random inputs.
    nseeds=$(find "$2" -type f | wc -l)
    status=0
    log=$("$build/fuzz/$1" -runs=0 -max_len=4096 -rss_limit_mb=2048 \
        -artifact_prefix="$build/artifacts/" "$2" 2>&1) || status=$?
    printf '%s\n' "$log" >"$build/$1.seeds.log"
    kept=$(field "$log" INITED corp:)
    kept=${kept%%/*}
    if [ "$status" -ne 0 ] || [ -z "$kept" ]; then
        printf '%s\n' "$log" | tail -n 60 >&2
        echo "fuzz.sh: $1 cannot run its seed corpus $2 (status $status)" >&2
        exit 1
    fi
    if [ "$nseeds" -gt 1 ] && [ $((kept * 2)) -lt "$nseeds" ]; then
        echo "fuzz.sh: $1 kept $kept of the $nseeds seeds in $2: most reach the same" \
            "code, so the harness rejects them (a format change?); regenerate them" >&2
        exit 1
    fi

    # shellcheck disable=SC2086 # parallel and FUZZ_ARGS are lists of flags
    "$build/fuzz/$1" "$build/corpus-$1" "$2" \
        -max_total_time="$seconds" $parallel -max_len=4096 \
        -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/" ${FUZZ_ARGS:-} 2>"$build/$1.log" || status=$?
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$build/$1.log" >&2
        echo "fuzz.sh: $1 failed (status $status); inputs in $build/artifacts/:" >&2
        ls -l "$build/artifacts" >&2
        exit 1
    fi
    if [ "$jobs" -gt 1 ]; then
        echo "fuzz.sh: $1: no crash; its statistics are in fuzz-<N>.log (FUZZ_JOBS=$jobs)"
        return
    fi
    log=$(cat "$build/$1.log")
    execs=$(printf '%s\n' "$log" | awk '/^stat::number_of_executed_units:/ { print $2 }')
    rate=$(printf '%s\n' "$log" | awk '/^stat::average_exec_per_sec:/ { print $2 }')
    cov=$(field "$log" DONE cov:)
    ft=$(field "$log" DONE ft:)
    corp=$(field "$log" DONE corp:)
    if [ -z "$execs" ] || [ "$execs" -eq 0 ] || [ -z "$cov" ]; then
        tail -n 20 "$build/$1.log" >&2
        echo "fuzz.sh: $1 ran no inputs" >&2
        exit 1
    fi
    echo "fuzz.sh: $1: $execs runs, $rate exec/s, cov $cov, ft $ft, corpus ${corp%%/*}" \
        "(seeds: $kept of $nseeds kept, cov $(field "$log" INITED cov:))"
    summary="$summary$(printf '%-16s %8s %6s %6s %6s' "$1" "$rate" "$cov" "$ft" "${corp%%/*}")
"
}
for t in $targets; do
    run "$t" "$(seeds "$t")"
done
echo "fuzz.sh: no crash in ${seconds} s per target; per target:"
printf '%-16s %8s %6s %6s %6s\n' target exec/s cov ft corpus
printf '%s' "$summary"
