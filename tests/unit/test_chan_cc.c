/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests for a channel's loss episodes (src/shard/chan_cc.c): which
 * resends a halving's undo must hear reported twice (D-SACK, RFC 2883)
 * before it goes back (RFC 3708 section 3, RFC 4015), in the order the
 * ACK path calls them (chan_retransmit.c, chan_tx.c, chan_tlp.c):
 *
 *   sx_chan_cc_cut_locked     a loss (RACK, a timeout, a probe's repair)
 *   sx_chan_cc_resent_locked  the flush sends a packet again
 *   sx_chan_cc_dsack_locked   an ACK reports a packet twice
 *   sx_chan_cc_undo_try_locked the end of that ACK's processing
 *
 * The multi-process tests (test_reliability's "late 2%, halvings undone"
 * and "dup 5%, every duplicate reported") show undos over real sockets,
 * but cannot stage one packet's copies in a chosen order: a third copy
 * (a probe on top of a resend), or a last report in the same ACK as a
 * loss. Here the channel is bare (a real shard for its counters, a real
 * controller for its window, nothing sent) and the test is the ACK path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/stat.h"
#include "shard/cc.h"
#include "shard/chan_undo.h"
#include "shard/peer.h"
#include "shard/shard.h"
#include "shard/wire.h"
#include "test_filter.h"

#define US  1000ull
#define MSS 1472u
#define SEQ 0xfffffffeu /* the episode crosses the sequence wrap */

typedef struct bare {
    sx_cc_table_t table;
    sx_shard_t *shard;
    struct sx_peer *peer;
    sx_chan_t *chan;
    uint64_t now;
} bare_t;

static bare_t g;

static int bare_setup(void **state)
{
    (void)state;
    sx_shard_conf_t conf = {.numa_node = -1, .hotel_rooms = 16, .tick_ns = 10000};

    memset(&g, 0, sizeof(g));
    assert_int_equal(sx_shard_create(&conf, &g.shard), SX_OK);
    sx_cc_table_init(&g.table);
    g.now = 1000000 * US;
    g.peer = calloc(1, sizeof(*g.peer));
    g.chan = calloc(1, sizeof(*g.chan));
    assert_non_null(g.peer);
    assert_non_null(g.chan);
    snprintf(g.peer->name, sizeof(g.peer->name), "bare peer");
    g.chan->shard = g.shard;
    g.chan->peer = g.peer;
    g.chan->cc = sx_cc_get(&g.table, 42, MSS);
    assert_non_null(g.chan->cc);
    assert_false(sx_cc_rtt(g.chan->cc, 100 * US, 500 * US, g.now));
    atomic_store(&g.chan->cc->ssthresh, 60 * MSS);
    atomic_store(&g.chan->cc->cwnd, 40 * MSS);
    return 0;
}

static int bare_teardown(void **state)
{
    (void)state;
    free(g.chan);
    free(g.peer);
    sx_cc_table_fini(&g.table);
    sx_shard_destroy(g.shard);
    return 0;
}

static uint64_t cwnd(void)
{
    return atomic_load(&g.chan->cc->cwnd);
}

static uint64_t undos(void)
{
    return sx_stat_read(&g.shard->stats.cc_loss_undos);
}

/* The window is @p mss datagrams, after @p n undos in all. */
static void expect(uint64_t mss, uint64_t n)
{
    assert_int_equal(cwnd(), mss * MSS);
    assert_int_equal(undos(), n);
}

/* RACK finds packet @p seq lost (sx_chan_cc_lost_locked, less the pipe):
 * the first loss of a round halves the window and opens the episode. */
static void lost(uint32_t seq)
{
    g.now += 10 * US;
    sx_chan_cc_cut_locked(g.chan, g.now - 200 * US, seq, false, false, g.now);
}

/* ... and the flush sends it again. */
static void lost_resent(uint32_t seq)
{
    lost(seq);
    sx_chan_cc_resent_locked(g.chan, seq);
}

/* One ACK: reports @p seq twice, and ends (the undo decides). */
static void dsack_ack(uint32_t seq)
{
    sx_chan_cc_dsack_locked(g.chan, seq);
    sx_chan_cc_undo_try_locked(g.chan);
}

/* Each resend reported twice: the halving goes back, once. */
static void test_every_resend_reported(void **state)
{
    (void)state;
    lost(SEQ);
    expect(20, 0);
    lost(SEQ + 2); /* the same round: no second halving */
    sx_chan_cc_resent_locked(g.chan, SEQ);
    sx_chan_cc_resent_locked(g.chan, SEQ + 2);
    dsack_ack(SEQ + 2);
    expect(20, 0);      /* SEQ's copy is still to hear of */
    dsack_ack(SEQ + 1); /* never resent: no evidence */
    dsack_ack(SEQ + 2); /* heard already */
    expect(20, 0);
    dsack_ack(SEQ);
    expect(40, 1);
    dsack_ack(SEQ);
    expect(40, 1);
}

/* A tail loss probe sends the resent packet a third time (its resend's
 * ACK came late). Both later copies arrive: one duplicate report, which
 * says that two of its copies came, not that the first did. The halving
 * stands, and later reports change nothing. */
static void test_third_copy_keeps_the_halving(void **state)
{
    (void)state;
    lost_resent(SEQ);
    sx_chan_cc_resent_locked(g.chan, SEQ); /* the probe */
    dsack_ack(SEQ);
    dsack_ack(SEQ);
    expect(20, 0);
}

/* A copy sent again after a report covered its last one is evidence of
 * its own: it must be reported twice as well. */
static void test_copy_after_its_report(void **state)
{
    (void)state;
    lost(SEQ);
    lost(SEQ + 1);
    sx_chan_cc_resent_locked(g.chan, SEQ);
    sx_chan_cc_resent_locked(g.chan, SEQ + 1);
    dsack_ack(SEQ);
    sx_chan_cc_resent_locked(g.chan, SEQ); /* a timeout's copy */
    dsack_ack(SEQ + 1);
    expect(20, 0);
    dsack_ack(SEQ);
    expect(40, 1);
}

/* The last report arrives in an ACK whose cumulative part the channel
 * handles after it (chan_retransmit.c), which may leave a timeout's
 * recovery running. The undo waits for the ACK that ends it, and needs
 * no report of its own. */
static void test_undo_waits_for_the_recovery(void **state)
{
    (void)state;
    lost_resent(SEQ);
    g.chan->in_rto_recovery = true;
    dsack_ack(SEQ);
    expect(20, 0);
    g.chan->in_rto_recovery = false; /* the next ACK ends the recovery */
    sx_chan_cc_undo_try_locked(g.chan);
    expect(40, 1);
}

/* The same ACK found another packet lost: while it waits to go, and once
 * it went until its own copy is reported, the halving stays. */
static void test_undo_waits_for_a_queued_loss(void **state)
{
    (void)state;
    sx_txpkt_t queued = {0};

    lost_resent(SEQ);
    g.chan->rtx = &queued;
    dsack_ack(SEQ);
    expect(20, 0);
    g.chan->rtx = NULL;
    sx_chan_cc_resent_locked(g.chan, SEQ + 3); /* the flush sends it */
    sx_chan_cc_undo_try_locked(g.chan);
    expect(20, 0);
    dsack_ack(SEQ + 3);
    expect(40, 1);
}

/* A tail loss probe that repaired a loss (chan_tlp.c) cuts with its copy
 * already sent: that copy is the one to hear of. A loss of a later round
 * halves again and starts a new episode, whose report alone undoes only
 * the second halving. */
static void test_probe_repair_and_a_new_round(void **state)
{
    (void)state;
    g.now += 10 * US;
    sx_chan_cc_cut_locked(g.chan, g.now - 200 * US, SEQ, true, false, g.now);
    expect(20, 0);
    dsack_ack(SEQ);
    expect(40, 1);

    lost_resent(SEQ + 5);
    g.now += 1000 * US;
    sx_chan_cc_cut_locked(g.chan, g.now - 1, SEQ + 9, false, false, g.now);
    expect(10, 1);
    dsack_ack(SEQ + 5); /* the first episode's: it ended */
    expect(10, 1);
    sx_chan_cc_resent_locked(g.chan, SEQ + 9);
    dsack_ack(SEQ + 9);
    expect(20, 2);
}

/* A resend past the span the episode can follow ends it. */
static void test_resend_outside_the_span(void **state)
{
    (void)state;
    lost_resent(SEQ);
    sx_chan_cc_resent_locked(g.chan, SEQ + SX_WIRE_SACK_BITS);
    dsack_ack(SEQ);
    expect(20, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_resend_reported, bare_setup, bare_teardown),
        cmocka_unit_test_setup_teardown(test_third_copy_keeps_the_halving, bare_setup,
                                        bare_teardown),
        cmocka_unit_test_setup_teardown(test_copy_after_its_report, bare_setup, bare_teardown),
        cmocka_unit_test_setup_teardown(test_undo_waits_for_the_recovery, bare_setup,
                                        bare_teardown),
        cmocka_unit_test_setup_teardown(test_undo_waits_for_a_queued_loss, bare_setup,
                                        bare_teardown),
        cmocka_unit_test_setup_teardown(test_probe_repair_and_a_new_round, bare_setup,
                                        bare_teardown),
        cmocka_unit_test_setup_teardown(test_resend_outside_the_span, bare_setup, bare_teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
