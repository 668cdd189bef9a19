/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Operation records kept per thread for reuse (sx_op_t, chan.h).
 *
 * Every sx_send, sx_put and sx_get allocates an operation record and its
 * completion frees it, on whichever thread progresses the shard; a
 * window of 64 sends outgrows glibc's per-thread cache (7 chunks of a
 * size), so without this each send and completion took the thread's
 * malloc arena, and threads that share an arena serialised on its lock.
 * A thread keeps up to SX_OP_CACHE_MAX freed records and hands them to
 * its next sends. Each has room for SX_OP_INLINE_CACHED bytes of inline
 * data after the record, so an sx_sendi of a small message (the Open MPI
 * BTL's eager sends: ob1's header and a few bytes) takes one too, instead
 * of a malloc, a free and the arena's pages per message; longer inline
 * data and responses are malloc'd and freed as before. The cache is
 * drained when the thread exits. Under AddressSanitizer nothing is kept,
 * so a record used after its completion is still reported.
 *
 * Concurrency: thread-local; both calls from any thread.
 */
#ifndef SX_SHARD_OP_CACHE_H
#define SX_SHARD_OP_CACHE_H

#include "shard/chan.h"

#define SX_OP_CACHE_MAX 256u

/* Inline bytes every cached record has room for (sx_op_t.inline_data):
 * 128 covers ob1's match header and an 8-byte message several times
 * over, and costs a thread's full cache 32 KiB more. */
#define SX_OP_INLINE_CACHED 128u

/** A zeroed record, or NULL; op->cached is set. Its inline_data has room
 *  for SX_OP_INLINE_CACHED bytes, not zeroed. */
sx_op_t *sx_op_alloc(void);

/** A record as sx_op_alloc's with room for @p len bytes of inline_data
 *  (not zeroed), or NULL: from the cache up to SX_OP_INLINE_CACHED bytes,
 *  else malloc'd (op->cached clear). sx_op_release frees either. */
sx_op_t *sx_op_alloc_inline(size_t len);

/** Frees @p op: into this thread's cache if it came from sx_op_alloc and
 *  there is room, else free(). */
void sx_op_release(sx_op_t *op);

#endif /* SX_SHARD_OP_CACHE_H */
