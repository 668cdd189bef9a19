/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Congestion control (DESIGN.md section 4): one window in bytes per
 * destination host, shared by every channel of every shard of the engine
 * whose datagrams go there, so that 16 shards sending to one host take
 * one share of its link, not 16.
 *
 * The algorithm, and what each part follows:
 *   - window and slow start in bytes, AIMD in congestion avoidance (RFC
 *     5681 section 3.1; RFC 9002 section 7 for the byte form): the window
 *     starts at SX_CC_IW_PKTS datagrams (RFC 9002 section 7.2), doubles
 *     per round trip below ssthresh, and grows by one datagram per
 *     smoothed round trip of time above it, Reno's slope counted in time
 *     as CUBIC's curve is (RFC 9438 section 4.1), so that a sender whose
 *     ACKs wait for the CPU grows as fast as the others; it grows only
 *     while the senders use it (RFC 7661: the flight reached half the
 *     window, or a sender found it full; an application-limited window
 *     does not grow);
 *   - loss (RACK or duplicate ACKs finding a hole; after a timeout, the
 *     packets it resends once an ACK shows it was no spurious one): the
 *     window halves, once per round trip: a loss of a packet sent before
 *     the last decrease is the same congestion event (RFC 9002 section
 *     7.3.2's recovery period, RFC 6582's for NewReno). A timeout alone
 *     changes nothing (RFC 9002 section 6.2: a probe timeout is no loss);
 *   - persistent congestion (a timeout backed off twice: two timeouts
 *     without an ACK between): the window falls to its minimum, two
 *     datagrams (RFC 9002 section 7.6), and comes back (window and
 *     threshold as they were) when an ACK shows the timeouts spurious
 *     (F-RTO's test, RFC 5682: a packet sent before them arrived) and no
 *     other decrease came since: the response of RFC 4015 section 3, as
 *     Linux undoes a loss state F-RTO found spurious. A receiver that
 *     was descheduled for two timeouts cost its senders their window
 *     otherwise: on 2 cores, with the cluster's frames kept in order (an
 *     experiment: RPS on every port), the two senders of a 2->1
 *     incast collapsed 9-10 times in 5 s, on timeouts that F-RTO then
 *     found spurious (43-46 a sender); test_liveness stops a receiver
 *     until its sender's window collapsed and requires the undo;
 *   - a halving that duplicate reports show spurious: every packet the
 *     loss episode sent again arrived twice (D-SACK, RFC 2883; detection
 *     as RFC 3708 section 3 has it, the response RFC 4015's, as Linux's
 *     tcp_try_undo_dsack): the window and threshold come back, unless
 *     another decrease came since, or another channel lost a packet or a
 *     CE mark came in the same round (sx_cc_undo_veto). A path that delays a datagram
 *     past RACK's reordering allowance (a route change, a bonded link)
 *     costs a resend, not half the window: with datagrams 2 ms late over
 *     loopback (SX_FAULT=reorder=0.01,reorder_us=2000: one held at a
 *     time, about one in 300), sx_bench bw's sender halved its window 342
 *     times in 100,000 messages of 8 KiB and took none back, and its
 *     window stopped 11,768 flushes; with the undo, 292 of 295 halvings
 *     went back and 63 flushes stopped (docs/tuning.md, "Late
 *     datagrams"; chan_cc.c keeps the episode);
 *   - delay, in the first slow start (HyStart++, RFC 9406): the smallest
 *     of a round trip's samples (eight at least), more than
 *     SX_CONGESTION_DELAY_US above the smallest of the round before (or an
 *     eighth of it, if that is more, up to 16 ms), says a queue is
 *     building: slow start ends there, before it overflows the queue by
 *     as much again, and the window grows additively from then on. A
 *     round's minimum, not one sample: a receiver that was busy or
 *     descheduled gives a few late samples, and one of them, in an MPI
 *     job's start-up, ended slow start at the initial window
 *     (cc_round_exit in cc.c). Delay does not cut the window: a first
 *     version cut it by Swift's rule (Kumar et al., SIGCOMM 2020) in
 *     congestion avoidance too, and beside one TCP flow, which keeps the
 *     queue full, shardx got 0.5 MB/s of a 125 MB/s link
 *     (bench/bench_incast.sh); a loss-based window shares it with TCP.
 *     SX_CONGESTION_DELAY_US=0 turns the signal off;
 *   - pacing (RFC 9002 section 7.7; Linux's fq pacing): the senders to
 *     one host share a clock that lets a datagram go every
 *     len * srtt / (gain * cwnd) ns, gain 2 in slow start and 1.25 after,
 *     with a credit of SX_CC_BURST_NS for a burst after a pause, or of
 *     the time the sender's shard was not progressed, up to half a round
 *     trip (its process did not run, or did not call in); a
 *     channel the clock holds back re-arms its flush on the shard's wheel.
 *
 *   - ECN (RFC 3168; sx_cc_ecn): receivers echo running counts of the
 *     ECT and CE marks of the datagrams they got (wire.h). A CE mark cuts
 *     the window once per round trip, as a loss does, but by DCTCP's
 *     measure (RFC 8257 section 3.3): by alpha / 2, alpha the moving
 *     average (gain 1/16, updated every round trip) of the share of
 *     datagrams marked, from 1, so a first mark halves it, as RFC 3168's
 *     response does, and a queue that a few marks keep at a switch's
 *     threshold costs a few percent a round trip instead of half. A
 *     window halved on every round trip with marks left 80 of 125 MB/s
 *     used, two senders through a port marking above 64 kB (bench/
 *     bench_incast.sh --ecn). Datacenter marking is what this answers,
 *     as DCTCP's does; the paths shardx serves are a job's network.
 *
 * Which channels use it (SX_CONGESTION): auto, those whose datagrams leave this
 * host (the transport's dest_local says no); on, every network channel
 * (a test of loopback through the fault decorator); off, none. A channel
 * without it behaves as before: only its window, byte budget and the
 * peer's receive window bound it.
 *
 * Synchronization: a controller is shared by shards, so every field is
 * atomic and each call takes any thread (the callers are token holders
 * of their shards); updates that read and write several fields (a
 * decrease) race benignly: two shards cutting at once cut once (the CAS
 * on cut_ns decides; a veto is its low bit, set by a CAS too, so that a
 * veto and an undo of one halving never both win), and growth may lose
 * an increment to a concurrent one, never more. The one wait: an undo
 * marks cut_ns SX_CC_CUT_UNDOING while it restores the window, a few
 * stores, and a decrease meanwhile spins (then yields) until it is
 * done, so that neither overwrites the other. Channels put what a flush
 * sent on the flight and the pacing clock once per flush, and what an
 * ACK took out once per ACK (chan_cc.c), counting their own unposted
 * share meanwhile: per datagram, 16 shards' atomics on these shared
 * lines held sx_bench mt's injection-only run over the sink to 3.2-3.9
 * M sends/s at 16 threads of a 16-core machine, 6.8-8.0 M so with
 * sx_cc_rtt's samples thinned (28-33 M without congestion control: the
 * flush's and the ACK's one write each, and the reads, cost the rest).
 * The table (sx_cc_table_t) adds controllers under a mutex, at channel
 * creation only, and frees them at engine destruction.
 */
#ifndef SX_SHARD_CC_H
#define SX_SHARD_CC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SX_CC_IW_PKTS             10             /* initial window, datagrams */
#define SX_CC_MIN_PKTS            2              /* minimum window, datagrams */
#define SX_CC_MAX_BYTES           (1ull << 30)   /* a ceiling for the window */
#define SX_CC_MIN_RTT_WINDOW_NS   10000000000ull /* the smallest RTT of 5 to 10 s */
#define SX_CC_BURST_NS            50000ull       /* pacing credit after a pause */
#define SX_CC_SRTT_SPACING_MAX_NS 1000000ull     /* SRTT takes a sample this often at least */
#define SX_CC_ALPHA_ONE           1024u          /* alpha's fixed point: 1.0 */
#define SX_CC_ALPHA_SHIFT         4              /* its gain, g = 1/16 (RFC 8257 section 4.2) */
#define SX_CC_GROW_CATCHUP        4              /* round trips of growth made up at once */
#define SX_CC_CUT_UNDOING         UINT64_MAX     /* cut_ns while an undo restores the window */
#define SX_CC_CUT_VETOED          1ull           /* cut_ns's low bit: its halving stays */
#define SX_CC_ROUND_SAMPLES       8              /* HyStart++'s N_RTT_SAMPLE (RFC 9406 4.3) */
#define SX_CC_ROUND_THRESH_MAX_NS 16000000       /* ... and MAX_RTT_THRESH */

/* SX_CONGESTION's words (common/config.h). */
enum { SX_CC_AUTO = 0, SX_CC_ON = 1, SX_CC_OFF = 2 };

typedef struct sx_cc {
    uint64_t host;              /* the destination host's key (sx_tl_ops_t.dest_host) */
    _Atomic uint32_t mss;       /* the largest datagram of a channel to it */
    _Atomic uint64_t cwnd;      /* bytes */
    _Atomic uint64_t ssthresh;  /* bytes; UINT64_MAX: still in slow start */
    _Atomic int64_t inflight;   /* bytes sent and not acknowledged, all channels */
    _Atomic uint64_t grow_ns;   /* congestion avoidance: time counted towards growth
                                 * up to here */
    _Atomic uint64_t cut_ns;    /* the last decrease; losses of packets sent before
                                 * it are the same event (sx_cc_cut_name; the low
                                 * bit: SX_CC_CUT_VETOED) */
    _Atomic uint64_t undo_cwnd; /* before the last decrease that may be undone */
    _Atomic uint64_t undo_ssthresh;
    _Atomic uint64_t undo_prev_cut_ns; /* cut_ns before the last halving ... */
    _Atomic uint64_t undo_ok_ns;       /* ... and that halving's (0: none) */
    _Atomic uint64_t limited_ns;       /* a sender last found the window full */
    _Atomic uint64_t srtt_ns;          /* smoothed over every channel's samples */
    _Atomic uint64_t srtt_at_ns;       /* ... the last of which came then */
    _Atomic uint64_t min_rtt_ns;       /* smallest sample since min_rtt_at_ns (dump) ... */
    _Atomic uint64_t min_rtt_next_ns;  /* ... and since half a window after it */
    _Atomic uint64_t min_rtt_at_ns;
    /* HyStart++'s rounds (RFC 9406 section 4.2), in the first slow start:
     * the current one began then (an ACK of a packet sent after it ends
     * it), its smallest sample and how many it had, and the last round's
     * smallest; 0: none yet. */
    _Atomic uint64_t round_at_ns;
    _Atomic uint64_t round_min_ns;
    _Atomic uint32_t round_samples;
    _Atomic uint64_t last_round_min_ns;
    _Atomic uint64_t pace_ns; /* the pacing clock: when the next datagram may go */
    /* ECN: DCTCP's alpha (in 1/SX_CC_ALPHA_ONE), and the datagrams
     * acknowledged with an ECN count and those marked CE since ecn_at_ns,
     * the start of the round trip that updates it next. */
    _Atomic uint32_t alpha;
    _Atomic uint64_t ecn_total, ecn_marked;
    _Atomic uint64_t ecn_at_ns;
    struct sx_cc *next; /* the table's list */
} sx_cc_t;

typedef struct sx_cc_table {
    pthread_mutex_t lock; /* list; a cold path: channel creation */
    sx_cc_t *head;
} sx_cc_table_t;

void sx_cc_table_init(sx_cc_table_t *table);

/** Frees every controller; no channel may use one any more. */
void sx_cc_table_fini(sx_cc_table_t *table);

/** The controller of @p host, created on first use for datagrams of at
 *  most @p mss bytes (a later, larger one raises it); NULL when out of
 *  memory (the channel then goes without). Any thread. */
sx_cc_t *sx_cc_get(sx_cc_table_t *table, uint64_t host, uint32_t mss);

/** Whether a new packet of @p len bytes fits the window now, the caller's
 *  @p unposted bytes (sent, not yet in the flight: sx_chan_cc_post_locked)
 *  counted; if not, the sender is window-limited (remembered for
 *  growth). */
bool sx_cc_window_open(sx_cc_t *cc, size_t len, int64_t unposted, uint64_t now);

/** The pacing clock, advanced by the caller's @p unposted_ns (datagrams
 *  it sent and has not yet put on the clock): 0 when a datagram may go
 *  now, else when to look again. @p idle_ns: how long the caller's shard
 *  was not progressed before now, the credit it may make up (up to half a
 *  round trip; SX_CC_BURST_NS at least). */
uint64_t sx_cc_pace_wait(sx_cc_t *cc, uint64_t unposted_ns, uint64_t idle_ns, uint64_t now);

/** A datagram of @p len bytes's share of a round trip on the pacing
 *  clock (retransmissions too, which never wait). */
uint64_t sx_cc_pace_interval(sx_cc_t *cc, size_t len);

/** Advances the pacing clock by @p interval ns (the sum of what a flush
 *  sent: one write to the shared clock per flush, not per datagram). */
void sx_cc_pace_advance(sx_cc_t *cc, uint64_t interval, uint64_t idle_ns, uint64_t now);

/** A packet of @p len bytes entered the flight (RFC 6675's pipe: sent,
 *  or sent again after it was presumed lost). */
static inline void sx_cc_sent(sx_cc_t *cc, size_t len)
{
    atomic_fetch_add_explicit(&cc->inflight, (int64_t)len, memory_order_relaxed);
}

/** @p len bytes left the flight: acknowledged, SACKed, presumed lost, or
 *  their channel failed. */
static inline void sx_cc_forget(sx_cc_t *cc, size_t len)
{
    atomic_fetch_sub_explicit(&cc->inflight, (int64_t)len, memory_order_relaxed);
}

/** @p len bytes arrived (a cumulative ACK or a SACK said so; each byte
 *  once): the window grows (they leave the flight by sx_cc_forget). */
void sx_cc_acked(sx_cc_t *cc, size_t len, uint64_t now);

/** A round-trip sample @p rtt, of a packet sent at now - rtt: the
 *  smoothed RTT, the minimum, and the delay signal. @p delay_ns is the
 *  queueing delay that ends slow start (0: no delay signal). Returns
 *  whether it ended slow start. */
bool sx_cc_rtt(sx_cc_t *cc, uint64_t rtt, uint64_t delay_ns, uint64_t now);

/** A packet last sent at @p sent_ns was lost (RACK, duplicate ACKs, a
 *  timeout); @p persistent: a timeout backed off twice. Returns 0 (the
 *  same event as an earlier cut), 1 (the window halved), 2 (it fell to
 *  its minimum). @p own_cut_ns: the halving whose loss episode the caller
 *  keeps (0: none); a loss of the same round as another halving vetoes
 *  that one's undo (sx_cc_undo_loss). */
int sx_cc_lost(sx_cc_t *cc, uint64_t sent_ns, bool persistent, uint64_t own_cut_ns, uint64_t now);

/** The collapse sx_cc_lost made at @p cut_ns (it returned 2) was
 *  spurious: the window and threshold go back to what they were, unless
 *  another decrease came since. Returns whether they did. */
bool sx_cc_undo(sx_cc_t *cc, uint64_t cut_ns);

/** The halving sx_cc_lost made at @p cut_ns (it returned 1) was
 *  spurious, as duplicate reports showed (chan_cc.c): the window and
 *  threshold go back to what they were, and losses of packets sent before
 *  it count again, unless another decrease came since or a loss of the
 *  same round was reported that this one's evidence does not cover
 *  (sx_cc_undo_veto). Returns whether they did. */
bool sx_cc_undo_loss(sx_cc_t *cc, uint64_t cut_ns);

/** The name of a cut made at @p now: the time with the low bit clear,
 *  which a veto sets (SX_CC_CUT_VETOED). sx_cc_lost and sx_cc_ecn store
 *  it; a caller that keeps a cut for its undo keeps this name. */
static inline uint64_t sx_cc_cut_name(uint64_t now)
{
    return now & ~SX_CC_CUT_VETOED;
}

/** A loss or a CE mark of the round of the cut made at @p cut_ns that the
 *  channel which made it does not track: that halving stays
 *  (sx_cc_undo_loss). The mark is cut_ns's low bit, set by a CAS on the
 *  field the undo's CAS takes, so that of a veto and an undo of the same
 *  cut exactly one wins, whatever the order of the shards making them
 *  (a field of its own, read before the undo's CAS, let a veto stored
 *  between the two be lost). Returns whether this call vetoed @p cut_ns:
 *  false when it was vetoed already, or is no longer the last cut (an
 *  undo or a newer cut came first). */
bool sx_cc_undo_veto(sx_cc_t *cc, uint64_t cut_ns);

/** An ACK raised the peer's ECN counts by @p ect (datagrams that came
 *  unmarked but ECN-capable) and @p ce (marked CE); @p sent_ns is when
 *  the newest packet it acknowledges was sent. Returns whether the window
 *  was cut (a CE mark, the first since a packet sent after the last cut). */
bool sx_cc_ecn(sx_cc_t *cc, uint32_t ect, uint32_t ce, uint64_t sent_ns, uint64_t now);

#endif /* SX_SHARD_CC_H */
