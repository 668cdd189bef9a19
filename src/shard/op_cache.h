/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Operation records kept per thread for reuse (sx_op_t, chan.h).
 *
 * Every sx_send, sx_put and sx_get allocates an operation record and its
 * completion frees it, on whichever thread progresses the shard; a
 * window of 64 sends outgrows glibc's per-thread cache (7 chunks of a
 * size), so without this each send and completion took the thread's
 * malloc arena, and threads that share an arena serialised on its lock.
 * A thread keeps up to SX_OP_CACHE_MAX freed records of the plain size
 * and hands them to its next sends; records with inline data (sx_sendi,
 * responses) are malloc'd and freed as before. The cache is drained when
 * the thread exits. Under AddressSanitizer nothing is kept, so a record
 * used after its completion is still reported.
 *
 * Concurrency: thread-local; both calls from any thread.
 */
#ifndef SX_SHARD_OP_CACHE_H
#define SX_SHARD_OP_CACHE_H

#include "shard/chan.h"

#define SX_OP_CACHE_MAX 256u

/** A zeroed record of sizeof(sx_op_t), or NULL; op->cached is set. */
sx_op_t *sx_op_alloc(void);

/** Frees @p op: into this thread's cache if it came from sx_op_alloc and
 *  there is room, else free(). */
void sx_op_release(sx_op_t *op);

#endif /* SX_SHARD_OP_CACHE_H */
