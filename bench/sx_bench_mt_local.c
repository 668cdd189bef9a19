/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mt, one process (issue 21, item 3): scaling without oversubscription.
 *
 * The two-rank mt runs put 2 x T spinning threads on the machine, so on a
 * 2-core machine T = 2 is already oversubscribed and measures the
 * scheduler as much as the library. Here rank 0 alone runs T threads on at
 * most as many CPUs (rank 1 sleeps at a barrier). The process holds two
 * engines, A and B, over the network transport (udp by default; peers of
 * each other through their business cards, as two ranks would be). Thread
 * t is the home of shard t of both: it streams --size-byte messages from
 * A's shard t to B's shard t (lane t, tag t) and from B's back to A's, at
 * most --window of each outstanding, calls sx_progress on both engines,
 * and stops when both directions' messages are completed and delivered.
 * Every thread's work is the same at every T, and in sharded mode no two
 * threads share a shard, so the ideal is T times the one-thread rate. In
 * global mode each engine is one shard behind one lock that all T threads
 * take: the baseline that cannot scale.
 *
 * Figure: messages delivered per second over all threads (both
 * directions), from the release of the threads to the last one's end.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shardx.h>

#include "sx_bench.h"

#define SXB_ML_CARD_MAX 65536u
#define SXB_ML_ITERS    300000u
#define SXB_ML_LINE     64

enum { SXB_ML_A = 0, SXB_ML_B = 1 };

static const char *const sxb_ml_modes[2] = {"sharded", "global"};

typedef struct sxb_ml sxb_ml_t;

/* Thread t: its counters in cache lines of their own. [d] is the
 * direction that starts at engine d (A to B, B to A). */
typedef struct sxb_ml_thr {
    _Alignas(SXB_ML_LINE) atomic_uint_fast64_t done[2]; /* completions */
    atomic_uint_fast64_t rx[2];                         /* deliveries at the far engine */
    atomic_uint errors;
    atomic_int first_error;
    atomic_uint_fast64_t bad_len;
    uint64_t count; /* messages per direction */
    uint64_t start_ns, end_ns;
    int rc;
    sxb_ml_t *ml;
    unsigned index;
    pthread_t tid;
    bool started;
} sxb_ml_thr_t;

/* What a completion callback needs: the thread and the direction. */
typedef struct sxb_ml_ctx {
    sxb_ml_thr_t *thr;
    unsigned dir;
} sxb_ml_ctx_t;

struct sxb_ml {
    sx_engine_h e[2];
    sx_peer_h peer[2]; /* peer[d]: the other engine, as engine d sees it */
    unsigned shards[2];
    unsigned nthreads;
    unsigned window;
    size_t size;
    const uint8_t *buf;
    atomic_bool go;
    atomic_bool abort;
    atomic_uint ready;
    atomic_uint finished;
    atomic_int peer_status;
    sxb_ml_thr_t *thr;
    sxb_ml_ctx_t *ctx; /* [2 * nthreads] */
};

/* ---- callbacks (the thread that progresses the shard) --------------------- */

/* Engine d's handler of tag t: a message of direction 1 - d arrived. */
typedef struct sxb_ml_rxarg {
    sxb_ml_t *ml;
    unsigned dir; /* the direction that ends here */
} sxb_ml_rxarg_t;

static sxb_ml_rxarg_t sxb_ml_rxargs[2];

static void sxb_ml_on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    const sxb_ml_rxarg_t *ra = arg;
    (void)peer_id;
    (void)data;
    if (tag >= ra->ml->nthreads)
        return;
    sxb_ml_thr_t *thr = &ra->ml->thr[tag];
    atomic_fetch_add_explicit(&thr->rx[ra->dir], 1, memory_order_relaxed);
    if (len != ra->ml->size)
        atomic_fetch_add_explicit(&thr->bad_len, 1, memory_order_relaxed);
}

static void sxb_ml_on_done(void *arg, int status)
{
    sxb_ml_ctx_t *c = arg;
    if (status != SX_OK && atomic_fetch_add_explicit(&c->thr->errors, 1, memory_order_relaxed) == 0)
        atomic_store_explicit(&c->thr->first_error, status, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->thr->done[c->dir], 1, memory_order_release);
}

static void sxb_ml_on_error(void *arg, uint64_t peer_id, int status)
{
    sxb_ml_t *ml = arg;
    (void)peer_id;
    atomic_store_explicit(&ml->peer_status, status, memory_order_relaxed);
}

/* ---- the threads ------------------------------------------------------------ */

static void *sxb_ml_thread(void *arg)
{
    sxb_ml_thr_t *thr = arg;
    sxb_ml_t *ml = thr->ml;
    struct iovec iov = {.iov_base = (void *)ml->buf, .iov_len = ml->size};
    sx_send_params_t sp = {.field_mask = SX_SEND_PARAM_LANE, .lane = thr->index};
    uint64_t posted[2] = {0, 0};

    thr->rc = sx_thread_bind(ml->e[SXB_ML_A], thr->index % ml->shards[SXB_ML_A]);
    if (thr->rc == SX_OK)
        thr->rc = sx_thread_bind(ml->e[SXB_ML_B], thr->index % ml->shards[SXB_ML_B]);
    atomic_fetch_add_explicit(&ml->ready, 1, memory_order_release);
    if (thr->rc != SX_OK)
        goto out;
    while (!atomic_load_explicit(&ml->go, memory_order_acquire)) {
        if (atomic_load_explicit(&ml->abort, memory_order_relaxed))
            goto out;
        sched_yield();
    }
    thr->start_ns = sxb_now_ns();
    for (;;) {
        bool all = true;
        for (unsigned d = 0; d < 2; d++) {
            uint64_t done = atomic_load_explicit(&thr->done[d], memory_order_acquire);
            all = all && done >= thr->count &&
                  atomic_load_explicit(&thr->rx[d], memory_order_relaxed) >= thr->count;
            while (posted[d] < thr->count && posted[d] - done < ml->window) {
                int rc =
                    sx_send_ex(ml->peer[d], (uint8_t)thr->index, ml->size ? &iov : NULL,
                               ml->size ? 1 : 0, &sp, sxb_ml_on_done, &ml->ctx[2 * thr->index + d]);
                if (rc != SX_INPROGRESS) {
                    thr->rc = rc;
                    goto out;
                }
                posted[d]++;
            }
        }
        if (all)
            break;
        for (unsigned d = 0; d < 2; d++) {
            int rc = sx_progress(ml->e[d]);
            if (rc < 0) {
                thr->rc = rc;
                goto out;
            }
        }
        if (atomic_load_explicit(&thr->errors, memory_order_relaxed) != 0 ||
            atomic_load_explicit(&ml->abort, memory_order_relaxed) ||
            atomic_load_explicit(&ml->peer_status, memory_order_relaxed) != SX_OK) {
            thr->rc = SX_ERR_CANCELED;
            goto out;
        }
    }
    thr->end_ns = sxb_now_ns();
out:
    atomic_fetch_add_explicit(&ml->finished, 1, memory_order_release);
    return NULL;
}

static uint64_t sxb_ml_moved(sxb_ml_t *ml)
{
    uint64_t sum = 0;
    for (unsigned t = 0; t < ml->nthreads; t++)
        sum += atomic_load_explicit(&ml->thr[t].done[0], memory_order_relaxed) +
               atomic_load_explicit(&ml->thr[t].done[1], memory_order_relaxed) +
               atomic_load_explicit(&ml->thr[t].rx[0], memory_order_relaxed) +
               atomic_load_explicit(&ml->thr[t].rx[1], memory_order_relaxed);
    return sum;
}

/* One phase: @p count messages each way per thread; the rate in *rate_p. */
static int sxb_ml_phase(sxb_ml_t *ml, uint64_t count, double *rate_p)
{
    int rc = 0;

    atomic_store(&ml->go, false);
    atomic_store(&ml->abort, false);
    atomic_store(&ml->ready, 0);
    atomic_store(&ml->finished, 0);
    for (unsigned t = 0; t < ml->nthreads; t++) {
        sxb_ml_thr_t *thr = &ml->thr[t];
        for (unsigned d = 0; d < 2; d++) {
            atomic_store(&thr->done[d], 0);
            atomic_store(&thr->rx[d], 0);
        }
        atomic_store(&thr->errors, 0);
        atomic_store(&thr->first_error, SX_OK);
        atomic_store(&thr->bad_len, 0);
        thr->count = count;
        thr->start_ns = thr->end_ns = 0;
        thr->rc = SX_OK;
    }
    for (unsigned t = 0; t < ml->nthreads; t++) {
        int err = pthread_create(&ml->thr[t].tid, NULL, sxb_ml_thread, &ml->thr[t]);
        if (err != 0) {
            rc = sxb_fail("cannot start thread %u: %s", t, strerror(err));
            atomic_store(&ml->abort, true);
            break;
        }
        ml->thr[t].started = true;
    }
    while (rc == 0 && atomic_load_explicit(&ml->ready, memory_order_acquire) < ml->nthreads)
        sched_yield();
    atomic_store_explicit(&ml->go, true, memory_order_release);
    /* Sleep while they run; give up when nothing moved for the limit. */
    uint64_t seen = 0, deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
    while (rc == 0 && atomic_load_explicit(&ml->finished, memory_order_acquire) < ml->nthreads) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        uint64_t moved = sxb_ml_moved(ml), now = sxb_now_ns();
        if (moved != seen) {
            seen = moved;
            deadline = now + SXB_WAIT_LIMIT_NS;
        } else if (now > deadline) {
            rc =
                sxb_fail("one process: nothing moved for %llu s (%llu of %llu events)",
                         (unsigned long long)(SXB_WAIT_LIMIT_NS / 1000000000ull),
                         (unsigned long long)moved, (unsigned long long)(4 * count * ml->nthreads));
            atomic_store(&ml->abort, true);
        }
    }
    for (unsigned t = 0; t < ml->nthreads; t++) {
        if (ml->thr[t].started)
            pthread_join(ml->thr[t].tid, NULL);
        ml->thr[t].started = false;
    }
    if (rc != 0)
        return rc;
    uint64_t first = UINT64_MAX, last = 0;
    for (unsigned t = 0; t < ml->nthreads; t++) {
        sxb_ml_thr_t *thr = &ml->thr[t];
        if (atomic_load(&thr->errors) != 0)
            return sxb_fail("one process, thread %u: %u sends failed, the first: %s", t,
                            atomic_load(&thr->errors), sx_strerror(atomic_load(&thr->first_error)));
        if (thr->rc != SX_OK)
            return sxb_fail("one process, thread %u: %s", t, sx_strerror(thr->rc));
        for (unsigned d = 0; d < 2; d++) {
            uint64_t got = atomic_load(&thr->rx[d]);
            if (got != count || atomic_load(&thr->bad_len) != 0)
                return sxb_fail("one process, thread %u, direction %u: %llu messages delivered "
                                "(%llu of a wrong length), %llu sent",
                                t, d, (unsigned long long)got,
                                (unsigned long long)atomic_load(&thr->bad_len),
                                (unsigned long long)count);
        }
        first = thr->start_ns < first ? thr->start_ns : first;
        last = thr->end_ns > last ? thr->end_ns : last;
    }
    *rate_p =
        last > first ? (double)(2 * count * ml->nthreads) / ((double)(last - first) / 1e9) : NAN;
    return 0;
}

/* ---- one configuration ------------------------------------------------------ */

static int sxb_ml_config(const sxb_opts_t *opts, unsigned mode, unsigned nthreads, size_t size,
                         const uint8_t *buf, double *rate_p)
{
    uint64_t iters = opts->iters_set ? opts->iters : SXB_ML_ITERS;
    /* iters messages in all, half each way, split over the threads. */
    uint64_t per = iters / 2 / nthreads ? iters / 2 / nthreads : 1;
    uint64_t warmup = per / 10 ? per / 10 : 1;
    static uint8_t card[2][SXB_ML_CARD_MAX];
    size_t len[2] = {sizeof(card[0]), sizeof(card[1])};
    sxb_ml_t ml;
    int rc = -1, err;

    memset(&ml, 0, sizeof(ml));
    ml.nthreads = nthreads;
    ml.window = opts->window;
    ml.size = size;
    ml.buf = buf;
    atomic_init(&ml.peer_status, SX_OK);
    ml.thr = sxb_mt_calloc_aligned(nthreads, sizeof(*ml.thr));
    ml.ctx = calloc(2 * nthreads, sizeof(*ml.ctx));
    if (ml.thr == NULL || ml.ctx == NULL) {
        sxb_fail("out of memory for %u threads", nthreads);
        goto out;
    }
    for (unsigned t = 0; t < nthreads; t++) {
        ml.thr[t].ml = &ml;
        ml.thr[t].index = t;
        ml.ctx[2 * t] = (sxb_ml_ctx_t){&ml.thr[t], SXB_ML_A};
        ml.ctx[2 * t + 1] = (sxb_ml_ctx_t){&ml.thr[t], SXB_ML_B};
    }
    if (sxb_mt_engine(sxb_ml_modes[mode], "bench-mt-local-a", false, &ml.e[SXB_ML_A]) != 0 ||
        sxb_mt_engine(sxb_ml_modes[mode], "bench-mt-local-b", false, &ml.e[SXB_ML_B]) != 0)
        goto out;
    for (unsigned d = 0; d < 2; d++) {
        /* Engine d receives the direction that starts at the other one. */
        sxb_ml_rxargs[d] = (sxb_ml_rxarg_t){&ml, 1 - d};
        if ((err = sx_engine_shard_count(ml.e[d], &ml.shards[d])) != SX_OK ||
            (err = sx_error_register(ml.e[d], sxb_ml_on_error, &ml)) != SX_OK ||
            (err = sx_engine_address(ml.e[d], card[d], &len[d])) != SX_OK) {
            sxb_fail("one process, engine set-up: %s", sx_strerror(err));
            goto out;
        }
        for (unsigned t = 0; t < nthreads; t++) {
            if ((err = sx_am_register(ml.e[d], (uint8_t)t, sxb_ml_on_am, &sxb_ml_rxargs[d])) !=
                SX_OK) {
                sxb_fail("sx_am_register(tag %u): %s", t, sx_strerror(err));
                goto out;
            }
        }
    }
    for (unsigned d = 0; d < 2; d++) {
        if ((err = sx_peer_add(ml.e[d], 1 - d, card[1 - d], len[1 - d], &ml.peer[d])) != SX_OK) {
            sxb_fail("one process, sx_peer_add: %s", sx_strerror(err));
            goto out;
        }
    }
    double warm;
    if (sxb_ml_phase(&ml, warmup, &warm) != 0 || sxb_ml_phase(&ml, per, rate_p) != 0)
        goto out;
    rc = 0;
out:
    /* Both engines are quiet: every message was completed and delivered. */
    sx_engine_destroy(ml.e[SXB_ML_A]);
    sx_engine_destroy(ml.e[SXB_ML_B]);
    free(ml.thr);
    free(ml.ctx);
    return rc;
}

int sxb_mt_local(const sxb_ctl_t *ctl, const sxb_opts_t *opts, bool human, unsigned modes,
                 const unsigned *list, unsigned nlist, size_t size, const uint8_t *buf)
{
    double rates[2][SXB_MAX_THREAD_LIST];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    if (ctl->rank != 0)
        return sxb_ctl_barrier(ctl, NULL, NULL);
    for (unsigned m = 0; m < 2; m++) {
        for (unsigned i = 0; i < nlist; i++)
            rates[m][i] = NAN;
    }
    if (human)
        printf("\n# one process, no oversubscription: rank 0 alone runs T threads (T <= %ld "
               "CPUs);\n# thread t is the home of shard t of two engines A and B in this process "
               "and streams\n# from A's to B's and back over the network transport; msgs/s "
               "delivered, both ways\n%4s %14s %12s %14s %12s %15s\n",
               cpus, "T", "sharded", "ratio_to_t1", "global", "ratio_to_t1", "sharded/global");
    for (unsigned i = 0; i < nlist; i++) {
        if (cpus > 0 && list[i] > (unsigned long)cpus)
            continue;
        for (unsigned m = 0; m < 2; m++) {
            if ((modes & (1u << m)) != 0 &&
                sxb_ml_config(opts, m, list[i], size, buf, &rates[m][i]) != 0)
                return -1;
        }
        char cell[4][32];
        for (unsigned m = 0; m < 2; m++) {
            double t1 = rates[m][0];
            for (unsigned j = 0; j < nlist; j++)
                t1 = list[j] == 1 ? rates[m][j] : t1;
            snprintf(cell[2 * m], sizeof(cell[0]), isnan(rates[m][i]) ? "-" : "%.0f", rates[m][i]);
            snprintf(cell[2 * m + 1], sizeof(cell[0]), isnan(rates[m][i] / t1) ? "-" : "%.3f",
                     rates[m][i] / t1);
            if ((modes & (1u << m)) == 0)
                continue;
            sxb_record_t r = sxb_record("mt_local", sxb_ml_modes[m], size);
            r.threads = list[i];
            sxb_metric(&r, "msg_rate", rates[m][i]);
            sxb_metric(&r, "ratio_to_t1", rates[m][i] / t1);
            sxb_metric(&r, "window", opts->window);
            if ((modes & 3u) == 3u)
                sxb_metric(&r, "sharded_to_global", rates[0][i] / rates[1][i]);
            sxb_record_add(&r);
        }
        char ratio[32] = "-";
        if (!isnan(rates[0][i] / rates[1][i]))
            snprintf(ratio, sizeof(ratio), "%.3f", rates[0][i] / rates[1][i]);
        if (human) {
            printf("%4u %14s %12s %14s %12s %15s\n", list[i], cell[0], cell[1], cell[2], cell[3],
                   ratio);
            fflush(stdout);
        }
    }
    return sxb_ctl_barrier(ctl, NULL, NULL);
}
