/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * udp_addrs: which addresses a udp interface offers and which of a peer's
 * it sends to. udp.c is the interface and its data path, udp_sock.c makes
 * the sockets; udp_int.h is what the three share.
 *
 * Without SX_BIND_ADDR naming one address (the default, empty, or a
 * filter), the data socket is bound to the wildcard address and the card
 * offers every IPv4 address of the interfaces that are up, loopback left
 * out, then every global IPv6 address (not link-local, whose scope a peer
 * cannot name; not ::1, not IPv4-mapped), with each one's prefix length
 * (UDP_ADDRS_MAX of them at most, IPv4 first), and a host key: a hash of the kernel's boot id and
 * the network namespace, so that two engines in one namespace of one boot, and only those, know
 * they can talk over loopback. Open MPI's tcp BTL does the same: every
 * non-loopback interface by default, loopback only for its own node.
 *
 * The filter (SX_BIND_ADDR, the way btl_tcp_if_include / if_exclude read
 * theirs): comma-separated interface names ("eth0") and IPv4 or IPv6
 * subnets in CIDR form ("10.1.0.0/16", "fd00::/8"); a leading '^' makes
 * the whole list one of exclusions ("^docker0,virbr0"). An address is
 * offered when an include list names its interface or holds it, or an
 * exclude list does neither.
 *
 * A peer's address is chosen by reachability, as the tcp BTL pairs
 * interfaces: the same host key first (127.0.0.1 at the peer's port), then
 * the peer's addresses that lie in a subnet of one of ours (the same
 * Ethernet segment, no router), then the rest in the peer's order (IPv4
 * first), which the routing table must reach; an IPv6 address only when
 * this interface has an IPv6 socket (udp.c), which it has when it offers
 * IPv6 addresses itself. The destination keeps the others: when
 * the handshake gets no answer, sx_tl_ops_t.addr_next moves it to the
 * next (shard/conn.c), and says so with both ends in a log line.
 *
 * Path MTU: each destination asks the kernel for the MTU of its route
 * (IP_MTU or IPV6_MTU on a socket connected to it, ip(7), ipv6(7)), so a channel to a peer on
 * loopback keeps 65000-byte datagrams while one over Ethernet uses 1472;
 * the handshake's probe confirms it and steps down when it is wrong
 * (shard/conn.c, RFC 8899).
 */
#include "transports/udp_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <shardx.h>

#include "common/inaddr.h"
#include "common/log.h"

#define UDP_HEADERS  28                     /* IPv4 and UDP headers */
#define UDP_ITEM_MAX (INET6_ADDRSTRLEN + 4) /* a filter item: a name or a subnet */
#define UDP_HEADERS6 48                     /* IPv6 and UDP headers */

/* ------------------------------------------------------------------ */
/* The filter                                                          */

/* Whether @p text reads as one address ("a.b.c.d" or "a.b.c.d:port"),
 * rather than a filter. */
bool sx_udp_bind_is_single(const char *text)
{
    char host[INET_ADDRSTRLEN + 1];
    struct in_addr ip;
    const char *colon = strchr(text, ':');
    size_t n = colon != NULL ? (size_t)(colon - text) : strlen(text);

    if (n == 0 || n >= sizeof(host))
        return false;
    memcpy(host, text, n);
    host[n] = '\0';
    return inet_pton(AF_INET, host, &ip) == 1;
}

int sx_udp_filter_parse(const char *text, udp_filter_t *f, char *why, size_t cap)
{
    memset(f, 0, sizeof(*f));
    if (text == NULL || text[0] == '\0')
        return SX_OK;
    if (text[0] == '^') {
        f->exclude = true;
        text++;
        if (text[0] == '\0') {
            snprintf(why, cap, "'^' with nothing to exclude");
            return SX_ERR_INVALID_PARAM;
        }
    }
    const char *p = text;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == 0 || n >= UDP_ITEM_MAX) {
            snprintf(why, cap, "empty or overlong item in '%s'", text);
            return SX_ERR_INVALID_PARAM;
        }
        if (f->n == UDP_FILTER_MAX) {
            snprintf(why, cap, "more than %d items in '%s'", UDP_FILTER_MAX, text);
            return SX_ERR_INVALID_PARAM;
        }
        udp_filter_item_t *it = &f->item[f->n];
        char item[UDP_ITEM_MAX];
        memcpy(item, p, n);
        item[n] = '\0';
        char *slash = strchr(item, '/');
        struct in6_addr one6;
        if (slash == NULL && inet_pton(AF_INET6, item, &one6) == 1) {
            snprintf(why, cap,
                     "'%s' is one IPv6 address: udp binds to one address for IPv4 only; name "
                     "its subnet (x:y::z/len) or its interface to offer IPv6 addresses",
                     item);
            return SX_ERR_UNSUPPORTED;
        }
        if (slash != NULL) {
            char *stop = NULL;
            *slash = '\0';
            errno = 0;
            unsigned long len = strtoul(slash + 1, &stop, 10);
            bool v6 = strchr(item, ':') != NULL;
            int ok =
                v6 ? inet_pton(AF_INET6, item, &it->net.v6) : inet_pton(AF_INET, item, &it->net.v4);
            if (ok != 1 || slash[1] == '\0' || *stop != '\0' || errno != 0 ||
                len > (v6 ? 128u : 32u)) {
                snprintf(why, cap,
                         "'%.*s' is not a subnet a.b.c.d/len (len 0-32) or x:y::z/len (len 0-128)",
                         (int)n, p);
                return SX_ERR_INVALID_PARAM;
            }
            it->net.family = v6 ? AF_INET6 : AF_INET;
            it->prefix = (uint8_t)len;
            it->is_net = true;
        } else {
            for (size_t k = 0; k < n; k++) {
                char ch = item[k];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.' ||
                      ch == ':' || ch == '@')) {
                    snprintf(why, cap,
                             "'%s' is neither an interface name nor a subnet a.b.c.d/len or "
                             "x:y::z/len",
                             item);
                    return SX_ERR_INVALID_PARAM;
                }
            }
            if (n >= IFNAMSIZ) {
                snprintf(why, cap, "interface name '%s' is longer than %d bytes", item,
                         IFNAMSIZ - 1);
                return SX_ERR_INVALID_PARAM;
            }
            memcpy(it->name, item, n + 1);
        }
        f->n++;
        p += n;
        if (*p == ',') {
            p++;
            if (*p == '\0') {
                snprintf(why, cap, "trailing comma in '%s'", text);
                return SX_ERR_INVALID_PARAM;
            }
        }
    }
    return SX_OK;
}

/* Whether @p ip lies in @p net / @p prefix (of the same family). */
static bool udp_in_subnet(const udp_ip_t *ip, const udp_ip_t *net, unsigned prefix)
{
    if (ip->family != net->family)
        return false;
    const uint8_t *a = ip->family == AF_INET6 ? ip->v6.s6_addr : (const uint8_t *)&ip->v4.s_addr;
    const uint8_t *b = net->family == AF_INET6 ? net->v6.s6_addr : (const uint8_t *)&net->v4.s_addr;
    unsigned bytes = prefix / 8, bits = prefix % 8;
    if (memcmp(a, b, bytes) != 0)
        return false;
    return bits == 0 || ((a[bytes] ^ b[bytes]) & (uint8_t)(0xff << (8 - bits))) == 0;
}

bool sx_udp_filter_allows(const udp_filter_t *f, const char *ifname, const udp_ip_t *ip)
{
    if (f->n == 0)
        return true;
    bool hit = false;
    for (unsigned i = 0; i < f->n && !hit; i++) {
        const udp_filter_item_t *it = &f->item[i];
        if (it->is_net)
            hit = udp_in_subnet(ip, &it->net, it->prefix);
        else
            hit = strcmp(it->name, ifname) == 0;
    }
    return f->exclude ? !hit : hit;
}

/* ------------------------------------------------------------------ */
/* Local addresses and the host key                                    */

static unsigned udp_prefix_of(const struct sockaddr *mask, sa_family_t family)
{
    unsigned max = family == AF_INET6 ? 128 : 32;
    if (mask == NULL || mask->sa_family != family)
        return max;
    const uint8_t *m =
        family == AF_INET6
            ? ((const struct sockaddr_in6 *)(const void *)mask)->sin6_addr.s6_addr
            : (const uint8_t *)&((const struct sockaddr_in *)(const void *)mask)->sin_addr.s_addr;
    unsigned n = 0;
    while (n < max && (m[n / 8] & (0x80u >> (n % 8))) != 0)
        n++;
    return n;
}

/* Whether an interface address may go on a card: IPv4 outside 127/8;
 * IPv6 that is global (not ::1, link-local, IPv4-mapped or unspecified).
 * Fills @p ip. */
static bool udp_offerable(const struct sockaddr *sa, udp_ip_t *ip)
{
    memset(ip, 0, sizeof(*ip));
    if (sa->sa_family == AF_INET) {
        ip->family = AF_INET;
        ip->v4 = ((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        return !sx_in4_loopback(ip->v4) && ip->v4.s_addr != htonl(INADDR_ANY);
    }
    if (sa->sa_family != AF_INET6)
        return false;
    ip->family = AF_INET6;
    ip->v6 = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    return !IN6_IS_ADDR_LOOPBACK(&ip->v6) && !IN6_IS_ADDR_LINKLOCAL(&ip->v6) &&
           !IN6_IS_ADDR_V4MAPPED(&ip->v6) && !IN6_IS_ADDR_UNSPECIFIED(&ip->v6) &&
           !IN6_IS_ADDR_MULTICAST(&ip->v6);
}

int sx_udp_scan_local(const udp_filter_t *f, udp_laddr_t *out, unsigned max, unsigned *n_p)
{
    struct ifaddrs *list = NULL;
    unsigned n = 0;

    *n_p = 0;
    if (getifaddrs(&list) != 0) {
        sx_error("udp", "cannot list the network interfaces (getifaddrs: %s)", strerror(errno));
        return SX_ERR_NO_DEVICE;
    }
    /* A name to include that is no interface here is a mistake worth
     * stopping for (a typo would otherwise leave the engine on loopback). */
    for (unsigned i = 0; i < f->n && !f->exclude; i++) {
        bool found = f->item[i].is_net;
        for (struct ifaddrs *ifa = list; ifa != NULL && !found; ifa = ifa->ifa_next)
            found = ifa->ifa_name != NULL && strcmp(ifa->ifa_name, f->item[i].name) == 0;
        if (!found) {
            sx_error("udp",
                     "SX_BIND_ADDR names '%s', which is neither an IPv4 address nor a network "
                     "interface here",
                     f->item[i].name);
            freeifaddrs(list);
            return SX_ERR_INVALID_PARAM;
        }
    }
    /* IPv4 first, then IPv6: a peer with both tries IPv4 first. */
    bool full = false;
    for (unsigned pass = 0; pass < 2 && !full; pass++) {
        sa_family_t family = pass == 0 ? AF_INET : AF_INET6;
        for (struct ifaddrs *ifa = list; ifa != NULL && !full; ifa = ifa->ifa_next) {
            udp_ip_t ip;
            if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != family ||
                (ifa->ifa_flags & IFF_UP) == 0 || (ifa->ifa_flags & IFF_LOOPBACK) != 0 ||
                !udp_offerable(ifa->ifa_addr, &ip) || !sx_udp_filter_allows(f, ifa->ifa_name, &ip))
                continue;
            if (n == max) {
                sx_warn("udp",
                        "more than %u interface addresses: %s and later ones are not offered", max,
                        ifa->ifa_name);
                full = true;
                break;
            }
            out[n] =
                (udp_laddr_t){.ip = ip, .prefix = (uint8_t)udp_prefix_of(ifa->ifa_netmask, family)};
            snprintf(out[n].ifname, sizeof(out[n].ifname), "%s", ifa->ifa_name);
            n++;
        }
    }
    freeifaddrs(list);
    *n_p = n;
    return SX_OK;
}

/* FNV-1a, 64 bits: a stable digest, not a secret. */
static uint64_t udp_fnv(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t sx_udp_host_key(dev_t netns_dev, ino_t netns_ino)
{
    char boot[64] = "";
    uint64_t h = 0xcbf29ce484222325ull;
    FILE *fp = fopen("/proc/sys/kernel/random/boot_id", "re");

    if (fp != NULL) {
        if (fgets(boot, sizeof(boot), fp) == NULL)
            boot[0] = '\0';
        fclose(fp);
    }
    if (boot[0] == '\0') {
        /* No /proc: the host name stands in for the boot. */
        (void)gethostname(boot, sizeof(boot) - 1);
    }
    h = udp_fnv(h, boot, strlen(boot));
    uint64_t dev = (uint64_t)netns_dev, ino = (uint64_t)netns_ino;
    h = udp_fnv(h, &dev, sizeof(dev));
    h = udp_fnv(h, &ino, sizeof(ino));
    return h != 0 ? h : 1;
}

/* ------------------------------------------------------------------ */
/* Choosing a peer's address                                           */

bool sx_udp_same_subnet(const udp_laddr_t *mine, unsigned n, const udp_ip_t *ip)
{
    for (unsigned i = 0; i < n; i++)
        if (udp_in_subnet(ip, &mine[i].ip, mine[i].prefix))
            return true;
    return false;
}

unsigned sx_udp_candidates(const udp_iface_t *u, const udp_peer_addr_t *pa, udp_sa_t *cand,
                           unsigned max)
{
    unsigned n = 0;

    if (pa->host_key == u->host_key && n < max) {
        cand[n] = (udp_sa_t){.in4 = {.sin_family = AF_INET,
                                     .sin_port = htons(pa->port),
                                     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)}};
        n++;
    }
    /* Same subnet first, then the rest, each in the peer's order; IPv6
     * only through an IPv6 socket. */
    for (unsigned pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < pa->n && n < max; i++) {
            const udp_ip_t *ip = &pa->ip[i];
            bool near = sx_udp_same_subnet(u->laddrs, u->nladdrs, ip);
            if (near != (pass == 0) || (ip->family == AF_INET6 && u->fd6 < 0))
                continue;
            memset(&cand[n], 0, sizeof(cand[n]));
            if (ip->family == AF_INET6) {
                cand[n].in6.sin6_family = AF_INET6;
                cand[n].in6.sin6_port = htons(pa->port);
                cand[n].in6.sin6_addr = ip->v6;
            } else {
                cand[n].in4.sin_family = AF_INET;
                cand[n].in4.sin_port = htons(pa->port);
                cand[n].in4.sin_addr = ip->v4;
            }
            n++;
        }
    }
    return n;
}

size_t sx_udp_route_mtu(udp_iface_t *u, const udp_sa_t *sa, int connected_fd)
{
    int fd = connected_fd;
    int mtu = 0;
    socklen_t len = sizeof(mtu);
    bool v6 = sa->sa.sa_family == AF_INET6;

    if (fd < 0) {
        /* A socket is made in the calling thread's network namespace: from
         * another one than the interface's (test_nic drives engines made
         * in namespaces from outside) the route would be the wrong one. */
        dev_t dev;
        ino_t ino;
        sx_udp_netns(&dev, &ino);
        if (dev != u->netns_dev || ino != u->netns_ino)
            return u->base.caps.mtu;
        fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return u->base.caps.mtu;
        if (connect(fd, &sa->sa, udp_sa_len(sa)) != 0) {
            close(fd);
            return u->base.caps.mtu;
        }
    }
    int rc = v6 ? getsockopt(fd, IPPROTO_IPV6, IPV6_MTU, &mtu, &len)
                : getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &len);
    if (fd != connected_fd)
        close(fd);
    unsigned headers = v6 ? UDP_HEADERS6 : UDP_HEADERS;
    if (rc != 0 || mtu <= (int)headers)
        return u->base.caps.mtu;
    size_t payload = (size_t)mtu - headers;
    return payload < u->base.caps.mtu ? payload : u->base.caps.mtu;
}

void sx_udp_ip_str(const udp_ip_t *ip, char *buf, size_t cap)
{
    if (inet_ntop(ip->family,
                  ip->family == AF_INET6 ? (const void *)&ip->v6 : (const void *)&ip->v4, buf,
                  (socklen_t)cap) == NULL)
        snprintf(buf, cap, "?");
}

void sx_udp_sa_str(const udp_sa_t *sa, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN];

    if (sa->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &sa->in6.sin6_addr, ip, sizeof(ip));
        snprintf(buf, cap, "udp [%s]:%u", ip, ntohs(sa->in6.sin6_port));
    } else {
        inet_ntop(AF_INET, &sa->in4.sin_addr, ip, sizeof(ip));
        snprintf(buf, cap, "udp %s:%u", ip, ntohs(sa->in4.sin_port));
    }
}

void sx_udp_laddrs_str(const udp_laddr_t *a, unsigned n, char *buf, size_t cap)
{
    size_t off = 0;

    snprintf(buf, cap, "none");
    for (unsigned i = 0; i < n && off < cap; i++) {
        char ip[INET6_ADDRSTRLEN];
        sx_udp_ip_str(&a[i].ip, ip, sizeof(ip));
        off += (size_t)snprintf(buf + off, cap - off, "%s%s%s%s/%u", i != 0 ? ", " : "",
                                a[i].ifname, a[i].ifname[0] != '\0' ? " " : "", ip, a[i].prefix);
    }
}
