/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ack_socket_bench: does the udp transport's ACK socket (SX_UDP_ACK_SOCKET,
 * src/transports/udp.c) pay off?
 *
 *   ack_socket_bench [--dir bi|uni] [--size LIST] [--count N] [--window N]
 *                    [--reps N] [--order alt|on|off] [--no-bind]
 *
 * Two processes (a fork before any engine exists; the parent is rank 0)
 * each run one single-shard engine, driven by sx_progress in a busy loop.
 * In `bi` both ranks stream --count active messages of each --size to each
 * other at once, --window sends outstanding per rank: the case a priority
 * socket is for, where every ACK one rank owes the other has to share the
 * receive queue with a window of the other's data. `uni` streams from rank
 * 0 only, the control case. Every run builds fresh engines with the ACK
 * socket off or on; --order alt (the default) alternates off, on, off, on,
 * ... so that load from other processes on a shared machine falls on both
 * settings alike, and --reps runs of each setting are summarised by the
 * median and the spread (min..max).
 *
 * Per run it reports the aggregate goodput (bytes delivered in both
 * directions over the slower rank's time from a barrier to its last
 * delivery and completion), the median and 99th percentile of the send
 * completion latency (sx_send to completion; a completion waits for the
 * peer's ACK, so this is where ACKs stuck behind data show), and the
 * engine counters that tell why: timeouts, fast retransmissions, kernel
 * drops, and how many ACKs took the ACK path.
 *
 * ACKB_DEBUG set in the environment adds, per run, each rank's time and
 * p99, and rank 0's mean completion latency by sixteenth of its stream.
 *
 * Both ranks spin, so each needs a CPU: rank r is pinned to the r-th CPU
 * of the inherited mask unless --no-bind. Results are figures, never a
 * pass or fail.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shardx.h>

#define TAG           7
#define CARD_MAX      65536u
#define STALL_NS      (60ull * 1000000000ull) /* no progress this long: a hang */
#define MAX_SIZES     8
#define RUN_LIMIT_SEC 1800

/* Counters read from each rank's engine after a run. */
static const char *const counter_names[] = {
    "rtx_timeout",        "rtx_dupack",      "rtx_sack",        "rto_spurious",
    "tl_rx_kernel_drops", "acks_sent",       "tl_tx_ack_path",  "tl_rx_ack_socket",
    "window_stalls",      "tl_tx_datagrams", "tl_rx_datagrams",
};
#define NCOUNTERS (sizeof(counter_names) / sizeof(counter_names[0]))

/* What one rank measured in one run; rank 1 sends its copy to rank 0. */
typedef struct run_result {
    uint64_t elapsed_ns; /* barrier to last delivery and completion */
    uint64_t rx_bytes;
    uint64_t lat_med_ns, lat_p99_ns;
    uint64_t counters[NCOUNTERS];
} run_result_t;

typedef struct opts {
    bool bidir;
    size_t sizes[MAX_SIZES];
    unsigned nsizes;
    uint64_t count; /* 0: 64 MiB worth per size */
    unsigned window;
    unsigned reps;
    int order; /* -1 alternate, 0 off, 1 on */
    bool bind;
} opts_t;

/* One rank's state; handlers and completions run inside sx_progress on the
 * one thread, so plain fields do. */
static struct {
    int rank;
    int rfd, wfd; /* the pipe pair to the other rank */
    pid_t child;
    sx_engine_h engine;
    sx_peer_h peer;
    int peer_status;
    uint64_t rx_count, rx_bytes;
    uint64_t tx_posted, tx_done, tx_errors;
    uint64_t *start_ns, *lat_ns;
} g;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "ack_socket_bench[rank %d]: %s: %s\n", g.rank, what,
            rc < 0 ? sx_strerror(rc) : strerror(rc));
    return -1;
}

static void on_alarm(int sig)
{
    static const char msg[] = "ack_socket_bench: time limit exceeded\n";
    (void)sig;
    if (g.child > 0)
        kill(g.child, SIGKILL);
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(3);
}

/* ---- the control pipes ---------------------------------------------------- */

static int ctl_write(const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(g.wfd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fail("pipe write", errno);
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Reads @p len bytes; with an engine, keeps progressing it meanwhile (the
 * other rank may be waiting for an ACK that only our progress sends). */
static int ctl_read(void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        struct pollfd pfd = {.fd = g.rfd, .events = POLLIN};
        if (g.engine != NULL) {
            if (sx_progress(g.engine) < 0)
                return fail("sx_progress", SX_ERR_IO);
            if (poll(&pfd, 1, 0) == 0)
                continue;
        }
        ssize_t r = read(g.rfd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            continue;
        if (r <= 0)
            return fail("pipe read (the other rank died?)", r == 0 ? EPIPE : errno);
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static int barrier(void)
{
    char b = 'b';
    return ctl_write(&b, 1) == 0 && ctl_read(&b, 1) == 0 ? 0 : -1;
}

/* ---- engine sessions ------------------------------------------------------ */

static void on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)arg;
    (void)peer_id;
    (void)tag;
    (void)data;
    g.rx_count++;
    g.rx_bytes += len;
}

static void on_done(void *ctx, int status)
{
    uint64_t i = (uint64_t)(uintptr_t)ctx;
    g.lat_ns[i] = now_ns() - g.start_ns[i];
    if (status != SX_OK)
        g.tx_errors++;
    g.tx_done++;
}

static void on_error(void *arg, uint64_t peer_id, int status)
{
    (void)arg;
    (void)peer_id;
    g.peer_status = status;
}

static int session_open(bool ack_socket)
{
    const sx_config_kv_t kv[] = {{"SHARDS", "1"}, {"UDP_ACK_SOCKET", ack_socket ? "yes" : "no"}};
    sx_engine_params_t params = {.field_mask = SX_ENGINE_PARAM_CONFIG | SX_ENGINE_PARAM_NAME,
                                 .config = kv,
                                 .config_count = 2,
                                 .name = g.rank == 0 ? "ackb-rank0" : "ackb-rank1"};
    uint8_t card[CARD_MAX], peer_card[CARD_MAX];
    size_t len = sizeof(card);
    uint32_t len32, peer_len = 0;
    int rc;

    g.engine = NULL;
    g.peer_status = SX_OK;
    if ((rc = sx_engine_create(&params, &g.engine)) != SX_OK)
        return fail("sx_engine_create", rc);
    if ((rc = sx_thread_bind(g.engine, 0)) != SX_OK ||
        (rc = sx_am_register(g.engine, TAG, on_am, NULL)) != SX_OK ||
        (rc = sx_error_register(g.engine, on_error, NULL)) != SX_OK ||
        (rc = sx_engine_address(g.engine, card, &len)) != SX_OK)
        return fail("engine set-up", rc);
    len32 = (uint32_t)len;
    if (ctl_write(&len32, 4) != 0 || ctl_write(card, len) != 0 || ctl_read(&peer_len, 4) != 0)
        return -1;
    if (peer_len == 0 || peer_len > CARD_MAX)
        return fail("card length from the other rank", EPROTO);
    if (ctl_read(peer_card, peer_len) != 0)
        return -1;
    if ((rc = sx_peer_add(g.engine, (uint64_t)(1 - g.rank), peer_card, peer_len, &g.peer)) != SX_OK)
        return fail("sx_peer_add", rc);
    return 0;
}

static void session_close(void)
{
    if (g.engine != NULL)
        sx_engine_destroy(g.engine);
    g.engine = NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Zeroes the stream counters. Only between streams, before the barrier
 * that starts the next: a rank that is still in that barrier progresses
 * its engine and may already receive the other's first messages. */
static void counters_reset(void)
{
    g.rx_count = g.rx_bytes = 0;
    g.tx_posted = g.tx_done = g.tx_errors = 0;
}

/*
 * Streams @p count messages of @p size to the other rank (if @p send) with
 * @p window outstanding, while receiving @p expect; returns when both are
 * done. Latencies go to g.lat_ns, indexed from 0.
 */
static int stream(const uint8_t *buf, size_t size, uint64_t count, unsigned window, bool send,
                  uint64_t expect)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = size};
    uint64_t seen = 0, deadline = now_ns() + STALL_NS;
    unsigned spins = 0;

    if (!send)
        count = 0;
    while (g.tx_done < count || g.rx_count < expect) {
        while (g.tx_posted < count && g.tx_posted - g.tx_done < window) {
            uint64_t i = g.tx_posted;
            g.start_ns[i] = now_ns();
            int rc = sx_send(g.peer, TAG, &iov, 1, on_done, (void *)(uintptr_t)i);
            if (rc == SX_ERR_AGAIN)
                break;
            if (rc != SX_INPROGRESS)
                return fail("sx_send", rc);
            g.tx_posted++;
        }
        int rc = sx_progress(g.engine);
        if (rc < 0)
            return fail("sx_progress", rc);
        if (g.peer_status != SX_OK)
            return fail("peer failed", g.peer_status);
        if (g.tx_errors != 0)
            return fail("a send completed with an error", SX_ERR_IO);
        if ((++spins & 1023) == 0) {
            uint64_t moved = g.tx_done + g.rx_count;
            if (moved != seen) {
                seen = moved;
                deadline = now_ns() + STALL_NS;
            } else if (now_ns() > deadline) {
                return fail("no progress for 60 s", SX_ERR_IO);
            }
        }
    }
    return 0;
}

/* One run: fresh engines, a warm-up window, a barrier, the timed stream. */
static int run_once(const opts_t *o, bool ack_socket, size_t size, uint64_t count,
                    const uint8_t *buf, run_result_t *res)
{
    bool send = o->bidir || g.rank == 0;
    uint64_t expect = (o->bidir || g.rank == 1) ? count : 0;
    uint64_t warm = o->window;

    memset(res, 0, sizeof(*res));
    if (session_open(ack_socket) != 0)
        return -1;
    /* The warm-up connects the channel and gives the RTO estimator its
     * first samples; then both start together. When a rank's warm-up is
     * over, it has received all the other sends before the barrier. */
    counters_reset();
    if (stream(buf, size, warm, o->window, send, (o->bidir || g.rank == 1) ? warm : 0) != 0)
        goto fail;
    counters_reset();
    if (barrier() != 0)
        goto fail;
    uint64_t t0 = now_ns();
    if (stream(buf, size, count, o->window, send, expect) != 0)
        goto fail;
    res->elapsed_ns = now_ns() - t0;
    res->rx_bytes = g.rx_bytes;
    if (send && count > 0 && getenv("ACKB_DEBUG") != NULL && g.rank == 0) {
        /* Where in the stream the slow completions are. */
        uint64_t bins[16] = {0}, slow[16] = {0};
        for (uint64_t i = 0; i < count; i++) {
            bins[i * 16 / count] += g.lat_ns[i];
            slow[i * 16 / count] += g.lat_ns[i] > 5000000;
        }
        printf("    r0 mean lat by 16th of the stream (us):");
        for (int b = 0; b < 16; b++)
            printf(" %.0f/%llu", (double)bins[b] / (double)(count / 16) / 1e3,
                   (unsigned long long)slow[b]);
        printf("\n");
    }
    if (send && count > 0) {
        qsort(g.lat_ns, count, sizeof(uint64_t), cmp_u64);
        res->lat_med_ns = g.lat_ns[count / 2];
        res->lat_p99_ns = g.lat_ns[(count * 99) / 100 < count ? (count * 99) / 100 : count - 1];
    }
    /* Both ranks done: nobody owes anybody an ACK, so the counters are final. */
    if (barrier() != 0)
        goto fail;
    for (size_t k = 0; k < NCOUNTERS; k++) {
        if (sx_stats_value(g.engine, counter_names[k], &res->counters[k]) != SX_OK)
            res->counters[k] = UINT64_MAX;
    }
    if (barrier() != 0)
        goto fail;
    session_close();
    return 0;
fail:
    session_close();
    return -1;
}

/* ---- summary -------------------------------------------------------------- */

typedef struct series {
    double gbps[64], med_us[64], p99_us[64];
    uint64_t rto[64], fast[64], kdrops[64], ackpath[64];
    unsigned n;
} series_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void stat3(const double *v, unsigned n, double *med, double *lo, double *hi)
{
    double s[64];
    memcpy(s, v, n * sizeof(double));
    qsort(s, n, sizeof(double), cmp_double);
    *lo = s[0];
    *hi = s[n - 1];
    *med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void print_summary(const char *what, const series_t *s)
{
    double med, lo, hi, d[64];
    printf("  %-4s n=%u", what, s->n);
    stat3(s->gbps, s->n, &med, &lo, &hi);
    printf("  MB/s %8.1f [%8.1f..%8.1f]", med, lo, hi);
    stat3(s->med_us, s->n, &med, &lo, &hi);
    printf("  lat_med_us %8.1f [%8.1f..%8.1f]", med, lo, hi);
    stat3(s->p99_us, s->n, &med, &lo, &hi);
    printf("  lat_p99_us %8.1f [%8.1f..%8.1f]", med, lo, hi);
    for (unsigned i = 0; i < s->n; i++)
        d[i] = (double)s->rto[i];
    stat3(d, s->n, &med, &lo, &hi);
    printf("  rtx_timeout %.0f [%.0f..%.0f]", med, lo, hi);
    for (unsigned i = 0; i < s->n; i++)
        d[i] = (double)s->kdrops[i];
    stat3(d, s->n, &med, &lo, &hi);
    printf("  kernel_drops %.0f [%.0f..%.0f]\n", med, lo, hi);
}

/* ---- main ----------------------------------------------------------------- */

static int usage(void)
{
    fprintf(stderr,
            "usage: ack_socket_bench [--dir bi|uni] [--size LIST] [--count N] [--window N]\n"
            "                        [--reps N] [--order alt|on|off] [--no-bind]\n"
            "  --dir     bi: both ranks stream to each other (default); uni: rank 0 only\n"
            "  --size    message sizes, e.g. 1024,65536 (default 1024,16384,65536)\n"
            "  --count   messages per rank and run (default: 128 MiB worth per size)\n"
            "  --window  sends outstanding per rank (default 64)\n"
            "  --reps    runs of each setting per size (default 5, at most 32)\n"
            "  --order   alt: off, on, off, on, ... (default); on or off: one setting only\n"
            "  --no-bind leave the ranks unpinned (default: rank r on the r-th CPU)\n");
    return 2;
}

static int parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.bidir = true, .window = 64, .reps = 5, .order = -1, .bind = true};
    o->sizes[0] = 1024;
    o->sizes[1] = 16384;
    o->sizes[2] = 65536;
    o->nsizes = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-bind") == 0) {
            o->bind = false;
            continue;
        }
        if (v == NULL)
            return usage();
        i++;
        if (strcmp(a, "--dir") == 0 && (strcmp(v, "bi") == 0 || strcmp(v, "uni") == 0)) {
            o->bidir = v[0] == 'b';
        } else if (strcmp(a, "--size") == 0) {
            char *s = strdup(v), *save = NULL;
            o->nsizes = 0;
            for (char *t = strtok_r(s, ",", &save); t != NULL && o->nsizes < MAX_SIZES;
                 t = strtok_r(NULL, ",", &save))
                o->sizes[o->nsizes++] = strtoull(t, NULL, 0);
            free(s);
            if (o->nsizes == 0)
                return usage();
        } else if (strcmp(a, "--count") == 0) {
            o->count = strtoull(v, NULL, 0);
        } else if (strcmp(a, "--window") == 0) {
            o->window = (unsigned)strtoul(v, NULL, 0);
        } else if (strcmp(a, "--reps") == 0) {
            o->reps = (unsigned)strtoul(v, NULL, 0);
        } else if (strcmp(a, "--order") == 0) {
            o->order = strcmp(v, "alt") == 0 ? -1 : strcmp(v, "on") == 0 ? 1 : 0;
            if (strcmp(v, "alt") != 0 && strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
                return usage();
        } else {
            return usage();
        }
    }
    if (o->window == 0 || o->reps == 0 || o->reps > 32)
        return usage();
    return 0;
}

static void pin(int rank)
{
    cpu_set_t mask, one;
    int seen = 0;

    if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || CPU_COUNT(&mask) < 2)
        return;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &mask) || seen++ != rank)
            continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0)
            perror("ack_socket_bench: sched_setaffinity");
        return;
    }
}

static int bench(const opts_t *o)
{
    uint64_t max_count = 0;
    for (unsigned s = 0; s < o->nsizes; s++) {
        uint64_t c = o->count ? o->count : (128ull << 20) / (o->sizes[s] ? o->sizes[s] : 1);
        if (c + o->window > max_count)
            max_count = c + o->window;
    }
    g.start_ns = calloc(max_count, sizeof(uint64_t));
    g.lat_ns = calloc(max_count, sizeof(uint64_t));
    size_t max_size = 0;
    for (unsigned s = 0; s < o->nsizes; s++)
        max_size = o->sizes[s] > max_size ? o->sizes[s] : max_size;
    uint8_t *buf = malloc(max_size ? max_size : 1);
    if (g.start_ns == NULL || g.lat_ns == NULL || buf == NULL)
        return fail("memory", ENOMEM);
    memset(buf, 0x5a, max_size);

    if (g.rank == 0) {
        double load[3] = {0};
        if (getloadavg(load, 3) < 0)
            load[0] = -1;
        printf("# ack_socket_bench: %s, window %u, %u runs per setting, order %s, load %.2f\n",
               o->bidir ? "bidirectional bulk" : "one-way bulk", o->window, o->reps,
               o->order < 0 ? "alternating"
               : o->order   ? "on only"
                            : "off only",
               load[0]);
        printf("# MB/s: bytes delivered both ways / slower rank's time; lat: sx_send to "
               "completion at each sender, the worse rank's figure\n");
    }
    for (unsigned s = 0; s < o->nsizes; s++) {
        size_t size = o->sizes[s];
        uint64_t count = o->count ? o->count : (128ull << 20) / (size ? size : 1);
        series_t ser[2];
        memset(ser, 0, sizeof(ser));
        if (g.rank == 0)
            printf("# size %zu, %" PRIu64 " messages per sender\n", size, count);
        unsigned runs = o->order < 0 ? 2 * o->reps : o->reps;
        for (unsigned r = 0; r < runs; r++) {
            bool on = o->order < 0 ? (r % 2 == 1) : o->order == 1;
            run_result_t mine, theirs;
            if (run_once(o, on, size, count, buf, &mine) != 0)
                return -1;
            if (g.rank == 1) {
                if (ctl_write(&mine, sizeof(mine)) != 0)
                    return -1;
                continue;
            }
            if (ctl_read(&theirs, sizeof(theirs)) != 0)
                return -1;
            uint64_t t = mine.elapsed_ns > theirs.elapsed_ns ? mine.elapsed_ns : theirs.elapsed_ns;
            double mbps = (double)(mine.rx_bytes + theirs.rx_bytes) / ((double)t / 1e9) / 1e6;
            if (!o->bidir)
                mbps = (double)theirs.rx_bytes / ((double)theirs.elapsed_ns / 1e9) / 1e6;
            uint64_t med = mine.lat_med_ns, p99 = mine.lat_p99_ns;
            if (o->bidir) {
                med = med > theirs.lat_med_ns ? med : theirs.lat_med_ns;
                p99 = p99 > theirs.lat_p99_ns ? p99 : theirs.lat_p99_ns;
            }
            series_t *se = &ser[on];
            unsigned k = se->n++;
            se->gbps[k] = mbps;
            se->med_us[k] = (double)med / 1e3;
            se->p99_us[k] = (double)p99 / 1e3;
            se->rto[k] = mine.counters[0] + theirs.counters[0];
            se->fast[k] =
                mine.counters[1] + theirs.counters[1] + mine.counters[2] + theirs.counters[2];
            se->kdrops[k] = mine.counters[4] + theirs.counters[4];
            se->ackpath[k] = mine.counters[6] + theirs.counters[6];
            printf("run %2u ack_socket=%-3s size %6zu  %8.1f MB/s  lat med %8.1f us p99 %9.1f "
                   "us  rtx_timeout %3" PRIu64 " fast_rtx %3" PRIu64 " spurious %3" PRIu64
                   " kernel_drops %5" PRIu64 "  acks %6" PRIu64 " via_ack_path %6" PRIu64
                   " ack_socket_rx %6" PRIu64 "\n",
                   r, on ? "on" : "off", size, mbps, se->med_us[k], se->p99_us[k], se->rto[k],
                   se->fast[k], mine.counters[3] + theirs.counters[3], se->kdrops[k],
                   mine.counters[5] + theirs.counters[5], se->ackpath[k],
                   mine.counters[7] + theirs.counters[7]);
            if (getenv("ACKB_DEBUG") != NULL)
                printf("    rank0 %.1f ms p99 %.1f us | rank1 %.1f ms p99 %.1f us\n",
                       (double)mine.elapsed_ns / 1e6, (double)mine.lat_p99_ns / 1e3,
                       (double)theirs.elapsed_ns / 1e6, (double)theirs.lat_p99_ns / 1e3);
            fflush(stdout);
        }
        if (g.rank == 0) {
            printf("# summary, size %zu: median [min..max]\n", size);
            if (ser[0].n > 0)
                print_summary("off", &ser[0]);
            if (ser[1].n > 0)
                print_summary("on", &ser[1]);
            fflush(stdout);
        }
    }
    free(buf);
    free(g.start_ns);
    free(g.lat_ns);
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    int p2c[2], c2p[2];

    if (parse(argc, argv, &o) != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    if (pipe(p2c) != 0 || pipe(c2p) != 0) {
        perror("ack_socket_bench: pipe");
        return 1;
    }
    /* Fork before any engine or thread exists: the child gets a clean copy. */
    pid_t pid = fork();
    if (pid < 0) {
        perror("ack_socket_bench: fork");
        return 1;
    }
    if (pid == 0) {
        /* The child dies with its parent, so a killed run leaves nothing spinning. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        g.rank = 1;
        g.rfd = p2c[0];
        g.wfd = c2p[1];
        close(p2c[1]);
        close(c2p[0]);
    } else {
        g.rank = 0;
        g.child = pid;
        g.rfd = c2p[0];
        g.wfd = p2c[1];
        close(p2c[0]);
        close(c2p[1]);
        signal(SIGALRM, on_alarm);
        alarm(RUN_LIMIT_SEC);
    }
    if (o.bind)
        pin(g.rank);
    int rc = bench(&o);
    session_close();
    if (g.rank == 1)
        _exit(rc == 0 ? 0 : 1);
    close(g.wfd);
    int status = 0;
    waitpid(pid, &status, 0);
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
        rc = fail("rank 1 failed", EIO);
    return rc == 0 ? 0 : 1;
}
