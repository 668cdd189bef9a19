/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Landing, the shard's part (src/shard/chan.h, "Landing"): what a shard
 * offers its network interface's next read, and how the datagrams of a
 * read that landed are sorted before any is handled and given back
 * before a GET's owner can free the destination they landed in. The
 * channel's part (where a GET's or PUT's chunks go, whether a chunk
 * fits) is in chan_rma.c; the receive path that uses both is shard.c.
 */
#include <stdint.h>

#include "common/hot.h"
#include "shard/chan.h"
#include "shard/mem.h"
#include "shard/peer.h"
#include "shard/shard.h"
#include "shard/wire.h"

/* No GET answer awaited: offers the rest of land_put_chan's PUT, in its
 * region, whose access stays counted until the read is sorted. */
static void sx_shard_land_offer_put_locked(sx_shard_t *shard, sx_tl_iface_t *iface)
{
    sx_chan_t *c = shard->land_put_chan;
    sx_mem_t *m = NULL;
    size_t step;

    if (c == NULL)
        return;
    if (!sx_chan_land_put_span_locked(c, &shard->land_spans[0], &step, &m)) {
        shard->land_put_chan = NULL; /* its PUT is over: the next one's sets it */
        return;
    }
    const sx_land_span_t *sp = &shard->land_spans[0];
    struct iovec span = {.iov_base = sp->dst + sp->got, .iov_len = sp->len - sp->got};
    shard->land_n = 1;
    shard->land_read_max = (unsigned)((span.iov_len + step - 1) / step);
    shard->land_put = true;
    shard->land_mem = m;
    shard->land_head = SX_WIRE_PUT_DATA_OFF;
    iface->ops->land(iface, SX_WIRE_PUT_DATA_OFF, &span, 1, step);
}

/*
 * Offers the network interface's next read landings (chan.h, Landing):
 * the places of the next chunks of the GETs whose answers arrive on
 * land_chan. Not for the service, which delivers nothing.
 */
SX_HOT_PASS void sx_shard_land_offer_locked(sx_shard_t *shard, sx_tl_iface_t *iface)
{
    struct iovec spans[SX_TL_LAND_SPANS];
    size_t step;

    shard->land_n = 0;
    shard->land_put = false;
    if (iface->ops->land == NULL || shard->serving)
        return;
    unsigned n = shard->land_chan == NULL
                     ? 0
                     : sx_chan_land_spans_locked(shard->land_chan, shard->land_spans,
                                                 SX_TL_LAND_SPANS, &step);
    if (n == 0) {
        shard->land_chan = NULL; /* its GETs are over: the next one's sets it */
        sx_shard_land_offer_put_locked(shard, iface);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        const sx_land_span_t *sp = &shard->land_spans[i];
        spans[i] = (struct iovec){.iov_base = sp->dst + sp->got, .iov_len = sp->len - sp->got};
    }
    shard->land_n = n;
    shard->land_head = SX_WIRE_RESP_DATA_OFF;
    iface->ops->land(iface, SX_WIRE_RESP_DATA_OFF, spans, n, step);
}

/* Whether the bytes of @p ev landed where its header says they belong:
 * the chunk of an offered GET (of the channel offered: operation ids are
 * a channel's) at that offset. */
static bool sx_shard_land_claimed(const sx_shard_t *shard, const sx_tl_event_t *ev)
{
    const sx_chan_t *c = shard->land_chan;
    uint64_t epoch, off;
    uint16_t lane;
    uint32_t op_id;

    if (!sx_wire_peek_resp(ev->data, ev->len, &epoch, &lane, &op_id, &off) ||
        epoch != c->peer->epoch || lane != c->lane)
        return false;
    for (unsigned i = 0; i < shard->land_n; i++) {
        const sx_land_span_t *sp = &shard->land_spans[i];
        if (sp->op_id == op_id)
            return off >= sp->got && off < sp->len && ev->landed_at == sp->dst + off;
    }
    return false;
}

/* The same for a PUT's offer: the chunk of the followed PUT at that
 * offset, and whose CRC32C, when it carries one, holds over the pieces:
 * after the sort nothing may read its landed bytes (chan.h, Landing). */
static bool sx_shard_land_put_claimed(const sx_shard_t *shard, const sx_tl_event_t *ev)
{
    const sx_chan_t *c = shard->land_put_chan;
    const sx_land_span_t *sp = &shard->land_spans[0];
    sx_wire_rma_t r;
    sx_wire_hdr_t h;
    uint64_t epoch;
    uint16_t lane;

    if (!sx_wire_peek_put(ev->data, ev->len, &epoch, &lane, &r) || epoch != c->peer->epoch ||
        lane != c->lane || r.op_id != sp->op_id || !sx_chan_put_followed_locked(c, &r))
        return false;
    uint64_t off = r.addr - r.op_addr; /* wraps to beyond len when addr is below */
    return off >= sp->got && off < sp->len && ev->landed_at == sp->dst + off &&
           sx_wire_parse_packet_landed(ev->data, ev->len, SX_WIRE_PUT_DATA_OFF, ev->landed_at,
                                       ev->landed, &h) == SX_DROP_NONE;
}

/*
 * Before any event of a poll is handled: a datagram whose bytes landed
 * anywhere but where its header says they belong is made whole now,
 * while the landing still holds its bytes: handling an earlier event may
 * write there (a chunk kept behind a gap, handed up once the gap fills,
 * goes to its place), which only ever writes a chunk's own bytes over a
 * chunk that claims its place. Reads the first land_head bytes only,
 * untrusted (but for a PUT's, whose CRC it checks): a datagram left
 * landed is validated in full when handled. Then a PUT offer's access to
 * its region ends, before any callback can deregister it.
 */
void sx_shard_land_sort_locked(sx_shard_t *shard, sx_tl_event_t *ev, int n)
{
    for (int i = 0; i < n; i++) {
        if (ev[i].type != SX_TL_EV_RECV || ev[i].landed == 0 || ev[i].landed_at == NULL ||
            (shard->land_put ? sx_shard_land_put_claimed(shard, &ev[i])
                             : sx_shard_land_claimed(shard, &ev[i])))
            continue;
        sx_landing_t land = {.dst = ev[i].landed_at, .len = ev[i].landed, .head = shard->land_head};
        sx_landing_undo_locked(shard, ev[i].data, &land);
        ev[i].landed = 0;
    }
    if (shard->land_mem != NULL) {
        sx_mem_access_end(shard->land_mem);
        shard->land_mem = NULL;
    }
}

void sx_shard_land_release_locked(sx_shard_t *shard, const uint8_t *dst, size_t len)
{
    /* A PUT's landings are not the GET's to give back, nor readable now. */
    for (int i = shard->land_ev_next;
         shard->land_ev != NULL && !shard->land_put && i < shard->land_ev_n; i++) {
        sx_tl_event_t *ev = &shard->land_ev[i];
        uintptr_t at = (uintptr_t)ev->landed_at;
        if (ev->type != SX_TL_EV_RECV || ev->landed == 0 || at < (uintptr_t)dst ||
            at - (uintptr_t)dst >= len)
            continue;
        sx_landing_t land = {.dst = ev->landed_at, .len = ev->landed, .head = shard->land_head};
        sx_landing_undo_locked(shard, ev->data, &land);
        ev->landed = 0;
    }
}
