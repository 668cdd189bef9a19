/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The transports built into this library, by name, and the engine's choice
 * of its network transport (SX_TRANSPORTS).
 *
 * Selection follows Open MPI's BTL selection: self reaches the engine
 * itself and nothing else; every other engine is reached by the network
 * transport with the highest exclusivity among those SX_TRANSPORTS allows
 * and whose query finds what it needs. Today an engine runs one network
 * transport, named in its business card, and a peer must run the same one
 * (sx_peer_add checks). The hardware ones (ofi, verbs) join the table
 * when their dependencies are found at build time; their names are known
 * either way, so that a list naming one in a build without it gets a clear
 * answer instead of "unknown".
 */
#include "transports/transport.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <shardx.h>

#include "build_config.h"
#include "common/log.h"

typedef struct sx_tl_known {
    const char *name;
    const sx_tl_ops_t *ops; /* NULL when not built */
    bool network;
    const char *missing; /* why it is not built */
    bool named_only;     /* allowed only by an include list naming it */
} sx_tl_known_t;

/* The order is the tie-break between equal exclusivities. */
static const sx_tl_known_t sx_tl_known[SX_TL_KNOWN] = {
    {"udp", &sx_tl_udp_ops, true, NULL, false},
#if SX_HAVE_OFI
    {"ofi", &sx_tl_ofi_ops, true, NULL, false},
#else
    {"ofi", NULL, true, "libfabric was not found when this library was built", false},
#endif
#if SX_HAVE_VERBS
    {"verbs", &sx_tl_verbs_ops, true, NULL, false},
#else
    {"verbs", NULL, true, "libibverbs was not found when this library was built", false},
#endif
    /* No network at all: sx_bench's injection-only variant. Only an
     * include list naming it allows it (excluding the others must not
     * fall back to it), and its exclusivity is the lowest. */
    {"sink", &sx_tl_sink_ops, true, NULL, true},
    {"self", &sx_tl_self_ops, false, NULL, false},
};

const sx_tl_ops_t *sx_tl_find(const char *name)
{
    if (name == NULL)
        return NULL;
    if (strcmp(name, sx_tl_fault_ops.name) == 0)
        return &sx_tl_fault_ops;
    for (size_t i = 0; i < SX_TL_KNOWN; i++) {
        if (sx_tl_known[i].ops != NULL && strcmp(sx_tl_known[i].name, name) == 0)
            return sx_tl_known[i].ops;
    }
    return NULL;
}

static void sx_tl_known_names(char *buf, size_t cap)
{
    size_t off = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < SX_TL_KNOWN && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? ", " : "", sx_tl_known[i].name);
}

/* Marks the names of @p spec in @p named; sets *exclude_p. SX_OK or
 * SX_ERR_INVALID_PARAM with the reason logged. */
static int sx_tl_parse(const char *spec, bool *named, bool *exclude_p)
{
    char known[64];
    const char *p = spec;
    int sign = -1; /* -1: not known yet, 0: include, 1: exclude */

    sx_tl_known_names(known, sizeof(known));
    for (;;) {
        bool neg = (*p == '^');
        if (neg)
            p++;
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == 0) {
            sx_error("config",
                     "invalid value SX_TRANSPORTS='%s': an empty name; expected a comma-separated "
                     "list of %s, or '^' and a list to exclude",
                     spec, known);
            return SX_ERR_INVALID_PARAM;
        }
        /* "^a,b" excludes both; "^a,^b" says the same; "a,^b" mixes. */
        if (sign == -1)
            sign = neg;
        else if (neg && sign == 0) {
            sx_error("config",
                     "invalid value SX_TRANSPORTS='%s': a list either names the transports to "
                     "use or, after '^', those to exclude, not both",
                     spec);
            return SX_ERR_INVALID_PARAM;
        }
        size_t i = 0;
        while (i < SX_TL_KNOWN &&
               !(strlen(sx_tl_known[i].name) == len && strncmp(sx_tl_known[i].name, p, len) == 0))
            i++;
        if (i == SX_TL_KNOWN) {
            bool fault = (len == 5 && strncmp(p, "fault", 5) == 0);
            sx_error("config",
                     "invalid value SX_TRANSPORTS='%s': '%.*s' is not a transport%s; %s %s", spec,
                     (int)len, p, fault ? " but a decorator over one (SX_FAULT turns it on)" : "",
                     "known transports:", known);
            return SX_ERR_INVALID_PARAM;
        }
        named[i] = true;
        if (end == NULL)
            break;
        p = end + 1;
    }
    *exclude_p = (sign == 1);
    return SX_OK;
}

int sx_tl_select(const char *spec, const sx_tl_config_t *config, sx_tl_choice_t *choices,
                 const sx_tl_ops_t **net_p)
{
    bool named[SX_TL_KNOWN] = {false};
    bool exclude = false;
    int rc;

    if (config == NULL || choices == NULL || net_p == NULL)
        return SX_ERR_INVALID_PARAM;
    *net_p = NULL;
    if (spec == NULL)
        spec = "";
    if (spec[0] != '\0' && (rc = sx_tl_parse(spec, named, &exclude)) != SX_OK)
        return rc;

    bool any_network = false;
    for (size_t i = 0; i < SX_TL_KNOWN; i++) {
        const sx_tl_known_t *k = &sx_tl_known[i];
        sx_tl_choice_t *c = &choices[i];
        memset(c, 0, sizeof(*c));
        c->name = k->name;
        c->ops = k->ops;
        c->network = k->network;
        c->allowed = k->named_only ? named[i] && !exclude : spec[0] == '\0' || named[i] != exclude;
        if (!k->network) {
            /* Implied by an include list; only "^self" takes it away. */
            if (exclude && named[i]) {
                sx_error("config",
                         "invalid value SX_TRANSPORTS='%s': %s cannot be excluded; it is how an "
                         "engine reaches itself",
                         spec, k->name);
                return SX_ERR_INVALID_PARAM;
            }
            c->allowed = c->available = c->selected = 1;
            c->exclusivity = SX_TL_EXCL_SELF;
            snprintf(c->detail, sizeof(c->detail), "this engine itself");
            continue;
        }
        if (k->ops == NULL) {
            snprintf(c->detail, sizeof(c->detail), "not built: %s", k->missing);
            if (named[i] && !exclude) {
                sx_error("config", "invalid value SX_TRANSPORTS='%s': this build lacks %s (%s)",
                         spec, k->name, k->missing);
                return SX_ERR_INVALID_PARAM;
            }
            c->allowed = 0;
            continue;
        }
        if (!c->allowed)
            snprintf(c->detail, sizeof(c->detail), "%s",
                     k->named_only ? "runs only when SX_TRANSPORTS names it"
                                   : "excluded by SX_TRANSPORTS");
        any_network |= c->allowed;
    }
    if (!any_network) {
        sx_error("config",
                 "invalid value SX_TRANSPORTS='%s': it leaves no network transport; allowed: "
                 "udp%s%s",
                 spec, SX_HAVE_OFI ? ", ofi" : "", SX_HAVE_VERBS ? ", verbs" : "");
        return SX_ERR_INVALID_PARAM;
    }

    /* Query every allowed network transport; the best available wins. */
    int best = -1, last_rc = SX_ERR_NO_DEVICE;
    for (size_t i = 0; i < SX_TL_KNOWN; i++) {
        sx_tl_choice_t *c = &choices[i];
        if (!c->network || !c->allowed)
            continue;
        sx_tl_query_t q = {.exclusivity = c->ops->exclusivity};
        rc = SX_OK;
        /* Any SX_TRANSPORTS that leaves it allowed asks for it; only the
         * default lets a costly transport decline after a cheap check. */
        if (c->ops->query != NULL)
            rc = c->ops->query(config, spec[0] != '\0', &q);
        snprintf(c->detail, sizeof(c->detail), "%s", q.detail);
        if (rc != SX_OK) {
            sx_debug("transport", "%s cannot run: %s", c->name, q.detail);
            last_rc = rc;
            continue;
        }
        c->available = 1;
        c->exclusivity = q.exclusivity;
        if (best < 0 || c->exclusivity > choices[best].exclusivity)
            best = (int)i;
    }
    if (best < 0) {
        /* Say why each allowed one cannot run. */
        char why[512];
        size_t off = 0;
        why[0] = '\0';
        for (size_t i = 0; i < SX_TL_KNOWN && off < sizeof(why); i++) {
            if (choices[i].network && choices[i].allowed)
                off += (size_t)snprintf(why + off, sizeof(why) - off, "%s%s: %s", off ? "; " : "",
                                        choices[i].name, choices[i].detail);
        }
        sx_error("transport", "no network transport can run%s%s%s: %s",
                 spec[0] ? " (SX_TRANSPORTS='" : "", spec, spec[0] ? "')" : "", why);
        /* A parameter error (a bad SX_OFI_PROVIDER) says more than "no
         * device" when it is the only candidate's. */
        return last_rc == SX_ERR_INVALID_PARAM ? SX_ERR_INVALID_PARAM : SX_ERR_NO_DEVICE;
    }
    choices[best].selected = 1;
    *net_p = choices[best].ops;
    sx_debug("transport", "network transport: %s (exclusivity %u; %s)", choices[best].name,
             choices[best].exclusivity, choices[best].detail);
    return SX_OK;
}
