/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shardx BTL module: endpoints, descriptors, send, sendi, put, get,
 * registration, progress and failure reporting. btl_shardx.h has the map
 * from BTL calls to shardx calls and the concurrency rules.
 */
#include "btl_shardx.h"

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/hwloc/base/base.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/runtime/opal.h"
#include "opal/util/output.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void shardx_ep_construct(mca_btl_base_endpoint_t *ep)
{
    ep->proc = NULL;
    ep->peer = NULL;
    atomic_init(&ep->removed, false);
    atomic_init(&ep->reported, false);
    ep->own.peer = NULL;
    atomic_init(&ep->own.ep, NULL);
    ep->own.status = SX_OK;
    atomic_init(&ep->own.board, NULL);
}

OBJ_CLASS_INSTANCE(mca_btl_base_endpoint_t, opal_list_item_t, shardx_ep_construct, NULL);
OBJ_CLASS_INSTANCE(mca_btl_shardx_frag_t, mca_btl_base_descriptor_t, NULL, NULL);
OBJ_CLASS_INSTANCE(mca_btl_shardx_rdma_op_t, opal_free_list_item_t, NULL, NULL);

_Thread_local unsigned mca_btl_shardx_in_callback;
_Thread_local unsigned mca_btl_shardx_in_progress;

int mca_btl_shardx_status(int sx_status)
{
    switch (sx_status) {
    case SX_OK:
    case SX_INPROGRESS:
        return OPAL_SUCCESS;
    case SX_ERR_AGAIN:
    case SX_ERR_FULL:
    case SX_ERR_NO_MEMORY:
        return OPAL_ERR_OUT_OF_RESOURCE;
    case SX_ERR_PEER_UNREACHABLE:
    case SX_ERR_PEER_RESTARTED:
    case SX_ERR_PATH_MTU:
    case SX_ERR_SHUTDOWN:
    case SX_ERR_CANCELED:
        return OPAL_ERR_UNREACH;
    case SX_ERR_INVALID_PARAM:
        return OPAL_ERR_BAD_PARAM;
    case SX_ERR_ACCESS:
        return OPAL_ERR_PERM;
    case SX_ERR_OUT_OF_RANGE:
        return OPAL_ERR_VALUE_OUT_OF_BOUNDS;
    default:
        return OPAL_ERROR;
    }
}

static mca_btl_shardx_module_t *shardx_module(mca_btl_base_module_t *btl)
{
    return (mca_btl_shardx_module_t *)btl;
}

/* ------------------------------------------------------------------ */
/* Descriptors                                                          */
/* ------------------------------------------------------------------ */

/* Items of OPAL's free lists (descriptors, RMA operations) go from the
 * thread that returns one to the thread that takes it next through
 * OPAL's lock-free LIFO: a hand-over TSan does not see (btl_shardx.h,
 * SHARDX_TSAN_ACQUIRE). */
static opal_free_list_item_t *shardx_list_get(opal_free_list_t *fl)
{
    opal_free_list_item_t *item = opal_free_list_get(fl);
    if (item != NULL)
        SHARDX_TSAN_ACQUIRE(item);
    return item;
}

static void shardx_list_return(opal_free_list_t *fl, opal_free_list_item_t *item)
{
    SHARDX_TSAN_RELEASE(item);
    opal_free_list_return(fl, item);
}

/* Free-list item initializer: the capacity of data[] travels as ctx. */
static int shardx_frag_init(opal_free_list_item_t *item, void *ctx)
{
    mca_btl_shardx_frag_t *frag = (mca_btl_shardx_frag_t *)item;
    frag->capacity = (size_t)(uintptr_t)ctx;
    return OPAL_SUCCESS;
}

/* A descriptor whose copy area holds @p size bytes, or NULL when @p size is
 * over btl_max_send_size or the lists are exhausted (ob1 then retries). */
static mca_btl_shardx_frag_t *shardx_frag_get(mca_btl_shardx_module_t *m, size_t size)
{
    opal_free_list_t *fl;

    if (size <= m->super.btl_eager_limit)
        fl = &m->eager_frags;
    else if (size <= m->super.btl_max_send_size)
        fl = &m->max_frags;
    else
        return NULL;
    mca_btl_shardx_frag_t *frag = (mca_btl_shardx_frag_t *)shardx_list_get(fl);
    if (frag == NULL)
        return NULL;
    frag->list = fl;
    frag->endpoint = NULL;
    frag->segments[0].seg_addr.pval = frag->data;
    frag->segments[0].seg_len = size;
    frag->base.des_segments = frag->segments;
    frag->base.des_segment_count = 1;
    frag->base.des_cbfunc = NULL;
    frag->base.des_cbdata = NULL;
    frag->base.des_context = NULL;
    frag->base.des_flags = 0;
    frag->base.order = MCA_BTL_NO_ORDER;
    return frag;
}

static void shardx_frag_return(mca_btl_shardx_frag_t *frag)
{
    shardx_list_return(frag->list, &frag->base.super);
}

static mca_btl_base_descriptor_t *shardx_alloc(mca_btl_base_module_t *btl,
                                               mca_btl_base_endpoint_t *endpoint, uint8_t order,
                                               size_t size, uint32_t flags)
{
    (void)order;
    mca_btl_shardx_frag_t *frag = shardx_frag_get(shardx_module(btl), size);
    if (frag == NULL)
        return NULL;
    frag->endpoint = endpoint;
    frag->base.des_flags = flags;
    return &frag->base;
}

static int shardx_free(mca_btl_base_module_t *btl, mca_btl_base_descriptor_t *des)
{
    (void)btl;
    shardx_frag_return((mca_btl_shardx_frag_t *)des);
    return OPAL_SUCCESS;
}

/*
 * Contiguous data is not copied: segments[0] holds the PML's header
 * (reserve bytes), segments[1] points at the user's buffer, and sx_send
 * gathers both. ob1 keeps that buffer until the descriptor's callback,
 * which runs when the peer has acknowledged the message. Anything else is
 * packed into the copy area.
 */
static mca_btl_base_descriptor_t *shardx_prepare_src(mca_btl_base_module_t *btl,
                                                     mca_btl_base_endpoint_t *endpoint,
                                                     opal_convertor_t *convertor, uint8_t order,
                                                     size_t reserve, size_t *size, uint32_t flags)
{
    mca_btl_shardx_module_t *m = shardx_module(btl);
    mca_btl_shardx_frag_t *frag;
    size_t max_data = *size;
    struct iovec iov;
    uint32_t iov_count = 1;
    (void)order;

    if (max_data > 0 && !opal_convertor_need_buffers(convertor)) {
        frag = shardx_frag_get(m, reserve);
        if (frag == NULL)
            return NULL;
        iov.iov_base = NULL;
        iov.iov_len = max_data;
        if (opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0) {
            shardx_frag_return(frag);
            return NULL;
        }
        frag->segments[1].seg_addr.pval = iov.iov_base;
        frag->segments[1].seg_len = max_data;
        frag->base.des_segment_count = 2;
    } else {
        if (reserve + max_data > btl->btl_max_send_size)
            max_data = btl->btl_max_send_size - reserve;
        frag = shardx_frag_get(m, reserve + max_data);
        if (frag == NULL)
            return NULL;
        if (max_data > 0) {
            iov.iov_base = frag->data + reserve;
            iov.iov_len = max_data;
            if (opal_convertor_pack(convertor, &iov, &iov_count, &max_data) < 0) {
                shardx_frag_return(frag);
                return NULL;
            }
        }
        frag->segments[0].seg_len = reserve + max_data;
    }
    frag->endpoint = endpoint;
    frag->base.des_flags = flags;
    *size = max_data;
    return &frag->base;
}

/* ------------------------------------------------------------------ */
/* Send                                                                 */
/* ------------------------------------------------------------------ */

/* The peer's shardx would not take a message (shardx.h, sx_send). */
static bool shardx_refusal(int status)
{
    return status == SX_ERR_TRUNCATED || status == SX_ERR_NOT_FOUND;
}

static void shardx_peer_failed(void *arg, uint64_t peer_id, int status);

/* sx_send's completion: the peer has the message (or it failed). Runs on
 * whichever thread works the shard, with no lock held, so ob1's callback
 * may send again at once. */
static void shardx_send_complete(void *ctx, int status)
{
    mca_btl_shardx_frag_t *frag = ctx;
    mca_btl_shardx_module_t *m = &mca_btl_shardx_module;
    /* Read before the callback: it may free or reuse the descriptor when the
     * BTL does not own it. */
    bool btl_owns = (frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) != 0;
    bool closing = atomic_load_explicit(&m->closing, memory_order_acquire);

    /* A refusal goes to the error callback first: sendi's queued fallback
     * has no callback, so nobody would hear of it, and ob1's callback
     * aborts on an error without saying why. (A peer's failure the engine
     * reports itself.) */
    if (shardx_refusal(status) && !closing && frag->endpoint != NULL &&
        frag->endpoint->peer != NULL)
        shardx_peer_failed(m, sx_peer_id(frag->endpoint->peer), status);
    if (frag->base.des_cbfunc != NULL && !closing) {
        mca_btl_shardx_in_callback++;
        frag->base.des_cbfunc(&m->super, frag->endpoint, &frag->base,
                              mca_btl_shardx_status(status));
        mca_btl_shardx_in_callback--;
    }
    if (btl_owns)
        shardx_frag_return(frag);
}

static sx_peer_h shardx_ep_peer(mca_btl_base_endpoint_t *ep)
{
    if (ep == NULL || atomic_load_explicit(&ep->removed, memory_order_acquire))
        return NULL;
    return ep->peer;
}

/*
 * A message small enough for sx_sendi goes out (copied) at once and the
 * descriptor is done: return 1, call back only when asked to always. Else
 * sx_send queues it and the callback runs on the peer's acknowledgement.
 */
static int shardx_send(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                       mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag)
{
    mca_btl_shardx_frag_t *frag = (mca_btl_shardx_frag_t *)des;
    sx_peer_h peer = shardx_ep_peer(endpoint);
    struct iovec iov[2];
    size_t total = 0;
    int n = (int)des->des_segment_count;

    if (peer == NULL)
        return OPAL_ERR_UNREACH;
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = des->des_segments[i].seg_addr.pval;
        iov[i].iov_len = des->des_segments[i].seg_len;
        total += iov[i].iov_len;
    }
    frag->endpoint = endpoint;
    frag->tag = tag;

    if (total <= btl->btl_eager_limit) {
        int rc = sx_sendi(peer, tag, iov, n);
        if (rc == SX_OK) {
            SHARDX_COUNT(shardx_module(btl), n_send_inline);
            bool btl_owns = (des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) != 0;
            if ((des->des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) && des->des_cbfunc != NULL)
                des->des_cbfunc(btl, endpoint, des, OPAL_SUCCESS);
            if (btl_owns)
                shardx_frag_return(frag);
            return 1;
        }
        if (rc != SX_ERR_AGAIN)
            return mca_btl_shardx_status(rc);
    }
    int rc = sx_send(peer, tag, iov, n, shardx_send_complete, frag);
    if (rc == SX_INPROGRESS) {
        SHARDX_COUNT(shardx_module(btl), n_send);
        return OPAL_SUCCESS;
    }
    return mca_btl_shardx_status(rc);
}

/*
 * Immediate send of header + payload up to the eager limit. sx_sendi when
 * the shard is free; when it is busy (another thread works it), the data
 * is copied into a descriptor the BTL owns and queued with sx_send, so the
 * call still succeeds and the PML never waits for a descriptor. Only a
 * message over the eager limit, or exhausted lists, hands a descriptor
 * back (ob1 then sends it with btl_send).
 */
static int shardx_sendi(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                        opal_convertor_t *convertor, void *header, size_t header_size,
                        size_t payload_size, uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
                        mca_btl_base_descriptor_t **descriptor)
{
    mca_btl_shardx_module_t *m = shardx_module(btl);
    sx_peer_h peer = shardx_ep_peer(endpoint);
    size_t total = header_size + payload_size;
    struct iovec iov[2];
    int n = 0, rc;

    if (peer == NULL)
        return OPAL_ERR_UNREACH;
    if (total > btl->btl_eager_limit)
        goto hand_back;

    iov[n].iov_base = header;
    iov[n].iov_len = header_size;
    n++;
    mca_btl_shardx_frag_t *frag = NULL;
    if (payload_size > 0 && opal_convertor_need_buffers(convertor)) {
        /* Non-contiguous: pack into a descriptor first. */
        frag = shardx_frag_get(m, total);
        if (frag == NULL)
            goto hand_back;
        struct iovec piov = {.iov_base = frag->data + header_size, .iov_len = payload_size};
        uint32_t cnt = 1;
        size_t max = payload_size;
        memcpy(frag->data, header, header_size);
        if (opal_convertor_pack(convertor, &piov, &cnt, &max) < 0 || max != payload_size) {
            shardx_frag_return(frag);
            return OPAL_ERROR;
        }
        iov[0].iov_base = frag->data;
        iov[0].iov_len = total;
    } else if (payload_size > 0) {
        /* Contiguous: packing with a NULL base only advances the convertor
         * and hands back the user's pointer. */
        struct iovec piov = {.iov_base = NULL, .iov_len = payload_size};
        uint32_t cnt = 1;
        size_t max = payload_size;
        if (opal_convertor_pack(convertor, &piov, &cnt, &max) < 0 || max != payload_size)
            return OPAL_ERROR;
        iov[n].iov_base = piov.iov_base;
        iov[n].iov_len = payload_size;
        n++;
    }

    rc = sx_sendi(peer, tag, iov, n);
    if (rc == SX_OK) {
        SHARDX_COUNT(m, n_sendi);
        if (frag != NULL)
            shardx_frag_return(frag);
        return OPAL_SUCCESS;
    }
    if (rc != SX_ERR_AGAIN) {
        if (frag != NULL)
            shardx_frag_return(frag);
        return mca_btl_shardx_status(rc);
    }
    /* The shard is busy: queue a copy. The convertor is already consumed,
     * so from here the data must go out or the send fails for good. */
    if (frag == NULL) {
        frag = shardx_frag_get(m, total);
        if (frag == NULL)
            return OPAL_ERR_OUT_OF_RESOURCE;
        memcpy(frag->data, header, header_size);
        if (payload_size > 0)
            memcpy(frag->data + header_size, iov[1].iov_base, payload_size);
    }
    frag->endpoint = endpoint;
    frag->tag = tag;
    frag->base.des_flags = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    struct iovec one = {.iov_base = frag->data, .iov_len = total};
    rc = sx_send(peer, tag, &one, 1, shardx_send_complete, frag);
    if (rc == SX_INPROGRESS) {
        SHARDX_COUNT(m, n_sendi_queued);
        return OPAL_SUCCESS;
    }
    shardx_frag_return(frag);
    return mca_btl_shardx_status(rc);

hand_back:
    if (descriptor != NULL)
        *descriptor = shardx_alloc(btl, endpoint, order, total, flags);
    return OPAL_ERR_OUT_OF_RESOURCE;
}

/* ------------------------------------------------------------------ */
/* Receive                                                              */
/* ------------------------------------------------------------------ */

/* Every shardx tag lands here: the shardx tag is ob1's BTL tag. The
 * descriptor lives on the stack; ob1 may use it only during the call. */
static void shardx_am_handler(void *arg, uint64_t peer_id, uint8_t tag, const void *data,
                              size_t len)
{
    mca_btl_shardx_module_t *m = arg;
    const mca_btl_active_message_callback_t *reg = &mca_btl_base_active_message_trigger[tag];

    /* The BTL's own: a peer asks us to copy part of its get; a peer
     * finished ours, which its datagram woke us for (btl_shardx_split.c). */
    if (tag == SHARDX_TAG_SPLIT_ASK) {
        mca_btl_shardx_split_asked(m, peer_id, data, len);
        return;
    }
    if (tag == SHARDX_TAG_SPLIT_DONE)
        return;

    if (reg->cbfunc == NULL) {
        /* No PML registered this tag. Cannot happen for ob1, which
         * registers its tags in add_procs, before the start-up barrier
         * lets any peer send. Said at once, the first time: a job that
         * then hangs never reaches the count at finalize. */
        if (atomic_fetch_add_explicit(&m->dropped_no_handler, 1, memory_order_relaxed) == 0)
            opal_output(0,
                        "btl shardx: a %zu-byte message for tag %u arrived from peer %llu and "
                        "no PML registered that tag: dropped (finalize counts any more)",
                        len, (unsigned)tag, (unsigned long long)peer_id);
        return;
    }
    mca_btl_base_segment_t seg = {.seg_addr.pval = (void *)data, .seg_len = len};
    mca_btl_base_descriptor_t des;
    memset(&des, 0, sizeof(des));
    des.des_segments = &seg;
    des.des_segment_count = 1;
    des.order = MCA_BTL_NO_ORDER;
    mca_btl_shardx_in_callback++;
    reg->cbfunc(&m->super, tag, &des, reg->cbdata);
    mca_btl_shardx_in_callback--;
}

static int shardx_register(mca_btl_base_module_t *btl, mca_btl_base_tag_t tag,
                           mca_btl_base_module_recv_cb_fn_t cbfunc, void *cbdata)
{
    /* The BML fills mca_btl_base_active_message_trigger itself, and the
     * receive path reads it there. */
    (void)btl;
    (void)tag;
    (void)cbfunc;
    (void)cbdata;
    return OPAL_SUCCESS;
}

/*
 * Which thread called btl_progress last, and when that last changed
 * (CLOCK_MONOTONIC_COARSE, ns). Written only when the caller changes, so
 * a single progressing thread only reads them.
 */
static _Thread_local char shardx_progress_me;
static _Thread_local bool shardx_progress_policy_checked;
static _Atomic(const void *) shardx_progress_last;
static _Atomic uint64_t shardx_progress_switch_ns;
#define SHARDX_HANDOFF_NS (10u * 1000u * 1000u) /* 10 ms */

static uint64_t shardx_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void shardx_thread_to_batch(void)
{
    int policy;
    struct sched_param sp;
    if (pthread_getschedparam(pthread_self(), &policy, &sp) != 0 || policy != SCHED_OTHER)
        return;
    sp.sched_priority = 0;
    int rc = pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
    if (rc == 0)
        SHARDX_COUNT(&mca_btl_shardx_module, n_batch_threads);
    else
        opal_output_verbose(1, mca_btl_shardx_component.output,
                            "btl shardx: SCHED_BATCH for a progressing thread: %s", strerror(rc));
}

/*
 * Whether a progress call that finds nothing may wait for shardx's
 * traffic instead of returning 0. Under mpi_yield_when_idle (which
 * ompi_mpi_init sets at its end, from the user or from the runtime's
 * finding that ranks outnumber slots), opal_progress calls sched_yield
 * after every pass that found no event, and beside CPU-bound processes
 * that hands them the core for the rest of their slice: four ranks on two
 * cores beside two busy loops ran our suite's threads test 2-2.5 times
 * slower than over tcp. So the engine is told (sx_engine_caller_yields)
 * and, while the machine is oversubscribed (SX_YIELD), waits for a
 * datagram instead, waking onto the core with work. Only when no BTL but
 * self shares the progress loop: a wait that only
 * shardx's datagrams end would hold up another BTL's traffic (vader's
 * shared memory) by up to the wait.
 */
static bool shardx_alone(void)
{
    mca_btl_base_selected_module_t *sm;
    OPAL_LIST_FOREACH(sm, &mca_btl_base_modules_initialized, mca_btl_base_selected_module_t)
    {
        const char *name = sm->btl_component->btl_version.mca_component_name;
        if (strcmp(name, "shardx") != 0 && strcmp(name, "self") != 0)
            return false;
    }
    return true;
}

static void shardx_follow_yield_when_idle(sx_engine_h engine)
{
    static int seen = -1; /* opal_progress_yield_when_idle at the last call */
    int now = opal_progress_yield_when_idle ? 1 : 0;

    if (__atomic_load_n(&seen, __ATOMIC_RELAXED) == now)
        return;
    __atomic_store_n(&seen, now, __ATOMIC_RELAXED);
    const char *why = "returns at once when it finds nothing";
    bool wait = false;
    if (now && !mca_btl_shardx_component.idle_wait)
        why = "returns at once (btl_shardx_idle_wait 0)";
    else if (now && !shardx_alone())
        why = "returns at once: other BTLs share the progress loop";
    else if (now) {
        why = "waits for a datagram instead";
        wait = true;
        SHARDX_COUNT(&mca_btl_shardx_module, n_caller_yields);
    }
    (void)sx_engine_caller_yields(engine, wait);
    opal_output_verbose(5, mca_btl_shardx_component.output,
                        "btl shardx: Open MPI %s when idle; shardx %s",
                        now ? "yields" : "does not yield", why);
}

/*
 * Progress for ob1, and the hand-off between waiting threads. Under
 * MPI_THREAD_MULTIPLE, Open MPI 4.1's request wait
 * (opal/threads/wait_sync.c) lets one thread call opal_progress and parks
 * the others on condition variables, passing the progress role on as
 * requests complete. ob1 signals a waiter while holding its mutex: a
 * woken SCHED_OTHER thread can preempt the signaller and block on that
 * mutex, a SCHED_BATCH one does not preempt on wake-up (sched(7)). So each
 * thread that takes part in a hand-off (the role changed hands within
 * SHARDX_HANDOFF_NS) moves from SCHED_OTHER to SCHED_BATCH once
 * (btl_shardx_sched_batch, on by default; other policies are left alone,
 * and the nice value's CPU share is kept). With one waiting thread the
 * role never moves and nothing changes. The engine's own wait for a
 * datagram wants the opposite, to preempt a busy loop when it ends, and
 * runs as SCHED_OTHER once such a thread's waits come back late
 * (src/engine/yield.h, "Waits that preempt").
 *
 * This call used to end with sched_yield while the role moved, so that a
 * woken waiter got the CPU the progressing thread spins on. Beside
 * CPU-bound processes that handed them the core for the rest of their
 * slice at every hand-off: mpi_bench mt 2 beside two busy loops took
 * 3.5-3.8 ms per message (tcp: 3-9 us). Without it, and with shardx's own
 * SX_YIELD for callers that find nothing while threads outnumber cores:
 * 3.0-3.2 us beside the busy loops, 3.2 us (against 6.8-7.0) alone; mt 4
 * 8-10 us against 11.5-12 alone. docs/tuning.md, section "Open MPI BTL:
 * threads that wait", has the measurements.
 */
int mca_btl_shardx_progress(void)
{
    sx_engine_h engine = mca_btl_shardx_module.engine;
    if (engine == NULL)
        return 0;
    shardx_follow_yield_when_idle(engine);
    int n = sx_progress(engine);
    /* Shared gets (btl_shardx_split.c) copy here, outside the shard. */
    if (atomic_load_explicit(&mca_btl_shardx_module.split, memory_order_relaxed) != NULL) {
        mca_btl_shardx_in_progress++;
        n += mca_btl_shardx_split_progress(&mca_btl_shardx_module);
        mca_btl_shardx_in_progress--;
    }
    if (opal_using_threads() && !shardx_progress_policy_checked) {
        const void *me = &shardx_progress_me;
        uint64_t now = shardx_coarse_ns();
        /* The first caller takes the role from nobody: not a hand-off. */
        if (atomic_load_explicit(&shardx_progress_last, memory_order_relaxed) != me &&
            atomic_exchange_explicit(&shardx_progress_last, me, memory_order_relaxed) != NULL)
            atomic_store_explicit(&shardx_progress_switch_ns, now, memory_order_relaxed);
        if (now - atomic_load_explicit(&shardx_progress_switch_ns, memory_order_relaxed) <
            SHARDX_HANDOFF_NS) {
            shardx_progress_policy_checked = true;
            if (mca_btl_shardx_component.sched_batch)
                shardx_thread_to_batch();
        }
    }
    return n > 0 ? n : 0;
}

/* ------------------------------------------------------------------ */
/* Memory registration, put and get                                     */
/* ------------------------------------------------------------------ */

static mca_btl_base_registration_handle_t *shardx_register_mem(mca_btl_base_module_t *btl,
                                                               mca_btl_base_endpoint_t *endpoint,
                                                               void *base, size_t size,
                                                               uint32_t flags)
{
    mca_btl_shardx_module_t *m = shardx_module(btl);
    unsigned access = 0;
    (void)endpoint;

    if (flags & (MCA_BTL_REG_FLAG_REMOTE_READ | MCA_BTL_REG_FLAG_REMOTE_ATOMIC))
        access |= SX_MEM_REMOTE_READ;
    if (flags & (MCA_BTL_REG_FLAG_REMOTE_WRITE | MCA_BTL_REG_FLAG_REMOTE_ATOMIC))
        access |= SX_MEM_REMOTE_WRITE;
    mca_btl_shardx_reg_t *reg = malloc(sizeof(*reg));
    if (reg == NULL)
        return NULL;
    reg->mem = NULL;
    reg->handle.rkey = 0;
    mca_btl_shardx_cma_fill(&reg->handle, base, size, access);
    /* Local access needs nothing from shardx: put and get read and write
     * local memory directly. */
    if (access != 0) {
        int rc = sx_mem_register(m->engine, base, size, access, &reg->mem);
        if (rc != SX_OK) {
            opal_output_verbose(5, mca_btl_shardx_component.output,
                                "btl shardx: sx_mem_register(%p, %zu): %s", base, size,
                                sx_strerror(rc));
            free(reg);
            return NULL;
        }
        reg->handle.rkey = sx_mem_rkey(reg->mem);
        SHARDX_COUNT(m, n_reg);
    }
    /* ob1 may deregister it on another thread, and a peer may ask us to
     * copy from it (btl_shardx_split.c): both hand-overs TSan cannot see. */
    SHARDX_TSAN_RELEASE(reg);
    SHARDX_TSAN_RELEASE(&mca_btl_shardx_tsan_registered);
    return &reg->handle;
}

static int shardx_deregister_mem(mca_btl_base_module_t *btl,
                                 mca_btl_base_registration_handle_t *handle)
{
    mca_btl_shardx_module_t *m = shardx_module(btl);
    mca_btl_shardx_reg_t *reg = (mca_btl_shardx_reg_t *)handle; /* handle is the first member */

    if (reg == NULL)
        return OPAL_ERR_BAD_PARAM;
    SHARDX_TSAN_ACQUIRE(reg);
    if (reg->mem != NULL)
        (void)sx_mem_deregister(m->engine, reg->mem);
    free(reg);
    return OPAL_SUCCESS;
}

/* sx_put / sx_get completion. A put completes when the bytes are in place
 * at the target (shardx waits for the target's acknowledgement of the
 * write), which is what ob1 needs before it sends FIN. */
void mca_btl_shardx_rdma_complete(void *ctx, int status)
{
    mca_btl_shardx_rdma_op_t *op = ctx;
    mca_btl_shardx_module_t *m = &mca_btl_shardx_module;
    mca_btl_shardx_rdma_op_t copy = *op;

    /* Back to the list first: the callback may start the next operation. */
    shardx_list_return(&m->rdma_ops, &op->super);
    if (atomic_load_explicit(&m->closing, memory_order_acquire))
        return;
    copy.cbfunc(&m->super, copy.endpoint, copy.local_address, copy.local_handle, copy.cbcontext,
                copy.cbdata, mca_btl_shardx_status(status));
}

void mca_btl_shardx_rdma_done(void *ctx, int status)
{
    mca_btl_shardx_in_callback++;
    mca_btl_shardx_rdma_complete(ctx, status);
    mca_btl_shardx_in_callback--;
}

static int shardx_rdma(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                       void *local_address, uint64_t remote_address,
                       mca_btl_base_registration_handle_t *local_handle,
                       mca_btl_base_registration_handle_t *remote_handle, size_t size,
                       mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata,
                       bool write)
{
    mca_btl_shardx_module_t *m = shardx_module(btl);
    sx_peer_h peer = shardx_ep_peer(endpoint);
    sx_rkey_t rkey;

    if (peer == NULL)
        return OPAL_ERR_UNREACH;
    if (write)
        SHARDX_COUNT(m, n_put);
    else
        SHARDX_COUNT(m, n_get);
    /* A peer on this host: one copy, by this thread, done when it returns
     * (btl_shardx_cma.c); else, or when that fails, shardx's datagrams. */
    if ((write || size < mca_btl_shardx_component.cma_split) &&
        mca_btl_shardx_cma_copy(m, endpoint, local_address, remote_address, size, remote_handle,
                                write) == OPAL_SUCCESS) {
        cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
        return OPAL_SUCCESS;
    }
    /* The remote handle sits in a PML header and may be unaligned. */
    memcpy(&rkey, &remote_handle->rkey, sizeof(rkey));
    mca_btl_shardx_rdma_op_t *op = (mca_btl_shardx_rdma_op_t *)shardx_list_get(&m->rdma_ops);
    if (op == NULL)
        return OPAL_ERR_OUT_OF_RESOURCE;
    op->endpoint = endpoint;
    op->local_address = local_address;
    op->local_handle = local_handle;
    op->cbfunc = cbfunc;
    op->cbcontext = cbcontext;
    op->cbdata = cbdata;
    op->remote_address = remote_address;
    op->rkey = rkey;
    op->size = size;
    /* A large get from a peer on this host: both ranks copy part of it,
     * in progress calls (btl_shardx_split.c); else, if it was not tried
     * above, one copy now. */
    if (!write) {
        if (mca_btl_shardx_split_get(m, peer, op, remote_handle) == OPAL_SUCCESS)
            return OPAL_SUCCESS;
        if (size >= mca_btl_shardx_component.cma_split &&
            mca_btl_shardx_cma_copy(m, endpoint, local_address, remote_address, size, remote_handle,
                                    false) == OPAL_SUCCESS) {
            shardx_list_return(&m->rdma_ops, &op->super);
            cbfunc(btl, endpoint, local_address, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
            return OPAL_SUCCESS;
        }
    }
    int rc =
        write
            ? sx_put(peer, local_address, size, remote_address, rkey, mca_btl_shardx_rdma_done, op)
            : sx_get(peer, local_address, size, remote_address, rkey, mca_btl_shardx_rdma_done, op);
    if (rc == SX_INPROGRESS)
        return OPAL_SUCCESS;
    shardx_list_return(&m->rdma_ops, &op->super);
    return mca_btl_shardx_status(rc);
}

static int shardx_put(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                      void *local_address, uint64_t remote_address,
                      mca_btl_base_registration_handle_t *local_handle,
                      mca_btl_base_registration_handle_t *remote_handle, size_t size, int flags,
                      int order, mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                      void *cbdata)
{
    (void)flags;
    (void)order;
    return shardx_rdma(btl, endpoint, local_address, remote_address, local_handle, remote_handle,
                       size, cbfunc, cbcontext, cbdata, true);
}

static int shardx_get(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                      void *local_address, uint64_t remote_address,
                      mca_btl_base_registration_handle_t *local_handle,
                      mca_btl_base_registration_handle_t *remote_handle, size_t size, int flags,
                      int order, mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                      void *cbdata)
{
    (void)flags;
    (void)order;
    return shardx_rdma(btl, endpoint, local_address, remote_address, local_handle, remote_handle,
                       size, cbfunc, cbcontext, cbdata, false);
}

/* ------------------------------------------------------------------ */
/* Peers                                                                */
/* ------------------------------------------------------------------ */

/* An endpoint already made for @p proc (add_procs may see a process twice). */
static mca_btl_base_endpoint_t *shardx_ep_find_locked(mca_btl_shardx_module_t *m, opal_proc_t *proc)
{
    mca_btl_base_endpoint_t *ep;
    OPAL_LIST_FOREACH(ep, &m->endpoints, mca_btl_base_endpoint_t)
    {
        if (ep->proc == proc)
            return ep;
    }
    return NULL;
}

/*
 * Names @p slot's process for log lines, shardx's included (sx_peer_add_ex):
 * "rank 3 on node2", with the job for a process of another job. The host
 * is @p host when known, else the modex's PMIX_HOSTNAME.
 */
static void shardx_slot_label(mca_btl_shardx_slot_t *slot, const char *host)
{
    char *found = NULL;
    int rc;

    if (host == NULL) {
        OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, OPAL_PMIX_HOSTNAME, &slot->name, &found, OPAL_STRING);
        if (rc == OPAL_SUCCESS)
            host = found;
    }
    if (slot->name.jobid == OPAL_PROC_MY_NAME.jobid)
        snprintf(slot->label, sizeof(slot->label), "rank %u%s%s", (unsigned)slot->name.vpid,
                 host != NULL ? " on " : "", host != NULL ? host : "");
    else
        snprintf(slot->label, sizeof(slot->label), "rank %u of job %s%s%s",
                 (unsigned)slot->name.vpid, OPAL_JOBID_PRINT(slot->name.jobid),
                 host != NULL ? " on " : "", host != NULL ? host : "");
    free(found);
}

/* sx_peer_add_ex for @p slot, named by its label. */
static int shardx_slot_add_peer(mca_btl_shardx_module_t *m, mca_btl_shardx_slot_t *slot,
                                const void *card, size_t len, sx_peer_h *peer_p)
{
    sx_peer_params_t pp = {.field_mask = SX_PEER_PARAM_NAME, .name = slot->label};
    return sx_peer_add_ex(m->engine, (uint64_t)(uintptr_t)slot, card, len, &pp, peer_p);
}

/*
 * Adds the shardx peer of every rank of our job (its card from the modex),
 * once, at the first add_procs (the modex is complete by then). A rank
 * whose card sx_peer_add refused keeps the status for the add_procs that
 * asks for it; one without a card yet is asked again then. Skipped when the engine listens on
 * loopback only: remote cards would then be useless, and ob1 adds the local ranks at MPI_Init.
 */
static void shardx_add_job_peers_locked(mca_btl_shardx_module_t *m)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;
    opal_process_name_t me = OPAL_PROC_MY_NAME;
    opal_process_name_t wild = {.jobid = me.jobid, .vpid = OPAL_VPID_WILDCARD};
    uint32_t size = 0, *size_p = &size;
    int rc;

    m->slots_tried = true;
    if (c->loopback_only)
        return;
    OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, OPAL_PMIX_JOB_SIZE, &wild, &size_p, OPAL_UINT32);
    if (rc != OPAL_SUCCESS || size == 0) {
        opal_output_verbose(10, c->output,
                            "btl shardx: the job's size is unknown: ranks are added as ob1 asks");
        return;
    }
    m->slots = calloc(size, sizeof(*m->slots));
    if (m->slots == NULL)
        return;
    m->nslots = size;
    for (uint32_t v = 0; v < size; v++) {
        mca_btl_shardx_slot_t *slot = &m->slots[v];
        uint8_t *card = NULL;
        size_t len = 0;
        slot->name = (opal_process_name_t){.jobid = me.jobid, .vpid = v};
        atomic_init(&slot->ep, NULL);
        slot->status = SX_ERR_NOT_FOUND; /* until a card is added */
        if (v == me.vpid)
            continue; /* ourselves: the self BTL's */
        shardx_slot_label(slot, NULL);
        OPAL_MODEX_RECV(rc, &c->super.btl_version, &slot->name, (void **)&card, &len);
        if (rc != OPAL_SUCCESS || card == NULL)
            continue; /* asked again when ob1 adds it */
        slot->status = shardx_slot_add_peer(m, slot, card, len, &slot->peer);
        free(card);
    }
}

/* Our job's slot for @p proc, or NULL (another job, or none added). */
static mca_btl_shardx_slot_t *shardx_job_slot(mca_btl_shardx_module_t *m, const opal_proc_t *proc)
{
    if (m->slots == NULL || proc->proc_name.jobid != OPAL_PROC_MY_NAME.jobid ||
        proc->proc_name.vpid >= m->nslots)
        return NULL;
    return &m->slots[proc->proc_name.vpid];
}

/* Gives @p ep its shardx peer: the job slot's, else one added from the
 * proc's card now. SX_OK, or why not (logged). */
static int shardx_ep_attach_locked(mca_btl_shardx_module_t *m, mca_btl_base_endpoint_t *ep)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;
    mca_btl_shardx_slot_t *slot = shardx_job_slot(m, ep->proc);
    uint8_t *card = NULL;
    size_t len = 0;
    int rc;

    if (slot != NULL && slot->peer != NULL) {
        ep->peer = slot->peer;
        atomic_store_explicit(&slot->ep, ep, memory_order_release);
        return SX_OK;
    }
    if (slot != NULL && slot->status != SX_ERR_NOT_FOUND)
        return slot->status; /* sx_peer_add refused the card already, and said why */
    OPAL_MODEX_RECV(rc, &c->super.btl_version, &ep->proc->proc_name, (void **)&card, &len);
    if (rc != OPAL_SUCCESS || card == NULL) {
        opal_output_verbose(10, c->output, "btl shardx: no card from rank %u (%s)",
                            (unsigned)ep->proc->proc_name.vpid,
                            OPAL_NAME_PRINT(ep->proc->proc_name));
        return SX_ERR_NOT_FOUND;
    }
    slot = slot != NULL ? slot : &ep->own;
    slot->name = ep->proc->proc_name;
    shardx_slot_label(slot, ep->proc->proc_hostname);
    atomic_store_explicit(&slot->ep, ep, memory_order_release);
    rc = shardx_slot_add_peer(m, slot, card, len, &ep->peer);
    free(card);
    if (rc == SX_OK)
        slot->peer = ep->peer;
    return rc;
}

static int shardx_add_procs(mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **procs,
                            mca_btl_base_endpoint_t **endpoints, opal_bitmap_t *reachable)
{
    mca_btl_shardx_module_t *m = shardx_module(btl);
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;

    OPAL_THREAD_LOCK(&m->ep_lock);
    if (!m->slots_tried)
        shardx_add_job_peers_locked(m);
    OPAL_THREAD_UNLOCK(&m->ep_lock);
    for (size_t i = 0; i < nprocs; i++) {
        opal_proc_t *proc = procs[i];
        int rc = SX_OK;

        /* Our own process is the self BTL's. */
        if (opal_compare_proc(proc->proc_name, OPAL_PROC_MY_NAME) == 0)
            continue;
        if (c->loopback_only && !OPAL_PROC_ON_LOCAL_NODE(proc->proc_flags)) {
            opal_output_verbose(10, c->output,
                                "btl shardx: rank %u on %s is on another host and the engine is "
                                "bound to loopback (set btl_shardx_bind_addr): not reachable",
                                (unsigned)proc->proc_name.vpid,
                                proc->proc_hostname != NULL ? proc->proc_hostname : "?");
            continue;
        }

        OPAL_THREAD_LOCK(&m->ep_lock);
        mca_btl_base_endpoint_t *ep = shardx_ep_find_locked(m, proc);
        if (ep == NULL) {
            ep = OBJ_NEW(mca_btl_base_endpoint_t);
            if (ep != NULL) {
                ep->proc = proc;
                rc = shardx_ep_attach_locked(m, ep);
                if (rc == SX_OK) {
                    OBJ_RETAIN(proc);
                    opal_list_append(&m->endpoints, &ep->super);
                } else {
                    if (rc != SX_ERR_NOT_FOUND)
                        opal_output(
                            0, "btl shardx: cannot add rank %u on %s (%s) as a peer: %s (%s)",
                            (unsigned)proc->proc_name.vpid,
                            proc->proc_hostname != NULL ? proc->proc_hostname : "?",
                            OPAL_NAME_PRINT(proc->proc_name), sx_strerror(rc), sx_status_name(rc));
                    OBJ_RELEASE(ep);
                    ep = NULL;
                }
            }
        }
        OPAL_THREAD_UNLOCK(&m->ep_lock);
        if (ep == NULL)
            continue;
        endpoints[i] = ep;
        if (reachable != NULL)
            opal_bitmap_set_bit(reachable, (int)i);
    }
    return OPAL_SUCCESS;
}

/*
 * The endpoint stops taking new operations; the shardx peer itself stays
 * until finalize destroys the engine. Removing it here could pull the
 * handle from under another thread's sx_send (the handle may not be used
 * once sx_peer_remove returns) and would cancel messages the peer has
 * already received but not acknowledged. Safe to call twice.
 */
static int shardx_del_procs(mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **procs,
                            mca_btl_base_endpoint_t **peers)
{
    (void)btl;
    (void)procs;
    for (size_t i = 0; i < nprocs; i++) {
        if (peers[i] != NULL)
            atomic_store_explicit(&peers[i]->removed, true, memory_order_release);
    }
    return OPAL_SUCCESS;
}

/*
 * The engine's error callback: a peer failed, or refused a message sent
 * without a completion (sx_sendi). A refusal means the peer's shardx
 * would not take it (larger than its largest message, or a tag it has no
 * handler for: ranks started with different settings), and ob1 cannot
 * send it again: both are fatal to the job, reported once per endpoint.
 */
static void shardx_peer_failed(void *arg, uint64_t peer_id, int status)
{
    mca_btl_shardx_module_t *m = arg;
    mca_btl_shardx_slot_t *slot = (mca_btl_shardx_slot_t *)(uintptr_t)peer_id;
    mca_btl_base_endpoint_t *ep =
        slot != NULL ? atomic_load_explicit(&slot->ep, memory_order_acquire) : NULL;
    char info[256];

    if (slot != NULL && ep == NULL && !atomic_load_explicit(&m->closing, memory_order_acquire)) {
        /* ob1 has not asked for this rank yet: nothing of its can fail. */
        opal_output(0, "btl shardx: %s %s before this rank talked to it: %s (%s)", slot->label,
                    shardx_refusal(status) ? "refused a message" : "failed", sx_strerror(status),
                    sx_status_name(status));
        return;
    }
    if (ep == NULL || atomic_load_explicit(&m->closing, memory_order_acquire) ||
        atomic_load_explicit(&ep->removed, memory_order_acquire) ||
        atomic_exchange_explicit(&ep->reported, true, memory_order_acq_rel))
        return;
    if (shardx_refusal(status))
        snprintf(info, sizeof(info),
                 "shardx: %s refused a message: %s (%s); were the ranks started with "
                 "different btl_shardx_max_msg_size or SX_MAX_MSG_SIZE?",
                 slot->label, sx_strerror(status), sx_status_name(status));
    else
        snprintf(info, sizeof(info), "shardx: %s failed: %s (%s)", slot->label, sx_strerror(status),
                 sx_status_name(status));
    opal_output(0, "btl %s", info);
    if (m->error_cb != NULL)
        m->error_cb(&m->super, MCA_BTL_ERROR_FLAGS_FATAL, ep->proc, info);
}

static int shardx_register_error(mca_btl_base_module_t *btl,
                                 mca_btl_base_module_error_cb_fn_t cbfunc)
{
    shardx_module(btl)->error_cb = cbfunc;
    return OPAL_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Lifetime                                                             */
/* ------------------------------------------------------------------ */

static int shardx_finalize(mca_btl_base_module_t *btl)
{
    mca_btl_shardx_module_t *m = shardx_module(btl);
    opal_list_item_t *item;

    if (m->engine == NULL)
        return OPAL_SUCCESS;
    /* Operations still pending complete as cancelled while the engine
     * shuts down; with closing set they are only freed. */
    atomic_store_explicit(&m->closing, true, memory_order_release);
    uint64_t wakeups = 0, landed = 0;
    unsigned shards = 0;
    if (m->count_ops) {
        (void)sx_stats_value(m->engine, "progress_wakeups", &wakeups);
        (void)sx_stats_value(m->engine, "rx_landed_bytes", &landed);
        (void)sx_engine_shard_count(m->engine, &shards);
    }
    sx_engine_destroy(m->engine);
    m->engine = NULL;
    if (m->count_ops)
        opal_output(
            0,
            "btl shardx: operations: sendi=%llu sendi_queued=%llu send=%llu "
            "send_inline=%llu put=%llu get=%llu registrations=%llu batch_threads=%llu "
            "caller_yields=%llu idle_wakeups=%llu landed_kib=%llu cma_put=%llu "
            "cma_get=%llu cma_fallback=%llu cma_split=%llu cma_helped=%llu "
            "cma_help_failed=%llu cma_help_refused=%llu cma_help_busy=%llu shards=%u",
            (unsigned long long)atomic_load(&m->n_sendi),
            (unsigned long long)atomic_load(&m->n_sendi_queued),
            (unsigned long long)atomic_load(&m->n_send),
            (unsigned long long)atomic_load(&m->n_send_inline),
            (unsigned long long)atomic_load(&m->n_put), (unsigned long long)atomic_load(&m->n_get),
            (unsigned long long)atomic_load(&m->n_reg),
            (unsigned long long)atomic_load(&m->n_batch_threads),
            (unsigned long long)atomic_load(&m->n_caller_yields), (unsigned long long)wakeups,
            (unsigned long long)(landed >> 10), (unsigned long long)atomic_load(&m->n_cma_put),
            (unsigned long long)atomic_load(&m->n_cma_get),
            (unsigned long long)atomic_load(&m->n_cma_fallback),
            (unsigned long long)atomic_load(&m->n_cma_split),
            (unsigned long long)atomic_load(&m->n_cma_helped),
            (unsigned long long)atomic_load(&m->n_cma_help_failed),
            (unsigned long long)atomic_load(&m->n_cma_help_refused),
            (unsigned long long)atomic_load(&m->n_cma_help_busy), shards);
    uint64_t dropped = atomic_load(&m->dropped_no_handler);
    if (dropped > 0)
        opal_output(0, "btl shardx: %llu messages arrived for tags with no handler",
                    (unsigned long long)dropped);

    /* The engine is gone: no shared get runs any more. */
    mca_btl_shardx_split_fini(m);
    while ((item = opal_list_remove_first(&m->endpoints)) != NULL) {
        mca_btl_base_endpoint_t *ep = (mca_btl_base_endpoint_t *)item;
        mca_btl_shardx_split_slot_fini(&ep->own);
        OBJ_RELEASE(ep->proc);
        OBJ_RELEASE(ep);
    }
    OBJ_DESTRUCT(&m->endpoints);
    for (uint32_t i = 0; i < m->nslots; i++)
        mca_btl_shardx_split_slot_fini(&m->slots[i]);
    free(m->slots);
    m->slots = NULL;
    m->nslots = 0;
    OBJ_DESTRUCT(&m->ep_lock);
    OBJ_DESTRUCT(&m->eager_frags);
    OBJ_DESTRUCT(&m->max_frags);
    OBJ_DESTRUCT(&m->rdma_ops);
    return OPAL_SUCCESS;
}

char mca_btl_shardx_tsan_registered;

mca_btl_shardx_module_t mca_btl_shardx_module = {
    .super =
        {
            .btl_add_procs = shardx_add_procs,
            .btl_del_procs = shardx_del_procs,
            .btl_register = shardx_register,
            .btl_finalize = shardx_finalize,
            .btl_alloc = shardx_alloc,
            .btl_free = shardx_free,
            .btl_prepare_src = shardx_prepare_src,
            .btl_send = shardx_send,
            .btl_sendi = shardx_sendi,
            .btl_put = shardx_put,
            .btl_get = shardx_get,
            .btl_dump = mca_btl_base_dump,
            .btl_register_mem = shardx_register_mem,
            .btl_deregister_mem = shardx_deregister_mem,
            .btl_register_error = shardx_register_error,
        },
};

static int shardx_list_init(opal_free_list_t *fl, size_t elem, opal_class_t *cls, int max,
                            opal_free_list_item_init_fn_t init, void *ctx)
{
    OBJ_CONSTRUCT(fl, opal_free_list_t);
    return opal_free_list_init(fl, elem, opal_cache_line_size, cls, 0, opal_cache_line_size, 32,
                               max, 32, NULL, 0, NULL, init, ctx);
}

int mca_btl_shardx_module_init(mca_btl_shardx_module_t *m, sx_engine_h engine)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;
    size_t eager = m->super.btl_eager_limit;
    size_t max = m->super.btl_max_send_size;
    int rc;

    if (max < eager)
        m->super.btl_max_send_size = max = eager;
    m->engine = engine;
    m->error_cb = NULL;
    atomic_init(&m->closing, false);
    atomic_init(&m->dropped_no_handler, 0);
    m->count_ops = c->verbose >= 1;
    atomic_init(&m->n_sendi, 0);
    atomic_init(&m->n_sendi_queued, 0);
    atomic_init(&m->n_send, 0);
    atomic_init(&m->n_send_inline, 0);
    atomic_init(&m->n_put, 0);
    atomic_init(&m->n_get, 0);
    atomic_init(&m->n_reg, 0);
    atomic_init(&m->n_cma_put, 0);
    atomic_init(&m->n_cma_get, 0);
    atomic_init(&m->n_cma_fallback, 0);
    atomic_init(&m->n_cma_split, 0);
    atomic_init(&m->n_cma_helped, 0);
    atomic_init(&m->n_cma_help_failed, 0);
    atomic_init(&m->n_cma_help_refused, 0);
    atomic_init(&m->n_cma_help_busy, 0);
    atomic_init(&m->split, NULL);
    atomic_init(&m->n_batch_threads, 0);
    OBJ_CONSTRUCT(&m->ep_lock, opal_mutex_t);
    OBJ_CONSTRUCT(&m->endpoints, opal_list_t);
    rc = shardx_list_init(&m->eager_frags, sizeof(mca_btl_shardx_frag_t) + eager,
                          OBJ_CLASS(mca_btl_shardx_frag_t), c->free_list_max, shardx_frag_init,
                          (void *)(uintptr_t)eager);
    if (rc == OPAL_SUCCESS)
        rc = shardx_list_init(&m->max_frags, sizeof(mca_btl_shardx_frag_t) + max,
                              OBJ_CLASS(mca_btl_shardx_frag_t), c->free_list_max, shardx_frag_init,
                              (void *)(uintptr_t)max);
    if (rc == OPAL_SUCCESS)
        rc = shardx_list_init(&m->rdma_ops, sizeof(mca_btl_shardx_rdma_op_t),
                              OBJ_CLASS(mca_btl_shardx_rdma_op_t), -1, NULL, NULL);
    if (rc != OPAL_SUCCESS) {
        opal_output(0, "btl shardx: cannot create descriptor lists (%d)", rc);
        m->engine = NULL;
        return rc;
    }
    for (unsigned tag = 0; tag < 256; tag++) {
        rc = sx_am_register(engine, (uint8_t)tag, shardx_am_handler, m);
        if (rc == SX_OK)
            continue;
        opal_output(0, "btl shardx: sx_am_register: %s", sx_strerror(rc));
        m->engine = NULL;
        return OPAL_ERROR;
    }
    rc = sx_error_register(engine, shardx_peer_failed, m);
    if (rc != SX_OK) {
        opal_output(0, "btl shardx: sx_error_register: %s", sx_strerror(rc));
        m->engine = NULL;
        return OPAL_ERROR;
    }
    return OPAL_SUCCESS;
}
