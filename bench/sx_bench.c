/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_bench: shardx's benchmark tool (first version, issue 6).
 *
 *   sx_bench <latency|floor|loss|rate|mt|bw|incast> [--json] [--size N] [--iters N]
 *            [--window N] [--seed N] [--no-bind] [--mode sharded|global|both]
 *            [--threads LIST] [--oversubscribe] [--seconds S] [--verify] [--probe]
 *
 * Two processes take part, rank 0 (which prints) and rank 1: started by a
 * launcher (`sx_run -n 2 sx_bench ...`, `mpirun -np 2 --bind-to none
 * sx_bench ...`), or, run on its own, sx_bench forks rank 1 itself
 * (sx_bench_ctl.c). They exchange business cards and everything else over
 * a control channel. incast takes any number of ranks (sx_bench.h).
 *
 * Both ranks busy-poll, so each needs a core of its own: by default the
 * r-th rank on a host is pinned to the r-th CPU of the inherited affinity
 * mask (a rank alone on its host is not pinned: sxb_bind), as mpirun binds
 * two ranks to two cores, which also keeps the scheduler from migrating a
 * spinning process onto its peer's CPU in mid-measurement. `mt` is the
 * exception: it runs several threads per rank, each on a shard of its own,
 * and an engine builds one shard per core of its process's cpuset, so a
 * rank pinned to one CPU would have one shard; mt never pins.
 *
 * Output: a human table on stdout, or with --json one JSON object
 * {"machine", "config", "results", "counters"}; errors go to stderr.
 */
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "common/config.h"
#include "sx_bench.h"

bool sxb_human(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    return ctl->rank == 0 && !opts->json && !opts->csv;
}

/* ---- statistics and sizes ------------------------------------------------- */

static int sxb_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void sxb_quantiles(uint64_t *v, size_t n, double p, uint64_t *median_p, uint64_t *pq_p)
{
    if (n == 0) {
        *median_p = *pq_p = 0;
        return;
    }
    qsort(v, n, sizeof(v[0]), sxb_cmp_u64);
    *median_p = v[(n - 1) / 2];
    /* Nearest rank: the smallest sample with at least p of them at or below. */
    size_t k = (size_t)ceil(p * (double)n);
    *pq_p = v[k > 0 ? k - 1 : 0];
}

size_t sxb_latency_sizes(const sxb_opts_t *opts, size_t *sizes, size_t max)
{
    static const size_t ladder[] = {0, 8, 64, 512, 4096, 32768, 262144, 1048576, 4194304};
    size_t n = 0;

    if (opts->size_set) {
        sizes[n++] = opts->size;
        return n;
    }
    for (size_t i = 0; i < sizeof(ladder) / sizeof(ladder[0]) && n < max; i++)
        sizes[n++] = ladder[i];
    return n;
}

uint64_t sxb_latency_iters(const sxb_opts_t *opts, size_t size)
{
    if (opts->iters_set)
        return opts->iters;
    /* 10000 round trips up to 16 KiB, then about 160 MB of round trips per
     * size, but at least 100 so that p99 still means something; the whole
     * default ladder then takes well under 30 s on 2 cores. */
    if (size <= 16384)
        return 10000;
    uint64_t n = 10000ull * 16384 / size;
    return n < 100 ? 100 : n;
}

/* ---- records and output --------------------------------------------------- */

static sxb_record_t *g_records;
static size_t g_nrecords, g_cap_records;

typedef struct sxb_counters {
    const char *bench;
    char label[48];
    uint64_t v[2][SXB_NCOUNTERS];
} sxb_counters_t;

static sxb_counters_t *g_counters;
static size_t g_ncounters, g_cap_counters;

const char *const sxb_counter_names[] = {
    "data_sent",      "frames_sent",        "acks_sent",   "rx_packets",         "rtx_timeout",
    "rtx_dupack",     "rtx_sack",           "rtx_probe",   "window_stalls",      "hotel_full",
    "drop_duplicate", "drop_out_of_window", "tl_tx_again", "tl_rx_kernel_drops", "chan_failures",
    "svc_wakeups",    "svc_rx_packets",     "rwnd_stalls", "peer_probes",        "progress_yields",
    "rtt_waited",
};

/* Effective settings shown in the report. */
static const char *g_transport = "udp";
static const char *g_mode = "sharded";

sxb_record_t sxb_record(const char *bench, const char *mode, uint64_t size)
{
    sxb_record_t r = {.bench = bench, .mode = mode ? mode : g_mode, .threads = 1, .size = size};
    return r;
}

void sxb_metric(sxb_record_t *r, const char *key, double value)
{
    if (r->nmetrics < SXB_MAX_METRICS)
        r->m[r->nmetrics++] = (sxb_metric_t){key, value};
}

void sxb_record_add(const sxb_record_t *r)
{
    if (g_nrecords == g_cap_records) {
        size_t cap = g_cap_records ? 2 * g_cap_records : 16;
        sxb_record_t *p = realloc(g_records, cap * sizeof(*p));
        if (p == NULL)
            return; /* the figure is lost from the JSON; the table has it */
        g_records = p;
        g_cap_records = cap;
    }
    g_records[g_nrecords++] = *r;
}

void sxb_counters_add(const char *bench, const char *label, const uint64_t rank0[SXB_NCOUNTERS],
                      const uint64_t rank1[SXB_NCOUNTERS])
{
    if (g_ncounters == g_cap_counters) {
        size_t cap = g_cap_counters ? 2 * g_cap_counters : 8;
        sxb_counters_t *p = realloc(g_counters, cap * sizeof(*p));
        if (p == NULL)
            return;
        g_counters = p;
        g_cap_counters = cap;
    }
    sxb_counters_t *c = &g_counters[g_ncounters++];
    c->bench = bench;
    snprintf(c->label, sizeof(c->label), "%s", label);
    memcpy(c->v[0], rank0, sizeof(c->v[0]));
    memcpy(c->v[1], rank1, sizeof(c->v[1]));
}

void sxb_counters_read(sx_engine_h e, uint64_t v[SXB_NCOUNTERS])
{
    for (int k = 0; k < SXB_NCOUNTERS; k++) {
        if (sx_stats_value(e, sxb_counter_names[k], &v[k]) != SX_OK)
            v[k] = UINT64_MAX;
    }
}

size_t sxb_counters_count(void)
{
    return g_ncounters;
}

double sxb_counters_ratio(size_t first, int rank, const char *num, const char *den)
{
    int kn = -1, kd = -1;
    uint64_t n = 0, d = 0;

    for (int k = 0; k < SXB_NCOUNTERS; k++) {
        kn = strcmp(sxb_counter_names[k], num) == 0 ? k : kn;
        kd = strcmp(sxb_counter_names[k], den) == 0 ? k : kd;
    }
    if (kn < 0 || kd < 0)
        return NAN;
    for (size_t i = first; i < g_ncounters; i++) {
        if (g_counters[i].v[rank][kn] == UINT64_MAX || g_counters[i].v[rank][kd] == UINT64_MAX)
            return NAN;
        n += g_counters[i].v[rank][kn];
        d += g_counters[i].v[rank][kd];
    }
    return d > 0 ? (double)n / (double)d : NAN;
}

void sxb_counters_print(size_t first)
{
    char head[64];

    if (first >= g_ncounters)
        return;
    printf("\n# engine counters at the end of each session (rank 0 sends, rank 1 receives)\n");
    printf("%-20s", "counter");
    for (size_t i = first; i < g_ncounters; i++) {
        for (int rank = 0; rank < 2; rank++) {
            snprintf(head, sizeof(head), "%s/r%d", g_counters[i].label, rank);
            printf(" %14s", head);
        }
    }
    printf("\n");
    for (int k = 0; k < SXB_NCOUNTERS; k++) {
        printf("%-20s", sxb_counter_names[k]);
        for (size_t i = first; i < g_ncounters; i++) {
            for (int rank = 0; rank < 2; rank++) {
                uint64_t v = g_counters[i].v[rank][k];
                if (v == UINT64_MAX)
                    printf(" %14s", "n/a");
                else
                    printf(" %14llu", (unsigned long long)v);
            }
        }
        printf("\n");
    }
    fflush(stdout);
}

static void sxb_json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static void sxb_json_num(FILE *out, double v)
{
    /* JSON has no NaN or infinity. */
    if (!isfinite(v))
        fputs("null", out);
    else if (v == floor(v) && fabs(v) < 1e15)
        fprintf(out, "%.0f", v);
    else
        fprintf(out, "%.6g", v);
}

/* A parameter's value as the engines see it: environment, else default.
 * (sx_bench sets no parameter itself except FAULT in `loss`.) */
static const char *sxb_param_value(const sx_param_info_t *pi)
{
    char env[96];
    snprintf(env, sizeof(env), "SX_%s", pi->name);
    const char *v = getenv(env);
    return v != NULL ? v : pi->default_value;
}

static void sxb_print_json(FILE *out, const struct utsname *un, long cores, const char *version,
                           double load1)
{
    fputs("{\"machine\":{\"host\":", out);
    sxb_json_str(out, un->nodename);
    fprintf(out, ",\"cores\":%ld,\"kernel\":", cores);
    sxb_json_str(out, un->release);
    fputs(",\"arch\":", out);
    sxb_json_str(out, un->machine);
    /* Other work on the machine moves every figure; keep a hint of it. */
    fputs(",\"load1\":", out);
    sxb_json_num(out, load1);
    fputs("},\"config\":{\"transport\":", out);
    sxb_json_str(out, g_transport);
    fputs(",\"mode\":", out);
    sxb_json_str(out, g_mode);
    fputs(",\"version\":", out);
    sxb_json_str(out, version);
    fputs(",\"params\":{", out);
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t pi;
        if (sx_param_info(i, &pi) != SX_OK)
            continue;
        fputs(i ? "," : "", out);
        sxb_json_str(out, pi.name);
        fputc(':', out);
        sxb_json_str(out, sxb_param_value(&pi));
    }
    fputs("}},\"results\":[", out);
    for (size_t i = 0; i < g_nrecords; i++) {
        const sxb_record_t *r = &g_records[i];
        fprintf(out, "%s{\"bench\":", i ? "," : "");
        sxb_json_str(out, r->bench);
        fputs(",\"mode\":", out);
        sxb_json_str(out, r->mode);
        fputs(",\"transport\":", out);
        sxb_json_str(out, g_transport);
        fprintf(out, ",\"threads\":%u,\"size\":%llu", r->threads, (unsigned long long)r->size);
        for (unsigned k = 0; k < r->nmetrics; k++) {
            fprintf(out, ",\"%s\":", r->m[k].key);
            sxb_json_num(out, r->m[k].value);
        }
        fputc('}', out);
    }
    fputs("],\"counters\":[", out);
    for (size_t i = 0; i < g_ncounters; i++) {
        for (int rank = 0; rank < 2; rank++) {
            const sxb_counters_t *c = &g_counters[i];
            fprintf(out, "%s{\"bench\":", (i || rank) ? "," : "");
            sxb_json_str(out, c->bench);
            fputs(",\"label\":", out);
            sxb_json_str(out, c->label);
            fprintf(out, ",\"rank\":%d", rank);
            for (int k = 0; k < SXB_NCOUNTERS; k++) {
                if (c->v[rank][k] != UINT64_MAX)
                    fprintf(out, ",\"%s\":%llu", sxb_counter_names[k],
                            (unsigned long long)c->v[rank][k]);
            }
            fputc('}', out);
        }
    }
    fputs("]}\n", out);
}

/* sxb_print_json's signature for incast's object, which has no use for
 * the machine's details beyond its host name. */
static void sxb_incast_json_any(FILE *out, const struct utsname *un, long cores,
                                const char *version, double load1)
{
    (void)un;
    (void)cores;
    (void)version;
    (void)load1;
    sxb_incast_json(out);
}

/* Metric keys of every record, each once, in order of first appearance. */
static size_t sxb_metric_keys(const char **keys, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < g_nrecords; i++) {
        for (unsigned k = 0; k < g_records[i].nmetrics; k++) {
            size_t j = 0;
            while (j < n && strcmp(keys[j], g_records[i].m[k].key) != 0)
                j++;
            if (j == n && n < max)
                keys[n++] = g_records[i].m[k].key;
        }
    }
    return n;
}

/* --csv: a header, then one line per record; a metric a record lacks is
 * an empty field. Keys and names contain no commas or quotes. */
static void sxb_print_csv(void)
{
    const char *keys[64];
    size_t nkeys = sxb_metric_keys(keys, 64);

    fputs("bench,mode,transport,threads,size", stdout);
    for (size_t j = 0; j < nkeys; j++)
        printf(",%s", keys[j]);
    fputc('\n', stdout);
    for (size_t i = 0; i < g_nrecords; i++) {
        const sxb_record_t *r = &g_records[i];
        printf("%s,%s,%s,%u,%llu", r->bench, r->mode, g_transport, r->threads,
               (unsigned long long)r->size);
        for (size_t j = 0; j < nkeys; j++) {
            fputc(',', stdout);
            for (unsigned k = 0; k < r->nmetrics; k++) {
                if (strcmp(r->m[k].key, keys[j]) == 0 && isfinite(r->m[k].value))
                    printf("%.6g", r->m[k].value);
            }
        }
        fputc('\n', stdout);
    }
}

/* ---- command line --------------------------------------------------------- */

static void sxb_usage(FILE *out)
{
    fprintf(out, "usage: sx_bench <latency|bw|rate|mt|loss|floor|incast> [--json|--csv]\n"
                 "                [--json-file F] [--size N] [--iters N] [--window N] [--seed "
                 "N] [--no-bind] [--mode M]\n"
                 "                [--threads LIST] [--oversubscribe] [--transport NAME]\n"
                 "                [--seconds S] [--verify] [--probe] [--op am|put|get]\n"
                 "Start it with `sx_run -n 2 sx_bench ...` or `mpirun -np 2 --bind-to none\n"
                 "sx_bench ...` (incast: -n N, any N >= 2); run alone, it forks its second\n"
                 "rank itself.\n"
                 "  latency  ping-pong half round trip (median, p99), 0 B .. 4 MiB, beside\n"
                 "           the raw-UDP floor measured in the same run, and the floor\n"
                 "           reading each sender's address as the source check does;\n"
                 "           the lowest and highest ratio of the run's blocks alone\n"
                 "  bw       unidirectional bandwidth with a window, 0 B .. 4 MiB, beside\n"
                 "           the raw-UDP one-way stream\n"
                 "  --op     bw: am (sx_send, the default), put (sx_put into rank 1's\n"
                 "           region) or get (sx_get out of it)\n"
                 "  rate     windowed small-message rate (default 8 B), aggregation on and\n"
                 "           off, window 64 and 256 (or --window), beside the raw-UDP floor\n"
                 "  mt       scaling: T sender threads on rank 0, T receiver threads on\n"
                 "           rank 1, one shard and one lane each (default 8 B, window 64\n"
                 "           per thread), sharded and global mode side by side; then the\n"
                 "           injection-only variant over the sink transport\n"
                 "  loss     goodput and completion latency at 0, 0.1, 1, 5, 10 %% loss\n"
                 "  floor    raw-UDP ping-pong and one-way message rate only\n"
                 "  incast   ranks 1..N-1 stream --size messages (default 64 KiB, window 8)\n"
                 "           into rank 0 for --seconds (default 10); rank 0 prints each\n"
                 "           sender's goodput, the total, Jain's fairness index, the\n"
                 "           retransmitted share and the congestion-control counters\n"
                 "  --seconds  incast: how long the senders stream (fractions allowed)\n"
                 "  --verify incast: check every byte and sequence number at rank 0\n"
                 "  --probe  incast: the last rank ping-pongs 8 B with rank 0 instead of\n"
                 "           streaming (round trip p50, p99, max; needs N >= 3)\n"
                 "  --json   one JSON object on stdout: machine, config, results, counters\n"
                 "  --csv    the results as CSV on stdout, one record per line\n"
                 "  --json-file FILE  also write the JSON object to FILE (the table still\n"
                 "           goes to stdout)\n"
                 "  --size   one message size instead of the default ladder or size\n"
                 "  --iters  latency/floor: round trips per size; rate, bw: messages;\n"
                 "           loss: messages per loss rate (default: 64 MiB worth);\n"
                 "           mt: messages per configuration, split over the threads\n"
                 "           (default 300000)\n"
                 "  --window messages in flight (default 64; rate: 64 and 256; incast: 8\n"
                 "           per sender)\n"
                 "  --no-bind  leave the ranks unpinned (default: the ranks on one host\n"
                 "           one CPU each, a rank alone on its host unpinned; mt never\n"
                 "           pins)\n"
                 "  --mode   sharded|global (sets SX_THREAD_MODE); mt also takes both,\n"
                 "           its default\n"
                 "  --threads  mt: threads per rank, e.g. 1,2,4 (default 1, 2, 4, ...\n"
                 "           and the number of online CPUs)\n"
                 "  --oversubscribe  mt: allow more threads than online CPUs\n"
                 "  --transport  the network transport (sets SX_TRANSPORTS; default: the best "
                 "found, udp here)\n"
                 "  -h, --help  this text;  --version  shardx's version\n"
                 "Options take their value as --size 8 or --size=8; --size takes the\n"
                 "suffixes SX_* sizes take (4k, 1m).\n");
}

static int sxb_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *v_p)
{
    char *end = NULL;

    if (text == NULL || text[0] == '-' || text[0] == '\0')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *v_p = v;
    return 0;
}

/* "1,2,4": thread counts per rank for mt, 1 .. SXB_MT_MAX_THREADS each. */
static int sxb_parse_threads(const char *text, sxb_opts_t *o)
{
    char buf[512];
    char *save = NULL;
    uint64_t v;

    if (text == NULL || strlen(text) >= sizeof(buf))
        return -1;
    snprintf(buf, sizeof(buf), "%s", text);
    o->nthreads = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (o->nthreads == SXB_MAX_THREAD_LIST ||
            sxb_parse_u64(tok, 1, SXB_MT_MAX_THREADS, &v) != 0)
            return -1;
        o->threads[o->nthreads++] = (unsigned)v;
    }
    return o->nthreads > 0 ? 0 : -1;
}

static int sxb_parse_mode(const char *text, sxb_opts_t *o)
{
    if (text == NULL)
        return -1;
    if (strcmp(text, "sharded") == 0)
        o->modes = SXB_MODE_SHARDED;
    else if (strcmp(text, "global") == 0)
        o->modes = SXB_MODE_GLOBAL;
    else if (strcmp(text, "both") == 0)
        o->modes = SXB_MODE_SHARDED | SXB_MODE_GLOBAL;
    else
        return -1;
    return 0;
}

/* The checks that need the whole command line. */
static int sxb_check_args(sxb_opts_t *o)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    if (o->cmd != SXB_BW && o->op != SXB_OP_AM) {
        fprintf(stderr, "sx_bench: --op is for bw\n");
        return -1;
    }
    if (o->cmd != SXB_INCAST && (o->seconds_set || o->verify || o->probe)) {
        fprintf(stderr, "sx_bench: --seconds, --verify and --probe are for incast\n");
        return -1;
    }
    if (o->cmd == SXB_INCAST && o->verify && o->size_set && o->size < 16) {
        fprintf(stderr, "sx_bench: incast --verify needs --size 16 or more (a message starts "
                        "with its sender and sequence number)\n");
        return -1;
    }
    if (o->cmd != SXB_MT) {
        if (o->modes == (SXB_MODE_SHARDED | SXB_MODE_GLOBAL) || o->nthreads > 0 ||
            o->oversubscribe) {
            fprintf(stderr, "sx_bench: --mode both, --threads and --oversubscribe are for mt\n");
            return -1;
        }
        /* The other benchmarks read the mode from the environment. */
        if (o->modes != 0 &&
            setenv("SX_THREAD_MODE", o->modes == SXB_MODE_GLOBAL ? "global" : "sharded", 1) != 0)
            return -1;
        return 0;
    }
    if (o->modes == 0)
        o->modes = SXB_MODE_SHARDED | SXB_MODE_GLOBAL;
    for (unsigned i = 0; i < o->nthreads; i++) {
        if (!o->oversubscribe && cpus > 0 && o->threads[i] > (unsigned long)cpus) {
            fprintf(stderr,
                    "sx_bench: --threads %u is more than the %ld online CPUs; add "
                    "--oversubscribe to run it anyway\n",
                    o->threads[i], cpus);
            return -1;
        }
    }
    return 0;
}

/* A value for --size: a number with the suffixes SX_* sizes take (4k, 1m). */
static int sxb_parse_size(const char *text, uint64_t *v_p)
{
    uint64_t v;
    if (text == NULL ||
        sx_config_parse_typed(SX_PARAM_SIZE, NULL, 0, (double)(64ull << 20), text, &v) != 0)
        return -1;
    *v_p = v;
    return 0;
}

/* A value for --seconds: a positive decimal number, at most an hour. */
static int sxb_parse_seconds(const char *text, double *v_p)
{
    char *end = NULL;

    if (text == NULL || text[0] == '\0')
        return -1;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !(v > 0) || v > 3600)
        return -1;
    *v_p = v;
    return 0;
}

/* 0: run; 1: --help or --version printed, exit 0; -1: bad arguments, the
 * error already named. */
static int sxb_parse_args(int argc, char **argv, sxb_opts_t *o)
{
    static const char *const cmds[] = {"latency", "floor", "loss", "rate", "mt", "bw", "incast"};
    const size_t ncmds = sizeof(cmds) / sizeof(cmds[0]);
    enum {
        OPT_JSON = 256,
        OPT_CSV,
        OPT_JSON_FILE,
        OPT_TRANSPORT,
        OPT_NO_BIND,
        OPT_OVERSUB,
        OPT_THREADS,
        OPT_MODE,
        OPT_SIZE,
        OPT_ITERS,
        OPT_WINDOW,
        OPT_SEED,
        OPT_SECONDS,
        OPT_VERIFY,
        OPT_PROBE,
        OPT_OP,
        OPT_VERSION,
    };
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"csv", no_argument, NULL, OPT_CSV},
        {"json-file", required_argument, NULL, OPT_JSON_FILE},
        {"transport", required_argument, NULL, OPT_TRANSPORT},
        {"no-bind", no_argument, NULL, OPT_NO_BIND},
        {"oversubscribe", no_argument, NULL, OPT_OVERSUB},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"mode", required_argument, NULL, OPT_MODE},
        {"size", required_argument, NULL, OPT_SIZE},
        {"iters", required_argument, NULL, OPT_ITERS},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"seed", required_argument, NULL, OPT_SEED},
        {"seconds", required_argument, NULL, OPT_SECONDS},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"probe", no_argument, NULL, OPT_PROBE},
        {"op", required_argument, NULL, OPT_OP},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    const char *cmd = NULL;

    *o = (sxb_opts_t){.window = 64, .seed = 1, .bind = true, .seconds = 10};
    /* The benchmark's name may come first or after the options. */
    optind = 1;
    opterr = 0;
    for (;;) {
        int longi = -1;
        int c = getopt_long(argc, argv, "-:h", longopts, &longi);
        if (c == -1)
            break;
        const char *name = longi >= 0 ? longopts[longi].name : "";
        bool bad = false;
        switch (c) {
        case 1: /* a word: the benchmark */
            if (cmd != NULL) {
                fprintf(stderr, "sx_bench: unexpected word '%s' after the benchmark '%s'\n", optarg,
                        cmd);
                return -1;
            }
            cmd = optarg;
            break;
        case 'h':
            sxb_usage(stdout);
            return 1;
        case OPT_VERSION: {
            sx_build_info_t b;
            printf("sx_bench (shardx) %s\n", sx_build_info(&b) == SX_OK ? b.version : "unknown");
            return 1;
        }
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_CSV:
            o->csv = true;
            break;
        case OPT_JSON_FILE:
            bad = optarg[0] == '\0';
            o->json_file = optarg;
            break;
        case OPT_TRANSPORT:
            bad = optarg[0] == '\0';
            o->transport = optarg;
            break;
        case OPT_NO_BIND:
            o->bind = false;
            break;
        case OPT_OVERSUB:
            o->oversubscribe = true;
            break;
        case OPT_THREADS:
            bad = sxb_parse_threads(optarg, o) != 0;
            break;
        case OPT_MODE:
            bad = sxb_parse_mode(optarg, o) != 0;
            break;
        case OPT_SIZE:
            bad = sxb_parse_size(optarg, &v) != 0;
            o->size = v;
            o->size_set = true;
            break;
        case OPT_ITERS:
            bad = sxb_parse_u64(optarg, 1, 1ull << 32, &v) != 0;
            o->iters = v;
            o->iters_set = true;
            break;
        case OPT_WINDOW:
            bad = sxb_parse_u64(optarg, 1, 1u << 20, &v) != 0;
            o->window = (unsigned)v;
            o->window_set = true;
            break;
        case OPT_SEED:
            bad = sxb_parse_u64(optarg, 0, UINT64_MAX, &v) != 0;
            o->seed = v;
            break;
        case OPT_SECONDS:
            bad = sxb_parse_seconds(optarg, &o->seconds) != 0;
            o->seconds_set = true;
            break;
        case OPT_VERIFY:
            o->verify = true;
            break;
        case OPT_PROBE:
            o->probe = true;
            break;
        case OPT_OP:
            o->op = strcmp(optarg, "put") == 0   ? SXB_OP_PUT
                    : strcmp(optarg, "get") == 0 ? SXB_OP_GET
                                                 : SXB_OP_AM;
            bad = o->op == SXB_OP_AM && strcmp(optarg, "am") != 0;
            break;
        case ':':
            fprintf(stderr, "sx_bench: %s needs a value (see sx_bench --help)\n", argv[optind - 1]);
            return -1;
        default: /* '?' */
            fprintf(stderr, "sx_bench: unknown option '%s' (see sx_bench --help)\n",
                    argv[optind - 1]);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "sx_bench: --%s: bad value '%s' (see sx_bench --help)\n", name, optarg);
            return -1;
        }
    }
    if (cmd == NULL) {
        fprintf(stderr, "sx_bench: which benchmark? (latency, bw, rate, mt, loss, floor, incast; "
                        "see sx_bench --help)\n");
        return -1;
    }
    size_t c = 0;
    while (c < ncmds && strcmp(cmd, cmds[c]) != 0)
        c++;
    if (c == ncmds) {
        fprintf(stderr,
                "sx_bench: unknown benchmark '%s' (latency, bw, rate, mt, loss, floor, incast)\n",
                cmd);
        return -1;
    }
    o->cmd = (sxb_cmd_t)c;
    if (o->json && o->csv) {
        fprintf(stderr, "sx_bench: --json and --csv: choose one\n");
        return -1;
    }
    /* Every engine of the run reads it; an unknown name fails the first
     * engine's creation with the list of transports this build has. */
    if (o->transport != NULL && setenv("SX_TRANSPORTS", o->transport, 1) != 0)
        return -1;
    return sxb_check_args(o);
}

/* A launcher's word for this process's place among the ranks on its host
 * (sx_run's SX_RUN_LOCAL_*, mpirun's OMPI_COMM_WORLD_LOCAL_*): the local
 * rank, or -1 when it says nothing; *size_p gets their number. */
static int sxb_local_rank(unsigned *size_p)
{
    static const char *const vars[][2] = {
        {SX_RUN_ENV_LOCAL_RANK, SX_RUN_ENV_LOCAL_SIZE},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    };

    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        unsigned long long lr, ln;
        if (sxb_env_uint(vars[i][0], CPU_SETSIZE, &lr) &&
            sxb_env_uint(vars[i][1], CPU_SETSIZE, &ln) && lr < ln) {
            *size_p = (unsigned)ln;
            return (int)lr;
        }
    }
    return -1;
}

/*
 * Pins the calling process to the local-th CPU it may run on, local being
 * its index among the ranks on its host (the job's rank when the launcher
 * does not say: two forked ranks, a launcher without local ranks). A rank
 * alone on its host, as on every host of a cluster with one rank each,
 * has no sibling to keep off its core and is left unpinned: pinning it by
 * its job rank would put ranks 2.. of the namespace cluster, which shares
 * this machine's CPUs, on CPUs chosen by rank number and leave the rest
 * floating, which decided the incast's fairness more than the network did.
 * A machine with a single CPU is left alone too (the ranks share it).
 */
static bool sxb_bind(int rank)
{
    cpu_set_t set;
    unsigned local_size = 0;
    int local = sxb_local_rank(&local_size);

    if (local >= 0) {
        if (local_size < 2)
            return false;
        rank = local;
    }
    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 2)
        return false;
    int seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set) || seen++ != rank)
            continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0) {
            sxb_fail("cannot pin to CPU %d: %s (running unpinned)", cpu, strerror(errno));
            return false;
        }
        return true;
    }
    return false;
}

static int sxb_run(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    switch (opts->cmd) {
    case SXB_LATENCY:
        return sxb_bench_latency(ctl, opts);
    case SXB_FLOOR:
        return sxb_bench_floor(ctl, opts);
    case SXB_LOSS:
        return sxb_bench_loss(ctl, opts);
    case SXB_RATE:
        return sxb_bench_rate(ctl, opts);
    case SXB_MT:
        return sxb_bench_mt(ctl, opts);
    case SXB_BW:
        return sxb_bench_bw(ctl, opts);
    case SXB_INCAST:
        return sxb_bench_incast(ctl, opts);
    }
    return -1;
}

int main(int argc, char **argv)
{
    sxb_opts_t opts;
    sxb_ctl_t ctl;

    int parsed = sxb_parse_args(argc, argv, &opts);
    if (parsed > 0)
        return 0;
    if (parsed < 0)
        return 2;
    if (sxb_ctl_start(&ctl, opts.cmd == SXB_INCAST) != 0)
        return 1;
    /* mt runs threads on several shards: see the comment at the top. */
    bool pinned_here = opts.bind && opts.cmd != SXB_MT && sxb_bind(ctl.rank);

    const char *mode = getenv("SX_THREAD_MODE");
    const char *tl = getenv("SX_TRANSPORTS");
    g_mode = (mode != NULL && *mode) ? mode : "sharded";
    if (opts.cmd == SXB_MT) /* each engine of mt sets THREAD_MODE itself */
        g_mode = opts.modes == SXB_MODE_SHARDED  ? "sharded"
                 : opts.modes == SXB_MODE_GLOBAL ? "global"
                                                 : "sharded,global";
    g_transport = (tl != NULL && *tl) ? tl : "udp";

    struct utsname un;
    sx_build_info_t bi;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (uname(&un) != 0)
        memset(&un, 0, sizeof(un));
    if (sx_build_info(&bi) != SX_OK)
        bi = (sx_build_info_t){.version = "unknown", .build_type = "unknown"};
    double load[1] = {NAN};
    (void)getloadavg(load, 1);
    if (sxb_human(&ctl, &opts)) {
        static const char *const names[] = {"latency", "floor", "loss",  "rate",
                                            "mt",      "bw",    "incast"};
        const char *threads = "1 thread per rank";
        const char *pinned = pinned_here ? ", ranks pinned to CPUs"
                             : opts.bind ? ", rank 0 unpinned (alone on its host, or one CPU)"
                                         : "";
        if (opts.cmd == SXB_MT) {
            threads = "T threads per rank";
            pinned = ", no thread pinned";
        }
        printf("# sx_bench %s: shardx %s (%s), %s transport, %s mode, %s%s\n", names[opts.cmd],
               bi.version, bi.build_type, g_transport, g_mode, threads, pinned);
        printf("# host %s, %ld cores, %s %s %s, load average %.2f at start\n", un.nodename, cores,
               un.sysname, un.release, un.machine, load[0]);
        fflush(stdout);
    }

    int rc = sxb_ctl_finish(&ctl, sxb_run(&ctl, &opts));
    /* incast's object is its own: one line that scripts pick out of a
     * job's output (bench/bench_incast.sh, tests/cluster/incast_job.sh). */
    void (*print_json)(FILE *, const struct utsname *, long, const char *, double) =
        opts.cmd == SXB_INCAST ? sxb_incast_json_any : sxb_print_json;
    if (rc == 0 && ctl.rank == 0 && opts.json)
        print_json(stdout, &un, cores, bi.version, load[0]);
    if (rc == 0 && ctl.rank == 0 && opts.json_file != NULL) {
        FILE *f = fopen(opts.json_file, "w");
        if (f == NULL) {
            rc = sxb_fail("cannot write %s: %s", opts.json_file, strerror(errno));
        } else {
            print_json(f, &un, cores, bi.version, load[0]);
            if (fclose(f) != 0)
                rc = sxb_fail("cannot write %s: %s", opts.json_file, strerror(errno));
        }
    }
    if (rc == 0 && ctl.rank == 0 && opts.csv)
        sxb_print_csv();
    free(g_records);
    free(g_counters);
    return rc == 0 ? 0 : 1;
}
