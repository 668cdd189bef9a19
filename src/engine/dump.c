/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_dump: the engine's state, shard by shard and channel by channel, for a
 * person debugging a hang or a loss (docs/debugging.md explains the
 * fields). The watchdog (watchdog.c) reuses the channel report.
 *
 * A shard's channels belong to its token holder, so each shard is read
 * while holding its token. The token is never waited on by the engine's
 * own threads; the dump is a diagnosis, not a fast path, so it retries the
 * try-lock for a bounded time, yielding, and reports a shard that stayed
 * busy all along (a callback that never returns holds its shard's token:
 * that, too, is the answer to "why does it hang"). Leaving runs what
 * other threads queued meanwhile (sx_delegate_leave_locked), as every
 * token holder must, so the dump never strands a request.
 *
 * Lock order, the same as a callback's that adds or removes a peer: the
 * global lock (SX_THREAD_MODE=global), a shard's token, the peer lock.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "common/time.h"
#include "engine/diag.h"
#include "engine/engine.h"
#include "shard/shard.h"
#include "shard/chan.h"
#include "shard/conn.h"

/* Most operations listed per channel; the rest are counted. */
#define SX_DUMP_OPS_PER_CHAN 8

static const char *sx_op_kind_name(unsigned kind)
{
    static const char *const names[] = {"am", "put", "get", "response"};
    return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "unknown";
}

static const char *sx_conn_state_name(unsigned conn)
{
    switch (conn) {
    case SX_CONN_IDLE:
        return "idle";
    case SX_CONN_CONNECTING:
        return "connecting";
    case SX_CONN_UP:
        return "up";
    default:
        return "unknown";
    }
}

static double sx_ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

bool sx_diag_shard_enter(struct sx_engine *e, sx_shard_t *s, uint64_t budget_ns)
{
    uint64_t start = sx_time_ns();

    sx_global_enter(e);
    /* A diagnosis's tenure runs what was queued meanwhile when it leaves
     * (a peer's close, a send to a failed peer): their callbacks wait for
     * the next caller, as the service's do, instead of running on the
     * diagnostics thread, which the application never gave us, or inside
     * sx_dump. */
    sx_shard_set_deferring(true);
    for (unsigned tries = 0;; tries++) {
        if (sx_delegate_try_acquire(&s->token, &s->inbox, s))
            return true;
        if ((tries & 63) == 63 && sx_time_ns() - start >= budget_ns)
            break;
        sched_yield();
    }
    sx_shard_set_deferring(false);
    sx_global_exit(e);
    return false;
}

void sx_diag_shard_leave(struct sx_engine *e, sx_shard_t *s)
{
    (void)sx_delegate_leave_locked(&s->token, &s->inbox, s);
    sx_shard_set_deferring(false);
    sx_global_exit(e);
}

/* Counts the operations on one of a channel's queues. */
static unsigned sx_ops_count(const sx_op_t *op)
{
    unsigned n = 0;
    for (; op != NULL; op = op->next)
        n++;
    return n;
}

/* The oldest unacknowledged packet's retransmission deadline, or 0. */
static uint64_t sx_chan_next_rtx(const sx_chan_t *c)
{
    uint64_t next = 0;
    uint32_t window = c->shard->env->conf.window;
    for (uint32_t seq = c->snd_una; seq != c->snd_nxt; seq++) {
        const sx_txpkt_t *pkt = c->win[seq & (window - 1)];
        if (pkt != NULL && !pkt->queued && (next == 0 || pkt->deadline_ns < next))
            next = pkt->deadline_ns;
    }
    return next;
}

static void sx_dump_ops(FILE *out, const char *state, const sx_op_t *op, uint64_t now_coarse,
                        uint64_t min_age_ns, unsigned *listed_p)
{
    for (; op != NULL; op = op->next) {
        uint64_t age = now_coarse > op->queued_ns ? now_coarse - op->queued_ns : 0;
        if (age < min_age_ns)
            continue;
        if (*listed_p >= SX_DUMP_OPS_PER_CHAN) {
            (*listed_p)++;
            continue;
        }
        (*listed_p)++;
        fprintf(out, "    op %s to %s lane %u", sx_op_kind_name(op->kind), op->peer->name,
                op->lane);
        if (op->kind == SX_OP_AM)
            fprintf(out, " tag %u", op->tag);
        fprintf(out, ", %" PRIu64 " bytes, pending %.3f s, %s", op->len, (double)age / 1e9, state);
        if (op->started)
            fprintf(out, " (%" PRIu64 " bytes cut, last seq %" PRIu32 ")", op->off, op->last_seq);
        fputc('\n', out);
    }
}

unsigned sx_dump_chan_locked(FILE *out, const sx_chan_t *c, uint64_t now, uint64_t min_age_ns)
{
    const struct sx_peer *peer = c->peer;
    char addr[96] = "?";
    sx_tl_iface_t *iface = c->shard->ifaces[c->tl];
    const sx_peer_addr_t *a = &peer->addr[c->lane];
    if (iface != NULL && iface->ops->addr_str != NULL)
        iface->ops->addr_str(iface, a->bytes, a->len, addr, sizeof(addr));

    uint32_t unacked = c->snd_nxt - c->snd_una;
    uint64_t next_rtx = unacked ? sx_chan_next_rtx(c) : 0;
    char rtx[48] = "none";
    if (next_rtx != 0)
        snprintf(rtx, sizeof(rtx), "in %.3f ms",
                 next_rtx > now ? sx_ms(next_rtx - now) : -sx_ms(now - next_rtx));
    fprintf(out,
            "  channel to %s lane %u (%s, epoch %016" PRIx64 ", %s via %s): %s%s\n"
            "    send: una %" PRIu32 " nxt %" PRIu32 ", %" PRIu32 " un-ACKed (%zu bytes) of "
            "window %" PRIu32 ", %s retransmit queue; next retransmit %s\n"
            "    rto %.3f ms, srtt %.3f ms, rttvar %.3f ms, backoff %u%s; peer heard from %.3f "
            "ms ago, %u probes since; its window: %" PRIu32 " packets, %" PRIu32 " bytes\n"
            "    receive: nxt %" PRIu32 ", %u out of order (%zu bytes), %" PRIu32
            " not yet handed up (%zu bytes), %u frames unacknowledged\n"
            "    ops: %u queued, %u awaiting ACK, %u awaiting an answer; %u answers owed\n",
            peer->name, c->lane, peer->is_self ? "self" : "remote", peer->epoch, addr,
            c->conn_method != NULL ? c->conn_method->ops->name : "?", sx_conn_state_name(c->conn),
            c->failed ? " FAILED: " : "", c->snd_una, c->snd_nxt, unacked, c->inflight_bytes,
            c->snd_window, c->rtx != NULL ? "a non-empty" : "an empty", rtx, sx_ms(c->rto_ns),
            sx_ms(c->srtt_ns), sx_ms(c->rttvar_ns), c->backoff,
            c->in_recovery ? ", fast recovery" : (c->in_rto_recovery ? ", timeout recovery" : ""),
            c->alive_ns != 0 && now > c->alive_ns ? sx_ms(now - c->alive_ns) : 0.0, c->probes,
            c->peer_rwnd_ack + c->peer_rwnd_pkts - c->snd_una, c->peer_rwnd_bytes, c->rcv_nxt,
            c->ooo_count, c->ooo_bytes, c->rcv_nxt - c->rcv_dlv, c->backlog_bytes, c->ack_pending,
            sx_ops_count(c->sendq), sx_ops_count(c->ackq), sx_ops_count(c->rmaq), c->resp_queued);
    if (c->cc != NULL) {
        const sx_cc_t *cc = c->cc;
        uint64_t ssthresh = atomic_load(&cc->ssthresh);
        char ss[32] = "none (slow start)";
        if (ssthresh != UINT64_MAX)
            snprintf(ss, sizeof(ss), "%" PRIu64 " bytes", ssthresh);
        fprintf(out,
                "    congestion (the host's, shared): window %" PRIu64 " bytes, %" PRId64
                " in flight, threshold %s, srtt %.3f ms, min rtt %.3f ms\n",
                atomic_load(&cc->cwnd), atomic_load(&cc->inflight), ss,
                sx_ms(atomic_load(&cc->srtt_ns)), sx_ms(atomic_load(&cc->min_rtt_ns)));
        fprintf(out,
                "    ECN: the peer got %" PRIu32 " of ours marked CE (DCTCP alpha %.3f); we got "
                "%" PRIu32 " ECN-capable, %" PRIu32 " marked CE\n",
                c->peer_ecn_ce, (double)atomic_load(&cc->alpha) / SX_CC_ALPHA_ONE, c->rx_ecn_ect,
                c->rx_ecn_ce);
    }
    if (c->failed)
        fprintf(out, "    failed with %s\n", sx_status_name(c->failed));
    /* Ages come from the coarse clock the operations were stamped with. */
    uint64_t now_coarse = sx_time_coarse_ns();
    unsigned listed = 0;
    sx_dump_ops(out, "waiting to be sent", c->sendq, now_coarse, min_age_ns, &listed);
    sx_dump_ops(out, "sent, waiting for the ACK", c->ackq, now_coarse, min_age_ns, &listed);
    sx_dump_ops(out, "waiting for the target's answer", c->rmaq, now_coarse, min_age_ns, &listed);
    if (listed > SX_DUMP_OPS_PER_CHAN)
        fprintf(out, "    ... and %u more\n", listed - SX_DUMP_OPS_PER_CHAN);
    return listed;
}

/* Everything about one shard; its token is held. */
static void sx_dump_shard_locked(struct sx_engine *e, sx_shard_t *s, FILE *out, uint64_t now)
{
    sx_hotel_stats_t hs = {0};
    (void)sx_hotel_stats(s->hotel, &hs);
    fprintf(out,
            "shard %u (core %d, numa %d): inbox depth %zu, hotel %" PRIu32 " of %" PRIu32
            " rooms (high water %" PRIu32 "), progress passes %" PRIu64 "\n",
            s->index, s->core, s->numa_node, sx_inbox_depth_locked(&s->inbox), hs.occupancy,
            hs.rooms, hs.high_water, sx_stat_read(&s->stats.progress_calls));
    sx_fairlock_lock(&e->peers.lock);
    for (const struct sx_peer *peer = e->peers.all; peer != NULL; peer = peer->all_next) {
        for (unsigned lane = 0; lane < peer->nshards; lane++) {
            const sx_chan_t *c = peer->chans[(size_t)s->index * peer->nshards + lane];
            if (c != NULL)
                (void)sx_dump_chan_locked(out, c, now, 0);
        }
    }
    sx_fairlock_unlock(&e->peers.lock);
}

int sx_engine_dump(struct sx_engine *e, FILE *out, uint64_t budget_ns)
{
    uint64_t now = sx_time_ns();
    size_t npeers = 0;

    sx_fairlock_lock(&e->peers.lock);
    for (const struct sx_peer *p = e->peers.all; p != NULL; p = p->all_next)
        npeers++;
    sx_fairlock_unlock(&e->peers.lock);
    fprintf(out,
            "=== shardx dump: engine %s, pid %d, epoch %016" PRIx64 ", %u shards, %s mode, "
            "%zu peers ===\n",
            e->name, (int)getpid(), e->env.epoch, e->nshards, e->global_mode ? "global" : "sharded",
            npeers);
    for (unsigned i = 0; i < e->nshards; i++) {
        sx_shard_t *s = e->shards[i];
        if (!sx_diag_shard_enter(e, s, budget_ns)) {
            fprintf(out,
                    "shard %u: busy for %.0f ms (its token stayed held: a callback or a "
                    "progress pass that does not return?); not inspected\n",
                    i, sx_ms(budget_ns));
            continue;
        }
        sx_dump_shard_locked(e, s, out, now);
        sx_diag_shard_leave(e, s);
    }
    fprintf(out, "=== end of shardx dump ===\n");
    return fflush(out) == 0 ? SX_OK : SX_ERR_IO;
}

SX_API int sx_dump(sx_engine_h engine, FILE *out)
{
    if (engine == NULL || out == NULL)
        return sx_api_null("sx_dump", engine == NULL ? "the engine" : "out");
    return sx_engine_dump(engine, out, SX_DIAG_SHARD_BUDGET_NS);
}
