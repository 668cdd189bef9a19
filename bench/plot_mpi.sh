#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Plots `make bench-mpi`'s results (bench_mpi.sh writes the data files):
#   bench/plot_mpi.sh RESULTS_DIR    -> RESULTS_DIR/mpi.png
# Left: ping-pong latency against message size per transport. Right: the
# 8-byte figures (message rate, latency with 1 and 2 threads per rank).
set -euo pipefail
dir=${1:?usage: plot_mpi.sh RESULTS_DIR}
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plot_mpi: gnuplot is not installed (apt-get install gnuplot-nox); no plot, the JSON is in $dir/mpi.json" >&2
    exit 1
fi
lat=$dir/mpi_latency.dat bars=$dir/mpi_bars.dat
[[ -s $lat && -s $bars ]] || { echo "plot_mpi: no data in $dir (run bench/bench_mpi.sh)" >&2; exit 1; }
ncols=$(awk 'NR==1{print NF-2}' "$lat")
names=$(awk 'NR==1{for(i=3;i<=NF;i++) printf "%s ", $i}' "$lat")

gnuplot <<GP
set terminal pngcairo size 1400,560 font ",11" noenhanced
set output "$dir/mpi.png"
set multiplot layout 1,3 title "shardx BTL vs tcp BTL vs UCX (tcp): ${BENCH_MPI_PLOT_TITLE:-two ranks, one machine}"
set logscale xy
set xlabel "message size (bytes)"
set format x "%.0s%c"
set ylabel "one-way latency (us)"
set key top left
set grid
names = "$names"
plot for [i=1:$ncols] "$lat" using 1:(column(i+1)) with linespoints title word(names, i)
unset logscale
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set xlabel ""
set key off
set ylabel "8-byte messages per second (thousands)"
set yrange [0:*]
plot "$bars" using 2:xtic(1) title "rate"
set key top left
set logscale y
set yrange [1:*]
set ylabel "8-byte latency (us, log scale)"
plot "$bars" using 3:xtic(1) title "ping-pong", "" using 4 title "1 thread (MT)", "" using 5 title "2 threads (MT)"
unset multiplot
GP
echo "plot_mpi: $dir/mpi.png"
