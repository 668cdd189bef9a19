/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What only the udp transport does, over real loopback sockets: its mtu
 * and card address, the bind address, every field of an address checked,
 * a closed destination port through the shared and a connected socket,
 * connected send sockets (SX_UDP_CONNECT), kernel drop counting, GSO and
 * GRO and when a socket turns busy; and the
 * ACK socket: its address, routing, priority, interoperation with peers
 * without one, and its wait fd. What every transport does (sizes,
 * batches, destinations, the wait fd, oversized datagrams) is
 * test_transport_conformance_udp's.
 * Nothing sleeps to synchronize: receivers poll until what they wait for
 * arrives, and a generous deadline only turns a hang into a failure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <shardx.h>

#include "common/time.h"
#include "test_filter.h"
#include "transports/transport.h"

#define DEADLINE_NS       (10ull * 1000000000ull)
#define TL_RX_DEADLINE_NS DEADLINE_NS

#include "tl_util.h"

/* @p connect: destinations that get a connected send socket (SX_UDP_CONNECT). */
static sx_tl_iface_t *open_udp_connect(size_t rcvbuf, unsigned connect)
{
    sx_tl_config_t cfg = {.shard = 0, .nshards = 1, .rcvbuf = rcvbuf, .udp_connect = connect};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    return iface;
}

static sx_tl_iface_t *open_udp(size_t rcvbuf)
{
    return open_udp_connect(rcvbuf, 0);
}

/* With SX_UDP_GSO (and GRO at the first backlog), room for 4 MiB. */
static sx_tl_iface_t *open_udp_gso(void)
{
    sx_tl_config_t cfg = {.udp_gso = true, .rcvbuf = 4 << 20};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    return iface;
}

/* ------------------------------------------------------------------ */

static void test_open_caps_and_address(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);

    /* By default every interface: 65000-byte receive buffers (loopback's
     * route; each destination has its own, dest_mtu), the kernel copies at
     * once, so all of it inline. */
    assert_int_equal(a->caps.mtu, 65000);
    assert_int_equal(a->caps.inline_limit, 65000);
    /* Kind 5: a count, the port, no ACK port, a host key, then each
     * non-loopback IPv4 address with its prefix length; kind 6, where
     * this host has global IPv6 addresses, the same followed by a count
     * of IPv6 addresses and each with its prefix length. */
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    assert_true(addr[0] == 5 || addr[0] == 6);
    assert_true(addr[1] <= 8);
    size_t at6 = 14 + 5 * (size_t)addr[1];
    if (addr[0] == 5) {
        assert_int_equal(len, at6);
    } else {
        assert_true(addr[at6] >= 1 && addr[1] + addr[at6] <= 8);
        assert_int_equal(len, at6 + 1 + 17 * (size_t)addr[at6]);
        assert_true(len <= SX_TL_ADDR_MAX);
        for (unsigned i = 0; i < addr[at6]; i++) {
            const uint8_t *e = addr + at6 + 1 + 17 * i;
            assert_false(e[0] == 0xfe && (e[1] & 0xc0) == 0x80); /* link-local */
            assert_true(e[16] <= 128);
        }
    }
    assert_true((addr[2] | addr[3] << 8) != 0);
    assert_int_equal(addr[4] | addr[5], 0);
    uint64_t key = 0;
    for (unsigned i = 0; i < 8; i++)
        key |= (uint64_t)addr[6 + i] << (8 * i);
    assert_true(key != 0);
    for (unsigned i = 0; i < addr[1]; i++) {
        assert_true(addr[14 + 5 * i] != 127 && addr[14 + 5 * i] != 0);
        assert_true(addr[14 + 5 * i + 4] <= 32);
    }
    a->ops->close(a);

    /* One address: kind 4, family, a reserved byte, the port (little
     * endian), 127.0.0.1. */
    sx_tl_config_t one = {.bind_addr = "127.0.0.1"};
    sx_tl_iface_t *iface = NULL;
    assert_int_equal(sx_tl_udp_ops.open(&one, &iface), SX_OK);
    len = sizeof(addr);
    assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
    assert_int_equal(len, 8);
    assert_int_equal(addr[0], 4);
    assert_int_equal(addr[1], 0);
    assert_true((addr[2] | addr[3] << 8) != 0);
    assert_memory_equal(addr + 4, "\x7f\x00\x00\x01", 4);
    iface->ops->close(iface);
    iface = NULL;

    static const char *const bad[] = {"0.0.0.0",     "nosuchif0", "127.0.0.1:",  "127.0.0.1:99999",
                                      "127.0.0.1:x", "1.2.3",     "10.0.0.0/33", "lo,,lo",
                                      "lo,",         "^",         "a b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx_tl_config_t cfg = {.bind_addr = bad[i]};
        assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_ERR_INVALID_PARAM);
        assert_null(iface);
    }
    sx_tl_config_t v6 = {.bind_addr = "::1"};
    assert_int_equal(sx_tl_udp_ops.open(&v6, &iface), SX_ERR_UNSUPPORTED);
    sx_tl_config_t ok = {.bind_addr = "127.0.0.1:0", .rcvbuf = 1 << 20, .sndbuf = 1 << 20};
    assert_int_equal(sx_tl_udp_ops.open(&ok, &iface), SX_OK);
    iface->ops->close(iface);
}

static int test_is_control(const void *data, size_t len);

/* A kind 5 address: @p n addresses from @p ips ("a.b.c.d/len"), @p port,
 * host key @p key. */
static size_t list_addr(uint8_t *out, uint16_t port, uint64_t key, const char *const *ips,
                        unsigned n)
{
    out[0] = 5;
    out[1] = (uint8_t)n;
    out[2] = (uint8_t)port;
    out[3] = (uint8_t)(port >> 8);
    out[4] = out[5] = 0;
    for (unsigned i = 0; i < 8; i++)
        out[6 + i] = (uint8_t)(key >> (8 * i));
    for (unsigned i = 0; i < n; i++) {
        char ip[32];
        unsigned prefix = 0;
        assert_int_equal(sscanf(ips[i], "%31[0-9.]/%u", ip, &prefix), 2);
        assert_int_equal(inet_pton(AF_INET, ip, out + 14 + 5 * i), 1);
        out[14 + 5 * i + 4] = (uint8_t)prefix;
    }
    return 14 + 5 * (size_t)n;
}

/* The first IPv4 address of a kind 5 or 6 card address, and its prefix;
 * false when it has none. */
static bool first_ipv4(const uint8_t *addr, uint8_t ip[4], unsigned *prefix)
{
    if (addr[1] == 0)
        return false;
    memcpy(ip, addr + 14, 4);
    *prefix = addr[18];
    return true;
}

/* How many IPv4 and IPv6 addresses a kind 5 or 6 card address lists. */
static unsigned count_ipv4(const uint8_t *addr)
{
    return addr[1];
}

static unsigned count_ipv6(const uint8_t *addr)
{
    return addr[0] == 6 ? addr[14 + 5 * (size_t)addr[1]] : 0;
}

/*
 * The default interface offers every address and chooses among a peer's
 * (udp_addrs.c): loopback for an engine of this host, then an address in
 * one of our subnets, then the rest (routed); addr_next walks them and
 * says so; a peer of another host that offers nothing outside it is
 * unreachable, and addr_check says so without inserting; the filter keeps
 * what it names.
 */
static void test_addresses_offered_and_chosen(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0), *b = open_udp(0);
    uint8_t addr[SX_TL_ADDR_MAX], mine[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr), mlen = sizeof(mine);
    sx_tl_dest_t d;
    char text[128], want[64];

    /* Same host key: loopback at the peer's port, the route's MTU. */
    assert_int_equal(b->ops->local_addr(b, addr, &len), SX_OK);
    assert_int_equal(a->ops->addr_insert(a, addr, len, &d), SX_OK);
    a->ops->dest_str(a, d, text, sizeof(text));
    snprintf(want, sizeof(want), "udp 127.0.0.1:%u", addr[2] | addr[3] << 8);
    assert_string_equal(text, want);
    assert_int_equal(a->ops->dest_mtu(a, d), 65000);
    a->ops->addr_remove(a, d);

    /* Another host offering two addresses: 198.51.100.7 (TEST-NET-2, in
     * none of our subnets) first, then one in our first subnet if we have
     * one; ours is chosen first, the routed one next. */
    assert_int_equal(a->ops->local_addr(a, mine, &mlen), SX_OK);
    char near[32] = "";
    uint8_t ip[4];
    unsigned prefix = 32;
    if (first_ipv4(mine, ip, &prefix)) {
        ip[3] ^= 1; /* a neighbour in the same subnet, /31 or wider */
        snprintf(near, sizeof(near), "%u.%u.%u.%u/%u", ip[0], ip[1], ip[2], ip[3], prefix);
    }
    const char *ips[2] = {"198.51.100.7/24", near};
    unsigned n = near[0] != '\0' && prefix <= 30 ? 2 : 1;
    len = list_addr(addr, 4242, 0x1234, ips, n);
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_OK);
    assert_int_equal(a->ops->addr_insert(a, addr, len, &d), SX_OK);
    a->ops->dest_str(a, d, text, sizeof(text));
    if (n == 2) {
        snprintf(want, sizeof(want), "udp %.*s:4242", (int)(strchr(near, '/') - near), near);
        assert_string_equal(text, want);
        assert_int_equal(a->ops->addr_next(a, d, text, sizeof(text)), SX_OK);
        assert_non_null(strstr(text, "-> udp 198.51.100.7:4242"));
        assert_int_equal(a->ops->addr_next(a, d, text, sizeof(text)), SX_ERR_NOT_FOUND);
        assert_non_null(strstr(text, want)); /* back to the first */
    } else {
        assert_string_equal(text, "udp 198.51.100.7:4242");
        assert_int_equal(a->ops->addr_next(a, d, text, sizeof(text)), SX_ERR_NOT_FOUND);
    }
    a->ops->addr_str(a, addr, len, text, sizeof(text));
    assert_non_null(strstr(text, "198.51.100.7/24"));
    a->ops->addr_remove(a, d);

    /* Another host offering nothing outside it: no pair reaches. */
    len = list_addr(addr, 4242, 0x1234, ips, 0);
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_ERR_PEER_UNREACHABLE);
    assert_int_equal(a->ops->addr_insert(a, addr, len, &d), SX_ERR_PEER_UNREACHABLE);
    /* Malformed lists: a loopback entry, a prefix over 32, a bad length,
     * more than 8, host key 0. */
    const char *lo[1] = {"127.0.0.2/8"};
    len = list_addr(addr, 4242, 0x1234, lo, 1);
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_ERR_INVALID_PARAM);
    len = list_addr(addr, 4242, 0x1234, ips, 1);
    addr[18] = 33;
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_ERR_INVALID_PARAM);
    len = list_addr(addr, 4242, 0x1234, ips, 1);
    assert_int_equal(a->ops->addr_check(a, addr, len - 1), SX_ERR_INVALID_PARAM);
    addr[1] = 9;
    assert_int_equal(a->ops->addr_check(a, addr, 14 + 45), SX_ERR_INVALID_PARAM);
    len = list_addr(addr, 4242, 0, ips, 1);
    assert_int_equal(a->ops->addr_insert(a, addr, len, &d), SX_ERR_INVALID_PARAM);
    a->ops->close(a);
    b->ops->close(b);

    /* With an ACK socket: its port at bytes 4-5, another than the data's;
     * a peer of this host sends ACKs there on loopback. */
    sx_tl_config_t ack = {.ack_socket = 1, .is_control = test_is_control};
    assert_int_equal(sx_tl_udp_ops.open(&ack, &a), SX_OK);
    len = sizeof(addr);
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    uint16_t port = (uint16_t)(addr[2] | addr[3] << 8),
             ack_port = (uint16_t)(addr[4] | addr[5] << 8);
    assert_true(ack_port != 0 && ack_port != port);
    a->ops->addr_str(a, addr, len, text, sizeof(text));
    snprintf(want, sizeof(want), "(ACKs to port %u)", ack_port);
    assert_non_null(strstr(text, want));
    assert_int_equal(a->ops->addr_insert(a, addr, len, &d), SX_OK);
    a->ops->close(a);

    /* Filters: "lo" keeps only loopback, which is never offered (only
     * this host reaches it); "0.0.0.0/0" every IPv4 address (kind 5),
     * "::/0" every IPv6 one, "^lo" every address. */
    unsigned v4 = count_ipv4(mine), all = v4 + count_ipv6(mine);
    static const struct {
        const char *filter;
        int which; /* 0: none, 4: the IPv4 ones, 6: the IPv6 ones, 10: all */
    } f[] = {{"lo", 0},   {"0.0.0.0/0", 4}, {"^lo", 10}, {"^lo,127.0.0.0/8", 10},
             {"::/0", 6}, {"^::/0", 4}};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        sx_tl_config_t cfg = {.bind_addr = f[i].filter};
        sx_tl_iface_t *iface = NULL;
        assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_OK);
        len = sizeof(addr);
        assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
        unsigned want_n = f[i].which == 0   ? 0
                          : f[i].which == 4 ? v4
                          : f[i].which == 6 ? all - v4
                                            : all;
        assert_int_equal(count_ipv4(addr) + count_ipv6(addr), want_n);
        assert_int_equal(addr[0], count_ipv6(addr) > 0 ? 6 : 5);
        iface->ops->close(iface);
    }
}

/*
 * IPv6 (kind 6): a card that lists IPv6 addresses is read, checked and
 * shown; an interface that offers them has an IPv6 socket, and a datagram
 * to a peer's IPv6 address arrives there. The last part needs a global
 * IPv6 address on this host and is skipped, saying so, without one.
 */
/* A kind 6 address: the IPv4 addresses of @p ips ("a.b.c.d/len") as
 * kind 5 has them, then a count and the IPv6 ones ("x::y/len"). */
static size_t list6_addr(uint8_t *out, uint16_t port, uint64_t key, const char *const *ips,
                         unsigned n)
{
    const char *v4[8];
    unsigned n4 = 0, n6 = 0;
    char ip[64];
    unsigned prefix = 0;

    for (unsigned i = 0; i < n && n4 < 8; i++)
        if (strchr(ips[i], ':') == NULL)
            v4[n4++] = ips[i];
    uint8_t *count6 = out + list_addr(out, port, key, v4, n4), *e;
    out[0] = 6;
    e = count6 + 1;
    for (unsigned i = 0; i < n; i++) {
        if (strchr(ips[i], ':') == NULL)
            continue;
        assert_int_equal(sscanf(ips[i], "%63[0-9a-fA-F:.]/%u", ip, &prefix), 2);
        assert_int_equal(inet_pton(AF_INET6, ip, e), 1);
        e[16] = (uint8_t)prefix;
        e += 17;
        n6++;
    }
    *count6 = (uint8_t)n6;
    return (size_t)(e - out);
}

static void test_ipv6(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0);
    uint8_t addr[SX_TL_ADDR_MAX];
    char text[160];
    size_t len;

    /* Read and shown; a peer that offers only IPv6 is reachable only by
     * an interface that has an IPv6 socket. */
    const char *both[2] = {"198.51.100.7/24", "2001:db8::7/64"};
    len = list6_addr(addr, 4242, 0x1234, both, 2);
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_OK);
    a->ops->addr_str(a, addr, len, text, sizeof(text));
    assert_non_null(strstr(text, "198.51.100.7/24"));
    assert_non_null(strstr(text, "2001:db8::7/64"));
    /* Malformed: link-local, loopback, IPv4-mapped, multicast, a prefix
     * over 128; no IPv6 address at all, a count past the end, more than
     * 8 in all, a byte short. */
    static const char *const bad[] = {"fe80::1/64", "::1/128", "::ffff:10.0.0.1/96", "ff02::1/16",
                                      "2001:db8::7/129"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        len = list6_addr(addr, 4242, 0x1234, &bad[i], 1);
        if (a->ops->addr_check(a, addr, len) != SX_ERR_INVALID_PARAM)
            fail_msg("kind 6 entry '%s' was taken", bad[i]);
    }
    len = list6_addr(addr, 4242, 0x1234, both, 1); /* kind 6 with no IPv6 address */
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_ERR_INVALID_PARAM);
    len = list6_addr(addr, 4242, 0x1234, both, 2);
    addr[14 + 5] = 2;
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_ERR_INVALID_PARAM);
    addr[14 + 5] = 8;
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_ERR_INVALID_PARAM);
    addr[14 + 5] = 1;
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_OK);
    assert_int_equal(a->ops->addr_check(a, addr, len - 1), SX_ERR_INVALID_PARAM);

    uint8_t mine[SX_TL_ADDR_MAX];
    size_t mlen = sizeof(mine);
    assert_int_equal(a->ops->local_addr(a, mine, &mlen), SX_OK);
    const char *only6[1] = {"2001:db8::7/64"};
    len = list6_addr(addr, 4242, 0x1234, only6, 1);
    if (mine[0] != 6) {
        assert_int_equal(a->ops->addr_check(a, addr, len), SX_ERR_PEER_UNREACHABLE);
        a->ops->close(a);
        print_message("[ test_ipv6 ] no global IPv6 address here: not sent over IPv6\n");
        return;
    }
    assert_int_equal(a->ops->addr_check(a, addr, len), SX_OK);

    /* b's card as another host would see it: its IPv6 addresses only,
     * another host key, so that a goes over IPv6 rather than loopback. */
    sx_tl_iface_t *b = open_udp(0);
    uint8_t theirs[SX_TL_ADDR_MAX];
    size_t tlen = sizeof(theirs);
    assert_int_equal(b->ops->local_addr(b, theirs, &tlen), SX_OK);
    assert_int_equal(theirs[0], 6);
    size_t at6 = 14 + 5 * (size_t)theirs[1];
    memmove(theirs + 14, theirs + at6, tlen - at6);
    tlen -= at6 - 14;
    theirs[1] = 0;
    theirs[6] ^= 0x5a;
    sx_tl_dest_t d;
    assert_int_equal(a->ops->addr_insert(a, theirs, tlen, &d), SX_OK);
    a->ops->dest_str(a, d, text, sizeof(text));
    assert_non_null(strstr(text, "udp ["));
    assert_true(a->ops->dest_mtu(a, d) > 1000);
    rx_log_t log = {0};
    assert_int_equal(send_one(a, d, "over six", 8), SX_OK);
    rx_until(b, &log, 1);
    assert_int_equal(log.len[0], 8);
    assert_memory_equal(log.data[0], "over six", 8);
    rx_log_free(&log);
    a->ops->close(a);
    b->ops->close(b);
}

/* Each field of an 8-byte address is checked (lengths and bytes that are
 * garbage for any transport: test_transport_conformance_udp). */
static void test_addr_insert_rejects_garbage(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0);
    sx_tl_dest_t dest = 12345;
    static const struct {
        const char *bytes;
        size_t len;
    } bad[] = {
        {"\x06\x00\x10\x27\x7f\x00\x00\x01", 8}, /* a list of IPv4 and IPv6, too short */
        {"\x07\x00\x10\x27\x7f\x00\x00\x01", 8}, /* no such kind */
        {"\x00\x00\x10\x27\x7f\x00\x00\x01", 8}, /* no family */
        {"\x04\x01\x10\x27\x7f\x00\x00\x01", 8}, /* reserved byte set */
        {"\x04\x00\x00\x00\x7f\x00\x00\x01", 8}, /* port 0 */
        {"\x04\x00\x10\x27\x00\x00\x00\x00", 8}, /* 0.0.0.0 */
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(a->ops->addr_insert(a, bad[i].bytes, bad[i].len, &dest),
                         SX_ERR_INVALID_PARAM);
    assert_int_equal(dest, 12345);
    /* A well-formed address is accepted, even if nobody listens there. */
    assert_int_equal(a->ops->addr_insert(a, "\x04\x00\x10\x27\x7f\x00\x00\x01", 8, &dest), SX_OK);
    a->ops->close(a);
}

/* A peer whose port closed, reached through the shared socket (connect 0)
 * or a connected one (1), which reports the ICMP error on its next send. */
static void closed_port_is_not_fatal(unsigned connect)
{
    sx_tl_iface_t *a = open_udp_connect(0, connect), *gone = open_udp(0);
    sx_tl_dest_t to_gone = connect_to(a, gone);
    sx_tl_event_t ev[8];
    rx_log_t log = {0};

    gone->ops->close(gone); /* the port is now closed: ICMP port unreachable */
    for (unsigned i = 0; i < 20; i++) {
        assert_int_equal(send_one(a, to_gone, "lost", 4), SX_OK);
        assert_true(a->ops->poll(a, ev, 8) >= 0);
    }
    /* The interface still works both ways. */
    sx_tl_iface_t *c = open_udp(0);
    sx_tl_dest_t to_c = connect_to(a, c), to_a = connect_to(c, a);
    assert_int_equal(send_one(a, to_c, "hi", 2), SX_OK);
    rx_until(c, &log, 1);
    rx_log_free(&log);
    assert_int_equal(send_one(c, to_a, "ho", 2), SX_OK);
    rx_until(a, &log, 1);
    assert_memory_equal(log.data[0], "ho", 2);
    rx_log_free(&log);
    assert_int_equal(send_one(a, to_gone, "lost", 4), SX_OK);
    if (connect > 0) /* each datagram after the first met the last one's error */
        assert_true(a->stats.tx_refused > 0);
    a->ops->close(a);
    c->ops->close(c);
}

static void test_closed_port_is_not_fatal(void **state)
{
    (void)state;
    closed_port_is_not_fatal(0);
    closed_port_is_not_fatal(1);
}

/* A plain socket on loopback standing in for a peer, and its card bytes. */
static int raw_peer(uint8_t addr[8])
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    uint16_t port = ntohs(sa.sin_port);
    addr[0] = 4;
    addr[1] = 0;
    addr[2] = (uint8_t)(port & 0xff);
    addr[3] = (uint8_t)(port >> 8);
    memcpy(addr + 4, &sa.sin_addr.s_addr, 4);
    return fd;
}

/* Sends @p text to @p dest and returns the source port it arrived from
 * at @p fd (blocking receive, bounded by SO_RCVTIMEO). */
static unsigned arrival_port(sx_tl_iface_t *a, sx_tl_dest_t dest, int fd, const char *text)
{
    struct timeval tv = {.tv_sec = 10};
    struct sockaddr_in from;
    socklen_t len = sizeof(from);
    char buf[64];

    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(send_one(a, dest, text, strlen(text)), SX_OK);
    ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
    assert_int_equal(n, (ssize_t)strlen(text));
    assert_memory_equal(buf, text, strlen(text));
    return ntohs(from.sin_port);
}

/* Open descriptors of this process. */
static unsigned open_fds(void)
{
    unsigned n = 0;
    for (int fd = 0; fd < 4096; fd++)
        n += fcntl(fd, F_GETFD) != -1;
    return n;
}

/*
 * SX_UDP_CONNECT: the first N destinations send through a connected socket
 * of their own (another source port than the card's), the rest through
 * the data socket (the card's port); removing a connected destination
 * hands its place to the next one inserted.
 */
static void test_connected_send_sockets(void **state)
{
    (void)state;
    unsigned fds0 = open_fds();
    sx_tl_iface_t *a = open_udp_connect(0, 1);
    uint8_t own[SX_TL_ADDR_MAX], pa[8], pb[8], pc[8];
    size_t ownlen = sizeof(own);
    sx_tl_dest_t da, db, dc;

    assert_int_equal(a->ops->local_addr(a, own, &ownlen), SX_OK);
    unsigned card_port = own[2] | (unsigned)own[3] << 8;
    int fa = raw_peer(pa), fb = raw_peer(pb), fc = raw_peer(pc);
    assert_int_equal(a->ops->addr_insert(a, pa, 8, &da), SX_OK);
    assert_int_equal(a->ops->addr_insert(a, pb, 8, &db), SX_OK);

    unsigned via_a = arrival_port(a, da, fa, "to a");
    assert_int_not_equal(via_a, card_port);                       /* connected */
    assert_int_equal(arrival_port(a, db, fb, "to b"), card_port); /* over the cap: shared */
    assert_int_equal(arrival_port(a, da, fa, "a again"), via_a);

    unsigned fds1 = open_fds();
    a->ops->addr_remove(a, da); /* closes its socket: c gets the place */
    assert_int_equal(open_fds(), fds1 - 1);
    assert_int_equal(a->ops->addr_insert(a, pc, 8, &dc), SX_OK);
    assert_int_equal(open_fds(), fds1);
    assert_int_not_equal(arrival_port(a, dc, fc, "to c"), card_port);
    assert_int_equal(arrival_port(a, db, fb, "b again"), card_port);
    a->ops->close(a);

    /* SX_UDP_CONNECT=0: everything from the card's port. */
    a = open_udp_connect(0, 0);
    ownlen = sizeof(own);
    assert_int_equal(a->ops->local_addr(a, own, &ownlen), SX_OK);
    card_port = own[2] | (unsigned)own[3] << 8;
    assert_int_equal(a->ops->addr_insert(a, pa, 8, &da), SX_OK);
    assert_int_equal(arrival_port(a, da, fa, "shared"), card_port);
    a->ops->close(a);
    close(fa);
    close(fb);
    close(fc);
    assert_int_equal(open_fds(), fds0); /* close released every socket */
}

static void test_kernel_drops_counted(void **state)
{
    (void)state;
    /* The smallest receive buffer the kernel allows holds a few datagrams. */
    sx_tl_iface_t *a = open_udp(0), *b = open_udp(1);
    sx_tl_dest_t to_b = connect_to(a, b);
    enum { BURST = 256 };
    uint8_t buf[1000];
    sx_tl_event_t ev[32];
    unsigned sent = 0;
    size_t burst_rx = 0;

    memset(buf, 0xab, sizeof(buf));
    while (sent < BURST) {
        int rc = send_one(a, to_b, buf, sizeof(buf));
        assert_true(rc == SX_OK || rc == SX_ERR_AGAIN);
        sent += rc == SX_OK;
    }
    /* Then a marker, into a drained buffer; its SO_RXQ_OVFL control message
     * carries the socket's drop count so far. */
    for (int n; (n = b->ops->poll(b, ev, 32)) > 0;)
        burst_rx += (size_t)n;
    assert_int_equal(send_one(a, to_b, "m", 1), SX_OK);
    uint64_t deadline = sx_time_ns() + DEADLINE_NS;
    for (bool marker = false; !marker;) {
        int n = b->ops->poll(b, ev, 32);
        assert_true(n >= 0);
        for (int i = 0; i < n; i++) {
            if (ev[i].len == 1)
                marker = true;
            else
                burst_rx++;
        }
        assert_true(sx_time_ns() < deadline);
    }
    assert_true(burst_rx < BURST);
    assert_true(b->stats.rx_kernel_drops > 0);
    assert_int_equal(burst_rx + b->stats.rx_kernel_drops, BURST);
    a->ops->close(a);
    b->ops->close(b);
}

/* ------------------------------------------------------------------ */
/* The ACK socket (config.ack_socket)                                  */

/* The tests' control datagrams start with 'A'; as sx_wire_is_control looks
 * at one byte of the wire header, this looks at one byte of iov[0]. */
static int test_is_control(const void *data, size_t len)
{
    return len >= 1 && ((const uint8_t *)data)[0] == 'A';
}

static sx_tl_iface_t *open_udp_ack(int ack_socket)
{
    /* One address (kind 4), whose layout these tests read; the default
     * (kind 5) names its ACK port too: test_addresses_offered_and_chosen. */
    sx_tl_config_t cfg = {.shard = 0,
                          .nshards = 1,
                          .bind_addr = "127.0.0.1",
                          .ack_socket = ack_socket,
                          .is_control = test_is_control};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    return iface;
}

/* The fd of this process's UDP socket bound to @p port, found by asking
 * every open fd its name: the test watches the interface's two sockets
 * without a back door in the transport. */
static int fd_of_port(uint16_t port)
{
    for (int fd = 0; fd < 1024; fd++) {
        struct sockaddr_in sa;
        socklen_t len = sizeof(sa);
        int type = 0;
        socklen_t tlen = sizeof(type);
        if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 && sa.sin_family == AF_INET &&
            ntohs(sa.sin_port) == port && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 &&
            type == SOCK_DGRAM)
            return fd;
    }
    fail_msg("no socket bound to port %u", port);
    return -1;
}

static void test_ack_socket_address(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_ack(1), *off = open_udp_ack(0);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    char text[128];

    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    assert_int_equal(len, 10);
    assert_int_equal(addr[0], 4);
    assert_int_equal(addr[1], 0);
    uint16_t port = (uint16_t)(addr[2] | addr[3] << 8);
    uint16_t ack_port = (uint16_t)(addr[8] | addr[9] << 8);
    assert_true(port != 0 && ack_port != 0 && ack_port != port);
    assert_memory_equal(addr + 4, "\x7f\x00\x00\x01", 4);
    /* Both ports are real sockets of this process. */
    assert_int_not_equal(fd_of_port(port), fd_of_port(ack_port));
    a->ops->addr_str(a, addr, len, text, sizeof(text));
    char want[128];
    snprintf(want, sizeof(want), "udp 127.0.0.1:%u (ACKs to port %u)", port, ack_port);
    assert_string_equal(text, want);
    size_t short_len = 9;
    assert_int_equal(a->ops->local_addr(a, addr, &short_len), SX_ERR_TRUNCATED);

    /* Round trip: each side accepts the other's address, and its own. */
    sx_tl_dest_t d = SX_TL_DEST_NONE;
    assert_int_equal(off->ops->addr_insert(off, addr, 10, &d), SX_OK);
    assert_int_equal(a->ops->addr_insert(a, addr, 10, &d), SX_OK);
    len = sizeof(addr);
    assert_int_equal(off->ops->local_addr(off, addr, &len), SX_OK);
    assert_int_equal(len, 8);
    assert_int_equal(a->ops->addr_insert(a, addr, 8, &d), SX_OK);
    a->ops->close(a);
    off->ops->close(off);
}

static void test_ack_socket_rejects_garbage(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_ack(1);
    sx_tl_dest_t dest = 777;
    char text[128];
    static const struct {
        const char *bytes;
        size_t len;
        const char *why; /* in addr_str's text */
    } bad[] = {
        {"\x04\x00\x10\x27\x7f\x00\x00\x01\x11", 9, "wrong length"},
        {"\x04\x00\x10\x27\x7f\x00\x00\x01\x11\x27\x00", 11, "wrong length"},
        {"\x04\x00\x10\x27\x7f\x00\x00\x01\x00\x00", 10, "ACK port 0"},
        {"\x04\x00\x10\x27\x7f\x00\x00\x01\x10\x27", 10, "equal to the data port"},
        {"\x04\x00\x00\x00\x7f\x00\x00\x01\x11\x27", 10, "port 0"},
        {"\x04\x02\x10\x27\x7f\x00\x00\x01\x11\x27", 10, "reserved"},
        {"\x07\x00\x10\x27\x7f\x00\x00\x01\x11\x27", 10, "unknown address kind"},
        {"\x04\x00\x10\x27\x00\x00\x00\x00\x11\x27", 10, "0.0.0.0"},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(a->ops->addr_insert(a, bad[i].bytes, bad[i].len, &dest),
                         SX_ERR_INVALID_PARAM);
        a->ops->addr_str(a, bad[i].bytes, bad[i].len, text, sizeof(text));
        if (strstr(text, "malformed") == NULL || strstr(text, bad[i].why) == NULL)
            fail_msg("address %zu: '%s' does not say '%s'", i, text, bad[i].why);
    }
    assert_int_equal(dest, 777);
    assert_int_equal(a->ops->addr_insert(a, "\x04\x00\x10\x27\x7f\x00\x00\x01\x11\x27", 10, &dest),
                     SX_OK);
    a->ops->close(a);
}

/* Sends @p n datagrams to @p dest in one post_send call: data "D<i>" and,
 * where @p pattern has an 'A', a control datagram "A<i>". */
static void send_mix(sx_tl_iface_t *tx, sx_tl_dest_t dest, const char *pattern, char (*bufs)[16])
{
    sx_tl_tx_t t[32];
    unsigned n = (unsigned)strlen(pattern), posted = 0;

    assert_true(n <= 32);
    for (unsigned i = 0; i < n; i++) {
        snprintf(bufs[i], sizeof(bufs[i]), "%c%u", pattern[i], i);
        t[i] = (sx_tl_tx_t){.dest = dest, .iovcnt = 1};
        t[i].iov[0] = (struct iovec){bufs[i], strlen(bufs[i])};
    }
    assert_int_equal(tx->ops->post_send(tx, t, n, &posted), SX_OK);
    assert_int_equal(posted, n);
}

static void test_ack_socket_routing(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_ack(1), *b = open_udp_ack(1);
    sx_tl_dest_t to_b = connect_to(a, b);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t alen = sizeof(addr);
    char bufs[32][16];
    sx_tl_event_t ev[32];
    rx_log_t log = {0};

    assert_int_equal(b->ops->local_addr(b, addr, &alen), SX_OK);
    int b_data = fd_of_port((uint16_t)(addr[2] | addr[3] << 8));
    int b_ack = fd_of_port((uint16_t)(addr[8] | addr[9] << 8));

    /* Data, then an ACK, in one call: two sendmmsg runs, order kept. */
    send_mix(a, to_b, "DDDDDDAD", bufs);
    assert_int_equal(a->stats.tx_datagrams, 8);
    assert_int_equal(a->stats.tx_ack_path, 1);
    /* With both of b's sockets holding datagrams, the ACK comes first
     * although six data datagrams were sent before it. */
    assert_true(fd_readable(b_data, 10000));
    assert_true(fd_readable(b_ack, 10000));
    int n = b->ops->poll(b, ev, 32);
    assert_true(n >= 2);
    assert_int_equal(ev[0].len, 2);
    assert_memory_equal(ev[0].data, "A6", 2);
    assert_memory_equal(ev[1].data, "D0", 2);
    for (int i = 0; i < n; i++)
        rx_log_add(&log, ev[i].data, ev[i].len);
    rx_until(b, &log, 8);
    for (unsigned i = 1, d = 0; i < 8; i++, d++) {
        char want[8];
        snprintf(want, sizeof(want), "D%u", d == 6 ? 7 : d);
        assert_memory_equal(log.data[i], want, strlen(want));
    }
    rx_log_free(&log);
    assert_int_equal(b->stats.rx_ack_socket, 1);
    assert_int_equal(b->stats.rx_datagrams, 8);

    /* A flood on the ACK socket leaves a quarter of each poll to data:
     * control datagrams first, at most 24 of 32, and data after them. */
    send_mix(a, to_b, "DDDDAAAAAAAAAAAAAAAAAAAAAAAAAAAA", bufs);
    assert_true(fd_readable(b_data, 10000));
    assert_true(fd_readable(b_ack, 10000));
    n = b->ops->poll(b, ev, 32);
    int acks = 0;
    while (acks < n && ((const char *)ev[acks].data)[0] == 'A')
        acks++;
    assert_true(acks >= 1 && acks <= 24);
    assert_true(n > acks);
    for (int i = acks; i < n; i++)
        assert_int_equal(((const char *)ev[i].data)[0], 'D');
    for (int i = 0; i < n; i++)
        rx_log_add(&log, ev[i].data, ev[i].len);
    rx_until(b, &log, 32);
    rx_log_free(&log);
    assert_int_equal(b->stats.rx_ack_socket, 1 + 28);
    assert_int_equal(a->stats.tx_ack_path, 1 + 28);

    /* A control datagram longer than UDP_CTRL_MAX (256) takes the data
     * path; one sent straight to the ACK port is cut, and dropped. */
    static char big[300];
    memset(big, 'A', sizeof(big));
    assert_int_equal(send_one(a, to_b, big, sizeof(big)), SX_OK);
    assert_int_equal(a->stats.tx_ack_path, 29);
    rx_until(b, &log, 1);
    assert_int_equal(log.len[0], sizeof(big));
    rx_log_free(&log);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_port = htons((uint16_t)(addr[8] | addr[9] << 8));
    memcpy(&sa.sin_addr, addr + 4, 4);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(sendto(fd, big, sizeof(big), 0, (struct sockaddr *)&sa, sizeof(sa)),
                     (ssize_t)sizeof(big));
    assert_int_equal(sendto(fd, "A!", 2, 0, (struct sockaddr *)&sa, sizeof(sa)), 2);
    rx_until(b, &log, 1);
    assert_memory_equal(log.data[0], "A!", 2);
    assert_int_equal(b->stats.rx_truncated, 1);
    rx_log_free(&log);
    close(fd);
    a->ops->close(a);
    b->ops->close(b);
}

/*
 * A datagram longer than the receive buffer, read alone from an idle
 * socket (recvfrom, sx_udp_rx_poll), is counted as truncated and never
 * handed up, and the datagram after it arrives whole: the ACK socket's
 * buffers hold UDP_CTRL_MAX (256) bytes. Each is sent on its own and
 * polled once it is readable, so that no read finds two (which would
 * switch the socket to recvmmsg). Without MSG_TRUNC the cut 256 bytes
 * were handed up as a datagram.
 */
static void test_lone_datagram_cut_counted(void **state)
{
    (void)state;
    sx_tl_iface_t *b = open_udp_ack(1);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t alen = sizeof(addr);
    sx_tl_event_t ev[8];
    static char big[300];
    uint64_t deadline = sx_time_ns() + TL_RX_DEADLINE_NS;

    assert_int_equal(b->ops->local_addr(b, addr, &alen), SX_OK);
    int b_ack = fd_of_port((uint16_t)(addr[8] | addr[9] << 8));
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_port = htons((uint16_t)(addr[8] | addr[9] << 8));
    memcpy(&sa.sin_addr, addr + 4, 4);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);

    memset(big, 'A', sizeof(big));
    assert_int_equal(sendto(fd, big, sizeof(big), 0, (struct sockaddr *)&sa, sizeof(sa)),
                     (ssize_t)sizeof(big));
    assert_true(fd_readable(b_ack, 10000));
    while (b->stats.rx_truncated == 0) {
        assert_int_equal(b->ops->poll(b, ev, 8), 0);
        if (sx_time_ns() > deadline)
            fail_msg("the 300-byte datagram was never read");
    }
    assert_int_equal(b->stats.rx_truncated, 1);
    assert_int_equal(b->stats.rx_datagrams, 0);

    assert_int_equal(sendto(fd, "A!", 2, 0, (struct sockaddr *)&sa, sizeof(sa)), 2);
    rx_log_t log = {0};
    rx_until(b, &log, 1);
    assert_int_equal(log.len[0], 2);
    assert_memory_equal(log.data[0], "A!", 2);
    assert_int_equal(b->stats.rx_truncated, 1);
    rx_log_free(&log);
    close(fd);
    b->ops->close(b);
}

/* Peers with and without the ACK socket, and one with no idea of control
 * datagrams at all, talk to each other. */
static void test_ack_socket_interop(void **state)
{
    (void)state;
    sx_tl_iface_t *on = open_udp_ack(1), *off = open_udp_ack(0), *plain = open_udp(0);
    sx_tl_dest_t on_to_off = connect_to(on, off), off_to_on = connect_to(off, on);
    sx_tl_dest_t plain_to_on = connect_to(plain, on), on_to_plain = connect_to(on, plain);
    char bufs[32][16];
    rx_log_t log = {0};

    /* on -> off: the ACK leaves through on's ACK socket to off's data
     * port, the only one off has. */
    send_mix(on, on_to_off, "DAD", bufs);
    assert_int_equal(on->stats.tx_ack_path, 1);
    rx_until(off, &log, 3);
    assert_int_equal(off->stats.rx_ack_socket, 0);
    assert_int_equal(off->stats.rx_datagrams, 3);
    rx_log_free(&log);

    /* off -> on: off has no ACK socket but on's address names one, so
     * off's ACKs go there from its data socket. */
    send_mix(off, off_to_on, "DAAD", bufs);
    assert_int_equal(off->stats.tx_ack_path, 2);
    rx_until(on, &log, 4);
    assert_int_equal(on->stats.rx_ack_socket, 2);
    rx_log_free(&log);

    /* An interface that calls nothing control sends everything to the data
     * port; and on's ACKs reach it too. */
    send_mix(plain, plain_to_on, "DA", bufs);
    assert_int_equal(plain->stats.tx_ack_path, 0);
    rx_until(on, &log, 2);
    assert_int_equal(on->stats.rx_ack_socket, 2);
    rx_log_free(&log);
    send_mix(on, on_to_plain, "AD", bufs);
    rx_until(plain, &log, 2);
    /* Two sockets sent them: their order on arrival is not promised. */
    assert_true(memcmp(log.data[0], "A0", 2) == 0 || memcmp(log.data[1], "A0", 2) == 0);
    rx_log_free(&log);
    on->ops->close(on);
    off->ops->close(off);
    plain->ops->close(plain);
}

static struct sockaddr_in loopback_of(sx_tl_iface_t *a);

/* wait_fds hands out the sockets themselves, the data socket first, never
 * an epoll set over them (transport.h says why): one of them wakes a
 * sleeper for a datagram on either socket, and all are quiet once both
 * are drained. */
static void test_ack_socket_wait_fds(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_ack(1), *b = open_udp_ack(1);
    sx_tl_dest_t to_b = connect_to(a, b);
    int fds[SX_TL_WAIT_FDS];
    unsigned nfds = b->ops->wait_fds(b, fds);
    sx_tl_event_t ev[4];
    char bufs[32][16];

    assert_true(nfds >= 2 && nfds <= SX_TL_WAIT_FDS);
    for (unsigned i = 0; i < nfds; i++) {
        int type = 0;
        socklen_t tlen = sizeof(type);
        assert_int_equal(getsockopt(fds[i], SOL_SOCKET, SO_TYPE, &type, &tlen), 0);
        assert_int_equal(type, SOCK_DGRAM);
    }
    struct sockaddr_in bound;
    socklen_t blen = sizeof(bound);
    assert_int_equal(getsockname(fds[0], (struct sockaddr *)&bound, &blen), 0);
    assert_int_equal(bound.sin_port, loopback_of(b).sin_port);
    assert_false(tl_wait_readable(b, 0));
    const char *const patterns[] = {"A", "D", "AD"};
    for (size_t i = 0; i < 3; i++) {
        send_mix(a, to_b, patterns[i], bufs);
        assert_true(tl_wait_readable(b, 10000));
        size_t got = 0;
        uint64_t deadline = sx_time_ns() + DEADLINE_NS;
        while (got < strlen(patterns[i])) {
            int n = b->ops->poll(b, ev, 4);
            assert_true(n >= 0);
            got += (size_t)n;
            assert_true(sx_time_ns() < deadline);
        }
        assert_false(tl_wait_readable(b, 0));
    }
    a->ops->close(a);
    b->ops->close(b);
}

/* ------------------------------------------------------------------ */
/* The hot socket (SX_UDP_HOT; udp.c, "Hot socket")                    */

#define HOT_RUN 32 /* UDP_HOT_RUN: datagrams in a row that make a destination hot */

static sx_tl_iface_t *open_udp_hot(void)
{
    sx_tl_config_t cfg = {.rcvbuf = 1 << 20, .udp_connect = 16, .udp_hot = true};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    return iface;
}

/* @p n round trips between a and b, every datagram checked; each event's
 * sender must pass src_matches for the destination it came from. */
static void hot_ping_pong(sx_tl_iface_t *a, sx_tl_dest_t to_b, sx_tl_dest_t to_a, sx_tl_iface_t *b,
                          unsigned n)
{
    sx_tl_event_t ev[2];
    char text[32];

    for (unsigned i = 0; i < 2 * n; i++) {
        sx_tl_iface_t *tx = i % 2 ? b : a, *rx = i % 2 ? a : b;
        sx_tl_dest_t back = i % 2 ? to_b : to_a; /* rx's destination for tx */
        int len = snprintf(text, sizeof(text), "pp %u", i);
        uint64_t deadline = sx_time_ns() + DEADLINE_NS;
        int got;
        assert_int_equal(send_one(tx, i % 2 ? to_a : to_b, text, (size_t)len), SX_OK);
        /* Room for two: the data socket, read after the hot one, has room
         * left, so its empty reads count towards its going quiet. */
        while ((got = rx->ops->poll(rx, ev, 2)) == 0)
            assert_true(sx_time_ns() < deadline);
        assert_int_equal(got, 1);
        assert_int_equal(ev[0].len, (size_t)len);
        assert_memory_equal(ev[0].data, text, (size_t)len);
        assert_true(rx->ops->src_matches(rx, back, ev[0].src, ev[0].src_len));
    }
}

/* Polls @p rx until one datagram arrives, which must be @p text. */
static void hot_expect(sx_tl_iface_t *rx, const char *text)
{
    expect_one(rx, text, strlen(text));
}

/*
 * A ping-pong makes each end the other's hot destination after HOT_RUN
 * datagrams: from then on every datagram leaves through one hot socket
 * and lands in the other's, and the wait fds include the hot socket.
 */
static void test_hot_socket_pairs(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_hot(), *b = open_udp_hot();
    sx_tl_dest_t to_b = connect_to(a, b), to_a = connect_to(b, a);
    int fds[SX_TL_WAIT_FDS];
    sx_tl_config_t cfg = {.rcvbuf = 1 << 20};
    sx_tl_iface_t *cold = NULL;

    /* One more wait fd than without (the data socket, the IPv6 one where
     * this host has IPv6 addresses, and the hot socket). */
    assert_int_equal(sx_tl_udp_ops.open(&cfg, &cold), SX_OK);
    unsigned ncold = cold->ops->wait_fds(cold, fds);
    cold->ops->close(cold);
    assert_int_equal(a->ops->wait_fds(a, fds), ncold + 1);
    hot_ping_pong(a, to_b, to_a, b, HOT_RUN - 1);
    assert_int_equal(a->stats.hot_connects, 0);
    assert_int_equal(b->stats.rx_hot, 0);
    hot_ping_pong(a, to_b, to_a, b, 1);
    assert_int_equal(a->stats.hot_connects, 1);
    assert_int_equal(b->stats.hot_connects, 1);
    uint64_t a_hot = a->stats.rx_hot, b_hot = b->stats.rx_hot;
    hot_ping_pong(a, to_b, to_a, b, 100);
    assert_int_equal(a->stats.rx_hot - a_hot, 100);
    assert_int_equal(b->stats.rx_hot - b_hot, 100);
    assert_int_equal(a->stats.hot_connects, 1);

    /* A sleeper on the wait fds wakes for a datagram to the hot socket
     * (long after the connect: its reads take no addresses by now). */
    assert_false(tl_wait_readable(b, 0));
    assert_int_equal(send_one(a, to_b, "wake", 4), SX_OK);
    assert_true(tl_wait_readable(b, 10000));
    hot_expect(b, "wake");
    assert_int_equal(b->stats.rx_hot - b_hot, 101);
    assert_false(tl_wait_readable(b, 0));
    a->ops->close(a);
    b->ops->close(b);
}

/*
 * Toward a peer without a hot socket (a plain socket here, as an older
 * shardx's data socket): after the run, datagrams leave from the card's
 * port instead of the connected send socket's, but for a large one; what
 * the peer sends from its card port lands in the hot socket, what it
 * sends from elsewhere in the data socket.
 */
static void test_hot_socket_plain_peer(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_hot();
    uint8_t own[SX_TL_ADDR_MAX], pa[8];
    size_t ownlen = sizeof(own);
    sx_tl_dest_t da;
    char text[32];

    assert_int_equal(a->ops->local_addr(a, own, &ownlen), SX_OK);
    unsigned card_port = own[2] | (unsigned)own[3] << 8;
    int fa = raw_peer(pa);
    assert_int_equal(a->ops->addr_insert(a, pa, 8, &da), SX_OK);
    for (unsigned i = 0; i < HOT_RUN - 1; i++) {
        snprintf(text, sizeof(text), "run %u", i);
        assert_int_not_equal(arrival_port(a, da, fa, text), card_port); /* connected */
    }
    assert_int_equal(arrival_port(a, da, fa, "hot"), card_port);
    assert_int_equal(arrival_port(a, da, fa, "hot again"), card_port);
    assert_int_equal(a->stats.hot_connects, 1);

    /* A datagram of more than half the mtu (bulk) leaves through the
     * connected send socket and takes the hot socket from the peer; a run
     * of small ones gives it back without connecting again. */
    size_t big_len = a->caps.mtu / 2 + 1;
    char *big = calloc(1, big_len), *back = malloc(big_len);
    assert_non_null(big);
    assert_non_null(back);
    struct sockaddr_in from;
    socklen_t flen = sizeof(from);
    assert_int_equal(send_one(a, da, big, big_len), SX_OK);
    assert_int_equal(recvfrom(fa, back, big_len, 0, (struct sockaddr *)&from, &flen),
                     (ssize_t)big_len);
    assert_int_not_equal(ntohs(from.sin_port), card_port);
    free(big);
    free(back);
    for (unsigned i = 0; i < HOT_RUN - 1; i++) {
        snprintf(text, sizeof(text), "again %u", i);
        assert_int_not_equal(arrival_port(a, da, fa, text), card_port);
    }
    assert_int_equal(arrival_port(a, da, fa, "hot once more"), card_port);
    assert_int_equal(a->stats.hot_connects, 1);

    struct sockaddr_in to = loopback_of(a);
    assert_int_equal(sendto(fa, "from card", 9, 0, (struct sockaddr *)&to, sizeof(to)), 9);
    hot_expect(a, "from card");
    assert_int_equal(a->stats.rx_hot, 1);
    int other = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(other >= 0);
    assert_int_equal(sendto(other, "elsewhere", 9, 0, (struct sockaddr *)&to, sizeof(to)), 9);
    hot_expect(a, "elsewhere");
    assert_int_equal(a->stats.rx_hot, 1);
    close(other);
    close(fa);
    a->ops->close(a);
}

/*
 * The hot socket binds the data port with SO_REUSEPORT, and both drop the
 * option at once: no other socket can bind the port, with the option or
 * without, on the wildcard or on loopback, as before there was a hot
 * socket; and before it is connected to a destination, every datagram
 * goes to the data socket.
 */
static void test_hot_socket_port_stays_closed(void **state)
{
    (void)state;
    sx_tl_iface_t *b = open_udp_hot();
    struct sockaddr_in to = loopback_of(b);
    rx_log_t log = {0};
    char buf[64];

    for (unsigned k = 0; k < 4; k++) {
        int one = k & 1, s = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = to.sin_port};
        if (k & 2)
            at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_true(s >= 0);
        assert_int_equal(setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
        assert_int_equal(bind(s, (struct sockaddr *)&at, sizeof(at)), -1);
        assert_int_equal(errno, EADDRINUSE);
        close(s);
    }
    /* From 64 source ports. */
    for (unsigned i = 0; i < 64; i++) {
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        assert_true(s >= 0);
        int len = snprintf(buf, sizeof(buf), "port %u", i);
        assert_int_equal(sendto(s, buf, (size_t)len, 0, (struct sockaddr *)&to, sizeof(to)), len);
        close(s);
    }
    rx_until(b, &log, 64);
    assert_int_equal(log.n, 64);
    assert_int_equal(b->stats.rx_hot, 0);
    rx_log_free(&log);
    b->ops->close(b);
}

/* Polls @p rx for one datagram, which must be @p text, and returns the
 * port its event says it came from. */
static unsigned hot_expect_from(sx_tl_iface_t *rx, const char *text)
{
    sx_tl_event_t ev[1];
    uint64_t deadline = sx_time_ns() + DEADLINE_NS;
    int got;
    struct sockaddr_in from;

    while ((got = rx->ops->poll(rx, ev, 1)) == 0)
        assert_true(sx_time_ns() < deadline);
    assert_int_equal(got, 1);
    assert_int_equal(ev[0].len, strlen(text));
    assert_memory_equal(ev[0].data, text, strlen(text));
    assert_int_equal(ev[0].src_len, sizeof(from));
    memcpy(&from, ev[0].src, sizeof(from));
    return ntohs(from.sin_port);
}

/*
 * A connect that fails (a run to the broadcast address, which a socket
 * without SO_BROADCAST may not connect to) leaves the hot socket
 * disconnected, where it gets anyone's datagrams: they must be read with
 * their own senders, not the last destination's. Before, settled, its
 * reads took no address.
 */
static void test_hot_socket_connect_fails(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_hot();
    uint8_t pa[8], bcast[8] = {4, 0, 9, 0, 255, 255, 255, 255};
    sx_tl_dest_t da, db;
    struct sockaddr_in to = loopback_of(a), pa_sa;
    socklen_t len = sizeof(pa_sa);
    char text[32];

    int fa = raw_peer(pa);
    assert_int_equal(getsockname(fa, (struct sockaddr *)&pa_sa, &len), 0);
    assert_int_equal(a->ops->addr_insert(a, pa, 8, &da), SX_OK);
    for (unsigned i = 0; i < HOT_RUN; i++) {
        snprintf(text, sizeof(text), "run %u", i);
        (void)arrival_port(a, da, fa, text);
    }
    assert_int_equal(a->stats.hot_connects, 1);
    /* Past the settling time (10 ms), with empty reads after it. */
    uint64_t settled = sx_time_ns() + 20000000ull;
    sx_tl_event_t ev[4];
    while (sx_time_ns() < settled)
        assert_int_equal(a->ops->poll(a, ev, 4), 0);
    assert_int_equal(sendto(fa, "from a", 6, 0, (struct sockaddr *)&to, sizeof(to)), 6);
    assert_int_equal(hot_expect_from(a, "from a"), ntohs(pa_sa.sin_port));
    assert_int_equal(a->stats.rx_hot, 1);

    assert_int_equal(a->ops->addr_insert(a, bcast, 8, &db), SX_OK);
    for (unsigned i = 0; i < HOT_RUN; i++) {
        int rc = send_one(a, db, "nobody", 6);
        assert_int_not_equal(rc, SX_OK);
    }
    assert_int_equal(a->stats.hot_connects, 1);
    int c = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)},
                       c_sa;
    assert_true(c >= 0);
    assert_int_equal(bind(c, (struct sockaddr *)&any, sizeof(any)), 0);
    len = sizeof(c_sa);
    assert_int_equal(getsockname(c, (struct sockaddr *)&c_sa, &len), 0);
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(sendto(c, "from c", 6, 0, (struct sockaddr *)&to, sizeof(to)), 6);
        assert_int_equal(hot_expect_from(a, "from c"), ntohs(c_sa.sin_port));
        assert_int_equal(sendto(fa, "from a", 6, 0, (struct sockaddr *)&to, sizeof(to)), 6);
        assert_int_equal(hot_expect_from(a, "from a"), ntohs(pa_sa.sin_port));
    }
    close(c);
    close(fa);
    a->ops->close(a);
}

/*
 * Other peers while one is hot: c's datagrams still arrive, also after b's
 * data socket has gone quiet (read only every 16th poll, or less often); a
 * run to c moves b's hot socket there, and a's datagrams then reach b's
 * data socket. A removed hot destination's slot, reused, does not send
 * through the hot socket.
 */
static void test_hot_socket_moves(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_hot(), *b = open_udp_hot(), *c = open_udp_hot();
    sx_tl_dest_t b_to_a = connect_to(b, a), a_to_b = connect_to(a, b);
    sx_tl_dest_t c_to_b = connect_to(c, b), b_to_c = connect_to(b, c);
    sx_tl_event_t ev[2];

    /* More than UDP_HOT_IDLE reads of b's empty data socket. */
    hot_ping_pong(a, a_to_b, b_to_a, b, 1100);
    assert_int_equal(b->stats.hot_connects, 1);
    uint64_t b_hot = b->stats.rx_hot;
    assert_int_equal(send_one(c, c_to_b, "from c", 6), SX_OK);
    hot_expect(b, "from c");
    assert_int_equal(b->stats.rx_hot, b_hot);
    /* Quiet again; a sleeper arms, wakes for c's datagram and reads it in
     * one poll, though it is not the quiet socket's turn. */
    hot_ping_pong(a, a_to_b, b_to_a, b, 1100);
    b_hot = b->stats.rx_hot;
    assert_int_equal(b->ops->arm(b), SX_OK);
    assert_int_equal(send_one(c, c_to_b, "wake", 4), SX_OK);
    assert_true(tl_wait_readable(b, 10000));
    assert_int_equal(b->ops->poll(b, ev, 2), 1);
    assert_memory_equal(ev[0].data, "wake", 4);
    hot_ping_pong(a, a_to_b, b_to_a, b, 10);
    assert_int_equal(b->stats.rx_hot - b_hot, 10);

    /* A run from b to c: b's hot socket moves. */
    for (unsigned i = 0; i < HOT_RUN; i++) {
        char text[16];
        int len = snprintf(text, sizeof(text), "to c %u", i);
        assert_int_equal(send_one(b, b_to_c, text, (size_t)len), SX_OK);
        expect_one(c, text, (size_t)len);
    }
    assert_int_equal(b->stats.hot_connects, 2);
    b_hot = b->stats.rx_hot;
    assert_int_equal(send_one(a, a_to_b, "from a", 6), SX_OK);
    hot_expect(b, "from a");
    assert_int_equal(b->stats.rx_hot, b_hot); /* a's hot socket is no longer b's match */
    assert_int_equal(send_one(b, b_to_a, "to a", 4), SX_OK);
    hot_expect(a, "to a");

    /* Removing c, b's hot destination, and inserting a plain peer in its
     * slot: the peer gets its datagrams, not c. */
    b->ops->addr_remove(b, b_to_c);
    uint8_t pd[8];
    int fd = raw_peer(pd);
    sx_tl_dest_t b_to_d;
    assert_int_equal(b->ops->addr_insert(b, pd, 8, &b_to_d), SX_OK);
    assert_int_equal(b_to_d, b_to_c);
    assert_int_not_equal(arrival_port(b, b_to_d, fd, "to d"), 0);
    assert_int_equal(c->ops->poll(c, ev, 2), 0);
    close(fd);
    a->ops->close(a);
    b->ops->close(b);
    c->ops->close(c);
}

/* A stream from another port (as a peer's connected send socket sends
 * from) to the hot interface's data port, until told to stop. */
typedef struct hot_flood {
    int fd;
    struct sockaddr_in to;
    atomic_bool stop;
    unsigned long sent;
} hot_flood_t;

static void *hot_flood_main(void *arg)
{
    hot_flood_t *f = arg;

    while (!atomic_load(&f->stop))
        if (sendto(f->fd, "flood", 5, 0, (struct sockaddr *)&f->to, sizeof(f->to)) == 5)
            f->sent++;
    return NULL;
}

/* Reads what @p b has (the flood's datagrams) until a poll finds none. */
static unsigned long hot_drain(sx_tl_iface_t *b)
{
    sx_tl_event_t ev[32];
    unsigned long n = 0;
    int got;

    while ((got = b->ops->poll(b, ev, 32)) > 0)
        n += (unsigned long)got;
    assert_true(got == 0);
    return n;
}

/*
 * The hot socket moving between two peers on this host while another flow
 * streams in: it goes from one to the other in one connect, so it never
 * stands unconnected on the port, where it would take the stream's
 * datagrams ahead of those the data socket queued before (a 1 MiB stream
 * read 2-4 there, and so 21-30 packets out of order: udp_hot.c,
 * sx_udp_hot_connect). None of the stream's datagrams may reach it.
 * (Without the one-connect move, 200 moves under the stream put some
 * there.)
 */
static void test_hot_socket_moves_under_a_stream(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_hot(), *b = open_udp_hot(), *c = open_udp_hot();
    sx_tl_dest_t b_to_a = connect_to(b, a), b_to_c = connect_to(b, c);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    hot_flood_t flood = {.fd = socket(AF_INET, SOCK_DGRAM, 0), .to = loopback_of(b)};
    pthread_t thread;
    unsigned long read = 0;
    char text[16];

    assert_true(flood.fd >= 0);
    assert_int_equal(bind(flood.fd, (struct sockaddr *)&lo, sizeof(lo)), 0);
    atomic_init(&flood.stop, false);
    assert_int_equal(pthread_create(&thread, NULL, hot_flood_main, &flood), 0);
    for (unsigned move = 0; move < 200; move++) {
        sx_tl_iface_t *to = move % 2 ? c : a;
        sx_tl_dest_t dest = move % 2 ? b_to_c : b_to_a;
        for (unsigned i = 0; i < HOT_RUN; i++) {
            int len = snprintf(text, sizeof(text), "run %u", i);
            assert_int_equal(send_one(b, dest, text, (size_t)len), SX_OK);
            expect_one(to, text, (size_t)len);
        }
        read += hot_drain(b);
    }
    atomic_store(&flood.stop, true);
    assert_int_equal(pthread_join(thread, NULL), 0);
    read += hot_drain(b);
    assert_int_equal(b->stats.hot_connects, 200);
    print_message("hot socket moved 200 times; %lu of the stream's %lu datagrams read, %llu on "
                  "the hot socket\n",
                  read, flood.sent, (unsigned long long)b->stats.rx_hot);
    assert_true(read > 0);
    assert_int_equal(b->stats.rx_hot, 0);
    close(flood.fd);
    a->ops->close(a);
    b->ops->close(b);
    c->ops->close(c);
}

/*
 * A peer's datagrams that move to the hot socket when it becomes our hot
 * destination, while the data socket reads in batches as under a stream:
 * those it sent before, left in the data socket, are read first, then the
 * newer ones in the hot socket. (Read hot first, the new ones came ahead
 * of the old, and a channel kept them aside out of order: udp_hot.c,
 * sx_udp_hot_poll.) A datagram the kernel takes in after the connect
 * lands in the hot socket, ahead of the new ones, in order too.
 */
static void test_hot_socket_reads_older_first(void **state)
{
    (void)state;
    sx_tl_iface_t *b = open_udp_hot();
    uint8_t pa[8];
    sx_tl_dest_t da;
    struct sockaddr_in to = loopback_of(b);
    char text[32];

    int fa = raw_peer(pa);
    assert_int_equal(b->ops->addr_insert(b, pa, 8, &da), SX_OK);
    /* A lone read that finds a datagram puts the socket in batch mode. */
    assert_int_equal(sendto(fa, "warm", 4, 0, (struct sockaddr *)&to, sizeof(to)), 4);
    hot_expect(b, "warm");
    for (unsigned i = 0; i < 8; i++) {
        int len = snprintf(text, sizeof(text), "old %u", i);
        assert_int_equal(sendto(fa, text, (size_t)len, 0, (struct sockaddr *)&to, sizeof(to)), len);
    }
    for (unsigned i = 0; i < HOT_RUN; i++) {
        snprintf(text, sizeof(text), "run %u", i);
        (void)arrival_port(b, da, fa, text);
    }
    assert_int_equal(b->stats.hot_connects, 1);
    for (unsigned i = 0; i < 8; i++) {
        int len = snprintf(text, sizeof(text), "new %u", i);
        assert_int_equal(sendto(fa, text, (size_t)len, 0, (struct sockaddr *)&to, sizeof(to)), len);
    }
    rx_log_t log = {0};
    rx_until(b, &log, 16);
    assert_int_equal(log.n, 16);
    assert_true(b->stats.rx_hot >= 8);
    for (unsigned i = 0; i < 16; i++) {
        int len = snprintf(text, sizeof(text), "%s %u", i < 8 ? "old" : "new", i % 8);
        assert_int_equal(log.len[i], (size_t)len);
        assert_memory_equal(log.data[i], text, (size_t)len);
    }
    rx_log_free(&log);
    close(fa);
    b->ops->close(b);
}

/* udp_int.h's schedule of a quiet socket's reads: quiet after HOT_IDLE
 * reads without a datagram (UDP_HOT_IDLE), then read every 16th poll,
 * every 32nd after 64 such reads, every 64th after 64 more and every
 * HOT_QUIET_MAX-th (UDP_HOT_QUIET_MAX) after 64 more: HOT_QUIET_RAMP polls
 * from the last datagram. */
#define HOT_IDLE       1024u
#define HOT_QUIET_MAX  128u
#define HOT_QUIET_RAMP (HOT_IDLE + 64u * (16u + 32u + 64u))

/* One poll of @p b, which finds @p a's datagram in its hot socket (and
 * reads the data socket too where it is its turn, finding it empty). */
static void hot_one(sx_tl_iface_t *a, sx_tl_dest_t a_to_b, sx_tl_iface_t *b)
{
    sx_tl_event_t ev[2];

    assert_int_equal(send_one(a, a_to_b, "hot", 3), SX_OK);
    assert_true(tl_wait_readable(b, 10000)); /* queued; no arm, so no read of both */
    assert_int_equal(b->ops->poll(b, ev, 2), 1);
    assert_memory_equal(ev[0].data, "hot", 3);
}

/* Polls @p b until a datagram @p text queued in its data socket is read;
 * how many polls that took. @p max stays below HOT_IDLE, so that the hot
 * socket, busy just before, is not quiet meanwhile. */
static unsigned polls_until(sx_tl_iface_t *b, const char *text, unsigned max)
{
    sx_tl_event_t ev[2];

    assert_true(max < HOT_IDLE);
    assert_true(tl_wait_readable(b, 10000));
    for (unsigned polls = 1; polls <= max; polls++) {
        int got = b->ops->poll(b, ev, 2);
        if (got == 1) {
            assert_memory_equal(ev[0].data, text, strlen(text));
            return polls;
        }
        assert_int_equal(got, 0);
    }
    fail_msg("%s not read in %u polls", text, max);
    return 0;
}

/*
 * A quiet socket is read less often the longer it stays quiet
 * (udp_hot_quiet_every: every 16th poll at first, halving to every
 * 128th): while b's hot socket is busy, c's datagram on b's long-quiet
 * data socket is read within 128 polls, and at the 128th when it comes
 * just after a read. It had a datagram: read at the next poll.
 */
static void test_hot_socket_quiet_backs_off(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_hot(), *b = open_udp_hot(), *c = open_udp_hot();
    sx_tl_dest_t b_to_a = connect_to(b, a), a_to_b = connect_to(a, b);
    sx_tl_dest_t c_to_b = connect_to(c, b);
    sx_tl_event_t ev[2];

    hot_ping_pong(a, a_to_b, b_to_a, b, HOT_RUN);
    assert_int_equal(b->stats.hot_connects, 1);
    /* Both of b's sockets quiet past the ramp (both are read at every
     * poll while both are quiet), then the hot one busy again: the data
     * socket waits for its turn, every 128th poll; c's first datagram is
     * read at one, a poll whose count is a multiple of 128, from which
     * this test counts b's polls. */
    for (unsigned i = 0; i < HOT_QUIET_RAMP; i++)
        assert_int_equal(b->ops->poll(b, ev, 2), 0);
    hot_one(a, a_to_b, b);
    assert_int_equal(send_one(c, c_to_b, "first", 5), SX_OK);
    assert_in_range(polls_until(b, "first", HOT_QUIET_MAX), 1, HOT_QUIET_MAX);
    /* Read at every poll again, then back off from the start: after the
     * ramp, a datagram queued just after a read waits HOT_QUIET_MAX polls. */
    unsigned done = 0;
    while (done < HOT_QUIET_RAMP) {
        if (++done % 256 == 0) {
            hot_one(a, a_to_b, b);
            continue;
        }
        assert_int_equal(b->ops->poll(b, ev, 2), 0);
    }
    assert_int_equal(send_one(c, c_to_b, "second", 6), SX_OK);
    assert_int_equal(polls_until(b, "second", 4 * HOT_QUIET_MAX), HOT_QUIET_MAX);
    assert_int_equal(send_one(c, c_to_b, "third", 5), SX_OK);
    assert_int_equal(polls_until(b, "third", 1), 1);
    a->ops->close(a);
    b->ops->close(b);
    c->ops->close(c);
}

/* The hot destination goes away: ICMP errors now come to the hot
 * socket's reads too (it is connected), and neither they nor the sends'
 * fail the interface. */
static void test_hot_socket_peer_gone(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_hot(), *gone = open_udp_hot(), *c = open_udp_hot();
    sx_tl_dest_t to_gone = connect_to(a, gone);
    sx_tl_event_t ev[8];

    for (unsigned i = 0; i < HOT_RUN; i++) {
        assert_int_equal(send_one(a, to_gone, "run", 3), SX_OK);
        hot_expect(gone, "run");
    }
    assert_int_equal(a->stats.hot_connects, 1);
    gone->ops->close(gone);
    for (unsigned i = 0; i < 20; i++) {
        int rc = send_one(a, to_gone, "lost", 4);
        assert_true(rc == SX_OK || rc == SX_ERR_AGAIN);
        assert_true(a->ops->poll(a, ev, 8) >= 0);
    }
    assert_true(a->stats.tx_refused > 0);
    sx_tl_dest_t to_c = connect_to(a, c), to_a = connect_to(c, a);
    assert_int_equal(send_one(a, to_c, "hi", 2), SX_OK);
    hot_expect(c, "hi");
    assert_int_equal(send_one(c, to_a, "ho", 2), SX_OK);
    hot_expect(a, "ho");
    a->ops->close(a);
    c->ops->close(c);
}

/* Polls @p a, 16 events at a time (a coalesced read takes several), for
 * the 50 datagrams of 1000 bytes and the one of 10 that test_gso_and_gro
 * sent as one GSO message of @p big, and checks each. */
/* Where @p a receives on loopback: its card's port. */
static struct sockaddr_in loopback_of(sx_tl_iface_t *a)
{
    uint8_t own[SX_TL_ADDR_MAX];
    size_t olen = sizeof(own);
    assert_int_equal(a->ops->local_addr(a, own, &olen), SX_OK);
    return (struct sockaddr_in){.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)(own[2] | own[3] << 8)),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
}

/* Sends @p len bytes from @p fd to @p to as one GSO message of @p seg-byte
 * datagrams (UDP_SEGMENT, Linux 4.18); sendmsg's result. */
static ssize_t raw_gso_send(int fd, const struct sockaddr_in *to, uint8_t *buf, size_t len,
                            uint16_t seg)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(uint16_t))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct msghdr m = {.msg_name = (void *)to,
                       .msg_namelen = sizeof(*to),
                       .msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = ctl.buf,
                       .msg_controllen = sizeof(ctl.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = 103; /* UDP_SEGMENT */
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    memcpy(CMSG_DATA(c), &seg, sizeof(seg));
    return sendmsg(fd, &m, 0);
}

static void read_gso_message(sx_tl_iface_t *a, const uint8_t *big)
{
    rx_log_t log = {0};
    uint64_t deadline = sx_time_ns() + TL_RX_DEADLINE_NS;
    while (log.n < 51) {
        sx_tl_event_t ev[16];
        int n = a->ops->poll(a, ev, 16);
        assert_true(n >= 0 && n <= 16);
        for (int i = 0; i < n; i++)
            rx_log_add(&log, ev[i].data, ev[i].len);
        assert_true(sx_time_ns() < deadline);
    }
    for (unsigned i = 0; i < 51; i++) {
        assert_int_equal(log.len[i], i < 50 ? 1000 : 10);
        assert_memory_equal(log.data[i], big + i * 1000, log.len[i]);
    }
    rx_log_free(&log);
}

/*
 * A raw GSO message of 50 x 1000 bytes and one of 10 from @p fd to @p a,
 * which has had no backlog yet, twice: GRO is off for the first, so the
 * kernel cuts it at the socket, and the reads that find its datagrams
 * queued turn GRO on (sx_udp_rx_busy); the second is read coalesced.
 * Every datagram arrives whole and in order, none dropped. Skipped where
 * the kernel refuses UDP_SEGMENT (4.18); the coalescing needs UDP_GRO
 * (5.0).
 */
static void gso_message_twice(sx_tl_iface_t *a, int fd)
{
    struct sockaddr_in to = loopback_of(a);
    static uint8_t big[50 * 1000 + 10];
    for (unsigned i = 0; i < 51; i++)
        fill(big + i * 1000, i < 50 ? 1000 : 10, 100 + i);
    if (raw_gso_send(fd, &to, big, sizeof(big), 1000) != (ssize_t)sizeof(big)) {
        print_message("UDP_SEGMENT refused here (%s): GRO not checked\n", strerror(errno));
        return;
    }
    read_gso_message(a, big);
    assert_int_equal(a->stats.rx_gro, 0);
    assert_int_equal(raw_gso_send(fd, &to, big, sizeof(big), 1000), (ssize_t)sizeof(big));
    read_gso_message(a, big);
    assert_int_equal(a->stats.rx_kernel_drops, 0);
    print_message("GRO: %llu reads held several datagrams\n", (unsigned long long)a->stats.rx_gro);
    int probe = socket(AF_INET, SOCK_DGRAM, 0), on = 0;
    socklen_t onlen = sizeof(on);
    bool has_gro = getsockopt(probe, SOL_UDP, 104 /* UDP_GRO */, &on, &onlen) == 0;
    close(probe);
    if (has_gro)
        assert_true(a->stats.rx_gro > 0);
}

/* A GSO-capable interface and a raw socket it sends to (*fd_p, at *d_p). */
static sx_tl_iface_t *open_gso_to_raw(int *fd_p, sx_tl_dest_t *d_p)
{
    sx_tl_iface_t *a = open_udp_gso();
    uint8_t peer[8];
    *fd_p = raw_peer(peer);
    assert_int_equal(a->ops->addr_insert(a, peer, 8, d_p), SX_OK);
    return a;
}

/* The raw socket's next datagram is @p len bytes, those of @p want. */
static void expect_raw_datagram(int fd, const uint8_t *want, size_t len)
{
    uint8_t got[2000];
    assert_true(fd_readable(fd, 10000));
    assert_int_equal(recv(fd, got, sizeof(got), 0), (ssize_t)len);
    assert_memory_equal(got, want, len);
}

/*
 * UDP GSO and GRO (SX_UDP_GSO): a run of equal datagrams to one peer goes
 * out as one GSO message that a plain socket still receives as separate
 * datagrams, in order, each whole; a shorter one ends a run, a longer one
 * starts the next. The other way, a GSO message from a raw socket reaches
 * a GRO socket as one coalesced read, which poll hands up datagram by
 * datagram, the rest of a read waiting for the next poll when the events
 * do not fit: once the socket has had a backlog (GRO waits for one). Skipped
 * where the kernel has neither.
 */
static void test_gso_and_gro(void **state)
{
    (void)state;
    int fd;
    sx_tl_dest_t d;
    sx_tl_iface_t *a = open_gso_to_raw(&fd, &d);

    /* Sizes: a run of 10 x 1000 and a 300 (one message), then 2 x 1200
     * and 1200 + 50 (a run of three), then a lone 700. */
    static const size_t len[] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
                                 1000, 1000, 300,  1200, 1200, 1200, 700};
    enum { N = sizeof(len) / sizeof(len[0]) };
    static uint8_t buf[N][1200];
    sx_tl_tx_t tx[N];
    for (unsigned i = 0; i < N; i++) {
        fill(buf[i], len[i], i + 1);
        tx[i] = (sx_tl_tx_t){.dest = d, .iovcnt = 2};
        /* Two pieces each, as a header and its payload. */
        tx[i].iov[0] = (struct iovec){.iov_base = buf[i], .iov_len = 40};
        tx[i].iov[1] = (struct iovec){.iov_base = buf[i] + 40, .iov_len = len[i] - 40};
    }
    unsigned posted = 0;
    assert_int_equal(a->ops->post_send(a, tx, N, &posted), SX_OK);
    assert_int_equal(posted, N);
    for (unsigned i = 0; i < N; i++)
        expect_raw_datagram(fd, buf[i], len[i]);
    assert_int_equal(a->stats.tx_datagrams, N);
    bool gso = a->stats.tx_gso > 0;
    print_message("GSO: %llu messages carried several datagrams\n",
                  (unsigned long long)a->stats.tx_gso);
    if (gso)
        assert_int_equal(a->stats.tx_gso, 2);

    /* GRO: a raw GSO message from a plain socket, to a. */
    gso_message_twice(a, fd);
    close(fd);
    a->ops->close(a);
}

/*
 * A GSO run whose datagrams lie end to end in memory goes to the kernel in
 * one iovec (the engine carves a flush's packets so: chan_pkt.c, Arenas):
 * twelve datagrams of 1000 bytes in one buffer, each given as a header and
 * its payload, join into one; in a second run the seventh starts 8 bytes
 * after the sixth ends, and the two halves join apart. Every datagram
 * still arrives whole, in order. Skipped where the kernel lacks GSO.
 */
static void test_gso_joins_adjacent(void **state)
{
    (void)state;
    int fd;
    sx_tl_dest_t d;
    sx_tl_iface_t *a = open_gso_to_raw(&fd, &d);

    enum { N = 12, LEN = 1000, GAP = 8 };
    static uint8_t buf[2][N * LEN + GAP];
    for (unsigned run = 0; run < 2; run++) {
        sx_tl_tx_t tx[N];
        uint8_t *at[N];
        for (unsigned i = 0; i < N; i++) {
            at[i] = buf[run] + i * LEN + (run == 1 && i >= 6 ? GAP : 0);
            fill(at[i], LEN, 16 * run + i + 1);
            tx[i] = (sx_tl_tx_t){.dest = d, .iovcnt = 2};
            tx[i].iov[0] = (struct iovec){.iov_base = at[i], .iov_len = 40};
            tx[i].iov[1] = (struct iovec){.iov_base = at[i] + 40, .iov_len = LEN - 40};
        }
        uint64_t gso0 = a->stats.tx_gso, joined0 = a->stats.tx_gso_joined;
        unsigned posted = 0;
        assert_int_equal(a->ops->post_send(a, tx, N, &posted), SX_OK);
        assert_int_equal(posted, N);
        for (unsigned i = 0; i < N; i++)
            expect_raw_datagram(fd, at[i], LEN);
        if (a->stats.tx_gso == gso0) {
            print_message("UDP GSO not used here: nothing to join\n");
            break;
        }
        assert_int_equal(a->stats.tx_gso - gso0, 1);
        assert_int_equal(a->stats.tx_gso_joined - joined0, run == 0 ? N - 1 : N - 2);
    }
    close(fd);
    a->ops->close(a);
}

/*
 * A socket turns busy (SO_RXQ_OVFL, UDP_GRO: sx_udp_rx_busy) at a read of
 * UDP_RX_BUSY_READ datagrams, not at a short burst such as an MPI job's
 * start sends: after bursts just short of that, all of them read whole and
 * in order, a GSO message still arrives cut at the socket (no GRO yet);
 * its datagrams, read in batches, are the backlog, and the same message
 * again is read coalesced. Skipped where the kernel lacks GSO or GRO.
 */
static void test_busy_needs_a_backlog(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp_gso();
    uint8_t peer[8];
    int fd = raw_peer(peer);
    struct sockaddr_in to = loopback_of(a);

    /* Three bursts of seven (one short of UDP_RX_BUSY_READ, private to
     * src/transports), each queued whole before the first poll, so the
     * batch read after the lone one finds the rest. */
    enum { SHORT = 7 };
    for (unsigned burst = 0; burst < 3; burst++) {
        uint8_t small[SHORT][100];
        for (unsigned i = 0; i < SHORT; i++) {
            fill(small[i], sizeof(small[i]), 10 * burst + i);
            assert_int_equal(
                sendto(fd, small[i], sizeof(small[i]), 0, (struct sockaddr *)&to, sizeof(to)),
                (ssize_t)sizeof(small[i]));
        }
        rx_log_t log = {0};
        uint64_t deadline = sx_time_ns() + TL_RX_DEADLINE_NS;
        while (log.n < SHORT) {
            sx_tl_event_t ev[32];
            int n = a->ops->poll(a, ev, 32);
            assert_true(n >= 0 && log.n + (unsigned)n <= SHORT);
            for (int i = 0; i < n; i++)
                rx_log_add(&log, ev[i].data, ev[i].len);
            assert_true(sx_time_ns() < deadline);
        }
        for (unsigned i = 0; i < SHORT; i++) {
            assert_int_equal(log.len[i], sizeof(small[i]));
            assert_memory_equal(log.data[i], small[i], sizeof(small[i]));
        }
        rx_log_free(&log);
    }
    gso_message_twice(a, fd); /* GRO still off for the first */
    close(fd);
    a->ops->close(a);
}

/* A poll says when it may have left datagrams that were queued before it
 * (rx_left, transport.h): after a quiet spell the data socket is read one
 * datagram a poll, so the first of three queued at once comes alone and
 * the other two wait; a poll that reads the socket empty says nothing is
 * left. The shard times RTT samples by it (chan_ack_waited). Both ways of
 * reading one: recvfrom, and recvmsg on a socket read with control data
 * (one too small for four of its largest datagrams has them at once,
 * sx_udp_rx_busy). */
static void poll_says_what_it_left(size_t rcvbuf)
{
    sx_tl_iface_t *a = open_udp(rcvbuf);
    uint8_t peer[8];
    int fd = raw_peer(peer);
    struct sockaddr_in to = loopback_of(a);
    sx_tl_event_t ev[32];

    assert_int_equal(a->ops->poll(a, ev, 32), 0);
    assert_false(a->rx_left);
    for (uint8_t i = 0; i < 3; i++)
        assert_int_equal(sendto(fd, &i, 1, 0, (struct sockaddr *)&to, sizeof(to)), 1);
    /* Over loopback a datagram is usually queued at the receiver when
     * sendto returns, but a kernel may leave that to ksoftirqd: wait for
     * the first. Whether the others are there yet, the first comes
     * alone. */
    assert_true(tl_wait_readable(a, 10000));
    assert_int_equal(a->ops->poll(a, ev, 32), 1);
    assert_int_equal(ev[0].data[0], 0);
    assert_true(a->rx_left);
    unsigned got = 1;
    uint64_t deadline = sx_time_ns() + DEADLINE_NS;
    while (got < 3) {
        int n = a->ops->poll(a, ev, 32);
        assert_true(n >= 0);
        for (int i = 0; i < n; i++)
            assert_int_equal(ev[i].data[0], got++);
        assert_true(sx_time_ns() < deadline);
    }
    assert_int_equal(a->ops->poll(a, ev, 32), 0);
    assert_false(a->rx_left);
    close(fd);
    a->ops->close(a);
}

static void test_poll_says_what_it_left(void **state)
{
    (void)state;
    poll_says_what_it_left(4 << 20); /* recvfrom */
    poll_says_what_it_left(0);       /* the default buffer: recvmsg with control data */
}

/* ECN: an interface opened with it sends ECT(0) from the start, but its
 * events carry the field only once ecn_report asked (a channel that uses
 * congestion control); one opened without it never reports. */
static uint8_t ecn_of_next(sx_tl_iface_t *tx, sx_tl_dest_t d, sx_tl_iface_t *rx, uint8_t tag)
{
    uint64_t give_up = sx_time_ns() + DEADLINE_NS;
    sx_tl_event_t ev[8];

    assert_int_equal(send_one(tx, d, &tag, 1), SX_OK);
    for (;;) {
        int n = rx->ops->poll(rx, ev, 8);
        assert_true(n >= 0);
        for (int i = 0; i < n; i++) {
            if (ev[i].type == SX_TL_EV_RECV && ev[i].len == 1 && ev[i].data[0] == tag)
                return ev[i].ecn;
        }
        if (sx_time_ns() > give_up)
            fail_msg("datagram %u did not arrive", tag);
    }
}

static void test_ecn_report(void **state)
{
    (void)state;
    for (int ecn = 0; ecn < 2; ecn++) {
        sx_tl_config_t cfg = {.bind_addr = "127.0.0.1", .ecn = ecn};
        sx_tl_iface_t *a = NULL, *b = NULL;
        assert_int_equal(sx_tl_udp_ops.open(&cfg, &a), SX_OK);
        assert_int_equal(sx_tl_udp_ops.open(&cfg, &b), SX_OK);
        sx_tl_dest_t d = connect_to(a, b);
        assert_int_equal(ecn_of_next(a, d, b, 1), SX_TL_ECN_NOT_ECT);
        b->ops->ecn_report(b);
        assert_int_equal(ecn_of_next(a, d, b, 2), ecn ? SX_TL_ECN_ECT0 : SX_TL_ECN_NOT_ECT);
        b->ops->ecn_report(b); /* a second call changes nothing */
        assert_int_equal(ecn_of_next(a, d, b, 3), ecn ? SX_TL_ECN_ECT0 : SX_TL_ECN_NOT_ECT);
        a->ops->close(a);
        b->ops->close(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_caps_and_address),
        cmocka_unit_test(test_addresses_offered_and_chosen),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_gso_and_gro),
        cmocka_unit_test(test_gso_joins_adjacent),
        cmocka_unit_test(test_busy_needs_a_backlog),
        cmocka_unit_test(test_ecn_report),
        cmocka_unit_test(test_poll_says_what_it_left),
        cmocka_unit_test(test_lone_datagram_cut_counted),
        cmocka_unit_test(test_addr_insert_rejects_garbage),
        cmocka_unit_test(test_closed_port_is_not_fatal),
        cmocka_unit_test(test_connected_send_sockets),
        cmocka_unit_test(test_kernel_drops_counted),
        cmocka_unit_test(test_ack_socket_address),
        cmocka_unit_test(test_ack_socket_rejects_garbage),
        cmocka_unit_test(test_ack_socket_routing),
        cmocka_unit_test(test_ack_socket_interop),
        cmocka_unit_test(test_ack_socket_wait_fds),
        cmocka_unit_test(test_hot_socket_pairs),
        cmocka_unit_test(test_hot_socket_plain_peer),
        cmocka_unit_test(test_hot_socket_port_stays_closed),
        cmocka_unit_test(test_hot_socket_connect_fails),
        cmocka_unit_test(test_hot_socket_moves),
        cmocka_unit_test(test_hot_socket_moves_under_a_stream),
        cmocka_unit_test(test_hot_socket_reads_older_first),
        cmocka_unit_test(test_hot_socket_quiet_backs_off),
        cmocka_unit_test(test_hot_socket_peer_gone),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
