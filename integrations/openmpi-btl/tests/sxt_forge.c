/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sxt_forge: hostile requests to share a get, for the tests that check
 * that the data's owner refuses them (btl_split_forged_*).
 *
 * The tests preload this library into every rank (mpirun -x LD_PRELOAD):
 * its sx_send comes before libshardx's in the lookup order, so the BTL's
 * calls reach it. A request to share a get (SHARDX_TAG_SPLIT_ASK) leaves
 * mangled as SXT_FORGE_ASK says; everything else, and every request when
 * SXT_FORGE_ASK is unset, goes to libshardx's sx_send unchanged. So the
 * forged request travels as any other: a real datagram between two real
 * processes, read by the owner's handler. The ways:
 *
 *   short    four bytes short of a request
 *   version  a version the owner does not know
 *   chunks   65 chunks (a request has at most 64)
 *   wrap     a destination whose range wraps past the address space
 *   board    file descriptor 0 (the getter's stdin) named as the board
 *   pid      the getter's parent (mpirun) named as the getter
 *   cookie   the board's cookie with one bit flipped
 *
 * The owner must refuse each (cma_help_refused), copy nothing
 * (cma_helped = 0, cma_help_failed = 0) and the getter copy every chunk
 * itself: the test's data checks and counters say whether it did.
 *
 * The request is mangled in place: the BTL sends a copy it frees at the
 * send's completion (btl_shardx_split.c, split_send).
 */
#include "opal_config.h" /* first: it sets _GNU_SOURCE, which dlopen's flags need */

#include "opal/mca/btl/btl.h"

#include "btl_shardx_split.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <shardx.h>

typedef int (*sxt_send_fn)(sx_peer_h, uint8_t, const struct iovec *, int, sx_complete_cb_t, void *);

/* libshardx's sx_send. The component opens libshardx privately (Open MPI
 * opens components without RTLD_GLOBAL), so RTLD_NEXT does not find it:
 * ask for the library already loaded by its name. */
static sxt_send_fn sxt_real_send(void)
{
    /* Any thread may send first; each finds the same function. */
    static _Atomic(sxt_send_fn) real;
    sxt_send_fn fn = atomic_load_explicit(&real, memory_order_relaxed);

    if (fn == NULL) {
        void *lib = dlopen("libshardx.so.0", RTLD_LAZY | RTLD_NOLOAD);
        fn = lib != NULL ? (sxt_send_fn)dlsym(lib, "sx_send") : NULL;
        if (fn == NULL) {
            fprintf(stderr, "sxt_forge: libshardx's sx_send not found: %s\n", dlerror());
            abort();
        }
        atomic_store_explicit(&real, fn, memory_order_relaxed);
    }
    return fn;
}

/* Mangles @p ask as @p how says; returns the length to send, or 0 for an
 * unknown way. */
static size_t sxt_mangle(struct mca_btl_shardx_split_ask *ask, const char *how)
{
    size_t len = sizeof(*ask);

    if (strcmp(how, "short") == 0)
        len -= 4;
    else if (strcmp(how, "version") == 0)
        ask->version = SHARDX_SPLIT_VERSION + 1;
    else if (strcmp(how, "chunks") == 0)
        ask->nchunks = 65;
    else if (strcmp(how, "wrap") == 0)
        ask->dst = UINT64_MAX - ask->size / 2;
    else if (strcmp(how, "board") == 0)
        ask->fd = 0;
    else if (strcmp(how, "pid") == 0)
        ask->pid = (uint32_t)getppid();
    else if (strcmp(how, "cookie") == 0)
        ask->cookie ^= 1;
    else
        return 0;
    return len;
}

__attribute__((visibility("default"))) int sx_send(sx_peer_h peer, uint8_t tag,
                                                   const struct iovec *iov, int iovcnt,
                                                   sx_complete_cb_t cb, void *ctx)
{
    const char *how = getenv("SXT_FORGE_ASK");

    if (how != NULL && tag == SHARDX_TAG_SPLIT_ASK && iovcnt == 1 &&
        iov[0].iov_len == sizeof(struct mca_btl_shardx_split_ask)) {
        struct iovec forged = iov[0];
        forged.iov_len = sxt_mangle(forged.iov_base, how);
        if (forged.iov_len == 0) {
            fprintf(stderr, "sxt_forge: unknown SXT_FORGE_ASK '%s'\n", how);
            abort();
        }
        return sxt_real_send()(peer, tag, &forged, 1, cb, ctx);
    }
    return sxt_real_send()(peer, tag, iov, iovcnt, cb, ctx);
}
