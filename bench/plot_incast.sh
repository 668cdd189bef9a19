#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Plots `make bench-incast`'s results (bench_incast.sh writes the data files):
#   bench/plot_incast.sh RESULTS_DIR    -> RESULTS_DIR/incast.png
# Left: the goodput into host 1 per case (2 or 4 senders, 64 KiB or 1 MiB
# messages) for sx_bench with congestion control (auto), without (off) and
# through a port that marks ECN (ecn), and mpi_bench over the shardx and
# tcp BTLs, against the shaped link's
# rate (1 Gbit/s, 125 MB/s). Right: the 8-byte prober's p99 round trip
# through the same queue, congestion control on and off and the marking
# port (log scale). Every
# bar is the median over bench_incast.sh's rounds (BENCH_REPEAT) with an
# error bar from the smallest to the largest round.
set -euo pipefail
dir=${1:?usage: plot_incast.sh RESULTS_DIR}
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plot_incast: gnuplot is not installed (apt-get install gnuplot-nox); no plot, the JSON is in $dir/incast.json" >&2
    exit 1
fi
good=$dir/incast_goodput.dat probe=$dir/incast_probe.dat
[[ -s $good && -s $probe ]] || { echo "plot_incast: no data in $dir (run bench/bench_incast.sh)" >&2; exit 1; }
rounds=$(jq -r '.rounds // 1' "$dir/incast.json" 2>/dev/null || echo 1)
secs=$(jq -r '.seconds // 5' "$dir/incast.json" 2>/dev/null || echo 5)
if [[ $rounds == 1 ]]; then
    what="one round of $secs s"
else
    what="median of $rounds rounds of $secs s, bars from min to max"
fi

gnuplot <<GP
set terminal pngcairo size 1400,560 font ",11" noenhanced
set output "$dir/incast.png"
set multiplot layout 1,2 title "incast into one host behind a 1 Gbit/s port with a 256 KB queue (namespace cluster, MTU 1500); $what"
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set key top right
set ylabel "goodput into host 1 (MB/s)"
# Room above the link line for the key.
set yrange [0:175]
plot "$good" using 2:3:4:xtic(1) title "sx_bench, congestion control", \
     "" using 5:6:7 title "sx_bench, SX_CONGESTION=off", \
     "" using 8:9:10 title "sx_bench, the port marking ECN", \
     "" using 11:12:13 title "MPI, shardx BTL", \
     "" using 14:15:16 title "MPI, tcp BTL", \
     125 with lines lw 2 dt 2 lc rgb "black" title "link rate (125 MB/s)"
set logscale y
set yrange [*:*]
set ylabel "8-byte prober's p99 round trip (us, log scale)"
set key top left
plot "$probe" using 2:3:4:xtic(1) title "congestion control", \
     "" using 5:6:7 title "SX_CONGESTION=off", \
     "" using 8:9:10 title "the port marking ECN"
unset multiplot
GP
echo "plot_incast: $dir/incast.png"
