#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Writes the README's results section from sx_bench JSON: the machine, the
# mt scaling table (network and injection-only), the 8 B latency against
# the raw-UDP floor, the goodput under loss, and the rate and bw rows when
# those files are given. Markdown on stdout; the figures are copied
# verbatim from the JSON, nothing is typed in by hand.
#
# Usage: bench/results.sh FILE.json...
# The files may hold several runs of the same benchmark (`make bench` runs
# each BENCH_REPEAT times): records of the same benchmark, mode, threads,
# size, loss, window and aggregation are one figure, and each number shown
# is the median over the runs (a ratio: the median of each run's ratio, so
# both sides of it always come from one run).
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: bench/results.sh FILE.json..." >&2
    exit 2
fi
command -v jq >/dev/null 2>&1 || {
    echo "results.sh: jq is not installed (scripts/install-deps.sh installs it)" >&2
    exit 1
}
# One record per figure, every number in it the median over its records,
# with "runs" the number of records it came from.
all=$(jq -cs '
    def median: sort | length as $n
        | if $n % 2 == 1 then .[($n - 1) / 2] else (.[$n / 2 - 1] + .[$n / 2]) / 2 end;
    [.[].results[]] | group_by([.bench, .mode, .threads, .size, .loss, .window, .aggregation])
    | .[] | . as $g
    | reduce ($g | map(keys[]) | unique[]) as $k ({};
        .[$k] = ([$g[] | .[$k] | select(. != null)]
                 | if length > 0 and (.[0] | type) == "number" then median else .[0] end))
    | .runs = ($g | length)' "$@")
q() { jq -r "$1" <<<"$all"; }
runs=$(q '.runs' | sort -n | uniq | paste -sd- -)
loads=$(jq -s -r '[.[].machine.load1 | . * 100 | round / 100] | "\(min)\(if max > min then "-\(max)" else "" end)"' "$@")

jq -r '"Measured on \(.machine.host) (\(.machine.cores) cores, Linux \(.machine.kernel) \(.machine.arch)), shardx \(.config.version), \(.config.transport) over loopback, two local processes started by sx_run; load average '"$loads"' when the benchmarks started."' "$1"
echo
if [[ $runs == 1 ]]; then
    echo "Each figure is from one run."
else
    echo "Each figure is the median of $runs runs (every benchmark once per round, rounds one after another); the plots draw the spread over the runs as bars."
fi
echo

if [[ -n $(q 'select(.bench == "mt") | .bench') ]]; then
    echo "**mt** (8 B messages, window 64 per thread; aggregate messages/s, ratio to T=1 of the same mode):"
    echo
    echo "| T | sharded | ratio | global | ratio | sharded/global | injection-only sharded | ratio | injection-only global | ratio |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    for t in $(q 'select(.bench == "mt") | .threads' | sort -n | uniq); do
        cell() { # bench mode metric format
            q "select(.bench == \"$1\" and .mode == \"$2\" and .threads == $t) | .$3 // empty" |
                head -n 1 | { read -r v && printf "$4" "$v" || printf -- "-"; }
        }
        echo "| $t | $(cell mt sharded msg_rate %.0f) | $(cell mt sharded ratio_to_t1 %.2f)" \
            "| $(cell mt global msg_rate %.0f) | $(cell mt global ratio_to_t1 %.2f)" \
            "| $(cell mt sharded sharded_to_global %.2f)" \
            "| $(cell mt_inject sharded msg_rate %.0f) | $(cell mt_inject sharded ratio_to_t1 %.2f)" \
            "| $(cell mt_inject global msg_rate %.0f) | $(cell mt_inject global ratio_to_t1 %.2f) |"
    done
    echo
    if [[ -n $(q 'select(.bench == "mt_local") | .bench') ]]; then
        echo "**mt, one process** (no oversubscription: T threads on at most T CPUs, each the home of shard t of two engines in the process, streaming both ways over the network transport; messages/s, ratio to T=1 of the same mode):"
        echo
        echo "| T | sharded | ratio | global | ratio | sharded/global |"
        echo "|---|---|---|---|---|---|"
        # cell() is the one defined above; it reads $t.
        for t in $(q 'select(.bench == "mt_local") | .threads' | sort -n | uniq); do
            echo "| $t | $(cell mt_local sharded msg_rate %.0f) | $(cell mt_local sharded ratio_to_t1 %.2f)" \
                "| $(cell mt_local global msg_rate %.0f) | $(cell mt_local global ratio_to_t1 %.2f)" \
                "| $(cell mt_local sharded sharded_to_global %.2f) |"
        done
        echo
    fi
fi

if [[ -n $(q 'select(.bench == "latency") | .bench') ]]; then
    echo "**latency** (ping-pong half round trip, µs, median and p99; raw-UDP floor in the same run, and the floor on a socket every peer sends to, as shardx's udp transport's is (unconnected, the sender's address read and checked)):"
    echo
    echo "| size (B) | shardx median | shardx p99 | UDP floor median | ratio to floor | shared-socket floor | ratio to it |"
    echo "|---|---|---|---|---|---|---|"
    q 'select(.bench == "latency") | [.size, .half_rtt_us, .p99_us, (.ratio_to_floor // null), (.ratio_to_shared_floor // null)] | @tsv' |
        while IFS=$'\t' read -r size med p99 ratio sh_ratio; do
            floor=$(q "select(.bench == \"floor\" and .size == $size) | .half_rtt_us" | head -n 1)
            sh=$(q "select(.bench == \"floor_shared\" and .size == $size) | .half_rtt_us" | head -n 1)
            printf '| %s | %.2f | %.2f | %s | %s | %s | %s |\n' "$size" "$med" "$p99" \
                "$([[ -n $floor ]] && printf %.2f "$floor" || echo -)" \
                "$([[ -n $ratio ]] && printf %.2f "$ratio" || echo -)" \
                "$([[ -n $sh ]] && printf %.2f "$sh" || echo -)" \
                "$([[ -n $sh_ratio ]] && printf %.2f "$sh_ratio" || echo -)"
        done
    echo
fi

if [[ -n $(q 'select(.bench == "loss") | .bench') ]]; then
    echo "**loss** (64 KiB messages, window 64, loss injected on the sender's datagrams):"
    echo
    echo "| loss | MB/s | goodput / lossless | mean completion µs | p99 µs |"
    echo "|---|---|---|---|---|"
    q 'select(.bench == "loss") | "| \(.loss * 100)% | \(.bw_MBps * 10 | round / 10) | \(.goodput_ratio * 1000 | round / 1000) | \(.mean_us | round) | \(.p99_us | round) |"'
    echo
fi

if [[ -n $(q 'select(.bench == "rate") | .bench') ]]; then
    echo "**rate** (8 B, one thread; raw-UDP one-way floor $(q 'select(.bench == "floor_rate") | .msg_rate | round' | head -n 1) messages/s):"
    echo
    echo "| window | aggregation | messages/s | messages per datagram | ratio to floor |"
    echo "|---|---|---|---|---|"
    q 'select(.bench == "rate") | "| \(.window) | \(if .aggregation == 1 then "on" else "off" end) | \(.msg_rate | round) | \(.msgs_per_datagram * 10 | round / 10) | \(.ratio_to_floor * 100 | round / 100) |"'
    echo
fi

if [[ -n $(q 'select(.bench == "bw") | .bench') ]]; then
    echo "**bw** (window 64; MB/s = 10^6 B/s):"
    echo
    echo "| size (B) | shardx MB/s | raw UDP MB/s | ratio |"
    echo "|---|---|---|---|"
    q 'select(.bench == "bw" and .size > 0) | "| \(.size) | \(.bw_MBps * 10 | round / 10) | \(.ratio_to_floor // "-" | if type == "number" then (. * 100 | round / 100) else . end) |"' |
        while read -r line; do
            size=$(awk -F'|' '{gsub(/ /, "", $2); print $2}' <<<"$line")
            floor=$(q "select(.bench == \"floor_bw\" and .size == $size) | .bw_MBps * 10 | round / 10" | head -n 1)
            # insert the floor column before the ratio
            awk -F'|' -v f="${floor:--}" '{printf "|%s|%s| %s |%s|\n", $2, $3, f, $4}' <<<"$line"
        done
    echo
fi

# The plots make bench-readme copies next to the README.
echo "Plots (bench/plot.sh; \`make bench-readme\` copies them to docs/bench/):"
echo
# What each plot shows, under it: a reader sees the picture before the
# tables' headings.
caption() {
    case $1 in
    mt) echo "Aggregate 8-byte message rate against threads per process, sharded and global, over UDP loopback and injection-only (the sink transport): median of $runs runs, bars from min to max." ;;
    latency) echo "Half round-trip latency against message size (both axes log scale), shardx and the raw-UDP floor: median of $runs runs, bars from min to max; the dotted line is shardx's p99. The raw-UDP line ends at 65,000 B because one UDP datagram holds at most 64 KiB; larger messages have no raw-UDP figure." ;;
    loss) echo "Goodput under injected loss as a fraction of the same run's lossless goodput, 64 KiB messages: median of $runs runs, bars from min to max." ;;
    rate) echo "8-byte message rate with aggregation on and off, windows 64 and 256: median of $runs runs, bars from min to max." ;;
    bw) echo "Unidirectional bandwidth against message size (log scale), shardx and raw UDP: median of $runs runs, bars from min to max; raw UDP ends at one datagram's limit." ;;
    esac
}
for b in mt latency loss rate bw; do
    if [[ -n $(q "select(.bench == \"$b\") | .bench" | head -n 1) ]]; then
        echo "![sx_bench $b](docs/bench/$b.png)"
        echo
        caption "$b"
        echo
    fi
done
echo
echo "Figures on this VM move by up to 2x from run to run (it shares its host);"
echo "compare ratios taken in one run (the ratios above are medians of such),"
echo "and rerun \`make bench\` for your machine."
