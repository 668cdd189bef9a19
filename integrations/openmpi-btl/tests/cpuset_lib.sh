# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash
# Functions for the BTL tests' scripts (sourced by in_cpuset.sh and
# run_mpi.sh) that find this process's cpuset cgroup and its CPUs.

# "0-3,8,10-11" -> one CPU number per line.
expand() {
    local part parts
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        if [[ $part == *-* ]]; then
            seq "${part%-*}" "${part#*-}"
        elif [[ -n $part ]]; then
            echo "$part"
        fi
    done
}

# mountinfo: ID PARENT DEV ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE
# SOURCE SUPEROPTIONS; the optional fields vary in number. ROOT is the
# directory of the hierarchy mounted there (not "/" inside a container
# that sees only its own part).
mounted() { # FSTYPE [SUPEROPTION]: "ROOT MOUNTPOINT" of the first such mount
    awk -v fs="$1" -v opt="${2:-}" '{
        for (i = 7; i <= NF && $i != "-"; i++) {}
        if ($(i + 1) == fs && (opt == "" || $NF ~ ("(^|,)" opt "(,|$)"))) { print $4, $5; exit }
    }' /proc/self/mountinfo
}

# This process's cgroup (/proc/self/cgroup): in cgroup v1's cpuset
# hierarchy, or with "v2" in the unified one.
own_cgroup() {
    if [[ ${1:-} == v2 ]]; then
        awk -F: '$1 == "0" {print $3; exit}' /proc/self/cgroup
    else
        awk -F: '$2 ~ /(^|,)cpuset(,|$)/ {print $3; exit}' /proc/self/cgroup
    fi
}

# The directory of the cgroup PATH (as /proc/self/cgroup names it) under
# a mount "ROOT MOUNTPOINT".
cgroup_dir() {
    local root=${1%% *} point=${1#* } path=$2
    [[ $root == / ]] && root=""
    [[ -z $root || $path == "$root" || $path == "$root"/* ]] || return 1
    path=${path#"$root"}
    echo "$point${path%/}"
}

# How many CPUs the job may use, counted as the shardx BTL counts them
# (btl_shardx_split.c, split_job_cpus: hwloc's allowed set): those of this
# process's cpuset cgroup, not of its affinity mask, which `taskset` or a
# launcher's binding narrows without the cgroup; the online CPUs where no
# cpuset cgroup says more. cgroup v1's cpuset hierarchy, or v2's
# cpuset.cpus.effective where the controller is enabled for this cgroup.
job_cpus() {
    local v1 v2 dir list=""
    v1=$(mounted cgroup cpuset)
    v2=$(mounted cgroup2)
    if [[ -n $v1 ]]; then
        dir=$(cgroup_dir "$v1" "$(own_cgroup)") &&
            list=$(cat "$dir/cpuset.effective_cpus" 2>/dev/null || cat "$dir/cpuset.cpus" 2>/dev/null)
    elif [[ -n $v2 ]]; then
        dir=$(cgroup_dir "$v2" "$(own_cgroup v2)") && list=$(cat "$dir/cpuset.cpus.effective" 2>/dev/null)
    fi
    if [[ -n $list ]]; then
        expand "$list" | wc -l
    else
        getconf _NPROCESSORS_ONLN
    fi
}
