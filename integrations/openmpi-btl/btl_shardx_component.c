/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shardx BTL component: parameters, start-up (engine, business card)
 * and progress. The module's operations are in btl_shardx_module.c.
 */
#include "btl_shardx.h"

#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
                    /* ompi_info shows shardx's version as the component's. */
                    MCA_BTL_BASE_VERSION_3_1_0,
                    .mca_component_name = "shardx",
                    MCA_BASE_MAKE_VERSION(component, SX_VERSION_MAJOR, SX_VERSION_MINOR,
                                          SX_VERSION_PATCH),
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
    c->idle_wait = true;
    (void)mca_base_component_var_register(
        &c->super.btl_version, "idle_wait",
        "When Open MPI yields the core after every progress pass that finds nothing "
        "(mpi_yield_when_idle, set when ranks outnumber slots) and no BTL but self shares the "
        "progress loop, let shardx wait up to 500 us for a datagram instead and return with what "
        "woke it (sx_engine_caller_yields). 0: return at once, and let Open MPI yield",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
        &c->idle_wait);
    c->cma = true;
    (void)mca_base_component_var_register(
        &c->super.btl_version, "cma",
        "Between ranks on one host, move put and get data in one copy from process to process "
        "(process_vm_readv/process_vm_writev, Linux cross-memory attach) instead of through "
        "shardx's datagrams, which copy twice and need the target to run. Used only where the "
        "peer is on this node, in this kernel and pid namespace; where the kernel refuses "
        "(ptrace restrictions), the datagrams carry everything. 0: always the datagrams",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &c->cma);
    c->cma_split = 128 * 1024;
    c->cma_split_var = mca_base_component_var_register(
        &c->super.btl_version, "cma_split",
        "A get of at least this many bytes from a rank on this host is copied by both ranks at "
        "once, in chunks each takes from a shared board: the owner of the data, which waits for "
        "the get's end anyway, writes chunks into the getter (process_vm_writev) while the "
        "getter reads others (btl_shardx_split.c). The getter never waits for an owner that "
        "does not help. Left at its default, not while this host runs more ranks of the job "
        "than the job may use CPUs there (hwloc's allowed set, which a cgroup cpuset narrows; "
        "the online CPUs where hwloc cannot say): there the two ranks cannot copy at once. 0: "
        "the getter copies alone",
        MCA_BASE_VAR_TYPE_SIZE_T, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
        &c->cma_split);
    c->verbose = 0;
    (void)mca_base_component_var_register(
        &c->super.btl_version, "verbose",
        "Verbosity of the shardx BTL (0: errors only; 1: also count the operations of each "
        "protocol path and print them at finalize)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_LOCAL, &c->verbose);
    c->auto_select = false;
    (void)mca_base_component_var_register(
        &c->super.btl_version, "auto_select",
        "Take part in jobs whose btl selection does not name shardx (no btl parameter, or an "
        "exclusion list such as ^tcp). Off: being on the component path changes no job that did "
        "not ask for shardx; name it to use it (--mca btl shardx,self or shardx,vader,self)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_2, MCA_BASE_VAR_SCOPE_READONLY,
        &c->auto_select);
    mca_btl_shardx_params_register(c);

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

    /* sx_params stays: the MCA variable system owns its strings and still
     * writes the slots when it deregisters the variables, after this. */
    if (c->output > 0)
        opal_output_close(c->output);
    return OPAL_SUCCESS;
}

/* The text the engine will read for setting @p name (without SX_): the
 * value among its settings (@p kv), else the environment's SX_<name>, else
 * NULL (its default). */
static const char *shardx_setting(const sx_config_kv_t *kv, size_t n, const char *name)
{
    char env[64];
    for (size_t i = 0; i < n; i++)
        if (strcmp(kv[i].name, name) == 0)
            return kv[i].value;
    snprintf(env, sizeof(env), "SX_%s", name);
    return getenv(env);
}

/* The engine's SX_MAX_MSG_SIZE as it will read it (shardx_setting), parsed
 * as the engine parses it (sx_param_parse). UINT64_MAX when not found. */
static uint64_t shardx_max_msg(const sx_config_kv_t *kv, size_t n)
{
    const char *text = shardx_setting(kv, n, "MAX_MSG_SIZE");
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t info;
        sx_param_value_t v;
        if (sx_param_info(i, &info) == SX_OK && strcmp(info.name, "MAX_MSG_SIZE") == 0 &&
            sx_param_parse(i, text != NULL ? text : info.default_value, &v) == SX_OK)
            return v.u;
    }
    return UINT64_MAX;
}

/*
 * Every message and every put or get of this BTL is one shardx operation,
 * which the engine refuses above SX_MAX_MSG_SIZE: a message past it failed
 * at the first send while its receiver waited for good (btl_shardx_
 * max_msg_size 16k and a 32 KiB MPI_Send). So the limits that shape ob1's
 * protocols come down to it, said once; a size too small for ob1's
 * headers and a useful eager message disables the BTL.
 */
#define SHARDX_MAX_MSG_MIN 4096u

static bool shardx_fit_limits(mca_btl_base_module_t *b, uint64_t max, int output)
{
    size_t *limits[] = {&b->btl_eager_limit,
                        &b->btl_rndv_eager_limit,
                        &b->btl_max_send_size,
                        &b->btl_rdma_pipeline_send_length,
                        &b->btl_rdma_pipeline_frag_size,
                        &b->btl_get_limit,
                        &b->btl_put_limit};
    bool cut = false;

    if (max < SHARDX_MAX_MSG_MIN) {
        opal_output(0,
                    "btl shardx: btl_shardx_max_msg_size (SX_MAX_MSG_SIZE) of %llu bytes is below "
                    "the %u a BTL needs; the BTL is disabled",
                    (unsigned long long)max, SHARDX_MAX_MSG_MIN);
        return false;
    }
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        if (*limits[i] > max) {
            *limits[i] = (size_t)max;
            cut = true;
        }
    }
    if (cut)
        opal_output_verbose(1, output,
                            "btl shardx: eager, send, put and get limits lowered to "
                            "btl_shardx_max_msg_size (SX_MAX_MSG_SIZE), %llu bytes",
                            (unsigned long long)max);
    return true;
}

/*
 * One shard for a rank whose MPI calls come from one thread at a time
 * (any thread level below MPI_THREAD_MULTIPLE, which is
 * what Open MPI's enable_mpi_threads says), unless btl_shardx_shards or
 * SX_SHARDS says otherwise. shardx's default is a shard per CPU of the
 * process's cpuset, so that threads calling at once each have their own;
 * an unbound rank (mpirun binds none when ranks outnumber cores) then had
 * one per CPU of the machine for its one thread. Peers send to the shard
 * of their own calling thread's home, so its traffic was spread over
 * shards it progresses only by visiting one every few passes
 * (engine.c, SX_PROGRESS_VISIT_EVERY), and a caller that lets Open MPI
 * yield (src/engine/yield.h, "Bound or single-shard callers") needs one
 * pass to see every datagram. Four unbound ranks on two cores, 8-byte
 * MPI_Barrier: 106 us with two shards a rank, 44 with one and the yield
 * (tcp 78); docs/tuning.md, "Ranks bound to a core, or of one shard".
 */

/* The engine's settings: every btl_shardx_<name> that is set (and the
 * BTL's own defaults, mca_btl_shardx_params_config), then SX_MODEX=manual,
 * because Open MPI's modex carries the cards and the engine must not open
 * a PMIx connection of its own, and one shard unless threads may call in
 * at once (above). */
static int shardx_engine_create(sx_engine_h *engine_p, bool mpi_threads)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;
    size_t max = c->sx_param_count + 2;
    sx_config_kv_t *kv = calloc(max, sizeof(*kv));
    char(*texts)[SHARDX_PARAM_TEXT_MAX] = calloc(max, sizeof(*texts));
    size_t n = 0;

    if (kv == NULL || texts == NULL) {
        free(kv);
        free(texts);
        return SX_ERR_NO_MEMORY;
    }
    if (mca_btl_shardx_params_config(c, kv, texts, &n) != OPAL_SUCCESS) {
        free(kv);
        free(texts);
        return SX_ERR_INVALID_PARAM; /* named above */
    }
    size_t set = n;
    kv[n].name = "MODEX";
    kv[n].value = "manual";
    n++;
    if (!mpi_threads && shardx_setting(kv, n, "SHARDS") == NULL) {
        kv[n].name = "SHARDS";
        kv[n].value = "1";
        n++;
    }

    /* Which address the engine will bind: this BTL's parameter, else the
     * environment, else shardx's default (every interface, loopback for
     * this node). Only a loopback address set on purpose keeps the job on
     * this node; otherwise the engine's card says what reaches (add_procs
     * asks it through sx_peer_add). */
    const char *bind = shardx_setting(kv, n, "BIND_ADDR");
    c->loopback_only = bind != NULL && strncmp(bind, "127.", 4) == 0;
    c->max_msg = shardx_max_msg(kv, n);

    char name[64];
    snprintf(name, sizeof(name), "btl_shardx[%s]", OPAL_NAME_PRINT(OPAL_PROC_MY_NAME));
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG | SX_ENGINE_PARAM_NAME,
        .config = kv,
        .config_count = n,
        .name = name,
    };
    int rc = sx_engine_create(&params, engine_p);
    if (rc == SX_ERR_INVALID_PARAM && set > 0) {
        /* shardx named its SX_ setting; say which MCA parameter it was. */
        opal_output(0, "btl shardx: shardx refused its settings; those from this BTL:");
        mca_btl_shardx_params_report(c, kv, set);
    }
    free(kv);
    free(texts);
    return rc;
}

/* Whether the btl selection (--mca btl LIST) names shardx. An exclusion
 * list ("^tcp") or none at all does not: a job that did not ask for
 * shardx must not change because the component is on the path. */
static bool shardx_selected_by_name(void)
{
    const char *sel = opal_btl_base_framework.framework_selection;
    if (sel == NULL || sel[0] == '\0' || sel[0] == '^')
        return false;
    for (const char *p = sel; *p != '\0';) {
        size_t len = strcspn(p, ",");
        if (len == strlen("shardx") && strncmp(p, "shardx", len) == 0)
            return true;
        p += len;
        if (*p == ',')
            p++;
    }
    return false;
}

static mca_btl_base_module_t **shardx_component_init(int *num_btls, bool enable_progress_threads,
                                                     bool enable_mpi_threads)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;
    mca_btl_shardx_module_t *m = &mca_btl_shardx_module;
    sx_engine_h engine = NULL;
    (void)enable_progress_threads;

    *num_btls = 0;
    if (!c->auto_select && !shardx_selected_by_name()) {
        opal_output_verbose(10, c->output,
                            "btl shardx: not named in the btl selection (\"%s\"): not used "
                            "(name it, or set btl_shardx_auto_select 1)",
                            opal_btl_base_framework.framework_selection != NULL
                                ? opal_btl_base_framework.framework_selection
                                : "");
        return NULL;
    }
    /* Single copy needs to know which kernel and pid namespace we are in
     * (btl_shardx_cma.c). */
    atomic_init(&c->cma_refused, false);
    c->cma_host = c->cma ? mca_btl_shardx_cma_host_id() : 0;
    c->cma_pid = (uint32_t)getpid();
    if (c->cma_host != 0)
        mca_btl_shardx_cma_allow_peers(c->output);
    if (c->cma && c->cma_host == 0)
        opal_output_verbose(1, c->output,
                            "btl shardx: cannot read the boot id or pid namespace under /proc: "
                            "put and get between ranks of this host go through the datagrams");
    mca_base_var_source_t split_source = MCA_BASE_VAR_SOURCE_DEFAULT;
    if (c->cma_split_var >= 0)
        (void)mca_base_var_get_value(c->cma_split_var, NULL, &split_source, NULL);
    c->split_fits =
        split_source != MCA_BASE_VAR_SOURCE_DEFAULT || mca_btl_shardx_split_fits(c->output);
    int rc = shardx_engine_create(&engine, enable_mpi_threads);
    if (rc != SX_OK) {
        opal_output(0, "btl shardx: cannot start the shardx engine: %s (%s); the BTL is disabled",
                    sx_strerror(rc), sx_status_name(rc));
        return NULL;
    }
    if (!shardx_fit_limits(&m->super, c->max_msg, c->output)) {
        sx_engine_destroy(engine);
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
    /* The card goes out last, once nothing here can fail: a card in the
     * modex tells every peer's add_procs that this process is reachable
     * over shardx, and a BTL that then disabled itself would leave their
     * fragments to time out (the modex cannot take a card back). */
    mca_btl_base_module_t **modules = malloc(sizeof(*modules));
    if (modules == NULL)
        opal_output(0, "btl shardx: out of memory for the module list; the BTL is disabled");
    if (modules == NULL || mca_btl_shardx_module_init(m, engine) != OPAL_SUCCESS) {
        free(modules);
        free(card);
        sx_engine_destroy(engine);
        return NULL;
    }
    OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &c->super.btl_version, card, len);
    free(card);
    if (rc != OPAL_SUCCESS) {
        opal_output(0, "btl shardx: cannot publish the business card (%d)", rc);
        free(modules);
        m->super.btl_finalize(&m->super);
        return NULL;
    }
    modules[0] = &m->super;
    *num_btls = 1;
    opal_output_verbose(10, c->output, "btl shardx: engine started, card of %zu bytes", len);
    return modules;
}
