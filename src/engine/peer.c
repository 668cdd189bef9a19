/* SPDX-License-Identifier: BSD-3-Clause */
/* Peers: sx_peer_add (a card made a peer, its connection method chosen)
 * and sx_peer_remove (the closing protocol); the table is shard/peer.c. */
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"
#include "engine/card.h"
#include "engine/engine.h"
#include "shard/shard.h"
#include "shard/chan.h"

static int peer_add(sx_engine_h e, uint64_t peer_id, const void *card, size_t len,
                    const sx_peer_params_t *params, sx_peer_h *peer_p)
{
    struct sx_peer *peer;
    sx_conn_offer_t offers[SX_CPC_MAX];
    unsigned noffers = 0;
    sx_card_tl_t tl;

    if (e == NULL || peer_p == NULL) {
        sx_error("peer", "sx_peer_add: %s", e == NULL ? "no engine" : "no place for the handle");
        return SX_ERR_INVALID_PARAM;
    }
    if (sx_engine_closing(e, "sx_peer_add"))
        return SX_ERR_SHUTDOWN;
    int rc = sx_card_parse(e, card, len, &peer, offers, &noffers, &tl);
    if (rc != SX_OK)
        return rc;
    peer->id = peer_id;
    if (params != NULL && (params->field_mask & SX_PEER_PARAM_NAME) && params->name != NULL &&
        params->name[0] != '\0')
        snprintf(peer->name, sizeof(peer->name), "%s", params->name);
    else
        snprintf(peer->name, sizeof(peer->name), "peer %llu", (unsigned long long)peer_id);
    peer->engine = e;
    peer->is_self = (peer->epoch == e->env.epoch);
    /* Sends to ourselves take the self transport, which carries no tag. */
    if (!peer->is_self && ((rc = sx_card_reachable(e, peer, &tl)) != SX_OK ||
                           (rc = sx_card_auth_check(e, peer, &tl)) != SX_OK)) {
        sx_peer_discard(peer);
        return rc;
    }
    if (peer->is_self) {
        /* Ourselves: reach each shard through the self transport. */
        for (unsigned i = 0; i < peer->nshards && i < e->nshards; i++) {
            sx_tl_iface_t *iface = e->shards[i]->ifaces[SX_SHARD_TL_SELF];
            size_t alen = SX_TL_ADDR_MAX;
            rc = iface->ops->local_addr(iface, peer->addr[i].bytes, &alen);
            if (rc != SX_OK) {
                sx_peer_discard(peer);
                return rc;
            }
            peer->addr[i].len = (uint8_t)alen;
        }
    }
    rc = sx_cpc_select(&e->cpc, peer, offers, noffers);
    if (rc != SX_OK) {
        sx_peer_discard(peer);
        return rc;
    }
    bool was_removed;
    rc = sx_peer_table_add(&e->peers, peer, &was_removed);
    if (rc != SX_OK) {
        if (was_removed)
            sx_error("peer",
                     "sx_peer_add: the engine of that card (epoch %llu) was a peer and was "
                     "removed; the same incarnation cannot be added again (its sequence state is "
                     "gone)",
                     (unsigned long long)peer->epoch);
        else
            sx_error("peer", "sx_peer_add: the engine of that card (epoch %llu) is already a peer",
                     (unsigned long long)peer->epoch);
        sx_peer_discard(peer);
        return rc;
    }
    *peer_p = peer;
    return SX_OK;
}

SX_API uint64_t sx_peer_id(sx_peer_h peer)
{
    return peer != NULL ? peer->id : 0;
}

/* Closing a peer's channels runs on each shard, by its token holder. */
typedef struct sx_peer_close_req {
    sx_inbox_req_t req;
    struct sx_peer *peer;
    atomic_uint *pending;
} sx_peer_close_req_t;

static void sx_peer_close_run(void *owner, sx_inbox_req_t *req)
{
    sx_shard_t *shard = owner;
    sx_peer_close_req_t *r = (sx_peer_close_req_t *)req;
    struct sx_peer *peer = r->peer;

    sx_peer_close_locked(shard, peer, SX_ERR_CANCELED);
    if (atomic_fetch_sub(r->pending, 1) == 1) {
        free(r->pending);
        sx_peer_put(peer);
    }
    free(r);
}

static int peer_remove(sx_engine_h e, sx_peer_h peer)
{
    if (e == NULL || peer == NULL || peer->engine != e) {
        sx_error("peer", "sx_peer_remove: %s",
                 e == NULL      ? "no engine"
                 : peer == NULL ? "no peer"
                                : "a peer of another engine");
        return SX_ERR_INVALID_PARAM;
    }
    /* sx_engine_peers_fini walks the peers while their operations'
     * callbacks run: none may go from under it. */
    if (sx_engine_closing(e, "sx_peer_remove"))
        return SX_ERR_SHUTDOWN;

    atomic_uint *pending = malloc(sizeof(*pending));
    sx_peer_close_req_t **reqs = calloc(e->nshards, sizeof(*reqs));
    bool ok = pending != NULL && reqs != NULL;
    for (unsigned i = 0; ok && i < e->nshards; i++) {
        reqs[i] = malloc(sizeof(**reqs));
        ok = reqs[i] != NULL;
    }
    int rc = ok ? sx_peer_table_remove(&e->peers, peer) : SX_ERR_NO_MEMORY;
    if (rc != SX_OK) {
        for (unsigned i = 0; reqs != NULL && i < e->nshards; i++)
            free(reqs[i]);
        free(reqs);
        free(pending);
        if (rc == SX_ERR_NOT_FOUND)
            sx_error("peer", "sx_peer_remove: %s was already removed", peer->name);
        return rc;
    }
    /* From here on the closing protocol owns the peer's other reference:
     * each shard closes its channels, and the last one drops it. */
    atomic_init(pending, e->nshards);
    for (unsigned i = 0; i < e->nshards; i++) {
        reqs[i]->req.run = sx_peer_close_run;
        reqs[i]->peer = peer;
        reqs[i]->pending = pending;
        sx_engine_submit(e, i, &reqs[i]->req);
    }
    free(reqs);
    return SX_OK;
}

void sx_engine_peers_fini(struct sx_engine *e)
{
    /* No other thread runs now: close every channel directly, then drop
     * the closing protocol's reference; the table drops its own when it is
     * torn down. Removed peers are not on the list: their close requests,
     * still in the shards' inboxes, run when the shards go. */
    for (struct sx_peer *peer = e->peers.all, *next; peer != NULL; peer = next) {
        next = peer->all_next;
        for (unsigned s = 0; s < e->nshards; s++)
            sx_peer_close_locked(e->shards[s], peer, SX_ERR_SHUTDOWN);
        sx_peer_put(peer);
    }
    e->peers.all = NULL;
}

SX_API int sx_peer_add_ex(sx_engine_h e, uint64_t peer_id, const void *card, size_t len,
                          const sx_peer_params_t *params, sx_peer_h *peer_p)
{
    if (e == NULL)
        return sx_api_null("sx_peer_add_ex", "the engine");
    sx_global_enter(e);
    int rc = peer_add(e, peer_id, card, len, params, peer_p);
    sx_global_exit(e);
    return rc;
}

SX_API int sx_peer_add(sx_engine_h e, uint64_t peer_id, const void *card, size_t len,
                       sx_peer_h *peer_p)
{
    return sx_peer_add_ex(e, peer_id, card, len, NULL, peer_p);
}

SX_API int sx_peer_remove(sx_engine_h e, sx_peer_h peer)
{
    if (e == NULL)
        return sx_api_null("sx_peer_remove", "the engine");
    sx_global_enter(e);
    int rc = peer_remove(e, peer);
    sx_global_exit(e);
    return rc;
}
