/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * incast: ranks 1..N-1 each stream --size active messages into rank 0,
 * --window of them outstanding, for --seconds; rank 0 measures each
 * sender's goodput over the same interval and the fairness between them
 * (issue 23, congestion control: shard/cc.h). With --probe the last rank
 * streams nothing and ping-pongs 8 bytes with rank 0 instead: the latency
 * a small message sees through the port the senders fill.
 *
 * The ranks meet through the engine: sx_engine_join adds every rank as a
 * peer whose id is its rank, and sx_job_barrier starts and ends the run,
 * so any number of ranks takes part (run alone, sx_bench forks one sender
 * and the control channel stands in for both). Each rank drives one
 * engine from one thread, as sx_bench_am.c does: handlers and completions
 * run inside our sx_progress calls, so their counters need no atomics.
 *
 * The run:
 *   1. every rank creates its engine and registers its handlers, then
 *      joins (a sender can only send once it has rank 0's card, which
 *      rank 0 publishes after registering);
 *   2. each sender sends one message and the prober does one round trip,
 *      so that channels are connected before the clock starts; barrier;
 *   3. senders stream for --seconds by their own clocks; rank 0 counts
 *      each sender's bytes between t0 + w and t0 + S - w (w: a tenth of S,
 *      at most 1 s; t0: rank 0's barrier exit), the middle of the run, in
 *      which every sender streams whatever the skew of the barrier;
 *   4. each sender waits for its last completions, then sends rank 0 a
 *      report: its sends, its engine's counters and its host name. One
 *      thread's messages to a peer arrive in order, so the report comes
 *      after its data; rank 0 checks its count against the report;
 *   5. barrier, then every engine is destroyed (sx_job_barrier's
 *      contract: a rank whose sends have completed may go after it).
 *
 * --verify: a message starts with its sender's rank and a sequence number
 * (two host-order uint64_t: both ends run this same program on one
 * architecture, as sx_bench's control channel assumes), and the rest is
 * an xorshift stream seeded by the two, so a byte delivered to the wrong
 * offset, from the wrong message or the wrong sender shows.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shardx.h>

#include "sx_bench.h"

#define SXB_INC_TAG_DATA     43
#define SXB_INC_TAG_REPORT   44
#define SXB_INC_TAG_PROBE    45
#define SXB_INC_HDR          16u /* rank and sequence number, --verify */
#define SXB_INC_PROBE_SIZE   8u
#define SXB_INC_PROBE_RING   64u         /* pings whose buffers may still be in flight */
#define SXB_INC_MAX_ERRORS   10u         /* verification errors printed; the rest counted */
#define SXB_INC_REPORT_MAGIC 0x53584952u /* "SXIR" */

/* Counters each sender reports, in this order (sx_stats_value names). */
static const char *const sxb_inc_counter_names[] = {
    "data_bytes",     "rtx_bytes",    "rtx_timeout",      "cc_loss_cuts",
    "cc_delay_exits", "cc_collapses", "cc_window_stalls", "cc_pace_waits",
    "chan_failures",  "cc_ecn_cuts",  "cc_undos",         "rtx_unneeded",
};
enum {
    SXB_INC_NCOUNTERS = sizeof(sxb_inc_counter_names) / sizeof(sxb_inc_counter_names[0]),
    SXB_INC_DATA_BYTES = 0,
    SXB_INC_RTX_BYTES = 1,
    SXB_INC_CHAN_FAILURES = 8,
};

/* A sender's or the prober's last message to rank 0. */
typedef struct sxb_inc_report {
    uint32_t magic;
    uint32_t probe; /* 1: the prober's (the probe_* fields are set) */
    uint64_t sent, completed, errors;
    int32_t first_error;
    uint32_t pad;
    uint64_t counters[SXB_INC_NCOUNTERS]; /* UINT64_MAX: the engine lacks it */
    uint64_t probe_n, probe_p50_ns, probe_p99_ns, probe_max_ns, probe_bad;
    char host[64];
} sxb_inc_report_t;

/* Rank 0's view of one other rank. */
typedef struct sxb_inc_src {
    uint64_t msgs, bytes; /* delivered so far */
    uint64_t start_bytes; /* bytes at the interval's start */
    uint64_t end_bytes;   /* ... and end */
    uint64_t next_seq;    /* --verify: the sequence number due */
    bool reported;
    sxb_inc_report_t rep;
} sxb_inc_src_t;

typedef struct sxb_inc sxb_inc_t;

/* One send buffer of a sender's window, or one of the prober's pings. */
typedef struct sxb_inc_slot {
    sxb_inc_t *inc;
    bool busy;
    uint8_t *buf;
} sxb_inc_slot_t;

struct sxb_inc {
    const sxb_ctl_t *ctl;
    const sxb_opts_t *opts;
    sx_engine_h engine;
    sx_peer_h to0; /* not rank 0: rank 0 */
    int rank, size;
    size_t msg_size;
    unsigned window;
    bool probing; /* --probe and this is the last rank */
    int prober;   /* the prober's rank; -1 without --probe */
    /* Failures seen by callbacks. */
    int peer_status;
    uint64_t failed_peer;
    /* Send side (senders' data, the prober's pings, rank 0's pongs). */
    uint64_t posted, done, ok, errors;
    int first_error;
    /* Rank 0. */
    sxb_inc_src_t *src; /* size entries; [0] unused */
    unsigned reports;
    uint64_t verify_errors;
    /* The prober. */
    uint64_t pongs;
    uint64_t last_pong;
    uint64_t pong_bad;
    uint64_t probe_end;
};

/* ---- rank 0's result, kept for the JSON object ---------------------------- */

typedef struct sxb_inc_result {
    bool valid;
    size_t size;
    double seconds, interval_s;
    unsigned window;
    int ranks, nsenders;
    int *rank;
    char (*host)[64];
    double *mbps;
    uint64_t *msgs;
    uint64_t (*counters)[SXB_INC_NCOUNTERS]; /* each sender's (UINT64_MAX: unknown) */
    double goodput, jain, rtx_pct;
    uint64_t sum[SXB_INC_NCOUNTERS];
    bool have[SXB_INC_NCOUNTERS];
    bool probe;
    double p50_us, p99_us, max_us;
    uint64_t probe_n;
    bool verified;
    uint64_t rx_ecn_ce; /* rank 0's: data datagrams that came marked CE; UINT64_MAX unknown */
} sxb_inc_result_t;

static sxb_inc_result_t g_inc;

/* ---- the pattern ---------------------------------------------------------- */

/* splitmix64's finalizer (Steele, Lea and Flood, OOPSLA 2014): spreads
 * nearby (rank, seq) pairs over unrelated xorshift seeds. */
static uint64_t sxb_inc_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (x ^ (x >> 31)) | 1u; /* xorshift's state must not be 0 */
}

/* Marsaglia's xorshift64 (J. Stat. Softw. 8(14), 2003). */
static inline uint64_t sxb_inc_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static void sxb_inc_fill(uint8_t *buf, size_t size, uint64_t rank, uint64_t seq)
{
    uint64_t s = sxb_inc_mix((rank << 48) ^ seq);

    memcpy(buf, &rank, 8);
    memcpy(buf + 8, &seq, 8);
    for (size_t off = SXB_INC_HDR; off < size; off += 8) {
        uint64_t w = sxb_inc_next(&s);
        memcpy(buf + off, &w, size - off < 8 ? size - off : 8);
    }
}

/* The first byte of @p data that is not the pattern of (rank, seq), or
 * @p size when all are. */
static size_t sxb_inc_mismatch(const uint8_t *data, size_t size, uint64_t rank, uint64_t seq)
{
    uint64_t s = sxb_inc_mix((rank << 48) ^ seq);

    for (size_t off = SXB_INC_HDR; off < size; off += 8) {
        uint64_t w = sxb_inc_next(&s);
        size_t n = size - off < 8 ? size - off : 8;
        if (memcmp(data + off, &w, n) == 0)
            continue;
        const uint8_t *want = (const uint8_t *)&w;
        for (size_t k = 0; k < n; k++) {
            if (data[off + k] != want[k])
                return off + k;
        }
    }
    return size;
}

/* ---- callbacks ------------------------------------------------------------ */

static void sxb_inc_bad(sxb_inc_t *inc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A verification error: printed (the first few), counted, and the run goes
 * on, so that every rank still ends through the last barrier. */
static void sxb_inc_bad(sxb_inc_t *inc, const char *fmt, ...)
{
    char line[400];
    va_list ap;

    if (inc->verify_errors++ >= SXB_INC_MAX_ERRORS)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    sxb_fail("incast: %s", line);
}

static void sxb_inc_check(sxb_inc_t *inc, uint64_t from, sxb_inc_src_t *src, const uint8_t *data,
                          size_t len)
{
    uint64_t rank, seq;

    if (len != inc->msg_size) {
        sxb_inc_bad(inc, "sender %llu, message %llu: %zu bytes, expected %zu",
                    (unsigned long long)from, (unsigned long long)src->msgs - 1, len,
                    inc->msg_size);
        return;
    }
    memcpy(&rank, data, 8);
    memcpy(&seq, data + 8, 8);
    if (rank != from) {
        sxb_inc_bad(inc, "sender %llu, message %llu: says it is from rank %llu (seq %llu)",
                    (unsigned long long)from, (unsigned long long)src->msgs - 1,
                    (unsigned long long)rank, (unsigned long long)seq);
        return;
    }
    if (seq != src->next_seq) {
        if (seq > src->next_seq)
            sxb_inc_bad(inc, "sender %llu: seq %llu arrived where %llu was due (a gap of %llu)",
                        (unsigned long long)from, (unsigned long long)seq,
                        (unsigned long long)src->next_seq,
                        (unsigned long long)(seq - src->next_seq));
        else
            sxb_inc_bad(inc, "sender %llu: seq %llu arrived again (or out of order) after %llu",
                        (unsigned long long)from, (unsigned long long)seq,
                        (unsigned long long)src->next_seq - 1);
    }
    src->next_seq = seq + 1;
    size_t off = sxb_inc_mismatch(data, len, rank, seq);
    if (off < len) {
        uint64_t s = sxb_inc_mix((rank << 48) ^ seq), w = 0;
        for (size_t o = SXB_INC_HDR; o <= off; o += 8)
            w = sxb_inc_next(&s);
        sxb_inc_bad(inc, "sender %llu, seq %llu: byte %zu of %zu is 0x%02x, expected 0x%02x",
                    (unsigned long long)from, (unsigned long long)seq, off, len, data[off],
                    ((const uint8_t *)&w)[(off - SXB_INC_HDR) % 8]);
    }
}

static void sxb_inc_on_data(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    sxb_inc_t *inc = arg;

    (void)tag;
    if (peer_id == 0 || peer_id >= (uint64_t)inc->size || (int)peer_id == inc->prober) {
        sxb_inc_bad(inc, "%zu bytes of data from rank %llu, which does not stream", len,
                    (unsigned long long)peer_id);
        return;
    }
    sxb_inc_src_t *src = &inc->src[peer_id];
    src->msgs++;
    src->bytes += len;
    if (inc->opts->verify)
        sxb_inc_check(inc, peer_id, src, data, len);
}

static void sxb_inc_on_report(void *arg, uint64_t peer_id, uint8_t tag, const void *data,
                              size_t len)
{
    sxb_inc_t *inc = arg;
    sxb_inc_report_t rep;

    (void)tag;
    if (len != sizeof(rep) || peer_id == 0 || peer_id >= (uint64_t)inc->size) {
        sxb_inc_bad(inc, "a %zu-byte report from rank %llu", len, (unsigned long long)peer_id);
        return;
    }
    memcpy(&rep, data, sizeof(rep));
    sxb_inc_src_t *src = &inc->src[peer_id];
    if (rep.magic != SXB_INC_REPORT_MAGIC || src->reported) {
        sxb_inc_bad(inc, "rank %llu: %s report", (unsigned long long)peer_id,
                    src->reported ? "a second" : "a garbled");
        return;
    }
    rep.host[sizeof(rep.host) - 1] = '\0';
    src->rep = rep;
    src->reported = true;
    inc->reports++;
}

static void sxb_inc_on_done(void *ctx, int status)
{
    sxb_inc_slot_t *slot = ctx;
    sxb_inc_t *inc = slot->inc;

    slot->busy = false;
    inc->done++;
    if (status == SX_OK)
        inc->ok++;
    else if (inc->errors++ == 0)
        inc->first_error = status;
}

/* Rank 0's pongs: a copy of the ping in a buffer of their own, freed by
 * the completion (the next ping may arrive before it runs). */
static void sxb_inc_on_pong_done(void *ctx, int status)
{
    sxb_inc_slot_t *slot = ctx;
    sxb_inc_t *inc = slot->inc;

    inc->done++;
    if (status == SX_OK)
        inc->ok++;
    else if (inc->errors++ == 0)
        inc->first_error = status;
    free(slot);
}

static void sxb_inc_on_probe(void *arg, const sx_am_msg_t *msg)
{
    sxb_inc_t *inc = arg;

    if (inc->rank != 0) { /* the prober: a pong */
        uint64_t seq = 0;
        if (msg->len == SXB_INC_PROBE_SIZE)
            memcpy(&seq, msg->data, 8);
        if (msg->len != SXB_INC_PROBE_SIZE || seq != inc->pongs + 1)
            inc->pong_bad++;
        inc->pongs++;
        return;
    }
    if ((int)msg->peer_id != inc->prober) {
        sxb_inc_bad(inc, "a probe from rank %llu, which does not probe",
                    (unsigned long long)msg->peer_id);
        return;
    }
    sxb_inc_slot_t *slot = malloc(sizeof(*slot) + SXB_INC_PROBE_SIZE);
    if (slot == NULL) {
        sxb_inc_bad(inc, "out of memory for a pong");
        return;
    }
    *slot = (sxb_inc_slot_t){.inc = inc, .buf = (uint8_t *)(slot + 1)};
    size_t n = msg->len < SXB_INC_PROBE_SIZE ? msg->len : SXB_INC_PROBE_SIZE;
    memset(slot->buf, 0, SXB_INC_PROBE_SIZE);
    memcpy(slot->buf, msg->data, n);
    struct iovec iov = {.iov_base = slot->buf, .iov_len = SXB_INC_PROBE_SIZE};
    int rc = sx_send(msg->peer, SXB_INC_TAG_PROBE, &iov, 1, sxb_inc_on_pong_done, slot);
    if (rc != SX_INPROGRESS) {
        free(slot);
        if (inc->errors++ == 0)
            inc->first_error = rc;
        return;
    }
    inc->posted++;
}

static void sxb_inc_on_error(void *arg, uint64_t peer_id, int status)
{
    sxb_inc_t *inc = arg;

    if (inc->peer_status == SX_OK) {
        inc->peer_status = status;
        inc->failed_peer = peer_id;
    }
}

/* ---- engine, progress, barrier -------------------------------------------- */

/* One progress pass; -1 (with the reason printed) when the engine or a
 * peer failed or a send of ours did. */
static int sxb_inc_poll(void *arg)
{
    sxb_inc_t *inc = arg;
    int rc = sx_progress(inc->engine);

    if (rc < 0)
        return sxb_fail("incast: sx_progress: %s", sx_strerror(rc));
    if (inc->peer_status != SX_OK)
        return sxb_fail("incast: rank %llu failed: %s", (unsigned long long)inc->failed_peer,
                        sx_strerror(inc->peer_status));
    if (inc->errors != 0)
        return sxb_fail("incast: %llu sends completed with an error, the first: %s",
                        (unsigned long long)inc->errors, sx_strerror(inc->first_error));
    return 0;
}

/* Progresses until *counter reaches target; a hang detector fails it
 * once the counter has not moved for SXB_WAIT_LIMIT_NS. */
static int sxb_inc_wait(sxb_inc_t *inc, const uint64_t *counter, uint64_t target, const char *what)
{
    uint64_t seen = *counter, deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
    unsigned spins = 0;

    while (*counter < target) {
        if (sxb_inc_poll(inc) != 0)
            return -1;
        if ((++spins & 1023) != 0)
            continue;
        if (*counter != seen) {
            seen = *counter;
            deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
        } else if (sxb_check(inc->ctl, deadline, what) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Every rank passes it before any goes on; it keeps the engine progressing. */
static int sxb_inc_barrier(sxb_inc_t *inc)
{
    if (!inc->ctl->job)
        return sxb_ctl_barrier(inc->ctl, sxb_inc_poll, inc);
    int rc = sx_job_barrier(inc->engine);
    if (rc != SX_OK)
        return sxb_fail("incast: sx_job_barrier: %s", sx_strerror(rc));
    return 0;
}

static int sxb_inc_open(sxb_inc_t *inc)
{
    char name[32];
    int rc;

    snprintf(name, sizeof(name), "bench-rank%d", inc->ctl->rank);
    sx_engine_params_t params = {.field_mask = SX_ENGINE_PARAM_NAME, .name = name};
    rc = sx_engine_create(&params, &inc->engine);
    if (rc != SX_OK)
        return sxb_fail("sx_engine_create: %s", sx_strerror(rc));
    if ((rc = sx_thread_bind(inc->engine, 0)) != SX_OK ||
        (rc = sx_am_register(inc->engine, SXB_INC_TAG_DATA, sxb_inc_on_data, inc)) != SX_OK ||
        (rc = sx_am_register(inc->engine, SXB_INC_TAG_REPORT, sxb_inc_on_report, inc)) != SX_OK ||
        (rc = sx_am_register_ex(inc->engine, SXB_INC_TAG_PROBE, sxb_inc_on_probe, inc)) != SX_OK ||
        (rc = sx_error_register(inc->engine, sxb_inc_on_error, inc)) != SX_OK) {
        sxb_fail("engine set-up: %s", sx_strerror(rc));
        goto fail;
    }
    if (!inc->ctl->job) {
        inc->rank = inc->ctl->rank;
        inc->size = 2;
        if (sxb_card_swap(inc->ctl, inc->engine, &inc->to0) != 0)
            goto fail;
        return 0;
    }
    sx_job_info_t job;
    if ((rc = sx_engine_join(inc->engine, &job)) != SX_OK) {
        sxb_fail("sx_engine_join: %s", sx_strerror(rc));
        goto fail;
    }
    if ((int)job.rank != inc->ctl->rank) {
        sxb_fail("the launcher's environment says rank %d, its modex (%s) rank %u", inc->ctl->rank,
                 job.modex, job.rank);
        goto fail;
    }
    inc->rank = (int)job.rank;
    inc->size = (int)job.size;
    inc->to0 = inc->rank != 0 ? sx_job_peer(inc->engine, 0) : NULL;
    return 0;
fail:
    sx_engine_destroy(inc->engine);
    inc->engine = NULL;
    return -1;
}

/* ---- senders and the prober ----------------------------------------------- */

static int sxb_inc_post(sxb_inc_t *inc, uint8_t tag, sxb_inc_slot_t *slot, size_t len)
{
    struct iovec iov = {.iov_base = slot->buf, .iov_len = len};
    int rc = sx_send(inc->to0, tag, len ? &iov : NULL, len ? 1 : 0, sxb_inc_on_done, slot);

    if (rc != SX_INPROGRESS)
        return sxb_fail("incast: sx_send of %zu bytes to rank 0: %s", len, sx_strerror(rc));
    slot->busy = true;
    inc->posted++;
    return 0;
}

static sxb_inc_slot_t *sxb_inc_slots(sxb_inc_t *inc, unsigned n, size_t size)
{
    sxb_inc_slot_t *slots = calloc(n, sizeof(*slots));
    uint8_t *bufs = calloc(n, size ? size : 1);

    if (slots == NULL || bufs == NULL) {
        free(slots);
        free(bufs);
        sxb_fail("incast: out of memory for %u buffers of %zu bytes", n, size);
        return NULL;
    }
    for (unsigned i = 0; i < n; i++)
        slots[i] = (sxb_inc_slot_t){.inc = inc, .buf = bufs + (size_t)i * (size ? size : 1)};
    return slots;
}

static void sxb_inc_slots_free(sxb_inc_slot_t *slots)
{
    if (slots != NULL)
        free(slots[0].buf);
    free(slots);
}

/* A sender: the warm-up message, the barrier, then --seconds of stream. */
static int sxb_inc_stream(sxb_inc_t *inc, sxb_inc_slot_t *slots)
{
    uint64_t seq = 0;
    size_t size = inc->msg_size;

    /* The warm-up message is data like the rest: it connects the channel
     * and is sequence number 0. */
    sxb_inc_fill(slots[0].buf, size, (uint64_t)inc->rank, seq++);
    if (sxb_inc_post(inc, SXB_INC_TAG_DATA, &slots[0], size) != 0 ||
        sxb_inc_wait(inc, &inc->done, inc->posted, "the warm-up message's completion") != 0 ||
        sxb_inc_barrier(inc) != 0)
        return -1;
    uint64_t end = sxb_now_ns() + (uint64_t)(inc->opts->seconds * 1e9);
    uint64_t seen = inc->done, deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
    for (;;) {
        uint64_t now = sxb_now_ns();
        if (now >= end)
            break;
        for (unsigned i = 0; i < inc->window; i++) {
            if (slots[i].busy)
                continue;
            /* Without --verify only the header is written: the rest of the
             * buffer is whatever it held, and rank 0 only counts. */
            if (inc->opts->verify)
                sxb_inc_fill(slots[i].buf, size, (uint64_t)inc->rank, seq);
            else if (size >= SXB_INC_HDR)
                memcpy(slots[i].buf + 8, &seq, 8);
            if (sxb_inc_post(inc, SXB_INC_TAG_DATA, &slots[i], size) != 0)
                return -1;
            seq++;
        }
        if (sxb_inc_poll(inc) != 0)
            return -1;
        if (inc->done != seen) {
            seen = inc->done;
            deadline = now + SXB_WAIT_LIMIT_NS;
        } else if (sxb_check(inc->ctl, deadline, "stream completions") != 0) {
            return -1;
        }
    }
    return sxb_inc_wait(inc, &inc->done, inc->posted, "our last completions");
}

/* The prober: 8-byte pings, one at a time, for --seconds; the round trips
 * go to @p rtt (grown as needed). */
static int sxb_inc_probe(sxb_inc_t *inc, sxb_inc_slot_t *ring, uint64_t **rtt_p, uint64_t *n_p)
{
    uint64_t cap = 1u << 16, n = 0;
    uint64_t *rtt = malloc(cap * sizeof(*rtt));

    *rtt_p = rtt;
    if (rtt == NULL)
        return sxb_fail("incast: out of memory for round trips");
    for (uint64_t seq = 1;; seq++) {
        sxb_inc_slot_t *slot = &ring[seq % SXB_INC_PROBE_RING];
        /* A ping's buffer stays ours until its completion; the pong can
         * come before it. */
        while (slot->busy) {
            if (sxb_inc_poll(inc) != 0)
                return -1;
        }
        memcpy(slot->buf, &seq, 8);
        uint64_t t0 = sxb_now_ns();
        if (sxb_inc_post(inc, SXB_INC_TAG_PROBE, slot, SXB_INC_PROBE_SIZE) != 0 ||
            sxb_inc_wait(inc, &inc->pongs, seq, "a pong") != 0)
            return -1;
        uint64_t t1 = sxb_now_ns();
        if (seq == 1) { /* the warm-up round trip: connects, not measured */
            if (sxb_inc_barrier(inc) != 0)
                return -1;
            inc->probe_end = sxb_now_ns() + (uint64_t)(inc->opts->seconds * 1e9);
            continue;
        }
        if (n == cap) {
            uint64_t *more = realloc(rtt, 2 * cap * sizeof(*rtt));
            if (more == NULL)
                return sxb_fail("incast: out of memory for round trips");
            *rtt_p = rtt = more;
            cap *= 2;
        }
        rtt[n++] = t1 - t0;
        *n_p = n;
        if (t1 >= inc->probe_end)
            break;
    }
    return sxb_inc_wait(inc, &inc->done, inc->posted, "our last completions");
}

/* Not rank 0: stream (or probe), then report to rank 0. */
static int sxb_inc_send_side(sxb_inc_t *inc)
{
    sxb_inc_report_t rep = {.magic = SXB_INC_REPORT_MAGIC, .probe = inc->probing};
    sxb_inc_slot_t *slots = inc->probing ? sxb_inc_slots(inc, SXB_INC_PROBE_RING, 8)
                                         : sxb_inc_slots(inc, inc->window, inc->msg_size);
    uint64_t *rtt = NULL, nrtt = 0;

    if (slots == NULL)
        return -1;
    int rc = inc->probing ? sxb_inc_probe(inc, slots, &rtt, &nrtt) : sxb_inc_stream(inc, slots);
    /* Report even a failed stream when rank 0 can still be reached: it
     * then names this sender and its first error. */
    rep.sent = inc->posted;
    rep.completed = inc->ok;
    rep.errors = inc->errors;
    rep.first_error = inc->first_error;
    if (rc != 0 && rep.errors == 0)
        rep.errors = 1;
    for (int k = 0; k < SXB_INC_NCOUNTERS; k++) {
        if (sx_stats_value(inc->engine, sxb_inc_counter_names[k], &rep.counters[k]) != SX_OK)
            rep.counters[k] = UINT64_MAX;
    }
    if (inc->probing && nrtt > 0) {
        uint64_t med, p99;
        sxb_quantiles(rtt, nrtt, 0.99, &med, &p99);
        rep.probe_n = nrtt;
        rep.probe_p50_ns = med;
        rep.probe_p99_ns = p99;
        rep.probe_max_ns = rtt[nrtt - 1]; /* sorted by sxb_quantiles */
    }
    rep.probe_bad = inc->pong_bad;
    if (gethostname(rep.host, sizeof(rep.host) - 1) != 0)
        snprintf(rep.host, sizeof(rep.host), "?");
    free(rtt);
    if (inc->peer_status == SX_OK) {
        sxb_inc_slot_t rslot = {.inc = inc, .buf = (uint8_t *)&rep};
        inc->errors = 0; /* counted in the report; let the report itself go */
        if (sxb_inc_post(inc, SXB_INC_TAG_REPORT, &rslot, sizeof(rep)) != 0 ||
            sxb_inc_wait(inc, &inc->done, inc->posted, "the report's completion") != 0)
            rc = -1;
    }
    sxb_inc_slots_free(slots);
    if (rc == 0 && inc->pong_bad != 0)
        rc = sxb_fail("incast: %llu pongs did not echo their ping",
                      (unsigned long long)inc->pong_bad);
    if (rc == 0 && rep.errors != 0)
        rc = -1;
    return rc;
}

/* Rank 0: counts the interval, then waits for every report. */
static int sxb_inc_receive(sxb_inc_t *inc, double *interval_s_p)
{
    double s = inc->opts->seconds;
    double w = s / 10 < 1.0 ? s / 10 : 1.0;
    unsigned expect = (unsigned)inc->size - 1;
    bool started = false, ended = false;
    uint64_t t_start = 0, t_end = 0;
    uint64_t seen = 0, deadline = 0;

    if (sxb_inc_barrier(inc) != 0)
        return -1;
    uint64_t t0 = sxb_now_ns();
    uint64_t at_start = t0 + (uint64_t)(w * 1e9), at_end = t0 + (uint64_t)((s - w) * 1e9);
    deadline = t0 + (uint64_t)(s * 1e9) + SXB_WAIT_LIMIT_NS;
    while (!ended || inc->reports < expect) {
        if (sxb_inc_poll(inc) != 0)
            return -1;
        uint64_t now = sxb_now_ns();
        if (!started && now >= at_start) {
            /* Taken between progress calls: the interval runs from this
             * pass to the one that ends it, whenever they ran. */
            for (int r = 1; r < inc->size; r++)
                inc->src[r].start_bytes = inc->src[r].bytes;
            t_start = now;
            started = true;
        }
        if (started && !ended && now >= at_end) {
            for (int r = 1; r < inc->size; r++)
                inc->src[r].end_bytes = inc->src[r].bytes;
            t_end = now;
            ended = true;
        }
        /* A hang detector: deliveries and reports must keep coming once
         * the senders should have stopped. */
        uint64_t progress = inc->reports;
        for (int r = 1; r < inc->size; r++)
            progress += inc->src[r].msgs;
        if (progress != seen) {
            seen = progress;
            if (now > t0 + (uint64_t)(s * 1e9))
                deadline = now + SXB_WAIT_LIMIT_NS;
        } else if (sxb_check(inc->ctl, deadline, "the senders' reports") != 0) {
            for (int r = 1; r < inc->size; r++) {
                if (!inc->src[r].reported)
                    sxb_fail("incast: no report from rank %d (%llu messages from it)", r,
                             (unsigned long long)inc->src[r].msgs);
            }
            return -1;
        }
    }
    *interval_s_p = (double)(t_end - t_start) / 1e9;
    /* Pongs of ours still waiting for the prober's ACK. */
    return sxb_inc_wait(inc, &inc->done, inc->posted, "our pongs' completions");
}

/* Rank 0: every report against what arrived. Returns the problems found. */
static uint64_t sxb_inc_audit(sxb_inc_t *inc)
{
    uint64_t bad = inc->verify_errors;

    for (int r = 1; r < inc->size; r++) {
        const sxb_inc_src_t *src = &inc->src[r];
        const sxb_inc_report_t *rep = &src->rep;
        const char *who = r == inc->prober ? "prober" : "sender";
        if (rep->errors != 0) {
            bad++;
            sxb_fail("incast: %s %d (%s): %llu sends failed, the first: %s", who, r, rep->host,
                     (unsigned long long)rep->errors,
                     rep->first_error != 0 ? sx_strerror(rep->first_error) : "(see its log)");
        }
        if (rep->probe_bad != 0) {
            bad++;
            sxb_fail("incast: prober %d: %llu pongs did not echo their ping", r,
                     (unsigned long long)rep->probe_bad);
        }
        if (r == inc->prober)
            continue;
        if (rep->completed != src->msgs || rep->sent != rep->completed) {
            bad++;
            sxb_fail("incast: sender %d (%s): sent %llu messages, %llu completed, rank 0 got "
                     "%llu",
                     r, rep->host, (unsigned long long)rep->sent,
                     (unsigned long long)rep->completed, (unsigned long long)src->msgs);
        }
        if (inc->opts->verify && src->next_seq != src->msgs) {
            bad++;
            sxb_fail("incast: sender %d: %llu messages arrived, but its last seq was %llu (gaps or "
                     "repeats)",
                     r, (unsigned long long)src->msgs, (unsigned long long)src->next_seq - 1);
        }
    }
    uint64_t fails = 0;
    if (sx_stats_value(inc->engine, "chan_failures", &fails) == SX_OK && fails != 0) {
        bad++;
        sxb_fail("incast: rank 0's engine failed %llu channels", (unsigned long long)fails);
    }
    if (inc->verify_errors > SXB_INC_MAX_ERRORS)
        sxb_fail("incast: %llu verification errors in all (the first %u shown)",
                 (unsigned long long)inc->verify_errors, SXB_INC_MAX_ERRORS);
    return bad;
}

static double sxb_inc_num(uint64_t v)
{
    return v == UINT64_MAX ? NAN : (double)v;
}

/* Rank 0: the figures into g_inc (for the JSON object), the records (for
 * --csv) and the table. */
static int sxb_inc_result(sxb_inc_t *inc, double interval_s, bool ok)
{
    sxb_inc_result_t *g = &g_inc;
    int n = inc->size - 1 - (inc->prober > 0);
    double sum = 0, sumsq = 0, bytes = 0;

    *g = (sxb_inc_result_t){.size = inc->msg_size,
                            .seconds = inc->opts->seconds,
                            .interval_s = interval_s,
                            .window = inc->window,
                            .ranks = inc->size,
                            .nsenders = n,
                            .probe = inc->prober > 0,
                            .p50_us = NAN,
                            .p99_us = NAN,
                            .max_us = NAN,
                            .verified = ok && inc->opts->verify};
    g->rank = calloc((size_t)n, sizeof(*g->rank));
    g->host = calloc((size_t)n, sizeof(*g->host));
    g->mbps = calloc((size_t)n, sizeof(*g->mbps));
    g->msgs = calloc((size_t)n, sizeof(*g->msgs));
    g->counters = calloc((size_t)n, sizeof(*g->counters));
    if (g->rank == NULL || g->host == NULL || g->mbps == NULL || g->msgs == NULL ||
        g->counters == NULL)
        return sxb_fail("incast: out of memory for the results");
    for (int k = 0; k < SXB_INC_NCOUNTERS; k++)
        g->have[k] = true;
    int i = 0;
    for (int r = 1; r < inc->size; r++) {
        const sxb_inc_src_t *src = &inc->src[r];
        if (r == inc->prober) {
            g->probe_n = src->rep.probe_n;
            if (src->rep.probe_n > 0) {
                g->p50_us = (double)src->rep.probe_p50_ns / 1e3;
                g->p99_us = (double)src->rep.probe_p99_ns / 1e3;
                g->max_us = (double)src->rep.probe_max_ns / 1e3;
            }
            continue;
        }
        double b = (double)(src->end_bytes - src->start_bytes);
        g->rank[i] = r;
        snprintf(g->host[i], sizeof(g->host[i]), "%s", src->rep.host);
        g->mbps[i] = interval_s > 0 ? b / interval_s / 1e6 : 0;
        g->msgs[i] = src->msgs;
        bytes += b;
        sum += g->mbps[i];
        sumsq += g->mbps[i] * g->mbps[i];
        for (int k = 0; k < SXB_INC_NCOUNTERS; k++) {
            g->counters[i][k] = src->rep.counters[k];
            if (src->rep.counters[k] == UINT64_MAX)
                g->have[k] = false;
            else
                g->sum[k] += src->rep.counters[k];
        }
        i++;
    }
    /* chan_failures: rank 0's and the prober's too; a channel failure
     * anywhere spoils the run. */
    if (sx_stats_value(inc->engine, "rx_ecn_ce", &g->rx_ecn_ce) != SX_OK)
        g->rx_ecn_ce = UINT64_MAX;
    uint64_t v = 0;
    if (sx_stats_value(inc->engine, "chan_failures", &v) == SX_OK)
        g->sum[SXB_INC_CHAN_FAILURES] += v;
    if (inc->prober > 0 && inc->src[inc->prober].rep.counters[SXB_INC_CHAN_FAILURES] != UINT64_MAX)
        g->sum[SXB_INC_CHAN_FAILURES] += inc->src[inc->prober].rep.counters[SXB_INC_CHAN_FAILURES];
    g->goodput = interval_s > 0 ? bytes / interval_s / 1e6 : 0;
    /* Jain's index, (sum x)^2 / (n sum x^2) (Jain, Chiu and Hawe, DEC-TR-301,
     * 1984): 1 when every sender got the same rate, 1/n when one got it all. */
    g->jain = sumsq > 0 ? sum * sum / ((double)n * sumsq) : NAN;
    g->rtx_pct =
        g->have[SXB_INC_DATA_BYTES] && g->have[SXB_INC_RTX_BYTES] && g->sum[SXB_INC_DATA_BYTES] > 0
            ? 100.0 * (double)g->sum[SXB_INC_RTX_BYTES] / (double)g->sum[SXB_INC_DATA_BYTES]
            : NAN;
    g->valid = true;

    for (i = 0; i < n; i++) {
        sxb_record_t rec = sxb_record("incast_sender", NULL, inc->msg_size);
        sxb_metric(&rec, "rank", g->rank[i]);
        sxb_metric(&rec, "mbps", g->mbps[i]);
        sxb_metric(&rec, "msgs", (double)g->msgs[i]);
        sxb_record_add(&rec);
    }
    sxb_record_t rec = sxb_record("incast", NULL, inc->msg_size);
    sxb_metric(&rec, "seconds", g->seconds);
    sxb_metric(&rec, "window", g->window);
    sxb_metric(&rec, "senders", n);
    sxb_metric(&rec, "goodput_mbps", g->goodput);
    sxb_metric(&rec, "jain", g->jain);
    sxb_metric(&rec, "rtx_pct", g->rtx_pct);
    for (int k = 0; k < SXB_INC_NCOUNTERS; k++)
        sxb_metric(&rec, sxb_inc_counter_names[k], g->have[k] ? (double)g->sum[k] : NAN);
    sxb_metric(&rec, "rx_ecn_ce", g->rx_ecn_ce != UINT64_MAX ? (double)g->rx_ecn_ce : NAN);
    sxb_metric(&rec, "probe_p50_us", g->p50_us);
    sxb_metric(&rec, "probe_p99_us", g->p99_us);
    sxb_metric(&rec, "probe_max_us", g->max_us);
    sxb_metric(&rec, "verified", g->verified);
    sxb_record_add(&rec);

    if (!sxb_human(inc->ctl, inc->opts))
        return 0;
    const char *cc = getenv("SX_CONGESTION");
    printf("\n# incast: %d sender%s -> rank 0, %zu-byte messages, window %u, %g s; MB/s = 10^6 "
           "bytes/s\n# delivered at rank 0 over the middle %.2f s; SX_CONGESTION=%s; "
           "verify %s\n",
           n, n == 1 ? "" : "s", inc->msg_size, inc->window, g->seconds, interval_s,
           cc != NULL && *cc ? cc : "auto", inc->opts->verify ? "on" : "off");
    printf("%6s %-24s %10s %10s\n", "rank", "host", "MB_per_s", "messages");
    for (i = 0; i < n; i++)
        printf("%6d %-24s %10.1f %10llu\n", g->rank[i], g->host[i], g->mbps[i],
               (unsigned long long)g->msgs[i]);
    printf("goodput %.1f MB/s, Jain %.3f, retransmitted %.3f %% (%llu of %llu bytes), "
           "rtx_timeout %.0f, chan_failures %llu\n",
           g->goodput, g->jain, g->rtx_pct, (unsigned long long)g->sum[SXB_INC_RTX_BYTES],
           (unsigned long long)g->sum[SXB_INC_DATA_BYTES],
           sxb_inc_num(g->have[2] ? g->sum[2] : UINT64_MAX),
           (unsigned long long)g->sum[SXB_INC_CHAN_FAILURES]);
    printf("cc (summed over the senders): loss_cuts %.0f, delay_cuts %.0f, collapses %.0f "
           "(undone %.0f), window_stalls %.0f, pace_waits %.0f, ecn_cuts %.0f; CE-marked "
           "datagrams at rank 0 %.0f; duplicates reported to the senders %.0f\n",
           sxb_inc_num(g->have[3] ? g->sum[3] : UINT64_MAX),
           sxb_inc_num(g->have[4] ? g->sum[4] : UINT64_MAX),
           sxb_inc_num(g->have[5] ? g->sum[5] : UINT64_MAX),
           sxb_inc_num(g->have[10] ? g->sum[10] : UINT64_MAX),
           sxb_inc_num(g->have[6] ? g->sum[6] : UINT64_MAX),
           sxb_inc_num(g->have[7] ? g->sum[7] : UINT64_MAX),
           sxb_inc_num(g->have[9] ? g->sum[9] : UINT64_MAX), sxb_inc_num(g->rx_ecn_ce),
           sxb_inc_num(g->have[11] ? g->sum[11] : UINT64_MAX));
    if (g->probe)
        printf("probe (rank %d <-> rank 0, %u B round trips, %llu of them): p50 %.1f us, p99 "
               "%.1f us, max %.1f us\n",
               inc->prober, SXB_INC_PROBE_SIZE, (unsigned long long)g->probe_n, g->p50_us,
               g->p99_us, g->max_us);
    if (inc->opts->verify)
        printf("verify: %s\n", ok ? "every byte and sequence number as sent" : "FAILED");
    fflush(stdout);
    return 0;
}

int sxb_bench_incast(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    sxb_inc_t inc = {
        .ctl = ctl,
        .opts = opts,
        .msg_size = opts->size_set ? opts->size : 65536,
        .window = opts->window_set ? opts->window : 8,
        .prober = -1,
    };
    double interval_s = 0;

    if (sxb_inc_open(&inc) != 0)
        return -1;
    int rc = 0;
    if (inc.size < 2 || (opts->probe && inc.size < 3)) {
        if (inc.rank == 0)
            sxb_fail("incast%s needs %d or more ranks; the job has %d",
                     opts->probe ? " --probe" : "", opts->probe ? 3 : 2, inc.size);
        rc = -1;
        goto out;
    }
    if (opts->probe) {
        inc.prober = inc.size - 1;
        inc.probing = inc.rank == inc.prober;
    }
    if (inc.rank != 0) {
        rc = sxb_inc_send_side(&inc);
    } else {
        inc.src = calloc((size_t)inc.size, sizeof(*inc.src));
        if (inc.src == NULL) {
            rc = sxb_fail("incast: out of memory");
            goto out;
        }
        rc = sxb_inc_receive(&inc, &interval_s);
        /* A rank failed or went silent: leave now, without the barrier it
         * may never reach; the launcher stops the job on our exit. */
        if (rc != 0)
            goto out;
        {
            bool ok = sxb_inc_audit(&inc) == 0;
            rc = sxb_inc_result(&inc, interval_s, ok);
            if (!ok)
                rc = -1;
        }
    }
    /* The last barrier: every rank's sends have completed, so none leaves
     * a peer waiting for its ACKs. A failed sender still comes (after
     * reporting), so that rank 0 can print what went wrong. */
    if (sxb_inc_barrier(&inc) != 0)
        rc = -1;
out:
    sx_engine_destroy(inc.engine);
    free(inc.src);
    return rc;
}

void sxb_incast_json(FILE *out)
{
    const sxb_inc_result_t *g = &g_inc;
    const char *cc = getenv("SX_CONGESTION"), *tl = getenv("SX_TRANSPORTS");

    if (!g->valid)
        return;
    fprintf(out,
            "{\"cmd\":\"incast\",\"size\":%zu,\"seconds\":%g,\"window\":%u,\"ranks\":%d,"
            "\"interval_s\":%.3f,\"congestion\":\"%s\",\"transport\":\"%s\",\"senders\":[",
            g->size, g->seconds, g->window, g->ranks, g->interval_s,
            cc != NULL && *cc ? cc : "auto", tl != NULL && *tl ? tl : "udp");
    for (int i = 0; i < g->nsenders; i++) {
        fprintf(out, "%s{\"rank\":%d,\"host\":\"", i ? "," : "", g->rank[i]);
        for (const char *h = g->host[i]; *h; h++) /* host names need no escapes but these */
            fprintf(out, *h == '"' || *h == '\\' ? "\\%c" : "%c", *h);
        fprintf(out, "\",\"mbps\":%.1f,\"msgs\":%llu", g->mbps[i], (unsigned long long)g->msgs[i]);
        /* The sender's own congestion counters: which one a window cut,
         * collapsed or timed out, when the shares differ. */
        for (int k = 0; k < SXB_INC_NCOUNTERS; k++) {
            if (strncmp(sxb_inc_counter_names[k], "cc_", 3) != 0 &&
                strcmp(sxb_inc_counter_names[k], "rtx_timeout") != 0)
                continue;
            if (g->counters[i][k] == UINT64_MAX)
                fprintf(out, ",\"%s\":null", sxb_inc_counter_names[k]);
            else
                fprintf(out, ",\"%s\":%llu", sxb_inc_counter_names[k],
                        (unsigned long long)g->counters[i][k]);
        }
        fputc('}', out);
    }
    fprintf(out, "],\"goodput_mbps\":%.1f,\"jain\":", g->goodput);
    fprintf(out, isfinite(g->jain) ? "%.4f" : "null", g->jain);
    fputs(",\"rtx_pct\":", out);
    fprintf(out, isfinite(g->rtx_pct) ? "%.4f" : "null", g->rtx_pct);
    for (int k = 0; k < SXB_INC_NCOUNTERS; k++) {
        if (g->have[k])
            fprintf(out, ",\"%s\":%llu", sxb_inc_counter_names[k], (unsigned long long)g->sum[k]);
        else
            fprintf(out, ",\"%s\":null", sxb_inc_counter_names[k]);
    }
    if (g->rx_ecn_ce != UINT64_MAX)
        fprintf(out, ",\"rx_ecn_ce\":%llu", (unsigned long long)g->rx_ecn_ce);
    else
        fputs(",\"rx_ecn_ce\":null", out);
    const double probe[3] = {g->p50_us, g->p99_us, g->max_us};
    static const char *const keys[3] = {"probe_p50_us", "probe_p99_us", "probe_max_us"};
    for (int k = 0; k < 3; k++) {
        fprintf(out, ",\"%s\":", keys[k]);
        fprintf(out, g->probe && isfinite(probe[k]) ? "%.1f" : "null", probe[k]);
    }
    fprintf(out, ",\"verified\":%s}\n", g->verified ? "true" : "false");
    fflush(out);
}
