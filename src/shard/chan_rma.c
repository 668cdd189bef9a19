/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels, emulated RMA (chan.h): the target's side of PUT and GET
 * (key, access and range checked in shard/mem.c before a byte is
 * touched; a GET's data read from the region as its answer is sent, or
 * sent from the region itself under a pin), and
 * the initiator's matching of answers to its outstanding operations.
 */
#include <stdlib.h>
#include <string.h>

#include "common/copy.h"
#include "common/time.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/mem.h"

/*
 * Writes a GET answer's frame, reading the region now: the request left
 * only key and range behind, so queued answers cost no memory, and a
 * region withdrawn meanwhile turns into an error status instead of a read
 * of memory the owner may have freed.
 */
uint8_t *sx_chan_write_region_frame_locked(sx_chan_t *c, sx_op_t *op, sx_wire_frame_t *f,
                                           uint8_t *p, uint32_t len, sx_txpkt_t *zc_pkt)
{
    sx_mem_table_t *mem = c->shard->env->mem;
    const uint8_t *src = NULL;
    sx_mem_t *m = NULL;
    bool pinned = false;

    sx_rcu_read_lock();
    if (op->status == SX_OK && len > 0) {
        sx_wire_rma_t r = {
            .addr = op->raddr + op->off, .key = op->rkey, .op_addr = op->raddr, .op_len = op->len};
        int st;
        src = sx_mem_check_rcu(mem, &r, SX_MEM_REMOTE_READ, len, &st, &m);
        /* The copy runs after the read section. A region being
         * deregistered is gone, as if its key were unknown. */
        if (src != NULL && !(pinned = zc_pkt != NULL && sx_mem_pin_rcu(m)) &&
            !sx_mem_access_begin_rcu(m)) {
            src = NULL;
            st = SX_ERR_ACCESS;
        }
        if (src == NULL)
            op->status = st;
    }
    sx_rcu_read_unlock(&mem->rcu);
    f->resp.status = op->status;
    p += sx_wire_write_frame(p, f);
    if (pinned) {
        zc_pkt->ext = src;
        zc_pkt->pin = m;
        c->pinned_out++;
        sx_stat_add(&c->shard->stats.region_zc_sent, 1);
        return p;
    }
    if (src != NULL) {
        sx_copy_bulk(p, src, len);
        sx_mem_access_end(m);
        sx_stat_add(&c->shard->stats.copy_tx_bytes, len);
    } else
        memset(p, 0, len);
    return p + len;
}

static sx_op_t *chan_new_resp(sx_chan_t *c, uint32_t op_id, int status, size_t len)
{
    sx_op_t *op = calloc(1, sizeof(*op) + len);
    if (op == NULL)
        return NULL;
    op->peer = c->peer;
    op->lane = c->lane;
    op->kind = SX_OP_RESP;
    op->op_id = op_id;
    op->status = status;
    op->len = len;
    op->iovcnt = 1;
    op->iov[0].iov_base = op->inline_data;
    op->iov[0].iov_len = len;
    return op;
}

void sx_chan_recv_put_locked(sx_chan_t *c, const sx_wire_frame_t *f)
{
    const sx_shard_env_t *env = c->shard->env;
    int status;

    if (c->failed) {
        /* A backlog handed up after the channel failed: its initiator's
         * operations have failed already, so nothing is written. */
        sx_chan_drop_frame_locked(c, SX_DROP_CHANNEL_FAILED);
        return;
    }

    if (f->rma.addr == f->rma.op_addr)
        c->put_status = SX_OK; /* the first chunk of a new PUT */
    sx_mem_t *m = NULL;
    sx_rcu_read_lock();
    uint8_t *dst = sx_mem_check_rcu(env->mem, &f->rma, SX_MEM_REMOTE_WRITE, f->len, &status, &m);
    /* The copy runs after the read section. A region being deregistered
     * is gone, as if its key were unknown. */
    if (dst != NULL && c->put_status == SX_OK && !sx_mem_access_begin_rcu(m)) {
        dst = NULL;
        status = SX_ERR_ACCESS;
    }
    bool write = dst != NULL && c->put_status == SX_OK;
    sx_rcu_read_unlock(&env->mem->rcu);
    if (write) {
        if (f->data != dst) {
            sx_copy_bulk(dst, f->data, f->len);
            sx_stat_add(&c->shard->stats.copy_rx_bytes, f->len);
        } else
            sx_stat_add(&c->shard->stats.rx_landed_bytes, f->len); /* landed in place */
        sx_mem_access_end(m);
    }
    if (dst == NULL && c->put_status == SX_OK)
        c->put_status = status;
    /* The next chunk may land (chan.h, Landing) while every chunk so far
     * was written. */
    bool followed = c->put_follow && c->shard->land_put_chan == c;
    c->put_follow = write && !(f->flags & SX_FRAMEF_LAST);
    if (followed && !c->put_follow)
        c->shard->land_probe = SX_LAND_PROBES; /* the next PUT may come next (shard.h) */
    if (c->put_follow) {
        c->put_next = f->rma;
        c->put_next.addr += f->len;
        if (c->shard->land_put_chan == NULL)
            c->shard->land_put_chan = c;
    }
    if (!(f->flags & SX_FRAMEF_LAST))
        return;
    if (c->resp_queued >= SX_RMA_OUTSTANDING_MAX) {
        c->put_status = SX_OK;
        sx_chan_drop_frame_locked(c, SX_DROP_NO_BUFFER); /* more than a conforming peer asks */
        return;
    }
    sx_op_t *resp = chan_new_resp(c, f->rma.op_id, c->put_status, 0);
    c->put_status = SX_OK;
    if (resp == NULL) {
        sx_chan_drop_frame_locked(c, SX_DROP_NO_BUFFER);
        return;
    }
    sx_chan_queue_resp_locked(c, resp);
}

void sx_chan_recv_get_locked(sx_chan_t *c, const sx_wire_frame_t *f)
{
    const sx_shard_env_t *env = c->shard->env;
    int status = SX_ERR_OUT_OF_RANGE;

    if (c->failed) {
        sx_chan_drop_frame_locked(c, SX_DROP_CHANNEL_FAILED);
        return;
    }

    if (c->resp_queued >= SX_RMA_OUTSTANDING_MAX) {
        sx_chan_drop_frame_locked(c, SX_DROP_NO_BUFFER); /* more than a conforming peer asks */
        return;
    }
    if (f->rma.op_len <= env->conf.max_msg) {
        sx_rcu_read_lock();
        (void)sx_mem_check_rcu(env->mem, &f->rma, SX_MEM_REMOTE_READ, f->rma.op_len, &status, NULL);
        sx_rcu_read_unlock(&env->mem->rcu);
    }
    sx_op_t *resp = chan_new_resp(c, f->rma.op_id, status, 0);
    if (resp == NULL) {
        sx_chan_drop_frame_locked(c, SX_DROP_NO_BUFFER);
        return;
    }
    if (status == SX_OK) {
        resp->from_region = true;
        resp->iovcnt = 0;
        resp->rkey = f->rma.key;
        resp->raddr = f->rma.op_addr;
        resp->len = f->rma.op_len;
    }
    sx_chan_queue_resp_locked(c, resp);
}

/* The GET or PUT @p op_id waits for an answer on @p c; NULL if none. */
static sx_op_t *chan_rma_find(const sx_chan_t *c, uint32_t op_id)
{
    sx_op_t *op = c->rmaq;

    while (op != NULL && op->op_id != op_id)
        op = op->next;
    return op;
}

unsigned sx_chan_land_spans_locked(const sx_chan_t *c, sx_land_span_t *spans, unsigned max,
                                   size_t *step_p)
{
    unsigned n = 0;

    if (c->failed || c->tag_len != 0 || c->dgram_max < SX_LAND_MIN)
        return 0;
    /* The target answers in the order it was asked and cuts each answer
     * into chunks that fill a datagram of the size both ends agreed on
     * (chan_tx.c): the answers to come follow one another, chunk by
     * chunk. */
    for (const sx_op_t *op = c->rmaq; op != NULL && n < max; op = op->next) {
        if (op->kind != SX_OP_GET || op->status != SX_OK || op->got >= op->len)
            continue;
        /* A GET under SX_LAND_MIN is one datagram whose copy costs nothing
         * worth saving, and an offer would open its destination to any
         * datagram of the read: the error answer of a GET refused (no
         * such key, no right) or another packet wrote a small GET's
         * destination under TSan (test_rma test_access_rights, 2 runs in
         * 8). The spans stop there, so the answers after it keep to their
         * places. */
        if (op->len < SX_LAND_MIN)
            break;
        /* No place offered twice: a datagram that lands where another
         * one of the same read landed already would overwrite the bytes
         * that have to be copied back into the first (GETs of 4 KiB
         * into one buffer, 64 at a time, lost the frames of a packet
         * that a landing caught, a GET's chunk among them). The spans
         * stop before the first GET whose rest overlaps one before it;
         * its answers are read into the socket's buffers. */
        uintptr_t lo = (uintptr_t)(op->dst + op->got), hi = (uintptr_t)(op->dst + op->len);
        bool overlaps = false;
        for (unsigned i = 0; i < n && !overlaps; i++)
            overlaps = lo < (uintptr_t)(spans[i].dst + spans[i].len) &&
                       (uintptr_t)(spans[i].dst + spans[i].got) < hi;
        if (overlaps)
            break;
        spans[n++] =
            (sx_land_span_t){.op_id = op->op_id, .dst = op->dst, .got = op->got, .len = op->len};
    }
    *step_p = c->dgram_max - SX_WIRE_RESP_DATA_OFF;
    return n;
}

bool sx_chan_land_put_span_locked(const sx_chan_t *c, sx_land_span_t *span, size_t *step_p,
                                  sx_mem_t **mem_p)
{
    sx_mem_table_t *mem = c->shard->env->mem;
    const sx_wire_rma_t *r = &c->put_next;
    int status;

    if (!c->put_follow || c->failed || c->put_status != SX_OK || c->tag_len != 0 ||
        c->dgram_max < SX_LAND_MIN)
        return false;
    /* put_next was a chunk's end within the operation, which lies within
     * the region the chunk was written to; checked again as if a chunk
     * of all the rest came now. */
    uint64_t got = r->addr - r->op_addr, rest = r->op_len - got;
    sx_rcu_read_lock();
    uint8_t *at = sx_mem_check_rcu(mem, r, SX_MEM_REMOTE_WRITE, rest, &status, mem_p);
    if (at != NULL && !sx_mem_access_begin_rcu(*mem_p)) /* until the read is sorted (land.c) */
        at = NULL;                                      /* being deregistered */
    sx_rcu_read_unlock(&mem->rcu);
    if (at == NULL)
        return false;
    *span = (sx_land_span_t){.op_id = r->op_id, .dst = at - got, .got = got, .len = r->op_len};
    *step_p = c->dgram_max - SX_WIRE_PUT_DATA_OFF;
    return true;
}

bool sx_chan_put_followed_locked(const sx_chan_t *c, const sx_wire_rma_t *r)
{
    const sx_wire_rma_t *n = &c->put_next;

    return c->put_follow && r->op_id == n->op_id && r->key == n->key && r->op_addr == n->op_addr &&
           r->op_len == n->op_len;
}

/* Whether @p f, a PUT frame that landed at @p land, is the chunk the
 * offer awaited: the followed PUT's next one, in the place offered. */
static bool chan_land_put_fits(const sx_chan_t *c, const sx_wire_frame_t *f,
                               const sx_landing_t *land)
{
    const sx_wire_rma_t *r = &c->put_next;
    const sx_land_span_t *sp = &c->shard->land_spans[0];

    return c->shard->land_put_chan == c && sx_chan_put_followed_locked(c, &f->rma) &&
           f->rma.addr == r->addr && sp->op_id == r->op_id &&
           land->dst == sp->dst + (r->addr - r->op_addr);
}

bool sx_chan_land_fits_locked(const sx_chan_t *c, const sx_wire_hdr_t *h, const uint8_t *data,
                              const sx_landing_t *land)
{
    sx_wire_frame_t f;
    size_t off = 0;

    /* Delivered now (sx_chan_recv_locked's in-order case), as the one
     * RMA_RESP or PUT frame of its packet, with its data from the landing
     * on. */
    if (c->failed || c->conn != SX_CONN_UP || c->shard->serving || h->seq != c->rcv_nxt ||
        c->rcv_dlv != c->rcv_nxt)
        return false;
    if (sx_wire_next_frame(data + SX_WIRE_HDR_LEN, h->payload_len, &off, &f) != 1 ||
        off != h->payload_len || f.kind != (land->region ? SX_FRAME_PUT : SX_FRAME_RMA_RESP) ||
        f.data != data + land->head || f.len != land->len)
        return false;
    if (land->region)
        return chan_land_put_fits(c, &f, land);
    if (f.resp.status != SX_OK)
        return false;
    /* ... and where the landing was offered: the GET's next bytes. */
    const sx_op_t *op = chan_rma_find(c, f.resp.op_id);
    return op != NULL && op->kind == SX_OP_GET && op->status == SX_OK && f.resp.offset == op->got &&
           land->dst == op->dst + op->got && land->len <= op->len - op->got;
}

/* Which channel's GET answers the shard's next reads land (chan.h,
 * Landing): the one whose answer arrives. */
static void chan_land_follow(sx_chan_t *c, const sx_op_t *op)
{
    if (op->kind == SX_OP_GET)
        c->shard->land_chan = c;
}

void sx_chan_land_sent_locked(sx_chan_t *c, const sx_op_t *op)
{
    if (c->shard->land_chan == NULL)
        chan_land_follow(c, op);
}

/* Finds our PUT or GET that @p op_id answers, and the one before it in
 * rmaq (*prev_p), or NULL. */
static sx_op_t *chan_rma_answered(const sx_chan_t *c, uint32_t op_id, sx_op_t **prev_p)
{
    sx_op_t *prev = NULL, *op = c->rmaq;

    while (op != NULL && op->op_id != op_id) {
        prev = op;
        op = op->next;
    }
    *prev_p = prev;
    return op;
}

/*
 * Before a PUT completes, nothing may point into its memory any more
 * (chan_zero_copy, chan_tx.c). The target answers after it took every
 * chunk in order, so the packet with the answer acknowledges them all;
 * but that ACK may be held (sx_chan_ack_hold_locked) while the frames are
 * handed up, and a chunk RACK marked lost before it (a reordering path)
 * sits in c->rtx, which the flush at the end of the pass would resend from
 * memory the completion handed back. So the held ACK is taken first. A
 * peer whose answer comes before the ACK of the data it answers (faulty,
 * or forging) gets the packets still out copied out of that memory
 * (resp_early): they go on until acknowledged, from their own bytes.
 * Returns false when taking the ACK failed the channel, which completed
 * the PUT.
 */
static bool chan_put_let_go(sx_chan_t *c, sx_op_t *op)
{
    if (c->shard->ack_held_chan == c) {
        (void)sx_chan_ack_release_locked(c->shard);
        if (c->failed)
            return false;
    }
    if (!sx_u32_before(op->last_seq, c->snd_una)) {
        sx_stat_add(&c->shard->stats.resp_early, 1);
        uint32_t mask = sx_chan_window(c) - 1;
        for (uint32_t s = c->snd_una; s != op->last_seq + 1; s++) {
            sx_txpkt_t *pkt = c->win[s & mask];
            if (pkt != NULL && pkt->ext != NULL && pkt->pin == NULL)
                sx_chan_pkt_materialize_locked(c, pkt);
        }
    }
    return true;
}

/* The statuses a target answers with (sx_chan_recv_put_locked,
 * sx_chan_recv_get_locked, sx_mem_check_rcu); anything else from the wire
 * is the peer's fault, not a cause to pass on to the caller. */
static int chan_resp_status(sx_chan_t *c, int32_t st)
{
    if (st == SX_ERR_ACCESS || st == SX_ERR_OUT_OF_RANGE)
        return st;
    sx_stat_add(&c->shard->stats.resp_bad_status, 1);
    return SX_ERR_PROTO;
}

void sx_chan_recv_resp_locked(sx_chan_t *c, const sx_wire_frame_t *f)
{
    sx_op_t *prev, *op = chan_rma_answered(c, f->resp.op_id, &prev);

    if (op == NULL) {
        sx_chan_drop_frame_locked(c, SX_DROP_FRAME); /* answers nothing we asked */
        return;
    }
    if (f->resp.status != SX_OK) {
        if (op->status == SX_OK)
            op->status = chan_resp_status(c, f->resp.status);
    } else if (op->kind == SX_OP_GET && f->len > 0) {
        if (f->resp.offset != op->got || f->len > op->len - op->got) {
            sx_chan_drop_frame_locked(c, SX_DROP_FRAME);
            op->status = SX_ERR_IO;
        } else if (f->data == op->dst + op->got) {
            sx_stat_add(&c->shard->stats.rx_landed_bytes, f->len); /* landed in place */
            op->got += f->len;
        } else {
            sx_copy_bulk(op->dst + op->got, f->data, f->len);
            sx_stat_add(&c->shard->stats.copy_rx_bytes, f->len);
            op->got += f->len;
        }
    }
    chan_land_follow(c, op);
    if (!(f->flags & SX_FRAMEF_LAST))
        return;
    if (op->kind == SX_OP_PUT) {
        if (!chan_put_let_go(c, op))
            return;
        op = chan_rma_answered(c, f->resp.op_id, &prev); /* taking the ACK ran callbacks */
        if (op == NULL)
            return;
    }
    if (prev != NULL)
        prev->next = op->next;
    else
        c->rmaq = op->next;
    if (c->rmaq_tail == op)
        c->rmaq_tail = prev;
    c->rma_outstanding--;
    sx_chan_rma_admit_locked(c);
    int status = op->status;
    if (status == SX_OK && op->kind == SX_OP_GET && op->got != op->len)
        status = SX_ERR_IO;
    if (status == SX_OK)
        sx_stat_add(&c->shard->stats.ops_completed, 1);
    sx_op_complete_locked(c->shard, op, status);
}
