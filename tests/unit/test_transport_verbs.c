/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The verbs transport: its device-independent parts (verbs_addr.c) on any
 * machine, namely the card address and every way a card can be malformed,
 * the address-handle cache (hits, references, eviction, refusal when full,
 * destruction at close) through counting callbacks, and the sizing of
 * queues against made-up device limits; and, when libibverbs was found at
 * build time, what the transport says on this machine. Without an RDMA
 * device, query, selection and engine creation must say so clearly, and
 * the default engine must fall back to udp; with one (ibv_get_device_list
 * decides), those assertions give way to the ones a device allows.
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

#include "build_config.h"
#include "test_filter.h"
#include "log_capture.h"
#include "transports/transport.h"
#include "transports/verbs_addr.h"

#if SX_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

/* ------------------------------------------------------------------ */
/* Addresses                                                            */

static sx_verbs_addr_t ib_addr(void)
{
    sx_verbs_addr_t a = {.lid = 0x12, .qpn = 0x1234, .qkey = 0x5358514b, .port = 1, .sl = 3};
    static const uint8_t gid[16] = {0xfe, 0x80, 0,    0,    0,    0,    0,    0,
                                    0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
    memcpy(a.gid, gid, sizeof(gid));
    return a;
}

static sx_verbs_addr_t roce_addr(void)
{
    /* RoCE v2 over IPv4: the GID is the IPv4-mapped address 192.0.2.7. */
    sx_verbs_addr_t a = {
        .qpn = 0xabcdef, .qkey = 0x11, .port = 2, .sl = 0, .flags = SX_VERBS_ADDR_GLOBAL};
    static const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7};
    memcpy(a.gid, gid, sizeof(gid));
    return a;
}

static void assert_addr_equal(const sx_verbs_addr_t *a, const sx_verbs_addr_t *b)
{
    assert_memory_equal(a->gid, b->gid, sizeof(a->gid));
    assert_int_equal(a->lid, b->lid);
    assert_int_equal(a->qpn, b->qpn);
    assert_int_equal(a->qkey, b->qkey);
    assert_int_equal(a->port, b->port);
    assert_int_equal(a->sl, b->sl);
    assert_int_equal(a->flags, b->flags);
}

static void test_addr_round_trip(void **state)
{
    (void)state;
    const sx_verbs_addr_t in[] = {ib_addr(), roce_addr()};
    uint8_t buf[SX_VERBS_ADDR_LEN + 8];

    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        size_t len = 0;
        sx_verbs_addr_t out;
        memset(buf, 0xee, sizeof(buf));
        assert_int_equal(sx_verbs_addr_encode(&in[i], buf, sizeof(buf), &len), SX_OK);
        assert_int_equal(len, SX_VERBS_ADDR_LEN);
        assert_int_equal(buf[SX_VERBS_ADDR_LEN], 0xee); /* nothing past the address */
        assert_int_equal(sx_verbs_addr_decode(buf, len, &out), SX_OK);
        assert_addr_equal(&out, &in[i]);
    }

    /* The layout, byte by byte (verbs_addr.c): little-endian integers. */
    sx_verbs_addr_t a = ib_addr();
    size_t len = 0;
    a.qkey = 0x04030201;
    assert_int_equal(sx_verbs_addr_encode(&a, buf, SX_VERBS_ADDR_LEN, &len), SX_OK);
    assert_int_equal(buf[0], 1);                          /* version */
    assert_int_equal(buf[1], 0);                          /* flags */
    assert_int_equal(buf[2], 1);                          /* port */
    assert_int_equal(buf[3], 3);                          /* sl */
    assert_memory_equal(buf + 4, "\x12\x00", 2);          /* LID */
    assert_memory_equal(buf + 6, "\x34\x12\x00\x00", 4);  /* QPN */
    assert_memory_equal(buf + 10, "\x01\x02\x03\x04", 4); /* Q_Key */
    assert_memory_equal(buf + 14, a.gid, 16);             /* GID */
    a = roce_addr();
    assert_int_equal(sx_verbs_addr_encode(&a, buf, SX_VERBS_ADDR_LEN, &len), SX_OK);
    assert_int_equal(buf[1], SX_VERBS_ADDR_GLOBAL);
    assert_memory_equal(buf + 6, "\xef\xcd\xab\x00", 4);
}

static void test_addr_encode_refuses(void **state)
{
    (void)state;
    uint8_t buf[SX_VERBS_ADDR_LEN];
    size_t len = 77;
    sx_verbs_addr_t a = ib_addr();

    assert_int_equal(sx_verbs_addr_encode(&a, buf, SX_VERBS_ADDR_LEN - 1, &len),
                     SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_addr_encode(NULL, buf, sizeof(buf), &len), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_addr_encode(&a, NULL, sizeof(buf), &len), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_addr_encode(&a, buf, sizeof(buf), NULL), SX_ERR_INVALID_PARAM);

    /* What decode would refuse is never written into a card. */
    const struct {
        uint32_t qpn;
        uint16_t lid;
        uint8_t flags, sl;
    } bad[] = {
        {0x1000000, 0x12, 0, 0},  /* QPN over 24 bits */
        {0xffffffff, 0x12, 0, 0}, /* ... */
        {0, 0x12, 0, 0},          /* QPN 0: the SMI queue pair */
        {1, 0x12, 0, 0},          /* QPN 1: the GSI queue pair */
        {0x1234, 0, 0, 0},        /* no LID and no GRH */
        {0x1234, 0x12, 0x02, 0},  /* a reserved flag */
        {0x1234, 0x12, 0x80 | SX_VERBS_ADDR_GLOBAL, 0},
        {0x1234, 0x12, 0, 16}, /* an SL is four bits */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        a = ib_addr();
        a.qpn = bad[i].qpn;
        a.lid = bad[i].lid;
        a.flags = bad[i].flags;
        a.sl = bad[i].sl;
        if (sx_verbs_addr_encode(&a, buf, sizeof(buf), &len) != SX_ERR_INVALID_PARAM)
            fail_msg("case %zu was encoded", i);
    }
    assert_int_equal(len, 77); /* written only on success */

    /* The largest QPN is fine. */
    a = ib_addr();
    a.qpn = 0xffffff;
    assert_int_equal(sx_verbs_addr_encode(&a, buf, sizeof(buf), &len), SX_OK);
}

/* Encodes a good address and lets @p mutate spoil it; decode must refuse
 * it and leave its output alone. */
static void expect_decode_refused(const uint8_t *bytes, size_t len, const char *what)
{
    sx_verbs_addr_t out;
    memset(&out, 0x5a, sizeof(out));
    sx_verbs_addr_t before = out;

    if (sx_verbs_addr_decode(bytes, len, &out) != SX_ERR_INVALID_PARAM)
        fail_msg("decode accepted %s", what);
    assert_memory_equal(&out, &before, sizeof(out));
}

static void test_addr_decode_refuses(void **state)
{
    (void)state;
    uint8_t good[SX_VERBS_ADDR_LEN + 1], b[SX_VERBS_ADDR_LEN + 1];
    size_t len = 0;
    sx_verbs_addr_t a = ib_addr(), out;

    assert_int_equal(sx_verbs_addr_encode(&a, good, sizeof(good), &len), SX_OK);
    good[SX_VERBS_ADDR_LEN] = 0;

    /* Lengths: every one but the right one. */
    for (size_t l = 0; l <= SX_VERBS_ADDR_LEN + 1; l++) {
        if (l != SX_VERBS_ADDR_LEN)
            expect_decode_refused(good, l, "a wrong length");
    }
    assert_int_equal(sx_verbs_addr_decode(NULL, SX_VERBS_ADDR_LEN, &out), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_addr_decode(good, SX_VERBS_ADDR_LEN, NULL), SX_ERR_INVALID_PARAM);

    /* Versions. */
    for (unsigned v = 0; v < 256; v++) {
        if (v == 1)
            continue;
        memcpy(b, good, sizeof(b));
        b[0] = (uint8_t)v;
        expect_decode_refused(b, SX_VERBS_ADDR_LEN, "an unknown version");
    }
    /* Reserved flags, each bit alone and with the global one. */
    for (unsigned bit = 1; bit < 8; bit++) {
        memcpy(b, good, sizeof(b));
        b[1] = (uint8_t)(1u << bit);
        expect_decode_refused(b, SX_VERBS_ADDR_LEN, "a reserved flag");
        b[1] |= SX_VERBS_ADDR_GLOBAL;
        expect_decode_refused(b, SX_VERBS_ADDR_LEN, "a reserved flag with the global one");
    }
    /* Special and oversized QPNs. */
    static const uint8_t qpns[][4] = {
        {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 1}, {0xff, 0xff, 0xff, 0xff}, {2, 0, 0, 0x80}};
    for (size_t i = 0; i < sizeof(qpns) / sizeof(qpns[0]); i++) {
        memcpy(b, good, sizeof(b));
        memcpy(b + 6, qpns[i], 4);
        expect_decode_refused(b, SX_VERBS_ADDR_LEN, "a special or oversized QPN");
    }
    memcpy(b, good, sizeof(b));
    memcpy(b + 6, "\x02\x00\x00\x00", 4);
    assert_int_equal(sx_verbs_addr_decode(b, SX_VERBS_ADDR_LEN, &out), SX_OK);
    assert_int_equal(out.qpn, 2);
    /* LID 0 needs the global flag. */
    memcpy(b, good, sizeof(b));
    b[4] = b[5] = 0;
    expect_decode_refused(b, SX_VERBS_ADDR_LEN, "LID 0 without a GRH");
    b[1] = SX_VERBS_ADDR_GLOBAL;
    assert_int_equal(sx_verbs_addr_decode(b, SX_VERBS_ADDR_LEN, &out), SX_OK);
    /* SL above 15. */
    memcpy(b, good, sizeof(b));
    b[3] = 16;
    expect_decode_refused(b, SX_VERBS_ADDR_LEN, "an SL over 15");
}

static void test_addr_str(void **state)
{
    (void)state;
    uint8_t buf[SX_VERBS_ADDR_LEN];
    size_t len = 0;
    char text[160];
    sx_verbs_addr_t a = ib_addr();

    assert_int_equal(sx_verbs_addr_encode(&a, buf, sizeof(buf), &len), SX_OK);
    sx_verbs_addr_str(buf, len, text, sizeof(text));
    assert_non_null(strstr(text, "lid 0x12"));
    assert_non_null(strstr(text, "qpn 0x1234"));
    assert_non_null(strstr(text, "gid fe80::211:22ff:fe33:4455"));
    assert_non_null(strstr(text, "sl 3"));
    assert_null(strstr(text, "grh"));

    a = roce_addr();
    assert_int_equal(sx_verbs_addr_encode(&a, buf, sizeof(buf), &len), SX_OK);
    sx_verbs_addr_str(buf, len, text, sizeof(text));
    assert_non_null(strstr(text, "lid 0x0 "));
    assert_non_null(strstr(text, "qpn 0xabcdef"));
    assert_non_null(strstr(text, "::ffff:192.0.2.7"));
    assert_non_null(strstr(text, "grh"));

    sx_verbs_addr_str(buf, len - 1, text, sizeof(text));
    assert_string_equal(text, "invalid verbs address");
    sx_verbs_addr_str(NULL, 0, text, sizeof(text));
    assert_string_equal(text, "invalid verbs address");
    /* Short outputs are cut, never overrun. */
    memset(text, 'x', sizeof(text));
    sx_verbs_addr_str(buf, len, text, 8);
    assert_int_equal(strlen(text), 7);
    assert_int_equal(text[8], 'x');
    sx_verbs_addr_str(buf, len, text, 0); /* writes nothing */
    assert_int_equal(text[0], 'l');
}

/* ------------------------------------------------------------------ */
/* The address-handle cache                                             */

typedef struct fake_ah {
    sx_verbs_ah_key_t key;
    unsigned serial;
} fake_ah_t;

typedef struct ah_counts {
    unsigned created, destroyed;
    int fail_with;        /* the next create's status when not SX_OK */
    bool null_handle;     /* the next create succeeds without a handle */
    fake_ah_t *last_gone; /* what destroy saw last (freed; compared only) */
    unsigned last_gone_serial;
} ah_counts_t;

static int fake_create(void *arg, const sx_verbs_ah_key_t *key, void **handle_p)
{
    ah_counts_t *c = arg;

    if (c->fail_with != SX_OK) {
        int rc = c->fail_with;
        c->fail_with = SX_OK;
        return rc;
    }
    if (c->null_handle) {
        c->null_handle = false;
        *handle_p = NULL;
        return SX_OK;
    }
    fake_ah_t *h = malloc(sizeof(*h));
    assert_non_null(h);
    h->key = *key;
    h->serial = ++c->created;
    *handle_p = h;
    return SX_OK;
}

static void fake_destroy(void *arg, void *handle)
{
    ah_counts_t *c = arg;
    fake_ah_t *h = handle;

    c->destroyed++;
    c->last_gone = h;
    c->last_gone_serial = h->serial;
    free(h);
}

static sx_verbs_ah_cache_t *new_cache(unsigned max, ah_counts_t *counts)
{
    sx_verbs_ah_ops_t ops = {.create = fake_create, .destroy = fake_destroy, .arg = counts};
    sx_verbs_ah_cache_t *c = NULL;

    memset(counts, 0, sizeof(*counts));
    assert_int_equal(sx_verbs_ah_cache_create(max, &ops, &c), SX_OK);
    assert_non_null(c);
    return c;
}

static sx_verbs_ah_key_t key_of(uint16_t lid)
{
    sx_verbs_ah_key_t k;
    memset(&k, 0, sizeof(k));
    k.lid = lid;
    k.port = 1;
    return k;
}

static sx_verbs_ah_stats_t stats_of(const sx_verbs_ah_cache_t *c)
{
    sx_verbs_ah_stats_t s;
    memset(&s, 0xff, sizeof(s));
    sx_verbs_ah_cache_stats(c, &s);
    return s;
}

static void test_ah_cache_hits_and_refs(void **state)
{
    (void)state;
    ah_counts_t n;
    sx_verbs_ah_cache_t *c = new_cache(8, &n);
    sx_verbs_ah_key_t a = key_of(5);
    uint32_t r1, r2, r3;
    void *h1 = NULL, *h2 = NULL, *h3 = NULL;

    assert_int_equal(sx_verbs_ah_acquire(c, &a, &r1, &h1), SX_OK);
    assert_int_equal(n.created, 1);
    assert_int_equal(((fake_ah_t *)h1)->key.lid, 5);
    /* The same key again, even built separately: a hit, the same handle. */
    sx_verbs_ah_key_t same = key_of(5);
    assert_int_equal(sx_verbs_ah_acquire(c, &same, &r2, &h2), SX_OK);
    assert_ptr_equal(h1, h2);
    assert_int_equal(r1, r2);
    assert_int_equal(n.created, 1);
    sx_verbs_ah_stats_t s = stats_of(c);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.referenced, 1);

    /* Two references: the first release keeps it referenced, the second
     * leaves it cached, and nothing is destroyed. */
    sx_verbs_ah_release(c, r1);
    assert_int_equal(stats_of(c).referenced, 1);
    sx_verbs_ah_release(c, r2);
    s = stats_of(c);
    assert_int_equal(s.referenced, 0);
    assert_int_equal(s.entries, 1);
    assert_int_equal(n.destroyed, 0);
    /* A release too many, or of nothing, changes nothing. */
    sx_verbs_ah_release(c, r2);
    sx_verbs_ah_release(c, 999);
    sx_verbs_ah_release(NULL, 0);
    assert_int_equal(stats_of(c).entries, 1);
    /* Unreferenced but cached: still a hit. */
    assert_int_equal(sx_verbs_ah_acquire(c, &a, &r3, &h3), SX_OK);
    assert_ptr_equal(h3, h1);
    assert_int_equal(n.created, 1);
    assert_int_equal(stats_of(c).referenced, 1);

    /* Every field of the key tells handles apart. */
    sx_verbs_ah_key_t variants[6];
    for (size_t i = 0; i < 6; i++)
        variants[i] = key_of(5);
    variants[0].sl = 1;
    variants[1].port = 2;
    variants[2].lid = 6;
    variants[3].flags = SX_VERBS_ADDR_GLOBAL;
    variants[4].gid[15] = 1;
    variants[5].gid[0] = 0xfe;
    void *hv[6];
    for (size_t i = 0; i < 6; i++) {
        uint32_t r;
        assert_int_equal(sx_verbs_ah_acquire(c, &variants[i], &r, &hv[i]), SX_OK);
        assert_ptr_not_equal(hv[i], h1);
        for (size_t j = 0; j < i; j++)
            assert_ptr_not_equal(hv[i], hv[j]);
    }
    assert_int_equal(n.created, 7);
    assert_int_equal(stats_of(c).entries, 7);

    /* Destroy-all at close, referenced or not. */
    sx_verbs_ah_cache_destroy(c);
    assert_int_equal(n.destroyed, 7);
    sx_verbs_ah_cache_destroy(NULL);
}

static void test_ah_cache_eviction(void **state)
{
    (void)state;
    ah_counts_t n;
    sx_verbs_ah_cache_t *c = new_cache(3, &n);
    sx_verbs_ah_key_t k[6];
    uint32_t r[6];
    void *h[6];

    for (uint16_t i = 0; i < 6; i++)
        k[i] = key_of((uint16_t)(100 + i));
    for (int i = 0; i < 3; i++)
        assert_int_equal(sx_verbs_ah_acquire(c, &k[i], &r[i], &h[i]), SX_OK);

    /* Full of referenced handles: a new key is refused, nothing created
     * or destroyed, and the cached ones still hit. */
    assert_int_equal(sx_verbs_ah_acquire(c, &k[3], &r[3], &h[3]), SX_ERR_FULL);
    assert_int_equal(n.created, 3);
    assert_int_equal(n.destroyed, 0);
    uint32_t rx;
    void *hx;
    assert_int_equal(sx_verbs_ah_acquire(c, &k[0], &rx, &hx), SX_OK);
    assert_ptr_equal(hx, h[0]);
    sx_verbs_ah_release(c, rx);

    /* One unreferenced: it, and only it, makes room. */
    unsigned serial1 = ((fake_ah_t *)h[1])->serial;
    sx_verbs_ah_release(c, r[1]);
    assert_int_equal(sx_verbs_ah_acquire(c, &k[3], &r[3], &h[3]), SX_OK);
    assert_int_equal(n.destroyed, 1);
    assert_int_equal(n.last_gone_serial, serial1);
    sx_verbs_ah_stats_t s = stats_of(c);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.entries, 3);
    assert_int_equal(s.referenced, 3);
    /* The evicted key is a miss now, and there is no room for it. */
    assert_int_equal(sx_verbs_ah_acquire(c, &k[1], &r[1], &h[1]), SX_ERR_FULL);

    /* Least recently released goes first: release 2, then 0. */
    unsigned serial2 = ((fake_ah_t *)h[2])->serial, serial0 = ((fake_ah_t *)h[0])->serial;
    sx_verbs_ah_release(c, r[2]);
    sx_verbs_ah_release(c, r[0]);
    assert_int_equal(sx_verbs_ah_acquire(c, &k[4], &r[4], &h[4]), SX_OK);
    assert_int_equal(n.last_gone_serial, serial2);
    /* A hit takes an entry off the eviction list: 0 is referenced again,
     * so the next miss finds nothing to evict. */
    assert_int_equal(sx_verbs_ah_acquire(c, &k[0], &r[0], &h[0]), SX_OK);
    assert_int_equal(((fake_ah_t *)h[0])->serial, serial0);
    assert_int_equal(sx_verbs_ah_acquire(c, &k[5], &r[5], &h[5]), SX_ERR_FULL);

    /* A failing create changes nothing, not even an eviction that would
     * have made room. */
    sx_verbs_ah_release(c, r[0]);
    n.fail_with = SX_ERR_PEER_UNREACHABLE;
    unsigned destroyed = n.destroyed;
    assert_int_equal(sx_verbs_ah_acquire(c, &k[5], &r[5], &h[5]), SX_ERR_PEER_UNREACHABLE);
    assert_int_equal(n.destroyed, destroyed);
    assert_int_equal(stats_of(c).entries, 3);
    assert_int_equal(sx_verbs_ah_acquire(c, &k[0], &r[0], &h[0]), SX_OK);
    assert_int_equal(((fake_ah_t *)h[0])->serial, serial0);
    sx_verbs_ah_release(c, r[0]);
    /* A callback that reports success without a handle is an error. */
    n.null_handle = true;
    assert_int_equal(sx_verbs_ah_acquire(c, &k[5], &r[5], &h[5]), SX_ERR_INTERNAL);
    assert_int_equal(n.destroyed, destroyed);

    s = stats_of(c);
    unsigned created = n.created;
    sx_verbs_ah_cache_destroy(c);
    assert_int_equal(n.destroyed, created);
    assert_int_equal(s.entries, created - destroyed);
}

static void test_ah_cache_growth(void **state)
{
    (void)state;
    ah_counts_t n;
    sx_verbs_ah_cache_t *c = new_cache(1000, &n);
    enum { KEYS = 700 };
    static void *h[KEYS];
    static uint32_t r[KEYS];

    /* Many keys cross several growths of the table (and its rehashes);
     * every one still hits afterwards with its own handle. */
    for (unsigned i = 0; i < KEYS; i++) {
        sx_verbs_ah_key_t k = key_of((uint16_t)(i + 1));
        k.flags = SX_VERBS_ADDR_GLOBAL;
        k.gid[15] = (uint8_t)i;
        assert_int_equal(sx_verbs_ah_acquire(c, &k, &r[i], &h[i]), SX_OK);
    }
    for (unsigned i = 0; i < KEYS; i++) {
        sx_verbs_ah_key_t k = key_of((uint16_t)(i + 1));
        k.flags = SX_VERBS_ADDR_GLOBAL;
        k.gid[15] = (uint8_t)i;
        uint32_t ref;
        void *again;
        assert_int_equal(sx_verbs_ah_acquire(c, &k, &ref, &again), SX_OK);
        assert_ptr_equal(again, h[i]);
        assert_int_equal(ref, r[i]);
        sx_verbs_ah_release(c, ref);
        sx_verbs_ah_release(c, r[i]);
    }
    sx_verbs_ah_stats_t s = stats_of(c);
    assert_int_equal(s.misses, KEYS);
    assert_int_equal(s.hits, KEYS);
    assert_int_equal(s.referenced, 0);
    assert_int_equal(n.created, KEYS);
    sx_verbs_ah_cache_destroy(c);
    assert_int_equal(n.destroyed, KEYS);
}

static void test_ah_cache_parameters(void **state)
{
    (void)state;
    ah_counts_t n = {0};
    sx_verbs_ah_ops_t ops = {.create = fake_create, .destroy = fake_destroy, .arg = &n};
    sx_verbs_ah_ops_t no_destroy = {.create = fake_create, .arg = &n};
    sx_verbs_ah_cache_t *c = (sx_verbs_ah_cache_t *)(void *)&n;

    assert_int_equal(sx_verbs_ah_cache_create(0, &ops, &c), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_ah_cache_create((1u << 20) + 1, &ops, &c), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_ah_cache_create(4, NULL, &c), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_ah_cache_create(4, &no_destroy, &c), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_ah_cache_create(4, &ops, NULL), SX_ERR_INVALID_PARAM);
    assert_ptr_equal(c, (sx_verbs_ah_cache_t *)(void *)&n); /* untouched */

    c = new_cache(1, &n);
    sx_verbs_ah_key_t k = key_of(1);
    uint32_t r;
    void *h;
    assert_int_equal(sx_verbs_ah_acquire(NULL, &k, &r, &h), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_ah_acquire(c, NULL, &r, &h), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_ah_acquire(c, &k, NULL, &h), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_ah_acquire(c, &k, &r, NULL), SX_ERR_INVALID_PARAM);
    /* A cache of one: each new key evicts the last, once it is released. */
    for (uint16_t lid = 1; lid <= 5; lid++) {
        k = key_of(lid);
        assert_int_equal(sx_verbs_ah_acquire(c, &k, &r, &h), SX_OK);
        sx_verbs_ah_release(c, r);
    }
    assert_int_equal(n.created, 5);
    assert_int_equal(n.destroyed, 4);
    assert_int_equal(stats_of(c).evictions, 4);
    sx_verbs_ah_cache_destroy(c);
    assert_int_equal(n.destroyed, 5);
}

/* ------------------------------------------------------------------ */
/* Queue sizing                                                         */

static sx_verbs_dev_limits_t big_device(void)
{
    /* What a ConnectX reports: deep queues, 30 SGEs, a 4096-byte port. */
    return (sx_verbs_dev_limits_t){.max_qp_wr = 32768,
                                   .max_cqe = 4194303,
                                   .max_sge = 30,
                                   .max_inline_data = 0,
                                   .active_mtu = 5 /* IBV_MTU_4096 */};
}

static void check_sizing_invariants(const sx_verbs_dev_limits_t *d, const sx_verbs_sizing_t *s)
{
    assert_true(s->sq_depth >= SX_VERBS_SQ_MIN && s->sq_depth <= SX_VERBS_SQ_MAX);
    assert_true(s->rq_depth >= SX_VERBS_RQ_MIN && s->rq_depth <= SX_VERBS_RQ_MAX);
    assert_true(s->sq_depth <= d->max_qp_wr && s->rq_depth <= d->max_qp_wr);
    assert_true(s->send_cqe >= s->sq_depth && s->send_cqe <= d->max_cqe);
    assert_true(s->recv_cqe >= s->rq_depth && s->recv_cqe <= d->max_cqe);
    assert_true(s->rx_batch >= 1 && s->rx_batch <= SX_VERBS_RX_BATCH);
    assert_true(s->rx_batch <= s->rq_depth);
    assert_true(s->send_sge >= 1 && s->send_sge <= SX_TL_IOV_MAX && s->send_sge <= d->max_sge);
    assert_true(s->max_inline <= s->mtu);
    if (d->max_inline_data != 0)
        assert_true(s->max_inline <= d->max_inline_data);
    assert_int_equal(s->rx_buf_len, s->mtu + SX_VERBS_GRH_LEN);
}

static void test_mtu_values(void **state)
{
    (void)state;
    static const size_t bytes[] = {0, 256, 512, 1024, 2048, 4096};

    for (unsigned e = 1; e <= 5; e++) {
        assert_int_equal(sx_verbs_mtu_bytes(e), bytes[e]);
        assert_int_equal(sx_verbs_mtu_bytes((unsigned)bytes[e]), bytes[e]);
#if SX_HAVE_VERBS
        /* The enum's values are the ones this table assumes. */
        static const enum ibv_mtu values[] = {IBV_MTU_256,  IBV_MTU_256,  IBV_MTU_512,
                                              IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096};
        assert_int_equal((unsigned)values[e], e);
#endif
        sx_verbs_dev_limits_t d = big_device();
        sx_verbs_sizing_t s;
        d.active_mtu = e;
        assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, NULL, 0), SX_OK);
        assert_int_equal(s.mtu, bytes[e]);
        /* Room for the GRH the device writes in front of every datagram. */
        assert_int_equal(s.rx_buf_len, bytes[e] + 40);
        check_sizing_invariants(&d, &s);
    }
    static const unsigned bad[] = {0, 6, 7, 128, 255, 300, 1500, 8192, 9000, UINT32_MAX};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx_verbs_dev_limits_t d = big_device();
        sx_verbs_sizing_t s;
        char why[160], want[32];
        assert_int_equal(sx_verbs_mtu_bytes(bad[i]), 0);
        d.active_mtu = bad[i];
        assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_ERR_NO_DEVICE);
        snprintf(want, sizeof(want), "MTU %u", bad[i]);
        assert_non_null(strstr(why, want));
    }
}

static void test_sizing_devices(void **state)
{
    (void)state;
    sx_verbs_sizing_t s;
    char why[200];

    /* A large device: the budget decides (4 MiB each by default). */
    sx_verbs_dev_limits_t d = big_device();
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_OK);
    check_sizing_invariants(&d, &s);
    assert_int_equal(s.mtu, 4096);
    assert_int_equal(s.rq_depth, (4u << 20) / 4136);
    assert_true((size_t)s.rq_depth * s.rx_buf_len <= (4u << 20));
    assert_int_equal(s.sq_depth, SX_VERBS_SQ_MAX); /* 4 MiB / 4096 = 1024 */
    assert_int_equal(s.rx_batch, SX_VERBS_RX_BATCH);
    assert_int_equal(s.send_sge, SX_TL_IOV_MAX);
    assert_int_equal(s.max_inline, SX_VERBS_INLINE_WANT);

    /* A huge budget is clamped to the bounds, then to the device. */
    sx_verbs_sizing_req_t huge = {.rx_bytes = (size_t)1 << 32, .tx_bytes = (size_t)1 << 32};
    assert_int_equal(sx_verbs_size_queues(&d, &huge, &s, why, sizeof(why)), SX_OK);
    assert_int_equal(s.rq_depth, SX_VERBS_RQ_MAX);
    assert_int_equal(s.sq_depth, SX_VERBS_SQ_MAX);
    d.max_qp_wr = 8192;
    assert_int_equal(sx_verbs_size_queues(&d, &huge, &s, why, sizeof(why)), SX_OK);
    assert_int_equal(s.rq_depth, 8192);
    check_sizing_invariants(&d, &s);
    d = big_device();
    d.max_cqe = 2000; /* fewer completions than work requests */
    assert_int_equal(sx_verbs_size_queues(&d, &huge, &s, why, sizeof(why)), SX_OK);
    assert_int_equal(s.rq_depth, 2000);
    assert_int_equal(s.recv_cqe, 2000);
    assert_int_equal(s.sq_depth, SX_VERBS_SQ_MAX);
    check_sizing_invariants(&d, &s);

    /* A tiny budget gets the minimum queues all the same. */
    sx_verbs_sizing_req_t tiny = {.rx_bytes = 1000, .tx_bytes = 1};
    d = big_device();
    assert_int_equal(sx_verbs_size_queues(&d, &tiny, &s, why, sizeof(why)), SX_OK);
    assert_int_equal(s.rq_depth, SX_VERBS_RQ_MIN);
    assert_int_equal(s.sq_depth, SX_VERBS_SQ_MIN);
    check_sizing_invariants(&d, &s);

    /* A small device that still holds the minimum, on a 1024-byte RoCE
     * port with 2 SGEs and 60 inline bytes. */
    d = (sx_verbs_dev_limits_t){
        .max_qp_wr = 100, .max_cqe = 80, .max_sge = 2, .max_inline_data = 60, .active_mtu = 1024};
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_OK);
    check_sizing_invariants(&d, &s);
    assert_int_equal(s.rq_depth, 80);
    assert_int_equal(s.sq_depth, 80);
    assert_int_equal(s.send_sge, 2);
    assert_int_equal(s.max_inline, 60);
    assert_int_equal(s.mtu, 1024);
    assert_int_equal(s.rx_buf_len, 1064);

    /* Inline: the device's figure when smaller than what we want, ours
     * when larger or not reported. */
    d = big_device();
    d.max_inline_data = 1024;
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_OK);
    assert_int_equal(s.max_inline, SX_VERBS_INLINE_WANT);
    d.max_inline_data = 28;
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_OK);
    assert_int_equal(s.max_inline, 28);

    /* Devices that cannot hold a minimal queue are refused, saying why. */
    d = big_device();
    d.max_qp_wr = 32;
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_ERR_NO_DEVICE);
    assert_non_null(strstr(why, "32 work requests"));
    d = big_device();
    d.max_cqe = SX_VERBS_RQ_MIN - 1;
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_ERR_NO_DEVICE);
    assert_non_null(strstr(why, "completions"));
    d = big_device();
    d.max_sge = 0;
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_ERR_NO_DEVICE);
    assert_non_null(strstr(why, "scatter/gather"));
    d = (sx_verbs_dev_limits_t){0};
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_ERR_NO_DEVICE);
    /* The exact minimum is enough. */
    d = big_device();
    d.max_qp_wr = d.max_cqe = SX_VERBS_RQ_MIN;
    assert_int_equal(sx_verbs_size_queues(&d, NULL, &s, why, sizeof(why)), SX_OK);
    assert_int_equal(s.rq_depth, SX_VERBS_RQ_MIN);
    check_sizing_invariants(&d, &s);

    assert_int_equal(sx_verbs_size_queues(NULL, NULL, &s, why, sizeof(why)), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_verbs_size_queues(&d, NULL, NULL, why, sizeof(why)), SX_ERR_INVALID_PARAM);
}

/* ------------------------------------------------------------------ */
/* The transport on this machine                                        */

#if SX_HAVE_VERBS
/* Whether this machine has an RDMA device: the assertions about its
 * absence give way to the ones a device allows. */
static bool rdma_device_present(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    bool present = list != NULL && n > 0;

    if (list != NULL)
        ibv_free_device_list(list);
    return present;
}

static void test_query_without_device(void **state)
{
    (void)state;
    sx_tl_config_t cfg = {.nshards = 1};
    sx_tl_query_t q = {0};
    char names[SX_TL_DEVICES][SX_TL_DEVICE_MAX];
    sx_tl_iface_t *iface = (sx_tl_iface_t *)(void *)&cfg;

    assert_ptr_equal(sx_tl_find("verbs"), &sx_tl_verbs_ops);
    assert_non_null(sx_tl_verbs_ops.devices);
    int rc = sx_tl_verbs_ops.query(&cfg, 1, &q);
    assert_int_equal(q.exclusivity, SX_TL_EXCL_HW);
    assert_true(q.detail[0] != '\0');
    if (rdma_device_present()) {
        /* Found, though maybe with no ACTIVE port: never an empty word. */
        print_message("an RDMA device is present: %s\n", q.detail);
        if (rc == SX_OK)
            assert_true(sx_tl_verbs_ops.devices(&cfg, names, SX_TL_DEVICES) >= 1);
        /* A filter that names no device here leaves none. */
        cfg.net_devices = "sx-no-such-device";
        assert_int_equal(sx_tl_verbs_ops.query(&cfg, 1, &q), SX_ERR_NO_DEVICE);
        assert_non_null(strstr(q.detail, "SX_NET_DEVICES"));
        assert_int_equal(sx_tl_verbs_ops.devices(&cfg, names, SX_TL_DEVICES), 0);
        return;
    }
    assert_int_equal(rc, SX_ERR_NO_DEVICE);
    assert_non_null(strstr(q.detail, "no RDMA device"));
    /* Named or not, filtered or not: the same answer. */
    cfg.net_devices = "mlx5_0,eth0";
    assert_int_equal(sx_tl_verbs_ops.query(&cfg, 0, &q), SX_ERR_NO_DEVICE);
    assert_non_null(strstr(q.detail, "no RDMA device"));
    assert_int_equal(sx_tl_verbs_ops.devices(&cfg, names, SX_TL_DEVICES), 0);
    cfg.net_devices = NULL;
    assert_int_equal(sx_tl_verbs_ops.devices(&cfg, names, SX_TL_DEVICES), 0);
    /* Nothing to open either, and *iface_p stays as it was. */
    capture_start();
    assert_int_equal(sx_tl_verbs_ops.open(&cfg, &iface), SX_ERR_NO_DEVICE);
    char *log = capture_stop();
    assert_ptr_equal(iface, (sx_tl_iface_t *)(void *)&cfg);
    assert_contains(log, "no RDMA device");
    free(log);
    cfg.device = "mlx5_0";
    assert_int_equal(sx_tl_verbs_ops.open(&cfg, &iface), SX_ERR_NO_DEVICE);
    assert_int_equal(sx_tl_verbs_ops.open(NULL, &iface), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_tl_verbs_ops.open(&cfg, NULL), SX_ERR_INVALID_PARAM);
}

static void test_select_without_device(void **state)
{
    (void)state;
    sx_tl_config_t cfg = {.nshards = 1, .ofi_provider = "udp"};
    sx_tl_choice_t c[SX_TL_KNOWN];
    const sx_tl_ops_t *net = &sx_tl_self_ops;
    const sx_tl_choice_t *verbs = NULL;

    int rc = sx_tl_select("verbs", &cfg, c, &net);
    for (unsigned i = 0; i < SX_TL_KNOWN; i++) {
        if (strcmp(c[i].name, "verbs") == 0)
            verbs = &c[i];
    }
    assert_non_null(verbs);
    assert_ptr_equal(verbs->ops, &sx_tl_verbs_ops);
    assert_true(verbs->allowed);
    if (rdma_device_present()) {
        print_message("an RDMA device is present: %s (%s)\n", sx_strerror(rc), verbs->detail);
        return;
    }
    assert_int_equal(rc, SX_ERR_NO_DEVICE);
    assert_null(net);
    assert_false(verbs->available);
    assert_non_null(strstr(verbs->detail, "no RDMA device"));
    /* In the default list verbs finds nothing and udp is chosen. */
    assert_int_equal(sx_tl_select("", &cfg, c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_udp_ops);
    assert_true(verbs->allowed);
    assert_false(verbs->available);
    assert_non_null(strstr(verbs->detail, "no RDMA device"));
    assert_int_equal(sx_tl_select("udp,verbs", &cfg, c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_udp_ops);
}

static void test_engine_without_device(void **state)
{
    (void)state;
    if (rdma_device_present()) {
        print_message("an RDMA device is present: the engine may run verbs here\n");
        skip();
    }
    sx_config_kv_t kv[] = {{"SHARDS", "1"}, {"TRANSPORTS", "verbs"}};
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 2};
    static char dummy;
    sx_engine_h e = (sx_engine_h)(void *)&dummy;

    /* Named alone, verbs fails the engine, and the log says why. */
    capture_start();
    int rc = sx_engine_create(&params, &e);
    char *log = capture_stop();
    assert_int_equal(rc, SX_ERR_NO_DEVICE);
    assert_ptr_equal(e, (sx_engine_h)(void *)&dummy);
    assert_contains(log, "verbs: no RDMA device found");
    free(log);

    /* The default engine runs udp, and says why verbs does not run. */
    params.config_count = 1;
    e = NULL;
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    sx_transport_info_t t;
    bool seen = false;
    for (unsigned i = 0; sx_engine_transport_info(e, i, &t) == SX_OK; i++) {
        if (t.selected && t.network)
            assert_string_equal(t.name, "udp");
        if (strcmp(t.name, "verbs") != 0)
            continue;
        seen = true;
        assert_true(t.built);
        assert_true(t.allowed);
        assert_false(t.available);
        assert_false(t.selected);
        assert_int_equal(t.mtu, 0);
        assert_non_null(strstr(t.detail, "no RDMA device"));
    }
    assert_true(seen);
    sx_engine_destroy(e);
}

/* The first query of the process says once, at info level, why verbs is
 * not used; the ones after it stay quiet. Runs first among the tests
 * that query verbs (the main below keeps it so). */
static void test_absence_logged_once(void **state)
{
    (void)state;
    if (rdma_device_present())
        skip();
    sx_tl_config_t cfg = {.nshards = 1};
    sx_tl_query_t q;

    sx_log_set_level(SX_LOG_INFO);
    capture_start();
    for (int i = 0; i < 3; i++)
        assert_int_equal(sx_tl_verbs_ops.query(&cfg, i & 1, &q), SX_ERR_NO_DEVICE);
    char *log = capture_stop();
    sx_log_set_level(SX_LOG_WARN);
    const char *first = strstr(log, "the verbs transport is not used: no RDMA device");
    if (first == NULL)
        fail_msg("no info line in:\n%s", log);
    assert_null(strstr(first + 1, "the verbs transport is not used"));
    free(log);
}
#else
static void test_not_built(void **state)
{
    (void)state;
    sx_tl_config_t cfg = {.nshards = 1};
    sx_tl_choice_t c[SX_TL_KNOWN];
    const sx_tl_ops_t *net = NULL;

    assert_null(sx_tl_find("verbs"));
    assert_int_equal(sx_tl_select("verbs", &cfg, c, &net), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_tl_select("", &cfg, c, &net), SX_OK);
    for (unsigned i = 0; i < SX_TL_KNOWN; i++) {
        if (strcmp(c[i].name, "verbs") == 0)
            assert_non_null(strstr(c[i].detail, "libibverbs was not found"));
    }
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr_round_trip),
        cmocka_unit_test(test_addr_encode_refuses),
        cmocka_unit_test(test_addr_decode_refuses),
        cmocka_unit_test(test_addr_str),
        cmocka_unit_test(test_ah_cache_hits_and_refs),
        cmocka_unit_test(test_ah_cache_eviction),
        cmocka_unit_test(test_ah_cache_growth),
        cmocka_unit_test(test_ah_cache_parameters),
        cmocka_unit_test(test_mtu_values),
        cmocka_unit_test(test_sizing_devices),
#if SX_HAVE_VERBS
        cmocka_unit_test(test_absence_logged_once),
        cmocka_unit_test(test_query_without_device),
        cmocka_unit_test(test_select_without_device),
        cmocka_unit_test(test_engine_without_device),
#else
        cmocka_unit_test(test_not_built),
#endif
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
