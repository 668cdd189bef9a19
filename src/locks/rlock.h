/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The recursive lock of the `global` baseline mode, and nothing else.
 *
 * SX_THREAD_MODE=global puts one of these around every entry point, the
 * way Open MPI's usnic BTL serialises on btl_usnic_lock, so the benchmarks
 * can measure what sharding buys. Recursion is allowed because callbacks
 * re-enter the API with the lock held. No other code may use it (DESIGN.md
 * section 8: no recursive locks outside the baseline).
 *
 * Synchronization:
 *   sx_rlock_lock / unlock   any thread   pthread mutex (acquire/release)
 */
#ifndef SX_LOCKS_RLOCK_H
#define SX_LOCKS_RLOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "locks/owner.h"

typedef struct sx_rlock {
    pthread_mutex_t mutex;
    /* Written only by the owner, read by anyone for assertions. */
    _Atomic uintptr_t owner;
    unsigned depth;
} sx_rlock_t;

int sx_rlock_init(sx_rlock_t *l);
void sx_rlock_destroy(sx_rlock_t *l);

static inline void sx_rlock_lock(sx_rlock_t *l)
{
    pthread_mutex_lock(&l->mutex);
    atomic_store_explicit(&l->owner, sx_thread_self_id(), memory_order_relaxed);
    l->depth++;
}

static inline void sx_rlock_unlock(sx_rlock_t *l)
{
    SX_OWNERSHIP_ASSERT(atomic_load_explicit(&l->owner, memory_order_relaxed) ==
                        sx_thread_self_id());
    SX_OWNERSHIP_ASSERT(l->depth > 0);
    if (--l->depth == 0)
        atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
    pthread_mutex_unlock(&l->mutex);
}

static inline bool sx_rlock_held_by_me(sx_rlock_t *l)
{
    return atomic_load_explicit(&l->owner, memory_order_relaxed) == sx_thread_self_id();
}

#endif /* SX_LOCKS_RLOCK_H */
