/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels, congestion control (chan.h, shard/cc.h): which channels use
 * their destination host's controller, the flush's test against its
 * window and pacing clock, and the signals the ACK path gives it.
 */
#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "shard/cc.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/peer.h"

void sx_chan_cc_attach_locked(sx_chan_t *c)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;
    sx_tl_iface_t *iface = sx_chan_iface(c);

    sx_timer_init(&c->cc_timer, sx_chan_cc_timer, c);
    if (c->tl != SX_SHARD_TL_NET || c->shard->env->cc == NULL || p->cc_mode == SX_CC_OFF)
        return;
    /* auto: a path with no link (loopback) has no queue to share, and the
     * receiver's socket is flow control's (the receive window). */
    if (p->cc_mode == SX_CC_AUTO && iface->ops->dest_local != NULL &&
        iface->ops->dest_local(iface, c->dest))
        return;
    uint64_t host = iface->ops->dest_host != NULL ? iface->ops->dest_host(iface, c->dest) : 0;
    if (host == 0)
        host = c->peer->epoch; /* the transport cannot tell: the peer is a host */
    c->cc = sx_cc_get(c->shard->env->cc, host, (uint32_t)c->dgram_max);
    /* The peer's datagrams to this interface carry the marks its window
     * answers (wire.h's ECN counts): read them from now on. */
    if (c->cc != NULL && iface->ops->ecn_report != NULL)
        iface->ops->ecn_report(iface);
}

void sx_chan_cc_timer(sx_timer_t *timer, void *arg)
{
    sx_chan_t *c = arg;

    (void)timer;
    if (!c->failed && (c->sendq != NULL || c->rtx != NULL))
        sx_chan_kick_locked(c);
}

void sx_chan_retry_at_locked(sx_chan_t *c, uint64_t at)
{
    /* An earlier retry wins: a pacing wait after a window stall's retry
     * (a quarter of a round trip) used to wait for the later one. */
    if (!sx_timer_is_pending(&c->cc_timer))
        sx_wheel_add(c->shard->wheel, &c->cc_timer, at);
    else if (sx_u64_before(at, sx_timer_deadline(&c->cc_timer)))
        sx_wheel_rearm(c->shard->wheel, &c->cc_timer, at);
}

SX_HOT bool sx_chan_cc_allows_locked(sx_chan_t *c, uint64_t now)
{
    sx_cc_t *cc = c->cc;

    if (!sx_cc_window_open(cc, 1, c->cc_unposted, now)) {
        /* An ACK of ours kicks this channel; one of another channel to the
         * host (another shard's, perhaps) does not: look again in a
         * quarter of a round trip. */
        uint64_t srtt = atomic_load_explicit(&cc->srtt_ns, memory_order_relaxed);
        uint64_t tick = sx_wheel_tick_ns(c->shard->wheel);
        sx_stat_add(&c->shard->stats.cc_window_stalls, 1);
        sx_chan_retry_at_locked(c, now + (srtt / 4 > tick ? srtt / 4 : tick));
        return false;
    }
    uint64_t at = sx_cc_pace_wait(cc, c->cc_pace_unposted, c->shard->pass_gap_ns, now);
    if (at != 0) {
        sx_stat_add(&c->shard->stats.cc_pace_waits, 1);
        sx_chan_retry_at_locked(c, at);
        return false;
    }
    return true;
}

SX_HOT void sx_chan_cc_in_locked(sx_chan_t *c, sx_txpkt_t *pkt)
{
    if (c->cc == NULL)
        return;
    /* Every transmission takes its time on the clock; the flush posts it
     * and what enters the pipe. */
    c->cc_pace_unposted += sx_cc_pace_interval(c->cc, pkt->len);
    if (pkt->in_pipe)
        return;
    pkt->in_pipe = true;
    c->cc_pipe += pkt->len;
    c->cc_unposted += (int64_t)pkt->len;
}

SX_HOT void sx_chan_cc_acked_out_locked(sx_chan_t *c, sx_txpkt_t *pkt)
{
    if (c->cc == NULL || !pkt->in_pipe)
        return;
    pkt->in_pipe = false;
    c->cc_pipe -= pkt->len;
    c->cc_unposted -= (int64_t)pkt->len; /* the ACK path posts it */
}

SX_HOT void sx_chan_cc_post_locked(sx_chan_t *c, uint64_t now)
{
    if (c->cc_pace_unposted != 0) {
        sx_cc_pace_advance(c->cc, c->cc_pace_unposted, c->shard->pass_gap_ns, now);
        c->cc_pace_unposted = 0;
    }
    if (c->cc_unposted > 0)
        sx_cc_sent(c->cc, (size_t)c->cc_unposted);
    else if (c->cc_unposted < 0)
        sx_cc_forget(c->cc, (size_t)-c->cc_unposted);
    c->cc_unposted = 0;
}

void sx_chan_cc_out_locked(sx_chan_t *c, sx_txpkt_t *pkt)
{
    if (c->cc == NULL || !pkt->in_pipe)
        return;
    pkt->in_pipe = false;
    c->cc_pipe -= pkt->len;
    sx_cc_forget(c->cc, pkt->len);
}

void sx_chan_cc_lost_locked(sx_chan_t *c, sx_txpkt_t *pkt, bool persistent, uint64_t now)
{
    if (c->cc == NULL)
        return;
    sx_chan_cc_out_locked(c, pkt);
    sx_chan_cc_cut_locked(c, pkt->last_sent_ns, pkt->seq, false, persistent, now);
}

/*
 * Undoing a halving that was not needed. The loss episode of a halving
 * this channel made is every packet it sends again from then on, up to
 * SX_WIRE_SACK_BITS past the first one lost (a bit each in undo_bits; the
 * probe's, already sent, for a tail loss probe's repair). When the peer
 * has reported each of them twice (D-SACK, RFC 2883), every copy of the
 * first transmission arrived: the packets were late, not lost, and the
 * halving goes back (RFC 3708 section 3's test, RFC 4015's response;
 * Linux counts undo_retrans down the same way, tcp_try_undo_dsack). A
 * resend the peer got only once, a report lost on the way, a resend
 * outside the span, another decrease since, or another channel's loss of
 * the same round (sx_cc_lost's veto) leaves the halving as it was: undo
 * errs towards the cut. RACK widens its reordering allowance on the same
 * reports (chan_retransmit.c), so the next delay as long costs no resend.
 */
static void chan_cc_episode(sx_chan_t *c, uint32_t seq, bool resent, uint64_t cut_ns)
{
    c->undo_cut_ns = cut_ns;
    c->undo_base = seq;
    c->undo_bits = resent ? 1 : 0;
    c->undo_heard = false;
}

void sx_chan_cc_cut_locked(sx_chan_t *c, uint64_t sent_ns, uint32_t seq, bool resent,
                           bool persistent, uint64_t now)
{
    if (c->cc == NULL)
        return;
    int cut = sx_cc_lost(c->cc, sent_ns, persistent, c->undo_cut_ns, now);
    if (cut == 1) {
        sx_stat_add(&c->shard->stats.cc_loss_cuts, 1);
        chan_cc_episode(c, seq, resent, sx_cc_cut_name(now));
    } else if (cut == 2) {
        sx_stat_add(&c->shard->stats.cc_collapses, 1);
        c->cc_collapse_ns = sx_cc_cut_name(now);
        c->undo_cut_ns = 0;
    } else if (resent) {
        sx_chan_cc_resent_locked(c, seq); /* the same round: one more copy to hear of */
    }
}

void sx_chan_cc_resent_locked(sx_chan_t *c, uint32_t seq)
{
    if (c->undo_cut_ns == 0)
        return;
    uint32_t off = seq - c->undo_base;
    /* A copy it cannot follow, or a third copy of a packet whose second
     * no report covered yet: a duplicate report would then say that two
     * of its copies arrived, not that the first did (a probe on top of
     * a resend whose ACK came late, a timeout after one whose ACK was
     * lost). The halving stands. */
    if (off >= SX_WIRE_SACK_BITS || (c->undo_bits & (1ull << off)))
        c->undo_cut_ns = 0;
    else
        c->undo_bits |= 1ull << off;
}

void sx_chan_cc_dsack_locked(sx_chan_t *c, uint32_t seq)
{
    uint32_t off = seq - c->undo_base;

    if (c->undo_cut_ns == 0 || off >= SX_WIRE_SACK_BITS || !(c->undo_bits & (1ull << off)))
        return;
    c->undo_bits &= ~(1ull << off);
    c->undo_heard = true;
}

void sx_chan_cc_undo_try_locked(sx_chan_t *c)
{
    /* Copies still to be reported, or to go (the same ACK may have found
     * more lost), or a timeout's recovery that may resend more: not yet.
     * The ACK that ends the recovery or takes the last queued packet
     * out tries again. */
    if (c->undo_cut_ns == 0 || !c->undo_heard || c->undo_bits != 0 || c->rtx != NULL ||
        c->in_rto_recovery)
        return;
    uint64_t cut_ns = c->undo_cut_ns;
    c->undo_cut_ns = 0;
    if (sx_cc_undo_loss(c->cc, cut_ns)) {
        sx_stat_add(&c->shard->stats.cc_loss_undos, 1);
        sx_debug("chan",
                 "%s: the window's halving was spurious: every packet its episode "
                 "resent arrived twice (D-SACK); undone",
                 c->peer->name);
    }
}

void sx_chan_cc_rto_spurious_locked(sx_chan_t *c)
{
    if (c->cc != NULL && c->cc_collapse_ns != 0 && sx_cc_undo(c->cc, c->cc_collapse_ns))
        sx_stat_add(&c->shard->stats.cc_undos, 1);
    c->cc_collapse_ns = 0;
}

SX_HOT void sx_chan_cc_ecn_rx_locked(sx_chan_t *c, uint8_t ecn)
{
    if (ecn == SX_TL_ECN_CE) {
        c->rx_ecn_ce++;
        sx_stat_add(&c->shard->stats.rx_ecn_ce, 1);
    } else if (ecn != SX_TL_ECN_NOT_ECT) {
        c->rx_ecn_ect++;
    }
}

SX_HOT void sx_chan_cc_ecn_ack_locked(sx_chan_t *c, const sx_wire_hdr_t *h, uint64_t now)
{
    /* Counts only grow (mod 2^32): an ACK overtaken by a newer one carries
     * smaller counts and says nothing new. */
    int32_t ect = (int32_t)(h->ecn_ect - c->peer_ecn_ect);
    int32_t ce = (int32_t)(h->ecn_ce - c->peer_ecn_ce);
    if (ect < 0)
        ect = 0;
    if (ce < 0)
        ce = 0;
    if (ect == 0 && ce == 0)
        return;
    c->peer_ecn_ect += (uint32_t)ect;
    c->peer_ecn_ce += (uint32_t)ce;
    if (c->cc == NULL)
        return;
    /* RFC 9002 section 7.1 (and RFC 3168 section 6.1.2): a CE mark is a
     * congestion event, once per round trip, told by the send time of the
     * newest packet acknowledged, which RACK keeps (rack_ns); how far
     * the window falls is DCTCP's (shard/cc.h). */
    if (sx_cc_ecn(c->cc, (uint32_t)ect, (uint32_t)ce, c->rack_ns, now))
        sx_stat_add(&c->shard->stats.cc_ecn_cuts, 1);
}

SX_HOT void sx_chan_cc_rtt_locked(sx_chan_t *c, uint64_t rtt, uint64_t now)
{
    if (c->cc != NULL && sx_cc_rtt(c->cc, rtt, c->shard->env->conf.cc_delay_ns, now))
        sx_stat_add(&c->shard->stats.cc_delay_exits, 1);
}
