/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Peers and the peer table. A peer is another engine (another process, or
 * this engine itself), as its business card describes it, with the
 * channels to it; the table is where receive paths find a peer by its
 * epoch, and where its lifetime is decided.
 *
 * Lifetime (RCU, DESIGN.md section 3). A peer holds two references: the
 * table's and the closing protocol's. Adding publishes it in an RCU table
 * (locks/rcu_table.h) keyed by its epoch, so every shard's receive path
 * looks it up without a lock. Removing takes it out of the table (no new
 * packet finds it), whose reference drops after a grace period; the
 * closing protocol (each shard closes its channels to it, then the last
 * one drops the other reference) runs meanwhile. Whatever order the two
 * finish in, the peer is freed by the second, so a reader that found it
 * may keep using it to the end of its read section, and a shard keeps its
 * channels' peer until it has closed them.
 *
 * Synchronization:
 *
 *   field / function          | written or called by             | how
 *   --------------------------+----------------------------------+---------------------------
 *   id .. conn_offer          | the adder, before publication    | read-only afterwards
 *   chans[s * n + r]          | the token holder of local shard s| that token holder
 *   failed                    | any shard (CAS from 0, once)     | any thread (acquire)
 *   error_reported            | exchange, once                   |
 *   removed, all_next         | under the table's lock           |
 *   err_next, err_status      | the shard that reports it (once) | its token holder
 *   sx_peer_table_add/remove  | any thread                       | the table's lock (fair),
 *                             |                                  | then the RCU writer lock
 *   sx_peer_lookup_rcu        | any thread                       | inside sx_rcu_read_lock()
 *   the list at table->all    | any thread                       | under table->lock
 *   sx_peer_table_init / fini | one thread, no others            |
 */
#ifndef SX_SHARD_PEER_H
#define SX_SHARD_PEER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shardx.h>

#include "locks/fairlock.h"
#include "locks/rcu_table.h"
#include "shard/conn.h"
#include "transports/transport.h"

struct sx_chan;
struct sx_shard;

typedef struct sx_peer_addr {
    uint8_t len;
    uint8_t bytes[SX_TL_ADDR_MAX];
} sx_peer_addr_t;

struct sx_peer {
    sx_rcu_entry_t entry; /* id = the peer's epoch */
    uint64_t id;          /* the caller's name for the peer */
    /* How log lines name it: sx_peer_params_t.name ("rank 3 on node2"), else
     * "peer <id>". Set before anything logs about the peer, then read-only. */
    char name[SX_PEER_NAME_MAX];
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
    struct sx_peer *all_next; /* the table's list of every peer, for destroy */
    bool removed;             /* under the table's lock */
    /* Its error report, when the service found the failure and a caller
     * must make the callback (shard.h's deferred lists). */
    struct sx_peer *err_next;
    int err_status;
    /* How its channels connect: the method chosen for it (src/cpc/), and
     * the peer's offer of that method. Set before publication. */
    const sx_conn_method_t *conn_method;
    sx_conn_offer_t conn_offer;
};

typedef struct sx_peer_table {
    sx_rcu_table_t rcu; /* by epoch */
    bool created;
    sx_fairlock_t lock;  /* the list, `removed` and the epochs below */
    struct sx_peer *all; /* every peer added and not removed */
    /* Epochs of removed peers: the same incarnation may not come back (its
     * channels' sequence state is gone; only a handshake could reset it). */
    uint64_t *removed_epochs;
    size_t nremoved, removed_cap;
    /* Removals so far, counted after each is out of the RCU table: a
     * shard's cached receive channel (shard.h, rx_chan) is used only
     * while this has not moved since the lookup that found it. Any
     * thread reads it; sx_peer_table_remove writes it. */
    atomic_uint removals;
} sx_peer_table_t;

int sx_peer_table_init(sx_peer_table_t *table);

/** Frees the table; the peers still on its list must have been closed and
 *  put (sx_peer_put) already. No other thread may use it. */
void sx_peer_table_fini(sx_peer_table_t *table);

/** A new, unpublished peer of @p nshards shards seen from an engine of
 *  @p local_shards: addresses and channel slots zeroed, two references.
 *  NULL when out of memory. */
struct sx_peer *sx_peer_new(unsigned nshards, unsigned local_shards);

/** Frees a peer that was never added (or whose add failed). */
void sx_peer_discard(struct sx_peer *peer);

/**
 * Publishes @p peer (its epoch set). SX_ERR_EXISTS when a peer of that
 * epoch is in the table, or was and has been removed (*was_removed_p
 * says which); the peer then still belongs to the caller.
 */
int sx_peer_table_add(sx_peer_table_t *table, struct sx_peer *peer, bool *was_removed_p);

/**
 * Takes @p peer out of the table and off the list; its table reference
 * drops after a grace period, the closing protocol's stays with the
 * caller. SX_ERR_NOT_FOUND if it was removed already.
 */
int sx_peer_table_remove(sx_peer_table_t *table, struct sx_peer *peer);

/** The peer of @p epoch, or NULL. Call inside sx_rcu_read_lock(); the
 *  peer stays valid until sx_rcu_read_unlock(&table->rcu). */
struct sx_peer *sx_peer_lookup_rcu(sx_peer_table_t *table, uint64_t epoch);

/** Drops one reference; the last frees the peer. */
void sx_peer_put(struct sx_peer *peer);

/** Destroys local shard @p shard's channels to @p peer, completing their
 *  operations with @p status. That shard's token holder (or the only
 *  thread left, at destruction). */
void sx_peer_close_locked(struct sx_shard *shard, struct sx_peer *peer, int status);

/** What an operation on a failed peer returns: @p failed, the status it
 *  failed with. The failure itself was logged once when it happened
 *  (sx_chan_fail_why_locked); each refused operation only at debug
 *  level, so that a caller that keeps trying does not flood the log. */
int sx_peer_failed_status(const struct sx_peer *peer, const char *what, int failed);

/** The channel of local shard @p shard to the peer's shard @p lane, or NULL. */
static inline struct sx_chan *sx_peer_chan(const struct sx_peer *peer, unsigned shard,
                                           unsigned lane)
{
    return peer->chans[(size_t)shard * peer->nshards + lane];
}

#endif /* SX_SHARD_PEER_H */
