/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The sink transport (src/transports/sink.c), which sx_bench's
 * injection-only variant measures the engine against: every send through
 * it completes exactly once and successfully, small and chunked ones
 * alike, without a network; the interface refuses addresses that are not
 * its own; retransmissions of acknowledged packets draw no second ACK.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "am_util.h"
#include "test_filter.h"
#include "shard/wire.h"
#include "transports/transport.h"

static const sx_config_kv_t sink_kv[] = {{.name = "TRANSPORTS", .value = "sink"},
                                         {.name = "CPC", .value = "implicit"}};

typedef struct counts {
    uint64_t done, errors;
} counts_t;

static void on_done(void *arg, int status)
{
    counts_t *c = arg;
    c->done++;
    if (status != SX_OK)
        c->errors++;
}

static bool progress_until(sx_engine_h e, const uint64_t *counter, uint64_t target)
{
    uint64_t deadline = sx_time_ns() + AM_TEST_LIMIT_NS;
    while (*counter < target) {
        if (sx_progress(e) < 0 || sx_time_ns() > deadline)
            return false;
    }
    return true;
}

/* Sends of 0 B to 1 MiB complete, each once, all successfully. */
static void test_sends_complete(void **state)
{
    (void)state;
    sx_engine_h e = am_engine(sink_kv, 2), ghost = am_engine(sink_kv, 2);
    sx_peer_h peer = am_connect(e, ghost, 1);
    static const size_t sizes[] = {0, 8, 1000, 65536, 1u << 20};
    uint8_t *buf = calloc(1, 1u << 20);
    counts_t c = {0};
    uint64_t sent = 0;

    assert_non_null(buf);
    assert_int_equal(sx_thread_bind(e, 0), SX_OK);
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            struct iovec iov = {buf, sizes[i]};
            assert_int_equal(
                sx_send(peer, 3, sizes[i] ? &iov : NULL, sizes[i] ? 1 : 0, on_done, &c),
                SX_INPROGRESS);
            sent++;
        }
        assert_true(progress_until(e, &c.done, sent));
    }
    assert_int_equal(c.done, sent);
    assert_int_equal(c.errors, 0);
    uint64_t data = 0, rx = 0;
    assert_int_equal(sx_stats_value(e, "data_sent", &data), SX_OK);
    assert_int_equal(sx_stats_value(e, "rx_packets", &rx), SX_OK);
    assert_true(data >= sent);
    assert_true(rx > 0);
    sx_engine_destroy(e);
    sx_engine_destroy(ghost);
    free(buf);
}

/* The interface alone: foreign addresses refused, one ACK per new packet,
 * none for a retransmission or a non-data datagram. */
static void test_interface(void **state)
{
    (void)state;
    sx_tl_config_t cfg = {.shard = 0, .nshards = 1, .reflect = sx_wire_reflect_ack};
    sx_tl_iface_t *iface = NULL;
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    sx_tl_dest_t dest;

    assert_int_equal(sx_tl_sink_ops.open(&cfg, &iface), SX_OK);
    assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
    assert_int_equal(iface->ops->addr_insert(iface, addr, len, &dest), SX_OK);
    uint8_t udp_like[8] = {127, 0, 0, 1, 0x9c, 0x40, 0, 0};
    sx_tl_dest_t bad;
    assert_int_equal(iface->ops->addr_insert(iface, udp_like, sizeof(udp_like), &bad),
                     SX_ERR_INVALID_PARAM);
    assert_int_equal(iface->ops->addr_insert(iface, addr, len - 1, &bad), SX_ERR_INVALID_PARAM);

    uint8_t pkt[SX_WIRE_HDR_LEN];
    sx_tl_event_t ev[4];
    unsigned posted = 0;
    for (uint32_t seq = 5; seq < 8; seq++) {
        sx_wire_hdr_t h = {.type = SX_PKT_DATA,
                           .src_shard = 0,
                           .dst_shard = 1,
                           .src_epoch = 11,
                           .dst_epoch = 22,
                           .seq = seq};
        sx_wire_write_hdr(pkt, &h, NULL);
        sx_tl_tx_t tx = {.dest = dest, .iov = {{pkt, sizeof(pkt)}}, .iovcnt = 1};
        assert_int_equal(iface->ops->post_send(iface, &tx, 1, &posted), SX_OK);
        assert_int_equal(posted, 1);
    }
    /* Three packets, one cumulative ACK for the newest. */
    assert_int_equal(iface->ops->poll(iface, ev, 4), 1);
    sx_wire_hdr_t a;
    assert_int_equal(sx_wire_parse_packet(ev[0].data, ev[0].len, &a), SX_DROP_NONE);
    assert_int_equal(a.type, SX_PKT_ACK);
    assert_int_equal(a.ack, 8);
    assert_int_equal(a.src_epoch, 22);
    assert_int_equal(a.dst_epoch, 11);
    assert_int_equal(a.src_shard, 1);
    assert_int_equal(a.dst_shard, 0);
    /* A retransmission of seq 6: nothing new to acknowledge. */
    sx_wire_hdr_t old = {
        .type = SX_PKT_DATA, .dst_shard = 1, .src_epoch = 11, .dst_epoch = 22, .seq = 6};
    sx_wire_write_hdr(pkt, &old, NULL);
    sx_tl_tx_t tx = {.dest = dest, .iov = {{pkt, sizeof(pkt)}}, .iovcnt = 1};
    assert_int_equal(iface->ops->post_send(iface, &tx, 1, &posted), SX_OK);
    assert_int_equal(iface->ops->poll(iface, ev, 4), 0);
    /* A corrupt header, or an ACK, is swallowed without an answer. */
    old.seq = 9;
    sx_wire_write_hdr(pkt, &old, NULL);
    pkt[3] ^= 0x40;
    assert_int_equal(iface->ops->post_send(iface, &tx, 1, &posted), SX_OK);
    assert_int_equal(iface->ops->poll(iface, ev, 4), 0);
    old.type = SX_PKT_ACK;
    sx_wire_write_hdr(pkt, &old, NULL);
    assert_int_equal(iface->ops->post_send(iface, &tx, 1, &posted), SX_OK);
    assert_int_equal(iface->ops->poll(iface, ev, 4), 0);
    /* A destination that was never inserted is an error. */
    tx.dest = dest + 7;
    assert_int_equal(iface->ops->post_send(iface, &tx, 1, &posted), SX_ERR_INVALID_PARAM);
    assert_int_equal(posted, 0);
    iface->ops->close(iface);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sends_complete),
        cmocka_unit_test(test_interface),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
