/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * verbs: the device-independent parts of the verbs transport (issue 7),
 * kept apart from verbs.c so that they are unit-tested on machines without
 * an RDMA device: the card address of a UD queue pair, the address-handle
 * cache, and the sizing of queues from what a device reports.
 *
 * Nothing here calls libibverbs; the AH cache creates and destroys handles
 * through callbacks, which verbs.c points at ibv_create_ah/ibv_destroy_ah
 * and the tests at counters.
 *
 * Synchronization: an AH cache belongs to one interface and is used by its
 * shard's token holder only; the address functions are pure.
 */
#ifndef SX_TRANSPORTS_VERBS_ADDR_H
#define SX_TRANSPORTS_VERBS_ADDR_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of an encoded address in a business card (see verbs_addr.c for
 * the layout). */
#define SX_VERBS_ADDR_LEN 30

/* flags */
#define SX_VERBS_ADDR_GLOBAL 0x01u /* a GRH is needed: RoCE, or another IB subnet */

/** One UD queue pair as a peer reaches it. */
typedef struct sx_verbs_addr {
    uint8_t gid[16]; /* port GID (RoCE: the IP address as a GID) */
    uint16_t lid;    /* port LID; 0 on RoCE */
    uint32_t qpn;    /* queue pair number, 24 bits */
    uint32_t qkey;   /* Q_Key the queue pair accepts */
    uint8_t port;    /* port number on its device, 1.. */
    uint8_t sl;      /* service level to send with */
    uint8_t flags;   /* SX_VERBS_ADDR_* */
} sx_verbs_addr_t;

/** Encodes @p a into @p buf (at least SX_VERBS_ADDR_LEN bytes of @p cap);
 *  sets *len_p. SX_ERR_INVALID_PARAM for a QPN over 24 bits or a short
 *  buffer, and for anything sx_verbs_addr_decode would refuse (QPN 0 or 1,
 *  reserved flags, a LID of 0 without the global flag), so that no card
 *  carries an address its peers cannot read. */
int sx_verbs_addr_encode(const sx_verbs_addr_t *a, void *buf, size_t cap, size_t *len_p);

/** Decodes card bytes, untrusted: SX_ERR_INVALID_PARAM for a wrong length,
 *  an unknown version, reserved bits set, QPN 0 or 1 (the special QPs), a
 *  QPN over 24 bits, an SL over 15, or a LID of 0 without the global flag.
 *  Writes *a only on SX_OK. */
int sx_verbs_addr_decode(const void *buf, size_t len, sx_verbs_addr_t *a);

/** Readable form, "lid 0x12 qpn 0x1234 gid fe80::...": at most @p cap bytes
 *  with the NUL; a malformed address prints as "invalid verbs address". */
void sx_verbs_addr_str(const void *buf, size_t len, char *out, size_t cap);

/* ------------------------------------------------------------------ */
/* Address-handle cache                                                 */

/*
 * A UD send names its destination by an address handle (ibv_ah), which a
 * device builds from the path to a port: LID and SL, and for a GRH the
 * GID. Every queue pair behind one remote port shares that path, so the
 * destinations of all the shards of a peer (and of every peer on the same
 * node) share one handle. The cache keeps one handle per key, counts the
 * destinations that use it, keeps up to max_entries handles, and evicts
 * the least recently released unreferenced one to make room for a new key.
 */

/** What an address handle depends on. */
typedef struct sx_verbs_ah_key {
    uint8_t gid[16]; /* destination GID; all zero when no GRH is sent */
    uint16_t lid;    /* destination LID */
    uint8_t sl;      /* service level */
    uint8_t port;    /* the local port the handle sends through */
    uint8_t flags;   /* SX_VERBS_ADDR_GLOBAL: a GRH */
} sx_verbs_ah_key_t;

/** How the cache makes and frees handles (verbs.c: ibv_create_ah and
 *  ibv_destroy_ah; tests: counters). Called by the cache's user only,
 *  from the calls below. */
typedef struct sx_verbs_ah_ops {
    /* Creates the handle for @p key: SX_OK with *handle_p set (never
     * NULL), or the status to report. */
    int (*create)(void *arg, const sx_verbs_ah_key_t *key, void **handle_p);
    /* Destroys a handle create made; never fails. */
    void (*destroy)(void *arg, void *handle);
    void *arg;
} sx_verbs_ah_ops_t;

typedef struct sx_verbs_ah_cache sx_verbs_ah_cache_t;

/** What the cache did and holds. */
typedef struct sx_verbs_ah_stats {
    uint64_t hits;       /* acquires answered from the cache */
    uint64_t misses;     /* acquires that created a handle */
    uint64_t evictions;  /* unreferenced handles destroyed to make room */
    unsigned entries;    /* handles held now */
    unsigned referenced; /* of them, those some destination uses */
} sx_verbs_ah_stats_t;

/** Creates a cache of at most @p max_entries (1 to 1 << 20) handles.
 *  SX_ERR_INVALID_PARAM for a bad size or missing callbacks. */
int sx_verbs_ah_cache_create(unsigned max_entries, const sx_verbs_ah_ops_t *ops,
                             sx_verbs_ah_cache_t **cache_p);

/** Destroys every handle, referenced or not (the interface is closing),
 *  and the cache. NULL is ignored. */
void sx_verbs_ah_cache_destroy(sx_verbs_ah_cache_t *cache);

/**
 * The handle for @p key, with one more reference: from the cache, or
 * created (evicting the least recently released unreferenced handle when
 * the cache is full). Sets *ref_p, which sx_verbs_ah_release takes back,
 * and *handle_p. SX_ERR_FULL when every handle held is referenced, or the
 * create callback's status; the cache is unchanged then.
 */
int sx_verbs_ah_acquire(sx_verbs_ah_cache_t *cache, const sx_verbs_ah_key_t *key, uint32_t *ref_p,
                        void **handle_p);

/** Drops one reference taken by sx_verbs_ah_acquire. The handle stays
 *  cached, unreferenced, until evicted or the cache is destroyed. A ref
 *  that holds no reference is ignored (with a debug line). */
void sx_verbs_ah_release(sx_verbs_ah_cache_t *cache, uint32_t ref);

/** Copies the counters. */
void sx_verbs_ah_cache_stats(const sx_verbs_ah_cache_t *cache, sx_verbs_ah_stats_t *stats_p);

/* ------------------------------------------------------------------ */
/* Queue sizing                                                         */

/* Bytes the device writes in front of every UD receive: the Global Route
 * Header, or as many undefined bytes when the packet carried none
 * (InfiniBand Architecture Specification, vol. 1, 11.4.1.1). */
#define SX_VERBS_GRH_LEN  40
#define SX_VERBS_RX_BATCH 32 /* receive work requests per ibv_post_recv chain */
#define SX_VERBS_SQ_MIN   16 /* send queue depth below which a device is refused */
#define SX_VERBS_SQ_MAX   1024
#define SX_VERBS_RQ_MIN                                        \
    64 /* receive queue depth below which a device is refused: \
        * two poll batches */
#define SX_VERBS_RQ_MAX      16384
#define SX_VERBS_INLINE_WANT 256        /* inline bytes asked for when the device does not say */
#define SX_VERBS_RX_BYTES    (4u << 20) /* receive memory when the config names none */
#define SX_VERBS_TX_BYTES    (4u << 20) /* send bounce memory when the config names none */

/** What a device and its port report (ibv_query_device, ibv_query_port). */
typedef struct sx_verbs_dev_limits {
    uint32_t max_qp_wr;       /* work requests per queue */
    uint32_t max_cqe;         /* entries per completion queue */
    uint32_t max_sge;         /* scatter/gather entries per work request */
    uint32_t max_inline_data; /* inline bytes per send; 0: not reported */
    unsigned active_mtu;      /* the port's MTU: an enum ibv_mtu value (1..5) or bytes */
} sx_verbs_dev_limits_t;

/** What the interface asks for. */
typedef struct sx_verbs_sizing_req {
    size_t rx_bytes; /* receive buffer memory; 0: SX_VERBS_RX_BYTES */
    size_t tx_bytes; /* send bounce buffer memory; 0: SX_VERBS_TX_BYTES */
} sx_verbs_sizing_req_t;

/** The queues an interface creates. */
typedef struct sx_verbs_sizing {
    unsigned sq_depth;   /* send work requests = send slots = bounce buffers */
    unsigned rq_depth;   /* receive work requests = receive buffers */
    unsigned rx_batch;   /* receives per ibv_post_recv chain */
    unsigned send_cqe;   /* entries of the send completion queue */
    unsigned recv_cqe;   /* entries of the receive completion queue */
    unsigned send_sge;   /* scatter/gather entries per send (at most SX_TL_IOV_MAX) */
    unsigned max_inline; /* inline bytes to ask of the queue pair */
    size_t mtu;          /* largest datagram payload: the port MTU */
    size_t rx_buf_len;   /* bytes of one receive buffer: GRH room and the mtu */
} sx_verbs_sizing_t;

/** The port MTU in bytes for an enum ibv_mtu value or a byte count; 0 for
 *  anything else. */
size_t sx_verbs_mtu_bytes(unsigned mtu);

/**
 * Sizes the queues of an interface from what the device reports: each
 * queue as deep as its memory budget allows, within the device's limits
 * and this transport's bounds, and each completion queue as deep as its
 * queue, so that it can never overflow. SX_OK, or SX_ERR_NO_DEVICE with
 * the reason in @p why (at most @p cap bytes) when the device cannot hold
 * the smallest queues (SX_VERBS_SQ_MIN, SX_VERBS_RQ_MIN) or reports an
 * unknown MTU; SX_ERR_INVALID_PARAM for NULL arguments. Pure.
 */
int sx_verbs_size_queues(const sx_verbs_dev_limits_t *dev, const sx_verbs_sizing_req_t *req,
                         sx_verbs_sizing_t *out, char *why, size_t cap);

#endif /* SX_TRANSPORTS_VERBS_ADDR_H */
