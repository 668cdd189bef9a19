#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Incast across the hosts of a namespace cluster (ctest: cluster_incast_*;
# issue 23, congestion control). Run it on host 1 through with_cluster.sh,
# the switch port towards host 1 shaped so that the senders make a queue:
#
#   with_cluster.sh N 1500 --shape 1:1gbit:256kb [--loss 1:1] -- \
#       incast_job.sh SX_RUN SX_BENCH [SENDER_FAULT]
#
# `sx_bench incast --verify` as N ranks, one per host (sx_run -H places
# them by block: rank 0, the receiver, on host 1, the senders on hosts 2..N),
# each sender streaming to rank 0 for INCAST_SECONDS (3) seconds; every
# shardx parameter at its default, so congestion control is on (SX_CONGESTION
# auto: the datagrams leave the host). SENDER_FAULT, when given, is the
# senders' SX_FAULT (delay_us=500: every datagram they send is held 500 us
# in the fault transport, a longer path); rank 0 runs without one.
#
# The job passes when sx_run exits 0 (sx_bench --verify checked every byte),
# the JSON says verified and chan_failures 0, each sender ran on a host of
# its own other than host 1 and delivered messages, and the window reacted:
# cc_loss_cuts + cc_delay_exits > 0 (a 1 Gbit/s port with a 256 KB queue
# fed by several senders must build a queue; a window that never reacts
# means congestion control did not see it). With INCAST_JOB_LOSS set, the
# switch's loss rules (--loss) must have dropped frames. With
# INCAST_JOB_ECN set (the port marks, with_cluster.sh --ecn), the switch
# must have marked frames CE, rank 0 must have counted that many marked
# datagrams arrive (rx_ecn_ce: the kernel handed the ECN field up, IP_RECVTOS),
# and the senders' windows must have answered them (cc_ecn_cuts > 0).
# With INCAST_JOB_IPV6 set (a cluster made with --ipv6, SX_BIND_ADDR=
# fd77::/64), host 1 must have received IPv6 datagrams.
# Goodput, fairness
# and the share retransmitted are printed, never judged: speed is for
# bench/bench_incast.sh.
set -euo pipefail

sx_run=$1 sx_bench=$2 fault=${3:-}
seconds=${INCAST_SECONDS:-3}
for v in CLUSTER_NAME CLUSTER_HOSTS CLUSTER_AGENT CLUSTER_TOOL; do
    if [[ -z ${!v:-} ]]; then
        echo "incast_job: $v is not set: run me through with_cluster.sh" >&2
        exit 2
    fi
done
IFS=, read -ra hosts <<<"$CLUSTER_HOSTS"
np=${#hosts[@]}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# The shaped port's queue drops so far (tbf on the switch's p1).
qdrops() { "$CLUSTER_TOOL" qdropped "$CLUSTER_NAME" 1; }
drops_before=$(qdrops)
# IPv6 datagrams this host (host 1, the receiver) received so far.
udp6_in() { awk '$1 == "Udp6InDatagrams" {print $2}' /proc/net/snmp6 2>/dev/null || echo 0; }
udp6_before=$(udp6_in)

echo "incast_job: $((np - 1)) senders -> ${hosts[0]}, ${seconds} s, sender fault '${fault:-none}'"
rc=0
# shellcheck disable=SC2016 # expanded by the rank's shell, on its host
"$sx_run" -H "$CLUSTER_HOSTS" -n "$np" --agent "$CLUSTER_AGENT" --timeout 120 -- \
    /bin/sh -c 'echo "incast_job: rank $SX_RUN_RANK on $(hostname)"
        if [ -n "$1" ] && [ "$SX_RUN_RANK" != 0 ]; then SX_FAULT=$1; export SX_FAULT; fi
        shift; exec "$@"' sh "$fault" \
    "$sx_bench" incast --verify --seconds "$seconds" --json >"$out" 2>&1 || rc=$?
cat "$out"
if ((rc != 0)); then
    echo "incast_job: FAILED: sx_run exited with status $rc" >&2
    exit 1
fi
if ! grep -q "incast_job: rank 0 on ${hosts[0]}\$" "$out"; then
    echo "incast_job: FAILED: rank 0 did not run on ${hosts[0]}" >&2
    exit 1
fi

marked=-1
if [[ -n ${INCAST_JOB_ECN:-} ]]; then
    marked=$("$CLUSTER_TOOL" marked "$CLUSTER_NAME")
fi
python3 - "$out" "$CLUSTER_HOSTS" "$(($(qdrops) - drops_before))" "$marked" <<'PY'
import json, re, sys
out, hosts, qdrops, marked = sys.argv[1], sys.argv[2].split(","), sys.argv[3], int(sys.argv[4])
doc = None
for line in open(out, errors="replace"):
    line = re.sub(r"^\[\d+\] ", "", line.strip())
    if line.startswith("{"):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("cmd") == "incast":
            doc = d
fail = []
if doc is None:
    print("incast_job: FAILED: no JSON object with \"cmd\": \"incast\" in the output")
    sys.exit(1)
c = lambda k: int(doc.get(k) or 0)
if doc.get("verified") is not True:
    fail.append("verified is %r, not true" % doc.get("verified"))
if c("chan_failures") != 0:
    fail.append("chan_failures %d" % c("chan_failures"))
senders = doc.get("senders") or []
if len(senders) != len(hosts) - 1:
    fail.append("%d senders, want %d" % (len(senders), len(hosts) - 1))
seen = set()
for s in senders:
    h = s.get("host")
    if h == hosts[0] or h not in hosts or h in seen:
        fail.append("sender rank %s on %r: want a host of its own among %s"
                    % (s.get("rank"), h, ",".join(hosts[1:])))
    seen.add(h)
    if int(s.get("msgs") or 0) <= 0:
        fail.append("sender rank %s delivered no message" % s.get("rank"))
cuts = c("cc_loss_cuts") + c("cc_delay_exits") + c("cc_ecn_cuts")
if marked >= 0:
    # Rank 0's count covers the run up to its report, the switch's the
    # whole run (a fresh cluster; its loss rules drop before it marks):
    # they differ by marked frames the shaped queue dropped after, and
    # those that came after rank 0 read its counters (a late duplicate):
    # a few, where a receiver that did not read the field counts none.
    if marked == 0:
        fail.append("the switch marked no frame CE (no ECN-capable datagram met a dry bucket)")
    elif not 0.9 * (marked - int(qdrops)) <= c("rx_ecn_ce") <= marked:
        fail.append("rank 0 counted %d CE-marked datagrams, the switch marked %d and its "
                    "queue dropped %s frames" % (c("rx_ecn_ce"), marked, qdrops))
    if c("cc_ecn_cuts") == 0:
        fail.append("the senders' windows never answered a CE mark (cc_ecn_cuts 0)")
    print("incast_job: the switch marked %d frames CE; rank 0 counted %d; cc_ecn_cuts %d"
          % (marked, c("rx_ecn_ce"), c("cc_ecn_cuts")))
if cuts == 0:
    fail.append("the window never reacted (cc_loss_cuts, cc_delay_exits, cc_ecn_cuts 0): "
                "congestion control did not see the queue")
print("incast_job: goodput %s MB/s, Jain %s, retransmitted %s %%, rtx_timeout %d; "
      "cc_loss_cuts %d, cc_delay_exits %d, cc_collapses %d, cc_window_stalls %d, "
      "cc_pace_waits %d; the shaped port dropped %s frames"
      % (doc.get("goodput_mbps"), doc.get("jain"), doc.get("rtx_pct"), c("rtx_timeout"),
         c("cc_loss_cuts"), c("cc_delay_exits"), c("cc_collapses"), c("cc_window_stalls"),
         c("cc_pace_waits"), qdrops))
for s in senders:
    print("incast_job:   sender rank %s on %s: %s MB/s, %s messages"
          % (s.get("rank"), s.get("host"), s.get("mbps"), s.get("msgs")))
for f in fail:
    print("incast_job: FAILED: " + f)
sys.exit(1 if fail else 0)
PY
if [[ -n ${INCAST_JOB_IPV6:-} ]]; then
    got6=$(($(udp6_in) - udp6_before))
    if ((got6 <= 0)); then
        echo "incast_job: FAILED: host 1 received no IPv6 datagram" >&2
        exit 1
    fi
    echo "incast_job: host 1 received $got6 IPv6 datagrams (a GRO read counts once)"
fi
# Loss on the switch's port (with_cluster.sh --loss) must have been met.
if [[ -n ${INCAST_JOB_LOSS:-} ]]; then
    dropped=$("$CLUSTER_TOOL" dropped "$CLUSTER_NAME")
    if ((dropped == 0)); then
        echo "incast_job: FAILED: the switch dropped no frame (no loss rule met?)" >&2
        exit 1
    fi
    echo "incast_job: the switch's loss rule dropped $dropped frames"
fi
echo "incast_job: OK: $((np - 1)) senders into ${hosts[0]}, every byte verified"
