/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A shard's parts working together: requests submitted from several
 * threads run through the token-or-delegate protocol, and guests checked
 * into the shard's hotel are evicted by sx_shard_progress exactly once
 * when their deadline passes, or never when they check out in time; and
 * the thread's cache of operation records gives room for inline data.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/time.h"
#include "test_filter.h"
#include "shard/op_cache.h"
#include "shard/shard.h"

static sx_shard_t *new_shard(unsigned rooms)
{
    sx_shard_conf_t conf = {
        .index = 0,
        .core = 0,
        .first_pu = 0,
        .numa_node = -1,
        .cpuset = NULL,
        .hotel_rooms = rooms,
        .tick_ns = 10000,
    };
    sx_shard_t *s = NULL;
    assert_int_equal(sx_shard_create(&conf, &s), SX_OK);
    assert_non_null(s);
    return s;
}

static void test_create_rejects_bad_conf(void **state)
{
    (void)state;
    sx_shard_conf_t conf = {.hotel_rooms = 16, .tick_ns = 0};
    sx_shard_t *s = (sx_shard_t *)0x1;

    assert_int_equal(sx_shard_create(&conf, &s), SX_ERR_INVALID_PARAM);
    assert_ptr_equal(s, (sx_shard_t *)0x1); /* untouched on failure */
    assert_int_equal(sx_shard_create(NULL, &s), SX_ERR_INVALID_PARAM);
}

/* A guest that counts its evictions. */
typedef struct test_guest {
    sx_shard_guest_t guest;
    unsigned evicted;
    sx_hotel_key_t key;
} test_guest_t;

static void guest_evicted(sx_shard_t *shard, sx_shard_guest_t *guest)
{
    (void)shard;
    ((test_guest_t *)guest)->evicted++;
}

/* A request that checks guests in from inside the token, as the protocol
 * layer will when it sends a packet. */
typedef struct checkin_req {
    sx_inbox_req_t req;
    test_guest_t *guests;
    unsigned count;
    int rc;
} checkin_req_t;

static void checkin_run(void *owner, sx_inbox_req_t *req)
{
    sx_shard_t *shard = owner;
    checkin_req_t *c = (checkin_req_t *)req;

    /* The wheel's own clock is a deadline that has already come: due at
     * the next progress pass, whatever the real time is by then. */
    uint64_t due = sx_wheel_now(shard->wheel);

    c->rc = SX_OK;
    for (unsigned i = 0; i < c->count && c->rc == SX_OK; i++)
        c->rc = sx_shard_checkin_locked(shard, &c->guests[i].guest, due, &c->guests[i].key);
}

static void test_hotel_guests_evicted_once_by_progress(void **state)
{
    (void)state;
    sx_shard_t *s = new_shard(64);
    test_guest_t g[8] = {0};

    for (unsigned i = 0; i < 8; i++)
        g[i].guest.on_evict = guest_evicted;
    checkin_req_t c = {.req.run = checkin_run, .guests = g, .count = 8};
    assert_true(sx_shard_submit_mpsc(s, &c.req));
    assert_int_equal(c.rc, SX_OK);
    assert_int_equal(sx_hotel_occupancy(s->hotel), 8);

    int n = sx_shard_progress(s);
    assert_true(n >= 8);
    for (unsigned i = 0; i < 8; i++)
        assert_int_equal(g[i].evicted, 1);
    assert_int_equal(sx_hotel_occupancy(s->hotel), 0);
    /* Another pass evicts nothing more. */
    sx_shard_progress(s);
    for (unsigned i = 0; i < 8; i++)
        assert_int_equal(g[i].evicted, 1);
    assert_true(sx_stat_read(&s->stats.timers_fired) >= 8);
    sx_shard_destroy(s);
}

static void test_checked_out_guest_never_evicted(void **state)
{
    (void)state;
    sx_shard_t *s = new_shard(16);
    test_guest_t g = {.guest.on_evict = guest_evicted};
    void *occupant = NULL;

    assert_true(sx_token_try_acquire(&s->token));
    assert_int_equal(sx_shard_checkin_locked(s, &g.guest, sx_time_ns(), &g.key), SX_OK);
    assert_int_equal(sx_hotel_checkout(s->hotel, g.key, &occupant), SX_OK);
    assert_ptr_equal(occupant, &g.guest);
    sx_delegate_leave_locked(&s->token, &s->inbox, s);

    sx_shard_progress(s);
    assert_int_equal(g.evicted, 0);
    sx_shard_destroy(s);
}

static void test_full_hotel_and_bad_guest(void **state)
{
    (void)state;
    sx_shard_t *s = new_shard(16);
    test_guest_t g[17] = {0};
    uint64_t far = sx_time_ns() + 3600ull * 1000000000ull;

    assert_true(sx_token_try_acquire(&s->token));
    for (unsigned i = 0; i < 16; i++) {
        g[i].guest.on_evict = guest_evicted;
        assert_int_equal(sx_shard_checkin_locked(s, &g[i].guest, far, &g[i].key), SX_OK);
    }
    g[16].guest.on_evict = guest_evicted;
    assert_int_equal(sx_shard_checkin_locked(s, &g[16].guest, far, &g[16].key), SX_ERR_FULL);
    test_guest_t no_handler = {0};
    assert_int_equal(sx_shard_checkin_locked(s, &no_handler.guest, far, &no_handler.key),
                     SX_ERR_INVALID_PARAM);
    sx_delegate_leave_locked(&s->token, &s->inbox, s);
    sx_shard_destroy(s);
}

/* ------------------------------------------------------------------ */
/* Threads submitting while others progress.                           */

#define MT_THREADS    3
#define MT_PER_THREAD 20000

typedef struct count_req {
    sx_inbox_req_t req;
    uint64_t *counter; /* written under the token only */
} count_req_t;

static void count_run(void *owner, sx_inbox_req_t *req)
{
    (void)owner;
    (*((count_req_t *)req)->counter)++;
}

typedef struct mt_arg {
    sx_shard_t *shard;
    count_req_t *reqs;
    uint64_t *counter;
} mt_arg_t;

static void *mt_thread(void *p)
{
    mt_arg_t *a = p;

    for (unsigned i = 0; i < MT_PER_THREAD; i++) {
        a->reqs[i].req.run = count_run;
        a->reqs[i].counter = a->counter;
        sx_shard_submit_mpsc(a->shard, &a->reqs[i].req);
        /* Every thread also progresses, as MPI threads waiting on requests
         * do; whoever holds the token runs the others' work. */
        if ((i & 15) == 0)
            sx_shard_progress(a->shard);
    }
    return NULL;
}

static void test_threads_submit_and_progress(void **state)
{
    (void)state;
    sx_shard_t *s = new_shard(64);
    uint64_t counter = 0;
    pthread_t t[MT_THREADS];
    mt_arg_t a[MT_THREADS];

    for (unsigned i = 0; i < MT_THREADS; i++) {
        a[i] = (mt_arg_t){.shard = s, .counter = &counter};
        a[i].reqs = calloc(MT_PER_THREAD, sizeof(count_req_t));
        assert_non_null(a[i].reqs);
        assert_int_equal(pthread_create(&t[i], NULL, mt_thread, &a[i]), 0);
    }
    for (unsigned i = 0; i < MT_THREADS; i++)
        pthread_join(t[i], NULL);
    /* No extra progress: nothing may be left behind in the inbox. */
    assert_true(sx_inbox_empty(&s->inbox));
    assert_int_equal(counter, (uint64_t)MT_THREADS * MT_PER_THREAD);
    assert_int_equal(sx_stat_read(&s->inbox.requests_run), (uint64_t)MT_THREADS * MT_PER_THREAD);
    for (unsigned i = 0; i < MT_THREADS; i++)
        free(a[i].reqs);
    sx_shard_destroy(s);
}

/* Records from sx_op_alloc_inline have room for the inline bytes asked
 * (malloc_usable_size says what the allocation holds, so a record made
 * too small fails here, not only under AddressSanitizer); up to
 * SX_OP_INLINE_CACHED they are the cache's, which takes them back and
 * hands them out again, to sx_op_alloc too; longer ones are malloc'd and
 * freed. */
static void test_op_cache_inline_room(void **state)
{
    (void)state;
    const size_t lens[] = {0, 1, 64, SX_OP_INLINE_CACHED, SX_OP_INLINE_CACHED + 1, 4096};

    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t len = lens[i];
        sx_op_t *op = sx_op_alloc_inline(len);
        assert_non_null(op);
        assert_true(malloc_usable_size(op) >= sizeof(*op) + len);
        assert_null(op->peer); /* the record is zeroed, the inline bytes need not be */
        assert_int_equal(op->len, 0);
        if (len > SX_OP_INLINE_CACHED)
            assert_false(op->cached);
        memset(op->inline_data, 0x5a, len);
        bool cached = op->cached;
        sx_op_release(op);
        if (!cached)
            continue;
        /* The cache is last in, first out: the next record is this one,
         * still with its room. */
        sx_op_t *again = sx_op_alloc();
        assert_ptr_equal(again, op);
        assert_true(malloc_usable_size(again) >= sizeof(*again) + SX_OP_INLINE_CACHED);
        assert_true(again->cached);
        sx_op_release(again);
    }
    assert_null(sx_op_alloc_inline(SIZE_MAX));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_bad_conf),
        cmocka_unit_test(test_hotel_guests_evicted_once_by_progress),
        cmocka_unit_test(test_checked_out_guest_never_evicted),
        cmocka_unit_test(test_full_hotel_and_bad_guest),
        cmocka_unit_test(test_threads_submit_and_progress),
        cmocka_unit_test(test_op_cache_inline_room),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
