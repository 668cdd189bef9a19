/* SPDX-License-Identifier: BSD-3-Clause */
/* Operation records kept per thread for reuse: op_cache.h says why. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/copy.h"
#include "common/hot.h"
#include "shard/op_cache.h"

#if defined(__SANITIZE_ADDRESS__)
#define SX_OP_CACHE_ON 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SX_OP_CACHE_ON 0
#endif
#endif
#ifndef SX_OP_CACHE_ON
#define SX_OP_CACHE_ON 1
#endif

static _Thread_local sx_op_t *sx_op_cache_head;
static _Thread_local unsigned sx_op_cache_n;
static pthread_key_t sx_op_cache_key;
static pthread_once_t sx_op_cache_once = PTHREAD_ONCE_INIT;
static int sx_op_cache_key_ok;

/* At thread exit (the key's destructor runs while the thread's own
 * thread-local variables still exist). */
static void sx_op_cache_drain(void *unused)
{
    (void)unused;
    while (sx_op_cache_head != NULL) {
        sx_op_t *op = sx_op_cache_head;
        sx_op_cache_head = op->next;
        free(op);
    }
    sx_op_cache_n = 0;
}

static void sx_op_cache_init(void)
{
    sx_op_cache_key_ok = pthread_key_create(&sx_op_cache_key, sx_op_cache_drain) == 0;
}

SX_HOT sx_op_t *sx_op_alloc(void)
{
    sx_op_t *op = sx_op_cache_head;
    if (op != NULL) {
        sx_op_cache_head = op->next;
        sx_op_cache_n--;
    } else if ((op = malloc(sizeof(*op) + SX_OP_INLINE_CACHED)) == NULL) {
        return NULL;
    }
    sx_zero_small(op, sizeof(*op)); /* not rep stosq: common/copy.h */
    op->cached = SX_OP_CACHE_ON;
    return op;
}

/* Not SX_HOT: sx_sendi, its only caller, lies outside the hot sections
 * too (common/hot.h), and a function added between sx_op_alloc and the
 * rest of the message path shifts all of it (sx_bench latency 1 % slower
 * in 18 of 24 interleaved pairs when it sat there). */
sx_op_t *sx_op_alloc_inline(size_t len)
{
    if (len <= SX_OP_INLINE_CACHED)
        return sx_op_alloc();
    if (len > SIZE_MAX - sizeof(sx_op_t))
        return NULL;
    sx_op_t *op = malloc(sizeof(*op) + len);
    if (op != NULL)
        memset(op, 0, sizeof(*op)); /* op->cached stays clear: free() */
    return op;
}

SX_HOT void sx_op_release(sx_op_t *op)
{
    if (op == NULL)
        return;
    if (!op->cached || sx_op_cache_n >= SX_OP_CACHE_MAX) {
        free(op);
        return;
    }
    if (sx_op_cache_n == 0) {
        /* Ask for the drain at this thread's exit (a key's destructor runs
         * only for threads that set a value). */
        (void)pthread_once(&sx_op_cache_once, sx_op_cache_init);
        if (!sx_op_cache_key_ok || pthread_setspecific(sx_op_cache_key, (void *)1) != 0) {
            free(op);
            return;
        }
    }
    op->next = sx_op_cache_head;
    sx_op_cache_head = op;
    sx_op_cache_n++;
}
