/* Choosing a modex backend (modex.h). */
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "common/log.h"

static const sx_modex_ops_t *const sx_modex_backends[] = {
    &sx_modex_pmix_ops,
    &sx_modex_sxrun_ops,
};
#define SX_MODEX_BACKENDS (sizeof(sx_modex_backends) / sizeof(sx_modex_backends[0]))

int sx_modex_open(const char *choice, sx_oob_t *oob, sx_modex_t **m_p)
{
    const sx_modex_ops_t *ops = NULL;
    bool any = (choice == NULL || strcmp(choice, "auto") == 0);

    if (choice != NULL && strcmp(choice, "manual") == 0) {
        sx_error("modex", "SX_MODEX=manual: sx_engine_join does not exchange cards; use "
                          "sx_engine_address and sx_peer_add");
        return SX_ERR_NO_LAUNCHER;
    }
    for (size_t i = 0; i < SX_MODEX_BACKENDS && ops == NULL; i++) {
        const sx_modex_ops_t *b = sx_modex_backends[i];
        if (!any && strcmp(choice, b->name) != 0)
            continue;
        if (b->detect())
            ops = b;
        else if (!any) {
            sx_error("modex", "SX_MODEX=%s, but this process was not started by that launcher (%s)",
                     choice,
                     strcmp(b->name, "pmix") == 0 ? "no PMIX_RANK/PMIX_NAMESPACE in the environment"
                                                  : "no SX_RUN_ADDR/SX_RUN_RANK/SX_RUN_SIZE in "
                                                    "the environment");
            return SX_ERR_NO_LAUNCHER;
        }
    }
    if (ops == NULL) {
        if (any)
            sx_error("modex",
                     "sx_engine_join: no launcher started this process (neither mpirun/PMIx "
                     "nor sx_run); start it with sx_run -n N, or exchange cards with "
                     "sx_engine_address and sx_peer_add");
        else
            sx_error("modex", "SX_MODEX=%s: unknown backend (auto, pmix, sxrun, manual)", choice);
        return SX_ERR_NO_LAUNCHER;
    }
    sx_modex_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return SX_ERR_NO_MEMORY;
    m->ops = ops;
    int rc = ops->init(m, oob);
    if (rc != SX_OK) {
        free(m);
        return rc;
    }
    sx_debug("modex", "joined a job of %u process(es) as rank %u through %s", m->size, m->rank,
             ops->name);
    *m_p = m;
    return SX_OK;
}

void sx_modex_close(sx_modex_t *m)
{
    if (m == NULL)
        return;
    m->ops->fini(m);
    free(m);
}
