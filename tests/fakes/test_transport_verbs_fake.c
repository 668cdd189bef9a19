/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The verbs transport over fake_verbs.c, a fake libibverbs in this
 * program, since the machines it is developed on have no RDMA device:
 * discovery and SX_NET_DEVICES, InfiniBand and RoCE addresses and their
 * address handles, batches as chains, running out of send slots, devices
 * without inline sends or with small queues, the race arm closes, error
 * completions, a queue pair in error and a fatal asynchronous event, and
 * two engines talking over it. What every transport does (sizes around
 * the inline limit, inline, bounced and gathered sends, receives and their
 * reposting, destinations, the wait fd and arm) runs over the same fake in
 * test_transport_conformance_verbs_fake and _verbs_fake_roce. Every case
 * ends with the fake's verdict: no breach of the verbs contract as it
 * reads it, nothing left allocated. That is the transport against a
 * model; real devices are another matter (src/transports/README.md lists
 * what only hardware can show).
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

#include <shardx.h>

#include "am_util.h"
#include "test_filter.h"
#include "fake_verbs.h"
#include "log_capture.h"
#include "transports/transport.h"
#include "transports/verbs_addr.h"

#define TL_RX_DEADLINE_NS (30ull * 1000000000ull)
#include "tl_util.h"

#define QKEY 0x5358514bu

static int setup(void **state)
{
    (void)state;
    fake_reset();
    return 0;
}

/* The fake's verdict after a case. */
static int teardown(void **state)
{
    char why[256];

    (void)state;
    (void)capture_abandon(); /* one that a failed assertion left running */
    if (*fake_verdict(why, sizeof(why)) != '\0')
        fail_msg("%s", why);
    return 0;
}

static sx_tl_iface_t *open_on(const char *device)
{
    sx_tl_config_t cfg = {.nshards = 1, .device = device};
    sx_tl_iface_t *iface = NULL;

    assert_int_equal(sx_tl_verbs_ops.open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    return iface;
}

static size_t addr_of(sx_tl_iface_t *iface, uint8_t *buf)
{
    size_t len = SX_TL_ADDR_MAX;
    assert_int_equal(iface->ops->local_addr(iface, buf, &len), SX_OK);
    return len;
}

/* Polls @p rx into @p log until a poll finds nothing. */
static void drain(sx_tl_iface_t *rx, rx_log_t *log)
{
    size_t before;
    do {
        before = log->n;
        rx_once(rx, log);
    } while (log->n > before);
}

/* ------------------------------------------------------------------ */

static void test_discovery(void **state)
{
    (void)state;
    sx_tl_config_t cfg = {.nshards = 1};
    sx_tl_query_t q;
    char names[SX_TL_DEVICES][SX_TL_DEVICE_MAX];

    fake.no_kernel = true;
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 1, &q), SX_ERR_NO_DEVICE);
    assert_non_null(strstr(q.detail, "no RDMA device found (ibv_get_device_list listed none"));
    assert_non_null(strstr(q.detail, "ib_uverbs"));
    fake.no_kernel = false;
    fake.ndevs = 0;
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 1, &q), SX_ERR_NO_DEVICE);
    assert_string_equal(q.detail, "no RDMA device found (ibv_get_device_list listed none)");
    assert_int_equal(sx_tl_verbs_ops.devices(&cfg, names, SX_TL_DEVICES), 0);

    fake_reset();
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 0, &q), SX_OK);
    assert_int_equal(q.exclusivity, SX_TL_EXCL_HW);
    assert_string_equal(q.detail, "mlx5_0 port 1 InfiniBand mtu 4096");
    (void)fake_add_roce("rocep1s0", 1);
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 0, &q), SX_OK);
    assert_non_null(strstr(q.detail, "rocep1s0 port 1 Ethernet (RoCE) mtu 1024"));
    assert_int_equal(sx_tl_verbs_ops.devices(&cfg, names, SX_TL_DEVICES), 2);
    assert_string_equal(names[0], "mlx5_0");
    assert_string_equal(names[1], "rocep1s0");
    assert_int_equal(sx_tl_verbs_ops.devices(&cfg, names, 1), 1);

    /* SX_NET_DEVICES: only what it names, exactly. */
    cfg.net_devices = "eth0,rocep1s0";
    assert_int_equal(sx_tl_verbs_ops.devices(&cfg, names, SX_TL_DEVICES), 1);
    assert_string_equal(names[0], "rocep1s0");
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 1, &q), SX_OK);
    assert_null(strstr(q.detail, "mlx5_0"));
    cfg.net_devices = "mlx5,rocep1s";
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 1, &q), SX_ERR_NO_DEVICE);
    assert_string_equal(q.detail, "SX_NET_DEVICES='mlx5,rocep1s' names none of the RDMA devices "
                                  "found: mlx5_0, rocep1s0");
    assert_int_equal(sx_tl_verbs_ops.devices(&cfg, names, SX_TL_DEVICES), 0);

    /* Ports: the first ACTIVE one; none says which are down. */
    cfg.net_devices = "mlx5_0";
    fake.dev[0].port[0].state = IBV_PORT_DOWN;
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 1, &q), SX_ERR_NO_DEVICE);
    assert_string_equal(q.detail, "no RDMA device has an ACTIVE port: mlx5_0 (port 1 PORT_DOWN)");
    fake.dev[0].nports = 2;
    fake.dev[0].port[1] = fake.dev[0].port[0];
    fake.dev[0].port[1].state = IBV_PORT_ACTIVE;
    fake.dev[0].port[1].lid = 0x22;
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 1, &q), SX_OK);
    assert_string_equal(q.detail, "mlx5_0 port 2 InfiniBand mtu 4096");
    sx_tl_iface_t *a = open_on(NULL);
    uint8_t addr[SX_TL_ADDR_MAX];
    sx_verbs_addr_t va;
    assert_int_equal(sx_verbs_addr_decode(addr, addr_of(a, addr), &va), SX_OK);
    assert_int_equal(va.port, 2);
    assert_int_equal(va.lid, 0x22);
    a->ops->close(a);

    /* A device asked for by name: one that does not exist, or is not
     * allowed, fails the open with a line saying so. */
    sx_tl_config_t named = {.nshards = 1, .device = "mlx5_7"};
    sx_tl_iface_t *iface = NULL;
    capture_start();
    assert_int_equal(sx_tl_verbs_ops.open(&named, &iface), SX_ERR_NO_DEVICE);
    named.device = "rocep1s0";
    named.net_devices = "mlx5_0";
    assert_int_equal(sx_tl_verbs_ops.open(&named, &iface), SX_ERR_NO_DEVICE);
    char *log = capture_stop();
    assert_null(iface);
    assert_contains(log,
                    "device mlx5_7: no such RDMA device (RDMA devices here: mlx5_0, rocep1s0)");
    assert_contains(log, "device rocep1s0: not among SX_NET_DEVICES");
    free(log);
}

static void test_ib_traffic(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_on(NULL), *b = open_on("mlx5_0"), *c = open_on(NULL);
    uint8_t addr[SX_TL_ADDR_MAX];
    sx_verbs_addr_t va;
    char text[128];

    /* What the interface says of itself. */
    assert_int_equal(a->caps.mtu, 4096);
    assert_int_equal(a->caps.inline_limit, SX_VERBS_INLINE_WANT);
    assert_int_equal(a->caps.tx_credits, SX_VERBS_SQ_MAX);
    assert_int_equal(a->caps.rx_buffer, (size_t)((4u << 20) / 4136) * 4096);
    size_t len = addr_of(b, addr);
    assert_int_equal(len, SX_VERBS_ADDR_LEN);
    assert_int_equal(sx_verbs_addr_decode(addr, len, &va), SX_OK);
    assert_int_equal(va.lid, 0x11);
    assert_int_equal(va.qkey, QKEY);
    assert_int_equal(va.port, 1);
    assert_int_equal(va.flags, 0);
    assert_true(va.qpn > 1);
    a->ops->addr_str(a, addr, len, text, sizeof(text));
    assert_non_null(strstr(text, "lid 0x11"));

    /* Addresses this port cannot use. */
    sx_verbs_addr_t roce = va, other = va;
    roce.lid = 0;
    roce.flags = SX_VERBS_ADDR_GLOBAL;
    uint8_t bad[SX_VERBS_ADDR_LEN];
    size_t blen;
    assert_int_equal(sx_verbs_addr_encode(&roce, bad, sizeof(bad), &blen), SX_OK);
    assert_int_equal(a->ops->addr_check(a, bad, blen), SX_ERR_PEER_UNREACHABLE);
    other.qkey = 0x80000001u;
    assert_int_equal(sx_verbs_addr_encode(&other, bad, sizeof(bad), &blen), SX_OK);
    assert_int_equal(a->ops->addr_check(a, bad, blen), SX_ERR_PEER_UNREACHABLE);
    sx_tl_dest_t dest = 7;
    assert_int_equal(a->ops->addr_insert(a, bad, blen, &dest), SX_ERR_PEER_UNREACHABLE);
    assert_int_equal(dest, 7);
    assert_int_equal(fake.ahs_created, 0);

    /* Destinations on one remote port share an address handle. */
    sx_tl_dest_t ab = connect_to(a, b), ac = connect_to(a, c), ba = connect_to(b, a);
    assert_int_equal(fake.ahs_created, 2); /* a's and b's: one per interface */
    assert_int_equal(fake.last_ah.dlid, 0x11);
    assert_int_equal(fake.last_ah.is_global, 0);
    assert_int_equal(fake.last_ah.port_num, 1);

    /* Each destination delivers, both ways (every size and gather:
     * test_transport_conformance_verbs_fake). */
    round_trip(a, ab, b, 300, 1);
    round_trip(a, ac, c, 300, 2);
    round_trip(b, ba, a, 300, 3);

    /* A batch is one chain per 32 datagrams: one doorbell each. */
    enum { BATCH = 100 };
    static sx_tl_tx_t tx[BATCH];
    static uint8_t payload[BATCH][64];
    for (unsigned i = 0; i < BATCH; i++) {
        fill(payload[i], sizeof(payload[i]), i);
        tx[i] = (sx_tl_tx_t){.dest = ab, .iovcnt = 1};
        tx[i].iov[0] = (struct iovec){.iov_base = payload[i], .iov_len = sizeof(payload[i])};
    }
    unsigned calls = fake.post_send_calls, posted = 0;
    assert_int_equal(a->ops->post_send(a, tx, BATCH, &posted), SX_OK);
    assert_int_equal(posted, BATCH);
    assert_int_equal(fake.post_send_calls - calls, (BATCH + 31) / 32);
    rx_log_t log = {0};
    rx_until(b, &log, BATCH);
    for (unsigned i = 0; i < BATCH; i++)
        assert_memory_equal(log.data[i], payload[i], sizeof(payload[i]));
    rx_log_free(&log);
    /* A bad datagram in a batch: those before it go as one chain. */
    tx[5].dest = 1234;
    calls = fake.post_send_calls;
    assert_int_equal(a->ops->post_send(a, tx, BATCH, &posted), SX_ERR_INVALID_PARAM);
    assert_int_equal(posted, 5);
    assert_int_equal(fake.post_send_calls - calls, 1);
    rx_until(b, &log, 5);
    rx_log_free(&log);
    tx[5].dest = ab;

    /* Out of send slots while completions wait: SX_ERR_AGAIN, then the
     * rest once they come. */
    fake.defer_sends = true;
    unsigned total = 0;
    int rc = SX_OK;
    while (rc == SX_OK && total < 2 * SX_VERBS_SQ_MAX) {
        rc = a->ops->post_send(a, tx, BATCH, &posted);
        total += posted;
        drain(b, &log); /* keep b's buffers coming back */
    }
    assert_int_equal(rc, SX_ERR_AGAIN);
    assert_int_equal(total, SX_VERBS_SQ_MAX);
    assert_true(a->stats.tx_again >= 1);
    assert_int_equal(a->ops->post_send(a, tx, 1, &posted), SX_ERR_AGAIN);
    assert_int_equal(posted, 0);
    fake.defer_sends = false;
    fake_complete_sends();
    assert_int_equal(a->ops->post_send(a, tx, BATCH, &posted), SX_OK);
    drain(b, &log);
    assert_int_equal(log.n, SX_VERBS_SQ_MAX + BATCH);
    rx_log_free(&log);

    /* A removed destination's handle stays cached, and a new insert of the
     * same port reuses it. */
    a->ops->addr_remove(a, ab);
    unsigned ahs = fake.ahs_created;
    sx_tl_dest_t again = connect_to(a, b);
    assert_int_equal(fake.ahs_created, ahs);
    round_trip(a, again, b, 300, 9);
    assert_int_equal(fake.dropped_no_recv + fake.dropped_route, 0);

    a->ops->close(a);
    b->ops->close(b);
    c->ops->close(c);
}

static void test_roce(void **state)
{
    (void)state;
    fake.dev[0].port[0].state = IBV_PORT_DOWN; /* mlx5_0 is not a choice */
    (void)fake_add_roce("rocep1s0", 1);
    (void)fake_add_roce("rocep2s0", 2);
    sx_tl_iface_t *a = open_on(NULL), *b = open_on("rocep2s0");
    uint8_t addr[SX_TL_ADDR_MAX];
    sx_verbs_addr_t va;
    static const uint8_t v4_1[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};

    /* The first usable device, with a global address on its IPv4-mapped
     * RoCE v2 GID; mtu 1024, inline as the device allows. */
    assert_int_equal(sx_verbs_addr_decode(addr, addr_of(a, addr), &va), SX_OK);
    assert_int_equal(va.flags, SX_VERBS_ADDR_GLOBAL);
    assert_int_equal(va.lid, 0);
    assert_memory_equal(va.gid, v4_1, 16);
    assert_int_equal(a->caps.mtu, 1024);
    /* 256 inline bytes asked for, refused; half of it granted. */
    assert_int_equal(a->caps.inline_limit, 128);
    char text[128];
    a->ops->addr_str(a, addr, SX_VERBS_ADDR_LEN, text, sizeof(text));
    assert_non_null(strstr(text, "gid ::ffff:10.0.0.1"));

    /* Global address handles; the last one made is b's, to a (sizes and
     * gathers over them: test_transport_conformance_verbs_fake_roce). */
    sx_tl_dest_t ab = connect_to(a, b), ba = connect_to(b, a);
    assert_int_equal(fake.last_ah.is_global, 1);
    assert_int_equal(fake.last_ah.grh.sgid_index, 4);
    assert_int_equal(fake.last_ah.grh.hop_limit, 64);
    assert_memory_equal(fake.last_ah.grh.dgid.raw, v4_1, 16);
    round_trip(a, ab, b, 1024, 1);
    round_trip(b, ba, a, 1024, 2);

    /* An InfiniBand address is out of reach from RoCE. */
    sx_verbs_addr_t ib = {.lid = 5, .qpn = 0x99, .qkey = QKEY, .port = 1};
    uint8_t bad[SX_VERBS_ADDR_LEN];
    size_t blen;
    assert_int_equal(sx_verbs_addr_encode(&ib, bad, sizeof(bad), &blen), SX_OK);
    assert_int_equal(a->ops->addr_check(a, bad, blen), SX_ERR_PEER_UNREACHABLE);
    a->ops->close(a);
    b->ops->close(b);

    /* Without the GID table ioctl: the first valid GID, types unknown. */
    fake.gid_ex_unsupported = true;
    a = open_on("rocep1s0");
    assert_int_equal(sx_verbs_addr_decode(addr, addr_of(a, addr), &va), SX_OK);
    assert_int_equal(va.gid[0], 0xfe);
    assert_int_equal(va.gid[15], 1);
    a->ops->close(a);
    fake.gid_ex_unsupported = false;

    /* No GID at all (no IP address on the netdev): refused, saying so. */
    fake.dev[1].port[0].gid_len = 0;
    sx_tl_config_t cfg = {.nshards = 1, .device = "rocep1s0"};
    sx_tl_iface_t *none = NULL;
    capture_start();
    assert_int_equal(sx_tl_verbs_ops.open(&cfg, &none), SX_ERR_NO_DEVICE);
    char *text_log = capture_stop();
    assert_null(none);
    assert_contains(text_log, "has no valid GID");
    free(text_log);
}

static void test_refusals_at_open(void **state)
{
    (void)state;
    sx_tl_config_t cfg = {.nshards = 1};
    sx_tl_iface_t *iface = NULL;

    /* An InfiniBand port no subnet manager configured. */
    fake.dev[0].port[0].lid = 0;
    capture_start();
    assert_int_equal(sx_tl_verbs_ops.open(&cfg, &iface), SX_ERR_NO_DEVICE);
    char *log = capture_stop();
    assert_contains(log, "has LID 0: no subnet manager");
    free(log);
    fake.dev[0].port[0].lid = 0x11;

    /* A device too small for the minimal queues. */
    fake.dev[0].max_qp_wr = 40;
    capture_start();
    assert_int_equal(sx_tl_verbs_ops.open(&cfg, &iface), SX_ERR_NO_DEVICE);
    log = capture_stop();
    assert_contains(log, "40 work requests per queue");
    free(log);
    fake.dev[0].max_qp_wr = 32768;
    assert_null(iface);

    /* An MTU the sizing does not know. */
    fake.dev[0].port[0].mtu = (enum ibv_mtu)9;
    capture_start();
    assert_int_equal(sx_tl_verbs_ops.open(&cfg, &iface), SX_ERR_NO_DEVICE);
    log = capture_stop();
    assert_contains(log, "MTU 9");
    free(log);
    fake.dev[0].port[0].mtu = IBV_MTU_4096;

    /* A device without inline sends: asked for, refused, done without. */
    fake.dev[0].max_inline = 0;
    sx_tl_iface_t *a = open_on(NULL), *b = open_on(NULL);
    assert_int_equal(a->caps.inline_limit, 0);
    sx_tl_dest_t ab = connect_to(a, b);
    round_trip(a, ab, b, 0, 1);
    round_trip(a, ab, b, 10, 2);
    round_trip(a, ab, b, 4096, 3);
    a->ops->close(a);
    b->ops->close(b);

    /* A small device: queues as deep as it allows, and its completion
     * queues never overrun (the fake would say). */
    fake.dev[0].max_inline = 512;
    fake.dev[0].max_qp_wr = 70;
    fake.dev[0].max_cqe = 64;
    a = open_on(NULL);
    b = open_on(NULL);
    assert_int_equal(a->caps.tx_credits, 64);
    ab = connect_to(a, b);
    for (unsigned i = 0; i < 500; i++)
        round_trip(a, ab, b, 100 + i, i);
    a->ops->close(a);
    b->ops->close(b);

    /* An InfiniBand port reaches another subnet through a GRH, which needs
     * a GID of its own. */
    sx_verbs_addr_t far = {
        .lid = 5, .qpn = 0x99, .qkey = QKEY, .port = 1, .flags = SX_VERBS_ADDR_GLOBAL};
    far.gid[0] = 0xfe;
    uint8_t bytes[SX_VERBS_ADDR_LEN];
    size_t blen;
    assert_int_equal(sx_verbs_addr_encode(&far, bytes, sizeof(bytes), &blen), SX_OK);
    a = open_on(NULL);
    assert_int_equal(a->ops->addr_check(a, bytes, blen), SX_OK);
    a->ops->close(a);
    fake.dev[0].port[0].gid_len = 0;
    a = open_on(NULL);
    assert_int_equal(a->ops->addr_check(a, bytes, blen), SX_ERR_PEER_UNREACHABLE);
    a->ops->close(a);
}

/* The race arm closes: a completion that lands before the notification
 * request raises no event; arm's last poll finds it and keeps it. (The
 * wait fd and arm otherwise: test_transport_conformance_verbs_fake.) */
static void test_arm_race(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_on(NULL), *b = open_on(NULL);
    sx_tl_dest_t ab = connect_to(a, b);
    sx_tl_event_t ev[8];
    uint8_t msg[32] = "wake up";

    /* Armed, woken and the datagram taken: the next arm asks again. */
    assert_int_equal(b->ops->arm(b), SX_OK);
    assert_int_equal(send_one(a, ab, msg, sizeof(msg)), SX_OK);
    assert_true(tl_wait_readable(b, 0));
    assert_int_equal(b->ops->poll(b, ev, 8), 1);

    fake.hold = true;
    assert_int_equal(send_one(a, ab, msg, 5), SX_OK);
    assert_int_equal(b->ops->arm(b), SX_ERR_AGAIN);
    assert_int_equal(b->ops->arm(b), SX_ERR_AGAIN); /* still kept */
    assert_int_equal(b->ops->poll(b, ev, 8), 1);
    assert_int_equal(ev[0].len, 5);
    /* The same race met by an idle poll: handed up by that poll. */
    assert_int_equal(send_one(a, ab, msg, 6), SX_OK);
    assert_int_equal(b->ops->poll(b, ev, 8), 1);
    assert_int_equal(ev[0].len, 6);
    fake.hold = false;
    assert_int_equal(b->ops->poll(b, ev, 8), 0);
    assert_int_equal(b->ops->arm(b), SX_OK);
    a->ops->close(a);
    b->ops->close(b);
}

static void test_errors(void **state)
{
    (void)state;
    sx_tl_iface_t *a = open_on(NULL), *b = open_on(NULL);
    sx_tl_dest_t ab = connect_to(a, b);
    sx_tl_event_t ev[8];
    uint8_t msg[64] = {1, 2, 3};

    /* Failed receives are counted and their buffers come back: many of
     * them in a row never starve the queue. */
    for (unsigned i = 0; i < 3000; i++) {
        fake.next_recv_status = i % 3 == 0 ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR;
        assert_int_equal(send_one(a, ab, msg, sizeof(msg)), SX_OK);
        assert_int_equal(b->ops->poll(b, ev, 8), 0);
    }
    assert_int_equal(b->stats.rx_truncated, 1000);
    round_trip(a, ab, b, 64, 1);
    assert_int_equal(fake.dropped_no_recv, 0);

    /* A failed send gives its slot back and says so, rate-limited. */
    capture_start();
    for (unsigned i = 0; i < 3000; i++) {
        fake.next_send_status = IBV_WC_GENERAL_ERR;
        assert_int_equal(send_one(a, ab, msg, sizeof(msg)), SX_OK);
        (void)a->ops->poll(a, ev, 8);
        (void)b->ops->poll(b, ev, 8);
    }
    char *log = capture_stop();
    assert_contains(log, "a send failed: some error");
    assert_true(strlen(log) < 4000); /* not 3000 lines */
    free(log);
    round_trip(a, ab, b, 64, 2);

    /* An address handle the device refuses: the insert fails, cleanly. */
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = addr_of(a, addr);
    sx_tl_dest_t d = 77;
    fake.fail_ah = true;
    capture_start();
    assert_int_equal(b->ops->addr_insert(b, addr, len, &d), SX_ERR_PEER_UNREACHABLE);
    log = capture_stop();
    assert_contains(log, "ibv_create_ah for lid 0x11");
    free(log);
    assert_int_equal(d, 77);
    fake.fail_ah = false;
    assert_int_equal(b->ops->addr_insert(b, addr, len, &d), SX_OK);

    /* Port events are news, not failures. */
    capture_start();
    fake_async_all(IBV_EVENT_PORT_ERR);
    for (unsigned i = 0; i < 2048; i++)
        assert_true(b->ops->poll(b, ev, 8) >= 0);
    log = capture_stop();
    assert_contains(log, "mlx5_0 port 1 went down");
    free(log);

    /* The queue pairs fail: reported once, then sends are refused. */
    fake_qp_error_all();
    capture_start();
    assert_int_equal(b->ops->poll(b, ev, 8), SX_ERR_IO);
    assert_int_equal(b->ops->poll(b, ev, 8), 0);
    log = capture_stop();
    assert_contains(log, "the queue pair is in the error state");
    free(log);
    assert_int_equal(b->ops->arm(b), SX_OK);
    unsigned posted = 9;
    sx_tl_tx_t t = {.dest = d, .iovcnt = 1};
    t.iov[0] = (struct iovec){.iov_base = msg, .iov_len = 1};
    assert_int_equal(b->ops->post_send(b, &t, 1, &posted), SX_ERR_IO);
    assert_int_equal(posted, 0);
    /* a learns it from its own sends' flushed completions. */
    capture_start();
    assert_int_equal(send_one(a, ab, msg, 1), SX_OK);
    int rc = a->ops->poll(a, ev, 8);
    log = capture_stop();
    assert_int_equal(rc, SX_ERR_IO);
    assert_contains(log, "sends are flushed");
    free(log);
    a->ops->close(a);
    b->ops->close(b);

    /* A fatal asynchronous event, read within 1024 polls. */
    a = open_on(NULL);
    fake_async_all(IBV_EVENT_QP_FATAL);
    capture_start();
    rc = 0;
    for (unsigned i = 0; i < 1100 && rc == 0; i++)
        rc = a->ops->poll(a, ev, 8);
    log = capture_stop();
    assert_int_equal(rc, SX_ERR_IO);
    assert_contains(log, "asynchronous event: local work queue catastrophic error");
    free(log);
    a->ops->close(a);
}

/* Two engines over the fake device: handshake, messages small and
 * chunked, both ways. */
static uint64_t received;

static void on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)arg, (void)peer_id, (void)tag, (void)data, (void)len;
    received++;
}

static void on_done(void *arg, int status)
{
    if (status == SX_OK)
        (*(uint64_t *)arg)++;
}

static void test_engines(void **state)
{
    (void)state;
    sx_config_kv_t kv[] = {{"SHARDS", "2"}, {"TRANSPORTS", "verbs"}};
    sx_engine_h e1 = am_engine(kv, 2), e2 = am_engine(kv, 2);
    sx_transport_info_t t;
    bool verbs = false;

    for (unsigned i = 0; sx_engine_transport_info(e1, i, &t) == SX_OK; i++) {
        if (t.selected && t.network) {
            assert_string_equal(t.name, "verbs");
            assert_int_equal(t.mtu, 4096);
            verbs = true;
        }
    }
    assert_true(verbs);
    assert_int_equal(sx_thread_bind(e1, 0), SX_OK);
    assert_int_equal(sx_thread_bind(e2, 1), SX_OK);
    sx_peer_h to2 = am_connect(e1, e2, 2), to1 = am_connect(e2, e1, 1);
    assert_int_equal(sx_am_register(e1, 9, on_am, NULL), SX_OK);
    assert_int_equal(sx_am_register(e2, 9, on_am, NULL), SX_OK);
    static uint8_t big[200000];
    uint64_t done = 0;
    received = 0;
    for (unsigned i = 0; i < 20; i++) {
        struct iovec iov = {big, (size_t)i * 10000 + 1};
        assert_int_equal(sx_send(to2, 9, &iov, 1, on_done, &done), SX_INPROGRESS);
        assert_int_equal(sx_send(to1, 9, &iov, 1, on_done, &done), SX_INPROGRESS);
    }
    assert_true(am_progress_until(e1, e2, &received, 40));
    assert_true(am_progress_until(e1, e2, &done, 40));
    sx_engine_destroy(e1);
    sx_engine_destroy(e2);
    assert_int_equal(fake.dropped_route, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_discovery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ib_traffic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_at_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arm_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engines, setup, teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
