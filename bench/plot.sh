#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Turns sx_bench JSON (--json or --json-file output) into PNG plots with
# gnuplot, reading the records with jq:
#
#   mt.png       message rate against threads, sharded and global mode, over
#                the network and injection-only (the sink transport)
#   latency.png  half round trip against message size, shardx and the
#                raw-UDP floor
#   loss.png     goodput (fraction of lossless) against injected loss
#   bw.png       bandwidth against message size, shardx and raw UDP
#   rate.png     message rate by window, aggregation on and off
#
# Usage: bench/plot.sh OUTDIR FILE.json...
# Each plot is drawn when some file holds its records; the rest are skipped
# and named. Exit status: 0 when at least one plot was written.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: bench/plot.sh OUTDIR FILE.json..." >&2
    exit 2
fi
for tool in jq gnuplot; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "plot.sh: $tool is not installed (scripts/install-deps.sh installs it)" >&2
        exit 1
    fi
done
out=$1
shift
mkdir -p "$out"
for f in "$@"; do
    if ! jq -e '.results | type == "array"' "$f" >/dev/null 2>&1; then
        echo "plot.sh: $f is not sx_bench JSON (no results list)" >&2
        exit 1
    fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every record of every file, one JSON object per line.
jq -c '.results[]' "$@" >"$tmp/all"
# A title line naming the machine and the build, from the first file.
machine=$(jq -r '"\(.machine.host), \(.machine.cores) cores, Linux \(.machine.kernel); shardx \(.config.version), \(.config.transport)"' "$1")

# Writes the records matching jq condition $2, projected by $3 to {x, y},
# as "x y" lines to $tmp/$1, sorted by x; true when there is at least one.
series() {
    jq -r "select($2) | $3 | \"\(.x) \(.y)\"" "$tmp/all" | sort -g >"$tmp/$1"
    [[ -s "$tmp/$1" ]]
}

made=()
skipped=()

plot() { # name, gnuplot commands
    local name=$1
    shift
    {
        echo "set terminal pngcairo size 900,560 noenhanced font ',10'"
        echo "set output '$out/$name.png'"
        echo "set key top left"
        echo "set grid"
        printf '%s\n' "$@"
    } >"$tmp/$name.gp"
    gnuplot "$tmp/$name.gp"
    made+=("$out/$name.png")
}

# ---- mt: rate against threads
mt=()
for m in sharded global; do
    if series "mt_$m" ".bench == \"mt\" and .mode == \"$m\"" '{x: .threads, y: (.msg_rate / 1e6)}'; then
        mt+=("'$tmp/mt_$m' using 1:2 with linespoints lw 2 title 'udp loopback, $m'")
    fi
    if series "inj_$m" ".bench == \"mt_inject\" and .mode == \"$m\"" '{x: .threads, y: (.msg_rate / 1e6)}'; then
        mt+=("'$tmp/inj_$m' using 1:2 with linespoints dt 2 lw 2 title 'injection only (sink), $m'")
    fi
done
if [[ ${#mt[@]} -gt 0 ]]; then
    plot mt "set title \"sx_bench mt: aggregate message rate, 8 B, window 64 per thread\\n$machine\"" \
        "set xlabel 'threads per process'" "set ylabel 'million messages/s'" \
        "set xtics 1" "set logscale y" "plot $(IFS=,; echo "${mt[*]}")"
else
    skipped+=("mt.png (no mt records)")
fi

# ---- latency against size (0 B has no place on a log axis: drawn at 1 B)
if series lat '.bench == "latency"' '{x: ([.size, 1] | max), y: .half_rtt_us}'; then
    lines=("'$tmp/lat' using 1:2 with linespoints lw 2 title 'shardx (udp), median'")
    if series lat99 '.bench == "latency"' '{x: ([.size, 1] | max), y: .p99_us}'; then
        lines+=("'$tmp/lat99' using 1:2 with lines dt 3 title 'shardx, p99'")
    fi
    if series floor '.bench == "floor" and .half_rtt_us != null' '{x: ([.size, 1] | max), y: .half_rtt_us}'; then
        lines+=("'$tmp/floor' using 1:2 with linespoints lw 2 title 'raw UDP floor, median'")
    fi
    plot latency "set title \"sx_bench latency: ping-pong half round trip (0 B drawn at 1 B)\\n$machine\"" \
        "set logscale xy" "set xlabel 'message size (bytes)'" "set ylabel 'microseconds'" \
        "plot $(IFS=,; echo "${lines[*]}")"
else
    skipped+=("latency.png (no latency records)")
fi

# ---- goodput against loss
if series loss '.bench == "loss"' '{x: (.loss * 100), y: .goodput_ratio}'; then
    plot loss "set title \"sx_bench loss: goodput under injected loss, 64 KiB messages\\n$machine\"" \
        "set xlabel 'injected loss (%)'" "set ylabel 'goodput / lossless goodput'" \
        "set yrange [0:1.1]" "set key bottom left" \
        "plot '$tmp/loss' using 1:2 with linespoints lw 2 title 'shardx'"
else
    skipped+=("loss.png (no loss records)")
fi

# ---- bandwidth against size
if series bw '.bench == "bw" and .size > 0' '{x: .size, y: .bw_MBps}'; then
    lines=("'$tmp/bw' using 1:2 with linespoints lw 2 title 'shardx (udp)'")
    if series fbw '.bench == "floor_bw" and .size > 0' '{x: .size, y: .bw_MBps}'; then
        lines+=("'$tmp/fbw' using 1:2 with linespoints lw 2 title 'raw UDP one-way'")
    fi
    plot bw "set title \"sx_bench bw: unidirectional bandwidth\\n$machine\"" "set logscale xy" \
        "set xlabel 'message size (bytes)'" "set ylabel 'MB/s (10^6 bytes/s)'" \
        "plot $(IFS=,; echo "${lines[*]}")"
else
    skipped+=("bw.png (no bw records)")
fi

# ---- rate by window, aggregation on and off
rate=()
for a in 1 0; do
    label=$([[ $a == 1 ]] && echo "aggregation on" || echo "aggregation off")
    if series "rate_$a" ".bench == \"rate\" and .aggregation == $a" '{x: .window, y: (.msg_rate / 1e6)}'; then
        rate+=("'$tmp/rate_$a' using 1:2 with linespoints lw 2 title '$label'")
    fi
done
if [[ ${#rate[@]} -gt 0 ]]; then
    plot rate "set title \"sx_bench rate: 8 B message rate, one thread\\n$machine\"" \
        "set logscale x 2" "set xlabel 'window (messages in flight)'" \
        "set ylabel 'million messages/s'" "set yrange [0:*]" "plot $(IFS=,; echo "${rate[*]}")"
else
    skipped+=("rate.png (no rate records)")
fi

for p in "${made[@]}"; do echo "plot.sh: wrote $p"; done
for s in "${skipped[@]+"${skipped[@]}"}"; do echo "plot.sh: skipped $s"; done
[[ ${#made[@]} -gt 0 ]]
