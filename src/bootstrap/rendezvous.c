/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The sx_run rendezvous server (rendezvous.h): collects every rank's blob
 * and sends each rank all of them, and counts fence rounds.
 *
 * Synchronization: the state below is touched by the OOB endpoint's
 * handlers, which run on its progress thread, under srv->lock (the lock
 * only matters if the OOB ever runs handlers elsewhere; it is never held
 * across a call that could wait). `status` is read by the launcher's main
 * thread without the lock: an atomic, written once from SX_OK to the error
 * (release) and read with acquire so that the logged text is visible too.
 *
 * Everything from the wire is checked before it is used: a message's
 * length, the rank against the job's size, the size against the one
 * sx_run started, a rank that speaks twice or from two endpoints, fence
 * rounds out of order, and blobs that would not fit the RDV_ALL message.
 *
 * A rank whose endpoint has no connection left (its process ended, or it
 * closed its engine; sx_oob_watch says so after its last message), or
 * that ended without a word (sx_rdv_server_rank_ended, from the
 * launcher's reaping, and SX_RDV_ENDED_GRACE_MS later: what it sent
 * before it ended may still wait in the kernel, or in a listener paused
 * for strangers, oob_int.h), can enter no more rounds and put no blob.
 * Once another rank waits for it to, in a fence round it never entered
 * or for an RDV_ALL that needs its blob, the rendezvous fails with
 * SX_ERR_PEER_UNREACHABLE and an RDV_ERROR naming it: an MPI rank that
 * returns from main without MPI_Finalize while the others wait in a
 * barrier would otherwise leave them waiting for good, since it exits
 * with status 0 and sx_run stops a job only for a failure (as mpirun
 * reports a process that "exited improperly").
 */
#include "common/le.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/rendezvous_int.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "bootstrap/oob.h"
#include "common/log.h"
#include "common/time.h"

#define SX_RDV_TEXT_MAX 512
/* How long after the launcher reaped a rank that never spoke its silence
 * counts as leaving (see the top). */
#define SX_RDV_ENDED_GRACE_MS 3000

typedef struct sx_rdv_rank {
    bool known;           /* `peer` is set: the rank has spoken */
    bool put;             /* its blob is here */
    uint64_t peer;        /* the OOB endpoint that speaks for it */
    uint32_t fence_round; /* the last fence round it entered (0: none) */
    bool left;            /* no connection from its endpoint is left */
    bool unwatched;       /* spoke, but its connection could not be watched */
    uint64_t ended_ns;    /* the launcher reaped it without a word (or
                           * unwatched) at this time; 0: not */
    uint32_t len;
    uint8_t *blob;
} sx_rdv_rank_t;

struct sx_rdv_server {
    sx_oob_t *oob;
    uint32_t size;
    _Atomic int status; /* SX_OK, or the error that failed the job */

    pthread_mutex_t lock; /* guards the fields below */
    sx_rdv_rank_t *ranks;
    uint32_t nput;
    uint64_t all_bytes; /* the RDV_ALL payload these blobs make */
    uint32_t done_round;
    uint32_t lost_rank;          /* the rank that left, when status says so */
    bool quiet;                  /* the launcher stops the job: no more verdicts */
    char error[SX_RDV_TEXT_MAX]; /* the first fault, for later offenders */
};

/* A send that fails means that rank has gone; sx_run sees it end and
 * reports it, so here it is only worth a debug line. */
static void sx_rdv_sent(void *arg, int status, uint64_t peer, uint32_t tag, size_t len)
{
    (void)arg;
    (void)len;
    if (status != SX_OK)
        sx_debug("rdv", "message 0x%" PRIx32 " to endpoint 0x%" PRIx64 " failed: %s", tag, peer,
                 sx_strerror(status));
}

static void sx_rdv_send(sx_rdv_server_t *srv, uint64_t peer, uint32_t tag, const void *data,
                        size_t len)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    int rc = sx_oob_send_nb(srv->oob, peer, tag, &iov, 1, sx_rdv_sent, NULL);

    if (rc != SX_OK)
        sx_debug("rdv", "cannot send 0x%" PRIx32 " to endpoint 0x%" PRIx64 ": %s", tag, peer,
                 sx_strerror(rc));
}

/* RDV_ERROR to @p peer: @p text, a NUL, and @p status (i32). */
static void sx_rdv_send_error(sx_rdv_server_t *srv, uint64_t peer, const char *text, int status)
{
    char msg[SX_RDV_TEXT_MAX + 64 + 5];
    size_t n = strnlen(text, sizeof(msg) - 5);

    if (peer == SX_OOB_PEER_ANY)
        return;
    memcpy(msg, text, n);
    msg[n] = '\0';
    sx_put32((uint8_t *)msg + n + 1, (uint32_t)status);
    sx_rdv_send(srv, peer, SX_OOB_TAG_RDV_ERROR, msg, n + 5);
}

/*
 * Fails the job with @p status and @p text: logs it, answers the endpoint
 * @p peer (SX_OOB_PEER_ANY: none) with RDV_ERROR naming it, and tells
 * every other rank that has spoken that the rendezvous is over, so none
 * of them waits for an answer that cannot come. RDV_ERROR is the text, a
 * NUL and the status (i32), which the rank's modex returns (modex_sxrun.c).
 * Called with the lock held.
 */
static void sx_rdv_fail(sx_rdv_server_t *srv, int status, uint64_t peer, const char *text)
{
    char others[SX_RDV_TEXT_MAX + 64];

    if (atomic_load_explicit(&srv->status, memory_order_relaxed) != SX_OK) {
        /* Already failed: the offender learns that, nothing more. */
        snprintf(others, sizeof(others), "the job's rendezvous has failed: %s", srv->error);
        sx_rdv_send_error(srv, peer, others,
                          atomic_load_explicit(&srv->status, memory_order_relaxed));
        return;
    }
    if (peer != SX_OOB_PEER_ANY)
        sx_error("rdv", "rendezvous of sx_run: endpoint 0x%" PRIx64 ": %s", peer, text);
    else
        sx_error("rdv", "rendezvous of sx_run: %s", text);
    snprintf(srv->error, sizeof(srv->error), "%s", text);
    atomic_store_explicit(&srv->status, status, memory_order_release);

    sx_rdv_send_error(srv, peer, text, status);
    snprintf(others, sizeof(others), "the job's rendezvous has failed: %s", text);
    for (uint32_t r = 0; r < srv->size; r++) {
        if (srv->ranks[r].known && srv->ranks[r].peer != peer)
            sx_rdv_send_error(srv, srv->ranks[r].peer, others, status);
    }
}

/* Fails the job for a fault of the message from @p peer (SX_ERR_PROTO). */
static void sx_rdv_fault(sx_rdv_server_t *srv, uint64_t peer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void sx_rdv_fault(sx_rdv_server_t *srv, uint64_t peer, const char *fmt, ...)
{
    char text[SX_RDV_TEXT_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    sx_rdv_fail(srv, SX_ERR_PROTO, peer, text);
}

/*
 * Fails the job when a rank that has left is one that another rank, still
 * here, waits for: in a fence round it never entered, or for the blob the
 * RDV_ALL needs. Called with the lock held after any change of either.
 */
static void sx_rdv_check_left(sx_rdv_server_t *srv)
{
    if (srv->quiet || atomic_load_explicit(&srv->status, memory_order_relaxed) != SX_OK)
        return;
    for (uint32_t g = 0; g < srv->size; g++) {
        const sx_rdv_rank_t *gone = &srv->ranks[g];
        if (!gone->left)
            continue;
        for (uint32_t r = 0; r < srv->size; r++) {
            const sx_rdv_rank_t *w = &srv->ranks[r];
            char text[SX_RDV_TEXT_MAX];
            if (w->left || !w->known)
                continue;
            if (w->fence_round > gone->fence_round)
                snprintf(text, sizeof(text),
                         "rank %" PRIu32 " left (its process ended, or it closed its engine) "
                         "before fence round %" PRIu32 ", which rank %" PRIu32 " waits in",
                         g, gone->fence_round + 1, r);
            else if (w->put && !gone->put)
                snprintf(text, sizeof(text),
                         "rank %" PRIu32 " left (its process ended, or it closed its engine) "
                         "before it put its blob, which rank %" PRIu32 " waits for",
                         g, r);
            else
                continue;
            srv->lost_rank = g;
            sx_rdv_fail(srv, SX_ERR_PEER_UNREACHABLE, SX_OOB_PEER_ANY, text);
            return;
        }
    }
}

/* sx_oob_watch: the rank's endpoint has no connection left. */
static void sx_rdv_on_gone(void *arg, int status, uint64_t peer, uint32_t tag, size_t len)
{
    sx_rdv_server_t *srv = arg;

    (void)tag;
    (void)len;
    if (status == SX_ERR_SHUTDOWN)
        return; /* the server is closing */
    pthread_mutex_lock(&srv->lock);
    for (uint32_t r = 0; r < srv->size; r++) {
        if (srv->ranks[r].known && srv->ranks[r].peer == peer && !srv->ranks[r].left) {
            srv->ranks[r].left = true;
            sx_debug("rdv", "rank %" PRIu32 " left (%s)", r, sx_strerror(status));
        }
    }
    sx_rdv_check_left(srv);
    pthread_mutex_unlock(&srv->lock);
}

/* Binds @p rank to endpoint @p peer, or faults: one endpoint per rank and
 * one rank per endpoint. */
static bool sx_rdv_bind(sx_rdv_server_t *srv, uint64_t peer, uint32_t rank)
{
    sx_rdv_rank_t *rk = &srv->ranks[rank];

    if (rk->known) {
        if (rk->peer == peer)
            return true;
        sx_rdv_fault(srv, peer,
                     "rank %" PRIu32 " is already spoken for by endpoint 0x%" PRIx64
                     " (two processes claim the same rank)",
                     rank, rk->peer);
        return false;
    }
    for (uint32_t r = 0; r < srv->size; r++) {
        if (srv->ranks[r].known && srv->ranks[r].peer == peer) {
            sx_rdv_fault(srv, peer, "claims rank %" PRIu32 " but spoke for rank %" PRIu32 " before",
                         rank, r);
            return false;
        }
    }
    /* A rank the launcher reaped before its words were read (they were
     * on their way): it spoke after all; its connection's end, which the
     * watch reports after these words, decides now. */
    uint64_t ended = rk->ended_ns;
    rk->ended_ns = 0;
    rk->left = false;
    rk->known = true;
    rk->peer = peer;
    int rc = sx_oob_watch(srv->oob, peer, sx_rdv_on_gone, srv);
    if (rc != SX_OK) {
        rk->unwatched = true; /* the launcher's reaping stands in */
        rk->ended_ns = ended;
        sx_warn("rdv", "cannot watch rank %" PRIu32 "'s connection: %s", rank, sx_strerror(rc));
    }
    return true;
}

/* Every blob is here: sends each rank RDV_ALL (u32 size, then per rank
 * u32 length and the blob). */
static void sx_rdv_send_all(sx_rdv_server_t *srv)
{
    uint8_t *msg = malloc((size_t)srv->all_bytes);

    if (msg == NULL) {
        sx_rdv_fault(srv, srv->ranks[0].peer, "out of memory for the %" PRIu64 "-byte RDV_ALL",
                     srv->all_bytes);
        return;
    }
    uint8_t *p = msg;
    sx_put32(p, srv->size);
    p += 4;
    for (uint32_t r = 0; r < srv->size; r++) {
        sx_put32(p, srv->ranks[r].len);
        p += 4;
        if (srv->ranks[r].len > 0)
            memcpy(p, srv->ranks[r].blob, srv->ranks[r].len);
        p += srv->ranks[r].len;
    }
    sx_debug("rdv", "all %" PRIu32 " ranks have put their blobs (%" PRIu64 " bytes)", srv->size,
             srv->all_bytes);
    /* One copy of the message for every rank's send (it may be 16 MiB). */
    uint64_t *peers = malloc(srv->size * sizeof(*peers));
    if (peers == NULL) {
        free(msg);
        sx_rdv_fault(srv, srv->ranks[0].peer, "out of memory for the RDV_ALL's %" PRIu32 " sends",
                     srv->size);
        return;
    }
    for (uint32_t r = 0; r < srv->size; r++)
        peers[r] = srv->ranks[r].peer;
    size_t queued = 0;
    int rc = sx_oob_send_many_nb(srv->oob, peers, srv->size, SX_OOB_TAG_RDV_ALL, msg,
                                 (size_t)srv->all_bytes, sx_rdv_sent, NULL, &queued);
    if (rc != SX_OK)
        sx_debug("rdv", "RDV_ALL went to %zu of %" PRIu32 " ranks: %s", queued, srv->size,
                 sx_strerror(rc));
    free(peers);
    free(msg);
}

/* RDV_PUT: u32 rank, u32 size, blob. */
void sx_rdv_on_put(void *arg, uint64_t peer, uint32_t tag, const void *data, size_t len)
{
    sx_rdv_server_t *srv = arg;
    const uint8_t *p = data;

    (void)tag;
    pthread_mutex_lock(&srv->lock);
    if (atomic_load_explicit(&srv->status, memory_order_relaxed) != SX_OK) {
        sx_rdv_fault(srv, peer, "PUT after the rendezvous failed");
        goto out;
    }
    if (len < 8) {
        sx_rdv_fault(srv, peer, "PUT of %zu bytes is shorter than its 8-byte header", len);
        goto out;
    }
    uint32_t rank = sx_get32(p);
    uint32_t size = sx_get32(p + 4);
    if (size != srv->size) {
        sx_rdv_fault(srv, peer,
                     "PUT of rank %" PRIu32 " says the job has %" PRIu32
                     " ranks; sx_run started %" PRIu32,
                     rank, size, srv->size);
        goto out;
    }
    if (rank >= srv->size) {
        sx_rdv_fault(srv, peer,
                     "PUT of rank %" PRIu32 ": out of range (the job has %" PRIu32 " ranks)", rank,
                     srv->size);
        goto out;
    }
    if (!sx_rdv_bind(srv, peer, rank))
        goto out;
    sx_rdv_rank_t *rk = &srv->ranks[rank];
    if (rk->put) {
        sx_rdv_fault(srv, peer, "rank %" PRIu32 " sent PUT twice", rank);
        goto out;
    }
    size_t blen = len - 8;
    if (srv->all_bytes + 4 + blen > SX_OOB_MSG_MAX) {
        sx_rdv_fault(srv, peer,
                     "PUT of rank %" PRIu32 " (%zu bytes): the blobs would not fit in one "
                     "RDV_ALL message of at most %u bytes",
                     rank, blen, SX_OOB_MSG_MAX);
        goto out;
    }
    rk->blob = malloc(blen > 0 ? blen : 1);
    if (rk->blob == NULL) {
        sx_rdv_fault(srv, peer, "out of memory for the %zu-byte blob of rank %" PRIu32, blen, rank);
        goto out;
    }
    if (blen > 0)
        memcpy(rk->blob, p + 8, blen);
    rk->len = (uint32_t)blen;
    rk->put = true;
    srv->all_bytes += 4 + blen;
    srv->nput++;
    sx_debug("rdv", "rank %" PRIu32 " put %zu bytes (%" PRIu32 "/%" PRIu32 ")", rank, blen,
             srv->nput, srv->size);
    if (srv->nput == srv->size)
        sx_rdv_send_all(srv);
    else
        sx_rdv_check_left(srv);
out:
    pthread_mutex_unlock(&srv->lock);
}

/* RDV_FENCE: u32 rank, u32 round. Rounds count from 1 for each rank; round
 * k is done once every rank has entered it. A rank may enter its next
 * round before the last is done (fence_nb does not wait). */
void sx_rdv_on_fence(void *arg, uint64_t peer, uint32_t tag, const void *data, size_t len)
{
    sx_rdv_server_t *srv = arg;
    const uint8_t *p = data;

    (void)tag;
    pthread_mutex_lock(&srv->lock);
    if (atomic_load_explicit(&srv->status, memory_order_relaxed) != SX_OK) {
        sx_rdv_fault(srv, peer, "FENCE after the rendezvous failed");
        goto out;
    }
    if (len != 8) {
        sx_rdv_fault(srv, peer, "FENCE of %zu bytes; it has 8", len);
        goto out;
    }
    uint32_t rank = sx_get32(p);
    uint32_t round = sx_get32(p + 4);
    if (rank >= srv->size) {
        sx_rdv_fault(srv, peer,
                     "FENCE of rank %" PRIu32 ": out of range (the job has %" PRIu32 " ranks)",
                     rank, srv->size);
        goto out;
    }
    if (!sx_rdv_bind(srv, peer, rank))
        goto out;
    sx_rdv_rank_t *rk = &srv->ranks[rank];
    if (round != rk->fence_round + 1) {
        sx_rdv_fault(srv, peer,
                     "rank %" PRIu32 " entered fence round %" PRIu32 "; its next is %" PRIu32, rank,
                     round, rk->fence_round + 1);
        goto out;
    }
    rk->fence_round = round;

    for (;;) {
        uint32_t next = srv->done_round + 1;
        bool all = true;
        for (uint32_t r = 0; r < srv->size && all; r++)
            all = srv->ranks[r].fence_round >= next;
        if (!all)
            break;
        srv->done_round = next;
        uint8_t msg[4];
        sx_put32(msg, next);
        sx_debug("rdv", "fence round %" PRIu32 " done", next);
        for (uint32_t r = 0; r < srv->size; r++)
            sx_rdv_send(srv, srv->ranks[r].peer, SX_OOB_TAG_RDV_DONE, msg, sizeof(msg));
    }
    sx_rdv_check_left(srv);
out:
    pthread_mutex_unlock(&srv->lock);
}

int sx_rdv_server_open(uint32_t size, sx_rdv_server_t **srv_p)
{
    return sx_rdv_server_open_at(size, "127.0.0.1", 0, srv_p);
}

int sx_rdv_server_open_at(uint32_t size, const char *host, uint16_t port, sx_rdv_server_t **srv_p)
{
    if (size == 0 || host == NULL || srv_p == NULL)
        return SX_ERR_INVALID_PARAM;
    sx_rdv_server_t *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return SX_ERR_NO_MEMORY;
    srv->ranks = calloc(size, sizeof(*srv->ranks));
    if (srv->ranks == NULL) {
        free(srv);
        return SX_ERR_NO_MEMORY;
    }
    srv->size = size;
    srv->all_bytes = 4;
    atomic_init(&srv->status, SX_OK);
    pthread_mutex_init(&srv->lock, NULL);

    int rc = sx_oob_open(SX_OOB_ID_LAUNCHER, host, port, &srv->oob);
    if (rc != SX_OK) {
        sx_error("rdv", "cannot open the rendezvous endpoint: %s", sx_strerror(rc));
        pthread_mutex_destroy(&srv->lock);
        free(srv->ranks);
        free(srv);
        return rc;
    }
    rc = sx_oob_handler_set(srv->oob, SX_OOB_TAG_RDV_PUT, sx_rdv_on_put, srv);
    if (rc == SX_OK)
        rc = sx_oob_handler_set(srv->oob, SX_OOB_TAG_RDV_FENCE, sx_rdv_on_fence, srv);
    if (rc != SX_OK) {
        sx_rdv_server_close(srv);
        return rc;
    }
    *srv_p = srv;
    return SX_OK;
}

int sx_rdv_server_address(sx_rdv_server_t *srv, char *buf, size_t len)
{
    if (srv == NULL || buf == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_oob_address(srv->oob, buf, len);
}

int sx_rdv_server_status(sx_rdv_server_t *srv)
{
    if (srv == NULL)
        return SX_ERR_INVALID_PARAM;
    return atomic_load_explicit(&srv->status, memory_order_acquire);
}

void sx_rdv_server_rank_ended(sx_rdv_server_t *srv, uint32_t rank)
{
    if (srv == NULL || rank >= srv->size)
        return;
    pthread_mutex_lock(&srv->lock);
    sx_rdv_rank_t *rk = &srv->ranks[rank];
    /* One that spoke is watched: its connection's end comes after its
     * last message. One that never spoke (or could not be watched) may
     * still have words on their way: sx_rdv_server_tick decides after a
     * grace. */
    if ((!rk->known || rk->unwatched) && !rk->left && rk->ended_ns == 0) {
        rk->ended_ns = sx_time_ns();
        if (rk->ended_ns == 0)
            rk->ended_ns = 1;
    }
    pthread_mutex_unlock(&srv->lock);
}

void sx_rdv_server_tick(sx_rdv_server_t *srv)
{
    if (srv == NULL)
        return;
    uint64_t now = sx_time_ns();
    pthread_mutex_lock(&srv->lock);
    bool changed = false;
    for (uint32_t r = 0; r < srv->size; r++) {
        sx_rdv_rank_t *rk = &srv->ranks[r];
        if (rk->ended_ns != 0 && !rk->left &&
            now - rk->ended_ns >= (uint64_t)SX_RDV_ENDED_GRACE_MS * 1000000u) {
            rk->left = true;
            changed = true;
            sx_debug("rdv", "rank %" PRIu32 " ended %s", r,
                     rk->known ? "(its connection was not watched)" : "without a word");
        }
    }
    if (changed)
        sx_rdv_check_left(srv);
    pthread_mutex_unlock(&srv->lock);
}

void sx_rdv_server_quiesce(sx_rdv_server_t *srv)
{
    if (srv == NULL)
        return;
    pthread_mutex_lock(&srv->lock);
    srv->quiet = true;
    pthread_mutex_unlock(&srv->lock);
}

uint32_t sx_rdv_server_lost_rank(sx_rdv_server_t *srv)
{
    if (srv == NULL ||
        atomic_load_explicit(&srv->status, memory_order_acquire) != SX_ERR_PEER_UNREACHABLE)
        return UINT32_MAX;
    return srv->lost_rank; /* written before the status (release) */
}

void sx_rdv_server_close(sx_rdv_server_t *srv)
{
    if (srv == NULL)
        return;
    /* Joins the progress thread: no handler runs after this. */
    sx_oob_close(srv->oob);
    for (uint32_t r = 0; r < srv->size; r++)
        free(srv->ranks[r].blob);
    free(srv->ranks);
    pthread_mutex_destroy(&srv->lock);
    free(srv);
}
