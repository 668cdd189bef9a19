/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of the hierarchical timer wheel (src/common/wheel.c).
 *
 * Time is never read from a clock: every test passes explicit `now` values,
 * so the tests are deterministic and can start near UINT64_MAX to cross the
 * 64-bit wrap on purpose.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* common/time.h needs clock_gettime() */
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/time.h"
#include "test_filter.h"
#include "common/wheel.h"

/* ---- a logging timer ---------------------------------------------------- */

typedef struct tt {
    sx_timer_t timer;
    int id;
    int fired;
} tt_t;

#define LOG_MAX 8192

static struct {
    sx_wheel_t *wheel;
    size_t n;
    int ids[LOG_MAX];
} g_log;

static void log_cb(sx_timer_t *timer, void *arg)
{
    tt_t *t = arg;
    assert_ptr_equal(&t->timer, timer);
    assert_false(sx_timer_is_pending(timer));
    t->fired++;
    assert_true(g_log.n < LOG_MAX);
    g_log.ids[g_log.n++] = t->id;
}

static sx_wheel_t *new_wheel(uint64_t tick_ns, unsigned levels, uint64_t now)
{
    sx_wheel_t *w = NULL;
    assert_int_equal(sx_wheel_init(tick_ns, levels, now, &w), SX_OK);
    assert_non_null(w);
    g_log.wheel = w;
    g_log.n = 0;
    return w;
}

static void init_tts(tt_t *ts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ts[i].id = (int)i;
        ts[i].fired = 0;
        sx_timer_init(&ts[i].timer, log_cb, &ts[i]);
    }
}

/* SplitMix64 (Steele, Lea, Flood, OOPSLA 2014): a tiny seeded generator. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *state, uint64_t bound)
{
    return bound == 0 ? 0 : rng_next(state) % bound;
}

/* The time a deadline really fires at: rounded up to the tick grid that is
 * anchored at @p grid (a grid point at or before the deadline's tick). */
static uint64_t round_up(uint64_t deadline, uint64_t grid, uint64_t tick)
{
    if (sx_u64_before_eq(deadline, grid))
        return grid;
    uint64_t delta = deadline - grid;
    return grid + (delta + tick - 1) / tick * tick;
}

/* ---- basic behaviour ---------------------------------------------------- */

static void test_init_params(void **state)
{
    (void)state;
    sx_wheel_t *w = NULL;
    assert_int_equal(sx_wheel_init(0, 0, 0, &w), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_wheel_init(1, SX_WHEEL_MAX_LEVELS + 1, 0, &w), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_wheel_init(1, 0, 0, NULL), SX_ERR_INVALID_PARAM);
    assert_null(w);
    for (unsigned levels = 0; levels <= SX_WHEEL_MAX_LEVELS; levels++) {
        assert_int_equal(sx_wheel_init(1000, levels, 42, &w), SX_OK);
        assert_int_equal(sx_wheel_tick_ns(w), 1000);
        assert_int_equal(sx_wheel_now(w), 42);
        assert_int_equal(sx_wheel_pending(w), 0);
        uint64_t nd;
        assert_int_equal(sx_wheel_next_deadline(w, &nd), SX_ERR_NOT_FOUND);
        sx_wheel_fini(w);
    }
    sx_wheel_fini(NULL);
}

static void test_insert_and_fire(void **state)
{
    (void)state;
    sx_wheel_t *w = new_wheel(1000, 0, 0);
    tt_t ts[3];
    init_tts(ts, 3);
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, 1500), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[1].timer, 2000), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[2].timer, 2001), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[2].timer, 9999), SX_ERR_EXISTS);
    assert_int_equal(sx_timer_deadline(&ts[2].timer), 2001);
    assert_int_equal(sx_wheel_pending(w), 3);

    /* 1500 rounds up to 2000: nothing may fire before the tick it rounds to. */
    assert_int_equal(sx_wheel_expire(w, 1999), 0);
    assert_int_equal(sx_wheel_expire(w, 2000), 2);
    assert_int_equal(ts[0].fired + ts[1].fired, 2);
    assert_false(sx_timer_is_pending(&ts[0].timer));
    assert_true(sx_timer_is_pending(&ts[2].timer));
    assert_int_equal(sx_wheel_expire(w, 2999), 0);
    assert_int_equal(sx_wheel_expire(w, 3000), 1);
    assert_int_equal(ts[2].fired, 1);
    assert_int_equal(sx_wheel_pending(w), 0);
    assert_int_equal(sx_wheel_expire(w, 1000000), 0);

    /* A fired timer can be added again. */
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, 1000001), SX_OK);
    assert_int_equal(sx_wheel_expire(w, 1002000), 1);
    assert_int_equal(ts[0].fired, 2);
    sx_wheel_fini(w);
}

static void test_cancel(void **state)
{
    (void)state;
    sx_wheel_t *w = new_wheel(10, 3, 5);
    tt_t ts[4];
    init_tts(ts, 4);
    assert_int_equal(sx_wheel_cancel(w, &ts[0].timer), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, 100), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[1].timer, 100), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[2].timer, 5000000), SX_OK); /* overflow list */
    assert_int_equal(sx_wheel_add(w, &ts[3].timer, 1), SX_OK);       /* due list */
    assert_int_equal(sx_wheel_pending(w), 4);
    assert_int_equal(sx_wheel_cancel(w, &ts[0].timer), SX_OK);
    assert_int_equal(sx_wheel_cancel(w, &ts[0].timer), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_wheel_cancel(w, &ts[2].timer), SX_OK);
    assert_int_equal(sx_wheel_cancel(w, &ts[3].timer), SX_OK);
    assert_false(sx_timer_is_pending(&ts[0].timer));
    assert_int_equal(sx_wheel_pending(w), 1);
    assert_int_equal(sx_wheel_expire(w, 10000000), 1);
    assert_int_equal(ts[0].fired + ts[2].fired + ts[3].fired, 0);
    assert_int_equal(ts[1].fired, 1);

    /* Rearm moves a pending timer and arms an idle one. */
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, 10000100), SX_OK);
    assert_int_equal(sx_wheel_rearm(w, &ts[0].timer, 10000500), SX_OK);
    assert_int_equal(sx_wheel_rearm(w, &ts[1].timer, 10000200), SX_OK);
    assert_int_equal(sx_wheel_pending(w), 2);
    assert_int_equal(sx_wheel_expire(w, 10000499), 1);
    assert_int_equal(ts[1].fired, 2);
    assert_int_equal(ts[0].fired, 0);
    /* The grid is anchored at the init time, 5: 10000500 rounds up to 10000505. */
    assert_int_equal(sx_wheel_expire(w, 10000504), 0);
    assert_int_equal(sx_wheel_expire(w, 10000505), 1);
    assert_int_equal(ts[0].fired, 1);

    /* Rearmed within the tick it waits for (10000515 .. 10000524 round
     * up to 10000525), a timer stays where it is, reports its new
     * deadline and fires once, at that tick; one tick on, it moves. */
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, 10000516), SX_OK);
    assert_int_equal(sx_wheel_rearm(w, &ts[0].timer, 10000524), SX_OK);
    assert_int_equal(sx_timer_deadline(&ts[0].timer), 10000524);
    assert_int_equal(sx_wheel_rearm(w, &ts[0].timer, 10000520), SX_OK);
    assert_int_equal(sx_timer_deadline(&ts[0].timer), 10000520);
    assert_int_equal(sx_wheel_pending(w), 1);
    assert_int_equal(sx_wheel_expire(w, 10000524), 0);
    assert_int_equal(sx_wheel_expire(w, 10000525), 1);
    assert_int_equal(ts[0].fired, 2);
    assert_false(sx_timer_is_pending(&ts[0].timer));
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, 10000530), SX_OK);
    assert_int_equal(sx_wheel_rearm(w, &ts[0].timer, 10000536), SX_OK);
    assert_int_equal(sx_wheel_expire(w, 10000535), 0);
    assert_int_equal(ts[0].fired, 2);
    assert_int_equal(sx_wheel_expire(w, 10000545), 1);
    assert_int_equal(ts[0].fired, 3);

    /* Finalising with timers pending leaves them idle and unfired. */
    int fired = ts[0].fired + ts[1].fired + ts[2].fired;
    sx_wheel_add(w, &ts[0].timer, 0);
    sx_wheel_add(w, &ts[1].timer, 10100000);
    sx_wheel_add(w, &ts[2].timer, UINT64_C(1) << 60);
    sx_wheel_fini(w);
    for (int i = 0; i < 3; i++)
        assert_false(sx_timer_is_pending(&ts[i].timer));
    assert_int_equal(ts[0].fired + ts[1].fired + ts[2].fired, fired); /* as before */
}

/* Many timers, expired in uneven steps: each fires once, never before its
 * deadline, within a tick plus a step after it, in deadline-tick order. */
static void check_order(uint64_t tick, unsigned levels, uint64_t start, uint64_t span,
                        uint64_t max_step, uint64_t seed)
{
    enum { N = 2000 };
    static tt_t ts[N];
    sx_wheel_t *w = new_wheel(tick, levels, start);
    init_tts(ts, N);
    uint64_t rng = seed;
    for (int i = 0; i < N; i++)
        assert_int_equal(sx_wheel_add(w, &ts[i].timer, start + 1 + rng_below(&rng, span)), SX_OK);

    uint64_t now = start, prev_now = start;
    uint64_t last_fire = start;
    while (sx_wheel_pending(w) > 0) {
        now += 1 + rng_below(&rng, max_step);
        size_t first = g_log.n;
        unsigned fired = sx_wheel_expire(w, now);
        assert_int_equal(fired, g_log.n - first);
        for (size_t k = first; k < g_log.n; k++) {
            tt_t *t = &ts[g_log.ids[k]];
            uint64_t d = sx_timer_deadline(&t->timer);
            uint64_t at = round_up(d, start, tick);
            /* Not before its tick, not an expire call late, not ahead of an
             * earlier tick. */
            assert_true(sx_u64_before_eq(d, now));
            assert_true(sx_u64_before_eq(at, now));
            assert_true(sx_u64_before(prev_now, at));
            assert_true(sx_u64_before_eq(last_fire, at));
            last_fire = at;
        }
        prev_now = now;
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(ts[i].fired, 1);
    sx_wheel_fini(w);
}

static void test_expiry_order(void **state)
{
    (void)state;
    check_order(1000, 0, 0, 50000000, 3000, 1);
    check_order(1, 2, 1000, 100000, 17, 2);
    check_order(7, 1, 99, 20000, 5, 3);
    check_order(64, 4, 123456789, 1u << 30, 1u << 16, 4);
}

/* ---- wrap-around, far and past deadlines -------------------------------- */

static void test_wrap_around(void **state)
{
    (void)state;
    /* With a 1 ns tick the tick counter wraps with the clock, 100 ns in;
     * steps of exactly 1 ns check every tick on the way. */
    for (unsigned levels = 1; levels <= SX_WHEEL_MAX_LEVELS; levels += 3) {
        check_order(1, levels, UINT64_MAX - 99, 70000, 1, levels);
        check_order(1, levels, UINT64_MAX - 99, 70000, 13, levels);
        check_order(1, levels, UINT64_MAX - 99, 1u << 24, 5000, levels);
    }
    /* A coarse tick across the nanosecond wrap (the tick counter does not
     * wrap here, the nanosecond clock does). */
    check_order(1000, 0, UINT64_MAX - 5000000, 20000000, 2500, 5);
    check_order(7, 2, UINT64_MAX - 3000, 300000, 40, 6);
    /* Across the signed boundary too, which a careless (int64_t) cast breaks. */
    check_order(3, 3, (UINT64_C(1) << 63) - 20000, 500000, 50, 7);
}

static void expect_fires_at(sx_wheel_t *w, tt_t *t, uint64_t at)
{
    assert_int_equal(sx_wheel_expire(w, at - 1), 0);
    assert_int_equal(t->fired, 0);
    assert_int_equal(sx_wheel_expire(w, at), 1);
    assert_int_equal(t->fired, 1);
}

static void test_far_deadlines(void **state)
{
    (void)state;
    const uint64_t us = 1000, hour = UINT64_C(3600) * 1000000000u, day = 24 * hour;
    const uint64_t far[] = {hour, day, 30 * day, 365 * day, 10 * 365 * day, 100 * 365 * day};
    for (size_t i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
        /* Default levels with 1 us ticks span 2^48 us (8.9 years): the last
         * two are beyond the wheel and must be parked, not lost. */
        const uint64_t start = UINT64_MAX - hour; /* and cross the wrap */
        tt_t t[2];
        sx_wheel_t *w = new_wheel(us, 0, start);
        init_tts(t, 2);
        assert_int_equal(sx_wheel_add(w, &t[0].timer, start + far[i]), SX_OK);
        assert_int_equal(sx_wheel_add(w, &t[1].timer, start + far[i] / 3 + 1), SX_OK);
        /* Hourly expiries force every cascade on the way for the short
         * ones; the long ones jump. */
        uint64_t step = far[i] <= 30 * day ? hour : 97 * day;
        for (uint64_t now = start + step; sx_u64_before(now, start + far[i] - step); now += step) {
            sx_wheel_expire(w, now);
            assert_int_equal(t[0].fired, 0);
        }
        sx_wheel_expire(w, start + far[i] - 1);
        assert_int_equal(t[0].fired, 0);
        assert_int_equal(t[1].fired, 1);
        assert_int_equal(sx_wheel_expire(w, start + far[i]), 1);
        assert_int_equal(t[0].fired, 1);
        sx_wheel_fini(w);
    }

    /* A one-level wheel with a 1 ns tick spans only 64 ticks; everything
     * further is parked and re-examined, never fired early. */
    static const uint64_t offs[] = {
        63, 64, 65, 100, 4096, 1000003, 1000000007, (UINT64_C(1) << 40) + 3, UINT64_C(1) << 61};
    for (unsigned levels = 1; levels <= 3; levels++) {
        for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
            tt_t t;
            sx_wheel_t *w = new_wheel(1, levels, 777);
            init_tts(&t, 1);
            assert_int_equal(sx_wheel_add(w, &t.timer, 777 + offs[i]), SX_OK);
            for (uint64_t now = 777; now < 777 + offs[i] - 1 && now < 20000; now += 37)
                assert_int_equal(sx_wheel_expire(w, now), 0);
            expect_fires_at(w, &t, 777 + offs[i]);
            sx_wheel_fini(w);
        }
    }
}

static void test_past_deadlines(void **state)
{
    (void)state;
    const uint64_t now = UINT64_C(1000000000);
    sx_wheel_t *w = new_wheel(100, 0, now);
    tt_t ts[5];
    init_tts(ts, 5);
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, now - 1), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[1].timer, now), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[2].timer, 0), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[3].timer, now - (UINT64_C(1) << 62)), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[4].timer, now + 1), SX_OK);
    uint64_t nd;
    assert_int_equal(sx_wheel_next_deadline(w, &nd), SX_OK);
    assert_true(sx_u64_before_eq(nd, now));
    /* Due timers fire on the next call even if the clock did not move, or
     * moved backwards. */
    assert_int_equal(sx_wheel_expire(w, now - 50), 4);
    assert_int_equal(ts[4].fired, 0);
    assert_int_equal(sx_wheel_expire(w, now + 99), 0);
    assert_int_equal(sx_wheel_expire(w, now + 100), 1);
    assert_int_equal(ts[4].fired, 1);
    sx_wheel_fini(w);
}

static void test_next_deadline(void **state)
{
    (void)state;
    sx_wheel_t *w = new_wheel(1000, 3, 0);
    tt_t ts[3];
    init_tts(ts, 3);
    uint64_t nd;
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, 5500), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[1].timer, 300001), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[2].timer, 5000000001), SX_OK); /* beyond 64^3 */
    assert_int_equal(sx_wheel_next_deadline(w, &nd), SX_OK);
    assert_int_equal(nd, 6000); /* a level-0 slot is exact: where it will fire */
    assert_int_equal(sx_wheel_cancel(w, &ts[0].timer), SX_OK);
    assert_int_equal(sx_wheel_next_deadline(w, &nd), SX_OK);
    assert_true(nd > 6000); /* the cancelled timer's slot no longer counts */

    /* Sleeping until next_deadline and expiring must reach every timer,
     * each answer no later than the next firing, in a few wake-ups. */
    static const uint64_t fire_at[] = {301000, 5000001000};
    unsigned wakeups = 0;
    for (int k = 0; k < 2; k++) {
        while (ts[k + 1].fired == 0) {
            assert_int_equal(sx_wheel_next_deadline(w, &nd), SX_OK);
            assert_true(sx_u64_before_eq(nd, fire_at[k]));
            sx_wheel_expire(w, nd);
            assert_true(++wakeups < 12);
        }
        assert_int_equal(sx_wheel_now(w), fire_at[k]);
    }
    assert_int_equal(sx_wheel_next_deadline(w, &nd), SX_ERR_NOT_FOUND);
    sx_wheel_fini(w);
}

/*
 * sx_wheel_take_added_min gives the earliest deadline added since the last
 * take, exactly, where next_deadline gives a slot's start: with the clock
 * last advanced long ago (a wheel nobody expired while its owner slept) a
 * timer 10 ms past "now" lies in a higher level, and next_deadline answers
 * that slot's start, here earlier than "now" itself. The engine's service
 * kick relies on the exact time (src/shard/wake.c).
 */
static void test_take_added_min(void **state)
{
    (void)state;
    const uint64_t tick = 1024, t0 = 1000000;
    sx_wheel_t *w = new_wheel(tick, 4, t0);
    tt_t ts[3];
    init_tts(ts, 3);
    uint64_t nd;

    assert_int_equal(sx_wheel_take_added_min(w), UINT64_MAX);
    /* 700 ms later, nobody having expired the wheel: an RTO of 10 ms. */
    uint64_t now = t0 + 700000000, rto_at = now + 10000000;
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, rto_at), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[1].timer, rto_at + 5000000), SX_OK);
    assert_int_equal(sx_wheel_next_deadline(w, &nd), SX_OK);
    assert_true(nd < now); /* a cascade point the stale clock sees */
    assert_int_equal(sx_wheel_take_added_min(w), rto_at);
    assert_int_equal(sx_wheel_take_added_min(w), UINT64_MAX); /* taken */
    /* A rearm counts as an add; a cancel does not lower anything. */
    assert_int_equal(sx_wheel_rearm(w, &ts[1].timer, rto_at - 1), SX_OK);
    assert_int_equal(sx_wheel_cancel(w, &ts[0].timer), SX_OK);
    assert_int_equal(sx_wheel_take_added_min(w), rto_at - 1);
    /* A deadline already past is given as it is. */
    assert_int_equal(sx_wheel_add(w, &ts[2].timer, t0 - 5), SX_OK);
    assert_int_equal(sx_wheel_take_added_min(w), t0 - 5);
    /* A far timer cascades down the levels as the clock advances: moves
     * of the wheel's own are no adds. */
    assert_int_equal(sx_wheel_add(w, &ts[0].timer, now + 3000000000ull), SX_OK);
    assert_int_equal(sx_wheel_take_added_min(w), now + 3000000000ull);
    sx_wheel_expire(w, rto_at + tick); /* the tick grid rounds up */
    assert_int_equal(ts[1].fired + ts[2].fired, 2);
    sx_wheel_expire(w, now + 2900000000ull);
    assert_int_equal(ts[0].fired, 0);
    assert_int_equal(sx_wheel_take_added_min(w), UINT64_MAX);
    sx_wheel_fini(w);
}

/* ---- callbacks that change the wheel ------------------------------------ */

typedef struct actor {
    tt_t base;
    int kind;
    tt_t *other[2];
} actor_t;

enum { ACT_PERIODIC_NOW, ACT_CATCH_UP, ACT_CANCEL_OTHERS, ACT_ADD_OTHERS };

static void actor_cb(sx_timer_t *timer, void *arg)
{
    actor_t *a = arg;
    sx_wheel_t *w = g_log.wheel;
    log_cb(timer, &a->base);
    assert_int_equal(sx_wheel_cancel(w, timer), SX_ERR_NOT_FOUND); /* already off */
    switch (a->kind) {
    case ACT_PERIODIC_NOW:
        assert_int_equal(sx_wheel_add(w, timer, sx_wheel_now(w) + 100), SX_OK);
        break;
    case ACT_CATCH_UP:
        assert_int_equal(sx_wheel_add(w, timer, sx_timer_deadline(timer) + 100), SX_OK);
        break;
    case ACT_CANCEL_OTHERS:
        assert_int_equal(sx_wheel_cancel(w, &a->other[0]->timer), SX_OK);
        assert_int_equal(sx_wheel_rearm(w, &a->other[1]->timer, sx_wheel_now(w) + 1000), SX_OK);
        break;
    case ACT_ADD_OTHERS:
        /* One due later in this pass, one already past: the past one must
         * wait for the next call so that a callback cannot loop forever. */
        assert_int_equal(sx_wheel_add(w, &a->other[0]->timer, sx_timer_deadline(timer) + 80),
                         SX_OK);
        assert_int_equal(sx_wheel_add(w, &a->other[1]->timer, 1), SX_OK);
        break;
    }
}

static void init_actor(actor_t *a, int id, int kind)
{
    a->base.id = id;
    a->base.fired = 0;
    a->kind = kind;
    sx_timer_init(&a->base.timer, actor_cb, a);
}

static void test_callbacks_modify(void **state)
{
    (void)state;
    sx_wheel_t *w = new_wheel(10, 0, 0);
    actor_t a;
    tt_t ts[4];
    init_tts(ts, 4);

    /* Re-adding itself relative to the pass's now fires once per pass. */
    init_actor(&a, 100, ACT_PERIODIC_NOW);
    assert_int_equal(sx_wheel_add(w, &a.base.timer, 100), SX_OK);
    for (uint64_t now = 1000; now <= 10000; now += 1000)
        assert_int_equal(sx_wheel_expire(w, now), 1);
    assert_int_equal(a.base.fired, 10);
    assert_int_equal(sx_wheel_cancel(w, &a.base.timer), SX_OK);

    /* Re-adding from its own deadline catches up within one pass, in order. */
    init_actor(&a, 101, ACT_CATCH_UP);
    assert_int_equal(sx_wheel_add(w, &a.base.timer, 10100), SX_OK);
    assert_int_equal(sx_wheel_expire(w, 11000), 10);
    assert_int_equal(sx_timer_deadline(&a.base.timer), 11100);

    /* Two timers due in the same tick that cancel each other: whichever
     * runs first must stop the other, which sits on the firing list. The
     * winner also re-arms a timer due later in the same pass. */
    sx_wheel_cancel(w, &a.base.timer);
    actor_t b;
    init_actor(&a, 102, ACT_CANCEL_OTHERS);
    init_actor(&b, 104, ACT_CANCEL_OTHERS);
    a.other[0] = &b.base;
    b.other[0] = &a.base;
    a.other[1] = b.other[1] = &ts[1];
    assert_int_equal(sx_wheel_add(w, &a.base.timer, 12000), SX_OK);
    assert_int_equal(sx_wheel_add(w, &b.base.timer, 12000), SX_OK);
    assert_int_equal(sx_wheel_add(w, &ts[1].timer, 12500), SX_OK);
    assert_int_equal(sx_wheel_expire(w, 13000), 1);
    assert_int_equal(a.base.fired + b.base.fired, 1);
    assert_int_equal(ts[1].fired, 0);
    assert_int_equal(sx_wheel_pending(w), 1);
    assert_int_equal(sx_wheel_expire(w, 14000), 1);
    assert_int_equal(ts[1].fired, 1);

    /* Adding from a callback: the in-pass one fires in this pass, after the
     * actor; the past one on the next call. */
    init_actor(&a, 103, ACT_ADD_OTHERS);
    a.other[0] = &ts[2];
    a.other[1] = &ts[3];
    assert_int_equal(sx_wheel_add(w, &a.base.timer, 15000), SX_OK);
    size_t first = g_log.n;
    assert_int_equal(sx_wheel_expire(w, 16000), 2);
    assert_int_equal(g_log.ids[first], 103);
    assert_int_equal(g_log.ids[first + 1], 2);
    assert_int_equal(ts[3].fired, 0);
    assert_true(sx_timer_is_pending(&ts[3].timer));
    assert_int_equal(sx_wheel_expire(w, 16000), 1);
    assert_int_equal(ts[3].fired, 1);
    assert_int_equal(sx_wheel_pending(w), 0);
    sx_wheel_fini(w);
}

/* ---- big jumps ---------------------------------------------------------- */

static void test_big_jumps(void **state)
{
    (void)state;
    tt_t ts[4];
    const uint64_t sec = 1000000000u;

    /* 1 ns ticks, seconds per call: billions of ticks must be skipped, not
     * walked, and everything still fires in order. */
    check_order(1, 0, 5, 10 * sec, 5 * sec, 8);
    check_order(1, 2, 5, 10 * sec, 5 * sec, 9);

    /* A jump that stops between timers, then 2^62 ns with an empty wheel,
     * then a timer armed relative to the new clock. */
    sx_wheel_t *w = new_wheel(1, 2, 0);
    init_tts(ts, 4);
    sx_wheel_add(w, &ts[0].timer, 10);
    sx_wheel_add(w, &ts[1].timer, sec);
    sx_wheel_add(w, &ts[2].timer, 10 * sec);
    assert_int_equal(sx_wheel_expire(w, 5 * sec), 2);
    assert_int_equal(sx_wheel_expire(w, 10 * sec - 1), 0);
    assert_int_equal(sx_wheel_expire(w, 10 * sec), 1);
    const uint64_t later = 10 * sec + (UINT64_C(1) << 62);
    assert_int_equal(sx_wheel_expire(w, later), 0);
    sx_wheel_add(w, &ts[3].timer, later + 12345);
    expect_fires_at(w, &ts[3], later + 12345);
    sx_wheel_fini(w);
}

/* ---- randomized test against a reference model -------------------------- */

/*
 * The model knows, for each timer, the grid time at which the wheel must
 * fire it ("eff": its deadline rounded up to the tick grid, or the grid
 * time when it was added if the deadline had already passed). A pass of
 * expire(now) must fire exactly the timers whose eff is at or before the
 * grid time of now, in non-decreasing eff, except those that callbacks
 * cancel or move first. In the callback configurations, callbacks re-add
 * themselves (with a passed deadline, which must wait for the next call, or
 * after the pass), cancel other timers and re-arm them.
 */
enum { RM_N = 256, RM_OPS = 100000 };

static struct rm {
    sx_wheel_t *w;
    uint64_t tick, base, now, grid, rng;
    bool callbacks;
    size_t count;
    tt_t t[RM_N];
    bool pending[RM_N];
    bool expected[RM_N]; /* must fire in the pass in progress */
    uint64_t deadline[RM_N];
    uint64_t eff[RM_N];
    bool in_pass;
    uint64_t pass_now, prev_grid, last_eff;
    unsigned pass_fired;
} M;

static uint64_t rm_grid_of(uint64_t now)
{
    return M.base + (now - M.base) / M.tick * M.tick;
}

static void rm_set(int i, uint64_t deadline, uint64_t grid)
{
    if (!M.pending[i])
        M.count++;
    M.pending[i] = true;
    M.expected[i] = false;
    M.deadline[i] = deadline;
    M.eff[i] = round_up(deadline, grid, M.tick);
}

static void rm_clear(int i)
{
    if (M.pending[i])
        M.count--;
    M.pending[i] = M.expected[i] = false;
}

static void rm_cb(sx_timer_t *timer, void *arg)
{
    int i = ((tt_t *)arg)->id;
    assert_true(M.in_pass);
    assert_false(sx_timer_is_pending(timer));
    assert_true(M.expected[i]);
    assert_true(sx_u64_before_eq(M.deadline[i], M.pass_now));
    assert_true(sx_u64_before_eq(M.last_eff, M.eff[i]));
    M.last_eff = M.eff[i];
    rm_clear(i);
    M.pass_fired++;
    if (!M.callbacks)
        return;

    /* The wheel's clock inside this callback: the tick being expired, or
     * the clock before the pass for a timer that was already due. */
    uint64_t grid = sx_u64_before(M.eff[i], M.prev_grid) ? M.prev_grid : M.eff[i];
    uint64_t r = rng_below(&M.rng, 100), d;
    int j = (int)rng_below(&M.rng, RM_N);
    if (r < 25) {
        d = M.deadline[i] - rng_below(&M.rng, 3 * M.tick);
        assert_int_equal(sx_wheel_add(M.w, timer, d), SX_OK);
        rm_set(i, d, grid);
    } else if (r < 50) {
        d = M.pass_now + 1 + rng_below(&M.rng, 100 * M.tick);
        assert_int_equal(sx_wheel_add(M.w, timer, d), SX_OK);
        rm_set(i, d, grid);
    } else if (r < 70) {
        int rc = sx_wheel_cancel(M.w, &M.t[j].timer);
        assert_int_equal(rc, M.pending[j] ? SX_OK : SX_ERR_NOT_FOUND);
        rm_clear(j);
    } else if (r < 85) {
        d = M.pass_now + 1 + rng_below(&M.rng, 1000 * M.tick);
        assert_int_equal(sx_wheel_rearm(M.w, &M.t[j].timer, d), SX_OK);
        rm_set(j, d, grid);
    }
}

static uint64_t rm_deadline(void)
{
    uint64_t r = rng_below(&M.rng, 100), tk = M.tick;
    if (r < 12) /* on and right next to grid points, where rounding slips show */
        return M.grid + rng_below(&M.rng, 3) * tk + rng_below(&M.rng, 3) - 1;
    if (r < 25)
        return M.now - rng_below(&M.rng, 1000 * tk); /* already passed */
    /* Near, at every level, beyond a small wheel's span, far beyond it. */
    uint64_t range = r < 55   ? 64 * tk
                     : r < 75 ? 4096 * tk
                     : r < 86 ? (1u << 24) * tk
                     : r < 95 ? UINT64_C(1) << 40
                              : UINT64_C(1) << 50;
    return M.now + rng_below(&M.rng, range);
}

static uint64_t rm_step(void)
{
    uint64_t r = rng_below(&M.rng, 100), tk = M.tick;
    /* The last is a process descheduled for hours. */
    uint64_t range = r < 60   ? 8 * tk
                     : r < 85 ? 200 * tk
                     : r < 95 ? (1u << 20) * tk
                     : r < 99 ? UINT64_C(1) << 34
                              : UINT64_C(1) << 44;
    return rng_below(&M.rng, range);
}

static void rm_expire(void)
{
    uint64_t now = M.now + rm_step(), grid = rm_grid_of(now);
    for (int i = 0; i < RM_N; i++)
        M.expected[i] = M.pending[i] && sx_u64_before_eq(M.eff[i], grid);
    M.in_pass = true;
    M.pass_now = now;
    M.prev_grid = M.grid;
    M.last_eff = M.grid - (UINT64_C(1) << 62);
    M.pass_fired = 0;
    unsigned fired = sx_wheel_expire(M.w, now);
    M.in_pass = false;
    assert_int_equal(fired, M.pass_fired);
    for (int i = 0; i < RM_N; i++)
        assert_false(M.expected[i]);
    M.now = now;
    M.grid = grid;
}

static void rm_check(int i)
{
    assert_int_equal(sx_wheel_pending(M.w), M.count);
    assert_int_equal(sx_timer_is_pending(&M.t[i].timer), M.pending[i]);
    uint64_t nd, min = 0;
    bool any = false;
    for (int k = 0; k < RM_N; k++) {
        /* A timer that is already due fires on the next call: at the
         * current grid time at the earliest. */
        uint64_t at = sx_u64_before(M.eff[k], M.grid) ? M.grid : M.eff[k];
        if (M.pending[k] && (!any || sx_u64_before(at, min)))
            min = at;
        any = any || M.pending[k];
    }
    int rc = sx_wheel_next_deadline(M.w, &nd);
    assert_int_equal(rc, any ? SX_OK : SX_ERR_NOT_FOUND);
    if (any) {
        assert_true(sx_u64_before_eq(nd, min));
        assert_true(sx_u64_before_eq(M.grid, nd));
    }
}

static void rm_run(uint64_t tick, unsigned levels, uint64_t base, bool callbacks, uint64_t seed)
{
    memset(&M, 0, sizeof(M));
    M.tick = tick;
    M.base = M.now = M.grid = base;
    M.callbacks = callbacks;
    M.rng = seed;
    assert_int_equal(sx_wheel_init(tick, levels, base, &M.w), SX_OK);
    for (int i = 0; i < RM_N; i++) {
        M.t[i].id = i;
        sx_timer_init(&M.t[i].timer, rm_cb, &M.t[i]);
    }
    for (int op = 0; op < RM_OPS; op++) {
        int i = (int)rng_below(&M.rng, RM_N);
        uint64_t r = rng_below(&M.rng, 100), d;
        if (r < 40) {
            if (M.pending[i]) {
                assert_int_equal(sx_wheel_add(M.w, &M.t[i].timer, 0), SX_ERR_EXISTS);
            } else {
                d = rm_deadline();
                assert_int_equal(sx_wheel_add(M.w, &M.t[i].timer, d), SX_OK);
                rm_set(i, d, M.grid);
            }
        } else if (r < 55) {
            int rc = sx_wheel_cancel(M.w, &M.t[i].timer);
            assert_int_equal(rc, M.pending[i] ? SX_OK : SX_ERR_NOT_FOUND);
            rm_clear(i);
        } else if (r < 65) {
            d = rm_deadline();
            assert_int_equal(sx_wheel_rearm(M.w, &M.t[i].timer, d), SX_OK);
            rm_set(i, d, M.grid);
        } else {
            rm_expire();
        }
        rm_check(i);
    }
    sx_wheel_fini(M.w);
}

static void test_random_model(void **state)
{
    (void)state;
    rm_run(1000, 0, 0, false, 11);
    rm_run(1000, 0, UINT64_MAX - 12345, true, 12);
    rm_run(1, 2, UINT64_MAX - (UINT64_C(1) << 20), true, 13);
    rm_run(7, 3, UINT64_MAX - (UINT64_C(1) << 33), true, 14);
    rm_run(1024, 1, (UINT64_C(1) << 63) - 5000, true, 15);
}

/*
 * The sleep before a deadline (sx_wait_ns, common/time.h), as the
 * progress threads and the engine's service compute it: a deadline just
 * past is due now. The progress threads' own arithmetic read one as far
 * off (until - now wrapped) and slept the whole cap, 100 ms, with a
 * delayed ACK due (the sender's retransmission timer fired first).
 */
static void test_wait_before_deadline(void **state)
{
    (void)state;
    const uint64_t cap = 100000000ull;
    const uint64_t nows[] = {1000, UINT64_MAX - 50, 1ull << 63};

    for (size_t i = 0; i < sizeof(nows) / sizeof(nows[0]); i++) {
        uint64_t now = nows[i];
        assert_int_equal(sx_wait_ns(now, UINT64_MAX, cap), cap);
        assert_int_equal(sx_wait_ns(now, now, cap), 0);
        assert_int_equal(sx_wait_ns(now, now - 1, cap), 0);
        assert_int_equal(sx_wait_ns(now, now - 10000, cap), 0);
        assert_int_equal(sx_wait_ns(now, now + 1, cap), 1);
        assert_int_equal(sx_wait_ns(now, now + 5000, cap), 5000);
        assert_int_equal(sx_wait_ns(now, now + cap, cap), cap);
        assert_int_equal(sx_wait_ns(now, now + 3 * cap, cap), cap);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_params),      cmocka_unit_test(test_insert_and_fire),
        cmocka_unit_test(test_cancel),           cmocka_unit_test(test_expiry_order),
        cmocka_unit_test(test_wrap_around),      cmocka_unit_test(test_far_deadlines),
        cmocka_unit_test(test_past_deadlines),   cmocka_unit_test(test_next_deadline),
        cmocka_unit_test(test_callbacks_modify), cmocka_unit_test(test_big_jumps),
        cmocka_unit_test(test_random_model),     cmocka_unit_test(test_wait_before_deadline),
        cmocka_unit_test(test_take_added_min),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
