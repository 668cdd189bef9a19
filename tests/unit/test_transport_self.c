/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What only the self transport does: domains and their shard slots, its
 * mtu and address, addresses of other domains or shards refused, a closed
 * destination and a full destination queue counted, and several sending
 * threads into one receiver (each datagram exactly once, each sender's
 * order kept, no lost wake-up on the eventfd). What every transport does
 * (sizes, gathers, batches, destinations, the wait fd) is
 * test_transport_conformance_self's. Receivers poll until what they wait
 * for arrives; deadlines only turn a hang into a failure.
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
#include "test_filter.h"
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

/* Domains and their slots; an interface's mtu. */
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
    assert_int_equal(a->caps.mtu, 65000); /* as udp's on loopback */
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

    /* Our own domain, but a shard it does not have. */
    len = sizeof(addr);
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    addr[8] = 2;
    assert_int_equal(a->ops->addr_insert(a, addr, len, &dest), SX_ERR_INVALID_PARAM);
    addr[8] = 0;
    addr[11] = 0x80;
    assert_int_equal(a->ops->addr_insert(a, addr, len, &dest), SX_ERR_INVALID_PARAM);
    addr[11] = 0;
    assert_int_equal(dest, 777);
    assert_int_equal(a->ops->addr_insert(a, addr, len, &dest), SX_OK);

    a->ops->close(a);
    other->ops->close(other);
    sx_tl_self_domain_destroy(d1);
    sx_tl_self_domain_destroy(d2);
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
    int efd[SX_TL_WAIT_FDS];
    assert_int_equal(rx->ops->wait_fds(rx, efd), 1);
    struct pollfd pfd = {.fd = efd[0], .events = POLLIN};

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
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_addresses_of_other_domains_rejected),
        cmocka_unit_test(test_closed_and_full_destinations),
        cmocka_unit_test(test_concurrent_senders),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
