#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a command that must fail, and say why:
#
#   expect_failure.sh REGEX COMMAND...
#
# passes when COMMAND exits non-zero and its output (standard output and
# error together, shown) matches the extended REGEX.
set -u
re=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if ((rc == 0)); then
    echo "expect_failure: FAILED: the command succeeded, expected a failure" >&2
    exit 1
fi
if ! grep -Eq -- "$re" <<<"$out"; then
    echo "expect_failure: FAILED: the output does not say '$re'" >&2
    exit 1
fi
echo "expect_failure: failed as expected (status $rc): $re"
