#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a test only where a transport can run: `if-transport.sh SX_INFO NAME
# CMD ARGS...` asks sx_info whether transport NAME can run here (with
# SX_TRANSPORTS=NAME, so a transport that only runs when named is asked
# properly) and exits 77, which ctest reports as "skipped"
# (SKIP_RETURN_CODE), with the transport's own reason when it cannot;
# otherwise it runs CMD with SX_TRANSPORTS=NAME in the environment, for it
# and every process it starts. Anything else going wrong (sx_info crashing,
# printing no JSON, or failing for another reason than the transport being
# unable to run) fails: a regression must not pass for a missing device.
set -euo pipefail
sx_info=$1 name=$2
shift 2
export SX_TRANSPORTS=$name
err=$(mktemp) out=$(mktemp)
trap 'rm -f "$err" "$out"' EXIT
rc=0
"$sx_info" --json >"$out" 2>"$err" || rc=$?
if ((rc > 128)); then
    echo "if-transport: sx_info died (status $rc):" >&2
    cat "$err" >&2
    exit 1
fi
# "": it can run; "-": the engine was not created; else why it cannot run.
if ! why=$(python3 -c '
import json, sys
name = sys.argv[1]
for t in json.load(sys.stdin).get("transports", []):
    if t["name"] == name:
        print("" if t.get("available") else (t.get("detail") or "not available"))
        break
else:
    print("-")
' "$name" <"$out"); then
    echo "if-transport: sx_info printed no JSON (status $rc):" >&2
    cat "$err" >&2
    exit 1
fi
if [[ $why == - ]]; then
    # With SX_TRANSPORTS naming a transport that cannot run, the engine is
    # not created and sx_info lists no transport; the selection's error
    # line gives the transport's reason. Any other failure is a failure.
    why=$(grep -m1 "no network transport can run.*$name: " "$err" || true)
    if [[ -z $why ]]; then
        echo "if-transport: sx_info could not create an engine, and not for want of $name:" >&2
        cat "$err" >&2
        exit 1
    fi
fi
if [[ -n $why ]]; then
    echo "skipped: the $name transport cannot run here: $why"
    exit 77
fi
exec "$@"
