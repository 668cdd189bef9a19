/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What only the ofi transport does, over the real libfabric udp provider
 * on loopback (and over the sockets provider, whose small inject size
 * exercises the bounce buffers): the query and its exclusivity, the card
 * address and variant, the bind address, the address formats it refuses
 * or cannot reach, and the domains as devices (SX_NET_DEVICES). What every
 * transport does (sizes, batches, destinations, the wait fd with
 * fi_trywait, truncated datagrams, receive buffers recycled) is
 * test_transport_conformance_ofi's. Built only when libfabric was found.
 * Nothing sleeps to synchronize: receivers poll until what they wait for
 * arrives, and a generous deadline only turns a hang into a failure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "transports/transport.h"
#include "test_filter.h"

#define TL_RX_DEADLINE_NS (30ull * 1000000000ull)
#define ADDR_IN           2 /* FI_SOCKADDR_IN, the format byte of a udp-provider address */

#include "tl_util.h"

static sx_tl_iface_t *open_ofi_cfg(const char *provider, const char *bind, size_t rcvbuf)
{
    sx_tl_config_t cfg = {
        .shard = 0, .nshards = 1, .bind_addr = bind, .rcvbuf = rcvbuf, .ofi_provider = provider};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_ofi_ops.open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    return iface;
}

static sx_tl_iface_t *open_ofi(void)
{
    return open_ofi_cfg("udp", NULL, 4 << 20);
}

static uint16_t port_of(sx_tl_iface_t *iface)
{
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);

    assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
    return (uint16_t)(addr[1] << 8 | addr[2]);
}

/* ------------------------------------------------------------------ */

static void test_registry_and_query(void **state)
{
    (void)state;
    sx_tl_config_t cfg = {.ofi_provider = "udp"};
    sx_tl_query_t q = {0};

    assert_int_equal(sx_tl_ofi_ops.query(&cfg, 1, &q), SX_OK);
    /* libfabric's udp provider emulates datagrams on kernel sockets: it
     * never claims peers over the udp transport. */
    assert_int_equal(q.exclusivity, SX_TL_EXCL_EMULATED);
    assert_non_null(strstr(q.detail, "provider udp"));
    assert_true(SX_TL_EXCL_EMULATED < SX_TL_EXCL_SOCKETS);

    cfg.ofi_provider = "no-such-provider";
    assert_int_equal(sx_tl_ofi_ops.query(&cfg, 1, &q), SX_ERR_INVALID_PARAM);
    assert_non_null(strstr(q.detail, "no-such-provider"));
    cfg.ofi_provider = "udp";
    cfg.bind_addr = "192.0.2.254"; /* TEST-NET-1: no interface here has it */
    assert_int_equal(sx_tl_ofi_ops.query(&cfg, 1, &q), SX_ERR_INVALID_PARAM);
    cfg.bind_addr = "nonsense";
    assert_int_equal(sx_tl_ofi_ops.query(&cfg, 1, &q), SX_ERR_INVALID_PARAM);
}

/* Whether this host has @p ip (network order) on an interface that is up
 * and not loopback; with @p ip 0, whether it has any such IPv4 address. */
static bool host_has_ipv4(uint32_t ip)
{
    struct ifaddrs *list = NULL;
    bool found = false;

    assert_int_equal(getifaddrs(&list), 0);
    for (struct ifaddrs *ifa = list; ifa != NULL && !found; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != AF_INET ||
            (ifa->ifa_flags & IFF_UP) == 0 || (ifa->ifa_flags & IFF_LOOPBACK) != 0)
            continue;
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)ifa->ifa_addr;
        found = ip == 0 || in->sin_addr.s_addr == ip;
    }
    freeifaddrs(list);
    return found;
}

static void test_open_caps_and_address(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi_cfg("udp", "127.0.0.1", 4 << 20);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    char text[128], variant[32];

    assert_true(a->caps.mtu <= 65000);
    /* Format FI_SOCKADDR_IN, the port (network order), 127.0.0.1. */
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    assert_int_equal(len, 7);
    assert_int_equal(addr[0], ADDR_IN);
    assert_true((addr[1] | addr[2]) != 0);
    assert_memory_equal(addr + 3, "\x7f\x00\x00\x01", 4);
    a->ops->addr_str(a, addr, len, text, sizeof(text));
    assert_non_null(strstr(text, "127.0.0.1:"));
    a->ops->variant(a, variant, sizeof(variant));
    assert_string_equal(variant, "udp");
    a->ops->close(a);

    /* Without SX_BIND_ADDR: an address of this host's that is not
     * loopback, where it has one, so that other hosts reach it; loopback
     * only on a host without another. */
    a = open_ofi();
    len = sizeof(addr);
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    assert_int_equal(len, 7);
    uint32_t ip;
    memcpy(&ip, addr + 3, 4);
    a->ops->addr_str(a, addr, len, text, sizeof(text));
    print_message("default address: %s\n", text);
    if (host_has_ipv4(0))
        assert_true(host_has_ipv4(ip));
    else
        assert_memory_equal(addr + 3, "\x7f\x00\x00\x01", 4);
    a->ops->close(a);

    /* A fixed port is bound as asked. */
    sx_tl_iface_t *probe = open_ofi_cfg("udp", "127.0.0.1", 4 << 20);
    uint16_t port = port_of(probe);
    probe->ops->close(probe);
    char bind[32];
    snprintf(bind, sizeof(bind), "127.0.0.1:%u", port);
    sx_tl_iface_t *fixed = open_ofi_cfg("udp", bind, 0);
    assert_int_equal(port_of(fixed), port);
    fixed->ops->close(fixed);

    /* (Empty is the default, above.) */
    static const char *const bad[] = {
        "0.0.0.0", "garbage", "127.0.0.1:", "127.0.0.1:99999", "::1", "192.0.2.254"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx_tl_config_t cfg = {.bind_addr = bad[i], .ofi_provider = "udp"};
        sx_tl_iface_t *iface = NULL;
        assert_int_equal(sx_tl_ofi_ops.open(&cfg, &iface), SX_ERR_INVALID_PARAM);
        assert_null(iface);
    }
}

/* The sockets provider injects at most 255 bytes: larger datagrams go
 * through the bounce buffers, whose slots come back with completions. */
static void test_bounce_buffers(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi_cfg("sockets", NULL, 8 << 20);
    sx_tl_iface_t *b = open_ofi_cfg("sockets", NULL, 8 << 20);
    char variant[32];

    a->ops->variant(a, variant, sizeof(variant));
    assert_string_equal(variant, "sockets");
    assert_true(a->caps.inline_limit < a->caps.mtu);
    tl_batches(a, b, 4000, 10);
    a->ops->close(a);
    b->ops->close(b);
}

/* The fields of an FI_SOCKADDR_IN address, and formats it cannot reach
 * (lengths and bytes that are garbage for any transport:
 * test_transport_conformance_ofi). */
static void test_addr_check_and_insert(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi();
    sx_tl_dest_t dest = 12345;
    static const struct {
        const char *bytes;
        size_t len;
        int rc;
    } bad[] = {
        {"\x02\x00\x00\x7f\x00\x00\x01", 7, SX_ERR_INVALID_PARAM}, /* port 0 */
        {"\x02\x27\x10\x00\x00\x00\x00", 7, SX_ERR_INVALID_PARAM}, /* 0.0.0.0 */
        /* Well formed, another format (FI_SOCKADDR_IN6): unreachable. */
        {"\x03\x27\x10\x7f\x00\x00\x01", 7, SX_ERR_PEER_UNREACHABLE},
        /* A udp transport's address (family 4 = FI_SOCKADDR_IB). */
        {"\x04\x00\x10\x27\x7f\x00\x00\x01", 8, SX_ERR_PEER_UNREACHABLE},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(a->ops->addr_check(a, bad[i].bytes, bad[i].len), bad[i].rc);
        assert_int_equal(a->ops->addr_insert(a, bad[i].bytes, bad[i].len, &dest), bad[i].rc);
    }
    assert_int_equal(dest, 12345);
    /* A well-formed address is accepted, even if nobody listens there. */
    assert_int_equal(a->ops->addr_insert(a, "\x02\x27\x10\x7f\x00\x00\x01", 7, &dest), SX_OK);
    assert_int_equal(send_one(a, dest, "nobody", 6), SX_OK);
    a->ops->close(a);
}

/* SX_NET_DEVICES: the udp provider names its domains after the network
 * interfaces, so "lo" is one; without the list there is nothing to
 * choose; a name that is no domain fails the query, naming it and the
 * domains there are; a shard given a device binds that domain's address,
 * not SX_BIND_ADDR (127.0.0.2 here, which would work too). */
static void test_devices(void **state)
{
    (void)state;
    sx_tl_config_t cfg = {.nshards = 1, .ofi_provider = "udp"};
    sx_tl_query_t q = {0};
    char names[SX_TL_DEVICES][SX_TL_DEVICE_MAX];

    assert_int_equal(sx_tl_ofi_ops.devices(&cfg, names, SX_TL_DEVICES), 0);
    cfg.net_devices = "";
    assert_int_equal(sx_tl_ofi_ops.devices(&cfg, names, SX_TL_DEVICES), 0);

    cfg.net_devices = "lo";
    assert_int_equal(sx_tl_ofi_ops.query(&cfg, 1, &q), SX_OK);
    assert_non_null(strstr(q.detail, "domain lo"));
    assert_int_equal(sx_tl_ofi_ops.devices(&cfg, names, SX_TL_DEVICES), 1);
    assert_string_equal(names[0], "lo");

    cfg.net_devices = "lo,nosuchdev";
    assert_int_equal(sx_tl_ofi_ops.query(&cfg, 1, &q), SX_ERR_NO_DEVICE);
    assert_non_null(strstr(q.detail, "'nosuchdev'"));
    assert_non_null(strstr(q.detail, "lo"));
    assert_true(sx_tl_ofi_ops.devices(&cfg, names, SX_TL_DEVICES) < 0);

    cfg.net_devices = "lo";
    cfg.device = "lo";
    cfg.bind_addr = "127.0.0.2";
    sx_tl_iface_t *a = NULL;
    assert_int_equal(sx_tl_ofi_ops.open(&cfg, &a), SX_OK);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    assert_int_equal(len, 7);
    assert_memory_equal(addr + 3, "\x7f\x00\x00\x01", 4);
    assert_true(port_of(a) != 0);
    a->ops->close(a);

    cfg.device = "nosuchdev";
    a = NULL;
    assert_int_equal(sx_tl_ofi_ops.open(&cfg, &a), SX_ERR_NO_DEVICE);
    assert_null(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_and_query),
        cmocka_unit_test(test_open_caps_and_address),
        cmocka_unit_test(test_bounce_buffers),
        cmocka_unit_test(test_addr_check_and_insert),
        cmocka_unit_test(test_devices),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
