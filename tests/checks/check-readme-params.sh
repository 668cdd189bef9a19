#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Every configuration parameter that sx_info reports must be documented in
# the README's configuration table, and the README must name no parameter
# that does not exist.
set -euo pipefail
sx_info=$1
readme=$2
names=$("$sx_info" --json | python3 -c 'import json,sys; print("\n".join("SX_"+p["name"] for p in json.load(sys.stdin)["parameters"]))')
status=0
for n in $names; do
    grep -q "| \`$n\` |" "$readme" || { echo "README lacks $n" >&2; status=1; }
done
for n in $(grep -o '^| `SX_[A-Z0-9_]*` |' "$readme" | grep -o 'SX_[A-Z0-9_]*'); do
    grep -qx "$n" <<<"$names" || { echo "README documents unknown $n" >&2; status=1; }
done
exit $status
