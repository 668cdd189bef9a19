/* SPDX-License-Identifier: BSD-3-Clause */
/* Registered memory; see mem.h. */
#include "shard/mem.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <shardx.h>

#include "common/copy.h"
#include "common/log.h"
#include "common/time.h"

static void sx_mem_unref(sx_mem_t *m)
{
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    free(atomic_load_explicit(&m->shadow, memory_order_relaxed));
    free(m);
}

/* The table's reference, let go a grace period after removal. */
static void sx_mem_free(sx_rcu_entry_t *entry)
{
    sx_mem_unref(caa_container_of(entry, sx_mem_t, entry));
}

static void sx_mem_handle_free(sx_rcu_entry_t *entry)
{
    sx_mem_unref(caa_container_of(entry, sx_mem_t, handle));
}

void sx_mem_unpin(sx_mem_t *pin)
{
    atomic_fetch_sub_explicit(&pin->pins, 1, memory_order_release);
    sx_mem_unref(pin);
}

int sx_mem_table_init(sx_mem_table_t *table)
{
    atomic_init(&table->shadow_bytes, 0);
    table->nkeys = 0;
    if (pthread_mutex_init(&table->key_lock, NULL) != 0)
        return SX_ERR_NO_MEMORY;
    int rc = sx_rcu_table_init(&table->rcu);
    if (rc == SX_OK && (rc = sx_rcu_table_init(&table->handles)) != SX_OK)
        sx_rcu_table_fini(&table->rcu);
    table->created = rc == SX_OK;
    if (!table->created)
        pthread_mutex_destroy(&table->key_lock);
    return rc;
}

void sx_mem_table_fini(sx_mem_table_t *table)
{
    if (table->created) {
        sx_rcu_table_fini(&table->handles);
        sx_rcu_table_fini(&table->rcu);
        pthread_mutex_destroy(&table->key_lock);
        memset(table->keys, 0, sizeof(table->keys)); /* unused keys leave no trace */
        table->nkeys = 0;
    }
    table->created = false;
}

/* A key from the kernel's random generator, SX_MEM_KEY_BATCH drawn at a
 * time; when the kernel gives none, one made from the clock and @p salt
 * (guessable, so the kernel is asked again next time). */
static uint64_t sx_mem_draw_key(sx_mem_table_t *table, const void *salt)
{
    uint64_t key;

    pthread_mutex_lock(&table->key_lock);
    if (table->nkeys == 0) {
        ssize_t got = getrandom(table->keys, sizeof(table->keys), 0);
        table->nkeys = got > 0 ? (unsigned)((size_t)got / sizeof(table->keys[0])) : 0;
    }
    if (table->nkeys > 0) {
        key = table->keys[--table->nkeys];
        table->keys[table->nkeys] = 0;
    } else {
        key = sx_time_ns() * 0x9e3779b97f4a7c15ull ^ (uintptr_t)salt;
    }
    pthread_mutex_unlock(&table->key_lock);
    return key;
}

int sx_mem_table_add(sx_mem_table_t *table, void *addr, size_t len, unsigned access,
                     sx_mem_t **mem_p)
{
    sx_mem_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return SX_ERR_NO_MEMORY;
    m->addr = addr;
    m->len = len;
    m->access = access;
    atomic_init(&m->refs, 2); /* the handle set's and the key table's */
    atomic_init(&m->pins, 0);
    atomic_init(&m->accesses, 0);
    atomic_init(&m->dead, false);
    atomic_init(&m->shadow, NULL);
    m->entry.free_fn = sx_mem_free;
    m->handle.free_fn = sx_mem_handle_free;
    m->handle.id = (uintptr_t)m;
    if (sx_rcu_table_insert(&table->handles, &m->handle) != SX_OK) {
        free(m);
        return SX_ERR_NO_MEMORY;
    }
    /* Keys are random so that a peer cannot guess one it was not given;
     * a collision (or zero) just draws again. */
    for (int tries = 0; tries < 16; tries++) {
        uint64_t key = sx_mem_draw_key(table, m);
        if (key == 0)
            continue;
        m->entry.id = key;
        if (sx_rcu_table_insert(&table->rcu, &m->entry) == SX_OK) {
            *mem_p = m;
            return SX_OK;
        }
    }
    sx_mem_unref(m); /* the key table's; the handle set's goes with its entry */
    (void)sx_rcu_table_remove(&table->handles, (uintptr_t)m);
    return SX_ERR_INTERNAL;
}

int sx_mem_table_remove(sx_mem_table_t *table, sx_mem_t *mem)
{
    /* A handle this table gave out and no removal took back, asked
     * without reading the record: a second removal of one handle read
     * (and unreferenced) a freed record. Of two removals at once, one
     * takes the handle out and the other finds it gone. The key table's
     * reference keeps the record until its own removal below. */
    if (sx_rcu_table_remove(&table->handles, (uintptr_t)mem) != SX_OK)
        return SX_ERR_NOT_FOUND;
    /* Ours until this returns, whatever the table's grace period does. */
    atomic_fetch_add_explicit(&mem->refs, 1, memory_order_relaxed);
    /* A record in the handle set is in the key table too (added before,
     * removed after): this fails only for a stale handle that a new
     * registration's record reuses, removed while that one was still
     * being added. */
    int rc = sx_rcu_table_remove(&table->rcu, mem->entry.id);
    if (rc != SX_OK) {
        sx_mem_unref(mem);
        return rc;
    }
    /* No access or pin begins after this; those that counted themselves
     * in before it are seen below (mem.h, Accesses). */
    atomic_store(&mem->dead, true); /* sequentially consistent */
    if (atomic_load(&mem->pins) > 0) {
        /* Answers sent from the region and not yet acknowledged: they read
         * a copy from now on (mem.h, Pins). */
        uint8_t *copy = malloc(mem->len > 0 ? mem->len : 1);
        if (copy != NULL) {
            sx_copy_bulk(copy, mem->addr, mem->len);
            atomic_store(&mem->shadow, copy); /* sequentially consistent: see Pins */
            atomic_fetch_add_explicit(&table->shadow_bytes, mem->len, memory_order_relaxed);
        } else {
            sx_warn("mem",
                    "sx_mem_deregister: no memory for a copy of %zu bytes that %u "
                    "unacknowledged packets still send from: waiting for their "
                    "acknowledgement",
                    mem->len, atomic_load(&mem->pins));
            while (atomic_load(&mem->pins) > 0)
                sched_yield();
        }
    }
    /* The copies that began before: no remote write lands, and no read of
     * the region is under way, once this returns. */
    while (atomic_load(&mem->accesses) > 0) /* sequentially consistent: see Pins */
        sched_yield();
    sx_mem_unref(mem);
    return SX_OK;
}

bool sx_mem_pin_rcu(sx_mem_t *m)
{
    if (m->len > SX_MEM_PIN_MAX)
        return false;
    /* Inside the read section that found it, so the record lives. A
     * deregistration that marked it dead before this pin counted in sees
     * it and makes the shadow; one that comes later is seen here (mem.h,
     * Accesses). */
    atomic_fetch_add(&m->refs, 1);
    atomic_fetch_add(&m->pins, 1);
    if (!atomic_load(&m->dead))
        return true;
    sx_mem_unpin(m);
    return false;
}

uint8_t *sx_mem_check_rcu(sx_mem_table_t *table, const sx_wire_rma_t *r, unsigned need,
                          uint64_t len, int *status, sx_mem_t **mem_p)
{
    if (mem_p != NULL)
        *mem_p = NULL;
    sx_rcu_entry_t *e = sx_rcu_table_lookup_rcu(&table->rcu, r->key);
    if (e == NULL) {
        *status = SX_ERR_ACCESS; /* no such key, or deregistered */
        return NULL;
    }
    sx_mem_t *m = caa_container_of(e, sx_mem_t, entry);
    if ((m->access & need) != need) {
        *status = SX_ERR_ACCESS;
        return NULL;
    }
    uint64_t base = (uint64_t)(uintptr_t)m->addr;
    if (r->op_addr < base || r->op_len > m->len || r->op_addr - base > m->len - r->op_len ||
        r->addr < r->op_addr || len > r->op_len || r->addr - r->op_addr > r->op_len - len) {
        *status = SX_ERR_OUT_OF_RANGE;
        return NULL;
    }
    *status = SX_OK;
    if (mem_p != NULL)
        *mem_p = m;
    return m->addr + (r->addr - base);
}
