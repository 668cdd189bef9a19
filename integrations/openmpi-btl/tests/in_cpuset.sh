#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs a command in a cgroup cpuset of its own that holds NCPUS CPUs (the
# first ones of the cpuset this script runs in), as Slurm's task/cgroup or
# a container started with a cpuset leaves a job; then removes the cgroup.
#
#   in_cpuset.sh NCPUS -- COMMAND [ARGS...]
#
# The command's status is the script's. Exits 77 (ctest: skipped), saying
# why, where no such cgroup can be made: not root, or no cpuset controller
# (cgroup v1's cpuset hierarchy, or cgroup v2's cpuset controller where
# this process sits in the root cgroup, so that it may enable it there).
set -u
ncpus=$1
shift
[[ ${1:-} == -- ]] && shift

skip() {
    echo "in_cpuset: skipped: $*" >&2
    exit 77
}

# "0-3,8,10-11" -> one CPU number per line.
expand() {
    local part
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        if [[ $part == *-* ]]; then
            seq "${part%-*}" "${part#*-}"
        elif [[ -n $part ]]; then
            echo "$part"
        fi
    done
}

[[ $(id -u) -eq 0 ]] || skip "making a cgroup needs root"

dir="" procs_file=""
# mountinfo: ID PARENT DEV ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE
# SOURCE SUPEROPTIONS; the optional fields vary in number.
mounted() { # FSTYPE [SUPEROPTION]: the first such mount point
    awk -v fs="$1" -v opt="${2:-}" '{
        for (i = 7; i <= NF && $i != "-"; i++) {}
        if ($(i + 1) == fs && (opt == "" || $NF ~ ("(^|,)" opt "(,|$)"))) { print $5; exit }
    }' /proc/self/mountinfo
}
v1=$(mounted cgroup cpuset)
v2=$(mounted cgroup2)
if [[ -n $v1 ]]; then
    cur=$(awk -F: '$2 ~ /(^|,)cpuset(,|$)/ {print $3; exit}' /proc/self/cgroup)
    parent="$v1${cur%/}"
    dir="$parent/sx-cpuset-$$"
    procs_file=tasks
    cpus_file=cpuset.cpus mems_file=cpuset.mems
# cgroup v2 (not tried on the test VM, whose cpuset controller is on v1):
# the root cgroup may enable the controller for a child it makes.
elif [[ -n $v2 ]] && grep -qw cpuset "$v2/cgroup.controllers" 2>/dev/null &&
    [[ $(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup) == / ]]; then
    parent=$v2
    grep -qw cpuset "$parent/cgroup.subtree_control" ||
        echo +cpuset >"$parent/cgroup.subtree_control" ||
        skip "cannot enable the cpuset controller in $parent"
    dir="$parent/sx-cpuset-$$"
    procs_file=cgroup.procs
    cpus_file=cpuset.cpus mems_file=cpuset.mems
else
    skip "no cpuset cgroup controller this process may use"
fi

if [[ -r $parent/cpuset.cpus.effective ]]; then
    have=$(cat "$parent/cpuset.cpus.effective")
    mems=$(cat "$parent/cpuset.mems.effective")
else
    have=$(cat "$parent/cpuset.cpus")
    mems=$(cat "$parent/cpuset.mems")
fi
cpus=$(expand "$have" | head -n "$ncpus" | paste -sd, -)
[[ $(expand "$have" | wc -l) -ge $ncpus ]] ||
    skip "the cpuset here has fewer than $ncpus CPUs ($have)"

mkdir "$dir" || skip "cannot make $dir"
trap 'rmdir "$dir" 2>/dev/null' EXIT
if ! echo "$cpus" >"$dir/$cpus_file" || ! echo "${mems:-0}" >"$dir/$mems_file"; then
    skip "cannot give $dir its CPUs ($cpus) and memory nodes ($mems)"
fi
echo "in_cpuset: running in $dir, CPUs $cpus of $have"
# A child moves itself in and becomes the command; this shell stays out,
# so it can remove the cgroup once the command and its children are gone.
(
    echo "$BASHPID" >"$dir/$procs_file" || exit 125
    exec "$@"
)
rc=$?
if [[ $rc -eq 125 ]]; then
    echo "in_cpuset: FAILED: cannot move into $dir" >&2
    exit 1
fi
exit $rc
