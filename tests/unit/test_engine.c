/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Engine lifetime, parameters, home shards and progress through the public
 * API. Threads the tests start report problems through their own structs;
 * the main thread asserts after joining them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <hwloc.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <shardx.h>

#include "common/log.h"
#include "test_filter.h"
#include "log_capture.h"
#include "shard/auth.h"

#define NTHREADS 4

/* ---------------------------------------------------------------- helpers */

/* Creates an engine from up to two NAME=value settings (NULL names end the list). */
static sx_engine_h create_with(const char *name1, const char *value1, const char *name2,
                               const char *value2)
{
    sx_config_kv_t kv[2] = {{name1, value1}, {name2, value2}};
    sx_engine_params_t params = {.field_mask = SX_ENGINE_PARAM_CONFIG,
                                 .config = kv,
                                 .config_count = name1 == NULL   ? 0
                                                 : name2 == NULL ? 1
                                                                 : 2};
    sx_engine_h e = NULL;
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    assert_non_null(e);
    return e;
}

static unsigned shard_count(sx_engine_h e)
{
    unsigned n = 0;
    assert_int_equal(sx_engine_shard_count(e, &n), SX_OK);
    assert_true(n >= 1);
    return n;
}

static unsigned home_of(sx_engine_h e)
{
    unsigned s = UINT_MAX;
    assert_int_equal(sx_thread_home_shard(e, &s), SX_OK);
    return s;
}

static unsigned cores_of(sx_engine_h e)
{
    sx_topology_info_t t;
    assert_int_equal(sx_engine_topology(e, &t), SX_OK);
    return t.cores;
}

/* Whether shard @p index of @p e runs on a core that holds CPU @p cpu. */
static bool shard_has_cpu(sx_engine_h e, unsigned index, int cpu)
{
    sx_shard_info_t info;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    bool has;

    if (sx_engine_shard_info(e, index, &info) != SX_OK || set == NULL ||
        hwloc_bitmap_list_sscanf(set, info.cpuset) != 0)
        has = false;
    else
        has = hwloc_bitmap_isset(set, (unsigned)cpu);
    hwloc_bitmap_free(set);
    return has;
}

/* ---------------------------------------------------------------- lifetime */

static void test_create_destroy_loop(void **state)
{
    (void)state;
    for (int i = 0; i < 200; i++) {
        sx_engine_h e = NULL;
        assert_int_equal(sx_engine_create(NULL, &e), SX_OK);
        assert_int_equal(shard_count(e), cores_of(e));
        assert_true(sx_progress(e) >= 0);
        sx_engine_destroy(e);
    }
    for (unsigned i = 0; i < 200; i++) {
        char shards[16], name[32];
        snprintf(shards, sizeof(shards), "%u", 1 + i % 3);
        snprintf(name, sizeof(name), "loop-%u", i);
        sx_config_kv_t kv[] = {{"SHARDS", shards}};
        sx_engine_params_t params = {.field_mask = SX_ENGINE_PARAM_CONFIG | SX_ENGINE_PARAM_NAME,
                                     .config = kv,
                                     .config_count = 1,
                                     .name = name};
        sx_engine_h e = NULL;
        assert_int_equal(sx_engine_create(&params, &e), SX_OK);
        unsigned n = shard_count(e);
        assert_int_equal(n, 1 + i % 3);
        /* The previous engine bound this thread to its last shard; that
         * choice must not leak into a new engine with fewer shards. */
        assert_true(home_of(e) < n);
        assert_int_equal(sx_thread_bind(e, n - 1), SX_OK);
        assert_int_equal(home_of(e), n - 1);
        assert_true(sx_progress(e) >= 0);
        sx_engine_destroy(e);
    }
}

/* @p call returned SX_ERR_INVALID_PARAM and logged "@p what is NULL". */
#define assert_null_refused(call, what)              \
    do {                                             \
        capture_start();                             \
        int rc_ = (call);                            \
        char *log_ = capture_stop();                 \
        assert_int_equal(rc_, SX_ERR_INVALID_PARAM); \
        assert_contains(log_, what " is NULL");      \
        free(log_);                                  \
    } while (0)

/* Every call refuses a NULL engine handle or output pointer with
 * SX_ERR_INVALID_PARAM and a log line that names the call and the
 * argument (most used to return the code without a word). */
static void test_invalid_arguments(void **state)
{
    (void)state;
    sx_engine_h e = create_with(NULL, NULL, NULL, NULL);
    sx_topology_info_t topo;
    sx_shard_info_t info;
    sx_transport_info_t tinfo;
    sx_job_info_t job;
    sx_counter_t counters[1];
    sx_mem_h mem;
    sx_peer_h peer;
    unsigned u;
    size_t n = 1;
    uint64_t v;
    int fd;
    char buf[8];

    assert_int_equal(sx_engine_create(NULL, NULL), SX_ERR_INVALID_PARAM);
    assert_null_refused(sx_engine_shard_count(NULL, &u), "sx_engine_shard_count: the engine");
    assert_null_refused(sx_engine_shard_count(e, NULL), "sx_engine_shard_count: count_p");
    assert_null_refused(sx_engine_topology(NULL, &topo), "sx_engine_topology: the engine");
    assert_null_refused(sx_engine_topology(e, NULL), "sx_engine_topology: info_p");
    assert_null_refused(sx_engine_shard_info(NULL, 0, &info), "sx_engine_shard_info: the engine");
    assert_null_refused(sx_engine_shard_info(e, 0, NULL), "sx_engine_shard_info: info_p");
    assert_null_refused(sx_engine_transport_info(NULL, 0, &tinfo),
                        "sx_engine_transport_info: the engine");
    assert_null_refused(sx_engine_transport_info(e, 0, NULL), "sx_engine_transport_info: info_p");
    assert_null_refused(sx_thread_bind(NULL, 0), "sx_thread_bind: the engine");
    assert_null_refused(sx_thread_home_shard(NULL, &u), "sx_thread_home_shard: the engine");
    assert_null_refused(sx_thread_home_shard(e, NULL), "sx_thread_home_shard: shard_p");
    assert_null_refused(sx_progress(NULL), "sx_progress: the engine");
    assert_null_refused(sx_engine_caller_yields(NULL, 1), "sx_engine_caller_yields: the engine");
    assert_null_refused(sx_engine_fd(NULL, &fd), "sx_engine_fd: the engine");
    assert_null_refused(sx_engine_fd(e, NULL), "sx_engine_fd: fd_p");
    assert_null_refused(sx_engine_address(NULL, buf, &n), "sx_engine_address: the engine");
    assert_null_refused(sx_engine_address(e, buf, NULL), "sx_engine_address: len_p");
    assert_null_refused(sx_engine_join(NULL, &job), "sx_engine_join: the engine");
    assert_null_refused(sx_job_barrier(NULL), "sx_job_barrier: the engine");
    assert_null_refused(sx_am_register(NULL, 1, NULL, NULL), "sx_am_register: the engine");
    assert_null_refused(sx_am_register_ex(NULL, 1, NULL, NULL), "sx_am_register_ex: the engine");
    assert_null_refused(sx_error_register(NULL, NULL, NULL), "sx_error_register: the engine");
    assert_null_refused(sx_peer_add(NULL, 1, buf, sizeof(buf), &peer),
                        "sx_peer_add_ex: the engine");
    assert_null_refused(sx_peer_remove(NULL, NULL), "sx_peer_remove: the engine");
    assert_null_refused(sx_mem_register(NULL, buf, sizeof(buf), 0, &mem),
                        "sx_mem_register: the engine");
    assert_null_refused(sx_mem_deregister(NULL, NULL), "sx_mem_deregister: the engine");
    assert_null_refused(sx_stats_get(NULL, counters, &n), "sx_stats_get: the engine");
    assert_null_refused(sx_stats_get(e, counters, NULL), "sx_stats_get: count_p");
    assert_null_refused(sx_stats_value(NULL, "data_sent", &v), "sx_stats_value: the engine");
    assert_null_refused(sx_stats_value(e, NULL, &v), "sx_stats_value: name");
    assert_null_refused(sx_stats_value(e, "data_sent", NULL), "sx_stats_value: value_p");
    assert_null_refused(sx_dump(NULL, stderr), "sx_dump: the engine");
    assert_null_refused(sx_dump(e, NULL), "sx_dump: out");
    sx_engine_destroy(NULL);
    sx_engine_destroy(e);
}

static void test_field_mask(void **state)
{
    (void)state;
    static const uint64_t unknown[] = {1u << 2, 1u << 31, 1ull << 63, ~0ull,
                                       SX_ENGINE_PARAM_CONFIG | (1u << 5)};
    static char dummy;
    sx_engine_params_t params = {0};
    sx_engine_h e;

    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        e = (sx_engine_h)(void *)&dummy;
        params.field_mask = unknown[i];
        assert_int_equal(sx_engine_create(&params, &e), SX_ERR_INVALID_PARAM);
        assert_ptr_equal(e, (sx_engine_h)(void *)&dummy);
    }
    assert_int_equal(sx_engine_create(&params, NULL), SX_ERR_INVALID_PARAM);

    /* Fields whose bit is clear are ignored, even when they are nonsense. */
    params.field_mask = 0;
    params.config = NULL;
    params.config_count = 7;
    params.name = NULL;
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    sx_engine_destroy(e);
    /* With the bit set, a NULL config with a count is an error. */
    params.field_mask = SX_ENGINE_PARAM_CONFIG;
    assert_int_equal(sx_engine_create(&params, &e), SX_ERR_INVALID_PARAM);
    params.field_mask = SX_ENGINE_PARAM_CONFIG | SX_ENGINE_PARAM_NAME;
    params.config_count = 0;
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    sx_engine_destroy(e);
}

static void test_name_in_log(void **state)
{
    (void)state;
    static const sx_config_kv_t kv[] = {{"LOG_LEVEL", "info"}};
    char name[] = "engine-under-test";
    sx_engine_params_t params = {.field_mask = SX_ENGINE_PARAM_CONFIG | SX_ENGINE_PARAM_NAME,
                                 .config = kv,
                                 .config_count = 1,
                                 .name = name};
    sx_engine_h e;

    capture_start();
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    sx_engine_destroy(e);
    params.field_mask = SX_ENGINE_PARAM_CONFIG; /* name ignored without its bit */
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    sx_engine_destroy(e);
    sx_log_set_level(SX_LOG_WARN);
    char *log = capture_stop();
    const char *first = strstr(log, "engine-under-test: ");
    assert_non_null(first);
    assert_null(strstr(first + 1, "engine-under-test"));
    assert_non_null(strstr(first, "shardx: "));
    free(log);
}

/* SX_MAX_INFLIGHT is cut to what the receive sockets hold, with a warning
 * that says why; a budget that fits is left alone. */
static void test_inflight_fits_socket(void **state)
{
    (void)state;
    sx_engine_h e;

    capture_start();
    e = create_with("RCVBUF", "128k", NULL, NULL);
    sx_engine_destroy(e);
    char *log = capture_stop();
    const char *w = strstr(log, "SX_MAX_INFLIGHT=4194304 is more than the receive sockets hold");
    assert_non_null(w);
    assert_non_null(strstr(w, "bytes in flight per channel"));
    free(log);

    capture_start();
    e = create_with("RCVBUF", "128k", "MAX_INFLIGHT", "64k");
    sx_engine_destroy(e);
    log = capture_stop();
    assert_null(strstr(log, "SX_MAX_INFLIGHT"));
    free(log);
}

/* Adds @p from's card to @p to; the status. */
static int add_card_of(sx_engine_h to, sx_engine_h from, sx_peer_h *peer_p)
{
    uint8_t card[8192];
    size_t len = sizeof(card);
    assert_int_equal(sx_engine_address(from, card, &len), SX_OK);
    *peer_p = NULL;
    return sx_peer_add(to, 3, card, len, peer_p);
}

/*
 * SX_AUTH as sx_peer_add sees it (issue 25, item 2): peers must agree,
 * and each way they can differ is refused with SX_ERR_AUTH and a line
 * that says which: another key (by id), a key against none, a key of its
 * own against the job's, and the job's before sx_engine_join brought it.
 * A value that is no key is refused without being shown. The same key
 * on both sides is a peer.
 */
static void test_auth_peer_checks(void **state)
{
    (void)state;
    static const char k1[] = "00112233445566778899aabbccddeeff";
    static const char k2[] = "ffeeddccbbaa99887766554433221100";
    sx_peer_h peer;

    if (!sx_auth_available()) {
        print_message("[ auth ] built without libsodium: SX_AUTH is refused\n");
        sx_config_kv_t kv[] = {{"AUTH", k1}};
        sx_engine_params_t params = {
            .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 1};
        sx_engine_h e = NULL;
        assert_int_equal(sx_engine_create(&params, &e), SX_ERR_UNSUPPORTED);
        return;
    }
    sx_engine_h a = create_with("SHARDS", "1", "AUTH", k1);
    sx_engine_h a2 = create_with("SHARDS", "1", "AUTH", k1);
    sx_engine_h b = create_with("SHARDS", "1", "AUTH", k2);
    sx_engine_h none = create_with("SHARDS", "1", NULL, NULL);
    sx_engine_h job = create_with("SHARDS", "1", "AUTH", "job");
    sx_engine_h job2 = create_with("SHARDS", "1", "AUTH", "job");

    assert_int_equal(add_card_of(a, a2, &peer), SX_OK);
    assert_int_equal(sx_peer_remove(a, peer), SX_OK);
    assert_int_equal(add_card_of(a, a, &peer), SX_OK); /* itself, through self */
    assert_int_equal(sx_peer_remove(a, peer), SX_OK);
    assert_int_equal(add_card_of(job, job, &peer), SX_OK);
    assert_int_equal(sx_peer_remove(job, peer), SX_OK);

    static const struct {
        int to, from;
        const char *says;
    } cases[] = {
        {0, 2, "is not this engine's (id "},
        {0, 3, "peer 3 does not authenticate its datagrams, this engine authenticates"},
        {3, 0, "authenticates with a key of its own (SX_AUTH=<key>), this engine does not"},
        {0, 4,
         "authenticates with the job's key (SX_AUTH=job), this engine authenticates "
         "with a key of its own"},
        {4, 5, "this engine has no key yet; sx_engine_join brings it"},
    };
    sx_engine_h es[] = {a, a2, b, none, job, job2};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        capture_start();
        int rc = add_card_of(es[cases[i].to], es[cases[i].from], &peer);
        char *log = capture_stop();
        if (rc != SX_ERR_AUTH || strstr(log, cases[i].says) == NULL)
            fail_msg("case %zu: status %s, log: %s", i, sx_status_name(rc), log);
        assert_null(peer);
        free(log);
    }

    capture_start();
    sx_config_kv_t kv[] = {{"AUTH", "0123456789abcdef0123456789abcdeX"}};
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 1};
    sx_engine_h bad = NULL;
    assert_int_equal(sx_engine_create(&params, &bad), SX_ERR_INVALID_PARAM);
    char *log = capture_stop();
    assert_non_null(strstr(log, "invalid value of SX_AUTH (32 characters, not shown)"));
    assert_null(strstr(log, "0123456789abcdef"));
    free(log);
    for (size_t i = 0; i < sizeof(es) / sizeof(es[0]); i++)
        sx_engine_destroy(es[i]);
}

/* ---------------------------------------------------------------- shards */

static void test_global_mode(void **state)
{
    (void)state;
    sx_topology_info_t topo;

    sx_engine_h e = create_with("THREAD_MODE", "global", NULL, NULL);
    assert_int_equal(shard_count(e), 1);
    assert_int_equal(sx_engine_topology(e, &topo), SX_OK);
    assert_int_equal(topo.shards, 1);
    assert_int_equal(home_of(e), 0);
    assert_int_equal(sx_thread_bind(e, 0), SX_OK);
    assert_int_equal(sx_thread_bind(e, 1), SX_ERR_OUT_OF_RANGE);
    assert_true(sx_progress(e) >= 0);
    sx_engine_destroy(e);

    capture_start();
    e = create_with("SX_THREAD_MODE", "global", "SHARDS", "4");
    char *log = capture_stop();
    assert_int_equal(shard_count(e), 1);
    sx_engine_destroy(e);
    assert_non_null(strstr(log, "SX_SHARDS=4"));
    free(log);

    assert_int_equal(setenv("SX_THREAD_MODE", "GLOBAL", 1), 0);
    e = create_with(NULL, NULL, NULL, NULL);
    unsetenv("SX_THREAD_MODE");
    assert_int_equal(shard_count(e), 1);
    sx_engine_destroy(e);
}

static void test_shards_parameter(void **state)
{
    (void)state;
    static const char *const counts[] = {"1", "2", "3", "5", "8"};
    sx_topology_info_t topo;

    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        sx_engine_h e = create_with("SHARDS", counts[i], NULL, NULL);
        assert_int_equal(shard_count(e), (unsigned)atoi(counts[i]));
        assert_int_equal(sx_engine_topology(e, &topo), SX_OK);
        assert_int_equal(topo.shards, (unsigned)atoi(counts[i]));
        sx_engine_destroy(e);
    }
    assert_int_equal(setenv("SX_SHARDS", "3", 1), 0);
    sx_engine_h e = create_with(NULL, NULL, NULL, NULL);
    assert_int_equal(shard_count(e), 3);
    sx_engine_destroy(e);
    e = create_with("SHARDS", "2", NULL, NULL); /* kv beats the environment */
    assert_int_equal(shard_count(e), 2);
    sx_engine_destroy(e);
    unsetenv("SX_SHARDS");

    /* The largest count SX_SHARDS allows: a card of every shard's address
     * (IPv6 ones too, where the host has them) is far past 4096 bytes,
     * and another engine takes it whole. Each shard has two or three
     * sockets: the soft descriptor limit goes up to the hard one first. */
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 4096) {
        print_message("[ shards ] RLIMIT_NOFILE's hard limit %llu is too low for 1024 shards: "
                      "not tried\n",
                      (unsigned long long)rl.rlim_max);
        return;
    }
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    e = create_with("SHARDS", "1024", NULL, NULL);
    assert_int_equal(shard_count(e), 1024);
    size_t len = 0;
    assert_int_equal(sx_engine_address(e, NULL, &len), SX_ERR_TRUNCATED);
    assert_true(len > 1024 * 16);
    /* with_addresses.sh gives every shard udp's longest address: the
     * card must then be as long as that makes it (past 64 KiB). */
    const char *min = getenv("SXT_CARD_MIN");
    print_message("[ shards ] a card of 1024 shards: %zu bytes\n", len);
    if (min != NULL)
        assert_true(len >= strtoull(min, NULL, 10));
    uint8_t *card = malloc(len);
    assert_non_null(card);
    assert_int_equal(sx_engine_address(e, card, &len), SX_OK);
    sx_engine_h other = create_with("SHARDS", "1", NULL, NULL);
    sx_peer_h peer = NULL;
    assert_int_equal(sx_peer_add(other, 7, card, len, &peer), SX_OK);
    assert_int_equal(sx_peer_remove(other, peer), SX_OK);
    sx_engine_destroy(other);
    free(card);
    sx_engine_destroy(e);
}

static void on_sent(void *ctx, int status)
{
    *(int *)ctx = status;
}

/* Posts a message to @p peer, which opens its channel; *st_p is set when
 * it completes (at the latest when the engine is destroyed). */
static void post_one(sx_peer_h peer, int *st_p)
{
    static const char byte = 'x';
    struct iovec iov = {.iov_base = (void *)&byte, .iov_len = 1};
    *st_p = SX_INPROGRESS;
    int rc = sx_send(peer, 9, &iov, 1, on_sent, st_p);
    assert_true(rc == SX_OK || rc == SX_INPROGRESS);
}

/* A peer added with a name (sx_peer_add_ex) is named by it in sx_dump and
 * log lines, cut to SX_PEER_NAME_MAX - 1 bytes; without one it is "peer
 * <id>" (issue 24: an MPI runtime names its peers by rank and host). */
static void test_peer_name(void **state)
{
    (void)state;
    unsetenv("SX_SHARDS");
    sx_engine_h e = create_with("SHARDS", "1", NULL, NULL);
    size_t len = 0;
    assert_int_equal(sx_engine_address(e, NULL, &len), SX_ERR_TRUNCATED);
    uint8_t *card = malloc(len);
    assert_non_null(card);
    assert_int_equal(sx_engine_address(e, card, &len), SX_OK);

    sx_peer_params_t pp = {.field_mask = SX_PEER_PARAM_NAME, .name = "rank 7 on node-x"};
    sx_peer_h self = NULL;
    assert_int_equal(sx_peer_add_ex(e, 7, card, len, &pp, &self), SX_OK);
    assert_int_equal(sx_peer_id(self), 7);
    int st;
    post_one(self, &st);
    char *text = dump_text(e);
    assert_non_null(strstr(text, "channel to rank 7 on node-x lane 0 (self"));
    assert_null(strstr(text, "peer 7"));
    free(text);

    /* No name: the id. The bit unset: the name is not read. */
    sx_engine_h other = create_with("SHARDS", "1", NULL, NULL);
    sx_peer_params_t unnamed = {.field_mask = 0, .name = "ignored"};
    sx_peer_h peer = NULL;
    assert_int_equal(sx_peer_add_ex(other, 9, card, len, &unnamed, &peer), SX_OK);
    int st2;
    post_one(peer, &st2);
    text = dump_text(other);
    assert_non_null(strstr(text, "channel to peer 9 lane 0 (remote"));
    assert_null(strstr(text, "ignored"));
    free(text);
    sx_engine_destroy(other);
    assert_int_not_equal(st2, SX_INPROGRESS);

    /* A long name is cut, not refused. */
    char longname[200];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    other = create_with("SHARDS", "1", NULL, NULL);
    pp.name = longname;
    assert_int_equal(sx_peer_add_ex(other, 3, card, len, &pp, &peer), SX_OK);
    post_one(peer, &st2);
    text = dump_text(other);
    char expect[SX_PEER_NAME_MAX + 16];
    snprintf(expect, sizeof(expect), "channel to %.*s lane", SX_PEER_NAME_MAX - 1, longname);
    assert_non_null(strstr(text, expect));
    free(text);
    sx_engine_destroy(other);
    assert_int_not_equal(st2, SX_INPROGRESS);
    /* A malformed card is refused named or not. */
    assert_int_equal(sx_peer_add_ex(e, 8, card, 3, &pp, &peer), SX_ERR_INVALID_PARAM);
    free(card);
    sx_engine_destroy(e);
    assert_int_not_equal(st, SX_INPROGRESS);
}

static void test_shard_info(void **state)
{
    (void)state;
    sx_engine_h e = create_with("SHARDS", "5", NULL, NULL);
    sx_topology_info_t topo;
    sx_shard_info_t info, untouched;
    unsigned n = shard_count(e);

    assert_int_equal(sx_engine_topology(e, &topo), SX_OK);
    assert_int_equal(topo.shards, n);
    assert_true(topo.cores >= 1);
    assert_true(topo.cores_are_pus == 0 || topo.cores_are_pus == 1);
    for (unsigned i = 0; i < n; i++) {
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        assert_int_equal(sx_engine_shard_info(e, i, &info), SX_OK);
        assert_int_equal(info.index, i);
        assert_true(info.core >= 0);
        assert_true(info.numa_node >= -1);
        assert_true(info.numa_node < (int)topo.numa_nodes);
        assert_int_equal(hwloc_bitmap_list_sscanf(set, info.cpuset), 0);
        assert_false(hwloc_bitmap_iszero(set));
        assert_int_equal(hwloc_bitmap_first(set), info.first_pu);
        hwloc_bitmap_free(set);
    }
    memset(&info, 0x5a, sizeof(info));
    memcpy(&untouched, &info, sizeof(info));
    assert_int_equal(sx_engine_shard_info(e, n, &info), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_engine_shard_info(e, UINT_MAX, &info), SX_ERR_NOT_FOUND);
    assert_memory_equal(&info, &untouched, sizeof(info));
    sx_engine_destroy(e);

    e = create_with(NULL, NULL, NULL, NULL);
    assert_int_equal(sx_engine_topology(e, &topo), SX_OK);
    assert_int_equal(topo.shards, topo.cores); /* one shard per core by default */
    assert_int_equal(shard_count(e), topo.cores);
    sx_engine_destroy(e);
}

/* ---------------------------------------------------------------- home shards */

static void test_bind_and_home(void **state)
{
    (void)state;
    sx_engine_h e = create_with("SHARDS", "3", NULL, NULL);
    unsigned home = home_of(e);

    assert_true(home < 3);
    for (int i = 0; i < 1000; i++) {
        assert_true(sx_progress(e) >= 0);
        assert_int_equal(home_of(e), home); /* stable across calls */
    }
    assert_int_equal(sx_thread_bind(e, 3), SX_ERR_OUT_OF_RANGE);
    assert_int_equal(sx_thread_bind(e, UINT_MAX), SX_ERR_OUT_OF_RANGE);
    assert_int_equal(home_of(e), home); /* a failed bind changes nothing */
    for (unsigned s = 0; s < 3; s++) {
        assert_int_equal(sx_thread_bind(e, s), SX_OK);
        assert_int_equal(home_of(e), s);
        assert_true(sx_progress(e) >= 0);
        assert_int_equal(home_of(e), s);
    }
    sx_engine_destroy(e);
}

typedef struct worker {
    sx_engine_h engine;
    pthread_barrier_t *start;
    unsigned id, nshards, iterations;
    int cpu; /* CPU the thread is pinned to, or -1 */
    unsigned errors;
    cpu_set_t mask_before, mask_after;
} worker_t;

/* Uses home shards and progress, checking every answer. */
static void *worker_main(void *arg)
{
    worker_t *w = arg;
    unsigned home, now;

    sched_getaffinity(0, sizeof(w->mask_before), &w->mask_before);
    if (w->start != NULL)
        pthread_barrier_wait(w->start);
    if (sx_thread_home_shard(w->engine, &home) != SX_OK || home >= w->nshards)
        w->errors++;
    if (w->cpu >= 0 && !shard_has_cpu(w->engine, home, w->cpu))
        w->errors++; /* the first home follows the core the thread runs on */
    for (unsigned i = 0; i < w->iterations; i++) {
        if (sx_progress(w->engine) < 0)
            w->errors++;
        if (sx_thread_home_shard(w->engine, &now) != SX_OK || now != home)
            w->errors++;
        if (i % 100 == 99) {
            home = (w->id + i) % w->nshards;
            if (sx_thread_bind(w->engine, home) != SX_OK)
                w->errors++;
            if (sx_thread_bind(w->engine, w->nshards) != SX_ERR_OUT_OF_RANGE)
                w->errors++;
        }
    }
    sched_getaffinity(0, sizeof(w->mask_after), &w->mask_after);
    return NULL;
}

static void run_workers(sx_engine_h e, unsigned nthreads, unsigned iterations, bool together)
{
    worker_t w[NTHREADS * 2];
    pthread_t th[NTHREADS * 2];
    pthread_barrier_t start;

    assert_true(nthreads <= NTHREADS * 2);
    assert_int_equal(pthread_barrier_init(&start, NULL, nthreads), 0);
    for (unsigned i = 0; i < nthreads; i++) {
        w[i] = (worker_t){.engine = e,
                          .start = together ? &start : NULL,
                          .id = i,
                          .nshards = shard_count(e),
                          .iterations = iterations,
                          .cpu = -1};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (unsigned i = 0; i < nthreads; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].errors, 0);
        assert_true(CPU_EQUAL(&w[i].mask_before, &w[i].mask_after));
    }
    pthread_barrier_destroy(&start);
}

static void test_new_threads_get_valid_homes(void **state)
{
    (void)state;
    char shards[16];
    sx_engine_h e = create_with(NULL, NULL, NULL, NULL);

    snprintf(shards, sizeof(shards), "%u", 2 * cores_of(e) + 1);
    sx_engine_destroy(e);
    e = create_with("SHARDS", shards, NULL, NULL);
    run_workers(e, NTHREADS * 2, 200, false);
    sx_engine_destroy(e);
}

/* A thread pinned (by the test) to CPU c gets a home shard on c's core. */
static void test_home_follows_core(void **state)
{
    (void)state;
    cpu_set_t mask;
    char shards[16];

    assert_int_equal(sched_getaffinity(0, sizeof(mask), &mask), 0);
    for (int variant = 0; variant < 2; variant++) {
        sx_engine_h e = create_with(NULL, NULL, NULL, NULL);
        snprintf(shards, sizeof(shards), "%u", 2 * cores_of(e));
        if (variant == 1) {
            sx_engine_destroy(e);
            e = create_with("SHARDS", shards, NULL, NULL); /* two shards per core */
        }
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
            if (!CPU_ISSET(cpu, &mask))
                continue;
            for (int round = 0; round < 3; round++) {
                worker_t w = {.engine = e, .nshards = shard_count(e), .cpu = cpu, .iterations = 10};
                pthread_attr_t attr;
                pthread_t th;
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cpu, &one);
                assert_int_equal(pthread_attr_init(&attr), 0);
                assert_int_equal(pthread_attr_setaffinity_np(&attr, sizeof(one), &one), 0);
                assert_int_equal(pthread_create(&th, &attr, worker_main, &w), 0);
                assert_int_equal(pthread_join(th, NULL), 0);
                pthread_attr_destroy(&attr);
                assert_int_equal(w.errors, 0);
                assert_true(CPU_EQUAL(&w.mask_after, &one)); /* still pinned, untouched */
            }
        }
        sx_engine_destroy(e);
    }
}

static void test_affinity_untouched(void **state)
{
    (void)state;
    cpu_set_t before, after;
    sx_topology_info_t topo;
    sx_shard_info_t info;

    assert_int_equal(sched_getaffinity(0, sizeof(before), &before), 0);
    for (int variant = 0; variant < 3; variant++) {
        sx_engine_h e = variant == 0   ? create_with(NULL, NULL, NULL, NULL)
                        : variant == 1 ? create_with("SHARDS", "5", NULL, NULL)
                                       : create_with("THREAD_MODE", "global", NULL, NULL);
        unsigned n = shard_count(e);
        assert_int_equal(sched_getaffinity(0, sizeof(after), &after), 0);
        assert_true(CPU_EQUAL(&before, &after));
        assert_true(home_of(e) < n);
        for (unsigned s = 0; s < n; s++) {
            assert_int_equal(sx_thread_bind(e, s), SX_OK);
            assert_true(sx_progress(e) >= 0);
            assert_int_equal(sx_engine_shard_info(e, s, &info), SX_OK);
            assert_int_equal(sched_getaffinity(0, sizeof(after), &after), 0);
            assert_true(CPU_EQUAL(&before, &after));
        }
        assert_int_equal(sx_engine_topology(e, &topo), SX_OK);
        assert_true(topo.cores <= (unsigned)CPU_COUNT(&before));
        sx_engine_destroy(e);
        assert_int_equal(sched_getaffinity(0, sizeof(after), &after), 0);
        assert_true(CPU_EQUAL(&before, &after));
    }
}

/* ---------------------------------------------------------------- concurrency */

static void test_concurrent_progress(void **state)
{
    (void)state;
    char shards[16];
    sx_engine_h e = create_with(NULL, NULL, NULL, NULL);

    run_workers(e, NTHREADS, 2000, true); /* one shard per core */
    sx_engine_destroy(e);
    e = create_with("SHARDS", "1", NULL, NULL); /* everyone on one token */
    run_workers(e, NTHREADS, 2000, true);
    sx_engine_destroy(e);
    e = create_with(NULL, NULL, NULL, NULL);
    snprintf(shards, sizeof(shards), "%u", 2 * cores_of(e) + 1);
    sx_engine_destroy(e);
    e = create_with("SHARDS", shards, NULL, NULL);
    run_workers(e, NTHREADS, 2000, true);
    sx_engine_destroy(e);
    e = create_with("THREAD_MODE", "global", NULL, NULL); /* the recursive lock */
    run_workers(e, NTHREADS, 2000, true);
    sx_engine_destroy(e);
}

static int setup(void **state)
{
    (void)state;
    /* The tests choose their own configuration. */
    unsetenv("SX_SHARDS");
    unsetenv("SX_THREAD_MODE");
    unsetenv("SX_LOG_FILE");
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_destroy_loop),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_field_mask),
        cmocka_unit_test(test_name_in_log),
        cmocka_unit_test(test_inflight_fits_socket),
        cmocka_unit_test(test_auth_peer_checks),
        cmocka_unit_test(test_global_mode),
        cmocka_unit_test(test_shards_parameter),
        cmocka_unit_test(test_peer_name),
        cmocka_unit_test(test_shard_info),
        cmocka_unit_test(test_bind_and_home),
        cmocka_unit_test(test_new_threads_get_valid_homes),
        cmocka_unit_test(test_home_follows_core),
        cmocka_unit_test(test_affinity_untouched),
        cmocka_unit_test(test_concurrent_progress),
    };
    /* SXT_ONLY: one case (a ctest entry that runs it in a setting
     * of its own, tests/unit/CMakeLists.txt). */
    if (getenv("SXT_ONLY") != NULL)
        cmocka_set_test_filter(getenv("SXT_ONLY"));
    sx_test_filter_from_env();
    return cmocka_run_group_tests_name("engine", tests, setup, NULL);
}
