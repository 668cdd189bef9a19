/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * verbs: the card address of a UD queue pair, the address-handle cache and
 * the sizing of queues (verbs_addr.h). Nothing here calls libibverbs, so
 * this file is built and tested whether or not libibverbs is installed.
 *
 * Address (the business-card bytes), SX_VERBS_ADDR_LEN = 30 bytes, fixed
 * layout, multi-byte integers little-endian:
 *
 *   offset  size  field
 *   0       1     version: 1
 *   1       1     flags: bit 0 SX_VERBS_ADDR_GLOBAL (send with a GRH);
 *                 the other bits are reserved and must be 0
 *   2       1     port number on the peer's device (informational: the
 *                 address handle names our own port)
 *   3       1     service level to send with (0..15)
 *   4       2     LID; 0 only with the global flag (RoCE has no LIDs)
 *   6       4     queue pair number: 24 bits, the top byte 0; never 0 or 1
 *                 (the subnet management and general services QPs)
 *   10      4     Q_Key the queue pair accepts
 *   14      16    GID, as the device reports it (network order; on RoCE
 *                 the IPv4-mapped or IPv6 address of the port)
 *
 * A new layout gets a new version byte; decode refuses versions it does
 * not know, so peers of different builds fail at sx_peer_add with a clear
 * answer instead of sending to a misread address.
 */
#include "transports/verbs_addr.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/log.h"
#include "transports/transport.h"

#define VA_VERSION     1
#define VA_FLAGS_KNOWN SX_VERBS_ADDR_GLOBAL
#define VA_QPN_MAX     0xffffffu
#define VA_SL_MAX      15

_Static_assert(SX_VERBS_ADDR_LEN <= SX_TL_ADDR_MAX, "a verbs address fits in a business card");

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The checks decode applies, shared with encode so that no card carries
 * an address its peers would refuse. */
static bool va_valid(const sx_verbs_addr_t *a)
{
    if ((a->flags & ~VA_FLAGS_KNOWN) != 0)
        return false;
    if (a->qpn > VA_QPN_MAX || a->qpn <= 1)
        return false;
    if (a->sl > VA_SL_MAX)
        return false;
    /* Without a GRH the LID is the whole route; 0 is no LID at all (a
     * port the subnet manager has not configured). */
    if (a->lid == 0 && (a->flags & SX_VERBS_ADDR_GLOBAL) == 0)
        return false;
    return true;
}

int sx_verbs_addr_encode(const sx_verbs_addr_t *a, void *buf, size_t cap, size_t *len_p)
{
    uint8_t *out = buf;

    if (a == NULL || buf == NULL || len_p == NULL || cap < SX_VERBS_ADDR_LEN || !va_valid(a))
        return SX_ERR_INVALID_PARAM;
    out[0] = VA_VERSION;
    out[1] = a->flags;
    out[2] = a->port;
    out[3] = a->sl;
    put16(out + 4, a->lid);
    put32(out + 6, a->qpn);
    put32(out + 10, a->qkey);
    memcpy(out + 14, a->gid, sizeof(a->gid));
    *len_p = SX_VERBS_ADDR_LEN;
    return SX_OK;
}

int sx_verbs_addr_decode(const void *buf, size_t len, sx_verbs_addr_t *a)
{
    const uint8_t *in = buf;
    sx_verbs_addr_t d;

    if (buf == NULL || a == NULL || len != SX_VERBS_ADDR_LEN || in[0] != VA_VERSION)
        return SX_ERR_INVALID_PARAM;
    memset(&d, 0, sizeof(d));
    d.flags = in[1];
    d.port = in[2];
    d.sl = in[3];
    d.lid = get16(in + 4);
    d.qpn = get32(in + 6);
    d.qkey = get32(in + 10);
    memcpy(d.gid, in + 14, sizeof(d.gid));
    if (!va_valid(&d))
        return SX_ERR_INVALID_PARAM;
    *a = d;
    return SX_OK;
}

void sx_verbs_addr_str(const void *buf, size_t len, char *out, size_t cap)
{
    sx_verbs_addr_t a;
    char gid[INET6_ADDRSTRLEN];

    if (out == NULL || cap == 0)
        return;
    if (sx_verbs_addr_decode(buf, len, &a) != SX_OK) {
        snprintf(out, cap, "invalid verbs address");
        return;
    }
    /* A GID has the shape of an IPv6 address; on RoCE it is one. */
    if (inet_ntop(AF_INET6, a.gid, gid, sizeof(gid)) == NULL)
        snprintf(gid, sizeof(gid), "?");
    snprintf(out, cap, "lid 0x%x qpn 0x%x gid %s port %u sl %u qkey 0x%x%s", (unsigned)a.lid,
             (unsigned)a.qpn, gid, (unsigned)a.port, (unsigned)a.sl, (unsigned)a.qkey,
             (a.flags & SX_VERBS_ADDR_GLOBAL) ? " grh" : "");
}

/* ------------------------------------------------------------------ */
/* Address-handle cache                                                 */

/*
 * Entries live in one array and keep their index for life, which is the
 * reference a destination holds. A key finds its entry through a chained
 * hash of indices; the unreferenced entries are also on a doubly linked
 * list in the order they were released, whose head is the one evicted.
 * Every operation is O(1) but growth, which doubles the array (up to
 * max_entries) and rehashes.
 */
#define AH_NONE      UINT32_MAX
#define AH_FIRST     16
#define AH_MAX_LIMIT (1u << 20)

typedef struct ah_entry {
    sx_verbs_ah_key_t key;
    void *handle;          /* NULL: a free entry */
    uint32_t refs;         /* destinations that use it */
    uint32_t hnext;        /* next in its hash chain, or in the free list */
    uint32_t lprev, lnext; /* the list of unreferenced entries, while refs == 0 */
} ah_entry_t;

struct sx_verbs_ah_cache {
    sx_verbs_ah_ops_t ops;
    uint32_t max;  /* entries at most */
    ah_entry_t *e; /* nalloc entries; [0, used) have been handed out once */
    uint32_t nalloc, used;
    uint32_t free_head; /* entries given back by eviction */
    uint32_t *buckets;  /* nbuckets chain heads; a power of two */
    uint32_t nbuckets;
    uint32_t lru_head; /* the unreferenced entry released longest ago */
    uint32_t lru_tail;
    sx_verbs_ah_stats_t st;
};

static bool ah_key_equal(const sx_verbs_ah_key_t *a, const sx_verbs_ah_key_t *b)
{
    return a->lid == b->lid && a->sl == b->sl && a->port == b->port && a->flags == b->flags &&
           memcmp(a->gid, b->gid, sizeof(a->gid)) == 0;
}

/* FNV-1a over the fields (not the struct, whose padding is undefined). */
static uint32_t ah_hash(const sx_verbs_ah_key_t *k)
{
    uint8_t b[sizeof(k->gid) + 5];
    uint32_t h = 2166136261u;

    memcpy(b, k->gid, sizeof(k->gid));
    put16(b + sizeof(k->gid), k->lid);
    b[sizeof(k->gid) + 2] = k->sl;
    b[sizeof(k->gid) + 3] = k->port;
    b[sizeof(k->gid) + 4] = k->flags;
    for (size_t i = 0; i < sizeof(b); i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

static void ah_lru_unlink(sx_verbs_ah_cache_t *c, uint32_t i)
{
    ah_entry_t *x = &c->e[i];

    if (x->lprev != AH_NONE)
        c->e[x->lprev].lnext = x->lnext;
    else
        c->lru_head = x->lnext;
    if (x->lnext != AH_NONE)
        c->e[x->lnext].lprev = x->lprev;
    else
        c->lru_tail = x->lprev;
    x->lprev = x->lnext = AH_NONE;
}

static void ah_lru_append(sx_verbs_ah_cache_t *c, uint32_t i)
{
    ah_entry_t *x = &c->e[i];

    x->lnext = AH_NONE;
    x->lprev = c->lru_tail;
    if (c->lru_tail != AH_NONE)
        c->e[c->lru_tail].lnext = i;
    else
        c->lru_head = i;
    c->lru_tail = i;
}

static void ah_hash_link(sx_verbs_ah_cache_t *c, uint32_t i)
{
    uint32_t b = ah_hash(&c->e[i].key) & (c->nbuckets - 1);

    c->e[i].hnext = c->buckets[b];
    c->buckets[b] = i;
}

static void ah_hash_unlink(sx_verbs_ah_cache_t *c, uint32_t i)
{
    uint32_t *p = &c->buckets[ah_hash(&c->e[i].key) & (c->nbuckets - 1)];

    while (*p != AH_NONE && *p != i)
        p = &c->e[*p].hnext;
    if (*p == i)
        *p = c->e[i].hnext;
}

/* Makes room for one more entry by growing the array; SX_OK when an entry
 * is free afterwards (or already was). */
static int ah_grow(sx_verbs_ah_cache_t *c)
{
    if (c->free_head != AH_NONE || c->used < c->nalloc)
        return SX_OK;
    if (c->nalloc >= c->max)
        return SX_ERR_FULL;
    uint32_t n = c->nalloc == 0 ? AH_FIRST : c->nalloc * 2;
    if (n > c->max)
        n = c->max;
    ah_entry_t *e = realloc(c->e, (size_t)n * sizeof(*e));
    if (e == NULL)
        return SX_ERR_NO_MEMORY;
    c->e = e;
    c->nalloc = n;
    /* Twice as many chains as entries keeps them short. */
    uint32_t nb = 1;
    while (nb < 2 * n)
        nb *= 2;
    if (nb == c->nbuckets)
        return SX_OK;
    uint32_t *b = malloc((size_t)nb * sizeof(*b));
    if (b == NULL)
        return SX_OK; /* the old chains still work, only longer */
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = nb;
    for (uint32_t i = 0; i < nb; i++)
        b[i] = AH_NONE;
    for (uint32_t i = 0; i < c->used; i++) {
        if (c->e[i].handle != NULL)
            ah_hash_link(c, i);
    }
    return SX_OK;
}

int sx_verbs_ah_cache_create(unsigned max_entries, const sx_verbs_ah_ops_t *ops,
                             sx_verbs_ah_cache_t **cache_p)
{
    if (ops == NULL || ops->create == NULL || ops->destroy == NULL || cache_p == NULL ||
        max_entries == 0 || max_entries > AH_MAX_LIMIT)
        return SX_ERR_INVALID_PARAM;
    sx_verbs_ah_cache_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return SX_ERR_NO_MEMORY;
    c->ops = *ops;
    c->max = max_entries;
    c->free_head = c->lru_head = c->lru_tail = AH_NONE;
    c->nbuckets = 1;
    c->buckets = malloc(sizeof(*c->buckets));
    if (c->buckets == NULL) {
        free(c);
        return SX_ERR_NO_MEMORY;
    }
    c->buckets[0] = AH_NONE;
    *cache_p = c;
    return SX_OK;
}

void sx_verbs_ah_cache_destroy(sx_verbs_ah_cache_t *c)
{
    unsigned referenced = 0;

    if (c == NULL)
        return;
    for (uint32_t i = 0; i < c->used; i++) {
        if (c->e[i].handle == NULL)
            continue;
        referenced += c->e[i].refs > 0;
        c->ops.destroy(c->ops.arg, c->e[i].handle);
    }
    /* Normal when an interface closes with peers still inserted. */
    if (referenced > 0)
        sx_debug("verbs", "destroyed %u address handles still in use by destinations", referenced);
    free(c->e);
    free(c->buckets);
    free(c);
}

int sx_verbs_ah_acquire(sx_verbs_ah_cache_t *c, const sx_verbs_ah_key_t *key, uint32_t *ref_p,
                        void **handle_p)
{
    if (c == NULL || key == NULL || ref_p == NULL || handle_p == NULL)
        return SX_ERR_INVALID_PARAM;
    for (uint32_t i = c->buckets[ah_hash(key) & (c->nbuckets - 1)]; i != AH_NONE;
         i = c->e[i].hnext) {
        ah_entry_t *x = &c->e[i];
        if (!ah_key_equal(&x->key, key))
            continue;
        if (x->refs == 0) {
            ah_lru_unlink(c, i);
            c->st.referenced++;
        }
        x->refs++;
        c->st.hits++;
        *ref_p = i;
        *handle_p = x->handle;
        return SX_OK;
    }

    /* A miss: room first, so that a refusal changes nothing. */
    bool evict = c->st.entries >= c->max;
    if (evict && c->lru_head == AH_NONE)
        return SX_ERR_FULL;
    if (!evict) {
        int rc = ah_grow(c);
        if (rc != SX_OK)
            return rc;
    }
    void *handle = NULL;
    int rc = c->ops.create(c->ops.arg, key, &handle);
    if (rc != SX_OK)
        return rc;
    if (handle == NULL) {
        sx_error("verbs", "the address handle callback reported success without a handle");
        return SX_ERR_INTERNAL;
    }
    if (evict) {
        uint32_t v = c->lru_head;
        ah_lru_unlink(c, v);
        ah_hash_unlink(c, v);
        c->ops.destroy(c->ops.arg, c->e[v].handle);
        c->e[v].handle = NULL;
        c->e[v].hnext = c->free_head;
        c->free_head = v;
        c->st.entries--;
        c->st.evictions++;
    }
    uint32_t i;
    if (c->free_head != AH_NONE) {
        i = c->free_head;
        c->free_head = c->e[i].hnext;
    } else {
        i = c->used++;
    }
    c->e[i] =
        (ah_entry_t){.key = *key, .handle = handle, .refs = 1, .lprev = AH_NONE, .lnext = AH_NONE};
    ah_hash_link(c, i);
    c->st.entries++;
    c->st.referenced++;
    c->st.misses++;
    *ref_p = i;
    *handle_p = handle;
    return SX_OK;
}

void sx_verbs_ah_release(sx_verbs_ah_cache_t *c, uint32_t ref)
{
    if (c == NULL)
        return;
    if (ref >= c->used || c->e[ref].handle == NULL || c->e[ref].refs == 0) {
        sx_debug("verbs", "address handle reference %u holds no reference", (unsigned)ref);
        return;
    }
    if (--c->e[ref].refs == 0) {
        ah_lru_append(c, ref);
        c->st.referenced--;
    }
}

void sx_verbs_ah_cache_stats(const sx_verbs_ah_cache_t *c, sx_verbs_ah_stats_t *stats_p)
{
    if (c != NULL && stats_p != NULL)
        *stats_p = c->st;
}

/* ------------------------------------------------------------------ */
/* Queue sizing                                                         */

size_t sx_verbs_mtu_bytes(unsigned mtu)
{
    switch (mtu) {
    case 1: /* IBV_MTU_256 ... */
    case 2:
    case 3:
    case 4:
    case 5: /* ... IBV_MTU_4096 */
        return (size_t)128 << mtu;
    case 256:
    case 512:
    case 1024:
    case 2048:
    case 4096:
        return mtu;
    default:
        return 0;
    }
}

static unsigned clamp_u(size_t v, unsigned lo, unsigned hi)
{
    return v < lo ? lo : v > hi ? hi : (unsigned)v;
}

int sx_verbs_size_queues(const sx_verbs_dev_limits_t *dev, const sx_verbs_sizing_req_t *req,
                         sx_verbs_sizing_t *out, char *why, size_t cap)
{
    char scratch[8];

    if (why == NULL || cap == 0) {
        why = scratch;
        cap = sizeof(scratch);
    }
    why[0] = '\0';
    if (dev == NULL || out == NULL) {
        snprintf(why, cap, "no device limits to size queues from");
        return SX_ERR_INVALID_PARAM;
    }
    size_t mtu = sx_verbs_mtu_bytes(dev->active_mtu);
    if (mtu == 0) {
        snprintf(why, cap,
                 "the port reports MTU %u, which is neither an IBV_MTU_* value (1..5) nor "
                 "256..4096 bytes",
                 dev->active_mtu);
        return SX_ERR_NO_DEVICE;
    }
    if (dev->max_sge < 1) {
        snprintf(why, cap, "the device allows no scatter/gather entry per work request");
        return SX_ERR_NO_DEVICE;
    }
    /* Each queue needs as many completion entries as work requests: a
     * completion queue that overflows is a fatal error of the device. */
    uint32_t room = dev->max_qp_wr < dev->max_cqe ? dev->max_qp_wr : dev->max_cqe;
    if (room < SX_VERBS_RQ_MIN) {
        snprintf(why, cap,
                 "the device holds %u work requests per queue and %u completions per queue; "
                 "verbs needs at least %u receives and %u sends",
                 dev->max_qp_wr, dev->max_cqe, SX_VERBS_RQ_MIN, SX_VERBS_SQ_MIN);
        return SX_ERR_NO_DEVICE;
    }
    size_t rx_bytes = req != NULL && req->rx_bytes != 0 ? req->rx_bytes : SX_VERBS_RX_BYTES;
    size_t tx_bytes = req != NULL && req->tx_bytes != 0 ? req->tx_bytes : SX_VERBS_TX_BYTES;
    sx_verbs_sizing_t s = {.mtu = mtu, .rx_buf_len = SX_VERBS_GRH_LEN + mtu};

    /* The budget decides within the bounds; the minimum wins over a small
     * budget (as the ofi transport's OFI_RX_MIN does), the device over
     * everything. */
    s.rq_depth = clamp_u(rx_bytes / s.rx_buf_len, SX_VERBS_RQ_MIN, SX_VERBS_RQ_MAX);
    if (s.rq_depth > room)
        s.rq_depth = room;
    s.sq_depth = clamp_u(tx_bytes / mtu, SX_VERBS_SQ_MIN, SX_VERBS_SQ_MAX);
    if (s.sq_depth > room)
        s.sq_depth = room;
    s.recv_cqe = s.rq_depth;
    s.send_cqe = s.sq_depth;
    s.rx_batch = s.rq_depth < SX_VERBS_RX_BATCH ? s.rq_depth : SX_VERBS_RX_BATCH;
    s.send_sge = dev->max_sge < SX_TL_IOV_MAX ? dev->max_sge : SX_TL_IOV_MAX;
    /* Inline sends skip the bounce copy's DMA read but make every send
     * work request larger, so this asks for small datagrams only. */
    size_t inl = dev->max_inline_data != 0 && dev->max_inline_data < SX_VERBS_INLINE_WANT
                     ? dev->max_inline_data
                     : SX_VERBS_INLINE_WANT;
    s.max_inline = (unsigned)(inl < mtu ? inl : mtu);
    *out = s;
    return SX_OK;
}
