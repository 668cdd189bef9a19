/* SPDX-License-Identifier: BSD-3-Clause */
/* The RCU-protected id table; see rcu_table.h. */
#include "locks/rcu_table.h"

#include <pthread.h>
#include <shardx.h>

#include "common/log.h"

/* splitmix64's finaliser: ids are often small consecutive numbers, and
 * rculfhash splits buckets by the low bits, so spread them first. */
static unsigned long sx_rcu_table_hash(uint64_t id)
{
    id ^= id >> 30;
    id *= 0xbf58476d1ce4e5b9ull;
    id ^= id >> 27;
    id *= 0x94d049bb133111ebull;
    id ^= id >> 31;
    return (unsigned long)id;
}

static int sx_rcu_table_match(struct cds_lfht_node *node, const void *key)
{
    const sx_rcu_entry_t *e = caa_container_of(node, sx_rcu_entry_t, node);
    /* The node was published by sx_rcu_table_insert (release on e). */
    SX_TSAN_ACQUIRE(e);
    return e->id == *(const uint64_t *)key;
}

/*
 * fork(): liburcu's call_rcu worker (and rculfhash's resize worker, which
 * registers with it) do not survive into the child, whose rcu_barrier()
 * would then wait forever. liburcu leaves the fork hooks to the
 * application (urcu-bp.h, call-rcu.h); a library whose caller may fork
 * registers them itself, once.
 */
static void sx_rcu_prefork(void)
{
    call_rcu_before_fork();
    rcu_bp_before_fork();
}

static void sx_rcu_postfork_parent(void)
{
    rcu_bp_after_fork_parent();
    call_rcu_after_fork_parent();
}

static void sx_rcu_postfork_child(void)
{
    rcu_bp_after_fork_child();
    call_rcu_after_fork_child();
}

static pthread_once_t sx_rcu_atfork_once = PTHREAD_ONCE_INIT;

static void sx_rcu_register_atfork(void)
{
    if (pthread_atfork(sx_rcu_prefork, sx_rcu_postfork_parent, sx_rcu_postfork_child) != 0)
        sx_warn("rcu", "cannot register fork handlers: a forked child may hang in RCU");
}

int sx_rcu_table_init(sx_rcu_table_t *table)
{
    pthread_once(&sx_rcu_atfork_once, sx_rcu_register_atfork);
    table->ht = cds_lfht_new(16, 16, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING, NULL);
    if (table->ht == NULL)
        return SX_ERR_NO_MEMORY;
    sx_fairlock_init(&table->writer_lock);
    atomic_init(&table->count, 0);
    return SX_OK;
}

static void sx_rcu_entry_free_rcu(struct rcu_head *head)
{
    sx_rcu_entry_t *e = caa_container_of(head, sx_rcu_entry_t, rcu);
    /* The remover's hand-off through call_rcu, then every reader's exit
     * from its read section (the grace period). */
    SX_TSAN_ACQUIRE(e);
    SX_TSAN_ACQUIRE(&e->table->tsan_grace_period);
    e->free_fn(e);
}

int sx_rcu_table_insert(sx_rcu_table_t *table, sx_rcu_entry_t *entry)
{
    if (entry == NULL || entry->free_fn == NULL)
        return SX_ERR_INVALID_PARAM;
    entry->table = table;
    cds_lfht_node_init(&entry->node);
    /* Publish the entry's contents to readers that find it. */
    SX_TSAN_RELEASE(entry);

    sx_fairlock_lock(&table->writer_lock);
    rcu_read_lock();
    struct cds_lfht_node *old = cds_lfht_add_unique(table->ht, sx_rcu_table_hash(entry->id),
                                                    sx_rcu_table_match, &entry->id, &entry->node);
    rcu_read_unlock();
    if (old == &entry->node)
        atomic_fetch_add_explicit(&table->count, 1, memory_order_relaxed);
    sx_fairlock_unlock(&table->writer_lock);
    return (old == &entry->node) ? SX_OK : SX_ERR_EXISTS;
}

int sx_rcu_table_remove(sx_rcu_table_t *table, uint64_t id)
{
    struct cds_lfht_iter iter;
    int rc = SX_ERR_NOT_FOUND;

    sx_fairlock_lock(&table->writer_lock);
    rcu_read_lock();
    cds_lfht_lookup(table->ht, sx_rcu_table_hash(id), sx_rcu_table_match, &id, &iter);
    struct cds_lfht_node *node = cds_lfht_iter_get_node(&iter);
    if (node != NULL && cds_lfht_del(table->ht, node) == 0) {
        sx_rcu_entry_t *e = caa_container_of(node, sx_rcu_entry_t, node);
        atomic_fetch_sub_explicit(&table->count, 1, memory_order_relaxed);
        SX_TSAN_RELEASE(e);
        call_rcu(&e->rcu, sx_rcu_entry_free_rcu);
        rc = SX_OK;
    }
    rcu_read_unlock();
    sx_fairlock_unlock(&table->writer_lock);
    return rc;
}

sx_rcu_entry_t *sx_rcu_table_lookup_rcu(sx_rcu_table_t *table, uint64_t id)
{
    struct cds_lfht_iter iter;

    cds_lfht_lookup(table->ht, sx_rcu_table_hash(id), sx_rcu_table_match, &id, &iter);
    struct cds_lfht_node *node = cds_lfht_iter_get_node(&iter);
    if (node == NULL)
        return NULL;
    return caa_container_of(node, sx_rcu_entry_t, node);
}

void sx_rcu_table_fini(sx_rcu_table_t *table)
{
    struct cds_lfht_iter iter;
    struct cds_lfht_node *node;

    if (table->ht == NULL)
        return;
    sx_fairlock_lock(&table->writer_lock);
    rcu_read_lock();
    cds_lfht_first(table->ht, &iter);
    while ((node = cds_lfht_iter_get_node(&iter)) != NULL) {
        if (cds_lfht_del(table->ht, node) == 0) {
            sx_rcu_entry_t *e = caa_container_of(node, sx_rcu_entry_t, node);
            SX_TSAN_RELEASE(e);
            call_rcu(&e->rcu, sx_rcu_entry_free_rcu);
        }
        cds_lfht_next(table->ht, &iter);
    }
    rcu_read_unlock();
    sx_fairlock_unlock(&table->writer_lock);
    /* Every deferred free must have run before the table goes away. */
    rcu_barrier();
    if (cds_lfht_destroy(table->ht, NULL) != 0)
        sx_warn("peer", "peer table not empty at destruction; leaking its buckets");
    table->ht = NULL;
    atomic_store_explicit(&table->count, 0, memory_order_relaxed);
}
