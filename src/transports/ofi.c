/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ofi: datagrams over libfabric (issue 7).
 *
 * Each interface is one FI_EP_DGRAM endpoint with FI_MSG, opened on its own
 * fabric and domain, with its own address vector and two completion
 * queues: receives complete on one with a wait object (FI_WAIT_FD, the fd
 * the progress threads sleep on), sends on one without, so that a send
 * never signals a sleeper. A shard's token holder is the only caller, so
 * the domain asks for FI_THREAD_DOMAIN.
 *
 * This file opens and closes the interface and holds its card address and
 * destinations; ofi_dev.c loads libfabric and chooses the provider, domain
 * and entry; ofi_io.c is the data path (sends, receives, blocking).
 * ofi_int.h is what the three share.
 *
 * Socket buffers: the udp and sockets providers emulate datagrams on a
 * kernel socket whose buffers they leave at the system default, which
 * holds fewer than a hundred full datagrams. The interface finds that
 * socket by the address its endpoint is bound to and sizes it as the udp
 * transport sizes its own (config->rcvbuf, config->sndbuf: SX_RCVBUF,
 * SX_SNDBUF); without it a window's burst is mostly lost.
 *
 * mtu: the endpoint's max_msg_size, capped at OFI_MTU_MAX. The udp
 * provider says 1472 (Ethernet's 1500 less the IPv4 and UDP headers) on
 * every interface, loopback included, so large messages cost many more
 * datagrams than over the udp transport.
 *
 * Address (the business-card bytes): one byte of libfabric address format
 * (enum fi_addr_format), then for FI_SOCKADDR_IN the port and the IPv4
 * address, both in network order (7 bytes in all), and for any other
 * format the provider's own name as fi_getname writes it. The provider's
 * name travels in the card beside the transport's (variant): peers must
 * use the same provider.
 */
#include "transports/ofi_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <shardx.h>

#include "common/log.h"

#define OFI_TX_MAX        256 /* send slots */
#define OFI_RX_MIN        64  /* receive buffers: at least two poll batches */
#define OFI_RX_MAX        256
#define OFI_RX_BYTES      (4u << 20) /* receive buffer memory per interface */
#define OFI_BOUNCE_BYTES  (4u << 20) /* bounce buffer memory per interface */
#define OFI_ADDR_IN_LEN   7          /* format, port, IPv4 address */
#define OFI_DEST_FREE_END UINT32_MAX

/* ------------------------------------------------------------------ */
/* The interface                                                        */

static void ofi_close(sx_tl_iface_t *iface);

static int ofi_fail(ofi_iface_t *o, const char *what, ssize_t rc)
{
    sx_error("ofi", "%s (provider %s): %s", what, o->variant, ofi_err(rc));
    return rc == -FI_ENOMEM ? SX_ERR_NO_MEMORY : SX_ERR_NO_DEVICE;
}

/*
 * The kernel socket under an endpoint of a provider that emulates
 * datagrams on sockets (udp, sockets), found by the address it is bound
 * to; -1 when there is none. Such providers offer no way to size their
 * socket buffers, and the default receive buffer (net.core.rmem_default,
 * 208 KiB here) holds fewer than a hundred full datagrams: a window's
 * burst overflows it and most of the burst is lost and retransmitted.
 */
static int ofi_find_socket(const struct sockaddr_in *bound)
{
    DIR *d = opendir("/proc/self/fd");
    int found = -1;

    if (d == NULL)
        return -1;
    for (struct dirent *de; found < 0 && (de = readdir(d)) != NULL;) {
        char *end = NULL;
        long fd = strtol(de->d_name, &end, 10);
        if (end == de->d_name || *end != '\0' || fd < 0 || fd == dirfd(d))
            continue;
        struct sockaddr_in sa;
        socklen_t salen = sizeof(sa);
        int type = 0;
        socklen_t tlen = sizeof(type);
        if (getsockname((int)fd, (struct sockaddr *)&sa, &salen) == 0 && salen == sizeof(sa) &&
            sa.sin_family == AF_INET && sa.sin_port == bound->sin_port &&
            sa.sin_addr.s_addr == bound->sin_addr.s_addr &&
            getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_DGRAM)
            found = (int)fd;
    }
    closedir(d);
    return found;
}

/* Asks for @p want bytes of one socket buffer, as the udp transport does:
 * SO_*BUFFORCE needs CAP_NET_ADMIN, the plain option is capped by
 * net.core.[rw]mem_max. */
static void ofi_set_buf(int fd, size_t want, int force_opt, int opt, const char *what)
{
    int val = want > INT_MAX / 2 ? INT_MAX / 2 : (int)want;

    if (want == 0)
        return;
    if (setsockopt(fd, SOL_SOCKET, force_opt, &val, sizeof(val)) != 0 &&
        setsockopt(fd, SOL_SOCKET, opt, &val, sizeof(val)) != 0)
        sx_debug("ofi", "setting %s to %d failed: %s", what, val, strerror(errno));
}

static void ofi_size_socket(ofi_iface_t *o, const sx_tl_config_t *config,
                            const struct sockaddr_in *bound)
{
    if (config->rcvbuf == 0 && config->sndbuf == 0)
        return;
    int fd = ofi_find_socket(bound);
    if (fd < 0) {
        sx_debug("ofi",
                 "provider %s: no socket of this process is bound to its endpoint's address; "
                 "its buffers keep the system defaults (net.core.rmem_default)",
                 o->variant);
        return;
    }
    ofi_set_buf(fd, config->rcvbuf, SO_RCVBUFFORCE, SO_RCVBUF, "SO_RCVBUF");
    ofi_set_buf(fd, config->sndbuf, SO_SNDBUFFORCE, SO_SNDBUF, "SO_SNDBUF");
    sx_debug("ofi", "provider %s: sized the buffers of its socket (fd %d)", o->variant, fd);
}

static int ofi_open(const sx_tl_config_t *config, sx_tl_iface_t **iface_p)
{
    char why[SX_TL_DETAIL_MAX];
    struct fi_info *fi = NULL;
    int status;
    ssize_t rc;

    if (config == NULL || iface_p == NULL)
        return SX_ERR_INVALID_PARAM;
    status = sx_ofi_pick(config, &fi, why, sizeof(why));
    if (status != SX_OK) {
        sx_error("ofi", "%s", why);
        return status;
    }
    if (config->device != NULL && config->device[0] != '\0') {
        const struct sockaddr_in *src = sx_ofi_src_in(fi);
        char ip[INET_ADDRSTRLEN] = "";
        if (src != NULL && inet_ntop(AF_INET, &src->sin_addr, ip, sizeof(ip)) != NULL)
            sx_info("ofi",
                    "shard %u: binding to %s, the IPv4 address of domain %s (SX_NET_DEVICES; "
                    "SX_BIND_ADDR is not used)",
                    config->shard, ip, config->device);
        else
            sx_info("ofi", "shard %u: domain %s (SX_NET_DEVICES)", config->shard, config->device);
    }
    ofi_iface_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        sx_ofi_lib.freeinfo(fi);
        return SX_ERR_NO_MEMORY;
    }
    o->base.ops = &sx_tl_ofi_ops;
    o->info = fi;
    o->wait_fd = -1;
    o->free_head = OFI_DEST_FREE_END;
    o->use_more = true;
    snprintf(o->variant, sizeof(o->variant), "%s", fi->fabric_attr->prov_name);

    size_t mtu = sx_ofi_mtu_of(fi);
    o->inject_size = fi->tx_attr->inject_size < mtu ? fi->tx_attr->inject_size : mtu;
    o->iov_limit = fi->tx_attr->iov_limit > 0 ? fi->tx_attr->iov_limit : 1;
    o->rx_len = mtu + 1;

    if ((rc = sx_ofi_lib.fabric(fi->fabric_attr, &o->fabric, NULL)) != 0) {
        status = ofi_fail(o, "fi_fabric", rc);
        goto fail;
    }
    if ((rc = fi_domain(o->fabric, fi, &o->domain, NULL)) != 0) {
        status = ofi_fail(o, "fi_domain", rc);
        goto fail;
    }

    /* Slots and buffers. */
    o->ntx = fi->tx_attr->size < OFI_TX_MAX ? (unsigned)fi->tx_attr->size : OFI_TX_MAX;
    bool bounce = o->inject_size < mtu;
    if (bounce && o->ntx > OFI_BOUNCE_BYTES / mtu)
        o->ntx = OFI_BOUNCE_BYTES / mtu > 16 ? (unsigned)(OFI_BOUNCE_BYTES / mtu) : 16;
    o->nrx = OFI_RX_BYTES / o->rx_len;
    o->nrx = o->nrx < OFI_RX_MIN ? OFI_RX_MIN : o->nrx > OFI_RX_MAX ? OFI_RX_MAX : o->nrx;
    if (o->nrx > fi->rx_attr->size)
        o->nrx = (unsigned)fi->rx_attr->size;
    o->tx = calloc(o->ntx, sizeof(*o->tx));
    o->tx_free = calloc(o->ntx, sizeof(*o->tx_free));
    o->rx = calloc(o->nrx, sizeof(*o->rx));
    o->repost = calloc(o->nrx, sizeof(*o->repost));
    o->rx_mem = malloc(o->nrx * o->rx_len);
    o->tx_mem = bounce ? malloc(o->ntx * mtu) : NULL;
    o->scratch = o->iov_limit < SX_TL_IOV_MAX ? malloc(mtu) : NULL;
    if (o->tx == NULL || o->tx_free == NULL || o->rx == NULL || o->repost == NULL ||
        o->rx_mem == NULL || (bounce && o->tx_mem == NULL) ||
        (o->iov_limit < SX_TL_IOV_MAX && o->scratch == NULL)) {
        status = SX_ERR_NO_MEMORY;
        goto fail;
    }
    for (unsigned i = 0; i < o->ntx; i++) {
        o->tx[i].bounce = bounce ? o->tx_mem + (size_t)i * mtu : NULL;
        o->tx_free[i] = o->ntx - 1 - i;
    }
    o->tx_nfree = o->ntx;
    for (unsigned i = 0; i < o->nrx; i++)
        o->rx[i].buf = o->rx_mem + (size_t)i * o->rx_len;

    /* Queues: sends complete without a wait object, receives with one. */
    struct fi_cq_attr txa = {.size = o->ntx, .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
    if ((rc = fi_cq_open(o->domain, &txa, &o->txcq, NULL)) != 0) {
        status = ofi_fail(o, "fi_cq_open (sends)", rc);
        goto fail;
    }
    struct fi_cq_attr rxa = {.size = o->nrx, .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_FD};
    if ((rc = fi_cq_open(o->domain, &rxa, &o->rxcq, NULL)) != 0) {
        sx_warn("ofi",
                "provider %s offers no fd to wait on (%s); progress threads will wake on "
                "their timers only",
                o->variant, ofi_err(rc));
        rxa.wait_obj = FI_WAIT_NONE;
        if ((rc = fi_cq_open(o->domain, &rxa, &o->rxcq, NULL)) != 0) {
            status = ofi_fail(o, "fi_cq_open (receives)", rc);
            goto fail;
        }
    } else if ((rc = fi_control(&o->rxcq->fid, FI_GETWAIT, &o->wait_fd)) != 0) {
        sx_warn("ofi",
                "FI_GETWAIT on provider %s: %s; progress threads will wake on their "
                "timers only",
                o->variant, ofi_err(rc));
        o->wait_fd = -1;
    }
    struct fi_av_attr ava = {
        .type = fi->domain_attr->av_type != FI_AV_UNSPEC ? fi->domain_attr->av_type : FI_AV_TABLE,
        .count = 64};
    if ((rc = fi_av_open(o->domain, &ava, &o->av, NULL)) != 0) {
        status = ofi_fail(o, "fi_av_open", rc);
        goto fail;
    }

    if ((rc = fi_endpoint(o->domain, fi, &o->ep, NULL)) != 0) {
        status = ofi_fail(o, "fi_endpoint", rc);
        goto fail;
    }
    if ((rc = fi_ep_bind(o->ep, &o->av->fid, 0)) != 0 ||
        (rc = fi_ep_bind(o->ep, &o->txcq->fid, FI_TRANSMIT)) != 0 ||
        (rc = fi_ep_bind(o->ep, &o->rxcq->fid, FI_RECV)) != 0) {
        status = ofi_fail(o, "fi_ep_bind", rc);
        goto fail;
    }
    if ((rc = fi_enable(o->ep)) != 0) {
        status = ofi_fail(o, "fi_enable", rc);
        goto fail;
    }

    /* The card address. */
    uint8_t raw[256];
    size_t raw_len = sizeof(raw);
    if ((rc = fi_getname(&o->ep->fid, raw, &raw_len)) != 0) {
        status = ofi_fail(o, "fi_getname", rc);
        goto fail;
    }
    o->addr_format = (uint8_t)fi->addr_format;
    o->raw_len = raw_len;
    const struct sockaddr_in *sin = (const void *)raw;
    if (fi->addr_format == FI_SOCKADDR_IN && raw_len >= sizeof(*sin) &&
        sin->sin_family == AF_INET) {
        o->addr[0] = o->addr_format;
        memcpy(o->addr + 1, &sin->sin_port, 2);
        memcpy(o->addr + 3, &sin->sin_addr.s_addr, 4);
        o->addr_len = OFI_ADDR_IN_LEN;
        if (sx_ofi_prov_is_software(o->variant))
            ofi_size_socket(o, config, sin);
    } else if ((unsigned)fi->addr_format < 256 && raw_len + 1 <= SX_TL_ADDR_MAX) {
        o->addr[0] = o->addr_format;
        memcpy(o->addr + 1, raw, raw_len);
        o->addr_len = raw_len + 1;
    } else {
        sx_error("ofi",
                 "provider %s names its endpoints with %zu bytes (format %u); a business card "
                 "has room for %d",
                 o->variant, raw_len, (unsigned)fi->addr_format, SX_TL_ADDR_MAX - 1);
        status = SX_ERR_UNSUPPORTED;
        goto fail;
    }

    /* Every receive buffer goes to the provider now. */
    for (unsigned i = 0; i < o->nrx; i++) {
        int prc = sx_ofi_post_recv(o, i, i + 1 < o->nrx);
        if (prc != SX_OK) {
            status = ofi_fail(o, "posting receives", prc);
            goto fail;
        }
    }

    o->base.caps = (sx_tl_caps_t){
        .mtu = mtu,
        .inline_limit = o->inject_size,
        .tx_credits = o->ntx,
        .sync_send = 1,
    };
    char where[64] = "";
    if (o->addr_format == FI_SOCKADDR_IN) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, o->addr + 3, ip, sizeof(ip));
        snprintf(where, sizeof(where), " on %s:%u", ip,
                 (unsigned)ntohs((uint16_t)(o->addr[1] | o->addr[2] << 8)));
    }
    sx_debug("ofi",
             "shard %u: provider %s, fabric %s, domain %s%s, mtu %zu, inject %zu, %u send "
             "slots, %u receive buffers, wait fd %d",
             config->shard, o->variant, fi->fabric_attr->name, fi->domain_attr->name, where, mtu,
             o->inject_size, o->ntx, o->nrx, o->wait_fd);
    *iface_p = &o->base;
    return SX_OK;
fail:
    ofi_close(&o->base);
    return status;
}

static void ofi_close_fid(struct fid *fid, const char *what)
{
    if (fid == NULL)
        return;
    int rc = fi_close(fid);
    if (rc != 0)
        sx_debug("ofi", "closing the %s: %s", what, ofi_err(rc));
}

static void ofi_close(sx_tl_iface_t *iface)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;

    if (o == NULL)
        return;
    /* The endpoint first: it holds the queues and the address vector. */
    ofi_close_fid(o->ep != NULL ? &o->ep->fid : NULL, "endpoint");
    ofi_close_fid(o->av != NULL ? &o->av->fid : NULL, "address vector");
    ofi_close_fid(o->rxcq != NULL ? &o->rxcq->fid : NULL, "receive queue");
    ofi_close_fid(o->txcq != NULL ? &o->txcq->fid : NULL, "send queue");
    ofi_close_fid(o->domain != NULL ? &o->domain->fid : NULL, "domain");
    ofi_close_fid(o->fabric != NULL ? &o->fabric->fid : NULL, "fabric");
    if (o->info != NULL)
        sx_ofi_lib.freeinfo(o->info);
    free(o->tx);
    free(o->tx_free);
    free(o->tx_mem);
    free(o->scratch);
    free(o->rx);
    free(o->repost);
    free(o->rx_mem);
    free(o->dests);
    free(o);
}

static int ofi_local_addr(sx_tl_iface_t *iface, void *buf, size_t *len_p)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;

    if (buf == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (*len_p < o->addr_len)
        return SX_ERR_TRUNCATED;
    memcpy(buf, o->addr, o->addr_len);
    *len_p = o->addr_len;
    return SX_OK;
}

static int ofi_addr_check(sx_tl_iface_t *iface, const void *addr, size_t len)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    const uint8_t *in = addr;

    if (addr == NULL || len < 2)
        return SX_ERR_INVALID_PARAM;
    if (in[0] != o->addr_format)
        return SX_ERR_PEER_UNREACHABLE;
    if (o->addr_format == FI_SOCKADDR_IN) {
        static const uint8_t zero[4] = {0};
        if (len != OFI_ADDR_IN_LEN || (in[1] == 0 && in[2] == 0) || memcmp(in + 3, zero, 4) == 0)
            return SX_ERR_INVALID_PARAM;
        return SX_OK;
    }
    /* Names of other formats have the provider's fixed length, except
     * strings. */
    if (o->addr_format != FI_ADDR_STR && len - 1 != o->raw_len)
        return SX_ERR_INVALID_PARAM;
    return SX_OK;
}

static void ofi_addr_str(sx_tl_iface_t *iface, const void *addr, size_t len, char *buf, size_t cap)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    const uint8_t *in = addr;
    char ip[INET_ADDRSTRLEN];

    if (addr != NULL && len == OFI_ADDR_IN_LEN && in[0] == FI_SOCKADDR_IN &&
        inet_ntop(AF_INET, in + 3, ip, sizeof(ip)) != NULL) {
        snprintf(buf, cap, "ofi/%s %s:%u", o->variant, ip,
                 (unsigned)ntohs((uint16_t)(in[1] | in[2] << 8)));
        return;
    }
    if (addr == NULL || len < 1) {
        snprintf(buf, cap, "(malformed ofi address of %zu bytes)", len);
        return;
    }
    size_t off = (size_t)snprintf(buf, cap, "ofi address format %u:", (unsigned)in[0]);
    for (size_t i = 1; i < len && off + 3 < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%02x", in[i]);
}

static void ofi_variant(sx_tl_iface_t *iface, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", ((ofi_iface_t *)iface)->variant);
}

static int ofi_addr_insert(sx_tl_iface_t *iface, const void *addr, size_t len, sx_tl_dest_t *dest_p)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    const uint8_t *in = addr;
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    uint32_t slot;

    if (dest_p == NULL)
        return SX_ERR_INVALID_PARAM;
    int rc = ofi_addr_check(iface, addr, len);
    if (rc != SX_OK)
        return rc;
    if (o->addr_format == FI_SOCKADDR_IN) {
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        memcpy(&sa.sin_port, in + 1, 2);
        memcpy(&sa.sin_addr.s_addr, in + 3, 4);
        rc = fi_av_insert(o->av, &sa, 1, &fa, 0, NULL);
    } else {
        rc = fi_av_insert(o->av, in + 1, 1, &fa, 0, NULL);
    }
    if (rc != 1) {
        char text[96];
        ofi_addr_str(iface, addr, len, text, sizeof(text));
        sx_debug("ofi", "fi_av_insert %s: %s", text, rc < 0 ? ofi_err(rc) : "not inserted");
        return rc == -FI_ENOMEM ? SX_ERR_NO_MEMORY : SX_ERR_PEER_UNREACHABLE;
    }

    if (o->free_head != OFI_DEST_FREE_END) {
        slot = o->free_head;
        o->free_head = o->dests[slot].next_free;
    } else {
        if (o->ndests == o->cap) {
            uint32_t cap = o->cap != 0 ? o->cap * 2 : 16;
            ofi_dest_t *d =
                cap > o->cap && cap < SX_TL_DEST_NONE ? realloc(o->dests, cap * sizeof(*d)) : NULL;
            if (d == NULL) {
                (void)fi_av_remove(o->av, &fa, 1, 0);
                return cap > o->cap ? SX_ERR_NO_MEMORY : SX_ERR_FULL;
            }
            o->dests = d;
            o->cap = cap;
        }
        slot = o->ndests++;
    }
    o->dests[slot] = (ofi_dest_t){.fi_addr = fa, .next_free = OFI_DEST_FREE_END, .live = true};
    *dest_p = slot;
    return SX_OK;
}

static void ofi_addr_remove(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;

    if (dest >= o->ndests || !o->dests[dest].live)
        return;
    /* Sends to it still in the provider's queue may go out or fail; their
     * slots come back with their completions either way. */
    int rc = fi_av_remove(o->av, &o->dests[dest].fi_addr, 1, 0);
    if (rc != 0)
        sx_debug("ofi", "fi_av_remove: %s", ofi_err(rc));
    o->dests[dest].live = false;
    o->dests[dest].next_free = o->free_head;
    o->free_head = dest;
}

const sx_tl_ops_t sx_tl_ofi_ops = {
    .name = "ofi",
    .exclusivity = SX_TL_EXCL_EMULATED,
    /* Loads libfabric and runs fi_getinfo (unless not named and no fabric
     * device is present); the provider decides the exclusivity; any
     * thread; may take a few hundred milliseconds the first time. */
    .query = sx_ofi_query,
    /* Opens fabric, domain, queues, address vector and endpoint, and posts
     * the receive buffers; may block briefly. */
    .open = ofi_open,
    /* Closes the endpoint (cancelling posted receives) and the rest;
     * token holder. */
    .close = ofi_close,
    /* The encoded endpoint name; any thread. */
    .local_addr = ofi_local_addr,
    /* fi_av_insert after checking the format; token holder. */
    .addr_insert = ofi_addr_insert,
    .addr_str = ofi_addr_str,
    /* Checks the format without inserting; any thread. */
    .addr_check = ofi_addr_check,
    /* The provider's name; any thread. */
    .variant = ofi_variant,
    /* The domains SX_NET_DEVICES names that the provider has here (none
     * without the list); runs fi_getinfo; any thread; may block briefly. */
    .devices = sx_ofi_devices,
    /* fi_av_remove; token holder. */
    .addr_remove = ofi_addr_remove,
    /* Injects or copies each datagram (sync_send) and posts it; token
     * holder; never blocks. */
    .post_send = sx_ofi_post_send,
    /* Reposts the last poll's buffers, reaps send completions and reads
     * receive completions in batches; token holder; never blocks. */
    .poll = sx_ofi_poll,
    /* The receive queue's wait object; any thread. */
    .wait_fds = sx_ofi_wait_fds,
    /* fi_trywait; token holder. */
    .arm = sx_ofi_arm,
};
