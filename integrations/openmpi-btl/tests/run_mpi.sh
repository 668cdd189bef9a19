#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs one btl_suite test over the shardx BTL and checks the result.
#
#   run_mpi.sh MPIRUN SYSTEM_COMPONENT_DIR OUR_COMPONENT_DIR NP EXPECT -- MPIRUN_ARGS...
#
# mpirun runs NP ranks with ob1 over `btl shardx,self` only (so a BTL that
# failed to load cannot be replaced by tcp: ob1 then finds no path and the
# job fails; SXT_BTLS replaces the list), btl_shardx_verbose=1 (each rank prints the operations of
# each protocol path at finalize) and the given arguments. The test passes
# when mpirun exits 0 and the counters, summed over ranks, meet EXPECT:
# comma-separated conditions such as "get>0,put=0" ("-" for none), so a
# run meant for the put pipeline fails if it never put. The condition
# "split_default" stands for what the BTL's default does with large gets
# between ranks of this host (mca_btl_shardx_split_fits): none shared
# where the NP ranks outnumber the CPUs the job may use, counted here when
# it runs as the BTL counts them (hwloc's allowed set: the CPUs of this
# process's cpuset cgroup, cpuset_lib.sh's job_cpus; not its affinity
# mask, which `taskset -c 0` narrows to one CPU while Open MPI and the BTL
# still see the machine's), shared where they do not. "shards_mt" stands
# for the shards of ranks that run MPI_THREAD_MULTIPLE, which keep
# shardx's default of one per CPU of their cpuset (a job that does not
# gets one a rank): more than one a rank where the NP ranks outnumber
# those CPUs and mpirun binds none, one a rank where there is one CPU, and
# unchecked otherwise (mpirun's binding decides). EXPECT
# "fail:REGEX[@@REGEX...]" instead wants mpirun to fail with each REGEX in
# its output. With SXT_SKIP_WITHOUT_CMA=1 a test that wants
# single copy exits 77 (skipped) where the host refuses it, rather than
# checking the datagram fallback (a test of the shared get tests nothing
# there).
set -u
mpirun=$1 sysdir=$2 ourdir=$3 np=$4 expect=$5
shift 5
[[ ${1:-} == -- ]] && shift

# The CPUs this process may use (its affinity mask), for the conditions
# that depend on them (see above).
cpus=$(grep -E '^Cpus_allowed_list:' /proc/self/status | awk '{print $2}' | tr ',' '\n' |
    awk -F- '{n += (NF == 2 ? $2 - $1 + 1 : 1)} END {print n + 0}')
if [[ ,$expect, == *,split_default,* || ,$expect, == *,shards_mt,* ]] && [[ $cpus -lt 1 ]]; then
    echo "run_mpi: FAILED: cannot count the CPUs this process may use" >&2
    exit 1
fi

# "shards_mt": the shards of MPI_THREAD_MULTIPLE ranks (see above).
if [[ ,$expect, == *,shards_mt,* ]]; then
    if [[ $cpus -eq 1 ]]; then
        shards="shards=$np"
    elif [[ $np -gt $cpus ]]; then
        shards="shards>$np"
    else
        shards=""
    fi
    expect=$(sed -E "s/(^|,)shards_mt(,|$)/\1$shards\2/; s/,,/,/; s/^,//; s/,$//" <<<"$expect")
    [[ -n $expect ]] || expect=-
    echo "run_mpi: $np ranks, $cpus CPUs allowed here: expecting ${shards:-any number of shards}"
fi

# "split_default": the counters the default's choice leaves (see above).
if [[ ,$expect, == *,split_default,* ]]; then
    # shellcheck source=cpuset_lib.sh # job_cpus
    . "$(dirname "${BASH_SOURCE[0]}")/cpuset_lib.sh"
    jcpus=$(job_cpus)
    if [[ ! $jcpus =~ ^[1-9][0-9]*$ ]]; then
        echo "run_mpi: FAILED: cannot count the CPUs the job may use ($jcpus)" >&2
        exit 1
    fi
    if [[ $np -gt $jcpus ]]; then
        split="cma_split=0,cma_helped=0"
    elif [[ $np -eq 2 ]]; then
        # Two ranks with a CPU each: the owner, waiting in MPI_Send for
        # the FIN, takes part of its peer's gets.
        split="cma_split>0,cma_helped>0,cma_help_failed=0"
    else
        split="cma_split>0"
    fi
    expect=$(sed -E "s/(^|,)split_default(,|$)/\1$split\2/" <<<"$expect")
    echo "run_mpi: $np ranks, $jcpus CPUs in this job's cpuset ($cpus in this process's" \
        "affinity mask): expecting $split"
fi

# The component path replaces Open MPI's default: the system's first.
export OMPI_MCA_mca_base_component_path="$sysdir:$ourdir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# A test that wants single copy (cma_get>0 or cma_put>0) asks the suite
# first whether this host lets a process copy from its sibling's memory
# (btl_suite cma_probe). Where the kernel refuses (Yama's ptrace_scope 2 or
# 3, a container's seccomp profile), the BTL must fall back to shardx's
# datagrams, and that is what the test then checks: every byte, and no
# single copy at all (a shared get may have begun before the first
# refusal: its counters are not checked there).
if [[ $expect == *cma_get\>0* || $expect == *cma_put\>0* ]]; then
    suite=""
    for a in "$@"; do [[ $a == */btl_suite ]] && suite=$a; done
    if [[ -n $suite ]]; then
        "$suite" cma_probe
        probe=$?
        if [[ $probe -eq 2 && ${SXT_SKIP_WITHOUT_CMA:-0} == 1 ]]; then
            echo "run_mpi: skipped: this host refuses cross-memory attach between" \
                "sibling processes, and this test is about single copy"
            exit 77
        elif [[ $probe -eq 2 ]]; then
            expect=$(sed -E 's/cma_(get|put)>0/cma_\1=0/g; s/(^|,)cma_(split|helped|help_failed|help_refused)>0//g
                s/(^|,)cma_fallback=0//' <<<"$expect")
            expect=${expect#,}
            echo "run_mpi: this host refuses cross-memory attach between sibling processes:" \
                "checking the datagram fallback instead ($expect)"
        elif [[ $probe -ne 0 ]]; then
            echo "run_mpi: FAILED: btl_suite cma_probe exited with status $probe" >&2
            exit 1
        fi
    fi
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$mpirun" -np "$np" --oversubscribe --mca pml ob1 --mca btl "${SXT_BTLS:-shardx,self}" \
    --mca btl_shardx_verbose 1 "$@" >"$out" 2>&1
rc=$?
cat "$out"

# "fail:REGEX[@@REGEX...]": the job must fail, and say each REGEX.
if [[ $expect == fail:* ]]; then
    if [[ $rc -eq 0 ]]; then
        echo "run_mpi: FAILED: mpirun succeeded, expected a failure" >&2
        exit 1
    fi
    pats=${expect#fail:}
    while [[ -n $pats ]]; do
        pat=${pats%%@@*}
        if ! grep -Eq -- "$pat" "$out"; then
            echo "run_mpi: FAILED: the output does not say '$pat'" >&2
            exit 1
        fi
        [[ $pats == *"@@"* ]] && pats=${pats#*@@} || pats=""
    done
    echo "run_mpi: failed as expected: ${expect#fail:}"
    exit 0
fi
if [[ $rc -ne 0 ]]; then
    echo "run_mpi: FAILED: mpirun exited with status $rc" >&2
    exit 1
fi

# Sum "btl shardx: operations: name=N ..." over the ranks.
lines=$(grep -c 'btl shardx: operations:' "$out")
if [[ $lines -ne $np ]]; then
    echo "run_mpi: FAILED: $lines of $np ranks reported shardx BTL operations" >&2
    exit 1
fi
declare -A sum=()
while read -r kv; do
    sum[${kv%%=*}]=$((${sum[${kv%%=*}]:-0} + ${kv#*=}))
done < <(grep -o 'btl shardx: operations:.*' "$out" | tr ' ' '\n' | grep '=')
summary=""
for k in "${!sum[@]}"; do summary+="$k=${sum[$k]} "; done
echo "run_mpi: operations over $np ranks: $summary"

[[ $expect == - ]] && exit 0
IFS=, read -ra conds <<<"$expect"
for c in "${conds[@]}"; do
    if [[ $c =~ ^([a-z_]+)(=|\>)([0-9]+)$ ]]; then
        name=${BASH_REMATCH[1]} op=${BASH_REMATCH[2]} want=${BASH_REMATCH[3]}
        have=${sum[$name]:-}
        if [[ -z $have ]]; then
            echo "run_mpi: FAILED: no counter '$name'" >&2
            exit 1
        fi
        if [[ $op == = && $have -ne $want ]] || [[ $op == '>' && $have -le $want ]]; then
            echo "run_mpi: FAILED: expected $name $op $want, got $have" >&2
            exit 1
        fi
    else
        echo "run_mpi: bad condition '$c'" >&2
        exit 2
    fi
done
echo "run_mpi: $expect: ok"
