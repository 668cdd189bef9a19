#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a command in a network namespace of its own whose one interface
# (one end of a veth pair, both up; the dummy module may not be there)
# has as many addresses as udp's card lists (8, all IPv6:
# the longest address, 151 bytes a shard), so a card of SX_SHARDS'
# largest count is as large as it can be (issue 25, item 4).
#
#   with_addresses.sh COMMAND...
#
# Skips (77) where namespaces cannot be made (not root, no unshare).
set -eu
if [[ ${1:-} != --inside ]]; then
    if [[ $(id -u) -ne 0 ]] || ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then
        echo "with_addresses: needs root, unshare and ip: not run" >&2
        exit 77
    fi
    exec unshare -n -- "$0" --inside "$@"
fi
shift
ip link set lo up
ip link add sxaddr0 type veth peer name sxaddr1
ip link set sxaddr1 up
ip link set sxaddr0 up
for i in 1 2 3 4 5 6 7 8; do
    ip -6 addr add "fd00:5:0:$i::1/64" dev sxaddr0 nodad
done
ip -brief addr show sxaddr0 >&2
exec "$@"
