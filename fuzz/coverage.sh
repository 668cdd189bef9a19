#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Line coverage of the parsers the fuzzers drive, optional (CI does not
# run it). libFuzzer's cov: and ft: count edges and features over the
# whole instrumented library; this says which lines of each parser's own
# files the corpora reach. It builds the fuzzers with clang's source-based
# coverage (-fprofile-instr-generate -fcoverage-mapping, no sanitizer) into
# build-fuzz-cov/, runs each once over its seed corpus and what
# scripts/fuzz.sh found (build-fuzz/corpus-<target>/), and prints
# llvm-cov's report for that target's files.
#
#   fuzz/coverage.sh [target...]   (default: every target that is built)
#   LLVM_PROFDATA, LLVM_COV, CC    the tools (default: llvm-profdata, llvm-cov, clang)
set -eu

cd "$(dirname "$0")/.."
cc=${CC:-clang}
profdata=${LLVM_PROFDATA:-llvm-profdata}
llvmcov=${LLVM_COV:-llvm-cov}
build="build-fuzz-cov"
flags="-fprofile-instr-generate -fcoverage-mapping"

cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSX_SANITIZE=none -DSX_BUILD_FUZZ=ON -DSX_BUILD_TESTS=OFF -DSX_BUILD_BENCH=OFF \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null 2>&1
all="fuzz_packet fuzz_card fuzz_oob fuzz_rendezvous"
if grep -q 'SX_HAVE_PMIX *1' "$build/generated/build_config.h"; then
    all="$all fuzz_pmix"
fi
targets=${*:-$all}
# shellcheck disable=SC2086 # a list of targets
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target $targets >/dev/null

# The files that hold each target's parser and the code right behind it.
files() {
    case $1 in
    fuzz_packet) echo src/shard/wire.c src/shard/chan_rx.c ;;
    fuzz_card) echo src/engine/card.c ;;
    fuzz_oob) echo src/bootstrap/oob_conn.c src/bootstrap/oob.c ;;
    fuzz_rendezvous) echo src/bootstrap/rendezvous.c src/bootstrap/modex_sxrun.c ;;
    fuzz_pmix) echo src/bootstrap/modex_pmix.c ;;
    esac
}
seeds() {
    case $1 in
    fuzz_packet) echo fuzz/corpus ;;
    *) echo "fuzz/corpus-${1#fuzz_}" ;;
    esac
}

export SX_LOG_LEVEL=error SX_LOG_FILE=/dev/null
for t in $targets; do
    rm -f "$build/$t".*.profraw
    found="build-fuzz/corpus-$t"
    [ -d "$found" ] || found=""
    # -runs=0: every input once, nothing new. The profile is written at exit.
    # shellcheck disable=SC2086 # found is one folder or none
    LLVM_PROFILE_FILE="$build/$t.%p.profraw" "$build/fuzz/$t" -runs=0 "$(seeds "$t")" $found \
        >"$build/$t.log" 2>&1
    "$profdata" merge -sparse -o "$build/$t.profdata" "$build/$t".*.profraw
    echo "== $t (inputs: $(seeds "$t") ${found:-})"
    # shellcheck disable=SC2046 # a list of files
    "$llvmcov" report "$build/fuzz/$t" -instr-profile="$build/$t.profdata" $(files "$t")
done
