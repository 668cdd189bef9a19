/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels, retransmission (chan.h): the cumulative and selective ACKs
 * (RFC 2018), fast retransmit on duplicate ACKs (RFC 5681), RACK-style
 * loss detection (RFC 8985), the retransmission timeout with its RTT
 * estimate and back-off (RFC 6298) and the recovery after a timeout,
 * with F-RTO's test for spurious ones (RFC 5682). A packet's deadline
 * lives in the shard's hotel; its eviction is a timeout.
 */
#include <stdatomic.h>

#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/peer.h"

/* Arms (or re-arms) the retransmission deadline of @p pkt. */
SX_HOT int sx_chan_arm_locked(sx_chan_t *c, sx_txpkt_t *pkt, uint64_t now)
{
    uint64_t deadline = now + c->rto_ns;

    pkt->deadline_ns = deadline;
    if (pkt->key != 0)
        return sx_hotel_rearm(c->shard->hotel, pkt->key, deadline);
    return sx_hotel_checkin(c->shard->hotel, &pkt->guest, deadline, &pkt->key);
}

/*
 * Queues @p pkt to be sent again, in sequence order: the oldest
 * unacknowledged packet, timed out, must not wait behind younger ones.
 * When the shard's hotel was full, packets that found no room at their
 * first send sit in the queue (sx_chan_stamp_locked); a timed-out packet
 * queued behind them saw the room it had just vacated go to them, never
 * had one again, so never timed out again (no peer timeout), and without
 * it nothing younger could be acknowledged: the channel stopped for good
 * (test_liveness test_hotel_full). Most packets join at the tail (losses
 * are found in order) or the head; the walk between is for the rest.
 */
void sx_chan_queue_rtx_locked(sx_chan_t *c, sx_txpkt_t *pkt)
{
    if (pkt->queued)
        return;
    pkt->queued = true;
    pkt->rtx_next = NULL;
    if (c->rtx == NULL) {
        c->rtx = c->rtx_tail = pkt;
    } else if (sx_u32_before(c->rtx_tail->seq, pkt->seq)) {
        c->rtx_tail->rtx_next = pkt;
        c->rtx_tail = pkt;
    } else if (sx_u32_before(pkt->seq, c->rtx->seq)) {
        pkt->rtx_next = c->rtx;
        c->rtx = pkt;
    } else {
        sx_txpkt_t *q = c->rtx;
        while (q->rtx_next != NULL && sx_u32_before(q->rtx_next->seq, pkt->seq))
            q = q->rtx_next;
        pkt->rtx_next = q->rtx_next;
        q->rtx_next = pkt;
        if (c->rtx_tail == q)
            c->rtx_tail = pkt;
    }
    sx_chan_kick_locked(c);
}

static void chan_unqueue_rtx(sx_chan_t *c, sx_txpkt_t *pkt)
{
    sx_txpkt_t *prev = NULL;

    for (sx_txpkt_t *q = c->rtx; q != NULL; prev = q, q = q->rtx_next) {
        if (q != pkt)
            continue;
        if (prev != NULL)
            prev->rtx_next = q->rtx_next;
        else
            c->rtx = q->rtx_next;
        if (c->rtx_tail == q)
            c->rtx_tail = prev;
        break;
    }
    pkt->queued = false;
}

/* RTO = SRTT + max(G, 4 RTTVAR), clamped (RFC 6298 section 2). A tick of
 * the wheel stands in for the clock granularity G. */
static void chan_rto_compute(sx_chan_t *c)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;
    uint64_t g = sx_wheel_tick_ns(c->shard->wheel);
    uint64_t rto = c->srtt_ns + (4 * c->rttvar_ns > g ? 4 * c->rttvar_ns : g);

    if (rto < p->rto_min_ns)
        rto = p->rto_min_ns;
    if (rto > p->rto_max_ns)
        rto = p->rto_max_ns;
    c->rto_ns = rto;
}

void sx_chan_rto_restart_locked(sx_chan_t *c)
{
    if (c->srtt_ns != 0)
        chan_rto_compute(c);
    else
        c->rto_ns = c->shard->env->conf.rto_init_ns;
    c->backoff = 0;
}

/*
 * Whether an ACK read at @p arrived_ns, which came no earlier than
 * @p since_ns (the start of the shard's last poll that read its queues
 * empty: shard.h, rx_since_ns), may have waited for us longer than the
 * RTO: the sample of the packet sent at @p sent_ns is then left out. The
 * ACK came after both the send and since_ns; read more than an RTO after
 * the later of the two, it may have sat in our socket all that time,
 * because nobody polled the shard (the process was stopped or
 * descheduled, its callers computed with the service off or not yet
 * serving, SX_SERVICE_US, a callback ran long, callers only visit the
 * shard) or every poll found older datagrams first. Such a round trip
 * measures us, not the path. Taken, one sample after a 1.6 s stop put the
 * SRTT at 200 ms and the RTO at its ceiling (SX_RTO_MAX_US) for a dozen
 * samples, and told HyStart++ a queue had built (test_liveness
 * test_silence_counts_from_the_read). A path that turns slower than the
 * RTO still gives its samples while the shard's polls come back empty now
 * and then, since since_ns is recent then; only under a queue that never
 * empties are they lost, and a timeout's back-off then covers the path.
 * TCP takes the receive time the kernel stamps as the segment lands; the
 * udp option that would report it (SO_TIMESTAMPNS) costs every read a
 * control message.
 */
static bool chan_ack_waited(sx_chan_t *c, uint64_t sent_ns, uint64_t arrived_ns, uint64_t since_ns)
{
    uint64_t from = sx_u64_before(since_ns, sent_ns) ? sent_ns : since_ns;

    if (!sx_u64_before(from, arrived_ns) || arrived_ns - from <= c->rto_ns)
        return false;
    sx_stat_add(&c->shard->stats.rtt_waited, 1);
    return true;
}

/* RFC 6298 section 2: SRTT and RTTVAR from a sample R. */
SX_HOT static void chan_rtt_sample(sx_chan_t *c, uint64_t r, uint64_t now)
{
    sx_chan_cc_rtt_locked(c, r, now);
    if (c->min_rtt_ns == 0 || r < c->min_rtt_ns)
        c->min_rtt_ns = r;
    if (c->srtt_ns == 0) {
        c->srtt_ns = r;
        c->rttvar_ns = r / 2;
    } else {
        uint64_t err = c->srtt_ns > r ? c->srtt_ns - r : r - c->srtt_ns;
        c->rttvar_ns = (3 * c->rttvar_ns + err) / 4;
        c->srtt_ns = (7 * c->srtt_ns + r) / 8;
    }
    chan_rto_compute(c);
}

/*
 * Liveness: whether the peer has been silent for the peer timeout, counted
 * as TCP counts it, by probes that went unanswered rather than by wall
 * time alone (RFC 9293 section 3.8.3's R2 counts retransmissions). A
 * timer that fires @p deadline's worth late by more than a quarter of the
 * timeout says this process was not running (stopped, descheduled, a
 * paused machine): the peer could not have answered what we never sent,
 * so the silence counts again from now. Retransmissions and window probes
 * (c->probes) are the probes; any packet from the peer answers them
 * (chan_rx.c sets alive_ns).
 */
static bool chan_peer_silent(sx_chan_t *c, uint64_t deadline, uint64_t now)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;

    if (sx_u64_before(deadline, now) && now - deadline > p->peer_timeout_ns / 4) {
        sx_stat_add(&c->shard->stats.own_stalls, 1);
        c->alive_ns = now;
        c->probes = 0;
        return false;
    }
    return c->probes >= 2 && sx_u64_before(c->alive_ns, now) &&
           now - c->alive_ns > p->peer_timeout_ns;
}

/* A retransmission deadline passed: the packet is presumed lost. */
void sx_chan_on_timeout(sx_shard_t *shard, sx_shard_guest_t *guest)
{
    sx_txpkt_t *pkt = (sx_txpkt_t *)guest;
    sx_chan_t *c = pkt->chan;
    const sx_chan_conf_t *p = &shard->env->conf;
    uint64_t now = sx_wheel_now(shard->wheel);

    pkt->key = 0; /* the hotel already vacated the room */
    if (c->failed)
        return;
    bool heard = c->probes == 0; /* from the peer since the last timeout */
    if (chan_peer_silent(c, pkt->deadline_ns, now)) {
        sx_chan_fail_locked(c, SX_ERR_PEER_UNREACHABLE);
        return;
    }
    int other = atomic_load(&c->peer->failed);
    if (other != 0) {
        sx_chan_fail_locked(c, other);
        return;
    }
    if (pkt->seq != c->snd_una) {
        /*
         * RFC 6298 keeps one timer per connection and, when it expires,
         * resends only the oldest unacknowledged segment (section 5.4). Our
         * timers are per packet, for the hotel; a younger packet's timer
         * therefore only re-arms, and the oldest one's expiry (below) leads
         * the recovery. So a peer descheduled for a while costs one
         * spurious retransmission, not a window of them.
         */
        /* Except when an older packet of ours waits for a room (the
         * shard's hotel is full): this one gives its room up, or the
         * younger ones would keep every room while the one the peer needs
         * first never got one. Whether it arrived, SACKs, RACK or the
         * recovery led by the oldest's timeout find out. */
        if (c->room_wait && c->rtx != NULL && c->rtx->key == 0 &&
            sx_u32_before(c->rtx->seq, pkt->seq))
            return;
        if (sx_chan_arm_locked(c, pkt, now) != SX_OK)
            sx_chan_queue_rtx_locked(c, pkt); /* no room: let the flush retry it */
        return;
    }
    /* A probe that was out failed, or none went (the timeout came
     * first): the timeout leads, and the next probe may come sooner. */
    c->tlp_out = false;
    if (c->tlp_slow > 0)
        c->tlp_slow--;
    /* Exponential back-off (RFC 6298 section 5.5). */
    c->rto_ns = c->rto_ns * 2 > p->rto_max_ns ? p->rto_max_ns : c->rto_ns * 2;
    c->backoff++;
    c->probes++;
    /* Two timeouts without an ACK between: persistent congestion. One
     * alone may be spurious (a peer descheduled): the packets it resends
     * count as losses once an ACK says it was not (chan_rto_recovery_step). */
    if (c->backoff >= 2)
        sx_chan_cc_lost_locked(c, pkt, true, now);
    c->in_rto_recovery = true;
    c->rto_recover = c->snd_nxt;
    c->rto_at_ns = now;
    c->rto_burst = 1;
    sx_stat_add(&shard->stats.rtx_timeout, 1);
    sx_chan_pmtu_timeout_locked(c, pkt, heard, now);
    sx_debug("chan", "%s: seq %u timed out after %llu us (rto %llu us, una %u nxt %u)",
             c->peer->name, pkt->seq, (unsigned long long)((now - pkt->first_sent_ns) / 1000),
             (unsigned long long)(c->rto_ns / 1000), c->snd_una, c->snd_nxt);
    sx_chan_cc_out_locked(c, pkt); /* presumed lost: out of the pipe until resent */
    sx_chan_queue_rtx_locked(c, pkt);
}

/* The largest datagram the peer acknowledged since the path MTU's check
 * last looked (chan_pmtu.c): a path that carries it is no black hole for
 * that size. A packet resent in fragments went as datagrams of dgram_max. */
static inline void chan_pmtu_acked(sx_chan_t *c, const sx_txpkt_t *pkt)
{
    uint32_t len = pkt->len + c->tag_len; /* the datagram, with its tag */
    if (len > c->dgram_max)
        len = (uint32_t)c->dgram_max;
    if (len > c->pmtu_acked_len)
        c->pmtu_acked_len = len;
}

static void chan_complete_acked(sx_chan_t *c)
{
    while (c->ackq != NULL && sx_u32_before(c->ackq->last_seq, c->snd_una)) {
        sx_op_t *op = c->ackq;
        c->ackq = op->next;
        if (c->ackq == NULL)
            c->ackq_tail = NULL;
        if (c->refuse_hint == op)
            c->refuse_hint = NULL;
        /* SX_OK, or the refusal the peer sent before this ACK (wire.h). */
        int status = op->status;
        sx_op_complete_locked(c->shard, op, status);
        if (status == SX_OK)
            sx_stat_add(&c->shard->stats.ops_completed, 1);
    }
}

/*
 * After a timeout, the packets that were in flight then are presumed lost
 * too; each ACK that moves snd_una resends a few more of them, doubling
 * like slow start (RFC 5681 section 3.1), instead of waiting out one
 * timeout per packet. Packets SACKed or resent since the timeout are
 * skipped.
 */
static void chan_rto_recovery_step(sx_chan_t *c, uint64_t now)
{
    uint32_t mask = sx_chan_window(c) - 1;
    unsigned sent = 0;

    if (!sx_u32_before(c->snd_una, c->rto_recover)) {
        c->in_rto_recovery = false;
        c->cc_collapse_ns = 0; /* not found spurious: the collapse stands */
        return;
    }
    for (uint32_t s = c->snd_una; sx_u32_before(s, c->rto_recover) && sent < c->rto_burst; s++) {
        sx_txpkt_t *pkt = c->win[s & mask];
        if (pkt == NULL || pkt->sacked || pkt->queued || pkt->last_sent_ns > c->rto_at_ns)
            continue;
        sx_stat_add(&c->shard->stats.rtx_timeout, 1);
        sx_chan_cc_lost_locked(c, pkt, false, now);
        sx_chan_queue_rtx_locked(c, pkt);
        sent++;
    }
    if (c->rto_burst < 64)
        c->rto_burst *= 2;
}

/*
 * The peer's receive window, from an ACK no older than what snd_una says
 * (an old ACK overtaken by a newer one must not shrink it back). Returns
 * whether it changed, so that the caller does not take a window update
 * for a duplicate ACK (RFC 5681 section 2's definition excludes them).
 */
static inline bool chan_take_rwnd(sx_chan_t *c, const sx_wire_hdr_t *h)
{
    if (h->ack != c->snd_una)
        return false;
    /* A window larger than ours is ours: the edge stays within reach of
     * wrap-safe compares, whatever a peer (or the sink) advertises. */
    uint32_t pkts = h->rwnd_pkts > sx_chan_window(c) ? sx_chan_window(c) : h->rwnd_pkts;
    bool changed = pkts != c->peer_rwnd_pkts || h->rwnd_bytes != c->peer_rwnd_bytes;
    c->peer_rwnd_ack = h->ack;
    c->peer_rwnd_pkts = pkts;
    c->peer_rwnd_bytes = h->rwnd_bytes;
    if (c->rwnd_stalled && sx_chan_rwnd_open(c)) {
        /* The window a stalled flush waited on opened: send now, and stop
         * probing (unless PUT and GET still want it as a keepalive). */
        c->rwnd_stalled = false;
        c->persist_backoff = 0;
        if (c->rmaq == NULL)
            sx_wheel_cancel(c->shard->wheel, &c->persist_timer);
        sx_chan_kick_locked(c);
    }
    return changed;
}

/*
 * Whether the channel waits on its peer with nothing in flight, so that
 * no retransmission timer would notice a peer that died: a closed receive
 * window with data to send (the persist timer's case), or PUT and GET
 * that the peer acknowledged and has yet to answer (a keepalive's).
 */
SX_HOT static bool chan_waits_idle(const sx_chan_t *c)
{
    if (c->failed || c->snd_una != c->snd_nxt)
        return false;
    if (c->rmaq != NULL)
        return true;
    return c->sendq != NULL && !sx_chan_rwnd_open(c);
}

/*
 * The persist timer (RFC 9293 section 3.8.6.1), which doubles as a
 * keepalive: the peer's window is closed, or it owes answers to PUT and
 * GET, and nothing is in flight whose ACK would say it is alive (a window
 * update may also be lost). Probe it, backing off to SX_RTO_MAX_US; the
 * answer carries the window. A peer that answers is alive however long it
 * keeps the window shut or its answers coming (it is busy, not dead); one
 * that stops answering fails as a silent peer does.
 */
void sx_chan_persist_timer(sx_timer_t *timer, void *arg)
{
    sx_chan_t *c = arg;
    uint64_t now = sx_wheel_now(c->shard->wheel);

    if (!chan_waits_idle(c)) {
        c->persist_backoff = 0;
        if (!c->failed && c->sendq != NULL)
            sx_chan_kick_locked(c); /* the window opened meanwhile */
        return;
    }
    if (chan_peer_silent(c, sx_timer_deadline(timer), now)) {
        sx_chan_fail_why_locked(c, SX_ERR_PEER_UNREACHABLE, NULL);
        return;
    }
    sx_chan_send_probe_locked(c);
    c->probes++;
    sx_stat_add(&c->shard->stats.peer_probes, 1);
    sx_chan_arm_persist_locked(c, now);
}

void sx_chan_arm_persist_locked(sx_chan_t *c, uint64_t now)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;
    uint64_t delay = c->rto_ns;

    if (sx_timer_is_pending(&c->persist_timer))
        return;
    for (unsigned i = 0; i < c->persist_backoff && delay < p->rto_max_ns; i++)
        delay *= 2;
    if (delay > p->rto_max_ns)
        delay = p->rto_max_ns;
    if (c->persist_backoff < 32)
        c->persist_backoff++;
    sx_wheel_add(c->shard->wheel, &c->persist_timer, now + delay);
}

/* RACK's reordering allowance (RFC 8985 section 6.2): a packet is lost
 * when one sent more than this after it arrived. A quarter of SRTT, as
 * the RFC's first step (of min_RTT there: ours also covers a queue that
 * moves), widened by a quarter per round trip in which the peer reported
 * a duplicate, up to SRTT, the RFC's bound. Without the widening, a path
 * that reorders a flow resends what is only late and halves the window
 * for it: through the namespace cluster's shaped port, where two CPUs
 * emptying the queue in turn put 12 % of a 2->1 incast's datagrams
 * behind later ones of their channel and dropped none, shardx resent
 * 0.4-0.6 % of its bytes and its two senders cut their windows 120-160
 * times a second. */
#define SX_CHAN_REO_EXTRA_MAX 3  /* quarters beyond the first: up to SRTT */
#define SX_CHAN_REO_PERSIST   16 /* loss episodes without a duplicate before it narrows */

static uint64_t chan_reo_window(const sx_chan_t *c)
{
    return c->srtt_ns / 4 * (1u + c->reo_extra);
}

/* The peer got packet @p seq twice (SX_PKTF_DSACK): a copy we sent was
 * not needed, the first one having been late rather than lost (or the
 * network duplicated it, which the RFC does not tell apart either). Once
 * per round trip (RFC 8985 section 6.2, step 4: RACK.dsack_round). A
 * report of a packet not yet sent is ignored; any other only widens the
 * allowance, up to its bound, which is all a false one can do. */
static void chan_dsack(sx_chan_t *c, uint32_t seq)
{
    if (!sx_u32_before(seq, c->snd_nxt))
        return;
    sx_stat_add(&c->shard->stats.rtx_unneeded, 1);
    c->reo_persist = SX_CHAN_REO_PERSIST;
    if (c->dsack_round_open)
        return;
    c->dsack_round_open = true;
    c->dsack_round = c->snd_nxt;
    if (c->reo_extra < SX_CHAN_REO_EXTRA_MAX)
        c->reo_extra++;
}

/* RACK marks @p pkt lost: the first of a loss episode (a packet sent after
 * the latest one began) counts towards narrowing the allowance again
 * (RFC 8985 section 6.2, RACK.reo_wnd_persist). */
static void chan_loss_episode(sx_chan_t *c, const sx_txpkt_t *pkt, uint64_t now)
{
    if (pkt->last_sent_ns <= c->loss_round_ns)
        return;
    c->loss_round_ns = now;
    if (c->reo_persist > 0 && --c->reo_persist == 0)
        c->reo_extra = 0;
}

/*
 * Holding an ACK. An in-order data packet that also acknowledges new data
 * of ours is handed up first, and its acknowledgement is taken after: at
 * the shard's next datagram, before a timer of the shard fires (shard.c:
 * a retransmission timeout must see it, or it resends what was
 * acknowledged), or at the start of the shard's next pass. Taking it
 * (rooms checked out, sends completed, an RTT sample, the controller)
 * came between a ping's read and its pong's send, 160-175 ns of the
 * 1.1 us the library spent there (sx_bench latency, clock checkpoints);
 * after the caller has sent its reply it delays no one. RTT samples end
 * at the arrival; timers it re-arms start at the taking.
 *
 * Only a pass of a thread that calls the shard home holds one
 * (home_pass): that thread's next sx_progress starts with a pass over the
 * shard, where a shard that threads only visit would keep it until the
 * next visit. One is held per shard, and a second takes the first before
 * it is held, so they are taken in order; a channel that fails takes its
 * own first, so what the peer acknowledged completes with SX_OK.
 *
 * Taken at once, as before, are the ACKs whose wait costs more than it
 * saves: duplicate and out-of-range ones; those in loss recovery, which
 * may resend; those of a channel with sends queued behind the window
 * they open (a PUT stream's chunks, sent a pass later, came back to back
 * and landed less: test_rma test_put_lands under load); and those of a
 * channel with answers out that were sent from a registered region
 * under a pin (pinned_out). ob1 deregisters the region in the handler of
 * the very message whose ACK was held, and the deregistration copied the
 * region for packets already acknowledged (mem_shadow_bytes): 1 MiB
 * collectives at 2 ranks took ten times as long (test_rma
 * test_fin_after_get_copies_nothing).
 */
SX_HOT bool sx_chan_ack_hold_locked(sx_chan_t *c, const sx_wire_hdr_t *h, uint64_t now)
{
    sx_shard_t *shard = c->shard;

    if (!shard->home_pass || !sx_u32_before(c->snd_una, h->ack) ||
        sx_u32_before(c->snd_nxt, h->ack) || (h->flags & SX_PKTF_DSACK) || c->in_recovery ||
        c->in_rto_recovery || c->sendq != NULL || c->pinned_out != 0)
        return false;
    (void)sx_chan_ack_release_locked(shard);
    shard->ack_held_chan = c;
    shard->ack_held = *h;
    shard->ack_held_ns = now;
    shard->ack_held_since_ns = shard->rx_since_ns;
    sx_stat_add(&shard->stats.acks_held, 1);
    return true;
}

SX_HOT int sx_chan_ack_release_locked(sx_shard_t *shard)
{
    sx_chan_t *c = shard->ack_held_chan;

    if (c == NULL)
        return 0;
    sx_wire_hdr_t h = shard->ack_held; /* a copy: taking it runs callbacks */
    shard->ack_held_chan = NULL;
    if (c->failed)
        return 0;
    sx_chan_process_ack_locked(c, &h, false, sx_time_ns(), shard->ack_held_ns,
                               shard->ack_held_since_ns);
    if (c->ack_now || c->rtx != NULL || c->sendq != NULL)
        sx_chan_kick_locked(c);
    return 1;
}

/*
 * RACK's clock (RFC 8985 section 6.2, step 2): the latest send time of a
 * packet known to have arrived. A resent packet whose acknowledgement came
 * sooner after the resend than any round trip ever took was acknowledged
 * for its first copy, which was only late: its resend time would move the
 * clock past packets sent meanwhile that are merely reordered as well,
 * and mark them lost.
 */
static void chan_rack_advance(sx_chan_t *c, const sx_txpkt_t *pkt, uint64_t arrived_ns)
{
    if (pkt->transmissions > 1 && c->min_rtt_ns != 0 &&
        sx_u64_before_eq(pkt->last_sent_ns, arrived_ns) &&
        arrived_ns - pkt->last_sent_ns < c->min_rtt_ns)
        return;
    if (pkt->last_sent_ns > c->rack_ns)
        c->rack_ns = pkt->last_sent_ns;
}

SX_HOT void sx_chan_process_ack_locked(sx_chan_t *c, const sx_wire_hdr_t *h, bool pure_ack,
                                       uint64_t now, uint64_t arrived_ns, uint64_t since_ns)
{
    uint32_t mask = sx_chan_window(c) - 1;
    /*
     * The packets an earlier ACK could already report: up to the SACK span
     * beyond the last cumulative ACK. One beyond it that this ACK covers
     * may have arrived long ago, unreportable while a hole held the
     * cumulative ACK back, and now - first_sent would count the hole's
     * repair: with small datagrams and heavy loss (ofi's 1472 bytes, 30 %)
     * such samples were most of them and pushed SRTT, every timeout and
     * RACK's reordering allowance towards the time a whole window takes to
     * repair. Only packets inside it give RTT samples.
     */
    uint32_t reportable = c->last_ack + SX_WIRE_SACK_BITS;

    if (sx_u32_before(c->snd_nxt, h->ack)) {
        /* Acknowledges what was never sent: the ACK is ignored, nothing
         * moves; the packet's data, if any, was taken on its own merits,
         * so this is not a drop. */
        sx_stat_add(&c->shard->stats.ack_unsent, 1);
        return;
    }
    if (c->dsack_round_open && !sx_u32_before(c->snd_una, c->dsack_round))
        c->dsack_round_open = false;
    /* A duplicate of our tail loss probe says its ACK was late, not that
     * the path reorders (chan_tlp.c). */
    if (pure_ack && (h->flags & SX_PKTF_DSACK)) {
        if (c->tlp_sent_ns != 0 && h->seq == c->tlp_seq)
            sx_chan_tlp_dsack_locked(c);
        else
            chan_dsack(c, h->seq);
        sx_chan_cc_dsack_locked(c, h->seq); /* a halving it shows spurious: below */
    }
    if (sx_u32_before(c->snd_una, h->ack)) {
        uint64_t sample = 0, sample_sent = 0;
        size_t acked = 0;
        bool original_acked = false;
        while (sx_u32_before(c->snd_una, h->ack)) {
            sx_txpkt_t *pkt = c->win[c->snd_una & mask];
            c->win[c->snd_una & mask] = NULL;
            if (pkt != NULL) {
                chan_pmtu_acked(c, pkt);
                chan_rack_advance(c, pkt, arrived_ns);
                /* F-RTO's evidence (RFC 5682 section 3, with SACK): an
                 * original from before the timeout that no ACK had
                 * reported. One SACKed before, or beyond what the last
                 * ACK could report, may have arrived before the timeout:
                 * the cumulative ACK that follows a lost tail's resend
                 * covers those, and the timeout was real. */
                if (pkt->transmissions == 1 && !pkt->sacked && pkt->first_sent_ns <= c->rto_at_ns &&
                    !sx_u32_before(reportable, c->snd_una))
                    original_acked = true;
                /* Karn's algorithm: only packets sent once give samples.
                 * The newest packet an ACK covers is the one whose arrival
                 * sent it; older ones may have waited behind a hole, and
                 * their wait would inflate the timeout until repair itself
                 * slows down. So the last one here wins, unless a SACK
                 * already reported it (its sample was taken then) or an
                 * earlier ACK could not have (see `reportable`). */
                if (pkt->transmissions == 1 && !pkt->sacked &&
                    !sx_u32_before(reportable, c->snd_una)) {
                    sample = arrived_ns - pkt->first_sent_ns;
                    sample_sent = pkt->first_sent_ns;
                }
                if (pkt->key != 0) {
                    void *occupant;
                    (void)sx_hotel_checkout(c->shard->hotel, pkt->key, &occupant);
                }
                if (pkt->queued)
                    chan_unqueue_rtx(c, pkt);
                c->inflight_bytes -= pkt->len;
                if (!pkt->sacked)
                    acked += pkt->len; /* a SACK counted the rest */
                sx_chan_cc_acked_out_locked(c, pkt);
                sx_chan_pkt_free_locked(c, pkt);
            }
            c->snd_una++;
        }
        if (c->cc != NULL) {
            sx_chan_cc_post_locked(c, now);
            sx_cc_acked(c->cc, acked, now);
        }
        if (sample != 0 && !chan_ack_waited(c, sample_sent, arrived_ns, since_ns)) {
            chan_rtt_sample(c, sample, now);
        } else if (c->backoff > 0 && c->srtt_ns != 0) {
            /* New data acknowledged: drop the back-off even without a
             * sample (every acknowledged packet may have been resent, so
             * Karn's rule gives none, or its ACK waited for us), as Linux
             * does on a forward ACK. Before the first sample the backed-off
             * RTO stays until one comes (RFC 6298 section 5, Karn's rule):
             * a path slower than SX_RTO_INIT_US gets its first sample so. */
            chan_rto_compute(c);
        }
        c->backoff = 0;
        c->dupacks = 0;
        c->last_ack = h->ack;
        /* Everything acknowledged: no probe is due, and a sleeping
         * service or progress thread must not wake for one. */
        if (c->snd_una != c->snd_nxt)
            sx_chan_tlp_mark_locked(c, now);
        else if (sx_timer_is_pending(&c->tlp_timer))
            sx_wheel_cancel(c->shard->wheel, &c->tlp_timer);
        if (c->in_recovery && !sx_u32_before(c->snd_una, c->recover))
            c->in_recovery = false;
        /* F-RTO's test (RFC 5682): an original transmission from before
         * the timeout was acknowledged, so the timeout was spurious (the
         * peer was slow, not the network lossy); stop resending the
         * window. Real holes are still found by SACK and RACK. */
        if (c->in_rto_recovery && original_acked) {
            c->in_rto_recovery = false;
            sx_stat_add(&c->shard->stats.rto_spurious, 1);
            sx_chan_cc_rto_spurious_locked(c);
        }
        if (c->in_rto_recovery)
            chan_rto_recovery_step(c, now);
        /* RFC 6298 (5.3): new data acknowledged restarts the timer, now
         * on the oldest packet still out; its own deadline may date from a
         * backed-off round. One without a room (the shard's hotel was full)
         * takes one now, or waits in the retransmit queue, which looks
         * again: the oldest packet is never left untimed. One not yet
         * posted is timed when it is (sx_chan_stamp_locked). */
        sx_txpkt_t *oldest = c->win[c->snd_una & mask];
        if (oldest != NULL && !oldest->queued && !oldest->unstamped &&
            sx_chan_arm_locked(c, oldest, now) != SX_OK)
            sx_chan_queue_rtx_locked(c, oldest); /* no room: the flush retries it */
        (void)chan_take_rwnd(c, h);
        chan_complete_acked(c);
        sx_chan_hold_check_locked(c);
        if (c->sendq != NULL)
            sx_chan_kick_locked(c);
        /* Everything is acknowledged, but PUT and GET still wait for the
         * target's answer: keep it probed. */
        c->persist_backoff = 0;
        if (chan_waits_idle(c))
            sx_chan_arm_persist_locked(c, now);
    } else if (chan_take_rwnd(c, h)) {
        /* A window update: not a duplicate ACK. */
    } else if (pure_ack && !(h->flags & SX_PKTF_DSACK) && h->ack == c->snd_una &&
               c->snd_una != c->snd_nxt) {
        /* A duplicate ACK: something after snd_una arrived, snd_una did not
         * (RFC 5681 section 3.2). Three of them start fast retransmit. One
         * that reports a duplicate says nothing new arrived.
         *
         * Only a packet sent once is resent here. Packets behind a resent
         * one left before its copy, so their ACKs say nothing of the copy:
         * RACK (below) sent it at an earlier SACK, once the hole was past
         * its reordering allowance, or the timeout did, and RACK finds the
         * copy lost again if it is (RFC 8985 section 6.2; RFC 6675 section
         * 4 resends a hole once per loss). Resending it here as well made
         * the peer get it twice and halved the window twice: sx_bench loss
         * at 0.1 % resent 4 packets for 2 holes, 2 reported as duplicates
         * (rtx_unneeded), with 4 halvings. The episode begins either way,
         * so that more duplicates wait for its end. */
        if (++c->dupacks == 3 && !c->in_recovery) {
            sx_txpkt_t *pkt = c->win[c->snd_una & mask];
            if (pkt != NULL) {
                c->in_recovery = true;
                c->recover = c->snd_nxt;
                if (pkt->transmissions <= 1) {
                    chan_loss_episode(c, pkt, now);
                    sx_stat_add(&c->shard->stats.rtx_dupack, 1);
                    sx_chan_cc_lost_locked(c, pkt, false, now);
                    sx_chan_queue_rtx_locked(c, pkt);
                }
            }
        }
    }
    /*
     * Selective ACKs (RFC 2018) and RACK-style loss detection (RFC 8985):
     * a packet is lost when one sent after it (by more than a reordering
     * allowance of SRTT/4) has arrived. That resends holes at once, and
     * also a retransmission that was lost again, which a "resend each hole
     * once" rule would leave to the timer.
     */
    if (h->sack != 0) {
        uint32_t highest = h->ack;
        uint64_t sack_sample = 0, sack_sent = 0;
        size_t sacked = 0;
        for (unsigned i = 0; i < SX_WIRE_SACK_BITS; i++) {
            if (!(h->sack & (1ull << i)))
                continue;
            uint32_t s = h->ack + 1 + i;
            if (!sx_u32_before(s, c->snd_nxt) || sx_u32_before(s, c->snd_una))
                continue;
            sx_txpkt_t *pkt = c->win[s & mask];
            if (pkt != NULL) {
                if (!pkt->sacked) {
                    chan_pmtu_acked(c, pkt);
                    sx_chan_cc_acked_out_locked(c, pkt);
                    sacked += pkt->len;
                    /* It arrived: nothing times it any more (RACK and the
                     * timeout recovery skip SACKed packets), and its room
                     * is for the holes, which may have none when the
                     * shard's hotel is full. */
                    if (pkt->key != 0) {
                        void *occupant;
                        (void)sx_hotel_checkout(c->shard->hotel, pkt->key, &occupant);
                        pkt->key = 0;
                    }
                }
                if (!pkt->sacked && pkt->transmissions == 1 && !sx_u32_before(reportable, s)) {
                    sack_sample = arrived_ns - pkt->first_sent_ns; /* newest wins */
                    sack_sent = pkt->first_sent_ns;
                }
                pkt->sacked = true;
                chan_rack_advance(c, pkt, arrived_ns);
            }
            highest = s;
        }
        if (c->cc != NULL) {
            sx_chan_cc_post_locked(c, now);
            if (sacked != 0)
                sx_cc_acked(c->cc, sacked, now);
        }
        if (sack_sample != 0 && !chan_ack_waited(c, sack_sent, arrived_ns, since_ns))
            chan_rtt_sample(c, sack_sample, now);
        uint64_t reo = chan_reo_window(c);
        for (uint32_t s = c->snd_una; sx_u32_before(s, highest); s++) {
            sx_txpkt_t *pkt = c->win[s & mask];
            if (pkt != NULL && !pkt->sacked && !pkt->queued &&
                pkt->last_sent_ns + reo < c->rack_ns) {
                chan_loss_episode(c, pkt, now);
                sx_stat_add(&c->shard->stats.rtx_sack, 1);
                sx_chan_cc_lost_locked(c, pkt, false, now);
                sx_chan_queue_rtx_locked(c, pkt);
            }
        }
    }
    if (c->tlp_out)
        sx_chan_tlp_ack_locked(c, now);
    sx_chan_cc_ecn_ack_locked(c, h, now);
    /* Last: this ACK's losses, its marks' veto and the end of a timeout's
     * recovery are known. */
    if (c->undo_cut_ns != 0)
        sx_chan_cc_undo_try_locked(c);
}
