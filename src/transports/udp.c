/*
 * udp: the embedded default transport (DESIGN.md sections 2 and 4).
 *
 * One nonblocking IPv4 UDP socket per interface. Sends go out in batches
 * through sendmmsg(2) and receives come in batches through recvmmsg(2), so
 * a busy shard pays one system call per batch, not per datagram.
 *
 * Address (the business-card bytes), 8 bytes, fixed layout:
 *
 *   offset  size  field
 *   0       1     family: 4 = IPv4 (no other value is accepted yet)
 *   1       1     reserved, must be 0
 *   2       2     UDP port, little-endian, never 0
 *   4       4     IPv4 address in network byte order (a.b.c.d as a, b, c, d),
 *                 never 0.0.0.0
 *
 * Binding: config->bind_addr is "a.b.c.d" or "a.b.c.d:port" (port 0 or no
 * port lets the kernel choose); NULL means 127.0.0.1. The wildcard address
 * is refused because the card must name an address a peer can reach; IPv6
 * is not supported yet.
 *
 * MTU: IPv4 allows 65507 bytes of UDP payload (RFC 791 total length minus
 * 28 bytes of headers). On loopback the mtu is 65000, which leaves that
 * ceiling some slack. Elsewhere it is the interface MTU (SIOCGIFMTU on the
 * interface that owns the bind address) minus 28, capped at 65000, or 1472
 * (Ethernet's 1500 minus 28) when the interface cannot be found: a larger
 * datagram would be fragmented, and one lost fragment loses all of it.
 *
 * ICMP errors: an unconnected Linux UDP socket without IP_RECVERR ignores
 * ICMP port-unreachable (see udp(7), "ERROR HANDLING"), which is what we
 * want: a peer that went away must not fail the interface. Should a kernel
 * report ECONNREFUSED anyway, it refers to some earlier datagram; it is
 * counted in stats.tx_refused and the call goes on, and the reliability
 * layer above retransmits or gives up on the peer.
 */
#include "transports/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <shardx.h>

#include "common/log.h"

#define UDP_ADDR_LEN        8
#define UDP_ADDR_IPV4       4
#define UDP_MTU_LOOPBACK    65000
#define UDP_MTU_MAX         65000
#define UDP_MTU_DEFAULT     1472 /* 1500 - 20 (IPv4 header) - 8 (UDP header) */
#define UDP_HEADERS         28
#define UDP_TX_CREDITS      256
#define UDP_TX_BATCH        64 /* mmsghdrs per sendmmsg call */
#define UDP_RX_BATCH        32 /* receive buffers, each of mtu bytes */
#define UDP_REFUSED_RETRIES 16 /* ECONNREFUSED reports skipped per call */
#define UDP_DEST_FREE_END   UINT32_MAX

typedef struct udp_dest {
    struct sockaddr_in sa;
    uint32_t next_free; /* link in the free list while !live */
    bool live;
} udp_dest_t;

/* Room for the SO_RXQ_OVFL control message, aligned for struct cmsghdr. */
typedef union udp_ctrl {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(uint32_t))];
} udp_ctrl_t;

typedef struct udp_iface {
    sx_tl_iface_t base;
    int fd;
    struct sockaddr_in local;

    /* Destination table: slots are reused through a free list. */
    udp_dest_t *dests;
    uint32_t ndests; /* slots in use or free, below cap */
    uint32_t cap;
    uint32_t free_head;

    /* Receive side: UDP_RX_BATCH buffers of mtu bytes; the events of one
     * poll point into them until the next poll. */
    uint8_t *rx_mem;
    struct mmsghdr rx_msgs[UDP_RX_BATCH];
    struct iovec rx_iov[UDP_RX_BATCH];
    udp_ctrl_t rx_ctrl[UDP_RX_BATCH];
    uint32_t last_ovfl; /* the socket's drop counter as last reported */
} udp_iface_t;

/* ------------------------------------------------------------------ */
/* Set-up helpers                                                      */

/* Parses "a.b.c.d" or "a.b.c.d:port" into @p sa. */
static int udp_parse_bind(const char *text, struct sockaddr_in *sa)
{
    char host[INET_ADDRSTRLEN + 1];
    const char *colon = strchr(text, ':');
    size_t hostlen = colon != NULL ? (size_t)(colon - text) : strlen(text);
    unsigned long port = 0;

    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (colon != NULL && strchr(colon + 1, ':') != NULL) {
        sx_error("udp",
                 "bind address '%s' looks like IPv6, which udp does not support yet; "
                 "allowed: an IPv4 address, optionally with :port",
                 text);
        return SX_ERR_UNSUPPORTED;
    }
    if (hostlen == 0 || hostlen >= sizeof(host))
        goto bad;
    memcpy(host, text, hostlen);
    host[hostlen] = '\0';
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        goto bad;
    if (colon != NULL) {
        char *end = NULL;
        if (colon[1] < '0' || colon[1] > '9')
            goto bad;
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (errno != 0 || *end != '\0' || port > 65535)
            goto bad;
    }
    if (sa->sin_addr.s_addr == htonl(INADDR_ANY)) {
        sx_error("udp",
                 "bind address '%s' is the wildcard; allowed: a concrete local IPv4 "
                 "address, since peers must be told where to send",
                 text);
        return SX_ERR_INVALID_PARAM;
    }
    sa->sin_port = htons((uint16_t)port);
    return SX_OK;
bad:
    sx_error("udp",
             "bind address '%s' is not valid; allowed: an IPv4 address a.b.c.d, "
             "optionally with :port (0-65535)",
             text);
    return SX_ERR_INVALID_PARAM;
}

/* Finds the MTU of the interface that owns @p addr; 0 when unknown. */
static size_t udp_ifmtu(int fd, const struct in_addr *addr)
{
    struct ifaddrs *list = NULL;
    size_t mtu = 0;

    if (getifaddrs(&list) != 0)
        return 0;
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != AF_INET)
            continue;
        const struct sockaddr_in *sin = (const struct sockaddr_in *)(void *)ifa->ifa_addr;
        if (sin->sin_addr.s_addr != addr->s_addr)
            continue;
        struct ifreq ifr;
        memset(&ifr, 0, sizeof(ifr));
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifa->ifa_name);
        if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > UDP_HEADERS)
            mtu = (size_t)ifr.ifr_mtu - UDP_HEADERS;
        break;
    }
    freeifaddrs(list);
    return mtu;
}

static size_t udp_pick_mtu(int fd, const struct sockaddr_in *local)
{
    /* All of 127.0.0.0/8 is loopback (RFC 1122 section 3.2.1.3). */
    if ((ntohl(local->sin_addr.s_addr) >> 24) == 127)
        return UDP_MTU_LOOPBACK;
    size_t mtu = udp_ifmtu(fd, &local->sin_addr);
    if (mtu == 0)
        return UDP_MTU_DEFAULT;
    return mtu < UDP_MTU_MAX ? mtu : UDP_MTU_MAX;
}

/*
 * Raises one socket buffer. SO_*BUFFORCE ignores net.core.[rw]mem_max but
 * needs CAP_NET_ADMIN; without it the plain option is capped at that
 * sysctl (socket(7)). The kernel doubles the value for its bookkeeping, so
 * what getsockopt reports is about twice what was asked.
 */
static void udp_set_buf(int fd, size_t want, int force_opt, int opt, const char *what)
{
    int val = want > INT_MAX / 2 ? INT_MAX / 2 : (int)want;
    int got = 0;
    socklen_t len = sizeof(got);

    if (want == 0)
        return;
    if (setsockopt(fd, SOL_SOCKET, force_opt, &val, sizeof(val)) != 0 &&
        setsockopt(fd, SOL_SOCKET, opt, &val, sizeof(val)) != 0)
        sx_debug("udp", "setting %s to %d failed: %s", what, val, strerror(errno));
    if (getsockopt(fd, SOL_SOCKET, opt, &got, &len) == 0)
        sx_debug("udp", "%s: asked for %zu bytes, the kernel reports %d", what, want, got);
}

/* ------------------------------------------------------------------ */
/* Ops                                                                 */

static void udp_close(sx_tl_iface_t *iface);

static int udp_open(const sx_tl_config_t *config, sx_tl_iface_t **iface_p)
{
    struct sockaddr_in bind_sa;
    int status;

    if (config == NULL || iface_p == NULL)
        return SX_ERR_INVALID_PARAM;
    status = udp_parse_bind(config->bind_addr != NULL ? config->bind_addr : "127.0.0.1", &bind_sa);
    if (status != SX_OK)
        return status;

    udp_iface_t *u = calloc(1, sizeof(*u));
    if (u == NULL)
        return SX_ERR_NO_MEMORY;
    u->base.ops = &sx_tl_udp_ops;
    u->free_head = UDP_DEST_FREE_END;
    u->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (u->fd < 0) {
        sx_error("udp", "socket: %s", strerror(errno));
        status = errno == ENOMEM || errno == ENOBUFS ? SX_ERR_NO_MEMORY : SX_ERR_IO;
        goto fail;
    }
    udp_set_buf(u->fd, config->rcvbuf, SO_RCVBUFFORCE, SO_RCVBUF, "SO_RCVBUF");
    udp_set_buf(u->fd, config->sndbuf, SO_SNDBUFFORCE, SO_SNDBUF, "SO_SNDBUF");

    /* SO_RXQ_OVFL attaches the socket's drop count to every datagram read,
     * so loss in the network can be told from overflow here (socket(7)). */
    int one = 1;
    if (setsockopt(u->fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one)) != 0)
        sx_debug("udp", "SO_RXQ_OVFL unavailable (%s); kernel drops will not be counted",
                 strerror(errno));

    if (bind(u->fd, (const struct sockaddr *)&bind_sa, sizeof(bind_sa)) != 0) {
        int err = errno;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &bind_sa.sin_addr, ip, sizeof(ip));
        sx_error("udp", "bind to %s:%u: %s", ip, ntohs(bind_sa.sin_port), strerror(err));
        status = err == EADDRINUSE      ? SX_ERR_EXISTS
                 : err == EADDRNOTAVAIL ? SX_ERR_INVALID_PARAM
                                        : SX_ERR_IO;
        goto fail;
    }
    socklen_t salen = sizeof(u->local);
    if (getsockname(u->fd, (struct sockaddr *)&u->local, &salen) != 0) {
        sx_error("udp", "getsockname: %s", strerror(errno));
        status = SX_ERR_IO;
        goto fail;
    }

    size_t mtu = udp_pick_mtu(u->fd, &u->local);
    u->base.caps = (sx_tl_caps_t){
        .mtu = mtu,
        .inline_limit = mtu,
        .tx_credits = UDP_TX_CREDITS,
        .sync_send = 1,
    };
    u->rx_mem = malloc(mtu * UDP_RX_BATCH);
    if (u->rx_mem == NULL) {
        status = SX_ERR_NO_MEMORY;
        goto fail;
    }
    for (unsigned i = 0; i < UDP_RX_BATCH; i++) {
        u->rx_iov[i] = (struct iovec){.iov_base = u->rx_mem + i * mtu, .iov_len = mtu};
        u->rx_msgs[i].msg_hdr.msg_iov = &u->rx_iov[i];
        u->rx_msgs[i].msg_hdr.msg_iovlen = 1;
    }
    sx_debug("udp", "shard %u: bound to port %u, mtu %zu", config->shard, ntohs(u->local.sin_port),
             mtu);
    *iface_p = &u->base;
    return SX_OK;
fail:
    udp_close(&u->base);
    return status;
}

static void udp_close(sx_tl_iface_t *iface)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (u == NULL)
        return;
    if (u->fd >= 0)
        close(u->fd);
    free(u->rx_mem);
    free(u->dests);
    free(u);
}

static int udp_local_addr(sx_tl_iface_t *iface, void *buf, size_t *len_p)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    uint8_t *out = buf;
    uint16_t port = ntohs(u->local.sin_port);

    if (buf == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (*len_p < UDP_ADDR_LEN)
        return SX_ERR_TRUNCATED;
    out[0] = UDP_ADDR_IPV4;
    out[1] = 0;
    out[2] = (uint8_t)(port & 0xff);
    out[3] = (uint8_t)(port >> 8);
    memcpy(out + 4, &u->local.sin_addr.s_addr, 4); /* already network order */
    *len_p = UDP_ADDR_LEN;
    return SX_OK;
}

static void udp_addr_str(sx_tl_iface_t *iface, const void *addr, size_t len, char *buf, size_t cap)
{
    (void)iface;
    const uint8_t *in = addr;
    char ip[INET_ADDRSTRLEN];

    if (addr == NULL || len != UDP_ADDR_LEN || in[0] != UDP_ADDR_IPV4 ||
        inet_ntop(AF_INET, in + 4, ip, sizeof(ip)) == NULL) {
        snprintf(buf, cap, "(malformed udp address of %zu bytes)", len);
        return;
    }
    snprintf(buf, cap, "udp %s:%u", ip, (unsigned)(in[2] | (unsigned)in[3] << 8));
}

/* Decodes card bytes into @p sa; SX_ERR_INVALID_PARAM for anything but a
 * well-formed address. The bytes come from a peer's business card: every
 * field is checked. */
static int udp_decode(const void *addr, size_t len, struct sockaddr_in *sa)
{
    const uint8_t *in = addr;

    if (addr == NULL || len != UDP_ADDR_LEN || in[0] != UDP_ADDR_IPV4 || in[1] != 0)
        return SX_ERR_INVALID_PARAM;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)(in[2] | (unsigned)in[3] << 8));
    memcpy(&sa->sin_addr.s_addr, in + 4, 4);
    if (sa->sin_port == 0 || sa->sin_addr.s_addr == htonl(INADDR_ANY))
        return SX_ERR_INVALID_PARAM;
    return SX_OK;
}

static int udp_addr_check(sx_tl_iface_t *iface, const void *addr, size_t len)
{
    struct sockaddr_in sa;

    (void)iface;
    return udp_decode(addr, len, &sa);
}

static int udp_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q)
{
    (void)named;
    q->exclusivity = SX_TL_EXCL_SOCKETS;
    snprintf(q->detail, sizeof(q->detail), "kernel UDP sockets on %s",
             config->bind_addr != NULL ? config->bind_addr : "127.0.0.1");
    return SX_OK;
}

static int udp_addr_insert(sx_tl_iface_t *iface, const void *addr, size_t len, sx_tl_dest_t *dest_p)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    struct sockaddr_in sa;
    uint32_t slot;

    if (dest_p == NULL || udp_decode(addr, len, &sa) != SX_OK)
        return SX_ERR_INVALID_PARAM;

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
    u->dests[slot] = (udp_dest_t){.sa = sa, .next_free = UDP_DEST_FREE_END, .live = true};
    *dest_p = slot;
    return SX_OK;
}

static void udp_addr_remove(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    udp_iface_t *u = (udp_iface_t *)iface;

    if (dest >= u->ndests || !u->dests[dest].live)
        return;
    u->dests[dest].live = false;
    u->dests[dest].next_free = u->free_head;
    u->free_head = dest;
}

/* Checks one tx and fills its message header; SX_OK or why it is refused. */
static int udp_prepare(udp_iface_t *u, const sx_tl_tx_t *tx, struct mmsghdr *m)
{
    size_t len = 0;

    if (tx->dest >= u->ndests || !u->dests[tx->dest].live || tx->iovcnt > SX_TL_IOV_MAX)
        return SX_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > u->base.caps.mtu - len)
            return SX_ERR_INVALID_PARAM;
        len += tx->iov[i].iov_len;
    }
    memset(m, 0, sizeof(*m));
    m->msg_hdr.msg_name = &u->dests[tx->dest].sa;
    m->msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
    /* sendmsg(2) only reads the iovec; the cast drops a const it keeps. */
    m->msg_hdr.msg_iov = (struct iovec *)tx->iov;
    m->msg_hdr.msg_iovlen = tx->iovcnt;
    return SX_OK;
}

/* What a failed send means for the tx it failed on. */
static int udp_send_errno(int err)
{
    switch (err) {
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case ENOBUFS:
    case ENOMEM:
        return SX_ERR_AGAIN;
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

/* Sends msgs[0..n); sets *sent_p to how many the kernel took. */
static int udp_sendmmsg(udp_iface_t *u, struct mmsghdr *msgs, unsigned n, unsigned *sent_p)
{
    unsigned sent = 0, refused = 0;
    int status = SX_OK;

    while (sent < n) {
        int rc = sendmmsg(u->fd, msgs + sent, n - sent, MSG_DONTWAIT);
        if (rc > 0) {
            sent += (unsigned)rc;
            continue;
        }
        int err = rc == 0 ? EAGAIN : errno;
        if (err == EINTR)
            continue;
        if (err == ECONNREFUSED && refused++ < UDP_REFUSED_RETRIES) {
            /* The report consumed the socket's pending error and concerns
             * an earlier datagram; this one was not sent yet. */
            u->base.stats.tx_refused++;
            continue;
        }
        status = err == ECONNREFUSED ? SX_ERR_AGAIN : udp_send_errno(err);
        break;
    }
    *sent_p = sent;
    return status;
}

static int udp_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                         unsigned *posted_p)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    struct mmsghdr msgs[UDP_TX_BATCH];
    unsigned done = 0;
    int status = SX_OK;

    while (done < count && status == SX_OK) {
        unsigned n = 0, sent = 0;
        int bad = SX_OK;

        /* Gather a batch, stopping before the first tx that is refused so
         * that the ones ahead of it still go out in order. */
        while (done + n < count && n < UDP_TX_BATCH) {
            bad = udp_prepare(u, &tx[done + n], &msgs[n]);
            if (bad != SX_OK)
                break;
            n++;
        }
        if (n > 0) {
            status = udp_sendmmsg(u, msgs, n, &sent);
            done += sent;
            u->base.stats.tx_datagrams += sent;
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

/* Reads the SO_RXQ_OVFL counter from one received datagram, if present. */
static void udp_read_ovfl(udp_iface_t *u, struct msghdr *h)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_RXQ_OVFL ||
            c->cmsg_len < CMSG_LEN(sizeof(uint32_t)))
            continue;
        uint32_t drops;
        memcpy(&drops, CMSG_DATA(c), sizeof(drops));
        /* The counter is the socket's running total and wraps at 2^32:
         * add the difference, computed modulo 2^32. */
        u->base.stats.rx_kernel_drops += (uint32_t)(drops - u->last_ovfl);
        u->last_ovfl = drops;
    }
}

static int udp_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max)
{
    udp_iface_t *u = (udp_iface_t *)iface;
    unsigned want = max < UDP_RX_BATCH ? max : UDP_RX_BATCH;
    unsigned refused = 0;
    int rc;

    if (want == 0)
        return 0;
    for (unsigned i = 0; i < want; i++) {
        struct msghdr *h = &u->rx_msgs[i].msg_hdr;
        /* recvmmsg writes these back; reset them for the next read. */
        h->msg_control = u->rx_ctrl[i].buf;
        h->msg_controllen = sizeof(u->rx_ctrl[i].buf);
        h->msg_flags = 0;
        u->rx_iov[i].iov_len = u->base.caps.mtu;
    }
    for (;;) {
        rc = recvmmsg(u->fd, u->rx_msgs, want, MSG_DONTWAIT, NULL);
        if (rc >= 0)
            break;
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK || err == ENOMEM || err == ENOBUFS)
            return 0;
        if (err == EINTR)
            continue;
        if (err == ECONNREFUSED && refused++ < UDP_REFUSED_RETRIES) {
            u->base.stats.tx_refused++;
            continue;
        }
        if (err == ECONNREFUSED)
            return 0;
        sx_error("udp", "recvmmsg: %s", strerror(err));
        return SX_ERR_IO;
    }

    unsigned n = 0;
    for (int i = 0; i < rc; i++) {
        struct msghdr *h = &u->rx_msgs[i].msg_hdr;
        udp_read_ovfl(u, h);
        if (h->msg_flags & MSG_TRUNC) {
            /* Longer than our mtu: a peer with another idea of the mtu, or
             * garbage. Never hand up a cut datagram. */
            u->base.stats.rx_truncated++;
            continue;
        }
        events[n++] = (sx_tl_event_t){
            .type = SX_TL_EV_RECV,
            .status = SX_OK,
            .data = u->rx_iov[i].iov_base,
            .len = u->rx_msgs[i].msg_len,
        };
    }
    u->base.stats.rx_datagrams += n;
    return (int)n;
}

static int udp_wait_fd(sx_tl_iface_t *iface)
{
    return ((udp_iface_t *)iface)->fd;
}

const sx_tl_ops_t sx_tl_udp_ops = {
    .name = "udp",
    .exclusivity = SX_TL_EXCL_SOCKETS,
    /* Describes the binding; always available (open reports a bad address). */
    .query = udp_query,
    /* Creates, sizes and binds the socket; may block briefly; allocates
     * UDP_RX_BATCH receive buffers of mtu bytes. */
    .open = udp_open,
    /* Closes the socket and frees the buffers; token holder. */
    .close = udp_close,
    /* Encodes the bound address (layout above); any thread, never blocks. */
    .local_addr = udp_local_addr,
    /* Validates 8 card bytes and fills a table slot; token holder; may
     * allocate when the table grows. */
    .addr_insert = udp_addr_insert,
    .addr_str = udp_addr_str,
    /* Decodes the 8 bytes without inserting them; any thread. */
    .addr_check = udp_addr_check,
    /* Frees the slot for reuse; later sends to it fail; token holder. */
    .addr_remove = udp_addr_remove,
    /* sendmmsg with MSG_DONTWAIT; the kernel has copied the data when it
     * returns (sync_send), so the caller owns its buffers again; token
     * holder; never blocks. */
    .post_send = udp_post_send,
    /* recvmmsg with MSG_DONTWAIT into the interface's own buffers, which
     * stay valid until the next poll; token holder; never blocks. */
    .poll = udp_poll,
    /* The socket itself: readable when a datagram is queued; any thread. */
    .wait_fd = udp_wait_fd,
};
