/* SPDX-License-Identifier: BSD-3-Clause */
/* Choosing a modex backend (modex.h). */
#include <stdlib.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "common/config.h"
#include "common/log.h"

int sx_modex_open(int choice, sx_oob_t *oob, sx_modex_t **m_p)
{
    const sx_modex_ops_t *ops = NULL;

    switch (choice) {
    case SX_MODEX_PMIX:
        ops = &sx_modex_pmix_ops;
        break;
    case SX_MODEX_SXRUN:
        ops = &sx_modex_sxrun_ops;
        break;
    case SX_MODEX_MANUAL:
        sx_error("modex", "SX_MODEX=manual: sx_engine_join does not exchange cards; use "
                          "sx_engine_address and sx_peer_add");
        return SX_ERR_NO_LAUNCHER;
    default: /* auto: the launcher that started us, PMIx first */
        ops = sx_modex_pmix_ops.detect()    ? &sx_modex_pmix_ops
              : sx_modex_sxrun_ops.detect() ? &sx_modex_sxrun_ops
                                            : NULL;
        if (ops == NULL) {
            sx_error("modex",
                     "sx_engine_join: no launcher started this process (neither mpirun/PMIx "
                     "nor sx_run); start it with sx_run -n N, or exchange cards with "
                     "sx_engine_address and sx_peer_add");
            return SX_ERR_NO_LAUNCHER;
        }
        break;
    }
    if (!ops->detect()) {
        sx_error("modex", "SX_MODEX=%s, but this process was not started by that launcher (%s)",
                 ops->name,
                 ops == &sx_modex_pmix_ops
                     ? "no PMIX_RANK/PMIX_NAMESPACE in the environment"
                     : "no SX_RUN_ADDR/SX_RUN_RANK/SX_RUN_SIZE in the environment");
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
