#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Plots `make bench-mpi`'s results (bench_mpi.sh writes the data files):
#   bench/plot_mpi.sh RESULTS_DIR    -> RESULTS_DIR/mpi.png
# Left: ping-pong latency against message size per transport. Right: the
# 8-byte figures (message rate, latency with 1 and 2 threads per rank).
# Every figure is the median over bench_mpi.sh's rounds (BENCH_REPEAT) with
# an error bar from the smallest to the largest round, because one round
# on a shared machine can be far off and a lone bar would hide that. The
# size axis is log base 2, ticked at the measured sizes.
set -euo pipefail
dir=${1:?usage: plot_mpi.sh RESULTS_DIR}
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plot_mpi: gnuplot is not installed (apt-get install gnuplot-nox); no plot, the JSON is in $dir/mpi.json" >&2
    exit 1
fi
lat=$dir/mpi_latency.dat bars=$dir/mpi_bars.dat
[[ -s $lat && -s $bars ]] || { echo "plot_mpi: no data in $dir (run bench/bench_mpi.sh)" >&2; exit 1; }
# Header: "# size, then per transport: median min max; NAME..." (3 columns
# per transport after the size).
names=$(awk 'NR == 1 { sub(/.*; /, ""); print }' "$lat")
ncols=$(wc -w <<<"$names")
rounds=$(jq -r '.rounds // 1' "$dir/mpi.json" 2>/dev/null || echo 1)
if [[ $rounds == 1 ]]; then
    what="one round"
else
    what="median of $rounds rounds, bars from min to max"
fi
# A tick at each measured size, labelled 8, 4K, 16M.
tics=$(awk '!/^#/ {
        x = $1 + 0
        l = x >= 1048576 ? (x / 1048576) "M" : x >= 1024 ? (x / 1024) "K" : x
        printf "%s\"%s\" %d", n++ ? ", " : "", l, x
    }' "$lat")

# The third panel's top: 30x its largest value, a band on the log axis
# for the key.
lattop=$(awk '!/^#/ { for (i = 5; i <= 13; i++) if ($i != "NaN" && $i + 0 > m) m = $i + 0 }
    END { print (m > 0 ? m : 1) * 30 }' "$bars")

gnuplot <<GP
set terminal pngcairo size 1400,560 font ",11" noenhanced
set output "$dir/mpi.png"
set multiplot layout 1,3 title "shardx BTL vs tcp BTL vs UCX (tcp): ${BENCH_MPI_PLOT_TITLE:-two ranks, one machine}; $what"
set bars 1.5
set logscale x 2
set logscale y
set offsets graph 0.03, graph 0.03, 0, 0
set xtics ($tics)
set xlabel "message size (bytes, log scale)"
set ylabel "one-way latency (us, log scale)"
set key top left
set grid
names = "$names"
plot for [i=1:$ncols] "$lat" using 1:(column(3*i-1)):(column(3*i)):(column(3*i+1)) with yerrorlines lw 2 title word(names, i)
unset logscale
unset offsets
set xtics autofreq
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.8 border -1
set boxwidth 0.8
set xlabel ""
set key off
set ylabel "8-byte messages per second (thousands)"
set yrange [0:*]
plot "$bars" using 2:3:4:xtic(1) title "rate"
# Headroom above the tallest bar (tcp's 2-thread latency can be 1000x the
# rest) so the key in the corner covers no bar.
set key top left
set logscale y
set yrange [1:$lattop]
set ylabel "8-byte latency (us, log scale)"
plot "$bars" using 5:6:7:xtic(1) title "ping-pong", "" using 8:9:10 title "1 thread (MT)", "" using 11:12:13 title "2 threads (MT)"
unset multiplot
GP
echo "plot_mpi: $dir/mpi.png"
