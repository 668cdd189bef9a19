/* SPDX-License-Identifier: BSD-3-Clause */
/* The shard's flush and its transmit batch: channels ready to send, the
 * datagrams they stage, and the post that hands them to the interface;
 * see shard.h. */
#include "shard/shard.h"

#include <shardx.h>

#include "common/hot.h"
#include "common/le.h"
#include "common/log.h"
#include "common/time.h"
#include "shard/chan.h"
#include "shard/mem.h"
#include "shard/peer.h"

SX_HOT_PASS void sx_shard_flush_locked(sx_shard_t *shard)
{
    shard->tx_again = false;
    shard->held_bytes = 0;
    shard->hold_armed = false;
    /* Take the whole list: channels that become ready again while we flush
     * (a new ACK owed, the interface full) go on a fresh list for the next
     * pass instead of spinning here. */
    sx_chan_t *c = shard->ready_head;
    shard->ready_head = shard->ready_tail = NULL;
    while (c != NULL) {
        sx_chan_t *next = c->ready_next;
        c->on_ready = false;
        c->ready_next = NULL;
        sx_chan_flush_locked(c);
        c = next;
    }
    sx_shard_tx_post_locked(shard);
}

/* Makes room for one datagram of interface @p tl; returns its slot. */
static unsigned sx_shard_tx_room_locked(sx_shard_t *shard, unsigned tl)
{
    sx_shard_txq_t *q = &shard->txq;

    if (q->n == SX_SHARD_TX_BATCH || (q->n > 0 && q->tl != tl))
        sx_shard_tx_post_locked(shard);
    return q->n;
}

uint8_t *sx_shard_tx_ack_buf_locked(sx_shard_t *shard, unsigned tl)
{
    return shard->txq.ack_buf[sx_shard_tx_room_locked(shard, tl)];
}

SX_HOT void sx_shard_tx_stage_locked(sx_shard_t *shard, unsigned tl, sx_tl_dest_t dest,
                                     const uint8_t *data, size_t len, struct sx_chan *chan,
                                     struct sx_txpkt *pkt)
{
    sx_shard_txq_t *q = &shard->txq;
    unsigned i = sx_shard_tx_room_locked(shard, tl);

    q->n++;
    q->tl = tl;
    q->tx[i].dest = dest;
    q->tx[i].iovcnt = 1;
    /* A zero-copy packet: its head here, its payload in the operation's
     * memory (chan_tx.c, chan_zero_copy). */
    const uint8_t *ext = pkt != NULL ? pkt->ext : NULL;
    size_t ext_len = ext != NULL ? len - pkt->head : 0;
    q->pin[i] = ext != NULL ? pkt->pin : NULL;
    if (q->pin[i] != NULL) /* read where it is now, until posted (shard/mem.h, Pins) */
        ext = sx_mem_pin_read_begin(q->pin[i], ext);
    q->tx[i].iov[0].iov_base = (void *)data;
    q->tx[i].iov[0].iov_len = len - ext_len;
    if (ext != NULL) {
        q->tx[i].iov[1].iov_base = (void *)ext;
        q->tx[i].iov[1].iov_len = ext_len;
        q->tx[i].iovcnt = 2;
    }
    /* SX_AUTH: a datagram whose header asks for a tag gets it here, as it
     * leaves, so a retransmission's new acknowledgement is under it. */
    if (len >= SX_WIRE_HDR_LEN && (sx_get16(data + 2) & SX_PKTF_AUTH)) {
        sx_auth_seal(&shard->env->auth, data, len - ext_len, ext, ext_len, q->tag[i]);
        q->tx[i].iov[q->tx[i].iovcnt].iov_base = q->tag[i];
        q->tx[i].iov[q->tx[i].iovcnt].iov_len = SX_WIRE_TAG_LEN;
        q->tx[i].iovcnt++;
    }
    q->tx[i].ctx = pkt;
    q->chan[i] = chan;
    q->pkt[i] = pkt;
    if (pkt != NULL && pkt->unstamped)
        q->fresh++;
}

SX_HOT_PASS void sx_shard_tx_post_locked(sx_shard_t *shard)
{
    sx_shard_txq_t *q = &shard->txq;
    sx_tl_iface_t *iface = shard->ifaces[q->tl];
    unsigned posted = 0;

    if (q->n == 0)
        return;
    /* Send credits (DESIGN.md section 4): at most tx_credits datagrams may
     * be with the interface at once. A transport that is done with each
     * datagram when post_send returns (caps.sync_send) gets them all back
     * at once, so for it the credits only bound one batch; for the others
     * each SX_TL_EV_SEND_DONE returns one (sx_shard_poll_locked). What
     * finds no credit waits, as a refused datagram does. */
    unsigned credits = iface->caps.tx_credits > shard->tx_inflight[q->tl]
                           ? iface->caps.tx_credits - shard->tx_inflight[q->tl]
                           : 0;
    unsigned n = q->n < credits ? q->n : credits;
    /* Several new packets take their send time from before the system
     * call, not after it (sx_chan_stamp_locked): the call takes as long as
     * it has datagrams, and the peer can get and acknowledge the first
     * ones before it returns (over veth, or any path shorter than the
     * call). Stamped after, they gave RTT samples of 0.9-1.5 us on a path
     * of 20 (two namespace hosts at MTU 1500, MPI ping-pongs up to 16
     * MiB), and the smallest became RACK's minimum (chan_retransmit.c,
     * chan_rack_advance); samples under 2 us fell from 85 to 38 in 14
     * runs each, interleaved. A sample may now be longer than the path,
     * as TCP's are (a segment is stamped as it goes down the stack), but
     * not shorter. Their retransmission timers still start after the
     * call, when the last of them has left: a call the scheduler stopped
     * for milliseconds would otherwise take that time from the timeouts
     * of the datagrams it sent after. One new packet takes the time its
     * channel's flush read before building it, where the flush read one
     * (congestion control or retransmissions: every channel to another
     * host), as first_sent_ns; over veth, where the peer's softirq runs
     * inside our call, its time read after the call came out short too
     * (the rest of those 38). Otherwise (loopback) it keeps its single
     * read after the call, off the latency path. */
    uint64_t sent_ns = q->fresh > 1 ? sx_time_ns() : 0, now = 0;
    int rc = n > 0 ? iface->ops->post_send(iface, q->tx, n, &posted) : SX_OK;
    for (unsigned i = 0; i < q->n; i++) {
        if (q->pin[i] != NULL)
            sx_mem_pin_read_end(q->pin[i]);
        /* New packets get their retransmission timer now, after the
         * system call, and their send time (above; sx_chan_stamp_locked
         * says why), also those it refused: they wait as retransmissions
         * either way. */
        sx_txpkt_t *pkt = q->pkt[i];
        if (pkt != NULL && pkt->unstamped) {
            if (now == 0)
                now = sx_time_ns();
            uint64_t at = sent_ns != 0              ? sent_ns
                          : pkt->first_sent_ns != 0 ? pkt->first_sent_ns
                                                    : now;
            sx_chan_stamp_locked(pkt, at, now);
        }
    }
    if (rc == SX_OK && posted < q->n) {
        rc = SX_ERR_AGAIN;
        sx_stat_add(&shard->stats.tx_no_credits, q->n - posted);
    }
    if (rc == SX_ERR_AGAIN)
        shard->tx_again = true; /* the flush stops resending: chan_tx.c */
    if (!iface->caps.sync_send)
        shard->tx_inflight[q->tl] += posted;
    for (unsigned i = posted; i < q->n; i++) {
        if (rc != SX_ERR_AGAIN && i == posted)
            sx_debug("chan", "shard %u: send to %s failed: %s", shard->index,
                     q->chan[i]->peer->name, sx_strerror(rc));
        sx_chan_tx_refused_locked(q->chan[i], q->pkt[i], rc == SX_ERR_AGAIN);
    }
    q->n = 0;
    q->fresh = 0;
}
