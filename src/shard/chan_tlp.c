/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels, tail loss probes (chan.h; RACK-TLP, RFC 8985 section 7).
 *
 * Why: duplicate ACKs and RACK (chan_retransmit.c) find a lost packet by
 * the ACKs of packets sent after it. A loss at the end of a burst has
 * none: the last packet of a message or of a window, a hole whose
 * successors were sent within RACK's reordering allowance of it, or a
 * retransmission with nothing sent after it. Each waited for the
 * retransmission timeout, at least SX_RTO_MIN_US (2 ms; a round trip on
 * loopback is some 50 us). sx_bench loss timed out 1-4 times a run at 5
 * and 10 % loss, and its debug log showed where: the oldest packet, with
 * 2-9 packets in flight at the end of the stream, or with a window of
 * them behind a retransmission that was lost again.
 *
 * What: while packets are in flight, a probe timeout (PTO, chan_pto)
 * after the latest new packet or ACK that moved snd_una sends the newest
 * packet not known to have arrived again. Its ACK is the one the tail
 * lacked: it SACKs the probe, so RACK finds the holes before it, or
 * completes the cumulative ACK where the probe was the hole. The RFC
 * sends new data as the probe where some waits; here that only waits
 * behind a closed window, which the probe cannot open. One probe is out
 * at a time, and none in the recovery after a timeout (its own ACKs
 * resend). Where the probe timeout is longer than what is left of the
 * oldest packet's retransmission timeout, the probe goes just before the
 * latter (RFC 8985 section 7.2), and after any probe that timeout starts
 * again (section 7.3): the probe comes first and the timeout stays the
 * last resort. Before, no probe went there, and sx_bench loss at 0.1 %
 * timed out in 6 of 8 runs, each time on a fast retransmission lost
 * again with 127 packets out (64 KiB messages, window 64) behind it: the
 * stream's own queue in the peer's socket put SRTT at 0.5-1 ms, and so
 * the probe timeout (2 SRTT and more) past the retransmission timeout
 * (SRTT + 4 RTTVAR), and nothing was sent after the retransmission that
 * RACK could have timed it by: the window was the application's, held by
 * the hole. The timeout then cut the window to one packet.
 *
 * Whether the probe repaired a loss (RFC 8985 section 7.4): the peer
 * reports a copy it already had (D-SACK), and then nothing was lost and
 * the probe cost a datagram; otherwise, once the cumulative ACK passes
 * the packets that were out at the probe (tlp_end) without such a
 * report, the original was lost and the window is cut as for a loss
 * found otherwise (tlp_repairs). The cumulative ACK that only reaches
 * tlp_end decides nothing: it is what a delayed ACK of the original
 * looks like, and the report of the copy comes after it (Linux's
 * tcp_process_tlp_ack decides the same way). Until one or the other, or
 * a timeout, no other probe goes; where the cumulative ACK stopped at
 * tlp_end (a pure tail), the next probe's time decides for a repair
 * (chan_tlp_settle).
 *
 * The timer is lazy: a new packet or ACK only moves tlp_mark_ns (a store
 * on the send path), and the timer, armed when it is not, looks at the
 * mark when it fires and waits again if the mark moved. The ACK that
 * leaves nothing in flight cancels it, so that an idle channel's timer
 * wakes no one. Token holder only.
 */
#include "common/hot.h"
#include "common/log.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/conn.h"
#include "shard/peer.h"

/*
 * The probe timeout: 2 SRTT (RFC 8985 section 7.2) plus the larger of the
 * peer's delayed ACK, which holds the ACK of fewer than SX_ACK_EVERY
 * frames, and 4 RTTVAR; doubled tlp_slow times; at least two ticks of the
 * wheel. 0 before the first RTT sample (the RFC's 1 s is the initial
 * RTO's business here); chan_tlp_due caps it at the retransmission
 * timeout.
 *
 * Why 4 RTTVAR: an RTT sample is the newest packet an ACK covers, but a
 * burst's last packet is acknowledged only when the peer has read (and
 * copied) the whole burst. With 2 SRTT plus the ACK delay alone, sx_bench
 * loss probed twice at the start of every session, in slow start's first
 * bursts of 16 and 32 datagrams of 32 KiB, 220-290 us after the burst
 * with an SRTT of 80-120 us, and the peer reported every probe as a
 * duplicate (debug log). 4 RTTVAR is the margin RFC 6298 gives the RTO
 * (SRTT + 4 RTTVAR) before its floor, SX_RTO_MIN_US, which is for a peer
 * that stops for a while: a probe sent too soon costs one datagram, not
 * the window.
 *
 * Why tlp_slow: a peer's ACK also waits for what its handlers do with
 * the data, which no RTT sample of ours shows. Over libfabric's udp
 * provider, test_reliability's stream at 5 % loss (SRTT 20-35 us, PTO
 * 100-220 us) sent 27 probes, and the peer reported 23 of them as
 * duplicates. A probe found early so waits twice as long next time, up to
 * 2^SX_TLP_SLOW_MAX times (beyond the timeout, on most paths: a probe
 * only just before a timeout), and a probe that repaired a loss, or a
 * timeout, halves it again: the same give and take as RACK's reordering
 * allowance.
 */
#define SX_TLP_SLOW_MAX 4

static uint64_t chan_pto(const sx_chan_t *c)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;
    uint64_t tick = sx_wheel_tick_ns(c->shard->wheel);

    if (!p->tlp || c->srtt_ns == 0)
        return 0;
    uint64_t var = 4 * c->rttvar_ns;
    uint64_t pto = (2 * c->srtt_ns + (var > p->ack_delay_ns ? var : p->ack_delay_ns))
                   << c->tlp_slow;
    return pto < 2 * tick ? 2 * tick : pto;
}

/* When the probe is due: @p pto after the mark, but two ticks of the
 * wheel before the oldest packet's retransmission timeout (its deadline,
 * or a whole timeout after @p now where it has none yet: it is about to
 * be timed, sx_chan_stamp_locked), so that the wheel runs the probe
 * before the hotel evicts the packet. */
static uint64_t chan_tlp_due(const sx_chan_t *c, uint64_t pto, uint64_t now)
{
    const sx_txpkt_t *oldest = c->win[c->snd_una & (sx_chan_window(c) - 1)];
    uint64_t rto_at = oldest != NULL && oldest->key != 0 ? oldest->deadline_ns : now + c->rto_ns;
    uint64_t last = rto_at - 2 * sx_wheel_tick_ns(c->shard->wheel);
    uint64_t due = c->tlp_mark_ns + pto;

    return sx_u64_before(last, due) ? last : due;
}

void sx_chan_tlp_arm_locked(sx_chan_t *c, uint64_t now)
{
    uint64_t pto = chan_pto(c);

    if (pto != 0)
        sx_wheel_add(c->shard->wheel, &c->tlp_timer, chan_tlp_due(c, pto, now));
}

/*
 * The packet to send again: the newest one neither SACKed nor already
 * waiting to go again, among those the peer's ACK can report. The ACK's
 * SACK view covers SX_WIRE_SACK_BITS packets past its cumulative ACK
 * (wire.h); a probe beyond them, arriving or not, shows RACK nothing,
 * and one the peer already had is only a duplicate. With a wide window
 * held by one hole whose retransmission was lost again, the newest
 * packet is one the peer has had for long but cannot report, and the
 * hole the one to probe.
 */
static sx_txpkt_t *chan_tlp_pick(sx_chan_t *c)
{
    uint32_t mask = sx_chan_window(c) - 1;
    uint32_t top = c->snd_nxt;

    if (sx_u32_before(c->snd_una + SX_WIRE_SACK_BITS + 1, top))
        top = c->snd_una + SX_WIRE_SACK_BITS + 1;
    for (uint32_t s = top; s != c->snd_una;) {
        sx_txpkt_t *pkt = c->win[--s & mask];
        if (pkt != NULL && !pkt->sacked && !pkt->queued && !pkt->unstamped)
            return pkt;
    }
    return NULL;
}

/* The probe repaired a loss (section 7.4.2): the window is cut as for a
 * loss found otherwise, and the next probe may come sooner. */
static void chan_tlp_repaired(sx_chan_t *c, uint64_t now)
{
    c->tlp_out = false;
    if (c->tlp_slow > 0)
        c->tlp_slow--;
    sx_stat_add(&c->shard->stats.tlp_repairs, 1);
    sx_chan_cc_cut_locked(c, c->tlp_sent_ns, c->tlp_seq, true, false, now);
}

/*
 * An episode the cumulative ACK reached but did not pass, decided when
 * the next probe is due. A pure tail leaves it so: the ACK of tlp_end is
 * what the original's ACK or the probe's looks like, and no later packet
 * of that burst comes to pass it. It stayed open until an ACK passed the
 * next burst, and so held back that burst's probe: a tail lost right
 * after a repaired one waited for the timeout. The peer reports a
 * duplicate in the flush that follows its read (chan_rx.c,
 * chan_owe_dsack), so its D-SACK comes about a round trip after the
 * probe; the next probe is due a probe timeout (2 SRTT and more) after
 * the ACK that reached tlp_end, or after a packet sent later (each moves
 * tlp_mark_ns), and a report that has not come by then is taken not to
 * exist: the probe repaired a loss. A lost report so costs one window
 * cut too many, which the RFC's rule (an ACK past tlp_end) costs as well
 * where the report is lost.
 */
static void chan_tlp_settle(sx_chan_t *c, uint64_t now)
{
    sx_debug("chan", "%s: tail loss probe of seq %u taken for a repair: no duplicate reported",
             c->peer->name, c->tlp_seq);
    sx_stat_add(&c->shard->stats.tlp_settled, 1);
    chan_tlp_repaired(c, now);
}

void sx_chan_tlp_timer(sx_timer_t *timer, void *arg)
{
    sx_chan_t *c = arg;
    sx_shard_t *shard = c->shard;
    uint64_t now = sx_wheel_now(shard->wheel);

    (void)timer;
    if (c->failed || c->conn != SX_CONN_UP || c->snd_una == c->snd_nxt)
        return; /* the next new packet arms it again */
    /* One episode at a time (section 7.4): its packets are not all
     * acknowledged yet. */
    if (c->tlp_out && c->snd_una != c->tlp_end)
        return;
    uint64_t pto = chan_pto(c);
    if (pto == 0)
        return;
    uint64_t due = chan_tlp_due(c, pto, now);
    if (sx_u64_before(now, due)) {
        sx_wheel_add(shard->wheel, &c->tlp_timer, due);
        return;
    }
    /* A packet queued to go again probes already, and the recovery after
     * a timeout resends as its ACKs come. Fast recovery is probed, where
     * RFC 8985 (section 7.2) arms the probe outside recovery alone: a
     * retransmission lost again with nothing sent after it has no ACK
     * that would show RACK the loss, and test_reliability's
     * one-message-at-a-time stream over libfabric (1472-byte datagrams,
     * 2 % loss) timed out 2-3 times a direction there, after the probes
     * had repaired every tail outside it. */
    if (c->in_rto_recovery || c->rtx != NULL)
        return;
    if (c->tlp_out)
        chan_tlp_settle(c, now);
    sx_txpkt_t *pkt = chan_tlp_pick(c);
    if (pkt == NULL)
        return;
    c->tlp_out = true;
    c->tlp_seq = pkt->seq;
    c->tlp_end = c->snd_nxt;
    c->tlp_sent_ns = now;
    sx_stat_add(&shard->stats.rtx_probe, 1);
    sx_debug("chan",
             "%s: tail loss probe, seq %u of una %u nxt %u, %llu us after the last send or ACK "
             "(srtt %llu rttvar %llu us)",
             c->peer->name, pkt->seq, c->snd_una, c->snd_nxt,
             (unsigned long long)((now - c->tlp_mark_ns) / 1000),
             (unsigned long long)(c->srtt_ns / 1000), (unsigned long long)(c->rttvar_ns / 1000));
    sx_chan_queue_rtx_locked(c, pkt);
    /* The retransmission timeout starts again (RFC 8985 section 7.3),
     * for the oldest packet; the probe's own is started when it goes. */
    sx_txpkt_t *oldest = c->win[c->snd_una & (sx_chan_window(c) - 1)];
    if (oldest != NULL && oldest != pkt && oldest->key != 0 && !oldest->queued)
        (void)sx_chan_arm_locked(c, oldest, now);
}

void sx_chan_tlp_ack_locked(sx_chan_t *c, uint64_t now)
{
    if (sx_u32_before(c->tlp_end, c->snd_una))
        chan_tlp_repaired(c, now);
}

void sx_chan_tlp_dsack_locked(sx_chan_t *c)
{
    sx_stat_add(&c->shard->stats.tlp_unneeded, 1);
    c->tlp_out = false; /* both copies arrived: nothing was lost */
    if (c->tlp_slow < SX_TLP_SLOW_MAX)
        c->tlp_slow++;
}
