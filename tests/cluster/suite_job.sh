#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A multi-process cmocka suite (tests/multiproc) across the hosts of a
# namespace cluster (ctest cluster_suite_*). Run it on host 1 through
# with_cluster.sh:
#
#   with_cluster.sh 3 1500 -- suite_job.sh MIN_MB PROG [ARGS...]
#
# The suite's parent process runs here, on host 1; every child it starts
# (mp_spawn, tests/lib/mp_util.h) goes to the other hosts in turn through
# MP_CHILD_EXEC ("cluster.sh exec NAME 2", then 3, ...), so each engine
# pair talks across the cluster's network with every shardx default: the
# addresses each card offers, the route's MTU, the handshake's probe.
# The job passes when the suite passes and at least MIN_MB megabytes
# left the hosts' interfaces (the bytes every host sent on its sx0, so
# that a suite whose children talk to each other, both off host 1,
# counts too), which a suite whose children stayed on host 1 could not
# do.
set -euo pipefail

min_mb=$1
shift
for v in CLUSTER_NAME CLUSTER_HOSTS CLUSTER_TOOL CLUSTER_IF; do
    if [[ -z ${!v:-} ]]; then
        echo "suite_job: $v is not set: run me through with_cluster.sh" >&2
        exit 2
    fi
done
IFS=, read -ra hosts <<<"$CLUSTER_HOSTS"
if ((${#hosts[@]} < 2)); then
    echo "suite_job: needs 2 hosts or more" >&2
    exit 2
fi
prefixes=
for h in "${hosts[@]:1}"; do
    prefixes+=${prefixes:+;}"$CLUSTER_TOOL exec $CLUSTER_NAME $h"
done
# Each host's own sysfs (cluster.sh exec mounts one per command) shows
# its own sx0.
bytes() {
    local h sum=0
    for h in "${hosts[@]}"; do
        sum=$((sum + $("$CLUSTER_TOOL" exec "$CLUSTER_NAME" "$h" \
            cat "/sys/class/net/$CLUSTER_IF/statistics/tx_bytes")))
    done
    echo "$sum"
}

before=$(bytes)
rc=0
MP_CHILD_EXEC=$prefixes "$@" || rc=$?
crossed=$((($(bytes) - before) / 1000000))
echo "suite_job: ${crossed} MB sent on the hosts' $CLUSTER_IF (parent on $(hostname), children on ${hosts[*]:1})"
if ((rc != 0)); then
    echo "suite_job: FAILED: ${1##*/} exited with status $rc" >&2
    exit 1
fi
if ((crossed < min_mb)); then
    echo "suite_job: FAILED: only ${crossed} MB crossed the network, expected ${min_mb} MB or more" >&2
    exit 1
fi
echo "suite_job: OK: ${1##*/} across ${CLUSTER_HOSTS}, MTU ${CLUSTER_MTU:-?}"
