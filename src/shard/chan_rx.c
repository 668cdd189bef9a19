/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels, receive (chan.h): packets in sequence order, exactly once,
 * with those ahead of a gap kept aside; frames delivered to their
 * handlers; large messages reassembled; ACKs owed, delayed or at once.
 */
#include <stdlib.h>
#include <string.h>

#include "common/copy.h"
#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/conn.h"
#include "shard/handlers.h"
#include "shard/peer.h"

SX_HOT void sx_chan_ack_timer(sx_timer_t *timer, void *arg)
{
    sx_chan_t *c = arg;
    sx_wheel_t *wheel = c->shard->wheel;

    if (c->ack_pending == 0)
        return;
    /* Armed for a debt that was paid, and the one owed now is younger
     * than the delay (chan_owe_ack). */
    uint64_t due = c->ack_owed_ns + c->shard->env->conf.ack_delay_ns;
    if (sx_u64_before(sx_wheel_now(wheel), due)) {
        sx_wheel_add(wheel, timer, due);
        return;
    }
    c->ack_now = true;
    sx_chan_kick_locked(c);
}

SX_HOT static void chan_deliver_am(sx_chan_t *c, uint8_t tag, const void *data, size_t len)
{
    const sx_am_handler_t *h = sx_handlers_am(c->shard->env->handlers, tag);

    if (h == NULL) {
        sx_stat_add(&c->shard->stats.am_no_handler, 1);
        sx_warn_ratelimited("chan", "message with tag %u from %s dropped: no handler registered",
                            tag, c->peer->name);
        return;
    }
    sx_stat_add(&c->shard->stats.am_delivered, 1);
    if (h->msg_cb != NULL) {
        sx_am_msg_t msg = {
            .peer = c->peer, .peer_id = c->peer->id, .tag = tag, .data = data, .len = len};
        h->msg_cb(h->arg, &msg);
    } else {
        h->cb(h->arg, c->peer->id, tag, data, len);
    }
}

void sx_chan_drop_frame_locked(sx_chan_t *c, sx_drop_reason_t why)
{
    sx_stat_add(&c->shard->stats.drops[why], 1);
    sx_debug("chan", "%s: frame dropped: %s", c->peer->name, sx_drop_reason_text(why));
}

/* ------------------------------------------------------------ refusals */

/* Why the message whose first frame is @p f will not be delivered, as it
 * arrives: larger than SX_MAX_MSG_SIZE (a message that fits one frame
 * too), or for a tag without a handler; SX_OK to take it. */
static int chan_refusal(const sx_chan_t *c, const sx_wire_frame_t *f)
{
    uint64_t size = f->kind == SX_FRAME_AM_FIRST ? f->total : f->len;

    if (size > c->shard->env->conf.max_msg)
        return SX_ERR_TRUNCATED;
    if (sx_handlers_am(c->shard->env->handlers, f->tag) == NULL)
        return SX_ERR_NOT_FOUND;
    return SX_OK;
}

/* Whether frame @p f starts a message that chan_refusal judges (a frame
 * that lies about its length is dropped instead). */
static bool chan_judged(const sx_wire_frame_t *f)
{
    return f->kind == SX_FRAME_AM || (f->kind == SX_FRAME_AM_FIRST && f->len <= f->total);
}

/*
 * Refusals waiting to be sent (refuse_queued) are bounded by what packets
 * are taken, not by failing the channel: a conforming peer that sends a
 * burst of small messages to a tag without a handler here (64 of them in
 * each of its datagrams, SX_AGGREGATE) can reach any number before the
 * first refusal leaves, and failing the channel for it made that peer
 * unusable. So while refusals wait, a packet in order whose messages would
 * take them past SX_REFUSE_QUEUED_MAX is not taken yet: dropped as
 * SX_DROP_NO_BUFFER, unacknowledged, it comes again after the refusals
 * left (they leave at the next flush, the window permitting). A packet
 * is always taken when none wait, so refuse_queued stays below
 * SX_REFUSE_QUEUED_MAX plus one datagram's frames (8 bytes each at
 * least): at most 12,288 operation records. The check parses the packet
 * only while refusals wait.
 */
#define SX_REFUSE_QUEUED_MAX 4096u

static bool chan_refusals_fit(const sx_chan_t *c, const uint8_t *payload, size_t len)
{
    if (c->refuse_queued == 0)
        return true;
    unsigned n = 0;
    size_t off = 0;
    sx_wire_frame_t f;
    while (sx_wire_next_frame(payload, len, &off, &f) == 1) {
        if (chan_judged(&f) && chan_refusal(c, &f) != SX_OK)
            n++;
    }
    return c->refuse_queued + n <= SX_REFUSE_QUEUED_MAX;
}

/*
 * Refuses the message whose first frame is frame @p idx of the peer's
 * packet @p seq, which is being taken in order now, before any ACK past
 * it went out: an AM_REFUSE goes back, and the cumulative ACK holds at
 * the oldest refused packet until every refusal is acknowledged, so the
 * sender learns of it before its message could complete (wire.h). Fails
 * the channel only for want of memory; callers stop at c->failed.
 */
static void chan_refuse(sx_chan_t *c, uint32_t seq, unsigned idx, const sx_wire_frame_t *f,
                        int status)
{
    uint64_t size = f->kind == SX_FRAME_AM_FIRST ? f->total : f->len;

    if (status == SX_ERR_TRUNCATED)
        sx_stat_add(&c->shard->stats.drops[SX_DROP_TOO_LARGE], 1);
    else
        sx_stat_add(&c->shard->stats.am_no_handler, 1);
    sx_stat_add(&c->shard->stats.am_refused, 1);
    sx_warn_ratelimited("chan",
                        "message with tag %u (%llu bytes) from %s refused: %s; its send "
                        "fails with %s",
                        f->tag, (unsigned long long)size, c->peer->name,
                        status == SX_ERR_TRUNCATED ? "larger than SX_MAX_MSG_SIZE here"
                                                   : "no handler registered for the tag",
                        sx_status_name(status));
    sx_op_t *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        sx_chan_fail_why_locked(c, SX_ERR_NO_MEMORY, "no memory to refuse a message");
        return;
    }
    op->peer = c->peer;
    op->lane = c->lane;
    op->kind = SX_OP_REFUSE;
    op->first_seq = seq;
    op->first_frame = (uint16_t)idx;
    op->status = status;
    if (!c->hold) {
        c->hold = true;
        c->hold_seq = seq;
    }
    sx_chan_queue_resp_locked(c, op);
}

SX_HOT void sx_chan_hold_check_locked(sx_chan_t *c)
{
    if (c->hold && c->refuse_queued == 0 && sx_u32_before(c->refuse_last_seq, c->snd_una)) {
        c->hold = false;
        c->ack_now = true; /* the sender waits for this ACK */
        sx_chan_kick_locked(c);
    }
}

static bool chan_op_named(const sx_op_t *op, uint32_t seq, uint16_t frame)
{
    return op->kind == SX_OP_AM && op->started && op->first_seq == seq && op->first_frame == frame;
}

/*
 * The message of ours that a refusal names, or NULL. Messages wait in
 * ackq in the order they were cut into packets (appended at its tail,
 * completed from its head), and the peer refuses them in the order it
 * took them, so the search starts at the message the last refusal named
 * and wraps round to the head: a stream of refusals costs a step or two
 * each. Walking ackq from its head cost as many steps as messages were
 * still unacknowledged: 630 million for the 126,000 refusals of test_am's
 * refusal flood (~5,000 each), whose drain took 176 s under TSan, the
 * shard's token held throughout. The order only makes it fast; the
 * search still covers every op. Only sendq's head can be started and not
 * yet whole (chan_plan_packet cuts packets from the head).
 */
static sx_op_t *chan_refused_op(sx_chan_t *c, uint32_t seq, uint16_t frame)
{
    sx_op_t *hint = c->refuse_hint;

    for (sx_op_t *op = hint; op != NULL; op = op->next)
        if (chan_op_named(op, seq, frame))
            return c->refuse_hint = op;
    for (sx_op_t *op = c->ackq; op != hint; op = op->next)
        if (chan_op_named(op, seq, frame))
            return c->refuse_hint = op;
    return c->sendq != NULL && chan_op_named(c->sendq, seq, frame) ? c->sendq : NULL;
}

/* The peer refused one of our messages: it completes with the status the
 * refusal gives when its ACK comes, which the peer holds back until then.
 * A refusal that names no message of ours is dropped. */
static void chan_recv_refuse(sx_chan_t *c, const sx_wire_frame_t *f)
{
    int st = f->refuse.status;
    sx_op_t *op = NULL;

    if (st == SX_ERR_TRUNCATED || st == SX_ERR_NOT_FOUND)
        op = chan_refused_op(c, f->refuse.seq, f->refuse.frame);
    if (op == NULL || op->status != SX_OK) {
        sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
        return;
    }
    op->status = st;
    op->refused = true;
    sx_stat_add(&c->shard->stats.am_refused_by_peer, 1);
    sx_warn_ratelimited("chan", "message with tag %u (%llu bytes) to %s refused there: %s (%s)",
                        op->tag, (unsigned long long)op->len, c->peer->name,
                        st == SX_ERR_TRUNCATED ? "larger than its SX_MAX_MSG_SIZE"
                                               : "no handler registered for the tag",
                        sx_status_name(st));
}

/*
 * A packet taken in order now but handed up later (the service keeps it,
 * or it waits behind a backlog), after its ACK went out: refusals are
 * decided here, before that ACK, and marked in the kept copy for the
 * delivery to skip; refusals from the peer are taken here too, before
 * the ACK that would complete the message they name. What the wire says
 * in the mark's bit is cleared first.
 */
static void chan_scan_kept(sx_chan_t *c, uint32_t seq, uint8_t *buf, size_t len)
{
    uint8_t *payload = buf + SX_WIRE_HDR_LEN;
    size_t plen = len - SX_WIRE_HDR_LEN, off = 0, at = 0;
    unsigned idx = 0;
    sx_wire_frame_t f;

    while (sx_wire_next_frame(payload, plen, &off, &f) == 1) {
        uint8_t *fh = payload + at;
        uint16_t flags = (uint16_t)(fh[2] | fh[3] << 8) & (uint16_t)~SX_FRAMEF_REFUSED;
        int st = SX_OK;
        if (chan_judged(&f))
            st = chan_refusal(c, &f);
        if (st != SX_OK) {
            flags |= SX_FRAMEF_REFUSED;
            chan_refuse(c, seq, idx, &f, st);
            if (c->failed)
                return; /* the failure freed the kept packet (chan_free_ooo) */
        }
        fh[2] = (uint8_t)flags;
        fh[3] = (uint8_t)(flags >> 8);
        if (f.kind == SX_FRAME_AM_REFUSE)
            chan_recv_refuse(c, &f);
        at = off;
        idx++;
    }
}

static void chan_abort_assembly(sx_chan_t *c)
{
    free(c->asm_buf);
    c->asm_buf = NULL;
    c->asm_total = c->asm_got = 0;
    c->asm_drop = false;
}

/*
 * Whether the channel's peer was removed (sx_peer_remove): by another
 * thread, or by the handler that just ran, when frames of its packet or
 * packets of the backlog follow. Nothing of a removed peer is handed up
 * after sx_peer_remove returned (its handle is gone), as its next
 * datagram finds no peer (sx_shard_chan_of). The table's removal count
 * gates the lookup: one load per frame while no peer goes.
 */
SX_HOT static bool chan_peer_removed(sx_chan_t *c)
{
    sx_peer_table_t *table = c->shard->env->peers;
    unsigned removals = atomic_load_explicit(&table->removals, memory_order_acquire);

    if (removals == c->rx_removals_seen)
        return false;
    sx_rcu_read_lock();
    bool gone = sx_peer_lookup_rcu(table, c->peer->epoch) != c->peer;
    sx_rcu_read_unlock(&table->rcu);
    if (!gone)
        c->rx_removals_seen = removals;
    return gone;
}

/* Counts the frames from @p off on as from an unknown peer: its channel
 * closes, and they are not handed up. */
static void chan_drop_rest(sx_chan_t *c, const uint8_t *payload, size_t len, size_t off)
{
    uint64_t n = 0;
    sx_wire_frame_t f;

    while (sx_wire_next_frame(payload, len, &off, &f) == 1)
        n++;
    sx_stat_add(&c->shard->stats.drops[SX_DROP_UNKNOWN_PEER], n);
    chan_abort_assembly(c);
}

/*
 * Delivers the frames of the peer's packet @p seq in order; returns how
 * many it held. Reliability already made this packet exactly-once and in
 * order, so chunks of a message arrive consecutively. @p scanned: the
 * packet went through chan_scan_kept, which decided its refusals and
 * took its AM_REFUSE frames; else both happen here, as it arrives.
 * @p budget (a backlog's packet; else NULL): starts at the frame at
 * c->dlv_off, and takes a frame from it for each frame after the first;
 * when it runs out, leaves the offset of the frame not yet handed up in
 * c->dlv_off (never 0 then) and returns.
 */
SX_HOT static unsigned chan_deliver_packet(sx_chan_t *c, uint32_t seq, const uint8_t *payload,
                                           size_t len, bool scanned, const sx_landing_t *land,
                                           sx_handup_t *budget)
{
    unsigned frames = 0;
    size_t off = budget != NULL ? c->dlv_off : 0;
    sx_wire_frame_t f;
    int r, st;

    if (budget != NULL)
        c->dlv_off = 0;
    for (size_t at = off; (r = sx_wire_next_frame(payload, len, &off, &f)) == 1; at = off) {
        if (c->failed)
            break; /* a refusal found no memory: nothing more is taken */
        if (chan_peer_removed(c)) {
            chan_drop_rest(c, payload, len, at);
            break;
        }
        if (budget != NULL && frames > 0 && !sx_handup_take(budget)) {
            c->dlv_off = (uint32_t)at; /* the next pass goes on from here */
            return frames;
        }
        frames++;
        bool assembling = c->asm_buf != NULL || c->asm_drop;
        bool refused = scanned && (f.flags & SX_FRAMEF_REFUSED);
        /* A whole active message, the usual frame, ahead of the switch:
         * the switch's jump table is read-only data on a page of its own,
         * one more TLB miss per message (common/hot.h). */
        if (f.kind == SX_FRAME_AM) {
            if (assembling) {
                sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
                chan_abort_assembly(c);
            }
            if (!scanned && (st = chan_refusal(c, &f)) != SX_OK)
                chan_refuse(c, seq, frames - 1, &f, st);
            else if (!refused)
                chan_deliver_am(c, f.tag, f.data, f.len);
            continue;
        }
        switch (f.kind) {
        case SX_FRAME_AM_FIRST:
            if (assembling) {
                sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
                chan_abort_assembly(c);
            }
            c->asm_total = f.total;
            c->asm_got = f.len;
            c->asm_tag = f.tag;
            if (f.len > f.total) {
                sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
                c->asm_drop = true;
            } else if (refused) {
                c->asm_drop = true; /* refused as it arrived (chan_scan_kept) */
            } else if (!scanned && (st = chan_refusal(c, &f)) != SX_OK) {
                chan_refuse(c, seq, frames - 1, &f, st);
                c->asm_drop = true;
            } else if ((c->asm_buf = malloc(f.total ? f.total : 1)) == NULL) {
                sx_chan_drop_frame_locked(c, SX_DROP_NO_BUFFER);
                c->asm_drop = true;
            } else {
                sx_copy_bulk(c->asm_buf, f.data, f.len);
                sx_stat_add(&c->shard->stats.copy_rx_bytes, f.len);
            }
            break;
        case SX_FRAME_AM_MORE:
            if (!assembling || f.len > c->asm_total - c->asm_got || f.tag != c->asm_tag) {
                sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
                chan_abort_assembly(c);
                break;
            }
            if (c->asm_buf != NULL) {
                sx_copy_bulk(c->asm_buf + c->asm_got, f.data, f.len);
                sx_stat_add(&c->shard->stats.copy_rx_bytes, f.len);
            }
            c->asm_got += f.len;
            break;
        case SX_FRAME_PUT:
            if (land != NULL)
                f.data = land->dst; /* the packet's one frame: its data is in place */
            sx_chan_recv_put_locked(c, &f);
            break;
        case SX_FRAME_GET_REQ:
            sx_chan_recv_get_locked(c, &f);
            break;
        case SX_FRAME_RMA_RESP:
            if (land != NULL)
                f.data = land->dst; /* the packet's one frame: its data is in place */
            sx_chan_recv_resp_locked(c, &f);
            break;
        case SX_FRAME_AM_REFUSE:
            if (!scanned)
                chan_recv_refuse(c, &f);
            break;
        default:
            sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
            break;
        }
        if ((f.kind == SX_FRAME_AM_FIRST || f.kind == SX_FRAME_AM_MORE) &&
            (f.flags & SX_FRAMEF_LAST) && (c->asm_buf != NULL || c->asm_drop)) {
            if (c->asm_buf != NULL && c->asm_got == c->asm_total)
                chan_deliver_am(c, c->asm_tag, c->asm_buf, c->asm_total);
            else if (c->asm_buf != NULL)
                sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
            chan_abort_assembly(c);
        }
    }
    if (r < 0)
        sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
    return frames;
}

/*
 * Counts what arrived since the last ACK and decides when to send one: at
 * once after ack_every message frames, else after ack_delay. Counting frames
 * rather than packets keeps the delayed ACK (RFC 1122 4.2.3.2) from holding
 * back a burst of aggregated small messages: a sender that packed a window
 * of them into one datagram waits for their completions, and would
 * otherwise wait the whole delay for every window.
 */
static inline void chan_owe_ack(sx_chan_t *c, unsigned frames)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;
    uint64_t now = c->shard->rx_ns;

    if (c->ack_pending == 0)
        c->ack_owed_ns = now;
    c->ack_pending += frames > 0 ? frames : 1;
    if (c->ack_pending >= p->ack_every || p->ack_delay_ns == 0) {
        c->ack_now = true;
    } else if (!sx_timer_is_pending(&c->ack_timer)) {
        sx_wheel_add(c->shard->wheel, &c->ack_timer, now + p->ack_delay_ns);
    }
}

/* Whether the ring holds @p seq. Its slots are for rcv_dlv .. rcv_dlv +
 * window - 1 only (chan_keep); a SACK looks 64 past rcv_nxt, and beyond
 * the ring a slot belongs to a packet a window earlier (the backlog's, or
 * one ahead of the gap), which the SACK reported as this one: the sender
 * then gave up its copy and never resent it (test_am,
 * test_sack_stays_within_the_ring). */
static inline bool ooo_has(const sx_chan_t *c, uint32_t seq)
{
    uint32_t w = sx_chan_window(c), i = seq & (w - 1);
    return c->ooo_bits != NULL && (uint32_t)(seq - c->rcv_dlv) < w &&
           (c->ooo_bits[i / 64] & (1ull << (i % 64))) != 0;
}

/* The header's view of what is kept: packets rcv_nxt + 1 .. + 64. */
static void chan_update_sack(sx_chan_t *c)
{
    uint64_t sack = 0;

    if (c->ooo_count > 0) {
        for (unsigned i = 0; i < SX_WIRE_SACK_BITS; i++) {
            if (ooo_has(c, c->rcv_nxt + 1 + i))
                sack |= 1ull << i;
        }
    }
    c->rcv_sack = sack;
    if (c->hold) {
        /* The same, seen from the held ACK: all before rcv_nxt arrived. */
        sack = 0;
        for (unsigned i = 0; i < SX_WIRE_SACK_BITS; i++) {
            uint32_t s = c->hold_seq + 1 + i;
            if (sx_u32_before(s, c->rcv_nxt) || ooo_has(c, s))
                sack |= 1ull << i;
        }
        c->hold_sack = sack;
    }
}

/* A DATA packet came twice: the next flush says which (SX_PKTF_DSACK),
 * so that the sender learns its retransmission was not needed (RFC 2883,
 * section 4). A report names one packet, so one still owed from an
 * earlier duplicate goes now, as Linux acknowledges every duplicate at
 * once (sx_chan_send_owed_dsack_locked, as the flush sends the last):
 * the sender's undo of a halving needs a report of each packet its
 * episode resent (chan_cc.c), and with the later duplicate replacing
 * the earlier report, a third of them never came (test_reliability's
 * "dup 5%, every duplicate reported"). */
static void chan_owe_dsack(sx_chan_t *c, uint32_t seq)
{
    if (c->dsack_owed)
        sx_chan_send_owed_dsack_locked(c);
    c->dsack_owed = true;
    c->dsack_seq = seq;
}

/*
 * Keeps a packet in the ring: one ahead of a gap, or (received by the
 * service, or behind a backlog) the next in order; the drop reason or
 * SX_DROP_NONE. The ring covers rcv_dlv .. rcv_dlv + window, which is what
 * the advertised window lets a conforming sender reach.
 */
static sx_drop_reason_t chan_keep(sx_chan_t *c, uint32_t seq, const uint8_t *data, size_t len)
{
    uint32_t w = sx_chan_window(c);

    if ((uint32_t)(seq - c->rcv_dlv) >= w || sx_u32_before(seq, c->rcv_nxt))
        return SX_DROP_OUT_OF_WINDOW;
    if (ooo_has(c, seq))
        return SX_DROP_DUPLICATE;
    /* What the ring holds stays within the byte budget the window
     * advertises, give or take the one datagram a sender may send into a
     * window that is open by less than that; a hostile sender cannot make
     * us hold more. */
    if (c->ooo_bytes + c->backlog_bytes + len >
        c->shard->env->conf.max_inflight + sx_chan_iface(c)->caps.mtu)
        return SX_DROP_NO_BUFFER;
    if (c->ooo == NULL) {
        c->ooo = calloc(w, sizeof(*c->ooo));
        c->ooo_bits = calloc((w + 63) / 64, sizeof(uint64_t));
        if (c->ooo == NULL || c->ooo_bits == NULL) {
            free(c->ooo);
            free(c->ooo_bits);
            c->ooo = NULL;
            c->ooo_bits = NULL;
            return SX_DROP_NO_BUFFER;
        }
    }
    uint32_t i = seq & (w - 1);
    c->ooo[i].buf = malloc(len);
    if (c->ooo[i].buf == NULL)
        return SX_DROP_NO_BUFFER;
    sx_copy_bulk(c->ooo[i].buf, data, len);
    sx_stat_add(&c->shard->stats.copy_rx_bytes, len);
    c->ooo[i].len = (uint32_t)len;
    c->ooo_bits[i / 64] |= 1ull << (i % 64);
    c->ooo_count++;
    c->ooo_bytes += len;
    return SX_DROP_NONE;
}

/* Lets go of the kept packet in slot @p i, at rcv_nxt, before it was
 * taken: its refusals would not fit (chan_refusals_fit), so it waits for
 * its retransmission instead. */
static void chan_unkeep(sx_chan_t *c, uint32_t i)
{
    free(c->ooo[i].buf);
    c->ooo[i].buf = NULL;
    c->ooo_bits[i / 64] &= ~(1ull << (i % 64));
    c->ooo_count--;
    c->ooo_bytes -= c->ooo[i].len;
    sx_stat_add(&c->shard->stats.drops[SX_DROP_NO_BUFFER], 1);
    c->ack_now = true;
}

/* Whether the kept packet in slot @p i may be taken now; lets go of it
 * when not. */
static bool chan_kept_fits(sx_chan_t *c, uint32_t i)
{
    if (chan_refusals_fit(c, c->ooo[i].buf + SX_WIRE_HDR_LEN, c->ooo[i].len - SX_WIRE_HDR_LEN))
        return true;
    chan_unkeep(c, i);
    return false;
}

/* The kept packet at rcv_nxt and every one in order after it join the
 * backlog: acknowledged, to be handed up later. */
static void chan_absorb_kept(sx_chan_t *c)
{
    while (c->ooo_count > 0 && ooo_has(c, c->rcv_nxt)) {
        uint32_t i = c->rcv_nxt & (sx_chan_window(c) - 1);
        uint32_t len = c->ooo[i].len;
        if (!chan_kept_fits(c, i))
            return;
        chan_scan_kept(c, c->rcv_nxt, c->ooo[i].buf, len);
        if (c->failed)
            return; /* the failure let go of every kept packet */
        c->ooo_count--;
        c->ooo_bytes -= len;
        c->backlog_bytes += len;
        c->rcv_nxt++;
    }
}

/*
 * After the backlog shrank: tell the sender when the window it last heard
 * of has opened by a quarter or more (a window update, RFC 9293 section
 * 3.8.6.2.2's rule for the receiver against silly windows), so a sender
 * that stalled does not wait for its persist timer.
 */
static void chan_window_update(sx_chan_t *c)
{
    uint32_t pkts, bytes;

    sx_chan_rwnd_locked(c, &pkts, &bytes);
    if (pkts >= c->rwnd_adv_pkts + sx_chan_window(c) / 4 ||
        bytes >= c->rwnd_adv_bytes + c->shard->env->conf.max_inflight / 4) {
        c->ack_now = true;
        sx_chan_kick_locked(c);
    }
}

SX_HOT unsigned sx_chan_deliver_backlog_locked(sx_chan_t *c, sx_handup_t *budget)
{
    uint32_t mask = sx_chan_window(c) - 1;
    unsigned n = 0;

    while (c->rcv_dlv != c->rcv_nxt) {
        if (!sx_handup_take(budget)) {
            sx_shard_queue_backlog_locked(c->shard, c); /* the next pass goes on */
            break;
        }
        /* The packet stays in the ring while its frames are handed up: the
         * budget may run out after any of them. */
        uint32_t i = c->rcv_dlv & mask;
        uint8_t *buf = c->ooo[i].buf;
        uint32_t len = c->ooo[i].len;
        n += chan_deliver_packet(c, c->rcv_dlv, buf + SX_WIRE_HDR_LEN, len - SX_WIRE_HDR_LEN, true,
                                 NULL, budget);
        if (c->dlv_off != 0) {
            sx_shard_queue_backlog_locked(c->shard, c);
            break;
        }
        c->ooo[i].buf = NULL;
        c->ooo_bits[i / 64] &= ~(1ull << (i % 64));
        c->backlog_bytes -= len;
        c->rcv_dlv++;
        free(buf);
    }
    if (n > 0 && !c->failed)
        chan_window_update(c);
    return n;
}

/* Delivers kept packets that are now in order. */
static void chan_deliver_kept(sx_chan_t *c)
{
    while (c->ooo_count > 0 && ooo_has(c, c->rcv_nxt)) {
        uint32_t i = c->rcv_nxt & (sx_chan_window(c) - 1);
        if (!chan_kept_fits(c, i))
            return;
        uint8_t *buf = c->ooo[i].buf;
        uint32_t len = c->ooo[i].len;
        c->ooo[i].buf = NULL;
        c->ooo_bits[i / 64] &= ~(1ull << (i % 64));
        c->ooo_count--;
        c->ooo_bytes -= len;
        c->rcv_nxt++;
        chan_deliver_packet(c, c->rcv_nxt - 1, buf + SX_WIRE_HDR_LEN, len - SX_WIRE_HDR_LEN, false,
                            NULL, NULL);
        free(buf);
        if (c->failed)
            return;
    }
}

SX_HOT void sx_chan_recv_locked(sx_chan_t *c, const sx_wire_hdr_t *h, const uint8_t *data,
                                size_t len, const sx_landing_t *land)
{
    if (c->failed) {
        sx_stat_add(&c->shard->stats.drops[SX_DROP_CHANNEL_FAILED], 1);
        return;
    }
    if (c->conn != SX_CONN_UP && !sx_conn_data_ok_locked(c, h)) {
        /* Before the peer's CONNECT we do not know where its sequence
         * numbers start. */
        sx_stat_add(&c->shard->stats.drops[SX_DROP_NOT_CONNECTED], 1);
        return;
    }
    /* Any packet of the peer's proves its library alive (liveness,
     * chan_retransmit.c); a probe asks for our ACK at once. The time is
     * the read's: the wheel's clock moves when a pass runs its timers,
     * after the poll, so during the first poll after a stall of this
     * process (stopped, or no call for a while) it still says when the
     * last pass before the stall began, which made a peer that answered
     * at once look silent for the whole stall. */
    c->alive_ns = c->shard->rx_ns;
    c->probes = 0;
    if (h->flags & SX_PKTF_PROBE)
        c->ack_now = true;
    bool in_order = h->seq == c->rcv_nxt && !c->shard->serving && c->rcv_dlv == c->rcv_nxt;
    if (h->flags & SX_PKTF_ACK) {
        uint64_t now = c->shard->rx_ns; /* when it was read: shard.h */
        if (!(in_order && h->type == SX_PKT_DATA && sx_chan_ack_hold_locked(c, h, now)))
            sx_chan_process_ack_locked(c, h, h->type == SX_PKT_ACK, now, now,
                                       c->shard->rx_since_ns);
    }
    if (c->failed || h->type != SX_PKT_DATA)
        goto out;

    if (land != NULL && !in_order && land->region) {
        /* sx_chan_land_fits_locked saw it in order, and its landed bytes
         * may no longer be read (chan.h, Landing): its retransmission
         * comes again. */
        sx_chan_drop_frame_locked(c, SX_DROP_LANDED);
        goto out;
    }
    if (land != NULL && !in_order) {
        /* sx_chan_land_fits_locked saw it in order; kept, it is kept whole. */
        sx_landing_undo_locked(c->shard, data, land);
        land = NULL;
    }
    if (h->seq == c->rcv_nxt && (c->shard->serving || c->rcv_dlv != c->rcv_nxt)) {
        /* The service hands nothing up (no callback runs on its thread),
         * and a packet behind a backlog waits its turn: keep it,
         * acknowledge it, and let the next caller deliver. */
        sx_drop_reason_t why = chan_keep(c, h->seq, data, len);
        if (why != SX_DROP_NONE) {
            sx_stat_add(&c->shard->stats.drops[why], 1);
            c->ack_now = true;
            goto sack;
        }
        sx_stat_add(&c->shard->stats.rx_kept_behind, 1);
        chan_absorb_kept(c);
        chan_owe_ack(c, 1);
        if (c->ooo_count != 0)
            c->ack_now = true;
        if (c->shard->serving)
            sx_shard_defer_backlog_locked(c->shard, c);
        else
            sx_shard_queue_backlog_locked(c->shard, c); /* after the poll, budgeted */
    } else if (h->seq == c->rcv_nxt &&
               !chan_refusals_fit(c, data + SX_WIRE_HDR_LEN, h->payload_len)) {
        sx_stat_add(&c->shard->stats.drops[SX_DROP_NO_BUFFER], 1);
        c->ack_now = true; /* taken after its retransmission */
    } else if (h->seq == c->rcv_nxt) {
        c->rcv_nxt++;
        unsigned frames = chan_deliver_packet(c, h->seq, data + SX_WIRE_HDR_LEN, h->payload_len,
                                              false, land, NULL);
        if (!c->failed)
            chan_deliver_kept(c);
        c->rcv_dlv = c->rcv_nxt;
        chan_owe_ack(c, frames);
        if (c->ooo_count != 0)
            c->ack_now = true; /* still a gap: keep the sender informed */
    } else if (sx_u32_before(c->rcv_nxt, h->seq)) {
        sx_drop_reason_t why = chan_keep(c, h->seq, data, len);
        if (why == SX_DROP_NONE)
            sx_stat_add(&c->shard->stats.rx_out_of_order, 1);
        else
            sx_stat_add(&c->shard->stats.drops[why], 1);
        if (why == SX_DROP_DUPLICATE)
            chan_owe_dsack(c, h->seq);
        c->ack_now = true; /* out of order: tell the sender at once */
    } else {
        /* Already delivered: our ACK was lost or is late, or the sender
         * resent what was only late. */
        sx_stat_add(&c->shard->stats.drops[SX_DROP_DUPLICATE], 1);
        chan_owe_dsack(c, h->seq);
        c->ack_now = true;
    }
sack:
    chan_update_sack(c);
out:
    if (c->ack_now || c->rtx != NULL || c->sendq != NULL)
        sx_chan_kick_locked(c);
}
