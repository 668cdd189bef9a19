/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private to the ofi transport: what ofi.c (the interface: open, close,
 * card address, destinations), ofi_dev.c (libfabric loading, provider,
 * domain and entry choice, query and devices) and ofi_io.c (sends,
 * receives, blocking) share. Nothing else includes it; the rest of the
 * library sees ofi only through sx_tl_ofi_ops (transport.h).
 */
#ifndef SX_TRANSPORTS_OFI_INT_H
#define SX_TRANSPORTS_OFI_INT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <rdma/fabric.h>

#include "transports/transport.h"

#define OFI_MTU_MAX     65000
#define OFI_VARIANT_MAX 32

/* The libfabric functions called through the library loaded with dlopen
 * (ofi_dev.c); "error" is empty once they are all there. */
typedef struct ofi_lib {
    int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info);
    void (*freeinfo)(struct fi_info *info);
    struct fi_info *(*dupinfo)(const struct fi_info *info);
    int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
    const char *(*strerror)(int errnum);
    uint32_t (*version)(void);
    char error[SX_TL_DETAIL_MAX]; /* why it could not be loaded; "" when loaded */
} ofi_lib_t;

extern ofi_lib_t sx_ofi_lib;

/* libfabric's text for an error code, negative or not. */
static inline const char *ofi_err(ssize_t rc)
{
    return sx_ofi_lib.strerror((int)(rc < 0 ? -rc : rc));
}

typedef struct ofi_tx_slot {
    struct fi_context2 ctx; /* first: a completion's op_context is this */
    uint8_t *bounce;        /* mtu bytes, or NULL when everything is injected */
} ofi_tx_slot_t;

typedef struct ofi_rx_slot {
    struct fi_context2 ctx; /* first, as above */
    uint8_t *buf;           /* rx_len bytes */
} ofi_rx_slot_t;

typedef struct ofi_dest {
    fi_addr_t fi_addr;
    uint32_t next_free; /* link in the free list while !live */
    bool live;
} ofi_dest_t;

typedef struct ofi_iface {
    sx_tl_iface_t base;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *txcq, *rxcq;
    struct fid_ep *ep;
    int wait_fd;
    bool armed; /* fi_trywait succeeded and nothing completed since */
    bool use_more;

    /* The card address (layout: the top of ofi.c) and what it must match. */
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t addr_len;
    uint8_t addr_format;
    size_t raw_len; /* of the provider's own names */
    char variant[OFI_VARIANT_MAX];

    /* Destinations; slots are reused through a free list. */
    ofi_dest_t *dests;
    uint32_t ndests, cap, free_head;

    /* Sends. */
    size_t inject_size;
    size_t iov_limit;
    uint8_t *scratch; /* mtu bytes, to gather more iovecs than iov_limit */
    ofi_tx_slot_t *tx;
    uint8_t *tx_mem;
    unsigned ntx;
    unsigned *tx_free; /* stack of free slot indices */
    unsigned tx_nfree;

    /* Receives. */
    size_t rx_len; /* mtu + 1: the spare byte tells a truncated datagram */
    ofi_rx_slot_t *rx;
    uint8_t *rx_mem;
    unsigned nrx;
    unsigned *repost; /* slots to post again at the next poll */
    unsigned nrepost;
    uint64_t tx_errors, rx_errors;
} ofi_iface_t;

/* ------------------------------------------------------------ ofi_dev.c */

/** Whether @p prov is one of libfabric's emulations over kernel sockets. */
bool sx_ofi_prov_is_software(const char *prov);

/** @p fi's IPv4 source address; NULL when it has none. */
const struct sockaddr_in *sx_ofi_src_in(const struct fi_info *fi);

/** The entry to open, a copy in *info_p (fi_freeinfo it), or an error with
 *  the reason in @p why. */
int sx_ofi_pick(const sx_tl_config_t *config, struct fi_info **info_p, char *why, size_t cap);

/** The mtu of an endpoint of entry @p fi. */
size_t sx_ofi_mtu_of(const struct fi_info *fi);

/** The query and devices slots. */
int sx_ofi_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q);
int sx_ofi_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max);

/* ------------------------------------------------------------ ofi_io.c */

/** Posts receive slot @p i; FI_MORE when another follows at once. */
int sx_ofi_post_recv(ofi_iface_t *o, unsigned i, bool more);

/** The post_send, poll, wait_fds and arm slots. */
int sx_ofi_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                     unsigned *posted_p);
int sx_ofi_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max);
unsigned sx_ofi_wait_fds(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS]);
int sx_ofi_arm(sx_tl_iface_t *iface);

#endif /* SX_TRANSPORTS_OFI_INT_H */
