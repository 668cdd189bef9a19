#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A cluster of hosts made of network namespaces, for the tests (issue 20).
#
#   cluster.sh up NAME N [--mtu M] [--subnet A.B.C] [--shape HOST:RATE:QUEUE[:BURST]]...
#                        [--loss HOST:PERCENT]... [--ecn HOST:MBIT:KBYTES]... [--ipv6]
#   cluster.sh down NAME
#   cluster.sh exec NAME HOST [CMD...]
#   cluster.sh hosts NAME
#   cluster.sh mtu NAME M
#   cluster.sh loss NAME HOST PERCENT
#   cluster.sh dropped NAME
#   cluster.sh marked NAME
#   cluster.sh qdropped NAME HOST
#
# `up` makes hosts NAME1..NAMEN. Each is a network namespace with `lo` and
# one interface `sx0` (the same name on every host) carrying A.B.C.i/24,
# plus a persistent UTS namespace whose hostname is the host's name. The
# other end of every host's veth, `pI`, is a port of the bridge `br0` in a
# namespace of its own, NAMEsw (the switch), so the root namespace gains no
# interface, route or address. Both veth ends and the bridge get MTU M
# (default 1500). `--shape HOST:RATE:QUEUE` puts a token bucket filter
# (`tc qdisc ... tbf rate RATE limit QUEUE burst BURST`) on the switch port
# towards HOST, so it shapes what that host receives; HOST is the host's
# name or its number. IPv6 is off on the cluster network: one address per
# host keeps what the tests see (and what a runtime picks) unambiguous;
# `--ipv6` turns it on in the hosts and gives each sx0 fd77::i/64 too
# (without duplicate address detection, so it is usable at once).
#
# Every cluster has its own namespaces, so all of them can use the same
# subnet (default 10.77.0.0/24, `--subnet` to change it): their addresses
# never meet in one routing table.
#
# The state of cluster NAME lives in /run/sxcluster/NAME (CLUSTER_STATE_DIR
# overrides /run/sxcluster): `hosts` (an /etc/hosts for the cluster),
# `info`, and `uts/HOST`, the bind mounts that keep the UTS namespaces.
# The directory is a shared bind mount of itself, as ip-netns makes
# /run/netns, so that unmounting a UTS namespace there also unmounts the
# copies that the mount namespaces of running commands hold.
#
# `exec` runs CMD in a host with the current directory and environment:
# nsenter joins the host's network and UTS namespaces, then unshare makes a
# mount namespace for this command only (a slave of ours, so nothing it
# mounts comes back), where the cluster's hosts file is bind-mounted over
# /etc/hosts and /sys is a new sysfs that shows the host's interfaces
# (what `ip netns exec` does). Every step execs the next, so the process
# that was started IS the command in the end: killing it leaves nothing
# behind. The machine's /etc/hosts is never written.
#
# `mtu` changes the MTU of the switch (the bridge and every port) while
# the hosts keep theirs: the path shrinks (or grows back) under running
# jobs. A frame larger than the port's MTU is dropped there without a
# word, as a switch port without jumbo frames drops it: no ICMP reaches
# the sender, and only what the sender notices itself tells it. veth and
# the bridge let a GSO super-frame through whatever its size (the kernel
# takes it for one that a NIC will cut up later), so `mtu` also sets
# every host's interface to cut GSO sends into frames itself
# (gso_max_segs 1), as a NIC does on the wire: the switch then sees the
# real frames, passes those that fit and drops the others.
#
# `loss` (and `up --loss`) drops PERCENT of the frames the switch forwards
# to HOST (0 to 100, two decimals; 0 removes it): an nftables rule with
# `numgen random` on the port, since this kernel has no netem. Loss,
# like shaping, is of what HOST receives.
#
# `dropped` prints how many frames the loss rules have dropped so far, so
# that a test can tell that its loss happened.
#
# `--ecn HOST:MBIT:KBYTES` makes the switch port towards HOST an ECN
# marking one, as a datacenter switch with a marking threshold is (DCTCP,
# RFC 8257 section 3.1): an nftables token bucket filling at MBIT Mbit/s
# and holding KBYTES kB stands for the port's queue (the bucket runs dry
# exactly when frames arrive faster than MBIT long enough to queue
# KBYTES), and an ECN-capable IPv4 or IPv6 frame (ECT(0) or ECT(1)) that
# finds it dry leaves marked CE (RFC 3168). Frames of every kind draw on the bucket;
# others pass unmarked. With --shape at the same port, MBIT a little under
# the shaped rate marks before the tbf queue drops: this kernel has no AQM
# qdisc (fq_codel, red) that marks by itself. `marked` prints how many
# frames the switch marked so far.
#
# `qdropped NAME HOST` prints how many frames the queue of the port
# towards HOST (--shape's tbf) has dropped so far; 0 for a port without
# one.
#
# The bucket counts frames of the MTU (plus 14 bytes of Ethernet header),
# as a switch's buffer counts cells: nft's byte limit holds a whole
# second of its rate besides the burst, so it cannot stand for a queue of
# kilobytes, while its packet limit holds just the burst. So that it sees
# frames, not GSO super-frames, --ecn also makes every host cut its GSO
# sends into frames itself, as `mtu` does.
#
# `loss` needs the nft command (Debian's nftables, which
# scripts/install-deps.sh installs) and the kernel's nf_tables for
# bridges; the switch's rules live in its namespace, in table `bridge sx`.
#
# `down` kills what still runs in the cluster's namespaces, deletes them,
# the state directory and the session directories that a killed Open MPI
# leaves in /tmp (ompi.HOST.UID); it does nothing for a cluster that is not
# there and also cleans up after an `up` that failed half-way.
#
# Exit status: 0, 1 failure, 2 usage, 3 (`up`) cluster NAME already exists,
# 77 (`up`) namespaces cannot be made here (not root, no `ip netns add`,
# no bind mounts, no UTS namespaces), with the reason on stderr: ctest's
# SKIP_RETURN_CODE.
set -euo pipefail

STATE_ROOT=${CLUSTER_STATE_DIR:-/run/sxcluster}
NETNS_DIR=/run/netns
IFNAME=sx0
PROG=${0##*/}

# A message on stderr. `down` goes on when stderr is gone (a closed pipe:
# SIGPIPE is ignored there), so a failed write must not stop it.
say() { echo "$PROG: $*" >&2 || true; }

die() {
    local rc=$1
    shift
    say "$*"
    exit "$rc"
}

usage() {
    cat >&2 <<EOF
usage: $PROG up NAME N [--mtu M] [--subnet A.B.C] [--shape HOST:RATE:QUEUE[:BURST]]...
                      [--loss HOST:PERCENT]... [--ecn HOST:MBIT:KBYTES]... [--ipv6]
       $PROG down NAME
       $PROG exec NAME HOST [CMD...]
       $PROG hosts NAME
       $PROG mtu NAME M
       $PROG loss NAME HOST PERCENT
       $PROG dropped NAME
       $PROG marked NAME
       $PROG qdropped NAME HOST
EOF
    exit 2
}

# A cluster name starts with a letter and does not end with a digit, so
# that host NAME12 cannot be host 2 of a cluster NAME1: the host names of
# two clusters never collide, and a host's name alone says its cluster.
check_name() {
    [[ $1 =~ ^[a-z]([a-z0-9-]{0,14}[a-z])?$ ]] ||
        die 2 "bad cluster name '$1': 1 to 16 of [a-z0-9-], starting and ending with a letter"
}

# Reads N, MTU and SUBNET of an existing cluster from its info file.
load_info() {
    local state=$STATE_ROOT/$1 key value
    [[ -f $state/info ]] || die 1 "no cluster '$1' (no $state/info)"
    while IFS='=' read -r key value; do
        case $key in
        n) N=$value ;;
        mtu) MTU=$value ;;
        subnet) SUBNET=$value ;;
        esac
    done <"$state/info"
}

# Prints the name of host $2 of cluster $1, given as its name, its number
# or its address; fails if there is no such host.
resolve_host() {
    local name=$1 host=$2 i
    load_info "$name"
    if [[ $host =~ ^[0-9]+$ ]]; then
        i=$((10#$host))
    elif [[ $host =~ ^$name([0-9]+)$ ]]; then
        i=$((10#${BASH_REMATCH[1]}))
    elif [[ $host == "$SUBNET".* && ${host##*.} =~ ^[0-9]+$ ]]; then
        i=$((10#${host##*.}))
    else
        die 1 "no host '$host' in cluster '$name'"
    fi
    ((i >= 1 && i <= N)) || die 1 "no host '$host' in cluster '$name' (hosts 1..$N)"
    echo "$name$i"
}

# Waits for a condition with a bounded poll (poll.sh): the kernel brings
# links up asynchronously (linkwatch), and nothing tells a script when.
# shellcheck source=poll.sh
. "$(dirname "${BASH_SOURCE[0]}")/poll.sh"

# --- namespace processes -------------------------------------------------

# The pids of the processes in the namespaces of cluster $1 (network
# namespaces NAMEi and NAMEsw, UTS namespaces in uts/): what `ip netns
# pids` does, for both kinds at once and with one find over /proc.
cluster_pids() {
    local name=$1 f ino
    local -A ours=()
    for f in "$NETNS_DIR/$name"sw "$NETNS_DIR/$name"[0-9]*; do
        # The glob also matches cluster NAME1x's namespaces: not ours.
        [[ -e $f && ${f##*/} =~ ^$name([0-9]+|sw)$ ]] || continue
        ino=$(stat -L -c %i "$f" 2>/dev/null) && ours["net:[$ino]"]=1
    done
    for f in "$STATE_ROOT/$name/uts/"*; do
        [[ -e $f ]] || continue
        ino=$(stat -L -c %i "$f" 2>/dev/null) && ours["uts:[$ino]"]=1
    done
    ((${#ours[@]})) || return 0
    local path target pid
    # A process can exit between the glob and find's readlink: its error
    # is dropped, and so is the process.
    { find /proc/[0-9]*/ns/net /proc/[0-9]*/ns/uts -maxdepth 0 -printf '%p %l\n' 2>/dev/null || true; } |
        while read -r path target; do
            if [[ -n $target && -n ${ours[$target]:-} ]]; then
                pid=${path#/proc/}
                pid=${pid%%/*}
                if [[ $pid != "$$" ]]; then echo "$pid"; fi
            fi
        done | sort -un
}

no_pids() { [[ -z $(cluster_pids "$1") ]]; }

# SIGTERM to everything still running in the cluster, a few seconds to go,
# then SIGKILL.
kill_cluster() {
    local name=$1 pids
    pids=$(cluster_pids "$name")
    [[ -n $pids ]] || return 0
    say "stopping what still runs in cluster $name: ${pids//$'\n'/ }"
    # shellcheck disable=SC2086 # one pid a word
    kill -TERM $pids 2>/dev/null || true
    poll 60 no_pids "$name" && return 0
    pids=$(cluster_pids "$name")
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    poll 60 no_pids "$name" || say "cluster $name: processes remain:" "$(cluster_pids "$name")"
}

# --- down ----------------------------------------------------------------

cmd_down() {
    (($# == 1)) || usage
    local name=$1 state ns rc=0
    check_name "$name"
    # Teardown runs from traps, often because the caller is going away
    # and its pipes with it: a write to a closed stderr must not end it.
    trap '' PIPE
    state=$STATE_ROOT/$name
    kill_cluster "$name"
    for ns in "$NETNS_DIR/$name"sw "$NETNS_DIR/$name"[0-9]*; do
        [[ -e $ns ]] || continue
        [[ ${ns##*/} =~ ^$name([0-9]+|sw)$ ]] || continue
        ip netns delete "${ns##*/}" || rc=1
    done
    if [[ -d $state ]]; then
        # The UTS bind mounts, then the directory's own.
        if mountpoint -q "$state"; then
            umount -R "$state" 2>/dev/null || umount -R -l "$state" || rc=1
        fi
        local f
        for f in "$state/uts/"*; do
            [[ -e $f ]] || continue
            if mountpoint -q "$f"; then
                umount "$f" 2>/dev/null || umount -l "$f" || rc=1
            fi
        done
        rm -rf "$state" || rc=1
    fi
    # Open MPI's session directories, named after the host (ompi.HOST.UID),
    # stay behind when mpirun or orted is killed.
    local dir
    for dir in "${TMPDIR:-/tmp}/ompi.$name"[0-9]*.* /tmp/ompi."$name"[0-9]*.*; do
        [[ -d $dir && ${dir##*/} =~ ^ompi\.${name}[0-9]+\.[0-9]+$ ]] || continue
        rm -rf "$dir" || rc=1
    done
    rmdir "$STATE_ROOT" 2>/dev/null || true
    return "$rc"
}

# --- up ------------------------------------------------------------------

up_cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if ((rc != 0)) && [[ -n ${UP_MADE:-} ]]; then
        cmd_down "$UP_MADE" >/dev/null 2>&1 || say "cleaning up after the failed up of $UP_MADE failed"
    fi
    exit "$rc"
}

# Runs `ip netns add`; a refusal means this machine cannot give us
# namespaces: exit 77 with ip's reason.
add_netns() {
    local err
    if ! err=$(ip netns add "$1" 2>&1); then
        die 77 "cannot make network namespaces here: ip netns add $1: ${err%%$'\n'*}"
    fi
}

# Sets sysctl $2=$3 in namespace $1 where the kernel has it.
ns_sysctl() {
    # shellcheck disable=SC2016 # expanded by that shell
    nsenter --net="$NETNS_DIR/$1" sh -c '[ ! -e "/proc/sys/$1" ] || echo "$2" >"/proc/sys/$1"' sh "$2" "$3"
}

links_ready() {
    local name=$1 i state
    for ((i = 1; i <= N; i++)); do
        state=$(ip -n "$name$i" -o link show dev "$IFNAME") || return 1
        [[ $state == *"state UP"* ]] || return 1
    done
    # Every port forwards (no STP: as soon as the port has carrier).
    state=$(bridge -n "${name}sw" link show) || return 1
    (($(grep -c 'state forwarding' <<<"$state") == N))
}

cmd_up() {
    (($# >= 2)) || usage
    local name=$1 n=$2
    shift 2
    check_name "$name"
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > 250)); then
        die 2 "bad host count '$n' (1..250)"
    fi
    N=$((10#$n)) MTU=1500 SUBNET=10.77.0
    local -a shapes=() losses=() ecns=()
    local ipv6=0
    while (($#)); do
        case $1 in
        --mtu)
            (($# >= 2)) || usage
            if ! [[ $2 =~ ^[0-9]+$ ]] || (($2 < 68 || $2 > 65535)); then
                die 2 "bad MTU '$2' (68..65535)"
            fi
            MTU=$2
            shift 2
            ;;
        --subnet)
            (($# >= 2)) || usage
            if ! [[ $2 =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] ||
                ((BASH_REMATCH[1] > 255 || BASH_REMATCH[2] > 255 || BASH_REMATCH[3] > 255)); then
                die 2 "bad subnet '$2' (A.B.C, for A.B.C.0/24)"
            fi
            SUBNET=$2
            shift 2
            ;;
        --shape)
            (($# >= 2)) || usage
            [[ $2 =~ ^[^:]+:[^:]+:[^:]+(:[^:]+)?$ ]] || die 2 "bad shape '$2' (HOST:RATE:QUEUE[:BURST])"
            shapes+=("$2")
            shift 2
            ;;
        --loss)
            (($# >= 2)) || usage
            [[ $2 =~ ^[^:]+:[^:]+$ ]] || die 2 "bad loss '$2' (HOST:PERCENT)"
            losses+=("$2")
            shift 2
            ;;
        --ecn)
            (($# >= 2)) || usage
            [[ $2 =~ ^[^:]+:[0-9]{1,6}:[0-9]{1,6}$ ]] ||
                die 2 "bad ecn '$2' (HOST:MBIT:KBYTES, integers)"
            ecns+=("$2")
            shift 2
            ;;
        --ipv6)
            ipv6=1
            shift
            ;;
        *) usage ;;
        esac
    done

    ((EUID == 0)) || die 77 "cannot make network namespaces here: not root"
    local tool
    for tool in ip tc bridge unshare nsenter mount umount mountpoint find; do
        command -v "$tool" >/dev/null || die 77 "cannot make the cluster here: $tool not found"
    done

    local state=$STATE_ROOT/$name sw=${name}sw i h
    for h in "$sw" $(seq -f "$name%g" 1 "$N"); do
        [[ ! -e $NETNS_DIR/$h ]] || die 3 "cluster '$name' exists (namespace $h)"
    done
    # The `down` of another cluster removes $STATE_ROOT when it empties it:
    # make it again if it went between the two mkdirs.
    for i in 1 2 3 4 5; do
        mkdir -p "$STATE_ROOT"
        if mkdir "$state" 2>/dev/null; then
            break
        fi
        [[ ! -e $state ]] || die 3 "cluster '$name' exists ($state)"
        ((i < 5)) || die 1 "cannot make $state"
    done
    # From here on, a failure or a signal undoes what was made.
    UP_MADE=$name
    trap up_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP

    local err
    if ! err=$(mount --bind "$state" "$state" 2>&1); then
        die 77 "cannot make mounts here: mount --bind $state: ${err%%$'\n'*}"
    fi
    mount --make-private "$state"
    mount --make-shared "$state"
    mkdir "$state/uts"
    printf 'n=%s\nmtu=%s\nsubnet=%s\n' "$N" "$MTU" "$SUBNET" >"$state/info"
    {
        printf '127.0.0.1\tlocalhost\n'
        printf '::1\tlocalhost ip6-localhost ip6-loopback\n'
        for ((i = 1; i <= N; i++)); do
            printf '%s.%d\t%s%d\n' "$SUBNET" "$i" "$name" "$i"
        done
    } >"$state/hosts"

    # The switch: a bridge alone in its namespace, no STP (ports forward as
    # soon as they have carrier), no IPv6 (no router solicitations or MLD
    # reports in the counters of the shaped ports).
    add_netns "$sw"
    ns_sysctl "$sw" net/ipv6/conf/default/disable_ipv6 1
    ns_sysctl "$sw" net/ipv6/conf/all/disable_ipv6 1
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 mtu "$MTU" type bridge stp_state 0

    for ((i = 1; i <= N; i++)); do
        h=$name$i
        add_netns "$h"
        ns_sysctl "$h" net/ipv6/conf/default/disable_ipv6 $((1 - ipv6))
        ns_sysctl "$h" net/ipv6/conf/all/disable_ipv6 $((1 - ipv6))
        ip -n "$h" link set lo up
        : >"$state/uts/$h"
        if ! err=$(unshare --uts="$state/uts/$h" hostname "$h" 2>&1); then
            die 77 "cannot make UTS namespaces here: unshare --uts: ${err%%$'\n'*}"
        fi
        # Made in the switch with its peer straight in the host: the root
        # namespace never holds either end.
        ip -n "$sw" link add "p$i" mtu "$MTU" type veth peer name "$IFNAME" mtu "$MTU" netns "$h"
        ip -n "$sw" link set "p$i" master br0 up
        ip -n "$h" addr add "$SUBNET.$i/24" dev "$IFNAME"
        if ((ipv6)); then
            ip -n "$h" addr add "fd77::$i/64" dev "$IFNAME" nodad
        fi
        ip -n "$h" link set "$IFNAME" up
    done
    ip -n "$sw" link set br0 up

    local spec host rate queue burst port
    for spec in "${shapes[@]}"; do
        IFS=: read -r host rate queue burst <<<"$spec"
        h=$(resolve_host "$name" "$host") || exit 2
        port=p${h#"$name"}
        # The bucket must hold at least one frame, or nothing passes; 64 KiB
        # also lets a GSO super-frame through whole.
        [[ -n $burst ]] || burst=$((MTU + 14 > 65536 ? MTU + 14 : 65536))
        if ! err=$(tc -n "$sw" qdisc replace dev "$port" root tbf rate "$rate" limit "$queue" burst "$burst" 2>&1); then
            die 2 "bad shape '$spec': tc: ${err%%$'\n'*}"
        fi
    done

    for spec in "${losses[@]}"; do
        set_loss "$name" "${spec%%:*}" "${spec#*:}"
    done
    local mbit kbytes
    for spec in "${ecns[@]}"; do
        IFS=: read -r host mbit kbytes <<<"$spec"
        h=$(resolve_host "$name" "$host") || exit 2
        ((10#$mbit > 0 && 10#$kbytes > 0)) || die 2 "bad ecn '$spec': MBIT and KBYTES above 0"
        # Frames per second and frames of queue, MTU-sized, at least one.
        echo "$(((10#$mbit * 125000 + MTU + 13) / (MTU + 14))) $(((10#$kbytes * 1000 + MTU + 13) / (MTU + 14)))" >"$state/ecn.p${h#"$name"}"
    done
    # A shaped or marking port sees frames, as a switch does: every host
    # cuts its GSO sends itself (gso_max_segs 1), as its NIC would on the
    # wire. A GSO super-frame (up to 64 KB) of a TCP sender otherwise
    # reaches the tbf as one unit, queued whole while there is room, and
    # a Linux TCP flow through the 1 Gbit/s port held 117.8 of 125 MB/s
    # beside a shardx flow's 1.3-2.0, whose datagrams found the queue full
    # (3.6k drops a second); with frames, TCP 71.8 and shardx 38.0, then
    # 57.5 and 56.4 once shardx's window grew by time (src/shard/cc.c;
    # bench/bench_incast.sh's tcp beside).
    if ((${#ecns[@]} || ${#shapes[@]})); then
        for ((i = 1; i <= N; i++)); do
            ip -n "$name$i" link set "$IFNAME" gso_max_segs 1 ||
                die 1 "cannot make $name$i cut its GSO sends into frames"
        done
    fi
    ((${#losses[@]} + ${#ecns[@]} == 0)) || switch_rules "$name"

    poll 100 links_ready "$name" || die 1 "the links of cluster $name did not come up in 5 s"
    trap - EXIT INT TERM HUP
    say "cluster $name up: $(hosts_line "$name") on $SUBNET.0/24, MTU $MTU"
}

# --- exec, hosts ---------------------------------------------------------

hosts_line() {
    local name=$1 i line=
    load_info "$name"
    for ((i = 1; i <= N; i++)); do
        line+=${line:+,}$name$i
    done
    echo "$line"
}

cmd_hosts() {
    (($# == 1)) || usage
    check_name "$1"
    hosts_line "$1"
}

# What runs in the command's own mount namespace before it: the cluster's
# hosts file over /etc/hosts and a sysfs of the host's network namespace
# over /sys (without it, /sys/class/net lists the root namespace's
# interfaces, and hwloc and Open MPI would not find sx0 there).
# shellcheck disable=SC2016 # expanded by that shell
ENTER_SCRIPT='set -e
mount --bind "$1" /etc/hosts
if mountpoint -q /sys; then umount -l /sys; fi
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
shift
exec "$@"'

cmd_exec() {
    (($# >= 2)) || usage
    local name=$1 host
    check_name "$name"
    host=$(resolve_host "$name" "$2")
    shift 2
    (($#)) || set -- "${SHELL:-/bin/sh}"
    local state=$STATE_ROOT/$name
    [[ -e $NETNS_DIR/$host && -e $state/uts/$host ]] || die 1 "host $host of cluster $name is not there"
    exec nsenter --net="$NETNS_DIR/$host" --uts="$state/uts/$host" -- \
        unshare --mount --propagation slave -- \
        /bin/sh -c "$ENTER_SCRIPT" sx-enter "$state/hosts" "$@"
}

# --- mtu, loss: the switch's nftables rules ------------------------------

# Rewrites the switch's chain from the state directory's `loss.pI` files
# (frames in 10000 dropped towards host I), in one nft transaction: the
# old rules go and the new ones come at once.
switch_rules() {
    local name=$1 state=$STATE_ROOT/$1 f rules='' marks='' err rate burst port
    command -v nft >/dev/null ||
        die 1 "nft not found: loss and ecn need nftables (scripts/install-deps.sh installs it)"
    for f in "$state"/loss.p*; do
        [[ -f $f ]] || continue
        rules+="add rule bridge sx path oifname \"${f##*/loss.}\" numgen random mod 10000 < $(<"$f") counter drop"$'\n'
    done
    # Marking in a chain of its own, after the loss rules, so that
    # `dropped` counts drops only.
    for f in "$state"/ecn.p*; do
        [[ -f $f ]] || continue
        read -r rate burst <"$f"
        # One bucket for all frames, through a named limit; then the mark,
        # for IPv4 and IPv6 alike.
        port=${f##*/ecn.}
        marks+="add limit bridge sx q_$port { rate over $rate/second burst $burst packets }"$'\n'
        marks+="add rule bridge sx marking oifname \"$port\" limit name \"q_$port\" meta mark set 1"$'\n'
        marks+="add rule bridge sx marking meta mark 1 ip ecn != not-ect ip ecn set ce counter"$'\n'
        marks+="add rule bridge sx marking meta mark 1 ip6 ecn != not-ect ip6 ecn set ce counter"$'\n'
    done
    if ! err=$(nsenter --net="$NETNS_DIR/${name}sw" nft -f - 2>&1 <<EOF
add table bridge sx
add chain bridge sx path { type filter hook forward priority 0; policy accept; }
add chain bridge sx marking { type filter hook forward priority 1; policy accept; }
flush chain bridge sx path
flush chain bridge sx marking
$rules
$marks
EOF
    ); then
        die 1 "cluster $name: nft refused the switch's rules: ${err%%$'\n'*}"
    fi
}

# A percentage with two decimals at most, in frames per 10000.
loss_per_10k() {
    [[ $1 =~ ^([0-9]{1,3})(\.([0-9]{1,2}))?$ ]] || return 1
    local frac=${BASH_REMATCH[3]}00
    local v=$((10#${BASH_REMATCH[1]} * 100 + 10#${frac:0:2}))
    ((v <= 10000)) || return 1
    echo "$v"
}

# Records loss $3 (percent) towards host $2 of cluster $1 in its state.
set_loss() {
    local name=$1 h v
    h=$(resolve_host "$name" "$2") || exit 2
    v=$(loss_per_10k "$3") || die 2 "bad loss '$3' for $h: a percentage from 0 to 100, two decimals at most"
    if ((v == 0)); then
        rm -f "$STATE_ROOT/$name/loss.p${h#"$name"}"
    else
        echo "$v" >"$STATE_ROOT/$name/loss.p${h#"$name"}"
    fi
}

cmd_mtu() {
    (($# == 2)) || usage
    local name=$1 mtu=$2 sw=${1}sw i
    check_name "$name"
    [[ $mtu =~ ^[0-9]+$ ]] && ((mtu >= 576 && mtu <= 65535)) || die 2 "bad MTU '$mtu': 576 to 65535"
    load_info "$name"
    [[ -e $NETNS_DIR/$sw ]] || die 1 "cluster $name has no switch ($sw)"
    # Ports first: the bridge's MTU cannot exceed its smallest port's.
    for ((i = 1; i <= N; i++)); do
        ip -n "$sw" link set "p$i" mtu "$mtu" || die 1 "cannot set the MTU of port p$i"
    done
    ip -n "$sw" link set br0 mtu "$mtu" || die 1 "cannot set the MTU of br0"
    for ((i = 1; i <= N; i++)); do
        ip -n "$name$i" link set "$IFNAME" gso_max_segs 1 ||
            die 1 "cannot make $name$i cut its GSO sends into frames"
    done
    say "cluster $name: the switch now carries frames of at most $mtu bytes (hosts keep MTU $MTU)"
}

cmd_loss() {
    (($# == 3)) || usage
    local name=$1 h
    check_name "$name"
    load_info "$name"
    [[ -e $NETNS_DIR/${name}sw ]] || die 1 "cluster $name has no switch (${name}sw)"
    h=$(resolve_host "$name" "$2") || exit 2
    set_loss "$name" "$h" "$3"
    switch_rules "$name"
    say "cluster $name: $3 % of the frames towards $h are dropped"
}

# Prints the sum of the counters of chain $2 of the switch's table (0 when
# the cluster has no such chain: no rule was ever made).
chain_counted() {
    local name=$1 chain=$2 out total=0 n
    check_name "$name"
    [[ -e $NETNS_DIR/${name}sw ]] || die 1 "cluster $name has no switch (${name}sw)"
    if ! out=$(nsenter --net="$NETNS_DIR/${name}sw" nft list chain bridge sx "$chain" 2>/dev/null); then
        echo 0
        return
    fi
    for n in $(grep -o 'counter packets [0-9]*' <<<"$out" | awk '{print $3}'); do
        total=$((total + n))
    done
    echo "$total"
}

cmd_dropped() {
    (($# == 1)) || usage
    chain_counted "$1" path
}

cmd_marked() {
    (($# == 1)) || usage
    chain_counted "$1" marking
}

cmd_qdropped() {
    (($# == 2)) || usage
    local name=$1 h d
    check_name "$name"
    [[ -e $NETNS_DIR/${name}sw ]] || die 1 "cluster $name has no switch (${name}sw)"
    h=$(resolve_host "$name" "$2") || exit 2
    d=$(tc -s -n "${name}sw" qdisc show dev "p${h#"$name"}" 2>/dev/null |
        awk '/dropped/ { sub(/,/, "", $7); print $7; exit }') || true
    echo "${d:-0}"
}

(($#)) || usage
sub=$1
shift
case $sub in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
exec) cmd_exec "$@" ;;
hosts) cmd_hosts "$@" ;;
mtu) cmd_mtu "$@" ;;
loss) cmd_loss "$@" ;;
dropped) cmd_dropped "$@" ;;
marked) cmd_marked "$@" ;;
qdropped) cmd_qdropped "$@" ;;
*) usage ;;
esac
