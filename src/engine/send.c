/* SPDX-License-Identifier: BSD-3-Clause */
/* Active-message sends: the public entry points above the shards. */
#include <stdlib.h>
#include <string.h>

#include "common/copy.h"
#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "engine/engine.h"
#include "shard/shard.h"
#include "shard/chan.h"
#include "shard/op_cache.h"

SX_HOT void sx_engine_submit(struct sx_engine *e, unsigned shard, sx_inbox_req_t *req)
{
    /* The baseline serialises every entry point on one lock (and has one
     * shard, so shard is 0 there). */
    sx_global_enter(e);
    (void)sx_shard_submit_mpsc(e->shards[shard], req);
    sx_global_exit(e);
}

/* Validates a send and sums its length; SX_OK or why not. */
SX_HOT static int sx_send_check(sx_peer_h peer, const struct iovec *iov, int iovcnt,
                                uint64_t *len_p)
{
    uint64_t len = 0;

    if (peer == NULL || iovcnt < 0 || iovcnt > SX_OP_IOV_MAX || (iovcnt > 0 && iov == NULL)) {
        sx_error("send", "invalid send: peer %p, iovcnt %d (at most %d)", (void *)peer, iovcnt,
                 SX_OP_IOV_MAX);
        return SX_ERR_INVALID_PARAM;
    }
    struct sx_engine *e = peer->engine;
    if (sx_engine_closing(e, "send"))
        return SX_ERR_SHUTDOWN;
    const uint64_t max = e->env.conf.max_msg;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > 0 && iov[i].iov_base == NULL) {
            sx_error("send", "invalid send: iov[%d] has length %zu and no buffer", i,
                     iov[i].iov_len);
            return SX_ERR_INVALID_PARAM;
        }
        /* Checked piece by piece: a sum could wrap past 2^64. */
        if (iov[i].iov_len > max - len) {
            sx_error("send", "message exceeds SX_MAX_MSG_SIZE (%llu) at iov[%d] (%zu bytes)",
                     (unsigned long long)max, i, iov[i].iov_len);
            return SX_ERR_INVALID_PARAM;
        }
        len += iov[i].iov_len;
    }
    int failed = atomic_load(&peer->failed);
    if (failed != 0)
        return sx_peer_failed_status(peer, "send", failed);
    *len_p = len;
    return SX_OK;
}

unsigned sx_send_lane(struct sx_engine *e, sx_peer_h peer, unsigned *home_p)
{
    unsigned home = e->global_mode ? 0 : sx_engine_home_shard(e);
    *home_p = home;
    /* By default shard i talks to the peer's shard i modulo its count. */
    return home % peer->nshards;
}

SX_HOT SX_API int sx_send_ex(sx_peer_h peer, uint8_t tag, const struct iovec *iov, int iovcnt,
                             const sx_send_params_t *params, sx_complete_cb_t cb, void *ctx)
{
    uint64_t len;
    int rc = sx_send_check(peer, iov, iovcnt, &len);
    if (rc != SX_OK)
        return rc;
    const uint64_t known = SX_SEND_PARAM_LANE | SX_SEND_PARAM_FLAGS;
    if (params != NULL && (params->field_mask & ~known) != 0) {
        sx_error("send", "sx_send_ex: unknown field_mask bits 0x%llx",
                 (unsigned long long)(params->field_mask & ~known));
        return SX_ERR_INVALID_PARAM;
    }
    if (params != NULL && (params->field_mask & SX_SEND_PARAM_FLAGS) &&
        (params->flags & ~(unsigned)SX_SEND_MORE) != 0) {
        sx_error("send", "sx_send_ex: unknown flags 0x%x", params->flags & ~(unsigned)SX_SEND_MORE);
        return SX_ERR_INVALID_PARAM;
    }
    struct sx_engine *e = peer->engine;
    sx_op_t *op = sx_op_alloc();
    if (op == NULL)
        return SX_ERR_NO_MEMORY;
    op->req.run = sx_op_push_run;
    op->peer = peer;
    op->tag = tag;
    op->iovcnt = (uint16_t)iovcnt;
    op->len = len;
    op->cb = cb;
    op->ctx = ctx;
    if (iovcnt == 1)
        op->iov[0] = iov[0]; /* the common case, without a call (common/copy.h) */
    else if (iovcnt > 0)
        memcpy(op->iov, iov, (size_t)iovcnt * sizeof(*iov));
    unsigned home;
    op->lane = sx_send_lane(e, peer, &home);
    if (params != NULL && (params->field_mask & SX_SEND_PARAM_LANE))
        op->lane = params->lane % peer->nshards;
    if (params != NULL && (params->field_mask & SX_SEND_PARAM_FLAGS))
        op->more = (params->flags & SX_SEND_MORE) != 0;
    sx_engine_submit(e, home, &op->req);
    return SX_INPROGRESS;
}

SX_API int sx_send(sx_peer_h peer, uint8_t tag, const struct iovec *iov, int iovcnt,
                   sx_complete_cb_t cb, void *ctx)
{
    return sx_send_ex(peer, tag, iov, iovcnt, NULL, cb, ctx);
}

/*
 * SX_SENDI_HOLD_US (DESIGN.md section 4): the second and later sx_sendi
 * between two of the caller's progress passes are held back, so that a
 * burst (ob1's Isends of a window, one BTL sendi each) shares datagrams
 * instead of paying a system call and a datagram each: 431 k against
 * 2.66 M 8-byte MPI messages/s between two namespace hosts. The first
 * goes at once, so a ping-pong's message never waits. What is held
 * leaves at the caller's next progress call, when SX_SENDI_HOLD_BYTES of
 * it are held, or at the deadline, when the engine's service flushes the
 * shards (service.c): never an open-ended wait for company (Nagle's
 * trap), and an MPI_Isend followed by computation still leaves.
 */
#define SX_SENDI_HOLD_BYTES (64u * 1024u)

static void sendi_hold(sx_shard_t *shard, sx_chan_t *c, uint64_t len)
{
    const sx_shard_env_t *env = shard->env;

    if (env->sendi_hold_ns != 0 && shard->sendi_since_progress &&
        shard->held_bytes + len < SX_SENDI_HOLD_BYTES) {
        shard->held_bytes += (size_t)len;
        shard->hold_flush = true; /* leaving skips the flush once */
        sx_stat_add(&shard->stats.sendi_held, 1);
        c->held = true;
        if (!shard->hold_armed) {
            shard->hold_armed = true;
            env->svc_hold(env->svc_arg, sx_time_ns() + env->sendi_hold_ns);
        }
    }
    shard->sendi_since_progress = true;
}

SX_API int sx_sendi(sx_peer_h peer, uint8_t tag, const struct iovec *iov, int iovcnt)
{
    uint64_t len;
    int rc = sx_send_check(peer, iov, iovcnt, &len);
    if (rc != SX_OK)
        return rc;
    struct sx_engine *e = peer->engine;
    unsigned home;
    unsigned lane = sx_send_lane(e, peer, &home);
    sx_shard_t *shard = e->shards[home];

    sx_global_enter(e);
    if (!sx_delegate_enter(&shard->token, &shard->inbox, shard, NULL)) {
        rc = SX_ERR_AGAIN;
        goto out;
    }
    sx_chan_t *c = sx_chan_get_locked(shard, peer, lane);
    if (c == NULL || c->failed) {
        rc = (c == NULL) ? SX_ERR_NO_MEMORY : c->failed;
    } else if (sx_chan_would_wait_locked(c)) {
        rc = SX_ERR_AGAIN; /* it would have to wait: that is sx_send's job */
    } else {
        sx_op_t *op = sx_op_alloc_inline((size_t)len);
        if (op == NULL) {
            rc = SX_ERR_NO_MEMORY;
        } else {
            op->peer = peer;
            op->lane = lane;
            op->tag = tag;
            op->len = len;
            size_t off = 0;
            for (int i = 0; i < iovcnt; i++) {
                sx_copy_small(op->inline_data + off, iov[i].iov_base, iov[i].iov_len);
                off += iov[i].iov_len;
            }
            sx_stat_add(&shard->stats.copy_tx_bytes, len);
            op->iovcnt = 1;
            op->iov[0].iov_base = op->inline_data;
            op->iov[0].iov_len = len;
            sx_chan_push_locked(c, op);
            sendi_hold(shard, c, len);
            rc = SX_OK;
        }
    }
    /* Leaving flushes: the message goes out before this returns, unless
     * sendi_hold held it back. */
    sx_delegate_leave_locked(&shard->token, &shard->inbox, shard);
out:
    sx_global_exit(e);
    return rc;
}
