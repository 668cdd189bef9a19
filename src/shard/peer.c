/* SPDX-License-Identifier: BSD-3-Clause */
/* Peers and the peer table; see peer.h. */
#include "shard/peer.h"

#include <stdlib.h>

#include <shardx.h>

#include "common/log.h"
#include "shard/chan.h"

int sx_peer_table_init(sx_peer_table_t *table)
{
    table->all = NULL;
    table->removed_epochs = NULL;
    table->nremoved = table->removed_cap = 0;
    atomic_init(&table->removals, 0);
    sx_fairlock_init(&table->lock);
    int rc = sx_rcu_table_init(&table->rcu);
    table->created = rc == SX_OK;
    return rc;
}

void sx_peer_table_fini(sx_peer_table_t *table)
{
    /* Every peer left drops its table reference here, after the grace
     * period, and is freed then (its closing reference is gone). */
    if (table->created)
        sx_rcu_table_fini(&table->rcu);
    table->created = false;
    table->all = NULL;
    free(table->removed_epochs);
    table->removed_epochs = NULL;
    table->nremoved = table->removed_cap = 0;
}

static void sx_peer_free(struct sx_peer *peer)
{
    free(peer->addr);
    free(peer->chans);
    free(peer);
}

void sx_peer_put(struct sx_peer *peer)
{
    if (atomic_fetch_sub(&peer->refs, 1) == 1)
        sx_peer_free(peer);
}

/* The table's reference, dropped after the grace period that follows the
 * peer's removal (liburcu's call_rcu thread). */
static void sx_peer_table_release(sx_rcu_entry_t *entry)
{
    sx_peer_put(caa_container_of(entry, struct sx_peer, entry));
}

struct sx_peer *sx_peer_new(unsigned nshards, unsigned local_shards)
{
    struct sx_peer *peer = calloc(1, sizeof(*peer));
    if (peer == NULL)
        return NULL;
    peer->addr = calloc(nshards, sizeof(*peer->addr));
    peer->chans = calloc((size_t)local_shards * nshards, sizeof(*peer->chans));
    if (peer->addr == NULL || peer->chans == NULL) {
        sx_peer_free(peer);
        return NULL;
    }
    peer->nshards = nshards;
    peer->local_shards = local_shards;
    atomic_init(&peer->failed, 0);
    atomic_init(&peer->error_reported, false);
    atomic_init(&peer->refs, 2); /* the table's, and the closing protocol's */
    peer->entry.free_fn = sx_peer_table_release;
    return peer;
}

void sx_peer_discard(struct sx_peer *peer)
{
    sx_peer_free(peer);
}

int sx_peer_table_add(sx_peer_table_t *table, struct sx_peer *peer, bool *was_removed_p)
{
    bool was_removed = false;

    peer->entry.id = peer->epoch;
    sx_fairlock_lock(&table->lock);
    for (size_t i = 0; i < table->nremoved; i++)
        was_removed |= (table->removed_epochs[i] == peer->epoch);
    int rc = was_removed ? SX_ERR_EXISTS : sx_rcu_table_insert(&table->rcu, &peer->entry);
    if (rc == SX_OK) {
        peer->all_next = table->all;
        table->all = peer;
    }
    sx_fairlock_unlock(&table->lock);
    *was_removed_p = was_removed;
    return rc;
}

int sx_peer_table_remove(sx_peer_table_t *table, struct sx_peer *peer)
{
    sx_fairlock_lock(&table->lock);
    if (peer->removed) {
        sx_fairlock_unlock(&table->lock);
        return SX_ERR_NOT_FOUND;
    }
    peer->removed = true;
    if (table->nremoved == table->removed_cap) {
        size_t cap = table->removed_cap ? 2 * table->removed_cap : 16;
        uint64_t *grown = realloc(table->removed_epochs, cap * sizeof(*grown));
        if (grown != NULL) {
            table->removed_epochs = grown;
            table->removed_cap = cap;
        }
    }
    /* Out of memory here only loses the guard against a re-add. */
    if (table->nremoved < table->removed_cap)
        table->removed_epochs[table->nremoved++] = peer->epoch;
    for (struct sx_peer **pp = &table->all; *pp != NULL; pp = &(*pp)->all_next) {
        if (*pp == peer) {
            *pp = peer->all_next;
            break;
        }
    }
    sx_fairlock_unlock(&table->lock);
    /* No new packet finds the peer from here on; the table's reference
     * drops after a grace period. */
    (void)sx_rcu_table_remove(&table->rcu, peer->epoch);
    atomic_fetch_add_explicit(&table->removals, 1, memory_order_release);
    return SX_OK;
}

struct sx_peer *sx_peer_lookup_rcu(sx_peer_table_t *table, uint64_t epoch)
{
    sx_rcu_entry_t *e = sx_rcu_table_lookup_rcu(&table->rcu, epoch);
    return e != NULL ? caa_container_of(e, struct sx_peer, entry) : NULL;
}

void sx_peer_close_locked(struct sx_shard *shard, struct sx_peer *peer, int status)
{
    for (unsigned lane = 0; lane < peer->nshards; lane++) {
        sx_chan_t *c = sx_peer_chan(peer, shard->index, lane);
        if (c != NULL)
            sx_chan_destroy_locked(c, status);
    }
}

int sx_peer_failed_status(const struct sx_peer *peer, const char *what, int failed)
{
    sx_debug("peer", "%s to %s refused: the peer failed earlier (%s)", what, peer->name,
             sx_status_name(failed));
    return failed;
}
