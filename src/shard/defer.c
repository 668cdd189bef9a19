/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the engine's service thread may not run, kept for the next
 * caller's pass (shard.h, serving): completions, peer error reports, and
 * channels whose data waits to be handed up (their backlog).
 */
#include "shard/shard.h"

#include "shard/chan.h"
#include "shard/handlers.h"
#include "shard/peer.h"

void sx_shard_defer_op_locked(sx_shard_t *shard, struct sx_op *op)
{
    op->next = NULL;
    if (shard->done_tail != NULL)
        shard->done_tail->next = op;
    else
        shard->done_head = op;
    shard->done_tail = op;
    shard->deferred = true;
    sx_stat_add(&shard->stats.svc_deferred, 1);
}

void sx_shard_defer_error_locked(sx_shard_t *shard, struct sx_peer *peer, int status)
{
    atomic_fetch_add(&peer->refs, 1); /* until the report has run */
    peer->err_status = status;
    peer->err_next = NULL;
    if (shard->err_tail != NULL)
        shard->err_tail->err_next = peer;
    else
        shard->err_head = peer;
    shard->err_tail = peer;
    shard->deferred = true;
    sx_stat_add(&shard->stats.svc_deferred, 1);
}

void sx_shard_defer_backlog_locked(sx_shard_t *shard, struct sx_chan *chan)
{
    if (chan->on_backlog)
        return;
    chan->on_backlog = true;
    chan->backlog_next = NULL;
    if (shard->backlog_tail != NULL)
        shard->backlog_tail->backlog_next = chan;
    else
        shard->backlog_head = chan;
    shard->backlog_tail = chan;
    shard->deferred = true;
    sx_stat_add(&shard->stats.svc_deferred, 1);
}

void sx_shard_unlink_backlog_locked(sx_shard_t *shard, struct sx_chan *chan)
{
    sx_chan_t *prev = NULL;

    if (!chan->on_backlog)
        return;
    for (sx_chan_t *c = shard->backlog_head; c != NULL; prev = c, c = c->backlog_next) {
        if (c != chan)
            continue;
        if (prev != NULL)
            prev->backlog_next = c->backlog_next;
        else
            shard->backlog_head = c->backlog_next;
        if (shard->backlog_tail == c)
            shard->backlog_tail = prev;
        break;
    }
    chan->on_backlog = false;
}

int sx_shard_run_deferred_locked(sx_shard_t *shard)
{
    int n = 0;

    /* Detach each list first: a callback may defer nothing (it runs on a
     * caller's thread) but may queue work that completes at once. */
    shard->deferred = false;
    sx_chan_t *chans = shard->backlog_head;
    shard->backlog_head = shard->backlog_tail = NULL;
    while (chans != NULL) {
        sx_chan_t *c = chans;
        chans = c->backlog_next;
        c->on_backlog = false;
        c->backlog_next = NULL;
        n += (int)sx_chan_deliver_backlog_locked(c);
    }
    sx_op_t *ops = shard->done_head;
    shard->done_head = shard->done_tail = NULL;
    while (ops != NULL) {
        sx_op_t *op = ops;
        ops = op->next;
        /* A refused message without a completion holds its peer for its
         * report (sx_op_complete_locked). */
        struct sx_peer *held = op->cb == NULL && op->refused ? op->peer : NULL;
        sx_op_complete_locked(shard, op, op->status);
        if (held != NULL)
            sx_peer_put(held);
        n++;
    }
    struct sx_peer *peers = shard->err_head;
    shard->err_head = shard->err_tail = NULL;
    while (peers != NULL) {
        struct sx_peer *peer = peers;
        peers = peer->err_next;
        const sx_err_handler_t *h = sx_handlers_error(shard->env->handlers);
        if (h != NULL)
            h->cb(h->arg, peer->id, peer->err_status);
        sx_peer_put(peer);
        n++;
    }
    return n;
}
