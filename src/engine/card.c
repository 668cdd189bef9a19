/* SPDX-License-Identifier: BSD-3-Clause */
/* The business card; see card.h. */
#include "engine/card.h"

#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/log.h"
#include "engine/engine.h"
#include "shard/peer.h"
#include "shard/shard.h"

#define SX_CARD_MAGIC   0x31435853u
#define SX_CARD_VERSION 4
#define SX_CARD_HDR     16

size_t sx_card_cap(unsigned nshards)
{
    return SX_CARD_HDR + (size_t)nshards * (1 + SX_TL_ADDR_MAX) + 1 +
           SX_CPC_MAX * (3 + (size_t)SX_CONN_BLOB_MAX) + 2 * SX_CARD_NAME + 1 + SX_AUTH_KEY_LEN;
}

/* Why a card could not be built: a transport whose address outgrew
 * SX_TL_ADDR_MAX, or more offers than sx_card_cap counts on, is a bug
 * here, not the user's; say so rather than "out of memory". */
static int card_overflow(const char *what, unsigned shard)
{
    sx_error("engine", "business card: %s (shard %u) does not fit its computed size; a bug", what,
             shard);
    return SX_ERR_NO_MEMORY;
}

int sx_card_build(struct sx_engine *e)
{
    uint64_t epoch = e->env.epoch;
    size_t cap = sx_card_cap(e->nshards);

    free(e->card);
    e->card_len = 0;
    if ((e->card = malloc(cap)) == NULL) {
        sx_error("engine", "business card: no memory for %zu bytes (%u shards)", cap, e->nshards);
        return SX_ERR_NO_MEMORY;
    }
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
        int rc = iface->ops->local_addr(iface, e->card + off + 1, &len);
        if (rc == SX_ERR_TRUNCATED)
            return card_overflow("the address", i);
        if (rc != SX_OK)
            return rc;
        e->card[off] = (uint8_t)len;
        off += 1 + len;
    }
    size_t offers = sx_card_offers_write(&e->cpc, e->card + off, cap - off);
    if (offers == 0)
        return card_overflow("the connection offers", 0);
    off += offers;
    const char *names[2] = {e->net_ops->name, e->net_variant};
    for (unsigned i = 0; i < 2; i++) {
        size_t nlen = strlen(names[i]);
        if (nlen >= SX_CARD_NAME || off + 1 + nlen > cap)
            return card_overflow("the transport's name", 0);
        e->card[off] = (uint8_t)nlen;
        memcpy(e->card + off + 1, names[i], nlen);
        off += 1 + nlen;
    }
    const sx_auth_t *auth = &e->env.auth;
    if (e->auth_job) {
        e->card[off++] = SX_CARD_AUTH_JOB;
        memcpy(e->card + off, e->auth_job_key, SX_AUTH_KEY_LEN);
        off += SX_AUTH_KEY_LEN;
    } else if (auth->required) {
        e->card[off++] = SX_CARD_AUTH_KEY;
        memcpy(e->card + off, auth->id, SX_AUTH_ID_LEN);
        off += SX_AUTH_ID_LEN;
    } else {
        e->card[off++] = SX_CARD_AUTH_NONE;
    }
    e->card_len = off;
    return SX_OK;
}

/* The offers section. Offers are the same on every shard, so shard 0's
 * modules speak for all. */
size_t sx_card_offers_write(const sx_cpc_t *cpc, uint8_t *out, size_t cap)
{
    size_t off = 1;

    if (cap < 1)
        return 0;
    out[0] = (uint8_t)cpc->n;
    for (unsigned k = 0; k < cpc->n; k++) {
        const sx_cpc_module_t *m = &cpc->inst[k].mods[0];
        if (off + 3 + m->blob_len > cap)
            return 0;
        out[off] = m->component->ep.id;
        out[off + 1] = m->priority;
        out[off + 2] = m->blob_len;
        memcpy(out + off + 3, m->blob, m->blob_len);
        off += 3 + (size_t)m->blob_len;
    }
    return off;
}

/*
 * A card may offer more components than SX_CPC_MAX, or ones this build
 * has never heard of: a newer peer with a fifth method must still be able
 * to talk to us through the ones we share. Every offer is checked, so a
 * malformed section is still refused whole; of the well-formed ones, those
 * we know are kept first, and unknown ones only while there is room (they
 * are never chosen, but the "no method in common" diagnosis names them).
 */
size_t sx_card_offers_parse(const uint8_t *in, size_t len, sx_conn_offer_t *offers,
                            unsigned *count_p)
{
    if (len < 1)
        return 0;
    unsigned n = in[0], kept = 0;
    size_t off = 1;
    for (unsigned k = 0; k < n; k++) {
        if (len - off < 3 || in[off + 2] > SX_CONN_BLOB_MAX || len - off - 3 < in[off + 2] ||
            in[off + 1] > 100)
            return 0;
        sx_conn_offer_t o = {.id = in[off], .priority = in[off + 1], .blob_len = in[off + 2]};
        memcpy(o.blob, in + off + 3, o.blob_len);
        off += 3 + (size_t)o.blob_len;
        if (kept < SX_CPC_MAX) {
            offers[kept++] = o;
            continue;
        }
        if (!sx_cpc_known(o.id))
            continue;
        for (unsigned j = 0; j < kept; j++) {
            if (!sx_cpc_known(offers[j].id)) {
                offers[j] = o;
                break;
            }
        }
    }
    *count_p = kept;
    return off;
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
    if (tl->name[0] == '\0' || off >= len)
        return 0;
    tl->auth = card[off++];
    size_t need = tl->auth == SX_CARD_AUTH_KEY    ? SX_AUTH_ID_LEN
                  : tl->auth == SX_CARD_AUTH_JOB  ? SX_AUTH_KEY_LEN
                  : tl->auth == SX_CARD_AUTH_NONE ? 0
                                                  : SIZE_MAX;
    if (need == SIZE_MAX || len - off < need)
        return 0;
    if (tl->auth == SX_CARD_AUTH_KEY)
        memcpy(tl->auth_id, card + off, need);
    else if (tl->auth == SX_CARD_AUTH_JOB)
        memcpy(tl->auth_key, card + off, need);
    return off + need;
}

int sx_card_auth_check(struct sx_engine *e, const struct sx_peer *peer, const sx_card_tl_t *tl)
{
    const sx_auth_t *auth = &e->env.auth;
    uint8_t ours = e->auth_job      ? SX_CARD_AUTH_JOB
                   : auth->required ? SX_CARD_AUTH_KEY
                                    : SX_CARD_AUTH_NONE;
    static const char *const how[] = {"does not authenticate its datagrams",
                                      "authenticates with a key of its own (SX_AUTH=<key>)",
                                      "authenticates with the job's key (SX_AUTH=job)"};
    char theirs_id[2 * SX_AUTH_ID_LEN + 1], ours_id[2 * SX_AUTH_ID_LEN + 1];

    if (tl->auth != ours) {
        sx_error("peer", "sx_peer_add: %s %s, this engine %s: SX_AUTH must be the same everywhere",
                 peer->name, how[tl->auth], how[ours]);
        return SX_ERR_AUTH;
    }
    if (ours != SX_CARD_AUTH_NONE && !sx_auth_on(auth)) {
        sx_error("peer",
                 "sx_peer_add: SX_AUTH=job: this engine has no key yet; sx_engine_join brings "
                 "it (rank 0's), or give the key itself in SX_AUTH");
        return SX_ERR_AUTH;
    }
    if (ours == SX_CARD_AUTH_KEY && memcmp(tl->auth_id, auth->id, SX_AUTH_ID_LEN) != 0) {
        sx_auth_id_str(tl->auth_id, theirs_id);
        sx_auth_id_str(auth->id, ours_id);
        sx_error("peer",
                 "sx_peer_add: %s's authentication key (id %s) is not this engine's (id %s): "
                 "SX_AUTH differs between the two",
                 peer->name, theirs_id, ours_id);
        return SX_ERR_AUTH;
    }
    return SX_OK;
}

/*
 * Whether this engine's network transport reaches the peer of a parsed
 * card: the same transport and variant, and every address of a kind it
 * can use (BTL add_procs' reachability). SX_ERR_PEER_UNREACHABLE or
 * SX_ERR_INVALID_PARAM with a log line naming both sides.
 */
int sx_card_reachable(struct sx_engine *e, const struct sx_peer *peer, const sx_card_tl_t *tl)
{
    const char *mine = e->net_ops->name;

    if (strcmp(tl->name, mine) != 0 || strcmp(tl->variant, e->net_variant) != 0) {
        sx_error("peer",
                 "sx_peer_add: %s's engine runs the %s%s%s transport, this one runs "
                 "%s%s%s; both ends must select the same network transport (SX_TRANSPORTS%s)",
                 peer->name, tl->name, tl->variant[0] ? "/" : "", tl->variant, mine,
                 e->net_variant[0] ? "/" : "", e->net_variant,
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
        /* Unreachable: say what we offer too, so both ends are named. */
        char ours[160] = "";
        uint8_t self[SX_TL_ADDR_MAX];
        size_t slen = sizeof(self);
        if (rc != SX_ERR_INVALID_PARAM && iface->ops->addr_str != NULL &&
            iface->ops->local_addr(iface, self, &slen) == SX_OK)
            iface->ops->addr_str(iface, self, slen, ours, sizeof(ours));
        sx_error("peer", "sx_peer_add: %s's shard %u has %s address (%s) for %s%s%s%s%s",
                 peer->name, i, rc == SX_ERR_INVALID_PARAM ? "a malformed" : "an unreachable", text,
                 mine, e->net_variant[0] ? "/" : "", e->net_variant,
                 ours[0] != '\0' ? "; ours: " : "", ours);
        return rc == SX_ERR_INVALID_PARAM ? SX_ERR_INVALID_PARAM : SX_ERR_PEER_UNREACHABLE;
    }
    return SX_OK;
}

/* Parses a card into a new peer; SX_ERR_INVALID_PARAM with a reason. */
int sx_card_parse(struct sx_engine *e, const uint8_t *card, size_t len, struct sx_peer **peer_p,
                  sx_conn_offer_t *offers, unsigned *noffers_p, sx_card_tl_t *tl)
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
    size_t used = sx_card_offers_parse(card + off, len - off, offers, noffers_p);
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

static int engine_address(sx_engine_h engine, void *buf, size_t *len_p)
{
    if (engine == NULL || len_p == NULL)
        return sx_api_null("sx_engine_address", engine == NULL ? "the engine" : "len_p");
    if (buf == NULL || *len_p < engine->card_len) {
        *len_p = engine->card_len;
        return SX_ERR_TRUNCATED;
    }
    memcpy(buf, engine->card, engine->card_len);
    *len_p = engine->card_len;
    return SX_OK;
}

SX_API int sx_engine_address(sx_engine_h engine, void *buf, size_t *len_p)
{
    if (engine == NULL)
        return sx_api_null("sx_engine_address", "the engine");
    sx_global_enter(engine);
    int rc = engine_address(engine, buf, len_p);
    sx_global_exit(engine);
    return rc;
}
