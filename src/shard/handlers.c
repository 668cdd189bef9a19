/* SPDX-License-Identifier: BSD-3-Clause */
/* The handler registry; see handlers.h. */
#include "shard/handlers.h"

#include <stdlib.h>

#include "common/log.h"

/* A replaced handler, kept until the registry goes. */
typedef struct sx_retired {
    struct sx_retired *next;
    void *handler;
} sx_retired_t;

void sx_handlers_init(sx_handlers_t *reg)
{
    for (unsigned t = 0; t < 256; t++)
        atomic_init(&reg->am[t], NULL);
    atomic_init(&reg->error, NULL);
    sx_fairlock_init(&reg->lock);
    reg->retired = NULL;
}

void sx_handlers_fini(sx_handlers_t *reg)
{
    for (sx_retired_t *r = reg->retired, *next; r != NULL; r = next) {
        next = r->next;
        free(r->handler);
        free(r);
    }
    reg->retired = NULL;
    for (unsigned t = 0; t < 256; t++)
        free(atomic_load(&reg->am[t]));
    free(atomic_load(&reg->error));
}

/* Keeps @p old until the registry goes: a receive path may still hold it. */
static void sx_handlers_retire(sx_handlers_t *reg, void *old)
{
    if (old == NULL)
        return;
    sx_retired_t *r = malloc(sizeof(*r));
    if (r == NULL) {
        sx_warn("peer", "out of memory: leaking a replaced handler");
        return;
    }
    r->handler = old;
    sx_fairlock_lock(&reg->lock);
    r->next = reg->retired;
    reg->retired = r;
    sx_fairlock_unlock(&reg->lock);
}

int sx_handlers_set_am(sx_handlers_t *reg, uint8_t tag, sx_am_cb_t cb, sx_am_msg_cb_t msg_cb,
                       void *arg)
{
    sx_am_handler_t *h = NULL;

    if (cb != NULL || msg_cb != NULL) {
        h = malloc(sizeof(*h));
        if (h == NULL)
            return SX_ERR_NO_MEMORY;
        h->cb = cb;
        h->msg_cb = cb != NULL ? NULL : msg_cb;
        h->arg = arg;
    }
    /* Release pairs with the receive path's acquire (sx_handlers_am): a
     * reader sees the handler's fields complete. */
    sx_handlers_retire(reg, atomic_exchange_explicit(&reg->am[tag], h, memory_order_acq_rel));
    return SX_OK;
}

int sx_handlers_set_error(sx_handlers_t *reg, sx_error_cb_t cb, void *arg)
{
    sx_err_handler_t *h = NULL;

    if (cb != NULL) {
        h = malloc(sizeof(*h));
        if (h == NULL)
            return SX_ERR_NO_MEMORY;
        h->cb = cb;
        h->arg = arg;
    }
    sx_handlers_retire(reg, atomic_exchange_explicit(&reg->error, h, memory_order_acq_rel));
    return SX_OK;
}
