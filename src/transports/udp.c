/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * udp: the embedded default transport (DESIGN.md sections 2 and 4).
 *
 * One nonblocking IPv4 UDP socket per interface, an IPv6 one beside it
 * when the interface offers IPv6 addresses (below), and optionally one
 * for acknowledgements (below). Sends go out in batches through
 * sendmmsg(2), a lone datagram through sendto(2), which costs the
 * kernel less (sx_udp_send1), and, while datagrams arrive back to back,
 * receives come in batches through recvmmsg(2), so a busy shard pays one
 * system call per batch, not per datagram; an idle one polls with
 * recvfrom(2) (recvmsg(2) once the socket carries control data), which
 * returns a lone datagram sooner (udp_rx.c). The first
 * SX_UDP_CONNECT destinations get a send socket of their own, connected,
 * so the kernel keeps their route instead of looking it up per datagram
 * (sx_udp_connect_dest); it sends from another port, which receivers
 * ignore. With SX_UDP_HOT (the default), the destination of the last run
 * of small datagrams sends and receives them through a hot socket on the
 * data port instead, connected to its data port, which the kernel hands
 * that peer's datagrams and which a ping-pong reads without their
 * senders' addresses (udp_hot.c).
 *
 * With SX_UDP_GSO (the default), a run of equal data datagrams to one
 * destination goes out as one message with a UDP_SEGMENT control message,
 * which the kernel cuts back into those datagrams (udp_gso_merge), and a
 * data socket gets UDP_GRO at its first backlog (sx_udp_rx_busy): a read may
 * then return several datagrams of one flow coalesced, which poll cuts at
 * the size the kernel reports (udp_rx.c). docs/tuning.md, "UDP GSO and
 * GRO", has the figures.
 *
 * ECN (config->ecn: congestion control on and SX_CONGESTION_ECN): the data
 * sockets send ECT(0) and, once a channel that uses congestion control
 * asks (udp_ecn_report), read each datagram's ECN field (IP_RECVTOS,
 * IPV6_RECVTCLASS) into the event; GRO coalesces only datagrams whose
 * fields agree, so one field per read buffer is exact (udp_sock.c).
 *
 * This file is the interface, its card address and its send path;
 * udp_rx.c reads the sockets (and lands payloads, sx_tl_ops_t.land),
 * udp_hot.c keeps the hot socket,
 * udp_sock.c binds, makes and sizes them, and udp_int.h is what the files
 * share.
 *
 * Address (the business-card bytes): udp_card.c writes and reads it. An
 * interface bound to the wildcard address that offers IPv6 addresses has
 * a second data socket, IPv6 only (IPV6_V6ONLY), bound to the same port;
 * IPv4 stays on the first, so that nothing changes for a host without
 * IPv6 or a peer without it, and an IPv6 destination is reached through
 * the second (the ACK socket, when on, serves IPv4 peers only). poll
 * reads both, and wait_fds hands out both.
 *
 * ACK socket (config->ack_socket, SX_UDP_ACK_SOCKET): the seeds' usnic BTL
 * gives each module a priority channel for ACKs and tiny messages beside
 * its data channel (DESIGN.md section 1), so that an acknowledgement never
 * waits in a receive queue behind a window of full-size data, and is not
 * the datagram a full receive buffer drops. Here the priority channel is a
 * second socket on the same address. What config->is_control calls
 * control (the pure ACKs), up to UDP_CTRL_MAX bytes, goes out through our
 * ACK socket if we have one, to the peer's ACK port if its address names
 * one; everything else goes data socket to data port. Either side may lack
 * the socket: an 8-byte address means "send me ACKs on the data socket",
 * and an interface without an ACK socket still sends ACKs to a peer's ACK
 * port. poll reads the ACK socket first (up to three quarters of its
 * room, so a flood there cannot starve the data), and wait_fds hands out
 * both sockets. The ACK socket carries SO_PRIORITY 6, which
 * a pfifo_fast or prio qdisc on a real NIC dequeues first; fq_codel, the
 * usual default, already treats it as a separate, sparse flow. Whether it
 * pays off is measured by bench/ack_socket_bench.c. On loopback it did not
 * (a second system call per poll costs more than the ACKs' wait saves), so
 * it is off by default, unlike DESIGN.md's picture of an interface with
 * both channels; docs/tuning.md, section "ACK socket: SX_UDP_ACK_SOCKET",
 * has the measurements.
 *
 * ICMP errors: an unconnected Linux UDP socket without IP_RECVERR ignores
 * ICMP port-unreachable (see udp(7), "ERROR HANDLING"), which is what we
 * want: a peer that went away must not fail the interface. Should a kernel
 * report ECONNREFUSED anyway, it refers to some earlier datagram; it is
 * counted in stats.tx_refused and the call goes on, and the reliability
 * layer above retransmits or gives up on the peer. A connected send socket
 * (SX_UDP_CONNECT) does hear "hard" ICMP errors (udp(7)): the kernel keeps
 * the last one and fails the socket's next send with it, on whichever
 * datagram comes next. So there any error but "no room" is taken as
 * concerning an earlier datagram once per datagram: counted in
 * tx_refused, and the send is tried again; only a second error in a row
 * on the same datagram is its own.
 */
#include "transports/udp_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <shardx.h>

#include "common/hot.h"
#include "common/inaddr.h"
#include "common/log.h"

#define UDP_MTU_WILDCARD 65000 /* receive buffers: the largest route's (loopback) */
#define UDP_GRO_BUF      65536 /* receive buffers with GRO: a coalesced read */
#define UDP_GSO_BYTES    64000 /* payload of one GSO message, at most (IPv4: 65507) */
#define UDP_GSO_SEGS     64    /* datagrams of one GSO message (UDP_MAX_SEGMENTS) */
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103 /* linux/udp.h, Linux 4.18 */
#endif
#define UDP_TX_CREDITS    256
#define UDP_TX_BATCH      64 /* mmsghdrs per sendmmsg call */
#define UDP_DEST_FREE_END UINT32_MAX

/* Room for one UDP_SEGMENT control message (a u16), aligned. */
typedef union udp_gso_cmsg {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(uint16_t))];
} udp_gso_cmsg_t;

/*
 * The arrays of one udp_post_send batch of at most cap datagrams: msgs,
 * merged, per and ctrl have cap entries, iov cap * SX_TL_IOV_MAX (no
 * datagram has more), cm cap / 2 (a GSO message carries two datagrams at
 * least). A flush of a few datagrams (UDP_TX_SMALL) has them on the stack;
 * a full batch's, 13 KB, are the interface's (struct udp_tx_batch), so that
 * the usual send's frame stays small: 13 KB of stack between the shard's
 * frames and the system call's put them on three pages, each a TLB miss
 * after every system call on a kernel that flushes the TLB there
 * (common/hot.h).
 */
typedef struct udp_tx_arrays {
    struct mmsghdr *msgs, *merged;
    struct iovec *iov;
    udp_gso_cmsg_t *cm;
    unsigned *per;
    bool *ctrl;
    unsigned cap;
} udp_tx_arrays_t;

#define UDP_TX_SMALL 4

struct udp_tx_batch {
    struct mmsghdr msgs[UDP_TX_BATCH], merged[UDP_TX_BATCH];
    struct iovec iov[UDP_TX_BATCH * SX_TL_IOV_MAX];
    udp_gso_cmsg_t cm[UDP_TX_BATCH / 2];
    unsigned per[UDP_TX_BATCH];
    bool ctrl[UDP_TX_BATCH];
};

/* ------------------------------------------------------------------ */
/* Ops                                                                 */

static void udp_close(sx_tl_iface_t *iface);
static int udp_open_v6(udp_iface_t *u, const sx_tl_config_t *config, size_t mtu);

static int udp_open(const sx_tl_config_t *config, sx_tl_iface_t **iface_p)
{
    struct sockaddr_in bind_sa;
    udp_filter_t filter;
    bool wildcard = false;
    int status;

    if (config == NULL || iface_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (config->device != NULL && config->device[0] != '\0') {
        /* The engine chose this shard's interface (SX_NET_DEVICES), which
         * replaces SX_BIND_ADDR, port included: shards on one interface
         * cannot share a fixed port. */
        status = sx_udp_device_addr(config->device, config->shard, &bind_sa);
        if (status != SX_OK)
            return status;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &bind_sa.sin_addr, ip, sizeof(ip));
        sx_info("udp",
                "shard %u: binding to %s, the IPv4 address of %s (SX_NET_DEVICES; "
                "SX_BIND_ADDR is not used)",
                config->shard, ip, config->device);
    } else if (config->bind_addr != NULL && sx_udp_bind_is_single(config->bind_addr)) {
        status = sx_udp_parse_bind(config->bind_addr, &bind_sa);
        if (status != SX_OK)
            return status;
    } else {
        wildcard = true;
        char why[160];
        status = sx_udp_filter_parse(config->bind_addr, &filter, why, sizeof(why));
        if (status != SX_OK) {
            sx_error(
                "udp",
                "invalid value SX_BIND_ADDR='%s': %s; allowed: an IPv4 address a.b.c.d[:port], "
                "or interface names and subnets a.b.c.d/len separated by commas, all "
                "preceded by ^ to exclude them; empty: every interface",
                config->bind_addr, why);
            return status;
        }
        memset(&bind_sa, 0, sizeof(bind_sa));
        bind_sa.sin_family = AF_INET;
        bind_sa.sin_addr.s_addr = htonl(INADDR_ANY);
    }

    /* On a page boundary: the receive state a poll reads first then shares
     * the interface's first page (udp_rx_t). */
    udp_iface_t *u = NULL;
    if (posix_memalign((void **)&u, 4096, sizeof(*u)) != 0)
        return SX_ERR_NO_MEMORY;
    memset(u, 0, sizeof(*u));
    if ((u->txb = malloc(sizeof(*u->txb))) == NULL) {
        free(u);
        return SX_ERR_NO_MEMORY;
    }
    u->base.ops = &sx_tl_udp_ops;
    u->free_head = UDP_DEST_FREE_END;
    u->is_control = config->is_control;
    u->ack_fd = u->fd6 = u->hot_fd = -1;
    u->rx6.fd = u->hot_rx.fd = -1;
    u->hot_dest = u->hot_conn = u->run_dest = SX_TL_DEST_NONE;
    u->connect_max = sx_udp_connect_budget(config);
    u->sndbuf = config->sndbuf;
    sx_udp_netns(&u->netns_dev, &u->netns_ino);
    udp_sa_t bind_any = {.in4 = bind_sa}, bound;
    status = sx_udp_socket_open("data", &bind_any, config->rcvbuf, config->sndbuf, &u->fd, &bound);
    if (status != SX_OK)
        goto fail;
    u->local = bound.in4;

    u->wildcard = wildcard;
    u->host_key = sx_udp_host_key(u->netns_dev, u->netns_ino);
    size_t mtu = wildcard ? UDP_MTU_WILDCARD : sx_udp_pick_mtu(u->fd, &u->local);
    if (wildcard) {
        status = sx_udp_scan_local(&filter, u->laddrs, UDP_ADDRS_MAX, &u->nladdrs);
        if (status != SX_OK)
            goto fail;
        char text[256];
        sx_udp_laddrs_str(u->laddrs, u->nladdrs, text, sizeof(text));
        if (u->nladdrs == 0 && filter.n != 0)
            sx_warn("udp",
                    "shard %u: SX_BIND_ADDR='%s' leaves no interface address: only engines on this "
                    "host can reach this one",
                    config->shard, config->bind_addr);
        sx_debug("udp", "shard %u: every interface, port %u: %s; loopback for this host",
                 config->shard, ntohs(u->local.sin_port), text);
    }
    int rcv = 0;
    socklen_t rcvlen = sizeof(rcv);
    if (getsockopt(u->fd, SOL_SOCKET, SO_RCVBUF, &rcv, &rcvlen) != 0 || rcv < 0)
        rcv = 0;
    u->base.caps = (sx_tl_caps_t){
        .mtu = mtu,
        .inline_limit = mtu,
        .tx_credits = UDP_TX_CREDITS,
        .sync_send = 1,
        .rx_buffer = (size_t)rcv,
    };
    /* UDP GSO and GRO (udp_int.h): asked of the kernel, used when it has
     * them. With GRO a read may hold up to 64 KiB of datagrams, whatever
     * the mtu, so the data socket's buffers grow to that. */
    if (config->udp_gso) {
        int seg = 0;
        socklen_t sl = sizeof(seg);
        /* Asked, not set: UDP_GRO goes on with the first backlog
         * (sx_udp_rx_busy). */
        u->gso = getsockopt(u->fd, SOL_UDP, UDP_SEGMENT, &seg, &sl) == 0;
        sl = sizeof(seg);
        u->gro = getsockopt(u->fd, SOL_UDP, UDP_GRO, &seg, &sl) == 0;
    }
    u->ecn = config->ecn && sx_udp_ecn_open(u->fd, AF_INET);
    status = sx_udp_rx_init(&u->rx, u->fd, u->gro && mtu < UDP_GRO_BUF ? UDP_GRO_BUF : mtu);
    u->rx.limit = mtu;
    u->rx.gro = u->gro;
    /* Room for fewer than twice UDP_RX_BUSY_READ of the largest datagrams
     * (the kernel counts each with its overhead): it may drop before a
     * read ever finds that many queued (sx_udp_rx_busy). */
    if (status == SX_OK && (size_t)rcv < 2 * UDP_RX_BUSY_READ * mtu)
        sx_udp_rx_busy(&u->rx);
    if (status == SX_OK && config->udp_hot && sx_udp_open_hot(u, config) != SX_OK)
        sx_info("udp",
                "shard %u: no hot socket (SX_UDP_HOT): every datagram is read from the "
                "data socket",
                config->shard);
    if (status == SX_OK && config->ack_socket)
        status = sx_udp_open_ack(u, config);
    if (status == SX_OK && wildcard)
        status = udp_open_v6(u, config, mtu);
    if (status != SX_OK)
        goto fail;
    sx_debug("udp",
             "shard %u: bound to port %u, ACK socket on port %u (0: none), mtu %zu, GSO %s, GRO %s",
             config->shard, ntohs(u->local.sin_port), u->ack_port, mtu, u->gso ? "on" : "off",
             u->gro ? "on at the first backlog" : "off");
    *iface_p = &u->base;
    return SX_OK;
fail:
    udp_close(&u->base);
    return status;
}

/*
 * An interface bound to the wildcard address that offers IPv6 addresses
 * gets its IPv6 data socket (udp_sock.c), with GRO when the IPv4 one has
 * it. Where IPv6 sockets cannot be made (a kernel without IPv6, the port
 * taken), the interface offers its IPv4 addresses only, and says so.
 */
static int udp_open_v6(udp_iface_t *u, const sx_tl_config_t *config, size_t mtu)
{
    unsigned v4 = 0;
    for (unsigned i = 0; i < u->nladdrs; i++)
        v4 += u->laddrs[i].ip.family == AF_INET;
    /* As many IPv6 addresses as the card address has room for. */
    unsigned n6 = u->nladdrs - v4;
    while (n6 > 0 && sx_udp_card_list_len(v4, n6) > SX_TL_ADDR_MAX)
        n6--;
    if (n6 < u->nladdrs - v4) {
        char left[INET6_ADDRSTRLEN];
        sx_udp_ip_str(&u->laddrs[v4 + n6].ip, left, sizeof(left));
        sx_info("udp",
                "shard %u: %u IPv6 address(es) from %s on not offered: a card address holds %u "
                "bytes (SX_BIND_ADDR can choose which)",
                config->shard, u->nladdrs - v4 - n6, left, SX_TL_ADDR_MAX);
        u->nladdrs = v4 + n6;
    }
    if (n6 == 0)
        return SX_OK;
    if (sx_udp_open_v6(u, config) != SX_OK) {
        if (u->fd6 >= 0)
            close(u->fd6);
        u->fd6 = -1;
        sx_warn("udp", "shard %u: no IPv6 socket here: offering the IPv4 addresses only",
                config->shard);
        u->nladdrs = v4; /* scan_local lists IPv4 first */
        return SX_OK;
    }
    if (u->ecn)
        (void)sx_udp_ecn_open(u->fd6, AF_INET6);
    int status = sx_udp_rx_init(&u->rx6, u->fd6, u->rx.buflen);
    u->rx6.limit = mtu;
    u->rx6.gro = u->gro;
    if (status == SX_OK && u->rx.busy) /* the same buffer size */
        sx_udp_rx_busy(&u->rx6);
    return status;
}

static void udp_close(sx_tl_iface_t *iface)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (u == NULL)
        return;
    if (u->ack_fd >= 0)
        close(u->ack_fd);
    if (u->fd >= 0)
        close(u->fd);
    if (u->fd6 >= 0)
        close(u->fd6);
    if (u->hot_fd >= 0)
        close(u->hot_fd);
    for (uint32_t i = 0; i < u->ndests; i++)
        if (u->dests[i].live && u->dests[i].tx_fd >= 0)
            close(u->dests[i].tx_fd);
    free(u->rx.mem);
    free(u->ack_rx.mem);
    free(u->rx6.mem);
    free(u->hot_rx.mem);
    free(u->dests);
    free(u->txb);
    free(u);
}

static int udp_local_addr(sx_tl_iface_t *iface, void *buf, size_t *len_p)
{
    if (buf == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_udp_card_write((const udp_iface_t *)iface, buf, len_p);
}

static void udp_addr_str(sx_tl_iface_t *iface, const void *addr, size_t len, char *buf, size_t cap)
{
    (void)iface;
    sx_udp_card_str(addr, len, buf, cap);
}

/* Whether card bytes are a well-formed udp address, without a log line
 * (sx_peer_add explains a refusal itself). */
static int udp_addr_check(sx_tl_iface_t *iface, const void *addr, size_t len)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    udp_peer_addr_t pa;
    udp_sa_t cand[UDP_CAND_MAX];

    if (sx_udp_card_decode(addr, len, &pa) != NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_udp_candidates(u, &pa, cand, UDP_CAND_MAX) != 0 ? SX_OK : SX_ERR_PEER_UNREACHABLE;
}

static int udp_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q)
{
    char names[SX_TL_DEVICES][SX_TL_DEVICE_MAX];
    /* Room for the prefix below within the detail. */
    char text[SX_TL_DETAIL_MAX - 32];

    (void)named;
    q->exclusivity = SX_TL_EXCL_SOCKETS;
    if (config->net_devices == NULL || config->net_devices[0] == '\0') {
        const char *bind = config->bind_addr != NULL ? config->bind_addr : "";
        if (sx_udp_bind_is_single(bind)) {
            snprintf(q->detail, sizeof(q->detail), "kernel UDP sockets on %s", bind);
            return SX_OK;
        }
        udp_filter_t f;
        udp_laddr_t la[UDP_ADDRS_MAX];
        unsigned n = 0;
        char why[128];
        if (sx_udp_filter_parse(bind, &f, why, sizeof(why)) != SX_OK) {
            snprintf(q->detail, sizeof(q->detail), "invalid SX_BIND_ADDR: %s", why);
            return SX_ERR_INVALID_PARAM;
        }
        if (sx_udp_scan_local(&f, la, UDP_ADDRS_MAX, &n) == SX_OK)
            sx_udp_laddrs_str(la, n, text, sizeof(text));
        else
            snprintf(text, sizeof(text), "(cannot list them)");
        snprintf(q->detail, sizeof(q->detail),
                 "kernel UDP sockets on every interface: %.*s; "
                 "loopback for this host",
                 (int)(sizeof(q->detail) - 64), text);
        return SX_OK;
    }
    int n = sx_udp_scan_devices(config, names, SX_TL_DEVICES, text, sizeof(text), false);
    if (n < 0) {
        snprintf(q->detail, sizeof(q->detail), "%s", text);
        return n;
    }
    snprintf(q->detail, sizeof(q->detail), "kernel UDP sockets on %s", text);
    return SX_OK;
}

static int udp_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max)
{
    char text[SX_TL_DETAIL_MAX];

    if (config->net_devices == NULL || config->net_devices[0] == '\0')
        return 0;
    int n = sx_udp_scan_devices(config, names, max, text, sizeof(text), true);
    if (n < 0)
        sx_error("udp", "%s", text);
    return n;
}

/* Points @p d at its candidate @p k: the data and ACK addresses, a
 * connected send socket when the budget allows, and the route's MTU. */
static void udp_dest_use(udp_iface_t *u, udp_dest_t *d, unsigned k, uint16_t ack_port)
{
    if (d->tx_fd >= 0) {
        close(d->tx_fd);
        d->tx_fd = -1;
        u->connected--;
    }
    d->cur = (uint8_t)k;
    d->sa = d->ack_sa = d->cand[k];
    if (ack_port != 0 && d->sa.sa.sa_family == AF_INET)
        d->ack_sa.in4.sin_port = htons(ack_port);
    if (u->connected < u->connect_max)
        sx_udp_connect_dest(u, d);
    d->mtu = sx_udp_route_mtu(u, &d->sa, d->tx_fd);
}

static int udp_addr_insert(sx_tl_iface_t *iface, const void *addr, size_t len, sx_tl_dest_t *dest_p)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    udp_peer_addr_t pa;
    udp_sa_t cand[UDP_CAND_MAX];
    uint32_t slot;

    if (dest_p == NULL)
        return SX_ERR_INVALID_PARAM;
    /* The bytes come from a peer's business card: check every field. */
    const char *bad = sx_udp_card_decode(addr, len, &pa);
    if (bad != NULL) {
        sx_error("udp", "malformed peer address of %zu bytes: %s", len, bad);
        return SX_ERR_INVALID_PARAM;
    }
    unsigned ncand = sx_udp_candidates(u, &pa, cand, UDP_CAND_MAX);
    if (ncand == 0) {
        char theirs[160], ours[256];
        udp_addr_str(iface, addr, len, theirs, sizeof(theirs));
        sx_udp_laddrs_str(u->laddrs, u->nladdrs, ours, sizeof(ours));
        sx_error("udp",
                 "no address pair reaches the peer: it is on another host and offers no address "
                 "outside it (%s); ours: %s (SX_BIND_ADDR)",
                 theirs, ours);
        return SX_ERR_PEER_UNREACHABLE;
    }

    if (u->free_head != UDP_DEST_FREE_END) {
        slot = u->free_head;
        u->free_head = u->dests[slot].next_free;
    } else {
        if (u->ndests == u->cap) {
            uint32_t cap = u->cap != 0 ? u->cap * 2 : 16;
            if (cap <= u->cap || cap >= SX_TL_DEST_NONE)
                return SX_ERR_FULL;
            udp_dest_t *d = realloc(u->dests, cap * sizeof(*d));
            if (d == NULL)
                return SX_ERR_NO_MEMORY;
            u->dests = d;
            u->cap = cap;
        }
        slot = u->ndests++;
    }
    udp_dest_t *d = &u->dests[slot];
    *d = (udp_dest_t){.next_free = UDP_DEST_FREE_END,
                      .tx_fd = -1,
                      .live = true,
                      .has_ack = pa.ack_port != 0,
                      .ack_port = pa.ack_port,
                      .ncand = (uint8_t)ncand};
    memcpy(d->cand, cand, ncand * sizeof(cand[0]));
    udp_dest_use(u, d, 0, pa.ack_port);
    *dest_p = slot;
    return SX_OK;
}

static size_t udp_dest_mtu(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (dest >= u->ndests || !u->dests[dest].live)
        return iface->caps.mtu;
    return u->dests[dest].mtu;
}

SX_HOT static bool udp_dest_local(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (dest >= u->ndests || !u->dests[dest].live)
        return false;
    const udp_sa_t *sa = &u->dests[dest].sa;
    if (sa->sa.sa_family == AF_INET)
        return sx_in4_loopback(sa->in4.sin_addr);
    return sa->sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&sa->in6.sin6_addr);
}

static void udp_ecn_report(sx_tl_iface_t *iface)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (!u->ecn || u->ecn_report)
        return;
    u->ecn_report = true; /* once, whatever the kernel answers (it warns) */
    (void)sx_udp_ecn_recv(u->fd, AF_INET);
    u->rx.cmsg = true;
    if (u->fd6 >= 0) {
        (void)sx_udp_ecn_recv(u->fd6, AF_INET6);
        u->rx6.cmsg = true;
    }
    if (u->hot_fd >= 0) {
        (void)sx_udp_ecn_recv(u->hot_fd, AF_INET);
        u->hot_rx.cmsg = true;
    }
}

static uint64_t udp_dest_host(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    const uint8_t *ip;
    size_t n;

    if (dest >= u->ndests)
        return 1;
    const udp_sa_t *sa = &u->dests[dest].sa;
    if (sa->sa.sa_family == AF_INET6) {
        ip = sa->in6.sin6_addr.s6_addr;
        n = sizeof(sa->in6.sin6_addr);
    } else {
        ip = (const uint8_t *)&sa->in4.sin_addr;
        n = sizeof(sa->in4.sin_addr);
    }
    /* FNV-1a over the address alone: every port of the host is one key. */
    uint64_t h = 0xcbf29ce484222325ull ^ sa->sa.sa_family;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ip[i]) * 0x100000001b3ull;
    return h != 0 ? h : 1;
}

static void udp_dest_str(sx_tl_iface_t *iface, sx_tl_dest_t dest, char *buf, size_t cap)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (dest >= u->ndests || !u->dests[dest].live) {
        snprintf(buf, cap, "(no udp destination %u)", (unsigned)dest);
        return;
    }
    sx_udp_sa_str(&u->dests[dest].sa, buf, cap);
}

static int udp_addr_next(sx_tl_iface_t *iface, sx_tl_dest_t dest, char *why, size_t cap)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    char from[64], to[64];

    if (dest >= u->ndests || !u->dests[dest].live)
        return SX_ERR_INVALID_PARAM;
    udp_dest_t *d = &u->dests[dest];
    if (d->ncand < 2)
        return SX_ERR_NOT_FOUND;
    unsigned next = (d->cur + 1u) % d->ncand;
    uint16_t ack_port = d->has_ack ? d->ack_port : 0;
    sx_udp_sa_str(&d->sa, from, sizeof(from));
    sx_udp_hot_forget(u, dest); /* its hot socket is connected to the old address */
    udp_dest_use(u, d, next, ack_port);
    sx_udp_sa_str(&d->sa, to, sizeof(to));
    snprintf(why, cap, "%s -> %s", from, to);
    return next == 0 ? SX_ERR_NOT_FOUND : SX_OK;
}

/* Whether @p a and @p b name the same IP address (ports aside). */
static bool udp_same_ip(const udp_sa_t *a, const udp_sa_t *b)
{
    if (a->sa.sa_family != b->sa.sa_family)
        return false;
    if (a->sa.sa_family == AF_INET)
        return a->in4.sin_addr.s_addr == b->in4.sin_addr.s_addr;
    return a->sa.sa_family == AF_INET6 &&
           memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, sizeof(a->in6.sin6_addr)) == 0;
}

/*
 * Only the IP address is compared: a peer sends from its data socket, its
 * ACK socket or a connected send socket with a port of the kernel's
 * choosing. A peer on this host (its candidates start with loopback) may
 * also send from 127.0.0.1 or ::1 (to our loopback) or any of this
 * host's addresses that we offer, which is what the kernel picks as the
 * source of a datagram to one of them; the rest of 127/8 is no one's.
 */
SX_HOT static bool udp_src_matches(sx_tl_iface_t *iface, sx_tl_dest_t dest, const void *src,
                                   size_t src_len)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    udp_sa_t from;

    if (dest >= u->ndests || !u->dests[dest].live || src_len > sizeof(from) ||
        src_len < sizeof(sa_family_t))
        return false;
    const udp_dest_t *d = &u->dests[dest];
    if (src_len == sizeof(from.in4) && d->ncand > 0 && d->cand[0].sa.sa_family == AF_INET) {
        /* Every datagram is checked, on the way to its delivery: the usual
         * one, IPv4 from the first candidate, in two loads (the general
         * path below is ~90 instructions; callgrind of sx_bench latency). */
        memcpy(&from.in4, src, sizeof(from.in4));
        if (from.in4.sin_family == AF_INET &&
            from.in4.sin_addr.s_addr == d->cand[0].in4.sin_addr.s_addr)
            return true;
    }
    memset(&from, 0, sizeof(from));
    memcpy(&from, src, src_len);
    for (unsigned i = 0; i < d->ncand; i++)
        if (udp_same_ip(&from, &d->cand[i]))
            return true;
    bool same_host = d->ncand > 0 && d->cand[0].sa.sa_family == AF_INET &&
                     d->cand[0].in4.sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    if (!same_host)
        return false;
    if (from.sa.sa_family == AF_INET && from.in4.sin_addr.s_addr == htonl(INADDR_LOOPBACK))
        return true;
    if (from.sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&from.in6.sin6_addr))
        return true;
    for (unsigned i = 0; i < u->nladdrs; i++) {
        const udp_ip_t *ip = &u->laddrs[i].ip;
        if (ip->family == AF_INET && from.sa.sa_family == AF_INET &&
            ip->v4.s_addr == from.in4.sin_addr.s_addr)
            return true;
        if (ip->family == AF_INET6 && from.sa.sa_family == AF_INET6 &&
            memcmp(&ip->v6, &from.in6.sin6_addr, sizeof(ip->v6)) == 0)
            return true;
    }
    return false;
}

static void udp_addr_remove(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (dest >= u->ndests || !u->dests[dest].live)
        return;
    sx_udp_hot_forget(u, dest);
    if (u->dests[dest].tx_fd >= 0) {
        close(u->dests[dest].tx_fd);
        u->dests[dest].tx_fd = -1;
        u->connected--;
    }
    u->dests[dest].live = false;
    u->dests[dest].next_free = u->free_head;
    u->free_head = dest;
}

/*
 * Checks one tx and fills its message header; SX_OK or why it is refused.
 * *fd_p is the socket it goes out on; *ctrl_p says whether it takes the
 * ACK path (our ACK socket, the peer's ACK port, or both).
 */
static int udp_prepare(udp_iface_t *u, const sx_tl_tx_t *tx, struct mmsghdr *m, int *fd_p,
                       bool *ctrl_p)
{
    size_t len = 0;

    if (tx->dest >= u->ndests || !u->dests[tx->dest].live || tx->iovcnt > SX_TL_IOV_MAX)
        return SX_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > u->base.caps.mtu - len)
            return SX_ERR_INVALID_PARAM;
        len += tx->iov[i].iov_len;
    }
    const udp_dest_t *d = &u->dests[tx->dest];
    bool v6 = d->sa.sa.sa_family == AF_INET6;
    if (u->hot_fd >= 0)
        sx_udp_hot_track(u, tx->dest, d, len);
    /* is_control is asked only when an ACK path exists, so an interface
     * and a peer without ACK sockets pay nothing for the feature; it
     * serves IPv4 destinations only. */
    bool ctrl = !v6 && (u->ack_fd >= 0 || d->has_ack) && u->is_control != NULL && tx->iovcnt > 0 &&
                len <= UDP_CTRL_MAX && u->is_control(tx->iov[0].iov_base, tx->iov[0].iov_len);
    memset(m, 0, sizeof(*m));
    /* sendmsg(2) only reads the iovec; the cast drops a const it keeps. */
    m->msg_hdr.msg_iov = (struct iovec *)tx->iov;
    m->msg_hdr.msg_iovlen = tx->iovcnt;
    *ctrl_p = ctrl;
    if (ctrl && u->ack_fd >= 0) {
        *fd_p = u->ack_fd;
    } else if (!ctrl && tx->dest == u->hot_dest) {
        *fd_p = u->hot_fd; /* connected: no address */
        return SX_OK;
    } else if (!ctrl && d->tx_fd >= 0) {
        *fd_p = d->tx_fd; /* connected: no address */
        return SX_OK;
    } else {
        *fd_p = v6 ? u->fd6 : u->fd;
    }
    m->msg_hdr.msg_name = (void *)(ctrl ? &d->ack_sa : &d->sa);
    m->msg_hdr.msg_namelen = udp_sa_len(&d->sa);
    return SX_OK;
}

/* What a failed send means for the tx it failed on. */
static int udp_send_errno(int err)
{
    if (sx_udp_errno_no_room(err))
        return SX_ERR_AGAIN;
    switch (err) {
    case EMSGSIZE:
        return SX_ERR_INVALID_PARAM;
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
    case EACCES:
    case EPERM:
    case EADDRNOTAVAIL:
        return SX_ERR_PEER_UNREACHABLE;
    default:
        sx_warn("udp", "sendmmsg: %s", strerror(err));
        return SX_ERR_IO;
    }
}

/* Sends msgs[0..n) through @p fd (@p connected: a destination's own
 * socket); sets *sent_p to how many the kernel took. */
SX_HOT static int udp_sendmmsg(udp_iface_t *u, int fd, bool connected, struct mmsghdr *msgs,
                               unsigned n, unsigned *sent_p, int *err_p)
{
    unsigned sent = 0, refused = 0;
    bool retried = false; /* msgs[sent] already met one stale error */
    int status = SX_OK;

    while (sent < n) {
        int rc = n - sent == 1 ? sx_udp_send1(fd, &msgs[sent].msg_hdr, MSG_DONTWAIT)
                               : sx_udp_sendmmsg(fd, msgs + sent, n - sent, MSG_DONTWAIT);
        if (rc > 0) {
            sent += (unsigned)rc;
            retried = false;
            continue;
        }
        int err = rc == 0 ? EAGAIN : -rc;
        if (err == EINTR)
            continue;
        /* A stale ICMP report (see the top of the file): ECONNREFUSED on
         * any socket, and on a connected one any error but "no room" the
         * first time a datagram meets it. */
        bool stale = err == ECONNREFUSED || (connected && !retried && !sx_udp_errno_no_room(err));
        if (stale && refused++ < UDP_REFUSED_RETRIES) {
            retried = true;
            /* The report consumed the socket's pending error and concerns
             * an earlier datagram; this one was not sent yet. */
            u->base.stats.tx_refused++;
            continue;
        }
        *err_p = err;
        status = err == ECONNREFUSED ? SX_ERR_AGAIN : udp_send_errno(err);
        break;
    }
    *sent_p = sent;
    return status;
}

/*
 * UDP GSO: merges runs of msgs[0..n) into single messages that carry a
 * UDP_SEGMENT control message: a run is two or more data datagrams (not
 * the ACK path) to one destination whose lengths are all L but the last,
 * which is at most L; the kernel cuts the message back into those
 * datagrams, in order, as late as the device allows (udp(7), UDP_SEGMENT;
 * a bulk flush is a run of full packets). Writes the merged messages to
 * out[] (their iovecs into iov[], which has room for iov_cap, control into
 * cm[]), how many txs each carries to per[], and returns how many
 * messages. A merged message takes two datagrams at least, so cm[] needs
 * room for n / 2. Adds to *joined the datagrams whose bytes followed the
 * previous one's in memory and so went into its iovec.
 */
static unsigned udp_gso_merge(const struct mmsghdr *msgs, const bool *ctrl, unsigned n,
                              struct mmsghdr *out, unsigned *per, struct iovec *iov,
                              unsigned iov_cap, udp_gso_cmsg_t *cm, uint64_t *joined)
{
    unsigned m = 0, used = 0, nc = 0;

    for (unsigned i = 0; i < n;) {
        const struct msghdr *h = &msgs[i].msg_hdr;
        size_t seg = 0;
        for (size_t k = 0; k < h->msg_iovlen; k++)
            seg += h->msg_iov[k].iov_len;
        unsigned j = i + 1;
        size_t total = seg, iovs = h->msg_iovlen;
        while (!ctrl[i] && j < n && j - i < UDP_GSO_SEGS && !ctrl[j] &&
               msgs[j].msg_hdr.msg_name == h->msg_name) {
            size_t len = 0;
            for (size_t k = 0; k < msgs[j].msg_hdr.msg_iovlen; k++)
                len += msgs[j].msg_hdr.msg_iov[k].iov_len;
            if (len > seg || total + len > UDP_GSO_BYTES ||
                iovs + msgs[j].msg_hdr.msg_iovlen > iov_cap - used)
                break;
            total += len;
            iovs += msgs[j].msg_hdr.msg_iovlen;
            j++;
            if (len < seg)
                break; /* a shorter one ends the run */
        }
        if (j - i < 2 || seg == 0) {
            out[m] = msgs[i];
            per[m++] = 1;
            i++;
            continue;
        }
        /* A datagram whose bytes follow the last iovec's in memory extends
         * it: the kernel's copy pays per iovec (chan_pkt.c, Arenas). */
        struct iovec *dst = iov + used;
        for (unsigned k = i; k < j; k++) {
            const struct msghdr *mk = &msgs[k].msg_hdr;
            for (size_t q = 0; q < mk->msg_iovlen; q++) {
                const struct iovec *v = &mk->msg_iov[q];
                if (iov + used > dst) {
                    struct iovec *last = iov + used - 1;
                    if ((const uint8_t *)last->iov_base + last->iov_len ==
                        (const uint8_t *)v->iov_base) {
                        last->iov_len += v->iov_len;
                        *joined += q == 0;
                        continue;
                    }
                }
                iov[used++] = *v;
            }
        }
        udp_gso_cmsg_t *c = &cm[nc++];
        memset(c, 0, sizeof(*c));
        struct cmsghdr *ch = &c->align;
        ch->cmsg_level = SOL_UDP;
        ch->cmsg_type = UDP_SEGMENT;
        ch->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t s16 = (uint16_t)seg;
        memcpy(CMSG_DATA(ch), &s16, sizeof(s16));
        out[m] = (struct mmsghdr){.msg_hdr = {.msg_name = h->msg_name,
                                              .msg_namelen = h->msg_namelen,
                                              .msg_iov = dst,
                                              .msg_iovlen = (size_t)(iov + used - dst),
                                              .msg_control = c->buf,
                                              .msg_controllen = sizeof(c->buf)}};
        per[m++] = j - i;
        i = j;
    }
    return m;
}

/* Whether @p fd is a destination's connected send socket. */
static bool udp_fd_connected(const udp_iface_t *u, int fd)
{
    return fd != u->fd && fd != u->ack_fd && fd != u->fd6;
}

/* udp_post_send with the arrays of @p a. */
SX_HOT static int udp_post_batches(udp_iface_t *u, const sx_tl_tx_t *tx, unsigned count,
                                   unsigned *posted_p, const udp_tx_arrays_t *a)
{
    struct mmsghdr *msgs = a->msgs;
    bool *ctrl = a->ctrl;
    unsigned *per = a->per;
    unsigned done = 0;
    int status = SX_OK;

    while (done < count && status == SX_OK) {
        unsigned n = 0, sent = 0;
        int bad = SX_OK, fd = -1;

        /* Gather a batch for one socket, stopping before the first tx that
         * is refused so that the ones ahead of it still go out in order.
         * A batch ends where the socket changes (the ACK socket, or
         * another destination's connected socket): the datagrams of one
         * call leave in the order given, as the contract says, at the
         * price of a system call per run ([data..., ACK] to one peer is
         * the usual shape of a flush). A flush to K connected peers so
         * costs K calls where the shared socket took one; a call costs
         * far less than the kernel's work per datagram, part of which
         * (the route lookup) the connected socket saves on every one. */
        while (done + n < count && n < a->cap) {
            int this_fd;
            bad = udp_prepare(u, &tx[done + n], &msgs[n], &this_fd, &ctrl[n]);
            if (bad != SX_OK || (n > 0 && this_fd != fd))
                break;
            fd = this_fd;
            n++;
        }
        if (n > 0 && u->gso && n > 1) {
            /* At most one GSO message per two datagrams: cm[] has room. */
            unsigned m = udp_gso_merge(msgs, ctrl, n, a->merged, per, a->iov,
                                       a->cap * SX_TL_IOV_MAX, a->cm, &u->base.stats.tx_gso_joined);
            unsigned msent = 0;
            int err = 0;
            status = udp_sendmmsg(u, fd, udp_fd_connected(u, fd), a->merged, m, &msent, &err);
            for (unsigned k = 0; k < msent; k++) {
                sent += per[k];
                u->base.stats.tx_gso += per[k] > 1;
            }
            if (status != SX_OK && status != SX_ERR_AGAIN && msent < m && per[msent] > 1 &&
                (err == EINVAL || err == EIO || err == EOPNOTSUPP)) {
                /* The path refuses segmentation (a device or a kernel
                 * without it): datagram by datagram from now on. */
                sx_warn("udp", "UDP GSO refused (%s); sending datagram by datagram (SX_UDP_GSO)",
                        strerror(err));
                u->gso = false;
                status = SX_OK;
            }
        } else if (n > 0) {
            int err = 0;
            status = udp_sendmmsg(u, fd, udp_fd_connected(u, fd), msgs, n, &sent, &err);
        }
        if (n > 0) {
            done += sent;
            u->base.stats.tx_datagrams += sent;
            for (unsigned i = 0; i < sent; i++)
                u->base.stats.tx_ack_path += ctrl[i];
        }
        if (status == SX_OK)
            status = bad;
    }
    if (status == SX_ERR_AGAIN)
        u->base.stats.tx_again++;
    if (posted_p != NULL)
        *posted_p = done;
    return status;
}

SX_HOT static int udp_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                                unsigned *posted_p)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (count > UDP_TX_SMALL) {
        struct udp_tx_batch *b = u->txb;
        udp_tx_arrays_t a = {b->msgs, b->merged, b->iov, b->cm, b->per, b->ctrl, UDP_TX_BATCH};
        return udp_post_batches(u, tx, count, posted_p, &a);
    }
    struct mmsghdr msgs[UDP_TX_SMALL], merged[UDP_TX_SMALL];
    struct iovec iov[UDP_TX_SMALL * SX_TL_IOV_MAX];
    udp_gso_cmsg_t cm[UDP_TX_SMALL / 2];
    unsigned per[UDP_TX_SMALL];
    bool ctrl[UDP_TX_SMALL];
    udp_tx_arrays_t a = {msgs, merged, iov, cm, per, ctrl, UDP_TX_SMALL};
    return udp_post_batches(u, tx, count, posted_p, &a);
}

/* udp_poll's reads, socket by socket. */
static int udp_poll_sockets(udp_iface_t *u, sx_tl_event_t *events, unsigned max)
{
    int got = 0;

    if (u->ack_fd >= 0) {
        /* ACKs first: they free window and stop retransmissions that data
         * queued ahead of them would otherwise delay. A quarter of the
         * room stays for data, so a flood on the ACK port cannot starve
         * it. The two sockets have separate buffers, so the events of both
         * stay valid until the next poll. A landing is for data: the ACK
         * socket's read leaves it to the data socket's. */
        unsigned land = u->land_n;
        u->land_n = 0;
        got = sx_udp_rx_poll(u, &u->ack_rx, events, max - max / 4);
        u->land_n = land;
        if (got < 0)
            return got;
        u->base.stats.rx_ack_socket += (unsigned)got;
    }
    int n = sx_udp_hot_poll(u, events + got, max - (unsigned)got);
    if (n < 0)
        return n;
    got += n;
    /* An IPv6 socket not read in this poll (below: now and then until it
     * first gets a datagram) counts as empty: that datagram is a CONNECT,
     * resent anyway. So do the data and hot sockets when skipped (their
     * quiet turns come every UDP_HOT_QUIET_POLLS to UDP_HOT_QUIET_MAX
     * polls, udp_hot_quiet_every). */
    u->base.rx_left |= (u->ack_fd >= 0 && u->ack_rx.left);
    /* The IPv6 socket, until it first gets a datagram, only every
     * UDP_V6_QUIET_POLLS calls: a peer on this host or an IPv4 network
     * never uses it, and reading it at every poll was a second empty
     * recvmsg per pass of a busy-polling caller (strace of sx_bench
     * latency: as many as on the IPv4 socket), which is time between a
     * datagram's arrival and its read. Every 16th poll was still one
     * empty recvmsg in 16 (1.2-1.3 us here), which a datagram arriving
     * then waited out: every 256th took sx_bench latency --size 8 from
     * 5.31 to 5.15 us (median of 16 interleaved pairs; faster in 12).
     * Its first datagram (an IPv6 peer's CONNECT, which is retransmitted
     * anyway) waits at most that many polls, under half a millisecond of
     * busy polling; a sleeper waits on it too (wait_fds), which keeps
     * waking it until it is read. A read that leaves datagrams pending (the
     * rest of a GRO read) also sets v6_seen, so the test needs no look at
     * rx6's state. */
    if (u->fd6 >= 0 && (unsigned)got < max &&
        (u->v6_seen || ++u->v6_polls % UDP_V6_QUIET_POLLS == 0)) {
        /* Each socket has buffers of its own: the events of all stay
         * valid until the next poll. */
        n = sx_udp_rx_poll(u, &u->rx6, events + got, max - (unsigned)got);
        if (n < 0)
            return n;
        u->v6_seen |= n > 0 || u->rx6.pend_n != 0;
        u->base.rx_left |= u->rx6.left;
        got += n;
    }
    return got;
}

SX_HOT_PASS SX_RET_AFTER_SYSCALL static int udp_poll(sx_tl_iface_t *iface, sx_tl_event_t *events,
                                                     unsigned max)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    int got = udp_poll_sockets(u, events, max);

    u->land_n = 0; /* an offer lasts one poll, also one that fails */
    return got;
}

static void udp_land(sx_tl_iface_t *iface, size_t head, const struct iovec *spans, unsigned nspans,
                     size_t step)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    u->land_head = head;
    u->land_step = step;
    u->land_n = 0;
    for (unsigned i = 0; i < nspans && i < SX_TL_LAND_SPANS && step != 0; i++)
        if (spans[i].iov_len != 0)
            u->land_spans[u->land_n++] = spans[i];
}

/* Every socket the interface reads: the data socket, then the ACK socket,
 * the IPv6 one and the hot one where they exist. It used to hand out one epoll fd
 * over them, which cost every datagram that arrived a wake-up callback in
 * the kernel (in the sender's sendto, over loopback) whether or not
 * anybody slept: docs/tuning.md, "Where a small message's time goes". */
static unsigned udp_wait_fds(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS])
{
    udp_iface_t *u = (udp_iface_t *)iface;
    unsigned n = 0;

    fds[n++] = u->fd;
    if (u->ack_fd >= 0)
        fds[n++] = u->ack_fd;
    if (u->fd6 >= 0)
        fds[n++] = u->fd6;
    if (u->hot_fd >= 0)
        fds[n++] = u->hot_fd;
    return n;
}

static int udp_arm(sx_tl_iface_t *iface)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    /* The next poll reads every socket, also one quiet and not at its turn
     * (udp_hot.c): a sleeper woken for its datagram must find it. */
    u->hot_all = true;
    /* Datagrams of a GRO read that did not fit the last poll's events are
     * in our buffers, not the socket's: the fd will not announce them. */
    return u->rx.pend_n != 0 || u->ack_rx.pend_n != 0 || u->rx6.pend_n != 0 || u->hot_rx.pend_n != 0
               ? SX_ERR_AGAIN
               : SX_OK;
}

const sx_tl_ops_t sx_tl_udp_ops = {
    .name = "udp",
    .exclusivity = SX_TL_EXCL_SOCKETS,
    /* Describes the binding; available unless SX_NET_DEVICES names an
     * interface that does not exist here or none with an IPv4 address
     * (open reports a bad SX_BIND_ADDR). Reads the interfaces
     * (getifaddrs) when the list is set; any thread. */
    .query = udp_query,
    /* Without SX_NET_DEVICES: none (0). With it: the named interfaces
     * that have an IPv4 address, in the list's order, warning about each
     * skipped; a negative status, logged, when the query's check no
     * longer holds. Any thread; reads the interfaces. */
    .devices = udp_devices,
    /* Creates, sizes and binds the data socket, to config->device's IPv4
     * address when the engine chose a device, else to bind_addr (and the
     * ACK socket when config->ack_socket is set); may
     * block briefly;
     * allocates UDP_RX_BATCH receive buffers of mtu bytes (and as many of
     * UDP_CTRL_MAX bytes for the ACK socket). */
    .open = udp_open,
    /* Closes the sockets and frees the buffers; token holder. */
    .close = udp_close,
    /* Encodes the bound address (layout above); any thread, never blocks. */
    .local_addr = udp_local_addr,
    /* Validates the card bytes (kind 4 or 5), logs why they are refused,
     * chooses the peer's address (udp_addrs.c) and fills a table slot;
     * SX_ERR_PEER_UNREACHABLE, logged with both sides' addresses, when no
     * pair reaches; token holder; may allocate when the table grows. */
    .addr_insert = udp_addr_insert,
    .addr_str = udp_addr_str,
    /* Decodes the bytes and checks that a pair of addresses reaches,
     * without inserting them or logging; any thread. */
    .addr_check = udp_addr_check,
    /* Frees the slot for reuse; later sends to it fail; token holder. */
    .addr_remove = udp_addr_remove,
    /* The route's MTU, asked of the kernel at insert (IP_MTU); token
     * holder; never blocks. */
    .dest_mtu = udp_dest_mtu,
    .dest_local = udp_dest_local,
    .dest_host = udp_dest_host,
    /* IP_RECVTOS (and IPV6_RECVTCLASS) on the data sockets, once; token
     * holder. */
    .ecn_report = udp_ecn_report,
    /* "udp a.b.c.d:port" of the candidate in use; token holder. */
    .dest_str = udp_dest_str,
    /* The next candidate (udp_addrs.c: loopback on this host, same subnet,
     * routed), with a connected socket of its own when the budget allows;
     * token holder; makes and closes sockets. */
    .addr_next = udp_addr_next,
    /* The source's IP address against the peer's card addresses (and,
     * for a peer on this host, loopback and ours); token holder. */
    .src_matches = udp_src_matches,
    /* sendmmsg (sendto or sendmsg for one datagram) with MSG_DONTWAIT,
     * one call per run of datagrams for the same socket (the data
     * socket, the ACK socket or a destination's connected one); the
     * kernel has copied the data when it returns (sync_send), so the
     * caller owns its buffers again; token holder; never blocks. Calls
     * config->is_control on iov[0] of each datagram when an ACK path
     * exists to its destination. */
    .post_send = udp_post_send,
    /* recvmsg, or recvmmsg while datagrams come back to back, with
     * MSG_DONTWAIT into the interface's own buffers, which stay valid
     * until the next poll, the ACK socket first; token holder; never
     * blocks. */
    .poll = udp_poll,
    /* The buffers of the next data read (IPv4, else IPv6) scatter around
     * the landings: three iovecs each, no extra system call; a
     * GRO-coalesced read copies its landing back. Token holder. */
    .land = udp_land,
    /* The data socket, then the ACK and IPv6 sockets where they exist:
     * one is readable when a datagram is queued on it; any thread. */
    .wait_fds = udp_wait_fds,
    /* SX_ERR_AGAIN while a GRO read left datagrams for the next poll;
     * token holder; never blocks. */
    .arm = udp_arm,
};
