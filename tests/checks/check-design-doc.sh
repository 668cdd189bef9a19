#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# docs/design.md is the contributors' map of the code; this keeps it in
# step: every repository path it names must exist, and every directory
# under src/ must be named in it.
set -euo pipefail
root=$1
doc=$root/docs/design.md
status=0
for path in $(grep -o '`[a-z][a-zA-Z0-9_./-]*`' "$doc" | tr -d '`' |
              grep -E '^(src|include|tools|bench|examples|tests|abi|docs|fuzz|scripts)/' | sort -u); do
    [ -e "$root/$path" ] || { echo "docs/design.md names $path, which does not exist" >&2; status=1; }
done
for dir in "$root"/src/*/; do
    name=src/$(basename "$dir")/
    grep -q "\`$name\`" "$doc" || { echo "docs/design.md does not describe $name" >&2; status=1; }
done
exit $status
