/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An RCU-protected table of entries keyed by a 64-bit id. The engine keeps
 * its peers in one (keyed by the peer's id) and, with the memory
 * registration API, its memory keys in another.
 *
 * Receive paths look entries up on every packet, from every shard at once,
 * so lookups take no lock: they run inside an RCU read-side critical
 * section (liburcu's "bp" flavour, which needs no thread registration —
 * right for a library whose caller owns the threads) over liburcu's
 * lock-free resizable hash table (rculfhash; Triplett, McKenney and
 * Walpole, "Resizable, Scalable, Concurrent Hash Tables via Relativistic
 * Programming", USENIX ATC 2011). Adds and removes are rare and serialise
 * on a fair lock; a removed entry is freed only after a grace period, so a
 * reader that found it may keep using it until its read section ends.
 *
 * Synchronization:
 *
 *   function                   | who may call             | lock held
 *   ---------------------------+--------------------------+-------------------
 *   sx_rcu_read_lock / unlock  | any thread               | (starts/ends a read section)
 *   sx_rcu_table_lookup_rcu    | any thread               | inside a read section
 *   sx_rcu_table_insert        | any thread               | takes the writer lock
 *   sx_rcu_table_remove        | any thread               | takes the writer lock
 *   sx_rcu_table_count         | any thread               | none (approximate)
 *   sx_rcu_table_init / fini   | one thread, no others    | none
 */
#ifndef SX_LOCKS_RCU_TABLE_H
#define SX_LOCKS_RCU_TABLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu-bp.h>
#include <urcu/rculfhash.h>

#include "common/tsan.h"
#include "locks/fairlock.h"

typedef struct sx_rcu_entry sx_rcu_entry_t;

/** Frees an entry after the grace period that follows its removal. Runs on
 *  liburcu's call_rcu thread: it must not block for long or take a lock
 *  that a reader holds. */
typedef void (*sx_rcu_entry_free_fn)(sx_rcu_entry_t *entry);

struct sx_rcu_entry {
    struct cds_lfht_node node; /* private to the table */
    struct rcu_head rcu;       /* private to the table */
    uint64_t id;               /* key; set before insert, never changed */
    sx_rcu_entry_free_fn free_fn;
    struct sx_rcu_table *table; /* set by insert */
};

typedef struct sx_rcu_table {
    struct cds_lfht *ht;
    sx_fairlock_t writer_lock;
    atomic_size_t count;
    /* TSan cannot see grace periods; readers release this address when
     * they leave a read section and the deferred free acquires it. */
    char tsan_grace_period;
} sx_rcu_table_t;

int sx_rcu_table_init(sx_rcu_table_t *table);

/** Removes and frees every remaining entry, then waits for all deferred
 *  frees. No other thread may use the table. */
void sx_rcu_table_fini(sx_rcu_table_t *table);

/** Inserts @p entry (id and free_fn set). SX_ERR_EXISTS if the id is taken;
 *  the entry then still belongs to the caller. */
int sx_rcu_table_insert(sx_rcu_table_t *table, sx_rcu_entry_t *entry);

/** Unlinks the entry with @p id and frees it after a grace period.
 *  SX_ERR_NOT_FOUND if there is none. */
int sx_rcu_table_remove(sx_rcu_table_t *table, uint64_t id);

/** The entry with @p id, or NULL. Call inside sx_rcu_read_lock(); the entry
 *  stays valid until the matching sx_rcu_read_unlock(). */
sx_rcu_entry_t *sx_rcu_table_lookup_rcu(sx_rcu_table_t *table, uint64_t id);

static inline size_t sx_rcu_table_count(sx_rcu_table_t *table)
{
    return atomic_load_explicit(&table->count, memory_order_relaxed);
}

static inline void sx_rcu_read_lock(void)
{
    rcu_read_lock();
}

static inline void sx_rcu_read_unlock(sx_rcu_table_t *table)
{
    SX_TSAN_RELEASE(&table->tsan_grace_period);
    rcu_read_unlock();
}

#endif /* SX_LOCKS_RCU_TABLE_H */
