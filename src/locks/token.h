/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shard token: an atomic try-lock that is never waited on.
 *
 * A thread either takes a shard's token at once or leaves the work for
 * the holder (token-or-delegate, DESIGN.md section 3). There is no lock()
 * function on purpose: waiting on a token would bring back the convoys of
 * a global lock.
 *
 * Synchronization:
 *   sx_token_try_acquire   any thread      seq_cst CAS; acquire on success
 *   sx_token_release       holder only     release store
 *   sx_token_held_by_me    any thread      debug builds: exact; else false
 */
#ifndef SX_LOCKS_TOKEN_H
#define SX_LOCKS_TOKEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "locks/owner.h"

typedef struct sx_token {
    atomic_uint held;
#ifdef SX_DEBUG_LOCKS
    _Atomic uintptr_t owner;
#endif
} sx_token_t;

static inline void sx_token_init(sx_token_t *t)
{
    atomic_init(&t->held, 0);
#ifdef SX_DEBUG_LOCKS
    atomic_init(&t->owner, 0);
#endif
}

/*
 * Takes the token if it is free. The relaxed read first keeps a busy token's
 * cache line shared instead of bouncing it with failing CAS attempts. The
 * CAS is seq_cst: the delegate protocol (shard/inbox.h) relies on it being
 * a full barrier between a producer's enqueue and its look at the token.
 */
static inline bool sx_token_try_acquire(sx_token_t *t)
{
    unsigned expected = 0;

    if (atomic_load_explicit(&t->held, memory_order_relaxed) != 0)
        return false;
    if (!atomic_compare_exchange_strong_explicit(&t->held, &expected, 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return false;
#ifdef SX_DEBUG_LOCKS
    atomic_store_explicit(&t->owner, sx_thread_self_id(), memory_order_relaxed);
#endif
    return true;
}

/* Release pairs with the acquire of the next successful try_acquire. */
static inline void sx_token_release(sx_token_t *t)
{
#ifdef SX_DEBUG_LOCKS
    SX_OWNERSHIP_ASSERT(atomic_load_explicit(&t->owner, memory_order_relaxed) ==
                        sx_thread_self_id());
    atomic_store_explicit(&t->owner, 0, memory_order_relaxed);
#endif
    atomic_store_explicit(&t->held, 0, memory_order_release);
}

/* For assertions in *_locked functions; always true in release builds so
 * that SX_OWNERSHIP_ASSERT(sx_token_held_by_me(t)) compiles away. */
static inline bool sx_token_held_by_me(sx_token_t *t)
{
#ifdef SX_DEBUG_LOCKS
    return atomic_load_explicit(&t->held, memory_order_relaxed) != 0 &&
           atomic_load_explicit(&t->owner, memory_order_relaxed) == sx_thread_self_id();
#else
    (void)t;
    return true;
#endif
}

#endif /* SX_LOCKS_TOKEN_H */
