/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * shardx — a sharded communication progress engine for threaded MPI runtimes.
 *
 * Public API. Everything here is declared with SX_API; nothing else in the
 * library is exported.
 *
 * Thread safety: every function in this header may be called from any
 * thread at any time, unless its comment says otherwise (only
 * sx_engine_destroy is exclusive). Handles are opaque. Output parameters
 * come last, end in `_p`, and are written only when the call returns
 * SX_OK.
 *
 * Threads and callbacks. Each calling thread has a home shard; its sends
 * go through it, so one thread's messages to one peer (on one lane) arrive
 * in order. A thread that finds its shard busy hands its request to the
 * shard's inbox and returns at once; nothing in shardx waits on another
 * thread. Callbacks (active-message handlers, completions, the error
 * callback) run on whichever thread is working a shard at that moment:
 * inside sx_progress, on a progress thread (SX_PROGRESS=thread), or inside
 * a call that took the shard to submit work (sx_send, sx_sendi, sx_put,
 * sx_get, sx_peer_remove), which also runs work other threads queued.
 * shardx's other threads (its service, below; the threads of its
 * out-of-band and rdmacm connection methods) never run one. A
 * callback may call any function here except sx_engine_destroy: a send
 * from a callback is queued on the shard and goes out before the shard is
 * released, with no lock held and no recursion into one. In the global
 * baseline (SX_THREAD_MODE=global) callbacks run under the global lock,
 * which is recursive, so the same holds. Callbacks should be short: while
 * one runs, its shard's other work waits.
 *
 * The engine's own thread. While no thread calls sx_progress for
 * SX_SERVICE_US (10 ms by default: the application computes, or has not
 * called in since sx_engine_create), an engine thread of shardx's serves
 * the shards so that peers do not take this process for dead: it
 * receives and acknowledges, retransmits, answers connection requests and
 * probes. It never runs a callback: the messages it receives, the
 * completions it sees and the failures it finds wait for the next thread
 * that calls sx_progress (or a progress thread), and run there. A
 * completion's SX_OK therefore means the peer's library holds the
 * message, not that its handler has run. What arrives and is not yet
 * handed up is bounded per channel by a receive window (SX_WINDOW packets,
 * SX_MAX_INFLIGHT bytes) that senders respect: a sender whose peer does
 * not consume waits, probing, and does not fail while the peer answers.
 *
 * Parameter structs can grow: set `field_mask` to the fields you filled in;
 * fields whose bit is clear are ignored and take their defaults.
 */
/** @file shardx.h
 *  The public API of shardx: engines, peers, active messages, emulated
 *  RMA, counters and diagnostics. The rules above hold for every call. */
#ifndef SHARDX_H
#define SHARDX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @name Version of this header
 *  The library it runs against says its own with sx_build_info(); a
 *  program built against one header and run on another minor version
 *  finds it there. CMake checks these against the project's version. @{ */
#define SX_VERSION_MAJOR 0 /**< incompatible changes */
#define SX_VERSION_MINOR 1 /**< additions */
#define SX_VERSION_PATCH 0 /**< fixes */
/** The three in one number, for the preprocessor: 10000 * major + 100 * minor + patch. */
#define SX_VERSION (SX_VERSION_MAJOR * 10000 + SX_VERSION_MINOR * 100 + SX_VERSION_PATCH)
/** The API's own version: incremented when a function, type or constant of
 *  this header is added or changed, so code can test for one with the
 *  preprocessor (SX_API_VERSION >= N). 1: this header's API;
 *  2: sx_engine_caller_yields. */
#define SX_API_VERSION 2
/** @} */

/** Most iovec entries one sx_send, sx_send_ex or sx_sendi takes. */
#define SX_SEND_IOV_MAX 8

#if defined(SX_BUILDING_LIBRARY) && defined(__GNUC__)
#define SX_API __attribute__((visibility("default")))
#else
#define SX_API
#endif

/**
 * Status codes. This one table generates both the enum and sx_strerror(),
 * so a code and its message can never drift apart. SX_OK and SX_INPROGRESS
 * are not errors; every error is negative.
 */
#define SX_STATUS_TABLE(X)                                                   \
    X(SX_OK, 0, "success")                                                   \
    X(SX_INPROGRESS, 1, "operation in progress; it will complete later")     \
    X(SX_ERR_INVALID_PARAM, -1, "invalid parameter")                         \
    X(SX_ERR_NO_MEMORY, -2, "out of memory")                                 \
    X(SX_ERR_AGAIN, -3, "resource temporarily unavailable; try again")       \
    X(SX_ERR_NOT_FOUND, -4, "no such object")                                \
    X(SX_ERR_EXISTS, -5, "object already exists")                            \
    X(SX_ERR_UNSUPPORTED, -6, "operation not supported")                     \
    X(SX_ERR_NO_DEVICE, -7, "no usable device or transport")                 \
    X(SX_ERR_TOPOLOGY, -8, "hardware topology discovery failed")             \
    X(SX_ERR_IO, -9, "input/output error")                                   \
    X(SX_ERR_PEER_UNREACHABLE, -10, "peer unreachable")                      \
    X(SX_ERR_CANCELED, -11, "operation canceled")                            \
    X(SX_ERR_TRUNCATED, -12, "message truncated")                            \
    X(SX_ERR_OUT_OF_RANGE, -13, "value or address out of range")             \
    X(SX_ERR_ACCESS, -14, "access denied")                                   \
    X(SX_ERR_FULL, -15, "no room left")                                      \
    X(SX_ERR_SHUTDOWN, -16, "engine is shutting down")                       \
    X(SX_ERR_INTERNAL, -17, "internal error")                                \
    X(SX_ERR_PROTO, -18, "malformed or unexpected protocol data")            \
    X(SX_ERR_PEER_RESTARTED, -19, "peer restarted (a new incarnation)")      \
    X(SX_ERR_PATH_MTU, -20, "path drops datagrams of the transport MTU")     \
    X(SX_ERR_NO_LAUNCHER, -21, "not started by a launcher (sx_run, mpirun)") \
    X(SX_ERR_AUTH, -22, "authentication failed: no key, or not the peer's key (SX_AUTH)")

#define SX_STATUS_ENUM_ENTRY_(name, value, message) name = (value),
/** Every status a call returns or a completion reports (SX_STATUS_TABLE). */
typedef enum sx_status { SX_STATUS_TABLE(SX_STATUS_ENUM_ENTRY_) } sx_status_t;
#undef SX_STATUS_ENUM_ENTRY_

/** The message for a status code; never NULL, also for unknown codes. */
SX_API const char *sx_strerror(int status);

/** The symbolic name of a status code ("SX_ERR_AGAIN"); "unknown" if none. */
SX_API const char *sx_status_name(int status);

/* ------------------------------------------------------------------------ */
/* Version and build                                                         */
/* ------------------------------------------------------------------------ */

/** Optional parts; a bit is set in sx_build_info_t.features when the part
 *  is compiled into this build (its dependency was found at build time). */
enum sx_feature {
    SX_FEATURE_OFI = 1u << 0,    /**< libfabric transport */
    SX_FEATURE_VERBS = 1u << 1,  /**< libibverbs transport */
    SX_FEATURE_RDMACM = 1u << 2, /**< librdmacm connection manager */
    SX_FEATURE_PMIX = 1u << 3,   /**< PMIx modex */
    SX_FEATURE_DEBUG = 1u << 4,  /**< lock-ownership assertions */
    SX_FEATURE_ASAN = 1u << 5,   /**< built with AddressSanitizer + UBSan */
    SX_FEATURE_TSAN = 1u << 6,   /**< built with ThreadSanitizer */
    /** the progress path returns past its poll's system call through an
     *  indirect jump (CMake SX_RETURN_THUNK; src/common/hot.h) */
    SX_FEATURE_RET_THUNK = 1u << 7,
};

/** What sx_build_info() reports. */
typedef struct sx_build_info {
    const char *version;      /**< "MAJOR.MINOR.PATCH" */
    const char *build_type;   /**< CMake build type */
    const char *compiler;     /**< compiler id and version */
    const char *dependencies; /**< versions of the required libraries */
    const char *optional;     /**< optional libraries found at build time */
    unsigned features;        /**< bitwise OR of enum sx_feature */
} sx_build_info_t;

/** Fills *info_p with static strings describing this build. */
SX_API int sx_build_info(sx_build_info_t *info_p);

/* ------------------------------------------------------------------------ */
/* Configuration parameters                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Every tunable has a name (NAME, read from the environment as SX_NAME), a
 * type, a default, a range or word list, and a description. Values come
 * from the engine parameters first, then the environment, then defaults.
 */
/** How a parameter's value is written. */
typedef enum sx_param_type {
    SX_PARAM_UINT,   /**< unsigned integer, decimal or 0x hex (a leading 0 is not octal) */
    SX_PARAM_SIZE,   /**< byte count; suffixes k, m, g (powers of 1024) */
    SX_PARAM_DOUBLE, /**< floating point */
    SX_PARAM_BOOL,   /**< 1/0, yes/no, on/off, true/false */
    SX_PARAM_ENUM,   /**< one word of a fixed list */
    SX_PARAM_STRING, /**< free text */
} sx_param_type_t;

/** One configuration parameter, as sx_param_info() describes it. */
typedef struct sx_param_info {
    const char *name;          /**< without the SX_ prefix, e.g. "SHARDS" */
    sx_param_type_t type;      /**< how the value is parsed */
    const char *type_name;     /**< "uint", "size", "double", "bool", "enum", "string" */
    const char *default_value; /**< the default, as text */
    const char *allowed;       /**< range or word list, human readable */
    const char *description;   /**< what it does */
} sx_param_info_t;

/** Number of configuration parameters. */
SX_API size_t sx_param_count(void);

/** Describes parameter @p index; SX_ERR_NOT_FOUND past the end. */
SX_API int sx_param_info(size_t index, sx_param_info_t *info_p);

/** A parameter's value as sx_param_parse() reads it. */
typedef union sx_param_value {
    uint64_t u; /**< SX_PARAM_UINT, SX_PARAM_SIZE (bytes) */
    double d;   /**< SX_PARAM_DOUBLE */
    int b;      /**< SX_PARAM_BOOL: 1 or 0 */
    unsigned e; /**< SX_PARAM_ENUM: the word's position in sx_param_info_t.allowed */
} sx_param_value_t;

/**
 * Parses @p text as parameter @p index exactly as the engine would, range
 * and word list included, so a runtime with its own parameter system can
 * check a value and name its own parameter in the error. @p value_p may be
 * NULL; a string parameter accepts any text and leaves it untouched.
 * SX_OK, SX_ERR_INVALID_PARAM for a value the engine would refuse (say
 * "expected <type_name> <allowed>"), SX_ERR_NOT_FOUND past the end.
 */
SX_API int sx_param_parse(size_t index, const char *text, sx_param_value_t *value_p);

/* ------------------------------------------------------------------------ */
/* Engine                                                                    */
/* ------------------------------------------------------------------------ */

/** An engine: one per process or runtime instance (opaque). */
typedef struct sx_engine *sx_engine_h;

/** One configuration setting given in code; same names as the environment. */
typedef struct sx_config_kv {
    const char *name;  /**< "SHARDS" or "SX_SHARDS" */
    const char *value; /**< text, parsed as the parameter's type */
} sx_config_kv_t;

/** Bits of sx_engine_params_t.field_mask. */
enum sx_engine_param_field {
    SX_ENGINE_PARAM_CONFIG = 1u << 0, /**< config, config_count */
    SX_ENGINE_PARAM_NAME = 1u << 1,   /**< name */
};

/** Options of sx_engine_create(); set field_mask to the fields filled in. */
typedef struct sx_engine_params {
    uint64_t field_mask;          /**< bitwise OR of enum sx_engine_param_field */
    const sx_config_kv_t *config; /**< settings that win over the environment */
    size_t config_count;          /**< entries in config */
    const char *name;             /**< shown in log lines; copied */
} sx_engine_params_t;

/**
 * Creates an engine: discovers the topology, builds one shard per core of
 * the process's cpuset (or SX_SHARDS), and reads the configuration. The
 * cpuset is the creating thread's CPU binding, which is the process's
 * when a launcher bound the process. Logging settings (SX_LOG_LEVEL,
 * SX_LOG_FILE) are process-wide: the latest engine created sets them. An
 * invalid parameter fails with SX_ERR_INVALID_PARAM and a log line naming
 * the variable, the value and what is allowed. @p params may be NULL.
 * The library never pins the calling thread.
 */
SX_API int sx_engine_create(const sx_engine_params_t *params, sx_engine_h *engine_p);

/**
 * Destroys the engine. No other thread may use the engine, or be inside a
 * call on it, once this is called; this is the one exception to the "any
 * thread, any time" rule. Operations still pending complete, on the
 * calling thread, with SX_ERR_SHUTDOWN before it returns; an operation
 * their callbacks start then (sx_send, sx_sendi, sx_put, sx_get,
 * sx_peer_add, sx_peer_remove) returns SX_ERR_SHUTDOWN. Peers are not
 * told (a peer with data for this engine sees it stop answering). To
 * leave no peer waiting, let every operation complete first (or pass an
 * sx_job_barrier after one's own sends completed).
 */
SX_API void sx_engine_destroy(sx_engine_h engine);

/** Number of shards the engine runs. */
SX_API int sx_engine_shard_count(sx_engine_h engine, unsigned *count_p);

/** One shard, as sx_engine_shard_info() describes it. */
typedef struct sx_shard_info {
    unsigned index;  /**< shard number, 0 .. count-1 */
    int core;        /**< hwloc logical index of the core it maps to */
    int first_pu;    /**< OS index of the first processing unit of that core */
    int numa_node;   /**< hwloc logical index of its NUMA node, -1 if unknown */
    char cpuset[64]; /**< the core's cpuset as a list, e.g. "2-3" (truncated) */
    /** the device (NIC) the shard's network interface uses, chosen by
     *  NUMA locality among those SX_NET_DEVICES allows ("mlx5_0",
     *  "eth1"); "" when the transport chooses none (udp without
     *  SX_NET_DEVICES) */
    char device[64];
    /** hwloc logical index of that device's NUMA node; -1 when there is no device, or its
     *  locality is unknown (virtual interfaces) or spans several NUMA nodes */
    int device_numa_node;
} sx_shard_info_t;

/** What sx_engine_topology() found. */
typedef struct sx_topology_info {
    unsigned cores;      /**< cores in the process's cpuset */
    unsigned numa_nodes; /**< NUMA nodes in the machine */
    unsigned shards;     /**< shards the engine runs */
    int cores_are_pus;   /**< 1 if the machine reported no cores and PUs stand in */
} sx_topology_info_t;

/** What the engine found: cores, NUMA nodes, shards. */
SX_API int sx_engine_topology(sx_engine_h engine, sx_topology_info_t *info_p);

/** Describes shard @p index; SX_ERR_NOT_FOUND past the last shard. */
SX_API int sx_engine_shard_info(sx_engine_h engine, unsigned index, sx_shard_info_t *info_p);

/**
 * One transport as the engine's selection saw it. An engine reaches itself
 * through self and every other engine through one network transport: the
 * one with the highest exclusivity among those SX_TRANSPORTS allows and
 * that can run here.
 */
typedef struct sx_transport_info {
    const char *name;     /**< "udp", "ofi", "verbs", "self" */
    const char *variant;  /**< selected network transport: its variant ("udp" for ofi's
                               provider), "" when it has none; NULL otherwise */
    const char *detail;   /**< what it found (ofi: provider, fabric, domain), or why it does
                               not run */
    unsigned exclusivity; /**< its claim when available (self 1000, NIC 500, udp 100,
                               emulations 50) */
    int built;            /**< compiled into this library */
    int network;          /**< reaches other engines (0: self) */
    int allowed;          /**< SX_TRANSPORTS lets it run */
    int available;        /**< it can run here */
    int selected;         /**< the engine runs it */
    size_t mtu;           /**< selected: its largest datagram payload; 0 otherwise */
} sx_transport_info_t;

/**
 * Describes transport @p index (0, 1, ... in a fixed order);
 * SX_ERR_NOT_FOUND past the last. The strings live as long as the engine.
 */
SX_API int sx_engine_transport_info(sx_engine_h engine, unsigned index,
                                    sx_transport_info_t *info_p);

/**
 * Sets the calling thread's home shard for @p engine. Without a call, a
 * thread's home shard is chosen on first use from the core it runs on.
 * This never changes the thread's CPU affinity.
 */
SX_API int sx_thread_bind(sx_engine_h engine, unsigned shard);

/** The calling thread's home shard (choosing it if not chosen yet). */
SX_API int sx_thread_home_shard(sx_engine_h engine, unsigned *shard_p);

/**
 * Progresses the calling thread's home shard: drains its request inbox,
 * receives, runs callbacks, fires due timers and sends what is ready.
 * Every few calls it also progresses one other shard whose token is free
 * and that no thread has called home for a millisecond, so that no shard
 * starves when fewer threads than shards call in. Returns the number of
 * events handled (>= 0), or a negative status; a shard that another thread
 * is progressing is skipped, never waited for. A call that finds nothing
 * after 16 such calls in a row may give the core up before it returns
 * while threads outnumber cores (SX_YIELD): it waits at most 500 us for
 * a datagram, or calls sched_yield. A wait that a datagram ends is
 * followed by a pass over the shard it came to, whose events are counted
 * in the return value. After sx_engine_caller_yields() it waits at the
 * first empty call. What the engine's service kept while no thread called
 * in is handed up in slices: each call runs at most 256 frames of it
 * (messages, or chunks of large ones) and, after the first, none once
 * 1 ms has passed, so that the call also reads and acknowledges between
 * slices of a long backlog; call again while it returns more than 0.
 */
SX_API int sx_progress(sx_engine_h engine);

/**
 * Says whether the callers of sx_progress() on @p engine give their core
 * up (sched_yield) whenever it returns 0, as Open MPI's opal_progress does
 * under mpi_yield_when_idle (set when mpirun places more ranks than
 * slots). While @p yes is non-zero, a call that finds nothing waits at
 * once, at most 500 us, for a datagram to any of the engine's shards (the
 * runtime may let one thread progress for all its others), and
 * progresses the shards that ended the wait before it returns: the caller
 * gets work instead of handing its core to whoever is runnable, and a
 * CPU-bound neighbour no longer holds it for the rest of its time slice.
 * With SX_YIELD=auto it waits only while the machine shows more threads
 * calling in than CPUs or more runnable tasks than online CPUs that have
 * waited for one (/proc/pressure/cpu); otherwise the runtime's yield
 * costs nothing, and a wait would add a wake-up to every message.
 * "always" waits regardless, "never" never. Only for a
 * caller that has nothing else to poll: the wait does not end for
 * anything but the engine's own traffic. Any thread, at any time; off at
 * creation.
 */
SX_API int sx_engine_caller_yields(sx_engine_h engine, int yes);

/**
 * A file descriptor that becomes readable when the engine may have work
 * (a datagram arrived), when one of the engine's timers is due
 * (retransmission, delayed ACK, peer timeout: a timerfd per shard) or when
 * the engine's service kept a completion or a delivery for a caller (also
 * while a call has left part of such a backlog for the next), for
 * callers with their own event loop: wait on it with no timeout, then call
 * sx_progress() until it returns 0. It may wake once with nothing to do
 * (the first wait, or a timer that was pushed back). Owned by the engine;
 * do not close it.
 */
SX_API int sx_engine_fd(sx_engine_h engine, int *fd_p);

/* ------------------------------------------------------------------------ */
/* Peers and business cards                                                  */
/* ------------------------------------------------------------------------ */

/** A peer: another engine, or this one (opaque). */
typedef struct sx_peer *sx_peer_h;

/**
 * Writes the engine's business card — what a peer needs to reach it — to
 * @p buf. On entry *len_p is the buffer size; on SX_OK it is the card's
 * length. SX_ERR_TRUNCATED (with *len_p set to the size needed) when the
 * buffer is too small or NULL. Cards are opaque bytes to exchange by any
 * means (a pipe, a file, PMIx, MPI's own modex).
 */
SX_API int sx_engine_address(sx_engine_h engine, void *buf, size_t *len_p);

/**
 * Adds the process whose card is @p card as a peer, named @p peer_id in
 * callbacks. A card of this engine itself is allowed (sends to oneself).
 * SX_ERR_INVALID_PARAM for a malformed card, SX_ERR_EXISTS if that card's
 * engine is already a peer, SX_ERR_PEER_UNREACHABLE (with a log line
 * naming both) when its engine runs another network transport, or another
 * variant of it (ofi: another provider), or when an address on the card is
 * of a kind this engine's transport cannot reach. Channels open lazily, on
 * first use.
 */
SX_API int sx_peer_add(sx_engine_h engine, uint64_t peer_id, const void *card, size_t len,
                       sx_peer_h *peer_p);

/** Bits of sx_peer_params_t.field_mask. */
#define SX_PEER_PARAM_NAME (1ull << 0)

/** The longest peer name kept, terminator included (longer ones are cut). */
#define SX_PEER_NAME_MAX 64

/** Optional settings of sx_peer_add_ex(); fields count only when their bit
 *  is set in field_mask, so later versions can add fields. */
typedef struct sx_peer_params {
    uint64_t field_mask; /**< SX_PEER_PARAM_* */
    /** How log lines and sx_dump() name the peer, e.g. "rank 3 on node2"
     *  (copied). Without it they say "peer <peer_id>". */
    const char *name;
} sx_peer_params_t;

/** sx_peer_add() with optional settings (@p params may be NULL). */
SX_API int sx_peer_add_ex(sx_engine_h engine, uint64_t peer_id, const void *card, size_t len,
                          const sx_peer_params_t *params, sx_peer_h *peer_p);

/**
 * Removes a peer: operations still pending to it complete with
 * SX_ERR_CANCELED; the handle must not be used after this returns. What
 * of the peer's is not yet handed up is not handed up after it returns,
 * also what was already received (by the engine's service, or in the
 * datagram whose handler removes the peer): it counts as from an unknown
 * peer (drop_unknown_peer); a handler another thread runs at that moment
 * finishes. The same incarnation of that engine cannot be added again
 * (sx_peer_add answers SX_ERR_EXISTS): its channels' sequence state is
 * gone, and starting over would lose or repeat messages. A restarted
 * process has a new epoch and is added normally.
 */
SX_API int sx_peer_remove(sx_engine_h engine, sx_peer_h peer);

/** The id the peer was added with. */
SX_API uint64_t sx_peer_id(sx_peer_h peer);

/*
 * How channels connect (not a declaration's documentation): SX_ERR_UNSUPPORTED
 * from sx_peer_add means the two cards share no connection method (see
 * SX_CPC). Channels connect lazily: the first operation to a peer starts
 * the method's exchange and later ones queue behind it. A channel that
 * cannot connect within SX_CONNECT_TIMEOUT_MS fails its operations with
 * SX_ERR_PEER_UNREACHABLE (no answer) or SX_ERR_PATH_MTU (only small
 * datagrams get through), logs a diagnosis and runs the error callback; a
 * peer found to have restarted fails with SX_ERR_PEER_RESTARTED.
 */

/* ------------------------------------------------------------------------ */
/* Jobs: processes started together by a launcher                            */
/* ------------------------------------------------------------------------ */

/** What sx_engine_join found. */
typedef struct sx_job_info {
    uint32_t rank;     /**< this process, 0 .. size - 1 */
    uint32_t size;     /**< processes in the job */
    const char *modex; /**< how cards were exchanged: "pmix" or "sxrun" (static string) */
} sx_job_info_t;

/**
 * Joins the job that launched this process: publishes the engine's card,
 * reads every other process's through the modex (PMIx under Open MPI's
 * mpirun or another PMIx launcher; sx_run's rendezvous; SX_MODEX picks)
 * and adds each process as a peer whose id is its rank (this process is
 * the self peer). Blocks until every process of the job has joined. Once
 * per engine (SX_ERR_EXISTS after). SX_ERR_NO_LAUNCHER when no launcher
 * started the process: exchange cards with sx_engine_address and
 * sx_peer_add instead, as an MPI runtime does with its own modex.
 */
SX_API int sx_engine_join(sx_engine_h engine, sx_job_info_t *info_p);

/** The peer of rank @p rank after sx_engine_join, or NULL. */
SX_API sx_peer_h sx_job_peer(sx_engine_h engine, uint32_t rank);

/**
 * A barrier over the job: returns once every process has entered it. It
 * keeps progressing the engine while it waits, so peers still waiting for
 * this process's acknowledgements are served; a process that has seen its
 * own sends complete and then passes a barrier may destroy its engine
 * without leaving a peer hanging. Every process calls it equally often, from
 * one thread at a time. Under sx_run, SX_ERR_PEER_UNREACHABLE (logged with
 * its rank) when a process left the job (it ended, or destroyed its
 * engine) before it entered this barrier; sx_engine_join returns the same
 * for one that left before it joined.
 */
SX_API int sx_job_barrier(sx_engine_h engine);

/* ------------------------------------------------------------------------ */
/* Active messages                                                           */
/* ------------------------------------------------------------------------ */

/**
 * An active-message handler. It runs on a thread inside sx_progress() (or
 * a call that progresses, or a progress thread), never on the engine's
 * own service thread, with no shardx lock held: it may call any shardx
 * function, including sx_send(), but not sx_engine_destroy(). @p data is
 * valid only during the call.
 */
typedef void (*sx_am_cb_t)(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len);

/** Sets the handler of @p tag (NULL removes it). Messages with a tag that
 *  has no handler are dropped and counted. */
SX_API int sx_am_register(sx_engine_h engine, uint8_t tag, sx_am_cb_t cb, void *arg);

/** One active message, as an sx_am_register_ex() handler sees it; valid
 *  only during the call, as are its fields. */
typedef struct sx_am_msg {
    sx_peer_h peer;   /**< the sender: reply with sx_send(msg->peer, ...) */
    uint64_t peer_id; /**< the id the sender was added with */
    uint8_t tag;      /**< the tag it was sent with */
    const void *data; /**< the message */
    size_t len;       /**< its length in bytes */
} sx_am_msg_t;

/** An active-message handler that gets the sender's handle (UCX's
 *  ucp_am_recv_param_t.reply_ep); thread rules as sx_am_cb_t. */
typedef void (*sx_am_msg_cb_t)(void *arg, const sx_am_msg_t *msg);

/** sx_am_register() for a handler that gets an sx_am_msg_t; either kind
 *  replaces the handler of @p tag. */
SX_API int sx_am_register_ex(sx_engine_h engine, uint8_t tag, sx_am_msg_cb_t cb, void *arg);

/**
 * A completion: runs exactly once per operation, with SX_OK once the
 * peer's library has acknowledged it (an active message: received in
 * order, maybe not yet handed to its handler; a PUT or GET: done at the
 * target), or an error (SX_ERR_PEER_UNREACHABLE, SX_ERR_CANCELED, ...).
 * Same thread rules as sx_am_cb_t.
 */
typedef void (*sx_complete_cb_t)(void *ctx, int status);

/**
 * Sends an active message, the concatenation of @p iov (at most
 * SX_SEND_IOV_MAX entries), to @p peer. The buffers must stay valid and
 * unchanged until the completion runs (the iovec array itself is copied).
 * The completion runs when the peer's library has acknowledged the whole
 * message (it holds it; its handler may not have run yet), or with the
 * error that ended it; a peer that refuses the message says so before
 * its acknowledgement, and the completion gets its reason:
 * SX_ERR_TRUNCATED when the message is larger than the peer's
 * SX_MAX_MSG_SIZE, SX_ERR_NOT_FOUND when the peer has no handler for
 * @p tag as the message arrives. Messages from one thread to one peer arrive in
 * order. Returns SX_INPROGRESS (the completion will run), or an error
 * (SX_ERR_INVALID_PARAM, SX_ERR_NO_MEMORY, the peer's failure), in which
 * case the completion never runs; it never returns SX_ERR_AGAIN: a full
 * window queues the message.
 */
SX_API int sx_send(sx_peer_h peer, uint8_t tag, const struct iovec *iov, int iovcnt,
                   sx_complete_cb_t cb, void *ctx);

/** Bits of sx_send_params_t.field_mask. */
enum sx_send_param_field {
    SX_SEND_PARAM_LANE = 1u << 0,  /**< lane */
    SX_SEND_PARAM_FLAGS = 1u << 1, /**< flags */
};

/** sx_send_ex flags. */
enum sx_send_flag {
    /** More sends follow at once: the engine may hold this message back so
     *  that the next ones share its datagram (as libfabric's FI_MORE). It
     *  goes out at the caller's next send without the flag, or at the next
     *  sx_progress call on its shard, whichever comes first; a caller that
     *  sets the flag must make one of the two happen. */
    SX_SEND_MORE = 1u << 0,
};

/** Options of sx_send_ex; set field_mask to the fields filled in. */
typedef struct sx_send_params {
    uint64_t field_mask; /**< bitwise OR of enum sx_send_param_field */
    /** The peer's shard to send to (modulo its shard count). A runtime can
     *  map communicators or VCIs onto lanes; messages keep their order
     *  within one lane, not across lanes. Default: the caller's home shard
     *  modulo the peer's shard count. */
    unsigned lane;
    /** SX_SEND_* flags (SX_SEND_PARAM_FLAGS); unknown bits are an error. */
    unsigned flags;
} sx_send_params_t;

/** sx_send with options; @p params may be NULL. */
SX_API int sx_send_ex(sx_peer_h peer, uint8_t tag, const struct iovec *iov, int iovcnt,
                      const sx_send_params_t *params, sx_complete_cb_t cb, void *ctx);

/**
 * Sends a message now, copying it, or returns SX_ERR_AGAIN instead of
 * queueing when the calling thread's shard is busy or its window is full.
 * There is no completion: delivery is as reliable as sx_send's, and a
 * failure is reported through the error callback: the peer's, or the
 * peer's refusal of this message (SX_ERR_TRUNCATED, SX_ERR_NOT_FOUND, as
 * sx_send's completion would get them).
 */
SX_API int sx_sendi(sx_peer_h peer, uint8_t tag, const struct iovec *iov, int iovcnt);

/** Called once per failed peer, and once for each message sent with
 *  sx_sendi that the peer refused (@p status SX_ERR_TRUNCATED or
 *  SX_ERR_NOT_FOUND; the message is not delivered, the peer stays
 *  usable), from a thread inside sx_progress (or a progress thread); same
 *  thread rules as sx_am_cb_t. */
typedef void (*sx_error_cb_t)(void *arg, uint64_t peer_id, int status);

/** Sets the callback told about failed peers (NULL removes it). */
SX_API int sx_error_register(sx_engine_h engine, sx_error_cb_t cb, void *arg);

/* ------------------------------------------------------------------------ */
/* Remote memory access (emulated over datagrams)                            */
/* ------------------------------------------------------------------------ */

/** A registered memory region (opaque). */
typedef struct sx_mem *sx_mem_h;
/** The key that names a registered region to peers. */
typedef uint64_t sx_rkey_t;

/** Access rights of a registered region. */
enum sx_mem_access {
    SX_MEM_REMOTE_READ = 1u << 0,  /**< peers may sx_get from it */
    SX_MEM_REMOTE_WRITE = 1u << 1, /**< peers may sx_put into it */
};

/**
 * Registers [addr, addr + len) for remote access. The key (sx_mem_rkey) is
 * random and unguessable; send it to the peers that may use it. Remote
 * operations are checked against the key, the access rights and the range,
 * and a failed check leaves the memory untouched.
 */
SX_API int sx_mem_register(sx_engine_h engine, void *addr, size_t len, unsigned access,
                           sx_mem_h *mem_p);

/**
 * Withdraws a registration. When it returns, no remote access to the
 * region is in progress or will start; operations that arrive later fail
 * with SX_ERR_ACCESS at their initiator. It blocks only until receive
 * paths leave their RCU read sections, which never wait for anything, so
 * it may also be called from a callback. A handle that is not registered
 * with @p engine (another engine's, or deregistered already) gives
 * SX_ERR_INVALID_PARAM and is not read, unless a later registration got
 * the same address: a handle is the region's record, so a deregistered
 * one must not be used again.
 */
SX_API int sx_mem_deregister(sx_engine_h engine, sx_mem_h mem);

/** The key peers name the region with. */
SX_API sx_rkey_t sx_mem_rkey(sx_mem_h mem);

/**
 * Writes @p len bytes from @p src to the peer's address @p raddr in the
 * region of key @p key. Completes with SX_OK once the bytes are in place
 * at the target, or, having written nothing, with SX_ERR_ACCESS (unknown
 * or withdrawn key, no write right) or SX_ERR_OUT_OF_RANGE (the range is
 * not inside the region). Beyond 4096 PUT and GET operations outstanding
 * on its channel (one per peer and lane), later ones wait there, in the
 * order posted, until answers make room. @p src must stay valid until the
 * completion. Returns SX_INPROGRESS or an error (no completion).
 */
SX_API int sx_put(sx_peer_h peer, const void *src, size_t len, uint64_t raddr, sx_rkey_t key,
                  sx_complete_cb_t cb, void *ctx);

/** Reads @p len bytes at the peer's @p raddr into @p dst; same rules. */
SX_API int sx_get(sx_peer_h peer, void *dst, size_t len, uint64_t raddr, sx_rkey_t key,
                  sx_complete_cb_t cb, void *ctx);

/* ------------------------------------------------------------------------ */
/* Counters                                                                  */
/* ------------------------------------------------------------------------ */

/** One counter: a stable name, what it counts, and its value summed over
 *  the engine's shards. Names and descriptions are static strings. */
typedef struct sx_counter {
    const char *name;        /**< stable identifier, e.g. "rtx_timeout" */
    const char *description; /**< one line, for people */
    uint64_t value;          /**< the sum over the engine's shards */
} sx_counter_t;

/**
 * Reads the engine's counters (sent, received, retransmissions by cause,
 * drops by reason, ...) without stopping anyone: each value is exact, the
 * set is not one snapshot. Fills up to *count_p entries of @p counters and
 * sets *count_p to the number of counters; SX_ERR_TRUNCATED when the array
 * was too small (or NULL). A runtime can bridge these to MPI_T.
 */
SX_API int sx_stats_get(sx_engine_h engine, sx_counter_t *counters, size_t *count_p);

/** The value of the counter called @p name; SX_ERR_NOT_FOUND if none. */
SX_API int sx_stats_value(sx_engine_h engine, const char *name, uint64_t *value_p);

/* ------------------------------------------------------------------------ */
/* Diagnostics                                                               */
/* ------------------------------------------------------------------------ */

/**
 * Writes the engine's state to @p out, for a person debugging a hang or a
 * loss (docs/debugging.md explains the fields). Per shard: its inbox depth
 * and hotel occupancy. Per channel: the peer's id, epoch and address, the
 * connection state, sequence numbers, un-ACKed packets and bytes against
 * the window, RTO, smoothed RTT and back-off, the next retransmission
 * deadline, the receive side's next sequence and out-of-order packets, and
 * the pending operations with their kind and age. Each shard is read while
 * holding its token, tried for a bounded time (half a second); a shard
 * that stays busy that long is reported as busy instead of read.
 * Anything a thread queued on a shard meanwhile runs before the shard is
 * released, so callbacks may run inside this call. SX_DUMP_SIGNAL writes
 * the same report to the log when the process gets that signal.
 */
SX_API int sx_dump(sx_engine_h engine, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* SHARDX_H */
