/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rdmacm connection method (src/cpc/rdmacm.c, rdmacm.h): what it puts
 * on the wire and takes from it (the card blob, the SIDR private data, the
 * path the connection manager reports as a verbs card address), untrusted
 * input of every malformed shape; that engines which cannot run it (every
 * udp engine) leave it out of their cards quietly and say so when SX_CPC
 * names it; that a peer offering it falls back to the handshake; and the
 * channel's destination swap it relies on (sx_chan_set_dest_locked), over
 * udp.
 *
 * The component end to end (its thread, the SIDR exchange, the channel's
 * side, failures, teardown in flight) runs in test_cpc_rdmacm_fake over
 * fake librdmacm and libibverbs. The real connection manager needs an RDMA
 * device: the one test here that uses it skips, saying why, unless
 * rdma_create_event_channel works and libibverbs lists a device.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <shardx.h>

#include "am_util.h"
#include "test_filter.h"
#include "card_util.h"
#include "build_config.h"
#include "cpc/cpc.h"
#include "cpc/rdmacm.h"
#include "engine/card.h"
#include "engine/engine.h"
#include "log_capture.h"
#include "shard/chan.h"
#include "shard/peer.h"
#include "transports/verbs_addr.h"

#if SX_HAVE_VERBS
#include <infiniband/verbs.h>
#endif
#if SX_HAVE_RDMACM && SX_HAVE_VERBS
#include <rdma/rdma_cma.h>
#define HAVE_RDMACM_CPC 1
#else
#define HAVE_RDMACM_CPC 0
#endif

#define TAG      7
#define CARD_MAX 4096

static int saved_level;

static int setup(void **state)
{
    (void)state;
    saved_level = atomic_load(&sx_log_level_g);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    (void)capture_abandon(); /* one that a failed assertion left running */
    sx_log_set_level((sx_log_level_t)saved_level);
    return 0;
}

/* ------------------------------------------------------------ the card blob */

#if HAVE_RDMACM_CPC

static struct sockaddr_in v4(const char *ip, uint16_t port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    assert_int_equal(inet_pton(AF_INET, ip, &sin.sin_addr), 1);
    return sin;
}

static struct sockaddr_in6 v6(const char *ip, uint16_t port)
{
    struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    assert_int_equal(inet_pton(AF_INET6, ip, &sin6.sin6_addr), 1);
    return sin6;
}

static void test_blob_roundtrip(void **state)
{
    (void)state;
    uint8_t blob[SX_CONN_BLOB_MAX];
    uint8_t len = 0;
    struct sockaddr_storage ss;
    const char *why = NULL;

    struct sockaddr_in a = v4("10.1.2.3", 18515);
    assert_int_equal(sx_rdmacm_blob_write((struct sockaddr *)&a, blob, sizeof(blob), &len), SX_OK);
    assert_int_equal(len, SX_RDMACM_BLOB_V4_LEN);
    /* version, family, port little-endian, address in network order */
    static const uint8_t want4[] = {1, 4, 0x53, 0x48, 10, 1, 2, 3};
    assert_memory_equal(blob, want4, sizeof(want4));
    assert_int_equal(sx_rdmacm_blob_parse(blob, len, &ss, &why), SX_OK);
    assert_int_equal(ss.ss_family, AF_INET);
    assert_memory_equal(&ss, &a, sizeof(a));

    struct sockaddr_in6 b = v6("2001:db8::7", 1);
    assert_int_equal(sx_rdmacm_blob_write((struct sockaddr *)&b, blob, sizeof(blob), &len), SX_OK);
    assert_int_equal(len, SX_RDMACM_BLOB_V6_LEN);
    assert_int_equal(blob[1], 6);
    assert_int_equal(sx_rdmacm_blob_parse(blob, len, &ss, &why), SX_OK);
    assert_int_equal(ss.ss_family, AF_INET6);
    const struct sockaddr_in6 *got = (const struct sockaddr_in6 *)&ss;
    assert_int_equal(ntohs(got->sin6_port), 1);
    assert_memory_equal(&got->sin6_addr, &b.sin6_addr, 16);

    /* What a peer would refuse is never written. */
    struct sockaddr_in bad[] = {v4("127.0.0.1", 5), v4("0.0.0.0", 5), v4("10.0.0.1", 0),
                                v4("239.1.1.1", 5), v4("255.255.255.255", 5)};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        assert_int_equal(sx_rdmacm_blob_write((struct sockaddr *)&bad[k], blob, sizeof(blob), &len),
                         SX_ERR_INVALID_PARAM);
    struct sockaddr_in6 ll = v6("fe80::1", 5);
    assert_int_equal(sx_rdmacm_blob_write((struct sockaddr *)&ll, blob, sizeof(blob), &len),
                     SX_ERR_INVALID_PARAM);
    struct sockaddr un = {.sa_family = AF_UNIX};
    assert_int_equal(sx_rdmacm_blob_write(&un, blob, sizeof(blob), &len), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_rdmacm_blob_write((struct sockaddr *)&a, blob, 7, &len),
                     SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_rdmacm_blob_write(NULL, blob, sizeof(blob), &len), SX_ERR_INVALID_PARAM);
}

/* Every malformed blob is refused with a reason, and *ss is untouched. */
static void test_blob_malformed(void **state)
{
    (void)state;
    static const struct {
        uint8_t bytes[24];
        size_t len;
        const char *why;
    } v[] = {
        {{0}, 0, "shorter"},
        {{1, 4, 1}, 3, "shorter"},
        {{2, 4, 1, 0, 10, 0, 0, 1}, 8, "version"},
        {{0, 4, 1, 0, 10, 0, 0, 1}, 8, "version"},
        {{1, 5, 1, 0, 10, 0, 0, 1}, 8, "family"},
        {{1, 0, 1, 0, 10, 0, 0, 1}, 8, "family"},
        {{1, 4, 1, 0, 10, 0, 0}, 7, "length"},
        {{1, 4, 1, 0, 10, 0, 0, 1, 0}, 9, "length"},
        {{1, 4, 1, 0, 10, 0, 0, 1}, 20, "length"}, /* v4 with a v6 length */
        {{1, 6, 1, 0, 0x20, 0x01, 0x0d, 0xb8}, 8, "length"},
        {{1, 4, 0, 0, 10, 0, 0, 1}, 8, "port 0"},
        {{1, 4, 1, 0, 0, 0, 0, 0}, 8, "unspecified"},
        {{1, 4, 1, 0, 127, 0, 0, 1}, 8, "loopback"},
        {{1, 4, 1, 0, 127, 9, 9, 9}, 8, "loopback"},
        {{1, 4, 1, 0, 224, 0, 0, 1}, 8, "multicast"},
        {{1, 4, 1, 0, 255, 255, 255, 255}, 8, "broadcast"},
        {{1, 6, 1, 0}, 20, "unspecified"},
        {{1, 6, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 20, "loopback"},
        {{1, 6, 1, 0, 0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 20, "multicast"},
        {{1, 6, 1, 0, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 20, "link-local"},
    };
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        struct sockaddr_storage ss;
        memset(&ss, 0xab, sizeof(ss));
        const char *why = NULL;
        int rc = sx_rdmacm_blob_parse(v[k].bytes, v[k].len, &ss, &why);
        if (rc != SX_ERR_INVALID_PARAM || why == NULL || strstr(why, v[k].why) == NULL)
            fail_msg("blob %zu: %s (%s), expected SX_ERR_INVALID_PARAM (%s)", k, sx_status_name(rc),
                     why ? why : "no reason", v[k].why);
        assert_int_equal(((uint8_t *)&ss)[0], 0xab);
    }
    const char *why = NULL;
    struct sockaddr_storage ss;
    assert_int_equal(sx_rdmacm_blob_parse(NULL, 8, &ss, &why), SX_ERR_INVALID_PARAM);
}

/* ------------------------------------------------------------ private data */

static void test_priv_roundtrip(void **state)
{
    (void)state;
    uint8_t buf[136]; /* the connection manager pads a SIDR REP to this */
    sx_rdmacm_priv_t got;
    const char *why = NULL;

    memset(buf, 0, sizeof(buf));
    sx_rdmacm_priv_t req = {.kind = SX_RDMACM_REQ, .shard = 3};
    sx_rdmacm_priv_write(buf, &req);
    static const uint8_t want[SX_RDMACM_PRIV_LEN] = {'S', 'X', 'C', 'M', 1, 1, 3, 0};
    assert_memory_equal(buf, want, sizeof(want));
    assert_int_equal(sx_rdmacm_priv_parse(buf, SX_RDMACM_PRIV_LEN, SX_RDMACM_REQ, 4, &got, &why),
                     SX_OK);
    assert_int_equal(got.kind, SX_RDMACM_REQ);
    assert_int_equal(got.shard, 3);
    /* Padding after the block is ignored. */
    assert_int_equal(sx_rdmacm_priv_parse(buf, sizeof(buf), SX_RDMACM_REQ, 4, &got, &why), SX_OK);

    sx_rdmacm_priv_t rep = {.kind = SX_RDMACM_REP,
                            .shard = 65535,
                            .qpn = 0xffffff,
                            .qkey = 0x01234567,
                            .port = 2,
                            .flags = SX_RDMACM_REP_ELSEWHERE};
    sx_rdmacm_priv_write(buf, &rep);
    assert_int_equal(sx_rdmacm_priv_parse(buf, sizeof(buf), SX_RDMACM_REP, 65536, &got, &why),
                     SX_OK);
    assert_int_equal(got.shard, 65535);
    assert_int_equal(got.qpn, 0xffffff);
    assert_int_equal(got.qkey, 0x01234567);
    assert_int_equal(got.port, 2);
    assert_int_equal(got.flags, SX_RDMACM_REP_ELSEWHERE);
}

/* Hostile private data: each case is refused with its reason and *p is
 * left alone. */
static void test_priv_hostile(void **state)
{
    (void)state;
    enum {
        SHORT,
        MAGIC,
        VERSION,
        KIND,
        RESERVED,
        SHARD,
        SHARD_MAX,
        REQ_FIELDS,
        QPN0,
        QPN1,
        QPN_WIDE,
        PORT0,
        FLAGS,
        REQ_FLAGS,
        NCASES
    };
    static const char *const want[NCASES] = {"shorter",
                                             "magic",
                                             "version",
                                             "not an answer",
                                             "reserved",
                                             "shard",
                                             "shard",
                                             "request",
                                             "queue pair number",
                                             "queue pair number",
                                             "queue pair number",
                                             "port 0",
                                             "unknown flags",
                                             "request"};
    for (int k = 0; k < NCASES; k++) {
        uint8_t buf[SX_RDMACM_PRIV_LEN];
        sx_rdmacm_priv_t m = {.kind = SX_RDMACM_REP, .shard = 1, .qpn = 0x99, .qkey = 7, .port = 1};
        uint8_t kind = SX_RDMACM_REP;
        unsigned nshards = 2;
        size_t len = sizeof(buf);
        if (k == REQ_FIELDS) {
            m.kind = SX_RDMACM_REQ;
            kind = SX_RDMACM_REQ;
        }
        if (k == SHARD)
            m.shard = 2;
        if (k == SHARD_MAX) {
            m.shard = 65535;
            nshards = 65535;
        }
        if (k == QPN0)
            m.qpn = 0;
        if (k == QPN1)
            m.qpn = 1;
        if (k == QPN_WIDE)
            m.qpn = 0x1000000;
        if (k == PORT0)
            m.port = 0;
        if (k == FLAGS)
            m.flags = 0x02;
        if (k == REQ_FLAGS) {
            m = (sx_rdmacm_priv_t){.kind = SX_RDMACM_REQ, .flags = SX_RDMACM_REP_ELSEWHERE};
            kind = SX_RDMACM_REQ;
        }
        sx_rdmacm_priv_write(buf, &m);
        if (k == SHORT)
            len = SX_RDMACM_PRIV_LEN - 1;
        if (k == MAGIC)
            buf[0] ^= 1;
        if (k == VERSION)
            buf[4] = 2;
        if (k == KIND)
            buf[5] = SX_RDMACM_REQ;
        if (k == RESERVED)
            buf[19] = 1;
        sx_rdmacm_priv_t got = {.shard = 4242};
        const char *why = NULL;
        int rc = sx_rdmacm_priv_parse(buf, len, kind, nshards, &got, &why);
        if (rc != SX_ERR_PROTO || why == NULL || strstr(why, want[k]) == NULL)
            fail_msg("case %d: %s (%s), expected SX_ERR_PROTO (%s)", k, sx_status_name(rc),
                     why ? why : "no reason", want[k]);
        assert_int_equal(got.shard, 4242);
    }
    /* A request the other way round, and nothing at all. */
    uint8_t buf[SX_RDMACM_PRIV_LEN];
    sx_rdmacm_priv_t req = {.kind = SX_RDMACM_REQ};
    sx_rdmacm_priv_t got;
    const char *why = NULL;
    sx_rdmacm_priv_write(buf, &req);
    assert_int_equal(sx_rdmacm_priv_parse(buf, sizeof(buf), SX_RDMACM_REP, 1, &got, &why),
                     SX_ERR_PROTO);
    assert_int_equal(sx_rdmacm_priv_parse(buf, sizeof(buf), SX_RDMACM_REQ, 0, &got, &why),
                     SX_ERR_PROTO);
    assert_int_equal(sx_rdmacm_priv_parse(NULL, 0, SX_RDMACM_REQ, 1, &got, &why), SX_ERR_PROTO);
}

/* ------------------------------------------------------------ the path */

/* Through the card format and back: what a peer's transport would get. */
static void path_roundtrip(const sx_verbs_addr_t *a)
{
    uint8_t buf[SX_TL_ADDR_MAX];
    size_t len = 0;
    sx_verbs_addr_t back;

    assert_int_equal(sx_verbs_addr_encode(a, buf, sizeof(buf), &len), SX_OK);
    assert_int_equal(len, SX_VERBS_ADDR_LEN);
    assert_int_equal(sx_verbs_addr_decode(buf, len, &back), SX_OK);
    assert_memory_equal(back.gid, a->gid, 16);
    assert_int_equal(back.lid, a->lid);
    assert_int_equal(back.qpn, a->qpn);
    assert_int_equal(back.qkey, a->qkey);
    assert_int_equal(back.port, a->port);
    assert_int_equal(back.sl, a->sl);
    assert_int_equal(back.flags, a->flags);
}

static void test_path_addr(void **state)
{
    (void)state;
    sx_verbs_addr_t a;
    const char *why = NULL;

    /* RoCE v2: a GRH to the peer's IPv4-mapped GID, no LID. */
    struct ibv_ah_attr roce;
    memset(&roce, 0, sizeof(roce));
    roce.is_global = 1;
    static const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
    memcpy(roce.grh.dgid.raw, gid, 16);
    roce.grh.hop_limit = 64;
    roce.sl = 3;
    roce.port_num = 1;
    assert_int_equal(sx_rdmacm_path_addr(&roce, 0x1234, 0x01234567, 2, &a, &why), SX_OK);
    assert_int_equal(a.flags, SX_VERBS_ADDR_GLOBAL);
    assert_memory_equal(a.gid, gid, 16);
    assert_int_equal(a.lid, 0);
    assert_int_equal(a.sl, 3);
    assert_int_equal(a.qpn, 0x1234);
    assert_int_equal(a.qkey, 0x01234567);
    assert_int_equal(a.port, 2); /* the peer's port, from its answer */
    path_roundtrip(&a);

    /* IB within a subnet: a LID, no GRH; the GID the struct may still
     * hold is not taken. */
    struct ibv_ah_attr ib;
    memset(&ib, 0, sizeof(ib));
    ib.dlid = 0x1f;
    ib.sl = 1;
    memset(ib.grh.dgid.raw, 0xee, 16);
    assert_int_equal(sx_rdmacm_path_addr(&ib, 0xffffff, 0x11, 1, &a, &why), SX_OK);
    assert_int_equal(a.flags, 0);
    assert_int_equal(a.lid, 0x1f);
    assert_int_equal(a.sl, 1);
    static const uint8_t zero[16] = {0};
    assert_memory_equal(a.gid, zero, 16);
    path_roundtrip(&a);

    /* IB across subnets: both. */
    ib.is_global = 1;
    assert_int_equal(sx_rdmacm_path_addr(&ib, 2, 0x11, 1, &a, &why), SX_OK);
    assert_int_equal(a.flags, SX_VERBS_ADDR_GLOBAL);
    assert_int_equal(a.lid, 0x1f);
    path_roundtrip(&a);

    /* What no card may carry. */
    static const struct {
        uint32_t qpn;
        uint8_t port;
        int global;
        uint16_t dlid;
        const char *why;
    } bad[] = {
        {0, 1, 1, 0, "queue pair"},      {1, 1, 1, 0, "queue pair"},
        {0x1000000, 1, 1, 0, "24 bits"}, {0xffffffff, 1, 1, 0, "24 bits"},
        {5, 0, 1, 0, "port 0"},          {5, 1, 0, 0, "neither a GRH nor a LID"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        struct ibv_ah_attr ah;
        memset(&ah, 0, sizeof(ah));
        ah.is_global = (uint8_t)bad[k].global;
        ah.dlid = bad[k].dlid;
        sx_verbs_addr_t untouched = {.qpn = 77};
        why = NULL;
        int rc = sx_rdmacm_path_addr(&ah, bad[k].qpn, 1, bad[k].port, &untouched, &why);
        if (rc != SX_ERR_INVALID_PARAM || why == NULL || strstr(why, bad[k].why) == NULL)
            fail_msg("path %zu: %s (%s), expected SX_ERR_INVALID_PARAM (%s)", k, sx_status_name(rc),
                     why ? why : "no reason", bad[k].why);
        assert_int_equal(untouched.qpn, 77);
    }
    assert_int_equal(sx_rdmacm_path_addr(NULL, 5, 1, 1, &a, &why), SX_ERR_INVALID_PARAM);
}

/* Whether @p e runs the rdmacm component. */
static bool runs_rdmacm(sx_engine_h e)
{
    for (unsigned k = 0; k < e->cpc.n; k++) {
        if (e->cpc.inst[k].comp == &sx_cpc_rdmacm)
            return true;
    }
    return false;
}

/* The slots that need no device, called directly: the table's contract,
 * peer_init's check of a peer's blob (sx_peer_add refuses a malformed
 * one), and query, stop and finalize on an engine where init declined. */
static void test_component_slots(void **state)
{
    (void)state;
    const sx_cpc_component_t *c = &sx_cpc_rdmacm;
    assert_string_equal(c->ep.name, "rdmacm");
    assert_int_equal(c->ep.id, SX_CPC_RDMACM);
    assert_int_equal(c->priority, 90);
    assert_true(c->priority > sx_cpc_handshake.priority);
    assert_true(c->ep.probe);
    assert_non_null(c->init);
    assert_non_null(c->query);
    assert_non_null(c->peer_init);
    assert_non_null(c->stop);
    assert_non_null(c->finalize);
    assert_non_null(c->ep.ep_init_locked);
    assert_non_null(c->ep.start_connect_locked);
    assert_non_null(c->ep.ep_finalize_locked);
    assert_non_null(c->ep.send_ctrl_locked);

    const sx_config_kv_t kv[] = {{"SHARDS", "1"}};
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 1};
    sx_engine_h e = NULL;
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    assert_false(runs_rdmacm(e));
    sx_cpc_inst_t inst = {.comp = c, .env = &e->cpc.env};
    sx_cpc_module_t m = {.component = c};
    assert_int_equal(c->query(&inst, &m), SX_ERR_UNSUPPORTED);
    c->stop(&inst);
    c->stop(&inst);
    c->finalize(&inst);
    assert_null(inst.state);

    struct sx_peer peer;
    memset(&peer, 0, sizeof(peer));
    peer.id = 42;
    /* What sx_peer_add names an unnamed peer, which log lines use. */
    snprintf(peer.name, sizeof(peer.name), "peer %d", 42);
    static const uint8_t good[] = {1, 4, 0x53, 0x48, 10, 0, 0, 9};
    memcpy(peer.conn_offer.blob, good, sizeof(good));
    peer.conn_offer.blob_len = sizeof(good);
    assert_int_equal(c->peer_init(&inst, &peer), SX_OK);
    peer.conn_offer.blob[4] = 127;
    capture_start();
    int rc = c->peer_init(&inst, &peer);
    char *log = capture_stop();
    assert_int_equal(rc, SX_ERR_INVALID_PARAM);
    assert_contains(log, "peer 42's card has a malformed rdmacm listener address: loopback");
    free(log);
    sx_engine_destroy(e);
}

#endif /* HAVE_RDMACM_CPC */

/* ------------------------------------------------------------ engines */

static sx_engine_h open_engine(const sx_config_kv_t *kv, size_t n, int *rc_p)
{
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = n};
    sx_engine_h e = NULL;
    *rc_p = sx_engine_create(&params, &e);
    return e;
}

/* The offers an engine puts in its card. */
static unsigned card_offers(sx_engine_h e, sx_conn_offer_t *offers)
{
    uint8_t buf[256];
    unsigned count = 0;
    size_t len = sx_card_offers_write(&e->cpc, buf, sizeof(buf));
    assert_true(len > 0);
    assert_int_equal(sx_card_offers_parse(buf, len, offers, &count), len);
    return count;
}

/* A card from a newer peer: six offers, three of components this build
 * has never heard of, the known ones last. The section is consumed whole,
 * the known ones are kept (pushing out unknown ones) and nothing is
 * refused; a truncated last offer still makes the section malformed. */
static void test_offers_beyond_max(void **state)
{
    (void)state;
    const uint8_t ids[6] = {200, 201, 202, SX_CPC_IMPLICIT, SX_CPC_HANDSHAKE, 203};
    uint8_t buf[64];
    size_t len = 1;
    buf[0] = 6;
    for (unsigned k = 0; k < 6; k++) {
        buf[len] = ids[k];
        buf[len + 1] = 10;
        buf[len + 2] = 1; /* a one-byte blob */
        buf[len + 3] = 0xee;
        len += 4;
    }
    sx_conn_offer_t offers[SX_CPC_MAX];
    unsigned count = 0;
    assert_int_equal(sx_card_offers_parse(buf, len, offers, &count), len);
    assert_int_equal(count, SX_CPC_MAX);
    bool implicit = false, handshake = false;
    for (unsigned k = 0; k < count; k++) {
        implicit |= offers[k].id == SX_CPC_IMPLICIT;
        handshake |= offers[k].id == SX_CPC_HANDSHAKE;
        assert_int_equal(offers[k].blob_len, 1);
    }
    assert_true(implicit);
    assert_true(handshake);
    assert_int_equal(sx_card_offers_parse(buf, len - 1, offers, &count), 0);
}

/* A default engine runs udp: rdmacm is not in its card, and it says so
 * only at debug level. */
static void test_absent_from_udp_card(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"SHARDS", "2"}, {"LOG_LEVEL", "info"}};
    int rc;
    capture_start();
    sx_engine_h e = open_engine(kv, 2, &rc);
    char *log = capture_stop();
    assert_int_equal(rc, SX_OK);
    sx_conn_offer_t offers[SX_CPC_MAX];
    unsigned n = card_offers(e, offers);
    assert_true(n >= 2);
    for (unsigned k = 0; k < n; k++)
        assert_int_not_equal(offers[k].id, SX_CPC_RDMACM);
    for (unsigned k = 0; k < e->cpc.n; k++)
        assert_int_not_equal(e->cpc.inst[k].comp->ep.id, SX_CPC_RDMACM);
    assert_false(runs_rdmacm(e));
    /* Not worth an info line on every udp engine. */
    assert_null(strstr(log, "rdmacm"));
    free(log);
    assert_string_equal(sx_cpc_name(SX_CPC_RDMACM), "rdmacm");
    sx_engine_destroy(e);

    /* At debug level the reason is there. */
    const sx_config_kv_t kd[] = {{"SHARDS", "1"}, {"LOG_LEVEL", "debug"}};
    capture_start();
    e = open_engine(kd, 2, &rc);
    log = capture_stop();
    assert_int_equal(rc, SX_OK);
#if HAVE_RDMACM_CPC
    assert_contains(log, "rdmacm: not offered: the engine runs the udp transport");
#endif
    free(log);
    sx_engine_destroy(e);
}

/* SX_CPC=rdmacm on a udp engine: a warning that it cannot run, then the
 * list leaves nothing and creation fails. */
static void test_named_cannot_run(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"SHARDS", "1"}, {"CPC", "rdmacm"}};
    int rc;
    capture_start();
    sx_engine_h e = open_engine(kv, 2, &rc);
    char *log = capture_stop();
    assert_int_equal(rc, SX_ERR_INVALID_PARAM);
    assert_null(e);
#if HAVE_RDMACM_CPC
    assert_contains(log, "rdmacm: not offered: the engine runs the udp transport");
    assert_contains(log, "SX_CPC names rdmacm, but it cannot run in this engine");
#else
    assert_contains(log, "SX_CPC names rdmacm, but this build lacks it");
#endif
    assert_contains(log, "leaves no connection method");
    free(log);
}

/* "^rdmacm" and "rdmacm,handshake" are valid lists; the second warns and
 * runs the handshake alone. */
static void test_spec_accepted(void **state)
{
    (void)state;
    const sx_config_kv_t kx[] = {{"SHARDS", "1"}, {"CPC", "^rdmacm"}};
    int rc;
    sx_engine_h e = open_engine(kx, 2, &rc);
    assert_int_equal(rc, SX_OK);
    bool hs = false;
    for (unsigned k = 0; k < e->cpc.n; k++) {
        assert_int_not_equal(e->cpc.inst[k].comp->ep.id, SX_CPC_RDMACM);
        hs |= e->cpc.inst[k].comp->ep.id == SX_CPC_HANDSHAKE;
    }
    assert_true(hs);
    sx_engine_destroy(e);

    const sx_config_kv_t kb[] = {{"SHARDS", "1"}, {"CPC", "rdmacm,handshake"}};
    capture_start();
    e = open_engine(kb, 2, &rc);
    char *log = capture_stop();
    assert_int_equal(rc, SX_OK);
    assert_int_equal(e->cpc.n, 1);
    assert_int_equal(e->cpc.inst[0].comp->ep.id, SX_CPC_HANDSHAKE);
    assert_contains(log, "SX_CPC names rdmacm");
    free(log);
    sx_engine_destroy(e);

    assert_true(sx_cpc_requested("rdmacm,handshake", "rdmacm"));
    assert_true(sx_cpc_requested("handshake,rdmacm", "rdmacm"));
    assert_false(sx_cpc_requested("^rdmacm", "rdmacm"));
    assert_false(sx_cpc_requested("", "rdmacm"));
    assert_false(sx_cpc_requested("handshake", "rdmacm"));
    capture_start(); /* an invalid list names nothing, and says why */
    assert_false(sx_cpc_requested("rdmacm,bogus", "rdmacm"));
    log = capture_stop();
    assert_contains(log, "unknown connection method \"bogus\"");
    free(log);
    assert_true(sx_cpc_oob_requested("oob"));
}

/* A peer that offers rdmacm (at 90, above the handshake) to an engine that
 * does not run it: the handshake both run is chosen, the rdmacm blob is
 * never read (even a malformed one), and traffic flows. */
static uint64_t fb_got;
static void fb_on_am(void *arg, uint64_t peer, uint8_t tag, const void *data, size_t len)
{
    (void)arg, (void)peer, (void)tag, (void)data, (void)len;
    fb_got++;
}

static void test_peer_offer_fallback(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"SHARDS", "1"}};
    int rc;
    sx_engine_h a = open_engine(kv, 1, &rc);
    assert_int_equal(rc, SX_OK);
    sx_engine_h b = open_engine(kv, 1, &rc);
    assert_int_equal(rc, SX_OK);
    assert_int_equal(sx_am_register(b, TAG, fb_on_am, NULL), SX_OK);

    uint8_t card[CARD_MAX], patched[CARD_MAX];
    size_t len = sizeof(card);
    assert_int_equal(sx_engine_address(b, card, &len), SX_OK);
    size_t start, end;
    card_offer_span(card, len, &start, &end);
    static const uint8_t offer[] = {SX_CPC_RDMACM, 90, 8, 1, 4, 0x53, 0x48, 10, 0, 0, 9};
    static const uint8_t junk[] = {SX_CPC_RDMACM, 90, 3, 9, 9, 9};
    for (int variant = 0; variant < 2; variant++) {
        const uint8_t *o = variant == 0 ? offer : junk;
        size_t olen = variant == 0 ? sizeof(offer) : sizeof(junk);
        memcpy(patched, card, end);
        patched[start]++;
        memcpy(patched + end, o, olen);
        memcpy(patched + end + olen, card + end, len - end);
        sx_peer_h peer = NULL;
        if (variant == 1) {
            /* Another incarnation, so that it is another peer. */
            for (int i = 0; i < 8; i++)
                patched[8 + i] ^= 0x5a;
        }
        assert_int_equal(sx_peer_add(a, 100 + (uint64_t)variant, patched, len + olen, &peer),
                         SX_OK);
        assert_int_equal(peer->conn_method->ops->id, SX_CPC_HANDSHAKE);
        if (variant == 0) {
            /* b knows a: the exchange completes, over the handshake. */
            assert_non_null(am_connect(b, a, 1));
            uint8_t msg[32];
            am_fill(msg, sizeof(msg), 0);
            struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
            assert_int_equal(am_sendi(a, peer, TAG, &iov, 1), SX_OK);
            assert_true(am_progress_until(a, b, &fb_got, 1));
        }
    }
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    fb_got = 0;
}

/* ------------------------------------------------------------ dest swap */

typedef struct swap_req {
    sx_inbox_req_t req;
    sx_peer_h peer;
    const void *addr;
    size_t len;
    int rc;
    sx_tl_dest_t before, after;
    bool ran;
} swap_req_t;

static void swap_run(void *owner, sx_inbox_req_t *req)
{
    swap_req_t *r = (swap_req_t *)req;
    (void)owner;
    sx_chan_t *c = r->peer->chans[0];
    assert_non_null(c);
    r->before = c->dest;
    r->rc = sx_chan_set_dest_locked(c, r->addr, r->len);
    r->after = c->dest;
    r->ran = true;
}

static void swap(sx_engine_h e, swap_req_t *r)
{
    r->req.run = swap_run;
    r->ran = false;
    sx_engine_submit(e, 0, &r->req);
    uint64_t t0 = sx_time_ns();
    while (!r->ran) {
        sx_progress(e);
        assert_true(sx_time_ns() - t0 < AM_TEST_LIMIT_NS);
    }
}

static uint64_t sw_got;
static void sw_on_am(void *arg, uint64_t peer, uint8_t tag, const void *data, size_t len)
{
    (void)arg, (void)peer, (void)tag, (void)data, (void)len;
    sw_got++;
}

static void sw_send(sx_engine_h from, sx_engine_h to, sx_peer_h peer, uint64_t want)
{
    uint8_t msg[64];
    am_fill(msg, sizeof(msg), want);
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
    assert_int_equal(am_sendi(from, peer, TAG, &iov, 1), SX_OK);
    assert_true(am_progress_until(from, to, &sw_got, want));
}

/* sx_chan_set_dest_locked over udp: the channel takes another handle for
 * the same remote shard and keeps working; a refused address leaves the
 * old handle in place. */
static void test_set_dest(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"SHARDS", "1"}};
    int rc;
    sx_engine_h a = open_engine(kv, 1, &rc);
    sx_engine_h b = open_engine(kv, 1, &rc);
    assert_int_equal(sx_am_register(b, TAG, sw_on_am, NULL), SX_OK);
    sx_peer_h pb = am_connect(a, b, 1);
    (void)am_connect(b, a, 0);
    sw_send(a, b, pb, 1);

    swap_req_t r = {.peer = pb, .addr = pb->addr[0].bytes, .len = pb->addr[0].len};
    swap(a, &r);
    assert_int_equal(r.rc, SX_OK);
    assert_int_not_equal(r.before, r.after);
    sw_send(a, b, pb, 2);
    sw_send(a, b, pb, 3);

    static const uint8_t garbage[3] = {1, 2, 3};
    swap_req_t bad = {.peer = pb, .addr = garbage, .len = sizeof(garbage)};
    swap(a, &bad);
    assert_int_equal(bad.rc, SX_ERR_INVALID_PARAM);
    assert_int_equal(bad.before, bad.after);
    sw_send(a, b, pb, 4);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    sw_got = 0;
}

/* ------------------------------------------------------------ a device */

#if HAVE_RDMACM_CPC
/* Whether the connection manager can run here: an RDMA device and the
 * rdma_ucm module. */
static bool rdma_usable(char *why, size_t cap)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list != NULL)
        ibv_free_device_list(list);
    if (n <= 0) {
        snprintf(why, cap, "no RDMA device (ibv_get_device_list found none)");
        return false;
    }
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (ch == NULL) {
        snprintf(why, cap, "rdma_create_event_channel failed (rdma_ucm not loaded?)");
        return false;
    }
    rdma_destroy_event_channel(ch);
    return true;
}
#endif

static uint64_t dev_got;
static void dev_on_am(void *arg, uint64_t peer, uint8_t tag, const void *data, size_t len)
{
    (void)arg, (void)peer, (void)tag, (void)data, (void)len;
    dev_got++;
}

/* Two verbs engines of this process connect through the connection
 * manager and exchange messages; the log says the channel came up over
 * rdmacm. Needs an RDMA device with an IPv4 address (a RoCE v2 GID, or
 * SX_BIND_ADDR from the environment for IPoIB). */
static void test_device_connect(void **state)
{
    (void)state;
#if HAVE_RDMACM_CPC
    char why[128];
    if (!rdma_usable(why, sizeof(why))) {
        print_message("skipped: %s\n", why);
        skip();
    }
    const sx_config_kv_t kv[] = {
        {"SHARDS", "2"}, {"TRANSPORTS", "verbs"}, {"CPC", "rdmacm"}, {"LOG_LEVEL", "debug"}};
    int rc;
    capture_start();
    sx_engine_h a = open_engine(kv, 4, &rc);
    sx_engine_h b = rc == SX_OK ? open_engine(kv, 4, &rc) : NULL;
    if (rc != SX_OK) {
        char *log = capture_stop();
        if (a != NULL)
            sx_engine_destroy(a);
        fail_msg("a verbs engine with SX_CPC=rdmacm: %s\n%s", sx_status_name(rc), log);
    }
    assert_int_equal(sx_am_register(b, TAG, dev_on_am, NULL), SX_OK);
    assert_int_equal(sx_am_register(a, TAG, dev_on_am, NULL), SX_OK);
    sx_peer_h pb = am_connect(a, b, 1);
    sx_peer_h pa = am_connect(b, a, 0);
    assert_int_equal(pb->conn_method->ops->id, SX_CPC_RDMACM);
    for (uint64_t i = 0; i < 20; i++) {
        uint8_t msg[64];
        am_fill(msg, sizeof(msg), i);
        struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
        assert_int_equal(am_sendi(i % 2 ? b : a, i % 2 ? pa : pb, TAG, &iov, 1), SX_OK);
    }
    bool ok = am_progress_until(a, b, &dev_got, 20);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    char *log = capture_stop();
    if (!ok)
        fail_msg("the messages did not arrive:\n%s", log);
    assert_contains(log, "is up (rdmacm");
    free(log);
    dev_got = 0;
#else
    print_message("skipped: this build has no rdmacm (librdmacm or libibverbs missing)\n");
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#if HAVE_RDMACM_CPC
        cmocka_unit_test_setup_teardown(test_blob_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blob_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priv_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priv_hostile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_path_addr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_component_slots, setup, teardown),
#endif
        cmocka_unit_test(test_offers_beyond_max),
        cmocka_unit_test_setup_teardown(test_absent_from_udp_card, setup, teardown),
        cmocka_unit_test_setup_teardown(test_named_cannot_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spec_accepted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_offer_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_dest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_connect, setup, teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
