/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The `pmix` modex backend: business cards through a PMIx server, the one
 * an Open MPI mpirun, prterun or srun runs for the processes it starts.
 *
 *   exchange   PMIx_Put(PMIX_GLOBAL, "shardx.card", byte object),
 *              PMIx_Commit, then PMIx_Fence over every process of our
 *              namespace with PMIX_COLLECT_DATA, so that once the fence
 *              returns every card is held by our local PMIx server (the
 *              "full modex" of Open MPI, ../shared/seeds/modex.h.txt) and
 *              a get never waits for the rank that published it.
 *   get        PMIx_Get(rank, "shardx.card").
 *   fence_nb   PMIx_Fence_nb over the namespace, without data. Either it
 *              returns SX_OK and the callback runs exactly once (with
 *              SX_OK, or the error the fence ended with), or it returns an
 *              error and the callback never runs.
 *
 * PMIx_Init is reference counted by the PMIx library, so several engines
 * (or an MPI library beside us) may each initialise it: every successful
 * init here is matched by exactly one PMIx_Finalize in fini.
 *
 * Threads: PMIx runs its own progress thread; the blocking calls here wait
 * for it. fence_nb's callback runs on that thread, so the caller's callback
 * must not call the blocking ops (exchange, get, fini) of this modex: PMIx
 * would wait on the very thread that is waiting for it.
 *
 * Built only when CMake found PMIx (SX_HAVE_PMIX); otherwise this file
 * defines a table whose detect() says no and whose init() says why.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "build_config.h"
#include "common/log.h"

#if SX_HAVE_PMIX

#include <pmix.h>

/* The key our card is published under; PMIx keys are per process, so one
 * key serves every rank. */
#define SX_PMIX_CARD_KEY "shardx.card"

typedef struct sx_modex_pmix {
    pmix_proc_t self;     /* our namespace and rank, from PMIx_Init */
    pmix_proc_t everyone; /* our namespace, PMIX_RANK_WILDCARD */
    bool exchanged;       /* exchange succeeded: get may be called */
} sx_modex_pmix_t;

/* One fence_nb in flight: owned by PMIx between PMIx_Fence_nb and the
 * callback, which frees it. The procs array lives here rather than on the
 * caller's stack so that it outlives the call whatever PMIx does with it. */
typedef struct sx_pmix_fence_op {
    sx_modex_cb_t cb;
    void *arg;
    pmix_proc_t everyone;
} sx_pmix_fence_op_t;

/* A PMIx status as ours. A failure here means the launcher's server is
 * gone or refused us, which for the caller is an I/O error unless a more
 * precise code fits. */
static int sx_pmix_status(pmix_status_t rc)
{
    switch (rc) {
    case PMIX_SUCCESS:
        return SX_OK;
    case PMIX_ERR_NOMEM:
        return SX_ERR_NO_MEMORY;
    case PMIX_ERR_NOT_FOUND:
        return SX_ERR_NOT_FOUND;
    case PMIX_ERR_BAD_PARAM:
        return SX_ERR_INVALID_PARAM;
    case PMIX_ERR_NOT_SUPPORTED:
        return SX_ERR_UNSUPPORTED;
    default:
        return SX_ERR_IO;
    }
}

static bool sx_pmix_detect(void)
{
    /* Every PMIx server exports both to the processes it starts (Open MPI's
     * mpirun, prterun, Slurm's srun --mpi=pmix). */
    const char *rank = getenv("PMIX_RANK");
    const char *nspace = getenv("PMIX_NAMESPACE");

    return rank != NULL && rank[0] != '\0' && nspace != NULL && nspace[0] != '\0';
}

static int sx_pmix_init(sx_modex_t *m, sx_oob_t *oob)
{
    (void)oob; /* the PMIx server is our rendezvous; the OOB is not needed */
    if (m == NULL)
        return SX_ERR_INVALID_PARAM;

    sx_modex_pmix_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return SX_ERR_NO_MEMORY;

    pmix_status_t rc = PMIx_Init(&p->self, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        sx_error("modex", "pmix: PMIx_Init failed: %s (PMIX_RANK=%s, PMIX_NAMESPACE=%s)",
                 PMIx_Error_string(rc), getenv("PMIX_RANK") ? getenv("PMIX_RANK") : "(unset)",
                 getenv("PMIX_NAMESPACE") ? getenv("PMIX_NAMESPACE") : "(unset)");
        free(p);
        /* Without a server to talk to there is no launcher for us. */
        return rc == PMIX_ERR_UNREACH || rc == PMIX_ERR_INIT ? SX_ERR_NO_LAUNCHER
                                                             : sx_pmix_status(rc);
    }
    PMIX_PROC_LOAD(&p->everyone, p->self.nspace, PMIX_RANK_WILDCARD);

    /* The job's size is a property of the namespace: ask the wildcard rank. */
    pmix_value_t *val = NULL;
    int status = SX_OK;
    uint32_t size = 0;
    rc = PMIx_Get(&p->everyone, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS) {
        sx_error("modex", "pmix: PMIx_Get(%s) failed: %s", PMIX_JOB_SIZE, PMIx_Error_string(rc));
        status = sx_pmix_status(rc);
    } else if (val == NULL || val->type != PMIX_UINT32) {
        sx_error("modex", "pmix: PMIx_Get(%s) returned a %s, not a uint32", PMIX_JOB_SIZE,
                 val ? PMIx_Data_type_string(val->type) : "NULL value");
        status = SX_ERR_PROTO;
    } else {
        size = val->data.uint32;
    }
    if (val != NULL)
        PMIX_VALUE_RELEASE(val);
    if (status == SX_OK && (size == 0 || p->self.rank >= size)) {
        sx_error("modex", "pmix: rank %u does not fit a job of %u processes", p->self.rank, size);
        status = SX_ERR_PROTO;
    }
    if (status != SX_OK) {
        PMIx_Finalize(NULL, 0);
        free(p);
        return status;
    }

    m->rank = p->self.rank;
    m->size = size;
    m->priv = p;
    sx_debug("modex", "pmix: rank %u of %u in namespace %s", m->rank, m->size, p->self.nspace);
    return SX_OK;
}

static int sx_pmix_exchange(sx_modex_t *m, const void *blob, size_t len)
{
    if (m == NULL || m->priv == NULL || (blob == NULL && len > 0))
        return SX_ERR_INVALID_PARAM;
    sx_modex_pmix_t *p = m->priv;

    /* PMIx_Put copies the value, so it may point at the caller's blob. */
    pmix_value_t val;
    memset(&val, 0, sizeof(val));
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = (char *)blob;
    val.data.bo.size = len;
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, SX_PMIX_CARD_KEY, &val);
    if (rc != PMIX_SUCCESS) {
        sx_error("modex", "pmix: PMIx_Put(%s, %zu bytes) failed: %s", SX_PMIX_CARD_KEY, len,
                 PMIx_Error_string(rc));
        return sx_pmix_status(rc);
    }
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) {
        sx_error("modex", "pmix: PMIx_Commit failed: %s", PMIx_Error_string(rc));
        return sx_pmix_status(rc);
    }

    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    rc = PMIx_Fence(&p->everyone, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        sx_error("modex", "pmix: PMIx_Fence(%s, collect data) failed: %s", p->everyone.nspace,
                 PMIx_Error_string(rc));
        return sx_pmix_status(rc);
    }
    p->exchanged = true;
    return SX_OK;
}

static int sx_pmix_get(sx_modex_t *m, uint32_t rank, void *buf, size_t *len_p)
{
    if (m == NULL || m->priv == NULL || len_p == NULL || (buf == NULL && *len_p > 0))
        return SX_ERR_INVALID_PARAM;
    sx_modex_pmix_t *p = m->priv;
    if (!p->exchanged) {
        /* Before the fence PMIx_Get would block until that rank published,
         * which is a hang, not an answer. */
        sx_error("modex", "pmix: get(rank %u) before exchange", rank);
        return SX_ERR_INVALID_PARAM;
    }
    if (rank >= m->size)
        return SX_ERR_OUT_OF_RANGE;

    pmix_proc_t who;
    PMIX_PROC_LOAD(&who, p->self.nspace, rank);
    pmix_value_t *val = NULL;
    pmix_status_t rc = PMIx_Get(&who, SX_PMIX_CARD_KEY, NULL, 0, &val);
    if (rc != PMIX_SUCCESS) {
        sx_error("modex", "pmix: PMIx_Get(rank %u, %s) failed: %s", rank, SX_PMIX_CARD_KEY,
                 PMIx_Error_string(rc));
        if (val != NULL)
            PMIX_VALUE_RELEASE(val);
        return sx_pmix_status(rc);
    }
    if (val == NULL || val->type != PMIX_BYTE_OBJECT) {
        sx_error("modex", "pmix: PMIx_Get(rank %u, %s) returned a %s, not a byte object", rank,
                 SX_PMIX_CARD_KEY, val ? PMIx_Data_type_string(val->type) : "NULL value");
        if (val != NULL)
            PMIX_VALUE_RELEASE(val);
        return SX_ERR_PROTO;
    }

    size_t len = val->data.bo.size;
    int status = SX_OK;
    if (len > *len_p) {
        status = SX_ERR_TRUNCATED;
    } else if (len > 0) {
        memcpy(buf, val->data.bo.bytes, len);
    }
    *len_p = len;
    PMIX_VALUE_RELEASE(val);
    return status;
}

/* PMIx's completion of a fence_nb, on the PMIx progress thread. PMIx calls
 * it once per accepted PMIx_Fence_nb, so the caller's callback runs once. */
static void sx_pmix_fence_done(pmix_status_t rc, void *cbdata)
{
    sx_pmix_fence_op_t *op = cbdata;
    int status = SX_OK;
    if (rc != PMIX_SUCCESS) {
        sx_error("modex", "pmix: PMIx_Fence_nb(%s) completed with an error: %s",
                 op->everyone.nspace, PMIx_Error_string(rc));
        status = sx_pmix_status(rc);
    }
    sx_modex_cb_t cb = op->cb;
    void *arg = op->arg;
    free(op);
    cb(arg, status);
}

static int sx_pmix_fence_nb(sx_modex_t *m, sx_modex_cb_t cb, void *arg)
{
    if (m == NULL || m->priv == NULL || cb == NULL)
        return SX_ERR_INVALID_PARAM;
    sx_modex_pmix_t *p = m->priv;

    sx_pmix_fence_op_t *op = malloc(sizeof(*op));
    if (op == NULL)
        return SX_ERR_NO_MEMORY;
    op->cb = cb;
    op->arg = arg;
    op->everyone = p->everyone;

    /* PMIx hands op to its progress thread under its own (pthread) locks,
     * which order our writes above before the callback's reads. */
    pmix_status_t rc = PMIx_Fence_nb(&op->everyone, 1, NULL, 0, sx_pmix_fence_done, op);
    if (rc == PMIX_SUCCESS)
        return SX_OK; /* sx_pmix_fence_done owns op now */
    if (rc == PMIX_OPERATION_SUCCEEDED) {
        /* Completed at once (a job of one): PMIx will not call back. */
        free(op);
        cb(arg, SX_OK);
        return SX_OK;
    }
    sx_error("modex", "pmix: PMIx_Fence_nb(%s) failed: %s", p->everyone.nspace,
             PMIx_Error_string(rc));
    free(op);
    return sx_pmix_status(rc);
}

static void sx_pmix_fini(sx_modex_t *m)
{
    if (m == NULL || m->priv == NULL)
        return;
    pmix_status_t rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS)
        sx_warn("modex", "pmix: PMIx_Finalize failed: %s", PMIx_Error_string(rc));
    free(m->priv);
    m->priv = NULL;
}

#else /* !SX_HAVE_PMIX */

/* This build has no PMIx: the backend exists so that SX_MODEX=pmix can be
 * refused with a reason rather than a missing symbol. */
static bool sx_pmix_detect(void)
{
    return false;
}

static int sx_pmix_init(sx_modex_t *m, sx_oob_t *oob)
{
    (void)m;
    (void)oob;
    sx_error("modex", "pmix: shardx was built without PMIx (install libpmix-dev with "
                      "scripts/install-deps.sh and rebuild)");
    return SX_ERR_UNSUPPORTED;
}

static int sx_pmix_exchange(sx_modex_t *m, const void *blob, size_t len)
{
    (void)m;
    (void)blob;
    (void)len;
    return SX_ERR_UNSUPPORTED;
}

static int sx_pmix_get(sx_modex_t *m, uint32_t rank, void *buf, size_t *len_p)
{
    (void)m;
    (void)rank;
    (void)buf;
    (void)len_p;
    return SX_ERR_UNSUPPORTED;
}

static int sx_pmix_fence_nb(sx_modex_t *m, sx_modex_cb_t cb, void *arg)
{
    (void)m;
    (void)cb;
    (void)arg;
    return SX_ERR_UNSUPPORTED;
}

static void sx_pmix_fini(sx_modex_t *m)
{
    (void)m;
}

#endif /* SX_HAVE_PMIX */

const sx_modex_ops_t sx_modex_pmix_ops = {
    .name = "pmix",
    .detect = sx_pmix_detect,
    .init = sx_pmix_init,
    .exchange = sx_pmix_exchange,
    .get = sx_pmix_get,
    .fence_nb = sx_pmix_fence_nb,
    .fini = sx_pmix_fini,
};
