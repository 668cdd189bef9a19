/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rdmacm's wire formats (rdmacm.h): the card blob (the listener's
 * address), the private data of a SIDR request and answer, and the path
 * the connection manager found, as a verbs card address. Pure functions,
 * with no librdmacm state: tests/multiproc/test_cpc_rdmacm.c runs them everywhere.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include <shardx.h>

#include "common/inaddr.h"
#include "common/le.h"
#include "cpc/rdmacm.h"
#include "transports/verbs_addr.h"

void sx_rdmacm_sockaddr_str(const struct sockaddr *sa, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof(in));
        inet_ntop(AF_INET, &in.sin_addr, ip, sizeof(ip));
        port = ntohs(in.sin_port);
        snprintf(buf, cap, "%s:%u", ip, port);
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof(in6));
        inet_ntop(AF_INET6, &in6.sin6_addr, ip, sizeof(ip));
        port = ntohs(in6.sin6_port);
        snprintf(buf, cap, "[%s]:%u", ip, port);
    } else {
        snprintf(buf, cap, "(address family %d)", sa->sa_family);
    }
}

int sx_rdmacm_blob_parse(const uint8_t *in, size_t len, struct sockaddr_storage *ss,
                         const char **why_p)
{
    const char *why = NULL;
    struct sockaddr_storage out;

    memset(&out, 0, sizeof(out));
    if (in == NULL || len < 4)
        why = "shorter than its header";
    else if (in[0] != SX_RDMACM_BLOB_VERSION)
        why = "unknown version";
    else if (in[1] != 4 && in[1] != 6)
        why = "unknown address family";
    else if (len != (in[1] == 4 ? SX_RDMACM_BLOB_V4_LEN : SX_RDMACM_BLOB_V6_LEN))
        why = "wrong length for its address family";
    else if (sx_get16(in + 2) == 0)
        why = "port 0";
    if (why == NULL && in[1] == 4) {
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(sx_get16(in + 2))};
        memcpy(&sin.sin_addr, in + 4, 4);
        uint32_t a = ntohl(sin.sin_addr.s_addr);
        if (a == INADDR_ANY)
            why = "unspecified address (0.0.0.0)";
        else if (sx_in4_loopback(sin.sin_addr))
            why = "loopback address";
        else if (IN_MULTICAST(a))
            why = "multicast address";
        else if (a == INADDR_BROADCAST)
            why = "broadcast address";
        memcpy(&out, &sin, sizeof(sin));
    } else if (why == NULL) {
        struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6, .sin6_port = htons(sx_get16(in + 2))};
        memcpy(&sin6.sin6_addr, in + 4, 16);
        if (IN6_IS_ADDR_UNSPECIFIED(&sin6.sin6_addr))
            why = "unspecified address (::)";
        else if (IN6_IS_ADDR_LOOPBACK(&sin6.sin6_addr))
            why = "loopback address";
        else if (IN6_IS_ADDR_MULTICAST(&sin6.sin6_addr))
            why = "multicast address";
        else if (IN6_IS_ADDR_LINKLOCAL(&sin6.sin6_addr))
            why = "link-local address (it needs an interface, which a card cannot name)";
        memcpy(&out, &sin6, sizeof(sin6));
    }
    if (why != NULL) {
        if (why_p != NULL)
            *why_p = why;
        return SX_ERR_INVALID_PARAM;
    }
    *ss = out;
    return SX_OK;
}

int sx_rdmacm_blob_write(const struct sockaddr *sa, uint8_t *out, size_t cap, uint8_t *len_p)
{
    uint8_t buf[SX_RDMACM_BLOB_V6_LEN];
    size_t len;
    struct sockaddr_storage check;

    if (sa == NULL || out == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    buf[0] = SX_RDMACM_BLOB_VERSION;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof(in));
        buf[1] = 4;
        sx_put16(buf + 2, ntohs(in.sin_port));
        memcpy(buf + 4, &in.sin_addr, 4);
        len = SX_RDMACM_BLOB_V4_LEN;
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof(in6));
        buf[1] = 6;
        sx_put16(buf + 2, ntohs(in6.sin6_port));
        memcpy(buf + 4, &in6.sin6_addr, 16);
        len = SX_RDMACM_BLOB_V6_LEN;
    } else {
        return SX_ERR_INVALID_PARAM;
    }
    /* What a peer would refuse never goes into a card. */
    if (cap < len || sx_rdmacm_blob_parse(buf, len, &check, NULL) != SX_OK)
        return SX_ERR_INVALID_PARAM;
    memcpy(out, buf, len);
    *len_p = (uint8_t)len;
    return SX_OK;
}

void sx_rdmacm_priv_write(uint8_t *out, const sx_rdmacm_priv_t *p)
{
    memset(out, 0, SX_RDMACM_PRIV_LEN);
    sx_put32(out, SX_RDMACM_MAGIC);
    out[4] = SX_RDMACM_VERSION;
    out[5] = p->kind;
    sx_put16(out + 6, p->shard);
    sx_put32(out + 8, p->qpn);
    sx_put32(out + 12, p->qkey);
    out[16] = p->port;
    out[17] = p->flags;
}

int sx_rdmacm_priv_parse(const void *in, size_t len, uint8_t kind, unsigned nshards,
                         sx_rdmacm_priv_t *p, const char **why_p)
{
    const uint8_t *b = in;
    const char *why = NULL;
    sx_rdmacm_priv_t m = {0};

    if (b == NULL || len < SX_RDMACM_PRIV_LEN) {
        why = "shorter than a request";
    } else {
        m.kind = b[5];
        m.shard = sx_get16(b + 6);
        m.qpn = sx_get32(b + 8);
        m.qkey = sx_get32(b + 12);
        m.port = b[16];
        m.flags = b[17];
        if (sx_get32(b) != SX_RDMACM_MAGIC)
            why = "not from shardx (wrong magic)";
        else if (b[4] != SX_RDMACM_VERSION)
            why = "unknown version";
        else if (m.kind != kind)
            why = kind == SX_RDMACM_REQ ? "not a request" : "not an answer";
        else if (b[18] != 0 || b[19] != 0)
            why = "reserved bytes set";
        else if (m.shard >= nshards)
            why = "names a shard that does not exist";
        else if (kind == SX_RDMACM_REQ &&
                 (m.qpn != 0 || m.qkey != 0 || m.port != 0 || m.flags != 0))
            why = "a request with an answer's fields set";
        else if (kind == SX_RDMACM_REP && (m.flags & ~SX_RDMACM_REP_ELSEWHERE) != 0)
            why = "unknown flags";
        else if (kind == SX_RDMACM_REP && (m.qpn < 2 || m.qpn > 0xffffffu))
            why = "queue pair number 0, 1 or over 24 bits";
        else if (kind == SX_RDMACM_REP && m.port == 0)
            why = "port 0";
    }
    if (why != NULL) {
        if (why_p != NULL)
            *why_p = why;
        return SX_ERR_PROTO;
    }
    *p = m;
    return SX_OK;
}

int sx_rdmacm_path_addr(const struct ibv_ah_attr *ah, uint32_t qpn, uint32_t qkey, uint8_t port,
                        sx_verbs_addr_t *out, const char **why_p)
{
    const char *why = NULL;

    if (ah == NULL || out == NULL)
        why = "no path";
    else if (qpn < 2 || qpn > 0xffffffu)
        why = "queue pair number 0, 1 or over 24 bits";
    else if (port == 0)
        why = "port 0";
    else if (!ah->is_global && ah->dlid == 0)
        why = "a path with neither a GRH nor a LID";
    if (why != NULL) {
        if (why_p != NULL)
            *why_p = why;
        return SX_ERR_INVALID_PARAM;
    }
    sx_verbs_addr_t a;
    memset(&a, 0, sizeof(a));
    /* The GRH's destination GID is the one the route needs (on RoCE the
     * peer's IP address as a GID, across IB subnets its global GID); the
     * hop limit, traffic class and source GID index stay the transport's
     * own, since the card address has no room for them. */
    if (ah->is_global) {
        memcpy(a.gid, ah->grh.dgid.raw, sizeof(a.gid));
        a.flags = SX_VERBS_ADDR_GLOBAL;
    }
    a.lid = ah->dlid;
    a.sl = ah->sl;
    a.qpn = qpn;
    a.qkey = qkey;
    a.port = port;
    *out = a;
    return SX_OK;
}
