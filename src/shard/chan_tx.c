/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels, transmit: cutting queued operations into packets (framing,
 * aggregation of small messages, chunking of large ones) and the flush
 * that hands what the window allows to the shard's batch (chan.h). The
 * packets' memory: chan_pkt.c.
 */
#include <stdlib.h>
#include <string.h>

#include "common/copy.h"
#include "common/crc32c.h"
#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/conn.h"
#include "shard/mem.h"
#include "shard/peer.h"

/* Copies @p n bytes of @p op's message from its cursor to @p dst. */
static void op_copy(sx_op_t *op, uint8_t *dst, size_t n)
{
    while (n > 0) {
        const struct iovec *v = &op->iov[op->cur_iov];
        size_t take = v->iov_len - op->cur_off;
        if (take > n)
            take = n;
        sx_copy_small(dst, (const uint8_t *)v->iov_base + op->cur_off, take);
        dst += take;
        n -= take;
        op->cur_off += take;
        if (op->cur_off == v->iov_len) {
            op->cur_iov++;
            op->cur_off = 0;
        }
    }
}

/* Below this much room a packet that already holds frames is closed rather
 * than starting a new large message with a tiny chunk. */
#define SX_MIN_CHUNK 512
/* A message or PUT of this many bytes or more that does not fit whole in
 * the rest of a packet that holds other frames starts in the next one:
 * its chunks then travel one per packet, each sent from the operation's
 * memory (chan_zero_copy), instead of the first being copied beside the
 * frames before it. One datagram more per such message: 1.23 copies per
 * byte fell to 1.0 in a stream of 256 KiB messages (sx_bench bw). */
#define SX_ZC_ALONE 16384u

typedef struct sx_frame_plan frame_plan_t; /* shard.h */

/* The frame kind an RMA-style op travels in. */
static uint8_t op_frame_kind(const sx_op_t *op)
{
    switch (op->kind) {
    case SX_OP_PUT:
        return SX_FRAME_PUT;
    case SX_OP_GET:
        return SX_FRAME_GET_REQ;
    case SX_OP_REFUSE:
        return SX_FRAME_AM_REFUSE;
    default:
        return SX_FRAME_RMA_RESP;
    }
}

/* Plans the next frame of an active message; false if it does not fit. */
static bool plan_am_frame(const sx_op_t *op, size_t room, unsigned n, frame_plan_t *f)
{
    uint64_t left = op->len - op->off;

    if (!op->started) {
        if (SX_WIRE_FRAME_LEN + left <= room) {
            f->kind = SX_FRAME_AM;
            f->len = (uint32_t)left;
            f->last = true;
            return true;
        }
        if ((n > 0 && (room < SX_MIN_CHUNK || left >= SX_ZC_ALONE)) ||
            room <= SX_WIRE_FRAME_LEN + 8)
            return false;
        f->kind = SX_FRAME_AM_FIRST;
        f->len = (uint32_t)(room - SX_WIRE_FRAME_LEN - 8);
        f->last = false;
        return true;
    }
    if (room <= SX_WIRE_FRAME_LEN)
        return false;
    size_t cap = room - SX_WIRE_FRAME_LEN;
    f->kind = SX_FRAME_AM_MORE;
    f->len = (uint32_t)(left <= cap ? left : cap);
    f->last = (left <= cap);
    return true;
}

/* Plans the next frame of a PUT, GET or response; every frame carries its
 * own extension, so chunks are independent of each other. */
static bool plan_rma_frame(const sx_op_t *op, size_t room, unsigned n, frame_plan_t *f)
{
    f->kind = op_frame_kind(op);
    size_t ext = (size_t)sx_wire_ext_len(f->kind);
    /* A GET request carries no data; its length is in the extension. */
    uint64_t left = (op->kind == SX_OP_GET) ? 0 : op->len - op->off;

    if (room <= SX_WIRE_FRAME_LEN + ext)
        return false;
    size_t cap = room - SX_WIRE_FRAME_LEN - ext;
    if (n > 0 && left > cap && (cap < SX_MIN_CHUNK || left >= SX_ZC_ALONE))
        return false;
    f->len = (uint32_t)(left <= cap ? left : cap);
    f->last = (left <= cap);
    return true;
}

/* Decides what the next packet carries, without copying anything. */
static unsigned chan_plan_packet(sx_chan_t *c, size_t space, frame_plan_t *plan, size_t *bytes_p)
{
    unsigned n = 0;
    size_t used = 0;
    sx_op_t *op = c->sendq;

    /* Each op appears at most once per packet: an op that does not finish
     * here fills the packet, so planning never has to track its cursor. */
    while (op != NULL && n < c->shard->env->conf.max_frames) {
        frame_plan_t *f = &plan[n];
        size_t room = space - used;
        bool fits =
            (op->kind == SX_OP_AM) ? plan_am_frame(op, room, n, f) : plan_rma_frame(op, room, n, f);
        if (!fits)
            break;
        f->op = op;
        used += SX_WIRE_FRAME_LEN + (size_t)sx_wire_ext_len(f->kind) + f->len;
        n++;
        if (!f->last)
            break; /* the packet is full */
        op = op->next;
    }
    *bytes_p = used;
    return n;
}

/* The acknowledgement every packet carries: ack, SACK and the receive
 * window, which is remembered as advertised (chan_rx.c's window update). */
SX_HOT void sx_chan_ack_fields_locked(sx_chan_t *c, sx_wire_hdr_t *h)
{
    h->ack = c->rcv_nxt;
    h->sack = c->rcv_sack;
    h->ecn_ect = c->rx_ecn_ect;
    h->ecn_ce = c->rx_ecn_ce;
    sx_chan_rwnd_locked(c, &h->rwnd_pkts, &h->rwnd_bytes);
    c->rwnd_adv_pkts = h->rwnd_pkts;
    c->rwnd_adv_bytes = h->rwnd_bytes;
    if (c->hold) {
        /* A refusal is on its way (wire.h): not past the refused packet,
         * and the window's right edge where it was. */
        h->ack = c->hold_seq;
        h->sack = c->hold_sack;
        h->rwnd_pkts += c->rcv_nxt - c->hold_seq;
    }
}

SX_HOT static void chan_write_hdr(sx_chan_t *c, uint8_t *buf, uint8_t type, uint32_t seq,
                                  uint16_t payload_len, uint16_t flags, const uint8_t *ext,
                                  size_t ext_len)
{
    sx_wire_hdr_t h = {
        .type = type,
        .flags = (uint16_t)(SX_PKTF_ACK | flags | (c->tag_len ? SX_PKTF_AUTH : 0)),
        .src_shard = (uint16_t)c->shard->index,
        .dst_shard = (uint16_t)c->lane,
        .src_epoch = c->shard->env->epoch,
        .dst_epoch = c->peer->epoch,
        .seq = seq,
        .payload_len = payload_len,
    };
    sx_chan_ack_fields_locked(c, &h);
    uint32_t crc;
    const uint32_t *crcp = NULL;
    if (payload_len > 0 && sx_chan_wants_crc(c)) {
        crc = sx_crc32c(0, buf + SX_WIRE_HDR_LEN, payload_len - ext_len);
        if (ext_len > 0)
            crc = sx_crc32c(crc, ext, ext_len);
        crcp = &crc;
        sx_stat_add(&c->shard->stats.crc_sent, 1);
    }
    sx_wire_write_hdr(buf, &h, crcp);
    /* Every packet carries the current acknowledgement. The delayed-ACK
     * timer is left to run out: it acknowledges only what is owed when it
     * fires (sx_chan_ack_timer), and while it is pending the next data
     * packet does not arm it again. Cancelling it here and arming it for
     * the next packet cost a ping-pong a wheel removal and insertion per
     * message (~300 instructions of ~3,000, callgrind of sx_bench
     * latency); now one insertion per SX_ACK_DELAY_US. A packet that
     * finds it pending still waits its whole delay: the timer, firing for
     * a debt that was paid, arms itself again for the one owed now. */
    c->ack_pending = 0;
    c->ack_now = false;
}

/* An op whose last frame is in a packet now waits for what completes it. */
static void chan_op_sent(sx_chan_t *c, sx_op_t *op)
{
    switch (op->kind) {
    case SX_OP_AM:
        sx_op_append(&c->ackq, &c->ackq_tail, op);
        break;
    case SX_OP_PUT:
    case SX_OP_GET:
        sx_op_append(&c->rmaq, &c->rmaq_tail, op);
        sx_chan_land_sent_locked(c, op);
        break;
    case SX_OP_REFUSE:
        /* The hold lets go once this packet is acknowledged. */
        c->refuse_queued--;
        c->refuse_last_seq = op->last_seq;
        free(op);
        break;
    default:
        c->resp_queued--;
        free(op); /* a response: the packet holds a copy, nobody waits */
        break;
    }
}

/*
 * Zero copy, as UCX's zcopy sends (uct_ep_am_zcopy) do: a packet that
 * carries one frame of a message or PUT, of SX_ZC_MIN bytes or more that
 * lie in one piece of the operation's memory, points at those bytes
 * instead of copying them; the transport gathers header and payload
 * (sendmmsg's iovecs; every transport is done with them when post_send
 * returns, caps.sync_send). The operation holds that memory until it
 * completes: a message when the cumulative ACK passes its last packet
 * (chan_retransmit.c), a PUT when the target answers, after it took every
 * chunk in order: the answer's packet acknowledges them, and what is
 * still out when it completes (that ACK held, or a peer that answers
 * before it acknowledges) is copied out first (chan_put_let_go,
 * chan_rma.c); a channel that fails sends nothing more.
 * Retransmissions read the same memory. Small frames are still copied,
 * so that many share a datagram. A GET's answer is sent from its region
 * the same way, under a pin, since the region may be deregistered before
 * the answer is acknowledged (shard/mem.h, Pins; chan_region_zero_copy).
 * Not under SX_AUTH: libsodium's SipHash has no streaming form, so a tag
 * over two pieces joins them first (auth.c), a copy anyway.
 *
 * Nor on a channel of small datagrams (sx_chan_small_dgrams: a 1500-byte
 * path). There each datagram would be two iovecs, header and payload,
 * and the kernel's copy into the socket pays per iovec as well as per
 * byte (chan_pkt.c, Arenas); copied, the packets of a run lie end to end
 * in an arena and go as one iovec. Across two namespace hosts at MTU
 * 1500 (2026-12-05, each rank on a core of its own, six rounds
 * alternating with the build that pointed at the caller's bytes),
 * `sx_bench bw` moved 1 MiB messages at 3,544-3,668 MB/s copied against
 * 2,438-2,578 pointed at, PUTs of 1 MiB at 3,206-3,531 against
 * 2,355-2,479 (docs/tuning.md, "Copied, not pointed at"). ofi's udp
 * provider, whose datagrams are that small too and which joins nothing,
 * ran at 0.98-1.01 times its rate either way. Returns where the bytes
 * are, or NULL.
 */
#define SX_ZC_MIN 1024u

static const uint8_t *chan_zero_copy(const sx_chan_t *c, const sx_op_t *op, const frame_plan_t *f)
{
    if ((op->kind != SX_OP_AM && op->kind != SX_OP_PUT) || f->len < SX_ZC_MIN ||
        op->cur_iov >= op->iovcnt || c->tag_len != 0 || sx_chan_small_dgrams(c))
        return NULL;
    const struct iovec *v = &op->iov[op->cur_iov];
    if (v->iov_len - op->cur_off < f->len)
        return NULL; /* it spans two pieces */
    return (const uint8_t *)v->iov_base + op->cur_off;
}

/* Moves @p op's cursor @p n bytes on without copying them. */
static void op_skip(sx_op_t *op, size_t n)
{
    op->cur_off += n;
    if (op->cur_off == op->iov[op->cur_iov].iov_len) {
        op->cur_iov++;
        op->cur_off = 0;
    }
}

void sx_chan_pkt_materialize_locked(sx_chan_t *c, sx_txpkt_t *pkt)
{
    if (pkt->ext == NULL)
        return;
    if (pkt->pin != NULL) {
        sx_copy_bulk(pkt->data + pkt->head, sx_mem_pin_read_begin(pkt->pin, pkt->ext),
                     pkt->len - pkt->head);
        sx_mem_pin_read_end(pkt->pin);
        sx_mem_unpin(pkt->pin);
        pkt->pin = NULL;
        c->pinned_out--;
    } else
        sx_copy_bulk(pkt->data + pkt->head, pkt->ext, pkt->len - pkt->head);
    sx_stat_add(&c->shard->stats.copy_tx_bytes, pkt->len - pkt->head);
    pkt->ext = NULL;
}

/* Whether a GET answer's chunk of @p len bytes, alone in its packet, may
 * be sent from the region itself (shard/mem.h, Pins): SX_ZC_REGION_MIN
 * bytes or more, no SX_AUTH tag (chan_zero_copy), and a transport done
 * with the bytes when post_send returns, so that the read the batch begins
 * at staging and ends after posting covers every use of them.
 *
 * A pinned chunk costs six to eight atomic operations on the region's
 * counters (pin, unpin, the post's read, the checksum's), about what
 * copying 1,472 bytes costs: across two namespace hosts at MTU 1500 an MPI
 * 1 MiB ping-pong moved 1,219-1,369 MB/s with every chunk pinned against
 * 1,379-1,402 copied, three rounds interleaved, with both hosts' ranks on
 * one core; each on a core of its own (2026-12-04, three jobs of three
 * rounds) 1,317-1,673 against 1,409-1,626, and at 16 MiB 1,144-1,314
 * against 990-1,309. At MTU 9000 (8,900-byte chunks) 2,282-2,662 against
 * 2,053-2,356, and on loopback (65,000) see docs/tuning.md, "Copies". */
#define SX_ZC_REGION_MIN 4096u

static bool chan_region_zero_copy(sx_chan_t *c, unsigned n, uint32_t len)
{
    return n == 1 && len >= SX_ZC_REGION_MIN && c->tag_len == 0 && sx_chan_iface(c)->caps.sync_send;
}

/* Builds the next data packet from the send queue, or returns NULL. */
SX_HOT static sx_txpkt_t *chan_build_packet(sx_chan_t *c)
{
    frame_plan_t *plan = c->shard->txq.plan; /* shard.h says why not on the stack */
    size_t mtu = c->dgram_max;
    size_t bytes;
    unsigned n = chan_plan_packet(c, mtu - SX_WIRE_HDR_LEN - c->tag_len, plan, &bytes);

    if (n == 0)
        return NULL;
    sx_txpkt_t *pkt = sx_chan_pkt_alloc_locked(c, SX_WIRE_HDR_LEN + bytes);
    if (pkt == NULL)
        return NULL;
    uint8_t *p = pkt->data + SX_WIRE_HDR_LEN;
    uint32_t seq = c->snd_nxt;
    const uint8_t *ext = NULL;
    for (unsigned i = 0; i < n; i++) {
        sx_op_t *op = plan[i].op;
        sx_wire_frame_t f = {.kind = plan[i].kind,
                             .tag = op->tag,
                             .flags = plan[i].last ? SX_FRAMEF_LAST : 0,
                             .len = plan[i].len,
                             .total = op->len};
        if (op->kind == SX_OP_PUT || op->kind == SX_OP_GET) {
            f.rma.addr = op->raddr + op->off;
            f.rma.key = op->rkey;
            f.rma.op_addr = op->raddr;
            f.rma.op_len = op->len;
            f.rma.op_id = op->op_id;
        } else if (op->kind == SX_OP_RESP) {
            f.resp.op_id = op->op_id;
            f.resp.status = op->status;
            f.resp.offset = op->off;
        } else if (op->kind == SX_OP_REFUSE) {
            f.refuse.seq = op->first_seq;
            f.refuse.frame = op->first_frame;
            f.refuse.status = op->status;
        } else if (!op->started) {
            /* Where a refusal of this message will point (wire.h). */
            op->first_seq = seq;
            op->first_frame = (uint16_t)i;
        }
        if (op->from_region) {
            bool zc = chan_region_zero_copy(c, n, plan[i].len);
            p = sx_chan_write_region_frame_locked(c, op, &f, p, plan[i].len, zc ? pkt : NULL);
            ext = pkt->ext;
        } else if (n == 1 && (ext = chan_zero_copy(c, op, &plan[i])) != NULL) {
            p += sx_wire_write_frame(p, &f);
            op_skip(op, plan[i].len);
        } else {
            p += sx_wire_write_frame(p, &f);
            op_copy(op, p, plan[i].len);
            sx_stat_add(&c->shard->stats.copy_tx_bytes, plan[i].len);
            p += plan[i].len;
        }
        op->off += plan[i].len;
        op->started = 1;
        if (plan[i].last) {
            op->last_seq = seq;
            c->sendq = op->next;
            if (c->sendq == NULL)
                c->sendq_tail = NULL;
            chan_op_sent(c, op);
        }
    }
    pkt->guest.on_evict = sx_chan_on_timeout;
    pkt->chan = c;
    pkt->seq = seq;
    pkt->len = (uint32_t)(SX_WIRE_HDR_LEN + bytes);
    pkt->ext = ext;
    pkt->head = ext != NULL ? (uint32_t)(p - pkt->data) : pkt->len;
    if (pkt->pin != NULL && sx_chan_wants_crc(c)) {
        /* The checksum reads the region (shard/mem.h, Pins). */
        chan_write_hdr(c, pkt->data, SX_PKT_DATA, seq, (uint16_t)bytes, 0,
                       sx_mem_pin_read_begin(pkt->pin, ext), pkt->len - pkt->head);
        sx_mem_pin_read_end(pkt->pin);
    } else
        chan_write_hdr(c, pkt->data, SX_PKT_DATA, seq, (uint16_t)bytes, 0, ext,
                       ext != NULL ? pkt->len - pkt->head : 0);
    sx_stat_add(&c->shard->stats.frames_sent, n);
    return pkt;
}

/* Stages a datagram in the shard's batch; @p pkt is NULL for an ACK. */
static void chan_stage(sx_chan_t *c, const uint8_t *data, size_t len, sx_txpkt_t *pkt)
{
    sx_shard_tx_stage_locked(c->shard, c->tl, c->dest, data, len, c, pkt);
}

/* A standalone ACK; its sequence field is unused but for a challenge and
 * a duplicate's report (SX_PKTF_DSACK). */
static void chan_send_ack_flags(sx_chan_t *c, uint16_t flags, uint32_t seq)
{
    /* The ACK is built in the batch's own buffer, which lives until the
     * batch is posted. */
    uint8_t *buf = sx_shard_tx_ack_buf_locked(c->shard, c->tl);
    chan_write_hdr(c, buf, SX_PKT_ACK, seq, 0, flags, NULL, 0);
    chan_stage(c, buf, SX_WIRE_HDR_LEN, NULL);
    sx_stat_add(&c->shard->stats.acks_sent, 1);
}

static void chan_send_ack(sx_chan_t *c)
{
    chan_send_ack_flags(c, 0, 0);
}

void sx_chan_send_owed_dsack_locked(sx_chan_t *c)
{
    c->dsack_owed = false;
    chan_send_ack_flags(c, SX_PKTF_DSACK, c->dsack_seq);
}

void sx_chan_send_probe_locked(sx_chan_t *c)
{
    chan_send_ack_flags(c, SX_PKTF_PROBE, 0);
}

void sx_chan_send_challenge_locked(sx_chan_t *c, uint32_t nonce)
{
    chan_send_ack_flags(c, SX_PKTF_PROBE, nonce);
}

/*
 * A new packet's send time and retransmission timer are set after the
 * system call that sends it (sx_shard_tx_post_locked), not before: the
 * clock read (libc, the vDSO and its data page) and the hotel's check-in
 * (its rooms, its wheel) were ~200 cycles between a message's sx_send and
 * its sendmmsg, mostly TLB misses after the system call before
 * (src/common/hot.h). Nothing can acknowledge or time out the packet in
 * between: the token is held throughout. The time is also closer to the
 * datagram's departure. A channel whose flush needs the time before
 * sending (retransmissions, congestion control, a closed receive window)
 * still reads it first, and its new packets take that time as their send
 * time. So does a batch of several new packets, whose send time (@p
 * sent_ns) is read before the call; the timers of all of them start after
 * it (@p now; sx_shard_tx_post_locked says why).
 */
SX_HOT void sx_chan_stamp_locked(sx_txpkt_t *pkt, uint64_t sent_ns, uint64_t now)
{
    sx_chan_t *c = pkt->chan;

    pkt->unstamped = false;
    pkt->first_sent_ns = sent_ns;
    pkt->last_sent_ns = sent_ns;
    if (pkt->seq == c->snd_una && !sx_timer_is_pending(&c->persist_timer)) {
        /* The peer owed us nothing before it. */
        c->alive_ns = now;
        c->probes = 0;
    }
    sx_chan_tlp_mark_locked(c, now);
    if (sx_chan_arm_locked(c, pkt, now) != SX_OK) {
        /* No room to time it: it goes again as a retransmission, which
         * takes a room then (before, it waited unsent). */
        sx_stat_add(&c->shard->stats.hotel_full, 1);
        sx_chan_queue_rtx_locked(c, pkt);
    }
}

SX_HOT unsigned sx_chan_flush_locked(sx_chan_t *c)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;
    unsigned sent = 0;
    /* Read when first needed (see sx_chan_stamp_locked). */
    uint64_t now = c->rtx != NULL || c->cc != NULL ? sx_time_ns() : 0;

    c->held = false;
    if (c->failed)
        return 0;
    if (c->conn != SX_CONN_UP) {
        /* Work waits until the connection is up; the first of it starts
         * the method's connect (connections are made lazily). What we
         * received is still acknowledged: the peer may be up before us
         * (we are probing our direction of the path). */
        if (c->conn == SX_CONN_IDLE && c->sendq != NULL)
            c->conn_method->ops->start_connect_locked(c->conn_method, c);
        if (c->rcv_synced && (c->ack_now || c->ack_pending >= p->ack_every))
            chan_send_ack(c);
        return 0;
    }
    /* Retransmissions first: they hold up everything behind them. */
    while (c->rtx != NULL) {
        sx_txpkt_t *pkt = c->rtx;
        if (c->shard->tx_again) {
            /* The interface refused a batch of this flush (no send
             * credits, a full socket): what it refused went back into
             * this queue, and resending it now would meet the same
             * refusal, for good on a transport whose credits come back
             * only with the completions the next poll reads (libfabric,
             * verbs). The next pass flushes again. */
            sx_chan_kick_locked(c);
            break;
        }
        if (pkt->sacked) {
            /* It arrived after it was queued: nothing to send, and no
             * room to take (its SACK gave it back). */
            c->rtx = pkt->rtx_next;
            if (c->rtx == NULL)
                c->rtx_tail = NULL;
            pkt->queued = false;
            continue;
        }
        if (sx_chan_arm_locked(c, pkt, now) != SX_OK) {
            /* Every room of the shard's hotel is taken, maybe by other
             * channels' packets, whose ACKs kick only their own channels:
             * look again in a quarter of a timeout, or nothing may. */
            sx_stat_add(&c->shard->stats.hotel_full, 1);
            uint64_t tick = sx_wheel_tick_ns(c->shard->wheel);
            sx_chan_retry_at_locked(c, now + (c->rto_ns / 4 > tick ? c->rto_ns / 4 : tick));
            c->room_wait = true;
            break;
        }
        c->room_wait = false;
        /* Off the queue before it is staged: staging may post the batch,
         * and what the interface refuses goes back into the queue, ahead
         * of this packet's successor (it is older). */
        c->rtx = pkt->rtx_next;
        if (c->rtx == NULL)
            c->rtx_tail = NULL;
        pkt->queued = false;
        sx_wire_hdr_t ack;
        sx_chan_ack_fields_locked(c, &ack);
        sx_wire_update_ack(pkt->data, &ack, SX_PKTF_ACK);
        c->ack_pending = 0;
        c->ack_now = false;
        /* Built before the path's MTU was found smaller (chan_pmtu.c). */
        bool whole = pkt->len + c->tag_len <= c->dgram_max;
        if (!whole)
            sx_chan_pkt_materialize_locked(c, pkt);
        if (whole || !sx_chan_send_frags_locked(c, pkt))
            chan_stage(c, pkt->data, pkt->len, pkt);
        pkt->transmissions++;
        pkt->last_sent_ns = now;
        sx_chan_cc_resent_locked(c, pkt->seq); /* a copy our halving must hear of */
        sx_stat_add(&c->shard->stats.rtx_bytes, pkt->len);
        sx_stat_add(&c->shard->stats.rtx_packets, 1);
        sx_chan_cc_in_locked(c, pkt); /* it takes its time; it never waits */
        sent++;
    }
    /* New packets while the window, the byte budget and the hotel allow. */
    while (c->rtx == NULL && c->sendq != NULL) {
        if ((uint32_t)(c->snd_nxt - c->snd_una) >= c->snd_window ||
            c->inflight_bytes >= p->max_inflight) {
            sx_stat_add(&c->shard->stats.window_stalls, 1);
            break;
        }
        /* Flow control: the peer's receive window (RFC 9293 section
         * 3.8.6). With nothing in flight no ACK will reopen it: the persist
         * timer probes it. */
        if (!sx_chan_rwnd_open(c)) {
            sx_stat_add(&c->shard->stats.rwnd_stalls, 1);
            c->rwnd_stalled = true;
            if (now == 0)
                now = sx_time_ns();
            if (c->snd_una == c->snd_nxt) {
                if (!sx_timer_is_pending(&c->persist_timer))
                    c->alive_ns = now; /* the wait for the window begins */
                sx_chan_arm_persist_locked(c, now);
            }
            break;
        }
        /* Congestion control: the destination host's window and pacing
         * clock (shard/cc.h). */
        if (c->cc != NULL && !sx_chan_cc_allows_locked(c, now))
            break;
        sx_txpkt_t *pkt = chan_build_packet(c);
        if (pkt == NULL)
            break;
        c->win[pkt->seq & (sx_chan_window(c) - 1)] = pkt;
        c->snd_nxt++;
        c->inflight_bytes += pkt->len;
        sx_chan_cc_in_locked(c, pkt);
        pkt->transmissions = 1;
        pkt->unstamped = true;    /* sx_chan_stamp_locked, after the post */
        pkt->first_sent_ns = now; /* before the post, or 0: sx_shard_tx_post_locked */
        sx_stat_add(&c->shard->stats.data_sent, 1);
        sx_stat_add(&c->shard->stats.data_bytes, pkt->len);
        chan_stage(c, pkt->data, pkt->len, pkt);
        sent++;
    }
    if (c->cc != NULL)
        sx_chan_cc_post_locked(c, now);
    if (c->dsack_owed) {
        /* A standalone ACK whatever else went: a data packet's seq is
         * its own. */
        sx_chan_send_owed_dsack_locked(c);
    } else if (c->ack_now || c->ack_pending >= p->ack_every) {
        chan_send_ack(c);
    }
    return sent;
}

int sx_chan_send_raw_locked(sx_chan_t *c, const uint8_t *data, size_t len)
{
    sx_tl_iface_t *iface = sx_chan_iface(c);
    sx_tl_tx_t tx = {.dest = c->dest, .iovcnt = 1};
    unsigned posted = 0;

    /* After what is staged, so the order on the wire is the order of the
     * calls. Only transports that are done with the buffer when post_send
     * returns (caps.sync_send: udp, self, fault) may carry it: the caller's
     * buffer is gone after this call. */
    if (!iface->caps.sync_send)
        return SX_ERR_UNSUPPORTED;
    sx_shard_tx_post_locked(c->shard);
    tx.iov[0].iov_base = (void *)data;
    tx.iov[0].iov_len = len;
    return iface->ops->post_send(iface, &tx, 1, &posted);
}

void sx_chan_tx_refused_locked(sx_chan_t *c, sx_txpkt_t *pkt, bool full)
{
    /* A full interface: send again at the next flush. Anything else (a
     * refused destination, say) waits for its retransmission timer, so a
     * persistent error cannot spin the progress loop. An ACK is owed
     * again either way. */
    if (pkt == NULL) {
        c->ack_now = true;
        sx_chan_kick_locked(c);
    } else if (full) {
        sx_stat_add(&c->shard->stats.tx_again, 1);
        sx_chan_queue_rtx_locked(c, pkt);
    }
}
