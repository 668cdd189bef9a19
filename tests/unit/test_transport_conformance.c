/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The transport conformance suite: what every transport must do through
 * the ops table of src/transports/transport.h, for the transport named on
 * the command line. ctest runs it once per transport
 * (test_transport_conformance_NAME):
 *
 *   udp           kernel sockets on loopback
 *   ofi           libfabric's udp provider on loopback (with libfabric)
 *   self          the shards of one domain
 *   fault         the fault decorator over udp, with no fault configured
 *   fault_seeded  the same with every probability 0 and a seed given
 *   verbs_fake, verbs_fake_roce
 *                 the verbs transport over the fake libibverbs, on one
 *                 InfiniBand device, and on two RoCE devices: this source
 *                 built a second time with tests/fakes/fake_verbs.c
 *                 (SX_TC_FAKE_VERBS), where every case ends with the
 *                 fake's verdict
 *
 * The cases: the registry; open, caps and the local address; an exchange
 * both ways and to oneself; every size from 0 to the mtu (around the
 * inline limit too), sent from buffers the sender reuses at once; one
 * datagram gathered from several iovecs; what is over the mtu, refused by
 * post_send or, arriving from outside, dropped and counted; batches
 * posted again from where post_send stopped, and a refused datagram inside
 * one; thousands of small datagrams through a receiver that keeps
 * reposting its buffers; garbage addresses; destinations removed and
 * reused; bad parameters; a destination whose interface closed; the wait
 * fd and arm, with no lost wake-up.
 *
 * What is particular to one transport (udp's connected sockets, ACK socket
 * and kernel drop counts; ofi's providers, query and devices; self's
 * domains, flow control and threads; the faults themselves; verbs'
 * devices, address handles, doorbells and completion races) stays in its
 * own test_transport_*.c.
 *
 * Nothing sleeps to synchronize: receivers poll until what they wait for
 * arrives, and generous deadlines only turn a hang into a failure.
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

#include "build_config.h"
#include "test_filter.h"
#include "common/time.h"
#include "log_capture.h"
#include "transports/transport.h"
#ifdef SX_TC_FAKE_VERBS
#include "fake_verbs.h"
#endif

#define DEADLINE_NS       (60ull * 1000000000ull)
#define TL_RX_DEADLINE_NS DEADLINE_NS
#include "tl_util.h"

#define WAIT_MS    60000 /* poll(2) on a wait fd: a bound only, never a sleep */
#define MAX_IFACES 16    /* interfaces one case opens, at most */

/* ------------------------------------------------------------------ */
/* The transports                                                       */

typedef struct tc_transport {
    const char *name; /* as on the command line */
    const sx_tl_ops_t *ops;
    /* What config and setup read: fault's specification (NULL: none);
     * for verbs, "roce" for the RoCE devices. */
    const char *variant;
    /* Fills in what interface number @p i of a case needs beyond shard. */
    void (*config)(unsigned i, sx_tl_config_t *cfg);
    /* Before and after every case; may be NULL. */
    void (*setup)(void);
    void (*teardown)(void);
    /* Checks an interface just before the case closes it; may be NULL. */
    void (*check)(sx_tl_iface_t *iface);
    /* Where a plain UDP socket reaches @p iface, for datagrams the
     * transport itself never sends (over its mtu); NULL: no such way. */
    void (*sockaddr)(sx_tl_iface_t *iface, struct sockaddr_in *sa);
} tc_transport_t;

static const tc_transport_t *tc;
static sx_tl_iface_t *opened[MAX_IFACES];
static unsigned nopened;

/* udp's card address: kind 4 (a reserved byte, port little endian, IPv4
 * in network order) or, bound to every interface as by default, kind 5
 * or 6 (port at the same place; this host reaches it on loopback). The
 * fault decorator hands out its inner one's. */
static void udp_sockaddr(sx_tl_iface_t *iface, struct sockaddr_in *sa)
{
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);

    assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
    assert_true((len >= 8 && addr[0] == 4) || (len >= 14 && (addr[0] == 5 || addr[0] == 6)));
    *sa = (struct sockaddr_in){.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)(addr[2] | addr[3] << 8))};
    if (addr[0] == 4)
        memcpy(&sa->sin_addr, addr + 4, 4);
    else
        sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static void udp_config(unsigned i, sx_tl_config_t *cfg)
{
    (void)i;
    /* Room for several datagrams of 65000 bytes at once; GSO and GRO on,
     * and the hot socket, as engines have them by default. */
    cfg->rcvbuf = 4 << 20;
    cfg->udp_gso = true;
    cfg->udp_hot = true;
}

static void fault_config(unsigned i, sx_tl_config_t *cfg)
{
    udp_config(i, cfg);
    cfg->inner_ops = &sx_tl_udp_ops;
    cfg->fault = tc->variant;
}

/* No fault was configured or none could happen: none was counted. */
static void fault_check(sx_tl_iface_t *iface)
{
    sx_tl_fault_stats_t s;

    assert_int_equal(sx_tl_fault_stats_get(iface, &s), SX_OK);
    assert_int_equal(
        s.dropped + s.ctrl_dropped + s.duplicated + s.reordered + s.delayed + s.corrupted, 0);
}

static void *self_domain;

/* Interface i takes the domain's shard i (tc_open's shard). */
static void self_config(unsigned i, sx_tl_config_t *cfg)
{
    (void)i;
    cfg->self_domain = self_domain;
}

static void self_setup(void)
{
    assert_int_equal(sx_tl_self_domain_create(MAX_IFACES, &self_domain), SX_OK);
}

static void self_teardown(void)
{
    sx_tl_self_domain_destroy(self_domain);
    self_domain = NULL;
}

#if SX_HAVE_OFI
/* The udp provider's card address: format FI_SOCKADDR_IN (2), port
 * (network order), IPv4 (network order). */
static void ofi_sockaddr(sx_tl_iface_t *iface, struct sockaddr_in *sa)
{
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);

    assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
    assert_true(len == 7 && addr[0] == 2);
    *sa = (struct sockaddr_in){.sin_family = AF_INET};
    memcpy(&sa->sin_port, addr + 1, 2);
    memcpy(&sa->sin_addr, addr + 3, 4);
}

static void ofi_config(unsigned i, sx_tl_config_t *cfg)
{
    (void)i;
    cfg->rcvbuf = 4 << 20;
    cfg->ofi_provider = "udp";
}
#endif

#ifdef SX_TC_FAKE_VERBS
/* InfiniBand: the first device with an ACTIVE port. RoCE: either of two
 * devices, reaching each other through global (GRH) address handles. */
static void verbs_config(unsigned i, sx_tl_config_t *cfg)
{
    if (tc->variant != NULL)
        cfg->device = i % 2 == 0 ? "rocep1s0" : "rocep2s0";
}

static void verbs_setup(void)
{
    fake_reset();
    if (tc->variant != NULL) {
        fake.dev[0].port[0].state = IBV_PORT_DOWN; /* the InfiniBand device is no choice */
        (void)fake_add_roce("rocep1s0", 1);
        (void)fake_add_roce("rocep2s0", 2);
    }
}

static void verbs_teardown(void)
{
    char why[256];

    if (*fake_verdict(why, sizeof(why)) != '\0')
        fail_msg("%s", why);
}
#endif

static const tc_transport_t transports[] = {
    {.name = "udp", .ops = &sx_tl_udp_ops, .config = udp_config, .sockaddr = udp_sockaddr},
    {.name = "self",
     .ops = &sx_tl_self_ops,
     .config = self_config,
     .setup = self_setup,
     .teardown = self_teardown},
    {.name = "fault",
     .ops = &sx_tl_fault_ops,
     .config = fault_config,
     .check = fault_check,
     .sockaddr = udp_sockaddr},
    {.name = "fault_seeded",
     .ops = &sx_tl_fault_ops,
     .variant = "loss=0,dup=0,reorder=0,corrupt=0,delay_us=0,seed=42",
     .config = fault_config,
     .check = fault_check,
     .sockaddr = udp_sockaddr},
#if SX_HAVE_OFI
    {.name = "ofi", .ops = &sx_tl_ofi_ops, .config = ofi_config, .sockaddr = ofi_sockaddr},
#endif
#ifdef SX_TC_FAKE_VERBS
    {.name = "verbs_fake",
     .ops = &sx_tl_verbs_ops,
     .config = verbs_config,
     .setup = verbs_setup,
     .teardown = verbs_teardown},
    {.name = "verbs_fake_roce",
     .ops = &sx_tl_verbs_ops,
     .variant = "roce",
     .config = verbs_config,
     .setup = verbs_setup,
     .teardown = verbs_teardown},
#endif
};

/* Interface number nopened of this case, recorded so that teardown closes
 * what a failed case left open. */
static sx_tl_iface_t *tc_open(void)
{
    sx_tl_config_t cfg = {.shard = nopened, .nshards = 1};
    sx_tl_iface_t *iface = NULL;

    assert_true(nopened < MAX_IFACES);
    tc->config(nopened, &cfg);
    assert_int_equal(tc->ops->open(&cfg, &iface), SX_OK);
    assert_non_null(iface);
    opened[nopened++] = iface;
    return iface;
}

static void tc_close(sx_tl_iface_t *iface)
{
    for (unsigned i = 0; i < nopened; i++) {
        if (opened[i] == iface) {
            if (tc->check != NULL)
                tc->check(iface); /* on failure, teardown closes it */
            opened[i] = NULL;
            iface->ops->close(iface);
            return;
        }
    }
    fail_msg("closing an interface this case did not open");
}

static int setup(void **state)
{
    (void)state;
    nopened = 0;
    if (tc->setup != NULL)
        tc->setup();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    (void)capture_abandon(); /* one that a failed assertion left running */
    for (unsigned i = 0; i < nopened; i++) {
        if (opened[i] != NULL)
            opened[i]->ops->close(opened[i]);
    }
    nopened = 0;
    if (tc->teardown != NULL)
        tc->teardown();
    return 0;
}

/* ------------------------------------------------------------------ */
/* Cases                                                                */

static void test_registry(void **state)
{
    (void)state;
    assert_ptr_equal(sx_tl_find(tc->ops->name), tc->ops);
    assert_null(sx_tl_find("tcp"));
    assert_null(sx_tl_find(""));
    assert_null(sx_tl_find(NULL));
}

static void test_open_caps_and_address(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();
    uint8_t addr[SX_TL_ADDR_MAX], again[SX_TL_ADDR_MAX], other[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr), len2 = sizeof(again), olen = sizeof(other);

    assert_ptr_equal(a->ops, tc->ops);
    assert_true(a->caps.mtu >= 512);
    assert_true(a->caps.inline_limit <= a->caps.mtu);
    assert_true(a->caps.tx_credits > 0);
    /* The suite reuses send buffers as soon as post_send returns. */
    assert_int_equal(a->caps.sync_send, 1);
    assert_int_equal(a->stats.tx_datagrams + a->stats.rx_datagrams, 0);
    /* The fds to sleep on: the same at every call, none shared with
     * another interface. */
    int fds[SX_TL_WAIT_FDS], fds_again[SX_TL_WAIT_FDS], fds_b[SX_TL_WAIT_FDS];
    unsigned nfds = a->ops->wait_fds(a, fds), nfds_b = b->ops->wait_fds(b, fds_b);
    assert_true(nfds >= 1 && nfds <= SX_TL_WAIT_FDS);
    assert_int_equal(a->ops->wait_fds(a, fds_again), nfds);
    assert_memory_equal(fds_again, fds, nfds * sizeof(fds[0]));
    for (unsigned i = 0; i < nfds; i++) {
        assert_true(fds[i] >= 0);
        for (unsigned k = 0; k < nfds_b; k++)
            assert_int_not_equal(fds_b[k], fds[i]);
    }

    /* The address: stable, its own per interface, refused to a buffer one
     * byte short (which keeps the length asked for) or to no buffer. */
    assert_int_equal(a->ops->local_addr(a, addr, &len), SX_OK);
    assert_true(len > 0 && len <= SX_TL_ADDR_MAX);
    assert_int_equal(a->ops->local_addr(a, again, &len2), SX_OK);
    assert_int_equal(len2, len);
    assert_memory_equal(again, addr, len);
    assert_int_equal(b->ops->local_addr(b, other, &olen), SX_OK);
    assert_false(olen == len && memcmp(other, addr, len) == 0);
    len2 = len - 1;
    assert_int_equal(a->ops->local_addr(a, again, &len2), SX_ERR_TRUNCATED);
    assert_int_equal(len2, len - 1);
    len2 = sizeof(again);
    assert_int_equal(a->ops->local_addr(a, NULL, &len2), SX_ERR_INVALID_PARAM);
    assert_int_equal(a->ops->local_addr(a, again, NULL), SX_ERR_INVALID_PARAM);
    if (a->ops->addr_check != NULL) {
        assert_int_equal(a->ops->addr_check(a, addr, len), SX_OK);
        assert_int_equal(a->ops->addr_check(a, other, olen), SX_OK);
    }

    /* Readable descriptions, cut short safely. */
    if (a->ops->addr_str != NULL) {
        char text[128], small[8 + 4];
        a->ops->addr_str(a, addr, len, text, sizeof(text));
        assert_true(strlen(text) > 0 && strlen(text) < sizeof(text));
        memset(small, '#', sizeof(small));
        a->ops->addr_str(a, addr, len, small, 8);
        assert_true(strlen(small) < 8);
        assert_memory_equal(small + 8, "####", 4);
    }
    /* A variant's name; empty where there is one variant (fault over
     * udp). */
    if (a->ops->variant != NULL) {
        char text[64], small[4 + 4];
        memset(text, '#', sizeof(text));
        a->ops->variant(a, text, sizeof(text));
        assert_true(strlen(text) < sizeof(text));
        memset(small, '#', sizeof(small));
        a->ops->variant(a, small, 4);
        assert_true(strlen(small) < 4);
        assert_memory_equal(small + 4, "####", 4);
    }
    tc_close(a);
    tc_close(b);
}

/* Both ways, to oneself, and from a third interface to the same one. */
static void test_exchange(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open(), *c = tc_open();
    sx_tl_dest_t to_b = connect_to(a, b), to_a = connect_to(b, a), to_self = connect_to(a, a);
    sx_tl_dest_t c_to_b = connect_to(c, b);

    assert_int_equal(send_one(a, to_b, "ping", 4), SX_OK);
    expect_one(b, "ping", 4);
    assert_int_equal(send_one(b, to_a, "pong", 4), SX_OK);
    expect_one(a, "pong", 4);
    assert_int_equal(send_one(a, to_self, "me", 2), SX_OK);
    expect_one(a, "me", 2);
    assert_int_equal(send_one(c, c_to_b, "third", 5), SX_OK);
    expect_one(b, "third", 5);

    assert_int_equal(a->stats.tx_datagrams, 2);
    assert_int_equal(a->stats.rx_datagrams, 2);
    assert_int_equal(b->stats.tx_datagrams, 1);
    assert_int_equal(b->stats.rx_datagrams, 2);
    tc_close(a);
    tc_close(b);
    tc_close(c);
}

static int cmp_size(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? -1 : a > b;
}

/* Every size that matters, both ways: the smallest, around the inline
 * limit, and up to the mtu; one byte more is refused. */
static void test_sizes(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();
    sx_tl_dest_t to_b = connect_to(a, b), to_a = connect_to(b, a);
    size_t mtu = a->caps.mtu, inl = a->caps.inline_limit;
    size_t sizes[] = {0,   1,       2,    255,     256,     257, inl > 0 ? inl - 1 : 0,
                      inl, inl + 1, 1000, mtu / 2, mtu - 1, mtu};
    size_t n = sizeof(sizes) / sizeof(sizes[0]), k = 0;

    qsort(sizes, n, sizeof(sizes[0]), cmp_size);
    for (size_t i = 0; i < n; i++) {
        if (sizes[i] <= mtu && (k == 0 || sizes[i] != sizes[k - 1]))
            sizes[k++] = sizes[i];
    }
    for (size_t i = 0; i < k; i++) {
        round_trip(a, to_b, b, sizes[i], (unsigned)i);
        round_trip(b, to_a, a, sizes[i], (unsigned)i + 100);
    }
    uint8_t *big = calloc(1, mtu + 1);
    assert_non_null(big);
    assert_int_equal(send_one(a, to_b, big, mtu + 1), SX_ERR_INVALID_PARAM);
    assert_int_equal(send_one(b, to_a, big, mtu + 1), SX_ERR_INVALID_PARAM);
    free(big);

    /* Counted once each; the refused ones not at all. */
    assert_int_equal(a->stats.tx_datagrams, k);
    assert_int_equal(b->stats.rx_datagrams, k);
    assert_int_equal(b->stats.tx_datagrams, k);
    assert_int_equal(a->stats.rx_datagrams, k);
    assert_int_equal(a->stats.rx_truncated + b->stats.rx_truncated, 0);
    tc_close(a);
    tc_close(b);
}

/* One datagram from @p n pieces of the given lengths, each from a buffer
 * of its own, arrives as their concatenation. */
static void gathered(sx_tl_iface_t *a, sx_tl_dest_t d, sx_tl_iface_t *b, const size_t *lens,
                     unsigned n)
{
    uint8_t *part[SX_TL_IOV_MAX];
    sx_tl_tx_t t = {.dest = d, .iovcnt = n};
    size_t total = 0;
    unsigned posted = 0;
    rx_log_t log = {0};

    for (unsigned i = 0; i < n; i++)
        total += lens[i];
    uint8_t *want = malloc(total + 1);
    assert_non_null(want);
    total = 0;
    for (unsigned i = 0; i < n; i++) {
        part[i] = malloc(lens[i] + 1);
        assert_non_null(part[i]);
        fill(part[i], lens[i], 7 * i + (unsigned)lens[i]);
        memcpy(want + total, part[i], lens[i]);
        total += lens[i];
        t.iov[i] = (struct iovec){.iov_base = part[i], .iov_len = lens[i]};
    }
    assert_int_equal(a->ops->post_send(a, &t, 1, &posted), SX_OK);
    assert_int_equal(posted, 1);
    for (unsigned i = 0; i < n; i++)
        free(part[i]);
    rx_until(b, &log, 1);
    assert_int_equal(log.len[0], total);
    if (total > 0)
        assert_memory_equal(log.data[0], want, total);
    rx_log_free(&log);
    free(want);
}

static void test_gathered_iovecs(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();
    sx_tl_dest_t to_b = connect_to(a, b), to_a = connect_to(b, a);
    size_t mtu = a->caps.mtu, k = mtu / 4 < 1000 ? mtu / 4 : 1000;

    /* Few bytes (inline where the transport inlines), many (copied or
     * bounced), up to the mtu exactly, with empty pieces among them. */
    const size_t small[] = {2, 0, 3}, inl[] = {20, 20, 0, 20}, even[] = {50, 50, 50, 50};
    const size_t bounced[] = {k, k, 0, k}, full3[] = {10, 0, mtu - 10};
    const size_t full4[] = {10, 0, 5, mtu - 15}, two[] = {8, mtu - 8};
    gathered(a, to_b, b, small, 3);
    gathered(b, to_a, a, small, 3);
    gathered(a, to_b, b, inl, 4);
    gathered(a, to_b, b, even, 4);
    gathered(a, to_b, b, bounced, 4);
    gathered(a, to_b, b, full3, 3);
    gathered(a, to_b, b, full4, 4);
    gathered(b, to_a, a, two, 2);

    /* Pieces that add up to one byte over the mtu, and more pieces than
     * allowed, are refused and not taken. */
    static uint8_t piece[10];
    uint8_t *rest = calloc(1, mtu);
    assert_non_null(rest);
    sx_tl_tx_t t = {.dest = to_b, .iovcnt = 3};
    t.iov[0] = (struct iovec){piece, 10};
    t.iov[1] = (struct iovec){piece, 0};
    t.iov[2] = (struct iovec){rest, mtu - 9};
    unsigned posted = 99;
    assert_int_equal(a->ops->post_send(a, &t, 1, &posted), SX_ERR_INVALID_PARAM);
    assert_int_equal(posted, 0);
    t.iov[2].iov_len = 1;
    t.iovcnt = SX_TL_IOV_MAX + 1;
    posted = 99;
    assert_int_equal(a->ops->post_send(a, &t, 1, &posted), SX_ERR_INVALID_PARAM);
    assert_int_equal(posted, 0);
    free(rest);
    assert_int_equal(a->stats.tx_datagrams, 6);
    tc_close(a);
    tc_close(b);
}

/* Datagrams longer than the mtu, sent from a plain socket as a peer with
 * a larger idea of the mtu would, are dropped and counted; the next one
 * is delivered whole. */
static void test_oversized_arrival_dropped(void **state)
{
    (void)state;
    if (tc->sockaddr == NULL) {
        print_message("no way to reach a %s interface but its own sends, which refuse "
                      "datagrams over the mtu\n",
                      tc->name);
        skip();
    }
    sx_tl_iface_t *b = tc_open();
    size_t mtu = b->caps.mtu;
    /* 65507: the largest UDP payload over IPv4. */
    const size_t lens[] = {mtu + 1, mtu + 100, 65507};
    static uint8_t big[65507];
    struct sockaddr_in sa;
    rx_log_t log = {0};
    uint64_t over = 0;

    tc->sockaddr(b, &sa);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        if (lens[i] > sizeof(big) || (i > 0 && lens[i] <= lens[i - 1]))
            continue;
        assert_int_equal(sendto(fd, big, lens[i], 0, (struct sockaddr *)&sa, sizeof(sa)),
                         (ssize_t)lens[i]);
        over++;
    }
    assert_int_equal(sendto(fd, "ok", 2, 0, (struct sockaddr *)&sa, sizeof(sa)), 2);
    rx_until(b, &log, 1);
    assert_int_equal(log.len[0], 2);
    assert_memory_equal(log.data[0], "ok", 2);
    assert_int_equal(b->stats.rx_truncated, over);
    rx_log_free(&log);
    close(fd);
    tc_close(b);
}

static void test_batches(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();

    /* 20 rounds of 64, never polling the sender. */
    tl_batches(a, b, a->caps.mtu < 1200 ? a->caps.mtu : 1200, 20);
    tc_close(a);
    tc_close(b);
}

/* A busy receiver: thousands of small datagrams, the receiver polling
 * every 64 sends, so each poll's buffers must go back to the transport at
 * the next one; the sender polls only when post_send asks it to. */
static void test_many_small_datagrams(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();
    sx_tl_dest_t to_b = connect_to(a, b);
    sx_tl_event_t ev[8];
    rx_log_t log = {0};
    enum { N = 4000 };
    uint64_t deadline = sx_time_ns() + DEADLINE_NS;

    for (uint32_t i = 0; i < N; i++) {
        int rc;
        while ((rc = send_one(a, to_b, &i, sizeof(i))) == SX_ERR_AGAIN) {
            assert_int_equal(a->ops->poll(a, ev, 8), 0);
            if (sx_time_ns() > deadline)
                fail_msg("the sender stayed full");
        }
        assert_int_equal(rc, SX_OK);
        if ((i & 63) == 63)
            rx_once(b, &log);
    }
    rx_until(b, &log, N);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t v;
        assert_int_equal(log.len[i], sizeof(v));
        memcpy(&v, log.data[i], sizeof(v));
        assert_int_equal(v, i);
    }
    rx_log_free(&log);
    assert_int_equal(b->stats.rx_datagrams, N);
    assert_int_equal(b->stats.rx_kernel_drops, 0);
    tc_close(a);
    tc_close(b);
}

/* Refused by addr_insert, and by addr_check the same way where the
 * transport has one. @p strict: malformed (SX_ERR_INVALID_PARAM); else
 * a transport may also call it another kind of address it cannot reach
 * (SX_ERR_PEER_UNREACHABLE). */
static void refused(sx_tl_iface_t *a, const void *addr, size_t len, bool strict)
{
    sx_tl_dest_t dest = 12345;
    int rc = a->ops->addr_insert(a, addr, len, &dest);

    if (rc != SX_ERR_INVALID_PARAM && (strict || rc != SX_ERR_PEER_UNREACHABLE))
        fail_msg("an address of %zu bytes was not refused (%s)", len, sx_status_name(rc));
    assert_int_equal(dest, 12345);
    if (a->ops->addr_check != NULL)
        assert_int_equal(a->ops->addr_check(a, addr, len), rc);
    if (a->ops->addr_str != NULL) {
        char text[128];
        a->ops->addr_str(a, addr, len, text, sizeof(text));
        assert_true(strlen(text) < sizeof(text));
    }
}

static void test_addr_insert_rejects_garbage(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();
    uint8_t addr[SX_TL_ADDR_MAX + 1], bad[SX_TL_ADDR_MAX + 1];
    size_t len = SX_TL_ADDR_MAX;

    assert_int_equal(b->ops->local_addr(b, addr, &len), SX_OK);
    /* udp says why it refuses each (as an error: the bytes came from a
     * peer's card); the suite asks nothing of the log. */
    capture_start();
    refused(a, NULL, len, true);
    refused(a, "", 0, true);
    refused(a, addr, 1, true);
    refused(a, addr, len - 1, true);
    addr[len] = 0;
    refused(a, addr, len + 1, true);
    memset(bad, 0xff, sizeof(bad));
    refused(a, bad, len, false);
    memset(bad, 0, sizeof(bad));
    refused(a, bad, len, false);
    /* No place for the destination. */
    assert_int_equal(a->ops->addr_insert(a, addr, len, NULL), SX_ERR_INVALID_PARAM);
    free(capture_stop());

    /* And the real address is still taken. */
    sx_tl_dest_t d = connect_to(a, b);
    assert_int_equal(send_one(a, d, "fine", 4), SX_OK);
    expect_one(b, "fine", 4);
    tc_close(a);
    tc_close(b);
}

static void test_addr_remove(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();
    sx_tl_dest_t d1 = connect_to(a, b), d2 = connect_to(a, b);
    rx_log_t log = {0};

    assert_int_not_equal(d1, d2);
    a->ops->addr_remove(a, d1);
    assert_int_equal(send_one(a, d1, "x", 1), SX_ERR_INVALID_PARAM);
    assert_int_equal(send_one(a, SX_TL_DEST_NONE, "x", 1), SX_ERR_INVALID_PARAM);
    a->ops->addr_remove(a, d1); /* twice is harmless */
    a->ops->addr_remove(a, SX_TL_DEST_NONE);
    a->ops->addr_remove(a, 100000); /* never handed out */
    assert_int_equal(send_one(a, d2, "y", 1), SX_OK);
    /* The freed slot is reused and works again. */
    sx_tl_dest_t d3 = connect_to(a, b);
    assert_int_equal(d3, d1);
    assert_int_equal(send_one(a, d3, "z", 1), SX_OK);
    rx_until(b, &log, 2);
    assert_memory_equal(log.data[0], "y", 1);
    assert_memory_equal(log.data[1], "z", 1);
    rx_log_free(&log);

    /* Many destinations: the table grows, and the last one works. */
    sx_tl_dest_t last = SX_TL_DEST_NONE;
    for (unsigned i = 0; i < 100; i++)
        last = connect_to(a, b);
    assert_int_equal(send_one(a, last, "w", 1), SX_OK);
    expect_one(b, "w", 1);
    tc_close(a);
    tc_close(b);
}

static void test_bad_parameters(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();
    sx_tl_dest_t to_b = connect_to(a, b);
    sx_tl_event_t ev[4];
    sx_tl_tx_t tx[8];
    char bufs[8][4];
    unsigned posted = 99;
    rx_log_t log = {0};

    /* Nothing to send, nothing to report. */
    assert_int_equal(a->ops->post_send(a, tx, 0, &posted), SX_OK);
    assert_int_equal(posted, 0);
    assert_int_equal(b->ops->poll(b, ev, 0), 0);

    /* Destinations never handed out. */
    assert_int_equal(send_one(a, 1000, "x", 1), SX_ERR_INVALID_PARAM);
    assert_int_equal(send_one(a, to_b + 1, "x", 1), SX_ERR_INVALID_PARAM);

    /* One inside a batch: those before it go, in order; it and those
     * after it are not taken. */
    for (unsigned i = 0; i < 8; i++) {
        snprintf(bufs[i], sizeof(bufs[i]), "b%u", i);
        tx[i] = (sx_tl_tx_t){.dest = i == 5 ? 1000 : to_b, .iovcnt = 1};
        tx[i].iov[0] = (struct iovec){bufs[i], 2};
    }
    posted = 99;
    assert_int_equal(a->ops->post_send(a, tx, 8, &posted), SX_ERR_INVALID_PARAM);
    assert_int_equal(posted, 5);
    rx_until(b, &log, 5);
    for (unsigned i = 0; i < 5; i++)
        assert_memory_equal(log.data[i], bufs[i], 2);
    rx_log_free(&log);
    assert_int_equal(a->stats.tx_datagrams, 5);
    tc_close(a);
    tc_close(b);
}

/* A destination whose interface went away, inserted before and after it
 * did: sends to it are not errors, and the sender goes on working. */
static void test_closed_destination(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open(), *gone = tc_open();
    sx_tl_dest_t before = connect_to(a, gone), to_b = connect_to(a, b), to_a = connect_to(b, a);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    sx_tl_dest_t after = SX_TL_DEST_NONE;
    sx_tl_event_t ev[8];

    assert_int_equal(gone->ops->local_addr(gone, addr, &len), SX_OK);
    tc_close(gone);
    /* Well formed: accepted, even though nobody is there any more. */
    assert_int_equal(a->ops->addr_insert(a, addr, len, &after), SX_OK);
    for (unsigned i = 0; i < 20; i++) {
        assert_int_equal(send_one(a, i % 2 ? before : after, "lost", 4), SX_OK);
        assert_true(a->ops->poll(a, ev, 8) >= 0);
    }
    assert_int_equal(send_one(a, to_b, "hi", 2), SX_OK);
    expect_one(b, "hi", 2);
    assert_int_equal(send_one(b, to_a, "ho", 2), SX_OK);
    expect_one(a, "ho", 2);
    tc_close(a);
    tc_close(b);
}

/* The sleeper's protocol: arm (where the transport has it; SX_ERR_AGAIN
 * means poll first), then sleep on the fd. Says whether the fd may be
 * slept on now. */
static bool armed(sx_tl_iface_t *rx)
{
    if (rx->ops->arm == NULL)
        return true;
    int rc = rx->ops->arm(rx);
    assert_true(rc == SX_OK || rc == SX_ERR_AGAIN);
    return rc == SX_OK;
}

/* Polls @p rx until it has returned @p want datagrams, at most @p max per
 * poll; returns them in @p log. */
static void poll_until(sx_tl_iface_t *rx, rx_log_t *log, size_t want, unsigned max)
{
    sx_tl_event_t ev[8];
    uint64_t deadline = sx_time_ns() + DEADLINE_NS;

    while (log->n < want) {
        int n = rx->ops->poll(rx, ev, max);
        assert_true(n >= 0 && (unsigned)n <= max);
        for (int i = 0; i < n; i++)
            rx_log_add(log, ev[i].data, ev[i].len);
        if (sx_time_ns() > deadline)
            fail_msg("only %zu of %zu datagrams arrived", log->n, want);
    }
}

/* Idle: an empty poll, then arming succeeds and the fds are quiet. */
static void expect_idle(sx_tl_iface_t *rx)
{
    sx_tl_event_t ev[8];

    assert_int_equal(rx->ops->poll(rx, ev, 8), 0);
    if (rx->ops->arm != NULL)
        assert_int_equal(rx->ops->arm(rx), SX_OK);
    assert_false(tl_wait_readable(rx, 0));
}

static void test_wait_fd(void **state)
{
    (void)state;
    sx_tl_iface_t *a = tc_open(), *b = tc_open();
    sx_tl_dest_t to_b = connect_to(a, b);
    rx_log_t log = {0};

    expect_idle(b);
    for (unsigned round = 0; round < 3; round++) {
        /* A sleeper wakes for one datagram... */
        assert_int_equal(send_one(a, to_b, "wake", 4), SX_OK);
        assert_true(tl_wait_readable(b, WAIT_MS));
        poll_until(b, &log, 1, 8);
        assert_int_equal(log.len[0], 4);
        assert_memory_equal(log.data[0], "wake", 4);
        rx_log_free(&log);
        /* ... and after it, may arm again or be told to poll first; once a
         * poll found nothing, arming succeeds and the fd is quiet. */
        (void)armed(b);
        expect_idle(b);
    }

    /* Taking one of two: the other is not lost to a sleeper. */
    assert_int_equal(send_one(a, to_b, "1", 1), SX_OK);
    assert_int_equal(send_one(a, to_b, "2", 1), SX_OK);
    assert_true(tl_wait_readable(b, WAIT_MS));
    poll_until(b, &log, 1, 1);
    if (armed(b))
        assert_true(tl_wait_readable(b, WAIT_MS));
    poll_until(b, &log, 2, 8);
    assert_memory_equal(log.data[0], "1", 1);
    assert_memory_equal(log.data[1], "2", 1);
    rx_log_free(&log);
    expect_idle(b);

    /* Closing with a datagram waiting and the fd readable. */
    assert_int_equal(send_one(a, to_b, "left", 4), SX_OK);
    assert_true(tl_wait_readable(b, WAIT_MS));
    tc_close(a);
    tc_close(b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_registry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_caps_and_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exchange, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gathered_iovecs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_arrival_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_small_datagrams, setup, teardown),
        cmocka_unit_test_setup_teardown(test_addr_insert_rejects_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_addr_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_parameters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_destination, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_fd, setup, teardown),
    };

    for (size_t i = 0; argc == 2 && i < sizeof(transports) / sizeof(transports[0]); i++) {
        if (strcmp(argv[1], transports[i].name) == 0)
            tc = &transports[i];
    }
    if (tc == NULL) {
        fprintf(stderr, "usage: %s TRANSPORT, one of:", argv[0]);
        for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
            fprintf(stderr, " %s", transports[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    char group[64];
    snprintf(group, sizeof(group), "transport conformance: %s", tc->name);
    sx_test_filter_from_env();
    return _cmocka_run_group_tests(group, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
}
