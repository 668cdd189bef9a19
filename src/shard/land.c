/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Landing, the shard's part (src/shard/chan.h, "Landing"): what a shard
 * offers its network interface's next read, and how the datagrams of a
 * read that landed are sorted before any is handled and given back
 * before a GET's owner can free the destination they landed in. The
 * channel's part (where a GET's chunks go, whether a chunk fits) is in
 * chan_rma.c; the receive path that uses both is shard.c.
 */
#include <stdint.h>

#include "shard/chan.h"
#include "shard/peer.h"
#include "shard/shard.h"
#include "shard/wire.h"

/*
 * Offers the network interface's next read landings (chan.h, Landing):
 * the places of the next chunks of the GETs whose answers arrive on
 * land_chan. Not for the service, which delivers nothing.
 */
void sx_shard_land_offer_locked(sx_shard_t *shard, sx_tl_iface_t *iface)
{
    struct iovec spans[SX_TL_LAND_SPANS];
    size_t step;

    shard->land_n = 0;
    if (shard->land_chan == NULL || iface->ops->land == NULL || shard->serving)
        return;
    unsigned n =
        sx_chan_land_spans_locked(shard->land_chan, shard->land_spans, SX_TL_LAND_SPANS, &step);
    if (n == 0) {
        shard->land_chan = NULL; /* its GETs are over: the next one's sets it */
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        const sx_land_span_t *sp = &shard->land_spans[i];
        spans[i] = (struct iovec){.iov_base = sp->dst + sp->got, .iov_len = sp->len - sp->got};
    }
    shard->land_n = n;
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

/*
 * Before any event of a poll is handled: a datagram whose bytes landed
 * anywhere but where its header says they belong is made whole now,
 * while the landing still holds its bytes: handling an earlier event may
 * write there (a chunk kept behind a gap, handed up once the gap fills,
 * goes to its place), which only ever writes a chunk's own bytes over a
 * chunk that claims its place. Reads the first SX_WIRE_RESP_DATA_OFF
 * bytes only, untrusted: a datagram left landed is validated in full when
 * handled.
 */
void sx_shard_land_sort_locked(sx_shard_t *shard, sx_tl_event_t *ev, int n)
{
    for (int i = 0; i < n; i++) {
        if (ev[i].type != SX_TL_EV_RECV || ev[i].landed == 0 || ev[i].landed_at == NULL ||
            sx_shard_land_claimed(shard, &ev[i]))
            continue;
        sx_landing_t land = {.dst = ev[i].landed_at, .len = ev[i].landed};
        sx_landing_undo_locked(shard, ev[i].data, &land);
        ev[i].landed = 0;
    }
}

void sx_shard_land_release_locked(sx_shard_t *shard, const uint8_t *dst, size_t len)
{
    for (int i = shard->land_ev_next; shard->land_ev != NULL && i < shard->land_ev_n; i++) {
        sx_tl_event_t *ev = &shard->land_ev[i];
        uintptr_t at = (uintptr_t)ev->landed_at;
        if (ev->type != SX_TL_EV_RECV || ev->landed == 0 || at < (uintptr_t)dst ||
            at - (uintptr_t)dst >= len)
            continue;
        sx_landing_t land = {.dst = ev->landed_at, .len = ev->landed};
        sx_landing_undo_locked(shard, ev->data, &land);
        ev->landed = 0;
    }
}
