#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one run_mpi.sh job N times in a row and passes when every run
# passed and none took more than 3 times the median run's time: a job
# that sometimes hangs for a while, or collapses under oversubscription,
# fails here even when each run ends (issue 21, item 5).
#
#   repeat_mpi.sh N RUN_MPI_ARGS...
set -u
n=$1
shift
here=$(dirname "$0")
times=()
for ((i = 1; i <= n; i++)); do
    t0=$(date +%s%N)
    if ! out=$("$here/run_mpi.sh" "$@" 2>&1); then
        echo "$out"
        echo "repeat_mpi: FAILED: run $i of $n failed" >&2
        exit 1
    fi
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    times+=("$ms")
    echo "repeat_mpi: run $i: ${ms} ms"
done
mapfile -t sorted < <(printf '%s\n' "${times[@]}" | sort -n)
median=${sorted[$((n / 2))]}
slowest=${sorted[$((n - 1))]}
echo "repeat_mpi: $n runs, median ${median} ms, fastest ${sorted[0]} ms, slowest ${slowest} ms"
if ((slowest > 3 * median)); then
    echo "repeat_mpi: FAILED: the slowest run took more than 3 times the median" >&2
    exit 1
fi
