/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shardx BTL: Open MPI's byte transfer layer over one shardx engine.
 *
 * One module per process, over one engine. Everything Open MPI hands the
 * module maps onto shardx's public API (include/shardx.h), except the put
 * and get between two ranks of one host that the kernel lets one process
 * copy from the other (btl_shardx_cma.c, the last line):
 *
 *   BTL                                shardx
 *   btl_init                           sx_engine_create (SX_MODEX=manual)
 *   business card in the modex         sx_engine_address -> OPAL_MODEX_SEND
 *   add_procs                          OPAL_MODEX_RECV -> sx_peer_add
 *   del_procs                          sx_peer_remove
 *   tag (8 bits)                       the shardx active-message tag itself
 *   send / sendi                       sx_send (completion) / sx_sendi
 *   register_mem / deregister_mem      sx_mem_register / sx_mem_deregister
 *   put / get                          sx_put / sx_get (complete when done
 *                                      at the target / locally)
 *   btl_progress                       sx_progress
 *   error callback                     sx_error_register
 *   btl_shardx_<name> MCA parameters   the engine's own SX_<NAME> settings
 *   put / get, a peer on this host     process_vm_writev / process_vm_readv
 *   a large get, a peer on this host   both ranks copy part (btl_shardx_split.c)
 *
 * Concurrency. ob1 calls every entry point from every thread at once
 * (MPI_THREAD_MULTIPLE) and re-enters send, alloc, put and get from the
 * receive and completion callbacks. shardx's calls are safe from any thread
 * and from its callbacks, so the module keeps no lock of its own on the
 * fast path: descriptors come from OPAL free lists (lock-free LIFOs),
 * endpoints are read-only after add_procs, and the only mutex
 * (module->ep_lock) guards the endpoint list that add_procs, del_procs and
 * finalize walk. The one thing the module changes about its callers'
 * threads: under MPI_THREAD_MULTIPLE, a thread that takes part in a
 * progress hand-off is moved from SCHED_OTHER to SCHED_BATCH
 * (btl_shardx_sched_batch; mca_btl_shardx_progress says why).
 */
#ifndef MCA_BTL_SHARDX_H
#define MCA_BTL_SHARDX_H

#include "opal_config.h"

#include "opal/class/opal_free_list.h"
#include "opal/class/opal_list.h"
#include "opal/mca/btl/btl.h"
#include "opal/mca/btl/base/base.h"
#include "opal/threads/mutex.h"
#include "opal/util/proc.h"

#include <stdatomic.h>
#include <stdbool.h>

#include <shardx.h>

#include "btl_shardx_split.h"

BEGIN_C_DECLS

/*
 * What ThreadSanitizer cannot see (the TSan build of the component:
 * tests/CMakeLists.txt). Open MPI is built without it, so where ob1 or
 * OPAL hands an object from one thread to another (an item of OPAL's
 * lock-free free lists, a registration that ob1 deregisters on another
 * thread) TSan takes the next thread's use for a race; so does a peer's
 * request to copy from memory this process registered, which arrives
 * over the network. In the TSan build the component states those
 * hand-overs (RELEASE where an object is handed on, ACQUIRE where it is
 * taken); elsewhere the macros are nothing.
 */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define SHARDX_TSAN_ACQUIRE(addr) __tsan_acquire((void *)(addr))
#define SHARDX_TSAN_RELEASE(addr) __tsan_release((void *)(addr))
#else
#define SHARDX_TSAN_ACQUIRE(addr) ((void)(addr))
#define SHARDX_TSAN_RELEASE(addr) ((void)(addr))
#endif
/* The sync object of "registered memory, which a peer's request may make
 * this process copy from" (btl_shardx_split.c). */
extern char mca_btl_shardx_tsan_registered;

/* Room for shardx's configuration table (sx_param_count(); 30 today). */
#define SHARDX_MAX_ENGINE_PARAMS 128

typedef struct mca_btl_shardx_module {
    mca_btl_base_module_t super;
    sx_engine_h engine;
    mca_btl_base_module_error_cb_fn_t error_cb; /* set once by ob1, read on failure */
    opal_free_list_t eager_frags;               /* descriptors of btl_eager_limit bytes */
    opal_free_list_t max_frags;                 /* descriptors of btl_max_send_size bytes */
    opal_free_list_t rdma_ops;                  /* put/get contexts */
    opal_mutex_t ep_lock;                       /* endpoint list only; never on the fast path */
    opal_list_t endpoints;
    /* The shardx peer of every rank of this job, added at the first
     * add_procs (shardx_add_job_peers_locked), indexed by vpid; under
     * ep_lock. */
    struct mca_btl_shardx_slot *slots;
    uint32_t nslots;
    bool slots_tried;
    /* Set when finalize starts: completions of cancelled operations are
     * then freed without calling up into a PML that is going away. */
    atomic_bool closing;
    atomic_uint_fast64_t dropped_no_handler; /* messages for a tag nobody registered */
    /* Which protocol paths ran, counted only with btl_shardx_verbose >= 1
     * (so the fast path pays a predictable branch, not a shared atomic)
     * and printed at finalize: the test suite checks that each run took
     * the path it meant to. */
    bool count_ops;
    atomic_uint_fast64_t n_sendi, n_sendi_queued, n_send, n_send_inline, n_put, n_get, n_reg;
    atomic_uint_fast64_t n_batch_threads; /* threads moved to SCHED_BATCH */
    atomic_uint_fast64_t n_caller_yields; /* sx_engine_caller_yields turned on */
    /* puts and gets done by single copy, and those it handed back */
    atomic_uint_fast64_t n_cma_put, n_cma_get, n_cma_fallback;
    /* gets shared with their data's owner, the chunks this rank copied
     * for its peers' gets or failed to, the peers' requests it refused (a
     * check failed) and those it had no room for (btl_shardx_split.c) */
    atomic_uint_fast64_t n_cma_split, n_cma_helped, n_cma_help_failed, n_cma_help_refused,
        n_cma_help_busy;
    _Atomic(struct mca_btl_shardx_split *) split; /* NULL until the first shared get */
} mca_btl_shardx_module_t;

#define SHARDX_COUNT(m, field)                                               \
    do {                                                                     \
        if ((m)->count_ops)                                                  \
            atomic_fetch_add_explicit(&(m)->field, 1, memory_order_relaxed); \
    } while (0)

/*
 * The value of one btl_shardx_<name> parameter, typed as shardx's own
 * parameter is (sx_param_info): uint and size become Open MPI's unsigned
 * long long and size_t (so 4k, 1m suffixes work), bool a bool, enum an int
 * with an MCA enumerator of shardx's words, string a string. The default
 * is shardx's own; a parameter left at it passes nothing to the engine, so
 * SX_<NAME> in the environment still applies.
 */
typedef struct mca_btl_shardx_param {
    union {
        unsigned long long u; /* SX_PARAM_UINT */
        size_t z;             /* SX_PARAM_SIZE */
        double d;
        bool b;
        int e; /* SX_PARAM_ENUM: index into the word list */
        char *s;
    } v;
    int var_index; /* the MCA variable's, or -1 when not registered */
} mca_btl_shardx_param_t;

typedef struct mca_btl_shardx_component {
    mca_btl_base_component_3_0_0_t super;
    /* The btl_shardx_<name> parameters that mirror shardx's configuration
     * table, one per sx_param_info index. The MCA variable system keeps
     * pointers to these and writes them when it deregisters the variables,
     * after the component's close: so they live as long as the (never
     * unloaded) component, and its strings are never freed here. */
    mca_btl_shardx_param_t sx_params[SHARDX_MAX_ENGINE_PARAMS];
    size_t sx_param_count;
    /* btl_shardx_auto_select: take part in jobs whose btl selection does
     * not name shardx (see shardx_component_init). */
    bool auto_select;
    /* The engine's sockets are bound to a loopback address (SX_BIND_ADDR,
     * 127.0.0.1 by default): only processes on this host can reach it. */
    bool loopback_only;
    int free_list_max;       /* btl_shardx_free_list_max */
    bool sched_batch;        /* btl_shardx_sched_batch: see mca_btl_shardx_progress */
    bool idle_wait;          /* btl_shardx_idle_wait: see shardx_follow_yield_when_idle */
    bool cma;                /* btl_shardx_cma: see btl_shardx_cma.c */
    uint64_t cma_host;       /* this host's and pid namespace's identity; 0: unknown */
    uint32_t cma_pid;        /* getpid() at start-up: a handle is filled per message */
    atomic_bool cma_refused; /* the kernel said EPERM or ENOSYS once */
    size_t cma_split;        /* btl_shardx_cma_split: see btl_shardx_split.c */
    int cma_split_var;       /* its MCA variable's index */
    bool split_fits;         /* this host's ranks fit its CPUs (mca_btl_shardx_split_fits),
                              * or cma_split was set, not left at its default */
    uint64_t max_msg;        /* the engine's SX_MAX_MSG_SIZE (shardx_max_msg) */
    int verbose;             /* btl_shardx_verbose */
    int output;              /* opal_output stream */
} mca_btl_shardx_component_t;

OPAL_MODULE_DECLSPEC extern mca_btl_shardx_component_t mca_btl_shardx_component;

/* btl_shardx_params.c. register: one btl_shardx_<name> per row of
 * shardx's configuration table. config: the engine settings of those the
 * user set (texts holds their text; kv and texts have room for
 * sx_param_count() entries), each checked with sx_param_parse; a refused
 * one is named with where it was set, and the result is then
 * OPAL_ERR_BAD_PARAM. report: says which btl_shardx_ parameter and source
 * each setting in kv came from, for when the engine refuses them. */
#define SHARDX_PARAM_TEXT_MAX 64
void mca_btl_shardx_params_register(mca_btl_shardx_component_t *c);
int mca_btl_shardx_params_config(mca_btl_shardx_component_t *c, sx_config_kv_t *kv,
                                 char texts[][SHARDX_PARAM_TEXT_MAX], size_t *n_p);
void mca_btl_shardx_params_report(mca_btl_shardx_component_t *c, const sx_config_kv_t *kv,
                                  size_t n);
extern mca_btl_shardx_module_t mca_btl_shardx_module;

struct mca_btl_base_endpoint_t;

/*
 * One shardx peer; its address is the shardx peer id, so a callback that
 * names it never sees freed memory (slots live until finalize). The ranks
 * of our own job have theirs in module->slots, added before ob1 asks for
 * them: ob1 adds remote processes lazily (mpi_add_procs_cutoff), on the
 * first send to one, and a rank that only receives from a peer would
 * otherwise never know it, so that peer's datagrams were dropped as from
 * an unknown sender. A process of another job has a slot in its endpoint.
 */
typedef struct mca_btl_shardx_slot {
    sx_peer_h peer;                               /* NULL: none (status says why) */
    char label[SX_PEER_NAME_MAX];                 /* "rank 3 on node2": log lines */
    _Atomic(struct mca_btl_base_endpoint_t *) ep; /* set once add_procs makes it */
    int status; /* sx_peer_add's; SX_ERR_NOT_FOUND: no card added yet */
    opal_process_name_t name;
    /* The peer's board of shared gets, mapped by the first one it asked
     * this rank to help with (btl_shardx_split.c); unmapped at finalize. */
    _Atomic(struct mca_btl_shardx_board *) board;
} mca_btl_shardx_slot_t;

/* One remote process. Created by add_procs and kept until the module is
 * finalized; del_procs only marks it removed. */
struct mca_btl_base_endpoint_t {
    opal_list_item_t super;
    opal_proc_t *proc;
    sx_peer_h peer;            /* NULL once removed */
    atomic_bool removed;       /* del_procs ran (it may run twice) */
    atomic_bool reported;      /* the error callback ran for it */
    mca_btl_shardx_slot_t own; /* the slot of a process of another job */
};
typedef struct mca_btl_base_endpoint_t mca_btl_base_endpoint_t;
OBJ_CLASS_DECLARATION(mca_btl_base_endpoint_t);

/* A send descriptor. segments[0] is the copy area (data[], sized by the
 * free list it came from); prepare_src of contiguous data adds
 * segments[1], pointing at the user's buffer (no copy). */
typedef struct mca_btl_shardx_frag {
    mca_btl_base_descriptor_t base;
    mca_btl_base_segment_t segments[2];
    mca_btl_base_endpoint_t *endpoint;
    opal_free_list_t *list; /* the list it returns to */
    size_t capacity;        /* bytes in data[] */
    uint8_t tag;
    uint8_t data[] __attribute__((aligned(16)));
} mca_btl_shardx_frag_t;
OBJ_CLASS_DECLARATION(mca_btl_shardx_frag_t);

/* A put or get in flight. The last fields are a shared get's
 * (btl_shardx_split.c): what it needs to finish, or to go through
 * shardx's datagrams after all. */
typedef struct mca_btl_shardx_rdma_op {
    opal_free_list_item_t super;
    mca_btl_base_endpoint_t *endpoint;
    void *local_address;
    mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext;
    void *cbdata;
    uint64_t remote_address;
    uint64_t rkey;
    size_t size;
    size_t chunk;     /* bytes per chunk; the last may be shorter */
    uint32_t nchunks; /* 2..64 */
    uint32_t gen;     /* the board slot's generation for this get */
    uint32_t pid;     /* the owner's */
} mca_btl_shardx_rdma_op_t;
OBJ_CLASS_DECLARATION(mca_btl_shardx_rdma_op_t);

/* What a peer needs to name a registered region: sent by ob1 to the peer
 * as btl_registration_handle_size plain bytes, so no local pointers. The
 * rkey is shardx's; the rest lets a peer on this host copy the region's
 * bytes itself (btl_shardx_cma.c): the region, its rights, who owns it. */
struct mca_btl_base_registration_handle_t {
    uint64_t rkey; /* sx_mem_rkey; 0 for a local-only registration */
    uint64_t base; /* the registered range, as the owner's addresses */
    uint64_t len;
    uint64_t host;   /* mca_btl_shardx_cma_host_id(); 0: no single copy */
    uint32_t pid;    /* the owner's process id, in that pid namespace */
    uint32_t access; /* SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE */
};

/* The local side of a registration; ob1 holds &reg->handle. */
typedef struct mca_btl_shardx_reg {
    mca_btl_base_registration_handle_t handle;
    sx_mem_h mem; /* NULL for a local-only registration */
} mca_btl_shardx_reg_t;

/* Module functions (btl_shardx_module.c). rdma_complete: returns @p op
 * to its list and calls ob1 back with @p sx_status (a shardx status);
 * rdma_done is the same as sx_put's and sx_get's completion callback.
 * in_callback: how deep this thread is in ob1's callbacks from inside a
 * shardx pass (receive, send and put/get completions), which hold the
 * shard: what the BTL sends there leaves when the pass ends. in_progress:
 * how deep in mca_btl_shardx_split_progress (whose completions start
 * ob1's next gets): the thread is inside btl_progress and returns to it. */
extern _Thread_local unsigned mca_btl_shardx_in_callback;
extern _Thread_local unsigned mca_btl_shardx_in_progress;
void mca_btl_shardx_rdma_done(void *op, int sx_status);
int mca_btl_shardx_module_init(mca_btl_shardx_module_t *m, sx_engine_h engine);
int mca_btl_shardx_progress(void);
void mca_btl_shardx_rdma_complete(void *op, int sx_status);

/* Single copy between ranks of one host (btl_shardx_cma.c). host_id: this
 * kernel's boot and pid namespace, 0 when unknown. fill: the handle fields
 * besides rkey. copy: moves [raddr, raddr + size) of @p ep's region named
 * by @p remote_handle to or from @p local; OPAL_SUCCESS when every byte
 * is there, OPAL_ERR_NOT_AVAILABLE when the caller must use shardx. */
uint64_t mca_btl_shardx_cma_host_id(void);
/* Lets this host's other processes of our user copy from and into ours
 * where Yama would refuse them (btl_shardx_cma.c). */
void mca_btl_shardx_cma_allow_peers(int output);
void mca_btl_shardx_cma_fill(mca_btl_base_registration_handle_t *h, const void *base, size_t len,
                             unsigned access);
int mca_btl_shardx_cma_copy(mca_btl_shardx_module_t *m, struct mca_btl_base_endpoint_t *ep,
                            void *local, uint64_t raddr, size_t size,
                            const mca_btl_base_registration_handle_t *remote_handle, bool write);
/* The two halves of cma_copy. owner: the pid that may be copied from or
 * into for [raddr, raddr + size) of @p remote_handle's region, 0 when
 * single copy is not allowed there. move: the copy itself, with cma_copy's
 * results and reporting; the caller counts the operation. */
uint32_t mca_btl_shardx_cma_owner(const struct mca_btl_base_endpoint_t *ep,
                                  const mca_btl_base_registration_handle_t *remote_handle,
                                  uint64_t raddr, size_t size, bool write);
int mca_btl_shardx_cma_move(uint32_t pid, void *local, uint64_t raddr, size_t size, bool write);

/*
 * A large get that both ranks copy (btl_shardx_split.c; its messages and
 * tags in btl_shardx_split.h). get: starts a
 * shared get, or returns OPAL_ERR_NOT_AVAILABLE for the caller's other
 * paths; on OPAL_SUCCESS @p op is the split's, completed later by
 * progress. asked: an ASK's handler (queues it). progress: copies what
 * this rank may of its gets and its peers', finishes gets; returns how
 * many things it did. slot_fini, fini: unmap a peer's board, our own
 * (after the engine is gone). fits: whether this host's ranks of the job
 * fit the CPUs the job may use there (hwloc's allowed set; the online
 * CPUs without a topology; at start-up, says why not at verbosity 5); get
 * shares nothing when they do not, unless btl_shardx_cma_split was set
 * (split_fits in the component says which).
 */
bool mca_btl_shardx_split_fits(int output);
int mca_btl_shardx_split_get(mca_btl_shardx_module_t *m, sx_peer_h peer,
                             mca_btl_shardx_rdma_op_t *op,
                             const mca_btl_base_registration_handle_t *remote_handle);
void mca_btl_shardx_split_asked(mca_btl_shardx_module_t *m, uint64_t peer_id, const void *data,
                                size_t len);
int mca_btl_shardx_split_progress(mca_btl_shardx_module_t *m);
void mca_btl_shardx_split_slot_fini(mca_btl_shardx_slot_t *slot);
void mca_btl_shardx_split_fini(mca_btl_shardx_module_t *m);

/* shardx status -> OPAL status. */
int mca_btl_shardx_status(int sx_status);

END_C_DECLS

#endif /* MCA_BTL_SHARDX_H */
