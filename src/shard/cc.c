/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Congestion control: the per-host window, its signals and the pacing
 * clock (cc.h has the algorithm and what it follows).
 */
#include "shard/cc.h"

#include <sched.h>
#include <stdlib.h>

#include <ck_pr.h>

#define RELAXED memory_order_relaxed

void sx_cc_table_init(sx_cc_table_t *table)
{
    pthread_mutex_init(&table->lock, NULL);
    table->head = NULL;
}

void sx_cc_table_fini(sx_cc_table_t *table)
{
    sx_cc_t *cc = table->head;
    while (cc != NULL) {
        sx_cc_t *next = cc->next;
        free(cc);
        cc = next;
    }
    table->head = NULL;
    pthread_mutex_destroy(&table->lock);
}

static uint64_t cc_min_window(const sx_cc_t *cc)
{
    return (uint64_t)SX_CC_MIN_PKTS * atomic_load_explicit(&cc->mss, RELAXED);
}

sx_cc_t *sx_cc_get(sx_cc_table_t *table, uint64_t host, uint32_t mss)
{
    sx_cc_t *cc;

    pthread_mutex_lock(&table->lock);
    for (cc = table->head; cc != NULL; cc = cc->next)
        if (cc->host == host)
            break;
    if (cc == NULL && (cc = calloc(1, sizeof(*cc))) != NULL) {
        cc->host = host;
        atomic_init(&cc->mss, mss);
        /* RFC 9002 section 7.2: ten datagrams, at most 14,720 bytes
         * unless two datagrams are more. */
        uint64_t iw = (uint64_t)SX_CC_IW_PKTS * mss;
        uint64_t cap = 14720 > 2 * (uint64_t)mss ? 14720 : 2 * (uint64_t)mss;
        atomic_init(&cc->cwnd, iw < cap ? iw : cap);
        atomic_init(&cc->ssthresh, UINT64_MAX);
        atomic_init(&cc->alpha, SX_CC_ALPHA_ONE); /* RFC 8257 section 3.3: from 1 */
        cc->next = table->head;
        table->head = cc;
    } else if (cc != NULL && mss > atomic_load_explicit(&cc->mss, RELAXED)) {
        atomic_store_explicit(&cc->mss, mss, RELAXED);
    }
    pthread_mutex_unlock(&table->lock);
    return cc;
}

bool sx_cc_window_open(sx_cc_t *cc, size_t len, int64_t unposted, uint64_t now)
{
    int64_t inflight = atomic_load_explicit(&cc->inflight, RELAXED) + unposted;
    uint64_t cwnd = atomic_load_explicit(&cc->cwnd, RELAXED);

    /* One packet may always go when none is out: a window smaller than a
     * datagram must not stall the host for good. */
    if (inflight <= 0 || (uint64_t)inflight + len <= cwnd)
        return true;
    atomic_store_explicit(&cc->limited_ns, now, RELAXED);
    return false;
}

/* The clock no further back than a pause's credit: SX_CC_BURST_NS, or
 * the time the sender's shard was not progressed (@p idle_ns), up to half
 * a round trip. The pacer runs in the senders' processes, not in the
 * kernel as Linux's fq does: a process that was descheduled, or that only
 * polls in its MPI calls, would lose the time it did not run. With 50 us
 * of credit alone, 2 of 4 MPI senders into one port (mpi_bench incast,
 * shardx BTL, 5 processes on 2 cores) got 2-10 of 125 MB/s, Jain's index
 * 0.55-0.71; so, 0.997-1.000. The window still bounds what a burst sends.
 * The bursts cost: sx_bench incast 4->1 through the same port, whose
 * senders are descheduled as often on 2 cores, retransmitted 0.31-0.47 %
 * instead of 0.06-0.07 %. A sender that keeps its core keeps the 50 us. */
static uint64_t cc_pace_base(const sx_cc_t *cc, uint64_t clock, uint64_t idle_ns, uint64_t now)
{
    uint64_t half = atomic_load_explicit(&cc->srtt_ns, RELAXED) / 2;
    uint64_t credit = idle_ns < half ? idle_ns : half;
    if (credit < SX_CC_BURST_NS)
        credit = SX_CC_BURST_NS;
    return clock + credit < now ? now - credit : clock;
}

uint64_t sx_cc_pace_wait(sx_cc_t *cc, uint64_t unposted_ns, uint64_t idle_ns, uint64_t now)
{
    uint64_t base =
        cc_pace_base(cc, atomic_load_explicit(&cc->pace_ns, RELAXED), idle_ns, now) + unposted_ns;
    return base > now ? base : 0;
}

uint64_t sx_cc_pace_interval(sx_cc_t *cc, size_t len)
{
    uint64_t srtt = atomic_load_explicit(&cc->srtt_ns, RELAXED);
    uint64_t cwnd = atomic_load_explicit(&cc->cwnd, RELAXED);

    if (srtt == 0 || cwnd == 0)
        return 0; /* no sample yet: the window alone bounds the burst */
    /* interval = len * srtt / (gain * cwnd): gain 2 in slow start, 1.25
     * after (RFC 9002 section 7.7), as 8/4 and 5/4. */
    bool slow = cwnd < atomic_load_explicit(&cc->ssthresh, RELAXED);
    unsigned __int128 num = (unsigned __int128)len * srtt * 4;
    return (uint64_t)(num / ((unsigned __int128)cwnd * (slow ? 8 : 5)));
}

void sx_cc_pace_advance(sx_cc_t *cc, uint64_t interval, uint64_t idle_ns, uint64_t now)
{
    if (interval == 0)
        return; /* the clock would stay where sx_cc_pace_wait reads it: no write to share */
    uint64_t clock = atomic_load_explicit(&cc->pace_ns, RELAXED);
    while (!atomic_compare_exchange_weak_explicit(
        &cc->pace_ns, &clock, cc_pace_base(cc, clock, idle_ns, now) + interval, RELAXED, RELAXED)) {
    }
}

/* Whether the window is in use, so that acknowledgements say something
 * about the path (RFC 7661's validated phase, pipeACK >= cwnd / 2): the flight
 * this ACK found, its bytes included, was at least half the window, or a
 * sender found the window full within the last two round trips. The
 * flight's test is what counts when a sender's process was descheduled:
 * its ACKs are read late, the window-full moment lies further back than
 * two round trips, and a test of that alone threw away 40 to 55 % of the
 * acknowledged bytes of each sender in a 4->1 incast on 2 cores, the
 * senders scheduled least losing most (bench/bench_incast.sh). */
static bool cc_in_use(sx_cc_t *cc, size_t len, uint64_t cwnd, uint64_t srtt, uint64_t now)
{
    int64_t flight = atomic_load_explicit(&cc->inflight, RELAXED) + (int64_t)len;
    if (flight > 0 && (uint64_t)flight >= cwnd / 2)
        return true;
    uint64_t limited = atomic_load_explicit(&cc->limited_ns, RELAXED);
    return limited != 0 && (srtt == 0 || now - limited <= 2 * srtt);
}

/* Growth counts from @p now: a window not in use earns nothing for the
 * time, nor does slow start for congestion avoidance. Written once a
 * quarter of a round trip at most, not by every ACK of every shard (a
 * line they all read): the start lies up to that much early. */
static void cc_grow_from(sx_cc_t *cc, uint64_t at, uint64_t srtt, uint64_t now)
{
    if (now < at || now - at > srtt / 4)
        atomic_store_explicit(&cc->grow_ns, now, RELAXED);
}

void sx_cc_acked(sx_cc_t *cc, size_t len, uint64_t now)
{
    uint64_t srtt = atomic_load_explicit(&cc->srtt_ns, RELAXED);
    uint64_t cwnd = atomic_load_explicit(&cc->cwnd, RELAXED);
    uint64_t at = atomic_load_explicit(&cc->grow_ns, RELAXED);

    if (!cc_in_use(cc, len, cwnd, srtt, now)) {
        /* An application-limited window does not grow (RFC 7661), nor
         * does the time it spent so. */
        cc_grow_from(cc, at, srtt, now);
        return;
    }
    if (cwnd >= SX_CC_MAX_BYTES)
        return;
    if (cwnd < atomic_load_explicit(&cc->ssthresh, RELAXED)) {
        atomic_fetch_add_explicit(&cc->cwnd, len, RELAXED); /* slow start */
        cc_grow_from(cc, at, srtt, now);                    /* CA counts from its end */
        return;
    }
    /* Congestion avoidance: a datagram per smoothed round trip of time
     * in use, Reno's slope (RFC 5681 section 3.1) counted in elapsed time
     * rather than in windows acknowledged, as CUBIC's window is a
     * function of the time since the last decrease (RFC 9438 section
     * 4.1) and H-TCP's increase is (Leith and Shorten, PFLDnet 2004).
     * Counted in windows acknowledged, a sender grows per round trip of
     * its own: one whose ACKs wait for the CPU grows more slowly, sends
     * less, and so waits longer. In a 4->1 incast on 2 cores the senders
     * lost equally often while their windows stayed apart by 2x, Jain's
     * index 0.67-0.99 over 10 s; counted in time, 0.96-0.9995, and one
     * shardx flow beside a TCP flow got 48-56 MB/s to its 57-61, where
     * it had got 38 to 72 (sx_bench incast on the cluster; bench/
     * bench_incast.sh). A sender that was descheduled catches up
     * SX_CC_GROW_CATCHUP round trips at most; pacing spreads what that
     * adds. */
    if (srtt == 0 || at == 0 || now < at) {
        atomic_compare_exchange_strong_explicit(&cc->grow_ns, &at, now, RELAXED, RELAXED);
        return;
    }
    uint64_t n = (now - at) / srtt;
    if (n == 0)
        return;
    uint64_t next = at + n * srtt;
    if (n > SX_CC_GROW_CATCHUP) {
        n = SX_CC_GROW_CATCHUP;
        next = now;
    }
    if (atomic_compare_exchange_strong_explicit(&cc->grow_ns, &at, next, RELAXED, RELAXED))
        atomic_fetch_add_explicit(&cc->cwnd, n * atomic_load_explicit(&cc->mss, RELAXED), RELAXED);
}

/*
 * cut_ns once no undo is restoring the window. An undo holds
 * SX_CC_CUT_UNDOING over its few stores (cc_undo_take, cc_undo_give), and
 * every decrease waits for it: one that counted as of the undone round
 * was lost (a halving), and one stored over it had its window restored
 * over (a collapse). The wait spins, then gives the core up, so that an
 * undo preempted mid-restore (more threads than cores) can finish. The
 * acquire pairs with cc_undo_give's release: what the undo restored is
 * what the decrease then cuts.
 */
static uint64_t cc_cut_settled(sx_cc_t *cc)
{
    uint64_t cut;
    unsigned spins = 0;

    while ((cut = atomic_load_explicit(&cc->cut_ns, memory_order_acquire)) == SX_CC_CUT_UNDOING) {
        if (++spins < 64)
            ck_pr_stall();
        else
            (void)sched_yield();
    }
    return cut;
}

/* Takes the round trip after cut_ns for a decrease: true when this caller
 * is the one to make it (a signal from a packet sent after the last cut,
 * and no other shard cut meanwhile); *prev_p is the cut it followed, or
 * the one that stood. @p now is a cut's name (sx_cc_cut_name). A CAS
 * that fails tests the packet against what it found: another shard's
 * cut (made after the packet left: the same event), a veto's mark on
 * the same cut, or an undo that moved the last cut back (a new event
 * after all; test_cc's races caught one that had returned "the same"). */
static bool cc_claim_cut(sx_cc_t *cc, uint64_t sent_ns, uint64_t now, uint64_t *prev_p)
{
    uint64_t cut = cc_cut_settled(cc);

    for (;;) {
        *prev_p = cut;
        if (sent_ns <= cut)
            return false;
        if (atomic_compare_exchange_strong_explicit(&cc->cut_ns, &cut, now, RELAXED, RELAXED))
            return true;
        if (cut == SX_CC_CUT_UNDOING)
            cut = cc_cut_settled(cc);
    }
}

bool sx_cc_undo_veto(sx_cc_t *cc, uint64_t cut_ns)
{
    /* Vetoed already (SX_CC_CUT_UNDOING is odd too, and never a cut's
     * name). */
    if (cut_ns == 0 || (cut_ns & SX_CC_CUT_VETOED))
        return false;
    uint64_t expect = cut_ns;
    return atomic_compare_exchange_strong_explicit(&cc->cut_ns, &expect, cut_ns | SX_CC_CUT_VETOED,
                                                   RELAXED, RELAXED);
}

/* The cut_ns an undo leaves: just before the cut @p prev (2 ns, so that
 * the name stays even: no veto's mark). */
static uint64_t cc_before(uint64_t prev)
{
    prev = sx_cc_cut_name(prev);
    return prev > 2 ? prev - 2 : 0;
}

static void cc_set_window(sx_cc_t *cc, uint64_t cwnd, uint64_t now)
{
    uint64_t floor = cc_min_window(cc);

    if (cwnd < floor)
        cwnd = floor;
    atomic_store_explicit(&cc->cwnd, cwnd, RELAXED);
    atomic_store_explicit(&cc->ssthresh, cwnd, RELAXED);
    atomic_store_explicit(&cc->grow_ns, now, RELAXED);
}

/*
 * HyStart++'s test (RFC 9406 section 4.2): the smallest RTT of this
 * round, once it has N_RTT_SAMPLE samples, against the smallest of the
 * round before, plus RttThresh: an eighth of that, at least delay_ns
 * (SX_CONGESTION_DELAY_US, where the RFC has 4 ms, an Internet path's
 * jitter: a job's network has tens of microseconds of RTT) and at most 16
 * ms. A round ends with the first ACK of a packet sent after it began
 * (the RFC's windowEnd, SND.NXT at its start), told here by the sample's
 * send time, now - rtt, as several shards' channels feed one controller.
 * Races between shards lose a sample or end a round twice, no more.
 * Congestion avoidance follows at once, as before, not the RFC's five
 * rounds of conservative slow start (CSS).
 *
 * Before (one sample more than delay_ns above the 5-10 s minimum), an
 * MPI job between two namespace hosts at MTU 1500 ended slow start at
 * the initial window on a sample of 1.3-1.8 ms taken during its start-up,
 * where the path's round trip is 20 us (a throwaway trace of mpi_bench
 * pingpong), and its 1 MiB ping-pongs ran at 0.51-0.83 of the bandwidth
 * they got without congestion control; with rounds, at 0.93-1.02 (four
 * alternated rounds of the three, 2026-12-03), slow start ending at
 * windows of 1.3-2.0 MB, where a round's smallest sample was 1.4-4.4 ms
 * against 60-240 us in the round before.
 */
static bool cc_round_exit(sx_cc_t *cc, uint64_t rtt, uint64_t delay_ns, uint64_t now)
{
    uint64_t sent = now > rtt ? now - rtt : 0;
    uint64_t at = atomic_load_explicit(&cc->round_at_ns, RELAXED);
    if ((at == 0 || sent >= at) &&
        atomic_compare_exchange_strong_explicit(&cc->round_at_ns, &at, now, RELAXED, RELAXED)) {
        atomic_store_explicit(&cc->last_round_min_ns,
                              atomic_load_explicit(&cc->round_min_ns, RELAXED), RELAXED);
        atomic_store_explicit(&cc->round_min_ns, 0, RELAXED);
        atomic_store_explicit(&cc->round_samples, 0, RELAXED);
    }
    uint64_t min = atomic_load_explicit(&cc->round_min_ns, RELAXED);
    if (min == 0 || rtt < min)
        atomic_store_explicit(&cc->round_min_ns, min = rtt, RELAXED);
    uint32_t n = atomic_fetch_add_explicit(&cc->round_samples, 1, RELAXED) + 1;
    uint64_t last = atomic_load_explicit(&cc->last_round_min_ns, RELAXED);
    if (n < SX_CC_ROUND_SAMPLES || last == 0)
        return false;
    uint64_t thresh = last / 8 < SX_CC_ROUND_THRESH_MAX_NS ? last / 8 : SX_CC_ROUND_THRESH_MAX_NS;
    if (thresh < delay_ns)
        thresh = delay_ns;
    if (min < last + thresh)
        return false;
    /* The first to see it ends slow start; the others find it ended. */
    uint64_t ss = UINT64_MAX;
    if (!atomic_compare_exchange_strong_explicit(
            &cc->ssthresh, &ss, atomic_load_explicit(&cc->cwnd, RELAXED), RELAXED, RELAXED))
        return false;
    atomic_store_explicit(&cc->grow_ns, now, RELAXED);
    return true;
}

bool sx_cc_rtt(sx_cc_t *cc, uint64_t rtt, uint64_t delay_ns, uint64_t now)
{
    /* Smoothed over every channel's samples (RFC 6298's gain, 1/8), one
     * sample per eighth of a round trip at most: each shard's ACKs give
     * them, and a write per sample to a line every shard reads cost 16
     * shards more than the averaging of more samples gains. And one a
     * millisecond at least, so that an SRTT of seconds, from samples
     * taken across a stall, comes back in tens of milliseconds instead
     * of as long as it says (test_cc, test_srtt_recovers_after_stall). */
    uint64_t srtt = atomic_load_explicit(&cc->srtt_ns, RELAXED);
    uint64_t srtt_at = atomic_load_explicit(&cc->srtt_at_ns, RELAXED);
    uint64_t spacing = srtt / 8 < SX_CC_SRTT_SPACING_MAX_NS ? srtt / 8 : SX_CC_SRTT_SPACING_MAX_NS;
    if (srtt == 0 || now < srtt_at || now - srtt_at >= spacing) {
        atomic_store_explicit(&cc->srtt_ns, srtt == 0 ? rtt : (7 * srtt + rtt) / 8, RELAXED);
        atomic_store_explicit(&cc->srtt_at_ns, now, RELAXED);
    }

    /* The smallest sample of the last 5 to 10 s: the minimum of the
     * window so far, and a candidate gathered over its second half that
     * takes over when it ends, so a queue that stands for longer than the
     * window does not become the path's own delay by one sample. Only
     * the diagnostics read it (engine/dump.c) since slow start's exit
     * compares rounds (cc_round_exit). */
    uint64_t min = atomic_load_explicit(&cc->min_rtt_ns, RELAXED);
    uint64_t next = atomic_load_explicit(&cc->min_rtt_next_ns, RELAXED);
    uint64_t at = atomic_load_explicit(&cc->min_rtt_at_ns, RELAXED);
    if (min == 0 || now - at > SX_CC_MIN_RTT_WINDOW_NS) {
        min = next != 0 && next < rtt ? next : rtt;
        atomic_store_explicit(&cc->min_rtt_ns, min, RELAXED);
        atomic_store_explicit(&cc->min_rtt_next_ns, 0, RELAXED);
        atomic_store_explicit(&cc->min_rtt_at_ns, now, RELAXED);
    } else if (now - at > SX_CC_MIN_RTT_WINDOW_NS / 2 && (next == 0 || rtt < next)) {
        atomic_store_explicit(&cc->min_rtt_next_ns, rtt, RELAXED);
    }
    if (rtt < min)
        atomic_store_explicit(&cc->min_rtt_ns, rtt, RELAXED);

    /* A queue building in the first slow start (HyStart++, RFC 9406):
     * the window has reached what the path holds, and doubling it once
     * more would overflow the queue by as much again; go on additively
     * from here. Only the first (section 4.3): a slow start after
     * persistent congestion has a threshold from the loss, and beside a
     * flow that keeps the queue full (TCP) every round trip shows a
     * queue, so the window would crawl up from two datagrams: one that
     * did got 7 MB/s beside TCP's 110 (bench/bench_incast.sh). */
    if (delay_ns == 0 || atomic_load_explicit(&cc->ssthresh, RELAXED) != UINT64_MAX)
        return false;
    return cc_round_exit(cc, rtt, delay_ns, now);
}

int sx_cc_lost(sx_cc_t *cc, uint64_t sent_ns, bool persistent, uint64_t own_cut_ns, uint64_t now)
{
    now = sx_cc_cut_name(now);
    if (persistent) {
        /* RFC 9002 section 7.6: the path may have changed; start over
         * from the minimum, with half the old window as the threshold.
         * Once: a window at its minimum has nowhere to fall. */
        uint64_t floor = cc_min_window(cc);
        if (atomic_load_explicit(&cc->cwnd, RELAXED) <= floor)
            return 0;
        /* Whatever cut stood (a packet "sent" after every cut), once no
         * undo is restoring it: a CAS, not a store, so that an undo's
         * restore never comes after. */
        uint64_t prev;
        (void)cc_claim_cut(cc, UINT64_MAX, now, &prev);
        uint64_t cwnd = atomic_load_explicit(&cc->cwnd, RELAXED);
        atomic_store_explicit(&cc->undo_cwnd, cwnd, RELAXED);
        atomic_store_explicit(&cc->undo_ssthresh, atomic_load_explicit(&cc->ssthresh, RELAXED),
                              RELAXED);
        atomic_store_explicit(&cc->undo_ok_ns, 0, RELAXED); /* the halving's state is gone */
        atomic_store_explicit(&cc->ssthresh, cwnd / 2 > floor ? cwnd / 2 : floor, RELAXED);
        atomic_store_explicit(&cc->cwnd, floor, RELAXED);
        atomic_store_explicit(&cc->grow_ns, now, RELAXED);
        return 2;
    }
    uint64_t prev;
    if (!cc_claim_cut(cc, sent_ns, now, &prev)) {
        /* The same round as the cut that stands: evidence its maker's
         * duplicate reports cannot answer, unless it is the maker's. */
        if (sx_cc_cut_name(prev) != own_cut_ns)
            (void)sx_cc_undo_veto(cc, prev);
        return 0;
    }
    /* What sx_cc_undo_loss gives back; only the claimer knows now is the
     * cut, and it asks after storing these. */
    uint64_t cwnd = atomic_load_explicit(&cc->cwnd, RELAXED);
    atomic_store_explicit(&cc->undo_cwnd, cwnd, RELAXED);
    atomic_store_explicit(&cc->undo_ssthresh, atomic_load_explicit(&cc->ssthresh, RELAXED),
                          RELAXED);
    atomic_store_explicit(&cc->undo_prev_cut_ns, prev, RELAXED);
    atomic_store_explicit(&cc->undo_ok_ns, now, RELAXED);
    cc_set_window(cc, cwnd / 2, now); /* RFC 5681 (4) */
    return 1;
}

/* An undo takes cut_ns from @p cut (its value, the cut's name or that
 * vetoed) to SX_CC_CUT_UNDOING: the CAS makes the undo once, and loses to
 * a decrease made since (whose own CAS came first); decreases then wait
 * for cc_undo_give (cc_cut_settled). */
static bool cc_undo_take(sx_cc_t *cc, uint64_t cut)
{
    return cut != 0 && atomic_compare_exchange_strong_explicit(&cc->cut_ns, &cut, SX_CC_CUT_UNDOING,
                                                               RELAXED, RELAXED);
}

/* An undo's return: the window and threshold saved at the cut; the window
 * keeps what it grew since, if that is more (Linux's
 * tcp_undo_cwnd_reduction); pacing spreads what the return lets go. Then
 * cut_ns becomes @p back_to, which releases the waiting decreases. */
static void cc_undo_give(sx_cc_t *cc, uint64_t back_to)
{
    uint64_t cwnd = atomic_load_explicit(&cc->undo_cwnd, RELAXED);
    if (cwnd > atomic_load_explicit(&cc->cwnd, RELAXED))
        atomic_store_explicit(&cc->cwnd, cwnd, RELAXED);
    atomic_store_explicit(&cc->ssthresh, atomic_load_explicit(&cc->undo_ssthresh, RELAXED),
                          RELAXED);
    atomic_store_explicit(&cc->cut_ns, back_to, memory_order_release);
}

bool sx_cc_undo_loss(sx_cc_t *cc, uint64_t cut_ns)
{
    /* Vetoed (its low bit set: no CAS from the name matches), or another
     * decrease since. */
    if (atomic_load_explicit(&cc->undo_ok_ns, RELAXED) != cut_ns || !cc_undo_take(cc, cut_ns))
        return false;
    atomic_store_explicit(&cc->undo_ok_ns, 0, RELAXED);
    /* Back to just before the cut before, so that a packet sent between
     * the two that is lost after all is a new event, not the undone one;
     * just before, so that this never reads as that cut itself, whose
     * own undo (a collapse's, sx_cc_undo) would then restore what this
     * halving saved. */
    cc_undo_give(cc, cc_before(atomic_load_explicit(&cc->undo_prev_cut_ns, RELAXED)));
    return true;
}

bool sx_cc_undo(sx_cc_t *cc, uint64_t cut_ns)
{
    /* Another decrease since (a loss, a mark, another collapse) stands. A
     * veto is for halvings (sx_cc_undo_veto): F-RTO's evidence is the ACK
     * of an original transmission, which another channel's loss of the
     * round does not answer, so a collapse goes back vetoed or not. */
    if (cut_ns == 0 || (!cc_undo_take(cc, cut_ns) && !cc_undo_take(cc, cut_ns | SX_CC_CUT_VETOED)))
        return false;
    cc_undo_give(cc, cc_before(cut_ns));
    return true;
}

bool sx_cc_ecn(sx_cc_t *cc, uint32_t ect, uint32_t ce, uint64_t sent_ns, uint64_t now)
{
    uint64_t total = atomic_fetch_add_explicit(&cc->ecn_total, (uint64_t)ect + ce, RELAXED);
    uint64_t marked = atomic_fetch_add_explicit(&cc->ecn_marked, ce, RELAXED);
    uint64_t at = atomic_load_explicit(&cc->ecn_at_ns, RELAXED);
    uint64_t srtt = atomic_load_explicit(&cc->srtt_ns, RELAXED);

    total += (uint64_t)ect + ce;
    marked += ce;
    /* Once a round trip, alpha = (1 - g) alpha + g F, F the share marked
     * (RFC 8257 section 3.3); the CAS makes one shard the updater. */
    if (at == 0) {
        atomic_compare_exchange_strong_explicit(&cc->ecn_at_ns, &at, now, RELAXED, RELAXED);
    } else if (now - at >= srtt && total != 0 &&
               atomic_compare_exchange_strong_explicit(&cc->ecn_at_ns, &at, now, RELAXED,
                                                       RELAXED)) {
        atomic_fetch_sub_explicit(&cc->ecn_total, total, RELAXED);
        atomic_fetch_sub_explicit(&cc->ecn_marked, marked, RELAXED);
        uint32_t alpha = atomic_load_explicit(&cc->alpha, RELAXED);
        uint64_t f = marked * SX_CC_ALPHA_ONE / total;
        if (f > SX_CC_ALPHA_ONE)
            f = SX_CC_ALPHA_ONE; /* a peer's counts are untrusted */
        alpha = alpha - (alpha >> SX_CC_ALPHA_SHIFT) + (uint32_t)(f >> SX_CC_ALPHA_SHIFT);
        atomic_store_explicit(&cc->alpha, alpha, RELAXED);
    }
    if (ce == 0)
        return false;
    now = sx_cc_cut_name(now);
    uint64_t prev;
    if (!cc_claim_cut(cc, sent_ns, now, &prev)) {
        (void)sx_cc_undo_veto(cc, prev); /* congestion in that round: its halving stands */
        return false;
    }
    /* cwnd = cwnd (1 - alpha / 2) (RFC 8257 section 3.3). */
    uint64_t cwnd = atomic_load_explicit(&cc->cwnd, RELAXED);
    uint64_t alpha = atomic_load_explicit(&cc->alpha, RELAXED);
    cc_set_window(cc, cwnd - cwnd * alpha / (2 * SX_CC_ALPHA_ONE), now);
    return true;
}
