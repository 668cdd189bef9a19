/*
 * A peer: another engine (another process, or this engine itself), as its
 * business card describes it, and the channels to it.
 *
 * Synchronization:
 *
 *   field           | written                          | read
 *   ----------------+----------------------------------+---------------------------
 *   id .. addr      | sx_peer_add, before publication  | any thread
 *   chans[s * n + r]| the token holder of local shard s| that token holder
 *   failed          | any shard (CAS from 0, once)     | any thread (acquire)
 *   error_reported  | exchange, once                   |
 *
 * A peer lives in the engine's RCU table (keyed by its epoch) and is freed
 * after a grace period once removed and once every shard has closed its
 * channels to it.
 */
#ifndef SX_SHARD_PEER_H
#define SX_SHARD_PEER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "locks/rcu_table.h"
#include "cpc/cpc.h"
#include "transports/transport.h"

struct sx_chan;

typedef struct sx_peer_addr {
    uint8_t len;
    uint8_t bytes[SX_TL_ADDR_MAX];
} sx_peer_addr_t;

struct sx_peer {
    sx_rcu_entry_t entry; /* id = the peer's epoch */
    uint64_t id;          /* the caller's name for the peer */
    uint64_t epoch;
    unsigned nshards;       /* the peer's shards */
    unsigned local_shards;  /* ours: rows of chans */
    bool is_self;           /* the peer is this engine: the self transport */
    sx_peer_addr_t *addr;   /* [nshards]: network address of each remote shard */
    struct sx_chan **chans; /* [local_shards * nshards] */
    atomic_int failed;      /* 0, or the status every operation now fails with */
    atomic_bool error_reported;
    atomic_uint refs;         /* the table's reference and the closing protocol's */
    void *engine;             /* the engine it belongs to (opaque to this layer) */
    struct sx_peer *all_next; /* the engine's list of every peer, for destroy */
    bool removed;             /* under the engine's peer lock */
    /* How its channels connect: the chosen component's module on each of
     * our shards, and the peer's offer of it. Set before publication. */
    struct sx_cpc_module *cpc_mods; /* [local_shards] */
    sx_cpc_offer_t cpc_offer;
};

#endif /* SX_SHARD_PEER_H */
