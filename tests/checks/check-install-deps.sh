#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# scripts/install-deps.sh where apt-get is not (RHEL, SLES, Spack): with
# every required tool and library present it installs nothing and
# succeeds; with one missing it fails and names it. The machine is
# imitated by a PATH that holds only the tools the script may use.
set -u
src=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/bin"
for t in bash cmake make cc pkg-config env dirname; do
    p=$(command -v "$t") || { echo "check-install-deps: $t not found here" >&2; exit 1; }
    ln -s "$p" "$dir/bin/$t"
done
if ! out=$(PATH=$dir/bin bash "$src/scripts/install-deps.sh" 2>&1); then
    echo "$out"
    echo "check-install-deps: FAILED: everything is present, yet it failed" >&2
    exit 1
fi
rm "$dir/bin/cmake"
if out=$(PATH=$dir/bin bash "$src/scripts/install-deps.sh" 2>&1); then
    echo "check-install-deps: FAILED: cmake is missing, yet it succeeded" >&2
    exit 1
fi
echo "$out"
grep -q "needs: cmake" <<<"$out" || { echo "check-install-deps: FAILED: cmake not named" >&2; exit 1; }
if ! PATH=$dir/bin SX_NO_INSTALL=1 bash "$src/scripts/install-deps.sh"; then
    echo "check-install-deps: FAILED: SX_NO_INSTALL=1 did not skip the check" >&2
    exit 1
fi
echo "check-install-deps: ok"
