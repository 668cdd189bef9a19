/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of the hotel (src/hotel/hotel.c) on a timer wheel. Time is
 * driven by explicit `now` values; nothing sleeps or reads a clock.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <shardx.h>

#include "hotel/hotel.h"
#include "test_filter.h"
#include "common/wheel.h"

/* A packet-like guest that remembers its current key and its evictions. */
typedef struct guest {
    int id;
    sx_hotel_key_t key;
    int evicted;
    int retries_left; /* re-checked in by the eviction callback while > 0 */
    uint64_t rto;
} guest_t;

static struct {
    sx_wheel_t *wheel;
    sx_hotel_t *hotel;
    int evictions;
    guest_t *pair[2]; /* evicting one of these checks the other out */
    int order[64];
} g;

static void evict_cb(void *occupant, void *arg)
{
    guest_t *guest = occupant;
    assert_ptr_equal(arg, &g);
    /* The room is vacated before the callback: the old key is stale. */
    void *out = NULL;
    assert_int_equal(sx_hotel_checkout(g.hotel, guest->key, &out), SX_ERR_NOT_FOUND);
    assert_null(out);
    guest->evicted++;
    if (g.evictions < 64)
        g.order[g.evictions] = guest->id;
    g.evictions++;
    if (guest->retries_left > 0) {
        guest->retries_left--;
        sx_hotel_key_t old = guest->key;
        uint64_t deadline = sx_wheel_now(g.wheel) + guest->rto;
        assert_int_equal(sx_hotel_checkin(g.hotel, guest, deadline, &guest->key), SX_OK);
        assert_true(guest->key != old);
    }
    if (guest == g.pair[0] || guest == g.pair[1]) {
        guest_t *other = guest == g.pair[0] ? g.pair[1] : g.pair[0];
        assert_int_equal(sx_hotel_checkout(g.hotel, other->key, &out), SX_OK);
        assert_ptr_equal(out, other);
    }
}

static int setup(void **state)
{
    (void)state;
    memset(&g, 0, sizeof(g));
    if (sx_wheel_init(100, 0, 1000, &g.wheel) != SX_OK)
        return -1;
    return sx_hotel_init(g.wheel, 8, evict_cb, &g, &g.hotel) == SX_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    sx_hotel_fini(g.hotel);
    /* The hotel cancels what it armed: nothing may be left on the wheel. */
    int left = (int)sx_wheel_pending(g.wheel);
    sx_wheel_fini(g.wheel);
    return left == 0 ? 0 : -1;
}

static void init_guests(guest_t *guests, int n)
{
    for (int i = 0; i < n; i++) {
        memset(&guests[i], 0, sizeof(guests[i]));
        guests[i].id = i;
    }
}

static void test_init_params(void **state)
{
    (void)state;
    sx_hotel_t *h = NULL;
    assert_int_equal(sx_hotel_init(NULL, 8, evict_cb, NULL, &h), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_hotel_init(g.wheel, 0, evict_cb, NULL, &h), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_hotel_init(g.wheel, 8, NULL, NULL, &h), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_hotel_init(g.wheel, 8, evict_cb, NULL, NULL), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_hotel_init(g.wheel, UINT32_MAX, evict_cb, NULL, &h), SX_ERR_INVALID_PARAM);
    assert_null(h);
    sx_hotel_fini(NULL);
}

static void test_full_and_checkout(void **state)
{
    (void)state;
    guest_t guests[9];
    init_guests(guests, 9);
    for (int i = 0; i < 8; i++)
        assert_int_equal(sx_hotel_checkin(g.hotel, &guests[i], 1000000, &guests[i].key), SX_OK);
    sx_hotel_key_t untouched = 12345;
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[8], 1000000, &untouched), SX_ERR_FULL);
    assert_int_equal(untouched, 12345);

    sx_hotel_stats_t st;
    assert_int_equal(sx_hotel_stats(g.hotel, &st), SX_OK);
    assert_int_equal(st.rooms, 8);
    assert_int_equal(st.occupancy, 8);
    assert_int_equal(st.high_water, 8);
    assert_int_equal(st.full, 1);
    assert_int_equal(st.checkins, 8);

    /* Keys are distinct and never the "none" key. */
    for (int i = 0; i < 8; i++) {
        assert_true(guests[i].key != SX_HOTEL_KEY_NONE);
        for (int j = 0; j < i; j++)
            assert_true(guests[i].key != guests[j].key);
    }

    void *out = NULL;
    assert_int_equal(sx_hotel_checkout(g.hotel, guests[3].key, &out), SX_OK);
    assert_ptr_equal(out, &guests[3]);
    assert_int_equal(sx_hotel_checkout(g.hotel, guests[3].key, &out), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_hotel_checkout(g.hotel, SX_HOTEL_KEY_NONE, &out), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_hotel_checkout(g.hotel, guests[0].key + 1000, &out), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_hotel_checkout(g.hotel, guests[0].key ^ (UINT64_C(1) << 40), &out),
                     SX_ERR_NOT_FOUND);
    /* A free room again takes a guest; a NULL occupant_p is allowed. */
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[8], 1000000, &guests[8].key), SX_OK);
    assert_int_equal(sx_hotel_checkout(g.hotel, guests[8].key, NULL), SX_OK);
    assert_int_equal(sx_hotel_occupancy(g.hotel), 7);

    /* Checked-out guests are never evicted. */
    for (int i = 0; i < 8; i++) {
        if (i != 3)
            assert_int_equal(sx_hotel_checkout(g.hotel, guests[i].key, NULL), SX_OK);
    }
    assert_int_equal(sx_wheel_expire(g.wheel, 10000000), 0);
    assert_int_equal(g.evictions, 0);
    assert_int_equal(sx_hotel_occupancy(g.hotel), 0);
}

static void test_eviction_once(void **state)
{
    (void)state;
    guest_t guests[3];
    init_guests(guests, 3);
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[0], 5000, &guests[0].key), SX_OK);
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[1], 3000, &guests[1].key), SX_OK);
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[2], 9000, &guests[2].key), SX_OK);

    assert_int_equal(sx_wheel_expire(g.wheel, 2999), 0);
    assert_int_equal(sx_wheel_expire(g.wheel, 5000), 2);
    assert_int_equal(g.evictions, 2);
    assert_int_equal(g.order[0], 1); /* deadline order */
    assert_int_equal(g.order[1], 0);
    assert_int_equal(guests[0].evicted, 1);
    assert_int_equal(guests[1].evicted, 1);

    /* Checking out an evicted guest finds nothing and calls nothing. */
    void *out = &out;
    assert_int_equal(sx_hotel_checkout(g.hotel, guests[0].key, &out), SX_ERR_NOT_FOUND);
    assert_ptr_equal(out, &out);
    assert_int_equal(sx_hotel_rearm(g.hotel, guests[0].key, 99999), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_wheel_expire(g.wheel, 8999), 0);
    assert_int_equal(g.evictions, 2);

    /* A guest checked out before its deadline is not evicted later. */
    assert_int_equal(sx_hotel_checkout(g.hotel, guests[2].key, &out), SX_OK);
    assert_int_equal(sx_wheel_expire(g.wheel, 100000), 0);
    assert_int_equal(guests[2].evicted, 0);

    sx_hotel_stats_t st;
    sx_hotel_stats(g.hotel, &st);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.checkouts, 1);
    assert_int_equal(st.occupancy, 0);
    assert_int_equal(st.high_water, 3);
}

static void test_recheckin_from_callback(void **state)
{
    (void)state;
    guest_t guest;
    init_guests(&guest, 1);
    guest.retries_left = 3;
    guest.rto = 1000;
    assert_int_equal(sx_hotel_checkin(g.hotel, &guest, 2000, &guest.key), SX_OK);
    sx_hotel_key_t first = guest.key;

    /* Each pass evicts once; the callback re-arms relative to the pass's
     * now, so a retransmission is not evicted again within the same pass. */
    uint64_t now = 2000;
    for (int pass = 1; pass <= 4; pass++, now += 1000) {
        assert_int_equal(sx_wheel_expire(g.wheel, now), 1);
        assert_int_equal(guest.evicted, pass);
        assert_int_equal(sx_hotel_occupancy(g.hotel), pass < 4 ? 1 : 0);
    }
    assert_int_equal(sx_wheel_expire(g.wheel, now + 100000), 0);
    assert_int_equal(guest.evicted, 4);
    assert_int_equal(sx_hotel_checkout(g.hotel, first, NULL), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_hotel_checkout(g.hotel, guest.key, NULL), SX_ERR_NOT_FOUND);

    /* A retransmission that is then ACKed checks out with its newest key. */
    guest.retries_left = 1;
    guest.evicted = 0;
    now += 200000;
    assert_int_equal(sx_hotel_checkin(g.hotel, &guest, now, &guest.key), SX_OK);
    assert_int_equal(sx_wheel_expire(g.wheel, now), 1);
    void *out = NULL;
    assert_int_equal(sx_hotel_checkout(g.hotel, guest.key, &out), SX_OK);
    assert_ptr_equal(out, &guest);
    assert_int_equal(sx_wheel_expire(g.wheel, now + 100000), 0);
    assert_int_equal(guest.evicted, 1);
}

static void test_checkout_from_callback(void **state)
{
    (void)state;
    guest_t guests[2];
    init_guests(guests, 2);
    /* Same deadline, so the victim is due in the same pass; whichever is
     * evicted first checks the other out. */
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[0], 4000, &guests[0].key), SX_OK);
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[1], 4000, &guests[1].key), SX_OK);
    g.pair[0] = &guests[0];
    g.pair[1] = &guests[1];
    assert_int_equal(sx_wheel_expire(g.wheel, 4000), 1);
    assert_int_equal(guests[0].evicted + guests[1].evicted, 1);
    assert_int_equal(sx_hotel_occupancy(g.hotel), 0);
}

static void test_stale_key_after_reuse(void **state)
{
    (void)state;
    guest_t a, b;
    init_guests(&a, 1);
    init_guests(&b, 1);
    assert_int_equal(sx_hotel_checkin(g.hotel, &a, 1000000, &a.key), SX_OK);
    assert_int_equal(sx_hotel_checkout(g.hotel, a.key, NULL), SX_OK);
    /* The free list is LIFO, so b gets a's room, under a new generation. */
    assert_int_equal(sx_hotel_checkin(g.hotel, &b, 1000000, &b.key), SX_OK);
    assert_int_equal((uint32_t)b.key, (uint32_t)a.key);
    assert_true(b.key != a.key);
    void *out = NULL;
    assert_int_equal(sx_hotel_checkout(g.hotel, a.key, &out), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_hotel_rearm(g.hotel, a.key, 5), SX_ERR_NOT_FOUND);
    assert_null(out);
    assert_int_equal(sx_hotel_checkout(g.hotel, b.key, &out), SX_OK);
    assert_ptr_equal(out, &b);

    /* The same holds for a room vacated by an eviction. */
    assert_int_equal(sx_hotel_checkin(g.hotel, &a, 2000, &a.key), SX_OK);
    assert_int_equal(sx_wheel_expire(g.wheel, 2000), 1);
    assert_int_equal(sx_hotel_checkin(g.hotel, &b, 1000000, &b.key), SX_OK);
    assert_int_equal((uint32_t)b.key, (uint32_t)a.key);
    assert_int_equal(sx_hotel_checkout(g.hotel, a.key, NULL), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_hotel_checkout(g.hotel, b.key, NULL), SX_OK);
}

static void test_occupancy_and_rearm(void **state)
{
    (void)state;
    guest_t guests[6];
    init_guests(guests, 6);
    for (int i = 0; i < 5; i++)
        assert_int_equal(sx_hotel_checkin(g.hotel, &guests[i], 100000, &guests[i].key), SX_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(sx_hotel_checkout(g.hotel, guests[i].key, NULL), SX_OK);
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[5], 100000, &guests[5].key), SX_OK);
    sx_hotel_stats_t st;
    sx_hotel_stats(g.hotel, &st);
    assert_int_equal(st.occupancy, 3);
    assert_int_equal(st.high_water, 5);
    assert_int_equal(st.checkins, 6);
    assert_int_equal(st.checkouts, 3);

    /* Re-arming moves the deadline both ways and keeps the key. */
    sx_hotel_key_t k3 = guests[3].key;
    assert_int_equal(sx_hotel_rearm(g.hotel, guests[3].key, 500000), SX_OK);
    assert_int_equal(sx_hotel_rearm(g.hotel, guests[4].key, 3000), SX_OK);
    assert_int_equal(sx_wheel_expire(g.wheel, 3000), 1);
    assert_int_equal(guests[4].evicted, 1);
    assert_int_equal(sx_wheel_expire(g.wheel, 499999), 1); /* guests[5] at 100000 */
    assert_int_equal(guests[3].evicted, 0);
    assert_int_equal(guests[3].key, k3);
    assert_int_equal(sx_wheel_expire(g.wheel, 500000), 1);
    assert_int_equal(guests[3].evicted, 1);
    sx_hotel_stats(g.hotel, &st);
    assert_int_equal(st.occupancy, 0);
    assert_int_equal(st.high_water, 5);
}

static void test_fini_with_guests(void **state)
{
    (void)state;
    guest_t guests[4];
    init_guests(guests, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(sx_hotel_checkin(g.hotel, &guests[i], 5000, &guests[i].key), SX_OK);
    assert_int_equal(sx_wheel_pending(g.wheel), 4);
    /* teardown() finalises the hotel with four guests in: it must cancel
     * their deadlines (checked there) and call nobody back. */
}

/* Rooms are set up when first used, in index order, and a vacated room is
 * reused before a room never used; a key naming a room not yet used finds
 * nothing. */
static void test_rooms_set_up_on_first_use(void **state)
{
    (void)state;
    guest_t guests[9];
    init_guests(guests, 9);
    for (uint32_t i = 0; i < 8; i++) {
        sx_hotel_key_t unused = ((sx_hotel_key_t)1 << 32) | i; /* generation 1, room i */
        assert_int_equal(sx_hotel_checkout(g.hotel, unused, NULL), SX_ERR_NOT_FOUND);
        assert_int_equal(sx_hotel_rearm(g.hotel, unused, 5000), SX_ERR_NOT_FOUND);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sx_hotel_checkin(g.hotel, &guests[i], 1000000, &guests[i].key), SX_OK);
        assert_int_equal((uint32_t)guests[i].key, (uint32_t)i);
    }
    sx_hotel_key_t past_them = ((sx_hotel_key_t)1 << 32) | 3;
    assert_int_equal(sx_hotel_checkout(g.hotel, past_them, NULL), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_hotel_checkout(g.hotel, guests[1].key, NULL), SX_OK);
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[3], 1000000, &guests[3].key), SX_OK);
    assert_int_equal((uint32_t)guests[3].key, 1u); /* the vacated room first */
    for (int i = 4; i < 9; i++) {
        assert_int_equal(sx_hotel_checkin(g.hotel, &guests[i], 1000000, &guests[i].key), SX_OK);
        assert_int_equal((uint32_t)guests[i].key, (uint32_t)(i - 1));
    }
    sx_hotel_key_t untouched = 7;
    assert_int_equal(sx_hotel_checkin(g.hotel, &guests[1], 1000000, &untouched), SX_ERR_FULL);
    assert_int_equal(untouched, 7);
    /* Every room now has a deadline on the wheel: teardown() checks that
     * finalising cancels all eight. */
    assert_int_equal(sx_wheel_pending(g.wheel), 8);
}

/* Random check-ins, check-outs and expiries against a simple model. */
static void test_random_model(void **state)
{
    (void)state;
    enum { N = 32, OPS = 50000 };
    static guest_t guests[N];
    static bool in[N];
    static uint64_t deadline[N];
    init_guests(guests, N);
    memset(in, 0, sizeof(in));
    uint64_t rng = 2024, now = 1000;
    int occupied = 0, high = 0;
    for (int op = 0; op < OPS; op++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u; /* Knuth's MMIX LCG */
        unsigned r = (unsigned)(rng >> 33);
        int i = (int)(r % N);
        switch ((r >> 8) % 4) {
        case 0:
        case 1: {
            if (in[i])
                break;
            deadline[i] = now + (r >> 12) % 5000;
            int rc = sx_hotel_checkin(g.hotel, &guests[i], deadline[i], &guests[i].key);
            assert_int_equal(rc, occupied < 8 ? SX_OK : SX_ERR_FULL);
            if (rc == SX_OK) {
                in[i] = true;
                occupied++;
                high = occupied > high ? occupied : high;
            }
            break;
        }
        case 2: {
            void *out = NULL;
            int rc = sx_hotel_checkout(g.hotel, guests[i].key, &out);
            assert_int_equal(rc, in[i] ? SX_OK : SX_ERR_NOT_FOUND);
            if (in[i]) {
                assert_ptr_equal(out, &guests[i]);
                in[i] = false;
                occupied--;
            }
            break;
        }
        default: {
            now += (r >> 12) % 700;
            int before[N];
            for (int k = 0; k < N; k++)
                before[k] = guests[k].evicted;
            sx_wheel_expire(g.wheel, now);
            for (int k = 0; k < N; k++) {
                /* The wheel's tick is 100 ns, anchored at 1000. */
                bool due = in[k] && (deadline[k] + 99 - 1000) / 100 * 100 + 1000 <= now;
                assert_int_equal(guests[k].evicted - before[k], due ? 1 : 0);
                if (due) {
                    in[k] = false;
                    occupied--;
                }
            }
            break;
        }
        }
        assert_int_equal(sx_hotel_occupancy(g.hotel), occupied);
    }
    sx_hotel_stats_t st;
    sx_hotel_stats(g.hotel, &st);
    assert_int_equal(st.high_water, high);
    assert_int_equal(st.checkins - st.checkouts - st.evictions, occupied);
    assert_true(st.full > 0 && st.evictions > 0 && st.checkouts > 0); /* all paths ran */
}

/* The stats are the one part that any thread may read while the owner
 * works (the TSan build checks that this is race-free). */
static atomic_bool g_stop;

static void *stats_reader(void *arg)
{
    (void)arg;
    unsigned reads = 0;
    while (!atomic_load_explicit(&g_stop, memory_order_acquire) || reads == 0) {
        sx_hotel_stats_t st;
        sx_hotel_stats(g.hotel, &st);
        /* Occupancy is read before the high-water mark, which only grows. */
        if (st.occupancy > st.rooms || st.occupancy > st.high_water)
            return (void *)1;
        reads++;
    }
    return NULL;
}

static void test_stats_from_another_thread(void **state)
{
    (void)state;
    guest_t guests[8];
    init_guests(guests, 8);
    atomic_store(&g_stop, false);
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, stats_reader, NULL), 0);
    for (int round = 0; round < 20000; round++) {
        int n = 1 + round % 8;
        for (int i = 0; i < n; i++)
            assert_int_equal(sx_hotel_checkin(g.hotel, &guests[i], UINT64_MAX / 2, &guests[i].key),
                             SX_OK);
        for (int i = 0; i < n; i++)
            assert_int_equal(sx_hotel_checkout(g.hotel, guests[i].key, NULL), SX_OK);
    }
    /* Release pairs with the reader's acquire load of g_stop. */
    atomic_store_explicit(&g_stop, true, memory_order_release);
    void *result = (void *)1;
    assert_int_equal(pthread_join(reader, &result), 0);
    assert_null(result);
    assert_int_equal(sx_hotel_occupancy(g.hotel), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_init_params, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_and_checkout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recheckin_from_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkout_from_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_key_after_reuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_occupancy_and_rearm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fini_with_guests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rooms_set_up_on_first_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_from_another_thread, setup, teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
