/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels, the path MTU after connect (chan.h): black-hole detection and
 * fragments.
 *
 * conn.c probes the path's MTU when a channel connects. A path can still
 * shrink later: a route moves to a link without jumbo frames, a switch
 * port is reconfigured. Where no ICMP "fragmentation needed" comes back
 * (a bridge or a switch drops an oversized frame silently), large
 * datagrams then vanish while small ones pass: a black hole (RFC 8899
 * section 4.3, RFC 4821 section 7.5). A channel that kept retransmitting
 * the same packet would fail with its peer alive and answering.
 *
 * Detection. When the oldest unacknowledged packet times out and its
 * datagrams are larger than the smallest size conn.c steps through, a
 * probe (a header-only ACK that asks for an answer at once) goes out with
 * its retransmission. If the peer has sent anything by the packet's next
 * timeout, small datagrams reach it and answers come back, yet the packet
 * did not arrive, and no datagram as large was acknowledged meanwhile:
 * one piece of evidence. SX_PMTU_BLACKHOLE_LOSSES of them in a row for
 * the same packet, over at least SX_PMTU_PERSIST_NS, step the channel's
 * datagram size down to the next of conn.c's sizes below the one that
 * was lost (RFC 8899 section 5.2: a black hole sends the search back
 * down). The time is what tells a path's MTU, which stays, from a
 * receiver's socket that overflows, which also takes small datagrams and
 * drops large ones but drains. The cost of a false step is throughput,
 * never data. A peer that answers nothing is not evidence: that is the
 * peer timeout's business (chan_retransmit.c).
 *
 * Fragments. Packets built before the step keep their sequence numbers,
 * so each is retransmitted as fragments that fit the new size (wire.h,
 * SX_PKTF_FRAG), each a whole header followed by a fragment header and a
 * slice of the packet's payload, straight from the packet's own memory.
 * The receiver keeps SX_CHAN_FRAG_SLOTS packets in reassembly; when one is
 * whole it is handled as a packet that arrived whole, so sequencing,
 * acknowledgement and delivery are unchanged. A fragment of another packet
 * when every slot is busy takes the slot touched longest ago (its
 * fragments are counted dropped); the sender's next retransmission brings
 * again what is missing. Memory stays bounded: SX_CHAN_FRAG_SLOTS packets
 * of at most 64 KiB per channel, only while fragments arrive.
 *
 * Only transports that are done with a datagram when post_send returns
 * (caps.sync_send: udp, self, ofi and the fault decorator over them) send
 * fragments, and only they step down after connect; on verbs the MTU is
 * the fabric's, fixed when the queue pair is made.
 *
 * The size is not raised again (RFC 8899's PMTU_RAISE_TIMER): a channel
 * keeps the smaller size for its life.
 */
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "common/time.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/conn.h"
#include "shard/peer.h"

/* Timeouts of one packet in a row, each after the peer was heard from,
 * that make a black hole (RFC 8899 section 5.1.2's MAX_PROBES), if they
 * span SX_PMTU_PERSIST_NS (conn.h). */
#define SX_PMTU_BLACKHOLE_LOSSES 3
/* Packets a channel puts back together at once. */
#define SX_CHAN_FRAG_SLOTS 4
/* Fragments posted to the interface per call. */
#define SX_FRAG_BATCH 16

typedef struct sx_chan_frag {
    uint8_t *buf; /* header + payload; NULL: the slot is free */
    uint32_t seq;
    uint16_t count, total; /* as the fragments say ... */
    uint32_t stride;       /* ... and the cut they imply (wire.h) */
    unsigned got;          /* distinct fragments in */
    uint64_t used;         /* the clock when last touched */
    uint64_t bits[SX_WIRE_FRAG_MAX / 64];
} sx_chan_frag_t;

struct sx_chan_frags {
    uint64_t clock; /* fragments taken, for the slot touched longest ago */
    sx_chan_frag_t slot[SX_CHAN_FRAG_SLOTS];
};

/* ------------------------------------------------------------ the sender */

void sx_chan_pmtu_timeout_locked(sx_chan_t *c, const sx_txpkt_t *pkt, bool heard, uint64_t now)
{
    size_t len = pkt->len + c->tag_len; /* the datagram, with its tag */
    size_t sent = len > c->dgram_max ? c->dgram_max : len;
    size_t next = sx_conn_size_below(sent);

    if (!sx_chan_iface(c)->caps.sync_send || next == 0) {
        c->pmtu_watch = false;
        return;
    }
    if (!c->pmtu_watch || c->pmtu_seq != pkt->seq) {
        c->pmtu_watch = true;
        c->pmtu_seq = pkt->seq;
        c->pmtu_lost = 0;
    } else if (heard && c->pmtu_acked_len < sent) {
        if (c->pmtu_lost++ == 0)
            c->pmtu_since_ns = now;
    } else {
        /* The peer is silent (dead, descheduled: not only to large
         * datagrams), or datagrams as large got through: congestion or a
         * slow receiver lost this one, not the path's MTU. */
        c->pmtu_lost = 0;
    }
    c->pmtu_acked_len = 0;
    if (c->pmtu_lost >= SX_PMTU_BLACKHOLE_LOSSES && now - c->pmtu_since_ns >= SX_PMTU_PERSIST_NS) {
        sx_warn(
            "chan",
            "shard %u: %s shard %u: %zu-byte datagrams went unanswered %u times while "
            "smaller ones got through, for %llu ms: a link on the path now has a smaller MTU; "
            "sending %zu-byte datagrams from now on (what is in flight goes again in fragments)",
            c->shard->index, c->peer->name, c->lane, sent, c->pmtu_lost,
            (unsigned long long)((now - c->pmtu_since_ns) / 1000000), next);
        sx_stat_add(&c->shard->stats.pmtu_blackholes, 1);
        c->pmtu_ceiling = c->dgram_max = next;
        c->pmtu_lost = 0;
        /* Those losses were the path's MTU, not congestion (RFC 8899
         * section 4.4: a lost probe is no congestion signal): the next
         * size is tried at the RTT's pace, not after the back-off. */
        sx_chan_rto_restart_locked(c);
    }
    sx_chan_send_probe_locked(c);
}

bool sx_chan_send_frags_locked(sx_chan_t *c, sx_txpkt_t *pkt)
{
    sx_tl_iface_t *iface = sx_chan_iface(c);
    size_t total = pkt->len - SX_WIRE_HDR_LEN;
    size_t over = SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN + c->tag_len;
    if (c->dgram_max <= over)
        return false;
    size_t slice = c->dgram_max - over;
    size_t count = (total + slice - 1) / slice;

    if (!iface->caps.sync_send || count < 2 || count > SX_WIRE_FRAG_MAX)
        return false;
    sx_wire_hdr_t h = {
        .type = SX_PKT_DATA,
        .flags = (uint16_t)(SX_PKTF_ACK | SX_PKTF_FRAG | (c->tag_len ? SX_PKTF_AUTH : 0)),
        .src_shard = (uint16_t)c->shard->index,
        .dst_shard = (uint16_t)c->lane,
        .src_epoch = c->shard->env->epoch,
        .dst_epoch = c->peer->epoch,
        .seq = pkt->seq,
    };
    sx_chan_ack_fields_locked(c, &h);
    /* After what is staged, so that the wire keeps the order of the calls;
     * the interface is done with the buffers when post_send returns. */
    sx_shard_tx_post_locked(c->shard);

    unsigned went = 0;
    int rc = SX_OK;
    uint8_t heads[SX_FRAG_BATCH][SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN];
    uint8_t tags[SX_FRAG_BATCH][SX_WIRE_TAG_LEN];
    sx_tl_tx_t tx[SX_FRAG_BATCH];
    for (size_t first = 0; first < count; first += SX_FRAG_BATCH) {
        unsigned n = 0, posted = 0;
        for (size_t i = first; i < count && n < SX_FRAG_BATCH; i++, n++) {
            size_t off = i * slice;
            size_t len = total - off < slice ? total - off : slice;
            sx_wire_frag_t f = {.index = (uint16_t)i,
                                .count = (uint16_t)count,
                                .offset = (uint16_t)off,
                                .total = (uint16_t)total};
            const uint8_t *data = pkt->data + SX_WIRE_HDR_LEN + off;
            uint8_t *head = heads[n];
            sx_wire_write_frag(head + SX_WIRE_HDR_LEN, &f);
            h.payload_len = (uint16_t)(SX_WIRE_FRAG_LEN + len);
            uint32_t crc;
            const uint32_t *crcp = NULL;
            if (sx_chan_wants_crc(c)) {
                crc = sx_crc32c(sx_crc32c(0, head + SX_WIRE_HDR_LEN, SX_WIRE_FRAG_LEN), data, len);
                crcp = &crc;
            }
            sx_wire_write_hdr(head, &h, crcp);
            tx[n] = (sx_tl_tx_t){.dest = c->dest, .iovcnt = 2};
            tx[n].iov[0] = (struct iovec){head, sizeof(heads[n])};
            tx[n].iov[1] = (struct iovec){(void *)data, len};
            if (c->tag_len) {
                sx_auth_seal(&c->shard->env->auth, head, sizeof(heads[n]), data, len, tags[n]);
                tx[n].iov[2] = (struct iovec){tags[n], SX_WIRE_TAG_LEN};
                tx[n].iovcnt = 3;
            }
        }
        rc = iface->ops->post_send(iface, tx, n, &posted);
        sx_stat_add(&c->shard->stats.frags_sent, posted);
        went += posted;
        if (rc == SX_OK && posted < n)
            rc = SX_ERR_AGAIN;
        if (rc != SX_OK)
            break; /* the rest goes with the next retransmission */
    }
    if (went > 0) {
        c->ack_pending = 0;
        c->ack_now = false;
    } else {
        /* Nothing went: what the flush took as sent is owed still. */
        c->ack_now = true;
        if (rc == SX_ERR_AGAIN) {
            c->shard->tx_again = true; /* the flush stops resending */
            sx_chan_tx_refused_locked(c, pkt, true);
        }
    }
    return true;
}

/* ---------------------------------------------------------- the receiver */

void sx_chan_frags_free_locked(sx_chan_t *c)
{
    if (c->frags == NULL)
        return;
    for (unsigned i = 0; i < SX_CHAN_FRAG_SLOTS; i++)
        free(c->frags->slot[i].buf);
    free(c->frags);
    c->frags = NULL;
}

static void frag_drop(sx_chan_t *c, sx_drop_reason_t why, uint64_t n)
{
    sx_stat_add(&c->shard->stats.drops[why], n);
}

static void frag_release(sx_chan_t *c, sx_chan_frag_t *s, bool counted_dropped)
{
    if (counted_dropped && s->got > 0)
        frag_drop(c, SX_DROP_FRAGMENT, s->got);
    free(s->buf);
    memset(s, 0, sizeof(*s));
}

/* The slot of packet @p seq cut into @p f's pieces: the one that holds it,
 * else a free one, else the one touched longest ago. NULL: no memory. */
static sx_chan_frag_t *frag_slot(sx_chan_t *c, uint32_t seq, const sx_wire_frag_t *f)
{
    sx_chan_frag_t *free_slot = NULL, *oldest = NULL;

    if (c->frags == NULL && (c->frags = calloc(1, sizeof(*c->frags))) == NULL)
        return NULL;
    for (unsigned i = 0; i < SX_CHAN_FRAG_SLOTS; i++) {
        sx_chan_frag_t *s = &c->frags->slot[i];
        if (s->buf == NULL) {
            if (free_slot == NULL)
                free_slot = s;
            continue;
        }
        if (s->seq == seq) {
            if (s->count == f->count && s->total == f->total && s->stride == f->stride)
                return s;
            /* Cut again at another size (the sender stepped down once
             * more): what came at the old size does not fit the new. */
            frag_release(c, s, true);
            free_slot = s;
            break;
        }
        if (oldest == NULL || s->used < oldest->used)
            oldest = s;
    }
    sx_chan_frag_t *s = free_slot;
    if (s == NULL) {
        s = oldest;
        frag_release(c, s, true);
    }
    /* Fragments of one count, total and stride cover the packet exactly
     * once (sx_wire_parse_frag checks each against the cut), so every
     * byte handed up was written by one of them. */
    if ((s->buf = malloc(SX_WIRE_HDR_LEN + (size_t)f->total)) == NULL)
        return NULL;
    s->seq = seq;
    s->count = f->count;
    s->total = f->total;
    s->stride = f->stride;
    return s;
}

void sx_chan_recv_frag_locked(sx_chan_t *c, const sx_wire_hdr_t *h, const uint8_t *data, size_t len)
{
    sx_wire_frag_t f;

    if (c->failed) {
        frag_drop(c, SX_DROP_CHANNEL_FAILED, 1);
        return;
    }
    if (c->conn != SX_CONN_UP && !sx_conn_data_ok_locked(c, h)) {
        frag_drop(c, SX_DROP_NOT_CONNECTED, 1);
        return;
    }
    if (!sx_wire_parse_frag(data, len, &f)) {
        frag_drop(c, SX_DROP_FRAGMENT, 1);
        return;
    }
    /* Any packet of the peer's proves its library alive (liveness,
     * chan_retransmit.c), as of its read (chan_rx.c says why not the
     * wheel's clock). */
    c->alive_ns = c->shard->rx_ns;
    c->probes = 0;
    if (sx_u32_before(h->seq, c->rcv_nxt)) {
        /* The packet arrived already: our ACK was lost or is late. */
        frag_drop(c, SX_DROP_DUPLICATE, 1);
        c->ack_now = true;
        sx_chan_kick_locked(c);
        return;
    }
    if (h->seq - c->rcv_nxt >= sx_chan_window(c)) {
        frag_drop(c, SX_DROP_OUT_OF_WINDOW, 1);
        return;
    }
    sx_chan_frag_t *s = frag_slot(c, h->seq, &f);
    if (s == NULL) {
        frag_drop(c, SX_DROP_NO_BUFFER, 1);
        return;
    }
    s->used = ++c->frags->clock;
    uint64_t bit = 1ull << (f.index % 64);
    if (s->bits[f.index / 64] & bit) {
        frag_drop(c, SX_DROP_DUPLICATE, 1);
        return;
    }
    s->bits[f.index / 64] |= bit;
    s->got++;
    memcpy(s->buf + SX_WIRE_HDR_LEN + f.offset, f.data, f.len);
    sx_stat_add(&c->shard->stats.copy_rx_bytes, f.len);
    if (s->got < s->count)
        return;
    /* Whole: the packet as it was sent, with the latest fragment's
     * acknowledgement, goes the way of any other. */
    sx_wire_hdr_t whole = *h;
    whole.flags &= (uint16_t) ~(SX_PKTF_FRAG | SX_PKTF_CRC | SX_PKTF_AUTH);
    whole.payload_len = s->total;
    uint8_t *buf = s->buf;
    size_t whole_len = SX_WIRE_HDR_LEN + (size_t)s->total;
    sx_wire_write_hdr(buf, &whole, NULL);
    s->buf = NULL;
    frag_release(c, s, false);
    sx_stat_add(&c->shard->stats.frags_assembled, 1);
    sx_chan_recv_locked(c, &whole, buf, whole_len, NULL);
    free(buf);
}
