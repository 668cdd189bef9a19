/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The modex: every process of a job publishes a blob (its business card)
 * and reads everyone else's, as Open MPI's modex does
 * (../shared/seeds/modex.h.txt). Backends, an ops table each:
 *
 *   pmix    PMIx_Put / Commit / Fence / Get; chosen when a PMIx launcher
 *           (Open MPI's mpirun, prterun, srun) started the process.
 *   sxrun   the sx_run launcher's rendezvous over the OOB (SX_RUN_ADDR).
 *   manual  no launcher: the caller exchanges cards itself with
 *           sx_engine_address / sx_peer_add; sx_engine_join refuses.
 *
 * SX_MODEX=auto|pmix|sxrun|manual picks one; auto takes the first whose
 * detect() says the process was started by it (pmix, then sxrun).
 *
 * Threads: a modex belongs to the engine that opened it; exchange and get
 * are called by one thread at a time (sx_engine_join holds the engine's
 * join lock). fence_nb's callback may run on any thread.
 */
#ifndef SX_BOOTSTRAP_MODEX_H
#define SX_BOOTSTRAP_MODEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/oob.h"

typedef struct sx_modex sx_modex_t;
typedef void (*sx_modex_cb_t)(void *arg, int status);

typedef struct sx_modex_ops {
    const char *name;
    /** Whether this process was started by this backend's launcher (looks
     *  at the environment only). Never blocks. */
    bool (*detect)(void);
    /** Connects to the launcher; sets m->rank and m->size. May block
     *  briefly. @p oob: the engine's OOB endpoint (sxrun needs it). */
    int (*init)(sx_modex_t *m, sx_oob_t *oob);
    /** Publishes @p blob and waits until every process of the job has
     *  published its own. Blocks (start-up only). */
    int (*exchange)(sx_modex_t *m, const void *blob, size_t len);
    /** Copies rank @p rank's blob: SX_ERR_TRUNCATED with *len_p set when
     *  @p buf is too small. After exchange only. */
    int (*get)(sx_modex_t *m, uint32_t rank, void *buf, size_t *len_p);
    /** A barrier of the whole job that does not block: @p cb runs once,
     *  on any thread, when every process has entered it (or it failed). */
    int (*fence_nb)(sx_modex_t *m, sx_modex_cb_t cb, void *arg);
    /** Leaves the job. Never NULL. */
    void (*fini)(sx_modex_t *m);
} sx_modex_ops_t;

struct sx_modex {
    const sx_modex_ops_t *ops;
    uint32_t rank;
    uint32_t size;
    void *priv; /* the backend's */
};

extern const sx_modex_ops_t sx_modex_pmix_ops;
extern const sx_modex_ops_t sx_modex_sxrun_ops;
/* The sxrun modex keeps an RDV_ERROR's first SX_MODEX_SXRUN_ERROR_MAX - 1
 * bytes (its text for the log, then the status the launcher names). */
#define SX_MODEX_SXRUN_ERROR_MAX 1024

/** Environment of processes started by sx_run. */
#define SX_RUN_ENV_RANK "SX_RUN_RANK" /* 0 .. size-1 */
#define SX_RUN_ENV_SIZE "SX_RUN_SIZE"
#define SX_RUN_ENV_ADDR "SX_RUN_ADDR" /* the launcher's OOB address, "host:port" */
/* The rank's index among the ranks started on its host, and their number
 * (what mpirun gives as OMPI_COMM_WORLD_LOCAL_RANK and _LOCAL_SIZE): a
 * process that pins itself to a core uses them, not the job's rank. */
#define SX_RUN_ENV_LOCAL_RANK "SX_RUN_LOCAL_RANK"
#define SX_RUN_ENV_LOCAL_SIZE "SX_RUN_LOCAL_SIZE"

/**
 * Opens the backend @p choice (SX_MODEX_AUTO, _PMIX, _SXRUN, _MANUAL of
 * common/config.h, as SX_MODEX parsed it).
 * SX_ERR_NO_LAUNCHER, with a log line, for "manual", for "auto" when no
 * launcher started this process, and for a backend whose launcher did not
 * start it: the caller then exchanges cards itself.
 */
int sx_modex_open(int choice, sx_oob_t *oob, sx_modex_t **m_p);
void sx_modex_close(sx_modex_t *m);

#endif /* SX_BOOTSTRAP_MODEX_H */
