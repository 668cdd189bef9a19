#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# ECN end to end on one host (issue 23): `sx_bench incast --verify`, two
# senders into rank 0 over udp on loopback, congestion control on
# (SX_CONGESTION=on: loopback has no link, so auto leaves it out) and the
# receivers' fault decorator marking 2 % of the ECN-capable datagrams CE
# (SX_FAULT=ce=0.02), as a marking router would. The datagrams must leave
# ECT(0) and arrive so (the kernel's IP_RECVTOS says), rank 0 must count
# marks (rx_ecn_ce), the senders' windows must answer them (cc_ecn_cuts)
# and every byte must arrive. Then with SX_CONGESTION_ECN=no: the
# datagrams are not ECN-capable, so nothing is marked and no window cut
# by ECN. Figures are never compared with anything but zero.
#
#   ecn_loopback.sh SX_RUN SX_BENCH
set -euo pipefail

sx_run=$1 sx_bench=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() { # ECN (yes|no): prints the JSON object
    SX_CONGESTION=on SX_FAULT=ce=0.02,seed=5 SX_CONGESTION_ECN=$1 \
        "$sx_run" -n 3 --timeout 120 -- "$sx_bench" incast --size 64k --seconds 2 --verify \
        --json >"$out" 2>&1 || {
        cat "$out"
        echo "ecn_loopback: FAILED: sx_run exited non-zero (SX_CONGESTION_ECN=$1)"
        exit 1
    }
    cat "$out"
}

check() { # ECN (yes|no)
    python3 - "$out" "$1" <<'PY'
import json, re, sys
out, ecn = sys.argv[1], sys.argv[2] == "yes"
doc = None
for line in open(out, errors="replace"):
    line = re.sub(r"^\[\d+\] ", "", line.strip())
    if line.startswith("{") and '"incast"' in line:
        doc = json.loads(line)
if doc is None:
    print("ecn_loopback: FAILED: no incast JSON in the output")
    sys.exit(1)
c = lambda k: int(doc.get(k) or 0)
fail = []
if doc.get("verified") is not True:
    fail.append("verified is %r" % doc.get("verified"))
if c("chan_failures"):
    fail.append("chan_failures %d" % c("chan_failures"))
if ecn and c("rx_ecn_ce") == 0:
    fail.append("rank 0 counted no CE-marked datagram: they did not leave ECT(0), or the "
                "receiver did not read the field")
if ecn and c("cc_ecn_cuts") == 0:
    fail.append("no window answered a CE mark (cc_ecn_cuts 0)")
if not ecn and (c("rx_ecn_ce") or c("cc_ecn_cuts")):
    fail.append("SX_CONGESTION_ECN=no, yet rx_ecn_ce %d, cc_ecn_cuts %d"
                % (c("rx_ecn_ce"), c("cc_ecn_cuts")))
print("ecn_loopback: ECN %s: goodput %s MB/s, rx_ecn_ce %d, cc_ecn_cuts %d, cc_loss_cuts %d"
      % ("on" if ecn else "off", doc.get("goodput_mbps"), c("rx_ecn_ce"), c("cc_ecn_cuts"),
         c("cc_loss_cuts")))
for f in fail:
    print("ecn_loopback: FAILED: " + f)
sys.exit(1 if fail else 0)
PY
}

run yes
check yes
run no
check no
echo "ecn_loopback: OK"
