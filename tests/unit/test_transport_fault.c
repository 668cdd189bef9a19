/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The faults of the fault decorator over real udp sockets (and once over
 * self): each fault at probability 1, delay as a lower bound on arrival,
 * the same seed giving the same drop pattern, strict parsing of the
 * specification, the control-only faults, and bad sends refused where
 * every datagram is dropped. The decorator as a transport, with no fault
 * configured and with every probability 0 (nothing held, changed or
 * counted), is test_transport_conformance_fault and _fault_seeded.
 * Receivers poll until what they wait for arrives; deadlines only turn a
 * hang into a failure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shardx.h>

#include "common/time.h"
#include "test_filter.h"
#include "transports/transport.h"
#include "tl_util.h"

#define CTRL_BYTE 0xc7

/* What the receiver of the case got, with arrival times. */
static rx_log_t rxlog;

static int is_ctrl(const void *data, size_t len)
{
    return len > 0 && ((const uint8_t *)data)[0] == CTRL_BYTE;
}

static sx_tl_iface_t *open_fault(const sx_tl_ops_t *inner, void *dom, unsigned shard,
                                 const char *spec)
{
    sx_tl_config_t cfg = {.shard = shard,
                          .inner_ops = inner,
                          .fault = spec,
                          .self_domain = dom,
                          .is_control = is_ctrl};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_fault_ops.open(&cfg, &iface), SX_OK);
    return iface;
}

static sx_tl_iface_t *open_udp(void)
{
    sx_tl_config_t cfg = {.rcvbuf = 4 << 20};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_udp_ops.open(&cfg, &iface), SX_OK);
    return iface;
}

/* A 2-byte datagram: an id, and a control marker or not. */
static int send_id(sx_tl_iface_t *tx, sx_tl_dest_t dest, uint8_t id, bool ctrl)
{
    uint8_t b[2] = {ctrl ? CTRL_BYTE : 0, id};
    return send_one(tx, dest, b, 2);
}

/* Returns once @p ms have passed since @p from_ns (a window's edge, not a
 * synchronization: nothing else is waited for). */
static void pass_ms(uint64_t from_ns, unsigned ms)
{
    while (sx_time_ns() - from_ns < (uint64_t)ms * 1000000u) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static sx_tl_fault_stats_t fstats(sx_tl_iface_t *f)
{
    sx_tl_fault_stats_t s;
    assert_int_equal(sx_tl_fault_stats_get(f, &s), SX_OK);
    return s;
}

static int setup(void **state)
{
    (void)state;
    rx_log_free(&rxlog);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rx_log_free(&rxlog);
    return 0;
}

/* ------------------------------------------------------------------ */

static void test_bad_specs_rejected(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "loss=2",
        "loss=-0.1",
        "loss=abc",
        "loss=",
        "loss",
        "=1",
        "foo=1",
        "loss=nan",
        "loss=inf",
        "loss=1e400",
        "loss= 0.1",
        "loss=0.1,",
        ",loss=0.1",
        "loss=0.1,,dup=0.1",
        "loss=0.1,loss=0.2",
        "dup=1.5",
        "reorder=0x1p-1",
        "corrupt=1.0001",
        "ctrl_loss=-1",
        "delay_us=-5",
        "delay_us=1.5",
        "delay_us=60000001",
        "stall_us=-1",
        "stall_us=0.5",
        "stall_us=60000001",
        "stall_us=1,stall_us=2",
        "reorder_us=100",
        "reorder=0,reorder_us=100",
        "reorder=1,reorder_us=-1",
        "reorder=1,reorder_us=60000001",
        "seed=x",
        "seed=-1",
        "blackhole=5",
        "blackhole=5+",
        "blackhole=+5",
        "blackhole=a+b",
        "blackhole=1+2+3",
        "ctrl_blackout=1",
        "path_mtu_after=5",
        "path_mtu=100,path_mtu_after=x",
        "path_mtu=100,path_mtu_after=-1",
        "LOSS=0.1",
        "loss=0.1 ",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx_tl_config_t cfg = {.inner_ops = &sx_tl_udp_ops, .fault = bad[i]};
        sx_tl_iface_t *iface = NULL;
        if (sx_tl_fault_ops.open(&cfg, &iface) != SX_ERR_INVALID_PARAM)
            fail_msg("spec '%s' was not rejected", bad[i]);
        assert_null(iface);
    }

    /* No inner transport, or itself as the inner one. */
    sx_tl_iface_t *iface = NULL;
    sx_tl_config_t cfg = {.fault = "loss=0"};
    assert_int_equal(sx_tl_fault_ops.open(&cfg, &iface), SX_ERR_INVALID_PARAM);
    cfg.inner_ops = &sx_tl_fault_ops;
    assert_int_equal(sx_tl_fault_ops.open(&cfg, &iface), SX_ERR_INVALID_PARAM);

    static const char *const good[] = {
        "",
        "loss=0.05,dup=0.01,reorder=0.05,corrupt=0.001,delay_us=200,seed=7",
        "loss=1,seed=0xffffffffffffffff",
        "ctrl_loss=.5",
        "blackhole=0+0,ctrl_blackout=10+20",
        "path_mtu=1500,path_mtu_after=0",
        "stall_us=0,delay_us=5",
        "reorder=0.01,reorder_us=2000"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, good[i]);
        f->ops->close(f);
    }
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, NULL);
    f->ops->close(f);

    /* The stats getter knows a fault interface from another one. */
    sx_tl_iface_t *u = open_udp();
    sx_tl_fault_stats_t s;
    assert_int_equal(sx_tl_fault_stats_get(u, &s), SX_ERR_INVALID_PARAM);
    u->ops->close(u);
}

/* The inner interface's mtu and address; and where every datagram is
 * dropped, bad sends still fail as they would. */
static void test_delegation(void **state)
{
    (void)state;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "loss=1");
    sx_tl_iface_t *rx = open_udp();
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    static uint8_t big[65001];

    assert_int_equal(f->caps.mtu, rx->caps.mtu);
    assert_int_equal(f->ops->local_addr(f, addr, &len), SX_OK);
    /* udp's default: every interface (kind 5, 14 bytes and 5 per IPv4
     * address; kind 6, then a count and 17 per IPv6 address, where the
     * host has IPv6 addresses). */
    assert_true(addr[0] == 5 || addr[0] == 6);
    size_t at6 = 14 + 5 * (size_t)addr[1];
    assert_int_equal(len, addr[0] == 5 ? at6 : at6 + 1 + 17 * (size_t)addr[at6]);

    sx_tl_dest_t dest = connect_to(f, rx);
    assert_int_equal(send_one(f, dest, big, f->caps.mtu + 1), SX_ERR_INVALID_PARAM);
    assert_int_equal(send_one(f, dest, big, f->caps.mtu), SX_OK);
    f->ops->addr_remove(f, dest);
    assert_int_equal(send_one(f, dest, "x", 1), SX_ERR_INVALID_PARAM);
    assert_int_equal(send_one(f, SX_TL_DEST_NONE, "x", 1), SX_ERR_INVALID_PARAM);
    assert_int_equal(fstats(f).dropped, 1);
    f->ops->close(f);
    rx->ops->close(rx);
}

static void test_loss_one_drops_everything(void **state)
{
    (void)state;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "loss=1,seed=3");
    sx_tl_iface_t *rx = open_udp(), *plain = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx), marker_to_rx = connect_to(plain, rx);

    for (unsigned i = 0; i < 100; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
    assert_int_equal(fstats(f).dropped, 100);
    assert_int_equal(f->stats.tx_datagrams, 100);
    /* A marker from another socket; nothing from the fault one came first. */
    assert_int_equal(send_one(plain, marker_to_rx, "marker", 6), SX_OK);
    rx_until_also(rx, f, &rxlog, 1);
    assert_int_equal(rxlog.len[0], 6);
    f->ops->close(f);
    rx->ops->close(rx);
    plain->ops->close(plain);
}

static void test_dup_one_duplicates_everything(void **state)
{
    (void)state;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "dup=1");
    sx_tl_iface_t *rx = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx);
    unsigned seen[50] = {0};

    for (unsigned i = 0; i < 50; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
    rx_until_also(rx, f, &rxlog, 100);
    for (unsigned i = 0; i < 100; i++) {
        assert_true(rxlog.data[i][1] < 50);
        seen[rxlog.data[i][1]]++;
    }
    for (unsigned i = 0; i < 50; i++)
        assert_int_equal(seen[i], 2);
    assert_int_equal(fstats(f).duplicated, 50);
    f->ops->close(f);
    rx->ops->close(rx);
}

static void test_corrupt_flips_one_bit(void **state)
{
    (void)state;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "corrupt=1,seed=11");
    sx_tl_iface_t *rx = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx);
    uint8_t buf[64], ref[64];

    /* Lengths 1..64 tell the datagrams apart whatever the bits say. */
    for (unsigned len = 1; len <= 64; len++) {
        for (unsigned i = 0; i < len; i++)
            buf[i] = ref[i] = (uint8_t)(len * 31 + i);
        assert_int_equal(send_one(f, to_rx, buf, len), SX_OK);
        assert_memory_equal(buf, ref, len); /* the caller's buffer is untouched */
    }
    assert_int_equal(send_one(f, to_rx, buf, 0), SX_OK); /* no bit to flip */
    rx_until_also(rx, f, &rxlog, 65);
    for (size_t k = 0; k < 65; k++) {
        size_t len = rxlog.len[k];
        unsigned flipped = 0;
        for (size_t i = 0; i < len; i++)
            flipped += (unsigned)__builtin_popcount(rxlog.data[k][i] ^ (uint8_t)(len * 31 + i));
        assert_int_equal(flipped, len > 0 ? 1 : 0);
    }
    assert_int_equal(fstats(f).corrupted, 64);
    f->ops->close(f);
    rx->ops->close(rx);
}

static void test_reorder_one_swaps(void **state)
{
    (void)state;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "reorder=1");
    sx_tl_iface_t *rx = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx);
    static const uint8_t expect[] = {1, 0, 3, 2, 5, 4, 7, 6, 8};

    for (unsigned i = 0; i < 8; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
    /* A held datagram with no successor goes out at the next poll. */
    assert_int_equal(send_id(f, to_rx, 8, false), SX_OK);
    rx_until_also(rx, f, &rxlog, 9);
    for (unsigned i = 0; i < 9; i++)
        assert_int_equal(rxlog.data[i][1], expect[i]);
    assert_int_equal(fstats(f).reordered, 5);
    f->ops->close(f);
    rx->ops->close(rx);
}

/* reorder_us: the held datagram waits its time however many overtake it,
 * then a poll sends it. */
static void test_reorder_us_holds_for_its_time(void **state)
{
    (void)state;
    const uint64_t hold_ns = 20u * 1000000u;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "reorder=1,reorder_us=20000");
    sx_tl_iface_t *rx = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx);
    uint64_t held_at = sx_time_ns();

    for (unsigned i = 0; i < 5; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
    uint64_t sent_all = sx_time_ns();
    /* One held at a time per destination: the first. */
    assert_int_equal(fstats(f).reordered, 1);
    rx_until_also(rx, f, &rxlog, 5);
    unsigned at = 5;
    for (unsigned i = 0; i < 5; i++)
        at = rxlog.data[i][1] == 0 ? i : at;
    assert_true(at < 5);
    assert_true(rxlog.at_ns[at] >= held_at + hold_ns);
    /* The others went at once, so all before it, unless this machine took
     * the whole hold to send four datagrams (then some went after it). */
    if (sent_all - held_at < hold_ns) {
        assert_int_equal(at, 4);
        for (unsigned i = 0; i < 4; i++)
            assert_int_equal(rxlog.data[i][1], i + 1);
    }
    f->ops->close(f);
    rx->ops->close(rx);
}

/* What is held or delayed for a destination that is removed is dropped:
 * udp gives the slot to the next address inserted, which must not get it.
 * Each receiver's first datagram is the one sent to it, its second a
 * marker from another socket sent after everything else. */
static void test_removed_dest_drops_what_it_kept(void **state)
{
    (void)state;
    static const char *const specs[] = {"reorder=1", "delay_us=1000"};

    for (unsigned k = 0; k < 2; k++) {
        sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, specs[k]);
        sx_tl_iface_t *gone = open_udp(), *next = open_udp(), *plain = open_udp();
        sx_tl_dest_t to_gone = connect_to(f, gone), marker_to_next = connect_to(plain, next);

        assert_int_equal(send_id(f, to_gone, 1, false), SX_OK);
        assert_int_equal(fstats(f).reordered + fstats(f).delayed, 1);
        f->ops->addr_remove(f, to_gone);
        sx_tl_dest_t to_next = connect_to(f, next);
        assert_int_equal(to_next, to_gone); /* the slot comes back */
        /* A datagram to the slot would release a held one, and a delayed
         * one falls due first. */
        assert_int_equal(send_id(f, to_next, 2, false), SX_OK);
        rx_until_also(next, f, &rxlog, 1);
        assert_int_equal(rxlog.data[0][1], 2);
        assert_int_equal(send_one(plain, marker_to_next, "marker", 6), SX_OK);
        rx_until_also(next, f, &rxlog, 2);
        assert_int_equal(rxlog.len[1], 6);
        rx_log_free(&rxlog);
        f->ops->close(f);
        gone->ops->close(gone);
        next->ops->close(next);
        plain->ops->close(plain);
    }
}

static void test_delay(void **state)
{
    (void)state;
    const uint64_t delay_ns = 20u * 1000000u;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "delay_us=20000");
    sx_tl_iface_t *rx = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx);
    uint64_t sent_at[5];
    sx_tl_event_t ev[8];

    for (unsigned i = 0; i < 5; i++) {
        sent_at[i] = sx_time_ns();
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
    }
    assert_int_equal(fstats(f).delayed, 5);
    /* Only the sender's poll releases them, so nothing can be there yet. */
    assert_int_equal(rx->ops->poll(rx, ev, 8), 0);
    rx_until_also(rx, f, &rxlog, 5);
    for (unsigned i = 0; i < 5; i++) {
        assert_int_equal(rxlog.data[i][1], i);
        assert_true(rxlog.at_ns[i] >= sent_at[i] + delay_ns);
    }
    f->ops->close(f);
    rx->ops->close(rx);
}

/* stall_us: a post that sent returns the stall later, with its datagram
 * already on its way (the receiver may read it before the post returns);
 * one that sent nothing returns at once. */
static void test_stall(void **state)
{
    (void)state;
    const uint64_t stall_ns = 20u * 1000000u;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "stall_us=20000");
    sx_tl_iface_t *rx = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx);

    for (unsigned i = 0; i < 3; i++) {
        uint64_t t0 = sx_time_ns();
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
        assert_true(sx_time_ns() - t0 >= stall_ns);
    }
    assert_int_equal(fstats(f).stalled, 3);
    unsigned posted = 7;
    assert_int_equal(f->ops->post_send(f, NULL, 0, &posted), SX_OK);
    assert_int_equal(posted, 0);
    assert_int_equal(fstats(f).stalled, 3);
    rx_until_also(rx, f, &rxlog, 3);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(rxlog.data[i][1], i);
    assert_int_equal(fstats(f).delayed, 0);
    f->ops->close(f);
    rx->ops->close(rx);
}

/* Sends 256 datagrams one at a time and records which ones were dropped. */
static void drop_pattern(uint64_t seed, unsigned shard, bool pattern[256], bool check_rx)
{
    char spec[64];
    snprintf(spec, sizeof(spec), "loss=0.3,seed=%lu", (unsigned long)seed);
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, shard, spec);
    sx_tl_iface_t *rx = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx);
    uint64_t dropped = 0;

    rx_log_free(&rxlog);
    for (unsigned i = 0; i < 256; i++) {
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
        uint64_t d = fstats(f).dropped;
        pattern[i] = d != dropped;
        dropped = d;
    }
    /* Roughly 30 %: a sanity bound, far from any plausible outcome. */
    assert_true(dropped > 25 && dropped < 128);
    if (check_rx) {
        rx_until_also(rx, f, &rxlog, 256 - dropped);
        for (size_t k = 0; k < rxlog.n; k++)
            assert_false(pattern[rxlog.data[k][1]]);
    }
    f->ops->close(f);
    rx->ops->close(rx);
}

static void test_same_seed_same_pattern(void **state)
{
    (void)state;
    bool a[256], b[256], c[256], d[256];

    drop_pattern(42, 0, a, true);
    drop_pattern(42, 0, b, false);
    drop_pattern(43, 0, c, false);
    drop_pattern(42, 1, d, false);
    assert_memory_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, c, sizeof(a));
    assert_memory_not_equal(a, d, sizeof(a));
}

static void test_ctrl_loss_drops_only_control(void **state)
{
    (void)state;
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "ctrl_loss=1");
    sx_tl_iface_t *rx = open_udp();
    sx_tl_dest_t to_rx = connect_to(f, rx);

    for (unsigned i = 0; i < 100; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, i % 2 == 0), SX_OK);
    /* A data marker, sent last through the same socket, arrives last. */
    assert_int_equal(send_id(f, to_rx, 200, false), SX_OK);
    rx_until_also(rx, f, &rxlog, 51);
    for (unsigned k = 0; k < 51; k++) {
        assert_int_equal(rxlog.data[k][0], 0);
        assert_int_equal(rxlog.data[k][1], k < 50 ? 2 * k + 1 : 200);
    }
    sx_tl_fault_stats_t s = fstats(f);
    assert_int_equal(s.dropped, 50);
    assert_int_equal(s.ctrl_dropped, 50);
    f->ops->close(f);
    rx->ops->close(rx);
}

static void test_windows(void **state)
{
    (void)state;
    sx_tl_iface_t *rx = open_udp();

    /* A window covering the whole test drops everything in it. */
    sx_tl_iface_t *f = open_fault(&sx_tl_udp_ops, NULL, 0, "blackhole=0+3600000");
    sx_tl_dest_t to_rx = connect_to(f, rx);
    for (unsigned i = 0; i < 10; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, i % 2 == 0), SX_OK);
    assert_int_equal(fstats(f).dropped, 10);
    assert_int_equal(fstats(f).ctrl_dropped, 5);
    f->ops->close(f);

    /* One an hour away drops nothing. */
    f = open_fault(&sx_tl_udp_ops, NULL, 0, "blackhole=3600000+1000");
    to_rx = connect_to(f, rx);
    for (unsigned i = 0; i < 10; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
    rx_until_also(rx, f, &rxlog, 10);
    assert_int_equal(fstats(f).dropped, 0);
    f->ops->close(f);

    /* The windows count from the interface's first datagram, not from its
     * open: 100 ms after the open, the first datagram of a window that
     * starts at 50 ms passes, and one 50 ms after it is dropped ... */
    rx_log_free(&rxlog);
    f = open_fault(&sx_tl_udp_ops, NULL, 0, "blackhole=50+3600000");
    to_rx = connect_to(f, rx);
    pass_ms(sx_time_ns(), 100);
    assert_int_equal(send_id(f, to_rx, 1, false), SX_OK);
    uint64_t first = sx_time_ns();
    assert_int_equal(fstats(f).dropped, 0);
    rx_until_also(rx, f, &rxlog, 1);
    pass_ms(first, 50);
    assert_int_equal(send_id(f, to_rx, 2, false), SX_OK);
    assert_int_equal(fstats(f).dropped, 1);
    f->ops->close(f);

    /* ... and a datagram received starts them too: one sent 50 ms after
     * the first receipt is dropped, though it is the first sent. */
    rx_log_free(&rxlog);
    f = open_fault(&sx_tl_udp_ops, NULL, 0, "blackhole=50+3600000");
    pass_ms(sx_time_ns(), 100);
    assert_int_equal(send_id(rx, connect_to(rx, f), 3, false), SX_OK);
    rx_until_also(f, rx, &rxlog, 1);
    pass_ms(sx_time_ns(), 50);
    assert_int_equal(send_id(f, connect_to(f, rx), 4, false), SX_OK);
    assert_int_equal(fstats(f).dropped, 1);
    f->ops->close(f);

    /* A control blackout drops control datagrams only. */
    rx_log_free(&rxlog);
    f = open_fault(&sx_tl_udp_ops, NULL, 0, "ctrl_blackout=0+3600000");
    to_rx = connect_to(f, rx);
    for (unsigned i = 0; i < 10; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, i % 2 == 0), SX_OK);
    rx_until_also(rx, f, &rxlog, 5);
    for (unsigned k = 0; k < 5; k++)
        assert_int_equal(rxlog.data[k][1], 2 * k + 1);
    assert_int_equal(fstats(f).ctrl_dropped, 5);
    f->ops->close(f);

    /* A path MTU that shrinks after 4 datagrams: those pass, then what is
     * longer than it (2 bytes > 1) is dropped, and only that. */
    rx_log_free(&rxlog);
    f = open_fault(&sx_tl_udp_ops, NULL, 0, "path_mtu=1,path_mtu_after=4");
    to_rx = connect_to(f, rx);
    for (unsigned i = 0; i < 10; i++)
        assert_int_equal(send_id(f, to_rx, (uint8_t)i, false), SX_OK);
    assert_int_equal(send_one(f, to_rx, (const uint8_t *)"x", 1), SX_OK);
    rx_until_also(rx, f, &rxlog, 5);
    for (unsigned k = 0; k < 4; k++)
        assert_int_equal(rxlog.data[k][1], k);
    assert_int_equal(rxlog.len[4], 1);
    assert_int_equal(fstats(f).dropped, 6);
    f->ops->close(f);
    rx->ops->close(rx);
}

static void test_over_self(void **state)
{
    (void)state;
    void *dom = NULL;
    assert_int_equal(sx_tl_self_domain_create(2, &dom), SX_OK);
    sx_tl_iface_t *f = open_fault(&sx_tl_self_ops, dom, 0, "dup=1,reorder=1,delay_us=1");
    sx_tl_config_t cfg = {.shard = 1, .self_domain = dom};
    sx_tl_iface_t *rx = NULL;
    assert_int_equal(sx_tl_self_ops.open(&cfg, &rx), SX_OK);
    sx_tl_dest_t to_rx = connect_to(f, rx);
    static const uint8_t expect[] = {1, 1, 0, 0};

    assert_int_equal(f->caps.mtu, 65000);
    assert_int_equal(send_id(f, to_rx, 0, false), SX_OK);
    assert_int_equal(send_id(f, to_rx, 1, false), SX_OK);
    rx_until_also(rx, f, &rxlog, 4);
    for (unsigned k = 0; k < 4; k++)
        assert_int_equal(rxlog.data[k][1], expect[k]);
    sx_tl_fault_stats_t s = fstats(f);
    assert_int_equal(s.duplicated, 2);
    assert_int_equal(s.reordered, 1);
    assert_int_equal(s.delayed, 2);
    f->ops->close(f);
    rx->ops->close(rx);
    sx_tl_self_domain_destroy(dom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_specs_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delegation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loss_one_drops_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dup_one_duplicates_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_flips_one_bit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reorder_one_swaps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reorder_us_holds_for_its_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed_dest_drops_what_it_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_seed_same_pattern, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ctrl_loss_drops_only_control, setup, teardown),
        cmocka_unit_test_setup_teardown(test_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_over_self, setup, teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
