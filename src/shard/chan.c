/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels: lifetime and the operation queue (chan.h). Transmit, receive,
 * retransmission and the RMA target are chan_tx.c, chan_rx.c,
 * chan_retransmit.c and chan_rma.c.
 */
#include "shard/chan.h"
#include "shard/op_cache.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "shard/chan_int.h"
#include "shard/conn.h"
#include "shard/handlers.h"
#include "shard/peer.h"

SX_HOT void sx_chan_kick_locked(sx_chan_t *c)
{
    sx_shard_t *s = c->shard;

    if (c->on_ready)
        return;
    c->on_ready = true;
    c->ready_next = NULL;
    if (s->ready_tail != NULL)
        s->ready_tail->ready_next = c;
    else
        s->ready_head = c;
    s->ready_tail = c;
}

SX_HOT void sx_op_complete_locked(sx_shard_t *shard, sx_op_t *op, int status)
{
    if (op->kind == SX_OP_GET && shard->land_ev != NULL)
        sx_shard_land_release_locked(shard, op->dst, op->len);
    /* A message sent without a completion (sx_sendi) that the peer
     * refused: nobody would hear of it, and the caller (an MPI library)
     * waits for a message that will never be delivered. The error
     * callback is told instead; the peer stays usable. */
    bool refused = op->cb == NULL && op->refused && status == op->status;
    if ((op->cb != NULL || refused) && shard->serving) {
        /* The service thread runs no callback (DESIGN.md section 3): the
         * next caller's progress does. */
        op->status = status;
        if (refused) /* the report names the peer: held until it has run (defer.c) */
            atomic_fetch_add(&op->peer->refs, 1);
        sx_shard_defer_op_locked(shard, op);
        return;
    }
    if (op->cb != NULL) {
        op->cb(op->ctx, status);
    } else if (refused) {
        const sx_err_handler_t *h = sx_handlers_error(shard->env->handlers);
        if (h != NULL)
            h->cb(h->arg, op->peer->id, status);
    }
    sx_op_release(op);
}

/* Queues an internal op (a response, a refusal) and marks the channel
 * ready. */
void sx_chan_queue_resp_locked(sx_chan_t *c, sx_op_t *op)
{
    if (op->kind == SX_OP_REFUSE)
        c->refuse_queued++;
    else
        c->resp_queued++;
    op->queued_ns = sx_time_coarse_ns();
    sx_op_append(&c->sendq, &c->sendq_tail, op);
    sx_chan_kick_locked(c);
}

/* Should getrandom fail (no entropy yet, an old kernel), the clock. */
uint32_t sx_chan_random32(void)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = (uint32_t)((sx_time_ns() * 0x9e3779b97f4a7c15ull) >> 32);
    return r != 0 ? r : 1;
}

SX_HOT sx_chan_t *sx_chan_get_locked(sx_shard_t *shard, struct sx_peer *peer, unsigned lane)
{
    size_t idx = (size_t)shard->index * peer->nshards + lane;
    sx_chan_t *c = peer->chans[idx];

    if (c != NULL)
        return c;
    const sx_chan_conf_t *p = &shard->env->conf;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->win = calloc(p->window, sizeof(*c->win));
    if (c->win == NULL) {
        free(c);
        return NULL;
    }
    c->peer = peer;
    c->shard = shard;
    c->lane = lane;
    c->tl = peer->is_self ? SX_SHARD_TL_SELF : SX_SHARD_TL_NET;
    /* The key is set before the first peer (sx_peer_add refuses one
     * without it), so a channel's datagrams are sealed from its first. */
    c->tag_len = c->tl == SX_SHARD_TL_NET && sx_auth_on(&shard->env->auth) ? SX_WIRE_TAG_LEN : 0;
    sx_tl_iface_t *iface = shard->ifaces[c->tl];
    int rc = iface->ops->addr_insert(iface, peer->addr[lane].bytes, peer->addr[lane].len, &c->dest);
    if (rc != SX_OK) {
        sx_error("chan", "%s shard %u: unusable address (%s)", peer->name, lane, sx_strerror(rc));
        free(c->win);
        free(c);
        return NULL;
    }
    /* Both ends start from the configured number: the implicit connection
     * relies on it. A method with an exchange sends ours and learns the
     * peer's, so ours is random unless SX_SEQ_START was given: a forger
     * who is not on the path must then guess it to pass for the peer in a
     * CONNECT, which is how TCP defends its initial sequence numbers
     * (RFC 6528). */
    uint32_t isn = shard->seq_start;
    if (shard->seq_random && peer->conn_method->ops->send_ctrl_locked != NULL)
        isn = sx_chan_random32();
    c->snd_isn = isn;
    c->snd_una = c->snd_nxt = c->last_ack = isn;
    c->rcv_nxt = c->rcv_dlv = shard->seq_start;
    c->snd_window = p->window;
    /* The route's MTU where the transport knows it (udp over Ethernet:
     * 1472, over loopback: 65000); the handshake confirms it. */
    c->pmtu_ceiling =
        iface->ops->dest_mtu != NULL ? iface->ops->dest_mtu(iface, c->dest) : iface->caps.mtu;
    if (c->pmtu_ceiling == 0 || c->pmtu_ceiling > iface->caps.mtu)
        c->pmtu_ceiling = iface->caps.mtu;
    c->dgram_max = c->pmtu_ceiling;
    c->rto_ns = p->rto_init_ns;
    /* Until the peer's first ACK says otherwise, its receive window is as
     * large as ours (the same configuration in one job). */
    c->peer_rwnd_ack = c->snd_una;
    c->peer_rwnd_pkts = p->window;
    c->peer_rwnd_bytes = (uint32_t)p->max_inflight; /* at most 1 GiB */
    sx_timer_init(&c->ack_timer, sx_chan_ack_timer, c);
    sx_timer_init(&c->persist_timer, sx_chan_persist_timer, c);
    sx_timer_init(&c->tlp_timer, sx_chan_tlp_timer, c);
    sx_chan_cc_attach_locked(c);
    /* sx_peer_add chose the peer's method before publishing it. */
    c->conn_method = peer->conn_method;
    c->conn_method->ops->ep_init_locked(c->conn_method, c);
    peer->chans[idx] = c;
    return c;
}

static void chan_free_window(sx_chan_t *c)
{
    for (uint32_t s = c->snd_una; sx_u32_before(s, c->snd_nxt); s++) {
        sx_txpkt_t *pkt = c->win[s & (sx_chan_window(c) - 1)];
        if (pkt == NULL)
            continue;
        if (pkt->key != 0) {
            void *occupant;
            (void)sx_hotel_checkout(c->shard->hotel, pkt->key, &occupant);
        }
        c->win[s & (sx_chan_window(c) - 1)] = NULL;
        sx_chan_pkt_free_locked(c, pkt);
    }
    c->rtx = c->rtx_tail = NULL;
    c->snd_una = c->snd_nxt;
    if (c->cc != NULL)
        sx_cc_forget(c->cc, c->cc_pipe - (size_t)c->cc_unposted); /* no ACK will take them out */
    c->cc_pipe = 0;
    c->cc_unposted = 0;
    c->cc_pace_unposted = 0;
    c->inflight_bytes = 0;
}

static void chan_fail_ops(sx_chan_t *c, int status)
{
    /* Detach the lists first: a completion may queue new work. */
    sx_op_t *lists[4] = {c->ackq, c->rmaq, c->sendq, c->rma_waitq};
    c->ackq = c->ackq_tail = NULL;
    c->refuse_hint = NULL;
    c->rmaq = c->rmaq_tail = NULL;
    c->sendq = c->sendq_tail = NULL;
    c->rma_waitq = c->rma_waitq_tail = NULL;
    for (int i = 0; i < 4; i++) {
        for (sx_op_t *op = lists[i], *next; op != NULL; op = next) {
            next = op->next;
            sx_op_complete_locked(c->shard, op, status);
        }
    }
}

/* Drops what was kept ahead of a gap; the backlog (received and
 * acknowledged) stays to be handed up. */
static void chan_free_ooo(sx_chan_t *c)
{
    uint32_t mask = sx_chan_window(c) - 1;

    if (c->ooo != NULL) {
        for (uint32_t i = 0; i < sx_chan_window(c); i++) {
            uint32_t seq = c->rcv_nxt + i;
            if (sx_u32_before(seq, c->rcv_dlv + sx_chan_window(c)) && c->ooo[seq & mask].buf) {
                free(c->ooo[seq & mask].buf);
                c->ooo[seq & mask].buf = NULL;
                c->ooo_bits[(seq & mask) / 64] &= ~(1ull << ((seq & mask) % 64));
            }
        }
    }
    c->ooo_count = 0;
    c->ooo_bytes = 0;
    c->rcv_sack = 0;
}

/* Frees the whole receive side: the ring and a reassembly under way. */
static void chan_free_rx(sx_chan_t *c)
{
    if (c->ooo != NULL) {
        for (uint32_t i = 0; i < sx_chan_window(c); i++)
            free(c->ooo[i].buf);
        free(c->ooo);
        free(c->ooo_bits);
        c->ooo = NULL;
        c->ooo_bits = NULL;
    }
    c->ooo_count = 0;
    c->ooo_bytes = 0;
    c->backlog_bytes = 0;
    c->rcv_dlv = c->rcv_nxt;
    c->rcv_sack = 0;
    free(c->asm_buf);
    c->asm_buf = NULL;
    sx_chan_frags_free_locked(c);
}

void sx_chan_fail_locked(sx_chan_t *c, int status)
{
    sx_chan_fail_why_locked(c, status, NULL);
}

void sx_chan_fail_why_locked(sx_chan_t *c, int status, const char *why)
{
    /* What the peer acknowledged completes as acknowledged (a failed
     * channel holds none: the release finds it failed). */
    if (c->shard->ack_held_chan == c)
        (void)sx_chan_ack_release_locked(c->shard);
    if (c->failed != 0)
        return;
    /* The shard's batch may hold this channel's datagrams, staged outside
     * a flush (window and path MTU probes from timers, a reset's
     * challenge): they point at its packets and name it, and both go now
     * (sx_peer_remove from another thread, between the staging and the
     * post, wrote into the freed channel). Post them first, as a change
     * of destination does. */
    sx_shard_tx_post_locked(c->shard);
    c->failed = status;
    sx_wheel_cancel(c->shard->wheel, &c->ack_timer);
    sx_wheel_cancel(c->shard->wheel, &c->persist_timer);
    sx_wheel_cancel(c->shard->wheel, &c->cc_timer);
    sx_wheel_cancel(c->shard->wheel, &c->tlp_timer);
    if (c->conn_method->ops->ep_finalize_locked != NULL)
        c->conn_method->ops->ep_finalize_locked(c->conn_method, c);
    chan_free_window(c);
    /* What the peer sent and we acknowledged before the failure is still
     * handed up (its sender was told it arrived); the rest goes. */
    chan_free_ooo(c);
    sx_stat_add(&c->shard->stats.chan_failures, 1);

    int expected = 0;
    struct sx_peer *peer = c->peer;
    atomic_compare_exchange_strong(&peer->failed, &expected, status);
    chan_fail_ops(c, status);
    /* Every failure but the caller's own (sx_peer_remove, sx_engine_destroy)
     * poisons the peer (peer->failed above), so every one is reported,
     * once per peer: a channel failed for a protocol violation or want of
     * memory fails every later operation as surely as a dead peer does. */
    bool peer_fault = status != SX_ERR_CANCELED && status != SX_ERR_SHUTDOWN;
    if (peer_fault && !atomic_exchange(&peer->error_reported, true)) {
        if (why != NULL)
            sx_warn("chan", "%s (%s)", why, sx_status_name(status));
        else if (status == SX_ERR_PEER_UNREACHABLE)
            sx_warn("chan", "%s unreachable: no acknowledgement for %llu ms", peer->name,
                    (unsigned long long)(c->shard->env->conf.peer_timeout_ns / 1000000));
        else
            sx_warn("chan", "%s failed: %s", peer->name, sx_strerror(status));
        if (c->shard->serving) {
            sx_shard_defer_error_locked(c->shard, peer, status);
        } else {
            const sx_err_handler_t *h = sx_handlers_error(c->shard->env->handlers);
            if (h != NULL)
                h->cb(h->arg, peer->id, status);
        }
    }
}

void sx_chan_destroy_locked(sx_chan_t *c, int status)
{
    sx_chan_fail_locked(c, status);
    chan_free_rx(c);
    if (c->shard->land_chan == c)
        c->shard->land_chan = NULL;
    if (c->shard->land_put_chan == c)
        c->shard->land_put_chan = NULL;
    c->peer->chans[(size_t)c->shard->index * c->peer->nshards + c->lane] = NULL;
    sx_shard_unlink_ready_locked(c->shard, c);
    sx_shard_unlink_backlog_locked(c->shard, c);
    if (c->shard->ack_held_chan == c) /* taken by the failure; this is a guard */
        c->shard->ack_held_chan = NULL;
    if (c->shard->rx_chan == c)
        c->shard->rx_chan = NULL;
    /* The failure cancelled these, but only the first: a channel that had
     * failed before (its peer's failure, then sx_peer_remove) may have
     * armed one since (an ACK owed for what it delivered), which would
     * fire into the freed channel. */
    sx_wheel_cancel(c->shard->wheel, &c->ack_timer);
    sx_wheel_cancel(c->shard->wheel, &c->persist_timer);
    sx_wheel_cancel(c->shard->wheel, &c->cc_timer);
    sx_wheel_cancel(c->shard->wheel, &c->tlp_timer);
    sx_wheel_cancel(c->shard->wheel, &c->conn_timer);
    sx_chan_iface(c)->ops->addr_remove(sx_chan_iface(c), c->dest);
    free(c->win);
    free(c);
}

/* @p op joins sendq; a PUT or GET takes its id and a place among the
 * outstanding ones first. */
static inline void chan_enqueue(sx_chan_t *c, sx_op_t *op)
{
    if (op->kind == SX_OP_PUT || op->kind == SX_OP_GET) {
        op->op_id = c->next_op_id++;
        c->rma_outstanding++;
    }
    op->queued_ns = sx_time_coarse_ns();
    sx_op_append(&c->sendq, &c->sendq_tail, op);
    sx_chan_kick_locked(c);
}

SX_HOT void sx_chan_push_locked(sx_chan_t *c, sx_op_t *op)
{
    int failed = c->failed ? c->failed : atomic_load(&c->peer->failed);
    if (failed != 0) {
        if (!c->failed)
            sx_chan_fail_locked(c, failed);
        sx_op_complete_locked(c->shard, op, failed);
        return;
    }
    if ((op->kind == SX_OP_PUT || op->kind == SX_OP_GET) &&
        (c->rma_outstanding >= SX_RMA_OUTSTANDING_MAX || c->rma_waitq != NULL)) {
        /* The target would refuse more: it waits for an answer. It
         * used to complete SX_ERR_AGAIN, having written nothing, for
         * the caller to retry; Open MPI 4.1's ob1 does not retry a
         * get or put that fails (rdma_retries_limit 0) and fell back
         * to a copy protocol whose sender never completed: a job
         * with more than 4096 gets outstanding to one peer hung. */
        sx_op_append(&c->rma_waitq, &c->rma_waitq_tail, op);
        return;
    }
    chan_enqueue(c, op);
}

void sx_chan_rma_admit_locked(sx_chan_t *c)
{
    while (c->rma_waitq != NULL && !c->failed && c->rma_outstanding < SX_RMA_OUTSTANDING_MAX) {
        sx_op_t *op = c->rma_waitq;
        c->rma_waitq = op->next;
        if (c->rma_waitq == NULL)
            c->rma_waitq_tail = NULL;
        chan_enqueue(c, op);
    }
}

int sx_chan_set_dest_locked(sx_chan_t *c, const void *addr, size_t len)
{
    sx_tl_iface_t *iface = sx_chan_iface(c);
    sx_tl_dest_t dest;

    int rc = iface->ops->addr_insert(iface, addr, len, &dest);
    if (rc != SX_OK)
        return rc;
    /* The batch holds destination handles, not channels: post it before
     * the old handle goes. A datagram it refuses is staged again later,
     * with the new one. */
    sx_shard_tx_post_locked(c->shard);
    iface->ops->addr_remove(iface, c->dest);
    c->dest = dest;
    if (iface->ops->dest_mtu != NULL) {
        size_t mtu = iface->ops->dest_mtu(iface, dest);
        if (mtu != 0 && mtu < c->pmtu_ceiling)
            c->pmtu_ceiling = mtu;
        if (c->dgram_max > c->pmtu_ceiling)
            c->dgram_max = c->pmtu_ceiling;
    }
    return SX_OK;
}

/* Runs on the home shard with its token: the op joins its channel. */
SX_HOT void sx_op_push_run(void *owner, sx_inbox_req_t *req)
{
    sx_shard_t *shard = owner;
    sx_op_t *op = (sx_op_t *)req;
    sx_chan_t *c = sx_chan_get_locked(shard, op->peer, op->lane);

    if (c == NULL) {
        sx_op_complete_locked(shard, op, SX_ERR_NO_MEMORY);
        return;
    }
    bool more = op->more; /* the push may complete and free the op */
    sx_chan_push_locked(c, op);
    if (more)
        shard->hold_flush = true;
}

bool sx_chan_would_wait_locked(const sx_chan_t *c)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;

    /* Messages sx_sendi held back only wait for the flush: one more may
     * join them. */
    return (c->sendq != NULL && !c->held) || c->rtx != NULL ||
           (uint32_t)(c->snd_nxt - c->snd_una) >= p->window || c->inflight_bytes >= p->max_inflight;
}
