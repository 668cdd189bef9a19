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
# Give it the files of several runs (`make bench` runs each benchmark
# BENCH_REPEAT times): a figure measured in several runs is drawn as the
# median of the runs with an error bar from the smallest to the largest,
# because on a shared machine one run can be off by 2x and a lone point
# would hide that. Each plot's title says how many runs it holds.
# Message-size axes are log base 2, ticked at the measured sizes. The
# raw-UDP lines end where one datagram can no longer carry the message
# (sx_bench measures the floor up to 65,000 B); when shardx's line goes on
# past that, a label at the floor's last point says so.
#
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
# to $tmp/$1 as "x median min max runs" lines sorted by x, one line per x:
# the records of one x come from different runs (files). True when there
# is at least one line.
series() {
    jq -rs "map(select($2) | $3) | group_by(.x) | .[] |
        (map(.y) | sort) as \$v | (\$v | length) as \$n |
        (if \$n % 2 == 1 then \$v[(\$n - 1) / 2]
         else (\$v[\$n / 2 - 1] + \$v[\$n / 2]) / 2 end) as \$med |
        \"\(.[0].x) \(\$med) \(\$v[0]) \(\$v[-1]) \(\$n)\"" "$tmp/all" >"$tmp/$1"
    [[ -s "$tmp/$1" ]]
}

# "median of 3 runs" (or "of 2-3 runs" when points differ) for the
# series files named, so the title says what each point is.
runs_note() {
    local lo hi
    read -r lo hi < <(cat "$@" | awk 'NR == 1 || $5 < lo { lo = $5 } $5 > hi { hi = $5 } END { print lo, hi }')
    if [[ $hi == 1 ]]; then
        echo "one run (rerun with BENCH_REPEAT=3 for error bars)"
    elif [[ $lo == "$hi" ]]; then
        echo "median of $hi runs, bars from min to max"
    else
        echo "median of $lo-$hi runs, bars from min to max"
    fi
}

# A gnuplot "set xtics (...)" for a log-2 size axis: a tick at each
# power-of-two size measured in the series files named, labelled 8, 4K,
# 1M (a size of 0 is drawn at 1 and labelled 0). Sizes that are not powers
# of two (65,000 B) get no tick: their point is labelled where it matters.
size_tics() {
    local tics
    tics=$(cat "$@" | awk '{ print $1 }' | sort -gu | awk '
        function label(x) {
            if (x >= 1048576) return (x / 1048576) "M"
            if (x >= 1024) return (x / 1024) "K"
            return x
        }
        {
            x = $1 + 0
            p = 1
            while (p < x) p *= 2
            if (p != x) next
            printf "%s\"%s\" %d", n++ ? ", " : "", (x == 1 && zero ? "0" : label(x)), x
        }' zero="${SIZE_ZERO_AT_1:-0}")
    echo "set xtics ($tics)"
}

# Labels the last point of a raw-UDP series when it ends because a larger
# message would not fit one datagram (shardx series $2 goes on past 65,000
# B, the floor's largest datagram): without the label the line's end reads
# as missing data. $1: the floor's series file; $3: the label's offset
# from the point in characters, right and up, chosen per plot to keep the
# text off the shardx line.
udp_end_label() {
    local x y xs top
    top=$(tail -n 1 "$2" | awk '{ print $1 }')
    read -r x y _ < <(tail -n 1 "$1")
    awk -v x="$x" -v top="$top" 'BEGIN { exit !(top > 65000 && x < top) }' || return 0
    xs=$(sed -E ':a; s/^([0-9]+)([0-9]{3})/\1,\2/; ta' <<<"$x")
    # Right of the point: the floor line ends there. A gnuplot string in
    # double quotes reads \n as a new line.
    printf 'set label "raw UDP ends here, at %s B:\\none datagram holds\\nat most 64 KiB" at %s,%s offset %s left front\n' "$xs" "$x" "$y" "$3"
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
        echo "set bars 1.5"
        printf '%s\n' "$@"
    } >"$tmp/$name.gp"
    gnuplot "$tmp/$name.gp"
    made+=("$out/$name.png")
}

# Data columns of every series file: x, median, min, max (bars), runs.
ERR='using 1:2:3:4 with yerrorlines'

# ---- mt: rate against threads
mt=()
mtfiles=()
for m in sharded global; do
    if series "mt_$m" ".bench == \"mt\" and .mode == \"$m\"" '{x: .threads, y: (.msg_rate / 1e6)}'; then
        mt+=("'$tmp/mt_$m' $ERR lw 2 title 'udp loopback, $m'")
        mtfiles+=("$tmp/mt_$m")
    fi
    if series "inj_$m" ".bench == \"mt_inject\" and .mode == \"$m\"" '{x: .threads, y: (.msg_rate / 1e6)}'; then
        mt+=("'$tmp/inj_$m' $ERR dt 2 lw 2 title 'injection only (sink), $m'")
        mtfiles+=("$tmp/inj_$m")
    fi
done
if [[ ${#mt[@]} -gt 0 ]]; then
    plot mt "set title \"sx_bench mt: aggregate message rate, 8 B, window 64 per thread; $(runs_note "${mtfiles[@]}")\\n$machine\"" \
        "set xlabel 'threads per process'" "set ylabel 'million messages/s (log scale)'" \
        "set xtics 1" "set autoscale xfix" "set offsets 0.15, 0.15, 0, 0" "set logscale y" "plot $(IFS=,; echo "${mt[*]}")"
else
    skipped+=("mt.png (no mt records)")
fi

# ---- latency against size (0 B has no place on a log axis: drawn at 1 B)
if series lat '.bench == "latency"' '{x: ([.size, 1] | max), y: .half_rtt_us}'; then
    lines=("'$tmp/lat' $ERR lw 2 title 'shardx (udp), median round trip / 2'")
    files=("$tmp/lat")
    extra=()
    if series lat99 '.bench == "latency"' '{x: ([.size, 1] | max), y: .p99_us}'; then
        # Each run's p99 is itself a spread; its median over the runs is
        # enough here, without bars on bars.
        lines+=("'$tmp/lat99' using 1:2 with lines dt 3 title 'shardx, p99 (median over runs)'")
    fi
    if series floor '.bench == "floor" and .half_rtt_us != null' '{x: ([.size, 1] | max), y: .half_rtt_us}'; then
        lines+=("'$tmp/floor' $ERR lw 2 title 'raw UDP floor, median round trip / 2'")
        files+=("$tmp/floor")
        # shardx is above the floor here: just under the point is free.
        mapfile -t extra < <(udp_end_label "$tmp/floor" "$tmp/lat" 1,-1)
    fi
    plot latency "set title \"sx_bench latency: ping-pong half round trip; $(runs_note "${files[@]}")\\n$machine\"" \
        "set logscale x 2" "set logscale y" "set offsets graph 0.03, graph 0.03, 0, 0" "$(SIZE_ZERO_AT_1=1 size_tics "${files[@]}")" \
        "set xlabel 'message size (bytes, log scale; 0 B drawn at the left end)'" \
        "set ylabel 'microseconds (log scale)'" "${extra[@]+"${extra[@]}"}" \
        "plot $(IFS=,; echo "${lines[*]}")"
else
    skipped+=("latency.png (no latency records)")
fi

# ---- goodput against loss
if series loss '.bench == "loss"' '{x: (.loss * 100), y: .goodput_ratio}'; then
    plot loss "set title \"sx_bench loss: goodput under injected loss, 64 KiB messages; $(runs_note "$tmp/loss")\\n$machine\"" \
        "set xlabel 'injected loss (%)'" "set ylabel 'goodput / lossless goodput (same run)'" \
        "set yrange [0:1.1]" "set autoscale xfix" "set offsets 0.3, 0.3, 0, 0" "set key bottom left" \
        "plot '$tmp/loss' $ERR lw 2 title 'shardx'"
else
    skipped+=("loss.png (no loss records)")
fi

# ---- bandwidth against size
if series bw '.bench == "bw" and .size > 0' '{x: .size, y: .bw_MBps}'; then
    lines=("'$tmp/bw' $ERR lw 2 title 'shardx (udp)'")
    files=("$tmp/bw")
    extra=()
    if series fbw '.bench == "floor_bw" and .size > 0' '{x: .size, y: .bw_MBps}'; then
        lines+=("'$tmp/fbw' $ERR lw 2 title 'raw UDP one-way'")
        files+=("$tmp/fbw")
        # shardx is below the floor here and flat past it: the label goes
        # further down, under the shardx line.
        mapfile -t extra < <(udp_end_label "$tmp/fbw" "$tmp/bw" 1,-4)
    fi
    plot bw "set title \"sx_bench bw: unidirectional bandwidth; $(runs_note "${files[@]}")\\n$machine\"" \
        "set logscale x 2" "set logscale y" "set offsets graph 0.03, graph 0.03, 0, 0" "$(size_tics "${files[@]}")" \
        "set xlabel 'message size (bytes, log scale)'" "set ylabel 'MB/s (10^6 bytes/s, log scale)'" \
        "${extra[@]+"${extra[@]}"}" "plot $(IFS=,; echo "${lines[*]}")"
else
    skipped+=("bw.png (no bw records)")
fi

# ---- rate by window, aggregation on and off
rate=()
files=()
for a in 1 0; do
    label=$([[ $a == 1 ]] && echo "aggregation on" || echo "aggregation off")
    if series "rate_$a" ".bench == \"rate\" and .aggregation == $a" '{x: .window, y: (.msg_rate / 1e6)}'; then
        rate+=("'$tmp/rate_$a' $ERR lw 2 title '$label'")
        files+=("$tmp/rate_$a")
    fi
done
if [[ ${#rate[@]} -gt 0 ]]; then
    plot rate "set title \"sx_bench rate: 8 B message rate, one thread; $(runs_note "${files[@]}")\\n$machine\"" \
        "set logscale x 2" "$(size_tics "${files[@]}")" "set offsets graph 0.05, graph 0.05, 0, 0" \
        "set xlabel 'window (messages in flight, log scale)'" \
        "set ylabel 'million messages/s'" "set yrange [0:*]" "plot $(IFS=,; echo "${rate[*]}")"
else
    skipped+=("rate.png (no rate records)")
fi

for p in "${made[@]}"; do echo "plot.sh: wrote $p"; done
for s in "${skipped[@]+"${skipped[@]}"}"; do echo "plot.sh: skipped $s"; done
[[ ${#made[@]} -gt 0 ]]
