/* SPDX-License-Identifier: BSD-3-Clause */
/* Start-up: the OOB endpoint, sx_engine_join and the job barrier. */
#include <arpa/inet.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "bootstrap/modex.h"
#include "bootstrap/oob.h"
#include "common/log.h"
#include "cpc/cpc.h"
#include "engine/card.h"
#include "engine/engine.h"
#include "shard/peer.h"

int sx_engine_bootstrap_init(struct sx_engine *e)
{
    int choice = e->cfg.modex;
    bool sxrun = (choice == SX_MODEX_AUTO || choice == SX_MODEX_SXRUN) &&
                 sx_modex_sxrun_ops.detect() &&
                 !(choice == SX_MODEX_AUTO && sx_modex_pmix_ops.detect());

    /* The sxrun modex talks to the launcher over the OOB, and the oob
     * connection method needs an endpoint; nothing else does. */
    if (!sxrun && !sx_cpc_oob_requested(e->cfg.cpc))
        return SX_OK;
    /* SX_BIND_ADDR may pin the udp port ("a.b.c.d:port"); the OOB takes
     * the address only, with a port of its own. When it names no single
     * address (empty: every interface; or a filter), the OOB takes the
     * one that reaches sx_run's rendezvous, else the first interface's. */
    char host[64];
    struct in_addr ip;
    snprintf(host, sizeof(host), "%s", e->cfg.bind_addr);
    char *colon = strchr(host, ':');
    if (colon != NULL)
        *colon = '\0';
    if (inet_pton(AF_INET, host, &ip) != 1)
        sx_oob_pick_host(sxrun ? getenv("SX_RUN_ADDR") : NULL, host, sizeof(host));
    int rc = sx_oob_open(e->env.epoch, host, 0, &e->oob);
    if (rc != SX_OK)
        sx_error("engine", "cannot open the OOB endpoint on %s: %s", host, sx_strerror(rc));
    return rc;
}

void sx_engine_bootstrap_fini(struct sx_engine *e)
{
    sx_modex_close(e->modex);
    e->modex = NULL;
    free(e->job_peers);
    e->job_peers = NULL;
    if (e->oob != NULL)
        sx_oob_close(e->oob);
    e->oob = NULL;
}

/*
 * SX_AUTH=job: the job's key is rank 0's, from its card, set before the
 * first peer is added (every rank's first is rank 0). A rank 0 that
 * gives none (SX_AUTH differs there) is refused here by name; the other
 * mismatches are sx_peer_add's to report (sx_card_auth_check).
 */
static int sx_join_adopt_key(struct sx_engine *e, const uint8_t *card, size_t len)
{
    struct sx_peer *peer = NULL;
    sx_conn_offer_t offers[SX_CPC_MAX];
    unsigned noffers = 0;
    sx_card_tl_t tl;

    int rc = sx_card_parse(e, card, len, &peer, offers, &noffers, &tl);
    if (rc != SX_OK)
        return rc;
    sx_peer_discard(peer);
    if (tl.auth != SX_CARD_AUTH_JOB) {
        sx_error("engine",
                 "sx_engine_join: SX_AUTH=job here, but rank 0 %s: SX_AUTH must be the same "
                 "everywhere",
                 tl.auth == SX_CARD_AUTH_NONE ? "does not authenticate"
                                              : "has a key of its own (SX_AUTH=<key>)");
        return SX_ERR_AUTH;
    }
    sx_auth_set_key(&e->env.auth, tl.auth_key);
    explicit_bzero(tl.auth_key, sizeof(tl.auth_key));
    return SX_OK;
}

static int sx_engine_join_locked(struct sx_engine *e, sx_job_info_t *info_p)
{
    sx_modex_t *m = NULL;
    /* A peer's card is as large as its shards make it: the buffer grows
     * to the largest one (modex get says how large on SX_ERR_TRUNCATED). */
    size_t cap = sx_card_cap(e->nshards);
    uint8_t *card = malloc(cap);

    if (card == NULL)
        return SX_ERR_NO_MEMORY;
    if (e->modex != NULL) {
        sx_error("engine", "sx_engine_join: this engine already joined its job");
        free(card);
        return SX_ERR_EXISTS;
    }
    int rc = sx_modex_open(e->cfg.modex, e->oob, &m);
    if (rc != SX_OK) {
        free(card);
        return rc;
    }
    rc = m->ops->exchange(m, e->card, e->card_len);
    sx_peer_h *peers = rc == SX_OK ? calloc(m->size, sizeof(*peers)) : NULL;
    if (rc == SX_OK && peers == NULL)
        rc = SX_ERR_NO_MEMORY;
    for (uint32_t r = 0; rc == SX_OK && r < m->size; r++) {
        size_t len = cap;
        rc = m->ops->get(m, r, card, &len);
        if (rc == SX_ERR_TRUNCATED && len > cap) {
            uint8_t *bigger = realloc(card, len);
            if (bigger == NULL) {
                rc = SX_ERR_NO_MEMORY;
            } else {
                card = bigger;
                cap = len;
                rc = m->ops->get(m, r, card, &len);
            }
        }
        /* Launched jobs name their peers by rank in log lines and dumps. */
        char name[32];
        snprintf(name, sizeof(name), "rank %u", r);
        sx_peer_params_t pp = {.field_mask = SX_PEER_PARAM_NAME, .name = name};
        if (rc == SX_OK && r == 0 && e->auth_job && !sx_auth_on(&e->env.auth))
            rc = sx_join_adopt_key(e, card, len);
        if (rc == SX_OK)
            rc = sx_peer_add_ex(e, r, card, len, &pp, &peers[r]);
        if (rc != SX_OK)
            sx_error("engine", "sx_engine_join: rank %u's card: %s", r, sx_strerror(rc));
    }
    free(card);
    if (rc != SX_OK) {
        for (uint32_t r = 0; peers != NULL && r < m->size; r++) {
            if (peers[r] != NULL)
                (void)sx_peer_remove(e, peers[r]);
        }
        free(peers);
        sx_modex_close(m);
        return rc;
    }
    e->job_peers = peers;
    e->modex = m;
    if (info_p != NULL) {
        info_p->rank = m->rank;
        info_p->size = m->size;
        info_p->modex = m->ops->name;
    }
    return SX_OK;
}

SX_API int sx_engine_join(sx_engine_h e, sx_job_info_t *info_p)
{
    if (e == NULL)
        return sx_api_null("sx_engine_join", "the engine");
    pthread_mutex_lock(&e->join_lock);
    int rc = sx_engine_join_locked(e, info_p);
    pthread_mutex_unlock(&e->join_lock);
    return rc;
}

SX_API sx_peer_h sx_job_peer(sx_engine_h e, uint32_t rank)
{
    sx_peer_h peer = NULL;

    if (e == NULL)
        return NULL;
    pthread_mutex_lock(&e->join_lock);
    if (e->modex != NULL && rank < e->modex->size)
        peer = e->job_peers[rank];
    pthread_mutex_unlock(&e->join_lock);
    return peer;
}

typedef struct sx_fence_wait {
    atomic_bool done;
    int status;
} sx_fence_wait_t;

static void sx_fence_done(void *arg, int status)
{
    sx_fence_wait_t *w = arg;
    w->status = status;
    /* Last touch of *w: the waiter may return as soon as it sees this. */
    atomic_store_explicit(&w->done, true, memory_order_release);
}

SX_API int sx_job_barrier(sx_engine_h e)
{
    sx_fence_wait_t w;

    if (e == NULL)
        return sx_api_null("sx_job_barrier", "the engine");
    pthread_mutex_lock(&e->join_lock);
    sx_modex_t *m = e->modex;
    pthread_mutex_unlock(&e->join_lock);
    if (m == NULL) {
        sx_error("engine", "sx_job_barrier: the engine has not joined a job (sx_engine_join)");
        return SX_ERR_NO_LAUNCHER;
    }
    atomic_init(&w.done, false);
    w.status = SX_OK;
    int rc = m->ops->fence_nb(m, sx_fence_done, &w);
    if (rc != SX_OK)
        return rc;
    while (!atomic_load_explicit(&w.done, memory_order_acquire)) {
        if (sx_progress(e) == 0)
            sched_yield();
    }
    return w.status;
}
