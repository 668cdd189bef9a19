/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sink: a network transport without a network, for measuring what the
 * engine itself costs (sx_bench mt's injection-only variant).
 *
 * post_send takes every datagram and throws it away, and for each data
 * packet queues the acknowledgement that a peer which received everything
 * in order would send (config->reflect, the shard layer's
 * sx_wire_reflect_ack: the sink itself does not read the wire format).
 * poll hands those ACKs up as received datagrams, so sends complete as
 * they would against an infinitely fast receiver: what remains is the
 * sender's engine path (delegation, channel, packet building, checksums,
 * the hotel, ACK processing, completions) and nothing of the kernel's.
 *
 * Only the newest ACK per destination is kept: an ACK is cumulative, so a
 * later one covers the earlier ones, as a delayed ACK would. An ACK that
 * would not advance (a retransmission of a packet already acknowledged) is
 * not sent, so the sink never causes duplicate-ACK fast retransmits.
 *
 * The sink never answers connection control messages: engines that use it
 * must connect with the implicit method (SX_CPC=implicit). It is chosen
 * only when named (SX_TRANSPORTS=sink); nobody reaches a process over it.
 *
 * Address (8 bytes): the magic "SXSINK" padded, for a clear refusal of
 * another transport's address; any sink address resolves.
 */
#include "transports/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/log.h"
#include "common/time.h"

#define SINK_ADDR_LEN   8
#define SINK_MTU        65000
#define SINK_TX_CREDITS 4096
#define SINK_MAX_DESTS  65536

extern const sx_tl_ops_t sx_tl_sink_ops;

static const uint8_t sink_addr_magic[SINK_ADDR_LEN] = {'S', 'X', 'S', 'I', 'N', 'K', 0, 1};

typedef struct sink_dest {
    bool live;
    bool pending; /* ack[] holds an ACK poll has not handed up yet */
    bool acked_any;
    uint32_t acked; /* newest sequence number acknowledged */
    uint8_t ack[SX_TL_SINK_ACK_LEN];
} sink_dest_t;

typedef struct sink_iface {
    sx_tl_iface_t base;
    bool (*reflect)(const uint8_t *pkt, size_t len, uint8_t *ack_out, uint32_t *seq_p);
    sink_dest_t *dests;
    uint32_t ndests, cap;
    uint32_t *pending; /* destinations with an ACK to hand up, in order */
    uint32_t npending;
    /* What the last poll handed up, valid until the next poll. */
    uint8_t (*out)[SX_TL_SINK_ACK_LEN];
    unsigned out_cap;
} sink_iface_t;

/* Never chosen by default: only an SX_TRANSPORTS that asks for it. */
static int sink_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q)
{
    (void)config;
    q->exclusivity = SX_TL_EXCL_SINK;
    if (!named) {
        snprintf(q->detail, sizeof(q->detail),
                 "no network; acknowledges every packet as posted (only when SX_TRANSPORTS "
                 "names it)");
        return SX_ERR_NO_DEVICE;
    }
    snprintf(q->detail, sizeof(q->detail),
             "no network; acknowledges every packet as posted (needs SX_CPC=implicit)");
    return SX_OK;
}

static int sink_open(const sx_tl_config_t *config, sx_tl_iface_t **iface_p)
{
    sink_iface_t *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return SX_ERR_NO_MEMORY;
    s->base.ops = &sx_tl_sink_ops;
    s->base.caps = (sx_tl_caps_t){
        .mtu = SINK_MTU, .inline_limit = SINK_MTU, .tx_credits = SINK_TX_CREDITS, .sync_send = 1};
    s->reflect = config->reflect;
    if (s->reflect == NULL)
        sx_warn("sink", "shard %u: no reflect callback: sends will never be acknowledged",
                config->shard);
    *iface_p = &s->base;
    return SX_OK;
}

static void sink_close(sx_tl_iface_t *iface)
{
    sink_iface_t *s = (sink_iface_t *)iface;

    if (s == NULL)
        return;
    free(s->dests);
    free(s->pending);
    free(s->out);
    free(s);
}

static int sink_local_addr(sx_tl_iface_t *iface, void *buf, size_t *len_p)
{
    (void)iface;
    if (len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (buf == NULL || *len_p < SINK_ADDR_LEN) {
        *len_p = SINK_ADDR_LEN;
        return SX_ERR_TRUNCATED;
    }
    memcpy(buf, sink_addr_magic, SINK_ADDR_LEN);
    *len_p = SINK_ADDR_LEN;
    return SX_OK;
}

static int sink_addr_insert(sx_tl_iface_t *iface, const void *addr, size_t len,
                            sx_tl_dest_t *dest_p)
{
    sink_iface_t *s = (sink_iface_t *)iface;

    if (addr == NULL || len != SINK_ADDR_LEN || memcmp(addr, sink_addr_magic, len) != 0)
        return SX_ERR_INVALID_PARAM;
    if (s->ndests == s->cap) {
        if (s->cap >= SINK_MAX_DESTS)
            return SX_ERR_NO_MEMORY;
        uint32_t cap = s->cap ? 2 * s->cap : 16;
        sink_dest_t *d = realloc(s->dests, cap * sizeof(*d));
        if (d == NULL)
            return SX_ERR_NO_MEMORY;
        s->dests = d;
        uint32_t *p = realloc(s->pending, cap * sizeof(*p));
        if (p == NULL)
            return SX_ERR_NO_MEMORY;
        s->pending = p;
        s->cap = cap;
    }
    s->dests[s->ndests] = (sink_dest_t){.live = true};
    *dest_p = s->ndests++;
    return SX_OK;
}

static void sink_addr_str(sx_tl_iface_t *iface, const void *addr, size_t len, char *buf, size_t cap)
{
    (void)iface;
    bool ok = addr != NULL && len == SINK_ADDR_LEN && memcmp(addr, sink_addr_magic, len) == 0;
    if (cap > 0)
        snprintf(buf, cap, "%s", ok ? "sink" : "(not a sink address)");
}

static void sink_addr_remove(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    sink_iface_t *s = (sink_iface_t *)iface;

    if (dest < s->ndests)
        s->dests[dest].live = false;
}

static int sink_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                          unsigned *posted_p)
{
    sink_iface_t *s = (sink_iface_t *)iface;

    for (unsigned i = 0; i < count; i++) {
        if (tx[i].dest >= s->ndests || !s->dests[tx[i].dest].live) {
            *posted_p = i;
            return SX_ERR_INVALID_PARAM;
        }
        size_t len = 0;
        for (unsigned k = 0; k < tx[i].iovcnt; k++)
            len += tx[i].iov[k].iov_len;
        if (len > SINK_MTU) {
            *posted_p = i;
            return SX_ERR_INVALID_PARAM;
        }
        s->base.stats.tx_datagrams++;
        sink_dest_t *d = &s->dests[tx[i].dest];
        uint8_t ack[SX_TL_SINK_ACK_LEN];
        uint32_t seq;
        if (s->reflect == NULL || tx[i].iovcnt == 0 ||
            !s->reflect(tx[i].iov[0].iov_base, tx[i].iov[0].iov_len, ack, &seq))
            continue;
        if (d->acked_any && !sx_u32_before(d->acked, seq))
            continue; /* a retransmission: already acknowledged */
        d->acked = seq;
        d->acked_any = true;
        memcpy(d->ack, ack, sizeof(ack));
        if (!d->pending) {
            d->pending = true;
            s->pending[s->npending++] = tx[i].dest;
        }
    }
    *posted_p = count;
    return SX_OK;
}

static int sink_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max)
{
    sink_iface_t *s = (sink_iface_t *)iface;
    unsigned n = s->npending < max ? s->npending : max;

    if (n == 0)
        return 0;
    if (n > s->out_cap) {
        void *p = realloc(s->out, (size_t)n * sizeof(*s->out));
        if (p == NULL)
            return 0; /* the ACKs stay pending; the next poll retries */
        s->out = p;
        s->out_cap = n;
    }
    for (unsigned i = 0; i < n; i++) {
        sink_dest_t *d = &s->dests[s->pending[i]];
        memcpy(s->out[i], d->ack, SX_TL_SINK_ACK_LEN);
        d->pending = false;
        events[i] = (sx_tl_event_t){
            .type = SX_TL_EV_RECV, .status = SX_OK, .data = s->out[i], .len = SX_TL_SINK_ACK_LEN};
    }
    memmove(s->pending, s->pending + n, (size_t)(s->npending - n) * sizeof(*s->pending));
    s->npending -= n;
    s->base.stats.rx_datagrams += n;
    return (int)n;
}

static unsigned sink_wait_fds(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS])
{
    (void)iface;
    (void)fds;
    return 0; /* poll-mode only: nothing ever arrives from outside */
}

const sx_tl_ops_t sx_tl_sink_ops = {
    .name = "sink",
    .exclusivity = SX_TL_EXCL_SINK,
    .query = sink_query,
    .open = sink_open,
    .close = sink_close,
    .local_addr = sink_local_addr,
    .addr_insert = sink_addr_insert,
    .addr_str = sink_addr_str,
    .addr_remove = sink_addr_remove,
    .post_send = sink_post_send,
    .poll = sink_poll,
    .wait_fds = sink_wait_fds,
};
