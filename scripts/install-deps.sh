#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs the Debian packages shardx needs, and only those that are missing.
# Idempotent; prints nothing when everything is already present.
set -euo pipefail

packages=(
    # toolchain
    cmake make gcc pkg-config
    # required libraries
    libhwloc-dev liburcu-dev libck-dev libcmocka-dev
    # optional parts: compiled when present (sx_info says which)
    libfabric-dev libibverbs-dev librdmacm-dev libpmix-dev
    # CRC32C with ISA-L (src/common/crc32c.c), optional too
    libisal-dev
    # launchers for the multi-process tests (mpirun runs the pmix modex test)
    openmpi-bin libopenmpi-dev
    # ip: test_nic joins network namespaces of its own with veth pairs, and
    # the namespace cluster (tests/cluster) is made of them; nft drops a
    # share of a cluster port's frames (cluster.sh loss), this kernel
    # having no netem
    iproute2 nftables
    # make bench: plots (bench/plot.sh) and summaries read the JSON with jq
    gnuplot-nox jq
    # make docs: the API reference; man pages are checked with groff, and
    # shardx-config(7) is generated from sx_info --json by a Python script
    doxygen groff-base python3
)

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "install-deps: missing packages (${missing[*]}) and not root; install them with apt-get" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
