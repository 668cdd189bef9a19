#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs the Debian packages shardx needs, and only those that are missing.
# Idempotent; prints nothing when everything is already present. Where
# apt-get is not (RHEL, SLES, Spack, modules) it installs nothing: it
# checks that the required tools and libraries are there and names what
# is missing (README, "Building without Debian").
set -euo pipefail

packages=(
    # toolchain
    cmake make gcc pkg-config
    # required libraries
    libhwloc-dev liburcu-dev libck-dev libcmocka-dev
    # optional parts: compiled when present (sx_info says which)
    libfabric-dev libibverbs-dev librdmacm-dev libpmix-dev
    # CRC32C with ISA-L (src/common/crc32c.c), optional too; libsodium for
    # SX_AUTH's keyed MAC (src/shard/auth.c), without which SX_AUTH is refused
    libisal-dev libsodium-dev
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

# SX_NO_INSTALL=1: never install anything (modules, Spack, a container
# whose image is fixed); CMake then says what it cannot find.
if [[ -n ${SX_NO_INSTALL:-} ]]; then
    exit 0
fi

# Without Debian's tools (RHEL, SLES, a Spack or modules cluster): check
# what the build needs by the tools and pkg-config modules themselves, say
# what is missing, and install nothing. The required parts fail the
# target; the optional ones only leave their part out (sx_info says which).
if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    need_tools=(cmake make cc pkg-config)
    need_pc=(hwloc liburcu-bp liburcu-cds ck cmocka)
    opt_pc=(libfabric libibverbs librdmacm pmix libisal libsodium ompi)
    lacking=()
    for t in "${need_tools[@]}"; do
        command -v "$t" >/dev/null 2>&1 || lacking+=("$t")
    done
    if command -v pkg-config >/dev/null 2>&1; then
        for m in "${need_pc[@]}"; do
            pkg-config --exists "$m" || lacking+=("$m (pkg-config)")
        done
        absent=()
        for m in "${opt_pc[@]}"; do
            pkg-config --exists "$m" || absent+=("$m")
        done
        if [[ ${#absent[@]} -gt 0 ]]; then
            echo "install-deps: optional, not found by pkg-config (their parts are left out): ${absent[*]}" >&2
        fi
    fi
    if [[ ${#lacking[@]} -gt 0 ]]; then
        echo "install-deps: no apt-get here, and the build needs: ${lacking[*]}" >&2
        echo "install-deps: install them with your package manager (RHEL: hwloc-devel userspace-rcu-devel ck-devel libcmocka-devel; SLES: hwloc-devel liburcu-devel libcmocka-devel), or load their modules / spack load them so pkg-config finds them; SX_NO_INSTALL=1 skips this check" >&2
        exit 1
    fi
    exit 0
fi

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
