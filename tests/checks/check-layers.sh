#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The layer rule of docs/design.md section 2, checked on every include:
#
#   engine > cpc > bootstrap > shard > transports > hotel > locks > common
#
# A file under src/ may include headers of its own layer and of the layers
# below it, never above. A private header (name ending in _int.h) may be
# included only from its own directory. examples/ and integrations/ use
# the public API (include/shardx.h) only; tools/, bench/, fuzz/ and tests/
# stand on top and may include any layer's public header. fuzz/ alone may
# also include private ones: a harness hands bytes to the very parser that
# reads them off a socket (the OOB frame reader, the rendezvous server's
# handlers), which no public header declares.
#
# It also keeps files small (DESIGN.md section 8): none in src/shard/ over
# 800 lines, none in src/ over 1,200.
#
# usage: check-layers.sh SOURCE_DIR
set -u
root=${1:?usage: check-layers.sh SOURCE_DIR}
cd "$root" || exit 2

layers=(common locks hotel transports shard bootstrap cpc engine)
order="engine > cpc > bootstrap > shard > transports > hotel > locks > common"
declare -A rank
for i in "${!layers[@]}"; do
    rank[${layers[$i]}]=$i
done

fail=0
complain() {
    echo "check-layers: $*" >&2
    fail=1
}

# Every directory under src/ must be a known layer, so that a new one
# cannot slip past the rule.
for d in src/*/; do
    d=${d%/}
    d=${d#src/}
    [[ -n ${rank[$d]+x} ]] || complain "src/$d is not in the layer table ($order); add it here and to docs/design.md"
done

# includes FILE: prints the quoted includes of FILE, one per line.
includes() {
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"
}

while IFS= read -r f; do
    dir=${f#src/}
    dir=${dir%%/*}
    mine=${rank[$dir]:-}
    [[ -n $mine ]] || continue
    while IFS= read -r inc; do
        case $inc in
        */*) ;;
        *) continue ;; # build_config.h, or a header beside the file
        esac
        idir=${inc%%/*}
        theirs=${rank[$idir]:-}
        if [[ -z $theirs ]]; then
            complain "$f includes \"$inc\": $idir is not a layer of src/"
            continue
        fi
        if ((theirs > mine)); then
            complain "$f includes \"$inc\": $dir may not include $idir, a layer above it ($order)"
        fi
        if [[ $inc == *_int.h && $idir != "$dir" ]]; then
            complain "$f includes \"$inc\", which is private to src/$idir/"
        fi
    done < <(includes "$f")
done < <(find src -name '*.[ch]' | sort)

# Users of the library: private headers never; examples and integrations
# the public API only.
while IFS= read -r f; do
    while IFS= read -r inc; do
        idir=${inc%%/*}
        [[ $inc == */* && -n ${rank[$idir]+x} ]] || continue
        case $f in
        examples/* | integrations/*)
            complain "$f includes \"$inc\": examples and integrations use the public API (shardx.h) only"
            ;;
        esac
        if [[ $inc == *_int.h && $f != fuzz/* ]]; then
            complain "$f includes \"$inc\", which is private to src/$idir/"
        fi
    done < <(includes "$f")
done < <(find tools bench fuzz tests examples integrations -name '*.[ch]' 2>/dev/null | sort)

# Small files.
while IFS= read -r f; do
    n=$(wc -l <"$f")
    cap=1200
    [[ $f == src/shard/* ]] && cap=800
    ((n <= cap)) || complain "$f has $n lines, more than the $cap allowed there: split it by concern"
done < <(find src -name '*.[ch]' | sort)

if ((fail)); then
    exit 1
fi
echo "check-layers: every include points down ($order), no file over its size cap"
