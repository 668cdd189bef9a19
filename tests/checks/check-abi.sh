#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The ABI check (CI runs it as the abi_symbols test):
#  1. the dynamic symbols libshardx.so exports, with their versions, are
#     exactly the committed list abi/shardx.symbols;
#  2. the version script abi/shardx.map names exactly the SX_API functions
#     of include/shardx.h, so a new public function cannot be forgotten in
#     the script (it would silently not be exported).
# A change to the exported list must be announced: regenerate the list with
#   tests/checks/check-abi.sh --update build/libshardx.so
# and commit it with the change, saying so in the commit message.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
list=$root/abi/shardx.symbols
map=$root/abi/shardx.map
header=$root/include/shardx.h

update=0
if [[ ${1:-} == --update ]]; then
    update=1
    shift
fi
lib=${1:?usage: check-abi.sh [--update] path/to/libshardx.so}

# "sx_send@@SHARDX_0" per line; the version node itself (an absolute
# symbol named SHARDX_0) is part of the ABI too.
exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | LC_ALL=C sort)
if ((update)); then
    printf '%s\n' "$exported" >"$list"
    echo "check-abi: wrote $list"
    exit 0
fi

status=0
if ! diff_out=$(diff -u "$list" <(printf '%s\n' "$exported")); then
    echo "check-abi: libshardx.so's exported symbols differ from abi/shardx.symbols:" >&2
    echo "$diff_out" >&2
    echo "check-abi: if the change is intended, run tests/checks/check-abi.sh --update $lib" >&2
    echo "           and commit abi/shardx.symbols with it, announcing the change" >&2
    status=1
fi

declared=$(grep -A3 '^SX_API' "$header" | tr '\n' ' ' | grep -o 'SX_API[^(]*(' |
    sed -E 's/.*[ *]([a-z_0-9]+)\($/\1/' | LC_ALL=C sort -u)
scripted=$(sed -n '/global:/,/local:/p' "$map" | grep -o '^ *sx_[a-z_0-9]*;' | tr -d ' ;' |
    LC_ALL=C sort -u)
if [[ "$declared" != "$scripted" ]]; then
    echo "check-abi: abi/shardx.map and the SX_API functions of include/shardx.h differ:" >&2
    diff -u <(echo "$scripted") <(echo "$declared") | sed 's/^/  /' >&2 || true
    status=1
fi
[[ -n "$declared" ]] || { echo "check-abi: found no SX_API function in $header" >&2; status=1; }
((status == 0)) && echo "check-abi: $(echo "$exported" | wc -l) exported symbols match"
exit $status
