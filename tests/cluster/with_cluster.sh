#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a command on a namespace cluster made for it (cluster.sh), for ctest:
#
#   with_cluster.sh N MTU [--shape HOST:RATE:QUEUE[:BURST]]... [--loss HOST:PERCENT]... [--ecn HOST:MBIT:KBYTES]...
#                   [--subnet A.B.C] [--ipv6] -- CMD...
#
# brings up N hosts with MTU M under a name of its own (sx<pid><letter>,
# so that concurrent runs never meet), runs CMD inside host 1 (its own
# process is on the cluster network, like mpirun on a login node), tears
# the cluster down whatever happens (also on SIGINT, SIGTERM, SIGHUP) and
# exits with CMD's status. CMD gets, in its environment:
#
#   CLUSTER_NAME          the cluster's name
#   CLUSTER_HOSTS    its hosts, comma-separated (host 1 first)
#   CLUSTER_AGENT    the absolute path of agent.sh (plm_rsh_agent)
#   CLUSTER_TOOL     the absolute path of cluster.sh
#   CLUSTER_MTU      the MTU
#   CLUSTER_IF       the cluster interface of every host (sx0)
#
# Exits 77 when the cluster cannot be made here (ctest: skipped).
#
# A with_cluster.sh killed by SIGKILL cannot tear its cluster down; the
# next one does: each records its pid and start time in the cluster's
# state directory, and removes the clusters whose recorder is gone.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$here/cluster.sh
state_root=${CLUSTER_STATE_DIR:-/run/sxcluster}

usage() {
    echo "usage: ${0##*/} N MTU [--shape HOST:RATE:QUEUE[:BURST]]... [--loss HOST:PERCENT]... [--ecn HOST:MBIT:KBYTES]... [--subnet A.B.C] [--ipv6] -- CMD..." >&2
    exit 2
}

(($# >= 4)) || usage
n=$1 mtu=$2
shift 2
up_args=(--mtu "$mtu")
while (($#)) && [[ $1 != -- ]]; do
    case $1 in
    --shape | --subnet | --loss | --ecn)
        (($# >= 2)) || usage
        up_args+=("$1" "$2")
        shift 2
        ;;
    --ipv6)
        up_args+=("$1")
        shift
        ;;
    *) usage ;;
    esac
done
(($# >= 2)) || usage
shift

# A process's start time (field 22 of /proc/PID/stat, after the command
# name, which may hold spaces): with the pid, it names the process, even
# after the pid is reused.
start_time() {
    local stat fields
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    read -ra fields <<<"$stat"
    echo "${fields[19]}"
}

# Clusters left by with_cluster.sh runs that were killed.
sweep() {
    local d pid started now
    for d in "$state_root"/*/; do
        [[ -f $d/owner ]] || continue
        read -r pid started <"$d/owner" || continue
        now=$(start_time "$pid") || now=
        [[ $now == "$started" ]] && continue
        d=${d%/}
        echo "${0##*/}: removing cluster ${d##*/}, left by process $pid" >&2 || true
        "$cluster" down "${d##*/}" || true
    done
}
sweep

name=
child=
# shellcheck disable=SC2317 # run by the traps
teardown() {
    local rc=$?
    trap - EXIT INT TERM HUP
    # Often the reader of our output is going away too: writing to a
    # closed pipe must not end the teardown (cluster.sh down does the same).
    trap '' PIPE
    if [[ -n $child ]]; then
        kill -TERM "$child" 2>/dev/null || true
    fi
    if [[ -n $name ]]; then
        "$cluster" down "$name" || echo "${0##*/}: cluster $name was not torn down cleanly" >&2 || true
    fi
    exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# A name that is free: a cluster left by an earlier process with our pid
# (one the sweep could not tell from us) makes `up` exit 3.
for letter in a b c d e f; do
    rc=0
    "$cluster" up "sx$$$letter" "$n" "${up_args[@]}" || rc=$?
    case $rc in
    0)
        name=sx$$$letter
        break
        ;;
    3) continue ;;
    *) exit "$rc" ;;
    esac
done
[[ -n $name ]] || {
    echo "${0##*/}: no free cluster name sx$$[a-f]" >&2
    exit 1
}
echo "$$ $(start_time $$)" >"$state_root/$name/owner"

CLUSTER_NAME=$name
CLUSTER_HOSTS=$("$cluster" hosts "$name")
CLUSTER_AGENT=$here/agent.sh
CLUSTER_TOOL=$cluster
CLUSTER_MTU=$mtu
CLUSTER_IF=sx0
export CLUSTER_NAME CLUSTER_HOSTS CLUSTER_AGENT CLUSTER_TOOL CLUSTER_MTU CLUSTER_IF

# In the background, so that a signal's trap runs at once rather than when
# CMD ends; with stdin given explicitly, as bash would otherwise give a
# background command /dev/null.
"$cluster" exec "$name" 1 "$@" <&0 &
child=$!
rc=0
wait "$child" || rc=$?
child=
exit "$rc"
