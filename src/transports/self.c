/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * self: in-process delivery between the shards of one engine.
 *
 * The engine creates one domain (sx_tl_self_domain_create) and hands it to
 * every shard's self interface through config->self_domain. The domain has
 * one slot per shard; a slot holds that shard's receive queue (liburcu's
 * wfcqueue: wait-free enqueue by any number of senders, one dequeuer) and
 * an eventfd. Slots live as long as the domain, not as long as the
 * interface, so a sender racing with the destination's close writes into
 * memory that still exists; at worst its datagram waits in the queue until
 * the next open of that shard or the domain's destruction frees it, which
 * is a late datagram, something datagram users must expect anyway.
 *
 * Synchronization:
 *
 *   what                      | who                     | ordering
 *   --------------------------+-------------------------+------------------------------
 *   slot.open                 | open/close (CAS/store)  | release at close, acquire at
 *                             | senders (load)          | open: consumers take turns
 *   enqueue (post_send)       | any shard's token holder| wait-free; TSan release of msg
 *   dequeue (poll)            | the slot's token holder | acquire of msg
 *   slot.queued_bytes         | senders add, poll subs  | relaxed: a bound, not a fence
 *   slot.signaled + eventfd   | see self_signal/quiesce | acq_rel exchanges
 *
 * Address (8 + 4 bytes): the domain's 64-bit id, little-endian, then the
 * shard index, 32-bit little-endian. The id is drawn at random when the
 * domain is created, so an address from another engine, in this process or
 * another one, is refused by addr_insert: self reaches only its own engine.
 *
 * mtu: 65000, the same as udp on loopback, so that a packet sized for one
 * local path fits the other. Each datagram is copied into a fresh malloc'd
 * buffer on send and freed by the receiver's next poll; a shared pool would
 * need its own cross-thread synchronization for no measured gain yet.
 *
 * Flow control: a slot holds at most `limit` bytes (config->rcvbuf of the
 * receiving interface, or 64 MiB), counting 64 bytes of overhead per
 * datagram. A datagram that does not fit is dropped and counted in the
 * receiver's stats.rx_kernel_drops, as a full socket buffer would, so the
 * reliability layer sees the same behaviour as over udp.
 */
#include "transports/transport.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <urcu/wfcqueue.h>

#include <shardx.h>

#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "common/tsan.h"

#define SELF_ADDR_LEN      12
#define SELF_MTU           65000
#define SELF_TX_CREDITS    1024
#define SELF_MAX_SHARDS    65536
#define SELF_LIMIT_DEFAULT ((size_t)64 << 20)
#define SELF_MSG_OVERHEAD  64
#define SELF_DEST_FREE_END UINT32_MAX

typedef struct self_msg {
    struct cds_wfcq_node node;
    struct self_msg *next_held; /* receiver-private: delivered, freed at next poll */
    size_t len;
    size_t charge; /* what it counts against the slot's limit */
    uint8_t data[];
} self_msg_t;

typedef struct self_slot {
    /* Consumer end: the owning shard's token holder only. */
    struct __cds_wfcq_head head __attribute__((aligned(64)));
    /* Producer end, on its own cache line with what senders write. */
    struct cds_wfcq_tail tail __attribute__((aligned(64)));
    _Atomic size_t queued_bytes;
    _Atomic uint64_t overflow_drops;
    atomic_bool signaled; /* the eventfd has been written and not yet read */
    /* Read-mostly. */
    atomic_bool open __attribute__((aligned(64)));
    _Atomic size_t limit;
    int efd;
} self_slot_t;

typedef struct self_domain {
    uint64_t id;
    unsigned nshards;
    self_slot_t *slots;
} self_domain_t;

typedef struct self_dest {
    uint32_t shard;
    uint32_t next_free;
    bool live;
} self_dest_t;

typedef struct self_iface {
    sx_tl_iface_t base;
    self_domain_t *domain;
    self_slot_t *slot;
    unsigned shard;
    self_msg_t *held; /* delivered by the last poll */
    self_dest_t *dests;
    uint32_t ndests, cap, free_head;
} self_iface_t;

/* ------------------------------------------------------------------ */
/* Domain                                                              */

static uint64_t self_mix64(uint64_t z)
{
    /* The splitmix64 finalizer (Steele, Lea and Flood, OOPSLA 2014). */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t self_new_id(const void *domain)
{
    static _Atomic uint64_t counter;
    uint64_t r = 0;

    /* Random so that engines in different processes differ; the counter and
     * the address keep two domains of one process apart even if
     * getrandom(2) is unavailable. */
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = sx_time_ns() ^ ((uint64_t)getpid() << 32);
    return self_mix64(r ^ (uint64_t)(uintptr_t)domain) +
           atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull;
}

/* Frees every datagram still queued on @p slot; its consumer side must be
 * ours (no interface open on it, or our own). */
static void self_slot_drain(self_slot_t *slot)
{
    struct cds_wfcq_node *node;

    while ((node = __cds_wfcq_dequeue_blocking(&slot->head, &slot->tail)) != NULL) {
        self_msg_t *msg = caa_container_of(node, self_msg_t, node);
        SX_TSAN_ACQUIRE(msg);
        atomic_fetch_sub_explicit(&slot->queued_bytes, msg->charge, memory_order_relaxed);
        free(msg);
    }
}

int sx_tl_self_domain_create(unsigned nshards, void **domain_p)
{
    if (nshards == 0 || nshards > SELF_MAX_SHARDS || domain_p == NULL)
        return SX_ERR_INVALID_PARAM;
    self_domain_t *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return SX_ERR_NO_MEMORY;
    d->slots = aligned_alloc(64, nshards * sizeof(self_slot_t));
    if (d->slots == NULL) {
        free(d);
        return SX_ERR_NO_MEMORY;
    }
    memset(d->slots, 0, nshards * sizeof(self_slot_t));
    for (unsigned i = 0; i < nshards; i++) {
        self_slot_t *s = &d->slots[i];
        __cds_wfcq_init(&s->head, &s->tail);
        atomic_init(&s->queued_bytes, 0);
        atomic_init(&s->overflow_drops, 0);
        atomic_init(&s->signaled, false);
        atomic_init(&s->open, false);
        atomic_init(&s->limit, SELF_LIMIT_DEFAULT);
        s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (s->efd < 0) {
            sx_error("self", "eventfd: %s", strerror(errno));
            for (unsigned j = 0; j < i; j++)
                close(d->slots[j].efd);
            free(d->slots);
            free(d);
            return SX_ERR_IO;
        }
    }
    d->nshards = nshards;
    d->id = self_new_id(d);
    *domain_p = d;
    return SX_OK;
}

void sx_tl_self_domain_destroy(void *domain)
{
    self_domain_t *d = domain;

    if (d == NULL)
        return;
    for (unsigned i = 0; i < d->nshards; i++) {
        self_slot_t *s = &d->slots[i];
        if (atomic_load_explicit(&s->open, memory_order_acquire))
            sx_error("self", "domain destroyed while shard %u's interface is open", i);
        self_slot_drain(s);
        close(s->efd);
    }
    free(d->slots);
    free(d);
}

/* ------------------------------------------------------------------ */
/* Wake-ups                                                            */

/*
 * Makes the slot's eventfd readable unless it already is. Senders call it
 * when their enqueue found the queue empty, so a receiver that drains
 * everything and sleeps is woken by the next datagram, and a busy one costs
 * senders no system call at all.
 */
static void self_signal(self_slot_t *slot)
{
    /* acq_rel: releases our enqueue to the receiver's exchange in
     * self_quiesce, which reads this value. */
    if (!atomic_exchange_explicit(&slot->signaled, true, memory_order_acq_rel)) {
        uint64_t one = 1;
        /* Only fails at a counter of 2^64 - 2, which never happens. */
        (void)!write(slot->efd, &one, sizeof(one));
    }
}

/*
 * Called by the receiver after it found the queue empty: resets the
 * eventfd so that epoll does not spin, then looks at the queue again.
 * Order matters: read, then clear the flag (acquiring every sender that
 * saw it set and so did not write), then re-check, so that a datagram
 * enqueued meanwhile either wrote the eventfd after our read or is seen
 * by the re-check, which signals again.
 */
static void self_quiesce(self_slot_t *slot)
{
    uint64_t value;

    if (!atomic_load_explicit(&slot->signaled, memory_order_relaxed))
        return; /* a stale false only delays the reset to the next poll */
    (void)!read(slot->efd, &value, sizeof(value));
    (void)atomic_exchange_explicit(&slot->signaled, false, memory_order_acq_rel);
    if (!cds_wfcq_empty(&slot->head, &slot->tail))
        self_signal(slot);
}

/* ------------------------------------------------------------------ */
/* Ops                                                                 */

static int self_open(const sx_tl_config_t *config, sx_tl_iface_t **iface_p)
{
    if (config == NULL || iface_p == NULL || config->self_domain == NULL) {
        sx_error("self", "open needs the engine's self domain (config->self_domain)");
        return SX_ERR_INVALID_PARAM;
    }
    self_domain_t *d = config->self_domain;
    if (config->shard >= d->nshards) {
        sx_error("self", "shard %u is outside the domain's %u shards", config->shard, d->nshards);
        return SX_ERR_INVALID_PARAM;
    }
    self_iface_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return SX_ERR_NO_MEMORY;
    self_slot_t *slot = &d->slots[config->shard];
    bool expected = false;
    /* acquire: pairs with the release in self_close, so the previous
     * consumer's dequeues happen before ours. */
    if (!atomic_compare_exchange_strong_explicit(&slot->open, &expected, true, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        sx_error("self", "shard %u already has an open self interface", config->shard);
        free(s);
        return SX_ERR_EXISTS;
    }
    atomic_store_explicit(&slot->limit, config->rcvbuf != 0 ? config->rcvbuf : SELF_LIMIT_DEFAULT,
                          memory_order_relaxed);
    s->base.ops = &sx_tl_self_ops;
    s->base.caps = (sx_tl_caps_t){
        .mtu = SELF_MTU,
        .inline_limit = SELF_MTU,
        .tx_credits = SELF_TX_CREDITS,
        .sync_send = 1,
    };
    s->domain = d;
    s->slot = slot;
    s->shard = config->shard;
    s->free_head = SELF_DEST_FREE_END;
    *iface_p = &s->base;
    return SX_OK;
}

static void self_free_held(self_iface_t *s)
{
    while (s->held != NULL) {
        self_msg_t *next = s->held->next_held;
        free(s->held);
        s->held = next;
    }
}

static void self_close(sx_tl_iface_t *iface)
{
    self_iface_t *s = (self_iface_t *)iface;

    if (s == NULL)
        return;
    self_free_held(s);
    self_slot_drain(s->slot);
    /* release: our dequeues happen before the next opener's. */
    atomic_store_explicit(&s->slot->open, false, memory_order_release);
    free(s->dests);
    free(s);
}

static void self_put_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t self_get_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int self_local_addr(sx_tl_iface_t *iface, void *buf, size_t *len_p)
{
    self_iface_t *s = (self_iface_t *)iface;

    if (buf == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (*len_p < SELF_ADDR_LEN)
        return SX_ERR_TRUNCATED;
    self_put_le(buf, s->domain->id, 8);
    self_put_le((uint8_t *)buf + 8, s->shard, 4);
    *len_p = SELF_ADDR_LEN;
    return SX_OK;
}

static int self_addr_insert(sx_tl_iface_t *iface, const void *addr, size_t len,
                            sx_tl_dest_t *dest_p)
{
    self_iface_t *s = (self_iface_t *)iface;
    uint32_t slot;

    if (addr == NULL || dest_p == NULL || len != SELF_ADDR_LEN)
        return SX_ERR_INVALID_PARAM;
    uint64_t id = self_get_le(addr, 8);
    uint64_t shard = self_get_le((const uint8_t *)addr + 8, 4);
    if (id != s->domain->id || shard >= s->domain->nshards)
        return SX_ERR_INVALID_PARAM;

    if (s->free_head != SELF_DEST_FREE_END) {
        slot = s->free_head;
        s->free_head = s->dests[slot].next_free;
    } else {
        if (s->ndests == s->cap) {
            uint32_t cap = s->cap != 0 ? s->cap * 2 : 16;
            if (cap <= s->cap || cap >= SX_TL_DEST_NONE)
                return SX_ERR_FULL;
            self_dest_t *d = realloc(s->dests, cap * sizeof(*d));
            if (d == NULL)
                return SX_ERR_NO_MEMORY;
            s->dests = d;
            s->cap = cap;
        }
        slot = s->ndests++;
    }
    s->dests[slot] =
        (self_dest_t){.shard = (uint32_t)shard, .next_free = SELF_DEST_FREE_END, .live = true};
    *dest_p = slot;
    return SX_OK;
}

static void self_addr_remove(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    self_iface_t *s = (self_iface_t *)iface;

    if (dest >= s->ndests || !s->dests[dest].live)
        return;
    s->dests[dest].live = false;
    s->dests[dest].next_free = s->free_head;
    s->free_head = dest;
}

static int self_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                          unsigned *posted_p)
{
    self_iface_t *s = (self_iface_t *)iface;
    unsigned i;
    int status = SX_OK;

    for (i = 0; i < count; i++) {
        const sx_tl_tx_t *t = &tx[i];
        size_t len = 0;

        if (t->dest >= s->ndests || !s->dests[t->dest].live || t->iovcnt > SX_TL_IOV_MAX) {
            status = SX_ERR_INVALID_PARAM;
            break;
        }
        for (unsigned j = 0; j < t->iovcnt && status == SX_OK; j++) {
            if (t->iov[j].iov_len > SELF_MTU - len)
                status = SX_ERR_INVALID_PARAM;
            else
                len += t->iov[j].iov_len;
        }
        if (status != SX_OK)
            break;

        self_slot_t *dst = &s->domain->slots[s->dests[t->dest].shard];
        if (!atomic_load_explicit(&dst->open, memory_order_relaxed)) {
            /* Nobody listens: like udp to a closed port, the datagram is
             * gone; the reliability layer will notice. */
            s->base.stats.tx_refused++;
            s->base.stats.tx_datagrams++;
            continue;
        }
        size_t charge = len + SELF_MSG_OVERHEAD;
        size_t queued = atomic_load_explicit(&dst->queued_bytes, memory_order_relaxed);
        if (queued + charge > atomic_load_explicit(&dst->limit, memory_order_relaxed)) {
            atomic_fetch_add_explicit(&dst->overflow_drops, 1, memory_order_relaxed);
            s->base.stats.tx_datagrams++;
            continue;
        }
        self_msg_t *msg = malloc(sizeof(*msg) + len);
        if (msg == NULL) {
            status = SX_ERR_NO_MEMORY;
            break;
        }
        msg->len = len;
        msg->charge = charge;
        msg->next_held = NULL;
        size_t off = 0;
        for (unsigned j = 0; j < t->iovcnt; j++) {
            if (t->iov[j].iov_len > 0)
                memcpy(msg->data + off, t->iov[j].iov_base, t->iov[j].iov_len);
            off += t->iov[j].iov_len;
        }
        atomic_fetch_add_explicit(&dst->queued_bytes, charge, memory_order_relaxed);
        cds_wfcq_node_init(&msg->node);
        /* Our writes to msg happen-before the receiver's reads; the queue's
         * own ordering is hidden from TSan inside liburcu. */
        SX_TSAN_RELEASE(msg);
        if (!cds_wfcq_enqueue(&dst->head, &dst->tail, &msg->node))
            self_signal(dst); /* the queue was empty: the receiver may sleep */
        s->base.stats.tx_datagrams++;
    }
    if (posted_p != NULL)
        *posted_p = i;
    return status;
}

/* self_poll's work when there may be some. */
static __attribute__((noinline)) int self_poll_queue(self_iface_t *s, sx_tl_event_t *events,
                                                     unsigned max)
{
    self_slot_t *slot = s->slot;
    unsigned n = 0;
    bool empty = false;

    /* The previous poll's data was valid until now. */
    self_free_held(s);
    while (n < max) {
        struct cds_wfcq_node *node = __cds_wfcq_dequeue_nonblocking(&slot->head, &slot->tail);
        if (node == NULL) {
            empty = true;
            break;
        }
        if (node == CDS_WFCQ_WOULDBLOCK)
            break; /* a sender is mid-enqueue; it or the next poll finishes */
        self_msg_t *msg = caa_container_of(node, self_msg_t, node);
        SX_TSAN_ACQUIRE(msg);
        atomic_fetch_sub_explicit(&slot->queued_bytes, msg->charge, memory_order_relaxed);
        msg->next_held = s->held;
        s->held = msg;
        events[n++] = (sx_tl_event_t){
            .type = SX_TL_EV_RECV,
            .status = SX_OK,
            .data = msg->data,
            .len = msg->len,
        };
    }
    if (empty)
        self_quiesce(slot);
    s->base.stats.rx_datagrams += n;
    s->base.stats.rx_kernel_drops =
        atomic_load_explicit(&slot->overflow_drops, memory_order_relaxed);
    return (int)n;
}

SX_HOT_PASS static int self_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max)
{
    self_iface_t *s = (self_iface_t *)iface;

    /* Nothing held and no signal: the queue is empty, or a sender is
     * between its enqueue and its self_signal, which the next poll sees.
     * A queue left non-empty keeps the flag set (self_quiesce runs only on
     * an empty one). Every progress pass polls this interface, nearly all
     * for nothing: that poll was ~75 instructions of a busy-polling
     * caller's empty pass, and sat between a datagram's delivery and the
     * caller's answer (callgrind of sx_bench latency); now a load and a
     * compare, the rest out of line. */
    if (s->held == NULL && !atomic_load_explicit(&s->slot->signaled, memory_order_acquire))
        return 0;
    return self_poll_queue(s, events, max);
}

static unsigned self_wait_fds(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS])
{
    fds[0] = ((self_iface_t *)iface)->slot->efd;
    return 1;
}

static bool self_dest_local(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    (void)iface;
    (void)dest;
    return true;
}

const sx_tl_ops_t sx_tl_self_ops = {
    .name = "self",
    .exclusivity = SX_TL_EXCL_SELF,
    /* Claims the shard's slot in config->self_domain (SX_ERR_EXISTS if
     * taken); allocates; any thread before the shard runs. */
    .open = self_open,
    /* Frees delivered and queued datagrams and gives the slot back; token
     * holder. */
    .close = self_close,
    /* Encodes (domain id, shard); any thread, never blocks. */
    .local_addr = self_local_addr,
    /* Accepts only addresses of this domain; token holder; may allocate. */
    .addr_insert = self_addr_insert,
    /* Frees the table slot for reuse; token holder. */
    .addr_remove = self_addr_remove,
    /* Copies each datagram into a new buffer that the destination owns and
     * enqueues it wait-free; the only path that crosses shards; token
     * holder of the sending shard; never blocks. */
    .post_send = self_post_send,
    /* Frees the last poll's buffers, then dequeues up to max; the data stays
     * valid until the next poll; token holder; never blocks. */
    .poll = self_poll,
    /* The slot's eventfd, readable while datagrams may be queued; any
     * thread. */
    .wait_fds = self_wait_fds,
    /* Always: the datagram is a heap copy inside this process. */
    .dest_local = self_dest_local,
};
