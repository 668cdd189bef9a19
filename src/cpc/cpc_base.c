/* SPDX-License-Identifier: BSD-3-Clause */
/* The CPC framework: which components run, their card offers, and the
 * choice per peer (cpc.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "build_config.h"
#include "common/log.h"
#include "cpc/cpc.h"
#include "shard/peer.h"

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
    return sx_cpc_requested(spec, sx_cpc_oob.ep.name);
}

/* Starts @p comp's instance: init, then one module per shard. */
static int sx_cpc_inst_start(sx_cpc_t *cpc, sx_cpc_inst_t *inst, const sx_cpc_component_t *comp)
{
    const sx_cpc_env_t *env = &cpc->env;

    memset(inst, 0, sizeof(*inst));
    inst->method.ops = &comp->ep;
    inst->method.ctx = inst;
    inst->comp = comp;
    inst->env = env;
    int rc = comp->init != NULL ? comp->init(inst) : SX_OK;
    if (rc != SX_OK) {
        if (comp->finalize != NULL)
            comp->finalize(inst);
        return rc;
    }
    inst->mods = calloc(env->nshards, sizeof(*inst->mods));
    if (inst->mods == NULL)
        rc = SX_ERR_NO_MEMORY;
    for (unsigned s = 0; rc == SX_OK && s < env->nshards; s++) {
        inst->mods[s].component = comp;
        inst->mods[s].shard = s;
        inst->mods[s].priority = comp->priority;
        rc = comp->query(inst, &inst->mods[s]);
    }
    if (rc != SX_OK) {
        /* A component that started something (rdmacm: a thread) stops it
         * before it is dropped, whatever the reason. */
        if (comp->stop != NULL)
            comp->stop(inst);
        if (comp->finalize != NULL)
            comp->finalize(inst);
        free(inst->mods);
        inst->mods = NULL;
    }
    return rc;
}

int sx_cpc_init(sx_cpc_t *cpc)
{
    unsigned keep, named;
    int rc = sx_cpc_parse_spec(cpc->env.spec, &keep, &named);
    if (rc != SX_OK)
        return rc;

    /* The self peer always connects implicitly, whatever SX_CPC says. */
    rc = sx_cpc_inst_start(cpc, &cpc->self, &sx_cpc_implicit);
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
        rc = sx_cpc_inst_start(cpc, &cpc->inst[cpc->n], comp);
        if (rc == SX_ERR_UNSUPPORTED) {
            if (named & (1u << i))
                sx_warn("cpc", "SX_CPC names %s, but it cannot run in this engine", comp->ep.name);
            continue;
        }
        if (rc != SX_OK)
            return rc;
        cpc->n++;
    }
    if (cpc->n == 0) {
        sx_error("cpc", "SX_CPC=\"%s\" leaves no connection method that can run", cpc->env.spec);
        return SX_ERR_INVALID_PARAM;
    }
    return SX_OK;
}

void sx_cpc_stop(sx_cpc_t *cpc)
{
    for (unsigned k = 0; k < cpc->n; k++) {
        if (cpc->inst[k].comp->stop != NULL)
            cpc->inst[k].comp->stop(&cpc->inst[k]);
    }
}

static void sx_cpc_inst_fini(sx_cpc_inst_t *inst)
{
    if (inst->comp != NULL && inst->comp->finalize != NULL)
        inst->comp->finalize(inst);
    free(inst->mods);
    inst->mods = NULL;
    inst->comp = NULL;
}

void sx_cpc_fini(sx_cpc_t *cpc)
{
    sx_cpc_stop(cpc);
    for (unsigned k = 0; k < cpc->n; k++)
        sx_cpc_inst_fini(&cpc->inst[k]);
    cpc->n = 0;
    sx_cpc_inst_fini(&cpc->self);
}

bool sx_cpc_known(uint8_t id)
{
    return strcmp(sx_cpc_name(id), "unknown") != 0;
}

int sx_cpc_select(sx_cpc_t *cpc, struct sx_peer *peer, const sx_conn_offer_t *offers,
                  unsigned count)
{
    int best = -1, best_offer = -1;
    unsigned best_score = 0;

    if (peer->is_self) {
        peer->conn_method = &cpc->self.method;
        return SX_OK;
    }
    for (unsigned k = 0; k < cpc->n; k++) {
        const sx_cpc_inst_t *inst = &cpc->inst[k];
        for (unsigned o = 0; o < count; o++) {
            if (offers[o].id != inst->comp->ep.id)
                continue;
            unsigned mine = inst->mods[0].priority, theirs = offers[o].priority;
            /* Both ends compute the same score from the same two numbers;
             * ties go to the higher id. */
            unsigned score = (mine > theirs ? mine : theirs) * 256u + inst->comp->ep.id;
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
        for (unsigned k = 0; k < cpc->n && a < sizeof(ours); k++)
            a += (size_t)snprintf(ours + a, sizeof(ours) - a, "%s%s", k ? "," : "",
                                  cpc->inst[k].comp->ep.name);
        for (unsigned o = 0; o < count && b < sizeof(theirs); o++)
            b += (size_t)snprintf(theirs + b, sizeof(theirs) - b, "%s%s", o ? "," : "",
                                  sx_cpc_name(offers[o].id));
        sx_error("cpc",
                 "sx_peer_add: no connection method in common with %s: we offer %s, it "
                 "offers %s (see SX_CPC)",
                 peer->name, ours, count ? theirs : "none");
        return SX_ERR_UNSUPPORTED;
    }
    sx_cpc_inst_t *inst = &cpc->inst[best];
    peer->conn_method = &inst->method;
    peer->conn_offer = offers[best_offer];
    if (inst->comp->peer_init != NULL)
        return inst->comp->peer_init(inst, peer);
    return SX_OK;
}
