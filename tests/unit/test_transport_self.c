/*
 * The self transport: datagrams between the shards of one domain, several
 * sending threads into one receiver (each datagram exactly once, each
 * sender's order kept), the eventfd wake-up with no lost wake-up, address
 * checks, a closed destination and a full destination queue. Receivers
 * poll until what they wait for arrives; deadlines only turn a hang into a
 * failure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/time.h"
#include "transports/transport.h"

#define DEADLINE_NS       (30ull * 1000000000ull)
#define TL_RX_DEADLINE_NS DEADLINE_NS
#include "tl_util.h"

static sx_tl_iface_t *open_self(void *domain, unsigned shard, size_t rcvbuf)
{
    sx_tl_config_t cfg = {.shard = shard, .self_domain = domain, .rcvbuf = rcvbuf};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_self_ops.open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    return iface;
}

/* ------------------------------------------------------------------ */

static void test_exchange(void **state)
{
    (void)state;
    void *dom = NULL;
    assert_int_equal(sx_tl_self_domain_create(4, &dom), SX_OK);
    sx_tl_iface_t *a = open_self(dom, 0, 0), *b = open_self(dom, 3, 0);
    sx_tl_dest_t to_b = connect_to(a, b), to_a = connect_to(b, a), to_self = connect_to(a, a);
    size_t mtu = a->caps.mtu;
    uint8_t *buf = malloc(mtu + 1);

    assert_non_null(buf);
    assert_int_equal(mtu, 65000);
    assert_int_equal(a->caps.sync_send, 1);
    for (size_t i = 0; i <= mtu; i++)
        buf[i] = (uint8_t)(i * 13 + 5);
    assert_int_equal(send_one(a, to_b, buf, 0), SX_OK);
    assert_int_equal(send_one(a, to_b, buf, 1), SX_OK);
    assert_int_equal(send_one(a, to_b, buf, mtu), SX_OK);
    assert_int_equal(send_one(a, to_b, buf, mtu + 1), SX_ERR_INVALID_PARAM);
    /* The copy was made at send time: changing the buffer now is fine. */
    memset(buf, 0, 16);
    expect_one(b, NULL, 0);
    expect_one(b, "\x05", 1);
    buf[0] = 5, buf[1] = 18;
    for (size_t i = 2; i < 16; i++)
        buf[i] = (uint8_t)(i * 13 + 5);
    expect_one(b, buf, mtu);

    /* Several pieces, back the other way, and to oneself. */
    sx_tl_tx_t t = {.dest = to_a, .iovcnt = 3};
    t.iov[0] = (struct iovec){"ab", 2};
    t.iov[1] = (struct iovec){"", 0};
    t.iov[2] = (struct iovec){"cde", 3};
    unsigned posted = 0;
    assert_int_equal(b->ops->post_send(b, &t, 1, &posted), SX_OK);
    assert_int_equal(posted, 1);
    expect_one(a, "abcde", 5);
    assert_int_equal(send_one(a, to_self, "me", 2), SX_OK);
    expect_one(a, "me", 2);
    t.iovcnt = SX_TL_IOV_MAX + 1;
    assert_int_equal(b->ops->post_send(b, &t, 1, &posted), SX_ERR_INVALID_PARAM);
    assert_int_equal(posted, 0);

    assert_int_equal(a->stats.tx_datagrams, 4);
    assert_int_equal(b->stats.rx_datagrams, 3);
    free(buf);
    a->ops->close(a);
    b->ops->close(b);
    sx_tl_self_domain_destroy(dom);
}

static void test_open_errors(void **state)
{
    (void)state;
    void *dom = NULL;
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_self_domain_create(0, &dom), SX_ERR_INVALID_PARAM);
    assert_null(dom);
    assert_int_equal(sx_tl_self_domain_create(2, &dom), SX_OK);
    sx_tl_config_t cfg = {.shard = 2, .self_domain = dom};
    assert_int_equal(sx_tl_self_ops.open(&cfg, &iface), SX_ERR_INVALID_PARAM);
    cfg = (sx_tl_config_t){.shard = 0};
    assert_int_equal(sx_tl_self_ops.open(&cfg, &iface), SX_ERR_INVALID_PARAM);
    assert_null(iface);

    sx_tl_iface_t *a = open_self(dom, 1, 0);
    cfg = (sx_tl_config_t){.shard = 1, .self_domain = dom};
    assert_int_equal(sx_tl_self_ops.open(&cfg, &iface), SX_ERR_EXISTS);
    a->ops->close(a);
    a = open_self(dom, 1, 0); /* the slot is free again */
    a->ops->close(a);
    sx_tl_self_domain_destroy(dom);
    sx_tl_self_domain_destroy(NULL);
}

static void test_addresses_of_other_domains_rejected(void **state)
{
    (void)state;
    void *d1 = NULL, *d2 = NULL;
    assert_int_equal(sx_tl_self_domain_create(2, &d1), SX_OK);
    assert_int_equal(sx_tl_self_domain_create(2, &d2), SX_OK);
    sx_tl_iface_t *a = open_self(d1, 0, 0), *other = open_self(d2, 1, 0);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    sx_tl_dest_t dest = 777;

    assert_int_equal(other->ops->local_addr(other, addr, &len), SX_OK);
    assert_int_equal(len, 12); /* domain id, shard */
    assert_int_equal(a->ops->addr_insert(a, addr, len, &dest), SX_ERR_INVALID_PARAM);

    /* Our own domain, but a shard it does not have; and wrong lengths. */
    len = sizeof(addr);
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    addr[8] = 2;
    assert_int_equal(a->ops->addr_insert(a, addr, len, &dest), SX_ERR_INVALID_PARAM);
    addr[8] = 0;
    addr[11] = 0x80;
    assert_int_equal(a->ops->addr_insert(a, addr, len, &dest), SX_ERR_INVALID_PARAM);
    addr[11] = 0;
    assert_int_equal(a->ops->addr_insert(a, addr, len - 1, &dest), SX_ERR_INVALID_PARAM);
    assert_int_equal(a->ops->addr_insert(a, addr, len + 1, &dest), SX_ERR_INVALID_PARAM);
    assert_int_equal(dest, 777);
    assert_int_equal(a->ops->addr_insert(a, addr, len, &dest), SX_OK);

    /* A removed destination refuses sends. */
    a->ops->addr_remove(a, dest);
    assert_int_equal(send_one(a, dest, "x", 1), SX_ERR_INVALID_PARAM);
    len = 4;
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_ERR_TRUNCATED);

    a->ops->close(a);
    other->ops->close(other);
    sx_tl_self_domain_destroy(d1);
    sx_tl_self_domain_destroy(d2);
}

static void test_eventfd(void **state)
{
    (void)state;
    void *dom = NULL;
    assert_int_equal(sx_tl_self_domain_create(2, &dom), SX_OK);
    sx_tl_iface_t *a = open_self(dom, 0, 0), *b = open_self(dom, 1, 0);
    sx_tl_dest_t to_b = connect_to(a, b);
    struct pollfd pfd = {.fd = b->ops->wait_fd(b), .events = POLLIN};
    sx_tl_event_t ev[8];

    assert_true(pfd.fd >= 0);
    assert_int_equal(poll(&pfd, 1, 0), 0);
    assert_int_equal(send_one(a, to_b, "1", 1), SX_OK);
    assert_int_equal(send_one(a, to_b, "2", 1), SX_OK);
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    /* Taking one of two leaves the fd readable ... */
    assert_int_equal(b->ops->poll(b, ev, 1), 1);
    assert_int_equal(poll(&pfd, 1, 0), 1);
    /* ... and a poll that empties the queue resets it. */
    assert_int_equal(b->ops->poll(b, ev, 8), 1);
    assert_memory_equal(ev[0].data, "2", 1);
    assert_int_equal(poll(&pfd, 1, 0), 0);
    assert_int_equal(b->ops->poll(b, ev, 8), 0);
    assert_int_equal(send_one(a, to_b, "3", 1), SX_OK);
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    a->ops->close(a);
    b->ops->close(b); /* frees the queued datagram */
    sx_tl_self_domain_destroy(dom);
}

static void test_closed_and_full_destinations(void **state)
{
    (void)state;
    void *dom = NULL;
    assert_int_equal(sx_tl_self_domain_create(3, &dom), SX_OK);
    sx_tl_iface_t *a = open_self(dom, 0, 0), *gone = open_self(dom, 1, 0);
    sx_tl_iface_t *small = open_self(dom, 2, 4096);
    sx_tl_dest_t to_gone = connect_to(a, gone), to_small = connect_to(a, small);
    sx_tl_event_t ev[16];
    uint8_t buf[1000] = {0};

    gone->ops->close(gone);
    assert_int_equal(send_one(a, to_gone, "x", 1), SX_OK);
    assert_int_equal(a->stats.tx_refused, 1);

    /* 4096 bytes hold three datagrams of 1000 bytes plus overhead. */
    for (unsigned i = 0; i < 10; i++)
        assert_int_equal(send_one(a, to_small, buf, sizeof(buf)), SX_OK);
    assert_int_equal(small->ops->poll(small, ev, 16), 3);
    assert_int_equal(small->stats.rx_kernel_drops, 7);
    /* Room again once drained. */
    assert_int_equal(send_one(a, to_small, buf, 10), SX_OK);
    expect_one(small, buf, 10);
    a->ops->close(a);
    small->ops->close(small);
    sx_tl_self_domain_destroy(dom);
}

/* ------------------------------------------------------------------ */
/* Concurrent senders into one receiver.                                */

#define SENDERS    4
#define PER_SENDER 20000
#define TX_BATCH   16

typedef struct sender_arg {
    sx_tl_iface_t *iface;
    sx_tl_dest_t dest;
    uint32_t id;
} sender_arg_t;

typedef struct payload {
    uint32_t sender;
    uint32_t len;
    uint64_t seq;
} payload_t;

static void *sender_main(void *p)
{
    sender_arg_t *a = p;
    static _Thread_local uint8_t bufs[TX_BATCH][sizeof(payload_t) + 64];
    sx_tl_tx_t tx[TX_BATCH];

    for (uint64_t seq = 0; seq < PER_SENDER; seq += TX_BATCH) {
        for (unsigned i = 0; i < TX_BATCH; i++) {
            payload_t pl = {.sender = a->id, .seq = seq + i};
            pl.len = (uint32_t)(sizeof(pl) + (seq + i) % 64);
            memcpy(bufs[i], &pl, sizeof(pl));
            memset(bufs[i] + sizeof(pl), (int)(pl.seq & 0xff), pl.len - sizeof(pl));
            tx[i] = (sx_tl_tx_t){.dest = a->dest, .iovcnt = 1};
            tx[i].iov[0] = (struct iovec){bufs[i], pl.len};
        }
        unsigned posted = 0;
        if (a->iface->ops->post_send(a->iface, tx, TX_BATCH, &posted) != SX_OK ||
            posted != TX_BATCH)
            return (void *)1;
    }
    return NULL;
}

static void test_concurrent_senders(void **state)
{
    (void)state;
    void *dom = NULL;
    assert_int_equal(sx_tl_self_domain_create(SENDERS + 1, &dom), SX_OK);
    sx_tl_iface_t *rx = open_self(dom, 0, 0);
    sender_arg_t args[SENDERS];
    pthread_t threads[SENDERS];
    uint64_t next[SENDERS] = {0};
    uint64_t total = 0, errors = 0;
    sx_tl_event_t ev[64];
    struct pollfd pfd = {.fd = rx->ops->wait_fd(rx), .events = POLLIN};

    for (unsigned s = 0; s < SENDERS; s++) {
        args[s] = (sender_arg_t){.iface = open_self(dom, s + 1, 0), .id = s};
        args[s].dest = connect_to(args[s].iface, rx);
    }
    for (unsigned s = 0; s < SENDERS; s++)
        assert_int_equal(pthread_create(&threads[s], NULL, sender_main, &args[s]), 0);

    /* The receiver sleeps on the eventfd whenever it finds nothing, so a
     * lost wake-up shows as a poll(2) timeout with datagrams still due. */
    while (total < (uint64_t)SENDERS * PER_SENDER) {
        int n = rx->ops->poll(rx, ev, 64);
        assert_true(n >= 0);
        if (n == 0) {
            if (poll(&pfd, 1, 10000) == 0 && rx->ops->poll(rx, ev, 1) == 0)
                fail_msg("lost wake-up after %lu datagrams", (unsigned long)total);
            continue;
        }
        for (int i = 0; i < n; i++) {
            payload_t pl;
            if (ev[i].len < sizeof(pl)) {
                errors++;
                continue;
            }
            memcpy(&pl, ev[i].data, sizeof(pl));
            if (pl.sender >= SENDERS || pl.len != ev[i].len || pl.seq != next[pl.sender])
                errors++;
            else
                next[pl.sender]++;
            for (size_t j = sizeof(pl); j < ev[i].len; j++)
                errors += ev[i].data[j] != (uint8_t)(pl.seq & 0xff);
        }
        total += (uint64_t)n;
    }
    for (unsigned s = 0; s < SENDERS; s++) {
        void *rc = NULL;
        pthread_join(threads[s], &rc);
        assert_null(rc);
        assert_int_equal(next[s], PER_SENDER);
        args[s].iface->ops->close(args[s].iface);
    }
    assert_int_equal(errors, 0);
    assert_int_equal(rx->ops->poll(rx, ev, 64), 0);
    assert_int_equal(rx->stats.rx_kernel_drops, 0);
    rx->ops->close(rx);
    sx_tl_self_domain_destroy(dom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exchange),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_addresses_of_other_domains_rejected),
        cmocka_unit_test(test_eventfd),
        cmocka_unit_test(test_closed_and_full_destinations),
        cmocka_unit_test(test_concurrent_senders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
