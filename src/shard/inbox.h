/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shard inbox and the token-or-delegate protocol (DESIGN.md section 3).
 *
 * A shard is mutated only by the thread holding its token. A thread that
 * cannot take the token enqueues its request on the shard's inbox and
 * returns; the holder runs the inbox before posting work of its own and
 * again after it releases the token, so no request is stranded and each
 * producer's requests run in the order it submitted them.
 *
 * The queue is liburcu's wfcqueue (wait-free enqueue, intrusive nodes, no
 * bound). bench/inbox_bench.c compares it with ck_ring; see the figures
 * there and in the foundation issue's note. Its functions are called out
 * of line (no _LGPL_SOURCE), which keeps shardx free of LGPL inline code
 * and lets ThreadSanitizer see the hand-off through the annotations below;
 * only the emptiness test is written here, two loads of the queue's public
 * fields (inbox.c says why).
 *
 * Synchronization:
 *
 *   function                   | who may call        | ordering
 *   ---------------------------+---------------------+----------------------------
 *   sx_inbox_enqueue_mpsc      | any thread          | wait-free; release of req
 *   sx_inbox_empty             | any thread          | may be stale; hint only
 *   sx_inbox_drain_locked      | the token holder    | acquire of each req
 *   sx_delegate_submit_mpsc    | any thread          | see below
 *   sx_delegate_enter          | any thread          | try-lock, never waits
 *   sx_delegate_try_acquire    | any thread          | try-lock, never waits
 *   sx_delegate_leave_locked   | the token holder    | releases, then re-checks
 *
 * Why nothing is stranded. A producer enqueues, issues a full barrier and
 * tries the token. A holder releases the token, issues a full barrier and
 * looks at the inbox. By the barrier pairing (a Dekker-style store/load
 * handshake), at least one of them sees the other: either the producer
 * gets the token and runs the inbox itself, or the holder sees the request
 * and takes the token back to run it. If the holder meets a request whose
 * enqueue is still in progress (wfcqueue's "would block"), it stops there:
 * that request's producer has not yet tried the token and will, so the
 * work is again covered without anyone spinning.
 */
#ifndef SX_SHARD_INBOX_H
#define SX_SHARD_INBOX_H

#include <stdbool.h>
#include <stddef.h>

#include <urcu/wfcqueue.h>

#include "common/stat.h"
#include "locks/token.h"

typedef struct sx_inbox_req sx_inbox_req_t;

/**
 * Runs a request. Called by the token holder, with the token held, exactly
 * once per submitted request. The function owns @p req from then on (it
 * may free it or reuse it). It may submit further requests, to this shard
 * or others; a request to this shard submitted from here is queued and
 * runs before the token is released. @p owner is the pointer given to the
 * drain or submit call (the shard).
 */
typedef void (*sx_inbox_run_fn)(void *owner, sx_inbox_req_t *req);

/**
 * Called by the token holder after it ran the inbox and before it releases
 * the token, so work that the requests queued goes out before anyone else
 * can take the shard (the shard's flush of its channels). May be NULL.
 */
typedef void (*sx_inbox_flush_fn)(void *owner);

/**
 * Called right after a thread takes the token, before it runs anything:
 * the owner learns who holds it now (the shard: whether callbacks may run
 * on this thread). May be NULL.
 */
typedef void (*sx_inbox_acquire_fn)(void *owner);

struct sx_inbox_req {
    struct cds_wfcq_node node; /* private to the inbox */
    sx_inbox_run_fn run;       /* set by the submitter; never NULL */
};

typedef struct sx_inbox {
    /* Consumer end, touched by the token holder only. */
    struct __cds_wfcq_head head __attribute__((aligned(64)));
    /* Producer end; on its own cache line so producers do not bounce the
     * consumer's line. */
    struct cds_wfcq_tail tail __attribute__((aligned(64)));
    /* Requests run so far, queued or not; written by the token holder. */
    sx_stat_t requests_run __attribute__((aligned(64)));
    sx_inbox_flush_fn flush;
    sx_inbox_acquire_fn on_acquire;
} sx_inbox_t;

void sx_inbox_init(sx_inbox_t *inbox, sx_inbox_flush_fn flush, sx_inbox_acquire_fn on_acquire);

/** Releases the queue. The inbox must be empty (no thread may still
 *  submit); requests still queued are a caller bug and are run here. */
void sx_inbox_fini(sx_inbox_t *inbox, void *owner);

/** Appends @p req. Wait-free. The inbox owns @p req until it runs. */
void sx_inbox_enqueue_mpsc(sx_inbox_t *inbox, sx_inbox_req_t *req);

/** Requests queued right now, counted up to the first whose enqueue is
 *  still in progress; for diagnostics (sx_dump). Token holder only. */
size_t sx_inbox_depth_locked(sx_inbox_t *inbox);

/** Whether the inbox looks empty right now (a hint; may be stale). */
bool sx_inbox_empty(sx_inbox_t *inbox);

/**
 * Runs queued requests in order until the inbox is empty or the next
 * request's enqueue is still in progress. Returns how many ran; sets
 * *blocked_p (if not NULL) when it stopped at an in-progress enqueue.
 * Token holder only.
 */
size_t sx_inbox_drain_locked(sx_inbox_t *inbox, void *owner, bool *blocked_p);

/**
 * Token-or-delegate: runs @p req now if the token can be taken (after the
 * requests queued before it), otherwise queues it for the holder. Never
 * waits. Returns true if the request ran before the call returned.
 */
bool sx_delegate_submit_mpsc(sx_token_t *token, sx_inbox_t *inbox, void *owner,
                             sx_inbox_req_t *req);

/** Takes the token if free (calling on_acquire) and runs nothing; false
 *  at once if another thread holds it. End with sx_delegate_leave_locked(). */
bool sx_delegate_try_acquire(sx_token_t *token, sx_inbox_t *inbox, void *owner);

/**
 * Takes the token if free and runs the inbox. Returns false at once if
 * another thread holds the token. On true, *ran_p (if not NULL) counts the
 * requests run; the caller must end with sx_delegate_leave_locked().
 */
bool sx_delegate_enter(sx_token_t *token, sx_inbox_t *inbox, void *owner, size_t *ran_p);

/**
 * Runs the inbox, releases the token, and takes it back to run requests
 * that arrived meanwhile, until the inbox is seen empty after a release.
 * Returns how many requests ran.
 */
size_t sx_delegate_leave_locked(sx_token_t *token, sx_inbox_t *inbox, void *owner);

#endif /* SX_SHARD_INBOX_H */
