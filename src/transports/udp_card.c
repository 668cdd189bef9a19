/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * udp_card: a udp interface's card address (the business-card bytes),
 * written for its own card and read from a peer's; udp.c is the interface
 * and its data path, udp_addrs.c which addresses are offered and chosen,
 * udp_int.h what they share. Every byte read is a peer's: each field is
 * checked before use and a refusal says which.
 *
 * An interface bound to one address (SX_BIND_ADDR "a.b.c.d", or an
 * SX_NET_DEVICES interface) writes kind 4, 8 or 10 bytes, fixed layout:
 *
 *   offset  size  field
 *   0       1     family: 4 = IPv4 (no other value is accepted yet)
 *   1       1     reserved, must be 0
 *   2       2     UDP port, little-endian, never 0
 *   4       4     IPv4 address in network byte order (a.b.c.d as a, b, c, d),
 *                 never 0.0.0.0
 *   8       2     optional: the ACK socket's UDP port, little-endian, never 0
 *                 and never the data port; absent (an 8-byte address) when
 *                 the interface has no ACK socket
 *
 * One bound to the wildcard address (the default; udp_addrs.c says how
 * its addresses are chosen and used) writes kind 5, 14 + 5n bytes:
 *
 *   0       1     kind: 5 = a list of IPv4 addresses
 *   1       1     n, 0 to 8: how many addresses follow
 *   2       2     UDP port, little-endian, never 0 (every address's)
 *   4       2     the ACK socket's port, little-endian; 0: none
 *   6       8     host key, little-endian, never 0: equal for engines that
 *                 share a boot and a network namespace (loopback then
 *                 reaches, at the same port)
 *   14      5n    per address: IPv4 in network byte order, prefix length
 *                 (0 to 32); never 0.0.0.0 nor in 127.0.0.0/8
 *
 * One that also offers IPv6 addresses writes kind 6, 15 + 5n + 17m
 * bytes: the same 14-byte head (kind 6; n, the IPv4 addresses), the n
 * IPv4 entries as above, then
 *
 *   0       1     m, 1 to 8 - n: how many IPv6 addresses follow
 *   1       17m   per address: IPv6 in network byte order, prefix length
 *                 (0 to 128); never ::, ::1, link-local (fe80::/10),
 *                 multicast or IPv4-mapped
 *
 * A card address holds SX_TL_ADDR_MAX (160) bytes, which the longest
 * list (eight IPv6 addresses: 151 bytes) fits; udp_open_v6 (udp.c) would
 * leave out, and log, IPv6 addresses that did not.
 */
#include "transports/udp_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include <shardx.h>

#include "common/inaddr.h"

#define UDP_ADDR_LEN     8
#define UDP_ADDR_LEN_ACK 10 /* with the ACK socket's port */
#define UDP_ADDR_IPV4    4
#define UDP_ADDR_LIST    5
#define UDP_LIST_HDR     14
#define UDP_LIST_ENTRY   5
#define UDP_ADDR_LIST6   6
#define UDP_LIST6_ENTRY  17

size_t sx_udp_card_list_len(unsigned n4, unsigned n6)
{
    return UDP_LIST_HDR + UDP_LIST_ENTRY * (size_t)n4 +
           (n6 > 0 ? 1 + UDP_LIST6_ENTRY * (size_t)n6 : 0);
}

int sx_udp_card_write(const udp_iface_t *u, void *buf, size_t *len_p)
{
    uint8_t *out = buf;
    uint16_t port = ntohs(u->local.sin_port);
    size_t len = u->ack_fd >= 0 ? UDP_ADDR_LEN_ACK : UDP_ADDR_LEN;

    if (u->wildcard) {
        unsigned n4 = 0, n6;
        for (unsigned i = 0; i < u->nladdrs; i++)
            n4 += u->laddrs[i].ip.family == AF_INET;
        n6 = u->nladdrs - n4;
        len = sx_udp_card_list_len(n4, n6);
        if (*len_p < len)
            return SX_ERR_TRUNCATED;
        uint16_t ack = u->ack_fd >= 0 ? u->ack_port : 0;
        out[0] = n6 > 0 ? UDP_ADDR_LIST6 : UDP_ADDR_LIST;
        out[1] = (uint8_t)n4;
        out[2] = (uint8_t)(port & 0xff);
        out[3] = (uint8_t)(port >> 8);
        out[4] = (uint8_t)(ack & 0xff);
        out[5] = (uint8_t)(ack >> 8);
        for (unsigned i = 0; i < 8; i++)
            out[6 + i] = (uint8_t)(u->host_key >> (8 * i));
        /* scan_local lists the IPv4 addresses first. */
        uint8_t *e = out + UDP_LIST_HDR;
        for (unsigned i = 0; i < n4; i++, e += UDP_LIST_ENTRY) {
            memcpy(e, &u->laddrs[i].ip.v4.s_addr, 4);
            e[4] = u->laddrs[i].prefix;
        }
        if (n6 > 0)
            *e++ = (uint8_t)n6;
        for (unsigned i = n4; i < u->nladdrs; i++, e += UDP_LIST6_ENTRY) {
            memcpy(e, u->laddrs[i].ip.v6.s6_addr, 16);
            e[16] = u->laddrs[i].prefix;
        }
        *len_p = len;
        return SX_OK;
    }
    if (*len_p < len)
        return SX_ERR_TRUNCATED;
    out[0] = UDP_ADDR_IPV4;
    out[1] = 0;
    out[2] = (uint8_t)(port & 0xff);
    out[3] = (uint8_t)(port >> 8);
    memcpy(out + 4, &u->local.sin_addr.s_addr, 4); /* already network order */
    if (u->ack_fd >= 0) {
        out[8] = (uint8_t)(u->ack_port & 0xff);
        out[9] = (uint8_t)(u->ack_port >> 8);
    }
    *len_p = len;
    return SX_OK;
}

const char *sx_udp_card_decode(const void *addr, size_t len, udp_peer_addr_t *pa)
{
    const uint8_t *in = addr;

    if (addr == NULL || len < 1)
        return "no address";
    memset(pa, 0, sizeof(*pa));
    if (in[0] == UDP_ADDR_LIST || in[0] == UDP_ADDR_LIST6) {
        bool v6 = in[0] == UDP_ADDR_LIST6;
        unsigned n6 = 0;
        if (len < UDP_LIST_HDR || in[1] > UDP_ADDRS_MAX)
            return "wrong length for a list of addresses (allowed: 14 + 5 per IPv4 address, at "
                   "most 8)";
        size_t at6 = UDP_LIST_HDR + UDP_LIST_ENTRY * (size_t)in[1];
        if (v6) {
            if (len <= at6 || in[at6] == 0 || in[1] + in[at6] > UDP_ADDRS_MAX ||
                len != sx_udp_card_list_len(in[1], in[at6]))
                return "wrong length for a list of IPv4 and IPv6 addresses (allowed: 15 + 5 per "
                       "IPv4 and 17 per IPv6 address, at least one IPv6, at most 8 in all)";
            n6 = in[at6];
        } else if (len != at6) {
            return "wrong length for a list of addresses (allowed: 14 + 5 per IPv4 address, at "
                   "most 8)";
        }
        pa->n = in[1] + n6;
        pa->port = (uint16_t)(in[2] | (unsigned)in[3] << 8);
        pa->ack_port = (uint16_t)(in[4] | (unsigned)in[5] << 8);
        for (unsigned i = 0; i < 8; i++)
            pa->host_key |= (uint64_t)in[6 + i] << (8 * i);
        if (pa->port == 0)
            return "port 0";
        if (pa->ack_port == pa->port)
            return "ACK port equal to the data port";
        if (pa->host_key == 0)
            return "host key 0";
        for (unsigned i = 0; i < in[1]; i++) {
            const uint8_t *e = in + UDP_LIST_HDR + UDP_LIST_ENTRY * i;
            udp_ip_t *ip = &pa->ip[i];
            ip->family = AF_INET;
            memcpy(&ip->v4.s_addr, e, 4);
            pa->prefix[i] = e[4];
            if (ip->v4.s_addr == htonl(INADDR_ANY) || sx_in4_loopback(ip->v4))
                return "a listed address is 0.0.0.0 or loopback";
            if (pa->prefix[i] > 32)
                return "a prefix length over 32";
        }
        for (unsigned k = 0; k < n6; k++) {
            const uint8_t *e = in + at6 + 1 + UDP_LIST6_ENTRY * k;
            unsigned i = in[1] + k;
            udp_ip_t *ip = &pa->ip[i];
            ip->family = AF_INET6;
            memcpy(ip->v6.s6_addr, e, 16);
            pa->prefix[i] = e[16];
            if (IN6_IS_ADDR_UNSPECIFIED(&ip->v6) || IN6_IS_ADDR_LOOPBACK(&ip->v6) ||
                IN6_IS_ADDR_LINKLOCAL(&ip->v6) || IN6_IS_ADDR_MULTICAST(&ip->v6) ||
                IN6_IS_ADDR_V4MAPPED(&ip->v6))
                return "a listed IPv6 address is ::, loopback, link-local, multicast or "
                       "IPv4-mapped";
            if (pa->prefix[i] > 128)
                return "a prefix length over 128";
        }
        return NULL;
    }
    if (len != UDP_ADDR_LEN && len != UDP_ADDR_LEN_ACK)
        return "wrong length (allowed: 8, or 10 with an ACK port)";
    if (in[0] != UDP_ADDR_IPV4)
        return "unknown address kind (allowed: 4, one IPv4 address; 5 and 6, a list)";
    if (in[1] != 0)
        return "reserved byte is not 0";
    pa->n = 1;
    pa->prefix[0] = 32;
    pa->port = (uint16_t)(in[2] | (unsigned)in[3] << 8);
    pa->ip[0].family = AF_INET;
    memcpy(&pa->ip[0].v4.s_addr, in + 4, 4);
    if (pa->port == 0)
        return "port 0";
    if (pa->ip[0].v4.s_addr == htonl(INADDR_ANY))
        return "address 0.0.0.0";
    if (len == UDP_ADDR_LEN_ACK) {
        pa->ack_port = (uint16_t)(in[8] | (unsigned)in[9] << 8);
        if (pa->ack_port == 0)
            return "ACK port 0";
        if (pa->ack_port == pa->port)
            return "ACK port equal to the data port";
    }
    return NULL;
}

void sx_udp_card_str(const void *addr, size_t len, char *buf, size_t cap)
{
    udp_peer_addr_t pa;
    char ip[INET6_ADDRSTRLEN];

    const char *bad = sx_udp_card_decode(addr, len, &pa);
    if (bad != NULL) {
        snprintf(buf, cap, "(malformed udp address of %zu bytes: %s)", len, bad);
        return;
    }
    size_t off;
    if (((const uint8_t *)addr)[0] != UDP_ADDR_IPV4) {
        off = (size_t)snprintf(buf, cap, "udp port %u on host %016llx:", pa.port,
                               (unsigned long long)pa.host_key);
        for (unsigned i = 0; i < pa.n && off < cap; i++) {
            sx_udp_ip_str(&pa.ip[i], ip, sizeof(ip));
            off += (size_t)snprintf(buf + off, cap - off, " %s/%u", ip, pa.prefix[i]);
        }
        if (pa.n == 0 && off < cap)
            off += (size_t)snprintf(buf + off, cap - off, " loopback only");
    } else {
        sx_udp_ip_str(&pa.ip[0], ip, sizeof(ip));
        off = (size_t)snprintf(buf, cap, "udp %s:%u", ip, pa.port);
    }
    if (pa.ack_port != 0 && off < cap)
        snprintf(buf + off, cap - off, " (ACKs to port %u)", pa.ack_port);
}
