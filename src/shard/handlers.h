/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The handler registry: the active-message handler of each tag and the
 * error handler, which sx_am_register and sx_error_register set and every
 * receive path reads.
 *
 * A handler and its argument are published as one immutable object, so a
 * reader never sees a new callback with an old argument. A replaced one
 * may still be in use by a receive path that loaded it just before, so it
 * is kept until the registry goes (with the engine) rather than freed.
 *
 * Synchronization:
 *
 *   function                   | who may call    | how
 *   ---------------------------+-----------------+-----------------------------------
 *   sx_handlers_set_am / _error| any thread      | exchange (acq_rel); the replaced one
 *                              |                 | is kept under the registry's lock
 *   sx_handlers_am / _error    | any thread      | acquire: the handler's fields are
 *                              |                 | complete when seen
 *   sx_handlers_init / _fini   | one thread, no others
 */
#ifndef SX_SHARD_HANDLERS_H
#define SX_SHARD_HANDLERS_H

#include <stdatomic.h>
#include <stdint.h>

#include <shardx.h>

#include "locks/fairlock.h"

/* One of cb (sx_am_register) and msg_cb (sx_am_register_ex) is set. */
typedef struct sx_am_handler {
    sx_am_cb_t cb;
    sx_am_msg_cb_t msg_cb;
    void *arg;
} sx_am_handler_t;

typedef struct sx_err_handler {
    sx_error_cb_t cb;
    void *arg;
} sx_err_handler_t;

typedef struct sx_handlers {
    _Atomic(sx_am_handler_t *) am[256];
    _Atomic(sx_err_handler_t *) error;
    sx_fairlock_t lock; /* the list of replaced handlers */
    struct sx_retired *retired;
} sx_handlers_t;

void sx_handlers_init(sx_handlers_t *reg);

/** Frees every handler, current and replaced. No other thread may use the
 *  registry. */
void sx_handlers_fini(sx_handlers_t *reg);

/** Sets (cb NULL: clears) the handler of @p tag. SX_ERR_NO_MEMORY. */
int sx_handlers_set_am(sx_handlers_t *reg, uint8_t tag, sx_am_cb_t cb, sx_am_msg_cb_t msg_cb,
                       void *arg);

/** Sets (cb NULL: clears) the error handler. SX_ERR_NO_MEMORY. */
int sx_handlers_set_error(sx_handlers_t *reg, sx_error_cb_t cb, void *arg);

/** The handler of @p tag, or NULL. Any thread. */
static inline const sx_am_handler_t *sx_handlers_am(sx_handlers_t *reg, uint8_t tag)
{
    /* Acquire pairs with the setter's release. */
    return atomic_load_explicit(&reg->am[tag], memory_order_acquire);
}

/** The error handler, or NULL. Any thread. */
static inline const sx_err_handler_t *sx_handlers_error(sx_handlers_t *reg)
{
    return atomic_load_explicit(&reg->error, memory_order_acquire);
}

#endif /* SX_SHARD_HANDLERS_H */
