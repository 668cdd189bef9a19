/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The `sxrun` modex: a process started by sx_run finds the launcher's
 * rendezvous server at SX_RUN_ADDR and talks to it over the engine's OOB
 * endpoint (messages in oob.h, the server in rendezvous.c).
 *
 * Every answer from the launcher is taken by a posted receive, never by a
 * blocking one, so that an RDV_ERROR can end whatever waits:
 *
 *   RDV_ERROR  one receive posted by init for the whole life of the modex;
 *              it fails the exchange and every pending fence.
 *   RDV_ALL    posted by exchange before it sends its PUT; exchange waits
 *              on a condition variable for it, the error, or its timeout.
 *   RDV_DONE   one receive per fence, posted before its FENCE is sent.
 *              The launcher answers rounds in order over one connection
 *              and posted receives match in the order they were posted,
 *              so the k-th one gets DONE k (checked).
 *
 * The OOB has no way to withdraw a posted receive, so those still posted
 * at fini (the error watcher, always) keep the state alive: it is counted
 * (`refs`), and the last completion, at the latest SX_ERR_SHUTDOWN when
 * the OOB endpoint closes, frees it.
 *
 * Synchronization: `lock` guards the state's fields; receive callbacks
 * take it on the OOB progress thread. User callbacks (fence) run without
 * it, exactly once for each fence_nb that returned SX_OK (never for one
 * that returned an error): SX_OK when the round is done, the status the
 * launcher's RDV_ERROR names (SX_ERR_PEER_UNREACHABLE: a rank left while
 * this one waits for it; SX_ERR_PROTO for a protocol fault, or when it
 * names none) or SX_ERR_PROTO when it answered out of order, the OOB's
 * error when a message could not go (SX_ERR_SHUTDOWN when the endpoint
 * closed), SX_ERR_CANCELED when fini came first. Like exchange and get,
 * fence_nb calls must not overlap one another (the caller serializes
 * them): rounds are numbered in call order, and the k-th posted DONE
 * receive must belong to round k. A fence callback may call fence_nb.
 */
#include "common/le.h"
#include "bootstrap/modex.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shardx.h>

#include "common/log.h"

/* How long exchange waits for every rank's blob. Long enough for a slow
 * rank on a loaded machine; sx_run's --timeout is the way to bound a job.
 * When it passes, exchange returns SX_ERR_AGAIN (with a log line). */
#define SX_MODEX_SXRUN_TIMEOUT_MS 120000
/* Ranks a job may have; sx_run starts far fewer. */
#define SX_MODEX_SXRUN_MAX_SIZE (1u << 20)

typedef struct sx_sxrun sx_sxrun_t;

typedef struct sx_sxrun_fence {
    sx_sxrun_t *st;
    uint32_t round;
    sx_modex_cb_t cb;
    void *arg;
    uint8_t buf[8];
    int refs;       /* the DONE receive and the FENCE send; under st->lock */
    bool completed; /* cb has been or is being called; under st->lock */
    bool listed;    /* on st->fences; under st->lock */
    struct sx_sxrun_fence *next;
} sx_sxrun_fence_t;

struct sx_sxrun {
    sx_oob_t *oob;
    uint32_t rank, size;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;    /* the modex itself and every posted receive */
    bool closed; /* fini has run */
    int failed;  /* SX_OK, or RDV_ERROR's status once it came */
    char errbuf[SX_MODEX_SXRUN_ERROR_MAX];

    bool exchanged;     /* exchange has been called (there is one) */
    bool all_arrived;   /* the RDV_ALL receive has completed */
    int all_status;     /* its status */
    size_t all_len;     /* its length */
    uint8_t *all;       /* the RDV_ALL payload */
    bool have_blobs;    /* exchange parsed it: the two arrays below are valid */
    uint32_t *blob_off; /* per rank, offsets into `all` */
    uint32_t *blob_len;

    uint32_t next_round;      /* the last fence round entered */
    sx_sxrun_fence_t *fences; /* not completed yet, in round order */
};

static bool sx_sxrun_detect(void)
{
    return getenv(SX_RUN_ENV_ADDR) != NULL && getenv(SX_RUN_ENV_RANK) != NULL &&
           getenv(SX_RUN_ENV_SIZE) != NULL;
}

/* Decimal digits only: no sign, no space, no base prefix, no overflow. */
static bool sx_sxrun_parse_u32(const char *s, uint32_t *v_p)
{
    uint64_t v = 0;

    if (s == NULL || *s == '\0')
        return false;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > UINT32_MAX)
            return false;
    }
    *v_p = (uint32_t)v;
    return true;
}

/* Drops a reference; frees the state with the last. Called with the lock
 * held; returns with it released. */
static void sx_sxrun_unref_unlock(sx_sxrun_t *st)
{
    bool last = --st->refs == 0;

    pthread_mutex_unlock(&st->lock);
    if (!last)
        return;
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    free(st->all);
    free(st->blob_off);
    free(st->blob_len);
    free(st);
}

/* Takes the fence off the list of pending ones; the caller then calls its
 * callback without the lock. Lock held. */
static void sx_sxrun_fence_unlist(sx_sxrun_t *st, sx_sxrun_fence_t *f)
{
    for (sx_sxrun_fence_t **pp = &st->fences; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    }
    f->listed = false;
    f->next = NULL;
}

/* Drops one of the fence's two references (lock held); frees it with the
 * last. The fence holds a reference on the state, dropped with it. */
static bool sx_sxrun_fence_unref(sx_sxrun_fence_t *f)
{
    if (--f->refs > 0)
        return false;
    free(f);
    return true;
}

/* Completes @p f with @p status unless done already; then drops a fence
 * reference and, if that was the fence's last, the state reference it held. */
static void sx_sxrun_fence_finish(sx_sxrun_fence_t *f, int status)
{
    sx_sxrun_t *st = f->st;
    sx_modex_cb_t cb = NULL;
    void *arg = NULL;

    pthread_mutex_lock(&st->lock);
    if (!f->completed) {
        f->completed = true;
        if (f->listed)
            sx_sxrun_fence_unlist(st, f);
        cb = f->cb;
        arg = f->arg;
        /* A round that failed (its FENCE not sent, its DONE not
         * received) is spent all the same: a later FENCE would be out of
         * order for the launcher, and a later DONE receive would take
         * this round's answer. The modex fails with it; later calls say
         * so at once. */
        if (status != SX_OK && status != SX_ERR_CANCELED && status != SX_ERR_SHUTDOWN &&
            st->failed == SX_OK) {
            st->failed = status;
            sx_error("modex",
                     "rank %" PRIu32 ": fence round %" PRIu32
                     " failed (%s); the modex cannot be used any more",
                     st->rank, f->round, sx_status_name(status));
        }
    }
    pthread_mutex_unlock(&st->lock);
    if (cb != NULL)
        cb(arg, status);
    pthread_mutex_lock(&st->lock);
    if (sx_sxrun_fence_unref(f))
        sx_sxrun_unref_unlock(st);
    else
        pthread_mutex_unlock(&st->lock);
}

/* Completes every pending fence with @p status (launcher error, fini). */
static void sx_sxrun_fail_fences(sx_sxrun_t *st, int status)
{
    for (;;) {
        pthread_mutex_lock(&st->lock);
        sx_sxrun_fence_t *f = st->fences;
        if (f == NULL) {
            pthread_mutex_unlock(&st->lock);
            return;
        }
        sx_sxrun_fence_unlist(st, f);
        f->completed = true;
        sx_modex_cb_t cb = f->cb;
        void *arg = f->arg;
        pthread_mutex_unlock(&st->lock);
        cb(arg, status);
    }
}

/* The RDV_ERROR receive, posted once by init. */
static void sx_sxrun_on_error(void *arg, int status, uint64_t peer, uint32_t tag, size_t len)
{
    sx_sxrun_t *st = arg;

    (void)peer;
    (void)tag;
    pthread_mutex_lock(&st->lock);
    if (status == SX_OK || status == SX_ERR_TRUNCATED) {
        size_t n = len < sizeof(st->errbuf) - 1 ? len : sizeof(st->errbuf) - 1;
        /* The text, then a NUL and the status (i32) where the launcher
         * says which (rendezvous.c); SX_ERR_PROTO where it does not. */
        int why = SX_ERR_PROTO;
        const char *nul = memchr(st->errbuf, '\0', n);
        if (nul != NULL && n - (size_t)(nul - st->errbuf) == 5) {
            int32_t code = (int32_t)sx_get32((const uint8_t *)nul + 1);
            if (code < 0 && strcmp(sx_status_name(code), "unknown") != 0)
                why = code;
            n = (size_t)(nul - st->errbuf);
        }
        while (n > 0 && st->errbuf[n - 1] == '\0')
            n--;
        st->errbuf[n] = '\0';
        st->failed = why;
        sx_error("modex", "rank %" PRIu32 ": the sx_run launcher reports: %s (%s)", st->rank,
                 st->errbuf, sx_status_name(why));
        pthread_cond_broadcast(&st->cond);
        pthread_mutex_unlock(&st->lock);
        sx_sxrun_fail_fences(st, why);
        pthread_mutex_lock(&st->lock);
    }
    sx_sxrun_unref_unlock(st);
}

/* The RDV_ALL receive, posted by exchange. */
static void sx_sxrun_on_all(void *arg, int status, uint64_t peer, uint32_t tag, size_t len)
{
    sx_sxrun_t *st = arg;

    (void)peer;
    (void)tag;
    pthread_mutex_lock(&st->lock);
    st->all_arrived = true;
    st->all_status = status;
    st->all_len = len;
    pthread_cond_broadcast(&st->cond);
    sx_sxrun_unref_unlock(st);
}

static void sx_sxrun_on_done(void *arg, int status, uint64_t peer, uint32_t tag, size_t len)
{
    sx_sxrun_fence_t *f = arg;

    (void)peer;
    (void)tag;
    if (status == SX_OK && len == 4 && sx_get32(f->buf) == f->round) {
        sx_sxrun_fence_finish(f, SX_OK);
        return;
    }
    if (status == SX_OK || status == SX_ERR_TRUNCATED) {
        sx_error("modex",
                 "rank %" PRIu32 ": fence round %" PRIu32 " got a %zu-byte RDV_DONE%s%" PRIu32,
                 f->st->rank, f->round, len, len >= 4 ? " for round " : "",
                 len >= 4 ? sx_get32(f->buf) : 0u);
        status = SX_ERR_PROTO;
    } else if (status != SX_ERR_SHUTDOWN && status != SX_ERR_CANCELED) {
        /* The launcher's connection closed (oob.h): no DONE can come. */
        sx_error("modex",
                 "rank %" PRIu32 ": fence round %" PRIu32
                 " failed: the connection to the sx_run launcher is gone (%s)",
                 f->st->rank, f->round, sx_status_name(status));
    }
    sx_sxrun_fence_finish(f, status);
}

static void sx_sxrun_on_fence_sent(void *arg, int status, uint64_t peer, uint32_t tag, size_t len)
{
    sx_sxrun_fence_t *f = arg;

    (void)peer;
    (void)tag;
    (void)len;
    /* SX_ERR_SHUTDOWN: the endpoint is closing; that is no news. */
    if (status != SX_OK && status != SX_ERR_SHUTDOWN)
        sx_error("modex", "rank %" PRIu32 ": cannot send fence round %" PRIu32 ": %s", f->st->rank,
                 f->round, sx_strerror(status));
    /* On success only the reference goes; the DONE receive completes it. */
    if (status == SX_OK) {
        pthread_mutex_lock(&f->st->lock);
        sx_sxrun_t *st = f->st;
        if (sx_sxrun_fence_unref(f))
            sx_sxrun_unref_unlock(st);
        else
            pthread_mutex_unlock(&st->lock);
        return;
    }
    sx_sxrun_fence_finish(f, status);
}

static int sx_sxrun_init(sx_modex_t *m, sx_oob_t *oob)
{
    const char *addr = getenv(SX_RUN_ENV_ADDR);
    const char *rank_s = getenv(SX_RUN_ENV_RANK);
    const char *size_s = getenv(SX_RUN_ENV_SIZE);
    uint32_t rank, size;

    if (m == NULL || oob == NULL)
        return SX_ERR_INVALID_PARAM;
    if (addr == NULL || rank_s == NULL || size_s == NULL) {
        sx_error("modex",
                 "sxrun: %s, %s and %s must all be set (this process was not started "
                 "by sx_run)",
                 SX_RUN_ENV_ADDR, SX_RUN_ENV_RANK, SX_RUN_ENV_SIZE);
        return SX_ERR_NO_LAUNCHER;
    }
    if (!sx_sxrun_parse_u32(size_s, &size) || size == 0 || size > SX_MODEX_SXRUN_MAX_SIZE) {
        sx_error("modex", "sxrun: %s='%s' is not a job size (1..%u)", SX_RUN_ENV_SIZE, size_s,
                 SX_MODEX_SXRUN_MAX_SIZE);
        return SX_ERR_INVALID_PARAM;
    }
    if (!sx_sxrun_parse_u32(rank_s, &rank) || rank >= size) {
        sx_error("modex", "sxrun: %s='%s' is not a rank of a job of %s=%" PRIu32, SX_RUN_ENV_RANK,
                 rank_s, SX_RUN_ENV_SIZE, size);
        return SX_ERR_INVALID_PARAM;
    }
    if (addr[0] == '\0' || strlen(addr) >= SX_OOB_ADDR_MAX) {
        sx_error("modex", "sxrun: %s='%s' is not a host:port address", SX_RUN_ENV_ADDR, addr);
        return SX_ERR_INVALID_PARAM;
    }
    int rc = sx_oob_peer_set(oob, SX_OOB_ID_LAUNCHER, addr);
    if (rc != SX_OK) {
        sx_error("modex", "sxrun: %s='%s' is not a usable host:port address: %s", SX_RUN_ENV_ADDR,
                 addr, sx_strerror(rc));
        return rc == SX_ERR_INVALID_PARAM ? SX_ERR_INVALID_PARAM : rc;
    }

    sx_sxrun_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return SX_ERR_NO_MEMORY;
    st->oob = oob;
    st->rank = rank;
    st->size = size;
    st->refs = 1;
    pthread_mutex_init(&st->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cond, &ca);
    pthread_condattr_destroy(&ca);

    /* The error watcher. Its buffer lives in the state, which it keeps. */
    struct iovec iov = {.iov_base = st->errbuf, .iov_len = sizeof(st->errbuf) - 1};
    st->refs++;
    rc = sx_oob_recv_nb(oob, SX_OOB_ID_LAUNCHER, SX_OOB_TAG_RDV_ERROR, &iov, 1, 0,
                        sx_sxrun_on_error, st);
    if (rc != SX_OK) {
        sx_error("modex", "sxrun: cannot post the launcher's error receive: %s", sx_strerror(rc));
        pthread_mutex_lock(&st->lock);
        st->refs--;
        sx_sxrun_unref_unlock(st);
        return rc;
    }
    m->rank = rank;
    m->size = size;
    m->priv = st;
    return SX_OK;
}

/* Splits the RDV_ALL payload into per-rank blobs, checking every length
 * against what arrived. Lock not needed: exchange's thread owns it now. */
static int sx_sxrun_parse_all(sx_sxrun_t *st)
{
    const uint8_t *p = st->all;
    size_t len = st->all_len;

    if (len < 4 || sx_get32(p) != st->size) {
        sx_error("modex",
                 "rank %" PRIu32 ": RDV_ALL of %zu bytes is not for a job of %" PRIu32 " ranks",
                 st->rank, len, st->size);
        return SX_ERR_PROTO;
    }
    st->blob_off = calloc(st->size, sizeof(uint32_t));
    st->blob_len = calloc(st->size, sizeof(uint32_t));
    if (st->blob_off == NULL || st->blob_len == NULL)
        return SX_ERR_NO_MEMORY;
    size_t off = 4;
    for (uint32_t r = 0; r < st->size; r++) {
        if (len - off < 4) {
            sx_error("modex", "rank %" PRIu32 ": RDV_ALL of %zu bytes ends before rank %" PRIu32,
                     st->rank, len, r);
            return SX_ERR_PROTO;
        }
        uint32_t blen = sx_get32(p + off);
        off += 4;
        if (len - off < blen) {
            sx_error("modex",
                     "rank %" PRIu32 ": RDV_ALL: rank %" PRIu32 "'s %" PRIu32
                     "-byte blob runs past the message's %zu bytes",
                     st->rank, r, blen, len);
            return SX_ERR_PROTO;
        }
        st->blob_off[r] = (uint32_t)off;
        st->blob_len[r] = blen;
        off += blen;
    }
    if (off != len) {
        sx_error("modex", "rank %" PRIu32 ": RDV_ALL has %zu bytes after the last blob", st->rank,
                 len - off);
        return SX_ERR_PROTO;
    }
    return SX_OK;
}

static int sx_sxrun_exchange(sx_modex_t *m, const void *blob, size_t len)
{
    sx_sxrun_t *st = m != NULL ? m->priv : NULL;

    if (st == NULL || (blob == NULL && len > 0))
        return SX_ERR_INVALID_PARAM;
    if (len > SX_OOB_MSG_MAX - 8) {
        sx_error("modex",
                 "rank %" PRIu32 ": a %zu-byte blob is larger than the %u bytes an OOB "
                 "message can carry",
                 st->rank, len, SX_OOB_MSG_MAX - 8);
        return SX_ERR_INVALID_PARAM;
    }

    pthread_mutex_lock(&st->lock);
    if (st->exchanged) {
        pthread_mutex_unlock(&st->lock);
        sx_error("modex", "rank %" PRIu32 ": exchange called twice", st->rank);
        return SX_ERR_EXISTS;
    }
    if (st->failed != SX_OK) {
        pthread_mutex_unlock(&st->lock);
        return st->failed;
    }
    st->exchanged = true;
    pthread_mutex_unlock(&st->lock);

    /* The largest RDV_ALL there can be; pages not written are never
     * touched, so this costs address space rather than memory. */
    st->all = malloc(SX_OOB_MSG_MAX);
    if (st->all == NULL)
        return SX_ERR_NO_MEMORY;
    struct iovec riov = {.iov_base = st->all, .iov_len = SX_OOB_MSG_MAX};
    pthread_mutex_lock(&st->lock);
    st->refs++;
    pthread_mutex_unlock(&st->lock);
    int rc = sx_oob_recv_nb(st->oob, SX_OOB_ID_LAUNCHER, SX_OOB_TAG_RDV_ALL, &riov, 1, SX_OOB_TRUNC,
                            sx_sxrun_on_all, st);
    if (rc != SX_OK) {
        pthread_mutex_lock(&st->lock);
        st->refs--;
        pthread_mutex_unlock(&st->lock);
        sx_error("modex", "rank %" PRIu32 ": cannot post the RDV_ALL receive: %s", st->rank,
                 sx_strerror(rc));
        return rc;
    }

    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += SX_MODEX_SXRUN_TIMEOUT_MS / 1000;

    uint8_t hdr[8];
    sx_put32(hdr, st->rank);
    sx_put32(hdr + 4, st->size);
    struct iovec siov[2] = {{.iov_base = hdr, .iov_len = sizeof(hdr)},
                            {.iov_base = (void *)blob, .iov_len = len}};
    rc = sx_oob_send(st->oob, SX_OOB_ID_LAUNCHER, SX_OOB_TAG_RDV_PUT, siov, len > 0 ? 2 : 1,
                     SX_MODEX_SXRUN_TIMEOUT_MS);
    if (rc != SX_OK) {
        sx_error("modex", "rank %" PRIu32 ": cannot send the blob to the sx_run launcher: %s",
                 st->rank, sx_strerror(rc));
        return rc;
    }

    pthread_mutex_lock(&st->lock);
    int wrc = 0;
    while (!st->all_arrived && st->failed == SX_OK && wrc != ETIMEDOUT)
        wrc = pthread_cond_timedwait(&st->cond, &st->lock, &deadline);
    bool arrived = st->all_arrived;
    int all_status = st->all_status;
    int failed = st->failed;
    pthread_mutex_unlock(&st->lock);

    if (failed != SX_OK)
        return failed; /* logged by the error watcher */
    if (!arrived) {
        sx_error("modex",
                 "rank %" PRIu32 ": no answer from the sx_run launcher after %d s; are all %" PRIu32
                 " ranks running?",
                 st->rank, SX_MODEX_SXRUN_TIMEOUT_MS / 1000, st->size);
        return SX_ERR_AGAIN;
    }
    if (all_status != SX_OK) {
        sx_error("modex", "rank %" PRIu32 ": receiving every rank's blob failed: %s", st->rank,
                 sx_strerror(all_status));
        return all_status == SX_ERR_TRUNCATED ? SX_ERR_PROTO : all_status;
    }
    rc = sx_sxrun_parse_all(st);
    if (rc != SX_OK)
        return rc;
    /* Give back the part of the buffer the message did not use. */
    uint8_t *shrunk = realloc(st->all, st->all_len > 0 ? st->all_len : 1);
    if (shrunk != NULL)
        st->all = shrunk;
    st->have_blobs = true;
    return SX_OK;
}

static int sx_sxrun_get(sx_modex_t *m, uint32_t rank, void *buf, size_t *len_p)
{
    sx_sxrun_t *st = m != NULL ? m->priv : NULL;

    if (st == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (rank >= st->size)
        return SX_ERR_OUT_OF_RANGE;
    if (!st->have_blobs)
        return SX_ERR_NOT_FOUND;
    size_t blen = st->blob_len[rank];
    if (*len_p < blen) {
        *len_p = blen;
        return SX_ERR_TRUNCATED;
    }
    if (blen > 0) {
        if (buf == NULL)
            return SX_ERR_INVALID_PARAM;
        memcpy(buf, st->all + st->blob_off[rank], blen);
    }
    *len_p = blen;
    return SX_OK;
}

static int sx_sxrun_fence_nb(sx_modex_t *m, sx_modex_cb_t cb, void *arg)
{
    sx_sxrun_t *st = m != NULL ? m->priv : NULL;

    if (st == NULL || cb == NULL)
        return SX_ERR_INVALID_PARAM;
    sx_sxrun_fence_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return SX_ERR_NO_MEMORY;

    pthread_mutex_lock(&st->lock);
    if (st->failed != SX_OK || st->closed) {
        int rc = st->closed ? SX_ERR_SHUTDOWN : st->failed;
        pthread_mutex_unlock(&st->lock);
        free(f);
        return rc;
    }
    f->st = st;
    f->round = ++st->next_round;
    f->cb = cb;
    f->arg = arg;
    f->refs = 2;
    st->refs++; /* held by the fence until its last reference goes */
    uint32_t round = f->round;
    pthread_mutex_unlock(&st->lock);

    /* The receive goes first, so the DONE cannot arrive unclaimed. */
    struct iovec riov = {.iov_base = f->buf, .iov_len = 4};
    int rc = sx_oob_recv_nb(st->oob, SX_OOB_ID_LAUNCHER, SX_OOB_TAG_RDV_DONE, &riov, 1,
                            SX_OOB_TRUNC, sx_sxrun_on_done, f);
    if (rc != SX_OK) {
        /* Nothing was posted and nobody else knows the fence. The round
         * number is spent, so later fences would be out of order: the
         * modex is unusable after this, and says so. */
        sx_error("modex",
                 "rank %" PRIu32 ": cannot post the receive of fence round %" PRIu32 ": %s",
                 st->rank, round, sx_strerror(rc));
        free(f);
        pthread_mutex_lock(&st->lock);
        if (st->failed == SX_OK)
            st->failed = rc;
        sx_sxrun_unref_unlock(st);
        return rc;
    }

    /* Listed only now, so that an RDV_ERROR completes only fences whose
     * receive is posted; one that came before is seen here instead. */
    pthread_mutex_lock(&st->lock);
    int early = st->failed != SX_OK ? st->failed : st->closed ? SX_ERR_CANCELED : SX_OK;
    bool done = f->completed;
    if (early == SX_OK && !done) {
        f->listed = true;
        sx_sxrun_fence_t **pp = &st->fences;
        while (*pp != NULL)
            pp = &(*pp)->next;
        *pp = f;
    }
    pthread_mutex_unlock(&st->lock);
    if (early != SX_OK || done) {
        /* The FENCE is not sent: drop its reference, completing the fence
         * (once) if its receive has not. */
        sx_sxrun_fence_finish(f, early != SX_OK ? early : SX_ERR_SHUTDOWN);
        return SX_OK;
    }

    uint8_t msg[8];
    sx_put32(msg, st->rank);
    sx_put32(msg + 4, round);
    struct iovec siov = {.iov_base = msg, .iov_len = sizeof(msg)};
    rc = sx_oob_send_nb(st->oob, SX_OOB_ID_LAUNCHER, SX_OOB_TAG_RDV_FENCE, &siov, 1,
                        sx_sxrun_on_fence_sent, f);
    if (rc != SX_OK) {
        /* The send's callback will not run: complete the fence here. */
        sx_error("modex", "rank %" PRIu32 ": cannot send fence round %" PRIu32 ": %s", st->rank,
                 round, sx_strerror(rc));
        sx_sxrun_fence_finish(f, rc);
    }
    return SX_OK;
}

static void sx_sxrun_fini(sx_modex_t *m)
{
    sx_sxrun_t *st = m != NULL ? m->priv : NULL;

    if (st == NULL)
        return;
    m->priv = NULL;
    pthread_mutex_lock(&st->lock);
    st->closed = true;
    pthread_mutex_unlock(&st->lock);
    sx_sxrun_fail_fences(st, SX_ERR_CANCELED);
    pthread_mutex_lock(&st->lock);
    sx_sxrun_unref_unlock(st);
}

/* Slots (see modex.h): detect never blocks; init blocks only to set the
 * launcher's address; exchange blocks up to SX_MODEX_SXRUN_TIMEOUT_MS;
 * get copies into the caller's buffer; fence_nb never blocks and its
 * callback runs on the OOB progress thread (or inside fence_nb when the
 * send fails at once); fini completes pending fences with SX_ERR_CANCELED. */
const sx_modex_ops_t sx_modex_sxrun_ops = {
    .name = "sxrun",
    .detect = sx_sxrun_detect,
    .init = sx_sxrun_init,
    .exchange = sx_sxrun_exchange,
    .get = sx_sxrun_get,
    .fence_nb = sx_sxrun_fence_nb,
    .fini = sx_sxrun_fini,
};
