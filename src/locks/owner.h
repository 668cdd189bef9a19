/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A cheap identity for the calling thread, for ownership assertions in
 * debug builds. The address of a thread-local object is unique among live
 * threads and costs no system call.
 */
#ifndef SX_LOCKS_OWNER_H
#define SX_LOCKS_OWNER_H

#include <assert.h>
#include <stdint.h>

extern _Thread_local char sx_thread_anchor;

static inline uintptr_t sx_thread_self_id(void)
{
    return (uintptr_t)&sx_thread_anchor;
}

/* Ownership checks run in debug builds (SX_DEBUG_LOCKS) only; a violated
 * check is a bug in shardx itself, never a reaction to wire data. */
#ifdef SX_DEBUG_LOCKS
#define SX_OWNERSHIP_ASSERT(cond) assert(cond)
#else
#define SX_OWNERSHIP_ASSERT(cond) ((void)0)
#endif

#endif /* SX_LOCKS_OWNER_H */
