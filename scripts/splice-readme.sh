#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Replaces the text between "<!-- bench-results:begin -->" and
# "<!-- bench-results:end -->" in FILE with the contents of NEW.
# Usage: scripts/splice-readme.sh FILE NEW
set -euo pipefail
file=$1
new=$2
grep -q '^<!-- bench-results:begin -->$' "$file" && grep -q '^<!-- bench-results:end -->$' "$file" || {
    echo "splice-readme: $file lacks the bench-results markers" >&2
    exit 1
}
tmp=$(mktemp)
awk -v new="$new" '
    /^<!-- bench-results:begin -->$/ { print; while ((getline line < new) > 0) print line; skip = 1; next }
    /^<!-- bench-results:end -->$/ { skip = 0 }
    !skip { print }
' "$file" >"$tmp"
mv "$tmp" "$file"
echo "splice-readme: $file updated from $new"
