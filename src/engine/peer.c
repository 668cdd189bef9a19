/* Business cards, peers and handler registration. */
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"
#include "engine/engine.h"
#include "shard/chan.h"

/*
 * The business card, little-endian:
 *   0  u32 magic "SXC1"     4  u16 version (3)     6  u16 shard count
 *   8  u64 epoch            then per shard: u8 length, that many address bytes
 *   then the connection methods offered (cpc.h: u8 count, then per method
 *   u8 id, u8 priority, u8 blob length, blob)
 *   then the network transport the addresses belong to: u8 length, its
 *   name ("udp", "ofi"); u8 length, its variant ("" for udp, the provider
 *   for ofi)
 * A card says how to reach each shard over the network transport and how
 * to set channels up; the epoch names this incarnation of the engine.
 * Version 3 added the transport; the addresses stay where version 2 had
 * them.
 */
#define SX_CARD_MAGIC   0x31435853u
#define SX_CARD_VERSION 3
#define SX_CARD_HDR     16
#define SX_CARD_NAME    32 /* room for a transport name or variant, with the NUL */

/* The transport section of a card, as parsed. */
typedef struct sx_card_tl {
    char name[SX_CARD_NAME];
    char variant[SX_CARD_NAME];
} sx_card_tl_t;

void sx_engine_epoch_init(struct sx_engine *e)
{
    uint64_t epoch = 0;

    /* A random epoch, so that a restarted process is a new peer and its
     * predecessor's packets are recognisably stale. */
    while (epoch == 0) {
        if (getrandom(&epoch, sizeof(epoch), 0) != sizeof(epoch))
            epoch = sx_time_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)e;
    }
    e->env.epoch = epoch;
}

int sx_engine_card_init(struct sx_engine *e)
{
    uint64_t epoch = e->env.epoch;

    uint8_t *p = e->card;
    uint32_t magic = htole32(SX_CARD_MAGIC);
    uint16_t version = htole16(SX_CARD_VERSION), n = htole16((uint16_t)e->nshards);
    uint64_t ep = htole64(epoch);
    memcpy(p, &magic, 4);
    memcpy(p + 4, &version, 2);
    memcpy(p + 6, &n, 2);
    memcpy(p + 8, &ep, 8);
    size_t off = SX_CARD_HDR;
    for (unsigned i = 0; i < e->nshards; i++) {
        sx_tl_iface_t *iface = e->shards[i]->ifaces[SX_SHARD_TL_NET];
        size_t len = SX_TL_ADDR_MAX;
        if (off + 1 + SX_TL_ADDR_MAX > sizeof(e->card))
            return SX_ERR_NO_MEMORY;
        int rc = iface->ops->local_addr(iface, e->card + off + 1, &len);
        if (rc != SX_OK)
            return rc;
        e->card[off] = (uint8_t)len;
        off += 1 + len;
    }
    size_t offers = sx_cpc_card_write(&e->cpc, e->card + off, sizeof(e->card) - off);
    if (offers == 0)
        return SX_ERR_NO_MEMORY;
    off += offers;
    const char *names[2] = {e->net_ops->name, e->net_variant};
    for (unsigned i = 0; i < 2; i++) {
        size_t nlen = strlen(names[i]);
        if (nlen >= SX_CARD_NAME || off + 1 + nlen > sizeof(e->card))
            return SX_ERR_NO_MEMORY;
        e->card[off] = (uint8_t)nlen;
        memcpy(e->card + off + 1, names[i], nlen);
        off += 1 + nlen;
    }
    e->card_len = off;
    return SX_OK;
}

/* Reads the transport section at @p off; the offset after it, or 0 when
 * it is malformed. */
static size_t sx_card_parse_tl(const uint8_t *card, size_t len, size_t off, sx_card_tl_t *tl)
{
    char *fields[2] = {tl->name, tl->variant};

    for (unsigned i = 0; i < 2; i++) {
        if (off >= len || card[off] >= SX_CARD_NAME || len - off - 1 < card[off])
            return 0;
        size_t n = card[off];
        for (size_t k = 0; k < n; k++) {
            uint8_t ch = card[off + 1 + k];
            if (ch < 0x21 || ch > 0x7e) /* printable, no spaces: it gets logged */
                return 0;
        }
        memcpy(fields[i], card + off + 1, n);
        fields[i][n] = '\0';
        off += 1 + n;
    }
    return tl->name[0] != '\0' ? off : 0;
}

/*
 * Whether this engine's network transport reaches the peer of a parsed
 * card: the same transport and variant, and every address of a kind it
 * can use (BTL add_procs' reachability). SX_ERR_PEER_UNREACHABLE or
 * SX_ERR_INVALID_PARAM with a log line naming both sides.
 */
static int sx_card_reachable(struct sx_engine *e, uint64_t peer_id, const struct sx_peer *peer,
                             const sx_card_tl_t *tl)
{
    const char *mine = e->net_ops->name;

    if (strcmp(tl->name, mine) != 0 || strcmp(tl->variant, e->net_variant) != 0) {
        sx_error("peer",
                 "sx_peer_add: peer %llu's engine runs the %s%s%s transport, this one runs "
                 "%s%s%s; both ends must select the same network transport (SX_TRANSPORTS%s)",
                 (unsigned long long)peer_id, tl->name, tl->variant[0] ? "/" : "", tl->variant,
                 mine, e->net_variant[0] ? "/" : "", e->net_variant,
                 strcmp(tl->name, mine) == 0 && strcmp(mine, "ofi") == 0 ? ", SX_OFI_PROVIDER"
                                                                         : "");
        return SX_ERR_PEER_UNREACHABLE;
    }
    sx_tl_iface_t *iface = e->shards[0]->ifaces[SX_SHARD_TL_NET];
    if (iface->ops->addr_check == NULL)
        return SX_OK;
    for (unsigned i = 0; i < peer->nshards; i++) {
        int rc = iface->ops->addr_check(iface, peer->addr[i].bytes, peer->addr[i].len);
        if (rc == SX_OK)
            continue;
        char text[128];
        if (iface->ops->addr_str != NULL) {
            iface->ops->addr_str(iface, peer->addr[i].bytes, peer->addr[i].len, text, sizeof(text));
        } else {
            size_t o = (size_t)snprintf(text, sizeof(text), "%u bytes:", peer->addr[i].len);
            for (unsigned k = 0; k < peer->addr[i].len && o + 3 < sizeof(text); k++)
                o += (size_t)snprintf(text + o, sizeof(text) - o, "%02x", peer->addr[i].bytes[k]);
        }
        sx_error("peer", "sx_peer_add: peer %llu's shard %u has %s address (%s) for %s%s%s",
                 (unsigned long long)peer_id, i,
                 rc == SX_ERR_INVALID_PARAM ? "a malformed" : "an unreachable", text, mine,
                 e->net_variant[0] ? "/" : "", e->net_variant);
        return rc == SX_ERR_INVALID_PARAM ? SX_ERR_INVALID_PARAM : SX_ERR_PEER_UNREACHABLE;
    }
    return SX_OK;
}

static int sx_engine_address_unlocked(sx_engine_h engine, void *buf, size_t *len_p)
{
    if (engine == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (buf == NULL || *len_p < engine->card_len) {
        *len_p = engine->card_len;
        return SX_ERR_TRUNCATED;
    }
    memcpy(buf, engine->card, engine->card_len);
    *len_p = engine->card_len;
    return SX_OK;
}

/* Parses a card into a new peer; SX_ERR_INVALID_PARAM with a reason. */
static int sx_card_parse(struct sx_engine *e, const uint8_t *card, size_t len,
                         struct sx_peer **peer_p, sx_conn_offer_t *offers, unsigned *noffers_p,
                         sx_card_tl_t *tl)
{
    uint32_t magic;
    uint16_t version, n;
    uint64_t epoch;

    if (card == NULL || len < SX_CARD_HDR) {
        sx_error("peer", "sx_peer_add: card of %zu bytes is too short", len);
        return SX_ERR_INVALID_PARAM;
    }
    memcpy(&magic, card, 4);
    memcpy(&version, card + 4, 2);
    memcpy(&n, card + 6, 2);
    memcpy(&epoch, card + 8, 8);
    magic = le32toh(magic);
    version = le16toh(version);
    n = le16toh(n);
    epoch = le64toh(epoch);
    if (magic != SX_CARD_MAGIC) {
        sx_error("peer", "sx_peer_add: not a shardx card (magic 0x%08x)", magic);
        return SX_ERR_INVALID_PARAM;
    }
    if (version != SX_CARD_VERSION) {
        sx_error("peer", "sx_peer_add: card version %u, this library reads version %u only",
                 version, SX_CARD_VERSION);
        return SX_ERR_INVALID_PARAM;
    }
    if (n == 0 || n > 1024 || epoch == 0) {
        sx_error("peer", "sx_peer_add: card claims %u shards and epoch %llu", n,
                 (unsigned long long)epoch);
        return SX_ERR_INVALID_PARAM;
    }
    struct sx_peer *peer = sx_peer_new(n, e->nshards);
    if (peer == NULL)
        return SX_ERR_NO_MEMORY;
    size_t off = SX_CARD_HDR;
    for (unsigned i = 0; i < n; i++) {
        if (off >= len || card[off] > SX_TL_ADDR_MAX || len - off - 1 < card[off]) {
            sx_error("peer", "sx_peer_add: card truncated in the address of shard %u", i);
            sx_peer_discard(peer);
            return SX_ERR_INVALID_PARAM;
        }
        peer->addr[i].len = card[off];
        memcpy(peer->addr[i].bytes, card + off + 1, card[off]);
        off += 1 + card[off];
    }
    size_t used = sx_cpc_card_parse(card + off, len - off, offers, noffers_p);
    if (used == 0) {
        sx_error("peer", "sx_peer_add: the card's list of connection methods is malformed");
        sx_peer_discard(peer);
        return SX_ERR_INVALID_PARAM;
    }
    off += used;
    size_t end = sx_card_parse_tl(card, len, off, tl);
    if (end == 0) {
        sx_error("peer", "sx_peer_add: the card's network transport is missing or malformed");
        sx_peer_discard(peer);
        return SX_ERR_INVALID_PARAM;
    }
    off = end;
    if (off != len) {
        sx_error("peer", "sx_peer_add: %zu stray bytes after the card", len - off);
        sx_peer_discard(peer);
        return SX_ERR_INVALID_PARAM;
    }
    peer->epoch = epoch;
    *peer_p = peer;
    return SX_OK;
}

static int sx_peer_add_unlocked(sx_engine_h e, uint64_t peer_id, const void *card, size_t len,
                                sx_peer_h *peer_p)
{
    struct sx_peer *peer;
    sx_conn_offer_t offers[SX_CPC_MAX];
    unsigned noffers = 0;
    sx_card_tl_t tl;

    if (e == NULL || peer_p == NULL)
        return SX_ERR_INVALID_PARAM;
    int rc = sx_card_parse(e, card, len, &peer, offers, &noffers, &tl);
    if (rc != SX_OK)
        return rc;
    peer->id = peer_id;
    peer->engine = e;
    peer->is_self = (peer->epoch == e->env.epoch);
    if (!peer->is_self && (rc = sx_card_reachable(e, peer_id, peer, &tl)) != SX_OK) {
        sx_peer_discard(peer);
        return rc;
    }
    if (peer->is_self) {
        /* Ourselves: reach each shard through the self transport. */
        for (unsigned i = 0; i < peer->nshards && i < e->nshards; i++) {
            sx_tl_iface_t *iface = e->shards[i]->ifaces[SX_SHARD_TL_SELF];
            size_t alen = SX_TL_ADDR_MAX;
            rc = iface->ops->local_addr(iface, peer->addr[i].bytes, &alen);
            if (rc != SX_OK) {
                sx_peer_discard(peer);
                return rc;
            }
            peer->addr[i].len = (uint8_t)alen;
        }
    }
    rc = sx_cpc_select(&e->cpc, peer, offers, noffers);
    if (rc != SX_OK) {
        sx_peer_discard(peer);
        return rc;
    }
    bool was_removed;
    rc = sx_peer_table_add(&e->peers, peer, &was_removed);
    if (rc != SX_OK) {
        if (was_removed)
            sx_error("peer",
                     "sx_peer_add: the engine of that card (epoch %llu) was a peer and was "
                     "removed; the same incarnation cannot be added again (its sequence state is "
                     "gone)",
                     (unsigned long long)peer->epoch);
        else
            sx_error("peer", "sx_peer_add: the engine of that card (epoch %llu) is already a peer",
                     (unsigned long long)peer->epoch);
        sx_peer_discard(peer);
        return rc;
    }
    *peer_p = peer;
    return SX_OK;
}

SX_API uint64_t sx_peer_id(sx_peer_h peer)
{
    return peer != NULL ? peer->id : 0;
}

/* Closing a peer's channels runs on each shard, by its token holder. */
typedef struct sx_peer_close_req {
    sx_inbox_req_t req;
    struct sx_peer *peer;
    atomic_uint *pending;
} sx_peer_close_req_t;

static void sx_peer_close_run(void *owner, sx_inbox_req_t *req)
{
    sx_shard_t *shard = owner;
    sx_peer_close_req_t *r = (sx_peer_close_req_t *)req;
    struct sx_peer *peer = r->peer;

    sx_peer_close_locked(shard, peer, SX_ERR_CANCELED);
    if (atomic_fetch_sub(r->pending, 1) == 1) {
        free(r->pending);
        sx_peer_put(peer);
    }
    free(r);
}

static int sx_peer_remove_unlocked(sx_engine_h e, sx_peer_h peer)
{
    if (e == NULL || peer == NULL || peer->engine != e)
        return SX_ERR_INVALID_PARAM;

    atomic_uint *pending = malloc(sizeof(*pending));
    sx_peer_close_req_t **reqs = calloc(e->nshards, sizeof(*reqs));
    bool ok = pending != NULL && reqs != NULL;
    for (unsigned i = 0; ok && i < e->nshards; i++) {
        reqs[i] = malloc(sizeof(**reqs));
        ok = reqs[i] != NULL;
    }
    int rc = ok ? sx_peer_table_remove(&e->peers, peer) : SX_ERR_NO_MEMORY;
    if (rc != SX_OK) {
        for (unsigned i = 0; reqs != NULL && i < e->nshards; i++)
            free(reqs[i]);
        free(reqs);
        free(pending);
        if (rc == SX_ERR_NOT_FOUND)
            sx_error("peer", "sx_peer_remove: peer %llu was already removed",
                     (unsigned long long)peer->id);
        return rc;
    }
    /* From here on the closing protocol owns the peer's other reference:
     * each shard closes its channels, and the last one drops it. */
    atomic_init(pending, e->nshards);
    for (unsigned i = 0; i < e->nshards; i++) {
        reqs[i]->req.run = sx_peer_close_run;
        reqs[i]->peer = peer;
        reqs[i]->pending = pending;
        sx_engine_submit(e, i, &reqs[i]->req);
    }
    free(reqs);
    return SX_OK;
}

void sx_engine_peers_fini(struct sx_engine *e)
{
    /* No other thread runs now: close every channel directly, then drop
     * the closing protocol's reference; the table drops its own when it is
     * torn down. Removed peers are not on the list: their close requests,
     * still in the shards' inboxes, run when the shards go. */
    for (struct sx_peer *peer = e->peers.all, *next; peer != NULL; peer = next) {
        next = peer->all_next;
        for (unsigned s = 0; s < e->nshards; s++)
            sx_peer_close_locked(e->shards[s], peer, SX_ERR_SHUTDOWN);
        sx_peer_put(peer);
    }
    e->peers.all = NULL;
}

static int sx_am_register_unlocked(sx_engine_h e, uint8_t tag, sx_am_cb_t cb, void *arg)
{
    if (e == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_handlers_set_am(&e->handlers, tag, cb, arg);
}

static int sx_error_register_unlocked(sx_engine_h e, sx_error_cb_t cb, void *arg)
{
    if (e == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_handlers_set_error(&e->handlers, cb, arg);
}

SX_API int sx_engine_address(sx_engine_h engine, void *buf, size_t *len_p)
{
    if (engine == NULL)
        return SX_ERR_INVALID_PARAM;
    sx_global_enter(engine);
    int rc = sx_engine_address_unlocked(engine, buf, len_p);
    sx_global_exit(engine);
    return rc;
}

SX_API int sx_peer_add(sx_engine_h e, uint64_t peer_id, const void *card, size_t len,
                       sx_peer_h *peer_p)
{
    if (e == NULL)
        return SX_ERR_INVALID_PARAM;
    sx_global_enter(e);
    int rc = sx_peer_add_unlocked(e, peer_id, card, len, peer_p);
    sx_global_exit(e);
    return rc;
}

SX_API int sx_peer_remove(sx_engine_h e, sx_peer_h peer)
{
    if (e == NULL)
        return SX_ERR_INVALID_PARAM;
    sx_global_enter(e);
    int rc = sx_peer_remove_unlocked(e, peer);
    sx_global_exit(e);
    return rc;
}

SX_API int sx_am_register(sx_engine_h e, uint8_t tag, sx_am_cb_t cb, void *arg)
{
    if (e == NULL)
        return SX_ERR_INVALID_PARAM;
    sx_global_enter(e);
    int rc = sx_am_register_unlocked(e, tag, cb, arg);
    sx_global_exit(e);
    return rc;
}

SX_API int sx_error_register(sx_engine_h e, sx_error_cb_t cb, void *arg)
{
    if (e == NULL)
        return SX_ERR_INVALID_PARAM;
    sx_global_enter(e);
    int rc = sx_error_register_unlocked(e, cb, arg);
    sx_global_exit(e);
    return rc;
}
