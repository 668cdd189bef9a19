/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels, the packets' memory: the pool of large packets, the spare
 * small one, and the arenas that full-size packets of small datagrams
 * are carved from (chan_tx.c builds the packets, chan_retransmit.c frees
 * them when they are acknowledged).
 */
#include <stdlib.h>
#include <string.h>

#include "common/copy.h"
#include "common/hot.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/mem.h"
#include "shard/shard.h"

/*
 * Data packets are malloc'd per packet. A burst of large ones (a 1 MiB
 * GET answer is 17 packets of 64 KiB) freed together on its ACK left
 * malloc a free heap top larger than its trim threshold, so glibc gave
 * the pages back to the kernel and the next burst faulted them in again,
 * zero-filled: perf put 86 % of an MPI 1 MiB ping-pong's page faults in
 * chan_build_packet's copy, and the transfer took 1.1-1.6 ms (0.35 ms
 * with the pool). So packets from SX_TXPKT_POOL_MIN bytes up are made as
 * large as the channel's datagram and kept for the next one, up to one
 * channel's SX_MAX_INFLIGHT bytes per shard: what a single channel may
 * have in flight anyway. On a 1500-byte path a bulk packet is 1,472
 * bytes, and 713 of them make a MiB: there a packet of half the channel's
 * datagram or more is pooled too (SX_TXPKT_POOL_SMALL up), which took the
 * page faults and malloc out of a 1 MiB ping-pong across two namespace
 * hosts (docs/tuning.md, "UDP GSO and GRO"). Token holder only, like
 * everything in a shard.
 */
#define SX_TXPKT_POOL_MIN   (16u * 1024u)
#define SX_TXPKT_POOL_SMALL 1024u

/*
 * A smaller packet is malloc'd, its size rounded up to SX_TXPKT_SPARE_ROUND,
 * and the shard keeps one of them, the last freed, for the next small
 * packet that fits (shard->pkt_spare). One is what a ping-pong needs: a
 * reply's packet is freed by the ACK the next message carries, just
 * before that message's answer is built. Without it each small message
 * made a free and a malloc: two pages of libc's code, two of its data and
 * the PLT's on every message (valgrind lackey, docs/tuning.md), each a
 * TLB miss where the kernel flushes the TLB at every system call
 * (common/hot.h, docs/tuning.md "Pages counted"). A free list of 128 was
 * tried once and made sx_bench mt's injection-only run slower at 8 and 16
 * threads on a 16-core machine (54cfa20 reverted it); one spare keeps
 * malloc's footprint for a stream of packets in flight and changes
 * nothing there but a branch.
 */
#define SX_TXPKT_SPARE_ROUND 64u

/* Whether a packet of @p need bytes on @p c comes from, and goes back to,
 * the pool. */
static bool chan_pkt_pooled(const sx_chan_t *c, size_t need)
{
    return need >= SX_TXPKT_POOL_MIN || (need >= SX_TXPKT_POOL_SMALL && 2 * need >= c->dgram_max);
}

/* Under ASan a pooled packet's bytes stay poisoned until it is reused, so
 * a stale pointer into one is still reported as it was when it was freed. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SX_POOL_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define SX_POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SX_POOL_POISON(p, n)   ((void)(p), (void)(n))
#define SX_POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/*
 * Arenas. On a path of datagrams under SX_CHAN_SMALL_DGRAM bytes a bulk
 * flush sends runs of full packets to one peer, which udp hands the kernel
 * as one GSO message (udp.c, udp_gso_merge), and the kernel's copy into
 * the socket pays per iovec as well as per byte: gso_bench between two
 * namespace hosts sent 44-datagram messages from one buffer at 3,700-6,250
 * MB/s and as 44 iovecs, one per datagram, at 2,400-3,100, adjacent or not
 * (docs/tuning.md, "UDP GSO and GRO"). So the pooled packets of such a
 * channel are carved one after another out of an arena of their shard,
 * each exactly as long as it needs: the datagrams a flush builds for one
 * peer lie end to end, and udp joins their iovecs. The records grow down
 * from the arena's other end. An arena lives until its last packet is
 * freed; then the shard's current one starts again from the beginning,
 * another is kept as a spare while the spares hold less than
 * SX_MAX_INFLIGHT (what the pool keeps too: a stream that had them in
 * flight needs them again, and a fresh arena is page faults) or is freed.
 * A packet that outlives the rest of its arena (a retransmission) keeps
 * the whole arena: at most SX_PKT_ARENA_BYTES for one datagram.
 *
 * Not for larger datagrams: a GET's answer of SX_ZC_REGION_MIN bytes or
 * more goes from the region itself, its header alone in the packet, so
 * there is nothing to join, and an arena holds few of them; across two
 * namespace hosts at MTU 9000 (8,972-byte datagrams) a 4 MiB MPI
 * ping-pong went from 3,550-4,340 MB/s to 2,690-2,980 when they came from
 * arenas. Token holder only.
 */
#define SX_PKT_ARENA_BYTES (256u * 1024u)

typedef struct sx_pkt_arena {
    struct sx_pkt_arena *next; /* among the shard's spares */
    unsigned live;             /* its packets not yet freed */
    uint32_t used;             /* data carved from the start of data[] */
    uint32_t top;              /* records from here to the end of data[] */
    _Alignas(16) uint8_t data[];
} sx_pkt_arena_t;

#define SX_PKT_ARENA_ROOM ((uint32_t)(SX_PKT_ARENA_BYTES - sizeof(sx_pkt_arena_t)) & ~15u)
/* A packet's record, rounded so that the next one below stays aligned. */
#define SX_PKT_REC ((sizeof(sx_txpkt_t) + 15u) & ~(size_t)15u)

/* Whether a packet of @p need bytes on @p c comes from an arena. */
static bool chan_pkt_in_arena(const sx_chan_t *c, size_t need)
{
    return sx_chan_small_dgrams(c) && chan_pkt_pooled(c, need);
}

/* The 8-byte granules wholly inside [p, p + n): ASan's poison never
 * reaches a neighbour's bytes in a granule the two share. */
static void chan_arena_poison(void *p, size_t n)
{
    uintptr_t a = ((uintptr_t)p + 7u) & ~(uintptr_t)7u, e = ((uintptr_t)p + n) & ~(uintptr_t)7u;
    if (e > a)
        SX_POOL_POISON((void *)a, e - a);
}

static sx_txpkt_t *chan_pkt_arena_alloc(sx_shard_t *s, size_t need)
{
    sx_pkt_arena_t *a = s->pkt_arena;

    if (a != NULL && a->used + need + SX_PKT_REC > a->top) {
        if (a->live == 0) {
            a->used = 0; /* all its packets freed: from the start again */
            a->top = SX_PKT_ARENA_ROOM;
        } else
            a = NULL; /* full: it goes when its last packet does */
    }
    if (a == NULL) {
        if ((a = s->pkt_arena_spare) != NULL) {
            s->pkt_arena_spare = a->next;
            s->pkt_arena_spares--;
        } else if ((a = malloc(SX_PKT_ARENA_BYTES)) == NULL)
            return NULL;
        a->next = NULL;
        a->live = 0;
        a->used = 0;
        a->top = SX_PKT_ARENA_ROOM;
        s->pkt_arena = a;
    }
    a->top -= (uint32_t)SX_PKT_REC;
    sx_txpkt_t *pkt = (sx_txpkt_t *)(void *)(a->data + a->top);
    SX_POOL_UNPOISON(pkt, sizeof(*pkt));
    sx_zero_small(pkt, sizeof(*pkt));
    pkt->data = a->data + a->used;
    SX_POOL_UNPOISON(pkt->data, need);
    a->used += (uint32_t)need;
    a->live++;
    pkt->arena = a;
    pkt->cap = (uint32_t)need;
    return pkt;
}

/* Gives an arena's memory back, whatever ASan was told of its parts. */
static void chan_arena_release(sx_pkt_arena_t *a)
{
    SX_POOL_UNPOISON(a, SX_PKT_ARENA_BYTES);
    free(a);
}

static void chan_pkt_arena_free(sx_shard_t *s, sx_txpkt_t *pkt)
{
    sx_pkt_arena_t *a = pkt->arena;

    chan_arena_poison(pkt->data, pkt->cap);
    SX_POOL_POISON(pkt, sizeof(*pkt));
    if (--a->live > 0 || a == s->pkt_arena)
        return; /* the current one starts again when it next fills */
    if ((size_t)s->pkt_arena_spares * SX_PKT_ARENA_BYTES < s->env->conf.max_inflight) {
        a->next = s->pkt_arena_spare;
        s->pkt_arena_spare = a;
        s->pkt_arena_spares++;
        return;
    }
    chan_arena_release(a);
}

void sx_chan_pkt_arenas_free(sx_shard_t *s)
{
    while (s->pkt_arena_spare != NULL) {
        sx_pkt_arena_t *a = s->pkt_arena_spare;
        s->pkt_arena_spare = a->next;
        chan_arena_release(a);
    }
    s->pkt_arena_spares = 0;
    if (s->pkt_arena != NULL)
        chan_arena_release(s->pkt_arena);
    s->pkt_arena = NULL;
}

SX_HOT sx_txpkt_t *sx_chan_pkt_alloc_locked(sx_chan_t *c, size_t need)
{
    sx_shard_t *s = c->shard;
    size_t cap = need;
    sx_txpkt_t *pkt = NULL;

    if (chan_pkt_in_arena(c, need))
        return chan_pkt_arena_alloc(s, need);
    if (chan_pkt_pooled(c, need)) {
        if (c->dgram_max > cap)
            cap = c->dgram_max;
        if (s->pkt_pool != NULL && s->pkt_pool->cap >= need) {
            pkt = s->pkt_pool;
            s->pkt_pool = pkt->rtx_next;
            s->pkt_pool_bytes -= pkt->cap;
            cap = pkt->cap;
            SX_POOL_UNPOISON(pkt->data, cap);
        }
    } else {
        if (s->pkt_spare != NULL && s->pkt_spare->cap >= need) {
            pkt = s->pkt_spare;
            s->pkt_spare = NULL;
            cap = pkt->cap;
            SX_POOL_UNPOISON(pkt->data, cap);
        } else {
            size_t round = (need + SX_TXPKT_SPARE_ROUND - 1) & ~(size_t)(SX_TXPKT_SPARE_ROUND - 1);
            if (!chan_pkt_pooled(c, round))
                cap = round; /* else it would go to the pool when freed */
        }
    }
    if (pkt == NULL && (pkt = malloc(sizeof(*pkt) + cap)) == NULL)
        return NULL;
    sx_zero_small(pkt, sizeof(*pkt));
    pkt->data = (uint8_t *)(pkt + 1);
    pkt->cap = (uint32_t)cap;
    return pkt;
}

SX_HOT void sx_chan_pkt_free_locked(sx_chan_t *c, sx_txpkt_t *pkt)
{
    sx_shard_t *s = c->shard;

    if (pkt->pin != NULL) {
        sx_mem_unpin(pkt->pin);
        c->pinned_out--;
    }
    if (pkt->arena != NULL) {
        chan_pkt_arena_free(s, pkt);
        return;
    }

    if (chan_pkt_pooled(c, pkt->cap) && s->pkt_pool_bytes + pkt->cap <= s->env->conf.max_inflight) {
        pkt->rtx_next = s->pkt_pool;
        s->pkt_pool = pkt;
        s->pkt_pool_bytes += pkt->cap;
        SX_POOL_POISON(pkt->data, pkt->cap);
        return;
    }
    if (s->pkt_spare == NULL && !chan_pkt_pooled(c, pkt->cap)) {
        s->pkt_spare = pkt;
        SX_POOL_POISON(pkt->data, pkt->cap);
        return;
    }
    free(pkt);
}
