/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The sx_run rendezvous server (rendezvous.c) and the `sxrun` modex client
 * (modex_sxrun.c), in one process: the server on its OOB endpoint, the
 * ranks on endpoints of their own, either speaking the protocol by hand
 * (to send what a correct client never would) or through
 * sx_modex_sxrun_ops. Each check waits for the answer it expects; the few
 * that check that something did NOT arrive give it a short while, which
 * can only make them pass wrongly, never fail wrongly.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "test_filter.h"
#include "bootstrap/oob.h"
#include "bootstrap/rendezvous.h"
#include "log_capture.h"

#define WAIT_MS  60000
#define QUIET_MS 200 /* "nothing came" */

/* ------------------------------------------------------------- raw ranks */

typedef struct rig {
    sx_rdv_server_t *srv;
    char addr[SX_OOB_ADDR_MAX];
    sx_oob_t *ep[4]; /* raw rank endpoints, ids 1.. */
} rig_t;

static void rig_open(rig_t *g, uint32_t size, int endpoints)
{
    memset(g, 0, sizeof(*g));
    assert_int_equal(sx_rdv_server_open(size, &g->srv), SX_OK);
    assert_int_equal(sx_rdv_server_address(g->srv, g->addr, sizeof(g->addr)), SX_OK);
    for (int i = 0; i < endpoints; i++) {
        assert_int_equal(sx_oob_open(100 + (uint64_t)i, NULL, 0, &g->ep[i]), SX_OK);
        assert_int_equal(sx_oob_peer_set(g->ep[i], SX_OOB_ID_LAUNCHER, g->addr), SX_OK);
    }
}

static void rig_close(rig_t *g)
{
    for (int i = 0; i < 4; i++) {
        if (g->ep[i] != NULL)
            sx_oob_close(g->ep[i]);
    }
    sx_rdv_server_close(g->srv);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void send_raw(sx_oob_t *ep, uint32_t tag, const void *data, size_t len)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    assert_int_equal(sx_oob_send(ep, SX_OOB_ID_LAUNCHER, tag, &iov, 1, WAIT_MS), SX_OK);
}

static void send_put(sx_oob_t *ep, uint32_t rank, uint32_t size, const char *blob)
{
    size_t blen = strlen(blob);
    uint8_t *msg = malloc(8 + blen);
    assert_non_null(msg);
    put_u32(msg, rank);
    put_u32(msg + 4, size);
    memcpy(msg + 8, blob, blen);
    send_raw(ep, SX_OOB_TAG_RDV_PUT, msg, 8 + blen);
    free(msg);
}

static void send_fence(sx_oob_t *ep, uint32_t rank, uint32_t round)
{
    uint8_t msg[8];
    put_u32(msg, rank);
    put_u32(msg + 4, round);
    send_raw(ep, SX_OOB_TAG_RDV_FENCE, msg, sizeof(msg));
}

/* Receives a message with @p tag from the launcher into @p buf (NUL
 * added); returns its length, or -1 if none came within @p timeout_ms. */
static long recv_from_launcher(sx_oob_t *ep, uint32_t tag, void *buf, size_t cap, int timeout_ms)
{
    uint64_t peer = SX_OOB_ID_LAUNCHER;
    struct iovec iov = {.iov_base = buf, .iov_len = cap - 1};
    size_t len = 0;
    int rc = sx_oob_recv(ep, &peer, &tag, &iov, 1, 0, timeout_ms, &len);
    if (rc == SX_ERR_AGAIN)
        return -1;
    assert_int_equal(rc, SX_OK);
    ((char *)buf)[len] = '\0';
    return (long)len;
}

static void expect_done(sx_oob_t *ep, uint32_t round)
{
    uint8_t msg[16];
    assert_int_equal(recv_from_launcher(ep, SX_OOB_TAG_RDV_DONE, msg, sizeof(msg), WAIT_MS), 4);
    assert_int_equal(get_u32(msg), round);
}

static void expect_error(sx_oob_t *ep, const char *text)
{
    char msg[1024];
    assert_true(recv_from_launcher(ep, SX_OOB_TAG_RDV_ERROR, msg, sizeof(msg), WAIT_MS) > 0);
    if (strstr(msg, text) == NULL)
        fail_msg("expected '%s' in RDV_ERROR '%s'", text, msg);
}

/* Every rank gets every blob, in rank order, and fences complete only
 * when every rank has entered them, also when one rank runs ahead. */
static void test_put_all_and_fences(void **state)
{
    (void)state;
    rig_t g;
    uint8_t msg[256];

    rig_open(&g, 3, 3);
    send_put(g.ep[1], 1, 3, "");
    send_put(g.ep[0], 0, 3, "a");
    assert_int_equal(recv_from_launcher(g.ep[0], SX_OOB_TAG_RDV_ALL, msg, sizeof(msg), QUIET_MS),
                     -1);
    send_put(g.ep[2], 2, 3, "ccc");
    static const uint8_t want[] = {3, 0, 0, 0, 1, 0, 0, 0,   'a', 0,
                                   0, 0, 0, 3, 0, 0, 0, 'c', 'c', 'c'};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(recv_from_launcher(g.ep[i], SX_OOB_TAG_RDV_ALL, msg, sizeof(msg), WAIT_MS),
                         sizeof(want));
        assert_memory_equal(msg, want, sizeof(want));
    }

    send_fence(g.ep[0], 0, 1);
    send_fence(g.ep[1], 1, 1);
    assert_int_equal(recv_from_launcher(g.ep[0], SX_OOB_TAG_RDV_DONE, msg, sizeof(msg), QUIET_MS),
                     -1);
    send_fence(g.ep[2], 2, 1);
    for (int i = 0; i < 3; i++)
        expect_done(g.ep[i], 1);

    /* Rank 0 enters rounds 2 and 3 before the others enter 2. */
    send_fence(g.ep[0], 0, 2);
    send_fence(g.ep[0], 0, 3);
    send_fence(g.ep[1], 1, 2);
    send_fence(g.ep[2], 2, 2);
    for (int i = 0; i < 3; i++)
        expect_done(g.ep[i], 2);
    send_fence(g.ep[1], 1, 3);
    send_fence(g.ep[2], 2, 3);
    for (int i = 0; i < 3; i++)
        expect_done(g.ep[i], 3);
    assert_int_equal(sx_rdv_server_status(g.srv), SX_OK);
    rig_close(&g);
}

/* ------------------------------------------------------- malformed input */

/*
 * Each fault on a fresh server of 2 ranks where rank 1 (endpoint 101,
 * ep[1]) and rank 0 (endpoint 102, ep[2]) have put their blobs and got
 * RDV_ALL; ep[0] (endpoint 100) is an outsider. The offender gets
 * RDV_ERROR naming the fault, the other ranks learn that the rendezvous
 * failed, the fault is logged, the status is SX_ERR_PROTO, and later
 * messages are refused too.
 */
static const struct {
    int offender; /* index into ep[] */
    uint32_t tag;
    uint8_t msg[8];
    size_t len;
    const char *text;
} bad_cases[] = {
    {0, SX_OOB_TAG_RDV_PUT, {0, 0, 0, 0, 2}, 5, "PUT of 5 bytes is shorter than its 8-byte header"},
    {0,
     SX_OOB_TAG_RDV_PUT,
     {2, 0, 0, 0, 2, 0, 0, 0},
     8,
     "PUT of rank 2: out of range (the job has 2 ranks)"},
    {0,
     SX_OOB_TAG_RDV_PUT,
     {0, 0, 0, 0, 3, 0, 0, 0},
     8,
     "says the job has 3 ranks; sx_run started 2"},
    {1, SX_OOB_TAG_RDV_PUT, {1, 0, 0, 0, 2, 0, 0, 0}, 8, "rank 1 sent PUT twice"},
    {0,
     SX_OOB_TAG_RDV_PUT,
     {1, 0, 0, 0, 2, 0, 0, 0},
     8,
     "rank 1 is already spoken for by endpoint 0x65"},
    {0, SX_OOB_TAG_RDV_FENCE, {0, 0, 0, 0, 1, 0, 0}, 7, "FENCE of 7 bytes"},
    {2,
     SX_OOB_TAG_RDV_FENCE,
     {0, 0, 0, 0, 2, 0, 0, 0},
     8,
     "rank 0 entered fence round 2; its next is 1"},
    {2,
     SX_OOB_TAG_RDV_FENCE,
     {0, 0, 0, 0, 0, 0, 0, 0},
     8,
     "rank 0 entered fence round 0; its next is 1"},
    {0, SX_OOB_TAG_RDV_FENCE, {9, 0, 0, 0, 1, 0, 0, 0}, 8, "FENCE of rank 9: out of range"},
};

static void test_malformed_messages(void **state)
{
    (void)state;
    uint8_t all[64];

    for (size_t c = 0; c < sizeof(bad_cases) / sizeof(bad_cases[0]); c++) {
        rig_t g;
        rig_open(&g, 2, 3);
        send_put(g.ep[1], 1, 2, "one");
        send_put(g.ep[2], 0, 2, "zero");
        for (int i = 1; i < 3; i++)
            assert_true(recv_from_launcher(g.ep[i], SX_OOB_TAG_RDV_ALL, all, sizeof(all), WAIT_MS) >
                        0);
        assert_int_equal(sx_rdv_server_status(g.srv), SX_OK);

        int off = bad_cases[c].offender;
        capture_start();
        send_raw(g.ep[off], bad_cases[c].tag, bad_cases[c].msg, bad_cases[c].len);
        expect_error(g.ep[off], bad_cases[c].text);
        char *log = capture_stop();
        assert_contains(log, bad_cases[c].text);
        assert_contains(log, "rendezvous of sx_run");
        free(log);
        assert_int_equal(sx_rdv_server_status(g.srv), SX_ERR_PROTO);
        for (int i = 1; i < 3; i++) {
            if (i != off)
                expect_error(g.ep[i], "the job's rendezvous has failed");
        }

        /* Once failed, always failed: a correct message is refused too. */
        send_fence(g.ep[1], 1, 1);
        expect_error(g.ep[1], "has failed");
        assert_int_equal(sx_rdv_server_status(g.srv), SX_ERR_PROTO);
        rig_close(&g);
    }
}

/* One endpoint speaking for two ranks. */
static void test_endpoint_claims_two_ranks(void **state)
{
    (void)state;
    rig_t g;

    rig_open(&g, 2, 1);
    capture_start();
    send_put(g.ep[0], 1, 2, "one");
    send_put(g.ep[0], 0, 2, "zero"); /* the same connection: in order */
    expect_error(g.ep[0], "claims rank 0 but spoke for rank 1 before");
    free(capture_stop());
    assert_int_equal(sx_rdv_server_status(g.srv), SX_ERR_PROTO);
    rig_close(&g);
}

/* Blobs that would not fit one RDV_ALL: whichever PUT comes second is
 * refused, and both ranks hear of it. */
static void test_blobs_too_big(void **state)
{
    (void)state;
    rig_t g;
    /* The largest PUT there is: alone, its RDV_ALL is exactly the limit. */
    size_t big = SX_OOB_MSG_MAX - 8;
    uint8_t *msg = calloc(1, 8 + big);

    assert_non_null(msg);
    rig_open(&g, 2, 2);
    put_u32(msg, 1);
    put_u32(msg + 4, 2);
    capture_start();
    send_raw(g.ep[1], SX_OOB_TAG_RDV_PUT, msg, 8 + big);
    free(msg);
    send_put(g.ep[0], 0, 2, "");
    expect_error(g.ep[0], "would not fit in one RDV_ALL message");
    expect_error(g.ep[1], "would not fit in one RDV_ALL message");
    free(capture_stop());
    assert_int_equal(sx_rdv_server_status(g.srv), SX_ERR_PROTO);
    rig_close(&g);
}

static void test_open_arguments(void **state)
{
    (void)state;
    sx_rdv_server_t *srv = NULL;
    char addr[SX_OOB_ADDR_MAX];

    assert_int_equal(sx_rdv_server_open(0, &srv), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_rdv_server_open(1, NULL), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_rdv_server_open(1, &srv), SX_OK);
    assert_int_equal(sx_rdv_server_address(srv, addr, sizeof(addr)), SX_OK);
    assert_memory_equal(addr, "127.0.0.1:", 10);
    assert_int_equal(sx_rdv_server_status(srv), SX_OK);
    sx_rdv_server_close(srv);
    sx_rdv_server_close(NULL);
}

/* ------------------------------------------------------ the modex client */

static void set_env(const char *rank, const char *size, const char *addr)
{
    if (rank != NULL)
        setenv(SX_RUN_ENV_RANK, rank, 1);
    else
        unsetenv(SX_RUN_ENV_RANK);
    if (size != NULL)
        setenv(SX_RUN_ENV_SIZE, size, 1);
    else
        unsetenv(SX_RUN_ENV_SIZE);
    if (addr != NULL)
        setenv(SX_RUN_ENV_ADDR, addr, 1);
    else
        unsetenv(SX_RUN_ENV_ADDR);
}

static void test_detect_and_init_errors(void **state)
{
    (void)state;
    sx_oob_t *oob;
    sx_modex_t m = {.ops = &sx_modex_sxrun_ops};

    assert_int_equal(sx_oob_open(7, NULL, 0, &oob), SX_OK);
    set_env(NULL, NULL, NULL);
    assert_false(sx_modex_sxrun_ops.detect());
    set_env("0", "2", NULL);
    assert_false(sx_modex_sxrun_ops.detect());
    set_env("0", "2", "127.0.0.1:9");
    assert_true(sx_modex_sxrun_ops.detect());

    static const struct {
        const char *rank, *size, *addr, *logged;
    } bad[] = {
        {"1x", "2", "127.0.0.1:9", "SX_RUN_RANK='1x'"},
        {"-1", "2", "127.0.0.1:9", "SX_RUN_RANK='-1'"},
        {"", "2", "127.0.0.1:9", "SX_RUN_RANK=''"},
        {" 1", "2", "127.0.0.1:9", "SX_RUN_RANK=' 1'"},
        {"+1", "2", "127.0.0.1:9", "SX_RUN_RANK='+1'"},
        {"2", "2", "127.0.0.1:9", "SX_RUN_RANK='2'"},
        {"0", "0", "127.0.0.1:9", "SX_RUN_SIZE='0'"},
        {"0", "two", "127.0.0.1:9", "SX_RUN_SIZE='two'"},
        {"0", "99999999999", "127.0.0.1:9", "SX_RUN_SIZE='99999999999'"},
        {"0", "0x2", "127.0.0.1:9", "SX_RUN_SIZE='0x2'"},
        {"0", "2", "nowhere", "SX_RUN_ADDR='nowhere'"},
        {"0", "2", "", "SX_RUN_ADDR=''"},
        {"0", "2", "127.0.0.1:99999", "SX_RUN_ADDR='127.0.0.1:99999'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        set_env(bad[i].rank, bad[i].size, bad[i].addr);
        capture_start();
        int rc = sx_modex_sxrun_ops.init(&m, oob);
        char *log = capture_stop();
        if (rc != SX_ERR_INVALID_PARAM)
            fail_msg("case %zu: %s", i, sx_status_name(rc));
        assert_contains(log, bad[i].logged);
        free(log);
    }
    set_env(NULL, NULL, NULL);
    capture_start();
    assert_int_equal(sx_modex_sxrun_ops.init(&m, oob), SX_ERR_NO_LAUNCHER);
    char *log = capture_stop();
    assert_contains(log, "must all be set");
    free(log);
    assert_int_equal(sx_modex_sxrun_ops.init(&m, NULL), SX_ERR_INVALID_PARAM);
    sx_oob_close(oob);
}

typedef struct client {
    sx_oob_t *oob;
    sx_modex_t m;
    int rc;
    const char *blob;
} client_t;

/* Opens @p n modex clients of a job whose launcher is at @p addr; init
 * reads the environment, so it runs here, one client after another. */
static void clients_open(client_t *c, int n, const char *addr)
{
    char rank[16], size[16];

    snprintf(size, sizeof(size), "%d", n);
    for (int i = 0; i < n; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].m.ops = &sx_modex_sxrun_ops;
        assert_int_equal(sx_oob_open(1000 + (uint64_t)i, NULL, 0, &c[i].oob), SX_OK);
        snprintf(rank, sizeof(rank), "%d", i);
        set_env(rank, size, addr);
        assert_int_equal(sx_modex_sxrun_ops.init(&c[i].m, c[i].oob), SX_OK);
        assert_int_equal(c[i].m.rank, (uint32_t)i);
        assert_int_equal(c[i].m.size, (uint32_t)n);
    }
    set_env(NULL, NULL, NULL);
}

static void clients_close(client_t *c, int n)
{
    for (int i = 0; i < n; i++) {
        sx_modex_sxrun_ops.fini(&c[i].m);
        sx_oob_close(c[i].oob);
    }
}

static void *exchange_thread(void *arg)
{
    client_t *c = arg;
    c->rc = sx_modex_sxrun_ops.exchange(&c->m, c->blob, strlen(c->blob));
    return NULL;
}

/* Exchanges in threads, one per client (exchange blocks). */
static void clients_exchange(client_t *c, int n, int skip)
{
    pthread_t t[8];
    for (int i = 0; i < n; i++) {
        if (i != skip)
            assert_int_equal(pthread_create(&t[i], NULL, exchange_thread, &c[i]), 0);
    }
    for (int i = 0; i < n; i++) {
        if (i != skip)
            pthread_join(t[i], NULL);
    }
}

typedef struct fence_rec {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls;
    int status;
} fence_rec_t;

#define FENCE_REC_INIT                                                \
    {                                                                 \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, SX_OK \
    }

static void on_fence(void *arg, int status)
{
    fence_rec_t *f = arg;
    pthread_mutex_lock(&f->lock);
    f->calls++;
    f->status = status;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

static void fence_wait(fence_rec_t *f, int calls)
{
    pthread_mutex_lock(&f->lock);
    while (f->calls < calls)
        pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
}

static int fence_calls(fence_rec_t *f)
{
    pthread_mutex_lock(&f->lock);
    int n = f->calls;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static void test_modex_exchange_get_fence(void **state)
{
    (void)state;
    sx_rdv_server_t *srv;
    char addr[SX_OOB_ADDR_MAX], buf[64];
    client_t c[3];
    static const char *const blobs[] = {"zero", "", "two two"};

    assert_int_equal(sx_rdv_server_open(3, &srv), SX_OK);
    assert_int_equal(sx_rdv_server_address(srv, addr, sizeof(addr)), SX_OK);
    clients_open(c, 3, addr);
    size_t len = sizeof(buf);
    assert_int_equal(sx_modex_sxrun_ops.get(&c[0].m, 0, buf, &len), SX_ERR_NOT_FOUND);
    for (int i = 0; i < 3; i++)
        c[i].blob = blobs[i];
    clients_exchange(c, 3, -1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(c[i].rc, SX_OK);
        for (uint32_t r = 0; r < 3; r++) {
            len = sizeof(buf);
            assert_int_equal(sx_modex_sxrun_ops.get(&c[i].m, r, buf, &len), SX_OK);
            assert_int_equal(len, strlen(blobs[r]));
            assert_memory_equal(buf, blobs[r], len);
        }
        len = 3;
        assert_int_equal(sx_modex_sxrun_ops.get(&c[i].m, 2, buf, &len), SX_ERR_TRUNCATED);
        assert_int_equal(len, 7);
        len = 0;
        assert_int_equal(sx_modex_sxrun_ops.get(&c[i].m, 1, NULL, &len), SX_OK);
        assert_int_equal(len, 0);
        len = sizeof(buf);
        assert_int_equal(sx_modex_sxrun_ops.get(&c[i].m, 3, buf, &len), SX_ERR_OUT_OF_RANGE);
    }
    /* A second exchange is refused. */
    capture_start();
    assert_int_equal(sx_modex_sxrun_ops.exchange(&c[0].m, "x", 1), SX_ERR_EXISTS);
    char *log = capture_stop();
    assert_contains(log, "exchange called twice");
    free(log);

    /* Three fences each, all entered before any completes: every callback
     * runs once, with SX_OK, and none before the last rank entered. */
    fence_rec_t f[3] = {FENCE_REC_INIT, FENCE_REC_INIT, FENCE_REC_INIT};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[0].m, on_fence, &f[0]), SX_OK);
        assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[1].m, on_fence, &f[1]), SX_OK);
    }
    assert_int_equal(fence_calls(&f[0]), 0);
    for (int k = 0; k < 3; k++)
        assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[2].m, on_fence, &f[2]), SX_OK);
    for (int i = 0; i < 3; i++) {
        fence_wait(&f[i], 3);
        assert_int_equal(f[i].status, SX_OK);
    }
    assert_int_equal(sx_rdv_server_status(srv), SX_OK);
    clients_close(c, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fence_calls(&f[i]), 3);
    sx_rdv_server_close(srv);
}

/* The launcher reports an error: a waiting exchange returns SX_ERR_PROTO
 * and logs the launcher's text; a pending fence completes with it. */
static void test_modex_launcher_error(void **state)
{
    (void)state;
    sx_rdv_server_t *srv;
    char addr[SX_OOB_ADDR_MAX];
    client_t c[2];
    sx_oob_t *rogue;

    /* During the exchange: rank 0 waits, a rogue claims rank 0 too. */
    assert_int_equal(sx_rdv_server_open(2, &srv), SX_OK);
    assert_int_equal(sx_rdv_server_address(srv, addr, sizeof(addr)), SX_OK);
    clients_open(c, 2, addr);
    assert_int_equal(sx_oob_open(77, NULL, 0, &rogue), SX_OK);
    assert_int_equal(sx_oob_peer_set(rogue, SX_OOB_ID_LAUNCHER, addr), SX_OK);
    c[0].blob = "card";
    capture_start();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, exchange_thread, &c[0]), 0);
    /* The rogue's PUT may come before rank 0's: then rank 0 is the one
     * refused. Either way the exchange fails. */
    send_put(rogue, 0, 2, "rogue");
    pthread_join(t, NULL);
    char *log = capture_stop();
    assert_int_equal(c[0].rc, SX_ERR_PROTO);
    assert_contains(log, "the sx_run launcher reports");
    assert_contains(log, "rank 0 is already spoken for");
    free(log);
    /* The modex is failed for good. */
    fence_rec_t f = FENCE_REC_INIT;
    assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[0].m, on_fence, &f), SX_ERR_PROTO);
    clients_close(c, 2);
    sx_oob_close(rogue);
    sx_rdv_server_close(srv);

    /* During a fence. */
    assert_int_equal(sx_rdv_server_open(2, &srv), SX_OK);
    assert_int_equal(sx_rdv_server_address(srv, addr, sizeof(addr)), SX_OK);
    clients_open(c, 2, addr);
    c[0].blob = "a";
    c[1].blob = "b";
    clients_exchange(c, 2, -1);
    assert_int_equal(c[0].rc, SX_OK);
    assert_int_equal(c[1].rc, SX_OK);
    assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[0].m, on_fence, &f), SX_OK);
    assert_int_equal(sx_oob_open(78, NULL, 0, &rogue), SX_OK);
    assert_int_equal(sx_oob_peer_set(rogue, SX_OOB_ID_LAUNCHER, addr), SX_OK);
    capture_start();
    send_fence(rogue, 1, 1); /* rank 1 belongs to another endpoint */
    fence_wait(&f, 1);
    free(capture_stop());
    assert_int_equal(f.status, SX_ERR_PROTO);
    clients_close(c, 2);
    assert_int_equal(fence_calls(&f), 1);
    sx_oob_close(rogue);
    sx_rdv_server_close(srv);
}

/* Whether @p f has @p calls completions within @p ms. */
static bool fence_wait_ms(fence_rec_t *f, int calls, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&f->lock);
    while (f->calls < calls && pthread_cond_timedwait(&f->cond, &f->lock, &until) == 0)
        ;
    bool ok = f->calls >= calls;
    pthread_mutex_unlock(&f->lock);
    return ok;
}

/*
 * The launcher goes away while a rank waits in a fence (sx_run killed,
 * a rank that outlived it): the rank's fence completes with SX_ERR_IO and
 * says why, instead of waiting for an RDV_DONE nobody can send
 * (sx_job_barrier spun forever). The launcher here is a bare OOB endpoint
 * under the launcher's id, so the test knows the FENCE arrived before it
 * closes; the same for an exchange waiting for RDV_ALL.
 */
static void test_modex_launcher_gone(void **state)
{
    (void)state;
    char addr[SX_OOB_ADDR_MAX], msg[64];
    client_t c[2];
    sx_oob_t *launcher;

    for (int during_exchange = 0; during_exchange < 2; during_exchange++) {
        assert_int_equal(sx_oob_open(SX_OOB_ID_LAUNCHER, "127.0.0.1", 0, &launcher), SX_OK);
        assert_int_equal(sx_oob_address(launcher, addr, sizeof(addr)), SX_OK);
        clients_open(c, 2, addr);
        fence_rec_t f = FENCE_REC_INIT;
        pthread_t t;
        uint32_t tag = during_exchange ? SX_OOB_TAG_RDV_PUT : SX_OOB_TAG_RDV_FENCE;
        capture_start();
        if (during_exchange) {
            c[0].blob = "card";
            assert_int_equal(pthread_create(&t, NULL, exchange_thread, &c[0]), 0);
        } else {
            assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[0].m, on_fence, &f), SX_OK);
        }
        uint64_t peer = SX_OOB_PEER_ANY;
        struct iovec iov = {msg, sizeof(msg)};
        size_t len = 0;
        assert_int_equal(sx_oob_recv(launcher, &peer, &tag, &iov, 1, 0, WAIT_MS, &len), SX_OK);
        sx_oob_close(launcher); /* the rank's message arrived; no answer will */
        if (during_exchange) {
            pthread_join(t, NULL);
            assert_int_equal(c[0].rc, SX_ERR_IO);
        } else {
            if (!fence_wait_ms(&f, 1, WAIT_MS))
                fail_msg("the fence still waits %d ms after the launcher went", WAIT_MS);
            assert_int_equal(f.status, SX_ERR_IO);
            /* Its round is spent: the next fence fails at once, with the
             * same cause, and calls nothing. */
            assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[0].m, on_fence, &f), SX_ERR_IO);
        }
        char *log = capture_stop();
        assert_contains(log, "no connection to it is left");
        if (!during_exchange)
            assert_contains(log,
                            "fence round 1 failed: the connection to the sx_run launcher is gone");
        if (!during_exchange)
            assert_contains(log, "the modex cannot be used any more");
        free(log);
        clients_close(c, 2);
        assert_int_equal(fence_calls(&f), during_exchange ? 0 : 1);
    }
}

/* fini with a fence pending completes it with SX_ERR_CANCELED, once; the
 * OOB endpoint closing afterwards calls nothing more. */
static void test_modex_fini_cancels(void **state)
{
    (void)state;
    sx_rdv_server_t *srv;
    char addr[SX_OOB_ADDR_MAX];
    client_t c[2];
    fence_rec_t f = FENCE_REC_INIT;

    assert_int_equal(sx_rdv_server_open(2, &srv), SX_OK);
    assert_int_equal(sx_rdv_server_address(srv, addr, sizeof(addr)), SX_OK);
    clients_open(c, 2, addr);
    assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[0].m, on_fence, &f), SX_OK);
    assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[0].m, on_fence, &f), SX_OK);
    sx_modex_sxrun_ops.fini(&c[0].m);
    assert_int_equal(fence_calls(&f), 2);
    assert_int_equal(f.status, SX_ERR_CANCELED);
    sx_oob_close(c[0].oob);
    sx_modex_sxrun_ops.fini(&c[1].m);
    sx_oob_close(c[1].oob);
    assert_int_equal(fence_calls(&f), 2);
    sx_rdv_server_close(srv);

    /* Closing the endpoint first, then fini: the same, once each. */
    fence_rec_t g = FENCE_REC_INIT;
    assert_int_equal(sx_rdv_server_open(2, &srv), SX_OK);
    assert_int_equal(sx_rdv_server_address(srv, addr, sizeof(addr)), SX_OK);
    clients_open(c, 2, addr);
    assert_int_equal(sx_modex_sxrun_ops.fence_nb(&c[0].m, on_fence, &g), SX_OK);
    sx_oob_close(c[0].oob);
    assert_int_equal(fence_calls(&g), 1);
    assert_int_equal(g.status, SX_ERR_SHUTDOWN);
    sx_modex_sxrun_ops.fini(&c[0].m);
    assert_int_equal(fence_calls(&g), 1);
    sx_modex_sxrun_ops.fini(&c[1].m);
    sx_oob_close(c[1].oob);
    sx_rdv_server_close(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_arguments),
        cmocka_unit_test(test_put_all_and_fences),
        cmocka_unit_test(test_malformed_messages),
        cmocka_unit_test(test_endpoint_claims_two_ranks),
        cmocka_unit_test(test_blobs_too_big),
        cmocka_unit_test(test_detect_and_init_errors),
        cmocka_unit_test(test_modex_exchange_get_fence),
        cmocka_unit_test(test_modex_launcher_error),
        cmocka_unit_test(test_modex_fini_cancels),
        cmocka_unit_test(test_modex_launcher_gone),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
