/* SPDX-License-Identifier: BSD-3-Clause */
/* The shard inbox and the token-or-delegate protocol; see inbox.h. */
#include "shard/inbox.h"

#include <sched.h>
#include <stdatomic.h>

#include "common/hot.h"
#include "common/tsan.h"

void sx_inbox_init(sx_inbox_t *inbox, sx_inbox_flush_fn flush, sx_inbox_acquire_fn on_acquire)
{
    __cds_wfcq_init(&inbox->head, &inbox->tail);
    inbox->flush = flush;
    inbox->on_acquire = on_acquire;
    atomic_init(&inbox->requests_run, 0);
}

void sx_inbox_fini(sx_inbox_t *inbox, void *owner)
{
    /* Running leftovers keeps the "every request runs exactly once" promise
     * even for a caller that destroys a shard too early. */
    bool blocked = false;
    (void)sx_inbox_drain_locked(inbox, owner, &blocked);
}

void sx_inbox_enqueue_mpsc(sx_inbox_t *inbox, sx_inbox_req_t *req)
{
    cds_wfcq_node_init(&req->node);
    /* Everything the producer wrote into req happens-before the consumer's
     * reads; the queue's own ordering is invisible to TSan. */
    SX_TSAN_RELEASE(req);
    cds_wfcq_enqueue(&inbox->head, &inbox->tail, &req->node);
}

/*
 * Whether nothing is queued, by the two loads of liburcu's own test
 * (cds_wfcq_empty: no node after the head's dummy, and the tail at that
 * dummy; both fields are in liburcu's public header), written here so
 * that a pass that finds its inbox empty, nearly every pass, makes no
 * call into liburcu: its code and the PLT are two pages, each a TLB miss
 * after every system call where the kernel flushes the TLB there
 * (common/hot.h). Anything queued still goes through liburcu's functions.
 * Relaxed loads, as liburcu's are: a snapshot that the callers' fences
 * order (inbox.h).
 */
static inline bool sx_inbox_nothing_queued(sx_inbox_t *inbox)
{
    return __atomic_load_n(&inbox->head.node.next, __ATOMIC_RELAXED) == NULL &&
           __atomic_load_n(&inbox->tail.p, __ATOMIC_RELAXED) == &inbox->head.node;
}

SX_HOT_PASS bool sx_inbox_empty(sx_inbox_t *inbox)
{
    return sx_inbox_nothing_queued(inbox);
}

size_t sx_inbox_depth_locked(sx_inbox_t *inbox)
{
    size_t n = 0;

    /* The consumer may walk the queue without dequeuing; nonblocking, so a
     * producer preempted half-way through an enqueue ends the count. */
    struct cds_wfcq_node *node = __cds_wfcq_first_nonblocking(&inbox->head, &inbox->tail);
    while (node != NULL && node != CDS_WFCQ_WOULDBLOCK) {
        n++;
        node = __cds_wfcq_next_nonblocking(&inbox->head, &inbox->tail, node);
    }
    return n;
}

SX_HOT_PASS size_t sx_inbox_drain_locked(sx_inbox_t *inbox, void *owner, bool *blocked_p)
{
    size_t ran = 0;

    if (sx_inbox_nothing_queued(inbox)) {
        if (blocked_p != NULL)
            *blocked_p = false;
        return 0;
    }
    for (;;) {
        struct cds_wfcq_node *node = __cds_wfcq_dequeue_nonblocking(&inbox->head, &inbox->tail);
        if (node == NULL)
            break;
        if (node == CDS_WFCQ_WOULDBLOCK) {
            if (blocked_p != NULL)
                *blocked_p = true;
            sx_stat_add(&inbox->requests_run, ran);
            return ran;
        }
        sx_inbox_req_t *req = caa_container_of(node, sx_inbox_req_t, node);
        SX_TSAN_ACQUIRE(req);
        req->run(owner, req);
        ran++;
    }
    if (blocked_p != NULL)
        *blocked_p = false;
    sx_stat_add(&inbox->requests_run, ran);
    return ran;
}

bool sx_delegate_try_acquire(sx_token_t *token, sx_inbox_t *inbox, void *owner)
{
    if (!sx_token_try_acquire(token))
        return false;
    if (inbox->on_acquire != NULL)
        inbox->on_acquire(owner);
    return true;
}

SX_HOT_PASS bool sx_delegate_enter(sx_token_t *token, sx_inbox_t *inbox, void *owner, size_t *ran_p)
{
    if (!sx_delegate_try_acquire(token, inbox, owner))
        return false;
    size_t ran = sx_inbox_drain_locked(inbox, owner, NULL);
    if (ran_p != NULL)
        *ran_p = ran;
    return true;
}

SX_HOT_PASS size_t sx_delegate_leave_locked(sx_token_t *token, sx_inbox_t *inbox, void *owner)
{
    size_t ran = 0;

    for (unsigned round = 0;; round++) {
        bool blocked = false;
        ran += sx_inbox_drain_locked(inbox, owner, &blocked);
        if (inbox->flush != NULL)
            inbox->flush(owner);
        sx_token_release(token);
        /* Pairs with the barrier in sx_delegate_submit_mpsc between the
         * producer's enqueue and its try of the token (see inbox.h). */
        atomic_thread_fence(memory_order_seq_cst);
        if (sx_inbox_empty(inbox))
            return ran;
        /* A request whose enqueue is half done blocks the queue for the few
         * instructions until its producer links it; if that producer was
         * preempted, give it the CPU instead of spinning against it. */
        if (blocked && round >= 16)
            sched_yield();
        if (!sx_delegate_try_acquire(token, inbox, owner))
            return ran; /* the new holder now owes the same re-check */
    }
}

SX_HOT bool sx_delegate_submit_mpsc(sx_token_t *token, sx_inbox_t *inbox, void *owner,
                                    sx_inbox_req_t *req)
{
    if (sx_delegate_try_acquire(token, inbox, owner)) {
        bool blocked = false;
        (void)sx_inbox_drain_locked(inbox, owner, &blocked);
        if (!blocked) {
            /* Everything queued before this call has run: running now keeps
             * the caller's order. */
            req->run(owner, req);
            sx_stat_add(&inbox->requests_run, 1);
            (void)sx_delegate_leave_locked(token, inbox, owner);
            return true;
        }
        /* An earlier request of this very thread may sit behind the
         * half-done enqueue; queue behind it to keep FIFO order. */
        sx_inbox_enqueue_mpsc(inbox, req);
        (void)sx_delegate_leave_locked(token, inbox, owner);
        return false;
    }
    sx_inbox_enqueue_mpsc(inbox, req);
    /* Full barrier between the enqueue and the look at the token; pairs
     * with the one in sx_delegate_leave_locked. */
    atomic_thread_fence(memory_order_seq_cst);
    if (sx_delegate_try_acquire(token, inbox, owner))
        (void)sx_delegate_leave_locked(token, inbox, owner);
    return false;
}
