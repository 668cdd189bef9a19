/* SPDX-License-Identifier: BSD-3-Clause */
/* Engine lifetime, shard map and home shards; see engine.h. */
#include "engine/engine.h"
#include "bootstrap/oob.h"
#include "shard/shard.h"
#include "engine/nic.h"

#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/hot.h"
#include "common/log.h"
#include "common/namelist.h"
#include "common/time.h"
#include "engine/card.h"
#include "engine/diag.h"
#include "engine/service.h"

#define SX_ENGINE_KNOWN_FIELDS ((uint64_t)(SX_ENGINE_PARAM_CONFIG | SX_ENGINE_PARAM_NAME))

static int sx_engine_apply_logging(const sx_config_t *cfg)
{
    sx_log_set_level((sx_log_level_t)cfg->log_level);
    if (cfg->log_file != NULL && cfg->log_file[0] != '\0') {
        int rc = sx_log_set_file(cfg->log_file);
        if (rc != 0) {
            sx_error("config", "invalid value SX_LOG_FILE='%s': cannot open it for appending (%s)",
                     cfg->log_file, strerror(-rc));
            return SX_ERR_INVALID_PARAM;
        }
    }
    return SX_OK;
}

static unsigned sx_engine_shard_target(struct sx_engine *e)
{
    if (e->global_mode) {
        if (e->cfg.shards > 1)
            sx_warn("engine", "SX_SHARDS=%llu ignored: SX_THREAD_MODE=global runs one shard",
                    (unsigned long long)e->cfg.shards);
        return 1;
    }
    if (e->cfg.shards == 0)
        return e->topo.ncores;
    if (e->cfg.shards > e->topo.ncores)
        sx_warn("engine",
                "SX_SHARDS=%llu is more than the %u cores this process may use; shards will "
                "share cores",
                (unsigned long long)e->cfg.shards, e->topo.ncores);
    return (unsigned)e->cfg.shards;
}

/* Draws the engine's epoch: random, never 0. */
static void sx_engine_epoch_init(struct sx_engine *e)
{
    uint64_t epoch = 0;

    /* A random epoch, so that a restarted process is a new peer and its
     * predecessor's packets are recognisably stale. */
    while (epoch == 0) {
        if (getrandom(&epoch, sizeof(epoch), 0) != sizeof(epoch))
            epoch = sx_time_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)e;
    }
    e->env.epoch = epoch;
}

/*
 * SX_AUTH (shard/auth.h): a key given is set now; "job" draws one that
 * this engine's card carries, and sx_engine_join sets rank 0's. The
 * value is never logged: it is the key.
 */
static int sx_engine_auth_init(struct sx_engine *e)
{
    const char *v = e->cfg.auth;
    uint8_t key[SX_AUTH_KEY_LEN];

    if (v == NULL || v[0] == '\0')
        return SX_OK;
    if (!sx_auth_available()) {
        sx_error("config",
                 "SX_AUTH is set, but this shardx was built without libsodium, which "
                 "authenticates datagrams (install libsodium-dev and rebuild; sx_info lists "
                 "what a build has)");
        return SX_ERR_UNSUPPORTED;
    }
    e->env.auth.required = true;
    if (strcmp(v, "job") == 0) {
        e->auth_job = true;
        return sx_auth_draw_key(e->auth_job_key);
    }
    if (!sx_auth_parse_key(v, key)) {
        sx_error("config",
                 "invalid value of SX_AUTH (%zu characters, not shown): expected 32 hex digits, "
                 "a 128-bit key, or \"job\"",
                 strlen(v));
        return SX_ERR_INVALID_PARAM;
    }
    sx_auth_set_key(&e->env.auth, key);
    explicit_bzero(key, sizeof(key));
    return SX_OK;
}

/* What the shards share (shard/env.h), from the configuration. */
static void sx_engine_init_env(struct sx_engine *e)
{
    const sx_config_t *c = &e->cfg;
    sx_chan_conf_t *p = &e->env.conf;
    uint32_t window = 16;

    while (window < c->window)
        window <<= 1;
    e->env.nshards = e->nshards;
    p->window = window;
    p->max_inflight = c->max_inflight;
    p->ack_delay_ns = c->ack_delay_us * 1000u;
    p->ack_every = (unsigned)c->ack_every;
    p->rto_min_ns = c->rto_min_us * 1000u;
    p->rto_max_ns = c->rto_max_us * 1000u;
    p->rto_init_ns = c->rto_init_us * 1000u;
    if (p->rto_max_ns < p->rto_min_ns)
        p->rto_max_ns = p->rto_min_ns;
    p->tlp = c->tlp;
    p->peer_timeout_ns = c->peer_timeout_ms * 1000000u;
    p->connect_timeout_ns = c->connect_timeout_ms * 1000000u;
    p->checksum = c->checksum;
    p->check_source = c->check_source;
    p->max_frames = c->aggregate ? SX_PKT_MAX_FRAMES : 1;
    p->max_msg = c->max_msg_size;
    e->env.peers = &e->peers;
    sx_handlers_init(&e->handlers);
    e->env.handlers = &e->handlers;
    e->env.mem = &e->mem;
    p->cc_mode = c->cc;
    p->cc_delay_ns = c->cc_delay_us * 1000u;
    sx_cc_table_init(&e->cc);
    e->cc_created = true;
    e->env.cc = &e->cc;
}

_Static_assert(SX_TL_SINK_ACK_LEN == SX_WIRE_HDR_LEN, "the sink hands up whole ACK headers");
_Static_assert(SX_NIC_NAME_MAX == SX_TL_DEVICE_MAX, "a transport's device name fits a NIC's");

/* SX_NET_DEVICES is checked here, before any transport reads it, so a
 * malformed list is one clear error whatever transport would run. */
static int sx_engine_check_net_devices(const sx_config_t *cfg)
{
    char names[SX_NAMELIST_MAX][SX_NAMELIST_NAME_MAX];
    char why[160];
    unsigned n;
    bool exclude;

    if (sx_namelist_parse_filter(cfg->net_devices, names, SX_NAMELIST_MAX, &n, &exclude, why,
                                 sizeof(why)) == SX_OK)
        return SX_OK;
    sx_error("config",
             "invalid value SX_NET_DEVICES='%s': %s; allowed: device names separated by commas, "
             "such as \"mlx5_0,mlx5_1\" or \"eth0\" (for udp also subnets \"10.1.0.0/16\"), "
             "all after '^' to exclude them",
             cfg->net_devices, why);
    return SX_ERR_INVALID_PARAM;
}

/*
 * NIC locality: when the network transport has devices to choose among,
 * give each shard the one nearest its core (nic.c has the rule) and keep
 * the choice in e->devices for the shards' configurations and
 * sx_engine_shard_info. The I/O topology this needs is loaded here and
 * dropped again, only in that case (nic.h says what it costs).
 */
static int sx_engine_choose_devices(struct sx_engine *e, const sx_tl_ops_t *net,
                                    const sx_tl_config_t *probe)
{
    char names[SX_TL_DEVICES][SX_TL_DEVICE_MAX];
    sx_nic_t nics[SX_TL_DEVICES];
    bool restricted = e->cfg.net_devices != NULL && e->cfg.net_devices[0] != '\0';

    if (net->devices == NULL) {
        if (restricted)
            sx_warn("engine",
                    "SX_NET_DEVICES='%s' is ignored: the %s transport does not choose among "
                    "devices",
                    e->cfg.net_devices, net->name);
        return SX_OK;
    }
    int n = net->devices(probe, names, SX_TL_DEVICES);
    if (n < 0)
        return n;
    if (n == 0)
        return SX_OK;
    if (n > SX_TL_DEVICES)
        n = SX_TL_DEVICES; /* "how many there are" from a transport that found more */

    hwloc_topology_t io = NULL;
    if (sx_nic_topology_load(NULL, &io) != SX_OK) {
        /* Placement is an optimisation: without I/O locality the devices
         * are shared round-robin, which still works. */
        sx_warn("engine",
                "hwloc could not load the I/O topology; shards take the %d device(s) "
                "round-robin, whatever their locality",
                n);
        io = NULL;
    }
    int rc = SX_OK;
    unsigned located = 0;
    hwloc_const_bitmap_t *sets = calloc(e->nshards, sizeof(*sets));
    unsigned *choice = calloc(e->nshards, sizeof(*choice));
    e->devices = calloc(e->nshards, sizeof(*e->devices));
    if (sets == NULL || choice == NULL || e->devices == NULL) {
        rc = SX_ERR_NO_MEMORY;
        goto out;
    }
    for (unsigned k = 0; k < (unsigned)n; k++) {
        rc = sx_nic_locate(io, names[k], &nics[k]);
        if (rc != SX_OK) {
            sx_error("engine", "cannot place device '%s' in the topology: %s", names[k],
                     sx_strerror(rc));
            goto out;
        }
        located = k + 1;
    }
    /* Shard i runs on core i % ncores, as sx_engine_create_shards lays
     * them out. */
    for (unsigned i = 0; i < e->nshards; i++)
        sets[i] = e->topo.cores[i % e->topo.ncores].cpuset;
    rc = sx_nic_assign(io, nics, (unsigned)n, sets, e->nshards, choice);
    if (rc != SX_OK)
        goto out;
    for (unsigned i = 0; i < e->nshards; i++) {
        const sx_nic_t *d = &nics[choice[i]];
        snprintf(e->devices[i].name, sizeof(e->devices[i].name), "%s", d->name);
        e->devices[i].numa_node = d->numa_node;
        sx_debug("engine", "shard %u (core %d, NUMA node %d): device %s (NUMA node %s)", i,
                 e->topo.cores[i % e->topo.ncores].logical,
                 e->topo.cores[i % e->topo.ncores].numa_node, d->name,
                 d->numa_nodes[0] != '\0' ? d->numa_nodes : "unknown");
    }
    for (unsigned k = 0; k < (unsigned)n; k++) {
        if (nics[k].cpuset == NULL)
            sx_info("engine",
                    "device %s (locality unknown: not on a PCI bus hwloc sees): %u shard(s)",
                    nics[k].name, nics[k].shards);
        else
            sx_info("engine", "device %s (%s, NUMA node %s): %u shard(s)", nics[k].name,
                    sx_nic_type_name(nics[k].osdev_type),
                    nics[k].numa_nodes[0] != '\0' ? nics[k].numa_nodes : "unknown", nics[k].shards);
    }
out:
    sx_nic_release(nics, located);
    free(choice);
    free(sets);
    if (io != NULL)
        hwloc_topology_destroy(io);
    return rc;
}

static int sx_engine_create_shards(struct sx_engine *e)
{
    bool fault = e->cfg.fault != NULL && e->cfg.fault[0] != '\0';
    sx_tl_config_t probe = {
        .nshards = e->nshards,
        .bind_addr = e->cfg.bind_addr,
        .ofi_provider = e->cfg.ofi_provider,
        .net_devices = e->cfg.net_devices,
    };

    int rc = sx_engine_check_net_devices(&e->cfg);
    if (rc != SX_OK)
        return rc;
    /* The network transport: the best that SX_TRANSPORTS allows and that
     * can run here (registry.c); self is always there for this engine. */
    rc = sx_tl_select(e->cfg.transports, &probe, e->tl, &e->net_ops);
    if (rc != SX_OK)
        return rc;
    const sx_tl_ops_t *net = e->net_ops;
    rc = sx_engine_choose_devices(e, net, &probe);
    if (rc != SX_OK)
        return rc;

    e->shards = calloc(e->nshards, sizeof(*e->shards));
    if (e->shards == NULL)
        return SX_ERR_NO_MEMORY;
    rc = sx_tl_self_domain_create(e->nshards, &e->self_domain);
    if (rc != SX_OK)
        return rc;
    for (unsigned i = 0; i < e->nshards; i++) {
        /* Shards are spread round-robin over the cores, so shard i and
         * shard i + ncores share a core when there are more shards. */
        const sx_topo_core_t *core = &e->topo.cores[i % e->topo.ncores];
        sx_shard_conf_t conf = {
            .index = i,
            .core = core->logical,
            .first_pu = core->first_pu,
            .numa_node = core->numa_node,
            .cpuset = core->cpuset,
            .hotel_rooms = (unsigned)e->cfg.hotel_rooms,
            .tick_ns = e->cfg.timer_tick_us * 1000u,
            .env = &e->env,
            .net_ops = fault ? &sx_tl_fault_ops : net,
            .net_config =
                {
                    .shard = i,
                    .nshards = e->nshards,
                    .bind_addr = e->cfg.bind_addr,
                    .rcvbuf = e->cfg.rcvbuf,
                    .sndbuf = e->cfg.sndbuf,
                    .ack_socket = e->cfg.udp_ack_socket,
                    .udp_connect = (unsigned)e->cfg.udp_connect,
                    .udp_gso = e->cfg.udp_gso,
                    .udp_hot = e->cfg.udp_hot,
                    .ecn = e->cfg.cc_ecn && e->cfg.cc != SX_CC_OFF,
                    .ofi_provider = e->cfg.ofi_provider,
                    .net_devices = e->cfg.net_devices,
                    .device = e->devices != NULL ? e->devices[i].name : NULL,
                    .fault = fault ? e->cfg.fault : NULL,
                    .inner_ops = fault ? net : NULL,
                    .is_control = sx_wire_is_control,
                    .reflect = sx_wire_reflect_ack,
                },
            .self_config = {.shard = i, .nshards = e->nshards, .self_domain = e->self_domain},
            .seq_start = (uint32_t)e->cfg.seq_start,
            .seq_random = !(e->cfg.given & (1ull << sx_config_find("SEQ_START"))),
        };
        rc = sx_shard_create(&conf, &e->shards[i]);
        if (rc != SX_OK)
            return rc;
    }
    sx_tl_iface_t *iface = e->shards[0]->ifaces[SX_SHARD_TL_NET];
    e->net_variant[0] = '\0';
    if (iface->ops->variant != NULL)
        iface->ops->variant(iface, e->net_variant, sizeof(e->net_variant));
    return SX_OK;
}

/*
 * The bytes a channel keeps in flight must fit what the peer's socket can
 * hold, or a stream overflows it, every overflow becomes a retransmission
 * timeout, and throughput collapses (SX_RCVBUF=256k gave 11 MB/s of 64 KiB
 * bulk both ways). There is no receiver-advertised window on the wire, so
 * the receive queue of our own interfaces stands in for the peers': the
 * processes of a job run with one configuration and one host's limits
 * (a user without CAP_NET_ADMIN gets at most net.core.rmem_max, ~208 KiB
 * by default, whatever SX_RCVBUF asks). Half of it, for the ACKs and the
 * other senders that share the socket; never below one datagram.
 */
static void sx_engine_fit_inflight(struct sx_engine *e)
{
    size_t rx = 0;

    for (unsigned i = 0; i < e->nshards; i++) {
        const sx_tl_iface_t *iface = e->shards[i]->ifaces[SX_SHARD_TL_NET];
        size_t b = iface != NULL ? iface->caps.rx_buffer : 0;
        if (b != 0 && (rx == 0 || b < rx))
            rx = b;
    }
    size_t fit = rx / 2 < 65536 ? 65536 : rx / 2;
    if (rx == 0 || e->env.conf.max_inflight <= fit)
        return;
    sx_warn("engine",
            "SX_MAX_INFLIGHT=%zu is more than the receive sockets hold (%zu bytes, SX_RCVBUF "
            "asked for %llu): using %zu bytes in flight per channel; raise the socket limit "
            "(net.core.rmem_max, or CAP_NET_ADMIN for SO_RCVBUFFORCE) for more",
            e->env.conf.max_inflight, rx, (unsigned long long)e->cfg.rcvbuf, fit);
    e->env.conf.max_inflight = fit;
}

static void sx_engine_submit_env(void *arg, unsigned shard, sx_inbox_req_t *req)
{
    sx_engine_submit(arg, shard, req);
}

/* The connection methods, with the narrow context they get instead of the
 * engine (cpc.h); after the shards and the OOB endpoint exist. */
static int sx_engine_cpc_init(struct sx_engine *e)
{
    e->cpc.env = (sx_cpc_env_t){
        .engine_name = e->name,
        .spec = e->cfg.cpc,
        .bind_addr = e->cfg.bind_addr,
        .rdmacm_port = (unsigned)e->cfg.rdmacm_port,
        .nshards = e->nshards,
        .shards = e->shards,
        .net_ops = e->net_ops,
        .oob = e->oob,
        .closing = &e->closing,
        .submit = sx_engine_submit_env,
        .submit_arg = e,
    };
    return sx_cpc_init(&e->cpc);
}

static void sx_engine_free(struct sx_engine *e)
{
    atomic_store(&e->closing, true);
    sx_service_stop(e);
    sx_engine_diag_stop(e);
    sx_engine_progress_stop(e);
    if (e->event_fd >= 0)
        close(e->event_fd);
    if (e->wait_fd >= 0)
        close(e->wait_fd);
    /* The OOB's thread may hand messages to the shards: it goes first. */
    sx_engine_bootstrap_fini(e);
    /* The connection methods' context names the OOB endpoint too: the oob
     * component's finalize must not unhook a handler from a closed one. */
    e->cpc.env.oob = NULL;
    /* So may a connection method's thread (rdmacm's answers). */
    sx_cpc_stop(&e->cpc);
    /* Those threads' tenures may have kicked the stopped service
     * (shard/env.h): its kick timer goes only now. */
    if (e->env.svc_kickfd >= 0)
        close(e->env.svc_kickfd);
    /* No thread of the engine's runs now: what the service left for a
     * caller completes here, on the destroying thread, as everything else
     * at destruction does. */
    for (unsigned i = 0; e->shards != NULL && i < e->nshards; i++) {
        if (e->shards[i] == NULL)
            continue;
        e->shards[i]->serving = false;
        while (e->shards[i]->deferred) /* a slice of the backlogs at a time */
            (void)sx_shard_run_deferred_locked(e->shards[i]);
    }
    /* Channels first (their operations complete with SX_ERR_SHUTDOWN), then
     * the shards, whose inboxes may still hold peer-close requests. */
    sx_engine_peers_fini(e);
    if (e->shards != NULL) {
        for (unsigned i = 0; i < e->nshards; i++)
            sx_shard_destroy(e->shards[i]);
        free(e->shards);
    }
    sx_peer_table_fini(&e->peers);
    sx_mem_table_fini(&e->mem);
    if (e->cc_created)
        sx_cc_table_fini(&e->cc);
    sx_cpc_fini(&e->cpc);
    sx_tl_self_domain_destroy(e->self_domain);
    sx_handlers_fini(&e->handlers);
    if (e->home_key_created)
        pthread_key_delete(e->home_key);
    if (e->yield_ready)
        sx_yield_fini(&e->yield);
    if (e->global_lock_created)
        sx_rlock_destroy(&e->global_lock);
    free(e->devices);
    free(e->card);
    sx_topo_fini(&e->topo);
    sx_config_release(&e->cfg);
    pthread_mutex_destroy(&e->join_lock);
    pthread_mutex_destroy(&e->event_fd_lock);
    free(e);
}

/* Engine ids (engine.h): 0 is no engine's, so a thread's empty cache
 * (sx_engine_tls) matches none. */
static atomic_uint_fast64_t sx_engine_next_id = 1;

SX_API int sx_engine_create(const sx_engine_params_t *params, sx_engine_h *engine_p)
{
    const sx_config_kv_t *kv = NULL;
    size_t kv_count = 0;
    int rc;

    sx_log_init_from_env();
    if (engine_p == NULL) {
        sx_error("engine", "sx_engine_create: engine_p is NULL");
        return SX_ERR_INVALID_PARAM;
    }
    if (params != NULL) {
        if ((params->field_mask & ~SX_ENGINE_KNOWN_FIELDS) != 0) {
            sx_error("engine", "sx_engine_create: unknown field_mask bits 0x%llx",
                     (unsigned long long)(params->field_mask & ~SX_ENGINE_KNOWN_FIELDS));
            return SX_ERR_INVALID_PARAM;
        }
        if (params->field_mask & SX_ENGINE_PARAM_CONFIG) {
            kv = params->config;
            kv_count = params->config_count;
            if (kv == NULL && kv_count != 0) {
                sx_error("engine", "sx_engine_create: config is NULL but config_count is %zu",
                         kv_count);
                return SX_ERR_INVALID_PARAM;
            }
        }
    }

    struct sx_engine *e;
    if (posix_memalign((void **)&e, 4096, sizeof(*e)) != 0)
        return SX_ERR_NO_MEMORY;
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s",
             (params != NULL && (params->field_mask & SX_ENGINE_PARAM_NAME) && params->name)
                 ? params->name
                 : "shardx");
    e->id = atomic_fetch_add_explicit(&sx_engine_next_id, 1, memory_order_relaxed);
    atomic_init(&e->next_rr, 0);
    atomic_init(&e->closing, false);
    pthread_mutex_init(&e->join_lock, NULL);
    pthread_mutex_init(&e->event_fd_lock, NULL);
    e->event_fd = -1;
    e->wait_fd = -1;
    atomic_init(&e->wait_state, SX_WAIT_SET_NONE);
    atomic_init(&e->svc_asleep_until, 0);
    e->env.svc_asleep_until = &e->svc_asleep_until;
    e->env.svc_kickfd = -1;

    rc = sx_config_load(&e->cfg, kv, kv_count);
    if (rc != SX_OK) {
        free(e);
        return rc;
    }
    rc = sx_engine_apply_logging(&e->cfg);
    if (rc != SX_OK)
        goto fail;
    (void)sx_config_check_environment();
    e->global_mode = (e->cfg.thread_mode == SX_THREAD_MODE_GLOBAL);

    rc = sx_topo_init(&e->topo);
    if (rc != SX_OK)
        goto fail;
    e->nshards = sx_engine_shard_target(e);
    sx_yield_init(&e->yield, e->cfg.yield, (unsigned)hwloc_bitmap_weight(e->topo.process_set));
    e->yield.one_shard = e->nshards == 1;
    e->yield_ready = true;

    rc = sx_rlock_init(&e->global_lock);
    if (rc != SX_OK)
        goto fail;
    e->global_lock_created = true;
    if (pthread_key_create(&e->home_key, NULL) != 0) {
        sx_error("engine", "out of thread-specific keys for the home-shard map");
        rc = SX_ERR_NO_MEMORY;
        goto fail;
    }
    e->home_key_created = true;
    rc = sx_peer_table_init(&e->peers);
    if (rc != SX_OK)
        goto fail;
    rc = sx_mem_table_init(&e->mem);
    if (rc != SX_OK)
        goto fail;
    sx_engine_init_env(e);
    sx_engine_epoch_init(e);
    rc = sx_engine_auth_init(e);
    if (rc != SX_OK)
        goto fail;
    rc = sx_engine_create_shards(e);
    if (rc != SX_OK)
        goto fail;
    /* No channel exists yet, and no thread but ours reads env. */
    sx_engine_fit_inflight(e);
    rc = sx_engine_bootstrap_init(e);
    if (rc != SX_OK)
        goto fail;
    rc = sx_engine_cpc_init(e);
    if (rc != SX_OK)
        goto fail;
    rc = sx_card_build(e);
    if (rc != SX_OK)
        goto fail;
    rc = sx_engine_progress_start(e);
    if (rc != SX_OK)
        goto fail;
    rc = sx_service_start(e);
    if (rc != SX_OK)
        goto fail;
    rc = sx_engine_diag_start(e);
    if (rc != SX_OK)
        goto fail;

    sx_info("engine", "%s: %u shard(s) over %u core(s), %s mode, %s%s%s transport", e->name,
            e->nshards, e->topo.ncores, e->global_mode ? "global" : "sharded", e->net_ops->name,
            e->net_variant[0] ? "/" : "", e->net_variant);
    *engine_p = e;
    return SX_OK;

fail:
    sx_engine_free(e);
    return rc;
}

SX_API void sx_engine_destroy(sx_engine_h engine)
{
    if (engine == NULL)
        return;
    if (engine->cfg.stats != SX_STATS_NONE)
        sx_engine_stats_print(engine, stderr, engine->cfg.stats == SX_STATS_JSON);
    sx_engine_free(engine);
}

SX_API int sx_engine_shard_count(sx_engine_h engine, unsigned *count_p)
{
    if (engine == NULL || count_p == NULL)
        return sx_api_null("sx_engine_shard_count", engine == NULL ? "the engine" : "count_p");
    *count_p = engine->nshards;
    return SX_OK;
}

SX_API int sx_engine_topology(sx_engine_h engine, sx_topology_info_t *info_p)
{
    if (engine == NULL || info_p == NULL)
        return sx_api_null("sx_engine_topology", engine == NULL ? "the engine" : "info_p");
    info_p->cores = engine->topo.ncores;
    info_p->numa_nodes = engine->topo.nnuma;
    info_p->shards = engine->nshards;
    info_p->cores_are_pus = engine->topo.used_pu_fallback;
    return SX_OK;
}

SX_API int sx_engine_transport_info(sx_engine_h engine, unsigned index, sx_transport_info_t *info_p)
{
    if (engine == NULL || info_p == NULL)
        return sx_api_null("sx_engine_transport_info", engine == NULL ? "the engine" : "info_p");
    if (index >= SX_TL_KNOWN)
        return SX_ERR_NOT_FOUND;
    const sx_tl_choice_t *c = &engine->tl[index];
    memset(info_p, 0, sizeof(*info_p));
    info_p->name = c->name;
    info_p->detail = c->detail;
    info_p->exclusivity = c->exclusivity;
    info_p->built = c->ops != NULL;
    info_p->network = c->network;
    info_p->allowed = c->allowed;
    info_p->available = c->available;
    info_p->selected = c->selected;
    if (c->selected) {
        unsigned tl = c->network ? SX_SHARD_TL_NET : SX_SHARD_TL_SELF;
        info_p->mtu = engine->shards[0]->ifaces[tl]->caps.mtu;
        if (c->network)
            info_p->variant = engine->net_variant;
    }
    return SX_OK;
}

SX_API int sx_engine_shard_info(sx_engine_h engine, unsigned index, sx_shard_info_t *info_p)
{
    if (engine == NULL || info_p == NULL)
        return sx_api_null("sx_engine_shard_info", engine == NULL ? "the engine" : "info_p");
    if (index >= engine->nshards)
        return SX_ERR_NOT_FOUND;
    const sx_shard_t *s = engine->shards[index];
    memset(info_p, 0, sizeof(*info_p));
    info_p->index = index;
    info_p->core = s->core;
    info_p->first_pu = s->first_pu;
    info_p->numa_node = s->numa_node;
    hwloc_bitmap_list_snprintf(info_p->cpuset, sizeof(info_p->cpuset), s->cpuset);
    info_p->device_numa_node = -1;
    if (engine->devices != NULL) {
        snprintf(info_p->device, sizeof(info_p->device), "%s", engine->devices[index].name);
        info_p->device_numa_node = engine->devices[index].numa_node;
    }
    return SX_OK;
}

/*
 * A thread's first home shard follows the core it is running on, so that a
 * runtime which pins its threads gets shards on those cores for free. Among
 * several shards on one core, and for threads running outside the
 * process's cpuset, choices rotate so threads spread out.
 */
static unsigned sx_engine_choose_home(struct sx_engine *e)
{
    if (e->global_mode || e->nshards == 1)
        return 0;
    unsigned rr = atomic_fetch_add_explicit(&e->next_rr, 1, memory_order_relaxed);
    int core = sx_topo_core_of_pu(&e->topo, sched_getcpu());
    unsigned ncores = e->topo.ncores;
    if (core >= 0 && (unsigned)core < e->nshards) {
        unsigned on_core = (e->nshards - (unsigned)core + ncores - 1) / ncores;
        return (unsigned)core + ncores * (rr % on_core);
    }
    return rr % e->nshards;
}

/*
 * A thread's home shard on an engine, plus one (0: not chosen yet), is the
 * value of the engine's key for that thread. That value, for the engine
 * a thread used last, is cached in a thread-local variable, so that the
 * progress and send paths make no pthread_getspecific call: that is a
 * call into libc and a read of its key table, two pages, each a TLB miss
 * after every system call where the kernel flushes the TLB there
 * (common/hot.h). The cache is keyed by the engine's id, unique for the
 * process's lifetime, not its address, which a later engine may reuse.
 * Only this thread writes its key's value, and every write goes to both,
 * so the cache never disagrees with the key.
 */
static _Thread_local struct {
    uint64_t engine_id;
    unsigned home1; /* home shard plus one */
} sx_engine_tls;

static int sx_engine_set_home(struct sx_engine *e, unsigned home1)
{
    if (pthread_setspecific(e->home_key, (void *)(uintptr_t)home1) != 0)
        return SX_ERR_NO_MEMORY;
    sx_engine_tls.engine_id = e->id;
    sx_engine_tls.home1 = home1;
    return SX_OK;
}

SX_HOT_PASS unsigned sx_engine_home_shard(struct sx_engine *e)
{
    if (sx_engine_tls.engine_id == e->id)
        return sx_engine_tls.home1 - 1u;
    unsigned home1 = (unsigned)(uintptr_t)pthread_getspecific(e->home_key);
    if (home1 == 0)
        home1 = sx_engine_choose_home(e) + 1u;
    (void)sx_engine_set_home(e, home1); /* not cached if not stored: chosen again next time */
    return home1 - 1u;
}

int sx_api_null(const char *call, const char *what)
{
    sx_error("api", "%s: %s is NULL", call, what);
    return SX_ERR_INVALID_PARAM;
}

SX_API int sx_thread_bind(sx_engine_h engine, unsigned shard)
{
    if (engine == NULL)
        return sx_api_null("sx_thread_bind", "the engine");
    if (shard >= engine->nshards) {
        sx_error("engine", "sx_thread_bind: shard %u out of range (the engine has %u)", shard,
                 engine->nshards);
        return SX_ERR_OUT_OF_RANGE;
    }
    return sx_engine_set_home(engine, shard + 1);
}

SX_API int sx_thread_home_shard(sx_engine_h engine, unsigned *shard_p)
{
    if (engine == NULL || shard_p == NULL)
        return sx_api_null("sx_thread_home_shard", engine == NULL ? "the engine" : "shard_p");
    *shard_p = sx_engine_home_shard(engine);
    return SX_OK;
}

/* Most shards one idle wait hands back as readable. */
#define SX_IDLE_READY_MAX 16u

/*
 * An idle caller's turn to give its core up (yield.h): sched_yield, or a
 * wait (no token held: whoever sends through a shard meanwhile runs its
 * request itself) until a datagram comes or SX_YIELD_WAIT_NS pass, on
 * shard @p home's sockets or, for SX_YIELD_WAIT_ANY, on every shard's.
 * Writes the shards found readable to @p ready and returns how many: the
 * caller progresses them before it returns, so that a caller that gives
 * its core up whenever it gets 0 (Open MPI's opal_progress) gets the work
 * that woke it instead, and keeps the core it was woken onto.
 */
SX_HOT_PASS static unsigned sx_engine_idle_wait(struct sx_engine *e, unsigned home,
                                                sx_yield_action_t act,
                                                unsigned ready[SX_IDLE_READY_MAX])
{
    struct pollfd pfd[SX_SHARD_WAIT_FDS];
    int fds[SX_SHARD_WAIT_FDS];

    if (act == SX_YIELD_SPIN)
        return 0;
    if (act == SX_YIELD_SCHED) {
        (void)sched_yield();
        return 0;
    }
    if (act == SX_YIELD_WAIT_ANY && sx_engine_wait_any_ready(e)) {
        uint64_t start;
        int saved = sx_yield_wait_begin(&start); /* a wait that preempts: yield.h */
        unsigned found = sx_engine_wait_any(e, SX_YIELD_WAIT_NS, ready, SX_IDLE_READY_MAX);
        sx_yield_wait_end(saved, start);
        return found;
    }
    /* ppoll watches the fds for this call only: nothing stays behind to
     * cost later datagrams a callback (transport.h, wait_fds). */
    nfds_t n = sx_engine_shard_wait_fds(e->shards[home], fds);
    for (nfds_t i = 0; i < n; i++)
        pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    if (n == 0) {
        (void)sched_yield();
        return 0;
    }
    struct timespec ts = sx_ns_to_ts(SX_YIELD_WAIT_NS);
    uint64_t start;
    int saved = sx_yield_wait_begin(&start);
    int got = ppoll(pfd, n, &ts, NULL);
    sx_yield_wait_end(saved, start);
    if (got <= 0)
        return 0;
    ready[0] = home;
    return 1;
}

static unsigned sx_engine_idle(struct sx_engine *e, unsigned home, sx_yield_action_t act,
                               unsigned ready[SX_IDLE_READY_MAX])
{
    unsigned n = sx_engine_idle_wait(e, home, act, ready);
    if (n > 0)
        atomic_fetch_add_explicit(&e->yield.wakeups, 1, memory_order_relaxed);
    return n;
}

/* How often (a power of two) a progress call may visit another shard, and
 * how long that shard's home threads must have stayed away. */
#define SX_PROGRESS_VISIT_EVERY   8u
#define SX_PROGRESS_VISIT_IDLE_NS (1000000ull)

SX_HOT_PASS SX_RET_AFTER_SYSCALL SX_API int sx_progress(sx_engine_h engine)
{
    int n;

    if (engine == NULL)
        return sx_api_null("sx_progress", "the engine");
    if (engine->global_mode) {
        /* The baseline: every entry point serialises on one lock. */
        sx_rlock_lock(&engine->global_lock);
        n = sx_shard_progress(engine->shards[0]);
        sx_rlock_unlock(&engine->global_lock);
        unsigned ready[SX_IDLE_READY_MAX];
        if (sx_engine_idle(engine, 0, sx_yield_after(&engine->yield, n, false), ready) > 0) {
            sx_rlock_lock(&engine->global_lock);
            n = sx_shard_progress(engine->shards[0]);
            sx_rlock_unlock(&engine->global_lock);
        }
        return n;
    }
    unsigned home = sx_engine_home_shard(engine);
    unsigned passes = 1;
    int mine =
        sx_shard_progress_home(engine->shards[home], &passes,
                               sx_yield_repoll(&engine->yield, (unsigned)engine->cfg.repoll));
    n = mine < 0 ? 0 : mine;
    /*
     * Peers send to shard (their home % our shard count), which no thread
     * of ours may call home when there are fewer active threads than
     * shards (a single-threaded program on a 16-core node), or whose home
     * thread computes or was descheduled. So every few passes over its
     * home shard (the shard counts them: per engine, so a thread that
     * alternates between two engines visits on both) a thread also
     * progresses another shard, in rotation, if no thread has called it
     * home for SX_PROGRESS_VISIT_IDLE_NS and its token is free: no shard
     * starves. A shard whose home thread keeps calling is left alone:
     * visiting it anyway cost one process of two threads on two cores
     * 15 % of its rate (sx_bench mt, one process: 1.92-1.98 against
     * 1.68 of one thread's), the token's and the shard's cache lines
     * moving between cores. SX_PROGRESS=thread is the way to give every
     * shard a thread of its own.
     */
    if (engine->nshards > 1 && (passes & (SX_PROGRESS_VISIT_EVERY - 1)) == 0) {
        unsigned round = passes / SX_PROGRESS_VISIT_EVERY;
        sx_shard_t *other =
            engine->shards[(home + 1 + round % (engine->nshards - 1)) % engine->nshards];
        uint64_t seen = atomic_load_explicit(&other->home_seen_ns, memory_order_relaxed);
        if (sx_time_ns() - seen >= SX_PROGRESS_VISIT_IDLE_NS)
            n += sx_shard_progress(other);
    }
    /* Nothing found: spin a little, then give the core up while threads
     * outnumber cores (yield.h), and progress what ended the wait. */
    unsigned ready[SX_IDLE_READY_MAX];
    unsigned woken =
        sx_engine_idle(engine, home, sx_yield_after(&engine->yield, n, mine < 0), ready);
    for (unsigned i = 0; i < woken; i++) {
        int k = ready[i] == home ? sx_shard_progress_home(engine->shards[home], &passes, 0)
                                 : sx_shard_progress(engine->shards[ready[i]]);
        n += k > 0 ? k : 0;
    }
    return n;
}

SX_API int sx_engine_caller_yields(sx_engine_h engine, int yes)
{
    if (engine == NULL)
        return sx_api_null("sx_engine_caller_yields", "the engine");
    atomic_store_explicit(&engine->yield.caller_yields, yes != 0, memory_order_relaxed);
    return SX_OK;
}

static int am_register(sx_engine_h e, uint8_t tag, sx_am_cb_t cb, sx_am_msg_cb_t msg_cb, void *arg)
{
    if (e == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_handlers_set_am(&e->handlers, tag, cb, msg_cb, arg);
}

static int error_register(sx_engine_h e, sx_error_cb_t cb, void *arg)
{
    if (e == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_handlers_set_error(&e->handlers, cb, arg);
}

SX_API int sx_am_register(sx_engine_h e, uint8_t tag, sx_am_cb_t cb, void *arg)
{
    if (e == NULL)
        return sx_api_null("sx_am_register", "the engine");
    sx_global_enter(e);
    int rc = am_register(e, tag, cb, NULL, arg);
    sx_global_exit(e);
    return rc;
}

SX_API int sx_am_register_ex(sx_engine_h e, uint8_t tag, sx_am_msg_cb_t cb, void *arg)
{
    if (e == NULL)
        return sx_api_null("sx_am_register_ex", "the engine");
    sx_global_enter(e);
    int rc = am_register(e, tag, NULL, cb, arg);
    sx_global_exit(e);
    return rc;
}

SX_API int sx_error_register(sx_engine_h e, sx_error_cb_t cb, void *arg)
{
    if (e == NULL)
        return sx_api_null("sx_error_register", "the engine");
    sx_global_enter(e);
    int rc = error_register(e, cb, arg);
    sx_global_exit(e);
    return rc;
}
