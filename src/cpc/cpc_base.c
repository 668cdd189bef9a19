/* The CPC framework: which components run, their card offers, and the
 * choice per peer (cpc.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "common/log.h"
#include "cpc/cpc.h"
#include "engine/engine.h"

/* Every component this library knows, in the order they are tried. One
 * that is not built keeps its name, so that SX_CPC naming it gets the
 * reason instead of "unknown" (registry.c does the same for transports). */
typedef struct sx_cpc_known {
    const char *name;
    uint8_t id;
    const sx_cpc_component_t *comp; /* NULL when not built */
    const char *missing;            /* why it is not built */
} sx_cpc_known_t;

static const sx_cpc_known_t sx_cpc_all[] = {
    {"handshake", SX_CPC_HANDSHAKE, &sx_cpc_handshake, NULL},
    {"implicit", SX_CPC_IMPLICIT, &sx_cpc_implicit, NULL},
    {"oob", SX_CPC_OOB, &sx_cpc_oob, NULL},
#if SX_HAVE_RDMACM && SX_HAVE_VERBS
    {"rdmacm", SX_CPC_RDMACM, &sx_cpc_rdmacm, NULL},
#elif SX_HAVE_VERBS
    {"rdmacm", SX_CPC_RDMACM, NULL, "librdmacm was not found when this library was built"},
#else
    {"rdmacm", SX_CPC_RDMACM, NULL,
     "libibverbs (and librdmacm) were not found when this library was built"},
#endif
};
#define SX_CPC_ALL_COUNT (sizeof(sx_cpc_all) / sizeof(sx_cpc_all[0]))

const char *sx_cpc_name(uint8_t id)
{
    for (size_t i = 0; i < SX_CPC_ALL_COUNT; i++) {
        if (sx_cpc_all[i].id == id)
            return sx_cpc_all[i].name;
    }
    return "unknown";
}

/*
 * Parses SX_CPC into one bit per entry of sx_cpc_all: "a,b" keeps those,
 * "^a,b" drops those, "" keeps all. *named_p gets the bits named
 * explicitly in an include list.
 */
static int sx_cpc_parse_spec(const char *spec, unsigned *keep_p, unsigned *named_p)
{
    unsigned all = (1u << SX_CPC_ALL_COUNT) - 1, named = 0;
    bool exclude = false;

    *named_p = 0;
    if (spec == NULL || spec[0] == '\0') {
        *keep_p = all;
        return SX_OK;
    }
    if (spec[0] == '^') {
        exclude = true;
        spec++;
    }
    const char *p = spec;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        size_t i;
        for (i = 0; i < SX_CPC_ALL_COUNT; i++) {
            if (strlen(sx_cpc_all[i].name) == len && strncmp(p, sx_cpc_all[i].name, len) == 0)
                break;
        }
        if (i == SX_CPC_ALL_COUNT) {
            sx_error("cpc",
                     "SX_CPC=\"%s%s\": unknown connection method \"%.*s\" (known: handshake, "
                     "implicit, oob, rdmacm; \"a,b\" keeps those, \"^a,b\" drops those)",
                     exclude ? "^" : "", spec, (int)len, p);
            return SX_ERR_INVALID_PARAM;
        }
        named |= 1u << i;
        if (end == NULL)
            break;
        p = end + 1;
    }
    *keep_p = exclude ? (all & ~named) : named;
    *named_p = exclude ? 0 : named;
    return SX_OK;
}

bool sx_cpc_requested(const char *spec, const char *name)
{
    unsigned keep, named;
    if (name == NULL || sx_cpc_parse_spec(spec, &keep, &named) != SX_OK)
        return false;
    for (size_t i = 0; i < SX_CPC_ALL_COUNT; i++) {
        if (strcmp(sx_cpc_all[i].name, name) == 0)
            return (named & (1u << i)) != 0;
    }
    return false;
}

bool sx_cpc_oob_requested(const char *spec)
{
    return sx_cpc_requested(spec, sx_cpc_oob.name);
}

/* Builds one module per shard of @p comp into a new array. */
static int sx_cpc_query_all(struct sx_engine *e, const sx_cpc_component_t *comp,
                            sx_cpc_module_t **mods_p)
{
    sx_cpc_module_t *mods = calloc(e->nshards, sizeof(*mods));
    if (mods == NULL)
        return SX_ERR_NO_MEMORY;
    for (unsigned s = 0; s < e->nshards; s++) {
        mods[s].component = comp;
        mods[s].engine = e;
        mods[s].shard = s;
        mods[s].priority = comp->priority;
        int rc = comp->query(e, &mods[s]);
        if (rc != SX_OK) {
            free(mods);
            return rc;
        }
    }
    *mods_p = mods;
    return SX_OK;
}

int sx_cpc_engine_init(struct sx_engine *e)
{
    unsigned keep, named;
    int rc = sx_cpc_parse_spec(e->cfg.cpc, &keep, &named);
    if (rc != SX_OK)
        return rc;

    /* The self peer always connects implicitly, whatever SX_CPC says. */
    rc = sx_cpc_query_all(e, &sx_cpc_implicit, &e->cpc_self_mods);
    if (rc != SX_OK)
        return rc;
    for (size_t i = 0; i < SX_CPC_ALL_COUNT; i++) {
        const sx_cpc_component_t *comp = sx_cpc_all[i].comp;
        if (!(keep & (1u << i)))
            continue;
        if (comp == NULL) {
            if (named & (1u << i))
                sx_warn("cpc", "SX_CPC names %s, but this build lacks it: %s", sx_cpc_all[i].name,
                        sx_cpc_all[i].missing);
            continue;
        }
        bool inited = false;
        rc = comp->init != NULL ? comp->init(e) : SX_OK;
        if (rc == SX_OK) {
            inited = true;
            rc = sx_cpc_query_all(e, comp, &e->cpc_mods[e->ncpc]);
        }
        if (rc != SX_OK) {
            /* A component that started something (rdmacm: a thread) stops
             * it before it is dropped, whatever the reason. */
            if (comp->stop != NULL && inited)
                comp->stop(e);
            if (comp->finalize != NULL)
                comp->finalize(e);
        }
        if (rc == SX_ERR_UNSUPPORTED) {
            if (named & (1u << i))
                sx_warn("cpc", "SX_CPC names %s, but it cannot run in this engine", comp->name);
            continue;
        }
        if (rc != SX_OK)
            return rc;
        e->cpc[e->ncpc++] = comp;
    }
    if (e->ncpc == 0) {
        sx_error("cpc", "SX_CPC=\"%s\" leaves no connection method that can run", e->cfg.cpc);
        return SX_ERR_INVALID_PARAM;
    }
    return SX_OK;
}

void sx_cpc_engine_stop(struct sx_engine *e)
{
    for (unsigned k = 0; k < e->ncpc; k++) {
        if (e->cpc[k]->stop != NULL)
            e->cpc[k]->stop(e);
    }
}

void sx_cpc_engine_fini(struct sx_engine *e)
{
    sx_cpc_engine_stop(e);
    for (unsigned k = 0; k < e->ncpc; k++) {
        if (e->cpc[k]->finalize != NULL)
            e->cpc[k]->finalize(e);
        free(e->cpc_mods[k]);
        e->cpc_mods[k] = NULL;
    }
    e->ncpc = 0;
    free(e->cpc_self_mods);
    e->cpc_self_mods = NULL;
}

/*
 * The offers section of a card:
 *   u8 count, then per offer: u8 id, u8 priority, u8 blob length, blob
 * Offers are the same on every shard, so shard 0's modules speak for all.
 */
size_t sx_cpc_card_write(struct sx_engine *e, uint8_t *out, size_t cap)
{
    size_t off = 1;

    if (cap < 1)
        return 0;
    out[0] = (uint8_t)e->ncpc;
    for (unsigned k = 0; k < e->ncpc; k++) {
        const sx_cpc_module_t *m = &e->cpc_mods[k][0];
        if (off + 3 + m->blob_len > cap)
            return 0;
        out[off] = m->component->id;
        out[off + 1] = m->priority;
        out[off + 2] = m->blob_len;
        memcpy(out + off + 3, m->blob, m->blob_len);
        off += 3 + (size_t)m->blob_len;
    }
    return off;
}

/* Whether @p id names a component this build knows of, built or not. */
static bool sx_cpc_id_known(uint8_t id)
{
    return strcmp(sx_cpc_name(id), "unknown") != 0;
}

/*
 * A card may offer more components than SX_CPC_MAX, or ones this build
 * has never heard of: a newer peer with a fifth method must still be able
 * to talk to us through the ones we share. Every offer is checked, so a
 * malformed section is still refused whole; of the well-formed ones, those
 * we know are kept first, and unknown ones only while there is room (they
 * are never chosen, but the "no method in common" diagnosis names them).
 */
size_t sx_cpc_card_parse(const uint8_t *in, size_t len, sx_cpc_offer_t *offers, unsigned *count_p)
{
    if (len < 1)
        return 0;
    unsigned n = in[0], kept = 0;
    size_t off = 1;
    for (unsigned k = 0; k < n; k++) {
        if (len - off < 3 || in[off + 2] > SX_CPC_BLOB_MAX || len - off - 3 < in[off + 2] ||
            in[off + 1] > 100)
            return 0;
        sx_cpc_offer_t o = {.id = in[off], .priority = in[off + 1], .blob_len = in[off + 2]};
        memcpy(o.blob, in + off + 3, o.blob_len);
        off += 3 + (size_t)o.blob_len;
        if (kept < SX_CPC_MAX) {
            offers[kept++] = o;
            continue;
        }
        if (!sx_cpc_id_known(o.id))
            continue;
        for (unsigned j = 0; j < kept; j++) {
            if (!sx_cpc_id_known(offers[j].id)) {
                offers[j] = o;
                break;
            }
        }
    }
    *count_p = kept;
    return off;
}

int sx_cpc_select(struct sx_engine *e, struct sx_peer *peer, const sx_cpc_offer_t *offers,
                  unsigned count)
{
    int best = -1, best_offer = -1;
    unsigned best_score = 0;

    if (peer->is_self) {
        peer->cpc_mods = e->cpc_self_mods;
        return SX_OK;
    }
    for (unsigned k = 0; k < e->ncpc; k++) {
        for (unsigned o = 0; o < count; o++) {
            if (offers[o].id != e->cpc[k]->id)
                continue;
            unsigned mine = e->cpc_mods[k][0].priority, theirs = offers[o].priority;
            /* Both ends compute the same score from the same two numbers;
             * ties go to the higher id. */
            unsigned score = (mine > theirs ? mine : theirs) * 256u + e->cpc[k]->id;
            if (best < 0 || score > best_score) {
                best = (int)k;
                best_offer = (int)o;
                best_score = score;
            }
        }
    }
    if (best < 0) {
        char ours[64] = "", theirs[64] = "";
        size_t a = 0, b = 0;
        for (unsigned k = 0; k < e->ncpc && a < sizeof(ours); k++)
            a +=
                (size_t)snprintf(ours + a, sizeof(ours) - a, "%s%s", k ? "," : "", e->cpc[k]->name);
        for (unsigned o = 0; o < count && b < sizeof(theirs); o++)
            b += (size_t)snprintf(theirs + b, sizeof(theirs) - b, "%s%s", o ? "," : "",
                                  sx_cpc_name(offers[o].id));
        sx_error("cpc",
                 "sx_peer_add: no connection method in common with peer %llu: we offer %s, it "
                 "offers %s (see SX_CPC)",
                 (unsigned long long)peer->id, ours, count ? theirs : "none");
        return SX_ERR_UNSUPPORTED;
    }
    peer->cpc_mods = e->cpc_mods[best];
    peer->cpc_offer = offers[best_offer];
    if (e->cpc[best]->peer_init != NULL)
        return e->cpc[best]->peer_init(e, peer);
    return SX_OK;
}
