#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The test of the namespace cluster itself (ctest: cluster_harness): brings
# up 3 hosts with MTU 9000 and host 2 shaped to 8 Mbit/s, and checks the
# hostnames, name resolution, /sys, the addresses, that every host reaches
# every other, that 8972-byte datagrams pass unfragmented and 8973 do not,
# that the token bucket is there and holds a transfer to its rate, the
# agent (status, stdin, the command being the agent's own process), a
# second cluster on the same subnet beside the first (named so that the
# first's name is a prefix of its own), that a failed `up` and `down`
# leave nothing, with_cluster.sh's status and teardown on SIGTERM, and
# that the root namespace, /etc/hosts and the mount table are as they
# were. Exits 77 where namespaces cannot be made.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
C=$here/cluster.sh
agent=$here/agent.sh
nettool=$here/nettool.py
state_root=${CLUSTER_STATE_DIR:-/run/sxcluster}
# other's name starts with name's: `down NAME` must not take NAME1y's
# namespaces or processes for its own.
name=h$$x other=h$$x1y bad=h$$z
failures=0

ok() { echo "ok: $*"; }
bad() {
    echo "FAILED: $*" >&2
    failures=$((failures + 1))
}
# check DESCRIPTION CMD...: CMD must succeed.
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}
# expect WANT DESCRIPTION CMD...: CMD's output must be WANT.
expect() {
    local want=$1 what=$2 got
    shift 2
    got=$("$@" 2>&1) || true
    if [[ $got == "$want" ]]; then ok "$what"; else bad "$what: '$got', expected '$want'"; fi
}
# Bounded poll for a condition (poll.sh).
# shellcheck source=poll.sh
. "$(dirname "${BASH_SOURCE[0]}")/poll.sh"

# What must be the same after the test: the root namespace's interfaces,
# addresses and routes, /etc/hosts, and the mounts.
root_view() {
    ip -o link show | awk '{print $2}'
    ip -o addr show | awk '{print $2, $3, $4}'
    ip route show
    md5sum /etc/hosts
}
mounts() { awk '{print $5}' /proc/self/mountinfo | sort; }
# The network namespaces of cluster $1 (not those of a cluster $11y).
namespaces_of() { ip netns list | awk '{print $1}' | grep -xE "$1([0-9]+|sw)" || true; }
before=$(root_view)
mounts_before=$(mounts)

# shellcheck disable=SC2317 # run by the traps
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    trap '' PIPE
    "$C" down "$name" 2>/dev/null || true
    "$C" down "$other" 2>/dev/null || true
    "$C" down "$bad" 2>/dev/null || true
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

rc=0
"$C" up "$name" 3 --mtu 9000 --shape 2:8mbit:64kb || rc=$?
((rc == 0)) || exit "$rc"

# --- the hosts -----------------------------------------------------------
expect "$name""1,$name""2,$name""3" "hosts lists the 3 hosts" "$C" hosts "$name"
for i in 1 2 3; do
    h=$name$i
    expect "$h" "$h: hostname" "$C" exec "$name" "$i" hostname
    expect "$h" "$h: hostname through agent.sh" "$agent" "$h" hostname
    # shellcheck disable=SC2016 # for the host's shell
    expect "lo sx0" "$h: /sys/class/net shows the host's interfaces" \
        "$C" exec "$name" "$i" sh -c 'echo $(ls /sys/class/net)'
    expect "9000" "$h: sx0 MTU" "$C" exec "$name" "$i" cat /sys/class/net/sx0/mtu
    expect "inet 10.77.0.$i/24" "$h: sx0 address, no other" \
        "$C" exec "$name" "$i" sh -c "ip -o addr show dev sx0 | awk '{print \$3, \$4}'"
    for j in 1 2 3; do
        expect "10.77.0.$j $name$j" "$h: resolves $name$j" \
            "$C" exec "$name" "$i" sh -c "getent hosts $name$j | awk '{print \$1, \$2}'"
        check "$h -> $name$j: ping" "$C" exec "$name" "$i" "$nettool" ping "$name$j" --count 3
    done
done
# shellcheck disable=SC2016 # for the host's shell
expect "$PWD x=1" "exec keeps the directory and the environment" \
    env x=1 "$C" exec "$name" 3 sh -c 'echo "$PWD x=$x"'

# A shaped port sees frames: every host cuts its GSO sends itself.
for i in 1 2 3; do
    expect "1" "host $i: gso_max_segs 1 (the shaped port sees frames)" \
        sh -c "ip -n $name$i -d link show sx0 | grep -o 'gso_max_segs [0-9]*' | cut -d' ' -f2"
done

# --- MTU -----------------------------------------------------------------
check "MTU 9000: 8972 bytes of ICMP pass unfragmented (DF) from host 1 to 3" \
    "$C" exec "$name" 1 "$nettool" ping "${name}3" --df --size 8972
check "MTU 9000: 8972 bytes pass through the shaped port to host 2" \
    "$C" exec "$name" 1 "$nettool" ping "${name}2" --df --size 8972
rc=0
"$C" exec "$name" 1 "$nettool" ping "${name}3" --df --size 8973 || rc=$?
if ((rc == 3)); then ok "MTU 9000: 8973 bytes refused with DF"; else bad "8973 bytes with DF: status $rc, expected 3 (EMSGSIZE)"; fi
for dev in br0 p1 p2 p3; do
    expect 9000 "switch $dev MTU" ip netns exec "${name}sw" cat "/sys/class/net/$dev/mtu"
done

# --- shaping -------------------------------------------------------------
qdisc=$(tc -n "${name}sw" qdisc show dev p2)
if [[ $qdisc == *"tbf"*"rate 8Mbit"* ]]; then ok "tbf on p2: $qdisc"; else bad "no tbf on p2: $qdisc"; fi
for dev in p1 p3; do
    q=$(tc -n "${name}sw" qdisc show dev "$dev")
    if [[ $q != *tbf* ]]; then ok "no tbf on $dev"; else bad "tbf on $dev: $q"; fi
done
# 2 MB to host 2 at 8 Mbit/s (1 MB/s) through a 64 KiB bucket: a token
# bucket lets at most BURST + RATE * t bytes out in any t seconds, so the
# bytes that the sink gets after its first recv (which got FIRST) take at
# least (2000000 - FIRST - 65536 - one frame) / 1e6 s. A lower bound, with
# 10 % to spare: a slow or loaded machine only makes it easier to meet.
bytes=2000000
coproc SINK { "$C" exec "$name" 2 "$nettool" sink 5001 "$bytes"; }
sink_out=${SINK[0]}
line=
read -r -t 30 line <&"$sink_out" || true
if [[ $line == ready ]]; then
    check "send $bytes bytes from host 1 to host 2" "$C" exec "$name" 1 "$nettool" send "${name}2" 5001 "$bytes"
    read -r -t 60 line <&"$sink_out" || true
    wait "$SINK_PID" || true
    read -r _ got _ secs _ first <<<"$line"
    min=$(awk -v f="${first:-0}" -v b="$bytes" 'BEGIN { printf "%.2f", 0.9 * (b - f - 65536 - 9014) / 1e6 }')
    if [[ ${got:-} == "$bytes" ]] && awk -v s="$secs" -v m="$min" 'BEGIN { exit !(s >= m) }'; then
        ok "shaped to host 2: $bytes bytes, the last $((bytes - first)) in $secs s (>= $min s at 8 Mbit/s)"
    else
        bad "shaped transfer to host 2: '$line', expected $bytes bytes, the last in >= $min s"
    fi
else
    bad "the sink on host 2 did not start: '$line'"
fi
sent=$(tc -s -n "${name}sw" qdisc show dev p2 | awk '/Sent/ {print $2; exit}')
if ((sent >= bytes)); then ok "tbf on p2 sent $sent bytes"; else bad "tbf on p2 sent $sent bytes, < $bytes"; fi

# --- the agent -----------------------------------------------------------
rc=0
# shellcheck disable=SC2016 # for the host's shell
CLUSTER_NAME=$name "$agent" "${name}3" 'test "$(hostname)" = '"${name}3"' && exit 7' || rc=$?
if ((rc == 7)); then ok "agent: exit status passes through"; else bad "agent: status $rc, expected 7"; fi
# shellcheck disable=SC2016 # for the host's shell
expect "hello from ${name}2" "agent: stdin passes through, the cluster named by the host" \
    env -u CLUSTER_NAME "$agent" "root@${name}2" 'read -r x; echo "$x from $(hostname)"' <<<"hello"
expect "a  b" "agent: the words are shell syntax, as with ssh" "$agent" "${name}1" echo '"a  b"'
# The agent's process becomes the command: killing it kills the command.
"$agent" "${name}2" sleep 1000 &
pid=$!
comm_is_sleep() { [[ $(cat "/proc/$pid/comm" 2>/dev/null) == sleep ]]; }
if poll 200 comm_is_sleep; then ok "agent: its pid $pid is the command's"; else bad "agent: pid $pid never became sleep"; fi
kill -TERM "$pid"
wait "$pid" || true
host2_empty() { [[ -z $(ip netns pids "${name}2") ]]; }
if poll 100 host2_empty; then ok "agent: killed, nothing left on host 2"; else bad "agent: left on host 2: $(ip netns pids "${name}2")"; fi

# --- more clusters, failures ---------------------------------------------
rc=0
"$C" up "$name" 2 2>/dev/null || rc=$?
if ((rc == 3)); then ok "up of an existing cluster: status 3"; else bad "up of an existing cluster: status $rc, expected 3"; fi
check "the existing cluster still works" "$C" exec "$name" 3 "$nettool" ping "${name}1" --count 1
check "a second cluster on the same subnet: up" "$C" up "$other" 2
check "second cluster: ping" "$C" exec "$other" 1 "$nettool" ping "${other}2" --count 3
check "first cluster: still ping" "$C" exec "$name" 1 "$nettool" ping "${name}2" --count 3
rc=0
"$C" up "$bad" 3 --shape 2:no-rate:1kb 2>/dev/null || rc=$?
if ((rc == 2)); then ok "up with a bad shape: status 2"; else bad "up with a bad shape: status $rc, expected 2"; fi
left=$(namespaces_of "$bad")
if [[ -z $left && ! -e $state_root/$bad ]]; then
    ok "the failed up left nothing"
else
    bad "the failed up left: $left $(ls -d "$state_root/$bad" 2>/dev/null)"
fi

# --- down ----------------------------------------------------------------
"$agent" "${name}3" sleep 1000 &
pid=$!
poll 200 comm_is_sleep || true
check "down (with a command still running on host 3)" "$C" down "$name"
wait "$pid" 2>/dev/null || true
check "down again: nothing to do" "$C" down "$name"
left=$(namespaces_of "$name")
if [[ -z $left && ! -e $state_root/$name ]]; then
    ok "down left no namespace and no state"
else
    bad "down left: $left $(ls -d "$state_root/$name" 2>/dev/null)"
fi
check "second cluster ($other): untouched by the down of $name" \
    "$C" exec "$other" 2 "$nettool" ping "${other}1" --count 3
check "second cluster: down" "$C" down "$other"
left=$(namespaces_of "$other")
if [[ -z $left && ! -e $state_root/$other ]]; then
    ok "second down left nothing"
else
    bad "second down left: $left $(ls -d "$state_root/$other" 2>/dev/null)"
fi
# --- with_cluster.sh ------------------------------------------------------
rc=0
# shellcheck disable=SC2016 # for the host's shell
"$here/with_cluster.sh" 2 1500 -- sh -c 'test "$(hostname)" = "${CLUSTER_NAME}1" && exit 5' 2>/dev/null || rc=$?
if ((rc == 5)); then ok "with_cluster: runs on host 1, status passes through"; else bad "with_cluster: status $rc, expected 5"; fi
"$here/with_cluster.sh" 2 1500 -- sleep 1000 2>/dev/null &
pid=$!
wc_running() {
    local p
    for p in $(ip netns pids "sx${pid}a1" 2>/dev/null); do
        [[ $(cat "/proc/$p/comm" 2>/dev/null) == sleep ]] && return 0
    done
    return 1
}
if poll 200 wc_running; then
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    left=$(namespaces_of "sx${pid}a")
    if ((rc == 143)) && [[ -z $left && ! -e $state_root/sx${pid}a ]]; then
        ok "with_cluster: SIGTERM tears the cluster down"
    else
        bad "with_cluster after SIGTERM: status $rc, left: $left"
    fi
else
    bad "with_cluster: sleep never ran on host 1"
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || true
fi

# Other work on the machine may change the root namespace or the mounts
# meanwhile (another test's `ip netns add`): only what could be ours fails.
ours="sx0|br0|(^|[^a-z])p[0-9]+[:@ ]|10\\.77\\.|$state_root/h$$[xyz]|/run/netns/h$$[xyz]|^/etc/hosts\$|^/sys\$"
compare() {
    local what=$1 before=$2 after=$3 changed mine
    changed=$(diff <(sort <<<"$before") <(sort <<<"$after") | grep '^[<>]' || true)
    mine=$(grep -E "$ours" <<<"$changed" || true)
    if [[ -n $mine ]]; then
        bad "$what: changed by the cluster:"
        echo "$mine" >&2
    else
        ok "$what: nothing of the cluster's left"
        [[ -z $changed ]] || echo "info: $what changed meanwhile, not by the cluster:" "$changed"
    fi
}
compare "root namespace and /etc/hosts" "$before" "$(root_view)"
compare "mount table" "$mounts_before" "$(mounts)"
if mountpoint -q /etc/hosts; then bad "/etc/hosts is a mount point"; else ok "/etc/hosts is not a mount point"; fi

if ((failures)); then
    echo "harness: $failures check(s) FAILED" >&2
    exit 1
fi
echo "harness: all checks passed"
