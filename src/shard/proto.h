/*
 * The protocol context an engine shares with its shards: settings, the
 * engine's epoch, handler tables and the peer table. The shard layer reads
 * it; only the engine writes it (at creation, or through the atomics
 * below).
 *
 * Synchronization:
 *
 *   field          | written                       | read
 *   ---------------+-------------------------------+------------------------------
 *   settings       | engine creation only          | any thread
 *   am[], error    | sx_am_register / error_register (release) | receive paths (acquire)
 *   peers          | see locks/rcu_table.h        | receive paths, under RCU
 */
#ifndef SX_SHARD_PROTO_H
#define SX_SHARD_PROTO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shardx.h>

#include "locks/rcu_table.h"

/* A handler and its argument, published as one immutable object so a
 * reader never sees a new callback with an old argument. */
typedef struct sx_am_handler {
    sx_am_cb_t cb;
    void *arg;
} sx_am_handler_t;

typedef struct sx_err_handler {
    sx_error_cb_t cb;
    void *arg;
} sx_err_handler_t;

/* A registered memory region; the key is the table id. Freed only after a
 * grace period, and sx_mem_deregister waits one out, so no remote write
 * lands after it returns. */
typedef struct sx_mem {
    sx_rcu_entry_t entry;
    uint8_t *addr;
    size_t len;
    unsigned access; /* SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE */
    void *engine;
} sx_mem_t;

/* Most message frames one data packet carries (aggregation, DESIGN.md §4). */
#define SX_PKT_MAX_FRAMES 64

typedef struct sx_proto {
    uint64_t epoch;      /* this engine's epoch, random at creation */
    unsigned nshards;    /* shards of this engine */
    uint32_t window;     /* packets per channel, a power of two */
    size_t max_inflight; /* unacknowledged bytes per channel */
    uint64_t ack_delay_ns;
    unsigned ack_every;
    uint64_t rto_min_ns;
    uint64_t rto_max_ns;
    uint64_t rto_init_ns;
    uint64_t peer_timeout_ns;
    uint64_t connect_timeout_ns;
    bool checksum;
    unsigned max_frames; /* frames per packet: SX_PKT_MAX_FRAMES; 1 when SX_AGGREGATE=no */
    uint64_t max_msg;
    _Atomic(sx_am_handler_t *) am[256];
    _Atomic(sx_err_handler_t *) error;
    sx_rcu_table_t *peers; /* keyed by the peer engine's epoch */
    sx_rcu_table_t *mem;   /* registered memory, keyed by remote key */
} sx_proto_t;

#endif /* SX_SHARD_PROTO_H */
