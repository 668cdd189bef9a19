/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The pmix modex under a real PMIx launcher. Every rank of an
 * `mpirun -np N` job runs this program (ctest does, see CMakeLists.txt):
 *
 *   test_modex_pmix N
 *
 * Each rank publishes a card of its own length and contents (rank r: r*37+5
 * bytes of a pattern derived from r), reads back every rank's card and
 * checks it byte for byte, checks truncation and bad ranks, checks that a
 * second init/fini pair leaves the first one working (PMIx is reference
 * counted), then runs three fence_nb rounds. Rounds are checked for being
 * barriers: before entering round k each rank creates a marker file, and
 * once its callback has run it must see every rank's marker. Round 3 is the
 * barrier after which the markers of round 2 can be removed.
 *
 * Any mismatch prints a line naming the rank and exits non-zero, which
 * makes mpirun end the job with a failure. In a build without PMIx the
 * program is run directly and checks that the backend refuses politely.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "build_config.h"
#include "common/log.h"

#define CARD_STRIDE     37
#define CARD_BASE       5
#define FENCE_ROUNDS    3
#define FENCE_TIMEOUT_S 60 /* a loaded 2-core machine runs 4 ranks at a time */
#define GUARD           0xee

static uint32_t self_rank = UINT32_MAX;

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    /* One write per line, so that the ranks' lines do not interleave. */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (self_rank == UINT32_MAX)
        fprintf(stderr, "test_modex_pmix: FAIL: %s\n", msg);
    else
        fprintf(stderr, "test_modex_pmix rank %u: FAIL: %s\n", self_rank, msg);
    exit(1);
}

static void expect_status(int got, int want, const char *what)
{
    if (got != want)
        fail("%s returned %s (%s), expected %s", what, sx_status_name(got), sx_strerror(got),
             sx_status_name(want));
}

#if SX_HAVE_PMIX

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static size_t card_len(uint32_t rank)
{
    return (size_t)rank * CARD_STRIDE + CARD_BASE;
}

/* Byte i of rank r's card: a hash of both, so that a card read from the
 * wrong rank or at the wrong offset never matches. */
static uint8_t card_byte(uint32_t rank, size_t i)
{
    uint32_t x = rank * 2654435761u + (uint32_t)i * 40503u + 0x5bd1e995u;

    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return (uint8_t)x;
}

static void fill_card(uint32_t rank, uint8_t *buf)
{
    for (size_t i = 0; i < card_len(rank); i++)
        buf[i] = card_byte(rank, i);
}

static void check_card(uint32_t rank, const uint8_t *buf, size_t len, size_t room)
{
    if (len != card_len(rank))
        fail("card of rank %u: %zu bytes, expected %zu", rank, len, card_len(rank));
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != card_byte(rank, i))
            fail("card of rank %u: byte %zu is 0x%02x, expected 0x%02x", rank, i, buf[i],
                 card_byte(rank, i));
    }
    for (size_t i = len; i < room; i++) {
        if (buf[i] != GUARD)
            fail("card of rank %u: get wrote byte %zu past the card's %zu", rank, i, len);
    }
}

/* Every get path for one rank: a size probe, a buffer one byte short, a
 * roomy buffer and an exact one. */
static void check_get(sx_modex_t *m, uint32_t rank, uint8_t *buf, size_t room)
{
    const size_t want = card_len(rank);
    size_t len = 0;
    int rc;

    rc = m->ops->get(m, rank, NULL, &len);
    expect_status(rc, SX_ERR_TRUNCATED, "get(size probe)");
    if (len != want)
        fail("size probe of rank %u set %zu, expected %zu", rank, len, want);

    memset(buf, GUARD, room);
    len = want - 1;
    rc = m->ops->get(m, rank, buf, &len);
    expect_status(rc, SX_ERR_TRUNCATED, "get(one byte short)");
    if (len != want)
        fail("truncated get of rank %u set %zu, expected %zu", rank, len, want);
    for (size_t i = 0; i < room; i++) {
        if (buf[i] != GUARD)
            fail("truncated get of rank %u wrote byte %zu", rank, i);
    }

    memset(buf, GUARD, room);
    len = room;
    rc = m->ops->get(m, rank, buf, &len);
    expect_status(rc, SX_OK, "get(roomy buffer)");
    check_card(rank, buf, len, room);

    memset(buf, GUARD, room);
    len = want;
    rc = m->ops->get(m, rank, buf, &len);
    expect_status(rc, SX_OK, "get(exact buffer)");
    check_card(rank, buf, len, room);
}

typedef struct fence_wait {
    atomic_int calls;
    atomic_int status;
} fence_wait_t;

/* Runs on PMIx's progress thread. The status is stored before the count,
 * and the count is read with acquire, so a waiter that sees the count sees
 * the status. */
static void fence_cb(void *arg, int status)
{
    fence_wait_t *w = arg;

    atomic_store_explicit(&w->status, status, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->calls, 1, memory_order_release);
}

static void marker_path(char *buf, size_t len, const char *dir, int round, uint32_t rank)
{
    snprintf(buf, len, "%s/round%d.rank%u", dir, round, rank);
}

static void make_marker(const char *dir, int round, uint32_t rank)
{
    char path[512];

    marker_path(path, sizeof(path), dir, round, rank);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        fail("cannot create %s: %s", path, strerror(errno));
    fclose(f);
}

static void fence_round(sx_modex_t *m, const char *dir, int round, fence_wait_t *w)
{
    /* Later ranks enter later, so a fence that let a rank through early
     * would find a marker missing. */
    sleep_ms(m->rank * 20);
    if (round < FENCE_ROUNDS)
        make_marker(dir, round, m->rank);

    int rc = m->ops->fence_nb(m, fence_cb, w);
    expect_status(rc, SX_OK, "fence_nb");
    double deadline = now_ms() + FENCE_TIMEOUT_S * 1e3;
    while (atomic_load_explicit(&w->calls, memory_order_acquire) == 0) {
        if (now_ms() > deadline)
            fail("fence_nb round %d: no callback after %d s", round, FENCE_TIMEOUT_S);
        sleep_ms(1);
    }
    expect_status(atomic_load_explicit(&w->status, memory_order_relaxed), SX_OK,
                  "fence_nb callback");

    if (round < FENCE_ROUNDS) {
        for (uint32_t q = 0; q < m->size; q++) {
            char path[512];
            struct stat st;

            marker_path(path, sizeof(path), dir, round, q);
            if (stat(path, &st) != 0)
                fail("fence_nb round %d completed before rank %u entered it (%s: %s)", round, q,
                     path, strerror(errno));
        }
    }
    /* Every rank has entered this round, so every rank is done checking
     * the previous one: its marker can go. */
    if (round > 1) {
        char path[512];

        marker_path(path, sizeof(path), dir, round - 1, m->rank);
        unlink(path);
    }
}

static int run(uint32_t expected_size)
{
    sx_modex_t m = {.ops = &sx_modex_pmix_ops};
    int rc;

    if (!m.ops->detect())
        fail("not started by a PMIx launcher (PMIX_RANK/PMIX_NAMESPACE unset); "
             "run it as `mpirun -np %u %s %u`, as ctest does",
             expected_size, "test_modex_pmix", expected_size);

    double t0 = now_ms();
    rc = m.ops->init(&m, NULL);
    expect_status(rc, SX_OK, "init");
    self_rank = m.rank;
    double t_init = now_ms();

    const char *env_rank = getenv("PMIX_RANK");
    if (env_rank == NULL || strtoul(env_rank, NULL, 10) != m.rank)
        fail("init says rank %u, PMIX_RANK says %s", m.rank, env_rank ? env_rank : "nothing");
    if (m.size != expected_size)
        fail("init says %u processes, the job was started with %u", m.size, expected_size);

    /* get before exchange is refused rather than left to block. */
    size_t len = 0;
    sx_log_set_file("/dev/null");
    rc = m.ops->get(&m, 0, NULL, &len);
    sx_log_set_file(NULL);
    expect_status(rc, SX_ERR_INVALID_PARAM, "get before exchange");

    const size_t room = card_len(m.size - 1) + 16;
    uint8_t *card = malloc(card_len(m.rank));
    uint8_t *buf = malloc(room);
    if (card == NULL || buf == NULL)
        fail("out of memory");
    fill_card(m.rank, card);
    rc = m.ops->exchange(&m, card, card_len(m.rank));
    expect_status(rc, SX_OK, "exchange");
    double t_exchange = now_ms();

    /* A second init (another engine in the same process) must not take the
     * first one down when it finishes: PMIx counts its inits. */
    sx_modex_t m2 = {.ops = &sx_modex_pmix_ops};
    rc = m2.ops->init(&m2, NULL);
    expect_status(rc, SX_OK, "second init");
    if (m2.rank != m.rank || m2.size != m.size)
        fail("second init says rank %u of %u, the first %u of %u", m2.rank, m2.size, m.rank,
             m.size);
    m2.ops->fini(&m2);
    if (m2.priv != NULL)
        fail("fini left the modex's private state behind");

    for (uint32_t q = 0; q < m.size; q++)
        check_get(&m, q, buf, room);

    len = room;
    expect_status(m.ops->get(&m, m.size, buf, &len), SX_ERR_OUT_OF_RANGE, "get(rank == size)");
    len = room;
    expect_status(m.ops->get(&m, UINT32_MAX, buf, &len), SX_ERR_OUT_OF_RANGE, "get(UINT32_MAX)");
    expect_status(m.ops->get(&m, 0, buf, NULL), SX_ERR_INVALID_PARAM, "get(len_p NULL)");
    double t_get = now_ms();

    /* Marker files for the fence rounds, in a directory named after the
     * job's namespace so that concurrent jobs do not meet. */
    char dir[256];
    const char *tmp = getenv("TMPDIR");
    char nspace[64];
    const char *ns = getenv("PMIX_NAMESPACE");
    size_t n = 0;
    for (; ns[n] != '\0' && n < sizeof(nspace) - 1; n++)
        nspace[n] = (ns[n] >= '0' && ns[n] <= '9') || (ns[n] >= 'a' && ns[n] <= 'z') ||
                            (ns[n] >= 'A' && ns[n] <= 'Z')
                        ? ns[n]
                        : '_';
    nspace[n] = '\0';
    snprintf(dir, sizeof(dir), "%s/sx_test_modex_pmix.%s", tmp && tmp[0] ? tmp : "/tmp", nspace);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        fail("mkdir %s: %s", dir, strerror(errno));

    fence_wait_t waits[FENCE_ROUNDS];
    for (int k = 0; k < FENCE_ROUNDS; k++) {
        atomic_init(&waits[k].calls, 0);
        atomic_init(&waits[k].status, SX_ERR_INTERNAL);
    }
    for (int k = 0; k < FENCE_ROUNDS; k++)
        fence_round(&m, dir, k + 1, &waits[k]);
    double t_fence = now_ms();
    rmdir(dir); /* the last rank out succeeds */

    /* Exactly once: give a stray second call time to show up. */
    sleep_ms(100);
    for (int k = 0; k < FENCE_ROUNDS; k++) {
        int calls = atomic_load_explicit(&waits[k].calls, memory_order_acquire);
        if (calls != 1)
            fail("fence_nb round %d: callback ran %d times", k + 1, calls);
    }

    m.ops->fini(&m);
    if (m.priv != NULL)
        fail("fini left the modex's private state behind");
    free(card);
    free(buf);
    printf("test_modex_pmix rank %u/%u: ok (init %.1f ms, exchange %.1f ms, gets %.1f ms, "
           "%d fences %.1f ms)\n",
           self_rank, expected_size, t_init - t0, t_exchange - t_init, t_get - t_exchange,
           FENCE_ROUNDS, t_fence - t_get);
    return 0;
}

#else /* !SX_HAVE_PMIX */

static int run(uint32_t expected_size)
{
    sx_modex_t m = {.ops = &sx_modex_pmix_ops};

    (void)expected_size;
    if (m.ops->detect())
        fail("detect() is true in a build without PMIx");
    sx_log_set_file("/dev/null");
    int rc = m.ops->init(&m, NULL);
    sx_log_set_file(NULL);
    expect_status(rc, SX_ERR_UNSUPPORTED, "init without PMIx");
    m.ops->fini(&m);
    printf("test_modex_pmix: built without PMIx; the backend refuses as it should\n");
    return 0;
}

#endif /* SX_HAVE_PMIX */

int main(int argc, char **argv)
{
    char *end = NULL;
    unsigned long size = argc == 2 ? strtoul(argv[1], &end, 10) : 0;

    if (argc != 2 || end == argv[1] || *end != '\0' || size == 0 || size > 4096) {
        fprintf(stderr, "usage: mpirun -np N %s N\n", argv[0]);
        return 2;
    }
    return run((uint32_t)size);
}
