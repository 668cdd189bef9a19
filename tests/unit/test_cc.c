/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests for the congestion controller (src/shard/cc.h): the initial
 * window, slow start and its RFC 7661 guard, congestion avoidance, one
 * halving per round trip, ECN's DCTCP cut, persistent congestion, the
 * delay signal (HyStart++), the
 * pacing clock, the per-host table and its atomics under two threads,
 * and an undo racing a veto, a later round's loss and a collapse.
 * The clock is the test's: every call takes `now`.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "shard/cc.h"
#include "test_filter.h"

#define US  1000ull
#define MSS 1472u

static uint64_t cwnd(sx_cc_t *cc)
{
    return atomic_load(&cc->cwnd);
}

/* A controller with a round trip of @p rtt measured at @p now. */
static sx_cc_t *cc_new(sx_cc_table_t *t, uint32_t mss, uint64_t rtt, uint64_t now)
{
    sx_cc_t *cc = sx_cc_get(t, 42, mss);
    assert_non_null(cc);
    if (rtt != 0)
        assert_false(sx_cc_rtt(cc, rtt, 500 * US, now));
    return cc;
}

/* Fills the window as a sender would: packets of @p len while it is open. */
static uint64_t fill(sx_cc_t *cc, size_t len, uint64_t now)
{
    uint64_t sent = 0;
    while (sx_cc_window_open(cc, len, 0, now)) {
        sx_cc_sent(cc, len);
        sent += len;
    }
    return sent;
}

static void test_initial_window(void **state)
{
    (void)state;
    static const uint32_t mss[] = {1472, 8900, 65000};
    static const uint64_t want[] = {14720, 17800, 130000}; /* RFC 9002 section 7.2 */
    for (size_t i = 0; i < 3; i++) {
        sx_cc_table_t t;
        sx_cc_table_init(&t);
        sx_cc_t *cc = sx_cc_get(&t, 7, mss[i]);
        assert_int_equal(cwnd(cc), want[i]);
        assert_int_equal(atomic_load(&cc->ssthresh), UINT64_MAX);
        sx_cc_table_fini(&t);
    }
}

static void test_table_per_host(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    sx_cc_t *a = sx_cc_get(&t, 1, MSS), *b = sx_cc_get(&t, 2, MSS);
    assert_ptr_not_equal(a, b);
    assert_ptr_equal(sx_cc_get(&t, 1, 8900), a); /* shared; the larger datagram kept */
    assert_int_equal(atomic_load(&a->mss), 8900);
    assert_ptr_equal(sx_cc_get(&t, 1, MSS), a);
    assert_int_equal(atomic_load(&a->mss), 8900);
    sx_cc_table_fini(&t);
}

static void test_window_and_slow_start(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);

    /* Nothing in flight: even a packet larger than the window may go. */
    assert_true(sx_cc_window_open(cc, 100000, 0, now));
    assert_int_equal(fill(cc, MSS, now), 10 * MSS);
    assert_int_equal(atomic_load(&cc->limited_ns), now);
    /* Slow start: the window grows by what is acknowledged. */
    for (int i = 0; i < 10; i++) {
        sx_cc_forget(cc, MSS);
        sx_cc_acked(cc, MSS, now + 100 * US);
    }
    assert_int_equal(atomic_load(&cc->inflight), 0);
    assert_int_equal(cwnd(cc), 20 * MSS);
    /* Not limited for more than two round trips: acknowledgements of a
     * window the senders did not fill grow nothing (RFC 7661). */
    sx_cc_sent(cc, MSS);
    sx_cc_forget(cc, MSS);
    sx_cc_acked(cc, MSS, now + 400 * US);
    assert_int_equal(cwnd(cc), 20 * MSS);
    sx_cc_table_fini(&t);
}

static void test_loss_halves_once_per_round_trip(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);

    atomic_store(&cc->cwnd, 64 * MSS);
    assert_int_equal(sx_cc_lost(cc, now - 50 * US, false, 0, now), 1);
    assert_int_equal(cwnd(cc), 32 * MSS);
    assert_int_equal(atomic_load(&cc->ssthresh), 32 * MSS);
    /* Another packet of the same flight (sent before the cut): the same
     * event. */
    assert_int_equal(sx_cc_lost(cc, now - 10 * US, false, 0, now + 20 * US), 0);
    assert_int_equal(cwnd(cc), 32 * MSS);
    /* One sent after it: congestion again. */
    assert_int_equal(sx_cc_lost(cc, now + 30 * US, false, 0, now + 200 * US), 1);
    assert_int_equal(cwnd(cc), 16 * MSS);
    /* Never below two datagrams. */
    for (uint64_t i = 1; i < 10; i++)
        (void)sx_cc_lost(cc, now + 1000 * US * i, false, 0, now + 1000 * US * i + 1);
    assert_int_equal(cwnd(cc), 2 * MSS);
    sx_cc_table_fini(&t);
}

/* ECN (RFC 8257's response): the first CE mark halves the window (alpha
 * starts at 1), once per round trip like a loss; a round trip with few
 * marks lowers alpha, and the next cut is as small as alpha says; counts
 * that claim more marks than datagrams weigh as all marked, no more. */
static void test_ecn_dctcp(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US, rtt = 100 * US;
    sx_cc_t *cc = cc_new(&t, MSS, rtt, now);

    atomic_store(&cc->cwnd, 64 * MSS);
    assert_int_equal(atomic_load(&cc->alpha), SX_CC_ALPHA_ONE);
    /* Unmarked datagrams: no cut. */
    assert_false(sx_cc_ecn(cc, 10, 0, now - 50 * US, now));
    assert_int_equal(cwnd(cc), 64 * MSS);
    /* A mark: halved (alpha 1), ssthresh with it. */
    assert_true(sx_cc_ecn(cc, 5, 1, now - 40 * US, now + 1 * US));
    assert_int_equal(cwnd(cc), 32 * MSS);
    assert_int_equal(atomic_load(&cc->ssthresh), 32 * MSS);
    /* More marks on packets sent before the cut: the same event. */
    assert_false(sx_cc_ecn(cc, 0, 3, now - 10 * US, now + 20 * US));
    assert_int_equal(cwnd(cc), 32 * MSS);
    /* Round trips of unmarked datagrams: alpha falls by g = 1/16 each. */
    uint64_t at = now + 1 * US;
    uint32_t alpha = atomic_load(&cc->alpha);
    for (int i = 1; i <= 20; i++) {
        at += rtt;
        (void)sx_cc_ecn(cc, 100, 0, at - 50 * US, at);
        uint32_t next = atomic_load(&cc->alpha);
        assert_true(next < alpha);
        alpha = next;
    }
    assert_true(alpha < SX_CC_ALPHA_ONE / 2);
    /* A mark now cuts by alpha / 2 only. */
    uint64_t w = cwnd(cc);
    at += 10 * US;
    assert_true(sx_cc_ecn(cc, 0, 1, at - 5 * US, at));
    uint64_t want = w - w * atomic_load(&cc->alpha) / (2 * SX_CC_ALPHA_ONE);
    assert_int_equal(cwnd(cc), want < 2 * MSS ? 2 * MSS : want);
    assert_true(cwnd(cc) > w / 2);
    /* A hostile count: more CE marks than datagrams counts as every one
     * marked; alpha stays within [0, 1]. */
    for (int i = 1; i <= 100; i++) {
        at += rtt;
        (void)sx_cc_ecn(cc, 0, UINT32_MAX, at - 50 * US, at);
        assert_true(atomic_load(&cc->alpha) <= SX_CC_ALPHA_ONE);
    }
    assert_true(cwnd(cc) >= 2 * MSS);
    sx_cc_table_fini(&t);
}

/* Acknowledges everything in flight in one call at @p at (a sender that
 * reads its ACKs late gets them all at once). */
static void ack_all(sx_cc_t *cc, uint64_t at)
{
    int64_t flight = atomic_load(&cc->inflight);
    sx_cc_forget(cc, (size_t)flight);
    sx_cc_acked(cc, (size_t)flight, at);
}

/* Congestion avoidance grows a datagram per smoothed round trip of time
 * (100 us here) while the window is in use, however many ACKs carry it
 * and however late they are read (a descheduled sender catches up
 * SX_CC_GROW_CATCHUP round trips, no more); a window in use is one whose
 * flight reached half of it, or that a sender found full. */
static void test_congestion_avoidance(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);

    atomic_store(&cc->cwnd, 20 * MSS);
    (void)sx_cc_lost(cc, now - 1, false, 0, now);
    assert_int_equal(cwnd(cc), 10 * MSS);
    /* A window acknowledged a datagram at a time over one round trip:
     * one datagram more, at the round trip's end and not before. */
    uint64_t w = cwnd(cc);
    assert_int_equal(fill(cc, MSS, now + 1), w);
    for (uint64_t i = 1; i <= w / MSS; i++) {
        sx_cc_forget(cc, MSS);
        sx_cc_acked(cc, MSS, now + i * 10 * US);
        assert_int_equal(cwnd(cc), (i < 10 ? 10 : 11) * MSS);
    }
    /* Two round trips later, the next window acknowledged by a single
     * ACK: two datagrams, as two round trips of small ACKs would give. */
    (void)fill(cc, MSS, now + 150 * US);
    ack_all(cc, now + 300 * US);
    assert_int_equal(cwnd(cc), 13 * MSS);
    /* ACKs read ten round trips late (the sender was descheduled): the
     * window was in use all along (its flight was full), and growth
     * catches up SX_CC_GROW_CATCHUP round trips, no more. */
    (void)fill(cc, MSS, now + 310 * US);
    ack_all(cc, now + 1300 * US);
    assert_int_equal(cwnd(cc), (13 + SX_CC_GROW_CATCHUP) * MSS);
    /* An application-limited window (one datagram out of 17, nobody
     * waiting for the window) does not grow, nor does it earn growth for
     * later: time counts from the last ACK that found it unused, and the
     * next round trip in use adds one datagram. */
    w = cwnd(cc);
    for (uint64_t i = 1; i <= 10; i++) {
        sx_cc_sent(cc, MSS);
        ack_all(cc, now + 1300 * US + i * 100 * US);
    }
    assert_int_equal(cwnd(cc), w);
    (void)fill(cc, MSS, now + 2300 * US);
    ack_all(cc, now + 2400 * US);
    assert_int_equal(cwnd(cc), w + MSS);
    /* Half the window in flight, nobody waiting: in use (RFC 7661). */
    uint64_t at = now + 2400 * US;
    for (uint64_t i = 0; i < (w + MSS) / MSS / 2; i++)
        sx_cc_sent(cc, MSS);
    ack_all(cc, at + 100 * US);
    assert_int_equal(cwnd(cc), w + 2 * MSS);
    sx_cc_table_fini(&t);
}

static void test_persistent_congestion(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);

    atomic_store(&cc->cwnd, 40 * MSS);
    assert_int_equal(sx_cc_lost(cc, now - 1, true, 0, now), 2);
    assert_int_equal(cwnd(cc), 2 * MSS);
    assert_int_equal(atomic_load(&cc->ssthresh), 20 * MSS);
    /* Once: at the minimum, a further timeout changes nothing. */
    assert_int_equal(sx_cc_lost(cc, now + 1, true, 0, now + 2), 0);
    assert_int_equal(atomic_load(&cc->ssthresh), 20 * MSS);
    /* Slow start back up to the threshold. */
    assert_int_equal(fill(cc, MSS, now + 1), 2 * MSS);
    sx_cc_forget(cc, 2 * MSS);
    sx_cc_acked(cc, 2 * MSS, now + 100 * US);
    assert_int_equal(cwnd(cc), 4 * MSS);
    sx_cc_table_fini(&t);
}

/* A collapse found spurious comes back once, window and threshold, unless
 * another decrease came since (RFC 4015's response). */
static void test_undo_collapse(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);

    atomic_store(&cc->cwnd, 40 * MSS);
    atomic_store(&cc->ssthresh, 60 * MSS);
    assert_int_equal(sx_cc_lost(cc, now - 1, true, 0, now), 2);
    assert_int_equal(cwnd(cc), 2 * MSS);
    assert_true(sx_cc_undo(cc, now));
    assert_int_equal(cwnd(cc), 40 * MSS);
    assert_int_equal(atomic_load(&cc->ssthresh), 60 * MSS);
    assert_false(sx_cc_undo(cc, now)); /* once */
    /* Losses of packets sent before the collapse are still its event. */
    assert_int_equal(sx_cc_lost(cc, now - 5, false, 0, now + 10 * US), 0);
    assert_false(sx_cc_undo(cc, 0));

    /* A halving after the collapse stands: no undo. */
    now += 1000 * US;
    assert_int_equal(sx_cc_lost(cc, now - 1, true, 0, now), 2);
    uint64_t collapse = now;
    assert_int_equal(sx_cc_lost(cc, now + 10 * US, false, 0, now + 500 * US), 1);
    assert_false(sx_cc_undo(cc, collapse));
    assert_int_equal(cwnd(cc), 2 * MSS);

    /* A window that grew past the old one since keeps what it has. */
    now += 1000 * US;
    atomic_store(&cc->cwnd, 10 * MSS);
    assert_int_equal(sx_cc_lost(cc, now - 1, true, 0, now), 2);
    atomic_store(&cc->cwnd, 12 * MSS);
    assert_true(sx_cc_undo(cc, now));
    assert_int_equal(cwnd(cc), 12 * MSS);
    sx_cc_table_fini(&t);
}

/* A new round for test_undo_loss: @p *now moves on 1 ms, the window is
 * @p mss datagrams, and a loss of the round before halves it; returns the
 * cut's time. */
static uint64_t halve(sx_cc_t *cc, uint64_t *now, uint64_t mss)
{
    *now += 1000 * US;
    atomic_store(&cc->cwnd, mss * MSS);
    assert_int_equal(sx_cc_lost(cc, *now - 1, false, 0, *now), 1);
    assert_int_equal(cwnd(cc), mss / 2 * MSS);
    return *now;
}

/* A halving that duplicate reports show spurious comes back once, unless
 * another decrease came since or another channel's loss or a CE mark of
 * the same round vetoed it (RFC 3708's detection, RFC 4015's response);
 * the caller's own losses of the round do not veto it. */
static void test_undo_loss(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);

    atomic_store(&cc->ssthresh, 60 * MSS);
    uint64_t cut = halve(cc, &now, 40);
    assert_false(sx_cc_undo_loss(cc, cut - 1)); /* not that cut */
    assert_false(sx_cc_undo_loss(cc, 0));
    assert_true(sx_cc_undo_loss(cc, cut));
    assert_int_equal(cwnd(cc), 40 * MSS);
    assert_int_equal(atomic_load(&cc->ssthresh), 60 * MSS);
    assert_false(sx_cc_undo_loss(cc, cut)); /* once */
    /* The cut before it stands again: a packet of that round lost after
     * all is a new event. */
    assert_int_equal(sx_cc_lost(cc, cut - 2, false, 0, cut + 10 * US), 1);
    assert_int_equal(cwnd(cc), 20 * MSS);

    /* The maker's own losses of the round leave it undoable. */
    cut = halve(cc, &now, 40);
    assert_int_equal(sx_cc_lost(cc, cut - 5, false, cut, cut + 10 * US), 0);
    assert_true(sx_cc_undo_loss(cc, cut));
    assert_int_equal(cwnd(cc), 40 * MSS);

    /* Another channel's loss of the same round vetoes it. */
    cut = halve(cc, &now, 40);
    assert_int_equal(sx_cc_lost(cc, cut - 5, false, 0, cut + 10 * US), 0);
    assert_false(sx_cc_undo_loss(cc, cut));
    assert_int_equal(cwnd(cc), 20 * MSS);

    /* So does a CE mark of that round. */
    cut = halve(cc, &now, 40);
    assert_false(sx_cc_ecn(cc, 0, 1, cut - 5, cut + 10 * US));
    assert_false(sx_cc_undo_loss(cc, cut));
    assert_int_equal(cwnd(cc), 20 * MSS);

    /* A veto marks the cut once; it does not reach a newer cut, and a
     * newer cut's loss is not taken for the vetoed cut's round. */
    cut = halve(cc, &now, 40);
    assert_true(sx_cc_undo_veto(cc, cut));
    assert_false(sx_cc_undo_veto(cc, cut));
    assert_false(sx_cc_undo_loss(cc, cut));
    assert_int_equal(sx_cc_lost(cc, cut + 10 * US, false, 0, cut + 500 * US), 1);
    assert_int_equal(cwnd(cc), 10 * MSS);
    assert_false(sx_cc_undo_veto(cc, cut));
    cut = halve(cc, &now, 40);
    assert_true(sx_cc_undo_loss(cc, cut));
    assert_int_equal(cwnd(cc), 40 * MSS);
    assert_false(sx_cc_undo_veto(cc, cut)); /* undone: nothing to veto */

    /* A collapse goes back vetoed or not (F-RTO's evidence is its own). */
    now += 1000 * US;
    atomic_store(&cc->cwnd, 40 * MSS);
    assert_int_equal(sx_cc_lost(cc, now - 1, true, 0, now), 2);
    assert_int_equal(sx_cc_lost(cc, now - 5, false, 0, now + 10 * US), 0);
    assert_true(sx_cc_undo(cc, now));
    assert_int_equal(cwnd(cc), 40 * MSS);
    assert_false(sx_cc_undo(cc, now));

    /* A collapse since stands. */
    cut = halve(cc, &now, 40);
    assert_int_equal(sx_cc_lost(cc, cut + 10 * US, true, cut, cut + 500 * US), 2);
    assert_false(sx_cc_undo_loss(cc, cut));
    assert_int_equal(cwnd(cc), 2 * MSS);

    /* A window that grew past the old one since keeps what it has. */
    cut = halve(cc, &now, 10);
    atomic_store(&cc->cwnd, 12 * MSS);
    assert_true(sx_cc_undo_loss(cc, cut));
    assert_int_equal(cwnd(cc), 12 * MSS);

    /* A halving undone after a collapse: the collapse's cut does not
     * stand again as itself, or the collapse's own undo (F-RTO) would
     * give back what the halving had saved. */
    now += 1000 * US;
    atomic_store(&cc->cwnd, 40 * MSS);
    assert_int_equal(sx_cc_lost(cc, now - 1, true, 0, now), 2);
    uint64_t collapse = now;
    atomic_store(&cc->cwnd, 8 * MSS);
    assert_int_equal(sx_cc_lost(cc, now + 10 * US, false, 0, now + 500 * US), 1);
    assert_true(sx_cc_undo_loss(cc, now + 500 * US));
    assert_int_equal(cwnd(cc), 8 * MSS);
    assert_false(sx_cc_undo(cc, collapse));
    assert_int_equal(cwnd(cc), 8 * MSS);
    /* ... and a packet sent between the two, lost after all, is a new
     * event. */
    assert_int_equal(sx_cc_lost(cc, now + 10 * US, false, 0, now + 600 * US), 1);
    assert_int_equal(cwnd(cc), 4 * MSS);
    sx_cc_table_fini(&t);
}

/* A round trip's worth of samples: @p n of @p rtt, read from @p at on
 * (a nanosecond apart), each with a delay target of @p delay; how many
 * ended slow start, and whether the last did (@p last_ended). */
static unsigned round_of(sx_cc_t *cc, unsigned n, uint64_t rtt, uint64_t delay, uint64_t at,
                         bool *last_ended)
{
    unsigned ended = 0;
    bool e = false;
    for (unsigned i = 0; i < n; i++) {
        e = sx_cc_rtt(cc, rtt, delay, at + i);
        ended += e;
    }
    if (last_ended != NULL)
        *last_ended = e;
    return ended;
}

static void test_delay_signal(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);
    bool last;

    atomic_store(&cc->cwnd, 100 * MSS);
    /* Rounds of eight samples (HyStart++, RFC 9406 section 4.2): a round
     * ends with the first sample of a packet sent after it began. Within
     * the target, 450 us above the round before: slow start goes on. */
    assert_int_equal(round_of(cc, 8, 100 * US, 500 * US, now + 1000 * US, NULL), 0);
    assert_int_equal(round_of(cc, 8, 550 * US, 500 * US, now + 2000 * US, NULL), 0);
    assert_int_equal(atomic_load(&cc->ssthresh), UINT64_MAX);
    /* A few late samples (a receiver that was busy) make no round of
     * eight, and a round with one fast sample has its minimum: slow start
     * goes on. */
    assert_int_equal(round_of(cc, 3, 1100 * US, 500 * US, now + 4000 * US, NULL), 0);
    assert_int_equal(round_of(cc, 7, 5000 * US, 500 * US, now + 10000 * US, NULL), 0);
    assert_int_equal(round_of(cc, 1, 100 * US, 500 * US, now + 10000 * US + 7, NULL), 0);
    assert_int_equal(atomic_load(&cc->ssthresh), UINT64_MAX);
    /* A target of 0 turns the signal off. */
    assert_int_equal(round_of(cc, 8, 50000 * US, 0, now + 11000 * US, NULL), 0);
    assert_int_equal(atomic_load(&cc->ssthresh), UINT64_MAX);
    /* A round whose smallest sample is 1,000 us above the round before's,
     * 500 tolerated: slow start ends at its eighth sample, where it is;
     * the window is not cut. */
    assert_int_equal(round_of(cc, 8, 1100 * US, 500 * US, now + 12000 * US, &last), 1);
    assert_true(last);
    assert_int_equal(cwnd(cc), 100 * MSS);
    assert_int_equal(atomic_load(&cc->ssthresh), 100 * MSS);
    /* In congestion avoidance a queue changes nothing: losses decide. */
    assert_int_equal(round_of(cc, 8, 10100 * US, 500 * US, now + 30000 * US, NULL), 0);
    assert_int_equal(cwnd(cc), 100 * MSS);
    /* Nor in a slow start after persistent congestion (RFC 9406 section
     * 4.3: the first slow start only). */
    assert_int_equal(sx_cc_lost(cc, now + 40000 * US, true, 0, now + 45000 * US), 2);
    assert_int_equal(round_of(cc, 8, 100 * US, 500 * US, now + 50000 * US, NULL), 0);
    assert_int_equal(round_of(cc, 8, 10100 * US, 500 * US, now + 60000 * US, NULL), 0);
    assert_int_equal(atomic_load(&cc->ssthresh), 50 * MSS);
    /* The minimum is of the last 5 to 10 s: when the window ends, the
     * smallest sample of its second half takes over, not the next one
     * (a standing queue's). */
    assert_int_equal(atomic_load(&cc->min_rtt_ns), 100 * US);
    uint64_t half = now + SX_CC_MIN_RTT_WINDOW_NS / 2 + 1;
    (void)sx_cc_rtt(cc, 250 * US, 0, half);
    (void)sx_cc_rtt(cc, 200 * US, 0, half + 1);
    (void)sx_cc_rtt(cc, 900 * US, 0, half + 2);
    assert_int_equal(atomic_load(&cc->min_rtt_ns), 100 * US);
    (void)sx_cc_rtt(cc, 5000 * US, 0, now + SX_CC_MIN_RTT_WINDOW_NS + 1);
    assert_int_equal(atomic_load(&cc->min_rtt_ns), 200 * US);
    /* Without samples in the second half, the next one starts over. */
    assert_false(sx_cc_rtt(cc, 300 * US, 500 * US, now + 3 * SX_CC_MIN_RTT_WINDOW_NS));
    assert_int_equal(atomic_load(&cc->min_rtt_ns), 300 * US);
    sx_cc_table_fini(&t);
}

/* RttThresh is an eighth of the last round's minimum where that is more
 * than the target (RFC 9406 section 4.3, clamped to 16 ms). */
static void test_delay_threshold_eighth(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 8000 * US, now);
    bool last;

    assert_int_equal(round_of(cc, 8, 8000 * US, 500 * US, now + 10000 * US, NULL), 0);
    /* 600 us above: more than the target, less than 1,000 us (8,000 / 8). */
    assert_int_equal(round_of(cc, 8, 8600 * US, 500 * US, now + 20000 * US, NULL), 0);
    assert_int_equal(atomic_load(&cc->ssthresh), UINT64_MAX);
    /* 1,100 us above 8,600 / 8 = 1,075. */
    assert_int_equal(round_of(cc, 8, 9700 * US, 500 * US, now + 30000 * US, &last), 1);
    assert_true(last);
    assert_int_not_equal(atomic_load(&cc->ssthresh), UINT64_MAX);
    sx_cc_table_fini(&t);
}

static void test_pacing(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = sx_cc_get(&t, 42, MSS);

    /* No round trip measured: nothing to pace by. */
    sx_cc_pace_advance(cc, sx_cc_pace_interval(cc, MSS), 0, now);
    assert_int_equal(sx_cc_pace_wait(cc, 0, 0, now), 0);
    /* SRTT 100 us, window 10 datagrams, slow start (gain 2): a datagram
     * every 100 / 20 = 5 us; a pause's credit is 50 us: ten of them. */
    assert_false(sx_cc_rtt(cc, 100 * US, 500 * US, now));
    unsigned sent = 0;
    while (sx_cc_pace_wait(cc, 0, 0, now) == 0 && sent < 100) {
        sx_cc_pace_advance(cc, sx_cc_pace_interval(cc, MSS), 0, now);
        sent++;
    }
    assert_int_equal(sent, 11); /* the credit's ten, and the one due now */
    assert_int_equal(sx_cc_pace_wait(cc, 0, 0, now), now + 5 * US);
    /* Congestion avoidance (gain 1.25): 100 us x 1472 / (1.25 x 14720). */
    atomic_store(&cc->ssthresh, 10 * MSS);
    uint64_t at = sx_cc_pace_wait(cc, 0, 0, now);
    sx_cc_pace_advance(cc, sx_cc_pace_interval(cc, MSS), 0, at);
    assert_int_equal(sx_cc_pace_wait(cc, 0, 0, at), at + 8 * US);
    /* A pause's credit: 50 us for a shard progressed all along; the time
     * it was not progressed (here 1 ms: its process did not run), up to
     * half a round trip, which it may send at once, and then it waits. */
    for (int i = 0; i < 40; i++)
        (void)sx_cc_rtt(cc, 2000 * US, 0, at + (uint64_t)i * 1000 * US);
    assert_true(atomic_load(&cc->srtt_ns) > 1900 * US);
    uint64_t step = sx_cc_pace_interval(cc, MSS);
    assert_true(step > 0);
    uint64_t idles[] = {0, 1000 * US, 10000 * US};
    for (unsigned k = 0; k < 3; k++) {
        uint64_t later = at + (200000 + 100000 * (uint64_t)k) * US,
                 half = atomic_load(&cc->srtt_ns) / 2;
        uint64_t credit = idles[k] < half ? idles[k] : half;
        if (credit < 50 * US)
            credit = 50 * US;
        sent = 0;
        while (sx_cc_pace_wait(cc, 0, idles[k], later) == 0 && sent < 10000) {
            sx_cc_pace_advance(cc, step, idles[k], later);
            sent++;
        }
        assert_int_equal(sent, credit / step + 1);
    }
    sx_cc_table_fini(&t);
}

/*
 * A host's SRTT after a stall. The receiver's token was held for seconds
 * (test_am's refusal flood under TSan, before chan_rx.c's fix): packets
 * behind the first that the timeout resent were not resent themselves, so
 * Karn's rule let their acknowledgements give samples of seconds, and the
 * host's SRTT was 4-5 s. The smoothing took one sample per SRTT/8 only,
 * so it came back over as long as the SRTT was (each eighth of it, one
 * step of 1/8): seconds of pacing by a round trip of seconds and of
 * window retries a quarter of one apart. Samples now count at least once
 * a millisecond: 0.2 s of the path's own brings it back.
 */
static void test_srtt_recovers_after_stall(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);

    for (int i = 0; i < 100; i++)
        (void)sx_cc_rtt(cc, 100 * US, 0, now += 100 * US);
    (void)sx_cc_rtt(cc, 5000000 * US, 0, now += 100 * US);
    assert_true(atomic_load(&cc->srtt_ns) > 500000 * US);
    for (int i = 0; i < 2000; i++)
        (void)sx_cc_rtt(cc, 100 * US, 0, now += 100 * US);
    uint64_t srtt = atomic_load(&cc->srtt_ns);
    if (srtt >= 1000 * US)
        fail_msg("SRTT %llu us 0.2 s after the stall's sample", (unsigned long long)(srtt / US));
    sx_cc_table_fini(&t);
}

/* A flush puts what it sent on the shared flight and pacing clock once
 * (chan_cc.c): counting its unposted bytes and nanoseconds meanwhile, the
 * window and the clock stop it where per-datagram updates would have. */
static void test_posted_per_flush(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);

    /* The window: ten datagrams, whether in the flight or unposted. */
    int64_t unposted = 0;
    while (sx_cc_window_open(cc, MSS, unposted, now))
        unposted += MSS;
    assert_int_equal(unposted, 10 * MSS);
    sx_cc_sent(cc, (size_t)unposted);
    assert_false(sx_cc_window_open(cc, MSS, 0, now));
    sx_cc_forget(cc, (size_t)unposted);
    /* The clock: 5 us a datagram, 50 us of credit, as test_pacing. */
    uint64_t pending = 0;
    unsigned sent = 0;
    while (sx_cc_pace_wait(cc, pending, 0, now) == 0 && sent < 100) {
        pending += sx_cc_pace_interval(cc, MSS);
        sent++;
    }
    assert_int_equal(sent, 11);
    assert_int_equal(atomic_load(&cc->pace_ns), 0); /* nothing shared yet */
    sx_cc_pace_advance(cc, pending, 0, now);
    assert_int_equal(sx_cc_pace_wait(cc, 0, 0, now), now + 5 * US);
    sx_cc_table_fini(&t);
}

/* Two threads send and acknowledge through one controller: every byte
 * taken into flight comes out again. */
static void *hammer(void *arg)
{
    sx_cc_t *cc = arg;
    for (int i = 0; i < 100000; i++) {
        sx_cc_sent(cc, MSS);
        (void)sx_cc_window_open(cc, MSS, 0, 1000 + (uint64_t)i);
        sx_cc_pace_advance(cc, sx_cc_pace_interval(cc, MSS), 0, 1000 + (uint64_t)i);
        sx_cc_forget(cc, MSS);
        sx_cc_acked(cc, MSS, 1000 + (uint64_t)i);
        if (i % 1000 == 0)
            (void)sx_cc_lost(cc, (uint64_t)i, false, 0, 1000 + (uint64_t)i);
    }
    return NULL;
}

static void test_shared_by_threads(void **state)
{
    (void)state;
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    sx_cc_t *cc = cc_new(&t, MSS, 100 * US, 1000);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer, cc), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(atomic_load(&cc->inflight), 0);
    assert_true(cwnd(cc) >= 2 * MSS && cwnd(cc) <= SX_CC_MAX_BYTES);
    sx_cc_table_fini(&t);
}

/* A second shard that acts on each round's cut while the first undoes
 * it (test_*_races_undo). */
typedef struct undo_race {
    sx_cc_t *cc;
    int (*act)(sx_cc_t *cc, uint64_t cut);
    pthread_barrier_t go, done;
    _Atomic uint64_t cut;
    int result;
} undo_race_t;

static void *undo_racer(void *arg)
{
    undo_race_t *r = arg;
    for (;;) {
        pthread_barrier_wait(&r->go);
        uint64_t cut = atomic_load(&r->cut);
        if (cut == 0)
            return NULL;
        r->result = r->act(r->cc, cut);
        pthread_barrier_wait(&r->done);
    }
}

/* @p rounds halvings, each undone by this thread while the racer acts on
 * it; @p check gets whether the undo won, the racer's result and the
 * window. Returns how many undos won. */
static unsigned undo_race(int (*act)(sx_cc_t *, uint64_t), unsigned rounds,
                          void (*check)(bool undone, int result, uint64_t cwnd))
{
    sx_cc_table_t t;
    sx_cc_table_init(&t);
    uint64_t now = 1000000 * US;
    undo_race_t r = {.cc = cc_new(&t, MSS, 100 * US, now), .act = act};
    pthread_t th;
    unsigned undone = 0;

    assert_int_equal(pthread_barrier_init(&r.go, NULL, 2), 0);
    assert_int_equal(pthread_barrier_init(&r.done, NULL, 2), 0);
    assert_int_equal(pthread_create(&th, NULL, undo_racer, &r), 0);
    for (unsigned i = 0; i < rounds; i++) {
        atomic_store(&r.cut, halve(r.cc, &now, 40));
        pthread_barrier_wait(&r.go);
        bool u = sx_cc_undo_loss(r.cc, atomic_load(&r.cut));
        pthread_barrier_wait(&r.done);
        check(u, r.result, cwnd(r.cc));
        undone += u;
    }
    atomic_store(&r.cut, 0);
    pthread_barrier_wait(&r.go);
    assert_int_equal(pthread_join(th, NULL), 0);
    pthread_barrier_destroy(&r.go);
    pthread_barrier_destroy(&r.done);
    sx_cc_table_fini(&t);
    return undone;
}

static int act_veto(sx_cc_t *cc, uint64_t cut)
{
    return sx_cc_undo_veto(cc, cut);
}

static void check_veto(bool undone, int vetoed, uint64_t w)
{
    assert_int_equal(undone + vetoed, 1);
    assert_int_equal(w, (undone ? 40 : 20) * MSS);
}

/* Another channel's loss of a later round: a halving of its own. */
static int act_later_loss(sx_cc_t *cc, uint64_t cut)
{
    return sx_cc_lost(cc, cut + 10 * US, false, 0, cut + 500 * US);
}

static void check_later_loss(bool undone, int cut, uint64_t w)
{
    assert_int_equal(cut, 1);
    assert_int_equal(w, (undone ? 20 : 10) * MSS);
}

static int act_collapse(sx_cc_t *cc, uint64_t cut)
{
    return sx_cc_lost(cc, cut + 10 * US, true, 0, cut + 500 * US);
}

static void check_collapse(bool undone, int cut, uint64_t w)
{
    (void)undone;
    assert_int_equal(cut, 2);
    assert_int_equal(w, 2 * MSS);
}

/* Two shards at once on one halving, each order as likely: a veto and an
 * undo, exactly one wins (a veto read before the undo's CAS could be
 * stored after it, and both won); a loss of a later round halves the
 * window the undo leaves or the one it could not undo (one that met the
 * undo mid-restore counted as of the undone round, and was lost); a
 * collapse leaves the minimum (one stored mid-restore had it restored
 * over). */
static void test_races_with_undo(void **state)
{
    (void)state;
    unsigned rounds = 4000;
    unsigned v = undo_race(act_veto, rounds, check_veto);
    unsigned l = undo_race(act_later_loss, rounds, check_later_loss);
    unsigned c = undo_race(act_collapse, rounds, check_collapse);
    print_message("[ races with undo ] %u rounds each: undone beside a veto %u, a later loss %u, "
                  "a collapse %u\n",
                  rounds, v, l, c);
}

/* test_decrease_waits_for_undo's second shard. */
typedef struct waiter {
    sx_cc_t *cc;
    int (*act)(sx_cc_t *cc, uint64_t cut);
    uint64_t cut;
    _Atomic bool started, returned;
    int result;
} waiter_t;

static void *waiter_run(void *arg)
{
    waiter_t *w = arg;
    atomic_store(&w->started, true);
    w->result = w->act(w->cc, w->cut);
    atomic_store(&w->returned, true);
    return NULL;
}

/* A decrease that comes while an undo restores the window (cut_ns reads
 * SX_CC_CUT_UNDOING; here the test is the undo) waits until it is done,
 * then cuts what the undo restored. It used to count as of the undone
 * round and return at once (a halving lost), or store its cut and have
 * its window restored over (a collapse). The test yields up to 1000
 * times for it to return too early, so a loaded machine can only make
 * it miss a regression, never fail a good build. */
static void test_decrease_waits_for_undo(void **state)
{
    (void)state;
    int (*acts[2])(sx_cc_t *, uint64_t) = {act_later_loss, act_collapse};

    for (int k = 0; k < 2; k++) {
        sx_cc_table_t t;
        sx_cc_table_init(&t);
        uint64_t now = 1000000 * US;
        sx_cc_t *cc = cc_new(&t, MSS, 100 * US, now);
        waiter_t w = {.cc = cc, .act = acts[k]};
        pthread_t th;

        atomic_store(&cc->ssthresh, 60 * MSS);
        w.cut = halve(cc, &now, 40);
        atomic_store(&cc->cut_ns, SX_CC_CUT_UNDOING);
        assert_int_equal(pthread_create(&th, NULL, waiter_run, &w), 0);
        while (!atomic_load(&w.started))
            sched_yield();
        for (int i = 0; i < 1000 && !atomic_load(&w.returned); i++)
            sched_yield();
        assert_false(atomic_load(&w.returned));
        /* The undo's restore, and its release of cut_ns. */
        atomic_store(&cc->cwnd, 40 * MSS);
        atomic_store(&cc->ssthresh, 60 * MSS);
        atomic_store(&cc->cut_ns, w.cut - 1000 * US);
        assert_int_equal(pthread_join(th, NULL), 0);
        if (k == 0) {
            assert_int_equal(w.result, 1);
            assert_int_equal(cwnd(cc), 20 * MSS);
        } else {
            assert_int_equal(w.result, 2);
            assert_int_equal(cwnd(cc), 2 * MSS);
            assert_int_equal(atomic_load(&cc->ssthresh), 20 * MSS);
        }
        assert_int_equal(atomic_load(&cc->cut_ns), w.cut + 500 * US);
        sx_cc_table_fini(&t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_initial_window),
        cmocka_unit_test(test_table_per_host),
        cmocka_unit_test(test_window_and_slow_start),
        cmocka_unit_test(test_loss_halves_once_per_round_trip),
        cmocka_unit_test(test_ecn_dctcp),
        cmocka_unit_test(test_congestion_avoidance),
        cmocka_unit_test(test_persistent_congestion),
        cmocka_unit_test(test_undo_collapse),
        cmocka_unit_test(test_undo_loss),
        cmocka_unit_test(test_races_with_undo),
        cmocka_unit_test(test_decrease_waits_for_undo),
        cmocka_unit_test(test_delay_signal),
        cmocka_unit_test(test_delay_threshold_eighth),
        cmocka_unit_test(test_pacing),
        cmocka_unit_test(test_srtt_recovers_after_stall),
        cmocka_unit_test(test_posted_per_flush),
        cmocka_unit_test(test_shared_by_threads),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
