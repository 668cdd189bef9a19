/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shardx BTL component: parameters, start-up (engine, business card)
 * and progress. The module's operations are in btl_shardx_module.c.
 */
#include "btl_shardx.h"

#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int shardx_component_register(void);
static int shardx_component_open(void);
static int shardx_component_close(void);
static mca_btl_base_module_t **shardx_component_init(int *num_btls, bool enable_progress_threads,
                                                     bool enable_mpi_threads);

mca_btl_shardx_component_t mca_btl_shardx_component = {
    .super =
        {
            .btl_version =
                {
                    MCA_BTL_DEFAULT_VERSION("shardx"),
                    .mca_open_component = shardx_component_open,
                    .mca_close_component = shardx_component_close,
                    .mca_register_component_params = shardx_component_register,
                },
            .btl_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
            .btl_init = shardx_component_init,
            .btl_progress = mca_btl_shardx_progress,
        },
};

/* The module's limits. shardx carries a message of any size up to
 * SX_MAX_MSG_SIZE in one sx_send and does its own chunking, so these only
 * shape ob1's protocols: eager up to 64 KiB (as btl tcp), send fragments
 * of 64 KiB, and RDMA (RGET by default) for the rest in pieces of up to
 * 1 MiB. The eager limit was 8 KiB, which sent an 8 KiB message (8 KiB
 * and ob1's header) through the rendezvous: mpi_bench mt 2 at 8 KiB took
 * 23-25 us against 4.3-4.8 at 4 KiB; with 64 KiB 8.4-10.1 us, and 32 KiB
 * 15-16 us against 30-34. */
static void shardx_module_defaults(mca_btl_base_module_t *b)
{
    b->btl_component = &mca_btl_shardx_component.super;
    b->btl_eager_limit = 64 * 1024;
    b->btl_rndv_eager_limit = 64 * 1024;
    b->btl_max_send_size = 64 * 1024;
    b->btl_rdma_pipeline_send_length = 64 * 1024;
    b->btl_rdma_pipeline_frag_size = 1024 * 1024;
    b->btl_min_rdma_pipeline_size = 0;
    b->btl_exclusivity = MCA_BTL_EXCLUSIVITY_DEFAULT;
    b->btl_latency = 10;
    b->btl_bandwidth = 10000;
    b->btl_flags =
        MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET | MCA_BTL_FLAGS_SEND_INPLACE;
    b->btl_registration_handle_size = sizeof(mca_btl_base_registration_handle_t);
    b->btl_get_limit = 1024 * 1024;
    b->btl_put_limit = 1024 * 1024;
    b->btl_get_alignment = 0;
    b->btl_put_alignment = 0;
    /* put and get read and write local memory directly: a local buffer
     * never needs a registration. */
    b->btl_get_local_registration_threshold = SIZE_MAX;
    b->btl_put_local_registration_threshold = SIZE_MAX;
}

/* btl_shardx_<name> for every row of shardx's configuration table (except
 * MODEX, which the BTL sets itself): one place to tune the engine, seen by
 * ompi_info, with shardx's own descriptions. */
static void shardx_register_engine_params(mca_btl_shardx_component_t *c)
{
    size_t n = sx_param_count();

    if (n > SHARDX_MAX_ENGINE_PARAMS) {
        opal_output(0,
                    "btl shardx: %zu shardx parameters, room for %d: the rest have no "
                    "btl_shardx_ name (SX_ environment variables still work)",
                    n, SHARDX_MAX_ENGINE_PARAMS);
        n = SHARDX_MAX_ENGINE_PARAMS;
    }
    c->sx_value_count = n;
    for (size_t i = 0; i < n; i++) {
        sx_param_info_t info;
        char name[64], desc[1024];

        if (sx_param_info(i, &info) != SX_OK || strcmp(info.name, "MODEX") == 0)
            continue;
        size_t len = strlen(info.name);
        if (len >= sizeof(name))
            continue;
        for (size_t k = 0; k <= len; k++)
            name[k] = (char)tolower((unsigned char)info.name[k]);
        snprintf(desc, sizeof(desc),
                 "shardx SX_%s (%s, %s; shardx default %s): %s Unset: the SX_%s environment "
                 "variable, else shardx's default.",
                 info.name, info.type_name, info.allowed, info.default_value, info.description,
                 info.name);
        /* MCA copies name and description. */
        (void)mca_base_component_var_register(&c->super.btl_version, name, desc,
                                              MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_5,
                                              MCA_BASE_VAR_SCOPE_READONLY, &c->sx_values[i]);
    }
}

static int shardx_component_register(void)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;

    c->free_list_max = -1;
    (void)mca_base_component_var_register(&c->super.btl_version, "free_list_max",
                                          "Most send descriptors of each size (-1: unlimited)",
                                          MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9,
                                          MCA_BASE_VAR_SCOPE_READONLY, &c->free_list_max);
    c->sched_batch = true;
    (void)mca_base_component_var_register(
        &c->super.btl_version, "sched_batch",
        "Under MPI_THREAD_MULTIPLE, switch a thread that shares the progress role with another "
        "thread from SCHED_OTHER to SCHED_BATCH, so the waiters Open MPI wakes no longer preempt "
        "the progressing thread (see sched(7); threads with another policy are left alone; "
        "0: never change a thread's policy)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
        &c->sched_batch);
    c->verbose = 0;
    (void)mca_base_component_var_register(
        &c->super.btl_version, "verbose",
        "Verbosity of the shardx BTL (0: errors only; 1: also count the operations of each "
        "protocol path and print them at finalize)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_LOCAL, &c->verbose);
    shardx_register_engine_params(c);

    shardx_module_defaults(&mca_btl_shardx_module.super);
    return mca_btl_base_param_register(&c->super.btl_version, &mca_btl_shardx_module.super);
}

static int shardx_component_open(void)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;

    c->output = opal_output_open(NULL);
    opal_output_set_verbosity(c->output, c->verbose);
    return OPAL_SUCCESS;
}

static int shardx_component_close(void)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;

    /* sx_values stays: the MCA variable system owns the strings and still
     * writes the slots when it deregisters the variables, after this. */
    if (c->output > 0)
        opal_output_close(c->output);
    return OPAL_SUCCESS;
}

/* The engine's settings: every btl_shardx_<name> that is set, then
 * SX_MODEX=manual, because Open MPI's modex carries the cards and the
 * engine must not open a PMIx connection of its own, and SX_SENDI_HOLD_US
 * at 50 unless the user set it: ob1 hands over one eager message at a
 * time with no "more follows", so holding a burst of sendi's until the
 * next progress call (at most 50 us) lets them share datagrams. Between
 * two namespace hosts at MTU 1500 it took the 8-byte message rate from
 * 431 k to 2.66 M messages/s with the 8-byte latency unchanged
 * (bench/bench_mpi.sh's "rate" and "pingpong"). */
#define SHARDX_SENDI_HOLD_US "50"

static int shardx_engine_create(sx_engine_h *engine_p)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;
    sx_config_kv_t *kv = calloc(c->sx_value_count + 2, sizeof(*kv));
    sx_param_info_t info;
    size_t n = 0;

    if (kv == NULL)
        return SX_ERR_NO_MEMORY;
    for (size_t i = 0; i < c->sx_value_count; i++) {
        if (c->sx_values[i] == NULL || c->sx_values[i][0] == '\0')
            continue;
        if (sx_param_info(i, &info) != SX_OK)
            continue;
        kv[n].name = info.name;
        kv[n].value = c->sx_values[i];
        n++;
    }
    kv[n].name = "MODEX";
    kv[n].value = "manual";
    n++;
    bool hold_set = getenv("SX_SENDI_HOLD_US") != NULL;
    for (size_t i = 0; i < n && !hold_set; i++)
        hold_set = strcmp(kv[i].name, "SENDI_HOLD_US") == 0;
    if (!hold_set) {
        kv[n].name = "SENDI_HOLD_US";
        kv[n].value = SHARDX_SENDI_HOLD_US;
        n++;
    }

    /* Which address the engine will bind: this BTL's parameter, else the
     * environment, else shardx's default (every interface, loopback for
     * this node). Only a loopback address set on purpose keeps the job on
     * this node; otherwise the engine's card says what reaches (add_procs
     * asks it through sx_peer_add). */
    const char *bind = getenv("SX_BIND_ADDR");
    for (size_t i = 0; i < n; i++)
        if (strcmp(kv[i].name, "BIND_ADDR") == 0)
            bind = kv[i].value;
    c->loopback_only = bind != NULL && strncmp(bind, "127.", 4) == 0;

    char name[64];
    snprintf(name, sizeof(name), "btl_shardx[%s]", OPAL_NAME_PRINT(OPAL_PROC_MY_NAME));
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG | SX_ENGINE_PARAM_NAME,
        .config = kv,
        .config_count = n,
        .name = name,
    };
    int rc = sx_engine_create(&params, engine_p);
    free(kv);
    return rc;
}

static mca_btl_base_module_t **shardx_component_init(int *num_btls, bool enable_progress_threads,
                                                     bool enable_mpi_threads)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;
    mca_btl_shardx_module_t *m = &mca_btl_shardx_module;
    sx_engine_h engine = NULL;
    (void)enable_progress_threads;
    (void)enable_mpi_threads; /* shardx is thread-safe either way */

    *num_btls = 0;
    int rc = shardx_engine_create(&engine);
    if (rc != SX_OK) {
        opal_output(0, "btl shardx: cannot start the shardx engine: %s (%s); the BTL is disabled",
                    sx_strerror(rc), sx_status_name(rc));
        return NULL;
    }

    /* The first call sizes the card. */
    size_t len = 0;
    uint8_t *card = NULL;
    rc = sx_engine_address(engine, NULL, &len);
    if (rc == SX_ERR_TRUNCATED && (card = malloc(len)) != NULL)
        rc = sx_engine_address(engine, card, &len);
    else if (rc == SX_ERR_TRUNCATED)
        rc = SX_ERR_NO_MEMORY;
    if (rc != SX_OK) {
        opal_output(0, "btl shardx: sx_engine_address: %s", sx_strerror(rc));
        free(card);
        sx_engine_destroy(engine);
        return NULL;
    }
    OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &c->super.btl_version, card, len);
    free(card);
    if (rc != OPAL_SUCCESS) {
        opal_output(0, "btl shardx: cannot publish the business card (%d)", rc);
        sx_engine_destroy(engine);
        return NULL;
    }

    if (mca_btl_shardx_module_init(m, engine) != OPAL_SUCCESS) {
        sx_engine_destroy(engine);
        return NULL;
    }
    mca_btl_base_module_t **modules = malloc(sizeof(*modules));
    if (modules == NULL) {
        m->super.btl_finalize(&m->super);
        return NULL;
    }
    modules[0] = &m->super;
    *num_btls = 1;
    opal_output_verbose(10, c->output, "btl shardx: engine started, card of %zu bytes", len);
    return modules;
}
