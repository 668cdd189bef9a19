#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs the build in $1 into a scratch prefix under $2, then builds and
# runs a small consumer with pkg-config (shardx.pc, shardx-static.pc) and
# with CMake's find_package(shardx), runs the installed tools, and reads
# the installed man pages. Nothing here sets LD_LIBRARY_PATH: the installed
# programs find the installed library through their own RUNPATH. Fails on
# any error. $3 is the cmake that configured the build (ctest passes
# CMAKE_COMMAND): the consumer is built with that one too, so a build made
# with the oldest CMake the project allows checks its package with it.
set -euo pipefail
build=$1
work=$2
cmake=${3:-cmake}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
# `cmake --install` is CMake 3.15; an older one (the project allows 3.13)
# runs the install script it wraps.
version=$("$cmake" --version)
version=${version%%$'\n'*}
version=${version##* }
older=$(printf '%s\n' "$version" 3.15 | sort -V)
if [ "${older%%$'\n'*}" = 3.15 ]; then
    "$cmake" --install "$build" --prefix "$work/prefix" >/dev/null
else
    "$cmake" -DCMAKE_INSTALL_PREFIX="$work/prefix" -P "$build/cmake_install.cmake" >/dev/null
fi

libdir=$(find "$work/prefix" -name shardx.pc -printf '%h\n' | head -n 1)
[ -n "$libdir" ] || { echo "shardx.pc was not installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
unset LD_LIBRARY_PATH

# pkg-config, shared library
cc -std=c11 -Wall -Werror $(pkg-config --cflags shardx) "$here/consumer.c" \
   $(pkg-config --libs shardx) -Wl,-rpath,"$(pkg-config --variable=libdir shardx)" \
   -o "$work/consumer-pc"
"$work/consumer-pc"

# pkg-config, static library: shardx-static.pc names the archive by path.
cc -std=c11 -Wall -Werror $(pkg-config --cflags shardx-static) "$here/consumer.c" \
   $(pkg-config --libs shardx-static) -o "$work/consumer-static"
"$work/consumer-static"
if grep -q 'libshardx\.so' <<<"$(readelf -d "$work/consumer-static")"; then
    echo "the shardx-static.pc consumer links libshardx.so" >&2
    exit 1
fi

# CMake package, shared library, with every pkg-config module out of sight
# (PKG_CONFIG_LIBDIR pointing nowhere): the shared library's private
# dependencies (hwloc, PMIx, ...) must not be looked for.
PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH= \
    "$cmake" -S "$here" -B "$work/cmake-shared" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
"$cmake" --build "$work/cmake-shared" >/dev/null
"$work/cmake-shared/consumer"
# ... and asked for the static component there, it fails and says why.
if out=$(PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH= "$cmake" -S "$here" -B "$work/cmake-nostatic" \
        -DCMAKE_PREFIX_PATH="$work/prefix" -DSX_CONSUMER_STATIC=ON 2>&1); then
    echo "find_package(shardx COMPONENTS static) passed without hwloc's pkg-config module" >&2
    exit 1
fi
grep -q "not found by pkg-config: hwloc, liburcu-bp" <<<"$(tr -s ' \n' ' ' <<<"$out")" ||
    { echo "$out"; echo "the static component's failure does not name hwloc" >&2; exit 1; }

# CMake package, static library, with the dependencies in sight.
"$cmake" -S "$here" -B "$work/cmake-static" -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DSX_CONSUMER_STATIC=ON >/dev/null
"$cmake" --build "$work/cmake-static" >/dev/null
"$work/cmake-static/consumer"
"$work/cmake-static/consumer_static"

# The installed tools run, from their RUNPATH alone.
"$work/prefix/bin/sx_info" >/dev/null
# (ldd's output is read whole first: grep -q in a pipeline under pipefail
# may stop reading early and fail the pipeline with ldd's SIGPIPE.)
for tool in "$work/prefix/bin/"*; do
    deps=$(ldd "$tool")
    # The tools that link libshardx.so (sx_run and sx_bench link the archive).
    grep -q "libshardx\.so" <<<"$deps" || continue
    grep -q "libshardx.so.* => $work/prefix/" <<<"$deps" ||
        { echo "$deps" >&2; echo "$tool does not find the installed libshardx" >&2; exit 1; }
done
grep -q "libshardx.so.* => $work/prefix/" <<<"$(ldd "$work/prefix/bin/sx_info")" ||
    { echo "sx_info does not link the installed libshardx" >&2; exit 1; }
"$work/prefix/bin/sx_run" --help >/dev/null 2>&1 || true

# The man pages are installed, and the section 7 page lists every parameter.
man=$(find "$work/prefix" -type d -name man -path '*/share/man' | head -n 1)
for page in man1/sx_info.1 man1/sx_run.1 man1/sx_bench.1 man7/shardx-config.7; do
    [ -s "$man/$page" ] || { echo "man page $page was not installed" >&2; exit 1; }
done
params=$("$work/prefix/bin/sx_info" --json | jq '.parameters | length')
listed=$(awk 'prev == ".TP" && /^\.B SX_/ { n++ } { prev = $0 } END { print n }' \
    "$man/man7/shardx-config.7")
[ "$params" = "$listed" ] || { echo "shardx-config.7 lists $listed of $params parameters" >&2; exit 1; }
what="pkg-config (shardx, shardx-static), find_package(shardx) without pkg-config modules, find_package(shardx COMPONENTS static), tools without LD_LIBRARY_PATH, man pages"

# The API's man3 pages, where the build found Doxygen (its cache says so;
# without it the build skips them and says why): every SX_API function of
# the installed header has a page, and `man 3 NAME` shows, for a few of
# them, the first words of the function's own description as the header
# states it, so an empty page or one without the text fails.
doxygen=$(sed -n 's/^SX_DOXYGEN:[A-Z]*=//p' "$build/CMakeCache.txt")
if [ -n "$doxygen" ] && [ "${doxygen%NOTFOUND}" = "$doxygen" ]; then
    header=$(find "$work/prefix" -name shardx.h | head -n 1)
    [ -n "$header" ] || { echo "shardx.h was not installed" >&2; exit 1; }
    # The SX_API function names, found as check-abi.sh finds them.
    declared=$(grep -A3 '^SX_API' "$header" | tr '\n' ' ' | grep -o 'SX_API[^(]*(' |
        sed -E 's/.*[ *]([a-z_0-9]+)\($/\1/' | LC_ALL=C sort -u) || true
    [ -n "$declared" ] || { echo "found no SX_API function in $header" >&2; exit 1; }
    missing=""
    for fn in $declared shardx.h shardx; do
        [ -s "$man/man3/$fn.3" ] || missing="$missing $fn"
    done
    [ -z "$missing" ] || { echo "no installed man3 page for:$missing" >&2; exit 1; }
    # man where it is installed (man-db), else groff itself, which is what
    # man runs; soelim (-s) resolves the link pages' ".so man3/..." from
    # the top of the man tree, as man does.
    render() {
        if command -v man >/dev/null 2>&1; then
            LC_ALL=C MANWIDTH=200 MANPAGER=cat PAGER=cat man -M "$man" 3 "$1" 2>&1
        else
            (cd "$man" && LC_ALL=C groff -s -man -Tascii -P-cbou -rLL=200n "man3/$1.3" 2>&1)
        fi
    }
    for fn in sx_send sx_engine_create sx_progress; do
        # The doc comment just above the declaration, without its comment
        # marks and Doxygen commands, on one line.
        doc=$(awk -v fn="$fn" '
            /\/\*\*/ { doc = ""; indoc = 1 }
            indoc {
                line = $0
                sub(/.*\/\*\*</, "", line); sub(/.*\/\*\*/, "", line)
                if (line ~ /\*\//) { sub(/\*\/.*/, "", line); indoc = 0 }
                sub(/^[ \t]*\*[ \t]?/, "", line)
                doc = doc " " line
                next
            }
            /^SX_API/ && index($0, " " fn "(") + index($0, "*" fn "(") > 0 { print doc; exit }
            ' "$header")
        doc=$(sed -E 's/[@\\][a-z]+ //g; s/[[:space:]]+/ /g; s/^ //' <<<"$doc")
        # Its first words, up to the first punctuation: what any rendering
        # keeps verbatim (no quote or dash for groff to turn into another).
        words=$(grep -oE '^([A-Za-z]+ ){1,5}[A-Za-z]+' <<<"$doc") ||
            { echo "no description above $fn in $header" >&2; exit 1; }
        page=$(render "$fn") || { echo "$page" >&2; echo "man 3 $fn failed" >&2; exit 1; }
        flat=$(sed 's/.\x08//g' <<<"$page" | tr -s ' \n' ' ')
        case "$flat" in
            *"$words"*) ;;
            *) echo "$page" >&2
               echo "man 3 $fn does not show its description ('$words')" >&2
               exit 1 ;;
        esac
    done
    what="$what, man3 pages of every SX_API function"
else
    what="$what (no man3 pages: the build found no doxygen)"
fi
# The Open MPI BTL, when built: installed under <libdir>/shardx/openmpi and
# loadable from there by Open MPI, finding the installed libshardx through
# its own RPATH (no LD_LIBRARY_PATH).
if [ -f "$build/openmpi/mca_btl_shardx.so" ]; then
    btl=$(find "$work/prefix" -path '*/shardx/openmpi/mca_btl_shardx.so' | head -n 1)
    [ -n "$btl" ] || { echo "mca_btl_shardx.so was not installed under lib*/shardx/openmpi" >&2; exit 1; }
    sysdir=$(sed -n 's/^SX_OMPI_COMPONENT_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
    params=$(env -u LD_LIBRARY_PATH OMPI_MCA_mca_base_component_path="$sysdir:$(dirname "$btl")" \
        ompi_info --param btl shardx --level 9)
    grep -q 'btl_shardx_eager_limit' <<<"$params" ||
        { echo "ompi_info does not load the installed $btl" >&2; exit 1; }
    what="$what, and the Open MPI BTL"
fi
echo "install check passed: $what"
