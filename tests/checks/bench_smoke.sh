#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# sx_bench runs, and says something sensible, in each way it can be
# started: alone (it forks its peer), under sx_run -n 2, under mpirun -np 2;
# every benchmark with a few iterations, checking the JSON/CSV it prints
# (records present, rates positive, every message delivered). Not a timing
# test: no figure is compared with a threshold, only with zero.
# Usage: bench_smoke.sh SX_BENCH SX_RUN [MPIRUN]
set -euo pipefail
bench=$1
sxrun=$2
mpirun=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "bench_smoke: $*" >&2
    exit 1
}

# check FILE JQ-CONDITION WHAT: the JSON in FILE satisfies the condition.
check() {
    jq -e "$2" "$1" >/dev/null || {
        echo "--- $1:" >&2
        cat "$1" >&2
        fail "$3"
    }
}

# Alone, every benchmark (small counts).
echo "bench_smoke: latency" >&2; "$bench" latency --size 8 --iters 300 --json >"$tmp/lat.json"
check "$tmp/lat.json" '[.results[] | select(.bench == "latency" and .size == 8 and .half_rtt_us > 0 and .ratio_to_floor > 0)] | length == 1' \
    "latency: no 8-byte record with a half round trip and a ratio to the floor"
check "$tmp/lat.json" '([.results[] | select(.bench == "latency" and .size == 8 and .ratio_to_shared_floor > 0)] | length == 1) and ([.results[] | select(.bench == "floor_shared" and .size == 8 and .half_rtt_us > 0)] | length == 1)' \
    "latency: no ratio to the shared-socket floor, or no floor_shared record"
# 300 round trips are one block: its ratio is the run's.
check "$tmp/lat.json" '[.results[] | select(.bench == "latency" and .size == 8 and .blocks == 1 and .block_ratio_min == .block_ratio_max and .block_ratio_min == .ratio_to_floor)] | length == 1' \
    "latency: one block, but its ratio is not the run's"
check "$tmp/lat.json" '.machine.cores > 0 and (.config.params | has("WINDOW")) and (.counters | length == 2)' \
    "latency: machine, config or counters missing"
echo "bench_smoke: bw" >&2; "$bench" bw --size 65536 --iters 200 --json >"$tmp/bw.json"
check "$tmp/bw.json" '[.results[] | select(.bench == "bw" and .bw_MBps > 0)] | length == 1' "bw: no bandwidth record"
for op in put get; do
    echo "bench_smoke: bw --op $op" >&2; "$bench" bw --op $op --size 1048576 --iters 20 --window 4 --json >"$tmp/bw_$op.json"
    check "$tmp/bw_$op.json" "[.results[] | select(.bench == \"bw\" and .mode == \"$op\" and .bw_MBps > 0 and .copies_per_byte >= 0)] | length == 1" \
        "bw --op $op: no bandwidth record"
done
"$bench" latency --op put >/dev/null 2>&1 && fail "--op outside bw: accepted"
echo "bench_smoke: rate" >&2; "$bench" rate --iters 3000 --json >"$tmp/rate.json"
check "$tmp/rate.json" '[.results[] | select(.bench == "rate" and .msg_rate > 0)] | length == 4' \
    "rate: want 4 records (window 64 and 256, aggregation on and off)"
check "$tmp/rate.json" '[.results[] | select(.bench == "rate" and .aggregation == 0) | .msgs_per_datagram] | all(. == 1)' \
    "rate: aggregation off must send one message per datagram"
echo "bench_smoke: mt" >&2; "$bench" mt --threads 1,2 --iters 4000 --json >"$tmp/mt.json"
check "$tmp/mt.json" '[.results[] | select(.bench == "mt" and .msg_rate > 0)] | length == 4' \
    "mt: want sharded and global at T=1 and T=2"
check "$tmp/mt.json" '[.results[] | select(.bench == "mt_inject" and .msg_rate > 0)] | length == 4' \
    "mt: want the injection-only variant at T=1 and T=2 in both modes"
echo "bench_smoke: loss" >&2; "$bench" loss --size 4096 --iters 300 --csv >"$tmp/loss.csv"
[[ $(grep -c '^loss,' "$tmp/loss.csv") -eq 5 ]] || fail "loss --csv: want 5 loss rows, got: $(cat "$tmp/loss.csv")"
head -n 1 "$tmp/loss.csv" | grep -q '^bench,mode,transport,threads,size,' || fail "loss --csv: bad header"
echo "bench_smoke: floor" >&2; "$bench" floor --size 8 --iters 300 --json >"$tmp/floor.json"
check "$tmp/floor.json" '[.results[] | select(.bench == "floor_rate" and .msg_rate > 0)] | length == 1' "floor: no rate record"

# The plotting scripts over two runs of the same benchmarks, as `make
# bench` hands them several (medians with bars): both succeed, the plots
# are written and results.md says how many runs each figure has. The
# figures are the small runs above; only that the scripts cope is checked.
echo "bench_smoke: plot.sh and results.sh over two runs" >&2
scripts=$(cd "$(dirname "$0")/../../bench" && pwd)
mkdir -p "$tmp/r1" "$tmp/r2"
cp "$tmp/lat.json" "$tmp/mt.json" "$tmp/r1/"
"$bench" latency --size 8 --iters 300 --json >"$tmp/r2/lat.json"
cp "$tmp/mt.json" "$tmp/r2/"
md=$("$scripts/results.sh" "$tmp"/r[12]/*.json) || fail "results.sh failed on two runs"
grep -q "median of 2 runs" <<<"$md" || fail "results.sh: no 'median of 2 runs' in: $md"
if command -v gnuplot >/dev/null 2>&1; then
    "$scripts/plot.sh" "$tmp/png" "$tmp"/r[12]/*.json >"$tmp/plot.txt" ||
        fail "plot.sh failed on two runs: $(cat "$tmp/plot.txt")"
    for p in mt latency; do
        [[ -s $tmp/png/$p.png ]] || fail "plot.sh wrote no $p.png"
    done
fi

# Bad arguments are refused, each error naming what was wrong.
if "$bench" latency --window 0 2>"$tmp/err"; then fail "--window 0 was accepted"; fi
grep -q "window: bad value '0'" "$tmp/err" || fail "--window 0: no reason given"
if "$bench" latency --bogus 2>"$tmp/err"; then fail "--bogus was accepted"; fi
grep -q "unknown option '--bogus'" "$tmp/err" || fail "--bogus: not named"
if "$bench" nonsense 2>"$tmp/err"; then fail "an unknown benchmark was accepted"; fi
grep -q "unknown benchmark 'nonsense'" "$tmp/err" || fail "nonsense: not named"
# --help to standard output with status 0; --version; sizes with suffixes.
help=$("$bench" --help) || fail "--help: non-zero status"
grep -q "^usage: sx_bench" <<<"$help" || fail "--help: no usage on stdout"
grep -q "^sx_bench (shardx) " <<<"$("$bench" --version)" || fail "--version: no version"
"$bench" latency --size=4k --iters=50 --json >"$tmp/4k.json" || fail "--size=4k refused"
check "$tmp/4k.json" '[.results[] | select(.bench == "latency" and .size == 4096)] | length == 1' \
    "--size=4k: no 4096-byte record"
if "$bench" latency --json --csv 2>/dev/null; then fail "--json with --csv was accepted"; fi
if "$bench" latency --iters 10 --transport nosuch 2>"$tmp/err"; then fail "--transport nosuch was accepted"; fi

# Under sx_run: --json-file, tables on stdout.
"$sxrun" -n 2 --no-prefix --timeout 300 "$bench" latency --size 64 --iters 300 \
    --json-file "$tmp/run.json" >"$tmp/run.txt"
grep -q "half round trip" "$tmp/run.txt" || fail "sx_run: no latency table on stdout"
check "$tmp/run.json" '[.results[] | select(.bench == "latency" and .size == 64)] | length == 1' \
    "sx_run: no latency record in --json-file"
# Three ranks are refused with the reason.
if "$sxrun" -n 3 --timeout 120 "$bench" latency --iters 10 2>"$tmp/err3"; then
    fail "sx_run -n 3 was accepted"
fi
grep -q "exactly 2 processes" "$tmp/err3" || fail "sx_run -n 3: no reason given"

# Under mpirun (PMIx modex), when the build has PMIx.
if [[ -n $mpirun ]]; then
    "$mpirun" -np 2 --oversubscribe --bind-to none "$bench" rate --iters 3000 --window 64 --json \
        >"$tmp/mpi.json"
    check "$tmp/mpi.json" '[.results[] | select(.bench == "rate" and .msg_rate > 0)] | length == 2' \
        "mpirun: want 2 rate records (aggregation on and off)"
fi
echo "bench_smoke: ok"
