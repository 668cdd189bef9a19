/* Channels: sequencing, acknowledgement, retransmission, delivery; see chan.h. */
#include "shard/chan.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/time.h"
#include "shard/handlers.h"
#include "shard/mem.h"
#include "common/crc32c.h"

/* 32-bit sequence numbers compare by serial-number arithmetic (RFC 1982):
 * a is before b when b - a, read as signed, is positive. */
static inline bool seq_before(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

static inline uint32_t chan_window(const sx_chan_t *c)
{
    return c->shard->env->conf.window;
}

static inline sx_tl_iface_t *chan_iface(const sx_chan_t *c)
{
    return c->shard->ifaces[c->tl];
}

static void chan_ack_timer(sx_timer_t *timer, void *arg);
static void chan_on_timeout(sx_shard_t *shard, sx_shard_guest_t *guest);

/* ---------------------------------------------------------------- lists */

static void chan_mark_ready(sx_chan_t *c)
{
    sx_shard_t *s = c->shard;

    if (c->on_ready)
        return;
    c->on_ready = true;
    c->ready_next = NULL;
    if (s->ready_tail != NULL)
        s->ready_tail->ready_next = c;
    else
        s->ready_head = c;
    s->ready_tail = c;
}

void sx_chan_kick_locked(sx_chan_t *c)
{
    chan_mark_ready(c);
}

static void op_append(sx_op_t **head, sx_op_t **tail, sx_op_t *op)
{
    op->next = NULL;
    if (*tail != NULL)
        (*tail)->next = op;
    else
        *head = op;
    *tail = op;
}

void sx_op_complete(sx_op_t *op, int status)
{
    if (op->cb != NULL)
        op->cb(op->ctx, status);
    free(op);
}

/* Queues an internal op (a response) and marks the channel ready. */
static void chan_queue_internal(sx_chan_t *c, sx_op_t *op)
{
    c->resp_queued++;
    op->queued_ns = sx_time_coarse_ns();
    op_append(&c->sendq, &c->sendq_tail, op);
    chan_mark_ready(c);
}

/* ---------------------------------------------------------------- lifetime */

sx_chan_t *sx_chan_get_locked(sx_shard_t *shard, struct sx_peer *peer, unsigned lane)
{
    size_t idx = (size_t)shard->index * peer->nshards + lane;
    sx_chan_t *c = peer->chans[idx];

    if (c != NULL)
        return c;
    const sx_chan_conf_t *p = &shard->env->conf;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->win = calloc(p->window, sizeof(*c->win));
    if (c->win == NULL) {
        free(c);
        return NULL;
    }
    c->peer = peer;
    c->shard = shard;
    c->lane = lane;
    c->tl = peer->is_self ? SX_SHARD_TL_SELF : SX_SHARD_TL_NET;
    sx_tl_iface_t *iface = shard->ifaces[c->tl];
    int rc = iface->ops->addr_insert(iface, peer->addr[lane].bytes, peer->addr[lane].len, &c->dest);
    if (rc != SX_OK) {
        sx_error("chan", "peer %llu shard %u: unusable address (%s)", (unsigned long long)peer->id,
                 lane, sx_strerror(rc));
        free(c->win);
        free(c);
        return NULL;
    }
    /* Both ends start from the configured number: the implicit connection
     * relies on it; the handshake sends ours and learns the peer's. */
    c->snd_isn = shard->seq_start;
    c->snd_una = c->snd_nxt = c->last_ack = shard->seq_start;
    c->rcv_nxt = shard->seq_start;
    c->snd_window = p->window;
    c->dgram_max = iface->caps.mtu;
    c->rto_ns = p->rto_init_ns;
    sx_timer_init(&c->ack_timer, chan_ack_timer, c);
    /* sx_peer_add chose the peer's method before publishing it. */
    c->conn_method = peer->conn_method;
    c->conn_method->ops->ep_init_locked(c->conn_method, c);
    peer->chans[idx] = c;
    return c;
}

/*
 * Data packets are malloc'd per packet. A burst of large ones (a 1 MiB
 * GET answer is 17 packets of 64 KiB) freed together on its ACK left
 * malloc a free heap top larger than its trim threshold, so glibc gave
 * the pages back to the kernel and the next burst faulted them in again,
 * zero-filled: perf put 86 % of an MPI 1 MiB ping-pong's page faults in
 * chan_build_packet's copy, and the transfer took 1.1-1.6 ms (0.35 ms
 * with the pool). So packets from SX_TXPKT_POOL_MIN bytes up are made as
 * large as the channel's datagram and kept for the next one, up to one
 * channel's SX_MAX_INFLIGHT bytes per shard: what a single channel may
 * have in flight anyway. Token holder only, like everything in a shard.
 */
#define SX_TXPKT_POOL_MIN (16u * 1024u)

/* Under ASan a pooled packet's bytes stay poisoned until it is reused, so
 * a stale pointer into one is still reported as it was when it was freed. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SX_POOL_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define SX_POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SX_POOL_POISON(p, n)   ((void)(p), (void)(n))
#define SX_POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static sx_txpkt_t *chan_pkt_alloc(sx_chan_t *c, size_t need)
{
    sx_shard_t *s = c->shard;
    size_t cap = need;
    sx_txpkt_t *pkt = NULL;

    if (need >= SX_TXPKT_POOL_MIN) {
        if (c->dgram_max > cap)
            cap = c->dgram_max;
        if (s->pkt_pool != NULL && s->pkt_pool->cap >= need) {
            pkt = s->pkt_pool;
            s->pkt_pool = pkt->rtx_next;
            s->pkt_pool_bytes -= pkt->cap;
            cap = pkt->cap;
            SX_POOL_UNPOISON(pkt->data, cap);
        }
    }
    if (pkt == NULL && (pkt = malloc(sizeof(*pkt) + cap)) == NULL)
        return NULL;
    memset(pkt, 0, sizeof(*pkt));
    pkt->cap = (uint32_t)cap;
    return pkt;
}

static void chan_pkt_free(sx_chan_t *c, sx_txpkt_t *pkt)
{
    sx_shard_t *s = c->shard;

    if (pkt->cap >= SX_TXPKT_POOL_MIN &&
        s->pkt_pool_bytes + pkt->cap <= s->env->conf.max_inflight) {
        pkt->rtx_next = s->pkt_pool;
        s->pkt_pool = pkt;
        s->pkt_pool_bytes += pkt->cap;
        SX_POOL_POISON(pkt->data, pkt->cap);
        return;
    }
    free(pkt);
}

static void chan_free_window(sx_chan_t *c)
{
    for (uint32_t s = c->snd_una; seq_before(s, c->snd_nxt); s++) {
        sx_txpkt_t *pkt = c->win[s & (chan_window(c) - 1)];
        if (pkt == NULL)
            continue;
        if (pkt->key != 0) {
            void *occupant;
            (void)sx_hotel_checkout(c->shard->hotel, pkt->key, &occupant);
        }
        c->win[s & (chan_window(c) - 1)] = NULL;
        chan_pkt_free(c, pkt);
    }
    c->rtx = c->rtx_tail = NULL;
    c->snd_una = c->snd_nxt;
    c->inflight_bytes = 0;
}

static void chan_fail_ops(sx_chan_t *c, int status)
{
    /* Detach the lists first: a completion may queue new work. */
    sx_op_t *lists[3] = {c->ackq, c->rmaq, c->sendq};
    c->ackq = c->ackq_tail = NULL;
    c->rmaq = c->rmaq_tail = NULL;
    c->sendq = c->sendq_tail = NULL;
    for (int i = 0; i < 3; i++) {
        for (sx_op_t *op = lists[i], *next; op != NULL; op = next) {
            next = op->next;
            sx_op_complete(op, status);
        }
    }
}

static void chan_free_rx(sx_chan_t *c)
{
    if (c->ooo != NULL) {
        for (uint32_t i = 0; i < chan_window(c); i++)
            free(c->ooo[i].buf);
        free(c->ooo);
        free(c->ooo_bits);
        c->ooo = NULL;
        c->ooo_bits = NULL;
    }
    c->ooo_count = 0;
    c->ooo_bytes = 0;
    c->rcv_sack = 0;
    free(c->asm_buf);
    c->asm_buf = NULL;
}

void sx_chan_fail_locked(sx_chan_t *c, int status)
{
    sx_chan_fail_why_locked(c, status, NULL);
}

void sx_chan_fail_why_locked(sx_chan_t *c, int status, const char *why)
{
    if (c->failed != 0)
        return;
    c->failed = status;
    sx_wheel_cancel(c->shard->wheel, &c->ack_timer);
    if (c->conn_method->ops->ep_finalize_locked != NULL)
        c->conn_method->ops->ep_finalize_locked(c->conn_method, c);
    chan_free_window(c);
    chan_free_rx(c);
    sx_stat_add(&c->shard->stats.chan_failures, 1);

    int expected = 0;
    struct sx_peer *peer = c->peer;
    atomic_compare_exchange_strong(&peer->failed, &expected, status);
    chan_fail_ops(c, status);
    bool peer_fault = status == SX_ERR_PEER_UNREACHABLE || status == SX_ERR_PEER_RESTARTED ||
                      status == SX_ERR_PATH_MTU;
    if (peer_fault && !atomic_exchange(&peer->error_reported, true)) {
        if (why != NULL)
            sx_warn("chan", "%s (%s)", why, sx_status_name(status));
        else
            sx_warn("chan", "peer %llu unreachable: no acknowledgement for %llu ms",
                    (unsigned long long)peer->id,
                    (unsigned long long)(c->shard->env->conf.peer_timeout_ns / 1000000));
        const sx_err_handler_t *h = sx_handlers_error(c->shard->env->handlers);
        if (h != NULL)
            h->cb(h->arg, peer->id, status);
    }
}

void sx_chan_destroy_locked(sx_chan_t *c, int status)
{
    sx_chan_fail_locked(c, status);
    c->peer->chans[(size_t)c->shard->index * c->peer->nshards + c->lane] = NULL;
    sx_shard_unlink_ready_locked(c->shard, c);
    chan_iface(c)->ops->addr_remove(chan_iface(c), c->dest);
    free(c->win);
    free(c);
}

/* ---------------------------------------------------------------- sending */

void sx_chan_push_locked(sx_chan_t *c, sx_op_t *op)
{
    int failed = c->failed ? c->failed : atomic_load(&c->peer->failed);
    if (failed != 0) {
        if (!c->failed)
            sx_chan_fail_locked(c, failed);
        sx_op_complete(op, failed);
        return;
    }
    if (op->kind == SX_OP_PUT || op->kind == SX_OP_GET) {
        if (c->rma_outstanding >= SX_RMA_OUTSTANDING_MAX) {
            /* The target would refuse more: the caller retries later. */
            sx_op_complete(op, SX_ERR_AGAIN);
            return;
        }
        op->op_id = c->next_op_id++;
        c->rma_outstanding++;
    }
    op->queued_ns = sx_time_coarse_ns();
    op_append(&c->sendq, &c->sendq_tail, op);
    chan_mark_ready(c);
}

/* Copies @p n bytes of @p op's message from its cursor to @p dst. */
static void op_copy(sx_op_t *op, uint8_t *dst, size_t n)
{
    while (n > 0) {
        const struct iovec *v = &op->iov[op->cur_iov];
        size_t take = v->iov_len - op->cur_off;
        if (take > n)
            take = n;
        memcpy(dst, (const uint8_t *)v->iov_base + op->cur_off, take);
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

typedef struct frame_plan {
    sx_op_t *op;
    uint8_t kind;
    uint32_t len;
    bool last;
} frame_plan_t;

/* Decides what the next packet carries, without copying anything. */
/* The frame kind an RMA-style op travels in, and its extension size. */
static uint8_t op_frame_kind(const sx_op_t *op)
{
    switch (op->kind) {
    case SX_OP_PUT:
        return SX_FRAME_PUT;
    case SX_OP_GET:
        return SX_FRAME_GET_REQ;
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
        if ((n > 0 && room < SX_MIN_CHUNK) || room <= SX_WIRE_FRAME_LEN + 8)
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
    if (n > 0 && left > cap && cap < SX_MIN_CHUNK)
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

static void chan_write_hdr(sx_chan_t *c, uint8_t *buf, uint8_t type, uint32_t seq,
                           uint16_t payload_len)
{
    sx_wire_hdr_t h = {
        .type = type,
        .flags = SX_PKTF_ACK,
        .src_shard = (uint16_t)c->shard->index,
        .dst_shard = (uint16_t)c->lane,
        .src_epoch = c->shard->env->epoch,
        .dst_epoch = c->peer->epoch,
        .seq = seq,
        .ack = c->rcv_nxt,
        .sack = c->rcv_sack,
        .payload_len = payload_len,
    };
    uint32_t crc;
    const uint32_t *crcp = NULL;
    if (payload_len > 0 && c->shard->env->conf.checksum) {
        crc = sx_crc32c(0, buf + SX_WIRE_HDR_LEN, payload_len);
        crcp = &crc;
    }
    sx_wire_write_hdr(buf, &h, crcp);
    /* Every packet carries the current acknowledgement. */
    c->ack_pending = 0;
    c->ack_now = false;
    sx_wheel_cancel(c->shard->wheel, &c->ack_timer);
}

/*
 * Writes a GET answer's frame, reading the region now: the request left
 * only key and range behind, so queued answers cost no memory, and a
 * region withdrawn meanwhile turns into an error status instead of a read
 * of memory the owner may have freed.
 */
static uint8_t *chan_write_region_frame(sx_chan_t *c, sx_op_t *op, sx_wire_frame_t *f, uint8_t *p,
                                        uint32_t len)
{
    sx_mem_table_t *mem = c->shard->env->mem;
    const uint8_t *src = NULL;

    sx_rcu_read_lock();
    if (op->status == SX_OK && len > 0) {
        sx_wire_rma_t r = {
            .addr = op->raddr + op->off, .key = op->rkey, .op_addr = op->raddr, .op_len = op->len};
        int st;
        src = sx_mem_check_rcu(mem, &r, SX_MEM_REMOTE_READ, len, &st);
        if (src == NULL)
            op->status = st;
    }
    f->resp.status = op->status;
    p += sx_wire_write_frame(p, f);
    if (src != NULL)
        memcpy(p, src, len);
    else
        memset(p, 0, len);
    sx_rcu_read_unlock(&mem->rcu);
    return p + len;
}

/* An op whose last frame is in a packet now waits for what completes it. */
static void chan_op_sent(sx_chan_t *c, sx_op_t *op)
{
    switch (op->kind) {
    case SX_OP_AM:
        op_append(&c->ackq, &c->ackq_tail, op);
        break;
    case SX_OP_PUT:
    case SX_OP_GET:
        op_append(&c->rmaq, &c->rmaq_tail, op);
        break;
    default:
        c->resp_queued--;
        free(op); /* a response: the packet holds a copy, nobody waits */
        break;
    }
}

/* Builds the next data packet from the send queue, or returns NULL. */
static sx_txpkt_t *chan_build_packet(sx_chan_t *c)
{
    frame_plan_t plan[SX_PKT_MAX_FRAMES];
    size_t mtu = c->dgram_max;
    size_t bytes;
    unsigned n = chan_plan_packet(c, mtu - SX_WIRE_HDR_LEN, plan, &bytes);

    if (n == 0)
        return NULL;
    sx_txpkt_t *pkt = chan_pkt_alloc(c, SX_WIRE_HDR_LEN + bytes);
    if (pkt == NULL)
        return NULL;
    uint8_t *p = pkt->data + SX_WIRE_HDR_LEN;
    uint32_t seq = c->snd_nxt;
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
        }
        if (op->from_region) {
            p = chan_write_region_frame(c, op, &f, p, plan[i].len);
        } else {
            p += sx_wire_write_frame(p, &f);
            op_copy(op, p, plan[i].len);
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
    pkt->guest.on_evict = chan_on_timeout;
    pkt->chan = c;
    pkt->seq = seq;
    pkt->len = (uint32_t)(SX_WIRE_HDR_LEN + bytes);
    chan_write_hdr(c, pkt->data, SX_PKT_DATA, seq, (uint16_t)bytes);
    sx_stat_add(&c->shard->stats.frames_sent, n);
    return pkt;
}

/* Arms (or re-arms) the retransmission deadline of @p pkt. */
static int chan_arm(sx_chan_t *c, sx_txpkt_t *pkt, uint64_t now)
{
    uint64_t deadline = now + c->rto_ns;

    pkt->deadline_ns = deadline;
    if (pkt->key != 0)
        return sx_hotel_rearm(c->shard->hotel, pkt->key, deadline);
    return sx_hotel_checkin(c->shard->hotel, &pkt->guest, deadline, &pkt->key);
}

/* Stages a datagram in the shard's batch; @p pkt is NULL for an ACK. */
static void chan_stage(sx_chan_t *c, const uint8_t *data, size_t len, sx_txpkt_t *pkt)
{
    sx_shard_txq_t *q = &c->shard->txq;

    if (q->n == SX_SHARD_TX_BATCH || (q->n > 0 && q->tl != c->tl))
        sx_chan_post_batch_locked(c->shard);
    unsigned i = q->n++;
    q->tl = c->tl;
    q->tx[i].dest = c->dest;
    q->tx[i].iovcnt = 1;
    q->tx[i].iov[0].iov_base = (void *)data;
    q->tx[i].iov[0].iov_len = len;
    q->tx[i].ctx = pkt;
    q->chan[i] = c;
    q->pkt[i] = pkt;
}

static void chan_send_ack(sx_chan_t *c)
{
    sx_shard_txq_t *q = &c->shard->txq;

    if (q->n == SX_SHARD_TX_BATCH || (q->n > 0 && q->tl != c->tl))
        sx_chan_post_batch_locked(c->shard);
    /* The ACK is built in the batch's own buffer, which lives until the
     * batch is posted. */
    uint8_t *buf = q->ack_buf[q->n];
    chan_write_hdr(c, buf, SX_PKT_ACK, 0, 0);
    chan_stage(c, buf, SX_WIRE_HDR_LEN, NULL);
    sx_stat_add(&c->shard->stats.acks_sent, 1);
}

static void chan_queue_rtx(sx_chan_t *c, sx_txpkt_t *pkt)
{
    if (pkt->queued)
        return;
    pkt->queued = true;
    pkt->rtx_next = NULL;
    if (c->rtx_tail != NULL)
        c->rtx_tail->rtx_next = pkt;
    else
        c->rtx = pkt;
    c->rtx_tail = pkt;
    chan_mark_ready(c);
}

unsigned sx_chan_flush_locked(sx_chan_t *c)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;
    unsigned sent = 0;
    uint64_t now = sx_time_ns();

    if (c->failed)
        return 0;
    if (c->conn != SX_CONN_UP) {
        /* Work waits until the connection is up; the first of it starts
         * the component's connect (connections are made lazily). What we
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
        if (chan_arm(c, pkt, now) != SX_OK) {
            sx_stat_add(&c->shard->stats.hotel_full, 1);
            break;
        }
        sx_wire_update_ack(pkt->data, c->rcv_nxt, c->rcv_sack, SX_PKTF_ACK);
        c->ack_pending = 0;
        c->ack_now = false;
        chan_stage(c, pkt->data, pkt->len, pkt);
        c->rtx = pkt->rtx_next;
        if (c->rtx == NULL)
            c->rtx_tail = NULL;
        pkt->queued = false;
        pkt->transmissions++;
        pkt->last_sent_ns = now;
        sent++;
    }
    /* New packets while the window, the byte budget and the hotel allow. */
    while (c->rtx == NULL && c->sendq != NULL) {
        if ((uint32_t)(c->snd_nxt - c->snd_una) >= c->snd_window ||
            c->inflight_bytes >= p->max_inflight) {
            sx_stat_add(&c->shard->stats.window_stalls, 1);
            break;
        }
        sx_txpkt_t *pkt = chan_build_packet(c);
        if (pkt == NULL)
            break;
        if (c->snd_una == c->snd_nxt)
            c->last_progress_ns = now; /* the peer owes us nothing until now */
        c->win[pkt->seq & (chan_window(c) - 1)] = pkt;
        c->snd_nxt++;
        c->inflight_bytes += pkt->len;
        pkt->first_sent_ns = now;
        pkt->last_sent_ns = now;
        pkt->transmissions = 1;
        if (chan_arm(c, pkt, now) != SX_OK) {
            /* No room to time it: send it later as a retransmission. */
            sx_stat_add(&c->shard->stats.hotel_full, 1);
            chan_queue_rtx(c, pkt);
            break;
        }
        chan_stage(c, pkt->data, pkt->len, pkt);
        sx_stat_add(&c->shard->stats.data_sent, 1);
        sent++;
    }
    if (c->ack_now || c->ack_pending >= p->ack_every)
        chan_send_ack(c);
    return sent;
}

int sx_chan_send_raw_locked(sx_chan_t *c, const uint8_t *data, size_t len)
{
    sx_tl_iface_t *iface = chan_iface(c);
    sx_tl_tx_t tx = {.dest = c->dest, .iovcnt = 1};
    unsigned posted = 0;

    /* After what is staged, so the order on the wire is the order of the
     * calls. Only transports that are done with the buffer when post_send
     * returns (caps.sync_send: udp, self, fault) may carry it: the caller's
     * buffer is gone after this call. */
    if (!iface->caps.sync_send)
        return SX_ERR_UNSUPPORTED;
    sx_chan_post_batch_locked(c->shard);
    tx.iov[0].iov_base = (void *)data;
    tx.iov[0].iov_len = len;
    return iface->ops->post_send(iface, &tx, 1, &posted);
}

int sx_chan_set_dest_locked(sx_chan_t *c, const void *addr, size_t len)
{
    sx_tl_iface_t *iface = chan_iface(c);
    sx_tl_dest_t dest;

    int rc = iface->ops->addr_insert(iface, addr, len, &dest);
    if (rc != SX_OK)
        return rc;
    /* The batch holds destination handles, not channels: post it before
     * the old handle goes. A datagram it refuses is staged again later,
     * with the new one. */
    sx_chan_post_batch_locked(c->shard);
    iface->ops->addr_remove(iface, c->dest);
    c->dest = dest;
    return SX_OK;
}

void sx_chan_post_batch_locked(sx_shard_t *shard)
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
    int rc = n > 0 ? iface->ops->post_send(iface, q->tx, n, &posted) : SX_OK;
    if (rc == SX_OK && posted < q->n) {
        rc = SX_ERR_AGAIN;
        sx_stat_add(&shard->stats.tx_no_credits, q->n - posted);
    }
    if (!iface->caps.sync_send)
        shard->tx_inflight[q->tl] += posted;
    for (unsigned i = posted; i < q->n; i++) {
        sx_chan_t *c = q->chan[i];
        sx_txpkt_t *pkt = q->pkt[i];
        if (rc != SX_ERR_AGAIN && i == posted)
            sx_debug("chan", "shard %u: send to peer %llu failed: %s", shard->index,
                     (unsigned long long)c->peer->id, sx_strerror(rc));
        /* A full interface: send again at the next flush. Anything else
         * (a refused destination, say) waits for its retransmission timer,
         * so a persistent error cannot spin the progress loop. */
        if (pkt == NULL) {
            c->ack_now = true;
            chan_mark_ready(c);
        } else if (rc == SX_ERR_AGAIN) {
            sx_stat_add(&shard->stats.tx_again, 1);
            chan_queue_rtx(c, pkt);
        }
    }
    q->n = 0;
}

/* ---------------------------------------------------------------- timers */

static void chan_ack_timer(sx_timer_t *timer, void *arg)
{
    sx_chan_t *c = arg;
    (void)timer;

    if (c->ack_pending > 0) {
        c->ack_now = true;
        chan_mark_ready(c);
    }
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

/* RFC 6298 section 2: SRTT and RTTVAR from a sample R. */
static void chan_rtt_sample(sx_chan_t *c, uint64_t r)
{
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

/* A retransmission deadline passed: the packet is presumed lost. */
static void chan_on_timeout(sx_shard_t *shard, sx_shard_guest_t *guest)
{
    sx_txpkt_t *pkt = (sx_txpkt_t *)guest;
    sx_chan_t *c = pkt->chan;
    const sx_chan_conf_t *p = &shard->env->conf;
    uint64_t now = sx_wheel_now(shard->wheel);

    pkt->key = 0; /* the hotel already vacated the room */
    if (c->failed)
        return;
    if (sx_u64_before(c->last_progress_ns, now) && now - c->last_progress_ns > p->peer_timeout_ns) {
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
        if (chan_arm(c, pkt, now) != SX_OK)
            chan_queue_rtx(c, pkt); /* no room: let the flush retry it */
        return;
    }
    /* Exponential back-off (RFC 6298 section 5.5). */
    c->rto_ns = c->rto_ns * 2 > p->rto_max_ns ? p->rto_max_ns : c->rto_ns * 2;
    c->backoff++;
    c->in_rto_recovery = true;
    c->rto_recover = c->snd_nxt;
    c->rto_at_ns = now;
    c->rto_burst = 1;
    sx_stat_add(&shard->stats.rtx_timeout, 1);
    sx_debug("chan", "peer %llu: seq %u timed out after %llu us (rto %llu us, una %u nxt %u)",
             (unsigned long long)c->peer->id, pkt->seq,
             (unsigned long long)((now - pkt->first_sent_ns) / 1000),
             (unsigned long long)(c->rto_ns / 1000), c->snd_una, c->snd_nxt);
    chan_queue_rtx(c, pkt);
}

/* ---------------------------------------------------------------- receiving */

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

static void chan_complete_acked(sx_chan_t *c)
{
    while (c->ackq != NULL && seq_before(c->ackq->last_seq, c->snd_una)) {
        sx_op_t *op = c->ackq;
        c->ackq = op->next;
        if (c->ackq == NULL)
            c->ackq_tail = NULL;
        sx_op_complete(op, SX_OK);
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
static void chan_rto_recovery_step(sx_chan_t *c)
{
    uint32_t mask = chan_window(c) - 1;
    unsigned sent = 0;

    if (!seq_before(c->snd_una, c->rto_recover)) {
        c->in_rto_recovery = false;
        return;
    }
    for (uint32_t s = c->snd_una; seq_before(s, c->rto_recover) && sent < c->rto_burst; s++) {
        sx_txpkt_t *pkt = c->win[s & mask];
        if (pkt == NULL || pkt->sacked || pkt->queued || pkt->last_sent_ns > c->rto_at_ns)
            continue;
        sx_stat_add(&c->shard->stats.rtx_timeout, 1);
        chan_queue_rtx(c, pkt);
        sent++;
    }
    if (c->rto_burst < 64)
        c->rto_burst *= 2;
}

static void chan_process_ack(sx_chan_t *c, const sx_wire_hdr_t *h, bool pure_ack)
{
    uint32_t mask = chan_window(c) - 1;
    uint64_t now = sx_time_ns();
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

    if (seq_before(c->snd_nxt, h->ack)) {
        sx_stat_add(&c->shard->stats.drops[SX_DROP_OUT_OF_WINDOW], 1);
        return; /* acknowledges what was never sent: ignore it */
    }
    if (seq_before(c->snd_una, h->ack)) {
        uint64_t sample = 0;
        bool original_acked = false;
        while (seq_before(c->snd_una, h->ack)) {
            sx_txpkt_t *pkt = c->win[c->snd_una & mask];
            c->win[c->snd_una & mask] = NULL;
            if (pkt != NULL) {
                if (pkt->last_sent_ns > c->rack_ns)
                    c->rack_ns = pkt->last_sent_ns;
                if (pkt->transmissions == 1 && pkt->first_sent_ns <= c->rto_at_ns)
                    original_acked = true;
                /* Karn's algorithm: only packets sent once give samples.
                 * The newest packet an ACK covers is the one whose arrival
                 * sent it; older ones may have waited behind a hole, and
                 * their wait would inflate the timeout until repair itself
                 * slows down. So the last one here wins, unless a SACK
                 * already reported it (its sample was taken then) or an
                 * earlier ACK could not have (see `reportable`). */
                if (pkt->transmissions == 1 && !pkt->sacked && !seq_before(reportable, c->snd_una))
                    sample = now - pkt->first_sent_ns;
                if (pkt->key != 0) {
                    void *occupant;
                    (void)sx_hotel_checkout(c->shard->hotel, pkt->key, &occupant);
                }
                if (pkt->queued)
                    chan_unqueue_rtx(c, pkt);
                c->inflight_bytes -= pkt->len;
                chan_pkt_free(c, pkt);
            }
            c->snd_una++;
        }
        if (sample != 0) {
            chan_rtt_sample(c, sample);
        } else if (c->backoff > 0 && c->srtt_ns != 0) {
            /* New data acknowledged: drop the back-off even without a
             * sample (every acknowledged packet may have been resent, so
             * Karn's rule gives none), as Linux does on a forward ACK. */
            chan_rto_compute(c);
        }
        c->backoff = 0;
        c->dupacks = 0;
        c->last_ack = h->ack;
        c->last_progress_ns = now;
        if (c->in_recovery && !seq_before(c->snd_una, c->recover))
            c->in_recovery = false;
        /* F-RTO's test (RFC 5682): an original transmission from before
         * the timeout was acknowledged, so the timeout was spurious (the
         * peer was slow, not the network lossy); stop resending the
         * window. Real holes are still found by SACK and RACK. */
        if (c->in_rto_recovery && original_acked) {
            c->in_rto_recovery = false;
            sx_stat_add(&c->shard->stats.rto_spurious, 1);
        }
        if (c->in_rto_recovery)
            chan_rto_recovery_step(c);
        /* RFC 6298 (5.3): new data acknowledged restarts the timer, now
         * on the oldest packet still out; its own deadline may date from a
         * backed-off round. */
        sx_txpkt_t *oldest = c->win[c->snd_una & mask];
        if (oldest != NULL && oldest->key != 0 && !oldest->queued)
            (void)chan_arm(c, oldest, now);
        chan_complete_acked(c);
        if (c->sendq != NULL)
            chan_mark_ready(c);
    } else if (pure_ack && h->ack == c->snd_una && c->snd_una != c->snd_nxt) {
        /* A duplicate ACK: something after snd_una arrived, snd_una did not
         * (RFC 5681 section 3.2). Three of them start fast retransmit. */
        if (++c->dupacks == 3 && !c->in_recovery) {
            sx_txpkt_t *pkt = c->win[c->snd_una & mask];
            if (pkt != NULL) {
                c->in_recovery = true;
                c->recover = c->snd_nxt;
                sx_stat_add(&c->shard->stats.rtx_dupack, 1);
                chan_queue_rtx(c, pkt);
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
        uint64_t sack_sample = 0;
        for (unsigned i = 0; i < SX_WIRE_SACK_BITS; i++) {
            if (!(h->sack & (1ull << i)))
                continue;
            uint32_t s = h->ack + 1 + i;
            if (!seq_before(s, c->snd_nxt) || seq_before(s, c->snd_una))
                continue;
            sx_txpkt_t *pkt = c->win[s & mask];
            if (pkt != NULL) {
                if (!pkt->sacked && pkt->transmissions == 1 && !seq_before(reportable, s))
                    sack_sample = now - pkt->first_sent_ns; /* newest wins */
                pkt->sacked = true;
                if (pkt->last_sent_ns > c->rack_ns)
                    c->rack_ns = pkt->last_sent_ns;
            }
            highest = s;
        }
        if (sack_sample != 0)
            chan_rtt_sample(c, sack_sample);
        uint64_t reo = c->srtt_ns / 4;
        for (uint32_t s = c->snd_una; seq_before(s, highest); s++) {
            sx_txpkt_t *pkt = c->win[s & mask];
            if (pkt != NULL && !pkt->sacked && !pkt->queued &&
                pkt->last_sent_ns + reo < c->rack_ns) {
                sx_stat_add(&c->shard->stats.rtx_sack, 1);
                chan_queue_rtx(c, pkt);
            }
        }
    }
}

static void chan_deliver_am(sx_chan_t *c, uint8_t tag, const void *data, size_t len)
{
    const sx_am_handler_t *h = sx_handlers_am(c->shard->env->handlers, tag);

    if (h == NULL) {
        sx_stat_add(&c->shard->stats.am_no_handler, 1);
        sx_warn_ratelimited("chan",
                            "message with tag %u from peer %llu dropped: no handler registered",
                            tag, (unsigned long long)c->peer->id);
        return;
    }
    sx_stat_add(&c->shard->stats.am_delivered, 1);
    h->cb(h->arg, c->peer->id, tag, data, len);
}

static void chan_drop_frame(sx_chan_t *c, sx_drop_reason_t why)
{
    sx_stat_add(&c->shard->stats.drops[why], 1);
    sx_debug("chan", "peer %llu: frame dropped: %s", (unsigned long long)c->peer->id,
             sx_drop_reason_text(why));
}

static void chan_abort_assembly(sx_chan_t *c)
{
    free(c->asm_buf);
    c->asm_buf = NULL;
    c->asm_total = c->asm_got = 0;
    c->asm_drop = false;
}

/* ---------------------------------------------------------------- RMA */

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

static void chan_recv_put(sx_chan_t *c, const sx_wire_frame_t *f)
{
    const sx_shard_env_t *env = c->shard->env;
    int status;

    if (f->rma.addr == f->rma.op_addr)
        c->put_status = SX_OK; /* the first chunk of a new PUT */
    sx_rcu_read_lock();
    uint8_t *dst = sx_mem_check_rcu(env->mem, &f->rma, SX_MEM_REMOTE_WRITE, f->len, &status);
    if (dst != NULL && c->put_status == SX_OK)
        memcpy(dst, f->data, f->len);
    sx_rcu_read_unlock(&env->mem->rcu);
    if (dst == NULL && c->put_status == SX_OK)
        c->put_status = status;
    if (!(f->flags & SX_FRAMEF_LAST))
        return;
    if (c->resp_queued >= SX_RMA_OUTSTANDING_MAX) {
        c->put_status = SX_OK;
        chan_drop_frame(c, SX_DROP_NO_BUFFER); /* more than a conforming peer asks */
        return;
    }
    sx_op_t *resp = chan_new_resp(c, f->rma.op_id, c->put_status, 0);
    c->put_status = SX_OK;
    if (resp == NULL) {
        chan_drop_frame(c, SX_DROP_NO_BUFFER);
        return;
    }
    chan_queue_internal(c, resp);
}

static void chan_recv_get(sx_chan_t *c, const sx_wire_frame_t *f)
{
    const sx_shard_env_t *env = c->shard->env;
    int status = SX_ERR_OUT_OF_RANGE;

    if (c->resp_queued >= SX_RMA_OUTSTANDING_MAX) {
        chan_drop_frame(c, SX_DROP_NO_BUFFER); /* more than a conforming peer asks */
        return;
    }
    if (f->rma.op_len <= env->conf.max_msg) {
        sx_rcu_read_lock();
        (void)sx_mem_check_rcu(env->mem, &f->rma, SX_MEM_REMOTE_READ, f->rma.op_len, &status);
        sx_rcu_read_unlock(&env->mem->rcu);
    }
    sx_op_t *resp = chan_new_resp(c, f->rma.op_id, status, 0);
    if (resp == NULL) {
        chan_drop_frame(c, SX_DROP_NO_BUFFER);
        return;
    }
    if (status == SX_OK) {
        resp->from_region = true;
        resp->iovcnt = 0;
        resp->rkey = f->rma.key;
        resp->raddr = f->rma.op_addr;
        resp->len = f->rma.op_len;
    }
    chan_queue_internal(c, resp);
}

static void chan_recv_resp(sx_chan_t *c, const sx_wire_frame_t *f)
{
    sx_op_t *prev = NULL, *op = c->rmaq;

    while (op != NULL && op->op_id != f->resp.op_id) {
        prev = op;
        op = op->next;
    }
    if (op == NULL) {
        chan_drop_frame(c, SX_DROP_FRAME); /* answers nothing we asked */
        return;
    }
    if (f->resp.status != SX_OK) {
        if (op->status == SX_OK)
            op->status = f->resp.status < 0 ? f->resp.status : SX_ERR_IO;
    } else if (op->kind == SX_OP_GET && f->len > 0) {
        if (f->resp.offset != op->got || f->len > op->len - op->got) {
            chan_drop_frame(c, SX_DROP_FRAME);
            op->status = SX_ERR_IO;
        } else {
            memcpy(op->dst + op->got, f->data, f->len);
            op->got += f->len;
        }
    }
    if (!(f->flags & SX_FRAMEF_LAST))
        return;
    if (prev != NULL)
        prev->next = op->next;
    else
        c->rmaq = op->next;
    if (c->rmaq_tail == op)
        c->rmaq_tail = prev;
    c->rma_outstanding--;
    int status = op->status;
    if (status == SX_OK && op->kind == SX_OP_GET && op->got != op->len)
        status = SX_ERR_IO;
    if (status == SX_OK)
        sx_stat_add(&c->shard->stats.ops_completed, 1);
    sx_op_complete(op, status);
}

/* One in-order packet's frames. Reliability already made this packet
 * exactly-once and in order, so chunks of a message arrive consecutively. */
/* Delivers a packet's frames in order; returns how many it held. */
static unsigned chan_deliver_packet(sx_chan_t *c, const uint8_t *payload, size_t len)
{
    unsigned frames = 0;
    size_t off = 0;
    sx_wire_frame_t f;
    int r;

    while ((r = sx_wire_next_frame(payload, len, &off, &f)) == 1) {
        frames++;
        bool assembling = c->asm_buf != NULL || c->asm_drop;
        switch (f.kind) {
        case SX_FRAME_AM:
            if (assembling) {
                chan_drop_frame(c, SX_DROP_FRAME);
                chan_abort_assembly(c);
            }
            chan_deliver_am(c, f.tag, f.data, f.len);
            break;
        case SX_FRAME_AM_FIRST:
            if (assembling) {
                chan_drop_frame(c, SX_DROP_FRAME);
                chan_abort_assembly(c);
            }
            c->asm_total = f.total;
            c->asm_got = f.len;
            c->asm_tag = f.tag;
            if (f.total > c->shard->env->conf.max_msg || f.len > f.total) {
                chan_drop_frame(c, f.len > f.total ? SX_DROP_FRAME : SX_DROP_TOO_LARGE);
                c->asm_drop = true;
            } else if ((c->asm_buf = malloc(f.total ? f.total : 1)) == NULL) {
                chan_drop_frame(c, SX_DROP_NO_BUFFER);
                c->asm_drop = true;
            } else {
                memcpy(c->asm_buf, f.data, f.len);
            }
            break;
        case SX_FRAME_AM_MORE:
            if (!assembling || f.len > c->asm_total - c->asm_got || f.tag != c->asm_tag) {
                chan_drop_frame(c, SX_DROP_FRAME);
                chan_abort_assembly(c);
                break;
            }
            if (c->asm_buf != NULL)
                memcpy(c->asm_buf + c->asm_got, f.data, f.len);
            c->asm_got += f.len;
            break;
        case SX_FRAME_PUT:
            chan_recv_put(c, &f);
            break;
        case SX_FRAME_GET_REQ:
            chan_recv_get(c, &f);
            break;
        case SX_FRAME_RMA_RESP:
            chan_recv_resp(c, &f);
            break;
        default:
            chan_drop_frame(c, SX_DROP_FRAME);
            break;
        }
        if ((f.kind == SX_FRAME_AM_FIRST || f.kind == SX_FRAME_AM_MORE) &&
            (f.flags & SX_FRAMEF_LAST) && (c->asm_buf != NULL || c->asm_drop)) {
            if (c->asm_buf != NULL && c->asm_got == c->asm_total)
                chan_deliver_am(c, c->asm_tag, c->asm_buf, c->asm_total);
            else if (c->asm_buf != NULL)
                chan_drop_frame(c, SX_DROP_FRAME);
            chan_abort_assembly(c);
        }
    }
    if (r < 0)
        chan_drop_frame(c, SX_DROP_FRAME);
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
static void chan_owe_ack(sx_chan_t *c, unsigned frames)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;

    c->ack_pending += frames > 0 ? frames : 1;
    if (c->ack_pending >= p->ack_every || p->ack_delay_ns == 0) {
        c->ack_now = true;
    } else if (!sx_timer_is_pending(&c->ack_timer)) {
        sx_wheel_add(c->shard->wheel, &c->ack_timer, sx_time_ns() + p->ack_delay_ns);
    }
}

static inline bool ooo_has(const sx_chan_t *c, uint32_t seq)
{
    uint32_t i = seq & (chan_window(c) - 1);
    return c->ooo_bits != NULL && (c->ooo_bits[i / 64] & (1ull << (i % 64))) != 0;
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
}

/* Keeps a packet that arrived ahead of a gap; the drop reason or COUNT. */
static sx_drop_reason_t chan_keep(sx_chan_t *c, uint32_t seq, const uint8_t *data, size_t len)
{
    uint32_t w = chan_window(c);

    if ((uint32_t)(seq - c->rcv_nxt) >= w)
        return SX_DROP_OUT_OF_WINDOW;
    if (ooo_has(c, seq))
        return SX_DROP_DUPLICATE;
    /* The sender keeps at most MAX_INFLIGHT bytes unacknowledged, so a
     * conforming sender never hits this; a hostile one cannot make us hold
     * more. */
    if (c->ooo_bytes + len > c->shard->env->conf.max_inflight)
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
    memcpy(c->ooo[i].buf, data, len);
    c->ooo[i].len = (uint32_t)len;
    c->ooo_bits[i / 64] |= 1ull << (i % 64);
    c->ooo_count++;
    c->ooo_bytes += len;
    return SX_DROP_COUNT;
}

/* Delivers kept packets that are now in order. */
static void chan_deliver_kept(sx_chan_t *c)
{
    while (c->ooo_count > 0 && ooo_has(c, c->rcv_nxt)) {
        uint32_t i = c->rcv_nxt & (chan_window(c) - 1);
        uint8_t *buf = c->ooo[i].buf;
        uint32_t len = c->ooo[i].len;
        c->ooo[i].buf = NULL;
        c->ooo_bits[i / 64] &= ~(1ull << (i % 64));
        c->ooo_count--;
        c->ooo_bytes -= len;
        c->rcv_nxt++;
        chan_deliver_packet(c, buf + SX_WIRE_HDR_LEN, len - SX_WIRE_HDR_LEN);
        free(buf);
        if (c->failed)
            return;
    }
}

void sx_chan_recv_locked(sx_chan_t *c, const sx_wire_hdr_t *h, const uint8_t *data, size_t len)
{
    if (c->failed) {
        sx_stat_add(&c->shard->stats.drops[SX_DROP_CHANNEL_FAILED], 1);
        return;
    }
    if (c->conn != SX_CONN_UP && !sx_conn_data_ok_locked(c)) {
        /* Before the peer's CONNECT we do not know where its sequence
         * numbers start. */
        sx_stat_add(&c->shard->stats.drops[SX_DROP_NOT_CONNECTED], 1);
        return;
    }
    if (h->flags & SX_PKTF_ACK)
        chan_process_ack(c, h, h->type == SX_PKT_ACK);
    if (c->failed || h->type != SX_PKT_DATA)
        goto out;

    if (h->seq == c->rcv_nxt) {
        c->rcv_nxt++;
        unsigned frames = chan_deliver_packet(c, data + SX_WIRE_HDR_LEN, h->payload_len);
        if (!c->failed)
            chan_deliver_kept(c);
        chan_owe_ack(c, frames);
        if (c->ooo_count != 0)
            c->ack_now = true; /* still a gap: keep the sender informed */
    } else if (seq_before(c->rcv_nxt, h->seq)) {
        sx_drop_reason_t why = chan_keep(c, h->seq, data, len);
        if (why == SX_DROP_COUNT)
            sx_stat_add(&c->shard->stats.rx_out_of_order, 1);
        else
            sx_stat_add(&c->shard->stats.drops[why], 1);
        c->ack_now = true; /* out of order: tell the sender at once */
    } else {
        /* Already delivered: our ACK was lost or is late. */
        sx_stat_add(&c->shard->stats.drops[SX_DROP_DUPLICATE], 1);
        c->ack_now = true;
    }
    chan_update_sack(c);
out:
    if (c->ack_now || c->rtx != NULL || c->sendq != NULL)
        chan_mark_ready(c);
}
