/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rdmacm connection method end to end, over a fake librdmacm
 * (fake_rdmacm.c) on a fake libibverbs (fake_verbs.c): verbs engines of
 * this process resolve each other's paths through the connection
 * manager's SIDR exchange, point their channels at them and run the
 * handshake's exchange over them, on RoCE and InfiniBand; the side that
 * only answers resolves its own direction; every failure the connection
 * manager reports, a silent one (the connect timeout), hostile requests
 * and answers; channels and engines that go while a resolution is in
 * flight; a shard on another device than the listener; the reasons the
 * method is not offered; progress threads.
 *
 * Every case ends with both fakes' verdicts: no breach of the contract
 * they model (rdma_destroy_id with an event not acknowledged, ids left on
 * a channel, ...), nothing left allocated. What neither can show is how a
 * real subnet manager, kernel and device behave; the device test in
 * test_cpc_rdmacm.c runs where there is one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shardx.h>

#include "am_util.h"
#include "test_filter.h"
#include "shard/conn.h"
#include "cpc/cpc.h"
#include "cpc/rdmacm.h"
#include "engine/engine.h"
#include "shard/shard.h"
#include "fake_rdmacm.h"
#include "fake_verbs.h"
#include "log_capture.h"
#include "shard/chan.h"
#include "shard/peer.h"

#define TAG      5
#define LIMIT_NS (60ull * 1000000000ull) /* a hang detector, nothing more */
#define QKEY     0x5358514bu             /* the verbs transport's */

static int saved_level;

/* Two RoCE devices (10.0.0.1 and 10.0.0.2) besides fake_verbs' InfiniBand
 * mlx5_0. */
static int setup(void **state)
{
    (void)state;
    saved_level = atomic_load(&sx_log_level_g);
    fake_reset();
    fake_add_roce("roce0", 1);
    fake_add_roce("roce1", 2);
    fake_cm_reset();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    (void)capture_abandon(); /* one that a failed assertion left running */
    fake_cm_world_t w;
    fake_cm_release();
    fake_cm_snapshot(&w);
    sx_log_set_level((sx_log_level_t)saved_level);
    if (w.violation[0] != '\0')
        fail_msg("librdmacm contract breached: %s", w.violation);
    if (w.ids_live != 0 || w.channels_live != 0)
        fail_msg("left allocated: %u rdma_cm ids, %u event channels", w.ids_live, w.channels_live);
    if (fake.violation[0] != '\0')
        fail_msg("verbs contract breached: %s", fake.violation);
    if (fake.live_contexts + fake.live_qps + fake.live_ahs + fake.live_mrs != 0)
        fail_msg("verbs resources left: %u contexts, %u qps, %u ahs, %u mrs", fake.live_contexts,
                 fake.live_qps, fake.live_ahs, fake.live_mrs);
    return 0;
}

/* ------------------------------------------------------------ helpers */

static void set_sl(fake_cm_world_t *w, void *arg)
{
    w->sl = (uint8_t)(uintptr_t)arg;
}
static void set_hold(fake_cm_world_t *w, void *arg)
{
    w->hold = arg != NULL;
}
static void set_ib_global(fake_cm_world_t *w, void *arg)
{
    w->ib_global = arg != NULL;
}
static void set_no_device(fake_cm_world_t *w, void *arg)
{
    w->no_device = arg != NULL;
}

static sx_engine_h engine(const sx_config_kv_t *kv, size_t n)
{
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = n};
    sx_engine_h e = NULL;
    int rc = sx_engine_create(&params, &e);
    if (rc != SX_OK)
        fail_msg("sx_engine_create: %s", sx_status_name(rc));
    return e;
}

static bool runs_rdmacm(sx_engine_h e)
{
    for (unsigned k = 0; k < e->cpc.n; k++) {
        if (e->cpc.inst[k].comp->ep.id == SX_CPC_RDMACM)
            return true;
    }
    return false;
}

/* The port of @p e's listener, from its card blob. */
static uint16_t listener_port(sx_engine_h e)
{
    for (unsigned k = 0; k < e->cpc.n; k++) {
        if (e->cpc.inst[k].comp->ep.id != SX_CPC_RDMACM)
            continue;
        const sx_cpc_module_t *m = &e->cpc.inst[k].mods[0];
        struct sockaddr_storage ss;
        assert_int_equal(sx_rdmacm_blob_parse(m->blob, m->blob_len, &ss, NULL), SX_OK);
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    fail_msg("the engine runs no rdmacm");
    return 0;
}

static fake_cm_world_t cm(void)
{
    fake_cm_world_t w;
    fake_cm_snapshot(&w);
    return w;
}

/* Progresses @p a and @p b (either may be NULL) until @p cond holds. */
#define WAIT(a, b, cond, what)                              \
    do {                                                    \
        uint64_t t0_ = sx_time_ns();                        \
        while (!(cond)) {                                   \
            if ((a) != NULL)                                \
                sx_progress(a);                             \
            if ((b) != NULL)                                \
                sx_progress(b);                             \
            if (sx_time_ns() - t0_ > LIMIT_NS)              \
                fail_msg("timed out waiting for %s", what); \
        }                                                   \
    } while (0)

static atomic_uint_fast64_t got; /* messages received, either engine */
static void on_am(void *arg, uint64_t peer, uint8_t tag, const void *data, size_t len)
{
    (void)arg, (void)peer, (void)tag, (void)data, (void)len;
    atomic_fetch_add(&got, 1);
}

/* One operation's completion. */
typedef struct op {
    atomic_int calls;
    atomic_int status;
} op_t;

static void on_done(void *ctx, int status)
{
    op_t *op = ctx;
    atomic_store(&op->status, status);
    atomic_fetch_add(&op->calls, 1);
}

static void send_one(sx_peer_h peer, op_t *op)
{
    static uint8_t msg[64];
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
    atomic_store(&op->calls, 0);
    assert_int_equal(sx_send(peer, TAG, &iov, 1, on_done, op), SX_INPROGRESS);
}

/* A channel's connection state, read under its shard's token. */
typedef struct peek {
    sx_inbox_req_t req;
    sx_peer_h peer;
    unsigned lane;
    bool found;
    uint8_t resolve, conn, cpc;
    sx_tl_dest_t dest;
    atomic_bool ran; /* release: the fields above are written */
} peek_t;

static void peek_run(void *owner, sx_inbox_req_t *req)
{
    sx_shard_t *s = owner;
    peek_t *p = (peek_t *)req;
    sx_chan_t *c = p->peer->chans[(size_t)s->index * p->peer->nshards + p->lane];
    p->found = c != NULL;
    if (c != NULL) {
        p->resolve = c->resolve;
        p->conn = c->conn;
        p->cpc = c->conn_method->ops->id;
        p->dest = c->dest;
    }
    atomic_store_explicit(&p->ran, true, memory_order_release);
}

static peek_t peek(sx_engine_h e, unsigned shard, sx_peer_h peer, unsigned lane)
{
    peek_t p = {.peer = peer, .lane = lane};
    p.req.run = peek_run;
    atomic_init(&p.ran, false);
    sx_engine_submit(e, shard, &p.req);
    WAIT(e, (sx_engine_h)NULL, atomic_load_explicit(&p.ran, memory_order_acquire), "the peek");
    return p;
}

static void link_pair(sx_engine_h a, sx_engine_h b, sx_peer_h *ab, sx_peer_h *ba)
{
    *ab = am_connect(a, b, 1);
    *ba = am_connect(b, a, 0);
    assert_int_equal(sx_am_register(a, TAG, on_am, NULL), SX_OK);
    assert_int_equal(sx_am_register(b, TAG, on_am, NULL), SX_OK);
}

/* ------------------------------------------------------------ connecting */

/* RoCE: both engines offer rdmacm, choose it, resolve each other through
 * the SIDR exchange and talk over the resolved paths: the address handles
 * carry the connection manager's SL (5), which no card names. */
static void test_roce_connect(void **state)
{
    (void)state;
    fake_cm_set(set_sl, (void *)(uintptr_t)5);
    const sx_config_kv_t ka[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce0"}, {"LOG_LEVEL", "debug"}};
    const sx_config_kv_t kb[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce1"}, {"LOG_LEVEL", "debug"}};
    capture_start();
    sx_engine_h a = engine(ka, 4), b = engine(kb, 4);
    assert_true(runs_rdmacm(a));
    assert_true(runs_rdmacm(b));
    sx_peer_h ab, ba;
    link_pair(a, b, &ab, &ba);
    assert_int_equal(ab->conn_method->ops->id, SX_CPC_RDMACM);
    assert_int_equal(ba->conn_method->ops->id, SX_CPC_RDMACM);

    atomic_store(&got, 0);
    op_t ops[20];
    for (unsigned i = 0; i < 10; i++) {
        send_one(ab, &ops[i]);
        send_one(ba, &ops[10 + i]);
    }
    WAIT(a, b, atomic_load(&got) == 20, "20 messages");
    for (unsigned i = 0; i < 20; i++)
        WAIT(a, b, atomic_load(&ops[i].calls) == 1, "the completions");
    for (unsigned i = 0; i < 20; i++)
        assert_int_equal(atomic_load(&ops[i].status), SX_OK);
    /* Both sides sent, so either may have answered the other's exchange
     * first: its channel is then up over the card's address while its own
     * resolution still runs (rdmacm_send_ctrl), and data can finish before
     * that resolution does. Wait for both paths. */
    WAIT(a, b, peek(a, 0, ab, 0).resolve == SX_CHAN_RESOLVE_DONE, "a's path");
    WAIT(a, b, peek(b, 0, ba, 0).resolve == SX_CHAN_RESOLVE_DONE, "b's path");
    peek_t pa = peek(a, 0, ab, 0), pb = peek(b, 0, ba, 0);
    assert_true(pa.found && pb.found);
    assert_int_equal(pa.cpc, SX_CPC_RDMACM);
    assert_int_equal(pa.resolve, SX_CHAN_RESOLVE_DONE);
    assert_int_equal(pa.conn, SX_CONN_UP);
    assert_int_equal(pb.resolve, SX_CHAN_RESOLVE_DONE);
    assert_int_equal(fake.last_ah.sl, 5);
    assert_int_equal(fake.last_ah.is_global, 1);
    fake_cm_world_t w = cm();
    assert_int_equal(w.connects, 2);
    assert_int_equal(w.accepts, 2);
    assert_int_equal(w.rejects, 0);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    char *log = capture_stop();
    assert_contains(log, "rdmacm: shardx listens on 10.0.0.1:40000 (RDMA_PS_UDP");
    assert_contains(log, "is up (rdmacm");
    assert_contains(log, "rdmacm: shard 0: the path to peer 1 shard 0 is");
    free(log);
    assert_int_equal(fake.dropped_route, 0);
}

/* InfiniBand with IPoIB addresses (SX_BIND_ADDR), two shards each: every
 * channel resolves, by LID; then across subnets, with a GRH. */
static void test_ib_connect(void **state)
{
    (void)state;
    fake_cm_add_ip("192.168.7.1", 0, 1);
    fake_cm_set(set_sl, (void *)(uintptr_t)3);
    const sx_config_kv_t kv[] = {{"SHARDS", "2"},
                                 {"TRANSPORTS", "verbs"},
                                 {"NET_DEVICES", "mlx5_0"},
                                 {"BIND_ADDR", "192.168.7.1"}};
    for (int global = 0; global < 2; global++) {
        fake_cm_set(set_ib_global, global ? (void *)1 : NULL);
        sx_engine_h a = engine(kv, 4), b = engine(kv, 4);
        assert_true(runs_rdmacm(a));
        sx_peer_h ab, ba;
        link_pair(a, b, &ab, &ba);
        fake_cm_world_t before = cm();
        atomic_store(&got, 0);
        op_t ops[4];
        for (unsigned s = 0; s < 2; s++) {
            assert_int_equal(sx_thread_bind(a, s), SX_OK);
            assert_int_equal(sx_thread_bind(b, s), SX_OK);
            send_one(ab, &ops[2 * s]);
            send_one(ba, &ops[2 * s + 1]);
        }
        WAIT(a, b, atomic_load(&got) == 4, "4 messages");
        for (unsigned i = 0; i < 4; i++)
            WAIT(a, b, atomic_load(&ops[i].calls) == 1, "the completions");
        /* Either side may have answered first (see test_roce_connect):
         * wait for every channel's own path. */
        for (unsigned s = 0; s < 2; s++) {
            WAIT(a, b, peek(a, s, ab, s).resolve == SX_CHAN_RESOLVE_DONE, "a's paths");
            WAIT(a, b, peek(b, s, ba, s).resolve == SX_CHAN_RESOLVE_DONE, "b's paths");
        }
        for (unsigned s = 0; s < 2; s++) {
            peek_t p = peek(a, s, ab, s);
            assert_int_equal(p.resolve, SX_CHAN_RESOLVE_DONE);
            assert_int_equal(p.conn, SX_CONN_UP);
        }
        assert_int_equal(cm().connects - before.connects, 4);
        assert_int_equal(fake.last_ah.sl, 3);
        assert_int_equal(fake.last_ah.dlid, 0x11);
        assert_int_equal(fake.last_ah.is_global, global);
        sx_engine_destroy(a);
        sx_engine_destroy(b);
    }
}

/* Only one side sends: the other's channel resolves its own direction at
 * its first answer, so its ACKs take the resolved path too. */
static void test_passive_side_resolves(void **state)
{
    (void)state;
    const sx_config_kv_t ka[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce0"}};
    const sx_config_kv_t kb[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce1"}};
    sx_engine_h a = engine(ka, 3), b = engine(kb, 3);
    sx_peer_h ab, ba;
    link_pair(a, b, &ab, &ba);
    atomic_store(&got, 0);
    op_t ops[5];
    for (unsigned i = 0; i < 5; i++)
        send_one(ab, &ops[i]);
    WAIT(a, b, atomic_load(&got) == 5, "5 messages");
    for (unsigned i = 0; i < 5; i++)
        WAIT(a, b, atomic_load(&ops[i].calls) == 1, "the completions");
    WAIT(a, b, cm().established == 2, "the answering side's resolution");
    WAIT(a, b, peek(b, 0, ba, 0).resolve == SX_CHAN_RESOLVE_DONE, "b's channel resolved");
    assert_int_equal(cm().connects, 2);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

static void fail_b_addr(fake_cm_world_t *w, void *arg)
{
    (void)arg;
    w->fail = RDMA_CM_EVENT_ADDR_ERROR;
    w->fail_status = -110;
    inet_pton(AF_INET, "10.0.0.2", &w->fail_from);
}

/* The answering side's own resolution fails: its channel is up already
 * (or comes up) over the card's address, so it only warns and keeps that
 * address; traffic flows. */
static void test_passive_failure_keeps_card(void **state)
{
    (void)state;
    fake_cm_set(fail_b_addr, NULL);
    const sx_config_kv_t ka[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce0"}};
    const sx_config_kv_t kb[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce1"}};
    capture_start();
    sx_engine_h a = engine(ka, 3), b = engine(kb, 3);
    sx_peer_h ab, ba;
    link_pair(a, b, &ab, &ba);
    atomic_store(&got, 0);
    op_t ops[5];
    for (unsigned i = 0; i < 5; i++)
        send_one(ab, &ops[i]);
    WAIT(a, b, atomic_load(&got) == 5, "5 messages");
    for (unsigned i = 0; i < 5; i++) {
        WAIT(a, b, atomic_load(&ops[i].calls) == 1, "the completions");
        assert_int_equal(atomic_load(&ops[i].status), SX_OK);
    }
    WAIT(a, b, peek(b, 0, ba, 0).resolve == SX_CHAN_RESOLVE_FAILED, "b's resolution to fail");
    assert_int_equal(peek(a, 0, ab, 0).resolve, SX_CHAN_RESOLVE_DONE);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    char *log = capture_stop();
    assert_contains(log, "rdmacm: no path to peer 0 shard 0: rdma_cm reported "
                         "RDMA_CM_EVENT_ADDR_ERROR (status -110: Connection timed out), while "
                         "resolving the address of its listener at 10.0.0.1:40000; the channel "
                         "keeps the address in the peer's card");
    free(log);
}

/* ------------------------------------------------------------ failures */

typedef struct fail_case {
    int fail, status;
    bool silent;
    int req_tamper, rep_tamper;
    bool no_listener;
    const char *needle, *needle2;
    int call, err; /* a call that fails at once, once the engines run */
} fail_case_t;

static void apply_call(fake_cm_world_t *w, void *arg)
{
    const fail_case_t *c = arg;
    w->fail_call = c->call;
    w->fail_errno = c->err;
}

static void apply_case(fake_cm_world_t *w, void *arg)
{
    const fail_case_t *c = arg;
    w->fail_from = 0;
    w->fail = c->fail;
    w->fail_status = c->status;
    w->silent = c->silent;
    w->req_tamper = c->req_tamper;
    w->rep_tamper = c->rep_tamper;
}

/* Each way the resolution can fail ends the channel with
 * SX_ERR_PEER_UNREACHABLE, the error callback, and a log line naming the
 * event, its status, the stage and the listener's address. */
static void test_failures(void **state)
{
    (void)state;
    static const fail_case_t cases[] = {
        {.fail = RDMA_CM_EVENT_ADDR_ERROR,
         .status = -110,
         .needle = "RDMA_CM_EVENT_ADDR_ERROR (status -110: Connection timed out), while "
                   "resolving the address of its listener at 10.0.0.2:"},
        {.fail = RDMA_CM_EVENT_ROUTE_ERROR,
         .status = -113,
         .needle = "RDMA_CM_EVENT_ROUTE_ERROR (status -113: No route to host), while resolving "
                   "the route to its listener at 10.0.0.2:"},
        {.fail = RDMA_CM_EVENT_UNREACHABLE,
         .status = -110,
         .needle = "RDMA_CM_EVENT_UNREACHABLE (status -110",
         .needle2 = "while waiting for the answer of"},
        {.fail = RDMA_CM_EVENT_DEVICE_REMOVAL,
         .needle = "rdma_cm reported RDMA_CM_EVENT_DEVICE_REMOVAL (status 0), while waiting for "
                   "the answer of"},
        {.silent = true,
         .needle = "no event from the connection manager before the connect timeout"},
        {.req_tamper = 1,
         .needle = "RDMA_CM_EVENT_REJECTED (status 28)",
         .needle2 = "rdmacm: refused a request from 10.0.0.1:"},
        {.rep_tamper = 1, .needle = "its answer is malformed (not from shardx (wrong magic))"},
        {.rep_tamper = 2, .needle = "its answer is malformed (names a shard that does not exist)"},
        {.rep_tamper = 3, .needle = "the connection manager says queue pair"},
        {.rep_tamper = 4,
         .needle = "rdmacm: the verbs transport refused the path to peer 1 shard 0"},
        {.no_listener = true, .needle = "RDMA_CM_EVENT_UNREACHABLE (status 2)"},
        {.call = 1,
         .err = ENOMEM,
         .needle = "rdma_create_id: Cannot allocate memory, while waiting to ask"},
        {.call = 2,
         .err = EINVAL,
         .needle = "rdma_resolve_addr: Invalid argument, while resolving the address of"},
        {.call = 3,
         .err = ENETUNREACH,
         .needle = "rdma_resolve_route: Network is unreachable, while resolving the route to"},
        {.call = 4,
         .err = EIO,
         .needle = "rdma_connect: Input/output error, while waiting for the answer"},
    };
    const sx_config_kv_t ka[] = {{"SHARDS", "1"},
                                 {"TRANSPORTS", "verbs"},
                                 {"NET_DEVICES", "roce0"},
                                 {"CONNECT_TIMEOUT_MS", "300"}};
    const sx_config_kv_t kb[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce1"}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        fake_cm_set(apply_case, (void *)&cases[k]);
        capture_start();
        sx_engine_h a = engine(ka, 4), b = engine(kb, 3);
        uint8_t card[4096];
        size_t len = sizeof(card);
        assert_int_equal(sx_engine_address(b, card, &len), SX_OK);
        if (cases[k].no_listener) {
            /* The blob's port, one past the listener's: nothing there. */
            size_t at = 0;
            uint16_t port = listener_port(b);
            for (size_t i = 0; i + 8 <= len; i++) {
                if (card[i] == 1 && card[i + 1] == 4 && card[i + 2] == (uint8_t)port &&
                    card[i + 3] == (uint8_t)(port >> 8) && card[i + 4] == 10) {
                    at = i;
                    break;
                }
            }
            assert_true(at > 0);
            card[at + 2]++;
        }
        sx_peer_h ab = NULL;
        assert_int_equal(sx_peer_add(a, 1, card, len, &ab), SX_OK);
        (void)am_connect(b, a, 0);
        fake_cm_set(apply_call, (void *)&cases[k]);
        op_t op;
        send_one(ab, &op);
        WAIT(a, b, atomic_load(&op.calls) == 1, "the failed send");
        int status = atomic_load(&op.status);
        sx_engine_destroy(a);
        sx_engine_destroy(b);
        char *log = capture_stop();
        if (status != SX_ERR_PEER_UNREACHABLE || strstr(log, cases[k].needle) == NULL ||
            (cases[k].needle2 != NULL && strstr(log, cases[k].needle2) == NULL))
            fail_msg("case %zu: %s, expected SX_ERR_PEER_UNREACHABLE and \"%s\" in:\n%s", k,
                     sx_status_name(status), cases[k].needle, log);
        free(log);
        static const fail_case_t none;
        fake_cm_set(apply_case, (void *)&none);
    }
}

/* Hostile SIDR requests reach a listener: each is refused, with its
 * reason; a well-formed one is answered with the shard's queue pair. */
static void test_hostile_requests(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {
        {"SHARDS", "2"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce1"}};
    sx_engine_h b = engine(kv, 3);
    uint16_t port = listener_port(b);
    static const struct {
        int what;
        const char *why;
    } v[] = {
        {0, "shorter than a request"},
        {1, "not from shardx (wrong magic)"},
        {2, "unknown version"},
        {3, "not a request"},
        {4, "reserved bytes set"},
        {5, "names a shard that does not exist"},
        {6, "a request with an answer's fields set"},
    };
    capture_start();
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        uint8_t priv[SX_RDMACM_PRIV_LEN];
        sx_rdmacm_priv_t m = {.kind = SX_RDMACM_REQ, .shard = 1};
        if (v[k].what == 3)
            m.kind = SX_RDMACM_REP;
        if (v[k].what == 5)
            m.shard = 2;
        if (v[k].what == 6)
            m.qpn = 0x99;
        sx_rdmacm_priv_write(priv, &m);
        if (v[k].what == 1)
            priv[3] ^= 0x40;
        if (v[k].what == 2)
            priv[4] = 9;
        if (v[k].what == 4)
            priv[18] = 1;
        unsigned before = cm().ghost_answers;
        assert_int_equal(
            fake_cm_inject_request("10.0.0.2", port, priv, v[k].what == 0 ? 10 : sizeof(priv)), 0);
        WAIT(b, (sx_engine_h)NULL, cm().ghost_answers == before + 1, "the answer");
        assert_int_equal(cm().ghost_event, RDMA_CM_EVENT_REJECTED);
    }
    char *log = capture_stop();
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        char needle[160];
        snprintf(needle, sizeof(needle), "rdmacm: refused a request from 10.99.99.99:4242: %s",
                 v[k].why);
        assert_contains(log, needle);
    }
    free(log);

    /* A good one, for shard 1: its queue pair, the transport's Q_Key. */
    uint8_t priv[SX_RDMACM_PRIV_LEN];
    sx_rdmacm_priv_t m = {.kind = SX_RDMACM_REQ, .shard = 1};
    sx_rdmacm_priv_write(priv, &m);
    unsigned before = cm().ghost_answers;
    assert_int_equal(fake_cm_inject_request("10.0.0.2", port, priv, sizeof(priv)), 0);
    WAIT(b, (sx_engine_h)NULL, cm().ghost_answers == before + 1, "the answer");
    fake_cm_world_t w = cm();
    assert_int_equal(w.ghost_event, RDMA_CM_EVENT_ESTABLISHED);
    sx_rdmacm_priv_t rep;
    assert_int_equal(
        sx_rdmacm_priv_parse(w.ghost_priv, sizeof(w.ghost_priv), SX_RDMACM_REP, 2, &rep, NULL),
        SX_OK);
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    sx_tl_iface_t *iface = b->shards[1]->ifaces[SX_SHARD_TL_NET];
    assert_int_equal(iface->ops->local_addr(iface, addr, &len), SX_OK);
    sx_verbs_addr_t mine;
    assert_int_equal(sx_verbs_addr_decode(addr, len, &mine), SX_OK);
    assert_int_equal(rep.shard, 1);
    assert_int_equal(rep.qpn, mine.qpn);
    assert_int_equal(w.ghost_qpn, mine.qpn);
    assert_int_equal(rep.qkey, QKEY);
    assert_int_equal(rep.port, 1);
    /* Nothing listens on another port. */
    assert_int_equal(fake_cm_inject_request("10.0.0.2", (uint16_t)(port + 1), priv, 20), -1);
    sx_engine_destroy(b);
}

/* ------------------------------------------------------------ going away */

/* The channel is removed while its resolution waits on the connection
 * manager: the answer comes later, finds no channel, and is dropped. */
static void test_channel_gone_midflight(void **state)
{
    (void)state;
    const sx_config_kv_t ka[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce0"}, {"LOG_LEVEL", "debug"}};
    const sx_config_kv_t kb[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce1"}, {"LOG_LEVEL", "debug"}};
    capture_start();
    sx_engine_h a = engine(ka, 4), b = engine(kb, 4);
    sx_peer_h ab, ba;
    link_pair(a, b, &ab, &ba);
    fake_cm_set(set_hold, (void *)1);
    op_t op;
    send_one(ab, &op);
    WAIT(a, b, cm().held >= 1, "the resolution to start");
    assert_int_equal(sx_peer_remove(a, ab), SX_OK);
    WAIT(a, b, atomic_load(&op.calls) == 1, "the send to complete");
    assert_int_not_equal(atomic_load(&op.status), SX_OK);
    unsigned destroyed = cm().ids_destroyed;
    fake_cm_release();
    /* a's client id and b's request id go once answered; the answer then
     * reaches a's shard (whoever holds it: a caller, or a's service) and
     * finds no channel. */
    WAIT(a, b, cm().ids_destroyed >= destroyed + 2, "the resolution to end");
    WAIT(a, b, capture_has("rdmacm: shard 0: the path to peer 1 shard 0 found no channel waiting"),
         "the late answer to find no channel");
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    free(capture_stop());
}

/* Engines destroyed while resolutions wait at each stage: the thread
 * drops them, nothing is left (the fakes check), nothing is touched. */
static void test_engine_closes_midflight(void **state)
{
    (void)state;
    const sx_config_kv_t ka[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce0"}};
    const sx_config_kv_t kb[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce1"}};
    static const fail_case_t silent = {.silent = true};
    static const fail_case_t none;
    for (int variant = 0; variant < 3; variant++) {
        sx_engine_h a = engine(ka, 3), b = engine(kb, 3);
        sx_peer_h ab, ba;
        link_pair(a, b, &ab, &ba);
        op_t op;
        if (variant == 0) {
            /* Held before the first event: the address is being resolved. */
            fake_cm_set(set_hold, (void *)1);
            send_one(ab, &op);
            WAIT(a, b, cm().held >= 1, "a held event");
        } else if (variant == 1) {
            /* The SIDR REQ is out and nobody answers. */
            fake_cm_set(apply_case, (void *)&silent);
            send_one(ab, &op);
            WAIT(a, b, cm().connects >= 1, "the connect");
        } else {
            /* Queued on the listener: b closes with a request pending. */
            unsigned held0 = cm().held;
            send_one(ab, &op);
            WAIT(a, b, cm().resolves >= 1, "the resolution");
            fake_cm_set(set_hold, (void *)1);
            WAIT(a, b, cm().requests >= 1 || cm().held > held0, "the request");
        }
        sx_engine_destroy(b);
        sx_engine_destroy(a);
        assert_int_equal(atomic_load(&op.calls), 1); /* SX_ERR_SHUTDOWN, or unreachable */
        fake_cm_release();
        fake_cm_set(apply_case, (void *)&none);
        fake_cm_world_t w = cm();
        assert_int_equal(w.ids_live, 0);
        assert_int_equal(w.channels_live, 0);
    }
}

/* ------------------------------------------------------------ devices */

/* A shard on another device than the listener's address: the path the
 * connection manager finds starts elsewhere, so its channel keeps the
 * card's address (and works over it); the peer's channel to that shard is
 * told so by the answer's ELSEWHERE flag and keeps the card's address
 * too, where the listener's path would have led to the wrong port. */
static void test_other_device_keeps_card(void **state)
{
    (void)state;
    const sx_config_kv_t ka[] = {{"SHARDS", "2"},
                                 {"TRANSPORTS", "verbs"},
                                 {"NET_DEVICES", "roce0,roce1"},
                                 {"LOG_LEVEL", "info"}};
    const sx_config_kv_t kb[] = {
        {"SHARDS", "1"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce0"}, {"LOG_LEVEL", "info"}};
    capture_start();
    sx_engine_h a = engine(ka, 4), b = engine(kb, 4);
    sx_shard_info_t i0, i1;
    assert_int_equal(sx_engine_shard_info(a, 0, &i0), SX_OK);
    assert_int_equal(sx_engine_shard_info(a, 1, &i1), SX_OK);
    assert_string_equal(i0.device, "roce0");
    assert_string_equal(i1.device, "roce1");
    sx_peer_h ab, ba;
    link_pair(a, b, &ab, &ba);
    atomic_store(&got, 0);
    op_t op;
    assert_int_equal(sx_thread_bind(a, 1), SX_OK);
    send_one(ab, &op);
    WAIT(a, b, atomic_load(&got) == 1 && atomic_load(&op.calls) == 1, "the message");
    assert_int_equal(atomic_load(&op.status), SX_OK);
    peek_t p = peek(a, 1, ab, 0);
    assert_int_equal(p.resolve, SX_CHAN_RESOLVE_DONE);
    assert_int_equal(p.conn, SX_CONN_UP);
    /* b's channel to a's shard 1 resolves on its own clock: its ACKs go
     * over the card's address meanwhile, so the message can be in and
     * acknowledged before the ELSEWHERE answer is applied (and logged,
     * just before the channel's state says DONE). */
    uint64_t t0 = sx_time_ns();
    while (peek(b, 0, ba, 1).resolve != SX_CHAN_RESOLVE_DONE) {
        sx_progress(a);
        sx_progress(b);
        if (sx_time_ns() - t0 > LIMIT_NS)
            fail_msg("timed out waiting for b's path to a's shard 1");
    }
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    char *log = capture_stop();
    assert_contains(log, "starts at GID ::ffff:10.0.0.1, not at our shard 1's GID ::ffff:10.0.0.2 "
                         "(another port or device): the channel keeps the card's address");
    assert_contains(log, "rdmacm: peer 0's shard 1 is on another port or device than its "
                         "listener at 10.0.0.1:40000: the channel keeps the card's address");
    free(log);
}

/* Where rdmacm cannot run, a verbs engine says why (info) and connects
 * with the handshake; named in SX_CPC, it warns and the list fails. */
static void test_not_offered(void **state)
{
    (void)state;
    static const struct {
        const char *device, *bind, *port;
        bool no_device;
        const char *why;
    } v[] = {
        {"mlx5_0", NULL, NULL, false,
         "rdmacm: not offered: no IPv4 address to listen on: SX_BIND_ADDR is \"\" and "
         "shard 0's GID is not an IPv4 address"},
        {"roce0", NULL, NULL, true,
         "rdmacm: not offered: rdma_create_event_channel: No such device (no RDMA device here, "
         "or the rdma_ucm kernel module is not loaded)"},
        {"roce0", "10.9.9.9", NULL, false,
         "rdmacm: not offered: cannot listen on 10.9.9.9:0: rdma_bind_addr: No such device"},
    };
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        fake_cm_set(set_no_device, v[k].no_device ? (void *)1 : NULL);
        sx_config_kv_t kv[6] = {{"SHARDS", "1"},
                                {"TRANSPORTS", "verbs"},
                                {"NET_DEVICES", v[k].device},
                                {"LOG_LEVEL", "info"}};
        size_t n = 4;
        if (v[k].bind != NULL)
            kv[n++] = (sx_config_kv_t){"BIND_ADDR", v[k].bind};
        capture_start();
        sx_engine_h a = engine(kv, n), b = engine(kv, n);
        char *log = capture_stop();
        assert_contains(log, v[k].why);
        assert_contains(log, "channels use the other connection methods");
        free(log);
        assert_false(runs_rdmacm(a));
        sx_peer_h ab, ba;
        link_pair(a, b, &ab, &ba);
        assert_int_equal(ab->conn_method->ops->id, SX_CPC_HANDSHAKE);
        atomic_store(&got, 0);
        op_t op;
        send_one(ab, &op);
        WAIT(a, b, atomic_load(&got) == 1 && atomic_load(&op.calls) == 1, "the message");
        sx_engine_destroy(a);
        sx_engine_destroy(b);

        /* Named: a warning with the reason, and no method left. */
        kv[n++] = (sx_config_kv_t){"CPC", "rdmacm"};
        sx_engine_params_t params = {
            .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = n};
        sx_engine_h e = NULL;
        capture_start();
        int rc = sx_engine_create(&params, &e);
        log = capture_stop();
        assert_int_equal(rc, SX_ERR_INVALID_PARAM);
        assert_contains(log, "warn");
        assert_contains(log, v[k].why);
        assert_contains(log, "leaves no connection method");
        free(log);
    }
    fake_cm_set(set_no_device, NULL);
}

/* SX_RDMACM_PORT: the listener takes it; a second engine on the same
 * address and port cannot, and runs without rdmacm. */
static void test_port_parameter(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"SHARDS", "1"},
                                 {"TRANSPORTS", "verbs"},
                                 {"NET_DEVICES", "roce0"},
                                 {"RDMACM_PORT", "18515"},
                                 {"LOG_LEVEL", "info"}};
    sx_engine_h a = engine(kv, 5);
    assert_int_equal(listener_port(a), 18515);
    capture_start();
    sx_engine_h b = engine(kv, 5);
    char *log = capture_stop();
    assert_false(runs_rdmacm(b));
    assert_contains(log, "cannot listen on 10.0.0.1:18515: rdma_bind_addr: Address already in use");
    free(log);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

/* Progress threads: the answers wake the shards' threads through their
 * inboxes, and everything arrives. */
static void test_progress_threads(void **state)
{
    (void)state;
    const sx_config_kv_t ka[] = {
        {"SHARDS", "2"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce0"}, {"PROGRESS", "thread"}};
    const sx_config_kv_t kb[] = {
        {"SHARDS", "2"}, {"TRANSPORTS", "verbs"}, {"NET_DEVICES", "roce1"}, {"PROGRESS", "thread"}};
    sx_engine_h a = engine(ka, 4), b = engine(kb, 4);
    sx_peer_h ab, ba;
    link_pair(a, b, &ab, &ba);
    atomic_store(&got, 0);
    op_t ops[40];
    for (unsigned i = 0; i < 20; i++) {
        assert_int_equal(sx_thread_bind(a, i % 2), SX_OK);
        assert_int_equal(sx_thread_bind(b, i % 2), SX_OK);
        send_one(ab, &ops[2 * i]);
        send_one(ba, &ops[2 * i + 1]);
    }
    uint64_t t0 = sx_time_ns();
    bool done = false;
    while (!done && sx_time_ns() - t0 < LIMIT_NS) {
        done = atomic_load(&got) == 40;
        for (unsigned i = 0; i < 40 && done; i++)
            done = atomic_load(&ops[i].calls) == 1;
        if (!done)
            usleep(1000);
    }
    assert_true(done);
    for (unsigned i = 0; i < 40; i++)
        assert_int_equal(atomic_load(&ops[i].status), SX_OK);
    assert_int_equal(cm().connects, 4);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roce_connect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ib_connect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_passive_side_resolves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_passive_failure_keeps_card, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_channel_gone_midflight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_closes_midflight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_device_keeps_card, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_offered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_port_parameter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_threads, setup, teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
