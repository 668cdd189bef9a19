/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mt: the multithreaded scaling benchmark (issue 6, item 4).
 *
 * For each thread mode (sharded, then global) and each thread count T,
 * both ranks create fresh engines, the mode set through the engine
 * parameters (THREAD_MODE). Rank 0 runs T sender threads, rank 1 T
 * receiver threads. Sender t takes shard t % shards as its home
 * (sx_thread_bind) and streams messages of --size bytes (8) to the peer
 * with sx_send_ex on lane t and tag t, at most --window of them
 * outstanding, refilled as its completions arrive; it calls sx_progress()
 * while it waits. Receiver t takes shard t % shards of its engine as its
 * home and calls sx_progress() until told to stop. An active-message
 * handler runs on whichever thread progresses its shard, so deliveries are
 * counted per tag (= lane = sender thread) in atomics, and so are
 * completions per sender.
 *
 * No thread is pinned: the library never pins, and an engine builds one
 * shard per core of the cpuset its creating thread may run on, so a rank
 * pinned to one CPU would run one shard. (sx_bench.c skips its per-rank
 * binding for mt.)
 *
 * The main thread of each rank only starts and stops the workers and talks
 * over the control channel; while workers run it sleeps in 1 ms steps,
 * watching for the other rank's death and for a stall (no completion or
 * delivery for SXB_WAIT_LIMIT_NS), and on either it tells the workers to
 * give up, so a failure ends the run instead of hanging it.
 *
 * One phase (a warm-up, then the measured one):
 *   rank 1: reset the lane counters, start the receivers, barrier; wait
 *           for rank 0's "done", then for every lane's last message; stop
 *           and join the receivers; report per lane the count and the
 *           first and last delivery times.
 *   rank 0: barrier; start the senders and release them together; wait
 *           for every completion; join them; send "done"; read the report.
 * Rank 1 keeps progressing until the "done": rank 0's last completions
 * wait for its ACKs.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
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

#define SXB_MT_CARD_MAX      65536u
#define SXB_MT_DEFAULT_ITERS 300000u
#define SXB_MT_DONE          0xd0u
#define SXB_MT_CACHELINE     64

/* What the workers are told (sxb_mt_t.state). */
enum { SXB_MT_RUN = 0, SXB_MT_STOP = 1, SXB_MT_ABORT = 2 };

static const char *const sxb_mt_modes[2] = {"sharded", "global"};

typedef struct sxb_mt sxb_mt_t;

/* Sender thread t (rank 0); a cache line of its own, so that threads do
 * not share one. */
typedef struct sxb_mt_tx {
    /* Bumped by completions, on whichever thread progresses the shard. */
    _Alignas(SXB_MT_CACHELINE) atomic_uint_fast64_t done;
    atomic_uint errors;
    atomic_int first_error;
    /* Written by the thread, read by the main thread after the join. */
    uint64_t start_ns, end_ns;
    int rc;
    /* Set by the main thread before the thread starts. */
    sxb_mt_t *mt;
    unsigned index;
    uint64_t count;
    pthread_t tid;
    bool started;
} sxb_mt_tx_t;

/* Lane t at rank 1: its deliveries, counted by the handler of tag t, and
 * receiver thread t. */
typedef struct sxb_mt_rx {
    _Alignas(SXB_MT_CACHELINE) atomic_uint_fast64_t count;
    atomic_uint_fast64_t first_ns, last_ns;
    atomic_uint_fast64_t bad_len;
    /* Set by the main thread before the receivers start. */
    uint64_t expect;
    size_t size;
    sxb_mt_t *mt;
    unsigned index;
    pthread_t tid;
    bool started;
    int rc; /* the receiver thread's, read after the join */
} sxb_mt_rx_t;

struct sxb_mt {
    const sxb_ctl_t *ctl;
    sx_engine_h engine;
    sx_peer_h peer;
    unsigned shards, peer_shards;
    unsigned nthreads;
    unsigned window;
    size_t size;
    const uint8_t *buf;
    atomic_int state;       /* SXB_MT_RUN / STOP / ABORT */
    atomic_bool go;         /* releases the senders together */
    atomic_uint ready;      /* senders bound and waiting for go */
    atomic_uint finished;   /* workers that returned */
    atomic_uint failures;   /* workers that failed */
    atomic_int peer_status; /* from the error callback */
    sxb_mt_tx_t *tx;        /* rank 0 */
    sxb_mt_rx_t *rx;        /* rank 1 */
};

/* What rank 1 reports of one lane. */
typedef struct sxb_mt_lane {
    uint64_t count, first_ns, last_ns, bad_len;
} sxb_mt_lane_t;

/* One configuration's figures (rank 0). */
typedef struct sxb_mt_result {
    bool valid;
    unsigned mode; /* index into sxb_mt_modes */
    unsigned threads;
    unsigned shards[2]; /* rank 0's, rank 1's */
    uint64_t messages;
    double rx_rate, tx_rate; /* aggregate */
    double thr_min, thr_mean, thr_max;
    double *thread_rate; /* per lane, at rank 1 */
} sxb_mt_result_t;

/* ---- callbacks (any thread) ----------------------------------------------- */

static void sxb_mt_on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    sxb_mt_rx_t *rx = arg;
    (void)peer_id;
    (void)tag;
    (void)data;
    /* Two clock reads per lane and phase, not one per message. */
    uint64_t n = atomic_fetch_add_explicit(&rx->count, 1, memory_order_relaxed) + 1;
    if (n == 1)
        atomic_store_explicit(&rx->first_ns, sxb_now_ns(), memory_order_relaxed);
    if (n == rx->expect)
        atomic_store_explicit(&rx->last_ns, sxb_now_ns(), memory_order_relaxed);
    if (len != rx->size)
        atomic_fetch_add_explicit(&rx->bad_len, 1, memory_order_relaxed);
}

static void sxb_mt_on_done(void *ctx, int status)
{
    sxb_mt_tx_t *tx = ctx;
    if (status != SX_OK && atomic_fetch_add_explicit(&tx->errors, 1, memory_order_relaxed) == 0)
        atomic_store_explicit(&tx->first_error, status, memory_order_relaxed);
    atomic_fetch_add_explicit(&tx->done, 1, memory_order_release);
}

static void sxb_mt_on_error(void *arg, uint64_t peer_id, int status)
{
    sxb_mt_t *mt = arg;
    (void)peer_id;
    atomic_store_explicit(&mt->peer_status, status, memory_order_relaxed);
}

/* ---- worker threads ------------------------------------------------------- */

static bool sxb_mt_running(sxb_mt_t *mt)
{
    return atomic_load_explicit(&mt->state, memory_order_relaxed) == SXB_MT_RUN &&
           atomic_load_explicit(&mt->peer_status, memory_order_relaxed) == SX_OK;
}

static void *sxb_mt_sender(void *arg)
{
    sxb_mt_tx_t *tx = arg;
    sxb_mt_t *mt = tx->mt;
    struct iovec iov = {.iov_base = (void *)mt->buf, .iov_len = mt->size};
    sx_send_params_t sp = {.field_mask = SX_SEND_PARAM_LANE, .lane = tx->index};
    uint64_t posted = 0;

    tx->rc = sx_thread_bind(mt->engine, tx->index % mt->shards);
    atomic_fetch_add_explicit(&mt->ready, 1, memory_order_release);
    if (tx->rc != SX_OK)
        goto out;
    while (!atomic_load_explicit(&mt->go, memory_order_acquire)) {
        if (!sxb_mt_running(mt)) {
            tx->rc = SX_ERR_CANCELED;
            goto out;
        }
        sched_yield();
    }
    tx->start_ns = sxb_now_ns();
    for (;;) {
        uint64_t done = atomic_load_explicit(&tx->done, memory_order_acquire);
        if (done >= tx->count)
            break;
        while (posted < tx->count && posted - done < mt->window) {
            int rc = sx_send_ex(mt->peer, (uint8_t)tx->index, mt->size ? &iov : NULL,
                                mt->size ? 1 : 0, &sp, sxb_mt_on_done, tx);
            if (rc != SX_INPROGRESS) {
                tx->rc = rc;
                goto out;
            }
            posted++;
        }
        int rc = sx_progress(mt->engine);
        if (rc < 0) {
            tx->rc = rc;
            goto out;
        }
        if (atomic_load_explicit(&tx->errors, memory_order_relaxed) != 0 || !sxb_mt_running(mt)) {
            tx->rc = SX_ERR_CANCELED;
            goto out;
        }
    }
    tx->end_ns = sxb_now_ns();
out:
    if (tx->rc != SX_OK)
        atomic_fetch_add_explicit(&mt->failures, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&mt->finished, 1, memory_order_release);
    return NULL;
}

static void *sxb_mt_receiver(void *arg)
{
    sxb_mt_rx_t *rx = arg;
    sxb_mt_t *mt = rx->mt;

    rx->rc = sx_thread_bind(mt->engine, rx->index % mt->shards);
    while (rx->rc == SX_OK && sxb_mt_running(mt)) {
        int rc = sx_progress(mt->engine);
        if (rc < 0)
            rx->rc = rc;
    }
    if (rx->rc != SX_OK)
        atomic_fetch_add_explicit(&mt->failures, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&mt->finished, 1, memory_order_release);
    return NULL;
}

/* Tells the workers to stop (or give up) and joins every started one. */
static void sxb_mt_join(sxb_mt_t *mt, int how)
{
    atomic_store_explicit(&mt->state, how, memory_order_relaxed);
    for (unsigned t = 0; t < mt->nthreads; t++) {
        if (mt->tx != NULL && mt->tx[t].started) {
            pthread_join(mt->tx[t].tid, NULL);
            mt->tx[t].started = false;
        }
        if (mt->rx != NULL && mt->rx[t].started) {
            pthread_join(mt->rx[t].tid, NULL);
            mt->rx[t].started = false;
        }
    }
}

/* ---- the main thread's waits ---------------------------------------------- */

/* A hang detector: fails once @p progress has not moved for
 * SXB_WAIT_LIMIT_NS, or when the other rank died or a worker failed. */
typedef struct sxb_mt_stall {
    uint64_t seen, deadline;
} sxb_mt_stall_t;

static int sxb_mt_stall_check(sxb_mt_t *mt, sxb_mt_stall_t *st, uint64_t progress, const char *what)
{
    if (atomic_load_explicit(&mt->failures, memory_order_relaxed) != 0)
        return sxb_fail("a %s thread failed while waiting for %s",
                        mt->ctl->rank == 0 ? "sender" : "receiver", what);
    int ps = atomic_load_explicit(&mt->peer_status, memory_order_relaxed);
    if (ps != SX_OK)
        return sxb_fail("peer failed: %s", sx_strerror(ps));
    if (st->deadline == 0 || progress != st->seen) {
        st->seen = progress;
        st->deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
    }
    return sxb_check(mt->ctl, st->deadline, what);
}

static void sxb_mt_nap(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

static uint64_t sxb_mt_delivered(sxb_mt_t *mt)
{
    uint64_t sum = 0;
    for (unsigned t = 0; t < mt->nthreads; t++)
        sum += atomic_load_explicit(&mt->rx[t].count, memory_order_relaxed);
    return sum;
}

static uint64_t sxb_mt_completed(sxb_mt_t *mt)
{
    uint64_t sum = 0;
    for (unsigned t = 0; t < mt->nthreads; t++)
        sum += atomic_load_explicit(&mt->tx[t].done, memory_order_relaxed);
    return sum;
}

/* The control channel's idle hook outside the phases (set-up, close). */
static int sxb_mt_poll(void *arg)
{
    sxb_mt_t *mt = arg;
    int rc = sx_progress(mt->engine);
    if (rc < 0)
        return sxb_fail("sx_progress: %s", sx_strerror(rc));
    return 0;
}

/* ---- one phase ------------------------------------------------------------ */

static void sxb_mt_reset(sxb_mt_t *mt, uint64_t per_thread)
{
    atomic_store(&mt->state, SXB_MT_RUN);
    atomic_store(&mt->go, false);
    atomic_store(&mt->ready, 0);
    atomic_store(&mt->finished, 0);
    atomic_store(&mt->failures, 0);
    for (unsigned t = 0; t < mt->nthreads; t++) {
        if (mt->tx != NULL) {
            sxb_mt_tx_t *tx = &mt->tx[t];
            atomic_store(&tx->done, 0);
            atomic_store(&tx->errors, 0);
            atomic_store(&tx->first_error, SX_OK);
            tx->start_ns = tx->end_ns = 0;
            tx->rc = SX_OK;
            tx->count = per_thread;
        }
        if (mt->rx != NULL) {
            sxb_mt_rx_t *rx = &mt->rx[t];
            atomic_store(&rx->count, 0);
            atomic_store(&rx->first_ns, 0);
            atomic_store(&rx->last_ns, 0);
            atomic_store(&rx->bad_len, 0);
            rx->expect = per_thread;
            rx->rc = SX_OK;
        }
    }
}

/* Starts the T senders, releases them together, waits for every
 * completion of @p per_thread messages each and joins them. */
static int sxb_mt_run_senders(sxb_mt_t *mt, uint64_t per_thread)
{
    sxb_mt_stall_t st = {0};

    for (unsigned t = 0; t < mt->nthreads; t++) {
        mt->tx[t].count = per_thread;
        int err = pthread_create(&mt->tx[t].tid, NULL, sxb_mt_sender, &mt->tx[t]);
        if (err != 0) {
            sxb_mt_join(mt, SXB_MT_ABORT);
            return sxb_fail("cannot start sender thread %u: %s", t, strerror(err));
        }
        mt->tx[t].started = true;
    }
    /* Every sender bound to its shard before any starts: they start together. */
    while (atomic_load_explicit(&mt->ready, memory_order_acquire) < mt->nthreads) {
        if (sxb_mt_stall_check(mt, &st, 0, "the sender threads to start") != 0)
            goto fail;
        sched_yield();
    }
    atomic_store_explicit(&mt->go, true, memory_order_release);
    st = (sxb_mt_stall_t){0};
    while (atomic_load_explicit(&mt->finished, memory_order_acquire) < mt->nthreads) {
        if (sxb_mt_stall_check(mt, &st, sxb_mt_completed(mt), "send completions") != 0)
            goto fail;
        sxb_mt_nap();
    }
    sxb_mt_join(mt, SXB_MT_STOP);
    for (unsigned t = 0; t < mt->nthreads; t++) {
        sxb_mt_tx_t *tx = &mt->tx[t];
        if (atomic_load(&tx->errors) != 0)
            return sxb_fail("sender %u: %u sends completed with an error, the first: %s", t,
                            atomic_load(&tx->errors), sx_strerror(atomic_load(&tx->first_error)));
        if (tx->rc != SX_OK)
            return sxb_fail("sender %u: %s", t, sx_strerror(tx->rc));
    }
    return 0;
fail:
    sxb_mt_join(mt, SXB_MT_ABORT);
    return -1;
}

/* Rank 0: T senders stream @p per_thread messages each; @p lanes gets
 * rank 1's report. */
static int sxb_mt_phase_send(sxb_mt_t *mt, uint64_t per_thread, sxb_mt_lane_t *lanes)
{
    const sxb_ctl_t *ctl = mt->ctl;
    uint8_t done = SXB_MT_DONE;

    sxb_mt_reset(mt, per_thread);
    if (sxb_ctl_barrier(ctl, NULL, NULL) != 0 || sxb_mt_run_senders(mt, per_thread) != 0)
        return -1;
    if (sxb_ctl_write(ctl, &done, 1) != 0 ||
        sxb_ctl_read(ctl, lanes, mt->nthreads * sizeof(*lanes), NULL, NULL) != 0)
        return -1;
    for (unsigned t = 0; t < mt->nthreads; t++) {
        if (lanes[t].count != per_thread || lanes[t].bad_len != 0)
            return sxb_fail("lane %u: rank 1 got %llu messages (%llu of a wrong length); "
                            "%llu were sent",
                            t, (unsigned long long)lanes[t].count,
                            (unsigned long long)lanes[t].bad_len, (unsigned long long)per_thread);
    }
    return 0;
}

/* Rank 1: T receivers progress until every lane got @p per_thread
 * messages and rank 0 has all its completions. */
static int sxb_mt_phase_recv(sxb_mt_t *mt, uint64_t per_thread)
{
    const sxb_ctl_t *ctl = mt->ctl;
    sxb_mt_stall_t st = {0};
    sxb_mt_lane_t *lanes = NULL;
    uint8_t done = 0;

    sxb_mt_reset(mt, per_thread);
    for (unsigned t = 0; t < mt->nthreads; t++) {
        int err = pthread_create(&mt->rx[t].tid, NULL, sxb_mt_receiver, &mt->rx[t]);
        if (err != 0) {
            sxb_fail("cannot start receiver thread %u: %s", t, strerror(err));
            goto fail;
        }
        mt->rx[t].started = true;
    }
    if (sxb_ctl_barrier(ctl, NULL, NULL) != 0)
        goto fail;
    /* Sleep on the control channel until rank 0 says it is done. */
    for (;;) {
        struct pollfd pfd = {.fd = ctl->rfd, .events = POLLIN};
        if (poll(&pfd, 1, 1) > 0) {
            if (sxb_ctl_read(ctl, &done, 1, NULL, NULL) != 0)
                goto fail;
            if (done != SXB_MT_DONE) {
                sxb_fail("control channel out of step (read 0x%02x for done)", done);
                goto fail;
            }
            break;
        }
        if (sxb_mt_stall_check(mt, &st, sxb_mt_delivered(mt), "deliveries") != 0)
            goto fail;
    }
    /* Every message was acknowledged, so every message arrived; its
     * handler may still be finishing on some thread. */
    for (;;) {
        bool all = true;
        for (unsigned t = 0; t < mt->nthreads && all; t++)
            all = atomic_load_explicit(&mt->rx[t].count, memory_order_relaxed) >= per_thread;
        if (all)
            break;
        if (sxb_mt_stall_check(mt, &st, sxb_mt_delivered(mt), "the last deliveries") != 0)
            goto fail;
        sxb_mt_nap();
    }
    sxb_mt_join(mt, SXB_MT_STOP);
    for (unsigned t = 0; t < mt->nthreads; t++) {
        if (mt->rx[t].rc != SX_OK)
            return sxb_fail("receiver %u: %s", t, sx_strerror(mt->rx[t].rc));
    }
    lanes = calloc(mt->nthreads, sizeof(*lanes));
    if (lanes == NULL)
        return sxb_fail("out of memory");
    for (unsigned t = 0; t < mt->nthreads; t++) {
        sxb_mt_rx_t *rx = &mt->rx[t];
        lanes[t] = (sxb_mt_lane_t){atomic_load(&rx->count), atomic_load(&rx->first_ns),
                                   atomic_load(&rx->last_ns), atomic_load(&rx->bad_len)};
    }
    int rc = sxb_ctl_write(ctl, lanes, mt->nthreads * sizeof(*lanes));
    free(lanes);
    return rc;
fail:
    sxb_mt_join(mt, SXB_MT_ABORT);
    return -1;
}

/* ---- one engine session --------------------------------------------------- */

int sxb_mt_engine(const char *mode, const char *name, bool sink, sx_engine_h *e_p)
{
    /* The sink answers no handshake: the implicit connection. */
    sx_config_kv_t kv[3] = {{.name = "THREAD_MODE", .value = mode},
                            {.name = "TRANSPORTS", .value = "sink"},
                            {.name = "CPC", .value = "implicit"}};
    sx_engine_params_t params = {.field_mask = SX_ENGINE_PARAM_NAME | SX_ENGINE_PARAM_CONFIG,
                                 .name = name,
                                 .config = kv,
                                 .config_count = sink ? 3 : 1};
    int rc = sx_engine_create(&params, e_p);
    if (rc != SX_OK)
        return sxb_fail("sx_engine_create (%sTHREAD_MODE=%s): %s", sink ? "TRANSPORTS=sink, " : "",
                        mode, sx_strerror(rc));
    return 0;
}

void *sxb_mt_calloc_aligned(size_t n, size_t size)
{
    /* aligned_alloc wants a multiple of the alignment; size is one. */
    void *p = aligned_alloc(SXB_MT_CACHELINE, n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

static int sxb_mt_open(sxb_mt_t *mt, const sxb_ctl_t *ctl, const sxb_opts_t *opts, const char *mode,
                       unsigned nthreads, size_t size, const uint8_t *buf)
{
    uint32_t shards, peer_shards = 0;
    int rc;

    memset(mt, 0, sizeof(*mt));
    mt->ctl = ctl;
    mt->nthreads = nthreads;
    mt->window = opts->window;
    mt->size = size;
    mt->buf = buf;
    atomic_init(&mt->state, SXB_MT_RUN);
    atomic_init(&mt->go, false);
    atomic_init(&mt->ready, 0);
    atomic_init(&mt->finished, 0);
    atomic_init(&mt->failures, 0);
    atomic_init(&mt->peer_status, SX_OK);
    if (ctl->rank == 0)
        mt->tx = sxb_mt_calloc_aligned(nthreads, sizeof(*mt->tx));
    else
        mt->rx = sxb_mt_calloc_aligned(nthreads, sizeof(*mt->rx));
    if (mt->tx == NULL && mt->rx == NULL)
        return sxb_fail("out of memory for %u threads", nthreads);
    /* The arrays are zeroed; the atomics are set per phase (sxb_mt_reset). */
    for (unsigned t = 0; t < nthreads; t++) {
        if (mt->tx != NULL) {
            mt->tx[t].mt = mt;
            mt->tx[t].index = t;
        } else {
            mt->rx[t].mt = mt;
            mt->rx[t].index = t;
            mt->rx[t].size = size;
        }
    }

    if (sxb_mt_engine(mode, ctl->rank == 0 ? "bench-mt-rank0" : "bench-mt-rank1", false,
                      &mt->engine) != 0)
        goto fail;
    if ((rc = sx_engine_shard_count(mt->engine, &mt->shards)) != SX_OK ||
        (rc = sx_error_register(mt->engine, sxb_mt_on_error, mt)) != SX_OK) {
        sxb_fail("engine set-up: %s", sx_strerror(rc));
        goto fail;
    }
    for (unsigned t = 0; mt->rx != NULL && t < nthreads; t++) {
        rc = sx_am_register(mt->engine, (uint8_t)t, sxb_mt_on_am, &mt->rx[t]);
        if (rc != SX_OK) {
            sxb_fail("sx_am_register(tag %u): %s", t, sx_strerror(rc));
            goto fail;
        }
    }
    /* The cards, then the shard counts. */
    shards = mt->shards;
    if (sxb_card_swap(ctl, mt->engine, &mt->peer) != 0 ||
        sxb_ctl_write(ctl, &shards, sizeof(shards)) != 0 ||
        sxb_ctl_read(ctl, &peer_shards, sizeof(peer_shards), NULL, NULL) != 0)
        goto fail;
    mt->peer_shards = peer_shards;
    return 0;
fail:
    sx_engine_destroy(mt->engine);
    mt->engine = NULL;
    free(mt->tx);
    free(mt->rx);
    mt->tx = NULL;
    mt->rx = NULL;
    return -1;
}

/* Ends a session; every worker is joined by now. After the phases neither
 * rank owes the other anything, so the counters are final. */
static int sxb_mt_close(sxb_mt_t *mt, const char *label, bool ok)
{
    uint64_t mine[SXB_NCOUNTERS], theirs[SXB_NCOUNTERS];
    const sxb_ctl_t *ctl = mt->ctl;
    int rc = ok ? 0 : -1;

    if (rc == 0) {
        sxb_counters_read(mt->engine, mine);
        if (ctl->rank == 1) {
            rc = sxb_ctl_write(ctl, mine, sizeof(mine));
        } else {
            rc = sxb_ctl_read(ctl, theirs, sizeof(theirs), sxb_mt_poll, mt);
            if (rc == 0)
                sxb_counters_add("mt", label, mine, theirs);
        }
    }
    /* Neither rank destroys its engine while the other may need it. */
    if (rc == 0)
        rc = sxb_ctl_barrier(ctl, sxb_mt_poll, mt);
    sx_engine_destroy(mt->engine);
    mt->engine = NULL;
    /* Freed only now: a completion may run until the engine is gone. */
    free(mt->tx);
    free(mt->rx);
    mt->tx = NULL;
    mt->rx = NULL;
    return rc;
}

/* ---- figures -------------------------------------------------------------- */

static double sxb_mt_rate(uint64_t count, uint64_t first_ns, uint64_t last_ns)
{
    if (last_ns <= first_ns)
        return NAN;
    return (double)count / ((double)(last_ns - first_ns) / 1e9);
}

/* Rank 0: the figures of the measured phase. */
static int sxb_mt_figures(const sxb_mt_t *mt, const sxb_mt_lane_t *lanes, sxb_mt_result_t *res)
{
    uint64_t total = 0, first = UINT64_MAX, last = 0, tx_first = UINT64_MAX, tx_last = 0;
    double sum = 0;

    res->thread_rate = calloc(mt->nthreads, sizeof(double));
    if (res->thread_rate == NULL)
        return sxb_fail("out of memory");
    res->thr_min = INFINITY;
    res->thr_max = -INFINITY;
    for (unsigned t = 0; t < mt->nthreads; t++) {
        const sxb_mt_lane_t *l = &lanes[t];
        total += l->count;
        first = l->first_ns < first ? l->first_ns : first;
        last = l->last_ns > last ? l->last_ns : last;
        tx_first = mt->tx[t].start_ns < tx_first ? mt->tx[t].start_ns : tx_first;
        tx_last = mt->tx[t].end_ns > tx_last ? mt->tx[t].end_ns : tx_last;
        double r = sxb_mt_rate(l->count, l->first_ns, l->last_ns);
        res->thread_rate[t] = r;
        sum += r;
        res->thr_min = r < res->thr_min ? r : res->thr_min;
        res->thr_max = r > res->thr_max ? r : res->thr_max;
    }
    res->messages = total;
    res->rx_rate = sxb_mt_rate(total, first, last);
    res->tx_rate = sxb_mt_rate(total, tx_first, tx_last);
    res->thr_mean = sum / mt->nthreads;
    res->shards[0] = mt->shards;
    res->shards[1] = mt->peer_shards;
    res->valid = true;
    return 0;
}

/* One configuration: a fresh engine pair, a warm-up, the measured phase. */
static int sxb_mt_config(const sxb_ctl_t *ctl, const sxb_opts_t *opts, unsigned mode,
                         unsigned nthreads, size_t size, const uint8_t *buf, sxb_mt_result_t *res)
{
    uint64_t iters = opts->iters_set ? opts->iters : SXB_MT_DEFAULT_ITERS;
    uint64_t per_thread = iters / nthreads ? iters / nthreads : 1;
    uint64_t warmup =
        per_thread / 10 < 1000 ? (per_thread < 1000 ? per_thread : 1000) : per_thread / 10;
    sxb_mt_lane_t *lanes = NULL;
    sxb_mt_t mt;
    char label[48];
    bool ok;

    snprintf(label, sizeof(label), "%s,T=%u", sxb_mt_modes[mode], nthreads);
    if (sxb_mt_open(&mt, ctl, opts, sxb_mt_modes[mode], nthreads, size, buf) != 0)
        return -1;
    if (ctl->rank == 0) {
        lanes = calloc(nthreads, sizeof(*lanes));
        ok = lanes != NULL && sxb_mt_phase_send(&mt, warmup, lanes) == 0 &&
             sxb_mt_phase_send(&mt, per_thread, lanes) == 0 && sxb_mt_figures(&mt, lanes, res) == 0;
    } else {
        ok = sxb_mt_phase_recv(&mt, warmup) == 0 && sxb_mt_phase_recv(&mt, per_thread) == 0;
    }
    free(lanes);
    res->mode = mode;
    res->threads = nthreads;
    return sxb_mt_close(&mt, label, ok);
}

/* ---- injection only: the engine against the sink transport ---------------- */

/*
 * Rank 0 alone: T sender threads of one engine stream to a peer that
 * exists only as a business card (a second engine, never progressed)
 * over the sink transport, which acknowledges every packet as it is
 * posted. The same sender threads and window as the network runs; the
 * figure is the sends completed per second over all threads, from the
 * first send to the last completion.
 */
static int sxb_mt_inject_config(const sxb_ctl_t *ctl, const sxb_opts_t *opts, unsigned mode,
                                unsigned nthreads, size_t size, const uint8_t *buf, double *rate_p)
{
    uint64_t iters = opts->iters_set ? opts->iters : SXB_MT_DEFAULT_ITERS;
    uint64_t per_thread = iters / nthreads ? iters / nthreads : 1;
    uint64_t warmup = per_thread / 10 ? per_thread / 10 : 1;
    sx_engine_h ghost = NULL;
    uint8_t card[SXB_MT_CARD_MAX];
    size_t len = sizeof(card);
    sxb_mt_t mt;
    int rc = -1;

    memset(&mt, 0, sizeof(mt));
    mt.ctl = ctl;
    mt.nthreads = nthreads;
    mt.window = opts->window;
    mt.size = size;
    mt.buf = buf;
    atomic_init(&mt.peer_status, SX_OK);
    mt.tx = sxb_mt_calloc_aligned(nthreads, sizeof(*mt.tx));
    if (mt.tx == NULL)
        return sxb_fail("out of memory for %u threads", nthreads);
    for (unsigned t = 0; t < nthreads; t++) {
        mt.tx[t].mt = &mt;
        mt.tx[t].index = t;
    }
    if (sxb_mt_engine(sxb_mt_modes[mode], "bench-inject-peer", true, &ghost) != 0 ||
        sxb_mt_engine(sxb_mt_modes[mode], "bench-inject", true, &mt.engine) != 0)
        goto out;
    int err;
    if ((err = sx_engine_address(ghost, card, &len)) != SX_OK ||
        (err = sx_engine_shard_count(mt.engine, &mt.shards)) != SX_OK ||
        (err = sx_error_register(mt.engine, sxb_mt_on_error, &mt)) != SX_OK ||
        (err = sx_peer_add(mt.engine, 1, card, len, &mt.peer)) != SX_OK) {
        sxb_fail("injection-only set-up: %s", sx_strerror(err));
        goto out;
    }
    sxb_mt_reset(&mt, warmup);
    if (sxb_mt_run_senders(&mt, warmup) != 0)
        goto out;
    sxb_mt_reset(&mt, per_thread);
    if (sxb_mt_run_senders(&mt, per_thread) != 0)
        goto out;
    uint64_t first = UINT64_MAX, last = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        first = mt.tx[t].start_ns < first ? mt.tx[t].start_ns : first;
        last = mt.tx[t].end_ns > last ? mt.tx[t].end_ns : last;
    }
    *rate_p = sxb_mt_rate(per_thread * nthreads, first, last);
    rc = 0;
out:
    sx_engine_destroy(mt.engine);
    sx_engine_destroy(ghost);
    free(mt.tx);
    return rc;
}

/* The injection-only variant for every mode and thread count; rank 1
 * waits at a barrier meanwhile. */
static int sxb_mt_inject(const sxb_ctl_t *ctl, const sxb_opts_t *opts, bool human, unsigned modes,
                         const unsigned *list, unsigned nlist, size_t size, const uint8_t *buf)
{
    double rates[2][SXB_MAX_THREAD_LIST];

    if (ctl->rank != 0)
        return sxb_ctl_barrier(ctl, NULL, NULL);
    if (human)
        printf("\n# injection only: rank 0's T threads send to a peer behind the sink transport,\n"
               "# which acknowledges each packet as it is posted: the engine's own cost, no "
               "kernel;\n# sends completed per second over all threads\n"
               "%8s %4s %14s %12s\n",
               "mode", "T", "msgs_per_s", "ratio_to_t1");
    for (unsigned m = 0; m < 2; m++) {
        if ((modes & (1u << m)) == 0)
            continue;
        double t1 = NAN;
        for (unsigned i = 0; i < nlist; i++) {
            if (sxb_mt_inject_config(ctl, opts, m, list[i], size, buf, &rates[m][i]) != 0)
                return -1;
            if (list[i] == 1)
                t1 = rates[m][i];
            sxb_record_t r = sxb_record("mt_inject", sxb_mt_modes[m], size);
            r.threads = list[i];
            sxb_metric(&r, "msg_rate", rates[m][i]);
            sxb_metric(&r, "ratio_to_t1", rates[m][i] / t1);
            sxb_metric(&r, "window", opts->window);
            sxb_record_add(&r);
            if (human) {
                printf("%8s %4u %14.0f %12.3f\n", sxb_mt_modes[m], list[i], rates[m][i],
                       rates[m][i] / t1);
                fflush(stdout);
            }
        }
    }
    return sxb_ctl_barrier(ctl, NULL, NULL);
}

/* --threads, or 1, 2, 4, ... and the number of online CPUs. */
static unsigned sxb_mt_thread_list(const sxb_opts_t *opts, unsigned *list)
{
    unsigned n = 0;

    if (opts->nthreads > 0) {
        memcpy(list, opts->threads, opts->nthreads * sizeof(*list));
        return opts->nthreads;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned max = cpus < 1                          ? 1
                   : cpus > (long)SXB_MT_MAX_THREADS ? SXB_MT_MAX_THREADS
                                                     : (unsigned)cpus;
    for (unsigned t = 1; t < max && n < SXB_MAX_THREAD_LIST - 1; t *= 2)
        list[n++] = t;
    list[n++] = max;
    return n;
}

static const sxb_mt_result_t *sxb_mt_find(const sxb_mt_result_t *res, unsigned n, unsigned mode,
                                          unsigned threads)
{
    for (unsigned i = 0; i < n; i++) {
        if (res[i].valid && res[i].mode == mode && res[i].threads == threads)
            return &res[i];
    }
    return NULL;
}

static void sxb_mt_print_config(const sxb_mt_result_t *r)
{
    char shards[24];

    snprintf(shards, sizeof(shards), "%u/%u", r->shards[0], r->shards[1]);
    printf("%8s %4u %7s %9llu %14.0f %14.0f   ", sxb_mt_modes[r->mode], r->threads, shards,
           (unsigned long long)r->messages, r->rx_rate, r->tx_rate);
    for (unsigned t = 0; t < r->threads; t++)
        printf("%s%.0f", t ? " " : "", r->thread_rate[t]);
    printf("\n");
    fflush(stdout);
}

/* Records for the JSON, and the side-by-side table. */
static void sxb_mt_report(const sxb_opts_t *opts, bool human, size_t size,
                          const sxb_mt_result_t *res, unsigned nres, const unsigned *list,
                          unsigned nlist)
{
    for (unsigned i = 0; i < nres; i++) {
        const sxb_mt_result_t *r = &res[i];
        if (!r->valid)
            continue;
        const sxb_mt_result_t *t1 = sxb_mt_find(res, nres, r->mode, 1);
        const sxb_mt_result_t *g = sxb_mt_find(res, nres, 1, r->threads);
        const sxb_mt_result_t *s = sxb_mt_find(res, nres, 0, r->threads);
        sxb_record_t rec = sxb_record("mt", sxb_mt_modes[r->mode], size);
        rec.threads = r->threads;
        sxb_metric(&rec, "msg_rate", r->rx_rate);
        sxb_metric(&rec, "ratio_to_t1", t1 != NULL ? r->rx_rate / t1->rx_rate : NAN);
        if (s != NULL && g != NULL)
            sxb_metric(&rec, "sharded_to_global", s->rx_rate / g->rx_rate);
        sxb_metric(&rec, "msg_rate_per_thread", r->thr_mean);
        sxb_metric(&rec, "msg_rate_per_thread_min", r->thr_min);
        sxb_metric(&rec, "msg_rate_per_thread_max", r->thr_max);
        sxb_metric(&rec, "msg_rate_sender", r->tx_rate);
        sxb_metric(&rec, "messages", (double)r->messages);
        sxb_metric(&rec, "window", opts->window);
        sxb_metric(&rec, "shards", r->shards[0]);
        sxb_record_add(&rec);
    }
    if (!human)
        return;
    printf("\n# scaling: aggregate msgs/s at rank 1 (first to last delivery over all threads);\n"
           "# ratio_to_t1 = aggregate at T / aggregate at T=1 of the same mode\n"
           "%4s %14s %12s %14s %12s %15s\n",
           "T", "sharded", "ratio_to_t1", "global", "ratio_to_t1", "sharded/global");
    for (unsigned i = 0; i < nlist; i++) {
        unsigned T = list[i];
        bool dup = false;
        for (unsigned j = 0; j < i; j++)
            dup = dup || list[j] == T;
        if (dup)
            continue;
        char cell[4][32];
        for (unsigned m = 0; m < 2; m++) {
            const sxb_mt_result_t *r = sxb_mt_find(res, nres, m, T);
            const sxb_mt_result_t *t1 = sxb_mt_find(res, nres, m, 1);
            snprintf(cell[2 * m], sizeof(cell[0]), "-");
            snprintf(cell[2 * m + 1], sizeof(cell[0]), "-");
            if (r != NULL)
                snprintf(cell[2 * m], sizeof(cell[0]), "%.0f", r->rx_rate);
            if (r != NULL && t1 != NULL)
                snprintf(cell[2 * m + 1], sizeof(cell[0]), "%.3f", r->rx_rate / t1->rx_rate);
        }
        const sxb_mt_result_t *s = sxb_mt_find(res, nres, 0, T);
        const sxb_mt_result_t *g = sxb_mt_find(res, nres, 1, T);
        char ratio[32] = "-";
        if (s != NULL && g != NULL)
            snprintf(ratio, sizeof(ratio), "%.3f", s->rx_rate / g->rx_rate);
        printf("%4u %14s %12s %14s %12s %15s\n", T, cell[0], cell[1], cell[2], cell[3], ratio);
    }
    fflush(stdout);
}

int sxb_bench_mt(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    unsigned list[SXB_MAX_THREAD_LIST];
    unsigned nlist = sxb_mt_thread_list(opts, list);
    unsigned modes = opts->modes ? opts->modes : SXB_MODE_SHARDED | SXB_MODE_GLOBAL;
    size_t size = opts->size_set ? opts->size : 8;
    uint64_t iters = opts->iters_set ? opts->iters : SXB_MT_DEFAULT_ITERS;
    size_t first_counters = sxb_counters_count();
    bool human = sxb_human(ctl, opts);
    sxb_mt_result_t res[2 * SXB_MAX_THREAD_LIST];
    unsigned nres = 0;
    int rc = 0;

    memset(res, 0, sizeof(res));
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return sxb_fail("out of memory for a %zu-byte buffer", size);
    memset(buf, 0xa5, size ? size : 1);
    if (human) {
        printf("\n# mt: T sender threads on rank 0 stream to T receiver threads on rank 1; thread "
               "t\n# has home shard t %% shards and sends on lane t (the peer's shard t) with "
               "tag t.\n# %zu-byte sx_send_ex, window %u per thread, %llu messages per "
               "configuration split\n# over the threads, after a warm-up of a tenth; fresh "
               "engines for each configuration.\n# rx: msgs/s at rank 1, first to last "
               "delivery; tx: msgs/s at rank 0, first send\n# to last completion; "
               "shards: rank 0's/rank 1's\n"
               "%8s %4s %7s %9s %14s %14s   %s\n",
               size, opts->window, (unsigned long long)iters, "mode", "T", "shards", "messages",
               "rx_msgs_per_s", "tx_msgs_per_s", "rx msgs/s per thread");
        fflush(stdout);
    }
    for (unsigned m = 0; m < 2 && rc == 0; m++) {
        if ((modes & (1u << m)) == 0)
            continue;
        for (unsigned i = 0; i < nlist && rc == 0; i++) {
            sxb_mt_result_t *r = &res[nres++];
            rc = sxb_mt_config(ctl, opts, m, list[i], size, buf, r);
            if (rc == 0 && human)
                sxb_mt_print_config(r);
        }
    }
    if (rc == 0 && ctl->rank == 0) {
        sxb_mt_report(opts, human, size, res, nres, list, nlist);
    }
    if (rc == 0)
        rc = sxb_mt_inject(ctl, opts, human, modes, list, nlist, size, buf);
    if (rc == 0)
        rc = sxb_mt_local(ctl, opts, human, modes, list, nlist, size, buf);
    if (rc == 0 && human)
        sxb_counters_print(first_counters);
    for (unsigned i = 0; i < nres; i++)
        free(res[i].thread_rate);
    free(buf);
    return rc;
}
