#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a command in a cgroup cpuset of its own that holds NCPUS CPUs (the
# first ones of the cpuset this script runs in), as Slurm's task/cgroup or
# a container started with a cpuset leaves a job; then removes the cgroup.
#
#   in_cpuset.sh NCPUS -- COMMAND [ARGS...]
#
# The command's status is the script's (2: bad arguments). Exits 77
# (ctest: skipped), saying why, where no such cgroup can be made: not
# root, or no cpuset controller this process may use. That is cgroup v1's
# cpuset hierarchy (the test VM's), or cgroup v2's cpuset controller only
# where this process sits in the root cgroup, so that it may enable the
# controller for a child; the v2 path has not been tried, and a process in
# a systemd slice or a cgroup namespace is skipped there.
set -u

usage() {
    echo "usage: in_cpuset.sh NCPUS -- COMMAND [ARGS...] (NCPUS a positive count)" >&2
    exit 2
}
[[ $# -ge 3 && $1 =~ ^[1-9][0-9]*$ && $2 == -- && -n $3 ]] || usage
ncpus=$1
shift 2

# shellcheck source=cpuset_lib.sh # expand, mounted, own_cgroup, cgroup_dir
. "$(dirname "${BASH_SOURCE[0]}")/cpuset_lib.sh"

skip() {
    echo "in_cpuset: skipped: $*" >&2
    exit 77
}

[[ $(id -u) -eq 0 ]] || skip "making a cgroup needs root"

v1=$(mounted cgroup cpuset)
v2=$(mounted cgroup2)
enabled_v2=""
if [[ -n $v1 ]]; then
    cur=$(own_cgroup)
    parent=$(cgroup_dir "$v1" "$cur") ||
        skip "this process's cpuset cgroup ($cur) is outside the mounted hierarchy ($v1)"
# cgroup v2 (not tried on the test VM, whose cpuset controller is on v1):
# the root cgroup may enable the controller for a child it makes.
elif [[ -n $v2 ]] && [[ $(own_cgroup v2) == / ]]; then
    parent=${v2#* }
    grep -qw cpuset "$parent/cgroup.controllers" 2>/dev/null ||
        skip "cgroup v2 at $parent has no cpuset controller"
    if ! grep -qw cpuset "$parent/cgroup.subtree_control"; then
        echo +cpuset >"$parent/cgroup.subtree_control" ||
            skip "cannot enable the cpuset controller in $parent"
        enabled_v2=$parent # disabled again on the way out
    fi
else
    skip "no cpuset cgroup controller this process may use (cgroup v1's cpuset" \
        "hierarchy, or cgroup v2 from the root cgroup)"
fi
[[ -d $parent ]] || skip "the cpuset cgroup $parent is not a directory here"

# Cgroups an earlier run left (killed before it could remove its own):
# removed where their script is gone and they are empty.
for old in "$parent"/sx-cpuset-*; do
    [[ -d $old ]] || continue
    kill -0 "${old##*-}" 2>/dev/null || rmdir "$old" 2>/dev/null || true
done

if [[ -r $parent/cpuset.cpus.effective ]]; then
    have=$(cat "$parent/cpuset.cpus.effective")
    mems=$(cat "$parent/cpuset.mems.effective")
else
    have=$(cat "$parent/cpuset.cpus")
    mems=$(cat "$parent/cpuset.mems")
fi
[[ $(expand "$have" | wc -l) -ge $ncpus ]] ||
    skip "the cpuset here has fewer than $ncpus CPUs ($have)"
cpus=$(expand "$have" | head -n "$ncpus" | paste -sd, -)

dir="$parent/sx-cpuset-$$"
flag=$(mktemp)
# Whatever ends this script: the cgroup's processes are killed, then the
# cgroup removed (the kernel refuses while a task is in it).
# shellcheck disable=SC2317 # run by the trap
cleanup() {
    local pid tries
    rm -f "$flag"
    if [[ -d $dir ]]; then
        for ((tries = 0; tries < 100; tries++)); do
            pid=$(cat "$dir/cgroup.procs" 2>/dev/null)
            [[ -z $pid ]] && break
            # shellcheck disable=SC2086 # one PID per line
            kill -KILL $pid 2>/dev/null
            sleep 0.1 # until the kernel has reaped them
        done
        rmdir "$dir" 2>/dev/null || echo "in_cpuset: warning: cannot remove $dir" >&2
    fi
    if [[ -n $enabled_v2 ]]; then
        echo -cpuset >"$enabled_v2/cgroup.subtree_control" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

mkdir "$dir" || skip "cannot make $dir"
if ! echo "$cpus" >"$dir/cpuset.cpus" || ! echo "${mems:-0}" >"$dir/cpuset.mems"; then
    skip "cannot give $dir its CPUs ($cpus) and memory nodes ($mems)"
fi
echo "in_cpuset: running in $dir, CPUs $cpus of $have"
# A child moves itself in and becomes the command; this shell stays out,
# so it can remove the cgroup once the command and its children are gone.
# It waits in the background so that a signal to this shell runs its
# trap at once, not only when the command has ended.
(
    if ! echo "$BASHPID" >"$dir/cgroup.procs"; then
        echo failed >"$flag"
        exit 1
    fi
    exec "$@"
) &
wait $!
rc=$?
if [[ -s $flag ]]; then
    echo "in_cpuset: FAILED: cannot move into $dir" >&2
    exit 1
fi
exit $rc
