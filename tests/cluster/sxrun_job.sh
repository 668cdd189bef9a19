#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A job of shardx's own launcher across the hosts of a namespace cluster
# (ctest: cluster_sxrun_*). Run it on host 1 through with_cluster.sh:
#
#   with_cluster.sh 3 1500 -- sxrun_job.sh SX_RUN NP -- PROG ARGS...
#
# sx_run places NP ranks by block on the cluster's hosts (-H) and starts
# them through agent.sh (--agent, as mpirun's plm_rsh_agent), which runs
# `sx_run --remote-child` in each host; every SX_* variable of this
# environment goes along (SX_FAULT for the loss runs). No shardx
# parameter is set: the defaults must find the other hosts. The job
# passes when sx_run exits 0 and a rank ran on every host (and, with
# SXRUN_JOB_LOSS set, the switch's loss rules dropped frames; with
# SXRUN_JOB_IPV6 set, host 1 sent IPv6 datagrams; with SXRUN_JOB_CRC set,
# the ranks' engines, which print their counters, sent data packets with
# a payload CRC32C: the hosts' paths leave the host in shardx's eyes,
# unlike loopback, where SX_CHECKSUM leaves it out; with SXRUN_JOB_EXPECT
# set to an extended regular expression, a line of the job's output
# matched it).
set -euo pipefail

sx_run=$1 np=$2
shift 2
[[ ${1:-} == -- ]] && shift
for v in CLUSTER_NAME CLUSTER_HOSTS CLUSTER_AGENT CLUSTER_TOOL; do
    if [[ -z ${!v:-} ]]; then
        echo "sxrun_job: $v is not set: run me through with_cluster.sh" >&2
        exit 2
    fi
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# IPv6 datagrams this host (host 1, where this script runs) sent so far.
udp6_out() { awk '$1 == "Udp6OutDatagrams" {print $2}' /proc/net/snmp6 2>/dev/null || echo 0; }
udp6_before=$(udp6_out)

rc=0
[[ -n ${SXRUN_JOB_CRC:-} ]] && export SX_STATS=json
# shellcheck disable=SC2016 # expanded by the rank's shell, on its host
"$sx_run" -H "$CLUSTER_HOSTS" -n "$np" --agent "$CLUSTER_AGENT" --timeout 240 -- \
    /bin/sh -c 'echo "sxrun_job: rank $SX_RUN_RANK on $(hostname)"; exec "$@"' sh "$@" \
    >"$out" 2>&1 || rc=$?
cat "$out"
if ((rc != 0)); then
    echo "sxrun_job: FAILED: sx_run exited with status $rc" >&2
    exit 1
fi
IFS=, read -ra hosts <<<"$CLUSTER_HOSTS"
for h in "${hosts[@]}"; do
    if ! grep -q "sxrun_job: rank [0-9]* on $h\$" "$out"; then
        echo "sxrun_job: FAILED: no rank ran on $h" >&2
        exit 1
    fi
done
# A job told to use IPv6 addresses only (SX_BIND_ADDR=fd77::/64 on a
# cluster made with --ipv6) must have sent IPv6 datagrams from here.
if [[ -n ${SXRUN_JOB_IPV6:-} ]]; then
    sent6=$(($(udp6_out) - udp6_before))
    if ((sent6 <= 0)); then
        echo "sxrun_job: FAILED: host 1 sent no IPv6 datagram" >&2
        exit 1
    fi
    echo "sxrun_job: host 1 sent $sent6 IPv6 datagrams (a GSO message counts once)"
fi
# A job run with loss on the switch's ports (with_cluster.sh --loss) must
# have met it: the switch counts what its rules dropped.
if [[ -n ${SXRUN_JOB_LOSS:-} ]]; then
    dropped=$("$CLUSTER_TOOL" dropped "$CLUSTER_NAME")
    if ((dropped == 0)); then
        echo "sxrun_job: FAILED: the switch dropped no frame (no loss rule met?)" >&2
        exit 1
    fi
    echo "sxrun_job: the switch dropped $dropped frames on the way"
fi
if [[ -n ${SXRUN_JOB_CRC:-} ]]; then
    crc=$(grep -o '"crc_sent":[0-9]*' "$out" | awk -F: '{s += $2} END {print s + 0}')
    if ((crc == 0)); then
        echo "sxrun_job: FAILED: no data packet carried a payload CRC32C across hosts" >&2
        exit 1
    fi
    echo "sxrun_job: $crc data packets carried a payload CRC32C"
fi
if [[ -n ${SXRUN_JOB_EXPECT:-} ]] && ! grep -Eq "$SXRUN_JOB_EXPECT" "$out"; then
    echo "sxrun_job: FAILED: no line of the job's output matched '$SXRUN_JOB_EXPECT'" >&2
    exit 1
fi
echo "sxrun_job: OK: $np ranks on $CLUSTER_HOSTS, MTU ${CLUSTER_MTU:-?}"
