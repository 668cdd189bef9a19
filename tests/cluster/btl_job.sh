#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A shardx BTL job across the hosts of a namespace cluster (ctest:
# cluster_btl_*). Run it on host 1 through with_cluster.sh, which sets
# CLUSTER_*:
#
#   with_cluster.sh 3 1500 -- btl_job.sh RUN_MPI MPIRUN SYSDIR OURDIR EXPECT -- SUITE ARGS...
#
# RUN_MPI is integrations/openmpi-btl/tests/run_mpi.sh, which runs mpirun
# with ob1 over `btl shardx,self` only (no tcp to fall back on) and checks
# the BTL's counters against EXPECT; here it gets one rank per host (-H,
# plm_rsh_agent: orted through agent.sh) and no shardx parameter: the
# defaults must find the other hosts. mpi_yield_when_idle: every host sees
# both cores of this machine, so spinning ranks would starve each other
# (README.md). The job passes when run_mpi.sh does and the BTL's report
# came from every host, one rank each.
set -euo pipefail

run_mpi=$1 mpirun=$2 sysdir=$3 ourdir=$4 expect=$5
shift 5
[[ ${1:-} == -- ]] && shift
for v in CLUSTER_HOSTS CLUSTER_AGENT CLUSTER_IF; do
    if [[ -z ${!v:-} ]]; then
        echo "btl_job: $v is not set: run me through with_cluster.sh" >&2
        exit 2
    fi
done
IFS=, read -ra hosts <<<"$CLUSTER_HOSTS"
np=${#hosts[@]}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

rc=0
timeout -k 10 240 "$run_mpi" "$mpirun" "$sysdir" "$ourdir" "$np" "$expect" -- \
    -H "$CLUSTER_HOSTS" --mca plm_rsh_agent "$CLUSTER_AGENT" \
    --mca oob_tcp_if_include "$CLUSTER_IF" --mca mpi_yield_when_idle 1 "$@" >"$out" 2>&1 || rc=$?
cat "$out"
if ((rc != 0)); then
    echo "btl_job: FAILED: run_mpi.sh exited with status $rc" >&2
    exit 1
fi
# A job meant to fail (EXPECT "fail:..."): run_mpi.sh checked what it said.
if [[ $expect == fail:* ]]; then
    echo "btl_job: OK: failed as expected across $CLUSTER_HOSTS"
    exit 0
fi
# "[host:pid] btl shardx: operations: ..." once per rank, from each host.
ran_on=$(sed -n 's/^\[\([^:]*\):[0-9]*\] btl shardx: operations:.*/\1/p' "$out" | sort | paste -sd,)
want=$(printf '%s\n' "${hosts[@]}" | sort | paste -sd,)
if [[ $ran_on != "$want" ]]; then
    echo "btl_job: FAILED: the BTL reported from '$ran_on', expected one rank on each of '$want'" >&2
    exit 1
fi
echo "btl_job: OK: $np ranks on $CLUSTER_HOSTS over btl shardx, MTU ${CLUSTER_MTU:-?}"
