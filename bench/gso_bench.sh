#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs gso_bench (bench/gso_bench.c) between two hosts of the namespace
# cluster (tests/cluster/) at MTU 1500: each sender mode (batch: sendmmsg,
# gso: UDP_SEGMENT from one buffer, gsoiov and gsoadj: the same as an
# iovec per datagram) against each receiver mode (batch: recvmmsg, gro:
# UDP_GRO), REPS times in alternation, one JSON line per side and run.
#
#   bench/gso_bench.sh [BUILD_DIR [REPS]]     (needs root: namespaces)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
reps=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
[[ -x $build/bench/gso_bench ]] || { echo "gso_bench.sh: $build/bench/gso_bench not built" >&2; exit 1; }
# shellcheck disable=SC2016 # expanded on host 1 of the cluster
exec "$here/../tests/cluster/with_cluster.sh" 2 1500 -- bash -c '
set -euo pipefail
bench=$1 reps=$2
IFS=, read -ra h <<<"$CLUSTER_HOSTS"
dest=$("$CLUSTER_AGENT" "${h[1]}" ip -4 -o addr show dev "$CLUSTER_IF" | sed -n "s/.* inet \([0-9.]*\)\/.*/\1/p")
port=47000
for r in $(seq "$reps"); do
  for tx in batch gso gsoiov gsoadj; do
    for rx in batch gro; do
      port=$((port + 1))
      out=$(mktemp)
      "$CLUSTER_AGENT" "${h[1]}" "$bench" --listen --port "$port" --mode "$rx" >"$out" &
      pid=$!
      # Wait until the receiver has bound its port (it prints nothing before).
      for _ in $(seq 200); do
        "$CLUSTER_AGENT" "${h[1]}" grep -qi ":$(printf %04X "$port") " /proc/net/udp && break
      done
      "$bench" --dest "$dest" --port "$port" --mode "$tx" --mb 512 | sed "s/^{/{\"run\": $r, \"rx\": \"$rx\", /"
      wait "$pid"
      sed "s/^{/{\"run\": $r, \"tx\": \"$tx\", /" "$out"
      rm -f "$out"
    done
  done
done
' bash "$build/bench/gso_bench" "$reps"
