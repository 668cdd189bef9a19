/*
 * The udp transport over real loopback sockets: sizes up to the mtu,
 * sendmmsg/recvmmsg batches, address validation, destination removal, the
 * wait fd, a closed destination port, kernel drop counting and truncation.
 * Nothing sleeps to synchronize: receivers poll until what they wait for
 * arrives, and a generous deadline only turns a hang into a failure.
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
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <shardx.h>

#include "common/time.h"
#include "transports/transport.h"

#define DEADLINE_NS (10ull * 1000000000ull)

typedef struct rx_log {
    size_t n, cap;
    uint8_t **data;
    size_t *len;
} rx_log_t;

static void rx_log_free(rx_log_t *log)
{
    for (size_t i = 0; i < log->n; i++)
        free(log->data[i]);
    free(log->data);
    free(log->len);
    memset(log, 0, sizeof(*log));
}

static void rx_log_add(rx_log_t *log, const uint8_t *data, size_t len)
{
    if (log->n == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 64;
        log->data = realloc(log->data, log->cap * sizeof(*log->data));
        log->len = realloc(log->len, log->cap * sizeof(*log->len));
        assert_non_null(log->data);
        assert_non_null(log->len);
    }
    log->data[log->n] = malloc(len + 1);
    assert_non_null(log->data[log->n]);
    if (len > 0)
        memcpy(log->data[log->n], data, len);
    log->len[log->n++] = len;
}

/* Polls @p rx until @p log holds @p want datagrams; fails after the deadline. */
static void rx_until(sx_tl_iface_t *rx, rx_log_t *log, size_t want)
{
    sx_tl_event_t ev[64];
    uint64_t deadline = sx_time_ns() + DEADLINE_NS;

    while (log->n < want) {
        int n = rx->ops->poll(rx, ev, 64);
        assert_true(n >= 0);
        for (int i = 0; i < n; i++) {
            assert_int_equal(ev[i].type, SX_TL_EV_RECV);
            rx_log_add(log, ev[i].data, ev[i].len);
        }
        if (sx_time_ns() > deadline)
            fail_msg("only %zu of %zu datagrams arrived", log->n, want);
    }
}

static sx_tl_iface_t *open_udp(size_t rcvbuf)
{
    sx_tl_config_t cfg = {.shard = 0, .nshards = 1, .rcvbuf = rcvbuf};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    return iface;
}

static sx_tl_dest_t connect_to(sx_tl_iface_t *from, sx_tl_iface_t *to)
{
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    sx_tl_dest_t dest = SX_TL_DEST_NONE;

    assert_int_equal(to->ops->local_addr(to, addr, &len), SX_OK);
    assert_int_equal(from->ops->addr_insert(from, addr, len, &dest), SX_OK);
    return dest;
}

static int send_one(sx_tl_iface_t *tx, sx_tl_dest_t dest, const void *data, size_t len)
{
    sx_tl_tx_t t = {.dest = dest, .iovcnt = 1};
    unsigned posted = 99;

    t.iov[0] = (struct iovec){.iov_base = (void *)data, .iov_len = len};
    int rc = tx->ops->post_send(tx, &t, 1, &posted);
    assert_int_equal(posted, rc == SX_OK ? 1 : 0);
    return rc;
}

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 8));
}

/* ------------------------------------------------------------------ */

static void test_registry(void **state)
{
    (void)state;
    assert_ptr_equal(sx_tl_find("udp"), &sx_tl_udp_ops);
    assert_ptr_equal(sx_tl_find("self"), &sx_tl_self_ops);
    assert_ptr_equal(sx_tl_find("fault"), &sx_tl_fault_ops);
    assert_null(sx_tl_find("tcp"));
    assert_null(sx_tl_find(""));
    assert_null(sx_tl_find(NULL));
}

static void test_open_caps_and_address(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);

    assert_int_equal(a->caps.mtu, 65000);
    assert_int_equal(a->caps.inline_limit, 65000);
    assert_int_equal(a->caps.sync_send, 1);
    assert_true(a->caps.tx_credits > 0);
    assert_true(a->ops->wait_fd(a) >= 0);
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    assert_int_equal(len, 8);
    assert_int_equal(addr[0], 4);
    assert_int_equal(addr[1], 0);
    assert_true((addr[2] | addr[3] << 8) != 0);
    assert_memory_equal(addr + 4, "\x7f\x00\x00\x01", 4);
    len = 7;
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_ERR_TRUNCATED);
    assert_int_equal(len, 7);
    a->ops->close(a);

    static const char *const bad[] = {"0.0.0.0",     "garbage", "127.0.0.1:", "127.0.0.1:99999",
                                      "127.0.0.1:x", "",        "1.2.3"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx_tl_config_t cfg = {.bind_addr = bad[i]};
        sx_tl_iface_t *iface = NULL;
        assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_ERR_INVALID_PARAM);
        assert_null(iface);
    }
    sx_tl_config_t v6 = {.bind_addr = "::1"};
    sx_tl_iface_t *iface = NULL;
    assert_int_equal(sx_tl_udp_ops.open(&v6, &iface), SX_ERR_UNSUPPORTED);
    sx_tl_config_t ok = {.bind_addr = "127.0.0.1:0", .rcvbuf = 1 << 20, .sndbuf = 1 << 20};
    assert_int_equal(sx_tl_udp_ops.open(&ok, &iface), SX_OK);
    iface->ops->close(iface);
}

static void test_sizes(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0), *b = open_udp(0);
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

    /* One datagram from three pieces; and more pieces than allowed. */
    sx_tl_tx_t t = {.dest = to_b, .iovcnt = 3};
    t.iov[0] = (struct iovec){buf, 10};
    t.iov[1] = (struct iovec){buf + 10, 0};
    t.iov[2] = (struct iovec){buf + 10, mtu - 10};
    unsigned posted = 0;
    assert_int_equal(a->ops->post_send(a, &t, 1, &posted), SX_OK);
    assert_int_equal(posted, 1);
    t.iov[2].iov_len = mtu - 9;
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

    /* And back the other way. */
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

static uint32_t checksum(const uint8_t *p, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

#define BATCH 64

static void test_batches(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0), *b = open_udp(4 << 20);
    sx_tl_dest_t to_b = connect_to(a, b);
    enum { ROUNDS = 20, MAXLEN = 1200 };
    static uint8_t bufs[BATCH][MAXLEN];
    sx_tl_tx_t tx[BATCH];
    rx_log_t log = {0};

    for (unsigned r = 0; r < ROUNDS; r++) {
        for (unsigned i = 0; i < BATCH; i++) {
            size_t len = 8 + (r * BATCH + i) * 37 % (MAXLEN - 8);
            uint32_t id = r * BATCH + i;
            fill(bufs[i], len, id);
            memcpy(bufs[i], &id, 4);
            uint32_t sum = checksum(bufs[i] + 8, len - 8);
            memcpy(bufs[i] + 4, &sum, 4);
            tx[i] = (sx_tl_tx_t){.dest = to_b, .iovcnt = 2};
            tx[i].iov[0] = (struct iovec){bufs[i], 8};
            tx[i].iov[1] = (struct iovec){bufs[i] + 8, len - 8};
        }
        unsigned done = 0;
        while (done < BATCH) {
            unsigned posted = 0;
            int rc = a->ops->post_send(a, tx + done, BATCH - done, &posted);
            assert_true(rc == SX_OK || rc == SX_ERR_AGAIN);
            done += posted;
        }
        /* Drain each round so the receive buffer never has to hold more. */
        rx_until(b, &log, (size_t)(r + 1) * BATCH);
    }
    for (size_t i = 0; i < log.n; i++) {
        uint32_t id, sum;
        assert_true(log.len[i] >= 8);
        memcpy(&id, log.data[i], 4);
        memcpy(&sum, log.data[i] + 4, 4);
        /* One sender socket on loopback: order is kept. */
        assert_int_equal(id, i);
        assert_int_equal(log.len[i], 8 + i * 37 % (MAXLEN - 8));
        assert_int_equal(sum, checksum(log.data[i] + 8, log.len[i] - 8));
    }
    rx_log_free(&log);
    assert_int_equal(b->stats.rx_kernel_drops, 0);
    assert_int_equal(b->stats.rx_truncated, 0);

    /* A refused datagram inside a batch: the ones before it go out, in
     * order, and the call says which one failed. */
    for (unsigned i = 0; i < 4; i++)
        tx[i].iov[1].iov_len = 16;
    tx[2].iov[1].iov_len = a->caps.mtu;
    unsigned posted = 0;
    assert_int_equal(a->ops->post_send(a, tx, 4, &posted), SX_ERR_INVALID_PARAM);
    assert_int_equal(posted, 2);
    rx_until(b, &log, 2);
    assert_int_equal(log.len[0], 24);
    assert_memory_equal(log.data[1], bufs[1], 8);
    rx_log_free(&log);
    a->ops->close(a);
    b->ops->close(b);
}

static void test_addr_insert_rejects_garbage(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0);
    sx_tl_dest_t dest = 12345;
    static const struct {
        const char *bytes;
        size_t len;
    } bad[] = {
        {"", 0},
        {"\x04\x00\x10\x27\x7f\x00\x00", 7},         /* short */
        {"\x04\x00\x10\x27\x7f\x00\x00\x01\x00", 9}, /* long */
        {"\x06\x00\x10\x27\x7f\x00\x00\x01", 8},     /* IPv6 family */
        {"\x00\x00\x10\x27\x7f\x00\x00\x01", 8},     /* no family */
        {"\x04\x01\x10\x27\x7f\x00\x00\x01", 8},     /* reserved byte set */
        {"\x04\x00\x00\x00\x7f\x00\x00\x01", 8},     /* port 0 */
        {"\x04\x00\x10\x27\x00\x00\x00\x00", 8},     /* 0.0.0.0 */
        {"\xff\xff\xff\xff\xff\xff\xff\xff", 8},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(a->ops->addr_insert(a, bad[i].bytes, bad[i].len, &dest),
                         SX_ERR_INVALID_PARAM);
    assert_int_equal(dest, 12345);
    assert_int_equal(a->ops->addr_insert(a, NULL, 8, &dest), SX_ERR_INVALID_PARAM);
    /* A well-formed address is accepted, even if nobody listens there. */
    assert_int_equal(a->ops->addr_insert(a, "\x04\x00\x10\x27\x7f\x00\x00\x01", 8, &dest), SX_OK);
    a->ops->close(a);
}

static void test_addr_remove(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0), *b = open_udp(0);
    sx_tl_dest_t d1 = connect_to(a, b), d2 = connect_to(a, b);
    rx_log_t log = {0};

    assert_int_not_equal(d1, d2);
    a->ops->addr_remove(a, d1);
    assert_int_equal(send_one(a, d1, "x", 1), SX_ERR_INVALID_PARAM);
    assert_int_equal(send_one(a, SX_TL_DEST_NONE, "x", 1), SX_ERR_INVALID_PARAM);
    a->ops->addr_remove(a, d1); /* twice is harmless */
    assert_int_equal(send_one(a, d2, "y", 1), SX_OK);
    /* The freed slot is reused and works again. */
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

static void test_wait_fd(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0), *b = open_udp(0);
    sx_tl_dest_t to_b = connect_to(a, b);
    struct pollfd pfd = {.fd = b->ops->wait_fd(b), .events = POLLIN};
    sx_tl_event_t ev[4];

    assert_int_equal(poll(&pfd, 1, 0), 0);
    assert_int_equal(send_one(a, to_b, "wake", 4), SX_OK);
    /* The timeout is an upper bound only: it turns a hang into a failure. */
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    assert_true(pfd.revents & POLLIN);
    assert_int_equal(b->ops->poll(b, ev, 4), 1);
    assert_int_equal(ev[0].len, 4);
    assert_int_equal(poll(&pfd, 1, 0), 0);
    assert_int_equal(b->ops->poll(b, ev, 0), 0);
    a->ops->close(a);
    b->ops->close(b);
}

static void test_closed_port_is_not_fatal(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_udp(0), *gone = open_udp(0);
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
    a->ops->close(a);
    c->ops->close(c);
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

static void test_oversized_datagram_dropped(void **state)
{
    (void)state;
    sx_tl_iface_t *b = open_udp(1 << 20);
    uint8_t addr[8];
    size_t alen = sizeof(addr);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    static uint8_t big[65507];
    rx_log_t log = {0};

    /* A plain socket plays a peer whose idea of the mtu is larger. */
    assert_int_equal(b->ops->local_addr(b, addr, &alen), SX_OK);
    sa.sin_port = htons((uint16_t)(addr[2] | addr[3] << 8));
    memcpy(&sa.sin_addr, addr + 4, 4);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(sendto(fd, big, b->caps.mtu + 1, 0, (struct sockaddr *)&sa, sizeof(sa)),
                     (ssize_t)b->caps.mtu + 1);
    assert_int_equal(sendto(fd, big, sizeof(big), 0, (struct sockaddr *)&sa, sizeof(sa)),
                     (ssize_t)sizeof(big));
    assert_int_equal(sendto(fd, "ok", 2, 0, (struct sockaddr *)&sa, sizeof(sa)), 2);
    rx_until(b, &log, 1);
    assert_int_equal(log.len[0], 2);
    assert_int_equal(b->stats.rx_truncated, 2);
    rx_log_free(&log);
    close(fd);
    b->ops->close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_open_caps_and_address),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_addr_insert_rejects_garbage),
        cmocka_unit_test(test_addr_remove),
        cmocka_unit_test(test_wait_fd),
        cmocka_unit_test(test_closed_port_is_not_fatal),
        cmocka_unit_test(test_kernel_drops_counted),
        cmocka_unit_test(test_oversized_datagram_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
