/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory registration and emulated RMA (PUT and GET over the reliable
 * datagram channels). The target does the copy when the request arrives,
 * after checking the key, the access right and the range.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/time.h"
#include "engine/engine.h"
#include "shard/op_cache.h"
#include "shard/chan.h"

static int mem_register(sx_engine_h e, void *addr, size_t len, unsigned access, sx_mem_h *mem_p)
{
    if (e == NULL || mem_p == NULL || (addr == NULL && len > 0) ||
        (access & ~(unsigned)(SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE)) != 0 ||
        (uintptr_t)addr > UINTPTR_MAX - len) {
        sx_error("rma", "sx_mem_register: invalid region %p+%zu or access 0x%x", addr, len, access);
        return SX_ERR_INVALID_PARAM;
    }
    return sx_mem_table_add(&e->mem, addr, len, access, mem_p);
}

static int mem_deregister(sx_engine_h e, sx_mem_h mem)
{
    if (mem == NULL) {
        sx_error("rma", "sx_mem_deregister: no region");
        return SX_ERR_INVALID_PARAM;
    }
    /* The handle is looked up before it is read (shard/mem.c). */
    if (sx_mem_table_remove(&e->mem, mem) != SX_OK) {
        sx_error("rma",
                 "sx_mem_deregister: %p is not a region registered with this engine "
                 "(deregistered already, or another engine's)",
                 (void *)mem);
        return SX_ERR_INVALID_PARAM;
    }
    return SX_OK;
}

SX_API sx_rkey_t sx_mem_rkey(sx_mem_h mem)
{
    return mem != NULL ? mem->entry.id : 0;
}

static int sx_rma_start(sx_peer_h peer, uint8_t kind, void *local, size_t len, uint64_t raddr,
                        sx_rkey_t key, sx_complete_cb_t cb, void *ctx)
{
    if (peer == NULL || (local == NULL && len > 0)) {
        sx_error("rma", "invalid %s: peer %p, buffer %p, length %zu",
                 kind == SX_OP_PUT ? "put" : "get", (void *)peer, local, len);
        return SX_ERR_INVALID_PARAM;
    }
    struct sx_engine *e = peer->engine;
    if (sx_engine_closing(e, kind == SX_OP_PUT ? "put" : "get"))
        return SX_ERR_SHUTDOWN;
    if (len > e->env.conf.max_msg || raddr > UINT64_MAX - len) {
        sx_error("rma", "%s of %zu bytes at 0x%llx: larger than SX_MAX_MSG_SIZE or wraps",
                 kind == SX_OP_PUT ? "put" : "get", len, (unsigned long long)raddr);
        return SX_ERR_INVALID_PARAM;
    }
    int failed = atomic_load(&peer->failed);
    if (failed != 0)
        return sx_peer_failed_status(peer, kind == SX_OP_PUT ? "put" : "get", failed);
    sx_op_t *op = sx_op_alloc();
    if (op == NULL)
        return SX_ERR_NO_MEMORY;
    op->req.run = sx_op_push_run;
    op->peer = peer;
    op->kind = kind;
    op->len = len;
    op->raddr = raddr;
    op->rkey = key;
    op->cb = cb;
    op->ctx = ctx;
    if (kind == SX_OP_PUT) {
        op->iovcnt = 1;
        op->iov[0].iov_base = local;
        op->iov[0].iov_len = len;
    } else {
        op->dst = local;
    }
    unsigned home;
    op->lane = sx_send_lane(e, peer, &home);
    sx_engine_submit(e, home, &op->req);
    return SX_INPROGRESS;
}

SX_API int sx_put(sx_peer_h peer, const void *src, size_t len, uint64_t raddr, sx_rkey_t key,
                  sx_complete_cb_t cb, void *ctx)
{
    return sx_rma_start(peer, SX_OP_PUT, (void *)src, len, raddr, key, cb, ctx);
}

SX_API int sx_get(sx_peer_h peer, void *dst, size_t len, uint64_t raddr, sx_rkey_t key,
                  sx_complete_cb_t cb, void *ctx)
{
    return sx_rma_start(peer, SX_OP_GET, dst, len, raddr, key, cb, ctx);
}

SX_API int sx_mem_register(sx_engine_h e, void *addr, size_t len, unsigned access, sx_mem_h *mem_p)
{
    if (e == NULL)
        return sx_api_null("sx_mem_register", "the engine");
    sx_global_enter(e);
    int rc = mem_register(e, addr, len, access, mem_p);
    sx_global_exit(e);
    return rc;
}

SX_API int sx_mem_deregister(sx_engine_h e, sx_mem_h mem)
{
    if (e == NULL)
        return sx_api_null("sx_mem_deregister", "the engine");
    sx_global_enter(e);
    int rc = mem_deregister(e, mem);
    sx_global_exit(e);
    return rc;
}
