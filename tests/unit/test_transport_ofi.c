/*
 * The ofi transport over the real libfabric udp provider on loopback (and
 * once over the sockets provider, whose small inject size exercises the
 * bounce buffers): sizes up to the mtu, batches larger than the send
 * slots, address checks, destination removal, the wait fd with fi_trywait,
 * truncated datagrams, and bad parameters. Built only when libfabric was
 * found. Nothing sleeps to synchronize: receivers poll until what they
 * wait for arrives, and a generous deadline only turns a hang into a
 * failure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <shardx.h>

#include "common/time.h"
#include "transports/transport.h"

#define DEADLINE_NS       (30ull * 1000000000ull)
#define TL_RX_DEADLINE_NS DEADLINE_NS
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

    assert_ptr_equal(sx_tl_find("ofi"), &sx_tl_ofi_ops);
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

static void test_open_caps_and_address(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi();
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    char text[128], variant[32];

    assert_ptr_equal(a->ops, &sx_tl_ofi_ops);
    assert_true(a->caps.mtu >= 512 && a->caps.mtu <= 65000);
    assert_true(a->caps.inline_limit <= a->caps.mtu);
    assert_int_equal(a->caps.sync_send, 1);
    assert_true(a->caps.tx_credits > 0);
    assert_true(a->ops->wait_fd(a) >= 0);
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    assert_int_equal(len, 7);
    assert_int_equal(addr[0], ADDR_IN);
    assert_true((addr[1] | addr[2]) != 0);
    assert_memory_equal(addr + 3, "\x7f\x00\x00\x01", 4);
    a->ops->addr_str(a, addr, len, text, sizeof(text));
    assert_non_null(strstr(text, "127.0.0.1:"));
    a->ops->variant(a, variant, sizeof(variant));
    assert_string_equal(variant, "udp");
    len = 6;
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_ERR_TRUNCATED);
    a->ops->close(a);

    /* A fixed port is bound as asked. */
    sx_tl_iface_t *probe = open_ofi();
    uint16_t port = port_of(probe);
    probe->ops->close(probe);
    char bind[32];
    snprintf(bind, sizeof(bind), "127.0.0.1:%u", port);
    sx_tl_iface_t *fixed = open_ofi_cfg("udp", bind, 0);
    assert_int_equal(port_of(fixed), port);
    fixed->ops->close(fixed);

    static const char *const bad[] = {"0.0.0.0", "garbage", "127.0.0.1:", "127.0.0.1:99999",
                                      "",        "::1",     "192.0.2.254"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx_tl_config_t cfg = {.bind_addr = bad[i], .ofi_provider = "udp"};
        sx_tl_iface_t *iface = NULL;
        assert_int_equal(sx_tl_ofi_ops.open(&cfg, &iface), SX_ERR_INVALID_PARAM);
        assert_null(iface);
    }
}

static void test_sizes(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi(), *b = open_ofi();
    sx_tl_dest_t to_b = connect_to(a, b), to_a = connect_to(b, a);
    size_t mtu = a->caps.mtu;
    uint8_t *buf = malloc(mtu + 1);
    rx_log_t log = {0};

    assert_non_null(buf);
    fill(buf, mtu + 1, 3);
    assert_int_equal(send_one(a, to_b, buf, 0), SX_OK);
    assert_int_equal(send_one(a, to_b, buf, 1), SX_OK);
    assert_int_equal(send_one(a, to_b, buf, mtu), SX_OK);
    assert_int_equal(send_one(a, to_b, buf, mtu + 1), SX_ERR_INVALID_PARAM);

    /* One datagram from four pieces (the provider's iov limit or more);
     * and more pieces than allowed. */
    sx_tl_tx_t t = {.dest = to_b, .iovcnt = 4};
    t.iov[0] = (struct iovec){buf, 10};
    t.iov[1] = (struct iovec){buf + 10, 0};
    t.iov[2] = (struct iovec){buf + 10, 5};
    t.iov[3] = (struct iovec){buf + 15, mtu - 15};
    unsigned posted = 0;
    assert_int_equal(a->ops->post_send(a, &t, 1, &posted), SX_OK);
    assert_int_equal(posted, 1);
    t.iov[3].iov_len = mtu - 14;
    assert_int_equal(a->ops->post_send(a, &t, 1, &posted), SX_ERR_INVALID_PARAM);
    assert_int_equal(posted, 0);
    t.iovcnt = SX_TL_IOV_MAX + 1;
    assert_int_equal(a->ops->post_send(a, &t, 1, &posted), SX_ERR_INVALID_PARAM);

    rx_until(b, &log, 4);
    assert_int_equal(log.len[0], 0);
    assert_int_equal(log.len[1], 1);
    assert_int_equal(log.len[2], mtu);
    assert_int_equal(log.len[3], mtu);
    assert_memory_equal(log.data[1], buf, 1);
    assert_memory_equal(log.data[2], buf, mtu);
    assert_memory_equal(log.data[3], buf, mtu);
    rx_log_free(&log);

    assert_int_equal(send_one(b, to_a, "pong", 4), SX_OK);
    rx_until(a, &log, 1);
    assert_int_equal(log.len[0], 4);
    assert_memory_equal(log.data[0], "pong", 4);
    rx_log_free(&log);

    assert_int_equal(a->stats.tx_datagrams, 4);
    assert_int_equal(b->stats.rx_datagrams, 4);
    free(buf);
    a->ops->close(a);
    b->ops->close(b);
}

static void test_batches(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi(), *b = open_ofi();

    /* 20 rounds of 64 is five times the send slots; the sender never
     * polls: post_send reads its own completions to free slots. */
    tl_batches(a, b, a->caps.mtu < 1200 ? a->caps.mtu : 1200, 20);
    a->ops->close(a);
    b->ops->close(b);
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
        {"", 0, SX_ERR_INVALID_PARAM},
        {"\x02", 1, SX_ERR_INVALID_PARAM},
        {"\x02\x27\x10\x7f\x00\x00", 6, SX_ERR_INVALID_PARAM},         /* short */
        {"\x02\x27\x10\x7f\x00\x00\x01\x00", 8, SX_ERR_INVALID_PARAM}, /* long */
        {"\x02\x00\x00\x7f\x00\x00\x01", 7, SX_ERR_INVALID_PARAM},     /* port 0 */
        {"\x02\x27\x10\x00\x00\x00\x00", 7, SX_ERR_INVALID_PARAM},     /* 0.0.0.0 */
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
    assert_int_equal(a->ops->addr_check(a, NULL, 7), SX_ERR_INVALID_PARAM);
    assert_int_equal(a->ops->addr_insert(a, NULL, 7, &dest), SX_ERR_INVALID_PARAM);
    /* A well-formed address is accepted, even if nobody listens there. */
    assert_int_equal(a->ops->addr_insert(a, "\x02\x27\x10\x7f\x00\x00\x01", 7, &dest), SX_OK);
    assert_int_equal(send_one(a, dest, "nobody", 6), SX_OK);
    a->ops->close(a);
}

static void test_addr_remove(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi(), *b = open_ofi();
    sx_tl_dest_t d1 = connect_to(a, b), d2 = connect_to(a, b);
    rx_log_t log = {0};

    assert_int_not_equal(d1, d2);
    a->ops->addr_remove(a, d1);
    assert_int_equal(send_one(a, d1, "x", 1), SX_ERR_INVALID_PARAM);
    assert_int_equal(send_one(a, SX_TL_DEST_NONE, "x", 1), SX_ERR_INVALID_PARAM);
    a->ops->addr_remove(a, d1); /* twice is harmless */
    assert_int_equal(send_one(a, d2, "y", 1), SX_OK);
    sx_tl_dest_t d3 = connect_to(a, b);
    assert_int_equal(d3, d1);
    assert_int_equal(send_one(a, d3, "z", 1), SX_OK);
    rx_until(b, &log, 2);
    assert_memory_equal(log.data[0], "y", 1);
    assert_memory_equal(log.data[1], "z", 1);
    rx_log_free(&log);

    /* Many destinations: the table grows. */
    for (unsigned i = 0; i < 100; i++)
        (void)connect_to(a, b);
    a->ops->close(a);
    b->ops->close(b);
}

/* The wait fd: quiet when armed, readable once a datagram arrives, and
 * quiet again after a poll that finds nothing (which re-arms it). */
static void test_wait_fd_and_arm(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi(), *b = open_ofi();
    sx_tl_dest_t to_b = connect_to(a, b);
    struct pollfd pfd = {.fd = b->ops->wait_fd(b), .events = POLLIN};
    sx_tl_event_t ev[4];

    assert_int_equal(b->ops->arm(b), SX_OK);
    assert_int_equal(poll(&pfd, 1, 0), 0);
    for (unsigned round = 0; round < 3; round++) {
        assert_int_equal(send_one(a, to_b, "wake", 4), SX_OK);
        /* The timeout is an upper bound only: it turns a hang into a failure. */
        assert_int_equal(poll(&pfd, 1, 10000), 1);
        assert_true(pfd.revents & POLLIN);
        int n = 0;
        uint64_t deadline = sx_time_ns() + DEADLINE_NS;
        while (n == 0 && sx_time_ns() < deadline)
            n = b->ops->poll(b, ev, 4);
        assert_int_equal(n, 1);
        assert_int_equal(ev[0].len, 4);
        assert_memory_equal(ev[0].data, "wake", 4);
        /* Something completed since the last arming: arming says whether
         * the fd can be trusted, and an empty poll re-arms. */
        int rc = b->ops->arm(b);
        assert_true(rc == SX_OK || rc == SX_ERR_AGAIN);
        assert_int_equal(b->ops->poll(b, ev, 4), 0);
        assert_int_equal(b->ops->arm(b), SX_OK);
        assert_int_equal(poll(&pfd, 1, 0), 0);
    }
    assert_int_equal(b->ops->poll(b, ev, 0), 0);
    a->ops->close(a);
    b->ops->close(b);
}

/* A datagram longer than the mtu, sent from a plain socket, is dropped and
 * counted; the next one is delivered whole. The udp provider would cut it
 * silently: the spare byte of each receive buffer tells. */
static void test_truncated_datagram(void **state)
{
    (void)state;
    sx_tl_iface_t *b = open_ofi();
    size_t mtu = b->caps.mtu;
    uint8_t *big = calloc(1, mtu + 100);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port_of(b))};
    rx_log_t log = {0};

    assert_non_null(big);
    assert_true(fd >= 0);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(sendto(fd, big, mtu + 100, 0, (struct sockaddr *)&to, sizeof(to)),
                     (ssize_t)(mtu + 100));
    assert_int_equal(sendto(fd, big, mtu + 1, 0, (struct sockaddr *)&to, sizeof(to)),
                     (ssize_t)(mtu + 1));
    assert_int_equal(sendto(fd, "fine", 4, 0, (struct sockaddr *)&to, sizeof(to)), 4);
    rx_until(b, &log, 1);
    assert_int_equal(log.len[0], 4);
    assert_int_equal(b->stats.rx_truncated, 2);
    rx_log_free(&log);
    close(fd);
    free(big);
    b->ops->close(b);
}

/* A busy receiver: thousands of datagrams through 256 posted buffers, each
 * poll's buffers going back to the provider at the next poll. */
static void test_receive_buffers_recycle(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_ofi(), *b = open_ofi();
    sx_tl_dest_t to_b = connect_to(a, b);
    rx_log_t log = {0};
    enum { N = 4000 };

    for (uint32_t i = 0; i < N; i++) {
        while (send_one(a, to_b, &i, sizeof(i)) == SX_ERR_AGAIN)
            ;
        if ((i & 63) == 63)
            rx_once(b, &log);
    }
    rx_until(b, &log, N);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t v;
        memcpy(&v, log.data[i], sizeof(v));
        assert_int_equal(v, i);
    }
    rx_log_free(&log);
    a->ops->close(a);
    b->ops->close(b);
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
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_bounce_buffers),
        cmocka_unit_test(test_addr_check_and_insert),
        cmocka_unit_test(test_addr_remove),
        cmocka_unit_test(test_wait_fd_and_arm),
        cmocka_unit_test(test_truncated_datagram),
        cmocka_unit_test(test_receive_buffers_recycle),
        cmocka_unit_test(test_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
