#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Regenerates the seed corpora of the start-up fuzzers: fuzz/corpus-oob/,
# fuzz/corpus-rendezvous/ and fuzz/corpus-pmix/. The generator,
# fuzz/fuzz_seeds.c, captures real traffic where there is some (the
# frames a real OOB endpoint writes, a real rendezvous server's answers)
# and uses the real cards of fuzz/corpus-card/; see its comment.
#
#   fuzz/make-corpus-bootstrap.sh   (after `make fuzz` configured build-fuzz/)
set -eu

cd "$(dirname "$0")/.."
build=${BUILD:-build-fuzz}
[ -f "$build/CMakeCache.txt" ] || {
    echo "make-corpus-bootstrap.sh: no $build/; run make fuzz (scripts/fuzz.sh) first" >&2
    exit 1
}
cmake --build "$build" --target fuzz_seeds >/dev/null
for c in corpus-oob corpus-rendezvous corpus-pmix; do
    rm -rf "fuzz/$c"
    mkdir -p "fuzz/$c"
done
SX_LOG_LEVEL=error ASAN_OPTIONS=detect_leaks=1 "$build/fuzz/fuzz_seeds" fuzz
ls -l fuzz/corpus-oob fuzz/corpus-rendezvous fuzz/corpus-pmix
