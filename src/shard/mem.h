/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Registered memory: the regions an engine exposes to its peers' PUT and
 * GET, each named by a random 64-bit remote key, and the check the RMA
 * target runs before it touches a byte (key, access right, range).
 *
 * The regions live in an RCU table (locks/rcu_table.h) keyed by the remote
 * key: the RMA target looks them up on every PUT and GET chunk without a
 * lock. A region is freed only after a grace period, and removal waits one
 * out, so no remote write lands in a region once sx_mem_table_remove has
 * returned.
 *
 * Synchronization:
 *
 *   function                 | who may call          | how
 *   -------------------------+-----------------------+----------------------------
 *   sx_mem_table_add         | any thread            | the table's writer lock
 *   sx_mem_table_remove      | any thread, not in a  | writer lock, then waits for
 *                            | read section          | a grace period
 *   sx_mem_check_rcu         | any thread            | inside sx_rcu_read_lock()
 *   sx_mem_table_init / fini | one thread, no others |
 */
#ifndef SX_SHARD_MEM_H
#define SX_SHARD_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "locks/rcu_table.h"
#include "shard/wire.h"

/* A registered region; the key is the table id. */
typedef struct sx_mem {
    sx_rcu_entry_t entry;
    uint8_t *addr;
    size_t len;
    unsigned access;   /* SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE */
    const void *owner; /* the engine that registered it (opaque here) */
} sx_mem_t;

typedef struct sx_mem_table {
    sx_rcu_table_t rcu;
    bool created;
} sx_mem_table_t;

int sx_mem_table_init(sx_mem_table_t *table);
void sx_mem_table_fini(sx_mem_table_t *table);

/**
 * Registers @p len bytes at @p addr with @p access under a fresh random
 * key (a peer cannot guess one it was not given). SX_ERR_NO_MEMORY, or
 * SX_ERR_INTERNAL when no free key was drawn.
 */
int sx_mem_table_add(sx_mem_table_t *table, void *addr, size_t len, unsigned access,
                     const void *owner, sx_mem_t **mem_p);

/** Withdraws @p mem and waits until no reader can still be using it.
 *  SX_ERR_NOT_FOUND if it was not registered. */
int sx_mem_table_remove(sx_mem_table_t *table, sx_mem_t *mem);

/**
 * Checks a remote access: the key names a registered region with the
 * right @p need, the whole operation's range lies inside the region, and
 * this chunk (@p len bytes at r->addr) inside the operation. Every
 * comparison is written so that hostile 64-bit values cannot overflow it.
 * Returns where the chunk starts, usable until the read section ends, or
 * NULL with *status set (SX_ERR_ACCESS, SX_ERR_OUT_OF_RANGE).
 */
uint8_t *sx_mem_check_rcu(sx_mem_table_t *table, const sx_wire_rma_t *r, unsigned need,
                          uint64_t len, int *status);

#endif /* SX_SHARD_MEM_H */
