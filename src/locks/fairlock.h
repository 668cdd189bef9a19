/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A fair lock for rare slow paths (peer add/remove, configuration changes).
 *
 * Concurrency Kit's ticket lock serves waiters in arrival order, so a
 * writer cannot be starved by a stream of others (Mellor-Crummey & Scott,
 * "Algorithms for scalable synchronization on shared-memory
 * multiprocessors", TOCS 1991). It spins, so it must never guard a fast
 * path or be held across a call that can block.
 *
 * Synchronization:
 *   sx_fairlock_lock / unlock   any thread   acquire / release
 */
#ifndef SX_LOCKS_FAIRLOCK_H
#define SX_LOCKS_FAIRLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <ck_spinlock.h>

#include "common/tsan.h"
#include "locks/owner.h"

typedef struct sx_fairlock {
    ck_spinlock_ticket_t ticket;
#ifdef SX_DEBUG_LOCKS
    _Atomic uintptr_t owner;
#endif
} sx_fairlock_t;

static inline void sx_fairlock_init(sx_fairlock_t *l)
{
    ck_spinlock_ticket_init(&l->ticket);
#ifdef SX_DEBUG_LOCKS
    atomic_init(&l->owner, 0);
#endif
}

static inline void sx_fairlock_lock(sx_fairlock_t *l)
{
    SX_OWNERSHIP_ASSERT(atomic_load_explicit(&l->owner, memory_order_relaxed) !=
                        sx_thread_self_id());
    /* Proportional back-off: a waiter pauses in proportion to its distance
     * from the head of the queue, which keeps the line quiet. */
    ck_spinlock_ticket_lock_pb(&l->ticket, 4);
    /* ck orders with inline assembly TSan cannot see; tell it. */
    SX_TSAN_ACQUIRE(l);
#ifdef SX_DEBUG_LOCKS
    atomic_store_explicit(&l->owner, sx_thread_self_id(), memory_order_relaxed);
#endif
}

static inline void sx_fairlock_unlock(sx_fairlock_t *l)
{
#ifdef SX_DEBUG_LOCKS
    SX_OWNERSHIP_ASSERT(atomic_load_explicit(&l->owner, memory_order_relaxed) ==
                        sx_thread_self_id());
    atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
#endif
    SX_TSAN_RELEASE(l);
    ck_spinlock_ticket_unlock(&l->ticket);
}

static inline bool sx_fairlock_held_by_me(sx_fairlock_t *l)
{
#ifdef SX_DEBUG_LOCKS
    return atomic_load_explicit(&l->owner, memory_order_relaxed) == sx_thread_self_id();
#else
    (void)l;
    return true;
#endif
}

#endif /* SX_LOCKS_FAIRLOCK_H */
