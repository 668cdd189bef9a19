#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# What an Open MPI user expects of a BTL component (issue 24, item 5):
#  1. ompi_info shows shardx's version as the component's, and its
#     parameters typed, with their real defaults, the common ones at
#     level 1 (plain `ompi_info --param btl shardx`) and the tuning ones
#     by level 4;
#  2. a job that does not name shardx in its btl selection is not changed
#     by the component being on the path (no selection, an exclusion
#     list), unless btl_shardx_auto_select is set;
#  3. values take Open MPI's syntax (1m) and one that shardx refuses is
#     reported under the MCA parameter's name and where it was set;
#  4. installed, the component loads through a symbolic link in
#     ~/.openmpi/components with the default component path, without
#     LD_LIBRARY_PATH: the install is bind-mounted over its configured
#     prefix in a private mount namespace (needs root; skipped otherwise).
#
# Usage: conventions.sh MPIRUN OMPI_INFO OURDIR BUILD_DIR VERSION SUITE
# (Open MPI's own component folder is named as SYS_DEFAULT, below.)
set -uo pipefail
mpirun=$1 ompi_info=$2 ourdir=$3 build=$4 version=$5 suite=$6

export OMPI_MCA_mca_base_component_path="SYS_DEFAULT:$ourdir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "conventions: FAILED: $*" >&2
    failures=$((failures + 1))
}

# has TEXT PATTERN: grep -E on text already read whole (never pipe into
# grep -q under pipefail: an early exit fails the writer with SIGPIPE).
has() { grep -Eq -- "$2" <<<"$1"; }

# The line of ompi_info's output for parameter $2.
param_line() { grep -E -- "parameter \"$2\"" <<<"$1" || true; }

expect_param() { # output name value type
    local line
    line=$(param_line "$1" "$2")
    if [[ -z $line ]]; then
        fail "ompi_info does not show $2"
    elif ! has "$line" "current value: \"$3\", data source: default.*type: $4"; then
        fail "$2: expected default \"$3\" of type $4, got: $line"
    fi
}

# 1. ompi_info.
# SYS_DEFAULT keeps Open MPI's own folder in a path that replaces it.
all=$("$ompi_info" 2>&1)
has "$all" "MCA btl: shardx \(MCA v[0-9.]+, API v[0-9.]+, Component v$version\)" ||
    fail "ompi_info does not show 'MCA btl: shardx (... Component v$version)'"
has "$all" "MCA btl: tcp" || fail "SYS_DEFAULT in the component path lost Open MPI's own components"

l1=$("$ompi_info" --param btl shardx 2>&1)
expect_param "$l1" btl_shardx_transports "" string
expect_param "$l1" btl_shardx_bind_addr "" string
expect_param "$l1" btl_shardx_peer_timeout_ms 30000 unsigned_long_long
expect_param "$l1" btl_shardx_connect_timeout_ms 10000 unsigned_long_long
expect_param "$l1" btl_shardx_yield auto int
has "$l1" 'Valid values: 0:"auto", 1:"always", 2:"never"' || fail "btl_shardx_yield lists no values"
[[ -z $(param_line "$l1" btl_shardx_window) ]] || fail "btl_shardx_window is at level 1"

l4=$("$ompi_info" --param btl shardx --level 4 2>&1)
expect_param "$l4" btl_shardx_window 4096 unsigned_long_long
expect_param "$l4" btl_shardx_max_inflight 4194304 size_t
# The BTL's own default, not shardx's 0 (btl_shardx_params.c says why).
expect_param "$l4" btl_shardx_sendi_hold_us 50 unsigned_long_long
expect_param "$l4" btl_shardx_auto_select false bool
[[ -z $(param_line "$l4" btl_shardx_fault) ]] || fail "btl_shardx_fault is below level 5"

l9=$("$ompi_info" --param btl shardx --level 9 2>&1)
expect_param "$l9" btl_shardx_udp_gso true bool
expect_param "$l9" btl_shardx_fault "" string
[[ -z $(param_line "$l9" btl_shardx_modex) ]] || fail "btl_shardx_modex is shown (the BTL sets it)"

# run NAME ARGS...: an MPI job of two ranks, its output in $tmp/NAME.
run() {
    local name=$1
    shift
    "$mpirun" -np 2 --oversubscribe --mca pml ob1 "$@" >"$tmp/$name" 2>&1
}
ops_lines() { grep -c 'btl shardx: operations:' "$tmp/$1" || true; }

# 2. Not named: not used. ob1 takes vader and self (and tcp) as if shardx
# were not installed; the component says why at verbosity 10.
for sel in "" "^openib"; do
    args=()
    [[ -n $sel ]] && args=(--mca btl "$sel")
    if ! run unnamed "${args[@]}" --mca btl_shardx_verbose 10 "$suite" coll; then
        cat "$tmp/unnamed"
        fail "a job with btl selection '$sel' failed"
    elif [[ $(ops_lines unnamed) -ne 0 ]]; then
        fail "btl selection '$sel' used shardx"
    elif ! grep -q 'not named in the btl selection' "$tmp/unnamed"; then
        fail "btl selection '$sel': the component did not say why it stayed out"
    fi
done
# Asked for through btl_shardx_auto_select with an exclusion list that
# leaves shardx and self only: shardx carries the job.
if ! run auto --mca btl ^vader,tcp,openib,ofi --mca btl_shardx_auto_select 1 \
    --mca btl_shardx_verbose 1 "$suite" coll; then
    cat "$tmp/auto"
    fail "btl_shardx_auto_select 1: the job failed"
elif [[ $(ops_lines auto) -ne 2 ]]; then
    fail "btl_shardx_auto_select 1: shardx did not carry the job"
fi

# 3. Open MPI's size syntax, and errors under the MCA name.
if ! run sized --mca btl shardx,self --mca btl_shardx_verbose 1 \
    --mca btl_shardx_max_inflight 1m "$suite" coll; then
    cat "$tmp/sized"
    fail "btl_shardx_max_inflight 1m was not accepted"
fi
if run badsize --mca btl shardx,self --mca btl_shardx_max_inflight 1k "$suite" coll; then
    fail "btl_shardx_max_inflight 1k (below shardx's range) did not fail the job"
elif ! grep -Eq "btl shardx: invalid value btl_shardx_max_inflight=1024 \(set as OMPI_MCA_btl_shardx_max_inflight in the environment, as mpirun --mca does\): expected size 65536\.\.1073741824" "$tmp/badsize"; then
    cat "$tmp/badsize"
    fail "btl_shardx_max_inflight 1k: the error does not name the MCA parameter"
fi
# A value that passes the type check but not the engine (an address that
# names no interface): the engine's message, then which MCA parameter it was.
if run badbind --mca btl shardx,self --mca btl_shardx_bind_addr nonsuch0 "$suite" coll; then
    fail "btl_shardx_bind_addr nonsuch0 did not fail the job"
elif ! grep -Eq "SX_BIND_ADDR='nonsuch0' came from btl_shardx_bind_addr \(set as OMPI_MCA_btl_shardx_bind_addr in the environment" "$tmp/badbind"; then
    cat "$tmp/badbind"
    fail "btl_shardx_bind_addr: the engine's refusal is not traced to the MCA parameter"
fi

# 4. Installed, through ~/.openmpi/components.
if [[ $(id -u) -ne 0 ]] || ! command -v unshare >/dev/null; then
    echo "conventions: not root (or no unshare): the installed symbolic link case is skipped"
else
    prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
    libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
    [[ $libdir == /* ]] || libdir=$prefix/$libdir
    if [[ $prefix == / || $prefix == /usr ]]; then
        echo "conventions: the build installs to $prefix, which cannot be bind-mounted over" \
            "without hiding mpirun: the installed symbolic link case is skipped"
    elif ! DESTDIR=$tmp/dest cmake -P "$build/cmake_install.cmake" >"$tmp/install" 2>&1; then
        cat "$tmp/install"
        fail "the install script (cmake -P cmake_install.cmake) failed"
    else
        mkdir -p "$tmp/home/.openmpi/components" "$tmp/dest$prefix"
        ln -s "$libdir/shardx/openmpi/mca_btl_shardx.so" "$tmp/home/.openmpi/components/"
        # The mount namespace shows the install at its configured prefix;
        # Open MPI's default component path includes ~/.openmpi/components.
        if ! HOME=$tmp/home unshare --mount --propagation private sh -c '
                mount --bind "$1" "$2" && shift 2 && unset OMPI_MCA_mca_base_component_path LD_LIBRARY_PATH &&
                exec "$@"' sh "$tmp/dest$prefix" "$prefix" \
                "$mpirun" -np 2 --oversubscribe --mca pml ob1 --mca btl shardx,self \
                --mca btl_shardx_verbose 1 "$suite" coll >"$tmp/linked" 2>&1; then
            cat "$tmp/linked"
            fail "the installed component, linked from ~/.openmpi/components, did not run the job"
        elif [[ $(ops_lines linked) -ne 2 ]]; then
            cat "$tmp/linked"
            fail "the linked component did not carry the job"
        fi
    fi
fi

if [[ $failures -ne 0 ]]; then
    echo "conventions: $failures check(s) failed" >&2
    exit 1
fi
echo "conventions: all passed"
