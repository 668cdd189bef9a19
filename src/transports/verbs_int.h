/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private to the verbs transport: what verbs.c (the interface: open, close,
 * card address, destinations), verbs_dev.c (the devices, the query and
 * devices slots) and verbs_io.c (sends, receives, completions, arm) share.
 * Nothing else includes it; the rest of the library sees verbs only
 * through sx_tl_verbs_ops (transport.h). The device-independent parts are
 * in verbs_addr.h.
 */
#ifndef SX_TRANSPORTS_VERBS_INT_H
#define SX_TRANSPORTS_VERBS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "transports/transport.h"
#include "transports/verbs_addr.h"

#define VERBS_CQ_BATCH 32 /* completions per ibv_poll_cq */
#define VERBS_DEVS_MAX 32

typedef struct verbs_dev_info {
    char name[SX_TL_DEVICE_MAX];
    bool listed;        /* SX_NET_DEVICES allows it */
    uint8_t port;       /* its first ACTIVE port; 0: none */
    uint8_t link_layer; /* IBV_LINK_LAYER_* of that port */
    size_t mtu;         /* that port's active MTU in bytes */
    char why[80];       /* when port == 0: the ports' states, or why it could not open */
} verbs_dev_info_t;

typedef struct verbs_dest {
    struct ibv_ah *ah;
    uint32_t ah_ref; /* the AH cache's reference */
    uint32_t qpn, qkey;
    uint32_t next_free; /* link in the free list while !live */
    bool live;
} verbs_dest_t;

typedef struct verbs_iface {
    sx_tl_iface_t base;
    char dev_name[SX_TL_DEVICE_MAX];
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp;
    struct ibv_mr *rx_mr, *tx_mr;
    uint8_t port;
    uint8_t link_layer;
    int gid_index;
    int fatal;       /* SX_OK, or the status the interface died with */
    bool fatal_told; /* poll has reported it */
    bool armed;      /* notification requested and nothing completed since */
    bool closing;    /* the queue pair is gone: AHs need no draining */
    sx_verbs_sizing_t size;

    uint8_t addr[SX_VERBS_ADDR_LEN]; /* the card address */

    /* Destinations; slots are reused through a free list. */
    sx_verbs_ah_cache_t *ahs;
    verbs_dest_t *dests;
    uint32_t ndests, cap, free_head;

    /* Sends: slot i is send work request i and bounce buffer i. */
    uint8_t *tx_mem;
    unsigned ntx;
    unsigned *tx_free; /* stack of free slot indices */
    unsigned tx_nfree;
    bool *tx_busy;

    /* Receives: buffer i is receive work request i. */
    uint8_t *rx_mem;
    unsigned nrx;
    bool *rx_posted;
    unsigned *repost; /* buffers to post again at the next poll */
    unsigned nrepost;

    /* Completions an arm's last check found, handed up by the next poll. */
    struct ibv_wc stash[VERBS_CQ_BATCH];
    unsigned nstash, stash_pos;

    unsigned async_tick;
    uint64_t tx_errors, rx_errors;
} verbs_iface_t;

/* ------------------------------------------------------------ verbs_dev.c */

/** "InfiniBand" or "Ethernet (RoCE)". */
const char *sx_verbs_link_name(uint8_t link_layer);

/** Writes the names of the devices in @p d (all, or those SX_NET_DEVICES
 *  lists) to @p buf. */
void sx_verbs_names(const verbs_dev_info_t *d, unsigned n, bool listed_only, char *buf, size_t cap);

/** The devices (up to VERBS_DEVS_MAX, *n_p of them) in @p d, or
 *  SX_ERR_NO_DEVICE with the reason in @p why. */
int sx_verbs_find(const sx_tl_config_t *config, verbs_dev_info_t *d, unsigned *n_p, char *why,
                  size_t cap);

/** The query and devices slots. */
int sx_verbs_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q);
int sx_verbs_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max);

/* ------------------------------------------------------------ verbs_io.c */

/** Posts receive buffers @p idx[0..n); returns how many the device took. */
unsigned sx_verbs_post_recvs(verbs_iface_t *v, const unsigned *idx, unsigned n);

/** Reads send completions, giving their slots back. */
void sx_verbs_reap_tx(verbs_iface_t *v);

/** The post_send, poll, wait_fds and arm slots. */
int sx_verbs_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                       unsigned *posted_p);
int sx_verbs_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max);
unsigned sx_verbs_wait_fds(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS]);
int sx_verbs_arm(sx_tl_iface_t *iface);

#endif /* SX_TRANSPORTS_VERBS_INT_H */
