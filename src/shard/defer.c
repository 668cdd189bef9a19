/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the engine's service thread may not run, kept for the next
 * caller's pass (shard.h, serving): completions, peer error reports, and
 * channels whose data waits to be handed up (their backlog).
 */
#include "shard/shard.h"

#include "common/time.h"
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

void sx_shard_queue_backlog_locked(sx_shard_t *shard, struct sx_chan *chan)
{
    shard->deferred = true;
    if (chan->on_backlog)
        return;
    chan->on_backlog = true;
    chan->backlog_next = NULL;
    if (shard->backlog_tail != NULL)
        shard->backlog_tail->backlog_next = chan;
    else
        shard->backlog_head = chan;
    shard->backlog_tail = chan;
}

void sx_shard_defer_backlog_locked(sx_shard_t *shard, struct sx_chan *chan)
{
    if (chan->on_backlog)
        return;
    sx_shard_queue_backlog_locked(shard, chan);
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

void sx_handup_init(sx_handup_t *budget)
{
    budget->left = SX_HANDUP_FRAMES;
    budget->until_ns = sx_time_ns() + SX_HANDUP_NS;
}

bool sx_handup_take(sx_handup_t *budget)
{
    if (budget->left == 0)
        return false;
    if (budget->left < SX_HANDUP_FRAMES && sx_time_ns() >= budget->until_ns) {
        budget->left = 0;
        return false;
    }
    budget->left--;
    return true;
}

/* The first channel of the backlog list, taken off it; NULL if none. */
static sx_chan_t *backlog_pop(sx_shard_t *shard)
{
    sx_chan_t *c = shard->backlog_head;

    if (c == NULL)
        return NULL;
    shard->backlog_head = c->backlog_next;
    if (shard->backlog_head == NULL)
        shard->backlog_tail = NULL;
    c->on_backlog = false;
    c->backlog_next = NULL;
    return c;
}

int sx_shard_run_deferred_locked(sx_shard_t *shard)
{
    int n = 0;
    sx_handup_t budget;

    /* One entry at a time off each list, never a detached copy: a handler
     * may remove a peer, whose channel leaves the list (chan.c). Only the
     * service and engine threads defer, so nothing is added meanwhile but
     * a channel the budget cut short, at the end, after which the loop
     * stops. Backlogs go first, in the order their channels were queued,
     * then completions, then reports. */
    shard->deferred = false;
    sx_handup_init(&budget);
    while (budget.left > 0 && shard->backlog_head != NULL)
        n += (int)sx_chan_deliver_backlog_locked(backlog_pop(shard), &budget);
    while (shard->done_head != NULL) {
        sx_op_t *op = shard->done_head;
        shard->done_head = op->next;
        if (shard->done_head == NULL)
            shard->done_tail = NULL;
        /* A refused message without a completion holds its peer for its
         * report (sx_op_complete_locked). */
        struct sx_peer *held = op->cb == NULL && op->refused ? op->peer : NULL;
        sx_op_complete_locked(shard, op, op->status);
        if (held != NULL)
            sx_peer_put(held);
        n++;
    }
    while (shard->err_head != NULL) {
        struct sx_peer *peer = shard->err_head;
        shard->err_head = peer->err_next;
        if (shard->err_head == NULL)
            shard->err_tail = NULL;
        const sx_err_handler_t *h = sx_handlers_error(shard->env->handlers);
        if (h != NULL)
            h->cb(h->arg, peer->id, peer->err_status);
        sx_peer_put(peer);
        n++;
    }
    shard->deferred =
        shard->backlog_head != NULL || shard->done_head != NULL || shard->err_head != NULL;
    return n;
}
