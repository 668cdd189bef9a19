/* SPDX-License-Identifier: BSD-3-Clause */
/* Registered memory; see mem.h. */
#include "shard/mem.h"

#include <stdlib.h>
#include <sys/random.h>

#include <shardx.h>

#include "common/time.h"

static void sx_mem_free(sx_rcu_entry_t *entry)
{
    free(caa_container_of(entry, sx_mem_t, entry));
}

int sx_mem_table_init(sx_mem_table_t *table)
{
    int rc = sx_rcu_table_init(&table->rcu);
    table->created = rc == SX_OK;
    return rc;
}

void sx_mem_table_fini(sx_mem_table_t *table)
{
    if (table->created)
        sx_rcu_table_fini(&table->rcu);
    table->created = false;
}

int sx_mem_table_add(sx_mem_table_t *table, void *addr, size_t len, unsigned access,
                     const void *owner, sx_mem_t **mem_p)
{
    sx_mem_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return SX_ERR_NO_MEMORY;
    m->addr = addr;
    m->len = len;
    m->access = access;
    m->owner = owner;
    m->entry.free_fn = sx_mem_free;
    /* Keys are random so that a peer cannot guess one it was not given;
     * a collision (or zero) just draws again. */
    for (int tries = 0; tries < 16; tries++) {
        uint64_t key = 0;
        if (getrandom(&key, sizeof(key), 0) != sizeof(key))
            key = sx_time_ns() * 0x9e3779b97f4a7c15ull ^ (uintptr_t)m;
        if (key == 0)
            continue;
        m->entry.id = key;
        if (sx_rcu_table_insert(&table->rcu, &m->entry) == SX_OK) {
            *mem_p = m;
            return SX_OK;
        }
    }
    free(m);
    return SX_ERR_INTERNAL;
}

int sx_mem_table_remove(sx_mem_table_t *table, sx_mem_t *mem)
{
    int rc = sx_rcu_table_remove(&table->rcu, mem->entry.id);
    if (rc != SX_OK)
        return rc;
    /* Wait out readers that found the region before it was removed, so no
     * remote write lands once this returns. */
    synchronize_rcu();
    return SX_OK;
}

uint8_t *sx_mem_check_rcu(sx_mem_table_t *table, const sx_wire_rma_t *r, unsigned need,
                          uint64_t len, int *status)
{
    sx_rcu_entry_t *e = sx_rcu_table_lookup_rcu(&table->rcu, r->key);
    if (e == NULL) {
        *status = SX_ERR_ACCESS; /* no such key, or deregistered */
        return NULL;
    }
    const sx_mem_t *m = caa_container_of(e, sx_mem_t, entry);
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
    return m->addr + (r->addr - base);
}
