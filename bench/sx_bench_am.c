/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shardx benchmarks: latency (ping-pong), rate (windowed stream of
 * small messages) and loss (goodput under injected loss).
 *
 * Each rank runs one engine with its thread bound to shard 0 and drives it
 * by calling sx_progress() in a busy loop; handlers and completions run
 * inside those calls, on the same thread, so the counters they bump need
 * no atomics. An engine "session" is: create, exchange business cards over
 * the control channel, add the peer, run, drain every completion, barrier,
 * read the counters, barrier, destroy. Waiting on the control channel
 * keeps progressing the engine, because the other rank may be waiting for
 * an ACK that only our progress sends.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "sx_bench.h"

#define SXB_TAG      42
#define SXB_CARD_MAX 65536u

typedef struct sxb_am sxb_am_t;

/* One outstanding timed send: its start time and where its latency goes. */
typedef struct sxb_slot {
    sxb_am_t *am;
    uint64_t start_ns;
    uint64_t index;
} sxb_slot_t;

struct sxb_am {
    const sxb_ctl_t *ctl;
    sx_engine_h engine;
    sx_peer_h peer;
    int peer_status; /* set by the error callback */
    bool batch;      /* streams post each window refill with SX_SEND_MORE but the last */
    /* Receive side, written by the handler. */
    uint64_t rx_count;
    uint64_t rx_bytes;
    uint64_t rx_expect; /* rx_last_ns is taken when rx_count reaches it */
    uint64_t rx_first_ns, rx_last_ns;
    size_t rx_last_len;
    /* Send side, written by completions. */
    uint64_t tx_posted, tx_done, tx_errors;
    int tx_first_error;
    /* Timed sends (loss): slots, a stack of free ones, latencies by index. */
    sxb_slot_t *slots;
    sxb_slot_t **free_slots;
    unsigned nfree;
    uint64_t *lat_ns;
};

/* What rank 1 reports of a stream it received. */
typedef struct sxb_rx_report {
    uint64_t count, bytes;
    uint64_t first_ns, last_ns;
} sxb_rx_report_t;

SXB_LOOP static void sxb_on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data,
                               size_t len)
{
    sxb_am_t *am = arg;
    (void)peer_id;
    (void)tag;
    (void)data;
    /* Two clock reads per stream, not one per message: at millions of
     * messages per second the clock would show in the figure. */
    if (++am->rx_count == 1)
        am->rx_first_ns = sxb_now_ns();
    if (am->rx_count == am->rx_expect)
        am->rx_last_ns = sxb_now_ns();
    am->rx_bytes += len;
    am->rx_last_len = len;
}

SXB_LOOP static void sxb_note_status(sxb_am_t *am, int status)
{
    if (status != SX_OK && am->tx_errors++ == 0)
        am->tx_first_error = status;
}

SXB_LOOP static void sxb_on_done(void *ctx, int status)
{
    sxb_am_t *am = ctx;
    sxb_note_status(am, status);
    am->tx_done++;
}

static void sxb_on_done_timed(void *ctx, int status)
{
    sxb_slot_t *s = ctx;
    sxb_am_t *am = s->am;
    am->lat_ns[s->index] = sxb_now_ns() - s->start_ns;
    am->free_slots[am->nfree++] = s;
    sxb_note_status(am, status);
    am->tx_done++;
}

static void sxb_on_error(void *arg, uint64_t peer_id, int status)
{
    sxb_am_t *am = arg;
    (void)peer_id;
    am->peer_status = status;
}

/* One progress pass with error checks; the control channel's idle hook. */
SXB_LOOP static int sxb_am_poll(void *arg)
{
    sxb_am_t *am = arg;
    int rc = sx_progress(am->engine);
    if (rc < 0)
        return sxb_fail("sx_progress: %s", sx_strerror(rc));
    if (am->peer_status != SX_OK)
        return sxb_fail("peer failed: %s", sx_strerror(am->peer_status));
    if (am->tx_errors != 0)
        return sxb_fail("%llu sends completed with an error, the first: %s",
                        (unsigned long long)am->tx_errors, sx_strerror(am->tx_first_error));
    return 0;
}

/*
 * A hang detector for busy loops: fails once @p progress has not moved for
 * SXB_WAIT_LIMIT_NS (so a long but moving stream under heavy loss is not
 * cut short) or the other rank died. The clock is read only every 1024
 * calls: short waits cost no clock reads at all.
 */
typedef struct sxb_stall {
    uint64_t seen, deadline;
    unsigned spins;
} sxb_stall_t;

SXB_LOOP static int sxb_stall_check(const sxb_ctl_t *ctl, sxb_stall_t *st, uint64_t progress,
                                    const char *what)
{
    if ((++st->spins & 1023) != 0)
        return 0;
    if (st->deadline == 0 || progress != st->seen) {
        st->seen = progress;
        st->deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
        return 0;
    }
    return sxb_check(ctl, st->deadline, what);
}

/* Progresses until *counter reaches target. */
SXB_LOOP static int sxb_am_wait(sxb_am_t *am, const uint64_t *counter, uint64_t target,
                                const char *what)
{
    sxb_stall_t st = {0};

    while (*counter < target) {
        if (sxb_am_poll(am) != 0 || sxb_stall_check(am->ctl, &st, *counter, what) != 0)
            return -1;
    }
    return 0;
}

SXB_LOOP static int sxb_am_send(sxb_am_t *am, const uint8_t *buf, size_t size, bool more,
                                sx_complete_cb_t cb, void *ctx)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = size};
    sx_send_params_t params = {.field_mask = SX_SEND_PARAM_FLAGS, .flags = SX_SEND_MORE};
    int rc = sx_send_ex(am->peer, SXB_TAG, size ? &iov : NULL, size ? 1 : 0, more ? &params : NULL,
                        cb, ctx);
    if (rc != SX_INPROGRESS)
        return sxb_fail("sx_send of %zu bytes: %s", size, sx_strerror(rc));
    am->tx_posted++;
    return 0;
}

/*
 * Waits until every send of ours has completed, then for the other rank
 * to get there too. The barrier keeps progressing: the other rank's last
 * completions need our ACKs, which a rank that stopped progressing (say,
 * to run the raw-UDP floor) would hold back until it timed out.
 */
static int sxb_am_drain(sxb_am_t *am)
{
    if (sxb_am_wait(am, &am->tx_done, am->tx_posted, "our last completions") != 0)
        return -1;
    return sxb_ctl_barrier(am->ctl, sxb_am_poll, am);
}

int sxb_card_swap(const sxb_ctl_t *ctl, sx_engine_h e, sx_peer_h *peer_p)
{
    uint8_t *card = NULL, *peer_card = NULL;
    size_t len = 0;
    uint32_t len32, peer_len = 0;
    int rc = sx_engine_address(e, NULL, &len);

    if (rc != SX_ERR_TRUNCATED || len == 0 || len > SXB_CARD_MAX || (card = malloc(len)) == NULL ||
        (rc = sx_engine_address(e, card, &len)) != SX_OK) {
        sxb_fail("sx_engine_address: %s (%zu bytes)", sx_strerror(rc), len);
        goto fail;
    }
    len32 = (uint32_t)len;
    if (sxb_ctl_write(ctl, &len32, sizeof(len32)) != 0 || sxb_ctl_write(ctl, card, len) != 0 ||
        sxb_ctl_read(ctl, &peer_len, sizeof(peer_len), NULL, NULL) != 0)
        goto fail;
    if (peer_len == 0 || peer_len > SXB_CARD_MAX || (peer_card = malloc(peer_len)) == NULL) {
        sxb_fail("bad business card length %u from the other rank", peer_len);
        goto fail;
    }
    if (sxb_ctl_read(ctl, peer_card, peer_len, NULL, NULL) != 0)
        goto fail;
    rc = sx_peer_add(e, (uint64_t)(1 - ctl->rank), peer_card, peer_len, peer_p);
    if (rc != SX_OK) {
        sxb_fail("sx_peer_add: %s", sx_strerror(rc));
        goto fail;
    }
    free(card);
    free(peer_card);
    return 0;
fail:
    free(card);
    free(peer_card);
    return -1;
}

/* Opens a session's engine; @p fault (FAULT) and @p aggregate (AGGREGATE)
 * go into its configuration when not NULL. */
static int sxb_am_open(sxb_am_t *am, const sxb_ctl_t *ctl, const char *fault, const char *aggregate)
{
    sx_config_kv_t kv[2];
    size_t nkv = 0;
    int rc;

    memset(am, 0, sizeof(*am));
    am->ctl = ctl;
    if (fault != NULL)
        kv[nkv++] = (sx_config_kv_t){.name = "FAULT", .value = fault};
    if (aggregate != NULL)
        kv[nkv++] = (sx_config_kv_t){.name = "AGGREGATE", .value = aggregate};
    sx_engine_params_t params = {.field_mask = SX_ENGINE_PARAM_NAME,
                                 .name = ctl->rank == 0 ? "bench-rank0" : "bench-rank1"};
    if (nkv > 0) {
        params.field_mask |= SX_ENGINE_PARAM_CONFIG;
        params.config = kv;
        params.config_count = nkv;
    }
    rc = sx_engine_create(&params, &am->engine);
    if (rc != SX_OK)
        return sxb_fail("sx_engine_create: %s", sx_strerror(rc));
    if ((rc = sx_thread_bind(am->engine, 0)) != SX_OK ||
        (rc = sx_am_register(am->engine, SXB_TAG, sxb_on_am, am)) != SX_OK ||
        (rc = sx_error_register(am->engine, sxb_on_error, am)) != SX_OK) {
        sxb_fail("engine set-up: %s", sx_strerror(rc));
        goto fail;
    }
    if (sxb_card_swap(ctl, am->engine, &am->peer) != 0)
        goto fail;
    return 0;
fail:
    sx_engine_destroy(am->engine);
    am->engine = NULL;
    return -1;
}

/* Ends a session: after the drain neither rank owes the other anything,
 * so the counters are final. The last barrier keeps a rank from destroying
 * its engine while the other may still need it to progress. */
static int sxb_am_close(sxb_am_t *am, const char *bench, const char *label, bool ok)
{
    uint64_t mine[SXB_NCOUNTERS], theirs[SXB_NCOUNTERS];
    int rc = ok ? 0 : -1;

    if (rc == 0)
        rc = sxb_am_drain(am);
    if (rc == 0) {
        sxb_counters_read(am->engine, mine);
        if (am->ctl->rank == 1) {
            rc = sxb_ctl_write(am->ctl, mine, sizeof(mine));
        } else {
            rc = sxb_ctl_read(am->ctl, theirs, sizeof(theirs), sxb_am_poll, am);
            if (rc == 0)
                sxb_counters_add(bench, label, mine, theirs);
        }
    }
    if (rc == 0)
        rc = sxb_ctl_barrier(am->ctl, sxb_am_poll, am);
    sx_engine_destroy(am->engine);
    am->engine = NULL;
    free(am->slots);
    free(am->free_slots);
    free(am->lat_ns);
    am->slots = NULL;
    am->free_slots = NULL;
    am->lat_ns = NULL;
    return rc;
}

static int sxb_timed_init(sxb_am_t *am, unsigned window, uint64_t count)
{
    am->slots = calloc(window, sizeof(*am->slots));
    am->free_slots = calloc(window, sizeof(*am->free_slots));
    am->lat_ns = calloc(count, sizeof(*am->lat_ns));
    if (am->slots == NULL || am->free_slots == NULL || am->lat_ns == NULL)
        return sxb_fail("out of memory for %llu latencies", (unsigned long long)count);
    for (unsigned i = 0; i < window; i++) {
        am->slots[i].am = am;
        am->free_slots[i] = &am->slots[i];
    }
    am->nfree = window;
    return 0;
}

/* Rank 0's side of a stream: @p count sends, at most @p window
 * outstanding; with @p timed, each send's completion latency goes to
 * am->lat_ns. Returns the time from the first send to the last completion. */
static int sxb_stream_send(sxb_am_t *am, const uint8_t *buf, size_t size, uint64_t count,
                           unsigned window, bool timed, uint64_t *elapsed_ns_p)
{
    uint64_t base = am->tx_done, posted = 0;
    sxb_stall_t st = {0};
    uint64_t t0 = sxb_now_ns();

    while (am->tx_done - base < count) {
        while (posted < count && posted - (am->tx_done - base) < window) {
            /* Batching: every send of a refill but its last says more follow. */
            bool more =
                am->batch && posted + 1 < count && posted + 1 - (am->tx_done - base) < window;
            int rc;
            if (timed) {
                sxb_slot_t *s = am->free_slots[--am->nfree];
                s->index = posted;
                s->start_ns = sxb_now_ns();
                rc = sxb_am_send(am, buf, size, more, sxb_on_done_timed, s);
            } else {
                rc = sxb_am_send(am, buf, size, more, sxb_on_done, am);
            }
            if (rc != 0)
                return -1;
            posted++;
        }
        if (sxb_am_poll(am) != 0 ||
            sxb_stall_check(am->ctl, &st, am->tx_done, "stream completions") != 0)
            return -1;
    }
    *elapsed_ns_p = sxb_now_ns() - t0;
    return 0;
}

/*
 * One measured stream: rank 1 arms its counters, both pass a barrier,
 * rank 0 sends, rank 1 waits for every message and reports what it saw.
 * The barrier comes after the arming, so no message can arrive early.
 */
static int sxb_stream(sxb_am_t *am, const uint8_t *buf, size_t size, uint64_t count,
                      unsigned window, bool timed, uint64_t *tx_ns_p, sxb_rx_report_t *rep)
{
    if (am->ctl->rank == 1) {
        am->rx_count = am->rx_bytes = 0;
        am->rx_first_ns = am->rx_last_ns = 0;
        am->rx_expect = count;
        if (sxb_ctl_barrier(am->ctl, sxb_am_poll, am) != 0 ||
            sxb_am_wait(am, &am->rx_count, count, "stream deliveries") != 0)
            return -1;
        *rep = (sxb_rx_report_t){am->rx_count, am->rx_bytes, am->rx_first_ns, am->rx_last_ns};
        return sxb_ctl_write(am->ctl, rep, sizeof(*rep));
    }
    if (sxb_ctl_barrier(am->ctl, sxb_am_poll, am) != 0 ||
        sxb_stream_send(am, buf, size, count, window, timed, tx_ns_p) != 0 ||
        sxb_ctl_read(am->ctl, rep, sizeof(*rep), sxb_am_poll, am) != 0)
        return -1;
    if (rep->count != count || rep->bytes != count * size)
        return sxb_fail("rank 1 got %llu messages, %llu bytes; sent %llu of %zu bytes",
                        (unsigned long long)rep->count, (unsigned long long)rep->bytes,
                        (unsigned long long)count, size);
    return 0;
}

static uint8_t *sxb_buffer(size_t size)
{
    uint8_t *b = malloc(size ? size : 1);
    if (b != NULL)
        memset(b, 0xa5, size ? size : 1);
    else
        sxb_fail("out of memory for a %zu-byte buffer", size);
    return b;
}

static void sxb_print_counters(const sxb_ctl_t *ctl, const sxb_opts_t *opts, size_t first)
{
    if (sxb_human(ctl, opts))
        sxb_counters_print(first);
}

/* ---- latency -------------------------------------------------------------- */

/*
 * How many blocks a size's round trips are cut into, shardx's and the
 * floor's alternating, so that both see the same stretches of the
 * machine: this VM's half round trip moves between 2.7 and 3.5 us within
 * seconds, and in one block each a single run's ratio came out anywhere
 * from 1.08 to 1.36 (sx_bench latency --size 8, 12 runs; standard
 * deviation 0.058), in ten 1.19 to 1.27 (0.024), the median the same
 * (1.205 and 1.21). A block keeps SXB_LATENCY_BLOCK_MIN round trips at
 * least.
 */
#define SXB_LATENCY_BLOCKS    10
#define SXB_LATENCY_BLOCK_MIN 500

static unsigned sxb_latency_blocks(uint64_t iters)
{
    uint64_t nb = iters / SXB_LATENCY_BLOCK_MIN;
    return nb < 1 ? 1 : nb > SXB_LATENCY_BLOCKS ? SXB_LATENCY_BLOCKS : (unsigned)nb;
}

/* shardx ping-pong of @p size bytes; rank 0 fills @p rtt_ns. */
SXB_LOOP_FIRST static int sxb_am_pingpong(sxb_am_t *am, const uint8_t *buf, size_t size,
                                          uint64_t warmup, uint64_t iters, uint64_t *rtt_ns)
{
    uint64_t base = am->rx_count;

    if (sxb_ctl_barrier(am->ctl, sxb_am_poll, am) != 0)
        return -1;
    for (uint64_t i = 0; i < warmup + iters; i++) {
        if (am->ctl->rank == 0) {
            uint64_t t0 = sxb_now_ns();
            if (sxb_am_send(am, buf, size, false, sxb_on_done, am) != 0 ||
                sxb_am_wait(am, &am->rx_count, base + i + 1, "a pong") != 0)
                return -1;
            uint64_t t1 = sxb_now_ns();
            if (i >= warmup)
                rtt_ns[i - warmup] = t1 - t0;
        } else if (sxb_am_wait(am, &am->rx_count, base + i + 1, "a ping") != 0 ||
                   sxb_am_send(am, buf, am->rx_last_len, false, sxb_on_done, am) != 0) {
            return -1;
        }
        if (am->rx_last_len != size)
            return sxb_fail("got %zu bytes in a ping-pong of %zu", am->rx_last_len, size);
    }
    return sxb_am_drain(am);
}

/*
 * The ratio of each block alone (shardx's median over the floor's, both
 * of that block's round trips): a ping-pong's round trip is quantized by
 * the poll, a datagram that comes just after a read waiting a whole empty
 * system call more, so half round trips fall into modes half a poll cycle
 * apart and a median jumps from one to the next between blocks
 * (docs/tuning.md, "Where a small message's time goes"). The lowest and
 * highest show how far apart a run's stretches were; the run's ratio is
 * still the medians of all round trips. Sorts copies: @p scratch holds n.
 */
static double sxb_block_ratio(const uint64_t *rtt, const uint64_t *floor_rtt, uint64_t n,
                              uint64_t *scratch)
{
    uint64_t med, fmed, q;

    memcpy(scratch, rtt, n * sizeof(*scratch));
    sxb_quantiles(scratch, n, 0.99, &med, &q);
    memcpy(scratch, floor_rtt, n * sizeof(*scratch));
    sxb_quantiles(scratch, n, 0.99, &fmed, &q);
    return fmed > 0 ? (double)med / (double)fmed : NAN;
}

/* The lowest and highest of @p n block ratios (NAN for none). */
static void sxb_block_range(const double *r, unsigned n, double *lo_p, double *hi_p)
{
    double lo = NAN, hi = NAN;

    for (unsigned i = 0; i < n; i++) {
        if (isnan(r[i]))
            continue;
        lo = isnan(lo) || r[i] < lo ? r[i] : lo;
        hi = isnan(hi) || r[i] > hi ? r[i] : hi;
    }
    *lo_p = lo;
    *hi_p = hi;
}

/* Rank 0's records and line for one size; @p floor_rtt and @p sh_rtt are
 * NULL where the size has no floor, and then @p nblk is 0; @p blk holds
 * the blocks' ratios; @p floor_lost counts the floors' round trips that
 * lost a datagram and were run again (sxb_udp_pingpong). */
static void sxb_latency_report(size_t size, uint64_t iters, uint64_t *rtt, uint64_t *floor_rtt,
                               uint64_t *sh_rtt, const double *blk, unsigned nblk,
                               uint64_t floor_lost, bool human)
{
    uint64_t med, p99, fmed = 0, fp99 = 0, smed = 0, sp99 = 0;
    bool has_floor = floor_rtt != NULL && sh_rtt != NULL;

    sxb_quantiles(rtt, iters, 0.99, &med, &p99);
    if (has_floor) {
        sxb_quantiles(floor_rtt, iters, 0.99, &fmed, &fp99);
        sxb_quantiles(sh_rtt, iters, 0.99, &smed, &sp99);
    }
    double ratio = has_floor && fmed > 0 ? (double)med / (double)fmed : NAN;
    double sh_ratio = has_floor && smed > 0 ? (double)med / (double)smed : NAN;
    sxb_record_t r = sxb_record("latency", NULL, size);
    sxb_metric(&r, "half_rtt_us", (double)med / 2e3);
    sxb_metric(&r, "p99_us", (double)p99 / 2e3);
    double blk_lo = NAN, blk_hi = NAN;
    sxb_block_range(blk, nblk, &blk_lo, &blk_hi);
    if (has_floor) {
        sxb_metric(&r, "ratio_to_floor", ratio);
        sxb_metric(&r, "ratio_to_shared_floor", sh_ratio);
        sxb_metric(&r, "blocks", (double)nblk);
        sxb_metric(&r, "block_ratio_min", blk_lo);
        sxb_metric(&r, "block_ratio_max", blk_hi);
    }
    sxb_record_add(&r);
    if (has_floor) {
        r = sxb_record("floor", "raw", size);
        sxb_metric(&r, "half_rtt_us", (double)fmed / 2e3);
        sxb_metric(&r, "p99_us", (double)fp99 / 2e3);
        sxb_metric(&r, "lost_round_trips", (double)floor_lost);
        sxb_record_add(&r);
        r = sxb_record("floor_shared", "raw", size);
        sxb_metric(&r, "half_rtt_us", (double)smed / 2e3);
        sxb_metric(&r, "p99_us", (double)sp99 / 2e3);
        sxb_record_add(&r);
    }
    if (human && has_floor)
        printf("%9zu %7llu %10.2f %10.2f %10.2f %10.2f %7.2f %10.2f %9.2f %5.2f-%4.2f\n", size,
               (unsigned long long)iters, (double)med / 2e3, (double)p99 / 2e3, (double)fmed / 2e3,
               (double)fp99 / 2e3, ratio, (double)smed / 2e3, sh_ratio, blk_lo, blk_hi);
    else if (human)
        printf("%9zu %7llu %10.2f %10.2f %10s %10s %7s %10s %9s %10s\n", size,
               (unsigned long long)iters, (double)med / 2e3, (double)p99 / 2e3, "-", "-", "-", "-",
               "-", "-");
    if (human && floor_lost > 0)
        printf("#   the floors lost %llu round trips (no answer in 10 ms, or in ten times the "
               "fastest round trip where that is longer) and ran them again\n",
               (unsigned long long)floor_lost);
    fflush(stdout);
}

int sxb_bench_latency(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    size_t sizes[16];
    size_t nsizes = sxb_latency_sizes(opts, sizes, 16);
    size_t max = 0;
    sxb_udp_t u = {.fd = -1, .sfd = -1, .tfd = -1};
    sxb_am_t am;
    bool human = sxb_human(ctl, opts);
    size_t first_counters = sxb_counters_count();
    int rc = -1;

    for (size_t s = 0; s < nsizes; s++)
        max = sizes[s] > max ? sizes[s] : max;
    uint8_t *buf = sxb_buffer(max);
    if (buf == NULL || sxb_udp_open(ctl, &u) != 0) {
        free(buf);
        return -1;
    }
    if (sxb_am_open(&am, ctl, NULL, NULL) != 0) {
        sxb_udp_close(&u);
        free(buf);
        return -1;
    }
    if (human)
        printf("\n# ping-pong half round trip in us: shardx (sx_send) and the raw-UDP floor,\n"
               "# alternating in up to %d blocks per size; ratio = shardx median / floor median.\n"
               "# udp_shared: the floor on a socket every peer would send to, as shardx's\n"
               "# is: unconnected, read with the sender's address, which is checked (no early\n"
               "# demultiplexing: a route lookup per datagram); sh_ratio = shardx / udp_shared;\n"
               "# blocks: the lowest and highest ratio of one block alone (the round trip is\n"
               "# quantized by the poll, so medians jump between modes: docs/tuning.md)\n"
               "%9s %7s %10s %10s %10s %10s %7s %10s %9s %10s\n",
               SXB_LATENCY_BLOCKS, "size", "iters", "sx_median", "sx_p99", "udp_median", "udp_p99",
               "ratio", "udp_shared", "sh_ratio", "blocks");
    bool ok = true;
    for (size_t s = 0; ok && s < nsizes; s++) {
        size_t size = sizes[s];
        uint64_t iters = sxb_latency_iters(opts, size);
        uint64_t warmup = iters / 10 + 10;
        uint64_t *rtt = calloc(iters, sizeof(*rtt));
        uint64_t *floor_rtt = calloc(iters, sizeof(*floor_rtt));
        uint64_t *sh_rtt = calloc(iters, sizeof(*sh_rtt));
        bool has_floor = size <= SXB_UDP_MAX;
        uint64_t floor_lost = 0;
        ok = rtt != NULL && floor_rtt != NULL && sh_rtt != NULL;
        /* Each block: shardx's share of the round trips, then the
         * floor's, then the shared-socket floor's; the first carries
         * the whole warm-up, the others a tenth of it. */
        unsigned nb = has_floor ? sxb_latency_blocks(iters) : 1;
        double blk[SXB_LATENCY_BLOCKS];
        uint64_t *scratch =
            has_floor && ctl->rank == 0 ? calloc(iters / nb + 1, sizeof(*scratch)) : NULL;
        for (unsigned b = 0; ok && b < nb; b++) {
            uint64_t lo = iters * b / nb, n = iters * (b + 1) / nb - lo;
            uint64_t w = b == 0 ? warmup : warmup / nb + 10;
            ok = sxb_am_pingpong(&am, buf, size, w, n, rtt + lo) == 0 &&
                 (!has_floor ||
                  (sxb_udp_pingpong(ctl, &u, size, false, w, n, floor_rtt + lo, &floor_lost) == 0 &&
                   sxb_udp_pingpong(ctl, &u, size, true, w, n, sh_rtt + lo, &floor_lost) == 0));
            /* Without the scratch memory the run goes on without them. */
            blk[b] =
                ok && scratch != NULL ? sxb_block_ratio(rtt + lo, floor_rtt + lo, n, scratch) : NAN;
        }
        if (ok && ctl->rank == 0)
            sxb_latency_report(size, iters, rtt, has_floor ? floor_rtt : NULL,
                               has_floor ? sh_rtt : NULL, blk, has_floor ? nb : 0, floor_lost,
                               human);
        free(scratch);
        free(rtt);
        free(floor_rtt);
        free(sh_rtt);
    }
    rc = sxb_am_close(&am, "latency", "latency", ok);
    sxb_udp_close(&u);
    free(buf);
    if (rc == 0)
        sxb_print_counters(ctl, opts, first_counters);
    return rc;
}

/* ---- rate ----------------------------------------------------------------- */

/* One rate session: a warm-up stream, then the measured one. */
static int sxb_rate_one(const sxb_ctl_t *ctl, const uint8_t *buf, size_t size, uint64_t count,
                        unsigned window, bool aggregate, sxb_rx_report_t *rep, uint64_t *tx_ns_p)
{
    uint64_t warmup = count / 10 < 1000 ? (count < 1000 ? count : 1000) : count / 10;
    sxb_rx_report_t warm_rep;
    uint64_t warm_tx_ns = 0;
    char label[48];
    sxb_am_t am;

    if (sxb_am_open(&am, ctl, NULL, aggregate ? "yes" : "no") != 0)
        return -1;
    am.batch = aggregate;
    bool ok = sxb_stream(&am, buf, size, warmup, window, false, &warm_tx_ns, &warm_rep) == 0 &&
              sxb_stream(&am, buf, size, count, window, false, tx_ns_p, rep) == 0;
    snprintf(label, sizeof(label), "w=%u,agg=%s", window, aggregate ? "on" : "off");
    return sxb_am_close(&am, "rate", label, ok);
}

/*
 * Windowed message rate, with aggregation on (SX_AGGREGATE=yes, each window
 * refill posted with SX_SEND_MORE but its last send, so small messages can
 * share datagrams) and off (one message per datagram, each send flushed at
 * once), for window 64 and 256 (or --window), against the raw-UDP one-way
 * floor measured in the same run.
 */
int sxb_bench_rate(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    size_t size = opts->size_set ? opts->size : 8;
    uint64_t count = opts->iters_set ? opts->iters : 300000;
    unsigned windows[2] = {opts->window_set ? opts->window : 64, 256};
    unsigned nwindows = opts->window_set ? 1 : 2;
    size_t first_counters = sxb_counters_count();
    bool human = sxb_human(ctl, opts);

    uint8_t *buf = sxb_buffer(size);
    if (buf == NULL)
        return -1;
    /* The floor first: the same number of raw datagrams. */
    double floor_rate = NAN;
    if (size <= SXB_UDP_MAX) {
        sxb_udp_t u = {.fd = -1, .sfd = -1, .tfd = -1};
        int rc = sxb_udp_open(ctl, &u);
        if (rc == 0)
            rc = sxb_udp_rate(ctl, &u, size, count, &floor_rate, NULL, NULL);
        sxb_udp_close(&u);
        if (rc != 0) {
            free(buf);
            return -1;
        }
    }
    if (human) {
        char fl[48] = "none: larger than a datagram, or lost";
        if (!isnan(floor_rate))
            snprintf(fl, sizeof(fl), "%.0f msgs/s", floor_rate);
        printf("\n# message rate: %zu-byte sx_send, %llu messages after a warm-up; rx: first to "
               "last delivery\n# at rank 1; tx: first send to last completion at rank 0; "
               "aggregation on: SX_AGGREGATE=yes\n# and SX_SEND_MORE on each window refill but "
               "its last send; off: one message per datagram;\n# udp: raw-UDP one-way floor, one "
               "send() per datagram (%s); ratio = rx / udp\n"
               "%9s %7s %5s %14s %14s %10s %7s\n",
               size, (unsigned long long)count, fl, "size", "window", "agg", "rx_msgs_per_s",
               "tx_msgs_per_s", "msgs/dgram", "ratio");
    }
    for (unsigned w = 0; w < nwindows; w++) {
        for (int agg = 1; agg >= 0; agg--) {
            sxb_rx_report_t rep;
            uint64_t tx_ns = 0;
            size_t before = sxb_counters_count();
            if (sxb_rate_one(ctl, buf, size, count, windows[w], agg != 0, &rep, &tx_ns) != 0) {
                free(buf);
                return -1;
            }
            if (ctl->rank != 0)
                continue;
            double rx_s = (double)(rep.last_ns - rep.first_ns) / 1e9;
            double rx_rate = rx_s > 0 ? (double)rep.count / rx_s : NAN;
            double tx_rate = (double)count / ((double)tx_ns / 1e9);
            double per_dgram = sxb_counters_ratio(before, 0, "frames_sent", "data_sent");
            sxb_record_t r = sxb_record("rate", NULL, size);
            sxb_metric(&r, "window", windows[w]);
            sxb_metric(&r, "aggregation", agg);
            sxb_metric(&r, "msg_rate", rx_rate);
            sxb_metric(&r, "msg_rate_sender", tx_rate);
            sxb_metric(&r, "bw_MBps", rx_rate * (double)size / 1e6);
            sxb_metric(&r, "msgs_per_datagram", per_dgram);
            if (!isnan(floor_rate))
                sxb_metric(&r, "ratio_to_floor", rx_rate / floor_rate);
            sxb_record_add(&r);
            if (human) {
                char ratio[24] = "-"; /* no floor: larger than a datagram, or too few arrived */
                if (!isnan(floor_rate))
                    snprintf(ratio, sizeof(ratio), "%.3f", rx_rate / floor_rate);
                printf("%9zu %7u %5s %14.0f %14.0f %10.1f %7s\n", size, windows[w],
                       agg ? "on" : "off", rx_rate, tx_rate, per_dgram, ratio);
                fflush(stdout);
            }
        }
    }
    free(buf);
    if (ctl->rank == 0 && !isnan(floor_rate)) {
        sxb_record_t r = sxb_record("floor_rate", "raw", size);
        sxb_metric(&r, "msg_rate", floor_rate);
        sxb_record_add(&r);
    }
    sxb_print_counters(ctl, opts, first_counters);
    return 0;
}

/* ---- bw ------------------------------------------------------------------- */

/* Messages per size: about 64 MiB, at least 64 and at most 100000 (which
 * small sizes reach in well under a second). */
static uint64_t sxb_bw_count(const sxb_opts_t *opts, size_t size)
{
    if (opts->iters_set)
        return opts->iters;
    uint64_t n = (64ull << 20) / (size ? size : 1);
    return n < 64 ? 64 : n > 100000 ? 100000 : n;
}

/* Payload bytes this rank's engine copied in user space so far, out and
 * in (copy_tx_bytes + copy_rx_bytes). */
static uint64_t sxb_copied(sx_engine_h e)
{
    uint64_t tx = 0, rx = 0;
    (void)sx_stats_value(e, "copy_tx_bytes", &tx);
    (void)sx_stats_value(e, "copy_rx_bytes", &rx);
    return tx + rx;
}

/* bw --op put|get: consecutive operations use consecutive slots of the
 * local buffer and of the region, as operations of an application use
 * buffers of their own: GETs into one buffer would keep the landing of
 * their answers to the oldest one (chan_rma.c, no place offered twice),
 * and more slots than the landing's spans (4) keep those apart. */
#define SXB_RMA_SLOTS 8u

/* Rank 1's region for bw --op put|get, and where rank 0 reaches it. */
typedef struct sxb_region {
    uint8_t *buf;
    sx_mem_h mem;
    uint64_t addr, rkey;
} sxb_region_t;

/* Rank 1 registers @p size bytes for remote reads and writes and tells
 * rank 0 where they are. */
static int sxb_region_open(sxb_am_t *am, size_t size, sxb_region_t *r)
{
    uint64_t where[2];
    int rc;

    *r = (sxb_region_t){0};
    if (am->ctl->rank == 0)
        return sxb_ctl_read(am->ctl, where, sizeof(where), sxb_am_poll, am) != 0
                   ? -1
                   : (r->addr = where[0], r->rkey = where[1], 0);
    if ((r->buf = sxb_buffer(size)) == NULL)
        return -1;
    rc = sx_mem_register(am->engine, r->buf, size ? size : 1,
                         SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE, &r->mem);
    if (rc != SX_OK)
        return sxb_fail("sx_mem_register of %zu bytes: %s", size, sx_strerror(rc));
    where[0] = (uint64_t)(uintptr_t)r->buf;
    where[1] = sx_mem_rkey(r->mem);
    return sxb_ctl_write(am->ctl, where, sizeof(where));
}

static void sxb_region_close(sxb_am_t *am, sxb_region_t *r)
{
    if (r->mem != NULL)
        (void)sx_mem_deregister(am->engine, r->mem);
    free(r->buf);
}

/* Rank 0's side of an RMA stream: @p count PUTs (or GETs) of @p size
 * bytes from (into) @p buf's slots into (out of) rank 1's region's, at
 * most @p window outstanding;
 * *elapsed_ns_p from the first post to the last completion. Rank 1
 * progresses in the barrier that ends the stream. */
static int sxb_rma_stream(sxb_am_t *am, sxb_op_t op, uint8_t *buf, size_t size, uint64_t count,
                          unsigned window, const sxb_region_t *r, uint64_t *elapsed_ns_p)
{
    uint64_t base = am->tx_done, posted = 0;
    sxb_stall_t st = {0};

    if (sxb_ctl_barrier(am->ctl, sxb_am_poll, am) != 0)
        return -1;
    if (am->ctl->rank == 1)
        return sxb_ctl_barrier(am->ctl, sxb_am_poll, am);
    uint64_t t0 = sxb_now_ns();
    while (am->tx_done - base < count) {
        while (posted < count && posted - (am->tx_done - base) < window) {
            uint64_t slot = (posted % SXB_RMA_SLOTS) * size;
            int rc =
                op == SXB_OP_PUT
                    ? sx_put(am->peer, buf + slot, size, r->addr + slot, r->rkey, sxb_on_done, am)
                    : sx_get(am->peer, buf + slot, size, r->addr + slot, r->rkey, sxb_on_done, am);
            if (rc == SX_ERR_AGAIN)
                break; /* the channel's outstanding operations are at their cap */
            if (rc != SX_INPROGRESS)
                return sxb_fail("sx_%s of %zu bytes: %s", op == SXB_OP_PUT ? "put" : "get", size,
                                sx_strerror(rc));
            posted++;
            am->tx_posted++;
        }
        if (sxb_am_poll(am) != 0 ||
            sxb_stall_check(am->ctl, &st, am->tx_done, "RMA completions") != 0)
            return -1;
    }
    *elapsed_ns_p = sxb_now_ns() - t0;
    return sxb_ctl_barrier(am->ctl, sxb_am_poll, am);
}

/* One size of bw: a warm-up stream, then the measured one; rank 0 gets
 * the rate (messages or operations per second) and the user-space copies
 * of both ranks during the measured one. */
static int sxb_bw_one(sxb_am_t *am, sxb_op_t op, uint8_t *buf, size_t size, uint64_t count,
                      unsigned window, const sxb_region_t *r, double *rate_p, uint64_t *copied_p)
{
    uint64_t warmup = count / 10 + 1, warm_ns = 0, tx_ns = 0, copied;
    sxb_rx_report_t rep;
    int rc;

    if (op == SXB_OP_AM) {
        rc = sxb_stream(am, buf, size, warmup, window, false, &warm_ns, &rep);
        copied = sxb_copied(am->engine);
        if (rc == 0)
            rc = sxb_stream(am, buf, size, count, window, false, &tx_ns, &rep);
        double rx_s = (double)(rep.last_ns - rep.first_ns) / 1e9;
        *rate_p = rx_s > 0 ? (double)rep.count / rx_s : NAN;
    } else {
        rc = sxb_rma_stream(am, op, buf, size, warmup, window, r, &warm_ns);
        copied = sxb_copied(am->engine);
        if (rc == 0)
            rc = sxb_rma_stream(am, op, buf, size, count, window, r, &tx_ns);
        *rate_p = tx_ns > 0 ? (double)count / ((double)tx_ns / 1e9) : NAN;
    }
    copied = sxb_copied(am->engine) - copied;
    if (rc != 0)
        return -1;
    /* Rank 1 hands rank 0 what its engine copied during the stream. */
    if (am->ctl->rank == 1)
        return sxb_ctl_write(am->ctl, &copied, sizeof(copied));
    uint64_t theirs = 0;
    if (sxb_ctl_read(am->ctl, &theirs, sizeof(theirs), sxb_am_poll, am) != 0)
        return -1;
    *copied_p = copied + theirs;
    return 0;
}

/*
 * Unidirectional bandwidth: a windowed stream of each size from rank 0 to
 * rank 1 over one engine session, then the raw-UDP one-way floor: the
 * same datagrams for the sizes one datagram holds, and a larger message
 * as the fewest equal datagrams that carry it (1 MiB: 17 of 61,681
 * bytes), counted in messages. MB/s = 10^6 payload bytes per second between
 * rank 1's first and last delivery. copies/B: the payload bytes both
 * engines copied in user space during the timed stream, per payload byte
 * delivered (the kernel's two copies, into and out of the socket, come on
 * top). With --op put or get the stream is of PUTs into (GETs out of)
 * rank 1's registered region, timed at rank 0 from the first post to the
 * last completion.
 */
int sxb_bench_bw(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    size_t sizes[16];
    size_t nsizes = sxb_latency_sizes(opts, sizes, 16);
    size_t max = 0;
    size_t first_counters = sxb_counters_count();
    bool human = sxb_human(ctl, opts);
    sxb_am_t am;

    for (size_t s = 0; s < nsizes; s++)
        max = sizes[s] > max ? sizes[s] : max;
    uint8_t *buf = sxb_buffer(opts->op == SXB_OP_AM ? max : SXB_RMA_SLOTS * max);
    if (buf == NULL)
        return -1;
    static const char *const what[] = {[SXB_OP_AM] = "sx_send stream",
                                       [SXB_OP_PUT] = "sx_put stream into rank 1's region",
                                       [SXB_OP_GET] = "sx_get stream out of rank 1's region"};
    static const char *const timed[] = {[SXB_OP_AM] = "rank 1's first to last delivery",
                                        [SXB_OP_PUT] = "rank 0's first post to last completion",
                                        [SXB_OP_GET] = "rank 0's first post to last completion"};
    if (human)
        printf("\n# unidirectional bandwidth: %s, window %u; MB/s = 10^6 payload "
               "bytes/s\n# from %s; udp: raw-UDP one-way stream of "
               "the same datagrams\n# (above 65,000 B: each message as the fewest equal "
               "datagrams; lost ones not counted; -: fewer than\n# two arrived, or 0 B, which "
               "has no bytes to compare); ratio = shardx / udp;\n# copies/B: payload bytes both "
               "engines copied in user space per byte delivered (the kernel\n# adds two)\n"
               "%9s %8s %10s %12s %10s %7s %9s\n",
               what[opts->op], opts->window, timed[opts->op], "size",
               opts->op == SXB_OP_AM ? "messages" : "ops", "MB_per_s",
               opts->op == SXB_OP_AM ? "msgs_per_s" : "ops_per_s", "udp_MB/s", "ratio", "copies/B");
    if (sxb_am_open(&am, ctl, NULL, NULL) != 0) {
        free(buf);
        return -1;
    }
    sxb_region_t region = {0};
    double *mbps = calloc(nsizes, sizeof(*mbps)), *rates = calloc(nsizes, sizeof(*rates));
    double *copies = calloc(nsizes, sizeof(*copies));
    bool ok = mbps != NULL && rates != NULL && copies != NULL &&
              (opts->op == SXB_OP_AM || sxb_region_open(&am, SXB_RMA_SLOTS * max, &region) == 0);
    for (size_t s = 0; ok && s < nsizes; s++) {
        uint64_t count = sxb_bw_count(opts, sizes[s]), copied = 0;
        ok = sxb_bw_one(&am, opts->op, buf, sizes[s], count, opts->window, &region, &rates[s],
                        &copied) == 0;
        mbps[s] = rates[s] * (double)sizes[s] / 1e6;
        double bytes = (double)count * (double)sizes[s];
        copies[s] = ok && ctl->rank == 0 && bytes > 0 ? (double)copied / bytes : NAN;
    }
    /* Every operation completed before its stream's last barrier: the
     * region may go before the engine does. */
    sxb_region_close(&am, &region);
    int rc = sxb_am_close(&am, "bw",
                          opts->op == SXB_OP_PUT   ? "put"
                          : opts->op == SXB_OP_GET ? "get"
                                                   : "bw",
                          ok);
    sxb_udp_t u = {.fd = -1, .sfd = -1, .tfd = -1};
    if (rc == 0)
        rc = sxb_udp_open(ctl, &u);
    for (size_t s = 0; rc == 0 && s < nsizes; s++) {
        double floor_rate = NAN;
        uint64_t count = sxb_bw_count(opts, sizes[s]);
        size_t k = (sizes[s] + SXB_UDP_MAX - 1) / SXB_UDP_MAX; /* datagrams a message */
        if (k <= 1)
            rc = sxb_udp_rate(ctl, &u, sizes[s], count, &floor_rate, NULL, NULL);
        else if ((rc = sxb_udp_rate(ctl, &u, (sizes[s] + k - 1) / k, count * k, &floor_rate, NULL,
                                    NULL)) == 0)
            floor_rate /= (double)k;
        if (rc != 0 || ctl->rank != 0)
            continue;
        double floor_mbps = floor_rate * (double)sizes[s] / 1e6;
        sxb_record_t r = sxb_record("bw",
                                    opts->op == SXB_OP_PUT   ? "put"
                                    : opts->op == SXB_OP_GET ? "get"
                                                             : NULL,
                                    sizes[s]);
        sxb_metric(&r, "window", opts->window);
        sxb_metric(&r, "bw_MBps", mbps[s]);
        sxb_metric(&r, "msg_rate", rates[s]);
        if (sizes[s] > 0 && !isnan(floor_rate))
            sxb_metric(&r, "ratio_to_floor", mbps[s] / floor_mbps);
        if (!isnan(copies[s]))
            sxb_metric(&r, "copies_per_byte", copies[s]);
        sxb_record_add(&r);
        if (!isnan(floor_rate)) {
            r = sxb_record("floor_bw", "raw", sizes[s]);
            sxb_metric(&r, "bw_MBps", floor_mbps);
            sxb_metric(&r, "msg_rate", floor_rate);
            sxb_record_add(&r);
        }
        if (human) {
            printf("%9zu %8llu %10.1f %12.0f", sizes[s], (unsigned long long)count, mbps[s],
                   rates[s]);
            /* A 0-byte stream moves no bytes: no ratio, no copies a byte
             * (its rates are in the msgs_per_s column and `rate`). */
            if (isnan(floor_rate))
                printf(" %10s %7s", "-", "-");
            else if (sizes[s] == 0)
                printf(" %10.1f %7s", floor_mbps, "-");
            else
                printf(" %10.1f %7.2f", floor_mbps, mbps[s] / floor_mbps);
            if (isnan(copies[s]))
                printf(" %9s\n", "-");
            else
                printf(" %9.2f\n", copies[s]);
            fflush(stdout);
        }
    }
    sxb_udp_close(&u);
    free(mbps);
    free(rates);
    free(copies);
    free(buf);
    if (rc == 0)
        sxb_print_counters(ctl, opts, first_counters);
    return rc;
}

/* ---- loss ----------------------------------------------------------------- */

int sxb_bench_loss(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    static const double rates[] = {0, 0.001, 0.01, 0.05, 0.10};
    size_t size = opts->size_set ? opts->size : 65536;
    uint64_t count = opts->iters_set ? opts->iters : (64ull << 20) / (size ? size : 1);
    uint64_t warmup = count < opts->window ? count : opts->window;
    size_t first_counters = sxb_counters_count();
    double lossless = NAN;
    bool human = sxb_human(ctl, opts);

    if (count == 0)
        count = 1;
    uint8_t *buf = sxb_buffer(size);
    if (buf == NULL)
        return -1;
    if (human)
        printf("\n# goodput under injected loss (FAULT on rank 0's engine, seed %llu): %llu "
               "messages of %zu bytes, window %u;\n# MB/s = 10^6 bytes/s from the first send "
               "to the last completion; latency = sx_send to completion\n"
               "%7s %10s %9s %11s %11s %12s\n",
               (unsigned long long)opts->seed, (unsigned long long)count, size, opts->window,
               "loss_%", "MB_per_s", "goodput", "mean_us", "p99_us", "msgs_per_s");
    for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
        char fault[64], label[32];
        sxb_am_t am;
        sxb_rx_report_t rep;
        uint64_t tx_ns = 0, warm_ns = 0;

        /* Loss is injected on rank 0's sends only: data is lost on the way
         * out, ACKs on the way back are not. loss=0 still goes through the
         * decorator, so the lossless baseline pays the same per-datagram
         * cost as the lossy runs. */
        snprintf(fault, sizeof(fault), "loss=%g,seed=%llu", rates[i],
                 (unsigned long long)opts->seed);
        snprintf(label, sizeof(label), "loss=%g", rates[i]);
        if (sxb_am_open(&am, ctl, ctl->rank == 0 ? fault : NULL, NULL) != 0)
            goto fail;
        bool ok = true;
        if (ctl->rank == 0)
            ok = sxb_timed_init(&am, opts->window, count > warmup ? count : warmup) == 0;
        ok = ok && sxb_stream(&am, buf, size, warmup, opts->window, true, &warm_ns, &rep) == 0 &&
             sxb_stream(&am, buf, size, count, opts->window, true, &tx_ns, &rep) == 0;
        uint64_t mean = 0, med = 0, p99 = 0;
        if (ok && ctl->rank == 0) {
            long double sum = 0;
            for (uint64_t k = 0; k < count; k++)
                sum += am.lat_ns[k];
            mean = (uint64_t)(sum / count);
            sxb_quantiles(am.lat_ns, count, 0.99, &med, &p99);
        }
        if (sxb_am_close(&am, "loss", label, ok) != 0)
            goto fail;
        if (ctl->rank != 0)
            continue;
        double secs = (double)tx_ns / 1e9;
        double mbps = (double)count * (double)size / 1e6 / secs;
        if (i == 0)
            lossless = mbps;
        sxb_record_t r = sxb_record("loss", NULL, size);
        sxb_metric(&r, "loss", rates[i]);
        sxb_metric(&r, "window", opts->window);
        sxb_metric(&r, "bw_MBps", mbps);
        sxb_metric(&r, "goodput_ratio", mbps / lossless);
        sxb_metric(&r, "msg_rate", (double)count / secs);
        sxb_metric(&r, "mean_us", (double)mean / 1e3);
        sxb_metric(&r, "median_us", (double)med / 1e3);
        sxb_metric(&r, "p99_us", (double)p99 / 1e3);
        sxb_record_add(&r);
        if (human) {
            printf("%7.1f %10.1f %9.3f %11.1f %11.1f %12.0f\n", 100.0 * rates[i], mbps,
                   mbps / lossless, (double)mean / 1e3, (double)p99 / 1e3, (double)count / secs);
            fflush(stdout);
        }
    }
    free(buf);
    sxb_print_counters(ctl, opts, first_counters);
    return 0;
fail:
    free(buf);
    return -1;
}
