#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `make bench-mpi`'s two-host case: bench_mpi.sh with one rank on each of
# two hosts of the namespace cluster (tests/cluster/: network namespaces
# joined by a bridge, their own hostnames), at MTU 1500 and 9000. shardx
# runs with its defaults (it finds the other host itself); tcp and UCX are
# pointed at the cluster's interface.
#
#   bench/bench_mpi_hosts.sh [BUILD_DIR]     (needs root: namespaces)
#
# Results: BUILD_DIR/bench-results/hosts-mtu1500/ and hosts-mtu9000/
# (mpi.json, mpi.png). The hosts share this machine's CPUs and memory: the
# figures compare the transports on one kernel's network path between
# namespaces (veth and a bridge), not a wire; read the ratios.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "$build" && pwd)
status=0
for mtu in 1500 9000; do
    out=$build/bench-results/hosts-mtu$mtu
    mkdir -p "$out"
    echo "bench_mpi_hosts: two hosts, MTU $mtu" >&2
    rc=0
    # shellcheck disable=SC2016 # expanded on host 1, where CLUSTER_* are set
    "$root/tests/cluster/with_cluster.sh" 2 "$mtu" -- bash -c \
        'BENCH_MPI_HOSTS=$CLUSTER_HOSTS BENCH_MPI_AGENT=$CLUSTER_AGENT BENCH_MPI_IF=$CLUSTER_IF \
         BENCH_MPI_TITLE="MTU $CLUSTER_MTU" exec "$0" "$1" "$2"' \
        "$here/bench_mpi.sh" "$build" "$out" || rc=$?
    if ((rc == 77)); then
        echo "bench_mpi_hosts: no namespace cluster here (needs root); skipped" >&2
        exit 0
    fi
    ((rc == 0)) || status=$rc
done
exit $status
