/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine: one per process (or per runtime instance), owning the shards,
 * the topology, the configuration and the peer table.
 *
 * Synchronization:
 *
 *   field            | written                  | read
 *   -----------------+--------------------------+------------------------------
 *   cfg, topo        | create only              | any thread, no lock
 *   tl, net_ops, ... | create only              | any thread, no lock
 *   shards[]         | create/destroy only      | any thread, no lock
 *   id               | create only              | any thread, no lock
 *   home_key values  | each thread, its own     | that thread
 *   next_rr          | any thread (relaxed RMW) | any thread
 *   global_lock      | SX_THREAD_MODE=global: held around every entry point
 *   peers, handlers, | see shard/peer.h, shard/handlers.h, shard/mem.h
 *   mem              |
 */
#ifndef SX_ENGINE_ENGINE_H
#define SX_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include <shardx.h>

#include "common/config.h"
#include "common/log.h"
#include "cpc/cpc.h"
#include "engine/topo.h"
#include "engine/yield.h"
#include "locks/rlock.h"
#include "shard/cc.h"
#include "shard/env.h"
#include "shard/handlers.h"
#include "shard/inbox.h"
#include "shard/mem.h"
#include "shard/peer.h"
#include "transports/transport.h"

/* Held by pointer only: their headers are included where they are used. */
struct sx_modex;
struct sx_nic_choice;
struct sx_oob;
struct sx_service;
struct sx_shard;

struct sx_engine {
    /* What a progress call, a send and a delivery read, first: on the one
     * page the engine is aligned to (sx_engine_create; common/hot.h says
     * why pages count). */
    bool global_mode;
    unsigned nshards;
    struct sx_shard **shards;
    uint64_t id; /* unique in the process, never reused (engine.c, sx_engine_tls) */
    pthread_key_t home_key;
    /* Destroy has begun: OOB requests still queued are dropped. Every send,
     * put and get reads it (sx_engine_closing): here, not on a later page. */
    atomic_bool closing;
    sx_yield_t yield;       /* SX_YIELD (yield.h) */
    sx_shard_env_t env;     /* what the shards share: settings, epoch, the tables below */
    sx_peer_table_t peers;  /* by the peer engine's epoch (shard/peer.h) */
    sx_handlers_t handlers; /* active-message and error handlers (shard/handlers.h) */
    sx_mem_table_t mem;     /* registered regions, by key (shard/mem.h) */
    sx_cc_table_t cc;       /* congestion controllers, by destination host (shard/cc.h) */
    /* The rest. */
    sx_config_t cfg;
    char name[64];
    sx_topo_t topo;
    bool home_key_created;
    atomic_uint next_rr;
    sx_rlock_t global_lock;
    bool global_lock_created;
    bool cc_created;
    void *self_domain;
    /* Transports (src/transports/registry.c): what the selection saw of
     * each, the network transport it chose (under the fault decorator when
     * SX_FAULT is set) and that transport's variant (ofi: the provider),
     * which the card names and a peer must match. */
    sx_tl_choice_t tl[SX_TL_KNOWN];
    const sx_tl_ops_t *net_ops;
    char net_variant[32];
    /* NIC locality (engine/nic.h): the device each shard's network
     * interface opens and that device's NUMA node, [nshards]; NULL when
     * the transport chooses no device. */
    struct sx_nic_choice *devices;
    /* This engine's business card: its header, each shard's address (at
     * most SX_TL_ADDR_MAX bytes; udp's is 14 to 151), the offers and the
     * transport's names; sx_card_cap(nshards) bytes from the heap, so
     * 1024 shards with every address fit (card.h). */
    uint8_t *card;
    size_t card_len;
    /* SX_AUTH=job: the key this engine drew, which its card carries; the
     * job's is rank 0's (sx_engine_join). */
    bool auth_job;
    uint8_t auth_job_key[16];
    void *progress; /* SX_PROGRESS=thread: one sx_progress_thread_t per shard */
    atomic_bool progress_stop;
    /* sx_engine_fd's epoll fd, -1 until asked for; made once, under
     * event_fd_lock (two first calls at once made two sets, one leaked,
     * with their shards' timers mixed). */
    int event_fd;
    pthread_mutex_t event_fd_lock;
    /* When the service, asleep while serving, wakes (env.svc_asleep_until
     * points here: shard/env.h); the engine's, so that it outlives the
     * service for threads that may still kick it. */
    _Atomic uint64_t svc_asleep_until;
    /* Every shard's transport fds, each tagged with its shard's index
     * (epoll data.u32): what SX_YIELD_WAIT_ANY waits on; built by the
     * first such wait (sx_engine_wait_any_ready), -1 until then. Written
     * once, before wait_state turns SX_WAIT_SET_READY (release). */
    int wait_fd;
    atomic_int wait_state; /* sx_wait_set_state_t */
    /* Connection methods (src/cpc/): the components that run, with the
     * narrow context the engine gives them. */
    sx_cpc_t cpc;
    /* Start-up (src/bootstrap/): the OOB endpoint (NULL unless the engine
     * was started by sx_run or SX_CPC names oob), and after
     * sx_engine_join the modex and one peer per rank. */
    struct sx_oob *oob;
    pthread_mutex_t join_lock;
    struct sx_modex *modex;
    sx_peer_h *job_peers;       /* [modex->size] */
    void *diag;                 /* SX_DUMP_SIGNAL, SX_WATCHDOG_S: the diagnostics thread (diag.h) */
    struct sx_service *service; /* the service thread (service.h), or NULL */
    bool yield_ready;
};

/*
 * SX_THREAD_MODE=global: the baseline takes one recursive lock around
 * every entry point, as Open MPI's usnic BTL does with btl_usnic_lock.
 * Public functions that touch shared state call these; in sharded mode
 * they cost one predictable branch. The pattern is a public sx_foo() that
 * enters, calls a static foo() of the same name without the prefix, and
 * exits. The two lock axes are named apart: `_locked` always means "the
 * caller holds the shard's token" (shard/shard.h), never this lock.
 */
static inline void sx_global_enter(struct sx_engine *e)
{
    if (e->global_mode)
        sx_rlock_lock(&e->global_lock);
}

static inline void sx_global_exit(struct sx_engine *e)
{
    if (e->global_mode)
        sx_rlock_unlock(&e->global_lock);
}

/** Whether sx_engine_destroy has begun; says so in the log, for @p what,
 *  when it has. Its callbacks (the operations it completes with
 *  SX_ERR_SHUTDOWN) may still call in: what they start then fails with
 *  SX_ERR_SHUTDOWN instead of racing the teardown (a send opened a new
 *  channel nobody completed; a peer removed went from under the loop that
 *  closed it). The destroying thread is the only one left, so relaxed. */
static inline bool sx_engine_closing(struct sx_engine *e, const char *what)
{
    if (!atomic_load_explicit(&e->closing, memory_order_relaxed))
        return false;
    sx_error("engine", "%s refused: the engine is being destroyed", what);
    return true;
}

/** A public call @p call given NULL for @p what (its engine handle, an
 *  output pointer): says so in the log and returns SX_ERR_INVALID_PARAM:
 *  bad input gets an error that names its cause. */
__attribute__((cold)) int sx_api_null(const char *call, const char *what);

/** Runs @p req on shard @p shard (token-or-delegate; in global mode under
 *  the global lock). */
void sx_engine_submit(struct sx_engine *engine, unsigned shard, sx_inbox_req_t *req);

/** The caller's home shard (*home_p) and the peer's shard it sends to by
 *  default: the home index modulo the peer's shard count. */
unsigned sx_send_lane(struct sx_engine *engine, sx_peer_h peer, unsigned *home_p);

/** Opens the OOB endpoint when the engine needs one (started by sx_run,
 *  or SX_CPC names oob); at creation. */
int sx_engine_bootstrap_init(struct sx_engine *engine);

/** Leaves the job (modex) and closes the OOB; first thing at destruction. */
void sx_engine_bootstrap_fini(struct sx_engine *engine);

/** Closes every channel and frees every peer; at destruction. */
void sx_engine_peers_fini(struct sx_engine *engine);

/** Prints every counter to @p out, as text or one JSON object, in one write. */
void sx_engine_stats_print(struct sx_engine *engine, FILE *out, bool json);

/** Adds @p fd (EPOLLIN) to @p epfd, and every interface wait fd of
 *  @p shard; or takes the latter out again. SX_ERR_IO. */
int sx_engine_epoll_add_fd(int epfd, int fd);
int sx_engine_epoll_add_shard(int epfd, struct sx_shard *shard);
int sx_engine_epoll_del_shard(int epfd, struct sx_shard *shard);
struct epoll_event;
/** epoll_pwait2 with a timeout in nanoseconds (UINT64_MAX: none), falling
 *  back to epoll_wait's milliseconds on kernels without it; its result. */
int sx_engine_epoll_wait_ns(int epfd, struct epoll_event *ev, int max, uint64_t timeout_ns);
/** Where engine->wait_fd stands. */
typedef enum {
    SX_WAIT_SET_NONE = 0, /* not built: no caller waited on every shard yet */
    SX_WAIT_SET_BUILDING, /* a caller is building it */
    SX_WAIT_SET_READY,    /* wait_fd is the set */
    SX_WAIT_SET_FAILED,   /* could not be built (logged): callers wait on their home shard */
} sx_wait_set_state_t;
/** Whether engine->wait_fd is ready, building it if no caller has; false
 *  while another builds it or when that failed. Any thread. */
bool sx_engine_wait_any_ready(struct sx_engine *engine);
/** Every wait fd of @p shard's interfaces (at most SX_SHARD_WAIT_FDS):
 *  writes them to @p fds and returns how many. Any thread. */
unsigned sx_engine_shard_wait_fds(const struct sx_shard *shard, int *fds);
/** Waits at most @p timeout_ns for a datagram to any shard; writes the
 *  indices of the shards found readable (no repeats, at most @p max) to
 *  @p ready and returns how many; 0 at once when the set is not ready
 *  (sx_engine_wait_any_ready). Any thread; no token held. */
unsigned sx_engine_wait_any(struct sx_engine *engine, uint64_t timeout_ns, unsigned *ready,
                            unsigned max);

/** Starts the progress threads when SX_PROGRESS=thread. */
int sx_engine_progress_start(struct sx_engine *engine);

/** Stops and joins them (they may be asleep in epoll). */
void sx_engine_progress_stop(struct sx_engine *engine);

/** The calling thread's home shard index, chosen on first use. */
unsigned sx_engine_home_shard(struct sx_engine *engine);

#endif /* SX_ENGINE_ENGINE_H */
