#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A path whose MTU shrinks under running channels (ctest
# cluster_pmtu_shrink; issue 20). Run it on host 1 of a 2-host cluster at
# MTU 9000 through with_cluster.sh:
#
#   with_cluster.sh 2 9000 -- pmtu_job.sh SX_RUN PMTU_STREAM
#
# sx_run starts pmtu_stream on both hosts; the two ranks stream 60000-byte
# messages to each other over 8972-byte datagrams (the handshake probed
# the path at 9000). Once both have streamed a while they say so with a
# file; this script then lowers the switch's MTU to 1500 (cluster.sh mtu:
# the hosts keep 9000, so nothing tells the senders, and the switch drops
# their large frames without a word) and tells the ranks with another
# file. Each must then find the black hole, step down, resend what was in
# flight in fragments and deliver everything: the job passes when both
# ranks report every message intact, in order and acknowledged, and the
# engines counted the step (pmtu_blackholes) and the fragments.
set -euo pipefail

sx_run=$1 prog=$2
for v in CLUSTER_NAME CLUSTER_HOSTS CLUSTER_AGENT CLUSTER_TOOL; do
    if [[ -z ${!v:-} ]]; then
        echo "pmtu_job: $v is not set: run me through with_cluster.sh" >&2
        exit 2
    fi
done
dir=$(mktemp -d)
out=$dir/out
pid=
cleanup() {
    [[ -z $pid ]] || kill "$pid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

"$sx_run" -H "$CLUSTER_HOSTS" -n 2 --agent "$CLUSTER_AGENT" --timeout 240 -- \
    "$prog" "$dir" >"$out" 2>&1 &
pid=$!

# Both ranks streaming: a bounded poll on their files (the job can take
# its time to start on a loaded machine; it may also fail first).
for ((i = 0; i < 2400; i++)); do
    [[ -e $dir/ready.0 && -e $dir/ready.1 ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
if [[ ! -e $dir/ready.0 || ! -e $dir/ready.1 ]]; then
    cat "$out"
    echo "pmtu_job: FAILED: the ranks did not start streaming" >&2
    exit 1
fi
"$CLUSTER_TOOL" mtu "$CLUSTER_NAME" 1500
: >"$dir/shrunk"

rc=0
wait "$pid" || rc=$?
pid=
cat "$out"
if ((rc != 0)); then
    echo "pmtu_job: FAILED: sx_run exited with status $rc" >&2
    exit 1
fi
for r in 0 1; do
    line=$(grep "^\[$r\] pmtu_stream: rank $r: " "$out" || true)
    if [[ $line != *": ok" ]]; then
        echo "pmtu_job: FAILED: rank $r did not report ok" >&2
        exit 1
    fi
    # The datagrams of both directions were too large for the new path:
    # each rank must have stepped down and sent fragments, each must
    # have put fragments back together.
    for ctr in pmtu_blackholes frags_sent frags_assembled; do
        if ! [[ $line =~ $ctr=([0-9]+) ]] || ((BASH_REMATCH[1] == 0)); then
            echo "pmtu_job: FAILED: rank $r counted no $ctr" >&2
            exit 1
        fi
    done
done
if ! grep -q "a link on the path now has a smaller MTU" "$out"; then
    echo "pmtu_job: FAILED: no rank said why it stepped down" >&2
    exit 1
fi
echo "pmtu_job: OK: both ranks stepped down from 8972-byte datagrams when the path shrank to 1500"
