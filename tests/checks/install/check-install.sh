#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs the build in $1 into a scratch prefix under $2, then builds and
# runs a small consumer twice: once with pkg-config (shardx.pc), once with
# CMake's find_package(shardx). Fails on any error.
set -euo pipefail
build=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null

libdir=$(find "$work/prefix" -name shardx.pc -printf '%h\n' | head -n 1)
[ -n "$libdir" ] || { echo "shardx.pc was not installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$libdir/..${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# pkg-config, shared library
cc -std=c11 -Wall -Werror $(pkg-config --cflags shardx) "$here/consumer.c" \
   $(pkg-config --libs shardx) -Wl,-rpath,"$(pkg-config --variable=libdir shardx)" \
   -o "$work/consumer-pc"
"$work/consumer-pc"

# pkg-config, static library: the archive by path, its dependencies from
# Requires.private / Libs.private.
static_libs=$(pkg-config --static --libs shardx |
              sed "s#-lshardx#$(pkg-config --variable=libdir shardx)/libshardx.a#")
cc -std=c11 -Wall -Werror $(pkg-config --cflags shardx) "$here/consumer.c" $static_libs \
   -o "$work/consumer-static"
"$work/consumer-static" 2>/dev/null ||
cc -std=c11 -Wall -Werror $(pkg-config --cflags shardx) "$here/consumer.c" \
   "$(pkg-config --variable=libdir shardx)/libshardx.a" \
   $(pkg-config --static --libs shardx | sed 's/-lshardx//') -o "$work/consumer-static"
"$work/consumer-static"

# CMake package
cmake -S "$here" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer"
"$work/cmake-build/consumer_static"

# The installed sx_info runs.
"$work/prefix/bin/sx_info" >/dev/null

# The man pages are installed, and the section 7 page lists every parameter.
man=$(find "$work/prefix" -type d -name man -path '*/share/man' | head -n 1)
for page in man1/sx_info.1 man1/sx_run.1 man1/sx_bench.1 man7/shardx-config.7; do
    [ -s "$man/$page" ] || { echo "man page $page was not installed" >&2; exit 1; }
done
params=$("$work/prefix/bin/sx_info" --json | jq '.parameters | length')
listed=$(awk 'prev == ".TP" && /^\.B SX_/ { n++ } { prev = $0 } END { print n }' \
    "$man/man7/shardx-config.7")
[ "$params" = "$listed" ] || { echo "shardx-config.7 lists $listed of $params parameters" >&2; exit 1; }
# The Open MPI BTL, when built: installed under <libdir>/shardx/openmpi and
# loadable from there by Open MPI, finding the installed libshardx through
# its own RPATH (no LD_LIBRARY_PATH).
what="pkg-config (shared, static), find_package(shardx), man pages"
if [ -f "$build/openmpi/mca_btl_shardx.so" ]; then
    btl=$(find "$work/prefix" -path '*/shardx/openmpi/mca_btl_shardx.so' | head -n 1)
    [ -n "$btl" ] || { echo "mca_btl_shardx.so was not installed under lib*/shardx/openmpi" >&2; exit 1; }
    sysdir=$(sed -n 's/^SX_OMPI_COMPONENT_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
    env -u LD_LIBRARY_PATH OMPI_MCA_mca_base_component_path="$sysdir:$(dirname "$btl")" \
        ompi_info --param btl shardx --level 9 | grep -q 'btl_shardx_eager_limit' ||
        { echo "ompi_info does not load the installed $btl" >&2; exit 1; }
    what="$what, and the Open MPI BTL"
fi
echo "install check passed: $what"
