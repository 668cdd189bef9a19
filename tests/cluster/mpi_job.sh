#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# An Open MPI job across the hosts of a namespace cluster, over the tcp BTL
# (ctest: cluster_mpi_tcp_mtu1500, cluster_mpi_tcp_mtu9000). Run it on
# host 1 of a cluster through with_cluster.sh, which sets CLUSTER_*:
#
#   tests/cluster/with_cluster.sh 3 9000 -- tests/cluster/mpi_job.sh [MPIRUN [MPICC]]
#
# It checks that every host's interface has the cluster's MTU, builds
# mpi_ring.c with MPICC into a temporary directory (every host sees the
# same files: the hosts share the machine's file system), and runs it with
# one rank per host:
#
#   mpirun -H HOSTS -np N --mca plm_rsh_agent agent.sh (orted through the agent)
#          --mca pml ob1 --mca btl tcp,self (no shared memory: tcp only)
#          --mca btl_tcp_if_include sx0 --mca oob_tcp_if_include sx0
#          --mca mpi_yield_when_idle 1
#
# plus --allow-run-as-root (the cluster needs root). Every host sees all
# the machine's cores, so no orted knows that 3 ranks share 2 cores: ranks
# that spin in MPI_Recv take the core from the peer they wait for, and a
# 64 KiB ping-pong takes 5 to 35 ms instead of 0.3 (mpi_yield_when_idle:
# spin, but yield). The job passes when
# mpirun exits 0, rank 0 says "mpi_ring: OK" and the ranks ran on exactly
# the cluster's hosts, one each.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mpirun=${1:-mpirun} mpicc=${2:-mpicc}
for v in CLUSTER_NAME CLUSTER_HOSTS CLUSTER_AGENT CLUSTER_MTU CLUSTER_IF; do
    if [[ -z ${!v:-} ]]; then
        echo "mpi_job: $v is not set: run me through with_cluster.sh" >&2
        exit 2
    fi
done
IFS=, read -ra hosts <<<"$CLUSTER_HOSTS"
np=${#hosts[@]}
ifname=$CLUSTER_IF

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for h in "${hosts[@]}"; do
    mtu=$("$CLUSTER_AGENT" "$h" cat "/sys/class/net/$ifname/mtu")
    if [[ $mtu != "$CLUSTER_MTU" ]]; then
        echo "mpi_job: FAILED: $h: $ifname has MTU $mtu, expected $CLUSTER_MTU" >&2
        exit 1
    fi
done
echo "mpi_job: $np hosts ($CLUSTER_HOSTS), $ifname MTU $CLUSTER_MTU on each"

"$mpicc" -std=c11 -O2 -o "$tmp/mpi_ring" "$here/mpi_ring.c"

# The timeout ends a hung job before ctest's TIMEOUT would kill
# with_cluster.sh, which then could not tear the cluster down.
rc=0
timeout -k 10 240 "$mpirun" --allow-run-as-root -H "$CLUSTER_HOSTS" -np "$np" \
    --mca plm_rsh_agent "$CLUSTER_AGENT" \
    --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include "$ifname" --mca oob_tcp_if_include "$ifname" \
    --mca mpi_yield_when_idle 1 \
    "$tmp/mpi_ring" "$ifname" >"$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
if ((rc != 0)); then
    echo "mpi_job: FAILED: mpirun exited with status $rc" >&2
    exit 1
fi
if ! grep -q '^mpi_ring: OK' "$tmp/out"; then
    echo "mpi_job: FAILED: rank 0 did not say 'mpi_ring: OK'" >&2
    exit 1
fi
ran_on=$(sed -n 's/^mpi_ring: rank [0-9]* on \([^,]*\),.*/\1/p' "$tmp/out" | sort | paste -sd,)
want=$(printf '%s\n' "${hosts[@]}" | sort | paste -sd,)
if [[ $ran_on != "$want" ]]; then
    echo "mpi_job: FAILED: the ranks ran on '$ran_on', expected one on each of '$want'" >&2
    exit 1
fi
echo "mpi_job: OK: $np ranks on $CLUSTER_HOSTS over btl tcp, MTU $CLUSTER_MTU"
