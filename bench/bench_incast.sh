#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `make bench-incast` (issue 23, congestion control): incast into one host
# of the namespace cluster (tests/cluster/), whose switch port is shaped to
# 1 Gbit/s (125 MB/s) with a 256 KB queue (--shape 1:1gbit:256kb), 2 and 4
# senders on hosts of their own, 64 KiB and 1 MiB messages, MTU 1500:
#
#   sx auto     sx_bench incast, SX_CONGESTION=auto (congestion control on:
#               the datagrams leave the host)
#   sx off      the same with SX_CONGESTION=off: no congestion control, the
#               baseline it is measured against
#   mpi tcp     mpi_bench incast over Open MPI's tcp BTL (ob1), the same
#   mpi shardx  senders and sizes, W messages in flight per sender
#               (BENCH_INCAST_WINDOW, 8), launched with mpirun across the
#               hosts as bench_mpi_hosts.sh does; the shardx BTL with its
#               defaults (congestion control on)
#   probe       sx_bench incast --probe, auto and off: the same senders, and
#               an extra rank on a host of its own ping-ponging 8 bytes with
#               the receiver through the queue (p50, p99, max)
#   tcp beside  one sx_bench sender (host 2) and a TCP flow (nettool.py,
#               host 3) into host 1 at once, auto and off, 1 MiB: both
#               goodputs (2-sender cluster only)
#   sx ecn,     sx_bench incast and --probe on a second cluster whose port
#   probe ecn   towards host 1 also marks ECN-capable frames CE beyond 64 kB
#               queued at 950 Mbit/s (with_cluster.sh --ecn 1:950:64), as a
#               datacenter switch with a marking threshold does
#
# Each run also reads the shaped port's queue drops (tc -s on the switch's
# p1, the delta over the run). Every run lasts BENCH_INCAST_SECONDS (5) of
# streaming; BENCH_REPEAT rounds (3) of every run, interleaved, and the
# figures are the medians over the rounds (the JSON keeps min and max).
#
#   bench/bench_incast.sh [BUILD_DIR [RESULTS_DIR]]   (needs root: namespaces)
#
# Prints a table and the issue's ratios; writes RESULTS_DIR/incast.json
# (default BUILD_DIR/bench-results) and, with gnuplot, incast.png
# (bench/plot_incast.sh; `make bench-readme` copies it to docs/bench/).
# Without namespaces (not root) it says so and exits 0, so that `make
# bench-all` goes on; without the MPI parts (no mpi_bench, no shardx BTL)
# their rows are left out. The hosts share this machine's CPUs (2 cores for
# 4 to 6 busy ranks): read the figures against each other and the link
# rate, not as a wire's. Figures only: nothing here passes or fails on speed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

# ---- on host 1 of a cluster (bench_incast.sh --on-cluster N BUILD RAW) ----
if [[ ${1:-} == --on-cluster ]]; then
    nsend=$2 build=$3 raw=$4 marking=${5:-}
    IFS=, read -ra hosts <<<"$CLUSTER_HOSTS"
    secs=${BENCH_INCAST_SECONDS:-5} window=${BENCH_INCAST_WINDOW:-8}
    repeat=${BENCH_REPEAT:-3}
    sxrun=$build/sx_run sxbench=$build/bench/sx_bench mpibench=$build/bench/mpi_bench
    nettool=$root/tests/cluster/nettool.py
    # Receiver and senders; the prober's host comes after them.
    join() {
        local IFS=,
        echo "$*"
    }
    incast_hosts=$(join "${hosts[@]:0:nsend+1}")
    probe_hosts=$(join "${hosts[@]:0:nsend+2}")
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT

    qdrops() { "$CLUSTER_TOOL" qdropped "$CLUSTER_NAME" 1; }
    # record KIND SIZE ROUND DROPS EXTRA: the last incast JSON object of
    # $log, with what the run was, as one line of $raw.
    record() {
        local line
        line=$(sed 's/^\[[0-9]*\] //' "$log" | grep '^{.*"incast"' | tail -n 1) || true
        if [[ -z $line ]]; then
            echo "bench_incast: $nsend->1 $1 $2 B: no result; left out" >&2
            sed 's/^/    /' "$log" | tail -n 5 >&2
            return 0
        fi
        echo "{\"senders_n\": $nsend, \"kind\": \"$1\", \"size\": $2, \"round\": $3, \"qdrops\": $4$5, \"result\": $line}" >>"$raw"
    }
    sx_incast() { # KIND SIZE ROUND CC HOSTS NP ARGS...
        local kind=$1 size=$2 round=$3 cc=$4 h=$5 np=$6 d0
        shift 6
        echo "bench_incast: round $round of $repeat: $nsend->1: $kind, $size B" >&2
        d0=$(qdrops)
        SX_CONGESTION=$cc timeout 180 "$sxrun" -H "$h" -n "$np" --agent "$CLUSTER_AGENT" \
            --no-prefix --timeout 150 -- "$sxbench" incast --size "$size" --seconds "$secs" \
            --json "$@" >"$log" 2>&1 || true
        record "$kind" "$size" "$round" "$(($(qdrops) - d0))" ""
    }
    mpi_incast() { # KIND SIZE ROUND BTL
        local kind=$1 size=$2 round=$3 btl=$4 d0
        echo "bench_incast: round $round of $repeat: $nsend->1: $kind, $size B" >&2
        d0=$(qdrops)
        timeout 180 mpirun -np $((nsend + 1)) -H "$incast_hosts" \
            --mca plm_rsh_agent "$CLUSTER_AGENT" --mca oob_tcp_if_include "$CLUSTER_IF" \
            --mca mpi_yield_when_idle 1 --mca pml ob1 --mca btl "$btl,self" \
            --mca btl_tcp_if_include "$CLUSTER_IF" \
            "$mpibench" incast "$size" "$secs" "$window" >"$log" 2>&1 || true
        record "$kind" "$size" "$round" "$(($(qdrops) - d0))" ""
    }
    # One sx_bench sender (host 2) and a TCP flow from host 3, both into
    # host 1. The TCP flow starts first and outlasts the sx job; its rate is
    # taken over the middle of the sx job (from 1 s after sx_run started
    # to 1 s before it ended: the senders stream then, past the job's
    # start-up and before its wind-down) from the sink's progress lines.
    beside_tcp() { # KIND ROUND CC
        local kind=$1 round=$2 cc=$3 size=1048576 d0 t0 t1 tcprate sink_out sink_pid send_pid
        echo "bench_incast: round $round of $repeat: $nsend->1: $kind, TCP beside one sx sender" >&2
        sink_out=$(mktemp)
        python3 "$nettool" sink 5201 0 --progress >"$sink_out" 2>&1 &
        sink_pid=$!
        for _ in $(seq 50); do
            grep -q ready "$sink_out" && break
            sleep 0.1
        done
        "$CLUSTER_TOOL" exec "$CLUSTER_NAME" 3 python3 "$nettool" send "${hosts[0]}" 5201 0 \
            --seconds $((secs + 8)) &
        send_pid=$!
        sleep 1
        d0=$(qdrops)
        t0=$(date +%s.%N)
        SX_CONGESTION=$cc timeout 180 "$sxrun" -H "${hosts[0]},${hosts[1]}" -n 2 \
            --agent "$CLUSTER_AGENT" --no-prefix --timeout 150 -- "$sxbench" incast \
            --size "$size" --seconds "$secs" --json >"$log" 2>&1 || true
        t1=$(date +%s.%N)
        # The flow has outlasted the job: end it (the sink then sees the
        # connection close).
        kill "$send_pid" 2>/dev/null || true
        wait "$send_pid" 2>/dev/null || true
        wait "$sink_pid" 2>/dev/null || true
        tcprate=$(awk -v a="$t0" -v b="$t1" '
            $1 == "progress" && $2 >= a + 1 && $2 <= b - 1 {
                if (!n++) { t = $2; x = $3 }
                tl = $2; xl = $3
            }
            END { if (n > 1 && tl > t) printf "%.1f", (xl - x) / (tl - t) / 1e6; else print "null" }' \
            "$sink_out")
        rm -f "$sink_out"
        record "$kind" "$size" "$round" "$(($(qdrops) - d0))" ", \"tcp_mbps\": $tcprate"
    }

    have_mpi=1
    sysdir=$(sed -n 's/^SX_OMPI_COMPONENT_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
    if [[ ! -x $mpibench || -z $sysdir || ! -f $build/openmpi/mca_btl_shardx.so ]] ||
        ! command -v mpirun >/dev/null; then
        echo "bench_incast: no mpi_bench or shardx BTL in $build: the MPI rows are left out" >&2
        have_mpi=0
    else
        OMPI_MCA_mca_base_component_path="$sysdir:$(cd "$build/openmpi" && pwd)"
        export OMPI_MCA_mca_base_component_path
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    if [[ $marking == ecn ]]; then
        # A port that marks CE (with_cluster.sh --ecn): sx_bench only, the
        # BTLs' TCP does not ask for ECN.
        for ((round = 1; round <= repeat; round++)); do
            for size in 65536 1048576; do
                sx_incast "sx ecn" "$size" "$round" auto "$incast_hosts" $((nsend + 1))
                sx_incast "probe ecn" "$size" "$round" auto "$probe_hosts" $((nsend + 2)) --probe
            done
        done
        exit 0
    fi
    for ((round = 1; round <= repeat; round++)); do
        for size in 65536 1048576; do
            sx_incast "sx auto" "$size" "$round" auto "$incast_hosts" $((nsend + 1))
            sx_incast "sx off" "$size" "$round" off "$incast_hosts" $((nsend + 1))
            if ((have_mpi)); then
                mpi_incast "mpi tcp" "$size" "$round" tcp
                mpi_incast "mpi shardx" "$size" "$round" shardx
            fi
            sx_incast "probe auto" "$size" "$round" auto "$probe_hosts" $((nsend + 2)) --probe
            sx_incast "probe off" "$size" "$round" off "$probe_hosts" $((nsend + 2)) --probe
        done
        if ((nsend == 2)); then
            beside_tcp "tcp beside auto" "$round" auto
            beside_tcp "tcp beside off" "$round" off
        fi
    done
    exit 0
fi

# ---- on this machine: a cluster per sender count, then the summary ----
build=$(cd "${1:-build}" && pwd)
results=${2:-$build/bench-results}
[[ -x $build/bench/sx_bench && -x $build/sx_run ]] ||
    { echo "bench_incast: sx_bench or sx_run not built in $build" >&2; exit 1; }
mkdir -p "$results"
results=$(cd "$results" && pwd)
raw=$results/incast-raw.jsonl
: >"$raw"
for nsend in 2 4; do
    # The senders' hosts, the receiver's (host 1) and the prober's.
    echo "bench_incast: $nsend senders into host 1 at 1 Gbit/s, MTU 1500" >&2
    rc=0
    "$root/tests/cluster/with_cluster.sh" $((nsend + 2)) 1500 --shape 1:1gbit:256kb -- \
        "$0" --on-cluster "$nsend" "$build" "$raw" || rc=$?
    if ((rc == 77)); then
        echo "bench_incast: no namespace cluster here (needs root); skipped" >&2
        exit 0
    fi
    ((rc == 0)) || { echo "bench_incast: the $nsend-sender cluster failed ($rc)" >&2; exit "$rc"; }
    # The same port marking ECN-capable frames CE beyond 64 kB queued at
    # 950 Mbit/s (DCTCP's threshold marking; tests/cluster/README.md).
    echo "bench_incast: $nsend senders into host 1, the port marking ECN" >&2
    "$root/tests/cluster/with_cluster.sh" $((nsend + 2)) 1500 --shape 1:1gbit:256kb \
        --ecn 1:950:64 -- "$0" --on-cluster "$nsend" "$build" "$raw" ecn || rc=$?
    ((rc == 0)) || { echo "bench_incast: the $nsend-sender ECN cluster failed ($rc)" >&2; exit "$rc"; }
done

python3 - "$raw" "$results" <<'PY'
import json, os, sys
raw, outdir = sys.argv[1], sys.argv[2]
LINK = 125.0  # MB/s: 1 Gbit/s, the shaped port towards host 1
rows = [json.loads(l) for l in open(raw) if l.strip()]
KINDS = ["sx auto", "sx off", "sx ecn", "mpi tcp", "mpi shardx", "probe auto", "probe off",
         "probe ecn", "tcp beside auto", "tcp beside off"]
FIELDS = ["goodput_mbps", "jain", "rtx_pct", "cc_loss_cuts", "cc_delay_exits", "cc_ecn_cuts",
          "rx_ecn_ce", "cc_collapses",
          "cc_window_stalls", "cc_pace_waits", "rtx_timeout", "chan_failures", "probe_p50_us",
          "probe_p99_us", "probe_max_us"]

def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2

samples = {}
for r in rows:
    key = (r["senders_n"], r["kind"], r["size"])
    d = samples.setdefault(key, {})
    x = r["result"]
    for f in FIELDS:
        if isinstance(x.get(f), (int, float)) and not isinstance(x.get(f), bool):
            d.setdefault(f, []).append(float(x[f]))
    d.setdefault("qdrops", []).append(float(r["qdrops"]))
    if isinstance(r.get("tcp_mbps"), (int, float)):
        d.setdefault("tcp_mbps", []).append(float(r["tcp_mbps"]))
    for i, s in enumerate(x.get("senders") or []):
        d.setdefault("sender%d_mbps" % i, []).append(float(s.get("mbps", 0)))

res, spread = {}, {}
for key, d in samples.items():
    name = "%d->1 %s %d" % key
    res[name] = {"senders": key[0], "kind": key[1], "size": key[2]}
    spread[name] = {}
    for f, v in d.items():
        res[name][f] = round(median(v), 3)
        spread[name][f] = {"min": min(v), "max": max(v), "runs": len(v)}

def get(n, kind, size, f):
    return res.get("%d->1 %s %d" % (n, kind, size), {}).get(f)

def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None

ratios = {}
for size, sname in ((65536, "64KiB"), (1048576, "1MiB")):
    g = get(2, "sx auto", size, "goodput_mbps")
    ratios["incast_2to1_%s_sx_over_tcp_btl" % sname] = ratio(g, get(2, "mpi tcp", size, "goodput_mbps"))
    ratios["incast_2to1_%s_shardx_btl_over_tcp_btl" % sname] = ratio(
        get(2, "mpi shardx", size, "goodput_mbps"), get(2, "mpi tcp", size, "goodput_mbps"))
    ratios["incast_2to1_%s_sx_over_link" % sname] = ratio(g, LINK)
    ratios["incast_2to1_%s_sx_over_cc_off" % sname] = ratio(g, get(2, "sx off", size, "goodput_mbps"))
    for n in (2, 4):
        ratios["rtx_pct_%dto1_%s_sx_auto" % (n, sname)] = get(n, "sx auto", size, "rtx_pct")
        ratios["rtx_pct_%dto1_%s_sx_off" % (n, sname)] = get(n, "sx off", size, "rtx_pct")
    ratios["incast_2to1_%s_sx_ecn_over_link" % sname] = ratio(get(2, "sx ecn", size, "goodput_mbps"), LINK)
    ratios["jain_4to1_%s_sx_auto" % sname] = get(4, "sx auto", size, "jain")
    ratios["jain_4to1_%s_sx_ecn" % sname] = get(4, "sx ecn", size, "jain")
    ratios["jain_4to1_%s_sx_off" % sname] = get(4, "sx off", size, "jain")
    ratios["jain_4to1_%s_tcp_btl" % sname] = get(4, "mpi tcp", size, "jain")
    for n in (2, 4):
        ratios["probe_p99_%dto1_%s_auto_over_off" % (n, sname)] = ratio(
            get(n, "probe auto", size, "probe_p99_us"), get(n, "probe off", size, "probe_p99_us"))
        ratios["probe_p99_%dto1_%s_ecn_over_auto" % (n, sname)] = ratio(
            get(n, "probe ecn", size, "probe_p99_us"), get(n, "probe auto", size, "probe_p99_us"))
for cc in ("auto", "off"):
    sx = get(2, "tcp beside " + cc, 1048576, "goodput_mbps")
    tcp = get(2, "tcp beside " + cc, 1048576, "tcp_mbps")
    ratios["beside_tcp_%s_sx_share" % cc] = ratio(sx, (sx or 0) + (tcp or 0)) if sx is not None and tcp is not None else None

load = os.getloadavg()
doc = {"machine": {"cpus": os.cpu_count(), "loadavg_1m": round(load[0], 2)},
       "link_mbps": LINK, "seconds": float(os.environ.get("BENCH_INCAST_SECONDS", "5")),
       "rounds": int(os.environ.get("BENCH_REPEAT", "3")), "results": res, "spread": spread,
       "ratios": ratios}
json.dump(doc, open(os.path.join(outdir, "incast.json"), "w"), indent=2)

# The plot's data: per case (senders, size) the goodput of each kind, median
# min max; and the probe's p99.
with open(os.path.join(outdir, "incast_goodput.dat"), "w") as f:
    kinds = ["sx auto", "sx off", "sx ecn", "mpi shardx", "mpi tcp"]
    f.write("# case, then median min max of goodput MB/s for: %s\n" % "; ".join(kinds))
    for n in (2, 4):
        for size, sname in ((65536, "64 KiB"), (1048576, "1 MiB")):
            cols = []
            for k in kinds:
                v = samples.get((n, k, size), {}).get("goodput_mbps")
                cols.append("%.1f %.1f %.1f" % (median(v), min(v), max(v)) if v else "NaN NaN NaN")
            f.write('"%d->1, %s" %s\n' % (n, sname, " ".join(cols)))
with open(os.path.join(outdir, "incast_probe.dat"), "w") as f:
    f.write("# case, then median min max of the probe's p99 us: auto; off; ecn\n")
    for n in (2, 4):
        for size, sname in ((65536, "64 KiB"), (1048576, "1 MiB")):
            cols = []
            for k in ("probe auto", "probe off", "probe ecn"):
                v = samples.get((n, k, size), {}).get("probe_p99_us")
                cols.append("%.1f %.1f %.1f" % (median(v), min(v), max(v)) if v else "NaN NaN NaN")
            f.write('"%d->1, %s" %s\n' % (n, sname, " ".join(cols)))

def fmt(v, f="%.1f"):
    return f % v if v is not None else "-"
print("\nincast into host 1 behind a 1 Gbit/s port (%.0f MB/s) with a 256 KB queue, MTU 1500; "
      "medians of %d round(s) of %g s" % (LINK, doc["rounds"], doc["seconds"]))
hdr = ("case", "size", "MB/s", "link %", "per sender MB/s", "Jain", "rtx %", "loss cuts",
       "delay exits", "ECN cuts", "collapses", "win stalls", "pace waits", "q drops", "p50 us", "p99 us",
       "max us", "TCP MB/s")
print("%-5s %-16s %7s %7s %7s %-17s %6s %6s %9s %10s %8s %9s %10s %10s %8s %8s %8s %8s %8s"
      % (hdr[0], "run", *hdr[1:]))
for n in (2, 4):
    for size in (65536, 1048576):
        for k in KINDS:
            name = "%d->1 %s %d" % (n, k, size)
            if name not in res:
                continue
            d = res[name]
            per = "/".join(fmt(d.get("sender%d_mbps" % i), "%.0f") for i in range(n + 1)
                           if "sender%d_mbps" % i in d)
            g = d.get("goodput_mbps")
            print("%-5s %-16s %7s %7s %7s %-17s %6s %6s %9s %10s %8s %9s %10s %10s %8s %8s %8s %8s %8s"
                  % ("%d->1" % n, k, "64K" if size == 65536 else "1M", fmt(g),
                     fmt(g / LINK * 100 if g is not None else None, "%.0f"), per or "-",
                     fmt(d.get("jain"), "%.3f"), fmt(d.get("rtx_pct"), "%.2f"),
                     fmt(d.get("cc_loss_cuts"), "%.0f"), fmt(d.get("cc_delay_exits"), "%.0f"),
                     fmt(d.get("cc_ecn_cuts"), "%.0f"),
                     fmt(d.get("cc_collapses"), "%.0f"), fmt(d.get("cc_window_stalls"), "%.0f"),
                     fmt(d.get("cc_pace_waits"), "%.0f"), fmt(d.get("qdrops"), "%.0f"),
                     fmt(d.get("probe_p50_us")), fmt(d.get("probe_p99_us")),
                     fmt(d.get("probe_max_us")), fmt(d.get("tcp_mbps"))))
print("link rate: %.0f MB/s (1 Gbit/s)" % LINK)
print("\nratios (sx: sx_bench incast, SX_CONGESTION=auto; the BTLs: mpi_bench incast):")
for k, v in ratios.items():
    print("  %-44s %8s" % (k, fmt(v, "%.3f")))
print("\nbench_incast: JSON in %s" % os.path.join(outdir, "incast.json"))
PY

"$here/plot_incast.sh" "$results" || true
