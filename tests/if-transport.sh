#!/usr/bin/env bash
# Runs a test only where a transport can run: `if-transport.sh SX_INFO NAME
# CMD ARGS...` asks sx_info whether transport NAME is available here (with
# SX_TRANSPORTS=NAME, so a transport that only runs when named is asked
# properly) and exits 77, which ctest reports as "skipped" (SKIP_RETURN_CODE),
# with the transport's own reason when it is not; otherwise it runs CMD with
# SX_TRANSPORTS=NAME in the environment, for it and every process it starts.
set -euo pipefail
sx_info=$1 name=$2
shift 2
export SX_TRANSPORTS=$name
err=$(mktemp) out=$(mktemp)
trap 'rm -f "$err" "$out"' EXIT
# With SX_TRANSPORTS naming a transport that cannot run, the engine is not
# created and sx_info lists no transport: its error line says why.
"$sx_info" --json >"$out" 2>"$err" || true
why=$(python3 -c '
import json, sys
name = sys.argv[1]
for t in json.load(sys.stdin).get("transports", []):
    if t["name"] == name:
        print("" if t.get("available") else (t.get("detail") or "not available"))
        break
else:
    print("-")
' "$name" <"$out") || why="sx_info printed no JSON"
if [[ $why == - ]]; then
    why=$(grep -m1 'error' "$err" || echo "sx_info created no engine")
fi
if [[ -n $why ]]; then
    echo "skipped: the $name transport cannot run here: $why"
    exit 77
fi
exec "$@"
