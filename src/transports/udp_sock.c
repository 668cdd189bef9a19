/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * udp_sock: the sockets of the udp transport. udp.c is the interface, its
 * card address and its data path; udp_int.h is what the two files share.
 * Here: the address a shard binds (SX_BIND_ADDR, or an SX_NET_DEVICES
 * interface), the mtu, creating and sizing the data and ACK sockets, and
 * the connected per-peer send sockets. It all runs inside open, query and
 * devices (any thread) or addr_insert (the token holder), as the ops table
 * in udp.c says.
 *
 * Binding: config->bind_addr is "a.b.c.d" or "a.b.c.d:port" (port 0 or no
 * port lets the kernel choose); NULL means 127.0.0.1. The wildcard address
 * is refused because the card must name an address a peer can reach; IPv6
 * is not supported yet. The ACK socket always takes a kernel-chosen port.
 *
 * Devices (SX_NET_DEVICES, config->net_devices): when the list is set,
 * udp's devices are the named interfaces that have an IPv4 address, in
 * the list's order; the engine gives each shard one (config->device, by
 * NIC locality) and open binds the shard's socket to that interface's
 * first IPv4 address, with a kernel-chosen port, instead of bind_addr.
 * The query fails with SX_ERR_NO_DEVICE when a name is not an interface
 * here, or when none of them has an IPv4 address. Binding the address
 * chooses the source; which interface a datagram leaves by is still the
 * routing table's choice, which for peers on the interface's own subnet
 * (the usual multi-NIC cluster, one subnet per rail) is that interface.
 * Without the list there are no devices and bind_addr rules, as before.
 *
 * MTU: IPv4 allows 65507 bytes of UDP payload (RFC 791 total length minus
 * 28 bytes of headers). On loopback the mtu is 65000, which leaves that
 * ceiling some slack. Elsewhere it is the interface MTU (SIOCGIFMTU on the
 * interface that owns the bind address) minus 28, capped at 65000, or 1472
 * (Ethernet's 1500 minus 28) when the interface cannot be found: a larger
 * datagram would be fragmented, and one lost fragment loses all of it.
 */
#include "transports/udp_int.h"

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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shardx.h>

#include "common/inaddr.h"
#include "common/log.h"
#include "common/namelist.h"

_Static_assert(SX_NAMELIST_NAME_MAX == SX_TL_DEVICE_MAX, "a listed name is a device name");
_Static_assert(SX_NAMELIST_MAX >= SX_TL_DEVICES, "SX_NET_DEVICES can name every device");

#define UDP_MTU_LOOPBACK 65000
#define UDP_MTU_MAX      65000
#define UDP_MTU_DEFAULT  1472 /* 1500 - 20 (IPv4 header) - 8 (UDP header) */
#define UDP_HEADERS      28
#define UDP_ACK_PRIORITY 6 /* SO_PRIORITY of the ACK socket: TC_PRIO_INTERACTIVE */

/* ------------------------------------------------------------------ */
/* Set-up helpers                                                      */

/* Parses "a.b.c.d" or "a.b.c.d:port" into @p sa. */
int sx_udp_parse_bind(const char *text, struct sockaddr_in *sa)
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

size_t sx_udp_pick_mtu(int fd, const struct sockaddr_in *local)
{
    if (sx_in4_loopback(local->sin_addr))
        return UDP_MTU_LOOPBACK;
    size_t mtu = udp_ifmtu(fd, &local->sin_addr);
    if (mtu == 0)
        return UDP_MTU_DEFAULT;
    return mtu < UDP_MTU_MAX ? mtu : UDP_MTU_MAX;
}

/*
 * Looks interface @p name up in @p list: 1 with its first IPv4 address in
 * *addr (getifaddrs lists an interface's primary address first), 0 when
 * it exists without one, -1 when there is no such interface. getifaddrs
 * reports every interface once by its link-layer (AF_PACKET) entry,
 * addressed or not, and once more per address.
 */
static int udp_if_lookup(const struct ifaddrs *list, const char *name, struct in_addr *addr)
{
    int found = -1;

    for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_name == NULL || strcmp(ifa->ifa_name, name) != 0)
            continue;
        found = 0;
        if (ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == AF_INET) {
            const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)ifa->ifa_addr;
            *addr = sin->sin_addr;
            return 1;
        }
    }
    return found;
}

/* Writes the names of the interfaces in @p list, each once ("lo, eth0"),
 * to @p buf; ", ..." ends it when they do not all fit. */
static void udp_if_names(const struct ifaddrs *list, char *buf, size_t cap)
{
    static const char more[] = ", ...";
    size_t off = 0;

    buf[0] = '\0';
    for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        bool seen = ifa->ifa_name == NULL;
        for (const struct ifaddrs *p = list; p != ifa && !seen; p = p->ifa_next)
            seen = p->ifa_name != NULL && strcmp(p->ifa_name, ifa->ifa_name) == 0;
        if (seen)
            continue;
        size_t need = strlen(ifa->ifa_name) + (off != 0 ? 2 : 0);
        if (off + need + sizeof(more) > cap) {
            if (off + sizeof(more) <= cap)
                memcpy(buf + off, more, sizeof(more));
            return;
        }
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", off != 0 ? ", " : "", ifa->ifa_name);
    }
}

/*
 * Checks config->net_devices against the interfaces here and lists, in
 * the list's order, the named ones that have an IPv4 address: writes up
 * to @p max of them to @p names and returns how many, with a description
 * ("vethA 10.1.1.1, vethB 10.1.2.1") in @p text. A negative status, with
 * why in @p text, when the list is malformed, a name is not an interface
 * here, or no named interface has an IPv4 address. With @p warn, logs a
 * warning for each named interface skipped for want of an address.
 */
/*
 * SX_NET_DEVICES with subnets or '^' (udp_addrs.c reads it as a filter):
 * the interfaces that are up, with an IPv4 address the filter allows, in
 * the kernel's order, each once; loopback only when named.
 */
static int udp_scan_filtered(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX],
                             unsigned max, char *text, size_t text_len)
{
    udp_filter_t f;
    udp_laddr_t found[SX_TL_DEVICES];
    char why[128];
    unsigned n = 0;
    struct ifaddrs *list = NULL;

    int rc = sx_udp_filter_parse(config->net_devices, &f, why, sizeof(why));
    if (rc != SX_OK) {
        snprintf(text, text_len, "invalid SX_NET_DEVICES: %s", why);
        return rc;
    }
    if (getifaddrs(&list) != 0) {
        snprintf(text, text_len, "cannot list the network interfaces (getifaddrs: %s)",
                 strerror(errno));
        return SX_ERR_NO_DEVICE;
    }
    for (unsigned i = 0; i < f.n && !f.exclude; i++) {
        if (!f.item[i].is_net && udp_if_lookup(list, f.item[i].name, &found[0].ip.v4) < 0) {
            char have[128];
            udp_if_names(list, have, sizeof(have));
            snprintf(text, text_len,
                     "SX_NET_DEVICES names '%s', which is not a network interface here "
                     "(interfaces: %s)",
                     f.item[i].name, have);
            freeifaddrs(list);
            return SX_ERR_NO_DEVICE;
        }
    }
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != AF_INET ||
            (ifa->ifa_flags & IFF_UP) == 0)
            continue;
        udp_ip_t ip = {.family = AF_INET,
                       .v4 = ((const struct sockaddr_in *)(const void *)ifa->ifa_addr)->sin_addr};
        bool named = false;
        for (unsigned i = 0; i < f.n && !named; i++)
            named = !f.exclude && !f.item[i].is_net && strcmp(f.item[i].name, ifa->ifa_name) == 0;
        if (((ifa->ifa_flags & IFF_LOOPBACK) != 0 && !named) ||
            !sx_udp_filter_allows(&f, ifa->ifa_name, &ip))
            continue;
        bool seen = false;
        for (unsigned k = 0; k < n && !seen; k++)
            seen = strcmp(found[k].ifname, ifa->ifa_name) == 0;
        if (seen || n == SX_TL_DEVICES)
            continue;
        found[n] = (udp_laddr_t){.ip = ip};
        snprintf(found[n].ifname, sizeof(found[n].ifname), "%s", ifa->ifa_name);
        n++;
    }
    freeifaddrs(list);
    if (n == 0) {
        snprintf(text, text_len,
                 "no interface that is up has an IPv4 address that SX_NET_DEVICES='%s' allows",
                 config->net_devices);
        return SX_ERR_NO_DEVICE;
    }
    size_t off = 0;
    text[0] = '\0';
    for (unsigned k = 0; k < n; k++) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &found[k].ip.v4, ip, sizeof(ip));
        if (off < text_len)
            off += (size_t)snprintf(text + off, text_len - off, "%s%s %s", k != 0 ? ", " : "",
                                    found[k].ifname, ip);
        if (k < max)
            snprintf(names[k], SX_TL_DEVICE_MAX, "%s", found[k].ifname);
    }
    return (int)(n < max ? n : max);
}

int sx_udp_scan_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX], unsigned max,
                        char *text, size_t text_len, bool warn)
{
    char wanted[SX_NAMELIST_MAX][SX_NAMELIST_NAME_MAX];
    char why[128];
    unsigned nwanted = 0, n = 0;
    struct ifaddrs *list = NULL;
    size_t off = 0;
    bool exclude = false;

    if (sx_namelist_parse_filter(config->net_devices, wanted, SX_TL_DEVICES, &nwanted, &exclude,
                                 why, sizeof(why)) != SX_OK) {
        snprintf(text, text_len, "invalid SX_NET_DEVICES: %s", why);
        return SX_ERR_INVALID_PARAM;
    }
    bool subnets = false;
    for (unsigned i = 0; i < nwanted; i++)
        subnets = subnets || strchr(wanted[i], '/') != NULL;
    if (exclude || subnets)
        return udp_scan_filtered(config, names, max, text, text_len);
    if (getifaddrs(&list) != 0) {
        snprintf(text, text_len, "cannot list the network interfaces (getifaddrs: %s)",
                 strerror(errno));
        return SX_ERR_NO_DEVICE;
    }
    text[0] = '\0';
    for (unsigned i = 0; i < nwanted; i++) {
        struct in_addr addr;
        int found = udp_if_lookup(list, wanted[i], &addr);
        if (found < 0) {
            char have[128];
            udp_if_names(list, have, sizeof(have));
            snprintf(text, text_len,
                     "SX_NET_DEVICES names '%s', which is not a network interface here "
                     "(interfaces: %s)",
                     wanted[i], have);
            freeifaddrs(list);
            return SX_ERR_NO_DEVICE;
        }
        if (found == 0) {
            if (warn)
                sx_warn("udp", "SX_NET_DEVICES: interface %s has no IPv4 address; udp skips it",
                        wanted[i]);
            continue;
        }
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &addr, ip, sizeof(ip));
        if (off < text_len)
            off += (size_t)snprintf(text + off, text_len - off, "%s%s %s", off != 0 ? ", " : "",
                                    wanted[i], ip);
        if (n < max)
            snprintf(names[n], SX_TL_DEVICE_MAX, "%s", wanted[i]);
        n++;
    }
    freeifaddrs(list);
    if (n == 0) {
        snprintf(text, text_len,
                 "none of the interfaces SX_NET_DEVICES='%s' names has an IPv4 address",
                 config->net_devices);
        return SX_ERR_NO_DEVICE;
    }
    return (int)(n < max ? n : max);
}

/* The IPv4 address of interface @p name for a shard's socket; SX_OK or
 * SX_ERR_NO_DEVICE, logged. */
int sx_udp_device_addr(const char *name, unsigned shard, struct sockaddr_in *sa)
{
    struct ifaddrs *list = NULL;

    if (getifaddrs(&list) != 0) {
        sx_error("udp", "shard %u: cannot list the network interfaces to find %s: %s", shard, name,
                 strerror(errno));
        return SX_ERR_NO_DEVICE;
    }
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    int found = udp_if_lookup(list, name, &sa->sin_addr);
    freeifaddrs(list);
    if (found <= 0) {
        /* The query saw it a moment ago: it went away or lost its address. */
        sx_error("udp", "shard %u: interface %s (SX_NET_DEVICES) %s", shard, name,
                 found < 0 ? "no longer exists" : "has no IPv4 address any more");
        return SX_ERR_NO_DEVICE;
    }
    return SX_OK;
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
/* Sockets                                                             */

/*
 * Creates one nonblocking socket of @p sa's family (an IPv6 one IPv6 only,
 * IPV6_V6ONLY, so that IPv4 keeps arriving on the IPv4 socket), sizes its
 * buffers and binds it to @p sa; the bound address goes to *bound_p.
 * @p what names it in messages ("data", "ACK"). On failure *fd_p may hold
 * a socket for the caller to close.
 */
int sx_udp_socket_open(const char *what, const udp_sa_t *sa, size_t rcvbuf, size_t sndbuf,
                       int *fd_p, udp_sa_t *bound_p)
{
    int fd = socket(sa->sa.sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;

    *fd_p = fd;
    if (fd < 0) {
        sx_error("udp", "%s socket: %s", what, strerror(errno));
        return errno == ENOMEM || errno == ENOBUFS ? SX_ERR_NO_MEMORY : SX_ERR_IO;
    }
    if (sa->sa.sa_family == AF_INET6 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) {
        sx_error("udp", "%s socket: IPV6_V6ONLY: %s", what, strerror(errno));
        return SX_ERR_IO;
    }
    udp_set_buf(fd, rcvbuf, SO_RCVBUFFORCE, SO_RCVBUF, "SO_RCVBUF");
    udp_set_buf(fd, sndbuf, SO_SNDBUFFORCE, SO_SNDBUF, "SO_SNDBUF");
    /* SO_RXQ_OVFL waits for the socket's first backlog (sx_udp_rx_busy). */

    if (bind(fd, &sa->sa, udp_sa_len(sa)) != 0) {
        int err = errno;
        char where[80];
        sx_udp_sa_str(sa, where, sizeof(where));
        sx_error("udp", "bind %s socket to %s: %s", what, where, strerror(err));
        return err == EADDRINUSE      ? SX_ERR_EXISTS
               : err == EADDRNOTAVAIL ? SX_ERR_INVALID_PARAM
                                      : SX_ERR_IO;
    }
    socklen_t salen = sizeof(*bound_p);
    if (getsockname(fd, &bound_p->sa, &salen) != 0) {
        sx_error("udp", "getsockname of the %s socket: %s", what, strerror(errno));
        return SX_ERR_IO;
    }
    return SX_OK;
}

/*
 * ECN on a data socket (RFC 3168; ip(7) IP_TOS, ipv6(7) IPV6_TCLASS): what
 * it sends leaves marked ECT(0), the codepoint RFC 3168 section 5 gives
 * senders. Pure ACKs keep the ACK socket's Not-ECT: no window answers a
 * mark on one (RFC 3168 section 6.1.4). Returns whether the kernel took it.
 */
bool sx_udp_ecn_open(int fd, int family)
{
    int ect = SX_TL_ECN_ECT0;
    bool v6 = family == AF_INET6;

    if (setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS, &ect,
                   sizeof(ect)) != 0) {
        sx_warn("udp", "ECN on an %s socket: %s; its datagrams go without (not ECN-capable)",
                v6 ? "IPv6" : "IPv4", strerror(errno));
        return false;
    }
    return true;
}

/* Every read of the socket reports the datagram's ECN field (IP_RECVTOS,
 * IPV6_RECVTCLASS); udp_ecn_report asks it when a window first needs it. */
bool sx_udp_ecn_recv(int fd, int family)
{
    int one = 1;
    bool v6 = family == AF_INET6;

    if (setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_RECVTCLASS : IP_RECVTOS, &one,
                   sizeof(one)) != 0) {
        sx_warn("udp",
                "reading the ECN field on an %s socket: %s; marks on its datagrams go "
                "unseen",
                v6 ? "IPv6" : "IPv4", strerror(errno));
        return false;
    }
    return true;
}

/*
 * Gives @p rx its socket and UDP_RX_BATCH buffers of @p buflen bytes.
 *
 * Buffers longer than a page each start on one. The kernel copies a
 * datagram in with `rep movsb`, which on this machine's EPYC runs ten to
 * twenty times slower when the destination is 1-31 bytes past the source
 * modulo 4 KiB (common/copy.h; the kernel's copies too: a 4 KiB pipe read
 * into a buffer 16 bytes into a page took 3.1-3.8 us against 1.3). Over
 * loopback a bulk datagram's bytes come from the sender's page fragments,
 * and a fresh fragment starts on a page. malloc put a batch of GRO's
 * 64 KiB buffers 16 bytes into a page (its header before a mapped chunk),
 * in the window for every such fragment; on a page they are in it only
 * for a fragment that starts in a page's last 31 bytes. Shorter buffers
 * (an mtu of 1,500, the ACK socket's) keep their length as their stride.
 */
int sx_udp_rx_init(udp_rx_t *rx, int fd, size_t buflen)
{
    size_t stride = buflen > UDP_PAGE ? (buflen + UDP_PAGE - 1) & ~(size_t)(UDP_PAGE - 1) : buflen;
    size_t bufs = (stride * UDP_RX_BATCH + UDP_PAGE - 1) & ~(size_t)(UDP_PAGE - 1);
    /* The batch arrays after the buffers, on pages of their own; freeing
     * mem frees both. */
    size_t bytes = bufs + ((sizeof(udp_rx_bufs_t) + UDP_PAGE - 1) & ~(size_t)(UDP_PAGE - 1));

    rx->fd = fd;
    rx->buflen = buflen;
    rx->limit = buflen;
    rx->mem = aligned_alloc(UDP_PAGE, bytes);
    if (rx->mem == NULL)
        return SX_ERR_NO_MEMORY;
    rx->b = (udp_rx_bufs_t *)(void *)(rx->mem + bufs);
    memset(rx->b, 0, sizeof(*rx->b));
    for (unsigned i = 0; i < UDP_RX_BATCH; i++) {
        rx->b->iov[i] = (struct iovec){.iov_base = rx->mem + i * stride, .iov_len = buflen};
        rx->b->msgs[i].msg_hdr = (struct msghdr){.msg_iov = &rx->b->iov[i],
                                                 .msg_iovlen = 1,
                                                 .msg_name = &rx->b->src[i],
                                                 .msg_control = rx->b->ctrl[i].buf};
    }
    rx->dirty = UDP_RX_BATCH; /* the lengths are set at the first read */
    rx->busy = false;
    rx->cmsg = false;
    rx->connected = false;
    rx->gro = false; /* the data sockets' opener says */
    return SX_OK;
}

/* Opens the ACK socket on the data socket's address (a kernel-chosen
 * port). */
int sx_udp_open_ack(udp_iface_t *u, const sx_tl_config_t *config)
{
    udp_sa_t sa = {.in4 = u->local}, bound;

    sa.in4.sin_port = 0;
    /* ACKs are a few dozen bytes: the default send buffer holds hundreds;
     * the receive buffer gets what the data socket gets, which costs
     * memory only while it is used. */
    int rc = sx_udp_socket_open("ACK", &sa, config->rcvbuf, 0, &u->ack_fd, &bound);
    if (rc != SX_OK)
        return rc;
    u->ack_port = ntohs(bound.in4.sin_port);
    int prio = UDP_ACK_PRIORITY;
    if (setsockopt(u->ack_fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio)) != 0)
        sx_debug("udp", "SO_PRIORITY %d on the ACK socket: %s", prio, strerror(errno));
    return sx_udp_rx_init(&u->ack_rx, u->ack_fd, UDP_CTRL_MAX);
}

/*
 * The hot socket (udp_hot.c): a second IPv4 socket on the data socket's
 * address and port. SO_REUSEPORT on both lets it bind there (socket(7));
 * both drop the option at once, so that from then on no other socket can
 * bind the port, as before there was a hot socket: a bind checks the
 * option of the sockets already on the port, and a socket of the same
 * user with the option on would let another one in. (The data socket was
 * bound without it, so that the kernel chose its port among the ones
 * nobody holds: an ephemeral bind does not count a port as busy when
 * all its holders have the option, udp_lib_lport_inuse.) Then it is
 * connected to itself, the data socket's address and port (loopback for
 * the wildcard), where nothing is ever sent from: an unconnected socket
 * that bound after the data socket comes first in the kernel's list and
 * would get every datagram to the port. Connected, it gets only the
 * datagrams from the address and port it is connected to (udp_hot.c
 * moves it to a destination's), which the kernel finds in the slot of
 * its own address before it looks at the wildcard one, or scores above
 * the data socket in the same slot. It sends like a connected send socket
 * (sx_udp_connect_dest): the same send buffer and ECN marking.
 */
int sx_udp_open_hot(udp_iface_t *u, const sx_tl_config_t *config)
{
    udp_sa_t sa = {.in4 = u->local}, self = sa, bound;
    int one = 1, zero = 0;
    int rc = SX_ERR_IO;

    if (self.in4.sin_addr.s_addr == htonl(INADDR_ANY))
        self.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (setsockopt(u->fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        sx_debug("udp", "hot socket: SO_REUSEPORT on the data socket: %s", strerror(errno));
        return SX_ERR_IO;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        sx_debug("udp", "hot socket: %s", strerror(errno));
        goto fail;
    }
    udp_set_buf(fd, config->rcvbuf, SO_RCVBUFFORCE, SO_RCVBUF, "SO_RCVBUF");
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
        bind(fd, &sa.sa, udp_sa_len(&sa)) != 0) {
        sx_debug("udp", "hot socket: binding to the data socket's port: %s", strerror(errno));
        goto fail;
    }
    if (setsockopt(u->fd, SOL_SOCKET, SO_REUSEPORT, &zero, sizeof(zero)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &zero, sizeof(zero)) != 0 ||
        connect(fd, &self.sa, udp_sa_len(&self)) != 0) {
        sx_debug("udp", "hot socket: closing the port, connecting: %s", strerror(errno));
        goto fail;
    }
    socklen_t salen = sizeof(bound);
    if (getsockname(fd, &bound.sa, &salen) != 0 || bound.in4.sin_port != u->local.sin_port)
        goto fail;
    rc = sx_udp_rx_init(&u->hot_rx, fd, u->rx.buflen);
    if (rc != SX_OK)
        goto fail;
    u->hot_rx.limit = u->rx.limit;
    u->hot_rx.gro = u->rx.gro;
    u->hot_rx.connected = true;
    udp_set_buf(fd, u->sndbuf, SO_SNDBUFFORCE, SO_SNDBUF, "SO_SNDBUF");
    if (u->ecn)
        (void)sx_udp_ecn_open(fd, AF_INET);
    if (u->rx.busy) /* the same buffer size */
        sx_udp_rx_busy(&u->hot_rx);
    u->hot_fd = fd;
    u->hot_idle = UDP_HOT_IDLE; /* quiet until a destination's datagrams come */
    return SX_OK;
fail:
    if (fd >= 0)
        close(fd);
    u->hot_rx.fd = -1;
    (void)setsockopt(u->fd, SOL_SOCKET, SO_REUSEPORT, &zero, sizeof(zero));
    return rc;
}

/* The IPv6 data socket of a wildcard-bound interface: on the wildcard
 * address and the IPv4 socket's port, sized like it. */
int sx_udp_open_v6(udp_iface_t *u, const sx_tl_config_t *config)
{
    udp_sa_t sa = {.in6 = {.sin6_family = AF_INET6,
                           .sin6_addr = IN6ADDR_ANY_INIT,
                           .sin6_port = u->local.sin_port}},
             bound;

    return sx_udp_socket_open("IPv6 data", &sa, config->rcvbuf, config->sndbuf, &u->fd6, &bound);
}

/* The calling thread's network namespace, as the device and inode of its
 * /proc entry (namespaces(7)); zeros when /proc cannot say. */
void sx_udp_netns(dev_t *dev_p, ino_t *ino_p)
{
    struct stat st;

    if (stat("/proc/thread-self/ns/net", &st) == 0) {
        *dev_p = st.st_dev;
        *ino_p = st.st_ino;
    } else {
        *dev_p = 0;
        *ino_p = 0;
    }
}

/*
 * How many connected send sockets this interface may open: SX_UDP_CONNECT,
 * but all the engine's shards together at most a quarter of the
 * descriptors RLIMIT_NOFILE leaves the process, so that a many-core node
 * (a shard per core, 16 each) cannot starve the application, the
 * bootstrap or epoll of descriptors.
 */
unsigned sx_udp_connect_budget(const sx_tl_config_t *config)
{
    struct rlimit rl;
    unsigned want = config->udp_connect;
    unsigned shards = config->nshards > 0 ? config->nshards : 1;

    if (want == 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return want;
    rlim_t each = rl.rlim_cur / 4 / shards;
    return each < want ? (unsigned)each : want;
}

/*
 * Gives @p d a send socket of its own, connected to its data address and
 * bound to the data socket's IP (port: the kernel's choice). An
 * unconnected socket makes udp_sendmsg look the route up for every
 * datagram (ip_route_output_flow); a connected one caches it on the
 * socket (docs/tuning.md, section "Connected send sockets:
 * SX_UDP_CONNECT", has what that saves). The receiver never looks at the
 * source port (events carry no address; channels are named in the wire
 * header), so data leaving from another port than the card's is fine.
 * Failing here costs only that saving: the destination keeps the shared
 * socket.
 */
void sx_udp_connect_dest(udp_iface_t *u, udp_dest_t *d)
{
    udp_sa_t local = {.in4 = u->local};
    dev_t dev;
    ino_t ino;
    bool v6 = d->sa.sa.sa_family == AF_INET6;

    /* A socket is made in the calling thread's network namespace, and the
     * token holder inserting a peer need not be in the one the interface
     * was opened in (test_nic opens engines inside a namespace and drives
     * them from outside): there a connected socket would send into the
     * wrong network. The shared socket is always in the right one. */
    sx_udp_netns(&dev, &ino);
    if (dev != u->netns_dev || ino != u->netns_ino) {
        sx_debug("udp", "connected send socket: the caller is in another network namespace "
                        "than the interface; using the shared one");
        return;
    }
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        if (err == EMFILE || err == ENFILE) {
            /* Out of descriptors: stop trying on this interface. */
            sx_warn("udp",
                    "connected send socket: %s after %u; the other peers share the data "
                    "socket (SX_UDP_CONNECT, RLIMIT_NOFILE)",
                    strerror(err), u->connected);
            u->connect_max = u->connected;
        } else {
            sx_debug("udp", "connected send socket: %s; using the shared one", strerror(err));
        }
        return;
    }
    /* Bound to the data socket's IPv4 address (any port), or for IPv6 to
     * the wildcard, as the IPv6 data socket is. */
    if (v6)
        local = (udp_sa_t){.in6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT}};
    else
        local.in4.sin_port = 0;
    udp_set_buf(fd, u->sndbuf, SO_SNDBUFFORCE, SO_SNDBUF, "SO_SNDBUF");
    /* Nothing is read from it: the smallest receive buffer bounds what a
     * stray datagram to its port can hold (socket(7) doubles the value
     * and enforces a floor). */
    int small = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    if (u->ecn)
        (void)sx_udp_ecn_open(fd, v6 ? AF_INET6 : AF_INET);
    if (bind(fd, &local.sa, udp_sa_len(&local)) != 0 ||
        connect(fd, &d->sa.sa, udp_sa_len(&d->sa)) != 0) {
        sx_debug("udp", "connected send socket: %s; using the shared one", strerror(errno));
        close(fd);
        return;
    }
    d->tx_fd = fd;
    u->connected++;
}
