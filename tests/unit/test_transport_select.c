/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Transport selection (SX_TRANSPORTS) and reachability: the include and
 * exclude lists and their errors, the choice by exclusivity, what
 * sx_engine_transport_info reports, and sx_peer_add's answer to a peer
 * whose card names another transport, another ofi provider, or an address
 * this engine cannot use. The ofi parts run when libfabric was found at
 * build time.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "am_util.h"
#include "test_filter.h"
#include "build_config.h"
#include "transports/transport.h"

static int select_with(const char *spec, sx_tl_choice_t *choices, const sx_tl_ops_t **net_p)
{
    sx_tl_config_t cfg = {.nshards = 1, .ofi_provider = "udp"};
    return sx_tl_select(spec, &cfg, choices, net_p);
}

/* Whether verbs can run on this machine (an RDMA device with an ACTIVE
 * port): the expectations about its absence hold only where it cannot. */
static bool verbs_runs_here(void)
{
    const sx_tl_ops_t *verbs = sx_tl_find("verbs");
    sx_tl_config_t cfg = {.nshards = 1};
    sx_tl_query_t q = {0};

    return verbs != NULL && verbs->query(&cfg, 1, &q) == SX_OK;
}

static const sx_tl_choice_t *choice(const sx_tl_choice_t *choices, const char *name)
{
    for (unsigned i = 0; i < SX_TL_KNOWN; i++) {
        if (strcmp(choices[i].name, name) == 0)
            return &choices[i];
    }
    fail_msg("no transport %s", name);
    return NULL;
}

static void test_lists_that_are_refused(void **state)
{
    (void)state;
    sx_tl_choice_t c[SX_TL_KNOWN];
    const sx_tl_ops_t *net = &sx_tl_self_ops;
    static const char *const bad[] = {
        "tcp",            /* unknown */
        "udp,",           /* an empty name */
        ",udp",           /* ... */
        "udp,,ofi",       /* ... */
        "^",              /* ... */
        "udp,^ofi",       /* include and exclude mixed */
        "^self",          /* self cannot go */
        "self",           /* no network transport left */
        "^udp,ofi,verbs", /* ... nor here */
        "fault",          /* a decorator, not a transport */
        "UDP",            /* names are exact */
        "udp ",           /* no spaces */
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = select_with(bad[i], c, &net);
        if (rc != SX_ERR_INVALID_PARAM)
            fail_msg("SX_TRANSPORTS='%s' gave %s", bad[i], sx_status_name(rc));
        assert_null(net);
    }
#if !SX_HAVE_OFI
    assert_int_equal(select_with("ofi", c, &net), SX_ERR_INVALID_PARAM);
#endif
#if !SX_HAVE_VERBS
    /* Not built: a parameter error, as for any name this build lacks. */
    assert_int_equal(select_with("verbs", c, &net), SX_ERR_INVALID_PARAM);
    assert_int_equal(select_with("^udp,ofi", c, &net), SX_ERR_INVALID_PARAM);
#else
    /* Built: a list that leaves only verbs is valid; without a device it
     * fails for that reason (test_transport_verbs checks the detail). */
    if (!verbs_runs_here()) {
        assert_int_equal(select_with("verbs", c, &net), SX_ERR_NO_DEVICE);
        assert_int_equal(select_with("^udp,ofi", c, &net), SX_ERR_NO_DEVICE);
    }
#endif
    /* Excluding what this build lacks (or what cannot run here) is fine. */
    assert_int_equal(select_with("^verbs", c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_udp_ops);
}

static void test_default_and_lists(void **state)
{
    (void)state;
    sx_tl_choice_t c[SX_TL_KNOWN];
    const sx_tl_ops_t *net = NULL;

    /* udp is always there; self is always selected, for the engine itself. */
    assert_int_equal(select_with("", c, &net), SX_OK);
    assert_non_null(net);
    assert_true(choice(c, "udp")->available);
    assert_true(choice(c, "self")->selected);
    assert_int_equal(choice(c, "self")->exclusivity, SX_TL_EXCL_SELF);
    assert_int_equal(choice(c, "verbs")->available, verbs_runs_here());
    unsigned best = 0, selected = 0, chosen = 0;
    for (unsigned i = 0; i < SX_TL_KNOWN; i++) {
        if (!c[i].network || !c[i].available)
            continue;
        best = c[i].exclusivity > best ? c[i].exclusivity : best;
        selected += c[i].selected;
        if (c[i].selected) {
            assert_ptr_equal(c[i].ops, net);
            chosen = c[i].exclusivity;
        }
    }
    assert_int_equal(selected, 1);
    assert_int_equal(chosen, best); /* the highest exclusivity wins */

    assert_int_equal(select_with("udp", c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_udp_ops);
    assert_false(choice(c, "ofi")->allowed);
    assert_true(choice(c, "self")->allowed); /* implied */
    assert_int_equal(select_with("udp,self", c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_udp_ops);
    assert_int_equal(select_with("^ofi", c, &net), SX_OK);
    /* A verbs device would outrank udp. */
    assert_ptr_equal(net, verbs_runs_here() ? sx_tl_find("verbs") : &sx_tl_udp_ops);
    assert_int_equal(select_with("^ofi,^verbs", c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_udp_ops);

#if SX_HAVE_OFI
    /* Named, ofi runs over libfabric's udp provider, an emulation on kernel
     * sockets: alone it is selected, beside udp it loses to it. */
    assert_int_equal(select_with("ofi", c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_ofi_ops);
    assert_int_equal(choice(c, "ofi")->exclusivity, SX_TL_EXCL_EMULATED);
    assert_non_null(strstr(choice(c, "ofi")->detail, "provider udp"));
    assert_int_equal(select_with("udp,ofi", c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_udp_ops);
    assert_true(choice(c, "ofi")->available);
    assert_int_equal(select_with("^udp,verbs", c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_ofi_ops);

    /* A provider that is not there: a parameter error, saying which exist. */
    sx_tl_config_t cfg = {.nshards = 1, .ofi_provider = "no-such-provider"};
    assert_int_equal(sx_tl_select("ofi", &cfg, c, &net), SX_ERR_INVALID_PARAM);
    assert_non_null(strstr(choice(c, "ofi")->detail, "it has: "));
    /* ... but with udp allowed as well, udp runs. */
    assert_int_equal(sx_tl_select("udp,ofi", &cfg, c, &net), SX_OK);
    assert_ptr_equal(net, &sx_tl_udp_ops);
#endif
}

static sx_engine_h engine_with(const char *transports, const char *provider)
{
    sx_config_kv_t kv[3] = {{"SHARDS", "2"}};
    size_t n = 1;

    if (transports != NULL)
        kv[n++] = (sx_config_kv_t){"TRANSPORTS", transports};
    if (provider != NULL)
        kv[n++] = (sx_config_kv_t){"OFI_PROVIDER", provider};
    return am_engine(kv, n);
}

static size_t card_of(sx_engine_h e, uint8_t *card, size_t cap)
{
    size_t len = cap;
    assert_int_equal(sx_engine_address(e, card, &len), SX_OK);
    return len;
}

static void test_engine_parameters(void **state)
{
    (void)state;
    sx_config_kv_t kv[] = {{"TRANSPORTS", "udp,bogus"}};
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 1};
    sx_engine_h e = NULL;

    assert_int_equal(sx_engine_create(&params, &e), SX_ERR_INVALID_PARAM);
    assert_null(e);
    kv[0].value = "^self";
    assert_int_equal(sx_engine_create(&params, &e), SX_ERR_INVALID_PARAM);

    e = engine_with("udp", NULL);
    sx_transport_info_t t;
    unsigned n = 0, selected = 0;
    for (; sx_engine_transport_info(e, n, &t) == SX_OK; n++) {
        assert_non_null(t.name);
        assert_non_null(t.detail);
        if (!t.selected) {
            assert_int_equal(t.mtu, 0);
            continue;
        }
        selected++;
        assert_true(t.mtu > 0);
        if (t.network) {
            assert_string_equal(t.name, "udp");
            assert_string_equal(t.variant, "");
            assert_int_equal(t.mtu, 65000);
        } else {
            assert_string_equal(t.name, "self");
        }
    }
    assert_int_equal(n, SX_TL_KNOWN);
    assert_int_equal(selected, 2);
    assert_int_equal(sx_engine_transport_info(e, n, &t), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_engine_transport_info(NULL, 0, &t), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_engine_transport_info(e, 0, NULL), SX_ERR_INVALID_PARAM);
    sx_engine_destroy(e);
}

/* The card's transport section, found from its end: name, then variant. */
static void card_transport(const uint8_t *card, size_t len, size_t *name_off, size_t *variant_off)
{
    /* Walk the card: header, addresses, offers, then the section. */
    size_t off = 16;
    unsigned shards = (unsigned)(card[6] | card[7] << 8);
    for (unsigned i = 0; i < shards; i++)
        off += 1 + card[off];
    unsigned offers = card[off++];
    for (unsigned i = 0; i < offers; i++)
        off += 3 + card[off + 2];
    *name_off = off;
    *variant_off = off + 1 + card[off];
    /* Then the authentication section: mode 0, none, in these tests. */
    assert_true(*variant_off + 1 + card[*variant_off] + 1 == len);
    assert_int_equal(card[len - 1], 0);
}

static void test_cards_name_the_transport(void **state)
{
    (void)state;
    sx_engine_h a = engine_with("udp", NULL), b = engine_with("udp", NULL);
    uint8_t card[4096], bad[4096];
    size_t len = card_of(b, card, sizeof(card)), name, variant;
    sx_peer_h peer = NULL;

    assert_int_equal(card[4], 4); /* card version */
    card_transport(card, len, &name, &variant);
    assert_int_equal(card[name], 3);
    assert_memory_equal(card + name + 1, "udp", 3);
    assert_int_equal(card[variant], 0);

    /* Another transport's name: unreachable, not malformed. */
    memcpy(bad, card, len);
    memcpy(bad + name + 1, "xyz", 3);
    assert_int_equal(sx_peer_add(a, 2, bad, len, &peer), SX_ERR_PEER_UNREACHABLE);
    /* A variant where udp has none. */
    memcpy(bad, card, len);
    bad[variant] = 1;
    bad[variant + 1] = 'x';
    bad[variant + 2] = 0;
    assert_int_equal(sx_peer_add(a, 2, bad, len + 1, &peer), SX_ERR_PEER_UNREACHABLE);
    /* The authentication section: an unknown mode, a key id cut short, a
     * card without the section. */
    memcpy(bad, card, len);
    bad[len - 1] = 3;
    assert_int_equal(sx_peer_add(a, 2, bad, len, &peer), SX_ERR_INVALID_PARAM);
    bad[len - 1] = 1;
    assert_int_equal(sx_peer_add(a, 2, bad, len + 7, &peer), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_peer_add(a, 2, card, len - 1, &peer), SX_ERR_INVALID_PARAM);
    /* No section, an empty name, an unprintable name: malformed. */
    assert_int_equal(sx_peer_add(a, 2, card, name, &peer), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_peer_add(a, 2, card, variant, &peer), SX_ERR_INVALID_PARAM);
    memcpy(bad, card, len);
    bad[name + 1] = ' ';
    assert_int_equal(sx_peer_add(a, 2, bad, len, &peer), SX_ERR_INVALID_PARAM);
    memcpy(bad, card, len);
    bad[name] = 0;
    memmove(bad + name + 1, bad + name + 4, len - name - 4);
    assert_int_equal(sx_peer_add(a, 2, bad, len - 3, &peer), SX_ERR_INVALID_PARAM);
    /* An address udp cannot read (kind 7 is neither one IPv4 address nor
     * a list): malformed. */
    memcpy(bad, card, len);
    assert_true(bad[17] == 5 || bad[17] == 6);
    bad[17] = 7;
    assert_int_equal(sx_peer_add(a, 2, bad, len, &peer), SX_ERR_INVALID_PARAM);
    /* A version 2 card is refused. */
    memcpy(bad, card, len);
    bad[4] = 2;
    assert_int_equal(sx_peer_add(a, 2, bad, len, &peer), SX_ERR_INVALID_PARAM);

    /* Nothing above was half added: the real card is accepted. */
    assert_int_equal(sx_peer_add(a, 2, card, len, &peer), SX_OK);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

#if SX_HAVE_OFI
typedef struct counter {
    uint64_t n;
} counter_t;

static void on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)peer_id, (void)tag, (void)data, (void)len;
    ((counter_t *)arg)->n++;
}

static void on_done(void *arg, int status)
{
    if (status == SX_OK)
        ((counter_t *)arg)->n++;
}

/* Engines on different transports (or ofi providers) cannot be peers;
 * two ofi engines talk. */
static void test_peers_must_agree(void **state)
{
    (void)state;
    sx_engine_h u = engine_with("udp", NULL), o1 = engine_with("ofi", "udp"),
                o2 = engine_with("ofi", "udp"), s = engine_with("ofi", "sockets");
    uint8_t card[4096];
    size_t len;
    sx_peer_h peer = NULL;
    sx_transport_info_t t;

    for (unsigned i = 0; sx_engine_transport_info(o1, i, &t) == SX_OK; i++) {
        if (t.selected && t.network) {
            assert_string_equal(t.name, "ofi");
            assert_string_equal(t.variant, "udp");
            assert_true(t.mtu > 0 && t.mtu <= 65000);
        }
    }
    len = card_of(o1, card, sizeof(card));
    assert_int_equal(sx_peer_add(u, 2, card, len, &peer), SX_ERR_PEER_UNREACHABLE);
    assert_int_equal(sx_peer_add(s, 2, card, len, &peer), SX_ERR_PEER_UNREACHABLE);
    len = card_of(u, card, sizeof(card));
    assert_int_equal(sx_peer_add(o1, 2, card, len, &peer), SX_ERR_PEER_UNREACHABLE);
    len = card_of(s, card, sizeof(card));
    assert_int_equal(sx_peer_add(o1, 2, card, len, &peer), SX_ERR_PEER_UNREACHABLE);

    /* Two ofi engines over the same provider: a round of messages, large
     * ones chunked into many of its small datagrams. */
    counter_t rx = {0}, tx = {0};
    assert_int_equal(sx_thread_bind(o1, 0), SX_OK);
    assert_int_equal(sx_thread_bind(o2, 0), SX_OK);
    sx_peer_h to2 = am_connect(o1, o2, 2);
    (void)am_connect(o2, o1, 1);
    assert_int_equal(sx_am_register(o2, 9, on_am, &rx), SX_OK);
    static uint8_t big[300000];
    for (unsigned i = 0; i < 20; i++) {
        struct iovec iov = {big, (size_t)i * 15000};
        assert_int_equal(sx_send(to2, 9, &iov, 1, on_done, &tx), SX_INPROGRESS);
    }
    assert_true(am_progress_until(o1, o2, &rx.n, 20));
    assert_true(am_progress_until(o1, o2, &tx.n, 20));
    sx_engine_destroy(u);
    sx_engine_destroy(o1);
    sx_engine_destroy(o2);
    sx_engine_destroy(s);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists_that_are_refused),
        cmocka_unit_test(test_default_and_lists),
        cmocka_unit_test(test_engine_parameters),
        cmocka_unit_test(test_cards_name_the_transport),
#if SX_HAVE_OFI
        cmocka_unit_test(test_peers_must_agree),
#endif
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
