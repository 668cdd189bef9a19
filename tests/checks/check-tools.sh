#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The tools' command-line conventions (issue 24): --version and --help on
# standard output with status 0, an unknown option named in the error with
# status 2, sx_info's sections and each parameter's source, sx_run -np.
#   check-tools.sh SX_INFO SX_RUN SX_BENCH
set -u
info=$1 run=$2 bench=$3
fail() { echo "check-tools: FAILED: $*" >&2; exit 1; }

for t in "$info" "$run" "$bench"; do
    name=$(basename "$t")
    "$t" --version | grep -q "^$name (shardx) [0-9]" || fail "$name --version"
    "$t" --help >/dev/null 2>&1 || fail "$name --help: status $?"
    [ -n "$("$t" --help 2>/dev/null)" ] || fail "$name --help: nothing on standard output"
    err=$("$t" --no-such-option 2>&1 >/dev/null)
    status=$?
    [ "$status" -eq 2 ] || fail "$name --no-such-option: status $status, expected 2"
    grep -q -- "--no-such-option" <<<"$err" || fail "$name: the unknown option is not named"
done

# sx_info: a section alone, and where a value comes from.
out=$(SX_WINDOW=128 "$info" --config) || fail "sx_info --config"
grep -q "SX_WINDOW .*'128' (environment); default '4096'" <<<"$out" ||
    fail "sx_info --config: SX_WINDOW's value and source"
grep -q "SX_SHARDS .*'0' (default)" <<<"$out" || fail "sx_info --config: a default's source"
grep -q "^Transports" <<<"$out" && fail "sx_info --config printed the transports too"
"$info" -t | grep -q "^Transports" || fail "sx_info -t"
"$info" -T | grep -q "^Topology" || fail "sx_info -T"
"$info" -b | grep -q "rdmacm=" || fail "sx_info -b"
# The rdmacm connection method is reported as built when it is.
if "$info" -b | grep -q "librdmacm" && "$info" -b | grep -q "verbs=yes"; then
    "$info" -b | grep -q "rdmacm=yes" || fail "sx_info: rdmacm built in but reported no"
fi

# sx_run: -np as mpirun spells it.
"$run" -np 2 --timeout 60 true || fail "sx_run -np 2"
echo "check-tools: ok"
